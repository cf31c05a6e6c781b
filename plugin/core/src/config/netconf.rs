//! The plugin config object: a CNI call's stdin or a conflist file, checked
//! whole (version, name, type, standard keys, duplicates), with what the
//! runtime adds (CNI_ARGS pod identity, runtimeConfig, valid attachments).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

use super::diag::{expect_str, incompatible, key_display, prefix_key, quote, root_object, unknown_key_error, wrong_type};
use super::json::{check_dups, duplicate_error, parse_json, Seg};
use super::keys::{MASQ_KEYS, STANDARD_KEYS};
use super::masq::parse_masq;
use super::{
    NetConf, PodIdentity, ValidAttachment, ANNOTATIONS_MAX_BYTES, ANNOTATION_PREFIX, ATTACHMENTS_ALIAS_KEY,
    CAP_POD_ANNOTATIONS, CAP_PORT_MAPPINGS, HOST_PORTS_PER_POD, PLUGIN_TYPE, SUPPORTED_CNI_VERSIONS,
    VALID_ATTACHMENTS_KEY,
};

/// Parse stdin of a CNI call.
pub fn parse_netconf(bytes: &[u8]) -> Result<NetConf> {
    let (v, dups) = parse_json(bytes)?;
    let obj = root_object(&v)?;
    netconf_from_map(obj, &dups, &[])
}

/// Parse a file given to `ebpf-masq apply --conf FILE` / `install --conf`:
/// either a conflist (`{"cniVersion","name","plugins":[...]}`) in which
/// exactly one plugin has type "ebpf-masq" (its entry is parsed, inheriting
/// cniVersion and name from the list), or a single plugin config.
pub fn parse_conf_file(bytes: &[u8]) -> Result<NetConf> {
    let (v, dups) = parse_json(bytes)?;
    let obj = root_object(&v)?;
    let Some(plugins) = obj.get("plugins") else {
        return netconf_from_map(obj, &dups, &[]);
    };

    let version = check_version(obj)?;
    if let Some(d) = dups.iter().find(|d| d.len() == 1) {
        return Err(duplicate_error(d));
    }
    let name = required_name(obj)?;
    let list = plugins
        .as_array()
        .ok_or_else(|| wrong_type("plugins", "a list of plugin configs", plugins))?;

    let mut ours = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let path = format!("plugins[{i}]");
        let po = p
            .as_object()
            .ok_or_else(|| wrong_type(&path, "an object", p))?;
        match po.get("type") {
            Some(Value::String(t)) => {
                if t == PLUGIN_TYPE {
                    ours.push((i, po));
                }
            }
            Some(other) => return Err(wrong_type(&format!("{path}.type"), "a string", other)),
            None => {
                return Err(Error::config(
                    &format!("{path}.type"),
                    "missing; every plugin in a conflist needs a type",
                ))
            }
        }
    }
    let (idx, entry) = match ours.as_slice() {
        [one] => *one,
        [] => {
            return Err(Error::config(
                "plugins",
                format!(
                    "no plugin with type \"{PLUGIN_TYPE}\" in conflist {}",
                    quote(&name)
                ),
            ))
        }
        many => {
            let at: Vec<String> = many.iter().map(|(i, _)| format!("plugins[{i}]")).collect();
            return Err(Error::config(
                "plugins",
                format!(
                    "{} plugins have type \"{PLUGIN_TYPE}\" ({}); exactly one is expected",
                    many.len(),
                    at.join(", ")
                ),
            ));
        }
    };

    // Like libcni, the list's cniVersion and name override the entry's.
    let mut entry = entry.clone();
    entry.insert("cniVersion".into(), Value::String(version));
    entry.insert("name".into(), Value::String(name));
    let prefix = [Seg::Key("plugins".into()), Seg::Index(idx)];
    netconf_from_map(&entry, &dups, &prefix).map_err(|e| prefix_key(e, &format!("plugins[{idx}].")))
}

/// Parse CNI_ARGS ("K=V;K=V", as libcni and kubelet's runtimes pass it): the
/// K8S_POD_NAMESPACE and K8S_POD_NAME values; other keys are accepted and left
/// alone, IgnoreUnknown or not. A pair without "=" or a value longer than
/// Kubernetes allows is an error naming the variable (code 4).
pub fn pod_identity(cni_args: &str) -> Result<PodIdentity> {
    let mut id = PodIdentity::default();
    for pair in cni_args.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Error::env("CNI_ARGS", format!("{pair:?} is not KEY=VALUE")))?;
        match k {
            "K8S_POD_NAMESPACE" => {
                if v.len() > 63 {
                    return Err(Error::env("CNI_ARGS", format!("K8S_POD_NAMESPACE is {} bytes; a namespace has 63 at most", v.len())));
                }
                id.namespace = v.to_string();
            }
            "K8S_POD_NAME" => {
                if v.len() > 253 {
                    return Err(Error::env("CNI_ARGS", format!("K8S_POD_NAME is {} bytes; a pod name has 253 at most", v.len())));
                }
                id.name = v.to_string();
            }
            _ => {}
        }
    }
    Ok(id)
}

