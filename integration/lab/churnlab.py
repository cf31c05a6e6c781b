"""Churn to one remote endpoint in a lab of its own, one setup at a time.

What test_churn_unthrottled.py asserts on and scripts/bench/newflow.py measures:
four pods (three with the default ephemeral range, the fourth with
ip_local_port_range "1024 65535"; all with tcp_tw_reuse=1, as a client that
opens many short connections sets it) and the node's own sockets open short TCP
connections (benchtool tcp-churn: connect, 16-byte request, answer, orderly
close) to one ext ip:port as fast as they can. With @held, two more pods
(default sysctls) first open and hold that many connections to the same ext
ip:port (benchtool tcp-hold, half each; the server is then tcp-serve-idle,
which serves the churn while the held connections sit idle), and let them go
after the churn. ramp() raises the number of churning clients step by step.

Setups (MODES): the bridge plugin's ipMasq (iptables, the yardstick), ebpf-masq
and ebpf-masq with fastPath, each with its defaults.
"""
import json
import subprocess

from .hold import hold as tcp_hold, json_line, release
from . import netlab
from .netlab import Topo

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
PORT = 5400
MODES = {"iptables": None, "ebpf-masq": {}, "ebpf-masq-fastpath": {"fastPath": True}}
# TCP counters (nstat names) that tell why a connection waited a retransmission timeout.
WHY = ("TcpRetransSegs", "TcpExtTCPSynRetrans", "TcpExtTCPChallengeACK", "TcpExtPAWSActive",
       "TcpExtPAWSEstab", "TcpExtTW", "TcpExtTWRecycled", "TcpExtTCPTimeWaitOverflow",
       "TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPAbortOnSyn", "TcpOutRsts",
       "TcpExtTCPBacklogDrop", "TcpExtTCPReqQFullDrop")
HOLD_INFLIGHT = 256


def softnet_drops():
    """Packets the kernel dropped for a full per-CPU backlog (all CPUs, host-wide)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def _lab(tmp_path, name, plugin, mode):
    keys = MODES[mode]
    (tmp_path / name).mkdir()
    lab = netlab.Lab(tmp_path / name)
    try:
        topo = netlab.Topo(lab)
        net = topo.network([topo.bridge_plugin(ip_masq=True)]) if keys is None else topo.masq_network(plugin, **keys)
    except BaseException:
        lab.close()  # the caller's try/finally starts only once the lab is returned
        raise
    return lab, topo, net


def _serve(topo, benchtool, server, workers):
    topo.ext.spawn([benchtool, server, PORT, workers])
    netlab.wait_for(lambda: topo.ext.exec(["ss", "-Htln", f"sport = :{PORT}"]).stdout.strip(),
                    what=f"{server} listening")


def _nat_status(topo, plugin, mode, name):
    """ebpf-masq's counters and non-zero drops, printed and returned (None for iptables)."""
    if MODES[mode] is None:
        return None
    status = topo.status(plugin)
    c, d = status["counters"], status["drops"]
    print(f"{name}: nat_created {c['nat_created']}, nat_finished_reused {c['nat_finished_reused']}, "
          f"probes/pair {c['port_probes'] / max(1, c['nat_created']):.2f}, "
          f"host flows remapped {c['host_flows_remapped']}, host socket ports avoided "
          f"{c['host_socket_ports_avoided']}, drops {({k: v for k, v in d.items() if v}) or 'none'}")
    print(f"{name}: counters {({k: v for k, v in c.items() if v and not isinstance(v, dict)})}")
    return status


