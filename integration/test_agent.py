"""`ebpf-masq agent`, the DaemonSet's main process, end to end.

The node's CNI conf dir holds the main plugin's conflist (bridge only, as Calico
or Flannel write theirs); the agent's config is a kubelet-style ConfigMap volume
(`ebpf-masq.json -> ..data/ebpf-masq.json`, `..data -> ..<timestamp>`, updated
by an atomic rename of `..data`). One agent, in the node netns, and real pods
added by cnitool through the conflist the agent chained:

- at start: binary copied, ebpf-masq chained, the data plane applied; a pod's
  traffic leaves with the node address; /healthz 200, /metrics answers;
- the main plugin rewrites its conflist without our entry: chained again, once,
  and never rewritten after (no loop with the main plugin's agent);
- a ConfigMap update (ext's subnet in nonMasqueradeCIDRs) changes what the
  running pod's traffic does, with no pod ADD;
- an invalid update keeps the behaviour in force and is reported: one log line
  naming the key, /healthz says so, ebpf_masq_agent_config_valid 0;
- a pod whose netns vanished without a DEL is unregistered by the agent's GC;
- SIGTERM: exit 0, chain and data plane still there, traffic still masqueraded;
- with --ip-masq-agent-config, ip-masq-agent's ConfigMap file (YAML or JSON, keys in
  any case) decides which destinations are not masqueraded, its defaults while it is
  absent, a change applied without a restart, status and explain naming it, an
  unknown key warned about, a bad file refused; a file refused at the agent's start
  leaves ip-masq-agent's defaults in force, or the list the chained entry kept.
"""
import json
import os
import secrets
import signal
import time

from lab import masqcli
from lab.agentlab import GET, Agent, ConfigMapVolume, entry_of
from lab.netlab import PY, Topo, wait_for

EXT, NODE_IP = Topo.EXT, Topo.NODE_EXT
# How long an agent may take to start healthy: it loads the data plane (the kernel's verifier takes
# seconds of CPU per program, and longer beside other tests). A deadline that only bounds a failure.
START = 90

