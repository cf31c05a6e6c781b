//! `ebpf-masq agent`: the DaemonSet's main process. It puts the plugin on the
//! node (binary, chained entry, data plane) and keeps it there:
//!
//! - the CNI conf dir is watched: when the main plugin's agent rewrites its
//!   conflist without our entry (Calico, Flannel on every restart), it is chained
//!   again; a conflist that is already right is never written;
//! - the config file is watched, as kubelet updates a ConfigMap volume (an atomic
//!   swap of the `..data` symlink): a valid update is applied to the node and to
//!   the chained entry; an invalid one changes nothing, is logged once naming the
//!   key, and shows in `/healthz` and the `ebpf_masq_agent_config_valid` metric;
//! - with --ip-masq-agent, ip-masq-agent's ConfigMap file is read as ip-masq-agent
//!   reads it (its defaults when the file is absent) and kept in the chained entry
//!   as `ipMasqAgent`: its CIDRs are unioned with the network's nonMasqueradeCIDRs,
//!   its masqLinkLocal/masqLinkLocalIPv6 replace the network's; it is watched like
//!   --conf and read again at least every resyncInterval (a bad file: as a bad --conf);
//! - pods whose ADD never reached ebpf-masq (started before the agent chained it,
//!   or while the main plugin's conflist was without our entry) are found in
//!   libcni's result cache (--cni-cache-dir) and registered as their ADD would
//!   have registered them: at start, on a cache change and every RECHECK; /healthz
//!   is 503 until the first pass has registered every one of them;
//! - registrations whose host veth is gone are removed on a timer, as CNI GC would;
//! - `/metrics` (the node's counters and the agent's own) and `/healthz` (200 when
//!   the data plane and the chained entry are in place, 503 with the reason) are
//!   served on `--metrics-listen` (tiny_http);
//! - SIGTERM or SIGINT: exit 0 leaving data plane and chain in place, so a rolling
//!   update of the DaemonSet does not interrupt a single flow.
//!
//! File events come from inotify through the notify crate; a periodic check
//! (every `RECHECK`) backs it up, so a missed event costs seconds, never the chain.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, Mutex,
    },
    time::{Duration, Instant},
};

use clap::Args;
use notify::{RecursiveMode, Watcher};
use serde_json::{Map, Value};

use ebpf_masq_core::{bpf::loader::Pins, config::{self, NetConf}, error::{code, Error, Result}, logging, node};

use super::{install, memlimit, metrics, natlog};

mod reload;
mod uninstall;

use reload::{apply_node, reload_config};

/// Checks run this often even without a file event.
const RECHECK: Duration = Duration::from_secs(10);
/// Events closer together than this are handled once (an editor's or kubelet's
/// several renames, the main plugin writing a file in steps).
const SETTLE: Duration = Duration::from_millis(300);

