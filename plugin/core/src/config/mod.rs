//! The CNI network configuration of ebpf-masq: strict parsing and validation.
//!
//! Everything the plugin will act on is parsed and checked here, before any
//! side effect.  Every problem is reported as CNI error 7 (invalid network
//! config) naming the exact JSON key (nested keys as a path such as
//! `masqueradeRules[1].source`), except:
//!
//! * input that is not JSON at all → code 6 (decode failure);
//! * a missing or unsupported `cniVersion` → code 1 (incompatible version).
//!
//! Unknown keys are rejected, and so are duplicated keys (at the top level
//! and anywhere inside our own keys), so that a misspelt or renamed option can
//! never silently change behaviour.  Standard CNI keys we do not use
//! (`runtimeConfig`, `args`, `ipam`, ...) are only type-checked, and `null`
//! is accepted for them; for our own keys `null` is a type error.
//!
//! The room: this file holds the parsed types and the limits; `keys` the JSON
//! key tables, `json` the reader that catches duplicated keys, `diag` the error
//! messages, `values` one parser per kind of value, `masq` our own options (in
//! and out), `egress` the egressPolicies (types, globs, the per-destination
//! decision), `ipmasq` ip-masq-agent's file and the
//! `ipMasqAgent` key the agent writes from it, `ipmasq_decode` that file's bytes
//! as ip-masq-agent's Go code sees them, `port_limit` podPortLimit and the
//! annotation that lowers it, `netconf` the whole plugin entry. It uses `crate::error` only.

pub mod cni_cache;
mod diag;
pub mod egress_policy;
mod ipmasq;
mod ipmasq_decode;
mod json;
mod keys;
mod masq;
mod natlog;
mod netconf;
mod port_limit;
mod values;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::error::{Error, Result};

use diag::{expect_str, quote};
pub use egress_policy::{
    policy_dst_entries, egress_policies_to_json, first_match, select_policies, EgressAction, EgressPolicy, Glob, GlobKind, EGRESS_DESTINATIONS_MAX,
    EGRESS_POLICIES_MAX, EGRESS_POLICY_ANNOTATION,
};
pub use ipmasq::{
    ip_masq_agent_of_entry, ip_masq_agent_to_json, ipmasq_key, parse_go_duration, parse_ip_masq_agent, IgnoredKey,
    IpMasqAgent, IpMasqAgentFile, IP_MASQ_AGENT_DEFAULT_CIDRS, IP_MASQ_AGENT_DEFAULT_PATH, IP_MASQ_AGENT_ENTRY_KEYS, IP_MASQ_AGENT_KEYS,
    IP_MASQ_AGENT_RESERVED_CIDRS,
};
pub use keys::{key, MASQ_KEYS, NATLOG_KEYS, POLICY_KEYS, RULE_KEYS, STANDARD_KEYS, TIMEOUT_KEYS};
pub use masq::masq_to_json;
pub use natlog::{NatLogConf, NATLOG_FILE_MAX_MB_DEFAULT};
pub use netconf::{parse_conf_file, parse_netconf, pod_identity};
pub use port_limit::{effective_port_limit, PORT_LIMIT_ANNOTATION};
pub use values::check_ifname;

