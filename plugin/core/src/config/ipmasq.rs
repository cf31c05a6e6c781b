//! ip-masq-agent's config file, read as ip-masq-agent reads it, and what the
//! agent keeps of it in the chained entry (`ipMasqAgent`).
//!
//! The file is the `config` key of the `ip-masq-agent` ConfigMap, mounted at
//! `/etc/config/ip-masq-agent`: YAML or JSON with `nonMasqueradeCIDRs`,
//! `cidrLimit`, `masqLinkLocal`, `masqLinkLocalIPv6` and `resyncInterval`
//! (kubernetes-sigs/ip-masq-agent, cmd/ip-masq-agent/ip-masq-agent.go). Every
//! file it accepts is accepted here with the same meaning: the bytes go through
//! what its Go code does to them ([`super::ipmasq_decode`]), so a key matches in
//! any case (`NonMasqueradeCIDRs`), of two spellings the one Go applies last wins,
//! a null value is what Go makes of it, a key left out keeps its default and an
//! absent file means the defaults. A key no field takes is ignored, as there, but
//! not silently: it is returned in [`IpMasqAgentFile::ignored_keys`] with the known
//! key nearest to it, for the agent to report. A wrong type, an unaligned CIDR,
//! more CIDRs than `cidrLimit` or a bad `resyncInterval` refuse the file, as there.

use std::{path::PathBuf, time::Duration};

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::error::{code, Error, Result};

use super::diag::{expect_bool, expect_str, key_display, quote, suggest, unknown_key_error, wrong_type};
use super::ipmasq_decode::{decode, go_field, Decoded, Syntax};
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
    /// Keys no field takes in any case, in the order first met: ignored, as
    /// ip-masq-agent ignores them.
    pub ignored_keys: Vec<IgnoredKey>,
}

/// A key of the file that ip-masq-agent ignores, and the known key nearest to it.
#[derive(Debug, Clone, PartialEq)]
pub struct IgnoredKey {
    pub key: String,
    pub nearest: Option<&'static str>,
}

impl IgnoredKey {
    /// `"masqLinkLocl" (did you mean "masqLinkLocal"?)`, or the key alone.
    pub fn describe(&self) -> String {
        match self.nearest {
            Some(n) => format!("\"{}\" (did you mean \"{n}\"?)", key_display(&self.key)),
            None => format!("\"{}\"", key_display(&self.key)),
        }
    }
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
            ignored_keys: Vec::new(),
        }
    }
}

/// Parse the file's bytes as ip-masq-agent does: JSON when it starts with `{`,
/// YAML otherwise (JSON being YAML); empty, comments only or `null`: the
/// defaults. Errors are code 7 naming the key as written (code 2: not YAML/JSON).
pub fn parse_ip_masq_agent(bytes: &[u8], all_reserved: bool) -> Result<IpMasqAgentFile> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::new(code::DECODE_FAILURE, format!("ip-masq-agent config is not UTF-8: {e}")))?;
    let (syntax, top) = decode(text).map_err(|msg| Error::new(code::DECODE_FAILURE, msg))?;
    let pairs = match top {
        Decoded::Pairs(p) => p,
        Decoded::NotAMapping(other) => {
            return Err(Error::new(
                code::INVALID_CONFIG,
                format!("invalid ip-masq-agent config: expected a mapping of keys, got {}", short(&other)),
            ))
        }
    };
    let mut out = IpMasqAgentFile::defaults(all_reserved);
    // The list is checked once every pair is applied, as ip-masq-agent validates
    // the struct: (the key as written, the value) of the one applied last.
    let mut cidrs: Option<(String, Value)> = None;
    let mut limit = IP_MASQ_AGENT_DEFAULT_CIDR_LIMIT as i64;
    for (key, v) in pairs {
        let Some(field) = go_field(&key, IP_MASQ_AGENT_KEYS) else {
            if !out.ignored_keys.iter().any(|i| i.key == key) {
                let nearest = suggest(&key, IP_MASQ_AGENT_KEYS.iter().copied());
                out.ignored_keys.push(IgnoredKey { key, nearest });
            }
            continue;
        };
        let name = key_display(&key);
        // A null leaves a bool or an int as it was and makes the list empty (Go's nil
        // slice: every destination but link-local masqueraded); the duration refuses it.
        match (field, v) {
            (_, Value::Null) if field != k::NON_MASQUERADE_CIDRS && field != k::RESYNC_INTERVAL => {}
            (k::NON_MASQUERADE_CIDRS, Value::Null) => cidrs = Some((name, Value::Array(Vec::new()))),
            (k::NON_MASQUERADE_CIDRS, Value::Array(items)) => {
                // Go's []string takes strings (and null, as ""): any other element refuses the file.
                if let Some((i, e)) = items.iter().enumerate().find(|(_, e)| !(e.is_string() || e.is_null())) {
                    return Err(wrong_type(&format!("{name}[{i}]"), "a string (a CIDR)", e));
                }
                cidrs = Some((name, Value::Array(items)));
            }
            (k::NON_MASQUERADE_CIDRS, other) => return Err(wrong_type(&name, "a list of CIDR strings", &other)),
            (k::CIDR_LIMIT, v) => limit = go_int(syntax, &v).ok_or_else(|| wrong_type(&name, "a whole number", &v))?,
            (k::MASQ_LINK_LOCAL, v) => out.masq_link_local = expect_bool(&name, &v)?,
            (k::MASQ_LINK_LOCAL_IPV6, v) => out.masq_link_local_ipv6 = expect_bool(&name, &v)?,
            (k::RESYNC_INTERVAL, v) => {
                let s = expect_str(&name, &v)?;
                out.resync_interval = parse_go_duration(s).map_err(|why| Error::config(&name, why))?;
            }
            (other, _) => unreachable!("ip-masq-agent key {other} has no field"),
        }
    }
    if let Some((name, list)) = &cidrs {
        out.non_masquerade_cidrs = parse_cidr_list(name, list)?;
    }
    let n = out.non_masquerade_cidrs.len();
    if n as i64 > limit {
        return Err(Error::config(
            cidrs.as_ref().map_or(k::NON_MASQUERADE_CIDRS, |(name, _)| name.as_str()),
            format!("{n} CIDRs, more than cidrLimit {limit} (ip-masq-agent refuses it too)"),
        ));
    }
    out.cidr_limit = limit as u64; // not negative: n >= 0 is not more than it
    Ok(out)
}

