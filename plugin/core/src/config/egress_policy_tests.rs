//! egressPolicies: the glob matcher, the parser's errors, the selection of a
//! pod's policies (and the annotation's narrowing), first_match against a
//! longest-prefix lookup over policy_dst_entries, and the round trip.

use super::*;
use crate::error::code;
use serde_json::json;

fn conf(policies: Value) -> Result<NetConf> {
    let v = json!({"cniVersion": "1.0.0", "name": "podnet", "type": "ebpf-masq", "egressPolicies": policies});
    parse_netconf(&serde_json::to_vec(&v).expect("serialize"))
}

fn policies(v: Value) -> Vec<EgressPolicy> {
    match conf(v.clone()) {
        Ok(c) => c.masq.egress_policies,
        Err(e) => panic!("expected {v} to parse: {e}"),
    }
}

fn ns(s: &str) -> Glob {
    Glob::parse("t", s, GlobKind::Namespace).expect("test glob")
}

fn pod(s: &str) -> Glob {
    Glob::parse("t", s, GlobKind::Pod).expect("test glob")
}

fn cidr(s: &str) -> IpNetwork {
    s.parse().expect("test CIDR")
}

fn nonat(name: &str, namespaces: &[&str], destinations: &[&str]) -> EgressPolicy {
    EgressPolicy {
        name: name.into(),
        namespaces: namespaces.iter().map(|s| ns(s)).collect(),
        pods: Vec::new(),
        destinations: destinations.iter().map(|s| cidr(s)).collect(),
        action: EgressAction::NoNat,
    }
}

#[test]
fn glob_matches_table() {
    let cases: &[(&str, &str, bool)] = &[
        ("team-a", "team-a", true),
        ("team-a", "team-ab", false),
        ("team-a", "xteam-a", false),
        ("team-a", "team-", false),
        ("*", "anything", true),
        ("*", "", true),
        ("team-*", "team-", true), // empty run
        ("team-*", "team-b", true),
        ("team-*", "team", false),
        ("*-prod", "shop-prod", true),
        ("*-prod", "shop-prod-2", false),
        ("a*b*c", "abc", true),
        ("a*b*c", "axxbyyc", true),
        ("a*b*c", "axxbyy", false),
        ("a*b*c", "acb", false),
        ("a*a", "aaaa", true),
        ("a*a", "a", false),
        ("**", "x", true),
        ("team-*-*", "team-a-b-c", true),
        ("?", "a", true),
        ("?", "", false),
        ("?", "ab", false),
        ("t?am", "team", true),
        ("t?am", "tam", false),
        ("*?", "", false),
        ("*?", "z", true),
        ("ab*", "ab", true), // trailing star
        ("ab*", "abcdef", true),
        ("ab*", "a", false),
        ("ns-1", "ns-2", false),
        ("*", "a/b", false), // a wildcard never matches "/"
    ];
    for &(g, text, want) in cases {
        assert_eq!(ns(g).matches(text), want, "namespace glob {g:?} against {text:?}");
    }
    let pods: &[(&str, &str, bool)] = &[
        ("team-a/web-*", "team-a/web-1", true),
        ("team-a/web-*", "team-a/web-", true),
        ("team-a/web-*", "team-b/web-1", false),
        ("*/web-?", "any/web-1", true),
        ("*/web-?", "any/web-12", false),
        ("*/*", "a/b", true),
        ("*/*", "a/b/c", false),
        ("*/*", "ab", false),
        ("team-*/db.*", "team-x/db.primary", true),
        ("team-a/*", "team-a/", true),
        ("team*/x", "team-a/b/x", false), // "*" does not reach past the "/"
    ];
    for &(g, text, want) in pods {
        assert_eq!(pod(g).matches(text), want, "pod glob {g:?} against {text:?}");
    }
    assert_eq!(ns("team-*").as_str(), "team-*");
}