pub const LONG_HELP: &str = "\
The DaemonSet's main process. At start it copies the binary into --cni-bin-dir,
chains ebpf-masq into the primary network config of --cni-conf-dir (as `install
--conf`) and reconciles the node to the config (as `apply --conf`). Then:

 - when the conflist is rewritten without the ebpf-masq entry (or with another
   one), it chains it again within seconds; a conflist that is already right is
   never written, so it cannot loop with the main plugin's agent;
 - when --conf changes (kubelet swaps a ConfigMap volume's ..data symlink), the
   new config is validated: valid, it is applied to the node and to the chained
   entry; invalid, the config in force stays, one log line names the key, and
   /healthz and ebpf_masq_agent_config_valid report it. Nothing is half-applied;
 - with --ip-masq-agent (or --ip-masq-agent-config FILE), ip-masq-agent's
   ConfigMap file (default /etc/config/ip-masq-agent, YAML or JSON) is applied
   too: its nonMasqueradeCIDRs are never masqueraded (in addition to the
   network's own nonMasqueradeCIDRs), its masqLinkLocal/masqLinkLocalIPv6 decide
   link-local (replacing the network's); with no file, ip-masq-agent's defaults
   (RFC 1918; with --ip-masq-agent-all-reserved-ranges every reserved range).
   It is read again on a change and at least every resyncInterval; an invalid
   file is refused as an invalid --conf is (the config in force stays);
 - pods of the chained network that ebpf-masq never saw an ADD of (started
   before the agent, or while the conflist was without our entry) are read from
   libcni's result cache (--cni-cache-dir, where containerd, CRI-O and cnitool
   keep every ADD's result) and registered as their ADD would have registered
   them: at start, when the cache changes and every 10 s;
 - every --gc-interval seconds, registrations whose host veth is gone are removed
   (pods deleted while the node was down, or a DEL that was lost);
 - with --metrics-listen ADDR:PORT (numeric), GET /metrics serves the node's
   counters and the agent's, GET /healthz answers 200 when the data plane and
   the chained entry are in place and every pod found in the cache is
   registered, and 503 with the reason otherwise.

SIGTERM or SIGINT: exit 0, leaving the data plane and the chain in place.
Logs go to stderr (the container's log).

With --uninstall (what `ebpf-masq manifest --uninstall` runs on every node) it
takes ebpf-masq off the node instead, as `ebpf-masq uninstall` does: every
ebpf-masq entry of --cni-conf-dir (install's backup restored when the file is
untouched), the binary in --cni-bin-dir, the attached programs and the pins
(--pin-path, else the chained entry's pinPath). It first writes
<cni-conf-dir>/.ebpf-masq-uninstall: an agent still running on the node holds
off while that file exists (chains nothing, applies nothing; its /healthz is 503
saying why), so it cannot chain the entry again. Then it takes off again
whatever comes back, and /healthz answers 200 once nothing is left (503 listing
what is); it is served on --metrics-listen as soon as that port is free (an
agent still running holds it: not ready until that agent is gone). SIGTERM
removes the file and exits 0. --conf is not read.";

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[arg(long, required_unless_present = "uninstall",
          help = "the ebpf-masq plugin config (the same file as install --conf and apply --conf)")]
    pub conf: Option<PathBuf>,
    #[arg(long, help = "the node's CNI network config directory, e.g. /host/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    #[arg(long, help = "the node's CNI plugin directory, e.g. /host/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    #[arg(long, value_name = "FILE", help = "chain into this file of --cni-conf-dir, not the first by name")]
    pub conflist: Option<String>,
    #[arg(long, value_name = "ADDR:PORT", help = "serve /metrics and /healthz here (numeric, e.g. 0.0.0.0:9436)")]
    pub metrics_listen: Option<String>,
    #[arg(long, value_name = "DIR", default_value = config::cni_cache::DEFAULT_CNI_CACHE_DIR,
          help = "libcni's cache directory (its results/ holds every ADD's result), e.g. /host/var/lib/cni")]
    pub cni_cache_dir: PathBuf,
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86400),
          help = "remove registrations whose veth is gone this often")]
    pub gc_interval: u64,
    #[arg(long, help = "apply ip-masq-agent's ConfigMap file (--ip-masq-agent-config) as the network's non-masquerade list")]
    pub ip_masq_agent: bool,
    #[arg(long, value_name = "FILE",
          help = "ip-masq-agent's config file [default: /etc/config/ip-masq-agent]; naming it turns --ip-masq-agent on")]
    pub ip_masq_agent_config: Option<PathBuf>,
    #[arg(long, help = "as ip-masq-agent's --nomasq-all-reserved-ranges: its default list holds every reserved IPv4 range, not only RFC 1918")]
    pub ip_masq_agent_all_reserved_ranges: bool,
    #[arg(long, help = "take ebpf-masq off the node instead, and keep it off until SIGTERM (see below)")]
    pub uninstall: bool,
    #[arg(long, value_name = "DIR", requires = "uninstall",
          help = "with --uninstall: bpffs directory of the pins [default: pinPath of the chained entry, else /sys/fs/bpf/ebpf-masq]")]
    pub pin_path: Option<PathBuf>,
}

impl AgentArgs {
    /// --conf (clap requires it but with --uninstall, which never reads it).
    fn conf(&self) -> &Path {
        self.conf.as_deref().unwrap_or(Path::new(""))
    }

    /// The ip-masq-agent file to apply, when that is on (absolute: it is kept in the entry).
    fn ip_masq_agent_file(&self) -> Option<PathBuf> {
        if !self.ip_masq_agent && self.ip_masq_agent_config.is_none() {
            return None;
        }
        let p = self.ip_masq_agent_config.clone().unwrap_or_else(|| PathBuf::from(config::IP_MASQ_AGENT_DEFAULT_PATH));
        Some(std::path::absolute(&p).unwrap_or(p))
    }
}

