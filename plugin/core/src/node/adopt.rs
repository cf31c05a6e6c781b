//! Adopting an older layout's data plane after an upgrade.
//!
//! A binary with a new pin layout (`<pinPath>/v<N>/`) never loads an older
//! layout's maps as its own. Left alone, though, the older data plane would keep
//! running next to the new one: its TCX links on the uplinks (a second program on
//! each hook), its veth filters, and the pods registered only in its maps (no
//! masquerade from the new programs, and DEL would find nothing). So the first
//! node reconcile of a new binary adopts it, under the node lock:
//!
//! 1. `adopt` (before the uplinks are attached): every pod registration is
//!    registered again in the new maps (which also swaps the veth's filter to the
//!    new program), the reserved-ports record is carried over, and the NAT pairs
//!    are copied, so established flows keep their ports.
//! 2. The uplink attach takes the older layout's TCX links over (`loader`):
//!    their pins move to the new layout and the new program is swapped in.
//! 3. `finish`: the pairs the old programs made meanwhile are copied too, and
//!    the older layout's pins are removed (its maps and programs go with them).
//!
//! Only data whose key and value sizes are unchanged is carried over (and the NAT
//! pairs of layouts up to 12, whose halves are brought to the current shape); anything
//! else is left behind with a warning (those pods are re-registered by their
//! next ADD, their flows start afresh). A directory without a data plane in it
//! (no pinned `attachments` map) is not touched.

use aya::maps::{Array, ArrayOfMaps, HashMap, Map, MapData, MapError};

use crate::{
    bpf::{
        abi::{self, AttachmentInfo, AttachmentKey, PodInfo, PodL2, PortRange, UplinkInfo},
        loader::Pins,
        maps,
        nat::{self, Family, Fwd, NatMap},
    },
    error::Result,
    pod,
};

/// What `adopt` found: the older layouts to finish.
#[derive(Debug, Default)]
pub struct Adopted {
    pub layouts: Vec<(u32, Pins)>,
}

/// True when the pinned map `name` of `old` has these key and value sizes.
fn same_shape(old: &Pins, name: &str, key: usize, value: usize) -> bool {
    MapData::from_pin(old.map(name))
        .and_then(|m| m.info())
        .is_ok_and(|i| i.key_size() as usize == key && i.value_size() as usize == value)
}

/// The older hash map `name` as `HashMap<K, V>`, when it is pinned with those
/// key and value sizes (an older layout may lack it or shape it otherwise).
fn open_if_shaped<K: aya::Pod, V: aya::Pod>(old: &Pins, name: &str) -> Option<HashMap<MapData, K, V>> {
    if !same_shape(old, name, std::mem::size_of::<K>(), std::mem::size_of::<V>()) {
        return None;
    }
    maps::pinned(old, name).ok()
}

fn has_data_plane(old: &Pins) -> bool {
    MapData::from_pin(old.map(abi::MAP_ATTACHMENTS)).is_ok()
}

/// Step 1 (see the module doc). Never fails the caller: an older data plane that
/// cannot be read is reported and left as it is.
pub fn adopt(pins: &Pins) -> Adopted {
    let mut out = Adopted::default();
    for (v, old) in pins.older_layouts() {
        if !has_data_plane(&old) {
            continue;
        }
        log::info!("adopting the layout v{v} data plane under {}", old.root.display());
        if let Err(e) = adopt_registrations(pins, &old) {
            log::warn!("layout v{v}: pod registrations not adopted: {}", e.msg);
        }
        if let Err(e) = adopt_reserved_ports(pins, &old) {
            log::warn!("layout v{v}: reserved ports record not adopted: {}", e.msg);
        }
        if let Err(e) = adopt_uplinks(pins, &old) {
            log::warn!("layout v{v}: uplinks not adopted: {}", e.msg);
        }
        copy_pairs_logged(pins, &old, v);
        out.layouts.push((v, old));
    }
    out
}

/// Step 3 (see the module doc).
pub fn finish(pins: &Pins, adopted: Adopted) {
    for (v, old) in adopted.layouts {
        copy_pairs_logged(pins, &old, v);
        match crate::bpf::loader::remove_layout(&old) {
            Ok(()) => log::info!("removed the layout v{v} pins under {}", old.root.display()),
            Err(e) => log::warn!("layout v{v}: {}", e.msg),
        }
    }
}

