//! The layers of the crates under plugin/ (core, cni, tools) point down only, and no import circle remains
//! (docs/design.md): `cni`/`cli` -> `node` -> `pod` -> `bpf`/`netlink`/`prevresult`
//! -> `config`/`logging` -> `error`. Within a layer a room may use another
//! (cli::status uses cli::readers), never in a circle. A room is a top module,
//! or inside a folder top module (bpf, cli, config, netlink, node) one of its
//! children: the files of cli/explain/ are all the room `cli::explain`. Read
//! from the sources: `use crate::...` trees, `crate::x::y` paths and `super::`
//! paths (resolved from the file's own module). Test modules (from the first
//! `#[cfg(test)]` on) and test-only files (tests.rs, *_tests.rs) are not counted.
//! The integration tests' labs (integration/lab/, the Python package `lab`) have no
//! import circle either (`python_imports` says what is read). Nor do the data
//! plane's C headers, each of which (but the engine's templates, `*_tmpl.h`)
//! compiles on its own: it includes what it uses.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

fn rank(module: &str) -> u32 {
    match module.split("::").next().unwrap() {
        "cni" | "cli" => 5,
        "node" => 4,
        "pod" => 3,
        "bpf" | "netlink" | "prevresult" => 2,
        "config" | "logging" => 1,
        "error" => 0,
        other => panic!("module {other} has no layer: add it to tests/layers.rs"),
    }
}

/// Top modules that are folders of rooms (their children counted one by one).
fn nested(top: &str) -> bool {
    matches!(top, "bpf" | "cli" | "config" | "netlink" | "node")
}

/// The full module path of a source file: cli/explain/decide.rs -> cli::explain::decide.
fn module_path(rel: &Path) -> Vec<String> {
    let s = rel.with_extension("").to_string_lossy().replace('/', "::");
    let s = s.strip_suffix("::mod").map(str::to_string).unwrap_or(s);
    s.split("::").map(str::to_string).collect()
}

/// The room a module path belongs to: its top, or top::child in a folder top module.
fn room(path: &[String]) -> String {
    match path {
        [] => String::new(),
        [top, child, ..] if nested(top) => format!("{top}::{child}"),
        [top, ..] => top.clone(),
    }
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

fn imports(file: &[String], code: &str) -> BTreeSet<String> {
    let module = &room(file);
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
    // super:: paths, resolved from the file's own module path.
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        // The whole chain: super::super::x.
        let start = rest[..i].rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).map_or(0, |j| j + 1);
        let chain = &rest[start..];
        let mut base: Vec<String> = file.to_vec();
        let mut after = chain;
        while let Some(r) = after.strip_prefix("super::") {
            base.pop();
            after = r;
        }
        if after.starts_with('{') {
            for it in items(balanced(after)) {
                let mut p = base.clone();
                p.extend(it.split("::").map(|s| s.trim().to_string()).take_while(|s| s.chars().all(|c| c.is_alphanumeric() || c == '_')));
                out.insert(room(&p));
            }
        } else {
            let sub: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let mut p = base.clone();
            if !sub.is_empty() {
                p.push(sub);
            }
            out.insert(room(&p));
        }
        rest = &rest[i + "super::".len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
        }
    }
    out.remove(module);
    out.remove("");
    out
}

/// The crates below the binary: their sources, and the module their root stands
/// for in the layers (core's `crate::x` is `x`; the tools' crate is `cli`, the CNI
/// verbs' `cni`). The binary's own src/ (main.rs, and lib.rs naming the crates) is none.
const CRATES: &[(&str, &str)] = &[("core", ""), ("tools", "cli"), ("cni", "cni")];

/// A file's code as core's paths: in the tools' and CNI crates `crate::x` is
/// `crate::cli::x` (`crate::cni::x`) and `ebpf_masq_core::x` is `crate::x`.
fn as_core_paths(code: &str, root: &str) -> String {
    if root.is_empty() {
        return code.to_string();
    }
    code.replace("crate::", &format!("crate::{root}::")).replace("ebpf_masq_core::", "crate::")
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (krate, root) in CRATES {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(krate).join("src");
        read_crate(&src, root, &mut g);
    }
    // `crate::config::MasqOptions` names an item re-exported by config/mod.rs:
    // a target that is no room is its top module's.
    let rooms: BTreeSet<String> = g.keys().cloned().collect();
    for deps in g.values_mut() {
        *deps = deps
            .iter()
            .map(|d| if rooms.contains(d) { d.clone() } else { d.split("::").next().unwrap().to_string() })
            .collect();
    }
    for (m, deps) in g.iter_mut() {
        deps.remove(m);
    }
    g
}

