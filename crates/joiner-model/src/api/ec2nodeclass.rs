//! The AWS provider's EC2NodeClass (`karpenter.k8s.aws/v1` and `v1beta1`) in one shape: the two
//! versions differ in few fields, and [`EC2NodeClass::into_v1`] applies Karpenter's
//! conversion for the one that matters (an AMI family with no AMI selector becomes an alias).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::{self, rule};

pub use super::nodeclass_status::{
    Ami, CapacityReservation, EC2NodeClassStatus, Readiness, SecurityGroup, Subnet,
};
use super::{FieldError, KubeletConfiguration};
use crate::Quantity;

pub const API_VERSION_V1: &str = "karpenter.k8s.aws/v1";
pub const API_VERSION_V1BETA1: &str = "karpenter.k8s.aws/v1beta1";

/// Annotation on an EC2NodeClass: how many shares of each GPU the NVIDIA DRA driver publishes
/// as consumable capacity on its nodes.
pub const NVIDIA_CONSUMABLE_CAPACITY_ANNOTATION: &str =
    "karpenter.k8s.aws/nvidia-consumable-capacity";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClass {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: EC2NodeClassSpec,
    /// What the class resolved to; absent in manifests (and classes nobody resolved yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EC2NodeClassStatus>,
}

/// How the AWS provider launches a NodePool's instances. Its schema is the EC2NodeClass CRD's
/// (see [`crate::api::crds`]); `EC2NodeClassResource` is the root kube's derive generates for
/// it, used only for the CRD: Joiner reads [`EC2NodeClass`], which keeps the API version it was
/// given so that v1beta1 input can be converted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema, CustomResource)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    root = "EC2NodeClassResource",
    status = "EC2NodeClassStatus",
    category = "karpenter",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(
    transform = spec_schema,
    extend("x-kubernetes-validations" = [
        rule(
            "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
            "must specify exactly one of ['role', 'instanceProfile']"
        ),
        alias_family_rule("al2", "AL2", "an"),
        alias_family_rule("al2023", "AL2023", "an"),
        alias_family_rule("bottlerocket", "Bottlerocket", "a"),
        alias_family_rule("windows2019", "Windows2019", "a"),
        alias_family_rule("windows2022", "Windows2022", "a"),
        alias_family_rule("windows2025", "Windows2025", "a"),
        rule(
            "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
            "must specify amiFamily if amiSelectorTerms does not contain an alias"
        ),
    ])
)]
pub struct EC2NodeClassSpec {
    /// The AMI family, for bootstrapping; required in v1beta1, and in v1 unless an AMI alias
    /// names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"]))]
    pub ami_family: Option<AmiFamily>,
    /// Which AMIs nodes boot: an alias (`al2023@latest`) alone, or ids, names, tags or SSM
    /// parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 30,
        "minItems" = 1,
        "x-kubernetes-validations" = [
            rule(
                "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
                "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"
            ),
            rule(
                "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
            ),
            rule(
                "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
                "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"
            ),
            rule(
                "!(self.exists(x, has(x.alias)) && self.size() != 1)",
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
            ),
        ]
    ))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// The IAM role Karpenter makes an instance profile for; exclusive with `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [rule("self != ''", "role cannot be empty")]))]
    pub role: Option<String>,
    /// An existing instance profile to launch with; exclusive with `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [rule("self != ''", "instanceProfile cannot be empty")]))]
    pub instance_profile: Option<String>,
    /// Which subnets nodes launch in: by tags or id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "subnet_selector_terms")]
    pub subnet_selector_terms: Vec<SelectorTerm>,
    /// Which security groups nodes get: by tags, id or name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "security_group_selector_terms")]
    pub security_group_selector_terms: Vec<SelectorTerm>,
    /// Which capacity reservations nodes may launch into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 30,
        "x-kubernetes-validations" = [
            rule(
                "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
                "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"
            ),
            rule(
                "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
                "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"
            ),
        ]
    ))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// The volumes nodes get.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 50,
        "x-kubernetes-validations" = [rule(
            "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
            "must have only one blockDeviceMappings with rootVolume"
        )]
    ))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// Tags put on instances, volumes and launch templates (Karpenter's own are restricted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        rule("self.all(k, k != '')", "empty tag keys aren't supported"),
        rule("self.all(k, k !='eks:eks-cluster-name')", "tag contains a restricted tag matching eks:eks-cluster-name"),
        rule("self.all(k, !k.startsWith('kubernetes.io/cluster') )", "tag contains a restricted tag matching kubernetes.io/cluster/"),
        rule("self.all(k, k != 'karpenter.sh/nodepool')", "tag contains a restricted tag matching karpenter.sh/nodepool"),
        rule("self.all(k, k !='karpenter.sh/nodeclaim')", "tag contains a restricted tag matching karpenter.sh/nodeclaim"),
        rule("self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')", "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"),
    ]))]
    pub tags: BTreeMap<String, String>,
    /// User data merged with what the AMI family's bootstrap needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// Kubelet settings of the class's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// The instance metadata service settings of the class's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"}))]
    pub metadata_options: Option<MetadataOptions>,
    /// Whether EC2 detailed monitoring is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Whether nodes get a public IP address (the subnet decides when left out).
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// `RAID0`: local NVMe instance store becomes the node's ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// The launch context (an ODCR or Outposts context ARN), sent as CreateFleet's `Context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Connection tracking timeouts of the nodes' interfaces. Only Nitro instance types can
    /// take them, so the class's pools offer only those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// CPU options of the nodes. `nestedVirtualization: disabled` is applied; `enabled` is
    /// refused ([`EC2NodeClass::validate`]): Joiner has no data on which instance types
    /// support it, and Karpenter offers only those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
    /// IPv4 prefixes per interface (prefix delegation), on each interface that carries
    /// addresses. As in Karpenter, it does not change how many pods a node holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0))]
    pub ip_prefix_count: Option<i32>,
    /// The nodes' network interfaces, in place of the layout Joiner would choose (one EFA
    /// interface per card for pods that request EFAs): the class's pools offer only the types
    /// whose cards take them, an EFA-only interface counts as one `vpc.amazonaws.com/efa`, and
    /// one on the default card takes that card's addresses from pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 150,
        "x-kubernetes-validations" = [
            rule(
                "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')",
                "networkInterfaces must include a primary interface with interfaceType='interface'"
            ),
            rule(
                "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
                "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card"
            ),
        ]
    ))]
    pub network_interfaces: Vec<NetworkInterface>,
    /// The placement group nodes launch into. Not applied by Joiner yet: refused like
    /// `networkInterfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
}

