//! Daemon configuration: TOML file and flags (`RawConfig`), checked into a
//! [`Config`]. Every key of the file is also a flag; flags win.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::shared::Secret;

/// Defaults of the daemon's settings.
pub mod defaults {
    /// Default config file; a missing default file means "all defaults".
    pub const CONFIG_PATH: &str = "/etc/emberd/emberd.toml";
    /// Loopback only: profiles name every process on the host.
    pub const LISTEN: &str = "127.0.0.1:7099";
    /// History kept, seconds.
    pub const RETENTION_SECONDS: u64 = 3600;
    /// Store budget, MiB.
    pub const MEMORY_BUDGET_MIB: u64 = 12;
    /// Who besides root may own a local socket that receives pushes
    /// (`pyroscope_listener_user`, `otlp_listener_user`): nobody else.
    pub const LISTENER_USER: Option<&str> = None;
    /// The user the installed unit runs the daemon as (`User=` in
    /// `systemd/emberd.service`): `emberd login` trusts a daemon port held
    /// by root or this user.
    pub const DAEMON_USER: &str = "emberd";
}

/// Settings as written in the file or on the command line, unchecked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `listen = "127.0.0.1:7099"`.
    pub listen: Option<String>,
    /// `allow_remote = false`: required to listen on a non-loopback address.
    pub allow_remote: Option<bool>,
    /// `unix_socket = "/run/emberd/emberd.sock"`: serve HTTP on this Unix
    /// socket (mode 0660: emberd's user and group) instead of TCP.
    pub unix_socket: Option<std::path::PathBuf>,
    /// `allowed_hosts = ["profiler.example"]`: host names (besides IP
    /// literals and `localhost`) the `Host` header may carry; others get 421,
    /// so a DNS-rebinding page in a browser on this host reads nothing.
    pub allowed_hosts: Option<Vec<String>>,
    /// `auth_token_file = "/etc/emberd/token"`: when set, every route but
    /// `/healthz` needs `Authorization: Bearer <the file's first line>`.
    pub auth_token_file: Option<std::path::PathBuf>,
    /// `frequency_hz = 99`.
    pub frequency_hz: Option<u64>,
    /// `retention_seconds = 3600`.
    pub retention_seconds: Option<u64>,
    /// `memory_budget_mib = 12`: the store's byte budget.
    pub memory_budget_mib: Option<u64>,
    /// `stack_map_entries = 16384`: entries of each BPF stack map (default:
    /// 16384, or 256 per CPU on hosts with more than 64).
    pub stack_map_entries: Option<u32>,
    /// `counts_map_entries = 10240`: entries of each BPF counts map
    /// (default: 10240, or 256 per CPU on hosts with more than 40).
    pub counts_map_entries: Option<u32>,
    /// `perf_map_max_mib = 64`: larger perf maps are not read.
    pub perf_map_max_mib: Option<u64>,
    /// `perf_map_budget_mib = 16`: bytes of parsed perf maps kept, all
    /// processes together.
    pub perf_map_budget_mib: Option<u64>,
    /// `symbol_cache_mib = 4`: bytes of named addresses cached (kernel and
    /// files together; a full cache forgets what was not used lately).
    pub symbol_cache_mib: Option<u64>,
    /// `process_snapshot_mib = 2`: bytes of process mappings remembered
    /// (so samples of exited processes are named); oldest dropped first.
    pub process_snapshot_mib: Option<u64>,
    /// `dwarf_budget_mib = 8`: parsed DWARF held at once, all files
    /// together; a file whose DWARF alone is larger is named from its
    /// symbol table (no inlined frames or source lines).
    pub dwarf_budget_mib: Option<u64>,
    /// `unwind_table_budget_mib = 32`: bytes of unwind rows the BPF
    /// unwinder holds (kernel memory, allocated at start; the default is
    /// less on hosts with under 2 GiB of memory).
    pub unwind_table_budget_mib: Option<u64>,
    /// `unwind_processes = 8192`: processes whose mappings the BPF
    /// unwinder holds (about 5 KiB of kernel memory each); when full, a
    /// user holding the most gives up a place to a user holding fewer.
    pub unwind_processes: Option<u32>,
    /// `python = true`: show CPython 3.11-3.13 frames in place of the
    /// interpreter's eval loop (false: interpreters' stacks stay native).
    pub python: Option<bool>,
    /// `python_code_entries = 4096`: code objects whose names the Python
    /// walker keeps in BPF (about 560 bytes of kernel memory each,
    /// allocated at start).
    pub python_code_entries: Option<u32>,
    /// `offcpu = true`: record off-CPU time.
    pub offcpu: Option<bool>,
    /// `wakeup = true`: record wakeup time.
    pub wakeup: Option<bool>,
    /// `offwake = true`: record off-wake chains.
    pub offwake: Option<bool>,
    /// `pagefault = true`: record page faults.
    pub pagefault: Option<bool>,
    /// `offcpu_min_us = 1`: shorter off-CPU periods are not charged.
    pub offcpu_min_us: Option<u64>,
    /// `offcpu_max_ms = 10000`: longer off-CPU periods are not charged.
    pub offcpu_max_ms: Option<u64>,
    /// `offcpu_states = "SD"`: task states that count (S sleeping, D disk
    /// sleep, R preempted), or "all".
    pub offcpu_states: Option<String>,
    /// `offcpu_sample_one_in = 1`: record 1 in N switch-outs (values scaled).
    pub offcpu_sample_one_in: Option<u32>,
    /// `pagefault_period = 16`: faults per page-fault sample.
    pub pagefault_period: Option<u64>,
    /// `offcpu_sample_below_us = 1000`: shorter off-CPU periods (and the
    /// wakeups ending them) are recorded with probability length/this and
    /// charged this; 0 records all.
    pub offcpu_sample_below_us: Option<u64>,
    /// `brk = false`: record heap growth by brk() (slows every syscall a little).
    pub brk: Option<bool>,
    /// `mmap = false`: record mmap() bytes.
    pub mmap: Option<bool>,
    /// `munmap = false`: record munmap() bytes.
    pub munmap: Option<bool>,
    /// `blockio = true`: record block I/O latency.
    pub blockio: Option<bool>,
    /// `malloc_pids = [1234]`: trace malloc in these processes (uprobes).
    pub malloc_pids: Option<Vec<u32>>,
    /// `malloc_comms = ["mysqld"]`: trace malloc in processes of these
    /// names, now and as they start.
    pub malloc_comms: Option<Vec<String>>,
    /// `malloc_sample_kib = 512`: mean KiB between malloc samples; 0
    /// records every allocation.
    pub malloc_sample_kib: Option<u64>,
    /// `malloc_live_entries = 65536`: sampled allocations tracked until freed.
    pub malloc_live_entries: Option<u32>,
    /// `pyroscope_url = "http://pyroscope:4040"`: push each interval's profiles to Grafana Pyroscope (its base URL).
    pub pyroscope_url: Option<String>,
    /// `pyroscope_bearer_token_file`: a file whose first line is the bearer token of Pyroscope pushes.
    pub pyroscope_bearer_token_file: Option<PathBuf>,
    /// `pyroscope_basic_auth_user`: basic-auth user of Pyroscope pushes (Grafana Cloud: the stack's user id).
    pub pyroscope_basic_auth_user: Option<String>,
    /// `pyroscope_basic_auth_password_file`: a file whose first line is the basic-auth password.
    pub pyroscope_basic_auth_password_file: Option<PathBuf>,
    /// `pyroscope_headers = ["X-Scope-OrgID: team-a"]`: extra headers of Pyroscope pushes.
    pub pyroscope_headers: Option<Vec<Secret>>,
    /// `pyroscope_listener_user = "alloy"`: a user (name or uid) besides
    /// root whose socket on this host may receive Pyroscope pushes.
    pub pyroscope_listener_user: Option<String>,
    /// `otlp_endpoint = "http://collector:4318"`: push OTLP profiles (its base URL, as OpenTelemetry exporters take it).
    pub otlp_endpoint: Option<String>,
    /// `otlp_bearer_token_file`: a file whose first line is the bearer token of OTLP pushes.
    pub otlp_bearer_token_file: Option<PathBuf>,
    /// `otlp_basic_auth_user`: basic-auth user of OTLP pushes.
    pub otlp_basic_auth_user: Option<String>,
    /// `otlp_basic_auth_password_file`: a file whose first line is the basic-auth password.
    pub otlp_basic_auth_password_file: Option<PathBuf>,
    /// `otlp_headers = ["X-Scope-OrgID: team-a"]`: extra headers of OTLP pushes.
    pub otlp_headers: Option<Vec<Secret>>,
    /// `otlp_listener_user = "otelcol"`: a user (name or uid) besides root
    /// whose socket on this host may receive OTLP pushes.
    pub otlp_listener_user: Option<String>,
    /// `push_interval_seconds = 15`: seconds between pushes, each carrying that interval.
    pub push_interval_seconds: Option<u64>,
    /// `push_queue_intervals = 20`: unsent intervals kept per destination (then the oldest is dropped).
    pub push_queue_intervals: Option<u32>,
    /// `push_timeout_seconds = 10`: deadline of one push.
    pub push_timeout_seconds: Option<u64>,
    /// `push_max_label_sets = 100`: distinct service/unit/container label sets per pushed event and interval (the lightest beyond are pushed as `[other services]`).
    pub push_max_label_sets: Option<u32>,
}

