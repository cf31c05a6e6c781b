//! Both families' NAT maps behind one view: read the pairs (forward half joined
//! with its reverse half) and delete every pair of some pod addresses.
//!
//! The forward halves live in NAT_SHARDS hash maps behind one pinned
//! ARRAY_OF_MAPS (`Fwd`): a key's shard is `abi::nat_shard` of its bytes, keyed
//! by the node's `node_config.nat_seed`, exactly as the programs pick it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{Array, ArrayOfMaps, HashMap, MapData, MapError};

use super::{
    abi::{self, Nat4Bind, Nat4Entry, Nat4Ep, Nat4Key, Nat4Open, Nat6Bind, Nat6Entry, Nat6Ep, Nat6Key, Nat6Open},
    pins::Pins,
    maps,
};
use crate::error::{Context, Error, Result};

/// A NAT key in either family: the tuple of the packet it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    pub saddr: IpAddr,
    pub daddr: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
}

/// A NAT entry in either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub addr: IpAddr,
    pub port: u16,
    pub flags: u8,
    /// 0, or 1 + the egress policy whose address the pair took.
    pub policy: u8,
    pub rule_id: u32,
    pub created_ns: u64,
    pub last_seen_ns: u64,
    pub packets: u64,
    pub bytes: u64,
}

/// One family's maps and layouts.
pub trait Family {
    type Key: aya::Pod;
    type Value: aya::Pod;
    type BindKey: aya::Pod;
    type Bind: aya::Pod;
    const FWD: &'static str;
    const REV: &'static str;
    /// The endpoint-independent mapping hints (nat4_bind / nat6_bind).
    const BIND: &'static str;
    /// The pod address a mapping hint belongs to.
    fn bind_addr(k: &Self::BindKey) -> IpAddr;
    /// natFiltering's open mappings (nat4_open / nat6_open, keyed like the hints).
    type Open: aya::Pod;
    const OPEN: &'static str;
    fn open_addr(v: &Self::Open) -> IpAddr;
    fn tuple(k: &Self::Key) -> Tuple;
    fn key(t: &Tuple) -> Self::Key;
    fn entry(v: &Self::Value) -> Entry;
    fn holds(addr: &IpAddr) -> bool;
}

pub struct V4;
pub struct V6;

fn v4(a: &IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => [0; 4],
    }
}

fn v6(a: &IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(_) => [0; 16],
    }
}

/// Both families' impls, written once: they differ only in their address type,
/// their structs and their maps' names.
macro_rules! family {
    ($fam:ident: $ip:ident, $octets:ident, $is:ident, $key:ident, $entry:ident, $ep:ident, $bind:ident, $open:ident,
     maps $fwd:ident, $rev:ident, $bm:ident, $om:ident) => {
        impl Family for $fam {
            type Key = $key;
            type Value = $entry;
            type BindKey = $ep;
            type Bind = $bind;
            const FWD: &'static str = abi::$fwd;
            const REV: &'static str = abi::$rev;
            const BIND: &'static str = abi::$bm;
            fn bind_addr(k: &$ep) -> IpAddr {
                $ip::from(k.addr).into()
            }
            type Open = $open;
            const OPEN: &'static str = abi::$om;
            fn open_addr(v: &$open) -> IpAddr {
                $ip::from(v.addr).into()
            }
            fn tuple(k: &$key) -> Tuple {
                Tuple {
                    saddr: $ip::from(k.saddr).into(),
                    daddr: $ip::from(k.daddr).into(),
                    sport: u16::from_be_bytes(k.sport),
                    dport: u16::from_be_bytes(k.dport),
                    proto: k.proto,
                }
            }
            fn key(t: &Tuple) -> $key {
                $key {
                    saddr: $octets(&t.saddr),
                    daddr: $octets(&t.daddr),
                    sport: t.sport.to_be_bytes(),
                    dport: t.dport.to_be_bytes(),
                    proto: t.proto,
                    pad: [0; 3],
                }
            }
            fn entry(v: &$entry) -> Entry {
                Entry {
                    addr: $ip::from(v.addr).into(),
                    port: u16::from_be_bytes(v.port),
                    flags: v.flags,
                    policy: v.policy,
                    rule_id: v.rule_id,
                    created_ns: v.created_ns,
                    last_seen_ns: v.last_seen_ns,
                    packets: v.packets,
                    bytes: v.bytes,
                }
            }
            fn holds(a: &IpAddr) -> bool {
                a.$is()
            }
        }
    };
}

