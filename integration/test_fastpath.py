"""fastPath: true — pod flows routed, translated and redirected in BPF (bpf/lib/fastpath*.h).

The correctness tests of test_core.py again with the fast path on, plus proof that the
fast path was taken: its counters move while the node's own forwarding counter
(IpForwDatagrams in /proc/net/snmp of the node netns) stands still. And the cases it
must leave to the stack: a ClusterIP-style DNAT (serviceCIDRs), TTL 1, PMTU discovery
behind a smaller-MTU router, excluded destinations, natOutgoing false.
"""
import json
import os

import pytest

from lab import abi
from lab.masqcli import counters
from lab.duallab import RouterTopo, pod_addrs, probe, route_get
from lab.netlab import LAYOUT, PY, Topo, wait_for

EXT, NATIVE, NODE_IP = Topo.EXT, Topo.NATIVE, Topo.NODE_EXT
ECHO = "icmp[icmptype] = icmp-echo"
FAST = {"fastPath": True}


def forwarded(ns):
    """IpForwDatagrams of the namespace: packets its IP stack forwarded."""
    lines = [l.split() for l in ns.exec(["cat", "/proc/net/snmp"]).stdout.splitlines() if l.startswith("Ip:")]
    head, vals = lines[0], lines[1]
    return int(vals[head.index("ForwDatagrams")])


class Watch:
    """Deltas of the fast-path counters and of the node's forwarding counter over a block."""

    def __init__(self, topo, plugin):
        self.topo, self.plugin = topo, plugin

    def __enter__(self):
        self.c0, self.f0 = counters(self.topo, self.plugin)[0], forwarded(self.topo.node)
        return self

    def __exit__(self, *exc):
        c1 = counters(self.topo, self.plugin)[0]
        self.forwarded = forwarded(self.topo.node) - self.f0
        self.egress = c1["fastpath_egress"] - self.c0["fastpath_egress"]
        self.ingress = c1["fastpath_ingress"] - self.c0["fastpath_ingress"]
        self.fallback = c1["fastpath_fallback"] - self.c0["fastpath_fallback"]

    def assert_fast(self, min_packets):
        assert self.egress >= min_packets and self.ingress >= min_packets, vars(self)
        assert self.forwarded == 0, f"the node's stack forwarded {self.forwarded} packets: {vars(self)}"


def test_ext_sees_node_address_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(**FAST)
    tcp, udp = topo.ext.server("tcp", 5000), topo.ext.server("udp", 5001)
    with Watch(topo, plugin) as w:
        with topo.ext.capture("eth0", ECHO) as cap:
            assert pod.ns.ping(EXT, count=3) == (0, 0.0)
        for srv in (tcp, udp):
            rc, res = pod.ns.client(srv.proto, EXT, srv.port)
            assert rc == 0, res
    assert cap.sources() == {NODE_IP: 3}
    assert tcp.addrs("done") == {NODE_IP}
    assert udp.addrs() == {NODE_IP}
    w.assert_fast(3 + 3)
    # The pairs are the engine's own, marked as the fast path's.
    mine = [e for e in topo.nat_list(plugin) if e["pod_addr"] == pod.ip]
    assert {e["proto"] for e in mine} >= {"tcp", "udp", "icmp"}, mine
    assert all(e["nat_addr"] == NODE_IP for e in mine), mine


def test_fast_path_off_by_default(topo, plugin, masq_pod):
    net, pod = masq_pod()
    topo.ext.server("udp", 5001)
    with Watch(topo, plugin) as w:
        assert pod.ns.ping(EXT, count=3) == (0, 0.0)
        rc, res = pod.ns.client("udp", EXT, 5001)
        assert rc == 0, res
    assert (w.egress, w.ingress, w.fallback) == (0, 0, 0), vars(w)
    assert w.forwarded >= 6


def test_ping_flood_no_loss_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(**FAST)
    with Watch(topo, plugin) as w:
        assert pod.ns.ping(EXT, count=200, interval=0.01) == (0, 0.0)
    w.assert_fast(200)


def test_tcp_50mb_transfer_intact_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(**FAST)
    srv = topo.ext.server("tcp", 5000)
    with Watch(topo, plugin) as w:
        rc, res = pod.ns.client("tcp", EXT, 5000, bytes=50 * 2**20, timeout=60)
    assert rc == 0, res
    [done] = srv.records("done")
    assert (done["addr"], done["bytes"], done["sha256"]) == (NODE_IP, 50 * 2**20, res["sha256"])
    w.assert_fast(10)


