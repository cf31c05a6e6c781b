/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 0 (engine_tmpl.h includes it, once per family, before the
 * others): a pair's event for a reader (masq_abi_events.h, ../events.h): made,
 * ended, or a new flow refused. It asks the gate (events_on) first, and so do its
 * callers outside the port search (an inline lookup, no call, when no reader
 * holds a lease). Never touches the packet.
 */

/* event_pair's first argument: the kind, the reason and the policy. */
#define EV_WHAT(kind, reason, policy) ((__u32)(kind) | (__u32)(reason) << 8 | (__u32)(policy) << 16)

/*
 * event_pair - an event about the pair (or refused flow) whose forward key is
 * @fk and whose node address and port are @rk's daddr and dport (a refusal's
 * node port means nothing: 0), into each ring whose lease runs (none: nothing
 * but the gate, events_on); @what is EV_WHAT(kind, reason, policy). @fwd and
 * @rev, the halves (either may be NULL), give its time, uplink, flags and each
 * direction's packets and bytes. A global function: the verifier checks it
 * once, not again at each of its callers' states (the port search's are many);
 * its pointers may be NULL as far as it knows. Returns 0.
 */
/* event_pair_v4, event_pair_v6 */
__attribute__((noinline)) int NAT_FN(event_pair)(__u32 what, const KEY_T *fk, const ENTRY_T *fwd,
						 const ENTRY_T *rev, const KEY_T *rk)
{
	__u8 kind = what & 0xff;
	struct masq_event *e = NULL;
	__u32 on = events_on();

	if (!on || !fk || !rk)
		return 0;
	on = event_reserve(on, kind, &e);
	if (!e)
		return 0;
	__builtin_memcpy(&e->pod, &fk->saddr, sizeof(ADDR_T));
	__builtin_memcpy(&e->remote, &fk->daddr, sizeof(ADDR_T));
	__builtin_memcpy(&e->node, &rk->daddr, sizeof(ADDR_T));
	e->pod_port = fk->sport;
	e->remote_port = fk->dport;
	if (kind == EV_PAIR_MADE || kind == EV_PAIR_ENDED)
		e->node_port = rk->dport;
	e->proto = fk->proto;
	e->v6 = NAT_IS_V6;
	e->reason = (what >> 8) & 0xff;
	e->policy = (what >> 16) & 0xff;
	if (fwd) {
		e->start_ns = fwd->created_ns;
		e->ifindex = fwd->ifindex;
		e->nat_flags = fwd->flags;
		e->packets_out = fwd->packets;
		e->bytes_out = fwd->bytes;
	}
	if (rev) {
		e->start_ns = rev->created_ns & ~NAT_GEN_TAKEN; /* claimed by the sweep by now */
		e->ifindex = rev->ifindex;
		e->nat_flags |= rev->flags;
		e->packets_in = rev->packets;
		e->bytes_in = rev->bytes;
	}
	event_send(e, on);
	return 0;
}