impl RawConfig {
    /// `other`'s settings where given, else `self`'s.
    fn overridden_by(self, other: RawConfig) -> RawConfig {
        RawConfig {
            listen: other.listen.or(self.listen),
            allow_remote: other.allow_remote.or(self.allow_remote),
            allowed_hosts: other.allowed_hosts.or(self.allowed_hosts),
            unix_socket: other.unix_socket.or(self.unix_socket),
            auth_token_file: other.auth_token_file.or(self.auth_token_file),
            frequency_hz: other.frequency_hz.or(self.frequency_hz),
            retention_seconds: other.retention_seconds.or(self.retention_seconds),
            memory_budget_mib: other.memory_budget_mib.or(self.memory_budget_mib),
            stack_map_entries: other.stack_map_entries.or(self.stack_map_entries),
            counts_map_entries: other.counts_map_entries.or(self.counts_map_entries),
            perf_map_max_mib: other.perf_map_max_mib.or(self.perf_map_max_mib),
            perf_map_budget_mib: other.perf_map_budget_mib.or(self.perf_map_budget_mib),
            symbol_cache_mib: other.symbol_cache_mib.or(self.symbol_cache_mib),
            process_snapshot_mib: other.process_snapshot_mib.or(self.process_snapshot_mib),
            dwarf_budget_mib: other.dwarf_budget_mib.or(self.dwarf_budget_mib),
            unwind_table_budget_mib: other
                .unwind_table_budget_mib
                .or(self.unwind_table_budget_mib),
            unwind_processes: other.unwind_processes.or(self.unwind_processes),
            python: other.python.or(self.python),
            python_code_entries: other.python_code_entries.or(self.python_code_entries),
            offcpu: other.offcpu.or(self.offcpu),
            wakeup: other.wakeup.or(self.wakeup),
            offwake: other.offwake.or(self.offwake),
            pagefault: other.pagefault.or(self.pagefault),
            offcpu_min_us: other.offcpu_min_us.or(self.offcpu_min_us),
            offcpu_max_ms: other.offcpu_max_ms.or(self.offcpu_max_ms),
            offcpu_states: other.offcpu_states.or(self.offcpu_states),
            offcpu_sample_one_in: other.offcpu_sample_one_in.or(self.offcpu_sample_one_in),
            pagefault_period: other.pagefault_period.or(self.pagefault_period),
            offcpu_sample_below_us: other.offcpu_sample_below_us.or(self.offcpu_sample_below_us),
            brk: other.brk.or(self.brk),
            mmap: other.mmap.or(self.mmap),
            munmap: other.munmap.or(self.munmap),
            blockio: other.blockio.or(self.blockio),
            malloc_pids: other.malloc_pids.or(self.malloc_pids),
            malloc_comms: other.malloc_comms.or(self.malloc_comms),
            malloc_sample_kib: other.malloc_sample_kib.or(self.malloc_sample_kib),
            malloc_live_entries: other.malloc_live_entries.or(self.malloc_live_entries),
            pyroscope_url: other.pyroscope_url.or(self.pyroscope_url),
            pyroscope_bearer_token_file: other
                .pyroscope_bearer_token_file
                .or(self.pyroscope_bearer_token_file),
            pyroscope_basic_auth_user: other
                .pyroscope_basic_auth_user
                .or(self.pyroscope_basic_auth_user),
            pyroscope_basic_auth_password_file: other
                .pyroscope_basic_auth_password_file
                .or(self.pyroscope_basic_auth_password_file),
            pyroscope_headers: other.pyroscope_headers.or(self.pyroscope_headers),
            pyroscope_listener_user: other
                .pyroscope_listener_user
                .or(self.pyroscope_listener_user),
            otlp_endpoint: other.otlp_endpoint.or(self.otlp_endpoint),
            otlp_bearer_token_file: other.otlp_bearer_token_file.or(self.otlp_bearer_token_file),
            otlp_basic_auth_user: other.otlp_basic_auth_user.or(self.otlp_basic_auth_user),
            otlp_basic_auth_password_file: other
                .otlp_basic_auth_password_file
                .or(self.otlp_basic_auth_password_file),
            otlp_headers: other.otlp_headers.or(self.otlp_headers),
            otlp_listener_user: other.otlp_listener_user.or(self.otlp_listener_user),
            push_interval_seconds: other.push_interval_seconds.or(self.push_interval_seconds),
            push_queue_intervals: other.push_queue_intervals.or(self.push_queue_intervals),
            push_timeout_seconds: other.push_timeout_seconds.or(self.push_timeout_seconds),
            push_max_label_sets: other.push_max_label_sets.or(self.push_max_label_sets),
        }
    }
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
    /// Entries of the BPF map of Python code objects.
    pub python_code_entries: u32,
    /// Symbolizer bounds (perf maps).
    pub symbolizer: crate::symbolize::SymbolizerOptions,
    /// Off-CPU, wakeup, off-wake and page-fault recording.
    pub events: crate::collect::events::EventOptions,
    /// Pushes to Pyroscope and OTLP, if any destination is configured.
    pub push: Option<crate::export::PushOptions>,
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

