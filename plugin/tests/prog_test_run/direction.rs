//! Flow direction through the real pinned programs, with BPF_PROG_TEST_RUN: a
//! flow that a remote opens to a pod (or to a rule's source, a tunnel client) is
//! tracked on its first packet in (a NAT_F_INBOUND forward half, the pod's own
//! address and port) and its replies leave untranslated, as netfilter leaves the
//! replies of a connection it saw begin outside; the pod's own flows are still
//! masqueraded. IPv4 and IPv6, TCP, UDP, ICMP echo, fragments, ICMP errors, the
//! fast path's fallback, expiry. Needs root and a bpffs at /sys/fs/bpf.

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::{counter, Nat4Entry, Nat4Key, EXCL_NATIVE_ROUTING, NAT_F_BY_RULE, NAT_F_INBOUND};
use crate::support::{harness::*, icmp::*, node::*, packet::*, packet6::*};

/// Inside the native-routing CIDR 10.0.0.0/8: its flows are never masqueraded anyway.
const NATIVE_PEER: Ipv4Addr = Ipv4Addr::new(10, 2, 3, 4);

fn node() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.add_excl(Ipv4Addr::new(10, 0, 0, 0), 8, EXCL_NATIVE_ROUTING);
    dp.add_pod(POD, VETH, true);
    dp.add_pod(POD_NO_NAT, VETH + 2, false);
    dp
}

/// The one forward half of a flow begun outside, under the pod's reply key.
#[track_caller]
fn assert_inbound(dp: &Dataplane, key: Nat4Key, pod: Ipv4Addr, port: u16) -> Nat4Entry {
    let e = dp.get_fwd(&key).unwrap_or_else(|| panic!("no state for {key:?}: {:?}", dp.fwd()));
    assert_eq!(e.flags & NAT_F_INBOUND, NAT_F_INBOUND, "{e:?}");
    assert_eq!((e.addr, e.port), (pod.octets(), port.to_be_bytes()), "the pod's own address and port");
    assert!(dp.rev().is_empty(), "a flow begun outside claims no NAT port: {:?}", dp.rev());
    e
}

#[test]
fn tcp_opened_by_a_remote_to_a_pod_is_answered_untranslated() {
    let dp = node();
    let syn = tcp(REMOTE, POD, 51000, 8080, SYN);
    expect_untouched(dp.ingress(&syn), &syn);
    let e = assert_inbound(&dp, nat_key(POD, REMOTE, 8080, 51000, TCP), POD, 8080);
    assert_eq!((e.packets, e.bytes), (1, syn.len() as u64));
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 1);

    let syn_ack = tcp(POD, REMOTE, 8080, 51000, SYN | ACK);
    expect_untouched(dp.egress(&syn_ack), &syn_ack);
    let ack = tcp(REMOTE, POD, 51000, 8080, ACK);
    expect_untouched(dp.ingress(&ack), &ack);
    let data = tcp(POD, REMOTE, 8080, 51000, ACK);
    expect_untouched(dp.egress(&data), &data);
    assert_eq!(dp.counter(counter::INBOUND_PKTS), 2);
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 1, "later packets find the state");
    assert_eq!(dp.get_fwd(&nat_key(POD, REMOTE, 8080, 51000, TCP)).unwrap().packets, 4);
    assert_eq!((dp.counter(counter::SNAT_PKTS_V4), dp.total_drops()), (0, 0));

    // A flow the pod opens to the same remote is still masqueraded.
    let out = dp.egress(&tcp(POD, REMOTE, 40000, 443, SYN)).passed();
    assert_eq!(summary(&out).src, MASQ);
    assert_eq!(dp.counter(counter::NAT_CREATED), 1);
}

#[test]
fn udp_and_ping_opened_by_a_remote_are_answered_untranslated() {
    let dp = node();
    let q = udp(REMOTE, POD, 5353, 53);
    expect_untouched(dp.ingress(&q), &q);
    assert_inbound(&dp, nat_key(POD, REMOTE, 53, 5353, UDP), POD, 53);
    let a = udp(POD, REMOTE, 53, 5353);
    expect_untouched(dp.egress(&a), &a);

    // The pod's echo reply to a remote's ping: tracked by the request, the reply
    // leaves as it is (without the request's state it would be dropped).
    let unsolicited = echo_reply(POD, REMOTE, 0x99, 1);
    dp.egress(&unsolicited).dropped();
    assert_eq!(dp.drops(drop::UNSUPPORTED_PROTO), 1);
    let ping = echo_request(REMOTE, POD, 0x77, 1);
    expect_untouched(dp.ingress(&ping), &ping);
    let e = dp.get_fwd(&nat_key(POD, REMOTE, 0, 0x77, ICMP)).expect("echo state under the reply's key");
    assert_eq!(e.flags, NAT_F_INBOUND);
    let pong = echo_reply(POD, REMOTE, 0x77, 1);
    expect_untouched(dp.egress(&pong), &pong);
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 2);
    assert_eq!(dp.counter(counter::INBOUND_PKTS), 2);
    assert_eq!(dp.drops(drop::UNSUPPORTED_PROTO), 1, "no new drop");
}

