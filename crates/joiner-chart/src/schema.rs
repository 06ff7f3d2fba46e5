//! A structural OpenAPI v3 validator for CRD schemas, applying what the API server applies to a
//! custom resource: `type` (with `nullable`), `enum`, `pattern`, `minLength`/`maxLength`,
//! `minimum`/`maximum`, `minItems`/`maxItems`, `minProperties`/`maxProperties`, `properties`,
//! `required`, `additionalProperties`, `items`, `anyOf`, and the Kubernetes extensions
//! `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields` and
//! `x-kubernetes-validations` (CEL rules, evaluated with the `cel` crate with `self` bound to the
//! value; rules that read `oldSelf` are transition rules, checked by [`validate_update`] with
//! `oldSelf` bound to the stored value where the API server can correlate one: through object
//! properties, map entries and the items of `map` lists, not through other lists).
//!
//! Unknown fields are errors here, as with the API server's strict field validation (what
//! `kubectl apply` asks for), so a misspelt field in an example fails its test instead of being
//! silently pruned.
//!
//! Chosen over the `jsonschema` crate because CRD schemas are OpenAPI, not JSON Schema (the
//! `x-kubernetes-*` keywords, `nullable`), and because the CEL rules are half of what a CRD
//! checks: translating the schema would still leave both to hand-written code.

use std::collections::BTreeMap;

use serde_json::Value;

/// A field of an object that its schema rejects: the path from the object's root (such as
/// `spec.template.spec.requirements[0].operator`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SchemaError {
    pub field: String,
    pub message: String,
}

/// Every violation of `schema` by `value`, in document order; empty when it is valid.
pub fn validate(schema: &Value, value: &Value) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    check(schema, value, None, "", &mut errors);
    errors
}

/// Every violation of `schema` by `value` as an update of the stored `old`: what [`validate`]
/// finds, and the transition rules (those reading `oldSelf`) that fail, such as a NodeClaim's
/// immutable spec.
pub fn validate_update(schema: &Value, value: &Value, old: &Value) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    check(schema, value, Some(old), "", &mut errors);
    errors
}

/// The places where `schema` is not structural as the API server requires of a CRD schema:
/// every node has a `type` unless it is `x-kubernetes-int-or-string` or preserves unknown
/// fields, and `properties`/`additionalProperties`/`items` sit only under the matching type.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    structural(schema, "", &mut problems);
    problems
}

fn structural(schema: &Value, path: &str, problems: &mut Vec<String>) {
    let ty = schema.get("type").and_then(Value::as_str);
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    if ty.is_none() && !int_or_string && !preserve {
        problems.push(format!("{}: no type", display(path)));
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        if ty != Some("object") {
            problems.push(format!("{}: properties without type object", display(path)));
        }
        for (name, sub) in props {
            structural(sub, &join(path, name), problems);
        }
    }
    if let Some(sub) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        if schema.get("properties").is_some() {
            problems.push(format!(
                "{}: both properties and additionalProperties",
                display(path)
            ));
        }
        structural(sub, &format!("{path}[*]"), problems);
    }
    if let Some(items) = schema.get("items") {
        if ty != Some("array") {
            problems.push(format!("{}: items without type array", display(path)));
        }
        structural(items, &format!("{path}[*]"), problems);
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

fn push(errors: &mut Vec<SchemaError>, path: &str, message: impl Into<String>) {
    errors.push(SchemaError {
        field: display(path).to_string(),
        message: message.into(),
    });
}

fn type_matches(ty: &str, value: &Value) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => false,
    }
}

fn check(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<SchemaError>,
) {
    if value.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() {
            push(errors, path, "must not be null");
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            push(errors, path, "must be an integer or a string");
            return;
        }
    } else if let Some(ty) = schema.get("type").and_then(Value::as_str)
        && !type_matches(ty, value)
    {
        push(errors, path, format!("must be of type {ty}"));
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let listed: Vec<String> = options.iter().map(Value::to_string).collect();
        push(
            errors,
            path,
            format!("{value} is not one of {}", listed.join(", ")),
        );
    }
    if let Some(any_of) = schema.get("anyOf").and_then(Value::as_array)
        && !any_of
            .iter()
            .any(|s| validate_at(s, value, path).is_empty())
    {
        push(errors, path, "matches none of the allowed forms (anyOf)");
    }
    match value {
        Value::String(s) => check_string(schema, s, path, errors),
        Value::Number(n) => check_number(schema, n, path, errors),
        Value::Array(items) => check_array(schema, items, old, path, errors),
        Value::Object(map) => check_object(schema, map, old, path, errors),
        _ => {}
    }
    check_rules(schema, value, old, path, errors);
}

fn validate_at(schema: &Value, value: &Value, path: &str) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    check(schema, value, None, path, &mut errors);
    errors
}

