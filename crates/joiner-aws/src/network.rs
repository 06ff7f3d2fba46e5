//! Subnets and security groups from the EC2NodeClass selector terms.
//!
//! Within a term every condition must hold (tags, id, name); across terms any may (each term is
//! one Describe call, the results joined). A tag value of `*` matches any value of that key.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use joiner_model::api::ec2nodeclass::SelectorTerm;

use crate::clients::Clients;
use crate::error::AwsError;
use crate::tags::tag_filters;

/// A subnet a node can launch in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubnetInfo {
    pub id: String,
    pub zone: String,
    /// The zone's id (`use1-az1`), the same in every account.
    pub zone_id: Option<String>,
    pub free_ips: i32,
}

/// For each zone, the subnet with the most free addresses (Karpenter's choice), ties to the
/// lowest id so the choice is stable.
pub(crate) fn subnet_per_zone(subnets: &[SubnetInfo]) -> BTreeMap<String, SubnetInfo> {
    let mut best: BTreeMap<String, SubnetInfo> = BTreeMap::new();
    for s in subnets {
        match best.get(&s.zone) {
            Some(b)
                if (b.free_ips, std::cmp::Reverse(&b.id))
                    >= (s.free_ips, std::cmp::Reverse(&s.id)) => {}
            _ => {
                best.insert(s.zone.clone(), s.clone());
            }
        }
    }
    best
}

fn describe_what(term: &SelectorTerm) -> String {
    format!("{term:?}")
}

impl Clients {
    /// Every subnet any term selects, each once.
    pub(crate) async fn subnets(
        &self,
        node_class: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<SubnetInfo>, AwsError> {
        if terms.is_empty() {
            return Err(AwsError::node_class(
                node_class,
                "spec.subnetSelectorTerms is empty",
            ));
        }
        let mut found: BTreeMap<String, SubnetInfo> = BTreeMap::new();
        for term in terms {
            let mut call = self
                .ec2
                .describe_subnets()
                .set_filters(Some(tag_filters(&term.tags)));
            if let Some(id) = &term.id {
                call = call.subnet_ids(id);
            }
            let mut pages = call.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    AwsError::api(
                        "DescribeSubnets",
                        format!("EC2NodeClass {node_class} term {}", describe_what(term)),
                        e,
                    )
                })?;
                for s in page.subnets() {
                    let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                        continue;
                    };
                    found.insert(
                        id.to_string(),
                        SubnetInfo {
                            id: id.to_string(),
                            zone: zone.to_string(),
                            zone_id: s.availability_zone_id().map(str::to_string),
                            free_ips: s.available_ip_address_count().unwrap_or(0),
                        },
                    );
                }
            }
        }
        if found.is_empty() {
            return Err(AwsError::node_class(
                node_class,
                "no subnet matches spec.subnetSelectorTerms",
            ));
        }
        Ok(found.into_values().collect())
    }

    /// The ids of every security group any term selects.
    pub(crate) async fn security_groups(
        &self,
        node_class: &str,
        terms: &[SelectorTerm],
    ) -> Result<Vec<String>, AwsError> {
        let groups = self.security_groups_named(node_class, terms).await?;
        Ok(groups.into_keys().collect())
    }

    /// Every security group any term selects: id to name.
    pub(crate) async fn security_groups_named(
        &self,
        node_class: &str,
        terms: &[SelectorTerm],
    ) -> Result<BTreeMap<String, Option<String>>, AwsError> {
        if terms.is_empty() {
            return Err(AwsError::node_class(
                node_class,
                "spec.securityGroupSelectorTerms is empty",
            ));
        }
        let mut found = BTreeMap::new();
        for term in terms {
            let mut filters = tag_filters(&term.tags);
            if let Some(name) = &term.name {
                filters.push(Filter::builder().name("group-name").values(name).build());
            }
            let mut call = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(filters));
            if let Some(id) = &term.id {
                call = call.group_ids(id);
            }
            let mut pages = call.into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| {
                    AwsError::api(
                        "DescribeSecurityGroups",
                        format!("EC2NodeClass {node_class} term {}", describe_what(term)),
                        e,
                    )
                })?;
                found.extend(page.security_groups().iter().filter_map(|g| {
                    let id = g.group_id()?.to_string();
                    Some((id, g.group_name().map(str::to_string)))
                }));
            }
        }
        if found.is_empty() {
            return Err(AwsError::node_class(
                node_class,
                "no security group matches spec.securityGroupSelectorTerms",
            ));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_zone_gets_its_roomiest_subnet() {
        let s = |id: &str, zone: &str, free| SubnetInfo {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
            free_ips: free,
        };
        let picked = subnet_per_zone(&[
            s("subnet-a1", "us-east-1a", 10),
            s("subnet-a2", "us-east-1a", 200),
            s("subnet-b1", "us-east-1b", 5),
            s("subnet-b0", "us-east-1b", 5),
        ]);
        assert_eq!(picked["us-east-1a"].id, "subnet-a2");
        assert_eq!(picked["us-east-1b"].id, "subnet-b0");
    }
}
