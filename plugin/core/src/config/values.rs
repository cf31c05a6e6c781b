//! Value parsers: one per kind of value (CIDR, interface name, address, port
//! range, path, log level, timeouts, sizes, masqueradeAddress pools), each
//! naming the key in its error.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path, PathBuf};

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::error::{Error, Result};

use super::diag::{expect_str, key_display, quote, unknown_key_error, wrong_type};
use super::keys::{key, TIMEOUT_KEYS};
use super::{NatTimeouts, MASQ_POOL_MAX, MAX_IFNAME_LEN, NAT_MAX_ENTRIES_MAX, NAT_MAX_ENTRIES_MIN, NAT_TIMEOUT_MAX_S};

/// A network in CIDR notation with an explicit prefix and no host bits set.
pub(super) fn parse_cidr(key: &str, s: &str) -> Result<IpNetwork> {
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

pub(super) fn parse_cidr_value(key: &str, v: &Value) -> Result<IpNetwork> {
    parse_cidr(key, expect_str(key, v)?)
}

pub(super) fn parse_cidr_list(key: &str, v: &Value) -> Result<Vec<IpNetwork>> {
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

pub(super) fn parse_ifname(key: &str, v: &Value) -> Result<String> {
    let s = expect_str(key, v)?;
    check_ifname(s).map_err(|m| Error::config(key, m))?;
    Ok(s.to_owned())
}

/// An address we may rewrite packets to: not unspecified, multicast, loopback or broadcast.
pub(super) fn parse_unicast_ip(key: &str, v: &Value) -> Result<IpAddr> {
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

pub(super) fn parse_port_range(key: &str, s: &str) -> Result<(u16, u16)> {
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

pub(super) fn parse_abs_path(key: &str, s: &str) -> Result<PathBuf> {
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

pub(super) fn parse_log_level(key: &str, s: &str) -> Result<log::LevelFilter> {
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
pub(super) fn parse_nat_timeouts(base: &str, v: &Value) -> Result<NatTimeouts> {
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

pub(super) fn parse_nat_max_entries(key: &str, v: &Value) -> Result<u32> {
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

/// "masqueradeAddress": an address, or a list of addresses and CIDRs (every
/// address of the prefix); one of a family is that family's address, two or more
/// a pool (at most MASQ_POOL_MAX a family). Returns (IPv4, IPv6) in the order given.
pub(super) fn parse_masquerade_address(key: &str, v: &Value) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
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
