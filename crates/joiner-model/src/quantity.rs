//! Exact Kubernetes quantities.
//!
//! `k8s-openapi`'s `Quantity` is only a string, and the popular parsing crates go through `f64`,
//! which cannot tell `2^63-1` from `2^63-2` and silently rounds. Resource arithmetic in a
//! scheduler has to be exact (a node is full or it is not), so Joiner parses quantities itself
//! into an integer count of nano-units. Values finer than a nano-unit are rounded up, the way
//! Kubernetes rounds a quantity up when it is asked for a coarser scale.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Nano-units per unit.
const NANO: i128 = 1_000_000_000;

/// The largest magnitude accepted, in nano-units: 2^100 is far beyond any real resource
/// (an exbibyte is 2^60 bytes) yet leaves room for sums of many values without overflow.
const MAX_NANOS: i128 = 1 << 100;

/// The notation a quantity was written in; kept so that printed values look like their inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// `Ki`, `Mi`, `Gi`, ... (powers of 1024).
    BinarySI,
    /// `m`, `k`, `M`, `G`, ... (powers of 1000), and plain numbers.
    #[default]
    DecimalSI,
}

/// An exact quantity such as `3920m`, `14481Mi` or `2G`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity {0:?} is empty")]
    Empty(String),
    #[error(
        "quantity {0:?} is not a number with an optional suffix (Ki, Mi, Gi, m, k, M, G, e3, ...)"
    )]
    Syntax(String),
    #[error("quantity {0:?} has an unknown suffix {1:?}")]
    Suffix(String, String),
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// A whole number of units (cores, bytes, pods, devices).
    pub fn from_units(units: i64) -> Self {
        Quantity {
            nanos: units as i128 * NANO,
            format: Format::DecimalSI,
        }
    }

    /// Thousandths of a unit (millicores).
    pub fn from_milli(milli: i64) -> Self {
        Quantity {
            nanos: milli as i128 * (NANO / 1000),
            format: Format::DecimalSI,
        }
    }

    /// A whole number of bytes written in binary notation (`Mi`, `Gi`).
    pub fn from_bytes_binary(bytes: i64) -> Self {
        Quantity {
            nanos: bytes as i128 * NANO,
            format: Format::BinarySI,
        }
    }

    /// The value in nano-units; the exact internal representation.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// Builds a quantity from nano-units, keeping the given notation for printing.
    pub fn from_nanos(nanos: i128, format: Format) -> Self {
        Quantity { nanos, format }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded up (Kubernetes' `MilliValue`).
    pub fn milli_ceil(&self) -> i128 {
        div_ceil(self.nanos, NANO / 1000)
    }

    /// The value in whole units, rounded up (Kubernetes' `Value`).
    pub fn units_ceil(&self) -> i128 {
        div_ceil(self.nanos, NANO)
    }

    /// Sum, saturating far beyond any real resource instead of overflowing.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: self.format,
        }
    }

    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: self.format,
        }
    }

    /// Multiplies by a whole number (replicas, counts), saturating.
    pub fn saturating_mul(self, factor: i64) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_mul(factor as i128),
            format: self.format,
        }
    }

    /// Parses Kubernetes quantity syntax exactly.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        parse(text)
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}
impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nanos.hash(state)
    }
}
impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

impl TryFrom<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;
    fn try_from(
        q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Self, Self::Error> {
        parse(&q.0)
    }
}

impl From<Quantity> for k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    fn from(q: Quantity) -> Self {
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.to_string())
    }
}

