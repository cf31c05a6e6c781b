//! natFiltering (RFC 4787 REQ-8) through the real pinned uplink programs, with
//! BPF_PROG_TEST_RUN: endpoint-independent filtering lets any remote reach an active
//! mapping, address-dependent only the ports of known remotes; an idle open mapping
//! closes; a rule opens a tunnel client's mapping; a pool pairs each source with one
//! address.

use std::net::Ipv4Addr;

use ebpf_masq::bpf::abi::{counter, NAT_FILTER_AD, NAT_FILTER_EI, NAT_F_BY_RULE, NAT_F_OPEN};

use crate::mapping::mapped;
use crate::support::{harness::*, node::*, packet::*};

#[test]
fn endpoint_independent_filtering_lets_any_remote_reach_an_active_mapping() {
    let dp = pods_node();
    dp.set_pod_filtering(POD, NAT_FILTER_EI);
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    // Someone the pod never sent to, from any port: in, to the pod endpoint, on a pair of its own.
    let hello = udp(REMOTE2, MASQ, 9999, p);
    let out = dp.ingress(&hello).passed();
    assert_checksums(&out);
    assert_eq!(out, udp(REMOTE2, POD, 9999, 40000));
    assert_eq!(dp.counter(counter::FILTER_ADMITTED), 1);
    let (fe, _) = dp.assert_single_pair_of(nat_key(POD, REMOTE2, 40000, 9999, UDP), MASQ, p);
    assert_eq!(fe.flags & NAT_F_OPEN, NAT_F_OPEN);
    // The pod's answer leaves from the mapping, like any pair's.
    assert_eq!(mapped(&dp, &udp(POD, REMOTE2, 40000, 9999), MASQ), p);
    assert_eq!(dp.assert_pairs_complete(), 2);
    // Another pod endpoint's mapping is still closed (POD2 has the default).
    let q = mapped(&dp, &udp(POD2, REMOTE, 40001, 3478), MASQ);
    let knock = udp(REMOTE2, MASQ, 9999, q);
    assert_eq!(dp.ingress(&knock).passed(), knock, "a default (APDF) mapping let a stranger in");
    assert_eq!(dp.counter(counter::FILTER_ADMITTED), 1);
}

#[test]
fn address_dependent_filtering_admits_other_ports_of_known_remotes_only() {
    let dp = pods_node();
    dp.set_pod_filtering(POD, NAT_FILTER_AD);
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    let other_port = udp(REMOTE, MASQ, 3479, p);
    assert_eq!(dp.ingress(&other_port).passed(), udp(REMOTE, POD, 3479, 40000));
    let stranger = udp(REMOTE2, MASQ, 3478, p);
    assert_eq!(dp.ingress(&stranger).passed(), stranger, "address-dependent let another address in");
    assert_eq!(dp.counter(counter::FILTER_ADMITTED), 1);
    // Once the pod sends to REMOTE2, it may answer from any port too.
    assert_eq!(mapped(&dp, &udp(POD, REMOTE2, 40000, 3478), MASQ), p);
    assert_eq!(dp.ingress(&udp(REMOTE2, MASQ, 5000, p)).passed(), udp(REMOTE2, POD, 5000, 40000));
}

#[test]
fn an_idle_open_mapping_closes_and_tcp_may_be_opened_too() {
    let dp = pods_node();
    dp.set_config(20000, 20099, 1);
    dp.set_pod_filtering(POD, NAT_FILTER_EI);
    let p = mapped(&dp, &udp(POD, REMOTE, 40000, 3478), MASQ);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let late = udp(REMOTE2, MASQ, 9999, p);
    assert_eq!(dp.ingress(&late).passed(), late, "an idle mapping (past the UDP timeout) still let a stranger in");
    // TCP: a listener's mapping (e.g. a P2P node) admits a SYN from anyone.
    dp.set_config(20000, 20099, 3600);
    dp.set_open_mappings(true); // set_config writes the flags afresh
    let t = mapped(&dp, &tcp(POD, REMOTE, 41000, 443, SYN), MASQ);
    let syn = tcp(REMOTE2, MASQ, 5555, t, SYN);
    assert_eq!(dp.ingress(&syn).passed(), tcp(REMOTE2, POD, 5555, 41000, SYN));
}

