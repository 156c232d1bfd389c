//! The daemon: always sampling into the store, always serving HTTP.
//!
//! Start-up order: bind the listen address (so a taken port fails before any
//! BPF is loaded), load and attach the sampler, then tell systemd READY=1.
//! On SIGTERM/SIGINT: STOPPING=1, stop sampling (the sampler is dropped, which
//! detaches and unloads the BPF programs), let in-flight requests finish,
//! exit 0.

pub mod config;
pub mod footprint;
pub mod pipeline;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use std::path::Path;

use crate::collect::SamplerOptions;
use crate::collect::events::{EventKind, EventOptions};
use crate::daemon::config::Config;
use crate::daemon::pipeline::{DRAIN_INTERVAL, Pipeline};
use crate::serve::metrics::Metrics;
use crate::serve::{self, AppState};
use crate::store::history::Inserted;
use crate::store::{History, HistoryOptions, LivePids};

/// Sends a state line to systemd's notification socket, if `NOTIFY_SOCKET`
/// names one (the sd_notify protocol: one datagram, `KEY=VALUE` lines).
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let result = (|| -> std::io::Result<()> {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::ffi::OsStrExt;
        let sock = std::os::unix::net::UnixDatagram::unbound()?;
        let bytes = path.as_bytes();
        let addr = match bytes.first() {
            // A leading '@' names a socket in the abstract namespace.
            Some(b'@') => std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])?,
            _ => std::os::unix::net::SocketAddr::from_pathname(std::path::Path::new(&path))?,
        };
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    if let Err(e) = result {
        tracing::warn!("sd_notify({state:?}) to {path:?} failed: {e}");
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(config: Config) -> anyhow::Result<()> {
    if !config.no_sample {
        crate::collect::privileges::require_sampling_privileges()?;
    }
    // glibc gives each thread that allocates its own arena; with a thread pool
    // that renders SVGs, a table builder and an ELF worker that multiplies
    // resident memory for nothing (each arena keeps its own peak; one arena
    // lets a trim return what any thread freed). The threads allocate
    // little at a time, so sharing one arena's lock costs nothing measurable.
    // SAFETY: mallopt only changes allocator tuning; called before threads start.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        // Fixed thresholds (glibc raises both after each large free, up to
        // 32 MiB, so a parsed debug file's section buffers and rendering
        // buffers would stay resident): blocks over 256 KiB are mapped and
        // unmapped on their own, and free memory past 256 KiB at a heap's
        // top goes back at once. Measured at start-up, idle: RSS 44.6 ->
        // 37.8 MiB.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 10);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(run_async(config));
    // A collector stuck past the shutdown grace would hold the runtime's
    // drop (it waits for blocking tasks): don't wait for it.
    rt.shutdown_timeout(Duration::from_millis(200));
    result
}

/// Where HTTP is served: TCP, or a Unix socket whose file permissions say
/// who may read profiles.
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

async fn bind(config: &Config) -> anyhow::Result<Listener> {
    let Some(path) = &config.unix_socket else {
        let l = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| {
                format!(
                    "cannot listen on {} (set listen = or --listen)",
                    config.listen
                )
            })?;
        return Ok(Listener::Tcp(l));
    };
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    // A socket left by an earlier run is replaced; anything else is not ours.
    if let Ok(md) = std::fs::symlink_metadata(path) {
        anyhow::ensure!(
            md.file_type().is_socket(),
            "unix_socket = {}: a file that is not a socket is in the way",
            path.display()
        );
        std::fs::remove_file(path)
            .with_context(|| format!("removing the old socket {}", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on unix_socket = {}", path.display()))?;
    // Owner and group only: add readers to emberd's group.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok(Listener::Unix(l))
}

/// What the collector thread and the HTTP side share.
#[derive(Clone)]
struct Shared {
    history: Arc<History>,
    metrics: Arc<Metrics>,
    liveness: Arc<serve::Liveness>,
    cache: Arc<std::sync::Mutex<serve::ResponseCache>>,
    /// Set at SIGTERM/SIGINT: the collector stops at its next step.
    stop: Arc<AtomicBool>,
}

impl Shared {
    fn new(config: &Config) -> anyhow::Result<Self> {
        let disk = match &config.history {
            None => None,
            Some(o) => {
                let archive = crate::store::disk::Archive::open(o.clone())?;
                let (bytes, files) = archive.size();
                tracing::info!(
                    "history on disk: {} ({files} files, {} MiB of {} MiB; {} days kept){}",
                    o.dir.display(),
                    bytes >> 20,
                    o.budget_bytes >> 20,
                    o.max_age / 86400,
                    if o.read_only { ", read only" } else { "" }
                );
                Some((Arc::new(archive), crate::shared::clock::started()))
            }
        };
        let history = History::new(&HistoryOptions {
            disk,
            retention: config.retention,
            memory_budget: config.memory_budget,
            events: EventKind::ALL
                .into_iter()
                .filter(|k| config.events.records(*k))
                .collect(),
            heap_entries: config
                .events
                .malloc
                .any()
                .then_some(config.events.malloc_live_entries as usize),
        });
        Ok(Self {
            history: Arc::new(history),
            metrics: Arc::new(Metrics::new(config.memory_budget)),
            liveness: Arc::new(serve::Liveness::default()),
            cache: Default::default(),
            stop: Arc::new(AtomicBool::new(false)),
        })
    }
}

async fn run_async(config: Config) -> anyhow::Result<()> {
    let listener = bind(&config).await?;
    let shared = Shared::new(&config)?;
    let collector = if config.no_sample {
        tracing::info!("not sampling (no_sample): serving the history on disk only");
        shared.liveness.offline.store(true, Ordering::SeqCst);
        None
    } else {
        Some(start_collector(&config, shared.clone())?)
    };
    shared.liveness.drained();
    shared.liveness.attached.store(true, Ordering::SeqCst);
    sd_notify("READY=1\nSTATUS=sampling");
    release_load_only_pages();
    let mut state = app_state(&config, &shared);
    if let Some(push) = &config.push {
        let pusher = crate::export::Pusher::start(
            push.clone(),
            crate::export::Source {
                history: shared.history.clone(),
                frequency_hz: config.frequency_hz,
                malloc_sample_bytes: config.events.malloc_sample_bytes,
                host: state.host.clone(),
                retention_secs: config.retention.as_secs(),
                max_label_sets: push.max_label_sets,
                folded_label_sets: Default::default(),
            },
        );
        for lane in &pusher.lanes {
            tracing::info!(
                "pushing every {} s to {} ({})",
                push.interval.as_secs(),
                lane.destination.url,
                lane.destination.protocol.name()
            );
        }
        state.pusher = Some(pusher);
    }
    serve_until_stopped(listener, state, &shared).await?;
    // Shutdown takes at most SHUTDOWN_GRACE for requests in flight, and as
    // long again for the collector, whatever either is doing.
    shared.stop.store(true, Ordering::SeqCst);
    let Some(collector) = collector else {
        return Ok(());
    };
    match tokio::time::timeout(
        SHUTDOWN_GRACE,
        tokio::task::spawn_blocking(move || collector.join()),
    )
    .await
    {
        Ok(joined) => {
            // The seconds not yet on disk are written before exiting, so a
            // restart (an upgrade) loses none of them.
            let history = shared.history.clone();
            let _ = tokio::time::timeout(
                SHUTDOWN_GRACE,
                tokio::task::spawn_blocking(move || history.finish(crate::shared::clock::now())),
            )
            .await;
            joined.ok().and_then(Result::ok).transpose()?;
        }
        Err(_) => {
            tracing::warn!("the collector did not stop within {SHUTDOWN_GRACE:?}; exiting anyway")
        }
    }
    Ok(())
}

/// What the CPU sampler is asked for.
fn sampler_options(config: &Config) -> SamplerOptions {
    SamplerOptions {
        frequency_hz: config.frequency_hz,
        stack_map_entries: config.stack_map_entries,
        counts_map_entries: config.counts_map_entries,
        unwind_rows: config.unwind_rows,
        unwind_processes: config.unwind_processes,
        python_code_entries: config.python_code_entries,
        java_processes: config.java_processes,
        node_processes: config.node_processes,
        python_processes: config.python_processes,
        // Idle samples are kept in the store and left out at query time
        // unless `idle=1` asks for them.
        include_idle: true,
        ..Default::default()
    }
}

type CollectorThread = std::thread::JoinHandle<anyhow::Result<()>>;

/// Starts the collector thread and waits until it samples (or failed to
/// load), then says so in the log.
fn start_collector(config: &Config, shared: Shared) -> anyhow::Result<CollectorThread> {
    let setup = Setup {
        sampler: sampler_options(config),
        events: config.events.clone(),
        runtimes: crate::runtime::RuntimeOptions {
            python: config.python,
            java: config.java,
            node: config.node,
        },
        symbolizer: config.symbolizer.clone(),
    };
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let collector = std::thread::Builder::new()
        .name("emberd-collect".into())
        .spawn(move || {
            let stop = shared.stop.clone();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                collect_loop(setup, shared, started_tx)
            }));
            // A collector that dies leaves a daemon that answers but
            // samples nothing: end the process, and let systemd
            // (Restart=on-failure) start a fresh one.
            match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) if stop.load(Ordering::SeqCst) => Err(e),
                Ok(Err(e)) => {
                    tracing::error!("the collector failed: {e:#}; exiting");
                    std::process::exit(1);
                }
                Err(_) => {
                    tracing::error!("the collector panicked; exiting");
                    std::process::exit(70);
                }
            }
        })
        .context("starting the collector thread")?;
    match started_rx.recv() {
        Ok(Ok(cpus)) => announce(config, &cpus),
        Ok(Err(e)) => {
            let _ = collector.join();
            return Err(e);
        }
        Err(_) => anyhow::bail!("the collector thread ended before starting"),
    }
    Ok(collector)
}

