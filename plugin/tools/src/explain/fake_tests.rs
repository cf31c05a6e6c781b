//! The explain tests' data plane double: every map `explain` reads, as plain vectors
//! (`Fake`, the `Lookups` the real pins give).

use super::*;
use std::cell::Cell;
use std::net::IpAddr;

use ebpf_masq_core::{
    bpf::{abi::{self, ExclInfo, NodeConfig, PodInfo, UplinkInfo}, nat::{Entry, Tuple},},
    config::{policy_dst_entries, EgressAction, EgressPolicy},
    error::Result,
};
use super::tests::*;

/// (source, destination, datagram id, protocol)
type FragKey = (IpAddr, IpAddr, u32, u8);

/// A pod-side endpoint of a binding: (pod address, port, protocol).
type Endpoint3 = (IpAddr, u16, u8);

/// Maps as plain vectors; LPM lookups by byte-prefix matching on the key
/// data, as the kernel's trie compares keys.
#[derive(Default)]
pub(super) struct Fake {
    pub(super) uplinks: Vec<(u32, UplinkInfo)>,
    pub(super) config: Option<NodeConfig>,
    pub(super) nat6: bool,
    pub(super) fwd: Vec<(Tuple, Entry)>,
    pub(super) rev: Vec<(Tuple, Entry)>,
    pub(super) frags: Vec<(FragKey, (u16, u16))>,
    /// (prefix bits of the address, out ifindex, source network, rule)
    pub(super) rules: Vec<(u32, u32, IpAddr, RuleHit)>,
    /// (rule id, except CIDR)
    pub(super) excepts: Vec<(u32, IpAddr, u32)>,
    pub(super) pods: Vec<(IpAddr, PodInfo)>,
    pub(super) excl: Vec<(IpAddr, u32, ExclInfo)>,
    pub(super) atts: Vec<(u32, IpAddr, PodDesc)>,
    pub(super) now: u64,
    pub(super) nat_lookups: Cell<u32>,
    /// nat4_bind / nat6_bind: ((pod addr, port, proto), (node addr, port))
    pub(super) binds: Vec<(Endpoint3, (IpAddr, u16))>,
    /// egressPolicies as configured: policy_dst4/6, masq_pool slots 1+i and
    /// egress_policies are derived from them as node reconcile writes them.
    pub(super) policies: Vec<EgressPolicy>,
    /// The policy byte of forward halves (the rest: 0).
    pub(super) fwd_policy: Vec<(Tuple, u8)>,
    /// refusals per source address.
    pub(super) refused: Vec<(IpAddr, abi::Refusals)>,
    /// pod_nets4/6: (network, prefix bits)
    pub(super) pod_nets: Vec<(IpAddr, u32)>,
}

