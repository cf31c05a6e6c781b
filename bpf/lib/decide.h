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
 *     policies select (pod_info.policies), the first of them that holds the
 *     destination decides instead: its address (paired within its pool), or
 *     untouched for a natOutgoing:false policy (egress_policy_v4/v6).
 *  3. A source no registered pod owns, inside the node's pod ranges (pod_nets4/6),
 *     to a destination in no exclusion -> VERDICT_UNREGISTERED: the caller drops it
 *     (a pod whose ADD never reached ebpf-masq never leaves with its own address).
 *  4. Anything else is not ours: untouched.
 *
 * The per-family steps (masq_addr, egress_policy, rule_excepts, masq_decide) are
 * written once in decide_tmpl.h and instantiated at the end of this file with
 * IPv4's and IPv6's bindings, as the NAT engine is (nat/nat.h).
 */
#ifndef MASQ_DECIDE_H
#define MASQ_DECIDE_H

#include "maps.h"

enum masq_verdict {
	VERDICT_NONE = 0,
	VERDICT_POD = 1,
	VERDICT_RULE = 2,
	VERDICT_UNREGISTERED = 3,  /* from the node's pod ranges, no registered pod's: dropped */
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

/* Per-policy accounting (policy_stats); @slot is 1 + the policy's index. */
static __always_inline struct policy_stats *policy_stats_of(__u32 slot)
{
	__u32 i = slot - 1;

	if (slot == 0 || i >= EGRESS_POLICIES_MAX)
		return NULL;
	return bpf_map_lookup_elem(&policy_stats, &i);
}

static __always_inline void policy_account(__u32 slot, __u32 len)
{
	struct policy_stats *s = policy_stats_of(slot);

	if (s) {
		s->packets++;
		s->bytes += len;
	}
}

static __always_inline void policy_count_flow(__u32 slot)
{
	struct policy_stats *s = policy_stats_of(slot);

	if (s)
		s->flows++;
}

/* ---- IPv4 ---- */
#define DECIDE_FN(x) x##_v4
#define ADDR_T __be32
#define ADDR_ARG_T __be32
#define ADDR_OF(a) (a)
#define ADDR_PTR(a) (&(a))
#define ADDR_LOW(a) bpf_ntohl(a)
#define ADDR_BITS 32
#define DEC_T struct masq_decision4
#define RULE_KEY_T struct rule4_key
#define RULE_T struct rule_info
#define EXCEPT_KEY_T struct rule_except4_key
#define EXCL_KEY_T struct lpm4_key
#define EGRESS_KEY_T struct policy_dst4_key
#define MAP_RULES rules4
#define MAP_RULE_EXCEPT rule_except4
#define MAP_PODS pods4
#define MAP_EXCL excl4
#define MAP_EGRESS policy_dst4
#define EXCL_KEY_INIT(a) { .prefixlen = 32, .addr = (a) }
#define EXCL_KEY_FILL(k, a) do {} while (0)
#define LPM_KEY_SET(k, a) ((k).addr = (a))
#define MAP_POD_NETS pod_nets4
#define UPLINK_F_HAS UPLINK_F_HAS_V4
#define UPLINK_F_POOL UPLINK_F_POOL4
#define UPLINK_MASQ(out, up) (*(out) = (up)->masq_v4)
#define POOL_LEN len4
#define POOL_ADDRS v4
#define RULE_TO to_v4
#include "decide_tmpl.h"

/* ---- IPv6 ---- */
#define DECIDE_FN(x) x##_v6
#define ADDR_T struct in6_addr
#define ADDR_ARG_T const struct in6_addr *
#define ADDR_OF(a) (*(a))
#define ADDR_PTR(a) (a)
#define ADDR_LOW(a) bpf_ntohl((a)->in6_u.u6_addr32[3])
#define ADDR_BITS 128
#define DEC_T struct masq_decision6
#define RULE_KEY_T struct rule6_key
#define RULE_T struct rule6_info
#define EXCEPT_KEY_T struct rule_except6_key
#define EXCL_KEY_T struct lpm6_key
#define EGRESS_KEY_T struct policy_dst6_key
#define MAP_RULES rules6
#define MAP_RULE_EXCEPT rule_except6
#define MAP_PODS pods6
#define MAP_EXCL excl6
#define MAP_EGRESS policy_dst6
#define EXCL_KEY_INIT(a) { .prefixlen = 128 }
#define EXCL_KEY_FILL(k, a) __builtin_memcpy((k).addr, (a), sizeof((k).addr))
#define LPM_KEY_SET(k, a) __builtin_memcpy((k).addr, (a), sizeof((k).addr))
#define MAP_POD_NETS pod_nets6
#define UPLINK_F_HAS UPLINK_F_HAS_V6
#define UPLINK_F_POOL UPLINK_F_POOL6
#define UPLINK_MASQ(out, up) __builtin_memcpy((out), (up)->masq_v6, sizeof(*(out)))
#define POOL_LEN len6
#define POOL_ADDRS v6
#define RULE_TO to_v6
#include "decide_tmpl.h"

#endif /* MASQ_DECIDE_H */
