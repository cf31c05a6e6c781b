//! Property tests (proptest) for everything the plugin parses from untrusted input:
//! the network config (`parse_netconf`, `parse_conf_file`), the prevResult
//! (`parse_prev_result`) and, end to end, the real binary's stdin on a CNI ADD.
//!
//! Properties:
//! * no input panics;
//! * every error is a CNI error with code 1 (version), 6 (decode) or 7 (config),
//!   and its `to_cni_json` is a JSON object with that code and a non-empty msg;
//! * every config that parses round-trips through `masq_to_json` (also as a
//!   conflist entry through `parse_conf_file`);
//! * `CNI_COMMAND=ADD` with garbage on stdin prints exactly one JSON error object
//!   on stdout and exits 1.
//!
//! Case counts are bounded so the whole file runs in a few seconds with
//! `cargo test --release`; EBPF_MASQ_FUZZ_CASES_MULT multiplies them for a soak.
//! Needs no privileges: nothing here touches bpffs or the network (binary runs
//! only get inputs the parser rejects, so they stop before any side effect).

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};

use ebpf_masq::config::{self, masq_to_json, parse_conf_file, parse_netconf, NetConf};
use ebpf_masq::error::Error;
use ebpf_masq::prevresult::parse_prev_result;
use ipnetwork::IpNetwork;
use proptest::prelude::*;
use proptest::test_runner::Config as PtConfig;
use serde_json::{json, Map, Value};

/// Codes a parse error may carry: incompatible version, decode failure, invalid config.
const PARSE_CODES: [u32; 3] = [1, 6, 7];

fn cases(base: u32) -> PtConfig {
    let mult: u32 = std::env::var("EBPF_MASQ_FUZZ_CASES_MULT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    PtConfig {
        cases: base.saturating_mul(mult),
        // Never write proptest-regressions/ files into the source tree; a failure
        // prints its minimal input, which belongs in a unit test.
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..PtConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Checks shared by every property.

/// The error is one a parser may return, and its CNI JSON is well formed.
fn check_error(e: &Error, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        PARSE_CODES.contains(&e.code),
        "{what}: unexpected code {} ({})",
        e.code,
        e.msg
    );
    prop_assert!(!e.msg.is_empty(), "{what}: empty message");
    for version in config::SUPPORTED_CNI_VERSIONS {
        let text = serde_json::to_string(&e.to_cni_json(version))
            .map_err(|x| TestCaseError::fail(format!("{what}: to_cni_json not serializable: {x}")))?;
        let back: Value = serde_json::from_str(&text)
            .map_err(|x| TestCaseError::fail(format!("{what}: to_cni_json not JSON: {x}: {text}")))?;
        prop_assert_eq!(back["code"].as_u64(), Some(u64::from(e.code)), "{}: {}", what, text);
        prop_assert_eq!(back["msg"].as_str(), Some(e.msg.as_str()), "{}: {}", what, text);
        prop_assert_eq!(back["cniVersion"].as_str(), Some(*version), "{}: {}", what, text);
    }
    Ok(())
}

/// A parsed config survives masq_to_json -> parse, alone and as a conflist entry.
fn check_round_trip(c: &NetConf, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(c.plugin_type.as_str(), config::PLUGIN_TYPE);
    let mut entry = masq_to_json(&c.masq);
    prop_assert_eq!(&entry["type"], "ebpf-masq");

    let mut single = entry.clone();
    single["cniVersion"] = json!(c.cni_version);
    single["name"] = json!(c.name);
    let bytes = serde_json::to_vec(&single).expect("serialize");
    match parse_netconf(&bytes) {
        Ok(back) => {
            prop_assert_eq!(&back.masq, &c.masq, "{}: {}", what, single);
            prop_assert_eq!(&back.name, &c.name);
            prop_assert_eq!(&back.cni_version, &c.cni_version);
        }
        Err(e) => return Err(TestCaseError::fail(format!("{what}: round trip rejected: {e}: {single}"))),
    }

    // The same entry inside a conflist, after another plugin (libcni's layout).
    if let Some(o) = entry.as_object_mut() {
        o.insert("cniVersion".into(), json!("0.4.0")); // overridden by the list's
    }
    let list = json!({
        "cniVersion": c.cni_version, "name": c.name,
        "plugins": [{"type": "bridge", "bridge": "cni0"}, entry],
    });
    match parse_conf_file(&serde_json::to_vec(&list).expect("serialize")) {
        Ok(back) => {
            prop_assert_eq!(&back.masq, &c.masq, "{}: {}", what, list);
            prop_assert_eq!(&back.name, &c.name);
            prop_assert_eq!(&back.cni_version, &c.cni_version);
        }
        Err(e) => return Err(TestCaseError::fail(format!("{what}: conflist round trip rejected: {e}: {list}"))),
    }
    Ok(())
}

/// Run both config parsers on bytes and check whatever they return.
fn check_config_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    let shown = String::from_utf8_lossy(bytes);
    match parse_netconf(bytes) {
        Ok(c) => check_round_trip(&c, &format!("parse_netconf({shown})"))?,
        Err(e) => check_error(&e, &format!("parse_netconf({shown})"))?,
    }
    match parse_conf_file(bytes) {
        Ok(c) => check_round_trip(&c, &format!("parse_conf_file({shown})"))?,
        Err(e) => check_error(&e, &format!("parse_conf_file({shown})"))?,
    }
    Ok(())
}

