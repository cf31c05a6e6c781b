/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 6 of 6 (engine_tmpl.h includes it, once per family): ingress
 * translation (rnat_ingress, the uplink's ingress program): replies translated
 * back, later fragments, ICMP errors coming in, flows begun outside
 * (inbound_track) and natFiltering's admitted remotes (open_ingress). Rewrites
 * the packet (rewrite.h, icmp_err.h); makes only inbound halves and admitted pairs.
 */

/* Ingress, a later fragment of a reply: follow its first fragment, or leave it to the host. */
/* rnat_fragment_v4, rnat_fragment_v6 */
static __noinline int NAT_FN(rnat_fragment)(struct __sk_buff *skb, const FLOW_T *f)
{
	struct frag_ports *p = NAT_FN(frag_lookup)(f);
	ENTRY_T *rev;

	if (!p)
		return MASQ_PASS;
	KEY_T rk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = p->sport, .dport = p->dport, .proto = p->proto,
	};
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev)
		return MASQ_PASS;
	if (REWRITE_ADDR(skb, f, false, &rev->addr))
		return drop_inbound(skb, DROP_CSUM);
	count_add(CNT_FRAGS, 1);
	count_add(CNT_RNAT_PKTS, 1);
	count_add(CNT_RNAT_BYTES, f->len);
	return MASQ_PASS;
}

/*
 * An ICMP error about a packet we masqueraded (fragmentation needed / packet too
 * big, TTL exceeded, unreachable...), from the remote or a router on the way:
 * the quoted packet is ours as it left, so its reversed tuple is the reverse key.
 */
/* icmp_err_ingress_v4, icmp_err_ingress_v6 */
static __noinline int NAT_FN(icmp_err_ingress)(struct __sk_buff *skb, const FLOW_T *f)
{
	INNER_T in;
	ENTRY_T *rev;

	if (PARSE_INNER(skb, f, &in) || !ADDR_EQ(&in.saddr, &f->daddr))
		return MASQ_PASS;
	KEY_T rk = {
		.saddr = in.daddr, .daddr = in.saddr,
		.sport = in.dport, .dport = in.sport, .proto = in.proto,
	};
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev)
		return MASQ_PASS; /* about the host's own traffic */
	if (ICMP_ERR_REWRITE(skb, f, &in, false, true, &rev->addr, rev->port))
		return drop_inbound(skb, DROP_CSUM);
	count_add(CNT_ICMP_ERR_IN, 1);
	return MASQ_PASS;
}

/*
 * inbound_track - a packet that came in on an uplink and answers no pair of
 * ours, addressed to someone else than the node: if its reply would be
 * masqueraded (its destination is a registered pod with natOutgoing, or a rule's
 * source, towards its source), it belongs to a flow begun outside. Its state (a
 * NAT_F_INBOUND forward half) is made on the first packet and refreshed by every
 * later one. Only packets that may open a flow make one: TCP (any segment, as
 * netfilter's loose tracking picks up a connection in the middle), UDP, echo
 * requests. The packet itself always goes on untouched.
 */
