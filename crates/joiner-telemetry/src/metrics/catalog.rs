//! Karpenter's instance-type gauges (`karpenter_cloudprovider_instance_type_*`): each type the
//! NodePools may launch, its CPU and memory, and each of its offerings with its price as the
//! plan priced it (NodeOverlays applied). Set wholesale from each planned step's report: a type
//! no NodePool allows any more loses its series.
//!
//! And what each NodePool's NodeClaims cost at those prices (`karpenter_nodepools_cost_total`),
//! as Karpenter's cost tracker sums them: the hourly price of each NodeClaim's offering, by its
//! instance type, capacity type and zone labels; a NodeClaim whose offering has no known price
//! adds nothing.

use std::collections::BTreeMap;
use std::sync::Mutex;

use joiner_controller::OfferedType;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Gauges, Labels, labels};

pub(super) struct CatalogGauges {
    available: Family<Labels, Gauge>,
    price: Gauges,
    cpu_cores: Gauges,
    memory_bytes: Gauges,
    cost: Gauges,
    /// The last prices set, by (instance type, capacity type, zone).
    prices: Mutex<BTreeMap<(String, String, String), f64>>,
}

impl CatalogGauges {
    pub(super) fn register(registry: &mut Registry) -> CatalogGauges {
        let available = Family::<Labels, Gauge>::default();
        registry.register(
            "karpenter_cloudprovider_instance_type_offering_available",
            "1 for each offering a NodePool may launch now, by instance type, capacity type and zone",
            available.clone(),
        );
        let mut gauges = |name: &str, help: &str| {
            let family = Gauges::default();
            registry.register(name, help, family.clone());
            family
        };
        CatalogGauges {
            available,
            price: gauges(
                "karpenter_cloudprovider_instance_type_offering_price_estimate",
                "The hourly price an offering is planned at (USD), by instance type, capacity type and zone",
            ),
            cpu_cores: gauges(
                "karpenter_cloudprovider_instance_type_cpu_cores",
                "vCPUs of the instance type",
            ),
            memory_bytes: gauges(
                "karpenter_cloudprovider_instance_type_memory_bytes",
                "Memory of the instance type as the node reports it, in bytes",
            ),
            cost: gauges(
                "karpenter_nodepools_cost_total",
                "Hourly price (USD) of the NodePool's NodeClaims at the prices the plan uses (NodeOverlays applied); not a billing source",
            ),
            prices: Mutex::default(),
        }
    }

    /// Replaces every series with the types and offerings given.
    pub(super) fn set(&self, types: &[OfferedType]) {
        let mut prices = self.prices.lock().unwrap_or_else(|p| p.into_inner());
        prices.clear();
        for t in types {
            for o in &t.offerings {
                let key = (
                    t.instance_type.clone(),
                    o.capacity_type.clone(),
                    o.zone.clone(),
                );
                prices.insert(key, o.price_usd);
            }
        }
        self.available.clear();
        self.price.clear();
        self.cpu_cores.clear();
        self.memory_bytes.clear();
        for t in types {
            let of_type = labels(&[("instance_type", &t.instance_type)]);
            self.cpu_cores.get_or_create(&of_type).set(t.cpu_cores);
            self.memory_bytes
                .get_or_create(&of_type)
                .set(t.memory_bytes);
            for o in &t.offerings {
                let l = labels(&[
                    ("instance_type", &t.instance_type),
                    ("capacity_type", &o.capacity_type),
                    ("zone", &o.zone),
                ]);
                self.available.get_or_create(&l).set(1);
                self.price.get_or_create(&l).set(o.price_usd);
            }
        }
    }

    /// Sets each NodePool's cost from its NodeClaims' offerings (`claims`: pool and offering of
    /// each), every pool of `pools` present (0 without NodeClaims); a pool gone loses its
    /// series, and its NodeClaims count nowhere.
    pub(super) fn set_costs<'a>(
        &self,
        pools: impl Iterator<Item = &'a str>,
        claims: impl Iterator<Item = (&'a str, &'a (String, String, String))>,
    ) {
        let prices = self.prices.lock().unwrap_or_else(|p| p.into_inner());
        let mut cost: BTreeMap<&str, f64> = pools.map(|p| (p, 0.0)).collect();
        for (pool, offering) in claims {
            if let Some(c) = cost.get_mut(pool) {
                *c += prices.get(offering).copied().unwrap_or(0.0);
            }
        }
        self.cost.clear();
        for (pool, usd) in cost {
            self.cost
                .get_or_create(&labels(&[("nodepool", pool)]))
                .set(usd);
        }
    }
}