/// Karpenter requires the AMI, subnet and security group selectors of a stored class; Joiner's
/// reader defaults them (v1beta1 classes may leave the AMI selector out), so the schema says so
/// here.
fn spec_schema(schema: &mut Schema) {
    schema::require(
        schema,
        &[
            "amiSelectorTerms",
            "securityGroupSelectorTerms",
            "subnetSelectorTerms",
        ],
    );
}

/// The rule that an alias's family and `amiFamily` agree when both are set.
fn alias_family_rule(alias: &str, family: &str, article: &str) -> serde_json::Value {
    rule(
        &format!(
            "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"
        ),
        &format!(
            "if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias"
        ),
    )
}

/// The rule on selector tags: no empty keys or values.
fn selector_tag_rule() -> serde_json::Value {
    rule(
        "self.all(k, k != '' && self[k] != '')",
        "empty tag keys or values aren't supported",
    )
}

/// Selector tags: at most 20, none empty.
fn selector_tags() -> serde_json::Value {
    json!({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "maxProperties": 20,
        "x-kubernetes-validations": [selector_tag_rule()],
    })
}

/// Subnet selector terms: tags or an id (the shared [`SelectorTerm`] also has the security
/// groups' `name`, which subnets do not).
fn subnet_selector_terms(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 30,
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "subnet-[0-9a-z]+"},
                "tags": selector_tags(),
            },
        },
        "x-kubernetes-validations": [
            rule("self.size() != 0", "subnetSelectorTerms cannot be empty"),
            rule("self.all(x, has(x.tags) || has(x.id))", "expected at least one, got none, ['tags', 'id']"),
            rule("!self.all(x, has(x.id) && has(x.tags))", "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"),
        ],
    })
}

