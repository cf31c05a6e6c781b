use super::decide::NSEC_PER_SEC;
use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ebpf_masq_core::bpf::{
    abi::{self, ExclInfo, NodeConfig, PodInfo, UplinkInfo},
    nat::{self as natmaps, Entry, Tuple},
};

pub(super) use super::fake_tests::Fake;

pub(super) const ETH0: u32 = 2;
pub(super) const ETH1: u32 = 3;
pub(super) const TUN0: u32 = 9;
pub(super) const POD: &str = "10.244.1.2";
pub(super) const POD2: &str = "10.244.2.2";
pub(super) const POD6: &str = "fd00:244::2";
pub(super) const EXT: &str = "10.0.0.2";
pub(super) const EXT6: &str = "2001:db8::1";

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(super) fn node() -> Fake {
    let up = |a: &str, a6: &str| UplinkInfo {
        masq_v4: a.parse::<Ipv4Addr>().unwrap().octets(),
        flags: abi::UPLINK_F_HAS_V4 | abi::UPLINK_F_HAS_V6,
        masq_v6: a6.parse::<Ipv6Addr>().unwrap().octets(),
    };
    let excl = |reason| ExclInfo { reason, index: 0 };
    let rule = |id, to: Option<&str>| RuleHit { id, to_address: to.map(ip) };
    let nat_out = PodInfo { ifindex: 20, flags: abi::POD_F_NAT_OUTGOING, ..Default::default() };
    let desc = |c: &str, i: &str| PodDesc {
        container_id: c.into(),
        ifname: i.into(),
        veth: "veth".into(),
        k8s_namespace: None,
        k8s_name: None,
    };
    Fake {
        uplinks: vec![(ETH0, up("10.0.0.5", "fd00::5")), (ETH1, up("10.10.0.5", "fd00:10::5"))],
        config: Some(NodeConfig { port_min: 1024, port_max: 29999, ..Default::default() }),
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

pub(super) fn out(ifindex: u32) -> OutIf {
    let name = match ifindex {
        ETH0 => "eth0",
        ETH1 => "eth1",
        _ => "tun0",
    };
    OutIf { ifindex, name: Some(name.into()), chosen_by: "--out".into() }
}

pub(super) fn pkt(src: &str, dst: &str, proto: Proto) -> Packet {
    Packet::new(ip(src), ip(dst), proto)
}

pub(super) fn run(f: &Fake, p: &Packet, ifindex: u32) -> Explanation {
    explain(f, p, &out(ifindex)).unwrap()
}

#[track_caller]
pub(super) fn check(x: &Explanation, verdict: Verdict, code: Why, reason: &str) {
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
    // Its refusals so far, and the fair-share rule that may refuse it.
    f.refused.push((ip(POD), abi::Refusals { no_port: 2, over_share: 7, over_limit: 4 }));
    let shares = run(&f, &p, ETH0).notes.into_iter().find(|n| n.contains("fair shares")).expect("a fair-share note");
    assert!(
        shares.contains(&format!(
            "{POD} was refused 2 new flows so far for want of a port (no_port), 7 over its share (over_share) \
             and 4 at its pod's port limit (over_limit)"
        )),
        "{shares}"
    );
    f.refused.clear();
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
fn a_pods_port_limit_is_named_with_its_refusals() {
    let mut f = node();
    let mut p = pkt(POD, EXT, Proto::Tcp);
    (p.sport, p.dport) = (Some(20000), Some(443));
    let limit_note = |f: &Fake| run(f, &p, ETH0).notes.into_iter().find(|n| n.starts_with("port limit"));
    // No limit: no note, and the pod says so.
    assert_eq!(limit_note(&f), None);
    assert_eq!(run(&f, &p, ETH0).pod.unwrap().port_limit, None);
    // Bits 16-31 of its pods4 entry: the limit, whatever the flags beside it.
    let limited = abi::POD_F_NAT_OUTGOING | abi::NAT_FILTER_EI | ebpf_masq_core::pod::port_limit_flags(64);
    f.pods.iter_mut().filter(|(a, _)| *a == ip(POD)).for_each(|(_, i)| i.flags = limited);
    let x = run(&f, &p, ETH0);
    check(&x, Verdict::Masquerade, Why::Pod, "pod registration of c1/eth0");
    assert_eq!(x.pod.as_ref().unwrap().port_limit, Some(64));
    let n = limit_note(&f).expect("a port-limit note");
    assert!(
        n.contains(&format!("the pod of {POD} may hold at most 64 ports towards one remote endpoint"))
            && n.contains("ebpf-masq.io/port-limit")
            && n.contains("drops.over_limit"),
        "{n}"
    );
    // A source masqueraded by a rule is no pod's: no limit named.
    assert_eq!(run(&f, &pkt("192.168.6.10", EXT, Proto::Tcp), ETH0).notes.iter().find(|n| n.starts_with("port limit")), None);
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

pub(super) fn udp_flow(sport: u16, dport: u16) -> Packet {
    Packet { sport: Some(sport), dport: Some(dport), ..pkt(POD, EXT, Proto::Udp) }
}

pub(super) fn tuple(sport: u16, dport: u16, proto: u8) -> Tuple {
    Tuple { saddr: ip(POD), daddr: ip(EXT), sport, dport, proto }
}

pub(super) fn entry(addr: &str, port: u16, last_seen_s: u64) -> Entry {
    Entry {
        addr: ip(addr),
        port,
        flags: 0,
        policy: 0,
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
    // An excepted pod source falls through to its pod registration, as in decide.h.
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
fn an_unregistered_source_in_the_pod_ranges_is_dropped_where_a_pod_would_be_masqueraded() {
    let mut f = node();
    f.pod_nets = vec![(ip("10.244.1.0"), 24)];
    let x = run(&f, &pkt("10.244.1.77", EXT, Proto::Udp), ETH0);
    check(&x, Verdict::Drop, Why::UnregisteredPod, "dropped (drops.unregistered_pod): 10.244.1.77 is in the node's pod range 10.244.1.0/24");
    assert!(x.trace.iter().any(|s| s.contains("10.244.1.77 is not a registered pod address")), "{x:#?}");
    // To a destination no pod's packet would be masqueraded to: untouched, as before.
    check(&run(&f, &pkt("10.244.1.77", "10.10.0.2", Proto::Udp), ETH0), Verdict::Untouched, Why::NotPod, "no rule matches");
    // Outside the ranges, and a registered pod inside them: as before.
    check(&run(&f, &pkt("10.244.2.77", EXT, Proto::Udp), ETH0), Verdict::Untouched, Why::NotPod, "no rule matches");
    check(&run(&f, &pkt(POD, EXT, Proto::Udp), ETH0), Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5");
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
    for dccp_udplite in [33, 136] {
        let x = run(&f, &pkt(POD, EXT, Proto::Other(dccp_udplite)), ETH0);
        check(&x, Verdict::Drop, Why::UnsupportedProtocol, "drops.unsupported_protocol");
    }
    check(&run(&f, &Packet { icmp_type: Some(13), ..pkt(POD, EXT, Proto::Icmp) }, ETH0), Verdict::Drop, Why::UnsupportedProtocol, "ICMP type 13");
    // An ICMP error quoting nothing of ours is a packet to masquerade that cannot be.
    let x = run(&f, &Packet { icmp_type: Some(3), ..pkt(POD, EXT, Proto::Icmp) }, ETH0);
    check(&x, Verdict::Drop, Why::UnsupportedProtocol, "ICMP type 3");
    assert!(x.notes.iter().any(|n| n.contains("quoting")), "{x:#?}");
    // Untouched packets are never dropped, whatever their protocol.
    check(&run(&f, &pkt(POD2, EXT, Proto::Other(47)), ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "natOutgoing");
    let mut f = node();
    f.config = Some(NodeConfig::default());
    check(&run(&f, &pkt(POD, EXT, Proto::Udp), ETH0), Verdict::Drop, Why::NoPortRange, "drops.no_port");
}

#[test]
fn protocols_without_ports_are_masqueraded_by_address() {
    // GRE, ESP...: one pair per {source, remote, protocol}, keyed with ports 0.
    let mut f = node();
    let x = run(&f, &pkt(POD, EXT, Proto::Other(47)), ETH0);
    check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5");
    assert_eq!((x.address.as_deref(), x.port), (Some("10.0.0.5"), None), "{x:#?}");
    assert!(x.notes.iter().any(|n| n.contains("a new NAT pair is made, 10.0.0.5 towards 10.0.0.2 for protocol 47")), "{x:#?}");
    // Its pair, when it has one, is used as it is.
    f.fwd.push((tuple(0, 0, 50), entry("10.0.0.5", 0, 100)));
    check(&run(&f, &pkt(POD, EXT, Proto::Other(50)), ETH0), Verdict::Masquerade, Why::ExistingFlow, "10.0.0.5");
    // Another source holds the remote for the protocol: refused while that pair lives.
    let held = Tuple { saddr: ip(EXT), daddr: ip("10.0.0.5"), sport: 0, dport: 0, proto: 47 };
    f.rev.push((held, entry(POD2, 0, 100)));
    let x = run(&f, &pkt(POD, EXT, Proto::Other(47)), ETH0);
    assert!(x.notes.iter().any(|n| n.contains("10.244.2.2 holds the pair towards 10.0.0.2 (protocol 47) on 10.0.0.5: this packet is refused (drops.no_port)")), "{x:#?}");
    // SCTP keeps its ports: its pair is {remote port, pod port}'s.
    let sctp = Packet { sport: Some(38412), dport: Some(38412), ..pkt(POD, EXT, Proto::Other(132)) };
    let x = run(&f, &sctp, ETH0);
    check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5");
    assert!(x.trace.iter().any(|s| s.contains("its ports kept (38412 -> 38412)")), "{x:#?}");
    let held = Tuple { saddr: ip(EXT), daddr: ip("10.0.0.5"), sport: 38412, dport: 38412, proto: 132 };
    f.rev.push((held, entry(POD2, 38412, 100)));
    assert!(run(&f, &sctp, ETH0).notes.iter().any(|n| n.contains("10.244.2.2 holds the pair")));
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
