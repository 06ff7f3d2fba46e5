//! One read of a cluster, for `joiner plan --kubeconfig`: every kind the controller watches,
//! listed once and page by page, with nothing written.
//!
//! The objects come back as JSON with their `apiVersion` and `kind` set (a list's items carry
//! neither), so the caller reads them through the same parser as files: the same conversions
//! (older DRA versions), the same warnings naming each object. A kind the API server refuses
//! (403: RBAC) or does not serve (404: a CRD not installed, DRA switched off) is named in
//! [`Listing::unread`] and the rest is read; anything else (an unreachable server, expired
//! credentials) fails the whole read, since a plan over a half-read cluster would mislead.

use std::path::Path;
use std::time::Duration;

use joiner_model::api::capacitybuffer::CapacityBuffer;
use joiner_model::api::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use joiner_model::kinds::{KINDS, Kind, Live};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::error::KubeError;
use crate::options::StoreOptions;
use crate::typed::Typed;

/// Items asked for per page. The API server may answer fewer, with a continue token.
const PAGE_SIZE: u32 = 500;

/// How often one kind's list starts again after its continue token expired (410 Gone: the
/// server compacted the snapshot the pages were read from).
const RESTARTS: usize = 3;

/// How long connecting to the API server, and each answer, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What one read of the cluster found.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every object read, kind by kind in the table's order, as the server listed them.
    pub objects: Vec<Value>,
    /// The kinds that could not be read, and why.
    pub unread: Vec<Unread>,
}

/// A kind Joiner reads that this read could not list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    pub kind: &'static str,
    pub why: UnreadWhy,
}

/// Why a kind could not be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnreadWhy {
    /// The server refused the list (403): the user may not list the kind. The server's message.
    Forbidden(String),
    /// The server serves no version of the kind that Joiner reads (404).
    NotServed,
}

/// A client for the cluster a kubeconfig names (its current context, or `context`), with
/// bounded connect and read times; the default kubeconfig (`$KUBECONFIG`, `~/.kube/config`,
/// or in-cluster) when no path is given. Returns the client and the server's URL.
pub async fn client_for(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(Client, String), KubeError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| KubeError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(file, &options).await
        }
        (None, Some(_)) => Config::from_kubeconfig(&options).await,
        (None, None) => {
            return with_timeouts(
                Config::infer()
                    .await
                    .map_err(|e| KubeError::Config(e.to_string()))?,
            );
        }
    };
    with_timeouts(config.map_err(|e| KubeError::Config(e.to_string()))?)
}

fn with_timeouts(mut config: Config) -> Result<(Client, String), KubeError> {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| KubeError::Config(e.to_string()))?;
    Ok((client, server))
}

