//! The collector's metrics: samples kept and lost by the CPU sampler, the
//! events programs' hooks, sampling and tables, and the collector's faults.
//! The BPF counters are cumulative; each update exports the difference
//! from the last one seen.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::collect::events::EventCounters;
use crate::collect::{Counter as BpfCounter, Counters};
use crate::shared::metrics::{
    Common, EventLabel, Label, MapLabel, MissLabel, ReasonLabel, advance,
};

/// `hook` label: a BPF program of the events object.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabel {
    /// `sched_switch`, `sched_waking` or `page_fault`.
    pub hook: Label,
}

/// The CPU sampler's cumulative figures at the last drain.
#[derive(Clone, Debug, Default)]
struct LastDrain {
    counters: Counters,
    missing_stacks: u64,
    kept: u64,
}

/// The collector's metrics.
#[derive(Debug)]
pub struct CollectMetrics {
    common: Common,
    samples: Family<EventLabel, Counter>,
    map_fill: Family<MapLabel, Gauge<f64, AtomicU64>>,
    hook_runs: Family<HookLabel, Counter>,
    sampled_out: Family<MissLabel, Counter>,
    events_sampled: Family<EventLabel, Counter>,
    last: Mutex<LastDrain>,
    last_events: Mutex<EventCounters>,
    last_faults: Mutex<[u64; 3]>,
}

impl CollectMetrics {
    /// Registers the collector's families; `common` holds those it shares.
    pub fn register(registry: &mut Registry, common: &Common) -> Self {
        let m = Self {
            common: common.clone(),
            samples: Family::default(),
            map_fill: Family::default(),
            hook_runs: Family::default(),
            sampled_out: Family::default(),
            events_sampled: Family::default(),
            last: Mutex::default(),
            last_events: Mutex::default(),
            last_faults: Mutex::default(),
        };
        registry.register(
            "samples",
            "Samples received from BPF, per event",
            m.samples.clone(),
        );
        registry.register(
            "bpf_map_fill_ratio",
            "Fill of BPF maps at the last drain (1 = full)",
            m.map_fill.clone(),
        );
        registry.register(
            "event_hook_runs",
            "Events seen by the events BPF programs, per hook (sched_switch, sched_waking, page_fault, brk, mmap, munmap, blockio: recorded requests, malloc: allocation calls in traced processes, free, uv_timer_start: timer arms of node processes)",
            m.hook_runs.clone(),
        );
        registry.register(
            "offcpu_sampled_out",
            "Off-CPU periods and wakeups left out by sampling (values of the rest are scaled), by reason",
            m.sampled_out.clone(),
        );
        registry.register(
            "events_sampled",
            "Events recorded with their stack after sampling (malloc: sampled allocations, malloc_free: frees of sampled allocations, timer_wait: off-CPU periods charged to the JavaScript that armed their timer)",
            m.events_sampled.clone(),
        );
        m
    }

