//! The NAT session log as IPFIX (RFC 7011) over UDP, with RFC 8158's NAT
//! elements: two templates (IPv4 pairs, IPv6 pairs), sent first and again every
//! `template_every` (RFC 7011 section 8.4: over UDP, templates are re-sent on a
//! schedule, since a collector may start after the exporter); data records
//! packed into messages of at most `MAX_MESSAGE` bytes; each message's sequence
//! number counts the data records sent before it (section 3.1).
//!
//! Elements (IANA id, bytes): observationTimeMilliseconds 323 (8), natEvent 230
//! (1), protocolIdentifier 4 (1), sourceIPv4Address 8 / sourceIPv6Address 27,
//! sourceTransportPort 7 (2), postNATSourceIPv4Address 225 / postNATSourceIPv6Address
//! 281, postNAPTSourceTransportPort 227 (2), destinationIPv4Address 12 /
//! destinationIPv6Address 28, destinationTransportPort 11 (2),
//! flowStartMilliseconds 152 (8), initiatorPackets 298, responderPackets 299,
//! initiatorOctets 231, responderOctets 232 (8 each; 0 but on a delete), and
//! enterprise-specific elements under [`PEN`]: 1 podNamespace, 2 podName,
//! 3 egressPolicy (variable-length strings, RFC 7011 section 7), 4 natSnapshot
//! (1 byte: 1 on a pair found alive when the exporter started).

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket},
    time::{Duration, Instant},
};

use super::record::{Event, Record};

/// The enterprise number of ebpf-masq's own elements. 32473 is IANA's number
/// for documentation (RFC 5612): ebpf-masq has none of its own yet.
pub const PEN: u32 = 32473;
pub const TEMPLATE_V4: u16 = 256;
pub const TEMPLATE_V6: u16 = 257;
/// A message never exceeds this (a 1500-byte path less IPv6 and UDP headers).
pub const MAX_MESSAGE: usize = 1400;
const HEADER: usize = 16;
const SET_HEADER: usize = 4;
const VARIABLE: u16 = 65535;

/// (element id, length, enterprise number) in the order a data record carries them.
type Field = (u16, u16, Option<u32>);

fn fields(v6: bool) -> Vec<Field> {
    let (src, post, dst, alen) = if v6 { (27, 281, 28, 16) } else { (8, 225, 12, 4) };
    vec![
        (323, 8, None),
        (230, 1, None),
        (4, 1, None),
        (src, alen, None),
        (7, 2, None),
        (post, alen, None),
        (227, 2, None),
        (dst, alen, None),
        (11, 2, None),
        (152, 8, None),
        (298, 8, None),
        (299, 8, None),
        (231, 8, None),
        (232, 8, None),
        (1, VARIABLE, Some(PEN)),
        (2, VARIABLE, Some(PEN)),
        (3, VARIABLE, Some(PEN)),
        (4, 1, Some(PEN)),
    ]
}

/// A template set holding both templates.
pub fn template_set() -> Vec<u8> {
    let mut b = Vec::new();
    for (id, v6) in [(TEMPLATE_V4, false), (TEMPLATE_V6, true)] {
        let f = fields(v6);
        b.extend_from_slice(&id.to_be_bytes());
        b.extend_from_slice(&(f.len() as u16).to_be_bytes());
        for (ie, len, pen) in f {
            match pen {
                Some(pen) => {
                    b.extend_from_slice(&(ie | 0x8000).to_be_bytes());
                    b.extend_from_slice(&len.to_be_bytes());
                    b.extend_from_slice(&pen.to_be_bytes());
                }
                None => {
                    b.extend_from_slice(&ie.to_be_bytes());
                    b.extend_from_slice(&len.to_be_bytes());
                }
            }
        }
    }
    set(2, &b)
}

fn set(id: u16, body: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(SET_HEADER + body.len());
    s.extend_from_slice(&id.to_be_bytes());
    s.extend_from_slice(&((SET_HEADER + body.len()) as u16).to_be_bytes());
    s.extend_from_slice(body);
    s
}