fn check_prev_result(v: &Value) -> Result<(), TestCaseError> {
    match parse_prev_result(v) {
        Ok(r) => {
            // Accessors never panic and stay within what was parsed.
            for ifname in ["eth0", "net1", ""] {
                let ips = r.container_ips(ifname);
                for a in &ips {
                    prop_assert!(r.ips.iter().any(|i| i.address.ip() == *a));
                }
                let mut dedup = ips.clone();
                dedup.dedup();
                prop_assert_eq!(dedup.len(), ips.len());
            }
            for h in r.host_interfaces() {
                prop_assert!(r.interfaces.iter().any(|i| i.name == h && i.sandbox.is_none()));
            }
            for ip in &r.ips {
                if let Some(i) = ip.interface {
                    prop_assert!(i < r.interfaces.len(), "interface index {} out of range", i);
                }
            }
        }
        Err(e) => check_error(&e, &format!("parse_prev_result({v})"))?,
    }
    // Embedded in an otherwise valid plugin config: the config parser must not choke either.
    let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "ebpf-masq", "prevResult": v});
    check_config_bytes(&serde_json::to_vec(&conf).expect("serialize"))
}

// ---------------------------------------------------------------------------
// Strategies.

const CONFIG_KEYS: &[&str] = &[
    "cniVersion", "cniVersions", "name", "type", "prevResult", "runtimeConfig", "capabilities", "args",
    "dns", "ipam", "cni.dev/valid-attachments", "cni.dev/attachments", "disableCheck", "disableGC",
    "natOutgoing", "nativeRoutingCIDR", "nonMasqueradeCIDRs", "masqLinkLocal", "masqLinkLocalIPv6",
    "egressInterfaces", "masqueradeAddress", "portRange", "nodePortRange", "pinPath", "logLevel", "logFile",
    "masqueradeRules", "natMaxEntries", "fastPath", "serviceCIDRs", "plugins",
    "source", "outInterface", "except", "toAddress", "containerID", "ifname",
    "egressPolicies", "namespaces", "pods", "destinations", "ipMasqAgent", "file", "fileAbsent", "podPortLimit",
];

const PREV_KEYS: &[&str] = &[
    "cniVersion", "interfaces", "ips", "routes", "dns", "name", "mac", "sandbox", "address", "gateway",
    "interface", "version", "dst", "gw",
];

/// Strings near what the parsers look for, plus anything at all.
fn interesting_string() -> BoxedStrategy<String> {
    let samples: Vec<&'static str> = vec![
        "", "1.0.0", "0.4.0", "1.1.0", "0.3.1", "2.0.0", "ebpf-masq", "bridge", "eth0", "cni0", "lo",
        "123456789012345", "1234567890123456", ".", "..", "a/b", "a:b", "a b", "10.0.0.0/8",
        "10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/", "/8", "0.0.0.0/0", "::/0",
        "fd00::/8", "fd00::1/8", "fe80::/10", "2001:db8::1", "192.0.2.1", "255.255.255.255",
        "0.0.0.0", "127.0.0.1", "224.0.0.1", "::", "::1", "ff02::1", "10.22.0.5/16", "10.22.0.5",
        "1024-29999", "0-10", "5000-4000", "1-65535", "1-65536", "-", "1-", "-1", "01-02", "1 - 2",
        "/sys/fs/bpf/x", "/", "//", "relative", "/a/../b", "/var/log/", "/var/log/x.log", "/a\0b",
        "info", "INFO", "Debug", "off", "loud", "true", "false", "null", "4", "6", "é", "\u{202e}eth0",
        "\u{0}", "\n", "x".repeat(100).leak(),
    ];
    prop_oneof![
        3 => proptest::sample::select(samples).prop_map(str::to_owned),
        1 => "\\PC{0,24}",
        1 => any::<String>().prop_map(|s| s.chars().take(40).collect()),
    ]
    .boxed()
}

