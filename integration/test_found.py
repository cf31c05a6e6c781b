"""Never fail open: a pod whose ADD never reached ebpf-masq still never leaves
with its pod address.

Such pods exist on every real node: started before the agent had chained the
plugin (every boot, every DaemonSet rollout gap), or while the main plugin's
agent had rewritten its conflist without our entry, or while our agent was down.
The agent finds them in libcni's result cache (where cnitool, containerd and
CRI-O keep every ADD's result) and registers them as their ADD would have; until
then, the uplink drops what they send where a pod's packet would be masqueraded
(the node's pod ranges: podCIDRs and the subnets registered pods teach), and
counts it (drops{unregistered_pod}).

Each case sends a datagram every 20 ms from the pod to the remote the whole
time and captures at the remote: the pod leaves with the node address within
10 s of the agent's start, and not one packet carries the pod address from then
on (where the data plane is already loaded: not one at all). `status` names the
pod, marked found; its DEL, or its disappearance, leaves nothing behind.
"""
import json
import os
import signal
import time

from lab.netlab import PY, Pod, Topo, wait_for
from lab.agentlab import Agent, entry_of
from lab import masqcli

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT

# A datagram every 20 ms to (host, port) until killed; each carries its send time.
SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
while True:
    try:
        s.sendto(str(time.time()).encode(), (sys.argv[1], int(sys.argv[2])))
    except OSError:
        pass  # an ICMP error of the previous datagram: keep sending
    time.sleep(0.02)
"""


def add_named(net, ns, namespace, name, env=None):
    """cnitool add with the pod's Kubernetes identity in CNI_ARGS, as kubelet's runtimes pass it."""
    env = {**(env or net.env), "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"}
    net.pods.append(ns)
    return Pod(ns, json.loads(net.cnitool("add", ns, env=env).stdout))


def main_plugin_only(net, lab):
    """A NETCONFPATH holding the network's conflist as the main plugin writes it
    (no ebpf-masq entry): an ADD through it is one that never reaches us."""
    d = lab.tmp / f"main-only-{net.name}"
    d.mkdir(exist_ok=True)
    (d / f"{net.name}.conflist").write_text(json.dumps(net.conf, indent=2))
    return {**net.env, "NETCONFPATH": str(d)}


def arrivals(cap, port):
    """(arrival time, source address) of each datagram to @port in the capture, in order."""
    from scapy.all import IP, UDP
    return [(float(p.time), p[IP].src) for p in cap.packets() if IP in p and UDP in p and p[UDP].dport == port]


def applied_at(agent):
    """When the agent had the data plane in place (its "config result=applied" line): the
    first load verifies the programs, which a busy machine can stretch; the 10 s the pod
    has to be masqueraded in are counted from the later of this and the agent's start."""
    for line in agent.log.read_text().splitlines():
        if "agent=config result=applied" in line:
            return float(line.split("ts=")[1].split()[0])
    raise AssertionError(f"the agent never applied its config:\n{agent.log.read_text()}")


def pods_of(topo, plugin):
    return {p["veth"]: p for p in topo.status(plugin)["pods"]}


