//! `ebpf-masq install`, `uninstall` and `validate`: put the plugin on a node
//! (binary + an entry in the node's CNI conflist) and take it off again
//! (conflist, binary, attached programs, pins).
//!
//! The JSON transformation is pure ([`chain`], [`unchain`], [`restorable`]) and
//! unit-tested here; the rest is file system and data-plane plumbing.

use std::{
    fs::{self, File, OpenOptions, Permissions},
    io::{ErrorKind, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use aya::programs::TcAttachType;
use clap::Args;
use serde_json::{Map, Value};

use crate::{
    bpf::loader::{self, Pins},
    config::{self, MasqConfig, DEFAULT_PIN_PATH, PLUGIN_TYPE},
    error::{code, Error, Result},
    node, pod,
};

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
// Pure part: file names and the JSON transformation.
// ---------------------------------------------------------------------------

/// A name runtimes read as a network config (by extension, as libcni does).
pub fn is_conf_name(name: &str) -> bool {
    matches!(name.rsplit_once('.'), Some((_, ext)) if CONF_EXTENSIONS.contains(&ext))
}

/// The file a runtime uses: the lexicographically (byte-wise) first config name.
pub fn primary_conf<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().filter(|n| is_conf_name(n)).min()
}

fn ext(name: &str) -> Option<&str> {
    name.rsplit_once('.').map(|(_, e)| e)
}

/// `x.conf` / `x.json` → `x.conflist`.
pub fn conflist_name(name: &str) -> String {
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    format!("{stem}.conflist")
}

/// (original name, backup name) pairs that can belong to the file `name`:
/// its own backup, and for `x.conflist` those of a converted `x.conf`/`x.json`.
pub fn backup_candidates(name: &str) -> Vec<(String, String)> {
    let mut out = vec![(name.to_string(), format!("{name}{BACKUP_SUFFIX}"))];
    if ext(name) == Some("conflist") {
        let stem = &name[..name.len() - ".conflist".len()];
        for e in ["conf", "json"] {
            let orig = format!("{stem}.{e}");
            out.push((orig.clone(), format!("{orig}{BACKUP_SUFFIX}")));
        }
    }
    out
}

fn is_ours(p: &Value) -> bool {
    p.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE)
}

fn decode(file: &str, bytes: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::new(
            code::DECODE_FAILURE,
            format!("{file}: not a JSON object"),
        )),
        Err(e) => Err(Error::new(
            code::DECODE_FAILURE,
            format!("{file}: not valid JSON: {e}"),
        )),
    }
}

fn to_bytes(v: &Map<String, Value>) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).expect("a JSON map always serializes");
    b.push(b'\n');
    b
}

/// What [`chain`] did to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The entry was appended after the existing plugins.
    Appended,
    /// An existing ebpf-masq entry was replaced in place.
    Replaced,
    /// A single-plugin file was turned into a conflist (original plugin, then ours).
    Converted,
}

/// The node's config file with our entry chained in.
#[derive(Debug, Clone)]
pub struct Chained {
    /// File name to write (differs from the input for a converted single-plugin file).
    pub file: String,
    pub bytes: Vec<u8>,
    pub action: Action,
    /// Plugin types in order, for the report.
    pub plugins: Vec<String>,
}

