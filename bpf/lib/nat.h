/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NAT pairs for both families: the engine in nat_tmpl.h, instantiated once
 * with IPv4's types and once with IPv6's.
 */
#ifndef MASQ_NAT_H
#define MASQ_NAT_H

#include "maps.h"
#include "parse.h"
#include "inner.h"
#include "rewrite.h"
#include "policy.h"
#include "fastpath.h"

/*
 * Random ports tried for one new flow. Expected probes stay O(1) (1/(1-use)),
 * and with bpf_loop() the budget costs the verifier nothing: 128 misses a free
 * port with probability use^128 (1e-12 at 80 % of the range in use for one
 * remote endpoint, 1e-6 at 90 %).
 */
#define NAT_PROBES 128
/*
 * Then up to NAT_SWEEP ports in sequence from a random start: a range of at most
 * this many ports is never reported full while a port is free. Bounded, because
 * every probe is a map operation on the packet's CPU.
 */
#define NAT_SWEEP 1024

/*
 * The expiry sweep runs every NAT_GC_MIN_NS, stretched by NAT_GC_NS_PER_PAIR
 * for every pair it checked last time: a walk costs some tens of ns per pair on
 * one CPU (softirq), so a million pairs are swept every ~5 s at well under 1 % of
 * a CPU, while a small table is swept every second (an idle pair lives at most
 * its timeout plus one interval).
 */
#define NAT_GC_MIN_NS      NSEC_PER_SEC
#define NAT_GC_NS_PER_PAIR 4000ULL

/* What one sweep has seen (bpf_for_each_map_elem context). */
struct nat_gc_walk {
	const struct masq_config *cfg;
	struct nat_gc *gc;
	__u64 now;
};

static __always_inline void nat_gc_ensure(bool v6);

#ifndef E2BIG
#define E2BIG 7               /* a hash map at max_entries refuses a new key */
#endif
#ifndef EBUSY
#define EBUSY 16
#endif
#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1
#endif

static __always_inline __u64 nat_timeout_ns(const struct masq_config *cfg, __u8 proto, __u8 flags)
{
	__u32 s;

	switch (proto) {
	case IPPROTO_TCP:
		s = (flags & NAT_F_TCP_CLOSING) ? cfg->tcp_closing_timeout_s : cfg->tcp_timeout_s;
		break;
	case IPPROTO_UDP:
		s = cfg->udp_timeout_s;
		break;
	default:
		s = cfg->icmp_timeout_s;
		break;
	}
	return (__u64)s * NSEC_PER_SEC;
}

static __always_inline __u32 uplink_l3_off(const struct uplink_info *up)
{
	return (up->flags & UPLINK_F_L3) ? 0 : ETH_HLEN;
}

static __noinline void decide4(__u32 ifindex, const struct uplink_info *up, const struct flow4 *f,
				    struct masq_decision4 *d)
{
	masq_decide_v4(ifindex, up, f->saddr, f->daddr, d, true);
}

static __noinline void decide6(__u32 ifindex, const struct uplink_info *up, const struct flow6 *f,
				    struct masq_decision6 *d)
{
	masq_decide_v6(ifindex, up, &f->saddr, &f->daddr, d, true);
}

/* ---- IPv4 ---- */
#define NAT_FN(x) x##_v4
#define FLOW_T struct flow4
#define INNER_T struct inner4
#define KEY_T struct nat4_key
#define ENTRY_T struct nat4_entry
#define FRAGKEY_T struct frag4_key
#define DEC_T struct masq_decision4
#define MAP_FWD nat4_fwd
#define MAP_REV nat4_rev
#define MAP_FRAG frag4
#define ADDR_EQ(a, b) (*(a) == *(b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V4)
#define UPLINK_ADDR(up) (&(up)->masq_v4)
#define PARSE parse_flow4
#define PARSE_INNER parse_inner4
#define DECIDE decide4
#define REWRITE nat4_rewrite
#define REWRITE_ADDR nat4_rewrite_addr
#define ICMP_ERR_REWRITE icmp4_err_rewrite
#define QUOTES_POD inner4_quotes_pod
#define ECHO_REPLY ICMP_ECHOREPLY
#define ICMP_PROTO IPPROTO_ICMP
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V4
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V4
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V4
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V4
#define FP_REPLY fp_reply_v4
#define NAT_IS_V6 false
#include "nat_tmpl.h"

