//! Sysctls of the calling thread's netns (`/proc/sys` is resolved per thread:
//! see the netlink module docs).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{code, Context, Error, Result};

/// `/proc/sys/<key>`; `key` is "net/ipv4/ip_forward" or, if it contains no
/// '/', the dotted "net.ipv4.ip_forward".
fn sysctl_path(key: &str) -> Result<PathBuf> {
    let rel = if key.contains('/') { key.to_string() } else { key.replace('.', "/") };
    let bad = rel.is_empty()
        || rel.starts_with('/')
        || rel.split('/').any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(Error::new(code::INVALID_CONFIG, format!("invalid sysctl name \"{key}\"")));
    }
    Ok(Path::new("/proc/sys").join(rel))
}

/// Read a sysctl (e.g. "net/ipv4/ip_local_reserved_ports") of the calling
/// thread's netns, without the trailing newline. `/proc/sys/net` is resolved
/// per thread (see the module docs), so inside `in_netns` this reads the
/// target netns' value.
pub fn read_sysctl(key: &str) -> Result<String> {
    let path = sysctl_path(key)?;
    let mut s = std::fs::read_to_string(&path)
        .ctx(code::IO_FAILURE, format!("cannot read sysctl {key}"))?;
    while s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

/// Write a sysctl of the calling thread's netns. The value is written with a
/// trailing newline in a single write(2), like sysctl(8) (an empty value thus
/// clears list-valued sysctls such as ip_local_reserved_ports).
pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = sysctl_path(key)?;
    let what = format!("cannot write \"{value}\" to sysctl {key}");
    let mut f = OpenOptions::new().write(true).open(&path).ctx(code::IO_FAILURE, &what)?;
    let buf = format!("{value}\n");
    let n = f.write(buf.as_bytes()).ctx(code::IO_FAILURE, &what)?;
    if n != buf.len() {
        return Err(Error::new(
            code::IO_FAILURE,
            format!("{what}: short write ({n} of {} bytes)", buf.len()),
        ));
    }
    Ok(())
}
