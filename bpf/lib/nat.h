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
#include "icmp_err.h"
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
 * Before either, the ports a new flow prefers (nat_tmpl.h map_prefer): its pod
 * endpoint's existing mapping, then the pod's own port. A power of two.
 */
#define NAT_PREFERRED 2
/*
 * A finished TCP pair (FIN both ways, or RST) gives its port to a new flow once
 * it has been quiet this long (its last state change refreshed last_seen): time
 * for the last FIN's ACK, or a retransmission of it, to pass through the pair.
 */
#define NAT_FINISHED_GRACE_NS (2 * NSEC_PER_SEC)
/*
 * A UDP pair with a packet this long after its first is a stream (natTimeouts.udp);
 * before, a one-shot flow (natTimeouts.udpOneShot), as netfilter tells them apart.
 */
#define NAT_UDP_STREAM_NS (2 * NSEC_PER_SEC)

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
	const struct masq_config *cfg;
	struct nat_gc *gc;
	__u64 now;
};

static __always_inline void nat_gc_ensure(bool v6, bool host);

#ifndef E2BIG
#define E2BIG 7               /* a hash map at max_entries refuses a new key */
#endif
#ifndef ENOENT
#define ENOENT 2
#endif
#ifndef EBUSY
#define EBUSY 16
#endif
#ifndef EEXIST
#define EEXIST 17
#endif
#define NAT_NEW_OK (-1)       /* snat_new: the flow's pair exists */
#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1
#endif

/*
 * nat_port_ok - may a new pair take @port (host order)? Inside portRange and
 * outside the ports never handed out (nodePortRange: NodePorts have no socket
 * that host_holds could find).
 */
static __always_inline bool nat_port_ok(const struct masq_config *cfg, __u16 port)
{
	return port >= cfg->port_min && port <= cfg->port_max &&
	       !(cfg->skip_max && port >= cfg->skip_min && port <= cfg->skip_max);
}

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

/*
 * The node's shard seed and shard count (less one: a mask): constants of the
 * loaded programs (the loader sets them, and records them in masq_config for
 * the plugin), so picking a shard costs no map lookup and no branch.
 */
const volatile __u32 nat_seed = 0;
const volatile __u32 nat_shard_mask = 0;

/* Key 0 of an array map, in .rodata: a lookup with it needs no stack slot. */
static const __u32 nat_zero_key = 0;

static const __u32 nat_shard_keys[10] = {
	0xc2c063fe, 0x239eed24, 0x958507ad, 0xf768064f, 0x0e9a8df5,
	0x55113dc3, 0xe0c67744, 0x5966eb44, 0xfcb042d9, 0x4ca82984,
};

/*
 * nat_shard - the shard of a forward key: an NH hash (UMAC's: the sum of
 * products of key-word pairs, each word offset by a key) over its 32-bit words,
 * keyed by the node's random seed (nat_seed), so a pod cannot aim its flows at one
 * shard and fill it. The products are independent of each other, so the hash
 * costs about one multiply's latency, not one per word. plugin/src/bpf/abi.rs
 * nat_shard() computes the same.
 */
static __always_inline __u32 nat_shard(const __u32 *w, int words, __u32 seed)
{
	__u64 sum = 0;
	__u32 h;

#pragma unroll
	for (int i = 0; i + 1 < words; i += 2)
		sum += (__u64)(__u32)(w[i] + (seed ^ nat_shard_keys[i])) *
		       (__u32)(w[i + 1] + (seed ^ nat_shard_keys[i + 1]));
	/* murmur3's finaliser: every bit reaches the bits the shard is taken from. */
	h = (__u32)sum ^ (__u32)(sum >> 32);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h & nat_shard_mask;
}

/*
 * The shard of a forward key, as global functions: the verifier checks a global
 * function once, on its own, where the hash inlined would be checked again on
 * every path that reaches a lookup (it doubled the uplink program's verification).
 * A key pointer of a global function may be NULL as far as the verifier knows.
 */
__attribute__((noinline)) __u32 nat_shard4(const struct nat4_key *k)
{
	return k ? nat_shard((const __u32 *)k, sizeof(*k) / 4, nat_seed) : 0;
}

__attribute__((noinline)) __u32 nat_shard6(const struct nat6_key *k)
{
	return k ? nat_shard((const __u32 *)k, sizeof(*k) / 4, nat_seed) : 0;
}

/* The shard (inner hash map) of @outer that holds forward key @key, or NULL. */
#define NAT_FWD_SHARD(outer, key, shard_fn)                                                \
	({                                                                                 \
		__u32 __i = shard_fn(key);                                                 \
		bpf_map_lookup_elem(outer, &__i);                                          \
	})

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

/*
 * The decision for the reply of a packet that came in on @ifindex: would a
 * packet from its destination to its source leave masqueraded? Asked quietly
 * (no "skipped" counters): it is about a packet that does not exist yet.
 */
static __noinline void decide4_reply(__u32 ifindex, const struct uplink_info *up, const struct flow4 *f,
				     struct masq_decision4 *d)
{
	masq_decide_v4(ifindex, up, f->daddr, f->saddr, d, false);
}

static __noinline void decide6_reply(__u32 ifindex, const struct uplink_info *up, const struct flow6 *f,
				     struct masq_decision6 *d)
{
	masq_decide_v6(ifindex, up, &f->daddr, &f->saddr, d, false);
}

