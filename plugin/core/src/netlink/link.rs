//! Links: one by name or ifindex, or all of them.

use futures::TryStreamExt;
use netlink_packet_route::link::{LinkAttribute, LinkFlag, LinkInfo as NlLinkInfo, LinkMessage};

use super::{errno, nl_err, run};
use crate::error::Result;

/// `ARPHRD_ETHER`: Ethernet-like link layer (veth, bridge, physical NICs...).
pub const ARPHRD_ETHER: u16 = 1;
/// `ARPHRD_NONE`: no link-layer header (wireguard, TUN, wireguard-go).
pub const ARPHRD_NONE: u16 = 65534;
/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
const IFNAME_MAX: usize = 15;

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

    pub(super) fn from_message(msg: LinkMessage) -> LinkInfo {
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
