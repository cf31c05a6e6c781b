"""Dual stack: bridge + host-local with an IPv4 and an IPv6 range + ebpf-masq.

The external host sees the node's IPv6 address for TCP, UDP and ping6, and the
pod's own address for native-routing destinations; IPv4 keeps working at the
same time. Topology: duallab.DualTopo (netlab.Topo plus IPv6 on every link; ext
has no route to the pods' IPv6 range, native routes it via the node).
"""
import ipaddress
import json

import pytest

from lab.duallab import POD_SUBNET6, DualTopo, ping, ping_ok, pod_addrs, same_ip, settle, sources
from lab.fastwatch import forwarded6
from lab.masqcli import counters
from lab.netlab import PY

EXT, NATIVE, NODE_IP, NODE_NATIVE = DualTopo.EXT, DualTopo.NATIVE, DualTopo.NODE_EXT, DualTopo.NODE_NATIVE
EXT6, NATIVE6, NODE6, NODE_NATIVE6 = DualTopo.EXT6, DualTopo.NATIVE6, DualTopo.NODE_EXT6, DualTopo.NODE_NATIVE6
ECHO6 = "icmp6 and ip6[40] == 128"  # echo requests (no extension headers)
MASQ_KEYS = {"nativeRoutingCIDR": ["10.10.0.0/24", "fd00:0:0:10::/64"], "egressInterfaces": ["eth0", "eth1"]}


@pytest.fixture
def dual_pod_keys():
    """conftest's dual_pod with MASQ_KEYS."""
    return MASQ_KEYS


def ip_set(addrs):
    return {ipaddress.ip_address(a) for a in addrs}


def test_add_registers_both_families(dual, plugin, dual_pod):
    net, pod, v4, v6 = dual_pod
    assert ipaddress.ip_address(v4) in ipaddress.ip_network("10.244.1.0/24")
    assert ipaddress.ip_address(v6) in ipaddress.ip_network(POD_SUBNET6)
    s = dual.status(plugin)
    ups = {u["name"]: u for u in s["uplinks"]}
    assert same_ip(ups["eth0"]["masquerade_v4"], NODE_IP) and same_ip(ups["eth0"]["masquerade_v6"], NODE6), ups
    assert same_ip(ups["eth1"]["masquerade_v6"], NODE_NATIVE6), ups
    excl = {x["cidr"]: x["reason"] for x in s["config"]["exclusions"]}
    assert excl.get("fd00:0:0:10::/64") == "nativeRoutingCIDR", excl
    assert excl.get("10.10.0.0/24") == "nativeRoutingCIDR", excl
    assert excl.get("fe80::/10") == "link-local", excl  # masqLinkLocalIPv6 defaults to false
    [mine] = [p for p in s["pods"] if p["veth"] == pod.host_veth]
    assert ip_set(mine["addresses"]) == ip_set([v4, v6]), mine
    assert mine["veth_attached"], mine


def test_ext_sees_node_ipv6_address(dual, dual_pod):
    """TCP, UDP and ping6 from the pod: ext sees fd00:0:0:1::5, never the pod."""
    net, pod, v4, v6 = dual_pod
    tcp, udp = dual.ext.server("tcp", 5000, family="dual"), dual.ext.server("udp", 5001, family="dual")
    with dual.ext.capture("eth0", "ip6 and not src host " + EXT6) as everything, \
            dual.ext.capture("eth0", ECHO6) as echo:
        p = ping(pod.ns, EXT6, count=3)
        assert ping_ok(p, 3), p
        rc, res = pod.ns.client("tcp", EXT6, 5000, bytes=2 * 2**20, timeout=30)
        assert rc == 0, res
        rc, res_udp = pod.ns.client("udp", EXT6, 5001, bytes=1000)
        assert rc == 0, res_udp
    assert sources(echo) == {NODE6: 3}
    [done] = tcp.records("done")
    assert (done["addr"], done["bytes"], done["sha256"]) == (NODE6, 2 * 2**20, res["sha256"])
    assert udp.addrs() == {NODE6}
    srcs = sources(everything)  # all but link-local / unspecified (ND, MLD): nothing from the pod
    routable = {a for a in srcs if not (ipaddress.ip_address(a).is_link_local or ipaddress.ip_address(a).is_unspecified)}
    assert routable == {NODE6}, srcs


