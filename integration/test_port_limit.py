"""A pod's port limit towards one remote endpoint (RFC 6888 REQ-4), with real clients.

RFC 6888 REQ-4: a CGN must have a configurable limit on the external ports one
subscriber may use. ebpf-masq's is `podPortLimit` (network key) and the pod
annotation `ebpf-masq.io/port-limit` (may only lower it), counted per remote
endpoint (address, port, protocol) on one node address (docs/nat.md).

One test runs two setups one after the other, each in its own lab, both in their
default configuration: the bridge plugin's ipMasq (iptables, the yardstick: it has
no such limit, the pod gets every connection) and ebpf-masq (default keys, the
annotations capability declared as a CRI runtime's conflist does). The limited
pod (annotation port-limit 200, default sysctls) holds connections to ext
(benchtool tcp-hold; ext's tcp-keep holds every one it accepts):

1. 300 to ext:PORT, 64 connects in flight: 200 succeed, 100 are refused (their
   SYNs dropped, `over_limit`; a connect fails after 3 s).
2. 50 to ext:PORT2 (another remote endpoint, counted apart): all succeed.
3. The neighbour pod (no annotation) opens 300 to ext:PORT: all succeed.
4. The limited pod lets its first 200 go (RST): at once it may hold 200 again.

Pass, for ebpf-masq: 1-4 as said (the limit holds within one port per CPU
racing at the moment it is reached: a bound is read, then raised after the
claim); status shows the pod's `port_limit` 200 and its `port_refusals.over_limit`
at least the refused connects, the neighbour none; ext sees every connection from
the node address. With iptables every connection of 1-4 succeeds: printed; the
neighbour's count is compared (ebpf-masq's >= iptables').
"""
import json
import os
import time

import pytest

from lab.hold import established_peers, hold, json_line, keep, mode_lab, pod_status, release
from lab.lifelab import bridge, has_masq_filter, invoke_pod, network, registrations
from lab.netlab import ANNOTATIONS_CAP, Topo

# Counts and rates that mean something only with the machine to itself (conftest.py).
pytestmark = pytest.mark.serial

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
PORT, PORT2 = 5420, 5421
LIMIT = 200
FIRST, OTHER, NEIGHBOUR = LIMIT + 100, 50, 300
INFLIGHT = 64
MODES = {"iptables": None, "ebpf-masq": {"capabilities": {ANNOTATIONS_CAP: True}}}
# Concurrent new flows may each pass the bound before any raises it: one port per CPU over.
SLACK = (os.cpu_count() or 1) - 1


def held(proc, who):
    r = json_line(proc, 120, who)
    print(f"{who}: ok {r['ok']} fail {r['fail']} {r['errno']} in {r['secs']:.1f} s")
    return r


def run(tmp_path, plugin, benchtool, mode):
    """One setup in its own lab; returns what the clients, ext and the node saw."""
    keys = MODES[mode]
    t0 = time.monotonic()
    with mode_lab(tmp_path, mode, plugin, keys) as (lab, topo, net):
        limited = net.add(topo.pod_ns("limited"), annotations={"ebpf-masq.io/port-limit": str(LIMIT)})
        neighbour = net.add(topo.pod_ns("neighbour"))
        servers = [keep(topo.ext, benchtool, port) for port in (PORT, PORT2)]

        out = {"ips": {"limited": limited.ip, "neighbour": neighbour.ip}}
        first = hold(limited.ns, benchtool, EXT, PORT, FIRST, INFLIGHT)
        out["first"] = held(first, f"{mode}: limited pod, {FIRST} to ext:{PORT}")
        other = hold(limited.ns, benchtool, EXT, PORT2, OTHER, INFLIGHT)
        out["other"] = held(other, f"{mode}: limited pod, {OTHER} to ext:{PORT2}")
        n = hold(neighbour.ns, benchtool, EXT, PORT, NEIGHBOUR, INFLIGHT)
        out["neighbour"] = held(n, f"{mode}: neighbour, {NEIGHBOUR} to ext:{PORT}")

        out["peers"] = established_peers(topo.ext, PORT) + established_peers(topo.ext, PORT2)
        out["status"] = topo.status(plugin) if keys is not None else None

        # The first connections go (RST): their ports come back at once.
        release(first, f"{mode}: limited pod's first hold")
        again = hold(limited.ns, benchtool, EXT, PORT, LIMIT, INFLIGHT)
        out["again"] = held(again, f"{mode}: limited pod again, {LIMIT} to ext:{PORT}")
        for proc, who in ((again, "again"), (n, "neighbour"), (other, "other")):
            release(proc, f"{mode}: {who}")
        print(f"{mode}: ext held {len(out['peers'])} connections from {sorted(set(out['peers']))}")
        if out["status"] is not None:
            s = out["status"]
            print(f"{mode}: drops {({k: v for k, v in s.get('drops', {}).items() if v}) or 'none'}; pods "
                  + ", ".join(f"{role} port_limit {(p or {}).get('port_limit')} port_refusals "
                              f"{(p or {}).get('port_refusals')}"
                              for role, p in ((r, pod_status(s, ip)) for r, ip in out["ips"].items())))
        for srv in servers:
            lab.stop(srv)
        print(f"{mode}: {time.monotonic() - t0:.0f} s")
        return out


