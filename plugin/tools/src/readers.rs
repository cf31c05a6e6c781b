//! Typed readers of the pinned maps shared by the operator commands (`status`,
//! `metrics`, `explain`): one place that knows how to join a map with its
//! counters and name what it holds.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    os::fd::{AsFd, AsRawFd},
};

use aya::maps::{lpm_trie::LpmTrie, Array, HashMap, MapData, PerCpuArray, PerCpuHashMap};

use ebpf_masq_core::{
    bpf::{abi::{self, EgressPolicyInfo, PolicyStats, PodInfo, PodStats, Rule4Data, Rule6Data, Rule6Info, RuleExcept4Data, RuleExcept6Data, RuleInfo, RuleStats, VethInfo,}, loader::Pins, maps,},
    error::{Error, Result},
    netlink,
    node,
    pod,
};

mod policies;
pub use policies::*;

fn e(what: &str) -> impl Fn(aya::maps::MapError) -> Error + '_ {
    move |err| Error::bpf(format!("{what}: {err}"))
}

/// One masquerade rule as the maps hold it (rules4 or rules6), with its counters.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleRow {
    pub id: u32,
    pub source: IpAddr,
    pub source_len: u8,
    pub out_ifindex: u32,
    /// The interface's name now (None: no such interface any more).
    pub out_interface: Option<String>,
    /// "addr/len" of every except CIDR of this rule.
    pub except: Vec<String>,
    pub to_address: Option<IpAddr>,
    pub packets: u64,
    pub bytes: u64,
}

impl RuleRow {
    pub fn source_cidr(&self) -> String {
        format!("{}/{}", self.source, self.source_len)
    }
    pub fn family(&self) -> &'static str {
        if self.source.is_ipv6() {
            "ipv6"
        } else {
            "ipv4"
        }
    }
}

/// (rule id, "addr/len") of every except CIDR in an except trie of either family.
fn excepts<K: aya::Pod>(
    pins: &Pins,
    name: &str,
    show: impl Fn(&K) -> (u32, String),
) -> Result<Vec<(u32, String)>> {
    if !has_map(pins, name) {
        return Ok(Vec::new());
    }
    let trie: LpmTrie<MapData, K, u32> = maps::pinned(pins, name)?;
    let mut out = Vec::new();
    for item in trie.keys() {
        let k = item.map_err(e(name))?;
        let (id, addr) = show(&k.data());
        out.push((id, format!("{addr}/{}", k.prefix_len() - 32)));
    }
    Ok(out)
}

/// Every rule of both families (rules4/rules6 joined with their except lists and
/// rule_stats, which the families share), by id. rules6 is read when pinned.
pub fn rules(pins: &Pins) -> Result<Vec<RuleRow>> {
    let rstats: PerCpuArray<MapData, RuleStats> = maps::pinned(pins, abi::MAP_RULE_STATS)?;
    let mut all_except = excepts::<RuleExcept4Data>(pins, abi::MAP_RULE_EXCEPT4, |d| {
        (u32::from_be_bytes(d.rule_id_be), Ipv4Addr::from(d.daddr).to_string())
    })?;
    all_except.extend(excepts::<RuleExcept6Data>(pins, abi::MAP_RULE_EXCEPT6, |d| {
        (u32::from_be_bytes(d.rule_id_be), Ipv6Addr::from(d.daddr).to_string())
    })?);

    // (prefix length incl. the 32 ifindex bits, ifindex, source, id, toAddress)
    let mut found: Vec<(u32, u32, IpAddr, u32, Option<IpAddr>)> = Vec::new();
    let rules4: LpmTrie<MapData, Rule4Data, RuleInfo> = maps::pinned(pins, abi::MAP_RULES4)?;
    for item in rules4.iter() {
        let (k, r) = item.map_err(e(abi::MAP_RULES4))?;
        let d = k.data();
        let to = (r.flags & abi::RULE_F_TO_ADDRESS != 0).then(|| IpAddr::V4(Ipv4Addr::from(r.to_v4)));
        found.push((k.prefix_len(), u32::from_be_bytes(d.ifindex_be), IpAddr::V4(Ipv4Addr::from(d.saddr)), r.id, to));
    }
    if has_map(pins, abi::MAP_RULES6) {
        let rules6: LpmTrie<MapData, Rule6Data, Rule6Info> = maps::pinned(pins, abi::MAP_RULES6)?;
        for item in rules6.iter() {
            let (k, r) = item.map_err(e(abi::MAP_RULES6))?;
            let d = k.data();
            let to = (r.flags & abi::RULE_F_TO_ADDRESS != 0).then(|| IpAddr::V6(Ipv6Addr::from(r.to_v6)));
            found.push((k.prefix_len(), u32::from_be_bytes(d.ifindex_be), IpAddr::V6(Ipv6Addr::from(d.saddr)), r.id, to));
        }
    }

    let mut rules = Vec::new();
    for (plen, ifindex, source, id, to_address) in found {
        let name = netlink::get_link_by_index(ifindex)?.map(|l| l.name);
        let st = rstats.get(&id, 0).map_err(e(abi::MAP_RULE_STATS))?;
        let (packets, bytes) = st.iter().fold((0u64, 0u64), |(p, b), s| (p + s.packets, b + s.bytes));
        rules.push(RuleRow {
            id,
            source,
            source_len: (plen - 32) as u8,
            out_ifindex: ifindex,
            out_interface: name,
            except: all_except.iter().filter(|(i, _)| *i == id).map(|(_, c)| c.clone()).collect(),
            to_address,
            packets,
            bytes,
        });
    }
    rules.sort_by_key(|r| r.id);
    Ok(rules)
}

