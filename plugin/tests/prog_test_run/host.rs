//! The host's own flows share the port space with masqueraded ones, safely, as
//! netfilter's conntrack makes them, through the real pinned
//! programs with BPF_PROG_TEST_RUN:
//! - a host flow whose tuple a pod's pair already holds (the host's connect()
//!   cannot know) leaves with another source port, and its replies come back to
//!   the host's own port (nf_nat's implicit source-port remap);
//! - a pod's new pair passes over a port whose replies a host socket would get
//!   (a listener, a bound UDP socket, a host connection on that tuple);
//! - host echo requests keep their id, and a pod's ping never takes it;
//! - nodePortRange is never handed out.
//!
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere. The socket
//! tests run in a netns of their own (the lookups see the calling thread's).

use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};

use ebpf_masq::bpf::abi::{counter, NAT_F_HOST};
use crate::support::{harness::*, lab::in_netns, node::*, packet::*, packet6::*};

// The nodes are `pods_node()`: portRange 20000-20099 (the harness's), no nodePortRange.

fn host_pairs(dp: &Dataplane) -> usize {
    dp.fwd().iter().filter(|(_, e)| e.flags & NAT_F_HOST != 0).count()
}

#[test]
fn a_host_flow_meeting_a_pods_tuple_gets_another_port_and_its_replies_come_back() {
    let dp = pods_node();
    // The pod holds node port 20042 towards REMOTE:443 (its own port, preserved).
    assert_eq!(summary(&dp.egress(&tcp(POD, REMOTE, 20042, 443, SYN)).passed()).sport, 20042);
    // The host connects to REMOTE:443 from 20042 too: unchanged, its SYN would
    // land in the pod's connection and the answers would reach the pod.
    let out = dp.egress(&tcp(MASQ, REMOTE, 20042, 443, SYN)).passed();
    assert_checksums(&out);
    let s = summary(&out);
    assert_eq!(s.src, MASQ);
    assert_ne!(s.sport, 20042);
    assert!((20000..=20099).contains(&s.sport), "{}", s.sport);
    let host_port = s.sport;
    assert_eq!((dp.counter(counter::HOST_TRACKED), dp.counter(counter::HOST_REMAPPED)), (1, 1));
    // Its later packets keep that port; its replies come back to the host's own port...
    assert_eq!(summary(&dp.egress(&tcp(MASQ, REMOTE, 20042, 443, ACK)).passed()).sport, host_port);
    let back = dp.ingress(&tcp(REMOTE, MASQ, 443, host_port, SYN | ACK)).passed();
    assert_checksums(&back);
    assert_eq!((summary(&back).dst, summary(&back).dport), (MASQ, 20042));
    // ... and the pod's to the pod.
    let back = dp.ingress(&tcp(REMOTE, MASQ, 443, 20042, SYN | ACK)).passed();
    assert_eq!((summary(&back).dst, summary(&back).dport), (POD, 20042));
    assert_eq!((host_pairs(&dp), dp.assert_pairs_complete()), (1, 2));
    // A new pod flow never takes the host's remapped tuple either.
    let q = summary(&dp.egress(&tcp(POD2, REMOTE, host_port, 443, SYN)).passed()).sport;
    assert!(q != host_port && q != 20042, "{q}");
}

#[test]
fn host_traffic_that_meets_no_pods_tuple_leaves_untouched_and_untracked() {
    let dp = pods_node();
    dp.egress(&tcp(POD, REMOTE, 20042, 443, SYN)).passed();
    // Another port, another remote port, another protocol, another remote: no clash.
    for frame in [
        tcp(MASQ, REMOTE, 20043, 443, SYN),
        tcp(MASQ, REMOTE, 20042, 444, SYN),
        udp(MASQ, REMOTE, 20042, 443),
        tcp(MASQ, REMOTE2, 20042, 443, SYN),
    ] {
        assert_eq!(dp.egress(&frame).passed(), frame);
        assert_eq!(dp.ingress(&frame_reply(&frame)).passed(), frame_reply(&frame));
    }
    assert_eq!((dp.counter(counter::HOST_TRACKED), host_pairs(&dp), dp.fwd().len()), (0, 0, 1));
}

