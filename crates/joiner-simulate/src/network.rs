//! The simulated cloud's VPC, images and instance profiles, and how an EC2NodeClass's selectors
//! resolve against them.
//!
//! By default the simulated world is *open*: it has one subnet in each zone its catalog sells
//! in, one security group and every image asked for, so scenarios written for `joiner plan`
//! (whose classes often select by tags that exist only in a real account, or leave selectors
//! out) run unchanged. A [`SimulatedNetwork`] set with
//! [`SimulatedCloud::set_network`](crate::SimulatedCloud::set_network) makes the world closed:
//! selectors are then matched as EC2 matches them (every condition of a term, any term; a tag
//! value `*` matches any value), and a selector that matches nothing is `SubnetsReady=False` /
//! `SecurityGroupsReady=False`, as in EC2.

use std::collections::{BTreeMap, BTreeSet};

use joiner_controller::cloud::Resolved;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::{Ami, SecurityGroup, SelectorTerm, Subnet};
use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

/// A closed simulated VPC: only these subnets and security groups exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulatedNetwork {
    pub subnets: Vec<SimulatedSubnet>,
    pub security_groups: Vec<SimulatedSecurityGroup>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulatedSubnet {
    pub id: String,
    pub zone: String,
    pub zone_id: String,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulatedSecurityGroup {
    pub id: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// A selector term's conditions on one resource.
fn matches(
    term: &SelectorTerm,
    id: &str,
    name: Option<&str>,
    tags: &BTreeMap<String, String>,
) -> bool {
    term.id.as_deref().is_none_or(|i| i == id)
        && term.name.as_deref().is_none_or(|n| Some(n) == name)
        && term
            .tags
            .iter()
            .all(|(k, v)| tags.get(k).is_some_and(|have| v == "*" || have == v))
}

/// What the terms at `field` found, or, when nothing, the message EC2's answer would give.
fn selected<T>(found: Vec<T>, terms: &[SelectorTerm], what: &str, field: &str) -> Resolved<Vec<T>> {
    if !found.is_empty() {
        Resolved::Found(found)
    } else if terms.is_empty() {
        Resolved::NotFound(format!("{field} is empty"))
    } else {
        Resolved::NotFound(format!("no {what} matches {field}"))
    }
}

/// The subnets the class selects: in an open world, one per zone of `zones`.
pub(crate) fn subnets(
    network: Option<&SimulatedNetwork>,
    zones: &BTreeSet<String>,
    terms: &[SelectorTerm],
) -> Resolved<Vec<Subnet>> {
    let Some(network) = network else {
        return Resolved::Found(
            zones
                .iter()
                .map(|z| Subnet {
                    id: format!("subnet-{z}"),
                    zone: z.clone(),
                    zone_id: Some(format!("sim-{z}")),
                })
                .collect(),
        );
    };
    let found: Vec<Subnet> = network
        .subnets
        .iter()
        .filter(|s| terms.iter().any(|t| matches(t, &s.id, None, &s.tags)))
        .map(|s| Subnet {
            id: s.id.clone(),
            zone: s.zone.clone(),
            zone_id: Some(s.zone_id.clone()),
        })
        .collect();
    selected(found, terms, "subnet", "spec.subnetSelectorTerms")
}

/// The security groups the class selects: in an open world, one.
pub(crate) fn security_groups(
    network: Option<&SimulatedNetwork>,
    terms: &[SelectorTerm],
) -> Resolved<Vec<SecurityGroup>> {
    let Some(network) = network else {
        return Resolved::Found(vec![SecurityGroup {
            id: "sg-simulated".into(),
            name: Some("simulated-nodes".into()),
        }]);
    };
    let found: Vec<SecurityGroup> = network
        .security_groups
        .iter()
        .filter(|g| {
            terms
                .iter()
                .any(|t| matches(t, &g.id, Some(&g.name), &g.tags))
        })
        .map(|g| SecurityGroup {
            id: g.id.clone(),
            name: Some(g.name.clone()),
        })
        .collect();
    selected(
        found,
        terms,
        "security group",
        "spec.securityGroupSelectorTerms",
    )
}

/// Every image asked for exists: an alias names one per architecture, an `id` term that image,
/// other terms one image of their own.
pub(crate) fn amis(class: &EC2NodeClass) -> Resolved<Vec<Ami>> {
    let arch = |a: &str| NodeSelectorRequirement {
        key: labels::ARCH.into(),
        operator: "In".into(),
        values: Some(vec![a.into()]),
    };
    let terms = &class.spec.ami_selector_terms;
    if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
        let family = alias.split('@').next().unwrap_or(alias);
        return Resolved::Found(
            ["amd64", "arm64"]
                .iter()
                .map(|a| Ami {
                    id: format!("ami-{family}-{a}"),
                    name: Some(format!("simulated-{alias}-{a}")),
                    requirements: vec![arch(a)],
                    ..Ami::default()
                })
                .collect(),
        );
    }
    if terms.is_empty() {
        return Resolved::Found(vec![Ami {
            id: "ami-simulated".into(),
            requirements: vec![arch("amd64")],
            ..Ami::default()
        }]);
    }
    Resolved::Found(
        terms
            .iter()
            .enumerate()
            .map(|(i, t)| Ami {
                id: t.id.clone().unwrap_or_else(|| format!("ami-selected-{i}")),
                name: t.name.clone(),
                requirements: vec![arch("amd64")],
                ..Ami::default()
            })
            .collect(),
    )
}
