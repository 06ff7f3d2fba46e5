//! Two-variable comprehensions (`all(i, v, p)`, `exists(i, v, p)`, `existsOne(i, v, p)`,
//! `transformList(i, v, [filter,] e)`), which kube-apiserver offers from Kubernetes 1.33.
//!
//! `cel` 0.15 parses the second iteration variable into its AST but its interpreter never
//! binds it, so these are macros that expand into single-variable comprehensions it does run:
//! the range is bound once, the first variable iterates over its indices (a list) or keys (a
//! map), and the second is bound, as `cel.bind` binds, to the element at that index or key:
//!
//! ```text
//! x.all(k, v, p)  =>  cel.bind(@range, x, @keys(@range).all(k, cel.bind(v, @range[k], p)))
//! ```
//!
//! Nested expansions shadow `@range`, which no expression can name, so they cannot interfere.

use cel::common::ast::{CallExpr, ComprehensionExpr, Expr, ListExpr, LiteralValue, operators};
use cel::common::types::{CelInt, DYN_TYPE, Kind};
use cel::common::value::{CowVal, Val};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{DeclarationError, Env, ExecutionError, IdedExpr};

/// The hidden name the range is bound to.
const RANGE: &str = "@range";
/// The hidden name of each comprehension's accumulator.
const RESULT: &str = "@result";
/// The function that lists a range's indices or keys.
pub const KEYS: &str = "@keys";

fn ident(h: &mut MacroExprHelper<'_>, name: &str) -> IdedExpr {
    h.next_expr(Expr::Ident(name.to_string()))
}

fn call(h: &mut MacroExprHelper<'_>, func: &str, args: Vec<IdedExpr>) -> IdedExpr {
    h.next_expr(Expr::Call(CallExpr {
        func_name: func.to_string(),
        target: None,
        args,
    }))
}

fn literal(h: &mut MacroExprHelper<'_>, value: LiteralValue) -> IdedExpr {
    h.next_expr(Expr::Literal(value))
}

/// A comprehension over `range` with `var`, accumulating into [`RESULT`].
struct Fold {
    init: IdedExpr,
    cond: IdedExpr,
    step: IdedExpr,
    result: IdedExpr,
}

fn comprehension(
    h: &mut MacroExprHelper<'_>,
    range: IdedExpr,
    var: String,
    accu: &str,
    fold: Fold,
) -> IdedExpr {
    h.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: range,
        iter_var: var,
        iter_var2: None,
        accu_var: accu.to_string(),
        accu_init: fold.init,
        loop_cond: fold.cond,
        loop_step: fold.step,
        result: fold.result,
    })))
}

/// `cel.bind(name, init, body)`, expanded as the bind macro expands it.
fn bind(h: &mut MacroExprHelper<'_>, name: &str, init: IdedExpr, body: IdedExpr) -> IdedExpr {
    let range = h.next_expr(Expr::List(ListExpr::new(Vec::new())));
    let fold = Fold {
        init,
        cond: literal(h, LiteralValue::Boolean(false.into())),
        step: ident(h, name),
        result: body,
    };
    comprehension(h, range, "#unused".to_string(), name, fold)
}

fn variable(h: &MacroExprHelper<'_>, arg: &IdedExpr) -> Result<String, ParseError> {
    match &arg.expr {
        Expr::Ident(name) => Ok(name.clone()),
        _ => Err(h.new_error(arg.id, "argument must be a simple name")),
    }
}

