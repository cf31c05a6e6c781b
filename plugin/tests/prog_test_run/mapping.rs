//! Endpoint-independent mapping and port preservation through the real pinned
//! uplink program, with BPF_PROG_TEST_RUN (RFC 4787 REQ-1 and REQ-3, RFC 5382
//! REQ-1, RFC 5508 REQ-1 for echo identifiers): a pod endpoint keeps its node port
//! for every remote while that port is free towards it; a free pod port inside
//! portRange is kept as it is; filtering stays address-and-port-dependent.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::{
    counter, NAT_C_ACKED_PEER, NAT_C_FIN_FIRST, NAT_C_PEER_FIN, NAT_F_FIN, NAT_F_RST, NAT_F_TCP_CLOSING,
};
use crate::support::{clock::monotonic_ago, harness::*, node::*, packet::*, packet6::*};

const TO_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);
const POD3: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 9);

// The nodes are `pods_node()`: the test data plane's portRange is 20000-20099; pod ports 40000+ are outside it.

/// The NAT source port egress gave `frame` (which must leave masqueraded to `nat`).
#[track_caller]
pub(crate) fn mapped(dp: &Dataplane, frame: &[u8], nat: Ipv4Addr) -> u16 {
    let out = dp.egress(frame).passed();
    assert_checksums(&out);
    let s = summary(&out);
    assert_eq!(s.src, nat);
    assert!((20000..=20099).contains(&s.sport), "port {} outside portRange", s.sport);
    s.sport
}

#[test]
fn one_pod_endpoint_keeps_its_mapping_for_every_remote() {
    let dp = pods_node();
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
    let dp = pods_node();
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    // Someone else sending to the mapping is not let in (RFC 4787 REQ-8's default here).
    for frame in [udp(REMOTE2, MASQ, 3478, p), udp(REMOTE, MASQ, 3479, p)] {
        assert_eq!(dp.ingress(&frame).passed(), frame, "an unsolicited packet was translated");
    }
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 0);
}

#[test]
fn a_free_pod_port_inside_the_range_is_preserved() {
    let dp = pods_node();
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
    let dp = pods_node();
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
    let dp = pods_node();
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

// ---- reuse of finished TCP pairs (netfilter reuses TIME_WAIT/CLOSE entries) ----

/// One NAT port (20000) and long timeouts: only a takeover can free it.
fn one_port_node() -> Dataplane {
    let dp = pods_node();
    dp.set_config(20000, 20000, 3600);
    dp
}

/// Both halves of POD:40000 -> REMOTE:443's pair quiet for `secs` (as if its last packet were that old).
fn age_pair(dp: &Dataplane, port: u16, secs: u64) {
    stamp_pair(dp, port, monotonic_ago(std::time::Duration::from_secs(secs)));
}

/// Both halves of POD:40000 -> REMOTE:443's pair last seen at `then` (CLOCK_MONOTONIC ns).
fn stamp_pair(dp: &Dataplane, port: u16, then: u64) {
    let fk = nat_key(POD, REMOTE, 40000, 443, TCP);
    let rk = reverse_key(&fk, MASQ, port);
    let (mut fe, mut re) = (dp.get_fwd(&fk).unwrap(), dp.get_rev(&rk).unwrap());
    fe.last_seen_ns = then;
    re.last_seen_ns = then;
    dp.put_fwd(&fk, fe);
    dp.put_rev(&rk, re);
}

/// A completed close gives its port once its last ACK is NAT_SETTLE_NS (10 ms,
/// bpf/lib/nat/port.h) old: wait that long and more (the programs read the coarse
/// clock, a tick behind at most). Waiting only makes the outcome surer.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(40));
}

/// POD:40000 <-> REMOTE:443 opened through the one port; returns it.
fn open_flow(dp: &Dataplane) -> u16 {
    let p = mapped(dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ);
    dp.ingress(&tcp(REMOTE, MASQ, 443, p, SYN | ACK)).passed();
    mapped(dp, &tcp(POD, REMOTE, 40000, 443, ACK), MASQ);
    p
}

