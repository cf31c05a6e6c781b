#!/usr/bin/python3
"""IPv6, router and big-datagram pieces for the ebpf-masq end-to-end tests.

Composes netlab (never edits it):

  DualTopo    netlab.Topo plus IPv6 on every link; the pod network gets an IPv4
              and an IPv6 host-local range (bridge + host-local + ebpf-masq).
  RouterTopo  pod -> node -> router -> ext, the router<->ext link with MTU 1280,
              for PMTU discovery and TTL-exceeded through the masquerade.
  Server6     like netlab.Server but one dual-stack socket (IPv4 and IPv6 peers),
              UDP datagrams up to 64 KiB with their sha256.

Run as a script inside a namespace this file is the traffic peer for those
tests (netlab's peer.py is IPv4 only and caps UDP payloads at 1400 bytes):

  duallab.py serve  --proto tcp|udp --port P --out FILE
  duallab.py client --proto tcp|udp --host H --port P [--bytes N] [--timeout T]
  duallab.py probe  --host H --port P [--ttl N] [--size N] [--df] [--count C] [--timeout T]
      UDP (small TTL / hop limit, or big with DF) and IP(V6)_RECVERR: prints
      the ICMP errors the socket itself got (type, code, MTU, offender), so the
      test sees what reached the pod's socket, not only what a capture saw.
  duallab.py bounce --port P --out READY [--size N] [--df] [--wait S] [--count C]
      UDP: waits for one datagram, then after --wait answers it with --size
      bytes, from a socket connected to the sender with RECVERR, and prints the
      errors that came back (port unreachable, fragmentation needed...).
"""
import argparse
import hashlib
import ipaddress
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from netlab import PY, Topo, wait_for

HERE = Path(__file__).resolve().parent
SELF = str(Path(__file__).resolve())

POD_SUBNET6 = "fd00:244:1::/64"
POD_GW6 = "fd00:244:1::1"

# ---------------------------------------------------------------- the peer script


def norm(addr):
    """'::ffff:10.0.0.5' -> '10.0.0.5'; IPv6 in compressed form."""
    a = ipaddress.ip_address(addr.split("%")[0])
    if a.version == 6 and a.ipv4_mapped:
        a = a.ipv4_mapped
    return str(a)


_lock = threading.Lock()


def _record(path, **kv):
    with _lock, open(path, "a") as f:
        f.write(json.dumps(kv) + "\n")


def _handle_tcp(conn, peer, out):
    with conn:
        conn.settimeout(120)
        addr = norm(peer[0])
        _record(out, event="accept", proto="tcp", addr=addr, port=peer[1])
        h, n = hashlib.sha256(), 0
        while chunk := conn.recv(1 << 16):
            h.update(chunk)
            n += len(chunk)
        _record(out, event="done", proto="tcp", addr=addr, port=peer[1], bytes=n, sha256=h.hexdigest())
        conn.sendall(h.hexdigest().encode())


