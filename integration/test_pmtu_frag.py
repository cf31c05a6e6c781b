"""ICMP error translation (PMTU discovery, TTL exceeded, errors leaving) and fragments.

PMTU / TTL: duallab.RouterTopo, a router between node and ext whose link to ext has
MTU 1280 (ext's route back advertises a 1500-byte MSS, so the pod first sends
full-size segments). Neither the router nor ext has a route to the pods: only
an ICMP error translated by the node (outer destination and quoted source back
to the pod) lets the pod learn the path MTU or see who dropped its packet.

Fragments and errors leaving: duallab.DualTopo (netlab.Topo plus IPv6).
"""
import pytest
from scapy.all import ICMP, IP, IPerror, IPerror6, IPv6, TCPerror, UDPerror
from scapy.layers.inet6 import ICMPv6PacketTooBig

from lab.duallab import Bounce, DualTopo, RouterTopo, ping, ping_ok, pod_addrs, probe, route_get, same_ip, sources
from lab.masqcli import counters

FAMILIES = ["ipv4", "ipv6"]
EMSGSIZE, ECONNREFUSED, EHOSTUNREACH = 90, 111, 113
ORIGIN_ICMP, ORIGIN_ICMP6 = 2, 3


@pytest.fixture
def routed(lab):
    return RouterTopo(lab)


@pytest.fixture
def routed_pod(routed, plugin):
    """(Pod, v4, v6) behind the router topology; pod link MTU 1500."""
    net = routed.masq_network(plugin)
    pod = net.add(routed.pod_ns())
    v4, v6 = pod_addrs(pod)
    assert v4 and v6, pod.result
    assert "mtu 1500" in pod.ns.ip("link", "show", "eth0").stdout
    return pod, v4, v6


def fam(family, v4, v6):
    return v4 if family == "ipv4" else v6


class Precondition(Exception):
    """The scenario did not happen as set up (not the behaviour under test): never an expected failure."""


def require(cond, msg):
    if not cond:
        raise Precondition(msg)


def outer_inner(p):
    """(outer IP layer, quoted IP layer) of a captured ICMP/ICMPv6 error."""
    if IP in p:
        return p[IP], p[IPerror]
    return p[IPv6], p[IPerror6]


def assert_to_pod(pkts, sender, pod_ip, remote):
    """Every captured error came from `sender` to the pod and quotes the pod's own packet."""
    assert pkts, "no ICMP error reached the pod"
    for p in pkts:
        outer, inner = outer_inner(p)
        assert same_ip(outer.src, sender) and same_ip(outer.dst, pod_ip), p.summary()
        assert same_ip(inner.src, pod_ip) and same_ip(inner.dst, remote), p.summary()


# --- PMTU discovery through the masquerade -------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_pmtu_tcp_bulk_completes(routed, plugin, routed_pod, family):
    """A 4 MiB TCP transfer from the pod crosses the 1280-byte link: fragmentation needed /
    packet too big from the router reaches the pod, which learns the path MTU."""
    pod, v4, v6 = routed_pod
    ext, router, node = fam(family, (routed.EXT, routed.ROUTER, routed.NODE_EXT),
                            (routed.EXT6, routed.ROUTER6, routed.NODE_EXT6))
    pod_ip = fam(family, v4, v6)
    assert "mtu" not in route_get(pod.ns, ext)
    srv = routed.ext.server("tcp", 5000, family="dual")
    ptb = "icmp[icmptype] == 3 and icmp[icmpcode] == 4" if family == "ipv4" else "icmp6 and ip6[40] == 2"
    size = 4 * 2**20
    with pod.ns.capture("eth0", ptb) as cap:
        rc, res = pod.ns.client("tcp", ext, 5000, bytes=size, timeout=60)
    assert rc == 0, res
    [done] = srv.records("done")
    assert (done["addr"], done["bytes"], done["sha256"]) == (node, size, res["sha256"])
    assert "mtu 1280" in route_get(pod.ns, ext)
    pkts = cap.packets()
    assert_to_pod(pkts, router, pod_ip, ext)
    for p in pkts:
        mtu = p[ICMP].nexthopmtu if family == "ipv4" else p[ICMPv6PacketTooBig].mtu
        assert mtu == routed.SMALL_MTU, p.summary()
        assert p[TCPerror].sport == res["local"][1], p.summary()  # the pod's port, not the NAT port
    c, d = counters(routed, plugin)
    assert c["icmp_errors_to_pods"] >= len(pkts) > 0, c
    assert d["checksum"] == 0 and d["malformed"] == 0, d