// Sequence numbers of the closes below: the pod's side starts at S, the remote's at R.
const S: u32 = 0x1000_0000;
const R: u32 = 0x7000_0000;
/// What acknowledges a FIN sent (with the test payload) at `seq`.
const fn fin_ack(seq: u32) -> u32 {
    seq.wrapping_add(TCP_PAYLOAD_LEN + 1)
}

/// The pod closes first, as a client does: its FIN, the remote's ACK+FIN (which
/// acknowledges it), then the pod's ACK of the remote's FIN, which completes the close.
fn close_pod_first(dp: &Dataplane, p: u16) {
    mapped(dp, &tcp_seq(POD, REMOTE, 40000, 443, FIN | ACK, S, R), MASQ);
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, FIN | ACK, R, fin_ack(S))).passed();
    mapped(dp, &tcp_seq(POD, REMOTE, 40000, 443, ACK, fin_ack(S), fin_ack(R)), MASQ);
}

#[test]
fn a_completed_close_gives_its_port_to_a_new_flow_at_once() {
    // RFC 5382 REQ-5 / netfilter's TIME_WAIT eviction (nf_nat_used_tuple_harder):
    // a connection whose close completed holds its port no longer.
    let dp = one_port_node();
    let p = open_flow(&dp);
    mapped(&dp, &tcp_seq(POD, REMOTE, 40000, 443, FIN | ACK, S, R), MASQ);
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, FIN | ACK, R, fin_ack(S))).passed();
    let (fe, re) = dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, p);
    // Each half knows how its own direction ended, and where its FIN ends.
    assert_eq!(fe.flags & (NAT_F_FIN | NAT_F_TCP_CLOSING), NAT_F_FIN | NAT_F_TCP_CLOSING, "{fe:?}");
    assert_eq!(re.flags & (NAT_F_FIN | NAT_F_TCP_CLOSING), NAT_F_FIN | NAT_F_TCP_CLOSING, "{re:?}");
    assert_eq!((fe.fin_end, re.fin_end), (fin_ack(S), fin_ack(R)));
    assert_eq!(fe.close, NAT_C_FIN_FIRST | NAT_C_PEER_FIN, "{fe:?}");
    assert_eq!(re.close, NAT_C_PEER_FIN | NAT_C_ACKED_PEER, "{re:?}");
    // Both FINs sent, the last one not acknowledged yet: the remote sits in LAST_ACK,
    // and the port is not given away, however quiet the pair.
    age_pair(&dp, p, 3);
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_FINISHED_REUSED)), (1, 0));
    // An ACK short of the FIN (of earlier data, or a duplicate) does not complete the close.
    mapped(&dp, &tcp_seq(POD, REMOTE, 40000, 443, ACK, fin_ack(S), R), MASQ);
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 2);
    // The ACK of the last FIN: the close is complete, and the port goes once that ACK
    // has had time to reach the remote (NAT_SETTLE_NS, 10 ms; no 2 s grace): a SYN
    // sent on another CPU could overtake it and meet the remote still in LAST_ACK.
    mapped(&dp, &tcp_seq(POD, REMOTE, 40000, 443, ACK, fin_ack(S), fin_ack(R)), MASQ);
    assert_eq!(dp.get_fwd(&nat_key(POD, REMOTE, 40000, 443, TCP)).unwrap().close & NAT_C_ACKED_PEER, NAT_C_ACKED_PEER);
    stamp_pair(&dp, p, monotonic_ns() + 60_000_000_000); // the ACK still settling, whatever the test's pace
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_FINISHED_REUSED)), (3, 0));
    stamp_pair(&dp, p, monotonic_ns());
    settle();
    assert_eq!(mapped(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ), p);
    assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 1);
    let (fe, re) = dp.assert_single_pair(nat_key(POD2, REMOTE, 40001, 443, TCP), MASQ, p);
    // A fresh pair (fin_end means nothing without NAT_F_FIN: the reverse half keeps the SYN's number there).
    let ends = NAT_F_FIN | NAT_F_RST;
    assert_eq!((fe.flags & ends, re.flags & ends, fe.close, re.close), (0, 0, 0, 0), "{fe:?} {re:?}");
    let back = dp.ingress(&tcp(REMOTE, MASQ, 443, p, SYN | ACK)).passed();
    assert_eq!((summary(&back).dst, summary(&back).dport), (POD2, 40001));
    assert_eq!(dp.total_drops(), 3, "only the SYNs before the close completed and settled");
}

