//! The busy endpoints' port bitmaps (`nat_hot`, bpf/lib/nat/hot.h) as seen from
//! user space: pairs the plugin removes itself (a pod's DEL) give their ports'
//! bits back, as the programs do for the pairs they remove, so a busy endpoint's
//! next search finds those ports at once rather than at its next full scan.
//!
//! A read-modify-write of the record, racing the programs' atomic updates: a bit
//! a program set meanwhile may be lost (it costs one probe later, which sets it
//! again), one it cleared may come back set (the next rescan clears it). Either
//! way the bitmap stays a hint and no port is ever handed out twice (the claim is
//! the reverse half's insert).

use std::net::IpAddr;

use aya::maps::{Array, HashMap, MapData};

use super::{
    abi::{self, NatHot, NatHotKey, NodeConfig},
    maps,
    pins::Pins,
};

/// A removed pair's reverse tuple: the remote endpoint and the node address and
/// port it held; and its source (the pod address), whose count of held ports goes down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    pub remote: IpAddr,
    pub rport: u16,
    pub nat: IpAddr,
    pub nport: u16,
    pub proto: u8,
    pub source: IpAddr,
}
use crate::error::Result;

/// The nat_hot key of a removed pair's endpoint (remote, node address, protocol).
pub fn key_of(rev: &Released) -> NatHotKey {
    NatHotKey {
        nat_addr: abi::addr_words(rev.nat),
        remote: abi::addr_words(rev.remote),
        rport: rev.rport.to_be_bytes(),
        proto: rev.proto,
        v6: u8::from(rev.remote.is_ipv6()),
    }
}

/// A node port's offset among the ports a pair may take (portRange less
/// nodePortRange, in order): bpf/lib/nat/hot.h `nat_port_off`.
pub fn port_offset(c: &NodeConfig, port: u16) -> Option<u32> {
    let skipped = c.skip_max != 0 && (c.skip_min..=c.skip_max).contains(&port);
    if port < c.port_min || port > c.port_max || skipped {
        return None;
    }
    let mut off = u32::from(port - c.port_min);
    if c.skip_max != 0 && c.skip_max >= c.port_min && c.skip_min <= c.port_max && port > c.skip_max {
        off -= u32::from(c.skip_max - c.skip_min.max(c.port_min)) + 1;
    }
    Some(off)
}

/// Clear the bits of the node ports of these removed pairs (their reverse
/// tuples), in the bitmaps of the endpoints that have one. A node without the
/// map (an older layout) or without bitmaps: nothing to do.
pub fn release(pins: &Pins, removed: &[Released]) -> Result<()> {
    if removed.is_empty() || !pins.map(abi::MAP_NAT_HOT).exists() {
        return Ok(());
    }
    let cfg: Array<MapData, NodeConfig> = maps::pinned(pins, abi::MAP_CONFIG)?;
    let c = cfg.get(&0, 0).unwrap_or_default();
    let mut hot: HashMap<MapData, NatHotKey, NatHot> = maps::pinned(pins, abi::MAP_NAT_HOT)?;
    if hot.keys().next().is_none() {
        return Ok(());
    }
    let mut by_endpoint: Vec<(NatHotKey, Vec<(u32, IpAddr)>)> = Vec::new();
    for t in removed {
        let Some(off) = port_offset(&c, t.nport) else { continue };
        let k = key_of(t);
        match by_endpoint.iter_mut().find(|(e, _)| *e == k) {
            Some((_, offs)) => offs.push((off, t.source)),
            None => by_endpoint.push((k, vec![(off, t.source)])),
        }
    }
    for (k, offs) in by_endpoint {
        let Ok(mut h) = hot.get(&k, 0) else { continue }; // no bitmap for that endpoint
        for (off, source) in offs {
            clear(&mut h, off, abi::src_id(source));
        }
        const EXIST: u64 = 2; // BPF_EXIST: a record the sweep removed meanwhile stays removed
        let _ = hot.insert(k, h, EXIST);
    }
    Ok(())
}

/// Clear offset `off`'s bit and, if it was set, count one port fewer for
/// source `id` (bpf/lib/nat/hot.h `nat_hot_mark` with NAT_HOT_CLEAR).
pub fn clear(h: &mut NatHot, off: u32, id: u32) {
    let (w, bit) = ((off / 64) as usize % h.bits.len(), 1u64 << (off % 64));
    if h.bits[w] & bit == 0 {
        return;
    }
    h.bits[w] &= !bit;
    h.held = h.held.saturating_sub(1);
    if let Some(s) = slot(h, id) {
        s.held = s.held.saturating_sub(1);
    }
}

