//! Serve: the HTTP API (axum). Routes and parameters follow DESIGN.md.
//!
//! Queries take a store's read lock only to copy the selected rows out;
//! folding, rendering and compression happen after it is released, on a
//! blocking thread, so a large query never holds up the drain. Connection
//! limits (header timeout, connection cap) live in [`conn`].

pub mod auth;
mod compare;
pub mod conn;
pub mod csp;
pub mod metrics;
pub mod origin;
mod web;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::query::{Event, Query, QueryError};
use crate::render;
use crate::render::view::{self, Sources};
use crate::serve::metrics::Metrics;
use crate::store::History;

/// Rendered answers of the current store generation. The store changes once
/// a second, so clients polling the same view (dashboards, several scrapers)
/// share one rendering; concurrent identical requests wait for the first one
/// instead of rendering in parallel, which bounds CPU and memory under load.
#[derive(Debug, Default)]
pub struct ResponseCache {
    generation: u64,
    bytes: usize,
    entries: HashMap<CacheKey, Arc<tokio::sync::OnceCell<Rendered>>>,
}

impl ResponseCache {
    /// Drops every kept answer and returns their bytes. The collector calls
    /// it at each drain: the drain makes every answer stale (the next
    /// request misses anyway), and a rendered body can be a MiB or more, so
    /// keeping it until the next request arrives would hold that much of
    /// RSS for as long as no one asks. Requests still waiting on an entry
    /// hold it themselves and get their answer.
    pub fn clear(&mut self) -> usize {
        let bytes = self.bytes;
        self.entries.clear();
        self.bytes = 0;
        bytes
    }
}

/// Entries kept per generation.
const CACHE_ENTRIES: usize = 32;
/// Bodies larger than this are not kept, and the cache holds at most
/// [`CACHE_BYTES`]: memory stays bounded whatever clients ask.
const CACHE_MAX_BODY: usize = 4 << 20;
/// Total bytes of cached bodies.
const CACHE_BYTES: usize = 16 << 20;
/// Renderings at once; more wait. Each can take tens of MiB for an hour of
/// deep stacks, so this bounds the daemon's peak memory under load.
pub const MAX_CONCURRENT_RENDERS: usize = 2;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    route: &'static str,
    query: String,
    from: u64,
    to: u64,
}

/// A rendered body and its headers.
#[derive(Debug, Clone)]
struct Rendered {
    body: bytes::Bytes,
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl Rendered {
    fn response(&self) -> Response {
        let mut resp = Response::new(Body::from(self.body.clone()));
        for (k, v) in &self.headers {
            // Append: a route may send several notes.
            resp.headers_mut().append(k.clone(), v.clone());
        }
        resp
    }
}

/// Renders on a blocking thread, at most [`MAX_CONCURRENT_RENDERS`] at once.
///
/// Waiting for a permit ends with the request (a timed-out request leaves
/// nothing queued). A started render is blocking code and cannot be
/// stopped, so it keeps its permit until it really ends: a retry waits for
/// it instead of rendering beside it, and renders at once never pass the
/// limit, however many requests time out.
async fn render_now<F>(st: &AppState, render: F) -> Result<Rendered, AppError>
where
    F: FnOnce() -> Result<Rendered, AppError> + Send + 'static,
{
    let permit = st
        .renders
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| AppError::Internal(e.to_string()))?;
    let metrics = st.metrics.clone();
    let out = tokio::task::spawn_blocking(move || {
        let running = metrics.render_started();
        slow_render_hook();
        let out = render();
        // Counted out before the next render can start.
        drop(running);
        drop(permit);
        out
    })
    .await
    .map_err(|e| AppError::Internal(e.to_string()))?;
    RENDERED.store(true, std::sync::atomic::Ordering::Relaxed);
    out
}