#[test]
fn glob_parse_errors() {
    let long_ns = "a".repeat(64);
    let long_name = format!("a/{}", "b".repeat(254));
    let bad: &[(&str, GlobKind)] = &[
        ("", GlobKind::Namespace),
        ("Team", GlobKind::Namespace),
        ("team_a", GlobKind::Namespace),
        ("team.a", GlobKind::Namespace),
        ("team/a", GlobKind::Namespace),
        ("[ab]", GlobKind::Namespace),
        (&long_ns, GlobKind::Namespace),
        ("team-a", GlobKind::Pod),
        ("a/b/c", GlobKind::Pod),
        ("/b", GlobKind::Pod),
        ("a/", GlobKind::Pod),
        ("a.b/c", GlobKind::Pod),
        ("a/B", GlobKind::Pod),
        (&long_name, GlobKind::Pod),
    ];
    for (s, kind) in bad {
        let e = Glob::parse("egressPolicies[3].namespaces[1]", s, *kind).expect_err(s);
        assert_eq!(e.code, code::INVALID_CONFIG, "{s}: {}", e.msg);
        assert!(e.msg.contains("\"egressPolicies[3].namespaces[1]\""), "{s}: {}", e.msg);
    }
    assert!(Glob::parse("k", &"a".repeat(63), GlobKind::Namespace).is_ok());
    assert!(Glob::parse("k", &format!("a/{}", "b".repeat(253)), GlobKind::Pod).is_ok());
    assert!(Glob::parse("k", "ns-?/web.v1-*", GlobKind::Pod).is_ok());
}

