//! Store: the recent history of samples, in time slots, within a byte budget.
//!
//! Drained samples go into one-second slots: CPU samples by the 20 ms tick
//! they were taken in (each 1 s slot also keeps its samples per tick, so a
//! selection within a second reads exactly its samples), events by the
//! second of their drain. Slots older than
//! [`StoreOptions::fine_for`] are merged into 10 s slots and those older than
//! [`StoreOptions::medium_for`] into 60 s slots, so "the last hour" is about
//! 100 slots to read, not 3600. Slots older than the retention are
//! dropped. Past the estimated budget go, in order: per-tick samples, the
//! pids of exited processes, the stack detail of a user account whose
//! stacks cost over half of the store's (oldest slots first; its time is
//! kept), and the oldest slots; frames and stacks no slot refers to any
//! more are then collected.
//!
//! As time resolution, so identity: when slots merge, samples of processes
//! that have exited (not in the [`LivePids`] the daemon last read) are kept
//! by process and thread name and stack, with pid and tid
//! [`Pid::EXITED`](crate::shared::Pid::EXITED). On a host with process
//! churn every short-lived process otherwise kept its own thread and
//! entries for the hour: hundreds of entries a second in the page-fault
//! store alone, which no budget of a few MiB can hold. Processes that still
//! run keep their pids, so `?pid=` over the hour sees all of a service.

pub mod disk;
pub mod heap;
pub mod history;
mod intern;
pub mod merge;
pub mod metrics;
pub mod tiered;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::shared::FastMap;
pub use history::{History, HistoryOptions};
use intern::DrainMemo;
pub use intern::{FrameId, Interner, NameId, StackId, ThreadId, ThreadKey};

use crate::shared::Frame;
use crate::shared::{Pid, Tid};
use crate::symbolize::SymbolizedSample;

/// The frame that stands for the stacks of a user account folded to make
/// room ([`Store`]'s budget): their time is kept under it, per thread.
pub const FOLDED_FOR_ACCOUNT: &str = "[stacks folded: their user filled the history]";

/// Passes a fold for room takes at most: the account's slots are folded
/// oldest first, a quarter of them a pass, each pass ending in one
/// collection (an interner rebuild), until the store is down to 90%.
const FOLD_PASSES: usize = 4;

/// Defaults of [`StoreOptions`].
pub mod defaults {
    use std::time::Duration;
    /// History kept: one hour.
    pub const RETENTION: Duration = Duration::from_secs(3600);
    /// Estimated bytes the stores may use, all events together: 12 MiB.
    /// On the soak's busy host (`scripts/soak`) the stores held 8.9 MiB
    /// after an hour, CPU samples and off-CPU time for the whole hour; the
    /// event stores that process churn fills (page faults, wakeups) held
    /// about two minutes (docs/BENCHMARKS.md has the figures).
    pub const MEMORY_BUDGET: usize = 12 << 20;
}

/// The processes running when the daemon last looked (`/proc`).
#[derive(Debug, Clone)]
pub struct LivePids {
    pids: std::collections::HashSet<u32, ahash::RandomState>,
    at: u64,
}

impl LivePids {
    /// The pids read at `at` (unix seconds).
    pub fn new(pids: impl IntoIterator<Item = u32>, at: u64) -> Self {
        Self {
            pids: pids.into_iter().collect(),
            at,
        }
    }

    /// Whether a slot ending at `end` (unix seconds) can be judged by this
    /// list: a process that started after the read is not in it, but it
    /// has no samples before the read either.
    fn covers(&self, end: u64) -> bool {
        end <= self.at
    }

    /// Whether `pid` was running at the listing.
    pub fn contains(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }
}

/// Limits and resolution of the store.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// How long samples are kept (default [`defaults::RETENTION`]).
    pub retention: Duration,
    /// Estimated byte budget (default [`defaults::MEMORY_BUDGET`]): when
    /// it is passed, per-tick samples go first (oldest first), then exited
    /// processes' pids, then the stack detail of a user account holding
    /// most of it, then the oldest slots until the store is at 90% of it.
    pub memory_budget: usize,
    /// Age up to which slots stay one second long (default 5 min).
    pub fine_for: Duration,
    /// Age up to which slots are at most 10 s long (default 30 min); older
    /// ones are merged into 60 s slots.
    pub medium_for: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retention: defaults::RETENTION,
            memory_budget: defaults::MEMORY_BUDGET,
            fine_for: Duration::from_secs(FINE_FOR_SECS),
            medium_for: Duration::from_secs(1800),
        }
    }
}

/// What one slot entry counts: a thread with one stack. Eight bytes: the
/// thread and its names are interned once, not repeated in every slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct EntryKey {
    thread: ThreadId,
    stack: StackId,
}

/// Bytes of one entry of a sealed slot (a sorted array).
const SEALED_ENTRY_BYTES: usize = std::mem::size_of::<(EntryKey, u64)>();

/// Seconds after its end at which a slot is sealed: samples are filed by
/// their tick, and a drain may bring a second's last ticks a little late.
pub(crate) const SEAL_AFTER: u64 = 5;

/// Seconds for which 1 s slots keep their per-tick samples (the default
/// [`StoreOptions::fine_for`]); the disk answers only for older seconds.
pub const FINE_FOR_SECS: u64 = 300;

/// Sub-second resolution of the 1 s slots: the BPF sampler's tick.
pub const TICK_MS: u64 = crate::shared::clock::TICK_MS;
/// Ticks in a second.
pub const TICKS: usize = (1000 / TICK_MS) as usize;

/// Samples of one entry within one tick of a 1 s slot.
#[derive(Debug, Clone, Copy)]
struct TickCount {
    key: EntryKey,
    tick: u8,
    count: u32,
}

/// Bytes of one [`TickCount`].
const TICK_BYTES: usize = std::mem::size_of::<TickCount>();

/// Samples of `[start, start + len)` in unix seconds.
#[derive(Debug)]
struct Slot {
    start: u64,
    len: u64,
    /// Entries of a slot still being filled.
    entries: FastMap<EntryKey, u64>,
    /// Entries of a sealed slot, sorted: a third of a hash map's bytes,
    /// which matters for the hour of history (most slots are sealed).
    sealed: Box<[(EntryKey, u64)]>,
    /// The entries split by tick, while `fine` holds.
    ticks: Vec<TickCount>,
    /// Whether `ticks` accounts for every sample of `entries`: not once an
    /// event without a tick landed here, the slot was merged, or the ticks
    /// were dropped to stay within the budget.
    fine: bool,
    /// Whether the threads of exited processes have been folded (see
    /// [`Store::fold_exited`]).
    folded: bool,
}

impl Slot {
    fn new(start: u64, len: u64) -> Self {
        Self {
            start,
            len,
            entries: FastMap::default(),
            sealed: Box::default(),
            ticks: Vec::new(),
            fine: len == 1,
            folded: false,
        }
    }

    fn contains(&self, second: u64) -> bool {
        self.start <= second && second < self.start + self.len
    }

    fn drop_ticks(&mut self) {
        self.fine = false;
        self.ticks = Vec::new();
    }

    /// The key of every entry, sealed or not.
    fn keys(&self) -> impl Iterator<Item = &EntryKey> {
        self.sealed
            .iter()
            .map(|(k, _)| k)
            .chain(self.entries.keys())
    }

    /// Every entry, sealed or not.
    fn iter(&self) -> impl Iterator<Item = (&EntryKey, &u64)> {
        self.entries
            .iter()
            .chain(self.sealed.iter().map(|(k, v)| (k, v)))
    }

