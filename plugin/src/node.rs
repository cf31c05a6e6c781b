//! Node-wide state: reconcile the pinned config, exclusion, uplink and rule maps
//! (and the uplink attachments) to one validated config. Shared by CNI ADD and
//! `ebpf-masq apply`; idempotent, so running it twice changes nothing.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap as StdHashMap},
    fs::File,
    net::{IpAddr, Ipv4Addr},
    os::fd::AsRawFd,
    path::Path,
    time::{Duration, Instant},
};

use aya::{
    maps::{lpm_trie::Key, Array, HashMap, LpmTrie, MapData, PerCpuArray, PerCpuValues},
    programs::TcAttachType,
};
use ipnetwork::IpNetwork;

use crate::{
    bpf::{
        abi::{
            self, ExclInfo, MasqConfig as AbiConfig, PortRange, Rule4Data, Rule6Data, Rule6Info, RuleExcept4Data, RuleExcept6Data,
            RuleInfo, UplinkInfo,
        },
        loader::{self, Hook, Pins},
        maps,
    },
    config::MasqConfig,
    error::{code, Error, Result},
    netlink, pod,
};

const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Exclusive lock on one node's pin directory (flock on the bpffs directory itself,
/// so it needs no other runtime dir). Released on drop. Timeout -> CNI code 11.
pub struct NodeLock {
    _dir: File,
}

