//! ICMP / ICMPv6 error translation (RFC 5508) and IPv4 / IPv6 fragments through
//! the real pinned uplink programs, with BPF_PROG_TEST_RUN. Same style as
//! core.rs: every output is compared with a frame built from scratch,
//! every checksum (outer, quoted IP header, quoted L4, reassembled L4) recomputed.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::{counter, EXCL_NATIVE_ROUTING};
use crate::support::{harness::*, icmp::*, node::*, packet::*, packet6::*};

const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
/// The IPv4 identification ipv4_frame() writes.
const IP_ID: u16 = 0x1234;
const IP_MF: u16 = 0x2000;
const ICMP_PKT_TOO_BIG_MTU: u32 = 1400;

fn router6() -> Ipv6Addr {
    a6("2001:db8:50::fe")
}

/// Dual-stack node: uplink = loopback masquerading to MASQ / masq6(), native
/// routing 10.0.0.0/8 and fd00::/8, POD and pod6() (natOutgoing) behind VETH.
fn node() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_uplink6(LO, Some(MASQ), masq6());
    dp.add_excl(Ipv4Addr::new(10, 0, 0, 0), 8, EXCL_NATIVE_ROUTING);
    dp.add_excl6(a6("fd00::"), 8, EXCL_NATIVE_ROUTING);
    dp.add_pod(POD, VETH, true);
    dp.add_pod6(pod6(), VETH, true);
    dp
}

/// Send `frame` out (it must get masqueraded); the NAT port / echo id it got.
#[track_caller]
fn open4(dp: &Dataplane, frame: &[u8]) -> u16 {
    let s = summary(&dp.egress(frame).passed());
    assert_eq!(s.src, MASQ, "flow not masqueraded");
    s.sport
}
#[track_caller]
fn open6(dp: &Dataplane, frame: &[u8]) -> u16 {
    let s = summary6(&dp.egress(frame).passed());
    assert_eq!(s.src, masq6(), "flow not masqueraded");
    s.sport
}

fn quoted_of4(frame: &[u8]) -> Quoted<Ipv4Addr> {
    let s = summary(frame);
    Quoted { src: s.src, dst: s.dst, proto: s.proto, sport: s.sport, dport: s.dport }
}
fn quoted_of6(frame: &[u8]) -> Quoted<Ipv6Addr> {
    let s = summary6(frame);
    Quoted { src: s.src, dst: s.dst, proto: s.proto, sport: s.sport, dport: s.dport }
}

// ================= ICMP errors arriving (towards the pod) =================

/// An ICMPv4 error from `from` quoting `sent` (our packet as it left, first `len`
/// L4 bytes; None = all) must reach the pod quoting `orig` (as the pod sent it).
#[track_caller]
fn expect_err_in4(dp: &Dataplane, from: Ipv4Addr, ty: u8, code: u8, sent: &[u8], orig: &[u8], len: Option<usize>) {
    let rest = if code == CODE_FRAG_NEEDED { ICMP_PKT_TOO_BIG_MTU } else { 0 };
    let out = dp.ingress(&icmp4_error(from, MASQ, ty, code, rest, &quote(sent, len))).passed();
    let full = assert_icmp4_error_checksums(&out);
    assert_eq!(full, len.is_none(), "quoted L4 checksum checked only for a full quote");
    let s = summary(&out);
    assert_eq!((s.src, s.dst), (from, POD), "outer addresses");
    assert_eq!(quoted4(&out).1, quoted_of4(orig), "quoted tuple");
    assert_eq!(out, icmp4_error(from, POD, ty, code, rest, &quote(orig, len)), "not the expected error");
}

