//! Views: what one query shows, for every event, built from the stores. The
//! daemon's routes and `emberd record` both go through here, so a folded file,
//! an SVG and a pprof of the same window always agree.

use crate::profile::Profile;
use crate::query::{Event, Query};
use crate::render::flamegraph::SvgOptions;
use crate::render::pprof;
use crate::store::heap::LiveHeap;
use crate::store::{QueryResult, Selection, Store};
use std::sync::RwLock;

/// Suffix of off-CPU frames in hot/cold graphs, drawn in blue.
pub const COLD_SUFFIX: &str = "_[o]";

/// The stores a view may read. Each is locked only while a query copies its
/// rows out ([`select`]), never while they are folded or rendered.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// CPU samples.
    pub cpu: Option<&'a RwLock<Store>>,
    /// The store of the queried event (off-CPU, wakeup, off-wake, page faults).
    pub event: Option<&'a RwLock<Store>>,
    /// Off-CPU time, for hot/cold.
    pub offcpu: Option<&'a RwLock<Store>>,
    /// Sampled allocations, for the in-use views.
    pub heap: Option<&'a RwLock<LiveHeap>>,
    /// Allocated bytes and objects, for the heap profile.
    pub malloc_bytes: Option<&'a RwLock<Store>>,
    /// Allocated objects, for the heap profile.
    pub objects: Option<&'a RwLock<Store>>,
    /// Mean bytes between malloc samples (the heap profile's period).
    pub malloc_sample_bytes: u64,
    /// Nanoseconds per CPU sample (1e9 / frequency).
    pub cpu_period_ns: u64,
}

/// The in-use rows of `sel` (bytes, objects), copied out under a short
/// read lock.
pub fn select_in_use(heap: &RwLock<LiveHeap>, sel: &Selection) -> (QueryResult, QueryResult) {
    let records = heap
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .live_at(sel.to);
    crate::store::heap::in_use(&records, sel)
}

/// The rows of `sel` in `store`, copied out under a short read lock.
pub fn select(store: &RwLock<Store>, sel: &Selection) -> QueryResult {
    // A poisoned lock means the collector panicked, which ends the process
    // (see serve::Liveness); the data itself is still consistent per insert.
    let store = store.read().unwrap_or_else(|e| e.into_inner());
    store.query(sel)
}

fn ns_to_us(v: u64) -> u64 {
    (v + 500) / 1000
}

/// The folded profile of `q`, in [`Event::folded_unit`] units; `None` names
/// the event whose store is missing (switched off).
pub fn fold(q: &Query, src: Sources<'_>) -> Result<Profile, Event> {
    let mut profile = Profile::new();
    match q.event {
        Event::Cpu => {
            let cpu = src.cpu.ok_or(Event::Cpu)?;
            q.fold_into(&mut profile, &select(cpu, &q.selection), |v| v, "");
        }
        Event::PageFault
        | Event::Brk
        | Event::Mmap
        | Event::Munmap
        | Event::Malloc
        | Event::MallocObjects => {
            let st = src.event.ok_or(q.event)?;
            q.fold_into(&mut profile, &select(st, &q.selection), |v| v, "");
        }
        Event::MallocInUse | Event::MallocInUseObjects => {
            let heap = src.heap.ok_or(q.event)?;
            let (bytes, objects) = select_in_use(heap, &q.selection);
            let rows = if q.event == Event::MallocInUse {
                bytes
            } else {
                objects
            };
            q.fold_into(&mut profile, &rows, |v| v, "");
        }
        Event::OffCpu | Event::Wakeup | Event::OffWake | Event::BlockIo => {
            let st = src.event.ok_or(q.event)?;
            q.fold_into(&mut profile, &select(st, &q.selection), ns_to_us, "");
        }
        Event::HotCold => {
            let cpu = src.cpu.ok_or(Event::Cpu)?;
            let off = src.offcpu.ok_or(Event::OffCpu)?;
            let period = src.cpu_period_ns;
            q.fold_into(
                &mut profile,
                &select(cpu, &q.selection),
                |v| ns_to_us(v * period),
                "",
            );
            q.fold_into(
                &mut profile,
                &select(off, &q.selection),
                ns_to_us,
                COLD_SUFFIX,
            );
        }
    }
    Ok(profile)
}

/// How an event's folded values are shown: the unit's name and the factor
/// from folded units (microseconds for time events, shown as ms).
pub fn display_unit(event: Event) -> (&'static str, f64) {
    match event {
        Event::Cpu => ("samples", 1.0),
        Event::PageFault => ("pages", 1.0),
        Event::Brk | Event::Mmap | Event::Munmap | Event::Malloc | Event::MallocInUse => {
            ("bytes", 1.0)
        }
        Event::MallocObjects | Event::MallocInUseObjects => ("objects", 1.0),
        _ => ("ms", 0.001),
    }
}

