//! One pod attachment: register its addresses, attach the veth program, and undo
//! exactly that. The record of what ADD did lives in the pinned `attachments` map.

use std::net::IpAddr;

use aya::{
    maps::{HashMap, MapData, PerCpuHashMap},
    programs::TcAttachType,
};

use crate::{
    bpf::{
        abi::{self, AttachmentInfo, AttachmentKey, HostPort, PodInfo, PodL2, PodMeta, VethInfo},
        loader::{self, Pins},
        maps, nat,
    },
    error::{Context, Error, Result},
    netlink,
};

/// Deterministic identity of one attachment: container ID + ifname.
pub fn attachment_key(container_id: &str, ifname: &str) -> AttachmentKey {
    let mut k = AttachmentKey { container_id: [0; abi::ATT_ID_LEN], ifname: [0; abi::ATT_IFNAME_LEN] };
    let id = container_id.as_bytes();
    if id.len() < abi::ATT_ID_LEN {
        k.container_id[..id.len()].copy_from_slice(id);
    } else {
        // Keep a readable prefix and a hash of the whole ID; stays NUL terminated.
        let hash = format!("~{:016x}", fnv1a64(id));
        let keep = abi::ATT_ID_LEN - 1 - hash.len();
        k.container_id[..keep].copy_from_slice(&id[..keep]);
        k.container_id[keep..keep + hash.len()].copy_from_slice(hash.as_bytes());
    }
    let n = ifname.as_bytes();
    let len = n.len().min(abi::ATT_IFNAME_LEN - 1);
    k.ifname[..len].copy_from_slice(&n[..len]);
    k
}

fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100000001b3))
}

pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// What ADD registers for one pod.
#[derive(Debug, Clone)]
pub struct Registration {
    pub veth_ifindex: u32,
    pub veth_name: String,
    pub addrs: Vec<IpAddr>,
    pub nat_outgoing: bool,
    /// natFiltering as its NAT_FILTER_* bits (kept in the attachment too, for adoption).
    pub nat_filtering: u32,
    /// The fast path's view of the pod (MACs, L3 interface), kept in `pod_l2`.
    pub l2: PodL2,
    /// Who the pod is (namespace, name, our annotations), kept in `pod_meta`.
    pub meta: PodMeta,
    /// The egressPolicies that select it (bit i = policy i), in its pods4/pods6
    /// entries; node reconcile re-evaluates it for every pod when the policies change.
    pub policies: u32,
    /// The most ports the pod may hold towards one remote endpoint on one node
    /// address (podPortLimit, or a lower ebpf-masq.io/port-limit); 0: none. In the
    /// flags of its attachment record, pods4/pods6 entries and veths entry.
    pub port_limit: u16,
    /// Registered by the agent from a runtime's CNI cache (ATT_F_FOUND), not by an ADD.
    pub found: bool,
}

/// A port limit as its bits of `PodInfo.flags` and `AttachmentInfo.flags` (0: none).
pub fn port_limit_flags(limit: u16) -> u32 {
    u32::from(limit) << abi::PORT_LIMIT_SHIFT
}

/// The port limit `PodInfo.flags` or `AttachmentInfo.flags` hold (0: none; older
/// layouts have 0 there).
pub fn port_limit_of(flags: u32) -> u16 {
    (flags >> abi::PORT_LIMIT_SHIFT) as u16
}

/// A port limit as status and CHECK name it.
pub fn port_limit_text(limit: u16) -> String {
    if limit == 0 {
        "none".into()
    } else {
        limit.to_string()
    }
}

/// The `pod_meta` record of a pod: namespace and name (from CNI_ARGS) and its
/// `ebpf-masq.io/` annotations as compact JSON (the config parser bounds them).
pub fn meta_of(namespace: &str, name: &str, annotations: &std::collections::BTreeMap<String, String>) -> PodMeta {
    fn put(dst: &mut [u8], s: &str) {
        let b = s.as_bytes();
        let n = b.len().min(dst.len() - 1);
        dst[..n].copy_from_slice(&b[..n]);
    }
    let mut m = PodMeta::default();
    put(&mut m.k8s_namespace, namespace);
    put(&mut m.k8s_name, name);
    if !annotations.is_empty() {
        put(&mut m.annotations, &serde_json::to_string(annotations).unwrap_or_default());
    }
    m
}

