//! Daemon configuration: every setting is declared once, in the
//! `settings!` list below, with its flag, its key in the TOML file, its
//! type, its default (read from the stage's `defaults` where it lives), its
//! range and its help. From that one list come [`RawConfig`] (the parser of
//! both the command line and the file), the merge (flags over the file,
//! the file over defaults), one accessor per setting that applies the
//! default and checks the range, and the `[default: ...]` of `--help`.
//!
//! Out of range is an error, for a flag and a file key alike: the daemon
//! does not start and says `key = value is out of range: use lo..=hi`.
//! Nothing is clamped silently.

use std::fmt::Display;
use std::net::SocketAddr;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::shared::Secret;

/// Defaults of the daemon's own settings; the others are read from the
/// `defaults` module of the stage that uses them.
pub mod defaults {
    /// Default config file; a missing default file means "all defaults".
    pub const CONFIG_PATH: &str = "/etc/emberd/emberd.toml";
    /// Loopback only: profiles name every process on the host.
    pub const LISTEN: &str = "127.0.0.1:7099";
    /// Who besides root may own a local socket that receives pushes
    /// (`pyroscope_listener_user`, `otlp_listener_user`): nobody else.
    pub const LISTENER_USER: Option<&str> = None;
    /// The user the installed unit runs the daemon as (`User=` in
    /// `systemd/emberd.service`): `emberd login` trusts a daemon port held
    /// by root or this user.
    pub const DAEMON_USER: &str = "emberd";
}

/// How a default reads in `--help`, after the setting's text as
/// `[default: X]`; `None` shows none (an empty list says nothing).
trait HelpDefault {
    fn help_default(&self) -> Option<String>;
}

macro_rules! shown_as_is {
    ($($t:ty),*) => {$(
        impl HelpDefault for $t {
            fn help_default(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )*};
}
shown_as_is!(u32, u64, bool, String);

impl<T> HelpDefault for Vec<T> {
    fn help_default(&self) -> Option<String> {
        None
    }
}

/// Appends `[default: shown]` to an argument's help (its doc comment, as
/// clap made it), so `--help` prints the default from where it is declared.
pub fn with_default(shown: Option<String>) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |arg| match shown {
        None => arg,
        Some(shown) => {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} [default: {shown}]"))
        }
    }
}

/// `Ok` when `value` is in `range`, else the error every setting gives.
fn in_range<T: PartialOrd + Display>(
    key: &str,
    value: &T,
    range: impl RangeBounds<T>,
) -> anyhow::Result<()> {
    if range.contains(value) {
        return Ok(());
    }
    let accepted = match (range.start_bound(), range.end_bound()) {
        (Bound::Included(lo), Bound::Included(hi)) => format!("{lo}..={hi}"),
        (Bound::Included(lo), Bound::Unbounded) => format!("{lo} or more"),
        (Bound::Unbounded, Bound::Included(hi)) => format!("at most {hi}"),
        // Only inclusive bounds are declared below.
        _ => "another value".to_owned(),
    };
    bail!("{key} = {value} is out of range: use {accepted}")
}

/// Declares the daemon's settings. Each entry is
///
/// ```text
/// /// Help text (also the field's doc).
/// #[arg(...)]                           // optional: clap attributes beyond `long`
/// key: Type = default, shown Some(text), range lo..=hi;
/// ```
///
/// where `= default` (evaluated when read), `shown` (what `[default: ...]`
/// says when the default alone does not say it, `None` for nothing) and
/// `range` are optional. A setting without a default is an `Option` for
/// whoever reads it; one with a range is read through a `Result`.
macro_rules! settings {
    (@shown $ty:ty, [$($default:expr)?] [$shown:expr]) => { $shown };
    (@shown $ty:ty, [$default:expr] []) => {{
        let default: $ty = $default;
        HelpDefault::help_default(&default)
    }};
    (@shown $ty:ty, [] []) => { None };
    (@type $ty:ty, [$default:expr], [$range:expr]) => { anyhow::Result<$ty> };
    (@type $ty:ty, [$default:expr], []) => { $ty };
    (@type $ty:ty, [], [$range:expr]) => { anyhow::Result<Option<$ty>> };
    (@type $ty:ty, [], []) => { Option<$ty> };
    (@get $key:ident, $given:expr, [$default:expr], [$range:expr]) => {{
        let value = match $given { Some(v) => v, None => $default };
        in_range(stringify!($key), &value, $range)?;
        Ok(value)
    }};
    (@get $key:ident, $given:expr, [$default:expr], []) => {
        match $given { Some(v) => v, None => $default }
    };
    (@get $key:ident, $given:expr, [], [$range:expr]) => {{
        let value = $given;
        if let Some(v) = &value {
            in_range(stringify!($key), v, $range)?;
        }
        Ok(value)
    }};
    (@get $key:ident, $given:expr, [], []) => { $given };
    (@check $raw:expr, $key:ident, [$range:expr]) => { $raw.$key()?; };
    (@check $raw:expr, $key:ident, []) => {};
    ($(
        $(#[doc = $doc:literal])+
        $(#[arg($($arg:tt)*)])*
        $key:ident: $ty:ty $(= $default:expr)? $(, shown $shown:expr)? $(, range $range:expr)?;
    )+) => {
        /// Settings as written in the file or on the command line,
        /// unchecked: `None` where not given. Each field is a key of the
        /// file and a flag, `--key-name`; its accessor of the same name
        /// gives the value, the default where none was given, in range.
        #[derive(Debug, Clone, Default, Deserialize, clap::Args)]
        #[serde(deny_unknown_fields)]
        $(#[command(mut_arg(
            stringify!($key),
            with_default(settings!(@shown $ty, [$($default)?] [$($shown)?])),
        ))])+
        pub struct RawConfig {
            $(
                $(#[doc = $doc])+
                #[arg(long)]
                $(#[arg($($arg)*)])*
                pub $key: Option<$ty>,
            )+
        }

        impl RawConfig {
            /// Every key of the file, in the order of `--help`.
            pub const KEYS: &[&str] = &[$(stringify!($key)),+];

            $(
                #[doc = concat!(
                    "`", stringify!($key), "`: the flag's or the file's value, \
                     else the default (if it has one), checked against its range (if it has one)."
                )]
                pub fn $key(&self) -> settings!(@type $ty, [$($default)?], [$($range)?]) {
                    settings!(@get $key, Clone::clone(&self.$key), [$($default)?], [$($range)?])
                }
            )+

            /// `other`'s settings where given, else `self`'s.
            fn overridden_by(self, other: RawConfig) -> RawConfig {
                RawConfig {
                    $($key: other.$key.or(self.$key),)+
                }
            }

            /// Checks the range of every setting that has one.
            fn check_ranges(&self) -> anyhow::Result<()> {
                $(settings!(@check self, $key, [$($range)?]);)+
                Ok(())
            }
        }
    };
}

