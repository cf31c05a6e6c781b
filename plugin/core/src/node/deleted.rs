//! The marks a DEL leaves: which pods ebpf-masq's DEL unregistered, and when.
//!
//! In a conflist, ebpf-masq's DEL runs before the main plugin's (the reverse of
//! ADD), and libcni removes its cached result only after the whole DEL. In
//! between, the pod's cache entry and its host veth are still there, so the
//! agent's discovery (`node::discover`) would take it for a pod whose ADD never
//! reached ebpf-masq and register it again. So DEL marks the pod here, under the
//! node lock, and a found pod is registered only when its cache entry is newer
//! than its mark (a later ADD of the same container ID that never reached us).
//! The check is made under the same lock, so either DEL's unregistering comes
//! after the registration, or the registration sees the mark.
//!
//! A mark is an empty directory in bpffs, `<layout>/deleted/<hash>`, named by a
//! hash of the container ID and ifname; its change time is the DEL's. A mark goes
//! when an ADD of ours registers the pod again, or when discovery no longer finds
//! a cache entry of it (`prune`); uninstall removes them with the layout.

use std::{
    collections::HashSet,
    path::PathBuf,
    time::SystemTime,
};

use crate::{
    bpf::loader::Pins,
    error::{Error, Result},
};

const DIR: &str = "deleted";

/// The mark's name for (container ID, ifname): FNV-1a 64 of "id\0ifname", in hex
/// (a container ID has no length limit; a bpffs name has one).
pub fn name_of(container_id: &str, ifname: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in container_id.bytes().chain(std::iter::once(0)).chain(ifname.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn path_of(pins: &Pins, container_id: &str, ifname: &str) -> PathBuf {
    pins.root.join(DIR).join(name_of(container_id, ifname))
}

/// Mark the pod as deleted now. The caller holds the node lock.
pub fn mark(pins: &Pins, container_id: &str, ifname: &str) -> Result<()> {
    let p = path_of(pins, container_id, ifname);
    let _absent_ok = std::fs::remove_dir(&p);
    std::fs::create_dir_all(&p).map_err(|e| Error::bpf_at(format!("create {}", p.display()), e))
}

/// Forget the pod's mark (an ADD of ours registered it). The caller holds the node lock.
pub fn clear(pins: &Pins, container_id: &str, ifname: &str) {
    let _absent_ok = std::fs::remove_dir(path_of(pins, container_id, ifname));
}

/// Was the pod deleted at or after `cached_at` (its cache entry's time)? The
/// caller holds the node lock.
pub fn since(pins: &Pins, container_id: &str, ifname: &str, cached_at: SystemTime) -> bool {
    std::fs::metadata(path_of(pins, container_id, ifname))
        .and_then(|m| m.modified())
        .is_ok_and(|deleted_at| deleted_at >= cached_at)
}

/// Remove the marks made before `listed_at` whose names are not in `cached` (the
/// pods the cache held an entry of when it was listed, at `listed_at`); a mark made
/// since may be of an entry the listing missed. The caller holds the node lock.
pub fn prune(pins: &Pins, cached: &HashSet<String>, listed_at: SystemTime) {
    let Ok(dir) = std::fs::read_dir(pins.root.join(DIR)) else {
        return;
    };
    for e in dir.filter_map(|e| e.ok()) {
        let listed = e.file_name().to_str().is_some_and(|n| cached.contains(n));
        let before = e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < listed_at);
        if !listed && before {
            let _gone_ok = std::fs::remove_dir(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_named_by_container_and_ifname_alone() {
        assert_eq!(name_of("abc", "eth0"), name_of("abc", "eth0"));
        assert_ne!(name_of("abc", "eth0"), name_of("abc", "eth1"));
        assert_ne!(name_of("abc", "eth0"), name_of("abce", "th0"), "the separator counts");
        assert_eq!(name_of("", "").len(), 16);
        assert_eq!(name_of(&"x".repeat(1000), "eth0").len(), 16, "any container ID fits a bpffs name");
    }
}
