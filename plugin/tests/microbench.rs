//! Micro-benchmarks of the data-plane programs, run with BPF_PROG_TEST_RUN on
//! crafted packets (no traffic, no interfaces): what one packet costs on each
//! path, as the kernel measures the program run. Not a test: ignored by default,
//! run by `scripts/bench.sh --micro`:
//!
//!   cargo test --release --test microbench -- --ignored --nocapture --test-threads=1
//!
//! Every run is a single BPF_PROG_TEST_RUN (a repeated run would see its own
//! rewritten packet), so each figure carries the test-run frame's fixed cost,
//! shown on the first line ("baseline": a frame the program leaves at once) —
//! read the others relative to it.

// The BPF_PROG_TEST_RUN binary's support, shared (this binary stays apart: bench.sh runs it by name).
#[path = "prog_test_run/support/mod.rs"]
mod support;

use std::net::Ipv4Addr;

use ebpf_masq::bpf::abi::{counter, drop_reason, EXCL_NATIVE_ROUTING};
use ebpf_masq::bpf::nat_hot::{self, Released};
use support::node::{MASQ, NATIVE_DST, POD, REMOTE, STRANGER};
use support::{harness::*, packet::*};

const VETH: u32 = 1;
const RUNS: usize = 20_000;

fn node() -> Dataplane {
    let dp = Dataplane::new();
    dp.set_config(1024, 65535, 3600);
    dp.add_uplink(LO, MASQ);
    dp.add_excl(Ipv4Addr::new(10, 0, 0, 0), 8, EXCL_NATIVE_ROUTING);
    dp.add_pod(POD, VETH, true);
    // The pods' subnet, as their registrations teach it: only a source no registered
    // pod owns is looked up there (an unregistered pod's packet is dropped).
    dp.add_pod_net(Ipv4Addr::new(10, 1, 0, 0), 24);
    dp
}

/// Median over 5 batches of the mean kernel-measured ns per run.
fn measure(mut one: impl FnMut(usize) -> u64) -> f64 {
    let mut batches: Vec<f64> = (0..5)
        .map(|b| (0..RUNS).map(|i| one(b * RUNS + i)).sum::<u64>() as f64 / RUNS as f64)
        .collect();
    batches.sort_by(|a, b| a.partial_cmp(b).unwrap());
    batches[2]
}

/// One line per (name, program, frame): the frame's cost on that program.
fn report(dp: &Dataplane, title: &str, cases: &[(&str, &str, Vec<u8>)]) {
    println!("{title:<52} {:>10}", "ns/packet");
    for (name, prog, frame) in cases {
        let ns = measure(|_| dp.timed(prog, frame).1);
        println!("{name:<52} {ns:>10.1}");
    }
}

#[test]
#[ignore = "benchmark: scripts/bench.sh --micro"]
fn per_packet_cost() {
    let dp = node();
    let arp = {
        let mut f = vec![0xffu8; 12];
        f.extend_from_slice(&[0x08, 0x06]);
        f.extend_from_slice(&[0u8; 28]);
        f
    };
    // One established TCP flow and one UDP flow, created before timing.
    let syn = tcp(POD, REMOTE, 40000, 443, SYN);
    dp.egress(&syn).passed();
    let nat_port = u16::from_be_bytes(dp.fwd()[0].1.port);
    dp.egress(&udp(POD, REMOTE, 40001, 53)).passed();
    let udp_port = dp.fwd().iter().find(|(k, _)| k.proto == UDP).map(|(_, e)| u16::from_be_bytes(e.port)).unwrap();

    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("baseline: ARP frame, uplink egress", "egress", arp.clone()),
        ("uplink egress: established TCP ACK (SNAT)", "egress", tcp(POD, REMOTE, 40000, 443, ACK)),
        ("uplink egress: established UDP 64 B (SNAT)", "egress", udp(POD, REMOTE, 40001, 53)),
        ("uplink ingress: TCP ACK reply (reverse NAT)", "ingress", tcp(REMOTE, MASQ, 443, nat_port, ACK)),
        ("uplink ingress: UDP reply (reverse NAT)", "ingress", udp(REMOTE, MASQ, 53, udp_port)),
        ("uplink egress: host's own TCP (pass)", "egress", tcp(MASQ, REMOTE, 50000, 443, ACK)),
        ("uplink ingress: host's own TCP reply (pass)", "ingress", tcp(REMOTE, MASQ, 443, 50000, ACK)),
        ("uplink egress: pod to nativeRoutingCIDR (pass)", "egress", tcp(POD, NATIVE_DST, 40000, 443, ACK)),
        ("pod veth: source check (pass)", "veth", tcp(POD, REMOTE, 40000, 443, ACK)),
        ("pod veth: spoofed source (drop)", "veth", tcp(STRANGER, REMOTE, 40000, 443, ACK)),
        ("uplink egress: unregistered pod-range source (drop)", "egress", tcp(STRANGER, REMOTE, 40000, 443, ACK)),
        ("uplink egress: non-pod source outside the ranges (pass)", "egress", tcp(Ipv4Addr::new(192, 0, 2, 9), REMOTE, 40000, 443, ACK)),
    ];
    report(&dp, "path (IPv4)", &cases);
    let (ns, _) = new_flow_cost(&dp, 0);
    println!("{:<52} {ns:>10.1}", "uplink egress: new UDP flow (allocate, insert pair)");
}

