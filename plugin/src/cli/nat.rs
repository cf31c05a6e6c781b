//! `ebpf-masq nat list`: the NAT table as the data plane sees it.

use std::net::Ipv4Addr;

use aya::maps::{HashMap, MapData};
use serde::Serialize;

use crate::{
    bpf::{
        abi::{self, Nat4Entry, Nat4Key},
        loader::Pins,
        maps,
    },
    error::{Error, Result},
    pod::monotonic_ns,
};

#[derive(Debug, Serialize, PartialEq)]
pub struct Flow {
    pub proto: String,
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
    pub complete: bool,
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

/// Every IPv4 flow: the forward half joined with its reverse half.
pub fn flows_v4(pins: &Pins) -> Result<Vec<Flow>> {
    let fwd: HashMap<MapData, Nat4Key, Nat4Entry> = maps::open(pins, abi::MAP_NAT4_FWD)?;
    let rev: HashMap<MapData, Nat4Key, Nat4Entry> = maps::open(pins, abi::MAP_NAT4_REV)?;
    let now = monotonic_ns();
    let mut out = Vec::new();
    for item in fwd.iter() {
        let (k, e) = item.map_err(|e| Error::bpf(format!("nat4_fwd: {e}")))?;
        let rk = Nat4Key { saddr: k.daddr, daddr: e.addr, sport: k.dport, dport: e.port, proto: k.proto, pad: [0; 3] };
        let r = rev.get(&rk, 0).ok().filter(|r| r.addr == k.saddr && r.port == k.sport);
        let (pod_port, remote_port) = (u16::from_be_bytes(k.sport), u16::from_be_bytes(k.dport));
        out.push(Flow {
            proto: proto_name(k.proto),
            pod_addr: Ipv4Addr::from(k.saddr).to_string(),
            pod_port,
            nat_addr: Ipv4Addr::from(e.addr).to_string(),
            nat_port: u16::from_be_bytes(e.port),
            remote_addr: Ipv4Addr::from(k.daddr).to_string(),
            remote_port,
            age_s: now.saturating_sub(e.created_ns) as f64 / 1e9,
            idle_s: now.saturating_sub(e.last_seen_ns.max(r.map(|r| r.last_seen_ns).unwrap_or(0))) as f64 / 1e9,
            packets: e.packets,
            bytes: e.bytes,
            reply_packets: r.map(|r| r.packets).unwrap_or(0),
            reply_bytes: r.map(|r| r.bytes).unwrap_or(0),
            closing: e.flags & abi::NAT_F_TCP_CLOSING != 0,
            by_rule: (e.flags & abi::NAT_F_BY_RULE != 0).then_some(e.rule_id),
            complete: r.is_some(),
        });
    }
    out.sort_by(|a, b| (&a.pod_addr, a.pod_port, &a.remote_addr).cmp(&(&b.pod_addr, b.pod_port, &b.remote_addr)));
    Ok(out)
}

pub fn list(pins: &Pins, json: bool) -> Result<()> {
    let flows = flows_v4(pins)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&flows).expect("serializable"));
        return Ok(());
    }
    println!(
        "{:<6} {:<22} {:<22} {:<22} {:>8} {:>9} {:>9}",
        "PROTO", "POD", "NODE (NAT)", "REMOTE", "AGE", "PKTS", "REPLIES"
    );
    for f in &flows {
        println!(
            "{:<6} {:<22} {:<22} {:<22} {:>7.1}s {:>9} {:>9}{}",
            f.proto,
            format!("{}:{}", f.pod_addr, f.pod_port),
            format!("{}:{}", f.nat_addr, f.nat_port),
            format!("{}:{}", f.remote_addr, f.remote_port),
            f.age_s,
            f.packets,
            f.reply_packets,
            if f.complete { "" } else { "  (reply half missing)" }
        );
    }
    println!("{} flow(s)", flows.len());
    Ok(())
}
