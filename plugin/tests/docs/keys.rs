//! Config keys, the README's config table, memory figures and keys users set (see main.rs).

use super::*;

/// lowerCamelCase names the docs quote that are not ours, and whose they are.
pub(crate) const FOREIGN: &[(&str, &str)] = &[
    ("ipMasq", "the bridge and ptp plugins' own masquerade"),
    ("subPath", "a Kubernetes volume mount"),
    ("maxUnavailable", "a Kubernetes DaemonSet's rolling update"),
    ("automountServiceAccountToken", "a Kubernetes pod spec"),
    ("serviceMonitorSelector", "Prometheus Operator"),
    ("bpfEnabled", "Calico's FelixConfiguration"),
    ("natOutgoingAddress", "Calico's FelixConfiguration"),
    ("natOutgoingExclusions", "Calico's FelixConfiguration"),
    ("natPortRange", "Calico's FelixConfiguration"),
    ("iptablesNATOutgoingInterfaceFilter", "Calico's FelixConfiguration"),
    ("makeNATOutgoingRuleIPTables", "Calico's Felix, a Go function"),
    ("vethPrefix", "AWS VPC CNI"),
    ("buildIptablesSNATRules", "AWS VPC CNI, a Go function"),
    ("parseCIDRString", "AWS VPC CNI, a Go function"),
    ("typeOfSNAT", "AWS VPC CNI, a Go function"),
    ("enableIPv4Masquerade", "Cilium's Helm values"),
    ("enableIPv6Masquerade", "Cilium's Helm values"),
    ("ipv4NativeRoutingCIDR", "Cilium's Helm values"),
    ("ipv6NativeRoutingCIDR", "Cilium's Helm values"),
];

/// Every key of every table the parser checks a key against.
pub(crate) fn known_keys() -> BTreeSet<&'static str> {
    [STANDARD_KEYS, MASQ_KEYS, TIMEOUT_KEYS, RULE_KEYS, POLICY_KEYS, IP_MASQ_AGENT_ENTRY_KEYS, IP_MASQ_AGENT_KEYS, NATLOG_KEYS]
        .concat()
        .into_iter()
        .chain([CAP_PORT_MAPPINGS])
        .collect()
}

/// The key a backticked span names, if it names one (see the rules above).
pub(crate) fn key_in_span(span: &str) -> Option<&str> {
    let span = span.trim();
    let (name, rest) = match span.strip_prefix("--set ") {
        Some(set) => (set.split('=').next().unwrap(), "="),
        None => {
            let s = span.strip_prefix('"').unwrap_or(span);
            let end = s.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(s.len());
            (&s[..end], s[end..].strip_prefix('"').unwrap_or(&s[end..]).trim_start())
        }
    };
    let camel = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
        && name.chars().any(|c| c.is_ascii_uppercase());
    (camel && (rest.is_empty() || rest.starts_with([':', '=']))).then_some(name)
}

/// The drifts `doc` shows, and how many keys and entries it checked.
pub(crate) fn check_keys(doc: &Doc) -> (Vec<String>, usize) {
    let known = known_keys();
    let (mut bad, mut seen) = (Vec::new(), 0);
    for (n, span) in doc.spans() {
        if let Some(k) = key_in_span(&span) {
            seen += 1;
            if !known.contains(k) && !FOREIGN.iter().any(|(f, _)| *f == k) {
                bad.push(format!("{}:{n}: `{span}`: the parser knows no key {k}", doc.rel));
            }
        }
    }
    let lines: Vec<&str> = doc.text.lines().collect();
    let mut n = 0;
    while n < lines.len() {
        let info = lines[n].trim_start().strip_prefix("```").map(str::trim);
        let end = (n + 1..lines.len()).find(|&j| lines[j].trim_start().starts_with("```")).unwrap_or(lines.len());
        if info == Some("json") {
            let body = lines[n + 1..end].join("\n");
            match serde_json::from_str::<serde_json::Value>(&body) {
                Err(e) => bad.push(format!("{}:{}: the JSON example does not parse: {e}", doc.rel, n + 1)),
                Ok(v) => {
                    for entry in entries(&v) {
                        seen += 1;
                        if let Err(e) = config::parse_netconf(entry.to_string().as_bytes()) {
                            bad.push(format!("{}:{}: the ebpf-masq entry is refused: {e}", doc.rel, n + 1));
                        }
                    }
                }
            }
        }
        n = if info.is_some() { end + 1 } else { n + 1 };
    }
    (bad, seen)
}

/// The ebpf-masq entries in a JSON example, with cniVersion and name as their conflist gives them.
pub(crate) fn entries(v: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    match v {
        serde_json::Value::Object(o) if o.get("type").and_then(|t| t.as_str()) == Some("ebpf-masq") => {
            let mut o = o.clone();
            o.entry("cniVersion").or_insert("1.0.0".into());
            o.entry("name").or_insert("docs".into());
            out.push(serde_json::Value::Object(o));
        }
        serde_json::Value::Object(o) => o.values().for_each(|v| out.extend(entries(v))),
        serde_json::Value::Array(a) => a.iter().for_each(|v| out.extend(entries(v))),
        _ => {}
    }
    out
}

