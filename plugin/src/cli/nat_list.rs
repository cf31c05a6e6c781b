//! `ebpf-masq nat list`: the NAT table as the data plane sees it.

use serde::Serialize;

use crate::{
    bpf::{abi, loader::Pins, nat},
    error::Result,
    pod::monotonic_ns,
};

#[derive(Debug, Serialize, PartialEq)]
pub struct Flow {
    pub proto: String,
    pub family: &'static str,
    pub pod_addr: String,
    pub pod_port: u16,
    pub nat_addr: String,
    pub nat_port: u16,
    pub remote_addr: String,
    pub remote_port: u16,
    pub age_s: f64,
    pub idle_s: f64,
    pub packets: u64,
    pub bytes: u64,
    pub reply_packets: u64,
    pub reply_bytes: u64,
    pub closing: bool,
    pub by_rule: Option<u32>,
    /// A flow begun outside (its first packet came in on an uplink, to the pod):
    /// its packets leave untranslated, and it has no reverse half.
    pub inbound: bool,
    /// The host's own flow on the masquerade address ("pod" is the node): given
    /// another port because a pod's pair held its tuple, or an echo id kept.
    pub host: bool,
    /// Both halves present (a flow begun outside has only the one).
    pub complete: bool,
    /// "namespace/name" of the registered pod whose address this is (CNI_ARGS);
    /// None for tunnel clients and pods their runtime did not name.
    pub k8s_pod: Option<String>,
}

pub fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        1 => "icmp".into(),
        58 => "icmpv6".into(),
        n => n.to_string(),
    }
}

fn flows_of<F: nat::Family>(pins: &Pins, now: u64, out: &mut Vec<Flow>) -> Result<()> {
    for (t, e, r) in nat::pairs::<F>(pins)? {
        let inbound = e.flags & abi::NAT_F_INBOUND != 0;
        out.push(Flow {
            proto: proto_name(t.proto),
            family: if t.saddr.is_ipv4() { "ipv4" } else { "ipv6" },
            pod_addr: t.saddr.to_string(),
            pod_port: t.sport,
            nat_addr: e.addr.to_string(),
            nat_port: e.port,
            remote_addr: t.daddr.to_string(),
            remote_port: t.dport,
            age_s: now.saturating_sub(e.created_ns) as f64 / 1e9,
            idle_s: now.saturating_sub(e.last_seen_ns.max(r.map(|r| r.last_seen_ns).unwrap_or(0))) as f64 / 1e9,
            packets: e.packets,
            bytes: e.bytes,
            reply_packets: r.map(|r| r.packets).unwrap_or(0),
            reply_bytes: r.map(|r| r.bytes).unwrap_or(0),
            closing: e.flags & abi::NAT_F_TCP_CLOSING != 0,
            by_rule: (e.flags & abi::NAT_F_BY_RULE != 0).then_some(e.rule_id),
            inbound,
            host: e.flags & abi::NAT_F_HOST != 0,
            complete: r.is_some() || inbound,
            k8s_pod: None,
        });
    }
    Ok(())
}

/// Every flow of both families: the forward half joined with its reverse half.
pub fn flows(pins: &Pins) -> Result<Vec<Flow>> {
    let now = monotonic_ns();
    let mut out = Vec::new();
    flows_of::<nat::V4>(pins, now, &mut out)?;
    flows_of::<nat::V6>(pins, now, &mut out)?;
    let names: std::collections::HashMap<String, String> = super::readers::pods(pins)?
        .into_iter()
        .filter(|p| !p.k8s_name.is_empty())
        .flat_map(|p| {
            let who = format!("{}/{}", p.k8s_namespace, p.k8s_name);
            p.addresses.into_iter().map(move |a| (a.to_string(), who.clone()))
        })
        .collect();
    for f in &mut out {
        f.k8s_pod = names.get(&f.pod_addr).cloned();
    }
    out.sort_by(|a, b| {
        (a.family, &a.pod_addr, a.pod_port, &a.remote_addr).cmp(&(b.family, &b.pod_addr, b.pod_port, &b.remote_addr))
    });
    Ok(out)
}

pub fn list(pins: &Pins, json: bool) -> Result<()> {
    let flows = flows(pins)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&flows).expect("serializable"));
        return Ok(());
    }
    println!(
        "{:<6} {:<30} {:<30} {:<30} {:>8} {:>9} {:>9}",
        "PROTO", "POD", "NODE (NAT)", "REMOTE", "AGE", "PKTS", "REPLIES"
    );
    for f in &flows {
        let node = if f.inbound { "(inbound, not masqueraded)".to_string() } else { endpoint(&f.nat_addr, f.nat_port) };
        println!(
            "{:<6} {:<30} {:<30} {:<30} {:>7.1}s {:>9} {:>9}{}{}{}",
            f.proto,
            endpoint(&f.pod_addr, f.pod_port),
            node,
            endpoint(&f.remote_addr, f.remote_port),
            f.age_s,
            f.packets,
            f.reply_packets,
            if f.complete { "" } else { "  (reply half missing)" },
            if !f.host {
                ""
            } else if f.pod_port == f.nat_port {
                "  (host flow, own port)"
            } else {
                "  (host flow, remapped: a pod held its tuple)"
            },
            f.k8s_pod.as_deref().map(|p| format!("  pod {p}")).unwrap_or_default()
        );
    }
    println!("{} flow(s)", flows.len());
    Ok(())
}

/// "addr:port", with IPv6 addresses in brackets.
fn endpoint(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}
