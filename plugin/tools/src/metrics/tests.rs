use super::*;
use std::collections::{HashMap, HashSet};

/// A strict parser of the text exposition format 0.0.4, for what we emit:
/// every sample's family has a TYPE line before it, families are contiguous,
/// names and labels are well formed, no series appears twice, counters end
/// in `_total` and are non-negative integers. Returns name -> type and the series.
/// (metric name, labels in order, value) of every sample.
pub(super) type Series = Vec<(String, Vec<(String, String)>, f64)>;

pub(super) fn validate(text: &str) -> std::result::Result<(HashMap<String, String>, Series), String> {
    fn is_name(s: &str, colon: bool) -> bool {
        let mut cs = s.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    }
    if !text.ends_with('\n') {
        return Err("must end with a newline".into());
    }
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut closed: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut seen: HashSet<String> = HashSet::new();
    let mut series = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let err = |m: &str| format!("line {}: {m}: {line:?}", no + 1);
        if line.is_empty() {
            return Err(err("empty line"));
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut it = rest.splitn(3, ' ');
            let (kw, name, arg) = (it.next().unwrap_or(""), it.next().unwrap_or(""), it.next().unwrap_or(""));
            if !is_name(name, true) {
                return Err(err("bad metric name"));
            }
            if current.as_deref() != Some(name) {
                if let Some(c) = current.take() {
                    closed.insert(c);
                }
                if closed.contains(name) {
                    return Err(err("family not contiguous"));
                }
                current = Some(name.to_string());
            }
            match kw {
                "HELP" => {
                    if !helps.insert(name.into()) || arg.is_empty() {
                        return Err(err("duplicate or empty HELP"));
                    }
                }
                "TYPE" => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg) {
                        return Err(err("bad type"));
                    }
                    if types.insert(name.into(), arg.into()).is_some() {
                        return Err(err("duplicate TYPE"));
                    }
                    if arg == "counter" && !name.ends_with("_total") {
                        return Err(err("counter without _total"));
                    }
                    if series.iter().any(|(n, _, _): &(String, _, _)| n == name) {
                        return Err(err("TYPE after samples"));
                    }
                }
                _ => return Err(err("unknown comment keyword")),
            }
            continue;
        }
        if line.starts_with('#') {
            return Err(err("bad comment"));
        }
        // name{labels} value
        let name_end = line.find(['{', ' ']).ok_or_else(|| err("no value"))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(err("bad metric name"));
        }
        let kind = types.get(name).ok_or_else(|| err("sample without TYPE"))?;
        if current.as_deref() != Some(name) {
            return Err(err("sample outside its family"));
        }
        let mut rest = &line[name_end..];
        let mut labels: Vec<(String, String)> = Vec::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            loop {
                // label name
                let start = chars.peek().map(|(i, _)| *i).ok_or_else(|| err("unterminated labels"))?;
                if r[start..].starts_with('}') {
                    chars.next();
                    break;
                }
                let eq = r[start..].find('=').ok_or_else(|| err("label without ="))? + start;
                let lname = &r[start..eq];
                if !is_name(lname, false) || lname.starts_with("__") {
                    return Err(err("bad label name"));
                }
                while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                    chars.next();
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(err("label value not quoted"));
                }
                let mut val = String::new();
                loop {
                    match chars.next().ok_or_else(|| err("unterminated label value"))?.1 {
                        '"' => break,
                        '\\' => match chars.next().ok_or_else(|| err("dangling escape"))?.1 {
                            '\\' => val.push('\\'),
                            '"' => val.push('"'),
                            'n' => val.push('\n'),
                            _ => return Err(err("bad escape")),
                        },
                        '\n' => return Err(err("raw newline in label value")),
                        c => val.push(c),
                    }
                }
                if labels.iter().any(|(n, _)| n == lname) {
                    return Err(err("duplicate label"));
                }
                labels.push((lname.to_string(), val));
                match chars.next().map(|(_, c)| c) {
                    Some(',') => continue,
                    Some('}') => break,
                    _ => return Err(err("expected , or }")),
                }
            }
            let consumed = chars.peek().map(|(i, _)| *i).unwrap_or(r.len());
            rest = &r[consumed..];
        }
        let value = rest.strip_prefix(' ').ok_or_else(|| err("no space before value"))?;
        if value.contains(' ') {
            return Err(err("timestamps are not emitted"));
        }
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().map_err(|_| err("bad value"))?,
        };
        if kind == "counter" && !(v >= 0.0 && v.fract() == 0.0) {
            return Err(err("counter must be a non-negative integer"));
        }
        let mut sorted = labels.clone();
        sorted.sort();
        if !seen.insert(format!("{name}{sorted:?}")) {
            return Err(err("duplicate series"));
        }
        series.push((name.to_string(), labels, v));
    }
    Ok((types, series))
}

