#!/usr/bin/python3
"""Traffic tool run inside test namespaces.

  peer.py serve  --proto tcp|udp --port P --out FILE
      Records one JSON line per event in FILE ("accept"/"done" for TCP, "dgram"
      for UDP) with the peer address the server saw. TCP: reads to EOF, then
      replies with the sha256 of what it got. UDP: echoes. FILE is created once
      the socket is bound (readiness marker).
  peer.py client --proto tcp|udp --host H --port P [--bytes N] [--bind-port B]
                 [--hold S] [--timeout T]
      Prints one JSON line; exits 0 only if the server's reply matched.
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time

lock = threading.Lock()


def record(path, **kv):
    with lock, open(path, "a") as f:
        f.write(json.dumps(kv) + "\n")


def handle_tcp(conn, peer, out):
    with conn:
        conn.settimeout(60)
        record(out, event="accept", proto="tcp", addr=peer[0], port=peer[1])
        h, n = hashlib.sha256(), 0
        while chunk := conn.recv(1 << 16):
            h.update(chunk)
            n += len(chunk)
        record(out, event="done", proto="tcp", addr=peer[0], port=peer[1], bytes=n, sha256=h.hexdigest())
        conn.sendall(h.hexdigest().encode())


def serve(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", a.port))
    if a.proto == "tcp":
        s.listen(64)
    open(a.out, "a").close()
    while True:
        if a.proto == "tcp":
            conn, peer = s.accept()
            threading.Thread(target=handle_tcp, args=(conn, peer, a.out), daemon=True).start()
        else:
            data, peer = s.recvfrom(1 << 16)
            record(a.out, event="dgram", proto="udp", addr=peer[0], port=peer[1], bytes=len(data))
            s.sendto(data, peer)


def client(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    s.settimeout(a.timeout)
    if a.bind_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", a.bind_port))
    res = {"proto": a.proto}
    try:
        s.connect((a.host, a.port))
        res["local"] = list(s.getsockname())
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
            payload = os.urandom(max(1, min(a.bytes, 1400)))
            s.send(payload)
            res.update(sent=len(payload), ok=s.recv(1 << 16) == payload)
    except OSError as e:
        res.update(ok=False, error=str(e))
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["serve", "client"])
    p.add_argument("--proto", choices=["tcp", "udp"], required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out")
    p.add_argument("--host")
    p.add_argument("--bytes", type=int, default=1000)
    p.add_argument("--bind-port", type=int, default=0)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--timeout", type=float, default=10.0)
    a = p.parse_args()
    return serve(a) if a.mode == "serve" else client(a)


if __name__ == "__main__":
    sys.exit(main())
