//! The harness's IPv4 NAT pairs: both halves read, written and asserted, and
//! their keys and entries built.

#![allow(dead_code)]

use std::net::Ipv4Addr;

use aya::maps::{HashMap, MapData};
use ebpf_masq::bpf::{
    abi::{self, *},
    nat::{self as natmaps, Fwd},
};

use super::harness::{Dataplane, LO};

impl Dataplane {
    fn nat_map(&self, name: &str) -> HashMap<MapData, Nat4Key, Nat4Entry> {
        self.map(name)
    }
    /// The IPv4 forward halves: every shard of nat4_fwd.
    pub fn fwd_shards(&self) -> Fwd<natmaps::V4> {
        Fwd::pinned(&self.pins).unwrap()
    }
    pub fn fwd(&self) -> Vec<(Nat4Key, Nat4Entry)> {
        self.fwd_shards().iter().collect::<Result<_, _>>().unwrap()
    }
    /// nat4_rev, opened.
    pub fn rev_map(&self) -> HashMap<MapData, Nat4Key, Nat4Entry> {
        self.nat_map(abi::MAP_NAT4_REV)
    }
    pub fn rev(&self) -> Vec<(Nat4Key, Nat4Entry)> {
        self.nat_map(abi::MAP_NAT4_REV).iter().collect::<Result<_, _>>().unwrap()
    }
    pub fn get_fwd(&self, k: &Nat4Key) -> Option<Nat4Entry> {
        self.fwd_shards().get(k).ok()
    }
    pub fn get_rev(&self, k: &Nat4Key) -> Option<Nat4Entry> {
        self.nat_map(abi::MAP_NAT4_REV).get(k, 0).ok()
    }
    pub fn put_fwd(&self, k: &Nat4Key, e: Nat4Entry) {
        self.fwd_shards().insert(k, &e, 0).unwrap();
    }
    pub fn put_rev(&self, k: &Nat4Key, e: Nat4Entry) {
        self.nat_map(abi::MAP_NAT4_REV).insert(k, e, 0).unwrap();
    }
    pub fn del_rev(&self, k: &Nat4Key) {
        self.nat_map(abi::MAP_NAT4_REV).remove(k).unwrap();
    }
    pub fn del_fwd(&self, k: &Nat4Key) {
        self.fwd_shards().remove(k).unwrap();
    }
    /// The shard of nat4_fwd a forward key belongs in (the node's seed).
    pub fn shard_of(&self, k: &Nat4Key) -> u32 {
        natmaps::shard_of(k, natmaps::shard_params(&self.pins).unwrap())
    }
    /// The forward shards this data plane uses (`node_config.nat_shards`).
    pub fn shards(&self) -> u32 {
        natmaps::shard_params(&self.pins).unwrap().shards
    }

    /// The pair invariant: every forward half has its reverse half (same pair:
    /// same created_ns) and every reverse half its forward half. Returns the pair count.
    #[track_caller]
    pub fn assert_pairs_complete(&self) -> usize {
        let fwd = self.fwd();
        let rev: std::collections::HashMap<Nat4Key, Nat4Entry> = self.rev().into_iter().collect();
        for (fk, fe) in &fwd {
            let rk = reverse_key(fk, Ipv4Addr::from(fe.addr), u16::from_be_bytes(fe.port));
            let re = rev.get(&rk).unwrap_or_else(|| panic!("forward half {fk:?} has no reverse half"));
            assert_eq!((re.addr, re.port, re.created_ns), (fk.saddr, fk.sport, fe.created_ns), "pair {fk:?}");
        }
        assert_eq!(rev.len(), fwd.len(), "reverse halves without a forward half");
        fwd.len()
    }
    pub fn nat_is_empty(&self) -> bool {
        self.fwd().is_empty() && self.rev().is_empty()
    }

    /// Both NAT maps hold exactly one pair: `fwd_key` -> (nat, nat_port) and its
    /// mirror {remote, nat, remote port, nat port} -> (pod, pod port).
    #[track_caller]
    pub fn assert_single_pair(&self, fwd_key: Nat4Key, nat: Ipv4Addr, nat_port: u16) -> (Nat4Entry, Nat4Entry) {
        let fwd = self.fwd();
        let rev = self.rev();
        assert_eq!(fwd.len(), 1, "nat4_fwd: {fwd:?}");
        assert_eq!(rev.len(), 1, "nat4_rev: {rev:?}");
        let (fk, fe) = fwd[0];
        let (rk, re) = rev[0];
        assert_eq!(fk, fwd_key);
        assert_eq!((fe.addr, fe.port), (nat.octets(), nat_port.to_be_bytes()), "forward half value");
        assert_eq!(rk, reverse_key(&fwd_key, nat, nat_port), "reverse half key");
        assert_eq!((re.addr, re.port), (fwd_key.saddr, fwd_key.sport), "reverse half value");
        assert_eq!(fe.ifindex, LO);
        assert_eq!(re.ifindex, LO);
        (fe, re)
    }

    /// The pair of `fwd_key`, among others: both halves there, one pair, to (nat, nat_port).
    #[track_caller]
    pub fn assert_single_pair_of(&self, fwd_key: Nat4Key, nat: Ipv4Addr, nat_port: u16) -> (Nat4Entry, Nat4Entry) {
        let fe = self.get_fwd(&fwd_key).unwrap_or_else(|| panic!("no forward half {fwd_key:?}: {:?}", self.fwd()));
        assert_eq!((fe.addr, fe.port), (nat.octets(), nat_port.to_be_bytes()), "forward half value");
        let rk = reverse_key(&fwd_key, nat, nat_port);
        let re = self.get_rev(&rk).unwrap_or_else(|| panic!("no reverse half {rk:?}: {:?}", self.rev()));
        assert_eq!((re.addr, re.port, re.created_ns), (fwd_key.saddr, fwd_key.sport, fe.created_ns), "reverse half");
        (fe, re)
    }
}

/// A nat4 key in host-order ports.
pub fn nat_key(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, proto: u8) -> Nat4Key {
    Nat4Key {
        saddr: src.octets(),
        daddr: dst.octets(),
        sport: sport.to_be_bytes(),
        dport: dport.to_be_bytes(),
        proto,
        pad: [0; 3],
    }
}

/// The reverse key of a forward key once NATed to (nat, nat_port).
pub fn reverse_key(fk: &Nat4Key, nat: Ipv4Addr, nat_port: u16) -> Nat4Key {
    Nat4Key {
        saddr: fk.daddr,
        daddr: nat.octets(),
        sport: fk.dport,
        dport: nat_port.to_be_bytes(),
        proto: fk.proto,
        pad: [0; 3],
    }
}

/// A NAT entry pointing at (addr, port), last seen at `last_seen_ns`.
pub fn nat_entry(addr: Ipv4Addr, port: u16, last_seen_ns: u64) -> Nat4Entry {
    Nat4Entry {
        addr: addr.octets(),
        port: port.to_be_bytes(),
        ifindex: LO,
        created_ns: last_seen_ns,
        last_seen_ns,
        ..Default::default()
    }
}