    /// The entries, taken out of the slot.
    fn take_entries(&mut self) -> impl Iterator<Item = (EntryKey, u64)> {
        let sealed = std::mem::take(&mut self.sealed);
        std::mem::take(&mut self.entries)
            .into_iter()
            .chain(sealed.into_vec())
    }

    /// A slot that has a sealed part takes entries into its map again.
    fn entry(&mut self, key: EntryKey) -> &mut u64 {
        if !self.sealed.is_empty() {
            let sealed = std::mem::take(&mut self.sealed);
            self.entries.extend(sealed.into_vec());
        }
        self.entries.entry(key).or_insert(0)
    }

    fn seal(&mut self) {
        if self.entries.is_empty() {
            return;
        }
        let mut all: Vec<(EntryKey, u64)> = self.take_entries().collect();
        all.sort_unstable_by_key(|e| e.0);
        self.sealed = all.into_boxed_slice();
        self.ticks.shrink_to_fit();
    }

    /// Estimated bytes of the entries (ticks apart: [`Slot::tick_bytes`]).
    fn entry_bytes(&self) -> usize {
        intern::map_bytes(&self.entries) + self.sealed.len() * SEALED_ENTRY_BYTES
    }

    fn tick_bytes(&self) -> usize {
        self.ticks.capacity() * TICK_BYTES
    }
}

/// Sealed entries with their keys rewritten by `f`, those that become the
/// same summed, sorted as sealed entries are.
fn rekeyed(
    sealed: Box<[(EntryKey, u64)]>,
    mut f: impl FnMut(EntryKey) -> EntryKey,
) -> Box<[(EntryKey, u64)]> {
    if sealed.is_empty() {
        return sealed;
    }
    let mut agg: FastMap<EntryKey, u64> = FastMap::default();
    for (k, v) in sealed.into_vec() {
        *agg.entry(f(k)).or_insert(0) += v;
    }
    let mut all: Vec<(EntryKey, u64)> = agg.into_iter().collect();
    all.sort_unstable_by_key(|e| e.0);
    all.into_boxed_slice()
}

/// One slot's total in a [`Store::timeline`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeSlot {
    /// Unix seconds.
    pub start: u64,
    /// Seconds (1, 10 or 60).
    pub len: u64,
    /// Sum of the slot's values that pass the filters.
    pub value: u64,
    /// The value per [`TICK_MS`] tick ([`TICKS`] of them), for 1 s slots
    /// that keep their samples by tick; empty otherwise.
    pub ticks: Vec<u64>,
}

/// One row of a query result: a thread's stack and its value.
#[derive(Debug, Clone)]
pub struct Row {
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub thread_comm: Arc<str>,
    /// Process name.
    pub process_comm: Arc<str>,
    /// The process's systemd unit, container and executable.
    pub workload: crate::shared::Workload,
    /// The stack.
    pub stack: StackId,
    /// Samples.
    pub value: u64,
}

/// Which samples a query reads; everything else (grouping, frame regexes)
/// happens on the rows.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Unix seconds, inclusive.
    pub from: u64,
    /// Unix seconds, exclusive.
    pub to: u64,
    /// A window finer than seconds, in unix milliseconds `[from, to)`,
    /// within `[from, to)` above: 1 s slots that keep their ticks give
    /// exactly the samples of the ticks starting in it, other slots count
    /// pro rata.
    pub ms: Option<(u64, u64)>,
    /// Only this process.
    pub pid: Option<u32>,
    /// Only this thread.
    pub tid: Option<u32>,
    /// Only processes or threads whose name matches.
    pub comm: Option<regex::Regex>,
    /// Only processes of this systemd unit.
    pub unit: Option<String>,
    /// Only processes of the container whose id starts so.
    pub container: Option<String>,
    /// Only processes of this service (see [`crate::shared::Workload::service`]).
    pub service: Option<String>,
    /// Keep the idle task (pid 0).
    pub idle: bool,
}

impl Selection {
    /// Whether a thread passes the row filters: `names` gives its unit,
    /// container and process name when a filter needs them, `comm` whether
    /// the `comm` regex matches its process or thread name (callers cache
    /// it per pair of names).
    pub fn passes<'n>(
        &self,
        pid: u32,
        tid: u32,
        names: impl FnOnce() -> [&'n str; 3],
        comm: impl FnOnce(&regex::Regex) -> bool,
    ) -> bool {
        if (pid == 0 && !self.idle)
            || self.pid.is_some_and(|p| p != pid)
            || self.tid.is_some_and(|t| t != tid)
        {
            return false;
        }
        if self.unit.is_some() || self.container.is_some() || self.service.is_some() {
            let [unit, container, process] = names();
            if self.unit.as_deref().is_some_and(|u| u != unit)
                || self
                    .container
                    .as_deref()
                    .is_some_and(|c| container.is_empty() || !container.starts_with(c))
                || self.service.as_deref().is_some_and(|s| {
                    !crate::shared::Workload::is_service(unit, container, process, s)
                })
            {
                return false;
            }
        }
        self.comm.as_ref().is_none_or(comm)
    }
}

/// Rows of a query, with copies of the stacks and frames they name.
///
/// It owns what it needs, so the store's lock is held only while the slots
/// are scanned and copied, not while the rows are folded, rendered or encoded
/// (a slow query delays neither the drain nor other queries).
#[derive(Debug, Default)]
pub struct QueryResult {
    /// Matching rows, one per thread and stack.
    pub rows: Vec<Row>,
    /// The part of the window that holds data.
    pub covered: Option<(u64, u64)>,
    stacks: FastMap<StackId, Arc<[FrameId]>>,
    frames: FastMap<FrameId, Frame>,
}

impl QueryResult {
    /// The frames of a stack, root first.
    pub fn frames(&self, stack: StackId) -> impl Iterator<Item = &Frame> {
        self.frame_ids(stack)
            .iter()
            .filter_map(|f| self.frames.get(f))
    }

    /// The interned ids of a stack's frames, root first: a frame shared by
    /// many stacks has one id, so per-frame work can be done once.
    pub fn frame_ids(&self, stack: StackId) -> &[FrameId] {
        self.stacks.get(&stack).map_or(&[], |ids| ids)
    }

    /// The frame an id names.
    pub fn frame(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(&id)
    }
}

/// Size and shape of the store, for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    /// Estimated bytes in use.
    pub bytes: usize,
    /// Slots held.
    pub slots: usize,
    /// Interned stack nodes (a stack and each stack it extends, shared
    /// prefixes once).
    pub stacks: usize,
    /// Of `bytes`, the samples kept per 20 ms tick.
    pub tick_bytes: usize,
    /// Of `bytes`, the interner's tables: frames, stack nodes, names and
    /// their strings, threads.
    pub interner_bytes: [usize; 4],
    /// Slots dropped to stay within the memory budget.
    pub dropped_for_budget: u64,
    /// Slots whose per-tick samples were dropped for the budget (they
    /// keep their per-second totals).
    pub ticks_dropped_for_budget: u64,
    /// Slots whose entries of one user account were folded to
    /// [`FOLDED_FOR_ACCOUNT`] to stay within the budget.
    pub folded_for_account: u64,
    /// Oldest data kept, unix seconds.
    pub oldest: Option<u64>,
}

