//! The Python metrics: frames and code objects read by the BPF walkers,
//! frames that could not be read, names found at drains, and the Python
//! processes seen: CPython's own metrics, registered beside its code.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::collect::UnwindCounters;
use crate::runtime::NameStats;
use crate::runtime::python::PyMark;
use crate::shared::metrics::{EventLabel, MissLabel, ReasonLabel, advance};

/// The last cumulative figures seen: the CPU and events walkers' counters
/// and the names found at drains.
#[derive(Debug, Default)]
struct LastPython {
    cpu: UnwindCounters,
    events: UnwindCounters,
    names: NameStats,
}

/// The Python metrics.
#[derive(Debug)]
pub struct PythonMetrics {
    frames: Family<EventLabel, Counter>,
    code_reads: Family<EventLabel, Counter>,
    codes_refused: Family<ReasonLabel, Counter>,
    missing: Family<ReasonLabel, Counter>,
    names: Family<MissLabel, Counter>,
    processes: Family<MissLabel, Gauge>,
    last: Mutex<LastPython>,
}

impl PythonMetrics {
    /// Registers the Python families.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            frames: Family::default(),
            code_reads: Family::default(),
            codes_refused: Family::default(),
            missing: Family::default(),
            names: Family::default(),
            processes: Family::default(),
            last: Mutex::default(),
        };
        registry.register(
            "python_frames",
            "Python frames read in BPF (event=cpu: CPU samples; offcpu: every events-object stack)",
            m.frames.clone(),
        );
        registry.register(
            "python_code_reads",
            "Python code objects copied to py_codes in BPF (met for the first time, or again after eviction)",
            m.code_reads.clone(),
        );
        registry.register(
            "python_codes_refused",
            "Python code records not copied to py_codes (their frames read [python: code evicted]), by reason: user_share (their user, not root, holds half of py_codes), map_full",
            m.codes_refused.clone(),
        );
        registry.register(
            "python_frames_missing",
            "Eval-loop calls whose Python frames could not be read, by reason (shown as a [python: ...] marker frame)",
            m.missing.clone(),
        );
        registry.register(
            "python_names",
            "Python frames named at drains (reason=named), or whose code record was missing from py_codes at the drain (reason=evicted: refused for its user's share or a full map, or collected; shown as [python: code evicted])",
            m.names.clone(),
        );
        registry.register(
            "python_processes",
            "Python processes seen: reason=unwound (frames read), or why their stacks stay native",
            m.processes.clone(),
        );
        m
    }

    /// Updates the Python metrics from the walkers' counters, the names
    /// found at drains and the processes seen.
    pub fn observe(
        &self,
        cpu: &UnwindCounters,
        events: Option<&UnwindCounters>,
        names: &NameStats,
        processes: &BTreeMap<&'static str, u64>,
    ) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let none = UnwindCounters::default();
        for (event, now, prev) in [
            ("cpu", cpu, &last.cpu),
            ("offcpu", events.unwrap_or(&none), &last.events),
        ] {
            self.observe_walker(event, now, prev);
        }
        crate::runtime::metrics::advance_names(&self.names, names, &last.names, "evicted");
        crate::runtime::metrics::set_processes(&self.processes, processes);
        *last = LastPython {
            cpu: *cpu,
            events: events.copied().unwrap_or_default(),
            names: *names,
        };
    }

    /// One BPF walker's Python counters (`event` is `cpu` or `offcpu`).
    fn observe_walker(&self, event: &'static str, now: &UnwindCounters, prev: &UnwindCounters) {
        let label = EventLabel {
            event: event.into(),
        };
        advance(
            &self.frames.get_or_create(&label),
            now.py_frames,
            prev.py_frames,
        );
        advance(
            &self.code_reads.get_or_create(&label),
            now.py_codes,
            prev.py_codes,
        );
        for (reason, n, p) in [
            ("user_share", now.py_code_share, prev.py_code_share),
            ("map_full", now.py_code_full, prev.py_code_full),
        ] {
            let label = ReasonLabel::new(event, reason);
            advance(&self.codes_refused.get_or_create(&label), n, p);
        }
        for (i, reason) in PyMark::LABELS.iter().enumerate().skip(1) {
            let label = ReasonLabel::new(event, reason);
            advance(
                &self.missing.get_or_create(&label),
                now.py_marks[i],
                prev.py_marks[i],
            );
        }
    }
}
