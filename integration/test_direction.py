"""Flow direction: connections a remote opens to a pod are answered untranslated.

A host outside nativeRoutingCIDR that routes the pod CIDR via the node (an
external load balancer in IP-target mode, a BGP peer) opens TCP, UDP and ping to
a pod; the pod's replies must leave with the pod's own address, as with the
bridge plugin's iptables MASQUERADE (conntrack saw the connection begin outside),
while the pod's own flows to that same host are still masqueraded. RFC 4787
REQ-1's premise: only flows that begin inside get a mapping. Run side by side for
the bridge plugin's ipMasq (iptables), ebpf-masq and ebpf-masq with fastPath,
IPv4 and IPv6, default pod and node settings. The same for a tunnel client that
a masqueradeRules entry covers.
"""

import pytest

from lab import masqcli
from lab.duallab import POD_SUBNET6, DualTopo, ping, ping_ok, pod_addrs, same_ip
from lab.netlab import POD_SUBNET

EXT, NODE_IP, EXT6, NODE6 = DualTopo.EXT, DualTopo.NODE_EXT, DualTopo.EXT6, DualTopo.NODE_EXT6
MASQ_KEYS = {"nativeRoutingCIDR": ["10.10.0.0/24", "fd00:0:0:10::/64"], "egressInterfaces": ["eth0", "eth1"]}
MODES = {"iptables": None, "ebpf-masq": {}, "ebpf-masq-fastpath": {"fastPath": True}}


@pytest.fixture(params=list(MODES))
def routed(request, lab, plugin):
    """(mode, DualTopo, pod, v4, v6): ext routes the pod ranges via the node."""
    topo = DualTopo(lab)
    keys = MODES[request.param]
    if keys is None:
        net = topo.network([topo.bridge_plugin(ip_masq=True)])
    else:
        net = topo.masq_network(plugin, **MASQ_KEYS, **keys)
    pod = net.add(topo.pod_ns())
    v4, v6 = pod_addrs(pod)
    topo.ext.ip("route", "add", POD_SUBNET, "via", NODE_IP)
    topo.ext.ip("-6", "route", "add", POD_SUBNET6, "via", NODE6)
    return request.param, topo, pod, v4, v6


def test_remote_opens_tcp_udp_and_ping_to_a_pod(routed, plugin):
    mode, topo, pod, v4, v6 = routed
    tcp, udp = pod.ns.server("tcp", 8080, family="dual"), pod.ns.server("udp", 8081, family="dual")
    failures = []
    for fam, addr, remote in (("v4", v4, EXT), ("v6", v6, EXT6)):
        for srv in (tcp, udp):
            rc, res = topo.ext.client(srv.proto, addr, srv.port, timeout=5)
            if rc != 0:
                failures.append(f"{srv.proto} {fam}: {res}")
        p = ping(topo.ext, addr, count=3)
        if not ping_ok(p, 3):
            failures.append(f"ping {fam}: {p.stdout}")
    assert not failures, f"{mode}: flows begun outside failed: {failures}"
    # No translation on the way in either: the pod saw the remote's own address.
    assert {a for a in tcp.addrs("done")} == {EXT, EXT6}, tcp.records()
    assert {a for a in udp.addrs()} == {EXT, EXT6}, udp.records()

    # The pod's own flows to the same remote are still masqueraded.
    out_tcp = topo.ext.server("tcp", 5000, family="dual")
    for addr in (EXT, EXT6):
        rc, res = pod.ns.client("tcp", addr, 5000)
        assert rc == 0, (mode, res)
    seen = out_tcp.addrs("done")
    assert any(same_ip(a, NODE_IP) for a in seen) and any(same_ip(a, NODE6) for a in seen), (mode, seen)

    if mode == "iptables":
        return
    s = topo.status(plugin)
    assert s["counters"]["inbound_flows_tracked"] >= 6, s["counters"]
    assert s["counters"]["inbound_packets_untranslated"] > 0, s["counters"]
    flows = topo.nat_list(plugin)
    inbound = [f for f in flows if f["inbound"]]
    assert {(f["proto"], f["family"]) for f in inbound} >= {
        ("tcp", "ipv4"), ("udp", "ipv4"), ("icmp", "ipv4"), ("tcp", "ipv6"), ("udp", "ipv6"), ("icmpv6", "ipv6")
    }, inbound
    for f in inbound:
        assert f["nat_addr"] == f["pod_addr"] and f["nat_port"] == f["pod_port"], f
        assert f["complete"], f
    assert s["nat_pairs_incomplete"] == 0, s
    # explain says why the pod's reply is not masqueraded.
    [t] = [f for f in inbound if f["proto"] == "tcp" and f["family"] == "ipv4"]
    x = masqcli.explain(topo, plugin, "--src", v4, "--dst", EXT, "--proto", "tcp", "--sport", t["pod_port"],
                        "--dport", t["remote_port"], "--out", "eth0")
    assert (x["verdict"], x["code"], x["source_seen"]) == ("untouched", "inbound_flow", v4), x


@pytest.mark.parametrize("mode", ["iptables", "ebpf-masq"])
def test_remote_opens_flows_to_a_tunnel_client_covered_by_a_rule(lab, plugin, mode):
    """The WireGuard client 192.168.6.1 is masqueraded out eth0 by a rule (iptables:
    one MASQUERADE rule for its range); ext routes the tunnel range via the node
    and opens TCP, UDP and ping to the client: answered with the client's address."""
    from lab.wglab import TUNNEL_NET, WgTopo
    wg = WgTopo(lab)
    if mode == "iptables":
        wg.node.enter(["iptables", "-t", "nat", "-A", "POSTROUTING", "-s", str(TUNNEL_NET), "-o", "eth0",
                       "-j", "MASQUERADE"])
    else:
        wg.apply(wg.masq_conf([{"source": str(TUNNEL_NET), "outInterface": "eth0"}]))
    wg.ext_route_back()
    tcp, udp = wg.client.server("tcp", 8080), wg.client.server("udp", 8081)
    for srv in (tcp, udp):
        rc, res = wg.ext.client(srv.proto, wg.CLIENT, srv.port, timeout=5)
        assert rc == 0, (mode, srv.proto, res)
    assert wg.ext.ping(wg.CLIENT, count=3) == (0, 0.0), mode
    assert tcp.addrs("done") == {EXT} and udp.addrs() == {EXT}, (tcp.records(), udp.records())
    # The client's own flows are still masqueraded.
    out = wg.ext.server("tcp", 5000)
    rc, res = wg.client.client("tcp", EXT, 5000)
    assert rc == 0, (mode, res)
    assert out.addrs("done") == {NODE_IP}, out.records()
    if mode == "ebpf-masq":
        inbound = [f for f in wg.nat_flows() if f["inbound"]]
        assert {f["proto"] for f in inbound} == {"tcp", "udp", "icmp"}, inbound
        assert all(f["pod_addr"] == wg.CLIENT and f["by_rule"] == 0 for f in inbound), inbound