def test_a_pod_started_before_the_agent_is_found_and_masqueraded(topo, plugin, lab):
    """cnitool adds a pod through the main plugin's conflist alone (the agent is not
    running: no data plane at all, as at a node's boot); then the agent starts."""
    net = topo.network([topo.bridge_plugin()])
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)  # an unmasqueraded pod would be answered
    pod = add_named(net, topo.pod_ns("early"), "shop", "early-0")
    port = 5101
    with topo.ext.capture("eth0", f"udp and dst port {port}") as cap:
        sender = pod.ns.spawn([PY, "-c", SENDER, EXT, port])
        wait_for(lambda: len(arrivals(cap, port)) >= 5, timeout=10, what="the pod's datagrams at the remote")
        started = time.time()
        a = Agent(topo, plugin, lab, net, "--gc-interval", "1")
        wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=90, what="agent ready")
        wait_for(lambda: any(src == NODE_IP for _, src in arrivals(cap, port)), timeout=10,
                 what="the pod's datagrams leaving with the node address")
        wait_for(lambda: sum(src == NODE_IP for _, src in arrivals(cap, port)) >= 50, timeout=10,
                 what="a second of masqueraded datagrams")
        lab.stop(sender)
    seen = arrivals(cap, port)
    first_masq = next(t for t, src in seen if src == NODE_IP)
    assert seen[0][1] == pod.ip, "before the agent, nothing translates it (what every node boot had)"
    since = max(started, applied_at(a))
    assert first_masq - since < 10, \
        f"masqueraded {first_masq - since:.1f} s after the agent started and applied:\n{a.log.read_text()}"
    leaked = [t for t, src in seen if src == pod.ip and t > first_masq]
    assert leaked == [], f"{len(leaked)} datagrams with the pod address after the first masqueraded one"
    assert {src for _, src in seen} == {pod.ip, NODE_IP}

    # status names it, found; /healthz waited for it; the log says why it was registered.
    p = pods_of(topo, plugin)[pod.host_veth]
    assert (p["k8s_namespace"], p["k8s_name"], p["found"], p["addresses"]) == ("shop", "early-0", True, [pod.ip]), p
    assert p["veth_attached"] is True
    assert a.metric("ebpf_masq_agent_pods_found_total") == 1
    assert any("agent=discover registered=shop/early-0" in l for l in a.log.read_text().splitlines())
    s = topo.status(plugin)
    assert s["pods_found"] == 1
    assert {"cidr": "10.244.1.0/24", "origin": "learned"} in s["config"]["pod_nets"]

    # Its DEL, now through the chained conflist, leaves nothing behind.
    assert entry_of(net.dir / f"{net.name}.conflist")
    net.delete(pod.ns)
    net.pods.remove(pod.ns)
    s = topo.status(plugin)
    assert s["pods"] == [] and s["nat_flows_v4"] == 0, s["pods"]
    # And the agent does not find it again (its cache entry went with the DEL).
    count = a.metric("ebpf_masq_agent_pods_found_total")
    wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=15, what="still healthy")
    assert a.metric("ebpf_masq_agent_pods_found_total") == count == 1
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(10) == 0


def test_pods_added_while_the_agent_was_killed_never_leak(topo, plugin, lab):
    """The agent is killed with SIGKILL; the main plugin rewrites its conflist
    without our entry; a pod is added meanwhile. The data plane stays loaded, so
    the new pod's datagrams are dropped, not let out with its address, until the
    agent, started again, registers it; then they leave with the node address."""
    net = topo.network([topo.bridge_plugin()])
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)
    a = Agent(topo, plugin, lab, net, "--gc-interval", "1")
    wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=90, what="agent ready")
    first = add_named(net, topo.pod_ns("first"), "shop", "first-0")  # through the chain: teaches the subnet
    assert pods_of(topo, plugin)[first.host_veth]["found"] is False
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    conflist = net.dir / f"{net.name}.conflist"
    conflist.write_text(json.dumps(net.conf, indent=2))  # the main plugin's agent writes its own
    port = 5102
    with topo.ext.capture("eth0", f"udp and dst port {port}") as cap:
        late = add_named(net, topo.pod_ns("late"), "shop", "late-0")
        sender = late.ns.spawn([PY, "-c", SENDER, EXT, port])
        wait_for(lambda: topo.status(plugin)["drops"]["unregistered_pod"] >= 25, timeout=10,
                 what="the unregistered pod's datagrams dropped")
        assert late.host_veth not in pods_of(topo, plugin)
        b = Agent(topo, plugin, lab, net, "--gc-interval", "1")
        wait_for(lambda: b.alive() and b.get("/healthz")[0] == 200, timeout=90, what="agent ready again")
        wait_for(lambda: any(src == NODE_IP for _, src in arrivals(cap, port)), timeout=10,
                 what="the found pod's datagrams leaving with the node address")
        wait_for(lambda: sum(src == NODE_IP for _, src in arrivals(cap, port)) >= 50, timeout=10,
                 what="a second of masqueraded datagrams")
        lab.stop(sender)
    seen = arrivals(cap, port)
    assert seen and {src for _, src in seen} == {NODE_IP}, f"{sum(s == late.ip for _, s in seen)} leaked"
    p = pods_of(topo, plugin)[late.host_veth]
    assert (p["k8s_namespace"], p["k8s_name"], p["found"]) == ("shop", "late-0", True), p
    assert entry_of(conflist), "chained again"

    # The pod disappears without a DEL (its netns torn down under the runtime): the
    # GC removes its registration, and its cache entry is never registered again.
    net.pods.remove(late.ns)
    topo.node.ip("link", "del", late.host_veth)
    wait_for(lambda: b.alive() and late.host_veth not in pods_of(topo, plugin), timeout=15, what="found pod GC'd")
    found = b.metric("ebpf_masq_agent_pods_found_total")
    wait_for(lambda: b.metric("ebpf_masq_agent_gc_removed_total") == 1, timeout=15, what="GC counted")
    assert b.metric("ebpf_masq_agent_pods_found_total") == found == 1
    assert set(pods_of(topo, plugin)) == {first.host_veth}
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(10) == 0