/// The sample history of one event.
#[derive(Debug)]
pub struct Store {
    options: StoreOptions,
    interner: Interner,
    /// Ids of the drain being inserted by its strings' addresses; empty
    /// between drains.
    memo: DrainMemo,
    slots: VecDeque<Slot>,
    entry_bytes: usize,
    tick_bytes: usize,
    dropped_for_budget: u64,
    ticks_dropped_for_budget: u64,
    folded_for_account: u64,
    /// End (store seconds) of the newest slot folded for an account.
    folded_until: u64,
    dropped_since_gc: usize,
    generation: u64,
    /// Processes running at the last look; `None`: every process is taken
    /// to run (no folding).
    live: Option<std::sync::Arc<LivePids>>,
}

impl Store {
    /// An empty store.
    pub fn new(options: StoreOptions) -> Self {
        Self {
            options,
            interner: Interner::default(),
            memo: DrainMemo::default(),
            slots: VecDeque::new(),
            entry_bytes: 0,
            tick_bytes: 0,
            dropped_for_budget: 0,
            ticks_dropped_for_budget: 0,
            folded_for_account: 0,
            folded_until: 0,
            dropped_since_gc: 0,
            generation: 0,
            live: None,
        }
    }

    /// Sets the processes that run now: samples of others are kept
    /// without their pid and tid when their slots merge.
    pub fn set_live_pids(&mut self, live: std::sync::Arc<LivePids>) {
        self.live = Some(live);
    }

    /// Changes whenever the store's contents change: equal generations and
    /// equal queries give equal answers.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Adds one drain's samples: those with a tick ([`SymbolizedSample::at_ms`])
    /// to the slot of their second (at most `at`), the others to the slot
    /// of second `at` (unix seconds), which is made if missing, so that a
    /// drain with nothing to tell still marks its second as covered.
    pub fn insert(&mut self, at: u64, samples: &[SymbolizedSample]) {
        self.generation += 1;
        if !self
            .slots
            .back()
            .is_some_and(|s| s.start == at && s.len == 1)
        {
            // A slot never starts before its predecessor ends.
            let start = self.slots.back().map_or(at, |s| at.max(s.start + s.len));
            self.slots.push_back(Slot::new(start, 1));
        }
        let mut ids = Vec::new();
        let mut hint = self.slots.len() - 1;
        // Valid while `samples` is borrowed: cleared before this returns.
        let mut memo = std::mem::take(&mut self.memo);
        for s in samples {
            let stack = self.interner.frames_in(&mut memo, &s.frames, &mut ids);
            let thread = ThreadKey {
                pid: s.pid.0,
                tid: s.tid.0,
                thread_comm: self.interner.name_in(&mut memo, &s.thread_comm),
                process_comm: self.interner.name_in(&mut memo, &s.process_comm),
                unit: self.interner.name_in(&mut memo, &s.workload.unit),
                container: self.interner.name_in(&mut memo, &s.workload.container),
                exe: self.interner.name_in(&mut memo, &s.workload.exe),
                account: s.account,
            };
            let key = EntryKey {
                thread: self.interner.thread(thread),
                stack,
            };
            let second = s.at_ms.map_or(at, |ms| (ms / 1000).min(at));
            hint = self.slot_for(second, hint);
            let slot = &mut self.slots[hint];
            *slot.entry(key) += s.count;
            match s.at_ms {
                Some(ms) if slot.fine && slot.len == 1 && ms / 1000 == slot.start => {
                    slot.ticks.push(TickCount {
                        key,
                        tick: ((ms % 1000) / TICK_MS) as u8,
                        count: s.count.min(u32::MAX as u64) as u32,
                    });
                }
                _ if slot.fine => slot.drop_ticks(),
                _ => {}
            }
        }
        memo.clear();
        self.memo = memo;
        self.recount();
        self.compact(at);
    }

    /// The index of the slot holding `second`, made (1 s long) if there is
    /// none; searched backwards from `hint`, as samples come nearly in
    /// order. Seconds before the first slot get a slot of their own.
    fn slot_for(&mut self, second: u64, hint: usize) -> usize {
        let mut i = hint.min(self.slots.len() - 1);
        while i + 1 < self.slots.len() && self.slots[i + 1].start <= second {
            i += 1;
        }
        while i > 0 && self.slots[i].start > second {
            i -= 1;
        }
        let slot = &self.slots[i];
        if slot.contains(second) {
            return i;
        }
        let at = if slot.start > second { i } else { i + 1 };
        self.slots.insert(at, Slot::new(second, 1));
        at
    }

    /// Merges aged slots, drops expired ones, and enforces the budget:
    /// sub-second detail goes first (oldest first), then exited pids, then
    /// the detail of an account holding most of the store, then whole
    /// slots.
    fn compact(&mut self, now: u64) {
        let fine = self.options.fine_for.as_secs();
        let medium = self.options.medium_for.as_secs();
        self.merge_older_than(now.saturating_sub(fine), 10);
        self.merge_older_than(now.saturating_sub(medium), 60);
        let mut sealed_any = false;
        for slot in self.slots.iter_mut().rev() {
            if slot.start + slot.len + SEAL_AFTER > now {
                continue;
            }
            if slot.entries.is_empty() {
                // Slots are sealed in order: the rest are sealed already.
                break;
            }
            slot.seal();
            sealed_any = true;
        }
        if sealed_any {
            self.recount();
        }
        let horizon = now.saturating_sub(self.options.retention.as_secs());
        while self
            .slots
            .front()
            .is_some_and(|s| s.start + s.len <= horizon)
        {
            self.drop_oldest();
        }
        if self.bytes() > self.options.memory_budget {
            // Frames of expired slots first: they may be all the excess.
            self.gc();
            let mut i = 0;
            while self.bytes() > self.options.memory_budget && i < self.slots.len() {
                let slot = &mut self.slots[i];
                if !slot.ticks.is_empty() {
                    self.tick_bytes -= slot.tick_bytes();
                    slot.drop_ticks();
                    self.ticks_dropped_for_budget += 1;
                }
                i += 1;
            }
        }
        if self.bytes() > self.options.memory_budget && self.live.is_some() {
            // Then who ran: exited processes' samples keep only their
            // names, before any history is given up. All sealed slots at
            // once: the interner is rebuilt once, and the room made lasts
            // many drains.
            let mut folded_any = false;
            for i in 0..self.slots.len() {
                let slot = &self.slots[i];
                let covered = self
                    .live
                    .as_ref()
                    .is_some_and(|l| l.covers(slot.start + slot.len));
                if !slot.folded && slot.entries.is_empty() && covered {
                    folded_any |= self.fold_slot(i);
                }
            }
            if folded_any {
                self.gc();
            }
        }
        if self.bytes() > self.options.memory_budget {
            self.gc();
        }
        // Then whose: the user account whose stacks cost most of the store
        // gives up the detail of its oldest slots first (its time stays,
        // under a marker), before the history of every process is cut.
        // One user churning unique off-CPU stacks for 30 s otherwise cut
        // the whole host's off-CPU history to its last 10 s. Down to 90%,
        // folds and drops alike: a collection rebuilds the whole interner,
        // which should not happen at every drain of a store that is full.
        let target = self.options.memory_budget / 10 * 9;
        let mut folded = false;
        if self.bytes() > self.options.memory_budget
            && let Some(account) = self.heaviest_account()
        {
            self.fold_account(account, target);
            folded = true;
        }
        // Collected: only what is left over is dropped; after a fold, down
        // to the same 90% (an account folded whole frees only its newest
        // seconds at the next fold, and the store would be over its budget
        // again at the next drain).
        if self.bytes() > self.options.memory_budget || (folded && self.bytes() > target) {
            while self.bytes() > target && self.slots.len() > 1 {
                self.drop_oldest();
                self.dropped_for_budget += 1;
                // Until a collection, the estimate still counts the frames
                // of dropped slots: collect often enough that a store of a
                // few slots (a small budget) does not drop them all.
                if self.dropped_since_gc >= (self.slots.len() / 32).clamp(1, 8) {
                    self.gc();
                }
            }
            self.gc();
        } else if self.dropped_since_gc >= 60 {
            self.gc();
        }
    }

