use clap::Parser;
use serde::Deserialize;

use super::*;

/// The file `ebpf-masq manifest` with no options must print, byte for byte.
const DAEMONSET_YAML: &str = include_str!("../../../../conf/daemonset.yaml");

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    a: ManifestArgs,
}

fn args(opts: &[&str]) -> ManifestArgs {
    Cli::try_parse_from(std::iter::once("manifest").chain(opts.iter().copied()))
        .unwrap_or_else(|e| panic!("{opts:?}: {e}"))
        .a
}

fn command(opts: &[&str]) -> String {
    command_line(&opts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// Render, and check what every rendering must hold: each comment found its
/// place, and YAML readers get back exactly the objects built.
fn rendered(opts: &[&str]) -> (String, Vec<Value>) {
    let (header, docs) = documents(&args(opts), &command(opts)).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
    let (text, unused) = yaml::render(&header, &docs);
    assert!(unused.is_empty(), "{opts:?}: comments that matched nothing: {unused:?}");
    let read: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{opts:?}: {e}\n{text}")))
        .collect();
    let built: Vec<Value> = docs.into_iter().map(|d| d.value).collect();
    assert_eq!(read, built, "{opts:?}: the YAML does not read back as the objects built\n{text}");
    assert_eq!(render(&args(opts), &command(opts)).unwrap(), text);
    (text, built)
}

fn kind<'a>(docs: &'a [Value], k: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == k).collect()
}

fn one<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    match kind(docs, k).as_slice() {
        [d] => d,
        other => panic!("{} documents of kind {k}", other.len()),
    }
}

fn temp_file(content: &str) -> tempfile_like::TempFile {
    tempfile_like::TempFile::new(content)
}

/// A scratch file removed on drop (no tempfile crate in the tree).
mod tempfile_like {
    use std::sync::atomic::{AtomicU32, Ordering};

    static N: AtomicU32 = AtomicU32::new(0);

    pub struct TempFile(pub std::path::PathBuf);

    impl TempFile {
        pub fn new(content: &str) -> Self {
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("ebpf-masq-manifest-test-{}-{n}", std::process::id()));
            std::fs::write(&p, content).unwrap();
            TempFile(p)
        }

        pub fn arg(&self) -> &str {
            self.0.to_str().unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn agent_argv(docs: &[Value]) -> Vec<String> {
    let c = &one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    c["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

fn entry(docs: &[Value]) -> Value {
    let cm = kind(docs, "ConfigMap").into_iter().find(|c| c["data"].get(CONFIG_KEY).is_some()).unwrap();
    serde_json::from_str(cm["data"][CONFIG_KEY].as_str().unwrap()).unwrap()
}

#[test]
fn no_options_print_conf_daemonset_yaml() {
    let (text, _) = rendered(&[]);
    if text != DAEMONSET_YAML {
        let line = text.lines().zip(DAEMONSET_YAML.lines()).position(|(a, b)| a != b).map(|i| i + 1);
        panic!(
            "`ebpf-masq manifest` differs from conf/daemonset.yaml (first differing line: {line:?}); \
             regenerate it: ebpf-masq manifest > conf/daemonset.yaml"
        );
    }
}

#[test]
fn default_objects() {
    let (_, docs) = rendered(&[]);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Namespace", "ServiceAccount", "ResourceQuota", "ConfigMap", "DaemonSet"]);
    let spec = &one(&docs, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
    let c = &spec["containers"][0];
    assert_eq!(c["resources"], json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}}));
    for p in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[p]["httpGet"], json!({"path": "/healthz", "port": "metrics"}));
    }
    assert!(!agent_argv(&docs).contains(&"--ip-masq-agent".to_string()));
    assert_eq!(
        entry(&docs),
        json!({"cniVersion": "1.0.0", "name": "ebpf-masq", "type": "ebpf-masq", "natOutgoing": true,
               "nativeRoutingCIDR": ["10.244.0.0/16"], "pinPath": "/sys/fs/bpf/ebpf-masq"})
    );
}