/// Layout 10's `struct pod_meta` (before the hostPorts).
#[repr(C)]
#[derive(Clone, Copy)]
struct PodMetaV10 {
    k8s_namespace: [u8; abi::POD_META_NS_LEN],
    k8s_name: [u8; abi::POD_META_NAME_LEN],
    annotations: [u8; abi::POD_META_ANN_LEN],
}
// SAFETY: plain bytes, no padding (1344 = 64 + 256 + 1024), as the map stores them.
unsafe impl aya::Pod for PodMetaV10 {}
const _: () = assert!(std::mem::size_of::<PodMetaV10>() == 1344);

/// `pod_info` of layouts 7 to 11 (before the egress policy mask): where the pod's
/// L2 facts are read from when adopting those layouts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PodInfoV11 {
    ifindex: u32,
    flags: u32,
    l2: PodL2,
}
// SAFETY: plain integers and bytes, no padding (28 = 4 + 4 + 20), as the map stores them.
unsafe impl aya::Pod for PodInfoV11 {}
const _: () = assert!(std::mem::size_of::<PodInfoV11>() == 28);

fn adopt_registrations(pins: &Pins, old: &Pins) -> Result<()> {
    let (k, v) = (std::mem::size_of::<AttachmentKey>(), std::mem::size_of::<AttachmentInfo>());
    if !same_shape(old, abi::MAP_ATTACHMENTS, k, v) {
        return Err(crate::error::Error::bpf("attachments map of another shape"));
    }
    let mine: HashMap<MapData, AttachmentKey, AttachmentInfo> = maps::pinned(pins, abi::MAP_ATTACHMENTS)?;
    // The pods' L2 facts: layout 6 and before kept them in pod_l2 (by veth);
    // since, they are in each pods4/pods6 entry (and, from layout 8, the veths entry).
    let l2 = open_if_shaped::<u32, PodL2>(old, abi::MAP_POD_L2);
    let pods4 = open_if_shaped::<[u8; 4], PodInfo>(old, abi::MAP_PODS4);
    let pods6 = open_if_shaped::<[u8; 16], PodInfo>(old, abi::MAP_PODS6);
    let pods4_v11 = open_if_shaped::<[u8; 4], PodInfoV11>(old, abi::MAP_PODS4);
    let pods6_v11 = open_if_shaped::<[u8; 16], PodInfoV11>(old, abi::MAP_PODS6);
    // Who each pod is: from layout 10 on (before, nobody was recorded); layout 10's
    // record lacks the hostPorts (the pod's next ADD, if any, brings them).
    let metas = open_if_shaped::<AttachmentKey, abi::PodMeta>(old, abi::MAP_POD_META);
    let metas10 = if metas.is_none() { open_if_shaped::<AttachmentKey, PodMetaV10>(old, abi::MAP_POD_META) } else { None };
    let meta_of = |key: &AttachmentKey| -> abi::PodMeta {
        if let Some(m) = metas.as_ref().and_then(|m| m.get(key, 0).ok()) {
            return m;
        }
        metas10
            .as_ref()
            .and_then(|m| m.get(key, 0).ok())
            .map(|o| abi::PodMeta {
                k8s_namespace: o.k8s_namespace,
                k8s_name: o.k8s_name,
                annotations: o.annotations,
                ..Default::default()
            })
            .unwrap_or_default()
    };
    let l2_of = |info: &AttachmentInfo| -> PodL2 {
        if let Some(l2) = l2.as_ref().and_then(|m| m.get(&info.veth_ifindex, 0).ok()) {
            return l2;
        }
        pod::addrs_of(info)
            .into_iter()
            .find_map(|a| match a {
                std::net::IpAddr::V4(v4) => pods4
                    .as_ref()
                    .and_then(|m| m.get(&v4.octets(), 0).ok().map(|p| p.l2))
                    .or_else(|| pods4_v11.as_ref().and_then(|m| m.get(&v4.octets(), 0).ok().map(|p| p.l2))),
                std::net::IpAddr::V6(v6) => pods6
                    .as_ref()
                    .and_then(|m| m.get(&v6.octets(), 0).ok().map(|p| p.l2))
                    .or_else(|| pods6_v11.as_ref().and_then(|m| m.get(&v6.octets(), 0).ok().map(|p| p.l2))),
            })
            .unwrap_or_default()
    };
    for (key, info) in pod::list_attachments(old)? {
        if mine.get(&key, 0).is_ok() {
            continue; // registered again already (an earlier adoption that did not finish)
        }
        let reg = pod::Registration {
            veth_ifindex: info.veth_ifindex,
            veth_name: pod::cstr(&info.veth_name),
            addrs: pod::addrs_of(&info),
            nat_outgoing: info.flags & abi::ATT_F_NAT_OUTGOING != 0,
            nat_filtering: info.flags & abi::NAT_FILTER_MASK,
            l2: l2_of(&info),
            meta: meta_of(&key),
            policies: 0, // the reconcile that follows the adoption evaluates the policies
            // Bits 16-31 of the record (0 in layouts before 16: no limit).
            port_limit: pod::port_limit_of(info.flags),
            found: info.flags & abi::ATT_F_FOUND != 0,
        };
        let name = pod::cstr(&key.container_id);
        match crate::netlink::get_link_by_name(&reg.veth_name) {
            Ok(Some(link)) if link.index == reg.veth_ifindex => {}
            _ => {
                // The pod is gone without a DEL (its veth with it): nothing to carry over.
                log::info!("not adopting {name}: its veth {} is gone", reg.veth_name);
                continue;
            }
        }
        match pod::register(pins, &key, &reg) {
            Ok(()) => log::info!("adopted pod {name} ({})", reg.veth_name),
            Err(e) => log::warn!("pod {name} not adopted: {}", e.msg),
        }
    }
    Ok(())
}

