//! Kubernetes' `semver()` CEL library: version attributes of devices are values of this type,
//! and selectors build them from strings with `semver("1.2.3")`.
//!
//! Kubernetes compares versions by semantic-version precedence, ignoring build metadata, and
//! offers no `<`/`>` operators on them: only `compareTo`, `isLessThan`, `isGreaterThan`,
//! `major`, `minor`, `patch`, and `==`.

use cel::common::types::{CelBool, CelInt, CelString, Kind, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::cmp::Ordering;

static SEMVER_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Semver");

/// A semantic version as a CEL value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semver(pub semver::Version);

impl Semver {
    /// Parses strictly (`MAJOR.MINOR.PATCH[-pre][+build]`), as Kubernetes does without
    /// normalization.
    pub fn parse(text: &str) -> Result<Semver, String> {
        semver::Version::parse(text)
            .map(Semver)
            .map_err(|e| format!("could not parse {text:?} as semver: {e}"))
    }

    /// Parses with Kubernetes' normalization: a leading `v` is dropped, missing minor and
    /// patch become zero, and leading zeros are removed.
    pub fn parse_normalized(text: &str) -> Result<Semver, String> {
        let trimmed = text.strip_prefix('v').unwrap_or(text);
        let (core, rest) = match trimmed.find(['-', '+']) {
            Some(at) => trimmed.split_at(at),
            None => (trimmed, ""),
        };
        let mut parts: Vec<String> = core
            .split('.')
            .map(|p| {
                let t = p.trim_start_matches('0');
                if t.is_empty() && !p.is_empty() {
                    "0".to_string()
                } else {
                    t.to_string()
                }
            })
            .collect();
        while parts.len() < 3 {
            parts.push("0".to_string());
        }
        Semver::parse(&format!("{}{rest}", parts.join(".")))
    }

    pub fn compare(&self, other: &Semver) -> Ordering {
        self.0.cmp_precedence(&other.0)
    }
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| self.compare(o) == Ordering::Equal)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Semver {}

fn semver(text: &CelString) -> Result<Semver, ExecutionError> {
    Semver::parse(text.inner()).map_err(|e| ExecutionError::function_error("semver", e))
}
fn semver_normalize(text: &CelString, normalize: &CelBool) -> Result<Semver, ExecutionError> {
    let parsed = if *normalize.inner() {
        Semver::parse_normalized(text.inner())
    } else {
        Semver::parse(text.inner())
    };
    parsed.map_err(|e| ExecutionError::function_error("semver", e))
}
fn is_semver(text: &CelString) -> CelBool {
    CelBool::from(Semver::parse(text.inner()).is_ok())
}
fn is_semver_normalize(text: &CelString, normalize: &CelBool) -> CelBool {
    CelBool::from(if *normalize.inner() {
        Semver::parse_normalized(text.inner()).is_ok()
    } else {
        Semver::parse(text.inner()).is_ok()
    })
}
fn ordering(o: Ordering) -> CelInt {
    CelInt::from(match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}
fn semver_compare_to(this: &Semver, other: &Semver) -> CelInt {
    ordering(this.compare(other))
}
fn semver_is_less_than(this: &Semver, other: &Semver) -> CelBool {
    CelBool::from(this.compare(other) == Ordering::Less)
}
fn semver_is_greater_than(this: &Semver, other: &Semver) -> CelBool {
    CelBool::from(this.compare(other) == Ordering::Greater)
}
fn to_int(n: u64) -> CelInt {
    CelInt::from(i64::try_from(n).unwrap_or(i64::MAX))
}
fn semver_major(this: &Semver) -> CelInt {
    to_int(this.0.major)
}
fn semver_minor(this: &Semver) -> CelInt {
    to_int(this.0.minor)
}
fn semver_patch(this: &Semver) -> CelInt {
    to_int(this.0.patch)
}

/// Registers `semver`, `isSemver` and the member functions of `kubernetes.Semver`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn semver: (CelString) -> Result<Semver>, name = "semver")?;
    cel::add_overload!(env, fn semver_normalize: (CelString, CelBool) -> Result<Semver>, name = "semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool, name = "isSemver")?;
    cel::add_overload!(env, fn is_semver_normalize: (CelString, CelBool) -> CelBool, name = "isSemver")?;
    cel::add_member_overload!(env, fn semver_compare_to: (Semver, Semver) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn semver_is_less_than: (Semver, Semver) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn semver_is_greater_than: (Semver, Semver) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn semver_major: (Semver) -> CelInt, name = "major")?;
    cel::add_member_overload!(env, fn semver_minor: (Semver) -> CelInt, name = "minor")?;
    cel::add_member_overload!(env, fn semver_patch: (Semver) -> CelInt, name = "patch")?;
    Ok(())
}
