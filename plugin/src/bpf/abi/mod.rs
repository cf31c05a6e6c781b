//! `#[repr(C)]` mirrors of bpf/include/masq_abi.h (the NAT tables' part in nat_tables.rs).
//! Sizes are asserted at compile time against the same numbers the C side asserts
//! with `_Static_assert`; tests.rs holds every constant, size and member offset
//! against the header and the compiled objects' BTF. Addresses and ports are kept
//! in network byte order, exactly as in the maps.

#![allow(dead_code)]

mod nat_tables;
pub use nat_tables::*;

pub const LAYOUT_VERSION: u32 = 16;

// Map names (pinned by name under <pinPath>/v<LAYOUT_VERSION>/maps/).
pub const MAP_CONFIG: &str = "masq_config";
pub const MAP_PODS4: &str = "pods4";
pub const MAP_PODS6: &str = "pods6";
pub const MAP_UPLINKS: &str = "uplinks";
pub const MAP_UPLINKS_DIRECT: &str = "uplinks_direct";
pub const MAP_EXCL4: &str = "excl4";
pub const MAP_EXCL6: &str = "excl6";
pub const MAP_RULES4: &str = "rules4";
pub const MAP_RULE_EXCEPT4: &str = "rule_except4";
pub const MAP_RULE_STATS: &str = "rule_stats";
pub const MAP_NAT4_FWD: &str = "nat4_fwd";
pub const MAP_NAT4_REV: &str = "nat4_rev";
pub const MAP_VETHS: &str = "veths";
pub const MAP_COUNTERS: &str = "counters";
pub const MAP_DROPS: &str = "drops";
pub const MAP_ATTACHMENTS: &str = "attachments";
pub const MAP_RULES6: &str = "rules6";
pub const MAP_RULE_EXCEPT6: &str = "rule_except6";
pub const MAP_NAT6_FWD: &str = "nat6_fwd";
pub const MAP_NAT6_REV: &str = "nat6_rev";
pub const MAP_NAT_GC: &str = "nat_gc";
pub const MAP_RESERVED_PORTS: &str = "reserved_ports";
pub const MAP_FRAG4: &str = "frag4";
pub const MAP_FRAG6: &str = "frag6";
/// Layout 6 and before: the pods' L2 facts, by veth ifindex (now in `PodInfo`);
/// read only when adopting such a data plane.
pub const MAP_POD_L2: &str = "pod_l2";
pub const MAP_SVC4: &str = "svc4";
pub const MAP_SVC6: &str = "svc6";
pub const MAP_NAT4_BIND: &str = "nat4_bind";
pub const MAP_NAT6_BIND: &str = "nat6_bind";
pub const MAP_NAT4_OPEN: &str = "nat4_open";
pub const MAP_NAT6_OPEN: &str = "nat6_open";
pub const MAP_NAT4_PERMIT: &str = "nat4_permit";
pub const MAP_NAT6_PERMIT: &str = "nat6_permit";
pub const MAP_POD_META: &str = "pod_meta";
pub const MAP_MASQ_POOL: &str = "masq_pool";
pub const MAP_HOST_PORTS: &str = "host_ports";
pub const MAP_EGRESS4: &str = "egress4";
pub const MAP_EGRESS6: &str = "egress6";
pub const MAP_EGRESS_STATS: &str = "egress_stats";
pub const MAP_EGRESS_POLICIES: &str = "egress_policies";
pub const MAP_NAT_HOT: &str = "nat_hot";
pub const MAP_NAT_HOT_ZERO: &str = "nat_hot_zero";
pub const MAP_REFUSALS: &str = "refusals";
pub const MAP_PORT_COUNTS: &str = "port_counts";

