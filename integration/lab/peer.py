#!/usr/bin/python3
"""Traffic tool run inside test namespaces, for either address family.

  peer.py serve  --proto tcp|udp --port P --out FILE [--family ipv4|dual]
      Records one JSON line per event in FILE ("accept"/"done" for TCP, "dgram"
      for UDP) with the peer address the server saw. TCP: reads to EOF, then
      replies with the sha256 of what it got. UDP: echoes (datagrams up to 64 KiB,
      recorded with their sha256). FILE is created once the socket is bound
      (readiness marker). --family dual: one IPv6 socket that takes IPv4 peers too
      (their addresses recorded as plain IPv4).
  peer.py client --proto tcp|udp --host H --port P [--bytes N] [--bind-port B]
                 [--hold S] [--timeout T]
      The socket's family is the host's. Prints one JSON line; exits 0 only if
      the server's reply matched.
  peer.py probe  --host H --port P [--ttl N] [--size N] [--df] [--count C] [--timeout T]
      UDP (small TTL / hop limit, or big with DF) and IP(V6)_RECVERR: prints
      the ICMP errors the socket itself got (type, code, MTU, offender), so the
      test sees what reached the pod's socket, not only what a capture saw.
  peer.py bounce --port P --out READY [--size N] [--df] [--wait S] [--count C]
      UDP: waits for one datagram, then after --wait answers it with --size
      bytes, from a socket connected to the sender with RECVERR, and prints the
      errors that came back (port unreachable, fragmentation needed...).
  peer.py ping   --host H [--count C] [--interval I] [--wait W] [--size N] [--ttl N] [--no-df]
      ICMP echo (either family; H may carry a scope, fe80::1%eth0) from a raw
      socket: C requests with N bytes of payload (56 unless told, as iputils),
      one every I seconds, then waits until every request is answered (by a
      reply or an ICMP error quoting it) or W seconds have passed since the last
      request. Prints one JSON line: sent, received, the largest round trip, the
      ICMP length of each reply, and the ICMP errors that quote a request (from,
      type, code, seq); exits 0 if any reply came. Unlike iputils ping, which
      after its last request waits only twice the largest round trip seen so far,
      a reply that is late under CPU load is counted as received, not lost.
      --no-df: IPv4 without Don't Fragment (iputils -M dont).
"""
import argparse
import hashlib
import ipaddress
import json
import os
import socket
import struct
import sys
import threading
import time

lock = threading.Lock()


def norm(addr):
    """'::ffff:10.0.0.5' -> '10.0.0.5'; IPv6 in compressed form."""
    a = ipaddress.ip_address(addr.split("%")[0])
    if a.version == 6 and a.ipv4_mapped:
        a = a.ipv4_mapped
    return str(a)


def record(path, **kv):
    with lock, open(path, "a") as f:
        f.write(json.dumps(kv) + "\n")


