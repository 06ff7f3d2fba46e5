//! A static cost estimate for selectors, in the spirit of Kubernetes' estimated-cost limit.
//!
//! The `cel` crate has no type checker and no cost tracking, so Joiner walks the parsed
//! expression itself and bounds, for each node, the work it can do and the size of what it
//! can produce: strings from a device are at most 64 characters (the API's limit on string
//! attributes), literals have their own size, concatenation adds sizes, and a comprehension
//! (`all`, `exists`, `map`, `filter`, `cel.bind`) costs its body once per element of its
//! range. Nested comprehensions multiply, and `cel.bind` chains that double a string grow the
//! estimate exponentially, which is exactly what a hostile selector needs to be caught doing.
//!
//! The runtime cost is bounded by the same estimate: every value a selector can reach is
//! either a literal of the expression or a bounded field of one device, so an expression whose
//! estimate is under the limit cannot run longer than that estimate at evaluation time. That
//! is why Joiner checks once, at compile time, instead of counting while evaluating.

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue};
use std::collections::HashMap;

/// Kubernetes' limit for a device selector (`CELSelectorExpressionMaxCost`).
pub const MAX_SELECTOR_COST: u64 = 1_000_000;
/// Kubernetes' limit on the length of a device selector (`CELSelectorExpressionMaxLength`).
pub const MAX_SELECTOR_LENGTH: usize = 10 * 1024;

/// Longest string a device attribute may hold.
const MAX_DEVICE_STRING: f64 = 64.0;

#[derive(Clone, Copy, Debug)]
struct Estimate {
    cost: f64,
    /// Characters of a string, elements of a list or map, 1 for a scalar.
    size: f64,
}

/// The estimated cost of evaluating `expr` once, saturating at `f64` infinity.
pub fn estimate(expr: &IdedExpr) -> u64 {
    let cost = walk(expr, &mut HashMap::new()).cost;
    if cost.is_finite() && cost < u64::MAX as f64 {
        cost.ceil() as u64
    } else {
        u64::MAX
    }
}

const STRING_FUNCTIONS: &[&str] = &[
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "find",
    "findAll",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "charAt",
    "reverse",
    "format",
    "quote",
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_+_",
    "size",
    "string",
    "semver",
    "isSemver",
    "quantity",
    "isQuantity",
];

