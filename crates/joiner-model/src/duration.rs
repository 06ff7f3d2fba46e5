//! Go-style durations (`1s`, `90m`, `1h30m`, `1.5h`), as Karpenter's settings and CRDs write
//! them. Parsed here so `batchIdleDuration: 10` or `expireAfter: 1d` is rejected when the input
//! is read, not when the value is first used.

use std::time::Duration;

/// Why a duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {reason} (expected e.g. 30s, 10m, 1h30m)")]
pub struct DurationError {
    pub text: String,
    pub reason: &'static str,
}

/// Parses a non-negative Go duration: one or more `<number><unit>` pairs with units `ns`, `us`
/// (or `µs`), `ms`, `s`, `m`, `h`; numbers may have a fraction. A bare `0` is zero, as in Go.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        text: text.to_string(),
        reason,
    };
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s.starts_with('-') {
        return Err(err("negative durations are not allowed"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(num_len);
        if number.is_empty() || number == "." {
            return Err(err("expected a number"));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        total_nanos = total_nanos
            .checked_add(scaled(number, unit_nanos).ok_or_else(|| err("number out of range"))?)
            .ok_or_else(|| err("number out of range"))?;
        rest = next;
    }
    let secs =
        u64::try_from(total_nanos / 1_000_000_000).map_err(|_| err("number out of range"))?;
    // The remainder of a division by 1e9 always fits in u32.
    let nanos = u32::try_from(total_nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// `number` (digits with an optional fraction) times `unit_nanos`, truncated to whole
/// nanoseconds as Go does.
fn scaled(number: &str, unit_nanos: u128) -> Option<u128> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut value = whole.checked_mul(unit_nanos)?;
    let mut scale = unit_nanos;
    for digit in frac.chars() {
        scale /= 10;
        let d = u128::from(digit.to_digit(10)?);
        value = value.checked_add(d.checked_mul(scale)?)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("720h").unwrap(),
            Duration::from_secs(720 * 3600)
        );
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "10", "1d", "-1s", "s", "1.2.3s", "Never"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        let e = parse_duration("1d").unwrap_err();
        assert!(e.to_string().contains("unknown unit"), "{e}");
    }
}
