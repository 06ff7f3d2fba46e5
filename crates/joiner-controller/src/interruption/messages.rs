//! The EventBridge events an interruption queue carries, read into what they mean for an
//! instance.
//!
//! These matter (Karpenter's interruption handling reads the first five; it polls for the
//! sixth's reservations instead, which Joiner does too, from the EC2NodeClass status):
//!
//! | `source` | `detail-type` | `detail` | kind |
//! |---|---|---|---|
//! | `aws.ec2` | `EC2 Spot Instance Interruption Warning` | `instance-id`, `instance-action` | spot interruption |
//! | `aws.ec2` | `EC2 Instance Rebalance Recommendation` | `instance-id` | rebalance recommendation |
//! | `aws.ec2` | `EC2 Instance State-change Notification` | `instance-id`, `state` | state change |
//! | `aws.health` | `AWS Health Event` | `service`, `eventTypeCategory`, `startTime`, `affectedEntities[].entityValue` | scheduled change |
//! | `aws.ec2` | `EC2 Capacity Reservation Instance Interruption Warning` | `instance-id`, `instance-termination-time` | capacity reservation ending |
//! | `aws.ec2` | `Capacity Block Reservation Expiration Warning` | `capacity-reservation-id`, `end-date` (no instances: every NodeClaim in the reservation) | capacity reservation ending |
//!
//! A state change matters only for `stopping`, `stopped`, `shutting-down` and `terminated`; a
//! health event only for `service: EC2` and `eventTypeCategory: scheduledChange`. Anything else
//! is [`MessageError::Unknown`] or [`MessageError::Malformed`]: the caller logs and deletes it.

use joiner_model::wellknown::InterruptionKind;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde_json::Value;

pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
pub const REBALANCE_RECOMMENDATION: &str = "EC2 Instance Rebalance Recommendation";
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const HEALTH_EVENT: &str = "AWS Health Event";
/// EC2's warning, 40 minutes before a Capacity Block ends, that its instances begin to
/// terminate in 10 minutes (AWS's documentation spells it both ways).
pub const CAPACITY_BLOCK_ENDING: &str = "Capacity Block Reservation Expiration Warning";
pub const CAPACITY_BLOCK_ENDING_SHORT: &str = "Capacity Block Expiration Warning";
/// EC2's warning, two minutes ahead, that an instance in an interruptible capacity
/// reservation is reclaimed.
pub const RESERVATION_INTERRUPTION: &str = "EC2 Capacity Reservation Instance Interruption Warning";

/// How long EC2 gives a spot instance after its interruption warning.
pub const SPOT_NOTICE: SignedDuration = SignedDuration::from_secs(120);
/// How long before a Capacity Block's end EC2 begins terminating its instances.
pub const CAPACITY_BLOCK_TERMINATION_LEAD: SignedDuration = SignedDuration::from_secs(30 * 60);

/// One event for the instances it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    /// The EventBridge event id.
    pub id: String,
    pub kind: InterruptionKind,
    pub instance_ids: Vec<String>,
    /// When the event happened (its `time`), when it says.
    pub time: Option<Timestamp>,
    /// When the instance goes, when the event says so itself (a scheduled change's
    /// `startTime`, the start of a Capacity Block's terminations).
    pub starts: Option<Timestamp>,
    /// The capacity reservation whose instances all go (a Capacity Block's end).
    pub reservation: Option<String>,
    /// What else the event says, for logs and the condition's message (a state, an event
    /// type code).
    pub detail: String,
}

impl Interruption {
    /// When the instance goes, for an event received at `received`: a spot instance two
    /// minutes after its warning, a stopping instance now, a scheduled change at its start (no
    /// deadline when the event gives none: its drain honours everything until the NodeClaim's
    /// own `terminationGracePeriod`), a Capacity Block when its terminations start.
    pub fn deadline(&self, received: Timestamp) -> Option<Timestamp> {
        let at = self.time.unwrap_or(received);
        match self.kind {
            InterruptionKind::SpotInterruption => at.checked_add(SPOT_NOTICE).ok(),
            InterruptionKind::StateChange => Some(at),
            InterruptionKind::ScheduledChange => self.starts,
            // A Capacity Block's warning gives its end; an interruptible reservation's warning
            // its termination time, else two minutes as for spot.
            InterruptionKind::CapacityReservationEnding => self.starts.or_else(|| {
                self.reservation
                    .is_none()
                    .then(|| at.checked_add(SPOT_NOTICE).ok())?
            }),
            InterruptionKind::RebalanceRecommendation => None,
        }
    }
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
    time: Option<String>,
    #[serde(default)]
    detail: Value,
}

