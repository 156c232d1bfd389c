//! Views: what one query shows, for every event, built from the stores. The
//! daemon's routes and `emberd record` both go through here, so a folded file,
//! an SVG and a pprof of the same window always agree.

use crate::query::calltree::CallTree;
use crate::query::profile::Profile;
use crate::query::{Event, Query};
use crate::render::flamegraph::SvgOptions;
use crate::render::pprof;
use crate::store::heap::LiveHeap;
use crate::store::tiered::EventStore;
use crate::store::{QueryResult, Selection};
use std::sync::RwLock;

/// Suffix of off-CPU frames in hot/cold graphs, drawn in blue.
pub const COLD_SUFFIX: &str = "_[o]";

/// The stores a view may read. Each is locked only while a query copies its
/// rows out ([`select`]), never while they are folded or rendered.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// CPU samples.
    pub cpu: Option<EventStore<'a>>,
    /// The store of the queried event (off-CPU, wakeup, off-wake, page faults).
    pub event: Option<EventStore<'a>>,
    /// Off-CPU time, for hot/cold.
    pub offcpu: Option<EventStore<'a>>,
    /// Sampled allocations, for the in-use views.
    pub heap: Option<&'a RwLock<LiveHeap>>,
    /// Allocated bytes and objects, for the heap profile.
    pub malloc_bytes: Option<EventStore<'a>>,
    /// Allocated objects, for the heap profile.
    pub objects: Option<EventStore<'a>>,
    /// Mean bytes between malloc samples (the heap profile's period).
    pub malloc_sample_bytes: u64,
    /// Nanoseconds per CPU sample (1e9 / frequency).
    pub cpu_period_ns: u64,
}

