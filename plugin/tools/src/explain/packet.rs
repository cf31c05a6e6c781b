//! The packet to explain as the command line describes it (`ExplainArgs`), the
//! interface it leaves by, and how far the data plane's parser gets with it.
//! Plain data: no maps, no netlink.

use std::net::IpAddr;

use serde::Serialize;

pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;
pub const IPPROTO_DCCP: u8 = 33;
pub const IPPROTO_SCTP: u8 = 132;
pub const IPPROTO_UDPLITE: u8 = 136;
pub const ICMP_ECHOREPLY: u8 = 0;
pub const ICMP_ECHO: u8 = 8;
pub const ICMPV6_ECHO_REQUEST: u8 = 128;
pub const ICMPV6_ECHO_REPLY: u8 = 129;
/// ICMP error types the data plane translates with their quoted packet (classify_icmp).
const ICMP_ERRORS: [u8; 3] = [3, 11, 12];
const ICMPV6_ERRORS: [u8; 4] = [1, 2, 3, 4];

/// Protocol of the packet to explain: `tcp`, `udp`, `icmp` (ICMPv6 for IPv6
/// addresses) or an IP protocol number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    Icmp,
    Other(u8),
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Proto::Tcp),
            "udp" => Ok(Proto::Udp),
            "icmp" | "icmpv6" | "icmp6" => Ok(Proto::Icmp),
            n => match n.parse::<u8>() {
                Ok(IPPROTO_TCP) => Ok(Proto::Tcp),
                Ok(IPPROTO_UDP) => Ok(Proto::Udp),
                Ok(IPPROTO_ICMP) | Ok(IPPROTO_ICMPV6) => Ok(Proto::Icmp),
                Ok(p) => Ok(Proto::Other(p)),
                Err(_) => Err(format!("unknown protocol {s:?} (tcp, udp, icmp or a protocol number)")),
            },
        }
    }
}

/// One packet leaving the node.
#[derive(Clone, Debug, PartialEq)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: Proto,
    /// ICMP type (default: echo request).
    pub icmp_type: Option<u8>,
    /// TCP/UDP source port; for ICMP echo the identifier.
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    /// A later (non-first) fragment: no L4 header.
    pub fragment: bool,
    /// The fragment's IP identification, to find its first fragment's ports.
    pub frag_id: Option<u32>,
}

impl Packet {
    pub fn new(src: IpAddr, dst: IpAddr, proto: Proto) -> Self {
        Packet { src, dst, proto, icmp_type: None, sport: None, dport: None, fragment: false, frag_id: None }
    }
    pub fn is_v6(&self) -> bool {
        self.src.is_ipv6()
    }
    pub(super) fn proto_number(&self) -> u8 {
        match self.proto {
            Proto::Tcp => IPPROTO_TCP,
            Proto::Udp => IPPROTO_UDP,
            Proto::Icmp if self.is_v6() => IPPROTO_ICMPV6,
            Proto::Icmp => IPPROTO_ICMP,
            Proto::Other(p) => p,
        }
    }
    pub(super) fn icmp_type(&self) -> u8 {
        self.icmp_type.unwrap_or(if self.is_v6() { ICMPV6_ECHO_REQUEST } else { ICMP_ECHO })
    }
    pub(super) fn echo_reply_type(&self) -> u8 {
        if self.is_v6() {
            ICMPV6_ECHO_REPLY
        } else {
            ICMP_ECHOREPLY
        }
    }
    pub(super) fn describe(&self) -> String {
        let name = crate::nat_list::proto_name(self.proto_number());
        let ep = |a: IpAddr, p: Option<u16>| match (a, p) {
            (_, None) => a.to_string(),
            (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        };
        let mut s = match self.proto {
            Proto::Icmp => {
                let id = self.sport.map(|i| format!(" id {i}")).unwrap_or_default();
                format!("{name} type {}{id} {} -> {}", self.icmp_type(), self.src, self.dst)
            }
            Proto::Tcp | Proto::Udp => format!("{name} {} -> {}", ep(self.src, self.sport), ep(self.dst, self.dport)),
            Proto::Other(_) => format!("protocol {name} {} -> {}", self.src, self.dst),
        };
        if self.fragment {
            s.push_str(&format!(
                " (later fragment{})",
                self.frag_id.map(|i| format!(", id {i}")).unwrap_or_default()
            ));
        }
        s
    }
}

/// How far the data plane's parser gets (enum l4_state of bpf/lib/parse.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum L4 {
    Ok,
    Fragment,
    Unsupported,
    IcmpError,
}