def churn(tmp_path, plugin, benchtool, mode, seconds, held=0):
    """One setup in its own lab; returns its per-client results and diagnostics:
    {results, ok, stalls, failed, status, rate, held}."""
    name = f"{mode}-held" if held else mode
    lab, topo, net = _lab(tmp_path, name, plugin, mode)
    try:
        pods = []
        for i in range(4):
            ns = topo.pod_ns(f"pod{i}")
            ns.sysctl("net.ipv4.tcp_tw_reuse", 1)
            if i == 3:
                ns.sysctl("net.ipv4.ip_local_port_range", "1024 65535")
            pods.append(net.add(ns))
        holders = [net.add(topo.pod_ns(f"hold{i}")) for i in range(2 if held else 0)]
        _serve(topo, benchtool, "tcp-serve-idle" if held else "tcp-serve", 4)
        topo.node.sysctl("net.ipv4.tcp_tw_reuse", 1)

        holding, held_ok = [], 0
        for i, h in enumerate(holders):
            n = held // 2 + (held % 2 if i == 0 else 0)
            holding.append(tcp_hold(h.ns, benchtool, EXT, PORT, n, HOLD_INFLIGHT))
        for i, proc in enumerate(holding):
            r = json_line(proc, 300, f"{name}: hold{i}")
            held_ok += r["ok"]
        if held:
            print(f"{name}: held {held_ok} of {held} connections to {EXT}:{PORT}")

        watched = {"ext": topo.ext, "node": topo.node, **{f"pod{i}": p.ns for i, p in enumerate(pods)}}
        before = {who: ns.nstat(WHY) for who, ns in watched.items()}
        soft0 = softnet_drops()
        runs = {f"pod{i}": p.ns.spawn([benchtool, "tcp-churn", EXT, PORT, seconds, 2], stdout=subprocess.PIPE)
                for i, p in enumerate(pods)}
        runs["host"] = topo.node.spawn([benchtool, "tcp-churn", EXT, PORT, seconds, 1], stdout=subprocess.PIPE)
        results = {}
        for who, proc in runs.items():
            out, err = proc.communicate(timeout=seconds + 60)
            assert proc.returncode == 0, (name, who, out, err)
            results[who] = json.loads(out)
        soft = softnet_drops() - soft0
        tcp = {}
        for who, ns in watched.items():
            after = ns.nstat(WHY)
            diff = {k: v - before[who].get(k, 0) for k, v in after.items() if v != before[who].get(k, 0)}
            if diff:
                tcp[who] = diff

        rate = {who: round(r["ok"] / r["secs"]) for who, r in results.items()}
        print(f"{name}: conn/s {rate}, total pods {sum(v for k, v in rate.items() if k != 'host')}")
        stalls = {who: r["stalled"] for who, r in results.items() if r["stalled"]}
        failed = {who: r["errno"] for who, r in results.items() if r["fail"]}
        print(f"{name}: stalled (> 1 s) {stalls or 'none'}, failed {failed or 'none'}")
        if stalls or failed:
            print(f"{name}: softnet backlog drops {soft}; TCP counters that moved: {tcp}")
        assert all(r["ok"] > 0 for r in results.values()), (name, results)
        # Every connection left with the node address: the server's peers are all the node's.
        conns = topo.ext.exec(["ss", "-Htn", "state", "all", f"sport = :{PORT}"]).stdout.split("\n")
        peers = {line.split()[-1].rsplit(":", 1)[0] for line in conns if line.strip() and "LISTEN" not in line}
        assert peers <= {NODE_IP}, (name, peers)
        status = _nat_status(topo, plugin, mode, name)
        for i, proc in enumerate(holding):
            release(proc, f"{name}: hold{i}")
        ok = sum(r["ok"] + r["stalled"] for r in results.values())
        return {"results": results, "ok": ok, "stalls": sum(stalls.values()), "failed": failed,
                "fails": sum(r["fail"] for r in results.values()), "status": status,
                "rate": sum(r["ok"] / r["secs"] for r in results.values()), "held": held_ok}
    finally:
        for proc in lab.procs:
            lab.stop(proc)
        lab.close()


def ramp(tmp_path, plugin, benchtool, mode, steps, seconds):
    """Raise the churning clients (spread over four default pods, tcp_tw_reuse=1)
    through @steps, @seconds each, in one lab; stop after the first step where a
    connection failed. Returns [{clients, rate, fails, stalls, errno, drops}]."""
    lab, topo, net = _lab(tmp_path, f"{mode}-ramp", plugin, mode)
    try:
        pods = []
        for i in range(4):
            ns = topo.pod_ns(f"pod{i}")
            ns.sysctl("net.ipv4.tcp_tw_reuse", 1)
            pods.append(net.add(ns))
        _serve(topo, benchtool, "tcp-serve-idle", 2)
        rows = []
        for clients in steps:
            per = [clients // 4 + (1 if i < clients % 4 else 0) for i in range(4)]
            runs = [p.ns.spawn([benchtool, "tcp-churn", EXT, PORT, seconds, w], stdout=subprocess.PIPE)
                    for p, w in zip(pods, per) if w]
            res = []
            for proc in runs:
                out, err = proc.communicate(timeout=seconds + 60)
                assert proc.returncode == 0, (mode, clients, out, err)
                res.append(json.loads(out))
            errno = {}
            for r in res:
                for k, v in r["errno"].items():
                    errno[k] = errno.get(k, 0) + v
            status = _nat_status(topo, plugin, mode, f"{mode}-ramp")
            row = {"clients": clients, "rate": round(sum(r["ok"] / r["secs"] for r in res)),
                   "fails": sum(r["fail"] for r in res), "stalls": sum(r["stalled"] for r in res),
                   "errno": errno, "drops": {k: v for k, v in status["drops"].items() if v} if status else None}
            print(f"{mode}: ramp {row}")
            rows.append(row)
            if row["fails"]:
                break
        return rows
    finally:
        for proc in lab.procs:
            lab.stop(proc)
        lab.close()
