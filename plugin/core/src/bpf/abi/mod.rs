//! Rust's view of bpf/include/masq_abi.h: the structs, #defines and enums bindgen
//! generates from it at build time (generated.rs), under the names the crate uses,
//! with what the generated types lack on top: aya's `Pod`, the LPM keys' data parts,
//! address helpers, and the map names (C identifiers in bpf/lib/, not header values).
//! tests.rs holds every generated struct against the compiled objects' BTF.
//! Addresses and ports are kept in network byte order, exactly as in the maps.

#![allow(dead_code)]

mod generated;
mod nat_tables;

pub use generated::{
    attachment_info as AttachmentInfo, attachment_key as AttachmentKey, policy_hit as PolicyHit,
    egress_policy as EgressPolicyInfo, policy_stats as PolicyStats, events_ctl as EventsCtl, excl_info as ExclInfo, pod_net_info as PodNetInfo, frag4_key as Frag4Key,
    frag6_key as Frag6Key, frag_ports as FragPorts, host_port as HostPort, node_config as NodeConfig,
    masq_event as MasqEvent, masq_pool as MasqPool, nat4_bind as Nat4Bind, nat4_entry as Nat4Entry, nat4_ep as Nat4Ep, nat4_key as Nat4Key,
    nat4_open as Nat4Open, nat4_permit as Nat4Permit, nat4_permit_key as Nat4PermitKey, nat6_bind as Nat6Bind,
    nat6_entry as Nat6Entry, nat6_ep as Nat6Ep, nat6_key as Nat6Key, nat6_open as Nat6Open,
    nat6_permit as Nat6Permit, nat6_permit_key as Nat6PermitKey, nat_gc as NatGc, nat_hot as NatHot,
    nat_hot_key as NatHotKey, nat_hot_src as NatHotSrc, pod_info as PodInfo, pod_l2 as PodL2, pod_meta as PodMeta,
    pod_stats as PodStats, port_count_key as PortCountKey, port_range as PortRange, refusal_key as RefusalKey,
    refusals as Refusals, rule6_info as Rule6Info, rule_info as RuleInfo, rule_stats as RuleStats,
    uplink_info as UplinkInfo, veth_info as VethInfo,
};
// Every #define and enum member (but the counters' and drops', in their modules below).
pub use generated::{
    ATT_F_FOUND, ATT_F_NAT_OUTGOING, ATT_ID_LEN, ATT_IFNAME_LEN, ATT_MAX_ADDRS, POLICY_DSTS_MAX, POLICY_F_NO_NAT,
    EGRESS_NAME_LEN, EGRESS_POLICIES_MAX, POLICY_SPEC_LEN, EXCL_LINK_LOCAL, EXCL_NATIVE_ROUTING, EXCL_NON_MASQ,
    POD_NETS_MAX, POD_NET_CONFIGURED, POD_NET_LEARNED,
    FP_CB_MARK, HOST_PORTS_MAX, MASQ_F_FAST_PATH, MASQ_F_OPEN_MAPPINGS, MASQ_LAYOUT_VERSION as LAYOUT_VERSION,
    MASQ_POOL_MAX, MAX_RULES, NAT_C_ACKED_PEER, NAT_C_FIN_FIRST, NAT_C_PEER_FIN, NAT_FILTER_AD, NAT_FILTER_EI,
    NAT_FILTER_MASK, NAT_F_BY_RULE, NAT_F_ENDS, NAT_F_FAST, NAT_F_FIN, NAT_F_HOST, NAT_F_INBOUND, NAT_F_OPEN,
    NAT_F_RST, NAT_F_TCP_CLOSING, NAT_GC_ARMED, NAT_GC_NEW4, NAT_GC_NEW6, NAT_GC_NEW_HOST, NAT_GC_SEEN_HOST,
    NAT_GC_PRIME_MARK, NAT_GC_PRIME_RET, NAT_GC_WALK6, NAT_HOT_IDLE_S, NAT_HOT_MAX, NAT_HOT_SLOTS, NAT_HOT_WORDS, NAT_MAP_FLAGS, NAT_SHARDS_MAX,
    NAT_SHARD_ENTRIES, NAT_SHARE_RESERVE, POD_F_NAT_OUTGOING, POD_HOST_PORTS_MAX, POD_L2_F_HAS_MAC,
    POD_META_ANN_LEN, POD_META_NAME_LEN, POD_META_NS_LEN, PORT_COUNTS_MAX, PORT_LIMIT_SHIFT, REFUSALS_MAX,
    RESERVED_PORTS_MAX, RULE_F_TO_ADDRESS, UPLINKS_DIRECT, UPLINK_F_HAS_V4, UPLINK_F_HAS_V6, UPLINK_F_L3,
    UPLINK_F_POOL4, UPLINK_F_POOL6, UPLINK_F_PRESENT, VETH_F_ADDR4, VETH_F_ADDR6,
};
// The events' (masq_abi_events.h).
pub use generated::{
    EVENTS_LEASE_NS, EVENTS_LIVE_RING_BYTES, EVENTS_LOG_RING_BYTES, EV_DROP, EV_DROP_F_IN, EV_END_CLOSED, EV_END_EXPIRED, EV_END_POD_DELETED,
    EV_END_TAKEN_OVER, EV_PAIR_ENDED, EV_PAIR_MADE, EV_REFUSED_LIMIT, EV_REFUSED_NO_PORT, EV_REFUSED_SHARE,
};
pub use nat_tables::*;

