/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The forward maps' shards (nat4_fwd / nat6_fwd are arrays of hash maps): the
 * keyed hash that picks a forward key's shard, and the lookup of that shard.
 * Reads the loader's constants (nat_seed, nat_shard_mask) and the outer map only.
 */
#ifndef MASQ_NAT_SHARD_H
#define MASQ_NAT_SHARD_H

#include "../maps.h"

/*
 * The node's shard seed and shard count (less one: a mask): constants of the
 * loaded programs (the loader sets them, and records them in node_config for
 * the plugin), so picking a shard costs no map lookup and no branch.
 */
const volatile __u32 nat_seed = 0;
const volatile __u32 nat_shard_mask = 0;

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

#endif /* MASQ_NAT_SHARD_H */
