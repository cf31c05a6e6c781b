//! `ebpf-masq explain`: the masquerade decision the data plane makes for one
//! packet leaving the node, and why, read from the same pinned maps the
//! programs read (never from a config file).
//!
//! [`explain`] mirrors `snat_egress` (bpf/lib/nat_tmpl.h, both families) and
//! `masq_decide_v4`/`masq_decide_v6` (bpf/lib/policy.h) step by step; keep them
//! in step. It takes its map lookups through the [`Lookups`] trait, so the
//! decision is unit-tested without maps; [`MapLookups`] answers them from the
//! pins with the kernel's own lookups (LPM tries included) and iterates maps
//! only to *name* what matched (a CIDR, a rule's source, a pod's container ID).
//!
//! Order, as in the data plane:
//!  1. the out interface must be an uplink (`uplinks`), else untouched;
//!  2. the host's own traffic (source == the uplink's masquerade address): untouched;
//!  3. an existing NAT flow for the exact tuple (`nat{4,6}_fwd`) is reused, unless
//!     its reply slot was taken over by another flow; a later fragment follows its
//!     first fragment's flow (`frag{4,6}`);
//!  4. a rule for (out interface, source) whose except list misses the destination;
//!  5. a registered pod (`pods{4,6}`) with natOutgoing whose destination is in no
//!     exclusion (`excl{4,6}`);
//!  6. a packet the policy masquerades that cannot be (an ICMP echo reply, a
//!     fragment without state, an unsupported protocol, no port range) is dropped.
//!
//! A data plane without IPv6 NAT maps (no `nat6_fwd` pinned) passes IPv6
//! untouched: the decision is still shown, with the verdict "IPv6 masquerade
//! not supported by this data plane version".

use std::{
    cell::OnceCell,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use aya::maps::{lpm_trie::Key, lpm_trie::LpmTrie, Array, HashMap, MapData};
use serde::Serialize;

use crate::{
    bpf::{
        abi::{
            self, ExclInfo, Frag4Key, Frag6Key, FragPorts, MasqConfig, PodInfo, Rule4Data, Rule6Data, Rule6Info,
            RuleExcept4Data, RuleExcept6Data, RuleInfo, UplinkInfo,
        },
        loader::Pins,
        maps,
        nat::{self as natmaps, Entry, Family, Tuple},
    },
    cli::readers,
    error::{code, Context, Error, Result},
    netlink, pod,
};

pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;
pub const ICMP_ECHOREPLY: u8 = 0;
pub const ICMP_ECHO: u8 = 8;
pub const ICMPV6_ECHO_REQUEST: u8 = 128;
pub const ICMPV6_ECHO_REPLY: u8 = 129;
/// ICMP error types the data plane translates with their quoted packet (classify_icmp).
const ICMP_ERRORS: [u8; 3] = [3, 11, 12];
const ICMPV6_ERRORS: [u8; 4] = [1, 2, 3, 4];

const NSEC_PER_SEC: u64 = 1_000_000_000;

/// Protocol of the packet to explain: `tcp`, `udp`, `icmp` (ICMPv6 for IPv6
/// addresses) or an IP protocol number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    Icmp,
    Other(u8),
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Proto::Tcp),
            "udp" => Ok(Proto::Udp),
            "icmp" | "icmpv6" | "icmp6" => Ok(Proto::Icmp),
            n => match n.parse::<u8>() {
                Ok(IPPROTO_TCP) => Ok(Proto::Tcp),
                Ok(IPPROTO_UDP) => Ok(Proto::Udp),
                Ok(IPPROTO_ICMP) | Ok(IPPROTO_ICMPV6) => Ok(Proto::Icmp),
                Ok(p) => Ok(Proto::Other(p)),
                Err(_) => Err(format!("unknown protocol {s:?} (tcp, udp, icmp or a protocol number)")),
            },
        }
    }
}

/// One packet leaving the node.
#[derive(Clone, Debug, PartialEq)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: Proto,
    /// ICMP type (default: echo request).
    pub icmp_type: Option<u8>,
    /// TCP/UDP source port; for ICMP echo the identifier.
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    /// A later (non-first) fragment: no L4 header.
    pub fragment: bool,
    /// The fragment's IP identification, to find its first fragment's ports.
    pub frag_id: Option<u32>,
}

impl Packet {
    pub fn new(src: IpAddr, dst: IpAddr, proto: Proto) -> Self {
        Packet { src, dst, proto, icmp_type: None, sport: None, dport: None, fragment: false, frag_id: None }
    }
    pub fn is_v6(&self) -> bool {
        self.src.is_ipv6()
    }
    fn proto_number(&self) -> u8 {
        match self.proto {
            Proto::Tcp => IPPROTO_TCP,
            Proto::Udp => IPPROTO_UDP,
            Proto::Icmp if self.is_v6() => IPPROTO_ICMPV6,
            Proto::Icmp => IPPROTO_ICMP,
            Proto::Other(p) => p,
        }
    }
    fn icmp_type(&self) -> u8 {
        self.icmp_type.unwrap_or(if self.is_v6() { ICMPV6_ECHO_REQUEST } else { ICMP_ECHO })
    }
    fn echo_reply_type(&self) -> u8 {
        if self.is_v6() {
            ICMPV6_ECHO_REPLY
        } else {
            ICMP_ECHOREPLY
        }
    }
    fn describe(&self) -> String {
        let name = crate::cli::nat::proto_name(self.proto_number());
        let ep = |a: IpAddr, p: Option<u16>| match (a, p) {
            (_, None) => a.to_string(),
            (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        };
        let mut s = match self.proto {
            Proto::Icmp => {
                let id = self.sport.map(|i| format!(" id {i}")).unwrap_or_default();
                format!("{name} type {}{id} {} -> {}", self.icmp_type(), self.src, self.dst)
            }
            Proto::Tcp | Proto::Udp => format!("{name} {} -> {}", ep(self.src, self.sport), ep(self.dst, self.dport)),
            Proto::Other(_) => format!("protocol {name} {} -> {}", self.src, self.dst),
        };
        if self.fragment {
            s.push_str(&format!(
                " (later fragment{})",
                self.frag_id.map(|i| format!(", id {i}")).unwrap_or_default()
            ));
        }
        s
    }
}

/// How far the data plane's parser gets (enum l4_state of bpf/lib/parse.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum L4 {
    Ok,
    Fragment,
    Unsupported,
    IcmpError,
}

/// The flow as parse_flow{4,6} fills it: (l4 state, sport, dport). A port is
/// None when the caller did not give it (the tuple is then incomplete).
fn parse(pkt: &Packet) -> (L4, Option<u16>, Option<u16>) {
    if pkt.fragment {
        return (L4::Fragment, Some(0), Some(0));
    }
    match pkt.proto {
        Proto::Tcp | Proto::Udp => (L4::Ok, pkt.sport, pkt.dport),
        Proto::Icmp => {
            let t = pkt.icmp_type();
            let v6 = pkt.is_v6();
            let req = if v6 { ICMPV6_ECHO_REQUEST } else { ICMP_ECHO };
            // Echo: the identifier plays the pod-side port (sport in a request, dport in a reply).
            if t == req {
                (L4::Ok, pkt.sport, Some(0))
            } else if t == pkt.echo_reply_type() {
                (L4::Ok, Some(0), pkt.sport.or(pkt.dport))
            } else if (v6 && ICMPV6_ERRORS.contains(&t)) || (!v6 && ICMP_ERRORS.contains(&t)) {
                (L4::IcmpError, Some(0), Some(0))
            } else {
                (L4::Unsupported, Some(0), Some(0))
            }
        }
        Proto::Other(_) => (L4::Unsupported, Some(0), Some(0)),
    }
}

/// The interface the packet leaves by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutIf {
    pub ifindex: u32,
    pub name: Option<String>,
    /// "--out", "route" or "single uplink".
    pub chosen_by: String,
}

impl OutIf {
    fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| format!("ifindex {}", self.ifindex))
    }
}

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
}

/// What the decision reads. Decision lookups behave as the kernel's map lookups
/// (LPM tries: longest prefix) of the packet's family; `*_desc` only name what
/// matched.
pub trait Lookups {
    fn uplink(&self, ifindex: u32) -> Result<Option<UplinkInfo>>;
    fn config(&self) -> Result<Option<MasqConfig>>;
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Masquerade,
    Untouched,
    Drop,
}