/// Every bad policy list: code 7, the message names the exact key path (and says `want`).
#[test]
fn policy_errors() {
    let ok = json!({"name": "p", "namespaces": ["a"], "natOutgoing": false});
    let with = |extra: Value| {
        let mut o = ok.clone();
        for (k, v) in extra.as_object().expect("object") {
            if v == "<remove>" {
                o.as_object_mut().unwrap().remove(k);
            } else {
                o[k] = v.clone();
            }
        }
        json!([{"name": "first", "namespaces": ["*"], "masqueradeAddress": "192.0.2.1"}, o])
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({}), "egressPolicies", "expected a list"),
        (json!("p"), "egressPolicies", "expected a list"),
        (json!([1]), "egressPolicies[0]", "expected an object"),
        (json!([ok, []]), "egressPolicies[1]", "expected an object"),
        (with(json!({"namespace": ["a"]})), "egressPolicies[1].namespace", "did you mean \"namespaces\""),
        (with(json!({"destination": ["10.0.0.0/8"]})), "egressPolicies[1].destination", "did you mean \"destinations\""),
        (with(json!({"bogus": 1})), "egressPolicies[1].bogus", "unknown key"),
        (with(json!({"name": "first"})), "egressPolicies[1].name", "already the name of egressPolicies[0]"),
        (with(json!({"name": "<remove>"})), "egressPolicies[1].name", "required"),
        (with(json!({"name": 5})), "egressPolicies[1].name", "expected a string"),
        (with(json!({"name": "Partner"})), "egressPolicies[1].name", "DNS label"),
        (with(json!({"name": "-p"})), "egressPolicies[1].name", "DNS label"),
        (with(json!({"name": "p-"})), "egressPolicies[1].name", "DNS label"),
        (with(json!({"name": ""})), "egressPolicies[1].name", "DNS label"),
        (with(json!({"name": "a".repeat(64)})), "egressPolicies[1].name", "DNS label"),
        (with(json!({"name": "p.q"})), "egressPolicies[1].name", "DNS label"),
        (with(json!({"namespaces": "<remove>"})), "egressPolicies[1].namespaces", "required"),
        (with(json!({"namespaces": []})), "egressPolicies[1].namespaces", "must not be empty"),
        (with(json!({"namespaces": "a"})), "egressPolicies[1].namespaces", "expected a list"),
        (with(json!({"namespaces": ["a", "B*"]})), "egressPolicies[1].namespaces[1]", "not a namespace glob"),
        (with(json!({"namespaces": ["a", 7]})), "egressPolicies[1].namespaces[1]", "expected a string"),
        (with(json!({"namespaces": ["a/b"]})), "egressPolicies[1].namespaces[0]", "not a namespace glob"),
        (with(json!({"pods": ["a"]})), "egressPolicies[1].pods[0]", "exactly one \"/\""),
        (with(json!({"pods": ["a/b", "a/b/c"]})), "egressPolicies[1].pods[1]", "exactly one \"/\""),
        (with(json!({"pods": ["a/B"]})), "egressPolicies[1].pods[0]", "not a pod glob"),
        (with(json!({"pods": []})), "egressPolicies[1].pods", "must not be empty"),
        (with(json!({"destinations": ["10.0.0.1/8"]})), "egressPolicies[1].destinations[0]", "host bits"),
        (with(json!({"destinations": ["10.0.0.0/8", "nope"]})), "egressPolicies[1].destinations[1]", "not a CIDR"),
        (with(json!({"destinations": ["fd00::1/8"]})), "egressPolicies[1].destinations[0]", "host bits"),
        (with(json!({"destinations": []})), "egressPolicies[1].destinations", "must not be empty"),
        (with(json!({"destinations": "10.0.0.0/8"})), "egressPolicies[1].destinations", "expected a list"),
        (
            with(json!({"destinations": (0..65).map(|i| format!("10.{i}.0.0/16")).collect::<Vec<_>>()})),
            "egressPolicies[1].destinations",
            "at most 64",
        ),
        (
            with(json!({"natOutgoing": "<remove>", "masqueradeAddress": ["192.0.2.1", "bogus"]})),
            "egressPolicies[1].masqueradeAddress[1]",
            "not an IP address",
        ),
        (
            with(json!({"natOutgoing": "<remove>", "masqueradeAddress": ["192.0.2.0/31", "192.0.2.1"]})),
            "egressPolicies[1].masqueradeAddress[1]",
            "listed twice",
        ),
        (
            with(json!({"natOutgoing": "<remove>", "masqueradeAddress": "224.0.0.1"})),
            "egressPolicies[1].masqueradeAddress",
            "multicast",
        ),
        (
            with(json!({"natOutgoing": "<remove>", "masqueradeAddress": []})),
            "egressPolicies[1].masqueradeAddress",
            "must not be empty",
        ),
        (with(json!({"masqueradeAddress": "192.0.2.9"})), "egressPolicies[1]", "exactly one action"),
        (with(json!({"natOutgoing": "<remove>"})), "egressPolicies[1]", "no action"),
        (with(json!({"natOutgoing": true})), "egressPolicies[1].natOutgoing", "not an action"),
        (with(json!({"natOutgoing": "false"})), "egressPolicies[1].natOutgoing", "expected a boolean"),
        (
            json!((0..33).map(|i| json!({"name": format!("p{i}"), "namespaces": ["*"], "natOutgoing": false})).collect::<Vec<_>>()),
            "egressPolicies",
            "at most 32",
        ),
    ];
    for (v, path, want) in cases {
        let e = conf(v.clone()).expect_err(&v.to_string());
        assert_eq!(e.code, code::INVALID_CONFIG, "{v}: {}", e.msg);
        assert!(e.msg.contains(&format!("invalid config key \"{path}\":")), "{v}: {:?} does not name {path}", e.msg);
        assert!(e.msg.contains(want), "{v}: {:?} lacks {want:?}", e.msg);
    }
    // At the limits: 32 policies, 64 destinations.
    let max = json!((0..32).map(|i| json!({"name": format!("p{i}"), "namespaces": ["*"], "natOutgoing": false})).collect::<Vec<_>>());
    assert_eq!(policies(max).len(), EGRESS_POLICIES_MAX);
    let dests = (0..64).map(|i| format!("10.{i}.0.0/16")).collect::<Vec<_>>();
    assert_eq!(policies(with(json!({"destinations": dests})))[1].destinations.len(), 64);
    // A duplicated key inside a policy is caught like anywhere in our keys.
    let raw = br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","egressPolicies":[{"name":"a","name":"b","namespaces":["x"],"natOutgoing":false}]}"#;
    let e = parse_netconf(raw).expect_err("duplicate key");
    assert_eq!(e.code, code::INVALID_CONFIG);
    assert!(e.msg.contains("egressPolicies[0].name"), "{}", e.msg);
}

#[test]
fn parses_policies() {
    let got = policies(json!([
        {"name": "partner", "namespaces": ["team-a", "team-*"], "pods": ["team-a/web-*"],
         "destinations": ["203.0.113.0/24", "2001:db8:99::/48"],
         "masqueradeAddress": ["192.0.2.10", "192.0.2.12/31", "2001:db8::10"]},
        {"name": "opt-out", "namespaces": ["batch"], "natOutgoing": false},
    ]));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].name, "partner");
    assert_eq!(got[0].namespaces, vec![ns("team-a"), ns("team-*")]);
    assert_eq!(got[0].pods, vec![pod("team-a/web-*")]);
    assert_eq!(got[0].destinations, vec![cidr("203.0.113.0/24"), cidr("2001:db8:99::/48")]);
    assert_eq!(
        got[0].action,
        EgressAction::Masquerade {
            v4: vec![Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 12), Ipv4Addr::new(192, 0, 2, 13)],
            v6: vec!["2001:db8::10".parse().unwrap()],
        }
    );
    assert_eq!(got[1], nonat("opt-out", &["batch"], &[]));
    assert!(policies(json!([])).is_empty());
    assert!(MasqOptions::default().egress_policies.is_empty());
}

