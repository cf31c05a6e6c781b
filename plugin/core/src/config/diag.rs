//! Small helpers for error messages: keys and values as shown to the user,
//! the wrong-type and unknown-key errors, and the nearest known key.

use std::fmt;

use serde_json::{Map, Value};

use crate::error::{code, Error, Result};

/// A key as shown in an error message: escaped, and bounded in length.
pub(super) fn key_display(k: &str) -> String {
    let mut s: String = k
        .chars()
        .take(64)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if k.chars().count() > 64 {
        s.push_str("...");
    }
    s
}

/// A user string in an error message: quoted, escaped, bounded in length.
pub(super) fn quote(s: &str) -> String {
    let mut q: String = s.chars().take(80).collect();
    if s.chars().count() > 80 {
        q.push_str("...");
    }
    format!("{q:?}")
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {}", quote(s)),
        Value::Array(a) => format!("a list of {} element(s)", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

pub(super) fn wrong_type(key: &str, expected: &str, got: &Value) -> Error {
    Error::config(key, format!("expected {expected}, got {}", describe(got)))
}

pub(super) fn incompatible(key: &str, msg: impl fmt::Display) -> Error {
    let mut e = Error::config(key, msg);
    e.code = code::INCOMPATIBLE_VERSION;
    e
}

/// Rewrite `invalid config key "K"` to `invalid config key "PREFIXK"`.
pub(super) fn prefix_key(mut e: Error, prefix: &str) -> Error {
    const HEAD: &str = "invalid config key \"";
    if let Some(rest) = e.msg.strip_prefix(HEAD) {
        e.msg = format!("{HEAD}{prefix}{rest}");
    }
    e
}

pub(super) fn root_object(v: &Value) -> Result<&Map<String, Value>> {
    v.as_object().ok_or_else(|| {
        Error::new(
            code::INVALID_CONFIG,
            format!(
                "invalid network config: expected a JSON object, got {}",
                describe(v)
            ),
        )
    })
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The known key closest to a misspelt one, if any is close.
pub(super) fn suggest<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    if unknown.len() > 64 {
        return None;
    }
    let u = unknown.to_ascii_lowercase();
    known
        .map(|k| (levenshtein(&u, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

pub(super) fn unknown_key_error(path: &str, k: &str, known: &[&'static str]) -> Error {
    let hint = suggest(k, known.iter().copied())
        .map(|s| format!(" (did you mean \"{s}\"?)"))
        .unwrap_or_default();
    Error::config(
        path,
        format!(
            "unknown key{hint}; unknown keys are rejected so that a misspelt or renamed option \
             cannot be silently ignored"
        ),
    )
}

pub(super) fn expect_bool(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| wrong_type(key, "a boolean", v))
}

pub(super) fn expect_str<'a>(key: &str, v: &'a Value) -> Result<&'a str> {
    v.as_str().ok_or_else(|| wrong_type(key, "a string", v))
}