/// Why: a stable identifier per reason (the `code` field of the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    NotUplink,
    HostTraffic,
    NoConfig,
    EchoReply,
    ExistingFlow,
    InboundFlow,
    FragmentOfFlow,
    Rule,
    RuleNoAddress,
    RuleExcept,
    NotPod,
    NatOutgoingFalse,
    NativeRouting,
    NonMasquerade,
    LinkLocal,
    Excluded,
    NoUplinkAddress,
    Pod,
    Ipv6Unsupported,
    FragmentWithoutState,
    UnsupportedProtocol,
    NoPortRange,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleRef {
    pub id: u32,
    pub source: Option<String>,
    pub out_interface: Option<String>,
    pub to_address: Option<String>,
    /// The except CIDR holding the destination, when the rule did not apply for that reason.
    pub except: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodRef {
    pub container_id: Option<String>,
    pub ifname: Option<String>,
    pub veth: Option<String>,
    pub veth_ifindex: u32,
    pub nat_outgoing: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExclRef {
    pub cidr: String,
    pub reason: String,
    pub index: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowRef {
    pub nat_addr: String,
    pub nat_port: u16,
    pub by_rule: Option<u32>,
    pub idle_s: f64,
    pub packets: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub packet: String,
    pub family: &'static str,
    pub out_interface: OutIf,
    pub verdict: Verdict,
    /// True when the packet leaves with a translated source.
    pub masqueraded: bool,
    /// The source address the destination sees (None when dropped).
    pub source_seen: Option<String>,
    /// The masquerade address (None unless masqueraded).
    pub address: Option<String>,
    /// The NAT port, for an existing flow (a new flow gets a random one).
    pub port: Option<u16>,
    pub code: Why,
    pub reason: String,
    pub rule: Option<RuleRef>,
    pub pod: Option<PodRef>,
    pub exclusion: Option<ExclRef>,
    pub flow: Option<FlowRef>,
    /// Every check made, in the data plane's order.
    pub trace: Vec<String>,
    pub notes: Vec<String>,
}

/// What masq_decide_v4/v6 concluded.
enum Decision {
    None(Why, String),
    Masquerade(Why, String, IpAddr),
}

struct Ctx<'a, L: Lookups> {
    l: &'a L,
    pkt: &'a Packet,
    out: &'a OutIf,
    up: UplinkInfo,
    trace: Vec<String>,
    notes: Vec<String>,
    rule: Option<RuleRef>,
    pod: Option<PodRef>,
    exclusion: Option<ExclRef>,
    flow: Option<FlowRef>,
}

impl<L: Lookups> Ctx<'_, L> {
    fn step(&mut self, s: impl Into<String>) {
        self.trace.push(s.into());
    }

    fn ifname(&self) -> String {
        self.out.label()
    }

    /// The address the packet's source is masqueraded to (masq_addr_v4/v6): the
    /// uplink's, or with a pool the one of the pool paired with the source.
    fn source_nat_addr(&mut self) -> Result<Option<IpAddr>> {
        let Some(addr) = self.uplink_addr() else { return Ok(None) };
        let flag = if self.pkt.is_v6() { abi::UPLINK_F_POOL6 } else { abi::UPLINK_F_POOL4 };
        if self.up.flags & flag == 0 {
            return Ok(Some(addr));
        }
        match self.l.pool()?.and_then(|p| p.pick(self.pkt.src).map(|a| (a, p))) {
            Some((a, p)) => {
                let n = if self.pkt.is_v6() { p.len6 } else { p.len4 };
                self.step(format!(
                    "masqueradeAddress is a pool of {n}: source {} is paired with {a} (RFC 4787 REQ-2)",
                    self.pkt.src
                ));
                Ok(Some(a))
            }
            None => Ok(Some(addr)),
        }
    }

    /// The uplink's masquerade address of the packet's family.
    fn uplink_addr(&self) -> Option<IpAddr> {
        if self.pkt.is_v6() {
            (self.up.flags & abi::UPLINK_F_HAS_V6 != 0).then(|| IpAddr::V6(Ipv6Addr::from(self.up.masq_v6)))
        } else {
            (self.up.flags & abi::UPLINK_F_HAS_V4 != 0).then(|| IpAddr::V4(Ipv4Addr::from(self.up.masq_v4)))
        }
    }

    fn finish(self, verdict: Verdict, code: Why, reason: String, nat: Option<(IpAddr, Option<u16>)>) -> Explanation {
        let masqueraded = verdict == Verdict::Masquerade;
        let source_seen = match verdict {
            Verdict::Masquerade => nat.map(|(a, _)| a.to_string()),
            Verdict::Untouched => Some(self.pkt.src.to_string()),
            Verdict::Drop => None,
        };
        Explanation {
            packet: self.pkt.describe(),
            family: if self.pkt.is_v6() { "ipv6" } else { "ipv4" },
            out_interface: self.out.clone(),
            verdict,
            masqueraded,
            source_seen,
            address: nat.filter(|_| masqueraded).map(|(a, _)| a.to_string()),
            port: nat.filter(|_| masqueraded).and_then(|(_, p)| p),
            code,
            reason,
            rule: self.rule,
            pod: self.pod,
            exclusion: self.exclusion,
            flow: self.flow,
            trace: self.trace,
            notes: self.notes,
        }
    }

    fn untouched(self, code: Why, reason: impl Into<String>) -> Explanation {
        self.finish(Verdict::Untouched, code, reason.into(), None)
    }

    fn drop(self, code: Why, reason: impl Into<String>) -> Explanation {
        self.finish(Verdict::Drop, code, reason.into(), None)
    }

    fn pod_ref(&self, info: &PodInfo) -> PodRef {
        let d = self.l.pod_desc(info.ifindex, self.pkt.src);
        PodRef {
            container_id: d.as_ref().map(|d| d.container_id.clone()),
            ifname: d.as_ref().map(|d| d.ifname.clone()),
            veth: d.as_ref().map(|d| d.veth.clone()),
            veth_ifindex: info.ifindex,
            nat_outgoing: info.flags & abi::POD_F_NAT_OUTGOING != 0,
        }
    }

    /// masq_decide_v4 / masq_decide_v6.
    fn decide(&mut self) -> Result<Decision> {
        let (l, src, dst) = (self.l, self.pkt.src, self.pkt.dst);
        let ifname = self.ifname();
        let fam = if self.pkt.is_v6() { "IPv6" } else { "IPv4" };

        // 1. a rule for (out interface, source), unless it excepts the destination.
        let mut excepted: Option<RuleRef> = None;
        match l.rule(self.out.ifindex, src)? {
            Some(rule) => {
                let desc = l.rule_desc(rule.id);
                let mut rref = RuleRef {
                    id: rule.id,
                    source: desc.as_ref().map(|d| d.source.clone()),
                    out_interface: desc.as_ref().and_then(|d| d.out_interface.clone()).or(self.out.name.clone()),
                    to_address: rule.to_address.map(|a| a.to_string()),
                    except: None,
                };
                let what = format!("rule {} (source {} out {ifname})", rule.id, rref.source.as_deref().unwrap_or("?"));
                match l.rule_except(rule.id, dst)? {
                    None => {
                        self.rule = Some(rref);
                        let pooled = if rule.to_address.is_none() { self.source_nat_addr()? } else { None };
                        let Some(nat) = rule.to_address.or(pooled) else {
                            self.step(format!("{what} matches, but it has no toAddress and {ifname} no {fam} address"));
                            return Ok(Decision::None(
                                Why::RuleNoAddress,
                                format!("not masqueraded: rule {} matches but {ifname} has no {fam} masquerade address", rule.id),
                            ));
                        };
                        self.step(format!("{what} matches and does not except {dst}"));
                        return Ok(Decision::Masquerade(Why::Rule, format!("masqueraded to {nat} by {what}"), nat));
                    }
                    Some(cidr) => {
                        self.step(format!("{what} matches, but its except list holds {dst} ({cidr})"));
                        rref.except = Some(cidr);
                        excepted = Some(rref);
                    }
                }
            }
            None => self.step(format!("no masqueradeRules entry for source {src} out {ifname}")),
        }

        // 2. a registered pod with natOutgoing, destination in no exclusion.
        let Some(info) = l.pod(src)? else {
            self.step(format!("{src} is not a registered pod address"));
            if let Some(r) = excepted {
                let reason = format!(
                    "not masqueraded: destination {dst} is in rule {}'s except list ({})",
                    r.id,
                    r.except.as_deref().unwrap_or("?")
                );
                self.rule = Some(r);
                return Ok(Decision::None(Why::RuleExcept, reason));
            }
            return Ok(Decision::None(Why::NotPod, "not masqueraded: source not a registered pod and no rule matches".into()));
        };
        self.rule = excepted.or(self.rule.take());
        let pref = self.pod_ref(&info);
        let name = match (&pref.container_id, &pref.ifname) {
            (Some(c), Some(i)) => format!("{c}/{i}"),
            _ => format!("(no attachment record; veth ifindex {})", pref.veth_ifindex),
        };
        let nat_outgoing = pref.nat_outgoing;
        self.pod = Some(pref);
        if !nat_outgoing {
            self.step(format!("{src} belongs to pod {name}, registered with natOutgoing false"));
            return Ok(Decision::None(Why::NatOutgoingFalse, format!("not masqueraded: natOutgoing is false for pod {name}")));
        }
        self.step(format!("{src} belongs to pod {name} (natOutgoing true)"));
        if let Some((x, cidr)) = l.excl(dst)? {
            let ll = if self.pkt.is_v6() { "masqLinkLocalIPv6" } else { "masqLinkLocal" };
            let (code, what) = match x.reason {
                abi::EXCL_NATIVE_ROUTING => (Why::NativeRouting, format!("nativeRoutingCIDR {cidr}")),
                abi::EXCL_NON_MASQ => (Why::NonMasquerade, format!("nonMasqueradeCIDRs {cidr}")),
                abi::EXCL_LINK_LOCAL => (Why::LinkLocal, format!("link-local {cidr} ({ll} is false)")),
                r => (Why::Excluded, format!("exclusion {cidr} (reason {r})")),
            };
            self.exclusion =
                Some(ExclRef { cidr, reason: crate::cli::status::excl_reason(x.reason).to_string(), index: x.index });
            self.step(format!("destination {dst} is in {what}"));
            return Ok(Decision::None(code, format!("not masqueraded: destination in {what}")));
        }
        self.step(format!("destination {dst} is in no exclusion"));
        let Some(nat) = self.source_nat_addr()? else {
            self.step(format!("{ifname} has no {fam} masquerade address"));
            return Ok(Decision::None(Why::NoUplinkAddress, format!("not masqueraded: {ifname} has no {fam} masquerade address")));
        };
        Ok(Decision::Masquerade(Why::Pod, format!("masqueraded to {nat} (pod registration of {name})"), nat))
    }
}

/// The decision for `pkt` leaving by `out`, as the data plane makes it.
pub fn explain<L: Lookups>(l: &L, pkt: &Packet, out: &OutIf) -> Result<Explanation> {
    if pkt.src.is_ipv4() != pkt.dst.is_ipv4() {
        return Err(Error::new(code::INVALID_CONFIG, "--src and --dst must be of the same address family"));
    }
    let ifname = out.label();
    // masq_up_egress: an interface without an uplink entry is passed through.
    let Some(up) = l.uplink(out.ifindex)? else {
        let mut c = Ctx {
            l,
            pkt,
            out,
            up: UplinkInfo::default(),
            trace: vec![],
            notes: vec![],
            rule: None,
            pod: None,
            exclusion: None,
            flow: None,
        };
        c.step(format!("{ifname} has no entry in the uplinks map"));
        return Ok(c.untouched(Why::NotUplink, format!("not an uplink: untouched ({ifname} is not an ebpf-masq uplink)")));
    };
    let mut c = Ctx { l, pkt, out, up, trace: vec![], notes: vec![], rule: None, pod: None, exclusion: None, flow: None };
    let v4 = (up.flags & abi::UPLINK_F_HAS_V4 != 0).then(|| Ipv4Addr::from(up.masq_v4).to_string());
    let v6 = (up.flags & abi::UPLINK_F_HAS_V6 != 0).then(|| Ipv6Addr::from(up.masq_v6).to_string());
    let addrs: Vec<String> = v4.into_iter().chain(v6).collect();
    c.step(format!(
        "{ifname} is an uplink (masquerade address {})",
        if addrs.is_empty() { "none".to_string() } else { addrs.join(", ") }
    ));

    let v6 = pkt.is_v6();
    if !l.has_nat(v6) {
        // An old data plane: IPv6 leaves the egress program untouched. Say what
        // the policy would decide, then why nothing happens.
        c.step("no IPv6 NAT maps (nat6_fwd) are pinned: this data plane passes IPv6 through");
        c.notes.push("IPv6 masquerade needs a data plane version with IPv6 NAT maps".into());
        return Ok(match c.decide()? {
            Decision::None(code, reason) => c.untouched(code, reason),
            Decision::Masquerade(_, reason, _) => {
                c.step(format!("the policy says: {reason}"));
                c.untouched(Why::Ipv6Unsupported, "IPv6 masquerade not supported by this data plane version: untouched")
            }
        });
    }

    let (l4, sport, dport) = parse(pkt);
    let proto = pkt.proto_number();
    let src = pkt.src;

    // The host's own traffic.
    if c.uplink_addr() == Some(src) {
        c.step(format!("source {src} is {ifname}'s masquerade address"));
        return Ok(c.untouched(Why::HostTraffic, format!("host's own traffic (source {src} is {ifname}'s masquerade address): untouched, unless a pod's NAT pair holds its exact tuple (then it gets another source port, as netfilter gives it; `nat list` shows it as a host flow)")));
    }
    let Some(cfg) = l.config()? else {
        c.step("masq_config has no entry");
        return Ok(c.untouched(Why::NoConfig, "data plane not configured (masq_config missing): untouched"));
    };

    match l4 {
        L4::Ok => {
            match existing_flow(&mut c, sport, dport, proto)? {
                Some(Existing::Masqueraded(reason, addr, port)) => {
                    return Ok(c.finish(Verdict::Masquerade, Why::ExistingFlow, reason, Some((addr, Some(port)))));
                }
                Some(Existing::Inbound(reason)) => return Ok(c.untouched(Why::InboundFlow, reason)),
                None => {}
            }
        }
        L4::Fragment => return fragment(c, proto),
        L4::IcmpError => {
            c.step("an ICMP error: translated with its flow if it quotes a reply of a masqueraded flow (not checked here)");
            c.notes.push("an ICMP error quoting a masqueraded flow's reply is translated with that flow".into());
        }
        L4::Unsupported => {}
    }

    let (code, reason, nat) = match c.decide()? {
        Decision::None(code, reason) => return Ok(c.untouched(code, reason)),
        Decision::Masquerade(code, reason, nat) => (code, reason, nat),
    };

    // From here on the packet must leave masqueraded or not at all. An echo reply
    // answers a ping that reached the source directly: no flow of ours to map it to.
    if l4 == L4::Ok && pkt.proto == Proto::Icmp && pkt.icmp_type() == pkt.echo_reply_type() {
        c.step("an ICMP echo reply with no tracked ping from outside has no flow to be translated with");
        return Ok(c.drop(
            Why::EchoReply,
            format!(
                "dropped (drops.unsupported_protocol): an ICMP echo reply that answers no ping tracked as begun \
                 outside (give its identifier as --sport to look it up) may not leave with its own address, and has \
                 no flow to be masqueraded with; the policy says {reason}"
            ),
        ));
    }
    if matches!(l4, L4::Unsupported | L4::IcmpError) {
        let what = match pkt.proto {
            Proto::Icmp => format!("ICMP type {} (only echo and errors about our flows are translated)", pkt.icmp_type()),
            _ => format!("protocol {}", crate::cli::nat::proto_name(proto)),
        };
        c.step(format!("{what} cannot be translated"));
        return Ok(c.drop(
            Why::UnsupportedProtocol,
            format!("dropped (drops.unsupported_protocol): {what} cannot be masqueraded; the policy says {reason}"),
        ));
    }
    if cfg.port_min == 0 || cfg.port_max < cfg.port_min {
        c.step(format!("no usable port range ({}-{})", cfg.port_min, cfg.port_max));
        return Ok(c.drop(Why::NoPortRange, format!("dropped (drops.no_port): no port range configured; the policy says {reason}")));
    }
    // The ports snat_create tries, in its order (nat_tmpl.h map_prefer, probe_port).
    let mut tries = Vec::new();
    if let Some(own) = sport.filter(|_| matches!(l4, L4::Ok)) {
        if let Some((a, p)) = l.binding(src, own, proto)? {
            if a == nat {
                tries.push(format!(
                    "the mapping this endpoint already has, {nat}:{p} (endpoint-independent mapping, RFC 4787 REQ-1)"
                ));
            }
        }
        let skipped = cfg.skip_max != 0 && (cfg.skip_min..=cfg.skip_max).contains(&own);
        if (cfg.port_min..=cfg.port_max).contains(&own) && own != 0 && !skipped {
            tries.push(format!("its own port {own} (port preservation, RFC 4787 REQ-3)"));
        }
    }
    let skip = if cfg.skip_max != 0 && cfg.skip_max >= cfg.port_min && cfg.skip_min <= cfg.port_max {
        format!(" less nodePortRange {}-{}", cfg.skip_min, cfg.skip_max)
    } else {
        String::new()
    };
    tries.push(format!(
        "a random port from {}-{}{skip} (128 random probes, then a sweep of up to 1024 ports; drops.no_port if none is free)",
        cfg.port_min, cfg.port_max
    ));
    c.notes.push(
        "a port whose replies a host socket would receive (a listener, a bound UDP socket, a host connection to this \
         remote) is passed over (host_socket_ports_avoided)"
            .into(),
    );
    c.notes.push(format!("a new NAT pair is made; its port is the first free of: {}", tries.join("; then ")));
    Ok(c.finish(Verdict::Masquerade, code, reason, Some((nat, None))))
}

/// What the NAT table holds for the packet's exact tuple.
enum Existing {
    /// A masqueraded flow, reused: (reason, nat address, nat port).
    Masqueraded(String, IpAddr, u16),
    /// A flow begun outside: the packet leaves untranslated.
    Inbound(String),
}

/// An existing flow for the exact tuple, when the data plane would use it.
fn existing_flow<L: Lookups>(
    c: &mut Ctx<'_, L>,
    sport: Option<u16>,
    dport: Option<u16>,
    proto: u8,
) -> Result<Option<Existing>> {
    let (Some(sport), Some(dport)) = (sport, dport) else {
        c.step("existing NAT flows not checked (give --sport and --dport, or the echo id as --sport)");
        c.notes.push("an existing flow for the exact tuple would be reused as it is, whatever the policy says now".into());
        return Ok(None);
    };
    let l = c.l;
    let t = Tuple { saddr: c.pkt.src, daddr: c.pkt.dst, sport, dport, proto };
    let Some(fwd) = l.nat_fwd(&t)? else {
        c.step("no existing NAT flow for this tuple");
        return Ok(None);
    };
    let now = l.now_ns();
    if fwd.flags & abi::NAT_F_INBOUND != 0 {
        let idle = now.saturating_sub(fwd.last_seen_ns) as f64 / 1e9;
        c.step(format!("the NAT table holds this tuple as a flow begun outside (idle {idle:.1} s)"));
        return Ok(Some(Existing::Inbound(format!(
            "inbound, not masqueraded: a flow {} opened towards {} (its first packet came in on an uplink); \
             its packets leave with their own source",
            c.pkt.dst, c.pkt.src
        ))));
    }
    // nat_touch refreshes at most once a second; only then does snat_sync_rev
    // check that the reply slot is still this flow's.
    let refreshes = now > fwd.last_seen_ns.saturating_add(NSEC_PER_SEC);
    let rev = l.nat_rev(&natmaps::reverse_of(&t, &fwd))?;
    let ep = |a: IpAddr, p: u16| if a.is_ipv6() { format!("[{a}]:{p}") } else { format!("{a}:{p}") };
    let to = ep(fwd.addr, fwd.port);
    if refreshes && rev.is_some_and(|r| r.addr != t.saddr || r.port != t.sport) {
        c.step(format!(
            "existing flow to {to}, but its reply slot now belongs to another flow: the data plane deletes it and \
             this packet starts a new flow"
        ));
        return Ok(None);
    }
    let by_rule = (fwd.flags & abi::NAT_F_BY_RULE != 0).then_some(fwd.rule_id);
    c.flow = Some(FlowRef {
        nat_addr: fwd.addr.to_string(),
        nat_port: fwd.port,
        by_rule,
        idle_s: now.saturating_sub(fwd.last_seen_ns) as f64 / 1e9,
        packets: fwd.packets,
    });
    if rev.is_none() {
        c.notes.push("the flow's reply half is missing; the data plane re-inserts it on this packet".into());
    }
    let how = by_rule.map(|id| format!(", made by rule {id}")).unwrap_or_default();
    c.step(format!("the NAT table holds this tuple: {to}{how}"));
    Ok(Some(Existing::Masqueraded(format!("masqueraded: existing flow to {to}{how}"), fwd.addr, fwd.port)))
}

/// snat_fragment: a later fragment follows its first fragment's flow, or is
/// dropped if the policy would masquerade it (its ports are unknown).
fn fragment<L: Lookups>(mut c: Ctx<'_, L>, proto: u8) -> Result<Explanation> {
    let l = c.l;
    match c.pkt.frag_id {
        Some(id) => match l.frag(c.pkt.src, c.pkt.dst, id, proto)? {
            Some((sport, dport)) => {
                c.step(format!("its first fragment had ports {sport} -> {dport}"));
                let t = Tuple { saddr: c.pkt.src, daddr: c.pkt.dst, sport, dport, proto };
                if let Some(fwd) = l.nat_fwd(&t)? {
                    c.step(format!("that flow is masqueraded to {}", fwd.addr));
                    let reason = format!("masqueraded to {} like its first fragment", fwd.addr);
                    return Ok(c.finish(Verdict::Masquerade, Why::FragmentOfFlow, reason, Some((fwd.addr, None))));
                }
                c.step("no NAT flow for those ports");
            }
            None => c.step(format!("no first fragment of datagram id {id} was seen (frag maps)")),
        },
        None => {
            c.step("first fragment's ports not looked up (give --frag-id)");
            c.notes.push("a later fragment whose first fragment was masqueraded follows it".into());
        }
    }
    Ok(match c.decide()? {
        Decision::None(code, reason) => c.untouched(code, reason),
        Decision::Masquerade(_, reason, _) => c.drop(
            Why::FragmentWithoutState,
            format!("dropped (drops.fragment_without_state): a later fragment with unknown ports; the policy says {reason}"),
        ),
    })
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

fn map_err(what: &str) -> impl Fn(aya::maps::MapError) -> Error + '_ {
    move |e| Error::bpf(format!("{what}: {e}"))
}

fn opt<V>(r: std::result::Result<V, aya::maps::MapError>, what: &str) -> Result<Option<V>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if maps::is_key_not_found(&e) => Ok(None),
        Err(e) => Err(map_err(what)(e)),
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
        maps::open(pins, name).map(Some)
    } else {
        Ok(None)
    }
}