pub(super) fn rule(id: u32, oif: Option<&str>) -> RuleRow {
    RuleRow {
        id,
        source: "192.168.6.0".parse().unwrap(),
        source_len: 24,
        out_ifindex: 7,
        out_interface: oif.map(String::from),
        except: vec![],
        to_address: None,
        packets: 10 + id as u64,
        bytes: 1000,
    }
}

pub(super) fn pod(id: &str, ifname: &str) -> PodRow {
    PodRow {
        container_id: id.into(),
        ifname: ifname.into(),
        veth: "veth0".into(),
        veth_ifindex: 9,
        addresses: vec![],
        nat_outgoing: true,
        found: false,
        packets: 5,
        bytes: 500,
        spoofed: 1,
        refused_no_port: 2,
        refused_over_share: 3,
        refused_over_limit: 4,
        port_limit: Some(64),
        k8s_namespace: String::new(),
        k8s_name: String::new(),
        annotations: serde_json::json!({}),
        host_ports: vec![],
        policies: 0,
    }
}

pub(super) fn k8s(p: PodRow) -> PodRow {
    PodRow { k8s_namespace: "team-a".into(), k8s_name: "web-1".into(), ..p }
}

pub(super) fn policy(index: u32, name: &str, pods: &[&str]) -> PolicyRow {
    PolicyRow {
        desc: readers::PolicyDesc {
            index,
            name: name.into(),
            flags: 0,
            namespaces: vec!["team-a".into()],
            pods: vec![],
            destinations: vec![],
            action: readers::PolicyAction::Masquerade(vec!["192.0.2.50".into()]),
        },
        packets: 40 + index as u64,
        bytes: 4000,
        flows: 4,
        unmasqueraded: index as u64,
        pods: pods.iter().map(|p| p.to_string()).collect(),
    }
}

pub(super) fn snapshot() -> Snapshot {
    Snapshot {
        loaded: true,
        counters: abi::counter::NAMES.iter().enumerate().map(|(i, n)| (n.to_string(), i as u64 * 3)).collect(),
        drops: abi::drop_reason::NAMES.iter().map(|n| (n.to_string(), 2)).collect(),
        nat: vec![("ipv4", 12, 1 << 20)],
        sweep: Sweep { runs: 7, cycles: 3, last_run_ns: 450_000, max_run_ns: 1_200_000, last_checked: 12, armed: true, walks_ipv6: false },
        rules: vec![rule(0, Some("eth0")), rule(1, None)],
        // Hostile label values: quotes, backslashes, a newline.
        // A pod with its Kubernetes names (two interfaces), one without (empty labels).
        pods: vec![k8s(pod("abc", "eth0")), PodRow { found: true, ..k8s(pod("abc", "net1")) }, pod("we\"ird\\id\nx", "eth0")],
        egress_policies: vec![policy(0, "partner", &["team-a/web-1", "team-a/web-2"]), policy(1, "optout", &[])],
        natlog: Some((120, 7)),
    }
}

pub(super) fn value(series: &Series, name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    series.iter().find(|(n, l, _)| n == name && *l == want).unwrap_or_else(|| panic!("no {name} {labels:?}")).2
}