family!(V4: Ipv4Addr, v4, is_ipv4, Nat4Key, Nat4Entry, Nat4Ep, Nat4Bind, Nat4Open,
        maps MAP_NAT4_FWD, MAP_NAT4_REV, MAP_NAT4_BIND, MAP_NAT4_OPEN);
family!(V6: Ipv6Addr, v6, is_ipv6, Nat6Key, Nat6Entry, Nat6Ep, Nat6Bind, Nat6Open,
        maps MAP_NAT6_FWD, MAP_NAT6_REV, MAP_NAT6_BIND, MAP_NAT6_OPEN);

/// The reverse key of a forward pair: the reply's tuple.
pub fn reverse_of(fwd: &Tuple, e: &Entry) -> Tuple {
    Tuple { saddr: fwd.daddr, daddr: e.addr, sport: fwd.dport, dport: e.port, proto: fwd.proto }
}

/// One hash map of NAT halves (the reverse map, or one forward shard).
pub type NatMap<F> = HashMap<MapData, <F as Family>::Key, <F as Family>::Value>;

/// One family's forward halves: the shards behind the pinned `nat4_fwd`/`nat6_fwd`.
pub struct Fwd<F: Family> {
    shards: Vec<NatMap<F>>,
    seed: u32,
}

/// What the loader chose for a node: the shard hash's seed and the shard count
/// (both built into the programs, recorded in `node_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardParams {
    pub seed: u32,
    pub shards: u32,
}

/// The node's recorded shard parameters (`node_config`).
pub fn shard_params(pins: &Pins) -> Result<ShardParams> {
    let cfg: Array<MapData, abi::NodeConfig> = maps::pinned(pins, abi::MAP_CONFIG)?;
    let c = cfg.get(&0, 0).unwrap_or_default();
    Ok(ShardParams { seed: c.nat_seed, shards: c.nat_shards.max(1) })
}

/// The parameters a previous load recorded, if the config map is pinned and has them.
pub fn recorded_params(pins: &Pins) -> Option<ShardParams> {
    let cfg: Array<MapData, abi::NodeConfig> = maps::pinned(pins, abi::MAP_CONFIG).ok()?;
    let c = cfg.get(&0, 0).ok()?;
    (c.nat_seed != 0 && c.nat_shards != 0).then_some(ShardParams { seed: c.nat_seed, shards: c.nat_shards })
}

/// Record the parameters the programs were loaded with (the rest of the config stays).
pub fn record_params(pins: &Pins, p: ShardParams) -> Result<()> {
    let mut cfg: Array<MapData, abi::NodeConfig> = maps::pinned(pins, abi::MAP_CONFIG)?;
    let mut c = cfg.get(&0, 0).unwrap_or_default();
    c.nat_seed = p.seed;
    c.nat_shards = p.shards;
    cfg.set(0, c, 0).map_err(|e| Error::bpf(format!("write node_config: {e}")))
}

/// A non-zero random 32-bit value (std's per-process hash keys come from the OS RNG).
pub fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(super::sys::monotonic_ns());
    (h.finish() as u32).max(1)
}

/// The shard of a forward key, as the programs compute it.
pub fn shard_of<K: aya::Pod>(k: &K, p: ShardParams) -> u32 {
    // SAFETY: K is Pod (a plain #[repr(C)] mirror of a BPF key, no padding bytes):
    // its bytes are initialised and it is borrowed for the slice's lifetime.
    let bytes = unsafe { std::slice::from_raw_parts((k as *const K).cast::<u8>(), std::mem::size_of::<K>()) };
    abi::nat_shard(bytes, p.seed, p.shards)
}

