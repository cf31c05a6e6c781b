"""`masqueradeRules` end to end, with a real WireGuard tunnel (see wglab.py for the topology).

The reported case: a WireGuard client (192.168.6.1) reaches the node's LAN
(10.0.0.0/24) through the node. ext has no route back to 192.168.6.0/24, so
only masquerade to the node's address makes replies come back. The node runs no
pod: the rule is installed by `ebpf-masq apply --conf FILE`.
"""
import json
from pathlib import Path

import pytest

from lab.netlab import REPO, Topo, prog_count, sh
from lab.wglab import TUNNEL_NET, WgTopo, in_tunnel_net

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
CLIENT, FAR = WgTopo.CLIENT, WgTopo.FAR
ECHO = "icmp[icmptype] = icmp-echo"
RULE = {"source": str(TUNNEL_NET), "outInterface": "eth0"}
EXAMPLE = REPO / "conf/wireguard-rules.conflist"


@pytest.fixture
def wg(lab, plugin):
    return WgTopo(lab)


def tunnel_sources(counter):
    return {a: n for a, n in counter.items() if in_tunnel_net(a)}


def assert_tunnel_masqueraded(wg, seen=NODE_IP, pings=500, interval=0.01, mb=4):
    """Pings, a TCP transfer and a UDP exchange from the tunnel client to ext all work,
    and ext sees only `seen`, never a 192.168.6.0/24 source."""
    tcp, udp = wg.ext.server("tcp", 5000), wg.ext.server("udp", 5001)
    with wg.ext.capture("eth0", "ip") as cap:
        assert wg.client.ping(EXT, count=pings, interval=interval) == (0, 0.0)
        rc, res = wg.client.client("tcp", EXT, 5000, bytes=mb * 2**20, timeout=60)
        assert rc == 0, res
        rc, res_udp = wg.client.client("udp", EXT, 5001)
        assert rc == 0, res_udp
    [done] = tcp.records("done")
    assert (done["addr"], done["bytes"], done["sha256"]) == (seen, mb * 2**20, res["sha256"])
    assert udp.addrs() == {seen}
    srcs = cap.sources()
    assert tunnel_sources(srcs) == {}, srcs
    assert srcs[seen] >= pings, srcs
    assert set(srcs) == {seen, EXT}, srcs


def assert_tunnel_not_masqueraded(wg, count=5):
    """ext gets the client's own address, cannot answer it: every ping is lost."""
    with wg.ext.capture("eth0", ECHO) as cap:
        rc, loss = wg.client.ping(EXT, count=count, interval=0.05)
    assert (rc, loss) == (1, 100.0)
    assert cap.sources() == {CLIENT: count}


def strip_counters(status):
    s = json.loads(json.dumps(status))
    for k in ("counters", "drops", "nat_flows_v4"):
        s.pop(k)
    for group in ("rules", "pods"):
        for item in s[group]:
            for k in ("packets", "bytes", "spoofed_dropped"):
                item.pop(k, None)
    return s


# --- 1. the reported case ---------------------------------------------------------


def test_tunnel_client_masqueraded_by_rule(wg):
    out = wg.apply(wg.masq_conf([RULE])).stdout
    assert "1 rule(s)" in out, out
    assert_tunnel_masqueraded(wg)


def test_no_rule_no_masquerade(wg):
    """Control: same node, same uplink, natOutgoing false, no rule -> untouched."""
    wg.apply(wg.masq_conf(None))
    assert "bpf" in wg.node.bpf_hooks("eth0", "egress")
    assert wg.status()["rules"] == []
    assert_tunnel_not_masqueraded(wg)


def test_rule_removed_by_apply(wg):
    wg.apply(wg.masq_conf([RULE]))
    assert wg.client.ping(EXT, count=5, interval=0.05) == (0, 0.0)
    wg.apply(wg.masq_conf([]))
    assert wg.status()["rules"] == []
    assert_tunnel_not_masqueraded(wg)
    wg.apply(wg.masq_conf([RULE]))
    assert wg.client.ping(EXT, count=5, interval=0.05) == (0, 0.0)


# --- 2. persistence and idempotence ------------------------------------------------


