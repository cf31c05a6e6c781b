//! Expiry, pair integrity and a full table through the real pinned uplink programs
//! (BPF_PROG_TEST_RUN): an expired pair's port goes to a new flow, a half without its
//! other half starts afresh, the sweep's timer and walk, TCP's closing states, a full
//! table refusing new flows only.

use ebpf_masq::bpf::{
    abi::{counter, NAT_GC_ARMED, NAT_GC_NEW6, NAT_GC_PRIME_MARK, NAT_GC_PRIME_RET},
    sweep,
};

use crate::core::{expect_snat, node};
use crate::support::{clock::monotonic_ago, harness::*, node::*, packet::*, pool::Snapshot};

#[test]
fn expired_pair_gives_its_port_to_a_new_flow() {
    let dp = node();
    dp.set_config(20000, 20000, 2);
    let stale_fwd = nat_key(POD, REMOTE, 40000, 443, TCP);
    let long_ago = monotonic_ago(std::time::Duration::from_secs(60));
    dp.put_fwd(&stale_fwd, nat_entry(MASQ, 20000, long_ago));
    dp.put_rev(&reverse_key(&stale_fwd, MASQ, 20000), nat_entry(POD, 40000, long_ago));

    let port = expect_snat(&dp, &tcp(POD2, REMOTE, 40001, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    assert_eq!(port, 20000);
    assert_eq!(dp.counter(counter::NAT_RECLAIMED), 1);
    assert_eq!(dp.get_fwd(&stale_fwd), None, "stale forward half left behind");
    dp.assert_single_pair(nat_key(POD2, REMOTE, 40001, 443, TCP), MASQ, 20000);
}

#[test]
fn forward_half_without_its_reverse_starts_afresh() {
    // The reverse half is gone (its timer is removing the pair): the next refresh
    // notices, and the flow gets a complete new pair instead of a one-way one.
    let dp = node();
    let fk = nat_key(POD, REMOTE, 40000, 443, TCP);
    let port = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    dp.del_rev(&reverse_key(&fk, MASQ, port));
    let mut fe = dp.get_fwd(&fk).unwrap();
    fe.last_seen_ns = monotonic_ago(std::time::Duration::from_secs(2));
    dp.put_fwd(&fk, fe);

    let again = expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, ACK), MASQ, |p| tcp(MASQ, REMOTE, p, 443, ACK));
    assert_eq!(dp.counter(counter::NAT_CREATED), 2);
    dp.assert_single_pair(fk, MASQ, again);
    let out = dp.ingress(&tcp(REMOTE, MASQ, 443, again, ACK)).passed();
    assert_eq!(out, tcp(REMOTE, POD, 443, 40000, ACK));
}

#[test]
fn reply_never_recreates_a_missing_forward_half() {
    // The old LRU design re-inserted a lost half from the other one; now a half
    // alone is a pair being removed, and a reply must not bring it back.
    let dp = node();
    let fk = nat_key(POD, REMOTE, 40000, 443, UDP);
    let port = expect_snat(&dp, &udp(POD, REMOTE, 40000, 443), MASQ, |p| udp(MASQ, REMOTE, p, 443));
    let rk = reverse_key(&fk, MASQ, port);
    let mut re = dp.get_rev(&rk).unwrap();
    re.last_seen_ns = monotonic_ago(std::time::Duration::from_secs(2));
    dp.put_rev(&rk, re);
    dp.del_fwd(&fk);
    dp.ingress(&udp(REMOTE, MASQ, 443, port)).passed();
    assert!(dp.fwd().is_empty(), "forward half recreated: {:?}", dp.fwd());
}

