//! Taints and tolerations, as the kube-scheduler's TaintToleration filter judges them.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether a taint keeps pods that do not tolerate it off the node when scheduling.
/// `PreferNoSchedule` is only a preference, so it never blocks.
fn blocks_scheduling(taint: &Taint) -> bool {
    matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
}

/// Whether one toleration tolerates one taint.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        // An empty key with Exists tolerates everything.
        "Exists" => true,
        "Equal" => {
            // An empty key is only valid with Exists.
            !key.is_empty()
                && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first taint that blocks scheduling and that no toleration tolerates.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| blocks_scheduling(t))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// `key=value:Effect`, as kubectl prints a taint.
pub fn describe(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={}:{}", taint.key, v, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn exists_and_equal_operators() {
        let gpu = taint("nvidia.com/gpu", Some("true"), "NoSchedule");
        assert!(tolerates(
            &tol(
                Some("nvidia.com/gpu"),
                Some("Exists"),
                None,
                Some("NoSchedule")
            ),
            &gpu
        ));
        assert!(tolerates(
            &tol(Some("nvidia.com/gpu"), None, Some("true"), None),
            &gpu
        ));
        assert!(!tolerates(
            &tol(Some("nvidia.com/gpu"), Some("Equal"), Some("false"), None),
            &gpu
        ));
        assert!(!tolerates(
            &tol(
                Some("nvidia.com/gpu"),
                Some("Exists"),
                None,
                Some("NoExecute")
            ),
            &gpu
        ));
        assert!(tolerates(&tol(None, Some("Exists"), None, None), &gpu));
        assert!(!tolerates(&tol(None, Some("Equal"), None, None), &gpu));
    }

    #[test]
    fn prefer_no_schedule_never_blocks() {
        let taints = [
            taint("soft", None, "PreferNoSchedule"),
            taint("hard", Some("1"), "NoExecute"),
        ];
        let blocking = first_untolerated(&taints, &[]).map(describe);
        assert_eq!(blocking.as_deref(), Some("hard=1:NoExecute"));
        assert!(
            first_untolerated(&taints, &[tol(Some("hard"), Some("Exists"), None, None)]).is_none()
        );
    }
}
