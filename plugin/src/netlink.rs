//! A small synchronous, typed rtnetlink layer (links, default routes,
//! addresses), plus network-namespace and sysctl helpers.
//!
//! Verbs follow netavark's `netlink_route.rs` (`get_link`, `dump_*`). tokio is
//! an implementation detail: every public function builds a current-thread
//! runtime, opens a fresh rtnetlink socket, blocks on the request and tears
//! both down again. Building a current-thread runtime costs an epoll fd and an
//! eventfd, which is negligible for a CNI plugin making a handful of calls, and
//! avoids keeping runtimes in thread-locals (whose destructors run at thread
//! exit, which `in_netns` threads do all the time). If a function is called
//! from inside a tokio runtime it runs on a helper thread instead of panicking.
//!
//! # Network namespaces are per *thread*
//!
//! On Linux the network namespace is an attribute of each thread, not of the
//! process (`unshare(CLONE_NEWNET)` / `setns(.., CLONE_NEWNET)` change only
//! the calling thread; new threads and forked children inherit the netns of
//! the thread that created them). What that means here:
//!
//! * A netlink socket is bound to the netns of the thread that creates it.
//!   Because every call here opens its own socket on the calling thread,
//!   every function operates on the **calling thread's** netns.
//! * `/proc/sys/net/...` is also resolved against the **calling thread's**
//!   netns: the sysctl root's lookup uses `current->nsproxy->net_ns` (and
//!   cached dentries are revalidated per netns), so opening
//!   `/proc/sys/net/ipv4/ip_local_reserved_ports` from a thread that entered
//!   another netns reads/writes that netns' value, even though the process'
//!   main thread is elsewhere. There is no `/proc/thread-self/sys`; plain
//!   `/proc/sys` is the per-thread view. (The test
//!   `sysctl_is_per_thread_netns` checks this.) An fd keeps referring to
//!   the netns it was opened in.
//! * By contrast `/proc/net` is a symlink to `/proc/self/net`, which shows the
//!   netns of the process' **main thread** (thread-group leader); use
//!   `/proc/thread-self/net` for the calling thread's view. `/sys/class/net`
//!   shows the netns sysfs was mounted in, regardless of thread.
//! * `in_netns` therefore runs its closure on a fresh OS thread that enters
//!   the target netns and then exits, so no thread is ever left in a foreign
//!   netns and the caller's netns never changes.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use futures::future::Either;
use futures::TryStreamExt;
use netlink_packet_route::address::{
    AddressAttribute, AddressFlag, AddressHeaderFlag, AddressMessage,
};
use netlink_packet_route::link::{LinkAttribute, LinkFlag, LinkInfo as NlLinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAttribute, RouteHeader, RouteMessage, RouteType};
use nix::sched::{setns, CloneFlags};
use rtnetlink::IpVersion;

use crate::error::{code, Context, Error, Result};

/// `ARPHRD_ETHER`: Ethernet-like link layer (veth, bridge, physical NICs...).
pub const ARPHRD_ETHER: u16 = 1;
/// `ARPHRD_NONE`: no link-layer header (wireguard, TUN, wireguard-go).
pub const ARPHRD_NONE: u16 = 65534;
/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
const IFNAME_MAX: usize = 15;
const RT_TABLE_MAIN: u32 = RouteHeader::RT_TABLE_MAIN as u32;

#[derive(Debug, Clone, PartialEq)]
pub struct LinkInfo {
    pub index: u32,
    pub name: String,
    /// IFLA_INFO_KIND: "veth", "bridge", "wireguard", "tun"... (None for
    /// physical NICs and loopback).
    pub kind: Option<String>,
    /// ARPHRD_* from ifi_type (1 = ETHER, 65534 = NONE for wireguard-go/TUN,
    /// 772 = loopback). Values netlink-packet-route does not know are
    /// reported as 65535 (ARPHRD_VOID).
    pub link_type: u16,
    /// Administratively up (IFF_UP), not necessarily with carrier.
    pub is_up: bool,
    /// IFLA_MASTER (bridge/bond/vrf the link is enslaved to).
    pub master: Option<u32>,
    /// IFLA_LINK (for a veth: peer's ifindex, possibly in another netns;
    /// for vlan/macvlan: the lower device). Absent when it equals `index`.
    pub peer_ifindex: Option<u32>,
    /// IFLA_LINK_NETNSID: id (as seen from this netns) of the netns
    /// `peer_ifindex` lives in, when that is not this netns.
    pub link_netnsid: Option<i32>,
    pub mtu: u32,
    /// IFLA_ADDRESS when it is an Ethernet (6-byte) address.
    pub mac: Option<[u8; 6]>,
}

