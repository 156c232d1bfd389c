//! The `emberd` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use emberd::cli::{
    self,
    daemon::DaemonArgs,
    diff::{AnimateArgs, DiffArgs},
    flamegraph::FlamegraphArgs,
    login::LoginArgs,
    record::RecordArgs,
};

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
    /// What emberd reads of a running HotSpot JVM (no flag or agent in it):
    /// its release, code heaps and, with --methods, the compiled methods in
    /// its code cache with their names and first lines.
    Jvm {
        /// The JVM's process id.
        pid: u32,
        /// List the compiled methods too.
        #[arg(long)]
        methods: bool,
    },
    /// Flame graph of a folded file (`perf script | stackcollapse-perf.pl`
    /// output, another host's /folded), as flamegraph.pl draws it:
    /// `emberd flamegraph cpu.folded > cpu.svg`.
    Flamegraph(FlamegraphArgs),
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

/// What to log: `EMBERD_LOG` (`info`, `warn,emberd::daemon=debug`, ...:
/// a level, and levels by module), `default` if unset or empty. A value
/// that does not parse is reported and `default` used.
fn log_filter(default: tracing::Level) -> tracing_subscriber::filter::Targets {
    let info = || tracing_subscriber::filter::Targets::new().with_default(default);
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
        eprintln!("EMBERD_LOG={v:?} is not a log filter ({e}): logging at {default}");
        info()
    })
}

fn main() -> ExitCode {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let cli = Cli::parse();
    // `check` is a report: the info lines of what it loads to find out
    // (its own malloc tracing) would come before the report's first line.
    let default = if matches!(cli.command, Some(Command::Check { .. })) {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(tracing::Level::TRACE)
        .finish()
        .with(log_filter(default))
        .init();
    let result = match cli.command {
        Some(Command::Record(args)) => cli::record::run(args),
        Some(Command::Check { config }) => cli::check::command(config.as_deref()),
        Some(Command::UnwindTables { files }) => cli::unwind_tables::run(&files),
        Some(Command::Jvm { pid, methods }) => cli::jvm::run(pid, methods),
        Some(Command::Flamegraph(args)) => cli::flamegraph::run(args),
        Some(Command::Diff(args)) => cli::diff::run_diff(args),
        Some(Command::Animate(args)) => cli::diff::run_animate(args),
        Some(Command::Login(args)) => cli::login::run(args),
        None => cli::daemon::run(cli.daemon),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("emberd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
