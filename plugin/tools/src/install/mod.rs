//! `ebpf-masq install`, `uninstall` and `validate`: put the plugin on a node
//! (binary + an entry in the node's CNI conflist) and take it off again
//! (conflist, binary, attached programs, pins).
//!
//! The JSON transformation is pure ([`chain`], [`unchain`], [`restorable`]) and
//! unit-tested in `conflist`; `files` writes files atomically and copies the
//! binary; the verbs here put them together (the data plane's teardown is
//! `node::teardown`). May use node, bpf, config, error.

mod conflist;
mod files;

pub use conflist::{
    backup_candidates, chain, conflist_name, entry_from, find_entry, is_conf_name, primary_conf, restorable, unchain,
    Action, Chained,
};
pub use files::atomic_write;

use std::{
    fs,
    io::ErrorKind,
    path::{Path, PathBuf},
};

use clap::Args;
use serde_json::{Map, Value};

use files::{check_plain_name, conf_names, install_binary, mode_of};

use ebpf_masq_core::{bpf::loader::Pins, config::{self, DEFAULT_PIN_PATH}, error::{code, Context, Error, Result}, node};

/// File name of the plugin binary in the CNI bin dir (what `"type"` resolves to).
pub const BIN_NAME: &str = "ebpf-masq";
/// Suffix of the backup `install` keeps of the file it changed.
pub const BACKUP_SUFFIX: &str = ".ebpf-masq.bak";
/// Extensions runtimes (libcni, containerd, CRI-O) read from the conf dir.
pub const CONF_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

