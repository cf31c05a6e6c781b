#!/usr/bin/python3
"""The switch from ip-masq-agent's iptables rules to ebpf-masq, for test_switch.py.

As a library: ip-masq-agent's rules as it writes them (install_ip_masq_agent,
remove_ip_masq_agent: the commands docs/migrate-ip-masq-agent.md gives), the
node's conntrack NAT bindings (nat_ports), and OldFlows, long-lived TCP
connections and UDP flows of one pod driven round by round.

As a script, run inside the test's namespaces:
  switchlab.py echo --tcp-port T --udp-port U --out FILE
      TCP: echoes every connection's bytes back. UDP: echoes every datagram and
      records in FILE {"flow": the datagram's flow tag, "port": its source port}.
      FILE is created once both sockets are bound (readiness marker).
  switchlab.py flows --host H --tcp-port T --udp-port U --tcp N --udp M
      Opens N TCP connections and M UDP flows (connected sockets) to H, prints
      {"flows": [{"id", "proto", "local"}]}; then, for each line "round" on stdin,
      sends every live flow 512 random bytes (UDP: tagged with its id), reads
      the echo (ECHO_TIMEOUT at most; the flows at once) and prints {"round": [{"id", "ok", "error"}]}: ok
      only if the echo is exactly what was sent. A TCP flow that failed once
      stays failed (its stream is no longer in step).
  switchlab.py churn --host H --port T --seconds S
      Opens short TCP connections to H:T for S seconds, one after another, each
      sending 16 bytes and reading them back, closing first; prints {"ok", "failed",
      "errors"}.
  switchlab.py collide --host H --port T --proto tcp|udp --bind-port P
      One flow from source port P to H:T: 16 bytes and their echo; prints
      {"ok", "error"}.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ECHO_TIMEOUT = 10  # seconds an exchange may take before its flow counts as stalled (a lab veth answers in ms)
PY = "/usr/bin/python3"  # Debian's python, as netlab runs it
IP_MASQ_AGENT = "IP-MASQ-AGENT"
# ip-masq-agent's comments and rules, as cmd/ip-masq-agent/ip-masq-agent.go writes them.
JUMP = ["-m", "comment", "--comment", "ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination "
        "traffic to our custom IP-MASQ-AGENT chain", "-m", "addrtype", "!", "--dst-type", "LOCAL",
        "-j", IP_MASQ_AGENT]
NON_MASQ_COMMENT = "ip-masq-agent: local traffic is not subject to MASQUERADE"
MASQ = ["-m", "comment", "--comment", "ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last "
        "in chain)", "-j", "MASQUERADE", "--random-fully"]


def install_ip_masq_agent(node, non_masq_cidrs, masq_link_local=False):
    """ip-masq-agent's chain in node's nat table, as it writes it with --random-fully (its default)."""
    node.exec(["iptables", "-t", "nat", "-N", IP_MASQ_AGENT])
    cidrs = list(non_masq_cidrs) if masq_link_local else ["169.254.0.0/16", *non_masq_cidrs]
    for cidr in cidrs:
        node.exec(["iptables", "-t", "nat", "-A", IP_MASQ_AGENT, "-d", cidr, "-m", "comment", "--comment",
                   NON_MASQ_COMMENT, "-j", "RETURN"])
    node.exec(["iptables", "-t", "nat", "-A", IP_MASQ_AGENT, *MASQ])
    node.exec(["iptables", "-t", "nat", "-A", "POSTROUTING", *JUMP])


def install_kube_proxy_forward(node):
    """kube-proxy's (iptables mode) forwarding conntrack rule, as it writes it: on a real node it keeps the
    node's conntrack in use whatever ip-masq-agent does (with nftables, conntrack tracks a namespace's packets
    only while a rule of it needs conntrack)."""
    node.exec(["iptables", "-t", "filter", "-N", "KUBE-FORWARD"])
    node.exec(["iptables", "-t", "filter", "-A", "KUBE-FORWARD", "-m", "comment", "--comment",
               "kubernetes forwarding conntrack rule", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
               "-j", "ACCEPT"])
    node.exec(["iptables", "-t", "filter", "-A", "FORWARD", "-m", "comment", "--comment",
               "kubernetes forwarding rules", "-j", "KUBE-FORWARD"])


def remove_ip_masq_agent(node):
    """The guide's commands: the jump deleted, the chain flushed and deleted (conntrack left as it is)."""
    node.exec(["iptables", "-t", "nat", "-D", "POSTROUTING", *JUMP])
    node.exec(["iptables", "-t", "nat", "-F", IP_MASQ_AGENT])
    node.exec(["iptables", "-t", "nat", "-X", IP_MASQ_AGENT])


def nat_ports(node, proto, src, dst, dport):
    """{original source port: port it was translated to} of node's conntrack entries
    src:* -> dst:dport of @proto (`conntrack -L`, the reply direction's destination port)."""
    out = node.exec(["conntrack", "-L", "-p", proto, "-s", src, "-d", dst, "--dport", dport])
    ports = {}
    for line in out.stdout.splitlines():
        kv = [w.split("=", 1) for w in line.split() if "=" in w]
        sports = [int(v) for k, v in kv if k == "sport"]
        dports = [int(v) for k, v in kv if k == "dport"]
        if len(sports) >= 2 and len(dports) >= 2:
            ports[sports[0]] = dports[1]
    return ports


