//! The map and route lookups the decision reads: the [`Lookups`] trait, its
//! answer from the pinned maps ([`MapLookups`]), and the out interface
//! (`--out`, the route to the destination, or the only uplink). Read-only.

use std::{
    cell::OnceCell,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use aya::maps::{lpm_trie::Key, lpm_trie::LpmTrie, Array, HashMap, MapData};
use serde::Serialize;

use super::packet::OutIf;
use ebpf_masq_core::{
    bpf::{abi::{self, ExclInfo, Frag4Key, Frag6Key, FragPorts, NodeConfig, PodInfo, Rule4Data, Rule6Data, Rule6Info, RuleExcept4Data, RuleExcept6Data, RuleInfo, UplinkInfo,}, loader::Pins, maps, nat::{self as natmaps, Entry, Family, Tuple},},
    error::{code, Context, Error, Result},
    netlink,
    node,
    pod,
};
use crate::readers;

/// A rules4/rules6 hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleHit {
    pub id: u32,
    /// toAddress, when RULE_F_TO_ADDRESS.
    pub to_address: Option<IpAddr>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleDesc {
    pub source: String,
    pub out_interface: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodDesc {
    pub container_id: String,
    pub ifname: String,
    pub veth: String,
    /// Kubernetes namespace and name (pod_meta), when the runtime gave them.
    pub k8s_namespace: Option<String>,
    pub k8s_name: Option<String>,
}

/// What the decision reads. Decision lookups behave as the kernel's map lookups
/// (LPM tries: longest prefix) of the packet's family; `*_desc` only name what
/// matched.
pub trait Lookups {
    fn uplink(&self, ifindex: u32) -> Result<Option<UplinkInfo>>;
    fn config(&self) -> Result<Option<NodeConfig>>;
    /// The data plane has NAT maps of this family (IPv6: `nat6_fwd` is pinned).
    fn has_nat(&self, v6: bool) -> bool;
    fn nat_fwd(&self, t: &Tuple) -> Result<Option<Entry>>;
    fn nat_rev(&self, t: &Tuple) -> Result<Option<Entry>>;
    /// frag4/frag6: the (sport, dport) learned from a datagram's first fragment.
    fn frag(&self, src: IpAddr, dst: IpAddr, id: u32, proto: u8) -> Result<Option<(u16, u16)>>;
    /// rules4/rules6 lookup on {prefixlen 32 + address bits, ifindex (big-endian), saddr}.
    fn rule(&self, ifindex: u32, saddr: IpAddr) -> Result<Option<RuleHit>>;
    /// rule_except4/6 lookup on {full prefixlen, rule id (big-endian), daddr}:
    /// Some(the matching except CIDR, or "?" if it cannot be named) when excepted.
    fn rule_except(&self, rule_id: u32, daddr: IpAddr) -> Result<Option<String>>;
    /// pods4 / pods6.
    fn pod(&self, addr: IpAddr) -> Result<Option<PodInfo>>;
    /// excl4 / excl6 lookup: the entry and the matching CIDR.
    fn excl(&self, addr: IpAddr) -> Result<Option<(ExclInfo, String)>>;
    /// bpf_ktime_get_ns() now (CLOCK_MONOTONIC).
    fn now_ns(&self) -> u64;
    fn rule_desc(&self, id: u32) -> Option<RuleDesc>;
    fn pod_desc(&self, veth_ifindex: u32, addr: IpAddr) -> Option<PodDesc>;
    /// nat4_bind / nat6_bind: the mapping (node address, port) a pod endpoint has.
    fn binding(&self, addr: IpAddr, port: u16, proto: u8) -> Result<Option<(IpAddr, u16)>>;
    /// masq_pool (masqueradeAddress's pool), when the data plane has one.
    fn pool(&self) -> Result<Option<abi::MasqPool>> {
        Ok(None)
    }
    /// pod_nets4/6: the node's pod range that holds `addr` ("10.244.1.0/24 (learned)"), if any.
    fn pod_net(&self, _addr: IpAddr) -> Result<Option<String>> {
        Ok(None)
    }
    /// The ip-masq-agent file the node's marked exclusions came from (node::ipmasq).
    fn ip_masq_agent_source(&self) -> Option<String> {
        None
    }
    /// policy_dst4 / policy_dst6 lookup on {prefixlen 32 + address bits, set, daddr}: the
    /// first policy of the mask `set` that holds the destination.
    fn policy_dst(&self, _set: u32, _daddr: IpAddr) -> Result<Option<abi::PolicyHit>> {
        Ok(None)
    }
    /// The `policy` byte of the forward half for `t` (0: none, 1 + i: policy i).
    fn nat_fwd_policy(&self, _t: &Tuple) -> Result<u8> {
        Ok(0)
    }
    /// masq_pool slot `slot` (1 + i: egress policy i's addresses).
    fn pool_slot(&self, _slot: u32) -> Result<Option<abi::MasqPool>> {
        Ok(None)
    }
    /// egress_policies: every used slot (names only; the decision reads policy_dst4/6).
    fn egress_policies(&self) -> Result<Vec<readers::PolicyDesc>> {
        Ok(Vec::new())
    }
    /// refusals: the new flows from `src` refused so far (no port, over its share).
    fn refusals(&self, _src: IpAddr) -> Result<abi::Refusals> {
        Ok(abi::Refusals::default())
    }
}


// ---------------------------------------------------------------------------
// the lookups, from the pins

/// True when the first `bits` bits of `a` and `b` agree (LPM trie matching on key data).
pub fn prefix_match(a: &[u8], b: &[u8], bits: u32) -> bool {
    let full = (bits / 8) as usize;
    let rem = bits % 8;
    if a.len() < full || b.len() < full || a[..full] != b[..full] {
        return false;
    }
    if rem == 0 {
        return true;
    }
    let (Some(x), Some(y)) = (a.get(full), b.get(full)) else { return false };
    let mask = 0xffu8 << (8 - rem);
    x & mask == y & mask
}

fn opt<V>(r: std::result::Result<V, aya::maps::MapError>, what: &str) -> Result<Option<V>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if maps::is_key_not_found(&e) => Ok(None),
        Err(e) => Err(Error::bpf_at(what, e)),
    }
}

