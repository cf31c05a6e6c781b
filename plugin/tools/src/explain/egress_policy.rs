//! Egress policies in the decision: `egress_policy_v4`/`egress_policy_v6` of
//! bpf/lib/decide.h step by step (one LPM lookup of (the pod's mask, destination)
//! in policy_dst4/policy_dst6, then the policy's masq_pool slot 1 + i paired by the
//! source), and why each other policy did not match. Reads only through `Lookups`.

use std::net::IpAddr;

use serde::Serialize;

use super::lookups::{Lookups, PodDesc};
use ebpf_masq_core::{bpf::abi, error::Result};
use crate::readers::{PolicyAction, PolicyDesc};

/// The egress policy that decided the packet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyRef {
    pub name: String,
    pub index: u32,
    /// "masquerade" or "no_nat" (natOutgoing: false).
    pub action: &'static str,
    /// The policy's address for this source (None: natOutgoing false, or no
    /// address of the packet's family: the network's stays).
    pub address: Option<String>,
}

/// Why one egress policy did or did not decide the packet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReason {
    pub policy: String,
    pub index: u32,
    pub matched: bool,
    /// matched | not_selected | not_this_destination | earlier_policy
    pub code: &'static str,
    pub reason: String,
}

/// What the pod's policies do to the packet.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// No policy of the pod holds the destination, or the one that does has no
    /// address of this family: the network's address stays.
    Network,
    /// A natOutgoing:false policy: untouched.
    NoNat,
    /// The policy's address.
    Address(IpAddr),
}

pub struct PolicyStep {
    pub outcome: Outcome,
    pub policy: Option<PolicyRef>,
    pub policies: Vec<PolicyReason>,
    pub steps: Vec<String>,
}

fn selector_of(d: &PolicyDesc) -> String {
    let mut s = format!("its namespaces: {}", d.namespaces.join(", "));
    if !d.pods.is_empty() {
        s.push_str(&format!("; its pods: {}", d.pods.join(", ")));
    }
    s
}

/// The pod's egress policies for `src` -> `dst` (`mask` = its `PodInfo.policies`).
/// None when the node has no egress policy and the pod none: the decision is
/// what it was before policies.
pub fn egress_policy<L: Lookups>(
    l: &L,
    src: IpAddr,
    dst: IpAddr,
    mask: u32,
    pod: Option<&PodDesc>,
) -> Result<Option<PolicyStep>> {
    let descs = l.egress_policies()?;
    if mask == 0 && descs.is_empty() {
        return Ok(None);
    }
    let name_of = |i: u32| descs.iter().find(|d| d.index == i).map(|d| d.name.clone()).unwrap_or_else(|| format!("#{i}"));
    let mine: Vec<String> =
        (0..abi::EGRESS_POLICIES_MAX).filter(|i| mask & (1 << i) != 0).map(|i| format!("\"{}\"", name_of(i))).collect();
    let (map, fam) = if dst.is_ipv6() { ("policy_dst6", "IPv6") } else { ("policy_dst4", "IPv4") };
    let mut steps = Vec::new();

    // egress_policy_v4/v6 runs only for a pod with a mask (pod->egress).
    let hit = if mask == 0 {
        steps.push("no egress policy selects this pod (its policy mask is 0): the network's address".to_string());
        None
    } else {
        match l.policy_dst(mask, dst)? {
            Some(h) if h.policy < abi::EGRESS_POLICIES_MAX => Some(h),
            // The data plane ignores an entry naming no valid policy.
            _ => {
                steps.push(format!(
                    "{map} (mask {mask:#x} = policies {}, destination {dst}): no entry, none of them holds {dst}: \
                     the network's address",
                    mine.join(", ")
                ));
                None
            }
        }
    };

    let ns = pod.and_then(|p| p.k8s_namespace.as_deref()).filter(|n| !n.is_empty());
    let who = match (ns, pod.and_then(|p| p.k8s_name.as_deref())) {
        (Some(ns), Some(n)) if !n.is_empty() => format!("pod {ns}/{n}"),
        (Some(ns), _) => format!("namespace {ns}"),
        _ => "the pod has no Kubernetes namespace".to_string(),
    };
    let mut policies = Vec::new();
    for d in &descs {
        let (matched, code, reason) = if hit.is_some_and(|h| h.policy == d.index) {
            (true, "matched", format!("selects the pod and holds {dst}"))
        } else if mask & d.bit() == 0 {
            (false, "not_selected", format!("does not select this pod ({who}; {})", selector_of(d)))
        } else {
            match hit {
                Some(h) if h.policy < d.index && d.holds(dst) => (
                    false,
                    "earlier_policy",
                    format!("selects the pod and holds {dst}, but \"{}\" comes first (first match wins)", name_of(h.policy)),
                ),
                _ => (
                    false,
                    "not_this_destination",
                    format!("selects the pod but not this destination (its destinations: {})", d.destinations_text()),
                ),
            }
        };
        policies.push(PolicyReason { policy: d.name.clone(), index: d.index, matched, code, reason });
    }

    let Some(h) = hit else {
        return Ok(Some(PolicyStep { outcome: Outcome::Network, policy: None, policies, steps }));
    };
    let name = name_of(h.policy);
    let no_nat = h.flags & abi::POLICY_F_NO_NAT != 0;
    let mut policy = PolicyRef { name: name.clone(), index: h.policy, action: if no_nat { "no_nat" } else { "masquerade" }, address: None };
    let what = format!("{map} (mask {mask:#x} = policies {}, destination {dst}): egress policy \"{name}\"", mine.join(", "));
    if no_nat {
        steps.push(format!("{what} (natOutgoing: false)"));
        return Ok(Some(PolicyStep { outcome: Outcome::NoNat, policy: Some(policy), policies, steps }));
    }
    // masq_pool slot 1 + i: the policy's addresses; one is enough, two or more are paired.
    let pool = l.pool_slot(h.policy + 1)?;
    let len = pool.map(|p| if dst.is_ipv6() { p.len6 } else { p.len4 }).unwrap_or(0);
    let addr = pool.filter(|_| (1..=abi::MASQ_POOL_MAX as u32).contains(&len)).and_then(|p| p.pick_any(src));
    let Some(addr) = addr else {
        let given = descs
            .iter()
            .find(|d| d.index == h.policy)
            .map(|d| match &d.action {
                PolicyAction::Masquerade(a) if !a.is_empty() => format!(" (its masqueradeAddress: {})", a.join(", ")),
                _ => String::new(),
            })
            .unwrap_or_default();
        steps.push(format!("{what}, which has no {fam} address{given} (masq_pool slot {}): the network's address stays", h.policy + 1));
        return Ok(Some(PolicyStep { outcome: Outcome::Network, policy: Some(policy), policies, steps }));
    };
    if len > 1 {
        steps.push(format!("{what}: a pool of {len}, source {src} is paired with {addr} (RFC 4787 REQ-2)"));
    } else {
        steps.push(format!("{what}: its address {addr}"));
    }
    policy.address = Some(addr.to_string());
    Ok(Some(PolicyStep { outcome: Outcome::Address(addr), policy: Some(policy), policies, steps }))
}
