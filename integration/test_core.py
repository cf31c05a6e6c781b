"""Core behaviour of the ebpf-masq chained plugin (see README.md for the topology).

A test that takes `path` runs twice: on the default path (the node's stack forwards, ebpf-masq
translates on the uplink) and with fastPath (test_fastpath.py has what is the fast path's
alone); on the fast path it also proves the path was taken (lab.fastwatch.Watch)."""
import json
import os
from pathlib import Path

import pytest

from lab.fastwatch import Watch
from lab.netlab import PY, Topo, wait_for

EXT, NATIVE, NODE_IP = Topo.EXT, Topo.NATIVE, Topo.NODE_EXT
ECHO = "icmp[icmptype] = icmp-echo"
NAT_KEYS = {"proto", "pod_addr", "pod_port", "nat_addr", "nat_port", "remote_addr", "remote_port"}


@pytest.fixture(params=[{}, {"fastPath": True}], ids=["default", "fastpath"])
def path(request):
    """The ebpf-masq keys of the path under test: none (the default path) or fastPath."""
    return request.param


def test_add_prints_prev_result_unchanged(topo, plugin):
    net = topo.network([topo.bridge_plugin()])
    pod = net.add(topo.pod_ns())
    conf = net.plugin_conf(topo.masq_entry(), pod.result)
    rc, out, log = topo.run_plugin(plugin, "ADD", conf, pod.ns)
    assert rc == 0, log
    assert out == pod.result
    rc, _, log = topo.run_plugin(plugin, "DEL", conf, pod.ns)
    assert rc == 0, log


def ping_tcp_udp(topo, plugin, pod, remote, addr):
    """Three pings, a TCP and a UDP exchange from @pod to @addr in namespace @remote, watched
    (lab.fastwatch.Watch): (watch, {source: pings}, TCP sources, UDP sources) as @remote saw them."""
    tcp, udp = remote.server("tcp", 5000), remote.server("udp", 5001)
    with Watch(topo, plugin) as w:
        with remote.capture("eth0", ECHO) as cap:
            assert pod.ns.ping(addr, count=3) == (0, 0.0)
        for srv in (tcp, udp):
            rc, res = pod.ns.client(srv.proto, addr, srv.port)
            assert rc == 0, res
    return w, cap.sources(), tcp.addrs("done"), udp.addrs()


def test_ext_sees_node_address(topo, plugin, masq_pod, path):
    net, pod = masq_pod(**path)
    w, pings, tcp, udp = ping_tcp_udp(topo, plugin, pod, topo.ext, EXT)
    assert (pings, tcp, udp) == ({NODE_IP: 3}, {NODE_IP}, {NODE_IP})
    if path:
        w.assert_fast(3 + 3)
        # The pairs are the engine's own, marked as the fast path's.
        mine = [e for e in topo.nat_list(plugin) if e["pod_addr"] == pod.ip]
        assert {e["proto"] for e in mine} >= {"tcp", "udp", "icmp"}, mine
        assert all(e["nat_addr"] == NODE_IP for e in mine), mine


def test_ping_flood_no_loss(topo, plugin, masq_pod, path):
    net, pod = masq_pod(**path)
    with Watch(topo, plugin) as w:
        assert pod.ns.ping(EXT, count=200, interval=0.01) == (0, 0.0)
    if path:
        w.assert_fast(200)


def test_tcp_50mb_transfer_intact(topo, plugin, masq_pod, path):
    net, pod = masq_pod(**path)
    srv = topo.ext.server("tcp", 5000)
    with Watch(topo, plugin) as w:
        rc, res = pod.ns.client("tcp", EXT, 5000, bytes=50 * 2**20, timeout=60)
    assert rc == 0, res
    [done] = srv.records("done")
    assert (done["addr"], done["bytes"], done["sha256"]) == (NODE_IP, 50 * 2**20, res["sha256"])
    if path:
        w.assert_fast(10)


