"""Other IP protocols (GRE 47, ESP 50, SCTP 132), side by side with iptables MASQUERADE.

A pod's packet whose protocol is neither TCP, UDP nor ICMP echo is masqueraded by address only, as netfilter's
generic protocol handling does: nf_nat_core.c get_unique_tuple() can change only the address for a protocol
without a port-mapping l4proto (nf_nat_l4proto_unique_tuple() returns at once, and for GRE without a PPTP master
conntrack too), so there is one mapping per (pod address, remote address, protocol); the packet leaves with the
node's address, its payload untouched, and the remote's packets of that protocol to the node's address go back to
the pod. This is RFC 3022's Basic NAT (section 2.1) for the protocols NAPT cannot multiplex.

Every test runs twice, in the same run (`variant`):
  "iptables"   the reference: a network with only the bridge plugin, `ipMasq: true` (iptables MASQUERADE);
  "ebpf-masq"  the bridge plugin with `ipMasq: false`, then the ebpf-masq entry;
each on a duallab.DualTopo whose pods have both families, and each test checks GRE and ESP over IPv4 and over
IPv6 (next header 47 / 50), every (family, protocol) its own mapping, reporting the failures of all four at once
(one data plane load a test: the verifier is what costs on a small machine). Both variants must give the same,
stated outcome. The packets are built here with scapy and sent from raw sockets in the namespaces (the kernel
writes the IP header, as a real sender's); what arrives is read from captures on ext's and the pods' eth0, byte
for byte. Absence is judged after a UDP marker the pod sends behind its packets along the same path has arrived.

Measured on this machine (Linux 6.18, iptables 1.8.9 nf_tables, CNI bridge plugin ipMasq; GRE, ESP and SCTP
have no kernel handler here, conntrack tracks GRE version 0 as `gre` with keys 0 and ESP as `unknown` 50):
- a second pod's GRE or ESP to the remote the first pod's mapping holds is dropped: the node's conntrack
  cannot make the reply tuple (remote -> node address, protocol) unique, so the confirm fails and
  `conntrack -S` counts each packet in insert_failed and drop; nothing of it leaves, with either address, and
  the remote's packets go to the first pod only (test_second_pod_same_protocol_same_remote_dropped asserts the
  insert_failed count on every iptables run);
- SCTP is translated by MASQUERADE (nf_conntrack_proto_sctp and nf_nat's SCTP ports): an INIT leaves with the
  node's address, ports kept. An SCTP packet conntrack finds invalid (not an INIT with verification tag 0 to
  begin an association) gets no NAT at all and leaves with the pod's own address; ebpf-masq keeps no SCTP
  association state and translates every SCTP packet of a pair, so it never leaves with the pod's address.
"""
import ipaddress
import json
import secrets
import struct
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from scapy.all import ESP, GRE, ICMP, SCTP, ICMPv6ParamProblem, IPv6, Raw, SCTPChunkInit, raw

from lab.duallab import DualTopo, pod_addrs, settle
from lab.masqcli import counters
from lab.netlab import PY

N = 3             # packets a pod (or ext) sends of each kind
MARK_PORT = 5999  # the UDP marker a pod sends after its packets (nothing listens there)
GRACE = 1.0       # seconds to wait, after the marker arrived, for packets sent before it
ANSWER_WAIT = 15  # seconds for packets that must arrive, without a marker behind them


@dataclass(frozen=True)
class Fam:
    name: str
    idx: int   # index in duallab.pod_addrs()
    ext: str   # ext's address
    node: str  # the node's address on the ext link: the masquerade address
    l3: str    # tcpdump's name of the family
    icmp: int  # the protocol of its ICMP


FAMS = {"v4": Fam("v4", 0, DualTopo.EXT, DualTopo.NODE_EXT, "ip", 1),
        "v6": Fam("v6", 1, DualTopo.EXT6, DualTopo.NODE_EXT6, "ip6", 58)}


@dataclass(frozen=True)
class Proto:
    name: str
    num: int

    def packet(self, tag, i):
        """One packet's bytes after the IP header, unique by tag and i."""
        body = f"{tag}-{i}-{secrets.token_hex(4)}".encode().ljust(64, b".")
        if self.num == 47:  # GRE version 0, an IEEE local experimental ethertype, no key
            return raw(GRE(proto=0x88B5) / Raw(body))
        return raw(ESP(spi=0x5EED0000 + i, seq=i + 1) / Raw(body))