/// runtimeConfig's pod annotations (an object of strings), those under
/// ANNOTATION_PREFIX only.
fn parse_pod_annotations(obj: &Map<String, Value>) -> Result<BTreeMap<String, String>> {
    let key = format!("runtimeConfig.{CAP_POD_ANNOTATIONS}");
    let ann = match obj.get("runtimeConfig").and_then(|rc| rc.get(CAP_POD_ANNOTATIONS)) {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m,
        Some(v) => return Err(wrong_type(&key, "an object of strings", v)),
    };
    let mut kept = BTreeMap::new();
    for (k, v) in ann {
        let v = v.as_str().ok_or_else(|| Error::config(&format!("{key}.{k}"), "must be a string"))?;
        if k.starts_with(ANNOTATION_PREFIX) {
            kept.insert(k.clone(), v.to_string());
        }
    }
    let len = serde_json::to_string(&kept).map(|s| s.len()).unwrap_or(0);
    if len > ANNOTATIONS_MAX_BYTES {
        return Err(Error::config(&key, format!("the {ANNOTATION_PREFIX} annotations take {len} bytes as JSON; {ANNOTATIONS_MAX_BYTES} at most")));
    }
    Ok(kept)
}

/// runtimeConfig's portMappings (`[{"hostPort": 8080, "containerPort": 80,
/// "protocol": "tcp", "hostIP": ...}]`, as kubelet's runtimes and podman pass
/// them): the distinct (hostPort, IP protocol) pairs, TCP and UDP (SCTP is never
/// masqueraded). A hostIP does not narrow it: the port is kept off every address.
fn parse_port_mappings(obj: &Map<String, Value>) -> Result<Vec<(u16, u8)>> {
    let key = format!("runtimeConfig.{CAP_PORT_MAPPINGS}");
    let list = match obj.get("runtimeConfig").and_then(|rc| rc.get(CAP_PORT_MAPPINGS)) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type(&key, "a list of port mappings", v)),
    };
    let mut out: Vec<(u16, u8)> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("{key}[{i}]");
        let m = m.as_object().ok_or_else(|| wrong_type(&at, "an object", m))?;
        // Keys as Go's encoding/json reads them, case-insensitively: containerd's go-cni
        // sends its struct's field names ("HostPort", "Protocol"), libcni users "hostPort".
        let get = |name: &str| m.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v);
        let port = match get("hostPort") {
            Some(Value::Number(n)) if n.as_u64().is_some_and(|p| (1..=65535).contains(&p)) => n.as_u64().unwrap() as u16,
            Some(v) => return Err(Error::config(&format!("{at}.hostPort"), format!("must be a port number 1-65535, got {v}"))),
            None => return Err(Error::config(&format!("{at}.hostPort"), "is missing")),
        };
        let proto = match get("protocol") {
            None | Some(Value::Null) => 6,
            Some(Value::String(p)) => match p.to_ascii_lowercase().as_str() {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => continue,
                _ => return Err(Error::config(&format!("{at}.protocol"), format!("{} is not tcp, udp or sctp", quote(p)))),
            },
            Some(v) => return Err(wrong_type(&format!("{at}.protocol"), "\"tcp\", \"udp\" or \"sctp\"", v)),
        };
        if !out.contains(&(port, proto)) {
            out.push((port, proto));
        }
    }
    if out.len() > HOST_PORTS_PER_POD {
        return Err(Error::config(&key, format!("{} hostPorts; a pod may have {HOST_PORTS_PER_POD} at most", out.len())));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// The plugin config object.

fn check_version(obj: &Map<String, Value>) -> Result<String> {
    let supported = SUPPORTED_CNI_VERSIONS.join(", ");
    match obj.get("cniVersion") {
        None | Some(Value::Null) => Err(incompatible(
            "cniVersion",
            format!("missing; ebpf-masq supports CNI versions {supported}"),
        )),
        Some(Value::String(s)) if SUPPORTED_CNI_VERSIONS.contains(&s.as_str()) => Ok(s.clone()),
        Some(Value::String(s)) => Err(incompatible(
            "cniVersion",
            format!(
                "unsupported CNI version {}; ebpf-masq supports {supported}",
                quote(s)
            ),
        )),
        Some(v) => Err(wrong_type("cniVersion", "a version string", v)),
    }
}

fn required_name(obj: &Map<String, Value>) -> Result<String> {
    match obj.get("name") {
        None | Some(Value::Null) => Err(Error::config("name", "required (the network name)")),
        Some(Value::String(s)) if s.is_empty() => Err(Error::config("name", "must not be empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(wrong_type("name", "a string", v)),
    }
}

/// Standard keys we ignore still need the type the spec gives them.
fn check_standard_keys(obj: &Map<String, Value>) -> Result<()> {
    for k in ["runtimeConfig", "capabilities", "args", "dns", "ipam"] {
        match obj.get(k) {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(v) => return Err(wrong_type(k, "an object", v)),
        }
    }
    for k in ["disableCheck", "disableGC"] {
        match obj.get(k) {
            None | Some(Value::Null) | Some(Value::Bool(_)) => {}
            // libcni also accepts the strings "true" and "false".
            Some(Value::String(s))
                if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") => {}
            Some(v) => return Err(wrong_type(k, "a boolean", v)),
        }
    }
    match obj.get("cniVersions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, e) in a.iter().enumerate() {
                expect_str(&format!("cniVersions[{i}]"), e)?;
            }
        }
        Some(v) => return Err(wrong_type("cniVersions", "a list of version strings", v)),
    }
    Ok(())
}

fn parse_attachments(k: &str, v: &Value) -> Result<Vec<ValidAttachment>> {
    let a = v
        .as_array()
        .ok_or_else(|| wrong_type(k, "a list of attachment objects", v))?;
    let mut out = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        let base = format!("{k}[{i}]");
        let o = e
            .as_object()
            .ok_or_else(|| wrong_type(&base, "an object", e))?;
        let field = |f: &str| -> Result<String> {
            let p = format!("{base}.{f}");
            match o.get(f) {
                None => Err(Error::config(&p, "required")),
                Some(Value::String(s)) if s.is_empty() => {
                    Err(Error::config(&p, "must not be empty"))
                }
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(wrong_type(&p, "a string", v)),
            }
        };
        out.push(ValidAttachment {
            container_id: field("containerID")?,
            ifname: field("ifname")?,
        });
    }
    Ok(out)
}

