"""`ebpf-masq manifest`: the DaemonSet and its objects for each option set, validated
offline against the oldest and newest Kubernetes schemas (kubernetes-validate, no
cluster), the ServiceMonitor, ip-masq-agent's ConfigMap, the uninstaller, and bad
options refused with nothing printed.
"""
import json
import re

import pytest
import yaml

from lab import k8s_validate
from lab.installlab import agent_command, CONF, DAEMONSET, example, masq_entry, one, run, VALIDATOR
from lab.netlab import PY, sh


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
