//! Hand-built Ethernet frames (IPv4 TCP/UDP/ICMP, IPv6, ARP) with correct
//! checksums, and a from-scratch parser/checksum verifier for the programs' output.

#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const GRE: u8 = 47;
pub const ESP: u8 = 50;

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

pub const ICMP_ECHO_REPLY: u8 = 0;
pub const ICMP_ECHO_REQUEST: u8 = 8;

const ETH_P_IP: u16 = 0x0800;
const ETH_P_ARP: u16 = 0x0806;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_HLEN: usize = 14;
const IP_MF: u16 = 0x2000;

const PAYLOAD: &[u8] = b"ebpf-masq test payload";

// ---- checksums ----

/// One's-complement sum of `data` (16-bit big-endian words) added to `sum`, unfolded.
fn ones_sum(data: &[u8], mut sum: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for w in &mut chunks {
        sum += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// RFC 791 header checksum over `hdr` (its checksum field must be zero to compute,
/// or as-is to verify: a valid header gives 0).
pub fn ipv4_csum(hdr: &[u8]) -> u16 {
    fold(ones_sum(hdr, 0))
}

/// TCP/UDP checksum over the IPv4 pseudo-header and `segment` (same zero/verify rule).
pub fn l4_csum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, segment: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, proto]);
    pseudo.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    fold(ones_sum(segment, ones_sum(&pseudo, 0)))
}

/// ICMP checksum: no pseudo-header.
pub fn icmp_csum(msg: &[u8]) -> u16 {
    fold(ones_sum(msg, 0))
}

// ---- builders ----

fn ether(ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HLEN + body.len());
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // dst
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // src
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// An IPv4 frame carrying `l4` as is (its checksum, if any, already filled in).
/// `frag` is the raw flags+offset field (host order).
pub fn ipv4_frame(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let c = ipv4_csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(l4);
    ether(ETH_P_IP, &ip)
}

/// `frame` (an IPv4 frame from the builders here) with `opts` (a multiple of 4
/// bytes) inserted as IP options: IHL, total length and header checksum follow.
/// The L4 checksum stays as it was (options are not in the pseudo-header).
pub fn with_ip_options(frame: &[u8], opts: &[u8]) -> Vec<u8> {
    assert!(opts.len().is_multiple_of(4) && opts.len() <= 40, "IP options must be whole words, at most 40 bytes");
    let mut f = frame.to_vec();
    let ip = ETH_HLEN;
    let ihl = (f[ip] & 0x0f) as usize * 4;
    f.splice(ip + ihl..ip + ihl, opts.iter().copied());
    f[ip] = 0x40 | ((ihl + opts.len()) / 4) as u8;
    let total = u16::from_be_bytes([f[ip + 2], f[ip + 3]]) as usize + opts.len();
    f[ip + 2..ip + 4].copy_from_slice(&(total as u16).to_be_bytes());
    f[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
    let c = ipv4_csum(&f[ip..ip + ihl + opts.len()]);
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    f
}

pub fn tcp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    tcp_seq(src, dst, sport, dport, flags, 0x0102_0304, if flags & ACK != 0 { 0x0a0b_0c0d } else { 0 })
}

/// The payload's length: a segment of `tcp_seq` with FIN is acknowledged by `seq + TCP_PAYLOAD_LEN + 1`.
pub const TCP_PAYLOAD_LEN: u32 = PAYLOAD.len() as u32;

/// A TCP segment (with the test payload) whose sequence and acknowledgment numbers are given.
pub fn tcp_seq(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let mut seg = vec![0u8; 20];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = flags;
    seg[14..16].copy_from_slice(&64240u16.to_be_bytes()); // window
    seg.extend_from_slice(PAYLOAD);
    let c = l4_csum(src, dst, TCP, &seg);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    ipv4_frame(src, dst, TCP, 0, &seg)
}

fn udp_segment(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, with_csum: bool) -> Vec<u8> {
    let mut seg = vec![0u8; 8];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..6].copy_from_slice(&((8 + PAYLOAD.len()) as u16).to_be_bytes());
    seg.extend_from_slice(PAYLOAD);
    if with_csum {
        let c = match l4_csum(src, dst, UDP, &seg) {
            0 => 0xffff, // RFC 768: a computed zero is sent as all ones
            c => c,
        };
        seg[6..8].copy_from_slice(&c.to_be_bytes());
    }
    seg
}

pub fn udp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    ipv4_frame(src, dst, UDP, 0, &udp_segment(src, dst, sport, dport, true))
}

/// UDP without a checksum (field zero).
pub fn udp_nocsum(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    ipv4_frame(src, dst, UDP, 0, &udp_segment(src, dst, sport, dport, false))
}