/// Security group selector terms: tags, an id or a name.
fn security_group_selector_terms(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 30,
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "sg-[0-9a-z]+"},
                "name": {"type": "string"},
                "tags": selector_tags(),
            },
        },
        "x-kubernetes-validations": [
            rule("self.size() != 0", "securityGroupSelectorTerms cannot be empty"),
            rule("self.all(x, has(x.tags) || has(x.id) || has(x.name))", "expected at least one, got none, ['tags', 'id', 'name']"),
            rule("!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))", "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"),
            rule("!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))", "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"),
        ],
    })
}

/// EBS volume sizes EC2 accepts, in the units Karpenter allows.
fn volume_size(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$",
    })
}

/// Connection tracking timeouts, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [rule(
    "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
    "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"
)]))]
pub struct ConnectionTracking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 60, "maximum" = 432000))]
    pub tcp_established_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 60, "maximum" = 180))]
    pub udp_stream_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 30, "maximum" = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options of an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub nested_virtualization: Option<String>,
}

/// The rules Karpenter's CRD gives `networkInterfaces`: a primary interface (card 0, device 0,
/// `interface`), no two on one card and device, at most one EFA-only per card.
fn validate_interfaces(interfaces: &[NetworkInterface]) -> Result<(), FieldError> {
    if interfaces.is_empty() {
        return Ok(());
    }
    if !interfaces.iter().any(|i| {
        i.network_card_index == 0 && i.device_index == 0 && i.interface_type == "interface"
    }) {
        return Err(FieldError::new(
            "spec.networkInterfaces",
            "must include a primary interface (networkCardIndex 0, deviceIndex 0) with interfaceType 'interface'",
        ));
    }
    for (n, i) in interfaces.iter().enumerate() {
        let field = format!("spec.networkInterfaces[{n}]");
        if !matches!(i.interface_type.as_str(), "interface" | "efa-only") {
            return Err(FieldError::new(
                format!("{field}.interfaceType"),
                format!("{:?} is not one of interface, efa-only", i.interface_type),
            ));
        }
        if i.network_card_index < 0 || i.device_index < 0 {
            return Err(FieldError::new(field, "indices must not be negative"));
        }
        let earlier = &interfaces[..n];
        if earlier.iter().any(|e| {
            e.network_card_index == i.network_card_index && e.device_index == i.device_index
        }) {
            return Err(FieldError::new(
                field,
                format!(
                    "networkCardIndex {} and deviceIndex {} are given twice",
                    i.network_card_index, i.device_index
                ),
            ));
        }
        if i.is_efa_only()
            && earlier
                .iter()
                .any(|e| e.network_card_index == i.network_card_index && e.is_efa_only())
        {
            return Err(FieldError::new(
                field,
                format!(
                    "network card {} has more than one efa-only interface",
                    i.network_card_index
                ),
            ));
        }
    }
    Ok(())
}

/// One network interface of an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    #[schemars(extend("minimum" = 0))]
    pub device_index: i32,
    /// `interface` or `efa-only`.
    #[schemars(extend("enum" = ["interface", "efa-only"]))]
    pub interface_type: String,
    #[schemars(extend("minimum" = 0))]
    pub network_card_index: i32,
}

impl NetworkInterface {
    /// An Elastic Fabric Adapter without IP networking (`efa-only`).
    pub fn is_efa_only(&self) -> bool {
        self.interface_type == "efa-only"
    }
}

/// A placement group, by name or id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    rule("has(self.name) || has(self.id)", "expected at least one, got none, ['name', 'id']"),
    rule("!(has(self.name) && has(self.id))", "'name' and 'id' are mutually exclusive"),
]))]
pub struct PlacementGroupSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minLength" = 1))]
    pub name: Option<String>,
}

impl PlacementGroupSelector {
    /// The ID or name it selects by, as messages name the group.
    pub fn named(&self) -> &str {
        self.id
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    /// Karpenter v1.14's newest Windows family (`windows2025@latest`).
    Windows2025,
    Custom,
}

impl AmiFamily {
    /// The family an AMI alias (`al2023@latest`) names.
    pub fn from_alias(alias: &str) -> Option<AmiFamily> {
        let family = alias.split('@').next().unwrap_or(alias);
        match family.to_ascii_lowercase().as_str() {
            "al2" => Some(AmiFamily::AL2),
            "al2023" => Some(AmiFamily::AL2023),
            "bottlerocket" => Some(AmiFamily::Bottlerocket),
            "windows2019" => Some(AmiFamily::Windows2019),
            "windows2022" => Some(AmiFamily::Windows2022),
            "windows2025" => Some(AmiFamily::Windows2025),
            _ => None,
        }
    }

