//! One private copy of the data plane per test: loaded and pinned under a unique
//! bpffs directory, maps written directly, programs run with BPF_PROG_TEST_RUN.
//! Nothing is ever attached to an interface. When a test ends, its data plane is
//! put back as it was after its load and kept for the next test (`pool`), or
//! removed (also on panic); whatever is kept is removed when the process exits.
//!
//! BPF_PROG_TEST_RUN builds the skb on the netns' loopback device unless the
//! `__sk_buff` context names an ifindex > 1, so skb->ifindex inside the programs
//! is 1 (checked by `test_run_ifindex_is_loopback`). Uplinks and pods are
//! therefore registered on ifindex 1 and no context is passed.

#![allow(dead_code)]

use std::{
    net::Ipv4Addr,
    ops::RangeInclusive,
    path::PathBuf,
    sync::atomic::{AtomicU32, Ordering},
};

use aya::{
    maps::{lpm_trie::Key, Array, HashMap, LpmTrie, MapData, PerCpuArray, PerCpuHashMap},
    programs::{SchedClassifier, TestRun, TestRunOptions},
};
use super::pool::{remove_pin_dir, Kept, Pool, Snapshot};
use ebpf_masq::bpf::{
    abi::{self, *},
    loader::{self, Pins},
    maps, sweep,
};

/// skb->ifindex of every BPF_PROG_TEST_RUN packet: the loopback device.
pub const LO: u32 = 1;

pub const TC_ACT_UNSPEC: i32 = -1;
pub const TC_ACT_SHOT: i32 = 2;

/// enum masq_drop_reason: the mirror's (tests name them `drop::*`).
#[allow(unused_imports)]
pub use ebpf_masq::bpf::abi::drop_reason as drop;

/// natMaxEntries of every test data plane.
pub const NAT_MAX_ENTRIES_IN_TESTS: u32 = 4096;

/// The portRange every test data plane starts with.
pub const PORTS: RangeInclusive<u16> = 20000..=20099;

pub fn monotonic_ns() -> u64 {
    ebpf_masq::pod::monotonic_ns()
}

/// sizeof(struct __sk_buff), and the offsets of the fields tests set.
pub const SKB_CTX_LEN: usize = 192;
pub const SKB_CB0: usize = 48;
pub const SKB_GSO_SEGS: usize = 164;
pub const SKB_GSO_SIZE: usize = 176;

/// The result of one program run.
#[derive(Debug)]
pub struct Run {
    pub ret: i32,
    pub out: Vec<u8>,
}

impl Run {
    /// The program let the packet go on (TC_ACT_UNSPEC); the bytes it left.
    #[track_caller]
    pub fn passed(self) -> Vec<u8> {
        assert_eq!(self.ret, TC_ACT_UNSPEC, "expected pass (-1), got {}", self.ret);
        self.out
    }
    #[track_caller]
    pub fn dropped(self) {
        assert_eq!(self.ret, TC_ACT_SHOT, "expected drop (2), got {}", self.ret);
    }
}

/// The program passed the packet and left every byte as it was.
#[track_caller]
pub fn expect_untouched(run: Run, frame: &[u8]) {
    assert_eq!(run.passed(), frame, "packet modified");
}

pub struct Dataplane {
    pub pins: Pins,
    egress: SchedClassifier,
    ingress: SchedClassifier,
    veth: SchedClassifier,
    /// Its size and its maps right after its load: what `Drop` puts back.
    kept: Option<(u32, Snapshot)>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

static POOL: Pool = Pool::new();

extern "C" fn remove_kept() {
    POOL.remove_all();
}

impl Dataplane {
    /// Load and pin a fresh data plane; config: ports 20000-20099, long timeouts.
    pub fn new() -> Self {
        Self::with_nat_max_entries(NAT_MAX_ENTRIES_IN_TESTS)
    }