def test_apply_after_reboot(wg):
    conf = wg.write_conf(wg.masq_conf([RULE]))
    wg.apply(conf)
    assert wg.client.ping(EXT, count=20, interval=0.01) == (0, 0.0)

    wg.forget_data_plane()
    assert not Path(wg.lab.pin_path).exists()
    assert "bpf" not in wg.node.bpf_hooks("eth0", "egress") + wg.node.bpf_hooks("eth0", "ingress")
    assert_tunnel_not_masqueraded(wg)

    wg.apply(conf)
    assert wg.client.ping(EXT, count=100, interval=0.005) == (0, 0.0)
    assert wg.status()["rules"][0]["packets"] >= 100


def test_apply_after_pins_lost(wg):
    """Only the pin directory is gone (TCX links go with their pins; in tc mode the
    old programs stay attached with their orphaned maps): apply takes over eth0
    with the new programs, exactly one of them per hook."""
    conf = wg.write_conf(wg.masq_conf([RULE]))
    wg.apply(conf)
    old = wg.node.bpf_hooks("eth0", "egress")
    sh(["rm", "-rf", wg.lab.pin_path])
    wg.apply(conf)
    new = wg.node.bpf_hooks("eth0", "egress")
    assert new != old and prog_count(new) == 1, (old, new)
    assert wg.client.ping(EXT, count=50, interval=0.01) == (0, 0.0)
    assert wg.status()["rules"][0]["packets"] >= 50  # counted by the new programs


def test_apply_idempotent(wg):
    conf = wg.write_conf(wg.masq_conf([{**RULE, "except": ["10.0.99.0/24"]}]))
    wg.apply(conf)
    first, tc_first = wg.status(), wg.node_tc_state()
    wg.apply(conf)
    second, tc_second = wg.status(), wg.node_tc_state()
    assert strip_counters(first) == strip_counters(second)
    assert tc_first == tc_second
    for direction in ("ingress", "egress"):
        filters = wg.node.bpf_hooks("eth0", direction)
        assert prog_count(filters) == 1, filters
    assert_tunnel_masqueraded(wg, pings=50, mb=1)


def test_out_interface_becomes_uplink(wg):
    """eth0 is no egressInterface: the rule alone makes it an SNAT uplink, and
    dropping the rule detaches it again."""
    wg.apply(wg.masq_conf([RULE], egressInterfaces=["eth1"]))
    ups = {u["name"]: u for u in wg.status()["uplinks"]}
    assert set(ups) == {"eth0", "eth1"}, ups
    assert ups["eth0"]["masquerade_v4"] == NODE_IP
    assert_tunnel_masqueraded(wg, pings=50, mb=1)

    wg.apply(wg.masq_conf([], egressInterfaces=["eth1"]))
    assert [u["name"] for u in wg.status()["uplinks"]] == ["eth1"]
    assert "bpf" not in wg.node.bpf_hooks("eth0", "egress") + wg.node.bpf_hooks("eth0", "ingress")
    assert_tunnel_not_masqueraded(wg)


def test_failed_apply_changes_nothing(wg):
    wg.apply(wg.masq_conf([RULE]))
    before, tc_before = strip_counters(wg.status()), wg.node_tc_state()
    p = wg.apply(wg.masq_conf([RULE, {"source": "192.168.7.0/24", "outInterface": "nope0"}]), check=False)
    assert p.returncode != 0
    assert "outInterface" in p.stderr and "nope0" in p.stderr and "code 7" in p.stderr, p.stderr
    assert strip_counters(wg.status()) == before
    assert wg.node_tc_state() == tc_before
    assert wg.client.ping(EXT, count=10, interval=0.02) == (0, 0.0)


# --- 3. rules next to pod masquerade; except; toAddress ----------------------------


def example_plugins(wg):
    """conf/wireguard-rules.conflist's plugins, pointed at this lab's pins and IPAM dir."""
    conflist = json.loads(EXAMPLE.read_text())
    bridge, masq = conflist["plugins"]
    bridge["ipam"]["dataDir"] = str(wg.lab.tmp / "ipam")
    masq["pinPath"] = wg.lab.pin_path
    return conflist, [bridge, masq]


def test_example_conflist_applies(wg):
    conflist, plugins = example_plugins(wg)
    assert conflist["cniVersion"] == "1.0.0"
    assert [p["type"] for p in plugins] == ["bridge", "ebpf-masq"]
    out = wg.apply({**conflist, "plugins": plugins}).stdout
    assert "uplinks [eth0]" in out and "1 rule(s)" in out, out
    [rule] = wg.status()["rules"]
    assert (rule["source"], rule["out_interface"]) == (str(TUNNEL_NET), "eth0")
    assert wg.client.ping(EXT, count=20, interval=0.01) == (0, 0.0)


