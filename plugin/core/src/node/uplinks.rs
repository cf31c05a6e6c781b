//! The node's uplinks: which interfaces a config names, and attaching to (and
//! detaching from) them.

use std::collections::BTreeSet;

use aya::{
    maps::{HashMap, MapData},
    programs::TcAttachType,
};

use crate::{
    bpf::{
        abi::{self, UplinkInfo},
        loader::{self, Hook, Pins},
        maps,
    },
    config::MasqOptions,
    error::{code, Context, Error, Result},
    netlink,
};

/// What one uplink is, as written into the `uplinks` map.
#[derive(Debug, Clone, PartialEq)]
pub struct Uplink {
    pub name: String,
    pub ifindex: u32,
    pub info: UplinkInfo,
}

/// The uplinks a config asks for: `egressInterfaces` (or the default routes'
/// interfaces) plus every rule's `outInterface`, with the address each masquerades to.
pub fn resolve_uplinks(conf: &MasqOptions) -> Result<Vec<Uplink>> {
    let mut names: Vec<(String, &str)> = match &conf.egress_interfaces {
        Some(list) => list.iter().map(|n| (n.clone(), "egressInterfaces")).collect(),
        None => {
            let d = netlink::default_route_interfaces()?;
            if d.is_empty() && conf.masquerade_rules.is_empty() {
                return Err(Error::new(
                    code::INVALID_CONFIG,
                    "invalid config key \"egressInterfaces\": not set and the node has no default route to take it from",
                ));
            }
            d.into_iter().map(|n| (n, "egressInterfaces")).collect()
        }
    };
    let rule_keys: Vec<String> =
        (0..conf.masquerade_rules.len()).map(|i| format!("masqueradeRules[{i}].outInterface")).collect();
    for (r, key) in conf.masquerade_rules.iter().zip(&rule_keys) {
        if !names.iter().any(|(n, _)| n == &r.out_interface) {
            names.push((r.out_interface.clone(), key.as_str()));
        }
    }
    let mut out = Vec::new();
    let mut owned = std::collections::BTreeSet::new();
    let mut described = Vec::new();
    for (name, key) in names {
        let link = netlink::get_link_by_name(&name)?
            .ok_or_else(|| Error::config(key, format!("interface {name} does not exist on this node")))?;
        let (v4, v6) = netlink::get_addresses(link.index)?;
        owned.extend(v4.iter().map(|a| std::net::IpAddr::V4(*a)).chain(v6.iter().map(|a| std::net::IpAddr::V6(*a))));
        let addrs: Vec<String> = v4.iter().map(|a| a.to_string()).chain(v6.iter().map(|a| a.to_string())).collect();
        described.push(format!("{name}: {}", if addrs.is_empty() { "no address".into() } else { addrs.join(", ") }));
        let mut info = UplinkInfo::default();
        if link.is_l3() {
            info.flags |= abi::UPLINK_F_L3;
        }
        if let Some(a) = conf.masquerade_address_v4.or_else(|| v4.first().copied()) {
            info.masq_v4 = a.octets();
            info.flags |= abi::UPLINK_F_HAS_V4;
        }
        if let Some(a) = conf.masquerade_address_v6.or_else(|| v6.first().copied()) {
            info.masq_v6 = a.octets();
            info.flags |= abi::UPLINK_F_HAS_V6;
        }
        if conf.masquerade_pool_v4.len() > 1 {
            info.flags |= abi::UPLINK_F_POOL4;
        }
        if conf.masquerade_pool_v6.len() > 1 {
            info.flags |= abi::UPLINK_F_POOL6;
        }
        out.push(Uplink { name, ifindex: link.index, info });
    }
    super::egress_policy::check_ownership(&conf.egress_policies, &owned, &described.join("; "))?;
    Ok(out)
}

pub(super) fn reconcile_uplinks(pins: &Pins, uplinks: &[Uplink]) -> Result<()> {
    for u in uplinks {
        maps::uplink_put(pins, u.ifindex, u.info)?;
        // Both hooks at once: a new TCX link waits for an RCU grace period, and
        // two waits side by side end together.
        let (egress, ingress) = std::thread::scope(|s| {
            let e = s.spawn(|| loader::attach(pins, loader::PROG_UPLINK_EGRESS, &u.name, TcAttachType::Egress, Hook::Uplink));
            let i = loader::attach(pins, loader::PROG_UPLINK_INGRESS, &u.name, TcAttachType::Ingress, Hook::Uplink);
            (e.join().unwrap_or_else(|_| Err(Error::bpf("attach thread panicked"))), i)
        });
        egress?;
        ingress?;
    }
    let want: BTreeSet<u32> = uplinks.iter().map(|u| u.ifindex).collect();
    let map: HashMap<MapData, u32, UplinkInfo> = maps::pinned(pins, abi::MAP_UPLINKS)?;
    let present: Vec<u32> = map.keys().collect::<std::result::Result<_, _>>().bpf_ctx("uplinks")?;
    for ifindex in present.into_iter().filter(|i| !want.contains(i)) {
        let name = netlink::get_link_by_index(ifindex)?.map(|l| l.name);
        loader::detach(pins, ifindex, name.as_deref(), TcAttachType::Egress)?;
        loader::detach(pins, ifindex, name.as_deref(), TcAttachType::Ingress)?;
        maps::uplink_remove(pins, ifindex)?;
    }
    Ok(())
}

/// Detach from every uplink in the map (uninstall).
pub fn detach_uplinks(pins: &Pins) -> Result<()> {
    let map: HashMap<MapData, u32, UplinkInfo> = maps::pinned(pins, abi::MAP_UPLINKS)?;
    let mut errors = Vec::new();
    for ifindex in map.keys() {
        let ifindex = match ifindex {
            Ok(i) => i,
            Err(e) => {
                errors.push(format!("uplinks: {e}"));
                break;
            }
        };
        let name = match netlink::get_link_by_index(ifindex) {
            Ok(l) => l.map(|l| l.name),
            Err(e) => {
                errors.push(e.msg);
                None
            }
        };
        for dir in [TcAttachType::Egress, TcAttachType::Ingress] {
            if let Err(e) = loader::detach(pins, ifindex, name.as_deref(), dir) {
                errors.push(e.msg);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::netlink(errors.join("; ")))
    }
}
