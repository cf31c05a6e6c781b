//! The CNI verbs. Stdout is the protocol: exactly one JSON reply (or nothing for
//! DEL/CHECK/STATUS/GC success); logs go to `logFile`.

use std::{
    collections::HashSet,
    io::Read,
    net::IpAddr,
    path::Path,
    time::Instant,
};

use crate::{
    bpf::{abi, loader::Pins},
    config::{self, NetConf, ValidAttachment},
    error::{code, Error, Result},
    logging, netlink, node,
    pod::{self, Registration},
    prevresult::{self, PrevResult},
};

/// The CNI_* environment of one call.
#[derive(Debug, Clone, Default)]
pub struct CniEnv {
    pub command: String,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// CNI_ARGS ("K=V;K=V"): kubelet's runtimes put the pod's namespace and name there.
    pub args: String,
}

impl CniEnv {
    pub fn from_env() -> Self {
        let get = |k: &str| std::env::var(k).unwrap_or_default();
        CniEnv {
            command: get("CNI_COMMAND"),
            container_id: get("CNI_CONTAINERID"),
            netns: get("CNI_NETNS"),
            ifname: get("CNI_IFNAME"),
            args: get("CNI_ARGS"),
        }
    }

    fn require(&self, var: &str, value: &str) -> Result<()> {
        if value.is_empty() {
            return Err(Error::env(var, "required but empty"));
        }
        Ok(())
    }

    fn require_ids(&self) -> Result<()> {
        self.require("CNI_CONTAINERID", &self.container_id)?;
        self.require("CNI_IFNAME", &self.ifname)?;
        if self.ifname.len() > 15 || self.ifname.contains('/') {
            return Err(Error::env("CNI_IFNAME", format!("{:?} is not a valid interface name", self.ifname)));
        }
        Ok(())
    }
}

/// Entry point when CNI_COMMAND is set. Returns the process exit code.
pub fn main() -> i32 {
    let env = CniEnv::from_env();
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        let err = Error::new(code::IO_FAILURE, format!("read stdin: {e}"));
        println!("{}", err.to_cni_json("1.0.0"));
        return 1;
    }
    let start = Instant::now();
    let conf = if env.command == "VERSION" { None } else { Some(config::parse_netconf(&stdin)) };
    // Logging as early as the config allows; a bad config still gets its error printed.
    if let Some(Ok(c)) = &conf {
        logging::init(c.masq.log_level, c.masq.log_file.as_deref());
    }
    let cni_version = match &conf {
        Some(Ok(c)) => c.cni_version.clone(),
        _ => sniff_cni_version(&stdin),
    };
    let result = match conf {
        None => version(&stdin),
        Some(Err(e)) => Err(e),
        Some(Ok(c)) => dispatch(&env, &c),
    };
    let outcome = match &result {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("error code={} msg={:?}", e.code, e.msg),
    };
    log::info!(
        "verb={} container={} netns={} ifname={} result={} duration_ms={:.2}",
        env.command,
        env.container_id,
        env.netns,
        env.ifname,
        outcome,
        start.elapsed().as_secs_f64() * 1000.0
    );
    match result {
        Ok(Some(out)) => {
            println!("{out}");
            0
        }
        Ok(None) => 0,
        Err(e) => {
            println!("{}", e.to_cni_json(&cni_version));
            1
        }
    }
}

fn sniff_cni_version(stdin: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| v.get("cniVersion").and_then(|s| s.as_str()).map(str::to_owned))
        .filter(|v| config::SUPPORTED_CNI_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| "1.1.0".into())
}

fn version(_stdin: &[u8]) -> Result<Option<serde_json::Value>> {
    Ok(Some(serde_json::json!({
        "cniVersion": "1.1.0",
        "supportedVersions": config::SUPPORTED_CNI_VERSIONS,
    })))
}

pub fn dispatch(env: &CniEnv, conf: &NetConf) -> Result<Option<serde_json::Value>> {
    let pins = Pins::new(&conf.masq.pin_path);
    match env.command.as_str() {
        "ADD" => cmd_add(env, conf, &pins).map(Some),
        "DEL" => cmd_del(env, &pins).map(|_| None),
        "CHECK" => cmd_check(env, conf, &pins).map(|_| None),
        "STATUS" => cmd_status(&pins).map(|_| None),
        "GC" => cmd_gc(conf, &pins).map(|_| None),
        "" => Err(Error::env("CNI_COMMAND", "not set")),
        other => Err(Error::env("CNI_COMMAND", format!("unknown command {other:?}"))),
    }
}