/// Poll (up to `secs`) until `f` holds.
fn eventually(secs: u64, f: impl Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    f()
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

#[test]
fn idle_pair_expires_with_both_halves_together() {
    let dp = node();
    dp.set_timeouts(20000, 20099, 3600, 3600, 1);
    let fk = nat_key(POD, REMOTE, 40000, 53, UDP);
    let port = expect_snat(&dp, &udp(POD, REMOTE, 40000, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53));
    dp.assert_single_pair(fk, MASQ, port);
    assert!(eventually(5, || dp.nat_is_empty()), "pair still there: {:?} {:?}", dp.fwd(), dp.rev());
    assert_eq!(dp.counter(counter::NAT_EXPIRED), 1);
    // Its port is free again for anyone.
    expect_snat(&dp, &udp(POD2, REMOTE, 40001, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53));
}

/// RFC 4787 REQ-5 allows one-shot UDP flows (DNS) a shorter timeout than 2 min;
/// netfilter gives a UDP flow 30 s until it has lasted 2 s. A pair whose packets
/// all came within 2 s of its first waits natTimeouts.udpOneShot; one that lasted
/// waits natTimeouts.udp.
#[test]
fn a_one_shot_udp_pair_expires_sooner() {
    let dp = node();
    dp.set_timeouts(20000, 20099, 3600, 3600, 3600);
    dp.set_udp_one_shot(1);
    let dns = nat_key(POD, REMOTE, 40000, 53, UDP);
    let stream = nat_key(POD2, REMOTE, 40001, 3478, UDP);
    let p = expect_snat(&dp, &udp(POD, REMOTE, 40000, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53));
    dp.ingress(&udp(REMOTE, MASQ, 53, p)).passed(); // the answer, at once
    let q = expect_snat(&dp, &udp(POD2, REMOTE, 40001, 3478), MASQ, |q| udp(MASQ, REMOTE, q, 3478));
    // The stream began 3 s ago and is still sending: both halves say so.
    let (rk, mut fe) = (reverse_key(&stream, MASQ, q), dp.get_fwd(&stream).unwrap());
    let mut re = dp.get_rev(&rk).unwrap();
    fe.created_ns -= 3_000_000_000;
    re.created_ns = fe.created_ns;
    dp.put_fwd(&stream, fe);
    dp.put_rev(&rk, re);
    assert!(eventually(6, || dp.get_fwd(&dns).is_none()), "the one-shot pair outlived 1 s: {:?}", dp.fwd());
    assert!(dp.get_fwd(&stream).is_some() && dp.get_rev(&rk).is_some(), "the stream expired with it");
    // Its own reverse half (the stream may hold the same node port towards its other remote port).
    assert!(dp.get_rev(&reverse_key(&dns, MASQ, p)).is_none(), "the one-shot pair's reverse half stayed");
}

/// A walk visits every bucket of a map, used or not (~10 ms of a CPU for a whole
/// table at the default natMaxEntries): once a sweep cycle finds the table empty
/// the timer stops, and the next new pair starts it again (and is expired in turn).
#[test]
fn the_sweep_stops_on_an_empty_table_and_the_next_pair_restarts_it() {
    let dp = node();
    dp.set_timeouts(20000, 20099, 3600, 3600, 1);
    let armed = |dp: &Dataplane| dp.nat_gc().armed & NAT_GC_ARMED != 0;
    // A new pair arms the sweep, at once and every time: the load primed its
    // timer (sweep::prime), so arming allocates nothing in the packet path
    // (bpf_timer_init there fails with ENOMEM at times on this kernel).
    let arm = |dp: &Dataplane, sport: u16| {
        expect_snat(dp, &udp(POD, REMOTE, sport, 53), MASQ, |n| udp(MASQ, REMOTE, n, 53));
        assert!(armed(dp), "a new pair left the sweep unarmed: {:?}", dp.nat_gc());
        assert_eq!(dp.counter(counter::NAT_GC_ARM_FAILED), 0);
    };
    assert!(!armed(&dp), "armed before any pair");
    arm(&dp, 40000);
    assert_eq!(dp.nat_gc().armed & NAT_GC_NEW6, 0, "an IPv4 pair is not reported as IPv6");
    assert!(eventually(5, || dp.nat_is_empty()), "pair still there: {:?}", dp.fwd());
    // The cycle after the one that removed it finds nothing and stops.
    assert!(eventually(5, || !armed(&dp)), "sweep still armed on an empty table: {:?}", dp.nat_gc());
    let stopped = dp.nat_gc();
    assert_eq!((stopped.last_cycle_checked, stopped.pos, stopped.walk), (0, 0, 0), "{stopped:?}");
    // Every run timed itself: what the walk of one shard held the CPU for.
    assert!(stopped.last_run_took_ns > 0 && stopped.max_run_took_ns >= stopped.last_run_took_ns, "{stopped:?}");
    // IPv4 only: every cycle was one run per nat4_fwd shard.
    assert_eq!(stopped.runs, stopped.cycles * u64::from(dp.shards()), "{stopped:?}");
    sleep_ms(2500); // more than two cycles: no run happens while idle
    assert_eq!(dp.nat_gc().runs, stopped.runs, "the sweep ran although stopped");

    arm(&dp, 41000); // a new pair restarts the sweep
    assert!(eventually(5, || dp.nat_is_empty()), "second pair not expired: {:?}", dp.fwd());
    assert!(dp.nat_gc().runs > stopped.runs);
    assert_eq!(dp.counter(counter::NAT_EXPIRED), dp.counter(counter::NAT_CREATED));
}

/// The loader's prime run (NAT_GC_PRIME_MARK in cb[0], on an interface that is
/// not an uplink) gives the sweep's timer its memory and callback and nothing
/// else: it passes its packet untouched, changes no map and does not start the
/// sweep; a second prime is a no-op. On an uplink the mark means nothing: the
/// packet is translated like any other.
#[test]
fn the_loaders_prime_run_changes_no_map_and_means_nothing_on_an_uplink() {
    let dp = Dataplane::new(); // no uplink yet: as a load leaves it
    let before = Snapshot::take(&dp.pins).unwrap().contents();
    let mut ctx = [0u8; SKB_CTX_LEN];
    ctx[SKB_CB0..SKB_CB0 + 4].copy_from_slice(&(NAT_GC_PRIME_MARK as u32).to_ne_bytes());
    let frame = udp(POD, REMOTE, 40000, 53);
    let (run, _) = dp.run_ctx("egress", &frame, &ctx);
    assert_eq!(run.ret, NAT_GC_PRIME_RET as i32, "prime failed: errno {}", run.ret - NAT_GC_PRIME_RET as i32);
    assert_eq!(run.out, frame, "the prime run changed its packet");
    sweep::prime_pinned(&dp.pins).expect("a second prime");
    assert_eq!(Snapshot::take(&dp.pins).unwrap().contents(), before, "the prime run changed a map");
    assert_eq!(dp.nat_gc().armed & NAT_GC_ARMED, 0, "priming started the sweep");

    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, VETH, true);
    let (run, _) = dp.run_ctx("egress", &frame, &ctx);
    let out = summary(&run.passed());
    assert_eq!((out.src, out.dport), (MASQ, 53), "the marked packet on an uplink was not translated");
    assert_eq!(dp.fwd().len(), 1);
}

