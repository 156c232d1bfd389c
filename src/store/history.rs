//! History: every store the daemon keeps (CPU samples, each event's
//! samples, the live heap) behind one handle, which the collector fills
//! and the HTTP side reads.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use super::disk::Archive;
use super::disk::writer::Recorder;
use super::heap::{Change, HeapStats, LiveHeap};
use super::tiered::EventStore;
use super::{LivePids, Store, StoreOptions, StoreStats};
use crate::collect::events::EventKind;
use crate::symbolize::SymbolizedSample;

/// What a [`History`] keeps.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// How long samples are kept.
    pub retention: Duration,
    /// Bytes all stores may hold together: CPU samples get half (all of it
    /// with no event on), the events share the other half equally. CPU is
    /// the profile most asked for, and an event such as page faults on a
    /// host of JIT processes can fill any budget with distinct stacks.
    pub memory_budget: usize,
    /// The events recorded: one store each.
    pub events: Vec<EventKind>,
    /// Sampled allocations tracked live, when malloc is traced.
    pub heap_entries: Option<usize>,
    /// History on disk, when kept; written from the store time given.
    pub disk: Option<(Arc<Archive>, u64)>,
}

/// Every store of the daemon.
#[derive(Debug)]
pub struct History {
    /// CPU samples.
    pub cpu: RwLock<Store>,
    /// Each recorded event's samples.
    pub events: HashMap<EventKind, RwLock<Store>>,
    /// Sampled allocations not yet freed, when malloc is traced.
    pub heap: Option<RwLock<LiveHeap>>,
    /// History on disk, when kept.
    pub disk: Option<Arc<Archive>>,
    /// Writes the stores' minutes to `disk`.
    recorder: Option<Recorder>,
}

/// What one drain's insertion did, for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct Inserted {
    /// The stores' sizes after it, summed.
    pub totals: StoreStats,
    /// Slots the stores had dropped for the budget before it, summed.
    pub dropped_before: u64,
    /// Slots the stores had folded one account's stacks in before it,
    /// summed.
    pub folded_before: u64,
}

