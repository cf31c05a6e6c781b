"""The NAT session log's formats, with a real collector.

A JSON-lines session log goes to Debian's nfcapd as IPFIX (`ebpf-masq natlog
send`), and nfdump decodes every record back with the pre- and post-NAT
addresses and ports and RFC 8158's natEvent (4 create, 5 delete, 12 ports
exhausted). `natlog who` names the pod that held a node address and port at a
time, lists every pair when a port was shared across remote endpoints, and says
"nobody" plainly. An exporter with no route to its collector counts the records
it could not send and fails.

`natlog snapshot` logs the pairs alive in a real node's tables (what an exporter
logs when it starts), and `natlog who` names the pod behind the node port a
remote server saw. The other records here are written by the test: the data
plane's events through the live exporter are test_agent.py's.
"""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from lab import masqcli
from lab.netlab import Topo

T0 = 1_796_472_187_000  # 2026-12-05T12:03:07Z


def rec(event, t, pod, pod_addr, pod_port, nat_addr, nat_port, remote, rport, proto=6, **extra):
    r = {"time_ms": t, "event": event, "proto": proto, "pod_addr": pod_addr, "pod_port": pod_port,
         "remote_addr": remote, "remote_port": rport, "namespace": "default", "pod": pod}
    if nat_addr is not None:
        r.update(nat_addr=nat_addr, nat_port=nat_port)
    r.update(extra)
    return r


LOG = [
    rec("create", T0, "web-1", "10.1.0.5", 40000, "192.0.2.1", 40123, "203.0.113.10", 443),
    rec("create", T0 + 500, "api-2", "10.1.0.7", 51000, "192.0.2.1", 40123, "203.0.113.20", 443),
    rec("delete", T0 + 3000, "web-1", "10.1.0.5", 40000, "192.0.2.1", 40123, "203.0.113.10", 443,
        start_ms=T0, reason="closed",
        counts={"out_packets": 6, "out_bytes": 480, "in_packets": 5, "in_bytes": 1900}),
    rec("create", T0 + 4000, "dns", "fd00::5", 5353, "2001:db8::1", 40000, "2001:db8:1::9", 53, proto=17),
    rec("ports_exhausted", T0 + 5000, "greedy", "10.1.0.9", 33333, None, None, "203.0.113.10", 443),
    rec("delete", T0 + 9000, "api-2", "10.1.0.7", 51000, "192.0.2.1", 40123, "203.0.113.20", 443,
        start_ms=T0 + 500, reason="expired"),
]