def test_rules_and_pod_masquerade_coexist(wg, plugin):
    """A pod added by cnitool with the example conflist (natOutgoing true plus the rule)."""
    wg.link_plugin(plugin)
    _, plugins = example_plugins(wg)
    net = wg.network(plugins)
    pod = net.add(wg.pod_ns())
    tcp, udp = wg.ext.server("tcp", 5000), wg.ext.server("udp", 5001)
    with wg.ext.capture("eth0", ECHO) as cap:
        assert pod.ns.ping(EXT, count=50, interval=0.01) == (0, 0.0)
        assert wg.client.ping(EXT, count=50, interval=0.01) == (0, 0.0)
    assert cap.sources() == {NODE_IP: 100}
    for ns in (pod.ns, wg.client):
        for srv, size in ((tcp, 200_000), (udp, 1000)):  # UDP below the tunnel MTU (1420)
            rc, res = ns.client(srv.proto, EXT, srv.port, bytes=size)
            assert rc == 0, (ns.name, res)
    assert tcp.addrs("done") == {NODE_IP} and len(tcp.records("done")) == 2
    assert udp.addrs() == {NODE_IP} and len(udp.records()) == 2

    flows = wg.nat_flows()
    by_src = {}
    for f in flows:
        by_src.setdefault(f["pod_addr"], set()).add(f["by_rule"])
    assert by_src == {pod.ip: {None}, CLIENT: {0}}, flows

    # `apply` of the same conflist on the running node leaves the pod working.
    wg.apply(net.dir / f"{net.name}.conflist")
    assert pod.ns.ping(EXT, count=5, interval=0.05) == (0, 0.0)
    assert wg.client.ping(EXT, count=5, interval=0.05) == (0, 0.0)
    s = wg.status()
    assert [p["addresses"] for p in s["pods"]] == [[pod.ip]]
    assert len(s["rules"]) == 1


def test_rule_ignores_native_and_non_masquerade_cidrs(wg):
    """nativeRoutingCIDR / nonMasqueradeCIDRs are pod exclusions: a rule still masquerades
    to destinations inside them."""
    wg.apply(wg.masq_conf([RULE], nativeRoutingCIDR="10.0.0.0/24", nonMasqueradeCIDRs=["10.0.0.0/8"]))
    assert_tunnel_masqueraded(wg, pings=50, mb=1)


def test_rule_except(wg):
    """except 10.0.0.0/24: ext (given a route back) sees the tunnel address itself;
    ext's other address outside the except list is still masqueraded."""
    wg.ext_route_back()
    wg.far_address()
    wg.apply(wg.masq_conf([{**RULE, "except": ["10.0.0.0/24"]}]))
    tcp = wg.ext.server("tcp", 5000)  # TCP: ext answers from the address it was asked on
    with wg.ext.capture("eth0", ECHO) as cap:
        assert wg.client.ping(EXT, count=10, interval=0.02) == (0, 0.0)
        assert wg.client.ping(FAR, count=10, interval=0.02) == (0, 0.0)
    echo = cap.packets()
    from scapy.all import IP
    pairs = {(p[IP].src, p[IP].dst) for p in echo}
    assert pairs == {(CLIENT, EXT), (NODE_IP, FAR)}, pairs
    for host in (EXT, FAR):
        rc, res = wg.client.client("tcp", host, 5000, bytes=100_000)
        assert rc == 0, (host, res)
    assert sorted(r["addr"] for r in tcp.records("done")) == sorted([CLIENT, NODE_IP])
    [rule] = wg.status()["rules"]
    assert rule["except"] == ["10.0.0.0/24"]
    assert all(f["remote_addr"] != EXT for f in wg.nat_flows())


def test_rule_to_address(wg):
    wg.node.ip("addr", "add", "10.0.0.50/24", "dev", "eth0")  # secondary, so replies arrive
    wg.apply(wg.masq_conf([{**RULE, "toAddress": "10.0.0.50"}]))
    [rule] = wg.status()["rules"]
    assert rule["to_address"] == "10.0.0.50"
    assert_tunnel_masqueraded(wg, seen="10.0.0.50", pings=100, mb=1)
    assert {f["nat_addr"] for f in wg.nat_flows()} == {"10.0.0.50"}