def _serve(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", a.port))
    if a.proto == "tcp":
        s.listen(64)
    open(a.out, "a").close()
    while True:
        if a.proto == "tcp":
            conn, peer = s.accept()
            threading.Thread(target=_handle_tcp, args=(conn, peer, a.out), daemon=True).start()
        else:
            data, peer = s.recvfrom(1 << 16)
            _record(a.out, event="dgram", proto="udp", addr=norm(peer[0]), port=peer[1], bytes=len(data),
                    sha256=hashlib.sha256(data).hexdigest())
            s.sendto(data, peer)


def _family(host):
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


def _client(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(_family(a.host), kind)
    s.settimeout(a.timeout)
    res = {"proto": a.proto}
    try:
        s.connect((a.host, a.port))
        res["local"] = list(s.getsockname()[:2])
        if a.proto == "tcp":
            h, left = hashlib.sha256(), a.bytes
            while left > 0:
                chunk = os.urandom(min(left, 1 << 16))
                h.update(chunk)
                s.sendall(chunk)
                left -= len(chunk)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
            res.update(sent=a.bytes, sha256=h.hexdigest(), ok=reply.decode() == h.hexdigest())
        else:
            payload = os.urandom(a.bytes)
            s.send(payload)
            echo = s.recv(1 << 16)
            res.update(sent=len(payload), sha256=hashlib.sha256(payload).hexdigest(), received=len(echo),
                       received_sha256=hashlib.sha256(echo).hexdigest(), ok=echo == payload)
    except OSError as e:
        res.update(ok=False, error=str(e))
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


# linux/errqueue.h
SO_EE_ORIGIN_ICMP, SO_EE_ORIGIN_ICMP6 = 2, 3
IP_RECVERR, IPV6_RECVERR = 11, 25
IP_MTU_DISCOVER, IPV6_MTU_DISCOVER, PMTUDISC_DO = 10, 23, 2


def _enable_recverr(s, v6):
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
    else:
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)


def _read_errqueue(s, deadline):
    """ICMP errors queued on s until deadline: [{errno, origin, type, code, info, offender}]."""
    errs = []
    while time.monotonic() < deadline:
        try:
            _, anc, _, _ = s.recvmsg(1 << 16, 1024, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except BlockingIOError:
            time.sleep(0.02)
            continue
        for level, typ, data in anc:
            if len(data) < 16:
                continue
            ee_errno, origin, etype, code, _pad, info, _data = struct.unpack("=IBBBBII", data[:16])
            off = data[16:]
            offender = None
            if len(off) >= 8:
                fam = struct.unpack("=H", off[:2])[0]
                if fam == socket.AF_INET:
                    offender = socket.inet_ntop(socket.AF_INET, off[4:8])
                elif fam == socket.AF_INET6 and len(off) >= 24:
                    offender = socket.inet_ntop(socket.AF_INET6, off[8:24])
            errs.append({"errno": ee_errno, "origin": origin, "type": etype, "code": code,
                         "info": info, "offender": offender and norm(offender)})
        if errs:
            break
    return errs


def _probe(a):
    v6 = _family(a.host) == socket.AF_INET6
    s = socket.socket(_family(a.host), socket.SOCK_DGRAM)
    _enable_recverr(s, v6)
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, a.ttl)
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, a.ttl)
    if a.df:
        if v6:
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, PMTUDISC_DO)
        else:
            s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, PMTUDISC_DO)
    s.connect((a.host, a.port))
    local = list(s.getsockname()[:2])
    errs = []
    for _ in range(a.count):
        try:
            s.send(b"p" * a.size)
        except OSError as e:  # EMSGSIZE once the path MTU is known
            errs.append({"send_error": e.errno})
        errs += _read_errqueue(s, time.monotonic() + a.timeout)
        if errs:
            break
    print(json.dumps({"local": local, "errors": errs}), flush=True)
    return 0


