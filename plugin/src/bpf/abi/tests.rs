//! The ABI's two mirrors agree: every #define, enum member, struct size and member
//! offset of bpf/include/masq_abi.h against this module's Rust side, the structs
//! and map definitions as the compiled objects' BTF has them.

use std::collections::{BTreeMap, BTreeSet};

use super::btf::Btf;
use super::*;

const HEADER: &str = include_str!("../../../../bpf/include/masq_abi.h");

/// The objects plugin/build.rs compiled (the loader embeds the same files).
const OBJECTS: [(&str, &[u8]); 3] = [
    ("veth.o", include_bytes!(concat!(env!("OUT_DIR"), "/veth.o"))),
    ("uplink.o", include_bytes!(concat!(env!("OUT_DIR"), "/uplink.o"))),
    ("placeholder.o", include_bytes!(concat!(env!("OUT_DIR"), "/placeholder.o"))),
];

/// (C name, mirror's value) for mirrors named like their #define.
macro_rules! same {
    ($($n:ident),* $(,)?) => { [$((stringify!($n), $n as u64)),*] };
}
/// (C name, mirror's value) for enum members mirrored in a module without their prefix.
macro_rules! prefixed {
    ($pre:literal, $m:ident: $($n:ident),* $(,)?) => { [$((concat!($pre, stringify!($n)), $m::$n as u64)),*] };
}

/// Every #define and enum member of the header that has a Rust mirror, with the
/// mirror's value. A header name neither here nor in C_ONLY fails the test.
fn mirrored() -> Vec<(&'static str, u64)> {
    let mut v = vec![("MASQ_LAYOUT_VERSION", LAYOUT_VERSION as u64)];
    v.extend(same![
        MASQ_F_FAST_PATH, MASQ_F_OPEN_MAPPINGS, FP_CB_MARK, NAT_FILTER_AD, NAT_FILTER_EI, NAT_FILTER_MASK,
        POD_L2_F_HAS_MAC, POD_F_NAT_OUTGOING, UPLINK_F_L3, UPLINK_F_HAS_V4, UPLINK_F_HAS_V6, UPLINK_F_POOL4,
        UPLINK_F_POOL6, UPLINK_F_PRESENT, MASQ_POOL_MAX, UPLINKS_DIRECT, EXCL_NATIVE_ROUTING, EXCL_NON_MASQ,
        EXCL_LINK_LOCAL, MAX_RULES, RULE_F_TO_ADDRESS, NAT_SHARDS_MAX, NAT_SHARD_ENTRIES, NAT_MAP_FLAGS,
        NAT_F_TCP_CLOSING, NAT_F_BY_RULE, NAT_F_FAST, NAT_F_INBOUND, NAT_F_FIN, NAT_F_RST, NAT_F_OPEN, NAT_F_HOST,
        NAT_C_FIN_FIRST, NAT_C_PEER_FIN, NAT_C_ACKED_PEER,
        NAT_HOT_MAX, NAT_HOT_WORDS, NAT_HOT_IDLE_S, NAT_HOT_SLOTS, NAT_SHARE_RESERVE, REFUSALS_MAX, PORT_COUNTS_MAX, PORT_LIMIT_SHIFT, NAT_GC_ARMED, NAT_GC_NEW4, NAT_GC_NEW6, NAT_GC_NEW_HOST, NAT_GC_WALK6, RESERVED_PORTS_MAX, VETH_F_ADDR4,
        VETH_F_ADDR6, ATT_ID_LEN, ATT_IFNAME_LEN, ATT_MAX_ADDRS, ATT_F_NAT_OUTGOING, POD_META_NS_LEN,
        POD_META_NAME_LEN, POD_META_ANN_LEN, POD_HOST_PORTS_MAX, HOST_PORTS_MAX, EGRESS_POLICIES_MAX,
        EGRESS_ENTRIES_MAX, EGRESS_F_NO_NAT, EGRESS_NAME_LEN, EGRESS_SPEC_LEN,
    ]);
    v.extend(prefixed!["CNT_", counter:
        SNAT_PKTS_V4, SNAT_BYTES_V4, RNAT_PKTS_V4, RNAT_BYTES_V4, SNAT_PKTS_V6, SNAT_BYTES_V6, RNAT_PKTS_V6,
        RNAT_BYTES_V6, NAT_CREATED, NAT_RECLAIMED, NAT_EXPIRED, ALLOC_FAIL, SKIP_EXCLUDED, SKIP_NO_NAT_OUTGOING,
        ICMP_ERR_IN, ICMP_ERR_OUT, FRAGS, FP_EGRESS, FP_INGRESS, FP_FALLBACK, PORT_PROBES, NAT_GC_ARM_FAILED,
        INBOUND_CREATED, INBOUND_PKTS, INBOUND_UNTRACKED, MAP_REUSED, MAP_PRESERVED, NAT_FINISHED_REUSED, NAT_UNANSWERED_REUSED,
        NAT_HOT_SCANS, NAT_HOT_FOUND,
        FILTER_ADMITTED, HOST_TRACKED, HOST_REMAPPED, HOST_SOCKET_AVOIDED, MAX,
    ]);
    v.extend(prefixed!["DROP_", drop_reason:
        SPOOFED_SOURCE, NO_PORT, NAT_INSERT, FRAGMENT, MALFORMED, CSUM, UNSUPPORTED_PROTO, FRAG_NO_STATE,
        NAT_FULL, OVER_SHARE, OVER_LIMIT, MAX,
    ]);
    v
}

