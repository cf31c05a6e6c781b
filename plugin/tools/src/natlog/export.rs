//! The live exporter: the data plane's `events_log` ring as NAT session log
//! records, written where `natLog` says (file.rs, ipfix.rs). Run in the
//! foreground by `ebpf-masq natlog --conf` and by `ebpf-masq agent`.
//!
//! Order at start: the ring's lease is taken first, then the pairs alive now are
//! logged (`alive`, snapshot.rs), then events follow. A pair made between the two
//! is logged twice (alive, then create); none is missed, so a restart leaves no
//! hole in who held what.
//!
//! Names: a pair's pod (namespace, name) and egress policy are resolved when it
//! is made and kept with the pair until its end is logged, so a delete still
//! names the pod after the pod is gone, and a pod address given to a new pod
//! never renames an older pair.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use super::{
    file::JsonLog,
    ipfix,
    record::{Counts, EndReason, Event, Record},
    snapshot, FILE_KEEP,
};
use ebpf_masq_core::{
    bpf::{events::{self, Kind, Ring, Wall}, loader::Pins,},
    config::NatLogConf,
    error::{code, Error, Result},
};
use crate::{nat_list::policy_name, readers::{self, PodNames, PolicyDesc},};

/// The programs' clock is carried over to wall-clock time by one reading of the two this long.
const WALL_EVERY: Duration = Duration::from_secs(3600);
/// How long the exporter sleeps when it found the ring empty (the programs never
/// wake a reader): a burst from idle must fit the ring (EVENTS_LOG_RING_BYTES,
/// 69,905 events) in that time, ~700,000 events a second.
const READ_EVERY: Duration = Duration::from_millis(100);
/// How often the exporter publishes its counts (records, IPFIX unsent) for `status` and metrics.
const COUNT_EVERY: Duration = Duration::from_secs(1);
/// How often the exporter looks for pairs whose pod was deleted (`pod_deleted`).
const GONE_EVERY: Duration = Duration::from_secs(2);
/// IPFIX templates are sent again this often (RFC 7011 section 8.4 for UDP).
pub const TEMPLATE_EVERY: Duration = Duration::from_secs(60);

/// Where records go.
pub struct Sinks {
    file: Option<JsonLog>,
    ipfix: Option<ipfix::Exporter>,
}

impl Sinks {
    pub fn open(c: &NatLogConf) -> Result<Sinks> {
        let file = match &c.file {
            Some(p) => Some(JsonLog::open(p, c.file_max_mb << 20, FILE_KEEP)?),
            None => None,
        };
        let ipfix = match &c.ipfix {
            Some(h) => Some(ipfix::Exporter::new(h, c.domain, TEMPLATE_EVERY).map_err(|e| {
                Error::new(code::IO_FAILURE, format!("natLog.ipfix {h}: {e}"))
            })?),
            None => None,
        };
        Ok(Sinks { file, ipfix })
    }

    /// Write `rs` everywhere. A file that cannot be written is an error; a
    /// collector that cannot be reached only counts the records it lost.
    pub fn write(&mut self, rs: &[Record]) -> Result<()> {
        if rs.is_empty() {
            return Ok(());
        }
        if let Some(f) = &mut self.file {
            f.write(rs)?;
        }
        if let Some(x) = &mut self.ipfix {
            x.export(rs, unix_secs());
        }
        Ok(())
    }

    /// (records sent, records not sent) to the IPFIX collector, with any error
    /// it sent back since the last message taken into account.
    pub fn ipfix_counts(&mut self) -> Option<(u64, u64)> {
        self.ipfix.as_mut().map(|x| {
            x.settle();
            (x.sent.records, x.sent.unsent_records)
        })
    }
}

fn unix_secs() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as u32
}

/// A pair as its events name it.
type PairKey = (u8, SocketAddr, SocketAddr, SocketAddr);

/// Who the pods are, and who held which pair.
struct Names {
    pods: PodNames,
    policies: Vec<PolicyDesc>,
    /// Each pair logged open: its (namespace, name, policy), and its start.
    held: HashMap<PairKey, Held>,
    started: HashMap<PairKey, u64>,
}

type Held = (Option<String>, Option<String>, Option<String>);

impl Names {
    fn load(pins: &Pins) -> Result<Names> {
        Ok(Names {
            pods: PodNames::load(pins)?,
            policies: readers::egress_policy_descs(pins)?,
            held: HashMap::new(),
            started: HashMap::new(),
        })
    }

