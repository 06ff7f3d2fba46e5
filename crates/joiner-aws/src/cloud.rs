//! [`AwsCloud`]: the controller's [`CloudProvider`] on EC2.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceType as Ec2InstanceType,
    OnDemandOptionsRequest, ResourceType, SpotAllocationStrategy, SpotOptionsRequest,
    TagSpecification, TargetCapacitySpecificationRequest,
};

use aws_types::SdkConfig;
use aws_types::region::Region;
use joiner_controller::cloud::{
    CloudError, CloudInstanceType, CloudProvider, Instance, InstanceState, LaunchRequest, Launched,
    NodeClassResolution,
};
use joiner_model::wellknown::tags;

use joiner_engine::catalog::{CapacityType, Catalog};
use joiner_model::api::EC2NodeClass;
use joiner_model::settings::Settings;
use tokio::runtime::Handle;

use crate::ami::{AmiCaches, EksParameters};
use crate::cache::{ClassKey, TtlCache, Ttls, spec_hash};
use crate::clients::Clients;
use crate::error::AwsError;
use crate::fleet::{fleet_errors, launched_nothing, unavailable_offerings};
use crate::network::{SubnetInfo, subnet_per_zone};
use crate::nodeclass::ClassReads;
use crate::tags::ec2_tags;
use crate::template::KnownTemplates;
use joiner_launch::image::{ParameterRoots, TypeFacts};
use joiner_launch::{Cluster, LaunchError, Resolved, Skip, family_of};

/// The EC2 cloud.
///
/// Its [`CloudProvider`] methods block on the tokio runtime whose handle it holds: call them
/// from a blocking thread (`tokio::task::spawn_blocking`, or a plain thread), never from an
/// async task, where blocking on the runtime panics.
pub struct AwsCloud {
    clients: Clients,
    /// The cluster the nodes join, as their bootstrap is told.
    cluster: Cluster,
    zones: Vec<String>,
    /// The Kubernetes version (and where its EKS AMIs are published).
    eks: EksParameters,
    /// The built-in catalog: on-demand prices (moto and many partitions have no Pricing API),
    /// the types Joiner knows, and the fallback when EC2's listing fails.
    catalog: Catalog,
    /// Launch templates known to exist.
    templates: KnownTemplates,
    caches: Caches,
}

/// The reads launches and `instance_types` share (see `cache`).
#[derive(Debug)]
struct Caches {
    subnets: TtlCache<ClassKey, Vec<SubnetInfo>>,
    security_groups: TtlCache<ClassKey, Vec<String>>,
    amis: AmiCaches,
    /// Architecture and GPU make of instance types the catalog does not know.
    type_facts: TtlCache<String, TypeFacts>,
    instance_types: TtlCache<(), Vec<CloudInstanceType>>,
}

impl Caches {
    fn new(ttls: Ttls) -> Caches {
        Caches {
            subnets: TtlCache::new(ttls.subnets),
            security_groups: TtlCache::new(ttls.security_groups),
            amis: AmiCaches::new(ttls.images),
            type_facts: TtlCache::new(ttls.instance_types),
            instance_types: TtlCache::new(ttls.instance_types),
        }
    }
}

impl std::fmt::Debug for AwsCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCloud")
            .field("cluster_name", &self.cluster.name)
            .field("zones", &self.zones)
            .field("kubernetes_version", &self.eks.kubernetes_version)
            .finish_non_exhaustive()
    }
}