impl LinkInfo {
    /// True for links without an Ethernet header (ARPHRD_NONE as used by
    /// wireguard/TUN, and any other non-Ethernet type such as loopback or
    /// IP-in-IP tunnels): packets start directly with the IP header.
    pub fn is_l3(&self) -> bool {
        self.link_type != ARPHRD_ETHER
    }

    fn from_message(msg: LinkMessage) -> LinkInfo {
        let mut info = LinkInfo {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            link_type: u16::from(msg.header.link_layer_type),
            is_up: msg.header.flags.contains(&LinkFlag::Up),
            master: None,
            peer_ifindex: None,
            link_netnsid: None,
            mtu: 0,
            mac: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => info.name = n,
                LinkAttribute::Mtu(m) => info.mtu = m,
                LinkAttribute::Address(a) => info.mac = <[u8; 6]>::try_from(a.as_slice()).ok(),
                LinkAttribute::Controller(m) => info.master = Some(m),
                LinkAttribute::Link(l) => info.peer_ifindex = Some(l),
                LinkAttribute::NetnsId(id) => info.link_netnsid = Some(id),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        if let NlLinkInfo::Kind(k) = i {
                            info.kind = Some(k.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        info
    }
}

// ---------------------------------------------------------------------------
// runtime / connection plumbing

/// Run `work` against a fresh rtnetlink connection opened on the calling
/// thread (hence in the calling thread's netns), blocking until it is done.
fn run<T, F, Fut>(work: F) -> Result<T>
where
    T: Send,
    F: FnOnce(rtnetlink::Handle) -> Fut + Send,
    Fut: Future<Output = Result<T>>,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        // block_on inside a runtime would panic; a helper thread inherits our
        // netns, so the result is the same.
        return std::thread::scope(|s| match s.spawn(move || run_here(work)).join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        });
    }
    run_here(work)
}

fn run_here<T, F, Fut>(work: F) -> Result<T>
where
    F: FnOnce(rtnetlink::Handle) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .ctx(code::NETLINK, "cannot create runtime for netlink")?;
    rt.block_on(async move {
        let (conn, handle, _messages) =
            rtnetlink::new_connection().ctx(code::NETLINK, "cannot open rtnetlink socket")?;
        let work = Box::pin(work(handle));
        match futures::future::select(work, Box::pin(conn)).await {
            Either::Left((r, _conn)) => r,
            Either::Right(((), _)) => {
                Err(Error::netlink("rtnetlink connection closed unexpectedly"))
            }
        }
    })
}

/// Negative errno carried by a netlink error reply, as a positive errno.
fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => Some(-m.raw_code()),
        _ => None,
    }
}

fn nl_err(what: impl std::fmt::Display, e: rtnetlink::Error) -> Error {
    match &e {
        rtnetlink::Error::NetlinkError(m) => Error::netlink(format!("{what}: {}", m.to_io())),
        _ => Error::netlink(format!("{what}: {e}")),
    }
}

// ---------------------------------------------------------------------------
// links

/// The link called `name` in the calling thread's netns, or None. Names that
/// cannot exist (empty, longer than 15 bytes, containing '/' or whitespace)
/// give Ok(None).
pub fn get_link_by_name(name: &str) -> Result<Option<LinkInfo>> {
    if name.is_empty()
        || name.len() > IFNAME_MAX
        || name.contains('/')
        || name.chars().any(|c| c.is_whitespace() || c == '\0')
    {
        return Ok(None);
    }
    let owned = name.to_string();
    run(move |handle| async move {
        let mut links = handle.link().get().match_name(owned).execute();
        match links.try_next().await {
            Ok(m) => Ok(m.map(LinkInfo::from_message)),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(nl_err(format!("cannot get link {name}"), e)),
        }
    })
}

/// The link with ifindex `index` in the calling thread's netns, or None.
pub fn get_link_by_index(index: u32) -> Result<Option<LinkInfo>> {
    if index == 0 {
        return Ok(None);
    }
    run(move |handle| async move {
        let mut links = handle.link().get().match_index(index).execute();
        match links.try_next().await {
            Ok(m) => Ok(m.map(LinkInfo::from_message)),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(nl_err(format!("cannot get link with ifindex {index}"), e)),
        }
    })
}

async fn dump_links_with(handle: &rtnetlink::Handle) -> Result<Vec<LinkInfo>> {
    handle
        .link()
        .get()
        .execute()
        .map_ok(LinkInfo::from_message)
        .try_collect()
        .await
        .map_err(|e| nl_err("cannot dump links", e))
}