/// What a config in force (or a refused one) was made from: the --conf bytes and,
/// with --ip-masq-agent, ip-masq-agent's file's (None inside: the file is absent).
#[derive(Debug, Clone, Default, PartialEq)]
struct Input {
    conf: Vec<u8>,
    ip_masq_agent: Option<Option<Vec<u8>>>,
}

/// What the agent knows; read by the HTTP thread.
#[derive(Debug, Default)]
struct State {
    /// The config in force: what it was made from, parsed, and its chained entry.
    in_force: Option<(Input, NetConf, Map<String, Value>)>,
    /// What the last update that was refused was made from, and why.
    rejected: Option<(Input, String)>,
    /// ip-masq-agent's resyncInterval in force: the file is read again at least this often.
    resync: Option<Duration>,
    /// Why the data plane is not in place (None: it is).
    data_plane: Option<String>,
    /// Why the chained entry is not in place (None: it is).
    chain: Option<String>,
    /// The binary was copied into --cni-bin-dir (done with the first chaining).
    binary_installed: bool,
    reloads: u64,
    rejections: u64,
    rechains: u64,
    gc_removed: u64,
    /// A pass over the CNI cache has run with the config in force (readiness waits for it).
    discovered: bool,
    /// Why pods found in the cache are not registered (None: every one is).
    discovery: Option<String>,
    /// Pods registered from the cache since the agent started.
    pods_found: u64,
    /// Cache files that are not libcni's (told once each, then skipped while unchanged).
    bad_cache_files: std::collections::HashSet<node::discover::FileSeen>,
    /// Why the agent holds off (an uninstall is under way on the node); None: it does not.
    held: Option<String>,
}

impl State {
    fn pins(&self) -> Option<Pins> {
        self.in_force.as_ref().map(|(_, c, _)| Pins::new(&c.masq.pin_path))
    }

    fn problems(&self) -> Vec<String> {
        let mut p: Vec<String> = self.held.iter().cloned().collect();
        if self.in_force.is_none() {
            p.push(match &self.rejected {
                Some((_, why)) => format!("no valid config: {why}"),
                None => "no config applied yet".to_string(),
            });
        }
        p.extend(self.data_plane.iter().map(|d| format!("data plane: {d}")));
        p.extend(self.chain.iter().map(|c| format!("chain: {c}")));
        if self.in_force.is_some() && !self.discovered {
            p.push("pods: the CNI cache has not been read yet".into());
        }
        p.extend(self.discovery.iter().map(|d| format!("pods: {d}")));
        p
    }

    /// `/healthz`: (status, body).
    fn health(&self) -> (u16, String) {
        let problems = self.problems();
        let mut body = if problems.is_empty() { "ok\n".to_string() } else { problems.join("\n") + "\n" };
        if let Some((_, why)) = self.rejected.as_ref().filter(|_| self.in_force.is_some()) {
            body.push_str(&format!("config update rejected (the previous config stays in force): {why}\n"));
        }
        (if problems.is_empty() { 200 } else { 503 }, body)
    }

    /// The agent's own series, appended to the node's.
    fn render(&self) -> String {
        let valid = u8::from(self.rejected.is_none() && self.in_force.is_some());
        let healthy = u8::from(self.problems().is_empty());
        format!(
            "# HELP ebpf_masq_agent_config_valid 1 when the latest config file was applied, 0 when it was refused (the previous one stays in force).\n\
             # TYPE ebpf_masq_agent_config_valid gauge\nebpf_masq_agent_config_valid {valid}\n\
             # HELP ebpf_masq_agent_healthy 1 when the data plane and the chained entry are in place (what /healthz says).\n\
             # TYPE ebpf_masq_agent_healthy gauge\nebpf_masq_agent_healthy {healthy}\n\
             # HELP ebpf_masq_agent_config_reloads_total Config updates applied since the agent started.\n\
             # TYPE ebpf_masq_agent_config_reloads_total counter\nebpf_masq_agent_config_reloads_total {}\n\
             # HELP ebpf_masq_agent_config_rejections_total Config updates refused since the agent started.\n\
             # TYPE ebpf_masq_agent_config_rejections_total counter\nebpf_masq_agent_config_rejections_total {}\n\
             # HELP ebpf_masq_agent_rechains_total Times the agent wrote the chained entry back into the CNI config.\n\
             # TYPE ebpf_masq_agent_rechains_total counter\nebpf_masq_agent_rechains_total {}\n\
             # HELP ebpf_masq_agent_gc_removed_total Registrations removed because their veth was gone.\n\
             # TYPE ebpf_masq_agent_gc_removed_total counter\nebpf_masq_agent_gc_removed_total {}\n\
             # HELP ebpf_masq_agent_pods_found_total Pods whose ADD never reached ebpf-masq, registered from the runtime's CNI cache.\n\
             # TYPE ebpf_masq_agent_pods_found_total counter\nebpf_masq_agent_pods_found_total {}\n\
             # HELP ebpf_masq_agent_cni_cache_files_skipped Files of the CNI cache that are not libcni's results (skipped).\n\
             # TYPE ebpf_masq_agent_cni_cache_files_skipped gauge\nebpf_masq_agent_cni_cache_files_skipped {}\n\
             # HELP ebpf_masq_agent_natlog_configured 1 when the config in force has natLog: the agent runs its exporter.\n\
             # TYPE ebpf_masq_agent_natlog_configured gauge\nebpf_masq_agent_natlog_configured {}\n",
            self.reloads,
            self.rejections,
            self.rechains,
            self.gc_removed,
            self.pods_found,
            self.bad_cache_files.len(),
            u8::from(self.in_force.as_ref().is_some_and(|(_, c, _)| c.masq.nat_log.is_some()))
        )
    }
}

