//! The EventBridge events an interruption queue carries, read into what they mean for an
//! instance.
//!
//! Four kinds matter (as Karpenter's interruption handling reads them):
//!
//! | `source` | `detail-type` | `detail` |
//! |---|---|---|
//! | `aws.ec2` | `EC2 Spot Instance Interruption Warning` | `instance-id`, `instance-action` |
//! | `aws.ec2` | `EC2 Instance Rebalance Recommendation` | `instance-id` |
//! | `aws.ec2` | `EC2 Instance State-change Notification` | `instance-id`, `state` |
//! | `aws.health` | `AWS Health Event` | `service`, `eventTypeCategory`, `affectedEntities[].entityValue` |
//!
//! A state change matters only for `stopping`, `stopped`, `shutting-down` and `terminated`; a
//! health event only for `service: EC2` and `eventTypeCategory: scheduledChange`. Anything else
//! is [`MessageError::Unknown`] or [`MessageError::Malformed`]: the caller logs and deletes it.

use serde::Deserialize;
use serde_json::Value;

pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
pub const REBALANCE_RECOMMENDATION: &str = "EC2 Instance Rebalance Recommendation";
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const HEALTH_EVENT: &str = "AWS Health Event";

/// What the cloud says is happening to an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The spot instance is reclaimed in two minutes.
    SpotInterruption,
    /// The spot instance is at elevated risk of interruption; nothing is reclaimed yet.
    RebalanceRecommendation,
    /// AWS will retire or reboot the instance for maintenance.
    ScheduledChange,
    /// The instance is stopping or stopped, shutting down or terminated (the state).
    StateChange(String),
}

impl Notice {
    /// The reason recorded on the NodeClaim and in events.
    pub fn reason(&self) -> &'static str {
        match self {
            Notice::SpotInterruption => "SpotInterrupted",
            Notice::RebalanceRecommendation => "RebalanceRecommendation",
            Notice::ScheduledChange => "ScheduledChange",
            Notice::StateChange(_) => "InstanceStopping",
        }
    }

    /// Whether the instance is going away: its node is replaced and drained now. Only a
    /// rebalance recommendation is not (as in Karpenter, it is recorded and nothing more).
    pub fn is_interruption(&self) -> bool {
        !matches!(self, Notice::RebalanceRecommendation)
    }
}

/// One event for the instances it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    /// The EventBridge event id.
    pub id: String,
    pub notice: Notice,
    pub instance_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("not an EventBridge event: {0}")]
    Malformed(String),
    /// A well-formed event of a kind (or state, or category) that needs no action.
    #[error("event {event_source}/{detail_type} needs no action{}", note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default())]
    Unknown {
        event_source: String,
        detail_type: String,
        note: Option<String>,
    },
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: String,
    source: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    #[serde(default)]
    detail: Value,
}

fn text<'a>(detail: &'a Value, key: &str) -> Option<&'a str> {
    detail.get(key).and_then(Value::as_str)
}

/// Reads one message body.
pub fn parse(body: &str) -> Result<Interruption, MessageError> {
    let e: Envelope =
        serde_json::from_str(body).map_err(|e| MessageError::Malformed(e.to_string()))?;
    let unknown = |note: Option<String>| MessageError::Unknown {
        event_source: e.source.clone(),
        detail_type: e.detail_type.clone(),
        note,
    };
    let instance = || {
        text(&e.detail, "instance-id")
            .filter(|id| !id.is_empty())
            .map(|id| vec![id.to_string()])
            .ok_or_else(|| {
                MessageError::Malformed(format!("{}: no detail.instance-id", e.detail_type))
            })
    };
    let (notice, instance_ids) = match (e.source.as_str(), e.detail_type.as_str()) {
        ("aws.ec2", SPOT_INTERRUPTION) => (Notice::SpotInterruption, instance()?),
        ("aws.ec2", REBALANCE_RECOMMENDATION) => (Notice::RebalanceRecommendation, instance()?),
        ("aws.ec2", STATE_CHANGE) => {
            let state = text(&e.detail, "state").unwrap_or_default();
            match state {
                "stopping" | "stopped" | "shutting-down" | "terminated" => {
                    (Notice::StateChange(state.to_string()), instance()?)
                }
                other => return Err(unknown(Some(format!("state {other:?}")))),
            }
        }
        ("aws.health", HEALTH_EVENT) => {
            let service = text(&e.detail, "service").unwrap_or_default();
            let category = text(&e.detail, "eventTypeCategory").unwrap_or_default();
            if service != "EC2" || category != "scheduledChange" {
                return Err(unknown(Some(format!("{service} {category}"))));
            }
            let ids: Vec<String> = e
                .detail
                .get("affectedEntities")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|a| a.get("entityValue").and_then(Value::as_str))
                .filter(|v| v.starts_with("i-"))
                .map(str::to_string)
                .collect();
            if ids.is_empty() {
                return Err(MessageError::Malformed(
                    "AWS Health Event: no affected instance".into(),
                ));
            }
            (Notice::ScheduledChange, ids)
        }
        _ => return Err(unknown(None)),
    };
    Ok(Interruption {
        id: e.id.clone(),
        notice,
        instance_ids,
    })
}