/// Test hook, read once: `EMBERD_TEST_SLOW_RENDERS=MS:COUNT` makes the
/// first COUNT renders sleep MS ms on their blocking thread, so the tests
/// can time requests out in the middle of a render.
fn slow_render_hook() {
    static HOOK: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    static SLOWED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let hook = HOOK.get_or_init(|| {
        let v = std::env::var("EMBERD_TEST_SLOW_RENDERS").ok()?;
        let (ms, count) = v.split_once(':')?;
        Some((ms.parse().ok()?, count.parse().ok()?))
    });
    if let Some((ms, count)) = *hook
        && SLOWED.fetch_add(1, Ordering::Relaxed) < count
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Set when a rendering finished: its buffers were freed, and the
/// collector hands the memory back to the system at its next drain.
static RENDERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a rendering finished since the last call.
pub fn take_rendered() -> bool {
    RENDERED.swap(false, std::sync::atomic::Ordering::Relaxed)
}

/// Answers from the cache, rendering with `render` on a miss. `span` is the
/// time the query covers (relative times in `raw` move with the clock).
async fn cached<F>(
    st: &AppState,
    route: &'static str,
    raw: &str,
    span: (u64, u64),
    render: F,
) -> Result<Response, AppError>
where
    F: FnOnce() -> Result<Rendered, AppError> + Send + 'static,
{
    // Not the store's own generation: reading it would take the store's
    // lock on an async worker, where a drain waiting to write (the lock is
    // writer-preferring) would park the worker and stall /healthz.
    let generation = st.liveness.drains();
    let key = CacheKey {
        route,
        query: raw.to_owned(),
        from: span.0,
        to: span.1,
    };
    let cell = {
        let mut cache = st.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.generation != generation
            || cache.entries.len() >= CACHE_ENTRIES
            || cache.bytes >= CACHE_BYTES
        {
            cache.entries.clear();
            cache.bytes = 0;
            cache.generation = generation;
        }
        cache.entries.entry(key.clone()).or_default().clone()
    };
    let mut filled = false;
    let rendered = cell
        .get_or_try_init(|| {
            filled = true;
            render_now(st, render)
        })
        .await?;
    let resp = rendered.response();
    let size = rendered.body.len();
    let mut cache = st.cache.lock().unwrap_or_else(|e| e.into_inner());
    // Only the request that rendered counts the body, and only while the
    // cache still holds its cell: a hit adds no memory, and a drain may
    // have emptied the cache (or a new generation replaced the cell)
    // while this one rendered.
    let kept = cache
        .entries
        .get(&key)
        .is_some_and(|c| Arc::ptr_eq(c, &cell));
    if kept && size > CACHE_MAX_BODY {
        cache.entries.remove(&key);
    } else if kept && filled {
        cache.bytes += size;
    }
    Ok(resp)
}

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Rendered answers shared by identical requests.
    pub cache: Arc<std::sync::Mutex<ResponseCache>>,
    /// Bounds renderings at once to [`MAX_CONCURRENT_RENDERS`].
    pub renders: Arc<tokio::sync::Semaphore>,
    /// Bounds posted bodies being read or parsed at once to
    /// [`MAX_CONCURRENT_RENDERS`]: each can be 16 MiB.
    pub posts: Arc<tokio::sync::Semaphore>,
    /// Every store: CPU samples, the events switched on, the live heap.
    pub history: Arc<History>,
    /// Mean bytes between malloc samples.
    pub malloc_sample_bytes: u64,
    /// emberd's metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness: the programs are attached and drains keep completing.
    pub liveness: Arc<Liveness>,
    /// Who may read: allowed `Host` names and the bearer token.
    pub access: Arc<Access>,
    /// Bounds requests being answered at once to [`MAX_IN_FLIGHT`].
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// Bounds `POST /login/session`s (unauthenticated, reading a body) at
    /// once to [`MAX_LOGINS_IN_FLIGHT`], apart from [`Self::in_flight`].
    pub logins_in_flight: Arc<tokio::sync::Semaphore>,
    /// Sampling frequency (for pprof's period and SVG titles).
    pub frequency_hz: u64,
    /// Retention in seconds (the longest window a query may ask for).
    pub retention_secs: u64,
    /// Host name, for titles.
    pub host: String,
    /// The pushes to Pyroscope and OTLP, if configured (for `/metrics`).
    pub pusher: Option<Arc<crate::export::Pusher>>,
}