PROTOS = [Proto("gre", 47), Proto("esp", 50)]
SCTP_NUM = 132


@pytest.fixture(params=["ebpf-masq", "iptables"])
def variant(request):
    return request.param


# ---------------------------------------------------------------- the network under test


class World:
    """A DualTopo with npods pods on the variant's network; stats() are what says why a packet went missing
    (ebpf-masq: `status` drops; iptables: `conntrack -S` in the node), taken at the start and on demand."""

    def __init__(self, lab, variant, request, npods):
        self.variant, self.topo = variant, DualTopo(lab)
        t = self.topo
        if variant == "iptables":
            self.plugin, self.net = None, t.network([t.bridge_plugin(ip_masq=True)])
        else:
            self.plugin = request.getfixturevalue("plugin")
            self.net = t.masq_network(self.plugin)  # DualTopo's bridge (ipMasq false) + ebpf-masq
        self.pods = [self.net.add(t.pod_ns(f"pod{i}")) for i in range(1, npods + 1)]
        settle(*(p.ns for p in self.pods))
        self.start = self.stats()

    def stats(self):
        if self.plugin:
            return counters(self.topo, self.plugin)[1]
        tot = Counter()
        for line in self.topo.node.exec(["conntrack", "-S"]).stdout.splitlines():
            for kv in line.split()[1:]:
                k, _, v = kv.partition("=")
                tot[k] += int(v)
        return dict(tot)

    def moved(self, since=None):
        before, now = since or self.start, self.stats()
        return {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}

    def why(self):
        what = "ebpf-masq status drops" if self.plugin else "node's conntrack -S"
        return f"[{self.variant}: {what} moved since the test began: {self.moved()}]"

    def addr(self, pod, fam):
        return pod_addrs(pod)[fam.idx]


@pytest.fixture
def world(lab, variant, request):
    """Factory: world(npods=1) -> World."""
    return lambda npods=1: World(lab, variant, request, npods)


# ---------------------------------------------------------------- packets: send, capture, parse

SEND = r"""
import json, socket, sys, time
socks = {}
for it in json.loads(sys.argv[1]):
    fam = socket.AF_INET6 if ":" in it["dst"] else socket.AF_INET
    key = (fam, it["proto"])
    if key not in socks:  # raw: the kernel writes the IP header, we the rest; "udp": a plain datagram
        socks[key] = (socket.socket(fam, socket.SOCK_DGRAM) if it["proto"] == "udp"
                      else socket.socket(fam, socket.SOCK_RAW, it["proto"]))
    socks[key].sendto(bytes.fromhex(it["hex"]), (it["dst"], it.get("port", 0)))
    time.sleep(0.01)
"""


def send(ns, items):
    ns.exec([PY, "-c", SEND, json.dumps(items)], timeout=60)


def raw_items(proto, dst, payloads):
    return [{"proto": proto, "dst": dst, "hex": p.hex()} for p in payloads]


def marker(dst, mark):
    return {"proto": "udp", "dst": dst, "port": MARK_PORT, "hex": mark.hex()}


@dataclass
class Pkt:
    src: str
    dst: str
    proto: int
    payload: bytes  # what follows the (fixed) IP header
    l3: bytes       # the whole IP packet
    hdr: int        # its header's length


def parse_l3(b):
    """An IPv4 or IPv6 packet's bytes (cut to its length), or None."""
    if len(b) >= 20 and b[0] >> 4 == 4:
        ihl, tot = (b[0] & 15) * 4, struct.unpack("!H", b[2:4])[0]
        b = b[:tot] if tot >= ihl else b
        return Pkt(ntoa(b[12:16]), ntoa(b[16:20]), b[9], b[ihl:], b, ihl)
    if len(b) >= 40 and b[0] >> 4 == 6:
        b = b[:40 + struct.unpack("!H", b[4:6])[0]]
        return Pkt(ntoa(b[8:24]), ntoa(b[24:40]), b[6], b[40:], b, 40)
    return None


def parse_frame(frame):
    return parse_l3(frame[14:]) if len(frame) > 14 and frame[12:14] in (b"\x08\x00", b"\x86\xdd") else None