#[test]
fn only_what_would_be_masqueraded_is_tracked() {
    let dp = node();
    for frame in [
        tcp(REMOTE, POD_NO_NAT, 51000, 8080, SYN), // natOutgoing false: its replies leave untouched anyway
        tcp(REMOTE, STRANGER, 51000, 8080, SYN),   // not registered
        tcp(REMOTE, MASQ, 51000, 22, SYN),         // the node itself
        tcp(NATIVE_PEER, POD, 51000, 8080, SYN),   // the reply's destination is excluded
        echo_reply(REMOTE, POD, 0x77, 1),          // replies and errors never open a flow
        icmp4_error(REMOTE, POD, 3, 3, 0, &quote(&udp(POD, REMOTE, 1, 2), Some(8))),
    ] {
        expect_untouched(dp.ingress(&frame), &frame);
    }
    assert!(dp.nat_is_empty(), "{:?}", dp.fwd());
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 0);
    assert_eq!((dp.counter(counter::SKIP_EXCLUDED), dp.counter(counter::SKIP_NO_NAT_OUTGOING)), (0, 0), "asked quietly");
}

#[test]
fn a_pods_masqueraded_flow_is_not_taken_for_an_inbound_one() {
    let dp = node();
    let out = dp.egress(&udp(POD, REMOTE, 40000, 53)).passed();
    let port = summary(&out).sport;
    // The reply comes to the NAT address: translated, no inbound state.
    let reply = dp.ingress(&udp(REMOTE, MASQ, 53, port)).passed();
    assert_eq!(summary(&reply).dst, POD);
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 0);
    // A packet with the reversed tuple sent to the pod's own address finds the pair and leaves it alone.
    let direct = udp(REMOTE, POD, 53, 40000);
    expect_untouched(dp.ingress(&direct), &direct);
    let fe = dp.get_fwd(&nat_key(POD, REMOTE, 40000, 53, UDP)).unwrap();
    assert_eq!(fe.flags & NAT_F_INBOUND, 0);
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 0);
}

#[test]
fn a_remote_reaching_a_tunnel_client_by_rule_is_answered_untranslated() {
    let dp = node();
    dp.add_rule(LO, Ipv4Addr::new(192, 168, 6, 0), 24, 3, None);
    let syn = tcp(REMOTE, TUNNEL_CLIENT, 51000, 22, SYN);
    expect_untouched(dp.ingress(&syn), &syn);
    let e = assert_inbound(&dp, nat_key(TUNNEL_CLIENT, REMOTE, 22, 51000, TCP), TUNNEL_CLIENT, 22);
    assert_eq!((e.flags & NAT_F_BY_RULE, e.rule_id), (NAT_F_BY_RULE, 3));
    let syn_ack = tcp(TUNNEL_CLIENT, REMOTE, 22, 51000, SYN | ACK);
    expect_untouched(dp.egress(&syn_ack), &syn_ack);
    assert_eq!(dp.rule_stats(3).packets, 0, "rule counters count masqueraded packets only");
    // The client's own flows are still masqueraded by the rule.
    let out = dp.egress(&tcp(TUNNEL_CLIENT, REMOTE, 40000, 443, SYN)).passed();
    assert_eq!(summary(&out).src, MASQ);
}

