//! ip-masq-agent's config file (YAML and JSON) and the `ipMasqAgent` entry key.

use std::time::Duration;

use super::*;
use crate::error::code;

fn cidrs(list: &[&str]) -> Vec<IpNetwork> {
    list.iter().map(|c| c.parse().unwrap()).collect()
}

fn err(text: &str) -> String {
    let e = parse_ip_masq_agent(text.as_bytes(), false).unwrap_err();
    assert_eq!(e.code, code::INVALID_CONFIG, "{}", e.msg);
    e.msg
}

#[test]
fn yaml_as_the_configmap_holds_it() {
    let f = parse_ip_masq_agent(
        b"nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 198.51.100.0/24\n  - fd00::/8\nmasqLinkLocal: true\nresyncInterval: 60s\n",
        false,
    )
    .unwrap();
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8", "198.51.100.0/24", "fd00::/8"]));
    assert!(f.masq_link_local);
    assert!(!f.masq_link_local_ipv6);
    assert_eq!(f.resync_interval, Duration::from_secs(60));
    // Flow style, as the ip-masq-agent docs write it.
    let f = parse_ip_masq_agent(b"nonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12]\n", false).unwrap();
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8", "172.16.0.0/12"]));
}

#[test]
fn json_is_read_too() {
    let f = parse_ip_masq_agent(
        br#"{"nonMasqueradeCIDRs": ["192.168.0.0/16"], "masqLinkLocalIPv6": true, "resyncInterval": "1m"}"#,
        false,
    )
    .unwrap();
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["192.168.0.0/16"]));
    assert!(!f.masq_link_local && f.masq_link_local_ipv6);
    assert_eq!(f.resync_interval, Duration::from_secs(60));
}

