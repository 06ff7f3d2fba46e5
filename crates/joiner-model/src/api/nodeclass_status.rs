//! The EC2NodeClass status: what its selectors resolved to and whether nodes can be launched
//! from it. Field names and shapes are those of Karpenter's v1 `EC2NodeClassStatus`, so a status
//! Karpenter wrote decodes here, and `kubectl get ec2nodeclass -o yaml` reads the same whoever
//! wrote it.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::nodeclaim::{Condition, set_condition};
use super::schema;

/// Condition types, as Karpenter names them.
pub mod conditions {
    pub const SUBNETS_READY: &str = "SubnetsReady";
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub const AMIS_READY: &str = "AMIsReady";
    pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    /// The class's `placementGroupSelector` finds an available group (True with no selector).
    pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";
    /// The class passes the checks Karpenter's validation controller makes (no tag that would
    /// defeat the ownership check).
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// True once every condition of [`DEPENDENTS`] is.
    pub const READY: &str = "Ready";
    /// What `Ready` is the conjunction of, in the order a not-ready message names them.
    pub const DEPENDENTS: [&str; 6] = [
        SUBNETS_READY,
        SECURITY_GROUPS_READY,
        AMIS_READY,
        INSTANCE_PROFILE_READY,
        PLACEMENT_GROUP_READY,
        VALIDATION_SUCCEEDED,
    ];
}

/// Condition reasons Joiner writes.
pub mod reasons {
    pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
    pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
    pub const AMIS_NOT_FOUND: &str = "AMINotFound";
    pub const INSTANCE_PROFILE_NOT_READY: &str = "InstanceProfileNotReady";
    pub const PLACEMENT_GROUP_NOT_FOUND: &str = "PlacementGroupNotFound";
    pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";
    /// Joiner has not resolved every selector of the class yet.
    pub const NOT_RESOLVED: &str = "AwaitingResolution";
    /// The class sets a tag that would defeat the instance ownership check.
    pub const RESTRICTED_TAG: &str = "RestrictedTag";
}

/// What an EC2NodeClass's selectors resolved to, and whether it is ready.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    /// The active reservations `capacityReservationSelectorTerms` select, as Karpenter records
    /// them, with the free count Joiner adds (see
    /// [`CapacityReservation::available_instance_count`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    #[serde(default, rename = "amis", skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_unkeyed")]
    pub conditions: Vec<Condition>,
}

/// A subnet the class resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A security group the class resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An AMI the class resolved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = ami_schema)]
pub struct Ami {
    pub id: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The instance types this AMI is for (architecture, GPU or not), as node selector
    /// requirements.
    #[serde(default)]
    pub requirements: Vec<NodeSelectorRequirement>,
}

/// Karpenter requires the requirements of a resolved AMI (Joiner's reader defaults them), and
/// replaces a requirement's values as a whole.
fn ami_schema(schema: &mut Schema) {
    schema::require(schema, &["requirements"]);
    if let Some(values) = schema.pointer_mut("/properties/requirements/items/properties/values")
        && let Some(values) = values.as_object_mut()
    {
        values.insert("x-kubernetes-list-type".into(), "atomic".into());
    }
}

/// A capacity reservation as Karpenter records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    pub availability_zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: String,
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: String,
    pub instance_type: String,
    #[serde(rename = "ownerID")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: String,
    /// `default` or `capacity-block`.
    #[serde(default)]
    #[schemars(extend("default" = "default", "enum" = ["default", "capacity-block"]))]
    pub reservation_type: String,
    #[serde(default)]
    #[schemars(transform = schema::drop_default)]
    pub interruptible: bool,
    /// `active` or `expiring`.
    #[serde(default)]
    #[schemars(extend("default" = "active", "enum" = ["active", "expiring"]))]
    pub state: String,
    /// Joiner's addition to Karpenter's shape: how many instances the reservation can still
    /// take, as EC2's `availableInstanceCount` said when the class was last resolved. Karpenter
    /// keeps this count in memory only, so a status it wrote has none; Joiner then assumes
    /// one free instance (see [`CapacityReservation::free_instances`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_instance_count: Option<u32>,
}

