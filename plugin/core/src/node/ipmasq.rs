//! Where the node's ip-masq-agent exclusions came from, for `status` and
//! `explain`. The exclusion maps' value is the ABI's `excl_info` (reason, index);
//! the data plane reads neither, so the source is kept on this side: an
//! exclusion from ip-masq-agent's file has FROM_IP_MASQ_AGENT in its index, and
//! the file it was read from is the target of the symlink `<layout>/ip-masq-agent`
//! (bpffs holds pins, directories and symlinks, not regular files; the record
//! lives and goes with the layout's pins).

use std::{io::ErrorKind, path::PathBuf};

use crate::{
    bpf::loader::Pins,
    config::MasqOptions,
    error::{Error, Result},
};

/// Set in `excl_info.index` for a CIDR of ip-masq-agent's list (or the
/// link-local exclusion its file decides); the low bits are its position there.
pub const FROM_IP_MASQ_AGENT: u32 = 1 << 31;

const RECORD: &str = "ip-masq-agent";

fn record_path(pins: &Pins) -> PathBuf {
    pins.root.join(RECORD)
}

/// Write (or remove) the record so that it names `conf`'s ip-masq-agent file.
pub(super) fn record_source(pins: &Pins, conf: &MasqOptions) -> Result<()> {
    let path = record_path(pins);
    let want = conf.ip_masq_agent.as_ref().map(|a| a.describe());
    let have = std::fs::read_link(&path).ok().map(|p| p.to_string_lossy().into_owned());
    if have == want {
        return Ok(());
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(Error::bpf(format!("remove {}: {e}", path.display()))),
    }
    if let Some(target) = want {
        std::os::unix::fs::symlink(&target, &path)
            .map_err(|e| Error::bpf(format!("record the ip-masq-agent file in {}: {e}", path.display())))?;
    }
    Ok(())
}

/// The ip-masq-agent file the node's exclusions came from, as recorded.
pub fn source_file(pins: &Pins) -> Option<String> {
    std::fs::read_link(record_path(pins)).ok().map(|p| p.to_string_lossy().into_owned())
}

/// True when an exclusion's index marks it as ip-masq-agent's.
pub fn is_from_ip_masq_agent(index: u32) -> bool {
    index & FROM_IP_MASQ_AGENT != 0
}

/// "ip-masq-agent config FILE": how status and explain name such an exclusion.
pub fn describe(pins: &Pins) -> String {
    format!("ip-masq-agent config {}", source_file(pins).unwrap_or_else(|| "(file not recorded)".into()))
}
