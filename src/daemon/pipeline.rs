//! The collect → symbolize step both `emberd record` and the daemon run once
//! a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::collect::events::{
    EventCounters, EventKind, EventOptions, EventSampler, EventsDrain, HeapChange, RawEvent,
};
use crate::collect::new_process::NewProcessRing;
use crate::collect::{CollectError, Counters, CpuSampler, SamplerOptions, UnwindCounters};
use crate::runtime::{NameStats, RuntimeOptions};
use crate::shared::Pid;
use crate::shared::heartbeat::Heartbeat;
use crate::symbolize::{EarlyMaps, Misses, SymbolizedSample, Symbolizer, SymbolizerOptions};
use crate::unwind::{Admission, UnwindStats, Unwinder};

/// How often the BPF maps are drained and symbolized.
pub const DRAIN_INTERVAL: Duration = Duration::from_secs(1);

/// How often, while a new process's mappings are still being re-read or
/// unwind tables built, the collector comes back to them between drains.
/// (New processes themselves wake it through the notice ring at once; an
/// idle host wakes it once a second.)
pub const NEW_PROCESS_POLL: Duration = Duration::from_millis(50);

/// How long after a new-process notice its maps are read. Also paces the
/// wakes under process churn (hundreds a second): notices are taken in
/// batches, not one wake each.
const NEW_PROCESS_SETTLE: Duration = Duration::from_millis(10);
/// A process noticed while a drain is named has its mappings read at once
/// and again as EARLY_REREAD says, each wait after the read before (its
/// loader may still be mapping libraries), the first EARLY_PROCESSES_MAX
/// of a drain (and every one of root's): the symbolizer takes them after
/// the drain if it has gone by then. The first re-read comes soon: read
/// at its notice, a process of 50 ms beside a fork storm had not mapped
/// libc yet, and at 200 ms the re-read came after it exited (its libc
/// frames `[exited]`). The naming comes back to these reads each time a
/// wait for the ELF reader passes `elf_worker::WAIT_SLICE` (50 ms), so
/// the re-reads come about 50, 100 and 300 ms after the first in practice.
const EARLY_REREAD: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(40),
    Duration::from_millis(200),
];
const EARLY_READS: u8 = EARLY_REREAD.len() as u8 + 1;
const EARLY_PROCESSES_MAX: usize = 256;

/// A process noticed while a drain was being named. The list is as long
/// as the drain's notices admitted; maps are held for the first
/// EARLY_PROCESSES_MAX only, and root's.
struct Noticed {
    pid: Pid,
    /// The account its reads are charged to.
    account: u32,
    read_at: Option<Instant>,
    reads: u8,
    early: Option<EarlyMaps>,
}

/// Longest wait on the notice ring before the stop flag is looked at.
const STOP_CHECK: Duration = Duration::from_millis(250);

/// The least time between drains when the events programs ask for one
/// early (their counts buffer half full): bounds the agent's work under a
/// storm of distinct stacks.
const MIN_EARLY_DRAIN: Duration = Duration::from_millis(100);

/// How long a poll waits for unwind tables being built (see
/// [`Unwinder::poll`]).
const UNWIND_TABLE_WAIT: Duration = Duration::from_millis(50);

/// At start, how long sampling waits for the running processes' unwind
/// tables (each file's is built once, on one thread: beside 50 processes
/// of 10 programs, 20 ms; a host's few hundred distinct files take about a
/// second). Tables still building then are published as they come.
const STARTUP_TABLE_WAIT: Duration = Duration::from_secs(3);

/// One drain's output.
#[derive(Debug, Default)]
pub struct Batch {
    /// Named samples.
    pub samples: Vec<SymbolizedSample>,
    /// Stack ids missing at drain time (counted as lost).
    pub missing_stacks: u64,
    /// Distinct (thread, stack) keys drained: the counts map's fill.
    pub keys: usize,
    /// Named aggregates of the events programs.
    pub events: Vec<(EventKind, SymbolizedSample)>,
    /// Sampled allocations (named) and their frees, in order.
    pub heap: Vec<crate::store::heap::Change>,
    /// When the drain started (after the wait for new processes).
    pub started: Option<Instant>,
    /// The drain came before `until`: the events' counts buffer was half
    /// full. The next drain is still due at `until`.
    pub early: bool,
}

