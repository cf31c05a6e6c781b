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
//!
//! The checks: files.rs (files, layouts, the test table, diaries, ports), keys.rs
//! (keys, the config table, memory, keys users set), design.rs (docs/design.md's
//! words table and code map); here, what they share and the tests.

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

mod design;
mod files;
mod keys;

use design::*;
use files::*;
use keys::*;

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
         Fine: `plugin/cni/src/lib.rs`, bpf/lib/fastpath*.h, `scripts/<name>.sh`, net/netfilter/nf_nat_core.c,\n\
         /sys/fs/bpf/ebpf-masq, [c](nat.md#limits), [d](../integration/README.md), [e](#fine), status.rs.\n\n## Fine\n",
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
    let broken = testing.replace("| `plugin/tests/docs/main.rs` |", "| plugin/tests/docs/main.rs |");
    let got =
        more(check_test_table(&doc("docs/testing.md", &broken), &repo), check_test_table(&doc("t", &testing), &repo));
    assert_eq!(got, ["docs/testing.md: the table has no row for plugin/tests/docs/main.rs"]);
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
         \x20 main.rs, gone.rs      prose, with status and nat_list as words; tests.rs is no file here; bench/\n\
         plugin/cni/src/\n\
         \x20 lib.rs                the verbs\n\
         plugin/tools/src/       one room a command: status, nat_gone, explain/ (packet, decide),\n\
         \x20                       metrics (tiny_http, prometheus), agent/ (uninstall), lib.rs\n\
         plugin/core/src/\n\
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
    let want = ["plugin/src/gone.rs", "plugin/src/tests.rs", "plugin/src/bench/", "plugin/tools/src/nat_gone", "bpf/lib/nat/nope.h", "bpf/lib/gone.h", "scripts/gone.sh"];
    assert_eq!(gone, want, "{got:#?}");
    assert!(seen > 20, "{seen}");
    let unnamed = |f: &str| unnamed.iter().any(|d| d.ends_with(&format!(" does not name {f}")));
    for f in ["plugin/tools/src/nat_list.rs", "plugin/tools/src/explain/lookups.rs", "plugin/core/src/bpf/abi/btf.rs", "bpf/lib/nat/gc.h", "integration/lab/masqcli.py"] {
        assert!(unnamed(f), "{f} is named nowhere, and the check missed it: {got:#?}");
    }
    for f in [
        "plugin/cni/src/lib.rs", "plugin/tools/src/status.rs", "plugin/tools/src/lib.rs", "plugin/tools/src/explain/mod.rs",
        "plugin/tools/src/explain/packet.rs", "plugin/tools/src/metrics/mod.rs", "plugin/tools/src/agent.rs",
        "plugin/tools/src/agent/uninstall.rs", "plugin/core/src/bpf/abi/mod.rs", "plugin/core/src/bpf/sys.rs", "bpf/include/masq_abi.h",
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
