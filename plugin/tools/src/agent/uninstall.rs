//! `ebpf-masq agent --uninstall`: what `ebpf-masq manifest --uninstall` runs on
//! every node. It takes ebpf-masq off the node as `ebpf-masq uninstall` does
//! (conflist entries, binary, programs, pins) and keeps it off until SIGTERM:
//!
//! - first it writes the marker `<cni-conf-dir>/.ebpf-masq-uninstall`; an agent
//!   still running on the node (its pod not gone yet) sees it and holds off, so
//!   it cannot chain the entry or load the data plane again ([`held`]);
//! - then, every `PASS`, whatever is left or came back is taken off again;
//! - `/healthz` is 200 once nothing is left, 503 listing what is: the
//!   DaemonSet is ready on a node when the node is clean. It is served on the
//!   agent's port, bound as soon as it is free: while an agent still runs, the
//!   node is cleaned all the same but the pod is not ready;
//! - SIGTERM removes the marker and exits 0.
//!
//! The runtimes read only *.conf, *.conflist and *.json from the conf dir, so the
//! marker is nothing to them.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use ebpf_masq_core::{bpf::loader::Pins, config::DEFAULT_PIN_PATH, error::{code, Error, Result}, logging};

use super::{install, AgentArgs};

/// The marker's name in the CNI conf dir.
pub const MARKER: &str = ".ebpf-masq-uninstall";
/// How often the node is looked at again.
const PASS: Duration = Duration::from_secs(2);
/// A failure that stays the same is tried again this often (not every pass).
const RETRY: Duration = Duration::from_secs(10);

/// Why an agent must hold off: the marker is in its conf dir. None: it need not.
pub fn held(conf_dir: &Path) -> Option<String> {
    let m = conf_dir.join(MARKER);
    m.exists().then(|| {
        format!(
            "held off: ebpf-masq is being uninstalled from this node ({} exists; `ebpf-masq agent --uninstall` \
             removes it when it stops): nothing is chained or applied",
            m.display()
        )
    })
}