def test_rule_on_wireguard_device(wg, plugin):
    """outInterface = the wireguard-go TUN device (link/none, an L3 uplink): a pod
    (natOutgoing false) reaches the tunnel client as the node's tunnel address,
    while its traffic to ext stays un-NATed."""
    wg.link_plugin(plugin)
    dev = wg.node_wg.name
    net = wg.network([wg.bridge_plugin(), wg.masq_entry(
        natOutgoing=False, egressInterfaces=["eth0"],
        masqueradeRules=[{"source": "10.244.1.0/24", "outInterface": dev}])])
    pod = net.add(wg.pod_ns())
    ups = {u["name"]: u for u in wg.status()["uplinks"]}
    assert (ups[dev]["l3"], ups[dev]["masquerade_v4"]) == (True, WgTopo.NODE_WG), ups

    tcp = wg.client.server("tcp", 5000)
    with wg.client.capture(wg.client_wg.name, ECHO) as cap:
        assert pod.ns.ping(CLIENT, count=50, interval=0.01) == (0, 0.0)
    assert cap.sources() == {WgTopo.NODE_WG: 50}
    rc, res = pod.ns.client("tcp", CLIENT, 5000, bytes=2 * 2**20, timeout=60)
    assert rc == 0, res
    [done] = tcp.records("done")
    assert (done["addr"], done["sha256"]) == (WgTopo.NODE_WG, res["sha256"])
    assert {f["by_rule"] for f in wg.nat_flows()} == {0}

    with wg.ext.capture("eth0", ECHO) as cap:
        pod.ns.ping(EXT, count=2)  # not ours: ext sees the pod and cannot answer
    assert cap.sources() == {pod.ip: 2}


# --- 4. status and nat list ---------------------------------------------------------


def test_status_and_nat_list(wg):
    wg.apply(wg.masq_conf([RULE]))
    [before] = wg.status()["rules"]
    assert (before["packets"], before["bytes"]) == (0, 0)
    assert_tunnel_masqueraded(wg, pings=20, mb=1)

    s = wg.status()
    [rule] = s["rules"]
    assert rule["id"] == 0
    assert (rule["source"], rule["out_interface"], rule["except"], rule["to_address"]) == \
        (str(TUNNEL_NET), "eth0", [], None)
    assert rule["packets"] >= 20 + 1 + 1  # pings, UDP, TCP (egress packets through the rule)
    assert rule["bytes"] > 2**20
    [up] = s["uplinks"]
    assert (up["name"], up["masquerade_v4"], up["egress_attached"], up["ingress_attached"]) == \
        ("eth0", NODE_IP, True, True)
    assert s["pods"] == []

    flows = [f for f in wg.nat_flows() if f["pod_addr"] == CLIENT]
    assert {f["proto"] for f in flows} >= {"icmp", "tcp", "udp"}, flows
    for f in flows:
        assert (f["by_rule"], f["nat_addr"], f["remote_addr"]) == (0, NODE_IP, EXT), f
    assert any(f["proto"] == "tcp" and f["packets"] > 500 and f["reply_packets"] > 0 for f in flows), flows

    text = wg.cli("status", "--pin-path", wg.lab.pin_path).stdout
    assert f"source {TUNNEL_NET} out eth0" in text, text


# --- fragments and path MTU over the tunnel ---------------------------------------------


def test_fragmented_udp_from_tunnel(wg):
    """A datagram above the tunnel MTU: the client fragments it, every fragment is
    masqueraded. ext's echo (DF set, 1428 bytes) does not fit the node's wg link: the
    node's fragmentation-needed must quote ext's own packet (translated back to the
    NAT address/port) so ext learns the path MTU; its next reply arrives fragmented."""
    wg.apply(wg.masq_conf([RULE]))
    udp = wg.ext.server("udp", 5001)
    for _ in range(3):
        rc, res = wg.client.client("udp", EXT, 5001, bytes=1400, timeout=2)  # 1428 > 1420: fragmented
        if rc == 0:
            break
    st = wg.status()
    assert rc == 0, (res, st["counters"], st["drops"])
    assert udp.addrs() == {NODE_IP}
    assert st["drops"]["fragment_without_state"] == 0
    assert st["counters"]["fragments_translated"] >= 2, st["counters"]  # out and back
    assert st["counters"]["icmp_errors_outward"] >= 1, st["counters"]   # the node's frag-needed