impl AwsCloud {
    /// The cloud for `settings.region`, with credentials and endpoint from the SDK's usual chain
    /// (environment, profile, instance role; `AWS_ENDPOINT_URL` redirects it, e.g. to moto).
    pub async fn new(
        settings: &Settings,
        cluster_name: &str,
        handle: Handle,
    ) -> Result<AwsCloud, AwsError> {
        let config = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()))
            .load()
            .await;
        AwsCloud::from_sdk_config(&config, settings, cluster_name, handle).await
    }

    /// The cloud over an SDK configuration built by the caller (tests point it at moto).
    pub async fn from_sdk_config(
        config: &SdkConfig,
        settings: &Settings,
        cluster_name: &str,
        handle: Handle,
    ) -> Result<AwsCloud, AwsError> {
        if cluster_name.is_empty() {
            return Err(AwsError::Settings(
                "a cluster name is required: instances are tagged with it".into(),
            ));
        }
        let kubernetes_version = settings.cluster.kubernetes_version.trim().to_string();
        if kubernetes_version.is_empty() {
            return Err(AwsError::Settings(
                "settings.cluster.kubernetesVersion is required: it picks the EKS AMI".into(),
            ));
        }
        Ok(AwsCloud {
            clients: Clients::new(config, handle),
            zones: settings.zones.clone(),
            eks: EksParameters {
                roots: ParameterRoots::default(),
                kubernetes_version,
            },
            cluster: Cluster {
                name: cluster_name.to_string(),
                endpoint: settings.cluster_endpoint.clone(),
                ca_bundle: settings.cluster_ca_bundle.clone(),
                service_cidr: settings.cluster_cidr.clone(),
                dns_ip: None,
            },
            catalog: Catalog::builtin(&settings.region, &settings.zones),
            templates: KnownTemplates::default(),
            caches: Caches::new(Ttls::default()),
        })
    }

    /// Reads on-demand prices from the Price List API at `endpoint` instead of AWS's (tests
    /// serve it from a stub: moto has none).
    pub fn with_pricing_endpoint(mut self, config: &SdkConfig, endpoint: &str) -> Self {
        self.clients = self.clients.with_pricing_endpoint(config, endpoint);
        self
    }

    /// How long reads are cached ([`Ttls::default`] unless told; zero durations turn caching
    /// off).
    pub fn with_cache_ttls(mut self, ttls: Ttls) -> Self {
        self.caches = Caches::new(ttls);
        self
    }

    /// Deletes the launch templates Joiner made in this cluster whose EC2NodeClass is not in
    /// `node_classes` (the cluster's EC2NodeClasses, as read now) or has changed since (its spec
    /// hash differs), and returns their names. Only templates named `joiner/<cluster>/...` and
    /// tagged with this cluster (the cluster tag `owned`, `eks:eks-cluster-name`) and a NodePool
    /// are considered; others', untagged ones and Karpenter's are left alone. Templates are only
    /// read at launch, so deleting one a later launch needs costs that launch one
    /// CreateLaunchTemplate. Blocks like the [`CloudProvider`] methods.
    pub fn delete_unused_launch_templates(
        &self,
        node_classes: &[EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        let current: BTreeMap<String, String> = node_classes
            .iter()
            .filter_map(|c| {
                let name = c.metadata.name.clone()?;
                Some((name, spec_hash(&c.clone().into_v1())))
            })
            .collect();
        let c = &self.clients;
        Ok(c.block(c.delete_unused_templates(&self.cluster.name, &current, &self.templates))?)
    }

    /// Everything the nodes' bootstrap needs of the cluster, as [`crate::cluster::discover`]
    /// resolved it at start-up.
    pub fn with_cluster_access(mut self, access: crate::ClusterAccess) -> Self {
        self.cluster.endpoint = Some(access.endpoint);
        self.cluster.ca_bundle = Some(access.ca_bundle);
        self.cluster.service_cidr = Some(access.service_cidr);
        self.cluster.dns_ip = access.dns_ip;
        self
    }

    /// The cluster CA (base64 PEM) for the node's bootstrap; without it `nodeadm` must look the
    /// cluster up itself.
    pub fn with_cluster_ca_bundle(mut self, ca: impl Into<String>) -> Self {
        self.cluster.ca_bundle = Some(ca.into());
        self
    }

    /// The cluster's service CIDR for the node's bootstrap.
    pub fn with_service_cidr(mut self, cidr: impl Into<String>) -> Self {
        self.cluster.service_cidr = Some(cidr.into());
        self
    }

    /// Where the EKS AMI parameters live in SSM
    /// ([`DEFAULT_AMI_PARAMETER_ROOT`](crate::DEFAULT_AMI_PARAMETER_ROOT) unless told). Tests use
    /// their own root: SSM (and moto) refuse writes under `/aws/`.
    pub fn with_ami_parameter_root(mut self, root: impl Into<String>) -> Self {
        self.eks.roots.eks = root.into().trim_end_matches('/').to_string();
        self
    }

    /// Where the Bottlerocket AMI parameters live in SSM (`/aws/service/bottlerocket` unless
    /// told).
    pub fn with_bottlerocket_parameter_root(mut self, root: impl Into<String>) -> Self {
        self.eks.roots.bottlerocket = root.into().trim_end_matches('/').to_string();
        self
    }

    /// The live instance a launch with this token already started, if any.
    async fn launched_with(&self, token: &str) -> Result<Option<Instance>, AwsError> {
        let filter = aws_sdk_ec2::types::Filter::builder()
            .name(format!("tag:{}", tags::LAUNCH_TOKEN))
            .values(token)
            .build();
        Ok(self
            .clients
            .owned_instances(
                &self.cluster.name,
                &format!("launch token {token}"),
                vec![filter],
            )
            .await?
            .into_iter()
            .min_by(|a, b| (a.launch_time, &a.id).cmp(&(b.launch_time, &b.id))))
    }

    async fn launch_async(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        // An instance without every ownership tag is one Joiner would never list, collect or
        // be allowed to terminate again: refuse to launch it at all.
        if !tags::is_owned(&request.tags, &self.cluster.name) {
            return Err(CloudError::Rejected(format!(
                "launch of nodeclaim {}: its tags lack the ownership tags of cluster {} \
                 ({}=owned, {}, {}, {}) or name a node group",
                request.node_claim,
                self.cluster.name,
                tags::cluster(&self.cluster.name),
                tags::CLUSTER_NAME,
                tags::NODEPOOL,
                tags::NODECLASS
            )));
        }
        if let Some(instance) = self.launched_with(&request.client_token).await? {
            return Ok(Launched {
                instance,
                insufficient: Vec::new(),
                user_data_bytes: None,
            });
        }
        let node_class = request.node_class.as_str();
        let class = request
            .node_class_spec
            .clone()
            .ok_or_else(|| AwsError::node_class(node_class, "not found in the cluster"))?
            .into_v1();
        let family = family_of(&class).map_err(|e| launch_error(node_class, e))?;
        let Some((capacity_type, _)) = joiner_launch::fleet::capacity_type_of(request) else {
            return Err(CloudError::NoOfferings);
        };
        let spec = &class.spec;
        let key = ClassKey::of(node_class, &class);
        let subnets = self
            .caches
            .subnets
            .get_or_read(
                &key,
                self.clients
                    .subnets(node_class, &spec.subnet_selector_terms),
            )
            .await?;
        let subnet_zones: BTreeMap<String, String> = subnets
            .iter()
            .map(|s| (s.id.clone(), s.zone.clone()))
            .collect();
        let security_groups = self
            .caches
            .security_groups
            .get_or_read(
                &key,
                self.clients
                    .security_groups(node_class, &spec.security_group_selector_terms),
            )
            .await?;
        let type_names: BTreeSet<String> = request
            .offers
            .iter()
            .filter(|o| o.offering.capacity_type == capacity_type)
            .map(|o| o.offering.instance_type.clone())
            .collect();
        let facts = self
            .clients
            .type_facts(&self.catalog, &self.caches.type_facts, &type_names)
            .await?;
        let amis = self
            .clients
            .resolve_amis(
                &self.eks,
                (&key, &self.caches.amis),
                family,
                &spec.ami_selector_terms,
                &facts,
            )
            .await?;
        let instance_profile = self
            .clients
            .launch_profile(&self.cluster.name, &class)
            .await?;
        let profile_used = instance_profile.clone();
        let resolved = Resolved {
            images: amis.clone(),
            subnets: subnet_per_zone(&subnets)
                .into_iter()
                .map(|(zone, s)| (zone, s.id))
                .collect(),
            security_groups,
            instance_profile,
        };
        let fleet = joiner_launch::fleet(request, &class, &self.cluster, &resolved)
            .map_err(|e| launch_error(node_class, e))?;
        for (offering, skip) in &fleet.skipped {
            match skip {
                Skip::NoImage => {
                    tracing::warn!(%offering, node_class, "no AMI fits this instance type; skipped")
                }
                Skip::NoSubnet => {
                    tracing::debug!(%offering, node_class, "no selected subnet in this zone; skipped")
                }
            }
        }
        if fleet.templates.is_empty() {
            tracing::warn!(nodeclaim = %request.node_claim, node_class, "no offering has both an AMI and a subnet");
            return Err(CloudError::NoOfferings);
        }
        // Several templates of one class write the same figure: the last created wins, as in
        // Karpenter.
        let mut user_data_bytes = None;
        for t in &fleet.templates {
            let created = self
                .clients
                .ensure_template(&self.templates, &t.name, &t.spec)
                .await?;
            user_data_bytes = created.or(user_data_bytes);
        }
        let template_names: Vec<String> = fleet.templates.iter().map(|t| t.name.clone()).collect();
        let instance_tags = fleet.instance_tags.clone();
        let tag_specs = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .into_iter()
        .map(|r| {
            TagSpecification::builder()
                .resource_type(r)
                .set_tags(Some(ec2_tags(&instance_tags)))
                .build()
        })
        .collect();
        let configs = fleet
            .templates
            .iter()
            .map(|t| {
                let overrides = t
                    .overrides
                    .iter()
                    .map(|o| {
                        FleetLaunchTemplateOverridesRequest::builder()
                            .instance_type(Ec2InstanceType::from(o.instance_type.as_str()))
                            .subnet_id(&o.subnet_id)
                            .availability_zone(&o.zone)
                            .priority(o.priority as f64)
                            .build()
                    })
                    .collect();
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(&t.name)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build()
            })
            .collect();
        let target = TargetCapacitySpecificationRequest::builder()
            .total_target_capacity(1)
            .default_target_capacity_type(DefaultTargetCapacityType::from(
                fleet.target_capacity_type(),
            ))
            .build();
        let mut call = self
            .clients
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .target_capacity_specification(target)
            .set_launch_template_configs(Some(configs))
            .set_tag_specifications(Some(tag_specs))
            .client_token(&request.client_token)
            .set_context(fleet.context.clone());
        call = if capacity_type == CapacityType::Spot {
            call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
        } else {
            call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
        };
        let what = format!("nodeclaim {}", request.node_claim);
        let out = match call.send().await {
            Ok(out) => out,
            Err(e) => {
                let e = AwsError::api("CreateFleet", what, e);
                if e.code() == Some(TEMPLATE_NOT_FOUND) {
                    self.forget_templates(&template_names);
                    return Err(CloudError::Other(format!("{e}; {TEMPLATE_RECREATED}")));
                }
                return Err(e.into());
            }
        };
        let errors = fleet_errors(&out);
        let template_missing = errors.iter().any(|e| e.code == TEMPLATE_NOT_FOUND);
        if template_missing {
            self.forget_templates(&template_names);
        }
        let insufficient = unavailable_offerings(&errors, capacity_type, &subnet_zones);
        let launched = out.instances().iter().find_map(|i| {
            let id = i.instance_ids().first()?.clone();
            let over = i
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            Some((
                id,
                i.instance_type().map(|t| t.as_str().to_string()),
                over.and_then(|o| o.subnet_id()).map(str::to_string),
            ))
        });
        let Some((id, instance_type, subnet)) = launched else {
            return Err(match launched_nothing(&what, &errors, insufficient) {
                CloudError::Rejected(m) if template_missing => {
                    CloudError::Other(format!("{m}; {TEMPLATE_RECREATED}"))
                }
                e => e,
            });
        };
        tracing::info!(nodeclaim = %request.node_claim, instance = %id, "launched");
        let instance = match self.describe_new(&id).await? {
            Some(i) => i,
            // EC2 is eventually consistent: a just-launched instance may not be visible yet.
            // What the fleet said is enough to record the launch; the next read completes it.
            None => {
                let instance_type = instance_type.unwrap_or_default();
                Instance {
                    zone: subnet
                        .and_then(|s| subnet_zones.get(&s).cloned())
                        .unwrap_or_default(),
                    image_id: amis.get(&instance_type).cloned().unwrap_or_default(),
                    id,
                    instance_type,
                    capacity_type,
                    private_dns_name: String::new(),
                    state: InstanceState::Pending,
                    tags: instance_tags,
                    launch_time: joiner_controller::clock::Clock::now(
                        &joiner_controller::clock::SystemClock,
                    ),
                    instance_profile: profile_used.clone(),
                }
            }
        };
        Ok(Launched {
            instance,
            insufficient,
            user_data_bytes,
        })
    }

    fn forget_templates<'a>(&self, names: impl IntoIterator<Item = &'a String>) {
        for name in names {
            self.templates.forget(name);
        }
    }

    /// A just-launched instance, retried briefly while EC2 does not list it yet.
    async fn describe_new(&self, id: &str) -> Result<Option<Instance>, AwsError> {
        for attempt in 0..4u64 {
            if let Some(i) = self.clients.get_instance(id).await? {
                return Ok(Some(i));
            }
            tokio::time::sleep(Duration::from_millis(250 * (attempt + 1))).await;
        }
        Ok(None)
    }
}

