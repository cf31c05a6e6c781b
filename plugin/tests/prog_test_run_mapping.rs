//! Endpoint-independent mapping and port preservation through the real pinned
//! uplink program, with BPF_PROG_TEST_RUN (RFC 4787 REQ-1 and REQ-3, RFC 5382
//! REQ-1, RFC 5508 REQ-1 for echo identifiers): a pod endpoint keeps its node port
//! for every remote while that port is free towards it; a free pod port inside
//! portRange is kept as it is; filtering stays address-and-port-dependent.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

mod support;

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::counter;
use support::{harness::*, packet::*, packet6::*};

const MASQ: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const TO_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);
const POD: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);
const POD2: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 7);
const REMOTE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const REMOTE2: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
const TUNNEL_CLIENT: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 7);

/// The test data plane's portRange is 20000-20099; pod ports 40000+ are outside it.
fn node() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, 7, true);
    dp.add_pod(POD2, 8, true);
    dp
}

/// The NAT source port egress gave `frame` (which must leave masqueraded to `nat`).
#[track_caller]
fn mapped(dp: &Dataplane, frame: &[u8], nat: Ipv4Addr) -> u16 {
    let out = dp.egress(frame).passed();
    assert_checksums(&out);
    let s = summary(&out);
    assert_eq!(s.src, nat);
    assert!((20000..=20099).contains(&s.sport), "port {} outside portRange", s.sport);
    s.sport
}

#[test]
fn one_pod_endpoint_keeps_its_mapping_for_every_remote() {
    let dp = node();
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    // Another remote address, another remote port, both: the same mapping (REQ-1).
    assert_eq!(mapped(&dp, &udp(POD, REMOTE2, 40000, 3478), MASQ), p);
    assert_eq!(mapped(&dp, &udp(POD, REMOTE, 40000, 3479), MASQ), p);
    assert_eq!(mapped(&dp, &udp(POD, REMOTE2, 40000, 3479), MASQ), p);
    assert_eq!(dp.counter(counter::MAP_REUSED), 3);
    assert_eq!(dp.counter(counter::NAT_CREATED), 4);
    // Each is a pair of its own: every remote's reply finds its flow.
    for (remote, rport) in [(REMOTE, 3478), (REMOTE2, 3478), (REMOTE, 3479), (REMOTE2, 3479)] {
        let back = dp.ingress(&udp(remote, MASQ, rport, p)).passed();
        assert_eq!((summary(&back).dst, summary(&back).dport), (POD, 40000));
    }
    assert_eq!(dp.assert_pairs_complete(), 4);
    // TCP and UDP endpoints are apart: the same pod port over TCP is mapped on its own.
    mapped(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ);
    assert_eq!(dp.counter(counter::MAP_REUSED), 3);
}

#[test]
fn filtering_stays_address_and_port_dependent() {
    let dp = node();
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    // Someone else sending to the mapping is not let in (RFC 4787 REQ-8's default here).
    for frame in [udp(REMOTE2, MASQ, 3478, p), udp(REMOTE, MASQ, 3479, p)] {
        assert_eq!(dp.ingress(&frame).passed(), frame, "an unsolicited packet was translated");
    }
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 0);
}

#[test]
fn a_free_pod_port_inside_the_range_is_preserved() {
    let dp = node();
    assert_eq!(mapped(&dp, &udp(POD, REMOTE, 20042, 53), MASQ), 20042);
    assert_eq!(dp.counter(counter::MAP_PRESERVED), 1);
    // Another pod with the same port towards the same remote endpoint: a random port...
    let q = mapped(&dp, &udp(POD2, REMOTE, 20042, 53), MASQ);
    assert_ne!(q, 20042);
    // ... which is then that endpoint's mapping for every remote (the binding wins over
    // preservation, or its mapping would depend on the remote).
    assert_eq!(mapped(&dp, &udp(POD2, REMOTE2, 20042, 53), MASQ), q);
    // An echo identifier is preserved the same way (RFC 5508).
    let out = dp.egress(&echo_request(POD, REMOTE, 20077, 1)).passed();
    assert_eq!(out, echo_request(MASQ, REMOTE, 20077, 1));
    // Outside portRange a port is never kept (so never below it either: REQ-3).
    let low = mapped(&dp, &udp(POD, REMOTE, 123, 123), MASQ);
    assert!(low >= 20000, "{low}");
    assert_eq!(dp.counter(counter::MAP_PRESERVED), 2);
}

#[test]
fn a_mapping_taken_towards_one_remote_gives_a_new_port_there_only() {
    let dp = node();
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    // POD2's flow to REMOTE2:3478 happens to hold p there (as if preserved): put it so.
    let _ = mapped(&dp, &udp(POD2, REMOTE2, p, 3478), MASQ);
    let held = dp.rev().iter().any(|(k, _)| k.saddr == REMOTE2.octets() && u16::from_be_bytes(k.dport) == p);
    assert!(held, "POD2 should hold {p} towards REMOTE2: {:?}", dp.rev());
    // POD:40000 to REMOTE2:3478 cannot have p: another port, and the binding stays p.
    let q = mapped(&dp, &udp(POD, REMOTE2, 40000, 3478), MASQ);
    assert_ne!(q, p);
    assert_eq!(mapped(&dp, &udp(POD, REMOTE2, 40000, 3479), MASQ), p, "the mapping is still p elsewhere");
}

#[test]
fn a_binding_to_another_address_is_not_used() {
    let dp = node();
    dp.add_rule(LO, Ipv4Addr::new(192, 168, 6, 0), 24, 1, Some(TO_ADDR));
    let p = mapped(&dp, &udp(TUNNEL_CLIENT, REMOTE, 40000, 53), TO_ADDR);
    assert_eq!(mapped(&dp, &udp(TUNNEL_CLIENT, REMOTE2, 40000, 53), TO_ADDR), p);
    assert_eq!(dp.counter(counter::MAP_REUSED), 1);
}

#[test]
fn ipv6_endpoint_keeps_its_mapping() {
    let dp = Dataplane::new();
    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (masq, pod) = (a("2001:db8:ffff::1"), a("fd00:10:1::5"));
    dp.add_uplink6(LO, Some(MASQ), masq);
    dp.add_pod6(pod, 7, true);
    let map = |dst: &str, dport| summary6(&dp.egress(&udp6(pod, a(dst), 40000, dport)).passed()).sport;
    let p = map("2001:db8:100::10", 3478);
    assert_eq!(map("2001:db8:100::20", 3478), p);
    assert_eq!(map("2001:db8:100::20", 3479), p);
    let kept = summary6(&dp.egress(&udp6(pod, a("2001:db8:100::10"), 20011, 53)).passed()).sport;
    assert_eq!(kept, 20011);
    assert_eq!((dp.counter(counter::MAP_REUSED), dp.counter(counter::MAP_PRESERVED)), (2, 1));
}