#[test]
fn exposition_parses_and_holds_every_family() {
    let text = render(&snapshot());
    let (types, series) = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for (name, kind) in [
        ("ebpf_masq_data_plane_loaded", "gauge"),
        ("ebpf_masq_translated_packets_total", "counter"),
        ("ebpf_masq_translated_bytes_total", "counter"),
        ("ebpf_masq_nat_pairs_created_total", "counter"),
        ("ebpf_masq_nat_pairs_reclaimed_total", "counter"),
        ("ebpf_masq_nat_pairs_expired_total", "counter"),
        ("ebpf_masq_port_allocation_failures_total", "counter"),
        ("ebpf_masq_nat_entries", "gauge"),
        ("ebpf_masq_nat_expiry_sweeps_total", "counter"),
        ("ebpf_masq_nat_expiry_cycles_total", "counter"),
        ("ebpf_masq_nat_expiry_last_run_seconds", "gauge"),
        ("ebpf_masq_nat_expiry_max_run_seconds", "gauge"),
        ("ebpf_masq_nat_expiry_last_checked_pairs", "gauge"),
        ("ebpf_masq_nat_expiry_running", "gauge"),
        ("ebpf_masq_nat_expiry_walks_ipv6", "gauge"),
        ("ebpf_masq_drops_total", "counter"),
        ("ebpf_masq_rule_packets_total", "counter"),
        ("ebpf_masq_rule_bytes_total", "counter"),
        ("ebpf_masq_pod_packets_total", "counter"),
        ("ebpf_masq_pod_bytes_total", "counter"),
        ("ebpf_masq_pod_spoofed_packets_total", "counter"),
        ("ebpf_masq_pod_port_refusals_total", "counter"),
        ("ebpf_masq_egress_policy_packets_total", "counter"),
        ("ebpf_masq_egress_policy_bytes_total", "counter"),
        ("ebpf_masq_egress_policy_flows_total", "counter"),
        ("ebpf_masq_egress_policy_unmasqueraded_packets_total", "counter"),
        ("ebpf_masq_egress_policy_pods", "gauge"),
        ("ebpf_masq_natlog_exporting", "gauge"),
        ("ebpf_masq_natlog_records_total", "counter"),
        ("ebpf_masq_natlog_ipfix_unsent_total", "counter"),
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}\n{text}");
    }
    assert!(types.keys().all(|n| n.starts_with("ebpf_masq_")));
    // Counter indexes: snat_packets_v4 = 0, rnat_packets_v4 = 2, snat_packets_v6 = 4 (x3 in the fixture).
    let t = "ebpf_masq_translated_packets_total";
    assert_eq!(value(&series, t, &[("direction", "snat"), ("family", "ipv4")]), 0.0);
    assert_eq!(value(&series, t, &[("direction", "rnat"), ("family", "ipv4")]), 6.0);
    assert_eq!(value(&series, t, &[("direction", "snat"), ("family", "ipv6")]), 12.0);
    assert_eq!(value(&series, "ebpf_masq_nat_pairs_created_total", &[]), 24.0);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_sweeps_total", &[]), 7.0);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_cycles_total", &[]), 3.0);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_last_run_seconds", &[]), 0.00045);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_max_run_seconds", &[]), 0.0012);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_last_checked_pairs", &[]), 12.0);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_running", &[]), 1.0);
    assert_eq!(value(&series, "ebpf_masq_nat_expiry_walks_ipv6", &[]), 0.0);
    assert_eq!(value(&series, "ebpf_masq_port_allocation_failures_total", &[]), 33.0);
    assert_eq!(value(&series, "ebpf_masq_nat_entries", &[("family", "ipv4")]), 12.0);
    assert_eq!(value(&series, "ebpf_masq_nat_entries", &[("family", "ipv6")]), 0.0);
    assert_eq!(value(&series, "ebpf_masq_drops_total", &[("reason", "no_port")]), 2.0);
    let r = [("rule", "0"), ("source", "192.168.6.0/24"), ("out_interface", "eth0")];
    assert_eq!(value(&series, "ebpf_masq_rule_packets_total", &r), 10.0);
    let r = [("rule", "1"), ("source", "192.168.6.0/24"), ("out_interface", "ifindex:7")];
    assert_eq!(value(&series, "ebpf_masq_rule_bytes_total", &r), 1000.0);
    let p = [("container_id", "we\"ird\\id\nx"), ("ifname", "eth0"), ("namespace", ""), ("pod", "")];
    assert_eq!(value(&series, "ebpf_masq_pod_spoofed_packets_total", &p), 1.0);
    let named = [("container_id", "abc"), ("ifname", "net1"), ("namespace", "team-a"), ("pod", "web-1")];
    assert_eq!(value(&series, "ebpf_masq_pod_bytes_total", &named), 500.0);
    let why = |r| [p[0], p[1], p[2], p[3], ("reason", r)];
    assert_eq!(value(&series, "ebpf_masq_pod_port_refusals_total", &why("no_port")), 2.0);
    assert_eq!(value(&series, "ebpf_masq_pod_port_refusals_total", &why("over_share")), 3.0);
    assert_eq!(value(&series, "ebpf_masq_pod_port_refusals_total", &why("over_limit")), 4.0);
    assert_eq!(series.iter().filter(|(n, _, _)| n == "ebpf_masq_pod_port_refusals_total").count(), 3 * 3, "3 reasons, 3 pods");
    assert_eq!(series.iter().filter(|(n, _, _)| n == "ebpf_masq_drops_total").count(), abi::drop_reason::NAMES.len());
    let partner = [("policy", "partner")];
    assert_eq!(value(&series, "ebpf_masq_egress_policy_packets_total", &partner), 40.0);
    assert_eq!(value(&series, "ebpf_masq_egress_policy_bytes_total", &partner), 4000.0);
    assert_eq!(value(&series, "ebpf_masq_egress_policy_flows_total", &partner), 4.0);
    assert_eq!(value(&series, "ebpf_masq_egress_policy_unmasqueraded_packets_total", &[("policy", "optout")]), 1.0);
    assert_eq!(value(&series, "ebpf_masq_egress_policy_pods", &partner), 2.0);
    assert_eq!(value(&series, "ebpf_masq_egress_policy_pods", &[("policy", "optout")]), 0.0);
    assert_eq!(value(&series, "ebpf_masq_natlog_exporting", &[]), 1.0);
    assert_eq!(value(&series, "ebpf_masq_natlog_records_total", &[]), 120.0);
    assert_eq!(value(&series, "ebpf_masq_natlog_ipfix_unsent_total", &[]), 7.0);
    // No exporter: the gauge says so, and its counters are not made up.
    let text = render(&Snapshot { natlog: None, ..snapshot() });
    let (_, series) = validate(&text).unwrap();
    assert_eq!(value(&series, "ebpf_masq_natlog_exporting", &[]), 0.0);
    assert!(!text.contains("ebpf_masq_natlog_records_total"));
}

