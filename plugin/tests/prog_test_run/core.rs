//! The real pinned programs (uplink egress/ingress, veth ingress) run on crafted
//! packets with BPF_PROG_TEST_RUN: SNAT, reverse NAT, pass-through cases, drops,
//! rules, port allocation, the veth source check. Each test has a data plane of
//! its own (fresh, or one kept from an earlier test and put back as it was after
//! its load: main.rs), writes the maps directly and checks the verdict, the output
//! bytes (checksums re-verified from scratch) and the map state.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

use ebpf_masq::bpf::nat_hot::Released;

use ebpf_masq::bpf::abi::{
    self, counter, EXCL_LINK_LOCAL, EXCL_NATIVE_ROUTING, NAT_F_BY_RULE,
};
use crate::support::{harness::*, node::*, packet::*};

const LINK_LOCAL_DST: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// A node: `pods_node`, and native routing 10.0.0.0/8, link-local excluded,
/// POD_NO_NAT registered behind VETH + 2.
pub(crate) fn node() -> Dataplane {
    node_sized(NAT_MAX_ENTRIES_IN_TESTS)
}

/// `node` with another natMaxEntries.
fn node_sized(nat_max_entries: u32) -> Dataplane {
    let dp = pods_node_sized(nat_max_entries);
    dp.add_excl(Ipv4Addr::new(10, 0, 0, 0), 8, EXCL_NATIVE_ROUTING);
    dp.add_excl(Ipv4Addr::new(169, 254, 0, 0), 16, EXCL_LINK_LOCAL);
    dp.add_pod(POD_NO_NAT, VETH + 2, false);
    dp
}

/// Run `frame` through egress, expecting it masqueraded to `nat`: the output must
/// be exactly `expected(nat_port)` (built from scratch) and its checksums valid.
/// Returns the NAT port (the echo id for ICMP).
#[track_caller]
pub(crate) fn expect_snat(dp: &Dataplane, frame: &[u8], nat: Ipv4Addr, expected: impl Fn(u16) -> Vec<u8>) -> u16 {
    expect_snat_in(dp, frame, nat, PORTS, expected)
}

/// expect_snat with a port range other than PORTS configured.
#[track_caller]
pub(crate) fn expect_snat_in(
    dp: &Dataplane,
    frame: &[u8],
    nat: Ipv4Addr,
    ports: RangeInclusive<u16>,
    expected: impl Fn(u16) -> Vec<u8>,
) -> u16 {
    let out = dp.egress(frame).passed();
    assert_checksums(&out);
    let s = summary(&out);
    assert_eq!(s.src, nat, "masquerade address");
    assert!(ports.contains(&s.sport), "NAT port {} outside {ports:?}", s.sport);
    assert_eq!(out, expected(s.sport), "output is not the expected rewrite");
    s.sport
}

/// Nothing masqueraded, nothing created, nothing dropped.
#[track_caller]
pub(crate) fn assert_no_nat(dp: &Dataplane) {
    assert!(dp.nat_is_empty(), "NAT entries created: {:?} / {:?}", dp.fwd(), dp.rev());
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 0);
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 0);
    assert_eq!(dp.total_drops(), 0);
}

// ---- the test environment itself ----