pub const DEFAULT_PIN_PATH: &str = "/sys/fs/bpf/ebpf-masq";
/// What iptables MASQUERADE uses: every unprivileged port. The host's own
/// sockets share it safely (the data plane checks them at every claim and
/// remaps a host flow that meets a pod's tuple), so no port is reserved.
pub const DEFAULT_PORT_RANGE: (u16, u16) = (1024, 65535);
/// Kubernetes' default `--service-node-port-range`: NodePorts have no socket
/// the data plane could find, so these ports are never handed out.
pub const DEFAULT_NODE_PORT_RANGE: Option<(u16, u16)> = Some((30000, 32767));
pub const DEFAULT_NAT_MAX_ENTRIES: u32 = 1 << 20;
/// 0.3.x is accepted for ADD/DEL because Calico and Flannel still ship it; its
/// results have the 0.4.0 shape (CHECK does not exist before 0.4.0).
pub const SUPPORTED_CNI_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The value of `type` this plugin answers to.
pub const PLUGIN_TYPE: &str = "ebpf-masq";
/// Most entries accepted in `masqueradeRules`.
pub const MAX_MASQ_RULES: usize = 256;
/// podCIDRs holds at most this many CIDRs (pod_nets4/6 hold POD_NETS_MAX, learned subnets too).
pub const POD_CIDRS_MAX: usize = 64;
/// Accepted range of `natMaxEntries`.
pub const NAT_MAX_ENTRIES_MIN: u32 = 1024;
pub const NAT_MAX_ENTRIES_MAX: u32 = 16_777_216;
/// Longest Linux interface name (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// CNI 1.1 GC: attachments the runtime still knows about.
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// Older spelling of [`VALID_ATTACHMENTS_KEY`], same format.
pub const ATTACHMENTS_ALIAS_KEY: &str = "cni.dev/attachments";

/// Longest accepted idle timeout (seconds): a week.
pub const NAT_TIMEOUT_MAX_S: u32 = 7 * 24 * 3600;

/// Addresses of one family a masqueradeAddress pool may hold (MASQ_POOL_MAX).
pub const MASQ_POOL_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    /// Always "ebpf-masq".
    pub plugin_type: String,
    /// Raw prevResult, passed back unchanged by ADD (checked in `prevresult`).
    pub prev_result: Option<Value>,
    /// "cni.dev/valid-attachments" (or its alias "cni.dev/attachments"), for GC (CNI 1.1).
    pub valid_attachments: Option<Vec<ValidAttachment>>,
    /// The pod's `ebpf-masq.io/` annotations, from runtimeConfig's
    /// io.kubernetes.cri.pod-annotations (containerd >= 1.5 and CRI-O pass them
    /// for the capability the chained entry declares); others are not kept.
    pub pod_annotations: BTreeMap<String, String>,
    /// The pod's hostPorts (port, IP protocol), from runtimeConfig's portMappings.
    pub host_ports: Vec<(u16, u8)>,
    pub masq: MasqOptions,
}

/// The capability the chained entry declares, so the CRI runtime passes the
/// pod's annotations as runtimeConfig.
pub const CAP_POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";
/// Only annotations under this prefix are kept in the registration.
pub const ANNOTATION_PREFIX: &str = "ebpf-masq.io/";
/// The kept annotations as compact JSON fit this (the pod_meta record).
pub const ANNOTATIONS_MAX_BYTES: usize = 1023;

/// Who a pod is, as its runtime says: Kubernetes namespace and name from CNI_ARGS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
}

/// The capability portmap declares for hostPorts; the chained entry declares it
/// too, so a pod's hostPorts are never handed to masqueraded flows.
pub const CAP_PORT_MAPPINGS: &str = "portMappings";
/// hostPorts kept per pod (POD_HOST_PORTS_MAX of the ABI).
pub const HOST_PORTS_PER_POD: usize = 16;

/// JSON `{"containerID": ..., "ifname": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValidAttachment {
    pub container_id: String,
    pub ifname: String,
}

