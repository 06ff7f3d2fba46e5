//! Machines: the capacity a cluster has or has asked for, one record per machine.
//!
//! As Karpenter's state node joins a NodeClaim with its Node, a machine here is one of:
//!
//! - a NodeClaim still in flight (created, maybe launched, maybe registered, not yet
//!   initialized with its Node present): judged by what its instance type will offer once it
//!   runs, recorded at launch or else what its NodePool gives the type, since a registered but
//!   uninitialized Node does not yet advertise its GPUs;
//! - a Node with its initialized NodeClaim, or a Node no NodeClaim launched: judged by the Node.
//!
//! Deleting NodeClaims without a Node hold nothing, and neither do NodeClaims whose recorded
//! Node is gone. Pods go to a machine by name: the Node's name
//! once it registered, else the NodeClaim's.

use std::collections::{BTreeMap, BTreeSet};

use joiner_model::api::NodeClaim;
use joiner_model::api::nodeclaim::conditions;
use joiner_model::resources::parse_resource_list;
use joiner_model::wellknown::{CapacityType, labels, taints};
use joiner_model::{InputError, ObjectRef, ResourceList, Sourced};
use k8s_openapi::api::core::v1::{Node, Taint};

use crate::catalog::Catalog;
use crate::scheduling::{ExistingNode, PoolInput};

/// Whether a NodeClaim still stands for a node that does not fully exist yet: not deleting, not
/// initialized with its Node present among `nodes`, and not a ghost: a NodeClaim that recorded
/// its Node (it registered) whose Node is gone holds nothing, since no node will come of it
/// (the controller deletes it and its pods are planned again).
pub fn is_in_flight(claim: &NodeClaim, nodes: &BTreeSet<&str>) -> bool {
    if claim.is_deleting() {
        return false;
    }
    match claim.status.node_name.as_deref() {
        Some(n) if !nodes.contains(n) => false,
        Some(_) => !claim.is_true(conditions::INITIALIZED),
        None => true,
    }
}

/// The name pods bind to on an in-flight NodeClaim: its Node's once registered, else its own.
pub fn machine_name(claim: &NodeClaim) -> String {
    claim
        .status
        .node_name
        .clone()
        .unwrap_or_else(|| claim.name().to_string())
}

/// Joins `nodes` and `claims` into machines, in name order (so plans do not depend on input
/// order). `pools` are the NodePools already resolved, for in-flight NodeClaims whose expected
/// resources were not recorded at launch.
pub(super) fn machines(
    nodes: &[Sourced<Node>],
    claims: &[Sourced<NodeClaim>],
    pools: &[PoolInput],
    catalog: &Catalog,
    warnings: &mut Vec<String>,
    invalid: &mut Vec<InputError>,
) -> Vec<ExistingNode> {
    let node_names: BTreeSet<&str> = nodes
        .iter()
        .filter_map(|n| n.object.metadata.name.as_deref())
        .collect();
    let mut by_name: BTreeMap<String, ExistingNode> = BTreeMap::new();
    for n in nodes {
        match from_node(n, catalog) {
            Ok(node) => {
                by_name.insert(node.name.clone(), node);
            }
            // Left out, it takes no pods and is never consolidated: nothing about it is known.
            Err(e) => {
                warnings.push(format!("{e}; the node is left out of the plan"));
                invalid.push(e);
            }
        }
    }
    for c in claims {
        let claim = &c.object;
        if !is_in_flight(claim, &node_names) {
            // An initialized NodeClaim's Node speaks for it; record which NodeClaim it is.
            if let Some(node) = claim
                .status
                .node_name
                .as_deref()
                .and_then(|n| by_name.get_mut(n))
                .filter(|_| !claim.is_deleting())
            {
                node.node_claim = Some(claim.name().to_string());
            }
            continue;
        }
        let Some((allocatable, capacity)) = expected_resources(claim, pools) else {
            warnings.push(format!(
                "{}: NodeClaim/{}: metadata.labels: its NodePool ({}) or instance type ({}) is unknown; its capacity is not counted",
                c.origin,
                claim.name(),
                labels::NODEPOOL,
                labels::INSTANCE_TYPE,
            ));
            continue;
        };
        let machine = from_claim(claim, allocatable, capacity, catalog);
        by_name.insert(machine.name.clone(), machine);
    }
    by_name.into_values().collect()
}

