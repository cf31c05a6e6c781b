/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The fast path's egress half, written once for both address families (what it
 * does and when it falls back: fastpath_egress.h, which includes this file twice
 * with the family bound to these names):
 *
 *   FP_FN(x)                x##_v4 / x##_v6 (the engine's functions too: snat_refresh_v4...)
 *   FP_CALL                 how the pieces below fp_egress are made: inlined (IPv4),
 *                           or calls of their own (IPv6: see fastpath_egress.h)
 *   FLOW_T KEY_T ENTRY_T DEC_T  struct flow4 / flow6, nat4_key / nat6_key, nat4_entry /
 *                           nat6_entry, masq_decision4 / masq_decision6
 *   FP_FLOW(f)              declares the flow pointer f: on the stack, or in fp_flow6
 *   FP_PARSE FP_ECHO FP_DECIDE FP_REWRITE FP_HOP_DEC  the family's parse, its echo
 *                           request, its decision, its rewrite, its TTL / hop limit
 *   FP_CNT_PKTS FP_CNT_BYTES  the family's SNAT counters
 * and the family's own functions fp_l3, fp_route, fp_is_service (FP_FN-named).
 */

/* The flow's forward-half key. */
static __always_inline void FP_FN(fp_key)(const FLOW_T *f, KEY_T *k)
{
	k->saddr = f->saddr;
	k->daddr = f->daddr;
	k->sport = f->sport;
	k->dport = f->dport;
	k->proto = f->proto;
}

/* The flow's pair (its forward half), or NULL. */
static FP_CALL ENTRY_T *FP_FN(fp_lookup)(const FLOW_T *f)
{
	KEY_T fk = {};

	FP_FN(fp_key)(f, &fk);
	return FP_FN(fwd_get_inline)(&fk);
}

/* Drop the flow's forward half (its pair is going, or its reply slot was taken over). */
static FP_CALL void FP_FN(fp_forget)(const FLOW_T *f)
{
	KEY_T fk = {};

	FP_FN(fp_key)(f, &fk);
	FP_FN(fwd_del)(&fk);
}

/* The verdict, asked quietly (when the fast path falls back, the uplink decides and
 * counts). A call of its own for IPv6: the decision's frame is gone before the pair's. */
static FP_CALL void FP_FN(fp_decide)(__u32 ifindex, const struct uplink_info *up, const FLOW_T *f, DEC_T *d)
{
	FP_DECIDE(ifindex, up, f, d);
}

/*
 * A new fast flow: the pod verdict and the pair, or NULL with *@reason 0 (the
 * normal path decides) or the drop reason when no port or no room was found (the
 * normal path would search again and find the same: one search a new flow).
 */
static FP_CALL ENTRY_T *FP_FN(fp_new_flow)(struct __sk_buff *skb, const FLOW_T *f, const struct uplink_info *up,
					     __u32 ifindex, __u32 *reason)
{
	__u64 now = bpf_ktime_get_coarse_ns(); /* (a sixth argument is one too many for a BPF call) */
	DEC_T d = {};
	ENTRY_T *fwd;

	if (!reason)
		return NULL;
	*reason = 0;
	FP_FN(fp_decide)(ifindex, up, f, &d);
	if (d.verdict != VERDICT_POD)
		return NULL;
	d.ifindex = ifindex;
	d.nat_flags = NAT_F_FAST;
	fwd = FP_FN(snat_flow_entry)(skb, f, &d, now, reason);
	if (!fwd) {
		if (*reason != DROP_NO_PORT && *reason != DROP_NAT_FULL && *reason != DROP_OVER_SHARE &&
		    *reason != DROP_OVER_LIMIT)
			*reason = 0;
	} else if (FP_FN(nat_touch)(skb, fwd, f, now)) {
		FP_FN(snat_sync_rev)(skb, f, fwd, now);
	}
	return fwd;
}

