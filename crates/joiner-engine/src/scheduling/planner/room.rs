//! Which NodeClaims lack room for a pod, answered for all of them at once.
//!
//! A NodeClaim outside the growth window keeps its instance type, so a pod it has no room
//! for is turned away after reading a few numbers ([`super::Planner::claim_has_room`]). That
//! still visits every NodeClaim for every pod, and when every pod is of a kind of its own
//! (each workload with its own labels and anti-affinity, say) nothing learned for one pod
//! carries to the next: a plan of 20,000 pods made 260 million such visits.
//!
//! Here, per resource, a few thresholds are taken from the requests of the plan's pods, and
//! for each a bit set of the NodeClaims with less than that left at their chosen type. A pod
//! requesting at least a threshold fits none of that set's NodeClaims, so the union over its
//! resources is a set of NodeClaims it has no room on, read a word (64 NodeClaims) at a time.
//! The sets only ever name NodeClaims without room: a NodeClaim is in them only while its
//! recorded room is below the threshold, and its room is recorded again whenever it changes.

use super::rejections::{clear_bit, set_bit};

/// Thresholds per resource: at most this many, so updating a NodeClaim stays cheap.
const MAX_THRESHOLDS: usize = 8;

#[derive(Debug, Default, Clone)]
pub(super) struct RoomIndex {
    /// Per resource: ascending positive request sizes.
    thresholds: Vec<Vec<i128>>,
    /// Per resource and threshold: NodeClaims with less than it left.
    short: Vec<Vec<Vec<u64>>>,
}

impl RoomIndex {
    /// Thresholds from the pods' requests (`width` resources each): every distinct positive
    /// size of a resource, or evenly spaced ones among them when there are more.
    pub(super) fn new(requests: &[Vec<i128>], width: usize) -> RoomIndex {
        let mut thresholds = Vec::with_capacity(width);
        for d in 0..width {
            let mut sizes: Vec<i128> = requests
                .iter()
                .filter_map(|r| r.get(d).copied())
                .filter(|&r| r > 0)
                .collect();
            sizes.sort_unstable();
            sizes.dedup();
            if sizes.len() > MAX_THRESHOLDS {
                let n = sizes.len();
                sizes = (0..MAX_THRESHOLDS)
                    .map(|i| sizes[i * n / MAX_THRESHOLDS])
                    .collect();
            }
            thresholds.push(sizes);
        }
        let short = thresholds
            .iter()
            .map(|t| vec![Vec::new(); t.len()])
            .collect();
        RoomIndex { thresholds, short }
    }

    /// Records what NodeClaim `c` has left at its chosen type, per resource; `None`: no type
    /// chosen, so nothing is known to be short.
    pub(super) fn note(&mut self, c: usize, left: Option<&[i128]>) {
        for (d, (thresholds, short)) in self.thresholds.iter().zip(&mut self.short).enumerate() {
            let left = left.and_then(|l| l.get(d).copied());
            for (t, set) in thresholds.iter().zip(short.iter_mut()) {
                if left.is_some_and(|l| l < *t) {
                    set_bit(set, c);
                } else {
                    clear_bit(set, c);
                }
            }
        }
    }

    /// The NodeClaims without room for a pod requesting `request`, into `out` (cleared
    /// first): a subset of those without room, never one with room.
    pub(super) fn short_of(&self, request: &[i128], out: &mut Vec<u64>) {
        out.clear();
        for ((thresholds, short), &r) in self.thresholds.iter().zip(&self.short).zip(request) {
            if r <= 0 {
                continue;
            }
            // The largest threshold the request reaches: less left than it is less than the
            // request.
            let k = thresholds.partition_point(|&t| t <= r);
            let Some(set) = k.checked_sub(1).and_then(|k| short.get(k)) else {
                continue;
            };
            if out.len() < set.len() {
                out.resize(set.len(), 0);
            }
            for (o, s) in out.iter_mut().zip(set) {
                *o |= s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::planner::rejections::has_bit;

    #[test]
    fn only_nodeclaims_short_of_the_request_are_named() {
        // Two resources; pods ask for 1, 2 or 4 of the first and 10 of the second.
        let requests = vec![vec![1, 10], vec![2, 10], vec![4, 10]];
        let mut index = RoomIndex::new(&requests, 2);
        index.note(0, Some(&[3, 100])); // room for 1 and 2, not 4
        index.note(1, Some(&[8, 5])); // short of the second resource
        index.note(2, None); // no type chosen: never named
        let mut out = Vec::new();
        index.short_of(&[4, 10], &mut out);
        assert!(has_bit(&out, 0) && has_bit(&out, 1) && !has_bit(&out, 2));
        index.short_of(&[2, 0], &mut out);
        assert!(!has_bit(&out, 0) && !has_bit(&out, 1));
        // A request between thresholds uses the one below it: 3 is short only where less
        // than 2 is left.
        index.short_of(&[3, 0], &mut out);
        assert!(!has_bit(&out, 0));
        // Room recorded again clears what no longer holds.
        index.note(1, Some(&[8, 50]));
        index.short_of(&[4, 10], &mut out);
        assert!(!has_bit(&out, 1));
    }
}
