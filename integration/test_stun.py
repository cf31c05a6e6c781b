"""NAT behaviour as a real STUN client sees it (RFC 5780 behaviour discovery).

ext runs coturn's turnserver on two addresses (10.0.0.2 and 10.0.0.3, ports 3478
and 3479); the pod runs coturn's turnutils_natdiscovery against it. Side by side,
same topology, default settings: the bridge plugin's ipMasq (iptables MASQUERADE),
ebpf-masq, ebpf-masq with fastPath. Each must report Endpoint-Independent Mapping
(RFC 4787 REQ-1, RFC 5382 REQ-1 for TCP below) and Address-and-Port-Dependent
Filtering (RFC 4787 REQ-8's default here); a free source port inside portRange
is preserved (REQ-3). ICE/WebRTC, Tailscale direct connections, VoIP and games in
pods depend on the first.
"""
import json
import re
import shutil

import pytest

from lab.netlab import PY, Topo, wait_for

EXT, EXT2, NODE_IP = Topo.EXT, "10.0.0.3", Topo.NODE_EXT
MODES = {"iptables": None, "ebpf-masq": {}, "ebpf-masq-fastpath": {"fastPath": True}}


@pytest.fixture(params=list(MODES))
def stun(request, lab, topo, plugin):
    """(mode, topo, pod): a STUN server with two addresses in ext, a pod behind the NAT."""
    return request.param, topo, stun_lab(lab, topo, plugin, MODES[request.param])


def stun_lab(lab, topo, plugin, keys):
    """The pod behind the NAT (keys None: iptables), the STUN server in ext."""
    for tool in ("turnserver", "turnutils_natdiscovery"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: install coturn (scripts/install-deps.sh)", pytrace=False)
    topo.ext.ip("addr", "add", f"{EXT2}/24", "dev", "eth0")
    if keys is None:
        net = topo.network([topo.bridge_plugin(ip_masq=True)])
    else:
        net = topo.masq_network(plugin, **keys)
    pod = net.add(topo.pod_ns())
    log = lab.tmp / "turnserver.log"
    topo.ext.spawn(["turnserver", "-n", "--no-auth", "--listening-ip", EXT, "--listening-ip", EXT2,
                    "--listening-port", 3478, "--no-tls", "--no-dtls", "--no-cli", "--simple-log",
                    "--log-file", log, "--userdb", lab.tmp / "turndb", "--pidfile", lab.tmp / "turnserver.pid"])
    wait_for(lambda: "3479" in topo.ext.exec(["ss", "-Hlun"]).stdout, timeout=15, what="turnserver on 3478/3479")
    return pod


def discover(pod, *args):
    p = pod.ns.exec(["turnutils_natdiscovery", *args, EXT], check=False, timeout=120)
    out = p.stdout + p.stderr
    verdicts = re.findall(r"NAT with ([A-Za-z ]+?) (Mapping|Filtering)!", out)
    return {kind: what for what, kind in verdicts}, out


def test_mapping_is_endpoint_independent_and_filtering_address_and_port_dependent(stun):
    mode, topo, pod = stun
    found, out = discover(pod, "-m", "-f")
    assert found.get("Mapping") == "Endpoint Independent", (mode, out)
    assert found.get("Filtering") == "Address and Port Dependent", (mode, out)
    # The server saw the node's address, never the pod's.
    assert re.search(rf"UDP reflexive addr: {re.escape(NODE_IP)}:\d+", out), (mode, out)
    assert pod.ip not in re.findall(r"UDP reflexive addr: ([\d.]+):", out), (mode, out)


def test_a_free_source_port_is_preserved(stun):
    mode, topo, pod = stun
    port = 45000  # in the pods' ephemeral range: inside ebpf-masq's default portRange (1024-65535), nobody else's
    found, out = discover(pod, "-m", "-L", pod.ip, "-l", port)
    assert found.get("Mapping") == "Endpoint Independent", (mode, out)
    assert set(re.findall(r"UDP reflexive addr: ([\d.]+:\d+)", out)) == {f"{NODE_IP}:{port}"}, (mode, out)


TWO_REMOTES = """
import socket, sys
port = int(sys.argv[1])
socks = []
for host in sys.argv[2:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.settimeout(10)
    s.connect((host, 5000))
    s.sendall(b"x" * 100)
    s.shutdown(socket.SHUT_WR)
    socks.append(s)
for s in socks:
    assert len(s.recv(100)) == 64, "no digest"
"""


def test_tcp_mapping_is_reused_towards_two_remotes(stun):
    """RFC 5382 REQ-1: two connections from one pod endpoint (a port inside
    the default nodePortRange, 30000-32767, so never preserved by ebpf-masq) to
    two remote addresses leave from one node port."""
    mode, topo, pod = stun
    srv = topo.ext.server("tcp", 5000)
    pod.ns.exec([PY, "-c", TWO_REMOTES, 31000, EXT, EXT2], timeout=60)
    wait_for(lambda: len(srv.records("done")) == 2, what="two connections")
    seen = {(r["addr"], r["port"]) for r in srv.records("done")}
    assert {a for a, _ in seen} == {NODE_IP}, (mode, seen)
    assert len({p for _, p in seen}) == 1, f"{mode}: one pod endpoint, two node ports: {seen}"


@pytest.mark.parametrize("filtering, expect", [("endpoint-independent", "Endpoint Independent"),
                                               ("address-dependent", "Address Dependent")])
@pytest.mark.parametrize("fast", [False, True], ids=["default", "fastpath"])
def test_nat_filtering_is_what_the_config_says(lab, topo, plugin, filtering, expect, fast):
    """`natFiltering` (RFC 4787 REQ-8): the discovery client sees the configured
    filtering, and the mapping stays endpoint-independent."""
    pod = stun_lab(lab, topo, plugin, {"natFiltering": filtering, "fastPath": fast})
    found, out = discover(pod, "-m", "-f")
    assert found.get("Mapping") == "Endpoint Independent", out
    assert found.get("Filtering") == expect, out
    s = topo.status(plugin)
    assert s["counters"]["filter_admitted"] > 0, s["counters"]
