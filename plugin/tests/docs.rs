//! The docs cannot drift from the tree, the layout or the parser (as
//! rust-lang/rust's tidy does the same for its own docs). Every Markdown file of
//! the repository (hidden folders but `.ci/`, and `target/`, aside) is read,
//! except CHANGELOG.md (history: it says what was true then). Fenced code blocks
//! are read too, for paths, file names, "layout N" and `<pinPath>/vN`; links
//! and backticked spans are read outside them only (reference-style links
//! `[x]: path` are not read: the docs use inline ones).
//!
//! **Files.** (1) A repository path is a word that begins with one of our
//! top-level folders (`plugin/`, `bpf/`, `scripts/`, `integration/`, `conf/`,
//! `docs/`, `.ci/`) with none of `A-Za-z0-9_-./~` just before it (so
//! `/sys/fs/bpf/...`, `../docs/x` and URLs are not), and runs over
//! `A-Za-z0-9_-./*<>{}`; a trailing `.` is punctuation. It must exist. A `*` is
//! a glob within one segment and must match at least one file; a path with `<`,
//! `>`, `{` or `}` is a placeholder (`scripts/<name>.sh`) and is skipped.
//! (2) A bare file name of ours, a word `name.rs`, `.py`, `.h`, `.c` or `.sh`
//! with none of `A-Za-z0-9_-./*` just before it, must be the name of some file in
//! the repository. Another project's file is written with its own path
//! (`net/netfilter/nf_nat_core.c`), which neither rule reads. (3) A Markdown
//! link target that is not a URL is a path from the doc's folder and must exist;
//! its `#anchor` must be a heading of the target (GitHub's slug: lower case,
//! letters, digits, `-` and `_` kept, spaces to `-`, the rest dropped).
//!
//! **Layout versions.** A layout version is written "layout N" (also "layouts",
//! "layout vN", "layout-N", "layout version N", any case) or as the pin
//! directory `vN/`: a backticked `vN` or `vN/`, or `vN` right after `<pinPath>/`
//! or `ebpf-masq/`. N must be `LAYOUT_VERSION`. An older N is history, allowed
//! in two places only: docs/upgrade.md's "## Layout history" section (no N
//! there above `LAYOUT_VERSION`, and its table's first row must be
//! `LAYOUT_VERSION`: a new layout gets a row) and the exact phrases of `HISTORY`.
//! Other wordings ("version 16 of the layout") are not read: the docs use these.
//!
//! **Config keys.** (1) A backticked lowerCamelCase name (`natOutgoing`: a
//! lower-case letter, then letters and digits with at least one capital), alone,
//! quoted, followed by `:` or `=` and a value (`natOutgoing: false`,
//! `"fastPath": true`), or after `--set ` (`--set fastPath=true`), names a key:
//! it must be in one of the parser's key tables (`known_keys`), or in `FOREIGN`,
//! another program's name the docs compare us with. Lower-case one-word keys
//! (`source`, `tcp`) cannot be told from words and are checked in JSON only.
//! Backticks in fenced blocks are not read. (2) Every ```` ```json ```` block
//! must parse, and every object in it with `"type": "ebpf-masq"` must pass
//! `config::parse_netconf` (with `cniVersion` and `name` added when the example
//! leaves them to its conflist): every key at every level known, every value
//! valid. (3) README.md's config table (under "## Configuration", first header
//! cell `key`) names in its first column exactly `MASQ_KEYS`, and each nested key
//! (`natTimeouts`, a rule, an egress policy, `ipMasqAgent`) appears in README.md
//! backticked or as a JSON key.
//!
//! **Code names.** docs/design.md's words table names only code that exists
//! (`check_words`: which backticked spans are code names, and that a word that reads
//! as code is backticked), and its code map names only files and folders that exist
//! and every source file of `MAPPED` (`check_map`: how the map is read).
//!
//! **Test files.** docs/testing.md's table has a row for every
//! `plugin/tests/*.rs`, every module of a test binary kept in a folder
//! (`plugin/tests/*/*.rs`; not its `support/`) and `integration/test_*.py`.
//!
//! **For users, not a diary.** No heading names a work session, round or issue
//! ("Session 8", "Round 3", "issue 26"), and no line names a session or one of
//! our issues ("session 13", "issue 7"; another project's issue, `owner/repo
//! issue N`, is a reference). **Ports.** An example command of ebpf-masq other
//! than `agent` and `manifest` (in a fence or backticks) never listens on the
//! agent's default metrics port (`manifest --metrics-port`): on a DaemonSet
//! node the agent holds it. **Memory.** docs/nat.md's memory table (first header
//! cell `natMaxEntries`, then `up front`) gives for each size what
//! `bpf::memory::NatMemory` computes, and conf/daemonset.yaml and conf/README.md
//! state the default's full-table figures. **Keys users set.** Each row of
//! README.md's config table whose default is a JSON value is accepted by the
//! parser with that value; the keys only the agent writes
//! (`IP_MASQ_AGENT_ENTRY_KEYS`' parent, `ipMasqAgent`) say so in their row.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use clap::Args;
use ebpf_masq::bpf::abi::LAYOUT_VERSION;
use ebpf_masq::bpf::memory::{mib, NatMemory};
use ebpf_masq::cli::manifest::ManifestArgs;
use ebpf_masq::config::{
    self, CAP_PORT_MAPPINGS, IP_MASQ_AGENT_ENTRY_KEYS, IP_MASQ_AGENT_KEYS, MASQ_KEYS, NATLOG_KEYS, POLICY_KEYS, RULE_KEYS,
    STANDARD_KEYS, TIMEOUT_KEYS,
};

const TOP_FOLDERS: &[&str] = &["plugin/", "bpf/", "scripts/", "integration/", "conf/", "docs/", ".ci/"];
const SOURCE_EXTENSIONS: &[&str] = &["rs", "py", "h", "c", "sh"];

/// Older layouts named outside docs/upgrade.md's history, each an exact phrase.
const HISTORY: &[(&str, &str)] = &[
    // The commit to build to test an upgrade against a real older release.
    ("integration/README.md", "the last of layout 7"),
];

/// lowerCamelCase names the docs quote that are not ours, and whose they are.
const FOREIGN: &[(&str, &str)] = &[
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
fn known_keys() -> BTreeSet<&'static str> {
    [STANDARD_KEYS, MASQ_KEYS, TIMEOUT_KEYS, RULE_KEYS, POLICY_KEYS, IP_MASQ_AGENT_ENTRY_KEYS, IP_MASQ_AGENT_KEYS, NATLOG_KEYS]
        .concat()
        .into_iter()
        .chain([CAP_PORT_MAPPINGS])
        .collect()
}

/// The repository: its root and every file in it, as a path from the root.
struct Repo {
    root: PathBuf,
    files: BTreeSet<String>,
}

