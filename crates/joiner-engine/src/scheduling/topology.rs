//! Topology spread and pod (anti-)affinity over zones and hostnames.
//!
//! Pods of one workload share their selectors, so constraints are grouped: a group is a
//! (topology key, pod selector) pair that counts, per domain (a zone or a node), the pods it
//! selects ("members") and the pods that repel its members through required anti-affinity.
//! Placing a pod updates the groups it belongs to; checking a pod reads a few counters.

use std::collections::{BTreeSet, HashMap};

use super::pod::{PodInfo, PodSelector, TopologyKey};
use crate::requirements::Requirements;
use selectors::SelectorIndex;

mod selectors;

/// How a pod relates to a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Constraint {
    /// Topology spread with this max skew.
    Spread { max_skew: u32 },
    /// Must share a domain with a member.
    Affinity,
    /// Must not share a domain with a member.
    AntiAffinity,
}

/// A constraint of one pod on one group; `hard` ones are never relaxed.
#[derive(Debug, Clone, Copy)]
pub struct PodConstraint {
    pub group: usize,
    pub kind: Constraint,
    pub hard: bool,
}

/// Counts per domain, indexed by domain id (node or zone number).
#[derive(Debug, Default, Clone)]
struct Counts(Vec<u32>);

impl Counts {
    fn get(&self, domain: u32) -> u32 {
        self.0.get(domain as usize).copied().unwrap_or(0)
    }

    /// Counts one more in `domain`; returns the new count.
    fn bump(&mut self, domain: u32) -> u32 {
        let i = domain as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] += 1;
        self.0[i]
    }

    /// Counts one fewer in `domain`; returns the new count.
    fn drop_one(&mut self, domain: u32) -> u32 {
        match self.0.get_mut(domain as usize) {
            Some(c) => {
                *c = c.saturating_sub(1);
                *c
            }
            None => 0,
        }
    }
}

#[derive(Debug, Clone)]
struct Group {
    key: TopologyKey,
    members: Counts,
    /// The domains with members, kept for hostname groups: a pod with hard affinity to the
    /// group can only go to these nodes, and a plan has thousands of others.
    occupied: BTreeSet<u32>,
    repellers: Counts,
    total_members: u32,
}

/// The groups of one scheduling run, and every pod's relation to them.
/// Cloning is cheap: only the counters are copied; who belongs where is shared.
#[derive(Debug, Default, Clone)]
pub struct Topology {
    groups: Vec<Group>,
    /// Per pod (by index in the input): the groups it is a member of.
    member_of: std::rc::Rc<Vec<Vec<usize>>>,
    /// Per pod: its constraints.
    constraints: std::rc::Rc<Vec<Vec<PodConstraint>>>,
}

/// Where a node is: its hostname domain (a node number) and, once known, its zone (a zone
/// number). Numbers rather than names keep the counters flat arrays.
#[derive(Debug, Clone, Copy)]
pub struct Domains {
    pub hostname: u32,
    pub zone: Option<u32>,
}

/// Why a pod may not go to a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    Spread(TopologyKey),
    /// No member in this domain; `settled` once the group has members elsewhere.
    Affinity(TopologyKey, bool),
    AntiAffinity(TopologyKey),
    /// A pod already there repels this one.
    Repelled(TopologyKey),
}

impl Violation {
    /// Whether the violation persists as more pods are placed: counts only grow, so
    /// anti-affinity and hostname spread (whose minimum is always zero) never recover. Zone
    /// spread may. Affinity is treated as settled once the group has members: its later
    /// members go where the first ones are, so a domain without members stays without them
    /// (only a pod that matches the selector without sharing the affinity could change that,
    /// and the planner accepts missing that rare case to stay linear).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Violation::Spread(TopologyKey::Hostname)
                | Violation::AntiAffinity(_)
                | Violation::Repelled(_)
                | Violation::Affinity(_, true)
        )
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = |k: &TopologyKey| match k {
            TopologyKey::Zone => "zone",
            TopologyKey::Hostname => "hostname",
        };
        match self {
            Violation::Spread(k) => {
                write!(f, "topology spread over {} would exceed maxSkew", key(k))
            }
            Violation::Affinity(k, _) => write!(
                f,
                "pod affinity needs a matching pod in the same {}",
                key(k)
            ),
            Violation::AntiAffinity(k) => write!(
                f,
                "pod anti-affinity forbids a matching pod in the same {}",
                key(k)
            ),
            Violation::Repelled(k) => write!(
                f,
                "another pod's anti-affinity forbids this pod in the same {}",
                key(k)
            ),
        }
    }
}