@pytest.mark.parametrize("family", FAMILIES)
def test_pmtu_udp_socket_gets_the_mtu(routed, plugin, routed_pod, family):
    """A 1400-byte UDP datagram with DF: the pod's socket gets EMSGSIZE with MTU 1280."""
    pod, v4, v6 = routed_pod
    ext, router = fam(family, (routed.EXT, routed.ROUTER), (routed.EXT6, routed.ROUTER6))
    res = probe(pod.ns, ext, 5009, size=1400, df=True)
    icmp = [e for e in res["errors"] if "type" in e]
    want_type = 3 if family == "ipv4" else 2  # frag needed / packet too big
    assert icmp and all(e["type"] == want_type and e["info"] == routed.SMALL_MTU and e["errno"] == EMSGSIZE
                        and same_ip(e["offender"], router) for e in icmp), res
    assert "mtu 1280" in route_get(pod.ns, ext)
    assert counters(routed, plugin)[0]["icmp_errors_to_pods"] > 0


def test_pmtu_fragmented_udp_ipv6_reaches_pod(routed, plugin, routed_pod):
    """A 3000-byte UDP datagram over IPv6: the pod fragments it for its 1500-byte link, the
    router cannot forward the 1500-byte fragments and answers packet too big quoting them
    (Fragment header included). The pod must learn MTU 1280, or large UDP never gets through."""
    pod, v4, v6 = routed_pod
    with routed.node.capture("eth0", "icmp6 and ip6[40] == 2") as node_cap, \
            pod.ns.capture("eth0", "icmp6 and ip6[40] == 2") as cap:
        res = probe(pod.ns, routed.EXT6, 5009, size=3000, count=3, timeout=1)
    require(node_cap.packets(), "the router sent no packet too big to the node")
    ptb = [e for e in res["errors"] if e.get("type") == 2]
    assert ptb and all(e["info"] == routed.SMALL_MTU and same_ip(e["offender"], routed.ROUTER6) for e in ptb), res
    assert "mtu 1280" in route_get(pod.ns, routed.EXT6)
    assert_to_pod(cap.packets(), routed.ROUTER6, v6, routed.EXT6)
    assert counters(routed, plugin)[0]["icmp_errors_to_pods"] > 0


# --- TTL exceeded ----------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_ttl_exceeded_reaches_pod(routed, plugin, routed_pod, family):
    """TTL / hop limit 2 toward ext: the node forwards (1), the router cannot (0) and says so;
    the pod gets the time exceeded from the router, quoting its own packet."""
    pod, v4, v6 = routed_pod
    ext, router = fam(family, (routed.EXT, routed.ROUTER), (routed.EXT6, routed.ROUTER6))
    pod_ip = fam(family, v4, v6)
    filt = "icmp[icmptype] == 11" if family == "ipv4" else "icmp6 and ip6[40] == 3"
    with pod.ns.capture("eth0", filt) as cap:
        res = probe(pod.ns, ext, 33434, ttl=2)
        p = ping(pod.ns, ext, count=2, ttl=2)
    want = (ORIGIN_ICMP, 11) if family == "ipv4" else (ORIGIN_ICMP6, 3)
    assert res["errors"] and all((e["origin"], e["type"], e["code"], e["errno"]) == (*want, 0, EHOSTUNREACH)
                                 and same_ip(e["offender"], router) for e in res["errors"]), res
    exceeded = (11, 0) if family == "ipv4" else (3, 0)  # time exceeded in transit
    assert p.rc != 0 and sorted(e["seq"] for e in p.errors) == [1, 2], p
    assert all(same_ip(e["from"], router) and (e["type"], e["code"]) == exceeded for e in p.errors), p
    pkts = cap.packets()
    assert_to_pod(pkts, router, pod_ip, ext)
    assert any(UDPerror in x and x[UDPerror].sport == res["local"][1] and x[UDPerror].dport == 33434
               for x in pkts), [x.summary() for x in pkts]
    assert sum(1 for x in pkts if UDPerror not in x) == 2, [x.summary() for x in pkts]  # the two pings
    assert counters(routed, plugin)[0]["icmp_errors_to_pods"] >= 3