impl Repo {
    fn read() -> Repo {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        let mut files = BTreeSet::new();
        let mut todo = vec![String::new()];
        while let Some(dir) = todo.pop() {
            for e in fs::read_dir(root.join(&dir)).unwrap() {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                let rel = format!("{dir}{name}");
                if e.file_type().unwrap().is_dir() {
                    // Not .git, .pytest_cache (which holds a README.md) or a build.
                    let skip = (name.starts_with('.') && name != ".ci") || (dir.is_empty() && name == "target");
                    if !skip {
                        todo.push(format!("{rel}/"));
                    }
                } else {
                    files.insert(rel);
                }
            }
        }
        Repo { root, files }
    }

    fn exists(&self, rel: &str) -> bool {
        self.root.join(rel).exists()
    }

    /// Whether a file matches `pattern`, whose `*` stands for any run within a segment.
    fn glob_matches(&self, pattern: &str) -> bool {
        let pat: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
        self.files.iter().any(|f| {
            let segs: Vec<&str> = f.split('/').collect();
            segs.len() >= pat.len() && pat.iter().zip(&segs).all(|(p, s)| wildcard(p, s))
        })
    }

    fn has_file_named(&self, name: &str) -> bool {
        self.files.iter().any(|f| f.rsplit('/').next() == Some(name))
    }

    fn docs(&self) -> Vec<Doc> {
        let docs: Vec<Doc> = (self.files.iter())
            .filter(|f| f.ends_with(".md") && *f != "CHANGELOG.md")
            .map(|f| Doc::new(f, fs::read_to_string(self.root.join(f)).unwrap()))
            .collect();
        assert!(docs.iter().any(|d| d.rel == "README.md") && docs.len() >= 10, "the docs were not found");
        docs
    }
}

fn wildcard(pat: &str, s: &str) -> bool {
    match pat.split_once('*') {
        None => pat == s,
        Some((head, rest)) => {
            s.starts_with(head) && (head.len()..=s.len()).any(|i| s.is_char_boundary(i) && wildcard(rest, &s[i..]))
        }
    }
}

/// One Markdown file: its path from the root, its lines, and which are inside a fence.
struct Doc {
    rel: String,
    text: String,
    fenced: Vec<bool>,
}

impl Doc {
    fn new(rel: &str, text: String) -> Doc {
        let mut inside = false;
        let fenced = (text.lines())
            .map(|l| {
                let fence = l.trim_start().starts_with("```");
                let was = inside;
                inside ^= fence;
                was || fence
            })
            .collect();
        Doc { rel: rel.to_string(), text, fenced }
    }

    fn lines(&self) -> impl Iterator<Item = (usize, &str, bool)> {
        self.text.lines().zip(&self.fenced).enumerate().map(|(i, (l, f))| (i + 1, l, *f))
    }

    /// Backticked spans outside fences, with their line: the spans of each paragraph.
    fn spans(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut para: Vec<(usize, &str)> = Vec::new();
        for (n, line, fenced) in self.lines().chain([(0, "", false)]) {
            if !fenced && !line.trim().is_empty() {
                para.push((n, line));
                continue;
            }
            let chars: Vec<(usize, char)> =
                para.iter().flat_map(|(n, l)| l.chars().chain(['\n']).map(move |c| (*n, c))).collect();
            let run = |i: usize| chars[i..].iter().take_while(|(_, c)| *c == '`').count();
            let mut i = 0;
            while i < chars.len() {
                let k = run(i);
                if k == 0 {
                    i += 1;
                    continue;
                }
                let close = (i + k..chars.len()).find(|&j| run(j) == k && (j == 0 || chars[j - 1].1 != '`'));
                match close {
                    Some(j) => {
                        out.push((chars[i].0, chars[i + k..j].iter().map(|(_, c)| c).collect::<String>()));
                        i = j + k;
                    }
                    None => i += k,
                }
            }
            para.clear();
        }
        out
    }

    /// The lines of the section under `heading` (up to the next heading of its level or higher).
    fn section(&self, heading: &str) -> Vec<(usize, &str)> {
        let level = heading.split(' ').next().unwrap().len();
        let ends = |l: &str| {
            let hashes = l.chars().take_while(|&c| c == '#').count();
            hashes > 0 && hashes <= level && l[hashes..].starts_with(' ')
        };
        let mut out = Vec::new();
        let mut inside = false;
        for (n, line, fenced) in self.lines() {
            if !fenced && line.trim_end() == heading {
                inside = true;
            } else if inside && !fenced && ends(line) {
                break;
            } else if inside {
                out.push((n, line));
            }
        }
        out
    }

    fn anchors(&self) -> BTreeSet<String> {
        (self.lines())
            .filter(|(_, l, fenced)| !fenced && l.starts_with('#'))
            .map(|(_, l, _)| slug(l.trim_start_matches('#')))
            .collect()
    }
}

