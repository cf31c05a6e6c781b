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

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path, PathBuf};

use ipnetwork::IpNetwork;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{code, Error, Result};

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
/// Accepted range of `natMaxEntries`.
pub const NAT_MAX_ENTRIES_MIN: u32 = 1024;
pub const NAT_MAX_ENTRIES_MAX: u32 = 16_777_216;
/// Longest Linux interface name (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// CNI 1.1 GC: attachments the runtime still knows about.
pub const VALID_ATTACHMENTS_KEY: &str = "cni.dev/valid-attachments";
/// Older spelling of [`VALID_ATTACHMENTS_KEY`], same format.
pub const ATTACHMENTS_ALIAS_KEY: &str = "cni.dev/attachments";

/// JSON keys of our own options.
pub mod key {
    pub const NAT_OUTGOING: &str = "natOutgoing";
    pub const NATIVE_ROUTING_CIDR: &str = "nativeRoutingCIDR";
    pub const NON_MASQUERADE_CIDRS: &str = "nonMasqueradeCIDRs";
    pub const MASQ_LINK_LOCAL: &str = "masqLinkLocal";
    pub const MASQ_LINK_LOCAL_IPV6: &str = "masqLinkLocalIPv6";
    pub const EGRESS_INTERFACES: &str = "egressInterfaces";
    pub const MASQUERADE_ADDRESS: &str = "masqueradeAddress";
    pub const PORT_RANGE: &str = "portRange";
    pub const NODE_PORT_RANGE: &str = "nodePortRange";
    pub const PIN_PATH: &str = "pinPath";
    pub const LOG_LEVEL: &str = "logLevel";
    pub const LOG_FILE: &str = "logFile";
    pub const MASQUERADE_RULES: &str = "masqueradeRules";
    pub const NAT_MAX_ENTRIES: &str = "natMaxEntries";
    pub const FAST_PATH: &str = "fastPath";
    pub const SERVICE_CIDRS: &str = "serviceCIDRs";
    pub const NAT_TIMEOUTS: &str = "natTimeouts";
    pub const NAT_FILTERING: &str = "natFiltering";

    pub const TIMEOUT_TCP: &str = "tcp";
    pub const TIMEOUT_TCP_CLOSING: &str = "tcpClosing";
    pub const TIMEOUT_UDP: &str = "udp";
    pub const TIMEOUT_UDP_ONE_SHOT: &str = "udpOneShot";
    pub const TIMEOUT_ICMP: &str = "icmp";

    pub const RULE_SOURCE: &str = "source";
    pub const RULE_OUT_INTERFACE: &str = "outInterface";
    pub const RULE_EXCEPT: &str = "except";
    pub const RULE_TO_ADDRESS: &str = "toAddress";
    pub const RULE_NAT_FILTERING: &str = "natFiltering";
}

/// Standard CNI keys that may appear in a plugin config besides ours.
const STANDARD_KEYS: &[&str] = &[
    "cniVersion",
    "cniVersions",
    "name",
    "type",
    "prevResult",
    "runtimeConfig",
    "capabilities",
    "args",
    "dns",
    "ipam",
    VALID_ATTACHMENTS_KEY,
    ATTACHMENTS_ALIAS_KEY,
    "disableCheck",
    "disableGC",
];

const MASQ_KEYS: &[&str] = &[
    key::NAT_OUTGOING,
    key::NATIVE_ROUTING_CIDR,
    key::NON_MASQUERADE_CIDRS,
    key::MASQ_LINK_LOCAL,
    key::MASQ_LINK_LOCAL_IPV6,
    key::EGRESS_INTERFACES,
    key::MASQUERADE_ADDRESS,
    key::PORT_RANGE,
    key::NODE_PORT_RANGE,
    key::PIN_PATH,
    key::LOG_LEVEL,
    key::LOG_FILE,
    key::MASQUERADE_RULES,
    key::NAT_MAX_ENTRIES,
    key::FAST_PATH,
    key::SERVICE_CIDRS,
    key::NAT_TIMEOUTS,
    key::NAT_FILTERING,
];

const TIMEOUT_KEYS: &[&str] = &[
    key::TIMEOUT_TCP,
    key::TIMEOUT_TCP_CLOSING,
    key::TIMEOUT_UDP,
    key::TIMEOUT_UDP_ONE_SHOT,
    key::TIMEOUT_ICMP,
];

/// Longest accepted idle timeout (seconds): a week.
pub const NAT_TIMEOUT_MAX_S: u32 = 7 * 24 * 3600;

const RULE_KEYS: &[&str] = &[
    key::RULE_SOURCE,
    key::RULE_OUT_INTERFACE,
    key::RULE_EXCEPT,
    key::RULE_TO_ADDRESS,
    key::RULE_NAT_FILTERING,
];

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
    pub masq: MasqConfig,
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

/// Parse CNI_ARGS ("K=V;K=V", as libcni and kubelet's runtimes pass it): the
/// K8S_POD_NAMESPACE and K8S_POD_NAME values; other keys are accepted and left
/// alone, IgnoreUnknown or not. A pair without "=" or a value longer than
/// Kubernetes allows is an error naming the variable (code 4).
pub fn pod_identity(cni_args: &str) -> Result<PodIdentity> {
    let mut id = PodIdentity::default();
    for pair in cni_args.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Error::env("CNI_ARGS", format!("{pair:?} is not KEY=VALUE")))?;
        match k {
            "K8S_POD_NAMESPACE" => {
                if v.len() > 63 {
                    return Err(Error::env("CNI_ARGS", format!("K8S_POD_NAMESPACE is {} bytes; a namespace has 63 at most", v.len())));
                }
                id.namespace = v.to_string();
            }
            "K8S_POD_NAME" => {
                if v.len() > 253 {
                    return Err(Error::env("CNI_ARGS", format!("K8S_POD_NAME is {} bytes; a pod name has 253 at most", v.len())));
                }
                id.name = v.to_string();
            }
            _ => {}
        }
    }
    Ok(id)
}

/// runtimeConfig's pod annotations (an object of strings), those under
/// ANNOTATION_PREFIX only.
fn parse_pod_annotations(obj: &Map<String, Value>) -> Result<BTreeMap<String, String>> {
    let key = format!("runtimeConfig.{CAP_POD_ANNOTATIONS}");
    let ann = match obj.get("runtimeConfig").and_then(|rc| rc.get(CAP_POD_ANNOTATIONS)) {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m,
        Some(v) => return Err(wrong_type(&key, "an object of strings", v)),
    };
    let mut kept = BTreeMap::new();
    for (k, v) in ann {
        let v = v.as_str().ok_or_else(|| Error::config(&format!("{key}.{k}"), "must be a string"))?;
        if k.starts_with(ANNOTATION_PREFIX) {
            kept.insert(k.clone(), v.to_string());
        }
    }
    let len = serde_json::to_string(&kept).map(|s| s.len()).unwrap_or(0);
    if len > ANNOTATIONS_MAX_BYTES {
        return Err(Error::config(&key, format!("the {ANNOTATION_PREFIX} annotations take {len} bytes as JSON; {ANNOTATIONS_MAX_BYTES} at most")));
    }
    Ok(kept)
}

/// The capability portmap declares for hostPorts; the chained entry declares it
/// too, so a pod's hostPorts are never handed to masqueraded flows.
pub const CAP_PORT_MAPPINGS: &str = "portMappings";
/// hostPorts kept per pod (POD_HOST_PORTS_MAX of the ABI).
pub const HOST_PORTS_PER_POD: usize = 16;

/// runtimeConfig's portMappings (`[{"hostPort": 8080, "containerPort": 80,
/// "protocol": "tcp", "hostIP": ...}]`, as kubelet's runtimes and podman pass
/// them): the distinct (hostPort, IP protocol) pairs, TCP and UDP (SCTP is never
/// masqueraded). A hostIP does not narrow it: the port is kept off every address.
fn parse_port_mappings(obj: &Map<String, Value>) -> Result<Vec<(u16, u8)>> {
    let key = format!("runtimeConfig.{CAP_PORT_MAPPINGS}");
    let list = match obj.get("runtimeConfig").and_then(|rc| rc.get(CAP_PORT_MAPPINGS)) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type(&key, "a list of port mappings", v)),
    };
    let mut out: Vec<(u16, u8)> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("{key}[{i}]");
        let m = m.as_object().ok_or_else(|| wrong_type(&at, "an object", m))?;
        // Keys as Go's encoding/json reads them, case-insensitively: containerd's go-cni
        // sends its struct's field names ("HostPort", "Protocol"), libcni users "hostPort".
        let get = |name: &str| m.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v);
        let port = match get("hostPort") {
            Some(Value::Number(n)) if n.as_u64().is_some_and(|p| (1..=65535).contains(&p)) => n.as_u64().unwrap() as u16,
            Some(v) => return Err(Error::config(&format!("{at}.hostPort"), format!("must be a port number 1-65535, got {v}"))),
            None => return Err(Error::config(&format!("{at}.hostPort"), "is missing")),
        };
        let proto = match get("protocol") {
            None | Some(Value::Null) => 6,
            Some(Value::String(p)) => match p.to_ascii_lowercase().as_str() {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => continue,
                _ => return Err(Error::config(&format!("{at}.protocol"), format!("{} is not tcp, udp or sctp", quote(p)))),
            },
            Some(v) => return Err(wrong_type(&format!("{at}.protocol"), "\"tcp\", \"udp\" or \"sctp\"", v)),
        };
        if !out.contains(&(port, proto)) {
            out.push((port, proto));
        }
    }
    if out.len() > HOST_PORTS_PER_POD {
        return Err(Error::config(&key, format!("{} hostPorts; a pod may have {HOST_PORTS_PER_POD} at most", out.len())));
    }
    Ok(out)
}