settings! {
    /// HTTP listen address.
    listen: String = defaults::LISTEN.to_owned();
    /// Allow a non-loopback listen address (profiles name every process).
    // A switch on the command line (`--allow-remote`), a boolean in the file.
    #[arg(num_args = 0, default_missing_value = "true")]
    allow_remote: bool = false, shown None;
    /// A host name the Host header may carry (besides IP literals and
    /// localhost); repeat for more. Others get 421 (DNS rebinding).
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String> = Vec::new();
    /// File whose first line is the bearer token every route but /healthz needs.
    auth_token_file: PathBuf;
    /// Serve HTTP on this Unix socket (mode 0660) instead of TCP.
    unix_socket: PathBuf;
    /// Samples per second per CPU.
    #[arg(short = 'F')]
    // Its range, 1 to the kernel's perf_event_max_sample_rate (which the
    // kernel may lower as it runs), is checked when the sampler starts.
    frequency_hz: u64 = crate::collect::defaults::FREQUENCY_HZ;
    /// History kept, seconds.
    retention_seconds: u64 = crate::store::defaults::RETENTION.as_secs(),
        range 60..=7 * 86400;
    /// Memory budget of the sample stores, all together, MiB.
    memory_budget_mib: u64 = (crate::store::defaults::MEMORY_BUDGET >> 20) as u64,
        range 4..=65536;
    /// History on disk (the flight recorder): its directory, or "" for
    /// none. Default: the unit's state directory ($STATE_DIRECTORY, made
    /// by StateDirectory=emberd), else none.
    // `--history-dir ""` is allowed: off, as in the file.
    #[arg(value_parser = path_or_empty)]
    history_dir: PathBuf,
        shown Some("$STATE_DIRECTORY if set, else none".to_owned());
    /// Disk space the history on disk may take, MiB; the oldest files go
    /// first.
    history_disk_mib: u64 = crate::store::disk::defaults::DISK_MIB,
        range 16..=16 << 20;
    /// Days of history kept on disk.
    history_days: u64 = crate::store::disk::defaults::DAYS,
        range 1..=366;
    /// Seconds between writes of the history on disk (a divisor of 60): a
    /// kill loses at most this and 7 s; shorter writes more files.
    history_write_seconds: u64 = crate::store::disk::defaults::WRITE_SECONDS,
        range 5..=60;
    /// Serve the history directory without sampling (a directory copied
    /// from another host, read only).
    // A switch on the command line (`--no-sample`), a boolean in the file.
    #[arg(num_args = 0, default_missing_value = "true")]
    no_sample: bool = false, shown None;
    /// Entries of each BPF stack map.
    // No one default: the CPU sampler's and the events' differ (`Config::from_raw`).
    stack_map_entries: u32,
        shown Some(format!(
            "{}, or {} per CPU",
            crate::collect::defaults::STACK_MAP_ENTRIES,
            crate::collect::defaults::STACK_ENTRIES_PER_CPU
        )),
        range 64..;
    /// Entries of each BPF counts map.
    // At least 16: the events' counts maps need that many (8 did for the CPU's).
    counts_map_entries: u32,
        shown Some(format!(
            "{}, or {} per CPU above {} CPUs",
            crate::collect::defaults::COUNTS_MAP_ENTRIES,
            crate::collect::defaults::COUNTS_ENTRIES_PER_CPU,
            crate::collect::defaults::COUNTS_MAP_ENTRIES
                / crate::collect::defaults::COUNTS_ENTRIES_PER_CPU
        )),
        range 16..;
    /// Bytes of unwind tables (.eh_frame rows) the BPF unwinder holds, MiB.
    // Kernel memory, allocated at start; at most 2^29 rows of 4 bytes.
    unwind_table_budget_mib: u64 = crate::unwind::defaults::table_budget_bytes() >> 20,
        shown Some(format!(
            "{}, or 1/64 of the host's memory if less",
            crate::unwind::defaults::TABLE_BUDGET_BYTES >> 20
        )),
        range 1..=2048;
    /// Processes whose mappings the BPF unwinder holds.
    // About 5 KiB of kernel memory each; when full, a user holding the most
    // gives up a place to a user holding fewer.
    unwind_processes: u32 = crate::unwind::defaults::MAX_PROCESSES, range 16..=1_048_576;
    /// Show CPython 3.8-3.15 frames in place of the eval loop.
    python: bool = true;
    /// Show Java methods of HotSpot JVMs (JDK 17, 25), read from the JVM's
    /// own structure tables, in place of their code cache's addresses.
    java: bool = true;
    /// Show JavaScript functions of Node.js processes (Node 18 to 26), read
    /// from V8's frames and postmortem metadata, in place of V8's code.
    node: bool = true;
    /// Code objects whose names the Python walker keeps in BPF.
    // About 560 bytes of kernel memory each, allocated at start.
    python_code_entries: u32 = crate::unwind::defaults::PYTHON_CODE_ENTRIES,
        range 64..=1_048_576;
    /// JVMs whose code cache the Java walker reads.
    // 168 bytes of kernel memory each; a user other than root holds at most
    // half, and further JVMs of theirs stay native (counted).
    java_processes: u32 = crate::collect::defaults::JAVA_PROCESSES, range 2..=65_536;
    /// Node processes whose JavaScript frames the walker reads.
    // 64 bytes of kernel memory each; a user other than root holds at most
    // half, and further processes of theirs stay native (counted).
    node_processes: u32 = crate::collect::defaults::NODE_PROCESSES, range 2..=65_536;
    /// Python processes whose frames the walker reads.
    // 80 bytes of kernel memory each; a user other than root holds at most
    // half, and further processes of theirs stay native (counted).
    python_processes: u32 = crate::collect::defaults::PYTHON_PROCESSES, range 2..=65_536;
    /// Larger perf maps are not read, MiB.
    perf_map_max_mib: u64 = crate::symbolize::defaults::PERF_MAP_MAX_FILE_BYTES >> 20,
        range 1..=4096;
    /// Parsed perf maps kept, all processes, MiB.
    perf_map_budget_mib: u64 = (crate::symbolize::defaults::PERF_MAP_BUDGET_BYTES >> 20) as u64,
        range 1..=65536;
    /// Named addresses cached (kernel and files), MiB.
    symbol_cache_mib: u64 = (crate::symbolize::defaults::SYMBOL_CACHE_BYTES >> 20) as u64,
        range 1..=65536;
    /// Process mappings remembered (to name samples of exited processes), MiB.
    process_snapshot_mib: u64 = (crate::symbolize::defaults::SNAPSHOT_BUDGET_BYTES >> 20) as u64,
        range 1..=65536;
    /// Parsed DWARF held, all files, MiB; a file whose DWARF is larger is
    /// named from its symbol table, without inlined frames or lines.
    // 0: symbol tables only, for every file.
    dwarf_budget_mib: u64 = (crate::symbolize::defaults::DWARF_BUDGET_BYTES >> 20) as u64,
        range 0..=65536;
    /// Record off-CPU time.
    offcpu: bool = true;
    /// Record wakeup time.
    wakeup: bool = true;
    /// Record off-wake chains.
    offwake: bool = true;
    /// Record page faults.
    pagefault: bool = true;
    /// Shorter off-CPU periods are not charged, us.
    // Its bound is offcpu_max_ms, checked with it (`events_of`).
    offcpu_min_us: u64 = crate::collect::events::defaults::MIN_BLOCK_NS / 1000;
    /// Longer off-CPU periods are not charged, ms.
    offcpu_max_ms: u64 = crate::collect::events::defaults::MAX_BLOCK_NS / 1_000_000,
        range 1..=3_600_000;
    /// Task states counted off CPU: S, D, SD or all.
    offcpu_states: String = states_name(crate::collect::events::defaults::STATE_MASK);
    /// Record one in N switch-outs, values scaled by N.
    offcpu_sample_one_in: u32 = 1, range 1..;
    /// Faults per page-fault sample.
    pagefault_period: u64 = crate::collect::events::defaults::PAGEFAULT_PERIOD, range 1..;
    /// Off-CPU periods shorter than this are sampled (probability
    /// length/this, charged this), us; 0 records all.
    offcpu_sample_below_us: u64 = crate::collect::events::defaults::SAMPLE_BELOW_NS / 1000,
        range 0..=1_000_000;
    /// Record heap growth by brk().
    brk: bool = crate::collect::events::defaults::SYSCALL_EVENTS,
        shown Some(format!(
            "{}: a syscall hook slows every syscall",
            crate::collect::events::defaults::SYSCALL_EVENTS
        ));
    /// Record mmap() bytes.
    mmap: bool = crate::collect::events::defaults::SYSCALL_EVENTS;
    /// Record munmap() bytes.
    munmap: bool = crate::collect::events::defaults::SYSCALL_EVENTS;
    /// Record block I/O latency.
    blockio: bool = true;
    /// Trace malloc in this process (repeatable; uprobes: every call traps).
    #[arg(long = "malloc-pid")]
    malloc_pids: Vec<u32> = Vec::new();
    /// Trace malloc in processes of this name (repeatable), as they start too.
    #[arg(long = "malloc-comm")]
    malloc_comms: Vec<String> = Vec::new();
    /// Mean KiB between malloc samples; 0 records every allocation.
    malloc_sample_kib: u64 = crate::collect::events::defaults::MALLOC_SAMPLE_BYTES >> 10,
        range 0..=1 << 20;
    /// Sampled allocations tracked until freed.
    malloc_live_entries: u32 = crate::collect::events::defaults::MALLOC_LIVE_ENTRIES,
        range 1..=1 << 22;
    /// Threads whose off-CPU state the bounded form (Linux 5.10-5.16) keeps.
    offcpu_bounded_threads: u32 = crate::collect::events::defaults::BLOCKED_THREADS,
        range 64..=1 << 20;
    /// Push each interval's profiles to Grafana Pyroscope at this base URL (http://host:4040).
    pyroscope_url: String;
    /// File whose first line is the bearer token of Pyroscope pushes.
    pyroscope_bearer_token_file: PathBuf;
    /// Basic-auth user of Pyroscope pushes.
    // Grafana Cloud: the stack's user id.
    pyroscope_basic_auth_user: String;
    /// File whose first line is the basic-auth password of Pyroscope pushes.
    pyroscope_basic_auth_password_file: PathBuf;
    /// Push OTLP profiles to this base URL (http://collector:4318).
    otlp_endpoint: String;
    /// File whose first line is the bearer token of OTLP pushes.
    otlp_bearer_token_file: PathBuf;
    /// Basic-auth user of OTLP pushes.
    otlp_basic_auth_user: String;
    /// File whose first line is the basic-auth password of OTLP pushes.
    otlp_basic_auth_password_file: PathBuf;
    /// Seconds between pushes.
    push_interval_seconds: u64 = crate::export::defaults::INTERVAL_SECONDS, range 1..=3600;
    /// Unsent intervals kept per destination.
    // Then the oldest is dropped.
    push_queue_intervals: u32 = crate::export::defaults::QUEUE_INTERVALS as u32,
        range 1..=1000;
    /// Deadline of one push, seconds.
    push_timeout_seconds: u64 = crate::export::defaults::TIMEOUT_SECONDS, range 1..=300;
    /// Distinct service/unit/container label sets per pushed event and interval.
    // The lightest beyond are pushed as `[other services]`.
    push_max_label_sets: u32 = crate::export::defaults::MAX_LABEL_SETS as u32,
        range 1..=100_000;
    /// An extra header of Pyroscope pushes, "Name: value" (repeatable).
    // Secrets: the values may be keys.
    #[arg(long = "pyroscope-header")]
    pyroscope_headers: Vec<Secret> = Vec::new();
    /// An extra header of OTLP pushes, "Name: value" (repeatable).
    #[arg(long = "otlp-header")]
    otlp_headers: Vec<Secret> = Vec::new();
    /// A user (name or uid) besides root whose socket on this host may
    /// receive Pyroscope pushes.
    pyroscope_listener_user: String, shown Some("root only".to_owned());
    /// A user (name or uid) besides root whose socket on this host may
    /// receive OTLP pushes.
    otlp_listener_user: String, shown Some("root only".to_owned());
}

