use super::*;
use std::collections::{HashMap, HashSet};

/// A strict parser of the text exposition format 0.0.4, for what we emit:
/// every sample's family has a TYPE line before it, families are contiguous,
/// names and labels are well formed, no series appears twice, counters end
/// in `_total` and are non-negative integers. Returns name -> type and the series.
/// (metric name, labels in order, value) of every sample.
type Series = Vec<(String, Vec<(String, String)>, f64)>;

fn validate(text: &str) -> std::result::Result<(HashMap<String, String>, Series), String> {
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

fn rule(id: u32, oif: Option<&str>) -> RuleRow {
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

fn pod(id: &str, ifname: &str) -> PodRow {
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

fn k8s(p: PodRow) -> PodRow {
    PodRow { k8s_namespace: "team-a".into(), k8s_name: "web-1".into(), ..p }
}

fn policy(index: u32, name: &str, pods: &[&str]) -> PolicyRow {
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

fn snapshot() -> Snapshot {
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

fn value(series: &Series, name: &str, labels: &[(&str, &str)]) -> f64 {
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

/// A selector's matcher: (label, operator, value).
type Matcher = (String, String, String);

/// What one PromQL expression uses: each selector's metric and its matchers
/// (label, operator, value), and the labels it groups or matches by.
#[derive(Debug, Default)]
struct Uses {
    selectors: Vec<(String, Vec<Matcher>)>,
    grouping: Vec<String>,
    variables: Vec<String>,
}

/// The Grafana variables (`$name`, `${name}`) a piece of query text uses.
fn variables(s: &str) -> Vec<String> {
    s.split('$')
        .skip(1)
        .map(|v| v.trim_start_matches('{').chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '_').collect())
        .collect()
}

/// A small PromQL scanner, enough to check a dashboard's queries: every identifier
/// that is not a keyword, an aggregation or a function call is a metric name;
/// `{…}` after one holds its matchers; `by`/`without`/`on`/`ignoring`/`group_left`/
/// `group_right` `(…)` hold grouping labels; `[…]` ranges and strings are skipped.
/// A `{` with no metric name before it is refused (the check could not name its family).
fn promql_uses(expr: &str) -> std::result::Result<Uses, String> {
    const KEYWORDS: &[&str] = &[
        "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless",
        "atan2", "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
        "quantile", "limitk", "limit_ratio", "inf", "nan",
    ];
    const GROUPING: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
    let b: Vec<char> = expr.chars().collect();
    let is_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let is_part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_whitespace() {
            *i += 1;
        }
    };
    let ident = |i: &mut usize| -> String {
        let start = *i;
        if *i < b.len() && is_start(b[*i]) {
            *i += 1;
            while *i < b.len() && is_part(b[*i]) {
                *i += 1;
            }
        }
        b[start..*i].iter().collect()
    };
    let string = |i: &mut usize| -> std::result::Result<String, String> {
        let q = b[*i];
        let mut out = String::new();
        *i += 1;
        while *i < b.len() && b[*i] != q {
            if b[*i] == '\\' && q != '`' {
                *i += 1;
            }
            out.extend(b.get(*i));
            *i += 1;
        }
        if *i >= b.len() {
            return Err(format!("unterminated string in {expr:?}"));
        }
        *i += 1;
        Ok(out)
    };
    let mut u = Uses::default();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '"' || c == '\'' || c == '`' {
            string(&mut i)?;
        } else if c == '[' {
            // A range or subquery: durations and $__rate_interval, no labels.
            let end = b[i..].iter().position(|&c| c == ']').ok_or_else(|| format!("unterminated [ in {expr:?}"))?;
            u.variables.extend(variables(&b[i..i + end].iter().collect::<String>()));
            i += end + 1;
        } else if c == '{' {
            return Err(format!("a selector with no metric name in {expr:?}"));
        } else if c == '$' {
            i += 1;
            i += usize::from(b.get(i) == Some(&'{'));
            let v = ident(&mut i);
            u.variables.push(v);
        } else if c.is_ascii_digit() || c == '.' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.') {
                i += 1;
            }
        } else if is_start(c) {
            let name = ident(&mut i);
            skip_ws(&mut i);
            let next = b.get(i).copied();
            if GROUPING.contains(&name.as_str()) && next == Some('(') {
                i += 1;
                loop {
                    skip_ws(&mut i);
                    match b.get(i) {
                        Some(')') => {
                            i += 1;
                            break;
                        }
                        Some(',') => i += 1,
                        Some(_) => {
                            let l = ident(&mut i);
                            if l.is_empty() {
                                return Err(format!("bad grouping label list in {expr:?}"));
                            }
                            u.grouping.push(l);
                        }
                        None => return Err(format!("unterminated grouping in {expr:?}")),
                    }
                }
            } else if KEYWORDS.contains(&name.to_ascii_lowercase().as_str()) || next == Some('(') {
                // An operator, an aggregation or a function call.
            } else {
                let mut matchers = Vec::new();
                if next == Some('{') {
                    i += 1;
                    loop {
                        skip_ws(&mut i);
                        match b.get(i) {
                            Some('}') => {
                                i += 1;
                                break;
                            }
                            Some(',') => i += 1,
                            Some(_) => {
                                let label = ident(&mut i);
                                skip_ws(&mut i);
                                let op: String = ["=~", "!~", "!=", "="]
                                    .into_iter()
                                    .find(|op| b[i..].iter().take(op.len()).copied().eq(op.chars()))
                                    .ok_or_else(|| format!("bad matcher after {label:?} in {expr:?}"))?
                                    .into();
                                i += op.len();
                                skip_ws(&mut i);
                                if label.is_empty() || !matches!(b.get(i), Some('"' | '\'' | '`')) {
                                    return Err(format!("bad matcher {label:?} in {expr:?}"));
                                }
                                let value = string(&mut i)?;
                                u.variables.extend(variables(&value));
                                matchers.push((label, op, value));
                            }
                            None => return Err(format!("unterminated selector in {expr:?}")),
                        }
                    }
                }
                u.selectors.push((name, matchers));
            }
        } else {
            i += 1;
        }
    }
    Ok(u)
}

#[test]
fn promql_scanner_sees_metrics_matchers_and_grouping() {
    let u = promql_uses(
        "sum by (instance, reason) (rate(ebpf_masq_drops_total{instance=~\"$instance\", reason=\"no_port\"}[$__rate_interval])) \
         / on(instance) group_left() sum without (family) (ebpf_masq_nat_entries) > 0",
    )
    .unwrap();
    assert_eq!(
        u.selectors,
        vec![
            (
                "ebpf_masq_drops_total".to_string(),
                vec![
                    ("instance".into(), "=~".into(), "$instance".into()),
                    ("reason".into(), "=".into(), "no_port".into())
                ]
            ),
            ("ebpf_masq_nat_entries".to_string(), vec![]),
        ]
    );
    assert_eq!(u.grouping, ["instance", "reason", "instance", "family"]);
    assert_eq!(u.variables, ["instance", "__rate_interval"]);
    assert!(promql_uses("sum({__name__=~\"ebpf_masq_.*\"})").is_err());
    assert!(promql_uses("up{job=\"x\"").is_err());
}

/// Every family the dashboard may query with its label names and label values: the
/// node's exposition rendered from the fixture snapshot (every counter and drop reason,
/// rules, pods and policies present), plus the agent's own series, which agent.rs writes
/// by hand (read from its source: `# TYPE name kind`, no labels).
fn exposed_families() -> HashMap<String, HashMap<String, HashSet<String>>> {
    let text = render(&snapshot());
    let (types, series) = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut fams: HashMap<String, HashMap<String, HashSet<String>>> = types.keys().map(|n| (n.clone(), HashMap::new())).collect();
    for (name, labels, _) in series {
        let f = fams.get_mut(&name).unwrap();
        for (l, v) in labels {
            f.entry(l).or_default().insert(v);
        }
    }
    let agent = include_str!("../agent.rs");
    let mut agent_fams = 0;
    for rest in agent.split("# TYPE ").skip(1) {
        let name: String = rest.chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '_').collect();
        if name.starts_with("ebpf_masq_agent_") {
            // Its sample line follows with no labels.
            assert!(rest.contains(&format!("\\n{name} {{")), "agent.rs writes {name} with labels: update this test");
            fams.insert(name, HashMap::new());
            agent_fams += 1;
        }
    }
    assert!(agent_fams >= 1 && fams.contains_key("ebpf_masq_agent_config_valid"), "no agent series found in agent.rs");
    fams
}

