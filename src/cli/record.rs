//! `emberd record`: one profile of the next N seconds, written as folded text
//! or an SVG flame graph. The same stages as the daemon, run once.

use std::path::PathBuf;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use std::collections::HashMap;

use crate::collect::events::{EventKind, EventOptions};
use crate::collect::{Counter, Counters, SamplerOptions};
use crate::daemon::pipeline::{DRAIN_INTERVAL, Pipeline};
use crate::query::profile::{Grouping, Profile};
use crate::query::{Event, Query};
use crate::render;
use crate::render::view::{self, Sources};
use crate::shared::Pid;
use crate::shared::clock::now as unix_now;
use crate::store::heap::LiveHeap;
use crate::store::{Store, StoreOptions};
use crate::symbolize::Misses;
use crate::symbolize::SymbolizedSample;

/// The output formats `record` writes, chosen by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// `.folded`: folded stacks.
    Folded,
    /// `.svg`: interactive flame graph.
    Svg,
    /// `.pb.gz`: gzipped pprof (for malloc, Go's heap profile).
    Pprof,
}

impl OutputFormat {
    /// Every format: the file suffixes that choose it and what it holds.
    /// `--help` and the errors are made from this list, so they name
    /// every format there is.
    pub const ALL: [(OutputFormat, &'static [&'static str], &'static str); 3] = [
        (OutputFormat::Folded, &[".folded", ".txt"], "folded stacks"),
        (OutputFormat::Svg, &[".svg"], "flame graph"),
        (
            OutputFormat::Pprof,
            &[".pb.gz"],
            "gzipped pprof; Go's heap profile for malloc",
        ),
    ];

    /// The suffixes and what each holds: `*.folded or *.txt (folded
    /// stacks), *.svg (flame graph), ...`.
    pub fn known() -> String {
        Self::ALL
            .iter()
            .map(|(_, suffixes, what)| {
                let names: Vec<String> = suffixes.iter().map(|s| format!("*{s}")).collect();
                format!("{} ({what})", names.join(" or "))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The format for `path`, or an error naming the suffixes known.
    pub fn for_path(path: &std::path::Path) -> anyhow::Result<Self> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        Self::ALL
            .iter()
            .find(|(_, suffixes, _)| {
                suffixes
                    .iter()
                    .any(|s| name.len() > s.len() && name.ends_with(s))
            })
            .map(|(f, ..)| *f)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "cannot tell the output format of {}: name it {}",
                    path.display(),
                    Self::known()
                )
            })
    }
}

/// `--output`'s help, from [`OutputFormat::ALL`].
fn output_help() -> String {
    format!(
        "Output file, its format chosen by its suffix: {}",
        OutputFormat::known()
    )
}

/// `--event`'s help, from [`Event::ALL`].
fn event_help() -> String {
    format!(
        "What to record: {} (malloc*: allocations of the processes given by --pid or the COMMAND, sampled)",
        Event::ALL.map(Event::name).join(", ")
    )
}

/// What to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// How long to sample.
    pub duration: Duration,
    /// Sampler settings (frequency, pid filter, idle, map sizes).
    pub sampler: SamplerOptions,
    /// The runtimes' settings (`--python`).
    pub runtimes: crate::runtime::RuntimeOptions,
    /// The first frame of each stack.
    pub grouping: Grouping,
    /// Where to write, format by extension.
    pub output: PathBuf,
    /// What to record (`--event`).
    pub event: Event,
    /// Knobs of the off-CPU and page-fault programs (which events are on
    /// follows `event`).
    pub event_knobs: EventOptions,
    /// Python, Java and JavaScript frames with their line (`--lines`).
    pub lines: bool,
    /// Lets the command being profiled start once the programs are loaded
    /// (`emberd record -- COMMAND`).
    pub gate: Option<super::launch::Gate>,
}