fn key_string(keys: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        4 => proptest::sample::select(keys).prop_map(str::to_owned),
        1 => interesting_string(),
    ]
    .boxed()
}

fn arb_number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..70_000).prop_map(Value::from),
        proptest::sample::select(vec![0i64, -1, 1, 1023, 1024, 1025, 16_777_216, 16_777_217, 4_294_967_296])
            .prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        Just(json!(1024.0)),
        Just(json!(1e300)),
    ]
    .boxed()
}

/// Any JSON value, with object keys drawn mostly from `keys`.
fn arb_json(keys: &'static [&'static str]) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        interesting_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key_string(keys), inner), 0..7)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
    .boxed()
}

fn v4_net() -> impl Strategy<Value = IpNetwork> {
    (any::<u32>(), 0u8..=32).prop_map(|(a, p)| {
        let n = IpNetwork::new(Ipv4Addr::from(a).into(), p).expect("prefix <= 32");
        IpNetwork::new(n.network(), p).expect("prefix <= 32")
    })
}

fn v6_net() -> impl Strategy<Value = IpNetwork> {
    (any::<u128>(), 0u8..=128).prop_map(|(a, p)| {
        let n = IpNetwork::new(Ipv6Addr::from(a).into(), p).expect("prefix <= 128");
        IpNetwork::new(n.network(), p).expect("prefix <= 128")
    })
}

fn any_net() -> impl Strategy<Value = IpNetwork> {
    prop_oneof![v4_net(), v6_net()]
}

fn unicast_v4() -> impl Strategy<Value = Ipv4Addr> {
    (1u8..=223, any::<[u8; 3]>())
        .prop_filter("not loopback", |(a, _)| *a != 127)
        .prop_map(|(a, r)| Ipv4Addr::new(a, r[0], r[1], r[2]))
}

fn unicast_v6() -> impl Strategy<Value = Ipv6Addr> {
    any::<u64>().prop_map(|x| Ipv6Addr::from((0x2001_0db8u128 << 96) | u128::from(x) | 1))
}

fn ifname() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_.-]{0,14}".prop_filter("not . or ..", |s| s != "." && s != "..")
}

fn cidr_list(s: impl Strategy<Value = IpNetwork>) -> impl Strategy<Value = Value> {
    proptest::collection::vec(s, 0..4).prop_map(|v| json!(v.iter().map(|n| n.to_string()).collect::<Vec<_>>()))
}

fn rule() -> impl Strategy<Value = Value> {
    any::<bool>().prop_flat_map(|v6| {
        let (src, exc, to) = if v6 {
            (
                v6_net().boxed(),
                cidr_list(v6_net()).boxed(),
                proptest::option::of(unicast_v6().prop_map(|a| a.to_string())).boxed(),
            )
        } else {
            (
                v4_net().boxed(),
                cidr_list(v4_net()).boxed(),
                proptest::option::of(unicast_v4().prop_map(|a| a.to_string())).boxed(),
            )
        };
        (src, ifname(), proptest::option::of(exc), to).prop_map(|(s, i, e, t)| {
            let mut o = Map::new();
            o.insert("source".into(), json!(s.to_string()));
            o.insert("outInterface".into(), json!(i));
            if let Some(e) = e {
                o.insert("except".into(), e);
            }
            if let Some(t) = t {
                o.insert("toAddress".into(), json!(t));
            }
            Value::Object(o)
        })
    })
}

