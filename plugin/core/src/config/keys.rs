//! The JSON keys a plugin entry may hold: ours (`key`) and the standard CNI
//! ones, as the tables unknown keys are checked against. The tables are public
//! so the docs can be checked against the parser's own lists
//! (`plugin/tests/docs/`), never a copy of them.

use super::{ATTACHMENTS_ALIAS_KEY, VALID_ATTACHMENTS_KEY};

/// JSON keys of our own options.
pub mod key {
    pub const NAT_OUTGOING: &str = "natOutgoing";
    pub const NATIVE_ROUTING_CIDR: &str = "nativeRoutingCIDR";
    pub const NON_MASQUERADE_CIDRS: &str = "nonMasqueradeCIDRs";
    pub const POD_CIDRS: &str = "podCIDRs";
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
    pub const EGRESS_POLICIES: &str = "egressPolicies";
    pub const IP_MASQ_AGENT: &str = "ipMasqAgent";
    pub const POD_PORT_LIMIT: &str = "podPortLimit";
    pub const NAT_LOG: &str = "natLog";

    pub const NATLOG_IPFIX: &str = "ipfix";
    pub const NATLOG_FILE: &str = "file";
    pub const NATLOG_MAX_FILE_MB: &str = "maxFileMB";
    pub const NATLOG_DOMAIN: &str = "observationDomain";

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

    pub const POLICY_NAME: &str = "name";
    pub const POLICY_NAMESPACES: &str = "namespaces";
    pub const POLICY_PODS: &str = "pods";
    pub const POLICY_DESTINATIONS: &str = "destinations";
    pub const POLICY_MASQUERADE_ADDRESS: &str = "masqueradeAddress";
    pub const POLICY_NAT_OUTGOING: &str = "natOutgoing";
}

/// Standard CNI keys that may appear in a plugin config besides ours.
pub const STANDARD_KEYS: &[&str] = &[
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

/// Our own top-level keys (each a row of README.md's config table).
pub const MASQ_KEYS: &[&str] = &[
    key::NAT_OUTGOING,
    key::NATIVE_ROUTING_CIDR,
    key::NON_MASQUERADE_CIDRS,
    key::POD_CIDRS,
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
    key::EGRESS_POLICIES,
    key::IP_MASQ_AGENT,
    key::POD_PORT_LIMIT,
    key::NAT_LOG,
];

/// The keys of `natLog`.
pub const NATLOG_KEYS: &[&str] = &[key::NATLOG_IPFIX, key::NATLOG_FILE, key::NATLOG_MAX_FILE_MB, key::NATLOG_DOMAIN];

/// The keys of `natTimeouts`.
pub const TIMEOUT_KEYS: &[&str] = &[
    key::TIMEOUT_TCP,
    key::TIMEOUT_TCP_CLOSING,
    key::TIMEOUT_UDP,
    key::TIMEOUT_UDP_ONE_SHOT,
    key::TIMEOUT_ICMP,
];

/// The keys of a `masqueradeRules` entry.
pub const RULE_KEYS: &[&str] = &[
    key::RULE_SOURCE,
    key::RULE_OUT_INTERFACE,
    key::RULE_EXCEPT,
    key::RULE_TO_ADDRESS,
    key::RULE_NAT_FILTERING,
];

/// The keys of an `egressPolicies` entry.
pub const POLICY_KEYS: &[&str] = &[
    key::POLICY_NAME,
    key::POLICY_NAMESPACES,
    key::POLICY_PODS,
    key::POLICY_DESTINATIONS,
    key::POLICY_MASQUERADE_ADDRESS,
    key::POLICY_NAT_OUTGOING,
];
