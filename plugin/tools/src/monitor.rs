//! `ebpf-masq monitor`: the data plane's events as they happen (bpf/events.rs),
//! for people: NAT pairs made and ended, new flows refused, packets dropped,
//! filtered by pod, egress policy, kind and remote. It holds the `events_live`
//! ring's lease while it runs (renewed every second), gives it up when it exits on
//! SIGINT or SIGTERM, and a monitor killed outright leaves a lease that runs out
//! within seconds: the events are never left on. The NAT session log's exporter
//! reads the other ring, so the two never take each other's events.

use std::{
    io::Write,
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, UNIX_EPOCH},
};

use clap::Args;
use serde_json::{json, Map, Value};

use super::{
    nat_list::{policy_name, proto_name},
    natlog::parse_remote,
    readers::{self, PodNames, PolicyDesc},
    PinPathArg,
};
use ebpf_masq_core::{bpf::{abi::drop_reason, events::{Event, Kind, Reader, Ring, Wall},}, error::{code, Error, Result}};

pub const LONG_HELP: &str = "Show the data plane's events as they happen: NAT pairs made (pair_made) and ended \
(pair_ended: closed, expired, taken_over), new flows refused (refused_no_port, refused_share, refused_limit) and \
packets dropped (drop, with its reason). One line each; --json prints one JSON object a line.\n\n\
While it runs the data plane writes events into the events_live ring (a lease renewed every second); they stop \
when it exits, within seconds even if it is killed. Events the ring had no room for are counted (status, metrics: \
events_lost).";

#[derive(Args, Debug)]
pub struct MonitorArgs {
    #[command(flatten)]
    pub pins: PinPathArg,
    #[arg(long, help = "one JSON object a line")]
    pub json: bool,
    #[arg(long, value_name = "NS/NAME|ADDR", help = "only this pod's events (its namespace/name, or one of its addresses)")]
    pub pod: Option<String>,
    #[arg(long, value_name = "NAME", help = "only the pairs that took the address of this egress policy")]
    pub policy: Option<String>,
    #[arg(long = "event", value_name = "KIND", value_delimiter = ',',
          help = "only these kinds: pair_made, pair_ended, drop, refused_no_port, refused_share, refused_limit")]
    pub events: Vec<String>,
    #[arg(long, value_name = "ADDR[:PORT]", help = "only flows towards this remote address (and port)")]
    pub remote: Option<String>,
}

fn bad(opt: &str, msg: String) -> Error {
    Error::new(code::INVALID_CONFIG, format!("{opt}: {msg}"))
}

/// Which pod a filter names.
#[derive(Debug, PartialEq)]
enum PodSel {
    Name(String),
    Addr(IpAddr),
}

/// The filters, checked once before the events are turned on.
#[derive(Debug)]
struct Filter {
    pod: Option<PodSel>,
    policy: Option<String>,
    kinds: Vec<Kind>,
    remote: Option<(IpAddr, Option<u16>)>,
}

impl Filter {
    fn of(a: &MonitorArgs, descs: &[PolicyDesc]) -> Result<Filter> {
        let pod = a.pod.as_deref().map(|p| match p.parse::<IpAddr>() {
            Ok(ip) => Ok(PodSel::Addr(ip)),
            Err(_) if p.split_once('/').is_some_and(|(ns, n)| !ns.is_empty() && !n.is_empty()) => {
                Ok(PodSel::Name(p.to_string()))
            }
            Err(_) => Err(bad("--pod", format!("{p:?} is neither NAMESPACE/NAME nor an address"))),
        });
        let mut kinds = Vec::new();
        for k in &a.events {
            let kind = Kind::ALL.iter().find(|x| x.name() == k.as_str()).ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|x| x.name()).collect();
                bad("--event", format!("{k:?} is not one of {}", names.join(", ")))
            })?;
            kinds.push(*kind);
        }
        if let Some(name) = &a.policy {
            if !descs.iter().any(|d| &d.name == name) {
                return Err(bad("--policy", format!("{name:?}: no such egress policy on this node")));
            }
        }
        Ok(Filter {
            pod: pod.transpose()?,
            policy: a.policy.clone(),
            kinds,
            remote: a.remote.as_deref().map(parse_remote).transpose()?,
        })
    }

    fn admits(&self, e: &Event, who: Option<&str>, policy: Option<&str>) -> bool {
        if !self.kinds.is_empty() && !self.kinds.contains(&e.kind) {
            return false;
        }
        match &self.pod {
            Some(PodSel::Addr(a)) if e.pod.map(|p| p.ip()) != Some(*a) => return false,
            Some(PodSel::Name(n)) if who != Some(n.as_str()) => return false,
            _ => {}
        }
        if self.policy.is_some() && self.policy.as_deref() != policy {
            return false;
        }
        if let Some((addr, port)) = self.remote {
            match e.remote {
                Some(r) if r.ip() == addr && port.is_none_or(|p| p == r.port()) => {}
                _ => return false,
            }
        }
        true
    }
}

