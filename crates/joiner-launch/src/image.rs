//! The AMI an alias names: EKS's and Bottlerocket's public SSM parameters, per Kubernetes
//! version, architecture and GPU variant.

use joiner_model::api::ec2nodeclass::AmiFamily;

/// Where EKS publishes its optimized AL2023 and AL2 AMI ids in SSM.
pub const EKS_PARAMETER_ROOT: &str = "/aws/service/eks/optimized-ami";
/// Where Bottlerocket publishes its AMI ids in SSM.
pub const BOTTLEROCKET_PARAMETER_ROOT: &str = "/aws/service/bottlerocket";

/// The roots of the public AMI parameters (tests use roots of their own: SSM, and moto, refuse
/// writes under `/aws/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterRoots {
    pub eks: String,
    pub bottlerocket: String,
}

impl Default for ParameterRoots {
    fn default() -> Self {
        ParameterRoots {
            eks: EKS_PARAMETER_ROOT.to_string(),
            bottlerocket: BOTTLEROCKET_PARAMETER_ROOT.to_string(),
        }
    }
}

/// What an instance type needs from an AMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeFacts {
    /// `x86_64` or `arm64`, as EC2 and the SSM paths spell it.
    pub arch: Arch,
    /// Has NVIDIA GPUs: boots the NVIDIA variant of an alias AMI.
    pub nvidia: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    /// EC2's (`x86_64`, `arm64`) and Kubernetes' (`amd64`, `arm64`) spellings.
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "x86_64" | "amd64" => Some(Arch::X86_64),
            "arm64" | "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }
}

/// The version part of an alias (`al2023@v20250101` gives `v20250101`; no `@` is `latest`).
pub fn alias_version(alias: &str) -> &str {
    alias.split_once('@').map_or("latest", |(_, v)| v)
}

/// The SSM parameter that holds the AMI id an alias names for one kind of instance type.
/// `version` is the alias's part after `@`: `latest` or a release (`v20250101` for EKS's,
/// `v1.30.0` or `1.30.0` for Bottlerocket's, whose SSM paths carry no `v`). Windows and custom
/// families have no alias Joiner resolves.
pub fn alias_parameter(
    roots: &ParameterRoots,
    family: AmiFamily,
    kubernetes: &str,
    version: &str,
    facts: TypeFacts,
) -> Option<String> {
    let arch = facts.arch.as_str();
    let root = roots.eks.as_str();
    match family {
        AmiFamily::AL2023 => {
            let variant = if facts.nvidia { "nvidia" } else { "standard" };
            let leaf = if version == "latest" {
                "recommended".to_string()
            } else {
                format!("amazon-eks-node-al2023-{arch}-{variant}-{kubernetes}-{version}")
            };
            Some(format!(
                "{root}/{kubernetes}/amazon-linux-2023/{arch}/{variant}/{leaf}/image_id"
            ))
        }
        AmiFamily::AL2 => {
            let suffix = match (facts.arch, facts.nvidia) {
                (_, true) => "-gpu",
                (Arch::Arm64, false) => "-arm64",
                (Arch::X86_64, false) => "",
            };
            let leaf = if version == "latest" {
                "recommended".to_string()
            } else {
                format!("amazon-eks{suffix}-node-{kubernetes}-{version}")
            };
            Some(format!(
                "{root}/{kubernetes}/amazon-linux-2{suffix}/{leaf}/image_id"
            ))
        }
        AmiFamily::Bottlerocket => {
            let variant = if facts.nvidia { "-nvidia" } else { "" };
            let version = version.trim_start_matches('v');
            Some(format!(
                "{}/aws-k8s-{kubernetes}{variant}/{arch}/{version}/image_id",
                roots.bottlerocket
            ))
        }
        AmiFamily::Windows2019
        | AmiFamily::Windows2022
        | AmiFamily::Windows2025
        | AmiFamily::Custom => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: TypeFacts = TypeFacts {
        arch: Arch::X86_64,
        nvidia: true,
    };
    const ARM: TypeFacts = TypeFacts {
        arch: Arch::Arm64,
        nvidia: false,
    };

    fn parameter(family: AmiFamily, k8s: &str, version: &str, facts: TypeFacts) -> Option<String> {
        alias_parameter(&ParameterRoots::default(), family, k8s, version, facts)
    }

    #[test]
    fn al2023_aliases_name_eks_public_parameters() {
        assert_eq!(
            parameter(AmiFamily::AL2023, "1.33", "latest", GPU).as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
            )
        );
        assert_eq!(
            parameter(AmiFamily::AL2023, "1.33", "latest", ARM).as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id"
            )
        );
        assert_eq!(
            parameter(AmiFamily::AL2023, "1.33", "v20250715", GPU).as_deref(),
            Some(
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.33-v20250715/image_id"
            )
        );
    }

    #[test]
    fn al2_aliases_pick_the_gpu_and_arm_images() {
        assert_eq!(
            parameter(AmiFamily::AL2, "1.32", "latest", GPU).as_deref(),
            Some("/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/recommended/image_id")
        );
        assert_eq!(
            parameter(AmiFamily::AL2, "1.32", "latest", ARM).as_deref(),
            Some("/aws/service/eks/optimized-ami/1.32/amazon-linux-2-arm64/recommended/image_id")
        );
    }

    #[test]
    fn bottlerocket_aliases_name_its_own_parameters_without_the_v() {
        assert_eq!(
            parameter(AmiFamily::Bottlerocket, "1.32", "latest", ARM).as_deref(),
            Some("/aws/service/bottlerocket/aws-k8s-1.32/arm64/latest/image_id")
        );
        assert_eq!(
            parameter(AmiFamily::Bottlerocket, "1.32", "v1.30.0", GPU).as_deref(),
            Some("/aws/service/bottlerocket/aws-k8s-1.32-nvidia/x86_64/1.30.0/image_id")
        );
        assert_eq!(
            parameter(AmiFamily::Windows2022, "1.32", "latest", GPU),
            None
        );
    }
}
