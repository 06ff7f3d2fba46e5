//! From manifests to one immutable cluster snapshot the planner decides over.
//!
//! This is where the inputs meet: NodePools are joined with their EC2NodeClasses and the
//! instance catalog (kubelet settings and root volume change allocatable), the NVIDIA
//! device-plugin config turns GPUs into time-sliced replicas and GPU feature discovery labels,
//! workloads become pods, Nodes and in-flight NodeClaims become one machine each
//! ([`machines`]), and every object is validated on its own: one that cannot be used (a
//! reference that leads nowhere, a field Joiner cannot read) holds back only itself, with a
//! warning or an unschedulable reason that names it (`kind/namespace/name`) and the field, as
//! kube-scheduler and Karpenter hold back only the pod or NodePool concerned.
//!
//! A [`SnapshotBuilder`] takes everything that shapes the snapshot: the objects, the settings,
//! offerings known to be unavailable and the nodes consolidation may consider. It builds once;
//! the result is immutable and read through accessors, and its warnings are produced here and
//! nowhere else.

mod buffers;
pub mod corrections;
mod dra;
pub use dra::extended::{CLAIM_NAME_PART, EXTENDED_CLAIM_ANNOTATION, request_mappings};
pub mod machines;
mod overlays;
mod pools;
mod reservations;
pub mod statics;
mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::Readiness;
use joiner_model::feature_gates::{FeatureGate, FeatureGates};
use joiner_model::placement::PlacementGroup;
use joiner_model::settings::Settings;
use joiner_model::workloads::{daemon_set_pod, workload_pods};
use joiner_model::{InputError, Manifests, ObjectRef, Sourced};
use k8s_openapi::api::core::v1::Taint;

use crate::catalog::devices::{DeviceTemplates, builtin_templates};
use crate::catalog::{
    CapacityType, Catalog, InstanceType, Offering, OfferingKey, user_instance_type,
};
use crate::deviceplugin::DevicePluginConfigs;
use crate::migmanager::MigConfigs;
use crate::plan::{Plan, Unschedulable};
use crate::scheduling::{
    DaemonInput, ExistingNode, LaunchOption, PodInfo, PoolInput, SchedulingInput, schedule,
};
use pools::{GpuSoftware, PoolCatalog, PoolError, UnreadyPool, build_pool};

/// How to build a snapshot beyond what the settings say.
#[derive(Debug, Clone)]
pub struct Options {
    /// Start from the built-in AWS catalog (`--no-builtin-catalog` turns it off).
    pub builtin_catalog: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            builtin_catalog: true,
        }
    }
}

/// One cluster, ready to plan.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot {
    input: SchedulingInput,
    /// Pods decided before scheduling (DRA pods while DRA is off, pods whose claims lead
    /// nowhere, pods that cannot be read).
    decided: Vec<Unschedulable>,
    /// NodePools that launch nothing, named in the reasons of pods they might have taken.
    unready: Vec<UnreadyPool>,
    /// Things the user should know (skipped NodePools, defaults taken, objects left out).
    warnings: Vec<String>,
    /// Objects that cannot be read, each left out or decided on its own (also in `warnings`).
    invalid: Vec<InputError>,
    /// The catalog the NodePools' instance types come from (built-in types with the input's
    /// InstanceTypes applied), shared: snapshots are copied, the catalog never changes.
    catalog: Arc<Catalog>,
    region: String,
    /// Karpenter's feature gates, for the decisions they switch (spot-to-spot consolidation).
    feature_gates: FeatureGates,
    /// What the NodeOverlays did: the types each changed (for `explain`), and which conflict.
    overlaid: overlays::Outcome,
    /// The static NodePools, kept out of `input.pools` ([`statics`]).
    statics: Vec<statics::StaticPool>,
    /// Every NodeClaim's name: static slots are chosen among the names no NodeClaim holds.
    claim_names: BTreeSet<String>,
    /// The CapacityBuffers whose virtual pods are among the pending pods.
    buffers: buffers::Buffers,
}

/// Gathers what shapes a [`ClusterSnapshot`]; see [`ClusterSnapshot::builder`].
#[derive(Debug, Clone)]
pub struct SnapshotBuilder<'a> {
    manifests: &'a Manifests,
    settings: &'a Settings,
    options: &'a Options,
    unavailable: Option<&'a BTreeSet<OfferingKey>>,
    candidates: Option<&'a BTreeSet<String>>,
    sold: Option<&'a BTreeMap<String, Vec<Offering>>>,
    described: &'a [crate::catalog::Ec2Facts],
    now: Option<k8s_openapi::jiff::Timestamp>,
    unreadable_classes: Option<&'a BTreeSet<String>>,
    corrections: Option<&'a corrections::Corrections>,
    placement_groups: Option<&'a BTreeMap<String, PlacementGroup>>,
}

impl<'a> SnapshotBuilder<'a> {
    /// Offerings known to be unavailable now (insufficient capacity, a spot offering just
    /// reclaimed): not planned on.
    pub fn unavailable(mut self, offerings: &'a BTreeSet<OfferingKey>) -> Self {
        self.unavailable = Some(offerings);
        self
    }

