/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one place that answers "should this packet be masqueraded, and to what?".
 * `ebpf-masq explain` mirrors this logic from the same pinned maps
 * (plugin/src/cli/explain/); keep the two in step.
 *
 * Order:
 *  1. A masqueradeRules entry for (out interface, source) whose except list does
 *     not hold the destination -> masquerade to the rule's toAddress or the uplink
 *     address. Rules are explicit, so nativeRoutingCIDR/nonMasqueradeCIDRs do not
 *     apply to them (the tunnel case masquerades *to* the node's own subnet).
 *  2. A registered pod with natOutgoing whose destination is in no exclusion
 *     (nativeRoutingCIDR, nonMasqueradeCIDRs, link-local) -> the uplink address,
 *     or the pod's address of the pool (masq_addr_v4/v6); for a pod egress
 *     policies select (pod_info.egress), the first of them that holds the
 *     destination decides instead: its address (paired within its pool), or
 *     untouched for a natOutgoing:false policy (egress_policy_v4/v6).
 *  3. Anything else is not ours: untouched.
 */
#ifndef MASQ_POLICY_H
#define MASQ_POLICY_H

#include "maps.h"

enum masq_verdict {
	VERDICT_NONE = 0,
	VERDICT_POD = 1,
	VERDICT_RULE = 2,
};

struct masq_decision4 {
	__u32 verdict;      /* enum masq_verdict */
	__u32 rule_id;
	__u32 ifindex;      /* the uplink, for the NAT entry */
	__be32 nat_addr;
	__u32 nat_flags;    /* extra NAT_F_* for a new pair (NAT_F_FAST), set by the caller */
	__u32 filter;       /* NAT_FILTER_* of the pod or rule (natFiltering) */
	__u16 policy;       /* 0, or 1 + the egress policy whose address nat_addr is */
	__u16 port_limit;   /* the pod's port limit (PORT_LIMIT_SHIFT); 0: none */
	__u32 pad;
};

struct masq_decision6 {
	__u32 verdict;
	__u32 rule_id;
	__u32 ifindex;
	__u32 nat_flags;
	__u32 filter;
	__u16 policy;       /* 16 bits each: the IPv6 fast path's call chain fills the */
	__u16 port_limit;   /* 512-byte stack to within a few bytes */
	struct in6_addr nat_addr;
};

/*
 * The address a source @saddr of this uplink is masqueraded to: the uplink's, or
 * with a pool (UPLINK_F_POOL4) always the same one of the pool for @saddr
 * (paired pooling, RFC 4787 REQ-2): the low bits of the address pick it, so
 * pods that IPAM numbers in sequence go round the pool. False: none to use.
 */
/*
 * The pool slot of a source whose address ends in @low (host order), of @len
 * (2..MASQ_POOL_MAX). The mask comes after a barrier: otherwise the compiler,
 * knowing len <= MASQ_POOL_MAX, drops it, and the verifier cannot bound a modulo.
 */
static __always_inline __u32 masq_pool_slot(__u32 low, __u32 len)
{
	__u32 i = low % len;

	asm volatile("" : "+r"(i));
	return i & (MASQ_POOL_MAX - 1);
}

static __always_inline bool masq_addr_v4(const struct uplink_info *up, __be32 saddr, __be32 *out)
{
	const struct masq_pool *pool;
	__u32 zero = 0;

	if (!(up->flags & UPLINK_F_HAS_V4))
		return false;
	*out = up->masq_v4;
	if (!(up->flags & UPLINK_F_POOL4))
		return true;
	pool = bpf_map_lookup_elem(&masq_pool, &zero);
	if (pool && pool->len4 > 1 && pool->len4 <= MASQ_POOL_MAX)
		*out = pool->v4[masq_pool_slot(bpf_ntohl(saddr), pool->len4)];
	return true;
}

static __always_inline bool masq_addr_v6(const struct uplink_info *up, const struct in6_addr *saddr,
					 struct in6_addr *out)
{
	const struct masq_pool *pool;
	__u32 zero = 0;

	if (!(up->flags & UPLINK_F_HAS_V6))
		return false;
	__builtin_memcpy(out, up->masq_v6, sizeof(*out));
	if (!(up->flags & UPLINK_F_POOL6))
		return true;
	pool = bpf_map_lookup_elem(&masq_pool, &zero);
	if (pool && pool->len6 > 1 && pool->len6 <= MASQ_POOL_MAX)
		*out = pool->v6[masq_pool_slot(bpf_ntohl(saddr->in6_u.u6_addr32[3]), pool->len6)];
	return true;
}

/* Per-policy accounting (egress_stats); @slot is 1 + the policy's index. */
static __always_inline struct egress_stats *egress_stats_of(__u32 slot)
{
	__u32 i = slot - 1;

	if (slot == 0 || i >= EGRESS_POLICIES_MAX)
		return NULL;
	return bpf_map_lookup_elem(&egress_stats, &i);
}

static __always_inline void egress_account(__u32 slot, __u32 len)
{
	struct egress_stats *s = egress_stats_of(slot);

	if (s) {
		s->packets++;
		s->bytes += len;
	}
}

static __always_inline void egress_flow(__u32 slot)
{
	struct egress_stats *s = egress_stats_of(slot);

	if (s)
		s->flows++;
}

/*
 * The egress policy of a selected pod's packet: one longest-prefix lookup of
 * (the pod's policy mask, destination) gives the first policy of the mask that
 * holds the destination (the plugin labels every entry so). False: it leaves
 * unmasqueraded (a natOutgoing:false policy). True otherwise, with d->nat_addr
 * and d->policy set when that policy has an address of this family (paired
 * within its pool as the network's pool pairs); else the network's stays.
 */
static __always_inline bool egress_policy_v4(__u32 set, __be32 saddr, __be32 daddr,
					     struct masq_decision4 *d, bool count)
{
	struct egress4_key k = { .prefixlen = 64, .set = set, .daddr = daddr };
	const struct egress_hit *h = bpf_map_lookup_elem(&egress4, &k);
	const struct masq_pool *pool;
	struct egress_stats *s;
	__u32 slot;

	if (!h || h->policy >= EGRESS_POLICIES_MAX)
		return true;
	slot = h->policy + 1;
	if (h->flags & EGRESS_F_NO_NAT) {
		if (count && (s = egress_stats_of(slot)))
			s->unmasqueraded++;
		return false;
	}
	pool = bpf_map_lookup_elem(&masq_pool, &slot);
	if (!pool || pool->len4 < 1 || pool->len4 > MASQ_POOL_MAX)
		return true;
	d->nat_addr = pool->v4[masq_pool_slot(bpf_ntohl(saddr), pool->len4)];
	d->policy = slot;
	return true;
}

static __always_inline bool egress_policy_v6(__u32 set, const struct in6_addr *saddr,
					     const struct in6_addr *daddr, struct masq_decision6 *d, bool count)
{
	struct egress6_key k = { .prefixlen = 32 + 128, .set = set, .daddr = *daddr };
	const struct egress_hit *h = bpf_map_lookup_elem(&egress6, &k);
	const struct masq_pool *pool;
	struct egress_stats *s;
	__u32 slot;

	if (!h || h->policy >= EGRESS_POLICIES_MAX)
		return true;
	slot = h->policy + 1;
	if (h->flags & EGRESS_F_NO_NAT) {
		if (count && (s = egress_stats_of(slot)))
			s->unmasqueraded++;
		return false;
	}
	pool = bpf_map_lookup_elem(&masq_pool, &slot);
	if (!pool || pool->len6 < 1 || pool->len6 > MASQ_POOL_MAX)
		return true;
	d->nat_addr = pool->v6[masq_pool_slot(bpf_ntohl(saddr->in6_u.u6_addr32[3]), pool->len6)];
	d->policy = slot;
	return true;
}

static __always_inline bool rule_excepts_v4(__u32 rule_id, __be32 daddr)
{
	struct rule_except4_key k = {
		.prefixlen = 64,
		.rule_id = bpf_htonl(rule_id),
		.daddr = daddr,
	};

	return bpf_map_lookup_elem(&rule_except4, &k) != NULL;
}

/*
 * @count: account the "skipped" counters. The fast path asks quietly: when it
 * falls back, the uplink program decides (and counts) the same packet again.
 */
static __always_inline void masq_decide_v4(__u32 ifindex, const struct uplink_info *up,
					   __be32 saddr, __be32 daddr, struct masq_decision4 *d, bool count)
{
	struct rule4_key rk = {
		.prefixlen = 64,
		.ifindex = bpf_htonl(ifindex),
		.saddr = saddr,
	};
	struct lpm4_key ek = { .prefixlen = 32, .addr = daddr };
	struct rule_info *rule;
	struct pod_info *pod;

	d->verdict = VERDICT_NONE;
	d->policy = 0;

	rule = bpf_map_lookup_elem(&rules4, &rk);
	if (rule && !rule_excepts_v4(rule->id, daddr)) {
		if (rule->flags & RULE_F_TO_ADDRESS)
			d->nat_addr = rule->to_v4;
		else if (!masq_addr_v4(up, saddr, &d->nat_addr))
			return;
		d->verdict = VERDICT_RULE;
		d->rule_id = rule->id;
		d->filter = rule->flags & NAT_FILTER_MASK;
		return;
	}

	pod = bpf_map_lookup_elem(&pods4, &saddr);
	if (!pod)
		return;
	if (!(pod->flags & POD_F_NAT_OUTGOING)) {
		if (count)
			count_add(CNT_SKIP_NO_NAT_OUTGOING, 1);
		return;
	}
	if (bpf_map_lookup_elem(&excl4, &ek)) {
		if (count)
			count_add(CNT_SKIP_EXCLUDED, 1);
		return;
	}
	if (!masq_addr_v4(up, saddr, &d->nat_addr))
		return;
	if (pod->egress && !egress_policy_v4(pod->egress, saddr, daddr, d, count))
		return;
	d->verdict = VERDICT_POD;
	d->filter = pod->flags & NAT_FILTER_MASK;
	d->port_limit = pod->flags >> PORT_LIMIT_SHIFT;
}

static __always_inline bool rule_excepts_v6(__u32 rule_id, const struct in6_addr *daddr)
{
	struct rule_except6_key k = {
		.prefixlen = 32 + 128,
		.rule_id = bpf_htonl(rule_id),
		.daddr = *daddr,
	};

	return bpf_map_lookup_elem(&rule_except6, &k) != NULL;
}

static __always_inline void masq_decide_v6(__u32 ifindex, const struct uplink_info *up,
					   const struct in6_addr *saddr, const struct in6_addr *daddr,
					   struct masq_decision6 *d, bool count)
{
	struct rule6_key rk = {
		.prefixlen = 32 + 128,
		.ifindex = bpf_htonl(ifindex),
		.saddr = *saddr,
	};
	struct lpm6_key ek = { .prefixlen = 128 };
	struct rule6_info *rule;
	struct pod_info *pod;

	d->verdict = VERDICT_NONE;
	d->policy = 0;

	rule = bpf_map_lookup_elem(&rules6, &rk);
	if (rule && !rule_excepts_v6(rule->id, daddr)) {
		if (rule->flags & RULE_F_TO_ADDRESS)
			d->nat_addr = rule->to_v6;
		else if (!masq_addr_v6(up, saddr, &d->nat_addr))
			return;
		d->verdict = VERDICT_RULE;
		d->rule_id = rule->id;
		d->filter = rule->flags & NAT_FILTER_MASK;
		return;
	}

	pod = bpf_map_lookup_elem(&pods6, saddr);
	if (!pod)
		return;
	if (!(pod->flags & POD_F_NAT_OUTGOING)) {
		if (count)
			count_add(CNT_SKIP_NO_NAT_OUTGOING, 1);
		return;
	}
	__builtin_memcpy(ek.addr, daddr, sizeof(ek.addr));
	if (bpf_map_lookup_elem(&excl6, &ek)) {
		if (count)
			count_add(CNT_SKIP_EXCLUDED, 1);
		return;
	}
	if (!masq_addr_v6(up, saddr, &d->nat_addr))
		return;
	if (pod->egress && !egress_policy_v6(pod->egress, saddr, daddr, d, count))
		return;
	d->verdict = VERDICT_POD;
	d->filter = pod->flags & NAT_FILTER_MASK;
	d->port_limit = pod->flags >> PORT_LIMIT_SHIFT;
}

#endif /* MASQ_POLICY_H */