    /// The OS the family's nodes run: the value of their `kubernetes.io/os` label.
    pub fn os(self) -> &'static str {
        if self.windows_build().is_some() {
            "windows"
        } else {
            "linux"
        }
    }

    /// For a Windows family, the Windows build its nodes report (their
    /// `node.kubernetes.io/windows-build` label, which Windows pods select on).
    pub fn windows_build(self) -> Option<&'static str> {
        match self {
            AmiFamily::Windows2019 => Some("10.0.17763"),
            AmiFamily::Windows2022 => Some("10.0.20348"),
            AmiFamily::Windows2025 => Some("10.0.26100"),
            _ => None,
        }
    }

    fn alias_name(self) -> Option<&'static str> {
        match self {
            AmiFamily::AL2 => Some("al2"),
            AmiFamily::AL2023 => Some("al2023"),
            AmiFamily::Bottlerocket => Some("bottlerocket"),
            AmiFamily::Windows2019 => Some("windows2019"),
            AmiFamily::Windows2022 => Some("windows2022"),
            AmiFamily::Windows2025 => Some("windows2025"),
            AmiFamily::Custom => None,
        }
    }
}

/// One way to select AMIs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest` (v1 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxLength" = 30,
        "x-kubernetes-validations" = [
            rule("self.matches('^[a-zA-Z0-9]+@.+$')", "'alias' is improperly formatted, must match the format 'family@version'"),
            rule(
                "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
                "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"
            ),
            rule(
                "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true",
                "windows families may only specify version 'latest'"
            ),
        ]
    ))]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("ami-[0-9a-z]+"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 20,
        "x-kubernetes-validations" = [selector_tag_rule()]
    ))]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// A subnet or security group selector: by tags, id or (security groups) name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One way to select capacity reservations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 20,
        "x-kubernetes-validations" = [selector_tag_rule()]
    ))]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// `open` or `targeted`: select reservations by how instances match them (EC2's
    /// `instance-match-criteria` filter).
    #[serde(
        default,
        rename = "instanceMatchCriteria",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: Option<String>,
}

/// A volume of the class's nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The volume that holds the node's root filesystem, and so its ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
}

/// An EBS volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    rule("has(self.snapshotID) || has(self.volumeSize)", "snapshotID or volumeSize must be defined"),
    rule(
        "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
        "snapshotID must be set when volumeInitializationRate is set"
    ),
]))]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "volume_size")]
    pub volume_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]))]
    pub volume_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int32", "minimum" = 100, "maximum" = 300))]
    pub volume_initialization_rate: Option<i64>,
}

/// The instance metadata service settings of an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "enabled", "enum" = ["enabled", "disabled"]))]
    pub http_endpoint: Option<String>,
    #[serde(
        default,
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = "disabled", "enum" = ["enabled", "disabled"]))]
    pub http_protocol_ipv6: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1, "minimum" = 1, "maximum" = 64))]
    pub http_put_response_hop_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "required", "enum" = ["required", "optional"]))]
    pub http_tokens: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    RAID0,
}

impl EC2NodeClass {
    /// Applies Karpenter's v1beta1 -> v1 conversion: a v1beta1 class that names a standard AMI
    /// family and no AMI selector used that family's latest AMI, which v1 spells as an alias.
    pub fn into_v1(mut self) -> EC2NodeClass {
        if self.spec.ami_selector_terms.is_empty()
            && let Some(name) = self.spec.ami_family.and_then(AmiFamily::alias_name)
        {
            self.spec.ami_selector_terms = vec![AmiSelectorTerm {
                alias: Some(format!("{name}@latest")),
                ..AmiSelectorTerm::default()
            }];
        }
        self.api_version = API_VERSION_V1.to_string();
        self
    }

    /// The AMI family: the one named, else the one an alias implies.
    pub fn ami_family(&self) -> Option<AmiFamily> {
        self.spec.ami_family.or_else(|| {
            self.spec
                .ami_selector_terms
                .iter()
                .find_map(|t| t.alias.as_deref().and_then(AmiFamily::from_alias))
        })
    }

