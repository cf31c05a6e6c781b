//! Where a node keeps what the DaemonSet mounts: the CNI plugin and config
//! directories and libcni's cache, as --preset and the plain flags say, and the
//! priority class its pods may use in their namespace.

use clap::ValueEnum;

use ebpf_masq_core::error::{code, Error, Result};

use super::ManifestArgs;

/// Distributions whose kubelet/containerd do not use /opt/cni/bin and /etc/cni/net.d.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// K3s: its containerd's conf_dir and its stable CNI bin dir.
    K3s,
    /// RKE2: the usual directories (its Canal, Calico and Cilium charts mount them).
    Rke2,
    /// GKE nodes on Container-Optimized OS: /opt is read-only there.
    GkeCos,
    /// OpenShift 4 (Multus in front of the cluster network).
    Openshift,
}

/// The host directories a preset sets (bin, conf, cache), and where each comes from.
pub const DEFAULT_DIRS: [&str; 3] = ["/opt/cni/bin", "/etc/cni/net.d", "/var/lib/cni"];

pub const PRESETS_HELP: &str = "\
Presets (--cni-bin-dir, --cni-conf-dir, --cni-cache-dir given as well win):

  k3s        bin /var/lib/rancher/k3s/data/cni, conf /var/lib/rancher/k3s/agent/etc/cni/net.d:
             the bin_dir and conf_dir K3s writes into its containerd's config.toml
             (/var/lib/rancher/k3s/agent/etc/containerd/config.toml). data/cni is the stable bin
             dir of K3s releases since autumn 2024 (k3s-io/k3s#10868); before, K3s used
             data/current/bin, which each K3s upgrade replaces: there, give
             --cni-bin-dir /var/lib/rancher/k3s/data/current/bin and restart the agent's pod
             after a K3s upgrade (it copies the binary in at its start).
  rke2       bin /opt/cni/bin, conf /etc/cni/net.d: RKE2's containerd and its bundled
             CNI charts (rke2-canal, rke2-calico, rke2-cilium) use the usual directories.
  gke-cos    bin /home/kubernetes/bin, conf /etc/cni/net.d: on Container-Optimized OS
             /opt is read-only and kubelet's CNI plugins live in /home/kubernetes/bin (what
             Cilium's GKE install sets as cni.binPath).
  openshift  bin /var/lib/cni/bin, conf /run/multus/cni/net.d: OpenShift 4 runs Multus,
             whose binDir is /var/lib/cni/bin; Multus's own config is in
             /etc/kubernetes/cni/net.d, and the cluster network's conflist (OVN-Kubernetes,
             the default network Multus delegates to, where ebpf-masq is chained) in
             /run/multus/cni/net.d. Also grant the ServiceAccount the privileged SCC:
             oc adm policy add-scc-to-user privileged -z ebpf-masq -n NAMESPACE.

The cache dir is libcni's default, /var/lib/cni, for every preset (containerd and
CRI-O keep each ADD's result under its results/).";

/// The host directories the DaemonSet mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDirs {
    pub bin: String,
    pub conf: String,
    pub cache: String,
}

impl NodeDirs {
    /// Where the container sees a host directory: under /host, as the CNI DaemonSets do.
    pub fn in_container(host: &str) -> String {
        format!("/host{host}")
    }
}

fn preset_dirs(p: Option<Preset>) -> [&'static str; 3] {
    match p {
        None | Some(Preset::Rke2) => DEFAULT_DIRS,
        Some(Preset::K3s) => ["/var/lib/rancher/k3s/data/cni", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/var/lib/cni"],
        Some(Preset::GkeCos) => ["/home/kubernetes/bin", "/etc/cni/net.d", "/var/lib/cni"],
        Some(Preset::Openshift) => ["/var/lib/cni/bin", "/run/multus/cni/net.d", "/var/lib/cni"],
    }
}

/// The directories: the preset's (or the usual ones), each replaced by its flag.
pub fn node_dirs(a: &ManifestArgs) -> Result<NodeDirs> {
    let [bin, conf, cache] = preset_dirs(a.preset);
    let pick = |opt: &str, flag: &Option<String>, preset: &str| -> Result<String> {
        let d = flag.clone().unwrap_or_else(|| preset.to_string());
        check_host_dir(opt, &d)?;
        Ok(d.trim_end_matches('/').to_string())
    };
    let dirs = NodeDirs {
        bin: pick("--cni-bin-dir", &a.cni_bin_dir, bin)?,
        conf: pick("--cni-conf-dir", &a.cni_conf_dir, conf)?,
        cache: pick("--cni-cache-dir", &a.cni_cache_dir, cache)?,
    };
    if dirs.bin == dirs.conf {
        let msg = format!("--cni-bin-dir and --cni-conf-dir are both {}: they must differ", dirs.bin);
        return Err(Error::new(code::INVALID_CONFIG, msg));
    }
    Ok(dirs)
}

/// An absolute, normal path of the node (a hostPath volume's path), not /.
pub fn check_host_dir(opt: &str, d: &str) -> Result<()> {
    let normal = d.starts_with('/')
        && !d.trim_end_matches('/').is_empty()
        && !d.split('/').any(|c| c == "." || c == "..")
        && !d.contains("//")
        && !d.chars().any(|c| c.is_control() || c.is_whitespace());
    if normal {
        Ok(())
    } else {
        Err(Error::new(
            code::INVALID_CONFIG,
            format!("{opt} {d:?}: expected an absolute directory of the node, e.g. /opt/cni/bin (no '.', '..', blanks, not /)"),
        ))
    }
}

/// The priority class the pods ask for: --priority-class, else system-node-critical.
pub fn priority_class(a: &ManifestArgs) -> &str {
    a.priority_class.as_deref().unwrap_or(NODE_CRITICAL)
}

pub const NODE_CRITICAL: &str = "system-node-critical";

/// A ResourceQuota admitting system-node-critical pods in the namespace is
/// needed: outside kube-system, a cluster whose ResourceQuota admission limits
/// the critical classes (GKE does) admits them only where such a quota exists.
pub fn needs_priority_quota(a: &ManifestArgs) -> bool {
    a.namespace != "kube-system" && priority_class(a) == NODE_CRITICAL
}