    /// Merges slots that end before `before` into slots of `len` seconds
    /// aligned to multiples of `len`.
    fn merge_older_than(&mut self, before: u64, len: u64) {
        let mut i = 0;
        let mut merged_any = false;
        while i < self.slots.len() {
            let s = &self.slots[i];
            if s.start + s.len > before {
                break;
            }
            if s.len >= len {
                i += 1;
                continue;
            }
            let bucket = s.start - s.start % len;
            if bucket + len > before {
                // Merge a bucket only once all of it has aged, so that it
                // becomes exactly one slot.
                break;
            }
            // Fold the following slots of the same bucket into this one.
            let mut j = i + 1;
            while j < self.slots.len() {
                let n = &self.slots[j];
                if n.len >= len || n.start - n.start % len != bucket {
                    break;
                }
                j += 1;
            }
            let mut merged = Slot::new(bucket, len);
            let mut folded: FastMap<ThreadId, ThreadId> = FastMap::default();
            let fold = self.live.as_ref().is_some_and(|l| l.covers(bucket + len));
            let taken: Vec<Slot> = self.slots.drain(i..j).collect();
            for mut slot in taken {
                for (mut k, v) in slot.take_entries() {
                    if fold {
                        k.thread = self.fold_exited(k.thread, &mut folded);
                    }
                    *merged.entries.entry(k).or_insert(0) += v;
                }
            }
            if folded.iter().any(|(a, b)| a != b) {
                // The exited threads' ids are garbage now, like a dropped
                // slot's.
                self.dropped_since_gc += 1;
            }
            merged.folded = fold;
            merged.seal();
            self.slots.insert(i, merged);
            merged_any = true;
            i += 1;
        }
        if merged_any {
            self.recount();
        }
    }

    /// Folds the exited processes' threads of sealed slot `i` (its ticks
    /// go too: they name the threads). Whether any was folded.
    fn fold_slot(&mut self, i: usize) -> bool {
        let mut memo = FastMap::default();
        self.entry_bytes -= self.slots[i].entry_bytes();
        let sealed = std::mem::take(&mut self.slots[i].sealed);
        let mut changed = false;
        let sealed = rekeyed(sealed, |mut k| {
            let to = self.fold_exited(k.thread, &mut memo);
            changed |= to != k.thread;
            k.thread = to;
            k
        });
        let slot = &mut self.slots[i];
        slot.sealed = sealed;
        slot.folded = true;
        self.entry_bytes += slot.entry_bytes();
        if changed {
            if !slot.ticks.is_empty() {
                self.tick_bytes -= slot.tick_bytes();
                slot.drop_ticks();
            }
            self.dropped_since_gc += 1;
        }
        changed
    }

    /// The account of each thread the slots refer to.
    fn accounts_of_threads(&self) -> FastMap<ThreadId, u32> {
        let mut by_thread = FastMap::default();
        for k in self.slots.iter().flat_map(Slot::keys) {
            by_thread
                .entry(k.thread)
                .or_insert_with(|| self.interner.get_thread(k.thread).account);
        }
        by_thread
    }

    /// The user account (not root) whose stacks cost the store the most,
    /// if that is over half of what all accounts' stacks cost: then it is
    /// what fills the store; where no user holds most, everyone's oldest
    /// slots go, as before (a quarter, tried first, folded a busy host's
    /// ordinary service whenever its full event store had a few users). A stack costs its nodes and its frames' texts,
    /// each counted once per account (what the account alone would keep);
    /// a service's few stacks come back every second and cost little
    /// however many samples they have, a churner's are new and deep.
    /// Counted by bytes, not stacks: a few very deep unique chains filled
    /// the store while their count stayed under a service's.
    fn heaviest_account(&self) -> Option<u32> {
        let by_thread = self.accounts_of_threads();
        let mut stacks: crate::shared::FastSet<(u32, StackId)> = Default::default();
        for k in self.slots.iter().flat_map(Slot::keys) {
            stacks.insert((by_thread.get(&k.thread).copied().unwrap_or(0), k.stack));
        }
        let mut nodes: crate::shared::FastSet<(u32, StackId)> = Default::default();
        let mut frames: crate::shared::FastSet<(u32, FrameId)> = Default::default();
        let mut by_account: FastMap<u32, usize> = FastMap::default();
        for (account, leaf) in stacks {
            let mut bytes = 0;
            let mut node = leaf;
            while nodes.insert((account, node)) {
                let Some((parent, frame)) = self.interner.stack_parent(node) else {
                    break;
                };
                bytes += Interner::NODE_BYTES;
                if frames.insert((account, frame)) {
                    bytes += self.interner.frame_bytes(frame);
                }
                node = parent;
            }
            *by_account.entry(account).or_insert(0) += bytes;
        }
        let total: usize = by_account.values().sum();
        by_account
            .into_iter()
            .filter(|&(account, _)| account != 0)
            .max_by_key(|&(account, n)| (n, account))
            .filter(|&(_, n)| n * 2 > total)
            .map(|(account, _)| account)
    }

    /// Replaces the stacks of `account`'s entries by
    /// [`FOLDED_FOR_ACCOUNT`] (their threads and counts stay; the ticks of
    /// a slot changed go), in its oldest slots first, until the store is
    /// down to `target` bytes or every slot is folded: its newest detail is
    /// the last it gives up.
    fn fold_account(&mut self, account: u32, target: usize) {
        let mut per_pass = 0;
        for _ in 0..FOLD_PASSES {
            // A collection renumbers threads and stacks: looked up again
            // at each pass.
            let mut memo = DrainMemo::default();
            let mut ids = Vec::new();
            let marker = self.interner.frames_in(
                &mut memo,
                &[Frame::new(
                    FOLDED_FOR_ACCOUNT,
                    crate::shared::FrameKind::Marker,
                )],
                &mut ids,
            );
            memo.clear();
            let theirs: crate::shared::FastSet<ThreadId> = self
                .accounts_of_threads()
                .into_iter()
                .filter(|&(_, a)| a == account)
                .map(|(t, _)| t)
                .collect();
            let slots: Vec<usize> = (0..self.slots.len())
                .filter(|&i| {
                    self.slots[i]
                        .keys()
                        .any(|k| theirs.contains(&k.thread) && k.stack != marker)
                })
                .collect();
            if slots.is_empty() {
                break;
            }
            if per_pass == 0 {
                per_pass = slots.len().div_ceil(FOLD_PASSES);
            }
            for &i in slots.iter().take(per_pass) {
                self.fold_slot_for(i, &theirs, marker);
            }
            self.gc();
            if self.bytes() <= target {
                break;
            }
        }
    }

