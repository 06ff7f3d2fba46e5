//! The node requirement algebra.
//!
//! NodePool requirements, pod `nodeSelector`s and node-affinity terms all say which label values
//! a node may have. A planned NodeClaim has no labels yet, only the requirements of its NodePool
//! and of the pods placed on it, so the planner needs to intersect requirements, ask whether the
//! result can still be met, and check concrete label sets (instance types, existing nodes)
//! against them.
//!
//! Each key's requirement is kept as "the label may be absent" plus "if present, its value is in
//! this set (or outside this set) and within these integer bounds". That one shape represents
//! every operator and is closed under intersection.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// A label set, sorted for deterministic output.
pub type Labels = BTreeMap<String, String>;

/// The operators of node selector requirements (the model's; pods carry them as strings).
pub use joiner_model::api::nodepool::Operator;

/// Why a requirement expression is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("unknown operator {0:?} (In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte)")]
    Operator(String),
    #[error("operator {0} needs at least one value")]
    MissingValues(&'static str),
    #[error("operator {0} takes no values")]
    UnexpectedValues(&'static str),
    #[error("operator {0} needs exactly one integer value, got {1:?}")]
    Integer(&'static str, Vec<String>),
}

/// A set of label values, shared: a NodePool listing hundreds of instance types hands the same
/// set to every NodeClaim and pod requirement derived from it, and the planner clones and
/// compares those requirements for every pod it places, so a clone must not copy the set and a
/// comparison of one set with itself must not walk it (`Arc`'s equality checks identity first).
type ValueSet = Arc<BTreeSet<String>>;

/// Values a present label may take.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Values {
    /// Only these values.
    Only(ValueSet),
    /// Any value except these.
    AllExcept(ValueSet),
}

/// Values in both sets; one of them when they are equal.
fn in_both(a: &ValueSet, b: &ValueSet) -> ValueSet {
    if a == b {
        return a.clone();
    }
    Arc::new(a.intersection(b).cloned().collect())
}

/// Values of `a` not in `b`; `a` itself when `b` is empty.
fn in_first_only(a: &ValueSet, b: &ValueSet) -> ValueSet {
    if b.is_empty() {
        return a.clone();
    }
    Arc::new(a.difference(b).cloned().collect())
}

/// Values in either set; one of them when the other adds nothing.
fn in_either(a: &ValueSet, b: &ValueSet) -> ValueSet {
    if b.is_empty() || a == b {
        return a.clone();
    }
    if a.is_empty() {
        return b.clone();
    }
    Arc::new(a.union(b).cloned().collect())
}

/// What one label key must satisfy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    values: Values,
    /// Exclusive integer lower bound (`Gt`).
    greater_than: Option<i64>,
    /// Exclusive integer upper bound (`Lt`).
    less_than: Option<i64>,
    /// Whether a node without the label satisfies this requirement.
    absent_ok: bool,
    /// Karpenter's `minValues`: how many distinct values of this key the candidate instance
    /// types must still offer.
    pub min_values: Option<usize>,
}

