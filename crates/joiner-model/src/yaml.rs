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

use crate::{InputError, ObjectRef, Source, object_size};

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
    let mut docs = Vec::new();
    for_each_document(file, text, |doc| {
        docs.push(doc);
        Ok(())
    })?;
    Ok(docs)
}

/// Calls `each` with the non-empty documents of `text` in order, as [`parse_yaml`] returns
/// them, parsing each only when the one before has been handed over: a caller that converts
/// and drops each document never holds a large file as one tree.
///
/// A stream is cut at its document markers (`---` at the start of a line, which YAML forbids
/// inside a document's content) and each piece parsed alone; a piece that is JSON is read by a
/// JSON parser, many times faster than a YAML one. A stream with anchors or directives, which
/// reach across or before its markers, is parsed whole, as is one with a piece that does not
/// parse, so that an error names its line in the file. An object larger than the API server
/// stores is an error (see [`object_size`]).
pub fn for_each_document(
    file: &str,
    text: &str,
    mut each: impl FnMut(Document) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut handed = 0;
    if let Some(pieces) = document_pieces(text) {
        let mut parsed_all = true;
        for piece in pieces {
            let Some(docs) = parse_piece(piece) else {
                parsed_all = false;
                break;
            };
            let measure = object_size::may_hold_oversized(piece.len());
            for doc in docs {
                handed += 1;
                if measure {
                    object_size::check(file, handed, &doc.value)?;
                }
                each(document(file, handed, doc))?;
            }
        }
        if parsed_all {
            return Ok(());
        }
    }
    // Parsed whole: the documents not handed over yet, or the error of the first bad one.
    let measure = object_size::may_hold_oversized(text.len());
    for (i, doc) in parse_stream(file, text)?
        .into_iter()
        .enumerate()
        .skip(handed)
    {
        if measure {
            object_size::check(file, i + 1, &doc.value)?;
        }
        each(document(file, i + 1, doc))?;
    }
    Ok(())
}

fn document(file: &str, number: usize, parsed: Tracked) -> Document {
    Document {
        origin: Source::new(file, number),
        value: parsed.value,
        duplicate_keys: parsed.duplicates,
    }
}

/// The non-empty documents of a whole stream, or its first syntax error with its line.
fn parse_stream(file: &str, text: &str) -> Result<Vec<Tracked>, InputError> {
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
    Ok(docs.into_iter().filter(|d| !d.value.is_null()).collect())
}

/// The non-empty documents of one piece of a stream: as JSON when it is JSON, else as YAML;
/// `None` when it parses as neither.
fn parse_piece(piece: &str) -> Option<Vec<Tracked>> {
    let as_json = || {
        serde_json::Deserializer::from_str(piece)
            .into_iter::<Tracked>()
            .collect::<Result<Vec<_>, _>>()
            .ok()
    };
    let docs = piece
        .trim_start()
        .starts_with(['{', '['])
        .then(as_json)
        .flatten()
        .or_else(|| {
            serde_saphyr::from_multiple_with_options(piece, yaml_options(piece.len())).ok()
        })?;
    Some(docs.into_iter().filter(|d| !d.value.is_null()).collect())
}

/// `text` cut before each line that starts a document (`---` alone or followed by a space or
/// tab), or `None` when it must be parsed whole: it has a directive (`%YAML`, which belongs to
/// the document after it) or may have an anchor (`&`; aliases reach back across pieces only
/// in invalid YAML, but the alias budget is counted per parse, so a stream with many pieces
/// of aliases would get many budgets).
fn document_pieces(text: &str) -> Option<Vec<&str>> {
    if text.contains('&') {
        return None;
    }
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with('%') {
            return None;
        }
        let marker = line
            .strip_prefix("---")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']));
        if marker && at > start {
            pieces.push(&text[start..at]);
            start = at;
        }
        at += line.len();
    }
    pieces.push(&text[start..]);
    Some(pieces)
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
fn yaml_options(len: usize) -> serde_saphyr::Options {
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

    /// The documents of `text` as the whole-stream parser reads them.
    fn whole(text: &str) -> Vec<(Value, Vec<String>)> {
        parse_stream("f.yaml", text)
            .unwrap()
            .into_iter()
            .map(|t| (t.value, t.duplicates))
            .collect()
    }

    fn piecewise(text: &str) -> Vec<(Value, Vec<String>)> {
        parse_yaml("f.yaml", text)
            .unwrap()
            .into_iter()
            .map(|d| (d.value, d.duplicate_keys))
            .collect()
    }

    #[test]
    fn a_stream_read_piece_by_piece_is_the_stream_read_whole() {
        let text = "# leading comment\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n\
                    --- # a marker with a comment\nmessage: |\n  line one\n  --- not a marker\n\
                    ---\n{\"kind\": \"Pod\", \"n\": 1.5, \"k\": 1, \"k\": 2}\n\
                    ---\r\nwindows: line\r\n---\n---\n[1, two]\n...\nafter: end\n";
        let docs = piecewise(text);
        assert_eq!(docs, whole(text));
        assert_eq!(docs.len(), 6, "{docs:?}");
        assert_eq!(docs[1].0["message"], "line one\n--- not a marker\n");
        assert_eq!(
            docs[2].1,
            ["k"],
            "a JSON document's repeated key is reported too"
        );
        let origins: Vec<usize> = parse_yaml("f.yaml", text)
            .unwrap()
            .iter()
            .map(|d| d.origin.document)
            .collect();
        assert_eq!(origins, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn every_example_reads_piece_by_piece_as_it_reads_whole() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut files = 0;
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "yaml" || e == "json") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    assert_eq!(piecewise(&text), whole(&text), "{}", path.display());
                    files += 1;
                }
            }
        }
        assert!(files > 50, "only {files} example files found");
    }

    #[test]
    fn an_error_in_a_later_document_names_its_line_in_the_file() {
        let text = "a: 1\n---\nb: 2\n---\nc: [unclosed\n";
        let e = parse_yaml("bad.yaml", text).unwrap_err();
        assert_eq!(e.origin.file, "bad.yaml");
        assert!(
            e.field.starts_with("line 5") || e.field.starts_with("line 6"),
            "{e}"
        );
        let mut seen = Vec::new();
        let e = for_each_document("bad.yaml", text, |d| {
            seen.push(d.value);
            Ok(())
        })
        .unwrap_err();
        assert!(e.field.starts_with("line "), "{e}");
        assert_eq!(
            seen.len(),
            2,
            "the documents before the bad one, each handed over once"
        );
    }

    #[test]
    fn anchors_and_directives_are_read_whole() {
        let text = "base: &b {x: 1}\n---\nother: 2\n";
        assert_eq!(document_pieces(text), None);
        assert_eq!(piecewise(text), whole(text));
        let text = "%YAML 1.2\n---\na: 1\n";
        assert_eq!(document_pieces(text), None);
        assert_eq!(piecewise(text)[0].0["a"], 1);
    }

    #[test]
    fn json_that_is_only_yaml_falls_back_to_the_yaml_reader() {
        // Flow YAML that looks like JSON: unquoted keys, a comment, a trailing comma.
        let text = "{a: 1, b: [x, y,],} # flow\n";
        assert_eq!(piecewise(text), whole(text));
        assert_eq!(piecewise(text)[0].0["b"][0], "x");
    }

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