/// Checked daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Host names the `Host` header may carry besides IP literals and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// Serve on this Unix socket instead of TCP.
    pub unix_socket: Option<std::path::PathBuf>,
    /// The bearer token every route but `/healthz` needs, if configured.
    pub auth_token: Option<Secret>,
    /// Sampling frequency per CPU.
    pub frequency_hz: u64,
    /// History kept.
    pub retention: Duration,
    /// Store byte budget.
    pub memory_budget: usize,
    /// Entries of each BPF stack map.
    pub stack_map_entries: u32,
    /// Entries of each BPF counts map.
    pub counts_map_entries: u32,
    /// Rows of the BPF unwind-table array (budget bytes / 8).
    pub unwind_rows: u32,
    /// Processes the BPF unwinder holds mappings of.
    pub unwind_processes: u32,
    /// Read Python frames.
    pub python: bool,
    /// Read Java frames of HotSpot JVMs.
    pub java: bool,
    /// Entries of the BPF map of Python code objects.
    pub python_code_entries: u32,
    /// Entries of the BPF map of HotSpot JVMs.
    pub java_processes: u32,
    /// Entries of the BPF map of Python processes.
    pub python_processes: u32,
    /// Read JavaScript frames of Node.js processes.
    pub node: bool,
    /// Entries of the BPF map of node processes.
    pub node_processes: u32,
    /// Symbolizer bounds (perf maps).
    pub symbolizer: crate::symbolize::SymbolizerOptions,
    /// Off-CPU, wakeup, off-wake and page-fault recording.
    pub events: crate::collect::events::EventOptions,
    /// Pushes to Pyroscope and OTLP, if any destination is configured.
    pub push: Option<crate::export::PushOptions>,
    /// History on disk, if kept.
    pub history: Option<crate::store::disk::DiskOptions>,
    /// Serve the history on disk without sampling.
    pub no_sample: bool,
}

