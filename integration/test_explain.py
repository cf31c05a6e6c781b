"""`ebpf-masq explain` agrees with what real packets get.

One node for the whole module (netlab.Topo plus extras), built once:

  pod  10.244.1.x  net A (bridge cni0), natOutgoing true
  pod2 10.244.2.x  net B (bridge cni1), natOutgoing false
  tun  192.168.6.1 a non-pod source behind node's veth tun0 (192.168.6.254), default via the node
  node eth0 10.0.0.5 -> ext    10.0.0.2, 10.0.0.200 (rule except), 169.254.1.2 (link-local)
       eth1 10.10.0.5 -> native 10.10.0.2 (nativeRoutingCIDR), 10.20.0.2 (nonMasqueradeCIDRs),
                                10.30.0.2 (excluded from nothing)
  both eth0 and eth1 are uplinks; rule 0: 192.168.6.0/24 out eth0, except 10.0.0.200/32

For every case: `explain --json` in the node, then a real packet, captured where it
arrives; the verdict (masqueraded or not, and the source address seen) must match.
"""
import os
import secrets

import pytest

from lab import masqcli, netlab
from lab.netlab import PY, Topo

EXT, NATIVE, NODE_IP, NODE_NATIVE = Topo.EXT, Topo.NATIVE, Topo.NODE_EXT, Topo.NODE_NATIVE
EXT_EXCEPT, EXT_LL = "10.0.0.200", "169.254.1.2"
NATIVE_NONMASQ, NATIVE_OTHER = "10.20.0.2", "10.30.0.2"
TUN, TUN_GW = "192.168.6.1", "192.168.6.254"
RULE = {"source": "192.168.6.0/24", "outInterface": "eth0", "except": [f"{EXT_EXCEPT}/32"]}
NODE_KEYS = {  # node-wide keys: every network's entry carries the same, only natOutgoing differs
    "egressInterfaces": ["eth0", "eth1"],
    "nativeRoutingCIDR": "10.10.0.0/24",
    "nonMasqueradeCIDRs": ["10.20.0.0/24"],
    "masqueradeRules": [RULE],
}


class World:
    def __init__(self, lab, plugin):
        self.lab, self.plugin = lab, plugin
        self.topo = topo = Topo(lab)
        topo.ext.ip("addr", "add", f"{EXT_EXCEPT}/24", "dev", "eth0")
        topo.ext.ip("addr", "add", f"{EXT_LL}/16", "dev", "eth0")
        for a in (NATIVE_NONMASQ, NATIVE_OTHER):
            topo.native.ip("addr", "add", f"{a}/24", "dev", "eth0")
            topo.node.ip("route", "add", a.rsplit(".", 1)[0] + ".0/24", "via", NATIVE, "dev", "eth1")
        self.tun = lab.netns("tun")
        lab.veth(topo.node, "tun0", f"{TUN_GW}/24", self.tun, "eth0", f"{TUN}/24")
        self.tun.ip("route", "add", "default", "via", TUN_GW)

        topo.link_plugin(plugin)
        net_a = topo.network([topo.bridge_plugin(), topo.masq_entry(natOutgoing=True, **NODE_KEYS)])
        bridge_b = topo.bridge_plugin()
        bridge_b["bridge"] = "cni1"
        bridge_b["ipam"] = {**bridge_b["ipam"], "subnet": "10.244.2.0/24"}
        net_b = topo.network([bridge_b, topo.masq_entry(natOutgoing=False, **NODE_KEYS)])
        self.pod = net_a.add(topo.pod_ns("pod"))
        self.pod2 = net_b.add(topo.pod_ns("pod2"))

    def explain(self, src, dst, proto, *extra, check=True):
        return masqcli.explain(self.topo, self.plugin, "--src", src, "--dst", dst, "--proto", proto, *extra,
                               check=check)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = netlab.plugin_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"ebpf-masq binary not found at {path}: build it with `cargo build --release`", pytrace=False)
    lab = netlab.Lab(tmp_path_factory.mktemp("explain"))
    try:
        yield World(lab, path)
    finally:
        lab.close()


def ping(ns, dst, src=None, ident=None):
    cmd = ["ping", "-n", "-q", "-c", 2, "-i", 0.2, "-W", 1]
    if src:
        cmd += ["-I", src]
    if ident is not None:
        cmd += ["-e", ident]
    ns.exec([*cmd, dst], check=False, timeout=30)


UDP_SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[3])))
for _ in range(2):
    s.sendto(b"explain", (sys.argv[1], int(sys.argv[2])))