pub fn main(a: &AgentArgs) -> Result<()> {
    if a.uninstall {
        return uninstall::main(a);
    }
    logging::init_stderr(log::LevelFilter::Info);
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&term))
            .map_err(|e| Error::new(code::IO_FAILURE, format!("install the signal handler: {e}")))?;
    }
    let state = Arc::new(Mutex::new(State::default()));
    if let Some(addr) = &a.metrics_listen {
        serve(addr, Arc::clone(&state))?;
    }

    // Watch the directories: a ConfigMap update replaces symlinks, a main plugin
    // replaces its file; the watched inode of a file would go stale.
    let (tx, rx) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if ev.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(|e| Error::new(code::IO_FAILURE, format!("watch files: {e}")))?;
    let conf_parent = a.conf().parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for dir in [&a.cni_conf_dir, &conf_parent.to_path_buf()] {
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| Error::new(code::IO_FAILURE, format!("watch {}: {e}", dir.display())))?;
    }
    // A new cache entry is a pod whose ADD may not have reached us: read it at once.
    // The directory appears with the node's first pod; until then RECHECK covers it.
    let results_dir = a.cni_cache_dir.join("results");
    let mut watching_results = watcher.watch(&results_dir, RecursiveMode::NonRecursive).is_ok();
    // ip-masq-agent's ConfigMap may be mounted later or not at all (its defaults
    // apply): a directory that cannot be watched is polled (resyncInterval, RECHECK).
    if let Some(dir) = a.ip_masq_agent_file().as_deref().and_then(Path::parent).filter(|d| *d != conf_parent) {
        if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            log::warn!("agent=ip-masq-agent watch={} err={e:?} (read every resyncInterval instead)", dir.display());
        }
    }
    log::info!(
        "agent=start conf={} cni_conf_dir={} cni_bin_dir={} metrics={} ip_masq_agent={}",
        a.conf().display(),
        a.cni_conf_dir.display(),
        a.cni_bin_dir.display(),
        a.metrics_listen.as_deref().unwrap_or("-"),
        a.ip_masq_agent_file().map(|p| p.display().to_string()).unwrap_or_else(|| "-".into())
    );

    let gc_every = Duration::from_secs(a.gc_interval);
    let mut last_gc = Instant::now();
    let mut natlog: Option<natlog::export::Running> = None;
    while !term.load(Ordering::Relaxed) {
        // `agent --uninstall` is taking the node off: nothing is chained or applied again.
        let held = uninstall::held(&a.cni_conf_dir);
        state.lock().unwrap_or_else(|p| p.into_inner()).held.clone_from(&held);
        if held.is_none() {
            reconcile(a, &state);
            discover(a, &state);
            if !watching_results {
                watching_results = watcher.watch(&results_dir, RecursiveMode::NonRecursive).is_ok();
            }
            keep_natlog(&mut natlog, &state);
            if last_gc.elapsed() >= gc_every {
                gc(&state);
                last_gc = Instant::now();
            }
        } else if let Some(n) = natlog.take() {
            log::info!("agent=natlog action=stop why=uninstall");
            n.stop(); // its pins are going
        }
        // Sleep until an event, the next check (sooner with a short resyncInterval)
        // or the next GC; wake for signals.
        let resync = state.lock().unwrap_or_else(|p| p.into_inner()).resync;
        let check = resync.map_or(RECHECK, |r| r.clamp(Duration::from_secs(1), RECHECK));
        let wake = Instant::now() + check.min(gc_every.saturating_sub(last_gc.elapsed()));
        while !term.load(Ordering::Relaxed) && Instant::now() < wake {
            if rx.recv_timeout(Duration::from_millis(250)).is_ok() {
                std::thread::sleep(SETTLE);
                while rx.try_recv().is_ok() {}
                break;
            }
        }
    }
    drop(watcher);
    if let Some(n) = natlog.take() {
        n.stop();
    }
    log::info!("agent=stop reason=signal data_plane=kept chain=kept");
    Ok(())
}