/// The NodeClaim's expected allocatable and capacity: recorded at launch, else what its NodePool
/// gives its planned instance type.
pub fn expected_resources(
    claim: &NodeClaim,
    pools: &[PoolInput],
) -> Option<(ResourceList, ResourceList)> {
    if !claim.status.allocatable.is_empty() {
        return Some((
            claim.status.allocatable.clone(),
            claim.status.capacity.clone(),
        ));
    }
    let pool = claim.label(labels::NODEPOOL)?;
    let instance_type = claim
        .label(labels::INSTANCE_TYPE)
        .map(str::to_string)
        .or_else(|| {
            claim
                .requirement_values(labels::INSTANCE_TYPE)
                .into_iter()
                .next()
        })?;
    let option = pools
        .iter()
        .find(|p| p.name == pool)?
        .options
        .iter()
        .find(|o| o.instance_type == instance_type)?;
    Some((option.allocatable.clone(), option.capacity.clone()))
}

/// An in-flight NodeClaim as a machine: its labels (less the ones that mark a finished node),
/// its taints (startup taints are not: pods need not tolerate them) and the resources it will
/// offer.
fn from_claim(
    claim: &NodeClaim,
    allocatable: ResourceList,
    capacity: ResourceList,
    catalog: &Catalog,
) -> ExistingNode {
    let mut node_labels = claim.labels();
    node_labels.remove(labels::INITIALIZED);
    node_labels.remove(labels::NEED);
    ExistingNode {
        name: machine_name(claim),
        price: price_of(&node_labels, catalog),
        do_not_disrupt: false,
        consolidation_candidate: true,
        node_pool: node_labels.get(labels::NODEPOOL).cloned(),
        taints: claim.spec.taints.clone(),
        capacity,
        allocatable,
        labels: node_labels,
        node_claim: Some(claim.name().to_string()),
        in_flight: true,
    }
}

fn from_node(n: &Sourced<Node>, catalog: &Catalog) -> Result<ExistingNode, InputError> {
    let name = n.object.metadata.name.clone().unwrap_or_default();
    let object = ObjectRef::new("Node", None, &name);
    let status = n.object.status.as_ref();
    let parse = |list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                 field: &str|
     -> Result<ResourceList, InputError> {
        list.map(parse_resource_list)
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(|e| {
                InputError::new(
                    &n.origin,
                    &object,
                    format!("status.{field}.{}", e.name),
                    e.error,
                )
            })
    };
    let allocatable = parse(status.and_then(|s| s.allocatable.as_ref()), "allocatable")?;
    let capacity = parse(status.and_then(|s| s.capacity.as_ref()), "capacity")?;
    let labels = n.object.metadata.labels.clone().unwrap_or_default();
    let spec = n.object.spec.as_ref();
    let mut node_taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    // A cordoned node takes no new pods: Kubernetes expresses that as this taint.
    if spec.and_then(|s| s.unschedulable) == Some(true)
        && !node_taints.iter().any(|t| t.key == taints::UNSCHEDULABLE)
    {
        node_taints.push(Taint {
            key: taints::UNSCHEDULABLE.into(),
            effect: "NoSchedule".into(),
            value: None,
            time_added: None,
        });
    }
    let do_not_disrupt = joiner_model::do_not_disrupt::node_protected(&n.object.metadata);
    Ok(ExistingNode {
        price: price_of(&labels, catalog),
        do_not_disrupt,
        consolidation_candidate: !do_not_disrupt,
        node_pool: labels.get(labels::NODEPOOL).cloned(),
        taints: node_taints,
        capacity: if capacity.is_empty() {
            allocatable.clone()
        } else {
            capacity
        },
        allocatable,
        labels,
        name,
        node_claim: None,
        in_flight: false,
    })
}