/// JSON `{"containerID": ..., "ifname": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValidAttachment {
    pub container_id: String,
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MasqConfig {
    /// "natOutgoing", default true.
    pub nat_outgoing: bool,
    /// "nativeRoutingCIDR": a string or a list of strings; default [].
    pub native_routing_cidrs: Vec<IpNetwork>,
    /// "nonMasqueradeCIDRs": list, default [].
    pub non_masquerade_cidrs: Vec<IpNetwork>,
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

impl Default for MasqConfig {
    fn default() -> Self {
        MasqConfig {
            nat_outgoing: true,
            native_routing_cidrs: Vec::new(),
            non_masquerade_cidrs: Vec::new(),
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
        }
    }
}

/// Parse stdin of a CNI call.
pub fn parse_netconf(bytes: &[u8]) -> Result<NetConf> {
    let (v, dups) = parse_json(bytes)?;
    let obj = root_object(&v)?;
    netconf_from_map(obj, &dups, &[])
}

/// Parse a file given to `ebpf-masq apply --conf FILE` / `install --conf`:
/// either a conflist (`{"cniVersion","name","plugins":[...]}`) in which
/// exactly one plugin has type "ebpf-masq" (its entry is parsed, inheriting
/// cniVersion and name from the list), or a single plugin config.
pub fn parse_conf_file(bytes: &[u8]) -> Result<NetConf> {
    let (v, dups) = parse_json(bytes)?;
    let obj = root_object(&v)?;
    let Some(plugins) = obj.get("plugins") else {
        return netconf_from_map(obj, &dups, &[]);
    };

    let version = check_version(obj)?;
    if let Some(d) = dups.iter().find(|d| d.len() == 1) {
        return Err(duplicate_error(d));
    }
    let name = required_name(obj)?;
    let list = plugins
        .as_array()
        .ok_or_else(|| wrong_type("plugins", "a list of plugin configs", plugins))?;

    let mut ours = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let path = format!("plugins[{i}]");
        let po = p
            .as_object()
            .ok_or_else(|| wrong_type(&path, "an object", p))?;
        match po.get("type") {
            Some(Value::String(t)) => {
                if t == PLUGIN_TYPE {
                    ours.push((i, po));
                }
            }
            Some(other) => return Err(wrong_type(&format!("{path}.type"), "a string", other)),
            None => {
                return Err(Error::config(
                    &format!("{path}.type"),
                    "missing; every plugin in a conflist needs a type",
                ))
            }
        }
    }
    let (idx, entry) = match ours.as_slice() {
        [one] => *one,
        [] => {
            return Err(Error::config(
                "plugins",
                format!(
                    "no plugin with type \"{PLUGIN_TYPE}\" in conflist {}",
                    quote(&name)
                ),
            ))
        }
        many => {
            let at: Vec<String> = many.iter().map(|(i, _)| format!("plugins[{i}]")).collect();
            return Err(Error::config(
                "plugins",
                format!(
                    "{} plugins have type \"{PLUGIN_TYPE}\" ({}); exactly one is expected",
                    many.len(),
                    at.join(", ")
                ),
            ));
        }
    };

    // Like libcni, the list's cniVersion and name override the entry's.
    let mut entry = entry.clone();
    entry.insert("cniVersion".into(), Value::String(version));
    entry.insert("name".into(), Value::String(name));
    let prefix = [Seg::Key("plugins".into()), Seg::Index(idx)];
    netconf_from_map(&entry, &dups, &prefix).map_err(|e| prefix_key(e, &format!("plugins[{idx}].")))
}

/// The inverse of parsing, for writing a plugin entry back out (used by
/// `install`): camelCase keys, "type" always, other keys only when they
/// differ from the default.
pub fn masq_to_json(m: &MasqConfig) -> Value {
    let d = MasqConfig::default();
    let cidrs =
        |v: &[IpNetwork]| Value::Array(v.iter().map(|c| Value::String(c.to_string())).collect());
    let mut o = Map::new();
    o.insert("type".into(), Value::String(PLUGIN_TYPE.into()));
    if m.nat_outgoing != d.nat_outgoing {
        o.insert(key::NAT_OUTGOING.into(), Value::Bool(m.nat_outgoing));
    }
    if !m.native_routing_cidrs.is_empty() {
        o.insert(
            key::NATIVE_ROUTING_CIDR.into(),
            cidrs(&m.native_routing_cidrs),
        );
    }
    if !m.non_masquerade_cidrs.is_empty() {
        o.insert(
            key::NON_MASQUERADE_CIDRS.into(),
            cidrs(&m.non_masquerade_cidrs),
        );
    }
    if m.masq_link_local != d.masq_link_local {
        o.insert(key::MASQ_LINK_LOCAL.into(), Value::Bool(m.masq_link_local));
    }
    if m.masq_link_local_ipv6 != d.masq_link_local_ipv6 {
        o.insert(
            key::MASQ_LINK_LOCAL_IPV6.into(),
            Value::Bool(m.masq_link_local_ipv6),
        );
    }
    if let Some(ifs) = &m.egress_interfaces {
        o.insert(
            key::EGRESS_INTERFACES.into(),
            Value::Array(ifs.iter().map(|s| Value::String(s.clone())).collect()),
        );
    }
    let pooled = m.masquerade_pool_v4.len() > 1 || m.masquerade_pool_v6.len() > 1;
    match (m.masquerade_address_v4, m.masquerade_address_v6) {
        _ if pooled => {
            let all = m.masquerade_pool_v4.iter().map(|a| a.to_string());
            let all = all.chain(m.masquerade_pool_v6.iter().map(|a| a.to_string()));
            o.insert(key::MASQUERADE_ADDRESS.into(), Value::Array(all.map(Value::String).collect()));
        }
        (Some(a), None) => {
            o.insert(key::MASQUERADE_ADDRESS.into(), Value::String(a.to_string()));
        }
        (None, Some(a)) => {
            o.insert(key::MASQUERADE_ADDRESS.into(), Value::String(a.to_string()));
        }
        (Some(a), Some(b)) => {
            o.insert(
                key::MASQUERADE_ADDRESS.into(),
                Value::Array(vec![
                    Value::String(a.to_string()),
                    Value::String(b.to_string()),
                ]),
            );
        }
        (None, None) => {}
    }
    if m.port_range != d.port_range {
        o.insert(
            key::PORT_RANGE.into(),
            Value::String(format!("{}-{}", m.port_range.0, m.port_range.1)),
        );
    }
    if m.node_port_range != d.node_port_range {
        o.insert(
            key::NODE_PORT_RANGE.into(),
            Value::String(m.node_port_range.map(|(a, b)| format!("{a}-{b}")).unwrap_or_default()),
        );
    }
    if m.pin_path != d.pin_path {
        o.insert(
            key::PIN_PATH.into(),
            Value::String(m.pin_path.to_string_lossy().into_owned()),
        );
    }
    if m.log_level != d.log_level {
        o.insert(
            key::LOG_LEVEL.into(),
            Value::String(m.log_level.as_str().to_ascii_lowercase()),
        );
    }
    if let Some(f) = &m.log_file {
        o.insert(
            key::LOG_FILE.into(),
            Value::String(f.to_string_lossy().into_owned()),
        );
    }
    if !m.masquerade_rules.is_empty() {
        let rules = m
            .masquerade_rules
            .iter()
            .map(|r| {
                let mut ro = Map::new();
                ro.insert(key::RULE_SOURCE.into(), Value::String(r.source.to_string()));
                ro.insert(
                    key::RULE_OUT_INTERFACE.into(),
                    Value::String(r.out_interface.clone()),
                );
                if !r.except.is_empty() {
                    ro.insert(key::RULE_EXCEPT.into(), cidrs(&r.except));
                }
                if let Some(a) = r.to_address {
                    ro.insert(key::RULE_TO_ADDRESS.into(), Value::String(a.to_string()));
                }
                if r.nat_filtering != NatFiltering::default() {
                    ro.insert(key::RULE_NAT_FILTERING.into(), Value::String(r.nat_filtering.name().into()));
                }
                Value::Object(ro)
            })
            .collect();
        o.insert(key::MASQUERADE_RULES.into(), Value::Array(rules));
    }
    if m.nat_max_entries != d.nat_max_entries {
        o.insert(key::NAT_MAX_ENTRIES.into(), Value::from(m.nat_max_entries));
    }
    if m.fast_path != d.fast_path {
        o.insert(key::FAST_PATH.into(), Value::Bool(m.fast_path));
    }
    if !m.service_cidrs.is_empty() {
        o.insert(key::SERVICE_CIDRS.into(), cidrs(&m.service_cidrs));
    }
    if m.nat_filtering != d.nat_filtering {
        o.insert(key::NAT_FILTERING.into(), Value::String(m.nat_filtering.name().into()));
    }
    if m.nat_timeouts != d.nat_timeouts {
        let t = m.nat_timeouts;
        let mut to = Map::new();
        for (k, v) in [
            (key::TIMEOUT_TCP, t.tcp),
            (key::TIMEOUT_TCP_CLOSING, t.tcp_closing),
            (key::TIMEOUT_UDP, t.udp),
            (key::TIMEOUT_UDP_ONE_SHOT, t.udp_one_shot),
            (key::TIMEOUT_ICMP, t.icmp),
        ] {
            to.insert(k.into(), Value::from(v));
        }
        o.insert(key::NAT_TIMEOUTS.into(), Value::Object(to));
    }
    Value::Object(o)
}

// ---------------------------------------------------------------------------
// JSON decoding that remembers duplicated keys.

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

#[derive(Default)]
struct Tracker {
    stack: Vec<Seg>,
    dups: Vec<Vec<Seg>>,
}

/// Builds a `serde_json::Value` like its own `Deserialize` does, but records
/// the path of every key that occurs twice in the same object (serde_json
/// silently keeps the last one).
#[derive(Clone, Copy)]
struct Seed<'a>(&'a RefCell<Tracker>);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            self.0.borrow_mut().stack.push(Seg::Index(out.len()));
            let next = seq.next_element_seed(self);
            self.0.borrow_mut().stack.pop();
            match next? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            self.0.borrow_mut().stack.push(Seg::Key(k.clone()));
            let v = map.next_value_seed(self);
            {
                let mut t = self.0.borrow_mut();
                if v.is_ok() && out.contains_key(&k) {
                    let path = t.stack.clone();
                    t.dups.push(path);
                }
                t.stack.pop();
            }
            out.insert(k, v?);
        }
        Ok(Value::Object(out))
    }
}

fn parse_json(bytes: &[u8]) -> Result<(Value, Vec<Vec<Seg>>)> {
    let tracker = RefCell::new(Tracker::default());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Seed(&tracker)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| {
            Error::new(
                code::DECODE_FAILURE,
                format!("failed to decode network config as JSON: {e}"),
            )
        })?;
    Ok((v, tracker.into_inner().dups))
}