/// Every room of one crate (sources `src`, standing for module `root`) and what it imports, into `g`.
fn read_crate(src: &Path, root: &str, g: &mut BTreeMap<String, BTreeSet<String>>) {
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut file: Vec<String> = if root.is_empty() { Vec::new() } else { vec![root.to_string()] };
            file.extend(module_path(rel).into_iter().filter(|m| !(m == "lib" && rel.parent() == Some(Path::new("")))));
            let Some(name) = file.last().map(String::as_str) else { continue }; // core's lib.rs
            if p.extension().map(|x| x != "rs").unwrap_or(true) || name == "tests" || name.ends_with("_tests") {
                continue;
            }
            let module = room(&file);
            let text = fs::read_to_string(&p).unwrap();
            let code: String = text
                .lines()
                .take_while(|l| l.trim() != "#[cfg(test)]")
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let code = as_core_paths(&code, root);
            g.entry(module).or_insert_with(BTreeSet::new).extend(imports(&file, &code));
        }
    }
}

/// The crate boundaries hold the top layer: core depends on neither crate above
/// it, and the CNI verbs and the tools each on core only, never on each other.
#[test]
fn crates_follow_the_layers() {
    let deps = |krate: &str| -> Vec<String> {
        let toml = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(krate).join("Cargo.toml")).unwrap();
        let section = toml.split("[dependencies]").nth(1).unwrap_or("").split("\n[").next().unwrap();
        section.lines().filter_map(|l| l.split(['=', '.']).next()).map(str::trim).filter(|n| n.starts_with("ebpf-masq")).map(String::from).collect()
    };
    assert_eq!(deps("core"), Vec::<String>::new());
    assert_eq!(deps("cni"), ["ebpf-masq-core"]);
    assert_eq!(deps("tools"), ["ebpf-masq-core"]);
    // And each crate holds its layer's rooms only: the tools nothing but cli::*, core no cli or cni.
    let g = graph();
    assert!(g.keys().all(|m| (rank(m) == 5) == (m.starts_with("cli") || m == "cni")), "{:?}", g.keys());
}

#[test]
fn layers_point_down() {
    let g = graph();
    // LAYERS_PRINT=1 cargo test --test layers -- --nocapture: the rooms and what each imports.
    if std::env::var_os("LAYERS_PRINT").is_some() {
        for (m, deps) in &g {
            println!("{m} (layer {}) -> {}", rank(m), deps.iter().cloned().collect::<Vec<_>>().join(", "));
        }
    }
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

/// A circle in `g` (a module and what it imports), if there is one: depth-first search, a back edge is a circle.
fn circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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
    g.keys().find_map(|m| visit(m, g, &mut state, &mut Vec::new()))
}

#[test]
fn no_import_circle() {
    if let Some(circle) = circle(&graph()) {
        panic!("import circle: {}", circle.join(" -> "));
    }
}

/// The modules of integration/lab/ (the package `lab`) that `code` imports, wherever the
/// import stands (one inside a function closes a circle all the same): `from .x import ...`,
/// `from . import x, y`, `from lab.x import ...`, `from lab import x`, `import lab.x`.
/// `modules` are the package's modules; a name that is none of them (a function) is no edge.
fn python_imports(modules: &BTreeSet<String>, code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let lines: Vec<&str> = code.lines().map(|l| l.split('#').next().unwrap().trim()).collect();
    for (i, line) in lines.iter().enumerate() {
        let mut stmt = line.to_string();
        if stmt.starts_with("from ") && stmt.contains("import (") {
            for l in &lines[i + 1..] {
                if stmt.contains(')') {
                    break;
                }
                stmt = format!("{stmt} {l}");
            }
        }
        let names = |list: &str| -> Vec<String> {
            let list = list.trim().trim_start_matches('(');
            list.split([',', ')']).filter_map(|n| n.split_whitespace().next()).map(str::to_string).collect()
        };
        let found: Vec<String> = if let Some(rest) = stmt.strip_prefix("import ") {
            rest.split(',').filter_map(|n| n.trim().strip_prefix("lab.")).map(|n| n.split(['.', ' ']).next().unwrap().to_string()).collect()
        } else if let Some(rest) = stmt.strip_prefix("from ") {
            let Some((from, list)) = rest.split_once(" import ") else { continue };
            match from.trim() {
                "." | "lab" => names(list),
                f => f.strip_prefix('.').or_else(|| f.strip_prefix("lab.")).map(|m| m.split('.').next().unwrap().to_string()).into_iter().collect(),
            }
        } else {
            continue;
        };
        out.extend(found.into_iter().filter(|m| modules.contains(m)));
    }
    out
}

