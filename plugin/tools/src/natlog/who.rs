//! "Which pod had this node address and port at that time?" from the session
//! log: each pair's holding is the span from its start to its delete (or to the
//! end of the log, when no delete came). A delete carries its start, so it
//! answers alone; a create or alive record opens a span that its delete, or the
//! next pair of the same key, closes. With no remote given, every pair that held
//! the port at that time is a candidate: a node port is shared across remote
//! endpoints (RFC 4787 endpoint-independent mapping does not forbid it).

use std::{collections::HashMap, net::IpAddr};

use super::record::Record;

/// What is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub nat_addr: IpAddr,
    pub nat_port: u16,
    pub at_ms: u64,
    pub remote_addr: Option<IpAddr>,
    pub remote_port: Option<u16>,
    pub proto: Option<u8>,
}

/// A pair that held the port: the record that best describes it (its delete
/// when there was one), from when, until when (None: still held when the log ends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub record: Record,
    pub from_ms: u64,
    pub until_ms: Option<u64>,
}

/// The answer, with the span of time the log covers (so "nobody" can be told
/// from "the log does not reach that time").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub holders: Vec<Holding>,
    pub covers: Option<(u64, u64)>,
}

type Key = (u8, IpAddr, u16, IpAddr, u16);

fn key(r: &Record) -> Option<Key> {
    Some((r.proto, r.nat_addr?, r.nat_port?, r.remote_addr, r.remote_port))
}

/// Every holding the records show, in the order they ended.
pub fn holdings(records: &[Record]) -> Vec<Holding> {
    let mut open: HashMap<Key, Holding> = HashMap::new();
    let mut done = Vec::new();
    for r in records {
        let Some(k) = key(r) else { continue };
        if r.event.opens() {
            if let Some(prev) = open.get(&k) {
                if prev.from_ms == r.start() {
                    continue; // the same pair again (an exporter restart's snapshot)
                }
            }
            let h = Holding { record: r.clone(), from_ms: r.start(), until_ms: None };
            if let Some(mut prev) = open.insert(k, h) {
                // No delete reached the log; the next pair of the key ends it.
                prev.until_ms = Some(r.start());
                done.push(prev);
            }
        } else if r.event == super::record::Event::Delete {
            open.remove(&k);
            done.push(Holding { record: r.clone(), from_ms: r.start(), until_ms: Some(r.time_ms) });
        }
    }
    let mut rest: Vec<Holding> = open.into_values().collect();
    rest.sort_by_key(|h| h.from_ms);
    done.extend(rest);
    done
}

pub fn who(records: &[Record], q: &Query) -> Answer {
    let covers = records.iter().map(|r| r.time_ms).min().zip(records.iter().map(|r| r.time_ms).max());
    let mut holders: Vec<Holding> = holdings(records)
        .into_iter()
        .filter(|h| {
            let r = &h.record;
            r.nat_addr == Some(q.nat_addr)
                && r.nat_port == Some(q.nat_port)
                && q.proto.is_none_or(|p| p == r.proto)
                && q.remote_addr.is_none_or(|a| a == r.remote_addr)
                && q.remote_port.is_none_or(|p| p == r.remote_port)
                && h.from_ms <= q.at_ms
                && h.until_ms.is_none_or(|u| q.at_ms <= u)
        })
        .collect();
    holders.sort_by_key(|h| h.from_ms);
    Answer { holders, covers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natlog::record::{EndReason, Event};

    const NODE: &str = "192.0.2.1";

    fn rec(event: Event, t: u64, start: Option<u64>, pod: &str, remote: &str, nat_port: u16) -> Record {
        Record {
            time_ms: t,
            event,
            proto: 6,
            pod_addr: "10.1.0.5".parse().unwrap(),
            pod_port: 40000,
            nat_addr: Some(NODE.parse().unwrap()),
            nat_port: Some(nat_port),
            remote_addr: remote.parse().unwrap(),
            remote_port: 443,
            start_ms: start,
            namespace: Some("default".into()),
            pod: Some(pod.into()),
            policy: None,
            reason: (event == Event::Delete).then_some(EndReason::Closed),
            counts: None,
        }
    }

    fn ask(records: &[Record], at: u64, remote: Option<&str>) -> Vec<String> {
        let q = Query {
            nat_addr: NODE.parse().unwrap(),
            nat_port: 40123,
            at_ms: at,
            remote_addr: remote.map(|r| r.parse().unwrap()),
            remote_port: None,
            proto: None,
        };
        who(records, &q).holders.iter().map(|h| h.record.who()).collect()
    }

    #[test]
    fn the_pod_holding_the_port_at_that_time_and_nobody_outside_its_span() {
        let log = [
            rec(Event::Create, 1000, None, "a", "203.0.113.10", 40123),
            rec(Event::Delete, 5000, Some(1000), "a", "203.0.113.10", 40123),
            rec(Event::Create, 6000, None, "b", "203.0.113.10", 40123),
            rec(Event::Create, 6500, None, "c", "203.0.113.10", 40999),
        ];
        assert_eq!(ask(&log, 3000, None), ["default/a"]);
        assert_eq!(ask(&log, 5000, None), ["default/a"], "the delete's instant is still a's");
        assert!(ask(&log, 5500, None).is_empty(), "between the pairs: nobody");
        assert_eq!(ask(&log, 90_000, None), ["default/b"], "no delete yet: still b's");
        assert!(ask(&log, 500, None).is_empty());
    }

    #[test]
    fn a_shared_port_lists_every_remote_unless_one_is_named() {
        let log = [
            rec(Event::Create, 1000, None, "a", "203.0.113.10", 40123),
            rec(Event::Create, 1100, None, "b", "203.0.113.20", 40123),
        ];
        assert_eq!(ask(&log, 2000, None), ["default/a", "default/b"]);
        assert_eq!(ask(&log, 2000, Some("203.0.113.20")), ["default/b"]);
    }

    #[test]
    fn a_delete_alone_answers_and_a_restart_snapshot_is_the_same_pair() {
        // The exporter started after the pair was made: only its delete is logged.
        let log = [rec(Event::Delete, 9000, Some(2000), "a", "203.0.113.10", 40123)];
        assert_eq!(ask(&log, 2500, None), ["default/a"]);
        // A restart logs the live pair again as alive, same start: one holding.
        let log = [
            rec(Event::Create, 1000, None, "a", "203.0.113.10", 40123),
            rec(Event::Alive, 4000, Some(1000), "a", "203.0.113.10", 40123),
            rec(Event::Delete, 8000, Some(1000), "a", "203.0.113.10", 40123),
        ];
        assert_eq!(holdings(&log).len(), 1);
        assert_eq!(ask(&log, 6000, None), ["default/a"]);
    }

    #[test]
    fn a_lost_delete_is_ended_by_the_next_pair_of_the_key() {
        let log = [
            rec(Event::Create, 1000, None, "a", "203.0.113.10", 40123),
            rec(Event::Create, 7000, None, "b", "203.0.113.10", 40123),
        ];
        assert_eq!(ask(&log, 3000, None), ["default/a"]);
        assert_eq!(ask(&log, 8000, None), ["default/b"]);
    }
}
