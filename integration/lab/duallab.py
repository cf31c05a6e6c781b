"""IPv6 and router labs for the ebpf-masq end-to-end tests.

Composes netlab (never edits it):

  DualTopo    netlab.Topo plus IPv6 on every link; the pod network gets an IPv4
              and an IPv6 host-local range (bridge + host-local + ebpf-masq).
  RouterTopo  pod -> node -> router -> ext, the router<->ext link with MTU 1280,
              for PMTU discovery and TTL-exceeded through the masquerade.
  probe, Bounce  peer.py's ICMP-error tools (what errors reached a socket).

Servers and clients of either family are netlab's: ns.server(proto, port,
family="dual") and ns.client(...) run peer.py.
"""
import ipaddress
import json
import subprocess
from collections import Counter

from .netlab import PEER, PY, Topo, wait_for
from .peer import norm

POD_SUBNET6 = "fd00:244:1::/64"
POD_GW6 = "fd00:244:1::1"

# ---------------------------------------------------------------- harness pieces


def add_addr(ns, dev, cidr):
    """An address without duplicate address detection (IPv6: usable at once)."""
    extra = ["nodad"] if ":" in cidr else []
    ns.ip("addr", "add", cidr, "dev", dev, *extra)


def pod_addrs(pod):
    """(IPv4, IPv6) addresses of a netlab.Pod from its CNI result."""
    v4 = v6 = None
    for ip in pod.result["ips"]:
        a = ip["address"].split("/")[0]
        if ":" in a:
            v6 = v6 or a
        else:
            v4 = v4 or a
    return v4, v6


def same_ip(a, b):
    return a is not None and b is not None and ipaddress.ip_address(a) == ipaddress.ip_address(b)


def probe(ns, host, port, ttl=64, count=3, timeout=2.0, size=5, df=False):
    """UDP datagrams of `size` bytes with TTL/hop limit `ttl` (and DF / no fragmentation
    when df) from ns; returns {"local": [addr, port], "errors": [...]} with the ICMP
    errors its socket got (type, code, info = MTU, offender)."""
    cmd = [PY, PEER, "probe", "--host", host, "--port", port, "--ttl", ttl, "--count", count,
           "--timeout", timeout, "--size", size]
    p = ns.exec(cmd + (["--df"] if df else []), timeout=60)
    return json.loads(p.stdout)


class Bounce:
    """peer.py bounce in ns (see its docstring); result() after the trigger."""

    def __init__(self, ns, port, size=100, df=False, wait=0.5, count=3, timeout=20):
        self.out = ns.lab.tmp / f"bounce-{ns.name}-{port}.ready"
        cmd = [PY, PEER, "bounce", "--port", port, "--out", self.out, "--size", size, "--wait", wait,
               "--count", count, "--timeout", timeout]
        if df:
            cmd.append("--df")
        self.proc = ns.spawn(cmd, stdout=subprocess.PIPE)
        wait_for(lambda: self.out.exists() or self.proc.poll() is not None, what=f"bounce in {ns.name}")
        assert self.proc.poll() is None, f"bounce in {ns.name} died: {self.proc.stderr.read()}"

    def result(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return json.loads(out)


class Ping:
    """What peer.py ping saw: rc, sent, received, reply_bytes (each reply's ICMP length),
    errors (the ICMP errors quoting a request: from, type, code, seq)."""

    def __init__(self, proc):
        got = json.loads(proc.stdout or "{}")
        self.rc, self.text = proc.returncode, (proc.stdout + proc.stderr).strip()
        self.sent, self.received = got.get("sent", 0), got.get("received", 0)
        self.reply_bytes, self.errors = got.get("reply_bytes", []), got.get("errors", [])

    def __repr__(self):
        return f"ping rc {self.rc}: {self.text}"


def ping(ns, dst, count=3, size=None, ttl=None, interval=0.2, df=True):
    """ICMP echo with peer.py ping (either family; dst may carry a scope, fe80::1%eth0):
    every reply within 2 s of the last request counts, however late under load (iputils
    waits twice the largest round trip). df=False: IPv4 without Don't Fragment."""
    cmd = [PY, PEER, "ping", "--host", dst, "--count", count, "--interval", interval, "--wait", 2]
    if size is not None:
        cmd += ["--size", size]
    if ttl is not None:
        cmd += ["--ttl", ttl]
    if not df:
        cmd += ["--no-df"]
    return Ping(ns.exec(cmd, check=False, timeout=count * interval + 60))


def ping_ok(p, count):
    """Every one of count requests answered, by a reply, and none more."""
    return p.rc == 0 and p.sent == count and p.received == count


def sources(cap):
    """Counter of IP source addresses, either family, in a netlab.Capture."""
    from scapy.all import IP, IPv6
    c = Counter()
    for p in cap.packets():
        if IP in p:
            c[p[IP].src] += 1
        elif IPv6 in p:
            c[norm(p[IPv6].src)] += 1
    return c


def route_get(ns, dst):
    """`ip route get dst` inside ns, one line."""
    return " ".join(ns.ip("route", "get", dst).stdout.split())


# ---------------------------------------------------------------- topologies


def no_dad(lab):
    """Every namespace this lab creates from now on skips IPv6 duplicate address
    detection, link-local addresses included: a tentative link-local address
    cannot send neighbour solicitations, which would stall forwarding for seconds."""
    if getattr(lab, "_lab6_no_dad", False):
        return
    make = lab.netns

    def netns(short):
        ns = make(short)
        for key in ("all", "default"):
            ns.sysctl(f"net.ipv6.conf.{key}.accept_dad", 0)
            ns.sysctl(f"net.ipv6.conf.{key}.disable_ipv6", 0)
        return ns

    lab.netns = netns
    lab._lab6_no_dad = True


def settle(*namespaces, timeout=10):
    """Wait until no IPv6 address in these namespaces is tentative."""
    for ns in namespaces:
        wait_for(lambda: not ns.ip("-6", "addr", "show", "tentative").stdout.strip(), timeout=timeout,
                 what=f"IPv6 addresses in {ns.name} to leave DAD")


class DualTopo(Topo):
    """netlab.Topo plus IPv6:

     pod (10.244.1.x + fd00:244:1::x, bridge cni0 + host-local, two ranges)
      |
     node eth0 10.0.0.5/24  fd00:0:0:1::5/64  ---- ext    10.0.0.2  fd00:0:0:1::2   (no route to the pods)
          eth1 10.10.0.5/24 fd00:0:0:10::5/64 ---- native 10.10.0.2 fd00:0:0:10::2  (pods via the node)
          default via 10.0.0.2 / fd00:0:0:1::2, forwarding on for both families
    """

    EXT6, NATIVE6, NODE_EXT6, NODE_NATIVE6 = "fd00:0:0:1::2", "fd00:0:0:10::2", "fd00:0:0:1::5", "fd00:0:0:10::5"

    def __init__(self, lab):
        no_dad(lab)
        super().__init__(lab)
        add_addr(self.node, "eth0", f"{self.NODE_EXT6}/64")
        add_addr(self.ext, "eth0", f"{self.EXT6}/64")
        add_addr(self.node, "eth1", f"{self.NODE_NATIVE6}/64")
        add_addr(self.native, "eth0", f"{self.NATIVE6}/64")
        self.node.sysctl("net.ipv6.conf.all.forwarding", 1)
        self.node.ip("-6", "route", "add", "default", "via", self.EXT6, "dev", "eth0")
        self.native.ip("-6", "route", "add", POD_SUBNET6, "via", self.NODE_NATIVE6)
        settle(self.node, self.ext, self.native)

    def bridge_plugin(self, ip_masq=False):
        return {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": ip_masq,
                "ipam": {"type": "host-local",
                         "ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": POD_SUBNET6}]],
                         "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                         "dataDir": str(self.lab.tmp / "ipam")}}


