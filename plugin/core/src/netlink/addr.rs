//! Addresses of an interface.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use netlink_packet_route::address::{
    AddressAttribute, AddressFlag, AddressHeaderFlag, AddressMessage,
};

use super::{nl_err, run};
use crate::error::Result;

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
