//! A private network namespace for tests that need the kernel's routing:
//! bpf_fib_lookup() inside BPF_PROG_TEST_RUN runs in the calling thread's netns.

#![allow(dead_code)]

use std::process::Command;

pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "{cmd}");
}

pub fn ifindex(name: &str) -> u32 {
    let out = Command::new("ip").args(["-o", "link", "show", name]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split(':').next().unwrap().trim().parse().unwrap()
}

/// Run `f` on a thread in a fresh netns with lo up: its sockets and routes are its own.
pub fn in_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
            sh("ip link set lo up");
            f()
        })
        .join()
        .unwrap()
    })
}

/// Run `f` on a thread in a fresh netns (`in_netns`): forwarding on (both families), veth
/// "up0" (mtu `mtu`; 198.51.100.2/24 and 2001:db8:1::2/64, neighbours .1 / ::1
/// permanent, 203.0.113.0/24 and 2001:db8:99::/64 via them) and veth "pod0".
/// Passes (up0, pod0) ifindexes.
pub fn in_lab<T: Send>(mtu: u32, f: impl FnOnce(u32, u32) -> T + Send) -> T {
    in_netns(|| {
        sh("sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1");
        sh("sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0");
        sh(&format!("ip link add up0 mtu {mtu} type veth peer name up0p && ip link set up0p up && ip link set up0 up"));
        sh("ip addr add 198.51.100.2/24 dev up0 && ip addr add 2001:db8:1::2/64 dev up0 nodad");
        sh("ip neigh replace 198.51.100.1 lladdr 02:aa:00:00:00:01 dev up0 nud permanent");
        sh("ip -6 neigh replace 2001:db8:1::1 lladdr 02:aa:00:00:00:01 dev up0 nud permanent");
        sh("ip route add 203.0.113.0/24 via 198.51.100.1 dev up0");
        sh("ip -6 route add 2001:db8:99::/64 via 2001:db8:1::1 dev up0");
        sh("ip link add pod0 type veth peer name pod0p && ip link set pod0p up && ip link set pod0 up");
        f(ifindex("up0"), ifindex("pod0"))
    })
}