class OldFlows:
    """`switchlab.py flows` in a pod: its flows, and one exchange per round()."""

    def __init__(self, ns, host, tcp_port, udp_port, tcp, udp):
        self.proc = ns.spawn([PY, __file__, "flows", "--host", host,
                              "--tcp-port", tcp_port, "--udp-port", udp_port, "--tcp", tcp, "--udp", udp],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.flows = self._read()["flows"]
        self.rounds = []

    def _read(self):
        line = self.proc.stdout.readline()
        assert line, f"flows client exited {self.proc.poll()}: {self.proc.stderr.read().decode()}"
        return json.loads(line)

    def round(self, label):
        """One exchange on every flow at once: [{id, ok, error}], also kept under @label in self.rounds."""
        self.proc.stdin.write(b"round\n")
        self.proc.stdin.flush()
        res = self._read()["round"]
        self.rounds.append((label, res))
        return res

    def close(self):
        """End the flows (the client closes every socket: TCP's orderly close); its exit code."""
        self.proc.stdin.close()
        return self.proc.wait(30)

    def failures(self):
        return [(label, r) for label, res in self.rounds for r in res if not r["ok"]]


# ---- the script ----

def _echo_tcp(conn):
    with conn:
        while chunk := conn.recv(1 << 16):
            conn.sendall(chunk)


def echo(a):
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("0.0.0.0", a.tcp_port))
    t.listen(1024)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("0.0.0.0", a.udp_port))

    def accept():
        while True:
            conn, _ = t.accept()
            threading.Thread(target=_echo_tcp, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    with open(a.out, "a") as out:  # exists once both sockets are bound
        while True:
            data, peer = u.recvfrom(1 << 16)
            tag = data.split(b":", 1)[0].decode(errors="replace")
            out.write(json.dumps({"flow": tag, "addr": peer[0], "port": peer[1]}) + "\n")
            out.flush()
            u.sendto(data, peer)


def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the remote")
        buf += chunk
    return buf


def _udp_exchange(s, payload):
    """Send @payload until its echo comes back, once a second (as a UDP client resends a lost request), for
    ECHO_TIMEOUT at most; another datagram (a late echo of an earlier round) is not the echo. None if it came."""
    deadline = time.monotonic() + ECHO_TIMEOUT
    while time.monotonic() < deadline:
        s.send(payload)
        wait_until = min(deadline, time.monotonic() + 1)
        while (left := wait_until - time.monotonic()) > 0:
            s.settimeout(left)
            try:
                if s.recv(1 << 16) == payload:
                    return None
            except socket.timeout:
                break
    return f"no echo in {ECHO_TIMEOUT} s"


def flows(a):
    socks = []
    for i in range(a.tcp):
        s = socket.create_connection((a.host, a.tcp_port), timeout=10)
        socks.append({"id": f"tcp{i}", "proto": "tcp", "sock": s})
    for i in range(a.udp):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((a.host, a.udp_port))
        socks.append({"id": f"udp{i}", "proto": "udp", "sock": s})
    for f in socks:
        f["sock"].settimeout(ECHO_TIMEOUT)
        f["dead"] = None
    print(json.dumps({"flows": [{"id": f["id"], "proto": f["proto"], "local": f["sock"].getsockname()[1]}
                                for f in socks]}), flush=True)

    def exchange(f):
        if f["dead"]:
            return {"id": f["id"], "ok": False, "error": f"failed before: {f['dead']}"}
        s, payload = f["sock"], f"{f['id']}:".encode() + os.urandom(512)
        try:
            if f["proto"] == "udp":
                err = _udp_exchange(s, payload)
            else:
                s.sendall(payload)
                got = _recv_exact(s, len(payload))
                err = None if got == payload else f"echo differs ({len(got)} bytes back)"
        except OSError as e:
            err = f"{type(e).__name__}: {e}"
        if err and f["proto"] == "tcp":
            f["dead"] = err
        return {"id": f["id"], "ok": err is None, "error": err}

    with ThreadPoolExecutor(len(socks)) as pool:  # a stalled flow holds up no other
        for line in sys.stdin:
            if line.strip() == "round":
                print(json.dumps({"round": list(pool.map(exchange, socks))}), flush=True)
    return 0


def churn(a):
    ok, failed, errors = 0, 0, {}
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        try:
            with socket.create_connection((a.host, a.port), timeout=5) as s:
                s.sendall(b"x" * 16)
                _recv_exact(s, 16)
            ok += 1
        except OSError as e:
            failed += 1
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
    print(json.dumps({"ok": ok, "failed": failed, "errors": errors}), flush=True)
    return 0


def collide(a):
    kind = socket.SOCK_STREAM if a.proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind)
    s.settimeout(10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", a.bind_port))
    res = {"local": a.bind_port}
    try:
        s.connect((a.host, a.port))
        payload = b"collide:" + os.urandom(8)
        if a.proto == "udp":
            err = _udp_exchange(s, payload)
        else:
            s.sendall(payload)
            err = None if _recv_exact(s, len(payload)) == payload else "echo differs"
        res.update(ok=err is None, error=err)
    except OSError as e:
        res.update(ok=False, error=f"{type(e).__name__}: {e}")
    s.close()
    print(json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["echo", "flows", "churn", "collide"])
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--tcp-port", type=int)
    p.add_argument("--udp-port", type=int)
    p.add_argument("--tcp", type=int, default=0)
    p.add_argument("--udp", type=int, default=0)
    p.add_argument("--out")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--proto", choices=["tcp", "udp"], default="tcp")
    p.add_argument("--bind-port", type=int)
    a = p.parse_args()
    return {"echo": echo, "flows": flows, "churn": churn, "collide": collide}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