/// Every map the objects define: a node is only loaded when all of them are pinned.
pub const ALL_MAPS: [&str; 43] = [
    MAP_CONFIG, MAP_PODS4, MAP_PODS6, MAP_UPLINKS, MAP_UPLINKS_DIRECT, MAP_EXCL4, MAP_EXCL6, MAP_RULES4,
    MAP_RULE_EXCEPT4, MAP_RULE_STATS, MAP_NAT4_FWD, MAP_NAT4_REV, MAP_VETHS, MAP_COUNTERS, MAP_DROPS,
    MAP_ATTACHMENTS, MAP_RULES6, MAP_RULE_EXCEPT6, MAP_NAT6_FWD, MAP_NAT6_REV, MAP_FRAG4, MAP_FRAG6, MAP_SVC4,
    MAP_SVC6, MAP_NAT_GC, MAP_RESERVED_PORTS, MAP_NAT4_BIND, MAP_NAT6_BIND, MAP_NAT4_OPEN,
    MAP_NAT6_OPEN, MAP_NAT4_PERMIT, MAP_NAT6_PERMIT, MAP_POD_META, MAP_MASQ_POOL,
    MAP_HOST_PORTS, MAP_EGRESS4, MAP_EGRESS6, MAP_EGRESS_STATS, MAP_EGRESS_POLICIES, MAP_NAT_HOT, MAP_NAT_HOT_ZERO,
    MAP_REFUSALS, MAP_PORT_COUNTS,
];

pub const MAX_RULES: u32 = 256;

/// LRU maps are preallocated whole, so the mapping hints (nat4_bind/nat6_bind) hold at
/// most this many pod endpoints (~64 and ~96 bytes each), not natMaxEntries: past it the
/// least recently mapped endpoints lose their hint (their next flow may get a new port).
pub const BIND_ENTRIES_MAX: u32 = 65_536;
/// The same for natFiltering's open mappings and address permits (nat*_open, nat*_permit).
pub const OPEN_ENTRIES_MAX: u32 = 16_384;

/// `struct masq_config`, the one entry of the `masq_config` map: the node-wide
/// settings as the programs read them (`config::MasqConfig` is the plugin's
/// parsed options, which `node` writes into this).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeConfig {
    pub port_min: u16,
    pub port_max: u16,
    pub flags: u32,
    pub tcp_timeout_s: u32,
    pub tcp_closing_timeout_s: u32,
    pub udp_timeout_s: u32,
    pub icmp_timeout_s: u32,
    /// Keys the NAT shard hash (`nat_shard`): random per node, chosen by the loader and kept.
    pub nat_seed: u32,
    /// Forward shards in use (a power of two, at most NAT_SHARDS_MAX), chosen by the loader.
    pub nat_shards: u32,
    /// Ports inside [port_min, port_max] never handed out (nodePortRange); {0, 0}: none.
    pub skip_min: u16,
    pub skip_max: u16,
    /// natTimeouts.udpOneShot: a UDP pair whose packets all came within 2 s of its first.
    pub udp_one_shot_timeout_s: u32,
}

/// `masq_config.flags`: fastPath is on.
pub const MASQ_F_FAST_PATH: u32 = 0x1;
/// `masq_config.flags`: some pod or rule has a natFiltering other than the default (sticky).
pub const MASQ_F_OPEN_MAPPINGS: u32 = 0x2;
/// `__sk_buff.cb[0]` of a packet the fast path translated and redirected to an uplink:
/// the uplink's egress program passes it on without a lookup.
pub const FP_CB_MARK: u32 = 0x6d61_fa57;
/// natFiltering bits, in pod_info, rule_info/rule6_info and attachment_info flags alike.
pub const NAT_FILTER_AD: u32 = 0x2;
pub const NAT_FILTER_EI: u32 = 0x4;
pub const NAT_FILTER_MASK: u32 = NAT_FILTER_AD | NAT_FILTER_EI;

pub const POD_F_NAT_OUTGOING: u32 = 0x1;
/// `pod_info.flags` and `attachment_info.flags` bits 16-31: the pod's port limit (0: none).
pub const PORT_LIMIT_SHIFT: u32 = 16;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub ifindex: u32,
    pub flags: u32,
    /// The fast path's L2 facts, in every address entry of the pod.
    pub l2: PodL2,
    /// The egressPolicies that select the pod: bit i = policy i (0: none).
    pub egress: u32,
}

/// `struct pod_l2` (in `PodInfo`; layout 6 and before: map pod_l2, key: host-side
/// veth ifindex): what the fast path needs to move a pod's packets without the host stack.
pub const POD_L2_F_HAS_MAC: u32 = 0x1;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodL2 {
    pub pod_mac: [u8; 6],
    pub gw_mac: [u8; 6],
    pub l3_ifindex: u32,
    pub flags: u32,
}

