//! The machine below the data plane: the clock the programs read
//! (bpf_ktime_get_ns), the number of possible CPUs (per-CPU maps), and every raw
//! bpf(2) call of the project, for the commands aya 0.14 has no API for and for
//! maps whose key and value types are known only at run time.

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

/// CLOCK_MONOTONIC in ns: what bpf_ktime_get_ns() returns, so ages computed here
/// compare with the data plane's timestamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Possible CPUs: how many values a per-CPU map holds per key.
pub fn ncpus() -> usize {
    aya::util::nr_cpus().map(|n| n.max(1)).unwrap_or(1)
}

// bpf(2) commands (enum bpf_cmd, include/uapi/linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_TYPE_HASH: u32 = 1;

/// bpf(2) with `attr`, a prefix of union bpf_attr of its own size; the kernel
/// treats the fields after that size as zero.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: attr is a live, exclusively borrowed bpf_attr prefix of the size we
    // pass; every pointer in it points at a buffer the caller keeps alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>() as u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// union bpf_attr for the BPF_MAP_*_ELEM commands and BPF_MAP_GET_NEXT_KEY.
#[repr(C)]
struct Elem {
    map_fd: u32,
    pad: u32,
    key: u64,
    value_or_next_key: u64,
    flags: u64,
}

impl Elem {
    fn new(fd: i32, key: Option<&[u8]>, value: u64, flags: u64) -> Self {
        Elem { map_fd: fd as u32, pad: 0, key: key.map_or(0, |k| k.as_ptr() as u64), value_or_next_key: value, flags }
    }
}

/// Ok(false) for ENOENT (no such key, or the end of a walk).
fn found(r: io::Result<libc::c_long>) -> io::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One BPF_MAP_GET_NEXT_KEY (`key` None: the first key); Ok(false) at the end of
/// the map. `next` is the map's key size.
pub fn map_get_next_key(fd: i32, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
    found(bpf(BPF_MAP_GET_NEXT_KEY, &mut Elem::new(fd, key, next.as_mut_ptr() as u64, 0)))
}

/// One BPF_MAP_LOOKUP_ELEM into `value` (the map's value size; for a per-CPU
/// map, the value size rounded up to 8 times `ncpus()`); Ok(false): no such key.
pub fn map_lookup(fd: i32, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    found(bpf(BPF_MAP_LOOKUP_ELEM, &mut Elem::new(fd, Some(key), value.as_mut_ptr() as u64, 0)))
}

/// One BPF_MAP_UPDATE_ELEM with BPF_ANY, sizes as `map_lookup`'s.
pub fn map_update(fd: i32, key: &[u8], value: &[u8]) -> io::Result<()> {
    bpf(BPF_MAP_UPDATE_ELEM, &mut Elem::new(fd, Some(key), value.as_ptr() as u64, 0)).map(drop)
}

/// One BPF_MAP_DELETE_ELEM; Ok(false): no such key.
pub fn map_delete(fd: i32, key: &[u8]) -> io::Result<bool> {
    found(bpf(BPF_MAP_DELETE_ELEM, &mut Elem::new(fd, Some(key), 0, 0)))
}

/// A plain hash map (not pinned, not in BTF): a NAT shard.
pub fn create_hash_map(name: &str, key: u32, value: u32, max_entries: u32, flags: u32) -> io::Result<OwnedFd> {
    // The BPF_MAP_CREATE member up to map_name.
    #[repr(C)]
    struct Create {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
        inner_map_fd: u32,
        numa_node: u32,
        map_name: [u8; 16],
    }
    let mut map_name = [0u8; 16];
    for (d, s) in map_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    let mut attr = Create {
        map_type: BPF_MAP_TYPE_HASH,
        key_size: key,
        value_size: value,
        max_entries,
        map_flags: flags,
        inner_map_fd: 0,
        numa_node: 0,
        map_name,
    };
    let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
    // SAFETY: on success the kernel returned a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// BPF_MAP_UPDATE_BATCH of u32 keys and u32 values (array slots and map fds).
pub fn update_batch(map: BorrowedFd<'_>, keys: &[u32], values: &[u32]) -> io::Result<()> {
    #[repr(C)]
    struct Batch {
        in_batch: u64,
        out_batch: u64,
        keys: u64,
        values: u64,
        count: u32,
        map_fd: u32,
        elem_flags: u64,
        flags: u64,
    }
    assert_eq!(keys.len(), values.len());
    let mut attr = Batch {
        in_batch: 0,
        out_batch: 0,
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: keys.len() as u32,
        map_fd: map.as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // The kernel writes back only `count`.
    bpf(BPF_MAP_UPDATE_BATCH, &mut attr)?;
    if attr.count as usize != keys.len() {
        return Err(io::Error::other(format!("{} of {} updated", attr.count, keys.len())));
    }
    Ok(())
}

/// The programs on the TCX ingress (`ingress`) or egress hook of `ifindex`, in
/// run order (BPF_PROG_QUERY).
pub fn tcx_prog_ids(ifindex: u32, ingress: bool) -> io::Result<Vec<u32>> {
    // The BPF_PROG_QUERY member.
    #[repr(C)]
    struct Query {
        target_ifindex: u32,
        attach_type: u32,
        query_flags: u32,
        attach_flags: u32,
        prog_ids: u64,
        count: u32,
        _pad: u32,
        prog_attach_flags: u64,
        link_ids: u64,
        link_attach_flags: u64,
        revision: u64,
    }
    const BPF_TCX_INGRESS: u32 = 46;
    const BPF_TCX_EGRESS: u32 = 47;
    let mut ids = [0u32; 64];
    let mut q = Query {
        target_ifindex: ifindex,
        attach_type: if ingress { BPF_TCX_INGRESS } else { BPF_TCX_EGRESS },
        query_flags: 0,
        attach_flags: 0,
        prog_ids: ids.as_mut_ptr() as u64,
        count: ids.len() as u32,
        _pad: 0,
        prog_attach_flags: 0,
        link_ids: 0,
        link_attach_flags: 0,
        revision: 0,
    };
    // The kernel writes at most `count` ids into `ids`.
    bpf(BPF_PROG_QUERY, &mut q)?;
    Ok(ids[..(q.count as usize).min(ids.len())].to_vec())
}
