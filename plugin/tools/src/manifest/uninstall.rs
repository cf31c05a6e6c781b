//! `ebpf-masq manifest --uninstall`: a DaemonSet running `ebpf-masq agent
//! --uninstall` on every node, and what it needs (ServiceAccount, the
//! priority class's ResourceQuota). Its pods are ready once their node is
//! clean; then the operator deletes it.

use serde_json::{json, Map, Value};

use ebpf_masq_core::config::DEFAULT_PIN_PATH;

use super::node::NodeDirs;
use super::objects::{node_mounts, node_pod_spec};
use super::yaml::Doc;
use super::{ManifestArgs, NAME_LABEL};

fn name(a: &ManifestArgs) -> String {
    format!("{}-uninstall", a.name)
}

pub(super) fn header(a: &ManifestArgs, image: &str, command: &str, dirs: &NodeDirs) -> String {
    let (ns, agent, un) = (&a.namespace, &a.name, name(a));
    let install = command.replacen(" --uninstall", "", 1);
    format!(
        "Takes ebpf-masq off every node of a Kubernetes cluster, as `{command}` renders it\n\
         (the options of the install, plus --uninstall; image {image}). In this order:\n\
         \n  \
         # 1. the agents go (no agent pod is left when this returns):\n  \
         kubectl -n {ns} delete daemonset {agent} --cascade=foreground\n  \
         # 2. the uninstaller, on every node:\n  \
         {command} | kubectl apply -f -\n  \
         # 3. wait until it is ready on every node (ready: the node is clean):\n  \
         kubectl -n {ns} rollout status daemonset {un}\n  \
         # 4. the uninstaller goes, then the rest (ConfigMap, ServiceAccount, Namespace, ...):\n  \
         {command} | kubectl delete --ignore-not-found -f -\n  \
         {install} | kubectl delete --ignore-not-found -f -\n\
         \n\
         On each node `ebpf-masq agent --uninstall` does what `ebpf-masq uninstall` does: the ebpf-masq\n\
         entry leaves every conflist of the conf dir (install's backup restored when the file is\n\
         untouched; the main plugin's own entries stay), the binary leaves the bin dir, the programs\n\
         are detached and the pins removed. Conf dir {conf}, bin dir {bin}.\n\
         First it writes .ebpf-masq-uninstall into the conf dir: an agent still running (step 1\n\
         skipped, or its pod not gone yet) holds off while that file exists and chains nothing again.\n\
         The pod is ready when nothing of ebpf-masq is left on its node; deleting it removes the file.",
        conf = dirs.conf,
        bin = dirs.bin,
    )
}

pub(super) fn service_account(a: &ManifestArgs) -> Doc {
    Doc::new(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name(a), "namespace": a.namespace, "labels": {NAME_LABEL: name(a)}},
        "automountServiceAccountToken": false,
    }))
}

pub(super) fn daemonset(a: &ManifestArgs, image: &str, dirs: &NodeDirs, entry: &Map<String, Value>) -> Doc {
    let port = a.metrics_port;
    let host = NodeDirs::in_container;
    let mut command: Vec<String> = ["ebpf-masq", "agent", "--uninstall", "--cni-conf-dir", &host(&dirs.conf),
        "--cni-bin-dir", &host(&dirs.bin), "--metrics-listen", &format!("0.0.0.0:{port}")]
    .map(String::from)
    .into();
    if let Some(pin) = entry.get("pinPath").and_then(Value::as_str).filter(|p| *p != DEFAULT_PIN_PATH) {
        command.extend(["--pin-path".to_string(), pin.to_string()]);
    }
    let (mounts, volumes) = node_mounts(dirs, false);
    let labels = json!({ NAME_LABEL: name(a) });
    let value = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name(a), "namespace": a.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": node_pod_spec(a, &name(a), json!({
                    "name": "ebpf-masq-uninstall",
                    "image": image,
                    "imagePullPolicy": a.image_pull_policy,
                    "command": command,
                    "ports": [{"name": "healthz", "containerPort": port, "protocol": "TCP"}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "healthz"},
                                       "initialDelaySeconds": 1, "periodSeconds": 5, "timeoutSeconds": 5,
                                       "failureThreshold": 1},
                    "securityContext": {"privileged": true},
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                    "volumeMounts": mounts,
                }), volumes),
            },
        },
    });
    let c = "spec.template.spec.containers.0";
    Doc::new(value)
        .comment("metadata.labels",
                 "A label of its own: the agent's DaemonSet (if still there) must not take these pods for its own.")
        .comment("spec.template.spec.tolerations.0", "Every node, as the agent's DaemonSet.")
        .comment(&format!("{c}.command"),
                 "Takes the entry, the binary, the programs and the pins off the node, and keeps them off\n\
                  (an agent still running holds off) until the pod is deleted.")
        .comment(&format!("{c}.readinessProbe"),
                 "200 once nothing of ebpf-masq is left on the node; 503 listing what is.")
        .comment(&format!("{c}.securityContext.privileged"),
                 "bpf(2) and netlink to detach the programs from the node's interfaces; removing pins.")
}
