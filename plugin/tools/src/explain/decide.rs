//! The decision walk: `snat_egress` and `masq_decide_v4/v6` of the data plane,
//! step by step, over the [`Lookups`] it is given, and the [`Explanation`] it
//! ends in. Reads only through `Lookups`; keep it in step with bpf/lib/decide.h.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::egress_policy::{self, Outcome, PolicyReason, PolicyRef};
use super::explanation::{ExclRef, Explanation, FlowRef, PodRef, RuleRef, Verdict, Why};
use super::lookups::Lookups;
use super::packet::{by_address, parse, OutIf, Packet, Proto, L4};
use ebpf_masq_core::{
    bpf::{abi::{self, PodInfo, UplinkInfo}, nat::{self as natmaps, Tuple},},
    error::{code, Error, Result},
    node,
    pod,
};

pub(super) const NSEC_PER_SEC: u64 = 1_000_000_000;

/// What masq_decide_v4/v6 concluded.
enum Decision {
    None(Why, String),
    /// From the node's pod ranges, no registered pod's, to a destination a pod's
    /// packet would be masqueraded to: dropped (drops.unregistered_pod).
    Unregistered(String),
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
    policy: Option<PolicyRef>,
    policies: Vec<PolicyReason>,
}

impl<'a, L: Lookups> Ctx<'a, L> {
    fn new(l: &'a L, pkt: &'a Packet, out: &'a OutIf, up: UplinkInfo) -> Self {
        let (trace, notes, policies) = (vec![], vec![], vec![]);
        Ctx { l, pkt, out, up, trace, notes, rule: None, pod: None, exclusion: None, flow: None, policy: None, policies }
    }

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
            policy: self.policy,
            policies: self.policies,
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
            port_limit: Some(pod::port_limit_of(info.flags)).filter(|&n| n != 0),
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
            // 3. inside the node's pod ranges: a pod whose ADD never reached ebpf-masq.
            if let Some(range) = l.pod_net(src)? {
                self.step(format!("{src} is in the node's pod range {range}"));
                if let Some((_, cidr)) = l.excl(dst)? {
                    self.step(format!("destination {dst} is in an exclusion ({cidr})"));
                } else {
                    self.step(format!("destination {dst} is in no exclusion"));
                    return Ok(Decision::Unregistered(format!(
                        "dropped (drops.unregistered_pod): {src} is in the node's pod range {range} but no registered \
                         pod's; a pod whose ADD never reached ebpf-masq never leaves with its own address (the agent \
                         registers it from the runtime's CNI cache)"
                    )));
                }
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
            // An exclusion of ip-masq-agent's file (node::ipmasq): named with the file.
            let ipm = node::ipmasq::is_from_ip_masq_agent(x.index).then(|| {
                let file = l.ip_masq_agent_source().unwrap_or_else(|| "(file not recorded)".into());
                format!("ip-masq-agent config {file}")
            });
            let (code, what) = match (x.reason, &ipm) {
                (abi::EXCL_NATIVE_ROUTING, _) => (Why::NativeRouting, format!("nativeRoutingCIDR {cidr}")),
                (abi::EXCL_NON_MASQ, Some(f)) => (Why::NonMasquerade, format!("nonMasqueradeCIDRs {cidr} (by {f})")),
                (abi::EXCL_NON_MASQ, None) => (Why::NonMasquerade, format!("nonMasqueradeCIDRs {cidr}")),
                (abi::EXCL_LINK_LOCAL, Some(f)) => (Why::LinkLocal, format!("link-local {cidr} ({ll} is false, by {f})")),
                (abi::EXCL_LINK_LOCAL, None) => (Why::LinkLocal, format!("link-local {cidr} ({ll} is false)")),
                (r, _) => (Why::Excluded, format!("exclusion {cidr} (reason {r})")),
            };
            self.exclusion = Some(ExclRef {
                cidr,
                reason: crate::status::excl_reason(x.reason).to_string(),
                index: x.index & !node::ipmasq::FROM_IP_MASQ_AGENT,
                source: ipm,
            });
            self.step(format!("destination {dst} is in {what}"));
            if info.policies != 0 {
                self.step("egress policies not consulted: exclusions win");
            }
            return Ok(Decision::None(code, format!("not masqueraded: destination in {what}")));
        }
        self.step(format!("destination {dst} is in no exclusion"));
        let Some(nat) = self.source_nat_addr()? else {
            self.step(format!("{ifname} has no {fam} masquerade address"));
            return Ok(Decision::None(Why::NoUplinkAddress, format!("not masqueraded: {ifname} has no {fam} masquerade address")));
        };
        // egress_policy_v4/v6: the first of the pod's policies that holds the destination.
        let desc = l.pod_desc(info.ifindex, src);
        let mut why = format!("masqueraded to {nat} (pod registration of {name})");
        if let Some(e) = egress_policy::egress_policy(l, src, dst, info.policies, desc.as_ref())? {
            e.steps.into_iter().for_each(|s| self.step(s));
            self.policies = e.policies;
            self.policy = e.policy;
            let pname = self.policy.as_ref().map(|p| p.name.clone()).unwrap_or_default();
            match e.outcome {
                Outcome::NoNat => {
                    return Ok(Decision::None(
                        Why::EgressPolicyNoNat,
                        format!("not masqueraded: egress policy \"{pname}\" (natOutgoing: false)"),
                    ))
                }
                Outcome::Address(a) => {
                    return Ok(Decision::Masquerade(Why::EgressPolicy, format!("masqueraded to {a} by egress policy \"{pname}\""), a))
                }
                Outcome::Network if self.policy.is_some() => {
                    why.push_str(&format!("; egress policy \"{pname}\" has no {fam} address"));
                }
                Outcome::Network => {}
            }
        }
        Ok(Decision::Masquerade(Why::Pod, why, nat))
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
        let mut c = Ctx::new(l, pkt, out, UplinkInfo::default());
        c.step(format!("{ifname} has no entry in the uplinks map"));
        return Ok(c.untouched(Why::NotUplink, format!("not an uplink: untouched ({ifname} is not an ebpf-masq uplink)")));
    };
    let mut c = Ctx::new(l, pkt, out, up);
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
            Decision::Unregistered(reason) => c.drop(Why::UnregisteredPod, reason),
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
        c.step("node_config has no entry");
        return Ok(c.untouched(Why::NoConfig, "data plane not configured (node_config missing): untouched"));
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
        Decision::Unregistered(reason) => return Ok(c.drop(Why::UnregisteredPod, reason)),
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
            _ => format!("protocol {}", crate::nat_list::proto_name(proto)),
        };
        c.step(format!("{what} cannot be translated"));
        return Ok(c.drop(
            Why::UnsupportedProtocol,
            format!("dropped (drops.unsupported_protocol): {what} cannot be masqueraded; the policy says {reason}"),
        ));
    }
    if l4 == L4::Ok && by_address(proto) {
        // No ports (GRE, ESP...): one pair per {source, remote, protocol}, its reverse key
        // {remote, nat address, protocol}; SCTP's keeps its ports (new_pair_tmpl.h addr_make_pair).
        let what = crate::nat_list::proto_name(proto);
        let (Some(sport), Some(dport)) = (sport, dport) else {
            c.step(format!("protocol {what}: its pair not checked (give --sport and --dport)"));
            return Ok(c.finish(Verdict::Masquerade, code, reason, Some((nat, None))));
        };
        c.step(if sport == 0 && dport == 0 {
            format!("protocol {what} has no ports: masqueraded by address alone, as netfilter's generic handling")
        } else {
            format!("protocol {what}: masqueraded by address, its ports kept ({sport} -> {dport})")
        });
        let rk = Tuple { saddr: pkt.dst, daddr: nat, sport: dport, dport: sport, proto };
        match l.nat_rev(&rk)? {
            Some(held) if held.addr != src => c.notes.push(format!(
                "{held_by} holds the pair towards {dst} (protocol {what}) on {nat}: this packet is refused \
                 (drops.no_port) until that pair has been idle for 600 s (netfilter drops such a clash of a \
                 protocol without ports; an SCTP one it gives another port)",
                held_by = held.addr,
                dst = pkt.dst
            )),
            _ => c.notes.push(format!(
                "a new NAT pair is made, {nat} towards {dst} for protocol {what}; while it lives, another source's \
                 packets of that protocol to {dst} are refused (drops.no_port); it ends after 600 s idle",
                dst = pkt.dst
            )),
        }
        return Ok(c.finish(Verdict::Masquerade, code, reason, Some((nat, None))));
    }
    if cfg.port_min == 0 || cfg.port_max < cfg.port_min {
        c.step(format!("no usable port range ({}-{})", cfg.port_min, cfg.port_max));
        return Ok(c.drop(Why::NoPortRange, format!("dropped (drops.no_port): no port range configured; the policy says {reason}")));
    }
    // The ports snat_flow_entry tries, in its order (bpf/lib/nat/new_pair_tmpl.h map_prefer, nat/port_tmpl.h probe_port).
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
        "a random port from {}-{}{skip} (32 random probes; then, the remote endpoint being busy, its port bitmap, which \
         finds a free or reusable port whenever the range has one; drops.no_port if none is)",
        cfg.port_min, cfg.port_max
    ));
    c.notes.push(
        "a port held towards this remote endpoint is taken over when its pair expired (nat_reclaimed), when its TCP \
         close completed, both FINs acknowledged (at once; if the remote closed first, only by a SYN past the old \
         flow's sequence numbers) or a RST ended it (after 2 s quiet) (nat_finished_reused), or when the remote never \
         answered it (after 2 s quiet: nat_unanswered_reused)"
            .into(),
    );
    c.notes.push(
        "a port whose replies a host socket would receive (a listener, a bound UDP socket, a host connection to this \
         remote) is passed over (host_socket_ports_avoided)"
            .into(),
    );
    c.notes.push(format!("a new NAT pair is made; its port is the first free of: {}", tries.join("; then ")));
    let r = l.refusals(src)?;
    c.notes.push(format!(
        "fair shares (RFC 6888 REQ-4): while some but fewer than 1/16 of the ports towards this remote endpoint are \
         free, a source holding at least range / (sources holding ports there + 1) of them is refused \
         (drops.over_share); {src} was refused {} new flows so far for want of a port (no_port), {} over its share \
         (over_share) and {} at its pod's port limit (over_limit)",
        r.no_port, r.over_share, r.over_limit
    ));
    if let Some(n) = c.pod.as_ref().and_then(|p| p.port_limit) {
        c.notes.push(format!(
            "port limit (RFC 6888 REQ-4): the pod of {src} may hold at most {n} ports towards one remote endpoint \
             (address, port, protocol) on one node address (podPortLimit, or a lower {}); a new flow past it is \
             refused (drops.over_limit)",
            ebpf_masq_core::config::PORT_LIMIT_ANNOTATION
        ));
    }
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
    let slot = l.nat_fwd_policy(&t)?;
    let policy = if slot == 0 { None } else { crate::nat_list::policy_name(&l.egress_policies()?, slot) };
    c.flow = Some(FlowRef {
        nat_addr: fwd.addr.to_string(),
        nat_port: fwd.port,
        by_rule,
        idle_s: now.saturating_sub(fwd.last_seen_ns) as f64 / 1e9,
        packets: fwd.packets,
        policy: policy.clone(),
    });
    if rev.is_none() {
        c.notes.push("the flow's reply half is missing; the data plane re-inserts it on this packet".into());
    }
    let mut how = by_rule.map(|id| format!(", made by rule {id}")).unwrap_or_default();
    if let Some(p) = &policy {
        how.push_str(&format!(", with the address of egress policy \"{p}\""));
    }
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
        Decision::Unregistered(reason) => c.drop(Why::UnregisteredPod, reason),
        Decision::Masquerade(_, reason, _) => c.drop(
            Why::FragmentWithoutState,
            format!("dropped (drops.fragment_without_state): a later fragment with unknown ports; the policy says {reason}"),
        ),
    })
}