def test_agent_keeps_chain_config_and_registrations(topo, plugin, lab):
    net = topo.network([topo.bridge_plugin()])  # the main plugin's conflist, not chained
    conflist = net.dir / f"{net.name}.conflist"
    main_plugin_bytes = conflist.read_bytes()
    # The return route to pods, for traffic that is not masqueraded.
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)
    a = Agent(topo, plugin, lab, net, "--gc-interval", "1")
    agent, vol, base, log, get, metric, alive = a.proc, a.vol, a.base, a.log, a.get, a.metric, a.alive

    # Start: chained, binary installed, data plane in place, healthy.
    wait_for(lambda: alive() and get("/healthz")[0] == 200, timeout=START, what="agent healthy")
    assert entry_of(conflist) == [{"type": "ebpf-masq", "pinPath": lab.pin_path,
                                 "capabilities": {"io.kubernetes.cri.pod-annotations": True,
                                                  "portMappings": True}}], conflist.read_text()
    assert (topo.cni_bin / "ebpf-masq").read_bytes() == plugin.read_bytes()
    assert get("/healthz") == (200, "ok\n")
    assert metric("ebpf_masq_data_plane_loaded") == 1 and metric("ebpf_masq_agent_config_valid") == 1
    udp = topo.ext.server("udp", 5001)
    pod = net.add(topo.pod_ns("pod"))
    assert pod.ns.client("udp", EXT, 5001)[0] == 0
    assert udp.addrs() == {NODE_IP}

    # The main plugin's agent rewrites its conflist (Calico, Flannel on restart): chained again.
    tmp = net.dir / ".rewrite"
    tmp.write_bytes(main_plugin_bytes)
    os.rename(tmp, conflist)
    wait_for(lambda: alive() and entry_of(conflist), timeout=15, what="re-chained")
    assert metric("ebpf_masq_agent_rechains_total") == 1
    st = conflist.stat()
    time.sleep(3)  # events of its own write, and a recheck or two: nothing is written again
    assert (conflist.stat().st_ino, conflist.stat().st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert metric("ebpf_masq_agent_rechains_total") == 1

    # A ConfigMap update changes the running pod's traffic, with no ADD.
    vol.publish({**base, "nonMasqueradeCIDRs": ["10.0.0.0/24"]})
    wait_for(lambda: alive() and metric("ebpf_masq_agent_config_reloads_total") == 1, timeout=15,
             what="config reloaded")
    assert entry_of(conflist)[0]["nonMasqueradeCIDRs"] == ["10.0.0.0/24"]  # the next ADD sees it too
    udp2 = topo.ext.server("udp", 5002)
    assert pod.ns.client("udp", EXT, 5002)[0] == 0
    assert udp2.addrs() == {pod.ip}

    # An invalid update: the config in force stays, and says why.
    vol.publish({**base, "nonMasqueradeCIDRs": ["10.0.0.0/24"], "portRange": "9-1"})
    wait_for(lambda: alive() and metric("ebpf_masq_agent_config_valid") == 0, timeout=15, what="update refused")
    status, body = get("/healthz")
    assert status == 200 and "config update rejected" in body and "portRange" in body, body
    assert metric("ebpf_masq_agent_config_rejections_total") == 1
    udp3 = topo.ext.server("udp", 5003)
    assert pod.ns.client("udp", EXT, 5003)[0] == 0
    assert udp3.addrs() == {pod.ip}  # still the previous config's behaviour
    assert entry_of(conflist)[0]["nonMasqueradeCIDRs"] == ["10.0.0.0/24"]
    time.sleep(11)  # past a periodic recheck: reported once, not again and again
    refused = [l for l in log.read_text().splitlines() if "result=rejected" in l]
    assert len(refused) == 1 and "portRange" in refused[0], refused

    # Back to the first config: masqueraded again.
    vol.publish(base)
    wait_for(lambda: alive() and metric("ebpf_masq_agent_config_valid") == 1, timeout=15, what="valid again")
    assert get("/healthz") == (200, "ok\n")
    udp4 = topo.ext.server("udp", 5004)
    assert pod.ns.client("udp", EXT, 5004)[0] == 0
    assert udp4.addrs() == {NODE_IP}

    # A pod whose netns vanished without a DEL: its registration is collected.
    gone = net.add(topo.pod_ns("gone"))

    def registered():
        s = topo.status(plugin)
        return {p["veth"] for p in s["pods"]}

    assert gone.host_veth in registered()
    net.pods.remove(gone.ns)
    topo.node.ip("link", "del", gone.host_veth)  # what a netns torn down under the runtime leaves
    wait_for(lambda: alive() and gone.host_veth not in registered(), timeout=15, what="stale registration GC'd")
    assert registered() == {pod.host_veth}
    assert metric("ebpf_masq_agent_gc_removed_total") == 1
    assert any("agent=gc removed=" in l and gone.host_veth in l for l in log.read_text().splitlines())

    # SIGTERM: exit 0, leaving chain and data plane; traffic still masqueraded.
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(10) == 0, log.read_text()
    assert entry_of(conflist) and get("/healthz")[0] is None
    udp5 = topo.ext.server("udp", 5005)
    assert pod.ns.client("udp", EXT, 5005)[0] == 0
    assert udp5.addrs() == {NODE_IP}


def test_agent_waits_for_the_main_plugin_and_rejects_a_bad_start(topo, plugin, lab):
    """No conflist yet (the main plugin's agent has not written it): 503 saying so,
    then chained once it appears. A bad --metrics-listen is a clear error."""
    conf_dir = lab.tmp / "net.d"
    conf_dir.mkdir()
    conf = lab.tmp / "ebpf-masq.json"
    conf.write_text(json.dumps({"cniVersion": "1.0.0", "name": "ebpf-masq", "type": "ebpf-masq",
                                "pinPath": lab.pin_path}))
    bad = topo.node.enter([plugin, "agent", "--conf", conf, "--cni-conf-dir", conf_dir, "--cni-bin-dir",
                           topo.cni_bin, "--metrics-listen", "localhost:9436"], check=False)
    assert bad.returncode == 1 and "--metrics-listen" in bad.stderr and "numeric" in bad.stderr, bad

    port = 20000 + secrets.randbelow(10000)
    log = lab.tmp / "agent.log"
    agent = topo.node.spawn([plugin, "agent", "--conf", conf, "--cni-conf-dir", conf_dir, "--cni-bin-dir",
                             topo.cni_bin, "--metrics-listen", f"127.0.0.1:{port}"], enter=True, stderr=log.open("w"))

    def health():
        p = topo.node.exec([PY, "-c", GET, f"http://127.0.0.1:{port}/healthz"], check=False, timeout=30)
        head, _, body = p.stdout.partition("\n")
        return (int(head), body) if head else (None, "")

    # Before its first pass it says "no config applied yet"; then why it cannot chain.
    wait_for(lambda: "no network config" in health()[1], timeout=30, what="agent up, saying why it is unhealthy")
    assert health()[0] == 503
    assert agent.poll() is None, log.read_text()
    main = {"cniVersion": "1.0.0", "name": "mynet", "plugins": [{"type": "bridge", "bridge": "cni0"}]}
    (conf_dir / "10-mynet.conflist").write_text(json.dumps(main))
    wait_for(lambda: health()[0] == 200, timeout=15, what="chained once the main plugin wrote its conflist")
    assert entry_of(conf_dir / "10-mynet.conflist")
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(10) == 0, log.read_text()


def test_agent_applies_an_egress_policy_change_to_running_pods(topo, plugin, lab):
    """Egress policies through the agent: a ConfigMap update that adds an egress
    policy reaches a pod already running (no ADD): its new flows leave with the
    policy's address, the metrics count them per policy; removing the policy
    gives the node address back."""
    net = topo.network([topo.bridge_plugin()])
    policy_addr = "10.0.0.11"
    topo.node.ip("addr", "add", f"{policy_addr}/24", "dev", "eth0")  # the node owns it on its uplink
    a = Agent(topo, plugin, lab, net)
    agent, vol, base, get = a.proc, a.vol, a.base, a.get

    def metrics():
        return get("/metrics")[1]

    def reloads():
        a.alive()
        return a.metric("ebpf_masq_agent_config_reloads_total")

    try:
        wait_for(lambda: reloads() is not None and get("/healthz")[0] == 200, timeout=START, what="agent healthy")
        net.env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0"
        pod = net.add(topo.pod_ns("pod"))
        udp = topo.ext.server("udp", 5001)
        assert pod.ns.client("udp", EXT, 5001)[0] == 0
        assert udp.addrs() == {NODE_IP}

        vol.publish({**base, "egressPolicies": [
            {"name": "team-a", "namespaces": ["team-a"], "masqueradeAddress": policy_addr}]})
        wait_for(lambda: reloads() == 1, timeout=15, what="config reloaded")
        udp2 = topo.ext.server("udp", 5002)
        assert pod.ns.client("udp", EXT, 5002)[0] == 0
        assert udp2.addrs() == {policy_addr}, "the running pod's new flow follows the policy"
        [row] = topo.status(plugin)["pods"]
        assert row["egress_policies"] == ["team-a"], row
        assert 'ebpf_masq_egress_policy_flows_total{policy="team-a"} 1' in metrics()

        vol.publish(base)
        wait_for(lambda: reloads() == 2, timeout=15, what="config reloaded again")
        udp3 = topo.ext.server("udp", 5003)
        assert pod.ns.client("udp", EXT, 5003)[0] == 0
        assert udp3.addrs() == {NODE_IP}
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)