def test_iperf3(topo, plugin, masq_pod, path):
    net, pod = masq_pod(**path)
    topo.ext.spawn(["iperf3", "-s", "-1", "-p", 5201])
    wait_for(lambda: topo.ext.exec(["ss", "-Hltn", "sport = :5201"]).stdout.strip(), what="iperf3 server")
    with Watch(topo, plugin) as w:
        p = pod.ns.exec(["iperf3", "-c", EXT, "-p", 5201, "-t", 3, "-J"], check=False, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["end"]["sum_received"]["bytes"] > 0
    if path:
        w.assert_fast(100)


BOTH_UPLINKS = {"egressInterfaces": ["eth0", "eth1"]}  # so only the exclusion keeps the pod IP


@pytest.mark.parametrize("keys,seen", [
    ({"nativeRoutingCIDR": "10.10.0.0/24"}, "pod"),
    ({"nonMasqueradeCIDRs": ["10.10.0.0/24"]}, "pod"),
    ({}, Topo.NODE_NATIVE),  # control: no exclusion, masqueraded to eth1's address
], ids=["nativeRoutingCIDR", "nonMasqueradeCIDRs", "control"])
def test_native_destination(topo, plugin, masq_pod, path, keys, seen):
    net, pod = masq_pod(**path, **BOTH_UPLINKS, **keys)
    seen = pod.ip if seen == "pod" else seen
    ext_udp = topo.ext.server("udp", 5001)
    w, pings, tcp, udp = ping_tcp_udp(topo, plugin, pod, topo.native, NATIVE)
    assert (pings, tcp, udp) == ({seen: 3}, {seen}, {seen})
    if path and seen == pod.ip:  # excluded: the stack forwards it, untranslated
        assert (w.egress, w.ingress) == (0, 0) and w.fallback >= 3 and w.forwarded >= 6, vars(w)
    elif path:
        w.assert_fast(6)
    rc, res = pod.ns.client("udp", EXT, 5001)  # everything else is still masqueraded
    assert rc == 0, res
    assert ext_udp.addrs() == {NODE_IP}


def test_nat_outgoing_false_sends_pod_ip(topo, plugin, masq_pod, path):
    net, pod = masq_pod(natOutgoing=False, **path)
    udp = topo.ext.server("udp", 5001)
    with Watch(topo, plugin) as w:
        with topo.ext.capture("eth0", ECHO) as cap:
            pod.ns.ping(EXT, count=2)  # fails: ext has no route back to the pod range
        pod.ns.client("udp", EXT, 5001, timeout=1)
        wait_for(lambda: udp.records(), what="datagram at ext")
    assert cap.sources() == {pod.ip: 2}
    assert udp.addrs() == {pod.ip}
    assert (w.egress, w.ingress) == (0, 0) and w.forwarded >= 3, vars(w)  # the stack's, on either path


@pytest.mark.parametrize("first", ["host", "pod"])
def test_host_socket_unaffected(topo, plugin, masq_pod, path, first):
    """A node socket and a pod socket, same source port, same destination, open at once."""
    net, pod = masq_pod(**path)
    srv = topo.ext.server("tcp", 5000)
    port = 40123  # inside the node's ephemeral range, so a real host socket could hold it
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
    assert len(ports) == 2 and port in ports, done  # the host socket's port is untouched
    assert {d["sha256"] for d in done} == {r["sha256"] for _, r in results.values()}
    if path:
        assert topo.status(plugin)["counters"]["fastpath_egress"] > 0


SPOOF = """
import sys
from scapy.all import IP, UDP, Raw, conf, send
from scapy.supersocket import L3RawSocket
conf.L3socket = L3RawSocket  # kernel routing, our own IP header
src, dst, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
send(IP(src=src, dst=dst) / UDP(sport=40000, dport=port) / Raw(b"x" * 32), count=3, inter=0.05, verbose=False)
"""


def test_spoofed_source_dropped(topo, plugin, masq_pod, path):
    net, pod = masq_pod(**path)
    with Watch(topo, plugin) as w:
        with topo.ext.capture("eth0", "udp port 5002") as cap:
            pod.ns.exec([PY, "-c", SPOOF, "10.244.1.99", EXT, 5002])
            pod.ns.exec([PY, "-c", SPOOF, pod.ip, EXT, 5002])  # control: the pod's own address
    assert cap.sources() == {NODE_IP: 3}
    assert topo.status(plugin)["drops"]["spoofed_source"] == 3
    if path:
        assert w.egress == 3, vars(w)


def test_an_address_handed_to_a_new_pod_is_spoofed_from_the_old_pods_veth(topo, plugin, path):
    """A pod whose DEL never came keeps its veth and its registration; when IPAM hands its
    address to a new pod, the new pod takes the address over: packets from it through the old
    pod's veth are dropped as spoofed (the veth program's per-veth entry lets go of it, not only
    pods4), and the new pod's are masqueraded (with the fast path on too)."""
    static = {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
              "ipam": {"type": "static", "addresses": [{"address": "10.244.1.50/24", "gateway": "10.244.1.1"}],
                       "routes": [{"dst": "0.0.0.0/0"}]}}
    topo.link_plugin(plugin)
    net = topo.network([static, topo.masq_entry(**path)])
    old, new = net.add(topo.pod_ns("old")), net.add(topo.pod_ns("new"))
    assert old.ip == new.ip == "10.244.1.50" and old.host_veth != new.host_veth

    def status():
        return topo.status(plugin)

    spoofed0 = {p["veth"]: p["spoofed_dropped"] for p in status()["pods"]}
    with topo.ext.capture("eth0", "udp port 5002") as cap:
        old.ns.exec([PY, "-c", SPOOF, old.ip, EXT, 5002])
        new.ns.exec([PY, "-c", SPOOF, new.ip, EXT, 5002])
    assert cap.sources() == {NODE_IP: 3}
    spoofed = {p["veth"]: p["spoofed_dropped"] - spoofed0[p["veth"]] for p in status()["pods"]}
    assert spoofed == {old.host_veth: 3, new.host_veth: 0}, spoofed
    # CHECK says so: the old pod's address is another veth's now.
    p = net.cnitool("check", old.ns, check=False)
    assert p.returncode != 0 and "10.244.1.50 is registered to another veth" in p.stdout + p.stderr, p
    p = net.cnitool("check", new.ns, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


UPLINK_HOOKS = [("eth0", "egress", "masq_up_egress"), ("eth0", "ingress", "masq_up_ingress")]


def hooks_of(topo, pods):
    return {(dev, d): topo.node.hook_progs(dev, d)
            for dev, d, _ in UPLINK_HOOKS + [(p.host_veth, "ingress", None) for p in pods]}


def want_hooks(pods, uplink_kind, pod_kinds):
    want = {(dev, d): [(uplink_kind, name)] for dev, d, name in UPLINK_HOOKS}
    want.update({(p.host_veth, "ingress"): [(k, "masq_veth_in")] if k else [] for p, k in zip(pods, pod_kinds)})
    return want


def assert_masqueraded(topo, pods, port):
    srv = topo.ext.server("udp", port)
    for p in pods:
        rc, res = p.ns.client("udp", EXT, port)
        assert rc == 0, res
    assert srv.addrs() == {NODE_IP}


def test_uplink_with_a_large_ifindex(topo, plugin, masq_pod):
    """The programs find an uplink by its uplinks_direct slot when its ifindex is
    below 4096, and in the `uplinks` hash beyond: here eth0 is recreated with
    ifindex 5000 and pods are masqueraded on it both ways (ext has no route back)."""
    topo.node.ip("link", "del", "eth0")
    topo.node.ip("link", "add", "eth0", "index", "5000", "type", "veth", "peer", "name", "eth0", "netns", topo.ext.name)
    for ns, cidr in ((topo.node, f"{NODE_IP}/24"), (topo.ext, f"{EXT}/24")):
        ns.ip("addr", "add", cidr, "dev", "eth0")
        ns.ip("link", "set", "eth0", "up")
    topo.node.ip("route", "add", "default", "via", EXT, "dev", "eth0")
    net, pod = masq_pod()
    st = topo.status(plugin)
    assert [u["ifindex"] for u in st["uplinks"]] == [5000], st["uplinks"]
    with topo.ext.capture("eth0", ECHO) as cap:
        assert pod.ns.ping(EXT, count=3) == (0, 0.0)
    assert cap.sources() == {NODE_IP: 3}


def test_default_attach_modes(topo, plugin, masq_pod):
    """Uplinks: one TCX program per hook, no tc layer (no clsact qdisc) in the
    path. The pod veth: a tc filter (a TCX attach would make every ADD wait for
    an RCU grace period)."""
    net, pod = masq_pod()
    assert hooks_of(topo, [pod]) == want_hooks([pod], "tcx", ["tc"])
    assert "clsact" not in topo.node.enter(["tc", "qdisc", "show", "dev", "eth0"]).stdout
    st = topo.status(plugin)
    [up] = st["uplinks"]
    assert (up["egress_attach_mode"], up["ingress_attach_mode"]) == ("tcx", "tcx"), up
    assert (st["pods"][0]["veth_attached"], st["pods"][0]["veth_attach_mode"]) == (True, "tc"), st["pods"]


def test_tc_attach_mode_and_takeover_by_tcx(topo, plugin):
    """EBPF_MASQ_ATTACH=tc (what a kernel without TCX gets) attaches tc filters
    only; =tcx then takes the uplink over (and attaches the new pod's veth with
    TCX) without running a program twice, and DEL removes whichever kind a pod has."""
    net = topo.masq_network(plugin)
    net.env["EBPF_MASQ_ATTACH"] = "tc"
    a = net.add(topo.pod_ns("a"))
    assert hooks_of(topo, [a]) == want_hooks([a], "tc", ["tc"])
    st = topo.status(plugin)
    assert st["uplinks"][0]["egress_attach_mode"] == "tc" and st["pods"][0]["veth_attached"], st
    assert_masqueraded(topo, [a], 5001)
    rc, _, log = topo.run_plugin(plugin, "CHECK", net.plugin_conf(1, a.result), a.ns)
    assert rc == 0, log

    net.env["EBPF_MASQ_ATTACH"] = "tcx"
    b = net.add(topo.pod_ns("b"))
    assert hooks_of(topo, [a, b]) == want_hooks([a, b], "tcx", ["tc", "tcx"])
    assert_masqueraded(topo, [a, b], 5002)
    rc, _, log = topo.run_plugin(plugin, "CHECK", net.plugin_conf(1, b.result), b.ns)
    assert rc == 0, log
    for pod in (a, b):  # the plugin's DEL alone, so the veths survive to be inspected
        rc, _, log = topo.run_plugin(plugin, "DEL", net.plugin_conf(1, pod.result), pod.ns)
        assert rc == 0, log
    assert hooks_of(topo, [a, b]) == want_hooks([a, b], "tcx", [None, None])


def test_kernel_without_tcx_gets_tc_filters_then_tcx_after_an_upgrade(topo, plugin):
    """A kernel without TCX (before 6.6: Debian 12, RHEL 9), simulated by a
    seccomp filter that answers BPF_LINK_CREATE and BPF_PROG_QUERY with EINVAL
    as those kernels do (oldkernel.py): the first load, a warm ADD, CHECK and
    status all find out by themselves and use tc filters, traffic is
    masqueraded, no link is pinned. After an "upgrade" (no filter) the next ADD
    moves the uplinks to TCX with one program per hook, and DEL leaves nothing."""
    from lab import oldkernel

    net = topo.masq_network(plugin)
    net.preexec = oldkernel.without_tcx
    a = net.add(topo.pod_ns("a"))  # the node's first load
    b = net.add(topo.pod_ns("b"))  # warm: attach from the pins
    assert hooks_of(topo, [a, b]) == want_hooks([a, b], "tc", ["tc", "tc"])
    pinned_links = sorted(p.name for p in Path(topo.lab.pin_path).rglob("*") if p.parent.name == "links")
    assert pinned_links == [], pinned_links
    assert_masqueraded(topo, [a, b], 5003)
    for pod in (a, b):
        rc, _, log = topo.run_plugin(plugin, "CHECK", net.plugin_conf(1, pod.result), pod.ns,
                                     preexec=oldkernel.without_tcx)
        assert rc == 0, log
    st = topo.status(plugin, preexec_fn=oldkernel.without_tcx)
    assert [(u["egress_attach_mode"], u["ingress_attach_mode"]) for u in st["uplinks"]] == [("tc", "tc")], st
    assert {p["veth_attach_mode"] for p in st["pods"]} == {"tc"}, st["pods"]

    net.preexec = None  # the kernel now has TCX
    c = net.add(topo.pod_ns("c"))
    assert hooks_of(topo, [a, b, c]) == want_hooks([a, b, c], "tcx", ["tc", "tc", "tc"])
    assert_masqueraded(topo, [a, b, c], 5004)
    for pod in (a, b, c):
        rc, _, log = topo.run_plugin(plugin, "DEL", net.plugin_conf(1, pod.result), pod.ns)
        assert rc == 0, log
    assert hooks_of(topo, [a, b, c]) == want_hooks([a, b, c], "tcx", [None, None, None])


def test_tc_mode_after_tcx_leaves_one_program_per_hook(topo, plugin):
    """EBPF_MASQ_ATTACH=tc on a node attached with TCX: the uplink moves to a tc
    filter and its TCX link goes, so no packet meets the program twice."""
    net = topo.masq_network(plugin)
    net.env["EBPF_MASQ_ATTACH"] = "tcx"
    a = net.add(topo.pod_ns("a"))
    net.env["EBPF_MASQ_ATTACH"] = "tc"
    b = net.add(topo.pod_ns("b"))
    assert hooks_of(topo, [a, b]) == want_hooks([a, b], "tc", ["tcx", "tc"])
    assert_masqueraded(topo, [a, b], 5003)


def test_del_twice_cleans_up(topo, plugin, masq_pod):
    net, pod = masq_pod()
    topo.ext.server("udp", 5001)
    rc, res = pod.ns.client("udp", EXT, 5001)
    assert rc == 0, res
    entries = topo.nat_list(plugin)
    assert all(NAT_KEYS <= e.keys() for e in entries), entries
    mine = [e for e in entries if e["pod_addr"] == pod.ip]
    assert any(e["nat_addr"] == NODE_IP and e["remote_addr"] == EXT and int(e["remote_port"]) == 5001
               for e in mine), entries

    conf = net.plugin_conf(1, pod.result)
    for _ in range(2):  # the plugin's DEL alone, so the veth survives to be inspected
        rc, _, log = topo.run_plugin(plugin, "DEL", conf, pod.ns)
        assert rc == 0, log
    assert topo.node.bpf_hooks(pod.host_veth, "ingress").strip() == ""
    assert [e for e in topo.nat_list(plugin) if e["pod_addr"] == pod.ip] == []
    for _ in range(2):  # the whole chain through cnitool
        p = net.delete(pod.ns, check=False)
        assert p.returncode == 0, p.stdout + p.stderr


def test_add_del_add(topo, masq_pod):
    net, pod = masq_pod()
    net.delete(pod.ns)
    pod = net.add(pod.ns)
    udp = topo.ext.server("udp", 5001)
    rc, res = pod.ns.client("udp", EXT, 5001)
    assert rc == 0, res
    assert udp.addrs() == {NODE_IP}


BAD_CONFIGS = [
    ("natOutgoingg", {"natOutgoingg": True}),
    ("natOutgoing", {"natOutgoing": "yes"}),
    ("nativeRoutingCIDR", {"nativeRoutingCIDR": "10.0.0.1/33"}),
    ("nativeRoutingCIDR", {"nativeRoutingCIDR": "10.0.0.1/8"}),
    ("nativeRoutingCIDR", {"nativeRoutingCIDR": 42}),
    ("portRange", {"portRange": "5000-4000"}),
    ("portRange", {"portRange": "abc"}),
    ("portRange", {"portRange": "0-10"}),
    ("portRange", {"portRange": "1000-70000"}),
    ("egressInterfaces", {"egressInterfaces": [""]}),
    ("egressInterfaces", {"egressInterfaces": "eth0"}),
    ("masqueradeAddress", {"masqueradeAddress": "not-an-ip"}),
    ("pinPath", {"pinPath": "relative/dir"}),
    ("logLevel", {"logLevel": "loud"}),
    ("masqueradeRules", {"masqueradeRules": [{"source": "x"}]}),
    ("masqueradeRules", {"masqueradeRules": [{"source": "10.0.0.0/8"}]}),
    ("masqueradeRules", {"masqueradeRules": {"source": "10.0.0.0/8", "outInterface": "eth0"}}),
    ("nonMasqueradeCIDRs", {"nonMasqueradeCIDRs": "10.0.0.0/8"}),
    ("nonMasqueradeCIDRs", {"nonMasqueradeCIDRs": ["10.0.0.0/8", "bogus"]}),
    ("natMaxEntries", {"natMaxEntries": 5}),
    ("natMaxEntries", {"natMaxEntries": -1}),
]


@pytest.mark.parametrize("key,keys", BAD_CONFIGS, ids=[f"{k}={list(v.values())[0]}" for k, v in BAD_CONFIGS])
def test_bad_config_rejected(topo, plugin, key, keys):
    net = topo.network([topo.bridge_plugin()])
    pod = net.add(topo.pod_ns())  # a real prevResult
    before = topo.node_tc_state()
    conf = net.plugin_conf(topo.masq_entry(**keys), pod.result)
    rc, out, log = topo.run_plugin(plugin, "ADD", conf, pod.ns, cwd=topo.lab.tmp)
    assert rc != 0, log
    assert out and out.get("code") == 7, log
    assert key in out.get("msg", ""), out
    assert not os.path.exists(topo.lab.pin_path)
    assert not (topo.lab.tmp / "relative").exists()
    assert topo.node_tc_state() == before


def test_bad_config_fails_cnitool_add(topo, plugin):
    topo.link_plugin(plugin)
    net = topo.network([topo.bridge_plugin(), topo.masq_entry(natOutgoing="yes")])
    p = net.cnitool("add", topo.pod_ns(), check=False)
    assert p.returncode != 0, p.stdout
    assert "natOutgoing" in p.stdout + p.stderr
    assert not os.path.exists(topo.lab.pin_path)
    assert all("bpf" not in ing + eg for _, ing, eg in topo.node_tc_state().values())