/// What Go's `int` field takes: an integer; from YAML also a float with no
/// fraction (`json.Marshal` writes the YAML float 64.0 as `64`).
fn go_int(syntax: Syntax, v: &Value) -> Option<i64> {
    let n = v.as_number()?;
    n.as_i64().or_else(|| {
        let f = n.as_f64().filter(|f| syntax == Syntax::Yaml && f.fract() == 0.0)?;
        (f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
    })
}

fn short(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("a list of {} element(s)", a.len()),
        Value::String(s) => format!("string {}", quote(s)),
        other => other.to_string(),
    }
}

/// Go's `time.ParseDuration`: an optional sign, then a sequence of decimal
/// numbers each with a unit (ns, us, µs, ms, s, m, h), e.g. "60s", "1m",
/// "1h30m", "1.5s"; "0" alone. A negative interval, which Go takes (ip-masq-agent
/// then sleeps not at all between reads), is zero: read again as soon as may be.
pub fn parse_go_duration(s: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("{} is not a duration; expected e.g. \"60s\", \"1m\" or \"1h30m\"", quote(s));
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
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
    Ok(if negative { Duration::ZERO } else { Duration::from_secs_f64(total) })
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
    /// "fileRefused": the file was refused when no list of it was in force (the
    /// agent's start, and none kept in the chained entry), so these are
    /// ip-masq-agent's defaults.
    pub file_refused: bool,
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
            file_refused: false,
            non_masquerade_cidrs: f.non_masquerade_cidrs.clone(),
            masq_link_local: f.masq_link_local,
            masq_link_local_ipv6: f.masq_link_local_ipv6,
        }
    }

    /// What a refused `file` leaves in force when nothing else is: ip-masq-agent's defaults.
    pub fn refused(file: PathBuf, all_reserved: bool) -> Self {
        IpMasqAgent { file_refused: true, ..IpMasqAgent::from_file(file, false, &IpMasqAgentFile::defaults(all_reserved)) }
    }

    /// "FILE", or "FILE (absent: ip-masq-agent's defaults)", or "FILE (refused:
    /// ip-masq-agent's defaults)": how status and explain name it.
    pub fn describe(&self) -> String {
        if self.file_absent {
            format!("{} (absent: ip-masq-agent's defaults)", self.file.display())
        } else if self.file_refused {
            format!("{} (refused: ip-masq-agent's defaults)", self.file.display())
        } else {
            self.file.display().to_string()
        }
    }
}

pub(super) mod entry_key {
    pub const FILE: &str = "file";
    pub const FILE_ABSENT: &str = "fileAbsent";
    pub const FILE_REFUSED: &str = "fileRefused";
}
/// The keys of the chained entry's `ipMasqAgent` object.
pub const IP_MASQ_AGENT_ENTRY_KEYS: &[&str] = &[
    entry_key::FILE,
    entry_key::FILE_ABSENT,
    entry_key::FILE_REFUSED,
    k::NON_MASQUERADE_CIDRS,
    k::MASQ_LINK_LOCAL,
    k::MASQ_LINK_LOCAL_IPV6,
];

/// The `ipMasqAgent` of a chained entry (as a conflist holds it), when it has a valid one.
pub fn ip_masq_agent_of_entry(entry: &Map<String, Value>) -> Option<IpMasqAgent> {
    let v = entry.get(super::key::IP_MASQ_AGENT)?;
    parse_ip_masq_agent_entry(super::key::IP_MASQ_AGENT, v).ok()
}

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
        file_refused: flag(entry_key::FILE_REFUSED)?,
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
    if a.file_refused {
        o.insert(entry_key::FILE_REFUSED.into(), Value::Bool(true));
    }
    o.insert(
        k::NON_MASQUERADE_CIDRS.into(),
        Value::Array(a.non_masquerade_cidrs.iter().map(|c| Value::String(c.to_string())).collect()),
    );
    o.insert(k::MASQ_LINK_LOCAL.into(), Value::Bool(a.masq_link_local));
    o.insert(k::MASQ_LINK_LOCAL_IPV6.into(), Value::Bool(a.masq_link_local_ipv6));
    Value::Object(o)
}