# --- fragments -------------------------------------------------------------------------


# dual, dual_pod: conftest.py's.
FRAGS = "(ip and ip[6:2] & 0x3fff != 0) or (ip6 and ip6[6] == 44)"  # fragments (IPv6: no other ext header)


@pytest.mark.parametrize("family", FAMILIES)
def test_8000_byte_ping_and_udp_arrive_whole(dual, plugin, dual_pod, family):
    net, pod, v4, v6 = dual_pod
    ext, node = fam(family, (DualTopo.EXT, DualTopo.NODE_EXT), (DualTopo.EXT6, DualTopo.NODE_EXT6))
    udp = dual.ext.server("udp", 5001, family="dual")
    with dual.ext.capture("eth0", FRAGS) as cap:
        p = ping(pod.ns, ext, count=3, size=8000)
        rc, res = pod.ns.client("udp", ext, 5001, bytes=8000)
    assert ping_ok(p, 3) and p.reply_bytes == [8008] * 3, p
    assert rc == 0 and res["received"] == 8000 and res["received_sha256"] == res["sha256"], res
    [dgram] = udp.records("dgram")
    assert (dgram["addr"], dgram["bytes"], dgram["sha256"]) == (node, 8000, res["sha256"])
    srcs = sources(cap)
    # 3 pings and a datagram each way; each 8 kB datagram is 6 fragments at MTU 1500
    assert set(srcs) == {node, ext} and srcs[node] >= 4 * 6 and srcs[ext] >= 4 * 6, srcs
    c, d = counters(dual, plugin)
    assert c["fragments_translated"] >= 2 * 4 * 5, c  # the non-first fragments, both ways
    assert d["fragment_without_state"] == 0 and d["fragment"] == 0, d


# --- ICMP errors leaving, about replies translated toward the pod ------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_pod_port_unreachable_translated_outward(dual, plugin, dual_pod, family):
    """The pod's socket is gone when ext answers: the pod's port unreachable leaves with the
    node address outside and quotes ext's packet as ext sent it (to the NAT port)."""
    net, pod, v4, v6 = dual_pod
    ext, node = fam(family, (DualTopo.EXT, DualTopo.NODE_EXT), (DualTopo.EXT6, DualTopo.NODE_EXT6))
    b = Bounce(dual.ext, 5001, size=100, wait=0.5)
    filt = "icmp[icmptype] == 3" if family == "ipv4" else "icmp6 and ip6[40] == 1"
    with dual.ext.capture("eth0", filt) as cap:
        pod.ns.client("udp", ext, 5001, bytes=100, timeout=0.2)  # times out and closes its socket
        res = b.result()
    nat_port = res["peer"][1]
    icmp = [e for e in res["errors"] if "type" in e]
    want = (ORIGIN_ICMP, 3, 3) if family == "ipv4" else (ORIGIN_ICMP6, 1, 4)  # port unreachable
    assert icmp and all((e["origin"], e["type"], e["code"], e["errno"]) == (*want, ECONNREFUSED)
                        and same_ip(e["offender"], node) for e in icmp), res
    pkts = cap.packets()
    assert pkts
    for p in pkts:
        outer, inner = outer_inner(p)
        assert same_ip(outer.src, node) and same_ip(inner.dst, node) and same_ip(inner.src, ext), p.summary()
        assert p[UDPerror].dport == nat_port and p[UDPerror].sport == 5001, p.summary()
    assert counters(dual, plugin)[0]["icmp_errors_outward"] >= len(pkts)


