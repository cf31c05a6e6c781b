"""Who a pod is reaches its registration: the Kubernetes namespace
and name from CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, as containerd's and CRI-O's
CRI plugins pass them) and the pod's ebpf-masq.io/ annotations from runtimeConfig,
which libcni fills for the io.kubernetes.cri.pod-annotations capability the chained
entry declares. Driven by cnitool (libcni): CNI_ARGS, and CAP_ARGS for the
capability. Shown by `status` and `nat list`; gone with DEL; bad CNI_ARGS fail the
ADD (code 4, naming the variable) leaving nothing.
"""
import json
import os

from lab import masqcli
from lab.abi import LAYOUT
from lab.netlab import Topo, sh

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
CAP = "io.kubernetes.cri.pod-annotations"


def pod_meta_entries(topo):
    out = sh(["bpftool", "-j", "map", "dump", "pinned", f"{topo.lab.pin_path}/v{LAYOUT}/maps/pod_meta"]).stdout
    return json.loads(out)


def test_namespace_name_and_annotations_reach_the_registration(topo, plugin):
    net = topo.masq_network(plugin, capabilities={CAP: True})
    ns = topo.pod_ns("pod")
    annotations = {"ebpf-masq.io/owner": "shop-team", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
    env = {**net.env, "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=u-1",
           "CAP_ARGS": json.dumps({CAP: annotations})}
    topo.node.enter(["cnitool", "add", net.name, ns.path], env=env)
    net.pods.append(ns)
    [p] = topo.status(plugin)["pods"]
    assert (p["k8s_namespace"], p["k8s_name"]) == ("shop", "web-0"), p
    assert p["annotations"] == {"ebpf-masq.io/owner": "shop-team"}, p  # only ours are kept
    text = masqcli.run(topo, plugin, "status").stdout
    assert "pod shop/web-0 " in text and "ebpf-masq.io/owner" in text, text

    udp = topo.ext.server("udp", 5001)
    assert ns.client("udp", EXT, 5001)[0] == 0
    assert udp.addrs() == {NODE_IP}
    [flow] = [f for f in topo.nat_list(plugin) if f["remote_port"] == 5001]
    assert flow["k8s_pod"] == "shop/web-0", flow
    listing = masqcli.run(topo, plugin, "nat", "list").stdout
    assert "pod shop/web-0" in listing, listing

    assert len(pod_meta_entries(topo)) == 1
    topo.node.enter(["cnitool", "del", net.name, ns.path], env=env)
    net.pods.remove(ns)
    assert topo.status(plugin)["pods"] == []
    assert pod_meta_entries(topo) == []


def test_without_k8s_args_the_pod_is_unnamed(topo, plugin, masq_pod):
    net, pod = masq_pod()
    [p] = topo.status(plugin)["pods"]
    assert (p["k8s_namespace"], p["k8s_name"], p["annotations"]) == ("", "", {}), p
    assert pod.ns.client("udp", EXT, 5001)[0] in (0, 1)  # any flow
    assert all(f["k8s_pod"] is None for f in topo.nat_list(plugin))


def test_bad_cni_args_fail_the_add_and_leave_nothing(topo, plugin):
    net = topo.masq_network(plugin)
    ns = topo.pod_ns("pod")
    env = {**net.env, "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + "n" * 64}
    p = topo.node.enter(["cnitool", "add", net.name, ns.path], env=env, check=False)
    assert p.returncode != 0
    assert "CNI_ARGS" in p.stdout + p.stderr and "63 at most" in p.stdout + p.stderr, p
    # cnitool does not DEL after a failed ADD; a runtime does, and then nothing is left.
    topo.node.enter(["cnitool", "del", net.name, ns.path], env=env, check=False)
    # The arguments are checked before anything is made: not even a data plane.
    assert not os.path.exists(f"{topo.lab.pin_path}/v{LAYOUT}"), os.listdir(topo.lab.pin_path)
