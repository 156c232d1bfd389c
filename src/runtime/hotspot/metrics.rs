//! The Java metrics: frames unwound by the BPF walkers, walks stopped at a
//! marker, names found at drains, and the JVM processes seen: HotSpot's own
//! metrics, registered beside its code.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::frames::JavaMark;
use crate::collect::UnwindCounters;
use crate::runtime::NameStats;
use crate::shared::metrics::{EventLabel, MissLabel, ReasonLabel, advance};

/// The last cumulative figures seen.
#[derive(Debug, Default)]
struct LastJava {
    cpu: UnwindCounters,
    events: UnwindCounters,
    names: NameStats,
}

/// The Java metrics.
#[derive(Debug)]
pub struct JavaMetrics {
    frames: Family<EventLabel, Counter>,
    stopped: Family<ReasonLabel, Counter>,
    names: Family<MissLabel, Counter>,
    processes: Family<MissLabel, Gauge>,
    last: Mutex<LastJava>,
}

impl JavaMetrics {
    /// Registers the Java families.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            frames: Family::default(),
            stopped: Family::default(),
            names: Family::default(),
            processes: Family::default(),
            last: Mutex::default(),
        };
        registry.register(
            "java_frames",
            "Java frames (interpreted, compiled, stubs) unwound in BPF from HotSpot code caches (event=cpu: CPU samples; offcpu: every events-object stack)",
            m.frames.clone(),
        );
        registry.register(
            "java_walks_stopped",
            "Java walks that stopped at a [java: ...] marker, by reason: frame_unreadable, no_blob (a code cache address in no blob), frame (a frame that does not move up the stack)",
            m.stopped.clone(),
        );
        registry.register(
            "java_names",
            "Java frames named at drains (reason=named), or whose compiled code was gone or replaced by the drain (reason=flushed: shown as [java: compiled code flushed]), or that a read of the JVM failed to name (reason=unreadable: [java: code unreadable], [java: method unreadable]; the log says why)",
            m.names.clone(),
        );
        registry.register(
            "java_processes",
            "HotSpot JVM processes seen: reason=unwound (code cache walked), starting (tables not read yet), or why their Java frames stay unnamed",
            m.processes.clone(),
        );
        m
    }

    /// Updates the Java metrics from the walkers' counters, the names
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
            let label = EventLabel {
                event: event.into(),
            };
            advance(
                &self.frames.get_or_create(&label),
                now.java_frames,
                prev.java_frames,
            );
            for (i, mark) in JavaMark::ALL.iter().enumerate().skip(1) {
                let label = ReasonLabel::new(event, mark.label());
                advance(
                    &self.stopped.get_or_create(&label),
                    now.java_marks[i],
                    prev.java_marks[i],
                );
            }
        }
        crate::runtime::metrics::advance_names(&self.names, names, &last.names, "flushed");
        crate::runtime::metrics::set_processes(&self.processes, processes);
        *last = LastJava {
            cpu: *cpu,
            events: events.copied().unwrap_or_default(),
            names: *names,
        };
    }
}