/// [`Lookups`] answered from the pinned maps.
pub struct MapLookups {
    pins: Pins,
    uplinks: HashMap<MapData, u32, UplinkInfo>,
    config: Array<MapData, MasqConfig>,
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
    rules: OnceCell<Vec<readers::RuleRow>>,
}

impl MapLookups {
    pub fn open(pins: &Pins) -> Result<Self> {
        if !pins.loaded() {
            return Err(Error::state(format!(
                "no data plane under {} (no ADD or `ebpf-masq apply` has run on this node)",
                pins.root.display()
            )));
        }
        let nat6 = match (pins.map(abi::MAP_NAT6_FWD).exists(), open_opt(pins, abi::MAP_NAT6_REV)?) {
            (true, Some(r)) => Some((natmaps::Fwd::open(pins)?, r)),
            _ => None,
        };
        Ok(MapLookups {
            pins: pins.clone(),
            uplinks: maps::open(pins, abi::MAP_UPLINKS)?,
            config: maps::open(pins, abi::MAP_CONFIG)?,
            nat4: (natmaps::Fwd::open(pins)?, maps::open(pins, abi::MAP_NAT4_REV)?),
            nat6,
            frag4: open_opt(pins, abi::MAP_FRAG4)?,
            frag6: open_opt(pins, abi::MAP_FRAG6)?,
            rules4: maps::open(pins, abi::MAP_RULES4)?,
            except4: maps::open(pins, abi::MAP_RULE_EXCEPT4)?,
            rules6: open_opt(pins, abi::MAP_RULES6)?,
            except6: open_opt(pins, abi::MAP_RULE_EXCEPT6)?,
            pods4: maps::open(pins, abi::MAP_PODS4)?,
            pods6: maps::open(pins, abi::MAP_PODS6)?,
            excl4: maps::open(pins, abi::MAP_EXCL4)?,
            excl6: maps::open(pins, abi::MAP_EXCL6)?,
            rules: OnceCell::new(),
        })
    }