/// A poisoned lock still holds a usable store: a panic while rendering
/// must not end the history.
fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl History {
    /// Empty stores, the budget split as [`HistoryOptions::memory_budget`]
    /// says.
    pub fn new(options: &HistoryOptions) -> Self {
        let events_on = options.events.len();
        let cpu_budget = if events_on == 0 {
            options.memory_budget
        } else {
            options.memory_budget / 2
        };
        let cpu = StoreOptions {
            retention: options.retention,
            memory_budget: cpu_budget,
            ..Default::default()
        };
        let event = StoreOptions {
            memory_budget: (options.memory_budget - cpu_budget) / events_on.max(1),
            ..cpu.clone()
        };
        Self {
            cpu: RwLock::new(Store::new(cpu)),
            events: options
                .events
                .iter()
                .map(|k| (*k, RwLock::new(Store::new(event.clone()))))
                .collect(),
            heap: options
                .heap_entries
                .map(|n| RwLock::new(LiveHeap::new(n, options.retention))),
            disk: options.disk.as_ref().map(|(a, _)| a.clone()),
            recorder: options.disk.as_ref().and_then(|(a, start)| {
                Recorder::start(a.clone(), *start)
                    .map_err(|e| tracing::error!("history: starting the writer thread: {e}"))
                    .ok()
            }),
        }
    }

    /// Every store with the name its event's files take on disk.
    fn named(&self) -> impl Iterator<Item = (&'static str, &RwLock<Store>)> + Clone {
        std::iter::once((EventKind::Cpu.name(), &self.cpu))
            .chain(self.events.iter().map(|(k, st)| (k.name(), st)))
    }

    /// The CPU samples' history, memory and disk.
    pub fn cpu_store(&self) -> EventStore<'_> {
        EventStore {
            memory: &self.cpu,
            disk: self.disk.as_deref().map(|a| (a, EventKind::Cpu.name())),
        }
    }

    /// An event's history, memory and disk, if it is recorded.
    pub fn event_store(&self, kind: EventKind) -> Option<EventStore<'_>> {
        if kind == EventKind::Cpu {
            return Some(self.cpu_store());
        }
        Some(EventStore {
            memory: self.events.get(&kind)?,
            disk: self.disk.as_deref().map(|a| (a, kind.name())),
        })
    }

    /// Waits for the disk writer's queue (see [`Recorder::sync`]).
    pub fn sync_disk(&self) {
        if let Some(r) = &self.recorder {
            r.sync();
        }
    }

    /// At a stop: writes the seconds not yet on disk (up to `now`) and
    /// waits for the writer.
    pub fn finish(&self, now: u64) {
        if let Some(r) = &self.recorder {
            r.finish(now, self.named());
        }
    }

    /// Stores one drain's samples at `now_unix`: CPU samples, and each
    /// event's in its store (an event not recorded is left out). `live`,
    /// when listed for this drain, tells the stores which processes run.
    /// Returns what it did and the samples, to be recycled.
    pub fn insert(
        &self,
        now_unix: u64,
        live: Option<&Arc<LivePids>>,
        cpu: Vec<SymbolizedSample>,
        events: Vec<(EventKind, SymbolizedSample)>,
    ) -> (Inserted, Vec<SymbolizedSample>) {
        let mut done = Inserted::default();
        let mut add = |st: &mut Store, samples: &[SymbolizedSample]| {
            if let Some(live) = live {
                st.set_live_pids(live.clone());
            }
            let before = st.stats();
            done.dropped_before += before.dropped_for_budget;
            done.folded_before += before.folded_for_account;
            st.insert(now_unix, samples);
            let s = st.stats();
            done.totals.bytes += s.bytes;
            done.totals.tick_bytes += s.tick_bytes;
            done.totals.slots += s.slots;
            done.totals.stacks += s.stacks;
            done.totals.dropped_for_budget += s.dropped_for_budget;
            done.totals.folded_for_account += s.folded_for_account;
        };
        add(&mut write(&self.cpu), &cpu);
        let mut by_kind: HashMap<EventKind, Vec<SymbolizedSample>> = HashMap::new();
        for (kind, s) in events {
            by_kind.entry(kind).or_default().push(s);
        }
        let mut used = cpu;
        for (kind, st) in &self.events {
            let samples = by_kind.remove(kind).unwrap_or_default();
            add(&mut write(st), &samples);
            used.extend(samples);
        }
        if let Some(r) = &self.recorder {
            r.after_insert(now_unix, self.named());
        }
        (done, used)
    }

    /// Applies sampled allocations and frees to the live heap, and forgets
    /// the processes `alive` says are gone. `None` without malloc tracing.
    pub fn apply_heap(
        &self,
        now_unix: u64,
        changes: Vec<Change>,
        alive: impl Fn(crate::shared::Pid) -> bool,
    ) -> Option<HeapStats> {
        let mut heap = write(self.heap.as_ref()?);
        heap.apply(now_unix, changes);
        heap.forget_processes(now_unix, alive);
        Some(heap.stats())
    }

    /// Bytes and slots of every store, summed, read now.
    pub fn totals(&self) -> StoreStats {
        let mut totals = StoreStats::default();
        for store in std::iter::once(&self.cpu).chain(self.events.values()) {
            let s = read(store).stats();
            totals.bytes += s.bytes;
            totals.slots += s.slots;
        }
        totals
    }

    /// Logs each store's size and shape (at debug level).
    pub fn log_stats(&self) {
        let show = |name: &str, st: &RwLock<Store>| {
            let s = read(st).stats();
            tracing::debug!(
                "store {name}: {} bytes ({} of ticks; frames, nodes, names, threads {:?}), \
                 {} slots, {} stack nodes",
                s.bytes,
                s.tick_bytes,
                s.interner_bytes,
                s.slots,
                s.stacks
            );
        };
        show("cpu", &self.cpu);
        for (kind, st) in &self.events {
            show(&format!("{kind:?}"), st);
        }
    }
}
