//! The `emberd` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use emberd::check::{self, Status};
use emberd::collect::{Pid, SamplerOptions, defaults};
use emberd::config::{Config, RawConfig};
use emberd::profile::Grouping;
use emberd::query::Event;
use emberd::record::{self, RecordOptions};

/// emberd: an always-on sampling profiler for this Linux host.
///
/// Without a subcommand emberd runs as a daemon: it samples every CPU, keeps
/// the last hour in memory and serves flame graphs, folded stacks, pprof and
/// metrics over HTTP (loopback only by default).
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// Daemon settings; each is also a key of the config file.
#[derive(Debug, clap::Args)]
struct DaemonArgs {
    /// Config file (TOML). Default: /etc/emberd/emberd.toml if it exists.
    #[arg(long, global = false)]
    config: Option<PathBuf>,
    /// HTTP listen address [default: 127.0.0.1:7099].
    #[arg(long)]
    listen: Option<String>,
    /// Allow a non-loopback listen address (profiles name every process).
    #[arg(long)]
    allow_remote: bool,
    /// A host name the Host header may carry (besides IP literals and
    /// localhost); repeat for more. Others get 421 (DNS rebinding).
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String>,
    /// File whose first line is the bearer token every route but /healthz needs.
    #[arg(long)]
    auth_token_file: Option<PathBuf>,
    /// Serve HTTP on this Unix socket (mode 0660) instead of TCP.
    #[arg(long)]
    unix_socket: Option<PathBuf>,
    /// Samples per second per CPU [default: 99].
    #[arg(long, short = 'F')]
    frequency_hz: Option<u64>,
    /// History kept, seconds [default: 3600].
    #[arg(long)]
    retention_seconds: Option<u64>,
    /// Memory budget of the sample stores, all together, MiB [default: 12].
    #[arg(long)]
    memory_budget_mib: Option<u64>,
    /// Entries of each BPF stack map [default: 16384, or 256 per CPU].
    #[arg(long)]
    stack_map_entries: Option<u32>,
    /// Entries of each BPF counts map [default: 10240, or 128 per CPU].
    #[arg(long)]
    counts_map_entries: Option<u32>,
    /// Bytes of unwind tables (.eh_frame rows) the BPF unwinder holds, MiB [default: 16].
    #[arg(long)]
    unwind_table_budget_mib: Option<u64>,
    /// Processes whose mappings the BPF unwinder holds [default: 8192].
    #[arg(long)]
    unwind_processes: Option<u32>,
    /// Show CPython 3.11-3.13 frames in place of the eval loop [default: true].
    #[arg(long, action = clap::ArgAction::Set)]
    python: Option<bool>,
    /// Code objects whose names the Python walker keeps in BPF [default: 4096].
    #[arg(long)]
    python_code_entries: Option<u32>,
    /// Larger perf maps are not read, MiB [default: 64].
    #[arg(long)]
    perf_map_max_mib: Option<u64>,
    /// Parsed perf maps kept, all processes, MiB [default: 16].
    #[arg(long)]
    perf_map_budget_mib: Option<u64>,
    /// Named addresses cached (kernel and files), MiB [default: 4].
    #[arg(long)]
    symbol_cache_mib: Option<u64>,
    /// Process mappings remembered (to name samples of exited processes), MiB [default: 2].
    #[arg(long)]
    process_snapshot_mib: Option<u64>,
    /// Parsed DWARF held, all files, MiB; a file whose DWARF is larger is
    /// named from its symbol table, without inlined frames or lines [default: 8].
    #[arg(long)]
    dwarf_budget_mib: Option<u64>,
    /// Record off-CPU time [default: true].
    #[arg(long)]
    offcpu: Option<bool>,
    /// Record wakeup time [default: true].
    #[arg(long)]
    wakeup: Option<bool>,
    /// Record off-wake chains [default: true].
    #[arg(long)]
    offwake: Option<bool>,
    /// Record page faults [default: true].
    #[arg(long)]
    pagefault: Option<bool>,
    /// Shorter off-CPU periods are not charged, us [default: 1].
    #[arg(long)]
    offcpu_min_us: Option<u64>,
    /// Longer off-CPU periods are not charged, ms [default: 10000].
    #[arg(long)]
    offcpu_max_ms: Option<u64>,
    /// Task states counted off CPU: S, D, SD or all [default: SD].
    #[arg(long)]
    offcpu_states: Option<String>,
    /// Record one in N switch-outs, values scaled by N [default: 1].
    #[arg(long)]
    offcpu_sample_one_in: Option<u32>,
    /// Faults per page-fault sample [default: 16].
    #[arg(long)]
    pagefault_period: Option<u64>,
    /// Off-CPU periods shorter than this are sampled (probability
    /// length/this, charged this), us; 0 records all [default: 1000].
    #[arg(long)]
    offcpu_sample_below_us: Option<u64>,
    /// Record heap growth by brk() [default: false: a syscall hook slows every syscall].
    #[arg(long)]
    brk: Option<bool>,
    /// Record mmap() bytes [default: false].
    #[arg(long)]
    mmap: Option<bool>,
    /// Record munmap() bytes [default: false].
    #[arg(long)]
    munmap: Option<bool>,
    /// Record block I/O latency [default: true].
    #[arg(long)]
    blockio: Option<bool>,
    /// Trace malloc in this process (repeatable; uprobes: every call traps).
    #[arg(long = "malloc-pid")]
    malloc_pids: Vec<u32>,
    /// Trace malloc in processes of this name (repeatable), as they start too.
    #[arg(long = "malloc-comm")]
    malloc_comms: Vec<String>,
    /// Mean KiB between malloc samples; 0 records every allocation [default: 512].
    #[arg(long)]
    malloc_sample_kib: Option<u64>,
    /// Sampled allocations tracked until freed [default: 65536].
    #[arg(long)]
    malloc_live_entries: Option<u32>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sample every CPU (or one process) for N seconds and write a profile,
    /// like `perf record -F 99 -a -g` followed by flamegraph.pl.
    Record(RecordArgs),
    /// Say which kernel features and privileges are present, and what each
    /// missing one costs, and who may read the daemon's profiles.
    Check {
        /// The daemon's config file. Default: /etc/emberd/emberd.toml if it exists.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Compile the unwind tables of ELF files (as the daemon does for every
    /// mapped file) and print rows, bytes and build time of each.
    UnwindTables {
        /// ELF files (executables, shared libraries).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Differential flame graph of two folded files (from perf +
    /// stackcollapse, another host, a nightly run), as difffolded.pl +
    /// flamegraph.pl draw it, plus the before graph with vanished paths.
    Diff(DiffArgs),
    /// Flame graph animation of folded files, one phase each, in order.
    Animate(AnimateArgs),
    /// Print a one-time URL (valid 60 s) that logs a browser into the web
    /// page of a daemon with auth_token_file. Run as root or a member of
    /// the token file's group (scripts/install: group emberd).
    Login(LoginArgs),
}

/// Where the daemon is and its token: the daemon's own settings.
#[derive(Debug, clap::Args)]
struct LoginArgs {
    /// The daemon's config file. Default: /etc/emberd/emberd.toml if it exists.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The daemon's listen address, if not the config's.
    #[arg(long)]
    listen: Option<String>,
    /// The token file, if not the config's.
    #[arg(long)]
    auth_token_file: Option<PathBuf>,
}

/// Options both comparisons take.
#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Output: .svg for the graph, .folded (or .txt, or - for stdout) for
    /// the columns (`stack v1 v2 ...`).
    #[arg(long, short = 'o', required = true)]
    output: PathBuf,
    /// Turn 0x... literals into 0x... so unnamed addresses of two builds
    /// match (difffolded.pl -x).
    #[arg(long)]
    strip_hex: bool,
    /// Turn every number into N, for lambdas and JIT names with counters.
    #[arg(long)]
    strip_numbers: bool,
    /// SVG title.
    #[arg(long)]
    title: Option<String>,
}

#[derive(Debug, clap::Args)]
struct DiffArgs {
    /// The before profile (folded).
    before: PathBuf,
    /// The after profile (folded).
    after: PathBuf,
    #[command(flatten)]
    common: CompareArgs,
    /// Scale before to after's total (difffolded.pl -n).
    #[arg(long, short = 'n')]
    normalize: bool,
    /// Swap the colours: blue for growth (flamegraph.pl --negate).
    #[arg(long)]
    negate: bool,
}

#[derive(Debug, clap::Args)]
struct AnimateArgs {
    /// Folded files, one per phase, in order.
    #[arg(required = true, num_args = 1..=60)]
    phases: Vec<PathBuf>,
    #[command(flatten)]
    common: CompareArgs,
    /// Size each phase relative to its own total (else to the largest).
    #[arg(long)]
    relative: bool,
}

#[derive(Debug, clap::Args)]
struct RecordArgs {
    /// How long to sample, in seconds. Ctrl-C stops early and still writes.
    #[arg(long, short = 's', default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    seconds: u64,
    /// Only this process (stops when it exits).
    #[arg(long, short = 'p')]
    pid: Option<u32>,
    /// Samples per second per CPU; 99 avoids lock-step with timed work.
    #[arg(long, short = 'F', default_value_t = defaults::FREQUENCY_HZ)]
    frequency: u64,
    /// Output file: *.folded for folded stacks, *.svg for a flame graph.
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// First frame of each stack: process (comm), pid (comm-PID) or thread (comm-PID/TID).
    #[arg(long, default_value_t = Grouping::Process)]
    group: Grouping,
    /// Keep samples of the idle task.
    #[arg(long)]
    idle: bool,
    /// What to record: cpu, offcpu, wakeup, offwake, pagefault or hotcold.
    #[arg(long, short = 'e', default_value = "cpu", value_parser = parse_event)]
    event: Event,
    /// Page faults per page-fault sample (values are scaled back to faults).
    #[arg(long, default_value_t = emberd::collect::events::defaults::PAGEFAULT_PERIOD)]
    pagefault_period: u64,
    /// Record one in N off-CPU periods (values scaled by N).
    #[arg(long, default_value_t = 1)]
    offcpu_sample_one_in: u32,
    /// Off-CPU periods shorter than this many us are sampled (probability
    /// length/this, charged this); 0 records every period.
    #[arg(long, default_value_t = emberd::collect::events::defaults::SAMPLE_BELOW_NS / 1000)]
    offcpu_sample_below_us: u64,
    /// Mean KiB between malloc samples (-e malloc*); 0 records every allocation.
    #[arg(long, default_value_t = emberd::collect::events::defaults::MALLOC_SAMPLE_BYTES / 1024)]
    malloc_sample_kib: u64,
    /// Entries of each BPF stack map (two are kept, about 1 KiB kernel memory each).
    #[arg(long, default_value_t = defaults::stack_map_entries())]
    stack_map_entries: u32,
    /// Entries of each BPF counts map (distinct threads and stacks a second).
    #[arg(long, default_value_t = defaults::counts_map_entries())]
    counts_map_entries: u32,
    /// Bytes of unwind tables (.eh_frame rows) the BPF unwinder holds, MiB.
    #[arg(long, default_value_t = emberd::unwind::defaults::TABLE_BUDGET_BYTES >> 20)]
    unwind_table_budget_mib: u64,
    /// Unwind user stacks with .eh_frame tables (false: frame pointers only,
    /// to compare).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    unwind_tables: bool,
    /// Show CPython 3.11-3.13 frames in place of the interpreter's eval loop
    /// (false: interpreters' stacks stay native).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    python: bool,
    /// Python frames as `function (file.py:LINE)`, one frame per line run
    /// (py-spy's default; without it, py-spy's `--nolineno` form).
    #[arg(long)]
    lines: bool,
}

/// What to log: `EMBERD_LOG` (`info`, `warn,emberd::daemon=debug`, ...:
/// a level, and levels by module), `info` if unset or empty. A value that
/// does not parse is reported and `info` used.
fn log_filter() -> tracing_subscriber::filter::Targets {
    let info = || tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO);
    let Ok(v) = std::env::var("EMBERD_LOG") else {
        return info();
    };
    // Empty parts ("info," or an empty value) would be a target of "" at
    // TRACE, which matches every target: dropped. Span and field filters
    // (`target[span]=level`) are not supported: said, not silently unmatched.
    let parts: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return info();
    }
    let parsed = if parts.iter().any(|p| p.contains(['[', '{'])) {
        Err("span and field filters are not supported".to_string())
    } else {
        parts.join(",").parse().map_err(|e| format!("{e}"))
    };
    parsed.unwrap_or_else(|e| {
        eprintln!("EMBERD_LOG={v:?} is not a log filter ({e}): logging at info");
        info()
    })
}

