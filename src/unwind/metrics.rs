//! The unwinder's metrics: user-stack walks by how they ended, frames by
//! method, the events' stacks lost in the walk, and the unwind tables.
//! Counters are cumulative; each update exports the difference from the
//! last one seen.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::collect::{StackEnd, UnwindCounters};
use crate::shared::metrics::{
    Common, Label, MapLabel, MissLabel, ReasonLabel, advance, gauge_value,
};
use crate::unwind::UnwindStats;

/// `event` and `end` labels of user-stack walks.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WalkLabel {
    /// Which BPF object walked it: `cpu`, or `events` (off-CPU, wakeup, page faults).
    pub event: Label,
    /// How the walk ended: `complete`, or why not.
    pub end: Label,
}

/// `method` label of unwound frames.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    /// `table` (.eh_frame rows) or `frame_pointer`.
    pub method: Label,
}

/// The last cumulative unwinder figures seen, to export differences.
#[derive(Debug, Default)]
struct LastUnwind {
    cpu: UnwindCounters,
    events: UnwindCounters,
    stats: UnwindStats,
}

/// The unwinder's metrics.
#[derive(Debug)]
pub struct UnwindMetrics {
    lost_stacks: Family<ReasonLabel, Counter>,
    user_stacks: Family<WalkLabel, Counter>,
    frames: Family<MethodLabel, Counter>,
    tables: Family<MapLabel, Gauge>,
    table_events: Family<MissLabel, Counter>,
    build_seconds: Counter<f64, AtomicU64>,
    read_seconds: Counter<f64, AtomicU64>,
    last: Mutex<LastUnwind>,
}

impl UnwindMetrics {
    /// Registers the unwinder's families; `common` holds those it shares.
    pub fn register(registry: &mut Registry, common: &Common) -> Self {
        let m = Self {
            lost_stacks: common.lost_stacks.clone(),
            user_stacks: Family::default(),
            frames: Family::default(),
            tables: Family::default(),
            table_events: Family::default(),
            build_seconds: Counter::default(),
            read_seconds: Counter::default(),
            last: Mutex::default(),
        };
        registry.register(
            "user_stacks",
            "User stacks walked in BPF, by how the walk ended (complete: reached the root)",
            m.user_stacks.clone(),
        );
        registry.register(
            "unwind_frames",
            "User frames unwound in BPF, by method",
            m.frames.clone(),
        );
        registry.register(
            "unwind_tables",
            "Unwind tables in the BPF row array (map=files|rows|bytes|budget_bytes|processes|files_without_room|rules|refused_last_minute|evicted_last_minute): rows are 4-byte words; files_without_room are mapped files whose table found no room (their stacks end in [unwind error: table budget full: FILE]); rules are the distinct rules rows name",
            m.tables.clone(),
        );
        registry.register(
            "unwind_table_events",
            "Unwind-table work: builds, failures (corrupt or unreadable files), files refused unread (not ELF, sections over the cap), files without CFI, corrupt FDEs skipped, budget refusals (budget_refused; over_file_share: one table over a quarter of the budget), evictions (evicted: no process maps it; table_evicted_cold: its processes had not run for 30 s; table_evicted_for_share), mapped files refused a table because their user held a quarter of the file places or all users but root three quarters (file_refused_for_share, a file counted at each read of its process), idle tables evicted early for a new file of their user (file_evicted_for_share), tables built again once room was made (no_room_retried), tables that took the rows of a file of the same build id and the same rows (rows_shared), files of a build id held with other rows, given their own table (build_id_rows_differ), new processes of a user past their share of the agent's reading time read later (process_read_deferred) or, past 1,024 of theirs (4,096 of all) waiting, set aside (4,096 at most, also counted as deferred) and noticed again at a sample or event as the line has room (process_read_dropped), re-reads skipped for it (process_reread_skipped), mappings dropped",
            m.table_events.clone(),
        );
        registry.register(
            "unwind_table_build_seconds",
            "Time the builder thread spent compiling unwind tables",
            m.build_seconds.clone(),
        );
        registry.register(
            "process_read_seconds",
            "Time the agent spent reading the mappings of processes of users other than root, and looking up the users of those it put in line (each user may spend 100 ms a second, all of them 250 ms)",
            m.read_seconds.clone(),
        );
        m
    }