    /// Checks raw settings.
    pub fn from_raw(raw: RawConfig) -> anyhow::Result<Config> {
        let listen = listen_of(&raw)?;
        let retention = raw.retention_seconds.unwrap_or(defaults::RETENTION_SECONDS);
        if !(60..=7 * 86400).contains(&retention) {
            bail!("retention_seconds = {retention} is out of range: use 60..=604800");
        }
        let budget = raw.memory_budget_mib.unwrap_or(defaults::MEMORY_BUDGET_MIB);
        if !(4..=65536).contains(&budget) {
            bail!("memory_budget_mib = {budget} is out of range: use 4..=65536");
        }
        let events = events_of(&raw)?;
        let auth_token = auth_token_of(&raw)?;
        let push = push_of(&raw)?;
        Ok(Config {
            push,
            events,
            listen,
            allowed_hosts: raw
                .allowed_hosts
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            auth_token,
            unix_socket: raw.unix_socket.clone(),
            frequency_hz: raw
                .frequency_hz
                .unwrap_or(crate::collect::defaults::FREQUENCY_HZ),
            retention: Duration::from_secs(retention),
            memory_budget: (budget as usize) << 20,
            stack_map_entries: raw
                .stack_map_entries
                .unwrap_or_else(crate::collect::defaults::stack_map_entries),
            counts_map_entries: raw
                .counts_map_entries
                .unwrap_or_else(crate::collect::defaults::counts_map_entries),
            unwind_rows: unwind_rows(raw.unwind_table_budget_mib)?,
            unwind_processes: match raw.unwind_processes {
                None => crate::unwind::defaults::MAX_PROCESSES,
                Some(n @ 16..=1_048_576) => n,
                Some(n) => bail!("unwind_processes = {n} is out of range: use 16 ..= 1048576"),
            },
            python: raw.python.unwrap_or(true),
            python_code_entries: match raw.python_code_entries {
                None => crate::unwind::defaults::PYTHON_CODE_ENTRIES,
                Some(n @ 64..=1_048_576) => n,
                Some(n) => anyhow::bail!("python_code_entries = {n}: use 64 to 1048576"),
            },
            symbolizer: symbolizer_of(&raw),
        })
    }
}

