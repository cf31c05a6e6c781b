//! egressPolicies as the maps hold them: each policy's description (egress_policies),
//! its counters (policy_stats) and the pods it holds.

use super::*;

/// What an egress policy does to the traffic it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyAction {
    /// masqueradeAddress: its addresses and CIDRs as configured.
    Masquerade(Vec<String>),
    /// natOutgoing: false.
    NoNat,
}

impl PolicyAction {
    /// "masqueradeAddress 192.0.2.50" / "natOutgoing: false".
    pub fn describe(&self) -> String {
        match self {
            PolicyAction::Masquerade(a) if a.is_empty() => "masqueradeAddress (none given)".into(),
            PolicyAction::Masquerade(a) => format!("masqueradeAddress {}", a.join(", ")),
            PolicyAction::NoNat => "natOutgoing: false".into(),
        }
    }
}

/// One used slot of `egress_policies` (what policy `index` is), its selector and
/// destinations read back from the spec JSON node reconcile wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyDesc {
    pub index: u32,
    pub name: String,
    pub flags: u32,
    pub namespaces: Vec<String>,
    /// `namespace/name` globs; empty: every pod of the namespaces.
    pub pods: Vec<String>,
    /// Destination CIDRs; empty: every destination.
    pub destinations: Vec<String>,
    pub action: PolicyAction,
}

impl PolicyDesc {
    /// Read slot `index` of `egress_policies`: None when the slot is unused. A
    /// spec that does not parse still names the policy (the flags give the action).
    pub fn of(index: u32, info: &EgressPolicyInfo) -> Option<PolicyDesc> {
        if info.used != 1 {
            return None;
        }
        let spec: serde_json::Value = serde_json::from_str(&pod::cstr(&info.spec)).unwrap_or_default();
        let strings = |key: &str| -> Vec<String> {
            match &spec[key] {
                serde_json::Value::String(s) => vec![s.clone()],
                serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
                _ => Vec::new(),
            }
        };
        let no_nat = info.flags & abi::POLICY_F_NO_NAT != 0 || spec["natOutgoing"] == serde_json::json!(false);
        Some(PolicyDesc {
            index,
            name: pod::cstr(&info.name),
            flags: info.flags,
            namespaces: strings("namespaces"),
            pods: strings("pods"),
            destinations: strings("destinations"),
            action: if no_nat { PolicyAction::NoNat } else { PolicyAction::Masquerade(strings("masqueradeAddress")) },
        })
    }

    /// The selector as one line: "namespaces a, b; pods a/web-*".
    pub fn selector(&self) -> String {
        let mut s = format!("namespaces {}", self.namespaces.join(", "));
        if !self.pods.is_empty() {
            s.push_str(&format!("; pods {}", self.pods.join(", ")));
        }
        s
    }

    /// "every destination" or the CIDRs.
    pub fn destinations_text(&self) -> String {
        if self.destinations.is_empty() {
            "every destination".into()
        } else {
            self.destinations.join(", ")
        }
    }

    /// True when the configured destinations hold `dst` (none configured: all do).
    pub fn holds(&self, dst: IpAddr) -> bool {
        self.destinations.is_empty()
            || self.destinations.iter().any(|c| c.parse::<ipnetwork::IpNetwork>().is_ok_and(|n| n.contains(dst)))
    }

    pub fn bit(&self) -> u32 {
        1u32.checked_shl(self.index).unwrap_or(0)
    }
}

/// Every used slot of `egress_policies`, in list order (empty on a data plane
/// without egress policies).
pub fn egress_policy_descs(pins: &Pins) -> Result<Vec<PolicyDesc>> {
    if !has_map(pins, abi::MAP_EGRESS_POLICIES) {
        return Ok(Vec::new());
    }
    let m: Array<MapData, EgressPolicyInfo> = maps::pinned(pins, abi::MAP_EGRESS_POLICIES)?;
    let mut out = Vec::new();
    for i in 0..abi::EGRESS_POLICIES_MAX.min(m.len()) {
        let info = m.get(&i, 0).map_err(e(abi::MAP_EGRESS_POLICIES))?;
        out.extend(PolicyDesc::of(i, &info));
    }
    Ok(out)
}

/// One egress policy with its counters (policy_stats summed over CPUs) and the
/// pods it selects.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRow {
    pub desc: PolicyDesc,
    pub packets: u64,
    pub bytes: u64,
    pub flows: u64,
    pub unmasqueraded: u64,
    /// [`PodRow::label`] of every pod whose mask has the policy's bit.
    pub pods: Vec<String>,
}

/// Every egress policy of the node, with its counters; `pods` are the rows of [`pods`].
pub fn egress_policies(pins: &Pins, pods: &[PodRow]) -> Result<Vec<PolicyRow>> {
    let descs = egress_policy_descs(pins)?;
    let stats: Option<PerCpuArray<MapData, PolicyStats>> =
        if has_map(pins, abi::MAP_POLICY_STATS) { Some(maps::pinned(pins, abi::MAP_POLICY_STATS)?) } else { None };
    let mut out = Vec::new();
    for desc in descs {
        let mut sum = PolicyStats::default();
        if let Some(st) = &stats {
            for s in st.get(&desc.index, 0).map_err(e(abi::MAP_POLICY_STATS))?.iter() {
                sum.packets += s.packets;
                sum.bytes += s.bytes;
                sum.flows += s.flows;
                sum.unmasqueraded += s.unmasqueraded;
            }
        }
        out.push(policy_row(desc, sum, pods));
    }
    Ok(out)
}

/// A policy's row from its counters and the node's pods.
pub fn policy_row(desc: PolicyDesc, sum: PolicyStats, pods: &[PodRow]) -> PolicyRow {
    let bit = desc.bit();
    PolicyRow {
        pods: pods.iter().filter(|p| p.policies & bit != 0).map(PodRow::label).collect(),
        desc,
        packets: sum.packets,
        bytes: sum.bytes,
        flows: sum.flows,
        unmasqueraded: sum.unmasqueraded,
    }
}

/// The names of the policies in `mask` (bit i = policy i), in list order.
pub fn policy_names(descs: &[PolicyDesc], mask: u32) -> Vec<String> {
    descs.iter().filter(|d| mask & d.bit() != 0).map(|d| d.name.clone()).collect()
}
