"""Helpers of the hostile-input tests (test_hostile.py): raw frames written from a
namespace (AF_PACKET, no scapy inside: raw bytes only), checksum and leak checks of
captured bytes, the kernel's health, IPv4 options, and `Hostile`, one pod's
masqueraded flow and the sinks that catch what reaches it.
"""
import ipaddress
import json
import os
import random
import struct

from scapy.all import ICMP, IP, UDP, Ether, Raw, raw

from .netlab import PY, Topo, wait_for
from .peer import inet_csum

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
EXT2 = "10.0.0.3"  # a second address on ext: a remote that is not the flow's peer
POD_NETS = [ipaddress.ip_network("10.244.0.0/16")]
ROUNDS = max(1, int(os.environ.get("EBPF_MASQ_HOSTILE_ROUNDS", "1")))
ECHO_PORT = 5001      # UDP echo server on ext (peer.py)
SINK_PORTS = [41001, 41002, 41003, 41004]  # UDP sockets in the pod that collect replies
rng = random.Random(int(os.environ.get("EBPF_MASQ_HOSTILE_SEED", "20240601")))

# --- helpers run inside the namespaces (no scapy there: raw bytes only) ------------

SEND = r"""
import json, socket, sys, time
socks = {}
for item in json.load(sys.stdin):
    dev = item["dev"]
    if dev not in socks:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((dev, 0))
        socks[dev] = s
    socks[dev].send(bytes.fromhex(item["hex"]))
    time.sleep(item.get("gap", 0.002))
"""

SINK = r"""
import json, select, socket, sys
out, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
socks = []
for p in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", p))
    socks.append(s)
open(out, "a").close()
while True:
    for s in select.select(socks, [], [], 1.0)[0]:
        data, peer = s.recvfrom(65535)
        with open(out, "a") as f:
            f.write(json.dumps({"port": s.getsockname()[1], "addr": peer[0], "sport": peer[1],
                                "len": len(data), "head": data[:24].hex()}) + "\n")
"""

# Turn off TX checksum offload (ETHTOOL_STXCSUM) so every packet carries its final
# checksum on the wire: a capture can then verify checksums, and the data plane's
# incremental updates are checked on complete checksums, not on CHECKSUM_PARTIAL.
TXCSUM_OFF = r"""
import ctypes, fcntl, socket, struct, sys
for dev in sys.argv[1:]:
    val = ctypes.create_string_buffer(struct.pack("II", 0x17, 0), 8)
    ifr = bytearray(struct.pack("16sQ", dev.encode(), ctypes.addressof(val)) + b"\0" * 16)
    with socket.socket() as s:
        fcntl.ioctl(s.fileno(), 0x8946, ifr)
"""


def mac(ns, dev):
    return json.loads(ns.ip("-j", "link", "show", dev).stdout)[0]["address"]


def send_frames(ns, dev, frames, gap=0.002):
    items = [{"dev": dev, "hex": bytes(f).hex(), "gap": gap} for f in frames]
    ns.exec([PY, "-c", SEND], input=json.dumps(items), timeout=120)


def in_pod_net(a):
    try:
        return any(ipaddress.ip_address(a) in n for n in POD_NETS)
    except ValueError:
        return False


def checksum_problems(ipb):
    """Checksum errors in one IPv4 packet's bytes (only what can be judged: a packet
    whose lengths do not add up is reported as 'inconsistent', not checked)."""
    if len(ipb) < 20 or ipb[0] >> 4 != 4:
        return ["not ipv4"]
    ihl = (ipb[0] & 0xF) * 4
    tot = struct.unpack("!H", ipb[2:4])[0]
    if ihl < 20 or tot < ihl or len(ipb) < tot:
        return ["inconsistent"]
    problems = []
    if inet_csum(ipb[:ihl]) != 0xFFFF:
        problems.append("ip header checksum")
    proto, frag = ipb[9], struct.unpack("!H", ipb[6:8])[0]
    l4 = ipb[ihl:tot]
    if frag & 0x3FFF:  # a fragment: the L4 checksum covers the whole datagram
        return problems
    pseudo = ipb[12:20] + struct.pack("!BBH", 0, proto, len(l4))
    if proto == 17 and len(l4) >= 8:
        ulen, ucs = struct.unpack("!HH", l4[4:8])
        if ulen != len(l4):
            return problems + ["inconsistent"]
        if ucs != 0 and inet_csum(pseudo + l4) != 0xFFFF:
            problems.append("udp checksum")
    elif proto == 6 and len(l4) >= 20:
        if inet_csum(pseudo + l4) != 0xFFFF:
            problems.append("tcp checksum")
    elif proto == 1 and len(l4) >= 8:
        if inet_csum(l4) != 0xFFFF:
            problems.append("icmp checksum")
    return problems


