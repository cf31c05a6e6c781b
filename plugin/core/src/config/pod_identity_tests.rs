use super::*;
use crate::error::code;
use serde_json::json;

#[test]
fn cni_args_give_namespace_and_name_and_keep_quiet_about_the_rest() {
    let id = pod_identity("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u")
        .unwrap();
    assert_eq!(id, PodIdentity { namespace: "shop".into(), name: "web-0".into() });
    assert_eq!(pod_identity("").unwrap(), PodIdentity::default());
    assert_eq!(pod_identity("FOO=bar;").unwrap(), PodIdentity::default());
    // A value may hold "=": only the first one splits.
    assert_eq!(pod_identity("K8S_POD_NAME=a=b").unwrap().name, "a=b");
}

#[test]
fn bad_cni_args_name_the_variable() {
    for (args, want) in [
        ("K8S_POD_NAME", "is not KEY=VALUE"),
        (&format!("K8S_POD_NAMESPACE={}", "n".repeat(64)), "63 at most"),
        (&format!("K8S_POD_NAME={}", "p".repeat(254)), "253 at most"),
    ] {
        let e = pod_identity(args).unwrap_err();
        assert_eq!(e.code, code::INVALID_ENV, "{args}");
        assert!(e.msg.contains("CNI_ARGS") && e.msg.contains(want), "{args}: {}", e.msg);
    }
}

fn conf_with(rc: Value) -> Result<NetConf> {
    let c = json!({"cniVersion": "1.0.0", "name": "n", "type": "ebpf-masq", "runtimeConfig": rc});
    parse_netconf(c.to_string().as_bytes())
}

#[test]
fn annotations_keep_only_ours() {
    let c = conf_with(json!({CAP_POD_ANNOTATIONS: {
        "ebpf-masq.io/egress-policy": "partner", "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        "ebpf-masq.io/x": ""}}))
    .unwrap();
    let want: BTreeMap<String, String> =
        [("ebpf-masq.io/egress-policy", "partner"), ("ebpf-masq.io/x", "")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(c.pod_annotations, want);
    assert!(conf_with(json!({"portMappings": []})).unwrap().pod_annotations.is_empty());
    assert!(conf_with(json!({CAP_POD_ANNOTATIONS: null})).unwrap().pod_annotations.is_empty());
}

#[test]
fn port_mappings_give_the_pods_host_ports() {
    let c = conf_with(json!({CAP_PORT_MAPPINGS: [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 8080, "containerPort": 80, "protocol": "TCP", "hostIP": "10.0.0.5"},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp"},
        {"hostPort": 9000, "containerPort": 9000},
        {"HostPort": 7000, "ContainerPort": 80, "Protocol": "udp", "HostIP": ""},
        {"hostPort": 3868, "containerPort": 3868, "protocol": "sctp"}]}))
    .unwrap();
    assert_eq!(c.host_ports, [(8080, 6), (5353, 17), (9000, 6), (7000, 17)]);
    assert!(conf_with(json!({CAP_PORT_MAPPINGS: null})).unwrap().host_ports.is_empty());
    assert!(conf_with(json!({})).unwrap().host_ports.is_empty());
    let many: Vec<Value> = (1..=17).map(|p| json!({"hostPort": 9000 + p, "containerPort": 80})).collect();
    for (rc, want) in [
        (json!({CAP_PORT_MAPPINGS: {"hostPort": 1}}), "runtimeConfig.portMappings\""),
        (json!({CAP_PORT_MAPPINGS: [{"containerPort": 80}]}), "runtimeConfig.portMappings[0].hostPort\""),
        (json!({CAP_PORT_MAPPINGS: [{"hostPort": 0}]}), "runtimeConfig.portMappings[0].hostPort\""),
        (json!({CAP_PORT_MAPPINGS: [{"hostPort": 80}, {"hostPort": 70000}]}), "runtimeConfig.portMappings[1].hostPort\""),
        (json!({CAP_PORT_MAPPINGS: [{"hostPort": 80, "protocol": "icmp"}]}), "runtimeConfig.portMappings[0].protocol\""),
        (json!({CAP_PORT_MAPPINGS: many}), "16 at most"),
    ] {
        let e = conf_with(rc.clone()).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG, "{rc}");
        assert!(e.msg.contains(want), "{rc}: {}", e.msg);
    }
}

#[test]
fn bad_annotations_name_the_key() {
    for (rc, want) in [
        (json!({CAP_POD_ANNOTATIONS: ["a"]}), "runtimeConfig.io.kubernetes.cri.pod-annotations"),
        (json!({CAP_POD_ANNOTATIONS: {"ebpf-masq.io/a": 1}}), "runtimeConfig.io.kubernetes.cri.pod-annotations.ebpf-masq.io/a"),
        (json!({CAP_POD_ANNOTATIONS: {"ebpf-masq.io/a": "v".repeat(1100)}}), "1023 at most"),
    ] {
        let e = conf_with(rc.clone()).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG, "{rc}");
        assert!(e.msg.contains(want), "{rc}: {}", e.msg);
    }
}