    /// Every uplink's ifindex.
    pub fn uplink_ifindexes(&self) -> Result<Vec<u32>> {
        self.uplinks.keys().collect::<std::result::Result<_, _>>().map_err(map_err("uplinks"))
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
    fn pool(&self) -> Result<Option<abi::MasqPool>> {
        if !self.pins.map(abi::MAP_MASQ_POOL).exists() {
            return Ok(None); // a data plane from before pools
        }
        let m: aya::maps::Array<MapData, abi::MasqPool> = maps::open(&self.pins, abi::MAP_MASQ_POOL)?;
        Ok(m.get(&0, 0).ok())
    }

    fn binding(&self, addr: IpAddr, port: u16, proto: u8) -> Result<Option<(IpAddr, u16)>> {
        let name = if addr.is_ipv4() { abi::MAP_NAT4_BIND } else { abi::MAP_NAT6_BIND };
        if !self.pins.map(name).exists() {
            return Ok(None); // a data plane from before the mapping hints
        }
        let port = port.to_be_bytes();
        match addr {
            IpAddr::V4(a) => {
                let m: HashMap<MapData, abi::Nat4Ep, abi::Nat4Bind> = maps::open(&self.pins, name)?;
                let k = abi::Nat4Ep { addr: a.octets(), port, proto, pad: 0 };
                Ok(opt(m.get(&k, 0), name)?.map(|b| (IpAddr::from(b.addr), u16::from_be_bytes(b.port))))
            }
            IpAddr::V6(a) => {
                let m: HashMap<MapData, abi::Nat6Ep, abi::Nat6Bind> = maps::open(&self.pins, name)?;
                let k = abi::Nat6Ep { addr: a.octets(), port, proto, pad: 0 };
                Ok(opt(m.get(&k, 0), name)?.map(|b| (IpAddr::from(b.addr), u16::from_be_bytes(b.port))))
            }
        }
    }
    fn uplink(&self, ifindex: u32) -> Result<Option<UplinkInfo>> {
        opt(self.uplinks.get(&ifindex, 0), "uplinks")
    }
    fn config(&self) -> Result<Option<MasqConfig>> {
        opt(self.config.get(&0, 0), "masq_config")
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
        // The record holding this address on this veth; else any record of the veth.
        atts.iter()
            .find(|(_, i)| i.veth_ifindex == veth_ifindex && pod::addrs_of(i).contains(&addr))
            .or_else(|| atts.iter().find(|(_, i)| i.veth_ifindex == veth_ifindex))
            .map(|(k, i)| PodDesc {
                container_id: pod::cstr(&k.container_id),
                ifname: pod::cstr(&k.ifname),
                veth: pod::cstr(&i.veth_name),
            })
    }
}

// ---------------------------------------------------------------------------
// the out interface

/// The interface of the route to `dst` (RTM_GETROUTE, as `ip route get DST`).
pub fn route_oif(dst: IpAddr) -> Result<Option<u32>> {
    use futures::StreamExt;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
    use netlink_packet_route::{
        route::{RouteAddress, RouteAttribute, RouteMessage},
        AddressFamily, RouteNetlinkMessage,
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .ctx(code::NETLINK, "cannot create runtime for netlink")?;
    rt.block_on(async move {
        let (conn, mut handle, _msgs) = rtnetlink::new_connection().ctx(code::NETLINK, "cannot open rtnetlink socket")?;
        let work = async move {
            let mut msg = RouteMessage::default();
            match dst {
                IpAddr::V4(a) => {
                    msg.header.address_family = AddressFamily::Inet;
                    msg.header.destination_prefix_length = 32;
                    msg.attributes.push(RouteAttribute::Destination(RouteAddress::Inet(a)));
                }
                IpAddr::V6(a) => {
                    msg.header.address_family = AddressFamily::Inet6;
                    msg.header.destination_prefix_length = 128;
                    msg.attributes.push(RouteAttribute::Destination(RouteAddress::Inet6(a)));
                }
            }
            let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetRoute(msg));
            req.header.flags = NLM_F_REQUEST;
            let mut resp = handle.request(req).map_err(|e| Error::netlink(format!("route get {dst}: {e}")))?;
            let mut oif = None;
            while let Some(m) = resp.next().await {
                match m.payload {
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) => {
                        for a in r.attributes {
                            if let RouteAttribute::Oif(i) = a {
                                oif = Some(i);
                            }
                        }
                    }
                    // No route (ENETUNREACH...): the caller falls back.
                    NetlinkPayload::Error(e) if e.code.is_some() => return Ok(None),
                    _ => {}
                }
            }
            Ok(oif)
        };
        match futures::future::select(Box::pin(work), Box::pin(conn)).await {
            futures::future::Either::Left((r, _)) => r,
            futures::future::Either::Right(_) => Err(Error::netlink(format!("route get {dst}: netlink connection closed"))),
        }
    })
}

