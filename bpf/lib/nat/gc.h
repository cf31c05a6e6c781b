/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The expiry sweep: the node's one bpf_timer (in nat_gc), armed by new pairs
 * (nat_gc_ensure), walking one forward shard a run (nat_gc_run). The visit to one
 * pair, which removes it, is per family: gc_pair in pair_tmpl.h. Touches
 * nat_gc, node_config and the forward shards; never a packet.
 */
#ifndef MASQ_NAT_GC_H
#define MASQ_NAT_GC_H

#include "../maps.h"
#include "shard.h"
#include "hot.h"

/*
 * A sweep cycle (every shard once) takes NAT_GC_MIN_NS, stretched by
 * NAT_GC_NS_PER_PAIR for every pair the last cycle checked, and each run is
 * followed by at least NAT_GC_DUTY times its own length: a small table is swept
 * every second, a full one as fast as 2 % of one CPU allows (a pair costs the
 * walk ~0.3 us in this VM, its memory cold: a million pairs every ~15 s). An
 * idle pair lives at most its timeout plus one cycle.
 */
#define NAT_GC_MIN_NS      NSEC_PER_SEC
#define NAT_GC_NS_PER_PAIR 4000ULL
#define NAT_GC_DUTY        50ULL      /* a run is followed by 50x its length: <= 2 % of a CPU */

/* What one sweep has seen (bpf_for_each_map_elem context). */
struct nat_gc_walk {
	const struct node_config *cfg;
	struct nat_gc *gc;
	__u64 now;
};

#ifndef EBUSY
#define EBUSY 16
#endif
#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1
#endif

/* The per-family visits (pair_tmpl.h, instantiated after this header). */
static long gc_pair_v4(void *map, const struct nat4_key *key, struct nat4_entry *fwd, struct nat_gc_walk *w);
static long gc_pair_v6(void *map, const struct nat6_key *key, struct nat6_entry *fwd, struct nat_gc_walk *w);

/*
 * nat_gc_walk4, nat_gc_walk6 - walk forward shard @i of one family (a
 * bpf_for_each_map_elem over a hash map visits every bucket, used or not:
 * natMaxEntries / nat_shards of them). Functions of their own, one call each:
 * 6.1 refuses a bpf_for_each_map_elem callsite merged over two maps ("tail_call abusing map_ptr").
 */
static __noinline void nat_gc_walk4(__u32 i, struct nat_gc_walk *w)
{
	void *m = bpf_map_lookup_elem(&nat4_fwd, &i);

	if (m)
		bpf_for_each_map_elem(m, gc_pair_v4, w, 0);
}

static __noinline void nat_gc_walk6(__u32 i, struct nat_gc_walk *w)
{
	void *m = bpf_map_lookup_elem(&nat6_fwd, &i);

	if (m)
		bpf_for_each_map_elem(m, gc_pair_v6, w, 0);
}

/* nat_gc_walk_shard - walk the shard at @pos of a cycle: nat4_fwd's, then nat6_fwd's. */
static __always_inline void nat_gc_walk_shard(__u32 pos, struct nat_gc_walk *w)
{
	__u32 n = nat_shard_mask + 1;

	if (pos < n)
		nat_gc_walk4(pos, w);
	else
		nat_gc_walk6(pos - n, w);
}

/*
 * nat_gc_run - the expiry sweep (the node's one bpf_timer, in nat_gc): each run
 * walks one forward shard, removes idle pairs (both halves, gc_pair) and comes
 * back after its share of a cycle's interval. A cycle is nat4_fwd's shards,
 * then nat6_fwd's while IPv6 pairs may exist (NAT_GC_WALK6: an IPv6 pair was
 * created, or found, during the last cycle), so a run stalls its CPU for the
 * walk of one shard, never of a whole table (~10 ms at the default size).
 * New pairs set NAT_GC_NEW4/NEW6; each run takes them (they are cleared first,
 * so a pair made while the walk runs is never missed) into the cycle's record.
 * A cycle that found no pair, with none created meanwhile, stops the timer:
 * an idle node does not walk at all, and the next new pair restarts it.
 */