def ip_bytes(pkt):
    """The IPv4 packet of a captured Ethernet frame, cut to its total length."""
    b = bytes(pkt)[14:]
    if len(b) >= 4 and b[0] >> 4 == 4:
        tot = struct.unpack("!H", b[2:4])[0]
        if len(b) >= tot >= 20:
            return b[:tot]
    return b


def leaks(ipb):
    """Pod addresses in a packet that left the node: source, and inside ICMP errors."""
    found = []
    p = IP(ipb)
    if in_pod_net(p.src):
        found.append(f"src {p.src}")
    if ICMP in p and p[ICMP].type in (3, 4, 5, 11, 12) and len(ipb) >= p.ihl * 4 + 8 + 20:
        inner = ipb[p.ihl * 4 + 8:]
        isrc = str(ipaddress.ip_address(inner[12:16]))
        idst = str(ipaddress.ip_address(inner[16:20]))
        for what, a in (("quoted src", isrc), ("quoted dst", idst)):
            if in_pod_net(a):
                found.append(f"{what} {a}")
    return found


def kernel_marks():
    tainted = open("/proc/sys/kernel/tainted").read().strip()
    p = os.popen("dmesg 2>/dev/null | wc -l")
    return tainted, int(p.read().strip() or 0)


def assert_kernel_fine(before):
    tainted, lines = kernel_marks()
    assert tainted == before[0], f"kernel taint changed {before[0]} -> {tainted}"
    new = os.popen(f"dmesg 2>/dev/null | tail -n +{before[1] + 1}").read()
    bad = [l for l in new.splitlines()
           if any(w in l for w in ("BUG:", "WARNING:", "Oops", "Call Trace", "general protection", "panic"))]
    assert not bad, "kernel complained:\n" + "\n".join(bad[:40])


def assert_healthy(topo, plugin, pod, kbefore):
    """status/nat list work, programs pinned, ordinary traffic is still masqueraded."""
    s = topo.status(plugin)
    assert all(p["pinned"] for p in s["programs"]), s["programs"]
    assert all(u["egress_attached"] and u["ingress_attached"] for u in s["uplinks"]), s["uplinks"]
    topo.nat_list(plugin)
    srv = topo.ext.server("tcp", 5100)
    rc, res = pod.ns.client("tcp", EXT, 5100, bytes=200_000)
    assert rc == 0 and res["ok"], res
    assert srv.addrs("done") == {NODE_IP}
    assert pod.ns.ping(EXT, count=2, interval=0.2) == (0, 0.0)
    assert_kernel_fine(kbefore)
    return s