/// The forward halves are spread over NAT_SHARDS hash maps by a keyed hash the
/// plugin computes the same way (every pair the programs made is where
/// `shard_of` says), and a sweep run walks exactly one shard: what it checked
/// is that shard's pairs, and a cycle checks them all.
#[test]
fn the_sweep_walks_one_shard_per_run_and_every_shard_each_cycle() {
    let dp = node();
    dp.set_timeouts(20000, 29999, 3600, 3600, 3600);
    for i in 0..96u16 {
        dp.egress(&udp(POD, REMOTE, 30000 + i, 53)).passed();
    }
    let fwd = dp.fwd();
    assert_eq!(dp.assert_pairs_complete(), 96);
    let shards = dp.fwd_shards();
    for (k, _) in &fwd {
        assert!(shards.get(k).is_ok(), "{k:?} not in shard {}", dp.shard_of(k));
    }
    let lens = shards.shard_lens();
    let n = dp.shards();
    assert_eq!((n, lens.len()), (4, 4), "natMaxEntries 4096: 4 shards of 1024");
    assert_eq!(lens.iter().sum::<usize>(), 96);
    assert!(lens.iter().all(|&l| l >= 10), "pairs not spread over the shards: {lens:?}");
    // A whole cycle checked every pair; each run only its shard's.
    assert!(eventually(4, || dp.nat_gc().cycles >= 2), "no complete cycle: {:?}", dp.nat_gc());
    assert_eq!(dp.nat_gc().last_cycle_checked, 96, "{:?}", dp.nat_gc());
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..80 {
        let gc = dp.nat_gc();
        let walked = (gc.pos + n - 1) % n;
        assert_eq!(gc.last_checked, lens[walked as usize] as u64, "run before pos {}: {gc:?} {lens:?}", gc.pos);
        seen.insert(walked);
        sleep_ms(23);
    }
    assert_eq!(seen.len(), n as usize, "runs did not move across the shards: {seen:?}");
}

#[test]
fn pair_in_use_outlives_its_timeout_from_either_direction() {
    let dp = node();
    dp.set_timeouts(20000, 20099, 3600, 3600, 2);
    let fk = nat_key(POD, REMOTE, 40000, 53, UDP);
    let port = expect_snat(&dp, &udp(POD, REMOTE, 40000, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53));
    // 4 s of pod packets, then 4 s of replies only: twice the timeout each.
    for _ in 0..16 {
        sleep_ms(250);
        assert_eq!(expect_snat(&dp, &udp(POD, REMOTE, 40000, 53), MASQ, |p| udp(MASQ, REMOTE, p, 53)), port);
    }
    for _ in 0..16 {
        sleep_ms(250);
        assert_eq!(dp.ingress(&udp(REMOTE, MASQ, 53, port)).passed(), udp(REMOTE, POD, 53, 40000));
    }
    dp.assert_single_pair(fk, MASQ, port);
    assert_eq!((dp.counter(counter::NAT_EXPIRED), dp.counter(counter::NAT_CREATED)), (0, 1));
    // Then silence: it goes.
    assert!(eventually(6, || dp.nat_is_empty()), "idle pair stayed");
    assert_eq!(dp.counter(counter::NAT_EXPIRED), 1);
}

