"""CNI verb behaviour of ebpf-masq: VERSION, ADD/CHECK/DEL per spec version, DEL
corner cases runtimes produce, GC and STATUS (CNI 1.1), concurrency, failed ADDs,
and a node reboot (the pin layout and upgrades: test_upgrade.py).

cnitool here is built against libcni 1.1.2 and the reference plugins are 1.1.1:
neither knows CNI 1.1.0, so 1.1.0 ADD/CHECK/DEL/GC/STATUS are direct plugin
calls, with the bridge's (1.0.0-format, identical to 1.1.0) result as prevResult.
"""
import copy
import json
import os
import shutil
import subprocess
import time

import pytest

from lab.abi import LAYOUT
from lab.lifelab import (assert_masqueraded, bridge, cid, detach_behind_our_back, has_masq_filter, invoke, invoke_pod,
                         masq_conf, masq_network, nat_flows, network, parallel, pin_tree, registrations, status)
from lab.netlab import Pod, Topo, wait_for

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
VERSIONS = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]  # 0.3.1: what Calico and Flannel ship


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