def test_agent_applies_ip_masq_agents_config(topo, plugin, lab):
    """ip-masq-agent's ConfigMap (key `config` mounted as
    `ip-masq-agent`) read as it is. Absent: its defaults (RFC 1918, so ext's 10.0.0.2
    sees the pod). A YAML file listing 10.0.0.2/32: ext leaves with the pod address, a
    destination outside it is masqueraded (explain); status and explain name the file.
    A JSON update listing another destination (ext, now outside it, sees the node
    address) applies with no restart and no ADD. A file with
    a ConfigMap as real clusters carry it (`NonMasqueradeCIDRs`, `MasqLinkLocal`,
    `ResyncInterval`) applies as ip-masq-agent reads it, a key it does not know is
    ignored with one warning per distinct file, a bad CIDR is refused naming it and
    the previous list stays."""
    net = topo.network([topo.bridge_plugin()])
    conflist = net.dir / f"{net.name}.conflist"
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)
    ipm = ConfigMapVolume(lab.tmp / "ip-masq-agent", "ip-masq-agent")  # nothing published: absent
    a = Agent(topo, plugin, lab, net, "--ip-masq-agent-config", ipm.path)
    agent, get, metric, alive, port = a.proc, a.get, a.metric, a.alive, [6000]

    def seen(dst):
        """The source address `dst` saw for a new UDP flow of the pod."""
        port[0] += 1
        srv = topo.ext.server("udp", port[0])
        assert pod.ns.client("udp", dst, port[0])[0] == 0
        return srv.addrs()

    def exclusions():
        return {x["cidr"]: x.get("source") for x in topo.status(plugin)["config"]["exclusions"]}

    def explain_why(dst):
        return masqcli.explain(topo, plugin, "--src", pod.ip, "--dst", dst, "--proto", "udp", "--dport", "53")

    try:
        wait_for(lambda: alive() and get("/healthz")[0] == 200, timeout=START, what="agent healthy")
        pod = net.add(topo.pod_ns("pod"))
        defaults = f"ip-masq-agent config {ipm.path} (absent: ip-masq-agent's defaults)"
        assert exclusions() == {"10.0.0.0/8": defaults, "172.16.0.0/12": defaults, "192.168.0.0/16": defaults,
                                "169.254.0.0/16": defaults, "fe80::/10": defaults}
        assert seen(EXT) == {pod.ip}
        [entry] = entry_of(conflist)  # the next ADD reconciles to the same list
        assert entry["ipMasqAgent"]["fileAbsent"] is True and entry["ipMasqAgent"]["file"] == str(ipm.path)

        # The ConfigMap is created: YAML, as `kubectl create configmap --from-file config` holds it.
        ipm.publish("nonMasqueradeCIDRs:\n  - 10.0.0.2/32\nmasqLinkLocal: false\nresyncInterval: 5s\n")
        wait_for(lambda: alive() and metric("ebpf_masq_agent_config_reloads_total") == 1, timeout=15,
                 what="ip-masq-agent file applied")
        by = f"ip-masq-agent config {ipm.path}"
        assert exclusions() == {"10.0.0.2/32": by, "169.254.0.0/16": by, "fe80::/10": by}
        assert seen(EXT) == {pod.ip}
        e = explain_why(EXT)
        assert e["masqueraded"] is False and f"(by ip-masq-agent config {ipm.path})" in e["reason"], e
        assert e["exclusion"]["source"] == by, e
        text = masqcli.run(topo, plugin, "explain", "--src", pod.ip, "--dst", "10.0.0.2").stdout
        assert f"nonMasqueradeCIDRs 10.0.0.2/32 (by ip-masq-agent config {ipm.path})" in text, text
        text = masqcli.run(topo, plugin, "status").stdout
        assert "10.0.0.2/32" in text and f"(by ip-masq-agent config {ipm.path})" in text, text
        e = explain_why("10.0.0.3")
        assert e["masqueraded"] is True and e["exclusion"] is None, e

        # An update (JSON this time): ext is outside the new list, with no restart and no ADD.
        ipm.publish(json.dumps({"nonMasqueradeCIDRs": ["10.0.0.3/32"]}))
        wait_for(lambda: alive() and metric("ebpf_masq_agent_config_reloads_total") == 2, timeout=15,
                 what="ip-masq-agent update applied")
        assert seen(EXT) == {NODE_IP}
        assert explain_why("10.0.0.3")["exclusion"]["source"] == by
        assert entry_of(conflist)[0]["ipMasqAgent"]["nonMasqueradeCIDRs"] == ["10.0.0.3/32"]

        # As real clusters' ConfigMaps spell the keys (Go's decoder takes any case), with a key
        # no field takes: applied as ip-masq-agent applies it, the odd key warned about once.
        ipm.publish("NonMasqueradeCIDRs:\n  - 10.0.0.2/32\nMasqLinkLocal: false\nResyncInterval: 1s\n"
                    "masqLinkLocl: true\n")
        wait_for(lambda: alive() and metric("ebpf_masq_agent_config_reloads_total") == 3, timeout=15,
                 what="a ConfigMap with capitalised keys applied")
        assert metric("ebpf_masq_agent_config_valid") == 1
        assert seen(EXT) == {pod.ip}
        assert exclusions() == {"10.0.0.2/32": by, "169.254.0.0/16": by, "fe80::/10": by}
        assert entry_of(conflist)[0]["ipMasqAgent"]["nonMasqueradeCIDRs"] == ["10.0.0.2/32"]

        def warnings():
            return [l for l in a.log.read_text().splitlines() if "ignored_key=" in l]
        # Another distinct file (the agent has read the first one again meanwhile: resync 1s).
        ipm.publish("NonMasqueradeCIDRs: [10.0.0.2/32, 10.0.0.4/32]\nmasqLinkLocl: true\n")
        wait_for(lambda: alive() and metric("ebpf_masq_agent_config_reloads_total") == 4, timeout=15,
                 what="the next distinct file applied")
        w = warnings()
        assert len(w) == 2, w  # one per distinct file, not one per read
        assert all('ignored_key="masqLinkLocl" (did you mean "masqLinkLocal"?)' in l and str(ipm.path) in l
                   for l in w), w

        # A CIDR ip-masq-agent refuses too (host bits set): refused, named, the list in force stays.
        ipm.publish("nonMasqueradeCIDRs: [10.0.0.3/32, 10.0.0.1/8]\n")
        wait_for(lambda: alive() and metric("ebpf_masq_agent_config_valid") == 0, timeout=15, what="file refused")
        status, body = get("/healthz")
        assert status == 200 and "config update rejected" in body and '"nonMasqueradeCIDRs[1]"' in body, body
        assert str(ipm.path) in body, body
        refused = [l for l in a.log.read_text().splitlines() if "result=rejected" in l]
        assert len(refused) == 1 and "nonMasqueradeCIDRs[1]" in refused[0] and "host bits" in refused[0], refused
        assert seen(EXT) == {pod.ip}
        assert exclusions()["10.0.0.4/32"] == by

        # Fixed: applied.
        ipm.publish("nonMasqueradeCIDRs: [10.0.0.3/32]\n")
        wait_for(lambda: alive() and metric("ebpf_masq_agent_config_valid") == 1, timeout=15, what="valid again")
        assert seen(EXT) == {NODE_IP}
        assert explain_why("10.0.0.2")["masqueraded"] is True
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)


