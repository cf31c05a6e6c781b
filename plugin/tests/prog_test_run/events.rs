//! The data plane's events (docs/monitor.md) through the real pinned programs,
//! with BPF_PROG_TEST_RUN: a new flow's pair_made with its tuple (IPv4, IPv6) while the ring's
//! lease runs, nothing once it ran out, the log and live rings each served, a
//! refusal's event, a taken-over pair's end before its successor's start, the
//! sweep's ends (expired, closed) with their counts, and a full ring's losses
//! counted. Needs root and a bpffs at /sys/fs/bpf.

use std::{net::SocketAddr, time::Duration};

use aya::maps::{MapData, RingBuf};
use ebpf_masq::bpf::{
    abi::{self, counter},
    events::{ktime_now, EndReason, Event, Kind, Leases, Reader, Ring},
    maps,
};

use crate::support::{harness::*, node::*, packet::*, packet6::*};

fn sa(a: std::net::Ipv4Addr, p: u16) -> Option<SocketAddr> {
    Some(SocketAddr::new(a.into(), p))
}

/// Everything in `ring` now, read without a lease of our own.
fn drain(dp: &Dataplane, ring: &str) -> Vec<Event> {
    let mut buf: RingBuf<MapData> = maps::pinned(&dp.pins, ring).unwrap();
    let mut out = Vec::new();
    while let Some(item) = buf.next() {
        out.push(Event::decode(&item).expect("a record the reader knows"));
    }
    out
}

#[test]
fn a_new_flow_tells_its_pair_while_the_lease_runs() {
    let dp = pods_node();
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    let out = dp.egress(&udp(POD, REMOTE, 40000, 3478)).passed();
    let port = summary(&out).sport;
    let ev = r.read(Duration::ZERO).unwrap();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let e = &ev[0];
    assert_eq!((e.kind, e.proto), (Kind::PairMade, 17));
    assert_eq!((e.pod, e.node, e.remote), (sa(POD, 40000), sa(MASQ, port), sa(REMOTE, 3478)));
    assert!(e.start_ns.unwrap() > 0 && e.ktime_ns >= e.start_ns.unwrap());
    // Its packets: established, no event; the log ring, with no lease, got nothing.
    dp.egress(&udp(POD, REMOTE, 40000, 3478)).passed();
    assert!(r.read(Duration::ZERO).unwrap().is_empty());
    assert!(drain(&dp, abi::MAP_EVENTS_LOG).is_empty());
    assert_eq!(dp.counter(counter::EVENTS_LOST), 0);
}

#[test]
fn an_ipv6_pair_is_told_with_its_16_byte_addresses() {
    let dp = Dataplane::new();
    dp.add_uplink6(LO, Some(MASQ), masq6());
    dp.add_pod6(pod6(), VETH, true);
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    let port = summary6(&dp.egress(&tcp6(pod6(), remote6(), 40000, 443, SYN)).passed()).sport;
    let ev = r.read(Duration::ZERO).unwrap();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let e = &ev[0];
    let sa6 = |a: std::net::Ipv6Addr, p: u16| Some(SocketAddr::new(a.into(), p));
    assert_eq!((e.kind, e.proto), (Kind::PairMade, 6));
    assert_eq!((e.pod, e.node, e.remote), (sa6(pod6(), 40000), sa6(masq6(), port), sa6(remote6(), 443)));
}

#[test]
fn a_pair_that_natfiltering_admits_is_told_too() {
    let dp = pods_node();
    dp.set_pod_filtering(POD, abi::NAT_FILTER_EI);
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    let p = summary(&dp.egress(&udp(POD, REMOTE, 40000, 3478)).passed()).sport;
    // Someone the pod never sent to: let in on a pair of its own, made by the ingress program.
    assert_eq!(dp.ingress(&udp(REMOTE2, MASQ, 9999, p)).passed(), udp(REMOTE2, POD, 9999, 40000));
    let ev = r.read(Duration::ZERO).unwrap();
    let made: Vec<_> = ev.iter().filter(|e| e.kind == Kind::PairMade).map(|e| (e.pod, e.node, e.remote)).collect();
    assert_eq!(
        made,
        [(sa(POD, 40000), sa(MASQ, p), sa(REMOTE, 3478)), (sa(POD, 40000), sa(MASQ, p), sa(REMOTE2, 9999))],
        "{ev:?}"
    );
}