#[test]
fn ip_masq_agent_mounts_its_configmap_and_turns_the_agent_flag_on() {
    let (_, docs) = rendered(&["--ip-masq-agent", "--namespace", "kube-system"]);
    let spec = &one(&docs, "DaemonSet")["spec"]["template"]["spec"];
    let vol = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "ip-masq-agent").unwrap();
    assert_eq!(
        vol["configMap"],
        json!({"name": "ip-masq-agent", "optional": true, "items": [{"key": "config", "path": "ip-masq-agent"}]})
    );
    let mounts = spec["containers"][0]["volumeMounts"].as_array().unwrap();
    let m = mounts.iter().find(|m| m["name"] == "ip-masq-agent").unwrap();
    assert_eq!(m["mountPath"], "/etc/config");
    assert!(m.get("subPath").is_none(), "a subPath mount never sees kubelet's updates");
    // The file the agent reads by default is where the volume puts it.
    assert_eq!(format!("{}/{}", m["mountPath"].as_str().unwrap(), vol["configMap"]["items"][0]["path"].as_str().unwrap()),
               config::IP_MASQ_AGENT_DEFAULT_PATH);
    assert_eq!(agent_argv(&docs).last().unwrap(), "--ip-masq-agent");
    assert_eq!(kind(&docs, "ConfigMap").len(), 1, "no ip-masq-agent ConfigMap without --ip-masq-agent-file");

    let (_, docs) = rendered(&["--ip-masq-agent-all-reserved-ranges", "--ip-masq-agent-configmap", "masq-list",
                               "--namespace", "kube-system"]);
    assert!(agent_argv(&docs).ends_with(&["--ip-masq-agent".into(), "--ip-masq-agent-all-reserved-ranges".into()]));
    let vols = &one(&docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"];
    assert!(vols.as_array().unwrap().iter().any(|v| v["configMap"]["name"] == "masq-list"));
}

#[test]
fn ip_masq_agent_file_becomes_its_configmap() {
    let content = "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 192.168.0.0/16\nmasqLinkLocal: false\nresyncInterval: 60s\n";
    let f = temp_file(content);
    let (_, docs) = rendered(&["--ip-masq-agent-file", f.arg(), "--namespace", "kube-system"]);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "ConfigMap", "ConfigMap", "DaemonSet"], "kube-system exists: no Namespace");
    let cm = kind(&docs, "ConfigMap")[1];
    assert_eq!((&cm["metadata"]["name"], &cm["metadata"]["namespace"]), (&json!("ip-masq-agent"), &json!("kube-system")));
    assert_eq!(cm["data"]["config"], content);
    assert!(agent_argv(&docs).contains(&"--ip-masq-agent".to_string()));

    // Refused as the agent would refuse it; a key ip-masq-agent ignores is no reason to.
    let bad = temp_file("nonMasqueradeCIDRs: [10.0.0.1/8]\n");
    let e = render(&args(&["--ip-masq-agent-file", bad.arg()]), "").unwrap_err();
    assert!(e.msg.contains("nonMasqueradeCIDRs[0]") && e.msg.contains(bad.arg()), "{e}");
    let odd = temp_file("NonMasqueradeCIDRs: [10.0.0.0/8]\nmasqLinkLocl: true\n");
    assert!(render(&args(&["--ip-masq-agent-file", odd.arg()]), "").is_ok());
}

