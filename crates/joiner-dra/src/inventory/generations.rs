//! Which generation of a pool each node sees.
//!
//! kube-scheduler gathers pools per node, from the slices that node can see, and keeps the
//! newest generation among those. A driver that moves a pool from one node to another
//! publishes the new generation for the new node only, so the old node still sees its own,
//! older slices and may allocate from them until they are deleted (whether they count as
//! complete is still judged by every slice of that generation, wherever published).
//!
//! Joiner's inventory is built once for every node, with the newest generation overall; this
//! finds the nodes for which that differs, so each gets a pool of its own generation.

use k8s_openapi::api::resource::v1::ResourceSlice;
use std::collections::BTreeMap;

/// The nodes whose own slices (`nodeName`) are all older than `newest` while no slice of
/// `newest` is visible to them, each with the newest generation it does see. Slices not tied
/// to one node (all nodes, a node selector, per-device selection) count as seen by every node.
pub(super) fn stale_nodes(group: &[&ResourceSlice], newest: i64) -> Vec<(String, i64)> {
    let node_of = |s: &ResourceSlice| s.spec.node_name.clone().filter(|n| !n.is_empty());
    let everywhere = group
        .iter()
        .filter(|s| node_of(s).is_none())
        .map(|s| s.spec.pool.generation)
        .max();
    let mut own: BTreeMap<String, i64> = BTreeMap::new();
    for s in group {
        if let Some(node) = node_of(s) {
            let g = own.entry(node).or_insert(i64::MIN);
            *g = (*g).max(s.spec.pool.generation);
        }
    }
    own.into_iter()
        .filter_map(|(node, g)| {
            let seen = everywhere.map_or(g, |e| e.max(g));
            (seen < newest).then_some((node, seen))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders;

    fn slice(node: Option<&str>, generation: i64) -> ResourceSlice {
        let mut s = builders::slice("s", "driver", "pool", node, Vec::new());
        s.spec.pool.generation = generation;
        s
    }

    #[test]
    fn a_node_left_with_an_older_generation_sees_its_own() {
        let moved = [slice(Some("a"), 1), slice(Some("b"), 2)];
        let group: Vec<&ResourceSlice> = moved.iter().collect();
        assert_eq!(stale_nodes(&group, 2), vec![("a".to_string(), 1)]);
    }

    #[test]
    fn a_slice_for_every_node_brings_every_node_up_to_date() {
        let shared = [slice(Some("a"), 1), slice(None, 2)];
        let group: Vec<&ResourceSlice> = shared.iter().collect();
        assert!(stale_nodes(&group, 2).is_empty());
    }
}
