//! Karpenter's cloud-provider decorator metrics, and its AWS provider's launch failures by
//! offering: how long each cloud call took, and which failed, by the part of the controller that made it (`controller`, Joiner's reconciler), the
//! call (`method`, Karpenter's `CloudProvider` method) and the provider. Every label is a
//! closed set, so the series stay bounded whatever fails.

use joiner_controller::StepReport;
use joiner_controller::cloud::CloudError;
use prometheus_client::registry::Registry;

use super::conditions::Buckets;
use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Counters, Gauges, Histograms, labels};

/// Prometheus's default buckets, which Karpenter's histogram keeps (it sets none).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub(super) struct CloudMetrics {
    duration: Histograms,
    errors: Counters,
    launch_failures: Counters,
    user_data: Gauges,
    /// The last user data size of each EC2NodeClass, kept so a class that is gone loses its
    /// series ([`CloudMetrics::keep_classes`]).
    user_data_of: Mutex<BTreeMap<String, usize>>,
}

/// The `reason` Karpenter's AWS provider gives an offering out of capacity: its error
/// classifier has no branch for the capacity codes (`InsufficientInstanceCapacity`,
/// `UnfulfillableCapacity`, ...), so they all read `LaunchFailed`.
const OUT_OF_CAPACITY: &str = "LaunchFailed";

/// Karpenter's `error` label: the kind of cloud-provider error it names, or empty.
fn error_label(e: &CloudError) -> &'static str {
    match e {
        CloudError::InsufficientCapacity(_) | CloudError::NoOfferings => {
            "InsufficientCapacityError"
        }
        CloudError::Throttled | CloudError::Rejected(_) | CloudError::Other(_) => "",
    }
}

impl CloudMetrics {
    pub(super) fn register(registry: &mut Registry) -> CloudMetrics {
        let duration = Histograms::new_with_constructor(Buckets(DEFAULT_BUCKETS.to_vec()));
        registry.register(
            "karpenter_cloudprovider_duration_seconds",
            "Duration of cloud provider calls, by controller, method and provider",
            duration.clone(),
        );
        let errors = Counters::default();
        registry.register(
            "karpenter_cloudprovider_errors",
            "Errors from cloud provider calls, by controller, method, provider and error",
            errors.clone(),
        );
        let launch_failures = Counters::default();
        registry.register(
            "karpenter_cloudprovider_instance_launch_failures",
            "Offerings a launch found out of capacity, by zone (zone_id empty: not known) and capacity type",
            launch_failures.clone(),
        );
        let user_data = Gauges::default();
        registry.register(
            "karpenter_ec2nodeclasses_userdata_bytes",
            "Size in bytes of the user data of the EC2NodeClass's last launch template created",
            user_data.clone(),
        );
        CloudMetrics {
            duration,
            errors,
            launch_failures,
            user_data,
            user_data_of: Mutex::new(BTreeMap::new()),
        }
    }

    /// Keeps the user data series of the EC2NodeClasses `present` says exist, and only them.
    pub(super) fn keep_classes(&self, present: impl Fn(&str) -> bool) {
        let mut of = self.user_data_of.lock().unwrap_or_else(|e| e.into_inner());
        of.retain(|class, _| present(class));
        self.user_data.clear();
        for (class, bytes) in of.iter() {
            self.user_data
                .get_or_create(&labels(&[("nodeclass", class)]))
                .set(*bytes as f64);
        }
    }

    pub(super) fn record(&self, report: &StepReport, provider: &str) {
        if !report.user_data_bytes.is_empty() {
            let mut of = self.user_data_of.lock().unwrap_or_else(|e| e.into_inner());
            for (class, bytes) in &report.user_data_bytes {
                of.insert(class.clone(), *bytes);
                self.user_data
                    .get_or_create(&labels(&[("nodeclass", class)]))
                    .set(*bytes as f64);
            }
        }
        for offering in &report.launch_failures {
            self.launch_failures
                .get_or_create(&labels(&[
                    ("zone", &offering.zone),
                    ("zone_id", ""),
                    ("capacity_type", offering.capacity_type.as_str()),
                    ("reason", OUT_OF_CAPACITY),
                ]))
                .inc();
        }
        for call in &report.cloud_calls {
            let controller = call.during.as_str();
            let method = call.method.as_str();
            self.duration
                .get_or_create(&labels(&[
                    ("controller", controller),
                    ("method", method),
                    ("provider", provider),
                ]))
                .observe(call.took.as_secs_f64());
            if let Some(e) = &call.error {
                self.errors
                    .get_or_create(&labels(&[
                        ("controller", controller),
                        ("method", method),
                        ("provider", provider),
                        ("error", error_label(e)),
                    ]))
                    .inc();
            }
        }
    }
}
