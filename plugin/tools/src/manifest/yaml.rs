//! A YAML writer for Kubernetes manifests built as `serde_json::Value`s, with
//! comments: serde_yaml_ng writes the same data but cannot write a comment, and
//! the DaemonSet's comments say why each setting is there.
//!
//! The output is the block style `kubectl` users read: two spaces a level,
//! sequences indented under their key, multi-line strings as literal blocks,
//! keys in the order they were inserted (serde_json's `preserve_order`). A
//! string is written plain only when every YAML reader takes it back as that
//! string (YAML 1.2, and 1.1 as go-yaml and PyYAML read `yes`, `on`, `1.5`, ...);
//! otherwise it is a JSON (double-quoted) string, which YAML reads as such.
//! Deterministic: the same value and comments give the same bytes.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// One document and its comments. A comment's path names what it stands before:
/// keys and sequence indexes joined by '.', e.g. `spec.template.spec.tolerations.0`
/// (the first toleration) or `data.ebpf-masq.json`; "" is the document itself.
pub struct Doc {
    pub value: Value,
    pub comments: Vec<(String, String)>,
}

impl Doc {
    pub fn new(value: Value) -> Self {
        Doc { value, comments: Vec::new() }
    }

    /// Add a comment before `path` (several lines: '\n' in `text`).
    pub fn comment(mut self, path: &str, text: &str) -> Self {
        self.comments.push((path.to_string(), text.to_string()));
        self
    }
}

/// The documents as one stream: `header` (comment lines) first, then the
/// documents separated by `---`. Also returns the comment paths that matched
/// nothing (a misspelt path would silently drop its comment; tests check it).
pub fn render(header: &str, docs: &[Doc]) -> (String, Vec<String>) {
    let mut w = Writer { out: String::new(), comments: &[], used: BTreeSet::new() };
    comment_lines(&mut w.out, 0, header);
    let mut unused = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        if i > 0 {
            w.out.push_str("---\n");
        }
        w.comments = &d.comments;
        w.used.clear();
        w.comment_at("", 0);
        match &d.value {
            Value::Object(m) if !m.is_empty() => w.map(m, "", 0),
            other => {
                w.out.push_str(&scalar(other));
                w.out.push('\n');
            }
        }
        unused.extend(d.comments.iter().map(|(p, _)| p).filter(|p| !w.used.contains(p.as_str())).cloned());
    }
    (w.out, unused)
}

struct Writer<'a> {
    out: String,
    comments: &'a [(String, String)],
    used: BTreeSet<String>,
}

impl Writer<'_> {
    fn comment_at(&mut self, path: &str, indent: usize) {
        for (p, text) in self.comments {
            if p == path {
                comment_lines(&mut self.out, indent, text);
                self.used.insert(p.clone());
            }
        }
    }

    /// A mapping whose keys start at column `indent`; the first key is written
    /// at the current position when the line is already begun (a `- ` item).
    fn map(&mut self, m: &Map<String, Value>, path: &str, indent: usize) {
        for (i, (k, v)) in m.iter().enumerate() {
            let p = join(path, k);
            let continues_item = i == 0 && !self.out.is_empty() && !self.out.ends_with('\n');
            if !continues_item {
                self.comment_at(&p, indent);
                pad(&mut self.out, indent);
            }
            self.out.push_str(&scalar(&Value::String(k.clone())));
            self.out.push(':');
            self.value_after_key(v, &p, indent);
        }
    }

    /// What follows `key:`: a scalar on the same line, or a block below it.
    fn value_after_key(&mut self, v: &Value, path: &str, indent: usize) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                self.out.push('\n');
                self.map(m, path, indent + 2);
            }
            Value::Array(a) if !a.is_empty() => {
                self.out.push('\n');
                self.seq(a, path, indent + 2);
            }
            Value::String(s) if block_ok(s) => self.block(s, indent + 2),
            _ => {
                self.out.push(' ');
                self.out.push_str(&scalar(v));
                self.out.push('\n');
            }
        }
    }

    fn seq(&mut self, a: &[Value], path: &str, indent: usize) {
        for (i, v) in a.iter().enumerate() {
            let p = join(path, &i.to_string());
            self.comment_at(&p, indent);
            pad(&mut self.out, indent);
            self.out.push_str("- ");
            match v {
                Value::Object(m) if !m.is_empty() => self.map(m, &p, indent + 2),
                Value::Array(inner) if !inner.is_empty() => {
                    self.out.push('\n');
                    self.seq(inner, &p, indent + 2);
                }
                Value::String(s) if block_ok(s) => {
                    self.out.pop(); // "- |", not "-  |"
                    self.block(s, indent + 2);
                }
                _ => {
                    self.out.push_str(&scalar(v));
                    self.out.push('\n');
                }
            }
        }
    }

    /// A literal block scalar: `|` keeps one final newline, `|-` none, `|+` all.
    fn block(&mut self, s: &str, indent: usize) {
        let body = s.trim_end_matches('\n');
        let chomp = match s.len() - body.len() {
            0 => "-",
            1 => "",
            _ => "+",
        };
        self.out.push_str(&format!(" |{chomp}\n"));
        for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
            if !line.is_empty() {
                pad(&mut self.out, indent);
                self.out.push_str(line);
            }
            self.out.push('\n');
        }
    }
}

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_string()
    } else {
        format!("{path}.{seg}")
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn comment_lines(out: &mut String, indent: usize, text: &str) {
    for line in text.lines() {
        pad(out, indent);
        out.push('#');
        if !line.is_empty() {
            out.push(' ');
            out.push_str(line);
        }
        out.push('\n');
    }
}

/// A multi-line string that a literal block holds exactly: printable, its
/// first line not indented (that would need an indentation indicator) and no
/// line ending in a space (invisible, and easily lost by editors).
fn block_ok(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && !s.chars().any(|c| c.is_control() && c != '\n')
        && !s.lines().any(|l| l.ends_with(' '))
}

/// A scalar (or an empty collection) on one line.
pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if plain_ok(s) => s.clone(),
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        // JSON's null, booleans, numbers and double-quoted strings are YAML's too.
        other => other.to_string(),
    }
}

/// serde_yaml_ng writes the string plain (so YAML 1.2 reads it back as this
/// string) and a YAML 1.1 reader would not take it for a boolean, a null or a
/// number either.
fn plain_ok(s: &str) -> bool {
    const YAML11_WORDS: &[&str] = &["y", "yes", "n", "no", "true", "false", "on", "off", "null", "~"];
    if s.is_empty() || YAML11_WORDS.contains(&s.to_ascii_lowercase().as_str()) {
        return false;
    }
    // Anything that starts like a number and holds only what numbers are made
    // of (digits, signs, '.', '_', ':' of sexagesimals, exponents, radix
    // prefixes, hex digits) is quoted, whatever a given reader makes of it.
    let numeric_start = s.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c));
    if numeric_start && s.chars().all(|c| c.is_ascii_hexdigit() || "+-._:xXoO".contains(c)) {
        return false;
    }
    serde_yaml_ng::to_string(s).is_ok_and(|t| t.strip_suffix('\n') == Some(s))
}