pub const UPLINK_F_L3: u32 = 0x1;
pub const UPLINK_F_HAS_V4: u32 = 0x2;
pub const UPLINK_F_HAS_V6: u32 = 0x4;
/// Sources take their address from `masq_pool` (masqueradeAddress lists 2+ of the family).
pub const UPLINK_F_POOL4: u32 = 0x8;
pub const UPLINK_F_POOL6: u32 = 0x10;
/// In `uplinks_direct` only: the slot holds an uplink.
pub const UPLINK_F_PRESENT: u32 = 0x80;
/// Addresses of one family a `masq_pool` holds.
pub const MASQ_POOL_MAX: usize = 64;
/// `struct masq_pool`: slot 0, masqueradeAddress's pool (paired: a source always
/// takes v4[low 32 bits of its address % len4]); slot 1 + i, egress policy i's
/// addresses (one is enough there).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasqPool {
    pub len4: u32,
    pub len6: u32,
    pub v4: [[u8; 4]; MASQ_POOL_MAX],
    pub v6: [[u8; 16]; MASQ_POOL_MAX],
}

impl Default for MasqPool {
    fn default() -> Self {
        MasqPool { len4: 0, len6: 0, v4: [[0; 4]; MASQ_POOL_MAX], v6: [[0; 16]; MASQ_POOL_MAX] }
    }
}

/// Egress policies (egressPolicies): at most this many, a pod's are a u32 mask.
pub const EGRESS_POLICIES_MAX: u32 = 32;
/// Entries of egress4 / egress6 (the flattened (mask, destination) pairs).
pub const EGRESS_ENTRIES_MAX: u32 = 4096;
/// natOutgoing: false: the destination is not masqueraded.
pub const EGRESS_F_NO_NAT: u32 = 0x1;
/// `struct egress4_key` without its prefixlen (aya's `Key` holds it): the pod's
/// policy mask, then the destination.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Egress4Data {
    pub set: u32,
    pub daddr: [u8; 4],
}
/// `struct egress6_key` without its prefixlen.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Egress6Data {
    pub set: u32,
    pub daddr: [u8; 16],
}
/// `struct egress_hit`: the policy a (mask, destination) entry names.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressHit {
    pub policy: u32,
    pub flags: u32,
}
pub const EGRESS_NAME_LEN: usize = 64;
pub const EGRESS_SPEC_LEN: usize = 1976;
/// `struct egress_policy`: what policy i is, for status, nat list, explain and
/// metrics (the programs never read it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EgressPolicyInfo {
    pub used: u32,
    pub flags: u32,
    pub name: [u8; EGRESS_NAME_LEN],
    pub spec: [u8; EGRESS_SPEC_LEN],
}
impl Default for EgressPolicyInfo {
    fn default() -> Self {
        EgressPolicyInfo { used: 0, flags: 0, name: [0; EGRESS_NAME_LEN], spec: [0; EGRESS_SPEC_LEN] }
    }
}
/// `struct egress_stats` (per CPU, per policy).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressStats {
    pub packets: u64,
    pub bytes: u64,
    pub flows: u64,
    pub unmasqueraded: u64,
}

impl MasqPool {
    /// A policy's (or any slot's) address for `src`: as `pick`, but one address is
    /// enough (the data plane's egress_policy_v4/v6).
    pub fn pick_any(&self, src: std::net::IpAddr) -> Option<std::net::IpAddr> {
        match src {
            std::net::IpAddr::V4(a) if self.len4 >= 1 => {
                let i = u32::from(a) % self.len4;
                Some(std::net::Ipv4Addr::from(self.v4[i as usize]).into())
            }
            std::net::IpAddr::V6(a) if self.len6 >= 1 => {
                let o = a.octets();
                let i = u32::from_be_bytes([o[12], o[13], o[14], o[15]]) % self.len6;
                Some(std::net::Ipv6Addr::from(self.v6[i as usize]).into())
            }
            _ => None,
        }
    }

    /// The pool's address for source `src` (the data plane's masq_addr_v4/v6), or
    /// None when the pool has fewer than two of the family.
    pub fn pick(&self, src: std::net::IpAddr) -> Option<std::net::IpAddr> {
        match src {
            std::net::IpAddr::V4(a) if self.len4 > 1 => {
                let i = u32::from(a) % self.len4;
                Some(std::net::Ipv4Addr::from(self.v4[i as usize]).into())
            }
            std::net::IpAddr::V6(a) if self.len6 > 1 => {
                let o = a.octets();
                let i = u32::from_be_bytes([o[12], o[13], o[14], o[15]]) % self.len6;
                Some(std::net::Ipv6Addr::from(self.v6[i as usize]).into())
            }
            _ => None,
        }
    }
}