#[test]
fn an_expired_or_cleared_lease_emits_nothing() {
    let dp = pods_node();
    let mut leases = Leases::pinned(&dp.pins).unwrap();
    // Never taken: nothing.
    dp.egress(&udp(POD, REMOTE, 40000, 3478)).passed();
    // Ran out (a reader killed a while ago).
    leases.set(Ring::Live, ktime_now() - 1);
    leases.set(Ring::Log, ktime_now() - 1);
    dp.egress(&udp(POD, REMOTE, 40001, 3478)).passed();
    dp.veth(&tcp(STRANGER, REMOTE, 40000, 443, SYN)).dropped();
    assert!(drain(&dp, abi::MAP_EVENTS_LIVE).is_empty());
    assert!(drain(&dp, abi::MAP_EVENTS_LOG).is_empty());
    // A reader that closes clears its lease at once.
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    r.close();
    assert_eq!(leases.get().live_until, 0);
    dp.egress(&udp(POD, REMOTE, 40002, 3478)).passed();
    assert!(drain(&dp, abi::MAP_EVENTS_LIVE).is_empty());
    // Dropped too: the lease goes with the reader.
    let r = Reader::new(&dp.pins, Ring::Log).unwrap();
    assert!(leases.get().log_until > ktime_now());
    drop(r);
    assert_eq!(leases.get().log_until, 0);
}

#[test]
fn two_readers_never_undo_each_others_lease() {
    // The exporter and monitor renew and clear their own leases at any moment:
    // each stores only its own fields (the map is mmapped), so a reader closing
    // while the other renews leaves the other's lease running, and the programs
    // see both. (With a read-modify-write of the whole value the one closing
    // could write the other's older lease back, or the renewal its cleared one.)
    let dp = pods_node();
    let leases = Leases::pinned(&dp.pins).unwrap();
    let mut log = Reader::new(&dp.pins, Ring::Log).unwrap();
    log.log_counts(12, 3);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flapper = {
        let (pins, stop) = (dp.pins.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut n, mut undone) = (0u32, 0u32);
            let seen = Leases::pinned(&pins).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut live = Reader::new(&pins, Ring::Live).unwrap();
                live.close();
                n += 1;
                // Nobody else holds the live lease: once cleared it must stay cleared
                // while the exporter renews its own beside it.
                for _ in 0..50 {
                    undone += u32::from(seen.get().live_until != 0);
                }
            }
            (n, undone)
        })
    };
    let mut writes = 0u32;
    let until = std::time::Instant::now() + Duration::from_millis(1000);
    while std::time::Instant::now() < until {
        let mut l = Leases::pinned(&dp.pins).unwrap();
        l.hold(Ring::Log, ktime_now() + abi::EVENTS_LEASE_NS);
        writes += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (flaps, undone) = flapper.join().unwrap();
    assert!(flaps > 100 && writes > 100, "{flaps} monitor opens/closes beside {writes} exporter renewals");
    assert_eq!(undone, 0, "a cleared live lease was seen running again {undone} times ({flaps} closes)");
    let c = leases.get();
    assert!(c.log_until > ktime_now(), "the exporter's lease survived the monitor's flapping: {c:?}");
    assert_eq!((c.live_until, c.live_pid), (0, 0), "{c:?}");
    assert_eq!((c.log_pid, c.log_records, c.log_ipfix_unsent), (std::process::id(), 12, 3), "{c:?}");
    // The programs read the same value: a pair made now goes to the log ring only.
    dp.egress(&udp(POD, REMOTE, 40100, 3478)).passed();
    assert_eq!(log.read(Duration::ZERO).unwrap().len(), 1);
    assert!(drain(&dp, abi::MAP_EVENTS_LIVE).is_empty());
}

