//! One NAT session log record: a pair made or ended, a pair found alive when the
//! exporter started, or a flow refused. The same record is a JSON line in the
//! log file and an IPFIX data record (ipfix.rs); a delete carries the pair's
//! start, so a delete alone says who held a node address and port, and when.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// What happened. RFC 8158's natEvent for each in [`Event::nat_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A pair was made (the first packet of a new flow was translated).
    Create,
    /// A pair ended; `reason` says why.
    Delete,
    /// The pair was alive when the exporter started (a snapshot, not an event):
    /// its start is the table's, so a restart leaves no hole in who held what.
    Alive,
    /// A new flow was refused: every port towards its remote endpoint was held.
    PortsExhausted,
    /// A new flow was refused: the pod was over its share of a busy endpoint's ports.
    QuotaExceeded,
}

impl Event {
    /// IANA's natEvent (RFC 8158 section 4): 4 NAT44 session create, 5 delete,
    /// 12 NAT ports exhausted, 13 quota exceeded. IPv6 pairs (NAT66, which the
    /// registry has no value for) use the same numbers; a snapshot is a create
    /// marked by the enterprise element `natSnapshot`.
    pub fn nat_event(self) -> u8 {
        match self {
            Event::Create | Event::Alive => 4,
            Event::Delete => 5,
            Event::PortsExhausted => 12,
            Event::QuotaExceeded => 13,
        }
    }

    /// Whether the record says a pair held its node address and port from `start_ms`.
    pub fn opens(self) -> bool {
        matches!(self, Event::Create | Event::Alive)
    }
}

/// Why a pair ended (a delete's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The TCP close completed (FIN both ways and the last ACK, or a reset).
    Closed,
    /// Idle past its timeout, removed by the expiry sweep.
    Expired,
    /// Its port was given to a new pair (a finished or expired pair's port reused).
    TakenOver,
    /// The pod was deleted (CNI DEL) and its pairs with it.
    PodDeleted,
}

/// Traffic a pair carried, counted on the node side (what left and what came back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub out_packets: u64,
    pub out_bytes: u64,
    pub in_packets: u64,
    pub in_bytes: u64,
}

/// One record. Addresses and ports in host order; ICMP's "port" is the echo id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When it happened (Unix time, milliseconds).
    pub time_ms: u64,
    pub event: Event,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).
    pub proto: u8,
    pub pod_addr: IpAddr,
    pub pod_port: u16,
    /// The node address and port the pair took (absent on a refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_addr: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_port: Option<u16>,
    pub remote_addr: IpAddr,
    pub remote_port: u16,
    /// When the pair was made (create: `time_ms`; delete and alive: its start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The egress policy whose address the pair took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<EndReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
}

impl Record {
    /// When the pair began holding its node port: the record's start, else its time.
    pub fn start(&self) -> u64 {
        self.start_ms.unwrap_or(self.time_ms)
    }

    /// "NS/NAME" when the pod is known, else its address.
    pub fn who(&self) -> String {
        match (&self.namespace, &self.pod) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (None, Some(name)) => name.clone(),
            _ => self.pod_addr.to_string(),
        }
    }
}

/// A socket address as it is written: `A:P`, `[A6]:P`.
pub use crate::readers::endpoint;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_round_trips_and_leaves_out_what_is_absent() {
        let r = Record {
            time_ms: 1_764_979_387_000,
            event: Event::Delete,
            proto: 6,
            pod_addr: "10.1.0.5".parse().unwrap(),
            pod_port: 40000,
            nat_addr: Some("192.0.2.1".parse().unwrap()),
            nat_port: Some(40123),
            remote_addr: "203.0.113.10".parse().unwrap(),
            remote_port: 443,
            start_ms: Some(1_764_979_380_000),
            namespace: Some("default".into()),
            pod: Some("web-1".into()),
            policy: None,
            reason: Some(EndReason::TakenOver),
            counts: Some(Counts { out_packets: 5, out_bytes: 400, in_packets: 4, in_bytes: 900 }),
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""event":"delete""#) && line.contains(r#""reason":"taken_over""#), "{line}");
        assert!(!line.contains("policy"), "{line}");
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
        assert_eq!(r.who(), "default/web-1");
        assert_eq!(r.start(), 1_764_979_380_000);
    }

    #[test]
    fn nat_events_are_rfc_8158s() {
        assert_eq!(
            [Event::Create, Event::Alive, Event::Delete, Event::PortsExhausted, Event::QuotaExceeded].map(Event::nat_event),
            [4, 4, 5, 12, 13]
        );
    }

    #[test]
    fn endpoints_bracket_ipv6() {
        assert_eq!(endpoint("2001:db8::1".parse::<IpAddr>().unwrap(), 80), "[2001:db8::1]:80");
        assert_eq!(endpoint("192.0.2.1".parse::<IpAddr>().unwrap(), 80), "192.0.2.1:80");
        assert_eq!(endpoint("2001:db8::1", 80), "[2001:db8::1]:80", "as text too (nat list's rows)");
    }
}
