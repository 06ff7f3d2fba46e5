//! How a node reaches the cluster it joins: the API server's endpoint, its CA bundle, the
//! service CIDR (and with it the IP family) and the cluster DNS address.
//!
//! `nodeadm` (AL2023) validates the endpoint, the CA and the CIDR in its NodeConfig and does not
//! look the cluster up, so a node launched without them never joins. They are resolved once, at
//! start-up, as Karpenter resolves them: from the settings where given
//! (`settings.clusterEndpoint`, `settings.clusterCABundle`, `settings.clusterCIDR`), the rest from
//! EKS `DescribeCluster`; the DNS address from the `kube-dns` Service, read by the caller. A
//! cluster that cannot be resolved is an error naming what is missing and why: the controller
//! refuses to start rather than launch nodes that cannot join.

use aws_types::SdkConfig;
use joiner_model::settings::Settings;

use crate::error::AwsError;

/// The address family of the cluster's Services (EKS `kubernetesNetworkConfig.ipFamily`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFamily {
    Ipv4,
    Ipv6,
}

impl IpFamily {
    /// The family of a CIDR as written (`10.100.0.0/16`, `fd00:10:96::/112`).
    pub fn of_cidr(cidr: &str) -> IpFamily {
        if cidr.contains(':') {
            IpFamily::Ipv6
        } else {
            IpFamily::Ipv4
        }
    }
}

/// Everything a node's bootstrap needs to find and trust the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterAccess {
    /// The API server URL.
    pub endpoint: String,
    /// The cluster CA, base64 PEM as EKS reports it.
    pub ca_bundle: String,
    /// The Service CIDR.
    pub service_cidr: String,
    pub ip_family: IpFamily,
    /// The cluster DNS Service's address (`kube-dns`), when known; without it `nodeadm`
    /// derives one from the service CIDR.
    pub dns_ip: Option<String>,
}

/// The three facts as far as one source knows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Known {
    pub endpoint: Option<String>,
    pub ca_bundle: Option<String>,
    pub service_cidr: Option<String>,
}

impl Known {
    /// What the settings give.
    pub fn from_settings(settings: &Settings) -> Known {
        Known {
            endpoint: settings.cluster_endpoint.clone(),
            ca_bundle: settings.cluster_ca_bundle.clone(),
            service_cidr: settings.cluster_cidr.clone(),
        }
    }

    fn complete(&self) -> bool {
        self.endpoint.is_some() && self.ca_bundle.is_some() && self.service_cidr.is_some()
    }
}

/// The settings' facts, filled in from `described` (DescribeCluster's answer, or why it could
/// not be read) where they are silent.
pub fn resolve(
    cluster: &str,
    given: &Known,
    described: Option<&Result<Known, String>>,
) -> Result<ClusterAccess, AwsError> {
    let from_eks = described.and_then(|d| d.as_ref().ok());
    let pick = |own: &Option<String>, eks: fn(&Known) -> &Option<String>| {
        own.clone()
            .or_else(|| from_eks.and_then(|k| eks(k).clone()))
            .filter(|v| !v.trim().is_empty())
    };
    let endpoint = pick(&given.endpoint, |k| &k.endpoint);
    let ca_bundle = pick(&given.ca_bundle, |k| &k.ca_bundle);
    let service_cidr = pick(&given.service_cidr, |k| &k.service_cidr);
    match (endpoint, ca_bundle, service_cidr) {
        (Some(endpoint), Some(ca_bundle), Some(service_cidr)) => Ok(ClusterAccess {
            endpoint,
            ca_bundle,
            ip_family: IpFamily::of_cidr(&service_cidr),
            service_cidr,
            dns_ip: None,
        }),
        (endpoint, ca_bundle, service_cidr) => {
            let mut missing = Vec::new();
            if endpoint.is_none() {
                missing.push("the API server endpoint (settings.clusterEndpoint)");
            }
            if ca_bundle.is_none() {
                missing.push("the CA bundle (settings.clusterCABundle)");
            }
            if service_cidr.is_none() {
                missing.push("the service CIDR (settings.clusterCIDR)");
            }
            let why = match described {
                None => "EKS was not asked".to_string(),
                Some(Ok(_)) => "EKS DescribeCluster did not say".to_string(),
                Some(Err(e)) => format!("EKS DescribeCluster failed: {e}"),
            };
            Err(AwsError::Settings(format!(
                "nodes could not join cluster {cluster}: {} unknown ({why}); set them or allow \
                 eks:DescribeCluster",
                missing.join(", ")
            )))
        }
    }
}