impl Topology {
    /// Builds the groups for every pod's constraints and finds which pods each group counts.
    pub fn new(pods: &[PodInfo]) -> Topology {
        let mut index: HashMap<(TopologyKey, PodSelector), usize> = HashMap::new();
        let mut selectors: Vec<(PodSelector, Requirements)> = Vec::new();
        let mut t = Topology::default();
        let mut constraints = Vec::with_capacity(pods.len());
        let mut member_of = Vec::with_capacity(pods.len());
        let mut group_of = |t: &mut Topology, key: TopologyKey, sel: &PodSelector| -> usize {
            *index.entry((key, sel.clone())).or_insert_with(|| {
                t.groups.push(Group {
                    key,
                    members: Counts::default(),
                    occupied: BTreeSet::new(),
                    repellers: Counts::default(),
                    total_members: 0,
                });
                selectors.push((sel.clone(), sel.selector.requirements()));
                t.groups.len() - 1
            })
        };
        for pod in pods {
            let mut cs = Vec::new();
            for s in &pod.spread {
                let group = group_of(&mut t, s.key, &s.selector);
                cs.push(PodConstraint {
                    group,
                    kind: Constraint::Spread {
                        max_skew: s.max_skew,
                    },
                    hard: s.hard,
                });
            }
            for a in &pod.affinity {
                let group = group_of(&mut t, a.key, &a.selector);
                let kind = if a.anti {
                    Constraint::AntiAffinity
                } else {
                    Constraint::Affinity
                };
                cs.push(PodConstraint {
                    group,
                    kind,
                    hard: a.required,
                });
            }
            constraints.push(cs);
        }
        // Membership: pods with the same labels and namespace belong to the same groups.
        let index = SelectorIndex::new(selectors.iter().map(|(_, compiled)| compiled));
        let mut cache: HashMap<(&str, &crate::requirements::Labels), Vec<usize>> = HashMap::new();
        for pod in pods {
            let members = cache
                .entry((pod.namespace.as_str(), &pod.labels))
                .or_insert_with(|| {
                    index
                        .candidates(&pod.labels)
                        .into_iter()
                        .filter(|&i| {
                            selectors
                                .get(i)
                                .is_some_and(|(sel, compiled)| pod.selected_by(sel, compiled))
                        })
                        .collect()
                })
                .clone();
            member_of.push(members);
        }
        t.constraints = std::rc::Rc::new(constraints);
        t.member_of = std::rc::Rc::new(member_of);
        t
    }

    pub fn constraints(&self, pod: usize) -> &[PodConstraint] {
        &self.constraints[pod]
    }

    /// Whether the pod has no constraint of its own and no group counts it: where it runs
    /// changes nothing for any other pod.
    pub fn stands_alone(&self, pod: usize) -> bool {
        self.constraints[pod].is_empty() && self.member_of[pod].is_empty()
    }

    /// Whether the pod has any relation to zones, so a planned node must fix its zone before
    /// the pod can be placed (or counted) there.
    pub fn needs_zone(&self, pod: usize) -> bool {
        self.constraints[pod]
            .iter()
            .any(|c| self.groups[c.group].key == TopologyKey::Zone)
            || self.member_of[pod]
                .iter()
                .any(|g| self.groups[*g].key == TopologyKey::Zone)
    }

    /// How many pods like `pod` one node can take under its own hostname constraints
    /// (anti-affinity to its own group: one; hostname spread: its max skew).
    pub fn per_node_cap(&self, pod: usize, strict: bool) -> u32 {
        self.constraints[pod]
            .iter()
            .filter(|c| {
                (c.hard || strict)
                    && self.groups[c.group].key == TopologyKey::Hostname
                    && self.member_of[pod].contains(&c.group)
            })
            .filter_map(|c| match c.kind {
                Constraint::AntiAffinity => Some(1),
                Constraint::Spread { max_skew } => Some(max_skew),
                Constraint::Affinity => None,
            })
            .min()
            .unwrap_or(u32::MAX)
    }

    /// Checks a pod against a domain. `strict` also enforces soft constraints (preferences).
    /// `zones` are the zones the pod could use, for the spread minimum.
    pub fn check(
        &self,
        pod: usize,
        at: Domains,
        strict: bool,
        zones: &[u32],
    ) -> Result<(), Violation> {
        for c in &self.constraints[pod] {
            if !c.hard && !strict {
                continue;
            }
            let g = &self.groups[c.group];
            let Some(domain) = domain(g.key, at) else {
                continue;
            };
            let here = g.members.get(domain);
            let me = u32::from(self.member_of[pod].contains(&c.group));
            match c.kind {
                Constraint::Spread { max_skew } => {
                    let min = match g.key {
                        // A new node can always be added, so the emptiest hostname has zero.
                        TopologyKey::Hostname => 0,
                        TopologyKey::Zone => {
                            zones.iter().map(|z| g.members.get(*z)).min().unwrap_or(0)
                        }
                    };
                    if here + me > min + max_skew {
                        return Err(Violation::Spread(g.key));
                    }
                }
                Constraint::Affinity => {
                    // The first pod of a self-affine group may go anywhere.
                    let first = g.total_members == 0 && me == 1;
                    if here == 0 && !first {
                        return Err(Violation::Affinity(g.key, g.total_members > 0));
                    }
                }
                Constraint::AntiAffinity => {
                    if here > 0 {
                        return Err(Violation::AntiAffinity(g.key));
                    }
                }
            }
        }
        for &gid in &self.member_of[pod] {
            let g = &self.groups[gid];
            if let Some(domain) = domain(g.key, at)
                && g.repellers.get(domain) > 0
            {
                return Err(Violation::Repelled(g.key));
            }
        }
        Ok(())
    }