/// The NAT session log's exporter, as the config in force says (`natLog`):
/// started, restarted on a change of the key or of pinPath, stopped when the key goes.
fn keep_natlog(running: &mut Option<natlog::export::Running>, state: &Mutex<State>) {
    let want = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        st.in_force.as_ref().and_then(|(_, c, _)| c.masq.nat_log.clone().map(|l| (c.masq.pin_path.clone(), l)))
    };
    let same = match (&*running, &want) {
        (Some(r), Some((pin, l))) => r.pin_path == *pin && r.conf == *l,
        (None, None) => true,
        _ => false,
    };
    if same {
        return;
    }
    if let Some(r) = running.take() {
        log::info!("agent=natlog action=stop");
        r.stop();
    }
    if let Some((pin, l)) = want {
        log::info!("agent=natlog action=start file={:?} ipfix={:?}", l.file, l.ipfix);
        *running = Some(natlog::export::Running::start(&pin, &l));
    }
}

/// One pass: the config file, the data plane, the chained entry.
fn reconcile(a: &AgentArgs, state: &Mutex<State>) {
    let reloaded = reload_config(a, state);
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_, conf, entry)) = st.in_force.clone() else {
        return;
    };
    let pins = Pins::new(&conf.masq.pin_path);
    st.data_plane = match node::data_plane_problem(&pins, &conf.masq) {
        Ok(p) => p,
        Err(e) => Some(e.msg),
    };
    if let Some(problem) = &st.data_plane {
        // Detached by someone, or an uplink came up late: reconcile again.
        log::warn!("agent=data-plane problem={problem:?} action=apply");
        match apply_node(&conf) {
            Ok(()) => st.data_plane = None,
            Err(e) => log::error!("agent=data-plane result=error err={:?}", e.msg),
        }
    }
    let chained_before = st.binary_installed;
    let bin_dir = (!chained_before).then_some(a.cni_bin_dir.as_path());
    let problem = match install::chain_problem(&a.cni_conf_dir, a.conflist.as_deref(), &entry) {
        Ok(p) => p,
        Err(e) => Some(e.msg),
    };
    if problem.is_none() && bin_dir.is_none() {
        st.chain = None;
        return;
    }
    match install::put_on_node(bin_dir, &a.cni_conf_dir, a.conflist.as_deref(), &entry, false) {
        Ok(r) => {
            st.binary_installed = true;
            if r.changed {
                if chained_before && !reloaded {
                    st.rechains += 1;
                }
                for line in &r.lines {
                    log::info!("agent=chain why={:?} {line}", problem.as_deref().unwrap_or("start"));
                }
            }
            st.chain = None;
        }
        Err(e) => {
            if st.chain.as_deref() != Some(e.msg.as_str()) {
                log::error!("agent=chain result=error err={:?} (retried on the next change)", e.msg);
            }
            st.chain = Some(e.msg);
        }
    }
}

