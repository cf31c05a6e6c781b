//! The ports each pod with a port limit holds towards one remote endpoint
//! (`port_counts`, masq_abi.h): kept by the programs, read by nobody else. A pod's
//! DEL forgets its addresses' entries, so a later pod given one of them does not
//! start with the old pod's counts against its limit.

use std::net::IpAddr;

use aya::maps::{HashMap, MapData};

use super::{
    abi::{self, PortCountKey},
    maps,
    pins::Pins,
};
use crate::error::{Context, Result};

/// True when `k` counts the ports of one of `addrs` (its `src`, as the programs
/// write it: `addr_words`, `v6` 1 for IPv6).
pub fn is_of(k: &PortCountKey, addrs: &[IpAddr]) -> bool {
    addrs.iter().any(|a| k.src == abi::addr_words(*a) && k.v6 == u8::from(a.is_ipv6()))
}

/// Forget every count of these addresses (a pod's DEL); returns how many went.
/// An older layout without the map: nothing to forget.
pub fn forget(pins: &Pins, addrs: &[IpAddr]) -> Result<usize> {
    if addrs.is_empty() || !pins.map(abi::MAP_PORT_COUNTS).exists() {
        return Ok(0);
    }
    let mut m: HashMap<MapData, PortCountKey, u32> = maps::pinned(pins, abi::MAP_PORT_COUNTS)?;
    // The keys first, then the deletes: removing while iterating restarts the walk.
    let mine: Vec<PortCountKey> = m.keys().filter_map(|k| k.ok()).filter(|k| is_of(k, addrs)).collect();
    for k in &mine {
        match m.remove(k) {
            Err(e) if !maps::is_key_not_found(&e) => return Err(e).bpf_ctx(abi::MAP_PORT_COUNTS),
            _ => {}
        }
    }
    Ok(mine.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str, remote: &str) -> PortCountKey {
        let (src, remote): (IpAddr, IpAddr) = (src.parse().unwrap(), remote.parse().unwrap());
        PortCountKey {
            src: abi::addr_words(src),
            nat_addr: abi::addr_words(if src.is_ipv6() { "fd00::5".parse().unwrap() } else { "10.0.0.5".parse().unwrap() }),
            remote: abi::addr_words(remote),
            rport: 443u16.to_be_bytes(),
            proto: 6,
            v6: u8::from(src.is_ipv6()),
        }
    }

    #[test]
    fn a_pods_addresses_match_their_keys_whatever_the_endpoint() {
        let pod: Vec<IpAddr> = vec!["10.244.1.5".parse().unwrap(), "fd00:244::5".parse().unwrap()];
        assert!(is_of(&key("10.244.1.5", "203.0.113.9"), &pod));
        assert!(is_of(&key("10.244.1.5", "198.51.100.1"), &pod));
        assert!(is_of(&key("fd00:244::5", "2001:db8::1"), &pod));
        assert!(!is_of(&key("10.244.1.6", "203.0.113.9"), &pod), "another pod");
        assert!(!is_of(&key("fd00:244::6", "2001:db8::1"), &pod));
        assert!(!is_of(&key("10.244.1.5", "203.0.113.9"), &[]));
        // The family counts: an IPv6 key whose first word equals the IPv4 address is not it.
        let mut k6 = key("10.244.1.5", "203.0.113.9");
        k6.v6 = 1;
        assert!(!is_of(&k6, &pod));
        // The node address and the remote endpoint are not the pod's.
        assert!(!is_of(&key("203.0.113.9", "10.244.1.5"), &pod));
    }
}
