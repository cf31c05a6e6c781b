"""`ebpf-masq install` / `uninstall` / `validate`, the conf/ examples, conf/daemonset.yaml,
`ebpf-masq manifest` (and its --uninstall DaemonSet on a node) and the Containerfiles.

Everything runs in scratch directories (pytest's tmp_path) and, for anything that
touches a data plane, in a throwaway node network namespace with a per-test pin
path: never the machine's /etc/cni, /opt/cni or interfaces. No registry and no
network: the Kubernetes schemas come from the kubernetes-validate package
(scripts/install-deps.sh installs it); the one container engine use is podman
building conf/Containerfile.binary from the built binary (FROM scratch, nothing
pulled; skipped where podman is missing).
"""
import json
import os
import re
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest
import yaml

from lab import abi, k8s_validate
from lab.abi import LAYOUT
from lab.agentlab import GET as AGENT_GET
from lab.netlab import CNI_BIN_DIR, PY, REPO, Pod, sh, wait_for

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


# ---------------------------------------------------------------- helpers

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


@pytest.fixture
def node(lab):
    """A node network namespace with eth0 (10.0.0.5/24, a veth to an "ext" namespace
    at 10.0.0.1) and a default route via 10.0.0.1."""
    ns, ext = lab.netns("node"), lab.netns("ext")
    lab.veth(ns, "eth0", "10.0.0.5/24", ext, "eth0", "10.0.0.1/24")
    ns.ip("route", "add", "default", "via", "10.0.0.1", "dev", "eth0")
    return ns


# ---------------------------------------------------------------- (a) manifests

def test_daemonset_validates_offline_against_kubernetes_schemas():
    """Strict schema validation (unknown fields fail) with no network at all:
    the validator runs in a fresh, empty network namespace."""
    p = sh(["unshare", "--net", PY, VALIDATOR, DAEMONSET], check=False)
    assert "No module named" not in p.stderr, \
        f"kubernetes-validate missing for {PY}: run scripts/install-deps.sh\n{p.stderr}"
    assert p.returncode == 0, p.stdout + p.stderr
    kinds = sorted(d["kind"] for d in manifests())
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "ResourceQuota", "ServiceAccount"]
    assert p.stdout.count("ok ") == 2 * len(kinds), p.stdout


def test_validator_catches_mistakes(tmp_path):
    """The offline validation is not a rubber stamp."""
    text = DAEMONSET.read_text()
    for bad in (text.replace("hostNetwork: true", "hostNetwrk: true"),
                text.replace("periodSeconds: 30", "periodSeconds: thirty"),
                text.replace("kind: DaemonSet", "kind: DaemonSett")):
        assert bad != text
        f = tmp_path / "bad.yaml"
        f.write_text(bad)
        p = sh(["unshare", "--net", PY, VALIDATOR, f], check=False)
        assert p.returncode == 1 and "FAIL" in p.stdout, p.stdout + p.stderr


