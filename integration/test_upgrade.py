"""The versioned pin layout and upgrades: a binary keeps its data plane under
<pinPath>/v<LAYOUT>/, adopts an older layout's pods, TCX links and flows at its first
ADD, detaches an uplink the new config drops, and `uninstall` removes an older layout
not adopted yet.
"""
import json
import os
import re

import pytest

from lab import abi
from lab.abi import LAYOUT
from lab.lifelab import (assert_masqueraded, cid, has_masq_filter, invoke, masq_conf, masq_network, nat_flows, pin_tree,
                         registrations, status)
from lab.netlab import Topo

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT


@pytest.fixture
def t(topo):
    """The topology (short name: it is in nearly every call)."""
    return topo


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
