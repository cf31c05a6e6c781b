//! Node-wide state: reconcile the pinned config, exclusion, uplink and rule maps
//! (and the uplink attachments) to one validated config. Shared by CNI ADD and
//! `ebpf-masq apply`; idempotent, so running it twice changes nothing.
//!
//! Here: the node lock, the entry points (reconcile, data_plane_problem,
//! remove_stale) and small readers. The rooms: `policy` (what the config writes
//! into the node-wide maps), `ipmasq` (where ip-masq-agent's exclusions came from), `uplinks` (finding and attaching them), `ports`
//! (older versions' ip_local_reserved_ports), `adopt` (an older pin layout's pods
//! and flows), `teardown` (uninstall). May use pod, bpf, netlink, config, error;
//! never cli or cni.

pub mod adopt;
pub mod deleted;
pub mod discover;
pub mod egress_policy;
pub mod ipmasq;
pub mod pod_nets;
pub mod register;
mod config_maps;
mod ports;
mod teardown;
mod uplinks;

pub use config_maps::{desired_exclusions, filter_bits};
pub use ports::release_ports;
pub use teardown::teardown;
pub use uplinks::{detach_uplinks, resolve_uplinks, Uplink};

use std::{
    fs::File,
    net::Ipv4Addr,
    os::fd::AsRawFd,
    path::Path,
    time::{Duration, Instant},
};

use aya::{
    maps::{MapData, PerCpuArray, PerCpuValues},
    programs::TcAttachType,
};

use crate::{
    bpf::{
        abi,
        loader::{self, Pins},
        maps,
    },
    config::MasqOptions,
    error::{code, Context, Error, Result},
    netlink, pod,
};

const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Exclusive lock on one node's pin directory (flock on the bpffs directory itself,
/// so it needs no other runtime dir). Released on drop. Timeout -> CNI code 11.
pub struct NodeLock {
    _dir: File,
}