/// The older layout's uplinks become ours for the uplink reconcile that
/// follows: the configured ones are attached anew, and the ones the config no
/// longer names are detached, like any uplink dropped from the config. Without
/// this, an older tc filter on such an uplink would outlive the older pins
/// (a filter holds its program, and the program its maps).
fn adopt_uplinks(pins: &Pins, old: &Pins) -> Result<()> {
    if !same_shape(old, abi::MAP_UPLINKS, 4, std::mem::size_of::<UplinkInfo>()) {
        return Ok(());
    }
    let from: HashMap<MapData, u32, UplinkInfo> = maps::pinned(old, abi::MAP_UPLINKS)?;
    let to: HashMap<MapData, u32, UplinkInfo> = maps::pinned(pins, abi::MAP_UPLINKS)?;
    for entry in from.iter() {
        let (ifindex, info) = entry.map_err(|e| crate::error::Error::bpf(format!("read older uplinks: {e}")))?;
        if to.get(&ifindex, 0).is_err() {
            maps::uplink_put(pins, ifindex, info)?;
        }
    }
    Ok(())
}

fn adopt_reserved_ports(pins: &Pins, old: &Pins) -> Result<()> {
    if !same_shape(old, abi::MAP_RESERVED_PORTS, 4, std::mem::size_of::<PortRange>()) {
        return Ok(());
    }
    let from: Array<MapData, PortRange> = maps::pinned(old, abi::MAP_RESERVED_PORTS)?;
    let mut to: Array<MapData, PortRange> = maps::pinned(pins, abi::MAP_RESERVED_PORTS)?;
    let have: Vec<PortRange> = (0..abi::RESERVED_PORTS_MAX).filter_map(|i| to.get(&i, 0).ok()).collect();
    let free: Vec<u32> = (0..abi::RESERVED_PORTS_MAX).filter(|&i| have.get(i as usize) == Some(&PortRange::default())).collect();
    let wanted: Vec<PortRange> = (0..abi::RESERVED_PORTS_MAX)
        .filter_map(|i| from.get(&i, 0).ok())
        .filter(|r| *r != PortRange::default() && !have.contains(r))
        .collect();
    if wanted.len() > free.len() {
        log::warn!("reserved_ports full: {} adopted ranges stay reserved after uninstall", wanted.len() - free.len());
    }
    for (i, r) in free.into_iter().zip(wanted) {
        to.set(i, r, 0).map_err(|e| crate::error::Error::bpf(format!("write reserved_ports: {e}")))?;
    }
    Ok(())
}

