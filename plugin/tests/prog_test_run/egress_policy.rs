//! Egress policies (docs/egress-policies.md) through the real pinned programs, with
//! BPF_PROG_TEST_RUN: a pod the policies of its mask select leaves with the
//! first policy's address that holds the destination (one LPM lookup of the
//! entries the plugin flattens), keeps the network's address elsewhere, leaves
//! unmasqueraded under a natOutgoing:false policy; exclusions still win; a
//! policy's pool pairs each pod with one address; established flows keep their
//! mapping when a policy changes; replies come back; IPv6 the same.
//! Needs root and a bpffs at /sys/fs/bpf; attaches nothing anywhere.

use std::net::{Ipv4Addr, Ipv6Addr};

use ebpf_masq::bpf::abi::{counter, POLICY_F_NO_NAT, EXCL_NATIVE_ROUTING};
use crate::support::{harness::*, node::*, packet::*, packet6::*};

const PARTNER_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);
const OTHER_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 60);
const PARTNER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7); // inside 198.51.100.0/24
const PARTNER_WIDE: Ipv4Addr = Ipv4Addr::new(198, 51, 7, 1); // inside 198.51.0.0/16 only
const ELSEWHERE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);

fn src_of(dp: &Dataplane, frame: &[u8]) -> Ipv4Addr {
    let out = dp.egress(frame).passed();
    assert_checksums(&out);
    summary(&out).src
}

/// One policy (index 0) with an address, towards 198.51.100.0/24 only.
fn partner_node() -> Dataplane {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.set_policy_addrs(0, &[PARTNER_ADDR], &[]);
    dp.add_egress(0b1, Ipv4Addr::new(198, 51, 100, 0), 24, 0, 0);
    dp.add_pod_with_policies(POD, 7, 0b1);
    dp
}

#[test]
fn a_policy_picks_the_address_towards_its_destinations_only() {
    let dp = partner_node();
    assert_eq!(src_of(&dp, &udp(POD, PARTNER, 40000, 53)), PARTNER_ADDR);
    assert_eq!(src_of(&dp, &tcp(POD, PARTNER, 40001, 443, SYN)), PARTNER_ADDR);
    assert_eq!(src_of(&dp, &udp(POD, ELSEWHERE, 40002, 53)), MASQ, "elsewhere: the network's address");
    // The pair records its policy; its counters move.
    let fwd = dp.fwd();
    let by_policy: Vec<u8> = fwd.iter().filter(|(k, _)| k.daddr == PARTNER.octets()).map(|(_, e)| e.policy).collect();
    assert_eq!(by_policy, vec![1, 1]);
    assert!(fwd.iter().filter(|(k, _)| k.daddr == ELSEWHERE.octets()).all(|(_, e)| e.policy == 0));
    let s = dp.policy_stats(0);
    assert_eq!((s.flows, s.packets, s.unmasqueraded), (2, 2, 0), "{s:?}");
    assert!(s.bytes > 0);
    // Another packet of an established flow: counted, same address.
    assert_eq!(src_of(&dp, &udp(POD, PARTNER, 40000, 53)), PARTNER_ADDR);
    assert_eq!(dp.policy_stats(0).packets, 3);
    assert_eq!(dp.policy_stats(0).flows, 2);
    dp.assert_pairs_complete();
}

#[test]
fn replies_to_a_policy_address_reach_the_pod() {
    let dp = partner_node();
    let out = dp.egress(&udp(POD, PARTNER, 40000, 53)).passed();
    let s = summary(&out);
    assert_eq!(s.src, PARTNER_ADDR);
    let back = dp.ingress(&udp(PARTNER, PARTNER_ADDR, 53, s.sport)).passed();
    assert_checksums(&back);
    assert_eq!((summary(&back).dst, summary(&back).dport), (POD, 40000));
    // A stranger to the policy address gets nowhere (address-and-port-dependent filtering).
    let stray = dp.ingress(&udp(ELSEWHERE, PARTNER_ADDR, 53, s.sport)).passed();
    assert_eq!(summary(&stray).dst, PARTNER_ADDR);
}

#[test]
fn the_first_policy_holding_a_destination_wins() {
    // Policy 0: 198.51.0.0/16 -> OTHER_ADDR; policy 1: 198.51.100.0/24 -> PARTNER_ADDR.
    // Mask 0b11 flattened (first match): both CIDRs name policy 0. Mask 0b10: the /24 names 1.
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.set_policy_addrs(0, &[OTHER_ADDR], &[]);
    dp.set_policy_addrs(1, &[PARTNER_ADDR], &[]);
    dp.add_egress(0b11, Ipv4Addr::new(198, 51, 0, 0), 16, 0, 0);
    dp.add_egress(0b11, Ipv4Addr::new(198, 51, 100, 0), 24, 0, 0);
    dp.add_egress(0b10, Ipv4Addr::new(198, 51, 100, 0), 24, 1, 0);
    let both = Ipv4Addr::new(10, 1, 0, 8);
    let second = Ipv4Addr::new(10, 1, 0, 9);
    dp.add_pod_with_policies(both, 8, 0b11);
    dp.add_pod_with_policies(second, 9, 0b10);
    assert_eq!(src_of(&dp, &udp(both, PARTNER, 40000, 53)), OTHER_ADDR);
    assert_eq!(src_of(&dp, &udp(both, PARTNER_WIDE, 40000, 53)), OTHER_ADDR);
    assert_eq!(src_of(&dp, &udp(second, PARTNER, 40000, 53)), PARTNER_ADDR);
    assert_eq!(src_of(&dp, &udp(second, PARTNER_WIDE, 40000, 53)), MASQ);
    assert_eq!(src_of(&dp, &udp(both, ELSEWHERE, 40000, 53)), MASQ);
}

