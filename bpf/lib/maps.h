/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every map, pinned by name under <pinPath>/v<MASQ_LAYOUT_VERSION>/ so that the
 * veth and uplink objects, and every later plugin process, share one copy.
 * The NAT maps' sizes come from natMaxEntries (the loader).
 */
#ifndef MASQ_MAPS_H
#define MASQ_MAPS_H

#include "common.h"

/*
 * One macro per map kind, so that each map is one line: @name, @max entries of
 * @key_t -> @value_t, pinned by name; @... are further fields (map_flags). The
 * fields keep the order libbpf's examples use (type, max_entries, key, value,
 * map_flags, pinning).
 */
#define MAP_PINNED(name, type_, max, key_t, value_t, ...)			\
	struct {								\
		__uint(type, type_);						\
		__uint(max_entries, max);					\
		__type(key, key_t);						\
		__type(value, value_t);						\
		__VA_ARGS__							\
		__uint(pinning, LIBBPF_PIN_BY_NAME);				\
	} name SEC(".maps")

#define MAP_FLAGS(flags) __uint(map_flags, flags);

/* Indexed by a __u32. */
#define ARRAY_MAP(name, max, value_t) MAP_PINNED(name, BPF_MAP_TYPE_ARRAY, max, __u32, value_t)
#define PERCPU_ARRAY_MAP(name, max, value_t) MAP_PINNED(name, BPF_MAP_TYPE_PERCPU_ARRAY, max, __u32, value_t)
/* Evicts its least recently used entry when full: for state that may be lost. */
#define LRU_HASH_MAP(name, max, key_t, value_t) MAP_PINNED(name, BPF_MAP_TYPE_LRU_HASH, max, key_t, value_t)
/* Written by the plugin only (or allocated as records are made): no upfront memory. */
#define HASH_MAP(name, max, key_t, value_t)						\
	MAP_PINNED(name, BPF_MAP_TYPE_HASH, max, key_t, value_t, MAP_FLAGS(BPF_F_NO_PREALLOC))
#define PERCPU_HASH_MAP(name, max, key_t, value_t)					\
	MAP_PINNED(name, BPF_MAP_TYPE_PERCPU_HASH, max, key_t, value_t, MAP_FLAGS(BPF_F_NO_PREALLOC))
/* Longest-prefix match; the kernel requires BPF_F_NO_PREALLOC. */
#define LPM_MAP(name, max, key_t, value_t)						\
	MAP_PINNED(name, BPF_MAP_TYPE_LPM_TRIE, max, key_t, value_t, MAP_FLAGS(BPF_F_NO_PREALLOC))

/*
 * A map of one kind for each family, @name4 and @name6, alike but for their
 * key and value types (which the ABI names per family, not always by pattern).
 */
#define MAP_PER_FAMILY(kind, max, name4, key4_t, value4_t, name6, key6_t, value6_t)	\
	kind(name4, max, key4_t, value4_t);						\
	kind(name6, max, key6_t, value6_t)

/* Key 0 of an array map, in .rodata: a lookup with it needs no stack slot (see cnt_keys). */
static const __u32 nat_zero_key = 0;

ARRAY_MAP(node_config, 1, struct node_config);
MAP_PER_FAMILY(HASH_MAP, 65536, pods4, __be32, struct pod_info,
				pods6, struct in6_addr, struct pod_info);
MAP_PER_FAMILY(LPM_MAP, 1024, svc4, struct lpm4_key, __u32,
			      svc6, struct lpm6_key, __u32);
HASH_MAP(uplinks, 64, __u32, struct uplink_info);
HASH_MAP(host_ports, HOST_PORTS_MAX, struct host_port, __u32);
ARRAY_MAP(masq_pool, 1 + EGRESS_POLICIES_MAX, struct masq_pool);
ARRAY_MAP(uplinks_direct, UPLINKS_DIRECT, struct uplink_info);

/* The uplink entry of @ifindex, or NULL: not an uplink (see uplinks_direct). */
static __always_inline struct uplink_info *uplink_get(__u32 ifindex)
{
	struct uplink_info *up;

	if (ifindex < UPLINKS_DIRECT) {
		up = bpf_map_lookup_elem(&uplinks_direct, &ifindex);
		return up && (up->flags & UPLINK_F_PRESENT) ? up : NULL;
	}
	return bpf_map_lookup_elem(&uplinks, &ifindex);
}

MAP_PER_FAMILY(LPM_MAP, 1024, excl4, struct lpm4_key, struct excl_info,
			      excl6, struct lpm6_key, struct excl_info);
MAP_PER_FAMILY(LPM_MAP, POD_NETS_MAX, pod_nets4, struct lpm4_key, struct pod_net_info,
			      pod_nets6, struct lpm6_key, struct pod_net_info);
LPM_MAP(rules4, MAX_RULES, struct rule4_key, struct rule_info);
LPM_MAP(rule_except4, 4096, struct rule_except4_key, __u32);
PERCPU_ARRAY_MAP(rule_stats, MAX_RULES, struct rule_stats);
MAP_PER_FAMILY(LPM_MAP, POLICY_DSTS_MAX, policy_dst4, struct policy_dst4_key, struct policy_hit,
					    policy_dst6, struct policy_dst6_key, struct policy_hit);
