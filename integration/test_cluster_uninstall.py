"""`ebpf-masq manifest --uninstall` on a node: the uninstall DaemonSet's exact command
(`ebpf-masq agent --uninstall`) against a scratch host root where the agent
DaemonSet's exact command has put ebpf-masq (a K3s layout, through --preset k3s),
in a throwaway node network namespace, the container's bpffs mount mapped to a
directory of the test's own on the real bpffs.

The uninstaller is started while the agent still runs (its pod not gone yet, or
the operator skipped deleting it first): the entry, the binary, the programs and
the pins go all the same, the agent holds off (it chains nothing again, and its
/healthz says why), and the uninstaller is not ready until the agent is gone (it
holds the port). Then the agent stops, the uninstaller is ready, and stopping it
leaves the conf and bin dirs exactly as the main plugin left them.
"""
import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from lab.agentlab import GET
from lab.netlab import CNI_BIN_DIR, PY, REPO, Pod, sh, wait_for

CONF = REPO / "conf"
# Options both manifests are rendered with: a layout that is not the default, and a
# pinPath of the test's own (so the uninstaller is told it, and never looks at the
# host's default pin path).
OPTS = ["--preset", "k3s", "--set", "pinPath=/sys/fs/bpf/ebpf-masq-uninstall-test"]


@pytest.fixture
def node(lab):
    """A node network namespace with eth0 (10.0.0.5/24, a veth to an "ext" namespace
    at 10.0.0.1) and a default route via 10.0.0.1."""
    ns, ext = lab.netns("node"), lab.netns("ext")
    lab.veth(ns, "eth0", "10.0.0.5/24", ext, "eth0", "10.0.0.1/24")
    ns.ip("route", "add", "default", "via", "10.0.0.1", "dev", "eth0")
    return ns


def render(plugin, *opts):
    p = sh([str(plugin), "manifest", *OPTS, *opts])
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def kind(docs, k):
    [d] = [d for d in docs if d["kind"] == k]
    return d


def contents(*dirs):
    """{path: bytes} of every file under dirs (hidden ones too)."""
    out = {}
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in files:
                p = os.path.join(root, f)
                out[p] = open(p, "rb").read()
    return out


class Host:
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
    install = render(plugin)
    uninstall = render(plugin, "--uninstall")
    agent_ds, un_ds = kind(install, "DaemonSet"), kind(uninstall, "DaemonSet")
    h = Host(tmp_path, lab)
    agent_argv = h.mount(agent_ds, tmp_path / "configmap")
    un_argv = h.mount(un_ds, tmp_path / "unused")
    assert un_argv[:2] == ["agent", "--uninstall"], un_argv
    conf_dir = h.host("/var/lib/rancher/k3s/agent/etc/cni/net.d")
    bin_dir = h.host("/var/lib/rancher/k3s/data/cni")
    assert f"--cni-conf-dir {conf_dir} --cni-bin-dir {bin_dir}" in " ".join(un_argv), un_argv
    [pin_arg] = [un_argv[i + 1] for i, a in enumerate(un_argv) if a == "--pin-path"]
    assert pin_arg.startswith(lab.pin_path + "/"), pin_arg

    # The ConfigMap as mounted; its pinPath where the container's bpffs mount maps.
    cfg = json.loads(kind(install, "ConfigMap")["data"]["ebpf-masq.json"])
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
        p = node.exec([PY, "-c", GET, f"http://127.0.0.1:{port}{path}"], check=False, timeout=30)
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
    env = {**os.environ, "NETCONFPATH": conf_dir, "CNI_PATH": f"{CNI_BIN_DIR}:{bin_dir}"}
    pod = lab.netns("pod")
    lab.on_close(lambda: [f.unlink() for f in Path("/var/lib/cni/results").glob(f"{shipped['name']}-*")])
    lab.on_close(lambda: node.enter(["cnitool", "del", shipped["name"], pod.path], env=env, check=False))
    result = json.loads(node.enter(["cnitool", "add", shipped["name"], pod.path], env=env).stdout)
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
