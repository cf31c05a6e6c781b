"""Unthrottled churn to one remote endpoint, side by side with iptables MASQUERADE.

Three pods with the default ephemeral range and a fourth with
ip_local_port_range "1024 65535" (all with tcp_tw_reuse=1, as a client that
opens many short connections sets it) open short TCP connections (connect,
request, answer, orderly close) to one ext ip:port as fast as they can, while
the node's own sockets do the same to the same endpoint. Replicas of a service
against one database do this. RFC 4787 REQ-4's premise: the NAT must not run
out of ports towards one endpoint where the host would not. Pass: no connection
fails anywhere and none stalls (> 1 s: a lost SYN) with ebpf-masq (iptables'
stalls are printed: it had a few per 100,000), ebpf-masq drops nothing for want
of a port, and every connection the server saw came from the node address. Run
for the bridge plugin's ipMasq (iptables), ebpf-masq and ebpf-masq with fastPath.
The rates are printed (compared in scripts/bench.sh, never asserted here).
"""
import json
import os
import subprocess

import pytest

from netlab import REPO, Topo, sh

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
SECONDS = float(os.environ.get("EBPF_MASQ_OPEN_CHURN_SECONDS", "60"))
PORT = 5400
MODES = {"iptables": None, "ebpf-masq": {}, "ebpf-masq-fastpath": {"fastPath": True}}


@pytest.fixture
def benchtool(lab):
    path = lab.tmp / "benchtool"
    sh(["gcc", "-O2", "-Wall", "-o", path, REPO / "scripts/bench/benchtool.c"])
    return path


@pytest.mark.parametrize("mode", list(MODES))
def test_unthrottled_churn_to_one_endpoint(topo, plugin, benchtool, mode):
    keys = MODES[mode]
    net = topo.network([topo.bridge_plugin(ip_masq=True)]) if keys is None else topo.masq_network(plugin, **keys)
    pods = []
    for i in range(4):
        ns = topo.pod_ns(f"pod{i}")
        ns.sysctl("net.ipv4.tcp_tw_reuse", 1)
        if i == 3:
            ns.sysctl("net.ipv4.ip_local_port_range", "1024 65535")
        pods.append(net.add(ns))
    topo.ext.spawn([benchtool, "tcp-serve", PORT, 4])
    topo.node.sysctl("net.ipv4.tcp_tw_reuse", 1)

    runs = {f"pod{i}": p.ns.spawn([benchtool, "tcp-churn", EXT, PORT, SECONDS, 2], stdout=subprocess.PIPE)
            for i, p in enumerate(pods)}
    runs["host"] = topo.node.spawn([benchtool, "tcp-churn", EXT, PORT, SECONDS, 1], stdout=subprocess.PIPE)
    results = {}
    for who, proc in runs.items():
        out, err = proc.communicate(timeout=SECONDS + 60)
        assert proc.returncode == 0, (who, out, err)
        results[who] = json.loads(out)
    rate = {who: round(r["ok"] / r["secs"]) for who, r in results.items()}
    print(f"{mode}: conn/s {rate}, total pods {sum(v for k, v in rate.items() if k != 'host')}")

    stalls = {who: r["stalled"] for who, r in results.items() if r["stalled"]}
    print(f"{mode}: stalled (> 1 s) connections {stalls or 'none'}")
    failed = {who: r for who, r in results.items() if r["fail"]}
    assert not failed, f"{mode}: failed connections: {failed}"
    if keys is not None:
        # The yardstick itself is not spotless: iptables showed a few 1-s stalls per
        # 100,000 connections here (pods and host share 1024-65535 through conntrack,
        # a clash drops a SYN); ebpf-masq must show none.
        assert not stalls, f"{mode}: stalled connections: {stalls} ({results})"
    assert all(r["ok"] > 0 for r in results.values()), results
    # Every connection left with the node address: the server's peers are all the node's.
    conns = topo.ext.exec(["ss", "-Htn", "state", "all", f"sport = :{PORT}"]).stdout.split("\n")
    peers = {line.split()[-1].rsplit(":", 1)[0] for line in conns if line.strip() and "LISTEN" not in line}
    assert peers <= {NODE_IP}, (mode, peers)
    if keys is not None:
        s = json.loads(topo.node.enter([plugin, "status", "--json", "--pin-path", topo.lab.pin_path]).stdout)
        c, d = s["counters"], s["drops"]
        print(f"{mode}: nat_created {c['nat_created']}, nat_finished_reused {c['nat_finished_reused']}, "
              f"probes/pair {c['port_probes'] / max(1, c['nat_created']):.2f}")
        assert (d["no_port"], d["nat_table_full"], c["port_alloc_failures"]) == (0, 0, 0), (d, c)