impl<'a> Sources<'a> {
    /// The stores of `history` that a view of `event` reads.
    pub fn of(
        history: &'a crate::store::History,
        event: Event,
        malloc_sample_bytes: u64,
        frequency_hz: u64,
    ) -> Self {
        use crate::collect::events::EventKind;
        let h = history;
        Sources {
            // The heap profile of every malloc view reads allocated bytes
            // and objects beside the live heap.
            heap: h.heap.as_ref(),
            malloc_bytes: h.event_store(EventKind::Malloc),
            objects: h.event_store(EventKind::MallocObjects),
            malloc_sample_bytes,
            cpu: Some(h.cpu_store()),
            event: event
                .kind()
                .filter(|k| *k != EventKind::Cpu)
                .and_then(|k| h.event_store(k)),
            offcpu: (event == Event::HotCold)
                .then(|| h.event_store(EventKind::OffCpu))
                .flatten(),
            cpu_period_ns: 1_000_000_000 / frequency_hz.max(1),
        }
    }
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

/// The rows of `sel` in `store`: memory's copied out under a short read
/// lock, older seconds read from disk (see [`EventStore::select`]).
pub fn select(store: EventStore<'_>, sel: &Selection) -> QueryResult {
    store.select(sel)
}

fn ns_to_us(v: u64) -> u64 {
    (v + 500) / 1000
}

/// Calls `f` with each set of rows `q` shows, with how their values map to
/// [`Event::folded_unit`] units and the suffix their frames take (hot/cold
/// has two); `Err` names the event whose store is missing (switched off).
fn each_rows(
    q: &Query,
    src: Sources<'_>,
    mut f: impl FnMut(&QueryResult, &dyn Fn(u64) -> u64, &str),
) -> Result<(), Event> {
    match q.event {
        Event::Cpu => {
            let cpu = src.cpu.ok_or(Event::Cpu)?;
            f(&select(cpu, &q.selection), &|v: u64| v, "");
        }
        Event::MallocInUse | Event::MallocInUseObjects => {
            let heap = src.heap.ok_or(q.event)?;
            let (bytes, objects) = select_in_use(heap, &q.selection);
            let rows = if q.event == Event::MallocInUse {
                bytes
            } else {
                objects
            };
            f(&rows, &|v: u64| v, "");
        }
        Event::HotCold => {
            let cpu = src.cpu.ok_or(Event::Cpu)?;
            let off = src.offcpu.ok_or(Event::OffCpu)?;
            let period = src.cpu_period_ns;
            f(
                &select(cpu, &q.selection),
                &|v: u64| ns_to_us(v * period),
                "",
            );
            f(&select(off, &q.selection), &ns_to_us, COLD_SUFFIX);
        }
        // Every other event is stored: its own store, times folded in us.
        e => {
            let st = src.event.ok_or(e)?;
            let unit: &dyn Fn(u64) -> u64 = if e.is_time() { &ns_to_us } else { &|v| v };
            f(&select(st, &q.selection), unit, "");
        }
    }
    Ok(())
}

/// The folded profile of `q`, in [`Event::folded_unit`] units; `None` names
/// the event whose store is missing (switched off).
pub fn fold(q: &Query, src: Sources<'_>) -> Result<Profile, Event> {
    let mut profile = Profile::new();
    each_rows(q, src, |rows, scale, suffix| {
        q.fold_into(&mut profile, rows, scale, suffix)
    })?;
    Ok(profile)
}

/// The call tree of `q`'s flame graph: the same frames as [`fold`]'s lines
/// (leaf first with `reverse`), built from the rows' ids without making the
/// lines, except when a line filter (`include`, `exclude`) needs their
/// text or `reverse` turns them around.
pub fn call_tree(q: &Query, src: Sources<'_>) -> Result<CallTree, Event> {
    if q.include.is_some() || q.exclude.is_some() || q.svg.reverse {
        return Ok(CallTree::from_profile(&fold(q, src)?, q.svg.reverse));
    }
    let mut tree = CallTree::new();
    each_rows(q, src, |rows, scale, suffix| {
        q.fold_tree(&mut tree, rows, scale, suffix)
    })?;
    Ok(tree)
}

/// Where history begins, in store seconds: the oldest CPU slot kept (the
/// CPU store makes one at every drain, so eviction by age or budget shows
/// here), or emberd's start before its first drain.
pub fn history_start(src: Sources<'_>) -> u64 {
    src.cpu
        .and_then(|c| c.oldest())
        .unwrap_or_else(crate::shared::clock::started)
}

/// The row filters of `sel` as a user wrote them (`pid 42 and comm
/// "nginx"`), or `None` without any.
fn filters(sel: &Selection) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(p) = sel.pid {
        parts.push(format!("pid {p}"));
    }
    if let Some(t) = sel.tid {
        parts.push(format!("tid {t}"));
    }
    if let Some(c) = &sel.comm {
        parts.push(format!("comm {:?}", c.as_str()));
    }
    for (name, v) in [
        ("unit", &sel.unit),
        ("container", &sel.container),
        ("service", &sel.service),
    ] {
        if let Some(v) = v {
            parts.push(format!("{name} {v:?}"));
        }
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// Why `q`'s answer holds no samples, in one line (for `X-Emberd-Note` and
/// the SVG's subtitle): a window in the future or before history, a process
/// never seen (or seen only at other times), line filters that left nothing,
/// or plainly no samples. `now` is store time; times are shown as wall
/// time in RFC 3339, as users give them.
pub fn why_empty(q: &Query, src: Sources<'_>, now: u64) -> String {
    use crate::query::format_rfc3339;
    let iso = |t: u64| format_rfc3339(crate::shared::clock::to_wall(t));
    let sel = &q.selection;
    if sel.from > now {
        return format!("the window starts after now ({})", iso(now));
    }
    let start = history_start(src);
    if sel.to <= start {
        return format!(
            "the window ({} to {}) is before history starts: history starts at {}",
            iso(sel.from),
            iso(sel.to),
            iso(start)
        );
    }
    // Said after the main reason: part of the window has no history.
    let partly = if sel.from < start {
        format!("; history starts at {}", iso(start))
    } else {
        String::new()
    };
    if let Some(who) = filters(sel) {
        let read = |st: EventStore<'_>| st.seen(sel);
        let store = match q.event {
            Event::Cpu | Event::HotCold => src.cpu,
            Event::MallocInUse | Event::MallocInUseObjects => src.malloc_bytes,
            _ => src.event,
        };
        if let Some((a, b)) = store.and_then(read) {
            return format!(
                "{who} has no samples in this window; it has some between {} and {}{partly}",
                iso(a),
                iso(b)
            );
        }
        if !matches!(q.event, Event::Cpu | Event::HotCold) && src.cpu.and_then(read).is_some() {
            return format!(
                "{who} has no {} samples since history starts ({}), though it ran on CPU",
                q.event.name(),
                iso(start)
            );
        }
        return format!(
            "{who} was never seen: no samples of it since history starts ({})",
            iso(start)
        );
    }
    if q.include.is_some() || q.exclude.is_some() {
        let mut all = q.clone();
        all.include = None;
        all.exclude = None;
        if fold(&all, src).is_ok_and(|p| !p.is_empty()) {
            return format!(
                "no stack in this window matches include/exclude (it has stacks without them){partly}"
            );
        }
    }
    format!("no samples in this window{partly}")
}

/// How an event's folded values are shown: the unit's name and the factor
/// from folded units (microseconds for time events, shown as ms).
pub fn display_unit(event: Event) -> (&'static str, f64) {
    event.spec().unit.display()
}

/// SVG options for `q` over `stacks` folded stacks: title naming event,
/// unit, host and window, the event's palette, and flamegraph.pl's options
/// from the query.
pub fn svg_options(q: &Query, stacks: usize, host: &str, frequency_hz: u64) -> SvgOptions {
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
    opts.subtitle = Some(if stacks == 0 {
        "no samples in this window".to_owned()
    } else if q.event == Event::HotCold {
        "on-CPU warm, off-CPU (_[o]) blue; both in time".to_owned()
    } else {
        format!("{stacks} stacks, grouped by {}", q.group)
    });
    opts.factor = factor;
    opts.palette = Some(q.svg.colors.unwrap_or_else(|| q.event.palette()));
    opts.cold_suffix = (q.event == Event::HotCold).then_some(COLD_SUFFIX);
    opts.hash = q.svg.hash;
    opts.inverted = q.svg.inverted;
    opts.reverse = q.svg.reverse;
    opts.min_width = q.svg.minwidth;
    opts.width = q.svg.width;
    opts.frame_height = q.svg.height;
    opts.max_depth = q.svg.maxdepth;
    opts
}

/// The pprof profile of `q` (CPU or one stored event; hot/cold has none).
pub fn pprof(
    q: &Query,
    src: Sources<'_>,
    frequency_hz: u64,
) -> Result<pprof::proto::Profile, Event> {
    match q.event {
        Event::HotCold => Err(Event::HotCold),
        e if e.is_malloc() => heap_pprof(q, src),
        e => {
            let st = if e == Event::Cpu { src.cpu } else { src.event };
            let st = st.ok_or(e)?;
            Ok(pprof_of_rows(q, &select(st, &q.selection), frequency_hz))
        }
    }
}

/// The pprof profile of rows already selected for `q`, CPU or one stored
/// event (not the heap profile, which reads four stores).
pub fn pprof_of_rows(q: &Query, rows: &QueryResult, frequency_hz: u64) -> pprof::proto::Profile {
    match q.event {
        Event::Cpu => pprof::cpu_profile(q, rows, frequency_hz),
        e => {
            let (ty, unit) = e.spec().pprof.unwrap_or(("offcpu", "nanoseconds"));
            pprof::event_profile(q, rows, ty, unit)
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

/// Per-slot totals of `q`'s event over its window (the heat map), and
/// where its store's history begins; `Err`
/// names an event whose store is missing, or that has no timeline
/// (hot/cold mixes two, in-use is a state).
pub fn timeline(q: &Query, src: Sources<'_>) -> Result<Timeline, Event> {
    let store = match q.event {
        Event::Cpu => src.cpu,
        Event::HotCold | Event::MallocInUse | Event::MallocInUseObjects => None,
        _ => src.event,
    }
    .ok_or(q.event)?;
    Ok(Timeline {
        slots: store.timeline(&q.selection),
        oldest: store.oldest(),
    })
}

/// A store's slots within a query's window, and where its history begins.
#[derive(Debug)]
pub struct Timeline {
    /// See [`crate::store::Store::timeline`].
    pub slots: Vec<crate::store::TimeSlot>,
    /// See [`crate::store::Store::oldest`].
    pub oldest: Option<u64>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::render::flamegraph;
    use crate::shared::{Frame, FrameKind};
    use crate::shared::{Pid, Tid};
    use crate::store::{Store, StoreOptions};
    use crate::symbolize::SymbolizedSample;

    const T0: u64 = 1_000_000;

    fn sample(
        pid: u32,
        tid: u32,
        comm: &str,
        frames: &[(&str, FrameKind, u32)],
    ) -> SymbolizedSample {
        SymbolizedSample {
            pid: Pid(pid),
            tid: Tid(tid),
            thread_comm: Arc::from(format!("{comm}:{tid}").as_str()),
            process_comm: Arc::from(comm),
            frames: frames
                .iter()
                .map(|&(name, kind, line)| Frame {
                    line: Some(line),
                    ..Frame::new(name, kind)
                })
                .collect(),
            workload: Default::default(),
            account: 0,
            count: u64::from(pid + tid),
            at_ms: None,
        }
    }

    fn store(samples: &[SymbolizedSample]) -> RwLock<Store> {
        let mut st = Store::new(StoreOptions::default());
        st.insert(T0, samples);
        RwLock::new(st)
    }

    fn query(params: &str) -> Query {
        let params: Vec<(String, String)> = params
            .split('&')
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect();
        Query::parse(&params, T0 + 1, 3600).unwrap()
    }

    /// The SVG drawn from a folded profile and from the tree built from
    /// ids are the same, byte for byte, for every grouping and for
    /// hot/cold's suffixed frames: frames alike in name (two lines of one
    /// function, `;` in a name), empty stacks, nameless tasks.
    #[test]
    fn the_tree_from_ids_draws_what_the_folded_lines_draw() {
        use FrameKind::{Inlined, Kernel, User};
        let cpu = store(&[
            sample(
                1,
                1,
                "p",
                &[("main", User, 1), ("f;g", User, 2), ("leaf", Kernel, 3)],
            ),
            sample(
                1,
                2,
                "p",
                &[("main", User, 1), ("f;g", User, 9), ("leaf", Kernel, 3)],
            ),
            sample(2, 2, "p", &[("main", User, 1), ("f:g", User, 2)]),
            sample(3, 3, "q", &[]),
            sample(
                4,
                5,
                "q",
                &[("main", User, 1), ("x", Inlined, 4), ("x", Inlined, 5)],
            ),
            sample(5, 5, "", &[("", User, 1), ("a", User, 2)]),
            sample(6, 6, "", &[]),
            sample(
                7,
                7,
                "r",
                &[("main", User, 1), ("", User, 2), ("b", User, 2)],
            ),
        ]);
        let off = store(&[
            sample(1, 1, "p", &[("main", User, 1), ("sleep", Kernel, 1)]),
            sample(8, 8, "s", &[("main", User, 1)]),
        ]);
        let src = Sources {
            cpu: Some(EventStore::memory_only(&cpu)),
            event: Some(EventStore::memory_only(&off)),
            offcpu: Some(EventStore::memory_only(&off)),
            heap: None,
            malloc_bytes: None,
            objects: None,
            malloc_sample_bytes: 1,
            cpu_period_ns: 10_101_010,
        };
        let mut checked = 0;
        for event in ["cpu", "offcpu", "hotcold"] {
            for group in ["host", "process", "pid", "thread"] {
                let q = query(&format!(
                    "seconds=30&event={event}&group={group}&minwidth=0"
                ));
                let profile = fold(&q, src).unwrap();
                let tree = call_tree(&q, src).unwrap();
                assert_eq!(tree.lines(), profile.len(), "{event} {group}");
                let opts = svg_options(&q, profile.len(), "h", 99);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                flamegraph::write(&profile, &opts, &mut a).unwrap();
                flamegraph::write_tree(&tree, &opts, &mut b).unwrap();
                assert_eq!(
                    String::from_utf8(a).unwrap(),
                    String::from_utf8(b).unwrap(),
                    "{event} {group}"
                );
                checked += profile.len();
            }
        }
        assert!(checked > 40, "the stores were queried: {checked} lines");
    }
}