// Map names (pinned by name under <pinPath>/v<LAYOUT_VERSION>/maps/).
pub const MAP_CONFIG: &str = "node_config";
pub const MAP_PODS4: &str = "pods4";
pub const MAP_PODS6: &str = "pods6";
pub const MAP_UPLINKS: &str = "uplinks";
pub const MAP_UPLINKS_DIRECT: &str = "uplinks_direct";
pub const MAP_EXCL4: &str = "excl4";
pub const MAP_EXCL6: &str = "excl6";
pub const MAP_POD_NETS4: &str = "pod_nets4";
pub const MAP_POD_NETS6: &str = "pod_nets6";
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
pub const MAP_POLICY_DST4: &str = "policy_dst4";
pub const MAP_POLICY_DST6: &str = "policy_dst6";
pub const MAP_POLICY_STATS: &str = "policy_stats";
pub const MAP_EGRESS_POLICIES: &str = "egress_policies";
pub const MAP_NAT_HOT: &str = "nat_hot";
pub const MAP_NAT_HOT_ZERO: &str = "nat_hot_zero";
pub const MAP_REFUSALS: &str = "refusals";
pub const MAP_PORT_COUNTS: &str = "port_counts";
/// The events' rings and their leases (masq_abi_events.h).
pub const MAP_EVENTS_LOG: &str = "events_log";
pub const MAP_EVENTS_LIVE: &str = "events_live";
pub const MAP_EVENTS_CTL: &str = "events_ctl";

/// Every map the objects define: a node is only loaded when all of them are pinned.
pub const ALL_MAPS: [&str; 48] = [
    MAP_CONFIG, MAP_PODS4, MAP_PODS6, MAP_UPLINKS, MAP_UPLINKS_DIRECT, MAP_EXCL4, MAP_EXCL6, MAP_RULES4,
    MAP_RULE_EXCEPT4, MAP_RULE_STATS, MAP_NAT4_FWD, MAP_NAT4_REV, MAP_VETHS, MAP_COUNTERS, MAP_DROPS,
    MAP_ATTACHMENTS, MAP_RULES6, MAP_RULE_EXCEPT6, MAP_NAT6_FWD, MAP_NAT6_REV, MAP_FRAG4, MAP_FRAG6, MAP_SVC4,
    MAP_SVC6, MAP_NAT_GC, MAP_RESERVED_PORTS, MAP_NAT4_BIND, MAP_NAT6_BIND, MAP_NAT4_OPEN,
    MAP_NAT6_OPEN, MAP_NAT4_PERMIT, MAP_NAT6_PERMIT, MAP_POD_META, MAP_MASQ_POOL,
    MAP_HOST_PORTS, MAP_POLICY_DST4, MAP_POLICY_DST6, MAP_POLICY_STATS, MAP_EGRESS_POLICIES, MAP_NAT_HOT, MAP_NAT_HOT_ZERO,
    MAP_REFUSALS, MAP_PORT_COUNTS, MAP_EVENTS_LOG, MAP_EVENTS_LIVE, MAP_EVENTS_CTL, MAP_POD_NETS4, MAP_POD_NETS6,
];

