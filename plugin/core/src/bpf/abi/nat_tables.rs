//! The NAT tables' helpers on top of the generated ABI (re-exported by abi): the
//! forward shards and their hash, and addresses as the programs' `__u32 addr[4]`
//! fields hold them.

use super::generated::{NAT_SHARDS_MAX, NAT_SHARD_ENTRIES};

/// The forward shards for a table of `nat_max_entries` pairs: the largest power
/// of two up to NAT_SHARDS_MAX that leaves each at least NAT_SHARD_ENTRIES.
pub fn shards_for(nat_max_entries: u32) -> u32 {
    let fit = (nat_max_entries / NAT_SHARD_ENTRIES).max(1);
    (1u32 << (31 - fit.leading_zeros())).min(NAT_SHARDS_MAX)
}

/// A source address as a busy endpoint's counts key it (bpf/lib/nat/pair_tmpl.h
/// `src_id`): the native-endian words of the address XORed; never 0.
pub fn src_id(a: std::net::IpAddr) -> u32 {
    let id = addr_words(a).iter().fold(0, |id, w| id ^ w); // IPv4: words 1-3 are 0
    if id == 0 { 1 } else { id }
}

/// An address as the programs' `__u32 addr[4]` fields hold it (native-endian
/// words of its bytes; IPv4 in word 0, the rest 0): nat_hot_key, refusal_key.
pub fn addr_words(a: std::net::IpAddr) -> [u32; 4] {
    let mut w = [0u32; 4];
    match a {
        std::net::IpAddr::V4(a) => w[0] = u32::from_ne_bytes(a.octets()),
        std::net::IpAddr::V6(a) => {
            for (i, c) in a.octets().chunks(4).enumerate() {
                w[i] = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }
    w
}

/// Per-word offsets of the shard hash (`nat_shard_keys` in bpf/lib/nat/shard.h, checked
/// against it by a test), each
/// xor-ed with the node's seed.
pub(super) const NAT_SHARD_KEYS: [u32; 10] =
    [0xc2c063fe, 0x239eed24, 0x958507ad, 0xf768064f, 0x0e9a8df5, 0x55113dc3, 0xe0c67744, 0x5966eb44, 0xfcb042d9, 0x4ca82984];

/// The shard of a forward NAT key: the same keyed NH hash as `nat_shard()` in
/// bpf/lib/nat/nat.h, over the key's native-endian 32-bit words (16 or 40 bytes),
/// for `shards` shards (a power of two).
pub fn nat_shard(key_bytes: &[u8], seed: u32, shards: u32) -> u32 {
    let w: Vec<u32> = key_bytes.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
    let sum = w.chunks_exact(2).zip(NAT_SHARD_KEYS.chunks_exact(2)).fold(0u64, |sum, (p, k)| {
        let a = p[0].wrapping_add(seed ^ k[0]);
        let b = p[1].wrapping_add(seed ^ k[1]);
        sum.wrapping_add(u64::from(a) * u64::from(b))
    });
    // murmur3's finaliser: every bit reaches the bits the shard is taken from.
    let mut h = (sum as u32) ^ ((sum >> 32) as u32);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h & (shards - 1)
}