fn netconf_from_map(
    obj: &Map<String, Value>,
    dups: &[Vec<Seg>],
    prefix: &[Seg],
) -> Result<NetConf> {
    let cni_version = check_version(obj)?;
    check_dups(dups, prefix)?;

    let known: Vec<&'static str> = STANDARD_KEYS.iter().chain(MASQ_KEYS).copied().collect();
    for k in obj.keys() {
        if !known.contains(&k.as_str()) {
            return Err(unknown_key_error(&key_display(k), k, &known));
        }
    }

    let plugin_type = match obj.get("type") {
        None | Some(Value::Null) => {
            return Err(Error::config(
                "type",
                format!("required; must be \"{PLUGIN_TYPE}\""),
            ))
        }
        Some(Value::String(s)) if s == PLUGIN_TYPE => s.clone(),
        Some(Value::String(s)) => {
            return Err(Error::config(
                "type",
                format!("expected \"{PLUGIN_TYPE}\", got {}", quote(s)),
            ))
        }
        Some(v) => {
            return Err(wrong_type(
                "type",
                &format!("the string \"{PLUGIN_TYPE}\""),
                v,
            ))
        }
    };
    let name = required_name(obj)?;
    check_standard_keys(obj)?;

    let prev_result = match obj.get("prevResult") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(v) => return Err(wrong_type("prevResult", "an object", v)),
    };

    let mut valid_attachments: Option<Vec<ValidAttachment>> = None;
    for k in [VALID_ATTACHMENTS_KEY, ATTACHMENTS_ALIAS_KEY] {
        match obj.get(k) {
            None | Some(Value::Null) => {}
            Some(v) => {
                // Both spellings given: keep the union (GC must never drop a live attachment).
                let list = valid_attachments.get_or_insert_with(Vec::new);
                for a in parse_attachments(k, v)? {
                    if !list.contains(&a) {
                        list.push(a);
                    }
                }
            }
        }
    }

    let pod_annotations = parse_pod_annotations(obj)?;
    let host_ports = parse_port_mappings(obj)?;
    let masq = parse_masq(obj)?;
    Ok(NetConf {
        cni_version,
        name,
        plugin_type,
        prev_result,
        valid_attachments,
        pod_annotations,
        host_ports,
        masq,
    })
}
