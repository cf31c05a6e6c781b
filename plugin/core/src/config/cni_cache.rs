//! libcni's result cache: `<cacheDir>/results/<network>-<containerID>-<ifname>`,
//! written by libcni after every ADD it runs (containerd and CRI-O through the CRI,
//! cnitool; podman's CNI backend), removed by its DEL. It keeps what the ADD was
//! given and what the network's plugins answered, which is what the agent needs to
//! register a pod whose ADD never reached ebpf-masq (`node::discover`).

use serde_json::{Map, Value};

/// libcni's default cache directory (containerd, CRI-O, cnitool).
pub const DEFAULT_CNI_CACHE_DIR: &str = "/var/lib/cni";
/// The only `kind` libcni has written so far.
const CACHE_KIND: &str = "cniCacheV1";

/// One cached ADD.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedAdd {
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    /// CNI_ARGS as the ADD had it ("K=V;K=V").
    pub cni_args: String,
    /// The runtime's capability arguments (portMappings, the pod's annotations...).
    pub capability_args: Map<String, Value>,
    /// The network's result (the last plugin's, so the main plugin's when we pass it through).
    pub result: Value,
}

/// Parse one cache file; Err says what is wrong with it (a file of another
/// kind, truncated, or not libcni's at all).
pub fn parse_cached_add(bytes: &[u8]) -> Result<CachedAdd, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    match o.get("kind").and_then(Value::as_str) {
        Some(CACHE_KIND) => {}
        Some(k) => return Err(format!("kind {k:?}, not {CACHE_KIND:?}")),
        None => return Err(format!("no \"kind\" (not a libcni {CACHE_KIND} file)")),
    }
    let text = |k: &str| -> Result<String, String> {
        match o.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(_) => Err(format!("{k:?} is not a non-empty string")),
            None => Err(format!("no {k:?}")),
        }
    };
    let mut args = Vec::new();
    match o.get("cniArgs") {
        None | Some(Value::Null) => {}
        Some(Value::Array(pairs)) => {
            for p in pairs {
                match p.as_array().map(Vec::as_slice) {
                    Some([Value::String(k), Value::String(v)]) => args.push(format!("{k}={v}")),
                    _ => return Err(format!("\"cniArgs\" holds {p}, not a [key, value] pair")),
                }
            }
        }
        Some(other) => return Err(format!("\"cniArgs\" is {other}, not a list")),
    }
    let capability_args = match o.get("capabilityArgs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(format!("\"capabilityArgs\" is {other}, not an object")),
    };
    let result = match o.get("result") {
        Some(r @ Value::Object(_)) => r.clone(),
        _ => return Err("no \"result\" object (the ADD's answer)".into()),
    };
    Ok(CachedAdd {
        container_id: text("containerId")?,
        ifname: text("ifName")?,
        network: text("networkName")?,
        cni_args: args.join(";"),
        capability_args,
        result,
    })
}

