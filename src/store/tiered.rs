//! One event's history as every query sees it: the memory store for the
//! recent minutes and whatever the disk lacks, the disk's files for older
//! seconds, read as one. A window within memory alone is answered exactly
//! as before, with no disk read and no merge.

use std::sync::RwLock;

use super::disk::Archive;
use super::merge::Merger;
use super::{QueryResult, Selection, Store, TimeSlot};

/// Seconds up to which the heat map shows the disk's seconds one by one.
pub const PER_SECOND_UP_TO: u64 = 3600;

/// Gaps shorter than this are not reported. Memory's slots are contiguous
/// within a run (a slot never starts before its predecessor ends) and so
/// are the disk's files, so any missing second was a stop.
const MIN_GAP: u64 = 1;

/// One event's memory store and, when history is kept on disk, its files.
#[derive(Debug, Clone, Copy)]
pub struct EventStore<'a> {
    /// The memory store.
    pub memory: &'a RwLock<Store>,
    /// The archive and the event's name in it.
    pub disk: Option<(&'a Archive, &'static str)>,
}

/// Where a window's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Store seconds, `[from, to)`.
    pub from: u64,
    /// End.
    pub to: u64,
    /// Slot length, seconds.
    pub resolution: u64,
    /// Read from disk (else memory).
    pub disk: bool,
}

/// The parts of a window and its gaps.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Parts with data, oldest first, neighbours of equal source and
    /// resolution joined.
    pub parts: Vec<Part>,
    /// Spans within history and before now that hold no data: emberd was
    /// not recording (stopped, restarting).
    pub gaps: Vec<(u64, u64)>,
}

fn memory(st: &RwLock<Store>, sel: &Selection) -> QueryResult {
    st.read().unwrap_or_else(|e| e.into_inner()).query(sel)
}

/// `[a, b)` minus `holes` (sorted, disjoint).
fn complement(a: u64, b: u64, holes: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = a;
    for &(x, y) in holes {
        if x > at {
            out.push((at, x.min(b)));
        }
        at = at.max(y);
        if at >= b {
            break;
        }
    }
    if at < b {
        out.push((at, b));
    }
    out.retain(|(x, y)| x < y);
    out
}

impl<'a> EventStore<'a> {
    /// A memory store alone.
    pub fn memory_only(memory: &'a RwLock<Store>) -> Self {
        EventStore { memory, disk: None }
    }

    /// Where the disk's part of a window read now ends: at
    /// [`Archive::claims_until`], or later where memory holds nothing (the
    /// seconds before a restart) or holds an account's stacks folded for
    /// its budget (seconds the disk may have written whole; where it has
    /// not, memory still answers).
    fn disk_end(self, archive: &Archive) -> u64 {
        let now = crate::shared::clock::now();
        let (oldest, folded) = {
            let m = self.memory.read().unwrap_or_else(|e| e.into_inner());
            (m.oldest().unwrap_or(now), m.folded_until().unwrap_or(0))
        };
        archive.claims_until(now).max(oldest).max(folded.min(now))
    }

    /// The rows of `sel`: memory's part under a short read lock, the
    /// disk's read from its files, summed.
    pub fn select(self, sel: &Selection) -> QueryResult {
        let Some((archive, event)) = self.disk else {
            return memory(self.memory, sel);
        };
        let (from_ms, to_ms) = sel
            .ms
            .unwrap_or((sel.from.saturating_mul(1000), sel.to.saturating_mul(1000)));
        let disk_to_ms = to_ms.min(self.disk_end(archive).saturating_mul(1000));
        if from_ms >= disk_to_ms
            || archive
                .files(event, from_ms / 1000, disk_to_ms.div_ceil(1000))
                .is_empty()
        {
            return memory(self.memory, sel);
        }
        let mut m = Merger::new(archive.options().query_bytes);
        let claimed = archive.read_into(event, sel, (from_ms, disk_to_ms), &mut m);
        let claimed_ms: Vec<(u64, u64)> = claimed
            .iter()
            .map(|&(a, b)| ((a * 1000).max(from_ms), (b * 1000).min(disk_to_ms)))
            .collect();
        for (a, b) in complement(from_ms, to_ms, &claimed_ms) {
            let part = Selection {
                from: a / 1000,
                to: b.div_ceil(1000),
                ms: Some((a, b)),
                ..sel.clone()
            };
            m.add_result(&memory(self.memory, &part));
        }
        m.finish()
    }