/// One pod attachment (the `attachments` record) with its veth counters.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRow {
    pub container_id: String,
    pub ifname: String,
    pub veth: String,
    pub veth_ifindex: u32,
    pub addresses: Vec<IpAddr>,
    pub nat_outgoing: bool,
    pub packets: u64,
    pub bytes: u64,
    pub spoofed: u64,
    /// New flows from the pod's addresses refused: no port free towards the remote
    /// endpoint, over the pod's share of a busy endpoint's ports, and at its port
    /// limit there (`refusals`).
    pub refused_no_port: u64,
    pub refused_over_share: u64,
    pub refused_over_limit: u64,
    /// The most ports the pod may hold towards one remote endpoint (its
    /// registration's podPortLimit or ebpf-masq.io/port-limit); None: no limit.
    pub port_limit: Option<u16>,
    /// Kubernetes namespace and name (CNI_ARGS), "" when the runtime gave none.
    pub k8s_namespace: String,
    pub k8s_name: String,
    /// The pod's ebpf-masq.io/ annotations (runtimeConfig), a JSON object.
    pub annotations: serde_json::Value,
    /// The pod's hostPorts ("8080/tcp"), never handed to masqueraded flows.
    pub host_ports: Vec<String>,
    /// Registered by the agent from a runtime's CNI cache (its ADD never reached ebpf-masq).
    pub found: bool,
    /// The egress policies selecting the pod (`PodInfo.policies` of its pods4/pods6
    /// entries): bit i = policy i.
    pub policies: u32,
}

impl PodRow {
    /// How status names the pod: "namespace/name" when the runtime gave them,
    /// else "container id/ifname (veth)".
    pub fn label(&self) -> String {
        if self.k8s_name.is_empty() {
            format!("{}/{} ({})", self.container_id, self.ifname, self.veth)
        } else {
            format!("{}/{}", self.k8s_namespace, self.k8s_name)
        }
    }
}

