//! [`AwsCloud`]: the controller's [`CloudProvider`] on EC2.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
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
    Offer,
};
use joiner_model::wellknown::{labels, tags};

use joiner_engine::catalog::{CapacityType, Catalog};
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::AmiFamily;
use joiner_model::settings::Settings;
use tokio::runtime::Handle;

use crate::ami::{Arch, DEFAULT_AMI_PARAMETER_ROOT, EksParameters, TypeFacts};
use crate::clients::Clients;
use crate::error::AwsError;
use crate::fleet::{FleetError, throttled, unavailable_offerings};
use crate::network::subnet_per_zone;
use crate::tags::ec2_tags;
use crate::template::{
    KnownTemplates, TemplateSpec, default_block_devices, metadata_with_defaults, template_name,
};
use crate::userdata::{self, NodeBootstrap};

/// The instance profile Joiner expects for an EC2NodeClass that names a `role`:
/// `<cluster>_<role>`, cut to IAM's 128 characters. Joiner does not create it: create it with
/// the role in it (`aws iam create-instance-profile` and `add-role-to-instance-profile`).
pub fn instance_profile_for_role(cluster: &str, role: &str) -> String {
    format!("{cluster}_{role}").chars().take(128).collect()
}

/// The EC2 cloud.
///
/// Its [`CloudProvider`] methods block on the tokio runtime whose handle it holds: call them
/// from a blocking thread (`tokio::task::spawn_blocking`, or a plain thread), never from an
/// async task, where blocking on the runtime panics.
pub struct AwsCloud {
    clients: Clients,
    cluster_name: String,
    zones: Vec<String>,
    /// The Kubernetes version (and where its EKS AMIs are published).
    eks: EksParameters,
    cluster_endpoint: Option<String>,
    cluster_ca_bundle: Option<String>,
    service_cidr: Option<String>,
    /// The built-in catalog: on-demand prices (moto and many partitions have no Pricing API),
    /// the types Joiner knows, and the fallback when EC2's listing fails.
    catalog: Catalog,
    /// Launch templates known to exist.
    templates: KnownTemplates,
    /// Architecture and GPU make of instance types looked up so far.
    facts: Mutex<BTreeMap<String, TypeFacts>>,
}

