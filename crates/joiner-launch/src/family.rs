//! The AMI family an EC2NodeClass boots, and the user data and root volumes each family gets.

use joiner_model::Quantity;
use joiner_model::api::EC2NodeClass;
use joiner_model::api::ec2nodeclass::{AmiFamily, BlockDevice, BlockDeviceMapping};

use crate::LaunchError;
use crate::bootstrap::NodeBootstrap;
use crate::{al2, bottlerocket, nodeadm};

/// The AMI family: the alias's, else `amiFamily`. Windows is not launched.
pub fn family_of(class: &EC2NodeClass) -> Result<AmiFamily, LaunchError> {
    let from_alias = class
        .spec
        .ami_selector_terms
        .iter()
        .enumerate()
        .find_map(|(i, t)| t.alias.as_deref().map(|a| (i, a)))
        .map(|(i, a)| {
            AmiFamily::from_alias(a).ok_or_else(|| {
                LaunchError::field(
                    format!("spec.amiSelectorTerms[{i}].alias"),
                    format!("unknown AMI alias {a:?}"),
                )
            })
        })
        .transpose()?;
    match from_alias.or(class.spec.ami_family) {
        Some(
            f @ (AmiFamily::AL2023 | AmiFamily::AL2 | AmiFamily::Bottlerocket | AmiFamily::Custom),
        ) => Ok(f),
        Some(other) => Err(LaunchError::field(
            "spec.amiFamily",
            format!("AMI family {other:?} is not supported by Joiner's AWS provider"),
        )),
        None => Err(LaunchError::field(
            "spec.amiFamily",
            "required when no amiSelectorTerms alias names the family",
        )),
    }
}

/// The instance's user data for `family`, merged with the EC2NodeClass's `userData`. A custom
/// AMI boots itself: its user data goes as written.
pub fn user_data(
    family: AmiFamily,
    bootstrap: &NodeBootstrap,
    user: Option<&str>,
) -> Result<String, LaunchError> {
    let rendered = match family {
        AmiFamily::AL2023 => nodeadm::user_data(bootstrap, user),
        AmiFamily::AL2 => al2::user_data(bootstrap, user),
        AmiFamily::Bottlerocket => bottlerocket::user_data(bootstrap, user),
        _ => Ok(user.unwrap_or_default().to_string()),
    };
    rendered.map_err(|e| LaunchError::field("spec.userData", e.to_string()))
}

fn gp3(device: &str, size: &str, root: bool) -> BlockDeviceMapping {
    BlockDeviceMapping {
        device_name: Some(device.into()),
        root_volume: root.then_some(true),
        ebs: Some(BlockDevice {
            volume_size: Quantity::parse(size).ok(),
            volume_type: Some("gp3".into()),
            encrypted: Some(true),
            delete_on_termination: Some(true),
            ..Default::default()
        }),
    }
}

/// Karpenter's volumes where the EC2NodeClass names none: for AL2 and AL2023 20 GiB of encrypted
/// gp3 on `/dev/xvda`; for Bottlerocket a 4 GiB OS volume and a 20 GiB data volume on
/// `/dev/xvdb`, which holds the node's ephemeral storage.
pub fn default_block_devices(family: AmiFamily) -> Vec<BlockDeviceMapping> {
    match family {
        AmiFamily::Bottlerocket => vec![
            gp3("/dev/xvda", "4Gi", false),
            gp3("/dev/xvdb", "20Gi", true),
        ],
        _ => vec![gp3("/dev/xvda", "20Gi", true)],
    }
}