/// Our own keys of the conflist entry, parsed and checked (what `NetConf.masq` holds).
/// Not to be confused with `bpf::abi::NodeConfig`, the `node_config` record the data
/// plane reads, which `node::config_maps` writes from these.
#[derive(Debug, Clone, PartialEq)]
pub struct MasqOptions {
    /// "natOutgoing", default true.
    pub nat_outgoing: bool,
    /// "nativeRoutingCIDR": a string or a list of strings; default [].
    pub native_routing_cidrs: Vec<IpNetwork>,
    /// "nonMasqueradeCIDRs": list, default [].
    pub non_masquerade_cidrs: Vec<IpNetwork>,
    /// "podCIDRs": the node's pod address ranges (both families), default []: with
    /// the subnets registered pods' addresses teach, a source inside them that no
    /// registered pod owns is never let out unmasqueraded (pod_nets4/6).
    pub pod_cidrs: Vec<IpNetwork>,
    /// "masqLinkLocal", default false (169.254.0.0/16 never masqueraded).
    pub masq_link_local: bool,
    /// "masqLinkLocalIPv6", default false (fe80::/10).
    pub masq_link_local_ipv6: bool,
    /// "egressInterfaces": interface names; None = the default routes' interfaces.
    pub egress_interfaces: Option<Vec<String>>,
    /// "masqueradeAddress": the first address of each family it lists.
    pub masquerade_address_v4: Option<Ipv4Addr>,
    pub masquerade_address_v6: Option<Ipv6Addr>,
    /// Every address of the family "masqueradeAddress" lists (the first is the one
    /// above); two or more make a pool: a source always takes the same one of them.
    pub masquerade_pool_v4: Vec<Ipv4Addr>,
    pub masquerade_pool_v6: Vec<Ipv6Addr>,
    /// "portRange": "LOW-HIGH".
    pub port_range: (u16, u16),
    /// "nodePortRange": "LOW-HIGH" never handed out inside portRange; "" = none.
    pub node_port_range: Option<(u16, u16)>,
    /// "pinPath".
    pub pin_path: PathBuf,
    /// "logLevel": error|warn|info|debug|trace|off, default info.
    pub log_level: log::LevelFilter,
    /// "logFile": absolute path.
    pub log_file: Option<PathBuf>,
    /// "masqueradeRules".
    pub masquerade_rules: Vec<MasqRule>,
    /// "natMaxEntries": size of each NAT map half.
    pub nat_max_entries: u32,
    /// "fastPath", default false.
    pub fast_path: bool,
    /// "serviceCIDRs", default [].
    pub service_cidrs: Vec<IpNetwork>,
    /// "natTimeouts": idle timeouts of NAT pairs, seconds.
    pub nat_timeouts: NatTimeouts,
    /// "natFiltering": who may send to a pod endpoint's mapping (RFC 4787 REQ-8).
    pub nat_filtering: NatFiltering,
    /// "egressPolicies": in list order, the first that selects a pod and holds a destination wins.
    pub egress_policies: Vec<EgressPolicy>,
    /// "ipMasqAgent": what `ebpf-masq agent --ip-masq-agent` read from ip-masq-agent's
    /// file: its CIDRs are unioned with nonMasqueradeCIDRs, its link-local settings
    /// replace masqLinkLocal/masqLinkLocalIPv6.
    pub ip_masq_agent: Option<IpMasqAgent>,
    /// "podPortLimit": the most ports one pod may hold towards one remote endpoint
    /// on one node address (RFC 6888 REQ-4); None: no limit. A pod's annotation
    /// PORT_LIMIT_ANNOTATION may lower it (`effective_port_limit`).
    pub pod_port_limit: Option<u16>,
    /// "natLog": where the NAT session log goes; None: no log.
    pub nat_log: Option<NatLogConf>,
}

impl MasqOptions {
    /// masqLinkLocal in force: ip-masq-agent's file's when the agent applies one.
    pub fn effective_masq_link_local(&self) -> (bool, bool) {
        match &self.ip_masq_agent {
            Some(a) => (a.masq_link_local, a.masq_link_local_ipv6),
            None => (self.masq_link_local, self.masq_link_local_ipv6),
        }
    }
}

/// RFC 4787 filtering behaviour of a mapping: who may send to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NatFiltering {
    /// Only the remote address and port the flow was opened to (the default, as iptables MASQUERADE).
    #[default]
    AddressAndPortDependent,
    /// Any port of a remote address the endpoint has sent to.
    AddressDependent,
    /// Anyone ("full cone"), while the mapping is active.
    EndpointIndependent,
}