/// An event as one JSON object: the natlog record's field names where they
/// are the same thing (pod_addr, nat_addr, remote_addr, start_ms, counts).
fn to_json(e: &Event, time_ms: u64, start_ms: Option<u64>, who: Option<&str>, policy: Option<&str>) -> Value {
    let mut o = Map::new();
    o.insert("time_ms".into(), json!(time_ms));
    o.insert("event".into(), json!(e.kind.name()));
    o.insert("proto".into(), json!(proto_name(e.proto)));
    let mut ep = |name: &str, sa: Option<SocketAddr>, port: bool| {
        if let Some(sa) = sa {
            o.insert(format!("{name}_addr"), json!(sa.ip().to_string()));
            if port {
                o.insert(format!("{name}_port"), json!(sa.port()));
            }
        }
    };
    ep("pod", e.pod, true);
    ep("nat", e.node, matches!(e.kind, Kind::PairMade | Kind::PairEnded | Kind::Drop));
    ep("remote", e.remote, true);
    if let Some((ns, name)) = who.and_then(|w| w.split_once('/')) {
        o.insert("namespace".into(), json!(ns));
        o.insert("pod".into(), json!(name));
    }
    if let Some(p) = policy {
        o.insert("policy".into(), json!(p));
    }
    if let Some(s) = start_ms {
        o.insert("start_ms".into(), json!(s));
    }
    if let Some(r) = e.end {
        o.insert("reason".into(), json!(r.name()));
        o.insert(
            "counts".into(),
            json!({"out_packets": e.out.0, "out_bytes": e.out.1, "in_packets": e.r#in.0, "in_bytes": e.r#in.1}),
        );
    }
    if let Some(d) = e.drop_reason {
        let name = drop_reason::NAMES.get(d as usize).copied().unwrap_or("unknown");
        o.insert("reason".into(), json!(name));
        o.insert("from".into(), json!(if e.from_outside() { "outside" } else { "pod" }));
        o.insert("ifindex".into(), json!(e.ifindex));
    }
    Value::Object(o)
}

/// An event as one line for people.
fn to_text(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let ep = |k: &str| match (v.get(format!("{k}_addr")).and_then(|x| x.as_str()), v.get(format!("{k}_port"))) {
        (Some(a), Some(p)) if a.contains(':') => format!("[{a}]:{p}"),
        (Some(a), Some(p)) => format!("{a}:{p}"),
        (Some(a), None) => a.to_string(),
        _ => "-".into(),
    };
    let time = v["time_ms"].as_u64().map(|ms| {
        let t = UNIX_EPOCH + Duration::from_millis(ms);
        humantime::format_rfc3339_millis(t).to_string()
    });
    let mut line = format!("{} {:<15}", time.unwrap_or_default(), s("event"));
    let who = match (v.get("namespace"), v.get("pod")) {
        (Some(ns), Some(p)) => format!(" ({}/{})", ns.as_str().unwrap_or(""), p.as_str().unwrap_or("")),
        _ => String::new(),
    };
    if v["event"] == "drop" {
        // The packet as it was dropped: pod -> remote, or remote -> node from outside.
        let (from, to) = if v["from"] == "outside" { (ep("remote"), ep("nat")) } else { (ep("pod"), ep("remote")) };
        line.push_str(&format!(" reason={} {} {from} -> {to}{who} if={}", s("reason"), s("proto"), v["ifindex"]));
        return line;
    }
    line.push_str(&format!(" {} {}{} -> {} -> {}", s("proto"), ep("pod"), who, ep("nat"), ep("remote")));
    if let Some(p) = v.get("policy").and_then(|p| p.as_str()) {
        line.push_str(&format!(" policy={p}"));
    }
    if let Some(r) = v.get("reason").and_then(|p| p.as_str()) {
        line.push_str(&format!(" reason={r}"));
    }
    if let Some(c) = v.get("counts") {
        line.push_str(&format!(
            " out={}p/{}B in={}p/{}B",
            c["out_packets"], c["out_bytes"], c["in_packets"], c["in_bytes"]
        ));
    }
    line
}

/// The pod an event is about: a pair's or refusal's by its address; a drop's by
/// the veth it was dropped on (a spoofed source names nobody, or somebody else),
/// else by its source, or (from outside) by its destination when that was
/// translated back to a pod's address already.
fn who_of(names: &mut PodNames, pins: &ebpf_masq_core::bpf::loader::Pins, e: &Event) -> Option<(String, String)> {
    match e.kind {
        Kind::Drop if e.from_outside() => e.node.and_then(|n| names.of(pins, n.ip())),
        Kind::Drop => names.of_veth(pins, e.ifindex).or_else(|| e.pod.and_then(|p| names.of(pins, p.ip()))),
        _ => e.pod.and_then(|p| names.of(pins, p.ip())),
    }
}

pub fn main(a: &MonitorArgs) -> Result<()> {
    let pins = a.pins.pins();
    let descs = readers::egress_policy_descs(&pins)?;
    let filter = Filter::of(a, &descs)?;
    let mut names = PodNames::load(&pins)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Error::new(code::IO_FAILURE, format!("install the signal handler: {e}")))?;
    }
    let mut reader = Reader::new(&pins, Ring::Live)?;
    let mut out = std::io::stdout().lock();
    while !stop.load(Ordering::Relaxed) {
        let events = reader.read(Duration::from_millis(200))?;
        if events.is_empty() {
            continue;
        }
        let wall = Wall::now();
        for e in events {
            let who = who_of(&mut names, &pins, &e).map(|(ns, n)| format!("{ns}/{n}"));
            let policy = policy_name(&descs, e.policy);
            if !filter.admits(&e, who.as_deref(), policy.as_deref()) {
                continue;
            }
            let v = to_json(&e, wall.ms(e.ktime_ns), e.start_ns.map(|s| wall.ms(s)), who.as_deref(), policy.as_deref());
            let line = if a.json { v.to_string() } else { to_text(&v) };
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                reader.close(); // the reader went away (a closed pipe)
                return Ok(());
            }
        }
    }
    reader.close();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pod: Option<&str>, events: &[&str], remote: Option<&str>) -> MonitorArgs {
        MonitorArgs {
            pins: PinPathArg { pin_path: "/nonexistent".into() },
            json: true,
            pod: pod.map(String::from),
            policy: None,
            events: events.iter().map(|s| s.to_string()).collect(),
            remote: remote.map(String::from),
        }
    }

    fn made() -> Event {
        Event {
            kind: Kind::PairMade,
            ktime_ns: 0,
            proto: 6,
            pod: Some("10.1.0.5:40000".parse().unwrap()),
            node: Some("192.0.2.1:40001".parse().unwrap()),
            remote: Some("203.0.113.9:443".parse().unwrap()),
            policy: 0,
            end: None,
            drop_reason: None,
            start_ns: Some(0),
            out: (0, 0),
            r#in: (0, 0),
            ifindex: 2,
            nat_flags: 0,
        }
    }

    #[test]
    fn filters_by_pod_kind_and_remote() {
        let e = made();
        let f = Filter::of(&args(Some("default/web"), &["pair_made"], Some("203.0.113.9:443")), &[]).unwrap();
        assert!(f.admits(&e, Some("default/web"), None));
        assert!(!f.admits(&e, Some("default/db"), None));
        let f = Filter::of(&args(Some("10.1.0.6"), &[], None), &[]).unwrap();
        assert!(!f.admits(&e, None, None));
        let f = Filter::of(&args(None, &["refused_share"], Some("203.0.113.9")), &[]).unwrap();
        assert!(!f.admits(&e, None, None));
        let f = Filter::of(&args(None, &[], Some("203.0.113.9:80")), &[]).unwrap();
        assert!(!f.admits(&e, None, None));
        assert!(Filter::of(&args(Some("web"), &[], None), &[]).is_err());
        assert!(Filter::of(&args(None, &["made"], None), &[]).is_err());
        let mut a = args(None, &[], None);
        a.policy = Some("nope".into());
        assert!(Filter::of(&a, &[]).is_err());
    }

    #[test]
    fn json_names_the_pod_and_text_reads_as_a_line() {
        let v = to_json(&made(), 1_000, Some(900), Some("default/web"), None);
        assert_eq!(v["event"], "pair_made");
        assert_eq!((v["namespace"].as_str(), v["pod"].as_str()), (Some("default"), Some("web")));
        assert_eq!((v["nat_addr"].as_str(), v["nat_port"].as_u64()), (Some("192.0.2.1"), Some(40001)));
        let t = to_text(&v);
        assert!(t.contains("tcp 10.1.0.5:40000 (default/web) -> 192.0.2.1:40001 -> 203.0.113.9:443"), "{t}");
        let drop = Event {
            kind: Kind::Drop,
            node: None,
            drop_reason: Some(0),
            start_ns: None,
            ifindex: 9,
            pod: Some("10.1.0.99:4000".parse().unwrap()),
            ..made()
        };
        let v = to_json(&drop, 1_000, None, Some("default/web"), None);
        assert_eq!((v["reason"].as_str(), v["from"].as_str(), v["pod_port"].as_u64()), (Some("spoofed_source"), Some("pod"), Some(4000)));
        let t = to_text(&v);
        assert!(t.contains("reason=spoofed_source tcp 10.1.0.99:4000 -> 203.0.113.9:443 (default/web) if=9"), "{t}");
        let inbound = Event { pod: None, node: Some("192.0.2.1:40001".parse().unwrap()), drop_reason: Some(5), ..drop };
        let t = to_text(&to_json(&inbound, 1_000, None, None, None));
        assert!(t.contains("reason=checksum tcp 203.0.113.9:443 -> 192.0.2.1:40001 if=9"), "{t}");
        let mut r = made();
        r.kind = Kind::RefusedNoPort;
        let v = to_json(&r, 1, None, None, None);
        assert!(v.get("nat_port").is_none() && v["nat_addr"] == "192.0.2.1", "{v}");
    }
}