def test_a_pod_added_right_after_the_conflist_was_rewritten(topo, plugin, lab):
    """The agent runs; the main plugin's agent rewrites the conflist and a pod is
    added before ours chains it again (its ADD never reaches us). Not one of its
    datagrams leaves with its address: dropped until found, then masqueraded."""
    net = topo.network([topo.bridge_plugin()])
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)
    a = Agent(topo, plugin, lab, net, "--gc-interval", "1")
    wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=90, what="agent ready")
    add_named(net, topo.pod_ns("first"), "shop", "first-0")
    port = 5103
    with topo.ext.capture("eth0", f"udp and dst port {port}") as cap:
        pod = add_named(net, topo.pod_ns("gap"), "shop", "gap-0", env=main_plugin_only(net, lab))
        sender = pod.ns.spawn([PY, "-c", SENDER, EXT, port])
        wait_for(lambda: sum(src == NODE_IP for _, src in arrivals(cap, port)) >= 50, timeout=10,
                 what="a second of masqueraded datagrams")
        lab.stop(sender)
    seen = arrivals(cap, port)
    assert {src for _, src in seen} == {NODE_IP}, f"{sum(s == pod.ip for _, s in seen)} leaked"
    assert pods_of(topo, plugin)[pod.host_veth]["found"] is True
    assert a.metric("ebpf_masq_agent_pods_found_total") == 1
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(10) == 0


def test_corrupt_truncated_and_foreign_cache_files_are_skipped_with_one_line(topo, plugin, lab):
    """Files in the cache that are not libcni's results (corrupt, truncated, of
    another kind) are each told once and skipped; the agent stays up and ready,
    and a real pod beside them is still found. A pod's file read while libcni was
    still writing it (libcni writes in place) is read again once written whole."""
    net = topo.network([topo.bridge_plugin()])
    cache = lab.tmp / "cni-cache"
    (cache / "results").mkdir(parents=True)
    pod = add_named(net, topo.pod_ns("ok"), "shop", "ok-0")
    real = next(p for p in (os.listdir("/var/lib/cni/results")) if p.startswith(f"{net.name}-"))
    whole = open(f"/var/lib/cni/results/{real}", "rb").read()
    (cache / "results" / real).write_bytes(whole)
    slow = add_named(net, topo.pod_ns("slow"), "shop", "slow-0")
    slow_name = next(p for p in os.listdir("/var/lib/cni/results") if p.startswith(f"{net.name}-") and p != real)
    slow_whole = open(f"/var/lib/cni/results/{slow_name}", "rb").read()
    (cache / "results" / slow_name).write_bytes(slow_whole[:40])
    bad = {
        f"{net.name}-corrupt-eth0": b"\x00\xff\x13 not json",
        f"{net.name}-truncated-eth0": whole[: len(whole) // 2],
        f"{net.name}-foreign-eth0": json.dumps({"kind": "somethingElse", "containerId": "x"}).encode(),
    }
    for name, data in bad.items():
        (cache / "results" / name).write_bytes(data)
    a = Agent(topo, plugin, lab, net, "--cni-cache-dir", cache)
    wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=90, what="agent ready")
    assert pods_of(topo, plugin)[pod.host_veth]["found"] is True
    assert slow.host_veth not in pods_of(topo, plugin)
    assert a.metric("ebpf_masq_agent_cni_cache_files_skipped") == 4
    time.sleep(11)  # past a periodic pass: each bad file is told once, not again
    lines = [l for l in a.log.read_text().splitlines() if "agent=discover file=" in l]
    assert sorted(l.split("file=")[1].split()[0].rsplit("/", 1)[1] for l in lines) == sorted([*bad, slow_name]), lines
    assert a.alive() and a.get("/healthz")[0] == 200
    # libcni finishes writing the slow pod's file: read again, the pod found.
    (cache / "results" / slow_name).write_bytes(slow_whole)
    wait_for(lambda: slow.host_veth in pods_of(topo, plugin), timeout=15, what="the rewritten file's pod found")
    assert pods_of(topo, plugin)[slow.host_veth]["found"] is True
    assert a.metric("ebpf_masq_agent_cni_cache_files_skipped") == 3
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(10) == 0


