//! Custom resources Joiner reads: Karpenter's NodePool and NodeClaim (`karpenter.sh`), the AWS
//! EC2NodeClass (`karpenter.k8s.aws`), and Joiner's own InstanceType (`joiner.dev`).

pub mod kubelet;

pub use kubelet::KubeletConfiguration;
