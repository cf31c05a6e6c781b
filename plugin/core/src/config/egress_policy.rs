//! `egressPolicies`: which address (or none) a selected pod's traffic leaves
//! with, per destination. The parsed types, their parser and writer, the glob
//! matcher of the selectors, and the reference decision (`first_match`) with
//! the LPM entries the data plane looks the same decision up in (`policy_dst_entries`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use serde_json::{Map, Value};

use crate::error::{code, Error, Result};

use super::diag::{expect_bool, expect_str, key_display, quote, unknown_key_error, wrong_type};
use super::keys::{key, POLICY_KEYS};
use super::values::{parse_cidr_list, parse_masquerade_address};

/// Most entries accepted in `egressPolicies` (one bit each in a pod's mask).
pub const EGRESS_POLICIES_MAX: usize = 32;
/// Most `destinations` of one policy.
pub const EGRESS_DESTINATIONS_MAX: usize = 64;
/// The pod annotation that narrows a pod to one policy.
pub const EGRESS_POLICY_ANNOTATION: &str = "ebpf-masq.io/egress-policy";

/// Longest namespace name (a DNS label) and pod name (a DNS subdomain).
const NAMESPACE_MAX: usize = 63;
const POD_NAME_MAX: usize = 253;

/// What a glob is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobKind {
    /// A namespace name: `[a-z0-9-]`, 1-63 characters.
    Namespace,
    /// `namespace/name`: exactly one `/`; the name may also hold `.`, up to 253 characters.
    Pod,
}

/// A selector glob: `*` any run (also empty), `?` one character, anything else
/// itself; anchored at both ends. Wildcards never match a `/`, so a pod glob's
/// namespace part only ever matches the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    /// Check `s` as a glob of `kind`; errors name `key`.
    pub fn parse(key: &str, s: &str, kind: GlobKind) -> Result<Glob> {
        let bad = |why: String| Error::config(key, format!("{} is not a {} glob: {why}", quote(s), kind.what()));
        let check = |part: &str, what: &str, max: usize, extra: &[char]| -> Result<()> {
            if part.is_empty() {
                return Err(bad(format!("the {what} part is empty")));
            }
            if part.chars().count() > max {
                return Err(bad(format!("the {what} part is longer than {max} characters")));
            }
            let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*' || c == '?';
            if let Some(c) = part.chars().find(|c| !ok(*c) && !extra.contains(c)) {
                let allowed = if extra.is_empty() { "a-z, 0-9 and \"-\"" } else { "a-z, 0-9, \"-\" and \".\"" };
                return Err(bad(format!(
                    "{c:?} is not allowed (a {what} holds {allowed}; a glob also \"*\" and \"?\")"
                )));
            }
            Ok(())
        };
        match kind {
            GlobKind::Namespace => {
                if s.contains('/') {
                    return Err(bad("a namespace holds no \"/\" (pods globs are NAMESPACE/NAME)".into()));
                }
                check(s, "namespace", NAMESPACE_MAX, &[])?;
            }
            GlobKind::Pod => {
                let parts: Vec<&str> = s.split('/').collect();
                if parts.len() != 2 {
                    return Err(bad(format!("expected exactly one \"/\" (NAMESPACE/NAME), found {}", parts.len() - 1)));
                }
                check(parts[0], "namespace", NAMESPACE_MAX, &[])?;
                check(parts[1], "name", POD_NAME_MAX, &['.'])?;
            }
        }
        Ok(Glob(s.to_owned()))
    }

    /// Whether `text` matches the whole glob.
    pub fn matches(&self, text: &str) -> bool {
        let pats: Vec<&str> = self.0.split('/').collect();
        let texts: Vec<&str> = text.split('/').collect();
        pats.len() == texts.len() && pats.iter().zip(&texts).all(|(p, t)| match_segment(p.as_bytes(), t))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl GlobKind {
    fn what(self) -> &'static str {
        match self {
            GlobKind::Namespace => "namespace",
            GlobKind::Pod => "pod",
        }
    }
}

