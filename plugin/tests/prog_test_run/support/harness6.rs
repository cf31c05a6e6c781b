//! The harness's IPv6 maps, and the fragment state of both families (v6, icmp_frag).

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::maps::{lpm_trie::Key, HashMap, LpmTrie, MapData};
use ebpf_masq::bpf::{
    abi::{self, *},
    maps,
    nat::{self as natmaps, Fwd},
};

use super::harness::{Dataplane, LO};

pub use ebpf_masq::bpf::abi::{Frag4Key, Frag6Key, FragPorts};



impl Dataplane {
    /// An Ethernet uplink masquerading IPv6 to `masq6`, and IPv4 to `masq4` when given.
    pub fn add_uplink6(&self, ifindex: u32, masq4: Option<Ipv4Addr>, masq6: Ipv6Addr) {
        let flags = abi::UPLINK_F_HAS_V6 | if masq4.is_some() { abi::UPLINK_F_HAS_V4 } else { 0 };
        let info = UplinkInfo { masq_v4: masq4.map(|a| a.octets()).unwrap_or_default(), flags, masq_v6: masq6.octets() };
        maps::uplink_put(&self.pins, ifindex, info).unwrap();
    }

    /// An IPv6 pod address behind veth `ifindex`, and the veth's `veths` entry (as `add_pod`).
    pub fn add_pod6(&self, addr: Ipv6Addr, ifindex: u32, nat_outgoing: bool) {
        let mut pods: HashMap<MapData, [u8; 16], PodInfo> = self.map(abi::MAP_PODS6);
        let flags = if nat_outgoing { abi::POD_F_NAT_OUTGOING } else { 0 };
        let pod = PodInfo { ifindex, flags, ..Default::default() };
        pods.insert(addr.octets(), pod, 0).unwrap();
        self.veth_add_addr(ifindex, pod, addr.into());
    }

    pub fn add_excl6(&self, net: Ipv6Addr, plen: u32, reason: u32) {
        let mut m: LpmTrie<MapData, [u8; 16], ExclInfo> = self.map(abi::MAP_EXCL6);
        m.insert(&Key::new(plen, net.octets()), ExclInfo { reason, index: 0 }, 0).unwrap();
    }

    /// pod_nets6: one of the node's pod ranges (podCIDRs).
    pub fn add_pod_net6(&self, net: Ipv6Addr, plen: u32) {
        let mut m: LpmTrie<MapData, [u8; 16], abi::PodNetInfo> = self.map(abi::MAP_POD_NETS6);
        m.insert(&Key::new(plen, net.octets()), abi::PodNetInfo { origin: abi::POD_NET_CONFIGURED, index: 0 }, 0).unwrap();
    }

    /// rules6 {ifindex, source/plen} -> rule `id`, masquerading to `to` when given.
    pub fn add_rule6(&self, ifindex: u32, src: Ipv6Addr, plen: u32, id: u32, to: Option<Ipv6Addr>) {
        let mut m: LpmTrie<MapData, Rule6Data, Rule6Info> = self.map(abi::MAP_RULES6);
        let data = Rule6Data { ifindex_be: ifindex.to_be_bytes(), saddr: src.octets() };
        let info = Rule6Info {
            id,
            flags: if to.is_some() { abi::RULE_F_TO_ADDRESS } else { 0 },
            to_v6: to.map(|a| a.octets()).unwrap_or_default(),
        };
        m.insert(&Key::new(32 + plen, data), info, 0).unwrap();
    }

    pub fn add_rule_except6(&self, id: u32, dst: Ipv6Addr, plen: u32) {
        let mut m: LpmTrie<MapData, RuleExcept6Data, u32> = self.map(abi::MAP_RULE_EXCEPT6);
        let data = RuleExcept6Data { rule_id_be: id.to_be_bytes(), daddr: dst.octets() };
        m.insert(&Key::new(32 + plen, data), 1, 0).unwrap();
    }

