//! Regular expressions in selectors: `matches`, and Kubernetes' regex library (`find`,
//! `findAll`), compiled once and bounded.
//!
//! The `cel` crate compiles a `matches` pattern on every call, so a pattern that is costly to
//! compile (`\w{200}` builds a large Unicode automaton) costs that much per device. Here every
//! pattern compiles once per thread into a small cache, and a pattern written as a literal is
//! compiled when the selector is, so a bad or oversized literal pattern is a compile error of
//! the selector, as in kube-apiserver (which compiles constant patterns ahead of time).
//!
//! Patterns have RE2's syntax, which is what CEL specifies and Go implements: `\d`, `\s`, `\w`
//! and `\b` are ASCII-only there, while in Rust's `regex` they are Unicode-aware. They are
//! rewritten to their ASCII sets before compiling, which also keeps `\w{200}` small. RE2
//! refuses a repetition count above 1000; so does this module. A compiled program is capped at
//! [`MAX_PROGRAM_BYTES`], so no pattern under the selector length limit can take much memory.

use cel::IdedExpr;
use cel::common::ast::{CallExpr, EntryExpr, Expr, LiteralValue};
use cel::common::types::{CelBool, CelInt, CelList, CelString};
use cel::common::value::Val;
use cel::{DeclarationError, Env, ExecutionError};
use regex::{Regex, RegexBuilder};
use std::cell::RefCell;
use std::collections::HashMap;

/// Largest compiled program a pattern may produce (the `regex` crate's default is 10 MiB).
pub const MAX_PROGRAM_BYTES: usize = 1 << 20;
/// RE2's largest repetition count (`{n}`, `{n,m}`).
pub const MAX_REPEAT: u32 = 1000;
/// Distinct patterns kept per thread before the cache starts over.
const CACHE_ENTRIES: usize = 256;

thread_local! {
    static CACHE: RefCell<HashMap<String, Result<Regex, String>>> = RefCell::new(HashMap::new());
}

/// The compiled form of an RE2 `pattern`, from this thread's cache, or why it is refused.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(hit) = cache.get(pattern) {
            return hit.clone();
        }
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        let result = compile_uncached(pattern);
        cache.insert(pattern.to_string(), result.clone());
        result
    })
}

fn compile_uncached(pattern: &str) -> Result<Regex, String> {
    let translated = translate(pattern)?;
    RegexBuilder::new(&translated)
        .size_limit(MAX_PROGRAM_BYTES)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(limit) => {
                format!("{pattern:?} is too complex: its program exceeds {limit} bytes")
            }
            other => format!("{pattern:?} is not a valid regular expression: {other}"),
        })
}

