//! Hand-built IPv6 Ethernet frames (TCP/UDP/ICMPv6, optionally behind extension
//! headers or split into fragments) with correct checksums, and a from-scratch
//! parser/checksum verifier for the programs' IPv6 output.

#![allow(dead_code)]

use std::net::Ipv6Addr;

use super::packet::{icmp_csum, ACK, TCP, UDP};

pub const ICMP6: u8 = 58;
pub const HOP_BY_HOP: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const DEST_OPTS: u8 = 60;

pub const ICMP6_DEST_UNREACH: u8 = 1;
pub const ICMP6_PKT_TOO_BIG: u8 = 2;
pub const ICMP6_TIME_EXCEEDED: u8 = 3;
pub const ICMP6_ECHO_REQUEST: u8 = 128;
pub const ICMP6_ECHO_REPLY: u8 = 129;

const ETH_P_IPV6: u16 = 0x86dd;
const ETH_HLEN: usize = 14;
const IP6_HLEN: usize = 40;

pub const PAYLOAD6: &[u8] = b"ebpf-masq v6 test payload";

// ---- checksums ----

/// The upper-layer checksum of RFC 8200 8.1 over the IPv6 pseudo-header and `seg`
/// (field zero to compute; as-is to verify: a valid segment gives 0).
pub fn l6_csum(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, seg: &[u8]) -> u16 {
    let mut buf = Vec::with_capacity(40 + seg.len());
    buf.extend_from_slice(&src.octets());
    buf.extend_from_slice(&dst.octets());
    buf.extend_from_slice(&(seg.len() as u32).to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0, nh]);
    buf.extend_from_slice(seg); // the pseudo-header is 40 bytes: word alignment is kept
    icmp_csum(&buf)
}

// ---- L4 segments (checksum filled in for src -> dst) ----

pub fn tcp6_seg(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    tcp6_seg_seq(src, dst, sport, dport, flags, 0x0102_0304, if flags & ACK != 0 { 0x0a0b_0c0d } else { 0 })
}

/// The payload's length: a segment of `tcp6_seq` with FIN is acknowledged by `seq + TCP6_PAYLOAD_LEN + 1`.
pub const TCP6_PAYLOAD_LEN: u32 = PAYLOAD6.len() as u32;

pub fn tcp6_seg_seq(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = flags;
    seg[14..16].copy_from_slice(&64240u16.to_be_bytes());
    seg.extend_from_slice(PAYLOAD6);
    let c = l6_csum(src, dst, TCP, &seg);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    seg
}

pub fn udp6_seg(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut seg = vec![0u8; 8];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    seg.extend_from_slice(payload);
    let c = match l6_csum(src, dst, UDP, &seg) {
        0 => 0xffff,
        c => c,
    };
    seg[6..8].copy_from_slice(&c.to_be_bytes());
    seg
}

pub fn icmp6_seg(src: Ipv6Addr, dst: Ipv6Addr, ty: u8, id: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut msg = vec![ty, 0, 0, 0];
    msg.extend_from_slice(&id.to_be_bytes());
    msg.extend_from_slice(&seq.to_be_bytes());
    msg.extend_from_slice(payload);
    let c = l6_csum(src, dst, ICMP6, &msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    msg
}

// ---- packets and frames ----

pub fn ether6(ip: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HLEN + ip.len());
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// An IPv6 packet (no Ethernet): header with next header `nh`, then `rest`
/// (extension headers and/or the upper-layer bytes) as given.
pub fn ipv6_packet(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, rest: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[nh, 64]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(rest);
    ip
}

pub fn ipv6_frame(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, rest: &[u8]) -> Vec<u8> {
    ether6(&ipv6_packet(src, dst, nh, rest))
}

/// An 8-byte hop-by-hop or destination-options header (one PadN option) followed by `next`.
pub fn opts_header(next: u8) -> Vec<u8> {
    vec![next, 0, 1, 4, 0, 0, 0, 0]
}

pub fn tcp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    ipv6_frame(src, dst, TCP, &tcp6_seg(src, dst, sport, dport, flags))
}

/// A TCP segment whose sequence and acknowledgment numbers are given.
pub fn tcp6_seq(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    ipv6_frame(src, dst, TCP, &tcp6_seg_seq(src, dst, sport, dport, flags, seq, ack))
}

pub fn udp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
    ipv6_frame(src, dst, UDP, &udp6_seg(src, dst, sport, dport, PAYLOAD6))
}

/// UDP behind one options extension header (`ext` = HOP_BY_HOP or DEST_OPTS).
pub fn udp6_ext(ext: u8, src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
    let mut rest = opts_header(UDP);
    rest.extend_from_slice(&udp6_seg(src, dst, sport, dport, PAYLOAD6));
    ipv6_frame(src, dst, ext, &rest)
}

pub fn echo6_request(src: Ipv6Addr, dst: Ipv6Addr, id: u16, seq: u16) -> Vec<u8> {
    ipv6_frame(src, dst, ICMP6, &icmp6_seg(src, dst, ICMP6_ECHO_REQUEST, id, seq, PAYLOAD6))
}