/// Header names the Rust side deliberately has no mirror of, and why.
const C_ONLY: &[(&str, &str)] = &[
    ("NAT_F_ENDS", "the programs' mask of NAT_F_FIN | NAT_F_RST (both mirrored)"),
    ("NAT_GC_SEEN_HOST", "the sweep's own bookkeeping in nat_gc.seen"),
    ("TUPLE_LIKE", "a macro of the size checks"),
];

/// Kernel constants (linux/bpf.h) the header's defines are made of. The objects
/// confirm the result: `map_names_flags_and_limits_match_the_objects`.
const KERNEL: &[(&str, u64)] = &[("BPF_F_NO_PREALLOC", 1)];

/// The header's code: comments dropped, continued lines joined.
fn header_code() -> String {
    let (mut out, mut rest) = (String::new(), HEADER);
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = &rest[i + rest[i..].find("*/").unwrap() + 2..];
    }
    out.push_str(rest);
    out.replace("\\\n", " ")
}

/// Every `#define` of the header but its include guard: name and value text
/// (None for a function-like macro).
fn header_defines() -> Vec<(String, Option<String>)> {
    header_code()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#define "))
        .map(|d| {
            let name: String = d.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let rest = &d[name.len()..];
            (name, (!rest.starts_with('(')).then(|| rest.trim().to_string()))
        })
        .filter(|(n, _)| n != "MASQ_ABI_H")
        .collect()
}

/// The value of a define's text: numbers (any U/L suffix), names defined before
/// it and `|`. Anything else panics, so a new kind of define teaches this first.
fn eval(text: &str, known: &BTreeMap<String, u64>) -> u64 {
    text.replace(['(', ')'], " ")
        .split('|')
        .map(|t| {
            let t = t.trim();
            let digits = t.trim_end_matches(['u', 'U', 'l', 'L']);
            match digits.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => digits.parse().ok(),
            }
            .or_else(|| known.get(t).copied())
            .unwrap_or_else(|| panic!("cannot evaluate {t:?} in {text:?}: teach eval()"))
        })
        .fold(0, |a, b| a | b)
}

/// Every enum member of the header with its value.
fn header_enum_members() -> Vec<(String, u64)> {
    let code = header_code();
    let mut out = Vec::new();
    for part in code.split("enum ").skip(1) {
        let body = &part[part.find('{').unwrap() + 1..part.find('}').unwrap()];
        let mut next = 0;
        for m in body.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let (name, v) = match m.split_once('=') {
                Some((n, v)) => (n.trim(), eval(v, &BTreeMap::new())),
                None => (m, next),
            };
            out.push((name.to_string(), v));
            next = v + 1;
        }
    }
    out
}

