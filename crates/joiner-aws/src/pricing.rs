//! What EC2 sells now: the instance types Joiner knows that EC2 offers in the configured zones,
//! on-demand at the Price List API's price for the region (`on_demand`; the catalog's where it
//! has none or cannot be read) and spot at the latest price EC2 reports per type and zone.
//!
//! Any failure of the EC2 reads falls back to the built-in catalog's offerings and prices, with
//! a warning: a controller that cannot read prices should keep launching at known prices rather
//! than stop. A Price List API that cannot be read costs only the on-demand prices, which then
//! stay the catalog's.
//! What EC2 answered is cached for `Ttls::instance_types`; the fallback is not, so the next call
//! asks EC2 again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use aws_sdk_ec2::primitives::DateTime;
use aws_sdk_ec2::types::{Filter, InstanceType as Ec2InstanceType, LocationType};
use joiner_controller::cloud::{CloudInstanceType, CloudOffering};
use std::sync::Arc;

use joiner_engine::catalog::{CapacityType, Catalog, Ec2Facts, Offering, PriceBasis};
use joiner_model::Price;

use crate::cache::TtlCache;
use crate::clients::Clients;
use crate::error::AwsError;

/// The latest spot price per (type, zone) from a price history, newest entry winning.
pub(crate) fn latest_spot_prices(
    history: &[(String, String, DateTime, Price)],
) -> BTreeMap<(String, String), Price> {
    let mut latest: BTreeMap<(String, String), (DateTime, Price)> = BTreeMap::new();
    for (t, zone, at, price) in history {
        let key = (t.clone(), zone.clone());
        match latest.get(&key) {
            Some((seen, _)) if seen.secs() >= at.secs() => {}
            _ => {
                latest.insert(key, (*at, *price));
            }
        }
    }
    latest.into_iter().map(|(k, (_, p))| (k, p)).collect()
}

/// The catalog's offerings, as the fallback.
pub(crate) fn catalog_types(catalog: &Catalog) -> Vec<CloudInstanceType> {
    catalog
        .types()
        .iter()
        .map(|t| CloudInstanceType {
            facts: None,
            name: t.name.clone(),
            offerings: t
                .offerings
                .iter()
                .map(|o| CloudOffering {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type,
                    price: o.price,
                    available: o.available,
                    price_basis: o.price_basis,
                })
                .collect(),
        })
        .collect()
}

/// What EC2 says about prices now: the latest spot price per (type, zone) and the Price List
/// API's on-demand price per type.
#[derive(Debug, Default)]
pub(crate) struct Prices {
    pub spot: BTreeMap<(String, String), Price>,
    pub on_demand: BTreeMap<String, Price>,
}

/// Joins what EC2 offers with the prices: on-demand at the Price List API's price (or the
/// catalog's when it has none), spot at EC2's latest price (or the catalog's when EC2 reports
/// none). Types the catalog does not know are sold only when EC2 described them (`described`,
/// carried along so the view can size them) and only at prices EC2 gave.
pub(crate) fn join_offerings(
    catalog: &Catalog,
    described: &BTreeMap<String, Arc<Ec2Facts>>,
    offered: &BTreeSet<(String, String)>,
    prices: &Prices,
) -> Vec<CloudInstanceType> {
    let known = catalog.types().iter().map(|t| (t.name.as_str(), Some(t)));
    let new = described
        .keys()
        .filter(|n| catalog.get(n).is_none())
        .map(|n| (n.as_str(), None));
    let mut out = Vec::new();
    for (name, built_in) in known.chain(new) {
        // The set is ordered by type, then zone: this type's zones are one range of it.
        let zones = offered
            .range((name.to_string(), String::new())..)
            .take_while(|(n, _)| n == name)
            .map(|(_, zone)| zone);
        let offerings: Vec<CloudOffering> = zones
            .flat_map(|zone| offerings_in(name, zone, built_in, prices))
            .collect();
        if !offerings.is_empty() {
            out.push(CloudInstanceType {
                name: name.to_string(),
                offerings,
                facts: match built_in {
                    Some(_) => None,
                    None => described.get(name).cloned(),
                },
            });
        }
    }
    out
}