impl<F: Family> Fwd<F> {
    /// Open every shard (an empty slot is an error: the loader fills all of
    /// them before any program is pinned).
    pub fn pinned(pins: &Pins) -> Result<Self> {
        let params = shard_params(pins)?;
        let outer: ArrayOfMaps<MapData, NatMap<F>> = maps::pinned(pins, F::FWD)?;
        let shards = (0..params.shards)
            .map(|i| outer.get(&i, 0).map_err(|e| Error::bpf(format!("{} shard {i}: {e}", F::FWD))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Fwd { shards, seed: params.seed })
    }
    fn params(&self) -> ShardParams {
        ShardParams { seed: self.seed, shards: self.shards.len() as u32 }
    }
    pub fn shard(&self, k: &F::Key) -> &NatMap<F> {
        &self.shards[shard_of(k, self.params()) as usize]
    }
    pub fn get(&self, k: &F::Key) -> std::result::Result<F::Value, MapError> {
        self.shard(k).get(k, 0)
    }
    pub fn insert(&mut self, k: &F::Key, v: &F::Value, flags: u64) -> std::result::Result<(), MapError> {
        let i = shard_of(k, self.params()) as usize;
        self.shards[i].insert(k, v, flags)
    }
    pub fn remove(&mut self, k: &F::Key) -> std::result::Result<(), MapError> {
        let i = shard_of(k, self.params()) as usize;
        self.shards[i].remove(k)
    }
    /// Every forward half, shard after shard.
    pub fn iter(&self) -> impl Iterator<Item = std::result::Result<(F::Key, F::Value), MapError>> + '_ {
        self.shards.iter().flat_map(|m| m.iter())
    }
    /// Entries per shard (the fullest one is what refuses new flows first).
    pub fn shard_lens(&self) -> Vec<usize> {
        self.shards.iter().map(|m| m.keys().filter(|k| k.is_ok()).count()).collect()
    }
}

fn pinned_tables<F: Family>(pins: &Pins) -> Result<(Fwd<F>, NatMap<F>)> {
    Ok((Fwd::pinned(pins)?, maps::pinned(pins, F::REV)?))
}

/// Size of each of `shards` forward shards for a table of `nat_max_entries` pairs.
pub fn shard_max_entries(nat_max_entries: u32, shards: u32) -> u32 {
    nat_max_entries.div_ceil(shards)
}

/// Put a fresh hash map in every empty slot below `shards` of one family's
/// forward array (a first load, or one interrupted before its programs were
/// pinned). Existing shards, and the pairs in them, stay. The shards go in with
/// one BPF_MAP_UPDATE_BATCH: every update of an array of maps waits for an RCU
/// grace period (7-15 ms here), a batch waits once.
pub fn fill_shards<F: Family>(pins: &Pins, shards: u32, nat_max_entries: u32) -> Result<()> {
    let outer: ArrayOfMaps<MapData, MapData> = maps::pinned(pins, F::FWD)?;
    let mut slots = Vec::new();
    let mut made = Vec::new();
    for i in 0..shards {
        match outer.get(&i, 0) {
            Ok(_) => continue,
            Err(MapError::KeyNotFound) => {}
            Err(e) => return Err(Error::bpf(format!("{} shard {i}: {e}", F::FWD))),
        }
        let name = format!("{}_{i}", F::FWD);
        let fd = super::sys::create_hash_map(
            &name,
            std::mem::size_of::<F::Key>() as u32,
            std::mem::size_of::<F::Value>() as u32,
            shard_max_entries(nat_max_entries, shards),
            abi::NAT_MAP_FLAGS,
        )
        .map_err(|e| Error::bpf(format!("create {name}: {e}")))?;
        slots.push(i);
        made.push(fd);
    }
    if slots.is_empty() {
        return Ok(());
    }
    let fds: Vec<u32> = made.iter().map(|fd| fd.as_raw_fd() as u32).collect();
    // The array holds its own references: our fds may close after this.
    let data = outer_fd(pins, F::FWD)?;
    let put = |e: std::io::Error| Error::bpf(format!("{}: put in {} shards: {e}", F::FWD, slots.len()));
    match super::sys::update_batch(data.fd().as_fd(), &slots, &fds) {
        // 5.15 has no batch update for an array of maps (ENOTSUPP, 524; 6.1 has one):
        // one update a slot, each waiting for its own grace period.
        Err(e) if e.raw_os_error() == Some(ENOTSUPP) => {
            for (slot, fd) in slots.iter().zip(&fds) {
                super::sys::map_update(data.fd().as_fd().as_raw_fd(), &slot.to_ne_bytes(), &fd.to_ne_bytes())
                    .map_err(put)?;
            }
            Ok(())
        }
        r => r.map_err(put),
    }
}

/// The kernel's ENOTSUPP (not in libc: it never reaches user space but from bpf(2)).
const ENOTSUPP: i32 = 524;

fn outer_fd(pins: &Pins, name: &str) -> Result<MapData> {
    MapData::from_pin(pins.map(name)).map_err(|e| Error::bpf(format!("pinned map {name}: {e}")))
}


