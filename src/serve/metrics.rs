//! emberd's own health as Prometheus metrics (`/metrics`), with the
//! prometheus-client crate.
//!
//! Each stage registers and updates the metrics it counts
//! (`collect::metrics`, `runtime::python::metrics`, `unwind::metrics`,
//! `symbolize::metrics`, `store::metrics`); this module owns the
//! registry, composes the stages' parts, and counts what the server itself
//! does: requests, renders, pushes, the process's own figures.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::collect::metrics::CollectMetrics;
use crate::runtime::hotspot::metrics::JavaMetrics;
use crate::runtime::python::metrics::PythonMetrics;
use crate::runtime::v8::metrics::NodeMetrics;
use crate::shared::metrics::{Common, Label};
use crate::store::metrics::StoreMetrics;
use crate::symbolize::metrics::SymbolizeMetrics;
use crate::unwind::metrics::UnwindMetrics;

/// `route` and `code` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCode {
    /// The route.
    pub route: Label,
    /// HTTP status.
    pub code: u16,
}

/// `destination` label: `pyroscope` or `otlp`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DestinationLabel {
    /// The destination's protocol.
    pub destination: Label,
}

/// `destination` and `result` (or `reason`) labels of pushes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PushLabel {
    /// The destination's protocol.
    pub destination: Label,
    /// `ok`, `failed`; for drops, why.
    pub result: Label,
}

/// `route` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// The route.
    pub route: Label,
}

/// A render counted as running (see [`Metrics::render_started`]).
#[derive(Debug)]
pub struct RenderRunning<'a>(&'a Metrics);

impl Drop for RenderRunning<'_> {
    fn drop(&mut self) {
        self.0.renders.dec();
    }
}

/// The pushers' metrics.
#[derive(Debug, Default)]
struct PushMetrics {
    pushes: Family<PushLabel, Counter>,
    bytes: Family<DestinationLabel, Counter>,
    dropped: Family<PushLabel, Counter>,
    queued: Family<DestinationLabel, Gauge>,
    last_success: Family<DestinationLabel, Gauge>,
    label_sets_folded: Counter,
}

impl PushMetrics {
    /// Registers the push families.
    fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "push",
            "Pushes to Pyroscope or OTLP by destination and result (ok; failed; refused_listener: the port was held by a local user not trusted with the credentials, nothing sent; each retry counts)",
            m.pushes.clone(),
        );
        registry.register(
            "push_bytes",
            "Body bytes of accepted pushes, compressed as sent",
            m.bytes.clone(),
        );
        registry.register(
            "push_dropped_intervals",
            "Intervals never delivered, by destination and reason (queue_full: the oldest went; rejected: a 4xx answer)",
            m.dropped.clone(),
        );
        registry.register(
            "push_queued_intervals",
            "Intervals waiting to be pushed",
            m.queued.clone(),
        );
        registry.register(
            "push_last_success_timestamp_seconds",
            "Unix time of the last accepted push (0: none yet)",
            m.last_success.clone(),
        );
        registry.register(
            "push_label_sets_folded",
            "Service/unit/container label sets pushed as [other services], past push_max_label_sets in an event's interval",
            m.label_sets_folded.clone(),
        );
        m
    }
}

/// Every metric emberd exports: the stages' parts, and the server's own.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    common: Common,
    /// The collector's metrics (CPU sampler, events programs, faults).
    pub collect: CollectMetrics,
    /// The unwinder's metrics (walks, frames, tables).
    pub unwind: UnwindMetrics,
    /// The symbolizer's metrics (misses, perf maps refused).
    pub symbolize: SymbolizeMetrics,
    /// The Python metrics (frames, code objects, names, processes).
    pub python: PythonMetrics,
    /// Java frames, marks, names and JVM processes.
    pub java: JavaMetrics,
    /// JavaScript frames, names and node processes.
    pub node: NodeMetrics,
    /// The store's metrics (size, budget drops, malloc heap records).
    pub store: StoreMetrics,
    requests: Family<RouteCode, Counter>,
    latency: Family<RouteLabel, Histogram>,
    drain: Histogram,
    rss: Gauge,
    renders: Gauge,
    renders_max: Gauge,
    heap_in_use: Gauge,
    cpu_seconds: Gauge<f64, AtomicU64>,
    push: PushMetrics,
    proc_maps_truncated: Counter,
    subuid_lines_skipped: Gauge,
}

