//! The busy endpoint's port search, through the real pinned uplink program with BPF_PROG_TEST_RUN:
//! a port search towards a busy remote endpoint finds a free or reusable port
//! whenever the range has one (the endpoint's nat_hot bitmap), over ranges far
//! wider than the old search's bounded sweep (1,024 ports); a flow is refused only
//! when every port towards that endpoint is held by an unfinished pair, and such a
//! refusal costs no probe. RFC 6888 REQ-4's premise (a NAT hands out every port it
//! has) and RFC 4787 REQ-3 (ports come from the range, never outside it).
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use ebpf_masq::bpf::abi::counter;
use ebpf_masq::bpf::nat_hot::{self, Released};
use ebpf_masq::bpf::{port_counts, refusals};
use crate::support::{clock::monotonic_ago, harness::*, node::*, packet::*, packet6::*};

/// 4,096 ports: four times the old sweep, so a search bounded by it missed the last ones.
const LO_PORT: u16 = 20000;
const HI_PORT: u16 = 24095;
/// The pod ports of the pairs put in by hand (outside portRange).
const POD_PORT0: u16 = 30000;
/// The TCP timeout while a test waits for the sweep to expire a pair: a pair can
/// look idle no longer than the machine has been up (support/clock.rs).
const SHORT_TIMEOUT_S: u32 = 60;

fn node() -> Dataplane {
    let dp = pods_node_sized(16_384); // room for a pair on every port
    dp.set_config(LO_PORT, HI_PORT, 3600);
    dp
}

/// An established, answered TCP pair POD:(POD_PORT0 + i) -> REMOTE:443 on node port
/// LO_PORT + i, as the plugin's own writes (adoption) would leave it.
fn put_open_pair(dp: &Dataplane, i: u16, last_seen_ns: u64) {
    let (port, pod_port) = (LO_PORT + i, POD_PORT0 + i);
    let fk = nat_key(POD, REMOTE, pod_port, 443, TCP);
    let rk = reverse_key(&fk, MASQ, port);
    let mut fe = nat_entry(MASQ, port, last_seen_ns);
    let mut re = nat_entry(POD, pod_port, last_seen_ns);
    fe.packets = 3;
    re.packets = 2;
    dp.put_rev(&rk, re);
    dp.put_fwd(&fk, fe);
}

/// The node port a new flow from POD2:`sport` to REMOTE:443 got (it must leave
/// masqueraded); the remote answers it, so the pair is established, not a SYN left unanswered.
#[track_caller]
fn mapped(dp: &Dataplane, sport: u16) -> u16 {
    let s = summary(&dp.egress(&tcp(POD2, REMOTE, sport, 443, SYN)).passed());
    assert_eq!(s.src, MASQ);
    assert!((LO_PORT..=HI_PORT).contains(&s.sport), "port {} outside portRange", s.sport);
    dp.ingress(&tcp(REMOTE, MASQ, 443, s.sport, SYN | ACK)).passed();
    s.sport
}

