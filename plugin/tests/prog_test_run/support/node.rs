//! The test node the modules share: its addresses (the masquerade address
//! 192.0.2.1, pods in 10.1.0.0/24 and fd00:10:1::/64, remotes in 203.0.113.0/24
//! and 2001:db8:100::/64) and the data plane most modules build on.

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use super::harness::{Dataplane, LO, NAT_MAX_ENTRIES_IN_TESTS};

pub const MASQ: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const POD: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);
pub const POD_NO_NAT: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 6);
pub const POD2: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 7);
/// In the pods' range, but no pod.
pub const STRANGER: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 99);
pub const REMOTE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
pub const REMOTE2: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// Inside the native-routing CIDR 10.0.0.0/8.
pub const NATIVE_DST: Ipv4Addr = Ipv4Addr::new(10, 2, 3, 4);
pub const TUNNEL_CLIENT: Ipv4Addr = Ipv4Addr::new(192, 168, 6, 7);
/// The pods' veth ifindex (POD; POD2 on VETH + 1).
pub const VETH: u32 = 7;

pub fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
pub fn masq6() -> Ipv6Addr {
    a6("2001:db8:ffff::1")
}
pub fn pod6() -> Ipv6Addr {
    a6("fd00:10:1::5")
}
pub fn remote6() -> Ipv6Addr {
    a6("2001:db8:100::10")
}
/// Inside the native-routing CIDR fd00::/8.
pub fn native6() -> Ipv6Addr {
    a6("fd00:20::4")
}

/// A node: uplink = loopback (the test_run device)
/// masquerading to MASQ, POD and POD2 (natOutgoing) behind VETH and VETH + 1.
pub fn pods_node() -> Dataplane {
    pods_node_sized(NAT_MAX_ENTRIES_IN_TESTS)
}

/// `pods_node` with another natMaxEntries.
pub fn pods_node_sized(nat_max_entries: u32) -> Dataplane {
    let dp = Dataplane::with_nat_max_entries(nat_max_entries);
    dp.add_uplink(LO, MASQ);
    dp.add_pod(POD, VETH, true);
    dp.add_pod(POD2, VETH + 1, true);
    dp
}
