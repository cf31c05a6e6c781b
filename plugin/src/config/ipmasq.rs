//! ip-masq-agent's config file, read as ip-masq-agent reads it, and what the
//! agent keeps of it in the chained entry (`ipMasqAgent`).
//!
//! The file is the `config` key of the `ip-masq-agent` ConfigMap, mounted at
//! `/etc/config/ip-masq-agent`: YAML or JSON with `nonMasqueradeCIDRs`,
//! `cidrLimit`, `masqLinkLocal`, `masqLinkLocalIPv6` and `resyncInterval`
//! (kubernetes-sigs/ip-masq-agent, cmd/ip-masq-agent/ip-masq-agent.go). As
//! there, a key left out keeps its default, an absent file means the defaults,
//! a CIDR must be aligned and `resyncInterval` is a Go duration string. Unlike
//! there (Go's JSON decoder ignores what it does not know and matches keys in any
//! case), an unknown or duplicated key is an error naming it, as everywhere else.

use std::{path::PathBuf, time::Duration};

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::error::{code, Error, Result};

use super::diag::{expect_bool, expect_str, key_display, quote, unknown_key_error, wrong_type};
use super::json::{duplicate_error, parse_json, parse_with};
use super::values::{parse_abs_path, parse_cidr_list};

/// Where ip-masq-agent (and Cilium's `enable-ip-masq-agent`) read the file.
pub const IP_MASQ_AGENT_DEFAULT_PATH: &str = "/etc/config/ip-masq-agent";

/// The keys ip-masq-agent knows.
pub mod ipmasq_key {
    pub const NON_MASQUERADE_CIDRS: &str = "nonMasqueradeCIDRs";
    pub const CIDR_LIMIT: &str = "cidrLimit";
    pub const MASQ_LINK_LOCAL: &str = "masqLinkLocal";
    pub const MASQ_LINK_LOCAL_IPV6: &str = "masqLinkLocalIPv6";
    pub const RESYNC_INTERVAL: &str = "resyncInterval";
}
use ipmasq_key as k;

pub const IP_MASQ_AGENT_KEYS: &[&str] =
    &[k::NON_MASQUERADE_CIDRS, k::CIDR_LIMIT, k::MASQ_LINK_LOCAL, k::MASQ_LINK_LOCAL_IPV6, k::RESYNC_INTERVAL];

