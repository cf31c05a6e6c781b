//! `ebpf-masq natlog`: the NAT session log (docs/natlog.md). The room: `record` (one
//! log record, a JSON line), `file` (the JSON-lines log, rotated by size),
//! `ipfix` (the same records as RFC 7011 / RFC 8158 IPFIX over UDP), `who`
//! (which pod held a node address and port at a time). This file is the command.
//!
//! `natlog --conf CONFLIST` runs the live exporter (`export`: the data plane's
//! events as records, where the network's `natLog` says) in the foreground, as
//! `ebpf-masq agent` runs it on Kubernetes nodes. `natlog who` answers from a
//! JSON log, `natlog send` exports a JSON log to an IPFIX collector, `natlog
//! snapshot` logs the pairs alive now.

pub mod export;
pub mod file;
pub mod ipfix;
pub mod record;
pub mod snapshot;
pub mod who;

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::{atomic::AtomicBool, Arc},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use clap::{Args, Subcommand};

use record::{endpoint, Record};

use super::nat_list::proto_name;

use ebpf_masq_core::{bpf::loader::Pins, config, error::{code, Context, Error, Result}};

/// `natlog --conf CONFLIST` (the live exporter), or one of the subcommands.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NatlogArgs {
    #[command(subcommand)]
    pub cmd: Option<NatlogCmd>,
    #[arg(long, value_name = "CONFLIST",
          help = "run the exporter in the foreground: the data plane's pairs as records, where this conflist's natLog says, until SIGINT/SIGTERM")]
    pub conf: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum NatlogCmd {
    /// The pod that held a node address and port at a time, from the JSON session log
    Who(WhoArgs),
    /// Export a JSON session log to an IPFIX collector (RFC 7011 over UDP, RFC 8158 elements)
    Send(SendArgs),
    /// Log the pairs alive now as `alive` records (JSON lines to stdout, or appended to --file)
    Snapshot(SnapshotArgs),
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub pins: super::PinPathArg,
    #[arg(long, value_name = "PATH", help = "append to this natLog JSON file (rotated at 100 MiB, 5 kept) instead of stdout")]
    pub file: Option<PathBuf>,
}

/// A log file's rotation: its size at most, and how many rotated files are kept.
pub const FILE_MAX_BYTES: u64 = 100 << 20;
pub const FILE_KEEP: u32 = 5;

#[derive(Args, Debug)]
pub struct WhoArgs {
    #[arg(value_name = "ADDRESS:PORT", help = "the node address and port as the remote side saw it ([v6]:port for IPv6)")]
    pub nat: SocketAddr,
    #[arg(long, value_name = "TIME", help = "when: RFC 3339 (2026-12-05T12:03:07Z, 2026-12-05 12:03:07.250) or Unix seconds")]
    pub at: String,
    #[arg(long, value_name = "ADDR[:PORT]", help = "only pairs towards this remote address (and port)")]
    pub remote: Option<String>,
    #[arg(long, value_name = "tcp|udp|icmp", help = "only pairs of this protocol")]
    pub proto: Option<String>,
    #[arg(long, value_name = "PATH", help = "the natLog JSON file (its rotated PATH.1, PATH.2, ... are read too)")]
    pub file: PathBuf,
    #[arg(long, help = "print a JSON object")]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SendArgs {
    #[arg(long, value_name = "PATH", help = "the natLog JSON file (with its rotated files)")]
    pub file: PathBuf,
    #[arg(long, value_name = "HOST:PORT", help = "the IPFIX collector (UDP)")]
    pub ipfix: String,
    #[arg(long, default_value_t = 0, help = "the IPFIX observation domain id")]
    pub domain: u32,
}

pub fn main(a: &NatlogArgs) -> Result<()> {
    match (&a.cmd, &a.conf) {
        (Some(NatlogCmd::Who(a)), _) => who_cmd(a),
        (Some(NatlogCmd::Send(a)), _) => send_cmd(a),
        (Some(NatlogCmd::Snapshot(a)), _) => snapshot_cmd(a),
        (None, Some(conf)) => export_cmd(conf),
        (None, None) => Err(Error::new(
            code::INVALID_CONFIG,
            "natlog: give --conf CONFLIST (run the exporter) or a subcommand (who, send, snapshot)".to_string(),
        )),
    }
}

