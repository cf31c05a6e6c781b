"""Helpers of the install, DaemonSet and manifest tests (test_install.py,
test_daemonset.py, test_manifest.py): the conf/ examples, scratch conf and bin dirs,
file snapshots, conf/daemonset.yaml's objects, a pod added through a runtime's dirs.
"""
import json
import os
import stat
from pathlib import Path

import yaml

from .netlab import CNI_BIN_DIR, REPO, sh

CONF = REPO / "conf"
DAEMONSET = CONF / "daemonset.yaml"
# What install adds to every entry: the CRI runtime then passes the pod's annotations.
CAPS = {"capabilities": {"io.kubernetes.cri.pod-annotations": True, "portMappings": True}}
VALIDATOR = REPO / "integration" / "lab" / "k8s_validate.py"
# The chained examples: main plugin types before ebpf-masq.
EXAMPLES = {
    "bridge": ["bridge", "portmap"],
    "ptp": ["ptp", "portmap"],
    "calico": ["calico", "portmap", "bandwidth"],
    "flannel": ["flannel", "portmap"],
}
BAK = ".ebpf-masq.bak"


def run(binary, *args, ns=None, check=True):
    cmd = [str(binary), *map(str, args)]
    return ns.enter(cmd, check=check) if ns else sh(cmd, check=check)


def snapshot(*dirs):
    """{path: (bytes, mode, inode, mtime_ns)} of every file under dirs: equal
    snapshots mean nothing was written, not even the same bytes again."""
    out = {}
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in files:
                p = os.path.join(root, f)
                st = os.stat(p)
                out[p] = (open(p, "rb").read(), stat.S_IMODE(st.st_mode), st.st_ino, st.st_mtime_ns)
    return out


def contents(*dirs):
    """{path: bytes} of every file under dirs."""
    return {p: v[0] for p, v in snapshot(*dirs).items()}


def example(name):
    return json.loads((CONF / f"{name}.conflist").read_text())


def without_masq(conflist):
    """What the main CNI plugin ships: the example without our entry."""
    return {**conflist, "plugins": [p for p in conflist["plugins"] if p["type"] != "ebpf-masq"]}


def masq_entry(conflist):
    [e] = [p for p in conflist["plugins"] if p["type"] == "ebpf-masq"]
    return e


def keys_in_order(v):
    """Every object's key order, recursively (json.loads keeps it)."""
    if isinstance(v, dict):
        return [list(v), *[keys_in_order(x) for x in v.values()]]
    if isinstance(v, list):
        return [keys_in_order(x) for x in v]
    return None


def add_through(lab, node, network, conf_dir, bin_dir):
    """cnitool add of a new pod to `network` as a runtime using that conf dir and bin dir
    would make it; its DEL and libcni's cache entry are undone at the lab's close.
    Returns (the runtime's env, the pod's netns, the ADD's result)."""
    env = {**os.environ, "NETCONFPATH": conf_dir, "CNI_PATH": f"{CNI_BIN_DIR}:{bin_dir}"}
    pod = lab.netns("pod")
    lab.on_close(lambda: [f.unlink() for f in Path("/var/lib/cni/results").glob(f"{network}-*")])
    lab.on_close(lambda: node.enter(["cnitool", "del", network, pod.path], env=env, check=False))
    return env, pod, json.loads(node.enter(["cnitool", "add", network, pod.path], env=env).stdout)


def scratch(tmp_path):
    conf_dir, bin_dir = tmp_path / "etc-cni-net.d", tmp_path / "opt-cni-bin"
    conf_dir.mkdir()
    bin_dir.mkdir()
    return conf_dir, bin_dir


def manifests():
    with open(DAEMONSET) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(kind):
    [d] = [d for d in manifests() if d["kind"] == kind]
    return d


def agent_command(main):
    """The container's command: `ebpf-masq agent` and its options."""
    argv = main["command"] + main.get("args", [])
    assert argv[:2] == ["ebpf-masq", "agent"], argv
    return argv


def node_ns(lab):
    """A node network namespace with eth0 (10.0.0.5/24, a veth to an "ext" namespace
    at 10.0.0.1) and a default route via 10.0.0.1."""
    ns, ext = lab.netns("node"), lab.netns("ext")
    lab.veth(ns, "eth0", "10.0.0.5/24", ext, "eth0", "10.0.0.1/24")
    ns.ip("route", "add", "default", "via", "10.0.0.1", "dev", "eth0")
    return ns
