/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every map, pinned by name under <pinPath>/v<MASQ_LAYOUT_VERSION>/ so that the
 * veth and uplink objects, and every later plugin process, share one copy.
 * The NAT maps' sizes come from natMaxEntries (the loader).
 */
#ifndef MASQ_MAPS_H
#define MASQ_MAPS_H

#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct masq_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} masq_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __be32);
	__type(value, struct pod_info);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pods4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct in6_addr);
	__type(value, struct pod_info);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pods6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct lpm4_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} svc4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct lpm6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} svc6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct uplink_info);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} uplinks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HOST_PORTS_MAX);
	__type(key, struct host_port);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} host_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 + EGRESS_POLICIES_MAX);
	__type(key, __u32);
	__type(value, struct masq_pool);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} masq_pool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UPLINKS_DIRECT);
	__type(key, __u32);
	__type(value, struct uplink_info);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} uplinks_direct SEC(".maps");

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

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct lpm4_key);
	__type(value, struct excl_info);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} excl4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct lpm6_key);
	__type(value, struct excl_info);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} excl6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_RULES);
	__type(key, struct rule4_key);
	__type(value, struct rule_info);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rules4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__type(key, struct rule_except4_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rule_except4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rule_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGRESS_ENTRIES_MAX);
	__type(key, struct egress4_key);
	__type(value, struct egress_hit);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egress4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGRESS_ENTRIES_MAX);
	__type(key, struct egress6_key);
	__type(value, struct egress_hit);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egress6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGRESS_POLICIES_MAX);
	__type(key, __u32);
	__type(value, struct egress_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egress_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EGRESS_POLICIES_MAX);
	__type(key, __u32);
	__type(value, struct egress_policy);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egress_policies SEC(".maps");

/*
 * The forward halves: up to NAT_SHARDS_MAX hash maps behind an array (see masq_abi.h).
 * The loader creates the shards (natMaxEntries / nat_shards entries each) and
 * puts them in before any program is pinned; the definition here is only the
 * template they must match (type, key, value, flags).
 */
struct nat4_shard {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nat4_key);
	__type(value, struct nat4_entry);
	__uint(map_flags, NAT_MAP_FLAGS);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, NAT_SHARDS_MAX);
	__type(key, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct nat4_shard);
} nat4_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat4_key);
	__type(value, struct nat4_entry);
	__uint(map_flags, NAT_MAP_FLAGS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat4_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_RULES);
	__type(key, struct rule6_key);
	__type(value, struct rule6_info);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rules6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__type(key, struct rule_except6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rule_except6 SEC(".maps");

struct nat6_shard {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nat6_key);
	__type(value, struct nat6_entry);
	__uint(map_flags, NAT_MAP_FLAGS);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, NAT_SHARDS_MAX);
	__type(key, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct nat6_shard);
} nat6_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat6_key);
	__type(value, struct nat6_entry);
	__uint(map_flags, NAT_MAP_FLAGS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat6_rev SEC(".maps");

/* Endpoint-independent mapping hints (masq_abi.h); the loader sizes them to natMaxEntries. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat4_ep);
	__type(value, struct nat4_bind);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat4_bind SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat6_ep);
	__type(value, struct nat6_bind);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat6_bind SEC(".maps");

/* natFiltering's open mappings and address permits (masq_abi.h); sized to natMaxEntries. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat4_ep);
	__type(value, struct nat4_open);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat4_open SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat6_ep);
	__type(value, struct nat6_open);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat6_open SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat4_permit_key);
	__type(value, struct nat4_permit);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat4_permit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct nat6_permit_key);
	__type(value, struct nat6_permit);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat6_permit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nat_gc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_gc SEC(".maps");

/* The ports towards busy remote endpoints (masq_abi.h). Allocated as records are made. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NAT_HOT_MAX);
	__type(key, struct nat_hot_key);
	__type(value, struct nat_hot);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_hot SEC(".maps");

/* A zeroed record: what a new nat_hot record is copied from (the stack is too small). Never written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nat_hot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_hot_zero SEC(".maps");

/* New flows refused per source address (masq_abi.h refusals). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, REFUSALS_MAX);
	__type(key, struct refusal_key);
	__type(value, struct refusals);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} refusals SEC(".maps");

/* Upper bounds of the ports pods with a port limit hold per remote endpoint (masq_abi.h port_counts). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PORT_COUNTS_MAX);
	__type(key, struct port_count_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} port_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RESERVED_PORTS_MAX);
	__type(key, __u32);
	__type(value, struct port_range);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} reserved_ports SEC(".maps");

/* Fragment state lives seconds at most; LRU eviction is its expiry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frag4_key);
	__type(value, struct frag_ports);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frag6_key);
	__type(value, struct frag_ports);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} frag6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct veth_info);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} veths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct attachment_key);
	__type(value, struct attachment_info);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} attachments SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct attachment_key);
	__type(value, struct pod_meta);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* written by the plugin only: no upfront memory */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} pod_meta SEC(".maps");

static __always_inline void count_add(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += n;
}

/* Count the drop and return the TC verdict that drops the packet. */
static __always_inline int drop_with(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&drops, &reason);

	if (c)
		*c += 1;
	return MASQ_DROP;
}

#endif /* MASQ_MAPS_H */
