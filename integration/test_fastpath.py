"""fastPath: true — pod flows routed, translated and redirected in BPF (bpf/lib/fastpath*.h).

test_core.py runs its correctness tests on both paths (its `path` fixture: default, fastpath),
with proof that the fast path was taken: its counters move while the node's own forwarding
counter (IpForwDatagrams in /proc/net/snmp of the node netns) stands still (lab.fastwatch).
Here what is the fast path's alone: off by default, its DEL, and the cases it must leave to
the stack: a ClusterIP-style DNAT (serviceCIDRs), TTL 1, PMTU discovery behind a
smaller-MTU router.
"""
import json
import os

import pytest

from lab import abi
from lab.abi import LAYOUT
from lab.duallab import RouterTopo, probe, route_get
from lab.fastwatch import Watch
from lab.masqcli import counters
from lab.netlab import Topo

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
FAST = {"fastPath": True}


def test_fast_path_off_by_default(topo, plugin, masq_pod):
    net, pod = masq_pod()
    topo.ext.server("udp", 5001)
    with Watch(topo, plugin) as w:
        assert pod.ns.ping(EXT, count=3) == (0, 0.0)
        rc, res = pod.ns.client("udp", EXT, 5001)
        assert rc == 0, res
    assert (w.egress, w.ingress, w.fallback) == (0, 0, 0), vars(w)
    assert w.forwarded >= 6


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