def ntoa(b):
    return str(ipaddress.ip_address(b))


def csum(b):
    """RFC 1071 sum: 0xFFFF over bytes whose checksum field is right."""
    b += b"\0" * (len(b) % 2)
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def so_far(cap):
    """The packets tcpdump has written so far (it writes each at once, -U): a partly written record is left out."""
    data = cap.pcap.read_bytes() if cap.pcap.exists() else b""
    if len(data) < 24:
        return []
    end = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        if off + 16 + incl > len(data):
            break
        p = parse_frame(data[off + 16:off + 16 + incl])
        if p:
            out.append(p)
        off += 16 + incl
    return out


def every(cap):
    """Every packet of a finished Capture (netlab: complete, or the test fails)."""
    return [p for p in (parse_frame(bytes(f.original)) for f in cap.packets()) if p]


def poll(cap, done, timeout):
    deadline = time.monotonic() + timeout
    while not done(so_far(cap)) and time.monotonic() < deadline:
        time.sleep(0.05)


def pod_sends(w, fam, proto, rounds):
    """Rounds of (pod, payloads), one after the other: a round's payloads as protocol @proto from its pod to ext,
    then a UDP marker along the same path (masqueraded in both variants); the next round begins once all its
    packets reached ext, or its marker did, GRACE ago. Every @proto packet ext's eth0 saw going to ext."""
    flt = f"{fam.l3} and ({fam.l3} proto {proto} or (udp and dst port {MARK_PORT}))"
    mine = lambda pkts: [p for p in pkts if p.proto == proto and p.dst == fam.ext]  # noqa: E731
    with w.topo.ext.capture("eth0", flt) as cap:
        for i, (pod, payloads) in enumerate(rounds):
            mark = f"marker-{i}".encode()
            send(pod.ns, raw_items(proto, fam.ext, payloads) + [marker(fam.ext, mark)])
            deadline, marked = time.monotonic() + 60, None
            while True:
                got = so_far(cap)
                now = time.monotonic()
                if (sum(p.payload in payloads for p in mine(got)) >= len(payloads)
                        or (marked is not None and now - marked > GRACE)):
                    break
                if marked is None and any(p.proto == 17 and p.payload[8:] == mark for p in got):
                    marked = now
                assert now < deadline, f"harness: the pod's UDP marker never reached ext {w.why()}"
                time.sleep(0.05)
    got = every(cap)
    assert sum(p.proto == 17 for p in got) >= len(rounds), f"harness: markers missing in the capture {w.why()}"
    return mine(got)


def ext_sends(w, fam, proto, payloads, pods, want):
    """@payloads as protocol @proto from ext to the node's address; {pod: [@proto packets from ext at its eth0]}
    for each of @pods, once @want has them all or ANSWER_WAIT passed."""
    with ExitStack() as stack:
        caps = {p: stack.enter_context(p.ns.capture("eth0", f"{fam.l3} proto {proto} and src host {fam.ext}"))
                for p in pods}
        send(w.topo.ext, raw_items(proto, fam.node, payloads))
        poll(caps[want], lambda pkts: len(pkts) >= len(payloads), ANSWER_WAIT)
    return {p: every(c) for p, c in caps.items()}


def left_as_node(w, fam, out, sent, what):
    """@out (from pod_sends) holds each of @sent once, with the node's address, its payload byte for byte."""
    got = [p for p in out if p.payload in sent]
    as_node = len(got) == len(sent) and {p.src for p in got} == {fam.node}
    assert as_node, (
        f"{what}: ext saw {len(got)} of {len(sent)} packets with their payloads, sources "
        f"{dict(Counter(p.src for p in got))} ({len(out)} of the protocol in all, sources "
        f"{dict(Counter(p.src for p in out))}); expected all with the node's address {fam.node} {w.why()}")
    same = Counter(p.payload for p in got) == Counter(sent)
    assert same, f"{what}: payloads changed on the way"
    for p in got:
        assert fam.name == "v6" or csum(p.l3[:p.hdr]) == 0xFFFF, f"{what}: bad IPv4 header checksum {p.l3.hex()}"
    return got