/// The log line that says the daemon runs: where, and who may read.
fn announce(config: &Config, cpus: &[u32]) {
    tracing::info!(
        "sampling cpu-clock at {} Hz on CPUs {cpus:?}; serving {}; {}",
        config.frequency_hz,
        match &config.unix_socket {
            Some(p) => format!("on the Unix socket {}", p.display()),
            None => format!("http://{}", config.listen),
        },
        match (&config.unix_socket, &config.auth_token) {
            (Some(_), _) => "profiles for emberd's user and group (socket mode 0660)",
            (None, Some(_)) =>
                "profiles need the token (auth_token_file) or a login (emberd login)",
            (None, None) => "no auth_token_file: every local user can read profiles",
        }
    );
}

/// Loaded and attached: the binary's load-only pages can go.
fn release_load_only_pages() {
    match crate::daemon::footprint::release_load_only_pages() {
        Ok(r) => tracing::debug!(
            "released the binary's load-only pages: {} KiB, {} KiB of them resident",
            r.bytes >> 10,
            r.resident_before >> 10
        ),
        Err(e) => tracing::warn!(
            "releasing the binary's load-only pages failed: {e}; they stay resident \
             (about 1 MiB of RSS), nothing else changes"
        ),
    }
}

/// What every HTTP handler reads.
fn app_state(config: &Config, shared: &Shared) -> AppState {
    AppState {
        cache: shared.cache.clone(),
        renders: Arc::new(tokio::sync::Semaphore::new(serve::MAX_CONCURRENT_RENDERS)),
        posts: Arc::new(tokio::sync::Semaphore::new(serve::MAX_CONCURRENT_RENDERS)),
        history: shared.history.clone(),
        malloc_sample_bytes: config.events.malloc_sample_bytes,
        metrics: shared.metrics.clone(),
        liveness: shared.liveness.clone(),
        in_flight: Arc::new(tokio::sync::Semaphore::new(serve::MAX_IN_FLIGHT)),
        logins_in_flight: Arc::new(tokio::sync::Semaphore::new(serve::MAX_LOGINS_IN_FLIGHT)),
        access: Arc::new(serve::Access {
            allowed_hosts: config.allowed_hosts.clone(),
            token: config.auth_token.clone(),
            logins: Default::default(),
        }),
        frequency_hz: config.frequency_hz,
        // Windows reach as far back as the history on disk.
        retention_secs: config
            .history
            .as_ref()
            .map_or(0, |h| h.max_age)
            .max(config.retention.as_secs()),
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into()),
        pusher: None,
    }
}