pub const INSTALL_LONG_HELP: &str = "\
Put ebpf-masq on this node (what the DaemonSet's init container runs):

 1. Copy the running binary to <cni-bin-dir>/ebpf-masq atomically (temporary
    file, then rename), unless an identical file is already there.
 2. Chain the plugin into the node's primary network config in <cni-conf-dir>:
    the lexicographically first *.conf, *.conflist or *.json file (the one
    containerd and CRI-O use), or the file named by --conflist. The ebpf-masq
    entry is appended after the existing plugins, or an existing ebpf-masq entry
    is replaced in place; every other plugin and key is kept, in its order. The
    file is rewritten (pretty-printed) atomically, keeping its permissions.
    A single-plugin file (x.conf, or x.json without \"plugins\") is converted to
    x.conflist holding the original plugin then ebpf-masq, and x.conf is
    removed: runtimes use the first file by name and x.conf sorts before
    x.conflist, so leaving it would keep the node on the unchained config.
 3. Before the first change, the original file is kept as
    <file>.ebpf-masq.bak; an existing backup is never overwritten, so it stays
    the original. `ebpf-masq uninstall` restores it.

The entry is the ebpf-masq plugin config in --conf, validated exactly as the
plugin validates it and written back with default values left out (cniVersion
and name come from the node's conflist), or {\"type\": \"ebpf-masq\"} (all defaults).
The resulting conflist is validated before anything is written: a cniVersion
ebpf-masq does not support (older than 0.3.0) is an error and changes nothing.

Idempotent: a second run with the same inputs changes nothing, byte for byte.
Prints one line per thing it did. Exit status 0 on success, 1 on error.";

pub const INSTALL_AFTER_HELP: &str = "\
Examples:
  ebpf-masq install --cni-bin-dir /opt/cni/bin --cni-conf-dir /etc/cni/net.d
  ebpf-masq install --cni-bin-dir /host/opt/cni/bin --cni-conf-dir /host/etc/cni/net.d \\
      --conf /config/ebpf-masq.json
  ebpf-masq install --cni-bin-dir /opt/cni/bin --cni-conf-dir /etc/cni/net.d --dry-run";

pub const UNINSTALL_LONG_HELP: &str = "\
Take ebpf-masq off this node. Every step runs even when an earlier one failed;
all failures are reported together at the end (exit status 1).

 1. Every *.conf, *.conflist and *.json in <cni-conf-dir> holding an ebpf-masq
    entry: when install's backup <file>.ebpf-masq.bak exists and the file is
    still exactly what install made of it, the backup is restored (a converted
    x.conflist goes back to x.conf); otherwise only the ebpf-masq entry is
    removed and the stale backup deleted.
 2. <cni-bin-dir>/ebpf-masq, when --cni-bin-dir is given.
 3. The data plane in this network namespace: the programs are detached from
    every uplink and every pod veth recorded in the pins, then every pin under
    <pin-path>/v<N> is removed, NAT state included.

Pods keep their addresses and routes; their traffic is no longer masqueraded.
The ports the plugin added to net.ipv4.ip_local_reserved_ports (every portRange
it reserved, minus what was reserved before) are given back; others stay.
Idempotent: a second run finds nothing to do and succeeds.";

pub const UNINSTALL_AFTER_HELP: &str = "\
Example:
  ebpf-masq uninstall --cni-conf-dir /etc/cni/net.d --cni-bin-dir /opt/cni/bin";

pub const VALIDATE_LONG_HELP: &str = "\
Parse and validate a conflist holding one ebpf-masq entry, or a single ebpf-masq
plugin config, exactly as the plugin and `apply` do, touching nothing. Exit
status 0 when valid; otherwise the error names the key (CNI error code shown).";

#[derive(Args, Debug)]
pub struct InstallArgs {
    #[arg(
        long,
        value_name = "DIR",
        help = "CNI binary directory to copy the binary into (e.g. /opt/cni/bin)"
    )]
    pub cni_bin_dir: PathBuf,
    #[arg(
        long,
        value_name = "DIR",
        help = "CNI network config directory (e.g. /etc/cni/net.d)"
    )]
    pub cni_conf_dir: PathBuf,
    #[arg(
        long,
        value_name = "FILE",
        help = "ebpf-masq plugin config to chain: a single plugin config, or a conflist with one ebpf-masq entry \
                [default: {\"type\": \"ebpf-masq\"}]"
    )]
    pub conf: Option<PathBuf>,
    #[arg(
        long,
        value_name = "NAME",
        help = "file in the conf dir to chain into [default: the first *.conf/*.conflist/*.json by name]"
    )]
    pub conflist: Option<String>,
    #[arg(
        long,
        value_name = "DIR",
        help = "pinPath written into the entry (overrides the one in --conf) [default: /sys/fs/bpf/ebpf-masq]"
    )]
    pub pin_path: Option<PathBuf>,
    #[arg(
        long,
        help = "print what would be done and the resulting conflist; write nothing"
    )]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct UninstallArgs {
    #[arg(
        long,
        value_name = "DIR",
        help = "CNI network config directory (e.g. /etc/cni/net.d)"
    )]
    pub cni_conf_dir: PathBuf,
    #[arg(
        long,
        value_name = "DIR",
        help = "CNI binary directory to remove ebpf-masq from [default: leave the binary]"
    )]
    pub cni_bin_dir: Option<PathBuf>,
    #[arg(
        long,
        value_name = "DIR",
        help = "bpffs directory of the pins [default: pinPath of the ebpf-masq entry found in the conf dir, \
                else /sys/fs/bpf/ebpf-masq]"
    )]
    pub pin_path: Option<PathBuf>,
}

// ---------------------------------------------------------------------------
// install
// ---------------------------------------------------------------------------

pub fn install(a: &InstallArgs) -> Result<()> {
    // Everything that can fail on input first, before anything is touched.
    let conf_bytes = match &a.conf {
        Some(p) => {
            Some(fs::read(p).ctx(code::IO_FAILURE, format!("read --conf {}", p.display()))?)
        }
        None => None,
    };
    let entry =
        entry_from(conf_bytes.as_deref(), a.pin_path.as_deref()).map_err(|e| match &a.conf {
            Some(p) => e.context(format!("--conf {}", p.display())),
            None => e,
        })?;
    let report = put_on_node(Some(&a.cni_bin_dir), &a.cni_conf_dir, a.conflist.as_deref(), &entry, a.dry_run)?;
    for line in report.lines {
        println!("{line}");
    }
    Ok(())
}

