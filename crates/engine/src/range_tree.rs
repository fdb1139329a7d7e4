//! range_tree: a set of disjoint byte ranges (OpenZFS's range_tree.c), held as start -> end.
//!
//! Ranges that touch are always joined, so a range the tree holds whole lies in one segment.
//! `add` refuses a range that overlaps what the tree holds and `remove` one it does not hold
//! whole, leaving the tree as it was: the caller says what that means (the allocator: a
//! double free or a corrupt space map; the log space map replay: a range changed twice).
//! `clear` takes away whatever part of a range is held, and `remove_xor_add` moves a range
//! between two trees as OpenZFS's range_tree_remove_xor_add_segment does.

use std::collections::BTreeMap;
use std::fmt;

/// A change the tree refuses (nothing was changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// `add` of `start+len`, which overlaps the segment `seg_start..seg_end` held already.
    Overlaps { start: u64, len: u64, seg_start: u64, seg_end: u64 },
    /// `remove` of `start+len`, which the tree does not hold whole.
    NotHeld { start: u64, len: u64 },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RangeError::Overlaps { start, len, seg_start, seg_end } => {
                write!(f, "{start:#x}+{len:#x} overlaps {seg_start:#x}..{seg_end:#x}, held already")
            }
            RangeError::NotHeld { start, len } => write!(f, "{start:#x}+{len:#x} is not held whole"),
        }
    }
}

/// Disjoint half-open segments, start -> end, joined where they touch.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct RangeTree(BTreeMap<u64, u64>);

impl RangeTree {
    pub fn new() -> RangeTree {
        RangeTree::default()
    }

    /// A tree holding `[start, start + len)`.
    pub fn with_range(start: u64, len: u64) -> RangeTree {
        let mut t = RangeTree::new();
        if len > 0 {
            t.0.insert(start, start + len);
        }
        t
    }

    /// A tree of `ranges` (start, length), refused where two overlap.
    pub fn from_ranges(ranges: &[(u64, u64)]) -> Result<RangeTree, RangeError> {
        let mut t = RangeTree::new();
        for &(s, l) in ranges {
            t.add(s, l)?;
        }
        Ok(t)
    }

    /// Add `[start, start + len)`, joined with the segments it touches. Refused when it
    /// overlaps a segment held already.
    #[inline]
    pub fn add(&mut self, start: u64, len: u64) -> Result<(), RangeError> {
        if len == 0 {
            return Ok(());
        }
        let (mut s, mut e) = (start, start + len);
        let before = self.0.range(..=start).next_back().map(|(&a, &b)| (a, b));
        if let Some((ps, pe)) = before.filter(|&(_, pe)| pe > start) {
            return Err(RangeError::Overlaps { start, len, seg_start: ps, seg_end: pe });
        }
        let after = self.0.range(start..).next().map(|(&a, &b)| (a, b));
        if let Some((ns, ne)) = after.filter(|&(ns, _)| ns < e) {
            return Err(RangeError::Overlaps { start, len, seg_start: ns, seg_end: ne });
        }
        if let Some((ps, _)) = before.filter(|&(_, pe)| pe == start) {
            s = ps;
            self.0.remove(&ps);
        }
        if let Some((ns, ne)) = after.filter(|&(ns, _)| ns == e) {
            e = ne;
            self.0.remove(&ns);
        }
        self.0.insert(s, e);
        Ok(())
    }

    /// Remove `[start, start + len)`, which the tree must hold whole (what is left of its
    /// segment on either side stays).
    #[inline]
    pub fn remove(&mut self, start: u64, len: u64) -> Result<(), RangeError> {
        if len == 0 {
            return Ok(());
        }
        let end = start + len;
        let Some((ps, pe)) = self.segment_at(start).filter(|&(_, pe)| pe >= end) else {
            return Err(RangeError::NotHeld { start, len });
        };
        if ps < start {
            self.0.insert(ps, start);
        } else {
            self.0.remove(&ps);
        }
        if end < pe {
            self.0.insert(end, pe);
        }
        Ok(())
    }

    /// Remove whatever parts of `[start, start + len)` the tree holds (range_tree_clear).
    pub fn clear(&mut self, start: u64, len: u64) {
        for (a, b) in self.overlap(start, len) {
            self.remove(a, b - a).expect("a held part is held");
        }
    }

    /// range_tree_remove_xor_add_segment: the parts of `[start, start + len)` held here are
    /// removed, the rest is added to `to`. Refused when `to` holds some of the rest (the same
    /// space changed twice the same way); the first such part is named.
    pub fn remove_xor_add(&mut self, start: u64, len: u64, to: &mut RangeTree) -> Result<(), RangeError> {
        let held = self.overlap(start, len);
        self.clear(start, len);
        let mut pos = start;
        let mut first_err = None;
        for (a, b) in held.into_iter().chain([(start + len, start + len)]) {
            if pos < a {
                if let Err(e) = to.add(pos, a - pos) {
                    first_err.get_or_insert(e);
                }
            }
            pos = b;
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The parts of `[start, start + len)` the tree holds, as (start, end), in order.
    pub fn overlap(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let end = start + len;
        let from = self.0.range(..=start).next_back().map_or(start, |(&a, _)| a);
        self.0.range(from..end).map(|(&a, &b)| (a.max(start), b.min(end))).filter(|(a, b)| a < b).collect()
    }

    /// Whether the tree holds all of `[start, start + len)`.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        self.segment_at(start).is_some_and(|(_, e)| e >= start + len)
    }

    /// Whether the tree holds any of `[start, start + len)`.
    pub fn intersects(&self, start: u64, len: u64) -> bool {
        len > 0 && self.0.range(..start + len).next_back().is_some_and(|(_, &e)| e > start)
    }

    /// The last segment (start, end) that starts at or before `off` (it holds `off` when it
    /// ends past it).
    #[inline]
    pub fn segment_at(&self, off: u64) -> Option<(u64, u64)> {
        self.0.range(..=off).next_back().map(|(&a, &b)| (a, b))
    }

    /// The segments (start, end), in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&s, &e)| (s, e))
    }