    /// `new` with another natMaxEntries (the default's size, for the sweep's cost).
    pub fn with_nat_max_entries(nat_max_entries: u32) -> Self {
        if let Some(k) = POOL.take(nat_max_entries) {
            // (shown with a failing test's output)
            eprintln!("data plane {} kept from an earlier test", k.pins.base.display());
            let mut dp = Self::from_pins(k.pins);
            dp.kept = Some((nat_max_entries, k.snapshot));
            dp.prime_sweep();
            return dp;
        }
        let mut dp = Self::load(nat_max_entries);
        dp.kept = Some((nat_max_entries, Snapshot::take(&dp.pins).expect("snapshot of a new data plane")));
        dp
    }

    /// A data plane of its own, never kept for another test (a test that
    /// replaces what a load made: pins, shards).
    pub fn unshared() -> Self {
        Self::load(NAT_MAX_ENTRIES_IN_TESTS)
    }

    fn load(nat_max_entries: u32) -> Self {
        let base =
            PathBuf::from(format!("/sys/fs/bpf/em-ptr-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let pins = Pins::new(&base);
        // The guard owns the directory from here on, so even a failed load cleans up.
        let guard = PinGuard(base);
        loader::ensure_loaded(&pins, nat_max_entries).expect("load data plane");
        let dp = Self::from_pins(pins);
        std::mem::forget(guard); // Dataplane's Drop takes over
        dp.set_config(*PORTS.start(), *PORTS.end(), 3600);
        dp.prime_sweep();
        dp
    }

    /// The sweep's timer primed, as a load leaves it (`sweep::prime`): the
    /// restore of a kept data plane freed it (a write of its array element from
    /// user space does), and a load that could not prime it only warns.
    fn prime_sweep(&self) {
        sweep::prime_pinned(&self.pins).expect("prime the expiry sweep's timer");
    }

    /// The data plane pinned at `pins`, its programs opened.
    fn from_pins(pins: Pins) -> Self {
        let prog = |name| SchedClassifier::from_pin(pins.prog(name)).expect("the pinned program");
        Dataplane {
            egress: prog(loader::PROG_UPLINK_EGRESS),
            ingress: prog(loader::PROG_UPLINK_INGRESS),
            veth: prog(loader::PROG_VETH_INGRESS),
            pins,
            kept: None,
        }
    }

    pub(super) fn map<T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>>(&self, name: &str) -> T {
        maps::pinned(&self.pins, name).unwrap_or_else(|e| panic!("open {name}: {e:?}"))
    }

    // ---- map setup ----

    /// Port range [lo, hi] and one idle timeout for every protocol (closing TCP too).
    pub fn set_config(&self, lo: u16, hi: u16, timeout_s: u32) {
        self.set_timeouts(lo, hi, timeout_s, timeout_s, timeout_s);
    }

    /// Port range [lo, hi] with separate timeouts: TCP, TCP after FIN/RST, and UDP/ICMP.
    pub fn set_timeouts(&self, lo: u16, hi: u16, tcp_s: u32, closing_s: u32, other_s: u32) {
        let mut m: Array<MapData, NodeConfig> = self.map(abi::MAP_CONFIG);
        // The shard seed and count are the loader's (built into the programs): kept.
        let NodeConfig { nat_seed, nat_shards, .. } = m.get(&0, 0).unwrap();
        let c = NodeConfig {
            port_min: lo,
            port_max: hi,
            flags: 0,
            tcp_timeout_s: tcp_s,
            tcp_closing_timeout_s: closing_s,
            udp_timeout_s: other_s,
            icmp_timeout_s: other_s,
            nat_seed,
            nat_shards,
            skip_min: 0,
            skip_max: 0,
            udp_one_shot_timeout_s: other_s,
        };
        m.set(0, c, 0).unwrap();
    }

    /// natTimeouts.udpOneShot (the other config fields stay).
    pub fn set_udp_one_shot(&self, secs: u32) {
        let mut m: Array<MapData, NodeConfig> = self.map(abi::MAP_CONFIG);
        let mut c = m.get(&0, 0).unwrap();
        c.udp_one_shot_timeout_s = secs;
        m.set(0, c, 0).unwrap();
    }

    /// nodePortRange [lo, hi]: never handed out ({0, 0}: none; the other fields stay).
    pub fn set_node_port_range(&self, lo: u16, hi: u16) {
        let mut m: Array<MapData, NodeConfig> = self.map(abi::MAP_CONFIG);
        let mut c = m.get(&0, 0).unwrap();
        (c.skip_min, c.skip_max) = (lo, hi);
        m.set(0, c, 0).unwrap();
    }

    /// fastPath on or off (the other config fields stay).
    pub fn set_fast_path(&self, on: bool) {
        let mut m: Array<MapData, NodeConfig> = self.map(abi::MAP_CONFIG);
        let mut c = m.get(&0, 0).unwrap();
        c.flags = (c.flags & !abi::MASQ_F_FAST_PATH) | if on { abi::MASQ_F_FAST_PATH } else { 0 };
        m.set(0, c, 0).unwrap();
    }

    /// natFiltering for the pod at `addr` (its NAT_FILTER_* bits in its pods4 and veths
    /// entries, as ADD writes them), and the node's flag that turns the lookups on.
    pub fn set_pod_filtering(&self, addr: Ipv4Addr, filter: u32) {
        let mut p4: HashMap<MapData, [u8; 4], PodInfo> = self.map(abi::MAP_PODS4);
        let mut p = p4.get(&addr.octets(), 0).expect("add the pod first");
        p.flags = (p.flags & !abi::NAT_FILTER_MASK) | filter;
        p4.insert(addr.octets(), p, 0).unwrap();
        if let Some(v) = self.veth_entry(p.ifindex) {
            maps::veth_put(&self.pins, p.ifindex, VethInfo { pod: p, ..v }).unwrap();
        }
        self.set_open_mappings(true);
    }

    /// node_config's MASQ_F_OPEN_MAPPINGS (the other flags stay).
    pub fn set_open_mappings(&self, on: bool) {
        let mut m: Array<MapData, NodeConfig> = self.map(abi::MAP_CONFIG);
        let mut c = m.get(&0, 0).unwrap();
        c.flags = (c.flags & !abi::MASQ_F_OPEN_MAPPINGS) | if on { abi::MASQ_F_OPEN_MAPPINGS } else { 0 };
        m.set(0, c, 0).unwrap();
    }

    /// The fast path's L2 facts for the pod behind veth `veth`: in each of its
    /// pods4/pods6 entries (as ADD writes them), so add the pod first.
    pub fn set_pod_l2(&self, veth: u32, l2: PodL2) {
        let mut p4: HashMap<MapData, [u8; 4], PodInfo> = self.map(abi::MAP_PODS4);
        let mine4: Vec<_> = p4.iter().map(Result::unwrap).filter(|(_, p)| p.ifindex == veth).collect();
        let mut p6: HashMap<MapData, [u8; 16], PodInfo> = self.map(abi::MAP_PODS6);
        let mine6: Vec<_> = p6.iter().map(Result::unwrap).filter(|(_, p)| p.ifindex == veth).collect();
        assert!(!(mine4.is_empty() && mine6.is_empty()), "set_pod_l2({veth}): no pod behind it yet");
        for (a, p) in mine4 {
            p4.insert(a, PodInfo { l2, ..p }, 0).unwrap();
        }
        for (a, p) in mine6 {
            p6.insert(a, PodInfo { l2, ..p }, 0).unwrap();
        }
        if let Some(v) = self.veth_entry(veth) {
            maps::veth_put(&self.pins, veth, VethInfo { pod: PodInfo { l2, ..v.pod }, ..v }).unwrap();
        }
    }

    /// An IPv6 serviceCIDRs entry.
    pub fn add_svc6(&self, net: std::net::Ipv6Addr, plen: u32) {
        let mut m: LpmTrie<MapData, [u8; 16], u32> = self.map(abi::MAP_SVC6);
        m.insert(&Key::new(plen, net.octets()), 0, 0).unwrap();
    }

    /// A serviceCIDRs entry (the fast path leaves these destinations to the stack).
    pub fn add_svc(&self, net: Ipv4Addr, plen: u32) {
        let mut m: LpmTrie<MapData, [u8; 4], u32> = self.map(abi::MAP_SVC4);
        m.insert(&Key::new(plen, net.octets()), 0, 0).unwrap();
    }

    /// An Ethernet uplink with an IPv4 masquerade address.
    pub fn add_uplink(&self, ifindex: u32, masq: Ipv4Addr) {
        let info = UplinkInfo { masq_v4: masq.octets(), flags: abi::UPLINK_F_HAS_V4, masq_v6: [0; 16] };
        maps::uplink_put(&self.pins, ifindex, info).unwrap();
    }

    /// An Ethernet uplink masquerading to a pool (masqueradeAddress with 2+ IPv4
    /// addresses): the uplink's own address is the first, the pool in masq_pool.
    pub fn add_uplink_pool(&self, ifindex: u32, pool: &[Ipv4Addr]) {
        let mut p = MasqPool { len4: pool.len() as u32, ..Default::default() };
        for (slot, a) in p.v4.iter_mut().zip(pool) {
            *slot = a.octets();
        }
        let mut m: Array<MapData, MasqPool> = self.map(abi::MAP_MASQ_POOL);
        m.set(0, p, 0).unwrap();
        let flags = abi::UPLINK_F_HAS_V4 | if pool.len() > 1 { abi::UPLINK_F_POOL4 } else { 0 };
        let info = UplinkInfo { masq_v4: pool[0].octets(), flags, masq_v6: [0; 16] };
        maps::uplink_put(&self.pins, ifindex, info).unwrap();
    }

    /// A pod address behind veth `ifindex`, and the veth's `veths` entry (counters
    /// zeroed, as ADD does; the veth's first address of each family goes in it).
    pub fn add_pod(&self, addr: Ipv4Addr, ifindex: u32, nat_outgoing: bool) {
        let mut pods: HashMap<MapData, [u8; 4], PodInfo> = self.map(abi::MAP_PODS4);
        let flags = if nat_outgoing { abi::POD_F_NAT_OUTGOING } else { 0 };
        let pod = PodInfo { ifindex, flags, ..Default::default() };
        pods.insert(addr.octets(), pod, 0).unwrap();
        self.veth_add_addr(ifindex, pod, addr.into());
    }

    /// A pod (nat_outgoing) of either family whose port limit is `limit` (0: none), as ADD writes it.
    pub fn add_pod_limited(&self, addr: std::net::IpAddr, ifindex: u32, limit: u16) {
        let flags = abi::POD_F_NAT_OUTGOING | u32::from(limit) << abi::PORT_LIMIT_SHIFT;
        let pod = PodInfo { ifindex, flags, ..Default::default() };
        match addr {
            std::net::IpAddr::V4(a) => {
                let mut pods: HashMap<MapData, [u8; 4], PodInfo> = self.map(abi::MAP_PODS4);
                pods.insert(a.octets(), pod, 0).unwrap();
            }
            std::net::IpAddr::V6(a) => {
                let mut pods: HashMap<MapData, [u8; 16], PodInfo> = self.map(abi::MAP_PODS6);
                pods.insert(a.octets(), pod, 0).unwrap();
            }
        }
        self.veth_add_addr(ifindex, pod, addr);
    }

    /// The veths entry of `ifindex` gains `addr` if its family's slot is free. The
    /// harness may put "pods" with different facts behind one veth (ADD never does):
    /// an address goes in only with the facts the entry already has, so every address
    /// the entry holds has them; the others are left to pods4/pods6.
    pub(super) fn veth_add_addr(&self, ifindex: u32, pod: PodInfo, addr: std::net::IpAddr) {
        let mut v = self.veth_entry(ifindex).unwrap_or(VethInfo { pod, ..Default::default() });
        if v.pod == pod {
            v.add_addr(addr);
        }
        maps::veth_put(&self.pins, ifindex, v).unwrap();
    }

    /// CPU 0's copy of the veths entry of `ifindex` (the facts are the same in every copy).
    pub fn veth_entry(&self, ifindex: u32) -> Option<VethInfo> {
        let m: PerCpuHashMap<MapData, u32, VethInfo> = self.map(abi::MAP_VETHS);
        m.get(&ifindex, 0).ok().map(|v| v[0])
    }

    pub fn add_excl(&self, net: Ipv4Addr, plen: u32, reason: u32) {
        let mut m: LpmTrie<MapData, [u8; 4], ExclInfo> = self.map(abi::MAP_EXCL4);
        m.insert(&Key::new(plen, net.octets()), ExclInfo { reason, index: 0 }, 0).unwrap();
    }

    /// pod_nets4: one of the node's pod ranges (as a learned subnet).
    pub fn add_pod_net(&self, net: Ipv4Addr, plen: u32) {
        let mut m: LpmTrie<MapData, [u8; 4], abi::PodNetInfo> = self.map(abi::MAP_POD_NETS4);
        m.insert(&Key::new(plen, net.octets()), abi::PodNetInfo { origin: abi::POD_NET_LEARNED, index: 0 }, 0).unwrap();
    }

    /// rules4 {ifindex, source/plen} -> rule `id`, masquerading to `to` when given.
    pub fn add_rule(&self, ifindex: u32, src: Ipv4Addr, plen: u32, id: u32, to: Option<Ipv4Addr>) {
        let mut m: LpmTrie<MapData, Rule4Data, RuleInfo> = self.map(abi::MAP_RULES4);
        let data = Rule4Data { ifindex_be: ifindex.to_be_bytes(), saddr: src.octets() };
        let info = RuleInfo {
            id,
            flags: if to.is_some() { abi::RULE_F_TO_ADDRESS } else { 0 },
            to_v4: to.map(|a| a.octets()).unwrap_or_default(),
            pad: 0,
        };
        m.insert(&Key::new(32 + plen, data), info, 0).unwrap();
    }

    /// add_rule with natFiltering bits (NAT_FILTER_*), masquerading to the uplink address.
    pub fn add_rule_filtered(&self, ifindex: u32, src: Ipv4Addr, plen: u32, id: u32, filter: u32) {
        let mut m: LpmTrie<MapData, Rule4Data, RuleInfo> = self.map(abi::MAP_RULES4);
        let data = Rule4Data { ifindex_be: ifindex.to_be_bytes(), saddr: src.octets() };
        m.insert(&Key::new(32 + plen, data), RuleInfo { id, flags: filter, to_v4: [0; 4], pad: 0 }, 0).unwrap();
    }

    pub fn add_rule_except(&self, id: u32, dst: Ipv4Addr, plen: u32) {
        let mut m: LpmTrie<MapData, RuleExcept4Data, u32> = self.map(abi::MAP_RULE_EXCEPT4);
        let data = RuleExcept4Data { rule_id_be: id.to_be_bytes(), daddr: dst.octets() };
        m.insert(&Key::new(32 + plen, data), 1, 0).unwrap();
    }

    // ---- running programs ----

    fn run(prog: &SchedClassifier, frame: &[u8]) -> Run {
        let mut out = vec![0u8; frame.len() + 256];
        let res = prog
            .test_run(TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), ..Default::default() })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(res.data_size_out as usize);
        Run { ret: res.return_value as i32, out }
    }