#[test]
fn keys_left_out_keep_ip_masq_agents_defaults() {
    let d = IpMasqAgentFile::defaults(false);
    assert_eq!(d.non_masquerade_cidrs, cidrs(&["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]));
    assert!(!d.masq_link_local && !d.masq_link_local_ipv6);
    assert_eq!((d.cidr_limit, d.resync_interval), (64, Duration::from_secs(60)));
    // Only masqLinkLocal given: the default list stays (Go unmarshals over the defaults).
    let f = parse_ip_masq_agent(b"masqLinkLocal: true\n", false).unwrap();
    assert_eq!(f.non_masquerade_cidrs, d.non_masquerade_cidrs);
    assert!(f.masq_link_local);
    // An empty file, or one of comments only: the defaults.
    assert_eq!(parse_ip_masq_agent(b"", false).unwrap(), d);
    assert_eq!(parse_ip_masq_agent(b"# nothing yet\n", false).unwrap(), d);
    // An empty list is a list: every destination masqueraded but link-local.
    assert!(parse_ip_masq_agent(b"nonMasqueradeCIDRs: []\n", false).unwrap().non_masquerade_cidrs.is_empty());
}

#[test]
fn all_reserved_ranges_as_nomasq_all_reserved_ranges() {
    let d = IpMasqAgentFile::defaults(true);
    let want = cidrs(&[
        "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24",
        "192.88.99.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
    ]);
    assert_eq!(d.non_masquerade_cidrs, want);
    assert_eq!(parse_ip_masq_agent(b"masqLinkLocal: false", true).unwrap().non_masquerade_cidrs, want);
}

#[test]
fn masq_link_local_on_and_off() {
    for (text, v4, v6) in [
        ("masqLinkLocal: true", true, false),
        ("masqLinkLocal: false", false, false),
        ("masqLinkLocalIPv6: true", false, true),
        ("{\"masqLinkLocal\": true, \"masqLinkLocalIPv6\": true}", true, true),
    ] {
        let f = parse_ip_masq_agent(text.as_bytes(), false).unwrap();
        assert_eq!((f.masq_link_local, f.masq_link_local_ipv6), (v4, v6), "{text}");
    }
    assert!(err("masqLinkLocal: \"true\"").contains("\"masqLinkLocal\": expected a boolean"));
}

fn parse(text: &str) -> IpMasqAgentFile {
    parse_ip_masq_agent(text.as_bytes(), false).unwrap_or_else(|e| panic!("{text:?} refused: {}", e.msg))
}

fn ignored(f: &IpMasqAgentFile) -> Vec<String> {
    f.ignored_keys.iter().map(IgnoredKey::describe).collect()
}

#[test]
fn keys_in_any_case_as_real_configmaps_write_them() {
    // As ConfigMaps in the field carry them (Go's decoder matches a key in any case).
    let want = |f: &IpMasqAgentFile| {
        assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8", "100.64.0.0/10"]));
        assert!(f.masq_link_local && f.masq_link_local_ipv6);
        assert_eq!((f.cidr_limit, f.resync_interval), (10, Duration::from_secs(30)));
        assert!(f.ignored_keys.is_empty(), "{:?}", f.ignored_keys);
    };
    want(&parse(
        "NonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 100.64.0.0/10\nMasqLinkLocal: true\nMasqLinkLocalIPv6: true\n\
         CidrLimit: 10\nResyncInterval: 30s\n",
    ));
    want(&parse(
        r#"{"NonMasqueradeCIDRs": ["10.0.0.0/8", "100.64.0.0/10"], "MasqLinkLocal": true,
            "MasqLinkLocalIPv6": true, "CidrLimit": 10, "ResyncInterval": "30s"}"#,
    ));
    // Mixed: every case, and the two non-ASCII letters that fold to ASCII ones
    // (U+017F long s, U+212A Kelvin sign), as Go's folding matches them.
    want(&parse(
        "nonmasqueradecidrs: [10.0.0.0/8, 100.64.0.0/10]\nMASQLINKLOCAL: true\nmasqLin\u{212A}LocalIPv6: true\n\
         cIDRlIMIT: 10\nre\u{17F}yncInterval: 30s\n",
    ));
    // Not the same key in another case: ignored (and reported, see below).
    let f = parse("non_masquerade_cidrs: []\nnon-masquerade-cidrs: []\nmasq_link_local: true\n");
    assert_eq!(f.non_masquerade_cidrs, IpMasqAgentFile::defaults(false).non_masquerade_cidrs);
    assert!(!f.masq_link_local);
    assert_eq!(f.ignored_keys.len(), 3, "{:?}", f.ignored_keys);
    // An error names the key as written.
    let m = err("NonMasqueradeCIDRs: [10.0.0.0/8, 10.0.0.1/8]");
    assert!(m.starts_with("invalid config key \"NonMasqueradeCIDRs[1]\""), "{m}");
    assert!(err("MasqLinkLocal: 1").contains("\"MasqLinkLocal\": expected a boolean"));
}

#[test]
fn of_two_spellings_the_one_go_applies_last_wins() {
    // JSON reaches Go's decoder as written: each pair applied in document order.
    let f = parse(r#"{"nonMasqueradeCIDRs": ["10.0.0.0/8"], "NonMasqueradeCIDRs": ["192.168.0.0/16"]}"#);
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["192.168.0.0/16"]));
    let f = parse(r#"{"NonMasqueradeCIDRs": ["192.168.0.0/16"], "nonMasqueradeCIDRs": ["10.0.0.0/8"]}"#);
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8"]));
    let f = parse(r#"{"masqLinkLocal": true, "masqLinkLocal": false}"#);
    assert!(!f.masq_link_local);
    // YAML goes through a Go map and json.Marshal, which sorts keys by bytes: of
    // two spellings the one sorting last wins, wherever it was written.
    for text in [
        "nonMasqueradeCIDRs: [10.0.0.0/8]\nNonMasqueradeCIDRs: [192.168.0.0/16]\n",
        "NonMasqueradeCIDRs: [192.168.0.0/16]\nnonMasqueradeCIDRs: [10.0.0.0/8]\n",
    ] {
        assert_eq!(parse(text).non_masquerade_cidrs, cidrs(&["10.0.0.0/8"]), "{text}");
    }
    for text in ["MasqLinkLocal: false\nMASQLINKLOCAL: true\n", "MASQLINKLOCAL: true\nMasqLinkLocal: false\n"] {
        assert!(!parse(text).masq_link_local, "{text}");
    }
    // YAML's exact duplicate keeps its last value; the first is gone, whatever its type.
    assert!(parse("masqLinkLocal: [1]\nmasqLinkLocal: true\n").masq_link_local);
    assert_eq!(parse("resyncInterval: 1m\nresyncInterval: 2m\n").resync_interval, Duration::from_secs(120));
    // JSON's is decoded twice: a wrong type or a bad duration anywhere refuses the file...
    assert!(err(r#"{"masqLinkLocal": "x", "masqLinkLocal": true}"#).contains("expected a boolean"));
    let m = err(r#"{"resyncInterval": "1x", "ResyncInterval": "1m"}"#);
    assert!(m.contains("\"resyncInterval\"") && m.contains("unknown unit"), "{m}");
    // ...while the list is validated once, as the struct holds it at the end.
    let f = parse(r#"{"nonMasqueradeCIDRs": ["10.0.0.1/8"], "nonMasqueradeCIDRs": ["10.0.0.0/8"]}"#);
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8"]));
}

#[test]
fn null_values_as_go_decodes_them() {
    // A null list is Go's nil slice: no CIDR, not the default list.
    for text in ["nonMasqueradeCIDRs:\n", "nonMasqueradeCIDRs: ~\n", r#"{"nonMasqueradeCIDRs": null}"#] {
        assert!(parse(text).non_masquerade_cidrs.is_empty(), "{text}");
    }
    // A null bool or int changes nothing (the default, or what an earlier pair set).
    let f = parse("masqLinkLocal:\ncidrLimit: null\n");
    assert!(!f.masq_link_local);
    assert_eq!(f.cidr_limit, 64);
    assert!(parse(r#"{"masqLinkLocal": true, "MasqLinkLocal": null}"#).masq_link_local);
    // The duration's own decoder refuses null.
    assert!(err("resyncInterval:\n").contains("\"resyncInterval\": expected a string, got null"));
    // A null element is Go's "", not a CIDR.
    assert!(err("nonMasqueradeCIDRs: [10.0.0.0/8, null]").contains("nonMasqueradeCIDRs[1]"));
    // A top-level null is no pair at all.
    assert_eq!(parse("null\n"), IpMasqAgentFile::defaults(false));
    assert_eq!(parse("---\n"), IpMasqAgentFile::defaults(false));
}

#[test]
fn yaml_1_1_scalars_as_go_yaml_v2_reads_them() {
    for (word, want) in [("yes", true), ("Yes", true), ("on", true), ("ON", true), ("y", true), ("True", true),
                         ("no", false), ("Off", false), ("n", false), ("N", false), ("FALSE", false)] {
        assert_eq!(parse(&format!("masqLinkLocal: {word}")).masq_link_local, want, "{word}");
        assert_eq!(parse(&format!("masqLinkLocalIPv6: {word}")).masq_link_local_ipv6, want, "{word}");
    }
    // Quoted it is a string, which a bool field refuses, in YAML and in JSON.
    for text in ["masqLinkLocal: \"yes\"", "masqLinkLocal: 'on'", "masqLinkLocal: \"true\"", r#"{"masqLinkLocal": "yes"}"#] {
        assert!(err(text).contains("\"masqLinkLocal\": expected a boolean"), "{text}");
    }
    // Integers as Go's ParseInt(s, 0, 64) reads them once underscores are gone.
    for (text, want) in [("0100", 64), ("0x40", 64), ("0o100", 64), ("0b1000000", 64), ("1_000", 1000), ("+64", 64),
                         ("08", 8), ("64.0", 64), ("6.4e1", 64)] {
        assert_eq!(parse(&format!("cidrLimit: {text}")).cidr_limit, want, "{text}");
    }
    // JSON is read by encoding/json itself: its int field takes no float.
    assert!(err(r#"{"cidrLimit": 64.0}"#).contains("\"cidrLimit\": expected a whole number"));
    assert!(err("cidrLimit: \"64\"").contains("\"cidrLimit\": expected a whole number"));
    // Only the first YAML document counts, as go-yaml's Unmarshal reads it.
    assert!(parse("masqLinkLocal: true\n---\nmasqLinkLocal: false\n").masq_link_local);
    // A mapping key that is a YAML 1.1 boolean or number is its JSON text; a null one is refused there.
    assert_eq!(ignored(&parse("yes: 1\n0100: 2\n")), ["\"64\"", "\"true\""]);
    let e = parse_ip_masq_agent(b"~: a\n", false).unwrap_err();
    assert!(e.code == code::DECODE_FAILURE && e.msg.contains("null mapping key"), "{}", e.msg);
    // A value JSON cannot hold refuses the file, as json.Marshal fails on it.
    assert_eq!(parse_ip_masq_agent(b"other: .nan\n", false).unwrap_err().code, code::DECODE_FAILURE);
}

#[test]
fn yaml_merge_keys_as_go_yaml_v2_merges_them() {
    let f = parse("shared: &s {masqLinkLocal: true, nonMasqueradeCIDRs: [10.0.0.0/8]}\n<<: *s\n");
    assert!(f.masq_link_local);
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8"]));
    assert_eq!(ignored(&f), ["\"shared\""]);
    // A key written after `<<` replaces the merged one; one written before it is replaced.
    assert!(!parse("s: &s {masqLinkLocal: true}\n<<: *s\nmasqLinkLocal: false\n").masq_link_local);
    assert!(parse("s: &s {masqLinkLocal: true}\nmasqLinkLocal: false\n<<: *s\n").masq_link_local);
    // Of a list of mappings the earlier wins.
    let f = parse("a: &a {cidrLimit: 1}\nb: &b {cidrLimit: 2, nonMasqueradeCIDRs: []}\n<<: [*a, *b]\n");
    assert_eq!(f.cidr_limit, 1);
    // Quoted, `<<` is a key like any other (ignored); with a scalar it is an error there.
    assert_eq!(ignored(&parse("\"<<\": {masqLinkLocal: true}\n")), ["\"<<\""]);
    assert_eq!(parse_ip_masq_agent(b"<<: 1\n", false).unwrap_err().code, code::DECODE_FAILURE);
}

#[test]
fn unknown_keys_are_ignored_as_there_and_reported_with_the_nearest_key() {
    let f = parse("nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqLinkLocall: true\nresync: 5s\nextra: {1: [a, b]}\n");
    assert_eq!(f.non_masquerade_cidrs, cidrs(&["10.0.0.0/8"]));
    assert!(!f.masq_link_local, "an ignored key has no effect");
    assert_eq!(f.resync_interval, Duration::from_secs(60));
    // YAML's keys as Go sees them: sorted.
    assert_eq!(ignored(&f), ["\"extra\"", "\"masqLinkLocall\" (did you mean \"masqLinkLocal\"?)", "\"resync\""]);
    assert_eq!(f.ignored_keys[1], IgnoredKey { key: "masqLinkLocall".into(), nearest: Some("masqLinkLocal") });
    // JSON's in document order, each once; a value of any type.
    let f = parse(r#"{"nonMasqueradeCIDR": ["10.0.0.0/8"], "x": null, "nonMasqueradeCIDR": 7, "masqLinkLocal6": [true]}"#);
    assert_eq!(f.non_masquerade_cidrs, IpMasqAgentFile::defaults(false).non_masquerade_cidrs);
    assert_eq!(
        ignored(&f),
        [
            "\"nonMasqueradeCIDR\" (did you mean \"nonMasqueradeCIDRs\"?)",
            "\"x\"",
            "\"masqLinkLocal6\" (did you mean \"masqLinkLocal\"?)"
        ]
    );
    assert!(parse("masqLinkLocal: true").ignored_keys.is_empty());
}

#[test]
fn a_bad_cidr_is_named_with_its_index() {
    let m = err("nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 10.300.0.0/16\n");
    assert!(m.starts_with("invalid config key \"nonMasqueradeCIDRs[1]\""), "{m}");
    // ip-masq-agent refuses a CIDR with host bits ("not aligned"): so do we.
    let m = err("nonMasqueradeCIDRs: [10.0.0.1/8]");
    assert!(m.contains("nonMasqueradeCIDRs[0]") && m.contains("host bits"), "{m}");
    let m = err("nonMasqueradeCIDRs: 10.0.0.0/8");
    assert!(m.contains("\"nonMasqueradeCIDRs\": expected a list"), "{m}");
}

#[test]
fn cidr_limit_as_ip_masq_agent() {
    let many: Vec<String> = (0..65).map(|i| format!("10.{i}.0.0/16")).collect();
    let m = err(&format!("nonMasqueradeCIDRs: [{}]", many.join(", ")));
    assert!(m.contains("\"nonMasqueradeCIDRs\": 65 CIDRs, more than cidrLimit 64"), "{m}");
    let f = parse_ip_masq_agent(format!("cidrLimit: 100\nnonMasqueradeCIDRs: [{}]", many.join(", ")).as_bytes(), false);
    assert_eq!(f.unwrap().non_masquerade_cidrs.len(), 65);
    // A negative limit is an int to Go, and no list fits under it.
    assert!(err("cidrLimit: -1").contains("\"nonMasqueradeCIDRs\": 3 CIDRs, more than cidrLimit -1"));
    assert!(err("cidrLimit: true").contains("\"cidrLimit\": expected a whole number"));
    assert_eq!(parse("cidrLimit: 0\nnonMasqueradeCIDRs: []").cidr_limit, 0);
}

#[test]
fn resync_interval_is_a_go_duration() {
    for (s, want) in [
        ("60s", Duration::from_secs(60)),
        ("1m", Duration::from_secs(60)),
        ("1h30m", Duration::from_secs(5400)),
        ("1.5s", Duration::from_millis(1500)),
        ("500ms", Duration::from_millis(500)),
        ("0", Duration::ZERO),
        ("+0", Duration::ZERO),
        ("+5s", Duration::from_secs(5)),
        // Go takes a negative interval (ip-masq-agent then does not sleep): zero.
        ("-1s", Duration::ZERO),
        ("-0", Duration::ZERO),
    ] {
        assert_eq!(parse_go_duration(s).unwrap(), want, "{s}");
        let f = parse_ip_masq_agent(format!("resyncInterval: \"{s}\"").as_bytes(), false).unwrap();
        assert_eq!(f.resync_interval, want, "{s}");
    }
    for s in ["60", "", "1x", "-1x", "+", "s", "1.2.3s"] {
        assert!(parse_go_duration(s).is_err(), "{s:?} accepted");
    }
    // ip-masq-agent wants a string: a bare number is refused there too.
    assert!(err("resyncInterval: 60").contains("\"resyncInterval\": expected a string"));
    assert!(err("resyncInterval: 60x").contains("\"resyncInterval\": \"60x\": unknown unit \"x\""));
}

#[test]
fn not_a_mapping_or_not_yaml() {
    let m = err("- 10.0.0.0/8\n");
    assert!(m.contains("expected a mapping of keys"), "{m}");
    assert!(err("[1, 2]").contains("expected a mapping of keys, got a list of 2"));
    assert!(err("just words").contains("expected a mapping of keys, got string \"just words\""));
    let e = parse_ip_masq_agent(br#"{"masqLinkLocal": true} x"#, false).unwrap_err();
    assert!(e.code == code::DECODE_FAILURE && e.msg.contains("as JSON"), "{}", e.msg);
    let e = parse_ip_masq_agent(b"nonMasqueradeCIDRs: [10.0.0.0/8\n", false).unwrap_err();
    assert_eq!(e.code, code::DECODE_FAILURE);
    assert!(e.msg.contains("ip-masq-agent config as YAML"), "{}", e.msg);
}

fn entry(extra: &str) -> crate::error::Result<NetConf> {
    parse_conf_file(format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq"{extra}}}"#).as_bytes())
}

#[test]
fn the_entry_key_round_trips_and_is_strict() {
    let a = IpMasqAgent::from_file(
        "/etc/config/ip-masq-agent".into(),
        false,
        &parse_ip_masq_agent(b"nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqLinkLocal: true", false).unwrap(),
    );
    let conf = entry(&format!(r#","ipMasqAgent":{}"#, ip_masq_agent_to_json(&a))).unwrap();
    assert_eq!(conf.masq.ip_masq_agent.as_ref(), Some(&a));
    assert_eq!(conf.masq.effective_masq_link_local(), (true, false));
    assert_eq!(masq_to_json(&conf.masq)["ipMasqAgent"], ip_masq_agent_to_json(&a));

    let m = entry(r#","ipMasqAgent":{"file":"/x","masqLinkLocl":true}"#).unwrap_err().msg;
    assert!(m.contains("\"ipMasqAgent.masqLinkLocl\": unknown key"), "{m}");
    let m = entry(r#","ipMasqAgent":{"nonMasqueradeCIDRs":[]}"#).unwrap_err().msg;
    assert!(m.contains("\"ipMasqAgent.file\": required"), "{m}");
    let m = entry(r#","ipMasqAgent":{"file":"/x","file":"/y"}"#).unwrap_err().msg;
    assert!(m.contains("ipMasqAgent.file") && m.contains("more than once"), "{m}");
    assert!(entry("").unwrap().masq.ip_masq_agent.is_none());
}

#[test]
fn a_refused_file_with_nothing_in_force_is_ip_masq_agents_defaults_and_says_so() {
    let r = IpMasqAgent::refused("/etc/config/ip-masq-agent".into(), false);
    assert_eq!(r.non_masquerade_cidrs, IpMasqAgentFile::defaults(false).non_masquerade_cidrs);
    assert!(r.file_refused && !r.file_absent && !r.masq_link_local && !r.masq_link_local_ipv6);
    assert_eq!(r.describe(), "/etc/config/ip-masq-agent (refused: ip-masq-agent's defaults)");
    assert_eq!(IpMasqAgent::refused("/f".into(), true).non_masquerade_cidrs.len(), 11);
    // It round-trips through the chained entry, and is read back from a conflist's entry.
    let json = ip_masq_agent_to_json(&r);
    assert_eq!(json["fileRefused"], true);
    let conf = entry(&format!(r#","ipMasqAgent":{json}"#)).unwrap();
    assert_eq!(conf.masq.ip_masq_agent.as_ref(), Some(&r));
    let Value::Object(mut m) = masq_to_json(&conf.masq) else { panic!("not an object") };
    assert_eq!(ip_masq_agent_of_entry(&m), Some(r));
    m.insert("ipMasqAgent".into(), serde_json::json!({"file": "relative"}));
    assert_eq!(ip_masq_agent_of_entry(&m), None, "an invalid one is none");
    m.remove("ipMasqAgent");
    assert_eq!(ip_masq_agent_of_entry(&m), None);
}
