//! Where sampled allocations are kept until freed: malloc's in-use view
//! (the memory-leak flame graph) at any moment of the retained history.
//!
//! The allocated view is a sum over a window and lives in an ordinary
//! [`Store`]. In use is a state: the sampled allocations made before the
//! window's end and not freed by then. So every sampled allocation is kept
//! as a record with the second it was drained in and, once freed, the
//! second of its free; freed records are dropped once their free leaves the
//! retention. The count of records is bounded (`malloc_live_entries`):
//! freed records go first, then new samples are refused and counted.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::{QueryResult, Selection, Store, StoreOptions};
use crate::shared::Frame;
use crate::shared::Pid;
use crate::symbolize::SymbolizedSample;

/// One change to the sampled heap, named.
#[derive(Debug, Clone)]
pub enum Change {
    /// A sampled allocation: its thread and stack, weighed bytes in `count`.
    Alloc {
        /// The allocating thread and its stack; `count` is weighed bytes.
        sample: SymbolizedSample,
        /// Weighed objects.
        objects: u64,
        /// The address returned.
        addr: u64,
    },
    /// The free of a sampled allocation.
    Free {
        /// The process.
        pid: Pid,
        /// The address freed.
        addr: u64,
    },
}

/// One sampled allocation.
#[derive(Debug, Clone)]
pub struct Record {
    pid: Pid,
    tid: crate::shared::Tid,
    thread_comm: Arc<str>,
    process_comm: Arc<str>,
    workload: crate::shared::Workload,
    /// Shared with every record of the same stack.
    frames: Arc<[Frame]>,
    bytes: u64,
    objects: u64,
    alloc_at: u64,
    /// u64::MAX while live.
    freed_at: u64,
}

/// Figures of the live heap, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Sampled allocations not freed.
    pub live: usize,
    /// Freed records kept for queries of the past.
    pub freed: usize,
    /// Samples refused because the table was full (cumulative).
    pub overflow: u64,
    /// Frees of addresses not tracked here (sampled before the daemon
    /// started, or refused).
    pub unmatched_frees: u64,
    /// Approximate bytes held.
    pub bytes: usize,
}

/// Sampled allocations, live and recently freed.
#[derive(Debug)]
pub struct LiveHeap {
    live: HashMap<(Pid, u64), Record>,
    freed: VecDeque<Record>,
    /// One copy of each stack's frames, shared by its records.
    stacks: HashSet<Arc<[Frame]>>,
    max_records: usize,
    retention: Duration,
    overflow: u64,
    unmatched_frees: u64,
}

/// Approximate bytes of one record besides its stack.
const RECORD_BYTES: usize = 160;

impl LiveHeap {
    /// An empty heap of at most `max_records` records, keeping freed ones
    /// for `retention`.
    pub fn new(max_records: usize, retention: Duration) -> Self {
        Self {
            live: HashMap::new(),
            freed: VecDeque::new(),
            stacks: HashSet::new(),
            max_records: max_records.max(1),
            retention,
            overflow: 0,
            unmatched_frees: 0,
        }
    }

    fn intern(&mut self, frames: Vec<Frame>) -> Arc<[Frame]> {
        let arc: Arc<[Frame]> = frames.into();
        match self.stacks.get(&arc) {
            Some(s) => s.clone(),
            None => {
                self.stacks.insert(arc.clone());
                arc
            }
        }
    }