/// Every #define and enum member of the header has a Rust constant of the same
/// value (or is on C_ONLY), and every mirror names something the header has.
#[test]
fn constants_match_the_c_header() {
    let table = mirrored();
    let rust: BTreeMap<&str, u64> = table.iter().copied().collect();
    assert_eq!(rust.len(), table.len(), "a name twice in mirrored()");
    let c_only: BTreeSet<&str> = C_ONLY.iter().map(|(n, _)| *n).collect();
    let mut known: BTreeMap<String, u64> = KERNEL.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let mut seen = BTreeSet::new();
    let mut wrong = Vec::new();
    let mut check = |name: &str, v: Option<u64>| {
        seen.insert(name.to_string());
        match (rust.get(name), v) {
            (Some(&r), Some(v)) if r == v => {}
            (Some(&r), Some(v)) => wrong.push(format!("{name}: header {v:#x}, abi.rs {r:#x}")),
            (None, _) if c_only.contains(name) => {}
            (None, v) => {
                let v = v.map_or("a macro".to_string(), |v| format!("{v:#x}"));
                wrong.push(format!("{name} ({v}) has no mirror: add one to abi.rs and mirrored(), or to C_ONLY"))
            }
            (Some(_), None) => wrong.push(format!("{name} is a macro, not a value")),
        }
    };
    for (name, text) in header_defines() {
        let v = text.map(|t| eval(&t, &known));
        if let Some(v) = v {
            known.insert(name.clone(), v);
        }
        check(&name, v);
    }
    for (name, v) in header_enum_members() {
        check(&name, Some(v));
    }
    for name in rust.keys().chain(&c_only) {
        if !seen.contains(*name) {
            wrong.push(format!("{name} is not in masq_abi.h any more"));
        }
    }
    assert!(wrong.is_empty(), "masq_abi.h and abi.rs disagree:\n{}", wrong.join("\n"));
    assert!(seen.len() > 90, "the header parser found only {seen:?}");
}