def each_case(case, protos=PROTOS):
    """case(fam, proto) for both families and every protocol (independent mappings), then every failure at once."""
    failures = []
    for fam in FAMS.values():
        for proto in protos:
            try:
                case(fam, proto)
            except AssertionError as e:
                failures.append(f"--- {proto.name} over {fam.name}: {e}")
    assert not failures, "\n".join(failures)


def tagged(proto, fam, who):
    return [proto.packet(f"{proto.name}-{fam.name}-{who}", i) for i in range(N)]


# ---------------------------------------------------------------- tests


def test_protocol_leaves_with_node_address_and_answer_returns(world):
    """A pod's GRE and ESP packets (IPv4 protocol / IPv6 next header 47, 50) to ext leave with the node's address,
    payload byte-identical; ext's packets of the same protocol to the node's address reach the pod addressed to
    the pod, payload byte-identical.

    Requirement: netfilter nf_nat generic protocol handling (an address-only mapping per pod, remote and protocol,
    nf_nat_core.c get_unique_tuple), RFC 3022 section 2.1 (Basic NAT), for every packet, in both directions."""
    w = world()
    pod = w.pods[0]

    def case(fam, proto):
        me, sent = w.addr(pod, fam), tagged(proto, fam, "pod")
        left_as_node(w, fam, pod_sends(w, fam, proto.num, [(pod, sent)]), sent, "the pod's packets")
        answers = tagged(proto, fam, "ext")
        got = ext_sends(w, fam, proto.num, answers, [pod], want=pod)[pod]
        assert Counter((p.src, p.dst, p.payload) for p in got) == Counter((fam.ext, me, a) for a in answers), (
            f"ext's answers at the pod: {[(p.src, p.dst) for p in got]}, expected {N} from {fam.ext} to {me} "
            f"{w.why()}")

    each_case(case)


def test_second_pod_same_protocol_same_remote_dropped(world, variant):
    """While pod1's GRE (ESP) mapping to ext lives, pod2's GRE (ESP) to ext is dropped: none of it reaches ext,
    neither with the node's address nor with pod2's own, and ext's packets to the node's address reach pod1 only.

    Requirement: netfilter nf_nat generic protocol handling: get_unique_tuple cannot make a second (pod2, ext,
    protocol) mapping's reply tuple (ext -> node address, protocol) unique, and conntrack's confirm drops the
    packet whose reply tuple clashes (`conntrack -S` insert_failed, drop). On this machine iptables MASQUERADE
    does exactly that: asserted below on every iptables run. And a pod's address never leaks ("never fail open")."""
    w = world(2)
    pod1, pod2 = w.pods

    def case(fam, proto):
        first, second = tagged(proto, fam, "pod1"), tagged(proto, fam, "pod2")
        before = w.stats() if variant == "iptables" else None
        out = pod_sends(w, fam, proto.num, [(pod1, first), (pod2, second)])
        left_as_node(w, fam, out, first, "pod1's packets (precondition)")
        leaked = [p for p in out if p.payload in second or p.src == w.addr(pod2, fam)]
        assert leaked == [], (f"pod2's packets reached ext (sources {dict(Counter(p.src for p in leaked))}), "
                              f"expected none: pod1 holds ({fam.node}, {fam.ext}, {proto.name}) {w.why()}")
        if variant == "iptables":  # the drop is conntrack's confirm failing on the clashing reply tuple
            assert w.moved(before).get("insert_failed", 0) >= N, w.why()

        answers = tagged(proto, fam, "ext")
        got = ext_sends(w, fam, proto.num, answers, [pod1, pod2], want=pod1)
        assert Counter((p.dst, p.payload) for p in got[pod1]) == Counter((w.addr(pod1, fam), a) for a in answers), (
            f"ext's answers: pod1 got {[(p.src, p.dst) for p in got[pod1]]}, expected all {N} {w.why()}")
        assert got[pod2] == [], f"ext's answers reached pod2: {[(p.src, p.dst) for p in got[pod2]]}"

    each_case(case)


def icmp_error(fam, quoted):
    """The remote's 'protocol unreachable' about @quoted (the translated packet's IP header and first 8 bytes):
    v4 destination unreachable / protocol unreachable (type 3 code 2); v6 parameter problem / unrecognized next
    header (type 4 code 1) pointing at the quoted header's next-header field (offset 6)."""
    if fam.name == "v4":
        return raw(ICMP(type=3, code=2) / Raw(quoted))
    return raw(IPv6(src=fam.ext, dst=fam.node) / ICMPv6ParamProblem(code=1, ptr=6) / Raw(quoted))[40:]


