//! IPv6 masquerade through the real pinned uplink programs, with BPF_PROG_TEST_RUN:
//! SNAT and reverse NAT of TCP/UDP/ICMPv6 echo, pass-through cases, extension
//! headers and masquerade rules. Same style as core.rs: every output is
//! compared with a frame built from scratch and its checksums recomputed.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::{counter, EXCL_LINK_LOCAL, EXCL_NATIVE_ROUTING, NAT_F_BY_RULE};
use crate::support::{harness::*, node::*, packet::*, packet6::*};

fn pod_no_nat() -> Ipv6Addr {
    a6("fd00:10:1::6")
}
fn stranger() -> Ipv6Addr {
    a6("fd00:10:1::99")
}
fn link_local_dst() -> Ipv6Addr {
    a6("fe80::1")
}

/// A dual-stack node: uplink = loopback masquerading to masq6() (and MASQ), native
/// routing fd00::/8, fe80::/10 excluded, pod6() (natOutgoing) and pod_no_nat() behind VETH.
fn node6() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_uplink6(LO, Some(MASQ), masq6());
    dp.add_excl6(a6("fd00::"), 8, EXCL_NATIVE_ROUTING);
    dp.add_excl6(a6("fe80::"), 10, EXCL_LINK_LOCAL);
    dp.add_pod6(pod6(), VETH, true);
    dp.add_pod6(pod_no_nat(), VETH + 1, false);
    dp
}

/// Egress must masquerade `frame` to `nat`: output == `expected(nat_port)`, valid
/// checksums, port in range. Returns the NAT port (echo id for ICMPv6).
#[track_caller]
fn expect_snat6(dp: &Dataplane, frame: &[u8], nat: Ipv6Addr, expected: impl Fn(u16) -> Vec<u8>) -> u16 {
    let out = dp.egress(frame).passed();
    assert_checksums6(&out);
    let s = summary6(&out);
    assert_eq!(s.src, nat, "masquerade address");
    assert!(PORTS.contains(&s.sport), "NAT port {} outside {PORTS:?}", s.sport);
    assert_eq!(out, expected(s.sport), "output is not the expected rewrite");
    s.sport
}

/// Ingress must turn `frame` into exactly `expected`, checksums valid.
#[track_caller]
fn expect_rnat6(dp: &Dataplane, frame: &[u8], expected: Vec<u8>) {
    let out = dp.ingress(frame).passed();
    assert_checksums6(&out);
    assert_eq!(out, expected, "reply not reverse-translated as expected");
}

#[track_caller]
fn assert_no_nat6(dp: &Dataplane) {
    assert!(dp.nat6_is_empty(), "NAT entries created: {:?} / {:?}", dp.fwd6(), dp.rev6());
    assert_eq!(dp.counter(counter::SNAT_PKTS_V6), 0);
    assert_eq!(dp.counter(counter::RNAT_PKTS_V6), 0);
    assert_eq!(dp.total_drops(), 0);
}

// ---- SNAT ----

#[test]
fn snat6_tcp_from_pod() {
    let dp = node6();
    let frame = tcp6(pod6(), remote6(), 40000, 443, SYN);
    let port = expect_snat6(&dp, &frame, masq6(), |p| tcp6(masq6(), remote6(), p, 443, SYN));
    let (fe, _) = dp.assert_single_pair6(nat6_key(pod6(), remote6(), 40000, 443, TCP), masq6(), port);
    assert_eq!((fe.packets, fe.bytes), (1, frame.len() as u64));
    assert_eq!(dp.counter(counter::SNAT_PKTS_V6), 1);
    assert_eq!(dp.counter(counter::SNAT_BYTES_V6), frame.len() as u64);
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 0);
    assert_eq!(dp.counter(counter::NAT_CREATED), 1);
}

#[test]
fn snat6_udp_from_pod() {
    let dp = node6();
    let port = expect_snat6(&dp, &udp6(pod6(), remote6(), 5000, 53), masq6(), |p| udp6(masq6(), remote6(), p, 53));
    dp.assert_single_pair6(nat6_key(pod6(), remote6(), 5000, 53, UDP), masq6(), port);
    assert_eq!(dp.counter(counter::SNAT_PKTS_V6), 1);
}

#[test]
fn snat6_icmp_echo_request() {
    let dp = node6();
    let frame = echo6_request(pod6(), remote6(), 0x4242, 1);
    // ICMPv6's checksum covers the pseudo-header: the new source must be folded in.
    let id = expect_snat6(&dp, &frame, masq6(), |id| echo6_request(masq6(), remote6(), id, 1));
    dp.assert_single_pair6(nat6_key(pod6(), remote6(), 0x4242, 0, ICMP6), masq6(), id);
}