/// The reply a remote sends to `frame`'s source (TCP: SYN|ACK, UDP: a datagram).
fn frame_reply(frame: &[u8]) -> Vec<u8> {
    let s = summary(frame);
    match s.proto {
        TCP => tcp(s.dst, s.src, s.dport, s.sport, SYN | ACK),
        _ => udp(s.dst, s.src, s.dport, s.sport),
    }
}

#[test]
fn host_pings_keep_their_id_and_a_pods_ping_never_takes_it() {
    let dp = pods_node();
    let req = echo_request(MASQ, REMOTE, 20077, 1);
    assert_eq!(dp.egress(&req).passed(), req, "the host's own id is kept");
    assert_eq!((dp.counter(counter::HOST_TRACKED), dp.counter(counter::HOST_REMAPPED)), (1, 0));
    let rep = echo_reply(REMOTE, MASQ, 20077, 1);
    assert_eq!(dp.ingress(&rep).passed(), rep);
    // A pod pinging the same remote with that id (free, it would be kept): another id.
    let out = dp.egress(&echo_request(POD, REMOTE, 20077, 1)).passed();
    let id = summary(&out).sport;
    assert_ne!(id, 20077);
    assert_eq!(dp.ingress(&rep).passed(), rep, "the host's reply went to the pod");
    let back = dp.ingress(&echo_reply(REMOTE, MASQ, id, 1)).passed();
    assert_eq!(back, echo_reply(REMOTE, POD, 20077, 1));
    // Towards another remote the pod's id is its own again.
    assert_eq!(summary(&dp.egress(&echo_request(POD, REMOTE2, 20078, 1)).passed()).sport, 20078);
}

#[test]
fn a_pod_ping_first_then_the_hosts_with_the_same_id_gets_another() {
    let dp = pods_node();
    assert_eq!(summary(&dp.egress(&echo_request(POD, REMOTE, 20077, 1)).passed()).sport, 20077);
    let out = dp.egress(&echo_request(MASQ, REMOTE, 20077, 1)).passed();
    let id = summary(&out).sport;
    assert_ne!(id, 20077);
    assert_eq!(dp.counter(counter::HOST_REMAPPED), 1);
    assert_eq!(dp.ingress(&echo_reply(REMOTE, MASQ, id, 1)).passed(), echo_reply(REMOTE, MASQ, 20077, 1));
    assert_eq!(dp.ingress(&echo_reply(REMOTE, MASQ, 20077, 1)).passed(), echo_reply(REMOTE, POD, 20077, 1));
}

#[test]
fn ipv6_host_flow_meeting_a_pods_tuple_is_remapped() {
    let (masq6, pod6, remote6): (Ipv6Addr, Ipv6Addr, Ipv6Addr) =
        ("2001:db8::1".parse().unwrap(), "fd00::5".parse().unwrap(), "2001:db8:99::10".parse().unwrap());
    let dp = Dataplane::new();
    dp.add_uplink6(LO, Some(MASQ), masq6);
    dp.add_pod6(pod6, 7, true);
    assert_eq!(summary6(&dp.egress(&udp6(pod6, remote6, 20042, 53)).passed()).sport, 20042);
    let out = dp.egress(&udp6(masq6, remote6, 20042, 53)).passed();
    assert_checksums6(&out);
    let p = summary6(&out).sport;
    assert_ne!(p, 20042);
    let back = dp.ingress(&udp6(remote6, masq6, 53, p)).passed();
    assert_eq!(back, udp6(remote6, masq6, 53, 20042));
    assert_eq!(dp.ingress(&udp6(remote6, masq6, 53, 20042)).passed(), udp6(remote6, pod6, 53, 20042));
}