    /// The segments (start, end) that start in `[from, to)`, in order.
    pub fn iter_starting_in(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.range(from..to).map(|(&s, &e)| (s, e))
    }

    /// The first segment, in order, at least `len` long: its start.
    #[inline]
    pub fn first_fit(&self, len: u64) -> Option<u64> {
        self.0.iter().find(|(&s, &e)| e - s >= len).map(|(&s, _)| s)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many segments.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(v: &[(u64, u64)]) -> RangeTree {
        RangeTree::from_ranges(v).unwrap()
    }

    fn segs(t: &RangeTree) -> Vec<(u64, u64)> {
        t.iter().collect()
    }

    #[test]
    fn adjacent_ranges_join() {
        let mut t = tree(&[(0x1000, 0x1000), (0x3000, 0x1000)]);
        assert_eq!(segs(&t), vec![(0x1000, 0x2000), (0x3000, 0x4000)]);
        // Touching on both sides: one segment.
        t.add(0x2000, 0x1000).unwrap();
        assert_eq!(segs(&t), vec![(0x1000, 0x4000)]);
        // Touching on one side only.
        t.add(0x4000, 0x800).unwrap();
        t.add(0x800, 0x800).unwrap();
        t.add(0x8000, 0x100).unwrap();
        assert_eq!(segs(&t), vec![(0x800, 0x4800), (0x8000, 0x8100)]);
        assert_eq!(t.len(), 2);
        // A remove in the middle splits; one at an edge trims; a whole segment goes.
        t.remove(0x2000, 0x1000).unwrap();
        t.remove(0x800, 0x800).unwrap();
        t.remove(0x8000, 0x100).unwrap();
        assert_eq!(segs(&t), vec![(0x1000, 0x2000), (0x3000, 0x4800)]);
        assert!(t.contains(0x3000, 0x1800) && !t.contains(0x1800, 0x1000));
        assert!(t.intersects(0x1800, 0x1000) && !t.intersects(0x2000, 0x1000));
        assert_eq!(t.first_fit(0x1001), Some(0x3000));
        assert_eq!(t.first_fit(0x2000), None);
        // Zero length changes nothing.
        t.add(0x2000, 0).unwrap();
        t.remove(0x9000, 0).unwrap();
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn double_add_and_remove_of_what_is_not_held_are_refused() {
        let mut t = tree(&[(0x1000, 0x2000), (0x5000, 0x1000)]);
        let before = t.clone();
        // The same range again, a part of it, and ranges overlapping either end.
        for (s, l, seg) in [(0x1000, 0x2000, 0x1000), (0x1800, 0x200, 0x1000), (0x800, 0x1000, 0x1000), (0x2800, 0x1000, 0x1000), (0x4000, 0x1800, 0x5000), (0, 0x10000, 0x1000)] {
            match t.add(s, l) {
                Err(RangeError::Overlaps { start, len, seg_start, .. }) => assert_eq!((start, len, seg_start), (s, l, seg), "{s:#x}+{l:#x}"),
                r => panic!("add {s:#x}+{l:#x}: {r:?}"),
            }
        }
        // Removes of space not held, held in part, or spanning two segments.
        for (s, l) in [(0x3000, 0x1000), (0x2800, 0x1000), (0x800, 0x1000), (0x1000, 0x5000), (0x7000, 0x1)] {
            assert_eq!(t.remove(s, l), Err(RangeError::NotHeld { start: s, len: l }));
        }
        assert_eq!(t, before, "a refused change leaves the tree as it was");
        t.remove(0x1000, 0x2000).unwrap();
        assert!(t.remove(0x1000, 0x2000).is_err(), "the second remove is refused");
        assert!(RangeError::NotHeld { start: 0x1000, len: 0x2000 }.to_string().contains("0x1000+0x2000"));
    }

    #[test]
    fn partial_overlap_clears_and_moves_only_what_is_held() {
        let mut t = tree(&[(0x1000, 0x1000), (0x3000, 0x1000), (0x6000, 0x1000)]);
        assert_eq!(t.overlap(0x1800, 0x2000), vec![(0x1800, 0x2000), (0x3000, 0x3800)]);
        t.clear(0x1800, 0x2000);
        assert_eq!(segs(&t), vec![(0x1000, 0x1800), (0x3800, 0x4000), (0x6000, 0x7000)]);
        t.clear(0x8000, 0x1000);
        assert_eq!(t.len(), 3);
        // remove_xor_add: held parts leave `t`, the gaps go to `to`.
        let mut to = tree(&[(0x9000, 0x1000)]);
        t.remove_xor_add(0x1000, 0x6000, &mut to).unwrap();
        assert!(t.is_empty());
        assert_eq!(segs(&to), vec![(0x1800, 0x3800), (0x4000, 0x6000), (0x9000, 0xa000)]);
        // The gap of a second move is held by `to` already: refused, named.
        let mut t2 = RangeTree::with_range(0x2000, 0x800);
        let err = t2.remove_xor_add(0x1800, 0x2000, &mut to).unwrap_err();
        assert_eq!(err, RangeError::Overlaps { start: 0x1800, len: 0x800, seg_start: 0x1800, seg_end: 0x3800 });
    }
}
