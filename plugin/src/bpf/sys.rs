//! Facts of the machine the data plane shares with user space: the clock the
//! programs read (bpf_ktime_get_ns) and the number of possible CPUs (per-CPU maps).

/// CLOCK_MONOTONIC in ns: what bpf_ktime_get_ns() returns, so ages computed here
/// compare with the data plane's timestamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Possible CPUs: how many values a per-CPU map holds per key.
pub fn ncpus() -> usize {
    aya::util::nr_cpus().map(|n| n.max(1)).unwrap_or(1)
}
