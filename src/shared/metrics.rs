//! The words every stage's metrics share: label sets, the families more
//! than one stage adds to, and the step from a cumulative count to an
//! exported counter.
//!
//! Each stage registers and updates the metrics it counts (`collect::metrics`,
//! `unwind::metrics`, `symbolize::metrics`, `store::metrics`); `serve::metrics`
//! owns the registry and composes them. A family several stages add to
//! (stacks lost, samples dropped, collector faults, memory) is registered
//! once, here, and each stage gets a handle on it: registering a name twice
//! would print it twice.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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

impl ReasonLabel {
    /// The label set of `event` and `reason`.
    pub fn new(event: &'static str, reason: &'static str) -> Self {
        Self {
            event: event.into(),
            reason: reason.into(),
        }
    }
}

/// `map` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MapLabel {
    /// The BPF map.
    pub map: Label,
}

impl MapLabel {
    /// The label set of `map`.
    pub fn new(map: &'static str) -> Self {
        Self { map: map.into() }
    }
}

/// `reason` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MissLabel {
    /// Why an address was not named.
    pub reason: Label,
}

impl MissLabel {
    /// The label set of `reason`.
    pub fn new(reason: &'static str) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

/// Advances an exported counter by what a cumulative count gained since
/// the last look (`prev`); a count that went back (a restarted source)
/// adds nothing.
pub fn advance(counter: &Counter, now: u64, prev: u64) {
    counter.inc_by(now.saturating_sub(prev));
}

/// A size or count as a gauge value (saturating: a gauge is signed).
pub fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The families more than one stage adds to, registered once.
#[derive(Clone, Debug, Default)]
pub struct Common {
    /// `emberd_samples_dropped{event,reason}`: the collector's full maps,
    /// the events' tables, the store's heap view.
    pub dropped: Family<ReasonLabel, Counter>,
    /// `emberd_stacks_lost{event,reason}`: the CPU sampler's and the
    /// events object's losses, and the unwinder's for the events.
    pub lost_stacks: Family<ReasonLabel, Counter>,
    /// `emberd_collector_faults{reason}`: the collector's notices and
    /// drains, the symbolizer's snapshot halvings.
    pub collector_faults: Family<MissLabel, Counter>,
    /// `emberd_memory_bytes{map}`: bytes of each bounded part.
    pub memory: Family<MapLabel, Gauge>,
}

impl Common {
    /// Registers the shared families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let c = Self::default();
        registry.register(
            "samples_dropped",
            "Samples lost before the store, per event and reason",
            c.dropped.clone(),
        );
        registry.register(
            "stacks_lost",
            "Stacks the kernel had but emberd could not keep (shown as [lost])",
            c.lost_stacks.clone(),
        );
        registry.register(
            "collector_faults",
            "Collector trouble that loses no sample but delays or degrades it: new-process notices dropped (maps read late), events drains failed (retried next drain), process snapshots halved for their byte budget",
            c.collector_faults.clone(),
        );
        registry.register(
            "memory_bytes",
            "Bytes held by each bounded part of emberd (map=store|store_ticks|perf_maps|symbol_caches|process_snapshots|dwarf|elf_symbols|kernel_symbols|python_codes|java_methods|unwind_rows|malloc_heap), estimated",
            c.memory.clone(),
        );
        c
    }

    /// Sets the memory gauges (bytes of each bounded part).
    pub fn observe_memory(&self, parts: &[(&'static str, usize)]) {
        for (what, bytes) in parts {
            self.memory
                .get_or_create(&MapLabel::new(what))
                .set(gauge_value(*bytes as u64));
        }
    }
}