fn fmt_path(segs: &[Seg]) -> String {
    let mut s = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(&key_display(k));
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn duplicate_error(path: &[Seg]) -> Error {
    Error::config(
        &fmt_path(path),
        "key appears more than once in the same object; only one may be given",
    )
}

/// Duplicates that matter below `prefix`: any top-level key, and anything
/// inside our own keys.  Duplicates inside standard keys (prevResult,
/// runtimeConfig, ...) belong to others and are left alone.
fn check_dups(dups: &[Vec<Seg>], prefix: &[Seg]) -> Result<()> {
    for d in dups {
        let Some(rel) = d.strip_prefix(prefix) else {
            continue;
        };
        let relevant = match rel.first() {
            Some(Seg::Key(k)) => rel.len() == 1 || MASQ_KEYS.contains(&k.as_str()),
            _ => false,
        };
        if relevant {
            return Err(duplicate_error(rel));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Small helpers.

/// A key as shown in an error message: escaped, and bounded in length.
fn key_display(k: &str) -> String {
    let mut s: String = k
        .chars()
        .take(64)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if k.chars().count() > 64 {
        s.push_str("...");
    }
    s
}

/// A user string in an error message: quoted, escaped, bounded in length.
fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(80).collect();
    if s.chars().count() > 80 {
        q.push_str("...");
    }
    format!("{q:?}")
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {}", quote(s)),
        Value::Array(a) => format!("a list of {} element(s)", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn wrong_type(key: &str, expected: &str, got: &Value) -> Error {
    Error::config(key, format!("expected {expected}, got {}", describe(got)))
}

fn incompatible(key: &str, msg: impl fmt::Display) -> Error {
    let mut e = Error::config(key, msg);
    e.code = code::INCOMPATIBLE_VERSION;
    e
}

/// Rewrite `invalid config key "K"` to `invalid config key "PREFIXK"`.
fn prefix_key(mut e: Error, prefix: &str) -> Error {
    const HEAD: &str = "invalid config key \"";
    if let Some(rest) = e.msg.strip_prefix(HEAD) {
        e.msg = format!("{HEAD}{prefix}{rest}");
    }
    e
}

fn root_object(v: &Value) -> Result<&Map<String, Value>> {
    v.as_object().ok_or_else(|| {
        Error::new(
            code::INVALID_CONFIG,
            format!(
                "invalid network config: expected a JSON object, got {}",
                describe(v)
            ),
        )
    })
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The known key closest to a misspelt one, if any is close.
fn suggest<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    if unknown.len() > 64 {
        return None;
    }
    let u = unknown.to_ascii_lowercase();
    known
        .map(|k| (levenshtein(&u, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn unknown_key_error(path: &str, k: &str, known: &[&'static str]) -> Error {
    let hint = suggest(k, known.iter().copied())
        .map(|s| format!(" (did you mean \"{s}\"?)"))
        .unwrap_or_default();
    Error::config(
        path,
        format!(
            "unknown key{hint}; unknown keys are rejected so that a misspelt or renamed option \
             cannot be silently ignored"
        ),
    )
}

fn expect_bool(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| wrong_type(key, "a boolean", v))
}

fn expect_str<'a>(key: &str, v: &'a Value) -> Result<&'a str> {
    v.as_str().ok_or_else(|| wrong_type(key, "a string", v))
}

// ---------------------------------------------------------------------------
// Value parsers.

/// A network in CIDR notation with an explicit prefix and no host bits set.
fn parse_cidr(key: &str, s: &str) -> Result<IpNetwork> {
    if s.is_empty() {
        return Err(Error::config(key, "empty string is not a CIDR"));
    }
    let Some((addr_s, prefix_s)) = s.split_once('/') else {
        let hint = match s.parse::<IpAddr>() {
            Ok(IpAddr::V4(_)) => format!("; for a single address write \"{s}/32\""),
            Ok(IpAddr::V6(_)) => format!("; for a single address write \"{s}/128\""),
            Err(_) => String::new(),
        };
        return Err(Error::config(
            key,
            format!("{} is not a CIDR: missing \"/PREFIX\"{hint}", quote(s)),
        ));
    };
    let addr: IpAddr = addr_s.parse().map_err(|_| {
        Error::config(
            key,
            format!(
                "{} is not a CIDR: {} is not an IP address",
                quote(s),
                quote(addr_s)
            ),
        )
    })?;
    let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
    let family = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
    let prefix = if !prefix_s.is_empty() && prefix_s.bytes().all(|b| b.is_ascii_digit()) {
        prefix_s.parse::<u32>().ok()
    } else {
        None
    };
    let prefix = match prefix {
        Some(p) if p <= u32::from(max) => p as u8,
        Some(_) => {
            return Err(Error::config(
                key,
                format!(
                    "{}: prefix length {} is out of range 0-{max} for {family}",
                    quote(s),
                    quote(prefix_s)
                ),
            ))
        }
        None => {
            return Err(Error::config(
                key,
                format!(
                    "{}: prefix length {} is not a number in 0-{max}",
                    quote(s),
                    quote(prefix_s)
                ),
            ))
        }
    };
    let net = IpNetwork::new(addr, prefix)
        .map_err(|e| Error::config(key, format!("{} is not a valid CIDR: {e}", quote(s))))?;
    if net.network() != addr {
        return Err(Error::config(
            key,
            format!(
                "{} has host bits set; the network is {}/{prefix}",
                quote(s),
                net.network()
            ),
        ));
    }
    Ok(net)
}

fn parse_cidr_value(key: &str, v: &Value) -> Result<IpNetwork> {
    parse_cidr(key, expect_str(key, v)?)
}

fn parse_cidr_list(key: &str, v: &Value) -> Result<Vec<IpNetwork>> {
    let a = v
        .as_array()
        .ok_or_else(|| wrong_type(key, "a list of CIDR strings", v))?;
    a.iter()
        .enumerate()
        .map(|(i, e)| parse_cidr_value(&format!("{key}[{i}]"), e))
        .collect()
}

/// Linux `dev_valid_name()`: 1-15 bytes, not "." or "..", no '/', ':' or whitespace.
pub fn check_ifname(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("interface name must not be empty".into());
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(format!(
            "interface name {} is {} bytes long; Linux allows at most {MAX_IFNAME_LEN}",
            quote(name),
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{} is not a valid interface name", quote(name)));
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "interface name {} contains the invalid character {c:?}",
            quote(name)
        ));
    }
    Ok(())
}

fn parse_ifname(key: &str, v: &Value) -> Result<String> {
    let s = expect_str(key, v)?;
    check_ifname(s).map_err(|m| Error::config(key, m))?;
    Ok(s.to_owned())
}

/// An address we may rewrite packets to: not unspecified, multicast, loopback or broadcast.
fn parse_unicast_ip(key: &str, v: &Value) -> Result<IpAddr> {
    let s = expect_str(key, v)?;
    let ip: IpAddr = s
        .parse()
        .map_err(|_| Error::config(key, format!("{} is not an IP address", quote(s))))?;
    let bad = if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if matches!(ip, IpAddr::V4(a) if a.is_broadcast()) {
        Some("broadcast")
    } else {
        None
    };
    if let Some(kind) = bad {
        return Err(Error::config(
            key,
            format!("{ip} is a {kind} address and cannot be used as a source address"),
        ));
    }
    Ok(ip)
}

fn parse_port_range(key: &str, s: &str) -> Result<(u16, u16)> {
    let Some((lo_s, hi_s)) = s.split_once('-') else {
        return Err(Error::config(
            key,
            format!(
                "{} is not a port range; expected \"LOW-HIGH\", e.g. \"1024-29999\"",
                quote(s)
            ),
        ));
    };
    let port = |p: &str| -> Result<u16> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::config(
                key,
                format!(
                    "{} is not a port range: {} is not a port number; expected \"LOW-HIGH\"",
                    quote(s),
                    quote(p)
                ),
            ));
        }
        p.parse::<u16>().map_err(|_| {
            Error::config(
                key,
                format!("{}: port {} is out of range 1-65535", quote(s), quote(p)),
            )
        })
    };
    let (lo, hi) = (port(lo_s)?, port(hi_s)?);
    if lo == 0 {
        return Err(Error::config(
            key,
            format!("{}: port 0 cannot be used; the lowest port is 1", quote(s)),
        ));
    }
    if lo > hi {
        return Err(Error::config(
            key,
            format!(
                "{}: low port {lo} is above high port {hi}; write \"{hi}-{lo}\"",
                quote(s)
            ),
        ));
    }
    Ok((lo, hi))
}

fn parse_abs_path(key: &str, s: &str) -> Result<PathBuf> {
    if s.is_empty() {
        return Err(Error::config(
            key,
            "must be an absolute path, got an empty string",
        ));
    }
    if s.contains('\0') {
        return Err(Error::config(key, "path must not contain a NUL character"));
    }
    let p = Path::new(s);
    if !p.is_absolute() {
        return Err(Error::config(
            key,
            format!("must be an absolute path, got {}", quote(s)),
        ));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(Error::config(
            key,
            format!("path {} must not contain \"..\"", quote(s)),
        ));
    }
    if !p.components().any(|c| matches!(c, Component::Normal(_))) {
        return Err(Error::config(
            key,
            "path must not be the root directory \"/\"",
        ));
    }
    Ok(p.to_path_buf())
}

fn parse_log_level(key: &str, s: &str) -> Result<log::LevelFilter> {
    use log::LevelFilter as L;
    Ok(match s.to_ascii_lowercase().as_str() {
        "off" => L::Off,
        "error" => L::Error,
        "warn" => L::Warn,
        "info" => L::Info,
        "debug" => L::Debug,
        "trace" => L::Trace,
        _ => {
            return Err(Error::config(
                key,
                format!(
                    "unknown log level {}; expected one of error, warn, info, debug, trace, off",
                    quote(s)
                ),
            ))
        }
    })
}

/// "natTimeouts": an object of seconds; the keys left out keep their defaults.
fn parse_nat_timeouts(base: &str, v: &Value) -> Result<NatTimeouts> {
    let obj = v.as_object().ok_or_else(|| wrong_type(base, "an object of timeouts in seconds", v))?;
    for k in obj.keys() {
        if !TIMEOUT_KEYS.contains(&k.as_str()) {
            return Err(unknown_key_error(&format!("{base}.{}", key_display(k)), k, TIMEOUT_KEYS));
        }
    }
    let mut t = NatTimeouts::default();
    for (k, slot) in [
        (key::TIMEOUT_TCP, &mut t.tcp),
        (key::TIMEOUT_TCP_CLOSING, &mut t.tcp_closing),
        (key::TIMEOUT_UDP, &mut t.udp),
        (key::TIMEOUT_UDP_ONE_SHOT, &mut t.udp_one_shot),
        (key::TIMEOUT_ICMP, &mut t.icmp),
    ] {
        let Some(v) = obj.get(k) else { continue };
        let path = format!("{base}.{k}");
        let Value::Number(n) = v else {
            return Err(wrong_type(&path, "an integer number of seconds", v));
        };
        match (n.as_u64(), n.as_i64()) {
            (Some(s), _) if (1..=u64::from(NAT_TIMEOUT_MAX_S)).contains(&s) => *slot = s as u32,
            (Some(_), _) | (None, Some(_)) => {
                return Err(Error::config(
                    &path,
                    format!("must be between 1 and {NAT_TIMEOUT_MAX_S} seconds, got {n}"),
                ))
            }
            (None, None) => return Err(wrong_type(&path, "an integer number of seconds", v)),
        }
    }
    if !obj.contains_key(key::TIMEOUT_UDP_ONE_SHOT) {
        t.udp_one_shot = t.udp_one_shot.min(t.udp); // "udp" shorter than the default: one-shot follows it
    }
    if t.udp_one_shot > t.udp {
        return Err(Error::config(
            &format!("{base}.{}", key::TIMEOUT_UDP_ONE_SHOT),
            format!(
                "{} s is longer than {base}.udp ({} s): a one-shot flow never waits longer than one that lasted",
                t.udp_one_shot, t.udp
            ),
        ));
    }
    Ok(t)
}

fn parse_nat_max_entries(key: &str, v: &Value) -> Result<u32> {
    let Value::Number(n) = v else {
        return Err(wrong_type(key, "an integer", v));
    };
    let range =
        || format!("must be between {NAT_MAX_ENTRIES_MIN} and {NAT_MAX_ENTRIES_MAX}, got {n}");
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => {
            if u < u64::from(NAT_MAX_ENTRIES_MIN) || u > u64::from(NAT_MAX_ENTRIES_MAX) {
                Err(Error::config(key, range()))
            } else {
                Ok(u as u32)
            }
        }
        (None, Some(_)) => Err(Error::config(key, range())),
        (None, None) => Err(wrong_type(key, "an integer", v)),
    }
}

/// Addresses of one family a masqueradeAddress pool may hold (MASQ_POOL_MAX).
pub const MASQ_POOL_MAX: usize = 64;

/// "masqueradeAddress": an address, or a list of addresses and CIDRs (every
/// address of the prefix); one of a family is that family's address, two or more
/// a pool (at most MASQ_POOL_MAX a family). Returns (IPv4, IPv6) in the order given.
fn parse_masquerade_address(key: &str, v: &Value) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
    let items: Vec<(String, &Value)> = match v {
        Value::String(_) => vec![(key.to_owned(), v)],
        Value::Array(a) => {
            if a.is_empty() {
                return Err(Error::config(key, "list must not be empty; leave the key out instead"));
            }
            a.iter().enumerate().map(|(i, e)| (format!("{key}[{i}]"), e)).collect()
        }
        _ => return Err(wrong_type(key, "an IP address string or a list of addresses and CIDRs", v)),
    };
    let (mut v4, mut v6): (Vec<Ipv4Addr>, Vec<Ipv6Addr>) = (Vec::new(), Vec::new());
    for (path, item) in items {
        let text = expect_str(&path, item)?;
        let addrs: Vec<IpAddr> = if text.contains('/') {
            let net: IpNetwork = text
                .parse()
                .map_err(|_| Error::config(&path, format!("{} is neither an IP address nor a CIDR", quote(text))))?;
            let size = match net {
                IpNetwork::V4(n) => 1u128 << (32 - n.prefix()),
                IpNetwork::V6(n) => 1u128 << (128 - n.prefix()).min(127),
            };
            if size > MASQ_POOL_MAX as u128 {
                return Err(Error::config(
                    &path,
                    format!("{net} holds {size} addresses; a pool holds at most {MASQ_POOL_MAX} per family"),
                ));
            }
            if net.ip() != net.network() {
                return Err(Error::config(&path, format!("{net} has host bits set; write {}/{}", net.network(), net.prefix())));
            }
            net.iter().collect()
        } else {
            vec![parse_unicast_ip(&path, item)?]
        };
        for ip in addrs {
            let dup = match ip {
                IpAddr::V4(a) => v4.contains(&a),
                IpAddr::V6(a) => v6.contains(&a),
            };
            if dup {
                return Err(Error::config(&path, format!("{ip} is listed twice")));
            }
            match ip {
                IpAddr::V4(a) => v4.push(a),
                IpAddr::V6(a) => v6.push(a),
            }
            if v4.len() > MASQ_POOL_MAX || v6.len() > MASQ_POOL_MAX {
                return Err(Error::config(
                    &path,
                    format!("more than {MASQ_POOL_MAX} addresses of one family; a pool holds at most {MASQ_POOL_MAX}"),
                ));
            }
        }
    }
    Ok((v4, v6))
}

fn family(n: &IpNetwork) -> &'static str {
    if n.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

fn parse_rule(idx: usize, v: &Value) -> Result<MasqRule> {
    let base = format!("{}[{idx}]", key::MASQUERADE_RULES);
    let obj = v
        .as_object()
        .ok_or_else(|| wrong_type(&base, "an object", v))?;
    for k in obj.keys() {
        if !RULE_KEYS.contains(&k.as_str()) {
            return Err(unknown_key_error(
                &format!("{base}.{}", key_display(k)),
                k,
                RULE_KEYS,
            ));
        }
    }
    let path = |k: &str| format!("{base}.{k}");

    let source = match obj.get(key::RULE_SOURCE) {
        Some(v) => parse_cidr_value(&path(key::RULE_SOURCE), v)?,
        None => {
            return Err(Error::config(
                &path(key::RULE_SOURCE),
                "required (the CIDR of the traffic to masquerade)",
            ))
        }
    };
    let out_interface = match obj.get(key::RULE_OUT_INTERFACE) {
        Some(v) => parse_ifname(&path(key::RULE_OUT_INTERFACE), v)?,
        None => {
            return Err(Error::config(
                &path(key::RULE_OUT_INTERFACE),
                "required (the interface the traffic leaves through)",
            ))
        }
    };
    let except = match obj.get(key::RULE_EXCEPT) {
        Some(v) => {
            let p = path(key::RULE_EXCEPT);
            let list = parse_cidr_list(&p, v)?;
            for (j, e) in list.iter().enumerate() {
                if e.is_ipv4() != source.is_ipv4() {
                    return Err(Error::config(
                        &format!("{p}[{j}]"),
                        format!(
                            "{} CIDR {e} in a rule whose source {source} is {}; families must match",
                            family(e),
                            family(&source)
                        ),
                    ));
                }
            }
            list
        }
        None => Vec::new(),
    };
    let to_address = match obj.get(key::RULE_TO_ADDRESS) {
        Some(v) => {
            let p = path(key::RULE_TO_ADDRESS);
            let a = parse_unicast_ip(&p, v)?;
            if a.is_ipv4() != source.is_ipv4() {
                return Err(Error::config(
                    &p,
                    format!(
                        "address {a} is not of the same family as the rule's source {source} ({})",
                        family(&source)
                    ),
                ));
            }
            Some(a)
        }
        None => None,
    };
    let nat_filtering = match obj.get(key::RULE_NAT_FILTERING) {
        Some(v) => NatFiltering::parse(&path(key::RULE_NAT_FILTERING), v)?,
        None => NatFiltering::default(),
    };
    Ok(MasqRule {
        nat_filtering,
        source,
        out_interface,
        except,
        to_address,
    })
}

fn parse_masq(obj: &Map<String, Value>) -> Result<MasqConfig> {
    let mut m = MasqConfig::default();

    if let Some(v) = obj.get(key::NAT_OUTGOING) {
        m.nat_outgoing = expect_bool(key::NAT_OUTGOING, v)?;
    }
    if let Some(v) = obj.get(key::NATIVE_ROUTING_CIDR) {
        let k = key::NATIVE_ROUTING_CIDR;
        m.native_routing_cidrs = match v {
            Value::String(s) => vec![parse_cidr(k, s)?],
            Value::Array(_) => parse_cidr_list(k, v)?,
            _ => return Err(wrong_type(k, "a CIDR string or a list of CIDR strings", v)),
        };
    }
    if let Some(v) = obj.get(key::NON_MASQUERADE_CIDRS) {
        m.non_masquerade_cidrs = parse_cidr_list(key::NON_MASQUERADE_CIDRS, v)?;
    }
    if let Some(v) = obj.get(key::MASQ_LINK_LOCAL) {
        m.masq_link_local = expect_bool(key::MASQ_LINK_LOCAL, v)?;
    }
    if let Some(v) = obj.get(key::MASQ_LINK_LOCAL_IPV6) {
        m.masq_link_local_ipv6 = expect_bool(key::MASQ_LINK_LOCAL_IPV6, v)?;
    }
    if let Some(v) = obj.get(key::EGRESS_INTERFACES) {
        let k = key::EGRESS_INTERFACES;
        let a = v
            .as_array()
            .ok_or_else(|| wrong_type(k, "a list of interface names", v))?;
        if a.is_empty() {
            return Err(Error::config(
                k,
                "list must not be empty; leave the key out to use the default routes' interfaces",
            ));
        }
        let mut seen = HashSet::new();
        let mut names = Vec::with_capacity(a.len());
        for (i, e) in a.iter().enumerate() {
            let p = format!("{k}[{i}]");
            let name = parse_ifname(&p, e)?;
            if !seen.insert(name.clone()) {
                return Err(Error::config(
                    &p,
                    format!("interface {} is listed twice", quote(&name)),
                ));
            }
            names.push(name);
        }
        m.egress_interfaces = Some(names);
    }
    if let Some(v) = obj.get(key::MASQUERADE_ADDRESS) {
        (m.masquerade_pool_v4, m.masquerade_pool_v6) = parse_masquerade_address(key::MASQUERADE_ADDRESS, v)?;
        m.masquerade_address_v4 = m.masquerade_pool_v4.first().copied();
        m.masquerade_address_v6 = m.masquerade_pool_v6.first().copied();
    }
    if let Some(v) = obj.get(key::PORT_RANGE) {
        m.port_range = parse_port_range(key::PORT_RANGE, expect_str(key::PORT_RANGE, v)?)?;
    }
    if let Some(v) = obj.get(key::NODE_PORT_RANGE) {
        let s = expect_str(key::NODE_PORT_RANGE, v)?;
        m.node_port_range = if s.is_empty() { None } else { Some(parse_port_range(key::NODE_PORT_RANGE, s)?) };
    }
    if let Some((a, b)) = m.node_port_range {
        let (lo, hi) = m.port_range;
        if a <= lo && b >= hi {
            return Err(Error::config(
                key::NODE_PORT_RANGE,
                format!(
                    "\"{a}-{b}\" covers every port of portRange \"{lo}-{hi}\": no port would be left for \
                     masqueraded flows; narrow nodePortRange (\"\" for none) or widen portRange"
                ),
            ));
        }
    }
    if let Some(v) = obj.get(key::PIN_PATH) {
        m.pin_path = parse_abs_path(key::PIN_PATH, expect_str(key::PIN_PATH, v)?)?;
    }
    if let Some(v) = obj.get(key::LOG_LEVEL) {
        m.log_level = parse_log_level(key::LOG_LEVEL, expect_str(key::LOG_LEVEL, v)?)?;
    }
    if let Some(v) = obj.get(key::LOG_FILE) {
        let s = expect_str(key::LOG_FILE, v)?;
        let p = parse_abs_path(key::LOG_FILE, s)?;
        if s.ends_with('/') {
            return Err(Error::config(
                key::LOG_FILE,
                format!("{} names a directory; expected a file", quote(s)),
            ));
        }
        m.log_file = Some(p);
    }
    if let Some(v) = obj.get(key::MASQUERADE_RULES) {
        let k = key::MASQUERADE_RULES;
        let a = v
            .as_array()
            .ok_or_else(|| wrong_type(k, "a list of rule objects", v))?;
        if a.len() > MAX_MASQ_RULES {
            return Err(Error::config(
                k,
                format!(
                    "at most {MAX_MASQ_RULES} rules are supported, got {}",
                    a.len()
                ),
            ));
        }
        m.masquerade_rules = a
            .iter()
            .enumerate()
            .map(|(i, r)| parse_rule(i, r))
            .collect::<Result<_>>()?;
    }
    if let Some(v) = obj.get(key::NAT_MAX_ENTRIES) {
        m.nat_max_entries = parse_nat_max_entries(key::NAT_MAX_ENTRIES, v)?;
    }
    if let Some(v) = obj.get(key::FAST_PATH) {
        m.fast_path = expect_bool(key::FAST_PATH, v)?;
    }
    if let Some(v) = obj.get(key::SERVICE_CIDRS) {
        m.service_cidrs = parse_cidr_list(key::SERVICE_CIDRS, v)?;
    }
    if let Some(v) = obj.get(key::NAT_TIMEOUTS) {
        m.nat_timeouts = parse_nat_timeouts(key::NAT_TIMEOUTS, v)?;
    }
    if let Some(v) = obj.get(key::NAT_FILTERING) {
        m.nat_filtering = NatFiltering::parse(key::NAT_FILTERING, v)?;
    }
    Ok(m)
}

// ---------------------------------------------------------------------------
// The plugin config object.

fn check_version(obj: &Map<String, Value>) -> Result<String> {
    let supported = SUPPORTED_CNI_VERSIONS.join(", ");
    match obj.get("cniVersion") {
        None | Some(Value::Null) => Err(incompatible(
            "cniVersion",
            format!("missing; ebpf-masq supports CNI versions {supported}"),
        )),
        Some(Value::String(s)) if SUPPORTED_CNI_VERSIONS.contains(&s.as_str()) => Ok(s.clone()),
        Some(Value::String(s)) => Err(incompatible(
            "cniVersion",
            format!(
                "unsupported CNI version {}; ebpf-masq supports {supported}",
                quote(s)
            ),
        )),
        Some(v) => Err(wrong_type("cniVersion", "a version string", v)),
    }
}

fn required_name(obj: &Map<String, Value>) -> Result<String> {
    match obj.get("name") {
        None | Some(Value::Null) => Err(Error::config("name", "required (the network name)")),
        Some(Value::String(s)) if s.is_empty() => Err(Error::config("name", "must not be empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(wrong_type("name", "a string", v)),
    }
}

/// Standard keys we ignore still need the type the spec gives them.
fn check_standard_keys(obj: &Map<String, Value>) -> Result<()> {
    for k in ["runtimeConfig", "capabilities", "args", "dns", "ipam"] {
        match obj.get(k) {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(v) => return Err(wrong_type(k, "an object", v)),
        }
    }
    for k in ["disableCheck", "disableGC"] {
        match obj.get(k) {
            None | Some(Value::Null) | Some(Value::Bool(_)) => {}
            // libcni also accepts the strings "true" and "false".
            Some(Value::String(s))
                if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") => {}
            Some(v) => return Err(wrong_type(k, "a boolean", v)),
        }
    }
    match obj.get("cniVersions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, e) in a.iter().enumerate() {
                expect_str(&format!("cniVersions[{i}]"), e)?;
            }
        }
        Some(v) => return Err(wrong_type("cniVersions", "a list of version strings", v)),
    }
    Ok(())
}

fn parse_attachments(k: &str, v: &Value) -> Result<Vec<ValidAttachment>> {
    let a = v
        .as_array()
        .ok_or_else(|| wrong_type(k, "a list of attachment objects", v))?;
    let mut out = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        let base = format!("{k}[{i}]");
        let o = e
            .as_object()
            .ok_or_else(|| wrong_type(&base, "an object", e))?;
        let field = |f: &str| -> Result<String> {
            let p = format!("{base}.{f}");
            match o.get(f) {
                None => Err(Error::config(&p, "required")),
                Some(Value::String(s)) if s.is_empty() => {
                    Err(Error::config(&p, "must not be empty"))
                }
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(wrong_type(&p, "a string", v)),
            }
        };
        out.push(ValidAttachment {
            container_id: field("containerID")?,
            ifname: field("ifname")?,
        });
    }
    Ok(out)
}

