//! What every reconciler works with during one step.

use std::collections::{BTreeMap, BTreeSet};

use joiner_engine::catalog::Offering;
use joiner_engine::snapshot::ClusterSnapshot;
use joiner_model::Sourced;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::EC2NodeClassStatus;
use joiner_model::api::nodeclass_status::{conditions, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::cloud::{
    CloudError, CloudMethod, CloudProvider, Instance, LaunchRequest, Launched, OfferingKey,
    SoldTypes,
};
use crate::config::Config;
use crate::consistency::Mispredictions;
use crate::error::ControllerError;
use crate::instance_listing::InstanceListing;
use crate::placement::PlacementGroups;
use crate::report::Reconciler;
use crate::report::StepReport;
use crate::store::{ClusterStore, manifests_of};
use crate::unavailable::UnavailableOfferings;

/// What the controller learned in earlier steps and keeps in memory: offerings out of
/// capacity, predictions running nodes proved wrong.
pub struct Learned<'a> {
    pub unavailable: &'a mut UnavailableOfferings,
    pub mispredicted: &'a mut Mispredictions,
    pub placement_groups: &'a mut PlacementGroups,
}

/// One step's view: the time is fixed for the whole step, and what is expensive to read is read
/// at most once: the cloud's price list, and the cluster snapshot every reconciler plans over.
///
/// The snapshot is built on first use from the store, the settings, the offerings known to be
/// unavailable and the consolidation candidates, and is shared by provisioning, consolidation,
/// drift, expiry and interruption. It is built again only after this step changed what it
/// holds: NodeClaims created or deleted ([`Ctx::invalidate_view`]), an offering marked
/// unavailable, other consolidation candidates. Its warnings are logged once per build.
pub struct Ctx<'a, S, C> {
    pub store: &'a S,
    pub cloud: &'a C,
    pub config: &'a Config,
    pub now: Timestamp,
    pub report: &'a mut StepReport,
    unavailable: &'a mut UnavailableOfferings,
    /// Predictions running nodes proved wrong ([`crate::consistency`]).
    mispredicted: &'a mut Mispredictions,
    /// The placement groups the classes select, as the nodeclass step found them.
    pub(crate) placement_groups: &'a mut PlacementGroups,
    view: Option<ClusterSnapshot>,
    /// The view no longer matches the cluster (this step wrote something it holds).
    stale: bool,
    candidates: Option<BTreeSet<String>>,
    /// Shared, so that each launch of a step reads them without copying hundreds of types.
    instance_types: Option<std::sync::Arc<SoldTypes>>,
    /// The cluster's instances as listed in this step ([`Ctx::instances`]).
    instances: Option<InstanceListing>,
    /// The part of the controller running now, which the cloud calls it makes are counted
    /// against ([`Ctx::during`]).
    during: Reconciler,
}

impl<'a, S: ClusterStore, C: CloudProvider> Ctx<'a, S, C> {
    pub fn new(
        store: &'a S,
        cloud: &'a C,
        config: &'a Config,
        now: Timestamp,
        learned: Learned<'a>,
        report: &'a mut StepReport,
    ) -> Self {
        Ctx {
            store,
            cloud,
            config,
            now,
            report,
            unavailable: learned.unavailable,
            mispredicted: learned.mispredicted,
            placement_groups: learned.placement_groups,
            view: None,
            stale: false,
            candidates: None,
            instance_types: None,
            instances: None,
            during: Reconciler::ClusterState,
        }
    }

    /// The part of the controller that runs from now on: its cloud calls are counted against
    /// it.
    pub fn during(&mut self, reconciler: Reconciler) {
        self.during = reconciler;
    }

    /// Makes one cloud call, timed and recorded in the report ([`crate::report::CloudCall`]).
    fn call<T>(
        &mut self,
        method: CloudMethod,
        call: impl FnOnce(&C) -> Result<T, CloudError>,
    ) -> Result<T, CloudError> {
        let started = std::time::Instant::now();
        let result = call(self.cloud);
        self.report.cloud_calls.push(crate::report::CloudCall {
            during: self.during,
            method,
            took: started.elapsed(),
            error: result.as_ref().err().cloned(),
        });
        result
    }

    /// Launches an instance. Each offering the cloud had no capacity for on the way, whether
    /// the launch then succeeded on another or not, is a launch failure in the report.
    pub fn launch(&mut self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        let result = self.call(CloudMethod::Create, |c| c.launch(request));
        if let Ok(Launched {
            user_data_bytes: Some(bytes),
            ..
        }) = &result
        {
            self.report
                .user_data_bytes
                .push((request.node_class.clone(), *bytes));
        }
        let failed = match &result {
            Ok(launched) => launched.insufficient.as_slice(),
            Err(CloudError::InsufficientCapacity(offerings)) => offerings.as_slice(),
            Err(_) => &[],
        };
        self.report.launch_failures.extend(failed.iter().cloned());
        result
    }

    /// Reads one instance (see [`CloudProvider::get`]).
    pub fn instance(&mut self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        self.call(CloudMethod::Get, |c| c.get(instance_id))
    }