/// Who may read profiles over HTTP.
#[derive(Debug, Default)]
pub struct Access {
    /// Host names (lower case) the `Host` header may carry besides IP
    /// literals and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// The bearer token every route but `/healthz`, `/login` and the
    /// page's static files needs, if set.
    pub token: Option<crate::shared::Secret>,
    /// Browser logins: one-time codes, sessions, view tickets (see [`auth`]).
    pub logins: auth::Logins,
}

impl Access {
    /// Whether a `Host` header value names this server: an IP literal
    /// (a page can only reach it under that origin), `localhost`, or a
    /// configured name. A DNS-rebinding page carries its own domain.
    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = if let Some(rest) = host.strip_prefix('[') {
            // [v6]:port
            return rest
                .split(']')
                .next()
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
        } else {
            host.rsplit_once(':')
                .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
                .map_or(host.as_str(), |(name, _)| name)
        };
        name.parse::<std::net::Ipv4Addr>().is_ok()
            || name == "localhost"
            || self.allowed_hosts.iter().any(|h| h == name)
    }

    /// Whether the request carries the token (compared in constant time).
    fn token_ok(&self, req: &Request) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let given = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        constant_time_eq(given.as_bytes(), token.expose().as_bytes())
    }
}

/// Equality whose time depends on the lengths only, not on where the
/// inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    std::hint::black_box(diff) == 0
}

/// Requests answered at once, all routes but `/healthz`; more get 503 at
/// once rather than queueing without bound (each holds a rendered body).
pub const MAX_IN_FLIGHT: usize = 64;

/// `POST /login/session`s answered at once, from a pool of their own: it
/// is the one route that reads a body before anyone is authenticated, so
/// any local user's slow bodies could otherwise take every slot of
/// [`MAX_IN_FLIGHT`] from the scrapers and the page. More get 503.
pub const MAX_LOGINS_IN_FLIGHT: usize = 8;

/// A request not answered within this gets 503. A render it started ends
/// on its own and is not kept (see [`render_now`]).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// [`REQUEST_TIMEOUT`], or the test hook `EMBERD_TEST_REQUEST_TIMEOUT_MS`
/// (read once), so the tests can time requests out in a second.
fn request_timeout() -> std::time::Duration {
    static TIMEOUT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        std::env::var("EMBERD_TEST_REQUEST_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(REQUEST_TIMEOUT, std::time::Duration::from_millis)
    })
}

/// Bounds requests in flight and their time.
async fn limits(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let (pool, most) = if req.uri().path() == "/login/session" {
        (&st.logins_in_flight, MAX_LOGINS_IN_FLIGHT)
    } else {
        (&st.in_flight, MAX_IN_FLIGHT)
    };
    let Ok(_permit) = pool.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
            format!("too many requests in flight (more than {most}); retry\n"),
        )
            .into_response();
    };
    let timeout = request_timeout();
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the answer took longer than {:.1} s; ask for a shorter window, or retry later (a render it started still runs, within the render limit)\n",
                timeout.as_secs_f64()
            ),
        )
            .into_response(),
    }
}

/// Refuses requests without a proper `Host` (400), for other hosts (421),
/// from other sites' pages (403, see [`origin`]) and without the token, a
/// login session or a view ticket (401).
async fn guard(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let refused = |r: origin::Refusal| (r.status(), format!("{r}\n")).into_response();
    let host = match origin::host(req.version(), req.headers()) {
        Ok(h) => h,
        Err(r) => return refused(r),
    };
    if let Some(host) = host
        && !st.access.host_allowed(host)
    {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not this server: use its IP address or localhost, or add the name to allowed_hosts\n"
            ),
        )
            .into_response();
    }
    if let Err(r) = origin::check_origin(req.method(), req.uri().path(), req.headers(), host) {
        return refused(r);
    }
    if !auth::open_route(req.uri().path()) && !st.access.allows(&req) {
        if !st.access.view_allowed(&req) {
            return auth::unauthorized();
        }
        // The ticket is spent; the route reads the query without it.
        if let Some((_, rest)) = req.uri().query().and_then(auth::split_view) {
            let path = req.uri().path().to_owned();
            let pq = if rest.is_empty() {
                path
            } else {
                format!("{path}?{rest}")
            };
            match pq.parse() {
                Ok(uri) => *req.uri_mut() = uri,
                Err(_) => return auth::unauthorized(),
            }
        }
    }
    next.run(req).await
}