pub(super) fn addr_bytes(a: &IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

pub(super) fn in_net(net: &IpAddr, plen: u32, a: &IpAddr) -> bool {
    net.is_ipv4() == a.is_ipv4() && prefix_match(&addr_bytes(net), &addr_bytes(a), plen)
}

pub(super) fn cidr(a: &IpAddr, plen: u32) -> String {
    format!("{a}/{plen}")
}

/// The spec JSON node reconcile writes in egress_policies (the policy without its name).
pub(super) fn spec_of(p: &EgressPolicy) -> serde_json::Value {
    let mut v = ebpf_masq_core::config::egress_policies_to_json(std::slice::from_ref(p))[0].clone();
    v.as_object_mut().unwrap().remove("name");
    v
}

pub(super) fn info_of(p: &EgressPolicy) -> abi::EgressPolicyInfo {
    let mut info = abi::EgressPolicyInfo { used: 1, ..Default::default() };
    if p.action == EgressAction::NoNat {
        info.flags = abi::POLICY_F_NO_NAT;
    }
    info.name[..p.name.len()].copy_from_slice(p.name.as_bytes());
    let spec = spec_of(p).to_string();
    info.spec[..spec.len()].copy_from_slice(spec.as_bytes());
    info
}

impl Lookups for Fake {
    fn pod_net(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .pod_nets
            .iter()
            .filter(|(net, plen)| in_net(net, *plen, &addr))
            .max_by_key(|(_, plen)| *plen)
            .map(|(net, plen)| format!("{} (learned from a registered pod's subnet)", cidr(net, *plen))))
    }
    fn refusals(&self, src: IpAddr) -> Result<abi::Refusals> {
        Ok(self.refused.iter().find(|(a, _)| *a == src).map(|(_, r)| *r).unwrap_or_default())
    }
    fn nat_fwd_policy(&self, t: &Tuple) -> Result<u8> {
        Ok(self.fwd_policy.iter().find(|(x, _)| x == t).map(|(_, p)| *p).unwrap_or(0))
    }
    fn policy_dst(&self, set: u32, daddr: IpAddr) -> Result<Option<abi::PolicyHit>> {
        // The LPM entries node reconcile writes for this mask; the longest holding daddr.
        Ok(policy_dst_entries(&self.policies, set)
            .into_iter()
            .filter(|(net, _)| net.contains(daddr))
            .max_by_key(|(net, _)| net.prefix())
            .map(|(_, i)| abi::PolicyHit {
                policy: i as u32,
                flags: if self.policies[i].action == EgressAction::NoNat { abi::POLICY_F_NO_NAT } else { 0 },
            }))
    }
    fn pool_slot(&self, slot: u32) -> Result<Option<abi::MasqPool>> {
        let Some(p) = slot.checked_sub(1).and_then(|i| self.policies.get(i as usize)) else { return Ok(None) };
        let mut pool = abi::MasqPool::default();
        if let EgressAction::Masquerade { v4, v6 } = &p.action {
            v4.iter().enumerate().for_each(|(i, a)| pool.v4[i] = a.octets());
            v6.iter().enumerate().for_each(|(i, a)| pool.v6[i] = a.octets());
            (pool.len4, pool.len6) = (v4.len() as u32, v6.len() as u32);
        }
        Ok(Some(pool))
    }
    fn egress_policies(&self) -> Result<Vec<crate::readers::PolicyDesc>> {
        Ok(self.policies.iter().enumerate().filter_map(|(i, p)| crate::readers::PolicyDesc::of(i as u32, &info_of(p))).collect())
    }
    fn binding(&self, addr: IpAddr, port: u16, proto: u8) -> Result<Option<(IpAddr, u16)>> {
        Ok(self.binds.iter().find(|(k, _)| *k == (addr, port, proto)).map(|(_, b)| *b))
    }
    fn uplink(&self, ifindex: u32) -> Result<Option<UplinkInfo>> {
        Ok(self.uplinks.iter().find(|(i, _)| *i == ifindex).map(|(_, u)| *u))
    }
    fn config(&self) -> Result<Option<NodeConfig>> {
        Ok(self.config)
    }
    fn has_nat(&self, v6: bool) -> bool {
        !v6 || self.nat6
    }
    fn nat_fwd(&self, t: &Tuple) -> Result<Option<Entry>> {
        self.nat_lookups.set(self.nat_lookups.get() + 1);
        Ok(self.fwd.iter().find(|(x, _)| x == t).map(|(_, e)| *e))
    }
    fn nat_rev(&self, t: &Tuple) -> Result<Option<Entry>> {
        Ok(self.rev.iter().find(|(x, _)| x == t).map(|(_, e)| *e))
    }
    fn frag(&self, src: IpAddr, dst: IpAddr, id: u32, proto: u8) -> Result<Option<(u16, u16)>> {
        Ok(self.frags.iter().find(|(k, _)| *k == (src, dst, id, proto)).map(|(_, p)| *p))
    }
    fn rule(&self, ifindex: u32, saddr: IpAddr) -> Result<Option<RuleHit>> {
        Ok(self
            .rules
            .iter()
            .filter(|(plen, i, net, _)| *i == ifindex && in_net(net, *plen, &saddr))
            .max_by_key(|(plen, ..)| *plen)
            .map(|(.., r)| *r))
    }
    fn rule_except(&self, rule_id: u32, daddr: IpAddr) -> Result<Option<String>> {
        Ok(self
            .excepts
            .iter()
            .filter(|(id, net, plen)| *id == rule_id && in_net(net, *plen, &daddr))
            .max_by_key(|(_, _, plen)| *plen)
            .map(|(_, net, plen)| cidr(net, *plen)))
    }
    fn pod(&self, addr: IpAddr) -> Result<Option<PodInfo>> {
        Ok(self.pods.iter().find(|(a, _)| *a == addr).map(|(_, p)| *p))
    }
    fn excl(&self, addr: IpAddr) -> Result<Option<(ExclInfo, String)>> {
        Ok(self
            .excl
            .iter()
            .filter(|(net, plen, _)| in_net(net, *plen, &addr))
            .max_by_key(|(_, plen, _)| *plen)
            .map(|(net, plen, x)| (*x, cidr(net, *plen))))
    }
    fn now_ns(&self) -> u64 {
        self.now
    }
    fn rule_desc(&self, id: u32) -> Option<RuleDesc> {
        self.rules.iter().find(|(.., r)| r.id == id).map(|(plen, i, net, _)| RuleDesc {
            source: cidr(net, *plen),
            out_interface: Some(out(*i).label()),
        })
    }
    fn pod_desc(&self, veth_ifindex: u32, addr: IpAddr) -> Option<PodDesc> {
        self.atts.iter().find(|(i, a, _)| *i == veth_ifindex && *a == addr).map(|(_, _, d)| d.clone())
    }
}