class Hostile:
    """The standard topology with a masqueraded pod (and a second pod on the same
    bridge), checksum offload off, a UDP echo server on ext, a sink in the pod."""

    def __init__(self, topo, masq_pod, plugin):
        self.topo, self.plugin = topo, plugin
        self.net, self.pod = masq_pod()
        self.pod2 = self.net.add(topo.pod_ns("pod2"))
        topo.ext.ip("addr", "add", f"{EXT2}/24", "dev", "eth0")
        for ns in (self.pod.ns, self.pod2.ns, topo.ext):
            ns.exec([PY, "-c", TXCSUM_OFF, "eth0"])
        self.pod_mac, self.gw_mac = mac(self.pod.ns, "eth0"), mac(topo.node, "cni0")
        self.ext_mac, self.node_mac = mac(topo.ext, "eth0"), mac(topo.node, "eth0")
        self.echo = topo.ext.server("udp", ECHO_PORT)
        self.sink_out = topo.lab.tmp / "pod-sink.jsonl"
        self.sink = self.pod.ns.spawn([PY, "-c", SINK, self.sink_out, *SINK_PORTS])
        wait_for(lambda: self.sink_out.exists() or self.sink.poll() is not None, what="pod sink")
        assert self.sink.poll() is None, self.sink.stderr.read()
        self.kbefore = kernel_marks()

    # frames from the pod (to the gateway MAC) and from ext (to node eth0's MAC)
    def from_pod(self, l3):
        return Ether(src=self.pod_mac, dst=self.gw_mac, type=0x0800) / l3

    def from_ext(self, l3):
        return Ether(src=self.ext_mac, dst=self.node_mac, type=0x0800) / l3

    def send_pod(self, frames, gap=0.002):
        send_frames(self.pod.ns, "eth0", frames, gap)

    def send_ext(self, frames, gap=0.002):
        send_frames(self.topo.ext, "eth0", frames, gap)

    def sink_records(self):
        return [json.loads(l) for l in self.sink_out.read_text().splitlines()]

    def udp_flow(self, sport, payload=b"hello"):
        """A real UDP flow pod:sport -> ext echo; returns its NAT port once the echo is back."""
        n = len([r for r in self.sink_records() if r["port"] == sport])
        f = IP(src=self.pod.ip, dst=EXT) / UDP(sport=sport, dport=ECHO_PORT) / Raw(payload)
        self.send_pod([self.from_pod(f)])
        wait_for(lambda: len([r for r in self.sink_records() if r["port"] == sport]) > n,
                 what=f"echo for pod port {sport}")
        [e] = [e for e in self.topo.nat_list(self.plugin)
               if e["pod_addr"] == self.pod.ip and e["pod_port"] == sport and e["proto"] == "udp"]
        assert e["nat_addr"] == NODE_IP and e["complete"], e
        return e["nat_port"]

    def status(self):
        return self.topo.status(self.plugin)


def options(ihl):
    """Valid IPv4 option bytes making the header exactly ihl*4 bytes (6 <= ihl <= 15):
    Record Route or Timestamp (timestamps only) with free slots, or NOP padding;
    whatever is left is NOPs and an End of Options."""
    room = (ihl - 5) * 4
    if ihl % 3 == 0 and room >= 8:
        slots = (room - 3) // 4
        opt = bytes([7, 3 + 4 * slots, 4]) + b"\0" * (4 * slots)
    elif ihl % 3 == 1 and room >= 8:
        slots = (room - 4) // 4
        opt = bytes([68, 4 + 4 * slots, 5, 0]) + b"\0" * (4 * slots)
    else:
        opt = b""
    if len(opt) < room:
        opt += b"\x01" * (room - len(opt) - 1) + b"\x00"
    assert len(opt) == room
    return opt


def with_options(pkt, opt):
    """The bytes of IPv4 packet pkt with option bytes opt inserted (IHL, total length
    and header checksum fixed; the L4 checksum does not cover options)."""
    b = raw(pkt)
    assert b[0] == 0x45 and len(opt) % 4 == 0
    hdr = bytearray(b[:20])
    hdr[0] = 0x40 | (5 + len(opt) // 4)
    hdr[2:4] = struct.pack("!H", len(b) + len(opt))
    return ip_fix_csum(bytes(hdr) + opt + b[20:])


def ip_fix_csum(ipb):
    """Recompute the IPv4 header checksum of packet bytes (header as IHL says, if present)."""
    b = bytearray(ipb)
    ihl = (b[0] & 0xF) * 4
    if ihl < 20 or len(b) < ihl:
        return bytes(b)
    b[10:12] = b"\0\0"
    b[10:12] = struct.pack("!H", 0xFFFF - inet_csum(bytes(b[:ihl])))
    return bytes(b)
