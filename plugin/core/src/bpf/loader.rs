//! Load the data plane once per node, pin it, and attach from the pins.
//!
//! Layout under `<pinPath>/v<LAYOUT_VERSION>/`:
//!   maps/<name>        every map (LIBBPF_PIN_BY_NAME), shared by both objects
//!   progs/<name>       the three verified programs
//!   links/<ifindex>-<hook>  our TCX link on one interface hook (ingress/egress)
//! A new layout version gets a new directory, so an incompatible pinned map is
//! never reused by a newer binary.

use std::{
    fs,
    io::ErrorKind,
    path::{Path, PathBuf},
};

use aya::{
    programs::{
        links::{FdLink, LinkOrder, PinnedLink},
        tc::{self, NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle},
        Link, Program, SchedClassifier, TcAttachType,
    },
    EbpfLoader,
};

use super::abi;
pub use super::pins::{tc_dir_name, Pins, ALL_PROGS, PROG_UPLINK_EGRESS, PROG_UPLINK_INGRESS, PROG_VETH_INGRESS, TEST_LAYOUT_ENV};
use crate::error::{code, Context, Error, Result};

static VETH_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/veth.o"));
static UPLINK_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/uplink.o"));
static PLACEHOLDER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/placeholder.o"));

/// tc filter identity of every tc (fallback) attachment we make: one fixed
/// priority and handle, so a re-attach replaces in place and a detach removes exactly ours.
pub const TC_PRIORITY: u16 = 0xc0de;
pub const TC_HANDLE: TcHandle = TcHandle::new(0, 0xe5);

/// The loader for our objects. `EbpfLoader::new()` parses the kernel's BTF (~25 ms
/// of CPU here) for CO-RE relocations, which our programs do not use (hence
/// `.btf(None)`): a first load makes one and loads every object through it.
pub fn bare_loader() -> EbpfLoader<'static> {
    let mut loader = EbpfLoader::new();
    loader.btf(None);
    loader
}

/// Load, verify and pin both objects unless already pinned. The caller holds the
/// node lock, so two first ADDs never load twice.
pub fn ensure_loaded(pins: &Pins, nat_max_entries: u32) -> Result<()> {
    if pins.loaded() {
        return Ok(()); // (before making a loader: a warm ADD never pays its BTF parse)
    }
    ensure_loaded_with(pins, nat_max_entries, bare_loader())
}

