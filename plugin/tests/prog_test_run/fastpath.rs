//! fastPath through the real pinned programs with BPF_PROG_TEST_RUN.
//!
//! Fallbacks (the packet must leave masq_veth_in untouched with TC_ACT_UNSPEC, no NAT
//! pair made): fastPath off, service CIDR destination, TTL 1, fragments, a pod without
//! L2 facts, natOutgoing false, an excluded destination, ICMP echo replies.
//!
//! The fast path itself: bpf_fib_lookup() inside BPF_PROG_TEST_RUN runs in the calling
//! thread's netns, so those tests run on a thread that unshare()d a private netns with
//! a dummy "uplink" (route, permanent neighbour, forwarding on). There the program's
//! verdict (TC_ACT_REDIRECT; test_run does not perform redirects) and output bytes are
//! checked: translated, TTL - 1, checksums valid, the pair marked NAT_F_FAST; the MTU
//! check (route MTU, and for GSO packets the segment size, via the __sk_buff context);
//! and the reply half: reverse-translated, MACs set, redirected to the pod.
//! Needs root and a bpffs at /sys/fs/bpf.

use std::net::{Ipv4Addr, Ipv6Addr};

use aya::maps::{HashMap, MapData};
use ebpf_masq::bpf::abi::{
    self, counter, Nat4Entry, Nat4Key, PodInfo, PodL2, EXCL_NATIVE_ROUTING, FP_CB_MARK, NAT_F_FAST,
};
use ebpf_masq::bpf::maps;
use crate::support::{harness::*, lab::in_lab, node::*, packet::*, packet6::*};

const SVC: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
const POD_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 5];
const BRIDGE_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 1];
const TC_ACT_REDIRECT: i32 = 7;

/// skb->ifindex in test_run is loopback (1): the pods' "veth" is LO.
fn l2_on_lo() -> PodL2 {
    PodL2 { pod_mac: POD_MAC, gw_mac: BRIDGE_MAC, l3_ifindex: LO, flags: abi::POD_L2_F_HAS_MAC }
}

/// A node with fastPath on: POD (natOutgoing) and POD_NO_NAT behind LO with L2 facts,
/// native routing 10.0.0.0/8, service CIDR 10.96.0.0/12, uplink LO masquerading to MASQ.
fn fast_node() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.add_excl(Ipv4Addr::new(10, 0, 0, 0), 8, EXCL_NATIVE_ROUTING);
    dp.add_pod(POD, LO, true);
    dp.add_pod(POD_NO_NAT, LO, false);
    dp.set_pod_l2(LO, l2_on_lo());
    dp.add_svc(Ipv4Addr::new(10, 96, 0, 0), 12);
    dp.set_fast_path(true);
    dp
}

fn with_ttl(mut frame: Vec<u8>, ttl: u8) -> Vec<u8> {
    frame[14 + 8] = ttl;
    frame[24] = 0;
    frame[25] = 0;
    let c = ipv4_csum(&frame[14..34]);
    frame[24..26].copy_from_slice(&c.to_be_bytes());
    frame
}

/// A TCP/ACK segment with `payload` bytes of payload.
fn tcp_sized(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&1u32.to_be_bytes());
    seg[8..12].copy_from_slice(&1u32.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = ACK;
    seg[14..16].copy_from_slice(&64240u16.to_be_bytes());
    seg.extend((0..payload).map(|i| i as u8));
    let c = l4_csum(src, dst, TCP, &seg);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    ipv4_frame(src, dst, TCP, 0, &seg)
}

#[track_caller]
fn expect_fallback(dp: &Dataplane, frame: &[u8]) {
    let before = dp.counter(counter::FP_FALLBACK);
    assert_eq!(dp.veth(frame).passed(), frame, "packet modified");
    assert_eq!(dp.counter(counter::FP_FALLBACK), before + 1, "fallback not counted");
    assert_eq!(dp.counter(counter::FP_EGRESS), 0);
    assert!(dp.nat_is_empty(), "NAT pair made: {:?}", dp.fwd());
}

// ---- fallbacks ----

#[test]
fn fast_path_off_is_untouched_and_uncounted() {
    let dp = fast_node();
    dp.set_fast_path(false);
    let frame = tcp(POD, REMOTE, 40000, 443, SYN);
    assert_eq!(dp.veth(&frame).passed(), frame);
    assert_eq!(dp.counter(counter::FP_FALLBACK), 0);
    assert_eq!(dp.pod_stats(LO).packets, 1);
}

