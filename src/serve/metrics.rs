//! emberd's own health as Prometheus metrics (`/metrics`), with the
//! prometheus-client crate.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::collect::events::EventCounters;
use crate::collect::{Counter as BpfCounter, Counters, StackEnd, UnwindCounters};
use crate::runtime::NameStats;
use crate::runtime::python::PyMark;
use crate::store::StoreStats;
use crate::store::heap::HeapStats;
use crate::symbolize::Misses;
use crate::unwind::UnwindStats;

/// A label value: the names are fixed strings, borrowed, so updating a
/// counter after every drain allocates nothing (a `String` per label per
/// update was 7% of the idle collector's allocation calls).
pub type Label = std::borrow::Cow<'static, str>;

/// `event` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabel {
    /// The event (`cpu`).
    pub event: Label,
}

/// `event` and `reason` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The event.
    pub event: Label,
    /// Why.
    pub reason: Label,
}

/// `map` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MapLabel {
    /// The BPF map.
    pub map: Label,
}

/// `reason` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MissLabel {
    /// Why an address was not named.
    pub reason: Label,
}

/// `hook` label: a BPF program of the events object.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabel {
    /// `sched_switch`, `sched_waking` or `page_fault`.
    pub hook: Label,
}

/// `route` and `code` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCode {
    /// The route.
    pub route: Label,
    /// HTTP status.
    pub code: u16,
}

/// `destination` label: `pyroscope` or `otlp`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DestinationLabel {
    /// The destination's protocol.
    pub destination: Label,
}

/// `destination` and `result` (or `reason`) labels of pushes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabel {
    /// The destination's protocol.
    pub destination: Label,
    /// `ok`, `failed`; for drops, why.
    pub result: Label,
}

/// `route` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// The route.
    pub route: Label,
}

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

/// A render counted as running (see [`Metrics::render_started`]).
#[derive(Debug)]
pub struct RenderRunning<'a>(&'a Metrics);

impl Drop for RenderRunning<'_> {
    fn drop(&mut self) {
        self.0.renders.dec();
    }
}

/// Every metric emberd exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    samples: Family<EventLabel, Counter>,
    dropped: Family<ReasonLabel, Counter>,
    lost_stacks: Family<ReasonLabel, Counter>,
    map_fill: Family<MapLabel, Gauge<f64, AtomicU64>>,
    misses: Family<MissLabel, Counter>,
    store_bytes: Gauge,
    store_slots: Gauge,
    store_dropped: Counter,
    requests: Family<RouteCode, Counter>,
    latency: Family<RouteLabel, Histogram>,
    drain: Histogram,
    rss: Gauge,
    renders: Gauge,
    renders_max: Gauge,
    heap_in_use: Gauge,
    cpu_seconds: Gauge<f64, AtomicU64>,
    hook_runs: Family<HookLabel, Counter>,
    events_sampled: Family<EventLabel, Counter>,
    heap: Family<MapLabel, Gauge>,
    last_heap: Mutex<HeapStats>,
    sampled_out: Family<MissLabel, Counter>,
    last: Mutex<(Counters, Misses, u64, u64)>,
    last_events: Mutex<EventCounters>,
    user_stacks: Family<WalkLabel, Counter>,
    perf_map_refused: Family<MissLabel, Counter>,
    collector_faults: Family<MissLabel, Counter>,
    python_frames: Family<EventLabel, Counter>,
    python_code_reads: Family<EventLabel, Counter>,
    python_codes_refused: Family<ReasonLabel, Counter>,
    python_missing: Family<ReasonLabel, Counter>,
    python_names: Family<MissLabel, Counter>,
    python_processes: Family<MissLabel, Gauge>,
    last_python: Mutex<(UnwindCounters, UnwindCounters, NameStats)>,
    memory: Family<MapLabel, Gauge>,
    last_faults: Mutex<[u64; 3]>,
    unwind_frames: Family<MethodLabel, Counter>,
    unwind_gauges: Family<MapLabel, Gauge>,
    unwind_counts: Family<MissLabel, Counter>,
    unwind_build_seconds: Counter<f64, AtomicU64>,
    last_unwind: Mutex<LastUnwind>,
    pushes: Family<PushLabel, Counter>,
    push_bytes: Family<DestinationLabel, Counter>,
    push_dropped: Family<PushLabel, Counter>,
    push_queued: Family<DestinationLabel, Gauge>,
    push_last_success: Family<DestinationLabel, Gauge>,
    push_label_sets_folded: Counter,
    proc_maps_truncated: Counter,
}