/// `ensure_loaded` through `loader` (from `bare_loader`, maybe used for placeholders already).
pub fn ensure_loaded_with(pins: &Pins, nat_max_entries: u32, loader: EbpfLoader<'_>) -> Result<()> {
    if pins.loaded() {
        return Ok(());
    }
    let mut loader = loader; // (by value: it may then borrow this function's globals below)
    ensure_bpffs(&pins.base)?;
    for dir in [pins.maps_dir(), pins.progs_dir()] {
        fs::create_dir_all(&dir).bpf_ctx(format!("create {}", dir.display()))?;
    }
    let objects: [(&[u8], &[&str]); 2] =
        [(VETH_OBJ, &[PROG_VETH_INGRESS]), (UPLINK_OBJ, &[PROG_UPLINK_EGRESS, PROG_UPLINK_INGRESS])];
    // The shard seed and count are built into the programs: the node's, if a load
    // before this one chose them (the maps, and the pairs in them, are kept).
    let shard = super::nat::recorded_params(pins).unwrap_or_else(|| super::nat::ShardParams {
        seed: super::nat::random_seed(),
        shards: abi::shards_for(nat_max_entries),
    });
    let mask = shard.shards - 1;
    loader
        .override_global("nat_seed", &shard.seed, true)
        .override_global("nat_shard_mask", &mask, true)
        .default_map_pin_directory(pins.maps_dir())
        .map_max_entries(abi::MAP_NAT4_REV, nat_max_entries)
        .map_max_entries(abi::MAP_NAT6_REV, nat_max_entries)
        // LRU maps are preallocated whole: their size is capped (abi::BIND_ENTRIES_MAX...).
        .map_max_entries(abi::MAP_NAT4_BIND, nat_max_entries.min(abi::BIND_ENTRIES_MAX))
        .map_max_entries(abi::MAP_NAT6_BIND, nat_max_entries.min(abi::BIND_ENTRIES_MAX))
        .map_max_entries(abi::MAP_NAT4_OPEN, nat_max_entries.min(abi::OPEN_ENTRIES_MAX))
        .map_max_entries(abi::MAP_NAT6_OPEN, nat_max_entries.min(abi::OPEN_ENTRIES_MAX))
        .map_max_entries(abi::MAP_NAT4_PERMIT, nat_max_entries.min(abi::OPEN_ENTRIES_MAX))
        .map_max_entries(abi::MAP_NAT6_PERMIT, nat_max_entries.min(abi::OPEN_ENTRIES_MAX));
    // Objects one after the other: the first creates and pins the maps the second reuses.
    let mut loaded = Vec::new();
    for (obj, progs) in objects {
        loaded.push((loader.load(obj).bpf_ctx("load BPF object")?, progs));
    }
    super::nat::record_params(pins, shard)?;
    // Verification is most of a first load (the uplink egress program alone takes
    // ~80 ms): the programs are verified side by side (verify_groups). The
    // forward shards are put in meanwhile (a thread per family: each waits for
    // one RCU grace period, see fill_shards). Programs are pinned only once both
    // are done: a pinned program means a complete data plane to every later process.
    let mut jobs: Vec<(&str, &mut Program)> = Vec::new();
    for (ebpf, progs) in loaded.iter_mut() {
        let before = jobs.len();
        jobs.extend(ebpf.programs_mut().filter(|(name, _)| progs.contains(name)));
        if jobs.len() - before != progs.len() {
            return Err(Error::bpf(format!("programs {progs:?} missing from object")));
        }
    }
    std::thread::scope(|s| {
        let n = shard.shards;
        let fills = [
            s.spawn(move || super::nat::fill_shards::<super::nat::V4>(pins, n, nat_max_entries)),
            s.spawn(move || super::nat::fill_shards::<super::nat::V6>(pins, n, nat_max_entries)),
        ];
        let verified: Vec<_> = verify_groups(&mut jobs)
            .into_iter()
            .map(|group| s.spawn(move || group.into_iter().try_for_each(|(name, prog)| verify(name, prog))))
            .collect();
        let joined = |t: std::thread::ScopedJoinHandle<'_, Result<()>>| {
            t.join().unwrap_or_else(|_| Err(Error::bpf("load thread panicked")))
        };
        // Every thread is joined (the scope waits for the rest if one failed).
        let fill = fills.into_iter().try_for_each(joined);
        let verify = verified.into_iter().try_for_each(joined);
        fill.and(verify)
    })?;
    if let Some((_, prog)) = jobs.iter_mut().find(|(name, _)| *name == PROG_UPLINK_EGRESS) {
        let egress: &mut SchedClassifier = (&mut **prog).try_into().bpf_ctx(PROG_UPLINK_EGRESS)?;
        if let Err(e) = super::sweep::prime(egress) {
            log::warn!("{e}; the first new pair arms it instead");
        }
    }
    jobs.into_iter().try_for_each(|(name, prog)| pin_prog(pins, name, prog))
}

/// The verifier threads of a first load: one per program where the machine has a
/// CPU for each; with fewer CPUs the uplink egress program (the longest: ~80 ms
/// here, the two others ~55 ms together) gets one to itself and the others share
/// another, so the longest job does not share its CPU with them (on 2 CPUs: first
/// ADD ~142 -> ~129 ms).
fn verify_groups<'a, 'b>(jobs: &'a mut [(&'b str, &'b mut Program)]) -> Vec<Vec<(&'b str, &'a mut Program)>> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut groups: Vec<Vec<(&'b str, &'a mut Program)>> = Vec::new();
    let mut shared = Vec::new();
    for (name, prog) in jobs.iter_mut() {
        if cpus >= 3 || *name == PROG_UPLINK_EGRESS {
            groups.push(vec![(*name, &mut **prog)]);
        } else {
            shared.push((*name, &mut **prog));
        }
    }
    if !shared.is_empty() {
        groups.push(shared);
    }
    groups
}

/// Load (verify) one program.
fn verify(name: &str, prog: &mut Program) -> Result<()> {
    let prog: &mut SchedClassifier = prog.try_into().bpf_ctx(name)?;
    let t = std::time::Instant::now();
    prog.load().bpf_ctx(format!("verify {name}"))?;
    log::debug!("verified {name} in {:.1} ms", t.elapsed().as_secs_f64() * 1000.0);
    Ok(())
}

