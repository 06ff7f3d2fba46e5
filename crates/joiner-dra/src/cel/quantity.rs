//! Kubernetes' `quantity()` CEL library: device capacities are values of this type, and
//! selectors compare them with `quantity("40Gi")`.
//!
//! Arithmetic is exact (Joiner's integer nano-unit [`Quantity`]), never through floats, so
//! `compareTo` agrees with the API server for every value a slice can carry.

use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Kind, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use joiner_model::Quantity;
use std::any::Any;
use std::cmp::Ordering;

static QUANTITY_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Quantity");

const NANO: i128 = 1_000_000_000;

/// A quantity as a CEL value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CelQuantity(pub Quantity);

impl Val for CelQuantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<CelQuantity>()
            .is_some_and(|o| o.0 == self.0)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for CelQuantity {}

fn quantity(text: &CelString) -> Result<CelQuantity, ExecutionError> {
    Quantity::parse(text.inner())
        .map(CelQuantity)
        .map_err(|e| ExecutionError::function_error("quantity", e))
}
fn is_quantity(text: &CelString) -> CelBool {
    CelBool::from(Quantity::parse(text.inner()).is_ok())
}
fn ordering(o: Ordering) -> CelInt {
    CelInt::from(match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}
fn q_compare_to(this: &CelQuantity, other: &CelQuantity) -> CelInt {
    ordering(this.0.cmp(&other.0))
}
fn q_is_less_than(this: &CelQuantity, other: &CelQuantity) -> CelBool {
    CelBool::from(this.0 < other.0)
}
fn q_is_greater_than(this: &CelQuantity, other: &CelQuantity) -> CelBool {
    CelBool::from(this.0 > other.0)
}
fn q_sign(this: &CelQuantity) -> CelInt {
    CelInt::from(this.0.nanos().signum() as i64)
}
fn q_is_integer(this: &CelQuantity) -> CelBool {
    let n = this.0.nanos();
    CelBool::from(n % NANO == 0 && i64::try_from(n / NANO).is_ok())
}
fn q_as_integer(this: &CelQuantity) -> Result<CelInt, ExecutionError> {
    let n = this.0.nanos();
    if n % NANO != 0 {
        return Err(ExecutionError::function_error(
            "asInteger",
            format!("{} is not an integer", this.0),
        ));
    }
    i64::try_from(n / NANO).map(CelInt::from).map_err(|_| {
        ExecutionError::function_error("asInteger", format!("{} overflows int", this.0))
    })
}
fn q_as_approximate_float(this: &CelQuantity) -> CelDouble {
    CelDouble::from(this.0.nanos() as f64 / NANO as f64)
}
fn checked(q: Quantity) -> Result<CelQuantity, ExecutionError> {
    // Far beyond any real resource: refuse rather than saturate silently.
    if q.nanos().unsigned_abs() > (1u128 << 100) {
        return Err(ExecutionError::function_error("add", "quantity overflow"));
    }
    Ok(CelQuantity(q))
}
fn q_add(this: &CelQuantity, other: &CelQuantity) -> Result<CelQuantity, ExecutionError> {
    checked(this.0.saturating_add(other.0))
}
fn q_add_int(this: &CelQuantity, other: &CelInt) -> Result<CelQuantity, ExecutionError> {
    checked(this.0.saturating_add(Quantity::from_units(*other.inner())))
}
fn q_sub(this: &CelQuantity, other: &CelQuantity) -> Result<CelQuantity, ExecutionError> {
    checked(this.0.saturating_sub(other.0))
}
fn q_sub_int(this: &CelQuantity, other: &CelInt) -> Result<CelQuantity, ExecutionError> {
    checked(this.0.saturating_sub(Quantity::from_units(*other.inner())))
}

/// Registers `quantity`, `isQuantity` and the member functions of `kubernetes.Quantity`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<CelQuantity>, name = "quantity")?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool, name = "isQuantity")?;
    cel::add_member_overload!(env, fn q_compare_to: (CelQuantity, CelQuantity) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn q_is_less_than: (CelQuantity, CelQuantity) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn q_is_greater_than: (CelQuantity, CelQuantity) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn q_sign: (CelQuantity) -> CelInt, name = "sign")?;
    cel::add_member_overload!(env, fn q_is_integer: (CelQuantity) -> CelBool, name = "isInteger")?;
    cel::add_member_overload!(env, fn q_as_integer: (CelQuantity) -> Result<CelInt>, name = "asInteger")?;
    cel::add_member_overload!(env, fn q_as_approximate_float: (CelQuantity) -> CelDouble, name = "asApproximateFloat")?;
    cel::add_member_overload!(env, fn q_add: (CelQuantity, CelQuantity) -> Result<CelQuantity>, name = "add")?;
    cel::add_member_overload!(env, fn q_add_int: (CelQuantity, CelInt) -> Result<CelQuantity>, name = "add")?;
    cel::add_member_overload!(env, fn q_sub: (CelQuantity, CelQuantity) -> Result<CelQuantity>, name = "sub")?;
    cel::add_member_overload!(env, fn q_sub_int: (CelQuantity, CelInt) -> Result<CelQuantity>, name = "sub")?;
    Ok(())
}