#[test]
fn filtering_by_rule_opens_a_tunnel_clients_mapping() {
    let dp = pods_node();
    dp.add_rule_filtered(LO, Ipv4Addr::new(192, 168, 6, 0), 24, 1, NAT_FILTER_EI);
    dp.set_open_mappings(true);
    let p = mapped(&dp, &udp(TUNNEL_CLIENT, REMOTE, 40000, 3478), MASQ);
    assert_eq!(dp.ingress(&udp(REMOTE2, MASQ, 7, p)).passed(), udp(REMOTE2, TUNNEL_CLIENT, 7, 40000));
    let (fe, _) = dp.assert_single_pair_of(nat_key(TUNNEL_CLIENT, REMOTE2, 40000, 7, UDP), MASQ, p);
    assert_eq!((fe.flags & NAT_F_BY_RULE, fe.rule_id), (NAT_F_BY_RULE, 1));
}

/// Paired pooling (RFC 4787 REQ-2): with masqueradeAddress a pool, each source
/// always leaves with the same address of it, for every flow and remote; pods
/// numbered in sequence go round the pool, so together they have the ports of
/// every address towards one remote endpoint; replies find their pod through any
/// of them; tunnel clients (a rule without toAddress) are paired the same way.
#[test]
fn a_pool_pairs_each_source_with_one_address_and_spreads_pods_across_it() {
    let pool = [Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2), Ipv4Addr::new(192, 0, 2, 3)];
    let dp = Dataplane::new();
    dp.add_uplink_pool(LO, &pool);
    let pods: Vec<Ipv4Addr> = (10..16).map(|h| Ipv4Addr::new(10, 1, 0, h)).collect();
    for (i, p) in pods.iter().enumerate() {
        dp.add_pod(*p, 10 + i as u32, true);
    }
    let addr_of = |frame: &[u8]| summary(&dp.egress(frame).passed()).src;
    let mut used = std::collections::BTreeMap::new();
    for p in &pods {
        let a = addr_of(&udp(*p, REMOTE, 40000, 53));
        // The same source: the same address for another port, protocol and remote.
        assert_eq!(addr_of(&udp(*p, REMOTE2, 40001, 3478)), a);
        assert_eq!(addr_of(&tcp(*p, REMOTE, 40002, 443, SYN)), a);
        assert_eq!(addr_of(&echo_request(*p, REMOTE2, 7, 1)), a);
        *used.entry(a).or_insert(0) += 1;
    }
    // Six sequential pods: two on each address.
    assert_eq!(used.into_iter().collect::<Vec<_>>(), pool.iter().map(|a| (*a, 2)).collect::<Vec<_>>());
    // Same pod port, same remote endpoint, pods on different addresses: each keeps
    // its own port (capacity per remote endpoint grows with the pool).
    // (A remote port no flow above used: their random ports could hold 20050 there.)
    for p in &pods[..3] {
        let out = dp.egress(&udp(*p, REMOTE, 20050, 5353)).passed();
        assert_eq!(summary(&out).sport, 20050, "{p}");
        let s = summary(&out);
        let back = dp.ingress(&udp(REMOTE, s.src, 5353, 20050)).passed();
        assert_eq!((summary(&back).dst, summary(&back).dport), (*p, 20050));
    }
    // A tunnel client (rule without toAddress) is paired too.
    dp.add_rule(LO, Ipv4Addr::new(192, 168, 6, 0), 24, 1, None);
    let t = addr_of(&udp(TUNNEL_CLIENT, REMOTE, 5000, 53));
    assert!(pool.contains(&t), "{t}");
    assert_eq!(addr_of(&udp(TUNNEL_CLIENT, REMOTE2, 5001, 53)), t);
}