/// `reservationType` of a Capacity Block for ML.
pub const CAPACITY_BLOCK: &str = "capacity-block";

/// EC2 begins terminating a Capacity Block's instances 30 minutes before its end and warns 10
/// minutes before that; Joiner, like Karpenter, drains them from the warning on, and launches
/// nothing more into the block.
pub const CAPACITY_BLOCK_DRAIN_LEAD_SECONDS: i64 = 40 * 60;

impl CapacityReservation {
    pub fn is_capacity_block(&self) -> bool {
        self.reservation_type == CAPACITY_BLOCK
    }

    /// Free instances to plan with: the recorded count, or one when none is recorded (a status
    /// Karpenter wrote, a hand-written manifest).
    pub fn free_instances(&self) -> u32 {
        self.available_instance_count.unwrap_or(1)
    }

    /// When a Capacity Block's nodes start draining: [`CAPACITY_BLOCK_DRAIN_LEAD_SECONDS`]
    /// before its end. `None` for other reservations and for blocks with no end time.
    pub fn drain_from(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        if !self.is_capacity_block() {
            return None;
        }
        let end = self.end_time.as_ref()?.0;
        end.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(
            CAPACITY_BLOCK_DRAIN_LEAD_SECONDS,
        ))
        .ok()
    }

    /// Whether nodes may be launched into it at `now` (when known): it is active (no state
    /// counts as active: a hand-written manifest) and, for a Capacity Block, not yet draining.
    pub fn launchable(&self, now: Option<k8s_openapi::jiff::Timestamp>) -> bool {
        let active = self.state.is_empty() || self.state == "active";
        let draining = match (now, self.drain_from()) {
            (Some(now), Some(from)) => now >= from,
            _ => false,
        };
        active && !draining
    }
}

/// Whether a class may launch nodes, as its `Ready` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// `Ready=True`.
    Ready,
    /// No `Ready` condition: nobody has resolved the class (a manifest read from a file).
    Unresolved,
    /// `Ready=False` or `Unknown`, with the condition's message.
    NotReady(String),
}