impl Metrics {
    /// Registers every metric; `store_budget_bytes` is the store's budget.
    pub fn new(store_budget_bytes: usize) -> Self {
        let mut registry = Registry::with_prefix("emberd");
        let common = Common::register(&mut registry);
        let collect = CollectMetrics::register(&mut registry, &common);
        let unwind = UnwindMetrics::register(&mut registry, &common);
        let symbolize = SymbolizeMetrics::register(&mut registry, &common);
        let python = PythonMetrics::register(&mut registry);
        let java = JavaMetrics::register(&mut registry);
        let node = NodeMetrics::register(&mut registry);
        let store = StoreMetrics::register(&mut registry, &common, store_budget_bytes);
        let requests = Family::<RouteCode, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests per route and status",
            requests.clone(),
        );
        let latency = Family::<RouteLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency per route",
            latency.clone(),
        );
        let drain = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "drain_duration_seconds",
            "Time of one drain: reading and clearing the BPF maps, naming the stacks, adding them to the stores",
            drain.clone(),
        );
        let rss = Gauge::default();
        registry.register(
            "process_resident_memory_bytes",
            "emberd's resident set size",
            rss.clone(),
        );
        let renders = Gauge::default();
        registry.register(
            "renders_running",
            "Renders running on blocking threads now (at most serve::MAX_CONCURRENT_RENDERS)",
            renders.clone(),
        );
        let renders_max = Gauge::default();
        registry.register(
            "renders_running_max",
            "The most renders that ran at once since emberd started",
            renders_max.clone(),
        );
        let heap_in_use = Gauge::default();
        registry.register(
            "process_heap_in_use_bytes",
            "Bytes of emberd's heap in use (malloc's count); RSS minus this is mapped files, stacks and free memory the allocator keeps",
            heap_in_use.clone(),
        );
        let cpu_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "process_cpu_seconds",
            "emberd's user + system CPU time in seconds",
            cpu_seconds.clone(),
        );
        let push = PushMetrics::register(&mut registry);
        let proc_maps_truncated = Counter::default();
        registry.register(
            "proc_maps_truncated",
            "Reads of a process's /proc/PID/maps cut at 16 MiB read or 2 MiB of code mappings (shared::procmaps): that process's later code mappings go unnamed",
            proc_maps_truncated.clone(),
        );
        let subuid_lines_skipped = Gauge::default();
        registry.register(
            "subuid_lines_skipped",
            "Lines of /etc/subuid skipped at its last read (malformed, an unknown owner, an overlap, uid 0, or past 16,384 ranges; shared::accounts): their uids each count as a user of their own in the shares",
            subuid_lines_skipped.clone(),
        );
        Self {
            registry,
            common,
            collect,
            unwind,
            symbolize,
            python,
            java,
            node,
            store,
            requests,
            latency,
            drain,
            rss,
            renders,
            renders_max,
            heap_in_use,
            cpu_seconds,
            push,
            proc_maps_truncated,
            subuid_lines_skipped,
        }
    }

    /// Sets the memory gauges (bytes of each bounded part).
    pub fn observe_memory(&self, parts: &[(&'static str, usize)]) {
        self.common.observe_memory(parts);
    }

    /// Records how long one drain took.
    pub fn observe_drain_time(&self, took: std::time::Duration) {
        self.drain.observe(took.as_secs_f64());
    }

    /// Counts a render in `renders_running` until the guard is dropped.
    pub fn render_started(&self) -> RenderRunning<'_> {
        let now = self.renders.inc() + 1;
        // fetch_max on the gauge's own atomic: concurrent starts cannot
        // lower the high-water mark.
        self.renders_max
            .inner()
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
        RenderRunning(self)
    }

    /// Counts one HTTP request.
    pub fn observe_request(&self, route: &str, code: u16, seconds: f64) {
        self.requests
            .get_or_create(&RouteCode {
                route: route.to_owned().into(),
                code,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabel {
                route: route.to_owned().into(),
            })
            .observe(seconds);
    }

    /// The pushers' counters, copied as they are now.
    pub fn observe_push(&self, pusher: &crate::export::Pusher) {
        use std::sync::atomic::Ordering::Relaxed;
        let m = &self.push;
        m.label_sets_folded
            .inner()
            .store(pusher.folded_label_sets.load(Relaxed), Relaxed);
        for lane in &pusher.lanes {
            let d: Label = lane.destination.protocol.name().into();
            let st = &lane.stats;
            let set = |f: &Family<PushLabel, Counter>, result: &'static str, v: u64| {
                f.get_or_create(&PushLabel {
                    destination: d.clone(),
                    result: result.into(),
                })
                .inner()
                .store(v, Relaxed);
            };
            set(&m.pushes, "ok", st.pushed.load(Relaxed));
            set(&m.pushes, "failed", st.failed.load(Relaxed));
            set(
                &m.pushes,
                "refused_listener",
                st.refused_listener.load(Relaxed),
            );
            set(
                &m.dropped,
                "queue_full",
                st.dropped_queue_full.load(Relaxed),
            );
            set(&m.dropped, "rejected", st.dropped_rejected.load(Relaxed));
            let dl = DestinationLabel {
                destination: d.clone(),
            };
            m.bytes
                .get_or_create(&dl)
                .inner()
                .store(st.bytes.load(Relaxed), Relaxed);
            m.queued
                .get_or_create(&dl)
                .set(st.queued.load(Relaxed) as i64);
            m.last_success
                .get_or_create(&dl)
                .set(st.last_success.load(Relaxed) as i64);
        }
    }

    /// The text exposition, with process figures read now.
    pub fn encode(&self) -> String {
        if let Some((rss, cpu)) = self_usage() {
            self.rss.set(rss as i64);
            self.cpu_seconds.set(cpu);
        }
        #[cfg(target_env = "gnu")]
        {
            // SAFETY: mallinfo2 only reads the allocator's counters.
            let m = unsafe { libc::mallinfo2() };
            self.heap_in_use
                .set(i64::try_from(m.uordblks + m.hblkhd).unwrap_or(i64::MAX));
        }
        self.proc_maps_truncated
            .inner()
            .store(crate::shared::procmaps::truncated(), Ordering::Relaxed);
        self.subuid_lines_skipped
            .set(i64::try_from(crate::shared::accounts::skipped_lines()).unwrap_or(i64::MAX));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// (RSS bytes, CPU seconds) of this process.
fn self_usage() -> Option<(u64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14, 15 (utime, stime) and 24 (rss pages), counted from 1 in
    // proc(5); `after` starts at field 3.
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()??
        .max(1) as f64;
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let rss_pages: u64 = f.get(21)?.parse().ok()?;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()??
        .max(1) as u64;
    Some((rss_pages * page, (utime + stime) / tick))
}