/// What a two-variable macro folds, given the body expressions with `v` already bound.
type Folder = fn(&mut MacroExprHelper<'_>, Vec<IdedExpr>) -> Fold;

fn two_variable(name: &'static str, arity: usize, folder: Folder) -> Macro {
    Macro::receiver(name, arity, move |h, target, args| {
        let Some(range) = target.take() else {
            return Ok(None);
        };
        let (Some(first), Some(second)) = (args.first(), args.get(1)) else {
            return Ok(None);
        };
        let (key, value) = (variable(h, first)?, variable(h, second)?);
        if key == value {
            return Err(h.new_error(second.id, "the two variables must have different names"));
        }
        let bodies: Vec<IdedExpr> = args
            .drain(2..)
            .map(|body| {
                let container = ident(h, RANGE);
                let index = ident(h, &key);
                let element = call(h, operators::INDEX, vec![container, index]);
                bind(h, &value, element, body)
            })
            .collect();
        let fold = folder(h, bodies);
        let bound = ident(h, RANGE);
        let keys = call(h, KEYS, vec![bound]);
        let inner = comprehension(h, keys, key, RESULT, fold);
        Ok(Some(bind(h, RANGE, range, inner)))
    })
}

fn accumulator(h: &mut MacroExprHelper<'_>) -> IdedExpr {
    ident(h, RESULT)
}

fn all(h: &mut MacroExprHelper<'_>, mut bodies: Vec<IdedExpr>) -> Fold {
    let p = bodies.remove(0);
    let accu = accumulator(h);
    let accu2 = accumulator(h);
    Fold {
        init: literal(h, LiteralValue::Boolean(true.into())),
        cond: call(h, operators::NOT_STRICTLY_FALSE, vec![accu]),
        step: call(h, operators::LOGICAL_AND, vec![accu2, p]),
        result: accumulator(h),
    }
}

fn exists(h: &mut MacroExprHelper<'_>, mut bodies: Vec<IdedExpr>) -> Fold {
    let p = bodies.remove(0);
    let accu = accumulator(h);
    let not = call(h, operators::LOGICAL_NOT, vec![accu]);
    let accu2 = accumulator(h);
    Fold {
        init: literal(h, LiteralValue::Boolean(false.into())),
        cond: call(h, operators::NOT_STRICTLY_FALSE, vec![not]),
        step: call(h, operators::LOGICAL_OR, vec![accu2, p]),
        result: accumulator(h),
    }
}

fn exists_one(h: &mut MacroExprHelper<'_>, mut bodies: Vec<IdedExpr>) -> Fold {
    let p = bodies.remove(0);
    let accu = accumulator(h);
    let one = literal(h, LiteralValue::Int(1.into()));
    let plus = call(h, operators::ADD, vec![accu, one]);
    let unchanged = accumulator(h);
    let final_accu = accumulator(h);
    let one = literal(h, LiteralValue::Int(1.into()));
    Fold {
        init: literal(h, LiteralValue::Int(0.into())),
        cond: literal(h, LiteralValue::Boolean(true.into())),
        step: call(h, operators::CONDITIONAL, vec![p, plus, unchanged]),
        result: call(h, operators::EQUALS, vec![final_accu, one]),
    }
}

fn transform_list(h: &mut MacroExprHelper<'_>, mut bodies: Vec<IdedExpr>) -> Fold {
    let Some(element) = bodies.pop() else {
        unreachable!("transformList has one or two bodies by its arity")
    };
    let filter = bodies.pop();
    let accu = accumulator(h);
    let wrapped = h.next_expr(Expr::List(ListExpr::new(vec![element])));
    let appended = call(h, operators::ADD, vec![accu, wrapped]);
    let step = match filter {
        Some(filter) => {
            let unchanged = accumulator(h);
            call(h, operators::CONDITIONAL, vec![filter, appended, unchanged])
        }
        None => appended,
    };
    Fold {
        init: h.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        cond: literal(h, LiteralValue::Boolean(true.into())),
        step,
        result: accumulator(h),
    }
}

/// The macros, for [`Env::add_macro`].
pub fn macros() -> Vec<Macro> {
    vec![
        two_variable(operators::ALL, 3, all),
        two_variable(operators::EXISTS, 3, exists),
        two_variable("existsOne", 3, exists_one),
        two_variable(operators::EXISTS_ONE, 3, exists_one),
        two_variable("transformList", 3, transform_list),
        two_variable("transformList", 4, transform_list),
    ]
}

/// `@keys(x)`: a list's indices, or a map's keys, in iteration order.
fn keys<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [range] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    let range = range.as_ref();
    let iterable = range
        .as_iterable()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: range.get_type().name().to_owned(),
            want: "list or map".to_owned(),
        })?;
    let mut out: Vec<Box<dyn Val>> = Vec::new();
    let mut iter = iterable.iter();
    let is_list = range.get_type().kind() == Kind::List;
    while let Some(key) = iter.next() {
        out.push(if is_list {
            let index = i64::try_from(out.len()).unwrap_or(i64::MAX);
            Box::new(CelInt::from(index))
        } else {
            key.clone_as_boxed()
        });
    }
    Ok(CowVal::owned(cel::common::types::CelList::from(out)))
}

/// Registers the macros and `@keys`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(KEYS, "@keys(dyn)", vec![DYN_TYPE], keys)?;
    for m in macros() {
        env.add_macro(m)?;
    }
    Ok(())
}
