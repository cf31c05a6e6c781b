//! `natLog`: where the NAT session log goes (docs/natlog.md): an IPFIX
//! collector (`"ipfix": "HOST:PORT"`, UDP), a JSON-lines file (`"file": PATH`,
//! rotated by size), or both. The key only says where; the exporter that writes
//! there is `ebpf-masq agent` or `ebpf-masq natlog --conf` (the data plane is the
//! same with or without it).

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

use super::diag::{expect_str, key_display, quote, unknown_key_error, wrong_type};
use super::keys::{key, NATLOG_KEYS};
use super::values::parse_abs_path;

/// A log file's rotation when `maxFileMB` is left out: 100 MiB, 5 rotated files kept.
pub const NATLOG_FILE_MAX_MB_DEFAULT: u64 = 100;
/// The most `maxFileMB` may be (1 TiB).
pub const NATLOG_FILE_MAX_MB_MAX: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatLogConf {
    /// "ipfix": the collector, HOST:PORT as written (a name is resolved when the
    /// exporter starts, so a collector's address may change under its name).
    pub ipfix: Option<String>,
    /// "file": the JSON-lines log.
    pub file: Option<PathBuf>,
    /// "maxFileMB": the file is rotated at this size.
    pub file_max_mb: u64,
    /// "observationDomain": the IPFIX observation domain id (RFC 7011 section 3.1), default 0.
    pub domain: u32,
}

