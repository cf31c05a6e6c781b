/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Events for a reader (masq_abi_events.h): the two rings, their leases, and the
 * gate every event point asks first (events_on). The per-family pair events are
 * filled by the NAT engine (nat/event_tmpl.h); drops here, sent by drop.h.
 */
#ifndef MASQ_EVENTS_H
#define MASQ_EVENTS_H

#include "maps.h"

#define EVENTS_RING(name, bytes)						\
	struct {								\
		__uint(type, BPF_MAP_TYPE_RINGBUF);				\
		__uint(max_entries, bytes);					\
		__uint(pinning, LIBBPF_PIN_BY_NAME);				\
	} name SEC(".maps")

EVENTS_RING(events_log, EVENTS_LOG_RING_BYTES);   /* the log must not lose: 8x the live ring */
EVENTS_RING(events_live, EVENTS_LIVE_RING_BYTES);
/* Mapped by its readers (bpf/events.rs Leases): atomic stores, no read-modify-write of the whole value. */
MAP_PINNED(events_ctl, BPF_MAP_TYPE_ARRAY, 1, __u32, struct events_ctl, MAP_FLAGS(BPF_F_MMAPABLE));
/*
 * Not pinned: one program run's scratch. The port search notes a pair it takes
 * over here (the deepest call chain has no stack for an event's call), and the
 * new flow's pair tells it once made (nat/new_pair_tmpl.h event_taken_send).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct masq_event);
} events_scratch SEC(".maps");

/* Key 0 of an array map, in .rodata: a lookup with it needs no stack slot. */
static const __u32 events_zero_key = 0;

/* events_on's answer: the rings whose lease runs */
#define EV_ON_LOG  1U
#define EV_ON_LIVE 2U

/*
 * events_on - the rings an event goes to now (EV_ON_*), 0 when no reader holds a
 * lease: one array lookup and a compare (no clock read) when both leases were
 * cleared, the clock too when one was left to run out.
 */
static __always_inline __u32 events_on(void)
{
#ifdef MASQ_NO_EVENTS
	/* A measuring build only (EBPF_MASQ_BPF_CFLAGS=-DMASQ_NO_EVENTS, build.rs):
	 * the events compiled out, to weigh the gate against nothing. */
	return 0;
#endif
	struct events_ctl *c = bpf_map_lookup_elem(&events_ctl, &events_zero_key);
	__u32 on = 0;
	__u64 now;

	if (!c || !(c->log_until | c->live_until))
		return 0;
	now = bpf_ktime_get_ns();
	if (now < c->log_until)
		on |= EV_ON_LOG;
	if (now < c->live_until)
		on |= EV_ON_LIVE;
	return on;
}

/*
 * event_reserve - a zeroed record, stamped with its time and @kind, in the first
 * ring @on names (events_log before events_live); NULL when every ring it names
 * is full (each loss counted, CNT_EVENTS_LOST). Returns through @e; its answer is
 * the rings still owed the event, the one holding the record first (the stack
 * of the port search's callees has no room for an address taken).
 */
static __always_inline __u32 event_reserve(__u32 on, __u8 kind, struct masq_event **e)
{
	struct masq_event *r = NULL;

	if (on & EV_ON_LOG) {
		r = bpf_ringbuf_reserve(&events_log, sizeof(*r), 0);
		if (!r) {
			count_add(CNT_EVENTS_LOST, 1);
			on &= ~EV_ON_LOG;
		}
	}
	if (!r && (on & EV_ON_LIVE)) {
		r = bpf_ringbuf_reserve(&events_live, sizeof(*r), 0);
		if (!r)
			count_add(CNT_EVENTS_LOST, 1);
	}
	*e = r;
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->ktime_ns = bpf_ktime_get_ns();
	r->kind = kind;
	return on;
}

/*
 * event_send - submit @e (from event_reserve, filled), and a copy of it into
 * events_live when @on still names both rings (@e is then events_log's). Never
 * a wakeup (BPF_RB_NO_WAKEUP): a reader that sleeps in poll() would have one per
 * event (an irq_work each, ~10x a new flow's cost); readers look every 100-200 ms
 * or so instead (plugin/src/bpf/events.rs).
 */
