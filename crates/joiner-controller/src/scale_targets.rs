//! The workloads CapacityBuffers' `scalableRef`s name, read for them alone: the controller
//! watches pods, not workloads.

use joiner_model::api::capacitybuffer::{CapacityBuffer, ScaleTarget};
use joiner_model::buffers;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};

use crate::store::ClusterStore;

/// The workloads the active buffers' `scalableRef`s name, each read from the API server (the
/// controller watches pods, not workloads; Karpenter reads them the same way). A workload that
/// does not exist is left out (its buffer is `ScalableRefNotFound`); one whose read failed is
/// marked so, and only its buffer is not ready this time.
pub fn read<S: ClusterStore>(store: &S, buffers: &[CapacityBuffer]) -> Vec<ScaleTarget> {
    let mut out = Vec::new();
    for b in buffers.iter().filter(|b| buffers::is_active(b)) {
        let Some(r) = &b.spec.scalable_ref else {
            continue;
        };
        if r.api_group
            .as_deref()
            .is_some_and(|g| !g.is_empty() && g != "apps")
        {
            continue;
        }
        let ns = Some(b.namespace());
        let read = match r.kind.as_str() {
            "Deployment" => store
                .get_uncached::<Deployment>(ns, &r.name)
                .map(|d| d.map(|d| (d.spec.replicas, d.spec.template))),
            "StatefulSet" => store
                .get_uncached::<StatefulSet>(ns, &r.name)
                .map(|s| s.map(|s| (s.spec.replicas, s.spec.template))),
            "ReplicaSet" => store
                .get_uncached::<ReplicaSet>(ns, &r.name)
                .map(|s| s.map(|s| (s.spec.replicas, s.spec.template.unwrap_or_default()))),
            _ => Ok(None),
        };
        let target = |replicas: Option<i32>, template, unreadable| ScaleTarget {
            kind: r.kind.clone(),
            namespace: b.namespace().to_string(),
            name: r.name.clone(),
            replicas: replicas.unwrap_or(1),
            template,
            unreadable,
        };
        match read {
            Ok(Some((replicas, template))) => out.push(target(replicas, template, None)),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(buffer = b.name(), error = %e, "reading a CapacityBuffer's scalableRef");
                out.push(target(None, Default::default(), Some(e.to_string())));
            }
        }
    }
    out
}
