//! `explain` with egressPolicies: which policy a packet meets and the address it leaves with.

use super::tests::{self as t, *};
use super::*;
use std::net::IpAddr;

use ebpf_masq_core::bpf::{
    abi::{self, PodInfo},
    nat::Tuple,
};
use ebpf_masq_core::config::{EgressAction, EgressPolicy, Glob, GlobKind};

use t::run;

const WEB: &str = "10.244.5.2"; // team-a/web-1
const BATCH: &str = "10.244.5.3"; // team-a/batch-1
const B1: &str = "10.244.6.2"; // team-b/api-1
const B2: &str = "10.244.6.3"; // team-b/api-2
const WEB6: &str = "fd00:244::5:2"; // team-a/web-1
const PARTNER: &str = "203.0.113.7";
const OPTOUT_DST: &str = "198.51.100.9";

fn policy(name: &str, ns: &[&str], pods: &[&str], dests: &[&str], action: EgressAction) -> EgressPolicy {
    EgressPolicy {
        name: name.into(),
        namespaces: ns.iter().map(|g| Glob::parse("t", g, GlobKind::Namespace).unwrap()).collect(),
        pods: pods.iter().map(|g| Glob::parse("t", g, GlobKind::Pod).unwrap()).collect(),
        destinations: dests.iter().map(|d| d.parse().unwrap()).collect(),
        action,
    }
}

fn masq(addrs: &[&str]) -> EgressAction {
    let (mut v4, mut v6) = (vec![], vec![]);
    for a in addrs {
        match ip(a) {
            IpAddr::V4(a) => v4.push(a),
            IpAddr::V6(a) => v6.push(a),
        }
    }
    EgressAction::Masquerade { v4, v6 }
}

/// node() with egressPolicies and pods they select (masks as select_policies gives them).
fn policy_node() -> Fake {
    let mut f = node();
    f.policies = vec![
        policy("partner", &["team-a"], &[], &["203.0.113.0/24"], masq(&["192.0.2.50"])),
        policy("pool", &["team-b"], &[], &[], masq(&["192.0.2.60", "192.0.2.61"])),
        policy("optout", &["team-a"], &["team-a/batch-*"], &["198.51.100.0/24"], EgressAction::NoNat),
        policy("v6only", &["team-a"], &[], &[], masq(&["2001:db8:50::1"])),
    ];
    let pods = [(WEB, 30, "team-a", "web-1"), (BATCH, 31, "team-a", "batch-1"), (B1, 32, "team-b", "api-1"), (B2, 33, "team-b", "api-2"), (WEB6, 30, "team-a", "web-1")];
    for (addr, ifindex, ns, name) in pods {
        let policies = ebpf_masq_core::config::select_policies(&f.policies, Some(ns), Some(name), None).unwrap();
        f.pods.push((ip(addr), PodInfo { ifindex, flags: abi::POD_F_NAT_OUTGOING, policies, ..Default::default() }));
        let desc = PodDesc {
            container_id: format!("c{ifindex}"),
            ifname: "eth0".into(),
            veth: "veth".into(),
            k8s_namespace: Some(ns.into()),
            k8s_name: Some(name.into()),
        };
        f.atts.push((ifindex, ip(addr), desc));
    }
    f
}

fn reason_of<'a>(x: &'a Explanation, policy: &str) -> &'a PolicyReason {
    x.policies.iter().find(|p| p.policy == policy).unwrap_or_else(|| panic!("no reason for {policy}: {x:#?}"))
}

#[test]
fn egress_policy_address() {
    let f = policy_node();
    let x = run(&f, &pkt(WEB, PARTNER, Proto::Tcp), ETH0);
    check(&x, Verdict::Masquerade, Why::EgressPolicy, "masqueraded to 192.0.2.50 by egress policy \"partner\"");
    assert_eq!(x.address.as_deref(), Some("192.0.2.50"));
    let p = x.policy.as_ref().unwrap();
    assert_eq!((p.name.as_str(), p.index, p.action, p.address.as_deref()), ("partner", 0, "masquerade", Some("192.0.2.50")));
    assert!(x.trace.iter().any(|t| t.contains("policy_dst4") && t.contains("egress policy \"partner\": its address 192.0.2.50")), "{x:#?}");
    // Every policy has its reason.
    assert_eq!(x.policies.len(), 4);
    assert!(reason_of(&x, "partner").matched);
    let r = reason_of(&x, "pool");
    assert_eq!(r.code, "not_selected");
    assert!(r.reason.contains("does not select this pod (pod team-a/web-1; its namespaces: team-b)"), "{r:?}");
    let r = reason_of(&x, "optout");
    assert!(r.code == "not_selected" && r.reason.contains("its pods: team-a/batch-*"), "{r:?}");
    // v6only selects web-1 and holds every destination, but partner comes first.
    let r = reason_of(&x, "v6only");
    assert_eq!(r.code, "earlier_policy", "{r:?}");
    assert!(r.reason.contains("\"partner\" comes first"), "{r:?}");
    // JSON carries the policy and the reasons.
    let v = serde_json::to_value(&x).unwrap();
    assert_eq!((v["code"].as_str(), v["policy"]["name"].as_str()), (Some("egress_policy"), Some("partner")));
    assert_eq!(v["policies"][1]["code"], "not_selected");
}

