//! What the config writes into the node-wide maps: node_config, masq_pool, the
//! exclusions, the service CIDRs and the masquerade rules.

use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    net::IpAddr,
};

use aya::maps::{lpm_trie::Key, Array, LpmTrie, MapData};
use ipnetwork::IpNetwork;

use super::{ipmasq::FROM_IP_MASQ_AGENT, Uplink};
use crate::{
    bpf::{
        abi::{
            self, ExclInfo, NodeConfig, Rule4Data, Rule6Data, Rule6Info, RuleExcept4Data, RuleExcept6Data,
            RuleInfo,
        },
        loader::Pins,
        maps,
    },
    config::MasqOptions,
    error::{Context, Result},
};

/// natFiltering as the data plane's NAT_FILTER_* bits.
pub fn filter_bits(f: crate::config::NatFiltering) -> u32 {
    match f {
        crate::config::NatFiltering::AddressAndPortDependent => 0,
        crate::config::NatFiltering::AddressDependent => abi::NAT_FILTER_AD,
        crate::config::NatFiltering::EndpointIndependent => abi::NAT_FILTER_EI,
    }
}

pub(super) fn write_config(pins: &Pins, conf: &MasqOptions) -> Result<()> {
    let mut cfg: Array<MapData, NodeConfig> = maps::pinned(pins, abi::MAP_CONFIG)?;
    // The shard seed and count are the loader's (built into the programs): kept.
    let old = cfg.get(&0, 0).ok();
    let (seed, shards) = old.map(|c| (c.nat_seed, c.nat_shards)).unwrap_or((0, 0));
    // Sticky: pods of another network (or of an earlier config) may still have open
    // mappings; the flag only costs a lookup for unanswered packets.
    let open = conf.nat_filtering != crate::config::NatFiltering::default()
        || conf.masquerade_rules.iter().any(|r| r.nat_filtering != crate::config::NatFiltering::default())
        || old.is_some_and(|c| c.flags & abi::MASQ_F_OPEN_MAPPINGS != 0);
    let v = NodeConfig {
        port_min: conf.port_range.0,
        port_max: conf.port_range.1,
        flags: if conf.fast_path { abi::MASQ_F_FAST_PATH } else { 0 } | if open { abi::MASQ_F_OPEN_MAPPINGS } else { 0 },
        tcp_timeout_s: conf.nat_timeouts.tcp,
        tcp_closing_timeout_s: conf.nat_timeouts.tcp_closing,
        udp_timeout_s: conf.nat_timeouts.udp,
        icmp_timeout_s: conf.nat_timeouts.icmp,
        nat_seed: seed,
        nat_shards: shards,
        skip_min: conf.node_port_range.map_or(0, |r| r.0),
        skip_max: conf.node_port_range.map_or(0, |r| r.1),
        udp_one_shot_timeout_s: conf.nat_timeouts.udp_one_shot,
    };
    cfg.set(0, v, 0).bpf_ctx("write node_config")
}

/// masqueradeAddress's pool (masq_pool), written before the uplinks that use it.
pub(super) fn write_pool(pins: &Pins, conf: &MasqOptions) -> Result<()> {
    let mut m: Array<MapData, abi::MasqPool> = maps::pinned(pins, abi::MAP_MASQ_POOL)?;
    let mut p = abi::MasqPool {
        len4: conf.masquerade_pool_v4.len() as u32,
        len6: conf.masquerade_pool_v6.len() as u32,
        ..Default::default()
    };
    for (slot, a) in p.v4.iter_mut().zip(&conf.masquerade_pool_v4) {
        *slot = a.octets();
    }
    for (slot, a) in p.v6.iter_mut().zip(&conf.masquerade_pool_v6) {
        *slot = a.octets();
    }
    m.set(0, p, 0).bpf_ctx("write masq_pool")
}

/// Desired exclusions, in the order that decides the reported reason when the
/// same CIDR is listed twice: native routing first.
pub fn desired_exclusions(conf: &MasqOptions) -> Vec<(IpNetwork, ExclInfo)> {
    let mut out: Vec<(IpNetwork, ExclInfo)> = Vec::new();
    let mut push = |n: IpNetwork, reason: u32, index: u32| {
        if !out.iter().any(|(m, _)| *m == n) {
            out.push((n, ExclInfo { reason, index }));
        }
    };
    for (i, n) in conf.native_routing_cidrs.iter().enumerate() {
        push(*n, abi::EXCL_NATIVE_ROUTING, i as u32);
    }
    for (i, n) in conf.non_masquerade_cidrs.iter().enumerate() {
        push(*n, abi::EXCL_NON_MASQ, i as u32);
    }
    // ip-masq-agent's list: the union with the network's own (a CIDR in both is
    // reported as the network's); its index carries FROM_IP_MASQ_AGENT, which
    // status and explain read (the data plane reads neither reason nor index).
    let ipm = conf.ip_masq_agent.as_ref();
    for (i, n) in ipm.map(|a| a.non_masquerade_cidrs.as_slice()).unwrap_or_default().iter().enumerate() {
        push(*n, abi::EXCL_NON_MASQ, FROM_IP_MASQ_AGENT | i as u32);
    }
    let ll_index = if ipm.is_some() { FROM_IP_MASQ_AGENT } else { 0 };
    let (ll4, ll6) = conf.effective_masq_link_local();
    if !ll4 {
        push("169.254.0.0/16".parse().expect("static CIDR"), abi::EXCL_LINK_LOCAL, ll_index);
    }
    if !ll6 {
        push("fe80::/10".parse().expect("static CIDR"), abi::EXCL_LINK_LOCAL, ll_index);
    }
    out
}

