//! Turning the planner's state into the plan document.

use std::collections::BTreeMap;

use super::super::resources;
use super::pools::offering_allowed;
use super::reservations::Reservations;
use super::{Planner, cheapest_offering};
use crate::plan::{
    Binding, ClaimResources, Plan, PlannedNodeClaim, PlannedOffering, Unschedulable,
};
use joiner_model::wellknown::{annotations, labels};

impl Planner<'_> {
    pub(super) fn finish(self, unschedulable: Vec<Unschedulable>) -> Plan {
        let mut plan = Plan::new();
        // Reservations are shared out again in the order the NodeClaims were made, so that no
        // reservation is planned past its free count whatever growing did to the bookings.
        let mut reservations = self.reservations.unbooked();
        let drivers_by_node = self
            .dra
            .as_ref()
            .map(|dra| dra.drivers_by_node())
            .unwrap_or_default();
        for claim in &self.claims {
            let pool = &self.pools[claim.pool];
            let Some(&(_, o)) = claim.allowed.get(claim.chosen) else {
                continue;
            };
            let opt = &pool.options[o];
            let Some(offering) = cheapest_offering(pool, o, &claim.requirements, &reservations)
                .or_else(|| {
                    cheapest_offering(pool, o, &claim.requirements, &Reservations::uncounted())
                })
            else {
                continue;
            };
            let reservation = offering.reservation.as_ref();
            if let Some(r) = reservation {
                reservations.book(&r.id);
            }
            let price = offering.price;
            let mut labels = opt.labels.clone();
            for (k, r) in claim.requirements.iter() {
                if !labels.contains_key(k)
                    && let Some(v) = r.any_value()
                {
                    labels.insert(k.clone(), v.to_string());
                }
            }
            for key in labels::OFFERING_DEFINED {
                match offering.label(key) {
                    Some(v) => labels.insert(key.to_string(), v.to_string()),
                    None => labels.remove(key),
                };
            }
            let mut requested = claim.used.clone();
            resources::add(&mut requested, &opt.daemon);
            let option_input = pool
                .input
                .options
                .iter()
                .find(|x| x.instance_type == opt.name);
            let like = option_input
                .map(|x| x.allocatable.clone())
                .unwrap_or_default();
            let mut pods: Vec<String> = claim
                .pods
                .iter()
                .map(|&p| self.input.pods[p].key())
                .collect();
            pods.sort();
            let instance_type_options = claim.allowed[claim.chosen..]
                .iter()
                .filter(|(_, o)| resources::fits_in(&claim.used, &pool.options[*o].room))
                .map(|(_, o)| pool.options[*o].name.clone())
                .take(20)
                .collect();
            let mut annotations = BTreeMap::new();
            // Karpenter's record of whether a NodeClaim with minValues got fewer values than
            // they ask for (only ever true under the BestEffort policy).
            if claim
                .requirements
                .iter()
                .any(|(_, r)| r.min_values.is_some())
            {
                let met = self.min_values_met(
                    pool,
                    &claim.allowed,
                    claim.chosen,
                    &claim.used,
                    &claim.requirements,
                );
                annotations.insert(
                    annotations::MIN_VALUES_RELAXED.to_string(),
                    (!met).to_string(),
                );
            }
            if let Some(drivers) = drivers_by_node.get(claim.name.as_str())
                && !drivers.is_empty()
            {
                if let Some(text) = predicted_devices(&pool.input.options[opt.source], drivers) {
                    annotations.insert(annotations::PREDICTED_DRA_DEVICES.to_string(), text);
                }
                annotations.insert(
                    annotations::REQUESTED_DRA_DRIVERS.to_string(),
                    drivers.iter().cloned().collect::<Vec<_>>().join(","),
                );
            }
            plan.node_claims.push(PlannedNodeClaim {
                name: claim.name.clone(),
                node_pool: pool.input.name.clone(),
                instance_type: opt.name.clone(),
                capacity_type: offering.capacity_type.clone(),
                zone: offering.zone.clone(),
                capacity_reservation_id: reservation.map(|r| r.id.clone()),
                price_per_hour: price,
                price_note: match reservation {
                    Some(r) => Some(format!(
                        "reserved capacity ({} {}): paid for already, planned at a near-zero price",
                        r.reservation_type(),
                        r.id
                    )),
                    None => offering.price_basis.note().map(str::to_string),
                },
                pods,
                resources: ClaimResources {
                    requested: self.index.list(&requested, &like),
                    allocatable: like.clone(),
                },
                labels,
                annotations,
                instance_type_options,
                offerings: {
                    let mut offs: Vec<PlannedOffering> = pool.offerings[o]
                        .iter()
                        .filter(|off| offering_allowed(off, &claim.requirements))
                        .map(|off| PlannedOffering {
                            zone: off.zone.clone(),
                            capacity_type: off.capacity_type.clone(),
                            capacity_reservation_id: off.reservation.as_ref().map(|r| r.id.clone()),
                            price_per_hour: off.price,
                            price_basis: off.price_basis,
                        })
                        .collect();
                    offs.sort_by(|a, b| {
                        (a.price_per_hour, &a.zone, &a.capacity_type).cmp(&(
                            b.price_per_hour,
                            &b.zone,
                            &b.capacity_type,
                        ))
                    });
                    offs
                },
                is_static: false,
            });
        }
        plan.total_price_per_hour = plan.node_claims.iter().map(|c| c.price_per_hour).sum();
        plan.bindings = self
            .bindings
            .iter()
            .map(|(p, n)| Binding {
                pod: self.input.pods[*p].key(),
                node: n.clone(),
            })
            .collect();
        plan.bindings.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan.unschedulable = unschedulable;
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        if let Some(mut dra) = self.dra {
            plan.claims = std::mem::take(&mut dra.results)
                .into_iter()
                .map(|(claim, node, allocation)| crate::plan::ClaimAllocation {
                    spec: dra.made_spec(&claim, &allocation),
                    claim,
                    node,
                    allocation,
                })
                .collect();
            plan.claims.sort_by(|a, b| a.claim.cmp(&b.claim));
        }
        plan
    }

    /// A NodeClaim just made for pod `p`: if the pod has claims, the node gets its instance
    /// type's devices, sees the network-attached devices its labels admit, and the claims get
    /// their allocation there.
    pub(super) fn give_devices(&mut self, p: usize) {
        let c = self.claims.len() - 1;
        if !self.dra.as_ref().is_some_and(|d| d.uses_claims(p)) {
            return;
        }
        let claim = &self.claims[c];
        let Some(&(_, o)) = claim.allowed.get(claim.chosen) else {
            return;
        };
        let labels = self.new_node_labels(claim.pool, o, claim.zone);
        let pool = &self.pools[claim.pool];
        let source = pool.options[o].source;
        let options = pool
            .input
            .options
            .get(source)
            .and_then(|x| x.devices.as_ref())
            .map(|d| &d.options);
        let Some(dra) = self.dra.as_mut() else {
            return;
        };
        let claim = &mut self.claims[c];
        dra.add_claim_node(c, &claim.name, &labels, claim.pool, source, options);
        claim.devices_pinned = true;
        match dra.fits_claim(p, c) {
            Some(allocations) => dra.commit(&claim.name, allocations),
            None => {
                tracing::warn!(pod = %self.input.pods[p].key(), node = %claim.name, "claims did not fit the planned node they were probed for")
            }
        }
    }
}

/// The devices each of `drivers` is expected to publish on a node of `option`, as the
/// `joiner.dev/predicted-dra-devices` annotation keeps them (`None`: no templates).
fn predicted_devices(
    option: &crate::scheduling::LaunchOption,
    drivers: &std::collections::BTreeSet<String>,
) -> Option<String> {
    let source = option.devices.as_ref()?;
    let counts: BTreeMap<String, u32> = source
        .templates
        .device_counts(&source.options)
        .into_iter()
        .filter(|(d, _)| drivers.contains(d))
        .collect();
    if counts.is_empty() {
        return None;
    }
    serde_json::to_string(&counts).ok()
}
