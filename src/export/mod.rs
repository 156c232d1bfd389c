//! Export: pushing each interval's profiles to a fleet's store (Grafana
//! Pyroscope, an OpenTelemetry Collector), beside the HTTP API that serves
//! them to be pulled.
//!
//! Every `interval` a task reads the interval's rows out of the stores
//! (under the same short read locks as a query) and encodes one payload
//! per destination off the async workers. Each destination has its own
//! bounded queue of payloads and its own sender: a slow, failing or absent
//! receiver holds up only its queue, never sampling, the HTTP API or the
//! other destination. A full queue drops its oldest payload (counted);
//! failures are retried with exponential backoff.

pub mod destination;
pub mod otlp;
pub mod pyroscope;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

pub use destination::{Credentials, Destination, Protocol, PushError};

use crate::query::{Event, Query};
use crate::render::pprof::gzip;
use crate::render::view::{self, Sources};
use crate::shared::workload::OTHER_SERVICES;
use crate::store::History;

/// Defaults of the push settings.
pub mod defaults {
    /// Seconds between pushes (Alloy's and the OpenTelemetry profiler's
    /// default reporting interval is about this).
    pub const INTERVAL_SECONDS: u64 = 15;
    /// Unsent intervals kept per destination: 5 minutes at 15 s.
    pub const QUEUE_INTERVALS: usize = 20;
    /// Seconds a push may take, connect to answer.
    pub const TIMEOUT_SECONDS: u64 = 10;
    /// Bytes of unsent payloads kept per destination, whatever their
    /// number: on the benchmark's busy host an interval is about 200 KB to
    /// Pyroscope, so 20 of them fit; a larger host's keep fewer.
    pub const QUEUE_BYTES: usize = 8 << 20;
    /// Distinct (service, unit, container) label sets per pushed event and
    /// interval; the lightest beyond them are pushed as one,
    /// [`crate::shared::workload::OTHER_SERVICES`]. A host of login
    /// sessions, `systemd-run` units or short-lived containers would
    /// otherwise make a Pyroscope series or an OTLP resource of each, as
    /// Prometheus's `sample_limit`/`label_limit` guard a scrape.
    pub const MAX_LABEL_SETS: usize = 100;
}

/// Seconds an interval's end is behind the clock when it is read: a drain
/// brings a second's last CPU ticks up to about a second late.
pub const SETTLE_SECONDS: u64 = 2;
/// Longest wait between retries of a failed push.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// First wait after a failed push.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// What to push, where, how often.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// The destinations (at most one of each protocol).
    pub destinations: Vec<Destination>,
    /// Interval between pushes, each carrying that interval's profiles.
    pub interval: Duration,
    /// Unsent payloads kept per destination.
    pub queue_intervals: usize,
    /// Deadline of one push.
    pub timeout: Duration,
    /// Label sets kept apart per event and interval
    /// ([`defaults::MAX_LABEL_SETS`]).
    pub max_label_sets: usize,
}

/// Counters of one destination, read by `/metrics`.
#[derive(Debug, Default)]
pub struct PushStats {
    /// Pushes the destination accepted.
    pub pushed: AtomicU64,
    /// Pushes that failed (each retry counts), but those refused below.
    pub failed: AtomicU64,
    /// Pushes not sent because a local socket of an untrusted user held
    /// the destination's port (each retry counts).
    pub refused_listener: AtomicU64,
    /// Body bytes of accepted pushes (compressed, as sent).
    pub bytes: AtomicU64,
    /// Payloads dropped because the queue was full (the oldest goes).
    pub dropped_queue_full: AtomicU64,
    /// Payloads dropped because the destination refused them (4xx).
    pub dropped_rejected: AtomicU64,
    /// Payloads waiting.
    pub queued: AtomicU64,
    /// Unix seconds of the last accepted push (0: none yet).
    pub last_success: AtomicU64,
}

/// One encoded interval, ready to post.
#[derive(Debug, Clone)]
struct Payload {
    body: Bytes,
    /// `[from, to)`, unix seconds, for logs.
    window: (u64, u64),
}

