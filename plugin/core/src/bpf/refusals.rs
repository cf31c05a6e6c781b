//! New flows the programs refused, per source address (`refusals`, masq_abi.h):
//! for want of a port towards a remote endpoint, over the source's share of a
//! busy endpoint's ports (fair shares), or at its pod's port limit there. Read
//! per pod by `status`, metrics and `explain`; a pod's DEL forgets its addresses,
//! so a later pod given one of them starts from nothing.

use std::net::IpAddr;

use aya::maps::{HashMap, MapData};

use super::{
    abi::{self, RefusalKey, Refusals},
    maps,
    pins::Pins,
};
use crate::error::{Context, Result};

/// The key the programs count `a` under (bpf/lib/nat/new_pair_tmpl.h `refused`).
pub fn key_of(a: IpAddr) -> RefusalKey {
    RefusalKey { addr: abi::addr_words(a), v6: u32::from(a.is_ipv6()) }
}

fn pinned(pins: &Pins) -> Result<Option<HashMap<MapData, RefusalKey, Refusals>>> {
    if !pins.map(abi::MAP_REFUSALS).exists() {
        return Ok(None); // an older layout: nothing counted
    }
    maps::pinned(pins, abi::MAP_REFUSALS).map(Some)
}

/// The refusals of these addresses (a pod's), summed.
pub fn of(pins: &Pins, addrs: &[IpAddr]) -> Result<Refusals> {
    let mut sum = Refusals::default();
    let Some(m) = pinned(pins)? else { return Ok(sum) };
    for a in addrs {
        if let Ok(r) = m.get(&key_of(*a), 0) {
            sum.no_port += r.no_port;
            sum.over_share += r.over_share;
            sum.over_limit += r.over_limit;
        }
    }
    Ok(sum)
}

/// Forget these addresses' refusals (a pod's DEL).
pub fn forget(pins: &Pins, addrs: &[IpAddr]) -> Result<()> {
    let Some(mut m) = pinned(pins)? else { return Ok(()) };
    for a in addrs {
        match m.remove(&key_of(*a)) {
            Err(e) if !maps::is_key_not_found(&e) => return Err(e).bpf_ctx(abi::MAP_REFUSALS),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hold_the_address_as_the_programs_write_it() {
        let k = key_of("10.1.0.5".parse().unwrap());
        assert_eq!((k.addr[0].to_ne_bytes(), &k.addr[1..], k.v6), ([10, 1, 0, 5], &[0u32; 3][..], 0));
        let k = key_of("fd00::1:5".parse().unwrap());
        assert_eq!((k.addr[0].to_ne_bytes(), k.addr[3].to_ne_bytes(), k.v6), ([0xfd, 0, 0, 0], [0, 1, 0, 5], 1));
    }
}