def test_agent_never_leaves_the_node_without_ip_masq_agents_list(topo, plugin, lab):
    """ip-masq-agent's file refused while nothing is in force (the agent's start): the node
    is chained and masqueraded all the same. With no list kept, ip-masq-agent's defaults
    ("refused: ip-masq-agent's defaults"); after a restart with the file refused again, the
    list the chained entry kept from it, not the defaults. /healthz 200 says what was refused
    and what is in force instead; ebpf_masq_agent_config_valid is 0."""
    net = topo.network([topo.bridge_plugin()])
    conflist = net.dir / f"{net.name}.conflist"
    topo.ext.ip("route", "add", "10.244.0.0/16", "via", NODE_IP)
    ipm = ConfigMapVolume(lab.tmp / "ip-masq-agent", "ip-masq-agent")
    bad = "nonMasqueradeCIDRs: [10.0.0.0/33]\n"  # refused by ip-masq-agent too
    ipm.publish(bad)
    a = Agent(topo, plugin, lab, net, "--ip-masq-agent-config", ipm.path)
    get, metric, port = a.get, a.metric, [6100]

    def seen(dst):
        port[0] += 1
        srv = topo.ext.server("udp", port[0])
        assert pod.ns.client("udp", dst, port[0])[0] == 0
        return srv.addrs()

    def exclusions():
        return {x["cidr"]: x.get("source") for x in topo.status(plugin)["config"]["exclusions"]}

    def healthy():
        return a.alive() and get("/healthz")[0] == 200

    try:
        wait_for(healthy, timeout=START, what="agent healthy with its file refused")
        assert metric("ebpf_masq_agent_config_valid") == 0
        body = get("/healthz")[1]
        assert "config update rejected" in body and '"nonMasqueradeCIDRs[0]"' in body, body
        assert "in force instead: ip-masq-agent's defaults" in body, body
        [entry] = entry_of(conflist)
        assert entry["ipMasqAgent"]["fileRefused"] is True, entry
        pod = net.add(topo.pod_ns("pod"))  # through the chain the agent wrote
        defaults = f"ip-masq-agent config {ipm.path} (refused: ip-masq-agent's defaults)"
        assert exclusions() == {"10.0.0.0/8": defaults, "172.16.0.0/12": defaults, "192.168.0.0/16": defaults,
                                "169.254.0.0/16": defaults, "fe80::/10": defaults}
        assert seen(EXT) == {pod.ip}  # 10.0.0.2 is in 10.0.0.0/8
        e = masqcli.explain(topo, plugin, "--src", pod.ip, "--dst", "198.51.100.7", "--proto", "udp", "--dport", "53")
        assert e["masqueraded"] is True, e

        # Fixed: its own list.
        ipm.publish("nonMasqueradeCIDRs: [10.0.0.3/32]\n")
        wait_for(lambda: a.alive() and metric("ebpf_masq_agent_config_valid") == 1, timeout=15, what="file applied")
        assert seen(EXT) == {NODE_IP}

        # Refused again across a restart (a rolling update): the list the chained entry kept stays.
        ipm.publish(bad)
        a.restart()
        wait_for(lambda: healthy() and "config update rejected" in get("/healthz")[1], timeout=START,
                 what="restarted agent healthy with its file refused")
        assert metric("ebpf_masq_agent_config_valid") == 0
        body = get("/healthz")[1]
        assert "in force instead: the list the chained entry kept from it" in body, body
        by = f"ip-masq-agent config {ipm.path}"
        assert exclusions() == {"10.0.0.3/32": by, "169.254.0.0/16": by, "fe80::/10": by}
        assert seen(EXT) == {NODE_IP}
        refused = [l for l in a.log.read_text().splitlines() if "result=rejected" in l]
        assert len(refused) == 2 and all("in_force=fallback" in l for l in refused), refused
    finally:
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(10)


