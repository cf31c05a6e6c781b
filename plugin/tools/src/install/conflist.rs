//! The pure part of install: config file names, and chaining our entry into a
//! CNI conflist (or taking it out) as JSON, every other key kept in order.

use std::path::Path;

use serde_json::{Map, Value};

use super::{BACKUP_SUFFIX, CONF_EXTENSIONS};
use ebpf_masq_core::{config::{self, MasqOptions, PLUGIN_TYPE}, error::{code, Error, Result}};


/// A name runtimes read as a network config (by extension, as libcni does).
pub fn is_conf_name(name: &str) -> bool {
    matches!(name.rsplit_once('.'), Some((_, ext)) if CONF_EXTENSIONS.contains(&ext))
}

/// The file a runtime uses: the lexicographically (byte-wise) first config name.
pub fn primary_conf<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names.into_iter().filter(|n| is_conf_name(n)).min()
}

fn ext(name: &str) -> Option<&str> {
    name.rsplit_once('.').map(|(_, e)| e)
}

/// `x.conf` / `x.json` → `x.conflist`.
pub fn conflist_name(name: &str) -> String {
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    format!("{stem}.conflist")
}

/// (original name, backup name) pairs that can belong to the file `name`:
/// its own backup, and for `x.conflist` those of a converted `x.conf`/`x.json`.
pub fn backup_candidates(name: &str) -> Vec<(String, String)> {
    let mut out = vec![(name.to_string(), format!("{name}{BACKUP_SUFFIX}"))];
    if ext(name) == Some("conflist") {
        let stem = &name[..name.len() - ".conflist".len()];
        for e in ["conf", "json"] {
            let orig = format!("{stem}.{e}");
            out.push((orig.clone(), format!("{orig}{BACKUP_SUFFIX}")));
        }
    }
    out
}

fn is_ours(p: &Value) -> bool {
    p.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE)
}

fn decode(file: &str, bytes: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::new(
            code::DECODE_FAILURE,
            format!("{file}: not a JSON object"),
        )),
        Err(e) => Err(Error::new(
            code::DECODE_FAILURE,
            format!("{file}: not valid JSON: {e}"),
        )),
    }
}

fn to_bytes(v: &Map<String, Value>) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).expect("a JSON map always serializes");
    b.push(b'\n');
    b
}

/// What [`chain`] did to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The entry was appended after the existing plugins.
    Appended,
    /// An existing ebpf-masq entry was replaced in place.
    Replaced,
    /// A single-plugin file was turned into a conflist (original plugin, then ours).
    Converted,
}

/// The node's config file with our entry chained in.
#[derive(Debug, Clone)]
pub struct Chained {
    /// File name to write (differs from the input for a converted single-plugin file).
    pub file: String,
    pub bytes: Vec<u8>,
    pub action: Action,
    /// Plugin types in order, for the report.
    pub plugins: Vec<String>,
}

