//! `ebpf-masq status`: what the node's data plane is doing, read from the pins.

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::programs::TcAttachType;
use aya::maps::{lpm_trie::LpmTrie, Array, HashMap, MapData};
use serde_json::{json, Value};

use ebpf_masq_core::{
    bpf::{abi::{self, counter, drop_reason, ExclInfo, NodeConfig, UplinkInfo}, events, loader::{self, Pins}, maps, nat,},
    error::{Error, Result},
    netlink,
    node,
};
use crate::readers;

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

/// One egress policy of `status --json`.
pub fn policy_json(p: &readers::PolicyRow) -> Value {
    let d = &p.desc;
    let (action, addresses) = match &d.action {
        readers::PolicyAction::Masquerade(a) => ("masquerade", json!(a)),
        readers::PolicyAction::NoNat => ("no_nat", Value::Null),
    };
    json!({
        "index": d.index,
        "name": d.name,
        "action": action,
        "masquerade_address": addresses,
        "nat_outgoing": d.action != readers::PolicyAction::NoNat,
        "namespaces": d.namespaces,
        "pods": d.pods,
        "destinations": d.destinations,
        "packets": p.packets,
        "bytes": p.bytes,
        "flows": p.flows,
        "unmasqueraded_packets": p.unmasqueraded,
        "selected_pods": p.pods,
    })
}

/// One pod of `status --json` (`veth_mode`: how its veth program is attached, if it is).
pub fn pod_json(p: &readers::PodRow, veth_mode: Option<&str>, descs: &[readers::PolicyDesc]) -> Value {
    json!({
        "container_id": p.container_id,
        "ifname": p.ifname,
        "veth": p.veth,
        "veth_ifindex": p.veth_ifindex,
        "addresses": p.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "nat_outgoing": p.nat_outgoing,
        "found": p.found,
        "veth_attached": veth_mode.is_some(),
        "veth_attach_mode": veth_mode,
        "packets": p.packets,
        "bytes": p.bytes,
        "spoofed_dropped": p.spoofed,
        "port_limit": p.port_limit,
        "port_refusals": {
            "no_port": p.refused_no_port,
            "over_share": p.refused_over_share,
            "over_limit": p.refused_over_limit,
        },
        "k8s_namespace": p.k8s_namespace,
        "k8s_name": p.k8s_name,
        "annotations": p.annotations,
        "host_ports": p.host_ports,
        "egress_policies": readers::policy_names(descs, p.policies),
    })
}

/// The text line of one pod of `status --json`'s `pods`.
pub fn pod_line(p: &Value) -> String {
    let who = match (p["k8s_namespace"].as_str().unwrap_or(""), p["k8s_name"].as_str().unwrap_or("")) {
        ("", "") => String::new(),
        (ns, name) => format!("pod {ns}/{name} "),
    };
    let mut ann = match p["annotations"].as_object() {
        Some(m) if !m.is_empty() => format!(" annotations {}", p["annotations"]),
        _ => String::new(),
    };
    if let Some(h) = p["host_ports"].as_array().filter(|h| !h.is_empty()) {
        let list: Vec<&str> = h.iter().filter_map(|x| x.as_str()).collect();
        ann.push_str(&format!(" hostPorts {}", list.join(",")));
    }
    if let Some(e) = p["egress_policies"].as_array().filter(|e| !e.is_empty()) {
        let list: Vec<&str> = e.iter().filter_map(|x| x.as_str()).collect();
        ann.push_str(&format!(" egressPolicies {}", list.join(",")));
    }
    if let Some(n) = p["port_limit"].as_u64() {
        ann.push_str(&format!(" portLimit {n}"));
    }
    if p["found"].as_bool() == Some(true) {
        ann.push_str(" found (registered from the runtime's CNI cache)");
    }
    let r = &p["port_refusals"];
    let count = |k: &str| r[k].as_u64().unwrap_or(0);
    if count("no_port") + count("over_share") + count("over_limit") > 0 {
        ann.push_str(&format!(
            " refused no-port {} over-share {} over-limit {}",
            count("no_port"),
            count("over_share"),
            count("over_limit")
        ));
    }
    format!(
        "  {who}{} {} veth {} {} natOutgoing={} attached={}{} packets {} spoofed-dropped {}{ann}",
        p["container_id"].as_str().unwrap_or(""),
        p["ifname"].as_str().unwrap_or(""),
        p["veth"].as_str().unwrap_or(""),
        p["addresses"],
        p["nat_outgoing"],
        p["veth_attached"],
        p["veth_attach_mode"].as_str().map(|m| format!(" ({m})")).unwrap_or_default(),
        p["packets"],
        p["spoofed_dropped"]
    )
}