/// `meta` with the pod's hostPorts (at most POD_HOST_PORTS_MAX: the config parser bounds them).
pub fn with_host_ports(mut meta: PodMeta, ports: &[HostPort]) -> PodMeta {
    for (slot, p) in meta.host_ports.iter_mut().zip(ports) {
        *slot = *p;
    }
    meta
}

/// The hostPorts of a `pod_meta` record.
pub fn host_ports_of(m: &PodMeta) -> Vec<HostPort> {
    m.host_ports.iter().take_while(|p| p.port != 0).copied().collect()
}

/// Make `host_ports` the union of every registration's hostPorts (caller holds
/// the node lock): rebuilt, not counted, so a failed step heals at the next ADD or DEL.
pub fn sync_host_ports(pins: &Pins) -> Result<()> {
    let want: std::collections::BTreeSet<HostPort> =
        list_meta(pins)?.values().flat_map(host_ports_of).collect();
    let mut m: HashMap<MapData, HostPort, u32> = maps::pinned(pins, abi::MAP_HOST_PORTS)?;
    let have: Vec<HostPort> = m.keys().collect::<std::result::Result<_, _>>().bpf_ctx("host_ports")?;
    for k in have.iter().filter(|k| !want.contains(k)) {
        match m.remove(k) {
            Ok(()) => {}
            Err(e) if maps::is_key_not_found(&e) => {}
            Err(e) => return Err(Error::bpf_at("remove host_ports entry", e)),
        }
    }
    for k in want.iter().filter(|k| !have.contains(k)) {
        m.insert(k, 0, 0).bpf_ctx("write host_ports")?;
    }
    Ok(())
}

/// (namespace, name, annotations) of a `pod_meta` record; annotations as a JSON object.
pub fn meta_fields(m: &PodMeta) -> (String, String, serde_json::Value) {
    let ann = cstr(&m.annotations);
    let ann = if ann.is_empty() { serde_json::json!({}) } else { serde_json::from_str(&ann).unwrap_or(serde_json::json!({})) };
    (cstr(&m.k8s_namespace), cstr(&m.k8s_name), ann)
}

/// The `pod_meta` record of every attachment that has one.
pub fn list_meta(pins: &Pins) -> Result<std::collections::HashMap<AttachmentKey, PodMeta>> {
    let m: HashMap<MapData, AttachmentKey, PodMeta> = maps::pinned(pins, abi::MAP_POD_META)?;
    m.iter().collect::<std::result::Result<_, _>>().bpf_ctx("pod_meta")
}

impl Registration {
    fn to_info(&self) -> Result<AttachmentInfo> {
        let mut info = AttachmentInfo { veth_ifindex: self.veth_ifindex, ..Default::default() };
        if self.nat_outgoing {
            info.flags |= abi::ATT_F_NAT_OUTGOING;
        }
        info.flags |= self.nat_filtering & abi::NAT_FILTER_MASK;
        info.flags |= port_limit_flags(self.port_limit);
        if self.found {
            info.flags |= abi::ATT_F_FOUND;
        }
        for a in &self.addrs {
            match a {
                IpAddr::V4(v4) => {
                    let i = info.n_v4 as usize;
                    if i >= abi::ATT_MAX_ADDRS {
                        return Err(Error::config("prevResult.ips", "more than 4 IPv4 addresses on one interface"));
                    }
                    info.v4[i] = v4.octets();
                    info.n_v4 += 1;
                }
                IpAddr::V6(v6) => {
                    let i = info.n_v6 as usize;
                    if i >= abi::ATT_MAX_ADDRS {
                        return Err(Error::config("prevResult.ips", "more than 4 IPv6 addresses on one interface"));
                    }
                    info.v6[i] = v6.octets();
                    info.n_v6 += 1;
                }
            }
        }
        let n = self.veth_name.as_bytes();
        let len = n.len().min(15);
        info.veth_name[..len].copy_from_slice(&n[..len]);
        info.created_ns = monotonic_ns();
        Ok(info)
    }

    /// The `PodInfo.flags` of the pod's pods4/pods6 entries and veths entry.
    fn pod_flags(&self) -> u32 {
        let nat_outgoing = if self.nat_outgoing { abi::POD_F_NAT_OUTGOING } else { 0 };
        nat_outgoing | (self.nat_filtering & abi::NAT_FILTER_MASK) | port_limit_flags(self.port_limit)
    }
}

