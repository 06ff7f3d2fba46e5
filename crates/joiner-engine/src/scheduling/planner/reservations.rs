//! Capacity reservations shared out among the NodeClaims of one plan.
//!
//! A reserved offering is priced near zero, so without a count every NodeClaim would take it.
//! Each reservation holds only so many more instances: the planner books one per NodeClaim
//! planned on it and stops offering it once it is full. The count is global, not per NodePool:
//! two NodePools (or two classes) that select the same reservation share it.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::super::{LaunchOffering, SchedulingInput};

/// Free and booked instances per reservation ID. Cloned with the planner for what-ifs.
#[derive(Clone, Default)]
pub(super) struct Reservations {
    free: Rc<BTreeMap<String, u32>>,
    booked: BTreeMap<String, u32>,
    /// Counts ignored: every reservation has room (see [`Reservations::uncounted`]).
    uncounted: bool,
}

impl Reservations {
    /// The reservations the input's offerings name, each with the smallest free count any
    /// offering gives it (they agree unless the input was assembled by hand).
    pub(super) fn of(input: &SchedulingInput) -> Reservations {
        let mut free: BTreeMap<String, u32> = BTreeMap::new();
        let offerings = input
            .pools
            .iter()
            .flat_map(|p| p.options.iter())
            .flat_map(|o| o.offerings.iter());
        for r in offerings.filter_map(|o| o.reservation.as_ref()) {
            free.entry(r.id.clone())
                .and_modify(|f| *f = (*f).min(r.free))
                .or_insert(r.free);
        }
        Reservations {
            free: Rc::new(free),
            booked: BTreeMap::new(),
            uncounted: false,
        }
    }

    /// Every reservation with room: the last resort of a NodeClaim whose only offerings are
    /// reservations that filled after it chose its type. EC2 refuses the launch if it is full,
    /// and the pods are planned again; a NodeClaim dropped from the plan would leave its pods
    /// bound to nothing.
    pub(super) fn uncounted() -> Reservations {
        Reservations {
            uncounted: true,
            ..Reservations::default()
        }
    }

    /// The same reservations with nothing booked: to share them out again.
    pub(super) fn unbooked(&self) -> Reservations {
        Reservations {
            free: self.free.clone(),
            booked: BTreeMap::new(),
            uncounted: false,
        }
    }

    /// Whether the offering can be used: it is not reserved, or its reservation has room.
    pub(super) fn has_room(&self, offering: &LaunchOffering) -> bool {
        self.uncounted
            || offering.reservation.as_ref().is_none_or(|r| {
                let booked = self.booked.get(&r.id).copied().unwrap_or(0);
                booked < self.free.get(&r.id).copied().unwrap_or(0)
            })
    }

    /// Books one instance of reservation `id`; true when that filled it.
    pub(super) fn book(&mut self, id: &str) -> bool {
        let booked = self.booked.entry(id.to_string()).or_insert(0);
        *booked += 1;
        *booked >= self.free.get(id).copied().unwrap_or(0)
    }

    /// Gives back one instance of reservation `id`; true when it was full before.
    pub(super) fn release(&mut self, id: &str) -> bool {
        let free = self.free.get(id).copied().unwrap_or(0);
        match self.booked.get_mut(id) {
            Some(booked) if *booked > 0 => {
                let was_full = *booked >= free;
                *booked -= 1;
                was_full
            }
            _ => false,
        }
    }
}