/// Headers every response carries: no type sniffing (a text/plain error
/// that echoes a parameter is never read as HTML), and the SVGs' CSP
/// ([`csp::svg_policy`]: their own scripts by hash, nothing else).
async fn harden(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    let svg = h
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"image/svg+xml"));
    if !svg || h.contains_key(header::CONTENT_SECURITY_POLICY) {
        return resp;
    }
    // The SVGs are rendered whole before they are sent: collecting the
    // body costs no copy of note.
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the SVG could not be read back\n",
        )
            .into_response();
    };
    match HeaderValue::from_str(&csp::svg_policy(&bytes)) {
        Ok(v) => {
            parts.headers.insert(header::CONTENT_SECURITY_POLICY, v);
        }
        Err(_) => {
            parts.headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'none'"),
            );
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// Whether the daemon is doing its job, for `/readyz`.
#[derive(Debug)]
pub struct Liveness {
    /// Set once the BPF programs are attached, cleared on shutdown.
    pub attached: AtomicBool,
    /// Beaten at each completed drain.
    drain: crate::shared::heartbeat::Heartbeat,
    /// Drains completed: the stores' generation, for the response cache.
    drains: std::sync::atomic::AtomicU64,
    /// Serving the history on disk without sampling (`no_sample`): ready
    /// with no drain.
    pub offline: AtomicBool,
    /// Beaten by the collector while a drain waits on a bounded read (a
    /// file's symbols: up to 10 s for one that answered late before).
    pub waiting: std::sync::Arc<crate::shared::heartbeat::Heartbeat>,
}

/// `/readyz` fails when no drain completed for this long (drains run every
/// second): a hung or failing collector is not ready, whatever else answers.
pub const READY_STALE: std::time::Duration = std::time::Duration::from_secs(5);

/// A drain that waits on bounded reads (it beats [`Liveness::waiting`])
/// keeps the daemon ready for this long at most: each file's wait is
/// bounded, their sum is not (under emulation a first drain read libc,
/// libm and emberd itself for 5-12 s each), and past a minute without
/// stored samples the daemon is not doing its job, however alive.
pub const READY_WAITING_MAX: std::time::Duration = std::time::Duration::from_secs(60);

impl Default for Liveness {
    fn default() -> Self {
        Self {
            attached: AtomicBool::new(false),
            drain: Default::default(),
            drains: Default::default(),
            offline: AtomicBool::new(false),
            waiting: Default::default(),
        }
    }
}

impl Liveness {
    /// Records a completed drain.
    pub fn drained(&self) {
        self.drain.beat();
        self.drains.fetch_add(1, Ordering::SeqCst);
    }

    /// Drains completed so far.
    pub fn drains(&self) -> u64 {
        self.drains.load(Ordering::SeqCst)
    }

    /// Time since the last completed drain ([`std::time::Duration::MAX`]
    /// before the first: the daemon marks one before it is attached).
    pub fn since_drain(&self) -> std::time::Duration {
        self.drain.since()
    }
}

/// Errors a handler answers with.
#[derive(Debug)]
pub enum AppError {
    /// The client's mistake: 400 with the reason.
    BadRequest(QueryError),
    /// emberd's: 500, details in the log.
    Internal(String),
}

impl From<QueryError> for AppError {
    fn from(e: QueryError) -> Self {
        AppError::BadRequest(e)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            AppError::BadRequest(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
            AppError::Internal(msg) => {
                tracing::error!("request failed: {msg}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see emberd's log\n",
                )
                    .into_response()
            }
        }
    }
}

/// The router with every route.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/flamegraph.svg", get(flamegraph))
        .route("/folded", get(folded))
        .route("/", get(web::index))
        .route("/app.js", get(web::app_js))
        .route("/app.css", get(web::app_css))
        .route("/heatmap.json", get(web::heatmap))
        .route("/profile.json", get(web::profile))
        .route(
            "/diff.svg",
            // The body's limit: compare::read_body.
            get(compare::diff_svg).post(compare::diff_svg_baseline),
        )
        .route(
            "/diff.folded",
            // The body's limit: compare::read_body.
            get(compare::diff_folded).post(compare::diff_folded_baseline),
        )
        .route("/animation.svg", get(compare::animation_svg))
        .route("/animation.folded", get(compare::animation_folded))
        .route("/debug/pprof/profile", get(pprof_profile))
        .route("/debug/pprof/{event}", get(pprof_event))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/login", get(auth::old_login).post(auth::mint))
        .route("/login/session", axum::routing::post(auth::redeem))
        .route("/login/view", axum::routing::post(auth::view))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), limits))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(middleware::from_fn(harden))
        .with_state(state)
}

