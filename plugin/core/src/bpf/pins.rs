//! Where one node's data plane lives in bpffs: `<pinPath>/v<LAYOUT_VERSION>/`
//! with `maps/<name>`, `progs/<name>` and `links/<ifindex>-<hook>`, and the names
//! of the programs pinned there. Paths only: loading is `loader`'s, maps are `maps`'.

use std::{
    fs,
    path::{Path, PathBuf},
};

use aya::programs::TcAttachType;

use super::abi::{self, LAYOUT_VERSION};

pub const PROG_VETH_INGRESS: &str = "masq_veth_in";
pub const PROG_UPLINK_EGRESS: &str = "masq_up_egress";
pub const PROG_UPLINK_INGRESS: &str = "masq_up_ingress";
pub const ALL_PROGS: [&str; 3] = [PROG_VETH_INGRESS, PROG_UPLINK_EGRESS, PROG_UPLINK_INGRESS];

/// Where one node's pins live.
#[derive(Debug, Clone)]
pub struct Pins {
    pub base: PathBuf,
    pub root: PathBuf,
    /// The layout version `root` is for (LAYOUT_VERSION, but see TEST_LAYOUT_ENV).
    pub version: u32,
}

/// Tests only: `EBPF_MASQ_TEST_AS_LAYOUT=<k>` (k below LAYOUT_VERSION) makes this
/// binary keep its data plane under `v<k>/`, as an older binary would, so the
/// end-to-end tests can stage the data plane an upgrade adopts (crate::node::adopt).
pub const TEST_LAYOUT_ENV: &str = "EBPF_MASQ_TEST_AS_LAYOUT";

impl Pins {
    pub fn new(pin_path: &Path) -> Self {
        let version = std::env::var(TEST_LAYOUT_ENV)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&v| v > 0 && v < LAYOUT_VERSION)
            .unwrap_or(LAYOUT_VERSION);
        Pins { base: pin_path.to_path_buf(), root: pin_path.join(format!("v{version}")), version }
    }
    pub fn maps_dir(&self) -> PathBuf {
        self.root.join("maps")
    }
    pub fn progs_dir(&self) -> PathBuf {
        self.root.join("progs")
    }
    pub fn map(&self, name: &str) -> PathBuf {
        self.maps_dir().join(name)
    }
    pub fn prog(&self, name: &str) -> PathBuf {
        self.progs_dir().join(name)
    }
    pub fn links_dir(&self) -> PathBuf {
        self.root.join("links")
    }
    /// The pin of our TCX link on one hook of an interface.
    pub fn link(&self, ifindex: u32, dir: TcAttachType) -> PathBuf {
        self.links_dir().join(format!("{ifindex}-{}", tc_dir_name(dir)))
    }
    /// True when every program and every map is pinned (the node's data plane is
    /// loaded). Anything missing (an interrupted load or uninstall) means reload:
    /// pinned maps are reused, the rest created, the programs re-pinned.
    pub fn loaded(&self) -> bool {
        ALL_PROGS.iter().all(|p| self.prog(p).exists()) && abi::ALL_MAPS.iter().all(|m| self.map(m).exists())
    }

    /// The data planes of older layouts under the same base (`v<k>`, k below
    /// ours), newest first: what an upgrade adopts (`crate::node::adopt`).
    pub fn older_layouts(&self) -> Vec<(u32, Pins)> {
        let mut out: Vec<(u32, Pins)> = fs::read_dir(&self.base)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let v: u32 = e.file_name().to_str()?.strip_prefix('v')?.parse().ok()?;
                (v < self.version && e.path().is_dir())
                    .then(|| (v, Pins { base: self.base.clone(), root: e.path(), version: v }))
            })
            .collect();
        out.sort_by_key(|(v, _)| std::cmp::Reverse(*v));
        out
    }

    /// True when pod registrations can exist here (DEL/GC have something to read),
    /// whether or not the programs are all pinned.
    pub fn has_registrations(&self) -> bool {
        self.map(abi::MAP_ATTACHMENTS).exists()
    }
}

pub fn tc_dir_name(dir: TcAttachType) -> &'static str {
    match dir {
        TcAttachType::Ingress => "ingress",
        TcAttachType::Egress => "egress",
        TcAttachType::Custom(_) => "custom",
    }
}
