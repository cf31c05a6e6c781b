//! A pod's registration, as its CNI ADD makes it: one function for the ADD
//! itself (`cni`) and for the agent registering a pod whose ADD never reached
//! ebpf-masq (`node::discover`), so the two cannot differ.

use std::{net::IpAddr, path::Path, time::SystemTime};

use crate::{
    bpf::{abi, loader::Pins},
    config::{self, NetConf},
    error::{code, Error, Result},
    netlink, pod,
    pod::Registration,
    prevresult::{self, PrevResult},
};

use super::{lock, pod_nets, reconcile_for_pod, resolve_uplinks};

/// Who is being added: CNI_CONTAINERID, CNI_IFNAME, CNI_NETNS, CNI_ARGS.
#[derive(Debug, Clone, Default)]
pub struct PodAdd {
    pub container_id: String,
    pub ifname: String,
    /// The pod's netns; "" when not known (libcni's cache does not keep it): the
    /// host veth is then found from prevResult's host interfaces or the route to the pod.
    pub netns: String,
    /// CNI_ARGS ("K=V;K=V"): the pod's namespace and name.
    pub args: String,
    /// Found by the agent in a runtime's cache, not added by an ADD of ours.
    pub found: bool,
    /// Found: when its cache entry was written (a DEL of ours since then wins;
    /// unknown: any DEL of ours wins).
    pub cached_at: Option<SystemTime>,
}

/// What `add_pod` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    Registered,
    /// A found pod that a DEL of ours unregistered after its cache entry was written
    /// (the main plugin's DEL and libcni's removal of the entry are yet to come).
    Deleted,
}

/// The prevResult of `conf`, raw and parsed (ADD requires it).
pub fn prev_result(conf: &NetConf) -> Result<(serde_json::Value, PrevResult)> {
    let raw = conf
        .prev_result
        .clone()
        .ok_or_else(|| Error::config("prevResult", "required: ebpf-masq is a chained plugin; list it after the main plugin"))?;
    let parsed = prevresult::parse_prev_result(&raw)?;
    Ok((raw, parsed))
}

/// The pod's port limit in `PodInfo` terms (0: none): podPortLimit, or the
/// pod's ebpf-masq.io/port-limit annotation when it lowers it.
pub fn port_limit_of(conf: &NetConf) -> Result<u16> {
    let annotation = conf.pod_annotations.get(config::PORT_LIMIT_ANNOTATION).map(String::as_str);
    Ok(config::effective_port_limit(conf.masq.pod_port_limit, annotation)?.unwrap_or(0))
}

/// Register the pod `req` of `conf` (which holds its prevResult and runtimeConfig).
/// Everything that can fail on input fails before anything is touched.
pub fn add_pod(req: &PodAdd, conf: &NetConf, pins: &Pins) -> Result<Added> {
    let (_, prev) = prev_result(conf)?;
    let addrs: Vec<IpAddr> = prev.container_ips(&req.ifname);
    let who = config::pod_identity(&req.args)?;
    if addrs.is_empty() {
        return Err(Error::config("prevResult.ips", format!("no address for interface {}", req.ifname)));
    }
    // The egress policies that select the pod (its annotation may narrow them to
    // one, never widen): a refused annotation fails the ADD before anything is done.
    let annotation = conf.pod_annotations.get(config::EGRESS_POLICY_ANNOTATION).map(String::as_str);
    let policies = super::egress_policy::mask_of(&conf.masq, &who.namespace, &who.name, annotation)?;
    // The port limit: the network's, or the pod's annotation when lower (a higher
    // or malformed one fails the ADD here too).
    let port_limit = port_limit_of(conf)?;
    let veth = find_host_veth(req, &prev)?;
    // Resolve the uplinks before anything is created, so a bad interface name
    // (or a policy address the node does not own) leaves no trace.
    let uplinks = resolve_uplinks(&conf.masq)?;
    let _lock = lock(pins)?;
    if !req.found {
        super::deleted::clear(pins, &req.container_id, &req.ifname);
    } else if super::deleted::since(pins, &req.container_id, &req.ifname, req.cached_at.unwrap_or(SystemTime::UNIX_EPOCH)) {
        return Ok(Added::Deleted);
    }
    reconcile_for_pod(pins, &conf.masq, &uplinks, policies)?;
    let key = pod::attachment_key(&req.container_id, &req.ifname);
    let reg = Registration {
        veth_ifindex: veth.index,
        veth_name: veth.name.clone(),
        addrs,
        nat_outgoing: conf.masq.nat_outgoing,
        nat_filtering: super::filter_bits(conf.masq.nat_filtering),
        l2: pod_l2(req, &prev, &veth)?,
        meta: pod::with_host_ports(
            pod::meta_of(&who.namespace, &who.name, &conf.pod_annotations),
            &conf.host_ports.iter().map(|&(port, proto)| abi::HostPort { port, proto, pad: 0 }).collect::<Vec<_>>(),
        ),
        policies,
        port_limit,
        found: req.found,
    };
    pod::register(pins, &key, &reg)?;
    // The pod's subnet becomes one of the node's pod ranges: a later pod of it is
    // never let out with its own address before it is registered.
    pod_nets::learn(pins, &prev.container_nets(&req.ifname))?;
    Ok(Added::Registered)
}