/// The sampler and the symbolizer, stepped together.
#[derive(Debug)]
pub struct Pipeline {
    sampler: CpuSampler,
    events: Option<EventSampler>,
    symbolizer: Symbolizer,
    unwinder: Unwinder,
    new_processes: NewProcessRing,
    last_refresh: Instant,
    events_drain_failures: u64,
    /// When the last drain started, or the last early drain of the
    /// events' buffers.
    last_drain: Instant,
    /// Beaten while a drain waits on a bounded read (a file's symbols, the
    /// kernel's): the daemon's `/readyz` tells such a drain from a stuck
    /// collector by it.
    heartbeat: Option<Arc<Heartbeat>>,
}

/// What a new process needs from the unwinder and the events programs
/// (its mappings read for unwind tables; malloc's uprobes if it is named).
fn note_for_unwinding(
    pid: crate::shared::Pid,
    tables: bool,
    unwinder: &mut Unwinder,
    events: &mut Option<EventSampler>,
) {
    if let Some(e) = events {
        e.watch_process(pid);
    }
    if tables {
        unwinder.note_process(pid);
    }
}

/// New processes read at one wake at most, of those waiting for their
/// account's credit: the rest wait for the next (50 ms later).
const MAX_DUE_PER_WAKE: usize = 64;

/// `pids` in order, each once (both BPF objects notice a process).
fn once_each(pids: Vec<Pid>) -> Vec<Pid> {
    let mut seen = std::collections::HashSet::with_capacity(pids.len());
    pids.into_iter().filter(|p| seen.insert(*p)).collect()
}

/// Attaches the timer uprobes the unwinder found (Node processes).
fn attach_timer_hooks(unwinder: &mut Unwinder, events: &mut Option<EventSampler>) {
    for hook in unwinder.take_timer_hooks() {
        if let Some(e) = events {
            e.attach_node_timer(&hook);
        }
    }
}

impl Pipeline {
    /// Loads and attaches the CPU sampler, and the events programs if any
    /// event is switched on, for a one-shot profile (`record`): each
    /// file's symbols are waited for up to
    /// [`RECORD_FILE_DEADLINE`](crate::symbolize::elf_worker::RECORD_FILE_DEADLINE).
    pub fn start(
        options: SamplerOptions,
        events: EventOptions,
        runtimes: RuntimeOptions,
    ) -> Result<Self, CollectError> {
        // `record`: a one-shot profile waits for slow reads of symbols.
        let symbolizer = SymbolizerOptions {
            elf_deadline: crate::symbolize::elf_worker::RECORD_FILE_DEADLINE,
            ..Default::default()
        };
        Self::start_with(options, events, runtimes, symbolizer)
    }