def write_log(tmp_path):
    path = tmp_path / "natlog.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in LOG))
    return path


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ipfix_records_decode_in_a_real_collector(tmp_path, plugin):
    """RFC 7011 messages with RFC 8158 elements: nfdump decodes each record's
    natEvent, pre-NAT source, post-NAT source address and port, destination."""
    log = write_log(tmp_path)
    data = tmp_path / "nfcapd"
    data.mkdir()
    port = free_udp_port()
    cap = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-w", str(data), "-t", "3600"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)
        assert cap.poll() is None, f"nfcapd exited: {cap.stderr.read().decode()}"
        out = subprocess.run([str(plugin), "natlog", "send", "--file", str(log), "--ipfix", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert f"{len(LOG)} records" in out.stderr, out.stderr
        time.sleep(0.5)
    finally:
        cap.send_signal(signal.SIGTERM)  # nfcapd writes its file when it stops
        cap.wait(timeout=10)
    files = sorted(p for p in data.iterdir() if p.name.startswith("nfcapd."))
    assert files, "nfcapd wrote no file"
    dump = subprocess.run(["nfdump", "-r", str(files[-1]), "-o", "json"], capture_output=True, text=True, timeout=30)
    assert dump.returncode == 0, dump.stderr
    flows = json.loads(dump.stdout)
    assert len(flows) == len(LOG), flows

    def find(event_id, src, sport):
        hits = [f for f in flows if f.get("nat_event_id") == str(event_id)
                and (f.get("src4_addr") or f.get("src6_addr")) == src and f["src_port"] == sport]
        assert len(hits) == 1, (event_id, src, sport, flows)
        return hits[0]

    # web-1: create and delete, each with its translation (RFC 8158 4.1: NAT44 session).
    for ev in (4, 5):
        f = find(ev, "10.1.0.5", 40000)
        assert (f["src4_xlt_ip"], f["src_xlt_port"]) == ("192.0.2.1", "40123"), f
        assert (f["dst4_addr"], f["dst_port"], f["proto"]) == ("203.0.113.10", 443, 6), f
    assert find(5, "10.1.0.5", 40000)["t_event"].startswith("2026-12-05T12:03:10"), "observationTimeMilliseconds"
    # api-2 shared the node port towards another remote.
    f = find(5, "10.1.0.7", 51000)
    assert (f["src4_xlt_ip"], f["src_xlt_port"], f["dst4_addr"]) == ("192.0.2.1", "40123", "203.0.113.20"), f
    # The IPv6 pair (sourceIPv6Address 27, destinationIPv6Address 28; nfdump 1.7 does not decode 281).
    f = find(4, "fd00::5", 5353)
    assert (f["dst6_addr"], f["src_xlt_port"], f["proto"]) == ("2001:db8:1::9", "40000", 17), f
    # A refusal: natEvent 12, NAT ports exhausted (RFC 8158 4.4).
    f = find(12, "10.1.0.9", 33333)
    assert (f["dst4_addr"], f["src_xlt_port"]) == ("203.0.113.10", "0"), f


def wait_for_line(path, text, proc, timeout=15):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"{proc.args[0]} exited: {path.read_text(errors='replace')[-2000:]}"
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in {path} after {timeout} s")


def test_enterprise_elements_decode_in_pmacct(tmp_path, plugin):
    """The pod's namespace and name and the snapshot mark, ebpf-masq's
    enterprise-specific elements (RFC 7011 section 3.2, variable-length per
    section 7), decoded by pmacct's nfacctd through aggregate_primitives."""
    log = write_log(tmp_path)
    alive = dict(LOG[0], event="alive", time_ms=T0 + 20_000, start_ms=T0, pod_port=40001, nat_port=40124)
    with open(log, "a") as f:
        f.write(json.dumps(alive) + "\n")
    port = free_udp_port()
    (tmp_path / "prim.lst").write_text(
        "name=podns field_type=32473:1 len=vlen semantics=str\n"
        "name=podname field_type=32473:2 len=vlen semantics=str\n"
        "name=snapshot field_type=32473:4 len=1 semantics=u_int\n")
    out = tmp_path / "out.json"
    (tmp_path / "nfacctd.conf").write_text(f"""daemonize: false
nfacctd_ip: 127.0.0.1
nfacctd_port: {port}
aggregate_primitives: {tmp_path / "prim.lst"}
plugins: print[p]
aggregate[p]: src_host, src_port, post_nat_src_host, post_nat_src_port, nat_event, podns, podname, snapshot
print_output[p]: json
print_output_file[p]: {out}
print_output_file_append[p]: true
print_refresh_time[p]: 1
""")
    daemon_log = tmp_path / "nfacctd.log"
    with open(daemon_log, "w") as dl:
        acct = subprocess.Popen(["nfacctd", "-f", str(tmp_path / "nfacctd.conf")], stdout=dl, stderr=subprocess.STDOUT)
    try:
        # Both the core's socket and its print plugin up: records sent before the
        # plugin had started went missing in 3 runs of 12.
        wait_for_line(daemon_log, "waiting for NetFlow/IPFIX data", acct)
        wait_for_line(daemon_log, "JSON: setting object handlers", acct)
        sent = subprocess.run([str(plugin), "natlog", "send", "--file", str(log), "--ipfix", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=30)
        assert sent.returncode == 0, sent.stderr
        end = time.monotonic() + 20
        while len(rows := [json.loads(l) for l in (out.read_text() if out.exists() else "").splitlines()
                           if l.strip().endswith("}")]) < len(LOG) + 1:
            assert time.monotonic() < end, f"nfacctd printed {len(rows)} of {len(LOG) + 1} records: {rows}"
            time.sleep(0.2)
    finally:
        acct.send_signal(signal.SIGINT)  # nfacctd's clean exit (SIGTERM leaves its plugin running)
        acct.wait(timeout=20)
    by = {(r["ip_src"], r["port_src"], r["nat_event"], r["snapshot"]): r for r in rows}
    web = by[("10.1.0.5", 40000, 4, "0")]
    assert (web["podns"], web["podname"], web["post_nat_ip_src"], web["post_nat_port_src"]) == \
        ("default", "web-1", "192.0.2.1", 40123), web
    assert by[("10.1.0.7", 51000, 5, "0")]["podname"] == "api-2"
    assert by[("fd00::5", 5353, 4, "0")]["podname"] == "dns"
    snap = by[("10.1.0.5", 40001, 4, "1")]
    assert (snap["podname"], snap["post_nat_port_src"]) == ("web-1", 40124), snap
    assert by[("10.1.0.9", 33333, 12, "0")]["podname"] == "greedy"


def who(plugin, log, *args):
    out = subprocess.run([str(plugin), "natlog", "who", *args, "--file", str(log)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_who_names_the_pod_that_held_a_node_port(tmp_path, plugin):
    log = write_log(tmp_path)
    # 12:03:08: both pods held 192.0.2.1:40123, towards different remotes.
    both = who(plugin, log, "192.0.2.1:40123", "--at", "2026-12-05T12:03:08Z")
    assert "2 pairs held 192.0.2.1:40123" in both and "default/web-1" in both and "default/api-2" in both, both
    one = who(plugin, log, "192.0.2.1:40123", "--at", "2026-12-05T12:03:08Z", "--remote", "203.0.113.20:443")
    assert "default/api-2 tcp 10.1.0.7:51000 -> 192.0.2.1:40123 -> 203.0.113.20:443" in one, one
    assert "web-1" not in one, one
    # After web-1's delete (12:03:10), only api-2 until it expired at 12:03:16.
    later = json.loads(who(plugin, log, "192.0.2.1:40123", "--at", "2026-12-05 12:03:12", "--json"))
    assert [h["record"]["pod"] for h in later["holders"]] == ["api-2"], later
    assert later["holders"][0]["until"] == "2026-12-05T12:03:16.000Z", later
    nobody = who(plugin, log, "192.0.2.1:40123", "--at", "2026-12-05T12:03:17Z")
    assert nobody.startswith("nobody held 192.0.2.1:40123 at 2026-12-05T12:03:17.000Z"), nobody
    v6 = who(plugin, log, "[2001:db8::1]:40000", "--at", str((T0 + 4500) / 1000))
    assert "default/dns udp [fd00::5]:5353" in v6 and "the end of the log" in v6, v6


def test_who_rejects_bad_input_naming_the_option(tmp_path, plugin):
    log = write_log(tmp_path)
    out = subprocess.run([str(plugin), "natlog", "who", "192.0.2.1:40123", "--at", "tomorrow", "--file", str(log)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "--at" in out.stderr, out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(LOG[0]) + "\n{\"event\": 3}\n" + json.dumps(LOG[1]) + "\n")
    out = subprocess.run([str(plugin), "natlog", "who", "192.0.2.1:40123", "--at", "1", "--file", str(bad)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "bad.json:2: not a record" in out.stderr, out.stderr


def test_an_unreachable_collector_is_counted_not_waited_for(tmp_path, plugin, lab):
    """In a namespace with no route, every send fails at once: the exporter
    counts the records it could not send, says so and fails (never blocks)."""
    log = write_log(tmp_path)
    ns = lab.netns("noroute")
    t = time.monotonic()
    out = subprocess.run(["ip", "netns", "exec", ns.name, str(plugin), "natlog", "send", "--file", str(log),
                          "--ipfix", "198.51.100.7:4739"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0, out.stderr
    assert f"{len(LOG)} records could not be sent" in out.stderr, out.stderr
    assert time.monotonic() - t < 10


def test_who_names_the_pod_behind_a_port_a_server_saw(topo, masq_pod, plugin, tmp_path):
    """A real pod's UDP flow: the server sees the node address and a port; the
    snapshot of the node's live pairs, asked about that port, names the pod's
    address and port (RFC 8158's create record: pre- and post-NAT source)."""
    net, pod = masq_pod()
    srv = topo.ext.server("udp", 5001)
    rc, res = pod.ns.client("udp", Topo.EXT, 5001)
    assert rc == 0, res
    [seen] = srv.records("dgram")
    assert seen["addr"] == Topo.NODE_EXT, seen
    log = tmp_path / "nat.json"
    masqcli.run(topo, plugin, "natlog", "snapshot", "--file", str(log))
    records = [json.loads(l) for l in log.read_text().splitlines()]
    assert [r["event"] for r in records] == ["alive"], records
    out = json.loads(who(plugin, log, f"{seen['addr']}:{seen['port']}", "--at", str(time.time()), "--json"))
    [held] = out["holders"]
    r = held["record"]
    assert (r["pod_addr"], r["pod_port"], r["proto"]) == (pod.ip, res["local"][1], 17), r
    assert (r["remote_addr"], r["remote_port"]) == (Topo.EXT, 5001), r
    # Before the flow was made, nobody held that port.
    before = who(plugin, log, f"{seen['addr']}:{seen['port']}", "--at", str(r["start_ms"] / 1000 - 5))
    assert before.startswith("nobody held"), before


# --- the live exporter, beside netfilter's conntrack events --------------------------------------

N_FLOWS = 10
UDP_PORT = 5003
# The node's conntrack UDP timeouts for the ipMasq yardstick (nf_conntrack_udp_timeout*, per network
# namespace; the kernel's default is 30 s): a flow's DESTROY then comes seconds after its last packet.
CT_UDP_TIMEOUT = 3
CNI_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=u-1"


def ct_fields(line):
    """A `conntrack -E` line as (event, [{src, dst, sport, dport}: original, reply])."""
    tuples, cur = [], {}
    for tok in line.split():
        k, eq, v = tok.partition("=")
        if eq and k in ("src", "dst", "sport", "dport"):
            if k in cur:
                tuples.append(cur)
                cur = {}
            cur[k] = v
    tuples.append(cur)
    return line.split()[0].strip("[]"), tuples


def ct_subscribed(pid):
    """Whether process @pid (`conntrack -E`; `ip netns exec` and stdbuf exec, so it keeps the PID) has a
    NETLINK_NETFILTER socket bound to multicast groups: /proc/PID/net/netlink is its namespace's table."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        rows = open(f"/proc/{pid}/net/netlink").read().splitlines()[1:]
    except (FileNotFoundError, ProcessLookupError):
        return False
    # sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode; NETLINK_NETFILTER is 12, Groups in hex.
    return any(f[1] == "12" and int(f[3], 16) and f"socket:[{f[9]}]" in inodes for f in map(str.split, rows))


def nfdump_flows(data):
    files = sorted(p for p in data.iterdir() if p.name.startswith("nfcapd."))
    assert files, "nfcapd wrote no file"
    dump = subprocess.run(["nfdump", "-R", str(data), "-o", "json"], capture_output=True, text=True, timeout=30)
    assert dump.returncode == 0, dump.stderr
    return json.loads(dump.stdout or "[]")


@pytest.mark.parametrize("masq", ["ebpf-masq", "ipMasq"])
def test_every_pair_a_pod_makes_is_logged_made_and_ended(topo, plugin, tmp_path, lab, masq):
    """A real pod's ten UDP exchanges (default config: each a one-shot flow, 30 s),
    then one more and the pod deleted.
    ebpf-masq: the exporter (`natlog --conf`, the network's natLog: a JSON file and
    an IPFIX collector, nfcapd) logs every pair as a create and a delete (RFC 8158
    natEvent 4/5) with the pod's name, its address and port before NAT and the node
    port the server saw after, the end's reason and counts; nfdump decodes the same
    pairs from the IPFIX stream; `natlog who` names the pod behind one of the ports;
    the pair the deleted pod held is logged ended (pod_deleted) within seconds; the
    exporter stops on SIGTERM with its lease cleared. ipMasq (the yardstick):
    `conntrack -E` in the node shows the same ten flows as NEW and DESTROY with their
    translated ports (the node's own UDP timeouts set short, see CT_UDP_TIMEOUT); it has
    no pod name, and no record of a flow it could not make."""
    srv = topo.ext.server("udp", UDP_PORT)
    log, data = tmp_path / "natlog.json", tmp_path / "nfcapd"
    if masq == "ebpf-masq":
        data.mkdir()
        port = free_udp_port()
        cap = lab.spawn(["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-w", str(data), "-t", "3600"])
        net = topo.masq_network(plugin, natLog={"file": str(log), "ipfix": f"127.0.0.1:{port}"})
        net.env["CNI_ARGS"] = CNI_ARGS
        conflist = net.dir / f"{net.name}.conflist"
        pod = net.add(topo.pod_ns("web"))
        exporter = lab.spawn([plugin, "natlog", "--conf", conflist])
        deadline = time.monotonic() + 10
        while masqcli.events_ctl(topo)["log_until"] <= time.monotonic_ns():
            assert exporter.poll() is None, exporter.stderr.read().decode()
            assert time.monotonic() < deadline, "the exporter never took its lease"
            time.sleep(0.05)
    else:
        net = topo.network([topo.bridge_plugin(ip_masq=True)])
        pod = net.add(topo.pod_ns("web"))
        # The bridge plugin's iptables rules loaded nf_conntrack: its timeouts are the node netns's own.
        for key in ("nf_conntrack_udp_timeout", "nf_conntrack_udp_timeout_stream"):
            topo.node.sysctl(f"net.netfilter.{key}", CT_UDP_TIMEOUT)
        ct_out = tmp_path / "conntrack.txt"
        with open(ct_out, "w") as f:
            ct = topo.node.spawn(["stdbuf", "-oL", "conntrack", "-E", "-p", "udp"], stdout=f)
        deadline = time.monotonic() + 30
        while not ct_subscribed(ct.pid):  # events queue on its socket from then on
            assert ct.poll() is None, ct.stderr.read().decode()
            assert time.monotonic() < deadline, "conntrack -E never joined conntrack's event groups"
            time.sleep(0.05)

    local = []
    for _ in range(N_FLOWS):
        rc, res = pod.ns.client("udp", Topo.EXT, UDP_PORT)
        assert rc == 0, res
        local.append(res["local"][1])
    seen = srv.records("dgram")
    assert len(seen) == N_FLOWS and {r["addr"] for r in seen} == {Topo.NODE_EXT}, seen
    server_ports = sorted(r["port"] for r in seen)

    def ended():
        if masq == "ebpf-masq":
            recs = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
            return recs, sum(r["event"] == "delete" for r in recs)
        recs = [ct_fields(l) for l in ct_out.read_text().splitlines() if l.strip()]
        return recs, sum(ev == "DESTROY" for ev, _ in recs)

    # ebpf-masq: udpOneShot 30 s, then the sweep (every second). netfilter: CT_UDP_TIMEOUT, then its
    # GC worker, which may look only every 60 s (GC_SCAN_INTERVAL_MAX); a dump of the node's table
    # (`conntrack -L`) reaps the entries it finds expired as the worker would, DESTROY events and all.
    # The deadlines only bound a failure.
    t0 = time.monotonic()
    deadline = t0 + (75 if masq == "ebpf-masq" else CT_UDP_TIMEOUT + 60)
    recs, n = ended()
    while n < N_FLOWS and time.monotonic() < deadline:
        time.sleep(1)
        if masq == "ipMasq" and time.monotonic() - t0 > CT_UDP_TIMEOUT:
            topo.node.exec(["conntrack", "-L", "-p", "udp"], check=False)
        recs, n = ended()
    print(f"{masq}: {n} of {N_FLOWS} ends logged {time.monotonic() - t0:.0f} s after the last flow")

    if masq == "ipMasq":
        lab.stop(ct)
        new = {t[0]["sport"]: int(t[1]["dport"]) for ev, t in recs if ev == "NEW" and t[0]["src"] == pod.ip}
        gone = {t[0]["sport"]: int(t[1]["dport"]) for ev, t in recs if ev == "DESTROY" and t[0]["src"] == pod.ip}
        print(f"conntrack -E: {len(new)} NEW, {len(gone)} DESTROY of {N_FLOWS} flows")
        assert sorted(int(p) for p in new) == sorted(local) and sorted(new.values()) == server_ports, recs
        assert gone == new, recs
        return

    creates = [r for r in recs if r["event"] == "create"]
    deletes = [r for r in recs if r["event"] == "delete"]
    print(f"natlog: {len(creates)} create, {len(deletes)} delete of {N_FLOWS} flows")
    for group in (creates, deletes):
        assert sorted(r["pod_port"] for r in group) == sorted(local), recs
        assert sorted(r["nat_port"] for r in group) == server_ports, recs
        for r in group:
            assert (r["namespace"], r["pod"], r["pod_addr"], r["proto"]) == ("shop", "web-0", pod.ip, 17), r
            assert (r["nat_addr"], r["remote_addr"], r["remote_port"]) == (Topo.NODE_EXT, Topo.EXT, UDP_PORT), r
    made = {r["pod_port"]: r for r in creates}
    for d in deletes:
        c = made[d["pod_port"]]
        assert d["nat_port"] == c["nat_port"] and d["start_ms"] == c["start_ms"] <= c["time_ms"], (c, d)
        assert d["reason"] == "expired" and d["time_ms"] - d["start_ms"] >= 29_000, d
        assert d["counts"]["out_packets"] >= 1 and d["counts"]["in_packets"] >= 1, d
    # natlog who: a server-side port, halfway through its pair's life.
    d = deletes[0]
    at = (d["start_ms"] + d["time_ms"]) / 2000
    out = json.loads(who(plugin, log, f"{Topo.NODE_EXT}:{d['nat_port']}", "--at", str(at), "--json"))
    [held] = out["holders"]
    assert (held["record"]["pod"], held["record"]["pod_port"]) == ("web-0", d["pod_port"]), out
    # The pod deleted (CNI DEL flushes its pairs; the programs see nothing of it): a
    # pair it still held is logged ended, pod_deleted, within seconds.
    rc, res = pod.ns.client("udp", Topo.EXT, UDP_PORT)
    assert rc == 0, res
    net.delete(pod.ns)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        last = [json.loads(l) for l in log.read_text().splitlines()][-1]
        if last.get("reason") == "pod_deleted":
            break
        time.sleep(0.5)
    assert (last["event"], last.get("reason"), last["pod_port"]) == ("delete", "pod_deleted", res["local"][1]), last
    assert last["pod"] == "web-0" and last["start_ms"] <= last["time_ms"], last
    # SIGTERM: the exporter stops, its lease cleared, nothing lost on the way.
    exporter.send_signal(signal.SIGTERM)
    assert exporter.wait(10) == 0, exporter.stderr.read().decode()
    assert masqcli.events_ctl(topo)["log_until"] == 0
    assert masqcli.status(topo, plugin)["counters"]["events_lost"] == 0
    # The collector decoded the same pairs (natEvent 4 create, 5 delete).
    lab.stop(cap, signal.SIGTERM)  # nfcapd writes its file when it stops
    flows = [f for f in nfdump_flows(data) if f.get("src4_addr") == pod.ip]
    every = sorted(str(p) for p in [*server_ports, last["nat_port"]])
    for ev in ("4", "5"):
        got = sorted(f["src_xlt_port"] for f in flows if f.get("nat_event_id") == ev)
        assert got == every, (ev, flows)


# --- a collector down or unreachable ----------------------------------------------------------------

COLLECTORS = {
    # Nothing listens on this loopback port: the node's stack answers each message with an
    # ICMP port unreachable (RFC 1122 3.2.2.1), which the connected socket reports.
    "down": "127.0.0.1:{free}",
    # The node has an "unreachable" route to the collector: every send fails at once.
    "unreachable": "198.51.100.7:4739",
}


@pytest.mark.parametrize("collector", sorted(COLLECTORS))
def test_a_collector_down_or_unreachable_loses_no_packet_and_counts_every_record(topo, plugin, tmp_path, collector):
    """The exporter runs in the node with its IPFIX collector down (no listener) or
    unreachable (no route). A real pod's flows (20 UDP exchanges, 5 TCP connections,
    default config) all pass, nothing is dropped and no event is lost: the data plane
    never waits for the exporter, nor the exporter for its socket. The JSON file gets
    every record, and `status` and metrics count each of them as not received by the
    collector (RFC 6888 section 4 asks a CGN to log; over UDP, RFC 7011 section 10.3,
    records may be lost, so the exporter says how many). netfilter has no session log of its
    own to set beside this (ulogd2 is a separate daemon), so there is no yardstick run."""
    addr = COLLECTORS[collector].format(free=free_udp_port())
    if collector == "unreachable":
        topo.node.ip("route", "add", "unreachable", "198.51.100.7/32")
    log = tmp_path / "natlog.json"
    net = topo.masq_network(plugin, natLog={"file": str(log), "ipfix": addr})
    net.env["CNI_ARGS"] = CNI_ARGS
    pod = net.add(topo.pod_ns("web"))
    udp, tcp = topo.ext.server("udp", UDP_PORT), topo.ext.server("tcp", 5004)
    exporter = topo.node.spawn([plugin, "natlog", "--conf", net.dir / f"{net.name}.conflist"], enter=True)
    deadline = time.monotonic() + 10
    while masqcli.status(topo, plugin)["event_leases"]["log"] is None:
        assert exporter.poll() is None, exporter.stderr.read().decode()
        assert time.monotonic() < deadline, "the exporter never took its lease"
        time.sleep(0.05)
    assert masqcli.status(topo, plugin)["event_leases"]["log"]["pid"] > 0

    for proto, n, port in (("udp", 20, UDP_PORT), ("tcp", 5, 5004)):
        for _ in range(n):
            rc, res = pod.ns.client(proto, Topo.EXT, port)
            assert rc == 0, (proto, res)
    assert len(udp.records("dgram")) == 20 and {r["addr"] for r in udp.records("dgram")} == {Topo.NODE_EXT}
    assert len(tcp.records("accept")) == 5

    def lines():
        return [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []

    # Every record written is counted, and (after the exporter's next count) counted not received.
    deadline = time.monotonic() + 15
    while True:
        s = masqcli.status(topo, plugin)
        recs = lines()
        if s["natlog"]["records"] == len(recs) >= 25 and s["natlog"]["ipfix_unsent"] == len(recs):
            break
        assert time.monotonic() < deadline, (s["natlog"], len(recs))
        time.sleep(0.2)
    assert sum(r["event"] == "create" for r in recs) == 25, recs
    assert s["counters"]["events_lost"] == 0 and not any(s["drops"].values()), (s["counters"], s["drops"])
    metrics = masqcli.run(topo, plugin, "metrics").stdout
    assert "ebpf_masq_natlog_exporting 1" in metrics.splitlines(), metrics
    assert f"ebpf_masq_natlog_ipfix_unsent_total {len(recs)}" in metrics.splitlines(), metrics
    # SIGTERM: the exit line says the same; the lease is given up.
    exporter.send_signal(signal.SIGTERM)
    assert exporter.wait(10) == 0
    err = exporter.stderr.read().decode()
    n = len(lines())
    assert f"ebpf-masq natlog: {n} records written (0 of them pairs alive at start); {n} not sent" in err, err
    s = masqcli.status(topo, plugin)
    assert s["event_leases"]["log"] is None and s["natlog"]["ipfix_unsent"] == n, s["natlog"]


def test_an_exporter_stops_loudly_when_an_upgrade_adopts_its_data_plane(topo, plugin, tmp_path, lab):
    """An exporter reading the ring of pin layout N-1 (a binary before an upgrade)
    while the new binary's first ADD adopts that data plane and removes its pins:
    the old ring gets no more events, so the exporter stops within seconds with an
    error naming the pin path (the agent and the systemd unit start it again); it
    never goes on silently writing nothing. Started again, it logs the pair the pod
    made before the upgrade as alive, with the node port the server saw: no hole
    in who held it. (The adoption is this binary's as layout N-1:
    EBPF_MASQ_TEST_AS_LAYOUT, as in test_lifecycle's upgrade tests.)"""
    from lab.abi import LAYOUT
    old_v = LAYOUT - 1
    log = tmp_path / "natlog.json"
    net = topo.masq_network(plugin, natLog={"file": str(log)})
    net.env.update(CNI_ARGS=CNI_ARGS, EBPF_MASQ_TEST_AS_LAYOUT=str(old_v))
    pod = net.add(topo.pod_ns("web"))
    conflist = net.dir / f"{net.name}.conflist"
    old = lab.spawn([plugin, "natlog", "--conf", conflist], env={**os.environ, "EBPF_MASQ_TEST_AS_LAYOUT": str(old_v)})
    deadline = time.monotonic() + 10
    while masqcli.events_ctl(topo, old_v)["log_until"] <= time.monotonic_ns():
        assert old.poll() is None and time.monotonic() < deadline, old.stderr.read().decode()
        time.sleep(0.05)

    def record(event, port, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in ([json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []):
                if r["event"] == event and r["pod_port"] == port:
                    return r
            time.sleep(0.1)
        raise AssertionError(f"no {event} record for pod port {port}")

    srv = topo.ext.server("udp", UDP_PORT)
    rc, res = pod.ns.client("udp", Topo.EXT, UDP_PORT)
    assert rc == 0, res
    [seen] = srv.records("dgram")
    made = record("create", res["local"][1])
    assert (made["nat_port"], made["pod"]) == (seen["port"], "web-0"), made

    # The upgrade: the new binary's first ADD adopts layout N-1 and removes its pins.
    del net.env["EBPF_MASQ_TEST_AS_LAYOUT"]
    net.env["CNI_ARGS"] = CNI_ARGS.replace("web-0", "web-1").replace("u-1", "u-2")
    net.add(topo.pod_ns("web1"))
    assert sorted(os.listdir(topo.lab.pin_path)) == [f"v{LAYOUT}"]
    t = time.monotonic()
    rc = old.wait(10)
    err = old.stderr.read().decode()
    print(f"the old exporter stopped {time.monotonic() - t:.1f} s after the adoption: {err.strip()}")
    assert rc != 0 and f"{topo.lab.pin_path}/v{old_v} is gone" in err, (rc, err)

    new = lab.spawn([plugin, "natlog", "--conf", conflist])
    alive = record("alive", res["local"][1])
    assert (alive["nat_addr"], alive["nat_port"]) == (Topo.NODE_EXT, seen["port"]), alive
    assert (alive["namespace"], alive["pod"]) == ("shop", "web-0"), alive
    # Each exporter carries the programs' clock over to Unix time by its own reading of both clocks.
    assert abs(alive["start_ms"] - made["start_ms"]) <= 5, (made, alive)
    new.send_signal(signal.SIGTERM)
    assert new.wait(10) == 0, new.stderr.read().decode()
