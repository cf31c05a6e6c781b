//! `ebpf-masq status`: what the node's data plane is doing, read from the pins.

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::maps::{lpm_trie::LpmTrie, Array, HashMap, MapData, PerCpuArray, PerCpuHashMap};
use serde_json::{json, Value};

use crate::{
    bpf::{
        abi::{self, counter, drop_reason, ExclInfo, MasqConfig, PodStats, Rule4Data, RuleExcept4Data, RuleInfo, RuleStats, UplinkInfo},
        loader::{self, Pins},
        maps,
    },
    error::{Error, Result},
    netlink, node, pod,
};

fn e(what: &str) -> impl Fn(aya::maps::MapError) -> Error + '_ {
    move |err| Error::bpf(format!("{what}: {err}"))
}

pub fn excl_reason(r: u32) -> &'static str {
    match r {
        abi::EXCL_NATIVE_ROUTING => "nativeRoutingCIDR",
        abi::EXCL_NON_MASQ => "nonMasqueradeCIDRs",
        abi::EXCL_LINK_LOCAL => "link-local",
        _ => "unknown",
    }
}

/// The whole status as JSON (the text form is rendered from it).
pub fn collect(pins: &Pins) -> Result<Value> {
    if !pins.loaded() {
        return Err(Error::state(format!(
            "no data plane under {} (no ADD or `ebpf-masq apply` has run on this node)",
            pins.root.display()
        )));
    }
    let progs: Vec<Value> = loader::ALL_PROGS
        .iter()
        .map(|p| json!({"name": p, "pin": pins.prog(p).display().to_string(), "pinned": pins.prog(p).exists()}))
        .collect();

    let cfg: Array<MapData, MasqConfig> = maps::open(pins, abi::MAP_CONFIG)?;
    let c = cfg.get(&0, 0).map_err(e("masq_config"))?;

    let ups: HashMap<MapData, u32, UplinkInfo> = maps::open(pins, abi::MAP_UPLINKS)?;
    let mut uplinks = Vec::new();
    for item in ups.iter() {
        let (ifindex, u) = item.map_err(e("uplinks"))?;
        let link = netlink::get_link_by_index(ifindex)?;
        let attached = |ingress| netlink::has_tc_filter(ifindex, ingress, loader::TC_PRIORITY).unwrap_or(false);
        uplinks.push(json!({
            "ifindex": ifindex,
            "name": link.as_ref().map(|l| l.name.clone()),
            "l3": u.flags & abi::UPLINK_F_L3 != 0,
            "masquerade_v4": (u.flags & abi::UPLINK_F_HAS_V4 != 0).then(|| Ipv4Addr::from(u.masq_v4).to_string()),
            "masquerade_v6": (u.flags & abi::UPLINK_F_HAS_V6 != 0).then(|| Ipv6Addr::from(u.masq_v6).to_string()),
            "egress_attached": attached(false),
            "ingress_attached": attached(true),
        }));
    }

    let mut exclusions = Vec::new();
    let ex4: LpmTrie<MapData, [u8; 4], ExclInfo> = maps::open(pins, abi::MAP_EXCL4)?;
    for item in ex4.iter() {
        let (k, v) = item.map_err(e("excl4"))?;
        exclusions.push(json!({"cidr": format!("{}/{}", Ipv4Addr::from(k.data()), k.prefix_len()), "reason": excl_reason(v.reason)}));
    }
    let ex6: LpmTrie<MapData, [u8; 16], ExclInfo> = maps::open(pins, abi::MAP_EXCL6)?;
    for item in ex6.iter() {
        let (k, v) = item.map_err(e("excl6"))?;
        exclusions.push(json!({"cidr": format!("{}/{}", Ipv6Addr::from(k.data()), k.prefix_len()), "reason": excl_reason(v.reason)}));
    }

    let rules4: LpmTrie<MapData, Rule4Data, RuleInfo> = maps::open(pins, abi::MAP_RULES4)?;
    let except4: LpmTrie<MapData, RuleExcept4Data, u32> = maps::open(pins, abi::MAP_RULE_EXCEPT4)?;
    let rstats: PerCpuArray<MapData, RuleStats> = maps::open(pins, abi::MAP_RULE_STATS)?;
    let mut rules = Vec::new();
    let mut all_except = Vec::new();
    for item in except4.iter() {
        let (k, _) = item.map_err(e("rule_except4"))?;
        let d = k.data();
        all_except.push((u32::from_be_bytes(d.rule_id_be), format!("{}/{}", Ipv4Addr::from(d.daddr), k.prefix_len() - 32)));
    }
    for item in rules4.iter() {
        let (k, r) = item.map_err(e("rules4"))?;
        let d = k.data();
        let ifindex = u32::from_be_bytes(d.ifindex_be);
        let name = netlink::get_link_by_index(ifindex)?.map(|l| l.name);
        let st = rstats.get(&r.id, 0).map_err(e("rule_stats"))?;
        let (packets, bytes) = st.iter().fold((0u64, 0u64), |(p, b), s| (p + s.packets, b + s.bytes));
        rules.push(json!({
            "id": r.id,
            "source": format!("{}/{}", Ipv4Addr::from(d.saddr), k.prefix_len() - 32),
            "out_interface": name,
            "out_ifindex": ifindex,
            "except": all_except.iter().filter(|(id, _)| *id == r.id).map(|(_, c)| c.clone()).collect::<Vec<_>>(),
            "to_address": (r.flags & abi::RULE_F_TO_ADDRESS != 0).then(|| Ipv4Addr::from(r.to_v4).to_string()),
            "packets": packets,
            "bytes": bytes,
        }));
    }
    rules.sort_by_key(|r| r["id"].as_u64());

    let stats: PerCpuHashMap<MapData, u32, PodStats> = maps::open(pins, abi::MAP_POD_STATS)?;
    let mut pods = Vec::new();
    for (k, info) in pod::list_attachments(pins)? {
        let st = stats.get(&info.veth_ifindex, 0).ok();
        let sum = |f: fn(&PodStats) -> u64| st.as_ref().map(|s| s.iter().map(f).sum::<u64>()).unwrap_or(0);
        pods.push(json!({
            "container_id": pod::cstr(&k.container_id),
            "ifname": pod::cstr(&k.ifname),
            "veth": pod::cstr(&info.veth_name),
            "veth_ifindex": info.veth_ifindex,
            "addresses": pod::addrs_of(&info).iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            "nat_outgoing": info.flags & abi::ATT_F_NAT_OUTGOING != 0,
            "veth_attached": netlink::has_tc_filter(info.veth_ifindex, true, loader::TC_PRIORITY).unwrap_or(false),
            "packets": sum(|s| s.packets),
            "bytes": sum(|s| s.bytes),
            "spoofed_dropped": sum(|s| s.spoofed),
        }));
    }

    let counters = node::read_counters(pins, abi::MAP_COUNTERS)?;
    let drops = node::read_counters(pins, abi::MAP_DROPS)?;
    let counters: serde_json::Map<String, Value> =
        counter::NAMES.iter().zip(counters.iter()).map(|(n, v)| (n.to_string(), json!(v))).collect();
    let drops: serde_json::Map<String, Value> =
        drop_reason::NAMES.iter().zip(drops.iter()).map(|(n, v)| (n.to_string(), json!(v))).collect();
    let nat_entries = crate::cli::nat::flows_v4(pins)?.len();

    Ok(json!({
        "pin_path": pins.root.display().to_string(),
        "layout_version": abi::LAYOUT_VERSION,
        "programs": progs,
        "config": {
            "port_range": format!("{}-{}", c.port_min, c.port_max),
            "timeouts_s": {"tcp": c.tcp_timeout_s, "tcp_closing": c.tcp_closing_timeout_s, "udp": c.udp_timeout_s, "icmp": c.icmp_timeout_s},
            "exclusions": exclusions,
        },
        "uplinks": uplinks,
        "rules": rules,
        "pods": pods,
        "nat_flows_v4": nat_entries,
        "counters": counters,
        "drops": drops,
    }))
}