/// A destination with its queue.
#[derive(Debug)]
pub struct Lane {
    /// Where it goes.
    pub destination: Destination,
    /// Its counters.
    pub stats: PushStats,
    queue: Mutex<VecDeque<Payload>>,
    ready: tokio::sync::Notify,
    capacity: usize,
    /// Bytes the queue's payloads may hold together.
    max_bytes: usize,
}

impl Lane {
    fn enqueue(&self, p: Payload) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut bytes = q.iter().map(|p| p.body.len()).sum::<usize>() + p.body.len();
        while q.len() >= self.capacity || (bytes > self.max_bytes && !q.is_empty()) {
            let Some(old) = q.pop_front() else { break };
            bytes -= old.body.len();
            self.stats
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(p);
        self.stats.queued.store(q.len() as u64, Ordering::Relaxed);
        drop(q);
        self.ready.notify_one();
    }

    fn front(&self) -> Option<Payload> {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .front()
            .cloned()
    }

    /// Removes the payload of `window` if it is still at the front (the
    /// queue may have dropped it meanwhile).
    fn done(&self, window: (u64, u64)) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.front().is_some_and(|p| p.window == window) {
            q.pop_front();
        }
        self.stats.queued.store(q.len() as u64, Ordering::Relaxed);
    }
}

/// What the pusher needs of the daemon to build profiles.
#[derive(Debug, Clone)]
pub struct Source {
    /// The stores.
    pub history: Arc<History>,
    /// Sampling frequency (CPU profiles' period).
    pub frequency_hz: u64,
    /// Mean bytes between malloc samples.
    pub malloc_sample_bytes: u64,
    /// Host name (`host`, `host.name`).
    pub host: String,
    /// Retention, seconds (queries may not reach further back).
    pub retention_secs: u64,
    /// Label sets kept apart per event and interval.
    pub max_label_sets: usize,
    /// Label sets folded into [`crate::shared::workload::OTHER_SERVICES`]
    /// so far, for `/metrics`.
    pub folded_label_sets: Arc<AtomicU64>,
}

/// The running pusher: its lanes, for `/metrics`.
#[derive(Debug)]
pub struct Pusher {
    /// One per destination.
    pub lanes: Vec<Arc<Lane>>,
    /// Label sets folded past the cap ([`Source::folded_label_sets`]).
    pub folded_label_sets: Arc<AtomicU64>,
}

impl Pusher {
    /// Starts the interval task and one sender per destination on the
    /// current tokio runtime.
    pub fn start(options: PushOptions, source: Source) -> Arc<Pusher> {
        let lanes: Vec<Arc<Lane>> = options
            .destinations
            .iter()
            .map(|d| {
                Arc::new(Lane {
                    destination: d.clone(),
                    stats: PushStats::default(),
                    queue: Mutex::new(VecDeque::new()),
                    ready: tokio::sync::Notify::new(),
                    capacity: options.queue_intervals.max(1),
                    max_bytes: defaults::QUEUE_BYTES,
                })
            })
            .collect();
        for lane in &lanes {
            tokio::spawn(send_loop(lane.clone(), options.timeout));
        }
        let folded_label_sets = source.folded_label_sets.clone();
        tokio::spawn(interval_loop(lanes.clone(), options, source));
        Arc::new(Pusher {
            lanes,
            folded_label_sets,
        })
    }
}

fn unix_now() -> u64 {
    crate::query::unix_now()
}

/// Every interval, the interval's payloads into the lanes.
async fn interval_loop(lanes: Vec<Arc<Lane>>, options: PushOptions, source: Source) {
    let step = options.interval.as_secs().max(1);
    let mut from = unix_now().saturating_sub(SETTLE_SECONDS);
    loop {
        let to = from + step;
        let due = to + SETTLE_SECONDS;
        let now = unix_now();
        if due > now {
            tokio::time::sleep(Duration::from_secs(due - now)).await;
        }
        let now = unix_now();
        // The clock jumped (or the host slept): the intervals missed are
        // not pushed late, one after another; the next starts now.
        if now > due + 2 * step {
            tracing::warn!("push: skipping {} s the clock jumped over", now - due);
            from = now.saturating_sub(SETTLE_SECONDS);
            continue;
        }
        let src = source.clone();
        let protocols: Vec<Protocol> = lanes.iter().map(|l| l.destination.protocol).collect();
        let built = tokio::task::spawn_blocking(move || build(&protocols, &src, from, to)).await;
        match built {
            Ok(bodies) => {
                for (lane, body) in lanes.iter().zip(bodies) {
                    match body {
                        Some(body) => lane.enqueue(Payload {
                            body: Bytes::from(body),
                            window: (from, to),
                        }),
                        None => tracing::debug!(
                            "push: no samples in [{from}, {to}) for {}",
                            lane.destination.protocol.name()
                        ),
                    }
                }
            }
            Err(e) => tracing::error!("push: building the profiles of [{from}, {to}) failed: {e}"),
        }
        from = to;
    }
}