/* inbound_track_v4, inbound_track_v6 */
static __noinline void NAT_FN(inbound_track)(struct __sk_buff *skb, const struct uplink_info *up,
					     const FLOW_T *f, __u64 now)
{
	KEY_T fk = {
		.saddr = f->daddr, .daddr = f->saddr,
		.sport = f->dport, .dport = f->sport, .proto = f->proto,
	};
	ENTRY_T *e = NAT_FN(fwd_get)(&fk);
	DEC_T d = {};
	void *shard;
	long err;

	if (e) {
		if (e->flags & NAT_F_INBOUND)
			NAT_FN(nat_touch)(skb, e, f, now);
		return;
	}
	if (f->proto == ICMP_PROTO && f->icmp_type != ECHO_REQUEST)
		return;
	DECIDE_REPLY(skb->ifindex, up, f, &d);
	if (d.verdict != VERDICT_POD && d.verdict != VERDICT_RULE)
		return;	/* not ours, or an unregistered pod's: its reply would be dropped anyway */
	ENTRY_T n = {
		.addr = f->daddr, .port = f->dport,
		.flags = NAT_F_INBOUND | (d.verdict == VERDICT_RULE ? NAT_F_BY_RULE : 0),
		.ifindex = skb->ifindex, .rule_id = d.rule_id,
		.created_ns = bpf_ktime_get_ns(), .last_seen_ns = now,
	};
	shard = NAT_FWD_SHARD(&MAP_FWD, &fk, SHARD_FN);
	if (!shard)
		return;
	err = bpf_map_update_elem(shard, &fk, &n, BPF_NOEXIST);
	if (err) {
		/* EEXIST: another CPU made it (or the pod's own flow) meanwhile; E2BIG: full,
		 * and the reply, needing a pair of its own, is refused (DROP_NAT_FULL). */
		if (err == -E2BIG)
			count_add(CNT_INBOUND_UNTRACKED, 1);
		return;
	}
	count_add(CNT_INBOUND_CREATED, 1);
	nat_gc_ensure(NAT_IS_V6, false);
	e = bpf_map_lookup_elem(shard, &fk);
	if (e)
		NAT_FN(nat_touch)(skb, e, f, now);
}

/*
 * open_ingress - a packet that answers no pair, to a mapping whose natFiltering
 * lets it in (nat*_open: endpoint-independent, or address-dependent with a permit
 * for its source), while the mapping is active: a pair of its own on the
 * mapping's port (reverse half first, BPF_NOEXIST, as every pair), then it is
 * translated to the pod endpoint. NAT_NOT_OURS when no open mapping admits it.
 * TCP and UDP only: ICMP echo ids are not opened.
 */
/* open_ingress_v4, open_ingress_v6 */
static __noinline int NAT_FN(open_ingress)(struct __sk_buff *skb, const FLOW_T *f,
					   const struct node_config *cfg, __u64 now)
{
	EP_T k = { .addr = f->daddr, .port = f->dport, .proto = f->proto };
	__u64 timeout = nat_timeout_ns(cfg, f->proto, 0);
	OPEN_T *o;
	ENTRY_T *rev;
	void *shard;

	if (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP)
		return NAT_NOT_OURS;
	o = bpf_map_lookup_elem(&MAP_OPEN, &k);
	if (!o || (now > o->last_seen_ns && now - o->last_seen_ns > timeout))
		return NAT_NOT_OURS;
	if (!(o->filter & NAT_FILTER_EI)) {
		PERMITKEY_T pk = { .remote = f->saddr, .addr = f->daddr, .port = f->dport, .proto = f->proto };
		PERMIT_T *pv = bpf_map_lookup_elem(&MAP_PERMIT, &pk);

		if (!pv || !ADDR_EQ(&pv->pod, &o->addr) ||
		    (now > pv->last_seen_ns && now - pv->last_seen_ns > timeout))
			return NAT_NOT_OURS;
	}
	ENTRY_T e = {
		.addr = o->addr, .port = o->port, .flags = NAT_F_OPEN | o->flags,
		.ifindex = o->ifindex, .rule_id = o->rule_id,
		.created_ns = bpf_ktime_get_ns(), .last_seen_ns = now,
	};
	KEY_T rk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};
	if (bpf_map_update_elem(&MAP_REV, &rk, &e, BPF_NOEXIST))
		return NAT_NOT_OURS; /* full, or made meanwhile by another CPU */
	/* The forward half: {pod, remote, pod port, remote port} -> the mapping. */
	KEY_T fk = {
		.saddr = o->addr, .daddr = f->saddr,
		.sport = o->port, .dport = f->sport, .proto = f->proto,
	};
	e.addr = f->daddr;
	e.port = f->dport;
	shard = NAT_FWD_SHARD(&MAP_FWD, &fk, SHARD_FN);
	if (!shard || bpf_map_update_elem(shard, &fk, &e, BPF_NOEXIST)) {
		/* The pod endpoint has a flow to this remote endpoint already (on another port). */
		bpf_map_delete_elem(&MAP_REV, &rk);
		return NAT_NOT_OURS;
	}
	count_add(CNT_NAT_CREATED, 1);
	count_add(CNT_FILTER_ADMITTED, 1);
	NAT_FN(event_made)(&fk, &e, &rk, 0);
	nat_gc_ensure(NAT_IS_V6, false);
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev)
		return MASQ_PASS;
	if (NAT_FN(nat_touch)(skb, rev, f, now))
		NAT_FN(rnat_sync_fwd)(skb, f, rev, now);
	if (f->frag == FRAG_FIRST)
		NAT_FN(frag_remember)(f);
	if (REWRITE(skb, f, false, &rev->addr, rev->port))
		return drop_inbound(skb, DROP_CSUM);
	count_add(CNT_RNAT_PKTS, 1);
	count_add(CNT_RNAT_BYTES, f->len);
	return MASQ_PASS;
}