/*
 * The flags a half takes from its other half (@from) when the two are brought in
 * step: the pair's state (closing) comes across; how each direction ended
 * (NAT_F_ENDS) stays with its own half, and is forgotten once the pair is open
 * again (a new connection on the same tuple).
 */
static __always_inline __u8 nat_flags_synced(__u8 from, __u8 to)
{
	return (from & ~NAT_F_ENDS) | ((from & NAT_F_TCP_CLOSING) ? (to & NAT_F_ENDS) : 0);
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
#define SHARD_FN nat_shard4
#define MAP_REV nat4_rev
#define MAP_BIND nat4_bind
#define EP_T struct nat4_ep
#define BIND_T struct nat4_bind
#define MAP_OPEN nat4_open
#define OPEN_T struct nat4_open
#define MAP_PERMIT nat4_permit
#define PERMITKEY_T struct nat4_permit_key
#define PERMIT_T struct nat4_permit
#define ADDR_T __be32
#define MAP_FRAG frag4
#define ADDR_EQ(a, b) (*(a) == *(b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V4)
#define UPLINK_ADDR(up) (&(up)->masq_v4)
#define PARSE parse_flow4
#define PARSE_INNER parse_inner4
#define DECIDE decide4
#define DECIDE_REPLY decide4_reply
#define REWRITE nat4_rewrite
#define REWRITE_ADDR nat4_rewrite_addr
#define ICMP_ERR_REWRITE icmp4_err_rewrite
#define QUOTES_POD inner4_quotes_pod
#define ECHO_REPLY ICMP_ECHOREPLY
#define ECHO_REQUEST ICMP_ECHO
#define ICMP_PROTO IPPROTO_ICMP
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V4
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V4
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V4
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V4
#define FP_REPLY fp_reply_v4
#define SK_TUPLE_LEN sizeof(((struct bpf_sock_tuple *)0)->ipv4)
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
#define SHARD_FN nat_shard6
#define MAP_REV nat6_rev
#define MAP_BIND nat6_bind
#define EP_T struct nat6_ep
#define BIND_T struct nat6_bind
#define MAP_OPEN nat6_open
#define OPEN_T struct nat6_open
#define MAP_PERMIT nat6_permit
#define PERMITKEY_T struct nat6_permit_key
#define PERMIT_T struct nat6_permit
#define ADDR_T struct in6_addr
#define MAP_FRAG frag6
#define ADDR_EQ(a, b) ipv6_addr_equal((a), (b))
#define UPLINK_HAS(up) ((up)->flags & UPLINK_F_HAS_V6)
#define UPLINK_ADDR(up) ((const struct in6_addr *)(up)->masq_v6)
#define PARSE parse_flow6
#define PARSE_INNER parse_inner6
#define DECIDE decide6
#define DECIDE_REPLY decide6_reply
#define REWRITE nat6_rewrite
#define REWRITE_ADDR nat6_rewrite_addr
#define ICMP_ERR_REWRITE icmp6_err_rewrite
#define QUOTES_POD inner6_quotes_pod
#define ECHO_REPLY ICMPV6_ECHO_REPLY
#define ECHO_REQUEST ICMPV6_ECHO_REQUEST
#define ICMP_PROTO IPPROTO_ICMPV6
#define CNT_SNAT_PKTS CNT_SNAT_PKTS_V6
#define CNT_SNAT_BYTES CNT_SNAT_BYTES_V6
#define CNT_RNAT_PKTS CNT_RNAT_PKTS_V6
#define CNT_RNAT_BYTES CNT_RNAT_BYTES_V6
#define FP_REPLY(skb, up, f, addr) fp_reply_v6(skb, up, f, &(addr))
#define SK_TUPLE_LEN sizeof(((struct bpf_sock_tuple *)0)->ipv6)
#define NAT_IS_V6 true
#include "nat_tmpl.h"

/*
 * nat_gc_walk_shard - walk one forward shard (a bpf_for_each_map_elem over a
 * hash map visits every bucket, used or not: natMaxEntries / nat_shards of them).
 */
static __always_inline void nat_gc_walk_shard(__u32 pos, struct nat_gc_walk *w)
{
	__u32 n = nat_shard_mask + 1, i = pos < n ? pos : pos - n;
	void *m;

	if (pos < n) {
		m = bpf_map_lookup_elem(&nat4_fwd, &i);
		if (m)
			bpf_for_each_map_elem(m, gc_pair_v4, w, 0);
	} else {
		m = bpf_map_lookup_elem(&nat6_fwd, &i);
		if (m)
			bpf_for_each_map_elem(m, gc_pair_v6, w, 0);
	}
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
	w.cfg = bpf_map_lookup_elem(&masq_config, &zero);
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
 * nat_gc_ensure - after a new pair: tell the sweep (NAT_GC_NEW4/NEW6, and
 * NAT_GC_NEW_HOST with the hosts flag for a host pair) and arm it
 * if it is not running (the node's first pair, or the first after a cycle found
 * the table empty and stopped). Cheap when armed and told: one lookup, one read.
 * Racing CPUs are harmless: the second init says EBUSY and starting twice re-arms.
 */
static __always_inline void nat_gc_ensure(bool v6, bool host)
{
	__u64 bit = (v6 ? NAT_GC_NEW6 : NAT_GC_NEW4) | (host ? NAT_GC_NEW_HOST : 0);
	struct nat_gc *gc;
	__u32 zero = 0;
	long err;

	gc = bpf_map_lookup_elem(&nat_gc, &zero);
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

#endif /* MASQ_NAT_H */
