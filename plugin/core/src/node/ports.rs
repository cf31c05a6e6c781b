//! net.ipv4.ip_local_reserved_ports: older versions reserved the port range
//! there (recorded in `reserved_ports`); this gives exactly those ports back.

use aya::maps::{Array, MapData};

use crate::{
    bpf::{
        abi::{self, PortRange},
        loader::Pins,
        maps,
    },
    error::{Context, Result},
    netlink,
};

const RESERVED_PORTS: &str = "net/ipv4/ip_local_reserved_ports";

/// Give back what an older version reserved (at the first reconcile after an
/// upgrade, and at uninstall): take every range it recorded out of
/// ip_local_reserved_ports (ports reserved by anyone else stay) and forget them.
/// Returns the ranges given back.
pub fn release_ports(pins: &Pins) -> Result<Vec<(u16, u16)>> {
    let mut map: Array<MapData, PortRange> = maps::pinned(pins, abi::MAP_RESERVED_PORTS)?;
    let mine: Vec<(u32, PortRange)> = (0..abi::RESERVED_PORTS_MAX)
        .filter_map(|i| map.get(&i, 0).ok().map(|r| (i, r)))
        .filter(|(_, r)| *r != PortRange::default())
        .collect();
    if mine.is_empty() {
        return Ok(Vec::new());
    }
    let current = netlink::read_sysctl(RESERVED_PORTS)?;
    let left = mine.iter().fold(current.trim().to_string(), |acc, (_, r)| subtract_port_range(&acc, (r.lo, r.hi)));
    if left != current.trim() {
        netlink::write_sysctl(RESERVED_PORTS, &left)?;
    }
    for (i, _) in &mine {
        map.set(*i, PortRange::default(), 0).bpf_ctx("clear reserved_ports")?;
    }
    Ok(mine.iter().map(|(_, r)| (r.lo, r.hi)).collect())
}


fn parse_port_ranges(list: &str) -> Vec<(u16, u16)> {
    list.split(',')
        .filter_map(|p| {
            let p = p.trim();
            if p.is_empty() {
                return None;
            }
            match p.split_once('-') {
                Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
                None => p.parse().ok().map(|v| (v, v)),
            }
        })
        .collect()
}

fn format_port_ranges(ranges: &[(u16, u16)]) -> String {
    ranges
        .iter()
        .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
        .collect::<Vec<_>>()
        .join(",")
}

/// A sysctl port list ("1,5-9") without one range, normalized.
fn subtract_port_range(current: &str, (lo, hi): (u16, u16)) -> String {
    let mut out = Vec::new();
    for (a, b) in parse_port_ranges(current) {
        if b < lo || a > hi {
            out.push((a, b));
            continue;
        }
        if a < lo {
            out.push((a, lo - 1));
        }
        if b > hi {
            out.push((hi + 1, b));
        }
    }
    // Merge adjacent pieces back the way merge_port_ranges would print them.
    match out.split_first() {
        None => String::new(),
        Some((&first, rest)) => rest.iter().fold(format_port_ranges(&[first]), |acc, r| {
            merge_port_ranges(&acc, *r)
        }),
    }
}

/// Union of a sysctl port list ("1,5-9") and one range, normalized.
fn merge_port_ranges(current: &str, add: (u16, u16)) -> String {
    let mut ranges = parse_port_ranges(current);
    ranges.push(add);
    ranges.sort();
    let mut out: Vec<(u16, u16)> = Vec::new();
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a as u32 <= last.1 as u32 + 1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    format_port_ranges(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What older versions recorded when they reserved [lo, hi]: the parts a sysctl port list ("1,5-9") does not cover.
    fn uncovered_port_ranges(current: &str, (lo, hi): (u16, u16)) -> Vec<(u16, u16)> {
        let mut taken = parse_port_ranges(current);
        taken.sort();
        let mut out = Vec::new();
        let mut next = lo as u32; // first port of [lo, hi] not yet accounted for
        for (a, b) in taken {
            let (a, b) = (a as u32, b as u32);
            if b < next || a > hi as u32 {
                continue;
            }
            if a > next {
                out.push((next as u16, (a - 1) as u16));
            }
            next = next.max(b + 1);
        }
        if next <= hi as u32 {
            out.push((next as u16, hi));
        }
        out
    }

    #[test]
    fn merge_ranges_cases() {
        assert_eq!(merge_port_ranges("", (1024, 29999)), "1024-29999");
        assert_eq!(merge_port_ranges("1024-29999", (1024, 29999)), "1024-29999");
        assert_eq!(merge_port_ranges("80,8080", (1024, 29999)), "80,1024-29999");
        assert_eq!(merge_port_ranges("1000-2000,30000", (1500, 29999)), "1000-30000");
        assert_eq!(merge_port_ranges("5", (6, 6)), "5-6");
        assert_eq!(merge_port_ranges("garbage,7", (9, 9)), "7,9");
    }

    #[test]
    fn subtract_range_cases() {
        assert_eq!(subtract_port_range("1024-29999", (1024, 29999)), "");
        assert_eq!(subtract_port_range("80,1024-29999", (1024, 29999)), "80");
        assert_eq!(subtract_port_range("1000-30000", (1500, 29999)), "1000-1499,30000");
        assert_eq!(subtract_port_range("5-6", (6, 6)), "5");
        assert_eq!(subtract_port_range("7,9", (1, 3)), "7,9");
        // merge then subtract gives the original back (for ports outside the range)
        assert_eq!(subtract_port_range(&merge_port_ranges("80,30080", (1024, 29999)), (1024, 29999)), "80,30080");
    }

    #[test]
    fn uncovered_ranges_are_what_reserving_adds() {
        assert_eq!(uncovered_port_ranges("", (1024, 29999)), vec![(1024, 29999)]);
        assert_eq!(uncovered_port_ranges("1024-29999", (1024, 29999)), vec![]);
        assert_eq!(uncovered_port_ranges("1000-2000", (1500, 2999)), vec![(2001, 2999)]);
        assert_eq!(uncovered_port_ranges("2000-2100,1500,2500-4000", (1500, 2999)), vec![(1501, 1999), (2101, 2499)]);
        assert_eq!(uncovered_port_ranges("80,30080", (1024, 29999)), vec![(1024, 29999)]);
        assert_eq!(uncovered_port_ranges("65535", (65000, 65535)), vec![(65000, 65534)]);
        assert_eq!(uncovered_port_ranges("garbage,10-20", (15, 25)), vec![(21, 25)]);
        // Giving back what was added restores the list exactly, whatever overlapped.
        for (before, range, normalized) in [
            ("1000-2000", (1500, 2999), "1000-2000"),
            ("2000-2100,1500", (1500, 2999), "1500,2000-2100"),
            ("80,30080", (1024, 29999), "80,30080"),
            ("", (1, 65535), ""),
        ] {
            let after = merge_port_ranges(before, range);
            let back = uncovered_port_ranges(before, range).iter().fold(after, |acc, r| subtract_port_range(&acc, *r));
            assert_eq!(back, normalized, "{before} + {range:?}");
        }
    }
}