    /// What the cloud sells now, by instance type (the live controller's read of EC2's
    /// offerings and prices): planned on in place of the built-in offerings. InstanceType
    /// objects keep their own.
    pub fn sold(mut self, offerings: &'a BTreeMap<String, Vec<Offering>>) -> Self {
        self.sold = Some(offerings);
        self
    }

    /// Types the cloud describes that the built-in data lacks (newer ones), with EC2's facts:
    /// sized like the built-in types and planned on where [`SnapshotBuilder::sold`] offers them.
    pub fn described(mut self, facts: &'a [crate::catalog::Ec2Facts]) -> Self {
        self.described = facts;
        self
    }

    /// EC2NodeClasses the cluster has that cannot be read (they do not decode): a NodePool of
    /// one launches nothing and says so, rather than that its class is missing.
    pub fn unreadable_classes(mut self, names: &'a BTreeSet<String>) -> Self {
        self.unreadable_classes = Some(names);
        self
    }

    /// The placement groups the EC2NodeClasses (by name) select, as the controller found them
    /// in EC2. Without them (a plan from files) a class's group is not known: its pools are
    /// planned on every type, with a warning, and nodes carry no placement-group labels.
    pub fn placement_groups(mut self, groups: &'a BTreeMap<String, PlacementGroup>) -> Self {
        self.placement_groups = Some(groups);
        self
    }

    /// The time now, for what depends on it: a Capacity Block stops taking nodes
    /// [`joiner_model::api::nodeclass_status::CAPACITY_BLOCK_DRAIN_LEAD_SECONDS`] before its
    /// end. Without it, end times are not checked.
    pub fn at(mut self, now: k8s_openapi::jiff::Timestamp) -> Self {
        self.now = Some(now);
        self
    }

    /// What running nodes were found to offer where the prediction said more: planned on
    /// instead of the prediction ([`corrections`]).
    pub fn corrections(mut self, found: &'a corrections::Corrections) -> Self {
        self.corrections = Some(found);
        self
    }

    /// Only these nodes (by name) may be consolidated; without a set, every node not marked
    /// do-not-disrupt may be.
    pub fn consolidation_candidates(mut self, nodes: &'a BTreeSet<String>) -> Self {
        self.candidates = Some(nodes);
        self
    }

