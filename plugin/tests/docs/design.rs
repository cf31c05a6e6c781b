//! docs/design.md's words table and code map (see main.rs).

use super::*;

/// The folders whose source the words table's code names are looked up in.
pub(crate) const CODE_FOLDERS: &[&str] =
    &["bpf/", "plugin/src/", "plugin/core/src/", "plugin/cni/src/", "plugin/tools/src/", "integration/", "scripts/"];

/// Where a Rust path's first segment lives: `cli::x` in the tools' crate, `cni` is the CNI
/// verbs' crate root, anything else (`bpf::`, `node::`...) in the core's (the binary's
/// lib.rs names them all under one root, as the integration tests see them).
pub(crate) fn rust_module_file(segs: &[&str]) -> String {
    match segs {
        ["cli", rest @ ..] if rest.is_empty() => "plugin/tools/src/lib".to_string(),
        ["cli", rest @ ..] => format!("plugin/tools/src/{}", rest.join("/")),
        ["cni", ..] => "plugin/cni/src/lib".to_string(),
        _ => format!("plugin/core/src/{}", segs.join("/")),
    }
}

/// Every identifier (a run of `A-Za-z0-9_`) in the source files of `CODE_FOLDERS`.
pub(crate) fn source_words(repo: &Repo) -> BTreeSet<String> {
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

pub(crate) fn is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `MasqOptions`, `NodeConfig`: a capital first, and a capital after a small letter.
pub(crate) fn upper_camel(s: &str) -> bool {
    let c: Vec<char> = s.chars().collect();
    is_ident(s) && c[0].is_ascii_uppercase() && c.windows(2).any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
}

/// Whether `s` reads as a file name of ours: a stem and one of `SOURCE_EXTENSIONS`.
pub(crate) fn source_file_name(s: &str) -> bool {
    s.rsplit_once('.').is_some_and(|(stem, ext)| !stem.is_empty() && !stem.ends_with('/') && SOURCE_EXTENSIONS.contains(&ext))
}

/// What a backticked span of the words table names, if it is a code name.
#[derive(Debug, PartialEq)]
pub(crate) enum CodeName<'a> {
    /// `plugin/core/src/config/mod.rs`, `config/mod.rs`, `decide.rs`: the end of a file's path.
    File(&'a str),
    /// `bpf::memory::NatMemory`: a Rust path from the crate's root.
    RustPath(&'a str),
    /// `snat_egress_v4`, `pod_info.policies`, `MasqOptions`, `ebpf_masq_egress_policy_*`:
    /// identifiers, each `.`-part a word of the source (a last part ending `*` a word's start).
    Ident(&'a str),
}

pub(crate) fn code_name(span: &str) -> Option<CodeName<'_>> {
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
pub(crate) fn bare_code(text: &str) -> Vec<&str> {
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
/// prefix that is a module, plugin/core/src/a/b.rs or a/b/mod.rs (`cli::` in plugin/tools/src/), and each later segment a
/// word of it), or (3) identifiers joined by `.` (a struct's member), each with a `_` or in
/// UpperCamelCase (`snat_egress_v4`, `NAT_PAIR_MADE`, `pod_info.policies`, `NetConf`),
/// each part a word of the source of `CODE_FOLDERS` (a last part `x_*` names a prefix:
/// `ebpf_masq_egress_policy_*`). A lowerCamelCase span is a config key, checked by
/// `check_keys`; one plain lower-case word (`except`, `explain`) cannot be told from a
/// word and is not read. Every word of the table outside backticks that reads as code
/// (has a `_` or `::`, a file name, UpperCamelCase, a key) must be in backticks, so
/// that one of the checks reads it.
pub(crate) fn check_words(design: &Doc, repo: &Repo, words: &BTreeSet<String>) -> (Vec<String>, usize) {
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

/// `a::b::c`: the longest prefix that is a module of our crates (`rust_module_file`), and the rest words of its file(s).
pub(crate) fn rust_path_exists(path: &str, repo: &Repo) -> bool {
    let segs: Vec<&str> = path.split("::").collect();
    for k in (1..segs.len()).rev() {
        let module = rust_module_file(&segs[..k]);
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
pub(crate) const MAPPED: &[(&str, bool, &[&str])] = &[
    ("plugin/src/", true, &["rs"]),
    ("plugin/core/src/", true, &["rs"]),
    ("plugin/cni/src/", true, &["rs"]),
    ("plugin/tools/src/", true, &["rs"]),
    ("bpf/", true, &["c", "h"]),
    ("integration/lab/", false, &["py"]),
    ("scripts/", false, &["sh"]),
];

/// Extensions of the file names the code map's descriptions are read for.
pub(crate) const MAP_EXTENSIONS: &[&str] = &["rs", "c", "h", "py", "sh", "md", "yaml", "json", "toml"];

/// One name the code map gives, as a path from the repository's root.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Named {
    /// A file, or a folder (ending `/`).
    Path(String),
    /// A module of a folder's line: `status` in cli/'s is cli/status.rs (.py, .c, .h, .sh) or cli/status/.
    Module(String),
    /// `test_*.py`, `*_tests.rs`.
    Glob(String),
}

/// The code map's names, each with its line: see `check_map`.
pub(crate) fn code_map(design: &Doc) -> Vec<(usize, Named)> {
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

pub(crate) fn named(path: &str) -> Named {
    if path.contains('*') {
        Named::Glob(path.to_string())
    } else {
        Named::Path(path.to_string())
    }
}

/// A name in a description: from the root when it begins with one of `TOP_FOLDERS`, from
/// the heading's folder (`home`) when it has a `/` inside, else from the line's folder (`here`).
pub(crate) fn resolve(name: &str, here: &str, home: &str) -> String {
    if TOP_FOLDERS.iter().any(|t| name.starts_with(t)) {
        name.to_string()
    } else if name.trim_end_matches('/').contains('/') {
        format!("{home}{name}")
    } else {
        format!("{here}{name}")
    }
}

pub(crate) fn folder_name(w: &str) -> bool {
    w.len() > 1 && w.ends_with('/') && w.trim_end_matches('/').split('/').all(|s| !s.is_empty() && s.chars().all(is_word))
}

pub(crate) fn map_file_name(w: &str) -> bool {
    w.rsplit_once('.').is_some_and(|(stem, ext)| !stem.is_empty() && !stem.ends_with('/') && MAP_EXTENSIONS.contains(&ext))
}

/// The file and folder names in a description's text (`test_*.py`, `lib/nat/README.md`, `bench/`).
pub(crate) fn file_names(text: &str, here: &str, home: &str, out: &mut Vec<Named>) {
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
pub(crate) fn module_list(text: &str, here: &str, home: &str, out: &mut Vec<Named>) {
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
pub(crate) fn check_map(design: &Doc, repo: &Repo) -> (Vec<String>, usize) {
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
pub(crate) fn glob_file(pattern: &str, f: &str) -> bool {
    let (p, s): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), f.split('/').collect());
    p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| wildcard(p, s))
}