/// What [`put_on_node`] did, one line per thing.
#[derive(Debug, Default)]
pub struct Report {
    /// A file was written (the binary or a conflist); false: all was in place.
    pub changed: bool,
    pub lines: Vec<String>,
}

/// Copy the binary into `bin_dir` (when given) and chain `entry` into the primary
/// network config of `dir` (or `conflist`). Nothing is written when the conflist
/// already holds exactly that entry: a second run (and the agent's every check)
/// changes nothing, byte for byte.
pub fn put_on_node(
    bin_dir: Option<&Path>,
    dir: &Path,
    conflist: Option<&str>,
    entry: &Map<String, Value>,
    dry_run: bool,
) -> Result<Report> {
    let mut report = Report::default();
    let file = match conflist {
        Some(n) => {
            check_plain_name(n)?;
            n.to_string()
        }
        None => {
            let names = conf_names(dir)
                .ctx(code::IO_FAILURE, format!("read conf dir {}", dir.display()))?;
            primary_conf(names.iter().map(String::as_str)).map(str::to_string).ok_or_else(|| {
                Error::new(
                    code::INVALID_ENV,
                    format!(
                        "no network config (*.conflist, *.conf, *.json) in {}: install the main CNI plugin first",
                        dir.display()
                    ),
                )
            })?
        }
    };
    let path = dir.join(&file);
    let original = fs::read(&path).ctx(code::IO_FAILURE, format!("read {}", path.display()))?;
    let chained = chain(&file, &original, entry)?;
    let out_path = dir.join(&chained.file);
    if chained.file != file && out_path.exists() {
        // Only a conflist we made from this file before may be replaced.
        let prev = fs::read(&out_path).unwrap_or_default();
        if find_entry(&prev).is_none() {
            return Err(Error::new(
                code::INVALID_ENV,
                format!(
                    "cannot convert {file} to {}: that file exists and is not ours",
                    chained.file
                ),
            ));
        }
    }

    // The binary first: a conflist never names a plugin that is not there.
    if let Some(bin_dir) = bin_dir {
        let (copied, line) = install_binary(bin_dir, dry_run)?;
        report.changed |= copied;
        report.lines.push(line);
    }

    let order = chained.plugins.join(", ");
    if chained.file == file && chained.bytes == original {
        report.lines.push(format!("{}: unchanged (plugins: {order})", path.display()));
        return Ok(report);
    }
    if dry_run {
        report.lines.push(format!("would write {} (plugins: {order}):", out_path.display()));
        report.lines.push(String::from_utf8_lossy(&chained.bytes).trim_end().to_string());
        return Ok(report);
    }
    let mode = mode_of(&path).unwrap_or(0o644);
    let backup = dir.join(format!("{file}{BACKUP_SUFFIX}"));
    if find_entry(&original).is_none() && !backup.exists() {
        atomic_write(&backup, &original, mode)?;
        report.lines.push(format!("backed up {} to {}", path.display(), backup.display()));
    }
    atomic_write(&out_path, &chained.bytes, mode)?;
    report.changed = true;
    report.lines.push(match chained.action {
        Action::Converted => {
            fs::remove_file(&path).ctx(code::IO_FAILURE, format!("remove {}", path.display()))?;
            format!(
                "converted {} to {} and removed {file} (runtimes use the first file by name) (plugins: {order})",
                path.display(),
                out_path.display()
            )
        }
        Action::Appended => format!("chained ebpf-masq into {} (plugins: {order})", out_path.display()),
        Action::Replaced => format!("replaced the ebpf-masq entry in {} (plugins: {order})", out_path.display()),
    });
    Ok(report)
}

/// The file of `dir` ebpf-masq chains into: `conflist`, or the primary network
/// config (the first by name, as runtimes pick it). None: `dir` holds none yet.
fn primary_file(dir: &Path, conflist: Option<&str>) -> Result<Option<String>> {
    match conflist {
        Some(n) => Ok(Some(n.to_string())),
        None => {
            let names = conf_names(dir).ctx(code::IO_FAILURE, format!("read conf dir {}", dir.display()))?;
            Ok(primary_conf(names.iter().map(String::as_str)).map(str::to_string))
        }
    }
}