/// integration/lab's modules and which of them each imports.
fn lab_graph() -> BTreeMap<String, BTreeSet<String>> {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../integration/lab");
    let files: BTreeMap<String, String> = (fs::read_dir(&lab).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), fs::read_to_string(&p).unwrap()))
        .collect();
    let modules: BTreeSet<String> = files.keys().filter(|m| *m != "__init__").cloned().collect();
    (files.iter())
        .map(|(m, code)| {
            let mut deps = python_imports(&modules, code);
            deps.remove(m);
            (m.clone(), deps)
        })
        .collect()
}

#[test]
fn integration_labs_have_no_import_circle() {
    let g = lab_graph();
    assert!(g.len() > 10 && g["netlab"].contains("masqcli") && g["duallab"].contains("netlab"), "{g:?}");
    if let Some(circle) = circle(&g) {
        panic!("import circle in integration/lab: {}", circle.join(" -> "));
    }
}

#[test]
fn the_python_reader_sees_a_circle() {
    let modules = set(&["netlab", "masqcli", "abi", "hold", "peer"]);
    let code = "from . import masqcli  # the CLI\nfrom .abi import LAYOUT\nimport json\nfrom lab.hold import (hold as tcp_hold,\n    release)\n\
                def f():\n    from lab import peer, sh\n    import lab.netlab as n\n    from .netlab_extra import x\n";
    assert_eq!(python_imports(&modules, code), set(&["masqcli", "abi", "hold", "peer", "netlab"]));
    // masqcli's lazy `from .netlab import LAYOUT` of old, with netlab's `from . import masqcli`.
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("netlab", python_imports(&modules, "from . import masqcli\n")),
        ("masqcli", python_imports(&modules, "import json\n\ndef events_ctl(topo):\n    from .netlab import LAYOUT\n")),
        ("abi", BTreeSet::new()),
    ]
    .into_iter()
    .map(|(m, d)| (m.to_string(), d))
    .collect();
    assert_eq!(circle(&g), Some(vec!["masqcli".to_string(), "netlab".to_string(), "masqcli".to_string()]));
    let fixed: BTreeMap<String, BTreeSet<String>> =
        [("netlab", set(&["masqcli"])), ("masqcli", set(&["abi"])), ("abi", set(&[]))].into_iter().map(|(m, d)| (m.to_string(), d)).collect();
    assert_eq!(circle(&fixed), None);
}

#[test]
fn the_reader_sees_what_a_file_imports() {
    let code = "use crate::{\n    bpf::{abi::{self, X}, loader::Pins, maps},\n    error::Result,\n    node, pod,\n};\nlet x = crate::cli::readers::f();";
    let got = imports(&path("node::adopt"), code);
    let want: BTreeSet<String> =
        ["bpf::abi", "bpf::loader", "bpf::maps", "error", "node", "pod", "cli::readers"].iter().map(|s| s.to_string()).collect();
    assert_eq!(got, want);
    assert_eq!(imports(&path("bpf::nat"), "use super::{abi, pins::Pins};"), set(&["bpf::abi", "bpf::pins"]));
    // A file of a room: its siblings are the room itself; super::super reaches the folder's other rooms.
    let code = "use super::packet::Packet;\nuse super::super::readers::{self, PodRow};\nlet n = super::super::status::f();";
    assert_eq!(imports(&path("cli::explain::decide"), code), set(&["cli::readers", "cli::status"]));
    assert_eq!(imports(&path("cli::explain"), "use super::readers;"), set(&["cli::readers"]));
}