fn slug(heading: &str) -> String {
    (heading.trim().to_lowercase().chars())
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The runs of `body` characters in `line` that no word character and none of
/// `before` comes just before: (byte offset, word).
fn words<'a>(line: &'a str, before: &str, body: impl Fn(char) -> bool) -> Vec<(usize, &'a str)> {
    let mut out = Vec::new();
    let mut prev: Option<char> = None;
    let mut i = 0;
    while i < line.len() {
        let c = line[i..].chars().next().unwrap();
        let free = prev.is_none_or(|p| !(is_word(p) || before.contains(p)));
        if free && body(c) {
            let end = line[i..].find(|c: char| !body(c)).map_or(line.len(), |e| i + e);
            out.push((i, &line[i..end]));
            prev = line[..end].chars().next_back();
            i = end;
        } else {
            prev = Some(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The drifts `doc` shows, and how many names it checked.
fn check_files(doc: &Doc, repo: &Repo) -> (Vec<String>, usize) {
    let (mut bad, mut seen) = (Vec::new(), 0);
    let at = |n: usize| format!("{}:{n}", doc.rel);
    for (n, line, fenced) in doc.lines() {
        let path_char = |c: char| is_word(c) || "./*<>{}".contains(c);
        for (_, w) in words(line, "./~", path_char) {
            let w = w.trim_end_matches('.');
            if !TOP_FOLDERS.iter().any(|t| w.starts_with(t)) || w.contains(['<', '>', '{', '}']) {
                continue;
            }
            seen += 1;
            let found = if w.contains('*') { repo.glob_matches(w) } else { repo.exists(w) };
            if !found {
                let what = if w.contains('*') { "matches no file" } else { "does not exist" };
                bad.push(format!("{}: `{w}` {what}", at(n)));
            }
        }
        for (_, w) in words(line, "./*", |c| is_word(c) || c == '.') {
            let w = w.trim_end_matches('.');
            let ours =
                w.rsplit_once('.').is_some_and(|(stem, ext)| !stem.is_empty() && SOURCE_EXTENSIONS.contains(&ext));
            seen += usize::from(ours);
            if ours && !repo.has_file_named(w) {
                bad.push(format!("{}: no file is named {w}", at(n)));
            }
        }
        let mut rest = if fenced { "" } else { line };
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let target = &rest[..rest.find(')').unwrap_or(rest.len())];
            if target.contains(':') || target.contains(' ') {
                continue; // a URL, or not a link
            }
            seen += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let rel = normalize(&Path::new(&doc.rel).parent().unwrap().join(file));
            let heads = if file.is_empty() {
                doc.anchors()
            } else if repo.exists(&rel) {
                Doc::new(&rel, fs::read_to_string(repo.root.join(&rel)).unwrap_or_default()).anchors()
            } else {
                bad.push(format!("{}: link {target}: {rel} does not exist", at(n)));
                continue;
            };
            if !anchor.is_empty() && !heads.contains(anchor) {
                bad.push(format!("{}: link {target}: no heading #{anchor} there", at(n)));
            }
        }
    }
    (bad, seen)
}

/// `docs/../integration/README.md` -> `integration/README.md`.
fn normalize(p: &Path) -> String {
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c.as_os_str().to_str().unwrap() {
            "." => {}
            ".." => drop(out.pop()),
            s => out.push(s.to_string()),
        }
    }
    out.join("/")
}

/// Every layout version `doc` names: (line, byte offset in the line, N).
fn layout_mentions(doc: &Doc) -> Vec<(usize, usize, u32)> {
    let mut out = Vec::new();
    let number = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u32>().ok();
    for (n, line, _) in doc.lines() {
        let lower = line.to_ascii_lowercase();
        for (i, w) in words(&lower, "", |c| c.is_ascii_alphabetic()) {
            if w != "layout" && w != "layouts" {
                continue;
            }
            let rest = &lower[i + w.len()..];
            let Some(rest) = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('-')) else { continue };
            let rest = rest.strip_prefix("version ").or_else(|| rest.strip_prefix('v')).unwrap_or(rest);
            let after = rest.trim_start_matches(|c: char| c.is_ascii_digit());
            if let Some(v) = number(rest).filter(|_| !after.starts_with(|c: char| c.is_ascii_alphanumeric())) {
                out.push((n, i, v));
            }
        }
        for pin in ["<pinPath>/v", "ebpf-masq/v"] {
            for (i, _) in line.match_indices(pin) {
                if let Some(v) = number(&line[i + pin.len()..]) {
                    out.push((n, i, v));
                }
            }
        }
    }
    for (n, span) in doc.spans() {
        let dir = span.strip_prefix('v').map(|s| s.strip_suffix('/').unwrap_or(s));
        if let Some(v) = dir.filter(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())) {
            out.push((n, usize::MAX, v.parse().unwrap()));
        }
    }
    out
}

fn check_layouts(doc: &Doc) -> Vec<String> {
    let mut bad = Vec::new();
    let history: Vec<usize> = if doc.rel == "docs/upgrade.md" {
        doc.section("## Layout history").iter().map(|(n, _)| *n).collect()
    } else {
        Vec::new()
    };
    let lines: Vec<&str> = doc.text.lines().collect();
    for (n, at, v) in layout_mentions(doc) {
        let line = lines[n - 1];
        let phrase = HISTORY.iter().any(|(file, p)| {
            *file == doc.rel && line.match_indices(p).any(|(i, _)| at != usize::MAX && (i..i + p.len()).contains(&at))
        });
        let historic = history.contains(&n) || phrase;
        if v != LAYOUT_VERSION && !(historic && v < LAYOUT_VERSION) {
            bad.push(format!("{}:{n}: layout {v}, but LAYOUT_VERSION is {LAYOUT_VERSION}: {}", doc.rel, line.trim()));
        }
    }
    if doc.rel == "docs/upgrade.md" {
        let section = doc.section("## Layout history");
        let first_row = section.iter().map(|(_, l)| *l).filter(|l| l.starts_with('|')).nth(2);
        let cell = first_row.and_then(|r| r.split('|').nth(1)).map(str::trim);
        if cell != Some(LAYOUT_VERSION.to_string().as_str()) {
            bad.push(format!(
                "docs/upgrade.md: the layout history's first row is {cell:?}, not LAYOUT_VERSION {LAYOUT_VERSION}"
            ));
        }
    }
    bad
}