fn walk(expr: &IdedExpr, scope: &mut HashMap<String, f64>) -> Estimate {
    match &expr.expr {
        Expr::Unspecified => Estimate {
            cost: 0.0,
            size: 1.0,
        },
        Expr::Literal(lit) => Estimate {
            cost: 0.0,
            size: match lit {
                LiteralValue::String(s) => s.inner().chars().count() as f64,
                LiteralValue::Bytes(b) => b.len() as f64,
                _ => 1.0,
            },
        },
        Expr::Ident(name) => Estimate {
            cost: 1.0,
            size: scope.get(name).copied().unwrap_or(MAX_DEVICE_STRING),
        },
        Expr::Select(select) => {
            let operand = walk(&select.operand, scope);
            Estimate {
                cost: operand.cost + 1.0,
                size: MAX_DEVICE_STRING,
            }
        }
        Expr::List(list) => {
            let mut cost = 10.0;
            let mut widest: f64 = 1.0;
            for e in &list.elements {
                let est = walk(e, scope);
                cost += est.cost;
                widest = widest.max(est.size);
            }
            // A list's size is its element count; its elements' sizes feed `join` and
            // comprehension variables through `widest`, kept in the scope below.
            Estimate {
                cost,
                size: list.elements.len() as f64 * widest.max(1.0),
            }
        }
        Expr::Map(map) => {
            let mut cost = 30.0;
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        cost += walk(&e.key, scope).cost + walk(&e.value, scope).cost;
                    }
                    EntryExpr::StructField(f) => cost += walk(&f.value, scope).cost,
                }
            }
            Estimate {
                cost,
                size: map.entries.len() as f64,
            }
        }
        Expr::Struct(s) => {
            let mut cost = 40.0;
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        cost += walk(&e.key, scope).cost + walk(&e.value, scope).cost;
                    }
                    EntryExpr::StructField(f) => cost += walk(&f.value, scope).cost,
                }
            }
            Estimate { cost, size: 1.0 }
        }
        Expr::Call(call) => {
            let mut cost = 1.0;
            let mut sizes = Vec::new();
            if let Some(target) = &call.target {
                let est = walk(target, scope);
                cost += est.cost;
                sizes.push(est.size);
            }
            for arg in &call.args {
                let est = walk(arg, scope);
                cost += est.cost;
                sizes.push(est.size);
            }
            let total: f64 = sizes.iter().sum();
            let widest = sizes.iter().copied().fold(1.0, f64::max);
            let name = call.func_name.as_str();
            if STRING_FUNCTIONS.contains(&name) {
                cost += total / 10.0;
            }
            if let ("matches" | "find" | "findAll", [subject, pattern, ..]) = (name, &sizes[..]) {
                // Kubernetes' cost of a regular expression: a tenth of the subject's length
                // times a quarter of the pattern's (RE2 runs in linear time, and a pattern
                // compiles once, so its length stands for the work per input character).
                cost += ((1.0 + subject) * 0.1).ceil() * (pattern * 0.25).ceil();
            }
            let size = match name {
                "_+_" => total,
                "replace" => widest * widest.max(1.0),
                "findAll" => sizes.first().copied().unwrap_or(1.0),
                // A two-variable comprehension's range, and an element of a list or map.
                super::comprehensions::KEYS | "_[_]" => widest,
                "find" | "split" | "join" | "lowerAscii" | "upperAscii" | "trim" | "substring"
                | "reverse" | "format" | "quote" | "string" => widest,
                "_?_:_" => widest,
                _ => 1.0,
            };
            Estimate { cost, size }
        }
        Expr::Comprehension(c) => {
            let range = walk(&c.iter_range, scope);
            let init = walk(&c.accu_init, scope);
            let iterations = range.size.max(0.0);
            let saved_iter = scope.insert(c.iter_var.clone(), range.size.max(1.0));
            let saved_iter2 = c
                .iter_var2
                .as_ref()
                .map(|v| (v.clone(), scope.insert(v.clone(), range.size.max(1.0))));
            // The accumulator may grow by the step's size each iteration (`map`, `filter`).
            let saved_accu = scope.insert(c.accu_var.clone(), init.size.max(1.0));
            let step_probe = walk(&c.loop_step, scope);
            let accu_size = init.size.max(1.0) + iterations * step_probe.size.max(1.0);
            scope.insert(c.accu_var.clone(), accu_size);
            let cond = walk(&c.loop_cond, scope);
            let step = walk(&c.loop_step, scope);
            let result = walk(&c.result, scope);
            restore(scope, &c.iter_var, saved_iter);
            if let Some((v, saved)) = saved_iter2 {
                restore(scope, &v, saved);
            }
            restore(scope, &c.accu_var, saved_accu);
            Estimate {
                cost: range.cost + init.cost + iterations * (cond.cost + step.cost) + result.cost,
                size: result.size,
            }
        }
    }
}

fn restore(scope: &mut HashMap<String, f64>, name: &str, saved: Option<f64>) {
    match saved {
        Some(v) => {
            scope.insert(name.to_string(), v);
        }
        None => {
            scope.remove(name);
        }
    }
}

/// Function namespaces of the environment.
const NAMESPACES: &[&str] = &["sets", "strings", "cel"];

/// Identifiers an expression uses that no comprehension (or `cel.bind`) binds: the variables
/// it needs from the environment. Kubernetes declares only `device`.
pub fn free_variables(expr: &IdedExpr) -> Vec<String> {
    let mut out = Vec::new();
    free(expr, &mut Vec::new(), &mut out);
    out
}

fn free(expr: &IdedExpr, bound: &mut Vec<String>, out: &mut Vec<String>) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) && !out.contains(name) {
                out.push(name.clone());
            }
        }
        Expr::Select(s) => free(&s.operand, bound, out),
        Expr::Call(c) => {
            // `cel.bind(...)` after expansion no longer has a `cel` target; any other
            // namespaced call (`cel.x`) is an unknown function, reported at runtime.
            match c.target.as_deref() {
                // `sets.contains(..)`, `strings.quote(..)`: a namespace, not a variable.
                Some(IdedExpr {
                    expr: Expr::Ident(ns),
                    ..
                }) if NAMESPACES.contains(&ns.as_str()) && !bound.contains(ns) => {}
                Some(t) => free(t, bound, out),
                None => {}
            }
            for a in &c.args {
                free(a, bound, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|e| free(e, bound, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        free(&e.key, bound, out);
                        free(&e.value, bound, out);
                    }
                    EntryExpr::StructField(f) => free(&f.value, bound, out),
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        free(&e.key, bound, out);
                        free(&e.value, bound, out);
                    }
                    EntryExpr::StructField(f) => free(&f.value, bound, out),
                }
            }
        }
        Expr::Comprehension(c) => {
            free(&c.iter_range, bound, out);
            free(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            free(&c.loop_cond, bound, out);
            free(&c.loop_step, bound, out);
            bound.truncate(depth);
            bound.push(c.accu_var.clone());
            free(&c.result, bound, out);
            bound.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}