impl std::fmt::Debug for AwsCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCloud")
            .field("cluster_name", &self.cluster_name)
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
            cluster_name: cluster_name.to_string(),
            zones: settings.zones.clone(),
            eks: EksParameters {
                root: DEFAULT_AMI_PARAMETER_ROOT.to_string(),
                kubernetes_version,
            },
            cluster_endpoint: settings.cluster_endpoint.clone(),
            cluster_ca_bundle: None,
            service_cidr: None,
            catalog: Catalog::builtin(&settings.region, &settings.zones),
            templates: KnownTemplates::default(),
            facts: Mutex::new(BTreeMap::new()),
        })
    }

    /// The cluster CA (base64 PEM) for the node's bootstrap; without it `nodeadm` must look the
    /// cluster up itself.
    pub fn with_cluster_ca_bundle(mut self, ca: impl Into<String>) -> Self {
        self.cluster_ca_bundle = Some(ca.into());
        self
    }

    /// The cluster's service CIDR for the node's bootstrap.
    pub fn with_service_cidr(mut self, cidr: impl Into<String>) -> Self {
        self.service_cidr = Some(cidr.into());
        self
    }

    /// Where the EKS AMI parameters live in SSM ([`DEFAULT_AMI_PARAMETER_ROOT`] unless told).
    /// Tests use their own root: SSM (and moto) refuse writes under `/aws/`.
    pub fn with_ami_parameter_root(mut self, root: impl Into<String>) -> Self {
        self.eks.root = root.into().trim_end_matches('/').to_string();
        self
    }

    /// Architecture and GPU make of each type: the catalog's when it knows the type, else
    /// DescribeInstanceTypes (remembered).
    async fn type_facts(
        &self,
        names: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, TypeFacts>, AwsError> {
        let mut out = BTreeMap::new();
        let mut unknown = Vec::new();
        {
            let cache = self.facts.lock().unwrap_or_else(PoisonError::into_inner);
            for name in names {
                if let Some(f) = cache.get(name) {
                    out.insert(name.clone(), *f);
                } else if let Some(it) = self.catalog.get(name) {
                    let arch = it
                        .labels
                        .get(joiner_model::wellknown::labels::ARCH)
                        .and_then(|a| Arch::parse(a))
                        .unwrap_or(Arch::X86_64);
                    let nvidia = it
                        .gpu
                        .as_ref()
                        .is_some_and(|g| g.manufacturer.eq_ignore_ascii_case("nvidia"));
                    out.insert(name.clone(), TypeFacts { arch, nvidia });
                } else {
                    unknown.push(name.clone());
                }
            }
        }
        if unknown.is_empty() {
            return Ok(out);
        }
        let described = self
            .clients
            .ec2
            .describe_instance_types()
            .set_instance_types(Some(
                unknown
                    .iter()
                    .map(|n| Ec2InstanceType::from(n.as_str()))
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| AwsError::api("DescribeInstanceTypes", unknown.join(","), e))?;
        let mut cache = self.facts.lock().unwrap_or_else(PoisonError::into_inner);
        for info in described.instance_types() {
            let Some(name) = info.instance_type().map(|t| t.as_str().to_string()) else {
                continue;
            };
            let archs = info
                .processor_info()
                .map(|p| p.supported_architectures())
                .unwrap_or_default();
            let arch = archs
                .iter()
                .find_map(|a| Arch::parse(a.as_str()))
                .unwrap_or(Arch::X86_64);
            let nvidia = info.gpu_info().is_some_and(|g| {
                g.gpus().iter().any(|d| {
                    d.manufacturer()
                        .is_some_and(|m| m.eq_ignore_ascii_case("nvidia"))
                })
            });
            let facts = TypeFacts { arch, nvidia };
            cache.insert(name.clone(), facts);
            out.insert(name, facts);
        }
        Ok(out)
    }

    /// The live instance a launch with this token already started, if any.
    async fn launched_with(&self, token: &str) -> Result<Option<Instance>, AwsError> {
        let filter = aws_sdk_ec2::types::Filter::builder()
            .name(format!("tag:{}", tags::LAUNCH_TOKEN))
            .values(token)
            .build();
        Ok(self
            .clients
            .live_instances(&format!("launch token {token}"), vec![filter])
            .await?
            .into_iter()
            .min_by(|a, b| (a.launch_time, &a.id).cmp(&(b.launch_time, &b.id))))
    }

    fn bootstrap(&self, request: &LaunchRequest, class: &EC2NodeClass) -> NodeBootstrap {
        NodeBootstrap {
            cluster_name: self.cluster_name.clone(),
            endpoint: self.cluster_endpoint.clone(),
            ca_bundle: self.cluster_ca_bundle.clone(),
            service_cidr: self.service_cidr.clone(),
            labels: kubelet_labels(&request.labels),
            taints: request
                .taints
                .iter()
                .chain(&request.startup_taints)
                .cloned()
                .collect(),
            kubelet: class.spec.kubelet.clone(),
        }
    }

    async fn launch_async(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        if let Some(instance) = self.launched_with(&request.client_token).await? {
            return Ok(Launched {
                instance,
                insufficient: Vec::new(),
            });
        }
        let node_class = request.node_class.as_str();
        let class = request
            .node_class_spec
            .clone()
            .ok_or_else(|| AwsError::node_class(node_class, "not found in the cluster"))?
            .into_v1();
        let family = family_of(node_class, &class)?;
        // One capacity type per fleet: that of the cheapest offer. Spot offers that fail come
        // back as insufficient and the next step moves on to on-demand.
        let Some(capacity_type) = request
            .offers
            .iter()
            .map(|o| o.offering.capacity_type)
            .find(|c| *c != CapacityType::Reserved)
        else {
            return Err(CloudError::NoOfferings);
        };
        let offers: Vec<&Offer> = request
            .offers
            .iter()
            .filter(|o| o.offering.capacity_type == capacity_type)
            .collect();
        let spec = &class.spec;
        let subnets = self
            .clients
            .subnets(node_class, &spec.subnet_selector_terms)
            .await?;
        let per_zone = subnet_per_zone(&subnets);
        let subnet_zones: BTreeMap<String, String> = subnets
            .iter()
            .map(|s| (s.id.clone(), s.zone.clone()))
            .collect();
        let security_groups = self
            .clients
            .security_groups(node_class, &spec.security_group_selector_terms)
            .await?;
        let type_names: BTreeSet<String> = offers
            .iter()
            .map(|o| o.offering.instance_type.clone())
            .collect();
        let facts = self.type_facts(&type_names).await?;
        let amis = self
            .clients
            .resolve_amis(
                &self.eks,
                node_class,
                family,
                &spec.ami_selector_terms,
                &facts,
            )
            .await?;
        let bootstrap = self.bootstrap(request, &class);
        let user_data = match family {
            AmiFamily::AL2023 => userdata::al2023(&bootstrap, spec.user_data.as_deref()),
            AmiFamily::AL2 => userdata::al2(&bootstrap, spec.user_data.as_deref()),
            // A custom AMI boots itself: its userData goes as written.
            _ => Ok(spec.user_data.clone().unwrap_or_default()),
        }
        .map_err(|e| AwsError::node_class(node_class, format!("spec.userData: {e}")))?;
        let instance_profile = spec.instance_profile.clone().or_else(|| {
            spec.role
                .as_deref()
                .map(|r| instance_profile_for_role(&self.cluster_name, r))
        });
        let mut template_tags = BTreeMap::new();
        template_tags.insert(
            joiner_model::wellknown::tags::cluster(&self.cluster_name),
            "owned".to_string(),
        );
        template_tags.insert(tags::NODECLASS.to_string(), node_class.to_string());

        // Group the offers by launch template, keeping the price order as priority.
        let mut templates: BTreeMap<
            String,
            (TemplateSpec, Vec<FleetLaunchTemplateOverridesRequest>),
        > = BTreeMap::new();
        for (priority, offer) in offers.iter().enumerate() {
            let key = &offer.offering;
            let Some(ami) = amis.get(&key.instance_type) else {
                tracing::warn!(offering = %key, node_class, "no AMI fits this instance type; skipped");
                continue;
            };
            let Some(subnet) = per_zone.get(&key.zone) else {
                tracing::debug!(offering = %key, node_class, "no selected subnet in this zone; skipped");
                continue;
            };
            let efa = request
                .efa_interfaces
                .get(&key.instance_type)
                .copied()
                .unwrap_or(0);
            let tspec = TemplateSpec {
                image_id: ami.clone(),
                user_data: user_data.clone(),
                block_devices: if spec.block_device_mappings.is_empty() {
                    default_block_devices()
                } else {
                    spec.block_device_mappings.clone()
                },
                metadata: metadata_with_defaults(spec.metadata_options.as_ref()),
                instance_profile: instance_profile.clone(),
                security_groups: security_groups.clone(),
                efa_interfaces: efa,
                associate_public_ip: spec.associate_public_ip_address,
                detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
                tags: template_tags.clone(),
            };
            let name = template_name(&self.cluster_name, &tspec);
            let over = FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(Ec2InstanceType::from(key.instance_type.as_str()))
                .subnet_id(&subnet.id)
                .availability_zone(&key.zone)
                .priority(priority as f64)
                .build();
            templates
                .entry(name)
                .or_insert_with(|| (tspec, Vec::new()))
                .1
                .push(over);
        }
        if templates.is_empty() {
            tracing::warn!(nodeclaim = %request.node_claim, node_class, "no offering has both an AMI and a subnet");
            return Err(CloudError::NoOfferings);
        }
        for (name, (tspec, _)) in &templates {
            self.clients
                .ensure_template(&self.templates, name, tspec)
                .await?;
        }

        let mut instance_tags = spec.tags.clone();
        instance_tags.extend(request.tags.clone());
        instance_tags.insert(tags::LAUNCH_TOKEN.to_string(), request.client_token.clone());
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
        let configs = templates
            .iter()
            .map(|(name, (_, overrides))| {
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(name)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides.clone()))
                    .build()
            })
            .collect();
        let target = TargetCapacitySpecificationRequest::builder()
            .total_target_capacity(1)
            .default_target_capacity_type(match capacity_type {
                CapacityType::Spot => DefaultTargetCapacityType::Spot,
                _ => DefaultTargetCapacityType::OnDemand,
            })
            .build();
        let mut call = self
            .clients
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .target_capacity_specification(target)
            .set_launch_template_configs(Some(configs))
            .set_tag_specifications(Some(tag_specs))
            .client_token(&request.client_token);
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
        let out = call.send().await.map_err(|e| {
            AwsError::api(
                "CreateFleet",
                format!("nodeclaim {}", request.node_claim),
                e,
            )
        })?;
        let errors: Vec<FleetError> = out
            .errors()
            .iter()
            .map(|e| {
                let over = e
                    .launch_template_and_overrides()
                    .and_then(|l| l.overrides());
                FleetError {
                    code: e.error_code().unwrap_or_default().to_string(),
                    message: e.error_message().unwrap_or_default().to_string(),
                    instance_type: over
                        .and_then(|o| o.instance_type())
                        .map(|t| t.as_str().to_string()),
                    subnet_id: over.and_then(|o| o.subnet_id()).map(str::to_string),
                    zone: over.and_then(|o| o.availability_zone()).map(str::to_string),
                }
            })
            .collect();
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
            if !insufficient.is_empty() {
                return Err(CloudError::InsufficientCapacity(insufficient));
            }
            if throttled(&errors) {
                return Err(CloudError::Throttled);
            }
            let reasons: Vec<String> = errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.message))
                .collect();
            return Err(CloudError::Other(format!(
                "CreateFleet (nodeclaim {}) launched nothing: {}",
                request.node_claim,
                reasons.join("; ")
            )));
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
                }
            }
        };
        Ok(Launched {
            instance,
            insufficient,
        })
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