/// Every pod attachment on the node, in map order.
pub fn pods(pins: &Pins) -> Result<Vec<PodRow>> {
    let stats: PerCpuHashMap<MapData, u32, VethInfo> = maps::pinned(pins, abi::MAP_VETHS)?;
    // A data plane of an older layout (read during an upgrade) has no pod_meta.
    let metas = if has_map(pins, abi::MAP_POD_META) { pod::list_meta(pins)? } else { Default::default() };
    // The policy mask is in the pods4/pods6 entries; a data plane of an older
    // layout (another pod_info size) has none: no policy selects its pods.
    let pods4: Option<HashMap<MapData, [u8; 4], PodInfo>> = maps::pinned(pins, abi::MAP_PODS4).ok();
    let pods6: Option<HashMap<MapData, [u8; 16], PodInfo>> = maps::pinned(pins, abi::MAP_PODS6).ok();
    let mask_of = |a: &IpAddr| match a {
        IpAddr::V4(a) => pods4.as_ref().and_then(|m| m.get(&a.octets(), 0).ok()).map_or(0, |p| p.policies),
        IpAddr::V6(a) => pods6.as_ref().and_then(|m| m.get(&a.octets(), 0).ok()).map_or(0, |p| p.policies),
    };
    let mut out = Vec::new();
    for (k, info) in pod::list_attachments(pins)? {
        let meta = metas.get(&k).copied().unwrap_or_default();
        let (k8s_namespace, k8s_name, annotations) = pod::meta_fields(&meta);
        let host_ports = pod::host_ports_of(&meta)
            .iter()
            .map(|h| format!("{}/{}", h.port, if h.proto == 17 { "udp" } else { "tcp" }))
            .collect();
        let st = stats.get(&info.veth_ifindex, 0).ok();
        let sum =
            |f: fn(&PodStats) -> u64| st.as_ref().map(|s| s.iter().map(|v| f(&v.stats)).sum::<u64>()).unwrap_or(0);
        let addresses = pod::addrs_of(&info);
        let refused = ebpf_masq_core::bpf::refusals::of(pins, &addresses)?;
        out.push(PodRow {
            policies: addresses.iter().fold(0, |m, a| m | mask_of(a)),
            container_id: pod::cstr(&k.container_id),
            ifname: pod::cstr(&k.ifname),
            veth: pod::cstr(&info.veth_name),
            veth_ifindex: info.veth_ifindex,
            addresses,
            nat_outgoing: info.flags & abi::ATT_F_NAT_OUTGOING != 0,
            found: info.flags & abi::ATT_F_FOUND != 0,
            packets: sum(|s| s.packets),
            bytes: sum(|s| s.bytes),
            spoofed: sum(|s| s.spoofed),
            refused_no_port: refused.no_port,
            refused_over_share: refused.over_share,
            refused_over_limit: refused.over_limit,
            port_limit: Some(pod::port_limit_of(info.flags)).filter(|&n| n != 0),
            k8s_namespace,
            k8s_name,
            annotations,
            host_ports,
        });
    }
    Ok(out)
}

/// `counters` as (name, value) pairs, in enum order.
pub fn counters(pins: &Pins) -> Result<Vec<(&'static str, u64)>> {
    let v = node::read_counters(pins, abi::MAP_COUNTERS)?;
    Ok(abi::counter::NAMES.iter().copied().zip(v).collect())
}

/// `drops` as (reason, value) pairs, in enum order.
pub fn drops(pins: &Pins) -> Result<Vec<(&'static str, u64)>> {
    let v = node::read_counters(pins, abi::MAP_DROPS)?;
    Ok(abi::drop_reason::NAMES.iter().copied().zip(v).collect())
}

/// True when the map `name` is pinned (a data plane version that has it).
pub fn has_map(pins: &Pins, name: &str) -> bool {
    pins.map(name).exists()
}

/// The expiry sweep's record (`nat_gc`): None before the node's maps exist.
pub fn nat_gc(pins: &Pins) -> Result<Option<abi::NatGc>> {
    if !has_map(pins, abi::MAP_NAT_GC) {
        return Ok(None);
    }
    let m: aya::maps::Array<MapData, abi::NatGc> = maps::pinned(pins, abi::MAP_NAT_GC)?;
    Ok(Some(m.get(&0, 0).map_err(e(abi::MAP_NAT_GC))?))
}

pub use ebpf_masq_core::bpf::maps::map_max_entries;

/// (entries, max_entries) of the pinned hash map `name` (None when it is not
/// pinned), for any key type: walks the keys with BPF_MAP_GET_NEXT_KEY using the
/// key size the kernel reports, so a map whose Rust mirror does not exist yet
/// (nat6_fwd) is counted the same way.
pub fn map_fill(pins: &Pins, name: &str) -> Result<Option<(u64, u64)>> {
    if !has_map(pins, name) {
        return Ok(None);
    }
    let data = MapData::from_pin(pins.map(name)).map_err(|err| Error::bpf(format!("pinned map {name}: {err}")))?;
    let info = data.info().map_err(e(name))?;
    let fd = data.fd().as_fd().as_raw_fd();
    let ksize = info.key_size() as usize;
    let mut cur: Option<Vec<u8>> = None;
    let mut next = vec![0u8; ksize.max(1)];
    let mut n = 0u64;
    // Bounded: a map never holds more than max_entries keys; the walk restarts
    // from the first key if the current one vanished meanwhile, so cap it.
    let max = info.max_entries() as u64;
    let limit = max * 2 + 16;
    while n < limit {
        if !ebpf_masq_core::bpf::sys::map_get_next_key(fd, cur.as_deref(), &mut next).map_err(|err| Error::bpf(format!("{name}: next key: {err}")))? {
            return Ok(Some((n, max)));
        }
        n += 1;
        cur = Some(next.clone());
    }
    Ok(Some((n.min(max), max)))
}