/// What a recording collected, for the summary line.
#[derive(Debug, Clone)]
pub struct RecordSummary {
    /// The pprof profile, when the output is `.pb.gz`.
    pub pprof: Option<crate::render::pprof::proto::Profile>,
    /// The profile, in the event's folded unit.
    pub profile: Profile,
    /// The query the profile answers (window, grouping, event).
    pub query: Query,
    /// Counters of the off-CPU and page-fault programs, if they ran.
    pub event_counters: Option<crate::collect::events::EventCounters>,
    /// BPF counters at the end.
    pub counters: Counters,
    /// User-stack walks of the CPU sampler and, if loaded, the events programs.
    pub unwind: (
        crate::collect::UnwindCounters,
        Option<crate::collect::UnwindCounters>,
    ),
    /// The unwind tables at the end.
    pub unwind_stats: crate::unwind::UnwindStats,
    /// Stack ids missing at drain time.
    pub missing_stacks: u64,
    /// Symbolization misses.
    pub misses: Misses,
    /// How long sampling really ran.
    pub elapsed: Duration,
    /// CPUs sampled.
    pub cpus: usize,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes Ctrl-C end the recording early and still write the output, as
/// `perf record` does.
fn catch_interrupt() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_interrupt),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        let _ = unsafe { sigaction(sig, &action) };
    }
}

