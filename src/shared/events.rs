//! The events emberd records and the views built from them, each declared
//! once in [`EVENTS`]: its name, unit, default palette, title, the id its
//! BPF records carry and the names it is pushed and exported under. Every
//! stage reads this table (collect the BPF id, query the name and palette,
//! render the unit and title, export the pushed names); none keeps a
//! `match` of its own over the events.
//!
//! Adding an event: a variant of [`Event`], its row of [`EVENTS`], and its
//! BPF program (with its row of `src/collect/programs.rs`).

use crate::bpf::enums as c;

/// The events emberd records, and the views built from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Event {
    /// On-CPU samples of the cpu-clock event.
    #[default]
    Cpu,
    /// Off-CPU time, charged to the blocked stack.
    OffCpu,
    /// Blocked time of woken threads, charged to the waker's stack.
    Wakeup,
    /// Blocked stack `--` waker stack.
    OffWake,
    /// Page faults.
    PageFault,
    /// On-CPU and off-CPU time of the same threads, in one graph.
    HotCold,
    /// Bytes the heap's break grew by (brk), by caller.
    Brk,
    /// Bytes mapped by mmap(), anonymous and file-backed as leaf frames.
    Mmap,
    /// Bytes unmapped by munmap().
    Munmap,
    /// Block I/O latency, by the stack that started the request.
    BlockIo,
    /// Bytes allocated by malloc and friends over the window (sampled).
    Malloc,
    /// Objects allocated over the window (sampled).
    MallocObjects,
    /// Sampled allocations not freed at the end of the window: bytes (the
    /// memory-leak flame graph).
    MallocInUse,
    /// Sampled allocations not freed at the end of the window: objects.
    MallocInUseObjects,
}

/// What an event's values count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// CPU samples.
    Samples,
    /// Page faults (sampled count x period).
    Pages,
    /// Bytes.
    Bytes,
    /// Objects (allocations).
    Objects,
    /// Time: stored in ns, folded in us, drawn in ms.
    Time,
}

impl Unit {
    /// The unit of folded values.
    pub fn folded(self) -> &'static str {
        match self {
            Unit::Samples => "samples",
            Unit::Pages => "pages",
            Unit::Bytes => "bytes",
            Unit::Objects => "objects",
            Unit::Time => "us",
        }
    }

    /// How values are shown: the unit's name and the factor from folded
    /// units (microseconds for time, shown as ms).
    pub fn display(self) -> (&'static str, f64) {
        match self {
            Unit::Time => ("ms", 0.001),
            u => (u.folded(), 1.0),
        }
    }
}

