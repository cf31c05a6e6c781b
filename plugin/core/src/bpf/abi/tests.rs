//! The generated view and the compiled objects agree: every struct bindgen made
//! from bpf/include/ has the size and member offsets the objects' BTF gives it,
//! every #define became a Rust constant, and the map definitions are the ones the
//! Rust side names and sizes.

use std::collections::BTreeSet;

use super::btf::Btf;
use super::generated::{LAYOUTS, MACROS};
use super::*;

/// The objects plugin/core/build.rs compiled (the loader embeds the same files).
const OBJECTS: [(&str, &[u8]); 3] = [
    ("veth.o", include_bytes!(concat!(env!("OUT_DIR"), "/veth.o"))),
    ("uplink.o", include_bytes!(concat!(env!("OUT_DIR"), "/uplink.o"))),
    ("placeholder.o", include_bytes!(concat!(env!("OUT_DIR"), "/placeholder.o"))),
];

/// The ABI headers' code (bpf/include/*.h): comments dropped, continued lines joined.
fn headers_code() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bpf/include");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut out = String::new();
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "h")) {
        let mut rest = std::fs::read_to_string(f).unwrap();
        while let Some(i) = rest.find("/*") {
            out.push_str(&rest[..i]);
            rest = rest[i + rest[i..].find("*/").unwrap() + 2..].to_string();
        }
        out.push_str(&rest);
    }
    out.replace("\\\n", " ")
}

/// Every value `#define` of the headers but their include guards.
fn header_value_defines() -> Vec<String> {
    headers_code()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#define "))
        .filter_map(|d| {
            let name: String = d.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            (!d[name.len()..].starts_with('(') && !name.ends_with("_H")).then_some(name)
        })
        .collect()
}

/// bindgen leaves out a #define it cannot evaluate, silently: every one of the
/// headers' must have become a constant.
#[test]
fn every_define_of_the_headers_is_generated() {
    let defines = header_value_defines();
    assert!(defines.len() > 60, "the header parser found only {defines:?}");
    let missing: Vec<_> = defines.iter().filter(|d| !MACROS.contains(&d.as_str())).collect();
    assert!(missing.is_empty(), "#defines bindgen did not generate: {missing:?}");
}

/// Every generated struct has the size and the members, at the same offsets and
/// in the same order, that the compiled objects' BTF gives it (the byte arrays
/// standing in for `__be32` and `struct in6_addr` are laid out like them), and
/// aya's LPM key is the header's.
#[test]
fn struct_layouts_match_the_objects_btf() {
    let btf: Vec<_> = OBJECTS.iter().map(|(name, elf)| (*name, Btf::of_object(elf).structs())).collect();
    assert!(LAYOUTS.len() > 50, "bindgen generated only {} structs", LAYOUTS.len());
    let mut wrong = Vec::new();
    for (c, size, fields) in LAYOUTS {
        let mut found = false;
        for (obj, (btf_size, members)) in btf.iter().filter_map(|(obj, s)| Some((obj, s.get(*c)?))) {
            found = true;
            if *btf_size as usize != *size {
                wrong.push(format!("{obj}: struct {c} is {btf_size} bytes, the generated one {size}"));
            }
            let want: Vec<(String, u32)> = fields.iter().map(|(n, off)| (n.to_string(), *off as u32)).collect();
            let got: Vec<(String, u32)> = members.iter().map(|x| (x.name.clone(), x.offset)).collect();
            if got != want {
                wrong.push(format!("{obj}: struct {c}: members {got:?}, the generated {want:?}"));
            }
        }
        if !found {
            wrong.push(format!("struct {c} is in no object's BTF (no map or struct uses it)"));
        }
    }
    assert!(wrong.is_empty(), "the generated ABI and the objects disagree:\n{}", wrong.join("\n"));
    use aya::maps::lpm_trie::Key;
    assert_eq!(std::mem::size_of::<Key<[u8; 4]>>(), std::mem::size_of::<super::generated::lpm4_key>());
    assert_eq!(std::mem::size_of::<Key<[u8; 16]>>(), std::mem::size_of::<super::generated::lpm6_key>());
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
        (MAP_POLICY_DST4, "max_entries", POLICY_DSTS_MAX),
        (MAP_POLICY_DST6, "max_entries", POLICY_DSTS_MAX),
        (MAP_POLICY_STATS, "max_entries", EGRESS_POLICIES_MAX),
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
    const SHARD_H: &str = include_str!("../../../../../bpf/lib/nat/shard.h");
    let start = SHARD_H.find("nat_shard_keys[10] = {").expect("nat_shard_keys in nat/shard.h");
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