#[test]
fn a_simultaneous_close_completes_when_each_fin_is_acknowledged() {
    // Both ends close at once: each FIN crosses the other, acknowledging only the
    // data before it; the ACKs of the FINs come after, here one of them on the pod's
    // FIN sent again. The pair is finished once both are acknowledged, not before.
    let dp = one_port_node();
    let p = open_flow(&dp);
    mapped(&dp, &tcp_seq(POD, REMOTE, 40000, 443, FIN | ACK, S, R), MASQ);
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, FIN | ACK, R, S)).passed();
    mapped(&dp, &tcp_seq(POD, REMOTE, 40000, 443, FIN | ACK, S, fin_ack(R)), MASQ);
    age_pair(&dp, p, 3);
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 1, "the pod's FIN is not acknowledged yet");
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, ACK, fin_ack(R), fin_ack(S))).passed();
    let (fe, re) = dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, p);
    assert_eq!((fe.close & NAT_C_ACKED_PEER, re.close & NAT_C_ACKED_PEER), (NAT_C_ACKED_PEER, NAT_C_ACKED_PEER));
    assert_eq!(re.close & NAT_C_FIN_FIRST, 0, "the pod's FIN came first: {re:?}");
    settle();
    assert_eq!(mapped(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ), p);
    assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 1);
}

#[test]
fn a_late_segment_of_a_finished_flow_cannot_hand_the_new_flows_port_away() {
    // The pod's last ACK was lost beyond the node: the remote retransmits its FIN,
    // which meets the new flow's pair. It reaches the new flow's pod endpoint (whose
    // TCP discards it, or answers a RST in SYN-SENT, RFC 793) and changes nothing
    // that could give the port to a third flow while the new one lives.
    let dp = one_port_node();
    let p = open_flow(&dp);
    close_pod_first(&dp, p);
    settle();
    assert_eq!(mapped(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ), p);
    let late = dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, FIN | ACK, R, fin_ack(S))).passed();
    assert_eq!((summary(&late).dst, summary(&late).dport), (POD2, 40001), "to the port's holder now");
    // POD2's TCP, in SYN-SENT, answers the unacceptable ACK with a RST (seq = its ack).
    mapped(&dp, &tcp_seq(POD2, REMOTE, 40001, 443, RST, fin_ack(S), 0), MASQ);
    // The new pair is not finished: no FIN of it was acknowledged, and a RST frees a
    // port only once the pair is quiet (NAT_RESET_QUIET_NS): POD2's SYN retransmission
    // and the rest of its flow keep it.
    dp.add_pod(POD3, 9, true);
    dp.egress(&tcp(POD3, REMOTE, 40002, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_FINISHED_REUSED)), (1, 1));
    assert_eq!(mapped(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ), p, "POD2's SYN, retransmitted");
    let back = dp.ingress(&tcp(REMOTE, MASQ, 443, p, SYN | ACK)).passed();
    assert_eq!((summary(&back).dst, summary(&back).dport), (POD2, 40001));
    dp.egress(&tcp(POD3, REMOTE, 40002, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 2);
}

