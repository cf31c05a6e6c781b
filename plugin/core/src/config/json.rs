//! JSON decoding that remembers duplicated keys.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::error::{code, Error, Result};

use super::diag::key_display;
use super::keys::MASQ_KEYS;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

#[derive(Default)]
struct Tracker {
    stack: Vec<Seg>,
    dups: Vec<Vec<Seg>>,
}

/// Builds a `serde_json::Value` like its own `Deserialize` does, but records
/// the path of every key that occurs twice in the same object (serde_json
/// silently keeps the last one).
#[derive(Clone, Copy)]
struct Seed<'a>(&'a RefCell<Tracker>);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            self.0.borrow_mut().stack.push(Seg::Index(out.len()));
            let next = seq.next_element_seed(self);
            self.0.borrow_mut().stack.pop();
            match next? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            self.0.borrow_mut().stack.push(Seg::Key(k.clone()));
            let v = map.next_value_seed(self);
            {
                let mut t = self.0.borrow_mut();
                if v.is_ok() && out.contains_key(&k) {
                    let path = t.stack.clone();
                    t.dups.push(path);
                }
                t.stack.pop();
            }
            out.insert(k, v?);
        }
        Ok(Value::Object(out))
    }
}

pub(super) fn parse_json(bytes: &[u8]) -> Result<(Value, Vec<Vec<Seg>>)> {
    let tracker = RefCell::new(Tracker::default());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Seed(&tracker)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| {
            Error::new(
                code::DECODE_FAILURE,
                format!("failed to decode network config as JSON: {e}"),
            )
        })?;
    Ok((v, tracker.into_inner().dups))
}

fn fmt_path(segs: &[Seg]) -> String {
    let mut s = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(&key_display(k));
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

pub(super) fn duplicate_error(path: &[Seg]) -> Error {
    Error::config(
        &fmt_path(path),
        "key appears more than once in the same object; only one may be given",
    )
}

/// Duplicates that matter below `prefix`: any top-level key, and anything
/// inside our own keys.  Duplicates inside standard keys (prevResult,
/// runtimeConfig, ...) belong to others and are left alone.
pub(super) fn check_dups(dups: &[Vec<Seg>], prefix: &[Seg]) -> Result<()> {
    for d in dups {
        let Some(rel) = d.strip_prefix(prefix) else {
            continue;
        };
        let relevant = match rel.first() {
            Some(Seg::Key(k)) => rel.len() == 1 || MASQ_KEYS.contains(&k.as_str()),
            _ => false,
        };
        if relevant {
            return Err(duplicate_error(rel));
        }
    }
    Ok(())
}