static int nat_gc_run(void *map, __u32 *key, struct nat_gc *gc)
{
	struct nat_gc_walk w = { .gc = gc, .now = bpf_ktime_get_ns() };
	__u64 was = __sync_fetch_and_and(&gc->armed, 0);
	__u32 pos = gc->pos, steps, n = nat_shard_mask + 1;
	__u64 interval, took;
	__u32 zero = 0;

	gc->seen |= was & (NAT_GC_NEW4 | NAT_GC_NEW6 | NAT_GC_NEW_HOST);
	gc->last_checked = 0;
	gc->last_run_ns = w.now;
	gc->runs++;
	w.cfg = bpf_map_lookup_elem(&node_config, &zero);
	if (!w.cfg) {
		/* No config to judge by (never expected): nothing walked, come back. */
		__sync_fetch_and_or(&gc->armed, NAT_GC_ARMED);
		bpf_timer_start(&gc->timer, NAT_GC_MIN_NS, 0);
		return 0;
	}
	if (pos >= 2 * n || (pos >= n && !(gc->walk & NAT_GC_WALK6)))
		pos = 0; /* never expected: start a cycle */
	nat_gc_walk_shard(pos, &w);
	took = bpf_ktime_get_ns() - w.now;
	gc->last_run_took_ns = took;
	if (took > gc->max_run_took_ns)
		gc->max_run_took_ns = took;
	gc->cycle_checked += gc->last_checked;
	if (pos >= n)
		gc->cycle6_checked += gc->last_checked;
	pos++;
	steps = (gc->walk & NAT_GC_WALK6) ? 2 * n : n;
	if (pos >= steps) {
		/* The cycle is complete: what it found decides the next one. */
		bool any = gc->cycle_checked || (gc->seen & (NAT_GC_NEW4 | NAT_GC_NEW6));

		gc->walk = (gc->cycle6_checked || (gc->seen & NAT_GC_NEW6)) ? NAT_GC_WALK6 : 0;
		/* Host pairs: the flag follows what the cycle found. Cleared first, then
		 * armed looked at again: a host pair made meanwhile (its maker sets
		 * NEW_HOST before the flag) is never left unflagged. */
		if (gc->seen & (NAT_GC_NEW_HOST | NAT_GC_SEEN_HOST)) {
			__sync_fetch_and_or(&gc->hosts, 1);
		} else if (gc->hosts) {
			__sync_fetch_and_and(&gc->hosts, 0);
			if (gc->armed & NAT_GC_NEW_HOST)
				__sync_fetch_and_or(&gc->hosts, 1);
		}
		gc->last_cycle_checked = gc->cycle_checked;
		gc->cycle_checked = 0;
		gc->cycle6_checked = 0;
		gc->seen = 0;
		gc->cycles++;
		pos = 0;
		gc->pos = 0;
		if (gc->hot)
			bpf_for_each_map_elem(&nat_hot, nat_hot_expire, &w.now, 0);
		if (!any)
			return 0; /* nothing left to expire: idle until the next new pair */
		steps = (gc->walk & NAT_GC_WALK6) ? 2 * n : n;
	}
	gc->pos = pos;
	/* A cycle takes NAT_GC_MIN_NS, stretched by the pairs the last one saw; and
	 * the sweep never takes more than 1/NAT_GC_DUTY of its CPU: the pairs' cost
	 * varies (cache and TLB misses: ~0.3 us a pair in this VM, cold). */
	interval = (NAT_GC_MIN_NS + gc->last_cycle_checked * NAT_GC_NS_PER_PAIR) / steps;
	if (interval < took * NAT_GC_DUTY)
		interval = took * NAT_GC_DUTY;
	__sync_fetch_and_or(&gc->armed, NAT_GC_ARMED);
	bpf_timer_start(&gc->timer, interval, 0);
	return 0;
}

/*
 * nat_gc_prime - the sweep's timer given its memory (bpf_timer_init: -EBUSY, it
 * has it already) and its callback, not started: the loader's run (see
 * NAT_GC_PRIME_MARK). Returns NAT_GC_PRIME_RET + errno (0: primed).
 */
static __always_inline int nat_gc_prime(void)
{
	struct nat_gc *gc = bpf_map_lookup_elem(&nat_gc, &nat_zero_key);
	long err;

	if (!gc)
		return NAT_GC_PRIME_RET + 2; /* ENOENT: never expected */
	err = bpf_timer_init(&gc->timer, &nat_gc, CLOCK_MONOTONIC);
	if (err && err != -EBUSY)
		return NAT_GC_PRIME_RET + (int)-err;
	err = bpf_timer_set_callback(&gc->timer, nat_gc_run);
	if (err)
		return NAT_GC_PRIME_RET + (int)-err;
	return NAT_GC_PRIME_RET;
}

/*
 * nat_gc_ensure - after a new pair: tell the sweep (NAT_GC_NEW4/NEW6, and
 * NAT_GC_NEW_HOST with the hosts flag for a host pair) and arm it
 * if it is not running (the node's first pair, or the first after a cycle found
 * the table empty and stopped). Cheap when armed and told: one lookup, one read.
 * Racing CPUs are harmless: the second init says EBUSY and starting twice re-arms.
 * The loader primed the timer (nat_gc_prime), so init says EBUSY and nothing is
 * allocated here; if priming failed, this init allocates, and a failure is
 * counted and tried again by the next new pair.
 */
static __always_inline void nat_gc_ensure(bool v6, bool host)
{
	__u64 bit = (v6 ? NAT_GC_NEW6 : NAT_GC_NEW4) | (host ? NAT_GC_NEW_HOST : 0);
	struct nat_gc *gc;
	long err;

	gc = bpf_map_lookup_elem(&nat_gc, &nat_zero_key);
	if (!gc)
		return;
	if ((gc->armed & bit) != bit)
		__sync_fetch_and_or(&gc->armed, bit);
	if (host && !gc->hosts)
		__sync_fetch_and_or(&gc->hosts, 1); /* after NEW_HOST: see nat_gc_run */
	if (gc->armed & NAT_GC_ARMED)
		return;
	err = bpf_timer_init(&gc->timer, &nat_gc, CLOCK_MONOTONIC);
	if ((err && err != -EBUSY) ||
	    bpf_timer_set_callback(&gc->timer, nat_gc_run) ||
	    bpf_timer_start(&gc->timer, NAT_GC_MIN_NS, 0)) {
		/* e.g. no memory right now (bpf_timer_init allocates): the next new pair tries again */
		count_add(CNT_NAT_GC_ARM_FAILED, 1);
		return;
	}
	__sync_fetch_and_or(&gc->armed, NAT_GC_ARMED);
}

#endif /* MASQ_NAT_GC_H */