#[test]
fn service_cidr_destination_falls_back() {
    let dp = fast_node();
    expect_fallback(&dp, &tcp(POD, SVC, 40000, 80, SYN));
    expect_fallback(&dp, &udp(POD, SVC, 5000, 53));
}

#[test]
fn ttl_one_falls_back() {
    let dp = fast_node();
    expect_fallback(&dp, &with_ttl(tcp(POD, REMOTE, 40000, 443, SYN), 1));
    expect_fallback(&dp, &with_ttl(udp(POD, REMOTE, 5000, 53), 0));
}

#[test]
fn fragments_fall_back() {
    let dp = fast_node();
    let mut seg = vec![0u8; 8];
    seg[0..2].copy_from_slice(&5000u16.to_be_bytes());
    seg[2..4].copy_from_slice(&53u16.to_be_bytes());
    seg[4..6].copy_from_slice(&1000u16.to_be_bytes());
    seg.extend([7u8; 64]);
    expect_fallback(&dp, &ipv4_frame(POD, REMOTE, UDP, 0x2000, &seg)); // first fragment (MF)
    expect_fallback(&dp, &udp_non_first_fragment(POD, REMOTE));
}

/// A pod whose L2 facts are unknown (no l3 interface, e.g. registered by an older
/// layout that had none for it) stays on the normal path.
#[test]
fn pod_without_l2_facts_falls_back() {
    let dp = fast_node();
    dp.set_pod_l2(LO, PodL2::default());
    expect_fallback(&dp, &tcp(POD, REMOTE, 40000, 443, SYN));
}

#[test]
fn not_masqueraded_or_not_translatable_falls_back() {
    let dp = fast_node();
    expect_fallback(&dp, &tcp(POD_NO_NAT, REMOTE, 40000, 443, SYN)); // natOutgoing false
    expect_fallback(&dp, &echo_reply(POD, REMOTE, 7, 1)); // the normal path decides (drops)
    expect_fallback(&dp, &gre(POD, REMOTE));
    // No skip counters from the fast path's quiet decision (only the uplink counts them).
    assert_eq!(dp.counter(counter::SKIP_NO_NAT_OUTGOING), 0);
}

#[test]
fn spoofed_source_still_dropped() {
    let dp = fast_node();
    dp.veth(&tcp(Ipv4Addr::new(10, 1, 0, 99), REMOTE, 40000, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::SPOOFED_SOURCE), 1);
}

// ---- the fast path, in a private netns (support::lab) ----

fn fast_pair(dp: &Dataplane) -> (Nat4Key, Nat4Entry) {
    let fwd = dp.fwd();
    assert_eq!(fwd.len(), 1, "{fwd:?}");
    assert!(fwd[0].1.flags & NAT_F_FAST != 0, "pair not marked NAT_F_FAST");
    fwd[0]
}

#[test]
fn egress_translates_decrements_ttl_and_redirects() {
    in_lab(1500, |up0, _| {
        let dp = fast_node();
        dp.add_uplink(up0, MASQ);
        let frame = tcp(POD, REMOTE, 40000, 443, SYN);
        let run = dp.veth(&frame);
        assert_eq!(run.ret, TC_ACT_REDIRECT, "not redirected");
        assert_checksums(&run.out);
        let s = summary(&run.out);
        assert_eq!((s.src, s.dst, s.dport), (MASQ, REMOTE, 443));
        assert_eq!(run.out[14 + 8], 63, "TTL not decremented");
        let (fk, fe) = fast_pair(&dp);
        assert_eq!(fk, nat_key(POD, REMOTE, 40000, 443, TCP));
        assert_eq!((fe.addr, fe.port, fe.ifindex), (MASQ.octets(), s.sport.to_be_bytes(), up0));
        // Exactly the bytes the uplink program would have produced, TTL aside.
        let mut slow = tcp(MASQ, REMOTE, s.sport, 443, SYN);
        slow = with_ttl(slow, 63);
        assert_eq!(run.out, slow);
        // Second packet: same pair.
        let run = dp.veth(&tcp(POD, REMOTE, 40000, 443, ACK));
        assert_eq!(run.ret, TC_ACT_REDIRECT);
        assert_eq!(summary(&run.out).sport, s.sport);
        assert_eq!(dp.counter(counter::FP_EGRESS), 2);
        assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 2);
        assert_eq!(dp.counter(counter::FP_FALLBACK), 0);
        // Echo requests and UDP too.
        assert_eq!(dp.veth(&udp(POD, REMOTE, 5000, 53)).ret, TC_ACT_REDIRECT);
        assert_eq!(dp.veth(&echo_request(POD, REMOTE, 9, 1)).ret, TC_ACT_REDIRECT);
    });
}

