//! The node's pod address ranges (pod_nets4/6): podCIDRs, and the subnet of every
//! registered pod's address. A packet from inside them that no registered pod
//! owns is dropped where a pod's would be masqueraded (bpf/lib/decide.h), so a pod
//! whose ADD never reached ebpf-masq never leaves with its own address.
//!
//! podCIDRs entries are reconciled to the config (`POD_NET_CONFIGURED`); a learned
//! subnet (`POD_NET_LEARNED`, from a pod's prevResult prefix when it is shorter
//! than a host route) stays until the data plane is uninstalled: the node's pod
//! subnet outlives its pods.

use std::collections::BTreeMap;

use aya::maps::{lpm_trie::Key, LpmTrie, MapData};
use ipnetwork::IpNetwork;

use super::config_maps::sync_lpm;
use crate::{
    bpf::{
        abi::{self, PodNetInfo},
        loader::Pins,
        maps,
    },
    config::MasqOptions,
    error::{Context, Result},
};

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// podCIDRs, at this index.
    Configured(u32),
    /// A registered pod's subnet.
    Learned,
}

fn origin_of(v: &PodNetInfo) -> Option<Origin> {
    match v.origin {
        abi::POD_NET_CONFIGURED => Some(Origin::Configured(v.index)),
        abi::POD_NET_LEARNED => Some(Origin::Learned),
        _ => None,
    }
}

fn pinned(pins: &Pins) -> Result<(LpmTrie<MapData, [u8; 4], PodNetInfo>, LpmTrie<MapData, [u8; 16], PodNetInfo>)> {
    Ok((maps::pinned(pins, abi::MAP_POD_NETS4)?, maps::pinned(pins, abi::MAP_POD_NETS6)?))
}

/// A learned subnet only when it is wider than a host route (Calico's /32s teach nothing).
fn learnable(n: &IpNetwork) -> bool {
    match n {
        IpNetwork::V4(n) => n.prefix() < 32,
        IpNetwork::V6(n) => n.prefix() < 128,
    }
}

/// Add the subnets of a registered pod's addresses (`nets`: its prevResult's
/// address/prefix) that are not there yet. The caller holds the node lock.
pub fn learn(pins: &Pins, nets: &[IpNetwork]) -> Result<()> {
    let (mut v4, mut v6) = pinned(pins)?;
    let learned = PodNetInfo { origin: abi::POD_NET_LEARNED, index: 0 };
    for n in nets.iter().filter(|n| learnable(n)) {
        match n {
            IpNetwork::V4(n) => {
                let k = Key::new(n.prefix() as u32, n.network().octets());
                if v4.get(&k, 0).is_err() {
                    v4.insert(&k, learned, 0).bpf_ctx("insert into pod_nets4")?;
                }
            }
            IpNetwork::V6(n) => {
                let k = Key::new(n.prefix() as u32, n.network().octets());
                if v6.get(&k, 0).is_err() {
                    v6.insert(&k, learned, 0).bpf_ctx("insert into pod_nets6")?;
                }
            }
        }
    }
    Ok(())
}

/// podCIDRs into pod_nets4/6: its entries written, configured ones it no longer
/// lists removed, learned ones kept. The caller holds the node lock.
pub(super) fn reconcile(pins: &Pins, conf: &MasqOptions) -> Result<()> {
    let (mut v4, mut v6) = pinned(pins)?;
    let mut want4: BTreeMap<(u32, [u8; 4]), PodNetInfo> = BTreeMap::new();
    let mut want6: BTreeMap<(u32, [u8; 16]), PodNetInfo> = BTreeMap::new();
    for (i, n) in conf.pod_cidrs.iter().enumerate() {
        let v = PodNetInfo { origin: abi::POD_NET_CONFIGURED, index: i as u32 };
        match n {
            IpNetwork::V4(n) => want4.entry((n.prefix() as u32, n.network().octets())).or_insert(v),
            IpNetwork::V6(n) => want6.entry((n.prefix() as u32, n.network().octets())).or_insert(v),
        };
    }
    let learned = |v: &PodNetInfo| v.origin != abi::POD_NET_CONFIGURED;
    sync_lpm(&mut v4, &want4, "pod_nets4", learned)?;
    sync_lpm(&mut v6, &want6, "pod_nets6", learned)
}

/// The longest entry that holds `addr`, as the data plane's lookup finds it (None
/// also for a data plane of an older layout, which has no pod ranges).
pub fn lookup(pins: &Pins, addr: std::net::IpAddr) -> Result<Option<(IpNetwork, Origin)>> {
    if !pins.map(abi::MAP_POD_NETS4).exists() {
        return Ok(None);
    }
    Ok(list(pins)?.into_iter().filter(|(n, _)| n.contains(addr)).max_by_key(|(n, _)| n.prefix()))
}

/// Every entry, IPv4 first, each with where it came from.
pub fn list(pins: &Pins) -> Result<Vec<(IpNetwork, Origin)>> {
    let (v4, v6) = pinned(pins)?;
    let mut out = Vec::new();
    for e in v4.iter() {
        let (k, v) = e.bpf_ctx("pod_nets4")?;
        if let (Ok(n), Some(o)) = (ipnetwork::Ipv4Network::new(k.data().into(), k.prefix_len() as u8), origin_of(&v)) {
            out.push((IpNetwork::V4(n), o));
        }
    }
    for e in v6.iter() {
        let (k, v) = e.bpf_ctx("pod_nets6")?;
        if let (Ok(n), Some(o)) = (ipnetwork::Ipv6Network::new(k.data().into(), k.prefix_len() as u8), origin_of(&v)) {
            out.push((IpNetwork::V6(n), o));
        }
    }
    Ok(out)
}