def limit_problems(r):
    """What ebpf-masq's run shows against the port limit (an empty list: none)."""
    problems = []
    first, other, nb, again = r["first"], r["other"], r["neighbour"], r["again"]
    if not LIMIT <= first["ok"] <= LIMIT + SLACK:
        problems.append(f"the limited pod got {first['ok']} of {FIRST} connections to ext:{PORT}, "
                        f"limit {LIMIT} (+{SLACK} racing)")
    if other["ok"] != OTHER:
        problems.append(f"the limited pod got {other['ok']} of {OTHER} to another endpoint, ext:{PORT2}")
    if nb["ok"] != NEIGHBOUR:
        problems.append(f"the neighbour got {nb['ok']} of {NEIGHBOUR} (errno {nb['errno']})")
    if again["ok"] != LIMIT:
        problems.append(f"after its first connections went, the limited pod got {again['ok']} of {LIMIT} again")
    status = r["status"]
    refused = FIRST - first["ok"]
    if not status.get("drops", {}).get("over_limit", 0) >= refused:
        problems.append(f"drops.over_limit {status.get('drops', {}).get('over_limit')}: want >= {refused}")
    lp, np_ = pod_status(status, r["ips"]["limited"]), pod_status(status, r["ips"]["neighbour"])
    if lp is None or np_ is None:
        problems.append(f"status lacks a pod: limited {lp}, neighbour {np_}")
        return problems
    if lp.get("port_limit") != LIMIT:
        problems.append(f"status's limited pod has port_limit {lp.get('port_limit')}, want {LIMIT}")
    if np_.get("port_limit") is not None:
        problems.append(f"status's neighbour has port_limit {np_.get('port_limit')}, want none")
    lr, nr = lp.get("port_refusals") or {}, np_.get("port_refusals") or {}
    if not lr.get("over_limit", 0) >= refused or lr.get("no_port") or lr.get("over_share"):
        problems.append(f"the limited pod's port_refusals {lr}: want over_limit >= {refused}, nothing else")
    if any(nr.values()) or not nr:
        problems.append(f"the neighbour's port_refusals {nr}: want all 0")
    want = first["ok"] + other["ok"] + nb["ok"]
    strangers = set(r["peers"]) - {NODE_IP}
    if len(r["peers"]) != want or strangers:
        problems.append(f"ext held {len(r['peers'])} connections (want {want}), from strangers {sorted(strangers)}")
    return problems


def test_a_pods_port_limit_holds_towards_one_endpoint_only(tmp_path, plugin, benchtool):
    runs = {mode: run(tmp_path, plugin, benchtool, mode) for mode in MODES}
    r, ipt = runs["ebpf-masq"], runs["iptables"]
    print(f"iptables (no per-pod limit): the limited pod got {ipt['first']['ok']} of {FIRST}, "
          f"{ipt['again']['ok']} of {LIMIT} again; json {json.dumps(ipt['first'])}")
    problems = limit_problems(r)
    if r["neighbour"]["ok"] < ipt["neighbour"]["ok"]:
        problems.append(f"the neighbour got {r['neighbour']['ok']}, with iptables {ipt['neighbour']['ok']}")
    assert not problems, "ebpf-masq: " + "; ".join(problems)


def test_an_annotation_may_only_lower_the_networks_limit(topo, plugin):
    """Above the network's podPortLimit: the ADD fails (code 7, naming the annotation and
    the key) and ebpf-masq leaves nothing; at or below it the pod gets the lower limit."""
    net = topo.masq_network(plugin, podPortLimit=100, capabilities={ANNOTATIONS_CAP: True})
    ok = net.add(topo.pod_ns("ok"), annotations={"ebpf-masq.io/port-limit": "60"})
    plain = net.add(topo.pod_ns("plain"))
    # A pod the bridge alone made (its own addresses), for a direct ADD as a runtime makes it.
    bare = network(topo, [bridge(topo, 100, 120, "ipam-x")], "1.0.0").add(topo.pod_ns("bare"))
    before = registrations(topo, plugin)
    conf = {**net.plugin_conf(1, bare.result),
            "runtimeConfig": {ANNOTATIONS_CAP: {"ebpf-masq.io/port-limit": "150"}}}
    r = invoke_pod(topo, plugin, "ADD", conf, bare.ns)
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert r.out["msg"] == ('annotation "ebpf-masq.io/port-limit": 150 is above the network\'s podPortLimit 100; '
                            'an annotation may only lower it'), r.out
    # Nothing of ebpf-masq's behind: no registration, no program on the pod's veth.
    assert registrations(topo, plugin) == before
    assert not has_masq_filter(topo, bare.host_veth), topo.node.bpf_hooks(bare.host_veth, "ingress")
    limits = {p["addresses"][0].split("/")[0]: p.get("port_limit") for p in topo.status(plugin)["pods"]}
    assert limits == {ok.ip: 60, plain.ip: 100}, limits
    # The runtime's DEL after the failed ADD succeeds.
    conf.pop("runtimeConfig")
    assert invoke_pod(topo, plugin, "DEL", conf, bare.ns).rc == 0
