/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The decision (decide.h), written once for both address families: decide.h
 * includes this file twice, with the family's types, maps and fields bound to
 * these names, as nat/nat.h instantiates the NAT engine:
 *
 *   DECIDE_FN(x)       x##_v4 / x##_v6
 *   ADDR_T             __be32 / struct in6_addr (an address the decision writes)
 *   ADDR_ARG_T         __be32 / const struct in6_addr * (an address it is given)
 *   ADDR_OF(a)         the ADDR_T an ADDR_ARG_T gives: (a) / *(a)
 *   ADDR_PTR(a)        a pointer to it, for a lookup key: &(a) / (a)
 *   ADDR_LOW(a)        its last 32 bits, host order: what picks a pool slot
 *   ADDR_BITS          32 / 128: the address's prefix length in LPM keys
 *   DEC_T              struct masq_decision4 / 6
 *   RULE_KEY_T RULE_T EXCEPT_KEY_T EXCL_KEY_T EGRESS_KEY_T   the family's key and value types
 *   MAP_RULES MAP_RULE_EXCEPT MAP_PODS MAP_EXCL MAP_EGRESS   rules4, rule_except4, pods4, excl4, policy_dst4 / *6
 *   EXCL_KEY_INIT(a) EXCL_KEY_FILL(k, a)   the exclusion key of destination @a: IPv4's is
 *                      whole from the start, IPv6's address copied in only once needed
 *                      (each as the separate functions were; the other way costs code)
 *   LPM_KEY_SET(k, a)  put address @a in the host-route key @k (for pod_nets, then excl)
 *   MAP_POD_NETS       pod_nets4 / pod_nets6
 *   UPLINK_F_HAS UPLINK_F_POOL UPLINK_MASQ(out, up)   the uplink's address of this family
 *   POOL_LEN POOL_ADDRS  the pool's length and addresses of this family (len4, v4 / len6, v6)
 *   RULE_TO            the rule's toAddress of this family (to_v4 / to_v6)
 *
 * It makes, per family (each definition is headed by a comment naming both, so
 * grep finds them; all inline, so only their callers show in `bpftool prog`):
 *   masq_addr_v4, masq_addr_v6           the address a source is masqueraded to
 *   egress_policy_v4, egress_policy_v6   a selected pod's egress policy
 *   rule_excepts_v4, rule_excepts_v6     a rule's except list
 *   masq_decide_v4, masq_decide_v6       the decision
 */

/*
 * The address a source @saddr of this uplink is masqueraded to: the uplink's, or
 * with a pool (UPLINK_F_POOL4/6) always the same one of the pool for @saddr
 * (paired pooling, RFC 4787 REQ-2): the low bits of the address pick it, so
 * pods that IPAM numbers in sequence go round the pool. False: none to use.
 */
/* masq_addr_v4, masq_addr_v6 */
static __always_inline bool DECIDE_FN(masq_addr)(const struct uplink_info *up, ADDR_ARG_T saddr, ADDR_T *out)
{
	const struct masq_pool *pool;
	__u32 zero = 0;

	if (!(up->flags & UPLINK_F_HAS))
		return false;
	UPLINK_MASQ(out, up);
	if (!(up->flags & UPLINK_F_POOL))
		return true;
	pool = bpf_map_lookup_elem(&masq_pool, &zero);
	if (pool && pool->POOL_LEN > 1 && pool->POOL_LEN <= MASQ_POOL_MAX)
		*out = pool->POOL_ADDRS[masq_pool_slot(ADDR_LOW(saddr), pool->POOL_LEN)];
	return true;
}

/*
 * The egress policy of a selected pod's packet: one longest-prefix lookup of
 * (the pod's policy mask, destination) gives the first policy of the mask that
 * holds the destination (the plugin labels every entry so). False: it leaves
 * unmasqueraded (a natOutgoing:false policy). True otherwise, with d->nat_addr
 * and d->policy set when that policy has an address of this family (paired
 * within its pool as the network's pool pairs); else the network's stays.
 */
/* egress_policy_v4, egress_policy_v6 */
static __always_inline bool DECIDE_FN(egress_policy)(__u32 set, ADDR_ARG_T saddr, ADDR_ARG_T daddr,
						     DEC_T *d, bool count)
{
	EGRESS_KEY_T k = { .prefixlen = 32 + ADDR_BITS, .set = set, .daddr = ADDR_OF(daddr) };
	const struct policy_hit *h = bpf_map_lookup_elem(&MAP_EGRESS, &k);
	const struct masq_pool *pool;
	struct policy_stats *s;
	__u32 slot;

	if (!h || h->policy >= EGRESS_POLICIES_MAX)
		return true;
	slot = h->policy + 1;
	if (h->flags & POLICY_F_NO_NAT) {
		if (count && (s = policy_stats_of(slot)))
			s->unmasqueraded++;
		return false;
	}
	pool = bpf_map_lookup_elem(&masq_pool, &slot);
	if (!pool || pool->POOL_LEN < 1 || pool->POOL_LEN > MASQ_POOL_MAX)
		return true;
	d->nat_addr = pool->POOL_ADDRS[masq_pool_slot(ADDR_LOW(saddr), pool->POOL_LEN)];
	d->policy = slot;
	return true;
}

