"""benchtool's holding tools in a lab: tcp-keep on the remote side, tcp-hold in a pod.

tcp-hold prints one JSON line when every connection it tried is decided, holds
them until its stdin closes, then resets them and exits 0 (scripts/bench/benchtool.c).
"""
import contextlib
import json
import os
import select
import subprocess
import time

from . import netlab


def json_line(proc, timeout, who):
    """The first line @proc writes on stdout, parsed; fails with its stderr if it
    ends first or takes longer than @timeout seconds."""
    deadline, buf, fd = time.monotonic() + timeout, b"", proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        assert left > 0, f"{who}: no result after {timeout} s"
        if select.select([fd], [], [], min(left, 1.0))[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                proc.wait(5)
                raise AssertionError(f"{who}: ended (rc={proc.returncode}) without a result: "
                                     f"{proc.stderr.read().decode(errors='replace')}")
            buf += chunk
    return json.loads(buf.split(b"\n")[0])


def release(proc, who, timeout=60):
    """Close @proc's stdin (tcp-hold then resets its connections) and wait for it to end."""
    proc.stdin.close()
    rc = proc.wait(timeout)
    assert rc == 0, f"{who}: rc={rc}: {proc.stderr.read().decode(errors='replace')}"


def keep(ext, benchtool, port):
    """tcp-keep listening on @port in @ext (the lab stops it)."""
    server = ext.spawn([benchtool, "tcp-keep", port], stdout=subprocess.PIPE)
    netlab.wait_for(lambda: server.poll() is not None or
                    ext.exec(["ss", "-Htln", f"sport = :{port}"]).stdout.strip(), what="tcp-keep listening")
    assert server.poll() is None, f"tcp-keep died: {server.stderr.read().decode(errors='replace')}"
    return server


def hold(ns, benchtool, dst, port, n, inflight):
    """tcp-hold in @ns: up to @n connections to dst:port, @inflight connects at a time
    (at most @n; 3 s each). Returns the running process; json_line() reads its result."""
    return ns.spawn([benchtool, "tcp-hold", dst, port, n, min(n, inflight)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def established_peers(ns, port):
    """The peer addresses of the established connections @ns holds on local @port."""
    conns = ns.exec(["ss", "-Htn", "state", "established", f"sport = :{port}"]).stdout.split("\n")
    return [line.split()[-1].rsplit(":", 1)[0] for line in conns if line.strip()]


def pod_status(status, ip):
    """The pod of `status --json` that has address @ip, or None."""
    return next((p for p in status.get("pods", []) if ip in {a.split("/")[0] for a in p.get("addresses", [])}),
                None)


@contextlib.contextmanager
def mode_lab(tmp_path, mode, plugin, keys):
    """A lab of its own (under tmp_path/mode) for one setup: bridge ipMasq when @keys is
    None (the iptables yardstick), else bridge + ebpf-masq with @keys. Yields (lab, topo,
    net); on the way out every process the lab started is stopped first (the clients
    let their connections go), then the lab is closed."""
    (tmp_path / mode).mkdir()
    lab = netlab.Lab(tmp_path / mode)
    try:
        topo = netlab.Topo(lab)
        net = topo.network([topo.bridge_plugin(ip_masq=True)]) if keys is None else topo.masq_network(plugin, **keys)
        yield lab, topo, net
    finally:
        for proc in lab.procs:
            lab.stop(proc)
        lab.close()