"""

RAW_SEND = """
import sys
from scapy.all import IP, Raw, conf, send
from scapy.supersocket import L3RawSocket
conf.L3socket = L3RawSocket
send(IP(dst=sys.argv[1], proto=int(sys.argv[2])) / Raw(b"x" * 24), count=2, inter=0.05, verbose=False)
"""


# (id, who sends, destination, explain protocol args, how to send, where it arrives, expected code)
# who: "pod" | "pod2" | "tun" | "node" | "node-from-eth1" | "pod-reply"
CASES = [
    ("pod-ext-icmp", "pod", EXT, ["icmp"], "ping", "ext", "pod"),
    ("pod-ext-udp", "pod", EXT, ["udp", "--dport", "5301"], "udp", "ext", "pod"),
    ("pod-other-uplink", "pod", NATIVE_OTHER, ["icmp"], "ping", "native", "pod"),
    ("native-routing", "pod", NATIVE, ["icmp"], "ping", "native", "native_routing"),
    ("non-masquerade", "pod", NATIVE_NONMASQ, ["udp", "--dport", "5302"], "udp", "native", "non_masquerade"),
    ("link-local", "pod", EXT_LL, ["icmp"], "ping", "ext", "link_local"),
    ("nat-outgoing-false", "pod2", EXT, ["icmp"], "ping", "ext", "nat_outgoing_false"),
    ("rule", "tun", EXT, ["icmp"], "ping", "ext", "rule"),
    ("rule-udp", "tun", EXT, ["udp", "--dport", "5303"], "udp", "ext", "rule"),
    ("rule-except", "tun", EXT_EXCEPT, ["icmp"], "ping", "ext", "rule_except"),
    ("host-own-traffic", "node", EXT, ["icmp"], "ping", "ext", "host_traffic"),
    ("unregistered-source", "node-from-eth1", EXT, ["icmp"], "ping", "ext", "not_pod"),
    ("not-an-uplink", "pod", TUN, ["icmp"], "ping", "tun", "not_uplink"),
    # native pings the pod; the pod's echo replies leave by eth1: untouched, to a destination
    # the policy masquerades because the ping is a flow begun outside, to an excluded one
    # because it is excluded (explained after the ping, with its identifier)
    ("echo-reply", "pod-reply", NATIVE_OTHER, ["icmp", "--icmp-type", "0"], "pinged", "native", "inbound_flow"),
    ("echo-reply-excluded", "pod-reply", NATIVE, ["icmp", "--icmp-type", "0"], "pinged", "native", "native_routing"),
    # GRE: masqueraded by address alone; DCCP: still refused
    ("pod-ext-gre", "pod", EXT, ["47"], "raw", "ext", "pod"),
    ("unsupported-protocol", "pod", EXT, ["33"], "raw", "ext", "unsupported_protocol"),
]


def source_of(w, who):
    return {"pod": w.pod.ip, "pod2": w.pod2.ip, "tun": TUN, "node": NODE_IP,
            "node-from-eth1": NODE_NATIVE, "pod-reply": w.pod.ip}[who]


def sender(w, who):
    return {"pod": w.pod.ns, "pod2": w.pod2.ns, "tun": w.tun, "node": w.topo.node,
            "node-from-eth1": w.topo.node}[who]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_explain_matches_real_packets(world, case):
    w = world
    _, who, dst, proto_args, how, where, code = case
    src = source_of(w, who)
    proto, *extra = proto_args
    sport = str(40000 + secrets.randbelow(20000))
    if how == "udp":
        extra += ["--sport", sport]
    ident = 1000 + secrets.randbelow(30000)
    if how == "pinged":  # explained after the ping: its state decides
        extra += ["--sport", str(ident)]
    else:
        x = w.explain(src, dst, proto, *extra)
        assert x["code"] == code, x
        assert x["family"] == "ipv4"

    rx = {"ext": w.topo.ext, "native": w.topo.native, "tun": w.tun}[where]
    if how == "udp":  # the source port changes when masqueraded; the destination port is the case's own
        flt = f"udp and dst port {extra[extra.index('--dport') + 1]} and dst host {dst}"
    elif how == "pinged":
        flt = f"icmp[icmptype] = icmp-echoreply and dst host {dst}"
    elif how == "raw":
        flt = f"ip proto {proto} and dst host {dst}"
    else:
        flt = f"icmp[icmptype] = icmp-echo and dst host {dst}"
    with rx.capture("eth0", flt) as cap:
        if how == "ping":
            ping(sender(w, who), dst, src=NODE_NATIVE if who == "node-from-eth1" else None)
        elif how == "udp":
            sender(w, who).exec([PY, "-c", UDP_SEND, dst, extra[extra.index("--dport") + 1], sport])
        elif how == "raw":
            sender(w, who).exec([PY, "-c", RAW_SEND, dst, proto])
        elif how == "pinged":  # the destination pings the pod: the pod's echo replies leave by eth1
            with w.pod.ns.capture("eth0", f"icmp[icmptype] = icmp-echoreply and dst host {dst}") as at_pod:
                ping(w.topo.native, w.pod.ip, src=dst, ident=ident)
            assert at_pod.sources()[w.pod.ip] >= 1, "the pod did not answer"
    seen = cap.sources()
    if how == "pinged":
        x = w.explain(src, dst, proto, *extra)
        assert x["code"] == code, x

    if x["verdict"] == "drop":
        assert seen == {}, (x, seen)
        return
    assert x["verdict"] == ("masquerade" if x["masqueraded"] else "untouched"), x
    expect = x["address"] if x["masqueraded"] else src
    assert x["source_seen"] == expect, x
    assert set(seen) == {expect} and seen[expect] >= 1, (x["reason"], seen)
    if x["masqueraded"]:
        assert expect != src


def test_reasons_read(world):
    """The reasons name what matched, as the issue asks."""
    w = world
    cases = [
        ((w.pod.ip, EXT, "icmp"), f"masqueraded to {NODE_IP} (pod registration of "),
        ((w.pod.ip, NATIVE_OTHER, "icmp"), f"masqueraded to {NODE_NATIVE} (pod registration of "),
        ((TUN, EXT, "udp"), f"masqueraded to {NODE_IP} by rule 0 (source 192.168.6.0/24 out eth0)"),
        ((TUN, EXT_EXCEPT, "udp"), f"not masqueraded: destination {EXT_EXCEPT} is in rule 0's except list ({EXT_EXCEPT}/32)"),
        ((w.pod.ip, NATIVE, "udp"), "not masqueraded: destination in nativeRoutingCIDR 10.10.0.0/24"),
        ((w.pod.ip, NATIVE_NONMASQ, "udp"), "not masqueraded: destination in nonMasqueradeCIDRs 10.20.0.0/24"),
        ((w.pod.ip, EXT_LL, "udp"), "link-local 169.254.0.0/16 (masqLinkLocal is false)"),
        ((w.pod2.ip, EXT, "udp"), "not masqueraded: natOutgoing is false for pod "),
        # Inside the node's pod range (learned from the pods' /24) but no pod's: a pod
        # whose ADD never reached ebpf-masq, dropped; outside it, not ours.
        (("10.244.1.250", EXT, "udp"), "dropped (drops.unregistered_pod): 10.244.1.250 is in the node's pod range 10.244.1.0/24"),
        (("10.244.9.250", EXT, "udp"), "not masqueraded: source not a registered pod and no rule matches"),
        ((w.pod.ip, TUN, "udp"), "not an uplink: untouched"),
        ((NODE_IP, EXT, "udp"), "host's own traffic"),
    ]
    for args, reason in cases:
        x = w.explain(*args)
        assert reason in x["reason"], (args, x)
    x = w.explain(w.pod2.ip, EXT, "udp")
    cid = netlab.cnitool_container_id(w.pod2.ns.path)
    assert x["reason"].endswith(f"{cid}/eth0"), x
    assert x["pod"]["container_id"] == cid and x["pod"]["nat_outgoing"] is False
    assert x["out_interface"] == {"ifindex": x["out_interface"]["ifindex"], "name": "eth0", "chosen_by": "route"}
    x = w.explain(w.pod.ip, EXT, "udp", "--out", "eth1")
    assert (x["out_interface"]["name"], x["out_interface"]["chosen_by"], x["address"]) == ("eth1", "--out", NODE_NATIVE)


def test_existing_flow(world):
    """After a first datagram, explain reports the flow and its port, and the next
    datagram of that tuple leaves with exactly that address and port."""
    w = world
    sport, dport = 41000 + secrets.randbelow(1000), 5310
    w.pod.ns.exec([PY, "-c", UDP_SEND, EXT, dport, sport])
    x = w.explain(w.pod.ip, EXT, "udp", "--sport", sport, "--dport", dport)
    assert x["code"] == "existing_flow", x
    assert x["address"] == NODE_IP and isinstance(x["port"], int), x
    assert f"existing flow to {NODE_IP}:{x['port']}" in x["reason"], x
    with w.topo.ext.capture("eth0", f"udp and dst port {dport}") as cap:
        w.pod.ns.exec([PY, "-c", UDP_SEND, EXT, dport, sport])
    from scapy.all import IP, UDP
    got = {(p[IP].src, p[UDP].sport) for p in cap.packets() if UDP in p}
    assert got == {(NODE_IP, x["port"])}, (x, got)
    # Without the ports: the flow is not looked up; the policy answers.
    x = w.explain(w.pod.ip, EXT, "udp")
    assert x["code"] == "pod" and any("not checked" in t for t in x["trace"]), x


def test_text_output_and_errors(world, tmp_path):
    w = world
    p = masqcli.run(w.topo, w.plugin, "explain", "--src", TUN, "--dst", EXT)
    assert "verdict: MASQUERADE to 10.0.0.5" in p.stdout, p.stdout
    assert "by rule 0" in p.stdout and "checks:" in p.stdout, p.stdout
    p = masqcli.run(w.topo, w.plugin, "explain", "--src", TUN, "--dst", EXT, pin_path=tmp_path, check=False)
    assert p.returncode == 1 and "no data plane" in p.stderr, p.stderr
    p = w.explain(w.pod.ip, "2001:db8::1", "udp", check=False)
    assert p.returncode == 1 and "same address family" in p.stderr, p.stderr
    p = w.explain(w.pod.ip, EXT, "udp", "--out", "nosuchif0", check=False)
    assert p.returncode == 1 and "nosuchif0" in p.stderr, p.stderr


UDP6_SEND = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("::", int(sys.argv[3])))
for _ in range(2):
    s.sendto(b"explain6", (sys.argv[1], int(sys.argv[2])))
"""