#[test]
fn selects_by_namespace_and_pod_globs() {
    let p = nonat("p", &["team-a", "shop-*"], &[]);
    assert!(p.selects(Some("team-a"), Some("web-1")));
    assert!(p.selects(Some("team-a"), None));
    assert!(p.selects(Some("shop-eu"), Some("x")));
    assert!(!p.selects(Some("team-b"), Some("web-1")));
    assert!(!p.selects(None, Some("web-1")), "a pod without a namespace is never selected");
    assert!(!p.selects(Some(""), Some("web-1")), "an empty namespace is none");
    let all = nonat("all", &["*"], &[]);
    assert!(all.selects(Some("anything"), None));
    assert!(!all.selects(None, None), "not even by \"*\"");
    assert!(!all.selects(Some(""), None));

    let mut web = nonat("web", &["team-*"], &[]);
    web.pods = vec![pod("team-a/web-*"), pod("*/db-?")];
    assert!(web.selects(Some("team-a"), Some("web-1")));
    assert!(web.selects(Some("team-z"), Some("db-1")));
    assert!(!web.selects(Some("team-z"), Some("web-1")), "pods narrow within the namespaces");
    assert!(!web.selects(Some("other"), Some("db-1")), "pods never widen the namespaces");
    assert!(!web.selects(Some("team-a"), None), "pods need a name");
    assert!(!web.selects(Some("team-a"), Some("")));
    assert!(!web.selects(None, Some("web-1")));
}

#[test]
fn select_policies_mask_and_annotation() {
    let mut ps = vec![
        nonat("team-a", &["team-a"], &[]),
        nonat("teams", &["team-*"], &["10.0.0.0/8"]),
        nonat("other", &["other"], &[]),
        nonat("web", &["team-a"], &[]),
    ];
    ps[3].pods = vec![pod("team-a/web-*")];
    let sel = |ns: Option<&str>, name: Option<&str>, ann: Option<&str>| select_policies(&ps, ns, name, ann);
    assert_eq!(sel(Some("team-a"), Some("web-1"), None).unwrap(), 0b1011);
    assert_eq!(sel(Some("team-a"), Some("db-1"), None).unwrap(), 0b0011);
    assert_eq!(sel(Some("team-b"), Some("web-1"), None).unwrap(), 0b0010);
    assert_eq!(sel(Some("nobody"), Some("x"), None).unwrap(), 0);
    assert_eq!(sel(None, Some("web-1"), None).unwrap(), 0);
    assert_eq!(select_policies(&[], Some("team-a"), None, None).unwrap(), 0);

    // The annotation narrows to its policy's bit.
    assert_eq!(sel(Some("team-a"), Some("web-1"), Some("teams")).unwrap(), 0b0010);
    assert_eq!(sel(Some("team-a"), Some("web-1"), Some("web")).unwrap(), 0b1000);
    assert_eq!(sel(Some("team-b"), Some("x"), Some("teams")).unwrap(), 0b0010);

    // ... never widens it.
    let refused = |ns: Option<&str>, name: Option<&str>, ann: &str, want: &[&str]| {
        let e = sel(ns, name, Some(ann)).expect_err(ann);
        assert_eq!(e.code, code::INVALID_CONFIG, "{}", e.msg);
        for w in [&format!("annotation \"{EGRESS_POLICY_ANNOTATION}\""), &format!("policy \"{ann}\"")] {
            assert!(e.msg.contains(w.as_str()), "{:?} lacks {w:?}", e.msg);
        }
        for w in want {
            assert!(e.msg.contains(w), "{:?} lacks {w:?}", e.msg);
        }
    };
    refused(
        Some("team-b"),
        Some("web-1"),
        "team-a",
        &["annotation \"ebpf-masq.io/egress-policy\": policy \"team-a\" does not select pod team-b/web-1 (its namespaces: team-a)"],
    );
    refused(Some("team-a"), Some("db-1"), "web", &["pod team-a/db-1", "its namespaces: team-a; its pods: team-a/web-*"]);
    refused(Some("team-a"), None, "web", &["no K8S_POD_NAME"]);
    refused(None, Some("web-1"), "team-a", &["without a Kubernetes namespace"]);
    refused(Some("team-a"), Some("web-1"), "partner", &["is not in egressPolicies", "team-a, teams, other, web"]);
    refused(Some("team-a"), Some("web-1"), "", &["is not in egressPolicies"]);
    let e = select_policies(&[], Some("a"), None, Some("x")).expect_err("no policies");
    assert!(e.msg.contains("there are none"), "{}", e.msg);
}

