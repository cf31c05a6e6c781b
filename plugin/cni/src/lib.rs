//! The CNI verbs. Stdout is the protocol: exactly one JSON reply (or nothing for
//! DEL/CHECK/STATUS/GC success); logs go to `logFile`.

use std::{collections::HashSet, io::Read, net::IpAddr, time::Instant};

use ebpf_masq_core::{
    bpf::{abi, loader::Pins},
    config::{self, NetConf, ValidAttachment},
    error::{code, Error, Result},
    logging,
    netlink,
    node::{self, register::PodAdd},
    pod,
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

fn cmd_add(env: &CniEnv, conf: &NetConf, pins: &Pins) -> Result<serde_json::Value> {
    env.require_ids()?;
    env.require("CNI_NETNS", &env.netns)?;
    let req = PodAdd {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        args: env.args.clone(),
        found: false,
        cached_at: None,
    };
    node::register::add_pod(&req, conf, pins)?;
    // prevResult passed through unchanged (add_pod has checked it is there).
    Ok(conf.prev_result.clone().unwrap_or_default())
}

fn cmd_del(env: &CniEnv, pins: &Pins) -> Result<()> {
    env.require_ids()?;
    if !pins.root.exists() {
        return Ok(());
    }
    let key = pod::attachment_key(&env.container_id, &env.ifname);
    let _lock = node::lock(pins)?;
    pod::unregister(pins, &key)?;
    // Until the main plugin's DEL and libcni's removal of the cached result, the
    // agent must not take the pod for one whose ADD never reached us.
    node::deleted::mark(pins, &env.container_id, &env.ifname)
}

fn cmd_check(env: &CniEnv, conf: &NetConf, pins: &Pins) -> Result<()> {
    env.require_ids()?;
    let (_, prev) = node::register::prev_result(conf)?;
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
    let port_limit = node::register::port_limit_of(conf)?;
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
    use ebpf_masq_core::bpf::loader;
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
    ebpf_masq_core::bpf::loader::ensure_bpffs(&pins.base).map_err(|e| Error::new(50, e.msg))
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