/// ip-masq-agent's default non-masquerade list: RFC 1918.
pub const IP_MASQ_AGENT_DEFAULT_CIDRS: &[&str] = &["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];
/// What `--nomasq-all-reserved-ranges` adds to it (GKE's default list is the sum).
pub const IP_MASQ_AGENT_RESERVED_CIDRS: &[&str] = &[
    "100.64.0.0/10",   // RFC 6598
    "192.0.0.0/24",    // RFC 6890
    "192.0.2.0/24",    // RFC 5737
    "192.88.99.0/24",  // RFC 7526
    "198.18.0.0/15",   // RFC 6815
    "198.51.100.0/24", // RFC 5737
    "203.0.113.0/24",  // RFC 5737
    "240.0.0.0/4",     // RFC 5735
];
pub const IP_MASQ_AGENT_DEFAULT_CIDR_LIMIT: u64 = 64;
pub const IP_MASQ_AGENT_DEFAULT_RESYNC: Duration = Duration::from_secs(60);

/// One ip-masq-agent config file, parsed (or its defaults when it is absent).
#[derive(Debug, Clone, PartialEq)]
pub struct IpMasqAgentFile {
    pub non_masquerade_cidrs: Vec<IpNetwork>,
    pub cidr_limit: u64,
    pub masq_link_local: bool,
    pub masq_link_local_ipv6: bool,
    pub resync_interval: Duration,
}

impl IpMasqAgentFile {
    /// ip-masq-agent's defaults; `all_reserved`: as with `--nomasq-all-reserved-ranges`.
    pub fn defaults(all_reserved: bool) -> Self {
        let extra = if all_reserved { IP_MASQ_AGENT_RESERVED_CIDRS } else { &[] };
        IpMasqAgentFile {
            non_masquerade_cidrs: IP_MASQ_AGENT_DEFAULT_CIDRS
                .iter()
                .chain(extra)
                .map(|c| c.parse().expect("static CIDR"))
                .collect(),
            cidr_limit: IP_MASQ_AGENT_DEFAULT_CIDR_LIMIT,
            masq_link_local: false,
            masq_link_local_ipv6: false,
            resync_interval: IP_MASQ_AGENT_DEFAULT_RESYNC,
        }
    }
}

/// Parse the file's bytes: JSON when it starts with `{`, YAML otherwise (as
/// ip-masq-agent's yaml.ToJSON does, JSON being YAML). Empty or only comments:
/// the defaults. Errors are code 7 naming the key.
pub fn parse_ip_masq_agent(bytes: &[u8], all_reserved: bool) -> Result<IpMasqAgentFile> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::new(code::DECODE_FAILURE, format!("ip-masq-agent config is not UTF-8: {e}")))?;
    let (v, dups) = if text.trim_start().starts_with('{') {
        parse_json(bytes)
            .map_err(|e| Error::new(e.code, e.msg.replace("network config", "ip-masq-agent config")))?
    } else if text.trim().is_empty() {
        (Value::Null, Vec::new())
    } else {
        parse_with(serde_yaml_ng::Deserializer::from_str(text)).map_err(|e| {
            Error::new(code::DECODE_FAILURE, format!("failed to decode ip-masq-agent config as YAML: {e}"))
        })?
    };
    if let Some(d) = dups.first() {
        return Err(duplicate_error(d));
    }
    let mut out = IpMasqAgentFile::defaults(all_reserved);
    let obj = match &v {
        // An empty YAML document (comments only): Go unmarshals `null` into nothing.
        Value::Null => return Ok(out),
        Value::Object(o) => o,
        other => {
            return Err(Error::new(
                code::INVALID_CONFIG,
                format!("invalid ip-masq-agent config: expected a mapping of keys, got {}", short(other)),
            ))
        }
    };
    for key in obj.keys() {
        if !IP_MASQ_AGENT_KEYS.contains(&key.as_str()) {
            return Err(unknown_key_error(&key_display(key), key, IP_MASQ_AGENT_KEYS));
        }
    }
    if let Some(v) = obj.get(k::NON_MASQUERADE_CIDRS) {
        out.non_masquerade_cidrs = parse_cidr_list(k::NON_MASQUERADE_CIDRS, v)?;
    }
    if let Some(v) = obj.get(k::CIDR_LIMIT) {
        out.cidr_limit = v.as_u64().ok_or_else(|| wrong_type(k::CIDR_LIMIT, "a whole number", v))?;
    }
    if let Some(v) = obj.get(k::MASQ_LINK_LOCAL) {
        out.masq_link_local = expect_bool(k::MASQ_LINK_LOCAL, v)?;
    }
    if let Some(v) = obj.get(k::MASQ_LINK_LOCAL_IPV6) {
        out.masq_link_local_ipv6 = expect_bool(k::MASQ_LINK_LOCAL_IPV6, v)?;
    }
    if let Some(v) = obj.get(k::RESYNC_INTERVAL) {
        let s = expect_str(k::RESYNC_INTERVAL, v)?;
        out.resync_interval = parse_go_duration(s).map_err(|why| Error::config(k::RESYNC_INTERVAL, why))?;
    }
    let n = out.non_masquerade_cidrs.len() as u64;
    if n > out.cidr_limit {
        return Err(Error::config(
            k::NON_MASQUERADE_CIDRS,
            format!("{n} CIDRs, more than cidrLimit {} (ip-masq-agent refuses it too)", out.cidr_limit),
        ));
    }
    Ok(out)
}

fn short(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("a list of {} element(s)", a.len()),
        Value::String(s) => format!("string {}", quote(s)),
        other => other.to_string(),
    }
}

/// Go's `time.ParseDuration` for the values a resync interval takes: a sequence
/// of decimal numbers each with a unit (ns, us, µs, ms, s, m, h), e.g. "60s",
/// "1m", "1h30m", "1.5s"; "0" alone. Negative intervals are refused.
pub fn parse_go_duration(s: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("{} is not a duration; expected e.g. \"60s\", \"1m\" or \"1h30m\"", quote(s));
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("{} is negative; expected a duration such as \"60s\"", quote(s)));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad());
        }
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("{}: a number without a unit; write e.g. \"{num}s\"", quote(s))),
            _ => return Err(format!("{}: unknown unit {}", quote(s), quote(unit))),
        };
        total += value * scale;
        rest = tail;
    }
    // Go's Duration is int64 nanoseconds: about 292 years.
    if total > 9.2e9 {
        return Err(format!("{} is longer than a Go duration can be", quote(s)));
    }
    Ok(Duration::from_secs_f64(total))
}