fn main() -> ExitCode {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(tracing::Level::TRACE)
        .finish()
        .with(log_filter())
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Record(args)) => run_record(args),
        Some(Command::Check { config }) => run_check(config.as_deref()),
        Some(Command::UnwindTables { files }) => run_unwind_tables(&files),
        Some(Command::Diff(args)) => run_diff(args),
        Some(Command::Animate(args)) => run_animate(args),
        Some(Command::Login(args)) => run_login(args),
        None => run_daemon(cli.daemon),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("emberd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_record(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let mut sampler = SamplerOptions::default();
    sampler.frequency_hz = args.frequency;
    sampler.pid = args.pid.map(Pid);
    sampler.include_idle = args.idle;
    sampler.stack_map_entries = args.stack_map_entries;
    sampler.counts_map_entries = args.counts_map_entries;
    sampler.unwind_rows = emberd::config::unwind_rows(Some(args.unwind_table_budget_mib))?;
    sampler.unwind_tables = args.unwind_tables;
    sampler.python = args.python;
    let options = RecordOptions {
        duration: Duration::from_secs(args.seconds),
        sampler,
        grouping: args.group,
        output: args.output,
        event: args.event,
        event_knobs: {
            let mut k = emberd::collect::events::EventOptions::default();
            k.pagefault_period = args.pagefault_period;
            k.sample_one_in = args.offcpu_sample_one_in;
            k.sample_below_ns = args.offcpu_sample_below_us.saturating_mul(1000);
            k.malloc_sample_bytes = args.malloc_sample_kib.saturating_mul(1024);
            k
        },
        lines: args.lines,
    };
    let summary = record::record(&options)?;
    eprintln!("{}", summary.report());
    eprintln!("[ wrote {} ]", options.output.display());
    Ok(ExitCode::SUCCESS)
}