def test_iperf3_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(**FAST)
    topo.ext.spawn(["iperf3", "-s", "-1", "-p", 5201])
    wait_for(lambda: topo.ext.exec(["ss", "-Hltn", "sport = :5201"]).stdout.strip(), what="iperf3 server")
    with Watch(topo, plugin) as w:
        p = pod.ns.exec(["iperf3", "-c", EXT, "-p", 5201, "-t", 3, "-J"], check=False, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["end"]["sum_received"]["bytes"] > 0
    w.assert_fast(100)


BOTH_UPLINKS = {"egressInterfaces": ["eth0", "eth1"]}


@pytest.mark.parametrize("keys,seen", [
    ({"nativeRoutingCIDR": "10.10.0.0/24"}, "pod"),
    ({"nonMasqueradeCIDRs": ["10.10.0.0/24"]}, "pod"),
    ({}, Topo.NODE_NATIVE),  # control: no exclusion, masqueraded (fast) to eth1's address
], ids=["nativeRoutingCIDR", "nonMasqueradeCIDRs", "control"])
def test_native_destination_fast(topo, plugin, masq_pod, keys, seen):
    net, pod = masq_pod(**FAST, **BOTH_UPLINKS, **keys)
    seen = pod.ip if seen == "pod" else seen
    tcp, udp = topo.native.server("tcp", 5000), topo.native.server("udp", 5001)
    with Watch(topo, plugin) as w:
        with topo.native.capture("eth0", ECHO) as cap:
            assert pod.ns.ping(NATIVE, count=3) == (0, 0.0)
        for srv in (tcp, udp):
            rc, res = pod.ns.client(srv.proto, NATIVE, srv.port)
            assert rc == 0, res
    assert cap.sources() == {seen: 3}
    assert tcp.addrs("done") == {seen}
    assert udp.addrs() == {seen}
    if seen == pod.ip:  # excluded: the stack forwards it, untranslated
        assert (w.egress, w.ingress) == (0, 0) and w.fallback >= 3 and w.forwarded >= 6, vars(w)
    else:
        w.assert_fast(6)


def test_nat_outgoing_false_sends_pod_ip_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(natOutgoing=False, **FAST)
    udp = topo.ext.server("udp", 5001)
    with Watch(topo, plugin) as w:
        with topo.ext.capture("eth0", ECHO) as cap:
            pod.ns.ping(EXT, count=2)
        pod.ns.client("udp", EXT, 5001, timeout=1)
        wait_for(lambda: udp.records(), what="datagram at ext")
    assert cap.sources() == {pod.ip: 2}
    assert udp.addrs() == {pod.ip}
    assert (w.egress, w.ingress) == (0, 0) and w.forwarded >= 3, vars(w)


@pytest.mark.parametrize("first", ["host", "pod"])
def test_host_socket_unaffected_fast(topo, plugin, masq_pod, first):
    net, pod = masq_pod(**FAST)
    srv = topo.ext.server("tcp", 5000)
    port = 40123
    who = {"host": (topo.node, True), "pod": (pod.ns, False)}
    second = "pod" if first == "host" else "host"
    ns, enter = who[first]
    p1 = ns.client_bg("tcp", EXT, 5000, enter=enter, bind_port=port, hold=2, bytes=100_000)
    wait_for(lambda: srv.records("accept"), what=f"{first} connection at ext")
    ns, enter = who[second]
    p2 = ns.client_bg("tcp", EXT, 5000, enter=enter, bind_port=port, bytes=100_000)
    results = {second: ns.client_result(p2), first: ns.client_result(p1)}
    for name, (rc, res) in results.items():
        assert rc == 0 and res["ok"], (name, res)
    done = srv.records("done")
    assert len(done) == 2 and {d["addr"] for d in done} == {NODE_IP}, done
    ports = {d["port"] for d in done}
    assert len(ports) == 2 and port in ports, done
    assert {d["sha256"] for d in done} == {r["sha256"] for _, r in results.values()}
    assert counters(topo, plugin)[0]["fastpath_egress"] > 0


SPOOF = """
import sys
from scapy.all import IP, UDP, Raw, conf, send
from scapy.supersocket import L3RawSocket
conf.L3socket = L3RawSocket
src, dst, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
send(IP(src=src, dst=dst) / UDP(sport=40000, dport=port) / Raw(b"x" * 32), count=3, inter=0.05, verbose=False)
"""


def test_spoofed_source_dropped_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(**FAST)
    with Watch(topo, plugin) as w:
        with topo.ext.capture("eth0", "udp port 5002") as cap:
            pod.ns.exec([PY, "-c", SPOOF, "10.244.1.99", EXT, 5002])
            pod.ns.exec([PY, "-c", SPOOF, pod.ip, EXT, 5002])
    assert cap.sources() == {NODE_IP: 3}
    assert w.egress == 3, vars(w)
    assert topo.status(plugin)["drops"]["spoofed_source"] == 3


def pod_entries(topo):
    """{pod address: (veth ifindex, the fast path's l3 ifindex)} from pods4, read with bpftool."""
    path = os.path.join(topo.lab.pin_path, f"v{LAYOUT}", "maps", "pods4")
    out = json.loads(topo.node.enter(["bpftool", "-j", "map", "dump", "pinned", path]).stdout)
    btf = abi.btf_of(topo)  # struct pod_info's layout, from the programs' own BTF
    return {".".join(map(str, abi.raw(e["key"]))): (btf.field("pod_info", "ifindex", abi.raw(e["value"])),
                                                    btf.field("pod_info", "l2.l3_ifindex", abi.raw(e["value"])))
            for e in out}


def test_del_cleans_up_fast(topo, plugin, masq_pod):
    net, pod = masq_pod(**FAST)
    topo.ext.server("udp", 5001)
    rc, res = pod.ns.client("udp", EXT, 5001)
    assert rc == 0, res
    ifindex = int(json.loads(topo.node.ip("-j", "link", "show", pod.host_veth).stdout)[0]["ifindex"])
    veth, l3 = pod_entries(topo)[pod.ip]
    assert veth == ifindex and l3 != 0, (veth, l3)
    assert [e for e in topo.nat_list(plugin) if e["pod_addr"] == pod.ip]
    conf = net.plugin_conf(1, pod.result)
    for _ in range(2):
        rc, _, log = topo.run_plugin(plugin, "DEL", conf, pod.ns)
        assert rc == 0, log
    assert topo.node.bpf_hooks(pod.host_veth, "ingress").strip() == ""
    assert [e for e in topo.nat_list(plugin) if e["pod_addr"] == pod.ip] == []
    assert pod.ip not in pod_entries(topo)


SVC_IP = "10.96.0.10"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_cluster_ip_dnat_still_works(topo, plugin, masq_pod, proto):
    """kube-proxy style: PREROUTING DNAT of a service IP to ext. serviceCIDRs keeps those
    flows on the stack (netfilter must DNAT them, and un-DNAT the replies)."""
    net, pod = masq_pod(**FAST, serviceCIDRs=["10.96.0.0/12"])
    srv = topo.ext.server(proto, 5000)
    topo.node.exec(["iptables", "-t", "nat", "-A", "PREROUTING", "-d", SVC_IP, "-p", proto, "--dport", 80,
                    "-j", "DNAT", "--to-destination", f"{EXT}:5000"])
    with Watch(topo, plugin) as w:
        rc, res = pod.ns.client(proto, SVC_IP, 80)
    assert rc == 0, res
    assert srv.addrs("done" if proto == "tcp" else None) == {NODE_IP}
    assert (w.egress, w.ingress) == (0, 0) and w.fallback > 0 and w.forwarded > 0, vars(w)
    # Other destinations are still fast.
    with Watch(topo, plugin) as w:
        rc, res = pod.ns.client(proto, EXT, 5000)
    assert rc == 0, res
    w.assert_fast(1)


def test_ttl_one_left_to_the_stack(topo, plugin, masq_pod):
    """TTL 1: the node must answer time exceeded, as a router; the fast path leaves it."""
    net, pod = masq_pod(**FAST)
    with Watch(topo, plugin) as w:
        res = probe(pod.ns, EXT, 33434, ttl=1, count=2)
    assert res["errors"], res
    assert w.egress == 0 and w.fallback >= 1, vars(w)


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_pmtu_tcp_bulk_fast(lab, plugin, family):
    """Router with a 1280-byte link behind the node: the fast path's flows still learn the
    path MTU (the router's fragmentation needed / packet too big reaches the pod) and the
    transfer completes, for either family."""
    routed = RouterTopo(lab)
    net = routed.masq_network(plugin, **FAST)
    pod = net.add(routed.pod_ns())
    ext, node = (routed.EXT, routed.NODE_EXT) if family == "ipv4" else (routed.EXT6, routed.NODE_EXT6)
    from lab.duallab import settle
    settle(routed.node, routed.ext, pod.ns)
    srv = routed.ext.server("tcp", 5000, family="dual")
    size = 4 * 2**20
    c0 = counters(routed, plugin)[0]
    rc, res = pod.ns.client("tcp", ext, 5000, bytes=size, timeout=60)
    assert rc == 0, res
    [done] = srv.records("done")
    assert (done["addr"], done["bytes"], done["sha256"]) == (node, size, res["sha256"])
    assert "mtu 1280" in route_get(pod.ns, ext)
    c1 = counters(routed, plugin)[0]
    assert c1["fastpath_egress"] > c0["fastpath_egress"], c1
    assert c1["icmp_errors_to_pods"] > c0["icmp_errors_to_pods"], c1