/// A protocol the data plane masquerades by address alone (bpf/lib/parse.h
/// l4_by_address): GRE, ESP, AH, IPIP... as netfilter's generic handling does, and
/// SCTP with its ports kept. Not TCP, UDP and ICMP(v6) (translated by port or echo
/// id), nor DCCP and UDP-Lite (refused: their checksums cover the addresses), nor
/// what an IPv6 packet cannot end with.
pub fn by_address(proto: u8) -> bool {
    !matches!(proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_ICMP | IPPROTO_ICMPV6 | IPPROTO_DCCP | IPPROTO_UDPLITE)
        && !matches!(proto, 0 | 43 | 44 | 59 | 60) // hop-by-hop, routing, fragment, no next header, destination options
}

/// The flow as parse_flow{4,6} fills it: (l4 state, sport, dport). A port is
/// None when the caller did not give it (the tuple is then incomplete).
pub(super) fn parse(pkt: &Packet) -> (L4, Option<u16>, Option<u16>) {
    if pkt.fragment {
        return (L4::Fragment, Some(0), Some(0));
    }
    match pkt.proto {
        Proto::Tcp | Proto::Udp => (L4::Ok, pkt.sport, pkt.dport),
        Proto::Icmp => {
            let t = pkt.icmp_type();
            let v6 = pkt.is_v6();
            let req = if v6 { ICMPV6_ECHO_REQUEST } else { ICMP_ECHO };
            // Echo: the identifier plays the pod-side port (sport in a request, dport in a reply).
            if t == req {
                (L4::Ok, pkt.sport, Some(0))
            } else if t == pkt.echo_reply_type() {
                (L4::Ok, Some(0), pkt.sport.or(pkt.dport))
            } else if (v6 && ICMPV6_ERRORS.contains(&t)) || (!v6 && ICMP_ERRORS.contains(&t)) {
                (L4::IcmpError, Some(0), Some(0))
            } else {
                (L4::Unsupported, Some(0), Some(0))
            }
        }
        // SCTP keeps its ports; any other protocol the data plane keys by its addresses alone (ports 0).
        Proto::Other(IPPROTO_SCTP) => (L4::Ok, pkt.sport, pkt.dport),
        Proto::Other(p) if by_address(p) => (L4::Ok, Some(0), Some(0)),
        Proto::Other(_) => (L4::Unsupported, Some(0), Some(0)),
    }
}

/// The interface the packet leaves by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutIf {
    pub ifindex: u32,
    pub name: Option<String>,
    /// "--out", "route" or "single uplink".
    pub chosen_by: String,
}

impl OutIf {
    pub(super) fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| format!("ifindex {}", self.ifindex))
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ExplainArgs {
    #[arg(long, help = "source address of the packet (a pod, a tunnel client, the node...)")]
    pub src: IpAddr,
    #[arg(long, help = "destination address")]
    pub dst: IpAddr,
    #[arg(long, default_value = "tcp", help = "tcp, udp, icmp (ICMPv6 for IPv6 addresses) or a protocol number")]
    pub proto: Proto,
    #[arg(long, help = "destination port (TCP/UDP)")]
    pub dport: Option<u16>,
    #[arg(long, help = "source port (TCP/UDP), or the ICMP echo identifier")]
    pub sport: Option<u16>,
    #[arg(long, help = "ICMP type (default: echo request; 0 / 129: echo reply)")]
    pub icmp_type: Option<u8>,
    #[arg(long, help = "explain a later (non-first) fragment of the datagram")]
    pub fragment: bool,
    #[arg(long, requires = "fragment", help = "IP identification of the fragmented datagram")]
    pub frag_id: Option<u32>,
    #[arg(long = "out", value_name = "IFACE", help = "the interface the packet leaves by (default: the route to --dst)")]
    pub out: Option<String>,
    #[command(flatten)]
    pub pins: super::super::PinPathArg,
    #[arg(long, help = "machine-readable output")]
    pub json: bool,
}

impl ExplainArgs {
    pub fn packet(&self) -> Packet {
        Packet {
            src: self.src,
            dst: self.dst,
            proto: self.proto,
            icmp_type: self.icmp_type,
            sport: self.sport,
            dport: self.dport,
            fragment: self.fragment,
            frag_id: self.frag_id,
        }
    }
}