/// Task-state letters (as in `ps`) to prev_state bits; "all" is 0 (every state).
pub fn parse_states(s: &str) -> anyhow::Result<u32> {
    if s == "all" {
        return Ok(0);
    }
    let mut mask = 0;
    for c in s.chars() {
        mask |= match c {
            'S' => 0x1,
            'D' => 0x2,
            'R' => {
                bail!(
                    "offcpu_states: R (preempted) is state 0 and cannot be selected alone; use \"all\""
                )
            }
            _ => {
                bail!("offcpu_states = {s:?}: use letters S (sleeping), D (disk sleep), or \"all\"")
            }
        };
    }
    if mask == 0 {
        bail!("offcpu_states is empty: use S, D, SD or all");
    }
    Ok(mask)
}

/// The letters [`parse_states`] reads as `mask`: how the default
/// (`collect::events::defaults::STATE_MASK`) is written as a setting.
fn states_name(mask: u32) -> String {
    if mask == 0 {
        return "all".to_owned();
    }
    [(0x1, 'S'), (0x2, 'D')]
        .into_iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, letter)| letter)
        .collect()
}

impl RawConfig {
    /// The settings of the file at `path`, or of the default path if it
    /// exists (else none: all defaults), unchecked.
    pub fn load(path: Option<&Path>) -> anyhow::Result<RawConfig> {
        Ok(match path {
            Some(p) => read_file(p)?,
            None if Path::new(defaults::CONFIG_PATH).exists() => {
                read_file(Path::new(defaults::CONFIG_PATH))?
            }
            None => RawConfig::default(),
        })
    }
}