/// Chain `entry` into the config file `file` holding `original`: append it (or
/// replace an existing ebpf-masq entry in place), or convert a single-plugin
/// config into a conflist of the original plugin then ours. Every other key and
/// plugin is kept in order. The result is validated as the plugin will see it.
pub fn chain(file: &str, original: &[u8], entry: &Map<String, Value>) -> Result<Chained> {
    let root = decode(file, original)?;
    let (mut list, out_file, converted) = if root.contains_key("plugins") {
        (root, file.to_string(), false)
    } else {
        if ext(file) == Some("conflist") {
            return Err(Error::config(
                "plugins",
                format!("{file} is a conflist without a \"plugins\" list"),
            ));
        }
        match root.get("type") {
            Some(Value::String(t)) if t == PLUGIN_TYPE => {
                return Err(Error::config(
                    "type",
                    format!(
                        "{file} is a single ebpf-masq config; ebpf-masq is a chained plugin and needs the main \
                         plugin (bridge, ptp, calico, flannel, ...) before it"
                    ),
                ))
            }
            Some(Value::String(_)) => {}
            _ => return Err(Error::config("type", format!("{file} is neither a conflist nor a plugin config"))),
        }
        // As libcni's ConfListFromConf: the list takes the plugin's version and name.
        let mut l = Map::new();
        for k in ["cniVersion", "name"] {
            if let Some(v) = root.get(k) {
                l.insert(k.to_string(), v.clone());
            }
        }
        l.insert("plugins".into(), Value::Array(vec![Value::Object(root)]));
        (l, conflist_name(file), true)
    };
    let plugins = list
        .get_mut("plugins")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::config("plugins", format!("{file}: \"plugins\" is not a list")))?;
    let ours: Vec<usize> = plugins
        .iter()
        .enumerate()
        .filter(|(_, p)| is_ours(p))
        .map(|(i, _)| i)
        .collect();
    let action = match ours.as_slice() {
        [] => {
            plugins.push(Value::Object(entry.clone()));
            if converted {
                Action::Converted
            } else {
                Action::Appended
            }
        }
        [i] => {
            plugins[*i] = Value::Object(entry.clone());
            Action::Replaced
        }
        many => {
            return Err(Error::config(
                "plugins",
                format!(
                    "{file} has {} ebpf-masq entries; fix it by hand (one is expected)",
                    many.len()
                ),
            ))
        }
    };
    let types = plugins
        .iter()
        .map(|p| {
            p.get("type")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    let bytes = to_bytes(&list);
    // What the runtime will hand the plugin must be valid for it.
    config::parse_conf_file(&bytes).map_err(|e| {
        let out = if converted {
            format!("{file} (converted to {out_file})")
        } else {
            file.to_string()
        };
        e.context(format!(
            "{out} chained with ebpf-masq would not be a valid ebpf-masq config"
        ))
    })?;
    Ok(Chained {
        file: out_file,
        bytes,
        action,
        plugins: types,
    })
}

/// The first ebpf-masq entry of a conflist, if the bytes are one and have it.
pub fn find_entry(bytes: &[u8]) -> Option<Map<String, Value>> {
    let Ok(Value::Object(root)) = serde_json::from_slice::<Value>(bytes) else {
        return None;
    };
    root.get("plugins")?
        .as_array()?
        .iter()
        .find(|p| is_ours(p))
        .and_then(|p| p.as_object().cloned())
}

/// The conflist without any ebpf-masq entry (everything else as it is).
pub fn unchain(file: &str, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut root = decode(file, bytes)?;
    if let Some(Value::Array(plugins)) = root.get_mut("plugins") {
        plugins.retain(|p| !is_ours(p));
    }
    Ok(to_bytes(&root))
}

/// True when `current` (file `current_file`) is exactly what install makes of
/// the backup `backup` of `orig_file` with the entry `current` holds: nothing
/// else changed the file since, so restoring the backup loses nothing.
pub fn restorable(current_file: &str, current: &[u8], orig_file: &str, backup: &[u8]) -> bool {
    let Some(entry) = find_entry(current) else {
        return false;
    };
    if find_entry(backup).is_some() {
        return false; // restoring would keep an ebpf-masq entry
    }
    matches!(chain(orig_file, backup, &entry), Ok(c) if c.file == current_file && c.bytes == current)
}

/// The entry `install` writes: `--conf` (validated) or the defaults, with `--pin-path`.
pub fn entry_from(
    conf_bytes: Option<&[u8]>,
    pin_path: Option<&Path>,
) -> Result<Map<String, Value>> {
    let mut masq = match conf_bytes {
        Some(b) => config::parse_conf_file(b)?.masq,
        None => MasqOptions::default(),
    };
    if let Some(p) = pin_path {
        // Same normalization and checks as the key itself.
        let probe = serde_json::json!({"cniVersion": "1.0.0", "name": "probe", "type": PLUGIN_TYPE,
                                       "pinPath": p.to_string_lossy()});
        let parsed = config::parse_netconf(probe.to_string().as_bytes())
            .map_err(|e| Error::new(e.code, format!("--pin-path: {}", e.msg)))?;
        masq.pin_path = parsed.masq.pin_path;
    }
    match config::masq_to_json(&masq) {
        Value::Object(mut m) => {
            // containerd (>= 1.5) and CRI-O then pass the pod's annotations as runtimeConfig,
            // and every runtime its hostPorts (portMappings, as to portmap): never handed out.
            m.insert(
                "capabilities".into(),
                serde_json::json!({ (config::CAP_POD_ANNOTATIONS): true, (config::CAP_PORT_MAPPINGS): true }),
            );
            Ok(m)
        }
        other => unreachable!("masq_to_json returned {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes(v: &Value) -> Vec<u8> {
        let mut b = serde_json::to_vec_pretty(v).unwrap();
        b.push(b'\n');
        b
    }

    fn default_entry() -> Map<String, Value> {
        entry_from(None, None).unwrap()
    }

    fn parsed(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    const BRIDGE: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "pods",
  "disableCheck": true,
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "subnet": "10.244.1.0/24", "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ],
  "zzz": 1
}"#;

    #[test]
    fn names() {
        assert!(is_conf_name("10-a.conf") && is_conf_name("a.conflist") && is_conf_name("a.json"));
        assert!(
            !is_conf_name("a.conf.ebpf-masq.bak")
                && !is_conf_name("kubeconfig")
                && !is_conf_name("a.yaml")
        );
        assert!(!is_conf_name(".a.conflist.ebpf-masq-tmp.12"));
        let names = [
            "99-z.conf",
            "calico-kubeconfig",
            "10-flannel.conflist",
            "10-a.json",
            "05-x.yaml",
        ];
        assert_eq!(primary_conf(names), Some("10-a.json"));
        assert_eq!(
            primary_conf(["10-b.conf", "10-b.conflist"]),
            Some("10-b.conf")
        );
        assert_eq!(primary_conf(["README"]), None);
        assert_eq!(conflist_name("10-bridge.conf"), "10-bridge.conflist");
        assert_eq!(conflist_name("x.json"), "x.conflist");
        let c = backup_candidates("10-b.conflist");
        assert_eq!(
            c[0],
            ("10-b.conflist".into(), "10-b.conflist.ebpf-masq.bak".into())
        );
        assert_eq!(c[1], ("10-b.conf".into(), "10-b.conf.ebpf-masq.bak".into()));
        assert_eq!(backup_candidates("10-b.conf").len(), 1);
    }

    /// What every entry declares: the CRI runtime then passes the pod's annotations.
    fn caps() -> Value {
        json!({"io.kubernetes.cri.pod-annotations": true, "portMappings": true})
    }

    #[test]
    fn insert_into_conflist_keeps_everything_in_order() {
        let c = chain("10-pods.conflist", BRIDGE.as_bytes(), &default_entry()).unwrap();
        assert_eq!(c.action, Action::Appended);
        assert_eq!(c.file, "10-pods.conflist");
        assert_eq!(c.plugins, ["bridge", "portmap", "ebpf-masq"]);
        let out = parsed(&c.bytes);
        let orig = parsed(BRIDGE.as_bytes());
        // Key order of the list and of every plugin kept.
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["cniVersion", "name", "disableCheck", "plugins", "zzz"]
        );
        let bkeys: Vec<&String> = out["plugins"][0].as_object().unwrap().keys().collect();
        assert_eq!(bkeys, ["type", "bridge", "isGateway", "ipMasq", "ipam"]);
        assert_eq!(out["plugins"][0], orig["plugins"][0]);
        assert_eq!(out["plugins"][1], orig["plugins"][1]);
        assert_eq!(out["plugins"][2], json!({"type": "ebpf-masq", "capabilities": caps()}));
        assert_eq!(out["zzz"], 1);
        // Idempotent, byte for byte.
        let again = chain("10-pods.conflist", &c.bytes, &default_entry()).unwrap();
        assert_eq!(again.bytes, c.bytes);
        assert_eq!(again.action, Action::Replaced);
        // And back.
        assert_eq!(parsed(&unchain("f", &c.bytes).unwrap()), orig);
    }

    #[test]
    fn replace_existing_entry_in_place() {
        let mut v = parsed(BRIDGE.as_bytes());
        let plugins = v["plugins"].as_array_mut().unwrap();
        plugins.insert(1, json!({"type": "ebpf-masq", "portRange": "2000-3000"}));
        let conf = br#"{"cniVersion":"1.0.0","name":"x","type":"ebpf-masq","nativeRoutingCIDR":"10.0.0.0/8","pinPath":"/sys/fs/bpf/other"}"#;
        let entry = entry_from(Some(conf), None).unwrap();
        let c = chain("a.conflist", &bytes(&v), &entry).unwrap();
        assert_eq!(c.action, Action::Replaced);
        assert_eq!(c.plugins, ["bridge", "ebpf-masq", "portmap"]);
        let out = parsed(&c.bytes);
        assert_eq!(
            out["plugins"][1],
            json!({"type": "ebpf-masq", "nativeRoutingCIDR": ["10.0.0.0/8"], "pinPath": "/sys/fs/bpf/other",
                   "capabilities": caps()})
        );
        // --pin-path overrides the config's.
        let e = entry_from(Some(conf), Some(Path::new("/sys/fs/bpf/third"))).unwrap();
        assert_eq!(e["pinPath"], "/sys/fs/bpf/third");
        assert!(entry_from(None, Some(Path::new("relative"))).is_err());
        // Two entries: ambiguous.
        plugins_push(&mut v, json!({"type": "ebpf-masq"}));
        let e = chain("a.conflist", &bytes(&v), &default_entry()).unwrap_err();
        assert!(e.msg.contains("2 ebpf-masq entries"), "{}", e.msg);
    }

    fn plugins_push(v: &mut Value, p: Value) {
        v["plugins"].as_array_mut().unwrap().push(p);
    }

    #[test]
    fn conf_file_is_converted() {
        let single =
            br#"{"cniVersion": "0.4.0", "name": "mynet", "type": "bridge", "bridge": "cni0",
            "ipam": {"type": "host-local", "subnet": "10.22.0.0/16"}}"#;
        let c = chain("10-mynet.conf", single, &default_entry()).unwrap();
        assert_eq!(c.action, Action::Converted);
        assert_eq!(c.file, "10-mynet.conflist");
        let out = parsed(&c.bytes);
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["cniVersion", "name", "plugins"]);
        assert_eq!(out["cniVersion"], "0.4.0");
        assert_eq!(out["name"], "mynet");
        assert_eq!(out["plugins"][0], parsed(single));
        assert_eq!(out["plugins"][1], json!({"type": "ebpf-masq", "capabilities": caps()}));
        // The converted file is then stable.
        let again = chain(&c.file, &c.bytes, &default_entry()).unwrap();
        assert_eq!(again.bytes, c.bytes);
        assert_eq!(again.file, c.file);
        // .json without plugins too.
        assert_eq!(
            chain("x.json", single, &default_entry()).unwrap().file,
            "x.conflist"
        );
        // And restorable from the backup of the .conf.
        assert!(restorable(&c.file, &c.bytes, "10-mynet.conf", single));
        assert!(!restorable(&c.file, &c.bytes, "10-mynet.conflist", single));
    }

    #[test]
    fn restorable_only_when_untouched() {
        let c = chain("10-pods.conflist", BRIDGE.as_bytes(), &default_entry()).unwrap();
        assert!(restorable(
            "10-pods.conflist",
            &c.bytes,
            "10-pods.conflist",
            BRIDGE.as_bytes()
        ));
        // Someone changed the file after install.
        let mut v = parsed(&c.bytes);
        v["plugins"][0]["bridge"] = json!("cni1");
        assert!(!restorable(
            "10-pods.conflist",
            &bytes(&v),
            "10-pods.conflist",
            BRIDGE.as_bytes()
        ));
        // A backup that holds an ebpf-masq entry is never restored.
        assert!(!restorable(
            "10-pods.conflist",
            &c.bytes,
            "10-pods.conflist",
            &c.bytes
        ));
        // No entry in the current file.
        assert!(!restorable(
            "10-pods.conflist",
            BRIDGE.as_bytes(),
            "10-pods.conflist",
            BRIDGE.as_bytes()
        ));
    }

    #[test]
    fn refusals() {
        let entry = default_entry();
        // A version ebpf-masq does not speak.
        let old = br#"{"name":"cbr0","cniVersion":"0.2.0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}}]}"#;
        let e = chain("10-flannel.conflist", old, &entry).unwrap_err();
        assert_eq!(e.code, code::INCOMPATIBLE_VERSION);
        assert!(
            e.msg.contains("10-flannel.conflist") && e.msg.contains("0.2.0"),
            "{}",
            e.msg
        );
        // What Calico and Flannel ship (0.3.1) is chained.
        let shipped = br#"{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}}]}"#;
        assert!(chain("10-flannel.conflist", shipped, &entry).is_ok());
        let e = chain("a.conflist", b"{not json", &entry).unwrap_err();
        assert_eq!(e.code, code::DECODE_FAILURE);
        assert!(chain("a.conflist", b"[1]", &entry).is_err());
        assert!(chain(
            "a.conflist",
            br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#,
            &entry
        )
        .is_err());
        assert!(chain(
            "a.conf",
            br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq"}"#,
            &entry
        )
        .is_err());
        assert!(chain("a.conf", br#"{"cniVersion":"1.0.0","name":"n"}"#, &entry).is_err());
        assert!(chain(
            "a.conflist",
            br#"{"cniVersion":"1.0.0","name":"n","plugins":{}}"#,
            &entry
        )
        .is_err());
        // Invalid --conf is refused with the key named.
        let bad = br#"{"cniVersion":"1.0.0","name":"n","type":"ebpf-masq","portRange":"9-1"}"#;
        assert!(entry_from(Some(bad), None)
            .unwrap_err()
            .msg
            .contains("portRange"));
    }
}
