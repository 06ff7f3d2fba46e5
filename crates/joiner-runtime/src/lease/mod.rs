//! Joiner's own Lease election, in three parts: the [`Elector`], a pure state machine fed
//! observations of the Lease with the local monotonic instant of each; the [`Fence`] it keeps,
//! which every write asks "do I still lead right now, and until when may this write take?"
//! ([`FencedStore`], [`FencedCloud`], [`FencedQueue`]); and
//! the [`campaign`] that reads and writes the Lease on the API server.

mod api;
mod elector;
mod fence;
mod fenced;

pub(crate) use api::list_named;
pub use api::{LeaseApi, campaign};
pub use elector::{Elector, LeaseRecord, Next, Standing, Timings};
pub use fence::{Fence, IN_FLIGHT_MARGIN, ManualTicker, Revoked, SystemTicker, Ticker};
pub use fenced::{FencedCloud, FencedQueue, FencedStore};

/// Where this replica stands in the election, as the loop sees it. The election only ever moves
/// it forward: waiting, leading, lost; the loops see it through [`crate::rivals::gate`], which
/// turns leading back to waiting while another controller runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Another replica holds the Lease (or nobody yet): do not step.
    Waiting,
    /// This replica holds the Lease: step.
    Leading,
    /// This replica held the Lease and lost it: stop, and exit.
    Lost,
}
