//! What the NAT tables cost in kernel memory, from the map definitions
//! (bpf/lib/maps.h, masq_abi_nat.h) and the kernel's hash map layout. BPF map
//! memory is charged to the memory cgroup of the process that created the maps
//! (the agent's container, whose first apply creates them), the pairs' elements
//! included as flows create them; a full table past that cgroup's limit makes
//! new pairs fail (and may OOM-kill the agent).
//!
//! The figures follow kernel/bpf/hashtab.c (Linux 6.x): an element is a 48-byte
//! `struct htab_elem` header, the key and the value each rounded up to 8 bytes;
//! a preallocated map (the LRU maps) takes all its elements at creation, a
//! `BPF_F_NO_PREALLOC` one (the NAT halves) one element per entry in use from
//! bpf_mem_alloc, i.e. kmalloc of the element plus its 8-byte free-list node,
//! rounded up to kmalloc's size class, plus the slab's 8-byte memcg pointer.
//! Every hash map takes a 16-byte bucket per max_entries rounded up to a power
//! of two at creation. (`bpftool map show` reports the same per map as
//! `memlock`: the buckets and, for the LRU maps, the elements.)

use super::abi;

const ELEM_HEADER: u64 = 48;
const BUCKET: u64 = 16;
const FREE_LIST_NODE: u64 = 8;
const MEMCG_POINTER: u64 = 8;
const MIB: u64 = 1 << 20;

fn round8(n: usize) -> u64 {
    (n as u64).div_ceil(8) * 8
}

/// The size class kmalloc serves `n` bytes from (kmalloc-8 ... kmalloc-8k).
fn kmalloc_class(n: u64) -> u64 {
    match n {
        0..=8 => 8,
        9..=16 => 16,
        17..=32 => 32,
        33..=64 => 64,
        65..=96 => 96,
        97..=128 => 128,
        129..=192 => 192,
        _ => n.next_power_of_two(),
    }
}

fn buckets(max_entries: u64) -> u64 {
    BUCKET * max_entries.next_power_of_two()
}

/// A preallocated (LRU) hash map of `max_entries` (key K, value V), whole.
fn prealloc<K, V>(max_entries: u32) -> u64 {
    let n = u64::from(max_entries);
    n * (ELEM_HEADER + round8(size_of::<K>()) + round8(size_of::<V>())) + buckets(n)
}

/// One entry of a `BPF_F_NO_PREALLOC` hash map (key K, value V).
fn element<K, V>() -> u64 {
    kmalloc_class(ELEM_HEADER + round8(size_of::<K>()) + round8(size_of::<V>()) + FREE_LIST_NODE) + MEMCG_POINTER
}

/// The NAT tables' memory at one `natMaxEntries`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatMemory {
    pub nat_max_entries: u32,
    /// Taken when the maps are created: the NAT halves' buckets (both families)
    /// and the preallocated mapping hints, open mappings and permits.
    pub up_front: u64,
    /// Per IPv4 pair in use: its forward and reverse halves.
    pub per_pair4: u64,
    /// Per IPv6 pair in use.
    pub per_pair6: u64,
}

impl NatMemory {
    pub fn new(nat_max_entries: u32) -> NatMemory {
        let n = u64::from(nat_max_entries);
        let shards = u64::from(abi::shards_for(nat_max_entries));
        // Per family: the reverse map, and the forward shards of n / shards each.
        let halves = buckets(n) + shards * buckets(n / shards);
        let (bind, open) = (nat_max_entries.min(abi::BIND_ENTRIES_MAX), nat_max_entries.min(abi::OPEN_ENTRIES_MAX));
        let lru = prealloc::<abi::Nat4Ep, abi::Nat4Bind>(bind)
            + prealloc::<abi::Nat6Ep, abi::Nat6Bind>(bind)
            + prealloc::<abi::Nat4Ep, abi::Nat4Open>(open)
            + prealloc::<abi::Nat6Ep, abi::Nat6Open>(open)
            + prealloc::<abi::Nat4PermitKey, abi::Nat4Permit>(open)
            + prealloc::<abi::Nat6PermitKey, abi::Nat6Permit>(open);
        NatMemory {
            nat_max_entries,
            up_front: 2 * halves + lru,
            per_pair4: 2 * element::<abi::Nat4Key, abi::Nat4Entry>(),
            per_pair6: 2 * element::<abi::Nat6Key, abi::Nat6Entry>(),
        }
    }

    /// Everything, with the IPv4 table full (natMaxEntries pairs).
    pub fn full_ipv4(&self) -> u64 {
        self.up_front + u64::from(self.nat_max_entries) * self.per_pair4
    }

    /// Everything, with both families' tables full.
    pub fn full_dual_stack(&self) -> u64 {
        self.full_ipv4() + u64::from(self.nat_max_entries) * self.per_pair6
    }
}

/// Bytes to MiB, rounded up (a figure for a limit).
pub fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes_follow_the_structs() {
        // nat4: key 16, value 56: 48 + 16 + 56 + 8 = 128 (kmalloc-128), + 8 per half.
        assert_eq!((size_of::<abi::Nat4Key>(), size_of::<abi::Nat4Entry>()), (16, 56));
        assert_eq!(element::<abi::Nat4Key, abi::Nat4Entry>(), 136);
        // nat6: key 40, value 72: 168, kmalloc-192.
        assert_eq!((size_of::<abi::Nat6Key>(), size_of::<abi::Nat6Entry>()), (40, 72));
        assert_eq!(element::<abi::Nat6Key, abi::Nat6Entry>(), 200);
        assert_eq!([kmalloc_class(1), kmalloc_class(96), kmalloc_class(97), kmalloc_class(193)], [8, 96, 128, 256]);
    }

    #[test]
    fn lru_maps_match_bpftool_memlock() {
        // bpftool map show memlock of the default node's hint maps: 5,242,880 and 7,340,032 B.
        assert_eq!(prealloc::<abi::Nat4Ep, abi::Nat4Bind>(65_536), 5 * MIB);
        assert_eq!(prealloc::<abi::Nat6Ep, abi::Nat6Bind>(65_536), 7 * MIB);
    }

    #[test]
    fn the_default_table() {
        let m = NatMemory::new(1 << 20);
        // 64 shards of 16,384 and a reverse map of 1,048,576: 32 MiB of buckets per family;
        // 19 MiB of LRU maps.
        assert_eq!(m.up_front, 64 * MIB + 19 * MIB);
        assert_eq!((m.per_pair4, m.per_pair6), (272, 400));
        assert_eq!(mib(m.full_ipv4()), 83 + 272);
        assert_eq!(mib(m.full_dual_stack()), 83 + 272 + 400);
    }

    #[test]
    fn small_tables_and_the_largest() {
        // Below 2,048 entries: one shard of them all; every map at 1,024 entries.
        let m = NatMemory::new(1024);
        assert_eq!(abi::shards_for(1024), 1);
        let lru_kib = (64 + 16) + (96 + 16) + (80 + 16) + (112 + 16) + (80 + 16) + (112 + 16);
        assert_eq!(m.up_front, (4 * 16 + lru_kib) * 1024);
        // The largest accepted: 16,777,216 pairs a family, 64 shards of 262,144:
        // 512 MiB of buckets per family; ~11 GiB with both tables full.
        let m = NatMemory::new(16_777_216);
        assert_eq!(mib(m.full_dual_stack()), 2 * 512 + 19 + 16 * (272 + 400));
    }
}
