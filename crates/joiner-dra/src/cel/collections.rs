//! The sets extension (`sets.contains`, `sets.equivalent`, `sets.intersects`), Kubernetes' list
//! library (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`) and the DRA helper
//! `includes`, which the DRA environment offers on top of standard CEL.

use cel::common::types::{CelBool, CelDouble, CelInt, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::cmp::Ordering;

fn items<'b, 'v>(list: &'b (dyn Val + 'v)) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = list
        .as_iterable()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: list.get_type().name().to_owned(),
            want: "list".to_owned(),
        })?;
    let mut iter = iterable.iter();
    let mut out = Vec::new();
    while let Some(v) = iter.next() {
        out.push(v);
    }
    Ok(out)
}

fn two<'a, 'b, 'v>(
    args: &'a [CowVal<'b, 'v>],
) -> Result<(&'a (dyn Val + 'v), &'a (dyn Val + 'v)), ExecutionError> {
    match args {
        [a, b] => Ok((a.as_ref(), b.as_ref())),
        _ => Err(ExecutionError::invalid_argument_count(2, args.len())),
    }
}

fn one_arg<'a, 'b, 'v>(args: &'a [CowVal<'b, 'v>]) -> Result<&'a (dyn Val + 'v), ExecutionError> {
    match args {
        [a] => Ok(a.as_ref()),
        _ => Err(ExecutionError::invalid_argument_count(1, args.len())),
    }
}

fn contains_all(a: &[&dyn Val], b: &[&dyn Val]) -> bool {
    b.iter().all(|x| a.iter().any(|y| y.equals(*x)))
}

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two(&args)?;
    let result = contains_all(&items(a)?, &items(b)?);
    Ok(CowVal::owned(CelBool::from(result)))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two(&args)?;
    let (a, b) = (items(a)?, items(b)?);
    let result = contains_all(&a, &b) && contains_all(&b, &a);
    Ok(CowVal::owned(CelBool::from(result)))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two(&args)?;
    let (a, b) = (items(a)?, items(b)?);
    let result = a.iter().any(|x| b.iter().any(|y| x.equals(*y)));
    Ok(CowVal::owned(CelBool::from(result)))
}

fn compare(a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: a.get_type().name().to_owned(),
            want: "comparable".to_owned(),
        })?
        .compare(b)
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items(one_arg(&args)?)?;
    let mut sorted = true;
    for pair in list.windows(2) {
        if let [a, b] = pair
            && compare(*a, *b)? == Ordering::Greater
        {
            sorted = false;
            break;
        }
    }
    Ok(CowVal::owned(CelBool::from(sorted)))
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    keep: Ordering,
    name: &str,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items(one_arg(&args)?)?;
    let mut best: Option<&dyn Val> = None;
    for v in list {
        best = match best {
            Some(b) if compare(v, b)? != keep => Some(b),
            _ => Some(v),
        };
    }
    best.map(|b| CowVal::Owned(b.clone_as_boxed()))
        .ok_or_else(|| ExecutionError::function_error(name, "list is empty"))
}

fn list_min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, Ordering::Less, "min")
}

fn list_max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, Ordering::Greater, "max")
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items(one_arg(&args)?)?;
    let mut int: i64 = 0;
    let mut double: f64 = 0.0;
    let mut any_double = false;
    for v in list {
        if let Some(i) = v.downcast_ref::<CelInt>() {
            int = int
                .checked_add(*i.inner())
                .ok_or_else(|| ExecutionError::function_error("sum", "int overflow"))?;
        } else if let Some(d) = v.downcast_ref::<CelDouble>() {
            any_double = true;
            double += *d.inner();
        } else {
            return Err(ExecutionError::function_error(
                "sum",
                "list elements must be int or double",
            ));
        }
    }
    if any_double {
        Ok(CowVal::owned(CelDouble::from(double + int as f64)))
    } else {
        Ok(CowVal::owned(CelInt::from(int)))
    }
}

fn position<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (list, needle) = two(&args)?;
    let list = items(list)?;
    let found = if last {
        list.iter().rposition(|v| v.equals(needle))
    } else {
        list.iter().position(|v| v.equals(needle))
    };
    let index = found.map_or(-1, |i| i64::try_from(i).unwrap_or(i64::MAX));
    Ok(CowVal::owned(CelInt::from(index)))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, true)
}

/// `x.includes(v)`: whether `x` is `v`, or a list holding it. Kubernetes' DRA helper for an
/// attribute that is a scalar on some devices and a list on others (`DRAListTypeAttributes`).
fn includes<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (this, value) = two(&args)?;
    let found = if this.as_iterable().is_some() {
        items(this)?.iter().any(|x| x.equals(value))
    } else {
        this.equals(value)
    };
    Ok(CowVal::owned(CelBool::from(found)))
}

/// Registers the sets extension and the list library.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "sets.contains",
        "sets.contains(list, list)",
        vec![LIST_TYPE, LIST_TYPE],
        sets_contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "sets.equivalent(list, list)",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "sets.intersects(list, list)",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    env.add_member_overload("isSorted", "list.isSorted()", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload(
        "includes",
        "dyn.includes(dyn)",
        DYN_TYPE,
        vec![DYN_TYPE],
        includes,
    )?;
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], list_min)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], list_max)?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}