/// Pin one verified program, replacing a stale pin.
fn pin_prog(pins: &Pins, name: &str, prog: &mut Program) -> Result<()> {
    let prog: &mut SchedClassifier = prog.try_into().bpf_ctx(name)?;
    let pin = pins.prog(name);
    match fs::remove_file(&pin) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(Error::bpf_at(format!("remove stale {}", pin.display()), e)),
    }
    prog.pin(&pin).bpf_ctx(format!("pin {}", pin.display()))
}

/// bpffs must be mounted at or above the pin path; refuse to write pins into a
/// plain directory where they would silently not persist.
pub fn ensure_bpffs(base: &Path) -> Result<()> {
    let mut p = base.to_path_buf();
    loop {
        if p.exists() {
            let st = nix::sys::statfs::statfs(&p).bpf_ctx(format!("statfs {}", p.display()))?;
            if st.filesystem_type() != nix::sys::statfs::BPF_FS_MAGIC {
                return Err(Error::new(
                    code::INVALID_ENV,
                    format!("pinPath {} is not on a bpffs (mount -t bpf bpf /sys/fs/bpf)", base.display()),
                ));
            }
            return Ok(());
        }
        if !p.pop() {
            return Err(Error::new(code::INVALID_ENV, format!("pinPath {} has no existing parent", base.display())));
        }
    }
}


/// How a program is attached to an interface hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// A TCX link (kernel >= 6.6), pinned under `links/`: the hook runs it
    /// directly, without the tc classifier layer. Uplinks by default.
    Tcx,
    /// A tc clsact filter at our fixed priority/handle: pod veths by default,
    /// every hook on kernels without TCX or with `EBPF_MASQ_ATTACH=tc`.
    Tc,
}

/// Which hooks get TCX links: `EBPF_MASQ_ATTACH=tc` none (tc clsact filters
/// everywhere), `=tcx` all of them, unset the uplinks only (see `Hook`).
pub const ATTACH_ENV: &str = "EBPF_MASQ_ATTACH";

/// Whose hook a program goes on; it decides the default attach mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// An uplink: attached once per node and crossed by all of its traffic, the
    /// host's own too. TCX (~20 ns less per packet than a clsact filter here).
    Uplink,
    /// A pod's host-side veth: attached at every ADD. A tc clsact filter: a TCX
    /// attach waits for an RCU grace period (the kernel swaps the hook's program
    /// array, ~7 ms on this machine), which would cost each pod ADD more than the
    /// ~20 ns per packet it saves.
    PodVeth,
}

fn wants_tcx(hook: Hook) -> bool {
    match std::env::var(ATTACH_ENV).as_deref() {
        Ok("tc") => false,
        Ok("tcx") => true,
        _ => hook == Hook::Uplink,
    }
}

/// Attach the pinned program `prog` to `ifname` (in the calling thread's netns).
/// A TCX link, pinned at `links/<ifindex>-<hook>` so it outlives this process,
/// where `hook` wants one (an uplink, by default) and the kernel has TCX; else a
/// tc clsact filter. Already attached: nothing to do; an
/// older program on our link is replaced in place (no window without one). A
/// tc filter of ours found when the link is first made (an earlier version, or
/// the fallback) is removed, and a tc attach removes our link, so a packet never
/// meets the program twice. No verifier run happens here.
pub fn attach(pins: &Pins, prog: &str, ifname: &str, dir: TcAttachType, hook: Hook) -> Result<AttachMode> {
    let what = format!("attach {prog} to {ifname} {}", tc_dir_name(dir));
    let mut p = SchedClassifier::from_pin(pins.prog(prog))
        .bpf_ctx(format!("{what}: the pinned program"))?;
    if wants_tcx(hook) {
        match attach_tcx(pins, &mut p, ifname, dir, &what)? {
            Tcx::Attached => return Ok(AttachMode::Tcx),
            // A new link, or a new program on our link (the first load's
            // placeholder, an upgrade's older program): the hook may still have
            // a tc filter of ours (tc mode before, or an older layout's).
            Tcx::Created | Tcx::Swapped => {
                detach_tc(ifname, dir)?;
                return Ok(AttachMode::Tcx);
            }
            Tcx::Unsupported => log::info!("{what}: no TCX in this kernel, using a tc clsact filter"),
        }
    }
    attach_tc(&mut p, ifname, dir, &what)?;
    // A TCX link of ours from before (EBPF_MASQ_ATTACH changed since, or an
    // older layout's) would run it twice.
    if let Ok(ifindex) = nix::net::if_::if_nametoindex(ifname) {
        let older = pins.older_layouts().into_iter().map(|(_, old)| old.link(ifindex, dir));
        for pin in std::iter::once(pins.link(ifindex, dir)).chain(older) {
            remove_file_if_exists(&pin).bpf_ctx(format!("{what}: remove {}", pin.display()))?;
        }
    }
    Ok(AttachMode::Tc)
}