pub fn echo6_reply(src: Ipv6Addr, dst: Ipv6Addr, id: u16, seq: u16) -> Vec<u8> {
    ipv6_frame(src, dst, ICMP6, &icmp6_seg(src, dst, ICMP6_ECHO_REPLY, id, seq, PAYLOAD6))
}

/// Split the upper-layer packet `l4` (protocol `nh`) into IPv6 fragments with
/// identification `id`: `chunk` bytes each (a multiple of 8), the last one the rest.
pub fn fragments6(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, id: u32, l4: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    assert!(chunk.is_multiple_of(8) && chunk > 0);
    l4.chunks(chunk)
        .enumerate()
        .map(|(i, data)| {
            let off = i * chunk;
            let more = off + data.len() < l4.len();
            let mut rest = vec![nh, 0];
            rest.extend_from_slice(&((off as u16) | more as u16).to_be_bytes());
            rest.extend_from_slice(&id.to_be_bytes());
            rest.extend_from_slice(data);
            ipv6_frame(src, dst, FRAGMENT, &rest)
        })
        .collect()
}

// ---- parsing / verification ----

/// An IPv6 frame as the NAT sees it: the upper-layer protocol after the extension
/// headers, its ports (ICMPv6: echo id in `sport`), the fragment header if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Summary {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    /// Offset of the upper-layer bytes from the start of the IPv6 header.
    pub l4_off: usize,
    /// (offset in bytes, more fragments, identification)
    pub frag: Option<(usize, bool, u32)>,
}

/// The IPv6 packet of `frame`, cut to header + payload length.
pub fn ipv6_part(frame: &[u8]) -> &[u8] {
    assert!(frame.len() >= ETH_HLEN + IP6_HLEN, "frame too short for IPv6: {} bytes", frame.len());
    assert_eq!(u16::from_be_bytes([frame[12], frame[13]]), ETH_P_IPV6, "not an IPv6 frame");
    let ip = &frame[ETH_HLEN..];
    assert_eq!(ip[0] >> 4, 6, "IPv6 version");
    let plen = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    assert!(IP6_HLEN + plen <= ip.len(), "payload length {plen} beyond the frame");
    &ip[..IP6_HLEN + plen]
}

fn addr6(b: &[u8]) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap())
}

pub fn summary6(frame: &[u8]) -> Ipv6Summary {
    let ip = ipv6_part(frame);
    let mut nh = ip[6];
    let mut off = IP6_HLEN;
    let mut frag = None;
    loop {
        match nh {
            HOP_BY_HOP | ROUTING | DEST_OPTS => {
                nh = ip[off];
                off += (ip[off + 1] as usize + 1) * 8;
            }
            FRAGMENT => {
                let fo = u16::from_be_bytes([ip[off + 2], ip[off + 3]]);
                let id = u32::from_be_bytes(ip[off + 4..off + 8].try_into().unwrap());
                frag = Some(((fo & 0xfff8) as usize, fo & 1 != 0, id));
                nh = ip[off];
                off += 8;
                if fo & 0xfff8 != 0 {
                    break; // a later fragment: no upper-layer header here
                }
            }
            _ => break,
        }
    }
    let later = matches!(frag, Some((o, _, _)) if o > 0);
    let be16 = |o: usize| u16::from_be_bytes([ip[off + o], ip[off + o + 1]]);
    let (sport, dport) = match nh {
        _ if later => (0, 0),
        TCP | UDP => (be16(0), be16(2)),
        ICMP6 => (be16(4), 0),
        _ => (0, 0),
    };
    Ipv6Summary { src: addr6(&ip[8..24]), dst: addr6(&ip[24..40]), proto: nh, sport, dport, l4_off: off, frag }
}

/// Verify, from scratch, the TCP/UDP/ICMPv6 checksum of an unfragmented IPv6 frame
/// (extension headers allowed).
#[track_caller]
pub fn assert_checksums6(frame: &[u8]) {
    let s = summary6(frame);
    assert!(s.frag.is_none(), "fragment: verify the reassembled datagram instead");
    let l4 = &ipv6_part(frame)[s.l4_off..];
    assert_l6_csum(s.src, s.dst, s.proto, l4);
}

/// Verify the upper-layer checksum of the complete segment `l4`.
#[track_caller]
pub fn assert_l6_csum(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, l4: &[u8]) {
    match proto {
        TCP | ICMP6 => {}
        UDP => assert_ne!(&l4[6..8], &[0, 0], "IPv6 UDP checksum is mandatory"),
        p => panic!("no checksum rule for protocol {p}"),
    }
    assert_eq!(l6_csum(src, dst, proto, l4), 0, "protocol {proto} checksum invalid ({src} -> {dst})");
}

/// The fragmentable part of each fragment frame, put back together by offset.
pub fn reassemble6(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let s = summary6(f);
        let (off, _, _) = s.frag.expect("not a fragment");
        let data = &ipv6_part(f)[s.l4_off..];
        if out.len() < off + data.len() {
            out.resize(off + data.len(), 0);
        }
        out[off..off + data.len()].copy_from_slice(data);
    }
    out
}