    /// Kernel-measured run time (ns) of one run of a program on `frame`
    /// ("egress", "ingress" or "veth"), for the micro-benchmarks.
    pub fn timed(&self, prog: &str, frame: &[u8]) -> (i32, u64) {
        self.timed_ctx(prog, frame, None)
    }

    /// `timed` with a `struct __sk_buff` context (see run_ctx).
    pub fn timed_ctx(&self, prog: &str, frame: &[u8], ctx: Option<&[u8; SKB_CTX_LEN]>) -> (i32, u64) {
        let prog = match prog {
            "egress" => &self.egress,
            "ingress" => &self.ingress,
            _ => &self.veth,
        };
        let mut out = vec![0u8; frame.len() + 256];
        let res = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: ctx.map(|c| &c[..]),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        (res.return_value as i32, res.duration.as_nanos() as u64)
    }

    /// Run a program ("egress", "ingress" or "veth") with a `struct __sk_buff`
    /// context `ctx` (192 bytes; test_run accepts mark, priority, cb[], tstamp,
    /// gso_segs, gso_size...). Returns the run and the context after it.
    pub fn run_ctx(&self, prog: &str, frame: &[u8], ctx: &[u8; SKB_CTX_LEN]) -> (Run, [u8; SKB_CTX_LEN]) {
        let prog = match prog {
            "egress" => &self.egress,
            "ingress" => &self.ingress,
            _ => &self.veth,
        };
        let mut out = vec![0u8; frame.len() + 256];
        let mut ctx_out = [0u8; SKB_CTX_LEN];
        let res = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(ctx),
                ctx_out: Some(&mut ctx_out),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(res.data_size_out as usize);
        (Run { ret: res.return_value as i32, out }, ctx_out)
    }