    /// Whether nodes may be launched from the class, as its `Ready` condition says. A class
    /// whose tags would defeat the ownership check ([`EC2NodeClass::restricted_tag`]) is not
    /// ready whatever its status says.
    pub fn readiness(&self) -> Readiness {
        if let Some(why) = self.restricted_tag() {
            return Readiness::NotReady(why);
        }
        self.status
            .as_ref()
            .map_or(Readiness::Unresolved, EC2NodeClassStatus::readiness)
    }

    /// Why the class's tags cannot be used, naming the first tag that would make its instances
    /// unprovable as Joiner's (see [`crate::wellknown::tags::defeats_ownership`]).
    pub fn restricted_tag(&self) -> Option<String> {
        let key = self
            .spec
            .tags
            .keys()
            .find(|k| crate::wellknown::tags::defeats_ownership(k))?;
        Some(format!(
            "spec.tags: tag {key:?} is restricted: Joiner tags its instances with it to prove \
             they are its own (or it marks another's instances), so instances launched with it \
             could never be told apart and terminated safely; remove it from the EC2NodeClass"
        ))
    }

    /// An annotation's value, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// Checks what the CRD rejects and that changes a node's shape: alias syntax, the family
    /// being known, and volume sizes.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (i, t) in self.spec.ami_selector_terms.iter().enumerate() {
            if let Some(alias) = &t.alias {
                let field = format!("spec.amiSelectorTerms[{i}].alias");
                if AmiFamily::from_alias(alias).is_none() || !alias.contains('@') {
                    return Err(FieldError::new(
                        field,
                        format!(
                            "{alias:?} is not <family>@<version> with family al2, al2023, bottlerocket, windows2019, windows2022 or windows2025"
                        ),
                    ));
                }
                if self.spec.ami_selector_terms.len() > 1 {
                    return Err(FieldError::new(
                        field,
                        "an alias cannot be combined with other AMI selector terms",
                    ));
                }
            }
        }
        for (i, m) in self.spec.block_device_mappings.iter().enumerate() {
            if let Some(size) = m.ebs.as_ref().and_then(|e| e.volume_size)
                && (size.is_negative() || size.is_zero())
            {
                return Err(FieldError::new(
                    format!("spec.blockDeviceMappings[{i}].ebs.volumeSize"),
                    "must be positive",
                ));
            }
        }
        if self
            .spec
            .block_device_mappings
            .iter()
            .filter(|m| m.root_volume == Some(true))
            .count()
            > 1
        {
            return Err(FieldError::new(
                "spec.blockDeviceMappings",
                "at most one mapping may be the root volume",
            ));
        }
        validate_interfaces(&self.spec.network_interfaces)
    }

    /// Whether `cpuOptions.nestedVirtualization` is `enabled`: only types whose processors
    /// support it are offered.
    pub fn nested_virtualization(&self) -> bool {
        self.spec
            .cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization.as_deref())
            == Some("enabled")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_yaml(yaml: &str) -> EC2NodeClass {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    /// A v1 class booting `alias`, with `extra` lines appended to its spec.
    fn v1_class(alias: &str, extra: &str) -> EC2NodeClass {
        from_yaml(&format!(
            r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: gpu}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: {alias}}}]
  subnetSelectorTerms: [{{id: subnet-1}}]
  securityGroupSelectorTerms: [{{id: sg-1}}]
{extra}
"#
        ))
    }

    #[test]
    fn every_launch_field_of_karpenter_reads() {
        for extra in [
            "",
            "  placementGroupSelector: {name: training}",
            "  placementGroupSelector: {id: pg-0123456789abcdef0}",
            "  ipPrefixCount: 1",
            "  connectionTracking: {tcpEstablishedTimeout: 3600}",
            "  cpuOptions: {nestedVirtualization: disabled}",
            "  cpuOptions: {nestedVirtualization: enabled}",
            "  context: arn:aws:outposts:us-east-1:012345678901:outpost/op-0abc",
            "  capacityReservationSelectorTerms: [{instanceMatchCriteria: open}]",
            "  networkInterfaces: [{deviceIndex: 0, networkCardIndex: 0, interfaceType: interface}, {deviceIndex: 0, networkCardIndex: 1, interfaceType: efa-only}]",
        ] {
            v1_class("al2023@latest", extra).validate().unwrap();
        }
    }

    /// `networkInterfaces` as Karpenter's CRD rules take it.
    #[test]
    fn network_interfaces_follow_the_crd_rules() {
        let interfaces =
            |list: &str| v1_class("al2023@latest", &format!("  networkInterfaces: [{list}]"));
        let primary = "{deviceIndex: 0, networkCardIndex: 0, interfaceType: interface}";
        for (list, field, says) in [
            (
                "{deviceIndex: 0, networkCardIndex: 0, interfaceType: efa-only}".to_string(),
                "spec.networkInterfaces",
                "primary interface",
            ),
            (
                format!("{primary}, {primary}"),
                "spec.networkInterfaces[1]",
                "given twice",
            ),
            (
                format!(
                    "{primary}, {{deviceIndex: 1, networkCardIndex: 1, interfaceType: efa-only}}, {{deviceIndex: 2, networkCardIndex: 1, interfaceType: efa-only}}"
                ),
                "spec.networkInterfaces[2]",
                "more than one efa-only",
            ),
        ] {
            let err = interfaces(&list).validate().unwrap_err();
            assert_eq!(err.field, field, "{list}");
            assert!(err.message.contains(says), "{err}");
        }
    }

    /// Karpenter v1.14's `windows2025@latest` alias names the Windows 2025 family.
    #[test]
    fn the_windows2025_alias_reads() {
        let class = v1_class("windows2025@latest", "");
        class.validate().unwrap();
        assert_eq!(class.ami_family(), Some(AmiFamily::Windows2025));
    }

    #[test]
    fn kubelet_fields_read_under_karpenters_names() {
        let class = v1_class(
            "al2023@latest",
            "  kubelet:
    clusterDNS: [10.100.0.10]
    cpuCFSQuota: false
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80",
        );
        let kubelet = class.spec.kubelet.expect("kubelet");
        assert_eq!(kubelet.cluster_dns, Some(vec!["10.100.0.10".to_string()]));
        assert_eq!(kubelet.cpu_cfs_quota, Some(false));
        assert_eq!(kubelet.image_gc_high_threshold_percent, Some(85));
        assert_eq!(kubelet.image_gc_low_threshold_percent, Some(80));
    }

    #[test]
    fn reads_v1beta1_and_converts_family_to_alias() {
        let nc = from_yaml(
            r#"
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: g4-nodeclass}
spec:
  amiFamily: AL2
  role: KarpenterNodeRole
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: lab}}]
  blockDeviceMappings:
  - deviceName: /dev/xvda
    ebs: {volumeSize: 100Gi, volumeType: gp3, iops: 10000, encrypted: true, deleteOnTermination: true, throughput: 125}
  tags: {Name: Learninglab}