    /// The pod and policy of a pair being made now (the registrations read again on a miss).
    fn of_new(&mut self, pins: &Pins, pod: IpAddr, policy: u8) -> Held {
        let (ns, name) = self.pods.of(pins, pod).map_or((None, None), |(n, p)| (Some(n), Some(p)));
        if policy != 0 && policy_name(&self.policies, policy).is_none() {
            match readers::egress_policy_descs(pins) {
                Ok(d) => self.policies = d,
                Err(e) => log::warn!("natlog: egress policies not read: {}", e.msg),
            }
        }
        (ns, name, policy_name(&self.policies, policy))
    }

    /// The pairs of pods that are gone: a CNI DEL removes its pod's pairs itself,
    /// and the programs see nothing of it, so each pair logged open whose pod is
    /// no longer registered (or its address is another pod's now) is logged ended
    /// here, `pod_deleted`, at the time this is found (within `GONE_EVERY`).
    fn gone(&mut self, pins: &Pins, now_ms: u64) -> Vec<Record> {
        if !self.held.values().any(|(_, name, _)| name.is_some()) {
            return Vec::new();
        }
        if let Err(e) = self.pods.reload(pins) {
            log::warn!("natlog: pods not read: {}", e.msg);
            return Vec::new();
        }
        self.ended_with_their_pods(now_ms)
    }

    /// [`Names::gone`] against the registrations as last read.
    fn ended_with_their_pods(&mut self, now_ms: u64) -> Vec<Record> {
        let pods = &self.pods;
        let gone: Vec<PairKey> = self
            .held
            .iter()
            .filter(|((_, pod, _, _), (ns, name, _))| match (ns, name) {
                (Some(ns), Some(name)) => pods.known(&pod.ip()) != Some(&(ns.clone(), name.clone())),
                _ => false, // a rule's source (a tunnel's client) has no registration to lose
            })
            .map(|(k, _)| *k)
            .collect();
        gone.into_iter()
            .filter_map(|k| self.held.remove(&k).map(|h| (k, h)))
            .map(|((proto, pod, node, remote), (namespace, pod_name, policy))| Record {
                time_ms: now_ms,
                event: Event::Delete,
                proto,
                pod_addr: pod.ip(),
                pod_port: pod.port(),
                nat_addr: Some(node.ip()),
                nat_port: Some(node.port()),
                remote_addr: remote.ip(),
                remote_port: remote.port(),
                start_ms: self.started.remove(&(proto, pod, node, remote)),
                namespace,
                pod: pod_name,
                policy,
                reason: Some(EndReason::PodDeleted),
                counts: None,
            })
            .collect()
    }

    fn seed(&mut self, alive: &[Record]) {
        for r in alive {
            if let (Some(a), Some(p)) = (r.nat_addr, r.nat_port) {
                let key = (r.proto, SocketAddr::new(r.pod_addr, r.pod_port), SocketAddr::new(a, p), SocketAddr::new(r.remote_addr, r.remote_port));
                self.held.insert(key, (r.namespace.clone(), r.pod.clone(), r.policy.clone()));
                self.started.insert(key, r.start());
            }
        }
    }
}

/// The record of one event; None for what the session log does not hold (drops).
fn record_of(ev: &events::Event, wall: &Wall, names: &mut Names, pins: &Pins) -> Option<Record> {
    let (pod, node, remote) = (ev.pod?, ev.node?, ev.remote?);
    let key = (ev.proto, pod, node, remote);
    let time_ms = wall.ms(ev.ktime_ns);
    let (event, reason) = match ev.kind {
        Kind::PairMade => (Event::Create, None),
        Kind::PairEnded => (
            Event::Delete,
            Some(match ev.end? {
                events::EndReason::Closed => EndReason::Closed,
                events::EndReason::Expired => EndReason::Expired,
                events::EndReason::TakenOver => EndReason::TakenOver,
                events::EndReason::PodDeleted => EndReason::PodDeleted,
            }),
        ),
        Kind::RefusedNoPort => (Event::PortsExhausted, None),
        Kind::RefusedShare | Kind::RefusedLimit => (Event::QuotaExceeded, None),
        Kind::Drop => return None,
    };
    let (namespace, pod_name, policy) = match ev.kind {
        Kind::PairMade => {
            let n = names.of_new(pins, pod.ip(), ev.policy);
            names.held.insert(key, n.clone());
            names.started.insert(key, ev.start_ns.map_or(time_ms, |s| wall.ms(s)));
            n
        }
        Kind::PairEnded => {
            names.started.remove(&key);
            match names.held.remove(&key) {
                Some(n) => n,
                // Logged ended already (its pod deleted) or made before the exporter: no record twice.
                None if names.pods.known(&pod.ip()).is_none() => return None,
                None => names.of_new(pins, pod.ip(), ev.policy),
            }
        }
        _ => names.of_new(pins, pod.ip(), ev.policy),
    };
    let refused = matches!(event, Event::PortsExhausted | Event::QuotaExceeded);
    Some(Record {
        time_ms,
        event,
        proto: ev.proto,
        pod_addr: pod.ip(),
        pod_port: pod.port(),
        nat_addr: Some(node.ip()).filter(|a| !a.is_unspecified()),
        nat_port: (!refused).then_some(node.port()),
        remote_addr: remote.ip(),
        remote_port: remote.port(),
        start_ms: ev.start_ns.filter(|_| !refused).map(|s| wall.ms(s)),
        namespace,
        pod: pod_name,
        policy,
        reason,
        counts: (event == Event::Delete).then_some(Counts {
            out_packets: ev.out.0,
            out_bytes: ev.out.1,
            in_packets: ev.r#in.0,
            in_bytes: ev.r#in.1,
        }),
    })
}