/// A small deterministic generator (xorshift64*), so the property check needs no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The longest prefix among `entries` that contains `dst`, as the data plane's LPM trie answers.
fn lpm(entries: &[(IpNetwork, usize)], dst: IpAddr) -> Option<usize> {
    entries
        .iter()
        .filter(|(n, _)| n.contains(dst))
        .max_by_key(|(n, _)| n.prefix())
        .map(|(_, i)| *i)
}

/// Addresses from a small space (10.0.0.0/14, 2001:db8::/46 under a few patterns),
/// so that random CIDRs overlap and random destinations fall in them.
fn random_addr(r: &mut Rng, v6: bool) -> IpAddr {
    if v6 {
        let low = (u128::from(r.next()) << 64 | u128::from(r.next())) & ((1 << 82) - 1);
        IpAddr::V6(Ipv6Addr::from((0x2001_0db8_0000u128 << 80) | low))
    } else {
        let low = r.next() as u32 & ((1 << 18) - 1);
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | low))
    }
}

fn random_net(r: &mut Rng) -> IpNetwork {
    let v6 = r.below(3) == 0;
    let addr = random_addr(r, v6);
    let prefix = if v6 { 46 + r.below(83) as u8 } else { 14 + r.below(19) as u8 };
    let n = IpNetwork::new(addr, prefix).expect("prefix in range");
    IpNetwork::new(n.network(), prefix).expect("prefix in range")
}

fn check_lpm_equals_first_match(ps: &[EgressPolicy], mask: u32, dsts: &[IpAddr]) {
    let entries = policy_dst_entries(ps, mask);
    let mut seen = Vec::new();
    for (n, i) in &entries {
        assert!(!seen.contains(n), "{n} twice in {entries:?}");
        seen.push(*n);
        assert!(mask & (1 << i) != 0, "entry {n} labelled with policy {i} outside mask {mask:#b}");
    }
    for &dst in dsts {
        assert_eq!(lpm(&entries, dst), first_match(ps, mask, dst), "dst {dst}, mask {mask:#b}, policies {ps:?}, entries {entries:?}");
    }
}

#[test]
fn egress_entries_lpm_gives_first_match() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..400 {
        let n = 1 + r.below(8) as usize;
        let ps: Vec<EgressPolicy> = (0..n)
            .map(|i| {
                let k = if r.below(5) == 0 { 0 } else { 1 + r.below(5) as usize }; // some without destinations
                EgressPolicy {
                    destinations: (0..k).map(|_| random_net(&mut r)).collect(),
                    ..nonat(&format!("p{i}"), &["*"], &[])
                }
            })
            .collect();
        let mut dsts: Vec<IpAddr> = (0..64).map(|_| { let v6 = r.below(2) == 0; random_addr(&mut r, v6) }).collect();
        // Addresses outside every generated CIDR, and each CIDR's first address.
        dsts.extend(["192.0.2.1", "2001:db9::1", "0.0.0.0", "::"].map(|s| s.parse::<IpAddr>().unwrap()));
        dsts.extend(ps.iter().flat_map(|p| p.destinations.iter().map(|c| c.network())));
        for _ in 0..8 {
            let mask = if round % 4 == 0 { u32::MAX } else { r.next() as u32 & ((1 << n) - 1) };
            check_lpm_equals_first_match(&ps, mask, &dsts);
        }
        check_lpm_equals_first_match(&ps, 0, &dsts);
    }
}