    /// Validates and joins the inputs. Nothing is planned here.
    ///
    /// An object that cannot be used affects only itself: a pod whose claims lead nowhere or
    /// that cannot be read is unschedulable with the reason; a NodePool whose EC2NodeClass is
    /// missing, not Ready or that cannot be read launches nothing; a Node, DaemonSet or InstanceType that
    /// cannot be read is left out; a device-plugin config that cannot be read holds back only
    /// the NodePools whose GPU nodes would use it; each with a warning naming the object and
    /// the field.
    pub fn build(self) -> Result<ClusterSnapshot, InputError> {
        let SnapshotBuilder {
            manifests: m,
            settings,
            options,
            unavailable,
            candidates,
            sold,
            described,
            now,
            unreadable_classes,
            corrections,
            placement_groups,
        } = self;
        let mut warnings = Vec::new();
        let mut invalid = Vec::new();
        let catalog = build_catalog(
            m,
            settings,
            options,
            (sold, described),
            &mut warnings,
            &mut invalid,
        );
        let plugin = device_plugin_configs(m, settings);
        let mig = MigConfigs::find(
            m.config_maps.iter().map(|cm| (&cm.object, &cm.origin)),
            &settings.nvidia_mig_manager.config_map_namespace,
            &settings.nvidia_mig_manager.config_map_name,
        );
        let unreadable_mig = match &mig {
            MigConfigs::Unreadable(e) => Some(e),
            _ => None,
        };
        for e in plugin
            .iter()
            .flat_map(DevicePluginConfigs::errors)
            .chain(unreadable_mig)
        {
            warnings.push(format!(
                "{e}; NodePools whose GPU nodes would use this config launch nothing until it is fixed"
            ));
            invalid.push(e.clone());
        }
        let gpu_software = GpuSoftware {
            plugin: plugin.as_ref(),
            mig: &mig,
        };
        let classes: BTreeMap<&str, &Sourced<EC2NodeClass>> = m
            .node_classes
            .iter()
            .filter_map(|c| c.object.metadata.name.as_deref().map(|n| (n, c)))
            .collect();

        // DRA is modelled unless the settings say to ignore claims (Karpenter's default).
        let dra_on = !settings.ignore_dra_requests;
        let empty = BTreeSet::new();
        let unavailable = unavailable.unwrap_or(&empty);
        // Karpenter's ReservedCapacity gate (on by default): off, reservations offer nothing.
        let reserved_free = if settings
            .feature_gates
            .enabled(FeatureGate::ReservedCapacity)
        {
            reservations::free_counts(&m.node_classes, &m.node_claims, now)
        } else {
            Default::default()
        };
        let mut template_options = BTreeMap::new();
        let mut pools = Vec::new();
        let mut unready = Vec::new();
        for np in &m.node_pools {
            let name = np.object.metadata.name.clone().unwrap_or_default();
            // Every node of the pool carries its name as a label value: a longer name would
            // make each NodeClaim's create fail, and the same need be planned again forever.
            if !joiner_model::names::is_label_value(&name) {
                let why = format!(
                    "metadata.name: {name:?} cannot be used as the value of the label {} (at most 63 letters, digits, '-', '_' or '.')",
                    joiner_model::wellknown::labels::NODEPOOL
                );
                warnings.push(format!(
                    "{}: NodePool/{name}: {why}; the NodePool launches nothing",
                    np.origin
                ));
                unready.push(UnreadyPool::new(np, why));
                continue;
            }
            let class_name = &np.object.spec.template.spec.node_class_ref.name;
            let Some(class) = classes.get(class_name.as_str()) else {
                if unreadable_classes.is_some_and(|u| u.contains(class_name)) {
                    let why = format!(
                        "EC2NodeClass {class_name:?} cannot be read (it does not decode as karpenter.k8s.aws/v1)"
                    );
                    warnings.push(format!(
                        "{}: NodePool/{name}: spec.template.spec.nodeClassRef: {why}; the NodePool launches nothing until it can be",
                        np.origin
                    ));
                    unready.push(UnreadyPool::new(np, why));
                    continue;
                }
                warnings.push(format!(
                    "{}: NodePool/{name}: spec.template.spec.nodeClassRef: EC2NodeClass {class_name:?} not found; the NodePool launches nothing until it exists",
                    np.origin
                ));
                unready.push(UnreadyPool::new(
                    np,
                    format!(
                        "EC2NodeClass {class_name:?} not found (spec.template.spec.nodeClassRef; NodeClassReady=False)"
                    ),
                ));
                continue;
            };
            // A class that was resolved and is not Ready (its subnets, security groups, AMIs
            // or instance profile cannot be found) cannot launch; one without a Ready condition
            // has not been resolved by anyone (a manifest read from a file) and is planned on
            // as written. The live controller marks classes it has not resolved yet Unknown
            // before it builds its view, so it never launches from one.
            if let Readiness::NotReady(why) = class.object.readiness() {
                let why = format!("EC2NodeClass {class_name:?} is not ready: {why}");
                warnings.push(format!(
                    "{}: NodePool/{name}: {why}; the NodePool launches nothing until it is",
                    np.origin
                ));
                unready.push(UnreadyPool::new(np, why));
                continue;
            }
            let devices = dra_on.then(|| dra::template_options(settings, class, &mut warnings));
            // Types the pool's NodeClaims already have stay known to the pool whatever its
            // requirements say now, so that launched and in-flight nodes keep their resources.
            let claimed = pools::claimed_types(&m.node_claims, &name);
            let pool_catalog = PoolCatalog {
                catalog: &catalog,
                claimed: &claimed,
                min_values_policy: settings.min_values_policy,
                placement_group: pools::placement_group(class, placement_groups, &mut warnings),
            };
            match build_pool(
                np,
                class,
                &pool_catalog,
                gpu_software,
                devices,
                unavailable,
                &reserved_free,
            ) {
                Ok(pool) => {
                    if let Some(opts) = devices {
                        template_options.insert(name, opts);
                    }
                    pools.push(pool);
                }
                Err(PoolError::Invalid(e)) => {
                    warnings.push(format!(
                        "{e}; the NodePool launches nothing until it is fixed"
                    ));
                    unready.push(UnreadyPool::new(
                        np,
                        format!("{}: {}: {}", e.object, e.field, e.message),
                    ));
                    invalid.push(e);
                }
                // Reported above, once for every NodePool it holds back.
                Err(PoolError::GpuConfig(e)) => {
                    warnings.push(format!(
                        "{}: NodePool/{name}: the NVIDIA config its GPU nodes would use cannot be read ({}: {}); the NodePool launches nothing until it is fixed",
                        np.origin, e.object, e.field
                    ));
                    unready.push(UnreadyPool::new(
                        np,
                        format!(
                            "the NVIDIA config its GPU nodes would use cannot be read: {}: {}: {}",
                            e.object, e.field, e.message
                        ),
                    ));
                }
            }
        }

        let overlaid = apply_overlays(m, settings, &mut pools, &mut warnings);
        // What running nodes were found to offer outranks any prediction or overlay.
        if let Some(found) = corrections {
            for pool in &mut pools {
                pool.options.iter_mut().for_each(|o| found.apply(o));
            }
        }

        let mut nodes = machines::machines(
            &m.nodes,
            &m.node_claims,
            &pools,
            &catalog,
            &mut warnings,
            &mut invalid,
        );
        if let Some(candidates) = candidates {
            for n in &mut nodes {
                n.consolidation_candidate &= candidates.contains(&n.name);
            }
        }
        let mut statics = statics::split(
            &m.node_pools,
            &m.node_claims,
            &mut pools,
            &settings.feature_gates,
            &mut warnings,
            &mut unready,
        );
        // Consolidation never removes a static pool's nodes (Karpenter's static pools are
        // not consolidated); pods may still land on them.
        for n in &mut nodes {
            if n.node_pool
                .as_ref()
                .is_some_and(|p| statics.iter().any(|s| &s.name == p))
            {
                n.consolidation_candidate = false;
            }
        }

        let mut pods = Vec::new();
        let mut decided = Vec::new();
        let added = workload_pods(m);
        let (buffers, buffer_pods) = if settings.feature_gates.enabled(FeatureGate::CapacityBuffer)
        {
            buffers::Buffers::of(m, &mut warnings)
        } else {
            (buffers::Buffers::default(), Vec::new())
        };
        let mut with_claims = Vec::new();
        let dra_cluster = dra_on.then(|| dra::Cluster::new(m, settings, &mut warnings));
        let volumes = volumes::Volumes::of(m);
        for p in m.pods.iter().chain(&added).chain(&buffer_pods) {
            // Finished pods hold nothing; gated pods are not for scheduling yet.
            let status = p.object.status.as_ref();
            if matches!(
                status.and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            ) {
                continue;
            }
            let spec = p.object.spec.as_ref();
            let bound_to = spec.and_then(|s| s.node_name.as_ref());
            if spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty())
                && bound_to.is_none()
            {
                warnings.push(format!(
                    "{}: Pod/{}/{}: spec.schedulingGates: the pod waits for its scheduling gates; not planned",
                    p.origin,
                    p.object.metadata.namespace.as_deref().unwrap_or("default"),
                    p.object.metadata.name.as_deref().unwrap_or_default()
                ));
                continue;
            }
            // The scheduler is preempting lower-priority pods for it on the node it names: the
            // room is being made there, so no node is launched for it (Karpenter's
            // IsPreempting).
            if let Some(nominated) = status
                .and_then(|s| s.nominated_node_name.as_deref())
                .filter(|n| !n.is_empty())
                && bound_to.is_none()
            {
                warnings.push(format!(
                    "{}: Pod/{}/{}: status.nominatedNodeName: the scheduler is preempting pods on \
                     {nominated} for it; not planned",
                    p.origin,
                    p.object.metadata.namespace.as_deref().unwrap_or("default"),
                    p.object.metadata.name.as_deref().unwrap_or_default()
                ));
                continue;
            }
            let mut info = match PodInfo::compile(&p.object, &p.origin) {
                Ok(mut info) => {
                    info.do_not_disrupt =
                        joiner_model::do_not_disrupt::pod_protected(&p.object, now);
                    info
                }
                Err(e) => {
                    unreadable_pod(&e, bound_to, &mut nodes, &mut decided, &mut warnings);
                    invalid.push(e);
                    continue;
                }
            };
            if let Err(why) = constrain_by_volumes(&volumes, &p.object, &mut info) {
                match bound_to {
                    None => {
                        decided.push(Unschedulable {
                            pod: info.key(),
                            reason: why,
                        });
                        continue;
                    }
                    // Where it could move is unknown: its node stays as it is.
                    Some(node) => {
                        warnings.push(format!(
                            "Pod/{}: {why}; node {node} is not consolidated while it runs there",
                            info.key()
                        ));
                        if let Some(n) = nodes.iter_mut().find(|n| &n.name == node) {
                            n.consolidation_candidate = false;
                        }
                    }
                }
            }
            let pending_dra = info.has_resource_claims && info.node_name.is_none();
            if pending_dra && !dra_on {
                decided.push(Unschedulable {
                    pod: info.key(),
                    reason: "the pod uses ResourceClaims and DRA support is off (set settings.enableDRA=true); no node is launched for it".into(),
                });
                continue;
            }
            // Bound pods keep their claims too: consolidation moves them with their pods.
            let extended = dra_cluster
                .as_ref()
                .is_some_and(|c| c.extended.requested_by(&p.object));
            with_claims.push((info.has_resource_claims || extended).then_some(p));
            pods.push(info);
        }
        let dra = if let Some(cluster) = dra_cluster {
            let predicted = dra::Predicted {
                catalog: &catalog,
                pools: &pools,
                options: &template_options,
            };
            let built = dra::build(m, cluster, &predicted, &nodes, &with_claims, &mut warnings);
            let mut input = built.input;
            invalid.extend(built.invalid);
            // Pods whose claims lead nowhere wait, as kube-scheduler keeps them waiting.
            let refused: BTreeMap<usize, String> = built.refused.into_iter().collect();
            let mut kept = Vec::with_capacity(pods.len());
            let mut kept_claims = Vec::with_capacity(pods.len());
            for (i, (pod, claims)) in pods.drain(..).zip(input.pod_claims.drain(..)).enumerate() {
                match refused.get(&i) {
                    Some(reason) => decided.push(Unschedulable {
                        pod: pod.key(),
                        reason: reason.clone(),
                    }),
                    None => {
                        kept.push(pod);
                        kept_claims.push(claims);
                    }
                }
            }
            pods = kept;
            input.pod_claims = kept_claims;
            Some(input)
        } else {
            None
        };
        let mut daemon_sets = Vec::new();
        for ds in &m.daemon_sets {
            let mut pod = daemon_set_pod(&ds.object, "");
            pod.metadata.name = ds.object.metadata.name.clone();
            match PodInfo::compile(&pod, &ds.origin) {
                Ok(pod) => daemon_sets.push(DaemonInput { pod }),
                Err(e) => {
                    // The error names the pod the template makes; the object is the DaemonSet.
                    let object = ObjectRef::new(
                        "DaemonSet",
                        ds.object.metadata.namespace.as_deref().or(Some("default")),
                        ds.object.metadata.name.clone().unwrap_or_default(),
                    );
                    let e = InputError::new(
                        &ds.origin,
                        &object,
                        format!("spec.template.{}", e.field),
                        e.message,
                    );
                    warnings.push(format!("{e}; its pods are not counted on new nodes"));
                    invalid.push(e);
                }
            }
        }

