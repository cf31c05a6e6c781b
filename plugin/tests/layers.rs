//! The layers of plugin/src point down only, and no import circle remains
//! (issue 19): `cni`/`cli` -> `node`/`upgrade` -> `pod` -> `bpf`/`netlink`/
//! `prevresult` -> `config`/`logging` -> `error`. Within a layer a file may use
//! another (cli::status uses cli::readers), never in a circle. Read from the
//! sources: `use crate::...` trees, `crate::x::y` paths and, inside `bpf/` and
//! `cli/`, `super::x`. Test modules (from the first `#[cfg(test)]` on) are not
//! counted.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

fn rank(module: &str) -> u32 {
    match module.split("::").next().unwrap() {
        "cni" | "cli" => 5,
        "node" | "upgrade" => 4,
        "pod" => 3,
        "bpf" | "netlink" | "prevresult" => 2,
        "config" | "logging" => 1,
        "error" => 0,
        other => panic!("module {other} has no layer: add it to tests/layers.rs"),
    }
}

/// Top modules that have submodules of their own (counted one by one).
fn nested(top: &str) -> bool {
    matches!(top, "bpf" | "cli")
}

fn module_of(rel: &Path) -> String {
    let s = rel.with_extension("").to_string_lossy().replace('/', "::");
    s.strip_suffix("::mod").map(str::to_string).unwrap_or(s)
}

/// The top-level comma-separated items of a brace group's inside.
fn items(inner: &str) -> Vec<String> {
    let (mut out, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// The module a path below `crate::` names: "bpf::loader::Pins" -> bpf::loader.
fn target(path: &str, out: &mut BTreeSet<String>) {
    let mut segs = path.splitn(2, "::");
    let top = segs.next().unwrap().trim().to_string();
    let rest = segs.next().unwrap_or("").trim();
    if top.is_empty() || top == "self" {
        return;
    }
    if !nested(&top) || rest.is_empty() {
        out.insert(top);
        return;
    }
    if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        for it in items(inner) {
            let sub = it.split("::").next().unwrap().trim().to_string();
            out.insert(if sub == "self" { top.clone() } else { format!("{top}::{sub}") });
        }
    } else {
        let sub: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        out.insert(format!("{top}::{sub}"));
    }
}

fn balanced(s: &str) -> &str {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &s[1..i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced use tree");
}

fn imports(module: &str, code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if after.starts_with('{') {
            for it in items(balanced(after)) {
                target(&it, &mut out);
            }
        } else {
            let path: String =
                after.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':' || *c == '{').collect();
            let path = path.trim_end_matches(['{', ':']);
            if after[path.len()..].starts_with("::{") || after[path.len()..].starts_with('{') {
                let brace = &after[after[..].find('{').unwrap()..];
                target(&format!("{path}::{{{}}}", balanced(brace)), &mut out);
            } else {
                target(path, &mut out);
            }
        }
        rest = after;
    }
    // Siblings inside a nested top module.
    let top = module.split("::").next().unwrap();
    if nested(top) && module.contains("::") {
        let mut rest = code;
        while let Some(i) = rest.find("super::") {
            let after = &rest[i + "super::".len()..];
            if after.starts_with('{') {
                for it in items(balanced(after)) {
                    target(&format!("{top}::{it}"), &mut out);
                }
            } else {
                let sub: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !sub.is_empty() {
                    out.insert(format!("{top}::{sub}"));
                }
            }
            rest = after;
        }
    }
    out.remove(module);
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap();
            let module = module_of(rel);
            if p.extension().map(|x| x != "rs").unwrap_or(true) || module == "lib" || module == "main" {
                continue;
            }
            let text = fs::read_to_string(&p).unwrap();
            let code: String = text
                .lines()
                .take_while(|l| l.trim() != "#[cfg(test)]")
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            g.insert(module.clone(), imports(&module, &code));
        }
    }
    g
}

#[test]
fn layers_point_down() {
    let g = graph();
    assert!(g.len() > 20 && g.contains_key("bpf::loader") && g.contains_key("cli::agent"), "{g:?}");
    let mut up = Vec::new();
    for (m, deps) in &g {
        for d in deps {
            if rank(d) > rank(m) {
                up.push(format!("{m} -> {d}"));
            }
        }
    }
    assert!(up.is_empty(), "imports reaching a layer above: {up:?}");
}

#[test]
fn no_import_circle() {
    let g = graph();
    // Depth-first search; a back edge is a circle.
    fn visit<'a>(
        m: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| *p == m).unwrap();
                return Some(path[start..].iter().map(|s| s.to_string()).chain([m.to_string()]).collect());
            }
            _ => {}
        }
        state.insert(m, 1);
        path.push(m);
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m, 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in g.keys() {
        if let Some(circle) = visit(m, &g, &mut state, &mut Vec::new()) {
            panic!("import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_reader_sees_what_a_file_imports() {
    let code = "use crate::{\n    bpf::{abi::{self, X}, loader::Pins, maps},\n    error::Result,\n    node, pod,\n};\nlet x = crate::cli::readers::f();";
    let got = imports("upgrade", code);
    let want: BTreeSet<String> =
        ["bpf::abi", "bpf::loader", "bpf::maps", "error", "node", "pod", "cli::readers"].iter().map(|s| s.to_string()).collect();
    assert_eq!(got, want);
    assert_eq!(imports("bpf::nat", "use super::{abi, pins::Pins};"), ["bpf::abi", "bpf::pins"].iter().map(|s| s.to_string()).collect());
}