def check_error_checksums(fam, e, inner):
    """ICMP error @e (quoting @inner) has every checksum right: v4 its IP header, its ICMP and the quoted IP
    header's; v6 its ICMPv6 (over the pseudo-header)."""
    if fam.name == "v4":
        assert csum(e.l3[:e.hdr]) == 0xFFFF and csum(e.payload) == 0xFFFF, f"bad checksum: {e.l3.hex()}"
        assert csum(inner.l3[:inner.hdr]) == 0xFFFF, f"bad quoted IPv4 header checksum: {inner.l3.hex()}"
    else:
        pseudo = e.l3[8:40] + struct.pack("!IxxxB", len(e.payload), 58)
        assert csum(pseudo + e.payload) == 0xFFFF, f"bad ICMPv6 checksum: {e.l3.hex()}"


def check_icmp_error(w, fam, e, err, me, proto, sent):
    """@e, captured at the pod, is @err translated back: to the pod, quoting the pod's packet, checksums right."""
    inner = parse_l3(e.payload[8:])
    assert (e.src, e.dst, e.payload[:2]) == (fam.ext, me, err[:2]), (e.src, e.dst, e.payload[:2].hex())
    assert e.payload[4:8] == err[4:8], "the error's pointer / unused field changed"
    assert (inner.src, inner.dst, inner.proto) == (me, fam.ext, proto.num), (inner.src, inner.dst, inner.proto)
    assert inner.payload == sent[:8], "the quoted bytes after the IP header changed"
    check_error_checksums(fam, e, inner)


def test_icmp_error_about_protocol_reaches_pod(world):
    """An ICMP error from ext to the node's address quoting the pod's translated GRE (ESP) packet reaches the pod
    translated back: outer destination the pod, quoted source the pod, quoted destination ext, type and code
    unchanged, the quoted bytes after the IP header untouched, every checksum right. (v4: destination unreachable,
    protocol unreachable, type 3 code 2; v6: parameter problem, unrecognized next header, type 4 code 1.)

    Requirement: RFC 5508 section 4, REQ-3 (an error about an active mapping has its embedded packet reverted to
    its original form, checksums fixed) and REQ-4 (an ICMP error from the external realm about an active mapping
    is forwarded to the internal host, type and code unchanged); netfilter does so for any protocol it tracks
    (nf_conntrack_inet_error: RELATED; nf_nat_icmp_reply_translation, nf_nat_icmpv6_reply_translation).

    The error quotes only the IP header and 8 bytes (RFC 792's minimum): that tells it from ext's kernel's own
    errors about the packet (no GRE or ESP handler here), which quote all of it (they must be translated too)."""
    w = world()
    pod = w.pods[0]

    def case(fam, proto):
        me, sent = w.addr(pod, fam), tagged(proto, fam, "err")[:1]
        [out] = left_as_node(w, fam, pod_sends(w, fam, proto.num, [(pod, sent)]), sent, "the pod's packet "
                             "(precondition)")
        err = icmp_error(fam, out.l3[:out.hdr + 8])
        ours = lambda p: p.proto == fam.icmp and len(p.payload) == len(err)  # noqa: E731
        with pod.ns.capture("eth0", f"{'icmp' if fam.name == 'v4' else 'icmp6'} and dst host {me}") as cap:
            send(w.topo.ext, [{"proto": fam.icmp, "dst": fam.node, "hex": err.hex()}])
            poll(cap, lambda pkts: any(ours(p) for p in pkts), ANSWER_WAIT)
        errors = [p for p in every(cap) if p.payload[:1] in (b"\x01", b"\x03", b"\x04")]  # v4 3, v6 1 and 4
        mine = [p for p in errors if ours(p)]
        assert len(mine) == 1, (f"ICMP errors at the pod: {[(p.src, p.dst, p.payload[:2].hex()) for p in errors]}, "
                                f"expected ours from {fam.ext} {w.why()}")
        check_icmp_error(w, fam, mine[0], err, me, proto, sent[0])
        for p in errors:  # ext's kernel's own errors about the packet, if any came
            q = parse_l3(p.payload[8:])
            assert q is None or q.src == me, f"an ICMP error reached the pod quoting {q.src}: {p.l3.hex()}"

    each_case(case)