/// `HOST:PORT` or `[V6]:PORT`: a host name or address and a port 1-65535.
fn check_host_port(path: &str, s: &str) -> Result<()> {
    let bad = |why: &str| Error::config(path, format!("{} is not HOST:PORT ({why})", quote(s)));
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => {
            let (h, p) = rest.split_once("]:").ok_or_else(|| bad("an IPv6 address is written [ADDR]:PORT"))?;
            h.parse::<std::net::Ipv6Addr>().map_err(|_| bad("not an IPv6 address inside []"))?;
            (h, p)
        }
        None => {
            let (h, p) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
            if h.contains(':') {
                return Err(bad("an IPv6 address is written [ADDR]:PORT"));
            }
            (h, p)
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(bad("no host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("the port is 1-65535")),
    }
}

/// "natLog": an object with "ipfix" and/or "file".
pub(super) fn parse_nat_log(base: &str, v: &Value) -> Result<NatLogConf> {
    let obj = v.as_object().ok_or_else(|| wrong_type(base, "an object with \"ipfix\" and/or \"file\"", v))?;
    for k in obj.keys() {
        if !NATLOG_KEYS.contains(&k.as_str()) {
            return Err(unknown_key_error(&format!("{base}.{}", key_display(k)), k, NATLOG_KEYS));
        }
    }
    let mut c = NatLogConf { ipfix: None, file: None, file_max_mb: NATLOG_FILE_MAX_MB_DEFAULT, domain: 0 };
    if let Some(v) = obj.get(key::NATLOG_IPFIX) {
        let path = format!("{base}.{}", key::NATLOG_IPFIX);
        let s = expect_str(&path, v)?;
        check_host_port(&path, s)?;
        c.ipfix = Some(s.to_string());
    }
    if let Some(v) = obj.get(key::NATLOG_FILE) {
        let path = format!("{base}.{}", key::NATLOG_FILE);
        let s = expect_str(&path, v)?;
        if s.ends_with('/') {
            return Err(Error::config(&path, format!("{} names a directory; expected a file", quote(s))));
        }
        c.file = Some(parse_abs_path(&path, s)?);
    }
    if let Some(v) = obj.get(key::NATLOG_MAX_FILE_MB) {
        let path = format!("{base}.{}", key::NATLOG_MAX_FILE_MB);
        match v.as_u64() {
            Some(n) if (1..=NATLOG_FILE_MAX_MB_MAX).contains(&n) => c.file_max_mb = n,
            _ => {
                return Err(Error::config(
                    &path,
                    format!("must be a whole number of MiB between 1 and {NATLOG_FILE_MAX_MB_MAX}, got {v}"),
                ))
            }
        }
    }
    if let Some(v) = obj.get(key::NATLOG_DOMAIN) {
        let path = format!("{base}.{}", key::NATLOG_DOMAIN);
        c.domain = v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Error::config(&path, format!("must be an IPFIX observation domain id 0-4294967295, got {v}")))?;
    }
    if c.ipfix.is_none() && c.file.is_none() {
        return Err(Error::config(
            base,
            format!(
                "names no destination; give \"{}\": \"HOST:PORT\" (an IPFIX collector) and/or \"{}\": PATH \
                 (a JSON-lines file), or leave the key out for no log",
                key::NATLOG_IPFIX,
                key::NATLOG_FILE
            ),
        ));
    }
    Ok(c)
}

pub(super) fn nat_log_to_json(c: &NatLogConf) -> Value {
    let mut o = Map::new();
    if let Some(h) = &c.ipfix {
        o.insert(key::NATLOG_IPFIX.into(), Value::String(h.clone()));
    }
    if let Some(p) = &c.file {
        o.insert(key::NATLOG_FILE.into(), Value::String(p.display().to_string()));
    }
    if c.file_max_mb != NATLOG_FILE_MAX_MB_DEFAULT {
        o.insert(key::NATLOG_MAX_FILE_MB.into(), Value::from(c.file_max_mb));
    }
    if c.domain != 0 {
        o.insert(key::NATLOG_DOMAIN.into(), Value::from(c.domain));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<NatLogConf> {
        parse_nat_log("natLog", &v)
    }

    #[test]
    fn ipfix_file_or_both() {
        let c = parse(json!({"ipfix": "collector.example:4739"})).unwrap();
        assert_eq!((c.ipfix.as_deref(), c.file.as_ref(), c.file_max_mb, c.domain), (Some("collector.example:4739"), None, 100, 0));
        let c = parse(json!({"file": "/var/log/natlog.json", "ipfix": "[2001:db8::1]:4739", "maxFileMB": 10, "observationDomain": 7})).unwrap();
        assert_eq!(c.file, Some(PathBuf::from("/var/log/natlog.json")));
        assert_eq!((c.ipfix.as_deref(), c.file_max_mb, c.domain), (Some("[2001:db8::1]:4739"), 10, 7));
        assert_eq!(parse(nat_log_to_json(&c)).unwrap(), c, "round trip");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (v, key, says) in [
            (json!({}), "\"natLog\"", "names no destination"),
            (json!("x"), "\"natLog\"", "an object"),
            (json!({"ipfix": "collector"}), "natLog.ipfix", "no port"),
            (json!({"ipfix": "collector:0"}), "natLog.ipfix", "1-65535"),
            (json!({"ipfix": "collector:99999"}), "natLog.ipfix", "1-65535"),
            (json!({"ipfix": "2001:db8::1:4739"}), "natLog.ipfix", "[ADDR]:PORT"),
            (json!({"ipfix": ":4739"}), "natLog.ipfix", "no host"),
            (json!({"ipfix": 4739}), "natLog.ipfix", "string"),
            (json!({"file": "natlog.json"}), "natLog.file", "absolute"),
            (json!({"file": "/var/log/"}), "natLog.file", "directory"),
            (json!({"file": "/x", "maxFileMB": 0}), "natLog.maxFileMB", "between 1"),
            (json!({"file": "/x", "observationDomain": -1}), "natLog.observationDomain", "0-4294967295"),
            (json!({"file": "/x", "ipfx": "a:1"}), "natLog.ipfx", "did you mean \"ipfix\""),
        ] {
            let e = parse(v.clone()).expect_err(&v.to_string());
            assert!(e.msg.contains(key) && e.msg.contains(says), "{v}: {}", e.msg);
            assert_eq!(e.code, crate::error::code::INVALID_CONFIG, "{v}");
        }
    }
}