#[test]
fn test_run_ifindex_is_loopback() {
    // Only an uplink on some other ifindex: the program must not see the packet as its own.
    let dp = Dataplane::new();
    dp.add_uplink(LO + 1, MASQ);
    dp.add_pod(POD, VETH, true);
    let frame = tcp(POD, REMOTE, 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    // Registered on ifindex 1 it is: skb->ifindex inside BPF_PROG_TEST_RUN is loopback.
    dp.add_uplink(LO, MASQ);
    expect_snat(&dp, &frame, MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
}

// ---- 1-3: SNAT ----

#[test]
fn snat_tcp_from_pod() {
    let dp = node();
    let frame = tcp(POD, REMOTE, 40000, 443, SYN);
    let port = expect_snat(&dp, &frame, MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let (fe, _) = dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, port);
    assert_eq!((fe.packets, fe.bytes), (1, frame.len() as u64));
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 1);
    assert_eq!(dp.counter(counter::SNAT_BYTES_V4), frame.len() as u64);
    assert_eq!(dp.counter(counter::NAT_CREATED), 1);
    assert_eq!(dp.counter(counter::PORT_PROBES), 1, "an empty range: the first port tried is free");
}

#[test]
fn snat_udp_from_pod() {
    let dp = node();
    let port = expect_snat(&dp, &udp(POD, REMOTE, 5000, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53));
    dp.assert_single_pair(nat_key(POD, REMOTE, 5000, 53, UDP), MASQ, port);
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 1);
}

#[test]
fn snat_udp_zero_checksum_stays_zero() {
    let dp = node();
    let frame = udp_nocsum(POD, REMOTE, 5000, 53);
    let port = expect_snat(&dp, &frame, MASQ, |p| udp_nocsum(MASQ, REMOTE, p, 53));
    assert_eq!(udp_csum_field(&dp.egress(&frame).passed()), 0);
    dp.assert_single_pair(nat_key(POD, REMOTE, 5000, 53, UDP), MASQ, port);
}

#[test]
fn snat_icmp_echo_request() {
    let dp = node();
    let frame = echo_request(POD, REMOTE, 0x4242, 1);
    let id = expect_snat(&dp, &frame, MASQ, |id| echo_request(MASQ, REMOTE, id, 1));
    // ICMP echo: the identifier is the pod/NAT "port", the remote port is 0.
    dp.assert_single_pair(nat_key(POD, REMOTE, 0x4242, 0, ICMP), MASQ, id);
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 1);
}

#[test]
fn second_packet_of_a_flow_reuses_its_port() {
    let dp = node();
    let first = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let second = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, ACK), MASQ, |p| tcp(MASQ, REMOTE, p, 443, ACK));
    assert_eq!(first, second);
    let (fe, _) = dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, first);
    assert_eq!(fe.packets, 2);
    assert_eq!(dp.counter(counter::NAT_CREATED), 1);
    assert_eq!(dp.counter(counter::SNAT_PKTS_V4), 2);
}

// ---- 4: reverse NAT ----

#[test]
fn reply_tcp_is_reverse_natted() {
    let dp = node();
    let port = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let reply = tcp(REMOTE, MASQ, 443, port, SYN | ACK);
    let out = dp.ingress(&reply).passed();
    assert_checksums(&out);
    assert_eq!(out, tcp(REMOTE, POD, 443, 40000, SYN | ACK));
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 1);
    assert_eq!(dp.counter(counter::RNAT_BYTES_V4), reply.len() as u64);
    dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, port);
}

#[test]
fn reply_udp_is_reverse_natted() {
    let dp = node();
    let port = expect_snat(&dp, &udp(POD, REMOTE, 5000, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53));
    let out = dp.ingress(&udp(REMOTE, MASQ, 53, port)).passed();
    assert_checksums(&out);
    assert_eq!(out, udp(REMOTE, POD, 53, 5000));
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 1);
}

#[test]
fn reply_icmp_echo_is_reverse_natted() {
    let dp = node();
    let id = expect_snat(&dp, &echo_request(POD, REMOTE, 0x4242, 7), MASQ, |id| echo_request(MASQ, REMOTE, id, 7));
    let out = dp.ingress(&echo_reply(REMOTE, MASQ, id, 7)).passed();
    assert_checksums(&out);
    assert_eq!(out, echo_reply(REMOTE, POD, 0x4242, 7));
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 1);
}

// ---- 5: pass-through ----