        statics::choose_removals(&mut statics, &m.node_claims, &nodes, &pods, &mut warnings);

        Ok(ClusterSnapshot {
            input: SchedulingInput {
                nodes,
                pods,
                daemon_sets,
                pools,
                dra,
            },
            decided,
            unready,
            warnings,
            invalid,
            catalog: Arc::new(catalog),
            region: settings.region.clone(),
            feature_gates: settings.feature_gates.clone(),
            overlaid,
            statics,
            claim_names: m
                .node_claims
                .iter()
                .map(|c| c.object.name().to_string())
                .collect(),
            buffers,
        })
    }
}

/// A pod that cannot be read: pending, it is unschedulable with the reason; bound, what it
/// uses on its node is unknown, so the node takes no more pods and is not consolidated.
/// The NodeOverlays applied to the pools when the `NodeOverlay` gate is on (Karpenter's
/// default is off), with a warning when overlays are given and the gate is off.
fn apply_overlays(
    m: &Manifests,
    settings: &Settings,
    pools: &mut [crate::scheduling::PoolInput],
    warnings: &mut Vec<String>,
) -> overlays::Outcome {
    if m.node_overlays.is_empty() {
        return overlays::Outcome::default();
    }
    if !settings.feature_gates.enabled(FeatureGate::NodeOverlay) {
        warnings.push(format!(
            "{} NodeOverlay(s) not applied: the NodeOverlay feature gate is off, as it is by \
             default in Karpenter (settings.featureGates.nodeOverlay=true turns it on)",
            m.node_overlays.len()
        ));
        return overlays::Outcome::default();
    }
    overlays::apply(pools, &m.node_overlays, warnings)
}