async fn observe(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let start = Instant::now();
    let resp = next.run(req).await;
    st.metrics.observe_request(
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    resp
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "no such route; emberd serves / (the web page), /heatmap.json, /profile.json, /flamegraph.svg, /folded, /diff.svg, /diff.folded, /animation.svg, /animation.folded, /debug/pprof/profile, /metrics, /healthz, /readyz, /login\n",
    )
        .into_response()
}

fn parse_query(raw: &str, st: &AppState) -> Result<Query, QueryError> {
    let params: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect();
    // Windows are parsed in wall time and mapped onto the store's clock
    // (see crate::shared::clock), so a stepped wall clock moves no window.
    let mut q = Query::parse(&params, crate::shared::clock::wall_now(), st.retention_secs)?;
    let from = crate::shared::clock::to_store(q.selection.from);
    // One offset for every bound, so the window keeps its length.
    let shift = |t: u64| (t as i128 + from as i128 - q.selection.from as i128).max(0) as u64;
    q.selection.to = shift(q.selection.to);
    q.selection.ms = q.selection.ms.map(|(a, b)| {
        (
            shift(a / 1000) * 1000 + a % 1000,
            shift(b / 1000) * 1000 + b % 1000,
        )
    });
    q.selection.from = from;
    Ok(q)
}

/// Runs `f` with the stores `q` needs; each is read-locked only while a
/// query copies its rows out (see [`view::select`]).
fn with_sources<R>(
    st: &AppState,
    q: &Query,
    f: impl FnOnce(Sources<'_>) -> R,
) -> Result<R, AppError> {
    Ok(f(Sources::of(
        &st.history,
        q.event,
        st.malloc_sample_bytes,
        st.frequency_hz,
    )))
}

fn switched_off(e: Event) -> AppError {
    AppError::BadRequest(QueryError {
        param: "event".into(),
        reason: if e.is_malloc() {
            format!(
                "{} is off: no process is named for malloc tracing (set malloc_pids or malloc_comms, or --malloc-pid / --malloc-comm)",
                e.name()
            )
        } else {
            let key = if e == Event::HotCold {
                "offcpu"
            } else {
                e.name()
            };
            format!(
                "{} is switched off in this emberd's configuration (set {key} = true)",
                e.name()
            )
        },
    })
}

/// An `X-Emberd-Note` header saying `note`; characters a header cannot
/// carry (controls, non-ASCII from a comm regex) are escaped, not dropped.
pub(crate) fn note_header(note: &str) -> (header::HeaderName, HeaderValue) {
    let text: String = note
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c.to_string()
            } else {
                c.escape_unicode().to_string()
            }
        })
        .collect();
    (
        header::HeaderName::from_static("x-emberd-note"),
        HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static("no samples")),
    )
}