#[test]
fn a_port_a_host_socket_would_answer_is_passed_over() {
    in_netns(|| {
        let dp = pods_node();
        dp.set_config(20000, 20001, 3600); // two ports
        let _listener = TcpListener::bind("0.0.0.0:20000").unwrap(); // kubelet, a hostNetwork server
        let _bound = UdpSocket::bind("0.0.0.0:20001").unwrap(); // WireGuard, VXLAN, DNS
        // The pods' own ports would be kept; a host socket has each for its protocol.
        assert_eq!(summary(&dp.egress(&tcp(POD, REMOTE, 20000, 443, SYN)).passed()).sport, 20001);
        assert_eq!(summary(&dp.egress(&udp(POD, REMOTE, 20001, 53)).passed()).sport, 20000);
        assert!(dp.counter(counter::HOST_SOCKET_AVOIDED) >= 2);
        // Every port of the range held by a host socket: refused, never shared.
        let _bound0 = UdpSocket::bind("0.0.0.0:20000").unwrap();
        dp.egress(&udp(POD2, REMOTE, 40000, 53)).dropped();
        assert_eq!(dp.drops(drop::NO_PORT), 1);
        // A pair made before the host bound its port keeps it: its replies stay the pod's (as a
        // conntrack entry would win); only new pairs are checked.
        assert_eq!(summary(&dp.egress(&udp(POD, REMOTE, 20001, 53)).passed()).sport, 20000);
    });
}

#[test]
fn a_host_connection_holds_its_own_tuple_only() {
    in_netns(|| {
        // The "node" is 127.0.0.1 here, the remote 127.0.0.2: a real host connection between them.
        let (node_addr, remote) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
        let dp = Dataplane::new();
        dp.add_uplink(LO, node_addr);
        dp.add_pod(POD, 7, true);
        dp.add_pod(POD2, 8, true);
        let server = TcpListener::bind((remote, 443)).unwrap();
        let sock = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            nix::sys::socket::SockType::Stream,
            nix::sys::socket::SockFlag::empty(),
            None,
        )
        .unwrap();
        let at = nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, 20042);
        nix::sys::socket::bind(std::os::fd::AsRawFd::as_raw_fd(&sock), &at).unwrap();
        nix::sys::socket::connect(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            &nix::sys::socket::SockaddrIn::new(127, 0, 0, 2, 443),
        )
        .unwrap();
        let _client = TcpStream::from(sock);
        let _accepted = server.accept().unwrap();
        // The pod's port 20042 towards remote:443 is the host connection's tuple: another port.
        let out = dp.egress(&tcp(POD, remote, 20042, 443, SYN)).passed();
        assert_ne!(summary(&out).sport, 20042);
        // Another pod endpoint with port 20042 towards remote:444: that tuple is free (no host
        // socket would get its replies), so it is kept. (POD's own next flows keep the port
        // it was given: endpoint-independent mapping.)
        assert_eq!(summary(&dp.egress(&tcp(POD2, remote, 20042, 444, SYN)).passed()).sport, 20042);
    });
}

#[test]
fn node_port_range_is_never_handed_out() {
    let dp = pods_node();
    dp.set_node_port_range(20010, 20099); // ten ports left: 20000-20009
    // A pod's own port inside nodePortRange is not kept.
    let p = summary(&dp.egress(&udp(POD, REMOTE, 20050, 53)).passed()).sport;
    assert!((20000..20010).contains(&p), "{p}");
    // Ten flows to one remote endpoint take exactly the ten ports left; the 11th is refused.
    let mut ports = vec![p];
    for i in 1..10 {
        ports.push(summary(&dp.egress(&udp(POD, REMOTE, 40000 + i, 53)).passed()).sport);
    }
    ports.sort();
    assert_eq!(ports, (20000..20010).collect::<Vec<u16>>());
    dp.egress(&udp(POD, REMOTE, 41000, 53)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 1);
    // A range partly below and above it: both sides are used, the middle never.
    dp.set_config(20000, 20020, 3600);
    dp.set_node_port_range(20005, 20015);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..10 {
        seen.insert(summary(&dp.egress(&udp(POD2, REMOTE2, 42000 + i, 53)).passed()).sport);
    }
    assert_eq!(seen.len(), 10);
    assert!(seen.iter().all(|p| !(20005..=20015).contains(p)), "{seen:?}");
}