fn netconf_from_map(
    obj: &Map<String, Value>,
    dups: &[Vec<Seg>],
    prefix: &[Seg],
) -> Result<NetConf> {
    let cni_version = check_version(obj)?;
    check_dups(dups, prefix)?;

    let known: Vec<&'static str> = STANDARD_KEYS.iter().chain(MASQ_KEYS).copied().collect();
    for k in obj.keys() {
        if !known.contains(&k.as_str()) {
            return Err(unknown_key_error(&key_display(k), k, &known));
        }
    }

    let plugin_type = match obj.get("type") {
        None | Some(Value::Null) => {
            return Err(Error::config(
                "type",
                format!("required; must be \"{PLUGIN_TYPE}\""),
            ))
        }
        Some(Value::String(s)) if s == PLUGIN_TYPE => s.clone(),
        Some(Value::String(s)) => {
            return Err(Error::config(
                "type",
                format!("expected \"{PLUGIN_TYPE}\", got {}", quote(s)),
            ))
        }
        Some(v) => {
            return Err(wrong_type(
                "type",
                &format!("the string \"{PLUGIN_TYPE}\""),
                v,
            ))
        }
    };
    let name = required_name(obj)?;
    check_standard_keys(obj)?;

    let prev_result = match obj.get("prevResult") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(v) => return Err(wrong_type("prevResult", "an object", v)),
    };

    let mut valid_attachments: Option<Vec<ValidAttachment>> = None;
    for k in [VALID_ATTACHMENTS_KEY, ATTACHMENTS_ALIAS_KEY] {
        match obj.get(k) {
            None | Some(Value::Null) => {}
            Some(v) => {
                // Both spellings given: keep the union (GC must never drop a live attachment).
                let list = valid_attachments.get_or_insert_with(Vec::new);
                for a in parse_attachments(k, v)? {
                    if !list.contains(&a) {
                        list.push(a);
                    }
                }
            }
        }
    }

    let pod_annotations = parse_pod_annotations(obj)?;
    let host_ports = parse_port_mappings(obj)?;
    let masq = parse_masq(obj)?;
    Ok(NetConf {
        cni_version,
        name,
        plugin_type,
        prev_result,
        valid_attachments,
        pod_annotations,
        host_ports,
        masq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"cniVersion": "1.0.0", "name": "podnet", "type": "ebpf-masq"})
    }

    const REMOVE: &str = "<remove>";

    /// `base()` with `extra` merged in (a value of `REMOVE` removes the key).
    fn with(extra: Value) -> Vec<u8> {
        let mut b = base();
        if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                if v == REMOVE {
                    o.remove(k);
                } else {
                    o.insert(k.clone(), v.clone());
                }
            }
        }
        serde_json::to_vec(&b).expect("serialize")
    }

    fn parse_ok(bytes: &[u8]) -> NetConf {
        match parse_netconf(bytes) {
            Ok(c) => c,
            Err(e) => panic!(
                "expected success for {}: {e}",
                String::from_utf8_lossy(bytes)
            ),
        }
    }

    fn cidr(s: &str) -> IpNetwork {
        s.parse().expect("test CIDR")
    }

    #[test]
    fn bad_configs() {
        use code::{DECODE_FAILURE as D, INCOMPATIBLE_VERSION as V, INVALID_CONFIG as C};
        let raw: Vec<(&[u8], u32, &str)> = vec![
            (b"", D, "decode"),
            (b"{not json", D, "decode"),
            (b"{\"cniVersion\":\"1.0.0\"} trailing", D, "decode"),
            (b"[]", C, "JSON object"),
            (b"\"ebpf-masq\"", C, "JSON object"),
            (
                br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","portRange":"1-2","portRange":"3-4"}"#,
                C,
                "\"portRange\"",
            ),
            (
                br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","masqueradeRules":[{"source":"10.0.0.0/8","outInterface":"eth0","source":"10.1.0.0/16"}]}"#,
                C,
                "\"masqueradeRules[0].source\"",
            ),
        ];
        for (bytes, want_code, want) in raw {
            let e = parse_netconf(bytes).expect_err(&String::from_utf8_lossy(bytes));
            assert_eq!(
                e.code,
                want_code,
                "{}: {}",
                String::from_utf8_lossy(bytes),
                e.msg
            );
            assert!(
                e.msg.contains(want),
                "{}: {:?} lacks {want:?}",
                String::from_utf8_lossy(bytes),
                e.msg
            );
        }

        let cases: Vec<(Value, u32, &str)> = vec![
            // versions, identity
            (json!({"cniVersion": REMOVE}), V, "cniVersion"),
            (json!({"cniVersion": null}), V, "cniVersion"),
            (json!({"cniVersion": "0.2.0"}), V, "cniVersion"),
            (json!({"cniVersion": "2.0.0"}), V, "cniVersion"),
            (json!({"cniVersion": 1}), C, "cniVersion"),
            (json!({"type": "bridge"}), C, "\"type\""),
            (json!({"type": REMOVE}), C, "\"type\""),
            (json!({"type": null}), C, "\"type\""),
            (json!({"type": 7}), C, "\"type\""),
            (json!({"name": REMOVE}), C, "\"name\""),
            (json!({"name": ""}), C, "\"name\""),
            (json!({"name": ["x"]}), C, "\"name\""),
            // unknown keys
            (json!({"natOutgoig": true}), C, "\"natOutgoig\""),
            (
                json!({"nativeRoutingCIDRs": ["10.0.0.0/8"]}),
                C,
                "\"nativeRoutingCIDRs\"",
            ),
            (json!({"PortRange": "1-2"}), C, "did you mean \"portRange\""),
            // standard keys of the wrong type
            (json!({"prevResult": []}), C, "\"prevResult\""),
            (json!({"runtimeConfig": "x"}), C, "\"runtimeConfig\""),
            (json!({"disableCheck": "maybe"}), C, "\"disableCheck\""),
            (
                json!({"cni.dev/valid-attachments": {}}),
                C,
                "\"cni.dev/valid-attachments\"",
            ),
            (
                json!({"cni.dev/valid-attachments": [{"ifname": "eth0"}]}),
                C,
                "\"cni.dev/valid-attachments[0].containerID\"",
            ),
            (
                json!({"cni.dev/attachments": [{"containerID": "abc", "ifname": 3}]}),
                C,
                "\"cni.dev/attachments[0].ifname\"",
            ),
            // booleans
            (json!({"natOutgoing": "true"}), C, "\"natOutgoing\""),
            (json!({"masqLinkLocal": 1}), C, "\"masqLinkLocal\""),
            (
                json!({"masqLinkLocalIPv6": null}),
                C,
                "\"masqLinkLocalIPv6\"",
            ),
            (json!({"fastPath": "yes"}), C, "\"fastPath\""),
            // CIDRs
            (json!({"nativeRoutingCIDR": ""}), C, "\"nativeRoutingCIDR\""),
            (
                json!({"nativeRoutingCIDR": "10.0.0.1/8"}),
                C,
                "the network is 10.0.0.0/8",
            ),
            (json!({"nativeRoutingCIDR": 10}), C, "\"nativeRoutingCIDR\""),
            (
                json!({"nativeRoutingCIDR": ["10.0.0.0/8", "fd00::1/8"]}),
                C,
                "\"nativeRoutingCIDR[1]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["10.0.0.0/33"]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["fd00::/129"]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["10.0.0.0"]}),
                C,
                "10.0.0.0/32",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["10.0.0.0/x"]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["10.0.0.0/+8"]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["10.0.0.0/255.0.0.0"]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": ["300.0.0.0/8"]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": "10.0.0.0/8"}),
                C,
                "\"nonMasqueradeCIDRs\"",
            ),
            (
                json!({"nonMasqueradeCIDRs": [""]}),
                C,
                "\"nonMasqueradeCIDRs[0]\"",
            ),
            (
                json!({"serviceCIDRs": ["10.96.0.0/12", 5]}),
                C,
                "\"serviceCIDRs[1]\"",
            ),
            (
                json!({"serviceCIDRs": ["10.96.0.1/12"]}),
                C,
                "\"serviceCIDRs[0]\"",
            ),
            // portRange
            (json!({"portRange": "0-100"}), C, "\"portRange\""),
            (json!({"portRange": "2000-1000"}), C, "\"portRange\""),
            (json!({"portRange": "1024"}), C, "\"portRange\""),
            (json!({"portRange": "a-b"}), C, "\"portRange\""),
            (json!({"portRange": "1024-70000"}), C, "\"portRange\""),
            (json!({"portRange": "-1-100"}), C, "\"portRange\""),
            (json!({"portRange": " 1024-2000"}), C, "\"portRange\""),
            (json!({"portRange": "1024-2000-3000"}), C, "\"portRange\""),
            (json!({"nodePortRange": "32767-30000"}), C, "\"nodePortRange\""),
            (json!({"nodePortRange": 30000}), C, "\"nodePortRange\""),
            (json!({"nodePortRange": "30000"}), C, "\"nodePortRange\""),
            // Nothing left for masqueraded flows.
            (json!({"portRange": "30000-32767"}), C, "\"nodePortRange\""),
            (json!({"portRange": "2000-3000", "nodePortRange": "1024-65535"}), C, "\"nodePortRange\""),
            (json!({"portRange": [1024, 2000]}), C, "\"portRange\""),
            // egressInterfaces
            (json!({"egressInterfaces": []}), C, "\"egressInterfaces\""),
            (
                json!({"egressInterfaces": "eth0"}),
                C,
                "\"egressInterfaces\"",
            ),
            (
                json!({"egressInterfaces": ["eth0", "eth0"]}),
                C,
                "\"egressInterfaces[1]\"",
            ),
            (
                json!({"egressInterfaces": ["averyveryverylongname"]}),
                C,
                "\"egressInterfaces[0]\"",
            ),
            (
                json!({"egressInterfaces": ["eth/0"]}),
                C,
                "\"egressInterfaces[0]\"",
            ),
            (
                json!({"egressInterfaces": ["eth 0"]}),
                C,
                "\"egressInterfaces[0]\"",
            ),
            (
                json!({"egressInterfaces": [".."]}),
                C,
                "\"egressInterfaces[0]\"",
            ),
            (
                json!({"egressInterfaces": [""]}),
                C,
                "\"egressInterfaces[0]\"",
            ),
            (
                json!({"egressInterfaces": [1]}),
                C,
                "\"egressInterfaces[0]\"",
            ),
            // masqueradeAddress
            (
                json!({"masqueradeAddress": "not-an-ip"}),
                C,
                "\"masqueradeAddress\"",
            ),
            (
                json!({"masqueradeAddress": "0.0.0.0"}),
                C,
                "\"masqueradeAddress\"",
            ),
            (
                json!({"masqueradeAddress": "127.0.0.1"}),
                C,
                "\"masqueradeAddress\"",
            ),
            (
                json!({"masqueradeAddress": "224.0.0.1"}),
                C,
                "\"masqueradeAddress\"",
            ),
            (
                json!({"masqueradeAddress": "::1"}),
                C,
                "\"masqueradeAddress\"",
            ),
            (
                json!({"masqueradeAddress": "::"}),
                C,
                "\"masqueradeAddress\"",
            ),
            (json!({"masqueradeAddress": ["192.0.2.1", "192.0.2.1"]}), C, "\"masqueradeAddress[1]\""),
            (json!({"masqueradeAddress": ["192.0.2.0/31", "192.0.2.1"]}), C, "\"masqueradeAddress[1]\""),
            (json!({"masqueradeAddress": "192.0.2.0/24"}), C, "\"masqueradeAddress\""),
            (json!({"masqueradeAddress": ["192.0.2.1/30"]}), C, "\"masqueradeAddress[0]\""),
            (json!({"masqueradeAddress": ["10.0.0.0/26", "10.0.1.1"]}), C, "\"masqueradeAddress[1]\""),
            (json!({"masqueradeAddress": ["2001:db8::/64"]}), C, "\"masqueradeAddress[0]\""),
            (json!({"masqueradeAddress": [5]}), C, "\"masqueradeAddress[0]\""),
            (json!({"masqueradeAddress": ["192.0.2.1", "127.0.0.1"]}), C, "\"masqueradeAddress[1]\""),
            (json!({"masqueradeAddress": []}), C, "\"masqueradeAddress\""),
            // paths, logging
            (json!({"pinPath": "relative/path"}), C, "\"pinPath\""),
            (json!({"pinPath": "/"}), C, "\"pinPath\""),
            (json!({"pinPath": "/sys/fs/bpf/../etc"}), C, "\"pinPath\""),
            (json!({"pinPath": ""}), C, "\"pinPath\""),
            (json!({"pinPath": "/sys/fs/bpf/a\u{0}b"}), C, "\"pinPath\""),
            (json!({"logFile": "var/log/x.log"}), C, "\"logFile\""),
            (json!({"logFile": "/var/log/"}), C, "\"logFile\""),
            (json!({"logLevel": "verbose"}), C, "\"logLevel\""),
            (json!({"logLevel": 3}), C, "\"logLevel\""),
            // natMaxEntries
            (json!({"natMaxEntries": 100}), C, "\"natMaxEntries\""),
            (json!({"natMaxEntries": 16_777_217}), C, "\"natMaxEntries\""),
            (json!({"natMaxEntries": -5}), C, "\"natMaxEntries\""),
            (json!({"natMaxEntries": 4096.5}), C, "\"natMaxEntries\""),
            (json!({"natMaxEntries": "65536"}), C, "\"natMaxEntries\""),
            // natTimeouts
            (json!({"natTimeouts": 60}), C, "\"natTimeouts\""),
            (json!({"natTimeouts": {"tcp": 0}}), C, "\"natTimeouts.tcp\""),
            (json!({"natTimeouts": {"udp": -1}}), C, "\"natTimeouts.udp\""),
            (json!({"natTimeouts": {"icmp": 1.5}}), C, "\"natTimeouts.icmp\""),
            (json!({"natTimeouts": {"tcpClosing": "240"}}), C, "\"natTimeouts.tcpClosing\""),
            (json!({"natTimeouts": {"udpOneShot": 0}}), C, "\"natTimeouts.udpOneShot\""),
            (json!({"natTimeouts": {"udp": 60, "udpOneShot": 90}}), C, "\"natTimeouts.udpOneShot\""),
            (json!({"natTimeouts": {"tcp": 604_801}}), C, "\"natTimeouts.tcp\""),
            (json!({"natTimeouts": {"tcp_closing": 30}}), C, "did you mean \"tcpClosing\""),
            // natFiltering
            (json!({"natFiltering": "full-cone"}), C, "\"natFiltering\""),
            (json!({"natFiltering": true}), C, "\"natFiltering\""),
            (
                json!({"masqueradeRules": [{"source": "192.168.6.0/24", "outInterface": "eth0", "natFiltering": "cone"}]}),
                C,
                "\"masqueradeRules[0].natFiltering\"",
            ),
            // masqueradeRules
            (json!({"masqueradeRules": {}}), C, "\"masqueradeRules\""),
            (
                json!({"masqueradeRules": ["x"]}),
                C,
                "\"masqueradeRules[0]\"",
            ),
            (
                json!({"masqueradeRules": [{"outInterface": "eth0"}]}),
                C,
                "\"masqueradeRules[0].source\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8"}]}),
                C,
                "\"masqueradeRules[0].outInterface\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0"},
                                           {"source": "10.0.0.1/8", "outInterface": "eth0"}]}),
                C,
                "\"masqueradeRules[1].source\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "toInterface": "x"}]}),
                C,
                "\"masqueradeRules[0].toInterface\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0:1"}]}),
                C,
                "\"masqueradeRules[0].outInterface\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "except": ["fd00::/8"]}]}),
                C,
                "\"masqueradeRules[0].except[0]\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "except": "10.1.0.0/16"}]}),
                C,
                "\"masqueradeRules[0].except\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "fd00::/8", "outInterface": "eth0", "toAddress": "192.0.2.1"}]}),
                C,
                "\"masqueradeRules[0].toAddress\"",
            ),
            (
                json!({"masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "toAddress": "255.255.255.255"}]}),
                C,
                "\"masqueradeRules[0].toAddress\"",
            ),
            (
                json!({"masqueradeRules": vec![json!({"source": "10.0.0.0/8", "outInterface": "eth0"}); MAX_MASQ_RULES + 1]}),
                C,
                "\"masqueradeRules\"",
            ),
        ];
        assert!(cases.len() >= 25);
        for (extra, want_code, want) in cases {
            let bytes = with(extra.clone());
            let e = match parse_netconf(&bytes) {
                Ok(c) => panic!("expected an error for {extra}, got {c:?}"),
                Err(e) => e,
            };
            assert_eq!(e.code, want_code, "{extra}: {}", e.msg);
            assert!(
                e.msg.contains(want),
                "{extra}: message {:?} lacks {want:?}",
                e.msg
            );
            if e.code != code::DECODE_FAILURE {
                assert!(
                    e.msg.starts_with("invalid config key \""),
                    "{extra}: {:?}",
                    e.msg
                );
            }
        }
    }

    #[test]
    fn defaults() {
        let c = parse_ok(&with(json!({})));
        assert_eq!(c.cni_version, "1.0.0");
        assert_eq!(c.name, "podnet");
        assert_eq!(c.plugin_type, "ebpf-masq");
        assert_eq!(c.prev_result, None);
        assert_eq!(c.valid_attachments, None);
        assert_eq!(c.masq, MasqConfig::default());
        let d = MasqConfig::default();
        assert!(d.nat_outgoing);
        assert!(d.native_routing_cidrs.is_empty() && d.non_masquerade_cidrs.is_empty());
        assert!(!d.masq_link_local && !d.masq_link_local_ipv6 && !d.fast_path);
        assert_eq!(d.egress_interfaces, None);
        assert_eq!(
            (d.masquerade_address_v4, d.masquerade_address_v6),
            (None, None)
        );
        // iptables MASQUERADE's space; NodePorts (Kubernetes' default range) never handed out.
        assert_eq!(d.port_range, (1024, 65535));
        assert_eq!(d.node_port_range, Some((30000, 32767)));
        assert_eq!(d.pin_path, PathBuf::from("/sys/fs/bpf/ebpf-masq"));
        assert_eq!(d.log_level, log::LevelFilter::Info);
        assert_eq!(d.log_file, None);
        assert!(d.masquerade_rules.is_empty() && d.service_cidrs.is_empty());
        assert_eq!(d.nat_max_entries, 1 << 20);
        // The RFCs' floors: RFC 5382 REQ-5 (2 h 4 min established, 4 min transitory),
        // RFC 4787 REQ-5 (UDP 2 min), RFC 5508 REQ-1 b (ICMP query 60 s).
        let t = d.nat_timeouts;
        assert!(t.tcp >= 7440 && t.tcp_closing >= 240 && t.udp >= 120 && t.icmp >= 60, "{t:?}");
        // The default config emits nothing but its type.
        assert_eq!(masq_to_json(&d), json!({"type": "ebpf-masq"}));
    }

    #[test]
    fn good_configs() {
        type Check = fn(&NetConf);
        let cases: Vec<(Value, Check)> = vec![
            (json!({"cniVersion": "0.4.0"}), |c| {
                assert_eq!(c.cni_version, "0.4.0")
            }),
            (
                json!({"cniVersion": "1.1.0", "cniVersions": ["1.0.0", "1.1.0"]}),
                |c| assert_eq!(c.cni_version, "1.1.0"),
            ),
            (json!({"natOutgoing": false}), |c| {
                assert!(!c.masq.nat_outgoing)
            }),
            (json!({"nativeRoutingCIDR": "10.0.0.0/8"}), |c| {
                assert_eq!(c.masq.native_routing_cidrs, vec![cidr("10.0.0.0/8")])
            }),
            (
                json!({"nativeRoutingCIDR": ["10.0.0.0/8", "fd00::/8"]}),
                |c| {
                    assert_eq!(
                        c.masq.native_routing_cidrs,
                        vec![cidr("10.0.0.0/8"), cidr("fd00::/8")]
                    )
                },
            ),
            (json!({"nativeRoutingCIDR": []}), |c| {
                assert!(c.masq.native_routing_cidrs.is_empty())
            }),
            (
                json!({"nonMasqueradeCIDRs": ["192.168.0.0/16", "0.0.0.0/0", "2001:db8::/32", "10.1.2.3/32"]}),
                |c| {
                    assert_eq!(c.masq.non_masquerade_cidrs.len(), 4);
                    assert_eq!(c.masq.non_masquerade_cidrs[1].prefix(), 0);
                },
            ),
            (
                json!({"masqLinkLocal": true, "masqLinkLocalIPv6": true, "fastPath": true}),
                |c| {
                    assert!(
                        c.masq.masq_link_local && c.masq.masq_link_local_ipv6 && c.masq.fast_path
                    )
                },
            ),
            (
                json!({"egressInterfaces": ["eth0", "bond0.100", "enp0s31f6", "wg-tunnel_12345"]}),
                |c| assert_eq!(c.masq.egress_interfaces.as_ref().map(Vec::len), Some(4)),
            ),
            (json!({"masqueradeAddress": "192.0.2.10"}), |c| {
                assert_eq!(
                    c.masq.masquerade_address_v4,
                    Some(Ipv4Addr::new(192, 0, 2, 10))
                );
                assert_eq!(c.masq.masquerade_address_v6, None);
            }),
            (
                json!({"masqueradeAddress": ["2001:db8::10", "192.0.2.10"]}),
                |c| {
                    assert_eq!(
                        c.masq.masquerade_address_v4,
                        Some(Ipv4Addr::new(192, 0, 2, 10))
                    );
                    assert_eq!(c.masq.masquerade_address_v6, "2001:db8::10".parse().ok());
                },
            ),
            (json!({"masqueradeAddress": ["192.0.2.10", "2001:db8::10", "192.0.2.11"]}), |c| {
                let m = &c.masq;
                assert_eq!(m.masquerade_pool_v4, [Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11)]);
                assert_eq!((m.masquerade_address_v4, m.masquerade_pool_v6.len()), (Some(Ipv4Addr::new(192, 0, 2, 10)), 1));
            }),
            (json!({"masqueradeAddress": ["192.0.2.8/30", "192.0.2.1/32"]}), |c| {
                let p: Vec<String> = c.masq.masquerade_pool_v4.iter().map(|a| a.to_string()).collect();
                assert_eq!(p, ["192.0.2.8", "192.0.2.9", "192.0.2.10", "192.0.2.11", "192.0.2.1"]);
            }),
            (json!({"portRange": "40000-40000"}), |c| {
                assert_eq!(c.masq.port_range, (40000, 40000))
            }),
            (json!({"portRange": "1-65535"}), |c| {
                assert_eq!(c.masq.port_range, (1, 65535))
            }),
            (json!({"nodePortRange": ""}), |c| assert_eq!(c.masq.node_port_range, None)),
            (json!({"nodePortRange": "30000-30100"}), |c| {
                assert_eq!(c.masq.node_port_range, Some((30000, 30100)))
            }),
            // Part of portRange skipped is fine (some ports stay).
            (json!({"portRange": "30000-40000"}), |c| {
                assert_eq!((c.masq.port_range, c.masq.node_port_range), ((30000, 40000), Some((30000, 32767))))
            }),
            (json!({"pinPath": "/sys/fs/bpf/other/"}), |c| {
                assert_eq!(c.masq.pin_path, PathBuf::from("/sys/fs/bpf/other"))
            }),
            (
                json!({"logLevel": "DEBUG", "logFile": "/var/log/ebpf-masq.log"}),
                |c| {
                    assert_eq!(c.masq.log_level, log::LevelFilter::Debug);
                    assert_eq!(
                        c.masq.log_file,
                        Some(PathBuf::from("/var/log/ebpf-masq.log"))
                    );
                },
            ),
            (json!({"logLevel": "off"}), |c| {
                assert_eq!(c.masq.log_level, log::LevelFilter::Off)
            }),
            (json!({"logLevel": "Trace"}), |c| {
                assert_eq!(c.masq.log_level, log::LevelFilter::Trace)
            }),
            (json!({"natMaxEntries": 1024}), |c| {
                assert_eq!(c.masq.nat_max_entries, 1024)
            }),
            (json!({"natTimeouts": {"udp": 10}}), |c| {
                assert_eq!((c.masq.nat_timeouts.udp, c.masq.nat_timeouts.udp_one_shot), (10, 10), "one-shot follows a short udp")
            }),
            (json!({"natTimeouts": {"udpOneShot": 5}}), |c| {
                assert_eq!((c.masq.nat_timeouts.udp, c.masq.nat_timeouts.udp_one_shot), (120, 5))
            }),
            (json!({"natTimeouts": {"udp": 300, "tcpClosing": 30}}), |c| {
                let t = c.masq.nat_timeouts;
                assert_eq!((t.tcp, t.tcp_closing, t.udp, t.icmp), (7440, 30, 300, 60), "the rest keep their defaults")
            }),
            (json!({"natFiltering": "endpoint-independent"}), |c| {
                assert_eq!(c.masq.nat_filtering, NatFiltering::EndpointIndependent)
            }),
            (json!({"natFiltering": "address-dependent"}), |c| {
                assert_eq!(c.masq.nat_filtering, NatFiltering::AddressDependent)
            }),
            (json!({"natTimeouts": {}}), |c| {
                assert_eq!(c.masq.nat_timeouts, NatTimeouts::default())
            }),
            (json!({"natMaxEntries": 16_777_216}), |c| {
                assert_eq!(c.masq.nat_max_entries, 16_777_216)
            }),
            (
                json!({"serviceCIDRs": ["10.96.0.0/12", "fd00:10:96::/112"]}),
                |c| {
                    assert_eq!(
                        c.masq.service_cidrs,
                        vec![cidr("10.96.0.0/12"), cidr("fd00:10:96::/112")]
                    )
                },
            ),
            (
                json!({"masqueradeRules": [
                    {"source": "10.244.0.0/16", "outInterface": "eth1", "except": ["10.244.5.0/24"], "toAddress": "192.0.2.7"},
                    {"source": "fd00:244::/64", "outInterface": "wg0"}
                ]}),
                |c| {
                    let r = &c.masq.masquerade_rules;
                    assert_eq!(r.len(), 2);
                    assert_eq!(r[0].source, cidr("10.244.0.0/16"));
                    assert_eq!(r[0].out_interface, "eth1");
                    assert_eq!(r[0].except, vec![cidr("10.244.5.0/24")]);
                    assert_eq!(r[0].to_address, "192.0.2.7".parse().ok());
                    assert_eq!(r[1].except, vec![]);
                    assert_eq!(r[1].to_address, None);
                },
            ),
            (
                json!({"prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "10.22.0.5/16"}], "dns": {}}}),
                |c| {
                    assert_eq!(
                        c.prev_result
                            .as_ref()
                            .map(|p| p["ips"][0]["address"].clone()),
                        Some(json!("10.22.0.5/16"))
                    )
                },
            ),
            (
                // Standard keys are accepted and ignored; duplicates inside them are not ours.
                json!({"runtimeConfig": {"portMappings": []}, "capabilities": {"portMappings": true}, "args": {"cni": {}},
                       "dns": {"nameservers": ["10.96.0.10"]}, "ipam": {}, "disableCheck": true, "disableGC": "false",
                       "prevResult": null}),
                |c| assert_eq!(c.prev_result, None),
            ),
            (
                json!({"cni.dev/valid-attachments": [{"containerID": "abc", "ifname": "eth0"}, {"containerID": "def", "ifname": "net1"}],
                       "cni.dev/attachments": [{"containerID": "abc", "ifname": "eth0"}, {"containerID": "ghi", "ifname": "eth0", "extra": 1}]}),
                |c| {
                    let v = c.valid_attachments.as_ref().map(|v| {
                        v.iter()
                            .map(|a| a.container_id.as_str())
                            .collect::<Vec<_>>()
                    });
                    assert_eq!(v, Some(vec!["abc", "def", "ghi"]));
                },
            ),
            (json!({"cni.dev/valid-attachments": []}), |c| {
                assert_eq!(c.valid_attachments, Some(vec![]))
            }),
        ];
        for (extra, check) in cases {
            let c = parse_ok(&with(extra));
            check(&c);
        }
        // Duplicates inside keys that are not ours do not matter.
        let raw = br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","prevResult":{"ips":[],"ips":[]}}"#;
        assert!(parse_ok(raw).prev_result.is_some());
    }

    #[test]
    fn conflist() {
        let list = json!({
            "cniVersion": "1.1.0",
            "name": "k8s-pod-network",
            "disableCheck": false,
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}},
                {"type": "portmap", "capabilities": {"portMappings": true}},
                {"type": "ebpf-masq", "nativeRoutingCIDR": "10.22.0.0/16", "portRange": "2000-3000"}
            ]
        });
        let c = parse_conf_file(&serde_json::to_vec(&list).expect("ser")).expect("conflist parses");
        assert_eq!(c.cni_version, "1.1.0");
        assert_eq!(c.name, "k8s-pod-network");
        assert_eq!(c.masq.native_routing_cidrs, vec![cidr("10.22.0.0/16")]);
        assert_eq!(c.masq.port_range, (2000, 3000));

        // A single plugin config is accepted too.
        let single = with(json!({"fastPath": true}));
        assert!(parse_conf_file(&single).expect("single").masq.fast_path);

        let err = |v: Value| {
            parse_conf_file(&serde_json::to_vec(&v).expect("ser")).expect_err("must fail")
        };
        let zero = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]});
        let e = err(zero);
        assert_eq!(e.code, code::INVALID_CONFIG);
        assert!(e.msg.contains("\"plugins\""), "{}", e.msg);
        let e = err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}));
        assert!(e.msg.contains("\"plugins\""), "{}", e.msg);
        let two = json!({"cniVersion": "1.0.0", "name": "n",
                         "plugins": [{"type": "ebpf-masq"}, {"type": "bridge"}, {"type": "ebpf-masq"}]});
        let e = err(two);
        assert!(
            e.msg.contains("\"plugins\"") && e.msg.contains("plugins[2]"),
            "{}",
            e.msg
        );
        // Errors in our entry name the full path.
        let e = err(json!({"cniVersion": "1.0.0", "name": "n",
                           "plugins": [{"type": "bridge"}, {"type": "ebpf-masq", "portRange": "9-1"}]}));
        assert!(
            e.msg
                .starts_with("invalid config key \"plugins[1].portRange\""),
            "{}",
            e.msg
        );
        let e = err(json!({"cniVersion": "1.0.0", "name": "n",
                           "plugins": [{"type": "ebpf-masq", "masqueradeRules": [{"source": "10.0.0.0/8"}]}]}));
        assert!(
            e.msg
                .contains("\"plugins[0].masqueradeRules[0].outInterface\""),
            "{}",
            e.msg
        );
        // List-level problems.
        let e =
            err(json!({"cniVersion": "0.2.0", "name": "n", "plugins": [{"type": "ebpf-masq"}]}));
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        let e = err(json!({"cniVersion": "1.0.0", "plugins": [{"type": "ebpf-masq"}]}));
        assert!(e.msg.contains("\"name\""), "{}", e.msg);
        let e = err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": {"type": "ebpf-masq"}}));
        assert!(e.msg.contains("\"plugins\""), "{}", e.msg);
        let e =
            err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ebpf-masq"}, 3]}));
        assert!(e.msg.contains("\"plugins[1]\""), "{}", e.msg);
        let e = err(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"bridge": "cni0"}]}));
        assert!(e.msg.contains("\"plugins[0].type\""), "{}", e.msg);
        // Duplicates: in our entry → error; in another plugin's entry → none of our business.
        let dup_ours = br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"ebpf-masq","fastPath":true,"fastPath":false}]}"#;
        let e = parse_conf_file(dup_ours).expect_err("dup");
        assert!(e.msg.contains("\"plugins[1].fastPath\""), "{}", e.msg);
        let dup_other = br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","mtu":1,"mtu":2},{"type":"ebpf-masq"}]}"#;
        assert!(parse_conf_file(dup_other).is_ok());
    }

    #[test]
    fn masq_to_json_round_trip() {
        let full = MasqConfig {
            nat_outgoing: false,
            native_routing_cidrs: vec![cidr("10.0.0.0/8"), cidr("fd00::/8")],
            non_masquerade_cidrs: vec![cidr("192.168.0.0/16")],
            masq_link_local: true,
            masq_link_local_ipv6: true,
            egress_interfaces: Some(vec!["eth0".into(), "eth1".into()]),
            masquerade_address_v4: Some(Ipv4Addr::new(192, 0, 2, 1)),
            masquerade_address_v6: "2001:db8::1".parse().ok(),
            masquerade_pool_v4: vec![Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)],
            masquerade_pool_v6: vec!["2001:db8::1".parse().unwrap()],
            port_range: (5000, 6000),
            node_port_range: None,
            pin_path: PathBuf::from("/sys/fs/bpf/masq2"),
            log_level: log::LevelFilter::Warn,
            log_file: Some(PathBuf::from("/var/log/masq.log")),
            masquerade_rules: vec![
                MasqRule {
                    source: cidr("10.244.0.0/16"),
                    out_interface: "wg0".into(),
                    except: vec![cidr("10.244.1.0/24")],
                    to_address: "10.1.1.1".parse().ok(),
                    nat_filtering: NatFiltering::EndpointIndependent,
                },
                MasqRule {
                    source: cidr("fd00:1::/64"),
                    out_interface: "eth0".into(),
                    except: vec![],
                    to_address: None,
                    nat_filtering: NatFiltering::default(),
                },
            ],
            nat_max_entries: 4096,
            fast_path: true,
            service_cidrs: vec![cidr("10.96.0.0/12")],
            nat_timeouts: NatTimeouts { tcp: 3600, tcp_closing: 60, udp: 300, udp_one_shot: 20, icmp: 90 },
            nat_filtering: NatFiltering::AddressDependent,
        };
        let only_v6 = MasqConfig {
            masquerade_address_v6: "2001:db8::2".parse().ok(),
            masquerade_pool_v6: vec!["2001:db8::2".parse().unwrap()],
            ..MasqConfig::default()
        };
        let only_v4 = MasqConfig {
            masquerade_address_v4: Some(Ipv4Addr::new(198, 51, 100, 1)),
            masquerade_pool_v4: vec![Ipv4Addr::new(198, 51, 100, 1)],
            ..MasqConfig::default()
        };
        for m in [MasqConfig::default(), full, only_v4, only_v6] {
            let mut v = masq_to_json(&m);
            assert_eq!(v["type"], "ebpf-masq");
            v["cniVersion"] = json!("1.0.0");
            v["name"] = json!("n");
            let back =
                parse_netconf(&serde_json::to_vec(&v).expect("ser")).expect("round trip parses");
            assert_eq!(back.masq, m, "{v}");
        }
    }

    #[test]
    fn never_panics_on_mangled_input() {
        let good = with(json!({
            "nativeRoutingCIDR": ["10.0.0.0/8"], "portRange": "1024-2048", "egressInterfaces": ["eth0"],
            "masqueradeAddress": ["192.0.2.1", "2001:db8::1"], "natMaxEntries": 4096, "logLevel": "debug",
            "masqueradeRules": [{"source": "10.0.0.0/8", "outInterface": "eth0", "except": ["10.1.0.0/16"], "toAddress": "192.0.2.9"}],
            "prevResult": {"ips": [{"address": "10.0.0.5/8"}]},
        }));
        assert!(parse_netconf(&good).is_ok());
        // Every truncation, and pseudo-random byte flips.
        for n in 0..good.len() {
            let _ = parse_netconf(&good[..n]);
            let _ = parse_conf_file(&good[..n]);
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet = b"{}[]\",:0123456789./-abcdefnrstul \\\x00\xff";
        for _ in 0..3000 {
            let mut b = good.clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % b.len();
                b[pos] = alphabet[((x >> 32) as usize) % alphabet.len()];
            }
            let _ = parse_netconf(&b);
            let _ = parse_conf_file(&b);
        }
        // Deep nesting hits serde_json's recursion limit, not the stack.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            parse_netconf(deep.as_bytes()).map_err(|e| e.code),
            Err(code::DECODE_FAILURE)
        );
    }

    #[test]
    fn helpers() {
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("123456789012345").is_ok());
        assert!(check_ifname("1234567890123456").is_err());
        assert!(check_ifname(".").is_err());
        assert!(check_ifname("a:b").is_err());
        assert!(check_ifname("a\tb").is_err());
        assert_eq!(
            suggest("egressinterface", MASQ_KEYS.iter().copied()),
            Some("egressInterfaces")
        );
        assert_eq!(
            suggest("completelydifferent", MASQ_KEYS.iter().copied()),
            None
        );
        let e = parse_netconf(&with(json!({"nativeRoutingCIDR": "10.1.2.3/16"})))
            .expect_err("host bits");
        assert!(e.msg.contains("10.1.0.0/16"), "{}", e.msg);
    }
}