#[test]
fn both_rings_get_every_event_and_a_drop_names_its_reason() {
    let dp = pods_node();
    let mut log = Reader::new(&dp.pins, Ring::Log).unwrap();
    let mut live = Reader::new(&dp.pins, Ring::Live).unwrap();
    dp.egress(&tcp(POD, REMOTE, 40000, 443, SYN)).passed();
    dp.veth(&tcp(STRANGER, REMOTE, 40000, 443, SYN)).dropped();
    for r in [&mut log, &mut live] {
        let ev = r.read(Duration::ZERO).unwrap();
        let kinds: Vec<Kind> = ev.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::PairMade, Kind::Drop], "{ev:?}");
        let d = &ev[1];
        assert_eq!(d.drop_reason, Some(abi::drop_reason::SPOOFED_SOURCE));
        // The packet as it was dropped, and the veth it was dropped on (the pod, whatever source it spoofed).
        assert_eq!((d.proto, d.pod, d.remote, d.node), (6, sa(STRANGER, 40000), sa(REMOTE, 443), None), "{d:?}");
        assert_eq!((d.ifindex, d.from_outside()), (LO, false));
    }
}

#[test]
fn a_drop_tells_its_packet_v6_and_an_echos_id() {
    let dp = Dataplane::new();
    dp.add_uplink6(LO, Some(MASQ), masq6());
    dp.add_pod6(pod6(), VETH, true);
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    // An echo reply from the pod to a remote that never pinged it through us: it must not leave.
    dp.egress(&echo6_reply(pod6(), remote6(), 777, 1)).dropped();
    let ev = r.read(Duration::ZERO).unwrap();
    assert_eq!(ev.len(), 1, "{ev:?}");
    let d = &ev[0];
    let sa6 = |a: std::net::Ipv6Addr, p: u16| Some(SocketAddr::new(a.into(), p));
    assert_eq!((d.kind, d.drop_reason), (Kind::Drop, Some(abi::drop_reason::UNSUPPORTED_PROTO)));
    assert_eq!((d.proto, d.pod, d.remote), (58, sa6(pod6(), 777), sa6(remote6(), 0)), "{d:?}");
}

#[test]
fn a_refusal_and_a_taken_over_pair_are_told() {
    let dp = pods_node();
    dp.set_timeouts(20000, 20001, 3600, 1, 3600);
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    // Two ports towards one remote endpoint: the third flow is refused.
    dp.egress(&udp(POD, REMOTE, 40000, 53)).passed();
    dp.egress(&udp(POD2, REMOTE, 40000, 53)).passed();
    dp.egress(&udp(POD, REMOTE, 40001, 53)).dropped();
    let ev = r.read(Duration::ZERO).unwrap();
    let kinds: Vec<Kind> = ev.iter().map(|e| e.kind).collect();
    // The refused flow's packet is dropped too, and told as such.
    assert_eq!(kinds, [Kind::PairMade, Kind::PairMade, Kind::RefusedNoPort, Kind::Drop], "{ev:?}");
    assert_eq!(ev[3].drop_reason, Some(abi::drop_reason::NO_PORT));
    assert_eq!((ev[3].proto, ev[3].pod, ev[3].remote), (17, sa(POD, 40001), sa(REMOTE, 53)), "the refused packet");
    assert_eq!((ev[2].pod, ev[2].remote), (sa(POD, 40001), sa(REMOTE, 53)));
    assert_eq!(ev[2].node.map(|n| n.port()), Some(0), "a refusal has no node port");
    // A TCP pair reset and quiet past 2 s gives its port to the next flow: its end, then the new pair.
    let dp2 = pods_node();
    dp2.set_timeouts(20000, 20000, 3600, 3600, 3600);
    let mut r2 = Reader::new(&dp2.pins, Ring::Live).unwrap();
    let out = dp2.egress(&tcp(POD, REMOTE, 40000, 443, SYN)).passed();
    assert_eq!(summary(&out).sport, 20000);
    dp2.egress(&tcp(POD, REMOTE, 40000, 443, RST)).passed();
    std::thread::sleep(Duration::from_millis(2200));
    dp2.egress(&tcp(POD2, REMOTE, 40000, 443, SYN)).passed();
    let ev = r2.read(Duration::ZERO).unwrap();
    let kinds: Vec<Kind> = ev.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [Kind::PairMade, Kind::PairEnded, Kind::PairMade], "{ev:?}");
    let end = &ev[1];
    assert_eq!((end.end, end.pod, end.node), (Some(EndReason::TakenOver), sa(POD, 40000), sa(MASQ, 20000)));
    assert!(end.out.0 >= 1 && end.r#in.0 == 0, "{end:?}");
    assert_eq!(end.start_ns, ev[0].start_ns);
    assert_eq!((ev[2].pod, ev[2].node), (sa(POD2, 40000), sa(MASQ, 20000)));
}

