//! The objects of `ebpf-masq manifest` but the ConfigMaps: Namespace,
//! DaemonSet, Service and ServiceMonitor, each with the comments that say why.

use serde_json::{json, Map, Value};

use ebpf_masq_core::error::{code, Error, Result};

use super::node::{self, NodeDirs};
use super::yaml::Doc;
use super::{ManifestArgs, BPFFS, CONFIG_DIR, CONFIG_KEY, IP_MASQ_AGENT_DIR, IP_MASQ_AGENT_KEY, NAME_LABEL};

pub(super) fn namespace(a: &ManifestArgs) -> Doc {
    Doc::new(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": a.namespace,
            "labels": {NAME_LABEL: a.name, "pod-security.kubernetes.io/enforce": "privileged"},
        },
    }))
    .comment("metadata.labels.pod-security.kubernetes.io/enforce", "hostNetwork, hostPath and privileged containers")
}

/// A ResourceQuota whose scope is the system-node-critical class: where the
/// API server's ResourceQuota admission limits that class (`limitedResources`
/// in its AdmissionConfiguration, as GKE sets it), pods of the class are
/// admitted only in namespaces holding such a quota. What the Tigera operator
/// creates for calico-node in calico-system; no hard limit, so it limits nothing.
pub(super) fn priority_quota(a: &ManifestArgs) -> Doc {
    Doc::new(json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": format!("{}-critical-pods", a.name), "namespace": a.namespace,
                     "labels": {NAME_LABEL: a.name}},
        "spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": [node::NODE_CRITICAL]}]}},
    }))
    .comment(
        "",
        "Admits the pods' priority class, system-node-critical, in this namespace: clusters that limit the\n\
         critical classes to kube-system and to namespaces with a quota scoped to them (GKE does) need it.\n\
         It sets no limit. With --priority-class NAME (a class of your own) it is left out.",
    )
}

/// The node's CNI directories and its bpffs: (mounts, volumes), in that order
/// (cni-bin, cni-conf, cni-cache, bpffs), the agent's and the uninstaller's.
pub(super) fn node_mounts(dirs: &NodeDirs, with_cache: bool) -> (Vec<Value>, Vec<Value>) {
    let host = NodeDirs::in_container;
    let mut mounts = vec![
        json!({"name": "cni-bin", "mountPath": host(&dirs.bin)}),
        json!({"name": "cni-conf", "mountPath": host(&dirs.conf)}),
    ];
    let mut volumes = vec![
        json!({"name": "cni-bin", "hostPath": {"path": dirs.bin, "type": "DirectoryOrCreate"}}),
        json!({"name": "cni-conf", "hostPath": {"path": dirs.conf, "type": "DirectoryOrCreate"}}),
    ];
    if with_cache {
        mounts.push(json!({"name": "cni-cache", "mountPath": host(&dirs.cache), "readOnly": true}));
        volumes.push(json!({"name": "cni-cache", "hostPath": {"path": dirs.cache, "type": "DirectoryOrCreate"}}));
    }
    mounts.push(json!({"name": "bpffs", "mountPath": BPFFS, "mountPropagation": "Bidirectional"}));
    volumes.push(json!({"name": "bpffs", "hostPath": {"path": BPFFS, "type": "DirectoryOrCreate"}}));
    (mounts, volumes)
}

/// The pod of a DaemonSet on every Linux node: one privileged `container` on the
/// host's network, every taint tolerated (the agent's, and the uninstaller's).
pub(super) fn node_pod_spec(a: &ManifestArgs, service_account: &str, container: Value, volumes: Vec<Value>) -> Value {
    json!({
        "serviceAccountName": service_account,
        "automountServiceAccountToken": false,
        "hostNetwork": true,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "priorityClassName": node::priority_class(a),
        "terminationGracePeriodSeconds": 5,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "volumes": volumes,
    })
}