impl Config {
    /// The settings of the file (`path`, or the default path if it
    /// exists) with `flags` on top, unchecked and no secret file read.
    pub fn load_raw(path: Option<&Path>, flags: RawConfig) -> anyhow::Result<RawConfig> {
        Ok(RawConfig::load(path)?.overridden_by(flags))
    }

    /// Reads the file (`path`, or the default path if it exists) and applies
    /// `flags` on top.
    pub fn load(path: Option<&Path>, flags: RawConfig) -> anyhow::Result<Config> {
        Self::from_raw(RawConfig::load(path)?.overridden_by(flags))
    }

    /// Checks raw settings: every range first, then what each stage needs.
    pub fn from_raw(raw: RawConfig) -> anyhow::Result<Config> {
        raw.check_ranges()?;
        let listen = listen_of(&raw)?;
        let events = events_of(&raw)?;
        let auth_token = auth_token_of(&raw)?;
        let push = push_of(&raw)?;
        Ok(Config {
            push,
            events,
            listen,
            allowed_hosts: raw
                .allowed_hosts()
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            auth_token,
            unix_socket: raw.unix_socket(),
            frequency_hz: raw.frequency_hz(),
            retention: Duration::from_secs(raw.retention_seconds()?),
            memory_budget: (raw.memory_budget_mib()? as usize) << 20,
            stack_map_entries: raw
                .stack_map_entries()?
                .unwrap_or_else(crate::collect::defaults::stack_map_entries),
            counts_map_entries: raw
                .counts_map_entries()?
                .unwrap_or_else(crate::collect::defaults::counts_map_entries),
            unwind_rows: unwind_rows(raw.unwind_table_budget_mib)?,
            unwind_processes: raw.unwind_processes()?,
            python: raw.python(),
            java: raw.java(),
            python_code_entries: raw.python_code_entries()?,
            java_processes: raw.java_processes()?,
            node: raw.node(),
            node_processes: raw.node_processes()?,
            python_processes: raw.python_processes()?,
            symbolizer: symbolizer_of(&raw)?,
            history: history_of(&raw)?,
            no_sample: raw.no_sample(),
        })
    }
}

/// A path flag that may be empty (clap's own parser refuses "").
fn path_or_empty(s: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(s))
}

/// The history on disk: `history_dir`, else the unit's state directory;
/// "" turns it off. `no_sample` needs a directory and reads it only.
pub fn history_of(raw: &RawConfig) -> anyhow::Result<Option<crate::store::disk::DiskOptions>> {
    let dir = match raw.history_dir() {
        Some(d) if d.as_os_str().is_empty() => None,
        Some(d) => Some(d),
        // systemd gives the StateDirectory= path(s), colon separated.
        None => std::env::var_os("STATE_DIRECTORY")
            .and_then(|v| {
                v.to_str()
                    .and_then(|s| s.split(':').next())
                    .map(PathBuf::from)
            })
            .filter(|p| !p.as_os_str().is_empty()),
    };
    let no_sample = raw.no_sample();
    let Some(dir) = dir else {
        if no_sample {
            bail!(
                "no_sample serves a history directory: give one with history_dir = or --history-dir"
            );
        }
        return Ok(None);
    };
    if !dir.is_absolute() {
        bail!("history_dir = {}: use an absolute path", dir.display());
    }
    let write_every = raw.history_write_seconds()?;
    // Refused here too, so that a bad file names the setting before the
    // daemon starts.
    if !crate::store::disk::write_interval_fits(write_every) {
        bail!(crate::store::disk::DiskError::WriteInterval(write_every));
    }
    Ok(Some(crate::store::disk::DiskOptions {
        dir,
        budget_bytes: raw.history_disk_mib()? << 20,
        max_age: raw.history_days()? * 86400,
        read_only: no_sample,
        query_bytes: crate::store::disk::defaults::QUERY_BYTES,
        write_every,
    }))
}

/// `listen`, refused off loopback unless `allow_remote` says so.
pub fn listen_of(raw: &RawConfig) -> anyhow::Result<SocketAddr> {
    let listen_s = raw.listen();
    let listen: SocketAddr = listen_s
        .parse()
        .with_context(|| format!("listen = {listen_s:?} is not an address like 127.0.0.1:7099"))?;
    if !listen.ip().is_loopback() && !raw.allow_remote() {
        bail!(
            "listen = {listen} would serve profiles that name every process on this host to the network; \
             set allow_remote = true (or pass --allow-remote) to do that on purpose"
        );
    }
    Ok(listen)
}