/// Multiplier of a suffix, as (numerator in nano-units per unit of mantissa, format).
fn suffix_factor(suffix: &str) -> Option<(i128, Format)> {
    let binary = |shift: u32| Some(((1i128 << shift) * NANO, Format::BinarySI));
    let decimal = |f: i128| Some((f, Format::DecimalSI));
    match suffix {
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "n" => decimal(1),
        "u" => decimal(1_000),
        "m" => decimal(1_000_000),
        "" => decimal(NANO),
        "k" => decimal(NANO * 1_000),
        "M" => decimal(NANO * 1_000_000),
        "G" => decimal(NANO * 1_000_000_000),
        "T" => decimal(NANO * 1_000_000_000_000),
        "P" => decimal(NANO * 1_000_000_000_000_000),
        "E" => decimal(NANO * 1_000_000_000_000_000_000),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Quantity, QuantityError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty(text.to_string()));
    }
    let overflow = || QuantityError::Overflow(text.to_string());
    let syntax = || QuantityError::Syntax(text.to_string());
    let bytes = s.as_bytes();
    let mut i = 0;
    let negative = match bytes[0] {
        b'-' => {
            i += 1;
            true
        }
        b'+' => {
            i += 1;
            false
        }
        _ => false,
    };
    // Mantissa digits, with at most one decimal point.
    let mut mantissa: i128 = 0;
    let mut fraction_digits: u32 = 0;
    let mut digits = 0usize;
    let mut seen_point = false;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            digits += 1;
            // Digits beyond what can matter are dropped, but must still be digits; a long tail
            // of fraction digits only matters for the final round-up.
            if mantissa < MAX_NANOS {
                mantissa = mantissa * 10 + (c - b'0') as i128;
                if seen_point {
                    fraction_digits += 1;
                }
            } else if !seen_point {
                return Err(overflow());
            } else if c != b'0' {
                // A non-zero digit past our precision: round up by one in the last kept place.
                mantissa += 1;
            }
        } else if c == b'.' && !seen_point {
            seen_point = true;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return Err(syntax());
    }
    let rest = &s[i..];
    // Suffix: a decimal exponent (e3, E-2) or an SI suffix.
    let (factor, exponent, format) = if let Some(exp) = rest.strip_prefix(['e', 'E']).filter(|e| {
        !e.is_empty()
            && e.trim_start_matches(['+', '-'])
                .bytes()
                .all(|b| b.is_ascii_digit())
    }) {
        let exp: i32 = exp.parse().map_err(|_| overflow())?;
        if !(-40..=40).contains(&exp) {
            return Err(overflow());
        }
        (NANO, exp, Format::DecimalSI)
    } else {
        match suffix_factor(rest) {
            Some((f, fmt)) => (f, 0, fmt),
            None => {
                if rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'+')
                {
                    return Err(QuantityError::Suffix(text.to_string(), rest.to_string()));
                }
                return Err(syntax());
            }
        }
    };
    // value = mantissa * factor * 10^exponent / 10^fraction_digits, rounded up.
    let mut numerator = mantissa.checked_mul(factor).ok_or_else(overflow)?;
    let mut denominator_exp = fraction_digits as i32 - exponent;
    while denominator_exp < 0 {
        numerator = numerator.checked_mul(10).ok_or_else(overflow)?;
        denominator_exp += 1;
    }
    let nanos = if denominator_exp == 0 {
        numerator
    } else if denominator_exp > 38 {
        i128::from(numerator > 0)
    } else {
        div_ceil(numerator, 10i128.pow(denominator_exp as u32))
    };
    if nanos > MAX_NANOS {
        return Err(overflow());
    }
    Ok(Quantity {
        nanos: if negative { -nanos } else { nanos },
        format,
    })
}