/* ---- IPv6 ---- */
#define NAT_FN(x) x##_v6
#define FLOW_T struct flow6
#define INNER_T struct inner6
#define KEY_T struct nat6_key
#define ENTRY_T struct nat6_entry
#define FRAGKEY_T struct frag6_key
#define DEC_T struct masq_decision6
#define MAP_FWD nat6_fwd
#define MAP_REV nat6_rev
#define MAP_FRAG frag6
#define ADDR_EQ(a, b) ipv6_addr_equal((a), (b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V6)
#define UPLINK_ADDR(up) ((const struct in6_addr *)(up)->masq_v6)
#define PARSE parse_flow6
#define PARSE_INNER parse_inner6
#define DECIDE decide6
#define REWRITE nat6_rewrite
#define REWRITE_ADDR nat6_rewrite_addr
#define ICMP_ERR_REWRITE icmp6_err_rewrite
#define QUOTES_POD inner6_quotes_pod
#define ECHO_REPLY ICMPV6_ECHO_REPLY
#define ICMP_PROTO IPPROTO_ICMPV6
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V6
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V6
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V6
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V6
#define FP_REPLY(skb, up, f, addr) fp_reply_v6(skb, up, f, &(addr))
#define NAT_IS_V6 true
#include "nat_tmpl.h"

/*
 * nat_gc_run - the expiry sweep (the node's one bpf_timer, in nat_gc): walk a
 * forward map, remove idle pairs (both halves, gc_pair), record the run and
 * come back after an interval that grows with the table.
 *
 * A walk visits every bucket of a map, used or not: with the default
 * natMaxEntries that is a million buckets and ~5-8 ms of one CPU (softirq) per
 * map, even for an empty table. So a run walks one map: nat4_fwd, or nat6_fwd
 * every other run while an IPv6 pair may exist (NAT_GC_V6; NAT_GC_V6_NEXT says
 * whose turn it is, and the interval halves so each map keeps its cadence). A
 * nat4_fwd run that finds no pair while no IPv6 pair may exist stops the
 * sweep. The bits are cleared before the walk; a pair created from then on
 * (nat_gc_ensure) sets them again and restarts the timer, also while this walk
 * runs (a pair it may not have seen).
 */
static int nat_gc_run(void *map, __u32 *key, struct nat_gc *gc)
{
	struct nat_gc_walk w = { .gc = gc, .now = bpf_ktime_get_ns() };
	__u64 was = __sync_fetch_and_and(&gc->armed, 0);
	__u64 interval;
	__u32 zero = 0;

	gc->last_checked = 0;
	gc->last_run_ns = w.now;
	gc->runs++;
	w.cfg = bpf_map_lookup_elem(&masq_config, &zero);
	if (!w.cfg) {
		/* No config to judge by (never expected): nothing walked, keep what we knew. */
		__sync_fetch_and_or(&gc->armed, (was & (NAT_GC_V6 | NAT_GC_V6_NEXT)) | NAT_GC_ARMED);
		bpf_timer_start(&gc->timer, NAT_GC_MIN_NS, 0);
		return 0;
	}
	if ((was & NAT_GC_V6) && (was & NAT_GC_V6_NEXT)) {
		bpf_for_each_map_elem(&nat6_fwd, gc_pair_v6, &w, 0);
		if (gc->last_checked)
			__sync_fetch_and_or(&gc->armed, NAT_GC_V6);
		/* nat4_fwd's turn next: it alone may stop the sweep. */
	} else {
		bpf_for_each_map_elem(&nat4_fwd, gc_pair_v4, &w, 0);
		if (was & NAT_GC_V6)
			__sync_fetch_and_or(&gc->armed, NAT_GC_V6 | NAT_GC_V6_NEXT);
		else if (gc->last_checked == 0)
			return 0; /* nothing left to expire: idle until the next new pair */
	}
	interval = NAT_GC_MIN_NS + gc->last_checked * NAT_GC_NS_PER_PAIR;
	if (was & NAT_GC_V6)
		interval /= 2; /* two maps take turns */
	__sync_fetch_and_or(&gc->armed, NAT_GC_ARMED);
	bpf_timer_start(&gc->timer, interval, 0);
	return 0;
}

/*
 * nat_gc_ensure - after a new pair: mark IPv6 pairs for the walk (@v6) and arm
 * the sweep if it is not running (the node's first pair, or the first after a
 * sweep found the table empty and stopped). Cheap when armed: one lookup.
 * Racing CPUs are harmless: the second init says EBUSY and starting twice re-arms.
 */
static __always_inline void nat_gc_ensure(bool v6)
{
	struct nat_gc *gc;
	__u32 zero = 0;
	long err;

	gc = bpf_map_lookup_elem(&nat_gc, &zero);
	if (!gc)
		return;
	if (v6 && !(gc->armed & NAT_GC_V6))
		__sync_fetch_and_or(&gc->armed, NAT_GC_V6);
	if (gc->armed & NAT_GC_ARMED)
		return;
	err = bpf_timer_init(&gc->timer, &nat_gc, CLOCK_MONOTONIC);
	if (err && err != -EBUSY)
		return; /* e.g. no memory right now: the next new pair tries again */
	if (bpf_timer_set_callback(&gc->timer, nat_gc_run) ||
	    bpf_timer_start(&gc->timer, NAT_GC_MIN_NS, 0))
		return;
	__sync_fetch_and_or(&gc->armed, NAT_GC_ARMED);
}

#endif /* MASQ_NAT_H */
