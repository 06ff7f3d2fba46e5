//! Exact hourly prices.
//!
//! Prices are summed over hundreds of nodes and compared to choose between plans, so they are
//! kept as whole nano-dollars: `0.526 + 0.526` is exactly `1.052`, and two plans of equal cost
//! compare equal regardless of the order their nodes were added in.

use std::fmt;

/// An hourly price in US dollars, held as nano-dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(i64);

const NANO_USD: f64 = 1e9;

impl Price {
    pub const ZERO: Price = Price(0);
    /// Larger than any real price: "no offering".
    pub const MAX: Price = Price(i64::MAX);

    /// Converts a dollar figure from data or a manifest, rounding to the nearest nano-dollar.
    /// Returns `None` for negative, infinite or absurd values.
    pub fn from_usd(usd: f64) -> Option<Price> {
        if !usd.is_finite() || !(0.0..=1e9).contains(&usd) {
            return None;
        }
        Some(Price((usd * NANO_USD).round() as i64))
    }

    pub fn from_nano_usd(nanos: i64) -> Price {
        Price(nanos)
    }

    pub fn nano_usd(self) -> i64 {
        self.0
    }

    /// The price as a float, for output only.
    pub fn as_usd(self) -> f64 {
        self.0 as f64 / NANO_USD
    }

    pub fn saturating_add(self, other: Price) -> Price {
        Price(self.0.saturating_add(other.0))
    }

    pub fn saturating_sub(self, other: Price) -> Price {
        Price(self.0.saturating_sub(other.0))
    }
}

impl std::iter::Sum for Price {
    fn sum<I: Iterator<Item = Price>>(iter: I) -> Price {
        iter.fold(Price::ZERO, Price::saturating_add)
    }
}

impl fmt::Display for Price {
    /// Dollars with trailing zeros trimmed: `0.526`, `1.052`, `12`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1_000_000_000;
        let frac = (self.0 % 1_000_000_000).abs();
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{frac:09}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl serde::Serialize for Price {
    /// A JSON number, as a person writes a price.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_usd())
    }
}

impl<'de> serde::Deserialize<'de> for Price {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let usd = f64::deserialize(d)?;
        Price::from_usd(usd).ok_or_else(|| {
            serde::de::Error::custom(format!("price {usd} is not a non-negative dollar amount"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_exactly() {
        let p = Price::from_usd(0.526).unwrap();
        assert_eq!(p.saturating_add(p).to_string(), "1.052");
        let many: Price = std::iter::repeat_n(Price::from_usd(0.1).unwrap(), 10).sum();
        assert_eq!(many, Price::from_usd(1.0).unwrap());
        assert_eq!(many.to_string(), "1");
        assert_eq!(
            serde_json::to_string(&p.saturating_add(p)).unwrap(),
            "1.052"
        );
    }

    #[test]
    fn rejects_negative_and_non_finite() {
        assert!(Price::from_usd(-1.0).is_none());
        assert!(Price::from_usd(f64::NAN).is_none());
        assert!(Price::from_usd(f64::INFINITY).is_none());
    }
}