/// Why `q`'s answer is empty (see [`view::why_empty`]).
fn why_empty(st: &AppState, q: &Query) -> Result<String, AppError> {
    with_sources(st, q, |src| {
        view::why_empty(q, src, crate::shared::clock::now())
    })
}

/// Selects (under short read locks) and folds.
fn folded_profile(st: &AppState, q: &Query) -> Result<crate::query::profile::Profile, AppError> {
    with_sources(st, q, |src| view::fold(q, src))?.map_err(switched_off)
}

/// Parses the query and answers from the cache, rendering with `render` on
/// a miss.
async fn answer(
    st: AppState,
    raw: Option<String>,
    route: &'static str,
    render: fn(&AppState, &Query) -> Result<Rendered, AppError>,
) -> Result<Response, AppError> {
    let raw = raw.unwrap_or_default();
    let q = parse_query(&raw, &st)?;
    let (st2, q2) = (st.clone(), q.clone());
    let span = (q.selection.from, q.selection.to);
    cached(&st, route, &raw, span, move || {
        render(&st2, &q2).map(|mut r| {
            r.headers.extend(history_headers(&st2, &q2));
            r
        })
    })
    .await
}

/// `X-Emberd-Resolution`: where the window's data was read from (memory
/// or disk) at which slot length; and an `X-Emberd-Note` for each stretch
/// of it with no history (emberd was not recording: stopped, restarting).
pub(crate) fn history_headers(st: &AppState, q: &Query) -> Vec<(header::HeaderName, HeaderValue)> {
    use crate::query::format_rfc3339;
    use crate::shared::clock::to_wall;
    let h = &st.history;
    let store = match q.event {
        Event::Cpu | Event::HotCold => Some(h.cpu_store()),
        Event::MallocInUse | Event::MallocInUseObjects => None,
        e => e.kind().and_then(|k| h.event_store(k)),
    };
    let Some(store) = store else {
        return Vec::new();
    };
    let iso = |t: u64| format_rfc3339(to_wall(t));
    let layout = store.layout(
        q.selection.from,
        q.selection.to,
        crate::shared::clock::now(),
    );
    let mut out = Vec::new();
    let parts: Vec<String> = layout
        .parts
        .iter()
        .map(|p| {
            format!(
                "{} s slots from {} {}..{}",
                p.resolution,
                if p.disk { "disk" } else { "memory" },
                iso(p.from),
                iso(p.to)
            )
        })
        .collect();
    if !parts.is_empty()
        && let Ok(v) = HeaderValue::from_str(&parts.join("; "))
    {
        out.push((header::HeaderName::from_static("x-emberd-resolution"), v));
    }
    for (a, b) in layout.gaps.iter().take(8) {
        out.push(note_header(&format!(
            "no history from {} to {} ({} s): emberd was not recording then",
            iso(*a),
            iso(*b),
            b - a
        )));
    }
    out
}

async fn folded(State(st): State<AppState>, RawQuery(raw): RawQuery) -> Result<Response, AppError> {
    answer(st, raw, "folded", render_folded).await
}

async fn flamegraph(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    answer(st, raw, "flamegraph", render_svg).await
}

async fn pprof_profile(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    answer(st, raw, "pprof", render_pprof).await
}

fn render_folded(st: &AppState, q: &Query) -> Result<Rendered, AppError> {
    let profile = folded_profile(st, q)?;
    let mut body = Vec::new();
    render::folded::write(&profile, &mut body).map_err(|e| AppError::Internal(e.to_string()))?;
    let mut headers = vec![(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    )];
    if profile.is_empty() {
        // Folded text has no comments; the header says why it is empty.
        headers.push(note_header(&why_empty(st, q)?));
    }
    Ok(Rendered {
        body: body.into(),
        headers,
    })
}

