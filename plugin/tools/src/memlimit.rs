//! Whether `natMaxEntries` fits the agent container's memory limit: BPF map
//! memory is charged to the cgroup of the process that created the maps (the
//! agent's first apply), the NAT pairs' included as flows make them
//! (bpf::memory). The agent logs a warning at start and on each config change
//! when full tables would pass its cgroup v2 `memory.max`.

use std::path::{Path, PathBuf};

use ebpf_masq_core::bpf::memory::{mib, NatMemory};

/// Room for everything else in the container: the node's other maps (25.9 MiB
/// of bpftool memlock on a default node: event rings, port_counts, pods,
/// veths, ...) and the agent itself.
pub const HEADROOM: u64 = 64 << 20;

/// The memory.max file of the cgroup `/proc/self/cgroup` names (cgroup v2:
/// its `0::PATH` line), under the cgroup2 mount `root`. A container in its own
/// cgroup namespace sees `0::/`: its limit is then at the root of its mount.
pub fn memory_max_file(proc_self_cgroup: &str, root: &Path) -> Option<PathBuf> {
    let path = proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(root.join(path.trim().trim_start_matches('/')).join("memory.max"))
}

/// A memory.max's value: bytes, or None for `max` (no limit) or anything else.
pub fn parse_memory_max(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The warning for `nat_max_entries` under a `limit` (bytes; None: no limit),
/// or None when full tables of both families fit.
pub fn warning(nat_max_entries: u32, limit: Option<u64>) -> Option<String> {
    let limit = limit?;
    let m = NatMemory::new(nat_max_entries);
    let (v4, dual) = (m.full_ipv4() + HEADROOM, m.full_dual_stack() + HEADROOM);
    if dual <= limit {
        return None;
    }
    let which = if v4 > limit {
        "even a full IPv4 table does not fit"
    } else {
        "a full IPv4 table fits, full IPv4 and IPv6 tables do not"
    };
    Some(format!(
        "agent=memory natMaxEntries={nat_max_entries} memory_max_mib={} full_ipv4_mib={} full_dual_stack_mib={}: {which} \
         (BPF map memory is charged to this container; past its limit new flows fail): raise the container's memory \
         limit or lower natMaxEntries",
        mib(limit),
        mib(v4),
        mib(dual)
    ))
}

/// This process's memory limit, if it has one (cgroup v2).
pub fn own_limit() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let file = memory_max_file(&cgroup, Path::new("/sys/fs/cgroup"))?;
    parse_memory_max(&std::fs::read_to_string(file).ok()?)
}

/// Log the warning, if any, for the config in force.
pub fn check(nat_max_entries: u32) {
    if let Some(w) = warning(nat_max_entries, own_limit()) {
        log::warn!("{w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: u64 = 1 << 20;

    #[test]
    fn finds_the_cgroup_file() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(memory_max_file("0::/\n", root), Some(root.join("memory.max")));
        let pod = "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope\n";
        assert_eq!(
            memory_max_file(pod, root),
            Some(root.join("kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope/memory.max"))
        );
        // cgroup v1 only: no limit read.
        assert_eq!(memory_max_file("12:memory:/x\n1:name=systemd:/x\n", root), None);
    }

    #[test]
    fn parses_memory_max() {
        assert_eq!(parse_memory_max("536870912\n"), Some(512 * MI));
        assert_eq!(parse_memory_max("max\n"), None);
        assert_eq!(parse_memory_max(""), None);
    }

    #[test]
    fn warns_only_when_full_tables_cannot_fit() {
        // No limit, or a large one: nothing to say.
        assert_eq!(warning(1 << 20, None), None);
        // The manifest's default, 1 GiB, holds both families' full tables.
        assert_eq!(warning(1 << 20, Some(1024 * MI)), None);
        // 512 MiB: a full IPv4 table fits, a dual-stack one does not.
        let w = warning(1 << 20, Some(512 * MI)).expect("a warning");
        assert!(w.contains("natMaxEntries=1048576") && w.contains("memory_max_mib=512"), "{w}");
        assert!(w.contains("full_ipv4_mib=419") && w.contains("full_dual_stack_mib=819"), "{w}");
        assert!(w.contains("a full IPv4 table fits"), "{w}");
        // Too small even for IPv4.
        assert!(warning(1 << 20, Some(256 * MI)).unwrap().contains("even a full IPv4 table does not fit"));
        // A smaller table fits 512 MiB.
        assert_eq!(warning(262_144, Some(512 * MI)), None);
    }
}