/// `listen`, refused off loopback unless `allow_remote` says so.
pub fn listen_of(raw: &RawConfig) -> anyhow::Result<SocketAddr> {
    let listen_s = raw.listen.as_deref().unwrap_or(defaults::LISTEN);
    let listen: SocketAddr = listen_s
        .parse()
        .with_context(|| format!("listen = {listen_s:?} is not an address like 127.0.0.1:7099"))?;
    if !listen.ip().is_loopback() && !raw.allow_remote.unwrap_or(false) {
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
    let min_us = raw.offcpu_min_us.unwrap_or(ev::MIN_BLOCK_NS / 1000);
    let max_ms = raw.offcpu_max_ms.unwrap_or(ev::MAX_BLOCK_NS / 1_000_000);
    if min_us.saturating_mul(1000) > max_ms.saturating_mul(1_000_000)
        || max_ms == 0
        || max_ms > 3_600_000
    {
        bail!(
            "offcpu_min_us = {min_us} / offcpu_max_ms = {max_ms}: need min <= max and 1 <= max_ms <= 3600000"
        );
    }
    let sample_one_in = raw.offcpu_sample_one_in.unwrap_or(1);
    let pagefault_period = raw.pagefault_period.unwrap_or(ev::PAGEFAULT_PERIOD);
    if sample_one_in == 0 || pagefault_period == 0 {
        bail!("offcpu_sample_one_in and pagefault_period must be at least 1");
    }
    let below_us = raw
        .offcpu_sample_below_us
        .unwrap_or(ev::SAMPLE_BELOW_NS / 1000);
    if below_us > 1_000_000 {
        bail!(
            "offcpu_sample_below_us = {below_us} is out of range: use 0 (record every wakeup) ..= 1000000"
        );
    }
    let events = EventOptions {
        offcpu: raw.offcpu.unwrap_or(true),
        wakeup: raw.wakeup.unwrap_or(true),
        offwake: raw.offwake.unwrap_or(true),
        pagefault: raw.pagefault.unwrap_or(true),
        min_block_ns: min_us * 1000,
        max_block_ns: max_ms * 1_000_000,
        state_mask: match &raw.offcpu_states {
            Some(s) => parse_states(s)?,
            None => ev::STATE_MASK,
        },
        sample_one_in,
        pagefault_period,
        sample_below_ns: below_us * 1000,
        pid: None,
        brk: raw.brk.unwrap_or(ev::SYSCALL_EVENTS),
        mmap: raw.mmap.unwrap_or(ev::SYSCALL_EVENTS),
        munmap: raw.munmap.unwrap_or(ev::SYSCALL_EVENTS),
        blockio: raw.blockio.unwrap_or(true),
        malloc: crate::collect::events::MallocTargets {
            pids: raw
                .malloc_pids
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(crate::shared::Pid)
                .collect(),
            comms: raw.malloc_comms.clone().unwrap_or_default(),
        },
        malloc_sample_bytes: match raw.malloc_sample_kib {
            None => ev::MALLOC_SAMPLE_BYTES,
            Some(k) if k <= 1 << 20 => k << 10,
            Some(k) => bail!(
                "malloc_sample_kib = {k} is out of range: use 0 (every allocation) ..= 1048576"
            ),
        },
        counts_entries: raw.counts_map_entries.unwrap_or_else(|| {
            ev::COUNTS_MAP_ENTRIES.max(crate::collect::defaults::counts_map_entries())
        }),
        stack_entries: raw.stack_map_entries.unwrap_or_else(|| {
            ev::STACK_MAP_ENTRIES.max(crate::collect::defaults::stack_map_entries())
        }),
        malloc_live_entries: match raw.malloc_live_entries {
            None => ev::MALLOC_LIVE_ENTRIES,
            Some(n) if (1..=1 << 22).contains(&n) => n,
            Some(n) => bail!("malloc_live_entries = {n} is out of range: use 1 ..= 4194304"),
        },
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
    headers: &Option<Vec<Secret>>,
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
        headers: headers.clone().unwrap_or_default(),
        listener,
    })
}