    fn nat6_map(&self, name: &str) -> HashMap<MapData, Nat6Key, Nat6Entry> {
        self.map(name)
    }
    pub fn fwd6(&self) -> Vec<(Nat6Key, Nat6Entry)> {
        Fwd::<natmaps::V6>::pinned(&self.pins).unwrap().iter().collect::<Result<_, _>>().unwrap()
    }
    pub fn rev6(&self) -> Vec<(Nat6Key, Nat6Entry)> {
        self.nat6_map(abi::MAP_NAT6_REV).iter().collect::<Result<_, _>>().unwrap()
    }
    pub fn get_fwd6(&self, k: &Nat6Key) -> Option<Nat6Entry> {
        Fwd::<natmaps::V6>::pinned(&self.pins).unwrap().get(k).ok()
    }
    pub fn get_rev6(&self, k: &Nat6Key) -> Option<Nat6Entry> {
        self.nat6_map(abi::MAP_NAT6_REV).get(k, 0).ok()
    }
    pub fn nat6_is_empty(&self) -> bool {
        self.fwd6().is_empty() && self.rev6().is_empty()
    }

    /// Both IPv6 NAT maps hold exactly one pair: `fwd_key` -> (nat, nat_port) and its mirror.
    #[track_caller]
    pub fn assert_single_pair6(&self, fwd_key: Nat6Key, nat: Ipv6Addr, nat_port: u16) -> (Nat6Entry, Nat6Entry) {
        let fwd = self.fwd6();
        let rev = self.rev6();
        assert_eq!(fwd.len(), 1, "nat6_fwd: {fwd:?}");
        assert_eq!(rev.len(), 1, "nat6_rev: {rev:?}");
        let (fk, fe) = fwd[0];
        let (rk, re) = rev[0];
        assert_eq!(fk, fwd_key);
        assert_eq!((fe.addr, fe.port), (nat.octets(), nat_port.to_be_bytes()), "forward half value");
        assert_eq!(rk, reverse_key6(&fwd_key, nat, nat_port), "reverse half key");
        assert_eq!((re.addr, re.port), (fwd_key.saddr, fwd_key.sport), "reverse half value");
        assert_eq!((fe.ifindex, re.ifindex), (LO, LO));
        (fe, re)
    }

    pub fn frag4(&self) -> Vec<(Frag4Key, FragPorts)> {
        let m: HashMap<MapData, Frag4Key, FragPorts> = self.map(abi::MAP_FRAG4);
        m.iter().collect::<Result<_, _>>().unwrap()
    }
    pub fn frag6(&self) -> Vec<(Frag6Key, FragPorts)> {
        let m: HashMap<MapData, Frag6Key, FragPorts> = self.map(abi::MAP_FRAG6);
        m.iter().collect::<Result<_, _>>().unwrap()
    }
}

/// A nat6 key in host-order ports.
pub fn nat6_key(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, proto: u8) -> Nat6Key {
    Nat6Key {
        saddr: src.octets(),
        daddr: dst.octets(),
        sport: sport.to_be_bytes(),
        dport: dport.to_be_bytes(),
        proto,
        pad: [0; 3],
    }
}

/// The reverse key of an IPv6 forward key once NATed to (nat, nat_port).
pub fn reverse_key6(fk: &Nat6Key, nat: Ipv6Addr, nat_port: u16) -> Nat6Key {
    Nat6Key {
        saddr: fk.daddr,
        daddr: nat.octets(),
        sport: fk.dport,
        dport: nat_port.to_be_bytes(),
        proto: fk.proto,
        pad: [0; 3],
    }
}

/// frag4 key {src, dst, id, proto} and its ports, host order.
pub fn frag4_entry(src: Ipv4Addr, dst: Ipv4Addr, id: u16, proto: u8, sport: u16, dport: u16) -> (Frag4Key, FragPorts) {
    (
        Frag4Key { saddr: src.octets(), daddr: dst.octets(), id: id.to_be_bytes(), proto, pad: 0 },
        FragPorts { sport: sport.to_be_bytes(), dport: dport.to_be_bytes(), proto, pad: [0; 3] },
    )
}

pub fn frag6_entry(src: Ipv6Addr, dst: Ipv6Addr, id: u32, proto: u8, sport: u16, dport: u16) -> (Frag6Key, FragPorts) {
    (
        Frag6Key { saddr: src.octets(), daddr: dst.octets(), id: id.to_be_bytes(), proto, pad: [0; 3] },
        FragPorts { sport: sport.to_be_bytes(), dport: dport.to_be_bytes(), proto, pad: [0; 3] },
    )
}