/// The price of what a machine runs on, from the catalog, by its well-known labels.
fn price_of(
    node_labels: &BTreeMap<String, String>,
    catalog: &Catalog,
) -> Option<joiner_model::Price> {
    let it = catalog.get(node_labels.get(labels::INSTANCE_TYPE)?)?;
    let capacity = node_labels
        .get(labels::CAPACITY_TYPE)
        .and_then(|c| CapacityType::parse(c))
        .unwrap_or(CapacityType::OnDemand);
    let zone = node_labels.get(labels::ZONE).map(String::as_str);
    // A reserved node is paid for already: priced near zero, as it was planned.
    let (sold_as, reserved) = match capacity {
        CapacityType::Reserved => (CapacityType::OnDemand, true),
        other => (other, false),
    };
    let price = it
        .offerings
        .iter()
        .filter(|o| o.capacity_type == sold_as && zone.is_none_or(|z| z == o.zone))
        .map(|o| o.price)
        .min()?;
    Some(if reserved {
        crate::scheduling::reserved_price(price)
    } else {
        price
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::Source;
    use serde_json::json;

    fn sourced<T>(object: T) -> Sourced<T> {
        Sourced {
            origin: Source::new("test.yaml", 1),
            object,
        }
    }

    fn claim(name: &str, node: Option<&str>, initialized: bool, allocatable: bool) -> NodeClaim {
        let mut status = json!({
            "conditions": [{"type": "Initialized", "status": if initialized {"True"} else {"Unknown"},
                            "reason": "r", "lastTransitionTime": "2026-12-01T10:00:00Z"}],
        });
        if let Some(n) = node {
            status["nodeName"] = json!(n);
        }
        if allocatable {
            status["allocatable"] = json!({"cpu": "3920m", "nvidia.com/gpu": "3"});
            status["capacity"] = json!({"cpu": "4", "nvidia.com/gpu": "3"});
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {
                "karpenter.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "g4dn.xlarge",
                "karpenter.sh/initialized": "true", "joiner.dev/need": "abc"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": status,
        }))
        .expect("NodeClaim")
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "gpu"}},
            "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "3920m"}, "capacity": {"cpu": "4"}},
        }))
        .expect("Node")
    }

    fn join(nodes: Vec<Node>, claims: Vec<NodeClaim>) -> (Vec<ExistingNode>, Vec<String>) {
        let nodes: Vec<_> = nodes.into_iter().map(sourced).collect();
        let claims: Vec<_> = claims.into_iter().map(sourced).collect();
        let mut warnings = Vec::new();
        let m = machines(
            &nodes,
            &claims,
            &[],
            &Catalog::empty(),
            &mut warnings,
            &mut Vec::new(),
        );
        (m, warnings)
    }

    #[test]
    fn a_registered_node_claim_is_judged_by_what_it_will_offer() {
        let (m, w) = join(
            vec![node("ip-1")],
            vec![claim("gpu-a", Some("ip-1"), false, true)],
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(m.len(), 1);
        let n = &m[0];
        assert_eq!(n.name, "ip-1");
        assert!(n.in_flight);
        assert_eq!(n.node_claim.as_deref(), Some("gpu-a"));
        assert_eq!(n.allocatable["nvidia.com/gpu"].to_string(), "3");
        // Its own taints, not the Node's startup ones; not yet initialized.
        assert_eq!(n.taints.len(), 1);
        assert_eq!(n.taints[0].key, "nvidia.com/gpu");
        assert!(!n.labels.contains_key(labels::INITIALIZED));
        assert!(!n.labels.contains_key(labels::NEED));
    }

    #[test]
    fn an_unregistered_node_claim_goes_by_its_own_name() {
        let (m, _) = join(vec![], vec![claim("gpu-a", None, false, true)]);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].name, "gpu-a");
        assert!(m[0].in_flight);
    }

    #[test]
    fn an_initialized_node_claim_is_its_node() {
        let (m, _) = join(
            vec![node("ip-1")],
            vec![claim("gpu-a", Some("ip-1"), true, true)],
        );
        assert_eq!(m.len(), 1);
        assert!(!m[0].in_flight);
        assert_eq!(m[0].node_claim.as_deref(), Some("gpu-a"));
        assert!(!m[0].allocatable.contains_key("nvidia.com/gpu"));
        // Its Node is gone (deleted past the finalizer): a ghost, which holds nothing, whether
        // it was initialized or only registered.
        let (m, _) = join(vec![], vec![claim("gpu-a", Some("ip-1"), true, true)]);
        assert!(m.is_empty(), "{m:?}");
        let (m, _) = join(vec![], vec![claim("gpu-a", Some("ip-1"), false, true)]);
        assert!(m.is_empty(), "{m:?}");
    }

    #[test]
    fn unknown_capacity_is_a_warning_and_deleting_claims_hold_nothing() {
        let (m, w) = join(
            vec![node("ip-1")],
            vec![claim("gpu-a", Some("ip-1"), false, false)],
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("NodeClaim/gpu-a"), "{w:?}");
        // The Node still counts for what it shows.
        assert_eq!(m.len(), 1);
        assert!(!m[0].in_flight);

        let mut deleting = claim("gpu-b", None, false, true);
        deleting.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-12-01T10:00:00Z")).expect("time"));
        let (m, _) = join(vec![], vec![deleting]);
        assert!(m.is_empty());
    }

    #[test]
    fn machines_come_in_name_order() {
        let (m, _) = join(
            vec![node("b-node"), node("z-node")],
            vec![
                claim("a-claim", None, false, true),
                claim("c-claim", None, false, true),
            ],
        );
        let names: Vec<&str> = m.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a-claim", "b-node", "c-claim", "z-node"]);
    }
}
