//! The harness's kept data planes (support/pool.rs): a data plane a test used
//! and dirtied is, for the next test, the same as one just loaded. Every map
//! (shards included), the event rings, and the sweep's timer, which must run
//! again for the next test's pairs.

use std::time::{Duration, Instant};

use aya::maps::{MapData, RingBuf};
use ebpf_masq::bpf::{
    abi::{self, counter},
    events::{Reader, Ring},
    maps,
};

use crate::support::{harness::*, node::*, packet::*, pool::Snapshot};

/// A size no other test asks for: only this module's tests take these.
const SIZE: u32 = 5000;

fn ring_len(dp: &Dataplane, ring: &str) -> usize {
    let mut buf: RingBuf<MapData> = maps::pinned(&dp.pins, ring).unwrap();
    std::iter::from_fn(|| buf.next().map(drop)).count()
}

#[test]
fn a_used_data_plane_is_kept_as_it_was_after_its_load() {
    let dp = Dataplane::with_nat_max_entries(SIZE);
    let fresh = Snapshot::take(&dp.pins).unwrap().contents();
    let base = dp.pins.base.clone();
    // Dirty it the ways tests do: config, pods, rules, exclusions, pairs in
    // both families' shards and reverse halves, counters, drops, an armed sweep
    // timer, a lease and an unread event.
    dp.add_uplink6(LO, Some(MASQ), masq6());
    dp.add_pod(POD, VETH, true);
    dp.add_pod6(pod6(), VETH, true);
    dp.add_excl(std::net::Ipv4Addr::new(10, 0, 0, 0), 8, abi::EXCL_NATIVE_ROUTING);
    dp.add_rule(LO, TUNNEL_CLIENT, 24, 1, None);
    dp.add_pod_net(std::net::Ipv4Addr::new(10, 1, 0, 0), 24);
    dp.set_timeouts(20000, 20099, 3600, 3600, 3600);
    let lease = Reader::new(&dp.pins, Ring::Live).unwrap();
    dp.egress(&udp(POD, REMOTE, 40000, 53)).passed();
    dp.egress(&crate::support::packet6::udp6(pod6(), remote6(), 40000, 53)).passed();
    dp.egress(&udp(STRANGER, REMOTE, 40001, 53)).dropped();
    assert_eq!((dp.fwd().len(), dp.fwd6().len()), (1, 1));
    assert!(dp.counter(counter::NAT_CREATED) > 0 && dp.total_drops() > 0);
    drop(lease);
    let dirty = Snapshot::take(&dp.pins).unwrap().contents();
    assert_ne!(dirty, fresh, "the test did not dirty the data plane");
    drop(dp);

    let dp = Dataplane::with_nat_max_entries(SIZE);
    assert_eq!(dp.pins.base, base, "the used data plane was not kept");
    let now = Snapshot::take(&dp.pins).unwrap().contents();
    for (name, entries) in &fresh {
        assert_eq!(now.get(name), Some(entries), "{name}");
    }
    assert_eq!(now.len(), fresh.len());
    assert_eq!(ring_len(&dp, abi::MAP_EVENTS_LIVE), 0, "the live ring kept an event");
    assert_eq!(dp.drops(drop::UNREGISTERED_POD), 0);
}

fn wait_until(secs: u64, f: impl Fn() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

/// The sweep's bpf_timer, left running by the last test (a pair still there),
/// is cancelled with the rest: on the kept data plane the sweep does not run
/// until the next test's first pair arms it again, and that pair expires.
#[test]
fn a_kept_data_plane_sweeps_only_the_next_tests_pairs() {
    let dp = Dataplane::with_nat_max_entries(SIZE + 1);
    let base = dp.pins.base.clone();
    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, VETH, true);
    dp.egress(&udp(POD, REMOTE, 40000, 53)).passed(); // idle timeout 3600 s: stays
    assert!(wait_until(10, || dp.nat_gc().runs >= 1), "the sweep never ran");
    drop(dp);

    let dp = Dataplane::with_nat_max_entries(SIZE + 1);
    assert_eq!(dp.pins.base, base, "the used data plane was not kept");
    // A run comes every second (one shard) while the timer is armed.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(dp.nat_gc().runs, 0, "the last test's sweep timer still runs");
    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, VETH, true);
    dp.set_timeouts(20000, 20099, 3600, 3600, 1);
    dp.egress(&udp(POD, REMOTE, 40000, 53)).passed();
    assert!(wait_until(10, || dp.nat_is_empty()), "the pair was never swept: {:?}", dp.fwd());
    assert_eq!(dp.counter(counter::NAT_EXPIRED), 1);
}

