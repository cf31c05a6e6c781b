//! The file system side of install: atomic writes, the conf dir's config
//! names, and copying the running binary into the CNI bin dir.

use std::{
    fs::{self, File, OpenOptions, Permissions},
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::Path,
};

use super::{conflist::is_conf_name, BIN_NAME};
use ebpf_masq_core::error::{code, Context, Error, Result};


pub(super) fn mode_of(path: &Path) -> Option<u32> {
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
        return Err(Error::at(code::IO_FAILURE, format!("write {}", path.display()), e));
    }
    Ok(())
}

/// Config file names in `dir` (regular files with a config extension), sorted.
pub(super) fn conf_names(dir: &Path) -> std::io::Result<Vec<String>> {
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

pub(super) fn check_plain_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::new(
            code::INVALID_ENV,
            format!("--conflist {name:?}: a file name in the conf dir is expected"),
        ));
    }
    Ok(())
}

/// Copy the running binary into `bin_dir` unless an identical one is there.
pub(super) fn install_binary(bin_dir: &Path, dry_run: bool) -> Result<(bool, String)> {
    let exe = std::env::current_exe().ctx(code::IO_FAILURE, "locate the running binary")?;
    // /proc/self/exe still reads when the file was replaced or deleted meanwhile.
    let bytes = fs::read("/proc/self/exe")
        .or_else(|_| fs::read(&exe))
        .ctx(code::IO_FAILURE, format!("read {}", exe.display()))?;
    let target = bin_dir.join(BIN_NAME);
    if fs::read(&target).map(|t| t == bytes).unwrap_or(false) {
        return Ok((false, format!("binary {} is up to date", target.display())));
    }
    if dry_run {
        return Ok((false, format!("would copy {} to {}", exe.display(), target.display())));
    }
    fs::create_dir_all(bin_dir).ctx(code::IO_FAILURE, format!("create {}", bin_dir.display()))?;
    atomic_write(&target, &bytes, 0o755)?;
    Ok((true, format!("copied {} to {}", exe.display(), target.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

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
