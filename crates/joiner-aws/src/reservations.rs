//! Capacity reservations from the EC2NodeClass's `capacityReservationSelectorTerms`: on-demand
//! capacity reservations and Capacity Blocks for ML, as `DescribeCapacityReservations` has them.
//!
//! A term selects by `id`, or by `tags` (every one must match) and `ownerID`; terms are ORed,
//! as Karpenter reads them. Only `active` reservations are kept: a pending Capacity Block takes
//! no instances yet, an expired or cancelled one none at all. moto has no capacity reservations,
//! so what EC2 answers is turned into the status shape by [`reservation_of`], tested on SDK
//! values; the call itself is a plain paginated Describe like the subnets'.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{CapacityReservation as Ec2Reservation, CapacityReservationType, Filter};
use joiner_model::api::ec2nodeclass::CapacityReservationSelectorTerm;
use joiner_model::api::nodeclass_status::{CAPACITY_BLOCK, CapacityReservation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::clients::Clients;
use crate::error::AwsError;
use crate::tags::tag_filters;

/// EC2's answer for one reservation in the EC2NodeClass status shape, with its free count;
/// `None` when it lacks what a launch needs (id, zone, type) or is not active.
pub(crate) fn reservation_of(r: &Ec2Reservation) -> Option<CapacityReservation> {
    if r.state().map(|s| s.as_str()) != Some("active") {
        return None;
    }
    let end_time = r.end_date().and_then(|d| {
        k8s_openapi::jiff::Timestamp::from_second(d.secs())
            .ok()
            .map(Time)
    });
    Some(CapacityReservation {
        id: r.capacity_reservation_id()?.to_string(),
        availability_zone: r.availability_zone()?.to_string(),
        instance_type: r.instance_type()?.to_string(),
        owner_id: r.owner_id().unwrap_or_default().to_string(),
        instance_match_criteria: r
            .instance_match_criteria()
            .map(|c| c.as_str().to_string())
            .unwrap_or_default(),
        reservation_type: match r.reservation_type() {
            Some(CapacityReservationType::CapacityBlock) => CAPACITY_BLOCK.to_string(),
            _ => "default".to_string(),
        },
        interruptible: r.interruptible().unwrap_or(false),
        state: "active".to_string(),
        end_time,
        available_instance_count: r
            .available_instance_count()
            .and_then(|n| u32::try_from(n).ok()),
    })
}

/// The filters of one term, `state=active` always, and its `instanceMatchCriteria` (`open` or
/// `targeted`) as EC2's `instance-match-criteria` filter, as Karpenter sends it.
fn filters(term: &CapacityReservationSelectorTerm) -> Vec<Filter> {
    let mut filters = tag_filters(&term.tags);
    if let Some(owner) = &term.owner_id {
        filters.push(Filter::builder().name("owner-id").values(owner).build());
    }
    if let Some(criteria) = &term.instance_match_criteria {
        filters.push(
            Filter::builder()
                .name("instance-match-criteria")
                .values(criteria)
                .build(),
        );
    }
    filters.push(Filter::builder().name("state").values("active").build());
    filters
}

impl Clients {
    /// Every active reservation any term selects, each once, by id. A class without terms
    /// selects none, without a call. An id EC2 does not know selects nothing (it may have been
    /// cancelled); any other failure fails the whole read, so the last status stands.
    pub(crate) async fn capacity_reservations(
        &self,
        node_class: &str,
        terms: &[CapacityReservationSelectorTerm],
    ) -> Result<Vec<CapacityReservation>, AwsError> {
        let mut found: BTreeMap<String, CapacityReservation> = BTreeMap::new();
        for term in terms {
            let mut call = self
                .ec2
                .describe_capacity_reservations()
                .set_filters(Some(filters(term)));
            if let Some(id) = &term.id {
                call = call.capacity_reservation_ids(id);
            }
            let mut pages = call.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = match page {
                    Ok(page) => page,
                    Err(e) => {
                        let e = AwsError::api(
                            "DescribeCapacityReservations",
                            format!("EC2NodeClass {node_class} term {term:?}"),
                            e,
                        );
                        if e.code()
                            .is_some_and(|c| c.starts_with("InvalidCapacityReservationId"))
                        {
                            break;
                        }
                        return Err(e);
                    }
                };
                for r in page
                    .capacity_reservations()
                    .iter()
                    .filter_map(reservation_of)
                {
                    found.insert(r.id.clone(), r);
                }
            }
        }
        Ok(found.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::primitives::DateTime;
    use aws_sdk_ec2::types::{CapacityReservationState, InstanceMatchCriteria};

    fn ec2(state: CapacityReservationState) -> Ec2Reservation {
        Ec2Reservation::builder()
            .capacity_reservation_id("cr-0123")
            .availability_zone("us-east-1a")
            .instance_type("p5.48xlarge")
            .owner_id("012345678901")
            .instance_match_criteria(InstanceMatchCriteria::Targeted)
            .reservation_type(CapacityReservationType::CapacityBlock)
            .state(state)
            .available_instance_count(3)
            .total_instance_count(4)
            .end_date(DateTime::from_secs(1_796_299_200))
            .build()
    }

    #[test]
    fn an_active_capacity_block_reads_as_karpenter_records_it_with_its_free_count() {
        let r = reservation_of(&ec2(CapacityReservationState::Active)).expect("active");
        assert_eq!(r.id, "cr-0123");
        assert_eq!(r.instance_type, "p5.48xlarge");
        assert_eq!(r.availability_zone, "us-east-1a");
        assert_eq!(r.instance_match_criteria, "targeted");
        assert_eq!(r.reservation_type, "capacity-block");
        assert!(r.is_capacity_block());
        assert_eq!(r.available_instance_count, Some(3));
        assert_eq!(
            r.end_time.as_ref().map(|t| t.0.as_second()),
            Some(1_796_299_200)
        );
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["ownerID"], "012345678901");
        assert_eq!(json["availableInstanceCount"], 3);
    }

    #[test]
    fn reservations_that_are_not_active_are_not_offered() {
        for state in [
            CapacityReservationState::Pending,
            CapacityReservationState::Expired,
            CapacityReservationState::Cancelled,
            CapacityReservationState::PaymentPending,
        ] {
            assert_eq!(reservation_of(&ec2(state.clone())), None, "{state:?}");
        }
    }

    #[test]
    fn a_term_filters_on_its_tags_owner_and_the_active_state() {
        let term = CapacityReservationSelectorTerm {
            tags: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            id: None,
            owner_id: Some("012345678901".into()),
            instance_match_criteria: None,
        };
        let filters = filters(&term);
        let names: Vec<(&str, &[String])> = filters
            .iter()
            .map(|f| (f.name().unwrap_or_default(), f.values()))
            .collect();
        assert_eq!(names.len(), 3);
        assert_eq!(names[0].0, "tag:team");
        assert_eq!(names[1], ("owner-id", &["012345678901".to_string()][..]));
        assert_eq!(names[2], ("state", &["active".to_string()][..]));
        let targeted = CapacityReservationSelectorTerm {
            instance_match_criteria: Some("targeted".into()),
            ..term
        };
        let with_criteria = super::filters(&targeted);
        assert!(
            with_criteria
                .iter()
                .any(|f| f.name() == Some("instance-match-criteria")
                    && f.values() == ["targeted".to_string()])
        );
    }
}
