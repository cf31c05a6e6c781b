//! Protocols without ports (GRE, ESP, ...) through the real pinned uplink programs
//! (BPF_PROG_TEST_RUN): masqueraded by address alone, as netfilter's generic
//! handling does (nf_nat_core can change nothing else of theirs). One pair per
//! {source, remote, protocol}, keyed with ports 0; a second source towards the same
//! remote and protocol is refused while the first holds the pair (netfilter drops
//! the clash at conntrack confirm); replies and ICMP errors about them go back to
//! the source (RFC 5508 REQ-3, REQ-4). SCTP likewise, its ports kept (its CRC32c covers
//! no IP header). DCCP and UDP-Lite stay refused.

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::counter;

use crate::core::node;
use crate::support::{harness::*, icmp::*, node::*, packet::*, packet6::*};

const SCTP: u8 = 132;
const DCCP: u8 = 33;
const UDPLITE: u8 = 136;
const ICMP6_PARAM_PROBLEM: u8 = 4;

/// An ESP packet: SPI, sequence number, then opaque bytes (nothing covers the addresses).
fn esp_body() -> Vec<u8> {
    let mut b = vec![0x00, 0x00, 0x10, 0x01, 0x00, 0x00, 0x00, 0x07];
    b.extend_from_slice(b"opaque esp payload, never touched");
    b
}

fn esp4(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    ipv4_frame(src, dst, ESP, 0, &esp_body())
}

fn esp6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    ipv6_frame(src, dst, ESP, &esp_body())
}

/// A dual-stack node: the IPv4 `node`, with IPv6 on the uplink and pod6() behind VETH.
fn node6() -> Dataplane {
    let dp = node();
    dp.add_uplink6(LO, Some(MASQ), masq6());
    dp.add_pod6(pod6(), VETH, true);
    dp
}

#[test]
fn gre_leaves_with_the_node_address_and_its_replies_come_back() {
    let dp = node();
    let out = dp.egress(&gre(POD, REMOTE)).passed();
    assert_eq!(out, gre(MASQ, REMOTE), "only the source address (and the header checksum) change");
    dp.assert_single_pair(nat_key(POD, REMOTE, 0, 0, GRE), MASQ, 0);
    // The same flow's next packet, and the remote's.
    assert_eq!(dp.egress(&gre(POD, REMOTE)).passed(), gre(MASQ, REMOTE));
    assert_eq!(dp.ingress(&gre(REMOTE, MASQ)).passed(), gre(REMOTE, POD));
    assert_eq!((dp.counter(counter::SNAT_PKTS_V4), dp.counter(counter::RNAT_PKTS_V4)), (2, 1));
    assert_eq!((dp.counter(counter::NAT_CREATED), dp.total_drops()), (1, 0));
}

#[test]
fn esp_is_masqueraded_by_address_either_family() {
    let dp = node6();
    assert_eq!(dp.egress(&esp4(POD, REMOTE)).passed(), esp4(MASQ, REMOTE));
    assert_eq!(dp.ingress(&esp4(REMOTE, MASQ)).passed(), esp4(REMOTE, POD));
    dp.assert_single_pair(nat_key(POD, REMOTE, 0, 0, ESP), MASQ, 0);
    assert_eq!(dp.egress(&esp6(pod6(), remote6())).passed(), esp6(masq6(), remote6()));
    assert_eq!(dp.ingress(&esp6(remote6(), masq6())).passed(), esp6(remote6(), pod6()));
    dp.assert_single_pair6(nat6_key(pod6(), remote6(), 0, 0, ESP), masq6(), 0);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn a_second_source_is_refused_while_the_first_holds_the_remote() {
    // netfilter: the second pod's reply tuple {remote -> node, GRE} clashes with the
    // first's, get_unique_tuple has no port to change, and confirm drops the packet.
    let dp = node();
    assert_eq!(dp.egress(&gre(POD, REMOTE)).passed(), gre(MASQ, REMOTE));
    dp.egress(&gre(POD2, REMOTE)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::ALLOC_FAIL)), (1, 1));
    dp.assert_single_pair(nat_key(POD, REMOTE, 0, 0, GRE), MASQ, 0);
    // The remote's packets go to the first source only.
    assert_eq!(dp.ingress(&gre(REMOTE, MASQ)).passed(), gre(REMOTE, POD));
    // Another remote, or another protocol, is another pair.
    assert_eq!(dp.egress(&gre(POD2, REMOTE2)).passed(), gre(MASQ, REMOTE2));
    assert_eq!(dp.egress(&esp4(POD2, REMOTE)).passed(), esp4(MASQ, REMOTE));
    assert_eq!(dp.assert_pairs_complete(), 3);
}

