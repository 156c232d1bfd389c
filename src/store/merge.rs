//! Merging: the rows of a window read from several places (the memory
//! store's parts and the disk's segment files) summed into one
//! [`QueryResult`] over one set of interned ids.

use std::sync::Arc;

use super::disk::segment::Segment;
use super::{EntryKey, FrameId, Interner, QueryResult, Selection, StackId, ThreadId, ThreadKey};
use crate::shared::{FastMap, Frame, FrameKind};

/// The frame that stands for stacks a query could not keep apart within
/// its memory bound.
pub const BOUND_MARKER: &str = "[stacks merged: query memory bound]";

/// Sums rows from memory and disk.
#[derive(Debug)]
pub struct Merger {
    interner: Interner,
    agg: FastMap<EntryKey, u64>,
    covered: Option<(u64, u64)>,
    /// Bytes the interner and sums may reach; past it, new stacks are
    /// counted under [`BOUND_MARKER`] (the totals stay right).
    max_bytes: usize,
    bound: Option<StackId>,
    /// Value counted under the marker.
    pub merged_for_bound: u64,
}

impl Merger {
    /// An empty merger bounded to `max_bytes`.
    pub fn new(max_bytes: usize) -> Merger {
        Merger {
            interner: Interner::default(),
            agg: FastMap::default(),
            covered: None,
            max_bytes,
            bound: None,
            merged_for_bound: 0,
        }
    }

    fn full(&self) -> bool {
        self.interner.bytes() + self.agg.capacity() * 24 > self.max_bytes
    }

    fn add(&mut self, thread: ThreadId, stack: StackId, value: u64) {
        let key = EntryKey { thread, stack };
        if let Some(v) = self.agg.get_mut(&key) {
            *v += value;
            return;
        }
        self.agg.insert(key, value);
    }

    /// The stack to count under when `full`: the marker alone.
    fn bound_stack(&mut self) -> StackId {
        if let Some(s) = self.bound {
            return s;
        }
        let f = self
            .interner
            .frame(&Frame::new(BOUND_MARKER, FrameKind::Marker));
        let s = self.interner.stack(&[f]);
        self.bound = Some(s);
        s
    }

    fn cover(&mut self, span: Option<(u64, u64)>) {
        if let Some((a, b)) = span {
            self.covered = Some(match self.covered {
                None => (a, b),
                Some((x, y)) => (x.min(a), y.max(b)),
            });
        }
    }

    /// Adds a memory query's rows.
    pub fn add_result(&mut self, r: &QueryResult) {
        self.cover(r.covered);
        let mut frames: FastMap<FrameId, FrameId> = FastMap::default();
        let mut stacks: FastMap<StackId, StackId> = FastMap::default();
        let mut ids = Vec::new();
        for row in &r.rows {
            let t = ThreadKey {
                pid: row.pid.0,
                tid: row.tid.0,
                thread_comm: self.interner.name(&row.thread_comm),
                process_comm: self.interner.name(&row.process_comm),
                unit: self.interner.name(&row.workload.unit),
                container: self.interner.name(&row.workload.container),
                exe: self.interner.name(&row.workload.exe),
                account: 0,
            };
            let thread = self.interner.thread(t);
            let stack = match stacks.get(&row.stack) {
                Some(&s) => s,
                None if self.full() => self.bound_stack(),
                None => {
                    ids.clear();
                    for &f in r.frame_ids(row.stack) {
                        let id = match frames.get(&f) {
                            Some(&id) => id,
                            None => {
                                let id =
                                    r.frame(f).map(|fr| self.interner.frame(fr)).unwrap_or_else(
                                        || self.interner.frame(&Frame::new("?", FrameKind::Marker)),
                                    );
                                frames.insert(f, id);
                                id
                            }
                        };
                        ids.push(id);
                    }
                    let s = self.interner.stack(&ids);
                    stacks.insert(row.stack, s);
                    s
                }
            };
            if Some(stack) == self.bound {
                self.merged_for_bound += row.value;
            }
            self.add(thread, stack, row.value);
        }
    }