def _bounce(a):
    """Receive one datagram; answer it (from a connected socket) and report the errors."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", a.port))
    open(a.out, "a").close()
    s.settimeout(a.timeout)
    data, peer = s.recvfrom(1 << 16)
    peer_addr = norm(peer[0])
    v6 = ipaddress.ip_address(peer_addr).version == 6
    c = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _enable_recverr(c, v6)
    if a.df:
        if v6:
            c.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, PMTUDISC_DO)
        else:
            c.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, PMTUDISC_DO)
    s.close()  # the connected socket takes the server's port over
    c.bind(("::" if v6 else "0.0.0.0", a.port))
    c.connect((peer_addr, peer[1]))
    time.sleep(a.wait)
    errs, sent = [], 0
    for _ in range(a.count):
        try:
            c.send(os.urandom(a.size))
            sent += 1
        except OSError as e:  # a previous error may surface on send
            errs.append({"send_error": e.errno})
        errs += _read_errqueue(c, time.monotonic() + 1.0)
        if any("type" in e for e in errs):
            break
    print(json.dumps({"peer": [peer_addr, peer[1]], "received": len(data), "sent": sent, "errors": errs}),
          flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["serve", "client", "probe", "bounce"])
    p.add_argument("--proto", choices=["tcp", "udp"], default="udp")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out")
    p.add_argument("--host")
    p.add_argument("--bytes", type=int, default=1000)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--ttl", type=int, default=64)
    p.add_argument("--count", type=int, default=3)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--df", action="store_true")
    p.add_argument("--wait", type=float, default=0.5)
    a = p.parse_args()
    return {"serve": _serve, "client": _client, "probe": _probe, "bounce": _bounce}[a.mode](a)


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


class Server6:
    """The duallab.py server in a namespace: one dual-stack socket, records every peer."""

    def __init__(self, ns, proto, port):
        self.proto, self.port = proto, port
        self.out = ns.lab.tmp / f"server6-{ns.name}-{proto}-{port}.jsonl"
        self.proc = ns.spawn([PY, SELF, "serve", "--proto", proto, "--port", port, "--out", self.out])
        wait_for(lambda: self.out.exists() or self.proc.poll() is not None, what=f"{proto} server in {ns.name}")
        assert self.proc.poll() is None, f"{proto} server in {ns.name} died: {self.proc.stderr.read()}"

    def records(self, event=None):
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        recs = [json.loads(l) for l in lines]
        return [r for r in recs if event is None or r["event"] == event]

    def addrs(self, event=None):
        return {r["addr"] for r in self.records(event)}


def client_cmd(proto, host, port, **opts):
    cmd = [PY, SELF, "client", "--proto", proto, "--host", host, "--port", port]
    for k, v in opts.items():
        cmd += [f"--{k.replace('_', '-')}", v]
    return cmd


def client(ns, proto, host, port, **opts):
    """duallab.py client in ns; (returncode, parsed result)."""
    p = ns.exec(client_cmd(proto, host, port, **opts), check=False, timeout=300)
    return p.returncode, json.loads(p.stdout or "{}")


def client_bg(ns, proto, host, port, **opts):
    return ns.spawn(client_cmd(proto, host, port, **opts), stdout=subprocess.PIPE)


def client_result(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, json.loads(out or "{}")


def probe(ns, host, port, ttl=64, count=3, timeout=2.0, size=5, df=False):
    """UDP datagrams of `size` bytes with TTL/hop limit `ttl` (and DF / no fragmentation
    when df) from ns; returns {"local": [addr, port], "errors": [...]} with the ICMP
    errors its socket got (type, code, info = MTU, offender)."""
    cmd = [PY, SELF, "probe", "--host", host, "--port", port, "--ttl", ttl, "--count", count,
           "--timeout", timeout, "--size", size]
    p = ns.exec(cmd + (["--df"] if df else []), timeout=60)
    return json.loads(p.stdout)


class Bounce:
    """duallab.py bounce in ns (see the module docstring); result() after the trigger."""

    def __init__(self, ns, port, size=100, df=False, wait=0.5, count=3, timeout=20):
        self.out = ns.lab.tmp / f"bounce-{ns.name}-{port}.ready"
        cmd = [PY, SELF, "bounce", "--port", port, "--out", self.out, "--size", size, "--wait", wait,
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


def ping(ns, dst, count=3, size=None, ttl=None, interval=0.2):
    """iputils ping (either family); returns the CompletedProcess (never raises)."""
    cmd = ["ping", "-n", "-c", count, "-i", interval, "-W", 2]
    if size is not None:
        cmd += ["-s", size]
    if ttl is not None:
        cmd += ["-t", ttl]
    return ns.exec([*cmd, dst], check=False, timeout=count * interval + 60)


def ping_ok(p, count):
    return p.returncode == 0 and f"{count} received" in p.stdout


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


def counters(topo, binary):
    s = topo.status(binary)
    return s["counters"], s["drops"]


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


if __name__ == "__main__":
    sys.exit(main())
