"""Unthrottled churn to one remote endpoint, side by side with iptables MASQUERADE.

Three pods with the default ephemeral range and a fourth with
ip_local_port_range "1024 65535" (all with tcp_tw_reuse=1, as a client that
opens many short connections sets it) open short TCP connections (connect,
request, answer, orderly close) to one ext ip:port as fast as they can, while
the node's own sockets do the same to the same endpoint. Replicas of a service
against one database do this. RFC 4787 REQ-4's premise: the NAT must not run
out of ports towards one endpoint where the host would not.

One test runs the three setups one after the other, each in its own lab: the
bridge plugin's ipMasq (iptables, the yardstick), ebpf-masq, and ebpf-masq with
fastPath. Pass, for each ebpf-masq setup: no connection fails anywhere,
ebpf-masq drops nothing for want of a port or of table room, every connection
the server saw came from the node address, and connections that stall (> 1 s:
a SYN or SYN-ACK retransmitted) are no more frequent than with iptables in the
same run. The yardstick is not spotless: on 2 cores it showed 5-7 stalls and
sometimes a few refused connections per ~400,000 (pods and host share 1024-65535
through conntrack); those are printed, never asserted. For any stall the TCP
counters of ext and the pods that explain it (challenge ACKs, PAWS, SYN
retransmissions, softnet drops) are printed. The rates are printed too
(compared in scripts/bench.sh, never asserted here).
"""
import json
import os
import subprocess

import pytest

import netlab
from netlab import Topo

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
SECONDS = float(os.environ.get("EBPF_MASQ_OPEN_CHURN_SECONDS", "60"))
PORT = 5400
MODES = {"iptables": None, "ebpf-masq": {}, "ebpf-masq-fastpath": {"fastPath": True}}
# TCP counters (nstat names) that tell why a connection waited a retransmission timeout.
WHY = ("TcpRetransSegs", "TcpExtTCPSynRetrans", "TcpExtTCPChallengeACK", "TcpExtPAWSActive",
       "TcpExtPAWSEstab", "TcpExtTW", "TcpExtTWRecycled", "TcpExtTCPTimeWaitOverflow",
       "TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPAbortOnSyn", "TcpOutRsts",
       "TcpExtTCPBacklogDrop", "TcpExtTCPReqQFullDrop")


def nstat(ns):
    """Absolute TCP counters of @ns (nstat -saz: no history file written)."""
    out = ns.exec(["nstat", "-saz"]).stdout
    vals = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] in WHY:
            vals[f[0]] = int(f[1])
    return vals


def softnet_drops():
    """Packets the kernel dropped for a full per-CPU backlog (all CPUs, host-wide)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def churn(tmp_path, plugin, benchtool, mode):
    """One setup in its own lab; returns its per-client results and diagnostics."""
    keys = MODES[mode]
    (tmp_path / mode).mkdir()
    lab = netlab.Lab(tmp_path / mode)
    try:
        topo = netlab.Topo(lab)
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

        watched = {"ext": topo.ext, "node": topo.node, **{f"pod{i}": p.ns for i, p in enumerate(pods)}}
        before = {who: nstat(ns) for who, ns in watched.items()}
        soft0 = softnet_drops()
        runs = {f"pod{i}": p.ns.spawn([benchtool, "tcp-churn", EXT, PORT, SECONDS, 2], stdout=subprocess.PIPE)
                for i, p in enumerate(pods)}
        runs["host"] = topo.node.spawn([benchtool, "tcp-churn", EXT, PORT, SECONDS, 1], stdout=subprocess.PIPE)
        results = {}
        for who, proc in runs.items():
            out, err = proc.communicate(timeout=SECONDS + 60)
            assert proc.returncode == 0, (mode, who, out, err)
            results[who] = json.loads(out)
        soft = softnet_drops() - soft0
        tcp = {}
        for who, ns in watched.items():
            after = nstat(ns)
            diff = {k: v - before[who].get(k, 0) for k, v in after.items() if v != before[who].get(k, 0)}
            if diff:
                tcp[who] = diff

        rate = {who: round(r["ok"] / r["secs"]) for who, r in results.items()}
        print(f"{mode}: conn/s {rate}, total pods {sum(v for k, v in rate.items() if k != 'host')}")
        stalls = {who: r["stalled"] for who, r in results.items() if r["stalled"]}
        failed = {who: r["errno"] for who, r in results.items() if r["fail"]}
        print(f"{mode}: stalled (> 1 s) {stalls or 'none'}, failed {failed or 'none'}")
        if stalls or failed:
            print(f"{mode}: softnet backlog drops {soft}; TCP counters that moved: {tcp}")
        assert all(r["ok"] > 0 for r in results.values()), (mode, results)
        # Every connection left with the node address: the server's peers are all the node's.
        conns = topo.ext.exec(["ss", "-Htn", "state", "all", f"sport = :{PORT}"]).stdout.split("\n")
        peers = {line.split()[-1].rsplit(":", 1)[0] for line in conns if line.strip() and "LISTEN" not in line}
        assert peers <= {NODE_IP}, (mode, peers)
        status = None
        if keys is not None:
            status = topo.status(plugin)
            c, d = status["counters"], status["drops"]
            print(f"{mode}: nat_created {c['nat_created']}, nat_finished_reused {c['nat_finished_reused']}, "
                  f"probes/pair {c['port_probes'] / max(1, c['nat_created']):.2f}, "
                  f"host flows remapped {c['host_flows_remapped']}, host socket ports avoided "
                  f"{c['host_socket_ports_avoided']}, "
                  f"drops {({k: v for k, v in d.items() if v}) or 'none'}")
        ok = sum(r["ok"] + r["stalled"] for r in results.values())
        return {"results": results, "ok": ok, "stalls": sum(stalls.values()), "failed": failed, "status": status}
    finally:
        lab.close()


def test_unthrottled_churn_to_one_endpoint(tmp_path, plugin, benchtool):
    runs = {mode: churn(tmp_path, plugin, benchtool, mode) for mode in MODES}
    ipt = runs["iptables"]
    for mode in ("ebpf-masq", "ebpf-masq-fastpath"):
        r = runs[mode]
        assert not r["failed"], f"{mode}: failed connections: {r['failed']} ({r['results']})"
        c, d = r["status"]["counters"], r["status"]["drops"]
        assert (d["no_port"], d["nat_table_full"], c["port_alloc_failures"]) == (0, 0, 0), (mode, d, c)
        # Stalls per connection no more frequent than the yardstick's in this run.
        assert r["stalls"] * ipt["ok"] <= ipt["stalls"] * r["ok"], \
            (f"{mode}: {r['stalls']} stalls in {r['ok']} connections, "
             f"iptables {ipt['stalls']} in {ipt['ok']}", r["results"])
