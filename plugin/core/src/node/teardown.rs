//! Taking the data plane off the node (`ebpf-masq uninstall`): detach the
//! programs from the uplinks and pod veths, give back reserved ports, remove
//! the pins. Keeps going after a failure; every failure lands in `errors`, and
//! what was done comes back as lines for the caller to print (stdout is not ours).

use aya::programs::TcAttachType;

use crate::{
    bpf::loader::{self, Pins},
    pod,
};

/// Detach every program this node's pins know about, then remove the pins.
/// (Records are written before attaching, so the pins know every attachment.)
pub fn teardown(pins: &Pins, errors: &mut Vec<String>) -> Vec<String> {
    let mut done = Vec::new();
    if pins.root.exists() {
        let lock = match super::lock(pins) {
            Ok(l) => Some(l),
            Err(e) => {
                errors.push(format!("lock: {}", e.msg));
                None
            }
        };
        if pins.map(crate::bpf::abi::MAP_UPLINKS).exists() {
            match super::detach_uplinks(pins) {
                Ok(()) => done.push("detached the uplink programs".to_string()),
                Err(e) => errors.push(e.msg),
            }
        }
        if pins.map(crate::bpf::abi::MAP_ATTACHMENTS).exists() {
            match pod::list_attachments(pins) {
                Ok(list) => {
                    let mut n = 0;
                    for (_, info) in &list {
                        // The pins go next, so the per-pod map entries need no cleanup.
                        let veth = pod::cstr(&info.veth_name);
                        let name = match crate::netlink::get_link_by_name(&veth) {
                            Ok(Some(l)) if l.index == info.veth_ifindex => Some(veth.as_str()),
                            _ => None,
                        };
                        match loader::detach(pins, info.veth_ifindex, name, TcAttachType::Ingress) {
                            Ok(()) => n += 1,
                            Err(e) => errors.push(e.msg),
                        }
                    }
                    done.push(format!("detached from {n} pod veth(s)"));
                }
                Err(e) => errors.push(e.msg),
            }
        }
        if pins.map(crate::bpf::abi::MAP_CONFIG).exists() {
            match super::release_ports(pins) {
                Ok(given) if given.is_empty() => {}
                Ok(given) => {
                    let list: Vec<String> = given.iter().map(|(lo, hi)| format!("{lo}-{hi}")).collect();
                    done.push(format!("released ports {} from net.ipv4.ip_local_reserved_ports", list.join(",")));
                }
                Err(e) => errors.push(e.msg),
            }
        }
        match loader::remove_pins(pins) {
            Ok(()) => done.push(format!("removed the pins under {}", pins.root.display())),
            Err(e) => errors.push(e.msg),
        }
        drop(lock);
    } else {
        done.push(format!("no pins under {}", pins.root.display()));
    }
    done
}