def family_of(host):
    """The socket family for a literal address (a name: IPv4)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET


def listener(kind, family, port):
    """A socket bound to every address: IPv4 only, or (dual) IPv6 taking IPv4 peers too."""
    if family == "dual":
        s = socket.socket(socket.AF_INET6, kind)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::", port))
    else:
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
    return s


def handle_tcp(conn, peer, out):
    with conn:
        conn.settimeout(120)
        addr = norm(peer[0])
        record(out, event="accept", proto="tcp", addr=addr, port=peer[1])
        h, n = hashlib.sha256(), 0
        while chunk := conn.recv(1 << 16):
            h.update(chunk)
            n += len(chunk)
        record(out, event="done", proto="tcp", addr=addr, port=peer[1], bytes=n, sha256=h.hexdigest())
        conn.sendall(h.hexdigest().encode())


def serve(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    s = listener(kind, a.family, a.port)
    if a.proto == "tcp":
        s.listen(64)
    open(a.out, "a").close()
    while True:
        if a.proto == "tcp":
            conn, peer = s.accept()
            threading.Thread(target=handle_tcp, args=(conn, peer, a.out), daemon=True).start()
        else:
            data, peer = s.recvfrom(1 << 16)
            record(a.out, event="dgram", proto="udp", addr=norm(peer[0]), port=peer[1], bytes=len(data),
                   sha256=hashlib.sha256(data).hexdigest())
            try:
                s.sendto(data, peer)
            except OSError:
                pass  # a peer it has no route back to (a spoofed source): recorded, not answered


def client(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    family = family_of(a.host)
    s = socket.socket(family, kind)
    s.settimeout(a.timeout)
    if a.bind_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", a.bind_port))
    res = {"proto": a.proto}
    try:
        s.connect((a.host, a.port))
        res["local"] = list(s.getsockname()[:2])
        time.sleep(a.hold)
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


def enable_recverr(s, v6):
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
    else:
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)


def set_df(s, v6):
    """Never fragment (IP_PMTUDISC_DO): too big a datagram fails with EMSGSIZE instead."""
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, PMTUDISC_DO)
    else:
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, PMTUDISC_DO)


def read_errqueue(s, deadline):
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


def probe(a):
    family = family_of(a.host)
    v6 = family == socket.AF_INET6
    s = socket.socket(family, socket.SOCK_DGRAM)
    enable_recverr(s, v6)
    if v6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, a.ttl)
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, a.ttl)
    if a.df:
        set_df(s, v6)
    s.connect((a.host, a.port))
    local = list(s.getsockname()[:2])
    errs = []
    for _ in range(a.count):
        try:
            s.send(b"p" * a.size)
        except OSError as e:  # EMSGSIZE once the path MTU is known
            errs.append({"send_error": e.errno})
        errs += read_errqueue(s, time.monotonic() + a.timeout)
        if errs:
            break
    print(json.dumps({"local": local, "errors": errs}), flush=True)
    return 0


def bounce(a):
    """Receive one datagram; answer it (from a connected socket) and report the errors."""
    s = listener(socket.SOCK_DGRAM, "dual", a.port)
    open(a.out, "a").close()
    s.settimeout(a.timeout)
    data, peer = s.recvfrom(1 << 16)
    peer_addr = norm(peer[0])
    v6 = ipaddress.ip_address(peer_addr).version == 6
    c = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    enable_recverr(c, v6)
    if a.df:
        set_df(c, v6)
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
        errs += read_errqueue(c, time.monotonic() + 1.0)
        if any("type" in e for e in errs):
            break
    print(json.dumps({"peer": [peer_addr, peer[1]], "received": len(data), "sent": sent, "errors": errs}),
          flush=True)
    return 0


def inet_csum(b):
    """The Internet checksum's folded one's-complement sum of b (RFC 1071): 0xFFFF
    over bytes whose checksum field is right; a checksum to write is its complement."""
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def ping(a):
    """ICMP echo requests at a fixed interval; counts the matching replies and the
    ICMP errors that quote a request."""
    v6 = family_of(a.host) == socket.AF_INET6
    if v6:  # the kernel fills in the ICMPv6 checksum of a raw ICMPv6 socket
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        request, reply, errors = 128, 129, (1, 2, 3, 4)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, a.ttl)
        dest = socket.getaddrinfo(a.host, None, socket.AF_INET6, socket.SOCK_RAW)[0][4]  # with its scope
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        request, reply, errors = 8, 0, (3, 11, 12)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, a.ttl)
        if a.no_df:
            s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
        dest = (a.host, 0)
    ident = int.from_bytes(os.urandom(2), "big")
    host = norm(a.host)
    sent_at, rtts, sizes, errs = {}, {}, [], []
    start = time.monotonic()
    deadline = None
    while True:
        now = time.monotonic()
        if len(sent_at) < a.count and now >= start + len(sent_at) * a.interval:
            seq = len(sent_at) + 1
            body = (struct.pack("!d", now) + b"ebpf-masq lab ping ").ljust(a.size, b".")[:a.size]
            hdr = struct.pack("!BBHHH", request, 0, 0, ident, seq)
            if not v6:
                hdr = struct.pack("!BBHHH", request, 0, ~inet_csum(hdr + body) & 0xFFFF, ident, seq)
            sent_at[seq] = now
            try:
                s.sendto(hdr + body, dest)
            except OSError:  # unreachable: counted as lost, as iputils counts it
                pass
            if len(sent_at) == a.count:
                deadline = now + a.wait
            continue
        if len(rtts) + len(errs) >= a.count or (deadline is not None and now >= deadline):
            break
        until = deadline if deadline is not None else start + len(sent_at) * a.interval
        s.settimeout(max(until - now, 0.0005))
        try:
            data, peer = s.recvfrom(65535)
        except socket.timeout:
            continue
        icmp = data if v6 else data[(data[0] & 0x0F) * 4:]
        if len(icmp) < 8:
            continue
        kind, code, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
        if kind == reply and norm(peer[0]) == host and rid == ident and rseq in sent_at and rseq not in rtts:
            rtts[rseq] = time.monotonic() - sent_at[rseq]
            sizes.append(len(icmp))
        elif kind in errors:
            quoted = quoted_echo(icmp[8:], v6)
            if quoted is not None and quoted[0] == host and quoted[1:3] == (request, ident):
                errs.append({"from": norm(peer[0]), "type": kind, "code": code, "seq": quoted[3]})
    print(json.dumps({"host": host, "sent": len(sent_at), "received": len(rtts),
                      "rtt_max_ms": round(max(rtts.values(), default=0) * 1000, 3),
                      "reply_bytes": sizes, "errors": errs}), flush=True)
    return 0 if rtts else 1


IP_MTU_DISCOVER, IP_PMTUDISC_DONT = 10, 0  # linux/in.h (Python's socket module lacks them)


def quoted_echo(q, v6):
    """(destination, ICMP type, id, seq) of the echo request an ICMP error quotes, or None."""
    if v6:
        if len(q) < 48 or q[6] != socket.IPPROTO_ICMPV6:
            return None
        dst, inner = socket.inet_ntop(socket.AF_INET6, q[24:40]), q[40:48]
    else:
        ihl = (q[0] & 0x0F) * 4 if q else 0
        if len(q) < ihl + 8 or ihl < 20 or q[9] != socket.IPPROTO_ICMP:
            return None
        dst, inner = socket.inet_ntop(socket.AF_INET, q[16:20]), q[ihl:ihl + 8]
    kind, _, _, rid, rseq = struct.unpack("!BBHHH", inner)
    return norm(dst), kind, rid, rseq


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["serve", "client", "probe", "bounce", "ping"])
    p.add_argument("--proto", choices=["tcp", "udp"], default="udp")
    p.add_argument("--family", choices=["ipv4", "dual"], default="ipv4")
    p.add_argument("--port", type=int)
    p.add_argument("--out")
    p.add_argument("--host")
    p.add_argument("--bytes", type=int, default=1000)
    p.add_argument("--bind-port", type=int, default=0)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--ttl", type=int, default=64)
    p.add_argument("--count", type=int, default=3)
    p.add_argument("--size", type=int)  # probe, bounce: 100 unless told; ping: 56
    p.add_argument("--df", action="store_true")
    p.add_argument("--no-df", action="store_true")
    p.add_argument("--wait", type=float, default=0.5)
    p.add_argument("--interval", type=float, default=0.2)
    a = p.parse_args()
    if a.mode != "ping" and a.port is None:
        p.error(f"{a.mode} needs --port")
    if a.size is None:
        a.size = 56 if a.mode == "ping" else 100
    return {"serve": serve, "client": client, "probe": probe, "bounce": bounce, "ping": ping}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