pub fn main(a: &AgentArgs) -> Result<()> {
    logging::init_stderr(log::LevelFilter::Info);
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&term))
            .map_err(|e| Error::new(code::IO_FAILURE, format!("install the signal handler: {e}")))?;
    }
    let marker = a.cni_conf_dir.join(MARKER);
    fs::create_dir_all(&a.cni_conf_dir)
        .map_err(|e| Error::new(code::IO_FAILURE, format!("create {}: {e}", a.cni_conf_dir.display())))?;
    install::atomic_write(
        &marker,
        b"ebpf-masq is being uninstalled from this node: `ebpf-masq agent --uninstall` wrote this file and removes \
          it when it stops; an ebpf-masq agent holds off while it exists.\n",
        0o644,
    )?;
    // /healthz on the agent's port: while an agent still holds it, the node is
    // cleaned all the same, and the pod is not ready (the agent is not gone).
    let health = Arc::new(Mutex::new((503u16, "not looked at yet\n".to_string())));
    let addr: Option<std::net::SocketAddr> = match &a.metrics_listen {
        Some(addr) => Some(addr.parse().map_err(|_| {
            Error::new(code::INVALID_CONFIG, format!("--metrics-listen {addr:?}: expected a numeric ADDR:PORT, e.g. 0.0.0.0:9436"))
        })?),
        None => None,
    };
    let mut serving = addr.is_none();
    let mut told_busy = false;
    log::info!(
        "agent=uninstall start cni_conf_dir={} cni_bin_dir={} marker={}",
        a.cni_conf_dir.display(),
        a.cni_bin_dir.display(),
        marker.display()
    );

    // Every pin path this node's entries named (or --pin-path, or the default).
    let mut pin_paths: BTreeSet<PathBuf> = a.pin_path.iter().cloned().collect();
    let mut last: Option<(Vec<String>, Instant)> = None;
    while !term.load(Ordering::Relaxed) {
        if let (false, Some(addr)) = (serving, addr) {
            match tiny_http::Server::http(addr) {
                Ok(server) => {
                    serve(server, Arc::clone(&health));
                    serving = true;
                    log::info!("agent=uninstall serving={addr}");
                }
                Err(e) if !told_busy => {
                    log::warn!("agent=uninstall listen={addr} err={e:?} (an agent still running? tried again every pass)");
                    told_busy = true;
                }
                Err(_) => {}
            }
        }
        pin_paths.extend(entry_pin_paths(&a.cni_conf_dir));
        if pin_paths.is_empty() {
            pin_paths.insert(PathBuf::from(DEFAULT_PIN_PATH));
        }
        let left = leftovers(a, &pin_paths);
        let retry = match &last {
            Some((before, at)) => *before != left || at.elapsed() >= RETRY,
            None => true,
        };
        if !left.is_empty() && retry {
            log::info!("agent=uninstall left={left:?} action=uninstall");
            for p in &pin_paths {
                let args = install::UninstallArgs {
                    cni_conf_dir: a.cni_conf_dir.clone(),
                    cni_bin_dir: Some(a.cni_bin_dir.clone()),
                    pin_path: Some(p.clone()),
                };
                if let Err(e) = install::uninstall(&args) {
                    log::error!("agent=uninstall result=error err={:?}", e.msg);
                }
            }
            last = Some((left, Instant::now()));
        }
        let left = leftovers(a, &pin_paths);
        if left.is_empty() && last.as_ref().is_some_and(|(l, _)| !l.is_empty()) {
            log::info!("agent=uninstall result=done");
            last = Some((Vec::new(), Instant::now()));
        }
        *health.lock().unwrap_or_else(|p| p.into_inner()) = if left.is_empty() {
            (200, "uninstalled: no ebpf-masq entry, binary, programs or pins left on this node\n".into())
        } else {
            (503, format!("still on this node: {}\n", left.join("; ")))
        };
        let wake = Instant::now() + PASS;
        while !term.load(Ordering::Relaxed) && Instant::now() < wake {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    match fs::remove_file(&marker) {
        Ok(()) => log::info!("agent=uninstall stop removed={}", marker.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => log::info!("agent=uninstall stop"),
        Err(e) => log::error!("agent=uninstall stop err={:?}", format!("remove {}: {e}", marker.display())),
    }
    Ok(())
}

/// The conf dir's files that hold an ebpf-masq entry, with the entry's pinPath.
fn chained_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| install::is_conf_name(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|n| {
            let entry = install::find_entry(&fs::read(dir.join(&n)).ok()?)?;
            let pin = entry.get("pinPath").and_then(|v| v.as_str()).unwrap_or(DEFAULT_PIN_PATH);
            Some((n, PathBuf::from(pin)))
        })
        .collect()
}

fn entry_pin_paths(dir: &Path) -> Vec<PathBuf> {
    chained_files(dir).into_iter().map(|(_, p)| p).collect()
}

/// What of ebpf-masq is still on the node, one phrase each (empty: nothing).
fn leftovers(a: &AgentArgs, pin_paths: &BTreeSet<PathBuf>) -> Vec<String> {
    let mut left: Vec<String> = chained_files(&a.cni_conf_dir)
        .into_iter()
        .map(|(n, _)| format!("an ebpf-masq entry in {}", a.cni_conf_dir.join(n).display()))
        .collect();
    let bin = a.cni_bin_dir.join(install::BIN_NAME);
    if bin.exists() {
        left.push(format!("the binary {}", bin.display()));
    }
    for p in pin_paths {
        let pins = Pins::new(p);
        if pins.root.exists() {
            left.push(format!("the pins under {}", pins.root.display()));
        }
        for (_, old) in pins.older_layouts() {
            if old.has_registrations() {
                left.push(format!("the pins under {}", old.root.display()));
            }
        }
    }
    left
}

/// GET /healthz: what the last pass found.
fn serve(server: tiny_http::Server, health: Arc<Mutex<(u16, String)>>) {
    std::thread::spawn(move || {
        for req in server.incoming_requests() {
            let (status, body) = match req.url().split('?').next().unwrap_or("") {
                "/healthz" => health.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                _ => (404, "not found: try /healthz (uninstalling: no /metrics)\n".to_string()),
            };
            let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"text/plain; charset=utf-8"[..])
                .expect("a valid header");
            let _ = req.respond(tiny_http::Response::from_string(body).with_status_code(status).with_header(header));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_only_while_the_marker_exists() {
        let dir = std::env::temp_dir().join(format!("ebpf-masq-held-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(held(&dir), None);
        fs::write(dir.join(MARKER), "x").unwrap();
        let why = held(&dir).unwrap();
        assert!(why.contains(MARKER) && why.contains("--uninstall"), "{why}");
        // The runtimes never read it as a network config.
        assert!(!install::is_conf_name(MARKER));
        fs::remove_dir_all(&dir).unwrap();
    }
}
