"""The kubelet path: containerd's CRI plugin runs the chain, driven by a
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

from lab import netlab
from lab.netlab import Topo, wait_for

EXT, NATIVE, NODE_IP = Topo.EXT, Topo.NATIVE, Topo.NODE_EXT
CAP = "io.kubernetes.cri.pod-annotations"


def test_run_stop_twice_remove_through_the_cri(topo, plugin, lab):
    from lab.crilab import CriContainerd

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


# Egress policies through the CRI: the pod annotation arrives as runtimeConfig.
PARTNER_ADDR, TEAM_B_ADDR = "10.0.0.14", "10.0.0.12"
POLICIES = [
    {"name": "partner", "namespaces": ["team-a"], "masqueradeAddress": PARTNER_ADDR},
    {"name": "team-b", "namespaces": ["team-b"], "masqueradeAddress": TEAM_B_ADDR},
]


def policy_cri(topo, plugin, lab):
    from lab.crilab import CriContainerd

    for a in (PARTNER_ADDR, TEAM_B_ADDR):  # the node owns the policy addresses on its uplink
        topo.node.ip("addr", "add", f"{a}/24", "dev", "eth0")
    log = lab.tmp / "ebpf-masq.log"
    masq = {**topo.masq_entry(egressPolicies=POLICIES, logFile=str(log), logLevel="debug"),
            "capabilities": {CAP: True}}
    conflist = {"cniVersion": "1.0.0", "name": f"{lab.prefix}cri", "plugins": [topo.bridge_plugin(), masq]}
    return CriContainerd(lab, topo.node, conflist, plugin), conflist, log


def sandbox_ns(lab, cri, sid):
    pod = netlab.Netns(lab, "cri-sandbox")
    pod.path = cri.netns(sid)
    return pod


def test_egress_policy_annotation_through_the_cri(topo, plugin, lab):
    cri, _, _ = policy_cri(topo, plugin, lab)
    sid = cri.run_pod_sandbox("web-0", "team-a", {"ebpf-masq.io/egress-policy": "partner"})
    st, _ = cri.status(sid)
    assert st.state == cri.pb.SANDBOX_READY, st
    pod_ip = st.network.ip
    udp, tcp = topo.ext.server("udp", 5001), topo.ext.server("tcp", 5000)
    pod = sandbox_ns(lab, cri, sid)
    assert pod.client("udp", EXT, 5001, enter=True)[0] == 0
    assert pod.client("tcp", EXT, 5000, enter=True)[0] == 0
    assert udp.addrs() == {PARTNER_ADDR} and tcp.addrs("done") == {PARTNER_ADDR}
    [reg] = topo.status(plugin)["pods"]
    assert (reg["k8s_namespace"], reg["k8s_name"]) == ("team-a", "web-0"), reg
    names = [p["name"] if isinstance(p, dict) else p for p in reg["egress_policies"]]
    assert names == ["partner"], reg
    flows = [f for f in topo.nat_list(plugin) if f["pod_addr"] == pod_ip]
    assert flows and {f["nat_addr"] for f in flows} == {PARTNER_ADDR}, flows


def test_a_refused_egress_annotation_fails_run_pod_sandbox_and_leaves_nothing(topo, plugin, lab):
    import grpc

    cri, conflist, log = policy_cri(topo, plugin, lab)
    ok = cri.run_pod_sandbox("web-0", "team-b")
    ok_ip = cri.status(ok)[0].network.ip
    before = (sorted(topo.node.links()), cri.netns_files(), topo.status(plugin)["pods"])
    assert len(before[1]) == 1, before  # the good sandbox's netns, seen where containerd keeps it
    leases = lab.tmp / "ipam" / conflist["name"]
    leases_before = sorted(p.name for p in leases.iterdir())

    try:
        cri.run_pod_sandbox("web-1", "team-b", {"ebpf-masq.io/egress-policy": "partner"})
        raise AssertionError("RunPodSandbox with a refused annotation succeeded")
    except grpc.RpcError as e:
        msg = e.details()
    assert 'annotation "ebpf-masq.io/egress-policy": policy "partner" does not select pod team-b/web-1' in msg, msg
    assert "its namespaces: team-a" in msg, msg

    # Nothing behind: the failed sandbox is gone with its netns and veth, no registration, no lease.
    wait_for(lambda: [s.id for s in cri.list_sandboxes()] == [ok], timeout=30, what="only the good sandbox left")
    after = (sorted(topo.node.links()), cri.netns_files(), topo.status(plugin)["pods"])
    assert [a for a in after[:2]] == [b for b in before[:2]], (before, after)
    assert [p["container_id"] for p in after[2]] == [ok], after[2]
    assert sorted(p.name for p in leases.iterdir()) == leases_before
    calls = [l for l in log.read_text().splitlines() if "verb=ADD" in l]
    assert len(calls) == 2 and "result=ok" in calls[0] and "result=ok" not in calls[1], calls

    # The good pod still leaves with its namespace's address.
    udp = topo.ext.server("udp", 5001)
    assert sandbox_ns(lab, cri, ok).client("udp", EXT, 5001, enter=True)[0] == 0
    assert udp.addrs() == {TEAM_B_ADDR}
    assert [f["nat_addr"] for f in topo.nat_list(plugin) if f["pod_addr"] == ok_ip] == [TEAM_B_ADDR]