#[test]
fn a_nat_outgoing_false_policy_leaves_the_pod_address() {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.add_egress(0b100, Ipv4Addr::new(198, 51, 100, 0), 24, 2, POLICY_F_NO_NAT);
    dp.add_pod_with_policies(POD, 7, 0b100);
    let out = dp.egress(&tcp(POD, PARTNER, 40000, 3306, SYN)).passed();
    assert_eq!(summary(&out).src, POD, "opted out: the partner sees the pod");
    assert!(dp.fwd().is_empty(), "no pair for an untouched flow");
    assert_eq!(dp.policy_stats(2).unmasqueraded, 1);
    // Elsewhere the network's masquerade holds.
    assert_eq!(src_of(&dp, &udp(POD, ELSEWHERE, 40000, 53)), MASQ);
}

#[test]
fn exclusions_still_win_over_a_policy() {
    let dp = partner_node();
    dp.add_excl(Ipv4Addr::new(198, 51, 100, 0), 25, EXCL_NATIVE_ROUTING);
    let before = dp.counter(counter::SKIP_EXCLUDED);
    let out = dp.egress(&udp(POD, PARTNER, 40000, 53)).passed();
    assert_eq!(summary(&out).src, POD, "nativeRoutingCIDR: never masqueraded");
    assert_eq!(dp.counter(counter::SKIP_EXCLUDED), before + 1);
    assert_eq!(dp.policy_stats(0).flows, 0);
    // Outside the exclusion but inside the policy: the policy's address.
    assert_eq!(src_of(&dp, &udp(POD, Ipv4Addr::new(198, 51, 100, 200), 40000, 53)), PARTNER_ADDR);
}

#[test]
fn a_policy_pool_pairs_each_pod_with_one_address() {
    let pool = [Ipv4Addr::new(192, 0, 2, 70), Ipv4Addr::new(192, 0, 2, 71)];
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.set_policy_addrs(0, &pool, &[]);
    dp.add_egress(0b1, Ipv4Addr::new(0, 0, 0, 0), 0, 0, 0);
    let pods: Vec<Ipv4Addr> = (20..24).map(|h| Ipv4Addr::new(10, 1, 0, h)).collect();
    for (i, p) in pods.iter().enumerate() {
        dp.add_pod_with_policies(*p, 20 + i as u32, 0b1);
    }
    let mut seen = std::collections::BTreeMap::new();
    for p in &pods {
        let a = src_of(&dp, &udp(*p, ELSEWHERE, 40000, 53));
        assert_eq!(src_of(&dp, &tcp(*p, PARTNER, 40001, 443, SYN)), a, "{p} keeps its address");
        *seen.entry(a).or_insert(0) += 1;
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), pool.iter().map(|a| (*a, 2)).collect::<Vec<_>>());
}

#[test]
fn an_established_flow_keeps_its_mapping_when_the_policy_changes() {
    let dp = partner_node();
    let out = dp.egress(&udp(POD, PARTNER, 40000, 53)).passed();
    let port = summary(&out).sport;
    assert_eq!(summary(&out).src, PARTNER_ADDR);
    // The policy now names another address (an `apply` rewrote its pool slot).
    dp.set_policy_addrs(0, &[OTHER_ADDR], &[]);
    let again = dp.egress(&udp(POD, PARTNER, 40000, 53)).passed();
    assert_eq!((summary(&again).src, summary(&again).sport), (PARTNER_ADDR, port), "established: unchanged");
    assert_eq!(src_of(&dp, &udp(POD, PARTNER, 40001, 53)), OTHER_ADDR, "a new flow follows the new policy");
    // The policy is gone: new flows keep the network's settings, the old one its mapping.
    dp.del_egress(0b1, Ipv4Addr::new(198, 51, 100, 0), 24);
    assert_eq!(src_of(&dp, &udp(POD, PARTNER, 40002, 53)), MASQ);
    assert_eq!(src_of(&dp, &udp(POD, PARTNER, 40000, 53)), PARTNER_ADDR);
}

#[test]
fn a_policy_without_an_address_of_the_family_keeps_the_networks() {
    let dp = Dataplane::new();
    dp.add_uplink(LO, MASQ);
    dp.set_policy_addrs(0, &[], &[]);
    dp.add_egress(0b1, Ipv4Addr::new(198, 51, 100, 0), 24, 0, 0);
    dp.add_pod_with_policies(POD, 7, 0b1);
    assert_eq!(src_of(&dp, &udp(POD, PARTNER, 40000, 53)), MASQ);
    assert!(dp.fwd().iter().all(|(_, e)| e.policy == 0));
}

#[test]
fn ipv6_policies_pick_their_address_per_destination() {
    const MASQ6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const POL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x50);
    const POD6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 5);
    const PARTNER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 7);
    const ELSEWHERE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 7);
    let dp = Dataplane::new();
    dp.add_uplink6(LO, None, MASQ6);
    dp.set_policy_addrs(0, &[], &[POL6]);
    dp.add_egress6(0b1, Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0), 48, 0, 0);
    dp.add_pod6_with_policies(POD6, 7, 0b1);
    let out = dp.egress(&udp6(POD6, PARTNER6, 40000, 53)).passed();
    assert_eq!(summary6(&out).src, POL6);
    let back = dp.ingress(&udp6(PARTNER6, POL6, 53, summary6(&out).sport)).passed();
    assert_eq!((summary6(&back).dst, summary6(&back).dport), (POD6, 40000));
    let out = dp.egress(&udp6(POD6, ELSEWHERE6, 40000, 53)).passed();
    assert_eq!(summary6(&out).src, MASQ6);
    assert_eq!(dp.policy_stats(0).flows, 1);
}