#[test]
fn snat6_second_packet_reuses_its_port() {
    let dp = node6();
    let p1 = expect_snat6(&dp, &tcp6(pod6(), remote6(), 40000, 443, SYN), masq6(), |p| tcp6(masq6(), remote6(), p, 443, SYN));
    let p2 = expect_snat6(&dp, &tcp6(pod6(), remote6(), 40000, 443, ACK), masq6(), |p| tcp6(masq6(), remote6(), p, 443, ACK));
    assert_eq!(p1, p2);
    let (fe, _) = dp.assert_single_pair6(nat6_key(pod6(), remote6(), 40000, 443, TCP), masq6(), p1);
    assert_eq!(fe.packets, 2);
}

// ---- reverse NAT ----

#[test]
fn reply6_tcp_is_reverse_natted() {
    let dp = node6();
    let port = expect_snat6(&dp, &tcp6(pod6(), remote6(), 40000, 443, SYN), masq6(), |p| tcp6(masq6(), remote6(), p, 443, SYN));
    let reply = tcp6(remote6(), masq6(), 443, port, SYN | ACK);
    expect_rnat6(&dp, &reply, tcp6(remote6(), pod6(), 443, 40000, SYN | ACK));
    assert_eq!(dp.counter(counter::RNAT_PKTS_V6), 1);
    assert_eq!(dp.counter(counter::RNAT_BYTES_V6), reply.len() as u64);
}

#[test]
fn reply6_udp_is_reverse_natted() {
    let dp = node6();
    let port = expect_snat6(&dp, &udp6(pod6(), remote6(), 5000, 53), masq6(), |p| udp6(masq6(), remote6(), p, 53));
    expect_rnat6(&dp, &udp6(remote6(), masq6(), 53, port), udp6(remote6(), pod6(), 53, 5000));
    assert_eq!(dp.counter(counter::RNAT_PKTS_V6), 1);
}

#[test]
fn reply6_icmp_echo_is_reverse_natted() {
    let dp = node6();
    let id = expect_snat6(&dp, &echo6_request(pod6(), remote6(), 0x4242, 7), masq6(), |id| echo6_request(masq6(), remote6(), id, 7));
    expect_rnat6(&dp, &echo6_reply(remote6(), masq6(), id, 7), echo6_reply(remote6(), pod6(), 0x4242, 7));
    assert_eq!(dp.counter(counter::RNAT_PKTS_V6), 1);
}

#[test]
fn reply6_without_reverse_entry_passes() {
    let dp = node6();
    for frame in [tcp6(remote6(), masq6(), 443, 20050, SYN | ACK), echo6_reply(remote6(), masq6(), 20050, 1)] {
        expect_untouched(dp.ingress(&frame), &frame);
    }
    assert_no_nat6(&dp);
}

// ---- pass-through ----