/// The host-side veth of the pod: a host interface from prevResult that is a
/// veth, else the peer of CNI_IFNAME inside the pod's netns, else (no netns
/// known) the veth the node routes the pod's address to (ptp, Calico).
pub fn find_host_veth(req: &PodAdd, prev: &PrevResult) -> Result<netlink::LinkInfo> {
    for name in prev.host_interfaces() {
        if let Some(link) = netlink::get_link_by_name(name)? {
            if link.kind.as_deref() == Some("veth") {
                return Ok(link);
            }
        }
    }
    if !req.netns.is_empty() {
        if let Some(peer) = netlink::veth_peer(Path::new(&req.netns), &req.ifname)? {
            // The ifindex is only meaningful here if the node's link with that
            // index is a veth pointing back at the container end.
            if let Some(link) = netlink::get_link_by_index(peer.peer_ifindex)? {
                if link.kind.as_deref() == Some("veth")
                    && link.peer_ifindex == Some(peer.own_ifindex)
                    && link.link_netnsid.is_some()
                {
                    return Ok(link);
                }
            }
        }
    } else {
        for addr in prev.container_ips(&req.ifname) {
            if let Some(link) = netlink::route_oif(addr)?.map(netlink::get_link_by_index).transpose()?.flatten() {
                if link.kind.as_deref() == Some("veth") && link.link_netnsid.is_some() {
                    return Ok(link);
                }
            }
        }
    }
    Err(Error::new(
        code::STATE,
        format!(
            "cannot find the host side of {} (netns {}): ebpf-masq needs a veth-based main plugin (bridge, ptp, Calico...)",
            req.ifname,
            if req.netns.is_empty() { "unknown" } else { &req.netns }
        ),
    ))
}

/// What the fast path needs to reach the pod without the host stack: the
/// container interface's MAC (prevResult, else read in its netns), the MAC
/// replies come from (the bridge the veth is enslaved to, else the veth itself:
/// the pod's gateway) and the interface the host stack sees the pod's packets
/// on (bridge or veth), for route lookups. Unknown MACs only keep replies on
/// the normal path.
fn pod_l2(req: &PodAdd, prev: &PrevResult, veth: &netlink::LinkInfo) -> Result<abi::PodL2> {
    let (l3_ifindex, gw_mac) = match veth.master {
        Some(m) => match netlink::get_link_by_index(m)? {
            Some(master) => (master.index, master.mac),
            None => (veth.index, veth.mac),
        },
        None => (veth.index, veth.mac),
    };
    let from_prev = prev
        .interfaces
        .iter()
        .find(|i| i.name == req.ifname && i.sandbox.is_some())
        .and_then(|i| i.mac.as_deref())
        .and_then(parse_mac);
    let pod_mac = match from_prev {
        Some(m) => Some(m),
        None if req.netns.is_empty() => None,
        None => {
            let ifname = req.ifname.clone();
            netlink::in_netns(Path::new(&req.netns), move || Ok(netlink::get_link_by_name(&ifname)?.and_then(|l| l.mac)))
                .unwrap_or(None)
        }
    };
    let mut l2 = abi::PodL2 { l3_ifindex, ..Default::default() };
    if let (Some(p), Some(g)) = (pod_mac, gw_mac) {
        l2.pod_mac = p;
        l2.gw_mac = g;
        l2.flags |= abi::POD_L2_F_HAS_MAC;
    }
    Ok(l2)
}

/// "aa:bb:cc:dd:ee:ff" (either case) -> bytes.
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parse_mac_cases() {
        assert_eq!(super::parse_mac("9e:D1:0c:44:ab:12"), Some([0x9e, 0xd1, 0x0c, 0x44, 0xab, 0x12]));
        assert_eq!(super::parse_mac("9e:d1:0c:44:ab"), None);
        assert_eq!(super::parse_mac("9e:d1:0c:44:ab:12:00"), None);
        assert_eq!(super::parse_mac("9e:d1:0c:44:ab:1"), None);
        assert_eq!(super::parse_mac("zz:d1:0c:44:ab:12"), None);
    }
}
