"""The DaemonSets' commands on a node: the agent DaemonSet's exact command on a scratch
host (conf and bin dirs of its own, a throwaway node network namespace, a per-test pin
path), the ports an older version reserved given back, and `ebpf-masq manifest
--uninstall`'s DaemonSet taking ebpf-masq off while the agent still runs.
"""
import json
import os
import signal
import time

import pytest
import yaml

from lab import abi
from lab.abi import LAYOUT
from lab.agentlab import GET as AGENT_GET
from lab.installlab import (
    add_through, agent_command, CONF, contents, example, manifests, node_ns, one, run, scratch,
    without_masq,
)
from lab.netlab import PY, Pod, sh, wait_for


@pytest.fixture
def node(lab):
    return node_ns(lab)


# ---------------------------------------------------------------- (d) the DaemonSet's commands

GET = """
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=5)
    print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def test_daemonset_commands_on_a_scratch_host(plugin, node, lab, tmp_path):
    """Run the container's exact command against a scratch host root, in a node
    netns with eth0 + default route, with the container's mounts mapped to scratch dirs
    (bpffs: a per-test directory), until its readiness probe passes; a pod added
    through the conflist it chained is masqueraded; SIGTERM leaves all in place;
    then uninstall."""
    ds, cm = one("DaemonSet"), one("ConfigMap")
    spec = ds["spec"]["template"]["spec"]
    [main] = spec["containers"]
    vols = {v["name"]: v for v in spec["volumes"]}

    host = tmp_path / "host"
    mapping = {}
    for m in main["volumeMounts"]:
        v = vols[m["name"]]
        if "hostPath" in v and v["hostPath"]["path"] == "/sys/fs/bpf":
            dst = lab.pin_path  # the real bpffs, a directory of this test's own
        elif "hostPath" in v:
            dst = str(host) + v["hostPath"]["path"]
        else:
            dst = str(tmp_path / "configmap")
        os.makedirs(dst, exist_ok=True)
        mapping[m["mountPath"]] = dst

    def remap(arg):
        for src in sorted(mapping, key=len, reverse=True):
            if arg == src or arg.startswith(src + "/"):
                return mapping[src] + arg[len(src):]
        return arg

    # The ConfigMap as mounted; its pinPath points into the container's bpffs mount.
    cfg = json.loads(cm["data"]["ebpf-masq.json"])
    assert remap(cfg["pinPath"]) != cfg["pinPath"], "pinPath must be under the bpffs mount"
    cfg["pinPath"] = remap(cfg["pinPath"])
    (tmp_path / "configmap" / "ebpf-masq.json").write_text(json.dumps(cfg))
    pins = cfg["pinPath"]

    # The node as the main CNI left it: a bridge conflist (a network name and IPAM
    # store of this test's own, so cnitool touches nothing shared).
    conf_dir, bin_dir = remap("/host/etc/cni/net.d"), remap("/host/opt/cni/bin")
    primary = os.path.join(conf_dir, "10-containerd-net.conflist")
    shipped = without_masq(example("bridge"))
    shipped["name"] = f"{lab.prefix}containerd-net"
    shipped["plugins"][0]["ipam"]["dataDir"] = str(tmp_path / "ipam")
    with open(primary, "w") as f:
        json.dump(shipped, f, indent=2)
    before = contents(conf_dir, bin_dir)
    reserved = "/proc/sys/net/ipv4/ip_local_reserved_ports"
    reserved_before = node.enter(["cat", reserved]).stdout

    argv = agent_command(main)
    log = tmp_path / "agent.log"
    agent = node.spawn([plugin, *map(remap, argv[1:])], enter=True, stderr=log.open("w"))
    probe = main["readinessProbe"]["httpGet"]
    [port] = [p["containerPort"] for p in main["ports"] if p["name"] == probe["port"]]

    def ready():
        assert agent.poll() is None, f"agent exited {agent.returncode}: {log.read_text()}"
        p = node.exec([PY, "-c", GET, f"http://127.0.0.1:{port}{probe['path']}"], check=False, timeout=30)
        return p.stdout.strip() == "200"

    # The agent loads the data plane first (the verifier: seconds of CPU per program); 90 s only bounds a failure.
    wait_for(ready, timeout=90, what="the readiness probe")
    assert os.path.exists(os.path.join(bin_dir, "ebpf-masq"))
    # Nothing is reserved: host flows share the port space, tracked by the data plane.
    assert node.enter(["cat", reserved]).stdout == reserved_before, "the agent reserved ports"
    chained = json.loads(open(primary).read())
    assert [p["type"] for p in chained["plugins"]] == ["bridge", "portmap", "ebpf-masq"]
    assert chained["plugins"][-1]["pinPath"] == pins
    for direction in ("ingress", "egress"):
        assert node.bpf_hooks("eth0", direction).strip(), f"apply attached nothing to eth0 {direction}"

    # A runtime using that conf dir and bin dir now chains ebpf-masq for a new pod.
    _, pod, result = add_through(lab, node, shipped["name"], conf_dir, bin_dir)
    veth = Pod(pod, result).host_veth
    assert node.bpf_hooks(veth, "ingress").strip(), f"no ebpf-masq filter on the pod's veth {veth}"
    pod_ip = result["ips"][0]["address"].split("/")[0]
    assert pod_ip in run(plugin, "status", "--pin-path", pins, ns=node).stdout

    # A rolling update stops the agent: everything stays.
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(10) == 0, log.read_text()
    assert json.loads(open(primary).read()) == chained
    assert node.bpf_hooks(veth, "ingress").strip() and node.bpf_hooks("eth0", "egress").strip()

    # Uninstall: no pins, no filters on eth0 or the veth, conf and bin dirs as before.
    p = run(plugin, "uninstall", "--cni-conf-dir", conf_dir, "--cni-bin-dir", bin_dir, "--pin-path", pins,
            ns=node)
    assert "detached from 1 pod veth(s)" in p.stdout, p.stdout
    left = [os.path.join(r, f) for r, ds_, fs in os.walk(lab.pin_path) for f in ds_ + fs]
    assert not left, f"pins left: {left}"
    for dev, direction in (("eth0", "ingress"), ("eth0", "egress"), (veth, "ingress")):
        assert not node.bpf_hooks(dev, direction).strip(), f"filter left on {dev} {direction}"
    assert contents(conf_dir, bin_dir) == before
    assert "released ports" not in p.stdout, p.stdout
    assert node.enter(["cat", reserved]).stdout == reserved_before


def test_ports_an_older_version_reserved_are_given_back_exactly(plugin, topo, masq_pod):
    """Versions before layout 11 added portRange to ip_local_reserved_ports
    (kept out of the host's reach); this one reserves nothing (the data plane
    tracks host flows instead), so a node needs no tuning. The admin's own
    reservations overlap the ranges an older version reserved in turn: the first
    ADD of this version gives back exactly what that version added (its record,
    adopted with its pins) and nothing else; later ADDs reserve nothing."""
    path = "/proc/sys/net/ipv4/ip_local_reserved_ports"
    reserved = lambda: topo.node.exec(["cat", path]).stdout.strip()  # noqa: E731
    topo.node.sysctl("net.ipv4.ip_local_reserved_ports", "1000-2000,40000")
    old = topo.masq_network(plugin, portRange="1500-2999")
    old.env["EBPF_MASQ_TEST_AS_LAYOUT"] = str(LAYOUT - 1)
    old.add(topo.pod_ns("old"))
    assert reserved() == "1000-2000,40000", "this version reserved ports"
    # What an older binary did at its ADDs with portRanges 1500-2999, then 39000-40500.
    record = f"{topo.lab.pin_path}/v{LAYOUT - 1}/maps/reserved_ports"
    for slot, (lo, hi) in enumerate([(2001, 2999), (39000, 39999), (40001, 40500)]):
        value = abi.hexes(abi.btf_of(topo, LAYOUT - 1).pack("port_range", lo=lo, hi=hi))
        topo.node.enter(["bpftool", "map", "update", "pinned", record,
                         "key", "hex", *[f"{b:02x}" for b in slot.to_bytes(4, "little")], "value", "hex", *value])
    topo.node.sysctl("net.ipv4.ip_local_reserved_ports", "1000-2999,39000-40500")
    masq_pod(name="new", portRange="1500-2999")  # the upgrade: this version's first ADD
    assert reserved() == "1000-2000,40000"
    masq_pod(name="newer")
    assert reserved() == "1000-2000,40000"


# ---------------------------------------------------------------- (f) the uninstall DaemonSet on a node
# `ebpf-masq manifest --uninstall` on a node: the uninstall DaemonSet's exact command
# (`ebpf-masq agent --uninstall`) against a scratch host root where the agent
# DaemonSet's exact command has put ebpf-masq (a K3s layout, through --preset k3s),
# in a throwaway node network namespace, the container's bpffs mount mapped to a
# directory of the test's own on the real bpffs.
#
# The uninstaller is started while the agent still runs (its pod not gone yet, or
# the operator skipped deleting it first): the entry, the binary, the programs and
# the pins go all the same, the agent holds off (it chains nothing again, and its
# /healthz says why), and the uninstaller is not ready until the agent is gone (it
# holds the port). Then the agent stops, the uninstaller is ready, and stopping it
# leaves the conf and bin dirs exactly as the main plugin left them.

# Options both manifests are rendered with: a layout that is not the default, and a
# pinPath of the test's own (so the uninstaller is told it, and never looks at the
# host's default pin path).
UNINSTALL_OPTS = ["--preset", "k3s", "--set", "pinPath=/sys/fs/bpf/ebpf-masq-uninstall-test"]


def render_for_uninstall(plugin, *opts):
    p = sh([str(plugin), "manifest", *UNINSTALL_OPTS, *opts])
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def kind_of(docs, k):
    [d] = [d for d in docs if d["kind"] == k]
    return d


class ScratchHost:
    """The scratch host root: each container mount path mapped to a scratch directory."""

    def __init__(self, tmp_path, lab):
        self.root, self.lab, self.mapping = tmp_path / "host", lab, {}

    def mount(self, ds, configmap_dir):
        spec = ds["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in spec["volumes"]}
        for m in spec["containers"][0]["volumeMounts"]:
            v = vols[m["name"]]
            if "hostPath" in v and v["hostPath"]["path"] == "/sys/fs/bpf":
                dst = self.lab.pin_path  # the real bpffs, a directory of this test's own
            elif "hostPath" in v:
                dst = str(self.root) + v["hostPath"]["path"]
            else:
                dst = str(configmap_dir)
            os.makedirs(dst, exist_ok=True)
            assert self.mapping.setdefault(m["mountPath"], dst) == dst, m
        return [self.remap(a) for a in spec["containers"][0]["command"][1:]]

    def remap(self, arg):
        for src in sorted(self.mapping, key=len, reverse=True):
            if arg == src or arg.startswith(src + "/"):
                return self.mapping[src] + arg[len(src):]
        return arg

    def host(self, path):
        return str(self.root) + path


def test_uninstall_daemonset_takes_ebpf_masq_off_and_holds_a_running_agent_off(plugin, node, lab, tmp_path):
    install = render_for_uninstall(plugin)
    uninstall = render_for_uninstall(plugin, "--uninstall")
    agent_ds, un_ds = kind_of(install, "DaemonSet"), kind_of(uninstall, "DaemonSet")
    h = ScratchHost(tmp_path, lab)
    agent_argv = h.mount(agent_ds, tmp_path / "configmap")
    un_argv = h.mount(un_ds, tmp_path / "unused")
    assert un_argv[:2] == ["agent", "--uninstall"], un_argv
    conf_dir = h.host("/var/lib/rancher/k3s/agent/etc/cni/net.d")
    bin_dir = h.host("/var/lib/rancher/k3s/data/cni")
    assert f"--cni-conf-dir {conf_dir} --cni-bin-dir {bin_dir}" in " ".join(un_argv), un_argv
    [pin_arg] = [un_argv[i + 1] for i, a in enumerate(un_argv) if a == "--pin-path"]
    assert pin_arg.startswith(lab.pin_path + "/"), pin_arg

    # The ConfigMap as mounted; its pinPath where the container's bpffs mount maps.
    cfg = json.loads(kind_of(install, "ConfigMap")["data"]["ebpf-masq.json"])
    cfg["pinPath"] = h.remap(cfg["pinPath"])
    assert cfg["pinPath"] == pin_arg
    (tmp_path / "configmap" / "ebpf-masq.json").write_text(json.dumps(cfg))

    # The node as the main CNI left it: a bridge conflist of this test's own network.
    primary = os.path.join(conf_dir, "10-flannel.conflist")
    shipped = json.loads((CONF / "bridge.conflist").read_text())
    shipped["plugins"] = [p for p in shipped["plugins"] if p["type"] != "ebpf-masq"]
    shipped["name"] = f"{lab.prefix}k3s-net"
    shipped["plugins"][0]["ipam"]["dataDir"] = str(tmp_path / "ipam")
    with open(primary, "w") as f:
        json.dump(shipped, f, indent=2)
    before = contents(conf_dir, bin_dir)

    # The agent, as its DaemonSet runs it, until ready; a pod through the chained conflist.
    port = agent_ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    un_port = un_ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert un_port == port, "the uninstaller answers on the agent's port"
    agent_log, un_log = tmp_path / "agent.log", tmp_path / "uninstall.log"
    agent = node.spawn([plugin, *agent_argv], enter=True, stderr=agent_log.open("w"))
    lab.on_close(lambda: agent.poll() is None and agent.kill())

    def get(path):
        p = node.exec([PY, "-c", AGENT_GET, f"http://127.0.0.1:{port}{path}"], check=False, timeout=30)
        head, _, body = p.stdout.partition("\n")
        return (int(head), body) if head else (None, "")

    def agent_alive():
        assert agent.poll() is None, f"agent exited {agent.returncode}: {agent_log.read_text()}"
        return True

    wait_for(lambda: agent_alive() and get("/healthz")[0] == 200, timeout=30, what="the agent ready")

    def chain_lines():
        return [l for l in agent_log.read_text().splitlines() if "agent=chain" in l or "agent=data-plane" in l]

    chained_once = chain_lines()
    chained = json.loads(open(primary).read())
    assert [p["type"] for p in chained["plugins"]] == ["bridge", "portmap", "ebpf-masq"]
    assert os.path.exists(os.path.join(bin_dir, "ebpf-masq"))
    _, pod, result = add_through(lab, node, shipped["name"], conf_dir, bin_dir)
    veth = Pod(pod, result).host_veth
    hooked = [(veth, "ingress"), ("eth0", "ingress"), ("eth0", "egress")]
    for dev, direction in hooked:
        assert node.bpf_hooks(dev, direction).strip(), f"nothing attached to {dev} {direction}"

    # The uninstaller, while the agent still runs.
    un = node.spawn([plugin, *un_argv], enter=True, stderr=un_log.open("w"))
    lab.on_close(lambda: un.poll() is None and un.kill())

    def un_alive():
        assert un.poll() is None, f"uninstaller exited {un.returncode}: {un_log.read_text()}"
        return True

    def clean():
        left = [os.path.join(r, f) for r, ds_, fs in os.walk(lab.pin_path) for f in ds_ + fs]
        return (json.loads(open(primary).read()) == shipped and not os.path.exists(os.path.join(bin_dir, "ebpf-masq"))
                and not left and not any(node.bpf_hooks(d, dr).strip() for d, dr in hooked))

    wait_for(lambda: un_alive() and clean(), timeout=30, what="entry, binary, programs and pins gone")
    assert os.path.exists(os.path.join(conf_dir, ".ebpf-masq-uninstall"))
    # The agent holds off and says why ...
    wait_for(lambda: agent_alive() and "held off" in get("/healthz")[1], timeout=15, what="the agent holding off")
    status, body = get("/healthz")
    assert status == 503 and ".ebpf-masq-uninstall" in body, body
    # ... past its periodic recheck and a rewrite of the conflist by the main plugin: nothing comes back.
    tmp = os.path.join(conf_dir, ".rewrite")
    with open(tmp, "w") as f:
        json.dump(shipped, f, indent=2)
    os.rename(tmp, primary)
    time.sleep(11)
    assert agent_alive() and un_alive() and clean()
    assert chain_lines() == chained_once, agent_log.read_text()
    # Not ready while the agent holds the port.
    assert "listen=" in un_log.read_text() and "serving=" not in un_log.read_text(), un_log.read_text()

    # The agent goes (its DaemonSet deleted): the uninstaller takes the port and is ready.
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(10) == 0, agent_log.read_text()
    wait_for(lambda: un_alive() and get("/healthz")[0] == 200, timeout=15, what="the uninstaller ready")
    assert get("/healthz")[1].startswith("uninstalled"), get("/healthz")
    assert clean()

    # The uninstaller goes: its marker with it, the dirs as the main plugin left them.
    un.send_signal(signal.SIGTERM)
    assert un.wait(10) == 0, un_log.read_text()
    assert contents(conf_dir, bin_dir) == before
    assert "result=done" in un_log.read_text(), un_log.read_text()