def test_explain_ipv6_matches_real_packets(lab, plugin):
    """IPv6 through the same checks (pods6, excl6, nat6): duallab.DualTopo, a dual-stack pod."""
    from lab.duallab import DualTopo, pod_addrs
    from scapy.all import IPv6, UDP

    dual = DualTopo(lab)
    net = dual.masq_network(plugin, egressInterfaces=["eth0", "eth1"],
                            nativeRoutingCIDR=["10.10.0.0/24", "fd00:0:0:10::/64"])
    pod = net.add(dual.pod_ns())
    _, pod6 = pod_addrs(pod)

    def explain(dst, proto, *extra):
        return masqcli.explain(dual, plugin, "--src", pod6, "--dst", dst, "--proto", proto, *extra)

    def sources6(cap):
        return {p[IPv6].src for p in cap.packets() if IPv6 in p}

    # Masqueraded to the node's IPv6 address, a new flow; then that flow, port included.
    sport, dport = 42000 + secrets.randbelow(1000), 5320
    x = explain(DualTopo.EXT6, "udp", "--sport", sport, "--dport", dport)
    assert (x["family"], x["code"], x["address"]) == ("ipv6", "pod", DualTopo.NODE_EXT6), x
    with dual.ext.capture("eth0", f"ip6 and udp dst port {dport}") as cap:
        pod.ns.exec([PY, "-c", UDP6_SEND, DualTopo.EXT6, dport, sport])
    assert sources6(cap) == {DualTopo.NODE_EXT6}
    x = explain(DualTopo.EXT6, "udp", "--sport", sport, "--dport", dport)
    assert (x["code"], x["address"]) == ("existing_flow", DualTopo.NODE_EXT6), x
    assert f"existing flow to [{DualTopo.NODE_EXT6}]:{x['port']}" in x["reason"], x
    with dual.ext.capture("eth0", f"ip6 and udp dst port {dport}") as cap:
        pod.ns.exec([PY, "-c", UDP6_SEND, DualTopo.EXT6, dport, sport])
    assert {(p[IPv6].src, p[UDP].sport) for p in cap.packets() if UDP in p} == {(DualTopo.NODE_EXT6, x["port"])}

    # nativeRoutingCIDR (IPv6): the pod's own address.
    x = explain(DualTopo.NATIVE6, "icmp")
    assert (x["code"], x["masqueraded"]) == ("native_routing", False), x
    assert "nativeRoutingCIDR fd00:0:0:10::/64" in x["reason"], x
    with dual.native.capture("eth0", "icmp6 and ip6[40] == 128") as cap:
        pod.ns.exec(["ping", "-6", "-n", "-q", "-c", 2, "-i", 0.2, "-W", 1, DualTopo.NATIVE6], check=False)
    assert sources6(cap) == {pod6}

    # An unregistered IPv6 source: inside the pods' learned /64, dropped (a pod whose ADD
    # never reached ebpf-masq); outside it, not ours.
    x = masqcli.explain(dual, plugin, "--src", "fd00:244:1::99", "--dst", DualTopo.EXT6, "--proto", "udp")
    assert (x["verdict"], x["code"]) == ("drop", "unregistered_pod"), x
    x = masqcli.explain(dual, plugin, "--src", "fd00:245:1::99", "--dst", DualTopo.EXT6, "--proto", "udp")
    assert x["code"] == "not_pod"