fn process_alive(pid: Pid) -> bool {
    // An exited process its parent has not reaped yet is a zombie: it has no
    // samples left to give, so `record -p` ends there, as perf's does. Only
    // when no thread is left: a leader that called pthread_exit is a zombie
    // too while its other threads run (they keep the count above one).
    match procfs::process::Process::new(pid.0 as i32).and_then(|p| p.stat()) {
        Ok(stat) => !(stat.state == 'Z' && stat.num_threads <= 1),
        Err(_) => std::path::Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// `knobs` with only what `event` needs switched on, for process `pid`.
pub fn event_options(event: Event, pid: Option<Pid>, knobs: &EventOptions) -> EventOptions {
    let mut o = EventOptions {
        pid,
        offcpu: false,
        wakeup: false,
        offwake: false,
        pagefault: false,
        brk: false,
        mmap: false,
        munmap: false,
        blockio: false,
        malloc: Default::default(),
        ..knobs.clone()
    };
    match event {
        Event::Cpu => {}
        Event::OffCpu | Event::HotCold => o.offcpu = true,
        Event::Wakeup => o.wakeup = true,
        Event::OffWake => o.offwake = true,
        Event::PageFault => o.pagefault = true,
        Event::Brk => o.brk = true,
        Event::Mmap => o.mmap = true,
        Event::Munmap => o.munmap = true,
        Event::BlockIo => o.blockio = true,
        Event::Malloc | Event::MallocObjects | Event::MallocInUse | Event::MallocInUseObjects => {
            o.malloc.pids.extend(pid)
        }
    }
    o
}

/// Samples for `options.duration` (or until Ctrl-C, or until the profiled
/// process exits) and returns the profile, without writing it.
pub fn collect(options: &RecordOptions) -> anyhow::Result<RecordSummary> {
    crate::collect::privileges::require_sampling_privileges()?;
    if let Some(pid) = options.sampler.pid
        && !process_alive(pid)
    {
        bail!("no process with pid {pid}: check the -p argument");
    }
    if options.event.is_malloc() && options.sampler.pid.is_none() {
        bail!(
            "-e {} traces one process's allocations (a uprobe on every call): name it with -p PID or run it with -- COMMAND",
            options.event.name()
        );
    }
    let asked = event_options(options.event, options.sampler.pid, &options.event_knobs);
    let mut pipeline = Pipeline::start(
        options.sampler.clone(),
        asked.clone(),
        options.runtimes.clone(),
    )?;
    // The daemon goes on without events its kernel cannot load; a record
    // of one such event would only write an empty profile.
    let on = |o: &EventOptions| {
        [
            o.offcpu,
            o.wakeup,
            o.offwake,
            o.pagefault,
            o.brk,
            o.mmap,
            o.munmap,
            o.blockio,
            o.malloc.any(),
        ]
    };
    if asked.any()
        && pipeline
            .events()
            .is_none_or(|e| on(e.options()) != on(&asked))
    {
        bail!(
            "-e {} cannot be recorded here: its programs did not load (the log above says why; `emberd check` shows what this kernel runs)",
            options.event.name()
        );
    }
    if let Some(gate) = &options.gate {
        gate.open();
    }
    // What a script (or a test) that starts its workload once the recorder
    // is attached waits for, with EMBERD_LOG=info: loading the programs
    // takes seconds on a busy host, and a fixed delay guesses.
    tracing::info!(
        "recording: attached, {} for up to {} s",
        options.event.name(),
        options.duration.as_secs()
    );
    catch_interrupt();
    let store_options = StoreOptions {
        retention: options.duration + Duration::from_secs(3600),
        memory_budget: usize::MAX / 2,
        ..StoreOptions::default()
    };
    let mut cpu = Store::new(store_options.clone());
    let mut events: HashMap<EventKind, Store> = HashMap::new();
    let mut heap = LiveHeap::new(
        options.event_knobs.malloc_live_entries as usize,
        store_options.retention,
    );
    let start = Instant::now();
    let start_unix = unix_now();
    let deadline = start + options.duration;
    let mut missing_stacks = 0;
    loop {
        let now = Instant::now();
        let done = now >= deadline
            || INTERRUPTED.load(Ordering::SeqCst)
            || options.sampler.pid.is_some_and(|p| !process_alive(p));
        let until = if done {
            // The end of what is sampled, before the last drain (whose
            // naming may take a while), for a script (or a test) that
            // weighs the samples against what its workload ran meanwhile,
            // as "attached" above is the start.
            tracing::info!(
                "recording: stopped after {:.1} s",
                start.elapsed().as_secs_f64()
            );
            now
        } else {
            now + DRAIN_INTERVAL.min(deadline - now)
        };
        let batch = pipeline
            .step(until, &INTERRUPTED)
            .context("draining samples")?;
        missing_stacks += batch.missing_stacks;
        let at = unix_now();
        cpu.insert(at, &batch.samples);
        heap.apply(at, batch.heap);
        let mut by_kind: HashMap<EventKind, Vec<SymbolizedSample>> = HashMap::new();
        for (kind, s) in batch.events {
            by_kind.entry(kind).or_default().push(s);
        }
        for (kind, samples) in by_kind {
            tracing::debug!(
                "{kind:?}: {} aggregates, {} total",
                samples.len(),
                samples.iter().map(|s| s.count).sum::<u64>()
            );
            events
                .entry(kind)
                .or_insert_with(|| Store::new(store_options.clone()))
                .insert(at, &samples);
        }
        if done {
            break;
        }
    }
    let elapsed = start.elapsed();
    let event_counters = pipeline.event_counters().transpose()?;
    let counters = pipeline.counters()?;
    let unwind = pipeline.unwind_counters()?;
    let unwind_stats = pipeline.unwind_stats();
    let cpus = pipeline.sampler().cpus().len();
    let misses = pipeline.misses();
    drop(pipeline);

    let params: Vec<(String, String)> = vec![
        ("from".into(), start_unix.to_string()),
        ("to".into(), (unix_now() + 2).to_string()),
        ("group".into(), options.grouping.to_string()),
        ("event".into(), options.event.name().into()),
        ("lines".into(), u8::from(options.lines).to_string()),
    ];
    let query = Query::parse(&params, unix_now(), u64::MAX / 4)
        .map_err(|e| anyhow::anyhow!("internal query: {e}"))?;
    let empty = RwLock::new(Store::new(store_options));
    let cpu = RwLock::new(cpu);
    let events: HashMap<EventKind, RwLock<Store>> = events
        .into_iter()
        .map(|(k, s)| (k, RwLock::new(s)))
        .collect();
    let offcpu = events.get(&EventKind::OffCpu).unwrap_or(&empty);
    let heap = RwLock::new(heap);
    let mem = crate::store::tiered::EventStore::memory_only;
    let sources = Sources {
        heap: Some(&heap),
        malloc_bytes: Some(mem(events.get(&EventKind::Malloc).unwrap_or(&empty))),
        objects: Some(mem(events.get(&EventKind::MallocObjects).unwrap_or(&empty))),
        malloc_sample_bytes: options.event_knobs.malloc_sample_bytes,
        cpu: Some(mem(&cpu)),
        event: Some(mem(options
            .event
            .kind()
            .and_then(|k| events.get(&k))
            .unwrap_or(&empty))),
        offcpu: Some(mem(offcpu)),
        cpu_period_ns: 1_000_000_000 / options.sampler.frequency_hz.max(1),
    };
    let profile = view::fold(&query, sources)
        .map_err(|e| anyhow::anyhow!("no data source for event {}", e.name()))?;
    let pprof = match OutputFormat::for_path(&options.output) {
        // view::pprof gives Go's heap profile for the malloc views.
        Ok(OutputFormat::Pprof) => Some(
            view::pprof(&query, sources, options.sampler.frequency_hz)
                .map_err(|e| anyhow::anyhow!("{} has no pprof form", e.name()))?,
        ),
        _ => None,
    };
    Ok(RecordSummary {
        profile,
        pprof,
        event_counters,
        query,
        counters,
        unwind,
        unwind_stats,
        missing_stacks,
        misses,
        elapsed,
        cpus,
    })
}

/// Records and writes the output file; returns the summary.
pub fn record(options: &RecordOptions) -> anyhow::Result<RecordSummary> {
    let format = OutputFormat::for_path(&options.output)?;
    // Fail on an unwritable path before sampling, not after.
    let file = std::fs::File::create(&options.output)
        .with_context(|| format!("cannot create {}", options.output.display()))?;
    let summary = match collect(options) {
        Ok(s) => s,
        Err(e) => {
            // Leave no empty output behind to be mistaken for a profile.
            drop(file);
            let _ = std::fs::remove_file(&options.output);
            return Err(e);
        }
    };
    let w = std::io::BufWriter::new(file);
    match format {
        OutputFormat::Pprof => {
            use std::io::Write;
            let p = summary
                .pprof
                .as_ref()
                .context("no pprof profile was built")?;
            let mut w = w;
            w.write_all(&render::pprof::encode_gzip(p))
                .and_then(|_| w.flush())
        }
        OutputFormat::Folded => render::folded::write(&summary.profile, w),
        OutputFormat::Svg => {
            let host = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "localhost".into());
            let mut q = summary.query.clone();
            q.seconds = summary.elapsed.as_secs_f64().round() as u64;
            let mut svg = view::svg_options(
                &q,
                summary.profile.len(),
                &host,
                options.sampler.frequency_hz,
            );
            if options.event == Event::Cpu {
                svg.subtitle = Some(format!(
                    "event cpu-clock, {} samples on {} CPUs, {} lost stacks",
                    summary.profile.total(),
                    summary.cpus,
                    summary.counters.lost_stacks() + summary.missing_stacks
                ));
            }
            render::flamegraph::write(&summary.profile, &svg, w)
        }
    }
    .with_context(|| format!("writing {}", options.output.display()))?;
    Ok(summary)
}

impl RecordSummary {
    /// How the user-stack walks ended, and the tables they used.
    fn unwind_report(&self) -> String {
        let mut ends = [0u64; 10];
        for c in std::iter::once(&self.unwind.0).chain(self.unwind.1.as_ref()) {
            for (t, n) in ends.iter_mut().zip(c.ends) {
                *t += n;
            }
        }
        let walks: u64 = ends.iter().sum();
        let complete = ends[0];
        let others: Vec<String> = crate::collect::StackEnd::ALL
            .iter()
            .zip(ends)
            .skip(1)
            .filter(|(_, n)| *n > 0)
            .map(|(e, n)| format!("{n} {}", e.label()))
            .collect();
        let t = &self.unwind_stats;
        format!(
            "\n[ user stacks: {walks} walked, {complete} complete ({:.1}%){}{}; tables: {} files, {} rows, {} KiB, built in {:.0} ms ]",
            if walks > 0 {
                complete as f64 * 100.0 / walks as f64
            } else {
                100.0
            },
            if others.is_empty() { "" } else { ", " },
            others.join(", "),
            t.tables,
            t.rows,
            t.bytes / 1024,
            t.build_time.as_secs_f64() * 1000.0,
        )
    }

    /// A one-paragraph report for stderr, like perf record's.
    pub fn report(&self) -> String {
        let c = &self.counters;
        let events = self.event_counters.map_or(String::new(), |e| {
            format!(
                "\n[ events: {} switches, {} wakeups, {} page-fault samples; off-CPU periods: {} begun, {} ended, {} preempted on the way to sleep; dropped: {} blocked-table full, {} counts full, {} stacks lost, {} runs nested in another; sampled out: {} switch-outs (1 in N), {} short periods, {} short wakeups ]",
                e.switches, e.wakeups, e.pagefaults, e.offcpu_begun, e.offcpu_ended,
                e.preempted_asleep, e.blocked_full,
                e.counts_full + e.wakeup_counts_full + e.offwake_counts_full + e.other_counts_full,
                e.stacks_lost, e.nested_skipped, e.sampled_out,
                e.short_offcpu_sampled_out, e.short_wakeups_sampled_out
            )
        });
        // Kept values are in the event's folded unit (us of off-CPU time,
        // bytes of malloc); the counts in brackets are the CPU sampler's.
        let event = self.query.event;
        let (kept, sampler) = if event == Event::Cpu {
            ("samples".to_owned(), "")
        } else {
            (
                format!("{} of {}", event.folded_unit(), event.name()),
                "CPU samples: ",
            )
        };
        format!(
            "[ emberd record: {:.1} s, {} {kept} kept in {} stacks ({sampler}{} seen, {} idle skipped, {} other processes) ]\n\
             [ lost: {} stack collisions, {} stack-map full, {} counts-map full, {} missing at drain; unnamed addresses: {} ]",
            self.elapsed.as_secs_f64(),
            self.profile.total(),
            self.profile.len(),
            c.get(Counter::Samples),
            c.get(Counter::IdleSkipped),
            c.get(Counter::Filtered),
            c.get(Counter::KernelStackCollision) + c.get(Counter::UserStackCollision),
            c.get(Counter::StackMapFull),
            c.get(Counter::CountsFull),
            self.missing_stacks,
            self.misses.process_gone
                + self.misses.unmapped
                + self.misses.anon_no_perf_map
                + self.misses.elf_error
                + self.misses.no_symbol
                + self.misses.kernel_no_symbol,
        ) + &events
            + &self.unwind_report()
    }
}

/// `emberd record`'s flags.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// How long to sample, in seconds (default 10; with a COMMAND, until it
    /// exits). Ctrl-C stops early and still writes.
    #[arg(long, short = 's', value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub seconds: Option<u64>,
    /// Only this process (stops when it exits).
    #[arg(long, short = 'p')]
    pub pid: Option<u32>,
    /// Samples per second per CPU; 99 avoids lock-step with timed work.
    #[arg(long, short = 'F', default_value_t = crate::collect::defaults::FREQUENCY_HZ)]
    pub frequency: u64,
    /// Output file; `--help` lists the formats ([`OutputFormat::ALL`]).
    #[arg(long, short = 'o', help = output_help())]
    pub output: PathBuf,
    /// First frame of each stack: process (comm), pid (comm-PID) or thread (comm-PID/TID).
    #[arg(long, default_value_t = Grouping::Process)]
    pub group: Grouping,
    /// Keep samples of the idle task.
    #[arg(long)]
    pub idle: bool,
    /// What to record; `--help` lists every event ([`Event::ALL`]).
    #[arg(long, short = 'e', default_value = "cpu", value_parser = parse_event, help = event_help())]
    pub event: Event,
    /// Page faults per page-fault sample (values are scaled back to faults).
    #[arg(long, default_value_t = crate::collect::events::defaults::PAGEFAULT_PERIOD)]
    pub pagefault_period: u64,
    /// Record one in N off-CPU periods (values scaled by N).
    #[arg(long, default_value_t = 1)]
    pub offcpu_sample_one_in: u32,
    /// Off-CPU periods shorter than this many us are sampled (probability
    /// length/this, charged this); 0 records every period.
    #[arg(long, default_value_t = crate::collect::events::defaults::SAMPLE_BELOW_NS / 1000)]
    pub offcpu_sample_below_us: u64,
    /// Mean KiB between malloc samples (-e malloc*); 0 records every allocation.
    #[arg(long, default_value_t = crate::collect::events::defaults::MALLOC_SAMPLE_BYTES / 1024)]
    pub malloc_sample_kib: u64,
    /// Entries of each BPF stack map (two are kept, about 1 KiB kernel memory each).
    #[arg(long, default_value_t = crate::collect::defaults::stack_map_entries())]
    pub stack_map_entries: u32,
    /// Entries of each BPF counts map (distinct threads and stacks a second).
    #[arg(long, default_value_t = crate::collect::defaults::counts_map_entries())]
    pub counts_map_entries: u32,
    /// Bytes of unwind tables (.eh_frame rows) the BPF unwinder holds, MiB
    /// (32, or 1/64 of the host's memory if less).
    #[arg(long, default_value_t = crate::unwind::defaults::table_budget_bytes() >> 20)]
    pub unwind_table_budget_mib: u64,
    /// Unwind user stacks with .eh_frame tables (false: frame pointers only,
    /// to compare).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub unwind_tables: bool,
    /// Show CPython 3.8-3.15 frames in place of the interpreter's eval loop
    /// (false: interpreters' stacks stay native).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub python: bool,
    /// Show Java methods of HotSpot JVMs (JDK 17, 25), read from the JVM's
    /// own structure tables (false: their code cache stays addresses).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub java: bool,
    /// Show JavaScript functions of Node.js processes (Node 18 to 26), read
    /// from V8's frames and postmortem metadata (false: V8's code stays
    /// builtins and `[anon]`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub node: bool,
    /// Python frames as `function (file.py:LINE)`, one frame per line run
    /// (py-spy's default; without it, py-spy's `--nolineno` form), and Java
    /// frames as `pkg.Class.method:LINE_[j]` (async-profiler's form).
    #[arg(long)]
    pub lines: bool,
    /// A command to run and profile, after `--` (as `perf record -g --
    /// COMMAND`): its process and threads, from its first instruction
    /// until it exits. It runs as emberd does (root, with `sudo`).
    #[arg(last = true, conflicts_with = "pid", value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn parse_event(s: &str) -> Result<Event, String> {
    Event::from_name(s).ok_or_else(|| {
        format!(
            "unknown event {s:?}: use {}",
            Event::ALL.map(Event::name).join(", ")
        )
    })
}