/// Narrows the pod's node requirements to where its persistent volumes can be reached
/// ([`volumes`]), or says why it cannot be scheduled (a bound pod's requirements say where it
/// could move to).
fn constrain_by_volumes(
    volumes: &volumes::Volumes<'_>,
    pod: &k8s_openapi::api::core::v1::Pod,
    info: &mut PodInfo,
) -> Result<(), String> {
    let Some(allowed) = volumes.requirements(pod)? else {
        return Ok(());
    };
    let both = volumes::cross(&info.node_requirements, &allowed);
    if both.is_empty() {
        return Err(format!(
            "its volumes can only be used from nodes with {}, which its node selector and \
             affinity rule out",
            volumes::describe(&allowed)
        ));
    }
    info.node_requirements = both;
    Ok(())
}

fn unreadable_pod(
    e: &InputError,
    bound_to: Option<&String>,
    nodes: &mut [ExistingNode],
    decided: &mut Vec<Unschedulable>,
    warnings: &mut Vec<String>,
) {
    let Some(node) = bound_to else {
        warnings.push(format!(
            "{e}; the pod waits, and nothing is launched for it"
        ));
        decided.push(Unschedulable {
            pod: pod_key(&e.object),
            reason: format!(
                "{}: {}; the pod cannot be read, and nothing is launched for it",
                e.field, e.message
            ),
        });
        return;
    };
    warnings.push(format!(
        "{e}; what it uses on node {node} is unknown, so the node takes no new pods and is not consolidated"
    ));
    if let Some(n) = nodes.iter_mut().find(|n| &n.name == node) {
        n.consolidation_candidate = false;
        n.taints.push(Taint {
            key: UNKNOWN_USAGE_TAINT.into(),
            effect: "NoSchedule".into(),
            value: None,
            time_added: None,
        });
    }
}

/// The taint the snapshot (never the cluster) gives a node running a pod it cannot read.
const UNKNOWN_USAGE_TAINT: &str = "joiner.dev/unreadable-pod";

fn pod_key(object: &ObjectRef) -> String {
    format!(
        "{}/{}",
        object.namespace.as_deref().unwrap_or("default"),
        object.name
    )
}

