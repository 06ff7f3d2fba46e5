//! What it takes for a pod to join a planned NodeClaim, or to get a new one: requirements,
//! zone, topology, room, growth to a larger instance type, limits, `minValues`, devices.

use std::rc::Rc;

use joiner_model::Price;
use joiner_model::wellknown::labels;

use super::super::resources;
use super::super::taints;
use super::super::topology::Domains;
use super::{Allowed, ClaimChange, NewClaim, Planner, Rejection, copies_that_fit, option_price};
use crate::requirements::{Requirement, Requirements};

impl Planner<'_> {
    /// Whether `p` can join claim `c` under alternative `alt`, and at what added price.
    /// Growing to a larger instance type is considered only while it adds at most `max_growth`
    /// to the price (zero: the pod must fit in the room the NodeClaim has).
    pub(super) fn evaluate_claim(
        &self,
        p: usize,
        c: usize,
        alt: &Requirements,
        strict: bool,
        max_growth: Price,
        zones: &[u32],
    ) -> Result<ClaimChange, Rejection> {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let hostname = self.claim_domain(c);
        // A pod with claims only joins a NodeClaim whose devices are already set (one made for
        // such a pod), and such a NodeClaim keeps its instance type.
        let dra_pod = self.dra.as_ref().is_some_and(|d| d.uses_claims(p));
        if dra_pod && !claim.devices_pinned {
            return Err(Rejection::NoRoom { growable: false });
        }
        let fixed_type = dra_pod || claim.devices_pinned;
        let max_growth = if fixed_type { Price::ZERO } else { max_growth };
        // Cheap rejections first: room when the claim may not grow (a permanent reason, so
        // checked before topology, whose reasons may pass), then topology.
        if max_growth == Price::ZERO && !self.claim_has_room(c, p) {
            // Full; but if topology rules the NodeClaim out for good, say so, since that holds
            // for every pod of this shape whatever its size.
            let at = Domains {
                hostname,
                zone: claim.zone,
            };
            return Err(match self.topology.check(p, at, strict, zones) {
                // A full NodeClaim whose zone is still open is not worth growing for a pod
                // that would have to fix its zone: a new node serves it as well.
                Ok(()) if claim.zone.is_none() && self.topology.needs_zone(p) => {
                    Rejection::NoRoom { growable: false }
                }
                Ok(()) => Rejection::NoRoom { growable: true },
                Err(v) if v.is_permanent() => Rejection::Never,
                Err(_) => Rejection::NoRoom { growable: false },
            });
        }
        self.topology
            .check(
                p,
                Domains {
                    hostname,
                    zone: claim.zone,
                },
                strict,
                zones,
            )
            .map_err(Rejection::of)?;
        let (requirements, mut allowed) = if alt.is_empty() {
            (None, None)
        } else {
            // A NodeClaim's requirements only narrow, so a conflict now is a conflict forever.
            let merged = claim
                .requirements
                .intersect(alt)
                .map_err(|_| Rejection::Never)?;
            if merged == claim.requirements {
                (None, None)
            } else {
                if !self.defined(pool, alt) {
                    return Err(Rejection::Never);
                }
                (
                    Some(merged.clone()),
                    Some(self.allowed_for(claim.pool, &merged)),
                )
            }
        };
        let mut zone = claim.zone;
        let mut requirements = requirements;
        if zone.is_none() && self.topology.needs_zone(p) {
            let reqs = requirements.as_ref().unwrap_or(&claim.requirements);
            let (z, r, a) = self
                .pin_zone(p, claim.pool, reqs, hostname, strict)
                .ok_or(Rejection::NotNow)?;
            zone = Some(z);
            requirements = Some(r);
            allowed = Some(a);
        }
        self.topology
            .check(p, Domains { hostname, zone }, strict, zones)
            .map_err(Rejection::of)?;
        let list = allowed.as_ref().unwrap_or(&claim.allowed);
        let mut used = claim.used.clone();
        resources::add(&mut used, &self.requests[p]);
        let current = claim.price();
        let start = if allowed.is_some() { 0 } else { claim.chosen };
        let current_option = claim.allowed.get(claim.chosen).map(|a| a.1);
        for (i, &(price, o)) in list.iter().enumerate().skip(start) {
            // Sorted by price: past the bound, nothing is cheap enough (now; a later pod may
            // find this NodeClaim worth growing).
            if price.saturating_sub(current) > max_growth {
                return Err(Rejection::NoRoom { growable: true });
            }
            if !self.option_holds(pool, o, &used, p) || (fixed_type && Some(o) != current_option) {
                continue;
            }
            if Some(o) != current_option
                && !self.within_limits(
                    claim.pool,
                    Some(current_option.map(|co| &pool.options[co].capacity)),
                    o,
                )
            {
                continue;
            }
            if !self.min_values_ok(
                pool,
                list,
                i,
                &used,
                requirements.as_ref().unwrap_or(&claim.requirements),
            ) {
                continue;
            }
            let allocations = match &self.dra {
                Some(dra) if dra_pod => dra
                    .fits_claim(p, c)
                    .ok_or(Rejection::NoRoom { growable: false })?,
                _ => Vec::new(),
            };
            return Ok(ClaimChange {
                claim: c,
                requirements,
                allowed,
                chosen: i,
                zone,
                delta: price.saturating_sub(current),
                allocations,
            });
        }
        Err(Rejection::NoRoom { growable: false })
    }

    /// A new NodeClaim for `p` in `pool` under `alt`.
    pub(super) fn evaluate_new(
        &self,
        p: usize,
        pool_index: usize,
        alt: &Requirements,
        strict: bool,
        zones: &[u32],
    ) -> Option<NewClaim> {
        let pool = &self.pools[pool_index];
        let pod = &self.input.pods[p];
        if taints::first_untolerated(&pool.input.taints, &pod.tolerations).is_some() {
            return None;
        }
        let requirements = pool.requirements.intersect(alt).ok()?;
        if !self.defined(pool, alt) {
            return None;
        }
        let hostname = self.claim_domain(self.claims.len());
        let (zone, requirements, allowed) = if self.topology.needs_zone(p) {
            let (z, r, a) = self.pin_zone(p, pool_index, &requirements, hostname, strict)?;
            (Some(z), r, a)
        } else {
            let allowed = self.allowed_for(pool_index, &requirements);
            (None, requirements, allowed)
        };
        if let Some(found) = self.new_in_zone(
            p,
            pool_index,
            (zone, &requirements, &allowed),
            strict,
            zones,
        ) {
            return Some(found);
        }
        // Network-attached devices that serve some zones only: a NodeClaim pinned to one of
        // them may serve the claims where one whose zone is open does not.
        let dra_zones = zone.is_none()
            && self
                .dra
                .as_ref()
                .is_some_and(|d| d.uses_claims(p) && d.zone_scoped());
        if !dra_zones {
            return None;
        }
        self.pod_zones(std::slice::from_ref(&requirements))
            .into_iter()
            .find_map(|z| {
                let (merged, list) = self.pinned(pool_index, &requirements, z)?;
                if list.is_empty() {
                    return None;
                }
                self.new_in_zone(p, pool_index, (Some(z), &merged, &list), strict, zones)
            })
    }

    /// The best new NodeClaim for `p` in `pool_index` with its zone pinned or open, under
    /// requirements whose options are `allowed`, if topology allows it there.
    fn new_in_zone(
        &self,
        p: usize,
        pool_index: usize,
        (zone, requirements, allowed): (Option<u32>, &Requirements, &Rc<Allowed>),
        strict: bool,
        zones: &[u32],
    ) -> Option<NewClaim> {
        let pool = &self.pools[pool_index];
        let hostname = self.claim_domain(self.claims.len());
        self.topology
            .check(p, Domains { hostname, zone }, strict, zones)
            .ok()?;
        // Look ahead at the pending pods of the same class: the node type with the lowest price
        // per pod it can take, so a workload of many pods gets a node it fills.
        let used = self.requests[p].clone();
        let expected = self
            .remaining
            .get(self.class_of[p])
            .copied()
            .unwrap_or(1)
            .min(self.topology.per_node_cap(p, strict))
            .max(1);
        let mut best: Option<(usize, u32)> = None;
        for (i, &(price, o)) in allowed.iter().enumerate() {
            // Sorted by price: once even a node full of `expected` pods cannot beat the best
            // price per pod, nothing later can.
            if let Some((b, bc)) = best
                && (price.nano_usd() as i128) * (bc as i128)
                    >= (allowed[b].0.nano_usd() as i128) * (expected as i128)
            {
                break;
            }
            if !(self.option_holds(pool, o, &used, p)
                && self.within_limits(pool_index, None, o)
                && self.min_values_ok(pool, allowed, i, &used, requirements))
            {
                continue;
            }
            let mut copies = copies_that_fit(&used, &pool.options[o].room, expected);
            if let Some(dra) = self.dra.as_ref().filter(|d| d.uses_claims(p)) {
                // The node must serve the pod's claims from the devices its type publishes
                // and the network-attached devices it would see.
                let at = super::dra::ProbeAt {
                    pool: pool_index,
                    option: pool.options[o].source,
                    zone,
                };
                let served = dra.probe_copies(
                    p,
                    self.class_of[p],
                    at,
                    || self.new_node_labels(pool_index, o, zone),
                    expected,
                );
                if served == 0 {
                    continue;
                }
                copies = copies.min(served);
            }
            let better = best.is_none_or(|(b, bc)| {
                let (bp, _) = allowed[b];
                // price / copies < bp / bc, compared exactly.
                (price.nano_usd() as i128) * (bc as i128)
                    < (bp.nano_usd() as i128) * (copies as i128)
            });
            if better {
                best = Some((i, copies));
            }
        }
        let (chosen, copies) = best?;
        let price = allowed[chosen].0;
        Some(NewClaim {
            pool: pool_index,
            requirements: requirements.clone(),
            allowed: allowed.clone(),
            chosen,
            zone,
            price,
            copies,
        })
    }

    /// The labels a new node of option `o` of `pool_index` is sure to have, as network-attached
    /// slices' node selectors see it before launch: the instance type's labels and the
    /// NodePool's template labels (the option's), the NodePool's requirements that allow one
    /// value only (a capacity type, a zone), and `zone` when the NodeClaim's zone is pinned.
    pub(super) fn new_node_labels(
        &self,
        pool_index: usize,
        o: usize,
        zone: Option<u32>,
    ) -> std::collections::BTreeMap<String, String> {
        let pool = &self.pools[pool_index];
        let mut out = pool.options[o].labels.clone();
        for (key, r) in pool.requirements.iter() {
            if out.contains_key(key) {
                continue;
            }
            if let Some(mut values) = r.allowed_values()
                && let (Some(only), None) = (values.next(), values.next())
            {
                out.insert(key.clone(), only.to_string());
            }
        }
        if let Some(name) = zone.and_then(|z| self.zone_names.get(z as usize)) {
            out.insert(labels::ZONE.to_string(), name.clone());
        }
        out
    }

    /// Chooses a zone for a planned node so that `p`'s zone constraints hold: the allowed zone
    /// with the fewest pods of its spread groups, then by name.
    pub(super) fn pin_zone(
        &self,
        p: usize,
        pool_index: usize,
        reqs: &Requirements,
        hostname: u32,
        strict: bool,
    ) -> Option<(u32, Requirements, Rc<Allowed>)> {
        let mut zones: Vec<u32> = self.pod_zones(std::slice::from_ref(reqs));
        let all = zones.clone();
        // Zone ids follow zone names, so ties fall to the first name.
        zones.sort_by_key(|&z| (self.topology.zone_load(p, z), z));
        for z in zones {
            if self
                .topology
                .check(
                    p,
                    Domains {
                        hostname,
                        zone: Some(z),
                    },
                    strict,
                    &all,
                )
                .is_err()
            {
                continue;
            }
            let Some((merged, list)) = self.pinned(pool_index, reqs, z) else {
                continue;
            };
            if list.is_empty() {
                continue;
            }
            return Some((z, merged, list));
        }
        None
    }

    /// `reqs` with the zone fixed to `zone`, and the options that allows. Cached for a pool's
    /// own requirements, which most NodeClaims keep.
    pub(super) fn pinned(
        &self,
        pool_index: usize,
        reqs: &Requirements,
        zone: u32,
    ) -> Option<(Requirements, Rc<Allowed>)> {
        let base = *reqs == self.pools[pool_index].requirements;
        if base && let Some(hit) = self.pin_cache.borrow().get(&(pool_index, zone)) {
            return Some(hit.clone());
        }
        let mut pin = Requirements::new();
        pin.add(
            labels::ZONE,
            Requirement::equals(&self.zone_names[zone as usize]),
        );
        let merged = reqs.intersect(&pin).ok()?;
        let list = self.allowed_for(pool_index, &merged);
        if base {
            self.pin_cache
                .borrow_mut()
                .insert((pool_index, zone), (merged.clone(), list.clone()));
        }
        Some((merged, list))
    }

    /// The options of a pool that `reqs` allow, with their prices, cheapest first. Cached,
    /// since many pods share the same requirements.
    pub(super) fn allowed_for(&self, pool_index: usize, reqs: &Requirements) -> Rc<Allowed> {
        if let Some(hit) = self.allowed_cache.borrow()[pool_index].get(reqs) {
            return hit.clone();
        }
        let pool = &self.pools[pool_index];
        let mut list: Allowed = (0..pool.options.len())
            .filter_map(|o| option_price(pool, o, reqs, &self.reservations).map(|pr| (pr, o)))
            .collect();
        list.sort();
        let list = Rc::new(list);
        self.allowed_cache.borrow_mut()[pool_index].insert(reqs.clone(), list.clone());
        list
    }
}