fn prev_result(conf: &NetConf) -> Result<(serde_json::Value, PrevResult)> {
    let raw = conf
        .prev_result
        .clone()
        .ok_or_else(|| Error::config("prevResult", "required: ebpf-masq is a chained plugin; list it after the main plugin"))?;
    let parsed = prevresult::parse_prev_result(&raw)?;
    Ok((raw, parsed))
}

/// The host-side veth of the pod: a host interface from prevResult that is a
/// veth, or else the peer of CNI_IFNAME inside the pod's netns.
fn find_host_veth(env: &CniEnv, prev: &PrevResult) -> Result<netlink::LinkInfo> {
    for name in prev.host_interfaces() {
        if let Some(link) = netlink::get_link_by_name(name)? {
            if link.kind.as_deref() == Some("veth") {
                return Ok(link);
            }
        }
    }
    if !env.netns.is_empty() {
        if let Some(peer) = netlink::veth_peer(Path::new(&env.netns), &env.ifname)? {
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
    }
    Err(Error::new(
        code::STATE,
        format!(
            "cannot find the host side of {} (netns {}): ebpf-masq needs a veth-based main plugin (bridge, ptp, Calico...)",
            env.ifname, env.netns
        ),
    ))
}

/// What the fast path needs to reach the pod without the host stack: the
/// container interface's MAC (prevResult, else read in its netns), the MAC
/// replies come from (the bridge the veth is enslaved to, else the veth itself:
/// the pod's gateway) and the interface the host stack sees the pod's packets
/// on (bridge or veth), for route lookups. Unknown MACs only keep replies on
/// the normal path.
fn pod_l2(env: &CniEnv, prev: &PrevResult, veth: &netlink::LinkInfo) -> Result<abi::PodL2> {
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
        .find(|i| i.name == env.ifname && i.sandbox.is_some())
        .and_then(|i| i.mac.as_deref())
        .and_then(parse_mac);
    let pod_mac = match from_prev {
        Some(m) => Some(m),
        None => {
            let ifname = env.ifname.clone();
            netlink::in_netns(Path::new(&env.netns), move || Ok(netlink::get_link_by_name(&ifname)?.and_then(|l| l.mac)))
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

/// The pod's port limit in `PodInfo` terms (0: none): podPortLimit, or the
/// pod's ebpf-masq.io/port-limit annotation when it lowers it.
fn port_limit_of(conf: &NetConf) -> Result<u16> {
    let annotation = conf.pod_annotations.get(config::PORT_LIMIT_ANNOTATION).map(String::as_str);
    Ok(config::effective_port_limit(conf.masq.pod_port_limit, annotation)?.unwrap_or(0))
}

fn cmd_add(env: &CniEnv, conf: &NetConf, pins: &Pins) -> Result<serde_json::Value> {
    env.require_ids()?;
    env.require("CNI_NETNS", &env.netns)?;
    let (raw, prev) = prev_result(conf)?;
    let addrs: Vec<IpAddr> = prev.container_ips(&env.ifname);
    let who = crate::config::pod_identity(&env.args)?;
    if addrs.is_empty() {
        return Err(Error::config("prevResult.ips", format!("no address for interface {}", env.ifname)));
    }
    // The egress policies that select the pod (its annotation may narrow them to
    // one, never widen): a refused annotation fails the ADD before anything is done.
    let annotation = conf.pod_annotations.get(crate::config::EGRESS_POLICY_ANNOTATION).map(String::as_str);
    let policies = node::egress_policy::mask_of(&conf.masq, &who.namespace, &who.name, annotation)?;
    // The port limit: the network's, or the pod's annotation when lower (a higher
    // or malformed one fails the ADD here too).
    let port_limit = port_limit_of(conf)?;
    let veth = find_host_veth(env, &prev)?;
    // Resolve the uplinks before anything is created, so a bad interface name
    // (or a policy address the node does not own) leaves no trace.
    let uplinks = node::resolve_uplinks(&conf.masq)?;
    let _lock = node::lock(pins)?;
    node::reconcile_for_pod(pins, &conf.masq, &uplinks, policies)?;
    let key = pod::attachment_key(&env.container_id, &env.ifname);
    let reg = Registration {
        veth_ifindex: veth.index,
        veth_name: veth.name.clone(),
        addrs,
        nat_outgoing: conf.masq.nat_outgoing,
        nat_filtering: crate::node::filter_bits(conf.masq.nat_filtering),
        l2: pod_l2(env, &prev, &veth)?,
        meta: pod::with_host_ports(
            pod::meta_of(&who.namespace, &who.name, &conf.pod_annotations),
            &conf.host_ports.iter().map(|&(port, proto)| abi::HostPort { port, proto, pad: 0 }).collect::<Vec<_>>(),
        ),
        policies,
        port_limit,
    };
    pod::register(pins, &key, &reg)?;
    Ok(raw)
}

fn cmd_del(env: &CniEnv, pins: &Pins) -> Result<()> {
    env.require_ids()?;
    if !pins.root.exists() {
        return Ok(());
    }
    let key = pod::attachment_key(&env.container_id, &env.ifname);
    let _lock = node::lock(pins)?;
    pod::unregister(pins, &key).map(|_| ())
}

fn cmd_check(env: &CniEnv, conf: &NetConf, pins: &Pins) -> Result<()> {
    env.require_ids()?;
    let (_, prev) = prev_result(conf)?;
    if !pins.loaded() {
        return Err(Error::state(format!("data plane not loaded under {}", pins.root.display())));
    }
    let key = pod::attachment_key(&env.container_id, &env.ifname);
    let atts = pod::list_attachments(pins)?;
    let (_, info) = atts
        .iter()
        .find(|(k, _)| *k == key)
        .ok_or_else(|| Error::state(format!("container {} ifname {} is not registered", env.container_id, env.ifname)))?;
    let want: HashSet<IpAddr> = prev.container_ips(&env.ifname).into_iter().collect();
    let have: HashSet<IpAddr> = pod::addrs_of(info).into_iter().collect();
    if want != have {
        return Err(Error::state(format!("registered addresses {have:?} differ from prevResult {want:?}")));
    }
    if (info.flags & abi::ATT_F_NAT_OUTGOING != 0) != conf.masq.nat_outgoing {
        return Err(Error::state("natOutgoing differs from the registration"));
    }
    let port_limit = port_limit_of(conf)?;
    if pod::port_limit_of(info.flags) != port_limit {
        return Err(Error::state(format!(
            "the port limit podPortLimit and {} give ({}) differs from the registration's ({})",
            config::PORT_LIMIT_ANNOTATION,
            pod::port_limit_text(port_limit),
            pod::port_limit_text(pod::port_limit_of(info.flags))
        )));
    }
    if let Some(problem) = pod::data_plane_problem(pins, info)? {
        return Err(Error::state(problem));
    }
    let veth = pod::cstr(&info.veth_name);
    match netlink::get_link_by_name(&veth)? {
        Some(l) if l.index == info.veth_ifindex => {}
        _ => return Err(Error::state(format!("host veth {veth} (ifindex {}) is gone", info.veth_ifindex))),
    }
    use crate::bpf::loader;
    use aya::programs::TcAttachType;
    if !loader::is_attached(pins, loader::PROG_VETH_INGRESS, info.veth_ifindex, TcAttachType::Ingress)? {
        return Err(Error::state(format!("ebpf-masq is not attached to {veth} ingress")));
    }
    if let Some(problem) = node::data_plane_problem(pins, &conf.masq)? {
        return Err(Error::state(problem));
    }
    Ok(())
}

fn cmd_status(pins: &Pins) -> Result<()> {
    // Ready when pins can be made (bpffs mounted) or already exist.
    crate::bpf::loader::ensure_bpffs(&pins.base).map_err(|e| Error::new(50, e.msg))
}

fn cmd_gc(conf: &NetConf, pins: &Pins) -> Result<()> {
    if !pins.has_registrations() {
        return Ok(());
    }
    let valid: Vec<ValidAttachment> = conf.valid_attachments.clone().unwrap_or_default();
    let keep: HashSet<abi::AttachmentKey> =
        valid.iter().map(|v| pod::attachment_key(&v.container_id, &v.ifname)).collect();
    let _lock = node::lock(pins)?;
    let mut errors = Vec::new();
    for (k, _) in pod::list_attachments(pins)? {
        if !keep.contains(&k) {
            if let Err(e) = pod::unregister(pins, &k) {
                errors.push(e.msg);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::bpf(errors.join("; ")))
    }
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