@pytest.mark.parametrize("family", FAMILIES)
def test_node_frag_needed_translated_outward(dual, plugin, family):
    """The pod's link has MTU 1280; ext answers with 1400 bytes, DF: the node itself sends
    fragmentation needed / packet too big, which must quote ext's packet as ext sent it."""
    dual.link_plugin(plugin)
    bridge = {**dual.bridge_plugin(), "mtu": 1280}
    net = dual.network([bridge, dual.masq_entry()])
    pod = net.add(dual.pod_ns())
    v4, v6 = pod_addrs(pod)
    ext, node = fam(family, (DualTopo.EXT, DualTopo.NODE_EXT), (DualTopo.EXT6, DualTopo.NODE_EXT6))
    b = Bounce(dual.ext, 5001, size=1400, df=True, wait=0.3)
    filt = "icmp[icmptype] == 3 and icmp[icmpcode] == 4" if family == "ipv4" else "icmp6 and ip6[40] == 2"
    with dual.ext.capture("eth0", filt) as cap:
        pod.ns.client("udp", ext, 5001, bytes=100, timeout=0.5)  # no echo comes back: just the trigger
        res = b.result()
    nat_port = res["peer"][1]
    icmp = [e for e in res["errors"] if "type" in e]
    want_type = 3 if family == "ipv4" else 2
    assert icmp and all(e["type"] == want_type and e["info"] == 1280 and e["errno"] == EMSGSIZE
                        and same_ip(e["offender"], node) for e in icmp), res
    pkts = cap.packets()
    assert pkts
    for p in pkts:
        outer, inner = outer_inner(p)
        assert same_ip(outer.src, node) and same_ip(inner.dst, node) and same_ip(inner.src, ext), p.summary()
        assert p[UDPerror].dport == nat_port, p.summary()
    assert counters(dual, plugin)[0]["icmp_errors_outward"] >= len(pkts)


def test_node_ptb_about_fragmented_reply_ipv6(dual, plugin):
    """The pod's link has MTU 1280; ext answers with a 3000-byte datagram that it fragments for
    its 1500-byte link. The node cannot forward the 1500-byte fragments to the pod and sends
    packet too big: what leaves must quote ext's packet as ext sent it (to the node address
    and NAT port), never the pod's address."""
    dual.link_plugin(plugin)
    net = dual.network([{**dual.bridge_plugin(), "mtu": 1280}, dual.masq_entry()])
    pod = net.add(dual.pod_ns())
    v4, v6 = pod_addrs(pod)
    b = Bounce(dual.ext, 5001, size=3000, wait=0.3)
    with dual.ext.capture("eth0", "icmp6 and ip6[40] == 2") as cap:
        pod.ns.client("udp", DualTopo.EXT6, 5001, bytes=100, timeout=0.5)
        res = b.result()
    pkts = cap.packets()
    require(pkts, "the node sent no packet too big")
    quoted = [(outer_inner(p)[0].src, outer_inner(p)[1].dst) for p in pkts]
    assert all(same_ip(src, DualTopo.NODE_EXT6) and same_ip(dst, DualTopo.NODE_EXT6) for src, dst in quoted), \
        f"quoted destinations leaving the node (pod is {v6}): {quoted}"
    ptb = [e for e in res["errors"] if e.get("type") == 2]
    assert ptb and all(e["info"] == 1280 for e in ptb), res
    assert counters(dual, plugin)[0]["icmp_errors_outward"] >= len(pkts)


def test_node_fragments_masqueraded_datagram(dual, plugin, dual_pod):
    """The node's uplink (and ext) have MTU 1280: the node fragments the pod's 1428-byte
    datagrams (no DF) after routing, ext fragments its replies; every fragment leaving
    carries the node address and the replies reach the pod whole."""
    net, pod, v4, v6 = dual_pod
    dual.node.ip("link", "set", "eth0", "mtu", 1280)
    dual.ext.ip("link", "set", "eth0", "mtu", 1280)
    with dual.ext.capture("eth0", "ip and ip[6:2] & 0x3fff != 0") as cap:
        p = ping(pod.ns, DualTopo.EXT, count=3, size=1400, df=False)
    assert ping_ok(p, 3) and p.reply_bytes == [1408] * 3, p
    srcs = sources(cap)
    assert srcs == {DualTopo.NODE_EXT: 6, DualTopo.EXT: 6}, srcs
    c, d = counters(dual, plugin)
    assert c["fragments_translated"] >= 6, c
    assert d["fragment_without_state"] == 0 and d["fragment"] == 0, d
