//! The generators of the property tests: interesting strings and numbers, JSON of our
//! keys, valid configs and their mutations, byte edits, prevResult-like values.

use super::*;

pub(crate) const CONFIG_KEYS: &[&str] = &[
    "cniVersion", "cniVersions", "name", "type", "prevResult", "runtimeConfig", "capabilities", "args",
    "dns", "ipam", "cni.dev/valid-attachments", "cni.dev/attachments", "disableCheck", "disableGC",
    "natOutgoing", "nativeRoutingCIDR", "nonMasqueradeCIDRs", "masqLinkLocal", "masqLinkLocalIPv6",
    "egressInterfaces", "masqueradeAddress", "portRange", "nodePortRange", "pinPath", "logLevel", "logFile",
    "masqueradeRules", "natMaxEntries", "fastPath", "serviceCIDRs", "plugins",
    "source", "outInterface", "except", "toAddress", "containerID", "ifname",
    "egressPolicies", "namespaces", "pods", "destinations", "ipMasqAgent", "file", "fileAbsent", "podPortLimit",
];

pub(crate) const PREV_KEYS: &[&str] = &[
    "cniVersion", "interfaces", "ips", "routes", "dns", "name", "mac", "sandbox", "address", "gateway",
    "interface", "version", "dst", "gw",
];

/// Strings near what the parsers look for, plus anything at all.
pub(crate) fn interesting_string() -> BoxedStrategy<String> {
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

pub(crate) fn key_string(keys: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        4 => proptest::sample::select(keys).prop_map(str::to_owned),
        1 => interesting_string(),
    ]
    .boxed()
}

pub(crate) fn arb_number() -> BoxedStrategy<Value> {
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
pub(crate) fn arb_json(keys: &'static [&'static str]) -> BoxedStrategy<Value> {
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

pub(crate) fn v4_net() -> impl Strategy<Value = IpNetwork> {
    (any::<u32>(), 0u8..=32).prop_map(|(a, p)| {
        let n = IpNetwork::new(Ipv4Addr::from(a).into(), p).expect("prefix <= 32");
        IpNetwork::new(n.network(), p).expect("prefix <= 32")
    })
}

pub(crate) fn v6_net() -> impl Strategy<Value = IpNetwork> {
    (any::<u128>(), 0u8..=128).prop_map(|(a, p)| {
        let n = IpNetwork::new(Ipv6Addr::from(a).into(), p).expect("prefix <= 128");
        IpNetwork::new(n.network(), p).expect("prefix <= 128")
    })
}

pub(crate) fn any_net() -> impl Strategy<Value = IpNetwork> {
    prop_oneof![v4_net(), v6_net()]
}

pub(crate) fn unicast_v4() -> impl Strategy<Value = Ipv4Addr> {
    (1u8..=223, any::<[u8; 3]>())
        .prop_filter("not loopback", |(a, _)| *a != 127)
        .prop_map(|(a, r)| Ipv4Addr::new(a, r[0], r[1], r[2]))
}

pub(crate) fn unicast_v6() -> impl Strategy<Value = Ipv6Addr> {
    any::<u64>().prop_map(|x| Ipv6Addr::from((0x2001_0db8u128 << 96) | u128::from(x) | 1))
}

pub(crate) fn ifname() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_.-]{0,14}".prop_filter("not . or ..", |s| s != "." && s != "..")
}

pub(crate) fn cidr_list(s: impl Strategy<Value = IpNetwork>) -> impl Strategy<Value = Value> {
    proptest::collection::vec(s, 0..4).prop_map(|v| json!(v.iter().map(|n| n.to_string()).collect::<Vec<_>>()))
}

pub(crate) fn rule() -> impl Strategy<Value = Value> {
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
pub(crate) fn egress_policies() -> impl Strategy<Value = Value> {
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
pub(crate) fn valid_config() -> BoxedStrategy<Value> {
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
pub(crate) enum Mutation {
    Remove(usize),
    Replace(usize, Value),
    Insert(String, Value),
    /// Act on the n-th object or array nested below instead of the top level.
    Descend(usize, Box<Mutation>),
}

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
    let base = prop_oneof![
        any::<usize>().prop_map(Mutation::Remove),
        (any::<usize>(), arb_json(CONFIG_KEYS)).prop_map(|(i, v)| Mutation::Replace(i, v)),
        (key_string(CONFIG_KEYS), arb_json(CONFIG_KEYS)).prop_map(|(k, v)| Mutation::Insert(k, v)),
    ];
    base.prop_recursive(3, 8, 1, |inner| {
        (any::<usize>(), inner).prop_map(|(i, m)| Mutation::Descend(i, Box::new(m)))
    })
}

pub(crate) fn apply(v: &mut Value, m: &Mutation) {
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
pub(crate) enum ByteEdit {
    Truncate(usize),
    Set(usize, u8),
    InsertBytes(usize, Vec<u8>),
    Delete(usize, usize),
    /// Repeat a top-level key (a duplicate must be rejected, never silently win).
    DuplicateKey(String, String),
}

pub(crate) fn byte_edit() -> impl Strategy<Value = ByteEdit> {
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

pub(crate) fn edit_bytes(b: &mut Vec<u8>, e: &ByteEdit) {
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

pub(crate) fn prev_result_like() -> impl Strategy<Value = Value> {
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