#[test]
fn the_sweep_tells_a_pair_expired_or_closed_with_its_counts() {
    let dp = pods_node();
    dp.set_timeouts(20000, 20099, 3600, 1, 1);
    let mut r = Reader::new(&dp.pins, Ring::Live).unwrap();
    let port = summary(&dp.egress(&udp(POD, REMOTE, 40000, 53)).passed()).sport;
    dp.ingress(&udp(REMOTE, MASQ, 53, port)).passed();
    let tport = summary(&dp.egress(&tcp(POD, REMOTE, 40001, 443, SYN)).passed()).sport;
    dp.egress(&tcp(POD, REMOTE, 40001, 443, RST)).passed();
    // Both idle past their 1 s timeouts: the sweep (about once a second) removes them.
    let mut ended = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ended.len() < 2 && std::time::Instant::now() < deadline {
        ended.extend(r.read(Duration::from_millis(200)).unwrap().into_iter().filter(|e| e.kind == Kind::PairEnded));
    }
    ended.sort_by_key(|e| e.proto);
    assert_eq!(
        ended.len(),
        2,
        "{ended:?}; pairs {:?}; sweep {:?}; arming failed {} times",
        dp.fwd(),
        dp.nat_gc(),
        dp.counter(counter::NAT_GC_ARM_FAILED)
    );
    let (tcp_end, udp_end) = (&ended[0], &ended[1]);
    assert_eq!((udp_end.end, udp_end.pod, udp_end.node), (Some(EndReason::Expired), sa(POD, 40000), sa(MASQ, port)));
    assert!(udp_end.out.0 >= 1 && udp_end.r#in == (1, udp_end.r#in.1) && udp_end.r#in.1 > 0, "{udp_end:?}");
    assert_eq!((tcp_end.end, tcp_end.pod, tcp_end.node), (Some(EndReason::Closed), sa(POD, 40001), sa(MASQ, tport)));
    assert!(tcp_end.start_ns.unwrap() < tcp_end.ktime_ns);
}

#[test]
fn a_full_ring_counts_what_it_lost() {
    let dp = pods_node();
    let _r = Reader::new(&dp.pins, Ring::Live).unwrap();
    // 1 MiB holds ~8,700 records of 112 bytes (and an 8-byte header): drops fill it, unread.
    let frame = tcp(STRANGER, REMOTE, 40000, 443, SYN);
    let n = 10_000u64;
    for _ in 0..n {
        dp.veth(&frame).dropped();
    }
    let lost = dp.counter(counter::EVENTS_LOST);
    let kept = drain(&dp, abi::MAP_EVENTS_LIVE).len() as u64;
    assert!(lost > 0, "nothing lost ({kept} kept)");
    assert_eq!(kept + lost, n, "every event kept or counted lost");
    assert_eq!(kept, u64::from(abi::EVENTS_LIVE_RING_BYTES) / (112 + 8));
}

/// What the events cost a new flow (kernel-measured BPF_PROG_TEST_RUN, median of
/// single runs): no reader (the gate alone) against a live lease (each new pair
/// written to events_live, drained as it goes). Not a test: run by hand,
/// `cargo test --release --test prog_test_run -- events::cost --ignored --nocapture`.
#[test]
#[ignore]
fn cost_of_a_new_flow_with_and_without_a_reader() {
    let dp = pods_node();
    dp.set_config(1024, 65535, 3600);
    let median = |dp: &Dataplane, base: u16, r: &mut Option<Reader>| {
        let mut ns: Vec<u64> = (0..1000u16)
            .map(|i| {
                let (ret, t) = dp.timed("egress", &udp(POD, REMOTE, 1024 + (i % 60000), base + i));
                assert_eq!(ret, -1);
                if let Some(r) = r.as_mut() {
                    r.read(Duration::ZERO).unwrap();
                }
                t
            })
            .collect();
        ns.sort();
        ns[ns.len() / 2]
    };
    let off = median(&dp, 10000, &mut None);
    let mut reader = Some(Reader::new(&dp.pins, Ring::Live).unwrap());
    let on = median(&dp, 20000, &mut reader);
    drop(reader.take()); // clears the lease
    let off_again = median(&dp, 30000, &mut None);
    println!("new flow: no reader {off} ns, live lease {on} ns, no reader again {off_again} ns");
}
