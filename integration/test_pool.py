"""Address pools: masqueradeAddress with several addresses.

The node owns three addresses on eth0 (10.0.0.5, .6, .7) and lists them in
masqueradeAddress. Four pods, default settings, default path and fastPath: each
pod's flows (TCP to two remote addresses, UDP, ping) all leave with one address
of the pool, the same one every time (paired pooling, RFC 4787 REQ-2), the pods
together use every address, and replies reach each pod. With one fixed address
per source, the same pod port towards one remote endpoint is kept by pods on
different addresses. The bridge plugin's ipMasq (the yardstick) has no pools:
every pod leaves with the node's one address (shown, not asserted).
"""

import pytest

from lab import masqcli
from lab.netlab import Topo

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
POOL = [NODE_IP, "10.0.0.6", "10.0.0.7"]


@pytest.mark.parametrize("fast", [False, True], ids=["default", "fastpath"])
def test_each_pod_keeps_one_address_of_the_pool(topo, plugin, fast):
    for a in POOL[1:]:
        topo.node.ip("addr", "add", f"{a}/24", "dev", "eth0")
    topo.ext.ip("addr", "add", "10.0.0.3/24", "dev", "eth0")  # a second remote address
    net = topo.masq_network(plugin, masqueradeAddress=POOL, fastPath=fast)
    pods = [net.add(topo.pod_ns(f"p{i}")) for i in range(4)]
    tcp, udp = topo.ext.server("tcp", 5000), topo.ext.server("udp", 5001)
    for i, pod in enumerate(pods):
        # (UDP to ext's first address only: peer.py's UDP server answers from that one.)
        assert pod.ns.client("udp", EXT, 5001)[0] == 0, i
        for remote in (EXT, "10.0.0.3"):
            assert pod.ns.client("tcp", remote, 5000)[0] == 0, (i, remote)
        assert pod.ns.ping(EXT, count=2)[1] == 0.0, i
        # Every pod the same port towards one remote endpoint: kept where the addresses differ.
        assert pod.ns.client("udp", EXT, 5001, bind_port=40000)[0] == 0, i
    flows = topo.nat_list(plugin)
    by_pod = {}
    for f in flows:
        by_pod.setdefault(f["pod_addr"], set()).add(f["nat_addr"])
    assert sorted(by_pod) == sorted(p.ip for p in pods), flows
    assert all(len(a) == 1 for a in by_pod.values()), f"a pod left with more than one address: {by_pod}"
    assert set().union(*by_pod.values()) == set(POOL), by_pod
    # The servers saw exactly the pool.
    assert tcp.addrs("done") == set(POOL) and udp.addrs() == set(POOL), (tcp.records(), udp.records())
    kept = [r for r in udp.records("dgram") if r["port"] == 40000]
    assert {r["addr"] for r in kept} == set(POOL), f"port 40000 kept on each address once: {kept}"
    s = topo.status(plugin)
    [eth0] = [u for u in s["uplinks"] if u["name"] == "eth0"]
    assert eth0["pool_v4"] == POOL, eth0
    # explain names the address a pod is paired with, as the data plane chose it.
    for p in pods:
        x = masqcli.explain(topo, plugin, "--src", p.ip, "--dst", EXT, "--proto", "udp", "--dport", "9")
        assert x["address"] in by_pod[p.ip], (p.ip, x)


def test_the_yardstick_has_one_address(topo):
    net = topo.network([topo.bridge_plugin(ip_masq=True)])
    pods = [net.add(topo.pod_ns(f"p{i}")) for i in range(2)]
    udp = topo.ext.server("udp", 5001)
    for p in pods:
        assert p.ns.client("udp", EXT, 5001)[0] == 0
    print(f"iptables MASQUERADE: pods left with {udp.addrs()}")
    assert udp.addrs() == {NODE_IP}