def test_a_cri_sandbox_started_before_the_agent_is_found_with_its_name_and_annotations(topo, plugin, lab):
    """kubelet's path: containerd's CRI plugin runs a pod sandbox through the main
    plugin's conflist alone; then the agent starts, chains ebpf-masq into that
    conflist and finds the sandbox in the cache containerd wrote. Its registration
    is what its ADD would have made (name, annotations, hostPorts), its traffic
    leaves with the node address within 10 s, and kubelet's StopPodSandbox and
    RemovePodSandbox, now through the chain, leave nothing behind."""
    from lab import netlab
    from lab.crilab import CriContainerd

    conflist = {"cniVersion": "1.0.0", "name": f"{lab.prefix}cri", "plugins": [topo.bridge_plugin()]}
    cri = CriContainerd(lab, topo.node, conflist, plugin)
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)
    sid = cri.run_pod_sandbox("web-0", "shop", {"ebpf-masq.io/owner": "shop-team", "example.com/team": "shop"},
                              host_ports=[(8080, 80, "tcp")])
    st, _ = cri.status(sid)
    pod_ip = st.network.ip
    pod = netlab.Netns(lab, "cri-sandbox")
    pod.path = cri.netns(sid)
    port = 5104

    class MainPluginDir:
        dir = cri.conf_dir

    with topo.ext.capture("eth0", f"udp and dst port {port}") as cap:
        sender = pod.spawn([PY, "-c", SENDER, EXT, port], enter=True)
        wait_for(lambda: len(arrivals(cap, port)) >= 5, timeout=10, what="the sandbox's datagrams at the remote")
        started = time.time()
        a = Agent(topo, plugin, lab, MainPluginDir, "--gc-interval", "1")
        wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=90, what="agent ready")
        wait_for(lambda: sum(src == NODE_IP for _, src in arrivals(cap, port)) >= 50, timeout=10,
                 what="a second of masqueraded datagrams")
        lab.stop(sender)
    seen = arrivals(cap, port)
    first_masq = next(t for t, src in seen if src == NODE_IP)
    since = max(started, applied_at(a))
    assert first_masq - since < 10, \
        f"masqueraded {first_masq - since:.1f} s after the agent started and applied:\n{a.log.read_text()}"
    leaked = [t for t, src in seen if src == pod_ip and t > first_masq]
    assert leaked == [], f"{len(leaked)} datagrams with the pod address after the first masqueraded one"

    [reg] = topo.status(plugin)["pods"]
    assert (reg["container_id"], reg["addresses"], reg["found"]) == (sid, [pod_ip], True), reg
    assert (reg["k8s_namespace"], reg["k8s_name"]) == ("shop", "web-0"), reg
    assert reg["annotations"] == {"ebpf-masq.io/owner": "shop-team"}, reg
    assert reg["host_ports"] == ["8080/tcp"], reg
    assert [p["type"] for p in json.loads((cri.conf_dir / f"10-{conflist['name']}.conflist").read_text())["plugins"]] \
        == ["bridge", "ebpf-masq"]

    # kubelet tears it down through the chained conflist: nothing of it is left.
    cri.stop(sid)
    cri.remove(sid)
    s = topo.status(plugin)
    assert s["pods"] == [] and [f for f in topo.nat_list(plugin) if f["pod_addr"] == pod_ip] == [], s["pods"]
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(10) == 0