/// The events' options, each key checked.
fn events_of(raw: &RawConfig) -> anyhow::Result<crate::collect::events::EventOptions> {
    use crate::collect::events::{EventOptions, defaults as ev};
    let min_us = raw.offcpu_min_us();
    let max_ms = raw.offcpu_max_ms()?;
    if min_us.saturating_mul(1000) > max_ms.saturating_mul(1_000_000) {
        bail!("offcpu_min_us = {min_us} is more than offcpu_max_ms = {max_ms}: need min <= max");
    }
    let events = EventOptions {
        offcpu: raw.offcpu(),
        wakeup: raw.wakeup(),
        offwake: raw.offwake(),
        pagefault: raw.pagefault(),
        min_block_ns: min_us * 1000,
        max_block_ns: max_ms * 1_000_000,
        state_mask: parse_states(&raw.offcpu_states())?,
        sample_one_in: raw.offcpu_sample_one_in()?,
        pagefault_period: raw.pagefault_period()?,
        sample_below_ns: raw.offcpu_sample_below_us()? * 1000,
        pid: None,
        brk: raw.brk(),
        mmap: raw.mmap(),
        munmap: raw.munmap(),
        blockio: raw.blockio(),
        malloc: crate::collect::events::MallocTargets {
            pids: raw
                .malloc_pids()
                .into_iter()
                .map(crate::shared::Pid)
                .collect(),
            comms: raw.malloc_comms(),
        },
        malloc_sample_bytes: raw.malloc_sample_kib()? << 10,
        // The events' maps are at least as large as theirs by default.
        counts_entries: raw.counts_map_entries()?.unwrap_or_else(|| {
            ev::COUNTS_MAP_ENTRIES.max(crate::collect::defaults::counts_map_entries())
        }),
        stack_entries: raw.stack_map_entries()?.unwrap_or_else(|| {
            ev::STACK_MAP_ENTRIES.max(crate::collect::defaults::stack_map_entries())
        }),
        malloc_live_entries: raw.malloc_live_entries()?,
        blocked_threads: raw.offcpu_bounded_threads()?,
    };
    if let Some(c) = events
        .malloc
        .comms
        .iter()
        .find(|c| c.is_empty() || c.len() > 15)
    {
        bail!(
            "malloc_comms: {c:?} cannot be a process name: names are 1 to 15 bytes (/proc/PID/comm)"
        );
    }
    Ok(events)
}

/// The first line of a secret file (`key` names the setting).
fn secret_of(key: &str, path: &Path) -> anyhow::Result<Secret> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{key} = {}: cannot read it", path.display()))?;
    let secret = text.lines().next().unwrap_or("").trim().to_owned();
    if secret.is_empty() {
        bail!("{key} = {}: the first line is empty", path.display());
    }
    Ok(Secret::new(secret))
}

/// A destination's credentials and headers from its `PREFIX_*` keys.
fn credentials_of(
    prefix: &str,
    bearer_file: &Option<PathBuf>,
    user: &Option<String>,
    password_file: &Option<PathBuf>,
    headers: Vec<Secret>,
    listener_user: &Option<String>,
) -> anyhow::Result<crate::export::Credentials> {
    let bearer = bearer_file
        .as_deref()
        .map(|p| secret_of(&format!("{prefix}_bearer_token_file"), p))
        .transpose()?;
    let basic = match (user, password_file) {
        (None, None) => None,
        (Some(u), Some(p)) => Some((
            u.clone(),
            secret_of(&format!("{prefix}_basic_auth_password_file"), p)?,
        )),
        _ => bail!(
            "{prefix}_basic_auth_user and {prefix}_basic_auth_password_file go together: set both or neither"
        ),
    };
    if bearer.is_some() && basic.is_some() {
        bail!("{prefix}: set a bearer token file or basic auth, not both");
    }
    let key = format!("{prefix}_listener_user");
    let listener = crate::shared::peer::Trusted::parse(
        &key,
        listener_user.as_deref().or(defaults::LISTENER_USER),
    )
    .map_err(anyhow::Error::msg)?;
    Ok(crate::export::Credentials {
        bearer,
        basic,
        headers,
        listener,
    })
}

/// The push settings: `None` without a destination.
pub fn push_of(raw: &RawConfig) -> anyhow::Result<Option<crate::export::PushOptions>> {
    use crate::export::{Destination, Protocol};
    let mut destinations = Vec::new();
    if let Some(url) = &raw.pyroscope_url {
        let creds = credentials_of(
            "pyroscope",
            &raw.pyroscope_bearer_token_file,
            &raw.pyroscope_basic_auth_user,
            &raw.pyroscope_basic_auth_password_file,
            raw.pyroscope_headers(),
            &raw.pyroscope_listener_user,
        )?;
        destinations
            .push(Destination::new(Protocol::Pyroscope, url, &creds).map_err(anyhow::Error::msg)?);
    }
    if let Some(url) = &raw.otlp_endpoint {
        let creds = credentials_of(
            "otlp",
            &raw.otlp_bearer_token_file,
            &raw.otlp_basic_auth_user,
            &raw.otlp_basic_auth_password_file,
            raw.otlp_headers(),
            &raw.otlp_listener_user,
        )?;
        destinations
            .push(Destination::new(Protocol::Otlp, url, &creds).map_err(anyhow::Error::msg)?);
    }
    // Checked with or without a destination, as every range is.
    let interval = raw.push_interval_seconds()?;
    let queue_intervals = raw.push_queue_intervals()? as usize;
    let timeout = raw.push_timeout_seconds()?;
    let max_label_sets = raw.push_max_label_sets()? as usize;
    if destinations.is_empty() {
        return Ok(None);
    }
    Ok(Some(crate::export::PushOptions {
        destinations,
        interval: Duration::from_secs(interval),
        queue_intervals,
        timeout: Duration::from_secs(timeout),
        max_label_sets,
    }))
}