/// `ADDR:PORT`, an IPv6 address bracketed (`[ADDR]:PORT`) as SocketAddr writes it;
/// the address typed or as text (nat list's rows).
pub fn endpoint(a: impl std::fmt::Display, port: u16) -> String {
    let a = a.to_string();
    if a.contains(':') {
        format!("[{a}]:{port}")
    } else {
        format!("{a}:{port}")
    }
}

/// Who holds each pod address (namespace, name), from the registrations, as
/// `nat list` names them; read again on a miss (a pod newer than the last
/// read), at most every `PodNames::REFRESH`. Shared by `monitor` and the natlog exporter.
pub struct PodNames {
    by_addr: std::collections::HashMap<IpAddr, (String, String)>,
    /// Each named pod's host-side veth ifindex (a packet dropped there is that
    /// pod's, whatever source address it carried).
    by_veth: std::collections::HashMap<u32, (String, String)>,
    read: std::time::Instant,
}

impl PodNames {
    pub const REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

    pub fn load(pins: &Pins) -> Result<PodNames> {
        // The registrations alone (attachments and their pod_meta), not `pods`' counters:
        // the NAT log's exporter reads them every few seconds while it holds named pairs.
        let metas = if has_map(pins, abi::MAP_POD_META) { pod::list_meta(pins)? } else { Default::default() };
        let mut by_addr = std::collections::HashMap::new();
        let mut by_veth = std::collections::HashMap::new();
        for (k, info) in pod::list_attachments(pins)? {
            let (namespace, name, _) = pod::meta_fields(&metas.get(&k).copied().unwrap_or_default());
            if name.is_empty() {
                continue;
            }
            for a in pod::addrs_of(&info) {
                by_addr.insert(a, (namespace.clone(), name.clone()));
            }
            by_veth.insert(info.veth_ifindex, (namespace, name));
        }
        Ok(PodNames { by_addr, by_veth, read: std::time::Instant::now() })
    }

    /// Read the registrations again now.
    pub fn reload(&mut self, pins: &Pins) -> Result<()> {
        *self = PodNames::load(pins)?;
        Ok(())
    }

    /// The (namespace, name) registered for `a` at the last read, without reading.
    pub fn known(&self, a: &IpAddr) -> Option<&(String, String)> {
        self.by_addr.get(a)
    }

    /// The (namespace, name) of the pod holding `a`.
    pub fn of(&mut self, pins: &Pins, a: IpAddr) -> Option<(String, String)> {
        if !self.by_addr.contains_key(&a) {
            self.refresh(pins);
        }
        self.by_addr.get(&a).cloned()
    }

    /// The (namespace, name) of the pod whose host-side veth is `ifindex`.
    pub fn of_veth(&mut self, pins: &Pins, ifindex: u32) -> Option<(String, String)> {
        if !self.by_veth.contains_key(&ifindex) {
            self.refresh(pins);
        }
        self.by_veth.get(&ifindex).cloned()
    }

    /// Read the registrations again, on a miss, if the last read is `REFRESH` old.
    fn refresh(&mut self, pins: &Pins) {
        if self.read.elapsed() >= Self::REFRESH {
            match PodNames::load(pins) {
                Ok(n) => *self = n,
                Err(e) => log::warn!("read the pods: {}", e.msg),
            }
        }
    }