/// The body EventBridge delivers for a spot interruption warning (for simulations and tests).
pub fn spot_interruption_warning(event_id: &str, instance_id: &str, time: &str) -> String {
    ec2_event(
        event_id,
        SPOT_INTERRUPTION,
        time,
        serde_json::json!({
            "instance-id": instance_id,
            "instance-action": "terminate",
        }),
    )
}

/// The body of a rebalance recommendation.
pub fn rebalance_recommendation(event_id: &str, instance_id: &str, time: &str) -> String {
    ec2_event(
        event_id,
        REBALANCE_RECOMMENDATION,
        time,
        serde_json::json!({
            "instance-id": instance_id,
        }),
    )
}

/// The body of an instance state change.
pub fn state_change(event_id: &str, instance_id: &str, state: &str, time: &str) -> String {
    ec2_event(
        event_id,
        STATE_CHANGE,
        time,
        serde_json::json!({
            "instance-id": instance_id,
            "state": state,
        }),
    )
}

/// The body of an AWS Health scheduled change for EC2 instances.
pub fn scheduled_change(event_id: &str, instance_ids: &[&str], time: &str) -> String {
    serde_json::json!({
        "version": "0",
        "id": event_id,
        "detail-type": HEALTH_EVENT,
        "source": "aws.health",
        "time": time,
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
            "affectedEntities": instance_ids.iter().map(|i| serde_json::json!({"entityValue": i})).collect::<Vec<_>>(),
        },
    })
    .to_string()
}

fn ec2_event(event_id: &str, detail_type: &str, time: &str, detail: Value) -> String {
    serde_json::json!({
        "version": "0",
        "id": event_id,
        "detail-type": detail_type,
        "source": "aws.ec2",
        "time": time,
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn the_four_kinds_are_read() {
        let spot = parse(&spot_interruption_warning("e1", "i-1", T)).expect("spot");
        assert_eq!(spot.notice, Notice::SpotInterruption);
        assert_eq!(spot.instance_ids, vec!["i-1"]);
        assert_eq!(spot.id, "e1");
        let r = parse(&rebalance_recommendation("e2", "i-2", T)).expect("rebalance");
        assert_eq!(r.notice, Notice::RebalanceRecommendation);
        assert!(!r.notice.is_interruption());
        let s = parse(&state_change("e3", "i-3", "stopping", T)).expect("state");
        assert_eq!(s.notice, Notice::StateChange("stopping".into()));
        assert!(s.notice.is_interruption());
        let h = parse(&scheduled_change("e4", &["i-4", "i-5"], T)).expect("health");
        assert_eq!(h.notice, Notice::ScheduledChange);
        assert_eq!(h.instance_ids, vec!["i-4", "i-5"]);
    }

    /// An event as EventBridge documents it, written out by hand rather than by the builders.
    #[test]
    fn a_documented_spot_warning_is_read() {
        let body = r#"{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-01-01T12:00:00Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","instance-action":"terminate"}}"#;
        let e = parse(body).expect("spot");
        assert_eq!(e.instance_ids, vec!["i-1234567890abcdef0"]);
    }

    #[test]
    fn other_events_and_garbage_are_errors_not_panics() {
        assert!(matches!(
            parse(&state_change("e", "i-1", "running", T)),
            Err(MessageError::Unknown { .. })
        ));
        let issue = scheduled_change("e", &["i-1"], T).replace("scheduledChange", "issue");
        assert!(matches!(parse(&issue), Err(MessageError::Unknown { .. })));
        let other = r#"{"source":"aws.s3","detail-type":"Object Created","detail":{}}"#;
        assert!(matches!(parse(other), Err(MessageError::Unknown { .. })));
        for garbage in [
            "",
            "not json",
            "[]",
            r#"{"source":"aws.ec2"}"#,
            r#"{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#,
            r#"{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":7}}"#,
        ] {
            assert!(
                matches!(parse(garbage), Err(MessageError::Malformed(_))),
                "{garbage}"
            );
        }
    }
}