/// A valid `egressPolicies` list: unique names, globs, CIDRs, one action each.
fn egress_policies() -> impl Strategy<Value = Value> {
    let policy = (
        proptest::collection::vec("[a-z0-9*?-]{1,12}", 1..3),
        proptest::option::of(proptest::collection::vec("[a-z0-9*?-]{1,8}/[a-z0-9.*?-]{1,12}", 1..3)),
        proptest::option::of(proptest::collection::vec(any_net().prop_map(|n| n.to_string()), 1..4)),
        proptest::option::of((unicast_v4(), unicast_v6(), 0u8..3)),
    );
    proptest::collection::vec(policy, 0..4).prop_map(|ps| {
        let list = ps.into_iter().enumerate().map(|(i, (ns, pods, dst, addr))| {
            let mut o = json!({"name": format!("p{i}"), "namespaces": ns});
            if let Some(p) = pods {
                o["pods"] = json!(p);
            }
            if let Some(d) = dst {
                o["destinations"] = json!(d);
            }
            match addr {
                Some((a, _, 0)) => o["masqueradeAddress"] = json!(a.to_string()),
                Some((_, b, 1)) => o["masqueradeAddress"] = json!([b.to_string()]),
                Some((a, b, _)) => o["masqueradeAddress"] = json!([a.to_string(), b.to_string()]),
                None => o["natOutgoing"] = json!(false),
            }
            o
        });
        Value::Array(list.collect())
    })
}