/// SVG options for `q` over `profile`: title naming event, unit, host and
/// window, the event's palette, and flamegraph.pl's options from the query.
pub fn svg_options(q: &Query, profile: &Profile, host: &str, frequency_hz: u64) -> SvgOptions {
    let title = q.svg.title.clone().unwrap_or_else(|| {
        let freq = if matches!(q.event, Event::Cpu) {
            format!(" at {frequency_hz} Hz")
        } else {
            String::new()
        };
        format!("{}: {host}, {} s{freq}", q.event.title(), q.seconds)
    });
    let (count_name, factor) = display_unit(q.event);
    let mut opts = SvgOptions::new(title, count_name);
    opts.subtitle = Some(if profile.is_empty() {
        "no samples in this window".to_owned()
    } else if q.event == Event::HotCold {
        "on-CPU warm, off-CPU (_[o]) blue; both in time".to_owned()
    } else {
        format!("{} stacks, grouped by {}", profile.len(), q.group)
    });
    opts.factor = factor;
    opts.palette = Some(q.svg.colors.unwrap_or_else(|| q.event.palette()));
    opts.cold_suffix = (q.event == Event::HotCold).then_some(COLD_SUFFIX);
    opts.hash = q.svg.hash;
    opts.inverted = q.svg.inverted;
    opts.reverse = q.svg.reverse;
    opts.min_width = q.svg.minwidth;
    opts.width = q.svg.width;
    opts
}

/// The pprof profile of `q` (CPU or one stored event; hot/cold has none).
pub fn pprof(
    q: &Query,
    src: Sources<'_>,
    frequency_hz: u64,
) -> Result<pprof::proto::Profile, Event> {
    match q.event {
        Event::Cpu => {
            let cpu = src.cpu.ok_or(Event::Cpu)?;
            Ok(pprof::cpu_profile(
                q,
                &select(cpu, &q.selection),
                frequency_hz,
            ))
        }
        Event::HotCold => Err(Event::HotCold),
        e if e.is_malloc() => heap_pprof(q, src),
        e => {
            let st = src.event.ok_or(e)?;
            let (ty, unit) = match e {
                Event::PageFault => ("pagefaults", "count"),
                Event::Wakeup => ("wakeup", "nanoseconds"),
                Event::OffWake => ("offwake", "nanoseconds"),
                Event::Brk => ("brk", "bytes"),
                Event::Mmap => ("mmap", "bytes"),
                Event::Munmap => ("munmap", "bytes"),
                Event::BlockIo => ("blockio", "nanoseconds"),
                _ => ("offcpu", "nanoseconds"),
            };
            Ok(pprof::event_profile(q, &select(st, &q.selection), ty, unit))
        }
    }
}

/// Go's heap profile of `q`'s window: `alloc_objects`, `alloc_space`
/// (summed over the window), `inuse_objects`, `inuse_space` (at its end),
/// as `go tool pprof`, Parca and Pyroscope read `/debug/pprof/heap`.
pub fn heap_pprof(q: &Query, src: Sources<'_>) -> Result<pprof::proto::Profile, Event> {
    let heap = src.heap.ok_or(Event::MallocInUse)?;
    let allocated = src.malloc_bytes.ok_or(Event::Malloc)?;
    let objects = src.objects.ok_or(Event::MallocObjects)?;
    let (inuse_bytes, inuse_objects) = select_in_use(heap, &q.selection);
    Ok(pprof::heap_profile(
        q,
        [
            &select(objects, &q.selection),
            &select(allocated, &q.selection),
            &inuse_objects,
            &inuse_bytes,
        ],
        src.malloc_sample_bytes,
    ))
}

/// Per-slot totals of `q`'s event over its window (the heat map); `None`
/// names an event whose store is missing, or that has no timeline
/// (hot/cold mixes two, in-use is a state).
pub fn timeline(q: &Query, src: Sources<'_>) -> Result<Vec<crate::store::TimeSlot>, Event> {
    let store = match q.event {
        Event::Cpu => src.cpu,
        Event::HotCold | Event::MallocInUse | Event::MallocInUseObjects => None,
        _ => src.event,
    }
    .ok_or(q.event)?;
    let store = store.read().unwrap_or_else(|e| e.into_inner());
    Ok(store.timeline(&q.selection))
}