#[test]
fn excluded_destination_passes() {
    let dp = node();
    let frame = tcp(POD, NATIVE_DST, 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat(&dp);
    assert_eq!(dp.counter(counter::SKIP_EXCLUDED), 1);
}

#[test]
fn link_local_destination_passes() {
    let dp = node();
    let frame = tcp(POD, LINK_LOCAL_DST, 40000, 80, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat(&dp);
    assert_eq!(dp.counter(counter::SKIP_EXCLUDED), 1);
}

#[test]
fn unregistered_source_passes() {
    let dp = node();
    let frame = tcp(STRANGER, REMOTE, 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat(&dp);
}

/// A source in the node's pod ranges that no registered pod owns (a pod whose ADD
/// never reached ebpf-masq) never leaves with its address where a pod's packet
/// would be masqueraded: dropped and counted, its later fragments too; towards an
/// excluded destination it passes as a pod's would; a registered pod of the same
/// range is masqueraded as before; and a reply towards it makes no inbound pair.
#[test]
fn an_unregistered_source_in_the_pod_ranges_is_dropped_never_let_out() {
    let dp = node();
    dp.add_pod_net(Ipv4Addr::new(10, 1, 0, 0), 24);
    dp.egress(&tcp(STRANGER, REMOTE, 40000, 443, SYN)).dropped();
    dp.egress(&udp(STRANGER, REMOTE, 5000, 53)).dropped();
    dp.egress(&udp_non_first_fragment(STRANGER, REMOTE)).dropped();
    assert_eq!(dp.drops(drop::UNREGISTERED_POD), 3);
    assert_eq!(dp.total_drops(), 3, "counted as unregistered_pod only");
    assert!(dp.nat_is_empty());
    let excluded = tcp(STRANGER, NATIVE_DST, 40000, 443, SYN);
    expect_untouched(dp.egress(&excluded), &excluded);
    let reply = tcp(REMOTE, STRANGER, 443, 40000, SYN | ACK);
    expect_untouched(dp.ingress(&reply), &reply);
    assert!(dp.nat_is_empty(), "no inbound pair for an unregistered source");
    expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    // Outside the ranges: not ours, untouched as before.
    let outside = tcp(Ipv4Addr::new(10, 2, 0, 99), REMOTE, 40000, 443, SYN);
    expect_untouched(dp.egress(&outside), &outside);
    assert_eq!(dp.drops(drop::UNREGISTERED_POD), 3);
}

#[test]
fn nat_outgoing_false_pod_passes() {
    let dp = node();
    let frame = udp(POD_NO_NAT, REMOTE, 5000, 53);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat(&dp);
    assert_eq!(dp.counter(counter::SKIP_NO_NAT_OUTGOING), 1);
}

#[test]
fn host_own_traffic_passes() {
    let dp = node();
    let frame = tcp(MASQ, REMOTE, 20050, 443, SYN); // even from a port inside the range
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat(&dp);
}

#[test]
fn arp_and_ipv6_pass_the_uplink() {
    let dp = node();
    let v6 = ipv6_udp("fd00::5".parse().unwrap(), "2001:db8::1".parse().unwrap());
    for frame in [arp(POD, REMOTE), v6] {
        expect_untouched(dp.egress(&frame), &frame);
        expect_untouched(dp.ingress(&frame), &frame);
    }
    assert_no_nat(&dp);
}

#[test]
fn reply_without_reverse_entry_passes() {
    let dp = node();
    let frame = tcp(REMOTE, MASQ, 443, 20050, SYN | ACK);
    expect_untouched(dp.ingress(&frame), &frame);
    let ping = echo_reply(REMOTE, MASQ, 20050, 1);
    expect_untouched(dp.ingress(&ping), &ping);
    assert_no_nat(&dp);
}

#[test]
fn reply_from_another_remote_port_passes() {
    let dp = node();
    let port = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let frame = tcp(REMOTE, MASQ, 444, port, SYN | ACK);
    expect_untouched(dp.ingress(&frame), &frame);
    let other_host = tcp(REMOTE2, MASQ, 443, port, SYN | ACK);
    expect_untouched(dp.ingress(&other_host), &other_host);
    assert_eq!(dp.counter(counter::RNAT_PKTS_V4), 0);
    dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, port);
}

// ---- 6: drops ----

/// A later fragment seen before its first: its ports (so its NAT pair) are
/// unknown, and it must not leave with the pod's address.
#[test]
fn non_first_fragment_without_first_is_dropped() {
    let dp = node();
    dp.egress(&udp_non_first_fragment(POD, REMOTE)).dropped();
    assert_eq!(dp.drops(drop::FRAG_NO_STATE), 1);
    // A fragment that is not ours to masquerade goes through.
    let frag = udp_non_first_fragment(POD, NATIVE_DST);
    expect_untouched(dp.egress(&frag), &frag);
    assert!(dp.nat_is_empty());
}

/// IP options move the L4 header: the ports behind them are translated both
/// ways (the programs read ports straight from the packet only behind a plain
/// 20-byte header, and through a helper otherwise).
#[test]
fn ip_options_move_the_ports_and_both_directions_still_translate() {
    // Record Route (type 7, 11 bytes, pointer 4, two empty slots) + EOL: 12 bytes.
    let rr = [7u8, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    // The packet without options: a SYN (reply: SYN-ACK) for TCP, a datagram for UDP.
    fn seg(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, reply: bool) -> Vec<u8> {
        match proto {
            TCP => tcp(src, dst, sport, dport, if reply { SYN | ACK } else { SYN }),
            _ => udp(src, dst, sport, dport),
        }
    }
    for proto in [TCP, UDP] {
        let dp = node();
        let frame = with_ip_options(&seg(proto, POD, REMOTE, 40000, 443, false), &rr);
        let out = dp.egress(&frame).passed();
        assert_checksums(&out);
        let s = summary(&out);
        assert_eq!((s.src, s.dst, s.dport), (MASQ, REMOTE, 443), "proto {proto}");
        assert!(PORTS.contains(&s.sport), "NAT port {} outside {PORTS:?}", s.sport);
        let expected = with_ip_options(&seg(proto, MASQ, REMOTE, s.sport, 443, false), &rr);
        assert_eq!(out, expected, "proto {proto}: only address, port and checksums change");
        dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, proto), MASQ, s.sport);

        let back = dp.ingress(&with_ip_options(&seg(proto, REMOTE, MASQ, 443, s.sport, true), &rr)).passed();
        assert_checksums(&back);
        assert_eq!(back, with_ip_options(&seg(proto, REMOTE, POD, 443, 40000, true), &rr), "proto {proto}");
    }
}

#[test]
fn truncated_tcp_header_is_dropped() {
    let dp = node();
    dp.egress(&tcp_truncated(POD, REMOTE, 40000, 443)).dropped();
    assert_eq!(dp.drops(drop::MALFORMED), 1);
    assert!(dp.nat_is_empty());
}

#[test]
fn exhausted_port_range_drops() {
    let dp = node();
    dp.set_config(20000, 20000, 3600);
    let taken = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    assert_eq!(taken, 20000);
    assert_eq!(dp.counter(counter::PORT_PROBES), 1);
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 1);
    assert_eq!(dp.counter(counter::ALLOC_FAIL), 1);
    // Its 8 looks at random ports (the only one, held) found the endpoint busy: its bitmap
    // was made (one scan of the one-port range), which says the port is held: no probe.
    assert_eq!(dp.counter(counter::PORT_PROBES), 1);
    assert_eq!(dp.counter(counter::NAT_HOT_SCANS), 1);
    // The next refusal costs no probe at all.
    dp.egress(&tcp(POD2, REMOTE, 40002, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::PORT_PROBES)), (2, 1));
    dp.assert_single_pair(nat_key(POD, REMOTE, 40000, 443, TCP), MASQ, 20000);
    // Ports are per remote endpoint: another remote still gets the same port.
    expect_snat(&dp, &tcp(POD2, REMOTE2, 40001, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE2, p, 443, SYN));
}