impl ClusterSnapshot {
    /// A builder over these inputs; see [`SnapshotBuilder`].
    pub fn builder<'a>(
        m: &'a Manifests,
        settings: &'a Settings,
        options: &'a Options,
    ) -> SnapshotBuilder<'a> {
        SnapshotBuilder {
            manifests: m,
            settings,
            options,
            unavailable: None,
            candidates: None,
            sold: None,
            described: &[],
            now: None,
            unreadable_classes: None,
            corrections: None,
            placement_groups: None,
        }
    }

    /// The snapshot of these inputs with nothing else known: what `joiner plan` plans.
    pub fn build(
        m: &Manifests,
        settings: &Settings,
        options: &Options,
    ) -> Result<ClusterSnapshot, InputError> {
        ClusterSnapshot::builder(m, settings, options).build()
    }

    /// What the scheduler decides over.
    pub fn input(&self) -> &SchedulingInput {
        &self.input
    }

    /// Pods decided before scheduling (DRA pods while DRA is off), with their reasons.
    pub fn decided(&self) -> &[Unschedulable] {
        &self.decided
    }

    /// Things the user should know (skipped NodePools, unknown NodeClaims, defaults taken).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Objects that cannot be read (a quantity, an operator, a setting Joiner cannot parse),
    /// each left out or decided on its own as [`SnapshotBuilder::build`] says, and reported
    /// in [`ClusterSnapshot::warnings`] too. The live controller carries on without them;
    /// `joiner plan` refuses such input, naming each.
    pub fn invalid(&self) -> &[InputError] {
        &self.invalid
    }

    /// How many pending pods are left out of planning because they cannot be read (an operator,
    /// a quantity, a selector Joiner cannot parse): Karpenter's ignored pods, which wait with
    /// their reason.
    pub fn ignored_pods(&self) -> usize {
        self.invalid
            .iter()
            .filter(|e| e.object.kind == "Pod")
            .filter(|e| {
                let key = pod_key(&e.object);
                self.decided.iter().any(|d| d.pod == key)
            })
            .count()
    }

    /// How many pending pods have each effective zone (a zone name, `flexible` or `none`),
    /// as Karpenter's scheduler counts them ([`crate::scheduling::zones`]).
    pub fn pending_by_effective_zone(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for pod in self.input.pods.iter().filter(|p| p.node_name.is_none()) {
            let zone = crate::scheduling::zones::effective_zone(pod);
            *out.entry(zone.label().to_string()).or_insert(0) += 1;
        }
        out
    }

    /// The NodePools, with their instance types resolved.
    pub fn pools(&self) -> &[PoolInput] {
        &self.input.pools
    }

    /// The instance types each NodePool allows, with their offerings and prices
    /// (`joiner catalog`); with no NodePool at all, the whole catalog.
    pub fn listing(&self) -> crate::listing::Listing {
        if self.input.pools.is_empty() {
            return crate::listing::list_catalog(&self.region, &self.catalog);
        }
        let mut pools = self.input.pools.clone();
        pools.extend(self.statics.iter().filter_map(|s| s.input().cloned()));
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        crate::listing::list(&self.region, &self.catalog, &pools)
    }

    /// The NodeOverlays applied nowhere because they conflict with another of equal weight, by
    /// name, with the conflict in words.
    pub fn overlay_conflicts(&self) -> &BTreeMap<String, String> {
        &self.overlaid.conflicts
    }

    /// How `pool` would launch `instance_type`, if it may.
    pub fn launch_option(&self, pool: &str, instance_type: &str) -> Option<&LaunchOption> {
        self.input
            .pools
            .iter()
            .chain(self.statics.iter().filter_map(|s| s.input()))
            .find(|p| p.name == pool)?
            .options
            .iter()
            .find(|o| o.instance_type == instance_type)
    }

    /// The machines: Nodes and in-flight NodeClaims, in name order.
    pub fn machines(&self) -> &[ExistingNode] {
        &self.input.nodes
    }

    /// The consolidation moves for this round ([`crate::disruption::consolidate`]).
    pub fn consolidate(&self) -> Vec<crate::disruption::Decision> {
        crate::disruption::consolidate(&self.consolidation_input(), &self.feature_gates)
    }

    /// The input consolidation weighs: each CapacityBuffer's virtual pods that fit existing
    /// nodes (or NodeClaims in flight) bound there, as if they ran, so the room a buffer keeps
    /// is neither "empty" nor free for other nodes' pods, and a move must find them room too
    /// (Karpenter simulates them with the pending pods). Buffer pods no existing node holds are
    /// left out: they wait for new capacity whatever consolidation does.
    fn consolidation_input(&self) -> std::borrow::Cow<'_, SchedulingInput> {
        if !self
            .input
            .pods
            .iter()
            .any(|p| p.capacity_buffer.is_some() && p.node_name.is_none())
        {
            return std::borrow::Cow::Borrowed(&self.input);
        }
        let plan = crate::scheduling::placements(&self.input);
        let existing: BTreeSet<&str> = self.input.nodes.iter().map(|n| n.name.as_str()).collect();
        let at: BTreeMap<&str, &str> = plan
            .bindings
            .iter()
            .filter(|b| existing.contains(b.node.as_str()))
            .map(|b| (b.pod.as_str(), b.node.as_str()))
            .collect();
        let mut input = self.input.clone();
        input.pods.retain_mut(|p| {
            if p.capacity_buffer.is_none() || p.node_name.is_some() {
                return true;
            }
            match at.get(p.key().as_str()) {
                Some(node) => {
                    p.node_name = Some((*node).to_string());
                    true
                }
                None => false,
            }
        });
        std::borrow::Cow::Owned(input)
    }

    /// The consolidation moves for this round, with the verdicts of the moves weighed, `lap`
    /// told as each kind is done ([`crate::disruption::consolidate_weighed`]).
    pub fn consolidate_weighed(
        &self,
        lap: &mut dyn FnMut(joiner_model::wellknown::ConsolidationType),
    ) -> (
        Vec<crate::disruption::Decision>,
        Vec<crate::disruption::MoveVerdict>,
    ) {
        crate::disruption::consolidate_weighed(
            &self.consolidation_input(),
            &self.feature_gates,
            lap,
        )
    }

    /// New nodes for the pods of `nodes` ([`crate::disruption::replacements`]).
    pub fn replacements(&self, nodes: &[String]) -> crate::disruption::Replacements {
        crate::disruption::replacements(&self.input, nodes)
    }

    /// The full account of one pod (`namespace/name`), or `None` if it is not in the input.
    pub fn explain_pod(&self, pod: &str) -> Option<crate::scheduling::PodAccount> {
        if let Some(u) = self.decided.iter().find(|u| u.pod == pod) {
            return Some(crate::scheduling::PodAccount {
                pod: pod.to_string(),
                outcome: format!("unschedulable: {}", u.reason),
                instance_types: Vec::new(),
                packing: None,
            });
        }
        let mut account = crate::scheduling::explain_pod(&self.input, pod)?;
        if let Some(info) = self.input.pods.iter().find(|p| p.key() == pod) {
            if let Some(reason) = account.outcome.strip_prefix("unschedulable: ") {
                account.outcome = format!(
                    "unschedulable: {}",
                    pools::with_unready(reason, info, &self.unready)
                );
            }
            account.instance_types.extend(
                self.unready
                    .iter()
                    .filter(|u| u.might_take(info))
                    .map(|u| format!("NodePool {}: launches nothing: {}", u.name, u.why)),
            );
        }
        let shown: Vec<String> = self
            .overlaid
            .applied
            .iter()
            .filter(|((pool, it), _)| {
                let prefix = format!("NodePool {pool} / {it} ");
                account
                    .instance_types
                    .iter()
                    .any(|l| l.starts_with(&prefix))
            })
            .map(|((pool, it), names)| {
                format!(
                    "NodePool {pool} / {it}: as NodeOverlay {} changed it",
                    names.join(", ")
                )
            })
            .collect();
        account.instance_types.extend(shown);
        Some(account)
    }

    /// The static NodePools ([`statics`]): their counts, and what keeping them takes now.
    pub fn static_pools(&self) -> &[statics::StaticPool] {
        &self.statics
    }

    /// The NodeClaims the static NodePools launch now, planned without pods.
    pub fn static_launches(&self) -> Vec<crate::plan::PlannedNodeClaim> {
        self.statics
            .iter()
            .flat_map(|s| self.static_claims(&s.name, &s.launch))
            .collect()
    }

    /// `count` new NodeClaims for static pool `pool` (one-for-one replacements), under slot
    /// names no NodeClaim holds and `also_taken` does not name.
    pub fn static_replacements(
        &self,
        pool: &str,
        count: usize,
        also_taken: &BTreeSet<String>,
    ) -> Vec<crate::plan::PlannedNodeClaim> {
        let mut taken = self.claim_names.clone();
        taken.extend(also_taken.iter().cloned());
        self.static_claims(pool, &statics::free_slots(pool, &taken, count))
    }

    /// A static NodeClaim planned now as the machine in flight it will be once created.
    fn as_machine(&self, claim: &crate::plan::PlannedNodeClaim) -> Option<ExistingNode> {
        let pool = self
            .statics
            .iter()
            .find(|s| s.name == claim.node_pool)?
            .input()?;
        let option = pool
            .options
            .iter()
            .find(|o| o.instance_type == claim.instance_type)?;
        Some(statics::machine(claim, pool, option))
    }

    fn static_claims(&self, pool: &str, names: &[String]) -> Vec<crate::plan::PlannedNodeClaim> {
        let Some(input) = self
            .statics
            .iter()
            .find(|s| s.name == pool)
            .and_then(|s| s.input())
        else {
            return Vec::new();
        };
        let mut claims = crate::scheduling::static_claims(input, &self.input.daemon_sets, names);
        claims.iter_mut().for_each(|c| c.is_static = true);
        claims
    }

    /// Plans this snapshot: the static pools' launches first, as machines in flight that
    /// pending pods may go to, then the pending pods.
    pub fn plan(&self) -> Plan {
        let mut plan = self.plan_by(schedule);
        if !self.unready.is_empty() {
            for u in &mut plan.unschedulable {
                if let Some(info) = self.input.pods.iter().find(|p| p.key() == u.pod) {
                    u.reason = pools::with_unready(&u.reason, info, &self.unready);
                }
            }
        }
        plan.unschedulable.extend(self.decided.iter().cloned());
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        self.buffers.report(&mut plan);
        plan
    }

    /// The pending pods [`ClusterSnapshot::plan`] places (`namespace/name`), found without
    /// its exact pass and without explaining the pods it cannot place
    /// ([`crate::scheduling::placements`]).
    pub fn placed_pods(&self) -> std::collections::BTreeSet<String> {
        self.plan_by(crate::scheduling::placements)
            .bindings
            .into_iter()
            .map(|b| b.pod)
            .collect()
    }

    /// `schedule` over the input, with the static pools' launches first as machines in flight.
    fn plan_by(&self, schedule: fn(&SchedulingInput) -> Plan) -> Plan {
        let launches = self.static_launches();
        if launches.is_empty() {
            return schedule(&self.input);
        }
        let mut input = self.input.clone();
        input
            .nodes
            .extend(launches.iter().filter_map(|c| self.as_machine(c)));
        input.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut plan = schedule(&input);
        statics::attach(&mut plan, launches);
        plan
    }
}

