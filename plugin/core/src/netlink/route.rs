//! Routes: the interfaces of the default routes, and the route to one address.

use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::route::{RouteAttribute, RouteHeader, RouteMessage, RouteType};
use rtnetlink::IpVersion;

use super::{errno, nl_err, run, LinkInfo};
use crate::error::{Error, Result};

const RT_TABLE_MAIN: u32 = RouteHeader::RT_TABLE_MAIN as u32;

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

/// The interface of the route to `dst` (RTM_GETROUTE, as `ip route get DST`),
/// or None when the kernel has no route to it.
pub fn route_oif(dst: IpAddr) -> Result<Option<u32>> {
    use futures::StreamExt;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
    use netlink_packet_route::{route::RouteAddress, AddressFamily, RouteNetlinkMessage};

    run(move |mut handle| async move {
        // rtnetlink's RouteGetRequest only dumps; a lookup of one address is
        // built by hand.
        let mut msg = RouteMessage::default();
        match dst {
            IpAddr::V4(a) => {
                msg.header.address_family = AddressFamily::Inet;
                msg.header.destination_prefix_length = 32;
                msg.attributes.push(RouteAttribute::Destination(RouteAddress::Inet(a)));
            }
            IpAddr::V6(a) => {
                msg.header.address_family = AddressFamily::Inet6;
                msg.header.destination_prefix_length = 128;
                msg.attributes.push(RouteAttribute::Destination(RouteAddress::Inet6(a)));
            }
        }
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetRoute(msg));
        req.header.flags = NLM_F_REQUEST;
        let mut resp = handle.request(req).map_err(|e| Error::netlink(format!("route get {dst}: {e}")))?;
        let mut oif = None;
        while let Some(m) = resp.next().await {
            match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) => {
                    for a in r.attributes {
                        if let RouteAttribute::Oif(i) = a {
                            oif = Some(i);
                        }
                    }
                }
                // No route (ENETUNREACH...): the caller falls back.
                NetlinkPayload::Error(e) if e.code.is_some() => return Ok(None),
                _ => {}
            }
        }
        Ok(oif)
    })
}
