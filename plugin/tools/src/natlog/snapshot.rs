//! The pairs alive now, as `alive` records: what an exporter logs first when it
//! starts or restarts, so the log has no hole in who held what. Read from the
//! NAT tables through `nat list`'s reader; each pair's start is its `created_ns`
//! carried over to wall-clock time.

use std::{
    net::IpAddr,
    time::{SystemTime, UNIX_EPOCH},
};

use super::{
    parse_proto,
    record::{Event, Record},
};
use ebpf_masq_core::{bpf::loader::Pins, error::{code, Error, Result}};
use crate::nat_list::{self, Flow};

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

fn addr(s: &str) -> Result<IpAddr> {
    s.parse().map_err(|_| Error::new(code::STATE, format!("NAT table: {s:?} is not an address")))
}

/// One live pair's record; None for a flow begun outside (not translated: it holds no node port).
pub fn record_of(f: &Flow, now_ms: u64) -> Result<Option<Record>> {
    if f.inbound {
        return Ok(None);
    }
    let (namespace, pod) = match f.k8s_pod.as_deref().and_then(|p| p.split_once('/')) {
        Some((ns, name)) => (Some(ns.to_string()), Some(name.to_string())),
        None => (None, None),
    };
    Ok(Some(Record {
        time_ms: now_ms,
        event: Event::Alive,
        proto: parse_proto(&f.proto)?,
        pod_addr: addr(&f.pod_addr)?,
        pod_port: f.pod_port,
        nat_addr: Some(addr(&f.nat_addr)?),
        nat_port: Some(f.nat_port),
        remote_addr: addr(&f.remote_addr)?,
        remote_port: f.remote_port,
        start_ms: Some(now_ms.saturating_sub((f.age_s * 1000.0).round() as u64)),
        namespace,
        pod,
        policy: f.policy.clone(),
        reason: None,
        counts: None,
    }))
}

/// Every pair alive in the node's tables now.
pub fn alive(pins: &Pins) -> Result<Vec<Record>> {
    let now = now_ms();
    let mut out = Vec::new();
    for f in nat_list::flows(pins)? {
        out.extend(record_of(&f, now)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> Flow {
        Flow {
            proto: "udp".into(),
            family: "ipv4",
            pod_addr: "10.244.1.2".into(),
            pod_port: 40000,
            nat_addr: "192.0.2.1".into(),
            nat_port: 40001,
            remote_addr: "203.0.113.9".into(),
            remote_port: 53,
            age_s: 2.5,
            idle_s: 0.1,
            packets: 1,
            bytes: 60,
            reply_packets: 1,
            reply_bytes: 80,
            closing: false,
            by_rule: None,
            inbound: false,
            host: false,
            complete: true,
            k8s_pod: Some("default/web-1".into()),
            policy: None,
        }
    }

    #[test]
    fn a_live_pair_becomes_an_alive_record_started_when_it_was_made() {
        let r = record_of(&flow(), 10_000).unwrap().unwrap();
        assert_eq!((r.event, r.proto, r.start_ms), (Event::Alive, 17, Some(7_500)));
        assert_eq!((r.namespace.as_deref(), r.pod.as_deref()), (Some("default"), Some("web-1")));
        assert_eq!((r.nat_addr, r.nat_port), (Some("192.0.2.1".parse().unwrap()), Some(40001)));
        let inbound = Flow { inbound: true, ..flow() };
        assert_eq!(record_of(&inbound, 10_000).unwrap(), None, "an inbound flow holds no node port");
    }
}
