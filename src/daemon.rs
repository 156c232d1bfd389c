//! The daemon: always sampling into the store, always serving HTTP.
//!
//! Start-up order: bind the listen address (so a taken port fails before any
//! BPF is loaded), load and attach the sampler, then tell systemd READY=1.
//! On SIGTERM/SIGINT: STOPPING=1, stop sampling (the sampler is dropped, which
//! detaches and unloads the BPF programs), let in-flight requests finish,
//! exit 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;

use std::collections::HashMap;

use crate::collect::SamplerOptions;
use crate::collect::events::{EventKind, EventOptions};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::pipeline::{DRAIN_INTERVAL, Pipeline};
use crate::serve::{self, AppState};
use crate::store::heap::LiveHeap;
use crate::store::{Store, StoreOptions, StoreStats};

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
    crate::check::require_sampling_privileges()?;
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

async fn run_async(config: Config) -> anyhow::Result<()> {
    let listener = bind(&config).await?;
    // One budget for all stores: split evenly between CPU and the events on.
    let kinds_on: Vec<EventKind> = EventKind::ALL
        .into_iter()
        .filter(|k| config.events.records(*k))
        .collect();
    let events_on = kinds_on.len();
    // CPU samples get half the budget, the events share the other half:
    // CPU is the profile most asked for, and an event such as page faults
    // on a host of JIT processes can fill any budget with distinct stacks.
    let cpu_budget = if events_on == 0 {
        config.memory_budget
    } else {
        config.memory_budget / 2
    };
    let store_options = StoreOptions {
        retention: config.retention,
        memory_budget: cpu_budget,
        ..Default::default()
    };
    let event_options = StoreOptions {
        memory_budget: (config.memory_budget - cpu_budget) / events_on.max(1),
        ..store_options.clone()
    };
    let store = Arc::new(RwLock::new(Store::new(store_options)));
    let metrics = Arc::new(Metrics::new(config.memory_budget));
    let liveness = Arc::new(serve::Liveness::default());
    let cache: Arc<std::sync::Mutex<serve::ResponseCache>> = Default::default();
    let stop = Arc::new(AtomicBool::new(false));

    let sampler = SamplerOptions {
        frequency_hz: config.frequency_hz,
        stack_map_entries: config.stack_map_entries,
        counts_map_entries: config.counts_map_entries,
        unwind_rows: config.unwind_rows,
        unwind_processes: config.unwind_processes,
        python: config.python,
        python_code_entries: config.python_code_entries,
        // Idle samples are kept in the store and left out at query time
        // unless `idle=1` asks for them.
        include_idle: true,
        ..Default::default()
    };
    let events_opts = config.events.clone();
    let symbolizer = config.symbolizer.clone();
    let event_stores: Arc<HashMap<EventKind, Arc<RwLock<Store>>>> = Arc::new(
        kinds_on
            .iter()
            .map(|k| (*k, Arc::new(RwLock::new(Store::new(event_options.clone())))))
            .collect(),
    );
    let heap = events_opts.malloc.any().then(|| {
        Arc::new(RwLock::new(LiveHeap::new(
            events_opts.malloc_live_entries as usize,
            config.retention,
        )))
    });
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let collector = {
        let (store, metrics, stop) = (store.clone(), metrics.clone(), stop.clone());
        let (event_stores, liveness) = (event_stores.clone(), liveness.clone());
        let (heap, cache) = (heap.clone(), cache.clone());
        std::thread::Builder::new()
            .name("emberd-collect".into())
            .spawn(move || {
                let stop2 = stop.clone();
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    collect_loop(
                        Setup {
                            sampler,
                            events: events_opts,
                            symbolizer,
                        },
                        store,
                        event_stores,
                        heap,
                        metrics,
                        stop,
                        liveness,
                        cache,
                        started_tx,
                    )
                }));
                // A collector that dies leaves a daemon that answers but
                // samples nothing: end the process, and let systemd
                // (Restart=on-failure) start a fresh one.
                match result {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) if stop2.load(Ordering::SeqCst) => Err(e),
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
            .context("starting the collector thread")?
    };
    match started_rx.recv() {
        Ok(Ok(cpus)) => tracing::info!(
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
        ),
        Ok(Err(e)) => {
            let _ = collector.join();
            return Err(e);
        }
        Err(_) => anyhow::bail!("the collector thread ended before starting"),
    }
    liveness.drained();
    liveness.attached.store(true, Ordering::SeqCst);
    sd_notify("READY=1\nSTATUS=sampling");
    // Loaded and attached: the binary's load-only pages can go.
    match crate::footprint::release_load_only_pages() {
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

    let state = AppState {
        cache,
        renders: Arc::new(tokio::sync::Semaphore::new(serve::MAX_CONCURRENT_RENDERS)),
        posts: Arc::new(tokio::sync::Semaphore::new(serve::MAX_CONCURRENT_RENDERS)),
        events: event_stores,
        heap,
        malloc_sample_bytes: config.events.malloc_sample_bytes,
        store,
        metrics,
        liveness: liveness.clone(),
        in_flight: Arc::new(tokio::sync::Semaphore::new(serve::MAX_IN_FLIGHT)),
        access: Arc::new(serve::Access {
            allowed_hosts: config.allowed_hosts.clone(),
            token: config.auth_token.clone(),
            logins: Default::default(),
        }),
        frequency_hz: config.frequency_hz,
        retention_secs: config.retention.as_secs(),
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into()),
    };
    let signaled = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let (liveness, stop, signaled) = (liveness.clone(), stop.clone(), signaled.clone());
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
    // Shutdown takes at most SHUTDOWN_GRACE for requests in flight, and as
    // long again for the collector, whatever either is doing.
    tokio::select! {
        r = server => r.context("the HTTP server task")?,
        _ = async { signaled.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("requests still in flight after {SHUTDOWN_GRACE:?}: closing them");
        }
    }
    stop.store(true, Ordering::SeqCst);
    match tokio::time::timeout(
        SHUTDOWN_GRACE,
        tokio::task::spawn_blocking(move || collector.join()),
    )
    .await
    {
        Ok(joined) => {
            joined.ok().and_then(Result::ok).transpose()?;
        }
        Err(_) => {
            tracing::warn!("the collector did not stop within {SHUTDOWN_GRACE:?}; exiting anyway")
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

/// Drains between listings of `/proc` (see `collect_loop`).
const LIVE_PIDS_EVERY: u64 = 2;

/// What the collector starts with.
struct Setup {
    sampler: SamplerOptions,
    events: EventOptions,
    symbolizer: crate::symbolize::SymbolizerOptions,
}

/// The collector thread: drain, name, store, once a second, until `stop`.
#[allow(clippy::too_many_arguments)]
fn collect_loop(
    setup: Setup,
    store: Arc<RwLock<Store>>,
    event_stores: Arc<HashMap<EventKind, Arc<RwLock<Store>>>>,
    heap: Option<Arc<RwLock<LiveHeap>>>,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    liveness: Arc<serve::Liveness>,
    cache: Arc<std::sync::Mutex<serve::ResponseCache>>,
    started: std::sync::mpsc::Sender<anyhow::Result<Vec<u32>>>,
) -> anyhow::Result<()> {
    let fault = test_fault();
    let mut drains = 0u64;
    let options = setup.sampler.clone();
    let mut pipeline = match Pipeline::start_with(setup.sampler, setup.events, setup.symbolizer) {
        Ok(p) => {
            let _ = started.send(Ok(p.sampler().cpus().to_vec()));
            p
        }
        Err(e) => {
            let _ = started.send(Err(e.into()));
            return Ok(());
        }
    };
    let mut missing_total = 0u64;
    let mut kept_total = 0u64;
    let mut next = Instant::now() + DRAIN_INTERVAL;
    while !stop.load(Ordering::SeqCst) {
        // Which processes run, read before the drain reads the kernel's
        // maps: a process missing from it has every sample in this drain.
        // The stores fold exited processes by it (at merges, and on sealed
        // slots when over budget; only slots that ended before the listing
        // are judged), and the symbolizer forgets their mappings. One read
        // of /proc's directory every 2 s (a few hundred entries), not a
        // stat per pid.
        let listed = Instant::now();
        let live = drains
            .is_multiple_of(LIVE_PIDS_EVERY)
            .then(|| live_pids(crate::clock::now()))
            .flatten()
            .map(Arc::new);
        let events_failures = pipeline.events_drain_failures();
        let batch = match pipeline.step(next, &stop) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("drain failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if !batch.early {
            next += DRAIN_INTERVAL;
        }
        let now = Instant::now();
        if next < now {
            // Fell behind (a slow symbolization): skip ahead, don't burst.
            next = now + DRAIN_INTERVAL;
        }
        drains += 1;
        if let Some((what, after)) = &fault
            && drains > *after
        {
            match what.as_str() {
                "panic" => panic!("EMBERD_TEST_COLLECTOR=panic"),
                _ => loop {
                    std::thread::sleep(Duration::from_secs(3600));
                },
            }
        }
        missing_total += batch.missing_stacks;
        kept_total += batch.samples.iter().map(|s| s.count).sum::<u64>();
        let now_unix = crate::clock::now();
        let mut totals = StoreStats::default();
        let mut dropped_before = 0;
        // A failed events drain left its aggregates in the kernel for the
        // next one: the exited processes among them still need their
        // mappings and names then.
        if let Some(live) = &live
            && pipeline.events_drain_failures() == events_failures
        {
            pipeline.forget_exited(live, listed);
        }
        let mut add = |st: &mut Store, samples: &[crate::symbolize::SymbolizedSample]| {
            if let Some(live) = &live {
                st.set_live_pids(live.clone());
            }
            dropped_before += st.stats().dropped_for_budget;
            st.insert(now_unix, samples);
            let s = st.stats();
            totals.bytes += s.bytes;
            totals.tick_bytes += s.tick_bytes;
            totals.slots += s.slots;
            totals.stacks += s.stacks;
            totals.dropped_for_budget += s.dropped_for_budget;
        };
        add(
            &mut store.write().unwrap_or_else(|e| e.into_inner()),
            &batch.samples,
        );
        let mut by_kind: HashMap<EventKind, Vec<crate::symbolize::SymbolizedSample>> =
            HashMap::new();
        for (kind, s) in batch.events {
            by_kind.entry(kind).or_default().push(s);
        }
        let mut stored = Vec::new();
        for (kind, st) in event_stores.iter() {
            let samples = by_kind.remove(kind).unwrap_or_default();
            add(&mut st.write().unwrap_or_else(|e| e.into_inner()), &samples);
            stored.push(samples);
        }
        pipeline.recycle(
            batch
                .samples
                .into_iter()
                .chain(stored.into_iter().flatten()),
        );
        if drains.is_multiple_of(60) && tracing::enabled!(tracing::Level::DEBUG) {
            let show = |name: &str, st: &RwLock<Store>| {
                let s = st.read().unwrap_or_else(|e| e.into_inner()).stats();
                tracing::debug!(
                    "store {name}: {} bytes ({} of ticks; frames, nodes, names, threads {:?}), \
                     {} slots, {} stack nodes",
                    s.bytes,
                    s.tick_bytes,
                    s.interner_bytes,
                    s.slots,
                    s.stacks
                );
            };
            show("cpu", &store);
            for (kind, st) in event_stores.iter() {
                show(&format!("{kind:?}"), st);
            }
        }
        if let Some(heap) = &heap {
            let mut heap = heap.write().unwrap_or_else(|e| e.into_inner());
            heap.apply(now_unix, batch.heap);
            heap.forget_processes(now_unix, |pid| {
                std::path::Path::new(&format!("/proc/{pid}")).exists()
            });
            metrics.observe_heap(&heap.stats());
        }
        metrics.observe_store(&totals, dropped_before);
        if let Some(t) = batch.started {
            metrics.observe_drain_time(t.elapsed());
        }
        // This drain makes every kept answer stale: free them now rather
        // than at the next request.
        let cached_bytes = cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // Large renderings free big buffers; hand the memory back to the
        // system instead of keeping the peak resident. Only after one (or
        // once a minute, for the store's own collections): a trim walks
        // the whole heap, which was a few percent of the collector's time
        // when done every drain.
        #[cfg(target_env = "gnu")]
        if crate::serve::take_rendered() || drains.is_multiple_of(60) {
            // SAFETY: malloc_trim only releases free heap memory.
            unsafe {
                libc::malloc_trim(0);
            }
        }
        let event_counters = pipeline.event_counters().and_then(Result::ok);
        if let Some(counters) = &event_counters {
            metrics.observe_events(counters);
        }
        if let Ok(counters) = pipeline.counters() {
            metrics.observe_faults(
                counters.get(crate::collect::Counter::NewProcessDropped),
                event_counters.map_or(0, |c| c.new_process_dropped),
                pipeline.events_drain_failures(),
            );
        }
        let caches = pipeline.cache_bytes();
        metrics.observe_memory(&[
            ("store", totals.bytes),
            ("store_ticks", totals.tick_bytes),
            ("perf_maps", caches.perf_maps),
            ("symbol_caches", caches.symbols),
            ("process_snapshots", caches.snapshots),
            ("dwarf", caches.dwarf),
            ("elf_symbols", caches.elf_symbols),
            ("kernel_symbols", caches.kernel_symbols),
            ("python_codes", caches.python_codes),
            ("unwind_rows", pipeline.unwind_stats().bytes as usize),
            ("response_cache", cached_bytes),
        ]);
        if let Ok((cpu, events)) = pipeline.unwind_counters() {
            metrics.observe_unwind(&cpu, events.as_ref(), &pipeline.unwind_stats());
            metrics.observe_python(
                &cpu,
                events.as_ref(),
                &pipeline.python_names(),
                &pipeline.python_processes(),
            );
        }
        liveness.drained();
        if let Ok(counters) = pipeline.counters() {
            metrics.observe_drain(
                &counters,
                &pipeline.misses(),
                missing_total,
                kept_total,
                batch.keys as f64 / options.counts_map_entries as f64,
            );
        }
    }
    // Dropping the pipeline detaches and unloads the BPF programs.
    drop(pipeline);
    tracing::info!("sampler detached");
    Ok(())
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