/// The built-in catalog (unless turned off), with what the cloud sells now in place of its
/// offerings when that is known, and the input's InstanceTypes added or put in place of
/// built-in ones. An InstanceType that cannot be read is reported and its name left
/// out of the catalog altogether: launching the built-in type it meant to correct would be
/// launching something the user said was wrong.
fn build_catalog(
    m: &Manifests,
    settings: &Settings,
    options: &Options,
    (sold, described): (
        Option<&BTreeMap<String, Vec<Offering>>>,
        &[crate::catalog::Ec2Facts],
    ),
    warnings: &mut Vec<String>,
    invalid: &mut Vec<InputError>,
) -> Catalog {
    let mut catalog = if options.builtin_catalog {
        let ppm = (settings.vm_memory_overhead_percent * 1_000_000.0)
            .round()
            .clamp(0.0, 1_000_000.0) as u32;
        let mut catalog = Catalog::builtin_with(&settings.region, &settings.zones, ppm);
        catalog.describe(described, &settings.region, ppm);
        catalog
    } else {
        Catalog::empty()
    };
    if let Some(sold) = sold {
        catalog.sell_as(sold);
    }
    for it in &m.instance_types {
        match user_type(it) {
            Ok(user) => catalog.upsert(user),
            Err(e) => {
                warnings.push(format!("{e}; the instance type is not launched"));
                catalog.remove(&e.object.name);
                invalid.push(e);
            }
        }
    }
    catalog
}