/// What `kubectl apply` of a ServiceMonitor needs, from the CRD
/// monitoring.coreos.com_servicemonitors.yaml of prometheus-operator v0.84.1
/// (example/prometheus-operator-crd/): the object requires `spec`; `spec`
/// requires `selector` and `endpoints`; `endpoints[].port` names a port of the
/// selected Service (by name, a string). The Service must carry the labels the
/// selector matches, in the ServiceMonitor's namespace (no namespaceSelector).
/// integration/lab/k8s_validate.py checks the same against the CRD's schema.
#[test]
fn service_monitor_has_what_its_crd_requires_and_finds_the_service() {
    for opts in [&["--service-monitor"][..], &["--service-monitor", "--metrics-port", "9500", "--name", "masq"]] {
        let (_, docs) = rendered(opts);
        let svc = one(&docs, "Service");
        let sm = one(&docs, "ServiceMonitor");
        assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
        assert!(sm["metadata"]["name"].as_str().is_some_and(|n| !n.is_empty()));
        assert_eq!(sm["metadata"]["namespace"], svc["metadata"]["namespace"]);
        let selector = sm["spec"]["selector"]["matchLabels"].as_object().unwrap();
        assert!(!selector.is_empty());
        for (k, v) in selector {
            assert_eq!(&svc["metadata"]["labels"][k], v, "the selector does not match the Service's label {k}");
        }
        let endpoints = sm["spec"]["endpoints"].as_array().unwrap();
        assert!(!endpoints.is_empty());
        let svc_ports = svc["spec"]["ports"].as_array().unwrap();
        for e in endpoints {
            let port = e["port"].as_str().unwrap();
            let p = svc_ports.iter().find(|p| p["name"] == port).unwrap_or_else(|| panic!("no Service port {port}"));
            // ... which reaches the container's metrics port, the one serving /metrics.
            let c = &one(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
            let cp = c["ports"].as_array().unwrap().iter().find(|cp| cp["name"] == p["targetPort"]).unwrap();
            assert_eq!(cp["containerPort"], p["port"]);
            assert!(agent_argv(&docs).contains(&format!("0.0.0.0:{}", cp["containerPort"])));
        }
        // The Service selects the DaemonSet's pods.
        let pod_labels = &one(&docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"];
        for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v);
        }
    }
    let (_, docs) = rendered(&["--metrics-service"]);
    assert_eq!((kind(&docs, "Service").len(), kind(&docs, "ServiceMonitor").len()), (1, 0));
    let (_, docs) = rendered(&["--service-monitor", "--service-monitor-label", "release=prometheus"]);
    assert_eq!(one(&docs, "ServiceMonitor")["metadata"]["labels"]["release"], "prometheus");
}