/// Chain `entry` into the config file `file` holding `original`: append it (or
/// replace an existing ebpf-masq entry in place), or convert a single-plugin
/// config into a conflist of the original plugin then ours. Every other key and
/// plugin is kept in order. The result is validated as the plugin will see it.
pub fn chain(file: &str, original: &[u8], entry: &Map<String, Value>) -> Result<Chained> {
    let root = decode(file, original)?;
    let (mut list, out_file, converted) = if root.contains_key("plugins") {
        (root, file.to_string(), false)
    } else {
        if ext(file) == Some("conflist") {
            return Err(Error::config(
                "plugins",
                format!("{file} is a conflist without a \"plugins\" list"),
            ));
        }
        match root.get("type") {
            Some(Value::String(t)) if t == PLUGIN_TYPE => {
                return Err(Error::config(
                    "type",
                    format!(
                        "{file} is a single ebpf-masq config; ebpf-masq is a chained plugin and needs the main \
                         plugin (bridge, ptp, calico, flannel, ...) before it"
                    ),
                ))
            }
            Some(Value::String(_)) => {}
            _ => return Err(Error::config("type", format!("{file} is neither a conflist nor a plugin config"))),
        }
        // As libcni's ConfListFromConf: the list takes the plugin's version and name.
        let mut l = Map::new();
        for k in ["cniVersion", "name"] {
            if let Some(v) = root.get(k) {
                l.insert(k.to_string(), v.clone());
            }
        }
        l.insert("plugins".into(), Value::Array(vec![Value::Object(root)]));
        (l, conflist_name(file), true)
    };
    let plugins = list
        .get_mut("plugins")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::config("plugins", format!("{file}: \"plugins\" is not a list")))?;
    let ours: Vec<usize> = plugins
        .iter()
        .enumerate()
        .filter(|(_, p)| is_ours(p))
        .map(|(i, _)| i)
        .collect();
    let action = match ours.as_slice() {
        [] => {
            plugins.push(Value::Object(entry.clone()));
            if converted {
                Action::Converted
            } else {
                Action::Appended
            }
        }
        [i] => {
            plugins[*i] = Value::Object(entry.clone());
            Action::Replaced
        }
        many => {
            return Err(Error::config(
                "plugins",
                format!(
                    "{file} has {} ebpf-masq entries; fix it by hand (one is expected)",
                    many.len()
                ),
            ))
        }
    };
    let types = plugins
        .iter()
        .map(|p| {
            p.get("type")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    let bytes = to_bytes(&list);
    // What the runtime will hand the plugin must be valid for it.
    config::parse_conf_file(&bytes).map_err(|e| {
        let out = if converted {
            format!("{file} (converted to {out_file})")
        } else {
            file.to_string()
        };
        e.context(format!(
            "{out} chained with ebpf-masq would not be a valid ebpf-masq config"
        ))
    })?;
    Ok(Chained {
        file: out_file,
        bytes,
        action,
        plugins: types,
    })
}

/// The first ebpf-masq entry of a conflist, if the bytes are one and have it.
pub fn find_entry(bytes: &[u8]) -> Option<Map<String, Value>> {
    let Ok(Value::Object(root)) = serde_json::from_slice::<Value>(bytes) else {
        return None;
    };
    root.get("plugins")?
        .as_array()?
        .iter()
        .find(|p| is_ours(p))
        .and_then(|p| p.as_object().cloned())
}

/// The conflist without any ebpf-masq entry (everything else as it is).
pub fn unchain(file: &str, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut root = decode(file, bytes)?;
    if let Some(Value::Array(plugins)) = root.get_mut("plugins") {
        plugins.retain(|p| !is_ours(p));
    }
    Ok(to_bytes(&root))
}

/// True when `current` (file `current_file`) is exactly what install makes of
/// the backup `backup` of `orig_file` with the entry `current` holds: nothing
/// else changed the file since, so restoring the backup loses nothing.
pub fn restorable(current_file: &str, current: &[u8], orig_file: &str, backup: &[u8]) -> bool {
    let Some(entry) = find_entry(current) else {
        return false;
    };
    if find_entry(backup).is_some() {
        return false; // restoring would keep an ebpf-masq entry
    }
    matches!(chain(orig_file, backup, &entry), Ok(c) if c.file == current_file && c.bytes == current)
}

/// The entry `install` writes: `--conf` (validated) or the defaults, with `--pin-path`.
pub fn entry_from(
    conf_bytes: Option<&[u8]>,
    pin_path: Option<&Path>,
) -> Result<Map<String, Value>> {
    let mut masq = match conf_bytes {
        Some(b) => config::parse_conf_file(b)?.masq,
        None => MasqConfig::default(),
    };
    if let Some(p) = pin_path {
        // Same normalization and checks as the key itself.
        let probe = serde_json::json!({"cniVersion": "1.0.0", "name": "probe", "type": PLUGIN_TYPE,
                                       "pinPath": p.to_string_lossy()});
        let parsed = config::parse_netconf(probe.to_string().as_bytes())
            .map_err(|e| Error::new(e.code, format!("--pin-path: {}", e.msg)))?;
        masq.pin_path = parsed.masq.pin_path;
    }
    match config::masq_to_json(&masq) {
        Value::Object(mut m) => {
            // containerd (>= 1.5) and CRI-O then pass the pod's annotations as runtimeConfig,
            // and every runtime its hostPorts (portMappings, as to portmap): never handed out.
            m.insert(
                "capabilities".into(),
                serde_json::json!({ (config::CAP_POD_ANNOTATIONS): true, (config::CAP_PORT_MAPPINGS): true }),
            );
            Ok(m)
        }
        other => unreachable!("masq_to_json returned {other}"),
    }
}

// ---------------------------------------------------------------------------
// File system.
// ---------------------------------------------------------------------------

fn io_err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::new(code::IO_FAILURE, format!("{what}: {e}"))
}

