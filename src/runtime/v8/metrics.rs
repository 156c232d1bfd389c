//! The JavaScript metrics: frames read by the BPF walkers, V8's own frames
//! left native, names found at drains, and the node processes seen:
//! V8's own metrics, registered beside its code.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::collect::UnwindCounters;
use crate::runtime::NameStats;
use crate::shared::metrics::{EventLabel, MissLabel, ReasonLabel, advance};

/// The last cumulative figures seen.
#[derive(Debug, Default)]
struct Last {
    cpu: UnwindCounters,
    events: UnwindCounters,
    names: NameStats,
}

/// The JavaScript metrics.
#[derive(Debug)]
pub struct NodeMetrics {
    frames: Family<EventLabel, Counter>,
    native: Family<ReasonLabel, Counter>,
    names: Family<MissLabel, Counter>,
    processes: Family<MissLabel, Gauge>,
    last: Mutex<Last>,
}

impl NodeMetrics {
    /// Registers the JavaScript families.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            frames: Family::default(),
            native: Family::default(),
            names: Family::default(),
            processes: Family::default(),
            last: Mutex::default(),
        };
        registry.register(
            "javascript_frames",
            "JavaScript frames read in BPF from V8's frames in node processes (event=cpu: CPU samples; offcpu: every events-object stack)",
            m.frames.clone(),
        );
        registry.register(
            "javascript_native_frames",
            "Frames in V8's code left native: reason=v8_frame (V8's own entry, exit and stub frames, shown as builtins), reason=unreadable (a frame whose function could not be read)",
            m.native.clone(),
        );
        registry.register(
            "javascript_names",
            "JavaScript frames named at drains (reason=named), or whose function was moved or collected by the drain (reason=moved: shown as [v8: function moved or collected]); reason=inlined_unknown: optimized code gone or replaced by the drain, its function named without the functions inlined into it",
            m.names.clone(),
        );
        registry.register(
            "node_processes",
            "Node processes seen: reason=unwound (JavaScript frames read), or why their frames stay V8's code",
            m.processes.clone(),
        );
        m
    }

    /// Updates the JavaScript metrics from the walkers' counters, the
    /// names found at drains and the processes seen.
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
            let label = EventLabel {
                event: event.into(),
            };
            advance(
                &self.frames.get_or_create(&label),
                now.v8_frames,
                prev.v8_frames,
            );
            for (reason, n, p) in [
                ("v8_frame", now.v8_typed, prev.v8_typed),
                ("unreadable", now.v8_not_js, prev.v8_not_js),
            ] {
                advance(
                    &self.native.get_or_create(&ReasonLabel::new(event, reason)),
                    n,
                    p,
                );
            }
        }
        crate::runtime::metrics::advance_names(&self.names, names, &last.names, "moved");
        advance(
            &self.names.get_or_create(&MissLabel::new("inlined_unknown")),
            names.partial,
            last.names.partial,
        );
        crate::runtime::metrics::set_processes(&self.processes, processes);
        *last = Last {
            cpu: *cpu,
            events: events.copied().unwrap_or_default(),
            names: *names,
        };
    }
}