    /// Slot `i`'s entries of the threads `theirs` under the stack `marker`.
    fn fold_slot_for(
        &mut self,
        i: usize,
        theirs: &crate::shared::FastSet<ThreadId>,
        marker: StackId,
    ) {
        let slot = &mut self.slots[i];
        self.entry_bytes -= slot.entry_bytes();
        let fold = |mut k: EntryKey| {
            if theirs.contains(&k.thread) {
                k.stack = marker;
            }
            k
        };
        slot.sealed = rekeyed(std::mem::take(&mut slot.sealed), fold);
        for (k, v) in std::mem::take(&mut slot.entries) {
            *slot.entries.entry(fold(k)).or_insert(0) += v;
        }
        if !slot.ticks.is_empty() {
            self.tick_bytes -= slot.tick_bytes();
            slot.drop_ticks();
        }
        self.entry_bytes += slot.entry_bytes();
        self.folded_until = self.folded_until.max(slot.start + slot.len);
        self.dropped_since_gc += 1;
        self.folded_for_account += 1;
    }

    /// The thread an entry of a merged slot is kept under: itself while
    /// its process runs, else its names with pid and tid
    /// [`Pid::EXITED`](crate::shared::Pid::EXITED).
    fn fold_exited(&mut self, id: ThreadId, memo: &mut FastMap<ThreadId, ThreadId>) -> ThreadId {
        let Some(live) = &self.live else {
            return id;
        };
        if let Some(&to) = memo.get(&id) {
            return to;
        }
        let t = self.interner.get_thread(id);
        let exited = crate::shared::Pid::EXITED.0;
        let to = if t.pid == 0 || t.pid == exited || live.contains(t.pid) {
            id
        } else {
            self.interner.thread(ThreadKey {
                pid: exited,
                tid: exited,
                ..t
            })
        };
        memo.insert(id, to);
        to
    }

    /// Recomputes the byte estimates from the slots.
    fn recount(&mut self) {
        self.entry_bytes = self.slots.iter().map(Slot::entry_bytes).sum();
        self.tick_bytes = self.slots.iter().map(Slot::tick_bytes).sum();
    }

    fn drop_oldest(&mut self) {
        if let Some(s) = self.slots.pop_front() {
            self.entry_bytes -= s.entry_bytes();
            self.tick_bytes -= s.tick_bytes();
            self.dropped_since_gc += 1;
        }
    }

    /// Rebuilds the interner with only what the slots still refer to.
    fn gc(&mut self) {
        if self.dropped_since_gc == 0 {
            return;
        }
        self.dropped_since_gc = 0;
        let old = std::mem::take(&mut self.interner);
        let mut copy = intern::Copier::new(&old);
        let interner = &mut self.interner;
        let mut remap = |k: &mut EntryKey| {
            k.stack = copy.stack(interner, k.stack);
            k.thread = copy.thread(interner, k.thread);
        };
        for slot in &mut self.slots {
            let entries = std::mem::take(&mut slot.entries);
            for (mut k, v) in entries {
                remap(&mut k);
                *slot.entries.entry(k).or_insert(0) += v;
            }
            if !slot.sealed.is_empty() {
                // Ids are renumbered in the order met: the array's order
                // changes with them.
                for (k, _) in slot.sealed.iter_mut() {
                    remap(k);
                }
                slot.sealed.sort_unstable_by_key(|e| e.0);
            }
            for t in &mut slot.ticks {
                remap(&mut t.key);
            }
        }
        self.recount();
    }

    /// Estimated bytes in use.
    pub fn bytes(&self) -> usize {
        self.entry_bytes
            + self.tick_bytes
            + self.interner.bytes()
            + self.memo.bytes()
            + self.slots.len() * std::mem::size_of::<Slot>()
    }

    /// Up to when (store seconds) some of the store's slots lost an
    /// account's stacks for the budget; `None` if none ever did. The disk
    /// history, written before, has them whole.
    pub fn folded_until(&self) -> Option<u64> {
        (self.folded_until > 0).then_some(self.folded_until)
    }

    /// Where the store's history begins (store seconds): the start of its
    /// oldest slot, as every drain makes one; `None` before the first.
    pub fn oldest(&self) -> Option<u64> {
        self.slots.front().map(|s| s.start)
    }

    /// Size and shape, for metrics.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            bytes: self.bytes(),
            tick_bytes: self.tick_bytes,
            interner_bytes: self.interner.table_bytes(),
            slots: self.slots.len(),
            stacks: self.interner.stack_count(),
            dropped_for_budget: self.dropped_for_budget,
            ticks_dropped_for_budget: self.ticks_dropped_for_budget,
            folded_for_account: self.folded_for_account,
            oldest: self.oldest(),
        }
    }

    /// Copies the slots starting in `[from, to)` into a segment builder:
    /// their entries, per-second totals (the idle task left out, as the
    /// heat map does) and the seconds they cover.
    pub fn export_into(&self, from: u64, to: u64, b: &mut disk::segment::Builder) {
        let mut threads: FastMap<ThreadId, u32> = FastMap::default();
        let mut stacks: FastMap<StackId, u32> = FastMap::default();
        let mut frames: FastMap<FrameId, u32> = FastMap::default();
        let mut ids = Vec::new();
        for slot in self
            .slots
            .iter()
            .filter(|s| s.start >= from && s.start < to)
        {
            b.cover(slot.start, slot.start + slot.len);
            for (k, &v) in slot.iter() {
                let t = self.interner.get_thread(k.thread);
                let thread = *threads.entry(k.thread).or_insert_with(|| {
                    let mut name = |id| b.string(self.interner.get_name(id));
                    let rec = disk::segment::ThreadRec {
                        pid: t.pid,
                        tid: t.tid,
                        comm: name(t.thread_comm),
                        process: name(t.process_comm),
                        unit: name(t.unit),
                        container: name(t.container),
                        exe: name(t.exe),
                    };
                    b.thread(rec)
                });
                let stack = match stacks.get(&k.stack) {
                    Some(&s) => s,
                    None => {
                        ids.clear();
                        for &f in self.interner.get_stack_arc(k.stack).iter() {
                            let id = match frames.get(&f) {
                                Some(&id) => id,
                                None => {
                                    let id = b.frame(&self.interner.get_frame(f));
                                    frames.insert(f, id);
                                    id
                                }
                            };
                            ids.push(id);
                        }
                        let s = b.stack(&ids);
                        stacks.insert(k.stack, s);
                        s
                    }
                };
                b.add(slot.start, slot.len, thread, stack, v);
                if t.pid != 0 {
                    b.add_total(slot.start, v);
                }
            }
        }
    }

    /// Slots (start, length) overlapping `[from, to)`.
    pub fn spans(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        self.slots
            .iter()
            .filter(|s| s.start + s.len > from && s.start < to)
            .map(|s| (s.start, s.len))
            .collect()
    }

    /// Per-slot totals of `[sel.from, sel.to)` that pass the filters (the
    /// web page's heat map): one entry per slot, its start, length and sum,
    /// a partly covered coarse slot counted whole (its length says so),
    /// and per tick where the slot keeps its ticks.
    pub fn timeline(&self, sel: &Selection) -> Vec<TimeSlot> {
        let mut comm_ok: FastMap<(NameId, NameId), bool> = FastMap::default();
        self.slots
            .iter()
            .filter(|slot| slot.start + slot.len > sel.from && slot.start < sel.to)
            .map(|slot| {
                let value = slot
                    .iter()
                    .filter(|(k, _)| self.passes(k, sel, &mut comm_ok))
                    .map(|(_, v)| *v)
                    .sum();
                let mut ticks = Vec::new();
                if slot.fine {
                    ticks = vec![0; TICKS];
                    for t in &slot.ticks {
                        if self.passes(&t.key, sel, &mut comm_ok) {
                            ticks[t.tick as usize % TICKS] += u64::from(t.count);
                        }
                    }
                }
                TimeSlot {
                    start: slot.start,
                    len: slot.len,
                    value,
                    ticks,
                }
            })
            .collect()
    }

    /// The span of history (first slot's start, last slot's end) whose
    /// slots hold rows passing `sel`'s filters, whatever its window: how an
    /// empty answer tells a process never seen from one seen at other
    /// times. `None` if no row in the store passes.
    pub fn seen(&self, sel: &Selection) -> Option<(u64, u64)> {
        let mut comm_ok: FastMap<(NameId, NameId), bool> = FastMap::default();
        let mut hit = |slot: &&Slot| slot.iter().any(|(k, _)| self.passes(k, sel, &mut comm_ok));
        let first = self.slots.iter().find(&mut hit)?;
        let last = self.slots.iter().rev().find(&mut hit)?;
        Some((first.start, last.start + last.len))
    }

    fn passes(
        &self,
        k: &EntryKey,
        sel: &Selection,
        comm_ok: &mut FastMap<(NameId, NameId), bool>,
    ) -> bool {
        let k = self.interner.get_thread(k.thread);
        let name = |id| self.interner.get_name(id).as_ref();
        sel.passes(
            k.pid,
            k.tid,
            || [name(k.unit), name(k.container), name(k.process_comm)],
            |re| {
                *comm_ok
                    .entry((k.process_comm, k.thread_comm))
                    .or_insert_with(|| {
                        re.is_match(name(k.process_comm)) || re.is_match(name(k.thread_comm))
                    })
            },
        )
    }

    /// The rows of slots overlapping `[sel.from, sel.to)` (or `sel.ms`)
    /// that pass the filters. A 1 s slot the window covers only partly
    /// gives the samples of its ticks that start in the window, if it keeps
    /// them; any other slot covered partly counts pro rata (rounded), so a
    /// 1 s window in old history holds about 1 s of samples, as its title
    /// and pprof duration say, not 60.
    pub fn query(&self, sel: &Selection) -> QueryResult {
        let mut agg: FastMap<EntryKey, u64> = FastMap::default();
        let mut covered: Option<(u64, u64)> = None;
        let mut comm_ok: FastMap<(NameId, NameId), bool> = FastMap::default();
        let (from_ms, to_ms) = sel
            .ms
            .unwrap_or((sel.from.saturating_mul(1000), sel.to.saturating_mul(1000)));
        for slot in &self.slots {
            let (slot_from, slot_to) = (slot.start * 1000, (slot.start + slot.len) * 1000);
            if slot_to <= from_ms || slot_from >= to_ms {
                continue;
            }
            let (start, end) = (slot_from.max(from_ms), slot_to.min(to_ms));
            covered = Some(match covered {
                None => (start, end),
                Some((a, b)) => (a.min(start), b.max(end)),
            });
            let (part, len) = (end - start, slot_to - slot_from);
            if part < len && slot.fine {
                for t in &slot.ticks {
                    let at = slot_from + u64::from(t.tick) * TICK_MS;
                    if at >= start && at < end && self.passes(&t.key, sel, &mut comm_ok) {
                        *agg.entry(t.key).or_insert(0) += u64::from(t.count);
                    }
                }
                continue;
            }
            for (k, &v) in slot.iter() {
                if !self.passes(k, sel, &mut comm_ok) {
                    continue;
                }
                let v = pro_rata(v, part, len);
                if v > 0 {
                    *agg.entry(*k).or_insert(0) += v;
                }
            }
        }
        agg.retain(|_, v| *v > 0);
        let covered = covered.map(|(a, b)| (a / 1000, b.div_ceil(1000)));
        result_of(&self.interner, agg, covered)
    }
}