    /// Uplink egress (SNAT).
    pub fn egress(&self, frame: &[u8]) -> Run {
        Self::run(&self.egress, frame)
    }
    /// Uplink ingress (reverse NAT).
    pub fn ingress(&self, frame: &[u8]) -> Run {
        Self::run(&self.ingress, frame)
    }
    /// Pod veth ingress (anti-spoofing, pod stats).
    pub fn veth(&self, frame: &[u8]) -> Run {
        Self::run(&self.veth, frame)
    }

    // ---- reading state ----

    fn sum_percpu(&self, name: &str, idx: u32) -> u64 {
        let m: PerCpuArray<MapData, u64> = self.map(name);
        m.get(&idx, 0).unwrap().iter().sum()
    }
    /// A `counters` entry (abi::counter::*), summed over CPUs.
    pub fn counter(&self, idx: u32) -> u64 {
        self.sum_percpu(abi::MAP_COUNTERS, idx)
    }
    /// The expiry sweep's state (`nat_gc`).
    pub fn nat_gc(&self) -> NatGc {
        let m: Array<MapData, NatGc> = self.map(abi::MAP_NAT_GC);
        m.get(&0, 0).unwrap()
    }
    /// A `drops` entry (drop::*), summed over CPUs.
    pub fn drops(&self, reason: u32) -> u64 {
        self.sum_percpu(abi::MAP_DROPS, reason)
    }
    pub fn total_drops(&self) -> u64 {
        (0..abi::drop_reason::MAX).map(|r| self.drops(r)).sum()
    }