    /// Per-slot totals of `sel`'s window (the heat map): memory's slots
    /// where the disk does not answer, the disk's elsewhere.
    pub fn timeline(self, sel: &Selection) -> Vec<TimeSlot> {
        let mem = || {
            self.memory
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .timeline(sel)
        };
        let Some((archive, event)) = self.disk else {
            return mem();
        };
        let to = sel.to.min(self.disk_end(archive));
        if sel.from >= to {
            return mem();
        }
        let (mut slots, claimed) = archive.timeline(event, sel, sel.from, to, PER_SECOND_UP_TO);
        slots.extend(
            mem()
                .into_iter()
                .filter(|s| !claimed.iter().any(|&(a, b)| a <= s.start && s.start < b)),
        );
        slots.sort_by_key(|s| s.start);
        slots
    }

    /// Where this event's history begins: its oldest file or memory slot.
    pub fn oldest(self) -> Option<u64> {
        let mem = self
            .memory
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .oldest();
        let disk = self.disk.and_then(|(a, e)| a.oldest(e));
        match (mem, disk) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The span of memory's history with rows passing `sel`'s filters
    /// (see [`Store::seen`]).
    pub fn seen(self, sel: &Selection) -> Option<(u64, u64)> {
        self.memory
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .seen(sel)
    }

    /// Where `[from, to)` is read from, at which resolution, and where it
    /// has no data (up to `now`).
    pub fn layout(self, from: u64, to: u64, now: u64) -> Layout {
        let mut parts: Vec<Part> = Vec::new();
        let mut claimed = Vec::new();
        if let Some((archive, event)) = self.disk {
            let end = to.min(self.disk_end(archive));
            for f in archive.files(event, from, end) {
                claimed.push((f.start.max(from), f.end().min(end)));
            }
            for (a, b, r) in archive.layout(event, from, end) {
                parts.push(Part {
                    from: a,
                    to: b,
                    resolution: r,
                    disk: true,
                });
            }
        }
        let claimed = super::disk::segment::merge_spans(claimed);
        let spans = self
            .memory
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .spans(from, to);
        for (s, l) in spans {
            if claimed.iter().any(|&(a, b)| a <= s && s < b) {
                continue;
            }
            parts.push(Part {
                from: s.max(from),
                to: (s + l).min(to),
                resolution: l,
                disk: false,
            });
        }
        parts.sort_by_key(|p| p.from);
        let mut joined: Vec<Part> = Vec::new();
        for p in parts {
            match joined.last_mut() {
                Some(last)
                    if last.disk == p.disk
                        && last.resolution == p.resolution
                        && p.from <= last.to + MIN_GAP =>
                {
                    last.to = last.to.max(p.to)
                }
                _ => joined.push(p),
            }
        }
        let start = self.oldest().unwrap_or(now);
        let covered: Vec<(u64, u64)> = joined.iter().map(|p| (p.from, p.to)).collect();
        let covered = super::disk::segment::merge_spans(covered);
        let gaps = complement(from.max(start), to.min(now), &covered)
            .into_iter()
            .filter(|(a, b)| b - a >= MIN_GAP)
            .collect();
        Layout {
            parts: joined,
            gaps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complement_leaves_what_holes_do_not_cover() {
        assert_eq!(complement(0, 10, &[]), vec![(0, 10)]);
        assert_eq!(complement(0, 10, &[(2, 4), (6, 12)]), vec![(0, 2), (4, 6)]);
        assert_eq!(complement(5, 10, &[(0, 6)]), vec![(6, 10)]);
        assert_eq!(complement(5, 10, &[(0, 20)]), vec![]);
    }
}