impl NatFiltering {
    pub const NAMES: [&'static str; 3] = ["address-and-port-dependent", "address-dependent", "endpoint-independent"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn parse(key: &str, v: &Value) -> Result<Self> {
        let s = expect_str(key, v)?;
        match Self::NAMES.iter().position(|n| *n == s) {
            Some(0) => Ok(Self::AddressAndPortDependent),
            Some(1) => Ok(Self::AddressDependent),
            Some(_) => Ok(Self::EndpointIndependent),
            None => Err(Error::config(
                key,
                format!("{} is not a filtering behaviour; expected one of {}", quote(s), Self::NAMES.map(quote).join(", ")),
            )),
        }
    }
}

/// Idle timeouts of NAT pairs (and of flows begun outside), in seconds. The
/// defaults follow the RFCs' floors: RFC 5382 REQ-5 (established TCP at least
/// 2 h 4 min, transitory TCP at least 4 min), RFC 4787 REQ-5 (UDP at least 2 min),
/// RFC 5508 REQ-1 b (ICMP query at least 60 s). A finished TCP pair (FIN both ways,
/// or a RST) gives its port up at once when a new flow needs it, whatever tcpClosing says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatTimeouts {
    /// "tcp": established TCP.
    pub tcp: u32,
    /// "tcpClosing": after a FIN or RST was seen.
    pub tcp_closing: u32,
    /// "udp": a UDP flow that lasted (packets 2 s or more after its first).
    pub udp: u32,
    /// "udpOneShot": a UDP flow whose packets all came within 2 s of its first
    /// (a DNS query and its answer): RFC 4787 REQ-5's exception, netfilter's
    /// unreplied/short UDP timeout (30 s) before a flow counts as a stream.
    pub udp_one_shot: u32,
    /// "icmp": echo.
    pub icmp: u32,
}

impl Default for NatTimeouts {
    fn default() -> Self {
        NatTimeouts { tcp: 7440, tcp_closing: 240, udp: 120, udp_one_shot: 30, icmp: 60 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MasqRule {
    /// "source", required.
    pub source: IpNetwork,
    /// "outInterface", required.
    pub out_interface: String,
    /// "except", default []; same family as `source`.
    pub except: Vec<IpNetwork>,
    /// "toAddress", optional; same family as `source`.
    pub to_address: Option<IpAddr>,
    /// "natFiltering", default address-and-port-dependent (not the network's: a rule is explicit).
    pub nat_filtering: NatFiltering,
}

impl Default for MasqOptions {
    fn default() -> Self {
        MasqOptions {
            nat_outgoing: true,
            native_routing_cidrs: Vec::new(),
            non_masquerade_cidrs: Vec::new(),
            pod_cidrs: Vec::new(),
            masq_link_local: false,
            masq_link_local_ipv6: false,
            egress_interfaces: None,
            masquerade_address_v4: None,
            masquerade_address_v6: None,
            masquerade_pool_v4: Vec::new(),
            masquerade_pool_v6: Vec::new(),
            port_range: DEFAULT_PORT_RANGE,
            node_port_range: DEFAULT_NODE_PORT_RANGE,
            pin_path: PathBuf::from(DEFAULT_PIN_PATH),
            log_level: log::LevelFilter::Info,
            log_file: None,
            masquerade_rules: Vec::new(),
            nat_max_entries: DEFAULT_NAT_MAX_ENTRIES,
            fast_path: false,
            service_cidrs: Vec::new(),
            nat_timeouts: NatTimeouts::default(),
            nat_filtering: NatFiltering::default(),
            egress_policies: Vec::new(),
            ip_masq_agent: None,
            pod_port_limit: None,
            nat_log: None,
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod bad_config_tests;

#[cfg(test)]
mod pod_identity_tests;

#[cfg(test)]
mod egress_policy_tests;

#[cfg(test)]
mod ipmasq_tests;

#[cfg(test)]
mod port_limit_tests;
