"""The node's own sockets share the port space with masqueraded flows, safely.

ebpf-masq hands out 1024-65535 (less nodePortRange) as iptables MASQUERADE does,
and reserves nothing from the host. Side by side with the bridge plugin's ipMasq
(iptables, the yardstick) and with fastPath, default pod and node settings:

- A pod's connection holds node port P towards ext:5000 (its own port, kept:
  RFC 4787 REQ-3). The host then connects from P to ext:5000 too (its connect()
  cannot know the pod's tuple): the host connection works and reaches ext from
  another port, and the pod's connection completes (netfilter remaps the clashing
  local flow the same way). Nobody's reply is misdelivered.
- A host listener (kubelet's 10250) and a host UDP socket (WireGuard's 51820):
  a pod that uses those ports as its own source ports is not given them on the
  node (iptables MASQUERADE is: it looks at conntrack, not at sockets), and the
  host's listener still answers ext.
- A pod source port inside nodePortRange (default 30000-32767) is never kept.
"""
import json

import pytest

from lab.netlab import Topo, wait_for

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
MODES = {"iptables": None, "ebpf-masq": {}, "ebpf-masq-fastpath": {"fastPath": True}}


@pytest.fixture(params=list(MODES))
def node(request, topo, plugin):
    keys = MODES[request.param]
    net = topo.network([topo.bridge_plugin(ip_masq=True)]) if keys is None else topo.masq_network(plugin, **keys)
    return request.param, topo, net.add(topo.pod_ns())


def test_a_host_flow_on_a_pods_tuple_is_remapped_and_both_work(node, plugin):
    mode, topo, pod = node
    srv = topo.ext.server("tcp", 5000)
    held = pod.ns.client_bg("tcp", EXT, 5000, bind_port=40000, hold=4, bytes=20000)
    wait_for(lambda: len(srv.records("accept")) == 1, timeout=10, what="the pod's connection")
    [first] = srv.records("accept")
    assert (first["addr"], first["port"]) == (NODE_IP, 40000), (mode, first)
    # The host, from the same port to the same endpoint, while the pod's connection is open.
    rc, res = topo.node.client("tcp", EXT, 5000, bind_port=40000, bytes=20000, timeout=10)
    assert rc == 0, (mode, res)
    rc, res = topo.node.client_result(held)
    assert rc == 0, (mode, "the pod's connection broke", res)
    done = srv.records("done")
    assert len(done) == 2 and all(r["bytes"] == 20000 for r in done), (mode, done)
    ports = sorted(r["port"] for r in done)
    assert {r["addr"] for r in done} == {NODE_IP} and len(set(ports)) == 2 and 40000 in ports, (mode, done)
    if MODES[mode] is not None:
        s = topo.status(plugin)
        assert s["counters"]["host_flows_remapped"] >= 1, s["counters"]
        assert not any(s["drops"].values()), s["drops"]


def test_host_listeners_and_bound_udp_ports_are_not_handed_to_pods(node, plugin):
    mode, topo, pod = node
    kubelet = topo.node.server("tcp", 10250)
    wireguard = topo.node.server("udp", 51820)
    tcp, udp = topo.ext.server("tcp", 5000), topo.ext.server("udp", 5001)
    assert pod.ns.client("tcp", EXT, 5000, bind_port=10250)[0] == 0
    assert pod.ns.client("udp", EXT, 5001, bind_port=51820)[0] == 0
    seen = {"tcp": tcp.records("done")[0]["port"], "udp": udp.records("dgram")[0]["port"]}
    print(f"{mode}: the pod's 10250/tcp and 51820/udp left as node ports {seen}")
    # The host's own sockets still answer ext (a new connection, its own tuple).
    assert topo.ext.client("tcp", NODE_IP, 10250)[0] == 0
    assert topo.ext.client("udp", NODE_IP, 51820)[0] == 0
    assert {r["addr"] for r in kubelet.records("done")} == {EXT}
    assert {r["addr"] for r in wireguard.records("dgram")} == {EXT}
    if MODES[mode] is None:
        return  # the yardstick hands them out (printed above)
    assert seen["tcp"] != 10250 and seen["udp"] != 51820, (mode, seen)
    s = topo.status(plugin)
    assert s["counters"]["host_socket_ports_avoided"] >= 2, s["counters"]


def test_a_pod_port_inside_the_node_port_range_is_not_kept(node):
    mode, topo, pod = node
    srv = topo.ext.server("udp", 5001)
    assert pod.ns.client("udp", EXT, 5001, bind_port=31000)[0] == 0
    assert pod.ns.client("udp", EXT, 5001, bind_port=45000)[0] == 0
    ports = [r["port"] for r in srv.records("dgram")]
    print(f"{mode}: pod ports 31000 and 45000 left as {ports}")
    if MODES[mode] is None:
        return  # iptables keeps 31000 (it knows no NodePort range)
    assert not 30000 <= ports[0] <= 32767 and 1024 <= ports[0] <= 65535, (mode, ports)
    assert ports[1] == 45000, (mode, "a pod's ephemeral port is kept", ports)


def test_a_pods_host_port_is_not_handed_out(topo, plugin):
    """hostPorts (portmap's DNAT; no socket) reach ebpf-masq as runtimeConfig
    portMappings, the capability its chained entry declares (here through
    cnitool's CAP_ARGS, as libcni passes them): while the pod is there no
    masqueraded flow gets that node port; its DEL gives the port back."""
    net = topo.masq_network(plugin, capabilities={"portMappings": True})
    web = topo.pod_ns("web")
    env = {**net.env, "CAP_ARGS": json.dumps({"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp"}]})}
    topo.node.enter(["cnitool", "add", net.name, web.path], env=env)
    net.pods.append(web)
    [w] = [p for p in topo.status(plugin)["pods"] if p["host_ports"]]
    assert sorted(w["host_ports"]) == ["5353/udp", "8080/tcp"], w
    client = net.add(topo.pod_ns("client"))
    tcp, udp = topo.ext.server("tcp", 5000), topo.ext.server("udp", 5001)
    assert client.ns.client("tcp", EXT, 5000, bind_port=8080)[0] == 0
    assert client.ns.client("udp", EXT, 5001, bind_port=5353)[0] == 0
    seen = (tcp.records("done")[0]["port"], udp.records("dgram")[0]["port"])
    assert seen[0] != 8080 and seen[1] != 5353, seen
    # The pod goes: so do its hostPorts; another pod's own 8080 is kept again.
    topo.node.enter(["cnitool", "del", net.name, web.path], env=env)
    net.pods.remove(web)
    assert all(not p["host_ports"] for p in topo.status(plugin)["pods"])
    other = net.add(topo.pod_ns("other"))
    assert other.ns.client("tcp", EXT, 5000, bind_port=8080)[0] == 0
    assert tcp.records("done")[-1]["port"] == 8080, tcp.records()