/// The push settings: `None` without a destination.
pub fn push_of(raw: &RawConfig) -> anyhow::Result<Option<crate::export::PushOptions>> {
    use crate::export::{Destination, Protocol, defaults as push};
    let mut destinations = Vec::new();
    if let Some(url) = &raw.pyroscope_url {
        let creds = credentials_of(
            "pyroscope",
            &raw.pyroscope_bearer_token_file,
            &raw.pyroscope_basic_auth_user,
            &raw.pyroscope_basic_auth_password_file,
            &raw.pyroscope_headers,
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
            &raw.otlp_headers,
            &raw.otlp_listener_user,
        )?;
        destinations
            .push(Destination::new(Protocol::Otlp, url, &creds).map_err(anyhow::Error::msg)?);
    }
    let interval = raw.push_interval_seconds.unwrap_or(push::INTERVAL_SECONDS);
    if !(1..=3600).contains(&interval) {
        bail!("push_interval_seconds = {interval} is out of range: use 1..=3600");
    }
    let queue = raw
        .push_queue_intervals
        .map_or(push::QUEUE_INTERVALS, |n| n as usize);
    if !(1..=1000).contains(&queue) {
        bail!("push_queue_intervals = {queue} is out of range: use 1..=1000");
    }
    let timeout = raw.push_timeout_seconds.unwrap_or(push::TIMEOUT_SECONDS);
    if !(1..=300).contains(&timeout) {
        bail!("push_timeout_seconds = {timeout} is out of range: use 1..=300");
    }
    let max_label_sets = raw
        .push_max_label_sets
        .map_or(push::MAX_LABEL_SETS, |n| n as usize);
    if !(1..=100_000).contains(&max_label_sets) {
        bail!("push_max_label_sets = {max_label_sets} is out of range: use 1..=100000");
    }
    if destinations.is_empty() {
        return Ok(None);
    }
    Ok(Some(crate::export::PushOptions {
        destinations,
        interval: Duration::from_secs(interval),
        queue_intervals: queue,
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
fn symbolizer_of(raw: &RawConfig) -> crate::symbolize::SymbolizerOptions {
    let mut o = crate::symbolize::SymbolizerOptions::default();
    if let Some(m) = raw.perf_map_max_mib {
        o.perf_map_max_file_bytes = m.clamp(1, 4096) << 20;
    }
    if let Some(m) = raw.perf_map_budget_mib {
        o.perf_map_budget_bytes = (m.clamp(1, 65536) << 20) as usize;
    }
    if let Some(m) = raw.symbol_cache_mib {
        o.symbol_cache_bytes = (m.clamp(1, 65536) << 20) as usize;
    }
    if let Some(m) = raw.process_snapshot_mib {
        o.snapshot_budget_bytes = (m.clamp(1, 65536) << 20) as usize;
    }
    if let Some(m) = raw.dwarf_budget_mib {
        // 0 is allowed: symbol tables only, for every file.
        o.dwarf_budget_bytes = (m.min(65536) << 20) as usize;
    }
    o
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

/// 4-byte words of the unwind-table array for a budget in MiB.
pub fn unwind_rows(budget_mib: Option<u64>) -> anyhow::Result<u32> {
    let bytes = budget_mib.map_or_else(crate::unwind::defaults::table_budget_bytes, |m| m << 20);
    let rows = bytes / 4;
    if !(1..=(1 << 29)).contains(&rows) {
        anyhow::bail!(
            "unwind_table_budget_mib = {}: use 1 to 2048 MiB",
            bytes >> 20
        );
    }
    Ok(rows as u32)
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
}
