//! Which existing nodes and planned NodeClaims a pod has been turned away from for good.
//!
//! Nodes only fill up, so a node that cannot take a pod for lack of room cannot take any later
//! pod of the same class either; one that fails a pod's taints, requirements or topology
//! (anti-affinity, hostname spread) fails every pod of the same shape, whatever its size.
//! Remembering that as bit sets keeps planning linear in the number of pods.

use super::super::topology::Violation;

/// Bit sets over existing nodes and NodeClaims.
#[derive(Default, Clone)]
pub(super) struct Rejected {
    pub(super) nodes: Vec<u64>,
    pub(super) claims: Vec<u64>,
}

/// Indices below `n` whose bit is clear in both sets, skipping whole words of set bits at once
/// (most NodeClaims are full for most pods, so most words are all ones).
pub(super) fn clear_bits<'s>(
    a: &'s [u64],
    b: &'s [u64],
    n: usize,
) -> impl Iterator<Item = usize> + 's {
    (0..n.div_ceil(64)).flat_map(move |w| {
        let mut free = !(a.get(w).copied().unwrap_or(0) | b.get(w).copied().unwrap_or(0));
        std::iter::from_fn(move || {
            if free == 0 {
                return None;
            }
            let b = free.trailing_zeros() as usize;
            free &= free - 1;
            Some(w * 64 + b)
        })
        .filter(move |&i| i < n)
    })
}

impl Rejected {
    pub(super) fn absorb(&mut self, other: &Rejected) {
        for (mine, theirs) in [
            (&mut self.nodes, &other.nodes),
            (&mut self.claims, &other.claims),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m |= t;
            }
        }
    }
}

/// Whether bit `i` is set.
pub(super) fn has_bit(set: &[u64], i: usize) -> bool {
    set.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
}

/// The indices below `n` set in neither `a` nor `b`, taken from `only` (ascending) when given:
/// [`clear_bits`] over a known short list of candidates.
pub(super) fn clear_among<'s>(
    only: Option<&'s [usize]>,
    a: &'s [u64],
    b: &'s [u64],
    n: usize,
) -> Box<dyn Iterator<Item = usize> + 's> {
    match only {
        Some(only) => Box::new(
            only.iter()
                .copied()
                .filter(move |&i| i < n && !has_bit(a, i) && !has_bit(b, i)),
        ),
        None => Box::new(clear_bits(a, b, n)),
    }
}

pub(super) fn clear_bit(set: &mut [u64], i: usize) {
    if let Some(w) = set.get_mut(i / 64) {
        *w &= !(1 << (i % 64));
    }
}

/// `a` with the bits of `extra` set too, in `buf` when there are any.
pub(super) fn with_bits<'a>(
    a: &'a [u64],
    extra: Option<&[u64]>,
    buf: &'a mut Vec<u64>,
) -> &'a [u64] {
    let Some(extra) = extra.filter(|e| !e.is_empty()) else {
        return a;
    };
    buf.clear();
    buf.extend(
        (0..a.len().max(extra.len()))
            .map(|w| a.get(w).copied().unwrap_or(0) | extra.get(w).copied().unwrap_or(0)),
    );
    buf
}

pub(super) fn set_bit(set: &mut Vec<u64>, i: usize) {
    if set.len() <= i / 64 {
        set.resize(i / 64 + 1, 0);
    }
    set[i / 64] |= 1 << (i % 64);
}

/// Candidates a search found permanently unsuitable, to record once the search is over.
#[derive(Default)]
pub(super) struct NewRejections {
    /// Rejected whatever the pod's size (taints, requirements, topology): for its shape.
    pub(super) shape: Rejected,
    /// Rejected for lack of room: for its class.
    pub(super) class: Rejected,
}

/// Why a NodeClaim cannot take a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rejection {
    /// Not within the price bound: too full unless it grows by more than allowed. NodeClaims
    /// only fill up, so without growing it never will. `growable` when nothing but room is
    /// missing.
    NoRoom { growable: bool },
    /// Never will: requirements, taints, anti-affinity.
    Never,
    /// Might later: zone spread and affinity change as pods are placed.
    NotNow,
}

impl Rejection {
    pub(super) fn of(v: Violation) -> Rejection {
        if v.is_permanent() {
            Rejection::Never
        } else {
            Rejection::NotNow
        }
    }
}