#[test]
fn egress_entries_overlapping_cidrs_both_orders() {
    let in16: IpAddr = "10.1.2.3".parse().unwrap();
    let in8: IpAddr = "10.9.9.9".parse().unwrap();
    let out: IpAddr = "192.0.2.1".parse().unwrap();
    let v6: IpAddr = "2001:db8::1".parse().unwrap();

    // A /8 before a /16: the /8's policy holds all of the /16, so it wins everywhere in it.
    let ps = vec![nonat("wide", &["*"], &["10.0.0.0/8"]), nonat("narrow", &["*"], &["10.1.0.0/16"])];
    assert_eq!(policy_dst_entries(&ps, 0b11), vec![(cidr("10.0.0.0/8"), 0), (cidr("10.1.0.0/16"), 0)]);
    assert_eq!(first_match(&ps, 0b11, in16), Some(0));
    assert_eq!(first_match(&ps, 0b10, in16), Some(1));
    assert_eq!(policy_dst_entries(&ps, 0b10), vec![(cidr("10.1.0.0/16"), 1)]);
    check_lpm_equals_first_match(&ps, 0b11, &[in16, in8, out, v6]);

    // A /16 before a /8: the /16 wins inside it, the /8 elsewhere.
    let ps = vec![nonat("narrow", &["*"], &["10.1.0.0/16"]), nonat("wide", &["*"], &["10.0.0.0/8"])];
    assert_eq!(policy_dst_entries(&ps, 0b11), vec![(cidr("10.1.0.0/16"), 0), (cidr("10.0.0.0/8"), 1)]);
    assert_eq!(first_match(&ps, 0b11, in16), Some(0));
    assert_eq!(first_match(&ps, 0b11, in8), Some(1));
    assert_eq!(first_match(&ps, 0b11, out), None);
    check_lpm_equals_first_match(&ps, 0b11, &[in16, in8, out, v6]);

    // A policy without destinations holds both families; one after it only narrower entries it already labels.
    let ps = vec![nonat("v6-only", &["*"], &["2001:db8::/32"]), nonat("all", &["*"], &[]), nonat("late", &["*"], &["10.0.0.0/8"])];
    let e = policy_dst_entries(&ps, 0b111);
    assert_eq!(e, vec![(cidr("2001:db8::/32"), 0), (cidr("0.0.0.0/0"), 1), (cidr("::/0"), 1), (cidr("10.0.0.0/8"), 1)]);
    assert_eq!(first_match(&ps, 0b111, v6), Some(0));
    assert_eq!(first_match(&ps, 0b111, "2001:db9::1".parse().unwrap()), Some(1));
    assert_eq!(first_match(&ps, 0b111, in8), Some(1));
    assert_eq!(first_match(&ps, 0b100, in8), Some(2));
    check_lpm_equals_first_match(&ps, 0b111, &[in16, in8, out, v6, "2001:db9::1".parse().unwrap()]);

    // The same CIDR in two policies: one entry, the first's.
    let ps = vec![nonat("a", &["*"], &["10.0.0.0/8"]), nonat("b", &["*"], &["10.0.0.0/8", "fd00::/8"])];
    assert_eq!(policy_dst_entries(&ps, 0b11), vec![(cidr("10.0.0.0/8"), 0), (cidr("fd00::/8"), 1)]);
    assert_eq!(policy_dst_entries(&ps, 0), vec![]);
    assert_eq!(first_match(&ps, 0, in8), None);
}

#[test]
fn masq_to_json_round_trip_with_policies() {
    let mut web = nonat("web", &["team-a", "team-?"], &["203.0.113.0/24", "2001:db8:1::/48"]);
    web.pods = vec![pod("team-a/web-*")];
    web.action = EgressAction::Masquerade {
        v4: vec![Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11)],
        v6: vec!["2001:db8::10".parse().unwrap()],
    };
    let v6_only = EgressPolicy {
        action: EgressAction::Masquerade { v4: vec![], v6: vec!["2001:db8::20".parse().unwrap()] },
        ..nonat("v6-only", &["*"], &[])
    };
    let m = MasqOptions {
        egress_policies: vec![web, nonat("opt-out", &["batch-*"], &["10.0.0.0/8"]), v6_only],
        masquerade_address_v4: Some(Ipv4Addr::new(198, 51, 100, 1)),
        masquerade_pool_v4: vec![Ipv4Addr::new(198, 51, 100, 1)],
        ..MasqOptions::default()
    };
    let mut v = masq_to_json(&m);
    assert_eq!(v["egressPolicies"][1], json!({"name": "opt-out", "namespaces": ["batch-*"], "destinations": ["10.0.0.0/8"], "natOutgoing": false}));
    v["cniVersion"] = json!("1.0.0");
    v["name"] = json!("n");
    let back = parse_netconf(&serde_json::to_vec(&v).expect("ser")).expect("round trip parses");
    assert_eq!(back.masq, m, "{v}");
    assert!(masq_to_json(&MasqOptions::default()).get("egressPolicies").is_none());
}