#[test]
fn options_set_the_entry_and_the_resources() {
    let (_, docs) = rendered(&[
        "--no-nat-outgoing", "--native-routing-cidr", "10.0.0.0/8", "--native-routing-cidr", "fd00::/8",
        "--non-masquerade-cidr", "172.16.0.0/12", "--egress-interface", "eth0", "--set", "fastPath=true",
        "--set", "logLevel=debug", "--cpu-limit", "1", "--memory-limit", "1Gi", "--memory-request", "128Mi",
        "--image", "registry.example/ebpf-masq:1.2.3", "--image-pull-policy", "Always",
    ]);
    let e = entry(&docs);
    assert_eq!(e["natOutgoing"], false);
    assert_eq!(e["nativeRoutingCIDR"], json!(["10.0.0.0/8", "fd00::/8"]));
    assert_eq!(e["nonMasqueradeCIDRs"], json!(["172.16.0.0/12"]));
    assert_eq!(e["egressInterfaces"], json!(["eth0"]));
    assert_eq!((&e["fastPath"], &e["logLevel"]), (&json!(true), &json!("debug")));
    let c = &one(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["resources"], json!({"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}));
    assert_eq!((&c["image"], &c["imagePullPolicy"]), (&json!("registry.example/ebpf-masq:1.2.3"), &json!("Always")));
}

#[test]
fn conf_file_is_the_entry_and_options_go_over_it() {
    let conflist = temp_file(
        r#"{"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
            {"type": "calico", "ipam": {"type": "calico-ipam"}},
            {"type": "ebpf-masq", "nativeRoutingCIDR": "192.168.0.0/16", "egressPolicies": [
              {"name": "partner", "namespaces": ["payments"], "destinations": ["198.51.100.0/24"], "natOutgoing": false},
              {"name": "reports-direct", "namespaces": ["reports"], "pods": ["reports/mysql-client-*"],
               "destinations": ["198.51.100.10/32", "198.51.100.11/32", "198.51.100.12/32"], "natOutgoing": false}]}]}"#,
    );
    let (text, docs) = rendered(&["--conf", conflist.arg(), "--set", "natMaxEntries=2097152"]);
    let e = entry(&docs);
    assert_eq!((&e["cniVersion"], &e["name"], &e["type"]), (&json!("0.3.1"), &json!("k8s-pod-network"), &json!("ebpf-masq")));
    assert_eq!(e["nativeRoutingCIDR"], "192.168.0.0/16");
    assert_eq!(e["egressPolicies"][1]["pods"], json!(["reports/mysql-client-*"]));
    assert_eq!(e["natMaxEntries"], 2097152);
    assert!(e.get("natOutgoing").is_none(), "with --conf the defaults are not added");
    // Readable: a line per short value, a long one broken up.
    assert!(text.contains("\n      \"nativeRoutingCIDR\": \"192.168.0.0/16\",\n"), "{text}");
    assert!(text.contains("\n      \"egressPolicies\": [\n        {\n          \"name\": \"partner\",\n"), "{text}");
    assert!(text.contains("\n          \"destinations\": [\"198.51.100.10/32\", \"198.51.100.11/32\", \"198.51.100.12/32\"],\n"));
    let keys: Vec<&String> = e.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["cniVersion", "name", "type", "nativeRoutingCIDR", "egressPolicies", "natMaxEntries"], "the file's order");
    assert!(entry_json(e.as_object().unwrap()).lines().all(|l| l.len() <= JSON_WIDTH), "{text}");

    // One plugin config, as it stands in a conflist (no cniVersion, no name).
    let single = temp_file(r#"{"type": "ebpf-masq", "natOutgoing": true, "masqLinkLocal": true}"#);
    let (_, docs) = rendered(&["--conf", single.arg(), "--native-routing-cidr", "10.88.0.0/16"]);
    assert_eq!(
        entry(&docs),
        json!({"cniVersion": "1.0.0", "name": "ebpf-masq", "type": "ebpf-masq", "natOutgoing": true,
               "masqLinkLocal": true, "nativeRoutingCIDR": ["10.88.0.0/16"]})
    );
}

#[test]
fn a_bad_key_is_an_error_naming_it() {
    let f = temp_file(r#"{"type": "ebpf-masq", "natOutgoin": true}"#);
    let e = render(&args(&["--conf", f.arg()]), "").unwrap_err();
    assert!(e.msg.contains("\"natOutgoin\"") && e.msg.contains("natOutgoing") && e.msg.contains(f.arg()), "{e}");
    assert_eq!(e.code, code::INVALID_CONFIG);

    let f = temp_file(r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ebpf-masq", "portRange": "1-2-3"}]}"#);
    let e = render(&args(&["--conf", f.arg()]), "").unwrap_err();
    assert!(e.msg.contains("plugins[0].portRange"), "{e}");

    for (opts, key) in [
        (&["--set", "natOutgoing=maybe"][..], "natOutgoing"),
        (&["--set", "fastPth=true"], "fastPth"),
        (&["--native-routing-cidr", "10.0.0.0/33"], "nativeRoutingCIDR"),
        (&["--set", "pinPath=/var/lib/ebpf-masq"], "pinPath"),
    ] {
        let e = render(&args(opts), "").unwrap_err();
        assert!(e.msg.contains(&format!("\"{key}")), "{opts:?}: {e}");
    }
    for (opts, what) in [
        (&["--set", "=1"][..], "--set"),
        (&["--memory-limit", "lots"], "--memory-limit"),
        (&["--cpu-request", "1.5.0"], "--cpu-request"),
        (&["--namespace", "Kube_System"], "--namespace"),
        (&["--name", &"x".repeat(60)], "--name"),
        (&["--service-monitor", "--service-monitor-label", "nolabel"], "--service-monitor-label"),
        (&["--image", "a b"], "--image"),
    ] {
        let e = render(&args(opts), "").unwrap_err();
        assert!(e.msg.starts_with(what), "{opts:?}: {e}");
    }
    assert!(Cli::try_parse_from(["manifest", "--nat-outgoing", "--no-nat-outgoing"]).is_err());
}

#[test]
fn quantities() {
    for q in ["1", "50m", "0.5", "64Mi", "1Gi", "1e3", "2E-1", "+1", "100k", ".5"] {
        assert!(is_quantity(q), "{q}");
    }
    for q in ["", "m", "1.2.3", "1mi", "64MB", "1e", "lots", "1 Gi"] {
        assert!(!is_quantity(q), "{q}");
    }
}

#[test]
fn yaml_strings_read_back_the_same_in_every_reader() {
    // Strings a careless writer gets wrong: YAML 1.1 booleans and numbers,
    // indicators, comments, quotes, leading spaces, several lines.
    let tricky = [
        "true", "yes", "No", "on", "OFF", "y", "null", "~", "", "1.0.0", "0.5", "1e3", "0x1f", "1:20", "0o17", ".inf",
        "- x", "a: b", "a #b", "#x", "'q'", "\"q\"", " lead", "trail ", "*ref", "&anchor", "!tag", "@at", "`tick",
        "%pct", "{x}", "[x]", "x,y", "? q", "|", ">", "line\nline", "two\n\nblank\n", "no final\nnewline",
        "  indented\nfirst", "tab\there", "ünïcødé", "0.0.0.0:9436",
    ];
    for s in tricky {
        let mut m = Map::new();
        m.insert(s.to_string(), json!(s));
        let doc = json!({"k": s, "seq": [s, {"in": s}], "map": Value::Object(m)});
        let (text, _) = yaml::render("", &[Doc::new(doc.clone())]);
        let back: Value = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{s:?}: {e}\n{text}"));
        assert_eq!(back, doc, "{s:?}:\n{text}");
        if ["true", "yes", "No", "on", "OFF", "y", "1.0.0", "0.5", "1:20"].contains(&s) {
            assert!(text.contains(&format!("k: \"{s}\"")), "{s:?} must be quoted:\n{text}");
        }
    }
}

#[test]
fn command_line_in_the_header_reads_back_in_a_shell() {
    assert_eq!(command(&[]), "ebpf-masq manifest");
    assert_eq!(
        command(&["--set", "egressPolicies=[]", "--image", "r/x:1", "--set", "logFile=a b"]),
        "ebpf-masq manifest --set 'egressPolicies=[]' --image r/x:1 --set 'logFile=a b'"
    );
    let (text, _) = rendered(&["--metrics-service", "--namespace", "monitoring-x"]);
    assert!(text.starts_with("# ebpf-masq on every node of a Kubernetes cluster, as `ebpf-masq manifest --metrics-service --namespace monitoring-x` renders it\n"));
    assert!(text.lines().take_while(|l| !l.starts_with("apiVersion")).all(|l| l.starts_with('#')));
}

/// The host directories of the DaemonSet's volumes, by volume name.
fn host_paths(docs: &[Value], ds: &str) -> Vec<(String, String)> {
    let d = kind(docs, "DaemonSet").into_iter().find(|d| d["metadata"]["name"] == ds).unwrap();
    d["spec"]["template"]["spec"]["volumes"].as_array().unwrap().iter()
        .filter(|v| v.get("hostPath").is_some())
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["hostPath"]["path"].as_str().unwrap().to_string()))
        .collect()
}

/// The value after `opt` in an argv.
fn opt_value<'a>(argv: &'a [String], opt: &str) -> Option<&'a str> {
    argv.iter().position(|a| a == opt).map(|i| argv[i + 1].as_str())
}