fn check_string(schema: &Value, s: &str, path: &str, errors: &mut Vec<SchemaError>) {
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        push(errors, path, format!("must be at least {min} characters"));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        push(errors, path, format!("must be at most {max} characters"));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if re.is_match(s) => {}
            Ok(_) => push(errors, path, format!("{s:?} does not match {pattern:?}")),
            Err(e) => push(
                errors,
                path,
                format!("schema pattern {pattern:?} is invalid: {e}"),
            ),
        }
    }
}

fn check_number(schema: &Value, n: &serde_json::Number, path: &str, errors: &mut Vec<SchemaError>) {
    let Some(x) = n.as_f64() else { return };
    let exclusive_min = flag(schema, "exclusiveMinimum");
    let exclusive_max = flag(schema, "exclusiveMaximum");
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && (x < min || (exclusive_min && x == min))
    {
        push(errors, path, format!("{n} is below the minimum {min}"));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && (x > max || (exclusive_max && x == max))
    {
        push(errors, path, format!("{n} is above the maximum {max}"));
    }
}

fn check_array(
    schema: &Value,
    items: &[Value],
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<SchemaError>,
) {
    let len = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && len < min
    {
        push(errors, path, format!("must have at least {min} items"));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && len > max
    {
        push(errors, path, format!("must have at most {max} items"));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            let old_item = old.and_then(|o| correlated_item(schema, item, o));
            check(item_schema, item, old_item, &format!("{path}[{i}]"), errors);
        }
    }
}

/// The stored item of a `map` list with the same keys as `item`; other lists have none.
fn correlated_item<'a>(schema: &Value, item: &Value, old: &'a Value) -> Option<&'a Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
}

fn check_object(
    schema: &Value,
    map: &serde_json::Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<SchemaError>,
) {
    let len = map.len() as u64;
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && len < min
    {
        push(errors, path, format!("must have at least {min} entries"));
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && len > max
    {
        push(errors, path, format!("must have at most {max} entries"));
    }
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if map.get(name).is_none_or(Value::is_null) {
            push(errors, &join(path, name), "is required");
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    // An object schema with neither properties nor additionalProperties (such as `metadata`)
    // is left to the API server's own handling.
    let open = preserve || (properties.is_none() && additional.is_none());
    for (key, field) in map {
        let field_path = join(path, key);
        let old_field = old.and_then(|o| o.get(key));
        if let Some(sub) = properties.and_then(|p| p.get(key)) {
            check(sub, field, old_field, &field_path, errors);
        } else if let Some(sub) = additional.filter(|a| a.is_object()) {
            check(sub, field, old_field, &field_path, errors);
        } else if !open && additional != Some(&Value::Bool(true)) {
            push(errors, &field_path, "unknown field");
        }
    }
}

fn check_rules(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<SchemaError>,
) {
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    for rule in rules {
        let Some(expr) = rule.get("rule").and_then(Value::as_str) else {
            push(errors, path, "schema rule without `rule`");
            continue;
        };
        let transition = expr.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let field = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(fp) => format!("{path}{fp}").trim_start_matches('.').to_string(),
            None => path.to_string(),
        };
        let message = rule
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("failed rule: {expr}"), str::to_string);
        let old = old.filter(|_| transition);
        match evaluate_with_old(expr, value, old) {
            Ok(true) => {}
            Ok(false) => push(errors, &field, message),
            Err(e) => push(errors, &field, format!("{message} (rule error: {e})")),
        }
    }
}