def test_a_config_change_of_pod_cidrs_keeps_the_subnets_pods_taught(topo, plugin, lab):
    """podCIDRs is the config's; a subnet learned from a registered pod's prevResult
    is the node's (it outlives its pods): `apply` with a shorter podCIDRs removes
    only the configured range it no longer lists, and an unregistered source in the
    learned subnet is still held back."""
    net = topo.masq_network(plugin, podCIDRs=["10.96.0.0/16", "fd00:96::/64"])
    pod = net.add(topo.pod_ns())
    origins = lambda: sorted((n["cidr"], n["origin"]) for n in topo.status(plugin)["config"]["pod_nets"])
    assert origins() == [("10.244.1.0/24", "learned"), ("10.96.0.0/16", "podCIDRs"),
                         ("fd00:96::/64", "podCIDRs")]
    conf = json.loads(json.dumps(net.conf))
    conf["plugins"][1]["podCIDRs"] = ["fd00:96::/64"]
    path = lab.tmp / "shorter.conflist"
    path.write_text(json.dumps(conf))
    topo.node.enter([plugin, "apply", "--conf", path])
    assert origins() == [("10.244.1.0/24", "learned"), ("fd00:96::/64", "podCIDRs")]
    e = masqcli.explain(topo, plugin, "--src", "10.244.1.200", "--dst", EXT)
    assert (e["verdict"], e["code"]) == ("drop", "unregistered_pod"), e
    # The pod itself is still masqueraded.
    assert pod.ip.startswith("10.244.1.")
    assert [p["addresses"] for p in topo.status(plugin)["pods"]] == [[pod.ip]]


def test_a_pod_being_deleted_is_not_found_again_between_our_del_and_the_main_plugins(topo, plugin, lab):
    """libcni runs a DEL's plugins in reverse: ebpf-masq's DEL first, then the main
    plugin's (which removes the veth), and it removes the cached result only after
    both. In between, the pod's cache entry and veth are still there: the agent's
    discovery must not take it for a pod whose ADD never reached us and register it
    again (a registration that outlives the pod, whose address IPAM hands out next).
    The test holds the DEL at that point: ebpf-masq's DEL alone; then a pod added
    through the main plugin alone, whose registration shows that a discovery pass
    ran after that DEL; then the rest of the DEL."""
    net = topo.network([topo.bridge_plugin()])
    a = Agent(topo, plugin, lab, net, "--gc-interval", "1")
    wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=90, what="agent ready")
    going = add_named(net, topo.pod_ns("going"), "shop", "going-0")  # through the chain
    assert pods_of(topo, plugin)[going.host_veth]["found"] is False
    chained = json.loads((net.dir / f"{net.name}.conflist").read_text())
    [entry] = entry_of(net.dir / f"{net.name}.conflist")
    conf = {"cniVersion": chained["cniVersion"], "name": chained["name"], **entry, "prevResult": going.result}
    rc, _, log = topo.run_plugin(plugin, "DEL", conf, going.ns)
    assert rc == 0, log
    assert going.host_veth not in pods_of(topo, plugin)
    marks = lambda: os.listdir(os.path.join(topo.status(plugin)["pin_path"], "deleted"))
    assert len(marks()) == 1

    late = add_named(net, topo.pod_ns("late"), "shop", "late-0", env=main_plugin_only(net, lab))
    wait_for(lambda: late.host_veth in pods_of(topo, plugin), timeout=15, what="a discovery pass after the DEL")
    assert going.host_veth not in pods_of(topo, plugin), "registered again between the two DELs"
    assert a.metric("ebpf_masq_agent_pods_found_total") == 1

    # The rest of the DEL (ours again, then the bridge's, then libcni removes the entry):
    # nothing of the pod is left, and its mark goes with its cache entry.
    net.delete(going.ns)
    net.pods.remove(going.ns)
    assert going.host_veth not in pods_of(topo, plugin)
    wait_for(lambda: marks() == [], timeout=15, what="the DEL's mark pruned with the cache entry")
    assert set(pods_of(topo, plugin)) == {late.host_veth}
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(10) == 0