static __always_inline void event_send(struct masq_event *e, __u32 on)
{
	struct masq_event *c;

	if ((on & (EV_ON_LOG | EV_ON_LIVE)) == (EV_ON_LOG | EV_ON_LIVE)) {
		c = bpf_ringbuf_reserve(&events_live, sizeof(*c), 0);
		if (c) {
			__builtin_memcpy(c, e, sizeof(*c));
			bpf_ringbuf_submit(c, BPF_RB_NO_WAKEUP);
		} else {
			count_add(CNT_EVENTS_LOST, 1);
		}
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/*
 * event_copy - the event @s (noted earlier in this run: events_scratch) into each
 * ring whose lease runs, stamped now. A global function, verified once.
 * Returns 0.
 */
__attribute__((noinline)) int event_copy(const struct masq_event *s)
{
	struct masq_event *e = NULL;
	__u32 on = events_on();

	if (!on || !s)
		return 0;
	on = event_reserve(on, s->kind, &e);
	if (!e)
		return 0;
	__builtin_memcpy(e, s, sizeof(*e));
	e->ktime_ns = bpf_ktime_get_ns();
	event_send(e, on);
	return 0;
}

/*
 * event_drop_tuple - what @e can tell of the dropped packet @skb: its protocol,
 * addresses and ports (an ICMP echo's id) as they were when it was dropped, read
 * from its network header whatever the link (Ethernet or L3). A packet from a pod
 * (@in 0) gives its source as the pod's endpoint and its destination as the
 * remote's; one from outside (@in 1, EV_DROP_F_IN) its source as the remote's and
 * its destination as the node's (or the pod's, when it was already translated
 * back). What cannot be read (a truncated header, a later fragment's ports) stays 0.
 */
static __always_inline void event_drop_tuple(struct __sk_buff *skb, struct masq_event *e, __u32 in)
{
	__u8 src[16] = {}, dst[16] = {};
	__be16 ports[2] = {}, id;
	__u32 l4 = 0;
	__u8 vhl;

	if (bpf_skb_load_bytes_relative(skb, 0, &vhl, 1, BPF_HDR_START_NET))
		return;
	if ((vhl >> 4) == 4) {
		struct iphdr ip;

		if (bpf_skb_load_bytes_relative(skb, 0, &ip, sizeof(ip), BPF_HDR_START_NET))
			return;
		__builtin_memcpy(src, &ip.saddr, 4);
		__builtin_memcpy(dst, &ip.daddr, 4);
		e->proto = ip.protocol;
		if (!(ip.frag_off & bpf_htons(IP_OFFSET)))
			l4 = ip.ihl * 4;
	} else if ((vhl >> 4) == 6) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes_relative(skb, 0, &ip6, sizeof(ip6), BPF_HDR_START_NET))
			return;
		__builtin_memcpy(src, &ip6.saddr, 16);
		__builtin_memcpy(dst, &ip6.daddr, 16);
		e->proto = ip6.nexthdr;
		e->v6 = 1;
		l4 = sizeof(ip6);
	} else {
		return;
	}
	if (l4 && (e->proto == IPPROTO_TCP || e->proto == IPPROTO_UDP)) {
		if (bpf_skb_load_bytes_relative(skb, l4 & 0x3ff, ports, sizeof(ports), BPF_HDR_START_NET))
			ports[0] = ports[1] = 0;
	} else if (l4 && (e->proto == IPPROTO_ICMP || e->proto == IPPROTO_ICMPV6)) {
		__u8 icmp[6];

		/* an echo request's id is its port, the pod's (request out) or the node's (reply in) */
		if (!bpf_skb_load_bytes_relative(skb, l4 & 0x3ff, icmp, sizeof(icmp), BPF_HDR_START_NET) &&
		    (icmp[0] == 8 || icmp[0] == 0 || icmp[0] == 128 || icmp[0] == 129)) {
			__builtin_memcpy(&id, icmp + 4, sizeof(id));
			if (in)
				ports[1] = id;
			else
				ports[0] = id;
		}
	}
	if (in) {
		__builtin_memcpy(&e->remote, src, 16);
		__builtin_memcpy(&e->node, dst, 16);
		e->remote_port = ports[0];
		e->node_port = ports[1];
		e->nat_flags = EV_DROP_F_IN;
	} else {
		__builtin_memcpy(&e->pod, src, 16);
		__builtin_memcpy(&e->remote, dst, 16);
		e->pod_port = ports[0];
		e->remote_port = ports[1];
	}
}

/*
 * event_drop - a packet @skb dropped for @reason, into each ring whose lease
 * runs: the reason, the hook's interface (a pod's veth names the pod whatever
 * source it spoofed) and the packet's tuple (event_drop_tuple; @in: it came from
 * outside). A global function, verified once whatever its callers. Returns 0.
 */
__attribute__((noinline)) int event_drop(struct __sk_buff *skb, __u32 reason, __u32 in)
{
	struct masq_event *e = NULL;
	__u32 on = events_on();

	if (on)
		on = event_reserve(on, EV_DROP, &e);
	if (!e)
		return 0;
	e->reason = reason;
	e->ifindex = skb->ifindex;
	event_drop_tuple(skb, e, in);
	event_send(e, on);
	return 0;
}

#endif /* MASQ_EVENTS_H */