#[test]
fn fragments_and_icmp_errors_of_an_inbound_flow_leave_untranslated() {
    let dp = node();
    let q = udp(REMOTE, POD, 5353, 53);
    expect_untouched(dp.ingress(&q), &q);
    // A big answer, fragmented by the pod: first fragment (UDP header) then a later one.
    let mut seg = udp(POD, REMOTE, 53, 5353)[14 + 20..].to_vec();
    seg.extend_from_slice(&[0xab; 16]);
    let first = ipv4_frame(POD, REMOTE, UDP, 0x2000, &seg);
    let later = ipv4_frame(POD, REMOTE, UDP, 3, &[0xcd; 24]);
    expect_untouched(dp.egress(&first), &first);
    expect_untouched(dp.egress(&later), &later);
    assert_eq!(dp.drops(drop::FRAG_NO_STATE), 0);
    assert_eq!(dp.counter(counter::INBOUND_PKTS), 2);
    // The pod's port unreachable about a datagram of a flow begun outside.
    let q2 = udp(REMOTE, POD, 5354, 9999);
    expect_untouched(dp.ingress(&q2), &q2);
    let err = icmp4_error(POD, REMOTE, 3, 3, 0, &quote(&q2, None));
    expect_untouched(dp.egress(&err), &err);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn inbound_state_expires_like_a_pair() {
    let dp = node();
    dp.set_timeouts(20000, 20099, 3600, 3600, 1);
    let q = udp(REMOTE, POD, 5353, 53);
    expect_untouched(dp.ingress(&q), &q);
    assert_eq!(dp.fwd().len(), 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(6);
    while !dp.nat_is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(dp.nat_is_empty(), "inbound state still there: {:?}", dp.fwd());
    assert_eq!(dp.counter(counter::NAT_EXPIRED), 1);
    // Without it, the pod's datagram is a flow of its own again: masqueraded.
    let out = dp.egress(&udp(POD, REMOTE, 53, 5353)).passed();
    assert_eq!(summary(&out).src, MASQ);
}

#[test]
fn fast_path_leaves_an_inbound_flow_to_the_stack() {
    let dp = node();
    dp.add_pod(POD, LO, true);
    dp.set_pod_l2(
        LO,
        ebpf_masq::bpf::abi::PodL2 {
            pod_mac: [2, 0xbb, 0, 0, 0, 5],
            gw_mac: [2, 0xcc, 0, 0, 0, 1],
            l3_ifindex: LO,
            flags: ebpf_masq::bpf::abi::POD_L2_F_HAS_MAC,
        },
    );
    dp.set_fast_path(true);
    let syn = tcp(REMOTE, POD, 51000, 8080, SYN);
    expect_untouched(dp.ingress(&syn), &syn);
    let syn_ack = tcp(POD, REMOTE, 8080, 51000, SYN | ACK);
    expect_untouched(dp.veth(&syn_ack), &syn_ack);
    assert_eq!((dp.counter(counter::FP_FALLBACK), dp.counter(counter::FP_EGRESS)), (1, 0));
    expect_untouched(dp.egress(&syn_ack), &syn_ack);
    assert_eq!(dp.counter(counter::INBOUND_PKTS), 1);
    assert!(dp.rev().is_empty());
}

// ---- IPv6 ----

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

#[test]
fn ipv6_tcp_and_ping_opened_by_a_remote_are_answered_untranslated() {
    let dp = Dataplane::new();
    let (masq, pod, remote) = (a("2001:db8:ffff::1"), a("fd00:10:1::5"), a("2001:db8:100::10"));
    dp.add_uplink6(LO, Some(MASQ), masq);
    dp.add_pod6(pod, VETH, true);
    let syn = tcp6(remote, pod, 51000, 8080, SYN);
    expect_untouched(dp.ingress(&syn), &syn);
    let e = dp.get_fwd6(&nat6_key(pod, remote, 8080, 51000, TCP)).expect("inbound state");
    assert_eq!((e.flags, e.addr, e.port), (NAT_F_INBOUND, pod.octets(), 8080u16.to_be_bytes()));
    let syn_ack = tcp6(pod, remote, 8080, 51000, SYN | ACK);
    expect_untouched(dp.egress(&syn_ack), &syn_ack);
    let ping = echo6_request(remote, pod, 0x77, 1);
    expect_untouched(dp.ingress(&ping), &ping);
    let pong = echo6_reply(pod, remote, 0x77, 1);
    expect_untouched(dp.egress(&pong), &pong);
    assert_eq!((dp.counter(counter::INBOUND_CREATED), dp.counter(counter::INBOUND_PKTS)), (2, 2));
    assert!(dp.rev6().is_empty());
    assert_eq!((dp.counter(counter::SNAT_PKTS_V6), dp.total_drops()), (0, 0));
    // The pod's own flow is masqueraded.
    let out = dp.egress(&tcp6(pod, remote, 40000, 443, SYN)).passed();
    assert_eq!(summary6(&out).src, masq);
    // Sent to the node's address: not a flow to a pod.
    let to_node = tcp6(remote, masq, 51000, 22, SYN);
    expect_untouched(dp.ingress(&to_node), &to_node);
    assert_eq!(dp.counter(counter::INBOUND_CREATED), 2);
}