/// Uplinks with an ifindex below this also have a slot in `uplinks_direct`.
pub const UPLINKS_DIRECT: u32 = 4096;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UplinkInfo {
    pub masq_v4: [u8; 4],
    pub flags: u32,
    pub masq_v6: [u8; 16],
}

pub const EXCL_NATIVE_ROUTING: u32 = 1;
pub const EXCL_NON_MASQ: u32 = 2;
pub const EXCL_LINK_LOCAL: u32 = 3;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExclInfo {
    pub reason: u32,
    pub index: u32,
}

/// Data part of `struct rule4_key` (the LPM prefix length is aya's `Key`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule4Data {
    pub ifindex_be: [u8; 4],
    pub saddr: [u8; 4],
}
pub const RULE_F_TO_ADDRESS: u32 = 0x1;
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleInfo {
    pub id: u32,
    pub flags: u32,
    pub to_v4: [u8; 4],
    pub pad: u32,
}
/// Data part of `struct rule_except4_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleExcept4Data {
    pub rule_id_be: [u8; 4],
    pub daddr: [u8; 4],
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleStats {
    pub packets: u64,
    pub bytes: u64,
}

/// Data part of `struct rule6_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule6Data {
    pub ifindex_be: [u8; 4],
    pub saddr: [u8; 16],
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rule6Info {
    pub id: u32,
    pub flags: u32,
    pub to_v6: [u8; 16],
}
/// Data part of `struct rule_except6_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleExcept6Data {
    pub rule_id_be: [u8; 4],
    pub daddr: [u8; 16],
}

/// Slots of `reserved_ports`.
pub const RESERVED_PORTS_MAX: u32 = 64;

/// `struct port_range` (`reserved_ports` value): ports in host byte order, {0, 0} = free.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodStats {
    pub packets: u64,
    pub bytes: u64,
    pub spoofed: u64,
}

/// `veths.flags`: `addr4` holds one of the pod's IPv4 addresses.
pub const VETH_F_ADDR4: u32 = 0x1;
/// `veths.flags`: `addr6` holds one of the pod's IPv6 addresses.
pub const VETH_F_ADDR6: u32 = 0x2;
/// `struct veth_info` (map veths, PERCPU_HASH, key: host-side veth ifindex): what
/// the pod veth program needs about the pod behind the veth, in its one lookup per
/// packet. The same facts in every CPU's copy; the counters are that CPU's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VethInfo {
    pub stats: PodStats,
    pub pod: PodInfo,
    pub addr4: [u8; 4],
    pub addr6: [u8; 16],
    pub flags: u32,
}

impl VethInfo {
    /// The entry for a pod with facts `pod` and addresses `addrs`: the first of
    /// each family goes in (the rest are checked in pods4/pods6), counters zero.
    pub fn new(pod: PodInfo, addrs: &[std::net::IpAddr]) -> VethInfo {
        let mut v = VethInfo { pod, ..Default::default() };
        for a in addrs {
            v.add_addr(*a);
        }
        v
    }

    /// This entry without `a` (the same entry if it does not hold it).
    pub fn without_addr(&self, a: std::net::IpAddr) -> VethInfo {
        let mut v = *self;
        match a {
            std::net::IpAddr::V4(v4) if v.flags & VETH_F_ADDR4 != 0 && v.addr4 == v4.octets() => {
                v.flags &= !VETH_F_ADDR4;
                v.addr4 = [0; 4];
            }
            std::net::IpAddr::V6(v6) if v.flags & VETH_F_ADDR6 != 0 && v.addr6 == v6.octets() => {
                v.flags &= !VETH_F_ADDR6;
                v.addr6 = [0; 16];
            }
            _ => {}
        }
        v
    }

    /// Take `a` as the pod's address of its family unless one is there already.
    pub fn add_addr(&mut self, a: std::net::IpAddr) {
        match a {
            std::net::IpAddr::V4(v4) if self.flags & VETH_F_ADDR4 == 0 => {
                self.addr4 = v4.octets();
                self.flags |= VETH_F_ADDR4;
            }
            std::net::IpAddr::V6(v6) if self.flags & VETH_F_ADDR6 == 0 => {
                self.addr6 = v6.octets();
                self.flags |= VETH_F_ADDR6;
            }
            _ => {}
        }
    }
}