fn text<'a>(detail: &'a Value, key: &str) -> Option<&'a str> {
    detail.get(key).and_then(Value::as_str)
}

/// A time as AWS events write it: RFC 3339 (EventBridge's `time`, EC2's details) or RFC 2822
/// (AWS Health's `startTime`, `Wed, 06 Jan 2027 10:00:00 GMT`).
pub fn event_time(text: &str) -> Option<Timestamp> {
    text.parse::<Timestamp>().ok().or_else(|| {
        k8s_openapi::jiff::fmt::rfc2822::parse(text)
            .ok()
            .map(|z| z.timestamp())
    })
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
    let mut starts = None;
    let mut reservation = None;
    let mut detail = String::new();
    let (kind, instance_ids) = match (e.source.as_str(), e.detail_type.as_str()) {
        ("aws.ec2", SPOT_INTERRUPTION) => (InterruptionKind::SpotInterruption, instance()?),
        ("aws.ec2", REBALANCE_RECOMMENDATION) => {
            (InterruptionKind::RebalanceRecommendation, instance()?)
        }
        ("aws.ec2", STATE_CHANGE) => {
            let state = text(&e.detail, "state").unwrap_or_default();
            match state {
                "stopping" | "stopped" | "shutting-down" | "terminated" => {
                    detail = state.to_string();
                    (InterruptionKind::StateChange, instance()?)
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
            starts = text(&e.detail, "startTime").and_then(event_time);
            detail = text(&e.detail, "eventTypeCode")
                .unwrap_or_default()
                .to_string();
            (InterruptionKind::ScheduledChange, affected_instances(&e)?)
        }
        ("aws.ec2", RESERVATION_INTERRUPTION) => {
            starts = text(&e.detail, "instance-termination-time").and_then(event_time);
            (InterruptionKind::CapacityReservationEnding, instance()?)
        }
        ("aws.ec2", CAPACITY_BLOCK_ENDING | CAPACITY_BLOCK_ENDING_SHORT) => {
            let ends = text(&e.detail, "end-date")
                .or_else(|| text(&e.detail, "end-time"))
                .and_then(event_time);
            starts = ends.and_then(|t| t.checked_sub(CAPACITY_BLOCK_TERMINATION_LEAD).ok());
            reservation = text(&e.detail, "capacity-reservation-id")
                .filter(|r| !r.is_empty())
                .map(str::to_string);
            let ids = affected_instances(&e).unwrap_or_default();
            if ids.is_empty() && reservation.is_none() {
                return Err(MessageError::Malformed(format!(
                    "{CAPACITY_BLOCK_ENDING}: no capacity reservation"
                )));
            }
            (InterruptionKind::CapacityReservationEnding, ids)
        }
        _ => return Err(unknown(None)),
    };
    Ok(Interruption {
        id: e.id.clone(),
        kind,
        instance_ids,
        time: e.time.as_deref().and_then(event_time),
        starts,
        reservation,
        detail,
    })
}

/// The instances an event names in `detail.affectedEntities[].entityValue` (AWS Health) or
/// `detail.instance-ids` / `resources` (EC2).
fn affected_instances(e: &Envelope) -> Result<Vec<String>, MessageError> {
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
        return Err(MessageError::Malformed(format!(
            "{}: no affected instance",
            e.detail_type
        )));
    }
    Ok(ids)
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

/// The body of an AWS Health scheduled change for EC2 instances: an instance retirement
/// starting at `starts` (AWS Health writes RFC 2822 times in `startTime` and `endTime`).
pub fn scheduled_change(
    event_id: &str,
    instance_ids: &[&str],
    time: &str,
    starts: Timestamp,
) -> String {
    let rfc2822 = |t: Timestamp| {
        k8s_openapi::jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&t)
            .unwrap_or_default()
    };
    serde_json::json!({
        "version": "0",
        "id": event_id,
        "detail-type": HEALTH_EVENT,
        "source": "aws.health",
        "account": "123456789012",
        "time": time,
        "region": "us-east-1",
        "resources": instance_ids,
        "detail": {
            "eventArn": format!("arn:aws:health:us-east-1::event/EC2/AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED/{event_id}"),
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "eventScopeCode": "ACCOUNT_SPECIFIC",
            "startTime": rfc2822(starts),
            "endTime": rfc2822(starts.checked_add(SignedDuration::from_hours(1)).unwrap_or(starts)),
            "eventDescription": [{"language": "en_US", "latestDescription": "EC2 has detected degradation of the underlying hardware hosting your instance; it is scheduled for retirement."}],
            "affectedEntities": instance_ids.iter().map(|i| serde_json::json!({"entityValue": i})).collect::<Vec<_>>(),
        },
    })
    .to_string()
}

/// The body of EC2's warning that a Capacity Block ends at `ends` (sent 40 minutes before).
pub fn capacity_block_ending(
    event_id: &str,
    reservation_id: &str,
    ends: Timestamp,
    time: &str,
) -> String {
    ec2_event(
        event_id,
        CAPACITY_BLOCK_ENDING,
        time,
        serde_json::json!({
            "capacity-reservation-id": reservation_id,
            "end-date": ends.to_string(),
        }),
    )
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

    fn at(text: &str) -> Timestamp {
        text.parse().expect("time")
    }

    #[test]
    fn every_kind_is_read_with_its_deadline() {
        let spot = parse(&spot_interruption_warning("e1", "i-1", T)).expect("spot");
        assert_eq!(spot.kind, InterruptionKind::SpotInterruption);
        assert_eq!(spot.instance_ids, vec!["i-1"]);
        assert_eq!(spot.id, "e1");
        // Two minutes from the event's own time, however late it was received.
        assert_eq!(
            spot.deadline(at("2026-01-01T00:01:00Z")),
            Some(at("2026-01-01T00:02:00Z"))
        );
        let r = parse(&rebalance_recommendation("e2", "i-2", T)).expect("rebalance");
        assert_eq!(r.kind, InterruptionKind::RebalanceRecommendation);
        assert_eq!(r.deadline(at(T)), None);
        let s = parse(&state_change("e3", "i-3", "stopping", T)).expect("state");
        assert_eq!(s.kind, InterruptionKind::StateChange);
        assert_eq!(s.detail, "stopping");
        assert_eq!(s.deadline(at("2026-01-01T00:00:05Z")), Some(at(T)));
        let starts = at("2026-01-04T00:00:00Z");
        let h = parse(&scheduled_change("e4", &["i-4", "i-5"], T, starts)).expect("health");
        assert_eq!(h.kind, InterruptionKind::ScheduledChange);
        assert_eq!(h.instance_ids, vec!["i-4", "i-5"]);
        assert_eq!(h.deadline(at(T)), Some(starts), "the retirement's start");
        let ends = at("2026-01-01T01:00:00Z");
        let c = parse(&capacity_block_ending("e5", "cr-0123", ends, T)).expect("block");
        assert_eq!(c.kind, InterruptionKind::CapacityReservationEnding);
        assert_eq!(c.reservation.as_deref(), Some("cr-0123"));
        assert_eq!(
            c.deadline(at(T)),
            Some(at("2026-01-01T00:30:00Z")),
            "EC2 starts terminating 30 minutes before the end"
        );
    }

    /// A scheduled change as AWS Health sends it, written out by hand: RFC 2822 times.
    #[test]
    fn a_documented_health_event_is_read() {
        let body = r#"{"version":"0","id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"AWS Health Event","source":"aws.health","account":"123456789012","time":"2026-01-01T01:27:00Z","region":"us-west-2","resources":["i-abcd1111"],"detail":{"eventArn":"arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_STOP_SCHEDULED/AWS_EC2_INSTANCE_STOP_SCHEDULED_ELASTICSEARCH_EXAMPLE","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_STOP_SCHEDULED","eventTypeCategory":"scheduledChange","startTime":"Sun, 04 Jan 2026 10:00:00 GMT","endTime":"Sun, 04 Jan 2026 11:00:00 GMT","eventDescription":[{"language":"en_US","latestDescription":"A description of the event will be provided here"}],"affectedEntities":[{"entityValue":"i-abcd1111","tags":{"stage":"prod"}}]}}"#;
        let e = parse(body).expect("health");
        assert_eq!(e.instance_ids, vec!["i-abcd1111"]);
        assert_eq!(e.starts, Some(at("2026-01-04T10:00:00Z")));
        assert_eq!(e.detail, "AWS_EC2_INSTANCE_STOP_SCHEDULED");
        // Without a start time it is still a scheduled change, with no deadline of its own.
        let undated = body.replace("\"startTime\":\"Sun, 04 Jan 2026 10:00:00 GMT\",", "");
        let e = parse(&undated).expect("health");
        assert_eq!(e.deadline(at(T)), None);
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
        let issue = scheduled_change("e", &["i-1"], T, at(T)).replace("scheduledChange", "issue");
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
