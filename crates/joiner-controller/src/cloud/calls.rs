//! The cloud calls a step times ([`crate::report::CloudCall`]), named as Karpenter's
//! cloud-provider decorator names them (`karpenter_cloudprovider_duration_seconds`, and
//! `karpenter_cloudprovider_errors_total` by method). Only the calls that are Karpenter's
//! `CloudProvider` methods are timed; the class resolution and garbage collection of launch
//! templates and instance profiles are Karpenter's AWS controllers' own calls, which it does
//! not time either.

/// A cloud call, named as Karpenter's `CloudProvider` method it corresponds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CloudMethod {
    /// Launching an instance.
    Create,
    /// Terminating an instance.
    Delete,
    /// Reading one instance.
    Get,
    /// Listing the cluster's instances.
    List,
    /// Reading the instance types and their offerings.
    GetInstanceTypes,
}

impl CloudMethod {
    /// Karpenter's `method` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CloudMethod::Create => "Create",
            CloudMethod::Delete => "Delete",
            CloudMethod::Get => "Get",
            CloudMethod::List => "List",
            CloudMethod::GetInstanceTypes => "GetInstanceTypes",
        }
    }
}