/// One struct of the header and its Rust mirror: size and (C name, offset) of
/// each field; `lead`: a leading `__u32` member the mirror leaves to aya (an
/// LPM key's prefixlen, which `lpm_trie::Key` holds); `fields` None: size only.
struct Mirror {
    c: &'static str,
    size: usize,
    lead: Option<&'static str>,
    fields: Option<Vec<(&'static str, usize)>>,
}

macro_rules! cname {
    ($f:ident) => { stringify!($f) };
    ($f:ident, $c:literal) => { $c };
}
macro_rules! mirror {
    ($c:literal $([$lead:ident])? = $t:ty { $($f:ident $(= $cf:literal)?),* $(,)? }) => {
        Mirror {
            c: $c,
            size: std::mem::size_of::<$t>(),
            lead: None $(.or(Some(stringify!($lead))))?,
            fields: Some(vec![$((cname!($f $(, $cf)?), std::mem::offset_of!($t, $f))),*]),
        }
    };
}

fn mirrors() -> Vec<Mirror> {
    use aya::maps::lpm_trie::Key;
    vec![
        mirror!("masq_config" = NodeConfig {
            port_min, port_max, flags, tcp_timeout_s, tcp_closing_timeout_s, udp_timeout_s, icmp_timeout_s,
            nat_seed, nat_shards, skip_min, skip_max, udp_one_shot_timeout_s,
        }),
        mirror!("pod_l2" = PodL2 { pod_mac, gw_mac, l3_ifindex, flags }),
        mirror!("pod_info" = PodInfo { ifindex, flags, l2, egress }),
        mirror!("uplink_info" = UplinkInfo { masq_v4, flags, masq_v6 }),
        mirror!("masq_pool" = MasqPool { len4, len6, v4, v6 }),
        mirror!("egress4_key" [prefixlen] = Egress4Data { set, daddr }),
        mirror!("egress6_key" [prefixlen] = Egress6Data { set, daddr }),
        mirror!("egress_hit" = EgressHit { policy, flags }),
        mirror!("egress_stats" = EgressStats { packets, bytes, flows, unmasqueraded }),
        mirror!("egress_policy" = EgressPolicyInfo { used, flags, name, spec }),
        Mirror { c: "lpm4_key", size: std::mem::size_of::<Key<[u8; 4]>>(), lead: None, fields: None },
        Mirror { c: "lpm6_key", size: std::mem::size_of::<Key<[u8; 16]>>(), lead: None, fields: None },
        mirror!("excl_info" = ExclInfo { reason, index }),
        mirror!("rule4_key" [prefixlen] = Rule4Data { ifindex_be = "ifindex", saddr }),
        mirror!("rule_info" = RuleInfo { id, flags, to_v4, pad }),
        mirror!("rule_except4_key" [prefixlen] = RuleExcept4Data { rule_id_be = "rule_id", daddr }),
        mirror!("rule_stats" = RuleStats { packets, bytes }),
        mirror!("nat4_key" = Nat4Key { saddr, daddr, sport, dport, proto, pad }),
        mirror!("nat4_entry" = Nat4Entry {
            addr, port, flags, policy, ifindex, rule_id, fin_end, close, pad, created_ns, last_seen_ns, packets, bytes,
        }),
        mirror!("rule6_key" [prefixlen] = Rule6Data { ifindex_be = "ifindex", saddr }),
        mirror!("rule6_info" = Rule6Info { id, flags, to_v6 }),
        mirror!("rule_except6_key" [prefixlen] = RuleExcept6Data { rule_id_be = "rule_id", daddr }),
        mirror!("nat6_key" = Nat6Key { saddr, daddr, sport, dport, proto, pad }),
        mirror!("nat6_entry" = Nat6Entry {
            addr, port, flags, policy, ifindex, rule_id, fin_end, close, pad, created_ns, last_seen_ns, packets, bytes,
        }),
        mirror!("nat4_ep" = Nat4Ep { addr, port, proto, pad }),
        mirror!("nat4_bind" = Nat4Bind { addr, port, pad }),
        mirror!("nat6_ep" = Nat6Ep { addr, port, proto, pad }),
        mirror!("nat6_bind" = Nat6Bind { addr, port, pad }),
        mirror!("nat4_open" = Nat4Open { addr, port, filter, flags, ifindex, rule_id, last_seen_ns }),
        mirror!("nat6_open" = Nat6Open { addr, port, filter, flags, ifindex, rule_id, pad, last_seen_ns }),
        mirror!("nat4_permit_key" = Nat4PermitKey { remote, addr, port, proto, pad }),
        mirror!("nat4_permit" = Nat4Permit { pod, pad, last_seen_ns }),
        mirror!("nat6_permit_key" = Nat6PermitKey { remote, addr, port, proto, pad }),
        mirror!("nat6_permit" = Nat6Permit { pod, last_seen_ns }),
        mirror!("nat_gc" = NatGc {
            timer, armed, last_run_ns, last_checked, runs, cycle_checked, cycle6_checked, last_cycle_checked,
            cycles, pos, walk, seen, last_run_took_ns, max_run_took_ns, hosts, hot,
        }),
        mirror!("nat_hot_key" = NatHotKey { nat_addr, remote, rport, proto, v6 }),
        mirror!("nat_hot_src" = NatHotSrc { id, held }),
        mirror!("nat_hot" = NatHot { scanned_ns, used_ns, held, pad, src, bits }),
        mirror!("refusal_key" = RefusalKey { addr, v6 }),
        mirror!("refusals" = Refusals { no_port, over_share, over_limit }),
        mirror!("port_count_key" = PortCountKey { src, nat_addr, remote, rport, proto, v6 }),
        mirror!("port_range" = PortRange { lo, hi }),
        mirror!("frag4_key" = Frag4Key { saddr, daddr, id, proto, pad }),
        mirror!("frag6_key" = Frag6Key { saddr, daddr, id, proto, pad }),
        mirror!("frag_ports" = FragPorts { sport, dport, proto, pad }),
        mirror!("pod_stats" = PodStats { packets, bytes, spoofed }),
        mirror!("veth_info" = VethInfo { stats, pod, addr4, addr6, flags }),
        mirror!("attachment_key" = AttachmentKey { container_id, ifname }),
        mirror!("attachment_info" = AttachmentInfo {
            veth_ifindex, flags, n_v4, n_v6, v4, v6, created_ns, veth_name,
        }),
        mirror!("host_port" = HostPort { port, proto, pad }),
        mirror!("pod_meta" = PodMeta { k8s_namespace, k8s_name, annotations, host_ports }),
    ]
}

/// The names of the header's `struct NAME {` definitions.
fn header_structs() -> BTreeSet<String> {
    let code = header_code();
    code.split("struct ")
        .skip(1)
        .filter_map(|s| {
            let name: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            s[name.len()..].trim_start().starts_with('{').then_some(name)
        })
        .collect()
}

/// Every struct of the header has a mirror of its size, with its members at the
/// offsets the compiled objects' BTF gives them, in order and none missing.
#[test]
fn struct_layouts_match_the_objects_btf() {
    let btf: Vec<_> = OBJECTS.iter().map(|(name, elf)| (*name, Btf::of_object(elf).structs())).collect();
    let mirrors = mirrors();
    let names: BTreeSet<String> = mirrors.iter().map(|m| m.c.to_string()).collect();
    assert_eq!(names, header_structs(), "a struct of masq_abi.h without a mirror in mirrors(), or the reverse");
    let mut wrong = Vec::new();
    for m in &mirrors {
        let mut found = false;
        for (obj, (size, members)) in btf.iter().filter_map(|(obj, s)| Some((obj, s.get(m.c)?))) {
            found = true;
            let lead = if m.lead.is_some() { 4 } else { 0 };
            if *size as usize != m.size + lead {
                wrong.push(format!("{obj}: struct {} is {size} bytes, its mirror {} (+{lead})", m.c, m.size));
            }
            let Some(fields) = &m.fields else { continue };
            let want: Vec<(String, u32)> = m
                .lead
                .map(|l| (l.to_string(), 0))
                .into_iter()
                .chain(fields.iter().map(|(n, off)| (n.to_string(), (off + lead) as u32)))
                .collect();
            let got: Vec<(String, u32)> = members.iter().map(|x| (x.name.clone(), x.offset)).collect();
            if got != want {
                wrong.push(format!("{obj}: struct {}: members {got:?}, the mirror's {want:?}", m.c));
            }
        }
        if !found {
            wrong.push(format!("struct {} is in no object's BTF (no map or struct uses it)", m.c));
        }
    }
    assert!(wrong.is_empty(), "masq_abi.h and abi.rs disagree:\n{}", wrong.join("\n"));
}

/// The maps the objects pin are ALL_MAPS, and the flags and sizes the Rust side
/// also knows (NAT_MAP_FLAGS, the limits it indexes or fills them by) are theirs.
#[test]
fn map_names_flags_and_limits_match_the_objects() {
    let btf: Vec<Btf> = OBJECTS.iter().map(|(_, elf)| Btf::of_object(elf)).collect();
    // Pinned by name (LIBBPF_PIN_BY_NAME, 1); a per-object scratch map is not shared.
    let pinned: BTreeSet<String> =
        btf.iter().flat_map(|b| b.vars(".maps").into_iter().filter(|m| b.map_uint(m, "pinning") == Some(1))).collect();
    let all: BTreeSet<String> = ALL_MAPS.iter().map(|m| m.to_string()).collect();
    assert_eq!(pinned, all, "the objects' pinned maps and ALL_MAPS");
    let uint = |map: &str, field: &str| btf.iter().find_map(|b| b.map_uint(map, field));
    let cases = [
        (MAP_NAT4_REV, "map_flags", NAT_MAP_FLAGS),
        (MAP_NAT6_REV, "map_flags", NAT_MAP_FLAGS),
        (MAP_NAT4_FWD, "max_entries", NAT_SHARDS_MAX),
        (MAP_NAT6_FWD, "max_entries", NAT_SHARDS_MAX),
        (MAP_COUNTERS, "max_entries", counter::MAX),
        (MAP_DROPS, "max_entries", drop_reason::MAX),
        (MAP_RULES4, "max_entries", MAX_RULES),
        (MAP_RULES6, "max_entries", MAX_RULES),
        (MAP_RULE_STATS, "max_entries", MAX_RULES),
        (MAP_UPLINKS_DIRECT, "max_entries", UPLINKS_DIRECT),
        (MAP_RESERVED_PORTS, "max_entries", RESERVED_PORTS_MAX),
        (MAP_HOST_PORTS, "max_entries", HOST_PORTS_MAX),
        (MAP_EGRESS4, "max_entries", EGRESS_ENTRIES_MAX),
        (MAP_EGRESS6, "max_entries", EGRESS_ENTRIES_MAX),
        (MAP_EGRESS_STATS, "max_entries", EGRESS_POLICIES_MAX),
        (MAP_EGRESS_POLICIES, "max_entries", EGRESS_POLICIES_MAX),
        (MAP_MASQ_POOL, "max_entries", 1 + EGRESS_POLICIES_MAX),
    ];
    for (map, field, want) in cases {
        assert_eq!(uint(map, field), Some(want), "{map}.{field}");
    }
}

#[test]
fn veth_entry_holds_the_first_address_of_each_family() {
    let pod = PodInfo { ifindex: 7, flags: POD_F_NAT_OUTGOING, ..Default::default() };
    let a: Vec<std::net::IpAddr> =
        ["fd00::5", "10.1.0.5", "10.1.0.8", "fd00::8"].iter().map(|s| s.parse().unwrap()).collect();
    let v = VethInfo::new(pod, &a);
    assert_eq!((v.addr4, v.flags), ([10, 1, 0, 5], VETH_F_ADDR4 | VETH_F_ADDR6));
    assert_eq!(std::net::Ipv6Addr::from(v.addr6), "fd00::5".parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!((v.pod, v.stats), (pod, PodStats::default()));
    let v4 = VethInfo::new(pod, &a[1..3]);
    assert_eq!((v4.addr4, v4.addr6, v4.flags), ([10, 1, 0, 5], [0; 16], VETH_F_ADDR4));
    assert_eq!(VethInfo::new(pod, &[]).flags, 0);
    // Letting go of an address: only the one it holds, and only that one.
    let a4: std::net::IpAddr = "10.1.0.5".parse().unwrap();
    let gone = v.without_addr(a4);
    assert_eq!((gone.addr4, gone.flags, gone.addr6), ([0; 4], VETH_F_ADDR6, v.addr6));
    assert_eq!(v.without_addr("10.1.0.8".parse().unwrap()), v);
    assert_eq!(v.without_addr("fd00::5".parse().unwrap()).flags, VETH_F_ADDR4);
}

#[test]
fn a_pool_pairs_each_source_with_one_address_and_goes_round_it() {
    let mut p = MasqPool { len4: 3, len6: 2, ..Default::default() };
    for i in 0..3u8 {
        p.v4[i as usize] = [192, 0, 2, 10 + i];
    }
    p.v6[0] = "2001:db8::a".parse::<std::net::Ipv6Addr>().unwrap().octets();
    p.v6[1] = "2001:db8::b".parse::<std::net::Ipv6Addr>().unwrap().octets();
    let pick = |p: &MasqPool, s: &str| p.pick(s.parse().unwrap()).map(|a| a.to_string());
    // Sequential pod addresses go round the pool; a source always gets the same one.
    let got: Vec<_> = (3..9).map(|h| pick(&p, &format!("10.1.0.{h}")).unwrap()).collect();
    // 10.1.0.3 is 167837699, 2 mod 3.
    assert_eq!(got, ["192.0.2.12", "192.0.2.10", "192.0.2.11", "192.0.2.12", "192.0.2.10", "192.0.2.11"]);
    assert_eq!(pick(&p, "10.1.0.4"), pick(&p, "10.1.0.4"));
    assert_eq!(pick(&p, "fd00::4").as_deref(), Some("2001:db8::a"));
    assert_eq!(pick(&p, "fd00::5").as_deref(), Some("2001:db8::b"));
    // One address of a family (or none): no pool, the uplink's address.
    p.len4 = 1;
    assert_eq!(pick(&p, "10.1.0.3"), None);
}

#[test]
fn shard_count_follows_the_table_size() {
    let cases = [(0, 1), (1024, 1), (2047, 1), (2048, 2), (4096, 4), (6000, 4), (65536, 64), (1 << 20, 64)];
    for (nat_max, shards) in cases {
        assert_eq!(shards_for(nat_max), shards, "natMaxEntries {nat_max}");
    }
}

#[test]
fn shard_hash_stays_in_range_and_spreads() {
    let mut seen = [0u32; 64];
    for i in 0u32..6400 {
        let key = [i.to_ne_bytes(), 7u32.to_ne_bytes(), (i * 31).to_ne_bytes(), 17u32.to_ne_bytes()].concat();
        let s = nat_shard(&key, 0x1234_5678, 64);
        seen[s as usize] += 1;
    }
    // 100 a shard expected: none empty, none more than twice that.
    assert!(seen.iter().all(|&n| (1..200).contains(&n)), "{seen:?}");
    assert_eq!(nat_shard(&[0u8; 40], 9, 1), 0, "one shard: always 0");
    // The seed changes where a key goes (for most keys).
    let moved = (0u32..64).filter(|i| {
        let key = [i.to_ne_bytes(); 4].concat();
        nat_shard(&key, 1, 64) != nat_shard(&key, 2, 64)
    });
    assert!(moved.count() > 48);
}

/// The shard hash's keys are the one table both sides compute with that is not
/// in the ABI header (the programs keep it in .rodata): the C initializer and
/// the Rust copy must be the same words in the same order.
#[test]
fn shard_hash_keys_match_the_c_table() {
    const SHARD_H: &str = include_str!("../../../../bpf/lib/nat_shard.h");
    let start = SHARD_H.find("nat_shard_keys[10] = {").expect("nat_shard_keys in nat_shard.h");
    let body = &SHARD_H[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
    let c: Vec<u32> = body
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert_eq!(c, super::nat_tables::NAT_SHARD_KEYS.to_vec());
}