#[test]
fn egress_policy_pool_pairs_by_source() {
    let f = policy_node();
    // low 32 bits % 2: 10.244.6.2 is even, 10.244.6.3 odd (abi::MasqPool::pick_any).
    let x = run(&f, &pkt(B1, EXT, Proto::Udp), ETH0);
    check(&x, Verdict::Masquerade, Why::EgressPolicy, "masqueraded to 192.0.2.60 by egress policy \"pool\"");
    assert!(x.trace.iter().any(|t| t.contains("a pool of 2, source 10.244.6.2 is paired with 192.0.2.60")), "{x:#?}");
    check(&run(&f, &pkt(B2, EXT, Proto::Udp), ETH0), Verdict::Masquerade, Why::EgressPolicy, "to 192.0.2.61 by egress policy \"pool\"");
    // The same source always the same address, whatever the destination.
    check(&run(&f, &pkt(B1, PARTNER, Proto::Udp), ETH0), Verdict::Masquerade, Why::EgressPolicy, "to 192.0.2.60");
}

#[test]
fn egress_policy_nat_outgoing_false() {
    let f = policy_node();
    let x = run(&f, &pkt(BATCH, OPTOUT_DST, Proto::Tcp), ETH0);
    check(&x, Verdict::Untouched, Why::EgressPolicyNoNat, "not masqueraded: egress policy \"optout\" (natOutgoing: false)");
    assert_eq!(x.source_seen.as_deref(), Some(BATCH));
    let p = x.policy.as_ref().unwrap();
    assert_eq!((p.name.as_str(), p.action, p.address.as_deref()), ("optout", "no_nat", None));
    assert_eq!(reason_of(&x, "partner").code, "not_this_destination");
    assert!(reason_of(&x, "partner").reason.contains("selects the pod but not this destination (its destinations: 203.0.113.0/24)"));
    assert_eq!(serde_json::to_value(&x).unwrap()["code"], "egress_policy_no_nat");
    // The same pod to the partner network takes partner's address (first match wins per destination).
    check(&run(&f, &pkt(BATCH, PARTNER, Proto::Tcp), ETH0), Verdict::Masquerade, Why::EgressPolicy, "\"partner\"");
    // Untouched packets are never dropped: an echo reply the policy opts out leaves as it is.
    let p = Packet { icmp_type: Some(ICMP_ECHOREPLY), ..pkt(BATCH, OPTOUT_DST, Proto::Icmp) };
    check(&run(&f, &p, ETH0), Verdict::Untouched, Why::EgressPolicyNoNat, "optout");
}

#[test]
fn egress_policy_exclusions_win() {
    let f = policy_node();
    let x = run(&f, &pkt(WEB, "10.20.0.5", Proto::Tcp), ETH0);
    check(&x, Verdict::Untouched, Why::NonMasquerade, "nonMasqueradeCIDRs 10.20.0.0/24");
    assert!(x.policy.is_none() && x.policies.is_empty(), "{x:#?}");
    assert!(x.trace.iter().any(|t| t.contains("egress policies not consulted: exclusions win")), "{x:#?}");
    // natOutgoing false of the network, and a rule, win too.
    let mut f = policy_node();
    f.pods.iter_mut().filter(|(a, _)| *a == ip(WEB)).for_each(|(_, p)| p.flags = 0);
    check(&run(&f, &pkt(WEB, PARTNER, Proto::Tcp), ETH0), Verdict::Untouched, Why::NatOutgoingFalse, "natOutgoing is false");
    let mut f = policy_node();
    f.rules.push((24, ETH0, ip("10.244.5.0"), RuleHit { id: 7, to_address: Some(ip("10.0.0.77")) }));
    check(&run(&f, &pkt(WEB, PARTNER, Proto::Tcp), ETH0), Verdict::Masquerade, Why::Rule, "masqueraded to 10.0.0.77 by rule 7");
}

