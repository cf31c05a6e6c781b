//! A typed, tolerant view of the prevResult handed to a chained plugin.
//!
//! Covers results of CNI 0.4.0, 1.0.0 and 1.1.0 as produced by bridge, ptp,
//! Calico, podman and friends: `interfaces`, `ips`, `routes` and `dns` are all
//! optional, unknown keys are ignored, and 0.4.0's `ips[].version` is
//! accepted.  Only what we rely on is checked: the addresses, gateways and
//! interface indices.  Errors are CNI code 7 naming the key, e.g.
//! `prevResult.ips[0].address`.

use std::net::IpAddr;
use std::str::FromStr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct PrevResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    /// Netns path of a container-side interface; None for host-side ones.
    pub sandbox: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpConfig {
    /// Host address with its prefix, e.g. 10.22.0.5/16 (host bits set is normal).
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Index into `PrevResult::interfaces`.
    pub interface: Option<usize>,
}

const KEY: &str = "prevResult";

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => {
            let mut q: String = s.chars().take(80).collect();
            if s.chars().count() > 80 {
                q.push_str("...");
            }
            format!("string {q:?}")
        }
        Value::Array(a) => format!("a list of {} element(s)", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn wrong_type(key: &str, expected: &str, got: &Value) -> Error {
    Error::config(key, format!("expected {expected}, got {}", describe(got)))
}

/// A list that may be absent or null (→ empty).
fn optional_list<'a>(obj: &'a Map<String, Value>, k: &str) -> Result<&'a [Value]> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(wrong_type(&format!("{KEY}.{k}"), "a list", v)),
    }
}

/// An optional string; absent, null and "" all mean None (Go's omitempty).
fn optional_string(obj: &Map<String, Value>, path: &str, k: &str) -> Result<Option<String>> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(wrong_type(&format!("{path}.{k}"), "a string", v)),
    }
}

fn parse_interface(i: usize, v: &Value) -> Result<Interface> {
    let path = format!("{KEY}.interfaces[{i}]");
    let o = v
        .as_object()
        .ok_or_else(|| wrong_type(&path, "an object", v))?;
    let name = match o.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => {
            return Err(Error::config(&format!("{path}.name"), "must not be empty"))
        }
        None | Some(Value::Null) => return Err(Error::config(&format!("{path}.name"), "required")),
        Some(v) => return Err(wrong_type(&format!("{path}.name"), "a string", v)),
    };
    Ok(Interface {
        name,
        mac: optional_string(o, &path, "mac")?,
        sandbox: optional_string(o, &path, "sandbox")?,
    })
}

fn parse_ip(i: usize, v: &Value, n_interfaces: usize) -> Result<IpConfig> {
    let path = format!("{KEY}.ips[{i}]");
    let o = v
        .as_object()
        .ok_or_else(|| wrong_type(&path, "an object", v))?;

    let apath = format!("{path}.address");
    let address = match o.get("address") {
        Some(Value::String(s)) => IpNetwork::from_str(s).map_err(|e| {
            Error::config(
                &apath,
                format!(
                    "{} is not an address with prefix: {e}",
                    describe(&Value::String(s.clone()))
                ),
            )
        })?,
        None | Some(Value::Null) => return Err(Error::config(&apath, "required")),
        Some(v) => return Err(wrong_type(&apath, "a string like \"10.22.0.5/16\"", v)),
    };

    let gpath = format!("{path}.gateway");
    let gateway = match optional_string(o, &path, "gateway")? {
        None => None,
        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| {
            Error::config(
                &gpath,
                format!(
                    "{} is not an IP address",
                    describe(&Value::String(s.clone()))
                ),
            )
        })?),
    };

    let ipath = format!("{path}.interface");
    let interface = match o.get("interface") {
        None | Some(Value::Null) => None,
        Some(iv @ Value::Number(n)) => match n.as_u64() {
            Some(idx) if idx < n_interfaces as u64 => Some(idx as usize),
            Some(idx) => {
                return Err(Error::config(
                    &ipath,
                    format!(
                        "index {idx} is out of range: the result has {n_interfaces} interface(s)"
                    ),
                ))
            }
            None => {
                return Err(wrong_type(
                    &ipath,
                    "a non-negative integer index into interfaces",
                    iv,
                ))
            }
        },
        Some(other) => {
            return Err(wrong_type(
                &ipath,
                "an integer index into interfaces",
                other,
            ))
        }
    };

    // CNI 0.4.0 carries the family explicitly; if it is there it must agree.
    match o.get("version") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "4" || s == "6" => {
            let is_v4 = s == "4";
            if is_v4 != address.is_ipv4() {
                return Err(Error::config(
                    &format!("{path}.version"),
                    format!("version \"{s}\" does not match address {address}"),
                ));
            }
        }
        Some(other) => {
            return Err(wrong_type(
                &format!("{path}.version"),
                "\"4\" or \"6\"",
                other,
            ))
        }
    }

    Ok(IpConfig {
        address,
        gateway,
        interface,
    })
}

