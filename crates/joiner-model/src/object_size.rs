//! How large one object may be: what the API server stores.
//!
//! kube-apiserver refuses a request body over 3 MiB and etcd a value over 1.5 MiB (its default
//! `--max-request-bytes`), so no object a cluster holds is larger than 1.5 MiB as JSON. A file
//! with a larger one was not read from a cluster and cannot be applied to one; Joiner refuses
//! it with an error naming it rather than holding it. A `List` (what `kubectl get -o yaml`
//! writes for many objects) is not an object: each of its items is measured.

use std::io;

use serde_json::Value;

use crate::{InputError, ObjectRef, Source};

/// The most bytes one object may take as compact JSON: 1.5 MiB, etcd's default request limit.
pub const MAX_OBJECT_BYTES: usize = 3 << 19;

/// Whether a text of `len` bytes could hold an object over the limit: compact JSON is rarely
/// more than twice the YAML it was written as (quoted keys), so only larger texts are measured.
pub(crate) fn may_hold_oversized(len: usize) -> bool {
    len > MAX_OBJECT_BYTES / 2
}

/// Checks the object (or each item of a `List`) of document `number` of `file` against
/// [`MAX_OBJECT_BYTES`].
pub(crate) fn check(file: &str, number: usize, value: &Value) -> Result<(), InputError> {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    match value.get("items").and_then(Value::as_array) {
        Some(items) if is_list => {
            for (i, item) in items.iter().enumerate() {
                check_one(file, number, item, &format!("items[{i}]"))?;
            }
            Ok(())
        }
        _ => check_one(file, number, value, "(the whole object)"),
    }
}

fn check_one(file: &str, number: usize, value: &Value, field: &str) -> Result<(), InputError> {
    let size = json_size(value);
    if size <= MAX_OBJECT_BYTES {
        return Ok(());
    }
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let metadata = value.get("metadata");
    let object = ObjectRef {
        kind: text(value.get("kind")).unwrap_or_default(),
        namespace: text(metadata.and_then(|m| m.get("namespace"))),
        name: text(metadata.and_then(|m| m.get("name"))).unwrap_or_default(),
    };
    Err(InputError::new(
        &Source::new(file, number),
        &object,
        field,
        format!(
            "{size} bytes as JSON: the API server stores objects of at most {MAX_OBJECT_BYTES} \
             bytes (1.5 MiB), so this one cannot come from or go to a cluster"
        ),
    ))
}

/// The length of `value` as compact JSON, counted without building the text.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config_map(name: &str, bytes: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": {"blob": "x".repeat(bytes)}})
    }

    #[test]
    fn an_object_over_one_and_a_half_mib_is_refused_by_name() {
        let err = check("big.yaml", 2, &config_map("big", 2 << 20)).unwrap_err();
        assert_eq!(err.origin, Source::new("big.yaml", 2));
        assert_eq!(err.object.to_string(), "ConfigMap/default/big");
        assert_eq!(err.field, "(the whole object)");
        assert!(err.message.contains("1572864 bytes (1.5 MiB)"), "{err}");
        assert!(check("ok.yaml", 1, &config_map("ok", 1 << 20)).is_ok());
    }

    #[test]
    fn a_list_is_measured_item_by_item() {
        let list = |items: Vec<Value>| json!({"apiVersion": "v1", "kind": "List", "items": items});
        // Three items of 0.75 MiB: 2.25 MiB in all, each within the limit.
        let fine = list(
            (0..3)
                .map(|i| config_map(&format!("c{i}"), 3 << 18))
                .collect(),
        );
        assert!(check("dump.yaml", 1, &fine).is_ok());
        let bad = list(vec![config_map("small", 10), config_map("huge", 2 << 20)]);
        let err = check("dump.yaml", 1, &bad).unwrap_err();
        assert_eq!(err.field, "items[1]");
        assert_eq!(err.object.to_string(), "ConfigMap/default/huge");
    }

    #[test]
    fn the_size_is_that_of_compact_json() {
        let v = json!({"a": [1, 2], "b": "c"});
        assert_eq!(json_size(&v), serde_json::to_vec(&v).unwrap().len());
    }
}