/// All links of the calling thread's netns, in kernel (ifindex) order.
pub fn dump_links() -> Result<Vec<LinkInfo>> {
    run(|handle| async move { dump_links_with(&handle).await })
}

// ---------------------------------------------------------------------------
// routes

fn route_table(r: &RouteMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(r.header.table as u32)
}

/// Output ifindexes of a default route (its RTA_OIF and any multipath
/// nexthops' devices).
fn default_route_oifs(r: &RouteMessage, out: &mut Vec<u32>) {
    if r.header.destination_prefix_length != 0
        || r.header.kind != RouteType::Unicast
        || route_table(r) != RT_TABLE_MAIN
    {
        return;
    }
    for attr in &r.attributes {
        match attr {
            RouteAttribute::Oif(i) => out.push(*i),
            RouteAttribute::MultiPath(hops) => {
                for hop in hops {
                    if hop.interface_index != 0 {
                        out.push(hop.interface_index);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Interfaces of the default routes (0.0.0.0/0 and ::/0, main table, unicast
/// only — unreachable/blackhole defaults are ignored), deduplicated, sorted
/// by name. Includes multipath nexthops' devices. Routes using nexthop
/// objects are covered as long as `net.ipv4.nexthop_compat_mode` is 1 (the
/// default), which makes the kernel also report their devices.
pub fn default_route_interfaces() -> Result<Vec<String>> {
    run(|handle| async move {
        let mut oifs = Vec::new();
        for (ver, fam) in [(IpVersion::V4, "IPv4"), (IpVersion::V6, "IPv6")] {
            let mut routes = handle.route().get(ver).execute();
            while let Some(r) = routes
                .try_next()
                .await
                .map_err(|e| nl_err(format!("cannot dump {fam} routes"), e))?
            {
                default_route_oifs(&r, &mut oifs);
            }
        }
        // Look up only the routes' devices: dumping every link costs O(pods) per ADD.
        oifs.sort();
        oifs.dedup();
        let mut names = Vec::new();
        for index in oifs {
            let mut links = handle.link().get().match_index(index).execute();
            match links.try_next().await {
                Ok(Some(m)) => names.push(LinkInfo::from_message(m).name),
                Ok(None) => {}
                Err(e) if errno(&e) == Some(libc::ENODEV) => {}
                Err(e) => return Err(nl_err(format!("cannot get link with ifindex {index}"), e)),
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    })
}

// ---------------------------------------------------------------------------
// addresses

fn addr_has_flag(m: &AddressMessage, hf: AddressHeaderFlag, f: AddressFlag) -> bool {
    m.header.flags.contains(&hf)
        || m.attributes.iter().any(|a| matches!(a, AddressAttribute::Flags(fl) if fl.contains(&f)))
}

fn is_ipv6_link_local(a: &Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

/// Addresses on an interface of the calling thread's netns: (ipv4 list, ipv6
/// list), each in kernel order, excluding IPv6 link-local (fe80::/10) and
/// IPv6 addresses flagged tentative, deprecated or dadfailed. IPv4 primaries
/// come first, secondaries (IFA_F_SECONDARY) last. An unknown ifindex gives
/// two empty lists. The local address (IFA_LOCAL) is reported for
/// point-to-point addresses, not the peer.
pub fn get_addresses(ifindex: u32) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>)> {
    run(move |handle| async move {
        let mut msgs = handle.address().get().set_link_index_filter(ifindex).execute();
        let mut v4: Vec<(bool, Ipv4Addr)> = Vec::new();
        let mut v6 = Vec::new();
        while let Some(m) = msgs
            .try_next()
            .await
            .map_err(|e| nl_err(format!("cannot dump addresses of ifindex {ifindex}"), e))?
        {
            let local = m.attributes.iter().find_map(|a| match a {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            });
            let addr = local.or_else(|| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })
            });
            match addr {
                Some(IpAddr::V4(a)) => {
                    let secondary =
                        addr_has_flag(&m, AddressHeaderFlag::Secondary, AddressFlag::Secondary);
                    v4.push((secondary, a));
                }
                Some(IpAddr::V6(a)) => {
                    if is_ipv6_link_local(&a)
                        || addr_has_flag(&m, AddressHeaderFlag::Tentative, AddressFlag::Tentative)
                        || addr_has_flag(&m, AddressHeaderFlag::Deprecated, AddressFlag::Deprecated)
                        || addr_has_flag(&m, AddressHeaderFlag::Dadfailed, AddressFlag::Dadfailed)
                    {
                        continue;
                    }
                    v6.push(a);
                }
                None => {}
            }
        }
        // Stable: keeps kernel order within primaries and within secondaries.
        v4.sort_by_key(|(secondary, _)| *secondary);
        Ok((v4.into_iter().map(|(_, a)| a).collect(), v6))
    })
}

// ---------------------------------------------------------------------------
// tc filters

/// Whether a tc filter with priority (preference) `priority` is attached to
/// the clsact `ingress` (true) or egress (false) hook of `ifindex` in the
/// calling thread's netns. A missing device or missing clsact qdisc gives
/// Ok(false). Any filter kind counts; we identify ours by priority alone.
pub fn has_tc_filter(ifindex: u32, ingress: bool, priority: u16) -> Result<bool> {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
    use netlink_packet_route::tc::{TcHandle, TcMessage};
    use netlink_packet_route::RouteNetlinkMessage;

    let Ok(index) = i32::try_from(ifindex) else { return Ok(false) };
    let hook = if ingress { "ingress" } else { "egress" };
    let what = format!("cannot list tc {hook} filters of ifindex {ifindex}");
    run(move |mut handle| async move {
        // rtnetlink's TrafficFilterGetRequest cannot set a clsact parent, so
        // build the RTM_GETTFILTER dump by hand.
        let mut msg = TcMessage::default();
        msg.header.index = index;
        msg.header.parent = TcHandle {
            major: TcHandle::CLSACT.major,
            minor: if ingress { TcHandle::MIN_INGRESS } else { TcHandle::MIN_EGRESS },
        };
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetTrafficFilter(msg));
        req.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut replies = handle.request(req).map_err(|e| nl_err(&what, e))?;
        let mut found = false;
        while let Some(reply) = futures::StreamExt::next(&mut replies).await {
            match reply.payload {
                // tcm_info = (priority << 16) | protocol
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewTrafficFilter(f))
                    if (f.header.info >> 16) as u16 == priority =>
                {
                    found = true;
                }
                NetlinkPayload::Error(e) => {
                    let errno = -e.raw_code();
                    if errno == libc::ENODEV || errno == libc::EINVAL || errno == libc::ENOENT {
                        return Ok(false);
                    }
                    return Err(Error::netlink(format!("{what}: {}", e.to_io())));
                }
                _ => {}
            }
        }
        Ok(found)
    })
}

// ---------------------------------------------------------------------------
// network namespaces

fn netns_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(code::INVALID_ENV, format!("cannot enter netns {}: {e}", path.display()))
}

fn in_netns_file<T: Send, F: FnOnce() -> Result<T> + Send>(
    path: &Path,
    ns: File,
    f: F,
) -> Result<T> {
    std::thread::scope(|s| {
        let thread = std::thread::Builder::new()
            .name("ebpf-masq-netns".into())
            .spawn_scoped(s, move || {
                setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| netns_err(path, e))?;
                drop(ns);
                f()
            })
            .map_err(|e| {
                Error::new(
                    code::IO_FAILURE,
                    format!("cannot start thread to enter netns {}: {e}", path.display()),
                )
            })?;
        match thread.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// Run `f` on a new OS thread that has entered the network namespace at
/// `netns_path` (setns(CLONE_NEWNET)), and return its result. The calling
/// thread's netns is never changed; panics in `f` are propagated. Only the
/// netns is switched: mount namespace, and hence /sys, stay the caller's.
pub fn in_netns<T: Send, F: FnOnce() -> Result<T> + Send>(netns_path: &Path, f: F) -> Result<T> {
    let ns = File::open(netns_path).map_err(|e| netns_err(netns_path, e))?;
    in_netns_file(netns_path, ns, f)
}

/// For a container interface `ifname` inside netns `netns_path` that is one
/// end of a veth pair, the host-side peer's ifindex (IFLA_LINK of the
/// container end; an ifindex in the netns the peer lives in, normally the
/// caller's). Returns Ok(None) if the netns path or the interface does not
/// exist, the interface is not a veth, or it has no peer.
pub fn veth_peer_ifindex(netns_path: &Path, ifname: &str) -> Result<Option<u32>> {
    Ok(veth_peer(netns_path, ifname)?.map(|p| p.peer_ifindex))
}

/// Both ends' ifindexes of a veth seen from inside the container netns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VethPeer {
    /// The other end's ifindex, in the peer's netns.
    pub peer_ifindex: u32,
    /// The container end's own ifindex, in the container netns.
    pub own_ifindex: u32,
}

/// Like `veth_peer_ifindex`, but only when the peer lives in another netns
/// (IFLA_LINK_NETNSID present): a veth whose two ends are both inside the
/// container has no host side, and its peer's ifindex means nothing on the node.
pub fn veth_peer(netns_path: &Path, ifname: &str) -> Result<Option<VethPeer>> {
    let ns = match File::open(netns_path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(netns_err(netns_path, e)),
    };
    in_netns_file(netns_path, ns, || {
        Ok(get_link_by_name(ifname)?
            .filter(|l| l.kind.as_deref() == Some("veth") && l.link_netnsid.is_some())
            .and_then(|l| l.peer_ifindex.map(|peer_ifindex| VethPeer { peer_ifindex, own_ifindex: l.index })))
    })
}

// ---------------------------------------------------------------------------
// sysctls

/// `/proc/sys/<key>`; `key` is "net/ipv4/ip_forward" or, if it contains no
/// '/', the dotted "net.ipv4.ip_forward".
fn sysctl_path(key: &str) -> Result<PathBuf> {
    let rel = if key.contains('/') { key.to_string() } else { key.replace('.', "/") };
    let bad = rel.is_empty()
        || rel.starts_with('/')
        || rel.split('/').any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(Error::new(code::INVALID_CONFIG, format!("invalid sysctl name \"{key}\"")));
    }
    Ok(Path::new("/proc/sys").join(rel))
}

/// Read a sysctl (e.g. "net/ipv4/ip_local_reserved_ports") of the calling
/// thread's netns, without the trailing newline. `/proc/sys/net` is resolved
/// per thread (see the module docs), so inside `in_netns` this reads the
/// target netns' value.
pub fn read_sysctl(key: &str) -> Result<String> {
    let path = sysctl_path(key)?;
    let mut s = std::fs::read_to_string(&path)
        .ctx(code::IO_FAILURE, format!("cannot read sysctl {key}"))?;
    while s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

/// Write a sysctl of the calling thread's netns. The value is written with a
/// trailing newline in a single write(2), like sysctl(8) (an empty value thus
/// clears list-valued sysctls such as ip_local_reserved_ports).
pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = sysctl_path(key)?;
    let what = format!("cannot write \"{value}\" to sysctl {key}");
    let mut f = OpenOptions::new().write(true).open(&path).ctx(code::IO_FAILURE, &what)?;
    let buf = format!("{value}\n");
    let n = f.write(buf.as_bytes()).ctx(code::IO_FAILURE, &what)?;
    if n != buf.len() {
        return Err(Error::new(
            code::IO_FAILURE,
            format!("{what}: short write ({n} of {} bytes)", buf.len()),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    //! These tests need root. Each one works in a fresh network namespace
    //! created by `unshare(CLONE_NEWNET)` on a dedicated thread (which dies
    //! with the thread), so the machine's interfaces and sysctls are never
    //! touched. `ip` commands spawned from that thread inherit its netns.

    use super::*;
    use std::process::Command;

    /// These tests need root (network namespaces). A test that cannot run fails
    /// loudly instead of passing as if it had checked something.
    fn is_root() -> bool {
        assert_eq!(unsafe { libc::geteuid() }, 0, "netlink tests need root (run scripts/test.sh as root)");
        true
    }

    /// Run `f` on a new thread inside a brand-new, empty netns.
    fn in_fresh_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                nix::sched::unshare(CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
                ip("link set lo up");
                f()
            });
            t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Run `ip ARGS` (in the calling thread's netns); panic with stderr on failure.
    fn ip(args: &str) {
        let out = Command::new("ip").args(args.split_whitespace()).output().expect("spawn ip");
        assert!(out.status.success(), "ip {args}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn thread_netns() -> PathBuf {
        std::fs::read_link("/proc/thread-self/ns/net").unwrap()
    }

    /// A path naming the calling thread's netns that stays valid while the
    /// thread lives.
    fn thread_netns_path() -> PathBuf {
        PathBuf::from(format!("/proc/{}/task/{}/ns/net", std::process::id(), nix::unistd::gettid()))
    }

    fn link(name: &str) -> LinkInfo {
        get_link_by_name(name).unwrap().unwrap_or_else(|| panic!("link {name} not found"))
    }

    #[test]
    fn links_in_fresh_netns() {
        if !is_root() {
            return;
        }
        let outer_ns = thread_netns();
        in_fresh_netns(|| {
            ip("link add em-a type veth peer name em-b");
            ip("link add em-br type bridge");
            ip("link set em-b master em-br");
            ip("link set em-a mtu 1420");
            ip("link set em-a up");
            ip("tuntap add dev em-tun mode tun");

            let a = link("em-a");
            let b = link("em-b");
            let br = link("em-br");
            assert_eq!(a.name, "em-a");
            assert_eq!(a.kind.as_deref(), Some("veth"));
            assert_eq!(a.link_type, ARPHRD_ETHER);
            assert!(!a.is_l3());
            assert!(a.is_up);
            assert!(!b.is_up);
            assert_eq!(a.mtu, 1420);
            assert_eq!(a.peer_ifindex, Some(b.index));
            assert_eq!(b.peer_ifindex, Some(a.index));
            assert_eq!(a.link_netnsid, None, "peer is in the same netns");
            assert_eq!(a.master, None);
            assert_eq!(b.master, Some(br.index));
            assert_eq!(br.kind.as_deref(), Some("bridge"));
            assert_eq!(br.peer_ifindex, None);

            let tun = link("em-tun");
            assert_eq!(tun.kind.as_deref(), Some("tun"));
            assert_eq!(tun.link_type, ARPHRD_NONE);
            assert!(tun.is_l3());

            let lo = link("lo");
            assert_eq!(lo.index, 1);
            assert_eq!(lo.kind, None);
            assert!(lo.is_up);

            assert_eq!(get_link_by_index(a.index).unwrap(), Some(a.clone()));
            assert_eq!(get_link_by_index(999_999).unwrap(), None);
            assert_eq!(get_link_by_index(0).unwrap(), None);
            assert_eq!(get_link_by_name("em-nope").unwrap(), None);
            assert_eq!(get_link_by_name("").unwrap(), None);
            assert_eq!(get_link_by_name("a-name-longer-than-15").unwrap(), None);

            let all = dump_links().unwrap();
            let mut names: Vec<_> = all.iter().map(|l| l.name.as_str()).collect();
            names.sort();
            assert_eq!(names, ["em-a", "em-b", "em-br", "em-tun", "lo"]);
            assert!(all.contains(&a));

            // /proc/thread-self/net follows this thread, /proc/self/net the main thread.
            let mine = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap();
            let main = std::fs::read_to_string("/proc/self/net/dev").unwrap();
            assert!(mine.contains("em-a:"));
            assert!(!main.contains("em-a:"));
        });
        assert_eq!(thread_netns(), outer_ns);
        assert_eq!(get_link_by_name("em-a").unwrap(), None, "em-a must not exist outside");
    }

    #[test]
    fn default_routes_and_addresses_in_fresh_netns() {
        if !is_root() {
            return;
        }
        in_fresh_netns(|| {
            assert_eq!(default_route_interfaces().unwrap(), Vec::<String>::new());

            ip("link add em-a type veth peer name em-b");
            // (no dummy module on every kernel: use veth pairs as plain devices)
            ip("link add em-d0 type veth peer name em-d0p");
            ip("link add em-d1 type veth peer name em-d1p");
            ip("link add em-t type veth peer name em-tp"); // stays down: its IPv6 addresses stay tentative
            for l in ["em-a", "em-b", "em-d0", "em-d1"] {
                ip(&format!("link set {l} up"));
            }
            ip("addr add 10.1.0.1/24 dev em-a");
            ip("addr add 10.1.0.2/24 dev em-a"); // secondary
            ip("addr add 10.2.0.1/24 dev em-a");
            ip("addr add 10.9.0.1/24 dev em-b");
            ip("-6 addr add 2001:db8::1/64 dev em-a nodad");
            ip("-6 addr add 2001:db8::2/64 dev em-a nodad");
            ip("-6 addr add 2001:db8::3/64 dev em-a nodad preferred_lft 0"); // deprecated
            ip("-6 addr add fe80::1234/64 dev em-a nodad");
            ip("-6 addr add 2001:db8:9::1/64 dev em-d0 nodad");
            ip("-6 addr add 2001:db8:7::1/64 dev em-t"); // tentative
            ip("-6 addr add 2001:db8:7::2/64 dev em-t nodad");
            ip("addr add 10.7.0.1/24 dev em-t");

            ip("route add default via 10.1.0.254 dev em-a");
            ip("-6 route add default nexthop via 2001:db8::fe dev em-a nexthop via 2001:db8:9::fe dev em-d0");
            ip("route add default dev em-d1 table 100");
            ip("-6 route add default dev em-d1 table 100");
            ip("route add unreachable default metric 4000");
            ip("-6 route add unreachable default metric 4000");
            ip("route add 10.50.0.0/16 via 10.9.0.254 dev em-b");

            assert_eq!(default_route_interfaces().unwrap(), ["em-a", "em-d0"]);

            let a = link("em-a");
            let (v4, mut v6) = get_addresses(a.index).unwrap();
            assert_eq!(
                v4,
                [
                    Ipv4Addr::new(10, 1, 0, 1),
                    Ipv4Addr::new(10, 2, 0, 1),
                    Ipv4Addr::new(10, 1, 0, 2)
                ]
            );
            v6.sort();
            assert_eq!(
                v6,
                ["2001:db8::1".parse::<Ipv6Addr>().unwrap(), "2001:db8::2".parse().unwrap()]
            );

            let t = link("em-t");
            let (v4, v6) = get_addresses(t.index).unwrap();
            assert_eq!(v4, [Ipv4Addr::new(10, 7, 0, 1)]);
            assert_eq!(v6, ["2001:db8:7::2".parse::<Ipv6Addr>().unwrap()]);

            let b = link("em-b");
            assert_eq!(get_addresses(b.index).unwrap(), (vec![Ipv4Addr::new(10, 9, 0, 1)], vec![]));
            assert_eq!(get_addresses(999_999).unwrap(), (vec![], vec![]));

            // Removing the IPv4 default leaves only the IPv6 multipath devices.
            ip("route del default via 10.1.0.254 dev em-a");
            assert_eq!(default_route_interfaces().unwrap(), ["em-a", "em-d0"]);
            ip("-6 route del default");
            assert_eq!(default_route_interfaces().unwrap(), Vec::<String>::new());
        });
    }

    #[test]
    fn sysctl_is_per_thread_netns() {
        if !is_root() {
            return;
        }
        const KEY: &str = "net/ipv4/ip_local_reserved_ports";
        let outer_before = read_sysctl(KEY).unwrap();
        let outer_path = thread_netns_path();
        let outer_forward = read_sysctl("net/ipv4/ip_forward").unwrap();
        in_fresh_netns(|| {
            // Safety gate before writing anything: /proc/sys must show this
            // thread's netns (em-s exists only here), not the process'.
            ip("link add em-s type veth peer name em-sp");
            assert_eq!(read_sysctl("net/ipv4/conf/em-s/forwarding").unwrap(), "0");
            assert!(in_netns(&outer_path, || read_sysctl("net/ipv4/conf/em-s/forwarding")).is_err());
            write_sysctl("net/ipv4/conf/em-s/forwarding", "1").unwrap();
            assert_eq!(read_sysctl("net/ipv4/conf/em-s/forwarding").unwrap(), "1");

            assert_eq!(read_sysctl(KEY).unwrap(), "", "fresh netns has no reserved ports");
            write_sysctl(KEY, "40000-40010,40555").unwrap();
            assert_eq!(read_sysctl(KEY).unwrap(), "40000-40010,40555");
            assert_eq!(
                read_sysctl("net.ipv4.ip_local_reserved_ports").unwrap(),
                "40000-40010,40555"
            );
            // Meanwhile the test thread's (machine's) netns is unchanged.
            let outer_now = in_netns(&outer_path, || read_sysctl(KEY)).unwrap();
            assert_eq!(outer_now, outer_before);
            write_sysctl(KEY, "").unwrap();
            assert_eq!(read_sysctl(KEY).unwrap(), "");

            write_sysctl("net/ipv4/ip_forward", "1").unwrap();
            assert_eq!(read_sysctl("net.ipv4.ip_forward").unwrap(), "1");
        });
        assert_eq!(read_sysctl(KEY).unwrap(), outer_before);
        assert_eq!(read_sysctl("net/ipv4/ip_forward").unwrap(), outer_forward);

        for bad in ["", "/etc/passwd", "net/../../etc/passwd", "net//ipv4", "."] {
            let e = read_sysctl(bad).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{bad}: {e}");
        }
        let e = read_sysctl("net/ipv4/no_such_sysctl").unwrap_err();
        assert_eq!(e.code, code::IO_FAILURE);
        assert!(e.msg.contains("net/ipv4/no_such_sysctl"), "{e}");
    }

    /// Deletes a named netns on drop (also when a test panics).
    struct NetnsGuard(String);
    impl Drop for NetnsGuard {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
        }
    }

    #[test]
    fn in_netns_and_veth_peer() {
        if !is_root() {
            return;
        }
        let name = format!("em-nltest-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let guard = NetnsGuard(name.clone());
        let ns_path = PathBuf::from(format!("/run/netns/{name}"));
        in_fresh_netns(|| {
            ip(&format!("netns add {name}"));
            ip("link add em-host type veth peer name em-ctr");
            ip(&format!("link set em-ctr netns {name}"));
            let host = link("em-host");
            assert!(host.link_netnsid.is_some(), "peer now lives in another netns");
            assert_eq!(get_link_by_name("em-ctr").unwrap(), None);

            let before = thread_netns();
            assert_eq!(veth_peer_ifindex(&ns_path, "em-ctr").unwrap(), Some(host.index));
            assert_eq!(veth_peer_ifindex(&ns_path, "em-nope").unwrap(), None);
            assert_eq!(veth_peer_ifindex(&ns_path, "lo").unwrap(), None, "not a veth");
            assert_eq!(
                veth_peer_ifindex(Path::new("/run/netns/em-nltest-absent-x"), "em-ctr").unwrap(),
                None
            );

            let (ctr, host_seen, inner_ns) = in_netns(&ns_path, || {
                Ok((get_link_by_name("em-ctr")?, get_link_by_name("em-host")?, thread_netns()))
            })
            .unwrap();
            let ctr = ctr.expect("em-ctr inside the named netns");
            assert_eq!(ctr.kind.as_deref(), Some("veth"));
            assert_eq!(ctr.peer_ifindex, Some(host.index));
            assert!(ctr.link_netnsid.is_some());
            assert_eq!(host_seen, None);
            assert_ne!(inner_ns, before);
            assert_eq!(thread_netns(), before, "caller's netns must not change");
            assert_eq!(get_link_by_name("em-ctr").unwrap(), None);

            // Errors from f are passed through unchanged.
            let e = in_netns(&ns_path, || -> Result<()> { Err(Error::state("boom")) }).unwrap_err();
            assert_eq!(e, Error::state("boom"));
            // Bad netns paths -> INVALID_ENV naming the path.
            let e = in_netns(Path::new("/run/netns/em-nltest-absent-x"), || Ok(())).unwrap_err();
            assert_eq!(e.code, code::INVALID_ENV);
            assert!(e.msg.starts_with("cannot enter netns /run/netns/em-nltest-absent-x"), "{e}");
            let e = in_netns(Path::new("/proc/self/status"), || Ok(())).unwrap_err();
            assert_eq!(e.code, code::INVALID_ENV);
            assert!(veth_peer_ifindex(Path::new("/proc/self/status"), "em-ctr").is_err());
        });
        drop(guard);
        assert!(!ns_path.exists(), "named netns cleaned up");
    }

    #[test]
    fn tc_filters_in_fresh_netns() {
        if !is_root() {
            return;
        }
        in_fresh_netns(|| {
            ip("link add em-a type veth peer name em-b");
            let a = link("em-a");
            assert!(!has_tc_filter(a.index, true, 0xc0de).unwrap(), "no clsact yet");
            tc("qdisc add dev em-a clsact", "");
            assert!(!has_tc_filter(a.index, true, 0xc0de).unwrap());
            // classic-BPF cls_bpf needs no object file or extra modules
            const RET_ALL: &str = "1,6 0 0 4294967295,";
            tc("filter add dev em-a ingress prio 49374 handle 1 bpf bytecode", RET_ALL);
            tc("filter add dev em-a egress prio 7 handle 1 bpf bytecode", RET_ALL);
            assert!(has_tc_filter(a.index, true, 0xc0de).unwrap());
            assert!(!has_tc_filter(a.index, false, 0xc0de).unwrap());
            assert!(has_tc_filter(a.index, false, 7).unwrap());
            assert!(!has_tc_filter(a.index, true, 7).unwrap());
            assert!(!has_tc_filter(999_999, true, 0xc0de).unwrap());
            let b = link("em-b");
            assert!(!has_tc_filter(b.index, true, 0xc0de).unwrap());
        });
    }

    /// `tc ARGS [LAST]`, LAST passed as one argument (may contain spaces).
    fn tc(args: &str, last: &str) {
        let mut cmd = Command::new("tc");
        cmd.args(args.split_whitespace());
        if !last.is_empty() {
            cmd.arg(last);
        }
        let out = cmd.output().expect("spawn tc");
        assert!(out.status.success(), "tc {args}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Read-only queries against the test thread's own netns must work too.
    #[test]
    fn read_only_queries_of_current_netns() {
        let links = dump_links().unwrap();
        let lo = links.iter().find(|l| l.name == "lo").expect("lo");
        assert_eq!(get_link_by_index(lo.index).unwrap().as_ref(), Some(lo));
        for name in default_route_interfaces().unwrap() {
            assert!(links.iter().any(|l| l.name == name), "{name}");
        }
        let (v4, _) = get_addresses(lo.index).unwrap();
        assert!(v4.contains(&Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn works_inside_a_tokio_runtime() {
        if !is_root() {
            return;
        }
        in_fresh_netns(|| {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let lo = rt.block_on(async { get_link_by_name("lo") }).unwrap().unwrap();
            assert_eq!(lo.index, 1);
        });
    }
}
