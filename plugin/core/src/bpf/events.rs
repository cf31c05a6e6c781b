//! The data plane's events (bpf/include/masq_abi_events.h): NAT pairs made and
//! ended, new flows refused and packets dropped, read from one of two pinned ring
//! buffers. `events_log` is the NAT session log exporter's, `events_live`
//! `monitor`'s, so neither takes the other's events. The programs write into a
//! ring only while its reader's lease (`events_ctl`) runs: a [`Reader`] renews
//! it as it reads (every [`RENEW`]) and clears it when dropped; a reader killed
//! outright leaves a lease that runs out within `EVENTS_LEASE_NS`.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::AsRawFd,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};

use super::{
    abi::{self, EventsCtl, MasqEvent},
    maps,
    pins::Pins,
};
use crate::error::{Error, Result};

/// How often a reader renews its lease (the lease reaches `EVENTS_LEASE_NS` ahead).
pub const RENEW: Duration = Duration::from_secs(1);

/// Which ring, and so which lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// `events_log`: the NAT session log's exporter.
    Log,
    /// `events_live`: `ebpf-masq monitor`.
    Live,
}

impl Ring {
    fn map(self) -> &'static str {
        match self {
            Ring::Log => abi::MAP_EVENTS_LOG,
            Ring::Live => abi::MAP_EVENTS_LIVE,
        }
    }
}

/// What an event tells (`struct masq_event.kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    PairMade,
    PairEnded,
    Drop,
    RefusedNoPort,
    RefusedShare,
    RefusedLimit,
}

impl Kind {
    pub const ALL: [Kind; 6] =
        [Kind::PairMade, Kind::PairEnded, Kind::Drop, Kind::RefusedNoPort, Kind::RefusedShare, Kind::RefusedLimit];

    fn of(k: u8) -> Option<Kind> {
        Some(match u32::from(k) {
            abi::EV_PAIR_MADE => Kind::PairMade,
            abi::EV_PAIR_ENDED => Kind::PairEnded,
            abi::EV_DROP => Kind::Drop,
            abi::EV_REFUSED_NO_PORT => Kind::RefusedNoPort,
            abi::EV_REFUSED_SHARE => Kind::RefusedShare,
            abi::EV_REFUSED_LIMIT => Kind::RefusedLimit,
            _ => return None,
        })
    }

    /// Its name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::PairMade => "pair_made",
            Kind::PairEnded => "pair_ended",
            Kind::Drop => "drop",
            Kind::RefusedNoPort => "refused_no_port",
            Kind::RefusedShare => "refused_share",
            Kind::RefusedLimit => "refused_limit",
        }
    }
}

/// Why a pair ended (`EV_END_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    Closed,
    Expired,
    TakenOver,
    PodDeleted,
}

impl EndReason {
    fn of(r: u8) -> Option<EndReason> {
        Some(match u32::from(r) {
            abi::EV_END_CLOSED => EndReason::Closed,
            abi::EV_END_EXPIRED => EndReason::Expired,
            abi::EV_END_TAKEN_OVER => EndReason::TakenOver,
            abi::EV_END_POD_DELETED => EndReason::PodDeleted,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            EndReason::Closed => "closed",
            EndReason::Expired => "expired",
            EndReason::TakenOver => "taken_over",
            EndReason::PodDeleted => "pod_deleted",
        }
    }
}

/// One decoded event. Ports in host order; what its kind leaves unknown is None.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    /// CLOCK_MONOTONIC (bpf_ktime_get_ns) when it happened.
    pub ktime_ns: u64,
    pub proto: u8,
    /// The pod endpoint (before NAT); a drop's source when it came from a pod,
    /// None when it came from outside.
    pub pod: Option<SocketAddr>,
    /// The node endpoint the pair took; a refusal has the node address, port 0;
    /// a drop from outside its destination (the node's, or the pod's when it was
    /// translated back already), None for one from a pod.
    pub node: Option<SocketAddr>,
    /// The remote endpoint (a drop's destination, or its source from outside).
    pub remote: Option<SocketAddr>,
    /// 0, or 1 + the egress policy's index.
    pub policy: u8,
    pub end: Option<EndReason>,
    /// A drop's `enum masq_drop_reason`.
    pub drop_reason: Option<u32>,
    /// The pair's created_ns (made, ended).
    pub start_ns: Option<u64>,
    /// Ended: (packets, bytes) the pod sent, and the remote.
    pub out: (u64, u64),
    pub r#in: (u64, u64),
    pub ifindex: u32,
    pub nat_flags: u8,
}