    /// Applies one drain's changes, drained at second `at` (unix).
    pub fn apply(&mut self, at: u64, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::Alloc {
                    sample,
                    objects,
                    addr,
                } => {
                    if self.live.len() + self.freed.len() >= self.max_records
                        && self.freed.pop_front().is_none()
                    {
                        self.overflow += 1;
                        continue;
                    }
                    let key = (sample.pid, addr);
                    let record = Record {
                        pid: sample.pid,
                        tid: sample.tid,
                        thread_comm: sample.thread_comm,
                        process_comm: sample.process_comm,
                        workload: sample.workload,
                        frames: self.intern(sample.frames),
                        bytes: sample.count,
                        objects,
                        alloc_at: at,
                        freed_at: u64::MAX,
                    };
                    // The same address again: its free was not seen (lost
                    // record); it is not in use any more.
                    if let Some(mut old) = self.live.insert(key, record) {
                        old.freed_at = at;
                        self.freed.push_back(old);
                    }
                }
                Change::Free { pid, addr } => match self.live.remove(&(pid, addr)) {
                    // Allocated and freed within one drain: never in use
                    // at a second's end.
                    Some(r) if r.alloc_at >= at => {}
                    Some(mut r) => {
                        r.freed_at = at;
                        self.freed.push_back(r);
                    }
                    None => self.unmatched_frees += 1,
                },
            }
        }
        let horizon = at.saturating_sub(self.retention.as_secs());
        while self.freed.front().is_some_and(|r| r.freed_at < horizon) {
            self.freed.pop_front();
        }
        self.collect_stacks();
    }

    /// Drops records of processes that no longer exist: their memory is
    /// gone with them. `alive` says whether a process still runs.
    pub fn forget_processes(&mut self, at: u64, alive: impl Fn(Pid) -> bool) {
        let pids: HashSet<Pid> = self.live.keys().map(|(pid, _)| *pid).collect();
        let dead: HashSet<Pid> = pids.into_iter().filter(|p| !alive(*p)).collect();
        if dead.is_empty() {
            return;
        }
        let gone: Vec<(Pid, u64)> = self
            .live
            .keys()
            .filter(|(pid, _)| dead.contains(pid))
            .copied()
            .collect();
        for key in gone {
            if let Some(mut r) = self.live.remove(&key) {
                r.freed_at = at;
                self.freed.push_back(r);
            }
        }
    }

    /// Drops shared stacks no record holds any more.
    fn collect_stacks(&mut self) {
        if self.stacks.len() > 2 * (self.live.len() + self.freed.len()) / 3 + 64 {
            self.stacks.retain(|s| Arc::strong_count(s) > 1);
        }
    }

    /// The sampled allocations in use at second `end` (made before it, not
    /// freed by then): cheap copies, to be turned into rows by [`in_use`]
    /// once the heap's lock is released.
    pub fn live_at(&self, end: u64) -> Vec<Record> {
        self.live
            .values()
            .chain(self.freed.iter())
            .filter(|r| r.alloc_at < end && r.freed_at >= end)
            .cloned()
            .collect()
    }

    /// Figures for `/metrics`.
    pub fn stats(&self) -> HeapStats {
        let stack_bytes: usize = self
            .stacks
            .iter()
            .map(|s| {
                s.len() * std::mem::size_of::<Frame>()
                    + s.iter().map(|f| f.name.len()).sum::<usize>()
            })
            .sum();
        HeapStats {
            live: self.live.len(),
            freed: self.freed.len(),
            overflow: self.overflow,
            unmatched_frees: self.unmatched_frees,
            bytes: (self.live.len() + self.freed.len()) * RECORD_BYTES + stack_bytes,
        }
    }
}

