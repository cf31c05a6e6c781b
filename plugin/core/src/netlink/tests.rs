//! These tests need root. Each one works in a fresh network namespace
//! created by `unshare(CLONE_NEWNET)` on a dedicated thread (which dies
//! with the thread), so the machine's interfaces and sysctls are never
//! touched. `ip` commands spawned from that thread inherit its netns.

use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sched::CloneFlags;

use crate::error::{code, Error, Result};

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
fn route_to_one_address_in_fresh_netns() {
    if !is_root() {
        return;
    }
    in_fresh_netns(|| {
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        // No route: None, not an error (explain falls back to the only uplink).
        assert_eq!(route_oif(v4("10.1.2.3")).unwrap(), None);
        assert_eq!(route_oif(v6("2001:db8::7")).unwrap(), None);

        ip("link add em-a type veth peer name em-b");
        ip("link add em-d type veth peer name em-dp");
        for l in ["em-a", "em-b", "em-d", "em-dp"] {
            ip(&format!("link set {l} up"));
        }
        ip("addr add 10.1.0.1/24 dev em-a");
        ip("addr add 10.5.0.1/24 dev em-d");
        ip("-6 addr add 2001:db8::1/64 dev em-a nodad");
        ip("route add default via 10.1.0.254 dev em-a");
        let (a, d) = (link("em-a"), link("em-d"));
        assert_eq!(route_oif(v4("8.8.8.8")).unwrap(), Some(a.index));
        assert_eq!(route_oif(v4("10.1.0.7")).unwrap(), Some(a.index));
        assert_eq!(route_oif(v4("10.5.0.9")).unwrap(), Some(d.index));
        assert_eq!(route_oif(v6("2001:db8::7")).unwrap(), Some(a.index));
        assert_eq!(route_oif(v6("2001:db9::1")).unwrap(), None, "no IPv6 default");
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