fn render_svg(st: &AppState, q: &Query) -> Result<Rendered, AppError> {
    let tree = with_sources(st, q, |src| view::call_tree(q, src))?.map_err(switched_off)?;
    let mut opts = view::svg_options(q, tree.lines(), &st.host, st.frequency_hz);
    let mut headers = vec![(
        header::CONTENT_TYPE,
        HeaderValue::from_static("image/svg+xml"),
    )];
    if tree.lines() == 0 {
        // Said twice: to whoever looks at the picture, and to a script.
        let note = why_empty(st, q)?;
        headers.push(note_header(&note));
        opts.subtitle = Some(note);
    }
    let mut out = Vec::new();
    render::flamegraph::write_tree(&tree, &opts, &mut out)
        .map_err(|e| AppError::Internal(e.to_string()))?;
    Ok(Rendered {
        body: out.into(),
        headers,
    })
}

fn render_pprof(st: &AppState, q: &Query) -> Result<Rendered, AppError> {
    let proto =
        with_sources(st, q, |src| view::pprof(q, src, st.frequency_hz))?.map_err(|e| match e {
            Event::HotCold => AppError::BadRequest(QueryError {
                param: "event".into(),
                reason: "hotcold mixes units and has no pprof form; fetch cpu and offcpu".into(),
            }),
            e => switched_off(e),
        })?;
    let mut headers = vec![
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        ),
        (
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment; filename=\"profile.pb.gz\""),
        ),
    ];
    if proto.sample.is_empty() {
        headers.push(note_header(&why_empty(st, q)?));
    }
    Ok(Rendered {
        body: render::pprof::encode_gzip(&proto).into(),
        headers,
    })
}

/// `/debug/pprof/NAME` for every event but cpu and hotcold (`offcpu`,
/// `blockio`, ...): the same as `/debug/pprof/profile?event=NAME`. `heap`
/// is Go's heap profile (`event=malloc_inuse`: allocated over the window,
/// in use at its end).
async fn pprof_event(
    State(st): State<AppState>,
    axum::extract::Path(event): axum::extract::Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    let event = if event == "heap" {
        Event::MallocInUse.name().to_owned()
    } else {
        event
    };
    if Event::from_name(&event).is_none_or(|e| matches!(e, Event::Cpu | Event::HotCold)) {
        return Ok(not_found().await);
    }
    let mut raw = raw.unwrap_or_default();
    if form_urlencoded::parse(raw.as_bytes()).any(|(k, _)| k == "event") {
        return Err(AppError::BadRequest(QueryError {
            param: "event".into(),
            reason: format!("the route already says event={event}"),
        }));
    }
    if !raw.is_empty() {
        raw.push('&');
    }
    raw.push_str(&format!("event={event}"));
    pprof_profile(State(st), RawQuery(Some(raw))).await
}

async fn metrics(State(st): State<AppState>) -> Response {
    // Gauges over every store, read now.
    st.metrics.store.observe_gauges(&st.history.totals());
    if let Some(disk) = &st.history.disk {
        st.metrics.store.observe_disk(disk);
    }
    if let Some(p) = &st.pusher {
        st.metrics.observe_push(p);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.encode(),
    )
        .into_response()
}

async fn readyz(State(st): State<AppState>) -> Response {
    let l = &st.liveness;
    if l.offline.load(Ordering::SeqCst) {
        return (
            StatusCode::OK,
            "ready (serving the history on disk, not sampling)\n",
        )
            .into_response();
    }
    if !l.attached.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the BPF sampler is not attached\n",
        )
            .into_response();
    }
    let since = l.since_drain();
    if since > READY_STALE && since <= READY_WAITING_MAX && l.waiting.since() <= READY_STALE {
        return (
            StatusCode::OK,
            format!(
                "ready: the drain under way has waited {:.1} s for symbols to be read (see the log)\n",
                since.as_secs_f64()
            ),
        )
            .into_response();
    }
    if since > READY_STALE {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: no drain completed for {:.1} s (the collector is stuck or failing; see the log)\n",
                since.as_secs_f64()
            ),
        )
            .into_response();
    }
    (StatusCode::OK, "ready\n").into_response()
}
