"""The kubelet path (issue 18): containerd's CRI plugin runs the chain, driven by a
real CRI client making kubelet's calls (crilab.py).

RunPodSandbox -> the pod's traffic to ext leaves with the node address, to the
native network (nativeRoutingCIDR) with its own; the registration carries the
pod's namespace and name (CNI_ARGS from the CRI plugin), its ebpf-masq.io/
annotations and its hostPorts (runtimeConfig, for the capabilities the entry
declares) ->
StopPodSandbox twice -> RemovePodSandbox -> nothing left: no registration, no NAT
pair of the pod, no host-local lease; every CNI call the runtime made succeeded.
"""
import json

import netlab
from netlab import Topo, wait_for

EXT, NATIVE, NODE_IP = Topo.EXT, Topo.NATIVE, Topo.NODE_EXT
CAP = "io.kubernetes.cri.pod-annotations"


def test_run_stop_twice_remove_through_the_cri(topo, plugin, lab):
    from crilab import CriContainerd

    log = lab.tmp / "ebpf-masq.log"
    masq = {**topo.masq_entry(nativeRoutingCIDR=["10.10.0.0/24"], logFile=str(log), logLevel="debug"),
            "capabilities": {CAP: True, "portMappings": True}}
    conflist = {"cniVersion": "1.0.0", "name": f"{lab.prefix}cri", "plugins": [topo.bridge_plugin(), masq]}
    cri = CriContainerd(lab, topo.node, conflist, plugin)

    annotations = {"ebpf-masq.io/owner": "shop-team", "example.com/team": "shop"}
    sid = cri.run_pod_sandbox("web-0", "shop", annotations, host_ports=[(8080, 80, "tcp")])
    st, _ = cri.status(sid)
    assert st.state == cri.pb.SANDBOX_READY, st
    pod_ip = st.network.ip
    assert pod_ip.startswith("10.244.1."), st

    # Traffic from the sandbox's network namespace.
    pod = netlab.Netns(lab, "cri-sandbox")
    pod.path = cri.netns(sid)
    ext, native = topo.ext.server("udp", 5001), topo.native.server("udp", 5002)
    assert pod.client("udp", EXT, 5001, enter=True)[0] == 0
    assert pod.client("udp", NATIVE, 5002, enter=True)[0] == 0
    assert ext.addrs() == {NODE_IP}
    assert native.addrs() == {pod_ip}  # nativeRoutingCIDR: never masqueraded

    s = topo.status(plugin)
    [reg] = s["pods"]
    assert reg["container_id"] == sid and reg["addresses"] == [pod_ip], reg
    assert (reg["k8s_namespace"], reg["k8s_name"]) == ("shop", "web-0"), reg
    assert reg["annotations"] == {"ebpf-masq.io/owner": "shop-team"}, reg
    assert reg["host_ports"] == ["8080/tcp"], reg  # the sandbox's port_mappings, kept off masqueraded flows
    flows = [f for f in topo.nat_list(plugin) if f["pod_addr"] == pod_ip]
    assert flows and all(f["k8s_pod"] == "shop/web-0" for f in flows), flows

    # kubelet: StopPodSandbox (it may repeat it), then RemovePodSandbox.
    cri.stop(sid)
    cri.stop(sid)
    cri.remove(sid)
    assert cri.list_sandboxes() == []
    s = topo.status(plugin)
    assert s["pods"] == [], s["pods"]
    assert not [f for f in topo.nat_list(plugin) if f["pod_addr"] == pod_ip]
    leases = lab.tmp / "ipam" / conflist["name"]
    wait_for(lambda: not (leases / pod_ip).exists(), timeout=10, what="the host-local lease released")

    calls = [l for l in log.read_text().splitlines() if "verb=" in l]
    verbs = [l.split("verb=")[1].split()[0] for l in calls]
    assert verbs.count("ADD") == 1 and verbs.count("DEL") >= 1, calls
    assert all("result=ok" in l for l in calls), calls
