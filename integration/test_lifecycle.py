"""CNI verb behaviour of ebpf-masq: VERSION, ADD/CHECK/DEL per spec version, DEL
corner cases runtimes produce, GC and STATUS (CNI 1.1), concurrency, failed ADDs,
node reboot and the versioned pin layout.

cnitool here is built against libcni 1.1.2 and the reference plugins are 1.1.1:
neither knows CNI 1.1.0, so 1.1.0 ADD/CHECK/DEL/GC/STATUS are direct plugin
calls, with the bridge's (1.0.0-format, identical to 1.1.0) result as prevResult.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from lab import abi
from lab.abi import LAYOUT
from lab.lifelab import (bridge, detach_behind_our_back, has_masq_filter, invoke, invoke_pod, masq_conf, masq_network,
                     nat_flows, network, parallel, pin_tree, registrations, status)
from lab.netlab import Pod, Topo, cnitool_container_id, wait_for

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
ECHO = "icmp[icmptype] = icmp-echo"
VERSIONS = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]  # 0.3.1: what Calico and Flannel ship


def cid(pod_ns):
    return cnitool_container_id(pod_ns.path)


def assert_masqueraded(topo, pod, port):
    """ping and a UDP exchange from the pod: ext sees only the node's address."""
    udp = topo.ext.server("udp", port)
    with topo.ext.capture("eth0", ECHO) as cap:
        assert pod.ns.ping(EXT, count=2) == (0, 0.0)
    assert cap.sources() == {NODE_IP: 2}
    rc, res = pod.ns.client("udp", EXT, port)
    assert rc == 0, res
    assert udp.addrs() == {NODE_IP}


def udp_flow(topo, plugin, pod, port):
    """One UDP exchange so the pod has NAT entries; returns them."""
    topo.ext.server("udp", port)
    rc, res = pod.ns.client("udp", EXT, port)
    assert rc == 0, res
    return wait_for(lambda: nat_flows(topo, plugin, pod.ip), what=f"NAT entries of {pod.ip}")


@pytest.fixture
def t(topo):
    """The topology (short name: it is in nearly every call)."""
    return topo


# 1. VERSION ------------------------------------------------------------------

@pytest.mark.parametrize("stdin", ["", '{"cniVersion":"1.0.0"}', '{"cniVersion":"0.4.0"}'],
                         ids=["empty-stdin", "stdin-1.0.0", "stdin-0.4.0"])
@pytest.mark.parametrize("env", [
    {"CNI_NETNS": "dummy"},  # podman
    {"CNI_NETNS": "dummy", "CNI_IFNAME": "dummy", "CNI_PATH": "dummy"},  # libcni GetVersionInfo
], ids=["podman", "libcni"])
def test_version(plugin, stdin, env):
    p = subprocess.run([str(plugin)], env={"CNI_COMMAND": "VERSION", **env}, input=stdin,
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)  # exactly one JSON document
    assert {"0.4.0", "1.0.0", "1.1.0"} <= set(out["supportedVersions"]), out
    assert out["cniVersion"] in out["supportedVersions"], out


# 2. ADD / CHECK / DEL per CNI version ------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_add_check_del_per_version(t, plugin, version):
    # The bridge (in `version`, or 1.0.0 for 1.1.0 which it does not know) gives a real prevResult.
    main_version = "1.0.0" if version == "1.1.0" else version
    bnet = network(t, [bridge(t, 10, 49, "ipam-a")], main_version)
    bpod = bnet.add(t.pod_ns("bpod"))
    prev = dict(bpod.result, cniVersion=version)
    if version in ("0.3.1", "0.4.0"):
        assert all(ip.get("version") == "4" for ip in prev["ips"]), prev
    conf = masq_conf(t, bnet.name, version, prev)

    r = invoke_pod(t, plugin, "ADD", conf, bpod.ns)
    assert r.rc == 0, r.log
    assert r.out == prev, r.log  # passes its prevResult through unchanged
    assert cid(bpod.ns) in registrations(t, plugin)
    assert_masqueraded(t, bpod, 5001)
    if version != "0.3.1":  # CHECK exists from 0.4.0 on
        r = invoke_pod(t, plugin, "CHECK", conf, bpod.ns)
        assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    r = invoke_pod(t, plugin, "DEL", conf, bpod.ns)
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    assert registrations(t, plugin) == {}
    assert not has_masq_filter(t, bpod.host_veth)
    assert nat_flows(t, plugin, bpod.ip) == []

    if version == "1.1.0":
        return  # cnitool/libcni 1.1.2 cannot run a 1.1.0 list
    # The whole chain through cnitool in this version.
    net = masq_network(t, plugin, version, 50, 89, "ipam-b")
    pod = net.add(t.pod_ns("pod"))
    assert pod.result["cniVersion"] == version
    assert_masqueraded(t, pod, 5002)
    if version != "0.3.1":
        assert net.cnitool("check", pod.ns, check=False).returncode == 0
    net.delete(pod.ns)
    assert registrations(t, plugin) == {}
    assert nat_flows(t, plugin, pod.ip) == []


