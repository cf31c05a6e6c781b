//! Egress policies on the node (egressPolicies): what each policy is
//! (`egress_policies`, its addresses in `masq_pool` slot 1 + i), which policies
//! select each registered pod (its `PodInfo.policies` mask, evaluated again at every
//! reconcile, so a config change reaches running pods), and the flattened
//! (mask, destination) -> first policy entries of `policy_dst4`/`policy_dst6` for the
//! masks in use. Written in that order, so a pod's mask never names entries that
//! are not there yet; stale entries go last. Established pairs keep their address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use aya::maps::{lpm_trie::Key, Array, LpmTrie, MapData};
use ipnetwork::IpNetwork;

use crate::{
    bpf::{
        abi::{self, PolicyDst4Data, PolicyDst6Data, PolicyHit, EgressPolicyInfo, MasqPool},
        loader::Pins,
        maps,
    },
    config::{self, EgressAction, EgressPolicy, MasqOptions, EGRESS_POLICY_ANNOTATION},
    error::{Context, Error, Result},
    pod,
};

/// Every address of the policies must be one of `owned` (the egress interfaces'
/// addresses): code 7 naming the policy's masqueradeAddress and the address.
pub fn check_ownership(policies: &[EgressPolicy], owned: &BTreeSet<IpAddr>, uplinks: &str) -> Result<()> {
    for (i, p) in policies.iter().enumerate() {
        if let EgressAction::Masquerade { v4, v6 } = &p.action {
            let all = v4.iter().map(|a| IpAddr::V4(*a)).chain(v6.iter().map(|a| IpAddr::V6(*a)));
            for a in all {
                if !owned.contains(&a) {
                    return Err(Error::config(
                        &format!("egressPolicies[{i}].masqueradeAddress"),
                        format!(
                            "{a} (policy \"{}\") is not an address of an egress interface of this node ({uplinks}): \
                             replies to it would never come back",
                            p.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `egress_policies` and the policies' `masq_pool` slots, from the config.
fn write_policies(pins: &Pins, policies: &[EgressPolicy]) -> Result<()> {
    let mut infos: Array<MapData, EgressPolicyInfo> = maps::pinned(pins, abi::MAP_EGRESS_POLICIES)?;
    let mut pools: Array<MapData, MasqPool> = maps::pinned(pins, abi::MAP_MASQ_POOL)?;
    let specs = config::egress_policies_to_json(policies);
    for i in 0..abi::EGRESS_POLICIES_MAX {
        let Some(p) = policies.get(i as usize) else {
            if infos.get(&i, 0).is_ok_and(|x| x.used != 0) {
                infos.set(i, EgressPolicyInfo::default(), 0).bpf_ctx("clear egress_policies")?;
                pools.set(1 + i, MasqPool::default(), 0).bpf_ctx("clear masq_pool")?;
            }
            continue;
        };
        let mut info = EgressPolicyInfo { used: 1, ..Default::default() };
        let mut pool = MasqPool::default();
        match &p.action {
            EgressAction::NoNat => info.flags = abi::POLICY_F_NO_NAT,
            EgressAction::Masquerade { v4, v6 } => {
                pool.len4 = v4.len() as u32;
                pool.len6 = v6.len() as u32;
                for (slot, a) in pool.v4.iter_mut().zip(v4) {
                    *slot = a.octets();
                }
                for (slot, a) in pool.v6.iter_mut().zip(v6) {
                    *slot = a.octets();
                }
            }
        }
        copy_cstr(&mut info.name, &p.name);
        let mut spec = specs[i as usize].clone();
        if let Some(o) = spec.as_object_mut() {
            o.remove(config::key::POLICY_NAME);
        }
        let spec = spec.to_string();
        if spec.len() >= abi::POLICY_SPEC_LEN {
            log::warn!("egress policy {}: its description is cut to {} bytes in egress_policies", p.name, abi::POLICY_SPEC_LEN - 1);
        }
        copy_cstr(&mut info.spec, &spec);
        // The addresses before the description: a reader that sees a policy sees its addresses.
        pools.set(1 + i, pool, 0).bpf_ctx("write masq_pool")?;
        infos.set(i, info, 0).bpf_ctx("write egress_policies")?;
    }
    Ok(())
}

fn copy_cstr(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n..].fill(0);
}

/// The egress policy mask of a pod who is `namespace/name` with `annotation`.
pub fn mask_of(conf: &MasqOptions, namespace: &str, name: &str, annotation: Option<&str>) -> Result<u32> {
    let given = |s: &str| if s.is_empty() { None } else { Some(s.to_string()) };
    let (ns, n) = (given(namespace), given(name));
    config::select_policies(&conf.egress_policies, ns.as_deref(), n.as_deref(), annotation)
}

/// The annotation `ebpf-masq.io/egress-policy` of a `pod_meta` record.
fn annotation_of(meta: &abi::PodMeta) -> (String, String, Option<String>) {
    let (ns, name, ann) = pod::meta_fields(meta);
    let a = ann.get(EGRESS_POLICY_ANNOTATION).and_then(|v| v.as_str()).map(str::to_string);
    (ns, name, a)
}

/// Bring every registered pod's mask and the egress maps to `conf`. `extra`: the
/// mask of a pod about to be registered (its entries must be in place first).
pub fn sync(pins: &Pins, conf: &MasqOptions, extra: Option<u32>) -> Result<()> {
    let policies = &conf.egress_policies;
    write_policies(pins, policies)?;
    let metas = pod::list_meta(pins)?;
    let mut masks: BTreeSet<u32> = extra.into_iter().filter(|&m| m != 0).collect();
    let mut pending = Vec::new();
    for (key, info) in pod::list_attachments(pins)? {
        let (ns, name, ann) = metas.get(&key).map(annotation_of).unwrap_or_default();
        let mask = match mask_of(conf, &ns, &name, ann.as_deref()) {
            Ok(m) => m,
            Err(e) => {
                // A running pod's annotation the new config refuses: it keeps the
                // network's settings (an annotation never widens what it may use).
                log::warn!("pod {}: {}; it keeps the network's settings", pod::cstr(&key.container_id), e.msg);
                0
            }
        };
        if mask != 0 {
            masks.insert(mask);
        }
        pending.push((info, mask));
    }
    // Entries for every mask in use first, then the pods' masks, then the stale entries.
    let (want4, want6) = entries(policies, &masks);
    let mut e4: LpmTrie<MapData, PolicyDst4Data, PolicyHit> = maps::pinned(pins, abi::MAP_POLICY_DST4)?;
    let mut e6: LpmTrie<MapData, PolicyDst6Data, PolicyHit> = maps::pinned(pins, abi::MAP_POLICY_DST6)?;
    for ((set, addr, plen), hit) in &want4 {
        e4.insert(&Key::new(32 + plen, PolicyDst4Data { set: *set, daddr: *addr }), *hit, 0)
            .bpf_ctx("write policy_dst4 (more than POLICY_DSTS_MAX destinations?)")?;
    }
    for ((set, addr, plen), hit) in &want6 {
        e6.insert(&Key::new(32 + plen, PolicyDst6Data { set: *set, daddr: *addr }), *hit, 0)
            .bpf_ctx("write policy_dst6 (more than POLICY_DSTS_MAX destinations?)")?;
    }
    for (info, mask) in pending {
        pod::set_policies(pins, &info, mask)?;
    }
    let stale4: Vec<Key<PolicyDst4Data>> = e4
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| !want4.contains_key(&(k.data().set, k.data().daddr, k.prefix_len() - 32)))
        .collect();
    for k in stale4 {
        e4.remove(&k).bpf_ctx("remove from policy_dst4")?;
    }
    let stale6: Vec<Key<PolicyDst6Data>> = e6
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| !want6.contains_key(&(k.data().set, k.data().daddr, k.prefix_len() - 32)))
        .collect();
    for k in stale6 {
        e6.remove(&k).bpf_ctx("remove from policy_dst6")?;
    }
    Ok(())
}

type Want<const N: usize> = BTreeMap<(u32, [u8; N], u32), PolicyHit>;

/// The policy_dst4 / policy_dst6 entries of `masks`: (mask, network, prefix) -> policy.
fn entries(policies: &[EgressPolicy], masks: &BTreeSet<u32>) -> (Want<4>, Want<16>) {
    let (mut w4, mut w6) = (BTreeMap::new(), BTreeMap::new());
    for &mask in masks {
        for (net, i) in config::policy_dst_entries(policies, mask) {
            let flags = if policies[i].action == EgressAction::NoNat { abi::POLICY_F_NO_NAT } else { 0 };
            let hit = PolicyHit { policy: i as u32, flags };
            match net {
                IpNetwork::V4(n) => {
                    w4.insert((mask, n.network().octets(), n.prefix() as u32), hit);
                }
                IpNetwork::V6(n) => {
                    w6.insert((mask, n.network().octets(), n.prefix() as u32), hit);
                }
            }
        }
    }
    (w4, w6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> MasqOptions {
        let c = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","egressPolicies":{json}}}"#);
        config::parse_netconf(c.as_bytes()).unwrap().masq
    }

    #[test]
    fn entries_label_each_destination_with_the_first_policy_and_its_action() {
        let c = conf(
            r#"[{"name":"a","namespaces":["x"],"destinations":["10.0.0.0/8"],"masqueradeAddress":"192.0.2.1"},
                {"name":"b","namespaces":["x"],"destinations":["10.1.0.0/16","2001:db8::/32"],"natOutgoing":false}]"#,
        );
        let (w4, w6) = entries(&c.egress_policies, &[0b11, 0b10].into_iter().collect());
        assert_eq!(w4[&(0b11, [10, 0, 0, 0], 8)], PolicyHit { policy: 0, flags: 0 });
        assert_eq!(w4[&(0b11, [10, 1, 0, 0], 16)], PolicyHit { policy: 0, flags: 0 }, "inside a: a wins");
        assert_eq!(w4[&(0b10, [10, 1, 0, 0], 16)], PolicyHit { policy: 1, flags: abi::POLICY_F_NO_NAT });
        assert!(!w4.contains_key(&(0b10, [10, 0, 0, 0], 8)));
        assert_eq!(w6.len(), 2, "b's IPv6 destination under both masks: {w6:?}");
    }

    #[test]
    fn ownership_names_the_policy_and_the_address() {
        let c = conf(r#"[{"name":"partner","namespaces":["x"],"masqueradeAddress":["192.0.2.1","192.0.2.9"]}]"#);
        let owned: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap()].into_iter().collect();
        let e = check_ownership(&c.egress_policies, &owned, "eth0: 192.0.2.1").unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("egressPolicies[0].masqueradeAddress") && e.msg.contains("192.0.2.9"), "{}", e.msg);
        assert!(e.msg.contains("\"partner\""), "{}", e.msg);
        let owned: BTreeSet<IpAddr> = ["192.0.2.1".parse().unwrap(), "192.0.2.9".parse().unwrap()].into_iter().collect();
        check_ownership(&c.egress_policies, &owned, "").unwrap();
    }
}
