//! The store's metrics: its size and budget, slots dropped for the budget,
//! and the malloc in-use view's records and losses.

use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use prometheus_client::encoding::EncodeLabelSet;

use crate::shared::metrics::{Common, Label, MapLabel, ReasonLabel, advance, gauge_value};
use crate::store::StoreStats;
use crate::store::heap::HeapStats;

/// `tier` label of the history on disk.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    /// `0` (full resolution), `1` (10 s), `2` (60 s).
    pub tier: Label,
}

/// `reason` label of the history on disk.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HistoryReason {
    /// Why.
    pub reason: Label,
}

/// The history on disk's metrics.
#[derive(Debug, Default)]
struct DiskMetrics {
    bytes: Family<TierLabel, Gauge>,
    files: Family<TierLabel, Gauge>,
    budget: Gauge,
    writing: Gauge,
    files_written: Counter,
    bytes_written: Counter,
    rollups: Counter,
    skipped: Family<HistoryReason, Counter>,
    dropped: Family<HistoryReason, Counter>,
    write_errors: Counter,
    queries_bounded: Counter,
}

/// The store's metrics.
#[derive(Debug)]
pub struct StoreMetrics {
    common: Common,
    bytes: Gauge,
    slots: Gauge,
    dropped_for_budget: Counter,
    folded_for_account: Counter,
    heap: Family<MapLabel, Gauge>,
    last_heap: Mutex<HeapStats>,
    disk: DiskMetrics,
}

impl StoreMetrics {
    /// Registers the store's families; `budget_bytes` is the store's memory
    /// budget, exported as a constant gauge; `common` holds the families it
    /// shares.
    pub fn register(registry: &mut Registry, common: &Common, budget_bytes: usize) -> Self {
        let m = Self {
            common: common.clone(),
            bytes: Gauge::default(),
            slots: Gauge::default(),
            dropped_for_budget: Counter::default(),
            folded_for_account: Counter::default(),
            heap: Family::default(),
            last_heap: Mutex::default(),
            disk: DiskMetrics::default(),
        };
        let d = &m.disk;
        for (name, help, metric) in [
            (
                "history_disk_bytes",
                "Bytes of the history on disk, by tier (0: 1 s, 1: 10 s, 2: 60 s slots)",
                &d.bytes,
            ),
            (
                "history_disk_files",
                "Segment files of the history on disk, by tier",
                &d.files,
            ),
        ] {
            registry.register(name, help, metric.clone());
        }
        registry.register(
            "history_disk_budget_bytes",
            "Disk budget of the history on disk (history_disk_mib)",
            d.budget.clone(),
        );
        registry.register(
            "history_writing",
            "1 while the history on disk is written, 0 after a write failed (disk full, read only)",
            d.writing.clone(),
        );
        for (name, help, metric) in [
            (
                "history_files_written",
                "Segment files written (roll-ups included)",
                &d.files_written,
            ),
            (
                "history_bytes_written",
                "Bytes of segment files written (roll-ups included)",
                &d.bytes_written,
            ),
            (
                "history_rollups",
                "Roll-ups into a coarser tier",
                &d.rollups,
            ),
            (
                "history_write_errors",
                "Segment writes that failed",
                &d.write_errors,
            ),
            (
                "history_queries_bounded",
                "Queries whose disk read reached the query memory bound (stacks merged)",
                &d.queries_bounded,
            ),
        ] {
            registry.register(name, help, metric.clone());
        }
        registry.register(
            "history_files_skipped",
            "History files not read: format (garbage, another version), truncated, corrupt, io, foreign (not a file of emberd's), temp (an interrupted write)",
            d.skipped.clone(),
        );
        registry.register(
            "history_files_dropped",
            "History dropped: budget and age (files), queue_full (a minute not written)",
            d.dropped.clone(),
        );
        registry.register(
            "store_bytes",
            "Estimated bytes of the sample stores, all events",
            m.bytes.clone(),
        );
        let budget: Gauge = Gauge::default();
        budget.set(gauge_value(budget_bytes as u64));
        registry.register(
            "store_budget_bytes",
            "Memory budget of the sample store",
            budget,
        );
        registry.register(
            "store_slots",
            "Time slots held by the stores, all events",
            m.slots.clone(),
        );
        registry.register(
            "store_slots_dropped_for_budget",
            "Oldest slots dropped to stay within the memory budget",
            m.dropped_for_budget.clone(),
        );
        registry.register(
            "store_slots_folded_for_account",
            "Slots whose stacks of one user account (holding most of the stores) were folded to stay within the memory budget, before anyone's history was dropped",
            m.folded_for_account.clone(),
        );
        registry.register(
            "malloc_heap_records",
            "Sampled allocations the daemon keeps for the in-use view (map=live|freed)",
            m.heap.clone(),
        );
        m
    }