#[track_caller]
fn expect_err_in6(dp: &Dataplane, from: Ipv6Addr, ty: u8, code: u8, sent: &[u8], orig: &[u8], len: Option<usize>) {
    let rest = if ty == ICMP6_PKT_TOO_BIG { 1280 } else { 0 };
    let out = dp.ingress(&icmp6_error(from, masq6(), ty, code, rest, &quote(sent, len))).passed();
    let full = assert_icmp6_error_checksums(&out);
    assert_eq!(full, len.is_none(), "quoted checksum checked only for a full quote");
    let s = summary6(&out);
    assert_eq!((s.src, s.dst), (from, pod6()), "outer addresses");
    assert_eq!(quoted6(&out).1, quoted_of6(orig), "quoted tuple");
    assert_eq!(out, icmp6_error(from, pod6(), ty, code, rest, &quote(orig, len)), "not the expected error");
}

#[test]
fn frag_needed4_quoting_tcp_goes_back_to_the_pod() {
    let dp = node();
    let orig = tcp(POD, REMOTE, 40000, 443, ACK);
    let port = open4(&dp, &orig);
    let sent = tcp(MASQ, REMOTE, port, 443, ACK);
    // 8 bytes of TCP (no checksum quoted), the full TCP header, the whole segment.
    for len in [Some(8), Some(20), None] {
        expect_err_in4(&dp, ROUTER, ICMP_DEST_UNREACH, CODE_FRAG_NEEDED, &sent, &orig, len);
    }
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 3);
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 0);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn icmp4_errors_quoting_udp_go_back_to_the_pod() {
    let dp = node();
    let orig = udp(POD, REMOTE, 5000, 53);
    let port = open4(&dp, &orig);
    let sent = udp(MASQ, REMOTE, port, 53);
    let cases = [
        (ROUTER, ICMP_DEST_UNREACH, CODE_FRAG_NEEDED, None),
        (ROUTER, ICMP_TIME_EXCEEDED, 0, Some(8)),
        (ROUTER, ICMP_TIME_EXCEEDED, 0, None),
        (REMOTE, ICMP_DEST_UNREACH, CODE_PORT_UNREACH, None),
    ];
    for (from, ty, code, len) in cases {
        expect_err_in4(&dp, from, ty, code, &sent, &orig, len);
    }
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 4);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn time_exceeded4_quoting_echo_request_restores_the_id() {
    let dp = node();
    let orig = echo_request(POD, REMOTE, 0x4242, 9);
    let id = open4(&dp, &orig);
    let sent = echo_request(MASQ, REMOTE, id, 9);
    expect_err_in4(&dp, ROUTER, ICMP_TIME_EXCEEDED, 0, &sent, &orig, None);
    expect_err_in4(&dp, ROUTER, ICMP_TIME_EXCEEDED, 0, &sent, &orig, Some(8));
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 2);
}

#[test]
fn packet_too_big6_quoting_tcp_goes_back_to_the_pod() {
    let dp = node();
    let orig = tcp6(pod6(), remote6(), 40000, 443, ACK);
    let port = open6(&dp, &orig);
    let sent = tcp6(masq6(), remote6(), port, 443, ACK);
    for len in [Some(8), Some(20), None] {
        expect_err_in6(&dp, router6(), ICMP6_PKT_TOO_BIG, 0, &sent, &orig, len);
    }
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 3);
    assert_eq!(dp.counter(counter::RNAT_PKTS_V6), 0);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn icmp6_errors_quoting_udp_go_back_to_the_pod() {
    let dp = node();
    let orig = udp6(pod6(), remote6(), 5000, 53);
    let port = open6(&dp, &orig);
    let sent = udp6(masq6(), remote6(), port, 53);
    let cases = [
        (router6(), ICMP6_PKT_TOO_BIG, 0, None),
        (router6(), ICMP6_TIME_EXCEEDED, 0, Some(8)),
        (router6(), ICMP6_TIME_EXCEEDED, 0, None),
        (remote6(), ICMP6_DEST_UNREACH, 4, None), // port unreachable
    ];
    for (from, ty, code, len) in cases {
        expect_err_in6(&dp, from, ty, code, &sent, &orig, len);
    }
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 4);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn time_exceeded6_quoting_echo_request_restores_the_id() {
    let dp = node();
    let orig = echo6_request(pod6(), remote6(), 0x4242, 9);
    let id = open6(&dp, &orig);
    let sent = echo6_request(masq6(), remote6(), id, 9);
    expect_err_in6(&dp, router6(), ICMP6_TIME_EXCEEDED, 0, &sent, &orig, None);
    expect_err_in6(&dp, router6(), ICMP6_TIME_EXCEEDED, 0, &sent, &orig, Some(8));
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 2);
}