    pub fn rule_stats(&self, id: u32) -> RuleStats {
        let m: PerCpuArray<MapData, RuleStats> = self.map(abi::MAP_RULE_STATS);
        m.get(&id, 0)
            .unwrap()
            .iter()
            .fold(RuleStats::default(), |a, s| RuleStats { packets: a.packets + s.packets, bytes: a.bytes + s.bytes })
    }

    pub fn pod_stats(&self, ifindex: u32) -> PodStats {
        let m: PerCpuHashMap<MapData, u32, VethInfo> = self.map(abi::MAP_VETHS);
        m.get(&ifindex, 0).unwrap().iter().map(|v| v.stats).fold(PodStats::default(), |a, s| PodStats {
            packets: a.packets + s.packets,
            bytes: a.bytes + s.bytes,
            spoofed: a.spoofed + s.spoofed,
        })
    }

}

impl Drop for Dataplane {
    fn drop(&mut self) {
        let Some((nat_max_entries, snapshot)) = self.kept.take() else {
            return remove_pin_dir(&self.pins.base);
        };
        let k = Kept { nat_max_entries, pins: self.pins.clone(), snapshot };
        POOL.give_back(k, remove_kept);
    }
}

struct PinGuard(PathBuf);
impl Drop for PinGuard {
    fn drop(&mut self) {
        remove_pin_dir(&self.0);
    }
}

#[allow(unused_imports)] // (each test module takes what it needs)
pub use super::pairs::{nat_entry, nat_key, reverse_key};
#[allow(unused_imports)]
pub use super::harness6::{frag4_entry, frag6_entry, nat6_key, reverse_key6, Frag4Key, Frag6Key, FragPorts};
