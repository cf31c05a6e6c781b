/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT engine, part 5 of 6 (engine_tmpl.h includes it, once per family): egress
 * translation (snat_egress, the uplink's egress program): pod flows, later
 * fragments, ICMP errors leaving, the host's own flows (host_egress). Rewrites
 * the packet (rewrite.h, icmp_err.h); new pairs come from part 2 (snat_flow_entry).
 */

/* rule_account_v4, rule_account_v6 */
static __always_inline void NAT_FN(rule_account)(__u32 rule_id, __u32 len)
{
	struct rule_stats *rs = bpf_map_lookup_elem(&rule_stats, &rule_id);

	if (rs) {
		rs->packets += 1;
		rs->bytes += len;
	}
}

/* Egress, a later fragment: translate its address like its first fragment's. */
/* snat_fragment_v4, snat_fragment_v6 */
static __noinline int NAT_FN(snat_fragment)(struct __sk_buff *skb, const struct uplink_info *up,
						 const FLOW_T *f)
{
	struct frag_ports *p = NAT_FN(frag_lookup)(f);
	DEC_T d = {};

	if (p) {
		KEY_T fk = {
			.saddr = f->saddr, .daddr = f->daddr,
			.sport = p->sport, .dport = p->dport, .proto = p->proto,
		};
		ENTRY_T *fwd = NAT_FN(fwd_get)(&fk);

		if (fwd && (fwd->flags & NAT_F_INBOUND)) {
			count_add(CNT_INBOUND_PKTS, 1);
			return MASQ_PASS;
		}
		if (fwd) {
			if (REWRITE_ADDR(skb, f, true, &fwd->addr))
				return drop_with(skb, DROP_CSUM);
			if (fwd->flags & NAT_F_BY_RULE)
				NAT_FN(rule_account)(fwd->rule_id, f->len);
			count_add(CNT_FRAGS, 1);
			count_add(CNT_SNAT_PKTS, 1);
			count_add(CNT_SNAT_BYTES, f->len);
			return MASQ_PASS;
		}
	}
	/* Unknown datagram: never let it leave with an address we would have masqueraded. */
	DECIDE(skb->ifindex, up, f, &d);
	if (d.verdict == VERDICT_NONE)
		return MASQ_PASS;
	return drop_with(skb, d.verdict == VERDICT_UNREGISTERED ? DROP_UNREGISTERED_POD : DROP_FRAG_NO_STATE);
}

/*
 * An ICMP error leaving about a reply we translated towards a pod: sent by the
 * pod itself (port unreachable...) or by the node while forwarding the reply
 * (fragmentation needed towards a smaller-MTU pod or tunnel link, TTL...). The
 * quoted packet is the reply as the pod would see it, so its reversed tuple is
 * the flow's forward key; the remote must see its own packet quoted back.
 * The outer source is translated only when it is the pod's.
 * NAT_NOT_OURS when it is about no masqueraded flow.
 * A global function, checked once: 6.1's verifier walked it again in each caller state (over 1M insns).
 */
/* icmp_err_egress_v4, icmp_err_egress_v6 */
__attribute__((noinline)) int NAT_FN(icmp_err_egress)(struct __sk_buff *skb, const FLOW_T *f)
{
	INNER_T in;
	ENTRY_T *fwd;

	if (!skb || !f)
		return NAT_NOT_OURS;
	if (PARSE_INNER(skb, f, &in))
		return NAT_NOT_OURS;
	KEY_T fk = {
		.saddr = in.daddr, .daddr = in.saddr,
		.sport = in.dport, .dport = in.sport, .proto = in.proto,
	};
	fwd = NAT_FN(fwd_get)(&fk);
	if (!fwd)
		return NAT_NOT_OURS;
	if (fwd->flags & NAT_F_INBOUND)
		return MASQ_PASS; /* about a flow begun outside: nothing was translated */
	if (ICMP_ERR_REWRITE(skb, f, &in, true, ADDR_EQ(&in.daddr, &f->saddr), &fwd->addr, fwd->port))
		return drop_with(skb, DROP_CSUM);
	count_add(CNT_ICMP_ERR_OUT, 1);
	return MASQ_PASS;
}

/*
 * host_egress - the host's own packet, leaving with the masquerade address. The
 * port space is the host's too, so its flows are tracked where needed, as
 * netfilter's null binding does: a host flow whose tuple is already a pod's pair
 * (a pod took it first; the host's connect() cannot know) gets a pair of its own
 * on another port (NAT_F_HOST), and its replies are translated back
 * (rnat_ingress), so nobody's replies are misdelivered. A host socket that
 * exists first is seen by the pod's claim instead (host_holds). Echo requests
 * always get a pair (their own id when free): no socket lookup finds a ping id.
 * Everything else passes untouched, at the cost of one reverse lookup for a
 * UDP datagram or a TCP SYN, and one forward lookup while host pairs exist.
 * NAT_HOST_NEW: the flow needs a pair (snat_egress makes it, at the one call of
 * snat_flow_entry, so the deepest call chain stays within the BPF stack).
 */
/* host_egress_v4, host_egress_v6 */
static __noinline int NAT_FN(host_egress)(struct __sk_buff *skb, const FLOW_T *f)
{
	ENTRY_T *fwd;
	__u64 now;

	const struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &nat_zero_key);

	if (f->l4 != L4_OK)
		return MASQ_PASS; /* a later fragment: the address, all a host pair could change, stays */
	KEY_T fk = {
		.saddr = f->saddr, .daddr = f->daddr,
		.sport = f->sport, .dport = f->dport, .proto = f->proto,
	};
	/* Its own pair, if host pairs may exist at all (nat_gc.hosts). */
	fwd = !gc || gc->hosts ? NAT_FN(fwd_get)(&fk) : NULL;
	if (fwd) {
		int sync;

		now = bpf_ktime_get_coarse_ns();
		sync = NAT_FN(snat_refresh)(skb, f, fwd, now);
		if (sync == NAT_SYNC_OK) {
			if (fwd->port == f->sport)
				return MASQ_PASS;
			return REWRITE(skb, f, true, &fwd->addr, fwd->port) ? drop_with(skb, DROP_CSUM) : MASQ_PASS;
		}
		if (sync == NAT_SYNC_BUSY)
			return drop_with(skb, DROP_NAT_INSERT); /* its pair is changing hands this instant */
		NAT_FN(fwd_del)(&fk); /* its pair is going: as a new flow */
	}
	if (f->proto == ICMP_PROTO)
		return f->icmp_type == ECHO_REQUEST ? NAT_HOST_NEW : MASQ_PASS;
	/* GRE, ESP...: a host flow has no other tuple to take, so it is never tracked. */
	if (!l4_has_ports(f->proto))
		return MASQ_PASS;
	/* A host TCP connection can only meet a pod's tuple with its first segment:
	 * from connect() on, its socket is hashed, and a pod's claim sees it. */
	if (f->proto == IPPROTO_TCP && (f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN)
		return MASQ_PASS;
	KEY_T rk = {
		.saddr = f->daddr, .daddr = f->saddr,
		.sport = f->dport, .dport = f->sport, .proto = f->proto,
	};
	/* Nobody's: untracked, as it leaves. */
	return bpf_map_lookup_elem(&MAP_REV, &rk) ? NAT_HOST_NEW : MASQ_PASS;
}

/* snat_egress_v4, snat_egress_v6 */
static __noinline int NAT_FN(snat_egress)(struct __sk_buff *skb, const struct uplink_info *up)
{
	ENTRY_T *fwd = NULL;
	__u32 reason;
	DEC_T d = {};
	FLOW_T f;
	__u64 now;
	int ret;

	if (PARSE(skb, uplink_l3_off(up), &f))
		return MASQ_PASS;
	/* The host's own traffic: by far the most common non-NAT case. Its ICMP
	 * errors may quote a reply we translated, though. */
	if (UPLINK_HAS(up) && ADDR_EQ(&f.saddr, UPLINK_ADDR(up))) {
		if (f.l4 != L4_ICMP_ERROR) {
			ret = NAT_FN(host_egress)(skb, &f);
			if (ret != NAT_HOST_NEW)
				return ret;
			d.nat_addr = f.saddr;
			d.nat_flags = NAT_F_HOST;
			now = bpf_ktime_get_coarse_ns();
			goto create;
		}
		ret = NAT_FN(icmp_err_egress)(skb, &f);
		if (ret != NAT_NOT_OURS)
			return ret;
		/* Untranslatable (e.g. it quotes a later fragment): never show a pod's address. */
		return QUOTES_POD(skb, &f) ? drop_with(skb, DROP_UNSUPPORTED_PROTO) : MASQ_PASS;
	}

	now = bpf_ktime_get_coarse_ns(); /* last_seen needs seconds, not ns: the cheap clock */
	switch (f.l4) {
	case L4_OK: {
		KEY_T fk = {
			.saddr = f.saddr, .daddr = f.daddr,
			.sport = f.sport, .dport = f.dport, .proto = f.proto,
		};
		fwd = NAT_FN(fwd_get_inline)(&fk);
		if (fwd) {
			if (fwd->flags & NAT_F_INBOUND) {
				/* A reply of a flow begun outside: it leaves as it is
				 * (its later fragments too: snat_fragment). */
				NAT_FN(nat_touch)(skb, fwd, &f, now);
				if (f.frag == FRAG_FIRST)
					NAT_FN(frag_remember)(&f);
				count_add(CNT_INBOUND_PKTS, 1);
				return MASQ_PASS;
			}
			ret = NAT_FN(snat_refresh)(skb, &f, fwd, now);
			if (ret == NAT_SYNC_OK)
				goto rewrite;
			if (ret == NAT_SYNC_BUSY)
				return drop_with(skb, DROP_NAT_INSERT); /* its pair is changing hands this instant */
			/* Our pair is going, or its reply slot was taken over: start afresh. */
			NAT_FN(fwd_del)(&fk);
			fwd = NULL;
		}
		break;
	}
	case L4_FRAGMENT:
		return NAT_FN(snat_fragment)(skb, up, &f);
	case L4_ICMP_ERROR:
		ret = NAT_FN(icmp_err_egress)(skb, &f);
		if (ret != NAT_NOT_OURS)
			return ret;
		break;
	}

	DECIDE(skb->ifindex, up, &f, &d);
	if (d.verdict == VERDICT_NONE)
		return MASQ_PASS;
	if (d.verdict == VERDICT_UNREGISTERED)
		return drop_with(skb, DROP_UNREGISTERED_POD);

	/*
	 * From here on the packet must leave masqueraded or not at all. An echo
	 * reply answers a ping that reached the pod directly: no flow of ours to map
	 * it to, and it must not leave with the pod's address either.
	 */
	if (f.l4 == L4_OK && f.proto == ICMP_PROTO && f.icmp_type == ECHO_REPLY)
		return drop_with(skb, DROP_UNSUPPORTED_PROTO);
	switch (f.l4) {
	case L4_TRUNCATED:
		return drop_with(skb, DROP_MALFORMED);
	case L4_UNSUPPORTED:
	case L4_ICMP_ERROR:
		return drop_with(skb, DROP_UNSUPPORTED_PROTO);
	}

create:
	d.ifindex = skb->ifindex;
	fwd = NAT_FN(snat_flow_entry)(skb, &f, &d, now, &reason);
	if (!fwd) {
		/* A host echo request goes as it is (its id is likely free); any
		 * other flow must not leave: its replies would reach somebody else. */
		if ((d.nat_flags & NAT_F_HOST) && f.proto == ICMP_PROTO)
			return MASQ_PASS;
		return drop_with(skb, reason);
	}
	if (NAT_FN(nat_touch)(skb, fwd, &f, now))
		NAT_FN(snat_sync_rev)(skb, &f, fwd, now); /* a first packet that is a FIN (a flow picked up) */
	if (fwd->flags & NAT_F_HOST) {
		if (fwd->port == f.sport)
			return MASQ_PASS;
		return REWRITE(skb, &f, true, &fwd->addr, fwd->port) ? drop_with(skb, DROP_CSUM) : MASQ_PASS;
	}

rewrite:
	if (f.frag == FRAG_FIRST)
		NAT_FN(frag_remember)(&f);
	if (fwd->flags & NAT_F_BY_RULE)
		NAT_FN(rule_account)(fwd->rule_id, f.len);
	else if (fwd->policy)
		policy_account(fwd->policy, f.len);
	if (REWRITE(skb, &f, true, &fwd->addr, fwd->port))
		return drop_with(skb, DROP_CSUM);
	count_add(CNT_SNAT_PKTS, 1);
	count_add(CNT_SNAT_BYTES, f.len);
	return MASQ_PASS;
}
