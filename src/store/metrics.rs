//! The store's metrics: its size and budget, slots dropped for the budget,
//! and the malloc in-use view's records and losses.

use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::shared::metrics::{Common, MapLabel, ReasonLabel, advance, gauge_value};
use crate::store::StoreStats;
use crate::store::heap::HeapStats;

/// The store's metrics.
#[derive(Debug)]
pub struct StoreMetrics {
    common: Common,
    bytes: Gauge,
    slots: Gauge,
    dropped_for_budget: Counter,
    heap: Family<MapLabel, Gauge>,
    last_heap: Mutex<HeapStats>,
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
            heap: Family::default(),
            last_heap: Mutex::default(),
        };
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
            "malloc_heap_records",
            "Sampled allocations the daemon keeps for the in-use view (map=live|freed)",
            m.heap.clone(),
        );
        m
    }

    /// Updates the store metrics after an insert; `dropped_before` is the
    /// store's budget-drop count before it.
    pub fn observe(&self, stats: &StoreStats, dropped_before: u64) {
        self.observe_gauges(stats);
        advance(
            &self.dropped_for_budget,
            stats.dropped_for_budget,
            dropped_before,
        );
    }

    /// Updates the store gauges only.
    pub fn observe_gauges(&self, stats: &StoreStats) {
        self.bytes.set(stats.bytes as i64);
        self.slots.set(stats.slots as i64);
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