/// One pass over libcni's result cache: every pod of the chained network that no
/// registration has is registered (node::discover). Problems are logged when they
/// change and kept for /healthz.
fn discover(a: &AgentArgs, state: &Mutex<State>) {
    let (pins, entry, skip, first) = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((_, conf, entry)) = st.in_force.as_ref() else {
            return;
        };
        if st.data_plane.is_some() {
            return;
        }
        (Pins::new(&conf.masq.pin_path), entry.clone(), st.bad_cache_files.clone(), !st.discovered)
    };
    let network = match install::network_of(&a.cni_conf_dir, a.conflist.as_deref()) {
        Ok(Some(n)) => n,
        Ok(None) => {
            // No network yet, so no pod of it either.
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.discovered = true;
            st.discovery = None;
            return;
        }
        Err(e) => {
            note_discovery(state, Some(format!("the network's name: {}", e.msg)));
            return;
        }
    };
    let (name, version) = network;
    let pass = match node::discover::discover(&pins, &a.cni_cache_dir, &name, &version, &entry, &skip, first) {
        Ok(p) => p,
        Err(e) => {
            note_discovery(state, Some(format!("read the CNI cache: {}", e.msg)));
            return;
        }
    };
    for ((file, ..), why) in &pass.bad_files {
        log::warn!("agent=discover file={} skipped={why:?} (read again only once it changes)", file.display());
    }
    for who in &pass.registered {
        log::info!("agent=discover registered={who} why=no-add-seen network={name}");
    }
    {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        // A bad file rewritten or removed since is forgotten (it is read again if still there).
        st.bad_cache_files.retain(|f| node::discover::seen(&f.0) == *f);
        st.bad_cache_files.extend(pass.bad_files.into_iter().map(|(f, _)| f));
        st.pods_found += pass.registered.len() as u64;
    }
    let problem = (!pass.failed.is_empty())
        .then(|| format!("{} found in the CNI cache but not registered: {}", pass.failed.len(), pass.failed.join("; ")));
    note_discovery(state, problem);
}

fn note_discovery(state: &Mutex<State>, problem: Option<String>) {
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    if problem != st.discovery {
        match &problem {
            Some(p) => log::error!("agent=discover result=error err={p:?} (retried every check)"),
            None if st.discovery.is_some() => log::info!("agent=discover result=ok"),
            None => {}
        }
    }
    st.discovery = problem;
    st.discovered = true;
}

fn gc(state: &Mutex<State>) {
    let Some(pins) = state.lock().unwrap_or_else(|p| p.into_inner()).pins() else {
        return;
    };
    match node::remove_stale(&pins) {
        Ok(removed) => {
            for r in &removed {
                log::info!("agent=gc removed={r} why=veth-gone");
            }
            state.lock().unwrap_or_else(|p| p.into_inner()).gc_removed += removed.len() as u64;
        }
        Err(e) => log::error!("agent=gc result=error err={:?}", e.msg),
    }
}

/// Serve /metrics and /healthz on `addr` in a thread of its own.
fn serve(addr: &str, state: Arc<Mutex<State>>) -> Result<()> {
    let sock: std::net::SocketAddr = addr.parse().map_err(|_| {
        Error::new(code::INVALID_CONFIG, format!("--metrics-listen {addr:?}: expected a numeric ADDR:PORT, e.g. 0.0.0.0:9436"))
    })?;
    let server = tiny_http::Server::http(sock)
        .map_err(|e| Error::new(code::IO_FAILURE, format!("--metrics-listen {addr}: {e}")))?;
    std::thread::spawn(move || {
        for req in server.incoming_requests() {
            let (status, body, ctype) = answer(req.method(), req.url(), &state);
            let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()).expect("a valid header");
            let _ = req.respond(tiny_http::Response::from_string(body).with_status_code(status).with_header(header));
        }
    });
    Ok(())
}

fn answer(method: &tiny_http::Method, url: &str, state: &Mutex<State>) -> (u16, String, &'static str) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
        return (405, "GET only\n".into(), TEXT);
    }
    match url.split('?').next().unwrap_or("") {
        "/healthz" => {
            let (status, body) = state.lock().unwrap_or_else(|p| p.into_inner()).health();
            (status, body, TEXT)
        }
        "/metrics" => {
            let (pins, own) = {
                let st = state.lock().unwrap_or_else(|p| p.into_inner());
                (st.pins(), st.render())
            };
            let node = match pins.map(|p| metrics::collect(&p).map(|s| metrics::render(&s))) {
                Some(Ok(text)) => text,
                Some(Err(e)) => format!("# node counters unavailable: {}\n", e.msg.replace('\n', " ")),
                None => "# node counters unavailable: no config in force\n".into(),
            };
            (200, node + &own, "text/plain; version=0.0.4; charset=utf-8")
        }
        _ => (404, "not found: try /metrics or /healthz\n".into(), TEXT),
    }
}

#[cfg(test)]
mod tests;
