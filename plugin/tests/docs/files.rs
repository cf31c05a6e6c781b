//! Files, layouts, the test table, diaries and ports (see main.rs for the rules).

use super::*;

/// Older layouts named outside docs/upgrade.md's history, each an exact phrase.
pub(crate) const HISTORY: &[(&str, &str)] = &[
    // The commit to build to test an upgrade against a real older release.
    ("integration/README.md", "the last of layout 7"),
];

/// The drifts `doc` shows, and how many names it checked.
pub(crate) fn check_files(doc: &Doc, repo: &Repo) -> (Vec<String>, usize) {
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
pub(crate) fn normalize(p: &Path) -> String {
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
pub(crate) fn layout_mentions(doc: &Doc) -> Vec<(usize, usize, u32)> {
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

pub(crate) fn check_layouts(doc: &Doc) -> Vec<String> {
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

pub(crate) fn check_test_table(testing: &Doc, repo: &Repo) -> Vec<String> {
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
pub(crate) fn numbered(line: &str) -> Vec<String> {
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
pub(crate) fn check_diary(doc: &Doc) -> Vec<String> {
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
pub(crate) fn agent_metrics_port() -> u16 {
    let cmd = ManifestArgs::augment_args(clap::Command::new("manifest"));
    let arg = cmd.get_arguments().find(|a| a.get_id() == "metrics_port").expect("manifest --metrics-port");
    arg.get_default_values()[0].to_str().unwrap().parse().unwrap()
}

/// Example commands of ebpf-masq (fenced lines and backticked spans) but `agent`
/// and `manifest` that use the agent's metrics port.
pub(crate) fn check_ports(doc: &Doc, port: u16) -> (Vec<String>, usize) {
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