/// Rewrites RE2's ASCII-only Perl classes and word boundaries into sets Rust's `regex` reads
/// the same way, and refuses repetition counts RE2 refuses.
fn translate(pattern: &str) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut class_depth = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let set = match next {
                    'd' => Some("[0-9]"),
                    'D' => Some("[^0-9]"),
                    's' => Some("[\\t\\n\\f\\r ]"),
                    'S' => Some("[^\\t\\n\\f\\r ]"),
                    'w' => Some("[0-9A-Za-z_]"),
                    'W' => Some("[^0-9A-Za-z_]"),
                    _ => None,
                };
                match (set, next) {
                    // A set nests inside a class in Rust's syntax (`[a[0-9]]`), so one form
                    // serves inside and outside brackets.
                    (Some(set), _) => out.push_str(set),
                    (None, 'b') if class_depth == 0 => out.push_str("(?-u:\\b)"),
                    (None, 'B') if class_depth == 0 => out.push_str("(?-u:\\B)"),
                    _ => {
                        out.push('\\');
                        out.push(next);
                    }
                }
            }
            '[' => {
                class_depth += 1;
                out.push('[');
                // `[]a]` and `[^]a]`: a leading `]` is a literal, not the class's end.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
                // `[:alpha:]` inside a class is a POSIX class, ASCII in both dialects.
                if chars.peek() == Some(&':') {
                    let rest: String = chars.clone().take_while(|&c| c != ']').collect();
                    if rest.ends_with(':') {
                        out.push_str(&rest);
                        out.push(']');
                        for _ in 0..=rest.chars().count() {
                            chars.next();
                        }
                        class_depth -= 1;
                    }
                }
            }
            ']' if class_depth > 0 => {
                class_depth -= 1;
                out.push(']');
            }
            '{' if class_depth == 0 => {
                let body: String = chars.clone().take_while(|&c| c != '}').collect();
                let closed = chars.clone().nth(body.chars().count()) == Some('}');
                if closed && is_repeat(pattern, &body)? {
                    out.push('{');
                } else {
                    // RE2 reads a brace that starts no repetition as a literal; Rust's
                    // `regex` refuses it, so it is escaped.
                    out.push_str("\\{");
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Whether `{body}` is a repetition in RE2 (`{n}`, `{n,}`, `{n,m}`), refusing counts above
/// RE2's limit.
fn is_repeat(pattern: &str, body: &str) -> Result<bool, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (low, high) = match body.split_once(',') {
        Some((low, high)) => (low, Some(high)),
        None => (body, None),
    };
    if !digits(low) || high.is_some_and(|h| !h.is_empty() && !digits(h)) {
        return Ok(false);
    }
    for count in [Some(low), high]
        .into_iter()
        .flatten()
        .filter(|c| !c.is_empty())
    {
        if count
            .parse::<u64>()
            .map_or(true, |n| n > u64::from(MAX_REPEAT))
        {
            return Err(format!(
                "{pattern:?} is not a valid regular expression: invalid repeat count {{{body}}} \
                 (at most {MAX_REPEAT})"
            ));
        }
    }
    Ok(true)
}

/// Why the first literal pattern of `expr` (in `matches`, `find` or `findAll`) cannot
/// compile, if one cannot: kube-apiserver compiles such patterns with the expression and
/// refuses the selector, rather than failing on each device.
pub fn first_bad_literal(expr: &IdedExpr) -> Option<String> {
    let mut found = None;
    visit(expr, &mut |call| {
        if found.is_some() || !PATTERN_FUNCTIONS.contains(&call.func_name.as_str()) {
            return;
        }
        // `s.matches(re)`: the pattern is the first argument; `matches(s, re)`: the second.
        let at = usize::from(call.target.is_none());
        if let Some(Expr::Literal(LiteralValue::String(p))) = call.args.get(at).map(|a| &a.expr)
            && let Err(message) = compile(p.inner())
        {
            found = Some(message);
        }
    });
    found
}

const PATTERN_FUNCTIONS: &[&str] = &["matches", "find", "findAll"];

/// Calls `on_call` for every call in `expr`, outermost first.
pub(super) fn visit(expr: &IdedExpr, on_call: &mut dyn FnMut(&CallExpr)) {
    match &expr.expr {
        Expr::Call(call) => {
            on_call(call);
            if let Some(t) = &call.target {
                visit(t, on_call);
            }
            call.args.iter().for_each(|a| visit(a, on_call));
        }
        Expr::Select(s) => visit(&s.operand, on_call),
        Expr::List(l) => l.elements.iter().for_each(|e| visit(e, on_call)),
        Expr::Map(m) => {
            for entry in &m.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        visit(&e.key, on_call);
                        visit(&e.value, on_call);
                    }
                    EntryExpr::StructField(f) => visit(&f.value, on_call),
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        visit(&e.key, on_call);
                        visit(&e.value, on_call);
                    }
                    EntryExpr::StructField(f) => visit(&f.value, on_call),
                }
            }
        }
        Expr::Comprehension(c) => {
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                visit(e, on_call);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn regex_error(function: &str, message: String) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn matches(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let compiled = compile(re.inner()).map_err(|m| regex_error("matches", m))?;
    Ok(CelBool::from(compiled.is_match(this.inner())))
}

/// `s.find(re)`: the first match, or the empty string.
fn find(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    let compiled = compile(re.inner()).map_err(|m| regex_error("find", m))?;
    let found = compiled
        .find(this.inner())
        .map_or(String::new(), |m| m.as_str().to_string());
    Ok(CelString::from(found))
}

/// `s.findAll(re)`: every non-overlapping match, in order.
fn find_all(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelList<'static>, ExecutionError> {
    find_all_n(this, re, &CelInt::from(-1))
}

/// `s.findAll(re, n)`: at most `n` matches; all of them when `n` is negative.
fn find_all_n(
    this: &CelString<'_>,
    re: &CelString<'_>,
    limit: &CelInt,
) -> Result<CelList<'static>, ExecutionError> {
    let compiled = compile(re.inner()).map_err(|m| regex_error("findAll", m))?;
    let limit = usize::try_from(*limit.inner()).unwrap_or(usize::MAX);
    Ok(compiled
        .find_iter(this.inner())
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val>)
        .collect::<Vec<_>>()
        .into())
}

/// Registers `matches` (global and member), `find` and `findAll`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>, id = "matches")?;
    cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>)?;
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>, name = "findAll")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_classes_are_ascii_as_in_re2() {
        let w = compile(r"^\w+$").unwrap();
        assert!(w.is_match("H100_80GB"));
        assert!(!w.is_match("é"), "RE2's \\w is ASCII");
        assert!(
            !compile(r"^\d$").unwrap().is_match("٣"),
            "RE2's \\d is ASCII"
        );
        assert!(compile(r"^\D$").unwrap().is_match("٣"));
        assert!(compile(r"^[\w-]+$").unwrap().is_match("a100-sxm4"));
        assert!(compile(r"^[^\s]+$").unwrap().is_match("nospace"));
        assert!(compile(r"\bGPU\b").unwrap().is_match("NVIDIA GPU"));
        assert!(compile(r"^[[:alpha:]]+$").unwrap().is_match("abc"));
        assert!(compile(r"^[]a]+$").unwrap().is_match("]a"));
        assert!(
            compile(r"^\\w$").unwrap().is_match("\\w"),
            "an escaped backslash stays"
        );
    }

    #[test]
    fn a_wide_repetition_compiles_small_and_fast() {
        let re = compile(r"\w{200}").unwrap();
        assert!(!re.is_match(&"a".repeat(64)));
        assert!(re.is_match(&"a".repeat(200)));
    }

    #[test]
    fn repetition_counts_over_re2s_limit_are_refused() {
        let e = compile(r"a{1001}").unwrap_err();
        assert!(e.contains("invalid repeat count {1001}"), "{e}");
        let e = compile(r"a{2,99999999999999999999}").unwrap_err();
        assert!(e.contains("invalid repeat count"), "{e}");
        assert!(compile(r"a{1000}").is_ok());
        assert!(
            compile(r"a{,3}").is_ok(),
            "not a repetition in RE2: literal braces"
        );
    }

    #[test]
    fn patterns_that_compile_too_big_are_refused() {
        let e = compile(r"(\pL{1000}){1000}").unwrap_err();
        assert!(e.contains("too complex"), "{e}");
    }

    #[test]
    fn invalid_patterns_name_the_pattern() {
        let e = compile("(foo").unwrap_err();
        assert!(
            e.starts_with("\"(foo\" is not a valid regular expression"),
            "{e}"
        );
    }
}