fn addr(b: &mut Vec<u8>, a: Option<IpAddr>, v6: bool) {
    match (a, v6) {
        (Some(IpAddr::V4(a)), false) => b.extend_from_slice(&a.octets()),
        (Some(IpAddr::V6(a)), true) => b.extend_from_slice(&a.octets()),
        (_, false) => b.extend_from_slice(&Ipv4Addr::UNSPECIFIED.octets()),
        (_, true) => b.extend_from_slice(&Ipv6Addr::UNSPECIFIED.octets()),
    }
}

/// The longest string a record carries (Kubernetes names are at most 253
/// bytes): three of them and the fixed fields stay within one message.
const MAX_STRING: usize = 400;

/// RFC 7011 section 7: a length byte, or 255 and two length bytes.
fn string(b: &mut Vec<u8>, s: Option<&str>) {
    let s = s.unwrap_or("").as_bytes();
    let s = &s[..s.len().min(MAX_STRING)];
    if s.len() < 255 {
        b.push(s.len() as u8);
    } else {
        b.push(255);
        b.extend_from_slice(&(s.len() as u16).to_be_bytes());
    }
    b.extend_from_slice(s);
}

/// The template a record goes under (the family of its pod address).
pub fn template_of(r: &Record) -> u16 {
    if r.pod_addr.is_ipv6() {
        TEMPLATE_V6
    } else {
        TEMPLATE_V4
    }
}

/// One data record, in the field order of its template.
pub fn data_record(r: &Record) -> Vec<u8> {
    let v6 = template_of(r) == TEMPLATE_V6;
    let c = r.counts.unwrap_or_default();
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(&r.time_ms.to_be_bytes());
    b.push(r.event.nat_event());
    b.push(r.proto);
    addr(&mut b, Some(r.pod_addr), v6);
    b.extend_from_slice(&r.pod_port.to_be_bytes());
    addr(&mut b, r.nat_addr, v6);
    b.extend_from_slice(&r.nat_port.unwrap_or(0).to_be_bytes());
    addr(&mut b, Some(r.remote_addr), v6);
    b.extend_from_slice(&r.remote_port.to_be_bytes());
    b.extend_from_slice(&r.start().to_be_bytes());
    for v in [c.out_packets, c.in_packets, c.out_bytes, c.in_bytes] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    string(&mut b, r.namespace.as_deref());
    string(&mut b, r.pod.as_deref());
    string(&mut b, r.policy.as_deref());
    b.push(u8::from(r.event == Event::Alive));
    b
}

/// One message: the header and its sets.
pub fn message(export_secs: u32, sequence: u32, domain: u32, sets: &[Vec<u8>]) -> Vec<u8> {
    let len = HEADER + sets.iter().map(Vec::len).sum::<usize>();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&10u16.to_be_bytes());
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.extend_from_slice(&export_secs.to_be_bytes());
    m.extend_from_slice(&sequence.to_be_bytes());
    m.extend_from_slice(&domain.to_be_bytes());
    for s in sets {
        m.extend_from_slice(s);
    }
    m
}

/// The message being filled: its closed sets and the open one.
#[derive(Default)]
struct Pending {
    sets: Vec<Vec<u8>>,
    open: Option<u16>,
    body: Vec<u8>,
    records: u32,
}

impl Pending {
    fn size(&self) -> usize {
        HEADER + self.sets.iter().map(Vec::len).sum::<usize>() + if self.open.is_some() { SET_HEADER + self.body.len() } else { 0 }
    }

    fn close(&mut self) {
        if let Some(tid) = self.open.take() {
            self.sets.push(set(tid, &self.body));
            self.body.clear();
        }
    }

    /// Adds a record, in the open set when it is of the same template.
    fn push(&mut self, tid: u16, rec: &[u8]) {
        if self.open != Some(tid) {
            self.close();
            self.open = Some(tid);
        }
        self.body.extend_from_slice(rec);
        self.records += 1;
    }
}