/// The first line of `auth_token_file`, at least 16 characters.
pub fn auth_token_of(raw: &RawConfig) -> anyhow::Result<Option<Secret>> {
    Ok(match &raw.auth_token_file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("auth_token_file = {}: cannot read it", path.display()))?;
            let token = text.lines().next().unwrap_or("").trim().to_owned();
            if token.len() < 16 {
                bail!(
                    "auth_token_file = {}: the token must be at least 16 characters",
                    path.display()
                );
            }
            Some(Secret::new(token))
        }
    })
}

/// The symbolizer's budgets.
fn symbolizer_of(raw: &RawConfig) -> anyhow::Result<crate::symbolize::SymbolizerOptions> {
    let mib = |m: u64| (m << 20) as usize;
    Ok(crate::symbolize::SymbolizerOptions {
        perf_map_max_file_bytes: raw.perf_map_max_mib()? << 20,
        perf_map_budget_bytes: mib(raw.perf_map_budget_mib()?),
        symbol_cache_bytes: mib(raw.symbol_cache_mib()?),
        snapshot_budget_bytes: mib(raw.process_snapshot_mib()?),
        // 0 is allowed: symbol tables only, for every file.
        dwarf_budget_bytes: mib(raw.dwarf_budget_mib()?),
        ..Default::default()
    })
}

fn read_file(path: &Path) -> anyhow::Result<RawConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {} is invalid", path.display()))
}

/// Where the config file is, for messages.
pub fn shown_path(path: Option<&PathBuf>) -> String {
    path.map_or_else(
        || defaults::CONFIG_PATH.to_owned(),
        |p| p.display().to_string(),
    )
}