/// What an export run did (logged at its end, and by the agent's metrics).
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    /// Records of the pairs alive at start (counted in `records` too).
    pub alive: u64,
    /// Every record written.
    pub records: u64,
    pub ipfix_unsent: u64,
}

/// Export until `stop` is set: alive pairs first, then every event of the
/// `events_log` ring. The ring's lease is given up on return (and runs out
/// within seconds if the process dies).
pub fn run(pins: &Pins, c: &NatLogConf, stop: &AtomicBool) -> Result<Totals> {
    let mut reader = events::Reader::new(pins, Ring::Log)?;
    let mut sinks = Sinks::open(c)?;
    let mut names = Names::load(pins)?;
    let alive = snapshot::alive(pins)?;
    names.seed(&alive);
    sinks.write(&alive)?;
    let mut totals = Totals { alive: alive.len() as u64, records: alive.len() as u64, ..Totals::default() };
    let mut wall = Wall::now();
    let (mut looked, mut counted) = (Instant::now(), Instant::now());
    log::info!("natlog=start alive={} file={:?} ipfix={:?}", alive.len(), c.file, c.ipfix);
    while !stop.load(Ordering::Relaxed) {
        let evs = reader.read(READ_EVERY)?;
        if wall.age() > WALL_EVERY {
            wall = Wall::now(); // a stepped wall clock shows within the hour
        }
        let mut rs: Vec<Record> = evs.iter().filter_map(|e| record_of(e, &wall, &mut names, pins)).collect();
        if looked.elapsed() >= GONE_EVERY {
            rs.extend(names.gone(pins, wall.ms(events::ktime_now())));
            looked = Instant::now();
        }
        totals.records += rs.len() as u64;
        sinks.write(&rs)?;
        if counted.elapsed() >= COUNT_EVERY {
            totals.ipfix_unsent = sinks.ipfix_counts().map_or(0, |(_, u)| u);
            reader.log_counts(totals.records, totals.ipfix_unsent);
            counted = Instant::now();
        }
    }
    totals.ipfix_unsent = sinks.ipfix_counts().map_or(0, |(_, u)| u);
    reader.log_counts(totals.records, totals.ipfix_unsent);
    reader.close();
    log::info!("natlog=stop records={} ipfix_unsent={}", totals.records, totals.ipfix_unsent);
    Ok(totals)
}

/// An exporter on a thread of its own (the agent's): restarted after an error
/// (a file that cannot be written, a data plane not there yet) every `RETRY`,
/// stopped and joined by [`Running::stop`], so its lease is given up at once.
pub struct Running {
    pub conf: NatLogConf,
    pub pin_path: std::path::PathBuf,
    stop: std::sync::Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// An exporter that failed starts again after this long.
const RETRY: Duration = Duration::from_secs(5);

impl Running {
    pub fn start(pin_path: &std::path::Path, conf: &NatLogConf) -> Running {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (flag, c, pins) = (std::sync::Arc::clone(&stop), conf.clone(), Pins::new(pin_path));
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match run(&pins, &c, &flag) {
                    Ok(_) => return,
                    Err(e) => log::error!("natlog=error err={:?} (started again in {} s)", e.msg, RETRY.as_secs()),
                }
                let until = Instant::now() + RETRY;
                while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Running { conf: conf.clone(), pin_path: pin_path.to_path_buf(), stop, thread: Some(thread) }
    }