/// The text lines of one policy of `status --json`'s `egress_policies`.
pub fn policy_lines(p: &Value) -> Vec<String> {
    let strs = |k: &str| -> Vec<String> {
        p[k].as_array().into_iter().flatten().filter_map(|x| x.as_str().map(String::from)).collect()
    };
    let action = if p["action"] == "no_nat" {
        "natOutgoing: false".to_string()
    } else {
        format!("masqueradeAddress {}", strs("masquerade_address").join(", "))
    };
    let dests = strs("destinations");
    let mut selector = format!("namespaces {}", strs("namespaces").join(", "));
    if !strs("pods").is_empty() {
        selector.push_str(&format!(" pods {}", strs("pods").join(", ")));
    }
    let selected = strs("selected_pods");
    vec![
        format!(
            "  #{} {:<16} {action} to {}  ({selector})",
            p["index"],
            p["name"].as_str().unwrap_or("?"),
            if dests.is_empty() { "every destination".to_string() } else { dests.join(", ") }
        ),
        format!(
            "    packets {} bytes {} flows {} unmasqueraded {}  pods ({}): {}",
            p["packets"],
            p["bytes"],
            p["flows"],
            p["unmasqueraded_packets"],
            selected.len(),
            if selected.is_empty() { "none".to_string() } else { selected.join(" ") }
        ),
    ]
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

    let cfg: Array<MapData, NodeConfig> = maps::pinned(pins, abi::MAP_CONFIG)?;
    let c = cfg.get(&0, 0).map_err(e("node_config"))?;

    let pool: Option<abi::MasqPool> = maps::pinned::<Array<MapData, abi::MasqPool>>(pins, abi::MAP_MASQ_POOL)
        .ok()
        .and_then(|m| m.get(&0, 0).ok());
    let ups: HashMap<MapData, u32, UplinkInfo> = maps::pinned(pins, abi::MAP_UPLINKS)?;
    let mut uplinks = Vec::new();
    for item in ups.iter() {
        let (ifindex, u) = item.map_err(e("uplinks"))?;
        let link = netlink::get_link_by_index(ifindex)?;
        let attached = |ingress: bool| {
            let (prog, dir) = if ingress {
                (loader::PROG_UPLINK_INGRESS, TcAttachType::Ingress)
            } else {
                (loader::PROG_UPLINK_EGRESS, TcAttachType::Egress)
            };
            loader::attachment(pins, prog, ifindex, dir).ok().flatten().map(|m| m.as_str())
        };
        let (egress, ingress) = (attached(false), attached(true));
        uplinks.push(json!({
            "ifindex": ifindex,
            "name": link.as_ref().map(|l| l.name.clone()),
            "l3": u.flags & abi::UPLINK_F_L3 != 0,
            "masquerade_v4": (u.flags & abi::UPLINK_F_HAS_V4 != 0).then(|| Ipv4Addr::from(u.masq_v4).to_string()),
            "masquerade_v6": (u.flags & abi::UPLINK_F_HAS_V6 != 0).then(|| Ipv6Addr::from(u.masq_v6).to_string()),
            // masqueradeAddress's pool, when this uplink takes its addresses from it.
            "pool_v4": (u.flags & abi::UPLINK_F_POOL4 != 0).then(|| pool.as_ref().map(|p| {
                p.v4[..p.len4 as usize].iter().map(|a| Ipv4Addr::from(*a).to_string()).collect::<Vec<_>>()
            })).flatten(),
            "pool_v6": (u.flags & abi::UPLINK_F_POOL6 != 0).then(|| pool.as_ref().map(|p| {
                p.v6[..p.len6 as usize].iter().map(|a| Ipv6Addr::from(*a).to_string()).collect::<Vec<_>>()
            })).flatten(),
            "egress_attached": egress.is_some(),
            "ingress_attached": ingress.is_some(),
            "egress_attach_mode": egress,
            "ingress_attach_mode": ingress,
        }));
    }

    let mut exclusions = Vec::new();
    // An exclusion of ip-masq-agent's file also names the file (node::ipmasq).
    let ipm_source = node::ipmasq::describe(pins);
    let excl = |cidr: String, v: ExclInfo| {
        let mut x = json!({"cidr": cidr, "reason": excl_reason(v.reason)});
        if node::ipmasq::is_from_ip_masq_agent(v.index) {
            x["source"] = json!(ipm_source);
        }
        x
    };
    let ex4: LpmTrie<MapData, [u8; 4], ExclInfo> = maps::pinned(pins, abi::MAP_EXCL4)?;
    for item in ex4.iter() {
        let (k, v) = item.map_err(e("excl4"))?;
        exclusions.push(excl(format!("{}/{}", Ipv4Addr::from(k.data()), k.prefix_len()), v));
    }
    let ex6: LpmTrie<MapData, [u8; 16], ExclInfo> = maps::pinned(pins, abi::MAP_EXCL6)?;
    for item in ex6.iter() {
        let (k, v) = item.map_err(e("excl6"))?;
        exclusions.push(excl(format!("{}/{}", Ipv6Addr::from(k.data()), k.prefix_len()), v));
    }

    // Rules of both families and pods, from the readers shared with `metrics`.
    let rules: Vec<Value> = readers::rules(pins)?
        .into_iter()
        .map(|r| {
            json!({
                "id": r.id,
                "source": r.source_cidr(),
                "out_interface": r.out_interface,
                "out_ifindex": r.out_ifindex,
                "except": r.except,
                "to_address": r.to_address.map(|a| a.to_string()),
                "packets": r.packets,
                "bytes": r.bytes,
            })
        })
        .collect();

    let pod_rows = readers::pods(pins)?;
    let policies = readers::egress_policies(pins, &pod_rows)?;
    let descs: Vec<readers::PolicyDesc> = policies.iter().map(|p| p.desc.clone()).collect();
    let egress_policies: Vec<Value> = policies.iter().map(policy_json).collect();
    let pods: Vec<Value> = pod_rows
        .iter()
        .map(|p| {
            let veth_mode = loader::attachment(pins, loader::PROG_VETH_INGRESS, p.veth_ifindex, TcAttachType::Ingress)
                .ok()
                .flatten()
                .map(|m| m.as_str());
            pod_json(p, veth_mode, &descs)
        })
        .collect();

    let counters = node::read_counters(pins, abi::MAP_COUNTERS)?;
    let drops = node::read_counters(pins, abi::MAP_DROPS)?;
    let counters: serde_json::Map<String, Value> =
        counter::NAMES.iter().zip(counters.iter()).map(|(n, v)| (n.to_string(), json!(v))).collect();
    let drops: serde_json::Map<String, Value> =
        drop_reason::NAMES.iter().zip(drops.iter()).map(|(n, v)| (n.to_string(), json!(v))).collect();
    let flows = crate::nat_list::flows(pins)?;
    let nat_v4 = flows.iter().filter(|f| f.family == "ipv4").count();
    let nat_v6 = flows.len() - nat_v4;
    let incomplete = flows.iter().filter(|f| !f.complete).count()
        + nat::orphans::<nat::V4>(pins)?.len()
        + nat::orphans::<nat::V6>(pins)?.len();
    let gc = readers::nat_gc(pins)?.unwrap_or_default();
    let leases = events::Leases::pinned(pins)?.get();
    let now = ebpf_masq_core::pod::monotonic_ns();

    Ok(json!({
        "pin_path": pins.root.display().to_string(),
        "layout_version": pins.version,
        "programs": progs,
        "config": {
            "port_range": format!("{}-{}", c.port_min, c.port_max),
            // What the NAT maps were created with (natMaxEntries at the first load).
            "nat_max_entries": readers::map_max_entries(pins, abi::MAP_NAT4_REV)?,
            "timeouts_s": {"tcp": c.tcp_timeout_s, "tcp_closing": c.tcp_closing_timeout_s, "udp": c.udp_timeout_s, "udp_one_shot": c.udp_one_shot_timeout_s, "icmp": c.icmp_timeout_s},
            "exclusions": exclusions,
            // The node's pod ranges: an unregistered source inside them is dropped (unregistered_pod).
            "pod_nets": node::pod_nets::list(pins)?
                .iter()
                .map(|(n, o)| json!({"cidr": n.to_string(), "origin": match o {
                    node::pod_nets::Origin::Configured(_) => "podCIDRs",
                    node::pod_nets::Origin::Learned => "learned",
                }}))
                .collect::<Vec<_>>(),
        },
        "pods_found": pod_rows.iter().filter(|p| p.found).count(),
        "uplinks": uplinks,
        "rules": rules,
        "egress_policies": egress_policies,
        "pods": pods,
        "nat_flows_v4": nat_v4,
        "nat_flows_v6": nat_v6,
        "nat_pairs_incomplete": incomplete,
        "nat_expiry": {
            "armed": gc.armed & abi::NAT_GC_ARMED != 0,
            "walks_ipv6": gc.walk & abi::NAT_GC_WALK6 != 0,
            "runs": gc.runs,
            "cycles": gc.cycles,
            "shards": c.nat_shards,
            "last_run_s_ago": (gc.runs > 0).then(|| now.saturating_sub(gc.last_run_ns) as f64 / 1e9),
            "last_checked": gc.last_cycle_checked,
            "last_run_us": gc.last_run_took_ns as f64 / 1e3,
            "max_run_us": gc.max_run_took_ns as f64 / 1e3,
        },
        "counters": counters,
        "drops": drops,
        "event_leases": leases_json(&leases, now),
        "natlog": {"records": leases.log_records, "ipfix_unsent": leases.log_ipfix_unsent},
    }))
}