fn addr(b: &[u8; 16], v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::from(*b).into()
    } else {
        Ipv4Addr::new(b[0], b[1], b[2], b[3]).into()
    }
}

impl Event {
    /// The record the ring holds, decoded; None when it is not one (short, or an unknown kind).
    pub fn decode(bytes: &[u8]) -> Option<Event> {
        if bytes.len() < std::mem::size_of::<MasqEvent>() {
            return None;
        }
        // SAFETY: MasqEvent is plain old data (aya::Pod) and bytes holds one; read unaligned.
        let e: MasqEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let kind = Kind::of(e.kind)?;
        let v6 = e.v6 != 0;
        let ep = |a: &[u8; 16], p: [u8; 2]| SocketAddr::new(addr(a, v6), u16::from_be_bytes(p));
        // A drop holds the packet's source and destination: pod -> remote, or
        // (EV_DROP_F_IN) remote -> node; the other endpoint is not known.
        let inbound = kind == Kind::Drop && u32::from(e.nat_flags) & abi::EV_DROP_F_IN != 0;
        let (has_pod, has_node) = match kind {
            Kind::Drop => (!inbound, inbound),
            _ => (true, true),
        };
        let pair = matches!(kind, Kind::PairMade | Kind::PairEnded);
        Some(Event {
            kind,
            ktime_ns: e.ktime_ns,
            proto: e.proto,
            pod: has_pod.then(|| ep(&e.pod, e.pod_port)),
            node: has_node.then(|| ep(&e.node, e.node_port)),
            remote: Some(ep(&e.remote, e.remote_port)),
            policy: e.policy,
            end: if kind == Kind::PairEnded { EndReason::of(e.reason) } else { None },
            drop_reason: (kind == Kind::Drop).then_some(u32::from(e.reason)),
            start_ns: pair.then_some(e.start_ns),
            out: (e.packets_out, e.bytes_out),
            r#in: (e.packets_in, e.bytes_in),
            ifindex: e.ifindex,
            nat_flags: e.nat_flags,
        })
    }
}

impl Event {
    /// A drop of a packet that came from outside (its destination is in `node`).
    pub fn from_outside(&self) -> bool {
        self.kind == Kind::Drop && self.pod.is_none()
    }
}

/// CLOCK_MONOTONIC now, in ns: the programs' bpf_ktime_get_ns().
pub use super::sys::monotonic_ns as ktime_now;

/// The programs' clock (bpf_ktime_get_ns) to Unix milliseconds, by the two
/// clocks read together once. `monitor` reads them for each batch of events; the
/// NAT log keeps one reading for an hour, so a pair's start is the same
/// millisecond in its create and its delete record.
#[derive(Clone, Copy, Debug)]
pub struct Wall {
    ktime_ns: u64,
    unix_ms: u64,
}

impl Wall {
    pub fn now() -> Wall {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        Wall { ktime_ns: ktime_now(), unix_ms }
    }

    /// The pair of readings given (tests: a clock fixed in time).
    pub fn at(ktime_ns: u64, unix_ms: u64) -> Wall {
        Wall { ktime_ns, unix_ms }
    }

    /// `ktime_ns` (before or after the clocks were read) in Unix milliseconds.
    pub fn ms(&self, ktime_ns: u64) -> u64 {
        let delta_ms = (i128::from(ktime_ns) - i128::from(self.ktime_ns)).div_euclid(1_000_000);
        (i128::from(self.unix_ms) + delta_ms).max(0) as u64
    }