#[test]
fn a_busy_endpoint_gives_its_last_free_port_and_refuses_only_when_none_is_left() {
    let dp = node();
    // The pair that expires below, idle past SHORT_TIMEOUT_S: stamped first, as right
    // after a boot this waits until the clock has passed it, and the others must not age meanwhile.
    let expired = monotonic_ago(Duration::from_secs(u64::from(SHORT_TIMEOUT_S) + 1));
    let now = monotonic_ns();
    let free = 3333; // offset of the one port left free
    for i in 0..=(HI_PORT - LO_PORT) {
        if i != free {
            put_open_pair(&dp, i, now);
        }
    }
    // The cheap tries (32 random ports) find nothing: the endpoint's bitmap is made by
    // one scan of the range, and gives the last free port.
    assert_eq!(mapped(&dp, 40000), LO_PORT + free);
    assert_eq!((dp.counter(counter::NAT_HOT_SCANS), dp.counter(counter::NAT_HOT_FOUND)), (1, 1));
    assert_eq!(dp.assert_pairs_complete(), 4096);

    // Every port held by an open pair: refused, and at no cost: the bitmap says so
    // without a probe (a rescan comes at most once a second).
    let probes = dp.counter(counter::PORT_PROBES);
    dp.egress(&tcp(POD2, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::ALLOC_FAIL)), (1, 1));
    assert_eq!(dp.counter(counter::PORT_PROBES) - probes, 0, "a refusal probes nothing");

    // A pair's close completes (the pod closes first): its port's bit goes with the
    // close, and once its last ACK has settled (NAT_SETTLE_NS, 10 ms) the next new flow
    // gets that port, without a scan.
    let (k, s, r) = (77u16, 0x1000_0000u32, 0x7000_0000u32);
    let fin = |seq: u32| seq.wrapping_add(TCP_PAYLOAD_LEN + 1);
    let pod_port = POD_PORT0 + k;
    dp.egress(&tcp_seq(POD, REMOTE, pod_port, 443, FIN | ACK, s, r)).passed();
    dp.ingress(&tcp_seq(REMOTE, MASQ, 443, LO_PORT + k, FIN | ACK, r, fin(s))).passed();
    dp.egress(&tcp_seq(POD, REMOTE, pod_port, 443, ACK, fin(s), fin(r))).passed();
    std::thread::sleep(Duration::from_millis(40)); // the settle, and a coarse-clock tick
    assert_eq!(mapped(&dp, 40002), LO_PORT + k);
    assert_eq!(dp.counter(counter::NAT_FINISHED_REUSED), 1);
    let scans = dp.counter(counter::NAT_HOT_SCANS);
    assert!(scans <= 2, "{scans} scans"); // 2 only if a second passed since the first (a slow machine)

    // A pair past its timeout: the expiry sweep removes it and clears its bit; the
    // next new flow finds the port through the bitmap (no rescan needed). The timeout
    // is short for this step only; the other pairs, stamped at the start, stay well within it.
    let others_idle = Duration::from_nanos(monotonic_ns() - now);
    assert!(others_idle.as_secs() < u64::from(SHORT_TIMEOUT_S) / 2, "{others_idle:?} in: the others would expire too");
    dp.set_config(LO_PORT, HI_PORT, SHORT_TIMEOUT_S);
    let j = 1234u16;
    put_open_pair(&dp, j, expired);
    let rk = reverse_key(&nat_key(POD, REMOTE, POD_PORT0 + j, 443, TCP), MASQ, LO_PORT + j);
    let t0 = Instant::now();
    while dp.get_rev(&rk).is_some() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the sweep never removed the expired pair");
        std::thread::sleep(Duration::from_millis(50));
    }
    dp.set_config(LO_PORT, HI_PORT, 3600);
    let scans = dp.counter(counter::NAT_HOT_SCANS);
    assert_eq!(mapped(&dp, 40003), LO_PORT + j);
    assert_eq!(dp.counter(counter::NAT_HOT_SCANS), scans, "found through the bitmap, not by a rescan");

    // A pair the plugin removes itself (a pod's DEL flushes its pairs from user space)
    // leaves its bit set: a search that finds nothing makes the bitmap again from the
    // tables, at most once a second, and gets the port then.
    let m = 2000u16;
    let fk = nat_key(POD, REMOTE, POD_PORT0 + m, 443, TCP);
    dp.del_rev(&reverse_key(&fk, MASQ, LO_PORT + m));
    dp.del_fwd(&fk);
    std::thread::sleep(Duration::from_millis(1100));
    let scans = dp.counter(counter::NAT_HOT_SCANS);
    assert_eq!(mapped(&dp, 40004), LO_PORT + m);
    assert_eq!(dp.counter(counter::NAT_HOT_SCANS), scans + 1);
    assert_eq!(dp.assert_pairs_complete(), 4096);
    assert_eq!(dp.total_drops(), 1, "only the flow that came when every port was held");
}