/// Sends a lane's payloads in order, retrying with backoff.
async fn send_loop(lane: Arc<Lane>, timeout: Duration) {
    let (content_type, encoding) = match lane.destination.protocol {
        Protocol::Pyroscope => ("application/proto", None),
        Protocol::Otlp => ("application/x-protobuf", Some("gzip")),
    };
    let mut backoff = FIRST_BACKOFF;
    let mut failing = false;
    // Whether the streak's failures are refusals of the listener: a change
    // of kind is logged once too.
    let mut refusing = false;
    loop {
        let Some(p) = lane.front() else {
            lane.ready.notified().await;
            continue;
        };
        let stats = &lane.stats;
        match lane
            .destination
            .post(p.body.clone(), content_type, encoding, timeout)
            .await
        {
            Ok(_) => {
                stats.pushed.fetch_add(1, Ordering::Relaxed);
                stats
                    .bytes
                    .fetch_add(p.body.len() as u64, Ordering::Relaxed);
                stats.last_success.store(unix_now(), Ordering::Relaxed);
                lane.done(p.window);
                if failing {
                    tracing::info!("push to {} works again", lane.destination.url);
                }
                failing = false;
                backoff = FIRST_BACKOFF;
            }
            Err(e) => {
                let refused = matches!(e, PushError::Untrusted { .. });
                if refused {
                    stats.refused_listener.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                }
                if !failing || refused != refusing {
                    tracing::warn!(
                        "push of [{}, {}) failed: {e}; retrying (backoff up to {} s, {} intervals kept)",
                        p.window.0,
                        p.window.1,
                        MAX_BACKOFF.as_secs(),
                        lane.capacity
                    );
                }
                failing = true;
                refusing = refused;
                if !e.retryable() {
                    stats.dropped_rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "push of [{}, {}) dropped: the destination refused it ({e})",
                        p.window.0,
                        p.window.1
                    );
                    lane.done(p.window);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// The events pushed, with their Pyroscope `__name__` and OTLP sample
/// type: the rows of [`crate::shared::events::EVENTS`] that have `push`.
pub fn pushed() -> impl Iterator<Item = (Event, &'static str, (&'static str, &'static str))> {
    crate::shared::events::EVENTS.iter().filter_map(|e| {
        e.push
            .map(|(name, sample_type)| (e.event, name, sample_type))
    })
}

/// The query of `event` over `[from, to)`.
fn query(event: Event, from: u64, to: u64, retention: u64) -> Option<Query> {
    let params = [
        ("event".to_owned(), event.name().to_owned()),
        ("from".to_owned(), from.to_string()),
        ("to".to_owned(), to.to_string()),
    ];
    Query::parse(&params, unix_now(), retention).ok()
}

/// One pushed event's rows over an interval, read once for every
/// destination.
struct Selected {
    event: Event,
    /// Pyroscope's `__name__`.
    name: &'static str,
    /// OTLP's sample type and unit.
    sample_type: (&'static str, &'static str),
    query: Query,
    rows: crate::store::QueryResult,
}

/// The rows of every recorded event over `[from, to)` that has any.
fn select_interval(src: &Source, from: u64, to: u64) -> Vec<Selected> {
    let h = &src.history;
    let mut out = Vec::new();
    for (event, name, sample_type) in pushed() {
        let sources = Sources::of(h, event, src.malloc_sample_bytes, src.frequency_hz);
        // Allocations: the allocated bytes (OTLP); Pyroscope's heap profile
        // reads its four stores itself.
        let store = match event {
            Event::Cpu => sources.cpu,
            Event::Malloc => sources.malloc_bytes,
            _ => sources.event,
        };
        let (Some(store), Some(query)) = (store, query(event, from, to, src.retention_secs)) else {
            continue;
        };
        let mut rows = view::select(store, &query.selection);
        let folded = cap_label_sets(&mut rows.rows, src.max_label_sets);
        src.folded_label_sets
            .fetch_add(folded as u64, Ordering::Relaxed);
        if !rows.rows.is_empty() {
            out.push(Selected {
                event,
                name,
                sample_type,
                query,
                rows,
            });
        }
    }
    out
}

/// Keeps the `max` heaviest (service, unit, container) label sets of
/// `rows` and pushes the rest as one, [`OTHER_SERVICES`] (their
/// executable and process kept); returns how many sets were folded.
fn cap_label_sets(rows: &mut [crate::store::Row], max: usize) -> usize {
    use crate::shared::Workload;
    type Set = (Arc<str>, Arc<str>, String);
    let set_of = |r: &crate::store::Row| -> Set {
        let w = &r.workload;
        let service = Workload::service(&w.unit, &w.container, &r.process_comm);
        (w.unit.clone(), w.container.clone(), service.into_owned())
    };
    let sets: Vec<Set> = rows.iter().map(set_of).collect();
    let mut weight: HashMap<&Set, u64> = HashMap::new();
    for (set, r) in sets.iter().zip(rows.iter()) {
        *weight.entry(set).or_default() += r.value;
    }
    if weight.len() <= max {
        return 0;
    }
    let mut order: Vec<(&Set, u64)> = weight.into_iter().collect();
    // Heaviest first; ties by name, so a push does not flip between them.
    order.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let folded = order.len() - max;
    let kept: HashSet<&Set> = order.into_iter().take(max).map(|(s, _)| s).collect();
    let other: Arc<str> = Arc::from(OTHER_SERVICES);
    for (set, r) in sets.iter().zip(rows.iter_mut()) {
        if !kept.contains(set) {
            r.workload = Workload {
                unit: other.clone(),
                container: Arc::from(""),
                exe: r.workload.exe.clone(),
            };
        }
    }
    folded
}

/// The bodies of `protocols`' pushes of `[from, to)`, in their order;
/// `None` where no event has a sample in it.
pub fn build(protocols: &[Protocol], src: &Source, from: u64, to: u64) -> Vec<Option<Vec<u8>>> {
    let selected = select_interval(src, from, to);
    protocols
        .iter()
        .map(|p| {
            (!selected.is_empty()).then(|| match p {
                Protocol::Pyroscope => pyroscope_body(src, &selected),
                Protocol::Otlp => otlp_body(src, from, to, &selected),
            })
        })
        .collect()
}

fn pyroscope_body(src: &Source, selected: &[Selected]) -> Vec<u8> {
    let series = selected
        .iter()
        .filter_map(|s| {
            let profile = if s.event == Event::Malloc {
                let sources = Sources::of(
                    &src.history,
                    s.event,
                    src.malloc_sample_bytes,
                    src.frequency_hz,
                );
                view::heap_pprof(&s.query, sources).ok()?
            } else {
                view::pprof_of_rows(&s.query, &s.rows, src.frequency_hz)
            };
            Some(pyroscope::series(s.name, &src.host, profile))
        })
        .collect();
    pyroscope::encode(series)
}

fn otlp_body(src: &Source, from: u64, to: u64, selected: &[Selected]) -> Vec<u8> {
    let rows: Vec<otlp::EventRows<'_>> = selected
        .iter()
        .map(|s| otlp::EventRows {
            sample_type: s.sample_type,
            period: (s.event == Event::Cpu).then(|| {
                (
                    ("cpu", "nanoseconds"),
                    1_000_000_000 / src.frequency_hz.max(1) as i64,
                )
            }),
            result: &s.rows,
        })
        .collect();
    gzip(&otlp::request(&src.host, from, to, &rows))
}

/// `emberd check`: one empty push to each destination, and what it said.
pub async fn probe(destination: &Destination, timeout: Duration) -> Result<String, PushError> {
    let (body, content_type, encoding) = match destination.protocol {
        Protocol::Pyroscope => (pyroscope::encode(Vec::new()), "application/proto", None),
        Protocol::Otlp => (
            gzip(&otlp::request("", 0, 0, &[])),
            "application/x-protobuf",
            Some("gzip"),
        ),
    };
    let a = destination
        .post(Bytes::from(body), content_type, encoding, timeout)
        .await?;
    Ok(format!("answered {} to an empty push", a.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(capacity: usize, max_bytes: usize) -> Lane {
        Lane {
            destination: Destination::new(
                Protocol::Otlp,
                "http://127.0.0.1:4318",
                &Credentials::default(),
            )
            .unwrap(),
            stats: PushStats::default(),
            queue: Mutex::new(VecDeque::new()),
            ready: tokio::sync::Notify::new(),
            capacity,
            max_bytes,
        }
    }

    fn payload(from: u64, bytes: usize) -> Payload {
        Payload {
            body: Bytes::from(vec![0u8; bytes]),
            window: (from, from + 1),
        }
    }

    fn row(unit: &str, container: &str, comm: &str, value: u64) -> crate::store::Row {
        crate::store::Row {
            pid: crate::shared::Pid(1),
            tid: crate::shared::Tid(1),
            thread_comm: Arc::from(comm),
            process_comm: Arc::from(comm),
            workload: crate::shared::Workload {
                unit: Arc::from(unit),
                container: Arc::from(container),
                exe: Arc::from("/bin/x"),
            },
            stack: crate::store::Interner::default().stack(&[]),
            value,
        }
    }

    #[test]
    fn label_sets_past_the_cap_are_pushed_as_one() {
        use crate::shared::Workload;
        // A host of 300 login sessions, each running its own program, and
        // two services.
        let mut rows: Vec<crate::store::Row> = (0..300)
            .map(|i| row(&format!("session-{i}.scope"), "", &format!("job{i}"), 1))
            .collect();
        rows.push(row("nginx.service", "", "nginx", 500));
        rows.push(row("db.service", "", "postgres", 400));
        let total: u64 = rows.iter().map(|r| r.value).sum();
        assert_eq!(cap_label_sets(&mut rows, 10), 292);
        let services: HashSet<String> = rows
            .iter()
            .map(|r| {
                Workload::service(&r.workload.unit, &r.workload.container, &r.process_comm)
                    .into_owned()
            })
            .collect();
        let units: HashSet<&str> = rows.iter().map(|r| &*r.workload.unit).collect();
        assert_eq!(services.len(), 11, "{services:?}");
        assert_eq!(units.len(), 11);
        assert!(services.contains("nginx.service") && services.contains("db.service"));
        assert!(services.contains(OTHER_SERVICES));
        // Nothing is lost: the folded rows keep their values.
        assert_eq!(rows.iter().map(|r| r.value).sum::<u64>(), total);
        assert_eq!(
            rows.iter()
                .filter(|r| &*r.workload.unit == OTHER_SERVICES)
                .map(|r| r.value)
                .sum::<u64>(),
            292
        );
        // Within the cap nothing changes.
        let mut few = vec![row("a.service", "", "a", 1), row("", "", "b", 1)];
        assert_eq!(cap_label_sets(&mut few, 2), 0);
        assert_eq!(&*few[0].workload.unit, "a.service");
    }

    #[test]
    fn a_full_queue_drops_its_oldest_by_count_and_by_bytes() {
        let l = lane(3, 1 << 20);
        for i in 0..5 {
            l.enqueue(payload(i, 10));
        }
        assert_eq!(l.front().unwrap().window, (2, 3));
        assert_eq!(l.stats.dropped_queue_full.load(Ordering::Relaxed), 2);
        assert_eq!(l.stats.queued.load(Ordering::Relaxed), 3);

        let l = lane(100, 1000);
        for i in 0..4 {
            l.enqueue(payload(i, 400));
        }
        // 1,000 bytes hold two of 400.
        assert_eq!(l.stats.queued.load(Ordering::Relaxed), 2);
        assert_eq!(l.front().unwrap().window, (2, 3));
        // One payload over the whole budget is still kept (alone).
        l.enqueue(payload(9, 5000));
        assert_eq!(l.stats.queued.load(Ordering::Relaxed), 1);
        l.done((9, 10));
        assert!(l.front().is_none());
    }
}