impl EC2NodeClassStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// What the `Ready` condition says.
    pub fn readiness(&self) -> Readiness {
        match self.condition(conditions::READY) {
            None => Readiness::Unresolved,
            Some(c) if c.status == "True" => Readiness::Ready,
            Some(c) if c.message.is_empty() => {
                Readiness::NotReady(format!("Ready={}: {}", c.status, c.reason))
            }
            Some(c) => Readiness::NotReady(c.message.clone()),
        }
    }

    /// Sets one dependent condition, keeping its transition time when its status does not
    /// change, and recomputes `Ready` from the dependents.
    pub fn set_condition(
        &mut self,
        type_: &str,
        ready: bool,
        reason: &str,
        message: &str,
        now: Time,
        generation: Option<i64>,
    ) {
        let status = if ready { "True" } else { "False" };
        set_condition(
            &mut self.conditions,
            type_,
            status,
            reason,
            message,
            now.clone(),
            generation,
        );
        self.recompute_ready(now, generation);
    }

    /// `Ready` as Karpenter computes it: `True` when every dependent is, `False` naming the
    /// first that is `False`, else `Unknown` while some dependent has not been resolved.
    pub fn recompute_ready(&mut self, now: Time, generation: Option<i64>) {
        let deps: Vec<Option<&Condition>> = conditions::DEPENDENTS
            .iter()
            .map(|t| self.condition(t))
            .collect();
        let (status, reason, message) =
            if deps.iter().all(|c| c.is_some_and(|c| c.status == "True")) {
                ("True", conditions::READY.to_string(), String::new())
            } else if let Some(bad) = deps.iter().flatten().find(|c| c.status == "False") {
                let message = if bad.message.is_empty() {
                    format!("{}=False", bad.type_)
                } else {
                    format!("{}=False: {}", bad.type_, bad.message)
                };
                ("False", reasons::UNHEALTHY_DEPENDENTS.to_string(), message)
            } else {
                let missing: Vec<&str> = conditions::DEPENDENTS
                    .iter()
                    .zip(&deps)
                    .filter(|(_, c)| c.is_none_or(|c| c.status != "True"))
                    .map(|(t, _)| *t)
                    .collect();
                (
                    "Unknown",
                    reasons::NOT_RESOLVED.to_string(),
                    format!("not resolved yet: {}", missing.join(", ")),
                )
            };
        set_condition(
            &mut self.conditions,
            conditions::READY,
            status,
            &reason,
            &message,
            now,
            generation,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("time"))
    }

    #[test]
    fn a_status_karpenter_wrote_decodes_and_reads_ready() {
        let status: EC2NodeClassStatus = serde_json::from_value(serde_json::json!({
            "amis": [{"id": "ami-01", "name": "amazon-eks-node-al2023-x86_64-standard-1.33-v20250715",
                       "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}],
            "instanceProfile": "lab_10290130918376426651",
            "securityGroups": [{"id": "sg-01", "name": "lab-node"}],
            "subnets": [{"id": "subnet-01", "zone": "us-east-1a", "zoneID": "use1-az1"}],
            "capacityReservations": [{"availabilityZone": "us-east-1a", "id": "cr-0123", "instanceMatchCriteria": "targeted",
                                       "instanceType": "p5.48xlarge", "ownerID": "012345678901", "reservationType": "capacity-block",
                                       "state": "active", "endTime": "2026-12-01T00:00:00Z"}],
            "conditions": [
                {"type": "ValidationSucceeded", "status": "True", "reason": "ValidationSucceeded", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}
            ]
        }))
        .expect("decodes");
        assert_eq!(status.readiness(), Readiness::Ready);
        assert_eq!(status.subnets[0].zone_id.as_deref(), Some("use1-az1"));
        assert_eq!(status.capacity_reservations[0].owner_id, "012345678901");
        let back = serde_json::to_value(&status).expect("encodes");
        assert_eq!(back["subnets"][0]["zoneID"], "use1-az1");
        assert_eq!(
            back["amis"][0]["requirements"][0]["key"],
            "kubernetes.io/arch"
        );
        assert_eq!(back["instanceProfile"], "lab_10290130918376426651");
    }

    #[test]
    fn ready_is_true_only_when_every_dependent_is_and_names_the_first_false_one() {
        let mut s = EC2NodeClassStatus::default();
        assert_eq!(s.readiness(), Readiness::Unresolved);
        s.set_condition(
            conditions::SUBNETS_READY,
            true,
            "SubnetsReady",
            "",
            at(1),
            Some(1),
        );
        let Readiness::NotReady(why) = s.readiness() else {
            panic!("ready with three dependents unresolved");
        };
        assert!(why.contains("SecurityGroupsReady"), "{why}");
        for t in &conditions::DEPENDENTS[1..] {
            s.set_condition(t, true, t, "", at(2), Some(1));
        }
        assert_eq!(s.readiness(), Readiness::Ready);
        s.set_condition(
            conditions::SUBNETS_READY,
            false,
            reasons::SUBNETS_NOT_FOUND,
            "no subnet matches spec.subnetSelectorTerms",
            at(3),
            Some(2),
        );
        assert_eq!(
            s.readiness(),
            Readiness::NotReady(
                "SubnetsReady=False: no subnet matches spec.subnetSelectorTerms".into()
            )
        );
        let ready = s.condition(conditions::READY).expect("ready");
        assert_eq!(ready.last_transition_time, at(3));
        assert_eq!(ready.observed_generation, Some(2));
        // Unchanged status keeps its transition time.
        let sg = s.condition(conditions::SECURITY_GROUPS_READY).expect("sg");
        assert_eq!(sg.last_transition_time, at(2));
    }
}