/// The rows of `records` (from [`LiveHeap::live_at`] at `sel.to`) that
/// `sel` selects, as (bytes, objects), filtered like any query.
pub fn in_use(records: &[Record], sel: &Selection) -> (QueryResult, QueryResult) {
    let end = sel.to;
    let at = end.saturating_sub(1);
    let one = Selection {
        from: at,
        to: end,
        ..sel.clone()
    };
    let build = |value: fn(&Record) -> u64| {
        let mut store = Store::new(StoreOptions {
            retention: Duration::from_secs(u32::MAX as u64),
            memory_budget: usize::MAX / 4,
            ..Default::default()
        });
        let samples: Vec<SymbolizedSample> = records
            .iter()
            .map(|r| SymbolizedSample {
                pid: r.pid,
                tid: r.tid,
                thread_comm: r.thread_comm.clone(),
                process_comm: r.process_comm.clone(),
                frames: r.frames.to_vec(),
                workload: r.workload.clone(),
                account: 0,
                count: value(r),
                at_ms: None,
            })
            .collect();
        store.insert(at, &samples);
        store.query(&one)
    };
    (build(|r| r.bytes), build(|r| r.objects))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::FrameKind;
    use crate::shared::Tid;

    fn alloc(pid: u32, addr: u64, bytes: u64, func: &str) -> Change {
        Change::Alloc {
            sample: SymbolizedSample {
                pid: Pid(pid),
                tid: Tid(pid),
                thread_comm: "t".into(),
                process_comm: "t".into(),
                frames: vec![Frame::new(func, FrameKind::User)],
                workload: Default::default(),
                account: 0,
                count: bytes,
                at_ms: None,
            },
            objects: 1,
            addr,
        }
    }

    fn total(r: &QueryResult) -> u64 {
        r.rows.iter().map(|r| r.value).sum()
    }

    trait InUse {
        fn in_use(&self, sel: &Selection) -> (QueryResult, QueryResult);
    }

    impl InUse for LiveHeap {
        fn in_use(&self, sel: &Selection) -> (QueryResult, QueryResult) {
            super::in_use(&self.live_at(sel.to), sel)
        }
    }

    fn window(to: u64) -> Selection {
        Selection {
            from: 0,
            to,
            ..Default::default()
        }
    }

    #[test]
    fn in_use_is_what_was_live_at_the_end_of_the_window() {
        let mut h = LiveHeap::new(100, Duration::from_secs(3600));
        h.apply(10, vec![alloc(1, 0x10, 100, "a"), alloc(1, 0x20, 50, "b")]);
        h.apply(
            12,
            vec![Change::Free {
                pid: Pid(1),
                addr: 0x10,
            }],
        );
        // Before anything: nothing. Between: both. After the free: b only.
        assert_eq!(total(&h.in_use(&window(10)).0), 0);
        assert_eq!(total(&h.in_use(&window(11)).0), 150);
        assert_eq!(total(&h.in_use(&window(12)).0), 150);
        assert_eq!(total(&h.in_use(&window(13)).0), 50);
        // Allocated and freed in one drain: never in use.
        h.apply(
            20,
            vec![
                alloc(1, 0x30, 7, "c"),
                Change::Free {
                    pid: Pid(1),
                    addr: 0x30,
                },
            ],
        );
        assert_eq!(total(&h.in_use(&window(21)).0), 50);
        // Same address in another process is another allocation.
        h.apply(
            22,
            vec![Change::Free {
                pid: Pid(2),
                addr: 0x20,
            }],
        );
        assert_eq!(h.stats().unmatched_frees, 1);
        assert_eq!(total(&h.in_use(&window(23)).0), 50);
    }

    #[test]
    fn bounded_freed_first_then_refused_and_counted() {
        let mut h = LiveHeap::new(2, Duration::from_secs(3600));
        h.apply(1, vec![alloc(1, 1, 1, "a"), alloc(1, 2, 1, "a")]);
        h.apply(
            2,
            vec![Change::Free {
                pid: Pid(1),
                addr: 1,
            }],
        );
        h.apply(3, vec![alloc(1, 3, 1, "a")]);
        assert_eq!(
            (h.stats().live, h.stats().freed, h.stats().overflow),
            (2, 0, 0)
        );
        h.apply(4, vec![alloc(1, 4, 1, "a")]);
        assert_eq!(h.stats().overflow, 1);
        assert_eq!(total(&h.in_use(&window(5)).0), 2);
    }

    #[test]
    fn freed_records_leave_with_the_retention() {
        let mut h = LiveHeap::new(10, Duration::from_secs(60));
        h.apply(1, vec![alloc(1, 1, 1, "a")]);
        h.apply(
            2,
            vec![Change::Free {
                pid: Pid(1),
                addr: 1,
            }],
        );
        h.apply(100, vec![]);
        assert_eq!(h.stats().freed, 0);
    }
}
