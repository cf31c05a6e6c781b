//! The agent's config: --conf and ip-masq-agent's file read, checked and applied to the
//! node and the chained entry when new and valid; the config in force kept otherwise.

use super::*;

/// Read a file the agent applies: its bytes, None when it does not exist (only
/// asked for ip-masq-agent's, whose absence means its defaults).
fn read_input(path: &Path, absent_ok: bool) -> std::result::Result<Option<Vec<u8>>, String> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if absent_ok && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("read {}: {e}", path.display())),
    }
}

/// Read --conf (and ip-masq-agent's file); apply them when new and valid, keep
/// the config in force otherwise. True when a new config was applied.
pub(super) fn reload_config(a: &AgentArgs, state: &Mutex<State>) -> bool {
    let ipm_file = a.ip_masq_agent_file();
    let read = read_input(a.conf(), false).and_then(|conf| {
        let ipm = ipm_file.as_deref().map(|f| read_input(f, true)).transpose()?;
        Ok(Input { conf: conf.unwrap_or_default(), ip_masq_agent: ipm })
    });
    let input = match read {
        Ok(i) => i,
        Err(why) => {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            if st.rejected.as_ref().map(|(_, w)| w != &why).unwrap_or(true) {
                log::error!("agent=config result=unreadable err={why:?}");
                st.rejections += 1;
            }
            st.rejected = Some((Input::default(), why));
            return false;
        }
    };
    let first = {
        let st = state.lock().unwrap_or_else(|p| p.into_inner());
        let known = st.in_force.as_ref().map(|(b, _, _)| b == &input).unwrap_or(false)
            || st.rejected.as_ref().map(|(b, _)| b == &input).unwrap_or(false);
        if known {
            return false;
        }
        st.in_force.is_none()
    };
    let bytes = &input.conf;
    let checked = config::parse_conf_file(bytes)
        .and_then(|conf| install::entry_from(Some(bytes), None).map(|entry| (conf, entry)))
        .and_then(|(conf, entry)| match (&ipm_file, &input.ip_masq_agent) {
            (Some(file), Some(ipm)) => with_ip_masq_agent(a, file, ipm.as_deref(), first, conf, entry),
            _ => Ok((conf, entry, None, None)),
        });
    let result = checked.and_then(|(conf, entry, resync, refused)| {
        apply_node(&conf).map(|()| (conf, entry, resync, refused))
    });
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok((conf, entry, resync, refused)) => {
            log::info!(
                "agent=config result={} conf={} pins={}",
                if st.in_force.is_none() { "applied" } else { "reloaded" },
                a.conf().display(),
                conf.masq.pin_path.display()
            );
            if let Some(ipm) = &conf.masq.ip_masq_agent {
                let cidrs: Vec<String> = ipm.non_masquerade_cidrs.iter().map(|c| c.to_string()).collect();
                log::info!(
                    "agent=ip-masq-agent result=applied file={:?} nonMasqueradeCIDRs={cidrs:?} masqLinkLocal={} \
                     masqLinkLocalIPv6={} resyncInterval={:?}",
                    ipm.describe(),
                    ipm.masq_link_local,
                    ipm.masq_link_local_ipv6,
                    resync.unwrap_or_default()
                );
            }
            memlimit::check(conf.masq.nat_max_entries);
            if st.in_force.is_some() {
                st.reloads += 1;
            }
            if let Some(why) = &refused {
                log::error!("agent=config result=rejected conf={} err={why:?} in_force=fallback", a.conf().display());
                st.rejections += 1;
            }
            st.rejected = refused.map(|why| (input.clone(), why));
            st.in_force = Some((input, conf, entry));
            st.resync = resync;
            true
        }
        Err(e) => {
            let why = format!("{} (code {})", e.msg, e.code);
            log::error!(
                "agent=config result=rejected conf={} err={why:?} in_force={}",
                a.conf().display(),
                if st.in_force.is_some() { "previous" } else { "none" }
            );
            st.rejections += 1;
            st.rejected = Some((input, why));
            false
        }
    }
}

/// `conf` and its chained entry with ip-masq-agent's file (`bytes`; None: it is
/// absent, so ip-masq-agent's defaults) as `ipMasqAgent`; and its resyncInterval.
/// A refused file is an error, unless nothing is in force (`first`): then the
/// node still gets a list, the one its chained entry keeps from this file (what
/// was in force before the agent started) or else ip-masq-agent's defaults, and
/// the last value is why the file was refused.
fn with_ip_masq_agent(
    a: &AgentArgs,
    file: &Path,
    bytes: Option<&[u8]>,
    first: bool,
    mut conf: NetConf,
    mut entry: Map<String, Value>,
) -> Result<(NetConf, Map<String, Value>, Option<Duration>, Option<String>)> {
    let all_reserved = a.ip_masq_agent_all_reserved_ranges;
    let defaults = config::IpMasqAgentFile::defaults(all_reserved);
    let (ipm, resync, refused) = match bytes.map(|b| config::parse_ip_masq_agent(b, all_reserved)) {
        None => (config::IpMasqAgent::from_file(file.to_path_buf(), true, &defaults), defaults.resync_interval, None),
        Some(Ok(parsed)) => {
            // Once per distinct input: an unchanged one is not parsed again.
            for k in &parsed.ignored_keys {
                log::warn!(
                    "agent=ip-masq-agent file={} ignored_key={} (ip-masq-agent ignores it too: it has no effect)",
                    file.display(),
                    k.describe()
                );
            }
            let ipm = config::IpMasqAgent::from_file(file.to_path_buf(), false, &parsed);
            (ipm, parsed.resync_interval, None)
        }
        Some(Err(e)) => {
            let e = Error::new(e.code, format!("ip-masq-agent config {}: {}", file.display(), e.msg));
            if !first {
                return Err(e);
            }
            let kept = install::chained_entry(&a.cni_conf_dir, a.conflist.as_deref())
                .and_then(|m| config::ip_masq_agent_of_entry(&m))
                .filter(|k| k.file == file);
            let in_force = if kept.is_some() { "the list the chained entry kept from it" } else { "ip-masq-agent's defaults" };
            let ipm = kept.unwrap_or_else(|| config::IpMasqAgent::refused(file.to_path_buf(), all_reserved));
            (ipm, defaults.resync_interval, Some(format!("{} (code {}); in force instead: {in_force}", e.msg, e.code)))
        }
    };
    if (conf.masq.masq_link_local, conf.masq.masq_link_local_ipv6) != (ipm.masq_link_local, ipm.masq_link_local_ipv6) {
        log::warn!(
            "agent=ip-masq-agent masqLinkLocal={} masqLinkLocalIPv6={} from {} replace the network's {} and {}",
            ipm.masq_link_local,
            ipm.masq_link_local_ipv6,
            ipm.describe(),
            conf.masq.masq_link_local,
            conf.masq.masq_link_local_ipv6
        );
    }
    entry.insert(config::key::IP_MASQ_AGENT.into(), config::ip_masq_agent_to_json(&ipm));
    conf.masq.ip_masq_agent = Some(ipm);
    Ok((conf, entry, Some(resync), refused))
}

/// `apply`: bring the node to `conf` under the node lock.
pub(super) fn apply_node(conf: &NetConf) -> Result<()> {
    let pins = Pins::new(&conf.masq.pin_path);
    let _lock = node::lock(&pins)?;
    node::reconcile(&pins, &conf.masq).map(|_| ())
}