    /// Stop the exporter and wait for it (it gives its lease up as it returns).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("natlog=error err=\"the exporter thread panicked\"");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind) -> events::Event {
        events::Event {
            kind,
            ktime_ns: 5_000_000_000,
            proto: 6,
            pod: Some("10.244.1.2:40000".parse().unwrap()),
            node: Some("192.0.2.1:40001".parse().unwrap()),
            remote: Some("203.0.113.9:443".parse().unwrap()),
            policy: 0,
            end: (kind == Kind::PairEnded).then_some(events::EndReason::Closed),
            drop_reason: None,
            start_ns: Some(4_000_000_000),
            out: (3, 180),
            r#in: (2, 120),
            ifindex: 2,
            nat_flags: 0,
        }
    }

    fn names_with_pod() -> Names {
        Names {
            pods: PodNames::of_pairs(&[("10.244.1.2", "shop", "web-0")]),
            policies: vec![],
            held: HashMap::new(),
            started: HashMap::new(),
        }
    }

    #[test]
    fn a_pair_made_then_ended_keeps_its_pod_after_the_pod_is_gone() {
        let pins = Pins::new(std::path::Path::new("/nonexistent"));
        let wall = Wall::at(5_000_000_000, 1_005_000);
        let mut names = names_with_pod();
        let made = record_of(&ev(Kind::PairMade), &wall, &mut names, &pins).unwrap();
        assert_eq!((made.event, made.time_ms, made.start_ms), (Event::Create, 1_005_000, Some(1_004_000)));
        assert_eq!((made.nat_addr, made.nat_port), (Some("192.0.2.1".parse().unwrap()), Some(40001)));
        assert_eq!(made.who(), "shop/web-0");
        names.pods = PodNames::of_pairs(&[("10.244.1.2", "other", "new-pod")]); // the pod deleted, its address reused
        let ended = record_of(&ev(Kind::PairEnded), &wall, &mut names, &pins).unwrap();
        assert_eq!((ended.event, ended.reason), (Event::Delete, Some(EndReason::Closed)));
        assert_eq!(ended.who(), "shop/web-0", "the name it was made with");
        assert_eq!(ended.counts, Some(Counts { out_packets: 3, out_bytes: 180, in_packets: 2, in_bytes: 120 }));
        assert!(names.held.is_empty());
    }

    #[test]
    fn a_deleted_pods_pairs_end_as_pod_deleted_once() {
        let pins = Pins::new(std::path::Path::new("/nonexistent"));
        let wall = Wall::at(5_000_000_000, 1_005_000);
        let mut names = names_with_pod();
        record_of(&ev(Kind::PairMade), &wall, &mut names, &pins).unwrap();
        let mut tunnel = ev(Kind::PairMade);
        tunnel.pod = Some("192.168.6.7:5000".parse().unwrap()); // a rule's source: no registration
        record_of(&tunnel, &wall, &mut names, &pins).unwrap();
        assert!(names.ended_with_their_pods(2_000_000).is_empty(), "the pod is still there");
        names.pods = PodNames::of_pairs(&[("10.244.1.2", "other", "new-pod")]); // deleted, its address reused
        let [r] = names.ended_with_their_pods(2_000_000).try_into().unwrap();
        assert_eq!((r.event, r.reason, r.time_ms, r.start_ms), (Event::Delete, Some(EndReason::PodDeleted), 2_000_000, Some(1_004_000)));
        assert_eq!((r.who(), r.nat_port), ("shop/web-0".to_string(), Some(40001)));
        assert!(names.ended_with_their_pods(2_000_000).is_empty(), "once");
        assert_eq!(names.held.len(), 1, "the tunnel's pair stays held");
        // A pair whose pod is gone and whose address nobody holds: an end told late is not logged twice.
        names.pods = PodNames::of_pairs(&[]);
        assert_eq!(record_of(&ev(Kind::PairEnded), &wall, &mut names, &pins), None);
    }

    #[test]
    fn refusals_carry_no_node_port_and_drops_are_not_session_records() {
        let pins = Pins::new(std::path::Path::new("/nonexistent"));
        let wall = Wall::at(5_000_000_000, 5_000);
        let mut names = names_with_pod();
        let mut e = ev(Kind::RefusedShare);
        e.node = Some("192.0.2.1:0".parse().unwrap());
        let r = record_of(&e, &wall, &mut names, &pins).unwrap();
        assert_eq!((r.event, r.nat_port, r.start_ms), (Event::QuotaExceeded, None, None));
        assert_eq!(r.nat_addr, Some("192.0.2.1".parse().unwrap()));
        let r = record_of(&ev(Kind::RefusedNoPort), &wall, &mut names, &pins).unwrap();
        assert_eq!(r.event, Event::PortsExhausted);
        let d = events::Event { pod: None, node: None, remote: None, ..ev(Kind::Drop) };
        assert_eq!(record_of(&d, &wall, &mut names, &pins), None);
    }
}