    /// When the clocks were read.
    pub fn age(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(ktime_now().saturating_sub(self.ktime_ns))
    }
}

/// The leases (`events_ctl`, mapped: BPF_F_MMAPABLE). Each reader stores only
/// its own fields, atomically, into the one value the programs read: two readers
/// renewing at once never undo each other (a map update writes the whole value
/// back, and would put the other's older lease back).
pub struct Leases {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
    len: std::num::NonZeroUsize,
}

/// Where a field of `struct events_ctl` lies in the mapped value.
macro_rules! ctl_at {
    ($f:ident) => {
        std::mem::offset_of!(EventsCtl, $f)
    };
}

impl Leases {
    pub fn pinned(pins: &Pins) -> Result<Leases> {
        use std::os::fd::AsFd;
        let map = maps::pinned_data(pins, abi::MAP_EVENTS_CTL)?;
        // An mmapable array's values start at offset 0 (the kernel maps the whole page).
        let len = std::num::NonZeroUsize::new(std::mem::size_of::<EventsCtl>()).expect("non-zero");
        // SAFETY: a fresh shared mapping of the map's fd; it outlives the fd (closed with `map`).
        let ptr = unsafe {
            nix::sys::mman::mmap(
                None,
                len,
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_SHARED,
                map.fd().as_fd(),
                0,
            )
        }
        .map_err(|e| Error::bpf(format!("map {} into memory: {e}", abi::MAP_EVENTS_CTL)))?;
        Ok(Leases { ptr, len })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is a field of the mapped struct (ctl_at!), 8-byte aligned; the mapping lives as long as self.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().cast::<u8>().add(off).cast()) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as u64_at, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().cast::<u8>().add(off).cast()) }
    }

    fn until(&self, ring: Ring) -> &AtomicU64 {
        self.u64_at(match ring {
            Ring::Log => ctl_at!(log_until),
            Ring::Live => ctl_at!(live_until),
        })
    }

    fn pid(&self, ring: Ring) -> &AtomicU32 {
        self.u32_at(match ring {
            Ring::Log => ctl_at!(log_pid),
            Ring::Live => ctl_at!(live_pid),
        })
    }

    /// The whole value as it is now (each field read atomically).
    pub fn get(&self) -> EventsCtl {
        let r = Ordering::Relaxed;
        EventsCtl {
            log_until: self.until(Ring::Log).load(r),
            live_until: self.until(Ring::Live).load(r),
            log_pid: self.pid(Ring::Log).load(r),
            live_pid: self.pid(Ring::Live).load(r),
            log_records: self.u64_at(ctl_at!(log_records)).load(r),
            log_ipfix_unsent: self.u64_at(ctl_at!(log_ipfix_unsent)).load(r),
        }
    }

    /// Set `ring`'s lease to run until `until` (bpf_ktime_get_ns time; 0: off).
    pub fn set(&mut self, ring: Ring, until: u64) {
        self.until(ring).store(until, Ordering::Release);
    }

    /// Take `ring`'s lease for this process until `until`.
    pub fn hold(&mut self, ring: Ring, until: u64) {
        self.pid(ring).store(std::process::id(), Ordering::Relaxed);
        self.until(ring).store(until, Ordering::Release);
    }

    /// Give `ring`'s lease up: its end cleared, and its holder when that is still us
    /// (a second reader of the same ring that took it since keeps its name).
    pub fn release(&mut self, ring: Ring) {
        self.until(ring).store(0, Ordering::Release);
        let me = std::process::id();
        let _ = self.pid(ring).compare_exchange(me, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The session log's counts, for `status` and metrics: records written since
    /// its exporter started, and how many of them the IPFIX collector did not get.
    pub fn set_log_counts(&mut self, records: u64, ipfix_unsent: u64) {
        self.u64_at(ctl_at!(log_records)).store(records, Ordering::Relaxed);
        self.u64_at(ctl_at!(log_ipfix_unsent)).store(ipfix_unsent, Ordering::Relaxed);
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, unmapped once.
        if let Err(e) = unsafe { nix::sys::mman::munmap(self.ptr, self.len.get()) } {
            log::warn!("events: unmap {}: {e}", abi::MAP_EVENTS_CTL);
        }
    }
}

/// A ring's reader holding its lease: renewed as it reads, cleared when dropped.
pub struct Reader {
    ring: Ring,
    buf: RingBuf<MapData>,
    leases: Leases,
    renewed: Instant,
    /// The layout's directory and the ring's pin: when the pin goes (an uninstall,
    /// or a newer layout's adoption), the programs write elsewhere or nowhere.
    root: std::path::PathBuf,
    pin: std::path::PathBuf,
    /// The pin was found gone at the last renewal.
    gone: bool,
}

impl Reader {
    /// Open `ring` and take its lease: the programs write events into it from now on.
    pub fn new(pins: &Pins, ring: Ring) -> Result<Reader> {
        let buf = maps::pinned(pins, ring.map())?;
        let mut leases = Leases::pinned(pins)?;
        if ring == Ring::Log {
            leases.set_log_counts(0, 0);
        }
        leases.hold(ring, ktime_now() + abi::EVENTS_LEASE_NS);
        let (root, pin) = (pins.root.clone(), pins.map(ring.map()));
        Ok(Reader { ring, buf, leases, renewed: Instant::now(), root, pin, gone: false })
    }

    /// Renew the lease when due, and look whether the ring's pin is still there.
    fn renew_if_due(&mut self) {
        if self.renewed.elapsed() >= RENEW {
            self.leases.hold(self.ring, ktime_now() + abi::EVENTS_LEASE_NS);
            self.renewed = Instant::now();
            self.gone = !self.pin.exists();
        }
    }

    /// The events the ring holds now, or (when it is empty) those it holds after
    /// `wait` (at most RENEW); renews the lease when due. The programs submit
    /// without a wakeup (an irq_work per event would cost ~10x a new flow), so the
    /// poll is a sleep: a reader sees an event within `wait`. Records it cannot
    /// decode are skipped. Once the ring's pin is gone and the ring is drained,
    /// an error: reading on would go on silently with no events.
    pub fn read(&mut self, wait: Duration) -> Result<Vec<Event>> {
        self.renew_if_due();
        let mut out = self.drain();
        if out.is_empty() && self.gone {
            return Err(Error::new(
                crate::error::code::IO_FAILURE,
                format!(
                    "the data plane at {} is gone (uninstalled, or adopted by a newer pin layout): its {} ring gets \
                     no more events; start this reader again",
                    self.root.display(),
                    self.ring.map()
                ),
            ));
        }
        if out.is_empty() {
            let mut pfd = libc::pollfd { fd: self.buf.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let ms = wait.min(RENEW).as_millis() as libc::c_int;
            // SAFETY: one valid pollfd; an error (EINTR on a signal) just returns early.
            // (A wakeup comes only from a producer that asked for one: ours never do.)
            unsafe { libc::poll(&mut pfd, 1, ms) };
            out = self.drain();
        }
        Ok(out)
    }

    fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(item) = self.buf.next() {
            out.extend(Event::decode(&item));
        }
        out
    }

    /// Publish the session log's counts (the log's reader: its exporter).
    pub fn log_counts(&mut self, records: u64, ipfix_unsent: u64) {
        self.leases.set_log_counts(records, ipfix_unsent);
    }

    /// Give the lease up now (also done when the reader is dropped).
    pub fn close(&mut self) {
        self.leases.release(self.ring);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_clock_carries_over_to_wall_time_both_ways() {
        let w = Wall::at(10_000_000_000, 1_796_472_187_000);
        assert_eq!(w.ms(10_000_000_000), 1_796_472_187_000);
        assert_eq!(w.ms(8_500_000_000), 1_796_472_185_500, "before the reading");
        assert_eq!(w.ms(12_250_000_001), 1_796_472_189_250, "after it");
        assert_eq!(w.ms(10_000_000_999_999), w.ms(10_000_000_999_000), "whole milliseconds");
    }

    fn raw(e: &MasqEvent) -> Vec<u8> {
        // SAFETY: MasqEvent is plain old data.
        unsafe { std::slice::from_raw_parts((e as *const MasqEvent).cast::<u8>(), std::mem::size_of::<MasqEvent>()) }
            .to_vec()
    }

    #[test]
    fn a_pair_made_decodes_with_its_three_endpoints() {
        let mut e = MasqEvent { kind: abi::EV_PAIR_MADE as u8, proto: 6, policy: 2, ktime_ns: 5, start_ns: 4, ..Default::default() };
        e.pod[..4].copy_from_slice(&[10, 1, 0, 5]);
        e.node[..4].copy_from_slice(&[192, 0, 2, 1]);
        e.remote[..4].copy_from_slice(&[203, 0, 113, 9]);
        e.pod_port = 40000u16.to_be_bytes();
        e.node_port = 40001u16.to_be_bytes();
        e.remote_port = 443u16.to_be_bytes();
        let d = Event::decode(&raw(&e)).unwrap();
        assert_eq!(d.kind, Kind::PairMade);
        assert_eq!(d.pod, Some("10.1.0.5:40000".parse().unwrap()));
        assert_eq!(d.node, Some("192.0.2.1:40001".parse().unwrap()));
        assert_eq!(d.remote, Some("203.0.113.9:443".parse().unwrap()));
        assert_eq!((d.policy, d.start_ns, d.end), (2, Some(4), None));
    }

    #[test]
    fn ends_drops_and_v6_decode_and_junk_does_not() {
        let mut e = MasqEvent { kind: abi::EV_PAIR_ENDED as u8, reason: abi::EV_END_TAKEN_OVER as u8, v6: 1, ..Default::default() };
        e.pod = "fd00::5".parse::<Ipv6Addr>().unwrap().octets();
        e.packets_out = 3;
        e.bytes_in = 99;
        let d = Event::decode(&raw(&e)).unwrap();
        assert_eq!((d.end, d.out, d.r#in), (Some(EndReason::TakenOver), (3, 0), (0, 99)));
        assert_eq!(d.pod.unwrap().ip(), "fd00::5".parse::<IpAddr>().unwrap());
        let mut drop = MasqEvent { kind: abi::EV_DROP as u8, reason: 1, proto: 17, ifindex: 7, ..Default::default() };
        drop.pod[..4].copy_from_slice(&[10, 1, 0, 5]);
        drop.remote[..4].copy_from_slice(&[203, 0, 113, 9]);
        drop.pod_port = 5353u16.to_be_bytes();
        drop.remote_port = 53u16.to_be_bytes();
        let d = Event::decode(&raw(&drop)).unwrap();
        assert_eq!((d.kind, d.drop_reason, d.proto, d.ifindex), (Kind::Drop, Some(1), 17, 7));
        assert_eq!((d.pod, d.node), (Some("10.1.0.5:5353".parse().unwrap()), None), "from a pod");
        assert_eq!((d.remote, d.from_outside()), (Some("203.0.113.9:53".parse().unwrap()), false));
        let mut inbound = MasqEvent { kind: abi::EV_DROP as u8, nat_flags: abi::EV_DROP_F_IN as u8, ..drop };
        inbound.node[..4].copy_from_slice(&[192, 0, 2, 1]);
        inbound.node_port = 40001u16.to_be_bytes();
        let d = Event::decode(&raw(&inbound)).unwrap();
        assert_eq!((d.pod, d.node), (None, Some("192.0.2.1:40001".parse().unwrap())), "from outside");
        assert!(d.from_outside());
        assert_eq!(Event::decode(&raw(&MasqEvent::default())), None, "kind 0");
        assert_eq!(Event::decode(&[1, 2, 3]), None, "short");
    }
}