/// The exporter in the foreground, for a node without the agent (a systemd unit: docs/natlog.md).
fn export_cmd(conf: &std::path::Path) -> Result<()> {
    ebpf_masq_core::logging::init_stderr(log::LevelFilter::Info);
    let bytes = std::fs::read(conf).ctx(code::IO_FAILURE, format!("read {}", conf.display()))?;
    let c = config::parse_conf_file(&bytes).map_err(|e| e.context(conf.display()))?;
    let Some(log_conf) = &c.masq.nat_log else {
        return Err(Error::new(
            code::INVALID_CONFIG,
            format!("{}: the ebpf-masq entry has no \"natLog\" key: nothing to export", conf.display()),
        ));
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Error::new(code::IO_FAILURE, format!("install the signal handler: {e}")))?;
    }
    let t = export::run(&Pins::new(&c.masq.pin_path), log_conf, &stop)?;
    eprintln!(
        "ebpf-masq natlog: {} records written ({} of them pairs alive at start); {} not sent to the IPFIX collector",
        t.records, t.alive, t.ipfix_unsent
    );
    Ok(())
}

fn bad(key: &str, msg: String) -> Error {
    Error::new(code::INVALID_CONFIG, format!("{key}: {msg}"))
}

/// RFC 3339 (a space for the T, no zone meaning UTC) or Unix seconds with an
/// optional fraction, in milliseconds since the epoch.
pub fn parse_time(s: &str) -> Result<u64> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs >= 0.0 && secs.is_finite() {
            return Ok((secs * 1000.0).round() as u64);
        }
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| bad("--at", format!("{s:?} is not a time ({e})")))?;
    Ok(t.duration_since(UNIX_EPOCH).map_err(|_| bad("--at", format!("{s:?} is before 1970")))?.as_millis() as u64)
}

pub fn format_time(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub fn parse_proto(s: &str) -> Result<u8> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "icmp" => Ok(1),
        "icmpv6" => Ok(58),
        _ => s.parse().map_err(|_| bad("--proto", format!("{s:?} is not tcp, udp, icmp, icmpv6 or a protocol number"))),
    }
}

/// `ADDR`, `ADDR:PORT` or `[V6]:PORT` (`--remote`, here and in `monitor`).
pub fn parse_remote(s: &str) -> Result<(IpAddr, Option<u16>)> {
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok((a, None));
    }
    s.parse::<SocketAddr>()
        .map(|sa| (sa.ip(), Some(sa.port())))
        .map_err(|_| bad("--remote", format!("{s:?} is not ADDR or ADDR:PORT")))
}

fn who_cmd(a: &WhoArgs) -> Result<()> {
    let (remote_addr, remote_port) = match &a.remote {
        Some(r) => parse_remote(r).map(|(x, p)| (Some(x), p))?,
        None => (None, None),
    };
    let q = who::Query {
        nat_addr: a.nat.ip(),
        nat_port: a.nat.port(),
        at_ms: parse_time(&a.at)?,
        remote_addr,
        remote_port,
        proto: a.proto.as_deref().map(parse_proto).transpose()?,
    };
    let records = file::read_all(&a.file)?;
    let ans = who::who(&records, &q);
    if a.json {
        let holders: Vec<serde_json::Value> = ans
            .holders
            .iter()
            .map(|h| serde_json::json!({"from": format_time(h.from_ms), "until": h.until_ms.map(format_time), "record": h.record}))
            .collect();
        let covers = ans.covers.map(|(f, t)| [format_time(f), format_time(t)]);
        println!("{}", serde_json::json!({"nat": a.nat.to_string(), "at": format_time(q.at_ms), "holders": holders, "log_covers": covers}));
        return Ok(());
    }
    print!("{}", describe(&a.nat, &q, &ans));
    Ok(())
}

