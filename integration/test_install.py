"""`ebpf-masq install` / `uninstall` / `validate`, the conf/ examples, conf/daemonset.yaml
and the Containerfiles.

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
import shutil
import stat

import pytest

from lab.installlab import (
    agent_command, BAK, CAPS, CONF, contents, DAEMONSET, example, EXAMPLES, keys_in_order,
    manifests, masq_entry, node_ns, one, run, scratch, snapshot, VALIDATOR, without_masq,
)
from lab.netlab import PY, REPO, sh


@pytest.fixture
def node(lab):
    return node_ns(lab)


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