/// One event, as every stage knows it.
#[derive(Debug, Clone, Copy)]
pub struct EventSpec {
    /// The event.
    pub event: Event,
    /// The name used in `event=` and `--event`.
    pub name: &'static str,
    /// What its values count.
    pub unit: Unit,
    /// The SVG title's event part, with its unit, as flamegraph.pl users
    /// know it.
    pub title: &'static str,
    /// The default palette, a flamegraph.pl `--colors` name (after its
    /// habits), read by `query::palette`.
    pub palette: &'static str,
    /// The id its BPF records carry (`enum emberd_event` in
    /// `bpf/emberd.h`): the event is stored. None: a view of other stores
    /// (CPU has its own object, hot/cold and in-use combine stores).
    pub bpf_id: Option<u32>,
    /// pprof's sample type and unit of its `/debug/pprof` profile (CPU
    /// and the heap views have profiles of their own).
    pub pprof: Option<(&'static str, &'static str)>,
    /// Pushed to Pyroscope and OTLP: Pyroscope's `__name__`, OTLP's sample
    /// type and unit. CPU is Pyroscope's documented `process_cpu`,
    /// allocations its `memory` (Go's heap profile); Pyroscope documents no
    /// name for the rest, so they go by emberd's event names.
    pub push: Option<(&'static str, (&'static str, &'static str))>,
}

const NS: &str = "nanoseconds";

/// Every event, in documentation order ([`Event`]'s order: `EVENTS[e as
/// usize]` is `e`'s row, checked at build time).
pub const EVENTS: [EventSpec; 14] = [
    EventSpec {
        event: Event::Cpu,
        name: "cpu",
        unit: Unit::Samples,
        title: "CPU Flame Graph (samples)",
        palette: "java",
        bpf_id: None,
        pprof: None,
        push: Some(("process_cpu", ("samples", "count"))),
    },
    EventSpec {
        event: Event::OffCpu,
        name: "offcpu",
        unit: Unit::Time,
        title: "Off-CPU Time Flame Graph (ms)",
        palette: "io",
        bpf_id: Some(c::EVENT_OFFCPU),
        pprof: Some(("offcpu", NS)),
        push: Some(("offcpu", ("off_cpu", NS))),
    },
    EventSpec {
        event: Event::Wakeup,
        name: "wakeup",
        unit: Unit::Time,
        title: "Wakeup Time Flame Graph (ms)",
        palette: "wakeup",
        bpf_id: Some(c::EVENT_WAKEUP),
        pprof: Some(("wakeup", NS)),
        push: Some(("wakeup", ("wakeup", NS))),
    },
    EventSpec {
        event: Event::OffWake,
        name: "offwake",
        unit: Unit::Time,
        title: "Off-Wake Time Flame Graph (ms)",
        palette: "aqua",
        bpf_id: Some(c::EVENT_OFFWAKE),
        pprof: Some(("offwake", NS)),
        push: None,
    },
    EventSpec {
        event: Event::PageFault,
        name: "pagefault",
        unit: Unit::Pages,
        title: "Page Fault Flame Graph (pages)",
        palette: "mem",
        bpf_id: Some(c::EVENT_PAGEFAULT),
        pprof: Some(("pagefaults", "count")),
        push: Some(("pagefault", ("page_faults", "count"))),
    },
    EventSpec {
        event: Event::HotCold,
        name: "hotcold",
        unit: Unit::Time,
        title: "Hot/Cold Flame Graph (ms)",
        palette: "java",
        bpf_id: None,
        pprof: None,
        push: None,
    },
    EventSpec {
        event: Event::Brk,
        name: "brk",
        unit: Unit::Bytes,
        title: "Heap Expansion Flame Graph (bytes)",
        palette: "mem",
        bpf_id: Some(c::EVENT_BRK),
        pprof: Some(("brk", "bytes")),
        push: Some(("brk", ("brk", "bytes"))),
    },
    EventSpec {
        event: Event::Mmap,
        name: "mmap",
        unit: Unit::Bytes,
        title: "mmap() bytes Flame Graph",
        palette: "mem",
        bpf_id: Some(c::EVENT_MMAP),
        pprof: Some(("mmap", "bytes")),
        push: Some(("mmap", ("mmap", "bytes"))),
    },
    EventSpec {
        event: Event::Munmap,
        name: "munmap",
        unit: Unit::Bytes,
        title: "munmap() bytes Flame Graph",
        palette: "mem",
        bpf_id: Some(c::EVENT_MUNMAP),
        pprof: Some(("munmap", "bytes")),
        push: Some(("munmap", ("munmap", "bytes"))),
    },
    EventSpec {
        event: Event::BlockIo,
        name: "blockio",
        unit: Unit::Time,
        title: "Block I/O Time Flame Graph (ms)",
        palette: "io",
        bpf_id: Some(c::EVENT_BLOCKIO),
        pprof: Some(("blockio", NS)),
        push: Some(("blockio", ("block_io", NS))),
    },
    EventSpec {
        event: Event::Malloc,
        name: "malloc",
        unit: Unit::Bytes,
        title: "malloc() bytes Flame Graph (allocated, sampled)",
        palette: "mem",
        bpf_id: Some(c::EVENT_MALLOC),
        pprof: None,
        push: Some(("memory", ("alloc_space", "bytes"))),
    },
    EventSpec {
        event: Event::MallocObjects,
        name: "malloc_objects",
        unit: Unit::Objects,
        title: "malloc() objects Flame Graph (allocated, sampled)",
        palette: "mem",
        bpf_id: Some(c::EVENT_MALLOC_OBJECTS),
        pprof: None,
        push: None,
    },
    EventSpec {
        event: Event::MallocInUse,
        name: "malloc_inuse",
        unit: Unit::Bytes,
        title: "Memory Leak Flame Graph (bytes in use, sampled)",
        palette: "mem",
        bpf_id: None,
        pprof: None,
        push: None,
    },
    EventSpec {
        event: Event::MallocInUseObjects,
        name: "malloc_inuse_objects",
        unit: Unit::Objects,
        title: "Memory Leak Flame Graph (objects in use, sampled)",
        palette: "mem",
        bpf_id: None,
        pprof: None,
        push: None,
    },
];

// The table is in `Event`'s order, so a lookup is an index.
const _: () = {
    let mut i = 0;
    while i < EVENTS.len() {
        assert!(
            EVENTS[i].event as usize == i,
            "EVENTS is not in Event's order"
        );
        i += 1;
    }
};

impl Event {
    /// Every event, in documentation order.
    pub const ALL: [Event; EVENTS.len()] = {
        let mut all = [Event::Cpu; EVENTS.len()];
        let mut i = 0;
        while i < EVENTS.len() {
            all[i] = EVENTS[i].event;
            i += 1;
        }
        all
    };