pub const ATT_ID_LEN: usize = 72;
pub const ATT_IFNAME_LEN: usize = 16;
pub const ATT_MAX_ADDRS: usize = 4;
pub const ATT_F_NAT_OUTGOING: u32 = 0x1;
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttachmentKey {
    pub container_id: [u8; ATT_ID_LEN],
    pub ifname: [u8; ATT_IFNAME_LEN],
}
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttachmentInfo {
    pub veth_ifindex: u32,
    pub flags: u32,
    pub n_v4: u32,
    pub n_v6: u32,
    pub v4: [[u8; 4]; ATT_MAX_ADDRS],
    pub v6: [[u8; 16]; ATT_MAX_ADDRS],
    pub created_ns: u64,
    pub veth_name: [u8; 16],
}

pub const POD_META_NS_LEN: usize = 64;
pub const POD_META_NAME_LEN: usize = 256;
pub const POD_META_ANN_LEN: usize = 1024;
/// struct pod_meta: who the pod of an attachment is (NUL padded strings).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodMeta {
    pub k8s_namespace: [u8; POD_META_NS_LEN],
    pub k8s_name: [u8; POD_META_NAME_LEN],
    pub annotations: [u8; POD_META_ANN_LEN],
    /// The pod's hostPorts (runtimeConfig portMappings); a zero port ends the list.
    pub host_ports: [HostPort; POD_HOST_PORTS_MAX],
}

impl Default for PodMeta {
    fn default() -> Self {
        PodMeta {
            k8s_namespace: [0; POD_META_NS_LEN],
            k8s_name: [0; POD_META_NAME_LEN],
            annotations: [0; POD_META_ANN_LEN],
            host_ports: [HostPort::default(); POD_HOST_PORTS_MAX],
        }
    }
}

/// hostPorts one pod's record holds.
pub const POD_HOST_PORTS_MAX: usize = 16;
/// Entries of `host_ports`.
pub const HOST_PORTS_MAX: u32 = 4096;
/// `struct host_port`: a hostPort (port in host byte order, IPPROTO_TCP/UDP), the
/// key of `host_ports` (whose values are unused).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub port: u16,
    pub proto: u8,
    pub pad: u8,
}

/// Counter indexes (enum masq_counter).
pub mod counter {
    pub const SNAT_PKTS_V4: u32 = 0;
    pub const SNAT_BYTES_V4: u32 = 1;
    pub const RNAT_PKTS_V4: u32 = 2;
    pub const RNAT_BYTES_V4: u32 = 3;
    pub const SNAT_PKTS_V6: u32 = 4;
    pub const SNAT_BYTES_V6: u32 = 5;
    pub const RNAT_PKTS_V6: u32 = 6;
    pub const RNAT_BYTES_V6: u32 = 7;
    pub const NAT_CREATED: u32 = 8;
    pub const NAT_RECLAIMED: u32 = 9;
    pub const NAT_EXPIRED: u32 = 10;
    pub const ALLOC_FAIL: u32 = 11;
    pub const SKIP_EXCLUDED: u32 = 12;
    pub const SKIP_NO_NAT_OUTGOING: u32 = 13;
    pub const ICMP_ERR_IN: u32 = 14;
    pub const ICMP_ERR_OUT: u32 = 15;
    pub const FRAGS: u32 = 16;
    pub const FP_EGRESS: u32 = 17;
    pub const FP_INGRESS: u32 = 18;
    pub const FP_FALLBACK: u32 = 19;
    pub const PORT_PROBES: u32 = 20;
    pub const NAT_GC_ARM_FAILED: u32 = 21;
    pub const INBOUND_CREATED: u32 = 22;
    pub const INBOUND_PKTS: u32 = 23;
    pub const INBOUND_UNTRACKED: u32 = 24;
    pub const MAP_REUSED: u32 = 25;
    pub const MAP_PRESERVED: u32 = 26;
    pub const NAT_FINISHED_REUSED: u32 = 27;
    pub const FILTER_ADMITTED: u32 = 28;
    pub const HOST_TRACKED: u32 = 29;
    pub const HOST_REMAPPED: u32 = 30;
    pub const HOST_SOCKET_AVOIDED: u32 = 31;
    pub const NAT_UNANSWERED_REUSED: u32 = 32;
    pub const NAT_HOT_SCANS: u32 = 33;
    pub const NAT_HOT_FOUND: u32 = 34;
    pub const MAX: u32 = 35;
    pub const NAMES: [&str; MAX as usize] = [
        "snat_packets_v4",
        "snat_bytes_v4",
        "rnat_packets_v4",
        "rnat_bytes_v4",
        "snat_packets_v6",
        "snat_bytes_v6",
        "rnat_packets_v6",
        "rnat_bytes_v6",
        "nat_created",
        "nat_reclaimed",
        "nat_expired",
        "port_alloc_failures",
        "skipped_excluded",
        "skipped_nat_outgoing_false",
        "icmp_errors_to_pods",
        "icmp_errors_outward",
        "fragments_translated",
        "fastpath_egress",
        "fastpath_ingress",
        "fastpath_fallback",
        "port_probes",
        "nat_expiry_arm_failures",
        "inbound_flows_tracked",
        "inbound_packets_untranslated",
        "inbound_flows_untracked",
        "mappings_reused",
        "ports_preserved",
        "nat_finished_reused",
        "filter_admitted",
        "host_flows_tracked",
        "host_flows_remapped",
        "host_socket_ports_avoided",
        "nat_unanswered_reused",
        "nat_hot_scans",
        "nat_hot_found",
    ];
}