/* rule_excepts_v4, rule_excepts_v6 */
static __always_inline bool DECIDE_FN(rule_excepts)(__u32 rule_id, ADDR_ARG_T daddr)
{
	EXCEPT_KEY_T k = {
		.prefixlen = 32 + ADDR_BITS,
		.rule_id = bpf_htonl(rule_id),
		.daddr = ADDR_OF(daddr),
	};

	return bpf_map_lookup_elem(&MAP_RULE_EXCEPT, &k) != NULL;
}

/*
 * @count: account the "skipped" counters. The fast path asks quietly: when it
 * falls back, the uplink program decides (and counts) the same packet again.
 */
/* masq_decide_v4, masq_decide_v6 */
static __always_inline void DECIDE_FN(masq_decide)(__u32 ifindex, const struct uplink_info *up,
						   ADDR_ARG_T saddr, ADDR_ARG_T daddr, DEC_T *d, bool count)
{
	RULE_KEY_T rk = {
		.prefixlen = 32 + ADDR_BITS,
		.ifindex = bpf_htonl(ifindex),
		.saddr = ADDR_OF(saddr),
	};
	EXCL_KEY_T ek = EXCL_KEY_INIT(daddr);
	RULE_T *rule;
	struct pod_info *pod;

	d->verdict = VERDICT_NONE;
	d->policy = 0;

	rule = bpf_map_lookup_elem(&MAP_RULES, &rk);
	if (rule && !DECIDE_FN(rule_excepts)(rule->id, daddr)) {
		if (rule->flags & RULE_F_TO_ADDRESS)
			d->nat_addr = rule->RULE_TO;
		else if (!DECIDE_FN(masq_addr)(up, saddr, &d->nat_addr))
			return;
		d->verdict = VERDICT_RULE;
		d->rule_id = rule->id;
		d->filter = rule->flags & NAT_FILTER_MASK;
		return;
	}

	pod = bpf_map_lookup_elem(&MAP_PODS, ADDR_PTR(saddr));
	if (!pod) {
		/*
		 * No registered pod's. From inside the node's pod ranges, towards a
		 * destination a pod's packet would be masqueraded to, it is a pod whose
		 * ADD never reached ebpf-masq: it must not leave with its own address
		 * (the caller drops it) until the agent registers it. The one key is
		 * used for both lookups: the IPv6 fast path's stack has no room for two.
		 */
		LPM_KEY_SET(ek, saddr);
		if (!bpf_map_lookup_elem(&MAP_POD_NETS, &ek))
			return;
		LPM_KEY_SET(ek, daddr);
		if (!bpf_map_lookup_elem(&MAP_EXCL, &ek))
			d->verdict = VERDICT_UNREGISTERED;
		return;
	}
	if (!(pod->flags & POD_F_NAT_OUTGOING)) {
		if (count)
			count_add(CNT_SKIP_NO_NAT_OUTGOING, 1);
		return;
	}
	EXCL_KEY_FILL(ek, daddr);
	if (bpf_map_lookup_elem(&MAP_EXCL, &ek)) {
		if (count)
			count_add(CNT_SKIP_EXCLUDED, 1);
		return;
	}
	if (!DECIDE_FN(masq_addr)(up, saddr, &d->nat_addr))
		return;
	if (pod->policies && !DECIDE_FN(egress_policy)(pod->policies, saddr, daddr, d, count))
		return;
	d->verdict = VERDICT_POD;
	d->filter = pod->flags & NAT_FILTER_MASK;
	d->port_limit = pod->flags >> PORT_LIMIT_SHIFT;
}

/* The template releases its parameters, so it can be instantiated again. */
#undef DECIDE_FN
#undef ADDR_T
#undef ADDR_ARG_T
#undef ADDR_OF
#undef ADDR_PTR
#undef ADDR_LOW
#undef ADDR_BITS
#undef DEC_T
#undef RULE_KEY_T
#undef RULE_T
#undef EXCEPT_KEY_T
#undef EXCL_KEY_T
#undef EGRESS_KEY_T
#undef MAP_RULES
#undef MAP_RULE_EXCEPT
#undef MAP_PODS
#undef MAP_EXCL
#undef MAP_EGRESS
#undef EXCL_KEY_INIT
#undef EXCL_KEY_FILL
#undef LPM_KEY_SET
#undef MAP_POD_NETS
#undef UPLINK_F_HAS
#undef UPLINK_F_POOL
#undef UPLINK_MASQ
#undef POOL_LEN
#undef POOL_ADDRS
#undef RULE_TO