# 3. CHECK ------------------------------------------------------------------------

def test_check(t, plugin):
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    p = net.cnitool("check", pod.ns, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    conf = masq_conf(t, net.name, "1.0.0", pod.result)
    r = invoke_pod(t, plugin, "CHECK", conf, pod.ns)
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log

    other = copy.deepcopy(pod.result)
    other["ips"][0]["address"] = "10.244.1.250/24"
    r = invoke_pod(t, plugin, "CHECK", masq_conf(t, net.name, "1.0.0", other), pod.ns)
    assert r.rc != 0 and r.out and r.out["code"] == 102, r.log
    assert "10.244.1.250" in r.out["msg"], r.out

    detach_behind_our_back(t, pod.host_veth)
    assert not has_masq_filter(t, pod.host_veth)
    p = net.cnitool("check", pod.ns, check=False)
    assert p.returncode != 0, p.stdout + p.stderr
    r = invoke_pod(t, plugin, "CHECK", conf, pod.ns)
    assert r.rc != 0, r.log
    assert r.out and r.out["code"] == 102 and r.out["cniVersion"] == "1.0.0", r.log
    assert pod.host_veth in r.out["msg"] and "not attached" in r.out["msg"], r.out


def test_check_sees_the_data_plane_entries(t, plugin):
    """CHECK fails, naming what is missing, when the pod's entries in the data plane went
    behind our back: its veth's `veths` entry, then its address in pods4."""
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    conf = masq_conf(t, net.name, "1.0.0", pod.result)
    maps = f"{t.lab.pin_path}/v{LAYOUT}/maps"
    ifindex = json.loads(t.node.enter(["ip", "-j", "link", "show", "dev", pod.host_veth]).stdout)[0]["ifindex"]
    assert invoke_pod(t, plugin, "CHECK", conf, pod.ns).rc == 0

    t.node.enter(["bpftool", "map", "delete", "pinned", f"{maps}/veths", "key",
                  *[str(b) for b in ifindex.to_bytes(4, "little")]])
    r = invoke_pod(t, plugin, "CHECK", conf, pod.ns)
    assert r.rc != 0 and r.out and r.out["code"] == 102, r.log
    assert f"veth ifindex {ifindex} has no veths entry" in r.out["msg"], r.out

    t.node.enter(["bpftool", "map", "delete", "pinned", f"{maps}/pods4", "key", *pod.ip.split(".")])
    r = invoke_pod(t, plugin, "CHECK", conf, pod.ns)
    assert r.rc != 0 and r.out and f"address {pod.ip} is not registered" in r.out["msg"], r.log
    assert net.delete(pod.ns, check=False).returncode == 0  # DEL still cleans up what is left


def test_check_unregistered_fails(t, plugin):
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    conf = masq_conf(t, net.name, "1.0.0", pod.result)
    r = invoke_pod(t, plugin, "CHECK", conf, pod.ns, container_id="not-added")
    assert r.rc != 0 and r.out and r.out["code"] == 102, r.log
    assert "not registered" in r.out["msg"], r.out


# 4. DEL semantics ------------------------------------------------------------------

def test_del_without_netns_and_prev_result(t, plugin):
    """containerd: DEL with CNI_NETNS="" and no prevResult."""
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    assert udp_flow(t, plugin, pod, 5001)
    r = invoke_pod(t, plugin, "DEL", masq_conf(t, net.name, "1.0.0"), pod.ns, netns="")
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    assert registrations(t, plugin) == {}
    assert nat_flows(t, plugin, pod.ip) == []
    assert not has_masq_filter(t, pod.host_veth)
    assert net.delete(pod.ns, check=False).returncode == 0


def test_del_unknown_container(t, plugin):
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    for conf in (masq_conf(t, net.name, "1.0.0"), masq_conf(t, net.name, "1.0.0", pod.result)):
        r = invoke_pod(t, plugin, "DEL", conf, pod.ns, container_id="never-added")
        assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    assert set(registrations(t, plugin)) == {cid(pod.ns)}  # the real pod is untouched
    assert has_masq_filter(t, pod.host_veth)


def test_del_after_pod_netns_deleted(t, plugin):
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    assert udp_flow(t, plugin, pod, 5001)
    subprocess.run(["ip", "netns", "del", pod.ns.name], check=True)
    wait_for(lambda: pod.host_veth not in t.node.links(), what="host veth gone with the netns")
    p = net.delete(pod.ns, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert registrations(t, plugin) == {}
    assert nat_flows(t, plugin, pod.ip) == []
    r = invoke_pod(t, plugin, "DEL", masq_conf(t, net.name, "1.0.0"), pod.ns)  # and again, directly
    assert r.rc == 0, r.log


def test_del_after_host_veth_deleted(t, plugin):
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    assert udp_flow(t, plugin, pod, 5001)
    t.node.ip("link", "del", pod.host_veth)
    p = net.delete(pod.ns, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert registrations(t, plugin) == {}
    assert nat_flows(t, plugin, pod.ip) == []


def test_del_before_any_add(t, plugin):
    """A fresh node: DEL succeeds and creates no pins and no filters."""
    before = t.node_tc_state()
    ns = t.pod_ns()
    r = invoke_pod(t, plugin, "DEL", masq_conf(t, "net", "1.0.0"), ns)
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    r = invoke_pod(t, plugin, "DEL", masq_conf(t, "net", "1.0.0"), ns, netns="")
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    net = masq_network(t, plugin)
    p = net.delete(ns, check=False)  # the whole chain, never added
    assert p.returncode == 0, p.stdout + p.stderr
    assert not os.path.exists(t.lab.pin_path)
    assert t.node_tc_state() == before


# 5. GC ------------------------------------------------------------------------------

def test_gc_removes_only_unlisted(t, plugin):
    net = masq_network(t, plugin)
    keep, gone = net.add(t.pod_ns("keep")), net.add(t.pod_ns("gone"))
    assert udp_flow(t, plugin, keep, 5001) and udp_flow(t, plugin, gone, 5002)
    assert set(registrations(t, plugin)) == {cid(keep.ns), cid(gone.ns)}

    def gc(*pods):
        valid = [{"containerID": cid(p.ns), "ifname": "eth0"} for p in pods]
        conf = masq_conf(t, net.name, "1.1.0", **{"cni.dev/valid-attachments": valid})
        r = invoke(t, plugin, "GC", conf, ifname=None)  # GC gets no per-container variables
        assert (r.rc, r.stdout.strip()) == (0, ""), r.log

    gc(keep, gone)  # both listed: nothing changes
    assert set(registrations(t, plugin)) == {cid(keep.ns), cid(gone.ns)}
    gc(keep)
    assert set(registrations(t, plugin)) == {cid(keep.ns)}
    assert nat_flows(t, plugin, gone.ip) == []
    assert nat_flows(t, plugin, keep.ip)
    assert not has_masq_filter(t, gone.host_veth)
    assert has_masq_filter(t, keep.host_veth)
    assert_masqueraded(t, keep, 5003)
    gc(keep)  # idempotent
    assert set(registrations(t, plugin)) == {cid(keep.ns)}


def test_gc_on_fresh_node_creates_nothing(t, plugin):
    conf = masq_conf(t, "net", "1.1.0", **{"cni.dev/valid-attachments": []})
    r = invoke(t, plugin, "GC", conf, ifname=None)
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    assert not os.path.exists(t.lab.pin_path)


# 6. STATUS ----------------------------------------------------------------------------

def test_status(t, plugin):
    conf = masq_conf(t, "net", "1.1.0")
    r = invoke(t, plugin, "STATUS", conf, ifname=None)
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log
    assert not os.path.exists(t.lab.pin_path)  # STATUS on a fresh node creates nothing
    net = masq_network(t, plugin)
    net.add(t.pod_ns())
    r = invoke(t, plugin, "STATUS", conf, ifname=None)
    assert (r.rc, r.stdout.strip()) == (0, ""), r.log


def test_nat_max_entries_change_is_reported_not_applied(t, plugin):
    """natMaxEntries sizes the NAT maps when they are created. A later config
    asking for another size leaves them as they are (no pod fails over it) and
    says so: a warning from ADD, the size in `status`."""
    net = masq_network(t, plugin, natMaxEntries=4096)
    pod = net.add(t.pod_ns())
    assert status(t, plugin)["config"]["nat_max_entries"] == 4096
    conf = masq_conf(t, net.name, "1.0.0", pod.result, natMaxEntries=8192)
    r = invoke_pod(t, plugin, "ADD", conf, pod.ns)
    assert r.rc == 0, r.log
    assert "natMaxEntries 8192 in the config, but the loaded NAT maps hold 4096 pairs" in r.log, r.log
    assert status(t, plugin)["config"]["nat_max_entries"] == 4096
    r = invoke_pod(t, plugin, "ADD", masq_conf(t, net.name, "1.0.0", pod.result, natMaxEntries=4096), pod.ns)
    assert r.rc == 0 and "natMaxEntries" not in r.log, r.log


def test_status_without_bpffs(t, plugin):
    """pinPath on a non-bpffs filesystem: not ready, CNI code 50."""
    conf = masq_conf(t, "net", "1.1.0", pinPath=str(t.lab.tmp / "not-bpffs"))
    r = invoke(t, plugin, "STATUS", conf, ifname=None)
    assert r.rc != 0 and r.out and r.out["code"] == 50, r.log


# 7. Concurrency -------------------------------------------------------------------------

N_PODS = 100


def test_parallel_add_del(t, plugin):
    """100 parallel ADDs on a fresh node (first load included), then 50 DELs racing
    50 new ADDs, then parallel DELs of all: every registration accounted for."""
    net = masq_network(t, plugin)  # host-local over the whole /24
    start = time.monotonic()
    namespaces = parallel(lambda i: t.pod_ns(f"p{i}"), range(N_PODS + N_PODS // 2))
    first, extra = namespaces[:N_PODS], namespaces[N_PODS:]
    live = set()

    def add(ns):
        p = net.cnitool("add", ns, check=False)
        if p.returncode == 0:
            live.add(ns.name)
        return ("add", ns, p)

    def delete(ns):
        p = net.cnitool("del", ns, check=False)
        if p.returncode == 0:
            live.discard(ns.name)
        return ("del", ns, p)

    by_name = {ns.name: ns for ns in namespaces}
    # Whatever happens below, delete what is still attached before the lab tears down.
    t.lab.on_close(lambda: parallel(delete, [by_name[n] for n in list(live)]))

    def run(jobs):
        done = parallel(lambda job: job[0](job[1]), jobs)
        failed = [(verb, ns.name, p.stdout + p.stderr) for verb, ns, p in done if p.returncode != 0]
        assert not failed, failed[:3]
        return {ns.name: Pod(ns, json.loads(p.stdout)) for verb, ns, p in done if verb == "add"}

    def assert_registered(pods):
        regs = registrations(t, plugin)
        assert set(regs) == {cid(p.ns) for p in pods}, (len(regs), len(pods))
        for p in pods:
            reg = regs[cid(p.ns)]
            assert (reg["addresses"], reg["veth"], reg["veth_attached"]) == ([p.ip], p.host_veth, True), reg

    pods = run([(add, ns) for ns in first])
    t_add = time.monotonic() - start
    assert len({p.ip for p in pods.values()}) == N_PODS
    assert_registered(pods.values())
    udp = t.ext.server("udp", 5001)
    for p in list(pods.values())[:: N_PODS // 3]:  # a few pods really are masqueraded
        rc, res = p.ns.client("udp", EXT, 5001)
        assert rc == 0, res
    assert udp.addrs() == {NODE_IP}

    # DELs of half the pods racing ADDs of new ones.
    half = first[: N_PODS // 2]
    jobs = [job for pair in zip([(delete, ns) for ns in half], [(add, ns) for ns in extra]) for job in pair]
    pods.update(run(jobs))
    for ns in half:
        del pods[ns.name]
    assert len(pods) == N_PODS
    assert_registered(pods.values())

    run([(delete, p.ns) for p in pods.values()])
    assert registrations(t, plugin) == {}
    assert nat_flows(t, plugin) == []
    assert not live
    elapsed = time.monotonic() - start
    print(f"{N_PODS} parallel ADDs in {t_add:.1f}s, whole test {elapsed:.1f}s")
    assert elapsed < 120


# 8. Failed ADDs leave nothing behind --------------------------------------------------------

def _bridge_pod(t):
    net = network(t, [bridge(t)], "1.0.0")
    return net, net.add(t.pod_ns())


def _assert_nothing_left(t, before):
    assert t.node_tc_state() == before
    assert not os.path.exists(t.lab.pin_path), pin_tree(t.lab.pin_path)


def test_add_without_prev_result(t, plugin):
    net, pod = _bridge_pod(t)
    before = t.node_tc_state()
    r = invoke_pod(t, plugin, "ADD", masq_conf(t, net.name, "1.0.0"), pod.ns)
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert "prevResult" in r.out["msg"], r.out
    _assert_nothing_left(t, before)


def test_add_empty_netns(t, plugin):
    net, pod = _bridge_pod(t)
    before = t.node_tc_state()
    r = invoke_pod(t, plugin, "ADD", masq_conf(t, net.name, "1.0.0", pod.result), pod.ns, netns="")
    assert r.rc != 0 and r.out and r.out["code"] == 4, r.log
    assert "CNI_NETNS" in r.out["msg"], r.out
    _assert_nothing_left(t, before)


def test_add_no_address_for_ifname(t, plugin):
    net, pod = _bridge_pod(t)
    before = t.node_tc_state()
    r = invoke_pod(t, plugin, "ADD", masq_conf(t, net.name, "1.0.0", pod.result), pod.ns, ifname="net1")
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert "prevResult.ips" in r.out["msg"], r.out
    _assert_nothing_left(t, before)


def _pod_with(t, make_eth0):
    """A pod netns whose eth0 (10.244.9.2/24) make_eth0(ns) creates; its prevResult
    lists only the container side, so the plugin must find the host side itself."""
    ns = t.pod_ns()
    make_eth0(ns)
    ns.ip("addr", "add", "10.244.9.2/24", "dev", "eth0")
    ns.ip("link", "set", "eth0", "up")
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": ns.path}],
            "ips": [{"address": "10.244.9.2/24", "interface": 0}]}
    return ns, prev


def test_add_non_veth_pod_interface(t, plugin):
    """The pod's interface is not a veth (a bridge device here; no dummy module): refused."""
    ns, prev = _pod_with(t, lambda ns: ns.ip("link", "add", "eth0", "type", "bridge"))
    before = t.node_tc_state()
    r = invoke_pod(t, plugin, "ADD", masq_conf(t, "net", "1.0.0", prev), ns)
    assert r.rc != 0 and r.out and r.out["code"] == 102, r.log
    assert "veth" in r.out["msg"], r.out
    _assert_nothing_left(t, before)


def test_add_veth_peer_not_on_node(t, plugin):
    """eth0 is a veth whose peer is in the pod netns too, with the ifindex that the
    node's eth1 has: the peer is no host veth, nothing on the node may be taken for it."""
    eth1 = json.loads(t.node.ip("-j", "link", "show", "eth1").stdout)[0]["ifindex"]
    ns, prev = _pod_with(t, lambda ns: ns.ip("link", "add", "eth0", "index", 77, "type", "veth",
                                             "peer", "name", "peer0", "index", eth1))
    before = t.node_tc_state()
    r = invoke_pod(t, plugin, "ADD", masq_conf(t, "net", "1.0.0", prev), ns)
    assert r.rc != 0 and r.out and r.out["code"] == 102, r.log
    assert "veth" in r.out["msg"], r.out
    _assert_nothing_left(t, before)


def test_add_missing_egress_interface_leaves_nothing(t, plugin):
    """A config that parses but names an interface the node lacks fails before any pin."""
    net, pod = _bridge_pod(t)
    before = t.node_tc_state()
    conf = masq_conf(t, net.name, "1.0.0", pod.result, egressInterfaces=["nosuch0"])
    r = invoke_pod(t, plugin, "ADD", conf, pod.ns)
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert "egressInterfaces" in r.out["msg"], r.out
    _assert_nothing_left(t, before)


def test_failed_add_keeps_existing_state(t, plugin):
    """On a loaded node a failed ADD registers nothing and leaves the other pod alone."""
    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns("ok"))
    bnet = network(t, [bridge(t, 100, 120, "ipam-x")], "1.0.0")
    bpod = bnet.add(t.pod_ns("bad"))
    before = (t.node_tc_state(), registrations(t, plugin))
    conf = masq_conf(t, bnet.name, "1.0.0", bpod.result, egressInterfaces=["nosuch0"])
    r = invoke_pod(t, plugin, "ADD", conf, bpod.ns)
    assert r.rc != 0 and r.out and r.out["code"] == 7, r.log
    assert (t.node_tc_state(), registrations(t, plugin)) == before
    assert_masqueraded(t, pod, 5001)


# 9. Reboot ----------------------------------------------------------------------------------

def test_add_after_reboot_restores_masquerade(t, plugin):
    net = masq_network(t, plugin)
    old = net.add(t.pod_ns("old"))
    # What a reboot loses: every pin, with them our TCX links (tc filters too, in tc mode).
    shutil.rmtree(t.lab.pin_path)
    t.node.enter(["tc", "qdisc", "del", "dev", "eth0", "clsact"], check=False)
    t.node.enter(["tc", "filter", "del", "dev", old.host_veth, "ingress"], check=False)
    assert status(t, plugin) is None
    assert not has_masq_filter(t, "eth0", "egress") and not has_masq_filter(t, "eth0", "ingress")

    new = net.add(t.pod_ns("new"))
    assert has_masq_filter(t, "eth0", "egress") and has_masq_filter(t, "eth0", "ingress")
    assert has_masq_filter(t, new.host_veth)
    assert set(registrations(t, plugin)) == {cid(new.ns)}
    assert_masqueraded(t, new, 5001)
    # The lost pod's DEL is harmless; the new pod keeps working.
    assert net.delete(old.ns, check=False).returncode == 0
    assert set(registrations(t, plugin)) == {cid(new.ns)}


# 10. Versioned pin layout -------------------------------------------------------------------



def test_pin_layout_is_versioned(t, plugin):
    """Only <pinPath>/v<LAYOUT> is used; other layout versions (an older binary's pins,
    a newer one's) are neither read nor touched."""
    pin = t.lab.pin_path
    cur, old, new = f"v{LAYOUT}", f"v{LAYOUT - 1}", f"v{LAYOUT + 1}"
    decoys = [f"{old}/maps/nat4_fwd", f"{old}/progs/masq_veth_in", f"{old}/progs/masq_up_egress",
              f"{old}/progs/masq_up_ingress", f"{new}/maps/attachments", f"{new}/progs/masq_veth_in",
              f"{new}/progs/masq_up_egress", f"{new}/progs/masq_up_ingress"]
    for d in decoys:
        os.makedirs(os.path.join(pin, d))  # bpffs allows directories
    others = {v: pin_tree(os.path.join(pin, v)) for v in (old, new)}

    net = masq_network(t, plugin)
    pod = net.add(t.pod_ns())
    assert sorted(os.listdir(pin)) == sorted([old, cur, new])
    tree = pin_tree(os.path.join(pin, cur))
    assert {"maps", "progs", "progs/masq_veth_in", "progs/masq_up_egress", "progs/masq_up_ingress",
            "maps/attachments", "maps/nat4_fwd", "maps/nat6_fwd"} <= set(tree), tree
    s = status(t, plugin)
    assert s["layout_version"] == LAYOUT and s["pin_path"] == os.path.join(pin, cur), s
    assert_masqueraded(t, pod, 5001)

    conf = masq_conf(t, net.name, "1.1.0", **{"cni.dev/valid-attachments": []})
    for verb in ("GC", "STATUS"):
        r = invoke(t, plugin, verb, conf, ifname=None)
        assert r.rc == 0, r.log
    net.delete(pod.ns)
    assert {v: pin_tree(os.path.join(pin, v)) for v in (old, new)} == others
    assert sorted(os.listdir(pin)) == sorted([old, cur, new])


def hook_prog_ids(t, dev="eth0"):
    """{direction: [(kind, program id)]} of the BPF programs on dev's hooks."""
    out = {}
    for d in ("egress", "ingress"):
        text = t.node.bpf_hooks(dev, d)
        out[d] = [("tcx" if line.startswith("tcx") else "tc", int(m.group(1)))
                  for line in text.splitlines() if (m := re.search(r"\bid (\d+)", line))]
    return out


def pinned_prog_id(t, path):
    p = t.node.enter(["bpftool", "-j", "prog", "show", "pinned", path])
    return json.loads(p.stdout)["id"]


def reserved_ports(t):
    return t.node.exec(["cat", "/proc/sys/net/ipv4/ip_local_reserved_ports"]).stdout.strip()


def reserve_as_older_version(t, layout, lo, hi):
    """What a binary before layout 11 did at ADD: add portRange to
    ip_local_reserved_ports and record it in its pins (reserved_ports slot 0)."""
    record = f"{t.lab.pin_path}/v{layout}/maps/reserved_ports"
    value = abi.hexes(abi.btf_of(t, layout).pack("port_range", lo=lo, hi=hi))
    t.node.enter(["bpftool", "map", "update", "pinned", record, "key", "hex", "00", "00", "00", "00",
                  "value", "hex", *value])
    before = reserved_ports(t)
    t.node.sysctl("net.ipv4.ip_local_reserved_ports", f"{before},{lo}-{hi}" if before else f"{lo}-{hi}")


def fast_path_l3_ifindex(t, addr):
    """The l3_ifindex of the L2 facts in `addr`'s pods4 entry (bpftool, decoded by
    the programs' BTF: pod_info.l2.l3_ifindex)."""
    path = f"{t.lab.pin_path}/v{LAYOUT}/maps/pods4"
    key = [str(int(b)) for b in addr.split(".")]
    p = t.node.enter(["bpftool", "-j", "map", "lookup", "pinned", path, "key", *key])
    return abi.btf_of(t).field("pod_info", "l2.l3_ifindex", abi.raw(json.loads(p.stdout)["value"]))


def test_upgrade_adopts_the_older_layouts_pods_links_and_flows(t, plugin, tmp_path):
    """A binary with a new pin layout adopts an older layout's data plane at its
    first ADD: the old binary's pod stays masqueraded and can be deleted, its
    flow keeps its NAT port, each uplink hook keeps exactly one program (the old
    TCX link taken over, the new program in it), and the old pins are gone.
    The old binary is this one keeping its pins as layout LAYOUT-1
    (EBPF_MASQ_TEST_AS_LAYOUT): the adoption path is the same. With
    EBPF_MASQ_PREV_BIN set to a real binary of layout LAYOUT-1, that one is."""
    old_v, pin = LAYOUT - 1, t.lab.pin_path
    ports_before = reserved_ports(t)
    net = masq_network(t, plugin)
    prev = os.environ.get("EBPF_MASQ_PREV_BIN")
    link = t.cni_bin / "ebpf-masq"
    if prev:
        link.unlink()
        link.symlink_to(os.path.realpath(prev))
    net.env["EBPF_MASQ_TEST_AS_LAYOUT"] = str(old_v)
    a = net.add(t.pod_ns("a"))
    assert sorted(os.listdir(pin)) == [f"v{old_v}"]
    old_hooks = hook_prog_ids(t)
    assert [k for k, _ in old_hooks["egress"]] == ["tcx"] and [k for k, _ in old_hooks["ingress"]] == ["tcx"], old_hooks
    if reserved_ports(t) == ports_before:
        # This binary reserves nothing, nor does a real layout-11 one: stage the
        # record and sysctl that versions before layout 11 left.
        reserve_as_older_version(t, old_v, 1024, 29999)
    assert reserved_ports(t) != ports_before
    srv = t.ext.server("udp", 5001)
    rc, res = a.ns.client("udp", EXT, 5001, bind_port=41000)
    assert rc == 0, res
    seen = {(r["addr"], r["port"]) for r in srv.records("dgram")}
    assert len(seen) == 1 and next(iter(seen))[0] == NODE_IP, seen

    # The upgrade: the next ADD is the new binary's.
    del net.env["EBPF_MASQ_TEST_AS_LAYOUT"]
    if prev:
        link.unlink()
        link.symlink_to(os.path.realpath(plugin))
    b = net.add(t.pod_ns("b"))
    assert sorted(os.listdir(pin)) == [f"v{LAYOUT}"], "the old layout's pins stayed"
    new_hooks = hook_prog_ids(t)
    progs = f"{pin}/v{LAYOUT}/progs"
    assert new_hooks == {"egress": [("tcx", pinned_prog_id(t, f"{progs}/masq_up_egress"))],
                         "ingress": [("tcx", pinned_prog_id(t, f"{progs}/masq_up_ingress"))]}, (old_hooks, new_hooks)
    assert sorted(os.listdir(f"{pin}/v{LAYOUT}/links")), "the TCX links were not taken over"
    assert set(registrations(t, plugin)) == {cid(a.ns), cid(b.ns)}
    # The old pod's L2 facts (the fast path's) came along into its pods4 entry.
    assert fast_path_l3_ifindex(t, a.ip) == fast_path_l3_ifindex(t, b.ip) != 0
    # The old pod's flow kept its pair: same NAT port after the upgrade.
    assert [f["pod_port"] for f in nat_flows(t, plugin, a.ip)] == [41000]
    rc, res = a.ns.client("udp", EXT, 5001, bind_port=41000)
    assert rc == 0, res
    assert {(r["addr"], r["port"]) for r in srv.records("dgram")} == seen
    assert_masqueraded(t, a, 5002)
    assert_masqueraded(t, b, 5003)
    # The old pod's veth has its entry in the new layout (counters restart at adoption): its packets count.
    pods = {p["container_id"]: p for p in status(t, plugin)["pods"]}
    assert pods[cid(a.ns)]["packets"] > 0, pods
    # The old binary's pod is the new one's to delete: its pairs and its veth program go.
    net.delete(a.ns)
    assert set(registrations(t, plugin)) == {cid(b.ns)}
    assert nat_flows(t, plugin, a.ip) == []
    assert_masqueraded(t, b, 5004)
    # The old binary's reserved ports came along with its record and were given
    # back at the upgrade ADD: this version reserves none (host flows are tracked).
    assert reserved_ports(t) == ports_before
    t.node.enter([plugin, "uninstall", "--cni-conf-dir", tmp_path, "--pin-path", pin])
    assert reserved_ports(t) == ports_before


def test_upgrade_detaches_an_older_layouts_uplink_the_new_config_drops(t, plugin):
    """An upgrade and a config change at once: the older layout masqueraded out
    eth0 and a second uplink, with tc filters (which, unlike TCX links, do not
    go with their pins); the new binary's config names eth0 only. After the
    upgrade ADD the second uplink carries no program (the older layout's filter
    would keep running its program, unpinned, on maps no binary reads any more),
    eth0 exactly the new pair, and both pods are masqueraded."""
    t.lab.veth(t.node, "up2", "10.9.9.1/24", t.lab.netns("far"), "eth0", "10.9.9.2/24")
    old = masq_network(t, plugin, last=100, egressInterfaces=["eth0", "up2"])
    old.env.update(EBPF_MASQ_TEST_AS_LAYOUT=str(LAYOUT - 1), EBPF_MASQ_ATTACH="tc")
    a = old.add(t.pod_ns("a"))
    for d in ("egress", "ingress"):
        assert has_masq_filter(t, "up2", d) and has_masq_filter(t, "eth0", d), d

    new = masq_network(t, plugin, first=101, egressInterfaces=["eth0"])
    b = new.add(t.pod_ns("b"))
    assert sorted(os.listdir(t.lab.pin_path)) == [f"v{LAYOUT}"], "the old layout's pins stayed"
    for d in ("egress", "ingress"):
        assert not has_masq_filter(t, "up2", d), (d, t.node.bpf_hooks("up2", d))
    progs = f"{t.lab.pin_path}/v{LAYOUT}/progs"
    assert hook_prog_ids(t) == {"egress": [("tcx", pinned_prog_id(t, f"{progs}/masq_up_egress"))],
                                "ingress": [("tcx", pinned_prog_id(t, f"{progs}/masq_up_ingress"))]}
    assert_masqueraded(t, a, 5001)
    assert_masqueraded(t, b, 5002)


def test_uninstall_also_removes_an_older_layout_not_adopted_yet(t, plugin, tmp_path):
    """Upgraded binary, no ADD or `apply` since: the node still runs the older
    layout's data plane. uninstall detaches and removes that one too, and gives
    back the ports it reserved."""
    pin = t.lab.pin_path
    before = reserved_ports(t)
    net = masq_network(t, plugin)
    net.env["EBPF_MASQ_TEST_AS_LAYOUT"] = str(LAYOUT - 1)
    a = net.add(t.pod_ns("a"))
    assert sorted(os.listdir(pin)) == [f"v{LAYOUT - 1}"]
    reserve_as_older_version(t, LAYOUT - 1, 1024, 29999)
    assert reserved_ports(t) != before and has_masq_filter(t, a.host_veth)
    p = t.node.enter([plugin, "uninstall", "--cni-conf-dir", tmp_path, "--pin-path", pin])
    assert not os.path.exists(pin), (p.stdout, os.listdir(pin))
    assert hook_prog_ids(t) == {"egress": [], "ingress": []}
    assert not has_masq_filter(t, a.host_veth)
    assert reserved_ports(t) == before