#[test]
fn egress_fallbacks_that_need_the_route() {
    in_lab(1500, |up0, _| {
        let dp = fast_node();
        // No route (203.0.114.0 unreachable in the lab): the stack answers.
        dp.add_uplink(up0, MASQ);
        expect_fallback(&dp, &tcp(POD, Ipv4Addr::new(203, 0, 114, 1), 40000, 443, SYN));
        // Excluded destination: decided quietly, left to the stack.
        expect_fallback(&dp, &tcp(POD, NATIVE_DST, 40000, 443, SYN));
        // A route by an interface that is not an uplink.
        maps::uplink_remove(&dp.pins, up0).unwrap();
        expect_fallback(&dp, &tcp(POD, REMOTE, 40000, 443, SYN));
    });
}

#[test]
fn flow_begun_on_the_normal_path_stays_there() {
    in_lab(1500, |up0, _| {
        let dp = fast_node();
        dp.add_uplink(up0, MASQ);
        dp.put_fwd(&nat_key(POD, REMOTE, 40000, 443, TCP), nat_entry(MASQ, 20001, monotonic_ns()));
        let frame = tcp(POD, REMOTE, 40000, 443, ACK);
        assert_eq!(dp.veth(&frame).passed(), frame);
    });
}

/// Run masq_veth_in with a __sk_buff context carrying gso_size/gso_segs.
fn run_gso(dp: &Dataplane, frame: &[u8], gso_size: u32, segs: u32) -> Run {
    let mut ctx = [0u8; SKB_CTX_LEN];
    ctx[SKB_GSO_SEGS..SKB_GSO_SEGS + 4].copy_from_slice(&segs.to_ne_bytes());
    ctx[SKB_GSO_SIZE..SKB_GSO_SIZE + 4].copy_from_slice(&gso_size.to_ne_bytes());
    dp.run_ctx("veth", frame, &ctx).0
}

/// Run a program with cb[0] = `cb0`; the run and cb[0] after it.
fn run_cb(dp: &Dataplane, prog: &str, frame: &[u8], cb0: u32) -> (Run, u32) {
    let mut ctx = [0u8; SKB_CTX_LEN];
    ctx[SKB_CB0..SKB_CB0 + 4].copy_from_slice(&cb0.to_ne_bytes());
    let (run, out) = dp.run_ctx(prog, frame, &ctx);
    (run, u32::from_ne_bytes(out[SKB_CB0..SKB_CB0 + 4].try_into().unwrap()))
}

#[test]
fn redirected_packets_carry_the_mark_the_uplink_egress_passes() {
    in_lab(1500, |up0, _| {
        let dp = fast_node();
        dp.add_uplink(up0, MASQ);
        for frame in [tcp(POD, REMOTE, 40000, 443, SYN), tcp6(POD6, REMOTE6, 40000, 443, SYN)] {
            if frame[12..14] == [0x86, 0xdd] {
                dp.add_uplink6(up0, Some(MASQ), MASQ6);
                dp.add_pod6(POD6, LO, true);
                dp.set_pod_l2(LO, l2_on_lo());
            }
            let (run, cb) = run_cb(&dp, "veth", &frame, 0);
            assert_eq!((run.ret, cb), (TC_ACT_REDIRECT, FP_CB_MARK), "redirected without the mark");
        }
        // A fallback goes to the stack unmarked.
        let (run, cb) = run_cb(&dp, "veth", &tcp(POD, NATIVE_DST, 40000, 443, SYN), 0);
        assert_eq!((run.ret, cb), (-1, 0));
        // The uplink egress passes a marked packet as it is: no pair, no counter...
        let frame = udp(POD, REMOTE, 5555, 53);
        let (pairs, snat) = (dp.fwd().len(), dp.counter(counter::SNAT_PKTS_V4));
        let (run, _) = run_cb(&dp, "egress", &frame, FP_CB_MARK);
        assert_eq!(run.passed(), frame);
        assert_eq!((dp.fwd().len(), dp.counter(counter::SNAT_PKTS_V4)), (pairs, snat));
        // ...and translates the same packet without the mark.
        let (run, _) = run_cb(&dp, "egress", &frame, 0);
        assert_eq!(summary(&run.passed()).src, MASQ);
        assert_eq!(dp.fwd().len(), pairs + 1);
    });
}