#[test]
fn exposition_lines_are_what_users_see() {
    // Exact lines, as the hand-written renderer wrote them before prometheus-client:
    // counters keep `_total` on HELP and TYPE too (0.0.4, not OpenMetrics), labels
    // keep their order and are escaped, seconds are plain decimals.
    let text = render(&snapshot());
    for line in [
        "# HELP ebpf_masq_translated_packets_total Packets translated: snat = source rewritten on uplink egress, \
         rnat = reply rewritten back on uplink ingress.",
        "# TYPE ebpf_masq_translated_packets_total counter",
        "ebpf_masq_translated_packets_total{direction=\"snat\",family=\"ipv4\"} 0",
        "ebpf_masq_translated_packets_total{direction=\"rnat\",family=\"ipv6\"} 18",
        "# TYPE ebpf_masq_nat_entries_limit gauge",
        "ebpf_masq_nat_entries_limit{family=\"ipv4\"} 1048576",
        "ebpf_masq_nat_expiry_last_run_seconds 0.00045",
        "ebpf_masq_nat_expiry_running 1",
        "ebpf_masq_rule_packets_total{rule=\"1\",source=\"192.168.6.0/24\",out_interface=\"ifindex:7\"} 11",
        "ebpf_masq_pod_spoofed_packets_total{container_id=\"we\\\"ird\\\\id\\nx\",ifname=\"eth0\",namespace=\"\",pod=\"\"} 1",
        "ebpf_masq_pod_port_refusals_total{container_id=\"abc\",ifname=\"net1\",namespace=\"team-a\",pod=\"web-1\",reason=\"over_limit\"} 4",
        "# TYPE ebpf_masq_egress_policy_packets_total counter",
        "ebpf_masq_egress_policy_packets_total{policy=\"partner\"} 40",
        "ebpf_masq_pods{by=\"add\"} 2",
        "ebpf_masq_pods{by=\"found\"} 1",
        "# TYPE ebpf_masq_egress_policy_pods gauge",
        "ebpf_masq_egress_policy_pods{policy=\"partner\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
    }
    // Families in the order they always came, and nothing OpenMetrics-only.
    let families: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(families.first(), Some(&"ebpf_masq_data_plane_loaded"));
    assert_eq!(families.last(), Some(&"ebpf_masq_pod_port_refusals_total"));
    assert_eq!(families.len(), 51, "{families:?}");
    assert!(!text.contains("# EOF") && !text.contains("# UNIT") && !text.contains("_total_total"), "{text}");
    // A zero float gauge is written "0.0" (it was "0"): the same value to every parser.
    let s = Snapshot { sweep: Sweep::default(), ..snapshot() };
    let text = render(&s);
    assert!(text.lines().any(|l| l == "ebpf_masq_nat_expiry_last_run_seconds 0.0"), "{text}");
    assert_eq!(value(&validate(&text).unwrap().1, "ebpf_masq_nat_expiry_last_run_seconds", &[]), 0.0);
}