/// Parse a prevResult (the raw JSON object from the network config).
pub fn parse_prev_result(v: &Value) -> Result<PrevResult> {
    let obj = v
        .as_object()
        .ok_or_else(|| wrong_type(KEY, "an object", v))?;
    let interfaces = optional_list(obj, "interfaces")?
        .iter()
        .enumerate()
        .map(|(i, e)| parse_interface(i, e))
        .collect::<Result<Vec<_>>>()?;
    let ips = optional_list(obj, "ips")?
        .iter()
        .enumerate()
        .map(|(i, e)| parse_ip(i, e, interfaces.len()))
        .collect::<Result<Vec<_>>>()?;
    Ok(PrevResult { interfaces, ips })
}

impl PrevResult {
    /// Addresses of the container interface `ifname` (the interface with that
    /// name and a sandbox); ips without an interface index are included too.
    /// In result order, without duplicates.
    pub fn container_ips(&self, ifname: &str) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for ip in &self.ips {
            let ours = match ip.interface {
                None => true,
                Some(i) => self
                    .interfaces
                    .get(i)
                    .is_some_and(|itf| itf.name == ifname && itf.sandbox.is_some()),
            };
            let addr = ip.address.ip();
            if ours && !out.contains(&addr) {
                out.push(addr);
            }
        }
        out
    }

    /// The container interface's addresses with their prefixes (the pod's subnet),
    /// as `container_ips` picks them.
    pub fn container_nets(&self, ifname: &str) -> Vec<ipnetwork::IpNetwork> {
        let ips = self.container_ips(ifname);
        let mut out: Vec<ipnetwork::IpNetwork> = Vec::new();
        for ip in &self.ips {
            if ips.contains(&ip.address.ip()) && !out.iter().any(|n| n.ip() == ip.address.ip()) {
                out.push(ip.address);
            }
        }
        out
    }

    /// Host-side interface names: interfaces without a sandbox (bridge/ptp
    /// report the host veth and the bridge itself).
    pub fn host_interfaces(&self) -> Vec<&str> {
        self.interfaces
            .iter()
            .filter(|i| i.sandbox.is_none())
            .map(|i| i.name.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;
    use serde_json::json;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test IP")
    }

    fn bridge_interfaces() -> Value {
        json!([
            {"name": "cni0", "mac": "4a:c4:1e:2b:7f:01"},
            {"name": "veth5b3e1a2c", "mac": "9e:d1:0c:44:ab:12"},
            {"name": "eth0", "mac": "0a:58:0a:16:00:05", "sandbox": "/var/run/netns/x"}
        ])
    }

    #[test]
    fn bridge_0_4_0() {
        let v = json!({
            "cniVersion": "0.4.0",
            "interfaces": bridge_interfaces(),
            "ips": [
                {"version": "4", "interface": 2, "address": "10.22.0.5/16", "gateway": "10.22.0.1"},
                {"version": "6", "interface": 2, "address": "fd00:22::5/64", "gateway": "fd00:22::1"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "dns": {}
        });
        let r = parse_prev_result(&v).expect("bridge 0.4.0");
        assert_eq!(r.interfaces.len(), 3);
        assert_eq!(r.interfaces[0].mac.as_deref(), Some("4a:c4:1e:2b:7f:01"));
        assert_eq!(r.interfaces[2].sandbox.as_deref(), Some("/var/run/netns/x"));
        assert_eq!(r.ips[0].address.to_string(), "10.22.0.5/16");
        assert_eq!(r.ips[0].address.prefix(), 16);
        assert_eq!(r.ips[0].gateway, Some(ip("10.22.0.1")));
        assert_eq!(r.ips[0].interface, Some(2));
        assert_eq!(
            r.container_ips("eth0"),
            vec![ip("10.22.0.5"), ip("fd00:22::5")]
        );
        assert!(r.container_ips("net1").is_empty());
        assert_eq!(r.host_interfaces(), vec!["cni0", "veth5b3e1a2c"]);
    }

    #[test]
    fn bridge_1_0_0() {
        let v = json!({
            "cniVersion": "1.0.0",
            "interfaces": bridge_interfaces(),
            "ips": [{"interface": 2, "address": "10.22.0.5/16", "gateway": "10.22.0.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1"}],
            "dns": {}
        });
        let r = parse_prev_result(&v).expect("bridge 1.0.0");
        assert_eq!(
            r.ips,
            vec![IpConfig {
                address: "10.22.0.5/16".parse().expect("net"),
                gateway: Some(ip("10.22.0.1")),
                interface: Some(2)
            }]
        );
        assert_eq!(r.container_ips("eth0"), vec![ip("10.22.0.5")]);
        assert_eq!(r.host_interfaces(), vec!["cni0", "veth5b3e1a2c"]);
    }

    #[test]
    fn ptp() {
        let v = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "veth0f1a7b3c", "mac": "c6:1d:7a:90:2e:33"},
                {"name": "eth0", "mac": "5a:0b:61:c2:11:8e", "sandbox": "/var/run/netns/cni-1c4e6f8a-0b2d-4e6f-8a0b-2d4e6f8a0b2d"}
            ],
            "ips": [{"interface": 1, "address": "10.1.1.2/24", "gateway": "10.1.1.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.1.1.1"]}
        });
        let r = parse_prev_result(&v).expect("ptp");
        assert_eq!(r.container_ips("eth0"), vec![ip("10.1.1.2")]);
        assert_eq!(r.host_interfaces(), vec!["veth0f1a7b3c"]);
    }

    #[test]
    fn calico_style() {
        // Only the container side reported, ips without an interface index.
        let v = json!({
            "cniVersion": "0.4.0",
            "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/cni-42"}],
            "ips": [
                {"version": "4", "address": "192.168.77.3/32"},
                {"version": "6", "address": "fd00:77::3/128"}
            ],
            "dns": {}
        });
        let r = parse_prev_result(&v).expect("calico");
        assert_eq!(
            r.container_ips("eth0"),
            vec![ip("192.168.77.3"), ip("fd00:77::3")]
        );
        assert!(r.host_interfaces().is_empty());

        // No interfaces at all.
        let v = json!({"cniVersion": "1.0.0", "ips": [{"address": "192.168.77.4/32"}]});
        let r = parse_prev_result(&v).expect("no interfaces");
        assert!(r.interfaces.is_empty());
        assert_eq!(r.container_ips("eth0"), vec![ip("192.168.77.4")]);

        // Host-side veth only (no sandbox), Go's omitempty quirks.
        let v = json!({"cniVersion": "1.1.0",
                       "interfaces": [{"name": "cali12ab34cd56e", "mac": "", "sandbox": ""}],
                       "ips": [{"address": "192.168.77.5/32", "gateway": ""}], "dns": {}});
        let r = parse_prev_result(&v).expect("calico host-side");
        assert_eq!(r.interfaces[0].mac, None);
        assert_eq!(r.host_interfaces(), vec!["cali12ab34cd56e"]);
        assert_eq!(r.ips[0].gateway, None);
    }

    #[test]
    fn empty_and_minimal() {
        let r = parse_prev_result(&json!({"cniVersion": "1.0.0"})).expect("empty");
        assert_eq!(
            r,
            PrevResult {
                interfaces: vec![],
                ips: vec![]
            }
        );
        let r = parse_prev_result(&json!({"interfaces": null, "ips": null})).expect("nulls");
        assert!(r.container_ips("eth0").is_empty());
        // Duplicated addresses are reported once; ips on other interfaces are left out.
        let v = json!({
            "interfaces": [{"name": "eth0", "sandbox": "/ns"}, {"name": "net1", "sandbox": "/ns"}, {"name": "eth0"}],
            "ips": [{"interface": 0, "address": "10.0.0.2/24"}, {"address": "10.0.0.2/24"},
                    {"interface": 1, "address": "10.9.0.2/24"}, {"interface": 2, "address": "10.8.0.2/24"}]
        });
        let r = parse_prev_result(&v).expect("multi");
        assert_eq!(r.container_ips("eth0"), vec![ip("10.0.0.2")]);
        assert_eq!(
            r.container_ips("net1"),
            vec![ip("10.0.0.2"), ip("10.9.0.2")]
        );
    }

    #[test]
    fn bad_prev_results() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "\"prevResult\""),
            (json!("x"), "\"prevResult\""),
            (json!({"interfaces": {}}), "\"prevResult.interfaces\""),
            (
                json!({"interfaces": ["eth0"]}),
                "\"prevResult.interfaces[0]\"",
            ),
            (
                json!({"interfaces": [{"mac": "aa"}]}),
                "\"prevResult.interfaces[0].name\"",
            ),
            (
                json!({"interfaces": [{"name": 3}]}),
                "\"prevResult.interfaces[0].name\"",
            ),
            (
                json!({"interfaces": [{"name": "eth0", "sandbox": 1}]}),
                "\"prevResult.interfaces[0].sandbox\"",
            ),
            (json!({"ips": "10.0.0.1/8"}), "\"prevResult.ips\""),
            (
                json!({"ips": [{"gateway": "10.0.0.1"}]}),
                "\"prevResult.ips[0].address\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.1/8"}, {"address": "bogus"}]}),
                "\"prevResult.ips[1].address\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.1/40"}]}),
                "\"prevResult.ips[0].address\"",
            ),
            (
                json!({"ips": [{"address": 5}]}),
                "\"prevResult.ips[0].address\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.2/8", "gateway": "nope"}]}),
                "\"prevResult.ips[0].gateway\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.2/8", "interface": 0}]}),
                "\"prevResult.ips[0].interface\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.2/8", "interface": -1}]}),
                "got number -1",
            ),
            (
                json!({"ips": [{"address": "10.0.0.2/8", "interface": "0"}]}),
                "\"prevResult.ips[0].interface\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.2/8", "version": "6"}]}),
                "\"prevResult.ips[0].version\"",
            ),
            (
                json!({"ips": [{"address": "10.0.0.2/8", "version": 4}]}),
                "\"prevResult.ips[0].version\"",
            ),
        ];
        for (v, want) in cases {
            let e = parse_prev_result(&v).expect_err(&v.to_string());
            assert_eq!(e.code, code::INVALID_CONFIG, "{v}");
            assert!(e.msg.contains(want), "{v}: {:?} lacks {want:?}", e.msg);
        }
    }
}