#[test]
fn mtu_checks_the_packet_or_its_gso_segments() {
    in_lab(1280, |up0, _| {
        let dp = fast_node();
        dp.add_uplink(up0, MASQ);
        // 1300-byte IP packet over a 1280 route: FRAG_NEEDED, the stack's business.
        expect_fallback(&dp, &tcp_sized(POD, REMOTE, 40000, 443, 1260));
        // 1280 exactly: fits.
        assert_eq!(dp.veth(&tcp_sized(POD, REMOTE, 40001, 443, 1240)).ret, TC_ACT_REDIRECT);
        // A GSO packet of 3 x 1000-byte segments: skb->len is 3054, each segment 1040: fits.
        let big = tcp_sized(POD, REMOTE, 40002, 443, 3000);
        assert_eq!(run_gso(&dp, &big, 1000, 3).ret, TC_ACT_REDIRECT);
        // 1300-byte segments do not.
        let before = dp.counter(counter::FP_FALLBACK);
        let r = run_gso(&dp, &tcp_sized(POD, REMOTE, 40003, 443, 2600), 1300, 2);
        assert_eq!(r.passed().len(), 14 + 20 + 20 + 2600);
        assert_eq!(dp.counter(counter::FP_FALLBACK), before + 1);
    });
}

#[test]
fn reply_is_translated_and_redirected_to_the_pod() {
    in_lab(1500, |up0, pod0| {
        let dp = fast_node();
        dp.add_uplink(up0, MASQ);
        let run = dp.veth(&tcp(POD, REMOTE, 40000, 443, SYN));
        assert_eq!(run.ret, TC_ACT_REDIRECT);
        let port = summary(&run.out).sport;
        // The pod now lives behind pod0 (the reply's redirect target must be a device).
        let mut pods: HashMap<MapData, [u8; 4], PodInfo> = maps::pinned(&dp.pins, abi::MAP_PODS4).unwrap();
        let moved = PodInfo { ifindex: pod0, flags: abi::POD_F_NAT_OUTGOING, ..Default::default() };
        pods.insert(POD.octets(), moved, 0).unwrap();
        dp.set_pod_l2(pod0, PodL2 { l3_ifindex: pod0, ..l2_on_lo() });

        let reply = tcp(REMOTE, MASQ, 443, port, SYN | ACK);
        let run = dp.ingress(&reply);
        assert_eq!(run.ret, TC_ACT_REDIRECT, "reply not redirected");
        assert_checksums(&run.out);
        assert_eq!(&run.out[0..6], &POD_MAC);
        assert_eq!(&run.out[6..12], &BRIDGE_MAC);
        let mut expected = with_ttl(tcp(REMOTE, POD, 443, 40000, SYN | ACK), 63);
        expected[0..12].copy_from_slice(&run.out[0..12]);
        assert_eq!(run.out, expected);
        assert_eq!(dp.counter(counter::FP_INGRESS), 1);
        assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 1);

        // TTL 1 and fastPath off: translated, but left to the stack.
        let out = dp.ingress(&with_ttl(reply.clone(), 1)).passed();
        assert_eq!(summary(&out).dst, POD);
        dp.set_fast_path(false);
        let out = dp.ingress(&reply).passed();
        assert_eq!(summary(&out).dst, POD);
        assert_eq!(dp.counter(counter::FP_INGRESS), 1);
    });
}

#[test]
fn reply_of_a_normal_path_flow_is_not_redirected() {
    let dp = fast_node();
    // A pair the uplink program made (no NAT_F_FAST): e.g. a ClusterIP flow, whose reply
    // netfilter must un-DNAT.
    let frame = tcp(POD, REMOTE, 40000, 443, SYN);
    let out = dp.egress(&frame).passed();
    let port = summary(&out).sport;
    assert_eq!(dp.fwd()[0].1.flags & NAT_F_FAST, 0);
    let out = dp.ingress(&tcp(REMOTE, MASQ, 443, port, SYN | ACK)).passed();
    assert_eq!(summary(&out).dst, POD);
    assert_eq!(dp.counter(counter::FP_INGRESS), 0);
}

// ---- IPv6 ----

const MASQ6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
const POD6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x244, 1, 0, 0, 0, 0, 5);
const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 10);
const SVC6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 10);