#[test]
fn fin_or_rst_shortens_the_expiry_from_either_direction() {
    let dp = node();
    dp.set_timeouts(20000, 20099, 3600, 1, 3600);
    expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let b = expect_snat(&dp, &tcp(POD, REMOTE, 40001, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    let c = expect_snat(&dp, &tcp(POD, REMOTE, 40002, 443, SYN), MASQ, |p| tcp(MASQ, REMOTE, p, 443, SYN));
    expect_snat(&dp, &tcp(POD, REMOTE, 40000, 443, FIN | ACK), MASQ, |p| tcp(MASQ, REMOTE, p, 443, FIN | ACK));
    dp.ingress(&tcp(REMOTE, MASQ, 443, b, RST)).passed();
    assert!(eventually(5, || dp.fwd().len() == 1), "closing pairs stayed: {:?}", dp.fwd());
    dp.assert_single_pair(nat_key(POD, REMOTE, 40002, 443, TCP), MASQ, c);
    assert_eq!(dp.counter(counter::NAT_EXPIRED), 2);
}

/// The table is full for a new flow when its forward shard is (natMaxEntries /
/// NAT_SHARDS pairs): the flow is refused and counted, nothing is half-inserted,
/// established flows keep working, flows of other shards are still made, and a
/// pair leaving makes room for exactly one.
#[test]
fn full_table_refuses_new_flows_and_keeps_the_old_ones() {
    let dp = node();
    let cap = (NAT_MAX_ENTRIES_IN_TESTS / dp.shards()) as usize;
    // Flow i: pod port 10000+i to remote port 1000+i/64, so the 100-port range
    // never runs out before the shard does. Fill the shard of flow 0.
    let flow = |i: u16| udp(POD, REMOTE, 10000 + i, 1000 + i / 64);
    let key = |i: u16| nat_key(POD, REMOTE, 10000 + i, 1000 + i / 64, UDP);
    let full = dp.shard_of(&key(0));
    let mut mine = (0..u16::MAX).filter(|&i| dp.shard_of(&key(i)) == full);
    let other = (0..u16::MAX).find(|&i| dp.shard_of(&key(i)) != full).unwrap();
    for _ in 0..cap {
        dp.egress(&flow(mine.next().unwrap())).passed();
    }
    assert_eq!(dp.assert_pairs_complete(), cap);
    assert_eq!(dp.fwd_shards().shard_lens()[full as usize], cap);
    // One more flow of that shard: refused, counted, nothing half-inserted.
    let refused = mine.next().unwrap();
    dp.egress(&flow(refused)).dropped();
    assert_eq!((dp.drops(drop::NAT_FULL), dp.drops(drop::NO_PORT)), (1, 0));
    assert_eq!(dp.assert_pairs_complete(), cap);
    // Established flows keep working both ways.
    let port = expect_snat(&dp, &flow(0), MASQ, |p| udp(MASQ, REMOTE, p, 1000));
    assert_eq!(dp.ingress(&udp(REMOTE, MASQ, 1000, port)).passed(), udp(REMOTE, POD, 1000, 10000));
    // Another shard has room.
    dp.egress(&flow(other)).passed();
    assert_eq!(dp.assert_pairs_complete(), cap + 1);
    // A pair leaving (as DEL or expiry removes it) makes room for exactly one new flow.
    let fk = key(0);
    let fe = dp.get_fwd(&fk).unwrap();
    dp.del_rev(&reverse_key(&fk, MASQ, u16::from_be_bytes(fe.port)));
    dp.del_fwd(&fk);
    let dport = 1000 + refused / 64;
    expect_snat(&dp, &flow(refused), MASQ, |p| udp(MASQ, REMOTE, p, dport));
    dp.egress(&flow(mine.next().unwrap())).dropped();
    assert_eq!(dp.drops(drop::NAT_FULL), 2);
    assert_eq!(dp.assert_pairs_complete(), cap + 1);
}
