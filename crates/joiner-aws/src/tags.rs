//! Joiner's tag maps as EC2 takes them: tag lists on resources, filters in Describe calls. The
//! tag keys themselves are Joiner's vocabulary (`joiner_model::wellknown::tags`).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, Tag};

/// Joiner's tag on its launch templates: the hash of the EC2NodeClass spec the template was
/// made from, so templates of a changed EC2NodeClass are known unused (`template`).
pub(crate) const NODECLASS_HASH: &str = joiner_model::wellknown::tags::NODECLASS_SPEC_HASH;

/// The tags as EC2 takes them on a resource.
pub(crate) fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// EC2 filters for a term's tags: `tag:<key>` = value, or `tag-key` = key for `*`.
pub(crate) fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_tag_matches_on_the_key_alone() {
        let tags = BTreeMap::from([
            ("karpenter.sh/discovery".to_string(), "lab".to_string()),
            ("team".to_string(), "*".to_string()),
        ]);
        let filters = tag_filters(&tags);
        assert_eq!(filters[0].name(), Some("tag:karpenter.sh/discovery"));
        assert_eq!(filters[0].values(), ["lab".to_string()]);
        assert_eq!(filters[1].name(), Some("tag-key"));
        assert_eq!(filters[1].values(), ["team".to_string()]);
    }
}