/// The scale target: port allocation stays O(1) expected while the range is under 90 %
/// full for one remote endpoint. With 90 % of the range in use (held exactly
/// there: a port given back for each one taken), a new flow tries ~10 ports on
/// average (1 / (1 - 0.9), random probes), whether the range has 1,000 ports or
/// 20,000: the cost follows how full the range is, not how large.
#[test]
fn port_allocation_takes_at_most_about_ten_probes_at_90_percent_whatever_the_range_size() {
    const FLOWS: u16 = 200;
    for (range, max_entries) in [(1_000u32, NAT_MAX_ENTRIES_IN_TESTS), (20_000, 32_768)] {
        let dp = node_sized(max_entries);
        let (lo, hi) = (20_000u16, (20_000 + range - 1) as u16);
        dp.set_config(lo, hi, 3600);
        // 90 % of the ports in use by other pairs to REMOTE:443 (reverse halves are the claims),
        // in a scrambled order so the ones given back are spread over the range.
        let mut in_use: Vec<u16> = (lo..=hi).collect();
        let mut x = 0x2545_f491_u32 ^ range;
        for i in (1..in_use.len()).rev() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            in_use.swap(i, x as usize % (i + 1));
        }
        in_use.truncate(range as usize * 9 / 10);
        let now = monotonic_ns();
        for (i, &p) in in_use.iter().enumerate() {
            let rk = reverse_key(&nat_key(POD2, REMOTE, 1 + i as u16, 443, TCP), MASQ, p);
            dp.put_rev(&rk, nat_entry(POD2, 1 + i as u16, now));
        }
        let before = dp.counter(counter::PORT_PROBES);
        for i in 0..FLOWS {
            let port = expect_snat_in(&dp, &tcp(POD, REMOTE, 40000 + i, 443, SYN), MASQ, lo..=hi, |p| {
                tcp(MASQ, REMOTE, p, 443, SYN)
            });
            assert!(!in_use.contains(&port), "flow {i} took port {port}, which was in use");
            // Give one back, as the plugin removes a pair (its port's bit in the busy
            // endpoint's bitmap goes too): the range stays 90 % full.
            let given = in_use.pop().unwrap();
            let rk = reverse_key(&nat_key(POD2, REMOTE, 1 + in_use.len() as u16, 443, TCP), MASQ, given);
            dp.del_rev(&rk);
            let t = Released {
                remote: REMOTE.into(), rport: 443, nat: MASQ.into(), nport: given, proto: TCP, source: POD2.into(),
            };
            ebpf_masq::bpf::nat_hot::release(&dp.pins, &[t]).unwrap();
        }
        let mean = (dp.counter(counter::PORT_PROBES) - before) as f64 / f64::from(FLOWS);
        // Random probes alone: geometric with p = 0.1, mean 10 (sd 0.67 for the mean of
        // 200). Once 32 random probes have failed (3.4 % a flow) the endpoint's bitmap
        // takes over, which finds a free port at its first probe: between the two.
        assert!((1.0..=13.0).contains(&mean), "range {range}: {mean:.2} probes per new flow at 90 % full");
        assert_eq!(dp.counter(counter::ALLOC_FAIL), 0);
    }
}