/// Wildcard match of one `/`-free segment: greedy, backtracking only to the
/// last `*` (enough: a later `*` can absorb whatever an earlier one would).
fn match_segment(pat: &[u8], text: &str) -> bool {
    let t: Vec<char> = text.chars().collect();
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None; // (pattern index after the `*`, text index it resumes at)
    while i < t.len() {
        match pat.get(p) {
            Some(b'*') => {
                p += 1;
                star = Some((p, i));
            }
            Some(b'?') => {
                p += 1;
                i += 1;
            }
            Some(&c) if char::from(c) == t[i] => {
                p += 1;
                i += 1;
            }
            _ => match star {
                Some((sp, si)) => {
                    p = sp;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|c| *c == b'*')
}

#[derive(Debug, Clone, PartialEq)]
pub enum EgressAction {
    /// `masqueradeAddress`: per family an address or a pool (empty: the network's address).
    Masquerade { v4: Vec<Ipv4Addr>, v6: Vec<Ipv6Addr> },
    /// `natOutgoing: false`: not masqueraded.
    NoNat,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EgressPolicy {
    pub name: String,
    pub namespaces: Vec<Glob>,
    /// Empty: every pod of the namespaces.
    pub pods: Vec<Glob>,
    /// As given; empty = every destination.
    pub destinations: Vec<IpNetwork>,
    pub action: EgressAction,
}

/// A namespace or name as the runtime gave it; empty is none.
fn given(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

impl EgressPolicy {
    /// Whether the selector admits the pod. A pod without a Kubernetes namespace
    /// is never selected; with `pods`, neither is one without a name.
    pub fn selects(&self, namespace: Option<&str>, name: Option<&str>) -> bool {
        let Some(ns) = given(namespace) else { return false };
        if !self.namespaces.iter().any(|g| g.matches(ns)) {
            return false;
        }
        if self.pods.is_empty() {
            return true;
        }
        let Some(name) = given(name) else { return false };
        let full = format!("{ns}/{name}");
        self.pods.iter().any(|g| g.matches(&full))
    }

    /// Whether the policy applies to traffic towards `dst`.
    fn holds(&self, dst: IpAddr) -> bool {
        self.destinations.is_empty() || self.destinations.iter().any(|c| c.contains(dst))
    }

    /// Whether the policy applies to every address of `net`.
    fn holds_net(&self, net: &IpNetwork) -> bool {
        self.destinations.is_empty() || self.destinations.iter().any(|c| contains_net(c, net))
    }
}

fn contains_net(outer: &IpNetwork, inner: &IpNetwork) -> bool {
    outer.is_ipv4() == inner.is_ipv4() && outer.prefix() <= inner.prefix() && outer.contains(inner.network())
}

/// The policies of `mask`, with their index, in list order.
fn in_mask(policies: &[EgressPolicy], mask: u32) -> impl Iterator<Item = (usize, &EgressPolicy)> {
    policies.iter().enumerate().take(EGRESS_POLICIES_MAX).filter(move |(i, _)| mask & (1 << i) != 0)
}

/// The policies that select a pod, as a bit mask (bit i = policies[i]); with the annotation, that policy's bit
/// only, or the code 7 error above.
pub fn select_policies(
    policies: &[EgressPolicy],
    namespace: Option<&str>,
    name: Option<&str>,
    annotation: Option<&str>,
) -> Result<u32> {
    let mask = policies
        .iter()
        .enumerate()
        .take(EGRESS_POLICIES_MAX)
        .filter(|(_, p)| p.selects(namespace, name))
        .fold(0u32, |m, (i, _)| m | 1 << i);
    let Some(wanted) = annotation else { return Ok(mask) };
    let refuse = |why: String| {
        Error::new(code::INVALID_CONFIG, format!("annotation {}: policy {} {why}", quote(EGRESS_POLICY_ANNOTATION), quote(wanted)))
    };
    let Some(i) = policies.iter().take(EGRESS_POLICIES_MAX).position(|p| p.name == wanted) else {
        let known: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
        let known = if known.is_empty() { "there are none".to_owned() } else { format!("its policies: {}", known.join(", ")) };
        return Err(refuse(format!("is not in {} ({known})", key::EGRESS_POLICIES)));
    };
    if mask & (1 << i) != 0 {
        return Ok(1 << i);
    }
    let p = &policies[i];
    let globs = |g: &[Glob]| g.iter().map(Glob::as_str).collect::<Vec<_>>().join(", ");
    let mut its = format!("its namespaces: {}", globs(&p.namespaces));
    if !p.pods.is_empty() {
        its.push_str(&format!("; its pods: {}", globs(&p.pods)));
    }
    let pod = match (given(namespace), given(name)) {
        (None, _) => "a pod without a Kubernetes namespace (no K8S_POD_NAMESPACE), which no policy selects".to_owned(),
        (Some(ns), Some(n)) => format!("pod {ns}/{n}"),
        (Some(ns), None) => format!("pod {ns}/? (no K8S_POD_NAME)"),
    };
    Err(refuse(format!("does not select {pod} ({its})")))
}

/// The reference semantics: the first policy of `mask` (lowest index) that holds `dst`.
pub fn first_match(policies: &[EgressPolicy], mask: u32, dst: IpAddr) -> Option<usize> {
    in_mask(policies, mask).find(|(_, p)| p.holds(dst)).map(|(i, _)| i)
}

/// The same decision as LPM entries (what the data plane looks up): every destination CIDR of the mask's
/// policies (0.0.0.0/0 and ::/0 for a policy without destinations), each labelled with the first policy of
/// the mask that holds all of it. A longest-prefix lookup then returns first_match (proof: the longest
/// matching entry p lies inside the winning policy's CIDR c; an earlier policy holding p would hold dst).
/// Each CIDR appears once, in the order first met.
pub fn policy_dst_entries(policies: &[EgressPolicy], mask: u32) -> Vec<(IpNetwork, usize)> {
    let everything = [
        IpNetwork::V4(Ipv4Network::new(Ipv4Addr::UNSPECIFIED, 0).expect("/0 is a prefix")),
        IpNetwork::V6(Ipv6Network::new(Ipv6Addr::UNSPECIFIED, 0).expect("/0 is a prefix")),
    ];
    let mut out: Vec<(IpNetwork, usize)> = Vec::new();
    for (_, p) in in_mask(policies, mask) {
        let nets = if p.destinations.is_empty() { &everything[..] } else { &p.destinations[..] };
        for net in nets {
            if out.iter().any(|(n, _)| n == net) {
                continue;
            }
            let (first, _) = in_mask(policies, mask).find(|(_, q)| q.holds_net(net)).expect("p itself holds net");
            out.push((*net, first));
        }
    }
    out
}

/// An RFC 1123 DNS label (as Kubernetes names Namespaces and Services): 1-63 of
/// `[a-z0-9-]`, starting and ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAMESPACE_MAX
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A policy name is a DNS label.
fn check_policy_name(key: &str, s: &str) -> Result<()> {
    if is_dns_label(s) {
        Ok(())
    } else {
        Err(Error::config(
            key,
            format!(
                "{} is not a policy name: expected a DNS label (1-63 characters of a-z, 0-9 and \"-\", \
                 starting and ending with a letter or digit)",
                quote(s)
            ),
        ))
    }
}

/// A non-empty list of globs of `kind` at `key`.
fn parse_globs(key: &str, v: &Value, kind: GlobKind, what: &str) -> Result<Vec<Glob>> {
    let a = v.as_array().ok_or_else(|| wrong_type(key, &format!("a list of {what} globs"), v))?;
    if a.is_empty() {
        return Err(Error::config(key, format!("list must not be empty; it names the {what}s the policy selects")));
    }
    a.iter()
        .enumerate()
        .map(|(j, e)| {
            let p = format!("{key}[{j}]");
            Glob::parse(&p, expect_str(&p, e)?, kind)
        })
        .collect()
}

fn parse_policy(idx: usize, v: &Value) -> Result<EgressPolicy> {
    let base = format!("{}[{idx}]", key::EGRESS_POLICIES);
    let obj = v.as_object().ok_or_else(|| wrong_type(&base, "an object", v))?;
    for k in obj.keys() {
        if !POLICY_KEYS.contains(&k.as_str()) {
            return Err(unknown_key_error(&format!("{base}.{}", key_display(k)), k, POLICY_KEYS));
        }
    }
    let path = |k: &str| format!("{base}.{k}");

    let name = match obj.get(key::POLICY_NAME) {
        Some(v) => {
            let p = path(key::POLICY_NAME);
            let s = expect_str(&p, v)?;
            check_policy_name(&p, s)?;
            s.to_owned()
        }
        None => return Err(Error::config(&path(key::POLICY_NAME), "required (the policy's name, a DNS label)")),
    };
    let namespaces = match obj.get(key::POLICY_NAMESPACES) {
        Some(v) => parse_globs(&path(key::POLICY_NAMESPACES), v, GlobKind::Namespace, "namespace")?,
        None => {
            return Err(Error::config(
                &path(key::POLICY_NAMESPACES),
                "required (the namespaces, names or globs, whose pods the policy selects)",
            ))
        }
    };
    let pods = match obj.get(key::POLICY_PODS) {
        Some(v) => parse_globs(&path(key::POLICY_PODS), v, GlobKind::Pod, "pod")?,
        None => Vec::new(),
    };
    let destinations = match obj.get(key::POLICY_DESTINATIONS) {
        Some(v) => {
            let p = path(key::POLICY_DESTINATIONS);
            let list = parse_cidr_list(&p, v)?;
            if list.is_empty() {
                return Err(Error::config(&p, "list must not be empty; leave the key out for every destination"));
            }
            if list.len() > EGRESS_DESTINATIONS_MAX {
                return Err(Error::config(
                    &p,
                    format!("at most {EGRESS_DESTINATIONS_MAX} destinations are supported, got {}", list.len()),
                ));
            }
            list
        }
        None => Vec::new(),
    };
    let masquerade = match obj.get(key::POLICY_MASQUERADE_ADDRESS) {
        Some(v) => Some(parse_masquerade_address(&path(key::POLICY_MASQUERADE_ADDRESS), v)?),
        None => None,
    };
    let no_nat = match obj.get(key::POLICY_NAT_OUTGOING) {
        Some(v) => {
            let p = path(key::POLICY_NAT_OUTGOING);
            if expect_bool(&p, v)? {
                return Err(Error::config(
                    &p,
                    "true is not an action; a policy either sets masqueradeAddress or opts its pods out \
                     with natOutgoing: false",
                ));
            }
            true
        }
        None => false,
    };
    let action = match (masquerade, no_nat) {
        (Some((v4, v6)), false) => EgressAction::Masquerade { v4, v6 },
        (None, true) => EgressAction::NoNat,
        (Some(_), true) => {
            return Err(Error::config(
                &base,
                "both masqueradeAddress and natOutgoing: false; a policy takes exactly one action",
            ))
        }
        (None, false) => {
            return Err(Error::config(
                &base,
                "no action; a policy takes exactly one of masqueradeAddress or natOutgoing: false",
            ))
        }
    };
    Ok(EgressPolicy { name, namespaces, pods, destinations, action })
}

/// `egressPolicies`: at most EGRESS_POLICIES_MAX policies with unique names.
pub(super) fn parse_egress_policies(v: &Value) -> Result<Vec<EgressPolicy>> {
    let k = key::EGRESS_POLICIES;
    let a = v.as_array().ok_or_else(|| wrong_type(k, "a list of policy objects", v))?;
    if a.len() > EGRESS_POLICIES_MAX {
        return Err(Error::config(
            k,
            format!("at most {EGRESS_POLICIES_MAX} policies are supported, got {}", a.len()),
        ));
    }
    let mut out: Vec<EgressPolicy> = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        let p = parse_policy(i, e)?;
        if let Some(j) = out.iter().position(|q| q.name == p.name) {
            return Err(Error::config(
                &format!("{k}[{i}].{}", key::POLICY_NAME),
                format!("{} is already the name of {k}[{j}]; names must be unique", quote(&p.name)),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// The inverse of [`parse_egress_policies`], for `masq_to_json`.
pub fn egress_policies_to_json(policies: &[EgressPolicy]) -> Value {
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    let globs = |g: &[Glob]| strings(g.iter().map(|g| g.as_str().to_owned()).collect());
    let list = policies
        .iter()
        .map(|p| {
            let mut o = Map::new();
            o.insert(key::POLICY_NAME.into(), Value::String(p.name.clone()));
            o.insert(key::POLICY_NAMESPACES.into(), globs(&p.namespaces));
            if !p.pods.is_empty() {
                o.insert(key::POLICY_PODS.into(), globs(&p.pods));
            }
            if !p.destinations.is_empty() {
                o.insert(key::POLICY_DESTINATIONS.into(), strings(p.destinations.iter().map(|c| c.to_string()).collect()));
            }
            match &p.action {
                EgressAction::Masquerade { v4, v6 } => {
                    let all = v4.iter().map(|a| a.to_string()).chain(v6.iter().map(|a| a.to_string()));
                    o.insert(key::POLICY_MASQUERADE_ADDRESS.into(), strings(all.collect()));
                }
                EgressAction::NoNat => {
                    o.insert(key::POLICY_NAT_OUTGOING.into(), Value::Bool(false));
                }
            }
            Value::Object(o)
        })
        .collect();
    Value::Array(list)
}