fn mode_of(path: &Path) -> Option<u32> {
    fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

/// Write `bytes` to `path` through a temporary file in the same directory and a
/// rename, so readers see the old or the new file, never a partial one.
pub fn atomic_write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Hidden, and no config extension: runtimes never pick it up.
    let tmp = dir.join(format!(".{name}.ebpf-masq-tmp.{}", std::process::id()));
    let res = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(Permissions::from_mode(mode))?; // not subject to the umask
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(format!("write {}", path.display()), e));
    }
    Ok(())
}

/// Config file names in `dir` (regular files with a config extension), sorted.
fn conf_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if is_conf_name(&name) && fs::metadata(e.path()).map(|m| m.is_file()).unwrap_or(false) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn check_plain_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::new(
            code::INVALID_ENV,
            format!("--conflist {name:?}: a file name in the conf dir is expected"),
        ));
    }
    Ok(())
}

/// Copy the running binary into `bin_dir` unless an identical one is there.
fn install_binary(bin_dir: &Path, dry_run: bool) -> Result<(bool, String)> {
    let exe = std::env::current_exe().map_err(|e| io_err("locate the running binary", e))?;
    // /proc/self/exe still reads when the file was replaced or deleted meanwhile.
    let bytes = fs::read("/proc/self/exe")
        .or_else(|_| fs::read(&exe))
        .map_err(|e| io_err(format!("read {}", exe.display()), e))?;
    let target = bin_dir.join(BIN_NAME);
    if fs::read(&target).map(|t| t == bytes).unwrap_or(false) {
        return Ok((false, format!("binary {} is up to date", target.display())));
    }
    if dry_run {
        return Ok((false, format!("would copy {} to {}", exe.display(), target.display())));
    }
    fs::create_dir_all(bin_dir).map_err(|e| io_err(format!("create {}", bin_dir.display()), e))?;
    atomic_write(&target, &bytes, 0o755)?;
    Ok((true, format!("copied {} to {}", exe.display(), target.display())))
}

// ---------------------------------------------------------------------------
// install
// ---------------------------------------------------------------------------