    /// Its row of [`EVENTS`].
    pub fn spec(self) -> &'static EventSpec {
        &EVENTS[self as usize]
    }

    /// The name used in `event=` and `--event`.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The event named `s`.
    pub fn from_name(s: &str) -> Option<Event> {
        EVENTS.iter().find(|e| e.name == s).map(|e| e.event)
    }

    /// The stored event whose BPF records carry `id` (`enum emberd_event`).
    pub fn from_bpf_id(id: u32) -> Option<Event> {
        EVENTS
            .iter()
            .find(|e| e.bpf_id == Some(id))
            .map(|e| e.event)
    }

    /// The stored event behind this view (`None` for CPU, hot/cold and
    /// the in-use views): itself, when its BPF records carry it.
    pub fn kind(self) -> Option<Event> {
        self.spec().bpf_id.map(|_| self)
    }

    /// Whether this view comes from malloc tracing (allocated or in use).
    pub fn is_malloc(self) -> bool {
        matches!(
            self,
            Event::Malloc | Event::MallocObjects | Event::MallocInUse | Event::MallocInUseObjects
        )
    }

    /// Whether this view is the live sampled heap (a state at the window's
    /// end, not a sum over it).
    pub fn is_in_use(self) -> bool {
        matches!(self, Event::MallocInUse | Event::MallocInUseObjects)
    }

    /// Whether values are times (stored in ns, folded in us, drawn in ms).
    pub fn is_time(self) -> bool {
        self.spec().unit == Unit::Time
    }

    /// The unit of folded values.
    pub fn folded_unit(self) -> &'static str {
        self.spec().unit.folded()
    }

    /// The SVG title's event part, with its unit, as flamegraph.pl users know it.
    pub fn title(self) -> &'static str {
        self.spec().title
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_bpf_ids_are_unique() {
        for (i, a) in EVENTS.iter().enumerate() {
            for b in &EVENTS[i + 1..] {
                assert_ne!(a.name, b.name);
                assert!(a.bpf_id.is_none() || a.bpf_id != b.bpf_id, "{}", a.name);
            }
            assert_eq!(Event::from_name(a.name), Some(a.event));
            if let Some(id) = a.bpf_id {
                assert_eq!(Event::from_bpf_id(id), Some(a.event));
            }
        }
        assert_eq!(Event::from_bpf_id(0), None);
    }
}