/* rnat_ingress_v4, rnat_ingress_v6 */
static __noinline int NAT_FN(rnat_ingress)(struct __sk_buff *skb, const struct uplink_info *up)
{
	ENTRY_T *rev;
	FLOW_T f;
	__u64 now;

	if (PARSE(skb, uplink_l3_off(up), &f))
		return MASQ_PASS;
	if (f.l4 == L4_FRAGMENT)
		return NAT_FN(rnat_fragment)(skb, &f);
	if (f.l4 == L4_ICMP_ERROR)
		return NAT_FN(icmp_err_ingress)(skb, &f);
	if (f.l4 != L4_OK)
		return MASQ_PASS;

	KEY_T rk = {
		.saddr = f.saddr, .daddr = f.daddr,
		.sport = f.sport, .dport = f.dport, .proto = f.proto,
	};
	/* No entry: the host's own traffic, unsolicited, or a flow begun outside
	 * (towards a pod: tracked, never translated). */
	rev = bpf_map_lookup_elem(&MAP_REV, &rk);
	if (!rev) {
		/* The host's own traffic (the common case) reads neither clock nor more maps
		 * unless some mapping is open (natFiltering). */
		__u32 zero = 0;
		const struct node_config *cfg = bpf_map_lookup_elem(&node_config, &zero);

		if (cfg && (cfg->flags & MASQ_F_OPEN_MAPPINGS)) {
			int ret = NAT_FN(open_ingress)(skb, &f, cfg, bpf_ktime_get_coarse_ns());

			if (ret != NAT_NOT_OURS)
				return ret;
		}
		if (!(UPLINK_HAS(up) && ADDR_EQ(&f.daddr, UPLINK_ADDR(up))))
			NAT_FN(inbound_track)(skb, up, &f, bpf_ktime_get_coarse_ns());
		return MASQ_PASS;
	}
	now = bpf_ktime_get_coarse_ns(); /* last_seen needs seconds, not ns: the cheap clock */

	if (NAT_FN(nat_touch)(skb, rev, &f, now))
		NAT_FN(rnat_sync_fwd)(skb, &f, rev, now);
	if ((rev->flags & NAT_F_HOST) && rev->port == f.dport)
		return MASQ_PASS; /* a host flow on its own port (an echo id): nothing to translate */
	if (f.frag == FRAG_FIRST)
		NAT_FN(frag_remember)(&f);
	if (REWRITE(skb, &f, false, &rev->addr, rev->port))
		return drop_inbound(skb, DROP_CSUM);
	count_add(CNT_RNAT_PKTS, 1);
	count_add(CNT_RNAT_BYTES, f.len);
#ifdef FP_REPLY
	/* A flow the fast path started: its replies may skip the stack too. */
	if (rev->flags & NAT_F_FAST)
		return FP_REPLY(skb, up, &f, rev->addr);
#endif
	return MASQ_PASS;
}