enum Tcx {
    /// Our link runs this program already.
    Attached,
    /// Our link ran another program; this one was swapped in.
    Swapped,
    Created,
    Unsupported,
}

fn attach_tcx(pins: &Pins, p: &mut SchedClassifier, ifname: &str, dir: TcAttachType, what: &str) -> Result<Tcx> {
    let ifindex = nix::net::if_::if_nametoindex(ifname).map_err(|e| Error::netlink(format!("{what}: {e}")))?;
    let prog_id = p.info().bpf_ctx(format!("{what}: program info"))?.id();
    let pin = pins.link(ifindex, dir);
    if !pin.exists() {
        adopt_older_link(pins, ifindex, dir, &pin).bpf_ctx(format!("{what}: adopt older link"))?;
    }
    if pin.exists() {
        if tcx_prog_ids(ifindex, dir).map_err(|e| Error::netlink(format!("{what}: query: {e}")))?.contains(&prog_id) {
            return Ok(Tcx::Attached);
        }
        // Our link with an older program: swap the program in place. A link whose
        // interface is gone cannot be updated: it is replaced.
        if let Ok(pinned) = PinnedLink::from_pin(&pin) {
            let fd: FdLink = pinned.into();
            if let Ok(link) = SchedClassifierLink::try_from(fd) {
                if let Ok(id) = p.attach_to_link(link) {
                    let _ = p.take_link(id); // dropping it closes our fd; the pin keeps the link
                    if tcx_prog_ids(ifindex, dir).map(|ids| ids.contains(&prog_id)).unwrap_or(false) {
                        return Ok(Tcx::Swapped);
                    }
                }
            }
        }
        remove_file_if_exists(&pin).bpf_ctx(format!("{what}: remove stale {}", pin.display()))?;
    }
    let dir_path = pins.links_dir();
    fs::create_dir_all(&dir_path).bpf_ctx(format!("create {}", dir_path.display()))?;
    let id = match p.attach_with_options(ifname, dir, TcAttachOptions::TcxOrder(LinkOrder::default())) {
        Ok(id) => id,
        Err(e) if has_errno(&e, &[libc::EINVAL, libc::EOPNOTSUPP]) => return Ok(Tcx::Unsupported),
        Err(e) => return Err(Error::netlink(format!("{what}: {e}"))),
    };
    let link = p.take_link(id).map_err(|e| Error::netlink(format!("{what}: {e}")))?;
    let fd = FdLink::try_from(link).bpf_ctx(what)?;
    // Dropping the unpinned link on an error here detaches it: nothing half-done.
    fd.pin(&pin).bpf_ctx(format!("{what}: pin {}", pin.display()))?;
    Ok(Tcx::Created)
}

/// An older layout's TCX link on this hook (a binary before an upgrade) becomes
/// ours: its pin moves to `pin`, and `attach_tcx` then swaps our program in (one
/// program on the hook throughout, no second link). Links of still older layouts
/// on the same hook are removed (detached).
fn adopt_older_link(pins: &Pins, ifindex: u32, dir: TcAttachType, pin: &Path) -> std::io::Result<()> {
    let mut adopted = false;
    for (_, old) in pins.older_layouts() {
        let old_pin = old.link(ifindex, dir);
        if !old_pin.exists() {
            continue;
        }
        if adopted {
            remove_file_if_exists(&old_pin)?;
        } else {
            fs::create_dir_all(pins.links_dir())?;
            fs::rename(&old_pin, pin)?;
            log::info!("adopted {} as {}", old_pin.display(), pin.display());
            adopted = true;
        }
    }
    Ok(())
}

/// True when an older layout has a TCX link on this hook (`adopt_older_link` takes it over).
fn older_link_exists(pins: &Pins, ifindex: u32, dir: TcAttachType) -> bool {
    pins.older_layouts().iter().any(|(_, old)| old.link(ifindex, dir).exists())
}