// ---- 7: masquerade rules ----

const TUNNEL_CLIENT: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 7);

#[test]
fn rule_masquerades_a_non_pod_source() {
    let dp = node();
    dp.add_rule(LO, Ipv4Addr::new(192, 168, 6, 0), 24, 3, None);
    let frame = tcp(TUNNEL_CLIENT, REMOTE, 40000, 443, SYN);
    let port = expect_snat(&dp, &frame, MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let (fe, re) = dp.assert_single_pair(nat_key(TUNNEL_CLIENT, REMOTE, 40000, 443, TCP), MASQ, port);
    assert_eq!((fe.flags & NAT_F_BY_RULE, fe.rule_id), (NAT_F_BY_RULE, 3));
    assert_eq!((re.flags & NAT_F_BY_RULE, re.rule_id), (NAT_F_BY_RULE, 3));
    let st = dp.rule_stats(3);
    assert_eq!((st.packets, st.bytes), (1, frame.len() as u64));
    // Rules ignore the pod exclusions (nativeRoutingCIDR) by design.
    expect_snat(&dp, &tcp(TUNNEL_CLIENT, NATIVE_DST, 40000, 22, SYN), MASQ, |p| tcp(MASQ, NATIVE_DST, p, 22, SYN));
    assert_eq!(dp.rule_stats(3).packets, 2);
}

#[test]
fn rule_except_destination_passes() {
    let dp = node();
    dp.add_rule(LO, Ipv4Addr::new(192, 168, 6, 0), 24, 0, None);
    dp.add_rule_except(0, Ipv4Addr::new(198, 18, 0, 0), 15);
    let frame = tcp(TUNNEL_CLIENT, Ipv4Addr::new(198, 19, 1, 1), 40000, 443, SYN);
    expect_untouched(dp.egress(&frame), &frame);
    assert_no_nat(&dp);
    assert_eq!(dp.rule_stats(0).packets, 0);
}

#[test]
fn rule_to_address_is_used() {
    let dp = node();
    let to = Ipv4Addr::new(198, 51, 100, 9);
    dp.add_rule(LO, Ipv4Addr::new(192, 168, 7, 0), 24, 1, Some(to));
    let src = Ipv4Addr::new(192, 168, 7, 20);
    let port = expect_snat(&dp, &udp(src, REMOTE, 6000, 123), to, |p| udp(to, REMOTE, p, 123));
    dp.assert_single_pair(nat_key(src, REMOTE, 6000, 123, UDP), to, port);
    assert_eq!(dp.rule_stats(1).packets, 1);
    let out = dp.ingress(&udp(REMOTE, to, 123, port)).passed();
    assert_eq!(out, udp(REMOTE, src, 123, 6000));
}

// ---- 10: veth anti-spoofing ----

/// A node whose pod sits behind the test_run device (ifindex 1).
fn veth_node() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_pod(POD, LO, true);
    dp.add_pod(POD2, VETH, true);
    dp
}