    /// Lists the cluster's instances afresh, whatever this step listed before.
    pub fn list_instances(&mut self) -> Result<Vec<Instance>, CloudError> {
        let cluster = self.config.cluster_name.clone();
        self.call(CloudMethod::List, |c| c.list(&cluster))
    }

    /// The instances Joiner launched for this cluster, listed from the cloud once per step (one
    /// DescribeInstances filtered by the ownership tags, paged) however many NodeClaims are
    /// launching or terminating; this step's own launches and terminations are recorded in it
    /// ([`Ctx::learn_instance`], [`Ctx::learn_terminated`]), and a launch whose outcome is
    /// unknown makes the next call list again ([`Ctx::forget_instances`]). Like every listing it may trail the cloud: absence from
    /// it proves nothing, and whoever would act on an absence asks for the instance itself.
    pub fn instances(&mut self) -> Result<&InstanceListing, ControllerError> {
        if self.instances.is_none() {
            self.instances = Some(InstanceListing::new(self.list_instances()?));
        }
        Ok(self.instances.get_or_insert_with(InstanceListing::default))
    }

    /// Terminates an instance (in `zone`); a call that fails is counted by the zone, as
    /// Karpenter counts termination failures.
    pub fn terminate(&mut self, instance_id: &str, zone: &str) -> Result<(), CloudError> {
        let result = self.call(CloudMethod::Delete, |c| c.terminate(instance_id));
        if result.is_err() {
            self.report.termination_failures.push(zone.to_string());
        }
        result
    }

    /// A launch's outcome is unknown (it may have started an instance): the next
    /// [`Ctx::instances`] lists again.
    pub fn forget_instances(&mut self) {
        self.instances = None;
    }

    /// This step terminated the instance: this step's listing, which holds only instances not
    /// terminated, drops it.
    pub fn learn_terminated(&mut self, instance_id: &str) {
        if let Some(listed) = self.instances.as_mut() {
            listed.remove(instance_id);
        }
    }

    /// This step launched `instance`: this step's listing holds it from now on.
    pub fn learn_instance(&mut self, instance: &Instance) {
        if let Some(listed) = self.instances.as_mut() {
            listed.add(instance.clone());
        }
    }

    /// A NodeClaim was found to offer less than predicted: later plans, from this step on, use
    /// what it offers.
    pub fn learn_mispredicted(&mut self, claim: &joiner_model::api::NodeClaim) {
        self.mispredicted.learn(std::iter::once(claim));
    }

    /// The cluster as it is now, with in-flight NodeClaims as machines.
    pub fn view(&mut self) -> Result<&ClusterSnapshot, ControllerError> {
        if self.view.is_none() || self.stale {
            let mut m = manifests_of(self.store)?;
            if self
                .config
                .settings
                .feature_gates
                .enabled(joiner_model::feature_gates::FeatureGate::CapacityBuffer)
            {
                let list: Vec<_> = m
                    .capacity_buffers
                    .iter()
                    .map(|b| b.object.clone())
                    .collect();
                m.scale_targets = crate::scale_targets::read(self.store, &list);
            }
            mark_unresolved(&mut m.node_classes, crate::clock::k8s_time(self.now));
            let placement_groups = self.placement_groups.current(&m.node_classes);
            mark_unplaced(
                &mut m.node_classes,
                &placement_groups,
                crate::clock::k8s_time(self.now),
            );
            let unreadable_classes: BTreeSet<String> = self
                .store
                .undecodable::<EC2NodeClass>()?
                .into_iter()
                .map(|k| k.name)
                .collect();
            let unavailable = self.unavailable.active(self.now);
            self.mispredicted
                .learn(m.node_claims.iter().map(|c| &c.object));
            let corrections = self.mispredicted.corrections().clone();
            let sold = self.sold();
            let described: Vec<joiner_engine::catalog::Ec2Facts> = self
                .instance_types
                .iter()
                .flat_map(|types| types.all())
                .filter_map(|t| t.facts.as_deref().cloned())
                .collect();
            let mut builder =
                ClusterSnapshot::builder(&m, &self.config.settings, &self.config.options)
                    .unavailable(&unavailable)
                    .unreadable_classes(&unreadable_classes)
                    .corrections(&corrections)
                    .placement_groups(&placement_groups)
                    .at(self.now);
            if let Some(sold) = &sold {
                builder = builder.sold(sold).described(&described);
            }
            if let Some(candidates) = &self.candidates {
                builder = builder.consolidation_candidates(candidates);
            }
            let view = builder.build()?;
            for w in view.warnings() {
                tracing::warn!("{w}");
            }
            self.view = Some(view);
            self.stale = false;
        }
        self.view
            .as_ref()
            .ok_or_else(|| ControllerError::Config("the cluster view could not be built".into()))
    }

    /// A view for what does not change within a step: the NodePools' launch options (their
    /// instance types' labels, allocatable and capacity). Reuses this step's view even after
    /// writes, since NodeClaims and pods do not change what a NodePool launches.
    pub fn pools_view(&mut self) -> Result<&ClusterSnapshot, ControllerError> {
        if self.view.is_none() {
            return self.view();
        }
        self.view
            .as_ref()
            .ok_or_else(|| ControllerError::Config("the cluster view could not be built".into()))
    }

