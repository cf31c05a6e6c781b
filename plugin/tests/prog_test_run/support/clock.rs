//! The programs' clock (CLOCK_MONOTONIC, what bpf_ktime_get_ns reads) for tests
//! that make a pair look idle by writing an old `last_seen_ns`.
//!
//! The clock counts from boot: on a machine up for less than an idle time, no
//! stamp is that old, and `now - idle` in u64 wraps to a stamp in the far future,
//! which the data plane rightly reads as refreshed after it read the clock
//! (`nat_expired`: `seen >= now` is alive), so such a pair never expires. A test
//! that needs a pair past a timeout sets a short timeout (`Dataplane::set_config`)
//! and asks [`monotonic_ago`] for a stamp just past it.

#![allow(dead_code)]

use std::time::Duration;

use super::harness::monotonic_ns;

/// The longest idle time a test may ask for. Longer would make a test wait that
/// long after a boot, or be wrong there: a test past a longer timeout sets a
/// shorter one. Asking for more fails on every machine, not only on a fresh one.
pub const MAX_IDLE: Duration = Duration::from_secs(120);

/// The CLOCK_MONOTONIC stamp `idle` ago: a pair last seen then has been idle
/// `idle` for the programs. On a machine up for less than that, first waits until
/// it has been (once after a boot, at most [`MAX_IDLE`]), never wraps.
#[track_caller]
pub fn monotonic_ago(idle: Duration) -> u64 {
    assert!(idle <= MAX_IDLE, "an idle time of {idle:?} is past MAX_IDLE ({MAX_IDLE:?}): set a shorter timeout");
    let idle_ns = idle.as_nanos() as u64;
    loop {
        let now = monotonic_ns();
        if let Some(then) = now.checked_sub(idle_ns) {
            return then;
        }
        eprintln!("up for {:.1} s only: waiting until {idle:?} have passed since boot", now as f64 / 1e9);
        std::thread::sleep(Duration::from_nanos(idle_ns - now) + Duration::from_millis(1));
    }
}