/// The plain-text answer.
pub fn describe(nat: &SocketAddr, q: &who::Query, ans: &who::Answer) -> String {
    let at = format_time(q.at_ms);
    let mut out = String::new();
    if ans.holders.is_empty() {
        out.push_str(&format!("nobody held {nat} at {at}"));
        match ans.covers {
            Some((f, t)) if q.at_ms < f || q.at_ms > t => {
                out.push_str(&format!(" as far as the log knows: it covers only {} to {}", format_time(f), format_time(t)))
            }
            Some(_) => {}
            None => out.push_str(": the log is empty"),
        }
        out.push('\n');
        return out;
    }
    if ans.holders.len() > 1 {
        out.push_str(&format!("{} pairs held {nat} at {at} (the port was shared across remote endpoints; --remote picks one):\n", ans.holders.len()));
    }
    for h in &ans.holders {
        let r: &Record = &h.record;
        let until = h.until_ms.map(format_time).unwrap_or_else(|| "the end of the log (no delete yet)".into());
        out.push_str(&format!(
            "{} {} {} -> {nat} -> {} held from {} until {}{}\n",
            r.who(),
            proto_name(r.proto),
            endpoint(r.pod_addr, r.pod_port),
            endpoint(r.remote_addr, r.remote_port),
            format_time(h.from_ms),
            until,
            r.policy.as_deref().map(|p| format!(" (egress policy {p})")).unwrap_or_default(),
        ));
    }
    out
}

fn snapshot_cmd(a: &SnapshotArgs) -> Result<()> {
    let records = snapshot::alive(&a.pins.pins())?;
    match &a.file {
        Some(path) => file::JsonLog::open(path, FILE_MAX_BYTES, FILE_KEEP)?.write(&records),
        None => {
            for r in &records {
                println!("{}", serde_json::to_string(r).expect("serializable"));
            }
            Ok(())
        }
    }
}

fn send_cmd(a: &SendArgs) -> Result<()> {
    let records = file::read_all(&a.file)?;
    let mut e = ipfix::Exporter::new(&a.ipfix, a.domain, Duration::from_secs(60))
        .map_err(|e| bad("--ipfix", format!("{}: {e}", a.ipfix)))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as u32;
    e.export(&records, now);
    e.settle();
    eprintln!(
        "ebpf-masq natlog send: {} records in {} messages to {}; {} not sent",
        e.sent.records, e.sent.messages, a.ipfix, e.sent.unsent_records
    );
    if e.sent.unsent_records > 0 {
        return Err(Error::new(code::IO_FAILURE, format!("{} records could not be sent to {}", e.sent.unsent_records, a.ipfix)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_rfc_3339_or_unix_seconds() {
        assert_eq!(parse_time("2026-12-05T12:03:07Z").unwrap(), 1_796_472_187_000);
        assert_eq!(parse_time("2026-12-05 12:03:07.250").unwrap(), 1_796_472_187_250);
        assert_eq!(parse_time("1796472187.5").unwrap(), 1_796_472_187_500);
        assert_eq!(format_time(1_796_472_187_250), "2026-12-05T12:03:07.250Z");
        let e = parse_time("yesterday").unwrap_err().to_string();
        assert!(e.contains("--at"), "{e}");
        assert!(parse_proto("SCTP").unwrap_err().to_string().contains("--proto"));
        assert_eq!(parse_remote("[2001:db8::1]:443").unwrap(), ("2001:db8::1".parse().unwrap(), Some(443)));
        assert_eq!(parse_remote("203.0.113.9").unwrap(), ("203.0.113.9".parse().unwrap(), None));
    }

    #[test]
    fn nobody_is_said_plainly_and_outside_the_log_is_told_apart() {
        let nat: SocketAddr = "192.0.2.1:40123".parse().unwrap();
        let q = who::Query { nat_addr: nat.ip(), nat_port: 40123, at_ms: 5000, remote_addr: None, remote_port: None, proto: None };
        let out = describe(&nat, &q, &who::Answer { holders: vec![], covers: Some((1000, 9000)) });
        assert_eq!(out, "nobody held 192.0.2.1:40123 at 1970-01-01T00:00:05.000Z\n");
        let out = describe(&nat, &q, &who::Answer { holders: vec![], covers: Some((6000, 9000)) });
        assert!(out.contains("it covers only"), "{out}");
    }
}
