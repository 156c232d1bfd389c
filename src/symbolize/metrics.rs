//! The symbolizer's metrics: addresses left unnamed by reason, perf maps
//! refused, and process snapshots halved for their budget. The counts are
//! cumulative ([`Misses`]); each update exports the difference from the
//! last one seen.

use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::shared::metrics::{Common, MissLabel, advance};
use crate::symbolize::Misses;
use crate::symbolize::untrusted::Refusal;

/// The symbolizer's metrics.
#[derive(Debug)]
pub struct SymbolizeMetrics {
    collector_faults: Family<MissLabel, Counter>,
    misses: Family<MissLabel, Counter>,
    perf_map_refused: Family<MissLabel, Counter>,
    last: Mutex<Misses>,
}

impl SymbolizeMetrics {
    /// Registers the symbolizer's families; `common` holds those it shares.
    pub fn register(registry: &mut Registry, common: &Common) -> Self {
        let m = Self {
            collector_faults: common.collector_faults.clone(),
            misses: Family::default(),
            perf_map_refused: Family::default(),
            last: Mutex::default(),
        };
        registry.register(
            "symbolize_misses",
            "Addresses that could not be named, by reason",
            m.misses.clone(),
        );
        registry.register(
            "perf_maps_refused",
            "Perf maps not read (not a regular file, other owner, too large, unresolvable in the process's root) or dropped for the cache budget",
            m.perf_map_refused.clone(),
        );
        m
    }

    /// Updates the metrics from the symbolizer's cumulative misses.
    pub fn observe(&self, misses: &Misses) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let p = &*last;
        for (reason, now, prev) in [
            ("process_gone", misses.process_gone, p.process_gone),
            ("unmapped", misses.unmapped, p.unmapped),
            (
                "anon_no_perf_map",
                misses.anon_no_perf_map,
                p.anon_no_perf_map,
            ),
            ("elf_error", misses.elf_error, p.elf_error),
            ("elf_timeout", misses.elf_timeout, p.elf_timeout),
            ("no_symbol", misses.no_symbol, p.no_symbol),
            (
                "kernel_no_symbol",
                misses.kernel_no_symbol,
                p.kernel_no_symbol,
            ),
            (
                "perf_map_malformed_line",
                misses.perf_map_malformed_lines,
                p.perf_map_malformed_lines,
            ),
            (
                "perf_map_entry_dropped",
                misses.perf_map_entries_dropped,
                p.perf_map_entries_dropped,
            ),
        ] {
            let label = MissLabel::new(reason);
            advance(&self.misses.get_or_create(&label), now, prev);
        }
        for r in Refusal::ALL {
            let get = |m: &Misses| m.perf_map_refused.get(&r).copied().unwrap_or(0);
            let label = MissLabel::new(r.label());
            advance(
                &self.perf_map_refused.get_or_create(&label),
                get(misses),
                get(p),
            );
        }
        advance(
            &self
                .perf_map_refused
                .get_or_create(&MissLabel::new("evicted_for_budget")),
            misses.perf_maps_evicted,
            p.perf_maps_evicted,
        );
        advance(
            &self
                .collector_faults
                .get_or_create(&MissLabel::new("process_snapshots_halved")),
            misses.snapshots_evicted,
            p.snapshots_evicted,
        );
        *last = misses.clone();
    }
}