pub fn run(pins: &Pins, json_out: bool) -> Result<()> {
    let s = collect(pins)?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&s).expect("serializable"));
        return Ok(());
    }
    println!("pins: {} (layout v{})", s["pin_path"].as_str().unwrap_or(""), s["layout_version"]);
    println!("programs:");
    for p in s["programs"].as_array().into_iter().flatten() {
        println!("  {:<16} pinned={}", p["name"].as_str().unwrap_or(""), p["pinned"]);
    }
    println!("config: portRange {}  timeouts {}", s["config"]["port_range"].as_str().unwrap_or(""), s["config"]["timeouts_s"]);
    println!("never masqueraded (pods):");
    for x in s["config"]["exclusions"].as_array().into_iter().flatten() {
        println!("  {:<20} {}", x["cidr"].as_str().unwrap_or(""), x["reason"].as_str().unwrap_or(""));
    }
    println!("uplinks:");
    for u in s["uplinks"].as_array().into_iter().flatten() {
        println!(
            "  {:<12} ifindex {:<4} masquerade {} {} egress={} ingress={}{}",
            u["name"].as_str().unwrap_or("?"),
            u["ifindex"],
            u["masquerade_v4"].as_str().unwrap_or("-"),
            u["masquerade_v6"].as_str().unwrap_or("-"),
            u["egress_attached"],
            u["ingress_attached"],
            if u["l3"].as_bool() == Some(true) { " (L3 device)" } else { "" }
        );
    }
    println!("rules:");
    for r in s["rules"].as_array().into_iter().flatten() {
        println!(
            "  #{} source {} out {} except {} to {}  packets {} bytes {}",
            r["id"],
            r["source"].as_str().unwrap_or(""),
            r["out_interface"].as_str().unwrap_or("?"),
            r["except"],
            r["to_address"].as_str().unwrap_or("(interface address)"),
            r["packets"],
            r["bytes"]
        );
    }
    println!("pods:");
    for p in s["pods"].as_array().into_iter().flatten() {
        println!(
            "  {} {} veth {} {} natOutgoing={} attached={} packets {} spoofed-dropped {}",
            p["container_id"].as_str().unwrap_or(""),
            p["ifname"].as_str().unwrap_or(""),
            p["veth"].as_str().unwrap_or(""),
            p["addresses"],
            p["nat_outgoing"],
            p["veth_attached"],
            p["packets"],
            p["spoofed_dropped"]
        );
    }
    println!("nat flows (v4): {}", s["nat_flows_v4"]);
    println!("counters: {}", s["counters"]);
    println!("drops: {}", s["drops"]);
    Ok(())
}
