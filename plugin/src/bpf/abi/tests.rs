//! The ABI's two mirrors agree: bpf/include/masq_abi.h and this module's Rust side.

use super::*;

const HEADER: &str = include_str!("../../../../bpf/include/masq_abi.h");

/// `#define NAME value` of the C header.
fn define(name: &str) -> u32 {
    let line = HEADER.lines().find(|l| l.split_whitespace().take(2).eq(["#define", name])).unwrap();
    let v = line.split_whitespace().nth(2).unwrap();
    match v.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).unwrap(),
        None => v.parse().unwrap(),
    }
}

/// The members of a C enum before its `<last>` sentinel.
fn enum_members(name: &str, last: &str) -> Vec<String> {
    let body = HEADER.split(&format!("enum {name} {{")).nth(1).unwrap();
    let body = body.split(last).next().unwrap();
    body.lines()
        .map(|l| l.split("/*").next().unwrap().trim().trim_end_matches(','))
        .filter(|l| !l.is_empty())
        .map(|l| l.split('=').next().unwrap().trim().to_string())
        .collect()
}

/// The two mirrors of the ABI agree on what sizes cannot catch: the layout
/// version, the shard limits and the number of counters and drop reasons.
#[test]
fn constants_match_the_c_header() {
    assert_eq!(define("MASQ_LAYOUT_VERSION"), LAYOUT_VERSION);
    assert_eq!(define("NAT_SHARDS_MAX"), NAT_SHARDS_MAX);
    assert_eq!(define("NAT_SHARD_ENTRIES"), NAT_SHARD_ENTRIES);
    assert_eq!(define("UPLINKS_DIRECT"), UPLINKS_DIRECT);
    assert_eq!(define("VETH_F_ADDR4"), VETH_F_ADDR4);
    assert_eq!(define("VETH_F_ADDR6"), VETH_F_ADDR6);
    assert_eq!(define("NAT_F_INBOUND"), NAT_F_INBOUND as u32);
    assert_eq!((define("NAT_F_FIN"), define("NAT_F_RST")), (NAT_F_FIN as u32, NAT_F_RST as u32));
    let counters = enum_members("masq_counter", "CNT_MAX");
    assert_eq!(counters.len(), counter::MAX as usize, "{counters:?}");
    assert_eq!(counters[counter::PORT_PROBES as usize], "CNT_PORT_PROBES");
    assert_eq!(counters[counter::NAT_GC_ARM_FAILED as usize], "CNT_NAT_GC_ARM_FAILED");
    assert_eq!(counters[counter::INBOUND_UNTRACKED as usize], "CNT_INBOUND_UNTRACKED");
    assert_eq!(counters[counter::MAP_PRESERVED as usize], "CNT_MAP_PRESERVED");
    assert_eq!(counters[counter::NAT_FINISHED_REUSED as usize], "CNT_NAT_FINISHED_REUSED");
    assert_eq!(counters[counter::FILTER_ADMITTED as usize], "CNT_FILTER_ADMITTED");
    assert_eq!((define("NAT_FILTER_AD"), define("NAT_FILTER_EI")), (NAT_FILTER_AD, NAT_FILTER_EI));
    assert_eq!(define("MASQ_F_OPEN_MAPPINGS"), MASQ_F_OPEN_MAPPINGS);
    assert_eq!(define("NAT_F_OPEN"), NAT_F_OPEN as u32);
    assert_eq!(define("NAT_F_HOST"), NAT_F_HOST as u32);
    assert_eq!(define("MASQ_POOL_MAX") as usize, MASQ_POOL_MAX);
    assert_eq!((define("POD_HOST_PORTS_MAX") as usize, define("HOST_PORTS_MAX")), (POD_HOST_PORTS_MAX, HOST_PORTS_MAX));
    assert_eq!((define("UPLINK_F_POOL4"), define("UPLINK_F_POOL6")), (UPLINK_F_POOL4, UPLINK_F_POOL6));
    assert_eq!(counters[counter::HOST_SOCKET_AVOIDED as usize], "CNT_HOST_SOCKET_AVOIDED");
    assert_eq!(
        (define("POD_META_NS_LEN"), define("POD_META_NAME_LEN"), define("POD_META_ANN_LEN")),
        (POD_META_NS_LEN as u32, POD_META_NAME_LEN as u32, POD_META_ANN_LEN as u32)
    );
    assert_eq!(counters[counter::FP_FALLBACK as usize], "CNT_FP_FALLBACK");
    let drops = enum_members("masq_drop_reason", "DROP_MAX");
    assert_eq!(drops.len(), drop_reason::MAX as usize, "{drops:?}");
    assert_eq!(drops[drop_reason::NAT_FULL as usize], "DROP_NAT_FULL");
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