fn bytes_of<T: aya::Pod>(v: &T) -> &[u8] {
    // SAFETY: T is Pod (plain repr(C) data); we only read its bytes while `v` is borrowed.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

type NatMap<F> = HashMap<MapData, <F as Family>::Key, <F as Family>::Value>;

/// Open a map that a data plane version may not have: None when it is not pinned.
fn open_opt<T>(pins: &Pins, name: &str) -> Result<Option<T>>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    if readers::has_map(pins, name) {
        maps::pinned(pins, name).map(Some)
    } else {
        Ok(None)
    }
}

/// [`Lookups`] answered from the pinned maps.
pub struct MapLookups {
    pins: Pins,
    uplinks: HashMap<MapData, u32, UplinkInfo>,
    config: Array<MapData, NodeConfig>,
    nat4: (natmaps::Fwd<natmaps::V4>, NatMap<natmaps::V4>),
    nat6: Option<(natmaps::Fwd<natmaps::V6>, NatMap<natmaps::V6>)>,
    frag4: Option<HashMap<MapData, Frag4Key, FragPorts>>,
    frag6: Option<HashMap<MapData, Frag6Key, FragPorts>>,
    rules4: LpmTrie<MapData, Rule4Data, RuleInfo>,
    except4: LpmTrie<MapData, RuleExcept4Data, u32>,
    rules6: Option<LpmTrie<MapData, Rule6Data, Rule6Info>>,
    except6: Option<LpmTrie<MapData, RuleExcept6Data, u32>>,
    pods4: HashMap<MapData, [u8; 4], PodInfo>,
    pods6: HashMap<MapData, [u8; 16], PodInfo>,
    excl4: LpmTrie<MapData, [u8; 4], ExclInfo>,
    excl6: LpmTrie<MapData, [u8; 16], ExclInfo>,
    policy_dst4: Option<LpmTrie<MapData, abi::PolicyDst4Data, abi::PolicyHit>>,
    policy_dst6: Option<LpmTrie<MapData, abi::PolicyDst6Data, abi::PolicyHit>>,
    rules: OnceCell<Vec<readers::RuleRow>>,
}