/// The name and cniVersion of the primary network config of `dir` (or
/// `conflist`): the network whose pods ebpf-masq masquerades. None: no config yet.
pub fn network_of(dir: &Path, conflist: Option<&str>) -> Result<Option<(String, String)>> {
    let Some(file) = primary_file(dir, conflist)? else {
        return Ok(None);
    };
    let path = dir.join(&file);
    let v: Value = match fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map_err(|e| Error::new(code::INVALID_CONFIG, format!("{}: {e}", path.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::new(code::IO_FAILURE, format!("read {}: {e}", path.display()))),
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match (text("name"), text("cniVersion")) {
        (Some(n), v) => Ok(Some((n, v.unwrap_or_else(|| "0.4.0".into())))),
        (None, _) => Err(Error::new(code::INVALID_CONFIG, format!("{}: no network \"name\"", path.display()))),
    }
}

/// Whether the primary network config of `dir` (or `conflist`) holds exactly
/// `entry` as its ebpf-masq entry: Ok(None) when it does, Ok(Some(why)) when not.
pub fn chain_problem(dir: &Path, conflist: Option<&str>, entry: &Map<String, Value>) -> Result<Option<String>> {
    let Some(file) = primary_file(dir, conflist)? else {
        return Ok(Some(format!("no network config in {}", dir.display())));
    };
    let path = dir.join(&file);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) => return Ok(Some(format!("read {}: {e}", path.display()))),
    };
    Ok(match chain(&file, &bytes, entry) {
        Ok(c) if c.file == file && c.bytes == bytes => None,
        Ok(_) if find_entry(&bytes).is_none() => Some(format!("{} does not chain ebpf-masq", path.display())),
        Ok(_) => Some(format!("{} holds another ebpf-masq entry than the config in force", path.display())),
        Err(e) => Some(format!("{}: {}", path.display(), e.msg)),
    })
}

/// The ebpf-masq entry the primary network config of `dir` (or `conflist`) holds now, if any.
pub fn chained_entry(dir: &Path, conflist: Option<&str>) -> Option<Map<String, Value>> {
    let file = primary_file(dir, conflist).ok()??;
    find_entry(&fs::read(dir.join(file)).ok()?)
}

// ---------------------------------------------------------------------------
// uninstall
// ---------------------------------------------------------------------------

pub fn uninstall(a: &UninstallArgs) -> Result<()> {
    let mut errors: Vec<String> = Vec::new();
    let mut entry_pin: Option<PathBuf> = None;
    let dir = &a.cni_conf_dir;

    // 1. Config files: first, so runtimes stop calling us before the data plane goes.
    match conf_names(dir) {
        Ok(names) => {
            let mut touched = 0;
            for name in &names {
                match uninstall_conf(dir, name, &mut entry_pin) {
                    Ok(true) => touched += 1,
                    Ok(false) => {}
                    Err(e) => errors.push(e.msg),
                }
            }
            if touched == 0 {
                println!("no ebpf-masq entry in {}", dir.display());
            }
            clean_finished_backups(dir, &mut errors);
        }
        Err(e) if e.kind() == ErrorKind::NotFound => println!("no conf dir {}", dir.display()),
        Err(e) => errors.push(format!("read conf dir {}: {e}", dir.display())),
    }

    // 2. The binary.
    if let Some(bin_dir) = &a.cni_bin_dir {
        let bin = bin_dir.join(BIN_NAME);
        match fs::remove_file(&bin) {
            Ok(()) => println!("removed {}", bin.display()),
            Err(e) if e.kind() == ErrorKind::NotFound => println!("no binary {}", bin.display()),
            Err(e) => errors.push(format!("remove {}: {e}", bin.display())),
        }
    }

    // 3. Programs and pins.
    let pin_path = a
        .pin_path
        .clone()
        .or(entry_pin)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PIN_PATH));
    let pins = Pins::new(&pin_path);
    for line in node::teardown(&pins, &mut errors) {
        println!("{line}");
    }
    // An older layout's data plane that no new binary has adopted yet (no ADD or
    // `apply` since the upgrade) is ours too.
    for (_, old) in pins.older_layouts() {
        if old.has_registrations() {
            for line in node::teardown(&old, &mut errors) {
                println!("{line}");
            }
        }
    }

    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::state(format!(
            "uninstall finished with {} failure(s): {}",
            errors.len(),
            errors.join("; ")
        )))
    }
}