#[test]
fn not_loaded_is_one_gauge() {
    let text = render(&Snapshot::default());
    let (_, series) = validate(&text).unwrap();
    assert_eq!(series, vec![("ebpf_masq_data_plane_loaded".to_string(), vec![], 0.0)]);
}

#[test]
fn empty_node_parses() {
    let s = Snapshot { rules: vec![], pods: vec![], nat: vec![], egress_policies: vec![], ..snapshot() };
    validate(&render(&s)).unwrap();
}

#[test]
fn validator_rejects_bad_text() {
    for bad in [
        "x 1\n",                                                        // no TYPE
        "# TYPE x_total counter\nx_total{a=\"1\"} 1\nx_total{a=\"1\"} 2\n", // duplicate series
        "# TYPE x counter\nx 1\n",                                      // counter without _total
        "# TYPE x gauge\nx{a=1} 1\n",                                   // unquoted
        "# TYPE x gauge\nx{a=\"\\t\"} 1\n",                             // bad escape
        "# TYPE x gauge\nx{__a=\"1\"} 1\n",                             // reserved label
        "# TYPE 1x gauge\n1x 1\n",                                      // bad name
        "# TYPE x gauge\n# TYPE y gauge\ny 1\nx 1\n",                   // not contiguous
        "# TYPE x gauge\nx 1",                                          // no final newline
        "# TYPE x gauge\nx one\n",                                      // bad value
    ] {
        assert!(validate(bad).is_err(), "accepted {bad:?}");
    }
    validate("# HELP x h\n# TYPE x gauge\nx{a=\"q\\\"\\\\\\n\",b=\"\"} -1.5\n").unwrap();
}

#[test]
fn http_routing() {
    use tiny_http::Method;
    let ok = || Ok("body\n".to_string());
    let r = respond(&Method::Get, "/metrics", ok);
    assert_eq!(r, Reply { status: 200, content_type: CONTENT_TYPE, body: "body\n".into(), allow: false });
    assert_eq!(respond(&Method::Head, "/metrics?x=1", ok).status, 200);
    assert_eq!(respond(&Method::Get, "/", ok).status, 404);
    assert_eq!(respond(&Method::Get, "/metricsx", ok).status, 404);
    assert_eq!(respond(&Method::Get, "/metrics/extra", ok).status, 404);
    let r = respond(&Method::Post, "/metrics", ok);
    assert!(r.status == 405 && r.allow);
    let r = respond(&Method::Get, "/metrics", || Err(Error::bpf("boom")));
    assert_eq!((r.status, r.content_type), (500, TEXT));
    assert!(r.body.contains("boom"), "{}", r.body);
    // The body is produced only for /metrics.
    assert_eq!(respond(&Method::Get, "/other", || panic!("must not collect")).status, 404);
    assert_eq!(respond(&Method::Put, "/metrics", || panic!("must not collect")).status, 405);
}

#[test]
fn http_server_end_to_end() {
    use std::{
        io::Read,
        net::{Shutdown, TcpStream},
    };
    // The server on an ephemeral port with pins that do not exist: loaded 0.
    let dir = std::env::temp_dir().join(format!("ebpf-masq-metrics-test-{}", std::process::id()));
    let pins = Pins::new(&dir);
    let server = bind("127.0.0.1:0").unwrap();
    let addr = server.server_addr().to_ip().unwrap();
    let t = std::thread::spawn(move || {
        // Requests tiny_http refuses itself (a bad request line) never come here.
        for req in server.incoming_requests().take(4) {
            handle(&pins, req).unwrap();
        }
    });
    let get = |req: &[u8]| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(req).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let r = get(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")), "{r}");
    let body = "# HELP ebpf_masq_data_plane_loaded 1 when the ebpf-masq programs are pinned under the pin path.\n\
                # TYPE ebpf_masq_data_plane_loaded gauge\nebpf_masq_data_plane_loaded 0\n";
    assert!(r.contains(&format!("Content-Length: {}\r\n", body.len())), "{r}");
    assert!(r.ends_with(&format!("\r\n\r\n{body}")), "{r}");
    let r = get(b"HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n"), "{r}");
    assert!(get(b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 404 "));
    assert!(get(b"GET\r\n\r\n").starts_with("HTTP/1.1 400 "));
    let r = get(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405 ") && r.contains("Allow: GET, HEAD\r\n"), "{r}");
    t.join().unwrap();
}
