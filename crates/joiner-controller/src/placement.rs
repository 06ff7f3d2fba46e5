//! The placement groups EC2NodeClasses select, as this controller last found them in EC2.
//!
//! Karpenter keeps a class's resolved group in memory, not in the class's status (its CRD has
//! no field for it), and so does Joiner. Each group is kept with the selector it was found
//! for: a class whose selector has changed, or that this process has not resolved yet (after a
//! restart), has no group, and the view treats it as not ready, so no node is ever launched
//! outside the group the class asks for.

use std::collections::BTreeMap;

use joiner_model::Sourced;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::PlacementGroupSelector;
use joiner_model::placement::PlacementGroup;

use crate::cloud::Resolved;

/// Found groups by class name, each with the selector it was found for.
#[derive(Debug, Default)]
pub struct PlacementGroups {
    found: BTreeMap<String, (PlacementGroupSelector, PlacementGroup)>,
}

impl PlacementGroups {
    /// Records what resolving `class` found: a group replaces the last one, no selector or no
    /// group forgets it, a read that failed keeps it (an EC2 hiccup does not stop launches into
    /// a group already found). Returns whether what is kept changed.
    pub fn record(
        &mut self,
        class: &EC2NodeClass,
        resolved: &Resolved<Option<PlacementGroup>>,
    ) -> bool {
        let name = class.metadata.name.clone().unwrap_or_default();
        match (resolved, &class.spec.placement_group_selector) {
            (Resolved::Found(Some(group)), Some(selector)) => {
                let found = (selector.clone(), group.clone());
                self.found.insert(name, found.clone()) != Some(found)
            }
            (Resolved::Failed(_), _) => false,
            _ => self.found.remove(&name).is_some(),
        }
    }

    /// The group `class` selects now, if it was found for the selector the class has now.
    pub fn of(&self, class: &EC2NodeClass) -> Option<&PlacementGroup> {
        let selector = class.spec.placement_group_selector.as_ref()?;
        let (found_for, group) = self.found.get(class.metadata.name.as_deref()?)?;
        (found_for == selector).then_some(group)
    }

    /// The groups of `classes`, by class name, for the engine's view.
    pub fn current(&self, classes: &[Sourced<EC2NodeClass>]) -> BTreeMap<String, PlacementGroup> {
        classes
            .iter()
            .filter_map(|c| {
                let group = self.of(&c.object)?;
                Some((c.object.metadata.name.clone()?, group.clone()))
            })
            .collect()
    }

    /// What the NodeClaims of `class` should carry as `karpenter.k8s.aws/placement-group-id`
    /// now: `Some(None)` for a class that selects no group, `Some(Some(id))` for one whose
    /// group is found, `None` when it is not known (drift is not judged on it).
    pub fn expected_id<'a>(&'a self, class: &EC2NodeClass) -> Option<Option<&'a str>> {
        if class.spec.placement_group_selector.is_none() {
            return Some(None);
        }
        self.of(class).map(|g| Some(g.id.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::CloudError;
    use joiner_model::placement::PlacementStrategy;

    fn class(selector: Option<&str>) -> EC2NodeClass {
        let mut c: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "training"},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}]}
        }))
        .unwrap();
        c.spec.placement_group_selector = selector.map(|n| PlacementGroupSelector {
            id: None,
            name: Some(n.into()),
        });
        c
    }

    fn group(id: &str) -> PlacementGroup {
        PlacementGroup {
            id: id.into(),
            name: "training".into(),
            strategy: PlacementStrategy::Cluster,
            partitions: 0,
        }
    }

    #[test]
    fn a_group_counts_only_for_the_selector_it_was_found_for() {
        let mut groups = PlacementGroups::default();
        let training = class(Some("training"));
        assert_eq!(groups.expected_id(&training), None, "not resolved yet");
        groups.record(&training, &Resolved::Found(Some(group("pg-1"))));
        assert_eq!(groups.expected_id(&training), Some(Some("pg-1")));
        // A failed read keeps what was found.
        groups.record(&training, &Resolved::Failed(CloudError::Throttled));
        assert_eq!(groups.of(&training).map(|g| g.id.as_str()), Some("pg-1"));
        // The selector changed: the old group is not the class's until found again.
        let other = class(Some("other"));
        assert!(groups.of(&other).is_none());
        assert_eq!(groups.expected_id(&other), None);
        // Not found: forgotten; no selector: nothing expected.
        groups.record(&training, &Resolved::NotFound("gone".into()));
        assert!(groups.of(&training).is_none());
        assert_eq!(groups.expected_id(&class(None)), Some(None));
    }
}