/// Serves HTTP until SIGTERM/SIGINT, then at most SHUTDOWN_GRACE longer
/// for the requests in flight.
async fn serve_until_stopped(
    listener: Listener,
    state: AppState,
    shared: &Shared,
) -> anyhow::Result<()> {
    let signaled = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let (liveness, stop, signaled) = (
            shared.liveness.clone(),
            shared.stop.clone(),
            signaled.clone(),
        );
        async move {
            wait_for_signal().await;
            tracing::info!("stopping: finishing in-flight requests");
            sd_notify("STOPPING=1");
            liveness.attached.store(false, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            signaled.notify_one();
        }
    };
    let router = serve::router(state);
    let server = match listener {
        Listener::Tcp(l) => tokio::spawn(serve::conn::serve(l, router, shutdown)),
        Listener::Unix(l) => tokio::spawn(serve::conn::serve(l, router, shutdown)),
    };
    tokio::select! {
        r = server => r.context("the HTTP server task")?,
        _ = async { signaled.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("requests still in flight after {SHUTDOWN_GRACE:?}: closing them");
        }
    }
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}

/// How long shutdown waits for requests in flight, then for the collector.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Test hooks, read once from the environment: the collector hangs
/// (`EMBERD_TEST_COLLECTOR=hang`) or panics (`=panic`) after
/// `EMBERD_TEST_COLLECTOR_AFTER` drains (default 3). They exist so the
/// tests can show that readiness and restarts follow a broken collector.
fn test_fault() -> Option<(String, u64)> {
    let what = std::env::var("EMBERD_TEST_COLLECTOR").ok()?;
    let after = std::env::var("EMBERD_TEST_COLLECTOR_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    Some((what, after))
}

/// Drains between listings of `/proc` (see [`Collector::step`]).
const LIVE_PIDS_EVERY: u64 = 2;

/// What the collector starts with.
struct Setup {
    sampler: SamplerOptions,
    events: EventOptions,
    runtimes: crate::runtime::RuntimeOptions,
    symbolizer: crate::symbolize::SymbolizerOptions,
}

/// The collector thread: drain, name, store, once a second, until `stop`.
fn collect_loop(
    setup: Setup,
    shared: Shared,
    started: std::sync::mpsc::Sender<anyhow::Result<Vec<u32>>>,
) -> anyhow::Result<()> {
    let counts_entries = setup.sampler.counts_map_entries;
    let pipeline = match Pipeline::start_with(
        setup.sampler,
        setup.events,
        setup.runtimes,
        setup.symbolizer,
    ) {
        Ok(mut p) => {
            p.set_heartbeat(shared.liveness.waiting.clone());
            let _ = started.send(Ok(p.sampler().cpus().to_vec()));
            p
        }
        Err(e) => {
            let _ = started.send(Err(e.into()));
            return Ok(());
        }
    };
    let mut c = Collector {
        pipeline,
        shared,
        fault: test_fault(),
        drains: 0,
        next: Instant::now() + DRAIN_INTERVAL,
        missing_total: 0,
        kept_total: 0,
        counts_entries,
    };
    while !c.shared.stop.load(Ordering::SeqCst) {
        c.step();
    }
    // Dropping the pipeline detaches and unloads the BPF programs.
    drop(c);
    tracing::info!("sampler detached");
    Ok(())
}

/// The collector's state between drains.
struct Collector {
    pipeline: Pipeline,
    shared: Shared,
    fault: Option<(String, u64)>,
    drains: u64,
    /// When the next drain is due.
    next: Instant,
    missing_total: u64,
    kept_total: u64,
    counts_entries: u32,
}

impl Collector {
    /// One drain: which processes run, the drain itself, storing it, and
    /// the metrics of it.
    fn step(&mut self) {
        // Which processes run, read before the drain reads the kernel's
        // maps: a process missing from it has every sample in this drain.
        // The stores fold exited processes by it (at merges, and on sealed
        // slots when over budget; only slots that ended before the listing
        // are judged), and the symbolizer forgets their mappings. One read
        // of /proc's directory every 2 s (a few hundred entries), not a
        // stat per pid.
        let listed = Instant::now();
        let live = self
            .drains
            .is_multiple_of(LIVE_PIDS_EVERY)
            .then(|| live_pids(crate::shared::clock::now()))
            .flatten()
            .map(Arc::new);
        let events_failures = self.pipeline.events_drain_failures();
        let batch = match self.pipeline.step(self.next, &self.shared.stop) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("drain failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                return;
            }
        };
        self.schedule(batch.early);
        self.drains += 1;
        self.test_fault();
        // A failed events drain left its aggregates in the kernel for the
        // next one: the exited processes among them still need their
        // mappings and names then.
        if let Some(live) = &live
            && self.pipeline.events_drain_failures() == events_failures
        {
            self.pipeline.forget_exited(live, listed);
        }
        self.store(batch, live.as_ref());
    }

    /// The next drain's time: a second after this one's, unless it was an
    /// early drain (the events' buffer was half full).
    fn schedule(&mut self, early: bool) {
        if !early {
            self.next += DRAIN_INTERVAL;
        }
        let now = Instant::now();
        if self.next < now {
            // Fell behind (a slow symbolization): skip ahead, don't burst.
            self.next = now + DRAIN_INTERVAL;
        }
    }

    /// `EMBERD_TEST_COLLECTOR`: panics or hangs (see [`test_fault`]).
    fn test_fault(&self) {
        if let Some((what, after)) = &self.fault
            && self.drains > *after
        {
            match what.as_str() {
                "panic" => panic!("EMBERD_TEST_COLLECTOR=panic"),
                _ => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
            }
        }
    }

    /// Stores a drain in the history and reports on it.
    fn store(&mut self, batch: crate::daemon::pipeline::Batch, live: Option<&Arc<LivePids>>) {
        self.missing_total += batch.missing_stacks;
        self.kept_total += batch.samples.iter().map(|s| s.count).sum::<u64>();
        let now_unix = crate::shared::clock::now();
        let h = &self.shared.history;
        let (inserted, used) = h.insert(now_unix, live, batch.samples, batch.events);
        self.pipeline.recycle(used);
        if self.drains.is_multiple_of(60) && tracing::enabled!(tracing::Level::DEBUG) {
            h.log_stats();
        }
        let alive = |pid: crate::shared::Pid| Path::new(&format!("/proc/{pid}")).exists();
        if let Some(stats) = h.apply_heap(now_unix, batch.heap, alive) {
            self.shared.metrics.store.observe_heap(&stats);
        }
        let metrics = &self.shared.metrics;
        metrics.store.observe(
            &inserted.totals,
            inserted.dropped_before,
            inserted.folded_before,
        );
        if let Some(t) = batch.started {
            metrics.observe_drain_time(t.elapsed());
        }
        // This drain makes every kept answer stale: free them now rather
        // than at the next request.
        let cached_bytes = self
            .shared
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.trim_memory();
        self.observe(&inserted, cached_bytes, batch.keys);
        self.shared.liveness.drained();
    }

    /// Hands freed memory back to the system instead of keeping the peak
    /// resident: after a rendering freed big buffers, or once a minute
    /// (for the store's own collections). A trim walks the whole heap,
    /// which was a few percent of the collector's time every drain.
    fn trim_memory(&self) {
        #[cfg(target_env = "gnu")]
        if crate::serve::take_rendered() || self.drains.is_multiple_of(60) {
            // SAFETY: malloc_trim only releases free heap memory.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }

    /// The pipeline's counters and memory, into the metrics.
    fn observe(&self, inserted: &Inserted, cached_bytes: usize, keys: usize) {
        let (p, metrics) = (&self.pipeline, &self.shared.metrics);
        let event_counters = p.event_counters().and_then(Result::ok);
        if let Some(counters) = &event_counters {
            metrics.collect.observe_events(counters);
        }
        if let Ok(counters) = p.counters() {
            metrics.collect.observe_faults(
                counters.get(crate::collect::Counter::NewProcessDropped),
                event_counters.map_or(0, |c| c.new_process_dropped),
                p.events_drain_failures(),
            );
        }
        let caches = p.cache_bytes();
        metrics.observe_memory(&[
            ("store", inserted.totals.bytes),
            ("store_ticks", inserted.totals.tick_bytes),
            ("perf_maps", caches.perf_maps),
            ("symbol_caches", caches.symbols),
            ("process_snapshots", caches.snapshots),
            ("dwarf", caches.dwarf),
            ("elf_symbols", caches.elf_symbols),
            ("kernel_symbols", caches.kernel_symbols),
            ("python_codes", caches.runtime("python")),
            ("java_methods", caches.runtime("hotspot")),
            ("javascript_functions", caches.runtime("v8")),
            ("unwind_rows", p.unwind_stats().bytes as usize),
            ("response_cache", cached_bytes),
        ]);
        if let Ok((cpu, events)) = p.unwind_counters() {
            metrics
                .unwind
                .observe(&cpu, events.as_ref(), &p.unwind_stats());
            metrics.python.observe(
                &cpu,
                events.as_ref(),
                &p.runtime_names("python"),
                &p.runtime_processes("python"),
            );
            metrics.java.observe(
                &cpu,
                events.as_ref(),
                &p.runtime_names("hotspot"),
                &p.runtime_processes("hotspot"),
            );
            metrics.node.observe(
                &cpu,
                events.as_ref(),
                &p.runtime_names("v8"),
                &p.runtime_processes("v8"),
            );
        }
        if let Ok(counters) = p.counters() {
            metrics.collect.observe_drain(
                &counters,
                self.missing_total,
                self.kept_total,
                keys as f64 / f64::from(self.counts_entries),
            );
            metrics.symbolize.observe(&p.misses());
        }
    }
}

/// The pids of the processes running now: the numeric entries of `/proc`
/// (`None` if it cannot be read: then nothing is taken for exited).
fn live_pids(now_unix: u64) -> Option<crate::store::LivePids> {
    let dir = std::fs::read_dir("/proc")
        .map_err(|e| tracing::debug!("cannot list /proc: {e}"))
        .ok()?;
    // A process that starts during the listing has no samples of a slot
    // ending a second before it.
    Some(crate::store::LivePids::new(
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()),
        now_unix.saturating_sub(1),
    ))
}