#[test]
fn egress_policy_not_selected() {
    // POD (c1/eth0) has no Kubernetes namespace: no policy selects it.
    let f = policy_node();
    let x = run(&f, &pkt(POD, PARTNER, Proto::Tcp), ETH0);
    check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5 (pod registration of c1/eth0)");
    assert!(x.policy.is_none());
    assert!(x.trace.iter().any(|t| t.contains("no egress policy selects this pod")), "{x:#?}");
    assert!(x.policies.iter().all(|r| r.code == "not_selected" && r.reason.contains("the pod has no Kubernetes namespace")), "{x:#?}");
}

#[test]
fn egress_policy_selects_the_pod_not_this_destination() {
    let mut f = policy_node();
    f.policies.truncate(3); // no v6only: web-1's policies are partner only
    for (_, p) in f.pods.iter_mut().filter(|(a, _)| *a == ip(WEB)) {
        p.policies = ebpf_masq_core::config::select_policies(&f.policies, Some("team-a"), Some("web-1"), None).unwrap();
    }
    let x = run(&f, &pkt(WEB, EXT, Proto::Tcp), ETH0);
    check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5 (pod registration of c30/eth0)");
    assert!(x.policy.is_none());
    assert!(x.trace.iter().any(|t| t.contains("policy_dst4 (mask 0x1 = policies \"partner\"") && t.contains("no entry")), "{x:#?}");
    let r = reason_of(&x, "partner");
    assert_eq!(r.code, "not_this_destination");
    assert!(r.reason.contains("selects the pod but not this destination"), "{r:?}");
}

#[test]
fn egress_policy_without_an_address_of_the_family_keeps_the_network_s() {
    // web-1 to EXT: partner does not hold it, v6only does but has no IPv4 address.
    let f = policy_node();
    let x = run(&f, &pkt(WEB, EXT, Proto::Tcp), ETH0);
    check(&x, Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5 (pod registration of c30/eth0); egress policy \"v6only\" has no IPv4 address");
    assert_eq!(x.policy.as_ref().map(|p| (p.name.as_str(), p.address.clone())), Some(("v6only", None)));
    // Over IPv6 it has one.
    let x = run(&f, &pkt(WEB6, EXT6, Proto::Tcp), ETH0);
    check(&x, Verdict::Masquerade, Why::EgressPolicy, "masqueraded to 2001:db8:50::1 by egress policy \"v6only\"");
    assert!(x.trace.iter().any(|t| t.contains("policy_dst6")), "{x:#?}");
}

#[test]
fn no_egress_policies_leaves_the_explanation_as_before() {
    let f = node();
    for p in [pkt(POD, EXT, Proto::Tcp), pkt(POD6, EXT6, Proto::Udp), pkt(POD, "10.20.0.5", Proto::Tcp), pkt(POD2, EXT, Proto::Tcp)] {
        let x = run(&f, &p, ETH0);
        assert!(x.policy.is_none() && x.policies.is_empty(), "{x:#?}");
        assert!(x.trace.iter().all(|t| !t.contains("egress")), "{x:#?}");
        let v = serde_json::to_value(&x).unwrap();
        assert!(v.get("policy").is_none() && v.get("policies").is_none(), "{v}");
    }
    check(&run(&f, &pkt(POD, EXT, Proto::Tcp), ETH0), Verdict::Masquerade, Why::Pod, "masqueraded to 10.0.0.5 (pod registration of c1/eth0)");
}

#[test]
fn existing_flow_names_its_egress_policy() {
    let mut f = policy_node();
    let t = Tuple { saddr: ip(WEB), daddr: ip(PARTNER), sport: 40000, dport: 5001, proto: IPPROTO_UDP };
    f.fwd.push((t, entry("192.0.2.50", 40000, 99)));
    f.fwd_policy.push((t, 1));
    let p = Packet { sport: Some(40000), dport: Some(5001), ..pkt(WEB, PARTNER, Proto::Udp) };
    let x = run(&f, &p, ETH0);
    check(&x, Verdict::Masquerade, Why::ExistingFlow, "existing flow to 192.0.2.50:40000, with the address of egress policy \"partner\"");
    assert_eq!(x.flow.as_ref().and_then(|fl| fl.policy.as_deref()), Some("partner"));
    // Without a policy byte the flow reads as before.
    f.fwd_policy.clear();
    let x = run(&f, &p, ETH0);
    check(&x, Verdict::Masquerade, Why::ExistingFlow, "existing flow to 192.0.2.50:40000");
    assert!(!x.reason.contains("egress") && serde_json::to_value(&x).unwrap()["flow"].get("policy").is_none(), "{x:#?}");
}
