//! Pods whose ADD never reached ebpf-masq: started before the agent chained the
//! plugin (every node boot), while the main plugin's agent had rewritten its
//! conflist without our entry, or while ours was down. libcni's result cache
//! (config::cni_cache) holds every ADD a runtime made; each one of the chained
//! network that no registration has is registered here exactly as its ADD would
//! have registered it (`register::add_pod`, from the very config libcni would have
//! handed the plugin), marked found.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    time::SystemTime,
};

use serde_json::{Map, Value};

use crate::{
    bpf::loader::Pins,
    config::{self, cni_cache},
    error::{code, Result},
    pod, prevresult,
};

use super::register::{self, PodAdd};

/// A cache file as it was when it was read: path, length, modification time. A
/// file reported bad is skipped only while it stays so (libcni writes its files
/// in place: one read mid-write is read again once it has been written whole).
pub type FileSeen = (PathBuf, u64, Option<SystemTime>);

pub fn seen(path: &Path) -> FileSeen {
    let md = std::fs::metadata(path).ok();
    (path.to_path_buf(), md.as_ref().map_or(0, |m| m.len()), md.and_then(|m| m.modified().ok()))
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Newly registered: "namespace/name (container/ifname)".
    pub registered: Vec<String>,
    /// Cache files that could not be read as libcni's, with the reason.
    pub bad_files: Vec<(FileSeen, String)>,
    /// Entries whose pod's veth is gone (a pod deleted without a DEL): ignored.
    pub gone: usize,
    /// Entries of pods a DEL of ours unregistered since (their main plugin's DEL
    /// and the entry's removal are yet to come): ignored.
    pub deleting: usize,
    /// Entries that should have been registered and were not, with the reason.
    pub failed: Vec<String>,
}

/// Register every pod of network `network` that `cache_dir` holds and no
/// registration has, with `entry` (the chained ebpf-masq entry in force) as its
/// config. `skip` holds files already reported bad (each one is told once).
/// `learn_all`: learn the subnets of registered pods too (the first pass: a
/// data plane adopted from an older layout has none learned).
pub fn discover(
    pins: &Pins,
    cache_dir: &Path,
    network: &str,
    cni_version: &str,
    entry: &Map<String, Value>,
    skip: &HashSet<FileSeen>,
    learn_all: bool,
) -> Result<Pass> {
    let mut pass = Pass::default();
    let dir = cache_dir.join("results");
    let listed_at = std::time::SystemTime::now();
    let names = match std::fs::read_dir(&dir) {
        Ok(d) => d.filter_map(|e| e.ok()).map(|e| e.path()).collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(pass),
        Err(e) => return Err(crate::error::Error::new(code::IO_FAILURE, format!("read {}: {e}", dir.display()))),
    };
    let prefix = format!("{network}-");
    let registered: HashSet<_> = pod::list_attachments(pins)?.into_iter().map(|(k, _)| k).collect();
    // The DEL marks of the pods whose entries are still there (the others go).
    let mut cached_marks = HashSet::new();
    for path in names {
        let ours = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix));
        if !ours {
            continue;
        }
        let file = seen(&path);
        if skip.contains(&file) {
            continue;
        }
        let cached = match std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| cni_cache::parse_cached_add(&b)) {
            Ok(c) => c,
            Err(why) => {
                pass.bad_files.push((file, why));
                continue;
            }
        };
        if cached.network != network {
            continue; // another network whose name starts with ours
        }
        cached_marks.insert(super::deleted::name_of(&cached.container_id, &cached.ifname));
        let key = pod::attachment_key(&cached.container_id, &cached.ifname);
        let conf = config::parse_netconf(&cni_cache::plugin_conf(entry, network, cni_version, &cached));
        let conf = match conf {
            Ok(c) => c,
            Err(e) => {
                pass.bad_files.push((file, format!("as the plugin's config: {}", e.msg)));
                continue;
            }
        };
        if registered.contains(&key) {
            // Its subnet is the node's (add_pod learns it for the pods it registers).
            if let Some(prev) = learn_all.then(|| prevresult::parse_prev_result(&cached.result).ok()).flatten() {
                let _lock = super::lock(pins)?;
                super::pod_nets::learn(pins, &prev.container_nets(&cached.ifname))?;
            }
            continue;
        }
        let req = PodAdd {
            container_id: cached.container_id.clone(),
            ifname: cached.ifname.clone(),
            netns: String::new(),
            args: cached.cni_args.clone(),
            found: true,
            cached_at: file.2,
        };
        let who = config::pod_identity(&cached.cni_args).unwrap_or_default();
        let what = format!("{}/{} ({}/{})", who.namespace, who.name, cached.container_id, cached.ifname);
        let veth_present = register::prev_result(&conf)
            .and_then(|(_, prev)| register::find_host_veth(&req, &prev))
            .is_ok();
        if !veth_present {
            pass.gone += 1;
            continue;
        }
        match register::add_pod(&req, &conf, pins) {
            Ok(register::Added::Registered) => pass.registered.push(what),
            Ok(register::Added::Deleted) => pass.deleting += 1,
            Err(e) => pass.failed.push(format!("{what}: {}", e.msg)),
        }
    }
    if pins.root.exists() {
        let _lock = super::lock(pins)?;
        super::deleted::prune(pins, &cached_marks, listed_at);
    }
    Ok(pass)
}