def test_agent_runs_the_nat_log_exporter_as_the_config_says(topo, plugin, lab):
    """natLog through the agent: a ConfigMap update that adds natLog starts
    the exporter (its lease taken; a running pod's new pair logged with the pod's
    name); removing the key stops it (the lease cleared at once, no more records);
    SIGTERM leaves no exporter behind."""
    net = topo.network([topo.bridge_plugin()])
    a = Agent(topo, plugin, lab, net)
    log = lab.tmp / "natlog.json"

    def lease():
        return masqcli.events_ctl(topo)["log_until"]

    try:
        wait_for(lambda: a.alive() and a.get("/healthz")[0] == 200, timeout=START, what="agent healthy")
        net.env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0"
        pod = net.add(topo.pod_ns("pod"))
        assert lease() == 0, "no natLog, no exporter"
        assert a.metric("ebpf_masq_agent_natlog_configured") == 0

        a.vol.publish({**a.base, "natLog": {"file": str(log)}})
        wait_for(lambda: a.alive() and lease() > time.monotonic_ns(), timeout=20, what="exporter started")
        udp = topo.ext.server("udp", 5001)
        rc, res = pod.ns.client("udp", EXT, 5001)
        assert rc == 0, res
        [seen] = udp.records("dgram")

        def created():
            recs = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
            return [r for r in recs if r["event"] == "create"]
        wait_for(lambda: created(), timeout=10, what="the pair logged")
        [r] = created()
        assert (r["namespace"], r["pod"], r["pod_port"], r["nat_port"]) == ("shop", "web-0", res["local"][1], seen["port"]), r
        assert (a.metric("ebpf_masq_agent_natlog_configured"), a.metric("ebpf_masq_natlog_exporting")) == (1, 1)
        # The pod's series name it as its ADD's CNI_ARGS did.
        body = a.get("/metrics")[1]
        assert any(l.startswith("ebpf_masq_pod_packets_total{") and ',ifname="eth0",namespace="shop",pod="web-0"} ' in l
                   and float(l.split()[-1]) >= 1 for l in body.splitlines()), body

        a.vol.publish(a.base)
        wait_for(lambda: a.alive() and lease() == 0, timeout=20, what="exporter stopped")
        assert (a.metric("ebpf_masq_agent_natlog_configured"), a.metric("ebpf_masq_natlog_exporting")) == (0, 0)
        n = len(log.read_text().splitlines())
        assert pod.ns.client("udp", EXT, 5001)[0] == 0
        time.sleep(1)
        assert len(log.read_text().splitlines()) == n, "nothing logged once the key is gone"
    finally:
        a.proc.send_signal(signal.SIGTERM)
        a.proc.wait(10)
    assert lease() == 0