    /// Updates the CPU sampler's metrics after a drain: `counters` are the
    /// BPF counters, `missing_stacks_total` the stacks gone at drains and
    /// `kept` the samples kept, all cumulative; `keys_fill` is the counts
    /// map's fill now.
    pub fn observe_drain(
        &self,
        counters: &Counters,
        missing_stacks_total: u64,
        kept: u64,
        keys_fill: f64,
    ) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let d = |c: BpfCounter| counters.get(c).saturating_sub(last.counters.get(c));
        let ev = |r| ReasonLabel::new("cpu", r);
        let (dropped, lost) = (&self.common.dropped, &self.common.lost_stacks);
        advance(
            &self.samples.get_or_create(&EventLabel {
                event: "cpu".into(),
            }),
            kept,
            last.kept,
        );
        dropped
            .get_or_create(&ev("counts_map_full"))
            .inc_by(d(BpfCounter::CountsFull));
        lost.get_or_create(&ev("kernel_stack_collision"))
            .inc_by(d(BpfCounter::KernelStackCollision));
        lost.get_or_create(&ev("user_stack_collision"))
            .inc_by(d(BpfCounter::UserStackCollision));
        lost.get_or_create(&ev("stack_map_full"))
            .inc_by(d(BpfCounter::StackMapFull));
        advance(
            &lost.get_or_create(&ev("missing_at_drain")),
            missing_stacks_total,
            last.missing_stacks,
        );
        self.map_fill
            .get_or_create(&MapLabel::new("counts"))
            .set(keys_fill);
        *last = LastDrain {
            counters: *counters,
            missing_stacks: missing_stacks_total,
            kept,
        };
    }

    /// Updates the events programs' metrics (counters are cumulative).
    pub fn observe_events(&self, c: &EventCounters) {
        let mut last = self.last_events.lock().unwrap_or_else(|e| e.into_inner());
        self.observe_hooks(c, &last);
        self.observe_sampling(c, &last);
        self.observe_event_losses(c, &last);
        *last = *c;
    }

    /// Runs of each events hook.
    fn observe_hooks(&self, c: &EventCounters, p: &EventCounters) {
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
            ("uv_timer_start", c.timer_arms, p.timer_arms),
        ] {
            let label = HookLabel { hook: hook.into() };
            advance(&self.hook_runs.get_or_create(&label), now, prev);
        }
    }

    /// Events, and the stacks of events, lost to full or shared tables.
    fn observe_event_losses(&self, c: &EventCounters, p: &EventCounters) {
        let (dropped, lost) = (&self.common.dropped, &self.common.lost_stacks);
        // The bounded form's table of thread ids: refused to a user holding
        // half of it; entries of threads gone deleted by the agent's sweep.
        for (reason, now, prev) in [
            ("blocked_state_unavailable", c.blocked_full, p.blocked_full),
            (
                "blocked_user_share",
                c.blocked_over_share,
                p.blocked_over_share,
            ),
        ] {
            let label = ReasonLabel::new("offcpu", reason);
            advance(&dropped.get_or_create(&label), now, prev);
        }
        advance(
            &self
                .common
                .collector_faults
                .get_or_create(&MissLabel::new("blocked_state_of_gone_thread_swept")),
            c.blocked_swept,
            p.blocked_swept,
        );
        // By the kind of event lost: off-CPU periods, and the wake events
        // that have buffers of their own.
        for (event, now, prev) in [
            ("offcpu", c.counts_full, p.counts_full),
            ("wakeup", c.wakeup_counts_full, p.wakeup_counts_full),
            ("offwake", c.offwake_counts_full, p.offwake_counts_full),
            ("events", c.other_counts_full, p.other_counts_full),
        ] {
            let label = ReasonLabel::new(event, "counts_map_full");
            advance(&dropped.get_or_create(&label), now, prev);
        }
        // A new stack refused to a user holding half of the events' stack
        // map (the other reasons come with the unwinder's counters).
        for (reason, now, prev) in [
            ("user_share", c.stacks_over_share, p.stacks_over_share),
            ("missing_at_drain", c.missing_at_drain, p.missing_at_drain),
        ] {
            let label = ReasonLabel::new("offcpu", reason);
            advance(&lost.get_or_create(&label), now, prev);
        }
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
            let label = ReasonLabel::new(event, reason);
            advance(&dropped.get_or_create(&label), now, prev);
        }
    }

    /// Off-CPU periods and wakeups left out by sampling, and the malloc
    /// events recorded after it.
    fn observe_sampling(&self, c: &EventCounters, p: &EventCounters) {
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
            let label = MissLabel::new(reason);
            advance(&self.sampled_out.get_or_create(&label), now, prev);
        }
        for (event, now, prev) in [
            ("malloc", c.malloc_sampled, p.malloc_sampled),
            ("malloc_free", c.free_tracked, p.free_tracked),
            ("timer_wait", c.timer_waits, p.timer_waits),
        ] {
            let label = EventLabel {
                event: event.into(),
            };
            advance(&self.events_sampled.get_or_create(&label), now, prev);
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
        .into_iter()
        .enumerate()
        {
            let label = MissLabel::new(reason);
            let counter = self.common.collector_faults.get_or_create(&label);
            advance(&counter, now[i], last[i]);
        }
        *last = now;
    }
}