/// Source `id`'s slot in `h`, as bpf/lib/nat/hot.h `hot_slot` finds it (never made here).
pub fn slot(h: &mut NatHot, id: u32) -> Option<&mut abi::NatHotSrc> {
    let n = h.src.len();
    let first = (id.wrapping_mul(2_654_435_761) >> 26) as usize;
    let at = (0..8).map(|i| (first + i) % n).find(|&i| h.src[i].id == id || h.src[i].id == 0)?;
    (h.src[at].id == id).then(|| &mut h.src[at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_skip_node_port_range_as_the_programs_do() {
        let c = NodeConfig { port_min: 1024, port_max: 65535, skip_min: 30000, skip_max: 32767, ..Default::default() };
        assert_eq!(port_offset(&c, 1024), Some(0));
        assert_eq!(port_offset(&c, 29999), Some(28975));
        assert_eq!(port_offset(&c, 30000), None);
        assert_eq!(port_offset(&c, 32768), Some(28976)); // right after 29999
        assert_eq!(port_offset(&c, 65535), Some(65535 - 1024 - 2768));
        assert_eq!(port_offset(&c, 80), None);
        let plain = NodeConfig { port_min: 20000, port_max: 20099, ..Default::default() };
        assert_eq!((port_offset(&plain, 20099), port_offset(&plain, 20100)), (Some(99), None));
    }

    #[test]
    fn keys_hold_addresses_and_port_as_the_programs_write_them() {
        let t = Released {
            remote: "203.0.113.10".parse().unwrap(),
            rport: 443,
            nat: "192.0.2.1".parse().unwrap(),
            nport: 20000,
            proto: 6,
            source: "10.0.0.5".parse().unwrap(),
        };
        let k = key_of(&t);
        assert_eq!(k.remote[0].to_ne_bytes(), [203, 0, 113, 10]);
        assert_eq!(k.nat_addr[0].to_ne_bytes(), [192, 0, 2, 1]);
        assert_eq!((&k.remote[1..], k.rport, k.proto, k.v6), (&[0u32; 3][..], [1, 187], 6, 0));
    }

    fn record() -> Box<NatHot> {
        Box::new(NatHot {
            scanned_ns: 0,
            used_ns: 0,
            held: 0,
            pad: 0,
            src: [Default::default(); abi::NAT_HOT_SLOTS as usize],
            bits: [0; abi::NAT_HOT_WORDS as usize],
        })
    }

    #[test]
    fn clearing_a_held_port_counts_one_fewer_for_its_source_only_once() {
        let (a, b) = (abi::src_id("10.0.0.5".parse().unwrap()), abi::src_id("10.0.0.6".parse().unwrap()));
        let mut h = record();
        // Two ports of a, one of b, put where the programs' hot_slot puts them.
        for (id, n) in [(a, 2), (b, 1)] {
            let first = (id.wrapping_mul(2_654_435_761) >> 26) as usize;
            let at = (0..8).map(|i| (first + i) % 64).find(|&i| h.src[i].id == 0).unwrap();
            h.src[at] = abi::NatHotSrc { id, held: n };
        }
        h.bits[0] = 0b111;
        h.held = 3;
        clear(&mut h, 0, a);
        clear(&mut h, 0, a); // already clear: nothing more
        assert_eq!((h.held, slot(&mut h, a).unwrap().held), (2, 1));
        clear(&mut h, 2, b);
        assert_eq!((h.held, slot(&mut h, b).unwrap().held, h.bits[0]), (1, 0, 0b010));
        // A source the record does not count: the bit goes, no count moves but the total.
        clear(&mut h, 1, abi::src_id("10.0.0.7".parse().unwrap()));
        assert_eq!((h.held, slot(&mut h, a).unwrap().held), (0, 1));
    }

    #[test]
    fn a_source_id_folds_its_address_as_the_programs_do() {
        assert_eq!(abi::src_id("10.0.0.5".parse().unwrap()), u32::from_ne_bytes([10, 0, 0, 5]));
        assert_eq!(abi::src_id("0.0.0.0".parse().unwrap()), 1); // never 0: a free slot
        let v6: std::net::IpAddr = "fd00::1:2".parse().unwrap();
        assert_eq!(abi::src_id(v6), u32::from_ne_bytes([0xfd, 0, 0, 0]) ^ u32::from_ne_bytes([0, 1, 0, 2]));
    }
}
