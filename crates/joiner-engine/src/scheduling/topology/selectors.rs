//! Which pod selectors a pod's labels could satisfy, without testing every selector.
//!
//! Each distinct (topology key, selector) pair of the plan makes a group, and every distinct
//! label set is tested against every group's selector to find what it is a member of. With
//! thousands of workloads each repelling its own kind, that is quadratic. Most selectors
//! name a value a label must have (`matchLabels`, `In`); indexed by one such label value, a
//! label set is tested only against the selectors it could satisfy, plus those with no such
//! requirement (`Exists`, `NotIn`, an empty selector).

use std::collections::HashMap;

use crate::requirements::{Labels, Requirements};

/// Selectors by a label value they require (one per selector), and the rest.
#[derive(Debug, Default)]
pub(super) struct SelectorIndex {
    by_value: HashMap<String, HashMap<String, Vec<usize>>>,
    unindexed: Vec<usize>,
}

impl SelectorIndex {
    pub(super) fn new<'a>(selectors: impl IntoIterator<Item = &'a Requirements>) -> SelectorIndex {
        let mut index = SelectorIndex::default();
        for (i, compiled) in selectors.into_iter().enumerate() {
            let required = compiled.iter().find_map(|(key, r)| {
                r.requires_presence()
                    .then(|| r.allowed_values())
                    .flatten()
                    .map(|values| (key, values))
            });
            match required {
                // A selector whose required values are none matches no labels: never asked.
                Some((key, values)) => {
                    let by_key = index.by_value.entry(key.clone()).or_default();
                    for v in values {
                        by_key.entry(v.to_string()).or_default().push(i);
                    }
                }
                None => index.unindexed.push(i),
            }
        }
        index
    }

    /// The selectors `labels` might satisfy, ascending: a superset of those it does.
    pub(super) fn candidates(&self, labels: &Labels) -> Vec<usize> {
        let mut out = self.unindexed.clone();
        for (k, v) in labels {
            if let Some(list) = self
                .by_value
                .get(k.as_str())
                .and_then(|by_key| by_key.get(v.as_str()))
            {
                out.extend_from_slice(list);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requirements::Requirement;

    fn selector(exprs: &[(&str, &str, &[&str])]) -> Requirements {
        let mut r = Requirements::new();
        for (key, op, values) in exprs {
            let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            r.add(key, Requirement::new(op, &values).unwrap());
        }
        r
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_label_set_is_offered_every_selector_it_satisfies() {
        let selectors = [
            selector(&[("app", "In", &["web"])]),
            selector(&[("app", "In", &["db", "cache"]), ("tier", "Exists", &[])]),
            selector(&[("tier", "Exists", &[])]),
            selector(&[("app", "NotIn", &["web"])]),
            selector(&[]),
            selector(&[("app", "DoesNotExist", &[])]),
        ];
        let index = SelectorIndex::new(&selectors);
        for set in [
            labels(&[("app", "web")]),
            labels(&[("app", "db"), ("tier", "back")]),
            labels(&[("tier", "front")]),
            labels(&[]),
        ] {
            let candidates = index.candidates(&set);
            for (i, s) in selectors.iter().enumerate() {
                if s.matches(&set) {
                    assert!(candidates.contains(&i), "{set:?} misses selector {i}");
                }
            }
        }
        // Selectors naming another value are not offered.
        assert!(!index.candidates(&labels(&[("app", "web")])).contains(&1));
    }
}