fn user_type(it: &Sourced<joiner_model::api::InstanceType>) -> Result<InstanceType, InputError> {
    let name = it.object.metadata.name.clone().unwrap_or_default();
    let object = ObjectRef::new("InstanceType", None, &name);
    let spec = &it.object.spec;
    let offerings = spec
        .offerings
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let capacity_type = CapacityType::parse(o.capacity_type.as_str()).ok_or_else(|| {
                InputError::new(
                    &it.origin,
                    &object,
                    format!("spec.offerings[{i}].capacityType"),
                    "unknown capacity type",
                )
            })?;
            Ok(Offering {
                zone: o.zone.clone(),
                capacity_type,
                price: o.price,
                available: o.available,
                price_basis: crate::catalog::PriceBasis::Listed,
            })
        })
        .collect::<Result<Vec<_>, InputError>>()?;
    let overhead = (!spec.overhead.is_empty()).then(|| spec.overhead.clone());
    let mut user = user_instance_type(
        &name,
        spec.architecture.as_str(),
        spec.capacity.clone(),
        overhead,
        spec.labels.clone(),
        offerings,
    );
    // Devices as given; a type that redefines a built-in one without listing devices (to
    // correct a price, say) keeps the built-in devices.
    user.devices = if spec.devices.is_empty() && spec.runtime_attributes.is_empty() {
        builtin_templates(&name)
    } else {
        let templates = DeviceTemplates::from_spec(&spec.devices, &spec.runtime_attributes)
            .map_err(|e| e.into_input_error(&it.origin, &object))?;
        Some(Arc::new(templates))
    };
    Ok(user)
}

fn device_plugin_configs(m: &Manifests, settings: &Settings) -> Option<DevicePluginConfigs> {
    let want = &settings.nvidia_device_plugin;
    m.config_maps
        .iter()
        .find(|cm| {
            cm.object.metadata.name.as_deref() == Some(want.config_map_name.as_str())
                && cm.object.metadata.namespace.as_deref().unwrap_or("default")
                    == want.config_map_namespace
        })
        .map(|cm| {
            DevicePluginConfigs::from_config_map(
                &cm.object,
                want.default_config.as_deref(),
                &cm.origin,
            )
        })
}

#[cfg(test)]
mod isolation_tests;
#[cfg(test)]
mod overlay_tests;
#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod reservation_tests;
#[cfg(test)]
mod static_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod volume_tests;