/// The AMI family: the alias's, else `amiFamily`. Bottlerocket and Windows are not launched.
fn family_of(node_class: &str, class: &EC2NodeClass) -> Result<AmiFamily, AwsError> {
    let from_alias = class
        .spec
        .ami_selector_terms
        .iter()
        .find_map(|t| t.alias.as_deref())
        .map(|a| {
            AmiFamily::from_alias(a)
                .ok_or_else(|| AwsError::node_class(node_class, format!("unknown AMI alias {a:?}")))
        })
        .transpose()?;
    match from_alias.or(class.spec.ami_family) {
        Some(f @ (AmiFamily::AL2023 | AmiFamily::AL2 | AmiFamily::Custom)) => Ok(f),
        Some(other) => Err(AwsError::node_class(
            node_class,
            format!("AMI family {other:?} is not supported by Joiner's AWS provider"),
        )),
        None => Err(AwsError::node_class(
            node_class,
            "spec.amiFamily is required when no amiSelectorTerms alias names the family",
        )),
    }
}

/// The NodeClaim labels a kubelet may set on its own Node: none in the `kubernetes.io` and
/// `k8s.io` domains except `node.kubernetes.io` and `kubelet.kubernetes.io` (the NodeRestriction
/// admission plugin refuses the others), and none that differ between the offerings one
/// launch template serves (instance type, zone, capacity type) or that the controller sets when
/// the Node registers.
pub(crate) fn kubelet_labels(all: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const CONTROLLER_SET: &[&str] = &[
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::REGISTERED,
        labels::INITIALIZED,
        labels::NODECLAIM,
        labels::NEED,
    ];
    all.iter()
        .filter(|(k, _)| !CONTROLLER_SET.contains(&k.as_str()))
        .filter(|(k, _)| {
            let Some((domain, _)) = k.split_once('/') else {
                return true;
            };
            let restricted = ["kubernetes.io", "k8s.io"]
                .iter()
                .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            let allowed = ["node.kubernetes.io", "kubelet.kubernetes.io"]
                .iter()
                .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
            !restricted || allowed
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl CloudProvider for AwsCloud {
    fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        self.clients.block(self.launch_async(request))
    }

    fn terminate(&self, instance_id: &str) -> Result<(), CloudError> {
        let c = &self.clients;
        Ok(c.block(c.terminate_instance(instance_id))?)
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
        Ok(c.block(c.cloud_instance_types(&self.catalog, &self.zones)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelets_register_only_labels_they_may_set_and_that_hold_for_every_offer() {
        let all = BTreeMap::from(
            [
                ("karpenter.sh/nodepool", "gpu"),
                ("team", "ml"),
                ("node.kubernetes.io/role", "gpu"),
                ("node.kubernetes.io/instance-type", "g4dn.xlarge"),
                ("topology.kubernetes.io/zone", "us-east-1a"),
                ("karpenter.sh/capacity-type", "spot"),
                ("kubernetes.io/arch", "amd64"),
                ("example.k8s.io/x", "y"),
                ("joiner.dev/need", "abc"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let kept = kubelet_labels(&all);
        let kept: Vec<&str> = kept.keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            ["karpenter.sh/nodepool", "node.kubernetes.io/role", "team"]
        );
    }

    #[test]
    fn roles_map_to_a_predictable_instance_profile() {
        assert_eq!(
            instance_profile_for_role("lab", "KarpenterNodeRole"),
            "lab_KarpenterNodeRole"
        );
        assert_eq!(instance_profile_for_role("c", &"r".repeat(200)).len(), 128);
    }
}