def test_native_sees_pod_ipv6_address(dual, dual_pod):
    """fd00:0:0:10::/64 is in nativeRoutingCIDR: native sees the pod; ext still the node."""
    net, pod, v4, v6 = dual_pod
    tcp, udp = dual.native.server("tcp", 5000, family="dual"), dual.native.server("udp", 5001, family="dual")
    ext_udp = dual.ext.server("udp", 5001, family="dual")
    with dual.native.capture("eth0", ECHO6) as cap:
        p = ping(pod.ns, NATIVE6, count=3)
        assert ping_ok(p, 3), p
    assert sources(cap) == {v6: 3}
    for srv in (tcp, udp):
        rc, res = pod.ns.client(srv.proto, NATIVE6, srv.port)
        assert rc == 0, res
    assert tcp.addrs("done") == {v6}
    assert udp.addrs() == {v6}
    rc, res = pod.ns.client("udp", EXT6, 5001)
    assert rc == 0, res
    assert ext_udp.addrs() == {NODE6}


def test_ipv4_and_ipv6_at_the_same_time(dual, plugin, dual_pod):
    """Both families at once, each masqueraded to its own node address; nat list shows both;
    DEL removes the pod's IPv6 pairs along with its IPv4 ones."""
    net, pod, v4, v6 = dual_pod
    tcp, udp = dual.ext.server("tcp", 5000, family="dual"), dual.ext.server("udp", 5001, family="dual")
    mb = 4 * 2**20
    procs = {fam: pod.ns.client_bg("tcp", dst, 5000, bytes=mb, timeout=60) for fam, dst in (("v4", EXT), ("v6", EXT6))}
    p4, p6 = ping(pod.ns, EXT, count=5, interval=0.05), ping(pod.ns, EXT6, count=5, interval=0.05)
    results = {fam: pod.ns.client_result(p, timeout=120) for fam, p in procs.items()}
    assert ping_ok(p4, 5) and ping_ok(p6, 5), (p4, p6)
    for fam, (rc, res) in results.items():
        assert rc == 0 and res["ok"], (fam, res)
    done = {d["addr"]: d for d in tcp.records("done")}
    assert set(done) == {NODE_IP, NODE6}, done
    assert done[NODE_IP]["sha256"] == results["v4"][1]["sha256"]
    assert done[NODE6]["sha256"] == results["v6"][1]["sha256"]
    for dst in (EXT, EXT6):
        rc, res = pod.ns.client("udp", dst, 5001)
        assert rc == 0, res
    assert udp.addrs() == {NODE_IP, NODE6}

    flows = dual.nat_list(plugin)
    mine = [f for f in flows if same_ip(f["pod_addr"], v4) or same_ip(f["pod_addr"], v6)]
    fams = {(f["family"], f["proto"]) for f in mine}
    assert {("ipv4", "tcp"), ("ipv4", "udp"), ("ipv4", "icmp"),
            ("ipv6", "tcp"), ("ipv6", "udp"), ("ipv6", "icmpv6")} <= fams, mine
    for f in mine:
        want = (v4, NODE_IP, EXT) if f["family"] == "ipv4" else (v6, NODE6, EXT6)
        assert all(same_ip(a, b) for a, b in zip((f["pod_addr"], f["nat_addr"], f["remote_addr"]), want)), f
    s = dual.status(plugin)
    assert s["nat_flows_v6"] >= 3 and s["nat_flows_v4"] >= 3, (s["nat_flows_v4"], s["nat_flows_v6"])
    assert s["counters"]["snat_packets_v6"] > 0 and s["counters"]["rnat_packets_v6"] > 0, s["counters"]

    conf = net.plugin_conf(1, pod.result)
    rc, _, log = dual.run_plugin(plugin, "DEL", conf, pod.ns)  # the plugin's DEL alone
    assert rc == 0, log
    left = [f for f in dual.nat_list(plugin) if same_ip(f["pod_addr"], v4) or same_ip(f["pod_addr"], v6)]
    assert left == [], left
    assert all(p["veth"] != pod.host_veth for p in dual.status(plugin)["pods"])
    p = net.delete(pod.ns, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


SPOOF6 = """
import socket, sys
from scapy.all import IPv6, UDP, Raw, raw
src, dst, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)  # our own IPv6 header
for _ in range(3):
    s.sendto(raw(IPv6(src=src, dst=dst) / UDP(sport=40000, dport=port) / Raw(b"x" * 32)), (dst, 0))
"""


def test_spoofed_ipv6_source_dropped(dual, plugin, dual_pod):
    net, pod, v4, v6 = dual_pod
    spoofed = str(ipaddress.ip_address(v6) + 0x99)
    drops_before = counters(dual, plugin)[1]["spoofed_source"]
    with dual.ext.capture("eth0", "udp port 5002") as cap:
        pod.ns.exec([PY, "-c", SPOOF6, spoofed, EXT6, 5002])
        pod.ns.exec([PY, "-c", SPOOF6, v6, EXT6, 5002])  # control: the pod's own address
    assert sources(cap) == {NODE6: 3}
    s = dual.status(plugin)
    assert s["drops"]["spoofed_source"] - drops_before >= 3, s["drops"]
    [mine] = [p for p in s["pods"] if p["veth"] == pod.host_veth]
    assert mine["spoofed_dropped"] >= 3, mine


def link_local(ns, dev, enter=False):
    out = (ns.enter if enter else ns.exec)(["ip", "-6", "-j", "addr", "show", "dev", dev, "scope", "link"]).stdout
    [addr] = [a["local"] for i in json.loads(out) for a in i["addr_info"] if "local" in a]
    return addr


def test_link_local_sources_still_work(dual, plugin, dual_pod):
    """Neighbour discovery and link-local traffic from the pod pass the veth source check."""
    net, pod, v4, v6 = dual_pod
    drops_before = counters(dual, plugin)[1]["spoofed_source"]
    gw_ll, pod_ll = link_local(dual.node, "cni0"), link_local(pod.ns, "eth0")
    pod.ns.ip("-6", "neigh", "flush", "dev", "eth0")
    p = ping(pod.ns, f"{gw_ll}%eth0", count=3)  # link-local source, NS/NA first
    assert ping_ok(p, 3), p
    p = ping(dual.node, f"{pod_ll}%cni0", count=3)  # the pod answers from its link-local address
    assert ping_ok(p, 3), p
    p = ping(pod.ns, EXT6, count=2)  # and its global traffic resolves the gateway as usual
    assert ping_ok(p, 2), p
    neigh = pod.ns.ip("-6", "neigh", "show", "dev", "eth0").stdout
    assert gw_ll in neigh and "lladdr" in neigh, neigh
    s = dual.status(plugin)
    assert s["drops"]["spoofed_source"] == drops_before, s["drops"]
    [mine] = [p for p in s["pods"] if p["veth"] == pod.host_veth]
    assert mine["spoofed_dropped"] == 0, mine


def test_ipv6_fast_path(dual, plugin):
    """fastPath on a dual-stack pod: IPv6 flows to ext are translated and redirected in
    BPF both ways (fast-path counters move, the node's IPv6 forwarding counter stands
    still), ext sees the node's address for TCP, UDP and ping6; the native-routing
    destination is left to the stack and sees the pod; IPv4 keeps working alongside."""
    net = dual.masq_network(plugin, **MASQ_KEYS, fastPath=True)
    pod = net.add(dual.pod_ns())
    v4, v6 = pod_addrs(pod)
    tcp, udp = dual.ext.server("tcp", 5000, family="dual"), dual.ext.server("udp", 5001, family="dual")
    settle(dual.node, dual.ext, pod.ns)
    # Neighbours resolved first: the very first packets may still wait in the stack's queue.
    assert ping_ok(ping(pod.ns, EXT6, count=1), 1)
    c0, f0 = counters(dual, plugin)[0], forwarded6(dual.node)
    with dual.ext.capture("eth0", ECHO6) as echo:
        p = ping(pod.ns, EXT6, count=5)
        assert ping_ok(p, 5), p
        rc, res = pod.ns.client("tcp", EXT6, 5000, bytes=2 * 2**20, timeout=30)
        assert rc == 0 and res["ok"], res
        rc, res_udp = pod.ns.client("udp", EXT6, 5001, bytes=1000)
        assert rc == 0, res_udp
    c1, f1 = counters(dual, plugin)[0], forwarded6(dual.node)
    assert sources(echo) == {NODE6: 5}
    [done] = tcp.records("done")
    assert (done["addr"], done["sha256"]) == (NODE6, res["sha256"])
    assert udp.addrs() == {NODE6}
    d = {k: c1[k] - c0[k] for k in ("fastpath_egress", "fastpath_ingress", "snat_packets_v6")}
    assert d["fastpath_egress"] >= 5 + 3 and d["fastpath_ingress"] >= 5 + 3, d
    print(f"IPv6 fast path: {d}, node forwarded {f1 - f0}")
    assert f1 - f0 == 0, f"the node forwarded {f1 - f0} IPv6 packets itself: {d}"
    # Excluded destination: the stack's, with the pod's own address.
    nat = dual.native.server("udp", 5002, family="dual")
    rc, res = pod.ns.client("udp", NATIVE6, 5002)
    assert rc == 0, res
    assert nat.addrs() == {v6}
    # IPv4 alongside.
    rc, res = pod.ns.client("udp", EXT, 5001)
    assert rc == 0, res
    assert udp.addrs() == {NODE6, NODE_IP}