#[test]
fn veth_pod_source_passes_and_is_counted() {
    let dp = veth_node();
    let frame = tcp(POD, REMOTE, 40000, 443, SYN);
    expect_untouched(dp.veth(&frame), &frame);
    let st = dp.pod_stats(LO);
    assert_eq!((st.packets, st.bytes, st.spoofed), (1, frame.len() as u64, 0));
    assert_eq!(dp.total_drops(), 0);
}

#[test]
fn veth_spoofed_source_is_dropped() {
    let dp = veth_node();
    dp.veth(&tcp(STRANGER, REMOTE, 40000, 443, SYN)).dropped();
    // Another pod's address, from the wrong veth, is spoofed too.
    dp.veth(&udp(POD2, REMOTE, 5000, 53)).dropped();
    assert_eq!(dp.drops(drop::SPOOFED_SOURCE), 2);
    let st = dp.pod_stats(LO);
    assert_eq!((st.packets, st.spoofed), (0, 2));
}

/// The veth's `veths` entry holds the pod's first address of each family (one
/// lookup per packet); the pod's other addresses are checked in pods4/pods6.
/// Every registered address passes either way, and nothing else does.
#[test]
fn veth_every_registered_address_passes_the_first_of_each_from_the_veth_entry() {
    let dp = veth_node();
    let pod_b = Ipv4Addr::new(10, 1, 0, 8);
    let (pod6, pod6_b): (Ipv6Addr, Ipv6Addr) = ("fd00::5".parse().unwrap(), "fd00::8".parse().unwrap());
    dp.add_pod(pod_b, LO, true);
    dp.add_pod6(pod6, LO, true);
    dp.add_pod6(pod6_b, LO, true);
    let v = dp.veth_entry(LO).expect("no veths entry");
    assert_eq!((v.addr4, v.addr6, v.flags), (POD.octets(), pod6.octets(), abi::VETH_F_ADDR4 | abi::VETH_F_ADDR6));
    assert_eq!((v.pod.ifindex, v.pod.flags), (LO, abi::POD_F_NAT_OUTGOING));
    let remote6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let frames =
        [udp(POD, REMOTE, 5000, 53), udp(pod_b, REMOTE, 5000, 53), ipv6_udp(pod6, remote6), ipv6_udp(pod6_b, remote6)];
    for frame in &frames {
        expect_untouched(dp.veth(frame), frame);
    }
    assert_eq!(dp.total_drops(), 0);
    // Another veth's pod, and an address nobody registered, in either family.
    dp.veth(&udp(POD2, REMOTE, 5000, 53)).dropped();
    dp.veth(&ipv6_udp("fd00::99".parse().unwrap(), remote6)).dropped();
    let st = dp.pod_stats(LO);
    assert_eq!((st.packets, st.spoofed), (frames.len() as u64, 2));
    // A veth whose pod has no IPv4 address: the entry's empty IPv4 slot matches nothing.
    let dp6 = Dataplane::new();
    dp6.add_pod6(pod6, LO, true);
    dp6.veth(&udp(Ipv4Addr::UNSPECIFIED, REMOTE, 5000, 53)).dropped();
    expect_untouched(dp6.veth(&frames[2]), &frames[2]);
    assert_eq!(dp6.drops(drop::SPOOFED_SOURCE), 1);
}