pub(crate) fn check_config_table(readme: &Doc) -> Vec<String> {
    let section = readme.section("## Configuration");
    let mut rows = section.iter().map(|(_, l)| *l).skip_while(|l| !l.replace(' ', "").starts_with("|key|"));
    if rows.next().is_none() {
        return vec![
            "README.md: no config table (a table under ## Configuration whose first header cell is key)".into()
        ];
    }
    let in_table: BTreeSet<String> = (rows.skip(1).take_while(|l| l.starts_with('|')))
        .flat_map(|r| Doc::new("row", r.split('|').nth(1).unwrap_or("").to_string()).spans())
        .map(|(_, s)| s)
        .collect();
    let mut bad = Vec::new();
    for k in MASQ_KEYS.iter().filter(|k| !in_table.contains(**k)) {
        bad.push(format!("README.md: the config table has no row for the key {k}"));
    }
    for k in in_table.iter().filter(|k| !MASQ_KEYS.contains(&k.as_str())) {
        bad.push(format!("README.md: the config table names {k}, which is not one of our keys"));
    }
    for k in [TIMEOUT_KEYS, RULE_KEYS, POLICY_KEYS, IP_MASQ_AGENT_ENTRY_KEYS, NATLOG_KEYS].concat() {
        if !readme.text.contains(&format!("`{k}`")) && !readme.text.contains(&format!("\"{k}\"")) {
            bad.push(format!("README.md: the nested key {k} is not named (`{k}` or \"{k}\")"));
        }
    }
    bad
}

/// docs/nat.md's memory table against bpf::memory, and the default's figures in the manifest's notes.
pub(crate) fn check_memory(nat: &Doc, repo: &Repo) -> (Vec<String>, usize) {
    let (mut bad, mut seen) = (Vec::new(), 0);
    let num = |s: &str| -> Option<u64> { s.split_whitespace().next()?.replace(',', "").parse().ok() };
    let mut rows = nat.text.lines().map(str::trim).skip_while(|l| !l.replace(' ', "").starts_with("|`natMaxEntries`|upfront|"));
    if rows.next().is_none() {
        return (vec!["docs/nat.md: no memory table (| `natMaxEntries` | up front | ...)".into()], 0);
    }
    for row in rows.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let Some(n) = cells.first().and_then(|c| num(c)) else { continue };
        seen += 1;
        let m = NatMemory::new(n as u32);
        let want = [mib(m.up_front), mib(m.full_ipv4()), mib(m.full_dual_stack())];
        let got: Vec<Option<u64>> = cells[1..].iter().map(|c| num(c)).collect();
        if got != want.map(Some) {
            bad.push(format!("docs/nat.md: natMaxEntries {n}: the table says {:?} MiB, bpf::memory computes {want:?}", &cells[1..]));
        }
    }
    let d = NatMemory::new(1 << 20);
    let figures = [format!("{} MiB", mib(d.full_ipv4())), format!("{} MiB", mib(d.full_dual_stack()))];
    for f in ["conf/daemonset.yaml", "conf/README.md", "docs/nat.md"] {
        let text = fs::read_to_string(repo.root.join(f)).unwrap();
        for fig in &figures {
            seen += 1;
            if !text.contains(fig.as_str()) {
                bad.push(format!("{f}: does not state {fig} (the default natMaxEntries' full tables, bpf::memory)"));
            }
        }
    }
    (bad, seen)
}

/// README.md's config table: each user-set key accepts its default as the table writes it
/// (a JSON value); an agent-written key says that users do not set it.
pub(crate) fn check_user_keys(readme: &Doc) -> (Vec<String>, usize) {
    let (mut bad, mut seen) = (Vec::new(), 0);
    let section = readme.section("## Configuration");
    let rows = section.iter().map(|(_, l)| *l).skip_while(|l| !l.replace(' ', "").starts_with("|key|")).skip(2);
    for row in rows.take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let keys = Doc::new("row", cells[0].to_string()).spans();
        let [(_, key)] = keys.as_slice() else { continue };
        if key == "ipMasqAgent" {
            seen += 1;
            if !cells.get(2).is_some_and(|m| m.contains("not one to set") && m.contains("only `agent")) {
                bad.push(format!("README.md: {key} is written by the agent only, and its row must say so"));
            }
            continue;
        }
        let default = cells.get(1).copied().unwrap_or("");
        let Some(json) = default.strip_prefix('`').and_then(|d| d.strip_suffix('`')) else { continue };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else { continue };
        seen += 1;
        let entry = serde_json::json!({"cniVersion": "1.0.0", "name": "docs", "type": "ebpf-masq", key.as_str(): value});
        if let Err(e) = config::parse_netconf(entry.to_string().as_bytes()) {
            bad.push(format!("README.md: the config table's {key} = {json} is refused: {e}"));
        }
    }
    (bad, seen)
}