    /// Updates the unwinder's metrics (counters are cumulative): walks by
    /// end, frames by method, stacks lost by reason, and the tables.
    pub fn observe(
        &self,
        cpu: &UnwindCounters,
        events: Option<&UnwindCounters>,
        stats: &UnwindStats,
    ) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let none = UnwindCounters::default();
        for (event, now, prev) in [
            ("cpu", cpu, &last.cpu),
            ("offcpu", events.unwrap_or(&none), &last.events),
        ] {
            self.observe_walks(event, now, prev);
        }
        self.observe_tables(stats, &last.stats);
        *last = LastUnwind {
            cpu: *cpu,
            events: events.copied().unwrap_or_default(),
            stats: stats.clone(),
        };
    }

    /// One BPF object's walks: by end, frames by method, and (for the
    /// events object) stacks lost.
    fn observe_walks(&self, event: &'static str, now: &UnwindCounters, prev: &UnwindCounters) {
        for (i, end) in StackEnd::ALL.iter().enumerate() {
            if *end == StackEnd::Kernel {
                continue;
            }
            let label = WalkLabel {
                event: event.into(),
                end: end.label().into(),
            };
            advance(
                &self.user_stacks.get_or_create(&label),
                now.ends[i],
                prev.ends[i],
            );
        }
        for (method, n, p) in [
            ("table", now.table_steps, prev.table_steps),
            ("frame_pointer", now.fp_steps, prev.fp_steps),
        ] {
            let label = MethodLabel {
                method: method.into(),
            };
            advance(&self.frames.get_or_create(&label), n, p);
        }
        // The CPU sampler's losses are also counted by its own counters
        // (kernel/user collision, full map); events' only here.
        if event == "offcpu" {
            for (reason, n, p) in [
                ("stack_map_full", now.lost_full, prev.lost_full),
                ("hash_collision", now.lost_collision, prev.lost_collision),
            ] {
                let label = ReasonLabel::new(event, reason);
                advance(&self.lost_stacks.get_or_create(&label), n, p);
            }
        }
    }

    /// The tables' gauges and work counters.
    fn observe_tables(&self, stats: &UnwindStats, p: &UnwindStats) {
        for (what, v) in [
            ("files", stats.tables),
            ("rows", stats.rows),
            ("bytes", stats.bytes),
            ("budget_bytes", stats.budget_bytes),
            ("processes", stats.processes),
            ("files_without_room", stats.no_room_files),
            ("rules", stats.rules),
            ("refused_last_minute", stats.refused_last_minute),
            ("evicted_last_minute", stats.evicted_last_minute),
        ] {
            self.tables
                .get_or_create(&MapLabel::new(what))
                .set(gauge_value(v));
        }
        for (reason, n, prev) in [
            ("built", stats.builds, p.builds),
            ("build_failed", stats.build_failures, p.build_failures),
            ("refused", stats.refused, p.refused),
            ("no_cfi", stats.no_info_files, p.no_info_files),
            ("corrupt_fde_skipped", stats.bad_fdes, p.bad_fdes),
            ("budget_refused", stats.budget_refused, p.budget_refused),
            ("evicted", stats.evicted, p.evicted),
            (
                "mapping_dropped",
                stats.mappings_dropped,
                p.mappings_dropped,
            ),
            (
                "process_evicted_for_share",
                stats.processes_evicted,
                p.processes_evicted,
            ),
            (
                "table_evicted_for_share",
                stats.tables_evicted_for_share,
                p.tables_evicted_for_share,
            ),
            (
                "table_evicted_cold",
                stats.tables_evicted_cold,
                p.tables_evicted_cold,
            ),
            ("over_file_share", stats.over_share, p.over_share),
            (
                "file_refused_for_share",
                stats.files_refused_for_share,
                p.files_refused_for_share,
            ),
            (
                "file_evicted_for_share",
                stats.files_evicted_for_share,
                p.files_evicted_for_share,
            ),
            ("no_room_retried", stats.no_room_retries, p.no_room_retries),
            ("rows_shared", stats.shared, p.shared),
            (
                "build_id_rows_differ",
                stats.build_id_rows_differ,
                p.build_id_rows_differ,
            ),
            (
                "process_read_deferred",
                stats.reads.deferred,
                p.reads.deferred,
            ),
            ("process_read_dropped", stats.reads.dropped, p.reads.dropped),
            (
                "process_reread_skipped",
                stats.reads.skipped,
                p.reads.skipped,
            ),
        ] {
            let label = MissLabel::new(reason);
            advance(&self.table_events.get_or_create(&label), n, prev);
        }
        self.build_seconds
            .inc_by(stats.build_time.saturating_sub(p.build_time).as_secs_f64());
        self.read_seconds.inc_by(
            stats
                .reads
                .charged
                .saturating_sub(p.reads.charged)
                .as_secs_f64(),
        );
    }
}