/// A plugin config the parser must accept.
fn valid_config() -> BoxedStrategy<Value> {
    let opt = |s: BoxedStrategy<Value>| proptest::option::weighted(0.4, s);
    let nat_max = (config::NAT_MAX_ENTRIES_MIN..=config::NAT_MAX_ENTRIES_MAX).prop_map(Value::from).boxed();
    let port_range = (1u16..=u16::MAX)
        .prop_flat_map(|lo| (Just(lo), lo..=u16::MAX))
        .prop_map(|(lo, hi)| json!(format!("{lo}-{hi}")))
        .boxed();
    let masq_addr = prop_oneof![
        unicast_v4().prop_map(|a| json!(a.to_string())),
        unicast_v6().prop_map(|a| json!(a.to_string())),
        (unicast_v4(), unicast_v6()).prop_map(|(a, b)| json!([a.to_string(), b.to_string()])),
        (unicast_v6(), unicast_v4()).prop_map(|(a, b)| json!([a.to_string(), b.to_string()])),
    ]
    .boxed();
    let egress = proptest::collection::btree_set(ifname(), 1..4)
        .prop_map(|s| json!(s.into_iter().collect::<Vec<_>>()))
        .boxed();
    let native = prop_oneof![any_net().prop_map(|n| json!(n.to_string())), cidr_list(any_net())].boxed();
    let level = proptest::sample::select(vec!["error", "warn", "info", "debug", "trace", "off", "WARN", "Info"])
        .prop_map(|s| json!(s))
        .boxed();
    let std_keys = (
        proptest::sample::select(config::SUPPORTED_CNI_VERSIONS.to_vec()),
        "[a-z0-9][a-z0-9-]{0,20}",
        opt(Just(json!({"ips": [{"address": "10.244.1.5/24", "interface": 0}],
                        "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}]}))
            .boxed()),
        opt(Just(json!({"portMappings": []})).boxed()),
        opt(Just(json!([{"containerID": "abc", "ifname": "eth0"}])).boxed()),
        opt(prop_oneof![any::<bool>().prop_map(Value::Bool), Just(json!("true")), Just(Value::Null)].boxed()),
    );
    let ours_a = (
        opt(any::<bool>().prop_map(Value::Bool).boxed()),
        opt(native),
        opt(cidr_list(any_net()).boxed()),
        opt(any::<bool>().prop_map(Value::Bool).boxed()),
        opt(any::<bool>().prop_map(Value::Bool).boxed()),
        opt(egress),
        opt(masq_addr),
        opt(port_range),
    );
    let ours_b = (
        opt("/sys/fs/bpf/[a-z0-9_-]{1,12}".prop_map(Value::String).boxed()),
        opt(level),
        opt("/var/log/[a-z0-9_-]{1,12}\\.log".prop_map(Value::String).boxed()),
        opt(proptest::collection::vec(rule(), 0..4).prop_map(Value::Array).boxed()),
        opt(nat_max),
        opt(any::<bool>().prop_map(Value::Bool).boxed()),
        opt(cidr_list(any_net()).boxed()),
        opt(egress_policies().boxed()),
    );
    (std_keys, ours_a, ours_b)
        .prop_map(|((ver, name, prev, rc, att, dc), a, b)| {
            let mut o = Map::new();
            o.insert("cniVersion".into(), json!(ver));
            o.insert("name".into(), json!(name));
            o.insert("type".into(), json!("ebpf-masq"));
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    o.insert(k.into(), v);
                }
            };
            put("prevResult", prev);
            put("runtimeConfig", rc);
            put("cni.dev/valid-attachments", att);
            put("disableCheck", dc);
            put("natOutgoing", a.0);
            put("nativeRoutingCIDR", a.1);
            put("nonMasqueradeCIDRs", a.2);
            put("masqLinkLocal", a.3);
            put("masqLinkLocalIPv6", a.4);
            put("egressInterfaces", a.5);
            put("masqueradeAddress", a.6);
            // A portRange wholly inside the default nodePortRange leaves no port (code 7):
            // such a config names nodePortRange too.
            if let Some((lo, hi)) = a.7.as_ref().and_then(|v| v.as_str()).and_then(|r| r.split_once('-')) {
                let (lo, hi): (u16, u16) = (lo.parse().unwrap(), hi.parse().unwrap());
                if lo >= 30000 && hi <= 32767 {
                    put("nodePortRange", Some(json!("")));
                }
            }
            put("portRange", a.7);
            put("pinPath", b.0);
            put("logLevel", b.1);
            put("logFile", b.2);
            put("masqueradeRules", b.3);
            put("natMaxEntries", b.4);
            put("fastPath", b.5);
            put("serviceCIDRs", b.6);
            put("egressPolicies", b.7);
            Value::Object(o)
        })
        .boxed()
}

/// One change to a JSON value: drop, replace or add a key, anywhere in the tree.
#[derive(Debug, Clone)]
enum Mutation {
    Remove(usize),
    Replace(usize, Value),
    Insert(String, Value),
    /// Act on the n-th object or array nested below instead of the top level.
    Descend(usize, Box<Mutation>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let base = prop_oneof![
        any::<usize>().prop_map(Mutation::Remove),
        (any::<usize>(), arb_json(CONFIG_KEYS)).prop_map(|(i, v)| Mutation::Replace(i, v)),
        (key_string(CONFIG_KEYS), arb_json(CONFIG_KEYS)).prop_map(|(k, v)| Mutation::Insert(k, v)),
    ];
    base.prop_recursive(3, 8, 1, |inner| {
        (any::<usize>(), inner).prop_map(|(i, m)| Mutation::Descend(i, Box::new(m)))
    })
}

fn apply(v: &mut Value, m: &Mutation) {
    match (v, m) {
        (Value::Object(o), Mutation::Remove(i)) if !o.is_empty() => {
            let k = o.keys().nth(i % o.len()).cloned().expect("in range");
            o.remove(&k);
        }
        (Value::Array(a), Mutation::Remove(i)) if !a.is_empty() => {
            let n = a.len();
            a.remove(i % n);
        }
        (Value::Object(o), Mutation::Replace(i, x)) if !o.is_empty() => {
            let k = o.keys().nth(i % o.len()).cloned().expect("in range");
            o.insert(k, x.clone());
        }
        (Value::Array(a), Mutation::Replace(i, x)) if !a.is_empty() => {
            let n = a.len();
            a[i % n] = x.clone();
        }
        (Value::Object(o), Mutation::Insert(k, x)) => {
            o.insert(k.clone(), x.clone());
        }
        (Value::Array(a), Mutation::Insert(_, x)) => a.push(x.clone()),
        (v @ (Value::Object(_) | Value::Array(_)), Mutation::Descend(i, inner)) => {
            let kids: Vec<&mut Value> = match v {
                Value::Object(o) => o.values_mut().filter(|c| c.is_object() || c.is_array()).collect(),
                Value::Array(a) => a.iter_mut().filter(|c| c.is_object() || c.is_array()).collect(),
                _ => unreachable!(),
            };
            let n = kids.len();
            match kids.into_iter().nth(if n == 0 { 0 } else { i % n }) {
                Some(kid) => apply(kid, inner),
                None => apply(v, inner),
            }
        }
        (v, m) => {
            // A scalar: replace it outright.
            if let Mutation::Replace(_, x) | Mutation::Insert(_, x) = m {
                *v = x.clone();
            }
        }
    }
}

/// Byte-level damage to serialized JSON.
#[derive(Debug, Clone)]
enum ByteEdit {
    Truncate(usize),
    Set(usize, u8),
    InsertBytes(usize, Vec<u8>),
    Delete(usize, usize),
    /// Repeat a top-level key (a duplicate must be rejected, never silently win).
    DuplicateKey(String, String),
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    let tokens: Vec<&'static [u8]> = vec![
        b"{", b"}", b"[", b"]", b"\"", b",", b":", b"null", b"true", b"-", b"0", b"1e999", b"\\u0000",
        b"\\ud800", b"\xff", b"\xc3\x28", b"\x00", b" ", b"/",
    ];
    prop_oneof![
        any::<usize>().prop_map(ByteEdit::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        (any::<usize>(), prop_oneof![
            proptest::sample::select(tokens).prop_map(<[u8]>::to_vec),
            proptest::collection::vec(any::<u8>(), 1..8),
        ])
            .prop_map(|(i, b)| ByteEdit::InsertBytes(i, b)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
        (proptest::sample::select(CONFIG_KEYS), arb_json(CONFIG_KEYS))
            .prop_map(|(k, v)| ByteEdit::DuplicateKey(k.to_owned(), v.to_string())),
    ]
}

fn edit_bytes(b: &mut Vec<u8>, e: &ByteEdit) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
    match e {
        ByteEdit::Truncate(i) => {
            let n = at(*i, b.len());
            b.truncate(n)
        }
        ByteEdit::Set(i, x) => {
            if !b.is_empty() {
                let n = b.len();
                b[i % n] = *x;
            }
        }
        ByteEdit::InsertBytes(i, x) => {
            let n = at(*i, b.len());
            b.splice(n..n, x.iter().copied());
        }
        ByteEdit::Delete(i, n) => {
            let s = at(*i, b.len());
            let e = (s + n).min(b.len());
            b.drain(s..e);
        }
        ByteEdit::DuplicateKey(k, v) => {
            if b.first() == Some(&b'{') {
                let ins = format!("{}:{v},", serde_json::to_string(k).expect("key"));
                b.splice(1..1, ins.into_bytes());
            }
        }
    }
}

fn prev_result_like() -> impl Strategy<Value = Value> {
    let iface = (
        proptest::option::of(prop_oneof![ifname().prop_map(Value::String), arb_json(PREV_KEYS)]),
        proptest::option::of(prop_oneof![Just(json!("0a:58:0a:f4:01:05")), Just(json!("")), arb_json(PREV_KEYS)]),
        proptest::option::of(prop_oneof![Just(json!("/var/run/netns/x")), Just(json!("")), arb_json(PREV_KEYS)]),
    )
        .prop_map(|(n, m, s)| {
            let mut o = Map::new();
            for (k, v) in [("name", n), ("mac", m), ("sandbox", s)] {
                if let Some(v) = v {
                    o.insert(k.into(), v);
                }
            }
            Value::Object(o)
        });
    let addr = prop_oneof![
        (unicast_v4(), 0u8..=40).prop_map(|(a, p)| json!(format!("{a}/{p}"))),
        (unicast_v6(), 0u8..=130).prop_map(|(a, p)| json!(format!("{a}/{p}"))),
        arb_json(PREV_KEYS),
    ];
    let ip = (
        proptest::option::of(addr),
        proptest::option::of(prop_oneof![unicast_v4().prop_map(|a| json!(a.to_string())), arb_json(PREV_KEYS)]),
        proptest::option::of(prop_oneof![(0i64..5).prop_map(Value::from), arb_json(PREV_KEYS)]),
        proptest::option::of(prop_oneof![Just(json!("4")), Just(json!("6")), arb_json(PREV_KEYS)]),
    )
        .prop_map(|(a, g, i, v)| {
            let mut o = Map::new();
            for (k, x) in [("address", a), ("gateway", g), ("interface", i), ("version", v)] {
                if let Some(x) = x {
                    o.insert(k.into(), x);
                }
            }
            Value::Object(o)
        });
    (
        proptest::option::of(proptest::collection::vec(iface, 0..4)),
        proptest::option::of(proptest::collection::vec(ip, 0..4)),
        proptest::option::of(arb_json(PREV_KEYS)),
    )
        .prop_map(|(i, p, extra)| {
            let mut o = Map::new();
            o.insert("cniVersion".into(), json!("1.0.0"));
            if let Some(i) = i {
                o.insert("interfaces".into(), Value::Array(i));
            }
            if let Some(p) = p {
                o.insert("ips".into(), Value::Array(p));
            }
            if let Some(x) = extra {
                o.insert("routes".into(), x);
            }
            Value::Object(o)
        })
}

// ---------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(cases(1024))]

    #[test]
    fn arbitrary_json_config(v in arb_json(CONFIG_KEYS)) {
        check_config_bytes(&serde_json::to_vec(&v).expect("serialize"))?;
    }

    /// Objects that already carry the required keys get past the first checks.
    #[test]
    fn arbitrary_object_with_required_keys(
        mut v in proptest::collection::vec((key_string(CONFIG_KEYS), arb_json(CONFIG_KEYS)), 0..8)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ver in proptest::sample::select(vec!["1.0.0", "0.4.0", "1.1.0", "9.9.9"]),
    ) {
        if let Some(o) = v.as_object_mut() {
            o.entry("cniVersion").or_insert(json!(ver));
            o.entry("name").or_insert(json!("net"));
            o.entry("type").or_insert(json!("ebpf-masq"));
        }
        check_config_bytes(&serde_json::to_vec(&v).expect("serialize"))?;
        // The same keys as the ebpf-masq entry of a conflist.
        let list = json!({"cniVersion": ver, "name": "net", "plugins": [v]});
        check_config_bytes(&serde_json::to_vec(&list).expect("serialize"))?;
    }

    #[test]
    fn arbitrary_bytes_config(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_config_bytes(&b)?;
    }

    #[test]
    fn valid_configs_parse_and_round_trip(v in valid_config()) {
        let bytes = serde_json::to_vec(&v).expect("serialize");
        match parse_netconf(&bytes) {
            Ok(c) => check_round_trip(&c, &v.to_string())?,
            Err(e) => return Err(TestCaseError::fail(format!("valid config rejected: {e}: {v}"))),
        }
        // Pretty-printed is the same config.
        let pretty = serde_json::to_vec_pretty(&v).expect("serialize");
        prop_assert_eq!(
            parse_netconf(&pretty).map(|c| c.masq).ok(),
            parse_netconf(&bytes).map(|c| c.masq).ok()
        );
    }

    #[test]
    fn mutated_valid_configs(v in valid_config(), ms in proptest::collection::vec(mutation(), 1..4)) {
        let mut v = v;
        for m in &ms {
            apply(&mut v, m);
        }
        check_config_bytes(&serde_json::to_vec(&v).expect("serialize"))?;
    }

    #[test]
    fn byte_damaged_valid_configs(v in valid_config(), es in proptest::collection::vec(byte_edit(), 1..4)) {
        let mut b = serde_json::to_vec(&v).expect("serialize");
        for e in &es {
            edit_bytes(&mut b, e);
        }
        check_config_bytes(&b)?;
        if let Some(ByteEdit::DuplicateKey(k, _)) = es.last() {
            // A repeated top-level key never parses: it must not silently win or lose.
            if b.first() == Some(&b'{') && es.len() == 1 && v.get(k.as_str()).is_some() {
                let r = parse_netconf(&b);
                prop_assert!(r.is_err(), "duplicate {:?} accepted: {}", k, String::from_utf8_lossy(&b));
            }
        }
    }

    #[test]
    fn arbitrary_prev_result(v in arb_json(PREV_KEYS)) {
        check_prev_result(&v)?;
    }

    #[test]
    fn structured_prev_result(v in prev_result_like(), ms in proptest::collection::vec(mutation(), 0..2)) {
        let mut v = v;
        for m in &ms {
            apply(&mut v, m);
        }
        check_prev_result(&v)?;
    }
}

// ---------------------------------------------------------------------------
// The real binary on garbage stdin.

/// Run `ebpf-masq` as a runtime would for ADD, with `stdin`; (exit code, stdout, stderr).
fn run_add(stdin: &[u8]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ebpf-masq"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "fuzz-config-0")
        .env("CNI_NETNS", "/nonexistent/ebpf-masq-fuzz")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ebpf-masq");
    {
        let mut w = child.stdin.take().expect("stdin");
        // The plugin may exit before reading everything; a broken pipe is fine.
        let _ = w.write_all(stdin);
    }
    let out = child.wait_with_output().expect("wait ebpf-masq");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check_binary_rejects(stdin: &[u8]) -> Result<(), TestCaseError> {
    // Only inputs the parser rejects: a valid config would make ADD act on the node.
    let want = match parse_netconf(stdin) {
        Ok(_) => return Err(TestCaseError::reject("input is a valid config")),
        Err(e) => e,
    };
    let (rc, out, err) = run_add(stdin);
    let shown = String::from_utf8_lossy(stdin);
    prop_assert_eq!(rc, Some(1), "exit code for {:?}; stdout {:?} stderr {:?}", shown, out, err);
    // Exactly one JSON value on stdout, an object, and nothing else.
    let mut values = serde_json::Deserializer::from_str(&out).into_iter::<Value>();
    let first = match values.next() {
        Some(Ok(v)) => v,
        other => return Err(TestCaseError::fail(format!("stdout is not JSON ({other:?}): {out:?}"))),
    };
    prop_assert!(values.next().is_none(), "more than one JSON value on stdout: {:?}", out);
    prop_assert_eq!(out.trim_end().lines().count(), 1, "stdout is not one line: {:?}", out);
    let o = first.as_object().ok_or_else(|| TestCaseError::fail(format!("not an object: {out}")))?;
    let code = o.get("code").and_then(Value::as_u64);
    prop_assert!(code.is_some_and(|c| PARSE_CODES.contains(&(c as u32))), "code: {}", out);
    prop_assert_eq!(code, Some(u64::from(want.code)), "binary and library disagree: {}", out);
    prop_assert!(o.get("msg").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), "msg: {}", out);
    prop_assert!(o.get("cniVersion").and_then(Value::as_str).is_some(), "cniVersion: {}", out);
    Ok(())
}

proptest! {
    #![proptest_config(cases(12))]

    #[test]
    fn binary_add_random_stdin(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_binary_rejects(&b)?;
    }

    #[test]
    fn binary_add_damaged_config(v in valid_config(), es in proptest::collection::vec(byte_edit(), 1..3)) {
        let mut b = serde_json::to_vec(&v).expect("serialize");
        for e in &es {
            edit_bytes(&mut b, e);
        }
        check_binary_rejects(&b)?;
    }
}

#[test]
fn binary_add_fixed_garbage() {
    let cases: &[&[u8]] = &[
        b"",
        b"\0",
        b"null",
        b"[]",
        b"{}",
        b"{\"cniVersion\":\"1.0.0\"}",
        b"{\"cniVersion\":\"9.9.9\",\"name\":\"n\",\"type\":\"ebpf-masq\"}",
        b"{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"type\":\"ebpf-masq\",\"portRange\":\"0-1\"}",
        b"{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"type\":\"ebpf-masq\",\"bogus\":1}",
        b"\xef\xbb\xbf{}",
        b"\xff\xfe\xfd",
    ];
    for c in cases {
        if let Err(e) = check_binary_rejects(c) {
            panic!("{:?}: {e}", String::from_utf8_lossy(c));
        }
    }
    // Deep nesting and a large body: still one error object, no crash.
    let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    check_binary_rejects(deep.as_bytes()).expect("deep nesting");
    let big = format!("{{\"cniVersion\":\"1.0.0\",\"name\":\"{}\"", "x".repeat(4 << 20));
    check_binary_rejects(big.as_bytes()).expect("4 MiB truncated config");
}

/// The generators are worth their time: mutated configs reach every outcome (accepted,
/// and each error code), so the properties above are not only checking early exits.
#[test]
fn generators_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let json_mut = (valid_config(), proptest::collection::vec(mutation(), 1..3));
    let byte_mut = (valid_config(), proptest::collection::vec(byte_edit(), 1..3));
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..400 {
        let (mut v, ms) = json_mut.new_tree(&mut runner).expect("tree").current();
        for m in &ms {
            apply(&mut v, m);
        }
        let (v2, es) = byte_mut.new_tree(&mut runner).expect("tree").current();
        let mut b = serde_json::to_vec(&v2).expect("serialize");
        for e in &es {
            edit_bytes(&mut b, e);
        }
        for bytes in [serde_json::to_vec(&v).expect("serialize"), b] {
            let k = match parse_netconf(&bytes) {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("code {}", e.code),
            };
            *seen.entry(k).or_default() += 1;
        }
    }
    for (want, min) in [("ok", 20), ("code 1", 1), ("code 6", 20), ("code 7", 20)] {
        assert!(seen.get(want).copied().unwrap_or(0) >= min, "{want} reached too rarely: {seen:?}");
    }
}