/// The IPv6 frame with its hop limit set (byte 7 of the header).
fn with_hop_limit(mut frame: Vec<u8>, hl: u8) -> Vec<u8> {
    frame[14 + 7] = hl;
    frame
}

/// fast_node() plus IPv6: the uplink up0 masquerading to MASQ6, POD6 behind LO, a
/// service range fd00:96::/64.
fn fast_node6(up0: u32) -> Dataplane {
    let dp = fast_node();
    dp.add_uplink6(up0, Some(MASQ), MASQ6);
    dp.add_pod6(POD6, LO, true);
    dp.set_pod_l2(LO, l2_on_lo()); // the pod's IPv6 entry carries them too
    dp.add_svc6(Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 0), 64);
    dp
}

#[test]
fn ipv6_egress_translates_decrements_hop_limit_and_redirects() {
    in_lab(1500, |up0, _| {
        let dp = fast_node6(up0);
        let run = dp.veth(&tcp6(POD6, REMOTE6, 40000, 443, SYN));
        assert_eq!(run.ret, TC_ACT_REDIRECT, "not redirected");
        assert_checksums6(&run.out);
        let s = summary6(&run.out);
        assert_eq!((s.src, s.dst, s.dport), (MASQ6, REMOTE6, 443));
        assert_eq!(run.out[14 + 7], 63, "hop limit not decremented");
        // Exactly what the uplink program would have produced, hop limit aside.
        assert_eq!(run.out, with_hop_limit(tcp6(MASQ6, REMOTE6, s.sport, 443, SYN), 63));
        let fwd = dp.fwd6();
        assert_eq!(fwd.len(), 1, "{fwd:?}");
        assert!(fwd[0].1.flags & NAT_F_FAST != 0, "pair not marked NAT_F_FAST");
        assert_eq!(fwd[0].1.ifindex, up0);
        // The flow's next packet, UDP and echo requests too.
        let run = dp.veth(&tcp6(POD6, REMOTE6, 40000, 443, ACK));
        assert_eq!((run.ret, summary6(&run.out).sport), (TC_ACT_REDIRECT, s.sport));
        assert_eq!(dp.veth(&udp6(POD6, REMOTE6, 5000, 53)).ret, TC_ACT_REDIRECT);
        assert_eq!(dp.veth(&echo6_request(POD6, REMOTE6, 9, 1)).ret, TC_ACT_REDIRECT);
        assert_eq!((dp.counter(counter::FP_EGRESS), dp.counter(counter::SNAT_PKTS_V6)), (4, 4));
        assert_eq!(dp.counter(counter::FP_FALLBACK), 0);
    });
}

#[test]
fn ipv6_fallbacks() {
    in_lab(1500, |up0, _| {
        let dp = fast_node6(up0);
        // Hop limit 1 (the stack sends time exceeded), an extension header, a service
        // address, an echo reply: untouched, no pair, counted as fallbacks.
        for frame in [
            with_hop_limit(udp6(POD6, REMOTE6, 5000, 53), 1),
            udp6_ext(HOP_BY_HOP, POD6, REMOTE6, 5001, 53),
            udp6(POD6, SVC6, 5002, 53),
            echo6_reply(POD6, REMOTE6, 9, 1),
        ] {
            let out = dp.veth(&frame).passed();
            assert_eq!(out, frame);
        }
        assert!(dp.fwd6().is_empty(), "{:?}", dp.fwd6());
        assert_eq!((dp.counter(counter::FP_FALLBACK), dp.counter(counter::FP_EGRESS)), (4, 0));
        // Link-local sources (neighbour discovery) are the link's own: not even tried.
        let ll = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 5);
        dp.veth(&udp6(ll, REMOTE6, 5003, 53)).passed();
        assert_eq!(dp.counter(counter::FP_FALLBACK), 4);
    });
}