fn run_daemon(args: DaemonArgs) -> anyhow::Result<ExitCode> {
    let flags = RawConfig {
        listen: args.listen,
        allow_remote: args.allow_remote.then_some(true),
        allowed_hosts: (!args.allowed_hosts.is_empty()).then_some(args.allowed_hosts),
        auth_token_file: args.auth_token_file,
        unix_socket: args.unix_socket,
        frequency_hz: args.frequency_hz,
        retention_seconds: args.retention_seconds,
        memory_budget_mib: args.memory_budget_mib,
        stack_map_entries: args.stack_map_entries,
        counts_map_entries: args.counts_map_entries,
        unwind_table_budget_mib: args.unwind_table_budget_mib,
        unwind_processes: args.unwind_processes,
        python: args.python,
        python_code_entries: args.python_code_entries,
        perf_map_max_mib: args.perf_map_max_mib,
        perf_map_budget_mib: args.perf_map_budget_mib,
        symbol_cache_mib: args.symbol_cache_mib,
        process_snapshot_mib: args.process_snapshot_mib,
        dwarf_budget_mib: args.dwarf_budget_mib,
        offcpu: args.offcpu,
        wakeup: args.wakeup,
        offwake: args.offwake,
        pagefault: args.pagefault,
        offcpu_min_us: args.offcpu_min_us,
        offcpu_max_ms: args.offcpu_max_ms,
        offcpu_states: args.offcpu_states,
        offcpu_sample_one_in: args.offcpu_sample_one_in,
        pagefault_period: args.pagefault_period,
        offcpu_sample_below_us: args.offcpu_sample_below_us,
        brk: args.brk,
        mmap: args.mmap,
        munmap: args.munmap,
        blockio: args.blockio,
        malloc_pids: (!args.malloc_pids.is_empty()).then_some(args.malloc_pids),
        malloc_comms: (!args.malloc_comms.is_empty()).then_some(args.malloc_comms),
        malloc_sample_kib: args.malloc_sample_kib,
        malloc_live_entries: args.malloc_live_entries,
    };
    let config = Config::load(args.config.as_deref(), flags)?;
    emberd::daemon::run(config)?;
    Ok(ExitCode::SUCCESS)
}