fn copy_pairs_logged(pins: &Pins, old: &Pins, v: u32) {
    for r in [copy_pairs::<nat::V4>(pins, old), copy_pairs::<nat::V6>(pins, old)] {
        match r {
            Ok(0) => {}
            Ok(n) => log::info!("layout v{v}: {n} NAT pairs carried over"),
            Err(e) => log::warn!("layout v{v}: NAT pairs not carried over: {}", e.msg),
        }
    }
}

/// A NAT half as layouts up to 12 stored it (before the TCP close's `fin_end`
/// and `close`), and how it reads in the current shape: a close in progress at
/// the upgrade is not tracked (its FINs were seen before), so that pair ends by
/// its timeout (`tcpClosing`); every later close is.
trait Upgrade: Family {
    type Old: aya::Pod;
    fn upgrade(v: &Self::Old) -> Self::Value;
}

/// nat4_entry up to layout 12: addr .. rule_id (16 bytes), then created_ns .. bytes (32).
#[repr(C)]
#[derive(Clone, Copy)]
struct Nat4EntryL12 {
    head: [u8; 16],
    tail: [u8; 32],
}
unsafe impl aya::Pod for Nat4EntryL12 {}

/// nat6_entry up to layout 12: addr .. rule_id (28 bytes), a pad word, then created_ns .. bytes (32).
#[repr(C)]
#[derive(Clone, Copy)]
struct Nat6EntryL12 {
    head: [u8; 28],
    pad: [u8; 4],
    tail: [u8; 32],
}
unsafe impl aya::Pod for Nat6EntryL12 {}

/// The current entry from its bytes: `head` at the start, `tail` (created_ns
/// .. bytes) at the end, the close fields zero between them.
fn from_parts<V: aya::Pod + Default>(head: &[u8], tail: &[u8; 32]) -> V {
    let mut v = V::default();
    let size = std::mem::size_of::<V>();
    // SAFETY: V is a plain-old-data struct of `size` bytes (aya::Pod); every byte pattern is a value.
    let bytes = unsafe { std::slice::from_raw_parts_mut((&mut v as *mut V).cast::<u8>(), size) };
    bytes[..head.len()].copy_from_slice(head);
    bytes[size - 32..].copy_from_slice(tail);
    v
}

impl Upgrade for nat::V4 {
    type Old = Nat4EntryL12;
    fn upgrade(v: &Nat4EntryL12) -> abi::Nat4Entry {
        from_parts(&v.head, &v.tail)
    }
}

impl Upgrade for nat::V6 {
    type Old = Nat6EntryL12;
    fn upgrade(v: &Nat6EntryL12) -> abi::Nat6Entry {
        from_parts(&v.head, &v.tail)
    }
}

/// The forward halves of an older layout, read with value type `V`: one hash
/// map (up to layout 4) or shards.
fn old_forward<F: Family, V: aya::Pod>(old: &Pins) -> Result<Vec<(F::Key, V)>> {
    let err = |e: &dyn std::fmt::Display| crate::error::Error::bpf(format!("{}: {e}", F::FWD));
    let data = MapData::from_pin(old.map(F::FWD)).map_err(|e| err(&e))?;
    match Map::from_map_data(data).map_err(|e| err(&e))? {
        m @ Map::HashMap(_) => {
            let h: HashMap<MapData, F::Key, V> = m.try_into().map_err(|e| err(&e))?;
            h.iter().collect::<std::result::Result<Vec<_>, MapError>>().map_err(|e| err(&e))
        }
        _ => {
            let params = nat::shard_params(old)?;
            let outer: ArrayOfMaps<MapData, HashMap<MapData, F::Key, V>> = maps::pinned(old, F::FWD)?;
            let mut all = Vec::new();
            for i in 0..params.shards {
                let shard = outer.get(&i, 0).map_err(|e| err(&format!("shard {i}: {e}")))?;
                for kv in shard.iter() {
                    all.push(kv.map_err(|e| err(&e))?);
                }
            }
            Ok(all)
        }
    }
}