PERCPU_ARRAY_MAP(policy_stats, EGRESS_POLICIES_MAX, struct policy_stats);
ARRAY_MAP(egress_policies, EGRESS_POLICIES_MAX, struct egress_policy);

/*
 * A family's NAT pairs. The forward halves: up to NAT_SHARDS_MAX hash maps
 * behind an array (see masq_abi.h). The loader creates the shards
 * (natMaxEntries / nat_shards entries each) and puts them in before any program
 * is pinned; @shard is only the template they must match (type, key and value sizes,
 * flags). The reverse halves: one hash map, sized by the loader.
 */
#define NAT_PAIR_MAPS(shard, fwd, rev, key_t, entry_t)				\
	struct shard {								\
		__uint(type, BPF_MAP_TYPE_HASH);				\
		__uint(max_entries, 4096);					\
		/* sizes, not BTF types, as the shards: 6.1's meta check compares BTF's timer_off */ \
		__uint(key_size, sizeof(key_t));				\
		__uint(value_size, sizeof(entry_t));				\
		__uint(map_flags, NAT_MAP_FLAGS);				\
	};									\
	struct {								\
		__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);			\
		__uint(max_entries, NAT_SHARDS_MAX);				\
		__type(key, __u32);						\
		__uint(pinning, LIBBPF_PIN_BY_NAME);				\
		__array(values, struct shard);					\
	} fwd SEC(".maps");							\
	MAP_PINNED(rev, BPF_MAP_TYPE_HASH, 65536, key_t, entry_t, MAP_FLAGS(NAT_MAP_FLAGS))

NAT_PAIR_MAPS(nat4_shard, nat4_fwd, nat4_rev, struct nat4_key, struct nat4_entry);
LPM_MAP(rules6, MAX_RULES, struct rule6_key, struct rule6_info);
LPM_MAP(rule_except6, 4096, struct rule_except6_key, __u32);
NAT_PAIR_MAPS(nat6_shard, nat6_fwd, nat6_rev, struct nat6_key, struct nat6_entry);

/* Endpoint-independent mapping hints (masq_abi.h); the loader sizes them to natMaxEntries. */
MAP_PER_FAMILY(LRU_HASH_MAP, 65536, nat4_bind, struct nat4_ep, struct nat4_bind,
				    nat6_bind, struct nat6_ep, struct nat6_bind);
/* natFiltering's open mappings and address permits (masq_abi.h); sized to natMaxEntries. */
MAP_PER_FAMILY(LRU_HASH_MAP, 65536, nat4_open, struct nat4_ep, struct nat4_open,
				    nat6_open, struct nat6_ep, struct nat6_open);
MAP_PER_FAMILY(LRU_HASH_MAP, 65536, nat4_permit, struct nat4_permit_key, struct nat4_permit,
				    nat6_permit, struct nat6_permit_key, struct nat6_permit);
ARRAY_MAP(nat_gc, 1, struct nat_gc);
/* The ports towards busy remote endpoints (masq_abi.h). Allocated as records are made. */
HASH_MAP(nat_hot, NAT_HOT_MAX, struct nat_hot_key, struct nat_hot);
/* A zeroed record: what a new nat_hot record is copied from (the stack is too small). Never written. */
ARRAY_MAP(nat_hot_zero, 1, struct nat_hot);
/* New flows refused per source address (masq_abi.h refusals). */
LRU_HASH_MAP(refusals, REFUSALS_MAX, struct refusal_key, struct refusals);
/* Upper bounds of the ports pods with a port limit hold per remote endpoint (masq_abi.h port_counts). */
LRU_HASH_MAP(port_counts, PORT_COUNTS_MAX, struct port_count_key, __u32);
ARRAY_MAP(reserved_ports, RESERVED_PORTS_MAX, struct port_range);
/* Fragment state lives seconds at most; LRU eviction is its expiry. */
MAP_PER_FAMILY(LRU_HASH_MAP, 16384, frag4, struct frag4_key, struct frag_ports,
				    frag6, struct frag6_key, struct frag_ports);
PERCPU_HASH_MAP(veths, 65536, __u32, struct veth_info);
PERCPU_ARRAY_MAP(counters, CNT_MAX, __u64);
PERCPU_ARRAY_MAP(drops, DROP_MAX, __u64);
HASH_MAP(attachments, 65536, struct attachment_key, struct attachment_info);
HASH_MAP(pod_meta, 65536, struct attachment_key, struct pod_meta);

/* The counters' keys, in .rodata: a count takes no stack slot (Linux 6.1's stack
 * check rounds each frame of a call chain up to 32 bytes: the port search's fit). */
#define CNT_KEYS8(k) k, k + 1, k + 2, k + 3, k + 4, k + 5, k + 6, k + 7
static const __u32 cnt_keys[] = { CNT_KEYS8(0), CNT_KEYS8(8), CNT_KEYS8(16), CNT_KEYS8(24), CNT_KEYS8(32) };
_Static_assert(sizeof(cnt_keys) / sizeof(cnt_keys[0]) >= CNT_MAX, "cnt_keys: a key for every counter");

static __always_inline void count_add(__u32 idx, __u64 n)
{
	__u64 *c;

	if (idx >= CNT_MAX)
		return;
	c = bpf_map_lookup_elem(&counters, &cnt_keys[idx]);
	if (c)
		*c += n;
}

#endif /* MASQ_MAPS_H */