pub(super) fn reconcile_exclusions(pins: &Pins, conf: &MasqOptions) -> Result<()> {
    let desired = desired_exclusions(conf);
    let mut v4: LpmTrie<MapData, [u8; 4], ExclInfo> = maps::pinned(pins, abi::MAP_EXCL4)?;
    let mut v6: LpmTrie<MapData, [u8; 16], ExclInfo> = maps::pinned(pins, abi::MAP_EXCL6)?;
    let want4: BTreeMap<(u32, [u8; 4]), ExclInfo> = desired
        .iter()
        .filter_map(|(n, i)| match n {
            IpNetwork::V4(n) => Some(((n.prefix() as u32, n.network().octets()), *i)),
            _ => None,
        })
        .collect();
    let want6: BTreeMap<(u32, [u8; 16]), ExclInfo> = desired
        .iter()
        .filter_map(|(n, i)| match n {
            IpNetwork::V6(n) => Some(((n.prefix() as u32, n.network().octets()), *i)),
            _ => None,
        })
        .collect();
    sync_lpm(&mut v4, &want4, "excl4", |_| false)?;
    sync_lpm(&mut v6, &want6, "excl6", |_| false)
}

/// serviceCIDRs -> svc4/svc6 (value: index in the list): destinations the fast
/// path leaves to the stack, so netfilter (kube-proxy) can DNAT them. Written
/// whether or not fastPath is on, so turning it on needs nothing else.
pub(super) fn reconcile_services(pins: &Pins, conf: &MasqOptions) -> Result<()> {
    let mut want4: BTreeMap<(u32, [u8; 4]), u32> = BTreeMap::new();
    let mut want6: BTreeMap<(u32, [u8; 16]), u32> = BTreeMap::new();
    for (i, n) in conf.service_cidrs.iter().enumerate() {
        match n {
            IpNetwork::V4(n) => {
                want4.entry((n.prefix() as u32, n.network().octets())).or_insert(i as u32);
            }
            IpNetwork::V6(n) => {
                want6.entry((n.prefix() as u32, n.network().octets())).or_insert(i as u32);
            }
        }
    }
    let mut v4: LpmTrie<MapData, [u8; 4], u32> = maps::pinned(pins, abi::MAP_SVC4)?;
    sync_lpm(&mut v4, &want4, "svc4", |_| false)?;
    let mut v6: LpmTrie<MapData, [u8; 16], u32> = maps::pinned(pins, abi::MAP_SVC6)?;
    sync_lpm(&mut v6, &want6, "svc6", |_| false)
}

/// Make an LPM trie hold exactly `want`: insert/overwrite first, then delete the rest,
/// so a destination never passes through a moment with no exclusion.
/// An LPM map made to hold `want`: its entries written, every other entry removed
/// unless `keep` says the entry is not the config's to remove (pod_nets' learned
/// subnets).
pub(super) fn sync_lpm<K: aya::Pod + Ord + Copy, V: aya::Pod>(
    map: &mut LpmTrie<MapData, K, V>,
    want: &BTreeMap<(u32, K), V>,
    what: &str,
    keep: impl Fn(&V) -> bool,
) -> Result<()> {
    for ((plen, data), v) in want {
        map.insert(&Key::new(*plen, *data), v, 0).bpf_ctx(format!("insert into {what}"))?;
    }
    let present: Vec<(Key<K>, V)> = map.iter().collect::<std::result::Result<_, _>>().bpf_ctx(what)?;
    for (k, v) in present {
        if !keep(&v) && !want.contains_key(&(k.prefix_len(), k.data())) {
            map.remove(&k).bpf_ctx(format!("remove from {what}"))?;
        }
    }
    Ok(())
}

