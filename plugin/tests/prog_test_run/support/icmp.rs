//! ICMP / ICMPv6 error messages quoting a packet (RFC 792 / 4443), built from
//! scratch, and a from-scratch parser/checksum verifier for the quoted packet.

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use super::packet::{icmp_csum, ipv4_csum, ipv4_frame, l4_csum, ESP, GRE, ICMP, TCP, UDP};
use super::packet6::{ipv6_frame, ipv6_part, l6_csum, ICMP6};

pub const ICMP_DEST_UNREACH: u8 = 3;
pub const ICMP_TIME_EXCEEDED: u8 = 11;
pub const CODE_PORT_UNREACH: u8 = 3;
pub const CODE_FRAG_NEEDED: u8 = 4;

const ETH_HLEN: usize = 14;

/// The IP packet inside `frame` (either family, no extension headers) as an error
/// quotes it: its IP header and the first `l4_bytes` bytes after it (None: all).
/// Header fields (total/payload length, checksums) are left as they were.
pub fn quote(frame: &[u8], l4_bytes: Option<usize>) -> Vec<u8> {
    let ip = &frame[ETH_HLEN..];
    let hlen = match ip[0] >> 4 {
        4 => (ip[0] & 0x0f) as usize * 4,
        6 => 40,
        v => panic!("IP version {v}"),
    };
    let end = l4_bytes.map_or(ip.len(), |n| (hlen + n).min(ip.len()));
    ip[..end].to_vec()
}

fn error_msg(ty: u8, code: u8, rest: u32, quoted: &[u8]) -> Vec<u8> {
    let mut msg = vec![ty, code, 0, 0];
    msg.extend_from_slice(&rest.to_be_bytes());
    msg.extend_from_slice(quoted);
    msg
}

/// ICMPv4 error `ty`/`code` from `src` to `dst`; `rest` is header word 2
/// (the next-hop MTU in its low 16 bits for "fragmentation needed").
pub fn icmp4_error(src: Ipv4Addr, dst: Ipv4Addr, ty: u8, code: u8, rest: u32, quoted: &[u8]) -> Vec<u8> {
    let mut msg = error_msg(ty, code, rest, quoted);
    let c = icmp_csum(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4_frame(src, dst, ICMP, 0, &msg)
}

/// ICMPv6 error; `rest` is the MTU for "packet too big", 0 otherwise.
pub fn icmp6_error(src: Ipv6Addr, dst: Ipv6Addr, ty: u8, code: u8, rest: u32, quoted: &[u8]) -> Vec<u8> {
    let mut msg = error_msg(ty, code, rest, quoted);
    let c = l6_csum(src, dst, ICMP6, &msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    ipv6_frame(src, dst, ICMP6, &msg)
}

// ---- parsing / verification ----

/// The tuple of a quoted packet. ICMP echo: the id in `sport`, `dport` 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted<A> {
    pub src: A,
    pub dst: A,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

fn quoted_ports(proto: u8, l4: &[u8]) -> (u16, u16) {
    let be16 = |o: usize| u16::from_be_bytes([l4[o], l4[o + 1]]);
    match proto {
        TCP | UDP => (be16(0), be16(2)),
        ICMP | ICMP6 => (be16(4), 0),
        _ => (0, 0),
    }
}

/// (outer IPv4 header, ICMP message) of an ICMPv4 frame.
fn icmp4_parts(frame: &[u8]) -> (&[u8], &[u8]) {
    let ip = &frame[ETH_HLEN..];
    assert_eq!(ip[0] >> 4, 4, "not IPv4");
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    assert!(total <= ip.len(), "total length beyond the frame");
    assert_eq!(ip[9], ICMP, "not ICMP");
    (&ip[..ihl], &ip[ihl..total])
}

/// The packet quoted by an ICMPv4 error frame, and its tuple.
pub fn quoted4(frame: &[u8]) -> (Vec<u8>, Quoted<Ipv4Addr>) {
    let (_, msg) = icmp4_parts(frame);
    let q = &msg[8..];
    let ihl = (q[0] & 0x0f) as usize * 4;
    let (sport, dport) = quoted_ports(q[9], &q[ihl..]);
    let a = |o: usize| Ipv4Addr::new(q[o], q[o + 1], q[o + 2], q[o + 3]);
    (q.to_vec(), Quoted { src: a(12), dst: a(16), proto: q[9], sport, dport })
}

/// The packet quoted by an ICMPv6 error frame, and its tuple.
pub fn quoted6(frame: &[u8]) -> (Vec<u8>, Quoted<Ipv6Addr>) {
    let ip = ipv6_part(frame);
    assert_eq!(ip[6], ICMP6, "not ICMPv6 (or extension headers)");
    let q = &ip[40 + 8..];
    let a = |o: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&q[o..o + 16]).unwrap());
    let (sport, dport) = quoted_ports(q[6], &q[40..]);
    (q.to_vec(), Quoted { src: a(8), dst: a(24), proto: q[6], sport, dport })
}

/// Every checksum of an ICMPv4 error frame, each computed from scratch: the outer
/// IPv4 header, ICMP over the whole message, the quoted IPv4 header, and the
/// quoted L4 checksum when the quoted datagram is complete.
/// Returns whether the quoted L4 checksum could be (and was) checked.
#[track_caller]
pub fn assert_icmp4_error_checksums(frame: &[u8]) -> bool {
    let (hdr, msg) = icmp4_parts(frame);
    assert_eq!(ipv4_csum(hdr), 0, "outer IPv4 header checksum invalid");
    assert_eq!(icmp_csum(msg), 0, "ICMP checksum (whole message) invalid");
    let q = &msg[8..];
    let ihl = (q[0] & 0x0f) as usize * 4;
    assert_eq!(ipv4_csum(&q[..ihl]), 0, "quoted IPv4 header checksum invalid: {:02x?}", &q[..ihl]);
    let total = u16::from_be_bytes([q[2], q[3]]) as usize;
    if q.len() < total {
        return false;
    }
    let (_, t) = quoted4(frame);
    let l4 = &q[ihl..total];
    match t.proto {
        TCP => assert_eq!(l4_csum(t.src, t.dst, TCP, l4), 0, "quoted TCP checksum invalid"),
        UDP if l4[6..8] == [0, 0] => {}
        UDP => assert_eq!(l4_csum(t.src, t.dst, UDP, l4), 0, "quoted UDP checksum invalid"),
        ICMP => assert_eq!(icmp_csum(l4), 0, "quoted ICMP checksum invalid"),
        GRE | ESP => {} // nothing of theirs covers the addresses (its own checksum, if any, is payload here)
        p => panic!("no checksum rule for quoted protocol {p}"),
    }
    true
}

/// The ICMPv6 checksum (over the outer pseudo-header and the whole message) and
/// the quoted upper-layer checksum when the quoted packet is complete.
/// Returns whether the quoted checksum could be (and was) checked.
#[track_caller]
pub fn assert_icmp6_error_checksums(frame: &[u8]) -> bool {
    let ip = ipv6_part(frame);
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
    assert_eq!(l6_csum(src, dst, ICMP6, &ip[40..]), 0, "ICMPv6 checksum (pseudo-header + whole message) invalid");
    let (q, t) = quoted6(frame);
    let plen = u16::from_be_bytes([q[4], q[5]]) as usize;
    if q.len() < 40 + plen {
        return false;
    }
    if matches!(t.proto, GRE | ESP) {
        return true; // no checksum over the addresses
    }
    assert_eq!(l6_csum(t.src, t.dst, t.proto, &q[40..40 + plen]), 0, "quoted protocol {} checksum invalid", t.proto);
    true
}