#[test]
fn ipv6_every_port_of_a_wide_range_is_handed_out_then_refusals_cost_nothing() {
    // Made by the program itself this time: answered flows towards one remote endpoint
    // take every port of a 2,048-port range, none refused for want of a port on the
    // way (the old search missed the last ports about half the time: 128 random tries
    // and a 1,024-port sweep). One source alone is held to 2,048 - 2,048/16 + 1
    // ports (fair shares: the last sixteenth is kept for sources holding less); a
    // second source takes the rest; then a flow is refused only for want of a port.
    let dp = Dataplane::new();
    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (masq, pod, pod2, remote) =
        (a("2001:db8:ffff::1"), a("fd00:10:1::5"), a("fd00:10:1::7"), a("2001:db8:100::10"));
    dp.add_uplink6(LO, Some(MASQ), masq);
    dp.add_pod6(pod, 7, true);
    dp.add_pod6(pod2, 8, true);
    dp.set_config(20000, 22047, 3600);
    let mut got = std::collections::BTreeSet::new();
    let mut take = |src: Ipv6Addr, i: u16| -> bool {
        let run = dp.egress(&tcp6(src, remote, 30000 + i, 443, SYN));
        if run.ret == TC_ACT_SHOT {
            return false;
        }
        let s = summary6(&run.passed());
        assert_eq!(s.src, masq);
        assert!((20000..=22047).contains(&s.sport), "port {} outside portRange", s.sport);
        assert!(got.insert(s.sport), "port {} handed out twice", s.sport);
        dp.ingress(&tcp6(remote, masq, 443, s.sport, SYN | ACK)).passed();
        true
    };
    let first = (0..2048u16).take_while(|&i| take(pod, i)).count();
    assert_eq!(first, 2048 - 2048 / 16 + 1, "one source alone stops short of the last sixteenth");
    assert_eq!((dp.drops(drop::OVER_SHARE), dp.drops(drop::NO_PORT)), (1, 0));
    let second = (0..2048u16).take_while(|&i| take(pod2, i)).count();
    assert_eq!(first + second, 2048, "every port handed out");
    assert_eq!((dp.drops(drop::OVER_SHARE), dp.drops(drop::NO_PORT)), (1, 1));
    assert!(dp.counter(counter::NAT_HOT_SCANS) >= 1);
    let probes = dp.counter(counter::PORT_PROBES);
    dp.egress(&tcp6(pod, remote, 40000, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 2, "none free: for want of a port, whoever asks");
    // The pod's own port 40000 is outside the range and it has no binding there: no
    // preferred try either; the bitmap has no clear bit (a rescan, if a second passed,
    // finds the same): not one probe.
    assert_eq!(dp.counter(counter::PORT_PROBES) - probes, 0, "a refusal probes nothing");
    // Counted per source, for status, metrics and explain.
    let r = |x: Ipv6Addr| refusals::of(&dp.pins, &[x.into()]).unwrap();
    assert_eq!((r(pod).over_share, r(pod).no_port, r(pod2).over_share, r(pod2).no_port), (1, 1, 0, 1));
}

/// RFC 6888 REQ-4 (a NAT limits the ports one subscriber holds): a greedy pod that
/// holds most of the ports towards one remote endpoint is refused once they run
/// short, while its neighbour's new flows to the same endpoint all get a port; the
/// greedy pod gets ports again once it holds less.
#[test]
fn a_greedy_source_is_refused_its_last_ports_while_a_neighbour_gets_them() {
    let dp = node(); // 4,096 ports: short below 256 free
    // The greedy pod holds every port (established, answered pairs): its next flow is refused
    // for want of a port, and the endpoint gets its bitmap (a full scan counts who holds what).
    let now = monotonic_ns();
    for i in 0..4096u16 {
        put_open_pair(&dp, i, now);
    }
    dp.egress(&tcp(POD, REMOTE, 40000, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::NO_PORT), dp.counter(counter::NAT_HOT_SCANS)), (1, 1));
    // 200 of its pairs end (removed as a DEL removes them): 200 ports free, fewer than
    // a sixteenth. It holds more than its share (4,096 / 2): refused while short.
    let give_back = |range: std::ops::Range<u16>| {
        let released: Vec<Released> = range
            .map(|i| {
                let fk = nat_key(POD, REMOTE, POD_PORT0 + i, 443, TCP);
                dp.del_rev(&reverse_key(&fk, MASQ, LO_PORT + i));
                dp.del_fwd(&fk);
                Released {
                    remote: REMOTE.into(), rport: 443, nat: MASQ.into(), nport: LO_PORT + i, proto: TCP,
                    source: POD.into(),
                }
            })
            .collect();
        nat_hot::release(&dp.pins, &released).unwrap();
    };
    give_back(3896..4096);
    dp.egress(&tcp(POD, REMOTE, 40001, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::OVER_SHARE), 1);
    // The neighbour's 150 new flows all get a port (its share: 4,096 / 3).
    for i in 0..150u16 {
        let out = dp.egress(&tcp(POD2, REMOTE, 41000 + i, 443, SYN)).passed();
        assert!((LO_PORT..=HI_PORT).contains(&summary(&out).sport));
    }
    dp.egress(&tcp(POD, REMOTE, 40002, 443, SYN)).dropped();
    assert_eq!((dp.drops(drop::OVER_SHARE), dp.drops(drop::NO_PORT)), (2, 1));
    // Most of the greedy pod's pairs end: the ports are no longer short, it gets one at once.
    give_back(0..3000);
    dp.egress(&tcp(POD, REMOTE, 40003, 443, SYN)).passed();
    let r = |x: Ipv4Addr| refusals::of(&dp.pins, &[x.into()]).unwrap();
    assert_eq!((r(POD).over_share, r(POD).no_port, r(POD2).over_share, r(POD2).no_port), (2, 1, 0, 0));
    refusals::forget(&dp.pins, &[POD.into()]).unwrap();
    assert_eq!(r(POD).over_share, 0, "a DEL forgets the pod's refusals");
}