#[test]
fn a_remote_that_closed_first_gets_its_tuple_back_only_past_its_time_wait() {
    // The remote closed first: it holds TIME_WAIT on (remote, MASQ:p), and takes a
    // new SYN there only with a sequence number past the old flow's (RFC 1122
    // 4.2.2.13), as netfilter's nf_seq_has_advanced demands before it evicts.
    let dp = one_port_node();
    let p = open_flow(&dp);
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, FIN | ACK, R, S)).passed();
    mapped(&dp, &tcp_seq(POD, REMOTE, 40000, 443, FIN | ACK, S, fin_ack(R)), MASQ);
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, p, ACK, fin_ack(R), fin_ack(S))).passed();
    let (fe, re) = dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, p);
    assert_eq!(re.close & NAT_C_FIN_FIRST, NAT_C_FIN_FIRST, "{re:?}");
    assert_eq!((fe.close & NAT_C_ACKED_PEER, re.close & NAT_C_ACKED_PEER), (NAT_C_ACKED_PEER, NAT_C_ACKED_PEER));
    settle();
    // A SYN at or before the pod's FIN would meet the remote's TIME_WAIT: not taken.
    dp.egress(&tcp_seq(POD2, REMOTE, 40001, 443, SYN, fin_ack(S), 0)).dropped();
    dp.egress(&tcp_seq(POD2, REMOTE, 40001, 443, SYN, S.wrapping_sub(1_000_000), 0)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_FINISHED_REUSED)), (2, 0));
    // A SYN past it is accepted there: the port goes at once.
    let syn = tcp_seq(POD2, REMOTE, 40001, 443, SYN, fin_ack(S).wrapping_add(1_000_000), 0);
    assert_eq!(mapped(&dp, &syn, MASQ), p);
    assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 1);
}

#[test]
fn ipv6_a_completed_close_gives_its_port_to_a_new_flow_at_once() {
    let dp = Dataplane::new();
    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (masq, pod, pod2, remote) = (a("2001:db8:ffff::1"), a("fd00:10:1::5"), a("fd00:10:1::7"), a("2001:db8:100::10"));
    dp.add_uplink6(LO, Some(MASQ), masq);
    dp.add_pod6(pod, 7, true);
    dp.add_pod6(pod2, 8, true);
    dp.set_config(20000, 20000, 3600);
    let fin6 = |seq: u32| seq.wrapping_add(TCP6_PAYLOAD_LEN + 1);
    let out = |f: &[u8]| summary6(&dp.egress(f).passed());
    let p = out(&tcp6(pod, remote, 40000, 443, SYN)).sport;
    dp.ingress(&tcp6(remote, masq, 443, p, SYN | ACK)).passed();
    out(&tcp6_seq(pod, remote, 40000, 443, FIN | ACK, S, R));
    dp.ingress(&tcp6_seq(remote, masq, 443, p, FIN | ACK, R, fin6(S))).passed();
    dp.egress(&tcp6(pod2, remote, 40001, 443, SYN)).dropped();
    out(&tcp6_seq(pod, remote, 40000, 443, ACK, fin6(S), fin6(R)));
    settle();
    let s = out(&tcp6(pod2, remote, 40001, 443, SYN));
    assert_eq!((s.src, s.sport), (masq, p));
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_FINISHED_REUSED)), (1, 1));
}

#[test]
fn a_syn_never_answered_gives_its_port_once_quiet() {
    // A SYN lost beyond the node (or a silent remote) whose client gave up: nothing
    // will ever use or close its pair. Once it has been quiet for 2 s another flow
    // takes its port; an answered open pair never (a_half_closed_pair_keeps_its_port).
    let dp = one_port_node();
    let p = mapped(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ);
    // Still trying (its retransmission within the quiet time): kept.
    age_pair(&dp, p, 1);
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 1);
    // Quiet for 3 s now. The refusal above made the endpoint's port bitmap (its one
    // port held), and time alone frees nothing in it: the next search that finds
    // nothing makes it again from the tables, at most once a second (docs/nat.md).
    age_pair(&dp, p, 3);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(mapped(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ), p);
    assert_eq!((dp.counter(counter::NAT_UNANSWERED_REUSED), dp.counter(counter::NAT_FINISHED_REUSED)), (1, 0));
    dp.assert_single_pair(nat_key(POD2, REMOTE, 40001, 443, TCP), MASQ, p);
    // The first client's next retransmission is a new flow: no port left for it now.
    dp.egress(&tcp(POD, REMOTE, 40000, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 2);
    // Once answered, the pair is an open connection's: never taken, however quiet.
    dp.ingress(&tcp(REMOTE, MASQ, 443, p, SYN | ACK)).passed();
    let fk = nat_key(POD2, REMOTE, 40001, 443, TCP);
    let rk = reverse_key(&fk, MASQ, p);
    let then = monotonic_ago(std::time::Duration::from_secs(60));
    let (mut fe, mut re) = (dp.get_fwd(&fk).unwrap(), dp.get_rev(&rk).unwrap());
    fe.last_seen_ns = then;
    re.last_seen_ns = then;
    dp.put_fwd(&fk, fe);
    dp.put_rev(&rk, re);
    dp.egress(&tcp(POD, REMOTE, 40000, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_UNANSWERED_REUSED)), (3, 1));
}