/// The cluster's access facts: the settings', the rest from EKS `DescribeCluster` (asked only
/// when the settings leave something out).
pub async fn discover(
    sdk: &SdkConfig,
    settings: &Settings,
    cluster: &str,
) -> Result<ClusterAccess, AwsError> {
    let given = Known::from_settings(settings);
    if given.complete() {
        return resolve(cluster, &given, None);
    }
    let described = describe(sdk, cluster).await;
    resolve(cluster, &given, Some(&described))
}

/// EKS `DescribeCluster`, reduced to the three facts.
async fn describe(sdk: &SdkConfig, cluster: &str) -> Result<Known, String> {
    let config = aws_sdk_eks::config::Builder::from(sdk)
        .timeout_config(crate::clients::timeouts())
        .retry_config(crate::clients::retries())
        .build();
    let client = aws_sdk_eks::Client::from_conf(config);
    let out = client
        .describe_cluster()
        .name(cluster)
        .send()
        .await
        .map_err(|e| AwsError::api("eks:DescribeCluster", cluster, e).to_string())?;
    let Some(c) = out.cluster() else {
        return Err(format!("no cluster named {cluster}"));
    };
    let network = c.kubernetes_network_config();
    let ipv6 = network
        .and_then(|n| n.ip_family())
        .is_some_and(|f| f.as_str() == "ipv6");
    let service_cidr = network.and_then(|n| {
        if ipv6 {
            n.service_ipv6_cidr()
        } else {
            n.service_ipv4_cidr()
        }
    });
    Ok(Known {
        endpoint: c.endpoint().map(str::to_string),
        ca_bundle: c
            .certificate_authority()
            .and_then(|a| a.data())
            .map(str::to_string),
        service_cidr: service_cidr.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(endpoint: Option<&str>, ca: Option<&str>, cidr: Option<&str>) -> Known {
        Known {
            endpoint: endpoint.map(Into::into),
            ca_bundle: ca.map(Into::into),
            service_cidr: cidr.map(Into::into),
        }
    }

    #[test]
    fn the_settings_win_and_eks_fills_in_the_rest() {
        let given = known(Some("https://given"), None, None);
        let eks = Ok(known(
            Some("https://eks"),
            Some("Q0E="),
            Some("fd00:10:96::/112"),
        ));
        let access = resolve("lab", &given, Some(&eks)).expect("resolved");
        assert_eq!(access.endpoint, "https://given");
        assert_eq!(access.ca_bundle, "Q0E=");
        assert_eq!(access.service_cidr, "fd00:10:96::/112");
        assert_eq!(access.ip_family, IpFamily::Ipv6);
        let all = known(Some("https://a"), Some("Q0E="), Some("10.100.0.0/16"));
        let access = resolve("lab", &all, None).expect("resolved");
        assert_eq!(access.ip_family, IpFamily::Ipv4);
    }

    #[test]
    fn what_cannot_be_resolved_is_named_with_why() {
        let given = known(Some("https://given"), None, Some(""));
        let denied = Err("AccessDeniedException: not authorized".to_string());
        let err = resolve("lab", &given, Some(&denied))
            .expect_err("no CA, no CIDR")
            .to_string();
        assert!(err.contains("cluster lab"), "{err}");
        assert!(err.contains("settings.clusterCABundle"), "{err}");
        assert!(err.contains("settings.clusterCIDR"), "{err}");
        assert!(!err.contains("settings.clusterEndpoint"), "{err}");
        assert!(err.contains("AccessDeniedException"), "{err}");
        assert!(err.contains("eks:DescribeCluster"), "{err}");
    }
}
