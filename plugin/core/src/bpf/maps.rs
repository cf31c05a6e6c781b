//! Typed handles on the pinned maps, taken by path (no object load needed).

use aya::maps::{Array, HashMap, Map, MapData, MapError, PerCpuHashMap, PerCpuValues};

use super::abi::{self, UplinkInfo, VethInfo};
use super::pins::Pins;
use crate::error::{Error, Result};

/// The pinned map `name` as the typed view `T` (HashMap, LpmTrie, Array...).
pub fn pinned<T>(pins: &Pins, name: &str) -> Result<T>
where
    T: TryFrom<Map, Error = MapError>,
{
    let map = Map::from_map_data(pinned_data(pins, name)?).map_err(|e| Error::bpf(format!("map {name}: {e}")))?;
    T::try_from(map).map_err(|e| Error::bpf(format!("map {name}: {e}")))
}

/// The pinned map `name` untyped (its fd, e.g. to mmap it).
pub fn pinned_data(pins: &Pins, name: &str) -> Result<MapData> {
    let path = pins.map(name);
    MapData::from_pin(&path).map_err(|e| {
        Error::bpf(format!("pinned map {}: {e} (is the node set up? run `ebpf-masq apply`)", path.display()))
    })
}

/// Make `ifindex` an uplink with `info`: its `uplinks` entry, and its
/// `uplinks_direct` slot (flagged present) when the ifindex is below
/// UPLINKS_DIRECT, where the programs look first. The slot goes first, so an
/// uplink the plugin lists in `uplinks` is one the programs already see.
pub fn uplink_put(pins: &Pins, ifindex: u32, info: UplinkInfo) -> Result<()> {
    if ifindex < abi::UPLINKS_DIRECT {
        let mut direct: Array<MapData, UplinkInfo> = pinned(pins, abi::MAP_UPLINKS_DIRECT)?;
        let slot = UplinkInfo { flags: info.flags | abi::UPLINK_F_PRESENT, ..info };
        direct.set(ifindex, slot, 0).map_err(|e| Error::bpf(format!("write uplinks_direct: {e}")))?;
    }
    let mut map: HashMap<MapData, u32, UplinkInfo> = pinned(pins, abi::MAP_UPLINKS)?;
    map.insert(ifindex, info, 0).map_err(|e| Error::bpf(format!("write uplinks: {e}")))
}

/// Make `ifindex` no uplink: the reverse of `uplink_put` (an absent entry is fine).
pub fn uplink_remove(pins: &Pins, ifindex: u32) -> Result<()> {
    let mut map: HashMap<MapData, u32, UplinkInfo> = pinned(pins, abi::MAP_UPLINKS)?;
    match map.remove(&ifindex) {
        Ok(()) => {}
        Err(e) if is_key_not_found(&e) => {}
        Err(e) => return Err(Error::bpf(format!("remove from uplinks: {e}"))),
    }
    if ifindex < abi::UPLINKS_DIRECT {
        let mut direct: Array<MapData, UplinkInfo> = pinned(pins, abi::MAP_UPLINKS_DIRECT)?;
        direct.set(ifindex, UplinkInfo::default(), 0).map_err(|e| Error::bpf(format!("clear uplinks_direct: {e}")))?;
    }
    Ok(())
}

/// Write the `veths` entry of pod veth `ifindex`: the same facts in every CPU's
/// copy, counters zero (a registration starts them afresh).
pub fn veth_put(pins: &Pins, ifindex: u32, info: VethInfo) -> Result<()> {
    let mut map: PerCpuHashMap<MapData, u32, VethInfo> = pinned(pins, abi::MAP_VETHS)?;
    let info = VethInfo { stats: Default::default(), ..info };
    let values = PerCpuValues::try_from(vec![info; super::sys::ncpus()])
        .map_err(|e| Error::bpf(format!("veths entry: {e}")))?;
    map.insert(ifindex, values, 0).map_err(|e| Error::bpf(format!("write veths: {e}")))
}

/// The `veths` entry of `ifindex` no longer holds `addr` (absent entry: nothing to
/// do). Every CPU's copy keeps its counters.
pub fn veth_forget_addr(pins: &Pins, ifindex: u32, addr: std::net::IpAddr) -> Result<()> {
    let mut map: PerCpuHashMap<MapData, u32, VethInfo> = pinned(pins, abi::MAP_VETHS)?;
    let values = match map.get(&ifindex, 0) {
        Ok(v) => v,
        Err(e) if is_key_not_found(&e) => return Ok(()),
        Err(e) => return Err(Error::bpf(format!("read veths: {e}"))),
    };
    let kept: Vec<VethInfo> = values.iter().map(|v| v.without_addr(addr)).collect();
    if kept.first() == values.first() {
        return Ok(());
    }
    let kept = PerCpuValues::try_from(kept).map_err(|e| Error::bpf(format!("veths entry: {e}")))?;
    map.insert(ifindex, kept, 0).map_err(|e| Error::bpf(format!("write veths: {e}")))
}

/// The `veths` entry of `ifindex` gets egress policy mask `mask` in every CPU's
/// copy (counters kept; an absent entry: nothing to do). True when it changed.
pub fn veth_set_policies(pins: &Pins, ifindex: u32, mask: u32) -> Result<bool> {
    let mut map: PerCpuHashMap<MapData, u32, VethInfo> = pinned(pins, abi::MAP_VETHS)?;
    let values = match map.get(&ifindex, 0) {
        Ok(v) => v,
        Err(e) if is_key_not_found(&e) => return Ok(false),
        Err(e) => return Err(Error::bpf(format!("read veths: {e}"))),
    };
    if values.iter().all(|v| v.pod.policies == mask) {
        return Ok(false);
    }
    let set: Vec<VethInfo> = values.iter().map(|v| VethInfo { pod: abi::PodInfo { policies: mask, ..v.pod }, ..*v }).collect();
    let set = PerCpuValues::try_from(set).map_err(|e| Error::bpf(format!("veths entry: {e}")))?;
    map.insert(ifindex, set, 0).map_err(|e| Error::bpf(format!("write veths: {e}")))?;
    Ok(true)
}

/// True for the error a map returns when a key is absent: `KeyNotFound` from a
/// lookup, ENOENT from a delete (aya 0.14's `remove` passes the syscall's error on).
pub fn is_key_not_found(e: &MapError) -> bool {
    match e {
        MapError::KeyNotFound => true,
        MapError::SyscallError(s) => s.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

/// The capacity (max_entries) of a pinned map, if it exists.
pub fn map_max_entries(pins: &Pins, name: &str) -> Result<Option<u32>> {
    if !pins.map(name).exists() {
        return Ok(None);
    }
    let data = MapData::from_pin(pins.map(name)).map_err(|err| Error::bpf(format!("pinned map {name}: {err}")))?;
    Ok(Some(data.info().map_err(|err| Error::bpf(format!("{name}: {err}")))?.max_entries()))
}