/// RFC 6888 REQ-4's configurable limit (podPortLimit, ebpf-masq.io/port-limit): a pod
/// with a port limit holds at most that many ports towards one remote endpoint, wherever
/// the endpoint's ports stand (here almost all free); its flows elsewhere, and its
/// neighbour's, are not touched; a pair it ends gives one back. Exact at the limit:
/// the endpoint's record is made and scanned only when the pod's bound reaches it.
#[test]
fn a_pod_at_its_port_limit_is_refused_there_and_only_there() {
    const LIMITED: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 9);
    const OTHER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
    let dp = node(); // 4,096 ports
    dp.add_pod_limited(LIMITED.into(), 9, 100);
    let connect = |src: Ipv4Addr, dst: Ipv4Addr, sport: u16| -> Option<u16> {
        let run = dp.egress(&tcp(src, dst, sport, 443, SYN));
        if run.ret == TC_ACT_SHOT {
            return None;
        }
        let s = summary(&run.passed());
        assert_eq!(s.src, MASQ);
        dp.ingress(&tcp(dst, MASQ, 443, s.sport, SYN | ACK)).passed();
        Some(s.sport)
    };
    let got = (0..150u16).take_while(|&i| connect(LIMITED, REMOTE, 40000 + i).is_some()).count();
    assert_eq!(got, 100, "the limit, exactly");
    assert_eq!((dp.drops(drop::OVER_LIMIT), dp.drops(drop::NO_PORT), dp.drops(drop::OVER_SHARE)), (1, 0, 0));
    assert_eq!(dp.counter(counter::NAT_HOT_SCANS), 1, "the record is made at the limit, once");
    assert!(connect(LIMITED, REMOTE, 40200).is_none(), "still at it");
    // Another remote endpoint is another count: 100 more there, then refused too.
    let other = (0..150u16).take_while(|&i| connect(LIMITED, OTHER, 41000 + i).is_some()).count();
    assert_eq!(other, 100);
    // The neighbour (no limit) is not touched towards the same endpoint.
    for i in 0..150u16 {
        assert!(connect(POD2, REMOTE, 42000 + i).is_some(), "neighbour refused");
    }
    assert_eq!(dp.drops(drop::OVER_LIMIT), 3);
    // The pod resets 10 of its connections to REMOTE: 10 ports back, exactly.
    for i in 0..10u16 {
        dp.egress(&tcp(LIMITED, REMOTE, 40000 + i, 443, RST | ACK)).passed();
    }
    let again = (0..50u16).take_while(|&i| connect(LIMITED, REMOTE, 43000 + i).is_some()).count();
    assert_eq!(again, 10, "a pair ended gives its port back to the limit");
    assert_eq!(dp.drops(drop::OVER_LIMIT), 4);
    let r = refusals::of(&dp.pins, &[LIMITED.into()]).unwrap();
    assert_eq!((r.over_limit, r.over_share, r.no_port), (4, 0, 0));
    let r2 = refusals::of(&dp.pins, &[POD2.into()]).unwrap();
    assert_eq!(r2.over_limit, 0);
    // A DEL forgets the pod's bounds (one per remote endpoint it went to), none of the neighbour's.
    assert_eq!(port_counts::forget(&dp.pins, &[POD2.into()]).unwrap(), 0);
    assert_eq!(port_counts::forget(&dp.pins, &[LIMITED.into()]).unwrap(), 2);
}

/// The same limit for an IPv6 pod (its own template instance), over UDP: flows
/// (pod port, remote endpoint) hold a port each; at the limit the next is refused.
#[test]
fn ipv6_a_pod_at_its_port_limit_is_refused() {
    let dp = Dataplane::new();
    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (masq, pod, remote) = (a("2001:db8:ffff::1"), a("fd00:10:1::9"), a("2001:db8:100::10"));
    dp.add_uplink6(LO, Some(MASQ), masq);
    dp.add_pod_limited(pod.into(), 9, 40);
    dp.set_config(20000, 22047, 3600);
    let got = (0..100u16)
        .take_while(|&i| dp.egress(&udp6(pod, remote, 30000 + i, 53)).ret != TC_ACT_SHOT)
        .count();
    assert_eq!(got, 40);
    assert_eq!((dp.drops(drop::OVER_LIMIT), dp.drops(drop::NO_PORT)), (1, 0));
    // TCP to the same address and port is another endpoint (the protocol is part of it).
    assert!(dp.egress(&tcp6(pod, remote, 31000, 53, SYN)).ret != TC_ACT_SHOT);
    assert_eq!(refusals::of(&dp.pins, &[pod.into()]).unwrap().over_limit, 1);
}