/// A placeholder program for one uplink hook, loaded (not verified yet): see `hold_uplink_hooks`.
pub struct Placeholder {
    ebpf: aya::Ebpf,
    ifname: String,
    dir: TcAttachType,
}

/// The placeholders `hold_uplink_hooks` needs: one per uplink hook that wants TCX
/// and has no link of ours (nor an older layout's, adopted at attach). Their
/// object is parsed by `loader` (no second parse of the kernel's BTF); best
/// effort, like the hold itself.
pub fn placeholders(pins: &Pins, uplinks: &[(u32, String)], loader: &mut EbpfLoader<'_>) -> Vec<Placeholder> {
    if !wants_tcx(Hook::Uplink) || ensure_bpffs(&pins.base).is_err() {
        return Vec::new(); // (ensure_loaded reports a pinPath off bpffs)
    }
    let mut out = Vec::new();
    for (ifindex, name) in uplinks {
        for dir in [TcAttachType::Egress, TcAttachType::Ingress] {
            if pins.link(*ifindex, dir).exists() || older_link_exists(pins, *ifindex, dir) {
                continue;
            }
            if let Ok(ebpf) = loader.load(PLACEHOLDER_OBJ) {
                out.push(Placeholder { ebpf, ifname: name.clone(), dir });
            }
        }
    }
    out
}

/// While a first load verifies the programs (~100 ms), hold each uplink hook
/// of `held` with a placeholder program that passes everything
/// (bpf/placeholder.c): a new TCX link waits for an RCU grace period (~7 ms
/// here), swapping the program of an existing link does not, so `attach` later
/// replaces it in place for free. Best effort: a hook without a placeholder is
/// simply attached the slow way. Returns the pins it made.
pub fn hold_uplink_hooks(pins: &Pins, held: Vec<Placeholder>) -> Vec<PathBuf> {
    // One thread a hook: their grace periods pass together.
    std::thread::scope(|s| {
        let threads: Vec<_> = held
            .into_iter()
            .map(|mut h| {
                s.spawn(move || {
                    let p: &mut SchedClassifier = h.ebpf.program_mut("masq_placeholder")?.try_into().ok()?;
                    p.load().ok()?;
                    let ifindex = nix::net::if_::if_nametoindex(h.ifname.as_str()).ok()?;
                    match attach_tcx(pins, p, &h.ifname, h.dir, "placeholder") {
                        Ok(Tcx::Created) => Some(pins.link(ifindex, h.dir)),
                        _ => None,
                    }
                })
            })
            .collect();
        threads.into_iter().filter_map(|t| t.join().ok().flatten()).collect()
    })
}

/// The tc fallback: a clsact filter at our fixed priority/handle, replaced in
/// place if it is there already, created otherwise. It outlives this process.
fn attach_tc(p: &mut SchedClassifier, ifname: &str, dir: TcAttachType, what: &str) -> Result<()> {
    match tc::qdisc_add_clsact(ifname) {
        Ok(()) => {}
        Err(tc::TcError::NetlinkError(e)) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(Error::netlink(format!("{what}: add clsact qdisc: {e}"))),
    }
    let existing = SchedClassifierLink::attached(ifname, dir, TC_PRIORITY, TC_HANDLE, None)
        .map_err(|e| Error::netlink(format!("{what}: {e}")))?;
    let id = match p.attach_to_link(existing) {
        Ok(id) => id,
        Err(_) => p
            .attach_with_options(
                ifname,
                dir,
                TcAttachOptions::Netlink(NlOptions { priority: TC_PRIORITY, handle: TC_HANDLE, classid: None }),
            )
            .map_err(|e| Error::netlink(format!("{what}: {e}")))?,
    };
    // The filter must outlive us: take the link out of the program and forget it
    // (its Drop would detach).
    let link = p.take_link(id).map_err(|e| Error::netlink(format!("{what}: {e}")))?;
    std::mem::forget(link);
    Ok(())
}

/// Take our program off one hook of the interface `ifindex`: its link pin goes
/// (which detaches the link), and with `ifname` (only when that name is still
/// this interface) our tc filter too. Whatever is already gone is success.
pub fn detach(pins: &Pins, ifindex: u32, ifname: Option<&str>, dir: TcAttachType) -> Result<()> {
    let pin = pins.link(ifindex, dir);
    remove_file_if_exists(&pin).bpf_ctx(format!("remove {}", pin.display()))?;
    match ifname {
        Some(name) => detach_tc(name, dir),
        None => Ok(()),
    }
}