/// Every forward half with its reverse half (None when the reverse half is
/// missing or now belongs to another flow).
pub fn pairs<F: Family>(pins: &Pins) -> Result<Vec<(Tuple, Entry, Option<Entry>)>> {
    let (fwd, rev) = pinned_tables::<F>(pins)?;
    let mut out = Vec::new();
    for item in fwd.iter() {
        let (k, v) = item.bpf_ctx(F::FWD)?;
        let (t, e) = (F::tuple(&k), F::entry(&v));
        let r = rev
            .get(&F::key(&reverse_of(&t, &e)), 0)
            .ok()
            .map(|r| F::entry(&r))
            .filter(|r| r.addr == t.saddr && r.port == t.sport && r.created_ns == e.created_ns);
        out.push((t, e, r));
    }
    Ok(out)
}

/// The forward tuple a reverse half answers for: {pod, remote, pod port, remote port}.
pub fn forward_of(rev: &Tuple, e: &Entry) -> Tuple {
    Tuple { saddr: e.addr, daddr: rev.saddr, sport: e.port, dport: rev.sport, proto: rev.proto }
}

/// Reverse halves with no forward half of the same pair (none while the pair
/// invariant holds; a pair being removed may show for a moment).
pub fn orphans<F: Family>(pins: &Pins) -> Result<Vec<(Tuple, Entry)>> {
    let (fwd, rev) = pinned_tables::<F>(pins)?;
    let mut out = Vec::new();
    for item in rev.iter() {
        let (k, v) = item.bpf_ctx(F::REV)?;
        let (t, e) = (F::tuple(&k), F::entry(&v));
        let paired = fwd
            .get(&F::key(&forward_of(&t, &e)))
            .ok()
            .map(|f| F::entry(&f))
            .is_some_and(|f| f.created_ns == e.created_ns && reverse_of(&forward_of(&t, &e), &f) == t);
        if !paired {
            out.push((t, e));
        }
    }
    Ok(out)
}

fn ignore_not_found(r: std::result::Result<(), MapError>) -> std::result::Result<(), MapError> {
    match r {
        Err(e) if maps::is_key_not_found(&e) => Ok(()),
        other => other,
    }
}