/// The host's packets look their own pair up only while host pairs may exist
/// (nat_gc.hosts): set by a new one, cleared by the sweep's first cycle that
/// finds none; a host pair that outlives its pod's pair keeps being found.
#[test]
fn host_pairs_are_looked_up_only_while_some_exist() {
    let dp = pods_node();
    dp.set_timeouts(20000, 20099, 3600, 3600, 2);
    assert_eq!(dp.nat_gc().hosts, 0);
    dp.egress(&udp(POD, REMOTE, 20042, 53)).passed();
    let p = summary(&dp.egress(&udp(MASQ, REMOTE, 20042, 53)).passed()).sport;
    assert_ne!(p, 20042);
    assert_eq!(dp.nat_gc().hosts, 1);
    // The pod's pair goes; the host flow keeps its port while it sends.
    dp.del_rev(&reverse_key(&nat_key(POD, REMOTE, 20042, 53, UDP), MASQ, 20042));
    dp.del_fwd(&nat_key(POD, REMOTE, 20042, 53, UDP));
    assert_eq!(summary(&dp.egress(&udp(MASQ, REMOTE, 20042, 53)).passed()).sport, p);
    // Idle, it expires with both halves, and a later cycle clears the flag.
    let gone = || dp.fwd().is_empty() && dp.nat_gc().hosts == 0;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gone() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(gone(), "{:?} {:?}", dp.fwd(), dp.nat_gc());
    // The host's next datagram meets nobody's tuple: untouched, untracked.
    let frame = udp(MASQ, REMOTE, 20042, 53);
    assert_eq!(dp.egress(&frame).passed(), frame);
    assert!(dp.fwd().is_empty());
}

/// A pod's hostPort (portmap DNATs the node's port to it; no socket holds it) is
/// never handed to a masqueraded flow: a new connection from the remote to that
/// port would otherwise be taken for the flow's reply.
#[test]
fn a_pods_host_port_is_never_handed_out() {
    use aya::maps::{HashMap, MapData};
    use ebpf_masq::bpf::abi::{HostPort, MAP_HOST_PORTS};
    let dp = pods_node();
    dp.set_config(20000, 20001, 3600);
    let mut hp: HashMap<MapData, HostPort, u32> = ebpf_masq::bpf::maps::pinned(&dp.pins, MAP_HOST_PORTS).unwrap();
    hp.insert(HostPort { port: 20000, proto: TCP, pad: 0 }, 0, 0).unwrap();
    // TCP: the pod's own 20000 is a hostPort: 20001. UDP 20000 is not one: kept.
    assert_eq!(summary(&dp.egress(&tcp(POD, REMOTE, 20000, 443, SYN)).passed()).sport, 20001);
    assert_eq!(summary(&dp.egress(&udp(POD, REMOTE, 20000, 53)).passed()).sport, 20000);
    // The only other TCP port is taken towards that remote endpoint: refused, not shared.
    dp.egress(&tcp(POD2, REMOTE, 40000, 443, SYN)).dropped();
    assert_eq!(dp.drops(drop::NO_PORT), 1);
    // The hostPort goes (its pod was deleted): it may be handed out again.
    hp.remove(&HostPort { port: 20000, proto: TCP, pad: 0 }).unwrap();
    assert_eq!(summary(&dp.egress(&tcp(POD2, REMOTE, 40000, 443, SYN)).passed()).sport, 20000);
}