/// The network config libcni hands the plugin `entry` of network `name` for the
/// cached ADD `c`: the entry with the network's name and cniVersion (the result's
/// own, as libcni writes it), the result as prevResult, and as runtimeConfig the
/// capability arguments the entry declares (as libcni injects them).
pub fn plugin_conf(entry: &Map<String, Value>, name: &str, default_version: &str, c: &CachedAdd) -> Vec<u8> {
    let mut conf = entry.clone();
    let version = c.result.get("cniVersion").and_then(Value::as_str).unwrap_or(default_version);
    conf.insert("cniVersion".into(), Value::String(version.into()));
    conf.insert("name".into(), Value::String(name.into()));
    conf.insert("prevResult".into(), c.result.clone());
    let declared = entry.get("capabilities").and_then(Value::as_object);
    let runtime: Map<String, Value> = c
        .capability_args
        .iter()
        .filter(|(k, _)| declared.and_then(|d| d.get(*k)).and_then(Value::as_bool) == Some(true))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !runtime.is_empty() {
        conf.insert("runtimeConfig".into(), Value::Object(runtime));
    }
    serde_json::to_vec(&conf).expect("a JSON map serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A file as containerd's libcni writes it (its `config` is the conflist, base64).
    fn containerd_file() -> Value {
        json!({
            "kind": "cniCacheV1",
            "containerId": "5f3c0e9a",
            "config": "eyJjbmlWZXJzaW9uIjoiMS4wLjAifQ==",
            "ifName": "eth0",
            "networkName": "pods",
            "cniArgs": [["IgnoreUnknown", "1"], ["K8S_POD_NAMESPACE", "shop"], ["K8S_POD_NAME", "web-0"]],
            "capabilityArgs": {
                "io.kubernetes.cri.pod-annotations": {"ebpf-masq.io/port-limit": "100", "other": "x"},
                "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                "bandwidth": {}
            },
            "result": {"cniVersion": "1.0.0",
                       "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/var/run/netns/x"}],
                       "ips": [{"interface": 2, "address": "10.244.1.5/24", "gateway": "10.244.1.1"}]}
        })
    }

    #[test]
    fn a_containerd_file_is_read_whole() {
        let c = parse_cached_add(containerd_file().to_string().as_bytes()).unwrap();
        assert_eq!((c.container_id.as_str(), c.ifname.as_str(), c.network.as_str()), ("5f3c0e9a", "eth0", "pods"));
        assert_eq!(c.cni_args, "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0");
        assert_eq!(c.result["ips"][0]["address"], "10.244.1.5/24");
    }

    #[test]
    fn the_plugin_gets_what_libcni_would_hand_it() {
        let c = parse_cached_add(containerd_file().to_string().as_bytes()).unwrap();
        let entry = json!({"type": "ebpf-masq", "capabilities": {"io.kubernetes.cri.pod-annotations": true, "portMappings": true}});
        let conf: Value = serde_json::from_slice(&plugin_conf(entry.as_object().unwrap(), "pods", "0.4.0", &c)).unwrap();
        assert_eq!(conf["name"], "pods");
        assert_eq!(conf["cniVersion"], "1.0.0", "the result's version");
        assert_eq!(conf["prevResult"], c.result);
        // Only the capabilities the entry declares, as libcni injects them.
        assert_eq!(conf["runtimeConfig"].as_object().unwrap().keys().collect::<Vec<_>>(),
                   ["io.kubernetes.cri.pod-annotations", "portMappings"]);
        let bare = json!({"type": "ebpf-masq"});
        let conf: Value = serde_json::from_slice(&plugin_conf(bare.as_object().unwrap(), "pods", "0.4.0", &c)).unwrap();
        assert!(conf.get("runtimeConfig").is_none());
    }

    #[test]
    fn corrupt_truncated_and_foreign_files_are_refused_with_the_reason() {
        let whole = containerd_file().to_string();
        let cut = &whole.as_bytes()[..whole.len() / 2];
        assert!(parse_cached_add(cut).unwrap_err().starts_with("not JSON"));
        assert!(parse_cached_add(b"\x00\xff garbage").unwrap_err().starts_with("not JSON"));
        assert_eq!(parse_cached_add(b"[1,2]").unwrap_err(), "not a JSON object");
        let mut v = containerd_file();
        v["kind"] = json!("cniCacheV2");
        assert!(parse_cached_add(v.to_string().as_bytes()).unwrap_err().contains("cniCacheV2"));
        let mut v = containerd_file();
        v.as_object_mut().unwrap().remove("result");
        assert!(parse_cached_add(v.to_string().as_bytes()).unwrap_err().contains("result"));
        let mut v = containerd_file();
        v["cniArgs"] = json!([["K8S_POD_NAME"]]);
        assert!(parse_cached_add(v.to_string().as_bytes()).unwrap_err().contains("cniArgs"));
        let mut v = containerd_file();
        v["containerId"] = json!("");
        assert!(parse_cached_add(v.to_string().as_bytes()).unwrap_err().contains("containerId"));
        // A file of another program in the directory.
        assert!(parse_cached_add(br#"{"hello": "world"}"#).unwrap_err().contains("kind"));
    }
}