pub fn lock(pins: &Pins) -> Result<NodeLock> {
    loader::ensure_bpffs(&pins.base)?;
    std::fs::create_dir_all(&pins.root)
        .map_err(|e| Error::bpf(format!("create {}: {e}", pins.root.display())))?;
    let dir = File::open(&pins.root).map_err(|e| Error::bpf(format!("open {}: {e}", pins.root.display())))?;
    let start = Instant::now();
    loop {
        // SAFETY: plain flock(2) on an fd we own.
        let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(NodeLock { _dir: dir });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::bpf(format!("lock {}: {err}", pins.root.display())));
        }
        if start.elapsed() > LOCK_TIMEOUT {
            return Err(Error::new(
                code::TRY_AGAIN_LATER,
                format!("node lock on {} busy for {}s", pins.root.display(), LOCK_TIMEOUT.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What one uplink is, as written into the `uplinks` map.
#[derive(Debug, Clone, PartialEq)]
pub struct Uplink {
    pub name: String,
    pub ifindex: u32,
    pub info: UplinkInfo,
}

/// The uplinks a config asks for: `egressInterfaces` (or the default routes'
/// interfaces) plus every rule's `outInterface`, with the address each masquerades to.
pub fn resolve_uplinks(conf: &MasqConfig) -> Result<Vec<Uplink>> {
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
    for (name, key) in names {
        let link = netlink::get_link_by_name(&name)?
            .ok_or_else(|| Error::config(key, format!("interface {name} does not exist on this node")))?;
        let (v4, v6) = netlink::get_addresses(link.index)?;
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
    Ok(out)
}

fn map_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::bpf(format!("{what}: {e}"))
}

/// Why the node's data plane is not in place for `conf`, or None when it is: the
/// programs are loaded and attached to both hooks of every uplink `conf` names.
pub fn data_plane_problem(pins: &Pins, conf: &MasqConfig) -> Result<Option<String>> {
    if !pins.loaded() {
        return Ok(Some(format!("data plane not loaded under {}", pins.root.display())));
    }
    for up in resolve_uplinks(conf)? {
        for (prog, dir, hook) in [
            (loader::PROG_UPLINK_INGRESS, TcAttachType::Ingress, "ingress"),
            (loader::PROG_UPLINK_EGRESS, TcAttachType::Egress, "egress"),
        ] {
            if !loader::is_attached(pins, prog, up.ifindex, dir)? {
                return Ok(Some(format!("ebpf-masq is not attached to uplink {} {hook}", up.name)));
            }
        }
    }
    Ok(None)
}

/// Remove the registrations whose host veth is gone (its pod was deleted while
/// the node was down, or its DEL was lost), exactly as DEL would, under the node
/// lock. A veth of the same name with another ifindex is another pod's: the old
/// registration goes. Returns "container/ifname (veth)" of each one removed.
pub fn remove_stale(pins: &Pins) -> Result<Vec<String>> {
    if !pins.has_registrations() {
        return Ok(Vec::new());
    }
    let _lock = lock(pins)?;
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for (key, info) in pod::list_attachments(pins)? {
        let veth = pod::cstr(&info.veth_name);
        match netlink::get_link_by_name(&veth)? {
            Some(l) if l.index == info.veth_ifindex => continue,
            _ => {}
        }
        let what = format!("{}/{} ({veth})", pod::cstr(&key.container_id), pod::cstr(&key.ifname));
        match pod::unregister(pins, &key) {
            Ok(_) => removed.push(what),
            Err(e) => errors.push(format!("{what}: {}", e.msg)),
        }
    }
    if errors.is_empty() {
        Ok(removed)
    } else {
        Err(Error::bpf(errors.join("; ")))
    }
}

/// Bring the node to `conf`: load once, then config, exclusions, rules, uplinks.
/// The caller holds the node lock.
pub fn reconcile(pins: &Pins, conf: &MasqConfig) -> Result<Vec<Uplink>> {
    // Resolve everything that can fail on input before touching anything.
    let uplinks = resolve_uplinks(conf)?;
    reconcile_with(pins, conf, &uplinks)?;
    Ok(uplinks)
}

/// `reconcile` with the uplinks already resolved (CNI ADD resolves them before
/// taking the lock, and does not pay for it twice).
pub fn reconcile_with(pins: &Pins, conf: &MasqConfig, uplinks: &[Uplink]) -> Result<()> {
    if pins.loaded() {
        loader::ensure_loaded(pins, conf.nat_max_entries)?;
    } else {
        // A first load: the uplinks' TCX links are made while the programs verify.
        // One loader for the placeholders and both objects (its constructor's BTF parse once).
        let names: Vec<(u32, String)> = uplinks.iter().map(|u| (u.ifindex, u.name.clone())).collect();
        let mut ebpf_loader = loader::bare_loader();
        let placeholders = loader::placeholders(pins, &names, &mut ebpf_loader);
        let (loaded, held) = std::thread::scope(|s| {
            let held = s.spawn(|| loader::hold_uplink_hooks(pins, placeholders));
            let loaded = loader::ensure_loaded_with(pins, conf.nat_max_entries, ebpf_loader);
            (loaded, held.join().unwrap_or_default())
        });
        if let Err(e) = loaded {
            for pin in held {
                let _ = std::fs::remove_file(pin); // nothing of a failed load stays on the uplinks
            }
            return Err(e);
        }
    }
    warn_if_resized(pins, conf.nat_max_entries);
    write_config(pins, conf)?;
    write_pool(pins, conf)?;
    reconcile_exclusions(pins, conf)?;
    reconcile_services(pins, conf)?;
    reconcile_rules(pins, conf, uplinks)?;
    // An older layout's data plane (a binary before an upgrade): its pods and
    // pairs move over before the uplinks take its links over (crate::upgrade).
    let adopted = crate::upgrade::adopt(pins);
    reconcile_uplinks(pins, uplinks)?;
    crate::upgrade::finish(pins, adopted);
    // Nothing is reserved any more (host flows are tracked: host_egress); ports an
    // older version reserved are given back, so the node needs no tuning.
    match release_ports(pins) {
        Ok(given) if !given.is_empty() => log::info!("released ports {given:?} from ip_local_reserved_ports"),
        Ok(_) => {}
        Err(e) => log::warn!("reserved ports not released: {}", e.msg),
    }
    Ok(())
}

/// The NAT maps keep the size they were created with; a config asking for
/// another gets a warning (in the log, and on stderr for `apply`), not an error:
/// failing pods over it would be worse than running at the old size.
fn warn_if_resized(pins: &Pins, wanted: u32) {
    if let Ok(Some(have)) = maps::map_max_entries(pins, abi::MAP_NAT4_REV) {
        if have != wanted {
            log::warn!(
                "natMaxEntries {wanted} in the config, but the loaded NAT maps hold {have} pairs per family: \
                 the size is fixed when they are first created (`ebpf-masq uninstall`, then an ADD or `apply`, resizes)"
            );
        }
    }
}

/// natFiltering as the data plane's NAT_FILTER_* bits.
pub fn filter_bits(f: crate::config::NatFiltering) -> u32 {
    match f {
        crate::config::NatFiltering::AddressAndPortDependent => 0,
        crate::config::NatFiltering::AddressDependent => abi::NAT_FILTER_AD,
        crate::config::NatFiltering::EndpointIndependent => abi::NAT_FILTER_EI,
    }
}

fn write_config(pins: &Pins, conf: &MasqConfig) -> Result<()> {
    let mut cfg: Array<MapData, AbiConfig> = maps::open(pins, abi::MAP_CONFIG)?;
    // The shard seed and count are the loader's (built into the programs): kept.
    let old = cfg.get(&0, 0).ok();
    let (seed, shards) = old.map(|c| (c.nat_seed, c.nat_shards)).unwrap_or((0, 0));
    // Sticky: pods of another network (or of an earlier config) may still have open
    // mappings; the flag only costs a lookup for unanswered packets.
    let open = conf.nat_filtering != crate::config::NatFiltering::default()
        || conf.masquerade_rules.iter().any(|r| r.nat_filtering != crate::config::NatFiltering::default())
        || old.is_some_and(|c| c.flags & abi::MASQ_F_OPEN_MAPPINGS != 0);
    let v = AbiConfig {
        port_min: conf.port_range.0,
        port_max: conf.port_range.1,
        flags: if conf.fast_path { abi::MASQ_F_FAST_PATH } else { 0 } | if open { abi::MASQ_F_OPEN_MAPPINGS } else { 0 },
        tcp_timeout_s: conf.nat_timeouts.tcp,
        tcp_closing_timeout_s: conf.nat_timeouts.tcp_closing,
        udp_timeout_s: conf.nat_timeouts.udp,
        icmp_timeout_s: conf.nat_timeouts.icmp,
        nat_seed: seed,
        nat_shards: shards,
        skip_min: conf.node_port_range.map_or(0, |r| r.0),
        skip_max: conf.node_port_range.map_or(0, |r| r.1),
        udp_one_shot_timeout_s: conf.nat_timeouts.udp_one_shot,
    };
    cfg.set(0, v, 0).map_err(|e| map_err("write masq_config", e))
}

/// masqueradeAddress's pool (masq_pool), written before the uplinks that use it.
fn write_pool(pins: &Pins, conf: &MasqConfig) -> Result<()> {
    let mut m: Array<MapData, abi::MasqPool> = maps::open(pins, abi::MAP_MASQ_POOL)?;
    let mut p = abi::MasqPool {
        len4: conf.masquerade_pool_v4.len() as u32,
        len6: conf.masquerade_pool_v6.len() as u32,
        ..Default::default()
    };
    for (slot, a) in p.v4.iter_mut().zip(&conf.masquerade_pool_v4) {
        *slot = a.octets();
    }
    for (slot, a) in p.v6.iter_mut().zip(&conf.masquerade_pool_v6) {
        *slot = a.octets();
    }
    m.set(0, p, 0).map_err(|e| map_err("write masq_pool", e))
}

/// Desired exclusions, in the order that decides the reported reason when the
/// same CIDR is listed twice: native routing first.
pub fn desired_exclusions(conf: &MasqConfig) -> Vec<(IpNetwork, ExclInfo)> {
    let mut out: Vec<(IpNetwork, ExclInfo)> = Vec::new();
    let mut push = |n: IpNetwork, reason: u32, index: u32| {
        if !out.iter().any(|(m, _)| *m == n) {
            out.push((n, ExclInfo { reason, index }));
        }
    };
    for (i, n) in conf.native_routing_cidrs.iter().enumerate() {
        push(*n, abi::EXCL_NATIVE_ROUTING, i as u32);
    }
    for (i, n) in conf.non_masquerade_cidrs.iter().enumerate() {
        push(*n, abi::EXCL_NON_MASQ, i as u32);
    }
    if !conf.masq_link_local {
        push("169.254.0.0/16".parse().expect("static CIDR"), abi::EXCL_LINK_LOCAL, 0);
    }
    if !conf.masq_link_local_ipv6 {
        push("fe80::/10".parse().expect("static CIDR"), abi::EXCL_LINK_LOCAL, 0);
    }
    out
}

fn reconcile_exclusions(pins: &Pins, conf: &MasqConfig) -> Result<()> {
    let desired = desired_exclusions(conf);
    let mut v4: LpmTrie<MapData, [u8; 4], ExclInfo> = maps::open(pins, abi::MAP_EXCL4)?;
    let mut v6: LpmTrie<MapData, [u8; 16], ExclInfo> = maps::open(pins, abi::MAP_EXCL6)?;
    let want4: BTreeMap<(u32, [u8; 4]), ExclInfo> = desired
        .iter()
        .filter_map(|(n, i)| match n {
            IpNetwork::V4(n) => Some(((n.prefix() as u32, n.network().octets()), *i)),
            _ => None,
        })
        .collect();
    let want6: BTreeMap<(u32, [u8; 16]), ExclInfo> = desired
        .iter()
        .filter_map(|(n, i)| match n {
            IpNetwork::V6(n) => Some(((n.prefix() as u32, n.network().octets()), *i)),
            _ => None,
        })
        .collect();
    sync_lpm(&mut v4, &want4, "excl4")?;
    sync_lpm(&mut v6, &want6, "excl6")
}

/// serviceCIDRs -> svc4/svc6 (value: index in the list): destinations the fast
/// path leaves to the stack, so netfilter (kube-proxy) can DNAT them. Written
/// whether or not fastPath is on, so turning it on needs nothing else.
fn reconcile_services(pins: &Pins, conf: &MasqConfig) -> Result<()> {
    let mut want4: BTreeMap<(u32, [u8; 4]), u32> = BTreeMap::new();
    let mut want6: BTreeMap<(u32, [u8; 16]), u32> = BTreeMap::new();
    for (i, n) in conf.service_cidrs.iter().enumerate() {
        match n {
            IpNetwork::V4(n) => {
                want4.entry((n.prefix() as u32, n.network().octets())).or_insert(i as u32);
            }
            IpNetwork::V6(n) => {
                want6.entry((n.prefix() as u32, n.network().octets())).or_insert(i as u32);
            }
        }
    }
    let mut v4: LpmTrie<MapData, [u8; 4], u32> = maps::open(pins, abi::MAP_SVC4)?;
    sync_lpm(&mut v4, &want4, "svc4")?;
    let mut v6: LpmTrie<MapData, [u8; 16], u32> = maps::open(pins, abi::MAP_SVC6)?;
    sync_lpm(&mut v6, &want6, "svc6")
}

/// Make an LPM trie hold exactly `want`: insert/overwrite first, then delete the rest,
/// so a destination never passes through a moment with no exclusion.
fn sync_lpm<K: aya::Pod + Ord + Copy, V: aya::Pod + PartialEq>(
    map: &mut LpmTrie<MapData, K, V>,
    want: &BTreeMap<(u32, K), V>,
    what: &str,
) -> Result<()> {
    for ((plen, data), v) in want {
        map.insert(&Key::new(*plen, *data), v, 0).map_err(|e| map_err(&format!("insert into {what}"), e))?;
    }
    let present: Vec<Key<K>> = map.keys().collect::<std::result::Result<_, _>>().map_err(|e| map_err(what, e))?;
    for k in present {
        if !want.contains_key(&(k.prefix_len(), k.data())) {
            map.remove(&k).map_err(|e| map_err(&format!("remove from {what}"), e))?;
        }
    }
    Ok(())
}

fn reconcile_rules(pins: &Pins, conf: &MasqConfig, uplinks: &[Uplink]) -> Result<()> {
    let ifindex_of: StdHashMap<&str, u32> = uplinks.iter().map(|u| (u.name.as_str(), u.ifindex)).collect();
    let mut rules4 = BTreeMap::new();
    let mut except4 = BTreeMap::new();
    let mut rules6 = BTreeMap::new();
    let mut except6 = BTreeMap::new();
    for (id, r) in conf.masquerade_rules.iter().enumerate() {
        let id = id as u32;
        let ifindex_be = ifindex_of[r.out_interface.as_str()].to_be_bytes();
        let to_address = if r.to_address.is_some() { abi::RULE_F_TO_ADDRESS } else { 0 } | filter_bits(r.nat_filtering);
        // First rule wins for the same (interface, source).
        match r.source {
            IpNetwork::V4(src) => {
                let to_v4 = match r.to_address {
                    Some(IpAddr::V4(a)) => a.octets(),
                    _ => [0; 4],
                };
                let data = Rule4Data { ifindex_be, saddr: src.network().octets() };
                rules4.entry((32 + src.prefix() as u32, data)).or_insert(RuleInfo { id, flags: to_address, to_v4, pad: 0 });
            }
            IpNetwork::V6(src) => {
                let to_v6 = match r.to_address {
                    Some(IpAddr::V6(a)) => a.octets(),
                    _ => [0; 16],
                };
                let data = Rule6Data { ifindex_be, saddr: src.network().octets() };
                rules6.entry((32 + src.prefix() as u32, data)).or_insert(Rule6Info { id, flags: to_address, to_v6 });
            }
        }
        for e in &r.except {
            match e {
                IpNetwork::V4(e) => {
                    let d = RuleExcept4Data { rule_id_be: id.to_be_bytes(), daddr: e.network().octets() };
                    except4.insert((32 + e.prefix() as u32, d), 1u32);
                }
                IpNetwork::V6(e) => {
                    let d = RuleExcept6Data { rule_id_be: id.to_be_bytes(), daddr: e.network().octets() };
                    except6.insert((32 + e.prefix() as u32, d), 1u32);
                }
            }
        }
    }
    // Exceptions first, so a new rule never matches before its exceptions exist.
    let mut m: LpmTrie<MapData, RuleExcept4Data, u32> = maps::open(pins, abi::MAP_RULE_EXCEPT4)?;
    sync_lpm(&mut m, &except4, "rule_except4")?;
    let mut m: LpmTrie<MapData, RuleExcept6Data, u32> = maps::open(pins, abi::MAP_RULE_EXCEPT6)?;
    sync_lpm(&mut m, &except6, "rule_except6")?;
    let mut m: LpmTrie<MapData, Rule4Data, RuleInfo> = maps::open(pins, abi::MAP_RULES4)?;
    sync_lpm(&mut m, &rules4, "rules4")?;
    let mut m: LpmTrie<MapData, Rule6Data, Rule6Info> = maps::open(pins, abi::MAP_RULES6)?;
    sync_lpm(&mut m, &rules6, "rules6")
}

fn reconcile_uplinks(pins: &Pins, uplinks: &[Uplink]) -> Result<()> {
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
    let map: HashMap<MapData, u32, UplinkInfo> = maps::open(pins, abi::MAP_UPLINKS)?;
    let present: Vec<u32> = map.keys().collect::<std::result::Result<_, _>>().map_err(|e| map_err("uplinks", e))?;
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
    let map: HashMap<MapData, u32, UplinkInfo> = maps::open(pins, abi::MAP_UPLINKS)?;
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

/// Keep the host from auto-binding ports in our range, so a masqueraded flow
/// never shares a tuple with a host socket: add the range to
/// net.ipv4.ip_local_reserved_ports (which also covers IPv6) of this netns, and
/// record in `reserved_ports` exactly the ports this added (the range minus what
/// was reserved already, by the admin or an earlier portRange), so that
/// `release_ports` gives back those and nothing else.
pub fn reserve_ports(pins: &Pins, (lo, hi): (u16, u16)) -> Result<()> {
    let current = netlink::read_sysctl(RESERVED_PORTS)?;
    let added = uncovered_port_ranges(current.trim(), (lo, hi));
    if added.is_empty() {
        return Ok(());
    }
    let mut map: Array<MapData, PortRange> = maps::open(pins, abi::MAP_RESERVED_PORTS)?;
    let free: Vec<u32> =
        (0..abi::RESERVED_PORTS_MAX).filter(|&i| map.get(&i, 0).is_ok_and(|r| r == PortRange::default())).collect();
    let mut free = free.into_iter();
    // Record first, then write the sysctl: a crash in between leaves a record of
    // ports that are not reserved, which release_ports subtracts harmlessly.
    for &(a, b) in &added {
        match free.next() {
            Some(i) => map.set(i, PortRange { lo: a, hi: b }, 0).map_err(|e| map_err("write reserved_ports", e))?,
            None => log::warn!("reserved_ports full: ports {a}-{b} stay reserved after uninstall"),
        }
    }
    netlink::write_sysctl(RESERVED_PORTS, &merge_port_ranges(current.trim(), (lo, hi)))
}

const RESERVED_PORTS: &str = "net/ipv4/ip_local_reserved_ports";

/// Undo `reserve_ports` at uninstall: take every range the plugin added out of
/// ip_local_reserved_ports (ports reserved by anyone else stay) and forget them.
/// Returns the ranges given back.
pub fn release_ports(pins: &Pins) -> Result<Vec<(u16, u16)>> {
    let mut map: Array<MapData, PortRange> = maps::open(pins, abi::MAP_RESERVED_PORTS)?;
    let mine: Vec<(u32, PortRange)> = (0..abi::RESERVED_PORTS_MAX)
        .filter_map(|i| map.get(&i, 0).ok().map(|r| (i, r)))
        .filter(|(_, r)| *r != PortRange::default())
        .collect();
    if mine.is_empty() {
        return Ok(Vec::new());
    }
    let current = netlink::read_sysctl(RESERVED_PORTS)?;
    let left = mine.iter().fold(current.trim().to_string(), |acc, (_, r)| subtract_port_range(&acc, (r.lo, r.hi)));
    if left != current.trim() {
        netlink::write_sysctl(RESERVED_PORTS, &left)?;
    }
    for (i, _) in &mine {
        map.set(*i, PortRange::default(), 0).map_err(|e| map_err("clear reserved_ports", e))?;
    }
    Ok(mine.iter().map(|(_, r)| (r.lo, r.hi)).collect())
}

/// The parts of [lo, hi] that a sysctl port list ("1,5-9") does not cover.
pub fn uncovered_port_ranges(current: &str, (lo, hi): (u16, u16)) -> Vec<(u16, u16)> {
    let mut taken = parse_port_ranges(current);
    taken.sort();
    let mut out = Vec::new();
    let mut next = lo as u32; // first port of [lo, hi] not yet accounted for
    for (a, b) in taken {
        let (a, b) = (a as u32, b as u32);
        if b < next || a > hi as u32 {
            continue;
        }
        if a > next {
            out.push((next as u16, (a - 1) as u16));
        }
        next = next.max(b + 1);
    }
    if next <= hi as u32 {
        out.push((next as u16, hi));
    }
    out
}

fn parse_port_ranges(list: &str) -> Vec<(u16, u16)> {
    list.split(',')
        .filter_map(|p| {
            let p = p.trim();
            if p.is_empty() {
                return None;
            }
            match p.split_once('-') {
                Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
                None => p.parse().ok().map(|v| (v, v)),
            }
        })
        .collect()
}

fn format_port_ranges(ranges: &[(u16, u16)]) -> String {
    ranges
        .iter()
        .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
        .collect::<Vec<_>>()
        .join(",")
}

/// A sysctl port list ("1,5-9") without one range, normalized.
pub fn subtract_port_range(current: &str, (lo, hi): (u16, u16)) -> String {
    let mut out = Vec::new();
    for (a, b) in parse_port_ranges(current) {
        if b < lo || a > hi {
            out.push((a, b));
            continue;
        }
        if a < lo {
            out.push((a, lo - 1));
        }
        if b > hi {
            out.push((hi + 1, b));
        }
    }
    // Merge adjacent pieces back the way merge_port_ranges would print them.
    match out.split_first() {
        None => String::new(),
        Some((&first, rest)) => rest.iter().fold(format_port_ranges(&[first]), |acc, r| {
            merge_port_ranges(&acc, *r)
        }),
    }
}

/// Union of a sysctl port list ("1,5-9") and one range, normalized.
pub fn merge_port_ranges(current: &str, add: (u16, u16)) -> String {
    let mut ranges = parse_port_ranges(current);
    ranges.push(add);
    ranges.sort();
    let mut out: Vec<(u16, u16)> = Vec::new();
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a as u32 <= last.1 as u32 + 1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    format_port_ranges(&out)
}

/// Sum of every CPU's value of a per-CPU u64 array.
pub fn read_counters(pins: &Pins, name: &str) -> Result<Vec<u64>> {
    let arr: PerCpuArray<MapData, u64> = maps::open(pins, name)?;
    let mut out = Vec::new();
    for v in arr.iter() {
        let v: PerCpuValues<u64> = v.map_err(|e| map_err(name, e))?;
        out.push(v.iter().sum());
    }
    Ok(out)
}

pub use crate::bpf::sys::ncpus;

pub fn ipv4(b: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(b)
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_ranges_cases() {
        assert_eq!(merge_port_ranges("", (1024, 29999)), "1024-29999");
        assert_eq!(merge_port_ranges("1024-29999", (1024, 29999)), "1024-29999");
        assert_eq!(merge_port_ranges("80,8080", (1024, 29999)), "80,1024-29999");
        assert_eq!(merge_port_ranges("1000-2000,30000", (1500, 29999)), "1000-30000");
        assert_eq!(merge_port_ranges("5", (6, 6)), "5-6");
        assert_eq!(merge_port_ranges("garbage,7", (9, 9)), "7,9");
    }

    #[test]
    fn subtract_range_cases() {
        assert_eq!(subtract_port_range("1024-29999", (1024, 29999)), "");
        assert_eq!(subtract_port_range("80,1024-29999", (1024, 29999)), "80");
        assert_eq!(subtract_port_range("1000-30000", (1500, 29999)), "1000-1499,30000");
        assert_eq!(subtract_port_range("5-6", (6, 6)), "5");
        assert_eq!(subtract_port_range("7,9", (1, 3)), "7,9");
        // merge then subtract gives the original back (for ports outside the range)
        assert_eq!(subtract_port_range(&merge_port_ranges("80,30080", (1024, 29999)), (1024, 29999)), "80,30080");
    }

    #[test]
    fn uncovered_ranges_are_what_reserving_adds() {
        assert_eq!(uncovered_port_ranges("", (1024, 29999)), vec![(1024, 29999)]);
        assert_eq!(uncovered_port_ranges("1024-29999", (1024, 29999)), vec![]);
        assert_eq!(uncovered_port_ranges("1000-2000", (1500, 2999)), vec![(2001, 2999)]);
        assert_eq!(uncovered_port_ranges("2000-2100,1500,2500-4000", (1500, 2999)), vec![(1501, 1999), (2101, 2499)]);
        assert_eq!(uncovered_port_ranges("80,30080", (1024, 29999)), vec![(1024, 29999)]);
        assert_eq!(uncovered_port_ranges("65535", (65000, 65535)), vec![(65000, 65534)]);
        assert_eq!(uncovered_port_ranges("garbage,10-20", (15, 25)), vec![(21, 25)]);
        // Giving back what was added restores the list exactly, whatever overlapped.
        for (before, range, normalized) in [
            ("1000-2000", (1500, 2999), "1000-2000"),
            ("2000-2100,1500", (1500, 2999), "1500,2000-2100"),
            ("80,30080", (1024, 29999), "80,30080"),
            ("", (1, 65535), ""),
        ] {
            let after = merge_port_ranges(before, range);
            let back = uncovered_port_ranges(before, range).iter().fold(after, |acc, r| subtract_port_range(&acc, *r));
            assert_eq!(back, normalized, "{before} + {range:?}");
        }
    }

    #[test]
    fn exclusions_dedupe_and_link_local() {
        let mut c = MasqConfig {
            native_routing_cidrs: vec!["10.0.0.0/8".parse().unwrap()],
            non_masquerade_cidrs: vec!["10.0.0.0/8".parse().unwrap(), "192.168.0.0/16".parse().unwrap()],
            ..Default::default()
        };
        let d = desired_exclusions(&c);
        assert_eq!(d.len(), 4); // 10/8 once (native wins), 192.168/16, 169.254/16, fe80::/10
        assert_eq!(d[0].1.reason, abi::EXCL_NATIVE_ROUTING);
        assert_eq!(d[1].1, ExclInfo { reason: abi::EXCL_NON_MASQ, index: 1 });
        c.masq_link_local = true;
        c.masq_link_local_ipv6 = true;
        assert_eq!(desired_exclusions(&c).len(), 2);
    }
}