class RouterTopo(Topo):
    """A router between node and ext; the router<->ext link has MTU 1280:

     pod (10.244.1.x + fd00:244:1::x, MTU 1500)
      |
     node   eth0 10.0.0.5/24 fd00:0:0:1::5/64  (default via the router)
      |
     router eth0 10.0.0.1/24 fd00:0:0:1::1/64
            eth1 10.0.9.1/24 fd00:0:0:9::1/64  MTU 1280   (knows nothing of the pods)
      |
     ext    eth0 10.0.9.2/24 fd00:0:0:9::2/64  MTU 1280   (routes only the node's subnet back)

    ext's route back carries advmss for a 1500-byte path, so its SYN-ACK invites
    the pod to send full 1500-byte segments: only PMTU discovery through the
    masquerade (fragmentation needed / packet too big reaching the pod) lets a
    bulk transfer finish.
    """

    EXT, EXT6 = "10.0.9.2", "fd00:0:0:9::2"
    ROUTER, ROUTER6 = "10.0.0.1", "fd00:0:0:1::1"
    NODE_EXT, NODE_EXT6 = "10.0.0.5", "fd00:0:0:1::5"
    SMALL_MTU = 1280

    def __init__(self, lab):  # netlab.Topo's helpers, a topology of its own
        self.lab = lab
        no_dad(lab)
        self.node, self.router, self.ext = lab.netns("node"), lab.netns("router"), lab.netns("ext")
        lab.veth(self.node, "eth0", "10.0.0.5/24", self.router, "eth0", "10.0.0.1/24")
        lab.veth(self.router, "eth1", "10.0.9.1/24", self.ext, "eth0", "10.0.9.2/24")
        self.router.ip("link", "set", "eth1", "mtu", self.SMALL_MTU)
        self.ext.ip("link", "set", "eth0", "mtu", self.SMALL_MTU)
        add_addr(self.node, "eth0", f"{self.NODE_EXT6}/64")
        add_addr(self.router, "eth0", f"{self.ROUTER6}/64")
        add_addr(self.router, "eth1", "fd00:0:0:9::1/64")
        add_addr(self.ext, "eth0", f"{self.EXT6}/64")
        self.node.ip("route", "add", "default", "via", self.ROUTER, "dev", "eth0")
        self.node.ip("-6", "route", "add", "default", "via", self.ROUTER6, "dev", "eth0")
        self.ext.ip("route", "add", "10.0.0.0/24", "via", "10.0.9.1", "advmss", 1460)
        self.ext.ip("-6", "route", "add", "fd00:0:0:1::/64", "via", "fd00:0:0:9::1", "advmss", 1440)
        for ns in (self.node, self.router):
            ns.sysctl("net.ipv4.ip_forward", 1)
            ns.sysctl("net.ipv6.conf.all.forwarding", 1)
        settle(self.node, self.router, self.ext)
        self.cni_bin = lab.tmp / "cni-bin"
        self.cni_bin.mkdir()
        self._nets = 0

    bridge_plugin = DualTopo.bridge_plugin