#[test]
fn icmp_errors_about_gre_and_esp_go_back_to_the_pod() {
    // RFC 5508 REQ-3/REQ-4: the remote's protocol unreachable about the node's packet
    // reaches the pod with its own packet quoted; both checksums valid.
    let dp = node6();
    dp.egress(&gre(POD, REMOTE)).passed();
    let err = icmp4_error(REMOTE, MASQ, 3, 2, 0, &quote(&gre(MASQ, REMOTE), None));
    let out = dp.ingress(&err).passed();
    assert!(assert_icmp4_error_checksums(&out));
    assert_eq!(out, icmp4_error(REMOTE, POD, 3, 2, 0, &quote(&gre(POD, REMOTE), None)));

    dp.egress(&esp6(pod6(), remote6())).passed();
    // Parameter problem, unrecognized next header (code 1), pointing at it (offset 6).
    let err = icmp6_error(remote6(), masq6(), ICMP6_PARAM_PROBLEM, 1, 6, &quote(&esp6(masq6(), remote6()), None));
    let out = dp.ingress(&err).passed();
    assert!(assert_icmp6_error_checksums(&out));
    assert_eq!(out, icmp6_error(remote6(), pod6(), ICMP6_PARAM_PROBLEM, 1, 6, &quote(&esp6(pod6(), remote6()), None)));
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn a_pods_own_icmp_errors_about_gre_and_esp_leave_masqueraded() {
    // RFC 5508 REQ-3/REQ-4 the other way: the pod answers the remote's GRE (that
    // came in through its pair) with protocol unreachable; it leaves from the node's
    // address, quoting the remote's packet as it arrived. Both checksums valid.
    let dp = node6();
    dp.egress(&gre(POD, REMOTE)).passed();
    assert_eq!(dp.ingress(&gre(REMOTE, MASQ)).passed(), gre(REMOTE, POD));
    let err = icmp4_error(POD, REMOTE, 3, 2, 0, &quote(&gre(REMOTE, POD), None));
    let out = dp.egress(&err).passed();
    assert!(assert_icmp4_error_checksums(&out));
    assert_eq!(out, icmp4_error(MASQ, REMOTE, 3, 2, 0, &quote(&gre(REMOTE, MASQ), None)));

    dp.egress(&esp6(pod6(), remote6())).passed();
    assert_eq!(dp.ingress(&esp6(remote6(), masq6())).passed(), esp6(remote6(), pod6()));
    let err = icmp6_error(pod6(), remote6(), ICMP6_PARAM_PROBLEM, 1, 6, &quote(&esp6(remote6(), pod6()), None));
    let out = dp.egress(&err).passed();
    assert!(assert_icmp6_error_checksums(&out));
    assert_eq!(out, icmp6_error(masq6(), remote6(), ICMP6_PARAM_PROBLEM, 1, 6, &quote(&esp6(remote6(), masq6()), None)));
    assert_eq!(dp.counter(counter::ICMP_ERR_OUT), 2);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn the_hosts_own_gre_is_never_tracked() {
    // A host flow has no other tuple to take: it leaves as it is, even when a pod
    // holds the remote (whose packets then go to the pod, as netfilter's would).
    let dp = node();
    let host = gre(MASQ, REMOTE);
    expect_untouched(dp.egress(&host), &host);
    assert!(dp.nat_is_empty());
    dp.egress(&gre(POD, REMOTE)).passed();
    expect_untouched(dp.egress(&host), &host);
    assert_eq!(dp.assert_pairs_complete(), 1);
}

/// An SCTP packet: common header (ports, verification tag, CRC32c as sent: nothing
/// here recomputes it, so it must arrive as it left) and an INIT-like chunk.
fn sctp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    ipv4_frame(src, dst, SCTP, 0, &sctp_body(sport, dport))
}

fn sctp_body(sport: u16, dport: u16) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&sport.to_be_bytes());
    b.extend_from_slice(&dport.to_be_bytes());
    b.extend_from_slice(&[0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
    b.extend_from_slice(&[1, 0, 0, 20, 0, 0, 0, 9, 0, 1, 0, 0, 0, 4, 0, 4, 0, 0, 0, 1]);
    b
}

#[test]
fn sctp_keeps_its_ports_and_its_checksum() {
    // Ports kept (netfilter keeps them too while they are free), the CRC32c untouched:
    // it covers no IP header. Either family; the reply comes back.
    let dp = node6();
    assert_eq!(dp.egress(&sctp4(POD, REMOTE, 38412, 38412)).passed(), sctp4(MASQ, REMOTE, 38412, 38412));
    dp.assert_single_pair(nat_key(POD, REMOTE, 38412, 38412, SCTP), MASQ, 38412);
    assert_eq!(dp.ingress(&sctp4(REMOTE, MASQ, 38412, 38412)).passed(), sctp4(REMOTE, POD, 38412, 38412));
    let (out, back) = (ipv6_frame(pod6(), remote6(), SCTP, &sctp_body(5000, 3868)), ipv6_frame(remote6(), masq6(), SCTP, &sctp_body(3868, 5000)));
    assert_eq!(dp.egress(&out).passed(), ipv6_frame(masq6(), remote6(), SCTP, &sctp_body(5000, 3868)));
    assert_eq!(dp.ingress(&back).passed(), ipv6_frame(remote6(), pod6(), SCTP, &sctp_body(3868, 5000)));
    // An ICMP error about it goes back to the pod, its ports found in the quote.
    let err = icmp4_error(REMOTE, MASQ, 3, 3, 0, &quote(&sctp4(MASQ, REMOTE, 38412, 38412), Some(8)));
    assert_eq!(dp.ingress(&err).passed(), icmp4_error(REMOTE, POD, 3, 3, 0, &quote(&sctp4(POD, REMOTE, 38412, 38412), Some(8))));
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn a_second_sctp_source_on_the_same_ports_is_refused() {
    // netfilter would give it another port (and recompute the CRC32c); the data plane
    // cannot, and refuses it while the first holds {remote, ports}: another pod port is another pair.
    let dp = node();
    dp.egress(&sctp4(POD, REMOTE, 38412, 38412)).passed();
    dp.egress(&sctp4(POD2, REMOTE, 38412, 38412)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 1);
    assert_eq!(dp.egress(&sctp4(POD2, REMOTE, 38413, 38412)).passed(), sctp4(MASQ, REMOTE, 38413, 38412));
    assert_eq!(dp.ingress(&sctp4(REMOTE, MASQ, 38412, 38412)).passed(), sctp4(REMOTE, POD, 38412, 38412));
    assert_eq!(dp.ingress(&sctp4(REMOTE, MASQ, 38412, 38413)).passed(), sctp4(REMOTE, POD2, 38412, 38413));
}

#[test]
fn a_truncated_sctp_header_is_dropped() {
    let dp = node();
    dp.egress(&ipv4_frame(POD, REMOTE, SCTP, 0, &[0x96, 0x0c, 0x96])).dropped();
    assert_eq!(dp.drops(drop::MALFORMED), 1);
    assert!(dp.nat_is_empty());
}

#[test]
fn dccp_and_udp_lite_stay_refused() {
    // Their checksums cover the addresses, and netfilter translates their ports: by
    // address alone would be wrong. Dropped and counted, never leaked.
    let dp = node();
    for (i, proto) in [DCCP, UDPLITE].into_iter().enumerate() {
        let body = [0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0];
        dp.egress(&ipv4_frame(POD, REMOTE, proto, 0, &body)).dropped();
        assert_eq!(dp.drops(drop::UNSUPPORTED_PROTO), i as u64 + 1);
    }
    assert!(dp.nat_is_empty());
}