pub use crate::bpf::sys::monotonic_ns;

pub fn addrs_of(info: &AttachmentInfo) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for i in 0..(info.n_v4 as usize).min(abi::ATT_MAX_ADDRS) {
        out.push(IpAddr::from(info.v4[i]));
    }
    for i in 0..(info.n_v6 as usize).min(abi::ATT_MAX_ADDRS) {
        out.push(IpAddr::from(info.v6[i]));
    }
    out
}

/// Register the pod (maps first, then the veth program). On any failure the
/// partial registration is removed again before the error is returned.
pub fn register(pins: &Pins, key: &AttachmentKey, reg: &Registration) -> Result<()> {
    let info = reg.to_info()?;
    let res = (|| {
        let mut atts: HashMap<MapData, AttachmentKey, AttachmentInfo> = maps::pinned(pins, abi::MAP_ATTACHMENTS)?;
        // Record first: a crash after this point leaves something DEL/GC can find.
        atts.insert(key, info, 0).bpf_ctx("write attachments")?;
        let mut meta: HashMap<MapData, AttachmentKey, PodMeta> = maps::pinned(pins, abi::MAP_POD_META)?;
        meta.insert(key, reg.meta, 0).bpf_ctx("write pod_meta")?;
        if reg.meta.host_ports[0].port != 0 {
            sync_host_ports(pins)?;
        }
        let pod = PodInfo { ifindex: reg.veth_ifindex, flags: reg.pod_flags(), l2: reg.l2, policies: reg.policies };
        // The addresses first, then the veth's entry: an address a veths entry
        // holds is always one pods4/pods6 gives to that veth (the veth program
        // trusts the entry without asking them).
        let mut p4: HashMap<MapData, [u8; 4], PodInfo> = maps::pinned(pins, abi::MAP_PODS4)?;
        let mut p6: HashMap<MapData, [u8; 16], PodInfo> = maps::pinned(pins, abi::MAP_PODS6)?;
        for a in &reg.addrs {
            let (before, put) = match a {
                IpAddr::V4(v4) => (p4.get(&v4.octets(), 0), p4.insert(v4.octets(), pod, 0)),
                IpAddr::V6(v6) => (p6.get(&v6.octets(), 0), p6.insert(v6.octets(), pod, 0)),
            };
            put.bpf_ctx("write pods")?;
            // An address another veth still had (its pod's DEL never came): that
            // veth's entry lets go of it, so its packets from it are spoofed again.
            if let Ok(old) = before {
                if old.ifindex != reg.veth_ifindex {
                    maps::veth_forget_addr(pins, old.ifindex, *a)?;
                }
            }
        }
        maps::veth_put(pins, reg.veth_ifindex, VethInfo::new(pod, &reg.addrs))?;
        loader::attach(pins, loader::PROG_VETH_INGRESS, &reg.veth_name, TcAttachType::Ingress, loader::Hook::PodVeth)
            .map(|_| ())
    })();
    if let Err(e) = res {
        if let Err(undo) = unregister(pins, key) {
            return Err(e.context(format!("(rollback also failed: {undo})")));
        }
        return Err(e);
    }
    Ok(())
}

/// A registered pod's egress policy mask (`PodInfo.policies`) becomes `mask` in its
/// pods4/pods6 entries (those still its veth's) and its veth's entry. True when
/// anything changed. New flows follow it; established pairs keep their address.
/// The entries' flags (natOutgoing, natFiltering, the port limit) are kept.
pub fn set_policies(pins: &Pins, info: &AttachmentInfo, mask: u32) -> Result<bool> {
    let mut p4: HashMap<MapData, [u8; 4], PodInfo> = maps::pinned(pins, abi::MAP_PODS4)?;
    let mut p6: HashMap<MapData, [u8; 16], PodInfo> = maps::pinned(pins, abi::MAP_PODS6)?;
    let mut changed = false;
    for a in addrs_of(info) {
        match a {
            IpAddr::V4(v4) => {
                if let Ok(p) = p4.get(&v4.octets(), 0) {
                    if p.ifindex == info.veth_ifindex && p.policies != mask {
                        p4.insert(v4.octets(), PodInfo { policies: mask, ..p }, 0).bpf_ctx("write pods4")?;
                        changed = true;
                    }
                }
            }
            IpAddr::V6(v6) => {
                if let Ok(p) = p6.get(&v6.octets(), 0) {
                    if p.ifindex == info.veth_ifindex && p.policies != mask {
                        p6.insert(v6.octets(), PodInfo { policies: mask, ..p }, 0).bpf_ctx("write pods6")?;
                        changed = true;
                    }
                }
            }
        }
    }
    Ok(maps::veth_set_policies(pins, info.veth_ifindex, mask)? || changed)
}