#[test]
fn presets_set_the_node_directories_and_flags_win() {
    for (preset, bin, conf) in [
        (None, "/opt/cni/bin", "/etc/cni/net.d"),
        (Some("k3s"), "/var/lib/rancher/k3s/data/cni", "/var/lib/rancher/k3s/agent/etc/cni/net.d"),
        (Some("rke2"), "/opt/cni/bin", "/etc/cni/net.d"),
        (Some("gke-cos"), "/home/kubernetes/bin", "/etc/cni/net.d"),
        (Some("openshift"), "/var/lib/cni/bin", "/run/multus/cni/net.d"),
    ] {
        let opts: Vec<&str> = preset.map(|p| vec!["--preset", p]).unwrap_or_default();
        let (text, docs) = rendered(&opts);
        let paths = host_paths(&docs, "ebpf-masq");
        assert_eq!(paths[..3], [("cni-bin".into(), bin.into()), ("cni-conf".into(), conf.into()),
                                ("cni-cache".into(), "/var/lib/cni".into())], "{preset:?}");
        // The agent is told where the container sees them, and the mounts put them there.
        let argv = agent_argv(&docs);
        let mounts = &one(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
        for (opt, vol) in [("--cni-bin-dir", "cni-bin"), ("--cni-conf-dir", "cni-conf"), ("--cni-cache-dir", "cni-cache")] {
            let m = mounts.as_array().unwrap().iter().find(|m| m["name"] == vol).unwrap();
            assert_eq!(opt_value(&argv, opt), m["mountPath"].as_str(), "{preset:?} {opt}");
        }
        assert!(text.contains(&format!("copies the binary to the node's {bin}, chains")), "{preset:?}");
    }
    let (_, docs) = rendered(&["--preset", "k3s", "--cni-bin-dir", "/opt/k3s-cni/", "--cni-cache-dir", "/run/cni"]);
    let paths = host_paths(&docs, "ebpf-masq");
    assert_eq!((paths[0].1.as_str(), paths[1].1.as_str(), paths[2].1.as_str()),
               ("/opt/k3s-cni", "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/run/cni"));
    assert_eq!(opt_value(&agent_argv(&docs), "--cni-bin-dir"), Some("/host/opt/k3s-cni"));
    for (opts, what) in [
        (&["--cni-bin-dir", "opt/cni/bin"][..], "--cni-bin-dir"),
        (&["--cni-conf-dir", "/etc/../cni"], "--cni-conf-dir"),
        (&["--cni-cache-dir", "/"], "--cni-cache-dir"),
        (&["--cni-bin-dir", "/etc/cni/net.d"], "--cni-bin-dir"),
        (&["--natlog-dir", "/var/log/a b"], "--natlog-dir"),
    ] {
        let e = render(&args(opts), "").unwrap_err();
        assert!(e.msg.starts_with(what), "{opts:?}: {e}");
    }
    assert!(Cli::try_parse_from(["manifest", "--preset", "eks"]).is_err());
}

#[test]
fn priority_class_is_admitted_where_the_pods_go() {
    // Outside kube-system: system-node-critical and a quota scoped to it.
    let (_, docs) = rendered(&[]);
    let q = one(&docs, "ResourceQuota");
    assert_eq!(q["metadata"]["namespace"], "ebpf-masq");
    assert_eq!(q["spec"], json!({"scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}]}}));
    assert!(q["spec"].get("hard").is_none(), "it limits nothing");
    let pc = |docs: &[Value]| one(docs, "DaemonSet")["spec"]["template"]["spec"]["priorityClassName"].clone();
    assert_eq!(pc(&docs), "system-node-critical");
    // kube-system admits the class with no quota.
    let (_, docs) = rendered(&["--namespace", "kube-system"]);
    assert!(kind(&docs, "ResourceQuota").is_empty());
    assert_eq!(pc(&docs), "system-node-critical");
    // A class of one's own: no quota.
    let (_, docs) = rendered(&["--priority-class", "node-agents"]);
    assert!(kind(&docs, "ResourceQuota").is_empty());
    assert_eq!(pc(&docs), "node-agents");
    let e = render(&args(&["--priority-class", "Node_Agents"]), "").unwrap_err();
    assert!(e.msg.starts_with("--priority-class"), "{e}");
}

#[test]
fn ip_masq_agent_outside_kube_system_needs_its_file() {
    for opts in [&["--ip-masq-agent"][..], &["--ip-masq-agent-all-reserved-ranges", "--namespace", "net"]] {
        let e = render(&args(opts), "").unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG);
        assert!(e.msg.contains("--namespace kube-system") && e.msg.contains("--ip-masq-agent-file FILE"), "{e}");
    }
    let f = temp_file("nonMasqueradeCIDRs: [10.0.0.0/8]\n");
    assert!(render(&args(&["--ip-masq-agent", "--ip-masq-agent-file", f.arg()]), "").is_ok());
    assert!(render(&args(&["--ip-masq-agent", "--namespace", "kube-system"]), "").is_ok());
}

#[test]
fn natlog_dir_is_mounted_and_holds_the_file() {
    let (_, docs) = rendered(&["--natlog-dir", "/var/log/ebpf-masq/"]);
    assert_eq!(entry(&docs)["natLog"], json!({"file": "/var/log/ebpf-masq/nat.json"}));
    assert!(host_paths(&docs, "ebpf-masq").contains(&("natlog".into(), "/var/log/ebpf-masq".into())));
    let mounts = &one(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    let m = mounts.as_array().unwrap().iter().find(|m| m["name"] == "natlog").unwrap();
    assert_eq!(m["mountPath"], "/var/log/ebpf-masq", "the same path as on the node");
    assert!(m.get("readOnly").is_none());
    // An entry's own natLog keeps its keys; a file it names must be under the directory.
    let (_, docs) = rendered(&["--natlog-dir", "/srv/nat", "--set", r#"natLog={"ipfix": "192.0.2.9:4739"}"#]);
    assert_eq!(entry(&docs)["natLog"], json!({"ipfix": "192.0.2.9:4739", "file": "/srv/nat/nat.json"}));
    let (_, docs) = rendered(&["--natlog-dir", "/srv/nat", "--set", r#"natLog={"file": "/srv/nat/x.json"}"#]);
    assert_eq!(entry(&docs)["natLog"], json!({"file": "/srv/nat/x.json"}));
    for opts in [&["--natlog-dir", "/srv/nat", "--set", r#"natLog={"file": "/var/log/nat.json"}"#][..],
                 &["--set", r#"natLog={"file": "/var/log/nat.json"}"#]] {
        let e = render(&args(opts), "").unwrap_err();
        assert!(e.msg.contains("\"natLog.file\"") && e.msg.contains("--natlog-dir"), "{opts:?}: {e}");
    }
    // The comments follow the mounts, whatever else is mounted.
    rendered(&["--natlog-dir", "/srv/nat", "--ip-masq-agent", "--namespace", "kube-system"]);
}

#[test]
fn uninstall_prints_a_daemonset_that_takes_ebpf_masq_off() {
    let (text, docs) = rendered(&["--uninstall", "--preset", "k3s"]);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Namespace", "ServiceAccount", "ResourceQuota", "DaemonSet"]);
    let ds = one(&docs, "DaemonSet");
    assert_eq!(ds["metadata"]["name"], "ebpf-masq-uninstall");
    // Its pods are never the agent DaemonSet's.
    let (_, install) = rendered(&["--preset", "k3s"]);
    let agent_sel = &one(&install, "DaemonSet")["spec"]["selector"]["matchLabels"];
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    assert!(agent_sel.as_object().unwrap().iter().any(|(k, v)| &pod_labels[k] != v));
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], one(&docs, "ServiceAccount")["metadata"]["name"]);
    let c = &spec["containers"][0];
    let argv: Vec<String> = c["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
    assert_eq!(argv[..3], ["ebpf-masq", "agent", "--uninstall"]);
    assert_eq!(opt_value(&argv, "--cni-conf-dir"), Some("/host/var/lib/rancher/k3s/agent/etc/cni/net.d"));
    assert_eq!(opt_value(&argv, "--cni-bin-dir"), Some("/host/var/lib/rancher/k3s/data/cni"));
    assert_eq!(opt_value(&argv, "--pin-path"), None, "the default pinPath needs no option");
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/healthz", "port": "healthz"}));
    assert!(argv.contains(&"0.0.0.0:9436".to_string()));
    assert_eq!(host_paths(&docs, "ebpf-masq-uninstall"),
               [("cni-bin".into(), "/var/lib/rancher/k3s/data/cni".into()),
                ("cni-conf".into(), "/var/lib/rancher/k3s/agent/etc/cni/net.d".into()),
                ("bpffs".into(), "/sys/fs/bpf".into())]);
    assert!(text.contains("delete daemonset ebpf-masq --cascade=foreground"), "{text}");
    assert!(text.contains("rollout status daemonset ebpf-masq-uninstall"), "{text}");
    // A pinPath of the entry's own is passed on.
    let (_, docs) = rendered(&["--uninstall", "--namespace", "kube-system", "--set", "pinPath=/sys/fs/bpf/masq2"]);
    assert!(kind(&docs, "ResourceQuota").is_empty() && kind(&docs, "Namespace").is_empty());
    let c = &one(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    let argv: Vec<String> = c["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
    assert_eq!(opt_value(&argv, "--pin-path"), Some("/sys/fs/bpf/masq2"));
}
