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

#[test]
fn an_unknown_key_is_named() {
    let m = err("nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqLinkLocall: true\n");
    assert!(m.starts_with("invalid config key \"masqLinkLocall\": unknown key (did you mean \"masqLinkLocal\"?)"), "{m}");
    let m = err(r#"{"nonMasqueradeCIDR": ["10.0.0.0/8"]}"#);
    assert!(m.contains("\"nonMasqueradeCIDR\"") && m.contains("did you mean \"nonMasqueradeCIDRs\""), "{m}");
    // Go would match any case; a key spelt otherwise is refused with the right spelling.
    let m = err("NonMasqueradeCIDRs: []");
    assert!(m.contains("did you mean \"nonMasqueradeCIDRs\""), "{m}");
}

#[test]
fn a_duplicated_key_is_named() {
    let m = err("masqLinkLocal: true\nmasqLinkLocal: false\n");
    assert!(m.starts_with("invalid config key \"masqLinkLocal\": key appears more than once"), "{m}");
    let m = err(r#"{"resyncInterval": "1m", "resyncInterval": "2m"}"#);
    assert!(m.contains("\"resyncInterval\"") && m.contains("more than once"), "{m}");
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
    assert!(err("cidrLimit: -1").contains("\"cidrLimit\": expected a whole number"));
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
    ] {
        assert_eq!(parse_go_duration(s).unwrap(), want, "{s}");
        let f = parse_ip_masq_agent(format!("resyncInterval: \"{s}\"").as_bytes(), false).unwrap();
        assert_eq!(f.resync_interval, want, "{s}");
    }
    for s in ["60", "", "1x", "-1s", "s", "1.2.3s"] {
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