#[test]
fn excluded6_native_destination_passes() {
    let dp = node6();
    let frame = tcp6(pod6(), native6(), 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat6(&dp);
    assert_eq!(dp.counter(counter::SKIP_EXCLUDED), 1);
}

#[test]
fn link_local6_destination_passes_when_excluded() {
    let dp = node6();
    let frame = udp6(pod6(), link_local_dst(), 5000, 547);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat6(&dp);
    assert_eq!(dp.counter(counter::SKIP_EXCLUDED), 1);
}

#[test]
fn unregistered6_source_passes() {
    let dp = node6();
    let frame = tcp6(stranger(), remote6(), 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat6(&dp);
}

/// IPv6 likewise: an unregistered source in a podCIDRs range is dropped, not let out.
#[test]
fn an_unregistered6_source_in_the_pod_ranges_is_dropped() {
    let dp = node6();
    dp.add_pod_net6(a6("fd00:10:1::"), 64);
    dp.egress(&tcp6(stranger(), remote6(), 40000, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::UNREGISTERED_POD), 1);
    assert!(dp.nat6_is_empty());
    let excluded = udp6(stranger(), a6("fd00:99::1"), 5000, 53);
    expect_untouched(dp.egress(&excluded), &excluded);
    expect_snat6(&dp, &udp6(pod6(), remote6(), 5000, 53), masq6(), |p| udp6(masq6(), remote6(), p, 53));
}

#[test]
fn nat_outgoing_false_pod6_passes() {
    let dp = node6();
    let frame = udp6(pod_no_nat(), remote6(), 5000, 53);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat6(&dp);
    assert_eq!(dp.counter(counter::SKIP_NO_NAT_OUTGOING), 1);
}

#[test]
fn host_own_v6_traffic_passes() {
    let dp = node6();
    let syn = tcp6(masq6(), remote6(), 20050, 443, SYN);
    expect_untouched(dp.egress(&syn), &syn);
    assert_no_nat6(&dp);
    // An echo request leaves as it is too, but with a host pair on its own id (no
    // socket lookup finds a ping id, so a pod's ping must see it in the table).
    let ping = echo6_request(masq6(), remote6(), 20050, 1);
    expect_untouched(dp.egress(&ping), &ping);
    let fwd = dp.fwd6();
    assert_eq!(fwd.len(), 1, "{fwd:?}");
    assert_eq!((fwd[0].1.flags & ebpf_masq::bpf::abi::NAT_F_HOST, u16::from_be_bytes(fwd[0].1.port)), (0x80, 20050));
}

/// An echo reply leaving answers a ping that reached the pod directly: no flow of
/// ours. To an excluded destination it is untouched; to a masqueraded one it may
/// not leave with the pod's address (dropped, as core.rs expects for IPv4).
#[test]
fn echo6_reply_leaving() {
    let dp = node6();
    let to_native = echo6_reply(pod6(), native6(), 0x4242, 3);
    expect_untouched(dp.egress(&to_native), &to_native);
    assert_no_nat6(&dp);
    dp.egress(&echo6_reply(pod6(), remote6(), 0x4242, 3)).dropped();
    assert_eq!(dp.drops(drop::UNSUPPORTED_PROTO), 1);
    assert!(dp.nat6_is_empty());
}

#[test]
fn uplink_without_v6_address_leaves_v6_alone() {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ); // IPv4 only
    dp.add_pod6(pod6(), VETH, true);
    let frame = tcp6(pod6(), remote6(), 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat6(&dp);
}

#[test]
fn dual_stack_uplink_still_masquerades_v4() {
    let dp = node6();
    let pod4 = Ipv4Addr::new(10, 1, 0, 5);
    dp.add_pod(pod4, VETH + 2, true);
    let remote4 = Ipv4Addr::new(203, 0, 113, 10);
    let out = dp.egress(&udp(pod4, remote4, 5000, 53)).passed();
    assert_checksums(&out);
    let p = summary(&out).sport;
    assert_eq!(out, udp(MASQ, remote4, p, 53));
    assert!(dp.nat6_is_empty());
    assert_eq!((dp.counter(counter::SNAT_PKTS_V4), dp.counter(counter::SNAT_PKTS_V6)), (1, 0));
}

// ---- extension headers ----

fn ext_header_round_trip(ext: u8) {
    let dp = node6();
    let frame = udp6_ext(ext, pod6(), remote6(), 5000, 53);
    assert_eq!(summary6(&frame).l4_off, 48);
    let port = expect_snat6(&dp, &frame, masq6(), |p| udp6_ext(ext, masq6(), remote6(), p, 53));
    dp.assert_single_pair6(nat6_key(pod6(), remote6(), 5000, 53, UDP), masq6(), port);
    expect_rnat6(&dp, &udp6_ext(ext, remote6(), masq6(), 53, port), udp6_ext(ext, remote6(), pod6(), 53, 5000));
    assert_eq!((dp.counter(counter::SNAT_PKTS_V6), dp.counter(counter::RNAT_PKTS_V6)), (1, 1));
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn hop_by_hop_before_udp_is_translated() {
    ext_header_round_trip(HOP_BY_HOP);
}

#[test]
fn dest_options_before_udp_is_translated() {
    ext_header_round_trip(DEST_OPTS);
}

// ---- masquerade rules (rules6 / rule_except6) ----

fn tunnel_client() -> Ipv6Addr {
    a6("fd66::7")
}

#[test]
fn rule6_masquerades_a_non_pod_source() {
    let dp = node6();
    dp.add_rule6(LO, a6("fd66::"), 64, 3, None);
    let frame = tcp6(tunnel_client(), remote6(), 40000, 443, SYN);
    let port = expect_snat6(&dp, &frame, masq6(), |p| tcp6(masq6(), remote6(), p, 443, SYN));
    let (fe, re) = dp.assert_single_pair6(nat6_key(tunnel_client(), remote6(), 40000, 443, TCP), masq6(), port);
    assert_eq!((fe.flags & NAT_F_BY_RULE, fe.rule_id), (NAT_F_BY_RULE, 3));
    assert_eq!((re.flags & NAT_F_BY_RULE, re.rule_id), (NAT_F_BY_RULE, 3));
    let st = dp.rule_stats(3);
    assert_eq!((st.packets, st.bytes), (1, frame.len() as u64));
    // Rules ignore the pod exclusions (fd00::/8 native routing).
    expect_snat6(&dp, &tcp6(tunnel_client(), native6(), 40001, 22, SYN), masq6(), |p| {
        tcp6(masq6(), native6(), p, 22, SYN)
    });
    assert_eq!(dp.rule_stats(3).packets, 2);
}

#[test]
fn rule6_except_destination_passes() {
    let dp = node6();
    dp.add_rule6(LO, a6("fd66::"), 64, 0, None);
    dp.add_rule_except6(0, a6("2001:db8:200::"), 48);
    let frame = tcp6(tunnel_client(), a6("2001:db8:200::9"), 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat6(&dp);
    assert_eq!(dp.rule_stats(0).packets, 0);
    // Outside the except list the rule applies.
    expect_snat6(&dp, &tcp6(tunnel_client(), remote6(), 40000, 443, SYN), masq6(), |p| tcp6(masq6(), remote6(), p, 443, SYN));
}

#[test]
fn rule6_to_address_is_used() {
    let dp = node6();
    let to = a6("2001:db8:ffff::99");
    dp.add_rule6(LO, a6("fd67::"), 64, 1, Some(to));
    let src = a6("fd67::20");
    let port = expect_snat6(&dp, &udp6(src, remote6(), 6000, 123), to, |p| udp6(to, remote6(), p, 123));
    let (fe, _) = dp.assert_single_pair6(nat6_key(src, remote6(), 6000, 123, UDP), to, port);
    assert_eq!((fe.flags & NAT_F_BY_RULE, fe.rule_id), (NAT_F_BY_RULE, 1));
    assert_eq!(dp.rule_stats(1).packets, 1);
    expect_rnat6(&dp, &udp6(remote6(), to, 123, port), udp6(remote6(), src, 123, 6000));
}

/// A rule with toAddress works even on an uplink without an IPv6 address.
#[test]
fn rule6_to_address_without_uplink_v6() {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    let to = a6("2001:db8:ffff::99");
    dp.add_rule6(LO, a6("fd67::"), 64, 2, Some(to));
    let src = a6("fd67::20");
    expect_snat6(&dp, &udp6(src, remote6(), 6000, 123), to, |p| udp6(to, remote6(), p, 123));
    // Without toAddress there is nothing to masquerade to: untouched.
    dp.add_rule6(LO, a6("fd68::"), 64, 4, None);
    let frame = udp6(a6("fd68::1"), remote6(), 6000, 123);
    expect_untouched(dp.egress(&frame), &frame);
}

/// IPv6 pairs expire like IPv4's (both halves), and the sweep's cycle takes in
/// nat6_fwd's shards only while IPv6 pairs may exist: a new one is reported
/// (NAT_GC_NEW6), the cycle after walks nat6_fwd too (NAT_GC_WALK6), and the
/// cycle after the one that removed the last IPv6 pair drops it again and, with
/// no pair left, stops.
#[test]
fn ipv6_pairs_expire_and_the_sweep_walks_nat6_only_while_they_exist() {
    use ebpf_masq::bpf::abi::{NAT_GC_ARMED, NAT_GC_NEW6, NAT_GC_WALK6};
    let eventually = |secs: u64, f: &dyn Fn() -> bool| {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while !f() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        f()
    };
    let dp = node6();
    dp.set_timeouts(20000, 20099, 3600, 3600, 1);
    // A new pair arms the sweep at once (the load primed its timer: see expiry.rs).
    expect_snat6(&dp, &udp6(pod6(), remote6(), 40000, 53), masq6(), |n| udp6(masq6(), remote6(), n, 53));
    assert_eq!(dp.counter(counter::NAT_GC_ARM_FAILED), 0);
    let gc = dp.nat_gc();
    assert_eq!((gc.armed, gc.walk), (NAT_GC_ARMED | NAT_GC_NEW6, 0), "an IPv6 pair is reported to the sweep: {gc:?}");
    assert!(eventually(3, &|| dp.nat_gc().walk & NAT_GC_WALK6 != 0), "nat6_fwd never joined the cycle: {:?}", dp.nat_gc());
    assert!(eventually(5, &|| dp.nat6_is_empty()), "IPv6 pair not expired: {:?} {:?}", dp.fwd6(), dp.rev6());
    assert_eq!(dp.counter(counter::NAT_EXPIRED), dp.counter(counter::NAT_CREATED));
    assert!(
        eventually(5, &|| { let g = dp.nat_gc(); g.armed == 0 && g.walk == 0 }),
        "sweep still armed or walking nat6: {:?}",
        dp.nat_gc()
    );
}
