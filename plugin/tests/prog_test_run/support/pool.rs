//! Verified data planes kept for the next test. Loading one is almost all of a
//! test's time (the verifier, and the maps' allocation and release: ~4 s of
//! kernel time each on a 2-core machine), so a test's data plane is not removed
//! when it ends: its maps are put back as they were right after its load
//! ([`Snapshot`]), checked to be so, and the next test of the same size takes it.
//! A data plane that cannot be put back exactly (a test replaced a shard, the
//! pins changed, a test panicked) is removed instead, as every one was before.
//!
//! What "as they were" covers: every pinned map and every NAT shard (keys and
//! values, every CPU's copy), the event rings (emptied: their records are read
//! and dropped), the sweep's timer (an array element written from user space
//! cancels and frees its bpf_timer, as on a new map), and the pin directory's
//! listing. The programs have no writable globals.

use std::{
    collections::BTreeMap,
    os::fd::{AsFd, AsRawFd},
    path::{Path, PathBuf},
    sync::{Mutex, Once},
};

use aya::maps::{MapData, MapInfo, MapType, RingBuf};
use ebpf_masq::bpf::{pins::Pins, sys};

/// One map's contents: key bytes -> value bytes (every CPU's, for per-CPU maps).
pub type Entries = BTreeMap<Vec<u8>, Vec<u8>>;

struct MapState {
    name: String,
    data: MapData,
    kind: MapType,
    key_size: usize,
    value_len: usize,
    entries: Entries,
    /// ARRAY_OF_MAPS: the inner maps, by slot (their ids are `entries`' values).
    inner: Vec<MapState>,
}

/// A data plane's maps as they were once (right after its load).
pub struct Snapshot {
    listing: Vec<PathBuf>,
    maps: Vec<MapState>,
}

fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("list {}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

fn value_len(info: &MapInfo, kind: MapType) -> usize {
    let v = info.value_size() as usize;
    match kind {
        MapType::PerCpuHash | MapType::PerCpuArray | MapType::LruPerCpuHash => v.next_multiple_of(8) * sys::ncpus(),
        _ => v,
    }
}

fn open_state(name: String, data: MapData) -> Result<MapState, String> {
    let info = data.info().map_err(|e| format!("{name}: info: {e}"))?;
    let kind = info.map_type().map_err(|e| format!("{name}: type: {e}"))?;
    let mut m = MapState {
        name,
        key_size: info.key_size() as usize,
        value_len: value_len(&info, kind),
        kind,
        data,
        entries: Entries::new(),
        inner: Vec::new(),
    };
    m.entries = m.dump()?;
    if kind == MapType::ArrayOfMaps {
        for (slot, id) in &m.entries {
            let id = u32::from_ne_bytes(id[..4].try_into().unwrap());
            let inner = MapData::from_id(id).map_err(|e| format!("{}: shard {slot:?}: {e}", m.name))?;
            m.inner.push(open_state(format!("{}[{slot:?}]", m.name), inner)?);
        }
    }
    Ok(m)
}

impl MapState {
    fn fd(&self) -> i32 {
        self.data.fd().as_fd().as_raw_fd()
    }

    /// Every key and its value now (nothing for a ring, which has no keys).
    fn dump(&self) -> Result<Entries, String> {
        let mut out = Entries::new();
        if self.kind == MapType::RingBuf {
            return Ok(out);
        }
        let fd = self.fd();
        let mut cur: Option<Vec<u8>> = None;
        loop {
            let mut next = vec![0u8; self.key_size];
            let more = sys::map_get_next_key(fd, cur.as_deref(), &mut next)
                .map_err(|e| format!("{}: next key: {e}", self.name))?;
            if !more {
                return Ok(out);
            }
            let mut v = vec![0u8; self.value_len];
            // A key deleted between the walk and the lookup (the sweep) is skipped.
            if sys::map_lookup(fd, &next, &mut v).map_err(|e| format!("{}: lookup: {e}", self.name))? {
                out.insert(next.clone(), v);
            }
            cur = Some(next);
        }
    }

    /// Put the contents back as in `self.entries`.
    fn restore(&self) -> Result<(), String> {
        let fd = self.fd();
        let err = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", self.name);
        match self.kind {
            MapType::RingBuf => {
                let id = self.data.info().map_err(|e| format!("{}: info: {e}", self.name))?.id();
                let data = MapData::from_id(id).map_err(|e| format!("{}: {e}", self.name))?;
                let mut ring = RingBuf::try_from(aya::maps::Map::RingBuf(data)).map_err(|e| format!("{}: {e}", self.name))?;
                while ring.next().is_some() {}
            }
            // Every element written, changed or not: writing an array element from
            // user space also cancels and frees a bpf_timer in it.
            MapType::Array | MapType::PerCpuArray => {
                for (k, v) in &self.entries {
                    sys::map_update(fd, k, v).map_err(|e| err("update", e))?;
                }
            }
            MapType::ArrayOfMaps => {
                if self.dump()? != self.entries {
                    return Err(format!("{}: its shards were replaced", self.name));
                }
                for m in &self.inner {
                    m.restore()?;
                }
            }
            MapType::Hash | MapType::LruHash | MapType::PerCpuHash | MapType::LruPerCpuHash | MapType::LpmTrie => {
                let now = self.dump()?;
                for k in now.keys().filter(|k| !self.entries.contains_key(*k)) {
                    sys::map_delete(fd, k).map_err(|e| err("delete", e))?;
                }
                for (k, v) in self.entries.iter().filter(|(k, v)| now.get(*k) != Some(*v)) {
                    sys::map_update(fd, k, v).map_err(|e| err("update", e))?;
                }
            }
            other => return Err(format!("{}: a {other:?} map cannot be put back", self.name)),
        }
        Ok(())
    }

    /// The contents are `self.entries` again (shards included).
    fn check(&self) -> Result<(), String> {
        if self.dump()? != self.entries {
            return Err(format!("{}: not as it was after the load", self.name));
        }
        self.inner.iter().try_for_each(MapState::check)
    }
}

impl Snapshot {
    /// Every map pinned under `pins` as it is now.
    pub fn take(pins: &Pins) -> Result<Self, String> {
        let mut maps = Vec::new();
        for e in std::fs::read_dir(pins.maps_dir()).map_err(|e| e.to_string())? {
            let p = e.map_err(|e| e.to_string())?.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let data = MapData::from_pin(&p).map_err(|e| format!("open {name}: {e}"))?;
            maps.push(open_state(name, data)?);
        }
        Ok(Snapshot { listing: listing(&pins.root), maps })
    }

    /// Every map's contents by name (a shard as `<outer>[<slot bytes>]`); a ring's are empty.
    #[allow(dead_code)] // (microbench shares this module and compares no contents)
    pub fn contents(&self) -> BTreeMap<String, Entries> {
        fn add(out: &mut BTreeMap<String, Entries>, m: &MapState) {
            out.insert(m.name.clone(), m.entries.clone());
            m.inner.iter().for_each(|i| add(out, i));
        }
        let mut out = BTreeMap::new();
        self.maps.iter().for_each(|m| add(&mut out, m));
        out
    }

    /// Put every map back as it was when taken, then check that it is.
    pub fn restore(&self, pins: &Pins) -> Result<(), String> {
        if listing(&pins.root) != self.listing {
            return Err("the pins are not those of the load".into());
        }
        self.maps.iter().try_for_each(MapState::restore)?;
        self.maps.iter().try_for_each(MapState::check)
    }
}

/// A loaded data plane and its snapshot, waiting for a test.
pub struct Kept {
    pub nat_max_entries: u32,
    pub pins: Pins,
    pub snapshot: Snapshot,
}

/// The data planes kept (one pool per process).
pub struct Pool {
    kept: Mutex<Vec<Kept>>,
    cleanup: Once,
}

impl Pool {
    pub const fn new() -> Self {
        Pool { kept: Mutex::new(Vec::new()), cleanup: Once::new() }
    }

    /// A kept data plane of this size, if any.
    pub fn take(&self, nat_max_entries: u32) -> Option<Kept> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let i = kept.iter().position(|k| k.nat_max_entries == nat_max_entries)?;
        Some(kept.swap_remove(i))
    }

    /// Keep `k` for the next test once its maps are back as they were after its
    /// load; otherwise (or while a test is panicking) remove its pins.
    /// `remove_at_exit` runs `Pool::remove_all` for this pool when the process exits.
    pub fn give_back(&self, k: Kept, remove_at_exit: extern "C" fn()) {
        if std::thread::panicking() {
            remove_pin_dir(&k.pins.base);
            return;
        }
        if let Err(e) = k.snapshot.restore(&k.pins) {
            eprintln!("data plane {} not kept: {e}", k.pins.base.display());
            remove_pin_dir(&k.pins.base);
            return;
        }
        // SAFETY: atexit takes a plain function pointer that lives for the whole process.
        self.cleanup.call_once(|| unsafe {
            libc::atexit(remove_at_exit);
        });
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(k);
    }

    /// Remove every kept data plane's pins (at exit).
    pub fn remove_all(&self) {
        // try_lock: at exit nobody else runs; never wait on a lock a dying thread held.
        if let Ok(mut kept) = self.kept.try_lock() {
            for k in kept.drain(..) {
                remove_pin_dir(&k.pins.base);
            }
        }
    }
}

pub fn remove_pin_dir(p: &Path) {
    if let Err(e) = std::fs::remove_dir_all(p) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("warning: could not remove {}: {e}", p.display());
        }
    }
}