/// Errors about packets that are not ours (no reverse entry; or quoting a source
/// that is not the error's destination) pass untouched.
#[test]
fn icmp_errors_about_other_packets_pass_untouched() {
    let dp = node();
    let port = open4(&dp, &udp(POD, REMOTE, 5000, 53));
    let port6 = open6(&dp, &udp6(pod6(), remote6(), 5000, 53));
    let frames = [
        // The host's own traffic, from a port no flow of ours holds.
        icmp4_error(ROUTER, MASQ, ICMP_DEST_UNREACH, CODE_FRAG_NEEDED, 1400, &quote(&tcp(MASQ, REMOTE, 20050, 443, ACK), Some(8))),
        // Our port, another remote port.
        icmp4_error(REMOTE, MASQ, ICMP_DEST_UNREACH, CODE_PORT_UNREACH, 0, &quote(&udp(MASQ, REMOTE, port, 54), None)),
        // Quoted source is not the error's destination.
        icmp4_error(ROUTER, MASQ, ICMP_TIME_EXCEEDED, 0, 0, &quote(&udp(Ipv4Addr::new(192, 0, 2, 7), REMOTE, port, 53), None)),
        icmp6_error(router6(), masq6(), ICMP6_PKT_TOO_BIG, 0, 1280, &quote(&tcp6(masq6(), remote6(), 20050, 443, ACK), Some(8))),
        icmp6_error(remote6(), masq6(), ICMP6_DEST_UNREACH, 4, 0, &quote(&udp6(masq6(), remote6(), port6, 54), None)),
    ];
    for f in &frames {
        expect_untouched(dp.ingress(f), f);
    }
    assert_eq!(dp.counter(counter::ICMP_ERR_IN), 0);
    assert_eq!(dp.total_drops(), 0);
}

// ================= ICMP errors leaving (about a reply we translated) =================

/// `outer_in` sends an error to REMOTE about the reply as the pod got it
/// (`got`); it must leave from `outer_out`, quoting the reply as it arrived (`sent`).
#[track_caller]
fn expect_err_out4(dp: &Dataplane, outer_in: Ipv4Addr, outer_out: Ipv4Addr, ty: u8, code: u8, got: &[u8], sent: &[u8]) {
    let out = dp.egress(&icmp4_error(outer_in, REMOTE, ty, code, 0, &quote(got, None))).passed();
    assert!(assert_icmp4_error_checksums(&out));
    let s = summary(&out);
    assert_eq!((s.src, s.dst), (outer_out, REMOTE), "outer addresses");
    assert_eq!(quoted4(&out).1, quoted_of4(sent), "quoted tuple");
    assert_eq!(out, icmp4_error(outer_out, REMOTE, ty, code, 0, &quote(sent, None)), "not the expected error");
}

#[track_caller]
fn expect_err_out6(dp: &Dataplane, outer_in: Ipv6Addr, outer_out: Ipv6Addr, ty: u8, code: u8, got: &[u8], sent: &[u8]) {
    let out = dp.egress(&icmp6_error(outer_in, remote6(), ty, code, 0, &quote(got, None))).passed();
    assert!(assert_icmp6_error_checksums(&out));
    let s = summary6(&out);
    assert_eq!((s.src, s.dst), (outer_out, remote6()), "outer addresses");
    assert_eq!(quoted6(&out).1, quoted_of6(sent), "quoted tuple");
    assert_eq!(out, icmp6_error(outer_out, remote6(), ty, code, 0, &quote(sent, None)), "not the expected error");
}