def test_daemonset_shape(plugin, tmp_path):
    ns_name = one("Namespace")["metadata"]["name"]
    sa, cm, ds = one("ServiceAccount"), one("ConfigMap"), one("DaemonSet")
    assert sa["metadata"]["namespace"] == cm["metadata"]["namespace"] == ds["metadata"]["namespace"] == ns_name
    spec = ds["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert spec["hostNetwork"] is True
    assert {"operator": "Exists"} in spec["tolerations"]
    vols = {v["name"]: v for v in spec["volumes"]}
    host_paths = {v["hostPath"]["path"]: n for n, v in vols.items() if "hostPath" in v}
    assert set(host_paths) == {"/opt/cni/bin", "/etc/cni/net.d", "/var/lib/cni", "/sys/fs/bpf"}
    [cfg_vol] = [n for n, v in vols.items() if "configMap" in v]
    assert vols[cfg_vol]["configMap"]["name"] == cm["metadata"]["name"]

    assert "initContainers" not in spec, "the agent installs and applies: no init container"
    [main] = spec["containers"]
    assert main["securityContext"]["privileged"] is True
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts[host_paths["/sys/fs/bpf"]]["mountPropagation"] == "Bidirectional"
    assert mounts[host_paths["/sys/fs/bpf"]]["mountPath"] == "/sys/fs/bpf"
    assert mounts[host_paths["/opt/cni/bin"]]["mountPath"] == "/host/opt/cni/bin"
    assert mounts[host_paths["/etc/cni/net.d"]]["mountPath"] == "/host/etc/cni/net.d"
    # libcni's result cache, where the agent finds pods whose ADD never reached it: read only.
    cache = mounts[host_paths["/var/lib/cni"]]
    assert (cache["mountPath"], cache.get("readOnly")) == ("/host/var/lib/cni", True), cache
    # The whole ConfigMap volume: a subPath mount would never see kubelet's updates.
    assert mounts[cfg_vol]["mountPath"] == "/config" and "subPath" not in mounts[cfg_vol]
    argv = agent_command(main)
    assert argv == ["ebpf-masq", "agent", "--conf", "/config/ebpf-masq.json", "--cni-conf-dir", "/host/etc/cni/net.d",
                    "--cni-bin-dir", "/host/opt/cni/bin", "--cni-cache-dir", "/host/var/lib/cni",
                    "--metrics-listen", "0.0.0.0:9436"], argv
    # Every option it uses is one the CLI has.
    usage = run(plugin, "agent", "--help").stdout
    assert all(a in usage for a in argv if a.startswith("--")), usage
    [port] = main["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", 9436)
    for probe in ("readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, main[probe]
    notes = ds["spec"]["template"]["metadata"]["annotations"]
    assert notes == {"prometheus.io/scrape": "true", "prometheus.io/port": "9436", "prometheus.io/path": "/metrics"}
    assert main["resources"]["requests"] and main["resources"]["limits"]["memory"]

    # The ConfigMap's config is valid, and its pins live on the bpffs mount.
    cfg = tmp_path / "ebpf-masq.json"
    cfg.write_text(cm["data"]["ebpf-masq.json"])
    run(plugin, "validate", "--conf", cfg)
    assert json.loads(cfg.read_text())["pinPath"].startswith("/sys/fs/bpf/")


def test_containerfile():
    """Multi-stage: rust:1.95 builder with clang and libbpf-dev, Debian slim runtime
    of the same release, binary on PATH as the DaemonSet calls it. Static checks only
    (no engine, no registry in tests)."""
    lines = [l.strip() for l in (REPO / "Containerfile").read_text().splitlines()]
    froms = [l.split()[1] for l in lines if l.startswith("FROM ")]
    assert len(froms) == 2
    assert froms[0].startswith("rust:1.95-"), froms
    release = froms[0].split("-", 1)[1]
    assert froms[1] == f"debian:{release}-slim", froms
    text = "\n".join(lines)
    for pkg in ("clang", "libbpf-dev"):
        assert pkg in text
    assert "cargo build --release --locked" in text
    assert "COPY --from=build /out/ebpf-masq /usr/local/bin/ebpf-masq" in text
    for l in lines:
        if l.startswith("COPY ") and "--from" not in l:
            for src in l.split()[1:-1]:
                assert (REPO / src).exists(), f"Containerfile copies missing {src}"


def test_containerfile_binary_builds_the_image_from_the_static_binary(plugin, tmp_path):
    """conf/Containerfile.binary, built by podman with no network (FROM scratch: nothing
    to pull), holds the built binary byte for byte on the PATH it sets, and the binary
    is static (it runs on the node, whatever the node's libc)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    assert "static" in sh(["file", "-L", str(plugin)]).stdout, "the binary must be statically linked"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(plugin, ctx / "ebpf-masq")
    tag = f"localhost/ebpf-masq-test:{os.getpid()}-{tmp_path.name}".lower()[:120]
    try:
        sh(["unshare", "--net", "podman", "build", "-q", "--network", "none", "-t", tag,
            "-f", str(CONF / "Containerfile.binary"), str(ctx)])
        env = json.loads(sh(["podman", "image", "inspect", tag, "--format", "{{json .Config.Env}}"]).stdout)
        assert "PATH=/usr/local/bin:/usr/bin:/bin" in env, env
        cid = sh(["podman", "create", tag]).stdout.strip()
        try:
            sh(["podman", "cp", f"{cid}:/usr/local/bin/ebpf-masq", str(tmp_path / "out")])
        finally:
            sh(["podman", "rm", cid], check=False)
        assert (tmp_path / "out").read_bytes() == plugin.read_bytes()
        assert os.access(tmp_path / "out", os.X_OK)
    finally:
        sh(["podman", "rmi", "-f", tag], check=False)


# ---------------------------------------------------------------- (b) examples

def test_every_example_conflist_passes_our_validation(plugin, tmp_path):
    files = sorted(CONF.glob("*.conflist"))
    assert {f.stem for f in files} >= set(EXAMPLES)
    for f in files:
        p = run(plugin, "validate", "--conf", f)
        assert "valid" in p.stdout
    for name, main_plugins in EXAMPLES.items():
        conf = example(name)
        assert [p["type"] for p in conf["plugins"]] == [*main_plugins, "ebpf-masq"], name
    # validate really validates: a bad key fails with the key named and code 7.
    bad = example("calico")
    masq_entry(bad)["portRange"] = "9-1"
    f = tmp_path / "bad.conflist"
    f.write_text(json.dumps(bad))
    p = run(plugin, "validate", "--conf", f, check=False)
    assert p.returncode == 1 and "plugins[3].portRange" in p.stderr and "code 7" in p.stderr, p.stderr


# ---------------------------------------------------------------- (c) install / uninstall

@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_install_chains_then_uninstall_restores(plugin, node, lab, tmp_path, name):
    conf_dir, bin_dir = scratch(tmp_path)
    ours = example(name)
    shipped = without_masq(ours)
    target = conf_dir / f"10-{name}.conflist"
    # Formatted unlike our output, so a byte-exact restore is meaningful.
    target.write_text(json.dumps(shipped, indent=4))
    target.chmod(0o600)
    (conf_dir / "99-later.conflist").write_text(json.dumps(without_masq(example("bridge"))))  # not the primary
    (conf_dir / "calico-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    before = contents(conf_dir, bin_dir)

    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir,
            "--conf", CONF / f"{name}.conflist", ns=node)
    assert "chained ebpf-masq into" in p.stdout, p.stdout
    chained = json.loads(target.read_text())
    # Other plugins and keys unchanged, in order; our entry last, as in the example.
    assert chained["plugins"][:-1] == shipped["plugins"]
    assert chained["plugins"][-1] == masq_entry(ours)
    assert {k: v for k, v in chained.items() if k != "plugins"} == \
        {k: v for k, v in shipped.items() if k != "plugins"}
    assert keys_in_order(chained)[:-1] == keys_in_order(shipped)[:-1]
    assert keys_in_order(chained["plugins"][:-1]) == keys_in_order(shipped["plugins"])
    assert chained == ours
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    # Backup of the original; the binary in place; nothing else touched.
    assert (conf_dir / f"10-{name}.conflist{BAK}").read_bytes() == before[str(target)]
    installed = bin_dir / "ebpf-masq"
    assert installed.read_bytes() == plugin.read_bytes() and os.access(installed, os.X_OK)
    for other in ("99-later.conflist", "calico-kubeconfig"):
        assert (conf_dir / other).read_bytes() == before[str(conf_dir / other)]
    assert sorted(os.listdir(conf_dir)) == sorted(["99-later.conflist", "calico-kubeconfig",
                                                   target.name, target.name + BAK])
    run(plugin, "validate", "--conf", target)

    # Twice: nothing changes, not even a rewrite of the same bytes.
    snap = snapshot(conf_dir, bin_dir)
    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir,
            "--conf", CONF / f"{name}.conflist", ns=node)
    assert "unchanged" in p.stdout and "up to date" in p.stdout, p.stdout
    assert snapshot(conf_dir, bin_dir) == snap

    # Uninstall: the original file, byte for byte, and nothing of ours left.
    p = run(plugin, "uninstall", "--cni-conf-dir", conf_dir, "--cni-bin-dir", bin_dir,
            "--pin-path", lab.pin_path, ns=node)
    assert "restored" in p.stdout, p.stdout
    assert contents(conf_dir, bin_dir) == before
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    # And again: idempotent.
    p = run(plugin, "uninstall", "--cni-conf-dir", conf_dir, "--cni-bin-dir", bin_dir,
            "--pin-path", lab.pin_path, ns=node)
    assert "no ebpf-masq entry" in p.stdout, p.stdout
    assert contents(conf_dir, bin_dir) == before


def test_install_defaults_and_replaces_in_place(plugin, node, lab, tmp_path):
    conf_dir, bin_dir = scratch(tmp_path)
    target = conf_dir / "10-calico.conflist"
    target.write_text(json.dumps(example("calico")))  # already has an entry, not last
    conf = example("calico")
    conf["plugins"].insert(1, conf["plugins"].pop())
    target.write_text(json.dumps(conf))
    extra = conf_dir / "50-extra.conflist"  # a secondary network using ebpf-masq too
    extra.write_text(json.dumps(example("ptp")))
    run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, ns=node)
    got = json.loads(target.read_text())
    assert [p["type"] for p in got["plugins"]] == ["calico", "ebpf-masq", "portmap", "bandwidth"]
    assert got["plugins"][1] == {"type": "ebpf-masq", **CAPS}  # the default entry, replaced in place
    # A file that already had our entry is no "original": no backup of it.
    assert not (conf_dir / f"10-calico.conflist{BAK}").exists()
    # --pin-path goes into the entry.
    run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir,
        "--pin-path", lab.pin_path, ns=node)
    assert json.loads(target.read_text())["plugins"][1] == {"type": "ebpf-masq", "pinPath": lab.pin_path, **CAPS}
    # Uninstall takes the pin path from the entry and removes just our entry.
    p = run(plugin, "uninstall", "--cni-conf-dir", conf_dir, ns=node)
    assert f"no pins under {lab.pin_path}/v" in p.stdout, p.stdout
    assert json.loads(target.read_text()) == without_masq(conf)
    # Every network loses the entry (the binary may be gone next), not just the primary.
    assert json.loads(extra.read_text()) == without_masq(example("ptp"))
    assert (bin_dir / "ebpf-masq").exists()  # no --cni-bin-dir: binary left


def test_conf_file_is_converted_to_conflist_and_back(plugin, node, lab, tmp_path):
    conf_dir, bin_dir = scratch(tmp_path)
    bridge = {"cniVersion": "1.0.0", "name": "mynet", "type": "bridge", "bridge": "cni0",
              "isGateway": True, "ipMasq": False,
              "ipam": {"type": "host-local", "subnet": "10.22.0.0/16", "routes": [{"dst": "0.0.0.0/0"}]}}
    src = conf_dir / "10-mynet.conf"
    src.write_text(json.dumps(bridge))
    (conf_dir / "20-other.conflist").write_text(json.dumps(without_masq(example("ptp"))))
    before = contents(conf_dir, bin_dir)

    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, ns=node)
    assert "converted" in p.stdout, p.stdout
    out = conf_dir / "10-mynet.conflist"
    assert not src.exists(), "the .conf would sort first and keep the node unchained"
    got = json.loads(out.read_text())
    assert list(got) == ["cniVersion", "name", "plugins"]
    assert got["cniVersion"] == "1.0.0" and got["name"] == "mynet"
    assert got["plugins"] == [bridge, {"type": "ebpf-masq", **CAPS}]
    assert keys_in_order(got["plugins"][0]) == keys_in_order(bridge)
    assert (conf_dir / f"10-mynet.conf{BAK}").read_bytes() == before[str(src)]
    run(plugin, "validate", "--conf", out)

    snap = snapshot(conf_dir, bin_dir)
    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, ns=node)
    assert "unchanged" in p.stdout, p.stdout
    assert snapshot(conf_dir, bin_dir) == snap

    p = run(plugin, "uninstall", "--cni-conf-dir", conf_dir, "--cni-bin-dir", bin_dir,
            "--pin-path", lab.pin_path, ns=node)
    assert "restored" in p.stdout, p.stdout
    assert contents(conf_dir, bin_dir) == before


def test_uninstall_after_the_main_plugin_changed_the_file(plugin, node, lab, tmp_path):
    """The file changed after install: the backup is stale, so only our entry goes."""
    conf_dir, bin_dir = scratch(tmp_path)
    target = conf_dir / "10-flannel.conflist"
    target.write_text(json.dumps(without_masq(example("flannel"))))
    run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, ns=node)
    changed = json.loads(target.read_text())
    changed["plugins"][0]["delegate"]["hairpinMode"] = False
    target.write_text(json.dumps(changed))
    p = run(plugin, "uninstall", "--cni-conf-dir", conf_dir, "--pin-path", lab.pin_path, ns=node)
    assert "removed the ebpf-masq entry" in p.stdout and "stale backup" in p.stdout, p.stdout
    assert json.loads(target.read_text()) == without_masq(changed)
    assert sorted(os.listdir(conf_dir)) == ["10-flannel.conflist"]


def test_install_refuses_what_would_break_the_node(plugin, tmp_path):
    conf_dir, bin_dir = scratch(tmp_path)
    # A cniVersion ebpf-masq does not speak (0.2.0; Flannel's and Calico's 0.3.1 is fine).
    shipped = {**without_masq(example("flannel")), "cniVersion": "0.2.0"}
    (conf_dir / "10-flannel.conflist").write_text(json.dumps(shipped))
    before = contents(conf_dir, bin_dir)
    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, check=False)
    assert p.returncode == 1 and "0.2.0" in p.stderr and "10-flannel.conflist" in p.stderr, p.stderr
    # An invalid --conf is refused before anything is touched.
    bad = tmp_path / "bad.json"
    bad.write_text('{"cniVersion": "1.0.0", "name": "x", "type": "ebpf-masq", "natOutgoin": true}')
    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, "--conf", bad, check=False)
    assert p.returncode == 1 and "natOutgoin" in p.stderr, p.stderr
    # No config at all: the main plugin is not installed yet.
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", empty, check=False)
    assert p.returncode == 1 and "no network config" in p.stderr, p.stderr
    assert contents(conf_dir, bin_dir) == before


def test_install_dry_run_and_conflist_choice(plugin, tmp_path):
    conf_dir, bin_dir = scratch(tmp_path)
    (conf_dir / "10-bridge.conflist").write_text(json.dumps(without_masq(example("bridge"))))
    (conf_dir / "20-ptp.conflist").write_text(json.dumps(without_masq(example("ptp"))))
    before = contents(conf_dir, bin_dir)
    p = run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, "--dry-run")
    assert "would write" in p.stdout and "10-bridge.conflist" in p.stdout, p.stdout
    assert contents(conf_dir, bin_dir) == before
    run(plugin, "install", "--cni-bin-dir", bin_dir, "--cni-conf-dir", conf_dir, "--conflist", "20-ptp.conflist")
    assert (conf_dir / "10-bridge.conflist").read_bytes() == before[str(conf_dir / "10-bridge.conflist")]
    assert masq_entry(json.loads((conf_dir / "20-ptp.conflist").read_text())) == {"type": "ebpf-masq", **CAPS}


def test_help_is_complete(plugin):
    for cmd, words in (("install", ["--cni-bin-dir", "--cni-conf-dir", "--conf", "--conflist", "--pin-path",
                                    "--dry-run", ".conflist", "backup", "Idempotent"]),
                       ("uninstall", ["--cni-conf-dir", "--cni-bin-dir", "--pin-path", "restored", "Idempotent"]),
                       ("validate", ["--conf"]),
                       ("manifest", ["--preset", "k3s", "gke-cos", "openshift", "/home/kubernetes/bin",
                                     "/var/lib/rancher/k3s/agent/etc/cni/net.d", "--cni-bin-dir", "--cni-conf-dir",
                                     "--cni-cache-dir", "--natlog-dir", "--priority-class", "--uninstall",
                                     "ResourceQuota", "--cascade=foreground",
                                     "--namespace", "--image", "--conf", "--nat-outgoing", "--native-routing-cidr",
                                     "--set", "--ip-masq-agent", "--ip-masq-agent-file", "--metrics-service",
                                     "--service-monitor", "--cpu-request", "--memory-limit", "kube-system",
                                     "conf/daemonset.yaml"])):
        out = run(plugin, cmd, "--help").stdout
        for w in words:
            assert w in out, f"{cmd} --help lacks {w!r}"


# ---------------------------------------------------------------- (d) the DaemonSet's commands

def agent_command(main):
    """The container's command: `ebpf-masq agent` and its options."""
    argv = main["command"] + main.get("args", [])
    assert argv[:2] == ["ebpf-masq", "agent"], argv
    return argv


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


# ---------------------------------------------------------------- (e) ebpf-masq manifest

# Option sets whose output must validate; each with the kinds it must hold.
BASE_KINDS = ["Namespace", "ServiceAccount", "ResourceQuota", "ConfigMap", "DaemonSet"]
MANIFEST_VARIANTS = [
    ([], BASE_KINDS),
    (["--ip-masq-agent", "--namespace", "kube-system"], ["ServiceAccount", "ConfigMap", "DaemonSet"]),
    (["--preset", "k3s"], BASE_KINDS),
    (["--preset", "rke2"], BASE_KINDS),
    (["--preset", "gke-cos"], BASE_KINDS),
    (["--preset", "openshift", "--cni-cache-dir", "/var/lib/cni/multus"], BASE_KINDS),
    (["--natlog-dir", "/var/log/ebpf-masq", "--set", "natLog={{\"ipfix\": \"192.0.2.9:4739\"}}"], BASE_KINDS),
    (["--namespace", "net-system", "--existing-namespace"], ["ServiceAccount", "ResourceQuota", "ConfigMap", "DaemonSet"]),
    (["--priority-class", "node-agents"], ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"]),
    (["--uninstall"], ["Namespace", "ServiceAccount", "ResourceQuota", "DaemonSet"]),
    (["--uninstall", "--preset", "gke-cos", "--namespace", "kube-system", "--set", "pinPath=/sys/fs/bpf/masq"],
     ["ServiceAccount", "DaemonSet"]),
    (["--metrics-service"], BASE_KINDS + ["Service"]),
    (["--service-monitor", "--service-monitor-label", "release=prometheus"], BASE_KINDS + ["Service", "ServiceMonitor"]),
    (["--namespace", "kube-system", "--ip-masq-agent-file", "{ipm}", "--ip-masq-agent-all-reserved-ranges",
      "--service-monitor", "--conf", "{conf}", "--no-nat-outgoing", "--native-routing-cidr", "192.168.0.0/16",
      "--native-routing-cidr", "fd00:10::/56", "--set", "fastPath=true", "--set", "serviceCIDRs=[\"10.96.0.0/12\"]",
      "--cpu-limit", "500m", "--memory-limit", "1Gi", "--metrics-port", "9500", "--name", "masq",
      "--image", "registry.example/ebpf-masq:1.0", "--image-pull-policy", "Always"],
     ["ServiceAccount", "ConfigMap", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor"]),
]


def manifest(plugin, *opts):
    p = run(plugin, "manifest", *opts)
    return p, [d for d in yaml.safe_load_all(p.stdout) if d]


def manifest_inputs(tmp_path):
    """The files the variants name: ip-masq-agent's config and a Calico conflist."""
    ipm = tmp_path / "ip-masq-agent"
    ipm.write_text("nonMasqueradeCIDRs:\n  - 10.0.0.0/8\nmasqLinkLocal: false\nresyncInterval: 60s\n")
    conf = tmp_path / "calico.conflist"
    conf.write_text((CONF / "calico.conflist").read_text())
    return {"ipm": str(ipm), "conf": str(conf)}


def test_manifest_without_options_is_conf_daemonset_yaml(plugin):
    """The built binary prints conf/daemonset.yaml byte for byte (the unit test
    no_options_print_conf_daemonset_yaml checks the source the same way)."""
    p = run(plugin, "manifest")
    assert p.stdout == DAEMONSET.read_text(), "regenerate: ebpf-masq manifest > conf/daemonset.yaml"
    assert p.stderr == ""


@pytest.mark.parametrize("variant", range(len(MANIFEST_VARIANTS)))
def test_manifest_validates_offline_against_oldest_and_newest_kubernetes(plugin, tmp_path, variant):
    """Every built-in kind of each variant against the oldest and the newest
    Kubernetes the suite checks (k8s_validate: OLDEST and the package's latest),
    strictly, with no network; the ServiceMonitor against its CRD's schema."""
    opts, kinds = MANIFEST_VARIANTS[variant]
    opts = [o.format(**manifest_inputs(tmp_path)) for o in opts]
    p, docs = manifest(plugin, *opts)
    assert [d["kind"] for d in docs] == kinds
    out = tmp_path / "manifest.yaml"
    out.write_text(p.stdout)
    v = sh(["unshare", "--net", PY, VALIDATOR, out], check=False)
    assert "No module named" not in v.stderr, v.stderr
    assert v.returncode == 0, v.stdout + v.stderr
    latest = sh([PY, "-c", "from kubernetes_validate import utils; print(utils.latest_version())"]).stdout.strip()
    latest = ".".join(latest.split(".")[:2])  # 1.37.0 -> 1.37, as the validator prints it
    assert k8s_validate.OLDEST != latest
    builtin = [k for k in kinds if k != "ServiceMonitor"]
    for version in (k8s_validate.OLDEST, latest):
        assert v.stdout.count(f" against {version}\n") == len(builtin), v.stdout
    assert v.stdout.count(" against its CRD ") == kinds.count("ServiceMonitor"), v.stdout


def test_manifest_service_monitor_finds_the_service_and_the_metrics(plugin):
    """The ServiceMonitor has what its CRD requires (apiVersion monitoring.coreos.com/v1,
    metadata.name; spec.selector and spec.endpoints: prometheus-operator v0.84.1's
    monitoring.coreos.com_servicemonitors.yaml, as k8s_validate.SERVICE_MONITOR
    copies it) and what makes it scrape something: its selector matches the
    Service's labels in its namespace, each endpoint's port is a named port of the
    Service, which reaches the container port the agent serves /metrics on."""
    _, docs = manifest(plugin, "--service-monitor", "--metrics-port", "9500")
    [svc] = [d for d in docs if d["kind"] == "Service"]
    [sm] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["metadata"]["name"]
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert "namespaceSelector" not in sm["spec"]
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector and all(svc["metadata"]["labels"].get(k) == v for k, v in selector.items()), (selector, svc)
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    [main] = ds["spec"]["template"]["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert sm["spec"]["endpoints"]
    for e in sm["spec"]["endpoints"]:
        assert e["port"] in ports, (e, ports)
        assert container_ports[ports[e["port"]]["targetPort"]] == 9500
        assert e["path"] == "/metrics"
    assert "0.0.0.0:9500" in agent_command(main)
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert svc["spec"]["clusterIP"] == "None"


def test_manifest_ip_masq_agent(plugin, tmp_path):
    """--ip-masq-agent: ip-masq-agent's ConfigMap (optional) mounted whole at /etc/config,
    its key `config` as the file the agent reads by default, and the agent flag; every
    option the container passes is one `agent` has. The note about namespaces goes
    to stderr, never into the manifest."""
    p, docs = manifest(plugin, "--ip-masq-agent", "--namespace", "kube-system")
    assert p.stderr == ""
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    [vol] = [v for v in spec["volumes"] if v["name"] == "ip-masq-agent"]
    assert vol["configMap"] == {"name": "ip-masq-agent", "optional": True,
                                "items": [{"key": "config", "path": "ip-masq-agent"}]}
    [main] = spec["containers"]
    [mount] = [m for m in main["volumeMounts"] if m["name"] == "ip-masq-agent"]
    assert mount["mountPath"] == "/etc/config" and "subPath" not in mount
    argv = agent_command(main)
    assert argv[-1] == "--ip-masq-agent"
    usage = run(plugin, "agent", "--help").stdout
    assert "/etc/config/ip-masq-agent" in usage
    assert all(a in usage for a in argv if a.startswith("--")), argv

    # With the file: its ConfigMap comes along, holding the file as it is.
    inputs = manifest_inputs(tmp_path)
    p, docs = manifest(plugin, "--ip-masq-agent-file", inputs["ipm"], "--ip-masq-agent-all-reserved-ranges")
    assert p.stderr == ""
    [cm] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ip-masq-agent"]
    assert cm["data"]["config"] == open(inputs["ipm"]).read()
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    argv = agent_command(ds["spec"]["template"]["spec"]["containers"][0])
    assert argv[-2:] == ["--ip-masq-agent", "--ip-masq-agent-all-reserved-ranges"]
    assert all(a in usage for a in argv if a.startswith("--")), argv


def test_manifest_ip_masq_agent_outside_kube_system_needs_its_file(plugin):
    """ip-masq-agent's ConfigMap is in kube-system and a ConfigMap volume is of the pod's
    namespace: --ip-masq-agent elsewhere, with no --ip-masq-agent-file, would mount
    nothing. An error naming both fixes, and nothing printed."""
    for opts in (["--ip-masq-agent"], ["--namespace", "net-system", "--ip-masq-agent-all-reserved-ranges"],
                 ["--uninstall", "--ip-masq-agent"]):
        p = run(plugin, "manifest", *opts, check=False)
        assert p.returncode != 0 and p.stdout == "", (opts, p.stdout)
        assert "--namespace kube-system" in p.stderr and "--ip-masq-agent-file FILE" in p.stderr, p.stderr


def test_manifest_uninstall_runs_what_agent_has(plugin):
    """The uninstall DaemonSet's container runs `ebpf-masq agent --uninstall` with options
    `agent` has, with the node directories the agent's DaemonSet mounts, and its probe on
    the port it serves."""
    _, install = manifest(plugin, "--preset", "openshift")
    _, docs = manifest(plugin, "--preset", "openshift", "--uninstall")
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    [agent_ds] = [d for d in install if d["kind"] == "DaemonSet"]
    [main] = ds["spec"]["template"]["spec"]["containers"]
    argv = main["command"]
    assert argv[:3] == ["ebpf-masq", "agent", "--uninstall"], argv
    usage = run(plugin, "agent", "--help").stdout
    assert all(a in usage for a in argv if a.startswith("--")), argv
    host = {v["name"]: v["hostPath"]["path"] for v in agent_ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    mine = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert mine == {k: host[k] for k in ("cni-bin", "cni-conf", "bpffs")}
    assert (host["cni-bin"], host["cni-conf"]) == ("/var/lib/cni/bin", "/run/multus/cni/net.d")
    probe = main["readinessProbe"]["httpGet"]
    [port] = [p["containerPort"] for p in main["ports"] if p["name"] == probe["port"]]
    assert f"0.0.0.0:{port}" in argv and probe["path"] == "/healthz"
    # Its pods are not the agent's: the agent's selector does not match them.
    sel = agent_ds["spec"]["selector"]["matchLabels"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert any(labels.get(k) != v for k, v in sel.items())


def test_manifest_conf_entry_passes_validate(plugin, tmp_path):
    """The ConfigMap's entry made from a conflist and options is one `validate` accepts,
    with the conflist's keys and the options' values."""
    inputs = manifest_inputs(tmp_path)
    _, docs = manifest(plugin, "--conf", inputs["conf"], "--native-routing-cidr", "192.168.0.0/16",
                       "--set", "natTimeouts={\"udp\": 60}")
    [cm] = [d for d in docs if d["kind"] == "ConfigMap"]
    entry = json.loads(cm["data"]["ebpf-masq.json"])
    shipped = masq_entry(example("calico"))
    assert {k: v for k, v in entry.items() if k in shipped and k != "nativeRoutingCIDR"} == \
        {k: v for k, v in shipped.items() if k != "nativeRoutingCIDR"}
    assert entry["nativeRoutingCIDR"] == ["192.168.0.0/16"] and entry["natTimeouts"] == {"udp": 60}
    f = tmp_path / "entry.json"
    f.write_text(cm["data"]["ebpf-masq.json"])
    run(plugin, "validate", "--conf", f)


@pytest.mark.parametrize("conf,opts,key", [
    ('{"type": "ebpf-masq", "natOutgoin": true}', [], "natOutgoin"),
    ('{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}, '
     '{"type": "ebpf-masq", "egressPolicies": [{"name": "p", "destinations": ["198.51.100.0/24"], "masqAddress": "x"}]}]}',
     [], "masqAddress"),
    ('{"type": "ebpf-masq"}', ["--set", "nativeRoutingCDR=10.0.0.0/8"], "nativeRoutingCDR"),
    ('{"type": "ebpf-masq"}', ["--native-routing-cidr", "10.0.0.0/33"], "nativeRoutingCIDR"),
])
def test_manifest_refuses_a_bad_key_and_prints_nothing(plugin, tmp_path, conf, opts, key):
    f = tmp_path / "bad.json"
    f.write_text(conf)
    p = run(plugin, "manifest", "--conf", f, *opts, check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout == "", "nothing may be printed: `| kubectl apply -f -` would apply half a manifest"
    # The key is named, as a path from the top of the file when it is nested.
    assert re.search(rf'invalid config key "([^"]*\.)?{key}(\[\d+\])?"', p.stderr), p.stderr
    assert p.stderr.endswith("(code 7)\n"), p.stderr


def test_validator_checks_service_monitor_against_its_crd(plugin, tmp_path):
    """The ServiceMonitor check is not a rubber stamp: what its CRD requires, its
    types and enums, and misspelt fields."""
    text = run(plugin, "manifest", "--service-monitor").stdout
    docs = [d for d in yaml.safe_load_all(text) if d]
    [i] = [n for n, d in enumerate(docs) if d["kind"] == "ServiceMonitor"]

    def broken(change):
        sm = json.loads(json.dumps(docs[i]))
        change(sm)
        return sm

    for sm in (broken(lambda d: d["spec"].pop("selector")),
               broken(lambda d: d["spec"].pop("endpoints")),
               broken(lambda d: d.pop("spec")),
               broken(lambda d: d["metadata"].pop("name")),
               broken(lambda d: d.update(apiVersion="monitoring.coreos.com/v1beta1")),
               broken(lambda d: d["spec"]["endpoints"][0].update(port=9436)),
               broken(lambda d: d["spec"]["endpoints"][0].update(scheme="tcp")),
               broken(lambda d: d["spec"]["endpoints"][0].update(interval="30 seconds")),
               broken(lambda d: d["spec"]["endpoints"][0].update(prot="metrics")),
               broken(lambda d: d["spec"]["endpoints"][0]["relabelings"][0].update(action="rename")),
               broken(lambda d: d["spec"].update(selecter=d["spec"]["selector"]))):
        f = tmp_path / "bad.yaml"
        f.write_text(yaml.safe_dump_all([*docs[:i], sm]))
        p = sh(["unshare", "--net", PY, VALIDATOR, f], check=False)
        assert p.returncode == 1 and "FAIL ServiceMonitor/" in p.stdout, p.stdout + p.stderr


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