/// `v` of a slot `whole` long, for the `part` of it a window covers
/// (rounded): a coarse slot read for part of its span.
fn pro_rata(v: u64, part: u64, whole: u64) -> u64 {
    if part >= whole {
        v
    } else {
        ((v as u128 * part as u128 + whole as u128 / 2) / whole as u128) as u64
    }
}

/// The rows of `agg`, with copies of the stacks and frames they name.
fn result_of(
    interner: &Interner,
    agg: FastMap<EntryKey, u64>,
    covered: Option<(u64, u64)>,
) -> QueryResult {
    let mut stacks: FastMap<StackId, Arc<[FrameId]>> = FastMap::default();
    let mut frames: FastMap<FrameId, Frame> = FastMap::default();
    for k in agg.keys() {
        stacks.entry(k.stack).or_insert_with(|| {
            let ids = interner.get_stack_arc(k.stack);
            for &f in ids.iter() {
                frames.entry(f).or_insert_with(|| interner.get_frame(f));
            }
            ids
        });
    }
    let rows = agg
        .into_iter()
        .map(|(k, value)| {
            let t = interner.get_thread(k.thread);
            Row {
                pid: Pid(t.pid),
                tid: Tid(t.tid),
                thread_comm: interner.get_name(t.thread_comm).clone(),
                process_comm: interner.get_name(t.process_comm).clone(),
                workload: crate::shared::Workload {
                    unit: interner.get_name(t.unit).clone(),
                    container: interner.get_name(t.container).clone(),
                    exe: interner.get_name(t.exe).clone(),
                },
                stack: k.stack,
                value,
            }
        })
        .collect();
    QueryResult {
        rows,
        covered,
        stacks,
        frames,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::FrameKind;

    fn sample(pid: u32, frames: &[&str], count: u64) -> SymbolizedSample {
        SymbolizedSample {
            pid: Pid(pid),
            tid: Tid(pid),
            thread_comm: Arc::from("t"),
            process_comm: Arc::from(format!("p{pid}").as_str()),
            frames: frames
                .iter()
                .map(|f| Frame::new(*f, FrameKind::User))
                .collect(),
            workload: Default::default(),
            account: 0,
            count,
            at_ms: None,
        }
    }

    #[test]
    fn unit_container_and_service_select_rows_and_come_back() {
        let id = "ab".repeat(32);
        let mut web = sample(1, &["main", "serve"], 5);
        web.workload.unit = Arc::from("web.service");
        let mut box_ = sample(2, &["main", "work"], 7);
        box_.workload.unit = Arc::from(format!("docker-{id}.scope").as_str());
        box_.workload.container = Arc::from(id.as_str());
        let loose = sample(3, &["main"], 11);
        let mut st = Store::new(StoreOptions::default());
        st.insert(100, &[web, box_, loose]);
        let sum = |sel: Selection| -> u64 { st.query(&sel).rows.iter().map(|r| r.value).sum() };
        let base = Selection {
            from: 100,
            to: 101,
            ..Default::default()
        };
        assert_eq!(sum(base.clone()), 23);
        let unit = Selection {
            unit: Some("web.service".into()),
            ..base.clone()
        };
        assert_eq!(sum(unit), 5);
        let container = Selection {
            container: Some("abab".into()),
            ..base.clone()
        };
        assert_eq!(sum(container), 7);
        let service = Selection {
            service: Some("process:p3".into()),
            ..base.clone()
        };
        assert_eq!(sum(service), 11);
        // A bare process name is no service.
        let bare = Selection {
            service: Some("p3".into()),
            ..base.clone()
        };
        assert_eq!(sum(bare), 0);
        let short = Selection {
            service: Some(id[..12].to_owned()),
            ..base.clone()
        };
        assert_eq!(sum(short), 7);
        let rows = st.query(&base).rows;
        let boxed = rows.iter().find(|r| r.pid == Pid(2)).unwrap();
        assert_eq!(&*boxed.workload.container, id.as_str());
    }

    fn total(store: &Store, from: u64, to: u64) -> u64 {
        let sel = Selection {
            from,
            to,
            ..Default::default()
        };
        store.query(&sel).rows.iter().map(|r| r.value).sum()
    }

    #[test]
    fn slots_merge_without_losing_samples() {
        let mut st = Store::new(StoreOptions::default());
        let t0 = 1_000_000;
        for i in 0..3600 {
            st.insert(
                t0 + i,
                &[sample(1, &["main", "a"], 2), sample(2, &["main", "b"], 1)],
            );
        }
        assert_eq!(total(&st, 0, u64::MAX), 3 * 3600);
        // 5 min of 1 s, 25 min of 10 s, 30 min of 60 s, plus edges.
        let n = st.stats().slots;
        assert!(n <= 300 + 150 + 30 + 20, "{n} slots");
        assert_eq!(total(&st, t0 + 3590, t0 + 3600), 30);
        // One second of the 60 s part of the history is about one second
        // of samples (pro rata), not the whole slot's 180.
        let one = total(&st, t0 + 100, t0 + 101);
        assert!(
            (2..=4).contains(&one),
            "1 s in a 60 s slot gave {one} samples"
        );
        // A window over whole coarse slots loses nothing.
        let slot_60 = st
            .slots
            .iter()
            .filter(|s| s.len == 60)
            .nth(1)
            .expect("60 s slots");
        let (a, b) = (slot_60.start, slot_60.start + 60);
        assert_eq!(total(&st, a, b), 3 * 60);
    }

    #[test]
    fn merged_history_keeps_exited_processes_by_name_only() {
        let mut st = Store::new(StoreOptions::default());
        st.set_live_pids(Arc::new(LivePids::new([1], u64::MAX)));
        let t0 = 1_000_000;
        for i in 0..400 {
            // A service (pid 1) and a new short-lived `p2`-named process
            // every second (pids 1000+).
            let mut short = sample(1000 + i as u32, &["main", "b"], 1);
            short.process_comm = Arc::from("p2");
            st.insert(t0 + i, &[sample(1, &["main", "a"], 2), short]);
        }
        assert_eq!(total(&st, 0, u64::MAX), 3 * 400);
        let old = Selection {
            from: t0,
            to: t0 + 60,
            ..Default::default()
        };
        let rows = st.query(&old).rows;
        let service: u64 = rows.iter().filter(|r| r.pid.0 == 1).map(|r| r.value).sum();
        assert_eq!(service, 120, "the running process keeps its pid");
        let exited: Vec<_> = rows.iter().filter(|r| r.pid != Pid(1)).collect();
        assert_eq!(exited.len(), 1, "60 exited processes, one row: {rows:?}");
        assert_eq!(exited[0].pid, crate::shared::Pid::EXITED);
        assert_eq!(&*exited[0].process_comm, "p2");
        assert_eq!(exited[0].value, 60);
        // The last 5 minutes are not merged: every process keeps its pid.
        let recent = Selection {
            from: t0 + 390,
            to: t0 + 400,
            ..Default::default()
        };
        assert!(
            st.query(&recent)
                .rows
                .iter()
                .all(|r| r.pid != crate::shared::Pid::EXITED)
        );
        // A filter by pid finds the service in the merged part.
        let by_pid = Selection {
            pid: Some(1),
            ..old
        };
        assert_eq!(
            st.query(&by_pid).rows.iter().map(|r| r.value).sum::<u64>(),
            120
        );
    }

    #[test]
    fn over_budget_exited_processes_fold_before_history_goes() {
        // 100 s of 20 short-lived processes a second, each with its own
        // stack tail: how big that is with every pid kept.
        let fill = |st: &mut Store| {
            for i in 0..100u32 {
                let batch: Vec<_> = (0..20)
                    .map(|j| {
                        let mut s = sample(10_000 + i * 20 + j, &["main", "x"], 1);
                        s.process_comm = Arc::from("short");
                        s
                    })
                    .collect();
                st.insert(2_000_000 + u64::from(i), &batch);
            }
        };
        let mut whole = Store::new(StoreOptions::default());
        fill(&mut whole);
        let budget = whole.bytes() / 2;
        let options = StoreOptions {
            memory_budget: budget,
            ..Default::default()
        };
        let mut without = Store::new(options.clone());
        fill(&mut without);
        assert!(without.stats().dropped_for_budget > 0);
        let mut st = Store::new(options);
        st.set_live_pids(Arc::new(LivePids::new([], u64::MAX)));
        fill(&mut st);
        assert_eq!(st.stats().dropped_for_budget, 0, "folding made the room");
        assert!(st.bytes() <= budget);
        assert_eq!(total(&st, 0, u64::MAX), 2000);
        let rows = st
            .query(&Selection {
                from: 2_000_000,
                to: 2_000_050,
                ..Default::default()
            })
            .rows;
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].pid, crate::shared::Pid::EXITED);
    }

    #[test]
    fn a_user_churning_stacks_gives_up_its_stacks_before_anyones_history() {
        // 200 s: root's service with one stack, and a user's process with
        // 30 new stacks a second.
        // Returns the inserts after which more slots were folded.
        let fill = |st: &mut Store, account: u32| {
            let mut folds = 0;
            for i in 0..200u32 {
                let mut batch = vec![sample(1, &["main", "serve"], 10)];
                for j in 0..30 {
                    let mut s = sample(2, &["main", &format!("churn{i}_{j}")], 1);
                    s.account = account;
                    batch.push(s);
                }
                let before = st.stats().folded_for_account;
                st.insert(3_000_000 + u64::from(i), &batch);
                folds += usize::from(st.stats().folded_for_account > before);
            }
            folds
        };
        let mut whole = Store::new(StoreOptions::default());
        fill(&mut whole, 1000);
        let budget = whole.bytes() / 4;
        let options = StoreOptions {
            memory_budget: budget,
            ..Default::default()
        };
        let of = |st: &Store, pid: u32| {
            st.query(&Selection {
                from: 0,
                to: u64::MAX,
                pid: Some(pid),
                ..Default::default()
            })
            .rows
            .iter()
            .map(|r| r.value)
            .sum::<u64>()
        };
        // Root's own churn is root's history to give up, as before.
        let mut roots = Store::new(options.clone());
        fill(&mut roots, 0);
        assert!(roots.stats().dropped_for_budget > 0);
        assert!(of(&roots, 1) < 2000, "{}", of(&roots, 1));

        let mut st = Store::new(options);
        let folds = fill(&mut st, 1000);
        // Down to 90% a fold: 17 of the 200 inserts folded (measured).
        assert!(folds <= 25, "{folds} of 200 inserts folded");
        assert!(st.bytes() <= budget, "{} of {budget}", st.bytes());
        assert_eq!(st.stats().dropped_for_budget, 0, "folding made the room");
        assert_eq!(of(&st, 1), 2000, "root's service, every second of it");
        assert_eq!(of(&st, 2), 6000, "the user's time, kept");
        let names = |pid: u32, from: u64, to: u64| -> Vec<Vec<String>> {
            let r = st.query(&Selection {
                from,
                to,
                pid: Some(pid),
                ..Default::default()
            });
            r.rows
                .iter()
                .map(|row| r.frames(row.stack).map(|f| f.name.to_string()).collect())
                .collect()
        };
        let user = names(2, 3_000_000, 3_000_100);
        assert!(!user.is_empty());
        assert!(
            user.iter().all(|f| f == &[FOLDED_FOR_ACCOUNT]),
            "the user's old stacks are folded: {:?}",
            &user[..user.len().min(4)]
        );
        // Oldest first: its newest second keeps its detail.
        let newest = names(2, 3_000_199, 3_000_200);
        assert_eq!(newest.len(), 30, "the user's newest second: {newest:?}");
        assert!(newest.iter().all(|f| f[1].starts_with("churn199_")));
        assert_eq!(
            names(1, 3_000_000, 3_000_200),
            [["main", "serve"]],
            "root's stack is whole"
        );
    }

    #[test]
    fn users_none_holding_most_of_the_stacks_lose_the_oldest_slots_as_before() {
        // Two users churning alike, with root's service: neither holds
        // over half of the distinct stacks, so nothing is folded.
        let fill = |st: &mut Store| {
            for i in 0..200u32 {
                let mut batch = vec![sample(1, &["main", "serve"], 10)];
                for (pid, account) in [(2, 1000), (3, 1001)] {
                    for j in 0..15 {
                        let mut s = sample(pid, &["main", &format!("churn{pid}_{i}_{j}")], 1);
                        s.account = account;
                        batch.push(s);
                    }
                }
                st.insert(3_000_000 + u64::from(i), &batch);
            }
        };
        let mut whole = Store::new(StoreOptions::default());
        fill(&mut whole);
        let mut st = Store::new(StoreOptions {
            memory_budget: whole.bytes() / 4,
            ..Default::default()
        });
        fill(&mut st);
        assert_eq!(st.stats().folded_for_account, 0);
        assert!(st.stats().dropped_for_budget > 0);
        assert!(st.oldest().unwrap() > 3_000_000);
    }

    #[test]
    fn retention_drops_old_slots() {
        let mut st = Store::new(StoreOptions {
            retention: Duration::from_secs(60),
            ..Default::default()
        });
        for i in 0..200 {
            st.insert(1000 + i, &[sample(1, &["x"], 1)]);
        }
        assert!(total(&st, 0, u64::MAX) <= 61);
        assert!(st.stats().oldest.unwrap() >= 1000 + 200 - 61);
    }

    #[test]
    fn budget_drops_oldest_first_and_collects_frames() {
        let mut st = Store::new(StoreOptions {
            memory_budget: 64 * 1024,
            ..Default::default()
        });
        for i in 0..2000u64 {
            // A new stack every second: the interner grows unless collected.
            let name = format!("f{i}");
            st.insert(1000 + i, &[sample(1, &["main", &name], 1)]);
            assert!(
                st.bytes() <= 64 * 1024 + 4096,
                "{} bytes at {i}",
                st.bytes()
            );
        }
        let stats = st.stats();
        assert!(stats.dropped_for_budget > 0);
        assert!(stats.stacks < 2000, "{} stacks kept", stats.stacks);
        // The newest second is always there.
        assert_eq!(total(&st, 2999, 3000), 1);
        let sel = Selection {
            from: 2999,
            to: 3000,
            ..Default::default()
        };
        let r = st.query(&sel);
        let names: Vec<String> = r
            .frames(r.rows[0].stack)
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(names, ["main", "f1999"]);
    }

    #[test]
    fn filters() {
        let mut st = Store::new(StoreOptions::default());
        st.insert(
            10,
            &[
                sample(0, &["idle"], 5),
                sample(7, &["a"], 1),
                sample(8, &["b"], 2),
            ],
        );
        let mut sel = Selection {
            from: 0,
            to: 100,
            ..Default::default()
        };
        assert_eq!(st.query(&sel).rows.len(), 2);
        sel.idle = true;
        assert_eq!(st.query(&sel).rows.len(), 3);
        sel.pid = Some(8);
        assert_eq!(st.query(&sel).rows[0].value, 2);
        sel.pid = None;
        sel.comm = Some(regex::Regex::new("^p7$").unwrap());
        assert_eq!(st.query(&sel).rows.len(), 1);
    }

    fn at(mut s: SymbolizedSample, ms: u64) -> SymbolizedSample {
        s.at_ms = Some(ms);
        s
    }

    fn total_ms(store: &Store, from: u64, to: u64) -> u64 {
        let sel = Selection {
            from: from / 1000,
            to: to.div_ceil(1000),
            ms: Some((from, to)),
            ..Default::default()
        };
        store.query(&sel).rows.iter().map(|r| r.value).sum()
    }

    #[test]
    fn ticks_select_within_a_second() {
        let mut st = Store::new(StoreOptions::default());
        // A drain at second 101 holds samples of seconds 100 and 101.
        st.insert(
            101,
            &[
                at(sample(1, &["a"], 3), 100_200),
                at(sample(1, &["b"], 5), 100_400),
                at(sample(1, &["b"], 1), 100_980),
                at(sample(2, &["c"], 7), 101_000),
            ],
        );
        st.insert(102, &[at(sample(1, &["a"], 2), 101_020)]);
        assert_eq!(total(&st, 100, 101), 9, "samples go to their own second");
        assert_eq!(total(&st, 101, 102), 9);
        assert_eq!(total_ms(&st, 100_200, 100_220), 3);
        assert_eq!(total_ms(&st, 100_200, 100_420), 8);
        assert_eq!(total_ms(&st, 100_220, 100_400), 0);
        assert_eq!(total_ms(&st, 100_900, 101_040), 1 + 7 + 2);
        let sel = Selection {
            from: 0,
            to: 200,
            ..Default::default()
        };
        let line = st.timeline(&sel);
        assert_eq!(line.len(), 3, "{line:?}");
        assert_eq!(line[0].start, 100);
        assert_eq!(line[0].ticks[10], 3);
        assert_eq!(line[0].ticks[20], 5);
        assert_eq!(line[0].ticks[49], 1);
        assert_eq!(line[1].ticks[..2], [7, 2]);
        // Events (no tick) in a slot: its ticks are no longer the whole
        // story, so a part of it counts pro rata.
        st.insert(102, &[sample(3, &["e"], 100)]);
        let last = st.timeline(&sel).pop().unwrap();
        assert!(last.ticks.is_empty());
        assert_eq!(total_ms(&st, 102_000, 102_500), 50);
    }

    #[test]
    fn ticks_go_with_merging_and_budget_and_survive_gc() {
        let mut st = Store::new(StoreOptions {
            memory_budget: 256 * 1024,
            ..Default::default()
        });
        for i in 0..400u64 {
            let name = format!("f{i}");
            let samples: Vec<_> = (0..50)
                .map(|t| at(sample(1, &["main", &name], 1), (1000 + i) * 1000 + t * 20))
                .collect();
            st.insert(1000 + i, &samples);
        }
        let stats = st.stats();
        assert!(stats.bytes <= 256 * 1024 + 4096, "{stats:?}");
        assert!(stats.ticks_dropped_for_budget > 0, "{stats:?}");
        assert!(stats.tick_bytes > 0, "the newest seconds keep ticks");
        // Merged (older than 5 min) slots keep no ticks.
        assert!(st.slots.iter().all(|s| s.len == 1 || s.ticks.is_empty()));
        // After collections the ticks still name the right stacks.
        let sel = Selection {
            from: 1399,
            to: 1400,
            ms: Some((1_399_500, 1_399_520)),
            ..Default::default()
        };
        let r = st.query(&sel);
        assert_eq!(r.rows.len(), 1);
        let names: Vec<String> = r
            .frames(r.rows[0].stack)
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(names, ["main", "f399"]);
        assert_eq!(r.rows[0].value, 1);
    }
}