/// 4-byte words of the unwind-table array for a budget in MiB (`None`: the
/// host's default): `unwind_table_budget_mib` as the daemon reads it, for
/// `emberd record` too.
pub fn unwind_rows(budget_mib: Option<u64>) -> anyhow::Result<u32> {
    let raw = RawConfig {
        unwind_table_budget_mib: budget_mib,
        ..RawConfig::default()
    };
    Ok(((raw.unwind_table_budget_mib()? << 20) / 4) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        let e =
            toml::from_str::<RawConfig>("listen = \"127.0.0.1:1\"\nfrequency = 99\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `frequency`"), "{e}");
    }

    #[test]
    fn remote_listen_needs_a_flag() {
        let raw = RawConfig {
            listen: Some("0.0.0.0:7099".into()),
            ..Default::default()
        };
        let e = Config::from_raw(raw.clone()).unwrap_err();
        assert!(e.to_string().contains("allow_remote"), "{e}");
        let ok = Config::from_raw(RawConfig {
            allow_remote: Some(true),
            ..raw
        })
        .unwrap();
        assert_eq!(ok.listen.port(), 7099);
    }

    #[test]
    fn a_config_prints_no_secret() {
        let dir = std::env::temp_dir().join(format!("emberd-config-debug-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, value: &str| {
            let p = dir.join(name);
            std::fs::write(&p, format!("{value}\n")).unwrap();
            p
        };
        let raw = RawConfig {
            auth_token_file: Some(file("token", "auth-token-0123456789abcdef")),
            pyroscope_url: Some("http://127.0.0.1:4040".into()),
            pyroscope_basic_auth_user: Some("123456".into()),
            pyroscope_basic_auth_password_file: Some(file("pw", "pyro-password-42")),
            pyroscope_headers: Some(vec![Secret::new("X-Api-Key: header-key-77")]),
            otlp_endpoint: Some("http://127.0.0.1:4318".into()),
            otlp_bearer_token_file: Some(file("otlp", "otlp-bearer-99")),
            ..Default::default()
        };
        let c = Config::from_raw(raw.clone()).unwrap();
        let shown = format!("{c:?} {c:#?} {raw:?}");
        std::fs::remove_dir_all(&dir).unwrap();
        for secret in [
            "auth-token-0123456789abcdef",
            "pyro-password-42",
            "header-key-77",
            "otlp-bearer-99",
            // base64 of 123456:pyro-password-42
            "MTIzNDU2OnB5cm8tcGFzc3dvcmQtNDI",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("Secret(..)"), "{shown}");
    }

    #[test]
    fn flags_override_file() {
        let file: RawConfig =
            toml::from_str("frequency_hz = 49\nretention_seconds = 600\n").unwrap();
        let flags = RawConfig {
            frequency_hz: Some(199),
            ..Default::default()
        };
        let c = Config::from_raw(file.overridden_by(flags)).unwrap();
        assert_eq!((c.frequency_hz, c.retention.as_secs()), (199, 600));
        assert_eq!(c.memory_budget, 12 << 20);
        assert!(c.listen.ip().is_loopback());
    }

    /// The daemon's command line: the settings flattened, as `emberd` has them.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        settings: RawConfig,
    }

    fn flags(args: &[&str]) -> RawConfig {
        use clap::Parser;
        Flags::try_parse_from(std::iter::once("emberd").chain(args.iter().copied()))
            .unwrap()
            .settings
    }

    #[test]
    fn a_flag_and_a_file_key_are_the_same_setting() {
        let given = flags(&[
            "--allow-remote",
            "--allowed-host",
            "a.example",
            "--allowed-host",
            "b.example",
            "-F",
            "49",
            "--python",
            "false",
            "--otlp-header",
            "X-Key: k",
        ]);
        let file: RawConfig = toml::from_str(
            "allow_remote = true\nallowed_hosts = [\"a.example\", \"b.example\"]\n\
             frequency_hz = 49\npython = false\notlp_headers = [\"X-Key: k\"]\n",
        )
        .unwrap();
        assert_eq!(format!("{given:?}"), format!("{file:?}"));
        assert_eq!(given.allowed_hosts(), ["a.example", "b.example"]);
        assert_eq!(given.otlp_headers()[0].expose(), "X-Key: k");
        // Not given is not the default: the file's value stays.
        let none = flags(&[]);
        assert!(
            none.allow_remote.is_none() && none.python.is_none(),
            "{none:?}"
        );
        assert!(file.clone().overridden_by(none).python == Some(false));
    }

    #[test]
    fn history_writes_divide_a_minute() {
        let with = |line: &str| {
            let raw: RawConfig =
                toml::from_str(&format!("history_dir = \"/var/tmp/emberd-h\"\n{line}")).unwrap();
            Config::from_raw(raw)
        };
        let e = with("history_write_seconds = 7").unwrap_err().to_string();
        assert!(
            e.contains("history_write_seconds = 7: use a divisor of 60"),
            "{e}"
        );
        let e = with("history_write_seconds = 4").unwrap_err().to_string();
        assert_eq!(e, "history_write_seconds = 4 is out of range: use 5..=60");
        let c = with("history_write_seconds = 10").unwrap();
        assert_eq!(c.history.unwrap().write_every, 10);
        let c = with("").unwrap();
        assert_eq!(c.history.unwrap().write_every, 30);
    }

    #[test]
    fn out_of_range_is_an_error_naming_key_value_and_range() {
        for (toml_line, error) in [
            (
                "retention_seconds = 30",
                "retention_seconds = 30 is out of range: use 60..=604800",
            ),
            (
                "symbol_cache_mib = 0",
                "symbol_cache_mib = 0 is out of range: use 1..=65536",
            ),
            (
                "perf_map_max_mib = 5000",
                "perf_map_max_mib = 5000 is out of range: use 1..=4096",
            ),
            (
                "dwarf_budget_mib = 70000",
                "dwarf_budget_mib = 70000 is out of range: use 0..=65536",
            ),
            (
                "stack_map_entries = 63",
                "stack_map_entries = 63 is out of range: use 64 or more",
            ),
            (
                "pagefault_period = 0",
                "pagefault_period = 0 is out of range: use 1 or more",
            ),
        ] {
            let raw: RawConfig = toml::from_str(toml_line).unwrap();
            let e = Config::from_raw(raw).unwrap_err().to_string();
            assert_eq!(e, error);
        }
        let e = Config::from_raw(flags(&["--unwind-table-budget-mib", "0"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unwind_table_budget_mib = 0 is out of range: use 1..=2048"
        );
        assert!(unwind_rows(Some(4096)).is_err());
        assert_eq!(unwind_rows(Some(2048)).unwrap(), 1 << 29);
        // The bounds themselves are in range.
        let raw: RawConfig =
            toml::from_str("dwarf_budget_mib = 0\nperf_map_max_mib = 4096\n").unwrap();
        let c = Config::from_raw(raw).unwrap();
        assert_eq!(c.symbolizer.dwarf_budget_bytes, 0);
        assert_eq!(c.symbolizer.perf_map_max_file_bytes, 4096 << 20);
    }

    #[test]
    fn defaults_are_the_stages_own() {
        use crate::symbolize::defaults as sym;
        let c = Config::from_raw(RawConfig::default()).unwrap();
        assert_eq!(c.memory_budget, crate::store::defaults::MEMORY_BUDGET);
        assert_eq!(c.retention, crate::store::defaults::RETENTION);
        assert_eq!(c.symbolizer.symbol_cache_bytes, sym::SYMBOL_CACHE_BYTES);
        assert_eq!(c.symbolizer.dwarf_budget_bytes, sym::DWARF_BUDGET_BYTES);
        assert_eq!(
            c.events.state_mask,
            crate::collect::events::defaults::STATE_MASK
        );
        assert_eq!(
            c.events.malloc_sample_bytes,
            crate::collect::events::defaults::MALLOC_SAMPLE_BYTES
        );
        assert_eq!(
            c.unwind_rows as u64,
            crate::unwind::defaults::table_budget_bytes() / 4
        );
        assert_eq!(states_name(0), "all");
        assert_eq!(parse_states(&states_name(0x2)).unwrap(), 0x2);
    }

    #[test]
    fn help_prints_each_default_once_from_its_constant() {
        use clap::CommandFactory;
        let cmd = Flags::command();
        let help = |id: &str| {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id).unwrap();
            arg.get_help().unwrap().to_string()
        };
        assert_eq!(
            help("memory_budget_mib"),
            format!(
                "Memory budget of the sample stores, all together, MiB [default: {}]",
                crate::store::defaults::MEMORY_BUDGET >> 20
            )
        );
        assert_eq!(
            help("offcpu_states"),
            "Task states counted off CPU: S, D, SD or all [default: SD]"
        );
        assert!(!help("allowed_hosts").contains("[default"));
        for arg in cmd.get_arguments() {
            let h = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(h.matches("[default").count() <= 1, "{h}");
        }
    }

    /// README's configuration table has a row for every key.
    #[test]
    fn the_readme_lists_every_key() {
        let readme = include_str!("../../README.md");
        let table = &readme[readme.find("## Configuration").unwrap()..];
        let table = &table[..table.find("\n## ").unwrap()];
        for key in RawConfig::KEYS {
            assert!(
                table
                    .lines()
                    .any(|l| l.starts_with('|') && l.contains(&format!("`{key}`"))),
                "{key} is not in README.md's configuration table"
            );
        }
    }
}