pub(super) fn reconcile_rules(pins: &Pins, conf: &MasqOptions, uplinks: &[Uplink]) -> Result<()> {
    let ifindex_of: StdHashMap<&str, u32> = uplinks.iter().map(|u| (u.name.as_str(), u.ifindex)).collect();
    let mut rules4 = BTreeMap::new();
    let mut except4 = BTreeMap::new();
    let mut rules6 = BTreeMap::new();
    let mut except6 = BTreeMap::new();
    for (id, r) in conf.masquerade_rules.iter().enumerate() {
        let id = id as u32;
        let ifindex_be = ifindex_of[r.out_interface.as_str()].to_be_bytes();
        let to_address = if r.to_address.is_some() { abi::RULE_F_TO_ADDRESS } else { 0 } | filter_bits(r.nat_filtering);
        // First rule wins for the same (interface, source).
        match r.source {
            IpNetwork::V4(src) => {
                let to_v4 = match r.to_address {
                    Some(IpAddr::V4(a)) => a.octets(),
                    _ => [0; 4],
                };
                let data = Rule4Data { ifindex_be, saddr: src.network().octets() };
                rules4.entry((32 + src.prefix() as u32, data)).or_insert(RuleInfo { id, flags: to_address, to_v4, pad: 0 });
            }
            IpNetwork::V6(src) => {
                let to_v6 = match r.to_address {
                    Some(IpAddr::V6(a)) => a.octets(),
                    _ => [0; 16],
                };
                let data = Rule6Data { ifindex_be, saddr: src.network().octets() };
                rules6.entry((32 + src.prefix() as u32, data)).or_insert(Rule6Info { id, flags: to_address, to_v6 });
            }
        }
        for e in &r.except {
            match e {
                IpNetwork::V4(e) => {
                    let d = RuleExcept4Data { rule_id_be: id.to_be_bytes(), daddr: e.network().octets() };
                    except4.insert((32 + e.prefix() as u32, d), 1u32);
                }
                IpNetwork::V6(e) => {
                    let d = RuleExcept6Data { rule_id_be: id.to_be_bytes(), daddr: e.network().octets() };
                    except6.insert((32 + e.prefix() as u32, d), 1u32);
                }
            }
        }
    }
    // Exceptions first, so a new rule never matches before its exceptions exist.
    let mut m: LpmTrie<MapData, RuleExcept4Data, u32> = maps::pinned(pins, abi::MAP_RULE_EXCEPT4)?;
    sync_lpm(&mut m, &except4, "rule_except4", |_| false)?;
    let mut m: LpmTrie<MapData, RuleExcept6Data, u32> = maps::pinned(pins, abi::MAP_RULE_EXCEPT6)?;
    sync_lpm(&mut m, &except6, "rule_except6", |_| false)?;
    let mut m: LpmTrie<MapData, Rule4Data, RuleInfo> = maps::pinned(pins, abi::MAP_RULES4)?;
    sync_lpm(&mut m, &rules4, "rules4", |_| false)?;
    let mut m: LpmTrie<MapData, Rule6Data, Rule6Info> = maps::pinned(pins, abi::MAP_RULES6)?;
    sync_lpm(&mut m, &rules6, "rules6", |_| false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_dedupe_and_link_local() {
        let mut c = MasqOptions {
            native_routing_cidrs: vec!["10.0.0.0/8".parse().unwrap()],
            non_masquerade_cidrs: vec!["10.0.0.0/8".parse().unwrap(), "192.168.0.0/16".parse().unwrap()],
            ..Default::default()
        };
        let d = desired_exclusions(&c);
        assert_eq!(d.len(), 4); // 10/8 once (native wins), 192.168/16, 169.254/16, fe80::/10
        assert_eq!(d[0].1.reason, abi::EXCL_NATIVE_ROUTING);
        assert_eq!(d[1].1, ExclInfo { reason: abi::EXCL_NON_MASQ, index: 1 });
        c.masq_link_local = true;
        c.masq_link_local_ipv6 = true;
        assert_eq!(desired_exclusions(&c).len(), 2);
    }

    #[test]
    fn ip_masq_agent_cidrs_are_unioned_and_marked() {
        let file = crate::config::parse_ip_masq_agent(b"nonMasqueradeCIDRs: [192.168.0.0/16, 198.51.100.0/24]", false);
        let c = MasqOptions {
            non_masquerade_cidrs: vec!["192.168.0.0/16".parse().unwrap()],
            masq_link_local: true, // the file's false wins
            ip_masq_agent: Some(crate::config::IpMasqAgent::from_file("/f".into(), false, &file.unwrap())),
            ..Default::default()
        };
        let d = desired_exclusions(&c);
        assert_eq!(d[0], ("192.168.0.0/16".parse().unwrap(), ExclInfo { reason: abi::EXCL_NON_MASQ, index: 0 }));
        assert_eq!(
            d[1],
            ("198.51.100.0/24".parse().unwrap(), ExclInfo { reason: abi::EXCL_NON_MASQ, index: FROM_IP_MASQ_AGENT | 1 })
        );
        assert_eq!(d[2].1, ExclInfo { reason: abi::EXCL_LINK_LOCAL, index: FROM_IP_MASQ_AGENT });
        assert_eq!(d.len(), 4);
    }
}