impl MapLookups {
    pub fn pinned(pins: &Pins) -> Result<Self> {
        if !pins.loaded() {
            return Err(Error::state(format!(
                "no data plane under {} (no ADD or `ebpf-masq apply` has run on this node)",
                pins.root.display()
            )));
        }
        let nat6 = match (pins.map(abi::MAP_NAT6_FWD).exists(), open_opt(pins, abi::MAP_NAT6_REV)?) {
            (true, Some(r)) => Some((natmaps::Fwd::pinned(pins)?, r)),
            _ => None,
        };
        Ok(MapLookups {
            pins: pins.clone(),
            uplinks: maps::pinned(pins, abi::MAP_UPLINKS)?,
            config: maps::pinned(pins, abi::MAP_CONFIG)?,
            nat4: (natmaps::Fwd::pinned(pins)?, maps::pinned(pins, abi::MAP_NAT4_REV)?),
            nat6,
            frag4: open_opt(pins, abi::MAP_FRAG4)?,
            frag6: open_opt(pins, abi::MAP_FRAG6)?,
            rules4: maps::pinned(pins, abi::MAP_RULES4)?,
            except4: maps::pinned(pins, abi::MAP_RULE_EXCEPT4)?,
            rules6: open_opt(pins, abi::MAP_RULES6)?,
            except6: open_opt(pins, abi::MAP_RULE_EXCEPT6)?,
            pods4: maps::pinned(pins, abi::MAP_PODS4)?,
            pods6: maps::pinned(pins, abi::MAP_PODS6)?,
            excl4: maps::pinned(pins, abi::MAP_EXCL4)?,
            excl6: maps::pinned(pins, abi::MAP_EXCL6)?,
            policy_dst4: open_opt(pins, abi::MAP_POLICY_DST4)?,
            policy_dst6: open_opt(pins, abi::MAP_POLICY_DST6)?,
            rules: OnceCell::new(),
        })
    }

    /// Every uplink's ifindex.
    pub fn uplink_ifindexes(&self) -> Result<Vec<u32>> {
        self.uplinks.keys().collect::<std::result::Result<_, _>>().bpf_ctx("uplinks")
    }

    /// Name the longest key of an LPM trie matching `probe` (its key data), among those `keep` accepts.
    fn longest<K: aya::Pod, V: aya::Pod>(
        trie: &LpmTrie<MapData, K, V>,
        probe: &K,
        keep: impl Fn(&K) -> bool,
        show: impl Fn(&K, u32) -> String,
    ) -> String {
        trie.keys()
            .filter_map(|k| k.ok())
            .filter(|k| keep(&k.data()) && prefix_match(bytes_of(&k.data()), bytes_of(probe), k.prefix_len()))
            .max_by_key(|k| k.prefix_len())
            .map(|k| show(&k.data(), k.prefix_len()))
            .unwrap_or_else(|| "?".into())
    }

    fn nat_get<F: Family>(m: &NatMap<F>, t: &Tuple, what: &str) -> Result<Option<Entry>> {
        Ok(opt(m.get(&F::key(t), 0), what)?.map(|v| F::entry(&v)))
    }
    fn fwd_get<F: Family>(m: &natmaps::Fwd<F>, t: &Tuple, what: &str) -> Result<Option<Entry>> {
        Ok(opt(m.get(&F::key(t)), what)?.map(|v| F::entry(&v)))
    }
}