/// Delete both halves of every pair that belongs to one of `addrs`; returns how many halves went.
pub fn flush<F: Family>(pins: &Pins, addrs: &[IpAddr]) -> Result<usize> {
    let mine: Vec<IpAddr> = addrs.iter().filter(|a| F::holds(a)).copied().collect();
    if mine.is_empty() {
        return Ok(0);
    }
    let (mut fwd, mut rev) = pinned_tables::<F>(pins)?;
    let mut n = 0;
    let doomed: Vec<(Tuple, Entry)> = fwd
        .iter()
        .filter_map(|r| r.ok())
        .map(|(k, v)| (F::tuple(&k), F::entry(&v)))
        .filter(|(t, _)| mine.contains(&t.saddr))
        .collect();
    let mut released = Vec::new();
    for (t, e) in doomed {
        let r = reverse_of(&t, &e);
        ignore_not_found(rev.remove(&F::key(&r))).bpf_ctx(F::REV)?;
        ignore_not_found(fwd.remove(&F::key(&t))).bpf_ctx(F::FWD)?;
        released.push((r, t.saddr));
        n += 2;
    }
    // Reverse halves whose forward half is already gone (a pair mid-removal).
    let orphans: Vec<(Tuple, IpAddr)> = rev
        .iter()
        .filter_map(|r| r.ok())
        .map(|(k, v)| (F::tuple(&k), F::entry(&v).addr))
        .filter(|(_, pod)| mine.contains(pod))
        .collect();
    for (t, pod) in orphans {
        ignore_not_found(rev.remove(&F::key(&t))).bpf_ctx(F::REV)?;
        released.push((t, pod));
        n += 1;
    }
    // Their ports' bits in busy endpoints' bitmaps, as the programs clear them.
    let released: Vec<_> = released
        .iter()
        .map(|(r, pod)| super::nat_hot::Released {
            remote: r.saddr, rport: r.sport, nat: r.daddr, nport: r.dport, proto: r.proto, source: *pod,
        })
        .collect();
    super::nat_hot::release(pins, &released)?;
    // The pod's mapping hints: a later pod given the address starts with none.
    let mut bind: HashMap<MapData, F::BindKey, F::Bind> = maps::pinned(pins, F::BIND)?;
    let hints: Vec<F::BindKey> =
        bind.keys().filter_map(|k| k.ok()).filter(|k| mine.contains(&F::bind_addr(k))).collect();
    for k in hints {
        ignore_not_found(bind.remove(&k)).bpf_ctx(F::BIND)?;
    }
    // Its open mappings (natFiltering): nobody outside reaches the address's next owner through them.
    let mut open: HashMap<MapData, F::BindKey, F::Open> = maps::pinned(pins, F::OPEN)?;
    let opened: Vec<F::BindKey> = open
        .iter()
        .filter_map(|r| r.ok())
        .filter(|(_, v)| mine.contains(&F::open_addr(v)))
        .map(|(k, _)| k)
        .collect();
    for k in opened {
        ignore_not_found(open.remove(&k)).bpf_ctx(F::OPEN)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trip_both_families() {
        let t4 = Tuple {
            saddr: "10.244.1.2".parse().unwrap(),
            daddr: "10.0.0.2".parse().unwrap(),
            sport: 40000,
            dport: 80,
            proto: 6,
        };
        assert_eq!(V4::tuple(&V4::key(&t4)), t4);
        let t6 = Tuple { saddr: "fd00::2".parse().unwrap(), daddr: "2001:db8::1".parse().unwrap(), ..t4 };
        assert_eq!(V6::tuple(&V6::key(&t6)), t6);
        assert_eq!(V4::key(&t4).sport, 40000u16.to_be_bytes(), "ports in network byte order");
    }

    #[test]
    fn each_family_reads_its_own_structs() {
        let a4: IpAddr = "192.0.2.7".parse().unwrap();
        let a6: IpAddr = "2001:db8::7".parse().unwrap();
        let e4 = Nat4Entry { addr: [192, 0, 2, 7], port: 2000u16.to_be_bytes(), flags: 3, policy: 2, rule_id: 9,
            packets: 4, ..Default::default() };
        let e6 = Nat6Entry { addr: v6(&a6), port: 2000u16.to_be_bytes(), flags: 3, policy: 2, rule_id: 9,
            packets: 4, ..Default::default() };
        let (r4, r6) = (V4::entry(&e4), V6::entry(&e6));
        assert_eq!((r4.addr, r4.port, r4.flags, r4.policy, r4.rule_id, r4.packets), (a4, 2000, 3, 2, 9, 4));
        assert_eq!(Entry { addr: a4, ..r6 }, r4, "the same entry but its address");
        assert_eq!(V4::bind_addr(&Nat4Ep { addr: [192, 0, 2, 7], ..Default::default() }), a4);
        assert_eq!(V6::bind_addr(&Nat6Ep { addr: v6(&a6), ..Default::default() }), a6);
        assert_eq!(V4::open_addr(&Nat4Open { addr: [192, 0, 2, 7], ..Default::default() }), a4);
        assert_eq!(V6::open_addr(&Nat6Open { addr: v6(&a6), ..Default::default() }), a6);
        assert_eq!((V4::holds(&a4), V4::holds(&a6), V6::holds(&a4), V6::holds(&a6)), (true, false, false, true));
        assert_eq!((V4::FWD, V4::REV, V4::BIND, V4::OPEN), ("nat4_fwd", "nat4_rev", "nat4_bind", "nat4_open"));
        assert_eq!((V6::FWD, V6::REV, V6::BIND, V6::OPEN), ("nat6_fwd", "nat6_rev", "nat6_bind", "nat6_open"));
    }

    #[test]
    fn reverse_key_is_the_reply_tuple() {
        let fwd = Tuple {
            saddr: "10.244.1.2".parse().unwrap(),
            daddr: "10.0.0.2".parse().unwrap(),
            sport: 40000,
            dport: 53,
            proto: 17,
        };
        let e = Entry {
            addr: "10.0.0.5".parse().unwrap(),
            port: 2000,
            flags: 0,
            policy: 0,
            rule_id: 0,
            created_ns: 0,
            last_seen_ns: 0,
            packets: 0,
            bytes: 0,
        };
        let r = reverse_of(&fwd, &e);
        assert_eq!((r.saddr, r.daddr, r.sport, r.dport), (fwd.daddr, e.addr, 53, 2000));
        // And back: the reverse half's value (pod, pod port) leads to the forward key.
        let back = Entry { addr: fwd.saddr, port: fwd.sport, ..e };
        assert_eq!(forward_of(&r, &back), fwd);
    }
}