/// Deleting an absent key fails with ENOENT (aya passes the syscall's error on,
/// not KeyNotFound): every "already gone is fine" path (a DEL run again after
/// being killed, an uplink dropped twice) relies on `is_key_not_found` saying so.
#[test]
fn deleting_an_absent_key_reads_as_not_found() {
    let dp = Dataplane::new();
    let mut veths: aya::maps::PerCpuHashMap<aya::maps::MapData, u32, abi::VethInfo> =
        ebpf_masq::bpf::maps::pinned(&dp.pins, abi::MAP_VETHS).unwrap();
    let err = veths.remove(&4242).unwrap_err();
    assert!(ebpf_masq::bpf::maps::is_key_not_found(&err), "{err:?}");
    ebpf_masq::bpf::maps::uplink_remove(&dp.pins, 4242).expect("removing an absent uplink");
}

#[test]
fn veth_arp_and_ipv6_link_local_pass() {
    let dp = veth_node();
    let ll: Ipv6Addr = "fe80::1234".parse().unwrap();
    for frame in [arp(POD, Ipv4Addr::new(10, 1, 0, 1)), ipv6_udp(ll, "ff02::fb".parse().unwrap())] {
        expect_untouched(dp.veth(&frame), &frame);
    }
    assert_eq!(dp.total_drops(), 0);
    // An unregistered global IPv6 source is not.
    dp.veth(&ipv6_udp("fd00::99".parse().unwrap(), "2001:db8::1".parse().unwrap())).dropped();
    assert_eq!(dp.drops(drop::SPOOFED_SOURCE), 1);
}

// ---- found while writing these ----

/// A pod answering a ping from a remote that reached it directly (routed pod
/// CIDR, outside the exclusions) sends an echo *reply* to a masqueraded
/// destination: no flow of ours to map it to, and it must not leave with the
/// pod's address either, so it is dropped and counted.
#[test]
fn pod_echo_reply_to_masqueraded_destination_is_dropped() {
    let dp = node();
    dp.egress(&echo_reply(POD, REMOTE, 0x4242, 3)).dropped();
    assert_eq!(dp.drops(drop::UNSUPPORTED_PROTO), 1);
    assert!(dp.nat_is_empty());
    // To an excluded destination it is not ours: untouched.
    let to_native = echo_reply(POD, NATIVE_DST, 0x4242, 3);
    expect_untouched(dp.egress(&to_native), &to_native);
}