fn parse_event(s: &str) -> Result<Event, String> {
    Event::from_name(s).ok_or_else(|| {
        format!(
            "unknown event {s:?}: use {}",
            Event::ALL.map(Event::name).join(", ")
        )
    })
}

fn run_unwind_tables(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    println!(
        "{:>9} {:>10} {:>9} {:>6}  file",
        "rows", "bytes", "ms", "source"
    );
    for f in files {
        let started = std::time::Instant::now();
        match emberd::unwind::read_capped(f)
            .map_err(|e| e.to_string())
            .and_then(|b| emberd::unwind::build(&b, emberd::unwind::DEFAULT_MAX_ROWS))
        {
            Ok((t, _)) => println!(
                "{:>9} {:>10} {:>9.1} {:>6}  {} (fdes {}, corrupt fdes skipped {}, unsupported rows {})",
                t.rows.len(),
                t.rows.len() * 8,
                started.elapsed().as_secs_f64() * 1000.0,
                format!("{:?}", t.source),
                f.display(),
                t.stats.fdes,
                t.stats.bad_fdes,
                t.stats.unsupported_rows,
            ),
            Err(e) => {
                failed = true;
                eprintln!("emberd: {}: no unwind table: {e}", f.display());
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads a folded file as flamegraph.pl does, telling stderr what it skipped.
fn read_folded_file(path: &std::path::Path) -> anyhow::Result<emberd::profile::Profile> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let (profile, skipped) = emberd::render::folded::read_lenient(std::io::BufReader::new(f))
        .with_context(|| format!("{}: not a folded profile", path.display()))?;
    if skipped.malformed > 0 {
        let first: Vec<String> = skipped.first.iter().map(ToString::to_string).collect();
        eprintln!(
            "emberd: {}: skipped {} malformed line(s) ({})",
            path.display(),
            skipped.malformed,
            first.join("; ")
        );
    }
    Ok(profile)
}

/// Whether `output` asks for SVG (else folded columns); an unknown extension
/// is an error rather than a guess.
fn wants_svg(output: &std::path::Path) -> anyhow::Result<bool> {
    match output.extension().and_then(|e| e.to_str()) {
        Some("svg") => Ok(true),
        Some("folded" | "txt") => Ok(false),
        _ if output.as_os_str() == "-" => Ok(false),
        _ => anyhow::bail!(
            "{}: the output must end in .svg (graph) or .folded (columns), or be - for stdout",
            output.display()
        ),
    }
}

fn write_output(output: &std::path::Path, body: &[u8]) -> anyhow::Result<()> {
    if output.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().write_all(body)?;
        return Ok(());
    }
    std::fs::write(output, body).with_context(|| format!("writing {}", output.display()))
}

fn rewrite_of(c: &CompareArgs) -> emberd::compare::Rewrite {
    emberd::compare::Rewrite {
        strip_hex: c.strip_hex,
        strip_numbers: c.strip_numbers,
    }
}

fn run_diff(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let svg = wants_svg(&args.common.output)?;
    let before = read_folded_file(&args.before)?;
    let after = read_folded_file(&args.after)?;
    // Files: difffolded.pl's default (no normalization) unless -n.
    let diff = emberd::compare::Diff::new(
        &before,
        &after,
        rewrite_of(&args.common),
        Some(args.normalize),
        false,
    );
    let mut out = Vec::new();
    if svg {
        let name = |p: &std::path::Path| p.display().to_string();
        let mut opts = emberd::render::diff::DiffSvgOptions::new(
            args.common.title.clone().unwrap_or_else(|| {
                format!(
                    "Differential Flame Graph: {} vs {}",
                    name(&args.before),
                    name(&args.after)
                )
            }),
            "samples",
        );
        opts.notes = diff.notes("samples", |v| v.to_string());
        opts.negate = args.negate;
        opts.before = name(&args.before);
        opts.after = name(&args.after);
        let cut = emberd::render::diff::write(&diff, &opts, &mut out)?;
        warn_tree_cut(cut);
    } else {
        diff.series.write_folded(&mut out)?;
    }
    write_output(&args.common.output, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr that the graph's tree was full and some stacks end early.
fn warn_tree_cut(cut: usize) {
    if cut > 0 {
        eprintln!(
            "emberd: the graph holds at most {} frames: {cut} stack(s) end early, their value counted at the deepest frame kept",
            emberd::render::tree::MAX_TREE_NODES
        );
    }
}

fn run_animate(args: AnimateArgs) -> anyhow::Result<ExitCode> {
    let svg = wants_svg(&args.common.output)?;
    let profiles = args
        .phases
        .iter()
        .map(|p| read_folded_file(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let series = emberd::compare::Series::from_profiles(&profiles, rewrite_of(&args.common));
    let mut out = Vec::new();
    if svg {
        let labels: Vec<String> = args
            .phases
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut opts = emberd::render::animation::AnimationOptions::new(
            args.common
                .title
                .clone()
                .unwrap_or_else(|| "Flame Graph Animation".to_owned()),
            labels,
            "samples",
        );
        opts.subtitle = Some(format!(
            "{} phases; outlined red: growing into the next phase, blue: shrinking",
            args.phases.len()
        ));
        opts.relative = args.relative;
        let cut = emberd::render::animation::write(&series, &opts, &mut out)?;
        warn_tree_cut(cut);
    } else {
        series.write_folded(&mut out)?;
    }
    write_output(&args.common.output, &out)?;
    Ok(ExitCode::SUCCESS)
}

fn run_login(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let flags = RawConfig {
        listen: args.listen,
        auth_token_file: args.auth_token_file,
        ..RawConfig::default()
    };
    let config = Config::load(args.config.as_deref(), flags).context(
        "only root and members of the token file's group may log in (scripts/install: group emberd)",
    )?;
    if let Some(sock) = &config.unix_socket {
        anyhow::bail!(
            "this emberd serves on the Unix socket {} (unix_socket): a browser cannot open it; \
             read it with curl --unix-socket",
            sock.display()
        );
    }
    let addr = emberd::serve::auth::reachable(config.listen);
    let Some(token) = config.auth_token else {
        eprintln!(
            "emberd: no auth_token_file: every local user can read profiles, and the page needs no login"
        );
        println!("http://{addr}/");
        return Ok(ExitCode::SUCCESS);
    };
    println!("{}", emberd::serve::auth::login_url(addr, &token)?);
    eprintln!(
        "emberd: open it within {} s; it works once and logs the browser in for {} h",
        emberd::serve::auth::CODE_TTL.as_secs(),
        emberd::serve::auth::SESSION_TTL.as_secs() / 3600
    );
    Ok(ExitCode::SUCCESS)
}

fn run_check(config: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let mut items = check::run();
    items.push(match RawConfig::load(config) {
        Ok(raw) => check::access(&raw),
        Err(e) => check::Item {
            what: "who reads profiles",
            status: Status::Degraded,
            detail: format!("{e:#}"),
        },
    });
    for item in &items {
        println!("{item}");
    }
    let fatal = items.iter().filter(|i| i.status == Status::Fatal).count();
    if fatal > 0 {
        println!("\nemberd cannot sample here: fix the MISSING items above.");
        Ok(ExitCode::FAILURE)
    } else {
        println!("\nemberd can sample here.");
        Ok(ExitCode::SUCCESS)
    }
}