/// A new UDP flow to REMOTE:53 per run (port allocation, both halves inserted),
/// with `in_use` ports of the configured range already taken for that remote
/// endpoint; the pair is removed after each run (untimed), so the table and the
/// range stay as they were. Returns (median ns per new flow, ports tried per new
/// flow). The median of single runs, not a mean: a run here is long enough to
/// be interrupted now and then by the expiry sweep's softirq (a walk of one
/// shard, up to a few hundred µs), which a mean would count as the new flow's.
fn new_flow_cost(dp: &Dataplane, in_use: usize) -> (f64, f64) {
    const RUNS: usize = 10_000;
    let probes0 = dp.counter(counter::PORT_PROBES);
    // The shards opened once: opening them per run (a syscall or two per shard)
    // would leave every timed run with colder caches than the packet path sees.
    let mut fwd = dp.fwd_shards();
    let mut rev = dp.rev_map();
    let mut ns: Vec<u64> = (0..RUNS)
        .map(|i| {
            // Pod ports never used by the prefill (which takes 1..=in_use).
            let sport = 1 + in_use as u16 + (i % 1000) as u16;
            let (ret, t) = dp.timed("egress", &udp(POD, REMOTE, sport, 53));
            let drops = || (0..drop_reason::MAX).map(|r| dp.drops(r)).collect::<Vec<_>>();
            assert_eq!(ret, -1, "new flow {i} not passed with {in_use} ports in use; drops by reason: {:?}", drops());
            let fk = nat_key(POD, REMOTE, sport, 53, UDP);
            let fe = fwd.get(&fk).expect("no forward half");
            let nport = u16::from_be_bytes(fe.port);
            rev.remove(&reverse_key(&fk, MASQ, nport)).unwrap();
            fwd.remove(&fk).unwrap();
            // The port's bit too, if the endpoint has a busy bitmap (one is made when
            // random samples all find ports held): the plugin's removals clear it, and a
            // bit left set would count the range fuller with every run until the pod
            // met its fair share (drop over_share).
            let gone = Released { remote: REMOTE.into(), rport: 53, nat: MASQ.into(), nport, proto: UDP, source: POD.into() };
            nat_hot::release(&dp.pins, &[gone]).unwrap();
            t
        })
        .collect();
    ns.sort_unstable();
    let probes = (dp.counter(counter::PORT_PROBES) - probes0) as f64 / RUNS as f64;
    (ns[RUNS / 2] as f64, probes)
}