/// Labels Prometheus adds at scrape time: not in the exposition, always on the series.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// The labels the ServiceMonitor (`manifest --service-monitor`) adds by relabeling:
/// every `targetLabel` of its endpoints, read from the manifest's source.
fn service_monitor_labels() -> Vec<String> {
    let src = include_str!("../manifest/objects.rs");
    let labels: Vec<String> = src
        .split("\"targetLabel\":")
        .skip(1)
        .map(|rest| rest.trim_start().trim_start_matches('"').chars().take_while(|&c| c != '"').collect())
        .collect();
    assert!(!labels.is_empty(), "no relabeling targetLabel in manifest/objects.rs: update this test");
    labels
}

#[test]
fn the_service_monitor_adds_a_node_label() {
    assert_eq!(service_monitor_labels(), ["node"]);
}

#[test]
fn grafana_dashboard_queries_only_what_is_exposed() {
    let raw = include_str!("../../../../conf/grafana-dashboard.json");
    let dash: serde_json::Value = serde_json::from_str(raw).expect("conf/grafana-dashboard.json parses");
    let fams = exposed_families();
    // Scrape-time labels: Prometheus's own and the ServiceMonitor's relabelings.
    let relabeled = service_monitor_labels();
    let scrape: Vec<&str> = TARGET_LABELS.iter().copied().chain(relabeled.iter().map(String::as_str)).collect();

    // The variables: a Prometheus datasource, a node (instance) picker; any other query variable.
    let vars = dash["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| vars.iter().find(|v| v["name"] == name);
    let ds = var("datasource").expect("a datasource variable");
    assert_eq!((ds["type"].as_str(), ds["query"].as_str()), (Some("datasource"), Some("prometheus")));
    // The node picker selects by the label the ServiceMonitor adds (`node`); an
    // instance picker narrows it, and serves a plain scrape that has no `node` label.
    for (name, label) in [("node", "node"), ("instance", "instance")] {
        let v = var(name).unwrap_or_else(|| panic!("a {name} variable"));
        assert_eq!(v["type"], "query", "variable {name}");
        let q = v["query"].as_str().unwrap_or_default();
        assert!(q.starts_with("label_values(ebpf_masq_data_plane_loaded") && q.ends_with(&format!(", {label})")), "variable {name}: {q}");
        // All must match series without the label too (a plain scrape has no `node`).
        assert_eq!((v["includeAll"].as_bool(), v["allValue"].as_str()), (Some(true), Some(".*")), "variable {name}");
    }
    assert!(relabeled.iter().any(|l| l == "node"), "the dashboard's node variable needs the ServiceMonitor's node label");
    let mut names: HashSet<String> = vars.iter().map(|v| v["name"].as_str().expect("a variable's name").to_string()).collect();
    names.extend(["__rate_interval", "__interval", "__range"].map(String::from));

    // Every query: its expression with its legend (None for a variable's).
    let mut queries: Vec<(String, String, Option<String>)> = Vec::new();
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["query"].as_str().or_else(|| v["query"]["query"].as_str()).expect("a query variable's query");
        let (sel, label) = q
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
            .unwrap_or_else(|| panic!("variable {}: only label_values(selector, label) is checked: {q:?}", v["name"]));
        assert_eq!(v["datasource"]["uid"], "${datasource}", "variable {}", v["name"]);
        queries.push((format!("variable {}", v["name"]), format!("group by ({}) ({sel})", label.trim()), None));
    }

    // The panels, rows' nested panels included: the structure Grafana needs to import them.
    let mut panels: Vec<&serde_json::Value> = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        panels.push(p);
        panels.extend(p["panels"].as_array().into_iter().flatten());
    }
    assert!(panels.len() > 10, "{} panels", panels.len());
    let mut ids = HashSet::new();
    for p in &panels {
        let title = p["title"].as_str().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("a panel without a title: {p}"));
        let kind = p["type"].as_str().unwrap_or_else(|| panic!("{title}: no type"));
        let id = p["id"].as_u64().unwrap_or_else(|| panic!("{title}: no id"));
        assert!(ids.insert(id), "{title}: id {id} is not unique");
        let g = &p["gridPos"];
        let [h, w, x, _y] = ["h", "w", "x", "y"].map(|k| g[k].as_u64().unwrap_or_else(|| panic!("{title}: gridPos.{k}")));
        assert!(h > 0 && w > 0 && x + w <= 24, "{title}: gridPos {g}");
        if kind == "row" {
            continue;
        }
        let targets = p["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: no targets"));
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("{title}: a target without expr"));
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}: {expr}");
            queries.push((title.to_string(), expr.to_string(), t["legendFormat"].as_str().map(String::from)));
        }
    }

    let mut used = HashSet::new();
    for (title, expr, legend) in &queries {
        let u = promql_uses(expr).unwrap_or_else(|e| panic!("{title}: {e}"));
        assert!(!u.selectors.is_empty(), "{title}: {expr} queries no metric");
        for v in &u.variables {
            assert!(names.contains(v), "{title}: ${v} is not a dashboard variable: {expr}");
        }
        let has = |metric: &str, label: &str| scrape.contains(&label) || fams[metric].contains_key(label);
        for (metric, matchers) in &u.selectors {
            assert!(metric.starts_with("ebpf_masq_"), "{title}: {metric} is not ebpf-masq's: {expr}");
            let labels = fams.get(metric).unwrap_or_else(|| {
                let mut known: Vec<_> = fams.keys().collect();
                known.sort();
                panic!("{title}: {metric} is not in the exposition: {expr}\nfamilies: {known:?}")
            });
            used.insert(metric.clone());
            // Every panel's series are the picked nodes' (variables' own queries may narrow less).
            if legend.is_some() {
                for (label, var) in [("node", "$node"), ("instance", "$instance")] {
                    assert!(
                        matchers.iter().any(|(l, op, v)| l == label && op == "=~" && v == var),
                        "{title}: {metric} is not selected by {label}=~\"{var}\": {expr}"
                    );
                }
            }
            for (label, op, value) in matchers {
                assert!(has(metric, label), "{title}: {metric} has no label {label:?}: {expr}");
                if op == "=" && !value.contains('$') && !scrape.contains(&label.as_str()) {
                    assert!(labels[label].contains(value), "{title}: {metric} never has {label}={value:?}: {:?}", labels[label]);
                }
            }
        }
        for label in &u.grouping {
            for (metric, _) in &u.selectors {
                assert!(has(metric, label), "{title}: groups by {label:?}, which {metric} has not: {expr}");
            }
        }
        let mut legend = legend.as_deref().unwrap_or("");
        while let Some((_, rest)) = legend.split_once("{{") {
            let (label, rest) = rest.split_once("}}").unwrap_or_else(|| panic!("{title}: legend {legend:?}"));
            let label = label.trim();
            for (metric, _) in &u.selectors {
                assert!(has(metric, label), "{title}: legend shows {label:?}, which {metric} has not: {expr}");
            }
            legend = rest;
        }
    }
    // What an on-call needs at a glance, by family.
    for must in [
        "ebpf_masq_events_lost_total",
        "ebpf_masq_natlog_exporting",
        "ebpf_masq_natlog_records_total",
        "ebpf_masq_natlog_ipfix_unsent_total",
        "ebpf_masq_agent_natlog_configured",
        "ebpf_masq_pod_port_refusals_total",
        "ebpf_masq_translated_packets_total",
        "ebpf_masq_translated_bytes_total",
        "ebpf_masq_nat_pairs_created_total",
        "ebpf_masq_nat_entries",
        "ebpf_masq_nat_entries_limit",
        "ebpf_masq_port_allocation_failures_total",
        "ebpf_masq_port_probes_total",
        "ebpf_masq_drops_total",
        "ebpf_masq_nat_pairs_reclaimed_total",
        "ebpf_masq_nat_pairs_finished_reused_total",
        "ebpf_masq_nat_pairs_unanswered_reused_total",
        "ebpf_masq_egress_policy_packets_total",
        "ebpf_masq_egress_policy_bytes_total",
        "ebpf_masq_egress_policy_flows_total",
        "ebpf_masq_nat_expiry_sweeps_total",
        "ebpf_masq_agent_config_valid",
    ] {
        assert!(used.contains(must), "the dashboard does not show {must}");
    }
    // The per-pod panels name pods by namespace and pod, not only by container ID.
    for (title, expr, legend) in queries.iter().filter(|(_, e, l)| e.contains("ebpf_masq_pod_") && l.is_some()) {
        let legend = legend.as_deref().unwrap_or_default();
        assert!(legend.contains("{{namespace}}/{{pod}}"), "{title}: legend {legend:?} does not name the pod: {expr}");
    }
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