#[test]
fn a_reset_finishes_a_pair_either_way() {
    for from_remote in [true, false] {
        let dp = one_port_node();
        let p = open_flow(&dp);
        if from_remote {
            dp.ingress(&tcp(REMOTE, MASQ, 443, p, RST)).passed();
        } else {
            mapped(&dp, &tcp(POD, REMOTE, 40000, 443, RST), MASQ);
        }
        age_pair(&dp, p, 3);
        assert_eq!(mapped(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ), p, "from_remote {from_remote}");
        assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 1);
    }
}

#[test]
fn a_half_closed_pair_keeps_its_port() {
    for pod_fin in [true, false] {
        let dp = one_port_node();
        let p = open_flow(&dp);
        if pod_fin {
            mapped(&dp, &tcp(POD, REMOTE, 40000, 443, FIN | ACK), MASQ);
        } else {
            dp.ingress(&tcp(REMOTE, MASQ, 443, p, FIN | ACK)).passed();
        }
        age_pair(&dp, p, 3);
        // The other direction may still send: the port is not free, however quiet.
        dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
        assert_eq!(dp.drops(drop::NO_PORT), 1, "pod_fin {pod_fin}");
        assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 0);
        // ... and the flow still works both ways.
        mapped(&dp, &tcp(POD, REMOTE, 40000, 443, ACK), MASQ);
        let back = dp.ingress(&tcp(REMOTE, MASQ, 443, p, ACK)).passed();
        assert_eq!(summary(&back).dst, POD);
    }
}

#[test]
fn a_pod_reopening_its_finished_tuple_keeps_the_pair_and_reopens_it() {
    let dp = one_port_node();
    let p = open_flow(&dp);
    mapped(&dp, &tcp(POD, REMOTE, 40000, 443, FIN | ACK), MASQ);
    dp.ingress(&tcp(REMOTE, MASQ, 443, p, FIN | ACK)).passed();
    // tcp_tw_reuse: the pod opens a new connection on the same tuple.
    assert_eq!(mapped(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ), p);
    let (fe, re) = dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, p);
    let ends = NAT_F_TCP_CLOSING | NAT_F_FIN | NAT_F_RST;
    assert_eq!((fe.flags & ends, re.flags & ends), (0, 0), "open again on both halves: {fe:?} {re:?}");
    age_pair(&dp, p, 3);
    // So it is not finished any more: another pod cannot take the port.
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 0);
}

// ---- two CPUs after one finished pair's port ----

/// Rounds of each race below.
const RACE_ROUNDS: u32 = 2000;

