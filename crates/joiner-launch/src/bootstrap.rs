//! What a node's bootstrap is told: the cluster it joins, and the labels, taints and kubelet
//! settings it registers with. One value, rendered per AMI family by [`crate::nodeadm`],
//! [`crate::al2`] and [`crate::bottlerocket`].

use std::collections::BTreeMap;

use joiner_model::api::KubeletConfiguration;
use joiner_model::wellknown::labels;
use k8s_openapi::api::core::v1::Taint;

/// How a node finds and trusts the cluster. The live controller resolves it at start-up (the
/// settings, EKS `DescribeCluster`, the `kube-dns` Service); `joiner plan --launch` takes what
/// the settings give.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    pub name: String,
    /// The API server URL (`settings.clusterEndpoint`).
    pub endpoint: Option<String>,
    /// The cluster CA bundle, base64 PEM as EKS reports it (`settings.clusterCABundle`).
    pub ca_bundle: Option<String>,
    /// The service CIDR (`settings.clusterCIDR`); `nodeadm` derives the cluster DNS address
    /// from it when none is given.
    pub service_cidr: Option<String>,
    /// The cluster DNS Service's address (`kube-dns`), used unless the EC2NodeClass's kubelet
    /// block sets `clusterDNS`.
    pub dns_ip: Option<String>,
}

/// What a node needs to join the cluster, as Joiner tells the bootstrap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeBootstrap {
    pub cluster: Cluster,
    /// Labels the kubelet registers the Node with (already filtered by [`kubelet_labels`]).
    pub labels: BTreeMap<String, String>,
    /// Taints the kubelet registers the Node with (taints and startup taints).
    pub taints: Vec<Taint>,
    /// The EC2NodeClass's `kubelet` block.
    pub kubelet: Option<KubeletConfiguration>,
    /// The pods the instance type holds as the plan counted them (its pod capacity). The kubelet
    /// is told this number unless `kubelet.maxPods` sets one, so it admits what the plan put
    /// there, as Karpenter passes its own `max-pods` per instance type.
    pub max_pods: Option<u32>,
    /// `instanceStorePolicy: RAID0`: the local NVMe disks become one RAID0 array holding the
    /// kubelet's and containerd's state, which is what the plan counted as ephemeral storage.
    pub raid0_instance_store: bool,
}

impl NodeBootstrap {
    /// The pods the kubelet may run: `kubelet.maxPods` if set, else the instance type's.
    pub fn effective_max_pods(&self) -> Option<i64> {
        self.kubelet
            .as_ref()
            .and_then(|k| k.max_pods)
            .map(i64::from)
            .or(self.max_pods.map(i64::from))
    }

    /// The cluster DNS address: the kubelet block's first `clusterDNS`, else the one found.
    pub fn cluster_dns(&self) -> Option<&str> {
        self.kubelet
            .as_ref()
            .and_then(|k| k.cluster_dns.as_ref())
            .and_then(|d| d.first())
            .or(self.cluster.dns_ip.as_ref())
            .map(String::as_str)
    }
}

/// `key=value:Effect` (or `key:Effect`), as `--register-with-taints` takes it.
pub fn taint_flag(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={}:{}", t.key, v, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

/// The NodeClaim labels a kubelet may set on its own Node: none in the `kubernetes.io` and
/// `k8s.io` domains except `node.kubernetes.io` and `kubelet.kubernetes.io` (the NodeRestriction
/// admission plugin refuses the others), and none that differ between the offerings one
/// launch template serves (instance type, zone, capacity type) or that the controller sets when
/// the Node registers.
pub fn kubelet_labels(all: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    const CONTROLLER_SET: &[&str] = &[
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::ZONE_ID,
        labels::CAPACITY_TYPE,
        labels::REGISTERED,
        labels::INITIALIZED,
        labels::NODECLAIM,
        labels::NEED,
    ];
    let in_domain = |domain: &str, d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    all.iter()
        .filter(|(k, _)| !CONTROLLER_SET.contains(&k.as_str()))
        .filter(|(k, _)| {
            let Some((domain, _)) = k.split_once('/') else {
                return true;
            };
            let restricted = ["kubernetes.io", "k8s.io"]
                .iter()
                .any(|d| in_domain(domain, d));
            let allowed = ["node.kubernetes.io", "kubelet.kubernetes.io"]
                .iter()
                .any(|d| in_domain(domain, d));
            !restricted || allowed
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
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
}