/// What an exporter has done, for `status` and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub messages: u64,
    pub records: u64,
    /// Records the collector did not get, as far as this host can tell: in
    /// messages the socket refused (no route), and in messages an ICMP port
    /// unreachable came back for (collector down). Counted, never retried,
    /// never waited for. A lower bound: UDP hears of nothing else.
    pub unsent_records: u64,
}

/// An exporting process towards one collector (one transport session, one
/// observation domain). Its UDP socket is connected to the collector, so the
/// kernel reports the collector's ICMP port unreachable (ECONNREFUSED) on the next
/// send or in SO_ERROR ([`Exporter::settle`]): the message it answered is counted
/// unsent. With no route at start the socket stays unconnected (each send fails
/// at once, counted) and connects once a route appears.
pub struct Exporter {
    sock: UdpSocket,
    to: SocketAddr,
    connected: bool,
    domain: u32,
    /// Data records sent before the next message (the sequence number).
    sequence: u32,
    template_every: Duration,
    templates_at: Option<Instant>,
    /// Data records in the last message the socket took (an ICMP error may come back for it).
    last_records: u64,
    pub sent: Sent,
}

impl Exporter {
    pub fn new(collector: &str, domain: u32, template_every: Duration) -> io::Result<Self> {
        let to = collector
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{collector}: no address")))?;
        let sock = UdpSocket::bind(if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })?;
        sock.set_nonblocking(true)?;
        let connected = sock.connect(to).is_ok();
        Ok(Self {
            sock,
            to,
            connected,
            domain,
            sequence: 0,
            template_every,
            templates_at: None,
            last_records: 0,
            sent: Sent::default(),
        })
    }

    /// Sends `records` (and the templates when they are due) in as few messages as fit.
    pub fn export(&mut self, records: &[Record], now_secs: u32) {
        if self.templates_at.is_none_or(|t| t.elapsed() >= self.template_every) {
            self.templates_at = Some(Instant::now());
            self.send(message(now_secs, self.sequence, self.domain, &[template_set()]), 0);
        }
        let mut m = Pending::default();
        for r in records {
            let (tid, rec) = (template_of(r), data_record(r));
            if m.size() + rec.len() + if m.open == Some(tid) { 0 } else { SET_HEADER } > MAX_MESSAGE {
                self.flush(&mut m, now_secs);
            }
            m.push(tid, &rec);
        }
        self.flush(&mut m, now_secs);
    }

    fn flush(&mut self, m: &mut Pending, now_secs: u32) {
        m.close();
        if m.records == 0 {
            return;
        }
        let msg = message(now_secs, self.sequence, self.domain, &m.sets);
        self.sequence = self.sequence.wrapping_add(m.records);
        self.send(msg, m.records);
        *m = Pending::default();
    }

    fn send(&mut self, m: Vec<u8>, records: u32) {
        if !self.connected {
            self.connected = self.sock.connect(self.to).is_ok();
        }
        let r = if self.connected { self.sock.send(&m) } else { self.sock.send_to(&m, self.to) };
        match r {
            Ok(_) => {
                self.sent.messages += 1;
                self.sent.records += u64::from(records);
                self.last_records = u64::from(records);
            }
            Err(e) => {
                if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                    self.refused(); // this send failed on the error the last message brought back
                }
                self.sent.unsent_records += u64::from(records);
                self.last_records = 0;
            }
        }
    }

    /// The collector's host said its port was closed (ICMP port unreachable)
    /// when the last message arrived: that message was lost.
    fn refused(&mut self) {
        self.sent.records -= self.last_records;
        self.sent.unsent_records += self.last_records;
        self.last_records = 0;
    }

    /// Take an error the collector sent back since the last send (SO_ERROR), so
    /// the counts are right between messages and at the end.
    pub fn settle(&mut self) {
        if let Ok(Some(e)) = self.sock.take_error() {
            if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                self.refused();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natlog::record::EndReason;

    fn rec(pod: &str, ns: Option<&str>) -> Record {
        Record {
            time_ms: 1_764_979_387_123,
            event: Event::Delete,
            proto: 17,
            pod_addr: pod.parse().unwrap(),
            pod_port: 5353,
            nat_addr: Some(if pod.contains(':') { "2001:db8::1" } else { "192.0.2.1" }.parse().unwrap()),
            nat_port: Some(40123),
            remote_addr: if pod.contains(':') { "2001:db8:1::9" } else { "203.0.113.9" }.parse().unwrap(),
            remote_port: 53,
            start_ms: Some(1_764_979_380_000),
            namespace: ns.map(Into::into),
            pod: Some("web-1".into()),
            policy: None,
            reason: Some(EndReason::Expired),
            counts: None,
        }
    }

    /// Decodes a message the way a collector does: header, then sets; template
    /// records give each data set's field lengths (variable ones read per RFC 7011 s7).
    /// A data set as decoded: its template id and its records, each a list of field values.
    type DataSet = (u16, Vec<Vec<Vec<u8>>>);

    fn decode(m: &[u8], templates: &mut std::collections::HashMap<u16, Vec<Field>>) -> (u32, Vec<DataSet>) {
        let be16 = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        assert_eq!(be16(m), 10, "version");
        assert_eq!(be16(&m[2..]) as usize, m.len(), "message length");
        let seq = u32::from_be_bytes(m[8..12].try_into().unwrap());
        let mut out = Vec::new();
        let mut p = HEADER;
        while p < m.len() {
            let (sid, slen) = (be16(&m[p..]), be16(&m[p + 2..]) as usize);
            let body = &m[p + SET_HEADER..p + slen];
            if sid == 2 {
                let mut q = 0;
                while q < body.len() {
                    let (tid, n) = (be16(&body[q..]), be16(&body[q + 2..]));
                    q += 4;
                    let mut f = Vec::new();
                    for _ in 0..n {
                        let (ie, len) = (be16(&body[q..]), be16(&body[q + 2..]));
                        q += 4;
                        let pen = (ie & 0x8000 != 0).then(|| {
                            q += 4;
                            u32::from_be_bytes(body[q - 4..q].try_into().unwrap())
                        });
                        f.push((ie & 0x7fff, len, pen));
                    }
                    templates.insert(tid, f);
                }
            } else {
                let f = &templates[&sid];
                let mut q = 0;
                let mut recs = Vec::new();
                while q < body.len() {
                    let mut r = Vec::new();
                    for &(_, len, _) in f {
                        let len = if len == VARIABLE {
                            let l = body[q] as usize;
                            q += 1;
                            if l == 255 {
                                q += 2;
                                be16(&body[q - 2..]) as usize
                            } else {
                                l
                            }
                        } else {
                            len as usize
                        };
                        r.push(body[q..q + len].to_vec());
                        q += len;
                    }
                    recs.push(r);
                }
                out.push((sid, recs));
            }
            p += slen;
        }
        (seq, out)
    }

    #[test]
    fn a_record_decodes_under_its_template_with_rfc_8158_elements() {
        let mut t = std::collections::HashMap::new();
        let m = message(1, 0, 7, &[template_set(), set(TEMPLATE_V4, &data_record(&rec("10.1.0.5", Some("default"))))]);
        let (_, sets) = decode(&m, &mut t);
        let f = &t[&TEMPLATE_V4];
        let ids: Vec<u16> = f.iter().map(|x| x.0).collect();
        for ie in [323, 230, 4, 8, 7, 225, 227, 12, 11] {
            assert!(ids.contains(&ie), "IE {ie} in the v4 template");
        }
        let ids6: Vec<u16> = t[&TEMPLATE_V6].iter().map(|x| x.0).collect();
        for ie in [27, 281, 28] {
            assert!(ids6.contains(&ie), "IE {ie} in the v6 template");
        }
        let r = &sets[0].1[0];
        let at = |ie: u16| r[ids.iter().position(|&x| x == ie).unwrap()].clone();
        assert_eq!(at(230), vec![5], "natEvent delete");
        assert_eq!(at(8), vec![10, 1, 0, 5]);
        assert_eq!(at(225), vec![192, 0, 2, 1]);
        assert_eq!(at(227), 40123u16.to_be_bytes());
        assert_eq!(at(12), vec![203, 0, 113, 9]);
        assert_eq!(at(152), 1_764_979_380_000u64.to_be_bytes());
        let strings: Vec<&Vec<u8>> = f.iter().zip(r).filter(|(x, _)| x.2 == Some(PEN)).map(|(_, v)| v).collect();
        assert_eq!(strings[0], b"default");
        assert_eq!(strings[1], b"web-1");
        assert!(strings[2].is_empty(), "no policy");
    }

    #[test]
    fn long_strings_take_the_three_byte_length() {
        let mut b = Vec::new();
        string(&mut b, Some(&"x".repeat(300)));
        assert_eq!(&b[..3], &[255, 1, 44]);
        assert_eq!(b.len(), 303);
        b.clear();
        string(&mut b, Some(&"x".repeat(5000)));
        assert_eq!(b.len(), 3 + MAX_STRING, "cut to MAX_STRING");
    }

    #[test]
    fn messages_fit_the_mtu_and_sequence_numbers_count_data_records() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut e = Exporter::new(&rx.local_addr().unwrap().to_string(), 9, Duration::from_secs(600)).unwrap();
        let mut recs: Vec<Record> = (0..40).map(|i| rec(if i % 3 == 0 { "fd00::5" } else { "10.1.0.5" }, Some("default"))).collect();
        recs[7].namespace = Some("n".repeat(4000));
        recs[8].pod = Some("p".repeat(4000));
        recs[8].policy = Some("q".repeat(4000));
        e.export(&recs, 1);
        e.export(&recs[..3], 2);
        let mut t = std::collections::HashMap::new();
        let mut buf = [0u8; 65536];
        let (mut expect_seq, mut got) = (0u32, 0usize);
        for i in 0..e.sent.messages {
            let n = rx.recv(&mut buf).unwrap();
            assert!(n <= MAX_MESSAGE, "message {i} is {n} bytes");
            let (seq, sets) = decode(&buf[..n], &mut t);
            assert_eq!(seq, expect_seq, "message {i}");
            let k: usize = sets.iter().map(|s| s.1.len()).sum();
            expect_seq += k as u32;
            got += k;
        }
        assert_eq!(got, 43);
        assert_eq!(e.sent.records, 43);
        assert_eq!(e.sent.unsent_records, 0);
        assert!(e.sent.messages >= 4, "templates once, then several data messages: {}", e.sent.messages);
    }

    #[test]
    fn a_collector_down_gets_every_record_counted_unsent() {
        // A port nobody listens on (loopback answers ICMP port unreachable at once).
        let gone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = gone.local_addr().unwrap().to_string();
        drop(gone);
        let mut e = Exporter::new(&to, 9, Duration::from_secs(600)).unwrap();
        let recs: Vec<Record> = (0..5).map(|_| rec("10.1.0.5", Some("default"))).collect();
        for _ in 0..4 {
            e.export(&recs, 1);
        }
        e.settle();
        assert_eq!((e.sent.records, e.sent.unsent_records), (0, 20), "{:?}", e.sent);
        // It comes back: the next messages arrive and count as sent.
        let rx = UdpSocket::bind(&to).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        e.export(&recs, 2);
        e.settle();
        assert_eq!((e.sent.records, e.sent.unsent_records), (5, 20), "{:?}", e.sent);
        let mut buf = [0u8; 65536];
        assert!(rx.recv(&mut buf).unwrap() > 0);
    }
}