impl Lookups for MapLookups {
    fn pod_net(&self, addr: IpAddr) -> Result<Option<String>> {
        Ok(node::pod_nets::lookup(&self.pins, addr)?.map(|(n, o)| match o {
            node::pod_nets::Origin::Configured(i) => format!("{n} (podCIDRs[{i}])"),
            node::pod_nets::Origin::Learned => format!("{n} (learned from a registered pod's subnet)"),
        }))
    }
    fn refusals(&self, src: IpAddr) -> Result<abi::Refusals> {
        ebpf_masq_core::bpf::refusals::of(&self.pins, &[src])
    }
    fn ip_masq_agent_source(&self) -> Option<String> {
        node::ipmasq::source_file(&self.pins)
    }
    fn pool(&self) -> Result<Option<abi::MasqPool>> {
        self.pool_slot(0)
    }
    fn pool_slot(&self, slot: u32) -> Result<Option<abi::MasqPool>> {
        if !self.pins.map(abi::MAP_MASQ_POOL).exists() {
            return Ok(None); // a data plane from before pools
        }
        let m: aya::maps::Array<MapData, abi::MasqPool> = maps::pinned(&self.pins, abi::MAP_MASQ_POOL)?;
        Ok(m.get(&slot, 0).ok())
    }
    fn policy_dst(&self, set: u32, daddr: IpAddr) -> Result<Option<abi::PolicyHit>> {
        match daddr {
            IpAddr::V4(a) => {
                let Some(m) = &self.policy_dst4 else { return Ok(None) };
                opt(m.get(&Key::new(64, abi::PolicyDst4Data { set, daddr: a.octets() }), 0), abi::MAP_POLICY_DST4)
            }
            IpAddr::V6(a) => {
                let Some(m) = &self.policy_dst6 else { return Ok(None) };
                opt(m.get(&Key::new(32 + 128, abi::PolicyDst6Data { set, daddr: a.octets() }), 0), abi::MAP_POLICY_DST6)
            }
        }
    }
    fn egress_policies(&self) -> Result<Vec<readers::PolicyDesc>> {
        readers::egress_policy_descs(&self.pins)
    }
    fn nat_fwd_policy(&self, t: &Tuple) -> Result<u8> {
        Ok(match (&self.nat6, t.saddr.is_ipv6()) {
            (_, false) => opt(self.nat4.0.get(&natmaps::V4::key(t)), abi::MAP_NAT4_FWD)?.map(|v| v.policy),
            (Some((fwd, _)), true) => opt(fwd.get(&natmaps::V6::key(t)), abi::MAP_NAT6_FWD)?.map(|v| v.policy),
            (None, true) => None,
        }
        .unwrap_or(0))
    }