def test_pods_own_icmp_error_about_protocol_leaves_as_node(world):
    """ext's GRE (ESP) to the node's address, through the pod's mapping, reaches the pod, whose kernel has no
    handler for it and answers with protocol unreachable (v4: type 3 code 2; v6: parameter problem, unrecognized
    next header, type 4 code 1): that error leaves with the node's address, quoting ext's packet as ext sent it
    (to the node's address), the quoted bytes after the IP header untouched, every checksum right.

    Requirement: RFC 5508 section 4, REQ-3 (an ICMP error about an active mapping has its embedded packet
    translated as the mapping says, checksums fixed) for errors from the internal realm; netfilter translates
    them as RELATED to the mapping's conntrack entry (nf_nat_icmp_reply_translation)."""
    w = world()
    pod = w.pods[0]

    def case(fam, proto):
        sent = tagged(proto, fam, "pod")[:1]
        left_as_node(w, fam, pod_sends(w, fam, proto.num, [(pod, sent)]), sent, "the pod's packet (precondition)")
        [answer] = tagged(proto, fam, "unreach")[:1]
        kind = b"\x03\x02" if fam.name == "v4" else b"\x04\x01"  # type, code

        def unreach(p):
            return p.payload[:2] == kind

        def quoting(p):
            q = parse_l3(p.payload[8:])
            return q is not None and q.payload[:len(answer)] == answer
        icmp = "icmp" if fam.name == "v4" else "icmp6"
        with w.topo.ext.capture("eth0", f"{icmp} and dst host {fam.ext}") as cap:
            send(w.topo.ext, raw_items(proto.num, fam.node, [answer]))
            poll(cap, lambda pkts: any(unreach(p) and quoting(p) for p in pkts), ANSWER_WAIT)
        errors = [p for p in every(cap) if unreach(p)]
        mine = [p for p in errors if quoting(p)]
        assert len(mine) == 1, (f"the pod's protocol unreachable at ext: {[(p.src, p.l3.hex()) for p in errors]}, "
                                f"expected one quoting ext's packet {w.why()}")
        e, inner = mine[0], parse_l3(mine[0].payload[8:])
        assert e.src == fam.node, f"the pod's error left with {e.src}, not the node's {fam.node} {w.why()}"
        assert (inner.src, inner.dst, inner.proto) == (fam.ext, fam.node, proto.num), (
            f"the quoted packet: {(inner.src, inner.dst, inner.proto)}, expected ext's as it was sent")
        check_error_checksums(fam, e, inner)

    each_case(case)


def sctp_init(sport):
    """An SCTP INIT (verification tag 0, as an association's first packet has)."""
    return raw(SCTP(sport=sport, dport=5000, tag=0)
               / SCTPChunkInit(init_tag=0x5EED0001, a_rwnd=65535, n_out_streams=1, n_in_streams=1, init_tsn=1))


def test_sctp(world, variant):
    """SCTP (132) from a pod, IPv4 and IPv6: an INIT and its retransmission leave with the node's address,
    both ports kept and the bytes after the IP header unchanged, so the CRC32c scapy computed is valid at ext
    (it covers no IP header). Both variants alike: ebpf-masq translates SCTP by address with its ports kept, as
    MASQUERADE does while the port is free (nf_conntrack_proto_sctp, nf_nat_proto.c sctp_manip_pkt).

    Requirement: RFC 4787 REQ-1/REQ-3 (the same mapping, port preserved) for SCTP as netfilter gives it; never
    fail open (no pod address on ext)."""
    w = world()
    pod = w.pods[0]
    failures = []
    for fam in FAMS.values():
        init = sctp_init(40000 + secrets.randbelow(20000))
        out = pod_sends(w, fam, SCTP_NUM, [(pod, [init, init])])  # an INIT and its retransmission
        srcs = dict(Counter(p.src for p in out))
        if [p.src for p in out] != [fam.node] * 2 or any(bytes(p.payload) != init for p in out):
            failures.append(f"{fam.name}: {variant}: SCTP at ext from {srcs}, expected 2 from {fam.node}, "
                            f"ports and checksum as sent {w.why()}")
    assert not failures, "\n".join(failures)