    /// [`Pipeline::start`] with symbolizer options (perf-map bounds).
    pub fn start_with(
        options: SamplerOptions,
        events: EventOptions,
        runtimes: RuntimeOptions,
        symbolizer: SymbolizerOptions,
    ) -> Result<Self, CollectError> {
        // Start the store clock before the first sample, so that every
        // sample's tick maps to a time after its origin.
        crate::shared::clock::now();
        let mut symbolizer = Symbolizer::new(symbolizer);
        let mut sampler = CpuSampler::load(options)?;
        // `record -p`: the process is known before its first sample, so
        // its mappings are read now.
        // Root's own request: never held back for its user's reading time.
        if let Some(pid) = sampler.options().pid {
            symbolizer.note_process(pid, 0);
        }
        // The running processes' tables are built before anything samples
        // (CPU sampling used to start first and run through the events
        // programs' load, a second or more, walking every stack without
        // tables: a third of a start-up's first 5 s beside 50 processes).
        // CPU sampling then starts at once; the events follow as they load.
        let maps = sampler.unwind_maps()?;
        symbolizer.set_namers(crate::runtime::namers(&maps)?);
        let runtimes = crate::runtime::start(&runtimes, &maps)?;
        let mut unwinder = Unwinder::new(maps);
        unwinder.set_runtimes(runtimes);
        if sampler.options().unwind_tables {
            // `record -p`: only its process (its first block after attach
            // was walked without tables before).
            match sampler.options().pid {
                None => unwinder.note_all(),
                Some(pid) => unwinder.note_process(pid),
            }
            unwinder.poll(STARTUP_TABLE_WAIT);
        }
        sampler.attach()?;
        // A kernel without what the events need (BTF tracepoints, task
        // storage) still gets CPU profiles: the events are switched off,
        // and the log says why.
        let events = if events.any() {
            match EventSampler::start(events, &sampler.unwind_maps()?) {
                Ok(e) => Some(e),
                Err(e @ CollectError::LoadEvents { .. }) => {
                    tracing::error!(
                        "{e}\nthe events (off-CPU, wakeup, page faults, memory, block I/O) are off; CPU sampling goes on"
                    );
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if let Some(e) = &events {
            tracing::info!("event hooks: {}", e.hooks());
        }
        let mut rings = vec![sampler.new_tgids()?];
        if let Some(e) = &events {
            rings.push(e.new_tgids()?);
        }
        let mut seen = vec![sampler.seen_tgids()?];
        if let Some(e) = &events {
            seen.push(e.seen_tgids()?);
        }
        let new_processes = NewProcessRing::new(rings, seen)?;
        let mut pipeline = Self {
            sampler,
            events,
            symbolizer,
            unwinder,
            new_processes,
            last_refresh: Instant::now(),
            last_drain: Instant::now(),
            events_drain_failures: 0,
            heartbeat: None,
        };
        pipeline.watch_running_processes();
        Ok(pipeline)
    }

    /// Cumulative counters of the events programs, if loaded.
    pub fn event_counters(&self) -> Option<Result<EventCounters, CollectError>> {
        self.events.as_ref().map(EventSampler::counters)
    }

    /// For a process put in line: what the symbolizer holds of its pid,
    /// if it predates the process (an earlier process's, or this one's
    /// before an exec), goes; the process is read in its turn. A second
    /// notice of a process already read keeps what was read.
    fn forget_older(&mut self, pid: Pid) {
        let older = match self.symbolizer.snapshot_taken(pid) {
            Some(taken) => self.unwinder.new_since(pid, taken),
            None => true,
        };
        if older {
            self.symbolizer.forget_process(pid);
        }
    }

    /// Processes dropped from the reading line are noticed again at their
    /// next sample or event (the BPF unwinder asks about none of them:
    /// they hold no place).
    fn notice_dropped_again(&mut self) {
        for pid in self.unwinder.reads().take_dropped() {
            self.new_processes.forget(pid);
        }
    }

    /// Reads a new process of `account` for names and unwinding, and
    /// charges the account the time.
    fn note_new_process(&mut self, pid: Pid, account: u32) {
        let started = Instant::now();
        self.symbolizer.note_process(pid, account);
        let tables = self.sampler.options().unwind_tables;
        note_for_unwinding(pid, tables, &mut self.unwinder, &mut self.events);
        self.unwinder.reads().charge(account, started.elapsed());
    }

    /// Forgets the processes missing from `live`, a listing of `/proc` made
    /// at `listed`, before this drain (see [`Symbolizer::forget_exited`]).
    ///
    /// [`Symbolizer::forget_exited`]: crate::symbolize::Symbolizer::forget_exited
    pub fn forget_exited(&mut self, live: &crate::store::LivePids, listed: Instant) {
        self.symbolizer
            .forget_exited(|pid| live.contains(pid.0), listed);
    }

    /// Reads mappings of new processes until `until` (or until `stop` is set),
    /// then drains and names what was sampled.
    pub fn step(&mut self, until: Instant, stop: &AtomicBool) -> Result<Batch, CollectError> {
        let mut early = false;
        loop {
            let woke = Instant::now();
            let pids = self.new_processes.take()?;
            // Re-reading the recent processes is paced, whatever the rate
            // of notices (under churn a wake comes every 10 ms).
            if woke - self.last_refresh >= NEW_PROCESS_POLL {
                self.last_refresh = woke;
                self.symbolizer.refresh_new_processes(self.unwinder.reads());
            }
            // Each process read at its account's pace (`shared::reads`):
            // root's first; those past their credit wait in line, and come
            // back here before the account's newer ones. Each read is
            // charged before the next is admitted.
            let mut later = Vec::new();
            for pid in once_each(pids) {
                let started = Instant::now();
                match self.unwinder.account_of(pid) {
                    Some(0) => self.note_new_process(pid, 0),
                    Some(account) => later.push((pid, account, started.elapsed())),
                    // Gone: an earlier process's name and labels go.
                    None => self.symbolizer.forget_process_state(pid),
                }
            }
            for _ in 0..MAX_DUE_PER_WAKE {
                let Some(d) = self.unwinder.reads().next_due() else {
                    break;
                };
                self.note_new_process(d.pid, d.account);
            }
            for (pid, account, looked) in later {
                match self.unwinder.admit_as(pid, account, looked) {
                    Admission::Now(account) => self.note_new_process(pid, account),
                    _ => self.forget_older(pid),
                }
            }
            self.notice_dropped_again();
            self.unwinder.poll(UNWIND_TABLE_WAIT);
            for pid in self.unwinder.take_execs() {
                self.symbolizer.forget_runtime_names(pid);
            }
            attach_timer_hooks(&mut self.unwinder, &mut self.events);
            let now = Instant::now();
            if now >= until || stop.load(Ordering::SeqCst) {
                break;
            }
            // The events' counts buffer is half full: empty it now, or as
            // soon as MIN_EARLY_DRAIN has passed (the request stays until
            // then), into the agent's aggregate, named and stored with the
            // drain when it is due; a full drain now once that aggregate
            // is full (or the early drain failed).
            let asked = self.new_processes.drain_requested();
            let since = now.duration_since(self.last_drain);
            if asked && since >= MIN_EARLY_DRAIN {
                self.new_processes.take_drain_request();
                self.last_drain = now;
                let room = self
                    .events
                    .as_mut()
                    .is_some_and(|e| e.drain_early().unwrap_or(false));
                if !room {
                    early = true;
                    break;
                }
                continue;
            }
            // Until the drain, or the next notice; sooner while new
            // processes are re-read or their tables built.
            let mut wait = if self.symbolizer.refreshing()
                || self.unwinder.building()
                || self.unwinder.reads().has_deferred()
            {
                NEW_PROCESS_POLL
            } else {
                until - now
            };
            if asked {
                wait = wait.min(MIN_EARLY_DRAIN - since);
            }
            // At most 250 ms at a time: the daemon's stop flag is set from
            // another thread and does not end the wait.
            self.new_processes
                .wait(wait.min(until - now).min(STOP_CHECK))?;
            if self.new_processes.pending() {
                // A notice can come while an exec'd process's loader is
                // still mapping its libraries: give it a moment, so its
                // maps (for names, unwind tables, malloc's uprobes on libc)
                // are read complete.
                std::thread::sleep(
                    NEW_PROCESS_SETTLE.min(until.saturating_duration_since(Instant::now())),
                );
            }
        }
        let started = Instant::now();
        self.last_drain = started;
        let drain = self.sampler.drain()?;
        // What ran keeps its unwind tables first when the budget is full.
        self.unwinder
            .note_sampled(drain.samples.iter().map(|s| s.pid));
        // The CPU batch is already out of the maps: a failed events drain
        // must not take it down too. Its own aggregates stay in their
        // buffer and are drained next time.
        let drained = match &mut self.events {
            Some(e) => e.drain().unwrap_or_else(|err| {
                self.events_drain_failures += 1;
                tracing::warn!("draining the events programs failed: {err}");
                EventsDrain::default()
            }),
            None => EventsDrain::default(),
        };
        let raw_events = drained.events;
        // Threads that blocked ran too: their tables are kept as sampled ones.
        self.unwinder
            .note_sampled(raw_events.iter().map(|e| e.sample.pid));
        let keys = drain.samples.len();
        tracing::debug!("drained {} cpu keys, {} event keys", keys, raw_events.len());
        // Naming can wait seconds for a large file's symbols (under
        // emulation, or on a slow disk): meanwhile new processes are read
        // for unwinding and finished tables published, not left waiting
        // until the drain is named. Their maps are read then too (see
        // `Noticed`); the symbolizer takes them after the drain.
        let tables = self.sampler.options().unwind_tables;
        let mut noticed: Vec<Noticed> = Vec::new();
        // Root's, kept apart: read first after the drain.
        let mut roots: Vec<Noticed> = Vec::new();
        // Processes noticed meanwhile and not read (a few bytes each).
        let mut notices: Vec<(Pid, Admission)> = Vec::new();
        // Processes holding early maps (root's beyond the bound).
        let mut held = 0usize;
        let (samples, events) = {
            let Self {
                symbolizer,
                unwinder,
                new_processes,
                events,
                heartbeat,
                ..
            } = self;
            let mut idle = || {
                if let Some(h) = heartbeat {
                    h.beat();
                }
                let now = Instant::now();
                // As between drains: root's first, then those waiting in
                // line, then the rest, each read and charged before the
                // next is admitted.
                let mut read = |pid: Pid, account: u32, unwinder: &mut Unwinder| {
                    let started = Instant::now();
                    note_for_unwinding(pid, tables, unwinder, events);
                    // Their mappings too, while they live (a writer of 8 s
                    // exited under TCG before a drain waiting for libc's
                    // DWARF was named: all of its stacks `[exited]`): the
                    // first read with the admission, the re-reads as the
                    // account's credit allows; root's whatever others
                    // start, outside the bound.
                    let early = (account == 0 || held < EARLY_PROCESSES_MAX).then(|| {
                        held += usize::from(account != 0);
                        EarlyMaps::read(pid)
                    });
                    unwinder.reads().charge(account, started.elapsed());
                    let n = Noticed {
                        pid,
                        account,
                        read_at: Some(now),
                        reads: u8::from(early.is_some()),
                        early: early.flatten(),
                    };
                    if account == 0 {
                        roots.push(n);
                    } else {
                        noticed.push(n);
                    }
                };
                let mut rest = Vec::new();
                for pid in once_each(new_processes.take().unwrap_or_default()) {
                    let started = Instant::now();
                    match unwinder.account_of(pid) {
                        Some(0) => read(pid, 0, unwinder),
                        Some(account) => rest.push((pid, account, started.elapsed())),
                        None => notices.push((pid, Admission::Gone)),
                    }
                }
                for _ in 0..MAX_DUE_PER_WAKE {
                    let Some(d) = unwinder.reads().next_due() else {
                        break;
                    };
                    read(d.pid, d.account, unwinder);
                }
                for (pid, account, looked) in rest {
                    match unwinder.admit_as(pid, account, looked) {
                        Admission::Now(account) => read(pid, account, unwinder),
                        other => notices.push((pid, other)),
                    }
                }
                for pid in unwinder.reads().take_dropped() {
                    new_processes.forget(pid);
                }
                for n in roots
                    .iter_mut()
                    .chain(noticed.iter_mut())
                    .filter(|n| n.reads > 0 && n.reads < EARLY_READS)
                {
                    let after = EARLY_REREAD[usize::from(n.reads - 1)];
                    let due = n.read_at.is_none_or(|t| now - t >= after);
                    if due && unwinder.reads().may_read(n.account) {
                        n.read_at = Some(now);
                        n.reads += 1;
                        let started = Instant::now();
                        if let Some(maps) = EarlyMaps::read(n.pid) {
                            n.early = Some(maps);
                        }
                        unwinder.reads().charge(n.account, started.elapsed());
                    }
                }
                unwinder.poll(Duration::ZERO);
                attach_timer_hooks(unwinder, events);
            };
            let samples = symbolizer.symbolize_waiting(drain.samples, &mut idle);
            let events = symbolizer.symbolize_events_waiting(raw_events, &mut idle);
            (samples, events)
        };
        for pid in self.unwinder.take_execs() {
            self.symbolizer.forget_runtime_names(pid);
        }
        // Root's first; another account's are read again only within its
        // credit (one never read waits in line).
        for (pid, admission) in notices {
            match admission {
                Admission::Deferred => self.forget_older(pid),
                // Gone: its snapshot, if any, is what names its samples.
                _ => self.symbolizer.forget_process_state(pid),
            }
        }
        let mut owed = Vec::new();
        for n in roots.into_iter().chain(noticed) {
            if !self.unwinder.reads().may_read(n.account) {
                if n.reads == 0 {
                    owed.push((n.pid, n.account));
                } else {
                    self.unwinder.reads().skip();
                    self.symbolizer.keep_early(n.pid, n.early);
                }
                continue;
            }
            let started = Instant::now();
            self.symbolizer
                .note_process_read_early(n.pid, n.account, n.early);
            self.unwinder.reads().charge(n.account, started.elapsed());
        }
        // Read for unwinding, their names' read owed: first in their
        // accounts' lines, in the order noticed, if they still run (what
        // the symbolizer holds of a gone one names its samples).
        for (pid, account) in owed.into_iter().rev() {
            let started = Instant::now();
            if self.unwinder.account_of(pid).is_some() {
                self.forget_older(pid);
                self.unwinder.reads().defer_first(pid, account);
            }
            self.unwinder.reads().charge(account, started.elapsed());
        }
        self.notice_dropped_again();
        Ok(Batch {
            samples,
            missing_stacks: drain.missing_stacks,
            keys,
            events,
            heap: self.name_heap(drained.heap),
            started: Some(started),
            early,
        })
    }

    /// Names the stacks of sampled allocations, keeping the order of
    /// allocations and frees.
    fn name_heap(&mut self, changes: Vec<HeapChange>) -> Vec<crate::store::heap::Change> {
        use crate::store::heap::Change;
        // The stacks move out to be named in one batch; `order` keeps what
        // is left of each change, allocations waiting for their names.
        let mut raws = Vec::new();
        let mut order = Vec::with_capacity(changes.len());
        for c in changes {
            match c {
                HeapChange::Alloc {
                    sample,
                    objects,
                    addr,
                } => {
                    raws.push(RawEvent {
                        kind: EventKind::Malloc,
                        sample,
                        waker: None,
                        label: None,
                    });
                    order.push(Err((objects, addr)));
                }
                HeapChange::Free { pid, addr } => order.push(Ok(Change::Free { pid, addr })),
            }
        }
        let mut named = self.symbolizer.symbolize_events(raws).into_iter();
        order
            .into_iter()
            .filter_map(|c| match c {
                Ok(free) => Some(free),
                Err((objects, addr)) => named.next().map(|(_, sample)| Change::Alloc {
                    sample,
                    objects,
                    addr,
                }),
            })
            .collect()
    }

    /// Attaches malloc's uprobes to every running process the options name
    /// (processes that start later are watched as they are seen).
    pub fn watch_running_processes(&mut self) {
        let Some(e) = &mut self.events else { return };
        if !e.options().malloc.any() {
            return;
        }
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in dir.flatten() {
            if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                e.watch_process(crate::shared::Pid(pid));
            }
        }
    }

    /// The events programs, if loaded.
    pub fn events(&self) -> Option<&EventSampler> {
        self.events.as_ref()
    }

    /// Cumulative BPF counters.
    pub fn counters(&self) -> Result<Counters, CollectError> {
        self.sampler.counters()
    }

    /// Cumulative counters of the user-stack unwinder: of the CPU sampler,
    /// and of the events programs if loaded.
    pub fn unwind_counters(
        &self,
    ) -> Result<(UnwindCounters, Option<UnwindCounters>), CollectError> {
        let events = match &self.events {
            Some(e) => Some(e.unwind_counters()?),
            None => None,
        };
        Ok((self.sampler.unwind_counters()?, events))
    }

    /// Events drains that failed (their aggregates are drained next time).
    pub fn events_drain_failures(&self) -> u64 {
        self.events_drain_failures
    }

    /// Hands stored samples back for their frame vectors to be reused
    /// (see [`Symbolizer::recycle`]).
    pub fn recycle(
        &mut self,
        samples: impl IntoIterator<Item = crate::symbolize::SymbolizedSample>,
    ) {
        self.symbolizer.recycle(samples);
    }

    /// Bytes of the symbolizer's caches.
    pub fn cache_bytes(&self) -> crate::symbolize::CacheBytes {
        self.symbolizer.cache_bytes()
    }

    /// What naming `runtime`'s frames found (zeros for a runtime not
    /// running).
    pub fn runtime_names(&self, runtime: &str) -> NameStats {
        self.symbolizer
            .runtime_stats()
            .into_iter()
            .find(|(r, _)| *r == runtime)
            .map(|(_, s)| s)
            .unwrap_or_default()
    }

    /// `runtime`'s processes by state: `unwound`, or why they stay native.
    pub fn runtime_processes(
        &self,
        runtime: &str,
    ) -> std::collections::BTreeMap<&'static str, u64> {
        self.unwinder
            .runtime_processes()
            .into_iter()
            .find(|(r, _)| *r == runtime)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    /// Figures of the unwind tables.
    pub fn unwind_stats(&self) -> UnwindStats {
        self.unwinder.stats()
    }

    /// Cumulative symbolization misses.
    pub fn misses(&self) -> Misses {
        self.symbolizer.misses()
    }

    /// Beats `heartbeat` while a drain waits on a bounded read (every
    /// 50 ms of the wait).
    pub fn set_heartbeat(&mut self, heartbeat: Arc<Heartbeat>) {
        self.heartbeat = Some(heartbeat);
    }

    /// The sampler (CPUs, options).
    pub fn sampler(&self) -> &CpuSampler {
        &self.sampler
    }
}