#[test]
fn pod_port_unreachable4_leaves_masqueraded() {
    let dp = node();
    let port = open4(&dp, &udp(POD, REMOTE, 5000, 53));
    let got = udp(REMOTE, POD, 53, 5000);
    expect_err_out4(&dp, POD, MASQ, ICMP_DEST_UNREACH, CODE_PORT_UNREACH, &got, &udp(REMOTE, MASQ, 53, port));
    assert_eq!(dp.counter(counter::ICMP_ERR_OUT), 1);
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 1); // the flow's own packet only
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn node_generated_error4_keeps_its_source() {
    let dp = node();
    let port = open4(&dp, &tcp(POD, REMOTE, 40000, 443, SYN));
    // E.g. the reply could not be forwarded to the pod: TTL, or a smaller MTU.
    let got = tcp(REMOTE, POD, 443, 40000, SYN | ACK);
    let sent = tcp(REMOTE, MASQ, 443, port, SYN | ACK);
    expect_err_out4(&dp, MASQ, MASQ, ICMP_TIME_EXCEEDED, 0, &got, &sent);
    expect_err_out4(&dp, MASQ, MASQ, ICMP_DEST_UNREACH, CODE_FRAG_NEEDED, &got, &sent);
    assert_eq!(dp.counter(counter::ICMP_ERR_OUT), 2);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn pod_port_unreachable6_leaves_masqueraded() {
    let dp = node();
    let port = open6(&dp, &udp6(pod6(), remote6(), 5000, 53));
    let got = udp6(remote6(), pod6(), 53, 5000);
    expect_err_out6(&dp, pod6(), masq6(), ICMP6_DEST_UNREACH, 4, &got, &udp6(remote6(), masq6(), 53, port));
    assert_eq!(dp.counter(counter::ICMP_ERR_OUT), 1);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn node_generated_error6_keeps_its_source() {
    let dp = node();
    let port = open6(&dp, &tcp6(pod6(), remote6(), 40000, 443, SYN));
    let got = tcp6(remote6(), pod6(), 443, 40000, SYN | ACK);
    let sent = tcp6(remote6(), masq6(), 443, port, SYN | ACK);
    expect_err_out6(&dp, masq6(), masq6(), ICMP6_TIME_EXCEEDED, 0, &got, &sent);
    expect_err_out6(&dp, masq6(), masq6(), ICMP6_PKT_TOO_BIG, 0, &got, &sent);
    assert_eq!(dp.counter(counter::ICMP_ERR_OUT), 2);
    assert_eq!(dp.total_drops(), 0);
}

/// A pod answering an echo *reply* it got with an error is rare, but the quoted
/// echo id must go back to the NAT id.
#[test]
fn pod_error_quoting_an_echo_reply4() {
    let dp = node();
    let id = open4(&dp, &echo_request(POD, REMOTE, 0x4242, 1));
    let got = echo_reply(REMOTE, POD, 0x4242, 1);
    let out = dp.egress(&icmp4_error(POD, REMOTE, ICMP_DEST_UNREACH, CODE_PORT_UNREACH, 0, &quote(&got, None))).passed();
    assert!(assert_icmp4_error_checksums(&out));
    let sent = echo_reply(REMOTE, MASQ, id, 1);
    assert_eq!(out, icmp4_error(MASQ, REMOTE, ICMP_DEST_UNREACH, CODE_PORT_UNREACH, 0, &quote(&sent, None)));
}

// ================= fragments =================

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

fn udp4_seg(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut seg = [&sport.to_be_bytes()[..], &dport.to_be_bytes(), &((8 + data.len()) as u16).to_be_bytes(), &[0, 0], data].concat();
    let c = match l4_csum(src, dst, UDP, &seg) {
        0 => 0xffff,
        c => c,
    };
    seg[6..8].copy_from_slice(&c.to_be_bytes());
    seg
}

fn echo4_seg(id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut msg = [&[ICMP_ECHO_REQUEST, 0, 0, 0][..], &id.to_be_bytes(), &seq.to_be_bytes(), data].concat();
    let c = icmp_csum(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    msg
}

/// `l4` split into IPv4 fragments (id IP_ID) of `chunk` bytes (a multiple of 8).
fn fragments4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    l4.chunks(chunk)
        .enumerate()
        .map(|(i, data)| {
            let off = i * chunk;
            let mf = if off + data.len() < l4.len() { IP_MF } else { 0 };
            ipv4_frame(src, dst, proto, mf | (off / 8) as u16, data)
        })
        .collect()
}

/// The same frame with another IPv4 identification (header checksum redone).
fn with_ip_id(frame: &[u8], id: u16) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[18..20].copy_from_slice(&id.to_be_bytes());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = ipv4_csum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

fn reassemble4(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let off = (u16::from_be_bytes([f[20], f[21]]) & 0x1fff) as usize * 8;
        let total = u16::from_be_bytes([f[16], f[17]]) as usize;
        let data = &f[34..14 + total];
        out.resize(out.len().max(off + data.len()), 0);
        out[off..off + data.len()].copy_from_slice(data);
    }
    out
}

/// `frag` must have come out as exactly `expected`, IPv4 header checksum valid,
/// and the bytes after the IPv4 header unchanged unless it is a first fragment.
#[track_caller]
fn expect_frag4(out: Vec<u8>, frag: &[u8], expected: &[u8]) -> Vec<u8> {
    assert_eq!(ipv4_csum(&out[14..34]), 0, "IPv4 header checksum invalid");
    if u16::from_be_bytes([frag[20], frag[21]]) & 0x1fff != 0 {
        assert_eq!(out[34..], frag[34..], "later fragment payload modified");
    }
    assert_eq!(out, expected, "fragment not translated as expected");
    out
}

#[track_caller]
fn expect_frag6(out: Vec<u8>, frag: &[u8], expected: &[u8]) -> Vec<u8> {
    let s = summary6(frag);
    if s.frag.unwrap().0 > 0 {
        assert_eq!(out[14 + 40..], frag[14 + 40..], "later fragment (header and payload) modified");
    }
    assert_eq!(out, expected, "fragment not translated as expected");
    out
}

#[test]
fn snat_udp_fragments4() {
    let dp = node();
    let data = payload(64); // 72-byte datagram: fragments at 0, 24, 48
    let frags = fragments4(POD, REMOTE, UDP, &udp4_seg(POD, REMOTE, 5000, 53, &data), 24);
    assert_eq!(frags.len(), 3);
    let first = dp.egress(&frags[0]).passed();
    let port = summary(&first).sport;
    let want = fragments4(MASQ, REMOTE, UDP, &udp4_seg(MASQ, REMOTE, port, 53, &data), 24);
    let mut outs = vec![expect_frag4(first, &frags[0], &want[0])];
    assert_eq!(dp.frag4(), vec![frag4_entry(POD, REMOTE, IP_ID, UDP, 5000, 53)]);
    for i in 1..3 {
        outs.push(expect_frag4(dp.egress(&frags[i]).passed(), &frags[i], &want[i]));
    }
    assert_eq!(l4_csum(MASQ, REMOTE, UDP, &reassemble4(&outs)), 0, "reassembled UDP checksum invalid");
    dp.assert_single_pair(nat_key(POD, REMOTE, 5000, 53, UDP), MASQ, port);
    assert_eq!((dp.counter(counter::FRAGS), dp.counter(counter::SNAT_PKTS_V4)), (2, 3));

    // The next datagram of the same flow (another id) reuses the pair.
    let next: Vec<_> = frags.iter().map(|f| with_ip_id(f, 0x5555)).collect();
    let want_next: Vec<_> = want.iter().map(|f| with_ip_id(f, 0x5555)).collect();
    for i in 0..3 {
        expect_frag4(dp.egress(&next[i]).passed(), &next[i], &want_next[i]);
    }
    assert_eq!(dp.frag4().len(), 2);
    assert_eq!(dp.counter(counter::FRAGS), 4);
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn later_fragment4_without_state() {
    let dp = node();
    let frags = fragments4(POD, REMOTE, UDP, &udp4_seg(POD, REMOTE, 5000, 53, &payload(64)), 24);
    dp.egress(&frags[1]).dropped();
    dp.egress(&frags[2]).dropped();
    assert_eq!(dp.drops(drop::FRAG_NO_STATE), 2);
    // Not ours to masquerade: passes.
    let native = fragments4(POD, NATIVE_DST, UDP, &udp4_seg(POD, NATIVE_DST, 5000, 53, &payload(64)), 24);
    expect_untouched(dp.egress(&native[1]), &native[1]);
    // Ingress: later fragments of unknown datagrams are the host's business.
    let inbound = fragments4(REMOTE, MASQ, UDP, &udp4_seg(REMOTE, MASQ, 53, 20050, &payload(64)), 24);
    expect_untouched(dp.ingress(&inbound[1]), &inbound[1]);
    assert!(dp.nat_is_empty() && dp.frag4().is_empty());
    assert_eq!(dp.counter(counter::FRAGS), 0);
}

#[test]
fn fragments4_out_of_order() {
    let dp = node();
    let data = payload(64);
    let frags = fragments4(POD, REMOTE, UDP, &udp4_seg(POD, REMOTE, 5000, 53, &data), 24);
    dp.egress(&frags[2]).dropped(); // last before first: ports unknown
    assert_eq!(dp.drops(drop::FRAG_NO_STATE), 1);
    let first = dp.egress(&frags[0]).passed();
    let port = summary(&first).sport;
    let want = fragments4(MASQ, REMOTE, UDP, &udp4_seg(MASQ, REMOTE, port, 53, &data), 24);
    assert_eq!(first, want[0]);
    expect_frag4(dp.egress(&frags[1]).passed(), &frags[1], &want[1]);
    // The sender's retransmission of the dropped one now goes through too.
    expect_frag4(dp.egress(&frags[2]).passed(), &frags[2], &want[2]);
    assert_eq!(dp.counter(counter::FRAGS), 2);
}

#[test]
fn snat_echo_fragments4() {
    let dp = node();
    let data = payload(56); // 64-byte ICMP message: fragments at 0, 32
    let frags = fragments4(POD, REMOTE, ICMP, &echo4_seg(0x4242, 3, &data), 32);
    let first = dp.egress(&frags[0]).passed();
    let id = summary(&first).sport;
    let want = fragments4(MASQ, REMOTE, ICMP, &echo4_seg(id, 3, &data), 32);
    let outs = vec![
        expect_frag4(first, &frags[0], &want[0]),
        expect_frag4(dp.egress(&frags[1]).passed(), &frags[1], &want[1]),
    ];
    assert_eq!(icmp_csum(&reassemble4(&outs)), 0, "reassembled ICMP checksum invalid");
    assert_eq!(dp.frag4(), vec![frag4_entry(POD, REMOTE, IP_ID, ICMP, 0x4242, 0)]);
    dp.assert_single_pair(nat_key(POD, REMOTE, 0x4242, 0, ICMP), MASQ, id);
    assert_eq!(dp.counter(counter::FRAGS), 1);
}

#[test]
fn reply_fragments4_are_reverse_natted() {
    let dp = node();
    let port = open4(&dp, &udp(POD, REMOTE, 5000, 53));
    let data = payload(64);
    let frags = fragments4(REMOTE, MASQ, UDP, &udp4_seg(REMOTE, MASQ, 53, port, &data), 24);
    let want = fragments4(REMOTE, POD, UDP, &udp4_seg(REMOTE, POD, 53, 5000, &data), 24);
    let outs: Vec<_> = (0..3).map(|i| expect_frag4(dp.ingress(&frags[i]).passed(), &frags[i], &want[i])).collect();
    assert_eq!(l4_csum(REMOTE, POD, UDP, &reassemble4(&outs)), 0, "reassembled UDP checksum invalid");
    assert_eq!(dp.frag4(), vec![frag4_entry(REMOTE, MASQ, IP_ID, UDP, 53, port)]);
    assert_eq!((dp.counter(counter::FRAGS), dp.counter(counter::RNAT_PKTS_V4)), (2, 3));
    assert_eq!(dp.total_drops(), 0);
}

// ---- IPv6 fragments ----

const FRAG_ID6: u32 = 0xdead_beef;

#[test]
fn snat_udp_fragments6() {
    let dp = node();
    let data = payload(64);
    let frags = fragments6(pod6(), remote6(), UDP, FRAG_ID6, &udp6_seg(pod6(), remote6(), 5000, 53, &data), 24);
    assert_eq!(frags.len(), 3);
    let first = dp.egress(&frags[0]).passed();
    let port = summary6(&first).sport;
    assert!((20000..=20099).contains(&port), "NAT port {port}");
    let want = fragments6(masq6(), remote6(), UDP, FRAG_ID6, &udp6_seg(masq6(), remote6(), port, 53, &data), 24);
    let mut outs = vec![expect_frag6(first, &frags[0], &want[0])];
    assert_eq!(dp.frag6(), vec![frag6_entry(pod6(), remote6(), FRAG_ID6, UDP, 5000, 53)]);
    for i in 1..3 {
        outs.push(expect_frag6(dp.egress(&frags[i]).passed(), &frags[i], &want[i]));
    }
    assert_l6_csum(masq6(), remote6(), UDP, &reassemble6(&outs));
    dp.assert_single_pair6(nat6_key(pod6(), remote6(), 5000, 53, UDP), masq6(), port);
    assert_eq!((dp.counter(counter::FRAGS), dp.counter(counter::SNAT_PKTS_V6)), (2, 3));
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn later_fragment6_without_state() {
    let dp = node();
    let seg = udp6_seg(pod6(), remote6(), 5000, 53, &payload(64));
    let frags = fragments6(pod6(), remote6(), UDP, FRAG_ID6, &seg, 24);
    dp.egress(&frags[1]).dropped();
    dp.egress(&frags[2]).dropped();
    assert_eq!(dp.drops(drop::FRAG_NO_STATE), 2);
    let native = fragments6(pod6(), native6(), UDP, FRAG_ID6, &udp6_seg(pod6(), native6(), 5000, 53, &payload(64)), 24);
    expect_untouched(dp.egress(&native[1]), &native[1]);
    let inbound = fragments6(remote6(), masq6(), UDP, FRAG_ID6, &udp6_seg(remote6(), masq6(), 53, 20050, &payload(64)), 24);
    expect_untouched(dp.ingress(&inbound[1]), &inbound[1]);
    assert!(dp.nat6_is_empty() && dp.frag6().is_empty());
}

#[test]
fn fragments6_out_of_order() {
    let dp = node();
    let data = payload(64);
    let frags = fragments6(pod6(), remote6(), UDP, FRAG_ID6, &udp6_seg(pod6(), remote6(), 5000, 53, &data), 24);
    dp.egress(&frags[2]).dropped();
    assert_eq!(dp.drops(drop::FRAG_NO_STATE), 1);
    let first = dp.egress(&frags[0]).passed();
    let port = summary6(&first).sport;
    let want = fragments6(masq6(), remote6(), UDP, FRAG_ID6, &udp6_seg(masq6(), remote6(), port, 53, &data), 24);
    assert_eq!(first, want[0]);
    expect_frag6(dp.egress(&frags[1]).passed(), &frags[1], &want[1]);
    expect_frag6(dp.egress(&frags[2]).passed(), &frags[2], &want[2]);
    assert_eq!(dp.counter(counter::FRAGS), 2);
}

#[test]
fn snat_echo_fragments6() {
    let dp = node();
    let data = payload(56);
    let frags = fragments6(pod6(), remote6(), ICMP6, FRAG_ID6, &icmp6_seg(pod6(), remote6(), ICMP6_ECHO_REQUEST, 0x4242, 3, &data), 32);
    let first = dp.egress(&frags[0]).passed();
    let id = summary6(&first).sport;
    let want = fragments6(masq6(), remote6(), ICMP6, FRAG_ID6, &icmp6_seg(masq6(), remote6(), ICMP6_ECHO_REQUEST, id, 3, &data), 32);
    let outs = vec![
        expect_frag6(first, &frags[0], &want[0]),
        expect_frag6(dp.egress(&frags[1]).passed(), &frags[1], &want[1]),
    ];
    assert_l6_csum(masq6(), remote6(), ICMP6, &reassemble6(&outs));
    assert_eq!(dp.frag6(), vec![frag6_entry(pod6(), remote6(), FRAG_ID6, ICMP6, 0x4242, 0)]);
    dp.assert_single_pair6(nat6_key(pod6(), remote6(), 0x4242, 0, ICMP6), masq6(), id);
    assert_eq!(dp.counter(counter::FRAGS), 1);
}

#[test]
fn reply_fragments6_are_reverse_natted() {
    let dp = node();
    let port = open6(&dp, &udp6(pod6(), remote6(), 5000, 53));
    let data = payload(64);
    let frags = fragments6(remote6(), masq6(), UDP, FRAG_ID6, &udp6_seg(remote6(), masq6(), 53, port, &data), 24);
    let want = fragments6(remote6(), pod6(), UDP, FRAG_ID6, &udp6_seg(remote6(), pod6(), 53, 5000, &data), 24);
    let outs: Vec<_> = (0..3)
        .map(|i| {
            let out = dp.ingress(&frags[i]).passed();
            assert_eq!(out, want[i], "reply fragment {i} not translated as expected");
            out
        })
        .collect();
    assert_l6_csum(remote6(), pod6(), UDP, &reassemble6(&outs));
    assert_eq!(dp.frag6(), vec![frag6_entry(remote6(), masq6(), FRAG_ID6, UDP, 53, port)]);
    assert_eq!((dp.counter(counter::FRAGS), dp.counter(counter::RNAT_PKTS_V6)), (2, 3));
    assert_eq!(dp.total_drops(), 0);
}

/// RFC 8200 4.5: a destination-options header for the final destination sits in
/// the fragmentable part, after the fragment header. Every fragment's fragment
/// header then says "next: destination options"; only the first carries it.
#[test]
fn fragments6_with_dest_options_after_the_fragment_header() {
    let dp = node();
    let data = payload(64);
    let upper = |src, p| [opts_header(UDP), udp6_seg(src, remote6(), p, 53, &data)].concat();
    let frags = fragments6(pod6(), remote6(), DEST_OPTS, FRAG_ID6, &upper(pod6(), 5000), 32);
    assert_eq!(frags.len(), 3);
    let first = dp.egress(&frags[0]).passed();
    let port = u16::from_be_bytes([first[14 + 48 + 8], first[14 + 48 + 9]]);
    let want = fragments6(masq6(), remote6(), DEST_OPTS, FRAG_ID6, &upper(masq6(), port), 32);
    assert_eq!(first, want[0], "first fragment");
    for i in 1..3 {
        let run = dp.egress(&frags[i]);
        assert_eq!(
            run.ret,
            TC_ACT_UNSPEC,
            "later fragment {i} dropped: FRAG_NO_STATE drops {}, frag6 {:?}",
            dp.drops(drop::FRAG_NO_STATE),
            dp.frag6()
        );
        expect_frag6(run.out, &frags[i], &want[i]);
    }
    assert_eq!(dp.counter(counter::FRAGS), 2);
}