pub(super) fn daemonset(a: &ManifestArgs, image: &str, dirs: &NodeDirs) -> Doc {
    let port = a.metrics_port;
    let host = NodeDirs::in_container;
    let mut command: Vec<String> = ["ebpf-masq", "agent", "--conf", &format!("{CONFIG_DIR}/{CONFIG_KEY}"),
        "--cni-conf-dir", &host(&dirs.conf), "--cni-bin-dir", &host(&dirs.bin),
        "--cni-cache-dir", &host(&dirs.cache), "--metrics-listen", &format!("0.0.0.0:{port}")]
    .map(String::from)
    .into();
    if a.ip_masq_agent_on() {
        command.push("--ip-masq-agent".into());
    }
    if a.ip_masq_agent_all_reserved_ranges {
        command.push("--ip-masq-agent-all-reserved-ranges".into());
    }
    let mut limits = Map::new();
    if let Some(cpu) = &a.cpu_limit {
        limits.insert("cpu".into(), json!(cpu));
    }
    limits.insert("memory".into(), json!(a.memory_limit));
    let (mut mounts, mut volumes) = node_mounts(dirs, true);
    mounts.push(json!({"name": "config", "mountPath": CONFIG_DIR, "readOnly": true}));
    volumes.push(json!({"name": "config", "configMap": {"name": format!("{}-config", a.name)}}));
    if a.ip_masq_agent_on() {
        mounts.push(json!({"name": "ip-masq-agent", "mountPath": IP_MASQ_AGENT_DIR, "readOnly": true}));
        volumes.push(json!({"name": "ip-masq-agent", "configMap": {
            "name": a.ip_masq_agent_configmap, "optional": true,
            "items": [{"key": IP_MASQ_AGENT_KEY, "path": "ip-masq-agent"}]}}));
    }
    if let Some(dir) = &a.natlog_dir {
        let dir = dir.trim_end_matches('/');
        mounts.push(json!({"name": "natlog", "mountPath": dir}));
        volumes.push(json!({"name": "natlog", "hostPath": {"path": dir, "type": "DirectoryOrCreate"}}));
    }
    let index = |list: &[Value], name: &str| list.iter().position(|v| v["name"] == name).unwrap_or(0);
    let (m_ipm, v_ipm, m_natlog) =
        (index(&mounts, "ip-masq-agent"), index(&volumes, "ip-masq-agent"), index(&mounts, "natlog"));
    let labels = json!({ NAME_LABEL: a.name });
    let probe = |initial: u32, period: u32, failures: u32| {
        json!({"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": initial,
               "periodSeconds": period, "timeoutSeconds": 5, "failureThreshold": failures})
    };
    let value = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": a.name, "namespace": a.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": port.to_string(),
                                    "prometheus.io/path": "/metrics"},
                },
                "spec": node_pod_spec(a, &a.name, json!({
                    "name": "ebpf-masq",
                    "image": image,
                    "imagePullPolicy": a.image_pull_policy,
                    "command": command,
                    "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
                    "readinessProbe": probe(2, 10, 3),
                    "livenessProbe": probe(30, 30, 10),
                    "securityContext": {"privileged": true},
                    "resources": {
                        "requests": {"cpu": a.cpu_request, "memory": a.memory_request},
                        "limits": limits,
                    },
                    "volumeMounts": mounts,
                }), volumes),
            },
        },
    });
    let c = "spec.template.spec.containers";
    let mut d = Doc::new(value)
        .comment("spec.template.spec.tolerations.0",
                 "Every node, whatever its taints (NotReady nodes included: pods there need masquerade too).")
        .comment(&format!("{c}.0"),
                 "One process: `ebpf-masq agent` installs the binary, chains ebpf-masq into the node's primary\n\
                  conflist and applies the config (what an init container did before), then keeps them so:\n\
                  it chains again when the main plugin's agent rewrites its conflist, applies ConfigMap\n\
                  updates (an invalid one is refused and reported, never half-applied), removes registrations\n\
                  of pods whose veth is gone, and serves /metrics and /healthz. SIGTERM leaves the data plane\n\
                  and the chain in place: a rolling update interrupts no flow.")
        .comment(&format!("{c}.0.readinessProbe"),
                 "200 when the data plane and the chained entry are in place and every pod the runtime's CNI\n\
                  cache holds is registered; 503 with the reason.")
        .comment(&format!("{c}.0.livenessProbe"),
                 "Restart only after minutes of trouble: until the main plugin has written its conflist the\n\
                  agent waits (and says so on /healthz), which a restart would not speed up.")
        .comment(&format!("{c}.0.securityContext.privileged"),
                 "bpf(2), TCX links (or tc filters) on the node's interfaces, sysctls, Bidirectional mount \
                  propagation.")
        .comment(&format!("{c}.0.resources.limits.memory"),
                 "The first apply creates the NAT maps, and BPF map memory is charged to this\n\
                  container's cgroup. At natMaxEntries' default (1048576): 355 MiB with the IPv4 table\n\
                  full, 755 MiB with both families' full (docs/nat.md), which this limit holds with\n\
                  the other maps and the agent. A larger natMaxEntries needs a larger limit; the agent\n\
                  warns when the tables cannot fit.")
        .comment(&format!("{c}.0.volumeMounts.2"),
                 "libcni's result cache (containerd, CRI-O): pods whose ADD never reached ebpf-masq (started\n\
                  before the agent, or while the conflist was rewritten) are found there and registered.")
        .comment(&format!("{c}.0.volumeMounts.4"),
                 "The whole volume, never a subPath: kubelet updates it by swapping its ..data symlink,\n\
                  which the agent watches.")
        .comment("spec.template.spec.volumes.3.hostPath.path",
                 "bpffs must be mounted there on the node (systemd does it); pins live under it.");
    if a.ip_masq_agent_on() {
        d = d
            .comment(&format!("{c}.0.volumeMounts.{m_ipm}"),
                     "ip-masq-agent's ConfigMap where ip-masq-agent and Cilium read it: the file\n\
                      /etc/config/ip-masq-agent, the agent's --ip-masq-agent default (whole volume, as above).")
            .comment(&format!("spec.template.spec.volumes.{v_ipm}"),
                     "A ConfigMap of this namespace (ConfigMap volumes are namespaced; ip-masq-agent's own is in\n\
                      kube-system). Optional: with none, the agent applies ip-masq-agent's defaults, as it does.");
    }
    if a.natlog_dir.is_some() {
        d = d.comment(&format!("{c}.0.volumeMounts.{m_natlog}"),
                      "The NAT log's files (natLog.file), at the same path as on the node: they outlive the pod,\n\
                       and `kubectl exec ... -- ebpf-masq natlog who ... --file PATH` reads them.");
    }
    if node::needs_priority_quota(a) {
        d = d.comment("spec.template.spec.priorityClassName",
                      "Admitted in this namespace by the ResourceQuota above (a class of your own: --priority-class).");
    }
    d
}