/// A launch that cannot be put together: a field of the EC2NodeClass is named.
fn launch_error(node_class: &str, e: LaunchError) -> CloudError {
    match e {
        LaunchError::NoOfferings => CloudError::NoOfferings,
        e @ (LaunchError::Field { .. } | LaunchError::Label { .. }) => {
            AwsError::node_class(node_class, e.to_string()).into()
        }
    }
}

const TEMPLATE_NOT_FOUND: &str = "InvalidLaunchTemplateName.NotFoundException";
/// A missing launch template is a rejection in general, but one Joiner knew of was deleted
/// behind its back (or by its own garbage collection): forgotten, it is created again on the
/// next attempt, so that attempt is worth making soon.
const TEMPLATE_RECREATED: &str =
    "the launch template was deleted; the next attempt creates it again";

impl CloudProvider for AwsCloud {
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        self.clients.block(self.launch_async(request))
    }

    fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
        let c = &self.clients;
        Ok(c.block(c.terminate_owned(&self.cluster.name, instance_id))?)
    }

    fn reboot(&self, instance_id: &str) -> Result<(), CloudError> {
        let c = &self.clients;
        Ok(c.block(c.reboot_owned(&self.cluster.name, instance_id))?)
    }

    fn get(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        let c = &self.clients;
        Ok(c.block(c.get_instance(instance_id))?)
    }

    fn list(&self, cluster_name: &str) -> Result<Vec<Instance>, CloudError> {
        let c = &self.clients;
        Ok(c.block(c.list_instances(cluster_name))?)
    }

    fn instance_types(&self) -> Result<Vec<CloudInstanceType>, CloudError> {
        let c = &self.clients;
        Ok(c.block_read(c.cloud_instance_types(
            &self.catalog,
            &self.zones,
            &self.caches.instance_types,
        )))
    }

    fn delete_unused_launch_templates(
        &self,
        node_classes: &[EC2NodeClass],
    ) -> Result<Vec<String>, CloudError> {
        AwsCloud::delete_unused_launch_templates(self, node_classes)
    }

    fn list_instance_profiles(&self) -> Result<Vec<String>, CloudError> {
        let c = &self.clients;
        Ok(c.block(c.cluster_profiles(&self.cluster.name))?)
    }

    fn delete_instance_profile(&self, name: &str) -> Result<(), CloudError> {
        let c = &self.clients;
        Ok(c.block(c.delete_profile(&self.cluster.name, name))?)
    }

    fn resolve_node_class(&self, class: &EC2NodeClass) -> NodeClassResolution {
        let reads = ClassReads {
            cluster: &self.cluster.name,
            eks: &self.eks,
            subnets: &self.caches.subnets,
            amis: &self.caches.amis,
        };
        let c = &self.clients;
        c.block::<_, CloudError, _>(async { Ok(c.resolve_node_class(reads, class).await) })
            .unwrap_or_else(NodeClassResolution::failed)
    }
}
