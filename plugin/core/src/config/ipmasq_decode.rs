//! ip-masq-agent's file as its Go code hands it to its struct: apimachinery's
//! `yaml.ToJSON` (the bytes as they are when they start with `{`, otherwise
//! sigs.k8s.io/yaml: the first YAML document read by go-yaml v2, then
//! `json.Marshal`), then `encoding/json`. What reaches the struct is a sequence of
//! (key, value) pairs in the order encoding/json visits them; [`decode`] returns
//! that sequence and [`go_field`] says which field a key lands in.
//!
//! The order decides which of two spellings of a key wins (the last one applied):
//! JSON's pairs come in document order, duplicates and all. YAML's are a Go map
//! first (an exact duplicate keeps its last value, the earlier one is gone
//! whatever its type) and `json.Marshal` writes a map's keys sorted by bytes, so
//! `NonMasqueradeCIDRs` comes before `nonMasqueradeCIDRs` wherever each was written.
//!
//! go-yaml v2 reads YAML 1.1: an unquoted `yes`/`on`/`y` is true, `no`/`off`/`n`
//! false, `0100` octal, `1_000` a thousand; a `<<` key merges a mapping in.
//! serde_yaml_ng reads YAML 1.2, so such plain scalars are resolved here again.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The top of the file, as Go's decoder meets it.
#[derive(Debug)]
pub(super) enum Decoded {
    /// A mapping's pairs in the order they are applied (a null or empty document: none).
    Pairs(Vec<(String, Value)>),
    /// Anything else (a list, a string): encoding/json refuses it.
    NotAMapping(Value),
}

/// Which reader the bytes went through; numbers differ: `json.Marshal` writes a
/// YAML float 64.0 as `64`, which an int field takes, while JSON's `64.0` is refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Syntax {
    Json,
    Yaml,
}

/// The bytes' top-level pairs in the order Go applies them; Err: a syntax error.
pub(super) fn decode(text: &str) -> Result<(Syntax, Decoded), String> {
    if text.trim_start().starts_with('{') {
        let mut de = serde_json::Deserializer::from_str(text);
        let top = JsonTop.deserialize(&mut de).and_then(|t| de.end().map(|()| t));
        return top.map(|t| (Syntax::Json, t)).map_err(|e| format!("failed to decode ip-masq-agent config as JSON: {e}"));
    }
    let yaml_err = |e: serde_yaml_ng::Error| format!("failed to decode ip-masq-agent config as YAML: {e}");
    // go-yaml's Unmarshal reads the first document only.
    let Some(doc) = serde_yaml_ng::Deserializer::from_str(text).next() else {
        return Ok((Syntax::Yaml, Decoded::Pairs(Vec::new())));
    };
    let top = match (Yaml11 { text }).deserialize(doc).map_err(yaml_err)? {
        Value::Null => Decoded::Pairs(Vec::new()),
        Value::Object(m) => {
            let mut pairs: Vec<(String, Value)> = m.into_iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Decoded::Pairs(pairs)
        }
        other => Decoded::NotAMapping(other),
    };
    Ok((Syntax::Yaml, top))
}