    /// The hostname domains (ascending) that alone can hold `pod` under its hard hostname
    /// affinities, or `None` when those allow any: a group with members placed admits only the
    /// domains they are in, and one with none admits none unless the pod is its own first
    /// member (see [`Topology::check`]).
    pub fn required_hosts(&self, pod: usize) -> Option<Vec<u32>> {
        let mut hosts: Option<Vec<u32>> = None;
        for c in &self.constraints[pod] {
            let g = &self.groups[c.group];
            if !c.hard || c.kind != Constraint::Affinity || g.key != TopologyKey::Hostname {
                continue;
            }
            if g.total_members == 0 && self.member_of[pod].contains(&c.group) {
                continue;
            }
            let occupied = g.occupied.iter().copied();
            hosts = Some(match hosts {
                None => occupied.collect(),
                Some(before) => occupied
                    .filter(|d| before.binary_search(d).is_ok())
                    .collect(),
            });
        }
        hosts
    }

    /// Records a pod in a domain. Only hard anti-affinity repels (preferences do not bind others).
    pub fn place(&mut self, pod: usize, at: Domains) {
        for &gid in &self.member_of[pod] {
            let g = &mut self.groups[gid];
            if let Some(d) = domain(g.key, at) {
                if g.members.bump(d) == 1 && g.key == TopologyKey::Hostname {
                    g.occupied.insert(d);
                }
                g.total_members += 1;
            }
        }
        for c in &self.constraints[pod] {
            if c.kind == Constraint::AntiAffinity && c.hard {
                let g = &mut self.groups[c.group];
                if let Some(d) = domain(g.key, at) {
                    g.repellers.bump(d);
                }
            }
        }
    }

    /// Takes a placed pod back out of a domain: the inverse of [`Topology::place`].
    pub fn unplace(&mut self, pod: usize, at: Domains) {
        for &gid in &self.member_of[pod] {
            let g = &mut self.groups[gid];
            if let Some(d) = domain(g.key, at) {
                if g.members.drop_one(d) == 0 {
                    g.occupied.remove(&d);
                }
                g.total_members = g.total_members.saturating_sub(1);
            }
        }
        for c in &self.constraints[pod] {
            if c.kind == Constraint::AntiAffinity && c.hard {
                let g = &mut self.groups[c.group];
                if let Some(d) = domain(g.key, at) {
                    g.repellers.drop_one(d);
                }
            }
        }
    }

    /// Ranks zones for a pod that fixes a planned node's zone: fewest members of its spread
    /// groups first, so spreading pods fill the emptiest zone.
    pub fn zone_load(&self, pod: usize, zone: u32) -> u32 {
        self.constraints[pod]
            .iter()
            .filter(|c| {
                matches!(c.kind, Constraint::Spread { .. })
                    && self.groups[c.group].key == TopologyKey::Zone
            })
            .map(|c| self.groups[c.group].members.get(zone))
            .sum()
    }
}

fn domain(key: TopologyKey, at: Domains) -> Option<u32> {
    match key {
        TopologyKey::Hostname => Some(at.hostname),
        TopologyKey::Zone => at.zone,
    }
}

#[cfg(test)]
mod tests {
    use joiner_model::Source;
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    fn pod(name: &str, app: &str, affine_to: Option<&str>) -> PodInfo {
        let affinity = affine_to.map_or(serde_json::Value::Null, |to| {
            serde_json::json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": to}}}]}})
        });
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c"}], "affinity": affinity}}))
        .unwrap();
        PodInfo::compile(&pod, &Source::new("test", 1)).unwrap()
    }

    fn on(hostname: u32) -> Domains {
        Domains {
            hostname,
            zone: None,
        }
    }

    #[test]
    fn a_pod_with_hostname_affinity_may_only_go_where_its_peers_are() {
        let pods = [
            pod("cache-0", "cache", Some("cache")),
            pod("cache-1", "cache", Some("cache")),
            pod("web-0", "web", Some("cache")),
            pod("free", "other", None),
        ];
        let mut t = Topology::new(&pods);
        // Nothing placed: the group's own first member may go anywhere; a pod that is not a
        // member has nowhere to go; a pod without affinity is not restricted.
        assert_eq!(t.required_hosts(0), None);
        assert_eq!(t.required_hosts(2), Some(vec![]));
        assert_eq!(t.required_hosts(3), None);
        t.place(0, on(7));
        t.place(1, on(3));
        assert_eq!(t.required_hosts(2), Some(vec![3, 7]));
        // Every domain listed passes the full check, and one not listed fails it.
        for d in [3, 7] {
            assert!(t.check(2, on(d), false, &[]).is_ok());
        }
        assert!(t.check(2, on(5), false, &[]).is_err());
        t.unplace(1, on(3));
        assert_eq!(t.required_hosts(2), Some(vec![7]));
        assert_eq!(t.required_hosts(1), Some(vec![7]));
    }
}