#[cfg(test)]
mod pod_identity_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cni_args_give_namespace_and_name_and_keep_quiet_about_the_rest() {
        let id = pod_identity("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u")
            .unwrap();
        assert_eq!(id, PodIdentity { namespace: "shop".into(), name: "web-0".into() });
        assert_eq!(pod_identity("").unwrap(), PodIdentity::default());
        assert_eq!(pod_identity("FOO=bar;").unwrap(), PodIdentity::default());
        // A value may hold "=": only the first one splits.
        assert_eq!(pod_identity("K8S_POD_NAME=a=b").unwrap().name, "a=b");
    }

    #[test]
    fn bad_cni_args_name_the_variable() {
        for (args, want) in [
            ("K8S_POD_NAME", "is not KEY=VALUE"),
            (&format!("K8S_POD_NAMESPACE={}", "n".repeat(64)), "63 at most"),
            (&format!("K8S_POD_NAME={}", "p".repeat(254)), "253 at most"),
        ] {
            let e = pod_identity(args).unwrap_err();
            assert_eq!(e.code, code::INVALID_ENV, "{args}");
            assert!(e.msg.contains("CNI_ARGS") && e.msg.contains(want), "{args}: {}", e.msg);
        }
    }

    fn conf_with(rc: Value) -> Result<NetConf> {
        let c = json!({"cniVersion": "1.0.0", "name": "n", "type": "ebpf-masq", "runtimeConfig": rc});
        parse_netconf(c.to_string().as_bytes())
    }

    #[test]
    fn annotations_keep_only_ours() {
        let c = conf_with(json!({CAP_POD_ANNOTATIONS: {
            "ebpf-masq.io/egress-policy": "partner", "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            "ebpf-masq.io/x": ""}}))
        .unwrap();
        let want: BTreeMap<String, String> =
            [("ebpf-masq.io/egress-policy", "partner"), ("ebpf-masq.io/x", "")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(c.pod_annotations, want);
        assert!(conf_with(json!({"portMappings": []})).unwrap().pod_annotations.is_empty());
        assert!(conf_with(json!({CAP_POD_ANNOTATIONS: null})).unwrap().pod_annotations.is_empty());
    }

    #[test]
    fn port_mappings_give_the_pods_host_ports() {
        let c = conf_with(json!({CAP_PORT_MAPPINGS: [
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 8080, "containerPort": 80, "protocol": "TCP", "hostIP": "10.0.0.5"},
            {"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
            {"hostPort": 9000, "containerPort": 9000},
            {"HostPort": 7000, "ContainerPort": 80, "Protocol": "udp", "HostIP": ""},
            {"hostPort": 3868, "containerPort": 3868, "protocol": "sctp"}]}))
        .unwrap();
        assert_eq!(c.host_ports, [(8080, 6), (5353, 17), (9000, 6), (7000, 17)]);
        assert!(conf_with(json!({CAP_PORT_MAPPINGS: null})).unwrap().host_ports.is_empty());
        assert!(conf_with(json!({})).unwrap().host_ports.is_empty());
        let many: Vec<Value> = (1..=17).map(|p| json!({"hostPort": 9000 + p, "containerPort": 80})).collect();
        for (rc, want) in [
            (json!({CAP_PORT_MAPPINGS: {"hostPort": 1}}), "runtimeConfig.portMappings\""),
            (json!({CAP_PORT_MAPPINGS: [{"containerPort": 80}]}), "runtimeConfig.portMappings[0].hostPort\""),
            (json!({CAP_PORT_MAPPINGS: [{"hostPort": 0}]}), "runtimeConfig.portMappings[0].hostPort\""),
            (json!({CAP_PORT_MAPPINGS: [{"hostPort": 80}, {"hostPort": 70000}]}), "runtimeConfig.portMappings[1].hostPort\""),
            (json!({CAP_PORT_MAPPINGS: [{"hostPort": 80, "protocol": "icmp"}]}), "runtimeConfig.portMappings[0].protocol\""),
            (json!({CAP_PORT_MAPPINGS: many}), "16 at most"),
        ] {
            let e = conf_with(rc.clone()).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{rc}");
            assert!(e.msg.contains(want), "{rc}: {}", e.msg);
        }
    }

    #[test]
    fn bad_annotations_name_the_key() {
        for (rc, want) in [
            (json!({CAP_POD_ANNOTATIONS: ["a"]}), "runtimeConfig.io.kubernetes.cri.pod-annotations"),
            (json!({CAP_POD_ANNOTATIONS: {"ebpf-masq.io/a": 1}}), "runtimeConfig.io.kubernetes.cri.pod-annotations.ebpf-masq.io/a"),
            (json!({CAP_POD_ANNOTATIONS: {"ebpf-masq.io/a": "v".repeat(1100)}}), "1023 at most"),
        ] {
            let e = conf_with(rc.clone()).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{rc}");
            assert!(e.msg.contains(want), "{rc}: {}", e.msg);
        }
    }
}
