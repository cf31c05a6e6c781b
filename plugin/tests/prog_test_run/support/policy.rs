//! The harness's egress policies: pods a policy mask selects, policy addresses,
//! per-destination entries, and the policies' counters.

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::maps::{lpm_trie::Key, Array, HashMap, LpmTrie, MapData, PerCpuArray};
use ebpf_masq::bpf::abi::{self, *};

use super::harness::Dataplane;

impl Dataplane {
    /// A pod address behind veth `ifindex` that the egress policies of `mask` select.
    pub fn add_pod_with_policies(&self, addr: Ipv4Addr, ifindex: u32, mask: u32) {
        let mut pods: HashMap<MapData, [u8; 4], PodInfo> = self.map(abi::MAP_PODS4);
        let pod = PodInfo { ifindex, flags: abi::POD_F_NAT_OUTGOING, policies: mask, ..Default::default() };
        pods.insert(addr.octets(), pod, 0).unwrap();
        self.veth_add_addr(ifindex, pod, addr.into());
    }

    /// The IPv6 twin of `add_pod_with_policies`.
    pub fn add_pod6_with_policies(&self, addr: Ipv6Addr, ifindex: u32, mask: u32) {
        let mut pods: HashMap<MapData, [u8; 16], PodInfo> = self.map(abi::MAP_PODS6);
        let pod = PodInfo { ifindex, flags: abi::POD_F_NAT_OUTGOING, policies: mask, ..Default::default() };
        pods.insert(addr.octets(), pod, 0).unwrap();
        self.veth_add_addr(ifindex, pod, addr.into());
    }

    /// Policy `index`'s addresses (its masq_pool slot, 1 + index).
    pub fn set_policy_addrs(&self, index: u32, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) {
        let mut p = MasqPool { len4: v4.len() as u32, len6: v6.len() as u32, ..Default::default() };
        for (slot, a) in p.v4.iter_mut().zip(v4) {
            *slot = a.octets();
        }
        for (slot, a) in p.v6.iter_mut().zip(v6) {
            *slot = a.octets();
        }
        let mut m: Array<MapData, MasqPool> = self.map(abi::MAP_MASQ_POOL);
        m.set(1 + index, p, 0).unwrap();
    }

    /// policy_dst4 (mask, net/plen) -> policy `index` with POLICY_F_* `flags`.
    pub fn add_egress(&self, mask: u32, net: Ipv4Addr, plen: u32, index: u32, flags: u32) {
        let mut m: LpmTrie<MapData, PolicyDst4Data, PolicyHit> = self.map(abi::MAP_POLICY_DST4);
        let k = Key::new(32 + plen, PolicyDst4Data { set: mask, daddr: net.octets() });
        m.insert(&k, PolicyHit { policy: index, flags }, 0).unwrap();
    }

    pub fn del_egress(&self, mask: u32, net: Ipv4Addr, plen: u32) {
        let mut m: LpmTrie<MapData, PolicyDst4Data, PolicyHit> = self.map(abi::MAP_POLICY_DST4);
        m.remove(&Key::new(32 + plen, PolicyDst4Data { set: mask, daddr: net.octets() })).unwrap();
    }

    pub fn add_egress6(&self, mask: u32, net: Ipv6Addr, plen: u32, index: u32, flags: u32) {
        let mut m: LpmTrie<MapData, PolicyDst6Data, PolicyHit> = self.map(abi::MAP_POLICY_DST6);
        let k = Key::new(32 + plen, PolicyDst6Data { set: mask, daddr: net.octets() });
        m.insert(&k, PolicyHit { policy: index, flags }, 0).unwrap();
    }

    /// Policy `index`'s counters, summed over the CPUs.
    pub fn policy_stats(&self, index: u32) -> PolicyStats {
        let m: PerCpuArray<MapData, PolicyStats> = self.map(abi::MAP_POLICY_STATS);
        m.get(&index, 0).unwrap().iter().fold(PolicyStats::default(), |a, s| PolicyStats {
            packets: a.packets + s.packets,
            bytes: a.bytes + s.bytes,
            flows: a.flows + s.flows,
            unmasqueraded: a.unmasqueraded + s.unmasqueraded,
        })
    }
}