fn path(m: &str) -> Vec<String> {
    m.split("::").map(str::to_string).collect()
}

fn set(xs: &[&str]) -> BTreeSet<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

/// The data plane's C files (bpf/*.c, bpf/lib/**, bpf/include/), relative to bpf/, with the
/// files each `#include "..."`s (resolved from its own folder).
fn c_include_graph() -> BTreeMap<String, BTreeSet<String>> {
    let bpf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bpf").canonicalize().unwrap();
    let mut files = Vec::new();
    let mut dirs = vec![bpf.clone()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "c" || x == "h") {
                files.push(path);
            }
        }
    }
    let name = |p: &Path| p.strip_prefix(&bpf).unwrap().to_string_lossy().into_owned();
    (files.iter())
        .map(|f| {
            let deps = (fs::read_to_string(f).unwrap().lines())
                .filter_map(|l| l.trim_start().strip_prefix("#include \""))
                .filter_map(|rest| rest.split('"').next())
                .map(|inc| {
                    let target = f.parent().unwrap().join(inc);
                    let target = target.canonicalize().unwrap_or_else(|e| panic!("{}: #include \"{inc}\": {e}", name(f)));
                    name(&target)
                })
                .collect();
            (name(f), deps)
        })
        .collect()
}

#[test]
fn c_headers_have_no_include_circle() {
    let g = c_include_graph();
    assert!(g.len() > 20 && g["uplink.c"].contains("lib/nat/nat.h") && g["lib/drop.h"].contains("lib/events.h"), "{g:?}");
    if let Some(circle) = circle(&g) {
        panic!("include circle in bpf/: {}", circle.join(" -> "));
    }
    // The circle there was: maps.h included events.h at its end, for drop_pkt; events.h used maps.h.
    let mut old = g.clone();
    old.get_mut("lib/maps.h").unwrap().insert("lib/events.h".into());
    assert!(circle(&old).is_some());
}

/// Every header but the engine's templates compiles alone (clang -fsyntax-only, as
/// build.rs compiles): none leans on what an earlier include happened to bring.
#[test]
fn c_headers_compile_on_their_own() {
    let g = c_include_graph();
    let bpf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bpf");
    let multiarch = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let compile = |header: &Path| {
        std::process::Command::new(std::env::var("CLANG").unwrap_or_else(|_| "clang".into()))
            .args(["-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-function", "-Wno-unused-const-variable", "-Wno-undefined-internal", "-target", "bpf", &multiarch, "-x", "c"])
            .arg(header)
            .output()
            .expect("clang (build.rs needs it too)")
    };
    let headers: Vec<&String> = g.keys().filter(|f| f.ends_with(".h") && !f.ends_with("_tmpl.h")).collect();
    assert!(headers.len() > 15, "{headers:?}");
    let failed: Vec<String> = (headers.iter())
        .filter_map(|h| {
            let out = compile(&bpf.join(h));
            (!out.status.success()).then(|| format!("{h}:\n{}", String::from_utf8_lossy(&out.stderr)))
        })
        .collect();
    assert!(failed.is_empty(), "{} header(s) do not compile alone:\n{}", failed.len(), failed.join("\n"));
    // events.h as it was (it used maps.h's count_add and maps without including it) fails.
    let events = fs::read_to_string(bpf.join("lib/events.h")).unwrap();
    let old = events.replacen("#include \"maps.h\"\n", "", 1);
    assert_ne!(old, events, "events.h no longer includes maps.h: update this check");
    let tmp = std::env::temp_dir().join(format!("em-layers-{}", std::process::id()));
    fs::create_dir_all(tmp.join("lib")).unwrap();
    fs::write(tmp.join("lib/events.h"), old).unwrap();
    let out = std::process::Command::new(std::env::var("CLANG").unwrap_or_else(|_| "clang".into()))
        .args(["-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-function", "-Wno-unused-const-variable", "-Wno-undefined-internal", "-target", "bpf", &multiarch, "-x", "c"])
        .arg(format!("-I{}", bpf.join("lib").display()))
        .arg(tmp.join("lib/events.h"))
        .output()
        .unwrap();
    fs::remove_dir_all(&tmp).unwrap();
    assert!(!out.status.success(), "events.h without maps.h compiled alone");
}