/// Run `a` (on this thread) and `b` (on another) through uplink egress at once,
/// `rounds` times, after `setup` each time; `check` sees each round's two runs.
/// The other thread spins until the round starts, so both programs run at the
/// same moment as often as the machine's CPUs allow.
fn racing(dp: &Dataplane, rounds: u32, a: &[u8], b: &[u8], setup: impl Fn(&Dataplane), mut check: impl FnMut(&Run, &Run)) {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    let (go, done) = (AtomicU32::new(0), AtomicU32::new(0));
    let theirs = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..=rounds {
                while go.load(SeqCst) < round {
                    std::hint::spin_loop();
                }
                *theirs.lock().unwrap() = Some(dp.egress(b));
                done.store(round, SeqCst);
            }
        });
        for round in 1..=rounds {
            setup(dp);
            go.store(round, SeqCst);
            let ours = dp.egress(a);
            while done.load(SeqCst) < round {
                std::hint::spin_loop();
            }
            check(&ours, &theirs.lock().unwrap().take().unwrap());
        }
    });
}

/// Every pair and every busy-endpoint bitmap gone: the next round starts afresh.
fn clear_nat(dp: &Dataplane) {
    for (k, _) in dp.fwd() {
        dp.del_fwd(&k);
    }
    for (k, _) in dp.rev() {
        dp.del_rev(&k);
    }
    let mut hot: aya::maps::HashMap<aya::maps::MapData, ebpf_masq::bpf::abi::NatHotKey, ebpf_masq::bpf::abi::NatHot> =
        ebpf_masq::bpf::maps::pinned(&dp.pins, "nat_hot").unwrap();
    let keys: Vec<_> = hot.keys().map(|k| k.unwrap()).collect();
    for k in keys {
        hot.remove(&k).unwrap();
    }
}

/// POD:40000's finished pair, settled, on the one port (20000).
fn finished_settled(dp: &Dataplane) {
    clear_nat(dp);
    let p = open_flow(dp);
    close_pod_first(dp, p);
    stamp_pair(dp, p, monotonic_ns() - 1_000_000_000);
}

/// The node port a run gave its packet, if it let it go.
fn port_of(r: &Run) -> Option<u16> {
    (r.ret == TC_ACT_UNSPEC).then(|| summary(&r.out).sport)
}

#[test]
fn two_new_flows_racing_for_a_finished_port_never_both_get_it() {
    // Two pods' SYNs on two CPUs at once, both after the one finished port: one
    // takes it over, the other finds it taken (and, with no other port, is dropped).
    // Two flows on one node port towards one remote endpoint would see each other's
    // replies: SYN-ACKs for the other's SYN, challenge ACKs, RSTs at live connections.
    let dp = one_port_node();
    dp.add_pod(POD3, 9, true);
    let (a, b) = (tcp(POD2, REMOTE, 40001, 443, SYN), tcp(POD3, REMOTE, 40002, 443, SYN));
    let (mut both, mut one) = (0, 0);
    racing(&dp, RACE_ROUNDS, &a, &b, finished_settled, |ra, rb| match (port_of(ra), port_of(rb)) {
        (Some(_), Some(_)) => both += 1,
        (Some(_), None) | (None, Some(_)) => one += 1,
        (None, None) => {}
    });
    assert_eq!((both, one), (0, RACE_ROUNDS), "rounds in which both flows got the one port, and one of them");
}

#[test]
fn a_pod_reopening_its_finished_tuple_and_a_new_flow_never_share_its_port() {
    // The pod opens a new connection on its own finished tuple (tcp_tw_reuse: its
    // pair opens again, on its port) while another pod's new flow, on another CPU,
    // would take that port over: one of them has it, never both.
    let dp = one_port_node();
    let reopen = tcp_seq(POD, REMOTE, 40000, 443, SYN, fin_ack(S).wrapping_add(1_000_000), 0);
    let other = tcp(POD2, REMOTE, 40001, 443, SYN);
    let (mut both, mut one) = (0, 0);
    racing(&dp, RACE_ROUNDS, &reopen, &other, finished_settled, |ra, rb| match (port_of(ra), port_of(rb)) {
        (Some(_), Some(_)) => both += 1,
        (Some(_), None) | (None, Some(_)) => one += 1,
        (None, None) => {}
    });
    assert_eq!((both, one), (0, RACE_ROUNDS), "rounds in which both flows got the one port, and one of them");
}