/// Copy every complete pair (forward half with its reverse half), and every flow
/// begun outside (a forward half alone, NAT_F_INBOUND), of an older layout that
/// the new maps do not have yet; returns how many were copied. An older layout's
/// halves of the current shape are copied as they are; those of layouts up to 12
/// (`Upgrade::Old`) are brought to the current shape.
fn copy_pairs<F: Upgrade>(pins: &Pins, old: &Pins) -> Result<usize> {
    let k = std::mem::size_of::<F::Key>();
    if !old.map(F::REV).exists() {
        return Ok(0);
    }
    if same_shape(old, F::REV, k, std::mem::size_of::<F::Value>()) {
        return copy_pairs_as::<F, F::Value>(pins, old, |v| *v);
    }
    if same_shape(old, F::REV, k, std::mem::size_of::<F::Old>()) {
        return copy_pairs_as::<F, F::Old>(pins, old, F::upgrade);
    }
    Ok(0)
}

fn copy_pairs_as<F: Family, V: aya::Pod>(pins: &Pins, old: &Pins, to_new: impl Fn(&V) -> F::Value) -> Result<usize> {
    let old_rev: HashMap<MapData, F::Key, V> = maps::pinned(old, F::REV)?;
    let mut fwd = Fwd::<F>::pinned(pins)?;
    let mut rev: NatMap<F> = maps::pinned(pins, F::REV)?;
    let mut n = 0;
    for (fk, fv) in old_forward::<F, V>(old)? {
        let fv = to_new(&fv);
        let (t, e) = (F::tuple(&fk), F::entry(&fv));
        const NOEXIST: u64 = 1;
        if e.flags & abi::NAT_F_INBOUND != 0 {
            n += usize::from(fwd.insert(&fk, &fv, NOEXIST).is_ok());
            continue;
        }
        let rk = F::key(&nat::reverse_of(&t, &e));
        let Ok(rv) = old_rev.get(&rk, 0) else { continue };
        let rv = to_new(&rv);
        if F::entry(&rv).created_ns != e.created_ns {
            continue; // not one pair (being removed)
        }
        // The reverse half claims the port; a flow the new programs made meanwhile keeps it.
        if rev.insert(rk, rv, NOEXIST).is_err() {
            continue;
        }
        if fwd.insert(&fk, &fv, NOEXIST).is_err() {
            let _ = rev.remove(&rk);
            continue;
        }
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_12_half_keeps_every_field_and_starts_no_close() {
        let e4 = abi::Nat4Entry {
            addr: [10, 0, 0, 1], port: 4000u16.to_be_bytes(), flags: abi::NAT_F_FIN, policy: 2, ifindex: 7,
            rule_id: 9, created_ns: 11, last_seen_ns: 12, packets: 13, bytes: 14, ..Default::default()
        };
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&e4.addr);
        head[4..6].copy_from_slice(&e4.port);
        head[6] = e4.flags;
        head[7] = e4.policy;
        head[8..12].copy_from_slice(&7u32.to_ne_bytes());
        head[12..16].copy_from_slice(&9u32.to_ne_bytes());
        let mut tail = [0u8; 32];
        for (i, x) in [11u64, 12, 13, 14].iter().enumerate() {
            tail[i * 8..i * 8 + 8].copy_from_slice(&x.to_ne_bytes());
        }
        assert_eq!(<nat::V4 as Upgrade>::upgrade(&Nat4EntryL12 { head, tail }), e4);

        let e6 = abi::Nat6Entry {
            addr: [0xfd; 16], port: 4000u16.to_be_bytes(), flags: abi::NAT_F_RST, policy: 1, ifindex: 7,
            rule_id: 9, created_ns: 11, last_seen_ns: 12, packets: 13, bytes: 14, ..Default::default()
        };
        let mut head = [0u8; 28];
        head[..16].copy_from_slice(&e6.addr);
        head[16..18].copy_from_slice(&e6.port);
        head[18] = e6.flags;
        head[19] = e6.policy;
        head[20..24].copy_from_slice(&7u32.to_ne_bytes());
        head[24..28].copy_from_slice(&9u32.to_ne_bytes());
        assert_eq!(<nat::V6 as Upgrade>::upgrade(&Nat6EntryL12 { head, pad: [0xee; 4], tail }), e6);
    }
}