pub fn install(a: &InstallArgs) -> Result<()> {
    // Everything that can fail on input first, before anything is touched.
    let conf_bytes = match &a.conf {
        Some(p) => {
            Some(fs::read(p).map_err(|e| io_err(format!("read --conf {}", p.display()), e))?)
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
                .map_err(|e| io_err(format!("read conf dir {}", dir.display()), e))?;
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
    let original = fs::read(&path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
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
            fs::remove_file(&path).map_err(|e| io_err(format!("remove {}", path.display()), e))?;
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

/// Whether the primary network config of `dir` (or `conflist`) holds exactly
/// `entry` as its ebpf-masq entry: Ok(None) when it does, Ok(Some(why)) when not.
pub fn chain_problem(dir: &Path, conflist: Option<&str>, entry: &Map<String, Value>) -> Result<Option<String>> {
    let file = match conflist {
        Some(n) => n.to_string(),
        None => {
            let names = conf_names(dir).map_err(|e| io_err(format!("read conf dir {}", dir.display()), e))?;
            match primary_conf(names.iter().map(String::as_str)) {
                Some(f) => f.to_string(),
                None => return Ok(Some(format!("no network config in {}", dir.display()))),
            }
        }
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
    remove_data_plane(&pins, &mut errors);
    // An older layout's data plane that no new binary has adopted yet (no ADD or
    // `apply` since the upgrade) is ours too.
    for (_, old) in pins.older_layouts() {
        if old.has_registrations() {
            remove_data_plane(&old, &mut errors);
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
    let current = fs::read(&path).map_err(|e| io_err(format!("read {}", path.display()), e))?;
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
            fs::remove_file(&path).map_err(|e| io_err(format!("remove {}", path.display()), e))?;
        }
        fs::remove_file(&bak_path)
            .map_err(|e| io_err(format!("remove {}", bak_path.display()), e))?;
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
                .map_err(|e| io_err(format!("remove {}", bak_path.display()), e))?;
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

/// Detach every program this node's pins know about, then remove the pins.
/// (Records are written before attaching, so the pins know every attachment.)
fn remove_data_plane(pins: &Pins, errors: &mut Vec<String>) {
    if pins.root.exists() {
        let lock = match node::lock(pins) {
            Ok(l) => Some(l),
            Err(e) => {
                errors.push(format!("lock: {}", e.msg));
                None
            }
        };
        if pins.map(crate::bpf::abi::MAP_UPLINKS).exists() {
            match node::detach_uplinks(pins) {
                Ok(()) => println!("detached the uplink programs"),
                Err(e) => errors.push(e.msg),
            }
        }
        if pins.map(crate::bpf::abi::MAP_ATTACHMENTS).exists() {
            match pod::list_attachments(pins) {
                Ok(list) => {
                    let mut n = 0;
                    for (_, info) in &list {
                        // The pins go next, so the per-pod map entries need no cleanup.
                        let veth = pod::cstr(&info.veth_name);
                        let name = match crate::netlink::get_link_by_name(&veth) {
                            Ok(Some(l)) if l.index == info.veth_ifindex => Some(veth.as_str()),
                            _ => None,
                        };
                        match loader::detach(pins, info.veth_ifindex, name, TcAttachType::Ingress) {
                            Ok(()) => n += 1,
                            Err(e) => errors.push(e.msg),
                        }
                    }
                    println!("detached from {n} pod veth(s)");
                }
                Err(e) => errors.push(e.msg),
            }
        }
        if pins.map(crate::bpf::abi::MAP_CONFIG).exists() {
            match node::release_ports(pins) {
                Ok(given) if given.is_empty() => {}
                Ok(given) => {
                    let list: Vec<String> = given.iter().map(|(lo, hi)| format!("{lo}-{hi}")).collect();
                    println!("released ports {} from net.ipv4.ip_local_reserved_ports", list.join(","));
                }
                Err(e) => errors.push(e.msg),
            }
        }
        match loader::remove_pins(pins) {
            Ok(()) => println!("removed the pins under {}", pins.root.display()),
            Err(e) => errors.push(e.msg),
        }
        drop(lock);
    } else {
        println!("no pins under {}", pins.root.display());
    }
}

// ---------------------------------------------------------------------------
// validate
// ---------------------------------------------------------------------------

pub fn validate(conf: &Path) -> Result<()> {
    let bytes = fs::read(conf).map_err(|e| io_err(format!("read {}", conf.display()), e))?;
    let c = config::parse_conf_file(&bytes).map_err(|e| e.context(conf.display()))?;
    println!(
        "{}: valid (network {:?}, cniVersion {})",
        conf.display(),
        c.name,
        c.cni_version
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes(v: &Value) -> Vec<u8> {
        let mut b = serde_json::to_vec_pretty(v).unwrap();
        b.push(b'\n');
        b
    }

    fn default_entry() -> Map<String, Value> {
        entry_from(None, None).unwrap()
    }

    fn parsed(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    const BRIDGE: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "pods",
  "disableCheck": true,
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "subnet": "10.244.1.0/24", "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ],
  "zzz": 1
}"#;

    #[test]
    fn names() {
        assert!(is_conf_name("10-a.conf") && is_conf_name("a.conflist") && is_conf_name("a.json"));
        assert!(
            !is_conf_name("a.conf.ebpf-masq.bak")
                && !is_conf_name("kubeconfig")
                && !is_conf_name("a.yaml")
        );
        assert!(!is_conf_name(".a.conflist.ebpf-masq-tmp.12"));
        let names = [
            "99-z.conf",
            "calico-kubeconfig",
            "10-flannel.conflist",
            "10-a.json",
            "05-x.yaml",
        ];
        assert_eq!(primary_conf(names), Some("10-a.json"));
        assert_eq!(
            primary_conf(["10-b.conf", "10-b.conflist"]),
            Some("10-b.conf")
        );
        assert_eq!(primary_conf(["README"]), None);
        assert_eq!(conflist_name("10-bridge.conf"), "10-bridge.conflist");
        assert_eq!(conflist_name("x.json"), "x.conflist");
        let c = backup_candidates("10-b.conflist");
        assert_eq!(
            c[0],
            ("10-b.conflist".into(), "10-b.conflist.ebpf-masq.bak".into())
        );
        assert_eq!(c[1], ("10-b.conf".into(), "10-b.conf.ebpf-masq.bak".into()));
        assert_eq!(backup_candidates("10-b.conf").len(), 1);
    }

    /// What every entry declares: the CRI runtime then passes the pod's annotations.
    fn caps() -> Value {
        json!({"io.kubernetes.cri.pod-annotations": true, "portMappings": true})
    }

    #[test]
    fn insert_into_conflist_keeps_everything_in_order() {
        let c = chain("10-pods.conflist", BRIDGE.as_bytes(), &default_entry()).unwrap();
        assert_eq!(c.action, Action::Appended);
        assert_eq!(c.file, "10-pods.conflist");
        assert_eq!(c.plugins, ["bridge", "portmap", "ebpf-masq"]);
        let out = parsed(&c.bytes);
        let orig = parsed(BRIDGE.as_bytes());
        // Key order of the list and of every plugin kept.
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["cniVersion", "name", "disableCheck", "plugins", "zzz"]
        );
        let bkeys: Vec<&String> = out["plugins"][0].as_object().unwrap().keys().collect();
        assert_eq!(bkeys, ["type", "bridge", "isGateway", "ipMasq", "ipam"]);
        assert_eq!(out["plugins"][0], orig["plugins"][0]);
        assert_eq!(out["plugins"][1], orig["plugins"][1]);
        assert_eq!(out["plugins"][2], json!({"type": "ebpf-masq", "capabilities": caps()}));
        assert_eq!(out["zzz"], 1);
        // Idempotent, byte for byte.
        let again = chain("10-pods.conflist", &c.bytes, &default_entry()).unwrap();
        assert_eq!(again.bytes, c.bytes);
        assert_eq!(again.action, Action::Replaced);
        // And back.
        assert_eq!(parsed(&unchain("f", &c.bytes).unwrap()), orig);
    }

    #[test]
    fn replace_existing_entry_in_place() {
        let mut v = parsed(BRIDGE.as_bytes());
        let plugins = v["plugins"].as_array_mut().unwrap();
        plugins.insert(1, json!({"type": "ebpf-masq", "portRange": "2000-3000"}));
        let conf = br#"{"cniVersion":"1.0.0","name":"x","type":"ebpf-masq","nativeRoutingCIDR":"10.0.0.0/8","pinPath":"/sys/fs/bpf/other"}"#;
        let entry = entry_from(Some(conf), None).unwrap();
        let c = chain("a.conflist", &bytes(&v), &entry).unwrap();
        assert_eq!(c.action, Action::Replaced);
        assert_eq!(c.plugins, ["bridge", "ebpf-masq", "portmap"]);
        let out = parsed(&c.bytes);
        assert_eq!(
            out["plugins"][1],
            json!({"type": "ebpf-masq", "nativeRoutingCIDR": ["10.0.0.0/8"], "pinPath": "/sys/fs/bpf/other",
                   "capabilities": caps()})
        );
        // --pin-path overrides the config's.
        let e = entry_from(Some(conf), Some(Path::new("/sys/fs/bpf/third"))).unwrap();
        assert_eq!(e["pinPath"], "/sys/fs/bpf/third");
        assert!(entry_from(None, Some(Path::new("relative"))).is_err());
        // Two entries: ambiguous.
        plugins_push(&mut v, json!({"type": "ebpf-masq"}));
        let e = chain("a.conflist", &bytes(&v), &default_entry()).unwrap_err();
        assert!(e.msg.contains("2 ebpf-masq entries"), "{}", e.msg);
    }

    fn plugins_push(v: &mut Value, p: Value) {
        v["plugins"].as_array_mut().unwrap().push(p);
    }

    #[test]
    fn conf_file_is_converted() {
        let single =
            br#"{"cniVersion": "0.4.0", "name": "mynet", "type": "bridge", "bridge": "cni0",
            "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}}"#;
        let c = chain("10-mynet.conf", single, &default_entry()).unwrap();
        assert_eq!(c.action, Action::Converted);
        assert_eq!(c.file, "10-mynet.conflist");
        let out = parsed(&c.bytes);
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["cniVersion", "name", "plugins"]);
        assert_eq!(out["cniVersion"], "0.4.0");
        assert_eq!(out["name"], "mynet");
        assert_eq!(out["plugins"][0], parsed(single));
        assert_eq!(out["plugins"][1], json!({"type": "ebpf-masq", "capabilities": caps()}));
        // The converted file is then stable.
        let again = chain(&c.file, &c.bytes, &default_entry()).unwrap();
        assert_eq!(again.bytes, c.bytes);
        assert_eq!(again.file, c.file);
        // .json without plugins too.
        assert_eq!(
            chain("x.json", single, &default_entry()).unwrap().file,
            "x.conflist"
        );
        // And restorable from the backup of the .conf.
        assert!(restorable(&c.file, &c.bytes, "10-mynet.conf", single));
        assert!(!restorable(&c.file, &c.bytes, "10-mynet.conflist", single));
    }

    #[test]
    fn restorable_only_when_untouched() {
        let c = chain("10-pods.conflist", BRIDGE.as_bytes(), &default_entry()).unwrap();
        assert!(restorable(
            "10-pods.conflist",
            &c.bytes,
            "10-pods.conflist",
            BRIDGE.as_bytes()
        ));
        // Someone changed the file after install.
        let mut v = parsed(&c.bytes);
        v["plugins"][0]["bridge"] = json!("cni1");
        assert!(!restorable(
            "10-pods.conflist",
            &bytes(&v),
            "10-pods.conflist",
            BRIDGE.as_bytes()
        ));
        // A backup that holds an ebpf-masq entry is never restored.
        assert!(!restorable(
            "10-pods.conflist",
            &c.bytes,
            "10-pods.conflist",
            &c.bytes
        ));
        // No entry in the current file.
        assert!(!restorable(
            "10-pods.conflist",
            BRIDGE.as_bytes(),
            "10-pods.conflist",
            BRIDGE.as_bytes()
        ));
    }

    #[test]
    fn refusals() {
        let entry = default_entry();
        // A version ebpf-masq does not speak.
        let old = br#"{"name":"cbr0","cniVersion":"0.2.0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}}]}"#;
        let e = chain("10-flannel.conflist", old, &entry).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        assert!(
            e.msg.contains("10-flannel.conflist") && e.msg.contains("0.2.0"),
            "{}",
            e.msg
        );
        // What Calico and Flannel ship (0.3.1) is chained.
        let shipped = br#"{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}}]}"#;
        assert!(chain("10-flannel.conflist", shipped, &entry).is_ok());
        let e = chain("a.conflist", b"{not json", &entry).unwrap_err();
        assert_eq!(e.code, code::DECODE_FAILURE);
        assert!(chain("a.conflist", b"[1]", &entry).is_err());
        assert!(chain(
            "a.conflist",
            br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#,
            &entry
        )
        .is_err());
        assert!(chain(
            "a.conf",
            br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq"}"#,
            &entry
        )
        .is_err());
        assert!(chain("a.conf", br#"{"cniVersion":"1.0.0","name":"n"}"#, &entry).is_err());
        assert!(chain(
            "a.conflist",
            br#"{"cniVersion":"1.0.0","name":"n","plugins":{}}"#,
            &entry
        )
        .is_err());
        // Invalid --conf is refused with the key named.
        let bad = br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","portRange":"9-1"}"#;
        assert!(entry_from(Some(bad), None)
            .unwrap_err()
            .msg
            .contains("portRange"));
    }

    #[test]
    fn file_ops_in_scratch_dir() {
        let dir = std::env::temp_dir().join(format!("ebpf-masq-install-ut-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.conflist");
        atomic_write(&p, b"one", 0o600).unwrap();
        atomic_write(&p, b"two", 0o640).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(mode_of(&p), Some(0o640));
        fs::write(dir.join("b.conf"), b"{}").unwrap();
        fs::create_dir(dir.join("0.conf")).unwrap(); // a directory is not a config
        assert_eq!(conf_names(&dir).unwrap(), ["a.conflist", "b.conf"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