pub fn icmp(src: Ipv4Addr, dst: Ipv4Addr, ty: u8, id: u16, seq: u16) -> Vec<u8> {
    let mut msg = vec![ty, 0, 0, 0];
    msg.extend_from_slice(&id.to_be_bytes());
    msg.extend_from_slice(&seq.to_be_bytes());
    msg.extend_from_slice(PAYLOAD);
    let c = icmp_csum(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4_frame(src, dst, ICMP, 0, &msg)
}

pub fn echo_request(src: Ipv4Addr, dst: Ipv4Addr, id: u16, seq: u16) -> Vec<u8> {
    icmp(src, dst, ICMP_ECHO_REQUEST, id, seq)
}

pub fn echo_reply(src: Ipv4Addr, dst: Ipv4Addr, id: u16, seq: u16) -> Vec<u8> {
    icmp(src, dst, ICMP_ECHO_REPLY, id, seq)
}

/// A non-first fragment (offset 1480 bytes, MF set) of a UDP datagram: no L4 header.
pub fn udp_non_first_fragment(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    ipv4_frame(src, dst, UDP, IP_MF | (1480 / 8), &[0xab; 64])
}

/// A TCP packet whose TCP header is cut after 10 bytes (IP total length agrees).
pub fn tcp_truncated(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> Vec<u8> {
    let full = tcp(src, dst, sport, dport, SYN);
    ipv4_frame(src, dst, TCP, 0, &full[ETH_HLEN + 20..ETH_HLEN + 30])
}

/// GRE (protocol 47) carrying a minimal header (no flags, IPv4 payload type).
pub fn gre(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    ipv4_frame(src, dst, GRE, 0, &[0, 0, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef])
}

/// ARP request "who has `target`, tell `sender`".
pub fn arp(sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut a = vec![0, 1, 0x08, 0x00, 6, 4, 0, 1];
    a.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    a.extend_from_slice(&sender.octets());
    a.extend_from_slice(&[0; 6]);
    a.extend_from_slice(&target.octets());
    ether(ETH_P_ARP, &a)
}

/// IPv6 UDP datagram (checksum left zero: only the headers matter to these programs).
pub fn ipv6_udp(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let seg_len = 8 + PAYLOAD.len();
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(seg_len as u16).to_be_bytes());
    ip.extend_from_slice(&[UDP, 64]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&5353u16.to_be_bytes());
    ip.extend_from_slice(&5353u16.to_be_bytes());
    ip.extend_from_slice(&(seg_len as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(PAYLOAD);
    ether(ETH_P_IPV6, &ip)
}

// ---- parsing / verification ----

/// The fields of an IPv4 frame the NAT touches. For ICMP, `sport` is the echo id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Summary {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

fn ipv4_parts(frame: &[u8]) -> (&[u8], &[u8]) {
    assert!(frame.len() >= ETH_HLEN + 20, "frame too short for IPv4: {} bytes", frame.len());
    assert_eq!(u16::from_be_bytes([frame[12], frame[13]]), ETH_P_IP, "not an IPv4 frame");
    let ip = &frame[ETH_HLEN..];
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    assert!(ihl >= 20 && total <= ip.len() && total >= ihl, "bad IPv4 lengths");
    (&ip[..ihl], &ip[ihl..total])
}

pub fn summary(frame: &[u8]) -> Ipv4Summary {
    let (hdr, l4) = ipv4_parts(frame);
    let proto = hdr[9];
    let be16 = |o: usize| u16::from_be_bytes([l4[o], l4[o + 1]]);
    let (sport, dport) = match proto {
        TCP | UDP => (be16(0), be16(2)),
        ICMP => (be16(4), 0),
        _ => (0, 0),
    };
    Ipv4Summary {
        src: Ipv4Addr::new(hdr[12], hdr[13], hdr[14], hdr[15]),
        dst: Ipv4Addr::new(hdr[16], hdr[17], hdr[18], hdr[19]),
        proto,
        sport,
        dport,
    }
}

/// Verify, from scratch, the IPv4 header checksum and the TCP/UDP/ICMP checksum of
/// `frame` (a UDP checksum of zero means "none" and is accepted).
pub fn assert_checksums(frame: &[u8]) {
    let (hdr, l4) = ipv4_parts(frame);
    assert_eq!(ipv4_csum(hdr), 0, "IPv4 header checksum invalid: {hdr:02x?}");
    let s = summary(frame);
    match s.proto {
        TCP => assert_eq!(l4_csum(s.src, s.dst, TCP, l4), 0, "TCP checksum invalid"),
        UDP if l4[6..8] == [0, 0] => {}
        UDP => assert_eq!(l4_csum(s.src, s.dst, UDP, l4), 0, "UDP checksum invalid"),
        ICMP => assert_eq!(icmp_csum(l4), 0, "ICMP checksum invalid"),
        p => panic!("no checksum rule for protocol {p}"),
    }
}

/// The UDP checksum field of `frame`.
pub fn udp_csum_field(frame: &[u8]) -> u16 {
    let (_, l4) = ipv4_parts(frame);
    u16::from_be_bytes([l4[6], l4[7]])
}
