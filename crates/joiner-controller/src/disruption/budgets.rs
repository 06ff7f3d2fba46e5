//! NodePool disruption budgets: how many of a pool's nodes voluntary disruption may take at once.
//!
//! A budget limits the reasons it lists (`Underutilized`, `Empty`, `Drifted`; all of them when
//! it lists none) to `nodes` nodes, a count or a percentage of the pool's nodes rounded up. A
//! budget with a `schedule` (cron, UTC, parsed with `croner`) applies only for `duration` after
//! each time the schedule fires. Where several budgets apply, the most restrictive wins; where
//! none does, nothing limits the reason. As in Karpenter, a budget that cannot be read (a bad
//! count, a bad schedule, a schedule without a duration) blocks disruption rather than allowing
//! all of it.
//!
//! Expiry and interruption are not budgeted: an expired node must go (Karpenter v1 made expiry
//! forceful), and an interrupted one goes whatever we decide.

use std::str::FromStr;
use std::time::Duration;

use croner::Cron;
use joiner_model::api::NodePool;
use joiner_model::api::nodepool::DisruptionBudget;
use joiner_model::duration::parse_duration;
use joiner_model::wellknown::DisruptionReason;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

use crate::clock::add;

/// Whether the budget applies at `now`: always without a schedule; otherwise within `duration`
/// after a time the schedule fires. `Err` when it cannot be read.
pub fn is_active(budget: &DisruptionBudget, now: Timestamp) -> Result<bool, String> {
    let (schedule, duration) = match (&budget.schedule, &budget.duration) {
        (None, None) => return Ok(true),
        (Some(s), Some(d)) => (s, d),
        _ => return Err("schedule and duration must be set together".into()),
    };
    let cron = Cron::from_str(schedule).map_err(|e| format!("schedule {schedule:?}: {e}"))?;
    let duration: Duration =
        parse_duration(duration).map_err(|e| format!("duration {duration:?}: {e}"))?;
    // The window [fire, fire + duration) holds now when the schedule fires in
    // (now - duration, now]: the first firing after now - duration is not after now.
    let since = now
        .checked_sub(
            k8s_openapi::jiff::SignedDuration::try_from(duration).map_err(|e| e.to_string())?,
        )
        .unwrap_or(Timestamp::MIN);
    let utc = TimeZone::UTC;
    let next = cron
        .find_next_occurrence(&utc.to_datetime(since), false)
        .map_err(|e| format!("schedule {schedule:?}: {e}"))?;
    let next = utc
        .to_timestamp(next)
        .map_err(|e| format!("schedule {schedule:?}: {e}"))?;
    Ok(next <= now && now < add(next, duration))
}

/// The nodes one budget allows, given `total` nodes in the pool.
fn nodes_allowed(budget: &DisruptionBudget, total: usize) -> Result<usize, String> {
    let n = budget.nodes.trim();
    match n.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<usize>()
            .map(|p| (total * p.min(100)).div_ceil(100))
            .map_err(|_| format!("nodes {n:?} is not a percentage")),
        None => n
            .parse::<usize>()
            .map_err(|_| format!("nodes {n:?} is not a count")),
    }
}

/// How many of the pool's nodes may be disrupted at once for `reason` at `now`: the smallest of
/// the active budgets that cover the reason (`usize::MAX` when none does).
pub fn allowed_disruptions(
    pool: &NodePool,
    reason: DisruptionReason,
    total: usize,
    now: Timestamp,
) -> usize {
    pool.spec
        .disruption
        .budgets
        .iter()
        .filter(|b| {
            b.reasons
                .as_ref()
                .is_none_or(|rs| rs.iter().any(|r| r.reason() == reason))
        })
        .map(|b| {
            match is_active(b, now).and_then(|active| {
                if active {
                    nodes_allowed(b, total)
                } else {
                    Ok(usize::MAX)
                }
            }) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(
                        nodepool = pool.metadata.name.as_deref().unwrap_or_default(),
                        "disruption budget blocks disruption: {e}"
                    );
                    0
                }
            }
        })
        .min()
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use joiner_model::api::nodepool::BudgetReason;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> DisruptionBudget {
        DisruptionBudget {
            nodes: nodes.into(),
            reasons: None,
            schedule: schedule.map(Into::into),
            duration: duration.map(Into::into),
        }
    }

    fn pool(budgets: Vec<DisruptionBudget>) -> NodePool {
        let mut p: NodePool = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
        }))
        .expect("pool");
        p.spec.disruption.budgets = budgets;
        p
    }

    #[test]
    fn a_scheduled_budget_applies_only_inside_its_window() {
        // Business hours, weekdays: 09:00 for 8 hours. 2026-01-05 is a Monday.
        let b = budget("0", Some("0 9 * * mon-fri"), Some("8h"));
        assert_eq!(is_active(&b, at("2026-01-05T08:59:59Z")), Ok(false));
        assert_eq!(is_active(&b, at("2026-01-05T09:00:00Z")), Ok(true));
        assert_eq!(is_active(&b, at("2026-01-05T16:59:59Z")), Ok(true));
        assert_eq!(is_active(&b, at("2026-01-05T17:00:00Z")), Ok(false));
        // Saturday.
        assert_eq!(is_active(&b, at("2026-01-10T10:00:00Z")), Ok(false));
        // A window that runs past midnight.
        let night = budget("0", Some("@daily"), Some("30m"));
        assert_eq!(is_active(&night, at("2026-01-10T00:29:00Z")), Ok(true));
        assert_eq!(is_active(&night, at("2026-01-09T23:59:00Z")), Ok(false));
    }

    #[test]
    fn the_most_restrictive_active_budget_wins_for_its_reasons() {
        let mut drift_only = budget("1", None, None);
        drift_only.reasons = Some(vec![BudgetReason::Drifted]);
        let p = pool(vec![
            budget("50%", None, None),
            budget("0", Some("0 9 * * *"), Some("8h")),
            drift_only,
        ]);
        let morning = at("2026-01-05T10:00:00Z");
        let night = at("2026-01-05T22:00:00Z");
        assert_eq!(
            allowed_disruptions(&p, DisruptionReason::Empty, 10, morning),
            0
        );
        assert_eq!(
            allowed_disruptions(&p, DisruptionReason::Empty, 10, night),
            5
        );
        assert_eq!(
            allowed_disruptions(&p, DisruptionReason::Drifted, 10, night),
            1
        );
        assert_eq!(
            allowed_disruptions(&p, DisruptionReason::Underutilized, 3, night),
            2
        );
        // A reason no budget covers is not limited.
        let only_drift = pool(vec![budget("0", None, None)]);
        let mut q = only_drift.clone();
        q.spec.disruption.budgets[0].reasons = Some(vec![BudgetReason::Drifted]);
        assert_eq!(
            allowed_disruptions(&q, DisruptionReason::Empty, 10, night),
            usize::MAX
        );
    }

    #[test]
    fn unreadable_budgets_block_disruption() {
        let now = at("2026-01-05T10:00:00Z");
        for b in [
            budget("ten", None, None),
            budget("1", Some("not a schedule"), Some("1h")),
            budget("1", Some("@daily"), None),
        ] {
            assert_eq!(
                allowed_disruptions(&pool(vec![b]), DisruptionReason::Empty, 10, now),
                0
            );
        }
    }
}