    /// Adds the rows of `seg` within `[from_ms, to_ms)` that pass `sel`'s
    /// filters: a slot the window covers partly counts pro rata, as the
    /// memory store's coarse slots do.
    pub fn add_segment(&mut self, seg: &Segment, sel: &Selection, from_ms: u64, to_ms: u64) {
        let b = &seg.body;
        // Each string made an `Arc` once, for names and frames alike.
        let mut arcs: Vec<Option<Arc<str>>> = vec![None; b.strings.len()];
        let mut arc = |i: u32| -> Arc<str> {
            arcs[i as usize]
                .get_or_insert_with(|| Arc::from(seg.string(i)))
                .clone()
        };
        // Per thread: `None` not judged yet; `Some(None)` filtered out.
        let mut threads: Vec<Option<Option<ThreadId>>> = vec![None; b.thread_pid.len()];
        let mut frames: Vec<Option<FrameId>> = vec![None; b.frame_name.len()];
        let mut stacks: Vec<Option<StackId>> = vec![None; b.stack_len.len()];
        let mut ids = Vec::new();
        for (start, len, range) in seg.slots() {
            let (slot_from, slot_to) = (start * 1000, (start + len) * 1000);
            if slot_to <= from_ms || slot_from >= to_ms {
                continue;
            }
            let (a, z) = (slot_from.max(from_ms), slot_to.min(to_ms));
            let (part, whole) = (z - a, slot_to - slot_from);
            for e in range {
                let t = b.entry_thread[e] as usize;
                let thread = *threads[t].get_or_insert_with(|| {
                    let ok = seg.thread_passes(t, sel);
                    ok.then(|| {
                        let key = ThreadKey {
                            pid: b.thread_pid[t],
                            tid: b.thread_tid[t],
                            thread_comm: self.interner.name(&arc(b.thread_comm[t])),
                            process_comm: self.interner.name(&arc(b.thread_process[t])),
                            unit: self.interner.name(&arc(b.thread_unit[t])),
                            container: self.interner.name(&arc(b.thread_container[t])),
                            exe: self.interner.name(&arc(b.thread_exe[t])),
                            account: 0,
                        };
                        self.interner.thread(key)
                    })
                });
                let Some(thread) = thread else { continue };
                let v = b.entry_value[e];
                let v = super::pro_rata(v, part, whole);
                if v == 0 {
                    continue;
                }
                let s = b.entry_stack[e] as usize;
                let stack = match stacks[s] {
                    Some(st) => st,
                    None if self.full() => self.bound_stack(),
                    None => {
                        ids.clear();
                        for &f in seg.stack(s as u32) {
                            let id = *frames[f as usize].get_or_insert_with(|| {
                                let fr = seg.frame(f, &mut arc);
                                self.interner.frame(&fr)
                            });
                            ids.push(id);
                        }
                        let st = self.interner.stack(&ids);
                        stacks[s] = Some(st);
                        st
                    }
                };
                if Some(stack) == self.bound {
                    self.merged_for_bound += v;
                }
                self.add(thread, stack, v);
            }
            self.cover(Some((a / 1000, z.div_ceil(1000))));
        }
    }

    /// The merged rows.
    pub fn finish(mut self) -> QueryResult {
        self.agg.retain(|_, v| *v > 0);
        super::result_of(&self.interner, self.agg, self.covered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::disk::segment::{Builder, ThreadRec, read_body, read_header};

    /// One second of `n` distinct stacks (`main;f{i}`, value i + 1) of one
    /// thread, as a file would hold it.
    fn segment(n: u32) -> Segment {
        let mut b = Builder::new(1);
        let name = b.string("w");
        let t = b.thread(ThreadRec::plain(5, 5, name));
        let main = b.frame(&Frame::new("main", FrameKind::User));
        for i in 0..n {
            let f = b.frame(&Frame::new(format!("f{i}"), FrameKind::User));
            let s = b.stack(&[main, f]);
            b.add(100, 1, t, s, u64::from(i) + 1);
        }
        b.add_total(100, (1..=u64::from(n)).sum());
        b.cover(100, 101);
        let bytes = b.encode("cpu", 0).expect("a segment of one second");
        let mut r = &bytes[..];
        let h = read_header(&mut r, bytes.len() as u64).expect("its header");
        let body = read_body(&mut r, &h).expect("its body");
        Segment::new(h, body)
    }

    fn merged(seg: &Segment, max_bytes: usize) -> (QueryResult, u64) {
        let sel = Selection {
            from: 100,
            to: 101,
            ..Default::default()
        };
        let mut m = Merger::new(max_bytes);
        m.add_segment(seg, &sel, 100_000, 101_000);
        let bounded = m.merged_for_bound;
        (m.finish(), bounded)
    }

    /// Past its bound a query keeps the stacks it has, counts every new one
    /// under the marker, and keeps the total.
    #[test]
    fn past_its_bound_new_stacks_are_counted_under_the_marker() {
        let n = 20_000u32;
        let seg = segment(n);
        let total: u64 = (1..=u64::from(n)).sum();
        let (all, none) = merged(&seg, usize::MAX);
        assert_eq!((all.rows.len(), none), (n as usize, 0));
        let (r, bounded) = merged(&seg, 256 << 10);
        let sum: u64 = r.rows.iter().map(|row| row.value).sum();
        let under_marker: u64 = r
            .rows
            .iter()
            .filter(|row| r.frames(row.stack).any(|f| &*f.name == BOUND_MARKER))
            .map(|row| row.value)
            .sum();
        assert_eq!(sum, total, "the total is kept");
        assert!(
            bounded > 0 && under_marker == bounded,
            "{bounded} counted under the marker, {under_marker} in its row"
        );
        assert!(
            r.rows.len() < n as usize / 2,
            "{} of {n} stacks kept within 256 KiB",
            r.rows.len()
        );
    }
}