/// Who holds each event ring's lease (`events_ctl`), and for how long yet: null when nobody does.
fn leases_json(c: &abi::EventsCtl, now_ns: u64) -> Value {
    let lease = |until: u64, pid: u32| {
        if until > now_ns {
            json!({"pid": pid, "remaining_s": (until - now_ns) as f64 / 1e9})
        } else {
            Value::Null
        }
    };
    json!({"log": lease(c.log_until, c.log_pid), "live": lease(c.live_until, c.live_pid)})
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
    println!(
        "config: portRange {}  timeouts {}  natMaxEntries {} (per family, fixed at the first load)",
        s["config"]["port_range"].as_str().unwrap_or(""),
        s["config"]["timeouts_s"],
        s["config"]["nat_max_entries"]
    );
    println!("never masqueraded (pods):");
    for x in s["config"]["exclusions"].as_array().into_iter().flatten() {
        let by = x["source"].as_str().map(|s| format!(" (by {s})")).unwrap_or_default();
        println!("  {:<20} {}{by}", x["cidr"].as_str().unwrap_or(""), x["reason"].as_str().unwrap_or(""));
    }
    let drops = &s["drops"]["unregistered_pod"];
    println!("pod ranges (a source inside them no registered pod owns is dropped; dropped so far: {drops}):");
    for x in s["config"]["pod_nets"].as_array().into_iter().flatten() {
        println!("  {:<20} {}", x["cidr"].as_str().unwrap_or(""), x["origin"].as_str().unwrap_or(""));
    }
    println!("uplinks:");
    for u in s["uplinks"].as_array().into_iter().flatten() {
        println!(
            "  {:<12} ifindex {:<4} masquerade {} {} egress={} ingress={}{}{}",
            u["name"].as_str().unwrap_or("?"),
            u["ifindex"],
            u["masquerade_v4"].as_str().unwrap_or("-"),
            u["masquerade_v6"].as_str().unwrap_or("-"),
            u["egress_attached"],
            u["ingress_attached"],
            u["egress_attach_mode"].as_str().map(|m| format!(" ({m})")).unwrap_or_default(),
            if u["l3"].as_bool() == Some(true) { " (L3 device)" } else { "" }
        );
        for fam in ["pool_v4", "pool_v6"] {
            if let Some(p) = u[fam].as_array() {
                let list: Vec<&str> = p.iter().filter_map(|a| a.as_str()).collect();
                println!("    {} pool (paired: a source always takes the same one): {}", &fam[5..], list.join(" "));
            }
        }
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
    if let Some(list) = s["egress_policies"].as_array().filter(|l| !l.is_empty()) {
        println!("egress policies (first match wins, per destination):");
        for line in list.iter().flat_map(policy_lines) {
            println!("{line}");
        }
    }
    println!("pods ({} found in a runtime's CNI cache):", s["pods_found"]);
    for p in s["pods"].as_array().into_iter().flatten() {
        println!("{}", pod_line(p));
    }
    println!(
        "nat flows: {} IPv4, {} IPv6, {} incomplete pairs",
        s["nat_flows_v4"], s["nat_flows_v6"], s["nat_pairs_incomplete"]
    );
    let x = &s["nat_expiry"];
    match x["last_run_s_ago"].as_f64() {
        Some(ago) if x["armed"] == true => {
            println!(
                "nat expiry sweep: {} runs ({} cycles of {} shards), last {ago:.1} s ago took {:.0} µs (longest {:.0} µs); the last cycle checked {} pairs",
                x["runs"], x["cycles"], x["shards"], x["last_run_us"].as_f64().unwrap_or(0.0),
                x["max_run_us"].as_f64().unwrap_or(0.0), x["last_checked"]
            )
        }
        Some(ago) => println!(
            "nat expiry sweep: {} runs, idle since the last ({ago:.1} s ago) found no pair; the next new pair restarts it",
            x["runs"]
        ),
        None if x["armed"] == true => println!("nat expiry sweep: armed, not run yet"),
        None if s["counters"]["nat_created"].as_u64().unwrap_or(0) == 0 => {
            println!("nat expiry sweep: not armed (no pair created yet)")
        }
        // bpf_timer_init can fail for want of memory; every new pair tries again.
        None => println!("nat expiry sweep: NOT ARMED although pairs exist: idle pairs are not being removed"),
    }
    let c = &s["counters"];
    let count = |k: &str| c[k].as_u64().unwrap_or(0);
    if count("nat_expiry_arm_failures") > 0 {
        println!(
            "nat expiry sweep: its timer could not be armed {} times (each new pair tries again)",
            count("nat_expiry_arm_failures")
        );
    }
    if count("nat_created") > 0 {
        // ~1 / (1 - share of the range in use) per pair: a rising figure warns before port_alloc_failures do.
        println!(
            "port allocation: {} ports tried for {} new pairs ({:.2} a pair), {} searches found no port",
            count("port_probes"),
            count("nat_created"),
            count("port_probes") as f64 / count("nat_created") as f64,
            count("port_alloc_failures")
        );
    }
    for (ring, who) in [("log", "the NAT session log's exporter"), ("live", "monitor")] {
        let l = &s["event_leases"][ring];
        if !l.is_null() {
            println!("events_{ring}: read by {who}, pid {} (lease runs {:.1} s more)", l["pid"], l["remaining_s"].as_f64().unwrap_or(0.0));
        }
    }
    if !s["event_leases"]["log"].is_null() {
        println!(
            "natlog: {} records written, {} not received by the IPFIX collector (since the exporter started)",
            s["natlog"]["records"], s["natlog"]["ipfix_unsent"]
        );
    }
    println!("counters: {}", s["counters"]);
    println!("drops: {}", s["drops"]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_shows_its_holder_while_it_runs_and_null_after() {
        let c = abi::EventsCtl { log_until: 5_000_000_000, log_pid: 42, live_until: 900, live_pid: 7, ..Default::default() };
        let v = leases_json(&c, 1_000_000_000);
        assert_eq!(v["log"], json!({"pid": 42, "remaining_s": 4.0}));
        assert!(v["live"].is_null(), "ran out: {v}");
    }
    use crate::readers::{PolicyAction, PolicyDesc, PolicyRow};

    fn row(action: PolicyAction, destinations: &[&str], pods: &[&str]) -> PolicyRow {
        PolicyRow {
            desc: PolicyDesc {
                index: 1,
                name: "partner".into(),
                flags: 0,
                namespaces: vec!["team-a".into()],
                pods: vec![],
                destinations: destinations.iter().map(|d| d.to_string()).collect(),
                action,
            },
            packets: 12,
            bytes: 3400,
            flows: 3,
            unmasqueraded: 0,
            pods: pods.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn pod_row(port_limit: Option<u16>, refused: (u64, u64, u64)) -> readers::PodRow {
        readers::PodRow {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            veth: "veth1".into(),
            veth_ifindex: 9,
            addresses: vec!["10.244.1.5".parse().unwrap()],
            nat_outgoing: true,
            found: false,
            packets: 7,
            bytes: 700,
            spoofed: 0,
            refused_no_port: refused.0,
            refused_over_share: refused.1,
            refused_over_limit: refused.2,
            port_limit,
            k8s_namespace: "shop".into(),
            k8s_name: "web-0".into(),
            annotations: json!({"ebpf-masq.io/port-limit": "64"}),
            host_ports: vec![],
            policies: 0,
        }
    }

    #[test]
    fn pod_json_and_text_show_the_port_limit_and_every_refusal() {
        let v = pod_json(&pod_row(Some(64), (1, 2, 3)), Some("tcx"), &[]);
        assert_eq!(v["port_limit"], json!(64));
        assert_eq!(v["port_refusals"], json!({"no_port": 1, "over_share": 2, "over_limit": 3}));
        assert_eq!((v["veth_attached"].as_bool(), v["veth_attach_mode"].as_str()), (Some(true), Some("tcx")));
        let line = pod_line(&v);
        assert!(line.starts_with("  pod shop/web-0 c1 eth0 veth veth1 [\"10.244.1.5\"] natOutgoing=true attached=true (tcx)"), "{line}");
        assert!(line.ends_with(" portLimit 64 refused no-port 1 over-share 2 over-limit 3"), "{line}");

        // No limit: null in JSON, nothing in the text; no refusal, no refusals in the text.
        let v = pod_json(&pod_row(None, (0, 0, 0)), None, &[]);
        assert_eq!(v["port_limit"], Value::Null);
        assert_eq!(v["port_refusals"], json!({"no_port": 0, "over_share": 0, "over_limit": 0}));
        let line = pod_line(&v);
        assert!(!line.contains("portLimit") && !line.contains("refused"), "{line}");
        // Refused at its limit only: still shown.
        assert!(pod_line(&pod_json(&pod_row(Some(1), (0, 0, 5)), None, &[])).ends_with("over-limit 5"));
    }

    #[test]
    fn egress_policy_json_and_text() {
        let r = row(PolicyAction::Masquerade(vec!["192.0.2.50".into()]), &["203.0.113.0/24"], &["team-a/web-1"]);
        let v = policy_json(&r);
        assert_eq!(v["name"], "partner");
        assert_eq!(v["action"], "masquerade");
        assert_eq!(v["masquerade_address"], json!(["192.0.2.50"]));
        assert_eq!(v["destinations"], json!(["203.0.113.0/24"]));
        assert_eq!(v["namespaces"], json!(["team-a"]));
        assert_eq!((v["packets"].as_u64(), v["flows"].as_u64()), (Some(12), Some(3)));
        assert_eq!(v["selected_pods"], json!(["team-a/web-1"]));
        let lines = policy_lines(&v);
        assert!(lines[0].contains("partner") && lines[0].contains("masqueradeAddress 192.0.2.50 to 203.0.113.0/24  (namespaces team-a)"), "{lines:?}");
        assert!(lines[1].contains("packets 12 bytes 3400 flows 3 unmasqueraded 0  pods (1): team-a/web-1"), "{lines:?}");

        let v = policy_json(&row(PolicyAction::NoNat, &[], &[]));
        assert_eq!((v["action"].as_str(), v["nat_outgoing"].as_bool()), (Some("no_nat"), Some(false)));
        let lines = policy_lines(&v);
        assert!(lines[0].contains("natOutgoing: false to every destination"), "{lines:?}");
        assert!(lines[1].ends_with("pods (0): none"), "{lines:?}");
    }
}
