//! The NAT tables' part of the ABI (mirrors of masq_abi.h, re-exported by abi):
//! pair keys and entries, mapping hints, open mappings and permits, the expiry
//! sweep's state, the forward shards and their hash, and the fragment keys.

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nat6Key {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: [u8; 2],
    pub dport: [u8; 2],
    pub proto: u8,
    pub pad: [u8; 3],
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat6Entry {
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub flags: u8,
    /// 0, or 1 + the egress policy whose address the pair took.
    pub policy: u8,
    pub ifindex: u32,
    pub rule_id: u32,
    /// TCP, with NAT_F_FIN: the ack number that acknowledges this direction's FIN.
    pub fin_end: u32,
    /// NAT_C_*: this direction's part in the TCP close.
    pub close: u8,
    pub pad: [u8; 7],
    pub created_ns: u64,
    pub last_seen_ns: u64,
    pub packets: u64,
    pub bytes: u64,
}

/// natFiltering's open mappings (key: the mapping, a Nat4Ep / Nat6Ep) and address permits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat4Open {
    pub addr: [u8; 4],
    pub port: [u8; 2],
    pub filter: u8,
    pub flags: u8,
    pub ifindex: u32,
    pub rule_id: u32,
    pub last_seen_ns: u64,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat6Open {
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub filter: u8,
    pub flags: u8,
    pub ifindex: u32,
    pub rule_id: u32,
    pub pad: u32,
    pub last_seen_ns: u64,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat4PermitKey {
    pub remote: [u8; 4],
    pub addr: [u8; 4],
    pub port: [u8; 2],
    pub proto: u8,
    pub pad: u8,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat4Permit {
    pub pod: [u8; 4],
    pub pad: u32,
    pub last_seen_ns: u64,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat6PermitKey {
    pub remote: [u8; 16],
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub proto: u8,
    pub pad: u8,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat6Permit {
    pub pod: [u8; 16],
    pub last_seen_ns: u64,
}

/// nat4_bind / nat6_bind: a pod endpoint's mapping (endpoint-independent mapping hints).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat4Ep {
    pub addr: [u8; 4],
    pub port: [u8; 2],
    pub proto: u8,
    pub pad: u8,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat4Bind {
    pub addr: [u8; 4],
    pub port: [u8; 2],
    pub pad: u16,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat6Ep {
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub proto: u8,
    pub pad: u8,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat6Bind {
    pub addr: [u8; 16],
    pub port: [u8; 2],
    pub pad: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nat4Key {
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub sport: [u8; 2],
    pub dport: [u8; 2],
    pub proto: u8,
    pub pad: [u8; 3],
}

pub const NAT_F_TCP_CLOSING: u8 = 0x1;
pub const NAT_F_BY_RULE: u8 = 0x2;
pub const NAT_F_FAST: u8 = 0x4;
pub const NAT_F_INBOUND: u8 = 0x8;
pub const NAT_F_FIN: u8 = 0x10;
pub const NAT_F_RST: u8 = 0x20;
pub const NAT_F_OPEN: u8 = 0x40;
/// How a TCP pair closes, per half (`close`): this direction's FIN was the pair's first.
pub const NAT_C_FIN_FIRST: u8 = 0x1;
/// The other direction sent a FIN.
pub const NAT_C_PEER_FIN: u8 = 0x2;
/// This direction acknowledged the other direction's FIN.
pub const NAT_C_ACKED_PEER: u8 = 0x4;
/// The host's own flow on the masquerade address (its port remapped, or an echo id kept).
pub const NAT_F_HOST: u8 = 0x80;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nat4Entry {
    pub addr: [u8; 4],
    pub port: [u8; 2],
    pub flags: u8,
    /// 0, or 1 + the egress policy whose address the pair took.
    pub policy: u8,
    pub ifindex: u32,
    pub rule_id: u32,
    /// TCP, with NAT_F_FIN: the ack number that acknowledges this direction's FIN.
    pub fin_end: u32,
    /// NAT_C_*: this direction's part in the TCP close.
    pub close: u8,
    pub pad: [u8; 3],
    pub created_ns: u64,
    pub last_seen_ns: u64,
    pub packets: u64,
    pub bytes: u64,
}

/// `map_flags` of every NAT hash map (BPF_F_NO_PREALLOC): memory follows the flows.
pub const NAT_MAP_FLAGS: u32 = 1;

/// Slots of each forward NAT map (`nat4_fwd`/`nat6_fwd` are arrays of up to this
/// many hash maps); `shards_for` picks how many a node uses.
pub const NAT_SHARDS_MAX: u32 = 64;
/// A shard holds at least this many pairs.
pub const NAT_SHARD_ENTRIES: u32 = 1024;

/// The forward shards for a table of `nat_max_entries` pairs: the largest power
/// of two up to NAT_SHARDS_MAX that leaves each at least NAT_SHARD_ENTRIES.
pub fn shards_for(nat_max_entries: u32) -> u32 {
    let fit = (nat_max_entries / NAT_SHARD_ENTRIES).max(1);
    (1u32 << (31 - fit.leading_zeros())).min(NAT_SHARDS_MAX)
}

/// `nat_gc.armed` bits: the sweep's timer runs; an IPv4 / IPv6 pair was created
/// since the last run.
pub const NAT_GC_ARMED: u64 = 1;
pub const NAT_GC_NEW4: u64 = 2;
pub const NAT_GC_NEW6: u64 = 4;
pub const NAT_GC_NEW_HOST: u64 = 8;
/// `nat_gc.walk`: the current cycle walks nat6_fwd's shards too.
pub const NAT_GC_WALK6: u32 = 1;

/// `struct nat_gc`: the expiry sweep's timer (opaque, reads as zeros) and its progress.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatGc {
    pub timer: [u64; 2],
    pub armed: u64,
    pub last_run_ns: u64,
    /// Pairs the last run (one shard) looked at.
    pub last_checked: u64,
    pub runs: u64,
    pub cycle_checked: u64,
    pub cycle6_checked: u64,
    /// Pairs the last whole cycle (every shard) looked at.
    pub last_cycle_checked: u64,
    pub cycles: u64,
    /// Next shard: below nat_shards nat4_fwd's, then nat6_fwd's.
    pub pos: u32,
    pub walk: u32,
    pub seen: u64,
    /// How long the last run held its CPU, and the longest run so far.
    pub last_run_took_ns: u64,
    pub max_run_took_ns: u64,
    /// 1: host pairs (NAT_F_HOST) may exist, so host packets look theirs up.
    pub hosts: u64,
    /// 1: a busy-endpoint bitmap (nat_hot) was made, so the programs keep the bits.
    pub hot: u64,
}

/// nat_hot: a busy remote endpoint's port bitmap (the programs' own; the plugin
/// reads only how many there are). At most this many records.
pub const NAT_HOT_MAX: u32 = 1024;
/// Words of a record's bitmap (a bit per port offset of the range).
pub const NAT_HOT_WORDS: u32 = 1024;
/// A record no search used for this long goes with the sweep's next cycle end.
pub const NAT_HOT_IDLE_S: u32 = 60;
/// Sources whose held ports a record counts (fair shares).
pub const NAT_HOT_SLOTS: u32 = 64;
/// An endpoint is short of ports when fewer than range / this many are free.
pub const NAT_SHARE_RESERVE: u32 = 16;

/// `struct nat_hot_key`: the busy endpoint (protocol, node address, remote address and port).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatHotKey {
    pub nat_addr: [u32; 4],
    pub remote: [u32; 4],
    pub rport: u16,
    pub proto: u8,
    pub v6: u8,
}

/// `struct nat_hot_src`: one source's count of the ports it holds towards a busy endpoint.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatHotSrc {
    /// The source's address folded to 32 bits ([`src_id`]); 0: a free slot.
    pub id: u32,
    pub held: u32,
}

/// `struct nat_hot`: a busy endpoint's bitmap (bit set: the port offset is held)
/// and the ports each source holds there (fair shares).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatHot {
    pub scanned_ns: u64,
    pub used_ns: u64,
    /// Set bits.
    pub held: u32,
    pub pad: u32,
    pub src: [NatHotSrc; NAT_HOT_SLOTS as usize],
    pub bits: [u64; NAT_HOT_WORDS as usize],
}

/// A source address as a busy endpoint's counts key it (bpf/lib/nat_pair_tmpl.h
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

/// refusals: new flows refused per source address (the programs count them).
pub const REFUSALS_MAX: u32 = 4096;

/// `struct refusal_key`: a source address (IPv4 in `addr[0]`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefusalKey {
    pub addr: [u32; 4],
    pub v6: u32,
}

/// `struct refusals`: a source's refused new flows, by reason.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    pub no_port: u64,
    pub over_share: u64,
    pub over_limit: u64,
}

/// port_counts: upper bounds of the ports pods with a port limit hold per remote endpoint.
pub const PORT_COUNTS_MAX: u32 = 65_536;

/// `struct port_count_key`: a pod address and a remote endpoint (addresses as `addr_words`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCountKey {
    pub src: [u32; 4],
    pub nat_addr: [u32; 4],
    pub remote: [u32; 4],
    pub rport: u16,
    pub proto: u8,
    pub v6: u8,
}

/// Per-word offsets of the shard hash (`nat_shard_keys` in bpf/lib/nat_shard.h, checked
/// against it by a test), each
/// xor-ed with the node's seed.
pub(super) const NAT_SHARD_KEYS: [u32; 10] =
    [0xc2c063fe, 0x239eed24, 0x958507ad, 0xf768064f, 0x0e9a8df5, 0x55113dc3, 0xe0c67744, 0x5966eb44, 0xfcb042d9, 0x4ca82984];

/// The shard of a forward NAT key: the same keyed NH hash as `nat_shard()` in
/// bpf/lib/nat.h, over the key's native-endian 32-bit words (16 or 40 bytes),
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

/// `struct frag4_key`: a fragmented datagram, as its first fragment named it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frag4Key {
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub id: [u8; 2],
    pub proto: u8,
    pub pad: u8,
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frag6Key {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub id: [u8; 4],
    pub proto: u8,
    pub pad: [u8; 3],
}
/// `struct frag_ports`: the first fragment's ports and L4 protocol.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragPorts {
    pub sport: [u8; 2],
    pub dport: [u8; 2],
    pub proto: u8,
    pub pad: [u8; 3],
}
