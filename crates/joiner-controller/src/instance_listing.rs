//! One step's listing of the instances Joiner launched, indexed for the questions a step asks
//! of it once per NodeClaim: which instances carry this NodeClaim's tag, and is this instance
//! listed. A step that launches thousands of NodeClaims asks both for each, so scanning the
//! listing each time made the step grow with the square of its launches.

use std::collections::HashMap;

use joiner_model::wellknown::tags;

use crate::cloud::Instance;

/// The listing, with this step's own launches and terminations applied.
#[derive(Debug, Default)]
pub struct InstanceListing {
    by_id: HashMap<String, Instance>,
    /// Ids of the instances tagged with each NodeClaim's name, in listing order; those removed
    /// since are skipped when read, so that a termination costs no rebuild.
    by_claim: HashMap<String, Vec<String>>,
}

impl InstanceListing {
    pub fn new(instances: Vec<Instance>) -> Self {
        let mut listing = InstanceListing::default();
        for instance in instances {
            listing.add(instance);
        }
        listing
    }

    /// The listed instance with this id.
    pub fn get(&self, id: &str) -> Option<&Instance> {
        self.by_id.get(id)
    }

    /// The listed instances tagged with this NodeClaim's name, in listing order.
    pub fn of_claim<'a>(&'a self, claim: &str) -> impl Iterator<Item = &'a Instance> + 'a {
        self.by_claim
            .get(claim)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// Adds an instance this step launched; one already listed is left as listed.
    pub fn add(&mut self, instance: Instance) {
        if self.by_id.contains_key(&instance.id) {
            return;
        }
        if let Some(claim) = instance.tags.get(tags::NODECLAIM) {
            let ids = self.by_claim.entry(claim.clone()).or_default();
            if !ids.contains(&instance.id) {
                ids.push(instance.id.clone());
            }
        }
        self.by_id.insert(instance.id.clone(), instance);
    }

    /// Drops an instance this step terminated.
    pub fn remove(&mut self, id: &str) {
        self.by_id.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::InstanceState;

    fn instance(id: &str, claim: &str) -> Instance {
        Instance {
            id: id.into(),
            instance_type: "g6.xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: joiner_engine::catalog::CapacityType::OnDemand,
            image_id: String::new(),
            private_dns_name: String::new(),
            state: InstanceState::Running,
            tags: [(tags::NODECLAIM.to_string(), claim.to_string())].into(),
            launch_time: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            instance_profile: None,
        }
    }

    #[test]
    fn answers_by_claim_and_id_through_launches_and_terminations() {
        let mut listing = InstanceListing::new(vec![instance("i-1", "a"), instance("i-2", "b")]);
        listing.add(instance("i-3", "a"));
        // A launch the listing already holds is not listed twice.
        listing.add(instance("i-1", "a"));
        let ids =
            |l: &InstanceListing, c: &str| l.of_claim(c).map(|i| i.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&listing, "a"), ["i-1", "i-3"]);
        listing.remove("i-1");
        assert_eq!(ids(&listing, "a"), ["i-3"]);
        assert_eq!(ids(&listing, "b"), ["i-2"]);
        assert!(listing.get("i-1").is_none());
        assert_eq!(listing.get("i-2").map(|i| i.id.as_str()), Some("i-2"));
        assert!(ids(&listing, "c").is_empty());
    }
}