impl fmt::Display for Quantity {
    /// Canonical Kubernetes-style text: the largest suffix that keeps the value whole.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let n = self.nanos.unsigned_abs() as i128;
        if n == 0 {
            return f.write_str("0");
        }
        if self.format == Format::BinarySI && n % NANO == 0 {
            let units = n / NANO;
            const BIN: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            let mut power = 0;
            while power < 6 && units % (1i128 << (10 * (power + 1))) == 0 {
                power += 1;
            }
            return write!(f, "{sign}{}{}", units >> (10 * power), BIN[power]);
        }
        const DEC: [(&str, i128); 10] = [
            ("E", NANO * 1_000_000_000_000_000_000),
            ("P", NANO * 1_000_000_000_000_000),
            ("T", NANO * 1_000_000_000_000),
            ("G", NANO * 1_000_000_000),
            ("M", NANO * 1_000_000),
            ("k", NANO * 1_000),
            ("", NANO),
            ("m", 1_000_000),
            ("u", 1_000),
            ("n", 1),
        ];
        for (suffix, factor) in DEC {
            if n % factor == 0 {
                return write!(f, "{sign}{}{suffix}", n / factor);
            }
        }
        unreachable!("every value is a whole number of nano-units")
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    /// Accepts a string or a number, as the Kubernetes API does (`cpu: 1000`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 500m, 2Gi or 4")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                parse(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                i64::try_from(v)
                    .map(Quantity::from_units)
                    .map_err(|_| E::custom(QuantityError::Overflow(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                // JSON numbers such as 0.5 arrive as floats; their shortest decimal text is
                // what the user wrote, so parse that text exactly.
                parse(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_suffixes_exactly() {
        assert_eq!(q("3920m").milli_ceil(), 3920);
        assert_eq!(q("1").milli_ceil(), 1000);
        assert_eq!(q("14481Mi").units_ceil(), 14481 * 1024 * 1024);
        assert_eq!(q("2G").units_ceil(), 2_000_000_000);
        assert_eq!(q("1.5Gi").units_ceil(), 3 << 29);
        assert_eq!(q("1e3").units_ceil(), 1000);
        assert_eq!(q("1E3").units_ceil(), 1000);
        assert_eq!(q("5e-3").milli_ceil(), 5);
        assert_eq!(q("0.1").milli_ceil(), 100);
        assert_eq!(q(".5").milli_ceil(), 500);
        assert_eq!(q("+2k").units_ceil(), 2000);
        assert_eq!(q("-1").units_ceil(), -1);
        assert_eq!(q("1Ei").units_ceil(), 1 << 60);
        assert_eq!(q("1E").units_ceil(), 1_000_000_000_000_000_000);
    }

    #[test]
    fn distinguishes_large_integers_that_floats_cannot() {
        let a = q("9223372036854775807");
        let b = q("9223372036854775806");
        assert_ne!(a, b);
        assert_eq!(a.units_ceil() - b.units_ceil(), 1);
    }

    #[test]
    fn rounds_sub_nano_values_up() {
        assert_eq!(q("0.0000000001").nanos(), 1);
        assert_eq!(q("1.0000000001").nanos(), NANO + 1);
    }

    #[test]
    fn rejects_garbage_with_the_text() {
        for bad in [
            "",
            "abc",
            "1Qi",
            "--1",
            "1.2.3",
            "Mi",
            "1e",
            "1e99",
            "99999999999999999999999999999999Ei",
        ] {
            let err = Quantity::parse(bad).unwrap_err();
            assert!(
                err.to_string().contains(&format!("{bad:?}")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn prints_canonically_in_the_input_notation() {
        assert_eq!(q("3920m").to_string(), "3920m");
        assert_eq!(q("4000m").to_string(), "4");
        assert_eq!(q("14481Mi").to_string(), "14481Mi");
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("2G").to_string(), "2G");
        assert_eq!(q("2000M").to_string(), "2G");
        assert_eq!(q("1.5").to_string(), "1500m");
        assert_eq!(q("0").to_string(), "0");
        assert_eq!(q("-500m").to_string(), "-500m");
        assert_eq!(q("1.5Gi").to_string(), "1536Mi");
    }

    #[test]
    fn compares_by_value_across_notations() {
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("1G") < q("1Gi"));
        assert_eq!(q("1").max(q("999m")), q("1000m"));
    }

    #[test]
    fn deserializes_numbers_and_strings() {
        let v: Vec<Quantity> = serde_json::from_str(r#"["2Gi", 1000, 0.5]"#).unwrap();
        assert_eq!(v, vec![q("2Gi"), q("1000"), q("500m")]);
    }

    proptest::proptest! {
        #[test]
        fn printing_round_trips(nanos in -(1i128 << 90)..(1i128 << 90), binary: bool) {
            let fmt = if binary { Format::BinarySI } else { Format::DecimalSI };
            let value = Quantity::from_nanos(nanos, fmt);
            proptest::prop_assert_eq!(q(&value.to_string()), value);
        }

        #[test]
        fn parsing_never_panics(s in "\\PC{0,24}") {
            let _ = Quantity::parse(&s);
        }
    }
}