/// Lists every kind the live controller watches, once. The device-plugin ConfigMap is read by
/// name, as the controller watches it.
pub async fn list_cluster(client: &Client, options: &StoreOptions) -> Result<Listing, KubeError> {
    let mut listing = Listing::default();
    for row in KINDS {
        if matches!(row.live, Live::NotRead(_)) {
            continue;
        }
        let resources = match resources_of(row.kind) {
            Some(r) => r,
            None => continue,
        };
        let scope = match row.kind {
            Kind::ConfigMap => Scope::Named(options.config_maps()),
            _ => Scope::All,
        };
        match list_first_served(client, &resources, &scope).await {
            Ok(Some(objects)) => listing.objects.extend(objects),
            Ok(None) if row.live == Live::IfServed => {}
            Ok(None) => listing.unread.push(Unread {
                kind: row.name,
                why: UnreadWhy::NotServed,
            }),
            Err(kube::Error::Api(status)) if status.code == 403 => listing.unread.push(Unread {
                kind: row.name,
                why: UnreadWhy::Forbidden(status.message.clone()),
            }),
            Err(source) => {
                return Err(KubeError::List {
                    kind: row.name,
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(listing)
}

/// A resource `list_cluster` lists: the grant a user needs for it (verb `list`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listed {
    /// The API group (empty for the core group).
    pub group: String,
    pub plural: String,
    /// Only this object (by a field selector on its name), or all of them.
    pub name: Option<String>,
}

/// The resources [`list_cluster`] lists, for the read-only ClusterRole its users need.
pub fn listed(options: &StoreOptions) -> Vec<Listed> {
    KINDS
        .iter()
        .filter(|row| !matches!(row.live, Live::NotRead(_)))
        .filter_map(|row| Some((row.kind, resources_of(row.kind)?.into_iter().next()?)))
        .flat_map(|(kind, first)| {
            let names: Vec<Option<String>> = match kind {
                Kind::ConfigMap => options
                    .config_maps()
                    .into_iter()
                    .map(|(_, name)| Some(name.clone()))
                    .collect(),
                _ => vec![None],
            };
            names.into_iter().map(move |name| Listed {
                group: first.group.clone(),
                plural: first.plural.clone(),
                name,
            })
        })
        .collect()
}

/// Where a kind is listed.
enum Scope<'a> {
    All,
    /// Objects by namespace and name (a field selector on each name).
    Named(Vec<&'a (String, String)>),
}

/// The API resources a kind may be served as, in the order tried; `None` for kinds the live
/// controller does not read.
fn resources_of(kind: Kind) -> Option<Vec<ApiResource>> {
    // The DRA kinds in every version the kind table accepts, newest first: a cluster serves
    // the newest it has turned on (`v1` from Kubernetes 1.34, `v1beta2` from 1.33, ...).
    let dra = |r: ApiResource| {
        kind.info()
            .versions
            .iter()
            .filter_map(|gv| gv.split_once('/'))
            .filter(|(group, _)| *group == r.group)
            .map(|(_, v)| ApiResource {
                version: v.to_string(),
                api_version: format!("{}/{v}", r.group),
                ..r.clone()
            })
            .collect()
    };
    Some(match kind {
        Kind::Pod => vec![erase::<Pod>()],
        Kind::Node => vec![erase::<Node>()],
        Kind::DaemonSet => vec![erase::<DaemonSet>()],
        Kind::ConfigMap => vec![erase::<ConfigMap>()],
        Kind::NodePool => vec![erase::<NodePool>()],
        Kind::NodeClaim => vec![erase::<NodeClaim>()],
        Kind::EC2NodeClass => vec![erase::<EC2NodeClass>()],
        Kind::PodDisruptionBudget => vec![erase::<PodDisruptionBudget>()],
        Kind::VolumeAttachment => vec![erase::<VolumeAttachment>()],
        Kind::PersistentVolumeClaim => vec![erase::<PersistentVolumeClaim>()],
        Kind::PersistentVolume => vec![erase::<PersistentVolume>()],
        Kind::StorageClass => vec![erase::<StorageClass>()],
        Kind::NodeOverlay => vec![erase::<NodeOverlay>()],
        Kind::PodTemplate => vec![erase::<PodTemplate>()],
        Kind::CapacityBuffer => vec![erase::<CapacityBuffer>()],
        Kind::DeviceClass => dra(erase::<DeviceClass>()),
        Kind::DeviceTaintRule => dra(erase::<DeviceTaintRule>()),
        Kind::ResourceClaim => dra(erase::<ResourceClaim>()),
        Kind::ResourceClaimTemplate => dra(erase::<ResourceClaimTemplate>()),
        Kind::ResourceSlice => dra(erase::<ResourceSlice>()),
        Kind::Deployment
        | Kind::ReplicaSet
        | Kind::StatefulSet
        | Kind::Job
        | Kind::InstanceType => return None,
    })
}

/// A kind's URL coordinates, from the controller's constants for it.
fn erase<K: joiner_controller::store::Resource>() -> ApiResource {
    ApiResource::erase::<Typed<K>>(&())
}

/// The objects of the first of `resources` the server serves, or `None` when it serves none
/// (each answered 404).
async fn list_first_served(
    client: &Client,
    resources: &[ApiResource],
    scope: &Scope<'_>,
) -> Result<Option<Vec<Value>>, kube::Error> {
    for resource in resources {
        match list_all(client, resource, scope).await {
            Ok(objects) => return Ok(Some(objects)),
            Err(kube::Error::Api(status)) if status.code == 404 => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Every object of one resource in `scope`.
async fn list_all(
    client: &Client,
    resource: &ApiResource,
    scope: &Scope<'_>,
) -> Result<Vec<Value>, kube::Error> {
    match scope {
        Scope::All => {
            let api = Api::all_with(client.clone(), resource);
            list_pages(&api, ListParams::default(), resource).await
        }
        Scope::Named(named) => {
            let mut objects = Vec::new();
            for (namespace, name) in named {
                let api = Api::namespaced_with(client.clone(), namespace, resource);
                let params = ListParams::default().fields(&format!("metadata.name={name}"));
                objects.extend(list_pages(&api, params, resource).await?);
            }
            Ok(objects)
        }
    }
}

/// Every page of one list. A continue token that expired mid-way (410) starts the list again
/// from its first page, at most [`RESTARTS`] times.
async fn list_pages(
    api: &Api<DynamicObject>,
    params: ListParams,
    resource: &ApiResource,
) -> Result<Vec<Value>, kube::Error> {
    let mut restarts = 0;
    'list: loop {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut page_params = params.clone().limit(PAGE_SIZE);
            if let Some(token) = &token {
                page_params = page_params.continue_token(token);
            }
            let page = match api.list(&page_params).await {
                Ok(page) => page,
                Err(kube::Error::Api(status))
                    if status.code == 410 && token.is_some() && restarts < RESTARTS =>
                {
                    restarts += 1;
                    continue 'list;
                }
                Err(e) => return Err(e),
            };
            objects.extend(page.items.into_iter().filter_map(|o| typed(o, resource)));
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(objects);
            }
        }
    }
}

/// A listed item as a whole object: the list's items leave out `apiVersion` and `kind`.
fn typed(object: DynamicObject, resource: &ApiResource) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    let map = value.as_object_mut()?;
    map.insert("apiVersion".into(), resource.api_version.clone().into());
    map.insert("kind".into(), resource.kind.clone().into());
    Some(value)
}