    #[cfg(test)]
    pub fn of_pairs(pairs: &[(&str, &str, &str)]) -> PodNames {
        let by_addr = pairs.iter().map(|(a, ns, n)| (a.parse().unwrap(), (ns.to_string(), n.to_string()))).collect();
        PodNames { by_addr, by_veth: Default::default(), read: std::time::Instant::now() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, flags: u32, spec: &str) -> EgressPolicyInfo {
        let mut i = EgressPolicyInfo { used: 1, flags, ..Default::default() };
        i.name[..name.len()].copy_from_slice(name.as_bytes());
        i.spec[..spec.len()].copy_from_slice(spec.as_bytes());
        i
    }

    fn pod_row(id: &str, ns: &str, name: &str, policies: u32) -> PodRow {
        PodRow {
            container_id: id.into(),
            ifname: "eth0".into(),
            veth: format!("veth{id}"),
            veth_ifindex: 9,
            addresses: vec![],
            nat_outgoing: true,
            found: false,
            packets: 0,
            bytes: 0,
            spoofed: 0,
            refused_no_port: 0,
            refused_over_share: 0,
            refused_over_limit: 0,
            port_limit: None,
            k8s_namespace: ns.into(),
            k8s_name: name.into(),
            annotations: serde_json::json!({}),
            host_ports: vec![],
            policies,
        }
    }

    #[test]
    fn policy_desc_reads_the_spec() {
        let spec = r#"{"namespaces":["team-a","ops-*"],"pods":["team-a/web-*"],"destinations":["203.0.113.0/24","2001:db8::/32"],"masqueradeAddress":["192.0.2.50","192.0.2.64/31"]}"#;
        let d = PolicyDesc::of(3, &info("partner", 0, spec)).unwrap();
        assert_eq!((d.index, d.name.as_str(), d.bit()), (3, "partner", 8));
        assert_eq!(d.namespaces, ["team-a", "ops-*"]);
        assert_eq!(d.pods, ["team-a/web-*"]);
        assert_eq!(d.destinations_text(), "203.0.113.0/24, 2001:db8::/32");
        assert_eq!(d.action.describe(), "masqueradeAddress 192.0.2.50, 192.0.2.64/31");
        assert_eq!(d.selector(), "namespaces team-a, ops-*; pods team-a/web-*");
        assert!(d.holds("203.0.113.9".parse().unwrap()) && d.holds("2001:db8::1".parse().unwrap()));
        assert!(!d.holds("198.51.100.1".parse().unwrap()));

        // natOutgoing: false, no destinations (everything), one address as a string.
        let d = PolicyDesc::of(0, &info("optout", abi::POLICY_F_NO_NAT, r#"{"namespaces":["b"],"natOutgoing":false}"#)).unwrap();
        assert_eq!((d.action.clone(), d.destinations_text()), (PolicyAction::NoNat, "every destination".to_string()));
        assert!(d.holds("10.1.1.1".parse().unwrap()));
        assert_eq!(d.action.describe(), "natOutgoing: false");
        let d = PolicyDesc::of(1, &info("one", 0, r#"{"namespaces":["b"],"masqueradeAddress":"192.0.2.7"}"#)).unwrap();
        assert_eq!(d.action, PolicyAction::Masquerade(vec!["192.0.2.7".into()]));
        // An unused slot is no policy; a spec that does not parse still names it.
        assert_eq!(PolicyDesc::of(2, &EgressPolicyInfo::default()), None);
        let d = PolicyDesc::of(2, &info("odd", abi::POLICY_F_NO_NAT, "{not json")).unwrap();
        assert_eq!((d.name.as_str(), d.action, d.namespaces.len()), ("odd", PolicyAction::NoNat, 0));
        assert_eq!(PolicyDesc::of(31, &info("last", 0, "{}")).unwrap().bit(), 1 << 31);
    }

    #[test]
    fn policy_rows_count_and_name_their_pods() {
        let descs: Vec<PolicyDesc> = [(0, "a"), (2, "c")]
            .iter()
            .map(|(i, n)| PolicyDesc::of(*i, &info(n, 0, r#"{"namespaces":["x"]}"#)).unwrap())
            .collect();
        let pods = [pod_row("c1", "x", "web-1", 0b101), pod_row("c2", "", "", 0b100), pod_row("c3", "x", "db", 0)];
        let stats = PolicyStats { packets: 5, bytes: 500, flows: 2, unmasqueraded: 1 };
        let a = policy_row(descs[0].clone(), stats, &pods);
        assert_eq!((a.packets, a.bytes, a.flows, a.unmasqueraded), (5, 500, 2, 1));
        assert_eq!(a.pods, ["x/web-1"]);
        let c = policy_row(descs[1].clone(), PolicyStats::default(), &pods);
        assert_eq!(c.pods, ["x/web-1", "c2/eth0 (vethc2)"]);
        assert_eq!(policy_names(&descs, 0b101), ["a", "c"]);
        assert_eq!(policy_names(&descs, 0b010), Vec::<String>::new());
    }
}