/// Records and writes the profile, with its summary on stderr.
pub fn run(args: RecordArgs) -> anyhow::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    let launched = if args.command.is_empty() {
        None
    } else {
        Some(super::launch::launch(&args.command)?)
    };
    let pid = match &launched {
        Some(l) => Some(l.child.id()),
        None => args.pid,
    };
    let sampler = SamplerOptions {
        frequency_hz: args.frequency,
        pid: pid.map(Pid),
        include_idle: args.idle,
        stack_map_entries: args.stack_map_entries,
        counts_map_entries: args.counts_map_entries,
        unwind_rows: crate::daemon::config::unwind_rows(Some(args.unwind_table_budget_mib))?,
        unwind_tables: args.unwind_tables,
        ..Default::default()
    };
    let options = RecordOptions {
        // A command is recorded until it exits (or a day passes).
        duration: Duration::from_secs(args.seconds.unwrap_or(if launched.is_some() {
            86_400
        } else {
            10
        })),
        sampler,
        runtimes: crate::runtime::RuntimeOptions {
            python: args.python,
            java: args.java,
            node: args.node,
        },
        grouping: args.group,
        output: args.output,
        event: args.event,
        event_knobs: crate::collect::events::EventOptions {
            pagefault_period: args.pagefault_period,
            sample_one_in: args.offcpu_sample_one_in,
            sample_below_ns: args.offcpu_sample_below_us.saturating_mul(1000),
            malloc_sample_bytes: args.malloc_sample_kib.saturating_mul(1024),
            ..Default::default()
        },
        lines: args.lines,
        gate: launched.as_ref().map(|l| l.gate.clone()),
    };
    // Reaped as soon as it exits, so its /proc entry goes and the
    // recording ends with it (a zombie would keep it going).
    let reaper = launched.map(|l| {
        let mut child = l.child;
        std::thread::spawn(move || child.wait())
    });
    let result = record(&options);
    let output = options.output.clone();
    // Without an opened gate (the programs did not load) the command never
    // runs: dropping the last copy lets it exit.
    drop(options);
    let status = reaper
        .map(|r| r.join().expect("the reaper thread does not panic"))
        .transpose()
        .context("waiting for the command")?;
    let summary = result?;
    eprintln!("{}", summary.report());
    eprintln!("[ wrote {} ]", output.display());
    match status {
        Some(s) if !s.success() => {
            eprintln!("[ {} ended: {s} ]", args.command[0]);
            Ok(ExitCode::from(
                s.code().map_or(1, |c| c.clamp(1, 255) as u8),
            ))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