/// What the agent took from the file and writes into the chained entry as
/// `ipMasqAgent`, so that every ADD and `apply` reconciles the node to the same
/// exclusions and `status`/`explain` can name the file.
#[derive(Debug, Clone, PartialEq)]
pub struct IpMasqAgent {
    /// "file": the path the agent read (absolute).
    pub file: PathBuf,
    /// "fileAbsent": the file did not exist, so these are ip-masq-agent's defaults.
    pub file_absent: bool,
    /// "nonMasqueradeCIDRs": unioned with the network's own nonMasqueradeCIDRs.
    pub non_masquerade_cidrs: Vec<IpNetwork>,
    /// "masqLinkLocal" / "masqLinkLocalIPv6": replace the network's own.
    pub masq_link_local: bool,
    pub masq_link_local_ipv6: bool,
}

impl IpMasqAgent {
    pub fn from_file(file: PathBuf, file_absent: bool, f: &IpMasqAgentFile) -> Self {
        IpMasqAgent {
            file,
            file_absent,
            non_masquerade_cidrs: f.non_masquerade_cidrs.clone(),
            masq_link_local: f.masq_link_local,
            masq_link_local_ipv6: f.masq_link_local_ipv6,
        }
    }

    /// "FILE" or "FILE (absent: ip-masq-agent's defaults)": how status and explain name it.
    pub fn describe(&self) -> String {
        if self.file_absent {
            format!("{} (absent: ip-masq-agent's defaults)", self.file.display())
        } else {
            self.file.display().to_string()
        }
    }
}

pub(super) mod entry_key {
    pub const FILE: &str = "file";
    pub const FILE_ABSENT: &str = "fileAbsent";
}
/// The keys of the chained entry's `ipMasqAgent` object.
pub const IP_MASQ_AGENT_ENTRY_KEYS: &[&str] =
    &[entry_key::FILE, entry_key::FILE_ABSENT, k::NON_MASQUERADE_CIDRS, k::MASQ_LINK_LOCAL, k::MASQ_LINK_LOCAL_IPV6];

/// The chained entry's `ipMasqAgent` object (`base` is its key, for messages).
pub(super) fn parse_ip_masq_agent_entry(base: &str, v: &Value) -> Result<IpMasqAgent> {
    let obj = v.as_object().ok_or_else(|| wrong_type(base, "an object", v))?;
    let path = |key: &str| format!("{base}.{key}");
    for key in obj.keys() {
        if !IP_MASQ_AGENT_ENTRY_KEYS.contains(&key.as_str()) {
            return Err(unknown_key_error(&path(&key_display(key)), key, IP_MASQ_AGENT_ENTRY_KEYS));
        }
    }
    let file = match obj.get(entry_key::FILE) {
        Some(v) => parse_abs_path(&path(entry_key::FILE), expect_str(&path(entry_key::FILE), v)?)?,
        None => return Err(Error::config(&path(entry_key::FILE), "required (the ip-masq-agent config file)")),
    };
    let flag = |key: &str| -> Result<bool> { obj.get(key).map(|v| expect_bool(&path(key), v)).unwrap_or(Ok(false)) };
    let non_masquerade_cidrs = match obj.get(k::NON_MASQUERADE_CIDRS) {
        Some(v) => parse_cidr_list(&path(k::NON_MASQUERADE_CIDRS), v)?,
        None => Vec::new(),
    };
    Ok(IpMasqAgent {
        file,
        file_absent: flag(entry_key::FILE_ABSENT)?,
        non_masquerade_cidrs,
        masq_link_local: flag(k::MASQ_LINK_LOCAL)?,
        masq_link_local_ipv6: flag(k::MASQ_LINK_LOCAL_IPV6)?,
    })
}

/// The inverse of [`parse_ip_masq_agent_entry`].
pub fn ip_masq_agent_to_json(a: &IpMasqAgent) -> Value {
    let mut o = Map::new();
    o.insert(entry_key::FILE.into(), Value::String(a.file.to_string_lossy().into_owned()));
    if a.file_absent {
        o.insert(entry_key::FILE_ABSENT.into(), Value::Bool(true));
    }
    o.insert(
        k::NON_MASQUERADE_CIDRS.into(),
        Value::Array(a.non_masquerade_cidrs.iter().map(|c| Value::String(c.to_string())).collect()),
    );
    o.insert(k::MASQ_LINK_LOCAL.into(), Value::Bool(a.masq_link_local));
    o.insert(k::MASQ_LINK_LOCAL_IPV6.into(), Value::Bool(a.masq_link_local_ipv6));
    Value::Object(o)
}