/// The field of `fields` that encoding/json decodes `key` into: the exact name,
/// else the one equal to it under Unicode simple case folding (ASCII letters in
/// any case, and the two non-ASCII letters that fold to ASCII: `ſ` to s and the
/// Kelvin sign to k). None: no field takes it, and Go ignores it.
pub(super) fn go_field(key: &str, fields: &[&'static str]) -> Option<&'static str> {
    if let Some(f) = fields.iter().find(|f| **f == key) {
        return Some(f);
    }
    let fold = |c: char| match c {
        '\u{17F}' => 's',
        '\u{212A}' => 'k',
        c => c.to_ascii_lowercase(),
    };
    fields.iter().copied().find(|f| key.chars().map(fold).eq(f.chars().map(|c| c.to_ascii_lowercase())))
}

/// A JSON document's top: its object's pairs in document order, duplicates kept
/// (encoding/json applies each one in turn).
struct JsonTop;

impl<'de> DeserializeSeed<'de> for JsonTop {
    type Value = Decoded;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Decoded, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonTop {
    type Value = Decoded;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let mut pairs = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            pairs.push((k, map.next_value::<Value>()?));
        }
        Ok(Decoded::Pairs(pairs))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Decoded, E> {
        Ok(Decoded::Pairs(Vec::new()))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Decoded, E> {
        Ok(Decoded::NotAMapping(Value::Bool(v)))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Decoded, E> {
        Ok(Decoded::NotAMapping(v.into()))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Decoded, E> {
        Ok(Decoded::NotAMapping(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Decoded, E> {
        Ok(Decoded::NotAMapping(v.into()))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Decoded, E> {
        Ok(Decoded::NotAMapping(v.into()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Decoded, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            out.push(v);
        }
        Ok(Decoded::NotAMapping(Value::Array(out)))
    }
}

/// A YAML node as go-yaml v2 and sigs.k8s.io/yaml make it into JSON: plain
/// scalars resolved as YAML 1.1, mapping keys as strings, a duplicate key's
/// last value, `<<` merges. `text` is the whole input: a plain scalar is told
/// from a quoted one by where serde_yaml_ng borrows it from (a quoted scalar's
/// text follows its quote; one with escapes is not borrowed at all).
#[derive(Clone, Copy)]
struct Yaml11<'a> {
    text: &'a str,
}

impl Yaml11<'_> {
    fn is_plain(&self, s: &str) -> bool {
        let (start, p) = (self.text.as_ptr() as usize, s.as_ptr() as usize);
        if p < start || p + s.len() > start + self.text.len() {
            return false; // not borrowed from the input: quoted with escapes, or a block scalar
        }
        let off = p - start;
        off == 0 || !matches!(self.text.as_bytes()[off - 1], b'"' | b'\'')
    }
}

impl<'de> DeserializeSeed<'de> for Yaml11<'de> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Yaml11<'de> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    // Beyond 64 bits go-yaml falls back to a float.
    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(float(v as f64))
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(float(v as f64))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        if !v.is_finite() {
            return Err(E::custom(format!("{v} has no JSON form (sigs.k8s.io/yaml refuses it)")));
        }
        Ok(float(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Value, E> {
        Ok(self.is_plain(v).then(|| resolve_yaml11(v)).flatten().unwrap_or_else(|| Value::String(v.to_owned())))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(YamlKey(self))? {
            let v = map.next_value_seed(self)?;
            match key {
                // go-yaml v2 sets the merged keys where `<<` stands: they replace
                // keys written before it, keys written after it replace them.
                YamlKeyOf::Merge => match v {
                    Value::Object(m) => out.extend(m),
                    Value::Array(maps) if maps.iter().all(Value::is_object) => {
                        // Earlier mappings take precedence: applied last.
                        for m in maps.into_iter().rev() {
                            if let Value::Object(m) = m {
                                out.extend(m);
                            }
                        }
                    }
                    _ => return Err(A::Error::custom("map merge requires a mapping or a list of mappings as the value")),
                },
                YamlKeyOf::Key(k) => {
                    out.insert(k, v);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

enum YamlKeyOf {
    Key(String),
    /// A plain `<<`.
    Merge,
}

/// A mapping key as sigs.k8s.io/yaml writes it into JSON: a string; a number or
/// boolean as its text; a null key is refused there.
struct YamlKey<'a>(Yaml11<'a>);

impl<'de> DeserializeSeed<'de> for YamlKey<'de> {
    type Value = YamlKeyOf;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<YamlKeyOf, D::Error> {
        let is_merge = std::cell::Cell::new(false);
        let v = d.deserialize_any(KeyProbe { inner: self.0, is_merge: &is_merge })?;
        if is_merge.get() {
            return Ok(YamlKeyOf::Merge);
        }
        Ok(YamlKeyOf::Key(match v {
            Value::String(s) => s,
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Null => return Err(D::Error::custom("a null mapping key (sigs.k8s.io/yaml refuses it)")),
            _ => return Err(D::Error::custom("a mapping key that is not a scalar")),
        }))
    }
}

struct KeyProbe<'a, 'c> {
    inner: Yaml11<'a>,
    is_merge: &'c std::cell::Cell<bool>,
}

impl<'de> Visitor<'de> for KeyProbe<'de, '_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }
    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Value, E> {
        if v == "<<" && self.inner.is_plain(v) {
            self.is_merge.set(true);
        }
        self.inner.visit_borrowed_str(v)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.inner.visit_str(v)
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.inner.visit_bool(v)
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.inner.visit_i64(v)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.inner.visit_u64(v)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.inner.visit_f64(v)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

fn float(v: f64) -> Value {
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// go-yaml v2's resolution of a plain scalar that YAML 1.2 left a string: the
/// YAML 1.1 booleans, and integers as Go's `strconv.ParseInt(s, 0, 64)` reads
/// them once underscores are gone (`0x`, `0o`, `0b`, and a leading 0 for octal;
/// digits that are no octal number are a decimal float there). None: a string.
fn resolve_yaml11(s: &str) -> Option<Value> {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Some(Value::Bool(true)),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Some(Value::Bool(false)),
        _ => {}
    }
    if !s.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-') {
        return None;
    }
    let plain = s.replace('_', "");
    let (neg, body) = match plain.as_bytes().first() {
        Some(b'-') => (true, &plain[1..]),
        Some(b'+') => (false, &plain[1..]),
        _ => (false, plain.as_str()),
    };
    let (radix, digits) = match body.get(..2) {
        Some("0x" | "0X") => (16, &body[2..]),
        Some("0o" | "0O") => (8, &body[2..]),
        Some("0b" | "0B") => (2, &body[2..]),
        _ if body.len() > 1 && body.starts_with('0') => (8, &body[1..]),
        _ => (10, body),
    };
    if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        if let Ok(m) = u128::from_str_radix(digits, radix) {
            let v = if neg { -(m as i128) } else { m as i128 };
            if let Ok(i) = i64::try_from(v) {
                return Some(i.into());
            }
            if let Ok(u) = u64::try_from(v) {
                return Some(u.into());
            }
        }
    }
    // Not an integer: go-yaml then takes a plain decimal float (`08` is 8).
    if !body.is_empty() && body.chars().all(|c| c.is_ascii_digit()) {
        return plain.parse::<f64>().ok().filter(|f| f.is_finite()).map(float);
    }
    None
}
