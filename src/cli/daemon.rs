//! `emberd` without a subcommand: the daemon, its settings from flags
//! over the config file.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::daemon::config::{Config, RawConfig};

/// Daemon settings; each is also a key of the config file.
#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Config file (TOML). Default: /etc/emberd/emberd.toml if it exists.
    #[arg(long, global = false)]
    pub config: Option<PathBuf>,
    /// HTTP listen address [default: 127.0.0.1:7099].
    #[arg(long)]
    pub listen: Option<String>,
    /// Allow a non-loopback listen address (profiles name every process).
    #[arg(long)]
    pub allow_remote: bool,
    /// A host name the Host header may carry (besides IP literals and
    /// localhost); repeat for more. Others get 421 (DNS rebinding).
    #[arg(long = "allowed-host")]
    pub allowed_hosts: Vec<String>,
    /// File whose first line is the bearer token every route but /healthz needs.
    #[arg(long)]
    pub auth_token_file: Option<PathBuf>,
    /// Serve HTTP on this Unix socket (mode 0660) instead of TCP.
    #[arg(long)]
    pub unix_socket: Option<PathBuf>,
    /// Samples per second per CPU [default: 99].
    #[arg(long, short = 'F')]
    pub frequency_hz: Option<u64>,
    /// History kept, seconds [default: 3600].
    #[arg(long)]
    pub retention_seconds: Option<u64>,
    /// Memory budget of the sample stores, all together, MiB [default: 12].
    #[arg(long)]
    pub memory_budget_mib: Option<u64>,
    /// Entries of each BPF stack map [default: 16384, or 256 per CPU].
    #[arg(long)]
    pub stack_map_entries: Option<u32>,
    /// Entries of each BPF counts map [default: 10240, or 256 per CPU above 40 CPUs].
    #[arg(long)]
    pub counts_map_entries: Option<u32>,
    /// Bytes of unwind tables (.eh_frame rows) the BPF unwinder holds, MiB [default: 32, or 1/64 of the host's memory if less].
    #[arg(long)]
    pub unwind_table_budget_mib: Option<u64>,
    /// Processes whose mappings the BPF unwinder holds [default: 8192].
    #[arg(long)]
    pub unwind_processes: Option<u32>,
    /// Show CPython 3.11-3.13 frames in place of the eval loop [default: true].
    #[arg(long, action = clap::ArgAction::Set)]
    pub python: Option<bool>,
    /// Code objects whose names the Python walker keeps in BPF [default: 4096].
    #[arg(long)]
    pub python_code_entries: Option<u32>,
    /// Larger perf maps are not read, MiB [default: 64].
    #[arg(long)]
    pub perf_map_max_mib: Option<u64>,
    /// Parsed perf maps kept, all processes, MiB [default: 16].
    #[arg(long)]
    pub perf_map_budget_mib: Option<u64>,
    /// Named addresses cached (kernel and files), MiB [default: 4].
    #[arg(long)]
    pub symbol_cache_mib: Option<u64>,
    /// Process mappings remembered (to name samples of exited processes), MiB [default: 2].
    #[arg(long)]
    pub process_snapshot_mib: Option<u64>,
    /// Parsed DWARF held, all files, MiB; a file whose DWARF is larger is
    /// named from its symbol table, without inlined frames or lines [default: 8].
    #[arg(long)]
    pub dwarf_budget_mib: Option<u64>,
    /// Record off-CPU time [default: true].
    #[arg(long)]
    pub offcpu: Option<bool>,
    /// Record wakeup time [default: true].
    #[arg(long)]
    pub wakeup: Option<bool>,
    /// Record off-wake chains [default: true].
    #[arg(long)]
    pub offwake: Option<bool>,
    /// Record page faults [default: true].
    #[arg(long)]
    pub pagefault: Option<bool>,
    /// Shorter off-CPU periods are not charged, us [default: 1].
    #[arg(long)]
    pub offcpu_min_us: Option<u64>,
    /// Longer off-CPU periods are not charged, ms [default: 10000].
    #[arg(long)]
    pub offcpu_max_ms: Option<u64>,
    /// Task states counted off CPU: S, D, SD or all [default: SD].
    #[arg(long)]
    pub offcpu_states: Option<String>,
    /// Record one in N switch-outs, values scaled by N [default: 1].
    #[arg(long)]
    pub offcpu_sample_one_in: Option<u32>,
    /// Faults per page-fault sample [default: 16].
    #[arg(long)]
    pub pagefault_period: Option<u64>,
    /// Off-CPU periods shorter than this are sampled (probability
    /// length/this, charged this), us; 0 records all [default: 1000].
    #[arg(long)]
    pub offcpu_sample_below_us: Option<u64>,
    /// Record heap growth by brk() [default: false: a syscall hook slows every syscall].
    #[arg(long)]
    pub brk: Option<bool>,
    /// Record mmap() bytes [default: false].
    #[arg(long)]
    pub mmap: Option<bool>,
    /// Record munmap() bytes [default: false].
    #[arg(long)]
    pub munmap: Option<bool>,
    /// Record block I/O latency [default: true].
    #[arg(long)]
    pub blockio: Option<bool>,
    /// Trace malloc in this process (repeatable; uprobes: every call traps).
    #[arg(long = "malloc-pid")]
    pub malloc_pids: Vec<u32>,
    /// Trace malloc in processes of this name (repeatable), as they start too.
    #[arg(long = "malloc-comm")]
    pub malloc_comms: Vec<String>,
    /// Mean KiB between malloc samples; 0 records every allocation [default: 512].
    #[arg(long)]
    pub malloc_sample_kib: Option<u64>,
    /// Sampled allocations tracked until freed [default: 65536].
    #[arg(long)]
    pub malloc_live_entries: Option<u32>,
    /// Push each interval's profiles to Grafana Pyroscope at this base URL (http://host:4040).
    #[arg(long)]
    pub pyroscope_url: Option<String>,
    /// File whose first line is the bearer token of Pyroscope pushes.
    #[arg(long)]
    pub pyroscope_bearer_token_file: Option<PathBuf>,
    /// Basic-auth user of Pyroscope pushes.
    #[arg(long)]
    pub pyroscope_basic_auth_user: Option<String>,
    /// File whose first line is the basic-auth password of Pyroscope pushes.
    #[arg(long)]
    pub pyroscope_basic_auth_password_file: Option<PathBuf>,
    /// Push OTLP profiles to this base URL (http://collector:4318).
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
    /// File whose first line is the bearer token of OTLP pushes.
    #[arg(long)]
    pub otlp_bearer_token_file: Option<PathBuf>,
    /// Basic-auth user of OTLP pushes.
    #[arg(long)]
    pub otlp_basic_auth_user: Option<String>,
    /// File whose first line is the basic-auth password of OTLP pushes.
    #[arg(long)]
    pub otlp_basic_auth_password_file: Option<PathBuf>,
    /// Seconds between pushes [default: 15].
    #[arg(long)]
    pub push_interval_seconds: Option<u64>,
    /// Unsent intervals kept per destination [default: 20].
    #[arg(long)]
    pub push_queue_intervals: Option<u32>,
    /// Deadline of one push, seconds [default: 10].
    #[arg(long)]
    pub push_timeout_seconds: Option<u64>,
    /// Distinct service/unit/container label sets per pushed event and interval [default: 100].
    #[arg(long)]
    pub push_max_label_sets: Option<u32>,
    /// An extra header of Pyroscope pushes, "Name: value" (repeatable).
    #[arg(long = "pyroscope-header")]
    pub pyroscope_headers: Vec<String>,
    /// An extra header of OTLP pushes, "Name: value" (repeatable).
    #[arg(long = "otlp-header")]
    pub otlp_headers: Vec<String>,
    /// A user (name or uid) besides root whose socket on this host may
    /// receive Pyroscope pushes [default: root only].
    #[arg(long)]
    pub pyroscope_listener_user: Option<String>,
    /// A user (name or uid) besides root whose socket on this host may
    /// receive OTLP pushes [default: root only].
    #[arg(long)]
    pub otlp_listener_user: Option<String>,
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(args: DaemonArgs) -> anyhow::Result<ExitCode> {
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
        pyroscope_url: args.pyroscope_url,
        pyroscope_bearer_token_file: args.pyroscope_bearer_token_file,
        pyroscope_basic_auth_user: args.pyroscope_basic_auth_user,
        pyroscope_basic_auth_password_file: args.pyroscope_basic_auth_password_file,
        otlp_endpoint: args.otlp_endpoint,
        otlp_bearer_token_file: args.otlp_bearer_token_file,
        otlp_basic_auth_user: args.otlp_basic_auth_user,
        otlp_basic_auth_password_file: args.otlp_basic_auth_password_file,
        push_interval_seconds: args.push_interval_seconds,
        push_queue_intervals: args.push_queue_intervals,
        push_timeout_seconds: args.push_timeout_seconds,
        push_max_label_sets: args.push_max_label_sets,
        pyroscope_headers: secrets(args.pyroscope_headers),
        otlp_headers: secrets(args.otlp_headers),
        pyroscope_listener_user: args.pyroscope_listener_user,
        otlp_listener_user: args.otlp_listener_user,
    };
    let config = Config::load(args.config.as_deref(), flags)?;
    crate::daemon::run(config)?;
    Ok(ExitCode::SUCCESS)
}

/// Repeated header flags as secrets (their values may be keys); none: unset.
fn secrets(values: Vec<String>) -> Option<Vec<crate::shared::Secret>> {
    (!values.is_empty()).then(|| values.into_iter().map(Into::into).collect())
}