/// Take our entry out of one config file. Ok(true) when the file held one.
fn uninstall_conf(dir: &Path, name: &str, entry_pin: &mut Option<PathBuf>) -> Result<bool> {
    let path = dir.join(name);
    let current = fs::read(&path).ctx(code::IO_FAILURE, format!("read {}", path.display()))?;
    let Some(entry) = find_entry(&current) else {
        return Ok(false);
    };
    if entry_pin.is_none() {
        *entry_pin = entry
            .get(config::key::PIN_PATH)
            .and_then(Value::as_str)
            .map(PathBuf::from);
    }
    let candidates = backup_candidates(name);
    for (orig, bak) in &candidates {
        let bak_path = dir.join(bak);
        let Ok(backup) = fs::read(&bak_path) else {
            continue;
        };
        if !restorable(name, &current, orig, &backup) {
            continue;
        }
        let orig_path = dir.join(orig);
        atomic_write(&orig_path, &backup, mode_of(&bak_path).unwrap_or(0o644))?;
        if orig != name {
            fs::remove_file(&path).ctx(code::IO_FAILURE, format!("remove {}", path.display()))?;
        }
        fs::remove_file(&bak_path)
            .ctx(code::IO_FAILURE, format!("remove {}", bak_path.display()))?;
        if orig != name {
            println!(
                "restored {} from {} and removed {name}",
                orig_path.display(),
                bak_path.display()
            );
        } else {
            println!(
                "restored {} from {}",
                orig_path.display(),
                bak_path.display()
            );
        }
        return Ok(true);
    }
    let without = unchain(name, &current)?;
    atomic_write(&path, &without, mode_of(&path).unwrap_or(0o644))?;
    println!("removed the ebpf-masq entry from {}", path.display());
    for (_, bak) in &candidates {
        let bak_path = dir.join(bak);
        if bak_path.exists() {
            fs::remove_file(&bak_path)
                .ctx(code::IO_FAILURE, format!("remove {}", bak_path.display()))?;
            println!(
                "removed stale backup {} (the file changed after install)",
                bak_path.display()
            );
        }
    }
    Ok(true)
}

/// Backups whose original is back in place byte for byte (an interrupted
/// uninstall) are removed; any other one left is reported, never deleted.
fn clean_finished_backups(dir: &Path, errors: &mut Vec<String>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(orig) = name.strip_suffix(BACKUP_SUFFIX) else {
            continue;
        };
        let (Ok(b), Ok(o)) = (fs::read(e.path()), fs::read(dir.join(orig))) else {
            println!(
                "note: left {} (its original {orig} is not there)",
                e.path().display()
            );
            continue;
        };
        if b == o {
            match fs::remove_file(e.path()) {
                Ok(()) => println!(
                    "removed {} ({orig} is already the original)",
                    e.path().display()
                ),
                Err(err) => errors.push(format!("remove {}: {err}", e.path().display())),
            }
        } else {
            println!("note: left {} (differs from {orig})", e.path().display());
        }
    }
}

// ---------------------------------------------------------------------------
// validate
// ---------------------------------------------------------------------------

pub fn validate(conf: &Path) -> Result<()> {
    let bytes = fs::read(conf).ctx(code::IO_FAILURE, format!("read {}", conf.display()))?;
    let c = config::parse_conf_file(&bytes).map_err(|e| e.context(conf.display()))?;
    println!(
        "{}: valid (network {:?}, cniVersion {})",
        conf.display(),
        c.name,
        c.cni_version
    );
    Ok(())
}