    fn binding(&self, addr: IpAddr, port: u16, proto: u8) -> Result<Option<(IpAddr, u16)>> {
        let name = if addr.is_ipv4() { abi::MAP_NAT4_BIND } else { abi::MAP_NAT6_BIND };
        if !self.pins.map(name).exists() {
            return Ok(None); // a data plane from before the mapping hints
        }
        let port = port.to_be_bytes();
        match addr {
            IpAddr::V4(a) => {
                let m: HashMap<MapData, abi::Nat4Ep, abi::Nat4Bind> = maps::pinned(&self.pins, name)?;
                let k = abi::Nat4Ep { addr: a.octets(), port, proto, pad: 0 };
                Ok(opt(m.get(&k, 0), name)?.map(|b| (IpAddr::from(b.addr), u16::from_be_bytes(b.port))))
            }
            IpAddr::V6(a) => {
                let m: HashMap<MapData, abi::Nat6Ep, abi::Nat6Bind> = maps::pinned(&self.pins, name)?;
                let k = abi::Nat6Ep { addr: a.octets(), port, proto, pad: 0 };
                Ok(opt(m.get(&k, 0), name)?.map(|b| (IpAddr::from(b.addr), u16::from_be_bytes(b.port))))
            }
        }
    }
    fn uplink(&self, ifindex: u32) -> Result<Option<UplinkInfo>> {
        opt(self.uplinks.get(&ifindex, 0), "uplinks")
    }
    fn config(&self) -> Result<Option<NodeConfig>> {
        opt(self.config.get(&0, 0), "node_config")
    }
    fn has_nat(&self, v6: bool) -> bool {
        !v6 || self.nat6.is_some()
    }
    fn nat_fwd(&self, t: &Tuple) -> Result<Option<Entry>> {
        match (&self.nat6, t.saddr.is_ipv6()) {
            (_, false) => Self::fwd_get::<natmaps::V4>(&self.nat4.0, t, abi::MAP_NAT4_FWD),
            (Some((fwd, _)), true) => Self::fwd_get::<natmaps::V6>(fwd, t, abi::MAP_NAT6_FWD),
            (None, true) => Ok(None),
        }
    }
    fn nat_rev(&self, t: &Tuple) -> Result<Option<Entry>> {
        match (&self.nat6, t.saddr.is_ipv6()) {
            (_, false) => Self::nat_get::<natmaps::V4>(&self.nat4.1, t, abi::MAP_NAT4_REV),
            (Some((_, rev)), true) => Self::nat_get::<natmaps::V6>(rev, t, abi::MAP_NAT6_REV),
            (None, true) => Ok(None),
        }
    }
    fn frag(&self, src: IpAddr, dst: IpAddr, id: u32, proto: u8) -> Result<Option<(u16, u16)>> {
        let p = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let Some(m) = &self.frag4 else { return Ok(None) };
                let Ok(id) = u16::try_from(id) else { return Ok(None) };
                let k = Frag4Key { saddr: s.octets(), daddr: d.octets(), id: id.to_be_bytes(), proto, pad: 0 };
                opt(m.get(&k, 0), abi::MAP_FRAG4)?
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let Some(m) = &self.frag6 else { return Ok(None) };
                let k = Frag6Key { saddr: s.octets(), daddr: d.octets(), id: id.to_be_bytes(), proto, pad: [0; 3] };
                opt(m.get(&k, 0), abi::MAP_FRAG6)?
            }
            _ => None,
        };
        Ok(p.map(|p| (u16::from_be_bytes(p.sport), u16::from_be_bytes(p.dport))))
    }
    fn rule(&self, ifindex: u32, saddr: IpAddr) -> Result<Option<RuleHit>> {
        let ifindex_be = ifindex.to_be_bytes();
        match saddr {
            IpAddr::V4(a) => {
                let k = Key::new(64, Rule4Data { ifindex_be, saddr: a.octets() });
                Ok(opt(self.rules4.get(&k, 0), abi::MAP_RULES4)?.map(|r| RuleHit {
                    id: r.id,
                    to_address: (r.flags & abi::RULE_F_TO_ADDRESS != 0).then(|| IpAddr::V4(Ipv4Addr::from(r.to_v4))),
                }))
            }
            IpAddr::V6(a) => {
                let Some(rules6) = &self.rules6 else { return Ok(None) };
                let k = Key::new(32 + 128, Rule6Data { ifindex_be, saddr: a.octets() });
                Ok(opt(rules6.get(&k, 0), abi::MAP_RULES6)?.map(|r| RuleHit {
                    id: r.id,
                    to_address: (r.flags & abi::RULE_F_TO_ADDRESS != 0).then(|| IpAddr::V6(Ipv6Addr::from(r.to_v6))),
                }))
            }
        }
    }
    fn rule_except(&self, rule_id: u32, daddr: IpAddr) -> Result<Option<String>> {
        let rule_id_be = rule_id.to_be_bytes();
        match daddr {
            IpAddr::V4(a) => {
                let data = RuleExcept4Data { rule_id_be, daddr: a.octets() };
                if opt(self.except4.get(&Key::new(64, data), 0), abi::MAP_RULE_EXCEPT4)?.is_none() {
                    return Ok(None);
                }
                Ok(Some(Self::longest(
                    &self.except4,
                    &data,
                    |d| d.rule_id_be == rule_id_be,
                    |d, plen| format!("{}/{}", Ipv4Addr::from(d.daddr), plen - 32),
                )))
            }
            IpAddr::V6(a) => {
                let Some(except6) = &self.except6 else { return Ok(None) };
                let data = RuleExcept6Data { rule_id_be, daddr: a.octets() };
                if opt(except6.get(&Key::new(32 + 128, data), 0), abi::MAP_RULE_EXCEPT6)?.is_none() {
                    return Ok(None);
                }
                Ok(Some(Self::longest(
                    except6,
                    &data,
                    |d| d.rule_id_be == rule_id_be,
                    |d, plen| format!("{}/{}", Ipv6Addr::from(d.daddr), plen - 32),
                )))
            }
        }
    }
    fn pod(&self, addr: IpAddr) -> Result<Option<PodInfo>> {
        match addr {
            IpAddr::V4(a) => opt(self.pods4.get(&a.octets(), 0), abi::MAP_PODS4),
            IpAddr::V6(a) => opt(self.pods6.get(&a.octets(), 0), abi::MAP_PODS6),
        }
    }
    fn excl(&self, addr: IpAddr) -> Result<Option<(ExclInfo, String)>> {
        match addr {
            IpAddr::V4(a) => {
                let Some(x) = opt(self.excl4.get(&Key::new(32, a.octets()), 0), abi::MAP_EXCL4)? else { return Ok(None) };
                let cidr = Self::longest(&self.excl4, &a.octets(), |_| true, |d, plen| format!("{}/{plen}", Ipv4Addr::from(*d)));
                Ok(Some((x, cidr)))
            }
            IpAddr::V6(a) => {
                let Some(x) = opt(self.excl6.get(&Key::new(128, a.octets()), 0), abi::MAP_EXCL6)? else { return Ok(None) };
                let cidr = Self::longest(&self.excl6, &a.octets(), |_| true, |d, plen| format!("{}/{plen}", Ipv6Addr::from(*d)));
                Ok(Some((x, cidr)))
            }
        }
    }
    fn now_ns(&self) -> u64 {
        pod::monotonic_ns()
    }
    fn rule_desc(&self, id: u32) -> Option<RuleDesc> {
        let rules = match self.rules.get() {
            Some(r) => r,
            None => {
                let r = readers::rules(&self.pins).unwrap_or_default();
                self.rules.get_or_init(|| r)
            }
        };
        rules.iter().find(|r| r.id == id).map(|r| RuleDesc { source: r.source_cidr(), out_interface: r.out_interface.clone() })
    }
    fn pod_desc(&self, veth_ifindex: u32, addr: IpAddr) -> Option<PodDesc> {
        let atts = pod::list_attachments(&self.pins).ok()?;
        let metas =
            if readers::has_map(&self.pins, abi::MAP_POD_META) { pod::list_meta(&self.pins).ok() } else { None };
        // The record holding this address on this veth; else any record of the veth.
        atts.iter()
            .find(|(_, i)| i.veth_ifindex == veth_ifindex && pod::addrs_of(i).contains(&addr))
            .or_else(|| atts.iter().find(|(_, i)| i.veth_ifindex == veth_ifindex))
            .map(|(k, i)| {
                let meta = metas.as_ref().and_then(|m| m.get(k)).map(pod::meta_fields);
                let some = |s: String| Some(s).filter(|s| !s.is_empty());
                PodDesc {
                    container_id: pod::cstr(&k.container_id),
                    ifname: pod::cstr(&k.ifname),
                    veth: pod::cstr(&i.veth_name),
                    k8s_namespace: meta.as_ref().and_then(|m| some(m.0.clone())),
                    k8s_name: meta.as_ref().and_then(|m| some(m.1.clone())),
                }
            })
    }
}

// ---------------------------------------------------------------------------
// the out interface

/// The out interface: `--out`, else the route to the destination, else the
/// node's only uplink.
pub fn resolve_out(l: &MapLookups, out: Option<&str>, dst: IpAddr) -> Result<OutIf> {
    if let Some(name) = out {
        let link = netlink::get_link_by_name(name)?
            .ok_or_else(|| Error::new(code::INVALID_CONFIG, format!("--out {name}: no such interface")))?;
        return Ok(OutIf { ifindex: link.index, name: Some(link.name), chosen_by: "--out".into() });
    }
    if let Some(ifindex) = netlink::route_oif(dst)? {
        let name = netlink::get_link_by_index(ifindex)?.map(|l| l.name);
        return Ok(OutIf { ifindex, name, chosen_by: "route".into() });
    }
    match l.uplink_ifindexes()?.as_slice() {
        [one] => {
            let name = netlink::get_link_by_index(*one)?.map(|l| l.name);
            Ok(OutIf { ifindex: *one, name, chosen_by: "single uplink".into() })
        }
        _ => Err(Error::new(code::INVALID_CONFIG, format!("no route to {dst} and not exactly one uplink: pass --out IFACE"))),
    }
}