    /// Updates the store metrics after an insert; `dropped_before` and
    /// `folded_before` are the stores' counts before it.
    pub fn observe(&self, stats: &StoreStats, dropped_before: u64, folded_before: u64) {
        self.observe_gauges(stats);
        advance(
            &self.dropped_for_budget,
            stats.dropped_for_budget,
            dropped_before,
        );
        advance(
            &self.folded_for_account,
            stats.folded_for_account,
            folded_before,
        );
    }

    /// Updates the store gauges only.
    pub fn observe_gauges(&self, stats: &StoreStats) {
        self.bytes.set(stats.bytes as i64);
        self.slots.set(stats.slots as i64);
    }

    /// Reads the history on disk's figures.
    pub fn observe_disk(&self, a: &crate::store::disk::Archive) {
        use std::sync::atomic::Ordering::Relaxed;
        let d = &self.disk;
        for (tier, (bytes, files)) in a.size_by_tier().iter().enumerate() {
            let l = TierLabel {
                tier: tier.to_string().into(),
            };
            d.bytes.get_or_create(&l).set(gauge_value(*bytes));
            d.files.get_or_create(&l).set(*files as i64);
        }
        d.budget.set(gauge_value(a.options().budget_bytes));
        d.writing.set(i64::from(a.writing.load(Relaxed)));
        let c = &a.counters;
        for (metric, v) in [
            (&d.files_written, &c.files_written),
            (&d.bytes_written, &c.bytes_written),
            (&d.rollups, &c.rollups),
            (&d.write_errors, &c.write_errors),
            (&d.queries_bounded, &c.query_bounded),
        ] {
            metric.inner().store(v.load(Relaxed), Relaxed);
        }
        for (reason, v) in [
            ("format", &c.skipped_format),
            ("truncated", &c.skipped_truncated),
            ("corrupt", &c.skipped_corrupt),
            ("io", &c.skipped_io),
            ("foreign", &c.skipped_foreign),
            ("temp", &c.temp_removed),
        ] {
            let l = HistoryReason {
                reason: reason.into(),
            };
            d.skipped
                .get_or_create(&l)
                .inner()
                .store(v.load(Relaxed), Relaxed);
        }
        for (reason, v) in [
            ("budget", &c.dropped_budget),
            ("age", &c.dropped_age),
            ("queue_full", &c.dropped_queue),
        ] {
            let l = HistoryReason {
                reason: reason.into(),
            };
            d.dropped
                .get_or_create(&l)
                .inner()
                .store(v.load(Relaxed), Relaxed);
        }
    }

    /// Updates the live-heap figures (malloc's in-use view).
    pub fn observe_heap(&self, h: &HeapStats) {
        let mut last = self.last_heap.lock().unwrap_or_else(|e| e.into_inner());
        for (what, n) in [("live", h.live), ("freed", h.freed)] {
            self.heap.get_or_create(&MapLabel::new(what)).set(n as i64);
        }
        for (reason, now, prev) in [
            ("agent_table_full", h.overflow, last.overflow),
            ("free_of_untracked", h.unmatched_frees, last.unmatched_frees),
        ] {
            let label = ReasonLabel::new("malloc", reason);
            advance(&self.common.dropped.get_or_create(&label), now, prev);
        }
        self.common.observe_memory(&[("malloc_heap", h.bytes)]);
        *last = *h;
    }
}
