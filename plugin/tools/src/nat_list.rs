//! `ebpf-masq nat list`: the NAT table as the data plane sees it.

use serde::Serialize;

use ebpf_masq_core::{bpf::{abi, loader::Pins, nat}, error::{code, Error, Result}, pod::monotonic_ns};
use crate::readers::{self, endpoint, PolicyDesc};

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
    /// The egress policy whose address the pair took (the entry's `policy`:
    /// 1 + its index); None: the network's address.
    pub policy: Option<String>,
}

/// The name of a pair's policy byte: 0 none; 1 + i, policy i (named by its
/// slot when `egress_policies` no longer holds it).
pub fn policy_name(descs: &[PolicyDesc], slot: u8) -> Option<String> {
    let i = u32::from(slot.checked_sub(1)?);
    Some(descs.iter().find(|d| d.index == i).map(|d| d.name.clone()).unwrap_or_else(|| format!("#{i}")))
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

fn flows_of<F: nat::Family>(pins: &Pins, now: u64, descs: &[PolicyDesc], out: &mut Vec<Flow>) -> Result<()> {
    for (t, e, r) in nat::pairs::<F>(pins)? {
        let slot = e.policy;
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
            policy: policy_name(descs, slot),
        });
    }
    Ok(())
}

/// Every flow of both families: the forward half joined with its reverse half.
pub fn flows(pins: &Pins) -> Result<Vec<Flow>> {
    let now = monotonic_ns();
    let mut out = Vec::new();
    let descs = readers::egress_policy_descs(pins)?;
    flows_of::<nat::V4>(pins, now, &descs, &mut out)?;
    flows_of::<nat::V6>(pins, now, &descs, &mut out)?;
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

/// Keep only the flows of egress policy `name` (`--policy`); an unknown name is
/// an error naming the option and the node's policies.
pub fn only_policy(flows: Vec<Flow>, descs: &[PolicyDesc], name: &str) -> Result<Vec<Flow>> {
    if !descs.iter().any(|d| d.name == name) {
        let known: Vec<&str> = descs.iter().map(|d| d.name.as_str()).collect();
        let known = if known.is_empty() { "it has none".to_string() } else { format!("its policies: {}", known.join(", ")) };
        return Err(Error::new(code::INVALID_CONFIG, format!("--policy {name:?}: no such egress policy on this node ({known})")));
    }
    Ok(flows.into_iter().filter(|f| f.policy.as_deref() == Some(name)).collect())
}

pub fn list(pins: &Pins, json: bool, policy: Option<&str>) -> Result<()> {
    let mut flows = flows(pins)?;
    if let Some(name) = policy {
        flows = only_policy(flows, &readers::egress_policy_descs(pins)?, name)?;
    }
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
            "{:<6} {:<30} {:<30} {:<30} {:>7.1}s {:>9} {:>9}{}{}{}{}",
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
            f.k8s_pod.as_deref().map(|p| format!("  pod {p}")).unwrap_or_default(),
            f.policy.as_deref().map(|p| format!("  policy {p}")).unwrap_or_default()
        );
    }
    println!("{} flow(s)", flows.len());
    Ok(())
}

/// "addr:port", with IPv6 addresses in brackets.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::readers::PolicyAction;

    fn desc(index: u32, name: &str) -> PolicyDesc {
        PolicyDesc {
            index,
            name: name.into(),
            flags: 0,
            namespaces: vec![],
            pods: vec![],
            destinations: vec![],
            action: PolicyAction::NoNat,
        }
    }

    fn flow(policy: Option<&str>) -> Flow {
        Flow {
            proto: "tcp".into(),
            family: "ipv4",
            pod_addr: "10.244.1.2".into(),
            pod_port: 40000,
            nat_addr: "192.0.2.50".into(),
            nat_port: 40000,
            remote_addr: "203.0.113.7".into(),
            remote_port: 443,
            age_s: 1.0,
            idle_s: 0.5,
            packets: 3,
            bytes: 300,
            reply_packets: 2,
            reply_bytes: 200,
            closing: false,
            by_rule: None,
            inbound: false,
            host: false,
            complete: true,
            k8s_pod: None,
            policy: policy.map(String::from),
        }
    }

    #[test]
    fn policy_byte_names_the_policy() {
        let descs = [desc(0, "partner"), desc(2, "optout")];
        assert_eq!(policy_name(&descs, 0), None);
        assert_eq!(policy_name(&descs, 1).as_deref(), Some("partner"));
        assert_eq!(policy_name(&descs, 3).as_deref(), Some("optout"));
        // A policy gone since the pair was made: named by its index.
        assert_eq!(policy_name(&descs, 2).as_deref(), Some("#1"));
        let v = serde_json::to_value(flow(Some("partner"))).unwrap();
        assert_eq!(v["policy"], "partner");
        assert_eq!(serde_json::to_value(flow(None)).unwrap()["policy"], serde_json::Value::Null);
    }

    #[test]
    fn policy_option_filters_and_refuses_unknown_names() {
        let descs = [desc(0, "partner"), desc(1, "pool")];
        let flows = vec![flow(Some("partner")), flow(None), flow(Some("pool")), flow(Some("partner"))];
        let only = only_policy(flows, &descs, "partner").unwrap();
        assert_eq!(only.len(), 2);
        assert!(only.iter().all(|f| f.policy.as_deref() == Some("partner")));
        let e = only_policy(vec![], &descs, "nope").unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG);
        assert!(e.msg.contains("--policy \"nope\"") && e.msg.contains("its policies: partner, pool"), "{}", e.msg);
        let e = only_policy(vec![], &[], "nope").unwrap_err();
        assert!(e.msg.contains("it has none"), "{}", e.msg);
    }
}