"#,
        )
        .into_v1();
        nc.validate().unwrap();
        assert_eq!(nc.api_version, API_VERSION_V1);
        assert_eq!(
            nc.spec.ami_selector_terms[0].alias.as_deref(),
            Some("al2@latest")
        );
        assert_eq!(nc.ami_family(), Some(AmiFamily::AL2));
        let ebs = nc.spec.block_device_mappings[0].ebs.as_ref().unwrap();
        assert_eq!(ebs.volume_size, Some(Quantity::parse("100Gi").unwrap()));
        assert_eq!(ebs.iops, Some(10000));
    }

    #[test]
    fn v1_alias_names_the_family_and_annotations_are_kept() {
        let nc = from_yaml(
            r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu-dra
  annotations: {karpenter.k8s.aws/nvidia-consumable-capacity: "4"}
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [{alias: al2023@latest}]
  kubelet: {maxPods: 110}
  associatePublicIPAddress: false
  metadataOptions: {httpProtocolIPv6: disabled, httpTokens: required}
"#,
        );
        nc.validate().unwrap();
        assert_eq!(nc.ami_family(), Some(AmiFamily::AL2023));
        assert_eq!(
            nc.annotation(NVIDIA_CONSUMABLE_CAPACITY_ANNOTATION),
            Some("4")
        );
        assert_eq!(nc.spec.kubelet.and_then(|k| k.max_pods), Some(110));
        assert_eq!(nc.spec.associate_public_ip_address, Some(false));
    }

    #[test]
    fn rejects_bad_alias() {
        let nc = from_yaml(
            "{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: x}, spec: {amiSelectorTerms: [{alias: ubuntu@latest}]}}",
        );
        assert_eq!(
            nc.validate().unwrap_err().field,
            "spec.amiSelectorTerms[0].alias"
        );
    }
}