pub fn lock(pins: &Pins) -> Result<NodeLock> {
    loader::ensure_bpffs(&pins.base)?;
    std::fs::create_dir_all(&pins.root)
        .map_err(|e| Error::bpf(format!("create {}: {e}", pins.root.display())))?;
    let dir = File::open(&pins.root).map_err(|e| Error::bpf(format!("open {}: {e}", pins.root.display())))?;
    let start = Instant::now();
    let mut waited = false;
    loop {
        // SAFETY: plain flock(2) on an fd we own.
        let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            if waited {
                log::info!("node lock on {}: waited {} ms for another call", pins.root.display(), start.elapsed().as_millis());
            }
            return Ok(NodeLock { _dir: dir });
        }
        waited = true;
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::bpf(format!("lock {}: {err}", pins.root.display())));
        }
        if start.elapsed() > LOCK_TIMEOUT {
            return Err(Error::new(
                code::TRY_AGAIN_LATER,
                format!("node lock on {} busy for {}s", pins.root.display(), LOCK_TIMEOUT.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Why the node's data plane is not in place for `conf`, or None when it is: the
/// programs are loaded and attached to both hooks of every uplink `conf` names.
pub fn data_plane_problem(pins: &Pins, conf: &MasqOptions) -> Result<Option<String>> {
    if !pins.loaded() {
        return Ok(Some(format!("data plane not loaded under {}", pins.root.display())));
    }
    for up in resolve_uplinks(conf)? {
        for (prog, dir, hook) in [
            (loader::PROG_UPLINK_INGRESS, TcAttachType::Ingress, "ingress"),
            (loader::PROG_UPLINK_EGRESS, TcAttachType::Egress, "egress"),
        ] {
            if !loader::is_attached(pins, prog, up.ifindex, dir)? {
                return Ok(Some(format!("ebpf-masq is not attached to uplink {} {hook}", up.name)));
            }
        }
    }
    Ok(None)
}

/// Remove the registrations whose host veth is gone (its pod was deleted while
/// the node was down, or its DEL was lost), exactly as DEL would, under the node
/// lock. A veth of the same name with another ifindex is another pod's: the old
/// registration goes. Returns "container/ifname (veth)" of each one removed.
pub fn remove_stale(pins: &Pins) -> Result<Vec<String>> {
    if !pins.has_registrations() {
        return Ok(Vec::new());
    }
    let _lock = lock(pins)?;
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for (key, info) in pod::list_attachments(pins)? {
        let veth = pod::cstr(&info.veth_name);
        match netlink::get_link_by_name(&veth)? {
            Some(l) if l.index == info.veth_ifindex => continue,
            _ => {}
        }
        let what = format!("{}/{} ({veth})", pod::cstr(&key.container_id), pod::cstr(&key.ifname));
        match pod::unregister(pins, &key) {
            Ok(_) => removed.push(what),
            Err(e) => errors.push(format!("{what}: {}", e.msg)),
        }
    }
    if errors.is_empty() {
        Ok(removed)
    } else {
        Err(Error::bpf(errors.join("; ")))
    }
}

/// Bring the node to `conf`: load once, then config, exclusions, rules, uplinks.
/// The caller holds the node lock.
pub fn reconcile(pins: &Pins, conf: &MasqOptions) -> Result<Vec<Uplink>> {
    // Resolve everything that can fail on input before touching anything.
    let uplinks = resolve_uplinks(conf)?;
    reconcile_with(pins, conf, &uplinks)?;
    Ok(uplinks)
}

/// `reconcile` with the uplinks already resolved (CNI ADD resolves them before
/// taking the lock, and does not pay for it twice).
pub fn reconcile_with(pins: &Pins, conf: &MasqOptions, uplinks: &[Uplink]) -> Result<()> {
    reconcile_inner(pins, conf, uplinks, None)
}

/// `reconcile_with` for the ADD of a pod the egress policies of `policies` select:
/// their entries are in place before the pod is registered with that mask.
pub fn reconcile_for_pod(pins: &Pins, conf: &MasqOptions, uplinks: &[Uplink], policies: u32) -> Result<()> {
    reconcile_inner(pins, conf, uplinks, Some(policies))
}

fn reconcile_inner(pins: &Pins, conf: &MasqOptions, uplinks: &[Uplink], policies_of_new_pod: Option<u32>) -> Result<()> {
    if pins.loaded() {
        loader::ensure_loaded(pins, conf.nat_max_entries)?;
    } else {
        // A first load: the uplinks' TCX links are made while the programs verify.
        // One loader for the placeholders and both objects (its constructor's BTF parse once).
        let names: Vec<(u32, String)> = uplinks.iter().map(|u| (u.ifindex, u.name.clone())).collect();
        let mut ebpf_loader = loader::bare_loader();
        let placeholders = loader::placeholders(pins, &names, &mut ebpf_loader);
        let (loaded, held) = std::thread::scope(|s| {
            let held = s.spawn(|| loader::hold_uplink_hooks(pins, placeholders));
            let loaded = loader::ensure_loaded_with(pins, conf.nat_max_entries, ebpf_loader);
            (loaded, held.join().unwrap_or_default())
        });
        if let Err(e) = loaded {
            for pin in held {
                let _ = std::fs::remove_file(pin); // nothing of a failed load stays on the uplinks
            }
            return Err(e);
        }
    }
    warn_if_resized(pins, conf.nat_max_entries);
    config_maps::write_config(pins, conf)?;
    config_maps::write_pool(pins, conf)?;
    config_maps::reconcile_exclusions(pins, conf)?;
    pod_nets::reconcile(pins, conf)?;
    ipmasq::record_source(pins, conf)?;
    config_maps::reconcile_services(pins, conf)?;
    config_maps::reconcile_rules(pins, conf, uplinks)?;
    // An older layout's data plane (a binary before an upgrade): its pods and
    // pairs move over before the uplinks take its links over (node::adopt).
    let adopted = adopt::adopt(pins);
    uplinks::reconcile_uplinks(pins, uplinks)?;
    adopt::finish(pins, adopted);
    // Every registered pod's egress policies, evaluated again (a config change
    // reaches running pods; their established flows keep their mapping).
    egress_policy::sync(pins, conf, policies_of_new_pod)?;
    // Nothing is reserved any more (host flows are tracked: host_egress); ports an
    // older version reserved are given back, so the node needs no tuning.
    match release_ports(pins) {
        Ok(given) if !given.is_empty() => log::info!("released ports {given:?} from ip_local_reserved_ports"),
        Ok(_) => {}
        Err(e) => log::warn!("reserved ports not released: {}", e.msg),
    }
    Ok(())
}

/// The NAT maps keep the size they were created with; a config asking for
/// another gets a warning (in the log, and on stderr for `apply`), not an error:
/// failing pods over it would be worse than running at the old size.
fn warn_if_resized(pins: &Pins, wanted: u32) {
    if let Ok(Some(have)) = maps::map_max_entries(pins, abi::MAP_NAT4_REV) {
        if have != wanted {
            log::warn!(
                "natMaxEntries {wanted} in the config, but the loaded NAT maps hold {have} pairs per family: \
                 the size is fixed when they are first created (`ebpf-masq uninstall`, then an ADD or `apply`, resizes)"
            );
        }
    }
}

/// Sum of every CPU's value of a per-CPU u64 array.
pub fn read_counters(pins: &Pins, name: &str) -> Result<Vec<u64>> {
    let arr: PerCpuArray<MapData, u64> = maps::pinned(pins, name)?;
    let mut out = Vec::new();
    for v in arr.iter() {
        let v: PerCpuValues<u64> = v.bpf_ctx(name)?;
        out.push(v.iter().sum());
    }
    Ok(out)
}

pub use crate::bpf::sys::ncpus;

pub fn ipv4(b: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(b)
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}