/// Drop reasons (enum masq_drop_reason).
pub mod drop_reason {
    pub const SPOOFED_SOURCE: u32 = 0;
    pub const NO_PORT: u32 = 1;
    pub const NAT_INSERT: u32 = 2;
    pub const FRAGMENT: u32 = 3;
    pub const MALFORMED: u32 = 4;
    pub const CSUM: u32 = 5;
    pub const UNSUPPORTED_PROTO: u32 = 6;
    pub const FRAG_NO_STATE: u32 = 7;
    pub const NAT_FULL: u32 = 8;
    pub const OVER_SHARE: u32 = 9;
    pub const OVER_LIMIT: u32 = 10;
    pub const MAX: u32 = 11;
    pub const NAMES: [&str; MAX as usize] = [
        "spoofed_source",
        "no_port",
        "nat_insert",
        "fragment",
        "malformed",
        "checksum",
        "unsupported_protocol",
        "fragment_without_state",
        "nat_table_full",
        "over_share",
        "over_limit",
    ];
}

macro_rules! aya_pod {
    ($($t:ty = $size:expr),* $(,)?) => {
        $(
            unsafe impl aya::Pod for $t {}
            const _: () = assert!(std::mem::size_of::<$t>() == $size);
        )*
    };
}

aya_pod! {
    PodMeta = 1408,
    HostPort = 4,
    NodeConfig = 40,
    PodInfo = 32,
    Egress4Data = 8,
    Egress6Data = 20,
    EgressHit = 8,
    EgressStats = 32,
    EgressPolicyInfo = 2048,
    PodL2 = 20,
    UplinkInfo = 24,
    ExclInfo = 8,
    Rule4Data = 8,
    RuleInfo = 16,
    RuleExcept4Data = 8,
    RuleStats = 16,
    Rule6Data = 20,
    Rule6Info = 24,
    RuleExcept6Data = 20,
    Nat6Key = 40,
    Nat6Entry = 72,
    Frag4Key = 12,
    Frag6Key = 40,
    FragPorts = 8,
    Nat4Key = 16,
    Nat4Entry = 56,
    Nat4Ep = 8,
    Nat4Bind = 8,
    Nat6Ep = 20,
    Nat6Bind = 20,
    Nat4Open = 24,
    Nat6Open = 40,
    Nat4PermitKey = 12,
    Nat4Permit = 16,
    Nat6PermitKey = 36,
    Nat6Permit = 24,
    PodStats = 24,
    VethInfo = 80,
    NatGc = 128,
    NatHotKey = 36,
    NatHotSrc = 8,
    NatHot = 8728,
    RefusalKey = 20,
    Refusals = 24,
    PortCountKey = 52,
    PortRange = 4,
    MasqPool = 1288,
    AttachmentKey = 88,
    AttachmentInfo = 120,
}

#[cfg(test)]
mod btf;
#[cfg(test)]
mod tests;
