//! The Grafana dashboard and the ServiceMonitor against what `metrics` exposes: every
//! query's metrics, labels, legends and variables (a small PromQL reader).

use super::tests::*;
use super::*;
use std::collections::{HashMap, HashSet};

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