/// What CHECK asks of the data plane for a registered pod: each of its addresses
/// is still its veth's in pods4/pods6 (not gone, not handed to another pod since),
/// the veth has its `veths` entry, and they all hold the registration's port
/// limit. The first problem, or None.
pub fn data_plane_problem(pins: &Pins, info: &AttachmentInfo) -> Result<Option<String>> {
    let p4: HashMap<MapData, [u8; 4], PodInfo> = maps::pinned(pins, abi::MAP_PODS4)?;
    let p6: HashMap<MapData, [u8; 16], PodInfo> = maps::pinned(pins, abi::MAP_PODS6)?;
    let limit = port_limit_of(info.flags);
    let other_limit = |what: String, have: u16| {
        format!("{what} holds port limit {}, the registration {}", port_limit_text(have), port_limit_text(limit))
    };
    for a in addrs_of(info) {
        let entry = match a {
            IpAddr::V4(v4) => p4.get(&v4.octets(), 0),
            IpAddr::V6(v6) => p6.get(&v6.octets(), 0),
        };
        match entry {
            Ok(p) if p.ifindex == info.veth_ifindex && port_limit_of(p.flags) != limit => {
                return Ok(Some(other_limit(format!("the pods entry of address {a}"), port_limit_of(p.flags))))
            }
            Ok(p) if p.ifindex == info.veth_ifindex => {}
            Ok(p) => return Ok(Some(format!("address {a} is registered to another veth (ifindex {})", p.ifindex))),
            Err(e) if maps::is_key_not_found(&e) => return Ok(Some(format!("address {a} is not registered"))),
            Err(e) => return Err(Error::bpf_at("read pods", e)),
        }
    }
    let veths: PerCpuHashMap<MapData, u32, VethInfo> = maps::pinned(pins, abi::MAP_VETHS)?;
    match veths.get(&info.veth_ifindex, 0) {
        Ok(v) => Ok(v.iter().map(|x| port_limit_of(x.pod.flags)).find(|&have| have != limit).map(|have| {
            other_limit(format!("the veths entry of ifindex {}", info.veth_ifindex), have)
        })),
        Err(e) if maps::is_key_not_found(&e) => {
            Ok(Some(format!("veth ifindex {} has no veths entry", info.veth_ifindex)))
        }
        Err(e) => Err(Error::bpf_at("read veths", e)),
    }
}