impl Requirement {
    /// Builds a requirement from one selector expression.
    pub fn new(operator: &str, values: &[String]) -> Result<Requirement, RequirementError> {
        let op =
            Operator::parse(operator).ok_or_else(|| RequirementError::Operator(operator.into()))?;
        let set = || Arc::new(values.iter().cloned().collect::<BTreeSet<_>>());
        let integer = |name: &'static str| match values {
            [v] => v
                .parse::<i64>()
                .map_err(|_| RequirementError::Integer(name, values.to_vec())),
            _ => Err(RequirementError::Integer(name, values.to_vec())),
        };
        let no_values = |name: &'static str| {
            if values.is_empty() {
                Ok(())
            } else {
                Err(RequirementError::UnexpectedValues(name))
            }
        };
        let base = |values, absent_ok| Requirement {
            values,
            greater_than: None,
            less_than: None,
            absent_ok,
            min_values: None,
        };
        Ok(match op {
            Operator::In => {
                if values.is_empty() {
                    return Err(RequirementError::MissingValues("In"));
                }
                base(Values::Only(set()), false)
            }
            Operator::NotIn => base(Values::AllExcept(set()), true),
            Operator::Exists => {
                no_values("Exists")?;
                base(Values::AllExcept(ValueSet::default()), false)
            }
            Operator::DoesNotExist => {
                no_values("DoesNotExist")?;
                base(Values::Only(ValueSet::default()), true)
            }
            Operator::Gt => Requirement {
                greater_than: Some(integer("Gt")?),
                ..base(Values::AllExcept(ValueSet::default()), false)
            },
            Operator::Lt => Requirement {
                less_than: Some(integer("Lt")?),
                ..base(Values::AllExcept(ValueSet::default()), false)
            },
            // Integer labels: at least n is more than n - 1, at most n is less than n + 1. The
            // bounds are exclusive i64s, so `Gte i64::MIN` (`Lte i64::MAX`) leaves that one
            // extreme value out; Karpenter's CRD takes only non-negative values, and no
            // instance label comes near i64::MAX.
            Operator::Gte => Requirement {
                greater_than: Some(integer("Gte")?.saturating_sub(1)),
                ..base(Values::AllExcept(ValueSet::default()), false)
            },
            Operator::Lte => Requirement {
                less_than: Some(integer("Lte")?.saturating_add(1)),
                ..base(Values::AllExcept(ValueSet::default()), false)
            },
        })
    }

    /// `key In [value]`.
    pub fn equals(value: &str) -> Requirement {
        Requirement {
            values: Values::Only(Arc::new(BTreeSet::from([value.to_string()]))),
            greater_than: None,
            less_than: None,
            absent_ok: false,
            min_values: None,
        }
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = value.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    /// Whether a node whose label for this key is `value` (or absent) satisfies this.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match value {
            None => self.absent_ok,
            Some(v) => {
                let listed = match &self.values {
                    Values::Only(set) => set.contains(v),
                    Values::AllExcept(set) => !set.contains(v),
                };
                listed && self.within_bounds(v)
            }
        }
    }

    /// Whether the label must be present.
    pub fn requires_presence(&self) -> bool {
        !self.absent_ok
    }

    /// Both requirements at once.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let values = match (&self.values, &other.values) {
            (Values::Only(a), Values::Only(b)) => Values::Only(in_both(a, b)),
            (Values::Only(a), Values::AllExcept(b)) | (Values::AllExcept(b), Values::Only(a)) => {
                Values::Only(in_first_only(a, b))
            }
            (Values::AllExcept(a), Values::AllExcept(b)) => Values::AllExcept(in_either(a, b)),
        };
        Requirement {
            values,
            greater_than: max_opt(self.greater_than, other.greater_than),
            less_than: min_opt(self.less_than, other.less_than),
            absent_ok: self.absent_ok && other.absent_ok,
            min_values: max_opt(self.min_values, other.min_values),
        }
    }

    /// Whether any node (with or without the label) can satisfy this.
    pub fn is_satisfiable(&self) -> bool {
        if self.absent_ok {
            return true;
        }
        match &self.values {
            Values::Only(set) => set.iter().any(|v| self.within_bounds(v)),
            Values::AllExcept(excluded) => {
                // Exclusive bounds; a missing one lies just outside the i64 range, so that
                // `Lt -9223372036854775807` still admits i64::MIN (and `Gt` i64::MAX - 1,
                // i64::MAX).
                let (lo, hi) = match (self.greater_than, self.less_than) {
                    (None, None) => return true,
                    (g, l) => (
                        g.map_or(i64::MIN as i128 - 1, i128::from),
                        l.map_or(i64::MAX as i128 + 1, i128::from),
                    ),
                };
                // Integers strictly between lo and hi, minus those excluded.
                let span = hi - lo - 1;
                let excluded_in_range = excluded
                    .iter()
                    .filter_map(|v| v.parse::<i64>().ok())
                    .map(i128::from)
                    .filter(|n| *n > lo && *n < hi)
                    .count() as i128;
                span - excluded_in_range > 0
            }
        }
    }

    /// The single value a new node's label takes when this requirement pins one, or the
    /// smallest allowed value when it lists several (deterministic).
    pub fn any_value(&self) -> Option<&str> {
        match &self.values {
            Values::Only(set) => set
                .iter()
                .find(|v| self.within_bounds(v))
                .map(String::as_str),
            Values::AllExcept(_) => None,
        }
    }

    /// The finite set of allowed values, when there is one.
    pub fn allowed_values(&self) -> Option<impl Iterator<Item = &str>> {
        match &self.values {
            Values::Only(set) => Some(
                set.iter()
                    .filter(|v| self.within_bounds(v))
                    .map(String::as_str),
            ),
            Values::AllExcept(_) => None,
        }
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(",");
        let mut parts = Vec::new();
        match &self.values {
            Values::Only(s) if s.is_empty() && self.absent_ok => {
                parts.push("DoesNotExist".to_string())
            }
            Values::Only(s) => parts.push(format!("In [{}]", join(s))),
            Values::AllExcept(s) if s.is_empty() && !self.absent_ok => {
                if self.greater_than.is_none() && self.less_than.is_none() {
                    parts.push("Exists".to_string())
                }
            }
            Values::AllExcept(s) if s.is_empty() => {}
            Values::AllExcept(s) => parts.push(format!("NotIn [{}]", join(s))),
        }
        if let Some(g) = self.greater_than {
            parts.push(format!("Gt {g}"));
        }
        if let Some(l) = self.less_than {
            parts.push(format!("Lt {l}"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// Whether `req` on `key` holds for an instance type whose label for `key` is `value`, as
/// Karpenter decides it. A present label is checked as it is. An absent one is checked as
/// absent (`DoesNotExist`) when the key is one instance types define themselves (a type
/// without GPUs has no `instance-gpu-count`, so `Gt 0` fails); otherwise, when the NodePool
/// defines the key (its own requirements or template labels name it), the node takes its value
/// from the NodePool and the requirement holds.
pub fn holds_for_type(
    key: &str,
    req: &Requirement,
    value: Option<&str>,
    pool_defines: bool,
) -> bool {
    match value {
        Some(v) => req.matches(Some(v)),
        None => {
            (pool_defines && !joiner_model::wellknown::labels::defined_by_instance_type(key))
                || req.matches(None)
        }
    }
}

/// Requirements on several keys, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

/// The first key on which two requirement sets cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub key: String,
    pub left: String,
    pub right: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} conflicts with {} {}",
            self.key, self.left, self.key, self.right
        )
    }
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every label of `labels` as `key In [value]`.
    pub fn from_labels(labels: &Labels) -> Self {
        Requirements(
            labels
                .iter()
                .map(|(k, v)| (k.clone(), Requirement::equals(v)))
                .collect(),
        )
    }

    /// Adds a requirement, intersecting with any already on that key.
    pub fn add(&mut self, key: &str, req: Requirement) {
        match self.0.get_mut(key) {
            Some(existing) => *existing = existing.intersect(&req),
            None => {
                self.0.insert(key.to_string(), req);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Requirement)> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a node with exactly these labels satisfies every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.0
            .iter()
            .all(|(k, r)| r.matches(labels.get(k).map(String::as_str)))
    }

    /// The first requirement a label set fails, for explanations.
    pub fn first_mismatch<'a>(&'a self, labels: &Labels) -> Option<(&'a str, &'a Requirement)> {
        self.0
            .iter()
            .find(|(k, r)| !r.matches(labels.get(*k).map(String::as_str)))
            .map(|(k, r)| (k.as_str(), r))
    }

    /// Both sets at once, or the first key on which they conflict.
    pub fn intersect(&self, other: &Requirements) -> Result<Requirements, Conflict> {
        let mut out = self.clone();
        for (key, req) in &other.0 {
            let merged = match out.0.get(key) {
                // Most keys two sets share come from one NodePool: nothing to narrow.
                Some(mine) if mine == req => continue,
                Some(mine) => {
                    let merged = mine.intersect(req);
                    if !merged.is_satisfiable() {
                        return Err(Conflict {
                            key: key.clone(),
                            left: mine.to_string(),
                            right: req.to_string(),
                        });
                    }
                    merged
                }
                None => req.clone(),
            };
            out.0.insert(key.clone(), merged);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: &str, values: &[&str]) -> Requirement {
        Requirement::new(
            op,
            &values.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn operators_match_like_node_selectors() {
        assert!(req("In", &["a", "b"]).matches(Some("a")));
        assert!(!req("In", &["a"]).matches(None));
        assert!(req("NotIn", &["a"]).matches(None));
        assert!(!req("NotIn", &["a"]).matches(Some("a")));
        assert!(req("Exists", &[]).matches(Some("x")));
        assert!(!req("Exists", &[]).matches(None));
        assert!(req("DoesNotExist", &[]).matches(None));
        assert!(!req("DoesNotExist", &[]).matches(Some("x")));
        assert!(req("Gt", &["4"]).matches(Some("5")));
        assert!(!req("Gt", &["4"]).matches(Some("4")));
        assert!(!req("Gt", &["4"]).matches(Some("five")));
        assert!(!req("Gt", &["4"]).matches(None));
        assert!(req("Lt", &["4"]).matches(Some("-1")));
    }

    /// Karpenter's `Gte` and `Lte` include their bound, need an integer label, and intersect
    /// with the other operators like `Gt` and `Lt` do.
    #[test]
    fn gte_and_lte_include_their_bound() {
        let at_least_4 = req("Gte", &["4"]);
        assert!(at_least_4.matches(Some("4")));
        assert!(at_least_4.matches(Some("8")));
        assert!(!at_least_4.matches(Some("3")));
        assert!(!at_least_4.matches(Some("four")));
        assert!(!at_least_4.matches(None));
        let at_most_8 = req("Lte", &["8"]);
        assert!(at_most_8.matches(Some("8")));
        assert!(!at_most_8.matches(Some("9")));
        let between = at_least_4.intersect(&at_most_8);
        assert!(between.matches(Some("4")) && between.matches(Some("8")));
        assert!(!between.matches(Some("9")) && !between.matches(Some("3")));
        assert!(
            !req("Gte", &["5"])
                .intersect(&req("Lte", &["4"]))
                .is_satisfiable()
        );
        assert!(matches!(
            Requirement::new("Gte", &["4".into(), "5".into()]),
            Err(RequirementError::Integer("Gte", _))
        ));
    }

    #[test]
    fn rejects_malformed_expressions() {
        assert!(matches!(
            Requirement::new("Near", &[]),
            Err(RequirementError::Operator(_))
        ));
        assert!(matches!(
            Requirement::new("In", &[]),
            Err(RequirementError::MissingValues(_))
        ));
        assert!(matches!(
            Requirement::new("Exists", &["a".into()]),
            Err(RequirementError::UnexpectedValues(_))
        ));
        assert!(matches!(
            Requirement::new("Gt", &["x".into()]),
            Err(RequirementError::Integer(..))
        ));
        assert!(matches!(
            Requirement::new("Lt", &["1".into(), "2".into()]),
            Err(RequirementError::Integer(..))
        ));
    }

    #[test]
    fn bounds_at_the_ends_of_the_integer_range_are_satisfiable() {
        // Found by the requirement fuzz target: the missing bound was taken as exclusive
        // i64::MIN / i64::MAX, so the one value these admit was left out.
        for r in [
            req("Lt", &["-9223372036854775807"]),
            req("Gt", &["9223372036854775806"]),
        ] {
            assert!(r.is_satisfiable(), "{r}");
        }
        assert!(req("Lt", &["-9223372036854775807"]).matches(Some("-9223372036854775808")));
        assert!(!req("Lt", &["-9223372036854775808"]).is_satisfiable());
        assert!(!req("Gt", &["9223372036854775807"]).is_satisfiable());
        let only_max =
            req("Gt", &["9223372036854775806"]).intersect(&req("NotIn", &["9223372036854775807"]));
        assert!(!only_max.is_satisfiable());
    }

    #[test]
    fn intersection_keeps_what_both_allow() {
        let r = req("In", &["a", "b", "c"]).intersect(&req("NotIn", &["b"]));
        assert!(r.matches(Some("a")) && !r.matches(Some("b")) && r.matches(Some("c")));
        assert!(!r.matches(None));
        let r = req("NotIn", &["a"]).intersect(&req("NotIn", &["b"]));
        assert!(r.matches(None) && !r.matches(Some("a")) && !r.matches(Some("b")));
        let r = req("Gt", &["2"]).intersect(&req("Lt", &["5"]));
        assert!(r.matches(Some("3")) && r.matches(Some("4")) && !r.matches(Some("5")));
        assert!(r.is_satisfiable());
        assert!(
            !req("Gt", &["2"])
                .intersect(&req("Lt", &["3"]))
                .is_satisfiable()
        );
        let excluded = req("Gt", &["2"])
            .intersect(&req("Lt", &["5"]))
            .intersect(&req("NotIn", &["3", "4"]));
        assert!(!excluded.is_satisfiable());
        assert!(
            !req("In", &["a"])
                .intersect(&req("In", &["b"]))
                .is_satisfiable()
        );
        assert!(
            !req("Exists", &[])
                .intersect(&req("DoesNotExist", &[]))
                .is_satisfiable()
        );
        assert!(
            req("NotIn", &["a"])
                .intersect(&req("DoesNotExist", &[]))
                .is_satisfiable()
        );
        let r = req("In", &["1", "8", "9"]).intersect(&req("Gt", &["4"]));
        assert_eq!(
            r.allowed_values().unwrap().collect::<Vec<_>>(),
            vec!["8", "9"]
        );
    }

    #[test]
    fn requirement_sets_report_the_conflicting_key() {
        let mut a = Requirements::new();
        a.add("zone", req("In", &["z1", "z2"]));
        a.add("arch", req("In", &["amd64"]));
        let mut b = Requirements::new();
        b.add("arch", req("In", &["arm64"]));
        let conflict = a.intersect(&b).unwrap_err();
        assert_eq!(conflict.key, "arch");
        assert_eq!(
            conflict.to_string(),
            "arch In [amd64] conflicts with arch In [arm64]"
        );
        let mut c = Requirements::new();
        c.add("zone", req("NotIn", &["z1"]));
        let both = a.intersect(&c).unwrap();
        assert_eq!(both.get("zone").unwrap().any_value(), Some("z2"));
    }

    #[test]
    fn labels_instance_types_define_are_absent_when_a_type_lacks_them() {
        const GPUS: &str = "karpenter.k8s.aws/instance-gpu-count";
        // Karpenter: a type without GPUs has `instance-gpu-count DoesNotExist`.
        assert!(!holds_for_type(GPUS, &req("Gt", &["0"]), None, true));
        assert!(!holds_for_type(GPUS, &req("Exists", &[]), None, true));
        assert!(holds_for_type(GPUS, &req("DoesNotExist", &[]), None, true));
        assert!(holds_for_type(GPUS, &req("NotIn", &["1"]), None, true));
        assert!(holds_for_type(GPUS, &req("Gt", &["0"]), Some("8"), true));
        // A key the NodePool defines itself takes its value from the NodePool.
        assert!(holds_for_type(
            "example.com/team",
            &req("In", &["ml"]),
            None,
            true
        ));
        assert!(!holds_for_type(
            "example.com/team",
            &req("In", &["ml"]),
            None,
            false
        ));
    }

    #[test]
    fn label_sets_are_checked_key_by_key() {
        let mut r = Requirements::new();
        r.add("kubernetes.io/arch", req("In", &["amd64"]));
        r.add("team", req("DoesNotExist", &[]));
        let mut labels = Labels::from([("kubernetes.io/arch".to_string(), "amd64".to_string())]);
        assert!(r.matches(&labels));
        labels.insert("team".into(), "a".into());
        assert_eq!(r.first_mismatch(&labels).map(|(k, _)| k), Some("team"));
    }
}
