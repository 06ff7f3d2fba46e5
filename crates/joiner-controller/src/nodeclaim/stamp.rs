//! Drift stamps: a hash of the NodePool template and one of the EC2NodeClass, each with a hash
//! version, written on every NodeClaim at creation so drift can be judged later
//! ([`crate::disruption::drift`]).
//!
//! The NodePool hash covers the fields Karpenter hashes (labels, annotations, taints, startup
//! taints, node class reference, `expireAfter`, `terminationGracePeriod`, kubelet); requirements
//! are judged apart. The EC2NodeClass hash covers everything in the spec but the subnet,
//! security group, capacity reservation and AMI selector terms, which select cloud resources
//! rather than define the node; the AMI family is hashed as resolved from an alias, so spelling
//! out the family an alias implies is no change. Joiner's hashes are its own (FNV-1a over a
//! canonical JSON form) and carry their own version: a stamp of another version (Karpenter's, an
//! older Joiner's) is re-stamped, never read as drift.

use std::collections::BTreeMap;

use joiner_model::api::NodePool;
use joiner_model::api::ec2nodeclass::{AmiFamily, EC2NodeClass};
use joiner_model::api::nodeclaim::NodeClaim;
use joiner_model::wellknown::annotations;
use serde_json::{Value, json};

use crate::batcher::fnv1a;

/// The version of Joiner's hashes. Bump it when the hashed fields or their defaults change, so
/// NodeClaims stamped before are not all taken for drifted.
pub const HASH_VERSION: &str = "joiner-v1";

/// Arrays are compared as sets (their order carries no meaning in these specs), object keys are
/// put in name order, and empty values are dropped, so that `taints: []` and no taints hash
/// alike.
fn canonical(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().filter_map(canonical).collect();
            items.sort_by_key(|i| i.to_string());
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Value::Object(map) => {
            // Keys in name order, whatever order the map keeps.
            let sorted: BTreeMap<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| canonical(v).map(|v| (k, v)))
                .collect();
            let map: serde_json::Map<String, Value> = sorted.into_iter().collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Value::String(s) if s.is_empty() => None,
        other => Some(other),
    }
}

fn hash_of(v: Value) -> String {
    let text = canonical(v).map(|v| v.to_string()).unwrap_or_default();
    fnv1a(&[&text]).to_string()
}

/// The hash of the NodePool fields that define its nodes (see the module docs).
pub fn node_pool_hash(pool: &NodePool) -> String {
    let t = &pool.spec.template;
    hash_of(json!({
        "labels": t.metadata.labels,
        "annotations": t.metadata.annotations,
        "taints": t.spec.taints,
        "startupTaints": t.spec.startup_taints,
        "nodeClassRef": t.spec.node_class_ref,
        "expireAfter": t.spec.expire_after,
        "terminationGracePeriod": t.spec.termination_grace_period,
        "kubelet": t.spec.kubelet,
    }))
}

/// The hash of the EC2NodeClass fields that define its nodes (see the module docs).
pub fn node_class_hash(class: &EC2NodeClass) -> String {
    let mut spec = match serde_json::to_value(&class.spec) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    for ignored in [
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "capacityReservationSelectorTerms",
        "amiSelectorTerms",
        "amiFamily",
        "ipPrefixCount",
    ] {
        spec.remove(ignored);
    }
    let family = class.spec.ami_family.or_else(|| {
        class
            .spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref().and_then(AmiFamily::from_alias))
    });
    if let Some(f) = family {
        spec.insert("amiFamily".into(), json!(f));
    }
    hash_of(Value::Object(spec))
}

/// Stamps the NodePool hash (and, when known, the EC2NodeClass hash) on a new NodeClaim.
pub fn stamp(claim: &mut NodeClaim, pool: &NodePool, class: Option<&EC2NodeClass>) {
    let a = claim.metadata.annotations.get_or_insert_with(BTreeMap::new);
    a.insert(annotations::NODEPOOL_HASH.into(), node_pool_hash(pool));
    a.insert(
        annotations::NODEPOOL_HASH_VERSION.into(),
        HASH_VERSION.into(),
    );
    if let Some(class) = class {
        a.insert(annotations::NODECLASS_HASH.into(), node_class_hash(class));
        a.insert(
            annotations::NODECLASS_HASH_VERSION.into(),
            HASH_VERSION.into(),
        );
    }
}

/// Stamps the hashes a NodeClaim lacks, or has in another version (Karpenter's, an older
/// Joiner's), with the current ones; a stamp of this version is left alone, since it is what
/// drift is judged by. Returns whether anything changed.
pub fn restamp(claim: &mut NodeClaim, pool: &NodePool, class: Option<&EC2NodeClass>) -> bool {
    let mut changed = false;
    let current = |c: &NodeClaim, key| c.annotation(key) == Some(HASH_VERSION);
    if !current(claim, annotations::NODEPOOL_HASH_VERSION) {
        let a = claim.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(annotations::NODEPOOL_HASH.into(), node_pool_hash(pool));
        a.insert(
            annotations::NODEPOOL_HASH_VERSION.into(),
            HASH_VERSION.into(),
        );
        changed = true;
    }
    if let Some(class) = class
        && !current(claim, annotations::NODECLASS_HASH_VERSION)
    {
        let a = claim.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(annotations::NODECLASS_HASH.into(), node_class_hash(class));
        a.insert(
            annotations::NODECLASS_HASH_VERSION.into(),
            HASH_VERSION.into(),
        );
        changed = true;
    }
    changed
}

/// Whether the stamp under `key` (of this hash version) differs from `now`.
pub(crate) fn stamp_differs(claim: &NodeClaim, key: &str, version_key: &str, now: &str) -> bool {
    claim.annotation(version_key) == Some(HASH_VERSION)
        && claim.annotation(key).is_some_and(|h| h != now)
}
