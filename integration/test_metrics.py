"""`ebpf-masq metrics`: the Prometheus exposition moves with real traffic, parses,
and is served on GET /metrics by `--listen`."""
import re
import secrets
import time

import pytest

from lab import masqcli
from lab.netlab import PY, Topo, cnitool_container_id, wait_for

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
TUN, TUN_GW = "192.168.6.1", "192.168.6.254"

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # Debian's python3-prometheus-client (scripts/install-deps.sh) is missing
    text_string_to_metric_families = None

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{({LABEL}(?:,{LABEL})*)?\}})? (-?[0-9.e+]+|[+-]Inf|NaN)$")
COMMENT = re.compile(rf"^# (HELP|TYPE) ({NAME}) (.+)$")


def strict_parse(text):
    """A strict parser of the text format: {(name, frozenset(labels)): value}; asserts that
    every sample's family has a TYPE line first, families are contiguous, no series repeats."""
    assert text.endswith("\n")
    types, series, done, current = {}, {}, set(), None
    for line in text.splitlines():
        if line.startswith("#"):
            m = COMMENT.match(line)
            assert m, line
            kind, name, arg = m.groups()
            if name != current:
                assert name not in done, f"family {name} not contiguous"
                if current:
                    done.add(current)
                current = name
            if kind == "TYPE":
                assert arg in ("counter", "gauge"), line
                assert name not in types, line
                types[name] = arg
            continue
        m = SAMPLE.match(line)
        assert m, f"bad sample line {line!r}"
        name, labels, value = m.groups()
        assert name == current and name in types, f"sample without its TYPE: {line!r}"
        pairs = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels or "")
        key = (name, frozenset((k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
                               for k, v in pairs))
        assert key not in series, f"duplicate series {line!r}"
        series[key] = float(value)
    return types, series


def parse(text):
    """{(sample name, frozenset(labels)): value}, through prometheus_client when available
    (and always through the strict parser)."""
    types, series = strict_parse(text)
    for name, kind in types.items():
        assert name.startswith("ebpf_masq_"), name
        assert (kind == "counter") == name.endswith("_total"), name
    if text_string_to_metric_families is not None:
        via_client = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                via_client[(s.name, frozenset(s.labels.items()))] = s.value
        assert via_client == series
    return series


def value(series, name, **labels):
    return series.get((name, frozenset(labels.items())))


def scrape(topo, plugin, pin_path):
    return masqcli.run(topo, plugin, "metrics", pin_path=pin_path).stdout


SPOOF = """
import sys
from scapy.all import IP, UDP, Raw, conf, send
from scapy.supersocket import L3RawSocket
conf.L3socket = L3RawSocket
send(IP(src=sys.argv[1], dst=sys.argv[2]) / UDP(sport=40000, dport=5002) / Raw(b"x" * 32), count=3, inter=0.05, verbose=False)
"""


def test_counters_move_with_traffic(topo, plugin, lab):
    # A pod, and a non-pod source (tun) with a masquerade rule out eth0.
    tun = lab.netns("tun")
    lab.veth(topo.node, "tun0", f"{TUN_GW}/24", tun, "eth0", f"{TUN}/24")
    tun.ip("route", "add", "default", "via", TUN_GW)
    net = topo.masq_network(plugin, masqueradeRules=[{"source": "192.168.6.0/24", "outInterface": "eth0"}])
    pod = net.add(topo.pod_ns())
    cid = cnitool_container_id(pod.ns.path)

    before = parse(scrape(topo, plugin, lab.pin_path))
    assert value(before, "ebpf_masq_data_plane_loaded") == 1
    n = 20
    assert pod.ns.ping(EXT, count=n, interval=0.01) == (0, 0.0)
    assert tun.ping(EXT, count=n, interval=0.01) == (0, 0.0)
    pod.ns.exec([PY, "-c", SPOOF, "10.244.1.99", EXT])
    after = parse(scrape(topo, plugin, lab.pin_path))

    def delta(name, **labels):
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    t = "ebpf_masq_translated_packets_total"
    assert delta(t, direction="snat", family="ipv4") >= 2 * n
    assert delta(t, direction="rnat", family="ipv4") >= 2 * n
    assert delta("ebpf_masq_translated_bytes_total", direction="snat", family="ipv4") >= 2 * n * 84
    assert value(after, t, direction="snat", family="ipv6") is not None
    assert delta("ebpf_masq_nat_pairs_created_total") >= 2
    assert value(after, "ebpf_masq_nat_entries", family="ipv4") >= 2
    assert value(after, "ebpf_masq_nat_entries_limit", family="ipv4") >= 1024
    assert value(after, "ebpf_masq_port_allocation_failures_total") == 0
    # Each new pair tried at least one port; a nearly empty range needs about one.
    assert delta("ebpf_masq_nat_pairs_created_total") <= delta("ebpf_masq_port_probes_total") \
        <= 2 * delta("ebpf_masq_nat_pairs_created_total")
    assert value(after, "ebpf_masq_nat_expiry_arm_failures_total") == 0
    text = masqcli.run(topo, plugin, "status").stdout
    m = re.search(r"^port allocation: (\d+) ports tried for (\d+) new pairs \(([\d.]+) a pair\)", text, re.M)
    assert m and int(m[1]) >= int(m[2]) >= 2, text
    rule = dict(rule="0", source="192.168.6.0/24", out_interface="eth0")
    assert delta("ebpf_masq_rule_packets_total", **rule) >= n
    assert delta("ebpf_masq_rule_bytes_total", **rule) >= n * 84
    # cnitool passes no K8S_POD_NAMESPACE/K8S_POD_NAME: the pod labels are there, empty.
    pod_labels = dict(container_id=cid, ifname="eth0", namespace="", pod="")
    assert value(after, "ebpf_masq_pod_packets_total", **pod_labels) >= n
    assert value(after, "ebpf_masq_pod_bytes_total", **pod_labels) >= n * 84
    assert value(after, "ebpf_masq_pod_spoofed_packets_total", **pod_labels) == 3
    assert delta("ebpf_masq_drops_total", reason="spoofed_source") == 3
    assert value(after, "ebpf_masq_drops_total", reason="no_port") == 0
    # The expiry sweep runs from the first pair on (a cycle of one run per shard
    # a second), and a complete cycle sees the pairs.
    wait_for(lambda: (value(parse(scrape(topo, plugin, lab.pin_path)), "ebpf_masq_nat_expiry_cycles_total") or 0)
             >= (value(after, "ebpf_masq_nat_expiry_cycles_total") or 0) + 2, timeout=10, what="two expiry cycles")
    swept = parse(scrape(topo, plugin, lab.pin_path))
    assert value(swept, "ebpf_masq_nat_expiry_last_checked_pairs") >= 2
    assert value(swept, "ebpf_masq_nat_expiry_running") == 1  # pairs exist: the sweep keeps running

    # A deleted pod's series go away with it.
    net.delete(pod.ns)
    gone = parse(scrape(topo, plugin, lab.pin_path))
    assert value(gone, "ebpf_masq_pod_packets_total", **pod_labels) is None


def test_no_data_plane(topo, plugin, tmp_path):
    series = parse(scrape(topo, plugin, tmp_path / "nothing"))
    assert series == {("ebpf_masq_data_plane_loaded", frozenset()): 0.0}


GET = """
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status, r.headers.get("Content-Type"))
    sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("Content-Type"))
"""


def test_listen_serves_metrics(topo, plugin, lab, masq_pod):
    net, pod = masq_pod()
    port = 20000 + secrets.randbelow(10000)
    base = f"http://127.0.0.1:{port}"

    def get(path):
        """(status, content type, body) of GET path, from inside the node netns."""
        p = topo.node.exec([PY, "-c", GET, base + path], check=False, timeout=30)
        if not p.stdout:
            return None, None, ""
        head, _, body = p.stdout.partition("\n")
        status, ctype = head.split(" ", 1)
        return int(status), ctype, body

    server = topo.node.spawn([plugin, "metrics", "--pin-path", lab.pin_path, "--listen", f"127.0.0.1:{port}"],
                             enter=True)
    try:
        wait_for(lambda: get("/metrics")[0] == 200 or server.poll() is not None, timeout=15, what="metrics server")
        assert server.poll() is None, server.stderr.read()
        assert pod.ns.ping(EXT, count=5, interval=0.05) == (0, 0.0)
        status, ctype, body = get("/metrics")
        assert (status, ctype) == (200, "text/plain; version=0.0.4; charset=utf-8")
        served = parse(body)
        assert value(served, "ebpf_masq_translated_packets_total", direction="snat", family="ipv4") >= 5
        # The same families as the one-shot output.
        once = parse(scrape(topo, plugin, lab.pin_path))
        assert {k[0] for k in served} == {k[0] for k in once}
        assert get("/")[0] == 404
        assert get("/metrics/extra")[0] == 404
        assert get("/metrics?x=1")[0] == 200
    finally:
        lab.stop(server)  # by PID
    assert server.poll() is not None
    time.sleep(0.2)
    assert get("/metrics")[0] is None  # nothing listens any more