/// LRU maps are preallocated whole, so the mapping hints (nat4_bind/nat6_bind) hold at
/// most this many pod endpoints (~64 and ~96 bytes each), not natMaxEntries: past it the
/// least recently mapped endpoints lose their hint (their next flow may get a new port).
pub const BIND_ENTRIES_MAX: u32 = 65_536;
/// The same for natFiltering's open mappings and address permits (nat*_open, nat*_permit).
pub const OPEN_ENTRIES_MAX: u32 = 16_384;

/// The data part of an LPM trie key: the C key but its leading `__u32 prefixlen`,
/// which aya's `lpm_trie::Key` holds. Each is checked at compile time against the
/// generated key: 4 bytes shorter, every member 4 bytes earlier.
macro_rules! lpm_data {
    ($($(#[$doc:meta])* $name:ident = $key:ident { $($f:ident: $t:ty = $cf:ident),* $(,)? })*) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
            pub struct $name {
                $(pub $f: $t),*
            }
            const _: () = {
                assert!(std::mem::size_of::<$name>() + 4 == std::mem::size_of::<generated::$key>());
                $(assert!(
                    std::mem::offset_of!($name, $f) + 4 == std::mem::offset_of!(generated::$key, $cf)
                );)*
            };
        )*
    };
}

lpm_data! {
    /// `struct policy_dst4_key`: the pod's policy mask, then the destination.
    PolicyDst4Data = policy_dst4_key { set: u32 = set, daddr: [u8; 4] = daddr }
    PolicyDst6Data = policy_dst6_key { set: u32 = set, daddr: [u8; 16] = daddr }
    /// `struct rule4_key`: the out ifindex (big-endian, so it is a prefix), the source.
    Rule4Data = rule4_key { ifindex_be: [u8; 4] = ifindex, saddr: [u8; 4] = saddr }
    Rule6Data = rule6_key { ifindex_be: [u8; 4] = ifindex, saddr: [u8; 16] = saddr }
    /// `struct rule_except4_key`: the rule id (big-endian), the destination.
    RuleExcept4Data = rule_except4_key { rule_id_be: [u8; 4] = rule_id, daddr: [u8; 4] = daddr }
    RuleExcept6Data = rule_except6_key { rule_id_be: [u8; 4] = rule_id, daddr: [u8; 16] = daddr }
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

/// Counter indexes (enum masq_counter, without its CNT_ prefix) and their metric names.
pub mod counter {
    pub use super::generated::masq_counter::*;

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
        "events_lost",
    ];
}

/// Drop reasons (enum masq_drop_reason, without its DROP_ prefix) and their names.
pub mod drop_reason {
    pub use super::generated::masq_drop_reason::*;

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
        "unregistered_pod",
    ];
}

/// aya reads and writes map keys and values as plain bytes.
macro_rules! aya_pod {
    ($($t:ty),* $(,)?) => {
        $(unsafe impl aya::Pod for $t {})*
    };
}

aya_pod! {
    PodMeta, HostPort, NodeConfig, PodInfo, PolicyDst4Data, PolicyDst6Data, PolicyHit, PolicyStats, EgressPolicyInfo,
    PodL2, UplinkInfo, ExclInfo, PodNetInfo, Rule4Data, RuleInfo, RuleExcept4Data, RuleStats, Rule6Data, Rule6Info,
    RuleExcept6Data, Nat6Key, Nat6Entry, Frag4Key, Frag6Key, FragPorts, Nat4Key, Nat4Entry, Nat4Ep, Nat4Bind,
    Nat6Ep, Nat6Bind, Nat4Open, Nat6Open, Nat4PermitKey, Nat4Permit, Nat6PermitKey, Nat6Permit, PodStats,
    VethInfo, NatGc, NatHotKey, NatHotSrc, NatHot, RefusalKey, Refusals, PortCountKey, PortRange, MasqPool,
    AttachmentKey, AttachmentInfo, MasqEvent, EventsCtl,
}

#[cfg(test)]
mod btf;
#[cfg(test)]
mod tests;