#[test]
fn ipv6_reply_is_translated_and_redirected_to_the_pod() {
    in_lab(1500, |up0, pod0| {
        let dp = fast_node6(up0);
        let run = dp.veth(&udp6(POD6, REMOTE6, 5000, 53));
        assert_eq!(run.ret, TC_ACT_REDIRECT);
        let port = summary6(&run.out).sport;
        dp.add_pod6(POD6, pod0, true);
        dp.set_pod_l2(pod0, PodL2 { l3_ifindex: pod0, ..l2_on_lo() });
        // The reply arrives at the uplink program (test_run: on LO, an uplink too).
        dp.add_uplink6(LO, Some(MASQ), MASQ6);
        let reply = udp6(REMOTE6, MASQ6, 53, port);
        let run = dp.ingress(&reply);
        assert_eq!(run.ret, TC_ACT_REDIRECT, "reply not redirected");
        assert_checksums6(&run.out);
        assert_eq!((&run.out[0..6], &run.out[6..12]), (&POD_MAC[..], &BRIDGE_MAC[..]));
        let mut expected = with_hop_limit(udp6(REMOTE6, POD6, 53, 5000), 63);
        expected[0..12].copy_from_slice(&run.out[0..12]);
        assert_eq!(run.out, expected);
        assert_eq!((dp.counter(counter::FP_INGRESS), dp.counter(counter::RNAT_PKTS_V6)), (1, 1));
        // Hop limit 1: translated, left to the stack.
        let out = dp.ingress(&with_hop_limit(reply, 1)).passed();
        assert_eq!(summary6(&out).dst, POD6);
        assert_eq!(dp.counter(counter::FP_INGRESS), 1);
    });
}

#[test]
fn egress_policies_hold_on_the_fast_path() {
    // A pod an egress policy selects, towards 203.0.113.10/32 only: the fast path
    // takes the policy's address there (the same decision, masq_decide_v4), counts
    // it per policy, and the network's address elsewhere.
    const PARTNER_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);
    in_lab(1500, |up0, _| {
        let dp = Dataplane::new();
        dp.add_uplink(LO, MASQ);
        dp.add_pod_with_policies(POD, LO, 0b1);
        dp.set_pod_l2(LO, l2_on_lo());
        dp.set_fast_path(true);
        dp.add_uplink(up0, MASQ);
        dp.set_policy_addrs(0, &[PARTNER_ADDR], &[]);
        dp.add_egress(0b1, REMOTE, 32, 0, 0);
        let run = dp.veth(&tcp(POD, REMOTE, 40000, 443, SYN));
        assert_eq!(run.ret, TC_ACT_REDIRECT, "not redirected");
        assert_checksums(&run.out);
        assert_eq!(summary(&run.out).src, PARTNER_ADDR);
        let (_, fe) = fast_pair(&dp);
        assert_eq!(fe.policy, 1);
        let run = dp.veth(&tcp(POD, REMOTE, 40000, 443, ACK));
        assert_eq!((run.ret, summary(&run.out).src), (TC_ACT_REDIRECT, PARTNER_ADDR));
        let s = dp.policy_stats(0);
        assert_eq!((s.flows, s.packets), (1, 2), "{s:?}");
        let elsewhere = dp.veth(&tcp(POD, Ipv4Addr::new(203, 0, 113, 20), 40001, 443, SYN));
        assert_eq!((elsewhere.ret, summary(&elsewhere.out).src), (TC_ACT_REDIRECT, MASQ));
    });
}

#[test]
fn a_new_flow_with_no_port_free_is_dropped_by_the_fast_path_after_one_search() {
    // The fast path searches once per new flow. Falling back would make the
    // uplink search the whole budget again (twice the cost, the failure counted twice).
    in_lab(1500, |up0, _| {
        let dp = fast_node6(up0); // up0 masquerades both families
        dp.set_config(20000, 20000, 3600); // one port (the config's flags go with it)
        dp.set_fast_path(true);
        assert_eq!(dp.veth(&tcp(POD, REMOTE, 40000, 443, SYN)).ret, TC_ACT_REDIRECT);
        assert_eq!(dp.veth(&tcp6(POD6, REMOTE6, 40000, 443, SYN)).ret, TC_ACT_REDIRECT);
        let probes = dp.counter(counter::PORT_PROBES);
        dp.veth(&tcp(POD, REMOTE, 40001, 443, SYN)).dropped();
        dp.veth(&tcp6(POD6, REMOTE6, 40001, 443, SYN)).dropped();
        assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::ALLOC_FAIL)), (2, 2));
        assert_eq!(dp.counter(counter::FP_FALLBACK), 0, "no second search on the uplink");
        // One search each: the 128 random probes and the one-port sweep (the pod's own
        // port is outside portRange, and it has no binding towards MASQ's port yet).
        let tried = dp.counter(counter::PORT_PROBES) - probes;
        assert!(tried <= 2 * (2 + 128 + 1), "{tried} ports tried for two flows");
    });
}