/// The on-demand and spot offerings of `name` in `zone` that have a price.
fn offerings_in(
    name: &str,
    zone: &str,
    built_in: Option<&joiner_engine::catalog::InstanceType>,
    prices: &Prices,
) -> Vec<CloudOffering> {
    // A built-in offering with no price known offline carries none to use.
    let priced = |o: &&Offering| o.price_basis != PriceBasis::Unknown;
    let catalog_price = |c: CapacityType| {
        let t = built_in?;
        t.offering(zone, c)
            .filter(priced)
            .or_else(|| {
                t.offerings
                    .iter()
                    .filter(priced)
                    .find(|o| o.capacity_type == c)
            })
            .map(|o| (o.price, o.price_basis))
    };
    let listed = |p: &Price| (*p, PriceBasis::Listed);
    let on_demand = prices
        .on_demand
        .get(name)
        .map(listed)
        .or_else(|| catalog_price(CapacityType::OnDemand));
    let spot = prices
        .spot
        .get(&(name.to_string(), zone.to_string()))
        .map(listed)
        .or_else(|| catalog_price(CapacityType::Spot));
    [
        (CapacityType::OnDemand, on_demand),
        (CapacityType::Spot, spot),
    ]
    .into_iter()
    .filter_map(|(capacity_type, priced)| {
        let (price, price_basis) = priced?;
        Some(CloudOffering {
            zone: zone.to_string(),
            capacity_type,
            price,
            available: true,
            price_basis,
        })
    })
    .collect()
}

/// Only the configured zones (all zones when none are configured).
fn zone_filter(zones: &[String]) -> Vec<Filter> {
    if zones.is_empty() {
        return Vec::new();
    }
    vec![
        Filter::builder()
            .name("availability-zone")
            .set_values(Some(zones.to_vec()))
            .build(),
    ]
}

impl Clients {
    /// Instance types with offerings and prices in `zones`: EC2's, cached in `cache`; the
    /// catalog's when EC2 cannot be read.
    pub(crate) async fn cloud_instance_types(
        &self,
        catalog: &Catalog,
        zones: &[String],
        cache: &TtlCache<(), Vec<CloudInstanceType>>,
    ) -> Vec<CloudInstanceType> {
        if let Some(types) = cache.get(&()) {
            return types;
        }
        match self.read_instance_types(catalog, zones).await {
            Ok(types) if !types.is_empty() => {
                cache.insert((), types.clone());
                types
            }
            Ok(_) => {
                tracing::warn!(
                    "EC2 offers none of the known instance types in the configured zones; using the built-in catalog"
                );
                catalog_types(catalog)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read EC2 offerings and prices; using the built-in catalog");
                catalog_types(catalog)
            }
        }
    }

