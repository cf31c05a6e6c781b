//! What `explain` answers: the verdict, its stable reason code and the map
//! entries behind it (a rule, a pod, an exclusion, a flow), serialized as the
//! command's JSON. The walk that fills it is in `decide`.

use serde::Serialize;

use super::egress_policy::{PolicyReason, PolicyRef};
use super::packet::OutIf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Masquerade,
    Untouched,
    Drop,
}

/// Why: a stable identifier per reason (the `code` field of the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    NotUplink,
    HostTraffic,
    NoConfig,
    EchoReply,
    ExistingFlow,
    InboundFlow,
    FragmentOfFlow,
    Rule,
    RuleNoAddress,
    RuleExcept,
    NotPod,
    UnregisteredPod,
    NatOutgoingFalse,
    NativeRouting,
    NonMasquerade,
    LinkLocal,
    Excluded,
    NoUplinkAddress,
    Pod,
    /// An egress policy's address.
    EgressPolicy,
    /// An egress policy with natOutgoing: false.
    EgressPolicyNoNat,
    Ipv6Unsupported,
    FragmentWithoutState,
    UnsupportedProtocol,
    NoPortRange,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleRef {
    pub id: u32,
    pub source: Option<String>,
    pub out_interface: Option<String>,
    pub to_address: Option<String>,
    /// The except CIDR holding the destination, when the rule did not apply for that reason.
    pub except: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodRef {
    pub container_id: Option<String>,
    pub ifname: Option<String>,
    pub veth: Option<String>,
    pub veth_ifindex: u32,
    pub nat_outgoing: bool,
    /// The most ports the pod may hold towards one remote endpoint (None: no limit).
    pub port_limit: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExclRef {
    pub cidr: String,
    pub reason: String,
    pub index: u32,
    /// "ip-masq-agent config FILE" when the CIDR came from ip-masq-agent's file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowRef {
    pub nat_addr: String,
    pub nat_port: u16,
    pub by_rule: Option<u32>,
    pub idle_s: f64,
    pub packets: u64,
    /// The egress policy whose address the pair took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub packet: String,
    pub family: &'static str,
    pub out_interface: OutIf,
    pub verdict: Verdict,
    /// True when the packet leaves with a translated source.
    pub masqueraded: bool,
    /// The source address the destination sees (None when dropped).
    pub source_seen: Option<String>,
    /// The masquerade address (None unless masqueraded).
    pub address: Option<String>,
    /// The NAT port, for an existing flow (a new flow gets a random one).
    pub port: Option<u16>,
    pub code: Why,
    pub reason: String,
    pub rule: Option<RuleRef>,
    pub pod: Option<PodRef>,
    pub exclusion: Option<ExclRef>,
    pub flow: Option<FlowRef>,
    /// The egress policy that decided (absent: none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyRef>,
    /// Why each egress policy of the node did or did not decide (absent: the
    /// node has none, or they were not consulted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyReason>,
    /// Every check made, in the data plane's order.
    pub trace: Vec<String>,
    pub notes: Vec<String>,
}
