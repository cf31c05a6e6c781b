//! Our own options: each `masqueradeRules` entry and the whole set parsed
//! from a plugin entry, and written back out as JSON (for `install`).

use std::collections::HashSet;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

use super::diag::{expect_bool, expect_str, key_display, quote, unknown_key_error, wrong_type};
use super::egress_policy::{egress_policies_to_json, parse_egress_policies};
use super::ipmasq::{ip_masq_agent_to_json, parse_ip_masq_agent_entry};
use super::keys::{key, RULE_KEYS};
use super::natlog::{nat_log_to_json, parse_nat_log};
use super::port_limit::parse_pod_port_limit;
use super::values::{
    parse_abs_path, parse_cidr, parse_cidr_list, parse_cidr_value, parse_ifname, parse_log_level,
    parse_masquerade_address, parse_nat_max_entries, parse_nat_timeouts, parse_port_range, parse_unicast_ip,
};
use super::{MasqOptions, MasqRule, NatFiltering, MAX_MASQ_RULES, PLUGIN_TYPE, POD_CIDRS_MAX};

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

pub(super) fn parse_masq(obj: &Map<String, Value>) -> Result<MasqOptions> {
    let mut m = MasqOptions::default();

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
    if let Some(v) = obj.get(key::POD_CIDRS) {
        m.pod_cidrs = parse_cidr_list(key::POD_CIDRS, v)?;
        if m.pod_cidrs.len() > POD_CIDRS_MAX {
            return Err(Error::config(key::POD_CIDRS, format!("{} CIDRs; at most {POD_CIDRS_MAX}", m.pod_cidrs.len())));
        }
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
    if let Some(v) = obj.get(key::EGRESS_POLICIES) {
        m.egress_policies = parse_egress_policies(v)?;
    }
    if let Some(v) = obj.get(key::IP_MASQ_AGENT) {
        m.ip_masq_agent = Some(parse_ip_masq_agent_entry(key::IP_MASQ_AGENT, v)?);
    }
    if let Some(v) = obj.get(key::POD_PORT_LIMIT) {
        m.pod_port_limit = Some(parse_pod_port_limit(key::POD_PORT_LIMIT, v)?);
    }
    if let Some(v) = obj.get(key::NAT_LOG) {
        m.nat_log = Some(parse_nat_log(key::NAT_LOG, v)?);
    }
    Ok(m)
}

/// The inverse of parsing, for writing a plugin entry back out (used by
/// `install`): camelCase keys, "type" always, other keys only when they
/// differ from the default.
pub fn masq_to_json(m: &MasqOptions) -> Value {
    let d = MasqOptions::default();
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
    if !m.pod_cidrs.is_empty() {
        o.insert(key::POD_CIDRS.into(), cidrs(&m.pod_cidrs));
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
    if !m.egress_policies.is_empty() {
        o.insert(key::EGRESS_POLICIES.into(), egress_policies_to_json(&m.egress_policies));
    }
    if let Some(a) = &m.ip_masq_agent {
        o.insert(key::IP_MASQ_AGENT.into(), ip_masq_agent_to_json(a));
    }
    if let Some(n) = m.pod_port_limit {
        o.insert(key::POD_PORT_LIMIT.into(), Value::from(n));
    }
    if let Some(c) = &m.nat_log {
        o.insert(key::NAT_LOG.into(), nat_log_to_json(c));
    }
    Value::Object(o)
}