impl Metrics {
    /// Registers every metric.
    pub fn new(store_budget_bytes: usize) -> Self {
        let mut registry = Registry::with_prefix("emberd");
        let samples = Family::<EventLabel, Counter>::default();
        registry.register(
            "samples",
            "Samples received from BPF, per event",
            samples.clone(),
        );
        let dropped = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "samples_dropped",
            "Samples lost before the store, per event and reason",
            dropped.clone(),
        );
        let lost_stacks = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "stacks_lost",
            "Stacks the kernel had but emberd could not keep (shown as [lost])",
            lost_stacks.clone(),
        );
        let map_fill = Family::<MapLabel, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "bpf_map_fill_ratio",
            "Fill of BPF maps at the last drain (1 = full)",
            map_fill.clone(),
        );
        let misses = Family::<MissLabel, Counter>::default();
        registry.register(
            "symbolize_misses",
            "Addresses that could not be named, by reason",
            misses.clone(),
        );
        let store_bytes = Gauge::default();
        registry.register(
            "store_bytes",
            "Estimated bytes of the sample stores, all events",
            store_bytes.clone(),
        );
        let store_budget: Gauge = Gauge::default();
        store_budget.set(i64::try_from(store_budget_bytes).unwrap_or(i64::MAX));
        registry.register(
            "store_budget_bytes",
            "Memory budget of the sample store",
            store_budget.clone(),
        );
        let store_slots = Gauge::default();
        registry.register(
            "store_slots",
            "Time slots held by the stores, all events",
            store_slots.clone(),
        );
        let store_dropped = Counter::default();
        registry.register(
            "store_slots_dropped_for_budget",
            "Oldest slots dropped to stay within the memory budget",
            store_dropped.clone(),
        );
        let requests = Family::<RouteCode, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests per route and status",
            requests.clone(),
        );
        let latency = Family::<RouteLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        let drain = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "drain_duration_seconds",
            "Time of one drain: reading and clearing the BPF maps, naming the stacks, adding them to the stores",
            drain.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency per route",
            latency.clone(),
        );
        let rss = Gauge::default();
        registry.register(
            "process_resident_memory_bytes",
            "emberd's resident set size",
            rss.clone(),
        );
        let renders = Gauge::default();
        registry.register(
            "renders_running",
            "Renders running on blocking threads now (at most serve::MAX_CONCURRENT_RENDERS)",
            renders.clone(),
        );
        let renders_max = Gauge::default();
        registry.register(
            "renders_running_max",
            "The most renders that ran at once since emberd started",
            renders_max.clone(),
        );
        let heap_in_use = Gauge::default();
        registry.register(
            "process_heap_in_use_bytes",
            "Bytes of emberd's heap in use (malloc's count); RSS minus this is mapped files, stacks and free memory the allocator keeps",
            heap_in_use.clone(),
        );
        let cpu_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "process_cpu_seconds",
            "emberd's user + system CPU time in seconds",
            cpu_seconds.clone(),
        );
        let hook_runs = Family::<HookLabel, Counter>::default();
        registry.register(
            "event_hook_runs",
            "Events seen by the events BPF programs, per hook (sched_switch, sched_waking, page_fault, brk, mmap, munmap, blockio: recorded requests, malloc: allocation calls in traced processes, free)",
            hook_runs.clone(),
        );
        let sampled_out = Family::<MissLabel, Counter>::default();
        registry.register(
            "offcpu_sampled_out",
            "Off-CPU periods and wakeups left out by sampling (values of the rest are scaled), by reason",
            sampled_out.clone(),
        );
        let events_sampled = Family::<EventLabel, Counter>::default();
        registry.register(
            "events_sampled",
            "Events recorded with their stack after sampling (malloc: sampled allocations, malloc_free: frees of sampled allocations)",
            events_sampled.clone(),
        );
        let heap = Family::<MapLabel, Gauge>::default();
        registry.register(
            "malloc_heap_records",
            "Sampled allocations the daemon keeps for the in-use view (map=live|freed)",
            heap.clone(),
        );
        let user_stacks = Family::<WalkLabel, Counter>::default();
        registry.register(
            "user_stacks",
            "User stacks walked in BPF, by how the walk ended (complete: reached the root)",
            user_stacks.clone(),
        );
        let unwind_frames = Family::<MethodLabel, Counter>::default();
        registry.register(
            "unwind_frames",
            "User frames unwound in BPF, by method",
            unwind_frames.clone(),
        );
        let unwind_gauges = Family::<MapLabel, Gauge>::default();
        registry.register(
            "unwind_tables",
            "Unwind tables in the BPF row array (map=files|rows|bytes|budget_bytes|processes|files_without_room|rules|refused_last_minute|evicted_last_minute): rows are 4-byte words; files_without_room are mapped files whose table found no room (their stacks end in [unwind error: table budget full: FILE]); rules are the distinct rules rows name",
            unwind_gauges.clone(),
        );
        let unwind_counts = Family::<MissLabel, Counter>::default();
        registry.register(
            "unwind_table_events",
            "Unwind-table work: builds, failures (corrupt or unreadable files), files refused unread (not ELF, sections over the cap), files without CFI, corrupt FDEs skipped, budget refusals (budget_refused; over_file_share: one table over a quarter of the budget), evictions (evicted: no process maps it; table_evicted_cold: its processes had not run for 30 s; table_evicted_for_share), tables built again once room was made (no_room_retried), mappings dropped",
            unwind_counts.clone(),
        );
        let unwind_build_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "unwind_table_build_seconds",
            "Time the builder thread spent compiling unwind tables",
            unwind_build_seconds.clone(),
        );
        let perf_map_refused = Family::<MissLabel, Counter>::default();
        registry.register(
            "perf_maps_refused",
            "Perf maps not read (not a regular file, other owner, too large, unresolvable in the process's root) or dropped for the cache budget",
            perf_map_refused.clone(),
        );
        let collector_faults = Family::<MissLabel, Counter>::default();
        registry.register(
            "collector_faults",
            "Collector trouble that loses no sample but delays or degrades it: new-process notices dropped (maps read late), events drains failed (retried next drain), process snapshots halved for their byte budget",
            collector_faults.clone(),
        );
        let python_frames = Family::<EventLabel, Counter>::default();
        registry.register(
            "python_frames",
            "Python frames read in BPF (event=cpu: CPU samples; offcpu: every events-object stack)",
            python_frames.clone(),
        );
        let python_code_reads = Family::<EventLabel, Counter>::default();
        registry.register(
            "python_code_reads",
            "Python code objects copied to py_codes in BPF (met for the first time, or again after eviction)",
            python_code_reads.clone(),
        );
        let python_codes_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "python_codes_refused",
            "Python code records not copied to py_codes (their frames read [python: code evicted]), by reason: user_share (their user, not root, holds half of py_codes), map_full",
            python_codes_refused.clone(),
        );
        let python_missing = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "python_frames_missing",
            "Eval-loop calls whose Python frames could not be read, by reason (shown as a [python: ...] marker frame)",
            python_missing.clone(),
        );
        let python_names = Family::<MissLabel, Counter>::default();
        registry.register(
            "python_names",
            "Python frames named at drains (reason=named), or whose code record was missing from py_codes at the drain (reason=evicted: refused for its user's share or a full map, or collected; shown as [python: code evicted])",
            python_names.clone(),
        );
        let python_processes = Family::<MissLabel, Gauge>::default();
        registry.register(
            "python_processes",
            "Python processes seen: reason=unwound (frames read), or why their stacks stay native",
            python_processes.clone(),
        );
        let memory = Family::<MapLabel, Gauge>::default();
        registry.register(
            "memory_bytes",
            "Bytes held by each bounded part of emberd (map=store|store_ticks|perf_maps|symbol_caches|process_snapshots|dwarf|elf_symbols|kernel_symbols|python_codes|unwind_rows|malloc_heap), estimated",
            memory.clone(),
        );
        let pushes = Family::<PushLabel, Counter>::default();
        registry.register(
            "push",
            "Pushes to Pyroscope or OTLP by destination and result (ok; failed; refused_listener: the port was held by a local user not trusted with the credentials, nothing sent; each retry counts)",
            pushes.clone(),
        );
        let push_bytes = Family::<DestinationLabel, Counter>::default();
        registry.register(
            "push_bytes",
            "Body bytes of accepted pushes, compressed as sent",
            push_bytes.clone(),
        );
        let push_dropped = Family::<PushLabel, Counter>::default();
        registry.register(
            "push_dropped_intervals",
            "Intervals never delivered, by destination and reason (queue_full: the oldest went; rejected: a 4xx answer)",
            push_dropped.clone(),
        );
        let push_queued = Family::<DestinationLabel, Gauge>::default();
        registry.register(
            "push_queued_intervals",
            "Intervals waiting to be pushed",
            push_queued.clone(),
        );
        let push_last_success = Family::<DestinationLabel, Gauge>::default();
        registry.register(
            "push_last_success_timestamp_seconds",
            "Unix time of the last accepted push (0: none yet)",
            push_last_success.clone(),
        );
        let proc_maps_truncated = Counter::default();
        registry.register(
            "proc_maps_truncated",
            "Reads of a process's /proc/PID/maps cut at 16 MiB read or 2 MiB of code mappings (shared::procmaps): that process's later code mappings go unnamed",
            proc_maps_truncated.clone(),
        );
        let push_label_sets_folded = Counter::default();
        registry.register(
            "push_label_sets_folded",
            "Service/unit/container label sets pushed as [other services], past push_max_label_sets in an event's interval",
            push_label_sets_folded.clone(),
        );
        Self {
            events_sampled,
            heap,
            last_heap: Mutex::new(HeapStats::default()),
            memory,
            collector_faults,
            python_frames,
            python_code_reads,
            python_codes_refused,
            python_missing,
            python_names,
            python_processes,
            last_python: Mutex::new(Default::default()),
            last_faults: Mutex::new([0; 3]),
            perf_map_refused,
            user_stacks,
            unwind_frames,
            unwind_gauges,
            unwind_counts,
            unwind_build_seconds,
            last_unwind: Mutex::new(LastUnwind::default()),
            pushes,
            push_bytes,
            push_dropped,
            push_queued,
            push_last_success,
            push_label_sets_folded,
            proc_maps_truncated,
            hook_runs,
            sampled_out,
            last_events: Mutex::new(EventCounters::default()),
            registry,
            samples,
            dropped,
            lost_stacks,
            map_fill,
            misses,
            store_bytes,
            store_slots,
            store_dropped,
            requests,
            latency,
            drain,
            rss,
            renders,
            renders_max,
            heap_in_use,
            cpu_seconds,
            last: Mutex::new(Default::default()),
        }
    }

    /// Updates the collector metrics after a drain (counters are cumulative;
    /// the exported counters advance by the difference).
    pub fn observe_drain(
        &self,
        counters: &Counters,
        misses: &Misses,
        missing_stacks_total: u64,
        kept: u64,
        keys_fill: f64,
    ) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let (prev_c, prev_m, prev_missing, prev_kept) = last.clone();
        let ev = |r: &'static str| ReasonLabel {
            event: "cpu".into(),
            reason: r.into(),
        };
        let d = |c: BpfCounter| counters.get(c).saturating_sub(prev_c.get(c));
        self.samples
            .get_or_create(&EventLabel {
                event: "cpu".into(),
            })
            .inc_by(kept.saturating_sub(prev_kept));
        self.dropped
            .get_or_create(&ev("counts_map_full"))
            .inc_by(d(BpfCounter::CountsFull));
        self.lost_stacks
            .get_or_create(&ev("kernel_stack_collision"))
            .inc_by(d(BpfCounter::KernelStackCollision));
        self.lost_stacks
            .get_or_create(&ev("user_stack_collision"))
            .inc_by(d(BpfCounter::UserStackCollision));
        self.lost_stacks
            .get_or_create(&ev("stack_map_full"))
            .inc_by(d(BpfCounter::StackMapFull));
        self.lost_stacks
            .get_or_create(&ev("missing_at_drain"))
            .inc_by(missing_stacks_total.saturating_sub(prev_missing));
        self.map_fill
            .get_or_create(&MapLabel {
                map: "counts".into(),
            })
            .set(keys_fill);
        for (reason, now, prev) in [
            ("process_gone", misses.process_gone, prev_m.process_gone),
            ("unmapped", misses.unmapped, prev_m.unmapped),
            (
                "anon_no_perf_map",
                misses.anon_no_perf_map,
                prev_m.anon_no_perf_map,
            ),
            ("elf_error", misses.elf_error, prev_m.elf_error),
            ("elf_timeout", misses.elf_timeout, prev_m.elf_timeout),
            ("no_symbol", misses.no_symbol, prev_m.no_symbol),
            (
                "kernel_no_symbol",
                misses.kernel_no_symbol,
                prev_m.kernel_no_symbol,
            ),
            (
                "perf_map_malformed_line",
                misses.perf_map_malformed_lines,
                prev_m.perf_map_malformed_lines,
            ),
            (
                "perf_map_entry_dropped",
                misses.perf_map_entries_dropped,
                prev_m.perf_map_entries_dropped,
            ),
        ] {
            self.misses
                .get_or_create(&MissLabel {
                    reason: reason.into(),
                })
                .inc_by(now.saturating_sub(prev));
        }
        for r in crate::symbolize::untrusted::Refusal::ALL {
            let get = |m: &Misses| m.perf_map_refused.get(&r).copied().unwrap_or(0);
            self.perf_map_refused
                .get_or_create(&MissLabel {
                    reason: r.label().into(),
                })
                .inc_by(get(misses).saturating_sub(get(&prev_m)));
        }
        self.perf_map_refused
            .get_or_create(&MissLabel {
                reason: "evicted_for_budget".into(),
            })
            .inc_by(
                misses
                    .perf_maps_evicted
                    .saturating_sub(prev_m.perf_maps_evicted),
            );
        self.collector_faults
            .get_or_create(&MissLabel {
                reason: "process_snapshots_halved".into(),
            })
            .inc_by(
                misses
                    .snapshots_evicted
                    .saturating_sub(prev_m.snapshots_evicted),
            );
        *last = (*counters, misses.clone(), missing_stacks_total, kept);
    }

    /// Updates the events programs' metrics (counters are cumulative).
    pub fn observe_events(&self, c: &EventCounters) {
        let mut last = self.last_events.lock().unwrap_or_else(|e| e.into_inner());
        let p = *last;
        for (hook, now, prev) in [
            ("sched_switch", c.switches, p.switches),
            ("sched_waking", c.wakeups, p.wakeups),
            ("page_fault", c.pagefaults, p.pagefaults),
            ("brk", c.brk, p.brk),
            ("mmap", c.mmap, p.mmap),
            ("munmap", c.munmap, p.munmap),
            ("blockio", c.blockio, p.blockio),
            ("malloc", c.malloc_calls, p.malloc_calls),
            ("free", c.free_calls, p.free_calls),
        ] {
            self.hook_runs
                .get_or_create(&HookLabel { hook: hook.into() })
                .inc_by(now.saturating_sub(prev));
        }
        let ev = |r: &'static str| ReasonLabel {
            event: "offcpu".into(),
            reason: r.into(),
        };
        self.dropped
            .get_or_create(&ev("blocked_state_unavailable"))
            .inc_by(c.blocked_full.saturating_sub(p.blocked_full));
        // The bounded form's table of thread ids: refused to a user holding
        // half of it; entries of threads gone deleted by the agent's sweep.
        self.dropped
            .get_or_create(&ev("blocked_user_share"))
            .inc_by(c.blocked_over_share.saturating_sub(p.blocked_over_share));
        self.collector_faults
            .get_or_create(&MissLabel {
                reason: "blocked_state_of_gone_thread_swept".into(),
            })
            .inc_by(c.blocked_swept.saturating_sub(p.blocked_swept));
        // By the kind of event lost: off-CPU periods, and the wake events
        // that have buffers of their own.
        for (event, now, prev) in [
            ("offcpu", c.counts_full, p.counts_full),
            ("wakeup", c.wakeup_counts_full, p.wakeup_counts_full),
            ("offwake", c.offwake_counts_full, p.offwake_counts_full),
            ("events", c.other_counts_full, p.other_counts_full),
        ] {
            self.dropped
                .get_or_create(&ReasonLabel {
                    event: event.into(),
                    reason: "counts_map_full".into(),
                })
                .inc_by(now.saturating_sub(prev));
        }
        for (reason, now, prev) in [
            ("one_in_n", c.sampled_out, p.sampled_out),
            (
                "short_period",
                c.short_offcpu_sampled_out,
                p.short_offcpu_sampled_out,
            ),
            (
                "short_wakeup",
                c.short_wakeups_sampled_out,
                p.short_wakeups_sampled_out,
            ),
        ] {
            self.sampled_out
                .get_or_create(&MissLabel {
                    reason: reason.into(),
                })
                .inc_by(now.saturating_sub(prev));
        }
        for (event, now, prev) in [
            ("malloc", c.malloc_sampled, p.malloc_sampled),
            ("malloc_free", c.free_tracked, p.free_tracked),
        ] {
            self.events_sampled
                .get_or_create(&EventLabel {
                    event: event.into(),
                })
                .inc_by(now.saturating_sub(prev));
        }
        // A new stack refused to a user holding half of the events' stack
        // map (the other reasons come with the unwinder's counters).
        self.lost_stacks
            .get_or_create(&ReasonLabel {
                event: "offcpu".into(),
                reason: "user_share".into(),
            })
            .inc_by(c.stacks_over_share.saturating_sub(p.stacks_over_share));
        self.lost_stacks
            .get_or_create(&ReasonLabel {
                event: "offcpu".into(),
                reason: "missing_at_drain".into(),
            })
            .inc_by(c.missing_at_drain.saturating_sub(p.missing_at_drain));
        for (event, reason, now, prev) in [
            ("events", "nested", c.nested_skipped, p.nested_skipped),
            ("events", "dropped_map_full", c.dropped_full, p.dropped_full),
            (
                "syscalls",
                "entry_state_full",
                c.syscall_state_full,
                p.syscall_state_full,
            ),
            (
                "blockio",
                "start_not_seen",
                c.blockio_unmatched,
                p.blockio_unmatched,
            ),
            (
                "blockio",
                "in_flight_table_full",
                c.blockio_full,
                p.blockio_full,
            ),
            (
                "blockio",
                "end_not_seen",
                c.blockio_end_not_seen,
                p.blockio_end_not_seen,
            ),
            (
                "malloc",
                "live_table_full",
                c.malloc_live_full,
                p.malloc_live_full,
            ),
            (
                "malloc",
                "ring_buffer_full",
                c.heap_ring_full,
                p.heap_ring_full,
            ),
        ] {
            self.dropped
                .get_or_create(&ReasonLabel {
                    event: event.into(),
                    reason: reason.into(),
                })
                .inc_by(now.saturating_sub(prev));
        }
        *last = *c;
    }

    /// Updates the live-heap figures (malloc's in-use view).
    pub fn observe_heap(&self, h: &HeapStats) {
        let mut last = self.last_heap.lock().unwrap_or_else(|e| e.into_inner());
        for (what, n) in [("live", h.live), ("freed", h.freed)] {
            self.heap
                .get_or_create(&MapLabel { map: what.into() })
                .set(n as i64);
        }
        for (reason, now, prev) in [
            ("agent_table_full", h.overflow, last.overflow),
            ("free_of_untracked", h.unmatched_frees, last.unmatched_frees),
        ] {
            self.dropped
                .get_or_create(&ReasonLabel {
                    event: "malloc".into(),
                    reason: reason.into(),
                })
                .inc_by(now.saturating_sub(prev));
        }
        self.observe_memory(&[("malloc_heap", h.bytes)]);
        *last = *h;
    }

    /// Sets the memory gauges (bytes of each bounded part).
    pub fn observe_memory(&self, parts: &[(&'static str, usize)]) {
        for (what, bytes) in parts {
            self.memory
                .get_or_create(&MapLabel {
                    map: (*what).into(),
                })
                .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
        }
    }

    /// Updates the collector-fault counters (arguments are cumulative).
    pub fn observe_faults(&self, cpu_notices: u64, event_notices: u64, events_drains: u64) {
        let mut last = self.last_faults.lock().unwrap_or_else(|e| e.into_inner());
        let now = [cpu_notices, event_notices, events_drains];
        for (i, reason) in [
            "new_process_notice_dropped_cpu",
            "new_process_notice_dropped_events",
            "events_drain_failed",
        ]
        .iter()
        .enumerate()
        {
            self.collector_faults
                .get_or_create(&MissLabel {
                    reason: (*reason).into(),
                })
                .inc_by(now[i].saturating_sub(last[i]));
        }
        *last = now;
    }

    /// Updates the unwinder's metrics (counters are cumulative): walks by
    /// end, frames by method, stacks lost by reason, and the tables.
    pub fn observe_unwind(
        &self,
        cpu: &UnwindCounters,
        events: Option<&UnwindCounters>,
        stats: &UnwindStats,
    ) {
        let mut last = self.last_unwind.lock().unwrap_or_else(|e| e.into_inner());
        let none = UnwindCounters::default();
        for (event, now, prev) in [
            ("cpu", cpu, &last.cpu),
            ("offcpu", events.unwrap_or(&none), &last.events),
        ] {
            for (i, end) in StackEnd::ALL.iter().enumerate() {
                if *end == StackEnd::Kernel {
                    continue;
                }
                self.user_stacks
                    .get_or_create(&WalkLabel {
                        event: event.into(),
                        end: end.label().into(),
                    })
                    .inc_by(now.ends[i].saturating_sub(prev.ends[i]));
            }
            for (method, n, p) in [
                ("table", now.table_steps, prev.table_steps),
                ("frame_pointer", now.fp_steps, prev.fp_steps),
            ] {
                self.unwind_frames
                    .get_or_create(&MethodLabel {
                        method: method.into(),
                    })
                    .inc_by(n.saturating_sub(p));
            }
            // The CPU sampler's losses are also counted by its own counters
            // (kernel/user collision, full map); events' only here.
            if event == "offcpu" {
                for (reason, n, p) in [
                    ("stack_map_full", now.lost_full, prev.lost_full),
                    ("hash_collision", now.lost_collision, prev.lost_collision),
                ] {
                    self.lost_stacks
                        .get_or_create(&ReasonLabel {
                            event: event.into(),
                            reason: reason.into(),
                        })
                        .inc_by(n.saturating_sub(p));
                }
            }
        }
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
            self.unwind_gauges
                .get_or_create(&MapLabel { map: what.into() })
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        let p = &last.stats;
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
            ("no_room_retried", stats.no_room_retries, p.no_room_retries),
        ] {
            self.unwind_counts
                .get_or_create(&MissLabel {
                    reason: reason.into(),
                })
                .inc_by(n.saturating_sub(prev));
        }
        self.unwind_build_seconds
            .inc_by(stats.build_time.saturating_sub(p.build_time).as_secs_f64());
        *last = LastUnwind {
            cpu: *cpu,
            events: events.copied().unwrap_or_default(),
            stats: stats.clone(),
        };
    }

    /// Updates the Python metrics from the walkers' counters, the names
    /// found at drains and the processes seen.
    pub fn observe_python(
        &self,
        cpu: &UnwindCounters,
        events: Option<&UnwindCounters>,
        names: &NameStats,
        processes: &std::collections::BTreeMap<&'static str, u64>,
    ) {
        let mut last = self.last_python.lock().unwrap_or_else(|e| e.into_inner());
        let none = UnwindCounters::default();
        for (event, now, prev) in [
            ("cpu", cpu, &last.0),
            ("offcpu", events.unwrap_or(&none), &last.1),
        ] {
            let label = EventLabel {
                event: event.into(),
            };
            self.python_frames
                .get_or_create(&label)
                .inc_by(now.py_frames.saturating_sub(prev.py_frames));
            self.python_code_reads
                .get_or_create(&label)
                .inc_by(now.py_codes.saturating_sub(prev.py_codes));
            for (reason, n, p) in [
                ("user_share", now.py_code_share, prev.py_code_share),
                ("map_full", now.py_code_full, prev.py_code_full),
            ] {
                self.python_codes_refused
                    .get_or_create(&ReasonLabel {
                        event: event.into(),
                        reason: reason.into(),
                    })
                    .inc_by(n.saturating_sub(p));
            }
            for (i, reason) in PyMark::LABELS.iter().enumerate().skip(1) {
                self.python_missing
                    .get_or_create(&ReasonLabel {
                        event: event.into(),
                        reason: (*reason).into(),
                    })
                    .inc_by(now.py_marks[i].saturating_sub(prev.py_marks[i]));
            }
        }
        for (reason, n, p) in [
            ("named", names.named, last.2.named),
            ("evicted", names.evicted, last.2.evicted),
        ] {
            self.python_names
                .get_or_create(&MissLabel {
                    reason: reason.into(),
                })
                .inc_by(n.saturating_sub(p));
        }
        self.python_processes.clear();
        for (state, n) in processes {
            self.python_processes
                .get_or_create(&MissLabel {
                    reason: (*state).into(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        *last = (*cpu, events.copied().unwrap_or_default(), *names);
    }

    /// Updates the store metrics after an insert; `dropped_before` is the
    /// store's budget-drop count before it.
    pub fn observe_store(&self, stats: &StoreStats, dropped_before: u64) {
        self.observe_store_gauges(stats);
        self.store_dropped
            .inc_by(stats.dropped_for_budget.saturating_sub(dropped_before));
    }

    /// Records how long one drain took.
    pub fn observe_drain_time(&self, took: std::time::Duration) {
        self.drain.observe(took.as_secs_f64());
    }

    /// Updates the store gauges only.
    pub fn observe_store_gauges(&self, stats: &StoreStats) {
        self.store_bytes.set(stats.bytes as i64);
        self.store_slots.set(stats.slots as i64);
    }

    /// Counts a render in `renders_running` until the guard is dropped.
    pub fn render_started(&self) -> RenderRunning<'_> {
        let now = self.renders.inc() + 1;
        // fetch_max on the gauge's own atomic: concurrent starts cannot
        // lower the high-water mark.
        self.renders_max
            .inner()
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
        RenderRunning(self)
    }

    /// Counts one HTTP request.
    pub fn observe_request(&self, route: &str, code: u16, seconds: f64) {
        self.requests
            .get_or_create(&RouteCode {
                route: route.to_owned().into(),
                code,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabel {
                route: route.to_owned().into(),
            })
            .observe(seconds);
    }

    /// The pushers' counters, copied as they are now.
    pub fn observe_push(&self, pusher: &crate::export::Pusher) {
        use std::sync::atomic::Ordering::Relaxed;
        self.push_label_sets_folded
            .inner()
            .store(pusher.folded_label_sets.load(Relaxed), Relaxed);
        for lane in &pusher.lanes {
            let d: Label = lane.destination.protocol.name().into();
            let st = &lane.stats;
            let set = |f: &Family<PushLabel, Counter>, result: &'static str, v: u64| {
                f.get_or_create(&PushLabel {
                    destination: d.clone(),
                    result: result.into(),
                })
                .inner()
                .store(v, Relaxed);
            };
            set(&self.pushes, "ok", st.pushed.load(Relaxed));
            set(&self.pushes, "failed", st.failed.load(Relaxed));
            set(
                &self.pushes,
                "refused_listener",
                st.refused_listener.load(Relaxed),
            );
            set(
                &self.push_dropped,
                "queue_full",
                st.dropped_queue_full.load(Relaxed),
            );
            set(
                &self.push_dropped,
                "rejected",
                st.dropped_rejected.load(Relaxed),
            );
            let dl = DestinationLabel {
                destination: d.clone(),
            };
            self.push_bytes
                .get_or_create(&dl)
                .inner()
                .store(st.bytes.load(Relaxed), Relaxed);
            self.push_queued
                .get_or_create(&dl)
                .set(st.queued.load(Relaxed) as i64);
            self.push_last_success
                .get_or_create(&dl)
                .set(st.last_success.load(Relaxed) as i64);
        }
    }

    /// The text exposition, with process figures read now.
    pub fn encode(&self) -> String {
        if let Some((rss, cpu)) = self_usage() {
            self.rss.set(rss as i64);
            self.cpu_seconds.set(cpu);
        }
        #[cfg(target_env = "gnu")]
        {
            // SAFETY: mallinfo2 only reads the allocator's counters.
            let m = unsafe { libc::mallinfo2() };
            self.heap_in_use
                .set(i64::try_from(m.uordblks + m.hblkhd).unwrap_or(i64::MAX));
        }
        self.proc_maps_truncated
            .inner()
            .store(crate::shared::procmaps::truncated(), Ordering::Relaxed);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// (RSS bytes, CPU seconds) of this process.
fn self_usage() -> Option<(u64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14, 15 (utime, stime) and 24 (rss pages), counted from 1 in
    // proc(5); `after` starts at field 3.
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()??
        .max(1) as f64;
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let rss_pages: u64 = f.get(21)?.parse().ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()??
        .max(1) as u64;
    Some((rss_pages * page, (utime + stime) / tick))
}