/// Remove our tc filter from `ifname`. A missing interface, qdisc or filter is success.
fn detach_tc(ifname: &str, dir: TcAttachType) -> Result<()> {
    let link = match SchedClassifierLink::attached(ifname, dir, TC_PRIORITY, TC_HANDLE, None) {
        Ok(l) => l,
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) || e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::netlink(format!("detach from {ifname}: {e}"))),
    };
    match link.detach() {
        Ok(()) => Ok(()),
        Err(e) => {
            let msg = e.to_string();
            if is_not_found(&e) {
                Ok(())
            } else {
                Err(Error::netlink(format!("detach from {ifname} {}: {msg}", tc_dir_name(dir))))
            }
        }
    }
}

/// Is the pinned program `prog` running on this hook of `ifindex` (calling
/// thread's netns), as a TCX program or as our tc filter?
pub fn is_attached(pins: &Pins, prog: &str, ifindex: u32, dir: TcAttachType) -> Result<bool> {
    Ok(attachment(pins, prog, ifindex, dir)?.is_some())
}

/// How our program is attached to this hook of `ifindex`, if it is: the pinned
/// program `prog`, or the program on our pinned link there (an older one, until
/// the next attach replaces it), or our tc filter.
pub fn attachment(pins: &Pins, prog: &str, ifindex: u32, dir: TcAttachType) -> Result<Option<AttachMode>> {
    let id = SchedClassifier::from_pin(pins.prog(prog))
        .and_then(|p| p.info())
        .bpf_ctx(format!("{prog}: pinned program"))?
        .id();
    let on_our_link = PinnedLink::from_pin(pins.link(ifindex, dir))
        .ok()
        .and_then(|l| FdLink::from(l).info().ok())
        .map(|i| i.program_id());
    match tcx_prog_ids(ifindex, dir) {
        Ok(ids) if ids.contains(&id) || on_our_link.is_some_and(|l| ids.contains(&l)) => {
            return Ok(Some(AttachMode::Tcx))
        }
        Ok(_) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENODEV)) => {}
        Err(e) => return Err(Error::netlink(format!("query TCX programs of ifindex {ifindex}: {e}"))),
    }
    Ok(crate::netlink::has_tc_filter(ifindex, dir == TcAttachType::Ingress, TC_PRIORITY)?.then_some(AttachMode::Tc))
}

impl AttachMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Tcx => "tcx",
            AttachMode::Tc => "tc",
        }
    }
}

/// The programs on the TCX hook of `ifindex`, in run order (BPF_PROG_QUERY).
pub fn tcx_prog_ids(ifindex: u32, dir: TcAttachType) -> std::io::Result<Vec<u32>> {
    super::sys::tcx_prog_ids(ifindex, dir == TcAttachType::Ingress)
}

fn remove_file_if_exists(p: &Path) -> std::io::Result<()> {
    match fs::remove_file(p) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn has_errno(e: &(dyn std::error::Error + 'static), errnos: &[i32]) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.raw_os_error().map(|n| errnos.contains(&n)).unwrap_or(false) {
                return true;
            }
        }
        src = s.source();
    }
    false
}

fn is_not_found(e: &aya::programs::ProgramError) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::EINVAL)) {
                return true;
            }
        }
        src = s.source();
    }
    // aya's netlink error wraps the errno in its Display.
    let s = e.to_string();
    s.contains("No such file") || s.contains("No such device") || s.contains("os error 2")
}

/// Remove every pin under `<pinPath>/v<N>` (uninstall, tests).
/// Remove an older layout's pins (after `crate::node::adopt` adopted it): its maps
/// and programs go once nothing attached uses them, its remaining links detach.
pub fn remove_layout(old: &Pins) -> Result<()> {
    fs::remove_dir_all(&old.root).bpf_ctx(format!("remove {}", old.root.display()))
}

pub fn remove_pins(pins: &Pins) -> Result<()> {
    match fs::remove_dir_all(&pins.root) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(Error::bpf_at(format!("remove {}", pins.root.display()), e)),
    }
    // Remove the base directory too when nothing else (another layout) is in it.
    let _unused_ok_if_not_empty = fs::remove_dir(&pins.base);
    Ok(())
}
