//! YAML text in, JSON values out, read the way `kubectl` reads it.
//!
//! Two things differ from a strict YAML reader, both because Kubernetes tooling takes such
//! files and real ones carry them:
//! - A mapping key written twice keeps its last value (the API server's decoder does the
//!   same and only warns), and the repeated keys are reported so the caller can warn, naming
//!   the object and the key's path.
//! - Parsing is bounded (nesting depth, alias expansion, event counts), so a hostile file such
//!   as an alias bomb fails fast instead of exhausting memory.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::{InputError, ObjectRef, Source};

/// One YAML document: its place, its value, and the keys it defined more than once.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub origin: Source,
    pub value: Value,
    /// Dotted paths (`spec.template.metadata.labels.NodePool`, `items[2].metadata.name`) of
    /// keys written twice in one mapping; the value kept is the last one written.
    pub duplicate_keys: Vec<String>,
}

/// Splits `text` into its YAML documents (JSON is YAML), skipping empty ones. Document numbers
/// in the returned [`Source`]s count the non-empty documents from 1.
pub fn parse_yaml(file: &str, text: &str) -> Result<Vec<Document>, InputError> {
    let docs: Vec<Tracked> =
        serde_saphyr::from_multiple_with_options(text, yaml_options(text.len())).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!("line {}, column {}", l.line(), l.column()))
                .unwrap_or_else(|| "YAML".to_string());
            InputError::new(
                &Source::new(file, 0),
                &ObjectRef::default(),
                at,
                format!("cannot parse YAML: {e}"),
            )
        })?;
    Ok(docs
        .into_iter()
        .filter(|d| !d.value.is_null())
        .enumerate()
        .map(|(i, d)| Document {
            origin: Source::new(file, i + 1),
            value: d.value,
            duplicate_keys: d.duplicates,
        })
        .collect())
}

/// [`parse_yaml`] without the duplicate-key report, for inputs that are not Kubernetes objects
/// (values files) and for tests.
pub fn parse_documents(file: &str, text: &str) -> Result<Vec<(Source, Value)>, InputError> {
    Ok(parse_yaml(file, text)?
        .into_iter()
        .map(|d| (d.origin, d.value))
        .collect())
}

/// Limits sized to the input: parse events cannot outnumber bytes by much, but alias replay
/// could, so it gets a fixed cap. Repeated keys are passed through to [`Tracked`], which keeps
/// the last and remembers the key.
pub fn yaml_options(len: usize) -> serde_saphyr::Options {
    let scaled = len.saturating_mul(8).saturating_add(65_536);
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = scaled;
    budget.max_nodes = scaled;
    budget.max_documents = scaled;
    budget.max_depth = 64;
    budget.max_aliases = 10_000;
    let mut opts = serde_saphyr::Options::default();
    opts.budget = Some(budget);
    opts.alias_limits.max_total_replayed_events = 200_000;
    opts.alias_limits.max_replay_stack_depth = 32;
    opts.with_snippet = false;
    opts.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    opts
}

/// A JSON value built from YAML, with the paths of the keys repeated inside it.
struct Tracked {
    value: Value,
    duplicates: Vec<String>,
}

impl Tracked {
    fn plain(value: Value) -> Self {
        Tracked {
            value,
            duplicates: Vec::new(),
        }
    }
}

impl<'de> Deserialize<'de> for Tracked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TrackedVisitor)
    }
}

struct TrackedVisitor;

impl<'de> Visitor<'de> for TrackedVisitor {
    type Value = Tracked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::Number(v.into())))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::Number(v.into())))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Tracked, E> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(v), _) => self.visit_i64(v),
            (_, Ok(v)) => self.visit_u64(v),
            _ => Err(E::custom(format!("integer {v} is out of range"))),
        }
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Tracked, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!("integer {v} is out of range"))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tracked, E> {
        // As serde_json does: a float JSON cannot hold becomes null.
        Ok(Tracked::plain(
            Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::String(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::String(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Tracked, E> {
        Ok(Tracked::plain(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Tracked, D::Error> {
        Tracked::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tracked, A::Error> {
        let mut items = Vec::new();
        let mut duplicates = Vec::new();
        while let Some(item) = seq.next_element::<Tracked>()? {
            let index = items.len();
            duplicates.extend(
                item.duplicates
                    .into_iter()
                    .map(|p| nest(&format!("[{index}]"), p)),
            );
            items.push(item.value);
        }
        Ok(Tracked {
            value: Value::Array(items),
            duplicates,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tracked, A::Error> {
        let mut entries = Map::new();
        let mut duplicates = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<Tracked>()?;
            duplicates.extend(value.duplicates.into_iter().map(|p| nest(&key, p)));
            // Only a repeated key is copied: every other key moves into the map.
            if entries.contains_key(&key) {
                duplicates.push(key.clone());
            }
            entries.insert(key, value.value);
        }
        Ok(Tracked {
            value: Value::Object(entries),
            duplicates,
        })
    }
}

/// `parent` then `child` as one path: `a.b`, `a[0]`, `[0].b`.
fn nest(parent: &str, child: String) -> String {
    if child.starts_with('[') {
        format!("{parent}{child}")
    } else {
        format!("{parent}.{child}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_is_reported_with_its_path() {
        let text = "metadata:\n  labels:\n    NodePool: a\n    team: x\n    NodePool: b\n\
                    items:\n- {k: 1, k: 2}\n---\nplain: 1\n";
        let docs = parse_yaml("f.yaml", text).unwrap();
        assert_eq!(docs[0].value["metadata"]["labels"]["NodePool"], "b");
        assert_eq!(docs[0].value["items"][0]["k"], 2);
        assert_eq!(
            docs[0].duplicate_keys,
            ["metadata.labels.NodePool", "items[0].k"]
        );
        assert!(docs[1].duplicate_keys.is_empty());
        assert_eq!(docs[1].origin, Source::new("f.yaml", 2));
    }

    #[test]
    fn scalars_read_as_json_reads_them() {
        let docs = parse_yaml("f.yaml", "a: 1\nb: -2\nc: 1.5\nd: true\ne: ~\nf: '7'\n").unwrap();
        assert_eq!(
            docs[0].value,
            serde_json::json!({"a": 1, "b": -2, "c": 1.5, "d": true, "e": null, "f": "7"})
        );
    }

    #[test]
    fn yaml_syntax_errors_name_file_and_line() {
        let e = parse_documents("bad.yaml", "a: 1\nb: [unclosed\n").unwrap_err();
        assert_eq!(e.origin.file, "bad.yaml");
        assert!(e.field.starts_with("line "), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse_documents("deep.yaml", &text).is_err());
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let e = parse_documents("bomb.yaml", &text).unwrap_err();
        assert!(e.message.contains("budget"), "{e}");
    }
}