/// The scale target: port allocation stays O(1) expected while the range is under 90 %
/// full for one remote endpoint. The cost of a new flow and the ports it tries
/// with 0, 50 and 90 % of the range in use, for a range of 1,000 ports and one
/// of 64,512, at the default natMaxEntries. Also printed as `portalloc {json}`
/// lines, which `scripts/bench.sh` puts in its targets.
#[test]
#[ignore = "benchmark: scripts/bench.sh --micro"]
fn port_allocation_cost() {
    let dp = Dataplane::with_nat_max_entries(ebpf_masq::config::DEFAULT_NAT_MAX_ENTRIES);
    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, VETH, true);
    println!("{:<52} {:>10} {:>10}", "new flow vs the port range in use (one remote)", "ns/flow", "ports tried");
    let mut json = Vec::new();
    for (lo, hi) in [(20_000u16, 20_999u16), (1024, 65535)] {
        let range = usize::from(hi - lo) + 1;
        dp.set_config(lo, hi, 3600);
        // Claims of other flows to REMOTE:53, spread evenly over the range: a stride
        // near range / golden ratio visits it with the free ports left between the
        // claims everywhere, as ports drawn at random leave them (a stride near a
        // simple fraction, e.g. range / 3, would leave them in a few blocks).
        let golden = (range as f64 * 0.618_033_988_7) as usize;
        let stride = (golden..range).find(|s| gcd(*s, range) == 1).unwrap();
        let mut taken = 0usize;
        for fill in [0usize, 50, 90] {
            let want = range * fill / 100;
            while taken < want {
                let port = lo + ((taken * stride) % range) as u16;
                let fk = nat_key(POD, REMOTE, 1 + taken as u16, 53, UDP);
                dp.put_rev(&reverse_key(&fk, MASQ, port), nat_entry(POD, 1 + taken as u16, monotonic_ns()));
                taken += 1;
            }
            let (ns, probes) = new_flow_cost(&dp, taken);
            println!("{:<52} {ns:>10.1} {probes:>10.2}", format!("{range} ports, {fill} % in use"));
            json.push(format!(r#"{{"range":{range},"fill":{fill},"ns":{ns:.1},"probes":{probes:.3}}}"#));
        }
    }
    for j in json {
        println!("portalloc {j}");
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The same paths for IPv6 (dual-stack pod, uplink with both families).
#[test]
#[ignore = "benchmark: scripts/bench.sh --micro"]
fn per_packet_cost_v6() {
    use std::net::Ipv6Addr;
    use support::packet6::*;

    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (masq6, pod6, remote6) = (a("2001:db8:1::1"), a("fd00:1::5"), a("2001:db8:99::10"));
    let dp = node();
    dp.add_uplink6(LO, Some(MASQ), masq6);
    dp.add_pod6(pod6, VETH, true);
    dp.egress(&tcp6(pod6, remote6, 40000, 443, SYN)).passed();
    dp.egress(&udp6(pod6, remote6, 40001, 53)).passed();
    let port_of = |proto: u8| {
        dp.fwd6().iter().find(|(k, _)| k.proto == proto).map(|(_, e)| u16::from_be_bytes(e.port)).unwrap()
    };
    let (tcp_port, udp_port) = (port_of(TCP), port_of(UDP));

    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("uplink egress v6: established TCP ACK (SNAT)", "egress", tcp6(pod6, remote6, 40000, 443, ACK)),
        ("uplink egress v6: established UDP (SNAT)", "egress", udp6(pod6, remote6, 40001, 53)),
        ("uplink ingress v6: TCP ACK reply (reverse NAT)", "ingress", tcp6(remote6, masq6, 443, tcp_port, ACK)),
        ("uplink ingress v6: UDP reply (reverse NAT)", "ingress", udp6(remote6, masq6, 53, udp_port)),
        ("uplink egress v6: host's own TCP (pass)", "egress", tcp6(masq6, remote6, 50000, 443, ACK)),
        ("pod veth v6: source check (pass)", "veth", tcp6(pod6, remote6, 40000, 443, ACK)),
    ];
    report(&dp, "path (IPv6)", &cases);
}

/// The fast path (fastPath: true) in a private netns where bpf_fib_lookup finds
/// a route: the pod's veth program (SNAT, route, redirect) and the reply's
/// (reverse NAT, MACs, redirect to the pod).
#[test]
#[ignore = "benchmark: scripts/bench.sh --micro"]
fn fast_path_per_packet_cost() {
    use ebpf_masq::bpf::abi::{PodL2, POD_L2_F_HAS_MAC};
    use support::lab::in_lab;

    in_lab(1500, |up0, pod0| {
        let dp = node();
        dp.add_uplink(up0, MASQ);
        let l2 = PodL2 { pod_mac: [2, 0xbb, 0, 0, 0, 5], gw_mac: [2, 0xcc, 0, 0, 0, 1], l3_ifindex: LO, flags: POD_L2_F_HAS_MAC };
        dp.set_pod_l2(LO, l2);
        dp.set_fast_path(true);
        let out = dp.veth(&udp(POD, REMOTE, 40001, 53));
        assert_eq!(out.ret, 7, "fast path did not redirect (TC_ACT_REDIRECT)");
        let port = u16::from_be_bytes(dp.fwd()[0].1.port);

        println!("{:<52} {:>10}", "fast path (IPv4)", "ns/packet");
        let ns = measure(|_| dp.timed("veth", &udp(POD, REMOTE, 40001, 53)).1);
        println!("{:<52} {ns:>10.1}", "pod veth: established UDP (SNAT, route, redirect)");
        // The fast path marks what it redirects (cb[0] = FP_CB_MARK): the uplink passes it at once.
        let mut marked = [0u8; SKB_CTX_LEN];
        marked[SKB_CB0..SKB_CB0 + 4].copy_from_slice(&0x6d61_fa57u32.to_ne_bytes());
        let ns = measure(|_| dp.timed_ctx("egress", &udp(MASQ, REMOTE, port, 53), Some(&marked)).1);
        println!("{:<52} {ns:>10.1}", "uplink egress: the redirected packet (pass)");
        // The reply's redirect target must be a real device: the pod moves behind pod0.
        dp.add_pod(POD, pod0, true);
        dp.set_pod_l2(pod0, PodL2 { l3_ifindex: pod0, ..l2 });
        let reply = udp(REMOTE, MASQ, 53, port);
        assert_eq!(dp.ingress(&reply).ret, 7, "reply not redirected");
        let ns = measure(|_| dp.timed("ingress", &reply).1);
        println!("{:<52} {ns:>10.1}", "uplink ingress: UDP reply (reverse NAT, redirect)");
    });
}

/// What one expiry-sweep run holds its CPU for at the default natMaxEntries: a
/// run walks one of the 64 forward shards (16,384 buckets), in softirq. Timed
/// by the run itself (`nat_gc.last_run_took_ns`), with one pair in the table and
/// with the table 15/16 full (983,040 IPv4 pairs put in from here, both halves,
/// as the programs make them). Run by `scripts/bench.sh --sweep`.
#[test]
#[ignore = "benchmark: scripts/bench.sh --sweep"]
fn sweep_run_cost() {
    use ebpf_masq::bpf::{
        abi::{Nat4Entry, Nat4Key},
        maps,
        nat::{self, Fwd},
    };
    let dp = Dataplane::with_nat_max_entries(ebpf_masq::config::DEFAULT_NAT_MAX_ENTRIES);
    dp.set_config(1024, 65535, 3600);
    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, VETH, true);
    dp.egress(&udp(POD, REMOTE, 40000, 53)).passed(); // the first pair arms the sweep
    // (ms per run: median, max, pairs a run checked) over `n` runs.
    let sample = |n: usize| {
        let (mut took, mut checked, mut last) = (Vec::new(), 0, dp.nat_gc().runs);
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while took.len() < n && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(5));
            let g = dp.nat_gc();
            if g.runs != last {
                last = g.runs;
                took.push(g.last_run_took_ns as f64 / 1e6);
                checked = checked.max(g.last_checked);
            }
        }
        assert!(took.len() == n, "the sweep ran {} times in 60 s", took.len());
        took.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (took[n / 2], took[n - 1], checked)
    };
    println!("{:<52} {:>8} {:>8} {:>10}", "expiry sweep, natMaxEntries 1,048,576", "ms/run", "max ms", "pairs/run");
    let (med, max, checked) = sample(32);
    println!("{:<52} {med:>8.2} {max:>8.2} {checked:>10}", "one pair (a run: one empty shard)");

    let n: u32 = 983_040;
    let now = ebpf_masq::pod::monotonic_ns();
    let mut fwd = Fwd::<nat::V4>::pinned(&dp.pins).unwrap();
    let mut rev: nat::NatMap<nat::V4> = maps::pinned(&dp.pins, ebpf_masq::bpf::abi::MAP_NAT4_REV).unwrap();
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    for i in 0..n {
        let (daddr, dport) = (Ipv4Addr::from(base + i / 1000), 1000 + (i % 1000) as u16);
        let nat_port = 1024 + (i % 60000) as u16;
        let fk: Nat4Key = nat_key(POD, daddr, 40000, dport, 17);
        let e = Nat4Entry { created_ns: now, last_seen_ns: now, ..Default::default() };
        let fe = Nat4Entry { addr: MASQ.octets(), port: nat_port.to_be_bytes(), ..e };
        let re = Nat4Entry { addr: POD.octets(), port: 40000u16.to_be_bytes(), ..e };
        rev.insert(reverse_key(&fk, MASQ, nat_port), re, 0).unwrap();
        fwd.insert(&fk, &fe, 0).unwrap();
    }
    // The interval follows the pairs the last cycle saw: wait for a cycle over the full table.
    let cycles = dp.nat_gc().cycles;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while dp.nat_gc().cycles < cycles + 1 && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (med, max, checked) = sample(16);
    let label = format!("983,041 pairs (a run: ~{} pairs in its shard)", n / dp.shards());
    println!("{label:<52} {med:>8.2} {max:>8.2} {checked:>10}");
}