/// The out interface: `--out`, else the route to the destination, else the
/// node's only uplink.
pub fn resolve_out(l: &MapLookups, out: Option<&str>, dst: IpAddr) -> Result<OutIf> {
    if let Some(name) = out {
        let link = netlink::get_link_by_name(name)?
            .ok_or_else(|| Error::new(code::INVALID_CONFIG, format!("--out {name}: no such interface")))?;
        return Ok(OutIf { ifindex: link.index, name: Some(link.name), chosen_by: "--out".into() });
    }
    if let Some(ifindex) = route_oif(dst)? {
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

// ---------------------------------------------------------------------------
// the command

pub const LONG_HELP: &str = "Explain what the data plane does to one packet leaving the node: masqueraded \
(to which address, by which rule or pod registration), untouched or dropped, and why, step by step.\n\n\
It reads the same pinned maps the BPF programs read (uplinks, rules, pods, exclusions, NAT flows), never a \
config file, and mirrors their order exactly. Run it in the node's network namespace: the out interface is \
--out, else the interface of the node's route to --dst, else the node's only uplink.\n\n\
With --sport and --dport (ICMP echo: the identifier as --sport) an existing NAT flow for that exact tuple is \
looked up first, as the data plane does.";

#[derive(clap::Args, Debug, Clone)]
pub struct ExplainArgs {
    #[arg(long, help = "source address of the packet (a pod, a tunnel client, the node...)")]
    pub src: IpAddr,
    #[arg(long, help = "destination address")]
    pub dst: IpAddr,
    #[arg(long, default_value = "tcp", help = "tcp, udp, icmp (ICMPv6 for IPv6 addresses) or a protocol number")]
    pub proto: Proto,
    #[arg(long, help = "destination port (TCP/UDP)")]
    pub dport: Option<u16>,
    #[arg(long, help = "source port (TCP/UDP), or the ICMP echo identifier")]
    pub sport: Option<u16>,
    #[arg(long, help = "ICMP type (default: echo request; 0 / 129: echo reply)")]
    pub icmp_type: Option<u8>,
    #[arg(long, help = "explain a later (non-first) fragment of the datagram")]
    pub fragment: bool,
    #[arg(long, requires = "fragment", help = "IP identification of the fragmented datagram")]
    pub frag_id: Option<u32>,
    #[arg(long = "out", value_name = "IFACE", help = "the interface the packet leaves by (default: the route to --dst)")]
    pub out: Option<String>,
    #[arg(long, default_value = crate::config::DEFAULT_PIN_PATH, help = "bpffs directory holding the pins")]
    pub pin_path: std::path::PathBuf,
    #[arg(long, help = "machine-readable output")]
    pub json: bool,
}

impl ExplainArgs {
    pub fn packet(&self) -> Packet {
        Packet {
            src: self.src,
            dst: self.dst,
            proto: self.proto,
            icmp_type: self.icmp_type,
            sport: self.sport,
            dport: self.dport,
            fragment: self.fragment,
            frag_id: self.frag_id,
        }
    }
}

pub fn main(args: &ExplainArgs) -> Result<()> {
    run(&args.pin_path, &args.packet(), args.out.as_deref(), args.json)
}

pub fn run(pin_path: &Path, pkt: &Packet, out: Option<&str>, json: bool) -> Result<()> {
    if pkt.src.is_ipv4() != pkt.dst.is_ipv4() {
        return Err(Error::new(code::INVALID_CONFIG, "--src and --dst must be of the same address family"));
    }
    let pins = Pins::new(pin_path);
    let l = MapLookups::open(&pins)?;
    let out = resolve_out(&l, out, pkt.dst)?;
    let x = explain(&l, pkt, &out)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&x).expect("serializable"));
        return Ok(());
    }
    println!("packet:  {} out {} (ifindex {}, chosen by {})", x.packet, out.label(), out.ifindex, out.chosen_by);
    let v = match x.verdict {
        Verdict::Masquerade => format!(
            "MASQUERADE to {}{}",
            x.address.as_deref().unwrap_or("?"),
            x.port.map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Verdict::Untouched => "UNTOUCHED (leaves with its own source)".into(),
        Verdict::Drop => "DROP".into(),
    };
    println!("verdict: {v}");
    println!("why:     {}", x.reason);
    println!("checks:");
    for (i, s) in x.trace.iter().enumerate() {
        println!("  {}. {s}", i + 1);
    }
    if !x.notes.is_empty() {
        println!("notes:");
        for n in &x.notes {
            println!("  - {n}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// (source, destination, datagram id, protocol)
    type FragKey = (IpAddr, IpAddr, u32, u8);

    /// Maps as plain vectors; LPM lookups by byte-prefix matching on the key
    /// data, as the kernel's trie compares keys.
    #[derive(Default)]
    struct Fake {
        uplinks: Vec<(u32, UplinkInfo)>,
        config: Option<MasqConfig>,
        nat6: bool,
        fwd: Vec<(Tuple, Entry)>,
        rev: Vec<(Tuple, Entry)>,
        frags: Vec<(FragKey, (u16, u16))>,
        /// (prefix bits of the address, out ifindex, source network, rule)
        rules: Vec<(u32, u32, IpAddr, RuleHit)>,
        /// (rule id, except CIDR)
        excepts: Vec<(u32, IpAddr, u32)>,
        pods: Vec<(IpAddr, PodInfo)>,
        excl: Vec<(IpAddr, u32, ExclInfo)>,
        atts: Vec<(u32, IpAddr, PodDesc)>,
        now: u64,
        nat_lookups: Cell<u32>,
        /// nat4_bind / nat6_bind: ((pod addr, port, proto), (node addr, port))
        binds: Vec<((IpAddr, u16, u8), (IpAddr, u16))>,
    }

    fn addr_bytes(a: &IpAddr) -> Vec<u8> {
        match a {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        }
    }

    fn in_net(net: &IpAddr, plen: u32, a: &IpAddr) -> bool {
        net.is_ipv4() == a.is_ipv4() && prefix_match(&addr_bytes(net), &addr_bytes(a), plen)
    }

    fn cidr(a: &IpAddr, plen: u32) -> String {
        format!("{a}/{plen}")
    }

    impl Lookups for Fake {
        fn binding(&self, addr: IpAddr, port: u16, proto: u8) -> Result<Option<(IpAddr, u16)>> {
            Ok(self.binds.iter().find(|(k, _)| *k == (addr, port, proto)).map(|(_, b)| *b))
        }
        fn uplink(&self, ifindex: u32) -> Result<Option<UplinkInfo>> {
            Ok(self.uplinks.iter().find(|(i, _)| *i == ifindex).map(|(_, u)| *u))
        }
        fn config(&self) -> Result<Option<MasqConfig>> {
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

    const ETH0: u32 = 2;
    const ETH1: u32 = 3;
    const TUN0: u32 = 9;
    const POD: &str = "10.244.1.2";
    const POD2: &str = "10.244.2.2";
    const POD6: &str = "fd00:244::2";
    const EXT: &str = "10.0.0.2";
    const EXT6: &str = "2001:db8::1";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn node() -> Fake {
        let up = |a: &str, a6: &str| UplinkInfo {
            masq_v4: a.parse::<Ipv4Addr>().unwrap().octets(),
            flags: abi::UPLINK_F_HAS_V4 | abi::UPLINK_F_HAS_V6,
            masq_v6: a6.parse::<Ipv6Addr>().unwrap().octets(),
        };
        let excl = |reason| ExclInfo { reason, index: 0 };
        let rule = |id, to: Option<&str>| RuleHit { id, to_address: to.map(ip) };
        let nat_out = PodInfo { ifindex: 20, flags: abi::POD_F_NAT_OUTGOING, ..Default::default() };
        let desc = |c: &str, i: &str| PodDesc { container_id: c.into(), ifname: i.into(), veth: "veth".into() };
        Fake {
            uplinks: vec![(ETH0, up("10.0.0.5", "fd00::5")), (ETH1, up("10.10.0.5", "fd00:10::5"))],
            config: Some(MasqConfig { port_min: 1024, port_max: 29999, ..Default::default() }),
            nat6: true,
            rules: vec![
                (24, ETH0, ip("192.168.6.0"), rule(0, None)),
                (24, ETH0, ip("192.168.7.0"), rule(1, Some("10.0.0.99"))),
                // A rule whose source is also a pod's (out eth1), with an except.
                (24, ETH1, ip("10.244.1.0"), rule(2, None)),
                (64, ETH0, ip("fd00:6::"), rule(3, None)),
            ],
            excepts: vec![(0, ip("10.0.0.200"), 32), (2, ip("10.30.0.0"), 24), (3, ip("2001:db8:99::"), 48)],
            pods: vec![
                (ip(POD), nat_out),
                (ip(POD2), PodInfo { ifindex: 21, ..Default::default() }),
                (ip(POD6), nat_out),
            ],
            excl: vec![
                (ip("10.10.0.0"), 24, excl(abi::EXCL_NATIVE_ROUTING)),
                (ip("10.20.0.0"), 24, excl(abi::EXCL_NON_MASQ)),
                (ip("169.254.0.0"), 16, excl(abi::EXCL_LINK_LOCAL)),
                (ip("fe80::"), 10, excl(abi::EXCL_LINK_LOCAL)),
                (ip("fd00:10::"), 64, excl(abi::EXCL_NATIVE_ROUTING)),
            ],
            atts: vec![
                (20, ip(POD), desc("c1", "eth0")),
                (20, ip(POD6), desc("c1", "eth0")),
                (21, ip(POD2), desc("c2", "net1")),
            ],
            now: 100 * NSEC_PER_SEC,
            ..Default::default()
        }
    }

    fn out(ifindex: u32) -> OutIf {
        let name = match ifindex {
            ETH0 => "eth0",
            ETH1 => "eth1",
            _ => "tun0",
        };
        OutIf { ifindex, name: Some(name.into()), chosen_by: "--out".into() }
    }

    fn pkt(src: &str, dst: &str, proto: Proto) -> Packet {
        Packet::new(ip(src), ip(dst), proto)
    }

    fn run(f: &Fake, p: &Packet, ifindex: u32) -> Explanation {
        explain(f, p, &out(ifindex)).unwrap()
    }

    #[track_caller]
    fn check(x: &Explanation, verdict: Verdict, code: Why, reason: &str) {
        assert_eq!((x.verdict, x.code), (verdict, code), "{x:#?}");
        assert!(x.reason.contains(reason), "reason {:?} lacks {reason:?}\n{x:#?}", x.reason);
        assert_eq!(x.masqueraded, verdict == Verdict::Masquerade);
        match verdict {
            Verdict::Masquerade => assert_eq!(x.source_seen, x.address),
            Verdict::Untouched => assert!(x.source_seen.is_some() && x.address.is_none(), "{x:#?}"),
            Verdict::Drop => assert_eq!(x.source_seen, None),
        }
    }

    #[test]
    fn new_flow_note_names_the_ports_tried_in_order() {
        let mut f = node();
        let mut p = pkt(POD, EXT, Proto::Udp);
        (p.sport, p.dport) = (Some(20000), Some(53));
        let note = |f: &Fake, p: &Packet| {
            run(f, p, ETH0).notes.into_iter().find(|n| n.contains("new NAT pair")).expect("a new-pair note")
        };
        let n = note(&f, &p);
        assert!(n.contains("its own port 20000 (port preservation") && !n.contains("already has"), "{n}");
        assert!(n.find("own port 20000").unwrap() < n.find("a random port from 1024-29999").unwrap(), "{n}");
        // The endpoint's mapping comes first; one towards another address is not used.
        f.binds.push(((ip(POD), 20000, 17), (ip("10.0.0.5"), 4242)));
        let n = note(&f, &p);
        assert!(n.find("10.0.0.5:4242 (endpoint-independent").unwrap() < n.find("own port 20000").unwrap(), "{n}");
        f.binds[0].1 = (ip("10.10.0.5"), 4242);
        assert!(!note(&f, &p).contains("4242"));
        // A port outside portRange is not preserved.
        p.sport = Some(40000);
        let n = note(&f, &p);
        assert!(!n.contains("own port") && n.contains("a random port"), "{n}");
    }

    #[test]
    fn pod_masqueraded_to_uplink_address() {
        let x = run(&node(), &pkt(POD, EXT, Proto::Icmp), ETH0);
        check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5 (pod registration of c1/eth0)");
        assert_eq!(x.address.as_deref(), Some("10.0.0.5"));
        assert_eq!(x.pod.as_ref().unwrap().container_id.as_deref(), Some("c1"));
        assert!(x.notes.iter().any(|n| n.contains("1024-29999")), "{x:#?}");
        // Each uplink masquerades to its own address.
        let mut f = node();
        f.rules.retain(|r| r.1 != ETH1);
        check(&run(&f, &pkt(POD, "10.40.0.2", Proto::Udp), ETH1), Verdict::Masquerade, Why::Pod, "masqueraded to 10.10.0.5");
    }

    #[test]
    fn not_an_uplink() {
        let f = node();
        let x = run(&f, &Packet { sport: Some(1), dport: Some(2), ..pkt(POD, "192.168.6.1", Proto::Udp) }, TUN0);
        check(&x, Verdict::Untouched, Why::NotUplink, "not an uplink: untouched");
        assert_eq!(x.source_seen.as_deref(), Some(POD));
        assert_eq!(f.nat_lookups.get(), 0, "no flow lookup on a non-uplink");
    }

    #[test]
    fn host_traffic() {
        let f = node();
        let x = run(&f, &Packet { sport: Some(1), dport: Some(2), ..pkt("10.0.0.5", EXT, Proto::Tcp) }, ETH0);
        check(&x, Verdict::Untouched, Why::HostTraffic, "host's own traffic");
        assert_eq!(f.nat_lookups.get(), 0, "no flow lookup for the host's own traffic");
        // Only the uplink's own address counts: eth1's address out eth0 is no pod and no rule.
        check(&run(&f, &pkt("10.10.0.5", EXT, Proto::Tcp), ETH0), Verdict::Untouched, Why::NotPod, "no rule matches");
        check(&run(&f, &pkt("fd00::5", EXT6, Proto::Tcp), ETH0), Verdict::Untouched, Why::HostTraffic, "host's own");
    }

    #[test]
    fn missing_config_is_untouched() {
        let mut f = node();
        f.config = None;
        check(&run(&f, &pkt(POD, EXT, Proto::Tcp), ETH0), Verdict::Untouched, Why::NoConfig, "not configured");
    }

    fn udp_flow(sport: u16, dport: u16) -> Packet {
        Packet { sport: Some(sport), dport: Some(dport), ..pkt(POD, EXT, Proto::Udp) }
    }

    fn tuple(sport: u16, dport: u16, proto: u8) -> Tuple {
        Tuple { saddr: ip(POD), daddr: ip(EXT), sport, dport, proto }
    }

    fn entry(addr: &str, port: u16, last_seen_s: u64) -> Entry {
        Entry {
            addr: ip(addr),
            port,
            flags: 0,
            rule_id: 0,
            created_ns: 0,
            last_seen_ns: last_seen_s * NSEC_PER_SEC,
            packets: 1,
            bytes: 1,
        }
    }

    #[test]
    fn existing_flow_is_reused() {
        let mut f = node();
        f.fwd.push((tuple(40000, 5001, IPPROTO_UDP), entry("10.0.0.5", 4321, 99)));
        let x = run(&f, &udp_flow(40000, 5001), ETH0);
        check(&x, Verdict::Masquerade, Why::ExistingFlow, "existing flow to 10.0.0.5:4321");
        assert_eq!((x.address.as_deref(), x.port), (Some("10.0.0.5"), Some(4321)));
        assert!(x.notes.iter().any(|n| n.contains("reply half is missing")), "{x:#?}");

        // A flow made by a rule that is gone is still reused as it is.
        let mut f = node();
        f.rules.clear();
        f.fwd.push((tuple(40000, 5001, IPPROTO_UDP), Entry { flags: abi::NAT_F_BY_RULE, rule_id: 7, ..entry("10.0.0.5", 4321, 99) }));
        check(&run(&f, &udp_flow(40000, 5001), ETH0), Verdict::Masquerade, Why::ExistingFlow, "made by rule 7");
        // Another tuple: a new flow through the policy.
        check(&run(&f, &udp_flow(40001, 5001), ETH0), Verdict::Masquerade, Why::Pod, "pod registration");
        // ICMP echo: the identifier alone is the tuple (dport 0).
        f.fwd.push((tuple(77, 0, IPPROTO_ICMP), entry("10.0.0.5", 900, 100)));
        let x = run(&f, &Packet { sport: Some(77), ..pkt(POD, EXT, Proto::Icmp) }, ETH0);
        check(&x, Verdict::Masquerade, Why::ExistingFlow, "existing flow to 10.0.0.5:900");
    }

    #[test]
    fn flow_begun_outside_leaves_untranslated() {
        let mut f = node();
        let pod_own = Entry { flags: abi::NAT_F_INBOUND, ..entry(POD, 8080, 99) };
        f.fwd.push((tuple(8080, 5001, IPPROTO_TCP), pod_own));
        let x = run(&f, &Packet { sport: Some(8080), dport: Some(5001), ..pkt(POD, EXT, Proto::Tcp) }, ETH0);
        check(&x, Verdict::Untouched, Why::InboundFlow, "inbound, not masqueraded");
        assert_eq!(x.source_seen.as_deref(), Some(POD), "{x:#?}");
        // The pod's own flow from another port is still masqueraded.
        let x = run(&f, &Packet { sport: Some(40000), dport: Some(5001), ..pkt(POD, EXT, Proto::Tcp) }, ETH0);
        check(&x, Verdict::Masquerade, Why::Pod, "pod registration");
    }

    #[test]
    fn existing_flow_whose_reply_slot_was_taken_starts_afresh() {
        let mut f = node();
        let fwd = entry("10.0.0.5", 4321, 10);
        f.fwd.push((tuple(40000, 5001, IPPROTO_UDP), fwd));
        let rt = natmaps::reverse_of(&tuple(40000, 5001, IPPROTO_UDP), &fwd);
        f.rev.push((rt, entry("10.244.1.77", 1, 10)));
        let x = run(&f, &udp_flow(40000, 5001), ETH0);
        check(&x, Verdict::Masquerade, Why::Pod, "pod registration");
        assert!(x.trace.iter().any(|t| t.contains("reply slot now belongs to another flow")), "{x:#?}");
        // Refreshed less than a second ago: the data plane does not re-check the slot.
        f.fwd[0].1.last_seen_ns = 99 * NSEC_PER_SEC + 500_000_000;
        check(&run(&f, &udp_flow(40000, 5001), ETH0), Verdict::Masquerade, Why::ExistingFlow, "existing flow");
    }

    #[test]
    fn flow_lookup_needs_the_whole_tuple() {
        let f = node();
        let x = run(&f, &Packet { sport: Some(1), ..pkt(POD, EXT, Proto::Udp) }, ETH0);
        assert_eq!(f.nat_lookups.get(), 0);
        assert!(x.trace.iter().any(|t| t.contains("not checked")), "{x:#?}");
    }

    #[test]
    fn echo_reply() {
        let f = node();
        // To a destination the policy masquerades: dropped.
        let p = Packet { icmp_type: Some(ICMP_ECHOREPLY), sport: Some(5), ..pkt(POD, "10.30.0.2", Proto::Icmp) };
        check(&run(&f, &p, ETH0), Verdict::Drop, Why::EchoReply, "drops.unsupported_protocol): an ICMP echo reply");
        let p = Packet { icmp_type: Some(ICMP_ECHOREPLY), ..pkt("192.168.6.1", EXT, Proto::Icmp) };
        check(&run(&f, &p, ETH0), Verdict::Drop, Why::EchoReply, "by rule 0");
        let p = Packet { icmp_type: Some(ICMPV6_ECHO_REPLY), ..pkt(POD6, EXT6, Proto::Icmp) };
        check(&run(&f, &p, ETH0), Verdict::Drop, Why::EchoReply, "echo reply");
        // To an excluded destination, or from a source the policy leaves alone: untouched.
        let p = Packet { icmp_type: Some(ICMP_ECHOREPLY), ..pkt(POD, "10.10.0.2", Proto::Icmp) };
        check(&run(&f, &p, ETH0), Verdict::Untouched, Why::NativeRouting, "nativeRoutingCIDR");
        let p = Packet { icmp_type: Some(ICMP_ECHOREPLY), ..pkt(POD2, EXT, Proto::Icmp) };
        check(&run(&f, &p, ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "natOutgoing is false");
        // An echo reply of a flow (the identifier as dport, sport 0) is looked up first.
        let mut f = node();
        f.fwd.push((tuple(0, 5, IPPROTO_ICMP), entry("10.0.0.5", 1, 100)));
        let p = Packet { icmp_type: Some(ICMP_ECHOREPLY), sport: Some(5), ..pkt(POD, EXT, Proto::Icmp) };
        check(&run(&f, &p, ETH0), Verdict::Masquerade, Why::ExistingFlow, "existing flow to 10.0.0.5:1");
    }

    #[test]
    fn rule_masquerades() {
        let f = node();
        let x = run(&f, &pkt("192.168.6.1", EXT, Proto::Icmp), ETH0);
        check(&x, Verdict::Masquerade, Why::Rule, "masqueraded to 10.0.0.5 by rule 0 (source 192.168.6.0/24 out eth0)");
        assert_eq!(x.rule.as_ref().unwrap().id, 0);
        // toAddress.
        check(&run(&f, &pkt("192.168.7.3", EXT, Proto::Tcp), ETH0), Verdict::Masquerade, Why::Rule, "masqueraded to 10.0.0.99 by rule 1");
        // Rules are per interface: the same source out eth1 has none.
        check(&run(&f, &pkt("192.168.6.1", "10.40.0.1", Proto::Tcp), ETH1), Verdict::Untouched, Why::NotPod, "no rule matches");
        // Rules ignore the pod exclusions (the tunnel case masquerades to the node's own subnet).
        check(&run(&f, &pkt("192.168.6.1", "10.10.0.2", Proto::Tcp), ETH0), Verdict::Masquerade, Why::Rule, "by rule 0");
        // IPv6 rules.
        let x = run(&f, &pkt("fd00:6::9", EXT6, Proto::Udp), ETH0);
        check(&x, Verdict::Masquerade, Why::Rule, "masqueraded to fd00::5 by rule 3 (source fd00:6::/64 out eth0)");
    }

    #[test]
    fn rule_except() {
        let f = node();
        let x = run(&f, &pkt("192.168.6.1", "10.0.0.200", Proto::Udp), ETH0);
        check(&x, Verdict::Untouched, Why::RuleExcept, "not masqueraded: destination 10.0.0.200 is in rule 0's except list (10.0.0.200/32)");
        assert_eq!(x.rule.as_ref().unwrap().except.as_deref(), Some("10.0.0.200/32"));
        let x = run(&f, &pkt("fd00:6::9", "2001:db8:99::1", Proto::Udp), ETH0);
        check(&x, Verdict::Untouched, Why::RuleExcept, "rule 3's except list (2001:db8:99::/48)");
        // An excepted pod source falls through to its pod registration, as in policy.h.
        let x = run(&f, &pkt(POD, "10.30.0.2", Proto::Udp), ETH1);
        check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.10.0.5 (pod registration of c1/eth0)");
        assert_eq!(x.rule.as_ref().unwrap().except.as_deref(), Some("10.30.0.0/24"));
        // ... and when not excepted, the rule wins over the pod's exclusions.
        check(&run(&f, &pkt(POD, "10.10.0.2", Proto::Udp), ETH1), Verdict::Masquerade, Why::Rule, "by rule 2 (source 10.244.1.0/24 out eth1)");
    }

    #[test]
    fn rule_or_pod_without_uplink_address() {
        let mut f = node();
        f.uplinks[0].1.flags = abi::UPLINK_F_HAS_V6;
        let x = run(&f, &pkt("192.168.6.1", EXT, Proto::Udp), ETH0);
        check(&x, Verdict::Untouched, Why::RuleNoAddress, "rule 0 matches but eth0 has no IPv4 masquerade address");
        check(&run(&f, &pkt("192.168.7.1", EXT, Proto::Udp), ETH0), Verdict::Masquerade, Why::Rule, "10.0.0.99");
        check(&run(&f, &pkt(POD, EXT, Proto::Udp), ETH0), Verdict::Untouched, Why::NoUplinkAddress, "eth0 has no IPv4 masquerade address");
    }

    #[test]
    fn unregistered_source() {
        let x = run(&node(), &pkt("10.244.1.99", EXT, Proto::Udp), ETH0);
        check(&x, Verdict::Untouched, Why::NotPod, "not masqueraded: source not a registered pod and no rule matches");
        assert_eq!(x.source_seen.as_deref(), Some("10.244.1.99"));
    }

    #[test]
    fn nat_outgoing_false() {
        let x = run(&node(), &pkt(POD2, EXT, Proto::Udp), ETH0);
        check(&x, Verdict::Untouched, Why::NatOutgoingFalse, "not masqueraded: natOutgoing is false for pod c2/net1");
        assert!(!x.pod.as_ref().unwrap().nat_outgoing);
        let mut f = node();
        f.atts.clear();
        check(&run(&f, &pkt(POD2, EXT, Proto::Udp), ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "veth ifindex 21");
    }

    #[test]
    fn exclusions() {
        let f = node();
        let x = run(&f, &pkt(POD, "10.10.0.2", Proto::Icmp), ETH0);
        check(&x, Verdict::Untouched, Why::NativeRouting, "not masqueraded: destination in nativeRoutingCIDR 10.10.0.0/24");
        assert_eq!(x.exclusion.as_ref().unwrap().reason, "nativeRoutingCIDR");
        check(&run(&f, &pkt(POD, "10.20.0.9", Proto::Icmp), ETH0), Verdict::Untouched, Why::NonMasquerade, "nonMasqueradeCIDRs 10.20.0.0/24");
        check(&run(&f, &pkt(POD, "169.254.1.2", Proto::Icmp), ETH0), Verdict::Untouched, Why::LinkLocal, "link-local 169.254.0.0/16 (masqLinkLocal is false)");
        check(&run(&f, &pkt(POD, "10.20.1.9", Proto::Icmp), ETH0), Verdict::Masquerade, Why::Pod, "pod registration");
        check(&run(&f, &pkt(POD6, "fe80::1", Proto::Icmp), ETH0), Verdict::Untouched, Why::LinkLocal, "link-local fe80::/10 (masqLinkLocalIPv6 is false)");
        check(&run(&f, &pkt(POD6, "fd00:10::7", Proto::Udp), ETH0), Verdict::Untouched, Why::NativeRouting, "nativeRoutingCIDR fd00:10::/64");
    }

    #[test]
    fn packets_that_cannot_be_translated_are_dropped() {
        let f = node();
        check(&run(&f, &pkt(POD, EXT, Proto::Other(47)), ETH0), Verdict::Drop, Why::UnsupportedProtocol, "drops.unsupported_protocol");
        check(&run(&f, &Packet { icmp_type: Some(13), ..pkt(POD, EXT, Proto::Icmp) }, ETH0), Verdict::Drop, Why::UnsupportedProtocol, "ICMP type 13");
        // An ICMP error quoting nothing of ours is a packet to masquerade that cannot be.
        let x = run(&f, &Packet { icmp_type: Some(3), ..pkt(POD, EXT, Proto::Icmp) }, ETH0);
        check(&x, Verdict::Drop, Why::UnsupportedProtocol, "ICMP type 3");
        assert!(x.notes.iter().any(|n| n.contains("quoting")), "{x:#?}");
        // Untouched packets are never dropped, whatever their protocol.
        check(&run(&f, &pkt(POD2, EXT, Proto::Other(47)), ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "natOutgoing");
        let mut f = node();
        f.config = Some(MasqConfig::default());
        check(&run(&f, &pkt(POD, EXT, Proto::Udp), ETH0), Verdict::Drop, Why::NoPortRange, "drops.no_port");
    }

    #[test]
    fn later_fragments() {
        let mut f = node();
        let frag = |id| Packet { fragment: true, frag_id: id, ..pkt(POD, EXT, Proto::Udp) };
        // Unknown datagram of a flow to masquerade: dropped.
        check(&run(&f, &frag(Some(9)), ETH0), Verdict::Drop, Why::FragmentWithoutState, "drops.fragment_without_state");
        check(&run(&f, &frag(None), ETH0), Verdict::Drop, Why::FragmentWithoutState, "fragment_without_state");
        // Unknown datagram the policy leaves alone: untouched.
        let p = Packet { fragment: true, ..pkt(POD2, EXT, Proto::Udp) };
        check(&run(&f, &p, ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "natOutgoing is false");
        // Its first fragment went out with ports 40000 -> 5001 through a flow.
        f.frags.push(((ip(POD), ip(EXT), 9, IPPROTO_UDP), (40000, 5001)));
        let x = run(&f, &frag(Some(9)), ETH0);
        check(&x, Verdict::Drop, Why::FragmentWithoutState, "fragment_without_state");
        assert!(x.trace.iter().any(|t| t.contains("no NAT flow for those ports")), "{x:#?}");
        f.fwd.push((tuple(40000, 5001, IPPROTO_UDP), entry("10.0.0.5", 4321, 99)));
        let x = run(&f, &frag(Some(9)), ETH0);
        check(&x, Verdict::Masquerade, Why::FragmentOfFlow, "masqueraded to 10.0.0.5 like its first fragment");
        // Another datagram id: no state.
        check(&run(&f, &frag(Some(10)), ETH0), Verdict::Drop, Why::FragmentWithoutState, "fragment_without_state");
    }

    #[test]
    fn ipv6() {
        let f = node();
        let x = run(&f, &pkt(POD6, EXT6, Proto::Icmp), ETH0);
        check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to fd00::5 (pod registration of c1/eth0)");
        assert_eq!(x.family, "ipv6");
        check(&run(&f, &pkt("fd00:99::1", EXT6, Proto::Udp), ETH0), Verdict::Untouched, Why::NotPod, "not a registered pod");
        check(&run(&f, &pkt(POD6, EXT6, Proto::Icmp), TUN0), Verdict::Untouched, Why::NotUplink, "not an uplink");
        let mut f = node();
        f.pods[2].1.flags = 0;
        check(&run(&f, &pkt(POD6, EXT6, Proto::Tcp), ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "natOutgoing is false");
        // Mixed families are refused.
        assert!(explain(&node(), &pkt(POD, EXT6, Proto::Tcp), &out(ETH0)).is_err());
    }

    #[test]
    fn ipv6_on_a_data_plane_without_ipv6_nat() {
        let mut f = node();
        f.nat6 = false;
        let x = run(&f, &pkt(POD6, EXT6, Proto::Icmp), ETH0);
        check(&x, Verdict::Untouched, Why::Ipv6Unsupported, "IPv6 masquerade not supported by this data plane version");
        assert!(x.trace.iter().any(|t| t.contains("masqueraded to fd00::5")), "{x:#?}");
        // The policy's own reasons still show.
        check(&run(&f, &pkt(POD6, "fe80::1", Proto::Icmp), ETH0), Verdict::Untouched, Why::LinkLocal, "fe80::/10");
        check(&run(&f, &pkt("fd00:99::1", EXT6, Proto::Udp), ETH0), Verdict::Untouched, Why::NotPod, "not a registered pod");
        // IPv4 is unaffected.
        check(&run(&f, &pkt(POD, EXT, Proto::Udp), ETH0), Verdict::Masquerade, Why::Pod, "10.0.0.5");
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(run(&node(), &pkt(POD, EXT, Proto::Icmp), ETH0)).unwrap();
        assert_eq!((v["verdict"].as_str(), v["code"].as_str()), (Some("masquerade"), Some("pod")));
        assert_eq!(v["out_interface"]["name"], "eth0");
        assert_eq!(v["masqueraded"], true);
        assert_eq!(v["address"], "10.0.0.5");
        let v = serde_json::to_value(run(&node(), &pkt(POD2, EXT, Proto::Icmp), ETH0)).unwrap();
        assert_eq!(v["code"], "nat_outgoing_false");
        assert_eq!(v["address"], serde_json::Value::Null);
        assert_eq!(v["source_seen"], POD2);
    }

    #[test]
    fn proto_parsing() {
        assert_eq!("TCP".parse::<Proto>(), Ok(Proto::Tcp));
        assert_eq!("icmp".parse::<Proto>(), Ok(Proto::Icmp));
        assert_eq!("47".parse::<Proto>(), Ok(Proto::Other(47)));
        assert_eq!("17".parse::<Proto>(), Ok(Proto::Udp));
        assert!("sctpx".parse::<Proto>().is_err());
    }

    #[test]
    fn prefix_matching() {
        assert!(prefix_match(&[10, 0, 0, 1], &[10, 0, 0, 200], 24));
        assert!(!prefix_match(&[10, 0, 1, 1], &[10, 0, 0, 200], 24));
        assert!(prefix_match(&[10, 0x80, 0, 0], &[10, 0xbf, 1, 1], 10));
        assert!(!prefix_match(&[10, 0x80, 0, 0], &[10, 0x40, 1, 1], 10));
        assert!(prefix_match(&[1, 2], &[9, 9], 0));
    }
}