/// The key a backticked span names, if it names one (see the rules above).
fn key_in_span(span: &str) -> Option<&str> {
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
fn check_keys(doc: &Doc) -> (Vec<String>, usize) {
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
fn entries(v: &serde_json::Value) -> Vec<serde_json::Value> {
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

fn check_config_table(readme: &Doc) -> Vec<String> {
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

fn check_test_table(testing: &Doc, repo: &Repo) -> Vec<String> {
    let test_file = |f: &&String| {
        let (dir, name) = f.rsplit_once('/').unwrap_or(("", f));
        let in_tests = dir == "plugin/tests" || dir.strip_prefix("plugin/tests/").is_some_and(|d| !d.contains('/'));
        (in_tests && name.ends_with(".rs"))
            || (dir == "integration" && name.starts_with("test_") && name.ends_with(".py"))
    };
    (repo.files.iter().filter(test_file))
        .filter(|f| !testing.text.lines().any(|l| l.starts_with(&format!("| `{f}` |"))))
        .map(|f| format!("docs/testing.md: the table has no row for {f}"))
        .collect()
}

/// The words before a number that make a line a diary's: `(session|round|issue)s? #?N`.
fn numbered(line: &str) -> Vec<String> {
    let lower = line.to_lowercase();
    let mut out = Vec::new();
    for what in ["session", "round", "issue"] {
        let mut from = 0;
        while let Some(i) = lower[from..].find(what).map(|i| i + from) {
            from = i + what.len();
            if lower[..i].chars().next_back().is_some_and(is_word) {
                continue;
            }
            let rest = lower[from..].strip_prefix('s').unwrap_or(&lower[from..]);
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            let rest = rest.strip_prefix('#').unwrap_or(rest);
            if rest.starts_with(|c: char| c.is_ascii_digit()) {
                // Another project's issue: `owner/repo issue N`.
                let before = lower[..i].trim_end().rsplit(' ').next().unwrap_or("");
                if what == "issue" && before.contains('/') {
                    continue;
                }
                out.push(format!("{what} {}", rest.chars().take_while(char::is_ascii_digit).collect::<String>()));
            }
        }
    }
    out
}

/// Headings that number sessions, rounds or issues; lines that name a session or an issue of ours.
/// ("Round 1's ratios" of a bench run are rounds of a measurement: allowed in text, not in a heading.)
fn check_diary(doc: &Doc) -> Vec<String> {
    let mut bad = Vec::new();
    for (n, line, fenced) in doc.lines() {
        let heading = !fenced && line.starts_with('#');
        for w in numbered(line) {
            if heading || !w.starts_with("round") {
                bad.push(format!("{}:{n}: \"{w}\": say what and when (a date, a commit), not which session or issue", doc.rel));
            }
        }
    }
    bad
}

/// The agent's default metrics port, as `manifest` (the DaemonSet) gives it.
fn agent_metrics_port() -> u16 {
    let cmd = ManifestArgs::augment_args(clap::Command::new("manifest"));
    let arg = cmd.get_arguments().find(|a| a.get_id() == "metrics_port").expect("manifest --metrics-port");
    arg.get_default_values()[0].to_str().unwrap().parse().unwrap()
}

/// Example commands of ebpf-masq (fenced lines and backticked spans) but `agent`
/// and `manifest` that use the agent's metrics port.
fn check_ports(doc: &Doc, port: u16) -> (Vec<String>, usize) {
    let (mut bad, mut seen) = (Vec::new(), 0);
    let fenced = doc.lines().filter(|(_, _, f)| *f).map(|(n, l, _)| (n, l.to_string()));
    for (n, text) in fenced.chain(doc.spans()) {
        let mut rest = text.as_str();
        while let Some(i) = rest.find("ebpf-masq ") {
            rest = &rest[i + "ebpf-masq ".len()..];
            let cmd = &rest[..rest.find(['|', ';', '&', '`', '#']).unwrap_or(rest.len())];
            let verb = cmd.split_whitespace().next().unwrap_or("");
            if verb.is_empty() || verb.starts_with(['-', '<', '[']) {
                continue;
            }
            seen += 1;
            let uses = cmd.split(|c: char| !c.is_ascii_digit()).any(|w| w == port.to_string());
            if uses && !matches!(verb, "agent" | "manifest") {
                bad.push(format!("{}:{n}: `ebpf-masq {}` uses port {port}, the agent's metrics port", doc.rel, cmd.trim()));
            }
        }
    }
    (bad, seen)
}

/// docs/nat.md's memory table against bpf::memory, and the default's figures in the manifest's notes.
fn check_memory(nat: &Doc, repo: &Repo) -> (Vec<String>, usize) {
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
fn check_user_keys(readme: &Doc) -> (Vec<String>, usize) {
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

/// The folders whose source the words table's code names are looked up in.
const CODE_FOLDERS: &[&str] = &["bpf/", "plugin/src/", "integration/", "scripts/"];

/// Every identifier (a run of `A-Za-z0-9_`) in the source files of `CODE_FOLDERS`.
fn source_words(repo: &Repo) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let source = |f: &&String| {
        CODE_FOLDERS.iter().any(|d| f.starts_with(d))
            && f.rsplit_once('.').is_some_and(|(_, ext)| SOURCE_EXTENSIONS.contains(&ext))
    };
    for f in repo.files.iter().filter(source) {
        let text = fs::read_to_string(repo.root.join(f)).unwrap_or_default();
        out.extend(text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).map(String::from));
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `MasqOptions`, `NodeConfig`: a capital first, and a capital after a small letter.
fn upper_camel(s: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    is_ident(s) && c[0].is_ascii_uppercase() && c.windows(2).any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
}

/// Whether `s` reads as a file name of ours: a stem and one of `SOURCE_EXTENSIONS`.
fn source_file_name(s: &str) -> bool {
    s.rsplit_once('.').is_some_and(|(stem, ext)| !stem.is_empty() && !stem.ends_with('/') && SOURCE_EXTENSIONS.contains(&ext))
}

/// What a backticked span of the words table names, if it is a code name.
#[derive(Debug, PartialEq)]
enum CodeName<'a> {
    /// `plugin/src/config/mod.rs`, `config/mod.rs`, `decide.rs`: the end of a file's path.
    File(&'a str),
    /// `bpf::memory::NatMemory`: a Rust path from the crate's root.
    RustPath(&'a str),
    /// `snat_egress_v4`, `pod_info.policies`, `MasqOptions`, `ebpf_masq_egress_policy_*`:
    /// identifiers, each `.`-part a word of the source (a last part ending `*` a word's start).
    Ident(&'a str),
}

fn code_name(span: &str) -> Option<CodeName<'_>> {
    let span = span.trim();
    if source_file_name(span) && !span.contains(char::is_whitespace) {
        return Some(CodeName::File(span));
    }
    if span.contains("::") {
        return span.split("::").all(is_ident).then_some(CodeName::RustPath(span));
    }
    let parts: Vec<&str> = span.strip_suffix('*').unwrap_or(span).split('.').collect();
    let idents = parts.iter().all(|p| is_ident(p));
    (idents && (span.contains('_') || upper_camel(span))).then_some(CodeName::Ident(span))
}

/// Words outside backticks that read as code: `a_b`, `a::b`, `x.rs`, `MasqOptions`, `natOutgoing`.
fn bare_code(text: &str) -> Vec<&str> {
    let token = |c: char| c.is_ascii_alphanumeric() || "_.:/*".contains(c);
    (text.split(|c: char| !token(c)))
        .map(|w| w.trim_matches(|c: char| ".:".contains(c)))
        .filter(|w| {
            let camel_key = key_in_span(w) == Some(*w);
            !w.is_empty() && (w.contains('_') || w.contains("::") || source_file_name(w) || upper_camel(w) || camel_key)
        })
        .collect()
}

/// docs/design.md's "## Words, one meaning each": every code name in its table exists.
/// A code name is a backticked span that is (1) a file name (`decide.rs`, `config/mod.rs`:
/// some file's path ends with it), (2) a Rust path (`bpf::memory::NatMemory`: the longest
/// prefix that is a module, plugin/src/a/b.rs or a/b/mod.rs, and each later segment a
/// word of it), or (3) identifiers joined by `.` (a struct's member), each with a `_` or in
/// UpperCamelCase (`snat_egress_v4`, `NAT_PAIR_MADE`, `pod_info.policies`, `NetConf`),
/// each part a word of the source of `CODE_FOLDERS` (a last part `x_*` names a prefix:
/// `ebpf_masq_egress_policy_*`). A lowerCamelCase span is a config key, checked by
/// `check_keys`; one plain lower-case word (`except`, `explain`) cannot be told from a
/// word and is not read. Every word of the table outside backticks that reads as code
/// (has a `_` or `::`, a file name, UpperCamelCase, a key) must be in backticks, so
/// that one of the checks reads it.
fn check_words(design: &Doc, repo: &Repo, words: &BTreeSet<String>) -> (Vec<String>, usize) {
    let (mut bad, mut seen) = (Vec::new(), 0);
    let section = design.section("## Words, one meaning each");
    let rows: Vec<&(usize, &str)> = section.iter().filter(|(_, l)| l.starts_with('|')).skip(2).collect();
    if rows.is_empty() {
        return (vec![format!("{}: no words table (under ## Words, one meaning each)", design.rel)], 0);
    }
    let word = |w: &str| match w.strip_suffix('*') {
        Some(prefix) => words.iter().any(|x| x.starts_with(prefix) && x.len() > prefix.len()),
        None => words.contains(w),
    };
    for (n, row) in rows {
        let at = format!("{}:{n}", design.rel);
        let spans = Doc::new("row", row.to_string()).spans();
        let mut outside = row.to_string();
        for (_, s) in &spans {
            outside = outside.replacen(&format!("`{s}`"), " ", 1);
        }
        for w in bare_code(&outside) {
            bad.push(format!("{at}: {w} reads as code: write it in backticks"));
        }
        for (_, span) in &spans {
            let Some(name) = code_name(span) else { continue };
            seen += 1;
            let found = match name {
                CodeName::File(f) => repo.files.iter().any(|x| x == f || x.ends_with(&format!("/{f}"))),
                CodeName::RustPath(p) => rust_path_exists(p, repo),
                CodeName::Ident(i) => {
                    let parts: Vec<&str> = i.split('.').collect();
                    parts.iter().all(|p| word(p))
                }
            };
            if !found {
                bad.push(format!("{at}: `{span}` is not in the source ({})", CODE_FOLDERS.join(", ")));
            }
        }
    }
    (bad, seen)
}

/// `a::b::c`: the longest prefix that is a module of plugin/src, and the rest words of its file(s).
fn rust_path_exists(path: &str, repo: &Repo) -> bool {
    let segs: Vec<&str> = path.split("::").collect();
    for k in (1..segs.len()).rev() {
        let module = format!("plugin/src/{}", segs[..k].join("/"));
        let files: Vec<&String> = (repo.files.iter())
            .filter(|f| **f == format!("{module}.rs") || f.starts_with(&format!("{module}/")) && f.ends_with(".rs"))
            .collect();
        if files.is_empty() {
            continue;
        }
        let text: String = files.iter().map(|f| fs::read_to_string(repo.root.join(f)).unwrap_or_default()).collect();
        let words: BTreeSet<&str> = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
        return segs[k..].iter().all(|s| words.contains(s));
    }
    false
}

/// The source files the code map must name: (folder, its subfolders too, extensions).
const MAPPED: &[(&str, bool, &[&str])] = &[
    ("plugin/src/", true, &["rs"]),
    ("bpf/", true, &["c", "h"]),
    ("integration/lab/", false, &["py"]),
    ("scripts/", false, &["sh"]),
];

/// Extensions of the file names the code map's descriptions are read for.
const MAP_EXTENSIONS: &[&str] = &["rs", "c", "h", "py", "sh", "md", "yaml", "json", "toml"];

/// One name the code map gives, as a path from the repository's root.
#[derive(Debug, Clone, PartialEq)]
enum Named {
    /// A file, or a folder (ending `/`).
    Path(String),
    /// A module of a folder's line: `status` in cli/'s is cli/status.rs (.py, .c, .h, .sh) or cli/status/.
    Module(String),
    /// `test_*.py`, `*_tests.rs`.
    Glob(String),
}

/// The code map's names, each with its line: see `check_map`.
fn code_map(design: &Doc) -> Vec<(usize, Named)> {
    let section = design.section("## Where the code lives");
    let block: Vec<(usize, &str)> = (section.iter())
        .skip_while(|(_, l)| !l.starts_with("```"))
        .skip(1)
        .take_while(|(_, l)| !l.starts_with("```"))
        .copied()
        .collect();
    // Entries: (line, base folder, names as written, description).
    let mut entries: Vec<(usize, String, String, String)> = Vec::new();
    let mut base = String::new();
    for (n, line) in block {
        let indent = line.len() - line.trim_start().len();
        if line.trim().is_empty() {
            continue;
        }
        if indent > 2 {
            if let Some(e) = entries.last_mut() {
                e.3 = format!("{} {}", e.3, line.trim());
            }
            continue;
        }
        let cells: Vec<&str> = line.trim().split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        if indent == 0 {
            base = match cells[0].rsplit_once('/') {
                Some((dir, _)) => format!("{dir}/"),
                None => String::new(),
            };
        }
        let from = if indent == 0 { "" } else { base.as_str() };
        for pair in cells.chunks(2) {
            entries.push((n, from.to_string(), pair[0].to_string(), pair.get(1).unwrap_or(&"").to_string()));
        }
    }
    let mut out = Vec::new();
    for (n, from, names, desc) in entries {
        let mut folder = from.clone();
        let mut last = String::new();
        for name in names.split(',').map(str::trim) {
            let path = if name.trim_end_matches('/').contains('/') { format!("{from}{name}") } else { format!("{folder}{name}") };
            folder = if path.ends_with('/') { path.clone() } else { format!("{}/", path.rsplit_once('/').map_or("", |p| p.0)) };
            out.push((n, named(&path)));
            last = path;
        }
        let home = if from.is_empty() && last.ends_with('/') { last.clone() } else { from.clone() };
        let mut found = Vec::new();
        if last.ends_with('/') {
            module_list(&desc, &last, &home, &mut found);
        } else {
            file_names(&desc, &folder, &home, &mut found);
        }
        out.extend(found.into_iter().map(|f| (n, f)));
    }
    out
}

fn named(path: &str) -> Named {
    if path.contains('*') {
        Named::Glob(path.to_string())
    } else {
        Named::Path(path.to_string())
    }
}

/// A name in a description: from the root when it begins with one of `TOP_FOLDERS`, from
/// the heading's folder (`home`) when it has a `/` inside, else from the line's folder (`here`).
fn resolve(name: &str, here: &str, home: &str) -> String {
    if TOP_FOLDERS.iter().any(|t| name.starts_with(t)) {
        name.to_string()
    } else if name.trim_end_matches('/').contains('/') {
        format!("{home}{name}")
    } else {
        format!("{here}{name}")
    }
}

fn folder_name(w: &str) -> bool {
    w.len() > 1 && w.ends_with('/') && w.trim_end_matches('/').split('/').all(|s| !s.is_empty() && s.chars().all(is_word))
}

fn map_file_name(w: &str) -> bool {
    w.rsplit_once('.').is_some_and(|(stem, ext)| !stem.is_empty() && !stem.ends_with('/') && MAP_EXTENSIONS.contains(&ext))
}

/// The file and folder names in a description's text (`test_*.py`, `lib/nat/README.md`, `bench/`).
fn file_names(text: &str, here: &str, home: &str, out: &mut Vec<Named>) {
    for w in text.split(|c: char| !(is_word(c) || "./*".contains(c))) {
        let w = w.trim_end_matches('.');
        if folder_name(w) || map_file_name(w) {
            out.push(named(&resolve(w, here, home)));
        }
    }
}

/// A folder's description: pieces between `,`, `;` and `:` outside parentheses. A piece
/// that is one lower-case word (`status`, `nat_list`) is a module of the folder; one
/// folder name (`explain/`) with a parenthesis after it lists that folder's modules the
/// same way; any other parenthesis is a comment. File and folder names are read everywhere.
fn module_list(text: &str, here: &str, home: &str, out: &mut Vec<Named>) {
    let mut pieces = vec![String::new()];
    let mut depth = 0;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | ';' | ':' if depth == 0 => {
                pieces.push(String::new());
                continue;
            }
            _ => {}
        }
        pieces.last_mut().unwrap().push(c);
    }
    for piece in pieces.iter().map(|p| p.trim()) {
        let (head, group) = match piece.strip_suffix(')').and_then(|p| p.split_once('(')) {
            Some((head, group)) => (head.trim(), Some(group)),
            None => (piece, None),
        };
        let module = !head.is_empty() && head.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if folder_name(head) && !head.trim_end_matches('/').contains('/') {
            let sub = resolve(head, here, home);
            out.push(Named::Path(sub.clone()));
            module_list(group.unwrap_or(""), &sub, home, out);
        } else if module {
            out.push(Named::Module(format!("{here}{head}")));
            file_names(group.unwrap_or(""), here, home, out);
        } else {
            file_names(piece, here, home, out);
        }
    }
}

/// docs/design.md's code map ("## Where the code lives", its fenced block) names only files
/// and folders that exist, and every source file of `MAPPED`.
///
/// How the map is read. A line at column 0 names a path from the root; when it is a folder
/// (`plugin/src/`) the lines indented by two spaces under it name paths from it. Such a line's
/// first column (up to two spaces) lists names, a bare one (`lib.rs` after `main.rs`,
/// `port.h` after `lib/nat/pair.h`) in the folder of the name before it; two entries may
/// share a line, each name and its description apart by two spaces or more. Deeper-indented
/// lines continue the description. A folder's description lists its modules (see
/// `module_list`): `status` names cli/status.rs (or .py, .c, .h, .sh, or the folder cli/status/),
/// `explain/ (packet, decide)` the folder and its modules; a file's description is prose, read
/// for file names only. A file or folder name in a description is from the root when it begins
/// with a top-level folder, from the column-0 folder when it has a `/` inside (`lib/nat/README.md`),
/// else from its line's folder (`tests.rs`, `decide_tmpl.h`).
///
/// What names a file: its path (from any of these), a glob whose file part has a literal
/// besides the extension (`*_tests.rs`, `test_*.py`; `*.c` names none), its module, or for
/// a folder module's `mod.rs` and `x.rs` beside `x/`, the folder. A folder never stands
/// for the rest of its files: each is named.
fn check_map(design: &Doc, repo: &Repo) -> (Vec<String>, usize) {
    let names = code_map(design);
    if names.is_empty() {
        return (vec![format!("{}: no code map (a fenced block under ## Where the code lives)", design.rel)], 0);
    }
    let mut bad = Vec::new();
    let mut named: BTreeSet<String> = BTreeSet::new();
    for (n, name) in &names {
        let (exists, covers): (bool, Vec<String>) = match name {
            Named::Path(p) if p.ends_with('/') => {
                let dir = p.trim_end_matches('/');
                (repo.exists(p), vec![format!("{p}mod.rs"), format!("{dir}.rs")])
            }
            Named::Path(p) => (repo.files.contains(p), vec![p.clone()]),
            Named::Module(m) => {
                let files: Vec<String> = SOURCE_EXTENSIONS.iter().map(|e| format!("{m}.{e}")).chain([format!("{m}/mod.rs")]).collect();
                (files.iter().any(|f| repo.files.contains(f)) || repo.exists(&format!("{m}/")), files)
            }
            Named::Glob(g) => {
                let file = g.rsplit('/').next().unwrap();
                let literal = file.rsplit_once('.').is_some_and(|(stem, _)| stem.chars().any(|c| c != '*'));
                let matched: Vec<String> = repo.files.iter().filter(|f| glob_file(g, f)).cloned().collect();
                (!matched.is_empty(), if literal { matched } else { Vec::new() })
            }
        };
        if !exists {
            let what = match name {
                Named::Path(p) | Named::Glob(p) => p.clone(),
                Named::Module(m) => format!("the module {m} (no {m}.rs, .py, .c, .h, .sh or {m}/)"),
            };
            bad.push(format!("{}:{n}: the code map names {what}, which does not exist", design.rel));
        }
        named.extend(covers);
    }
    for (dir, deep, exts) in MAPPED {
        for f in repo.files.iter().filter(|f| f.starts_with(dir)) {
            let rest = &f[dir.len()..];
            let ext = f.rsplit_once('.').map_or("", |p| p.1);
            if (*deep || !rest.contains('/')) && exts.contains(&ext) && !named.contains(f) {
                bad.push(format!("{}: the code map does not name {f}", design.rel));
            }
        }
    }
    (bad, names.len())
}

/// Whether the file `f` matches `pattern` segment by segment (`*` within a segment).
fn glob_file(pattern: &str, f: &str) -> bool {
    let (p, s): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), f.split('/').collect());
    p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| wildcard(p, s))
}

fn report(bad: Vec<String>) {
    assert!(bad.is_empty(), "{} drift(s):\n{}", bad.len(), bad.join("\n"));
}

/// A check that found fewer than `min` things to check has stopped reading the docs.
fn not_blind(seen: usize, min: usize, what: &str) {
    assert!(seen >= min, "only {seen} {what} found: the reader has gone blind");
}

#[test]
fn docs_name_only_files_that_exist() {
    let repo = Repo::read();
    let (bad, seen): (Vec<_>, Vec<_>) = repo.docs().iter().map(|d| check_files(d, &repo)).unzip();
    let seen: usize = seen.iter().sum();
    not_blind(seen, 100, "file names");
    report(bad.concat());
}

#[test]
fn docs_name_only_the_current_layout() {
    let docs = Repo::read().docs();
    let mentions: usize = docs.iter().map(|d| layout_mentions(d).len()).sum();
    not_blind(mentions, 5, "layout versions");
    report(docs.iter().flat_map(check_layouts).collect());
}

#[test]
fn docs_name_only_keys_the_parser_knows() {
    let (bad, seen): (Vec<_>, Vec<_>) = Repo::read().docs().iter().map(check_keys).unzip();
    let seen: usize = seen.iter().sum();
    not_blind(seen, 100, "keys and entries");
    report(bad.concat());
}

#[test]
fn readme_config_table_lists_every_key_the_parser_knows() {
    let docs = Repo::read().docs();
    report(check_config_table(docs.iter().find(|d| d.rel == "README.md").unwrap()));
}

#[test]
fn testing_md_lists_every_test_file() {
    let repo = Repo::read();
    let docs = repo.docs();
    report(check_test_table(docs.iter().find(|d| d.rel == "docs/testing.md").unwrap(), &repo));
}

#[test]
fn docs_speak_to_users_not_of_work_sessions() {
    report(Repo::read().docs().iter().flat_map(check_diary).collect());
}

#[test]
fn example_commands_leave_the_agents_metrics_port_to_the_agent() {
    let port = agent_metrics_port();
    assert_eq!(port, 9436);
    let (bad, seen): (Vec<_>, Vec<_>) = Repo::read().docs().iter().map(|d| check_ports(d, port)).unzip();
    not_blind(seen.iter().sum(), 20, "ebpf-masq commands");
    report(bad.concat());
}

#[test]
fn memory_figures_are_the_computed_ones() {
    let repo = Repo::read();
    let docs = repo.docs();
    let (bad, seen) = check_memory(docs.iter().find(|d| d.rel == "docs/nat.md").unwrap(), &repo);
    not_blind(seen, 3 + 6, "memory figures");
    report(bad);
}

#[test]
fn keys_users_set_are_accepted_and_agent_keys_say_so() {
    let docs = Repo::read().docs();
    let (bad, seen) = check_user_keys(docs.iter().find(|d| d.rel == "README.md").unwrap());
    not_blind(seen, 8, "config table defaults");
    report(bad);
}

#[test]
fn design_words_name_code_that_exists() {
    let repo = Repo::read();
    let docs = repo.docs();
    let design = docs.iter().find(|d| d.rel == "docs/design.md").unwrap();
    let (bad, seen) = check_words(design, &repo, &source_words(&repo));
    not_blind(seen, 15, "code names in the words table");
    report(bad);
}

#[test]
fn design_code_map_names_what_exists_and_every_source_file() {
    let repo = Repo::read();
    let docs = repo.docs();
    let (bad, seen) = check_map(docs.iter().find(|d| d.rel == "docs/design.md").unwrap(), &repo);
    not_blind(seen, 100, "names in the code map");
    report(bad);
}

/// Each check finds what it is there to find (a check that cannot fail proves nothing).
#[test]
fn each_check_fails_on_a_broken_doc() {
    let repo = Repo::read();
    let doc = |rel: &str, text: &str| Doc::new(rel, text.to_string());
    let files = doc(
        "docs/x.md",
        "`plugin/src/gone.rs`, bpf/lib/nope*.h, gone_helper.py, [a](gone.md), [b](nat.md#no-such-heading),\n\
         nf_nat_core.c (not ours, so written with its path).\n\
         Fine: `plugin/src/cni.rs`, bpf/lib/fastpath*.h, `scripts/<name>.sh`, net/netfilter/nf_nat_core.c,\n\
         /sys/fs/bpf/ebpf-masq, [c](nat.md#limits), [d](../integration/README.md), [e](#fine), cni.rs.\n\n## Fine\n",
    );
    let (got, seen) = check_files(&files, &repo);
    assert_eq!((got.len(), seen), (6, 12), "{got:#?}");
    let old = LAYOUT_VERSION - 1;
    let layouts = doc(
        "docs/x.md",
        &format!(
            "Pins under `<pinPath>/v{old}/`; the `v{old}/` is layout {old}, Layout-v{old} too.\n\
             Fine: layout {LAYOUT_VERSION}, `v{LAYOUT_VERSION}/`, `egress_policy_v4/v6`, `LAYOUT_VERSION`, layout directory."
        ),
    );
    assert_eq!(check_layouts(&layouts).len(), 4, "{:#?}", check_layouts(&layouts));
    let upgrade = doc(
        "docs/upgrade.md",
        &format!(
            "Layout {old} before.\n\n## Layout history\n\n| layout | what |\n|---|---|\n| {old} | layout {} |\n\n## Next\n",
            LAYOUT_VERSION + 1
        ),
    );
    // Outside the history; a future layout inside it; its first row is not the current one.
    assert_eq!(check_layouts(&upgrade).len(), 3, "{:#?}", check_layouts(&upgrade));
    let keys = doc(
        "docs/x.md",
        "`natOutgoin`, `\"fastPat\": true`, `--set podPortLimt=3`, `ipMasq: true`, `natOutgoing`, `tcp`.\n\n\
         ```json\n{\"plugins\": [{\"type\": \"ebpf-masq\", \"natTimeouts\": {\"tcpp\": 5}}]}\n```\n\
         ```json\n{\"type\": \"ebpf-masq\",}\n```\n",
    );
    let (got, seen) = check_keys(&keys);
    assert_eq!((got.len(), seen), (5, 6), "{got:#?}");
    // The real README and testing.md, each broken once: what the check finds beyond what it found before.
    let more = |found: Vec<String>, before: Vec<String>| -> Vec<String> {
        found.into_iter().filter(|f| !before.contains(f)).collect()
    };
    let readme = fs::read_to_string(repo.root.join("README.md")).unwrap();
    let (row, nested) = (format!("| `{}` |", MASQ_KEYS[0]), RULE_KEYS[1]);
    assert!(readme.contains(&row) && readme.contains(&format!("`{nested}`")));
    let broken = readme
        .replacen(&row, "| `notAKey` |", 1)
        .replace(&format!("`{nested}`"), "")
        .replace(&format!("\"{nested}\""), "");
    let got = more(check_config_table(&doc("README.md", &broken)), check_config_table(&doc("README.md", &readme)));
    assert_eq!(got.len(), 3, "a row missing, an unknown row, a nested key unnamed: {got:#?}");
    let testing = fs::read_to_string(repo.root.join("docs/testing.md")).unwrap();
    let broken = testing.replace("| `plugin/tests/docs.rs` |", "| plugin/tests/docs.rs |");
    let got =
        more(check_test_table(&doc("docs/testing.md", &broken), &repo), check_test_table(&doc("t", &testing), &repo));
    assert_eq!(got, ["docs/testing.md: the table has no row for plugin/tests/docs.rs"]);
    let diary = doc(
        "docs/x.md",
        "## Session 8\n\nAs issue 26 item 2 asks.\n\n### Round 3 (what changed)\n\n\
         Fine: round 1's ratios, projectcalico/calico issue 9100, sessions of NAT, `--rounds 3`, issues.\n",
    );
    assert_eq!(check_diary(&diary).len(), 3, "{:#?}", check_diary(&diary));
    let ports = doc(
        "docs/x.md",
        "`ebpf-masq metrics --listen 127.0.0.1:9436`\n\n```sh\nebpf-masq natlog --listen 0.0.0.0:9436 | tee x\n```\n\n\
         Fine: `ebpf-masq agent --metrics-listen 0.0.0.0:9436`, `ebpf-masq manifest --metrics-port 9436`,\n\
         `ebpf-masq metrics --listen 127.0.0.1:9437`, `curl 127.0.0.1:9436/metrics`, `ebpf-masq status` (94360).\n",
    );
    let (got, seen) = check_ports(&ports, 9436);
    assert_eq!((got.len(), seen), (2, 6), "{got:#?}");
    let nat = fs::read_to_string(repo.root.join("docs/nat.md")).unwrap();
    assert!(nat.contains("| 262,144 | 35 MiB |"), "the memory table's 262,144 row");
    let (got, _) = check_memory(&doc("docs/nat.md", &nat.replace("| 262,144 | 35 MiB |", "| 262,144 | 36 MiB |")), &repo);
    assert_eq!(got.len(), 1, "{got:#?}");
    let (got, _) = check_memory(&doc("docs/nat.md", &nat.replace("| `natMaxEntries` | up front |", "| size | up front |")), &repo);
    assert_eq!(got.len(), 1, "{got:#?}");
    let broken = readme
        .replace("| `natMaxEntries` | `1048576` |", "| `natMaxEntries` | `100` |")
        .replace("**not one to set**: only `agent", "written by `agent");
    let (got, _) = check_user_keys(&doc("README.md", &broken));
    assert_eq!(got.len(), 2, "natMaxEntries 100 refused, ipMasqAgent not said to be the agent's: {got:#?}");
    broken_design(&repo, &doc, &more);
}

/// The words table's and the code map's checks, each on a broken docs/design.md.
fn broken_design(repo: &Repo, doc: &dyn Fn(&str, &str) -> Doc, more: &dyn Fn(Vec<String>, Vec<String>) -> Vec<String>) {
    let words = source_words(repo);
    let table = doc(
        "docs/design.md",
        "## Words, one meaning each\n\n| word | means | never |\n|---|---|---|\n\
         | bad | `nat_ingress_v4`, `gone.rs`, `bpf::memory::NoSuchThing`, `pod_info.no_such_member`, `NoSuchType`, \
         `ebpf_masq_nothing_*`; bare: stray_name, Gone.rs, natFiltering, MasqOptions, `natFiltering` | |\n\
         | fine | `rnat_ingress_v4`, `bpf::memory::NatMemory`, `config/mod.rs`, `pod_info.policies`, `NetConf`, \
         `ebpf_masq_egress_policy_*`, `explain`, `noinline`, `natOutgoing`, RFC 4787, IPv4, CNI's | |\n\n## Next\n",
    );
    let (got, seen) = check_words(&table, repo, &words);
    assert_eq!((got.len(), seen), (10, 12), "{got:#?}");
    let map = doc(
        "docs/design.md",
        "## Where the code lives\n\n```\nplugin/src/\n\
         \x20 cni.rs, gone.rs       prose, with status and nat_list as words; tests.rs is no file here; bench/\n\
         \x20 cli/                  one room a command: status, nat_gone, explain/ (packet, decide),\n\
         \x20                       metrics (tiny_http, prometheus), agent/ (uninstall)\n\
         \x20 bpf/                  abi/ (bpf/include/masq_abi.h's structs), sys (every raw bpf(2) call)\n\
         bpf/\n\
         \x20 lib/nat/pair.h, port.h, nope.h   the rules\n\
         \x20 lib/common.h          helpers      lib/gone.h      gone\n\
         integration/            the tests, test_*.py, *.py (integration/README.md)\n\
         \x20 lab/                  netlab (topology, Server), peer.py\n\
         scripts/                demo.sh, gone.sh (+ bench/)\n```\n",
    );
    let (got, seen) = check_map(&map, repo);
    let (gone, unnamed): (Vec<&String>, Vec<&String>) = got.iter().partition(|d| d.contains("does not exist"));
    let gone: Vec<&str> = gone.iter().map(|d| {
        let name = d.split(" names ").nth(1).unwrap().trim_start_matches("the module ");
        name.split([',', ' ']).next().unwrap()
    })
    .collect();
    let want = ["plugin/src/gone.rs", "plugin/src/tests.rs", "plugin/src/bench/", "plugin/src/cli/nat_gone", "bpf/lib/nat/nope.h", "bpf/lib/gone.h", "scripts/gone.sh"];
    assert_eq!(gone, want, "{got:#?}");
    assert!(seen > 20, "{seen}");
    let unnamed = |f: &str| unnamed.iter().any(|d| d.ends_with(&format!(" does not name {f}")));
    for f in ["plugin/src/cli/nat_list.rs", "plugin/src/cli/explain/lookups.rs", "plugin/src/bpf/abi/btf.rs", "bpf/lib/nat/gc.h", "integration/lab/masqcli.py"] {
        assert!(unnamed(f), "{f} is named nowhere, and the check missed it: {got:#?}");
    }
    for f in [
        "plugin/src/cni.rs", "plugin/src/cli/status.rs", "plugin/src/cli/mod.rs", "plugin/src/cli/explain/mod.rs",
        "plugin/src/cli/explain/packet.rs", "plugin/src/cli/metrics/mod.rs", "plugin/src/cli/agent.rs",
        "plugin/src/cli/agent/uninstall.rs", "plugin/src/bpf/abi/mod.rs", "plugin/src/bpf/sys.rs", "bpf/include/masq_abi.h",
        "bpf/lib/nat/port.h", "bpf/lib/common.h", "integration/lab/netlab.py", "integration/lab/peer.py", "scripts/demo.sh",
    ] {
        assert!(!unnamed(f), "{f} is named: {got:#?}");
    }
    // The real design.md: a module taken out of a line, another renamed, a function misnamed.
    let design = fs::read_to_string(repo.root.join("docs/design.md")).unwrap();
    let real = doc("docs/design.md", &design);
    for (from, to, want) in [
        ("nat_hot (a busy endpoint's bitmap from user space),", "", 1),
        ("sys (every raw", "sysx (every raw", 2),
        ("`rnat_ingress_v4`", "`nat_ingress_v4`", 1),
        ("`node/config_maps.rs`", "node/config_maps.rs", 1),
    ] {
        assert!(design.contains(from), "design.md no longer has {from}");
        let broken = doc("docs/design.md", &design.replacen(from, to, 1));
        let got = more(check_map(&broken, repo).0, check_map(&real, repo).0);
        let got = [got, more(check_words(&broken, repo, &words).0, check_words(&real, repo, &words).0)].concat();
        assert_eq!(got.len(), want, "{from} -> {to}: {got:#?}");
    }
}