/// Remove everything `register` made for `key`. Idempotent: an unknown key is
/// success. Keeps going after a failure and reports every failure together.
pub fn unregister(pins: &Pins, key: &AttachmentKey) -> Result<bool> {
    if !pins.has_registrations() {
        return Ok(false); // nothing was ever set up on this node (or it was uninstalled)
    }
    let mut atts: HashMap<MapData, AttachmentKey, AttachmentInfo> = maps::pinned(pins, abi::MAP_ATTACHMENTS)?;
    let info = match atts.get(key, 0) {
        Ok(i) => i,
        Err(e) if maps::is_key_not_found(&e) => return Ok(false),
        Err(e) => return Err(Error::bpf_at("read attachments", e)),
    };
    let mut errors: Vec<String> = Vec::new();
    let addrs = addrs_of(&info);

    // The veth's entry before the addresses (the reverse of `register`).
    match maps::pinned::<PerCpuHashMap<MapData, u32, VethInfo>>(pins, abi::MAP_VETHS) {
        Ok(mut s) => match s.remove(&info.veth_ifindex) {
            Ok(()) => {}
            Err(e) if maps::is_key_not_found(&e) => {}
            Err(e) => errors.push(format!("remove veths entry: {e}")),
        },
        Err(e) => errors.push(e.msg),
    }

    // Addresses: only while they still point at this pod's veth (the IP may have
    // been handed to a newer pod already).
    match (
        maps::pinned::<HashMap<MapData, [u8; 4], PodInfo>>(pins, abi::MAP_PODS4),
        maps::pinned::<HashMap<MapData, [u8; 16], PodInfo>>(pins, abi::MAP_PODS6),
    ) {
        (Ok(mut p4), Ok(mut p6)) => {
            for a in &addrs {
                let r = match a {
                    IpAddr::V4(v4) => match p4.get(&v4.octets(), 0) {
                        Ok(p) if p.ifindex == info.veth_ifindex => p4.remove(&v4.octets()),
                        _ => Ok(()),
                    },
                    IpAddr::V6(v6) => match p6.get(&v6.octets(), 0) {
                        Ok(p) if p.ifindex == info.veth_ifindex => p6.remove(&v6.octets()),
                        _ => Ok(()),
                    },
                };
                if let Err(e) = r {
                    if !maps::is_key_not_found(&e) {
                        errors.push(format!("remove pod address {a}: {e}"));
                    }
                }
            }
        }
        (Err(e), _) | (_, Err(e)) => errors.push(e.msg),
    }

    if let Err(e) = flush_nat(pins, &addrs) {
        errors.push(e.msg);
    }

    // The veth: our link pin goes whether or not the veth still exists; a tc
    // filter is removed only if the interface with that name is still this pod's.
    let veth_name = cstr(&info.veth_name);
    let name = match netlink::get_link_by_name(&veth_name) {
        Ok(Some(link)) if link.index == info.veth_ifindex => Some(veth_name.as_str()),
        Ok(_) => None,
        Err(e) => {
            errors.push(e.msg);
            None
        }
    };
    if let Err(e) = loader::detach(pins, info.veth_ifindex, name, TcAttachType::Ingress) {
        errors.push(e.msg);
    }
    if errors.is_empty() {
        match maps::pinned::<HashMap<MapData, AttachmentKey, PodMeta>>(pins, abi::MAP_POD_META) {
            Ok(mut m) => {
                let had_ports = m.get(key, 0).is_ok_and(|meta| meta.host_ports[0].port != 0);
                match m.remove(key) {
                    Ok(()) => {}
                    Err(e) if maps::is_key_not_found(&e) => {}
                    Err(e) => errors.push(format!("remove pod_meta entry: {e}")),
                }
                if had_ports {
                    if let Err(e) = sync_host_ports(pins) {
                        errors.push(e.msg);
                    }
                }
            }
            Err(e) => errors.push(e.msg),
        }
    }
    if errors.is_empty() {
        match atts.remove(key) {
            Ok(()) => {}
            Err(e) if maps::is_key_not_found(&e) => {}
            Err(e) => errors.push(format!("remove attachment record: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(true)
    } else {
        // Keep the record so a retried DEL finds the rest.
        Err(Error::bpf(errors.join("; ")))
    }
}

/// Delete both halves of every NAT pair (both families) that belongs to one of
/// `addrs`, and forget their refusals and port counts (a later pod given an
/// address starts with none).
pub fn flush_nat(pins: &Pins, addrs: &[IpAddr]) -> Result<usize> {
    let n = nat::flush::<nat::V4>(pins, addrs)? + nat::flush::<nat::V6>(pins, addrs)?;
    crate::bpf::refusals::forget(pins, addrs)?;
    crate::bpf::port_counts::forget(pins, addrs)?;
    Ok(n)
}

/// Every attachment record on the node.
pub fn list_attachments(pins: &Pins) -> Result<Vec<(AttachmentKey, AttachmentInfo)>> {
    let atts: HashMap<MapData, AttachmentKey, AttachmentInfo> = maps::pinned(pins, abi::MAP_ATTACHMENTS)?;
    atts.iter().collect::<std::result::Result<_, _>>().bpf_ctx("attachments")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_key_short_and_long() {
        let k = attachment_key("abc", "eth0");
        assert_eq!(cstr(&k.container_id), "abc");
        assert_eq!(cstr(&k.ifname), "eth0");
        let long = "x".repeat(100);
        let k1 = attachment_key(&long, "eth0");
        let k2 = attachment_key(&format!("{}y", "x".repeat(99)), "eth0");
        assert_ne!(k1, k2, "IDs that differ only past 64 bytes must not collide");
        assert_eq!(k1.container_id[abi::ATT_ID_LEN - 1], 0);
        assert_eq!(k1, attachment_key(&long, "eth0"), "deterministic");
    }

    #[test]
    fn registration_limits() {
        let reg = Registration {
            veth_ifindex: 7,
            veth_name: "veth1".into(),
            addrs: (1..=5).map(|i| IpAddr::from([10, 0, 0, i])).collect(),
            nat_outgoing: true,
            nat_filtering: 0,
            l2: PodL2::default(),
            meta: PodMeta::default(),
            policies: 0,
            port_limit: 0,
            found: false,
        };
        assert_eq!(reg.to_info().unwrap_err().code, 7);
        let ok = Registration { addrs: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()], ..reg };
        let info = ok.to_info().unwrap();
        assert_eq!((info.n_v4, info.n_v6), (1, 1));
        assert_eq!(addrs_of(&info), ok.addrs);
        assert_eq!(cstr(&info.veth_name), "veth1");
    }

    #[test]
    fn meta_round_trips() {
        let ann: std::collections::BTreeMap<String, String> =
            [("ebpf-masq.io/egress-policy".to_string(), "partner".to_string())].into_iter().collect();
        let m = meta_of("shop", "web-0", &ann);
        assert_eq!(meta_fields(&m), ("shop".into(), "web-0".into(), serde_json::json!({"ebpf-masq.io/egress-policy": "partner"})));
        assert_eq!(meta_fields(&PodMeta::default()), (String::new(), String::new(), serde_json::json!({})));
        // Longest Kubernetes values fit whole, NUL terminated.
        let long = meta_of(&"n".repeat(63), &"p".repeat(253), &Default::default());
        assert_eq!(meta_fields(&long).1.len(), 253);
        assert_eq!(long.k8s_namespace[63], 0);
    }

    fn reg(port_limit: u16, nat_filtering: u32) -> Registration {
        Registration {
            veth_ifindex: 7,
            veth_name: "veth1".into(),
            addrs: vec!["10.0.0.1".parse().unwrap()],
            nat_outgoing: true,
            nat_filtering,
            l2: PodL2::default(),
            meta: PodMeta::default(),
            policies: 0,
            port_limit,
            found: false,
        }
    }

    #[test]
    fn the_limit_packs_into_bits_16_to_31_and_back() {
        for limit in [0u16, 1, 64, 0x1234, u16::MAX] {
            let f = port_limit_flags(limit);
            assert_eq!(f & 0xffff, 0, "{limit}: the low bits are the flags'");
            assert_eq!(port_limit_of(f), limit);
            assert_eq!(port_limit_of(f | abi::POD_F_NAT_OUTGOING | abi::NAT_FILTER_MASK), limit);
        }
        assert_eq!(port_limit_flags(1), 1 << abi::PORT_LIMIT_SHIFT);
        assert_eq!(port_limit_of(abi::POD_F_NAT_OUTGOING | abi::NAT_FILTER_EI), 0, "an older layout's flags: no limit");
    }

    #[test]
    fn every_flags_word_of_a_registration_holds_its_limit() {
        let r = reg(200, abi::NAT_FILTER_AD);
        let info = r.to_info().unwrap();
        assert_eq!(port_limit_of(info.flags), 200);
        assert_eq!(info.flags & abi::NAT_FILTER_MASK, abi::NAT_FILTER_AD, "natFiltering unharmed by the high bits");
        assert_ne!(info.flags & abi::ATT_F_NAT_OUTGOING, 0);
        let f = r.pod_flags();
        assert_eq!((port_limit_of(f), f & abi::NAT_FILTER_MASK, f & abi::POD_F_NAT_OUTGOING), (200, abi::NAT_FILTER_AD, abi::POD_F_NAT_OUTGOING));
        // Stray high bits of nat_filtering never reach the limit's.
        assert_eq!(port_limit_of(reg(0, u32::MAX).pod_flags()), 0);
        assert_eq!(port_limit_of(reg(0, u32::MAX).to_info().unwrap().flags), 0);
        assert_eq!((port_limit_text(0), port_limit_text(64)), ("none".to_string(), "64".to_string()));
    }
}