    /// This step created or deleted NodeClaims, or changed pods or nodes: the next
    /// [`Ctx::view`] reads the cluster again.
    pub fn invalidate_view(&mut self) {
        self.stale = true;
    }

    /// Only these nodes may be consolidated in this step's view.
    pub fn set_consolidation_candidates(&mut self, nodes: BTreeSet<String>) {
        if self.candidates.as_ref() != Some(&nodes) {
            self.candidates = Some(nodes);
            self.stale = true;
        }
    }

    /// The cloud's instance types and prices, read on first use in this step.
    pub fn instance_types(&mut self) -> Result<std::sync::Arc<SoldTypes>, ControllerError> {
        if let Some(types) = &self.instance_types {
            return Ok(types.clone());
        }
        let types = std::sync::Arc::new(SoldTypes::new(
            self.call(CloudMethod::GetInstanceTypes, |c| c.instance_types())?,
        ));
        self.instance_types = Some(types.clone());
        Ok(types)
    }

    /// What the cloud sells now, by instance type, for the view to plan on: EC2's offerings in
    /// the configured zones at its current prices. When they cannot be read the view plans on
    /// the built-in offerings, as the launch that follows reads them again.
    fn sold(&mut self) -> Option<BTreeMap<String, Vec<Offering>>> {
        match self.instance_types() {
            Ok(types) => Some(
                types
                    .all()
                    .iter()
                    .map(|t| {
                        let offerings = t
                            .offerings
                            .iter()
                            .map(|o| Offering {
                                zone: o.zone.clone(),
                                capacity_type: o.capacity_type,
                                price: o.price,
                                available: o.available,
                                price_basis: o.price_basis,
                            })
                            .collect();
                        (t.name.clone(), offerings)
                    })
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cloud's offerings; planning on the built-in ones");
                None
            }
        }
    }

    /// Records a failure to retry on a later step: `what` is logged, `reconciler` counted.
    pub fn error(&mut self, reconciler: Reconciler, what: &str, e: impl Into<ControllerError>) {
        self.report.error(reconciler, what, e);
    }
}

/// What needs neither the store nor the cloud.
impl<S, C> Ctx<'_, S, C> {
    /// Whether the offering is known to be out of capacity now.
    pub fn is_unavailable(&self, offering: &OfferingKey) -> bool {
        self.unavailable.is_unavailable(offering, self.now)
    }

    /// Records that an offering is out of capacity for a while; plans after this avoid it.
    pub fn mark_unavailable(&mut self, offering: OfferingKey) {
        tracing::warn!(offering = %offering, "offering unavailable for a while");
        self.report.unavailable.push(offering.to_string());
        self.unavailable
            .mark(offering, self.now, self.config.unavailable_ttl);
        self.stale = true;
    }

    /// Marks `offering` unavailable for `unavailable_ttl` from `since` (when its capacity was
    /// found short, recorded elsewhere), unless it is already marked at least that long or the
    /// time is over: idempotent, so it can be called in every step.
    pub fn mark_unavailable_since(&mut self, offering: OfferingKey, since: Timestamp) {
        let until = crate::clock::add(since, self.config.unavailable_ttl);
        if self.now >= until
            || self
                .unavailable
                .until(&offering)
                .is_some_and(|u| u >= until)
        {
            return;
        }
        tracing::warn!(offering = %offering, "offering unavailable for a while");
        self.report.unavailable.push(offering.to_string());
        self.unavailable.mark_until(offering, until);
        self.stale = true;
    }
}

/// Marks every class without a `Ready` condition `Ready=Unknown` (not resolved yet), so the
/// view built from them launches nothing from a class this controller has not resolved.
/// Classes whose placement group this process has not found (yet, or for the selector they
/// have now) are `Ready=Unknown` in the view, whatever their status says: nothing is launched
/// from them until the group is found, so no node lands outside it.
fn mark_unplaced(
    classes: &mut [Sourced<EC2NodeClass>],
    found: &BTreeMap<String, joiner_model::placement::PlacementGroup>,
    now: Time,
) {
    for c in classes {
        let class = &mut c.object;
        let name = class.metadata.name.clone().unwrap_or_default();
        if class.spec.placement_group_selector.is_none() || found.contains_key(&name) {
            continue;
        }
        let generation = class.metadata.generation;
        let status = class.status.get_or_insert_with(EC2NodeClassStatus::default);
        status.set_condition(
            conditions::PLACEMENT_GROUP_READY,
            false,
            reasons::NOT_RESOLVED,
            "the placement group spec.placementGroupSelector names has not been found yet",
            now.clone(),
            generation,
        );
    }
}

pub(crate) fn mark_unresolved(classes: &mut [Sourced<EC2NodeClass>], now: Time) {
    for c in classes {
        let class = &mut c.object;
        let status = class.status.get_or_insert_with(EC2NodeClassStatus::default);
        if status.condition(conditions::READY).is_none() {
            status.recompute_ready(now.clone(), class.metadata.generation);
        }
    }
}