/// Labels of the Service, and what the ServiceMonitor selects.
fn service_labels(a: &ManifestArgs) -> Value {
    json!({NAME_LABEL: a.name, "app.kubernetes.io/component": "metrics"})
}

pub(super) fn service(a: &ManifestArgs) -> Doc {
    Doc::new(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("{}-metrics", a.name), "namespace": a.namespace, "labels": service_labels(a)},
        "spec": {
            "clusterIP": "None",
            "selector": {NAME_LABEL: a.name},
            "ports": [{"name": "metrics", "port": a.metrics_port, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }))
    .comment("", "Every node's agent as an endpoint of the metrics port, for Prometheus's service discovery.")
    .comment("spec.clusterIP", "Headless: each node is scraped on its own, never through a load-balanced address.")
}

pub(super) fn service_monitor(a: &ManifestArgs) -> Result<Doc> {
    let mut labels = Map::new();
    labels.insert(NAME_LABEL.into(), json!(a.name));
    for kv in &a.service_monitor_label {
        let (k, v) = kv.split_once('=').filter(|(k, _)| !k.is_empty()).ok_or_else(|| {
            Error::new(code::INVALID_CONFIG, format!("--service-monitor-label {kv:?}: expected KEY=VALUE"))
        })?;
        labels.insert(k.into(), json!(v));
    }
    Ok(Doc::new(json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": a.name, "namespace": a.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": service_labels(a)},
            "endpoints": [{
                "port": "metrics",
                "path": "/metrics",
                "relabelings": [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                 "targetLabel": "node"}],
            }],
        },
    }))
    .comment("", "For the Prometheus Operator (CRD monitoring.coreos.com/v1 ServiceMonitor): scrape the Service above.")
    .comment("spec.endpoints.0.relabelings.0", "A `node` label on every series: the node's name, not only its address.")
    .comment("metadata.labels",
             "A Prometheus selects ServiceMonitors by label (its serviceMonitorSelector): --service-monitor-label."))
}