    async fn read_instance_types(
        &self,
        catalog: &Catalog,
        zones: &[String],
    ) -> Result<Vec<CloudInstanceType>, AwsError> {
        let known: BTreeSet<String> = catalog.types().iter().map(|t| t.name.clone()).collect();
        let zone_set: BTreeSet<&String> = zones.iter().collect();

        // The types EC2 has: those Joiner knows, and the facts of those it does not.
        let mut existing = BTreeSet::new();
        let mut described = BTreeMap::new();
        let mut pages = self.ec2.describe_instance_types().into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::api("DescribeInstanceTypes", "all", e))?;
            for info in page.instance_types() {
                let Some(name) = info.instance_type().map(|t| t.as_str().to_string()) else {
                    continue;
                };
                if !known.contains(&name) {
                    match crate::described::facts_of(info) {
                        Some(f) => {
                            described.insert(name.clone(), Arc::new(f));
                        }
                        None => {
                            tracing::warn!(instance_type = %name, "EC2 describes the type without vCPUs or memory; not planned");
                            continue;
                        }
                    }
                }
                existing.insert(name);
            }
        }

        // Where each is offered.
        let mut offered = BTreeSet::new();
        let mut pages = self
            .ec2
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                AwsError::api("DescribeInstanceTypeOfferings", "availability-zone", e)
            })?;
            for o in page.instance_type_offerings() {
                let (Some(t), Some(zone)) = (o.instance_type(), o.location()) else {
                    continue;
                };
                if existing.contains(t.as_str()) && zone_set.contains(&zone.to_string()) {
                    offered.insert((t.as_str().to_string(), zone.to_string()));
                }
            }
        }

        // The spot prices now.
        let mut history = Vec::new();
        let types: Vec<Ec2InstanceType> = existing
            .iter()
            .map(|n| Ec2InstanceType::from(n.as_str()))
            .collect();
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .start_time(DateTime::from(SystemTime::now()))
            .product_descriptions("Linux/UNIX")
            .set_instance_types(Some(types))
            .set_filters(Some(zone_filter(zones)))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page =
                page.map_err(|e| AwsError::api("DescribeSpotPriceHistory", "Linux/UNIX", e))?;
            for p in page.spot_price_history() {
                let linux = p
                    .product_description()
                    .is_some_and(|d| d.as_str().starts_with("Linux/UNIX"));
                let (Some(t), Some(zone), Some(price), Some(at)) = (
                    p.instance_type(),
                    p.availability_zone(),
                    p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                    p.timestamp(),
                ) else {
                    continue;
                };
                let Some(price) = Price::from_usd(price) else {
                    continue;
                };
                if linux {
                    history.push((t.as_str().to_string(), zone.to_string(), *at, price));
                }
            }
        }
        let spot = latest_spot_prices(&history);
        let on_demand = match self.on_demand_prices(&self.region).await {
            Ok(prices) => prices,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read on-demand prices from the Price List API; using the built-in ones");
                BTreeMap::new()
            }
        };
        let prices = Prices { spot, on_demand };
        Ok(join_offerings(catalog, &described, &offered, &prices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_spot_price_wins_and_on_demand_comes_from_the_catalog() {
        let zones = vec!["us-east-1a".to_string(), "us-east-1b".to_string()];
        let catalog = Catalog::builtin("us-east-1", &zones);
        let g4 = catalog
            .get("g4dn.xlarge")
            .expect("g4dn.xlarge in the catalog");
        let on_demand = g4
            .offering("us-east-1a", CapacityType::OnDemand)
            .expect("on-demand offering")
            .price;
        let p = |usd| Price::from_usd(usd).expect("price");
        let history = vec![
            (
                "g4dn.xlarge".to_string(),
                "us-east-1a".to_string(),
                DateTime::from_secs(100),
                p(0.30),
            ),
            (
                "g4dn.xlarge".to_string(),
                "us-east-1a".to_string(),
                DateTime::from_secs(200),
                p(0.20),
            ),
            (
                "g4dn.xlarge".to_string(),
                "us-east-1a".to_string(),
                DateTime::from_secs(150),
                p(0.25),
            ),
        ];
        let spot = latest_spot_prices(&history);
        assert_eq!(
            spot[&("g4dn.xlarge".to_string(), "us-east-1a".to_string())],
            p(0.20)
        );

        let offered = BTreeSet::from([
            ("g4dn.xlarge".to_string(), "us-east-1a".to_string()),
            ("not-a-type.large".to_string(), "us-east-1a".to_string()),
        ]);
        let prices = Prices {
            spot: spot.clone(),
            ..Prices::default()
        };
        let types = join_offerings(&catalog, &BTreeMap::new(), &offered, &prices);
        assert_eq!(types.len(), 1, "unknown types are skipped");
        let offerings = &types[0].offerings;
        assert_eq!(offerings.len(), 2, "one zone offered, two capacity types");
        assert!(offerings.iter().all(|o| o.zone == "us-east-1a"));
        let od = offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::OnDemand);
        assert_eq!(od.map(|o| o.price), Some(on_demand));
        let sp = offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::Spot);
        assert_eq!(sp.map(|o| o.price), Some(p(0.20)));

        // Each type gets exactly the zones offered for it, whatever sorts between them.
        let offered = BTreeSet::from([
            ("g4dn.2xlarge".to_string(), "us-east-1b".to_string()),
            ("g4dn.xlarge".to_string(), "us-east-1a".to_string()),
            ("g4dn.xlarge".to_string(), "us-east-1b".to_string()),
            ("g5.xlarge".to_string(), "us-east-1a".to_string()),
        ]);
        let zones: BTreeMap<String, BTreeSet<String>> =
            join_offerings(&catalog, &BTreeMap::new(), &offered, &prices)
                .into_iter()
                .map(|t| (t.name, t.offerings.into_iter().map(|o| o.zone).collect()))
                .collect();
        let of = |t: &str| zones[t].iter().map(String::as_str).collect::<Vec<_>>();
        assert_eq!(of("g4dn.2xlarge"), ["us-east-1b"]);
        assert_eq!(of("g4dn.xlarge"), ["us-east-1a", "us-east-1b"]);
        assert_eq!(of("g5.xlarge"), ["us-east-1a"]);
        assert_eq!(zones.len(), 3);
    }

    /// Outside us-east-1 the built-in on-demand price is us-east-1's, an estimate. A Price List
    /// price makes it listed even when it is the very same figure; without one the estimate is
    /// sold and still said to be one.
    #[test]
    fn a_live_price_equal_to_the_built_in_estimate_is_listed() {
        let zones = vec!["eu-west-1a".to_string()];
        let catalog = Catalog::builtin("eu-west-1", &zones);
        let built_in = catalog
            .get("g5.xlarge")
            .and_then(|t| t.offering("eu-west-1a", CapacityType::OnDemand))
            .expect("g5.xlarge sold on demand in eu-west-1a")
            .clone();
        assert_eq!(built_in.price_basis, PriceBasis::OtherRegion);
        let offered = BTreeSet::from([("g5.xlarge".to_string(), "eu-west-1a".to_string())]);
        let on_demand_basis = |prices: &Prices| {
            join_offerings(&catalog, &BTreeMap::new(), &offered, prices)[0]
                .offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::OnDemand)
                .map(|o| (o.price, o.price_basis))
        };
        let live = Prices {
            on_demand: BTreeMap::from([("g5.xlarge".to_string(), built_in.price)]),
            ..Prices::default()
        };
        assert_eq!(
            on_demand_basis(&live),
            Some((built_in.price, PriceBasis::Listed))
        );
        assert_eq!(
            on_demand_basis(&Prices::default()),
            Some((built_in.price, PriceBasis::OtherRegion))
        );
    }

    /// A type newer than the catalog is sold with its facts, at the prices EC2 gives: on-demand
    /// from the Price List, spot from the history; with neither it is not sold.
    #[test]
    fn a_described_type_is_sold_only_at_prices_ec2_gives() {
        let catalog = Catalog::builtin("us-east-1", &["us-east-1a".to_string()]);
        let facts: Ec2Facts = serde_json::from_value(serde_json::json!({
            "name": "g9dn.xlarge", "arch": ["x86_64"], "cpuManufacturer": "Intel", "vcpu": 4,
            "memoryMiB": 16384, "enis": 3, "ipv4PerEni": 10, "efa": 0,
            "encryptionInTransit": true, "usage": ["on-demand", "spot"]
        }))
        .expect("facts");
        let described = BTreeMap::from([
            ("g9dn.xlarge".to_string(), Arc::new(facts.clone())),
            ("g9dn.2xlarge".to_string(), Arc::new(facts)),
        ]);
        let offered = BTreeSet::from([
            ("g9dn.2xlarge".to_string(), "us-east-1a".to_string()),
            ("g9dn.xlarge".to_string(), "us-east-1a".to_string()),
        ]);
        let p = |usd| Price::from_usd(usd).expect("price");
        let prices = Prices {
            spot: BTreeMap::from([(
                ("g9dn.xlarge".to_string(), "us-east-1a".to_string()),
                p(0.1),
            )]),
            on_demand: BTreeMap::from([("g9dn.xlarge".to_string(), p(0.4))]),
        };
        let types = join_offerings(&catalog, &described, &offered, &prices);
        assert_eq!(types.len(), 1, "g9dn.2xlarge has no price");
        let t = &types[0];
        assert_eq!(t.name, "g9dn.xlarge");
        assert!(t.facts.is_some());
        let by_type: BTreeMap<CapacityType, Price> = t
            .offerings
            .iter()
            .map(|o| (o.capacity_type, o.price))
            .collect();
        assert_eq!(by_type[&CapacityType::OnDemand], p(0.4));
        assert_eq!(by_type[&CapacityType::Spot], p(0.1));
    }
}
