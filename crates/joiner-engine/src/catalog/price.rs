//! How Joiner knows an offering's price. Offline, Joiner has us-east-1's on-demand prices and
//! an old snapshot of typical spot prices for 93 types, and nothing else: every other figure it
//! plans with is a stand-in, and a plan says which (`priceBasis`, `priceNote`), so that nobody
//! reads an estimate as a quote. Stand-ins keep the order of what Joiner knows: us-east-1's
//! prices rank types much as another region's do, and a spot price is never above on-demand.

use std::fmt;

use serde::Serialize;

/// Where an offering's price comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PriceBasis {
    /// The published price for this region and capacity type (or one the user gave).
    #[default]
    Listed,
    /// A typical spot price from an old snapshot, not a live one.
    SpotSnapshot,
    /// us-east-1's price standing in for another region's, which is not known offline.
    OtherRegion,
    /// No spot price is known offline: the on-demand price stands in as its upper bound.
    OnDemandBound,
    /// No price at all is known offline; the offering is not launched.
    Unknown,
}

impl PriceBasis {
    pub fn is_listed(&self) -> bool {
        *self == PriceBasis::Listed
    }

    /// What a plan says of a price with this basis; `None` for a listed price.
    pub fn note(self) -> Option<&'static str> {
        Some(match self {
            PriceBasis::Listed => return None,
            PriceBasis::SpotSnapshot => {
                "spot price is a typical us-east-1 figure from an old snapshot, not a live one"
            }
            PriceBasis::OtherRegion => {
                "estimated: us-east-1's price, as this region's prices are not known offline"
            }
            PriceBasis::OnDemandBound => {
                "spot price not known offline: the on-demand price stands in as its upper bound"
            }
            PriceBasis::Unknown => "no price known offline: not launched",
        })
    }
}

impl fmt::Display for PriceBasis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PriceBasis::Listed => "listed",
            PriceBasis::SpotSnapshot => "spot-snapshot",
            PriceBasis::OtherRegion => "other-region",
            PriceBasis::OnDemandBound => "on-demand-bound",
            PriceBasis::Unknown => "unknown",
        })
    }
}