/// Whether a CEL rule parses, so a typo in a CRD fails a test rather than every apply.
pub fn compile(rule: &str) -> Result<(), String> {
    cel::Program::compile(rule)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Evaluates one CEL rule with `self` bound to `value`.
pub fn evaluate(rule: &str, value: &Value) -> Result<bool, String> {
    evaluate_with_old(rule, value, None)
}

/// Evaluates one CEL rule with `self` bound to `value` and, for a transition rule, `oldSelf`
/// bound to the stored value.
fn evaluate_with_old(rule: &str, value: &Value, old: Option<&Value>) -> Result<bool, String> {
    let program = cel::Program::compile(rule).map_err(|e| e.to_string())?;
    let mut ctx = cel::Context::default();
    add_kubernetes_library(&mut ctx);
    let bound = cel::to_value(value).map_err(|e| e.to_string())?;
    ctx.add_variable_from_value("self", bound);
    if let Some(old) = old {
        let bound = cel::to_value(old).map_err(|e| e.to_string())?;
        ctx.add_variable_from_value("oldSelf", bound);
    }
    match program.execute(&ctx).map_err(|e| e.to_string())? {
        cel::Value::Bool(b) => Ok(b),
        other => Err(format!("rule returned {other:?}, not a bool")),
    }
}

/// The functions Karpenter's rules call that the `cel` crate (built without its regex
/// feature) lacks: `matches` from CEL's standard library, the Kubernetes regex library's `find`
/// (the first match, or `""`) and the strings library's `split`.
fn add_kubernetes_library(ctx: &mut cel::Context) {
    use cel::extractors::This;
    use std::sync::Arc;
    fn regex(function: &str, pattern: &str) -> Result<regex::Regex, cel::ExecutionError> {
        regex::Regex::new(pattern).map_err(|e| cel::ExecutionError::function_error(function, e))
    }
    let matches = |This(this): This<Arc<String>>, pattern: Arc<String>| -> cel::ResolveResult {
        Ok(cel::Value::Bool(
            regex("matches", &pattern)?.is_match(&this),
        ))
    };
    let find = |This(this): This<Arc<String>>, pattern: Arc<String>| -> cel::ResolveResult {
        let re = regex("find", &pattern)?;
        let found = re.find(&this).map(|m| m.as_str()).unwrap_or_default();
        Ok(cel::Value::String(Arc::new(found.to_string())))
    };
    let split = |This(this): This<Arc<String>>, separator: Arc<String>| -> cel::ResolveResult {
        let parts: Vec<cel::Value> = this
            .split(separator.as_str())
            .map(|p| cel::Value::String(Arc::new(p.to_string())))
            .collect();
        Ok(cel::Value::List(Arc::new(parts)))
    };
    // None of these is in the crate's standard library as built, so adding them cannot
    // conflict; a conflict would only mean the library has its own.
    let _ = ctx.add_function("matches", matches);
    let _ = ctx.add_function("find", find);
    let _ = ctx.add_function("split", split);
}

/// Every CEL rule in `schema` with the path of the node that carries it, for checking that each
/// compiles.
pub fn rules(schema: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    collect_rules(schema, "", &mut out);
    out
}

fn collect_rules(schema: &Value, path: &str, out: &mut BTreeMap<String, Vec<String>>) {
    if let Some(list) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        let exprs = list
            .iter()
            .filter_map(|r| r.get("rule").and_then(Value::as_str).map(str::to_string));
        out.entry(display(path).to_string())
            .or_default()
            .extend(exprs);
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            collect_rules(sub, &join(path, name), out);
        }
    }
    if let Some(sub) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        collect_rules(sub, &format!("{path}[*]"), out);
    }
    if let Some(items) = schema.get("items") {
        collect_rules(items, &format!("{path}[*]"), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["op"],
            "properties": {
                "op": {"type": "string", "enum": ["In", "NotIn"]},
                "after": {"type": "string", "pattern": "^([0-9]+(s|m|h))+$"},
                "n": {"type": "integer", "minimum": 1, "maximum": 100},
                "q": {"x-kubernetes-int-or-string": true},
                "values": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            },
            "x-kubernetes-validations": [
                {"rule": "self.op != 'In' || (has(self.values) && size(self.values) > 0)",
                 "message": "In needs values", "fieldPath": ".values"}
            ]
        })
    }

    #[test]
    fn a_valid_object_has_no_errors() {
        let ok = json!({"op": "In", "after": "1h30m", "n": 5, "q": "10%", "values": ["a"],
            "labels": {"a": "b"}, "free": {"anything": [1]}});
        assert_eq!(validate(&schema(), &ok), []);
    }

    #[test]
    fn each_violation_names_its_field() {
        let bad = json!({"after": "1d", "n": 0, "q": 1.5, "values": ["a", 1, "c"],
            "labels": {"a": 2}, "typo": true});
        let mut fields: Vec<String> = validate(&schema(), &bad)
            .into_iter()
            .map(|e| e.field)
            .collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "after",
                "labels.a",
                "n",
                "op",
                "q",
                "typo",
                "values",
                "values[1]"
            ]
        );
        let e = validate(&schema(), &json!({"op": "Gt"}));
        assert_eq!(e.len(), 1);
        assert!(e[0].message.contains("\"Gt\" is not one of"), "{e:?}");
    }

    #[test]
    fn cel_rules_are_evaluated_against_self() {
        let e = validate(&schema(), &json!({"op": "In"}));
        assert_eq!(
            e,
            [SchemaError {
                field: "values".to_string(),
                message: "In needs values".to_string()
            }]
        );
        assert!(validate(&schema(), &json!({"op": "NotIn"})).is_empty());
    }

    #[test]
    fn structural_problems_are_found() {
        assert!(structural_problems(&schema()).is_empty());
        let loose = json!({"type": "object", "properties": {"a": {"description": "no type"}}});
        assert_eq!(structural_problems(&loose), ["a: no type"]);
    }
}