/*
 * fp_egress - the packet from the pod behind skb->ifindex (source already
 * checked; @pod the pod's facts: its veths or pods4/pods6 entry), fastPath on (@cfg).
 * TC_ACT_REDIRECT when sent, MASQ_PASS when left to the stack, a drop when a
 * rewrite half-failed, a new flow found no port or room, or the flow's pair is
 * changing hands this instant (snat_refresh's NAT_SYNC_BUSY).
 */
static __noinline int FP_FN(fp_egress)(struct __sk_buff *skb, const struct node_config *cfg,
				       const struct pod_info *pod)
{
	const struct pod_l2 *l2 = fp_pod_l2(pod);
	struct uplink_info *up;
	struct fp_route r;
	struct fp_l3 l3;
	__u32 wire_len, reason;
	ENTRY_T *fwd;
	FP_FLOW(f);
	__u64 now;

	if (!l2 || !f)
		goto fallback;
	if (FP_PARSE(skb, f) || f->l4 != L4_OK || f->frag != FRAG_NONE)
		goto fallback;
	if (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP && !FP_ECHO(f))
		goto fallback; /* ICMP errors, echo replies, other protocols */
	if (FP_FN(fp_l3)(skb, f, &l3))
		goto fallback;
	fwd = FP_FN(fp_lookup)(f);
	if (fwd && !(fwd->flags & NAT_F_FAST))
		goto fallback; /* began on the normal path: stays there */
	/* A new flow: never to a ClusterIP (an established fast flow was checked
	 * when it began, so its packets skip the LPM lookup). */
	if (!fwd && FP_FN(fp_is_service)(f))
		goto fallback;
	wire_len = fp_wire_len(skb, f->l3_off, f->l4_off, f->proto, l3.len);
	if (!wire_len || wire_len > 0xffff)
		goto fallback;
	r.ifindex = l2->l3_ifindex;
	r.tot_len = wire_len;
	r.tos = l3.tos;
	if (FP_FN(fp_route)(skb, f, &r))
		goto fallback;
	up = uplink_get(r.ifindex);
	if (!up)
		goto fallback;

	now = bpf_ktime_get_coarse_ns();
	if (fwd) {
		int sync = FP_FN(snat_refresh)(skb, f, fwd, now);

		if (sync == NAT_SYNC_BUSY)
			return drop_with(skb, DROP_NAT_INSERT); /* its pair is changing hands this instant */
		if (sync != NAT_SYNC_OK) {
			FP_FN(fp_forget)(f); /* our pair is going, or its reply slot was taken over: start afresh */
			fwd = NULL;
		}
	}
	if (!fwd) {
		fwd = FP_FN(fp_new_flow)(skb, f, up, r.ifindex, &reason);
		if (!fwd) {
			if (reason)
				return drop_with(skb, reason);
			goto fallback;
		}
	}
	if (FP_REWRITE(skb, f, fwd) || FP_HOP_DEC(skb, &l3, f))
		return drop_with(skb, DROP_CSUM);
	count_add(FP_CNT_PKTS, 1);
	count_add(FP_CNT_BYTES, f->len);
	count_add(CNT_FP_EGRESS, 1);
	if (fwd->policy)
		policy_account(fwd->policy, f->len);
	skb->cb[0] = FP_CB_MARK;
	return bpf_redirect_neigh(r.ifindex, &r.nh, sizeof(r.nh), 0);

fallback:
	count_add(CNT_FP_FALLBACK, 1);
	return MASQ_PASS;
}

/* The template releases its parameters, so it can be included again. */
#undef FP_FN
#undef FP_CALL
#undef FLOW_T
#undef KEY_T
#undef ENTRY_T
#undef DEC_T
#undef FP_FLOW
#undef FP_PARSE
#undef FP_ECHO
#undef FP_DECIDE
#undef FP_REWRITE
#undef FP_HOP_DEC
#undef FP_CNT_PKTS
#undef FP_CNT_BYTES
