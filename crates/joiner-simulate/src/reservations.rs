//! Capacity reservations in the simulated cloud, as EC2 keeps them: a reservation holds so many
//! instances of one type in one zone; a launch that targets a full (or unknown, or ended) one
//! fails as EC2's `ReservationCapacityExceeded` does, which the controller reads as
//! insufficient capacity; a Capacity Block's instances are terminated 30 minutes before its end,
//! and it selects nothing once ended.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::api::ec2nodeclass::CapacityReservationSelectorTerm;
use joiner_model::api::nodeclass_status::CapacityReservation;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// EC2 starts terminating a Capacity Block's instances this long before its end.
const BLOCK_RECLAIM_LEAD: SignedDuration = SignedDuration::from_mins(30);

#[derive(Debug, Clone)]
struct Reservation {
    /// As `DescribeCapacityReservations` would describe it, less the free count.
    shape: CapacityReservation,
    tags: BTreeMap<String, String>,
    total: u32,
    /// Instances launched into it; terminated ones stop counting.
    members: BTreeSet<String>,
}

/// Every reservation of the account.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reservations {
    by_id: BTreeMap<String, Reservation>,
}

impl Reservations {
    pub(crate) fn add(
        &mut self,
        shape: CapacityReservation,
        tags: BTreeMap<String, String>,
        total: u32,
    ) {
        self.by_id.insert(
            shape.id.clone(),
            Reservation {
                shape,
                tags,
                total,
                members: BTreeSet::new(),
            },
        );
    }

    fn ended(r: &Reservation, now: Timestamp) -> bool {
        r.shape.end_time.as_ref().is_some_and(|end| end.0 <= now)
    }

    fn free(r: &Reservation, running: &impl Fn(&str) -> bool) -> u32 {
        let used = r.members.iter().filter(|id| running(id)).count();
        r.total
            .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX))
    }

    /// What the terms select at `now`, each with its free count, as EC2 answers: by id, or by
    /// every tag and the owner; only active (not ended) reservations.
    pub(crate) fn select(
        &self,
        terms: &[CapacityReservationSelectorTerm],
        now: Timestamp,
        running: impl Fn(&str) -> bool,
    ) -> Vec<CapacityReservation> {
        self.by_id
            .values()
            .filter(|r| !Self::ended(r, now))
            .filter(|r| {
                terms.iter().any(|t| {
                    t.id.as_deref().is_none_or(|id| id == r.shape.id)
                        && t.owner_id.as_deref().is_none_or(|o| o == r.shape.owner_id)
                        && t.tags
                            .iter()
                            .all(|(k, v)| r.tags.get(k).is_some_and(|have| v == "*" || have == v))
                })
            })
            .map(|r| CapacityReservation {
                available_instance_count: Some(Self::free(r, &running)),
                state: "active".into(),
                ..r.shape.clone()
            })
            .collect()
    }

    /// Takes a place in reservation `id` for a new instance of `instance_type` in `zone`. `Err`
    /// when EC2 would refuse (`ReservationCapacityExceeded`); `Ok` with the time EC2 reclaims
    /// the instance, for a Capacity Block with an end.
    pub(crate) fn take(
        &mut self,
        id: &str,
        (instance_type, zone): (&str, &str),
        instance_id: &str,
        now: Timestamp,
        running: impl Fn(&str) -> bool,
    ) -> Result<Option<Timestamp>, ()> {
        let Some(r) = self.by_id.get_mut(id) else {
            return Err(());
        };
        if r.shape.instance_type != instance_type
            || r.shape.availability_zone != zone
            || Self::ended(r, now)
            || Self::free(r, &running) == 0
        {
            return Err(());
        }
        r.members.insert(instance_id.to_string());
        Ok(r.shape
            .end_time
            .as_ref()
            .filter(|_| r.shape.is_capacity_block())
            .and_then(|end| end.0.checked_sub(BLOCK_RECLAIM_LEAD).ok()))
    }
}
