//! The web page at `/` (its assets embedded in the binary: nothing is
//! fetched from the network) and the JSON routes it reads, which scripts
//! may use too: `/heatmap.json` (the history's totals per slot) and
//! `/profile.json` (a profile as a tree). Both take the parameters of
//! `/folded` and answer its 400s.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::{AppError, AppState, Rendered, answer, folded_profile, with_sources};
use crate::query::{Event, Query, QueryError};
use crate::render::json::{Heatmap, Tree};
use crate::render::view;

const INDEX_HTML: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const APP_CSS: &str = include_str!("web/app.css");

/// Nothing but the daemon itself: scripts, styles and data from this
/// origin, no inline script, no frames.
/// The comparison views are this daemon's own SVGs, in a frame.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the page.
pub async fn index() -> Response {
    asset(INDEX_HTML, "text/html; charset=utf-8")
}

/// `GET /app.js`.
pub async fn app_js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

/// `GET /app.css`.
pub async fn app_css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}

fn json_body(value: &impl serde::Serialize) -> Result<Rendered, AppError> {
    let body = serde_json::to_vec(value).map_err(|e| AppError::Internal(e.to_string()))?;
    Ok(Rendered {
        headers: vec![(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body: body.into(),
    })
}

/// The unit of an event's stored values (the heat map's).
fn store_unit(event: Event) -> &'static str {
    if event == Event::Cpu {
        "samples"
    } else if event.is_time() {
        "ns"
    } else {
        event.folded_unit()
    }
}

fn render_heatmap(st: &AppState, q: &Query) -> Result<Rendered, AppError> {
    let line = with_sources(st, q, |src| view::timeline(q, src))?.map_err(|e| {
        AppError::BadRequest(QueryError {
            param: "event".into(),
            reason: match e {
                Event::HotCold | Event::MallocInUse | Event::MallocInUseObjects => format!(
                    "{} has no heat map (it is not a sum over time); use its parts or malloc",
                    e.name()
                ),
                e => format!(
                    "{} is switched off in this emberd's configuration",
                    e.name()
                ),
            },
        })
    })?;
    let window = (
        crate::shared::clock::to_wall(q.selection.from),
        crate::shared::clock::to_wall(q.selection.to),
    );
    // Only CPU samples carry their tick; the event stores' slots have none
    // (an empty one would show as a blank column).
    let cpu = q.event == Event::Cpu;
    let slots: Vec<crate::store::TimeSlot> = line
        .slots
        .into_iter()
        .map(|s| crate::store::TimeSlot {
            start: crate::shared::clock::to_wall(s.start),
            ticks: if cpu { s.ticks } else { Vec::new() },
            ..s
        })
        .collect();
    let mut heatmap = Heatmap::new(q.event.name(), store_unit(q.event), window, &slots);
    heatmap.history_from = line.oldest.map(crate::shared::clock::to_wall);
    json_body(&heatmap)
}

fn render_profile(st: &AppState, q: &Query) -> Result<Rendered, AppError> {
    let profile = folded_profile(st, q)?;
    let window = (
        crate::shared::clock::to_wall(q.selection.from),
        crate::shared::clock::to_wall(q.selection.to),
    );
    let tree = Tree::build(
        &profile,
        q.event.name(),
        q.event.folded_unit(),
        view::display_unit(q.event),
        window,
    );
    json_body(&tree)
}

/// `GET /heatmap.json`: `{event, unit, from, to, history_from, slots:
/// [[start, seconds, value], ...], tick_ms, ticks: [[start, [value, ...]],
/// ...]}`, values in the store's unit (samples, ns, pages, bytes).
pub async fn heatmap(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    answer(st, raw, "heatmap", render_heatmap).await
}

/// `GET /profile.json`: the folded profile of the query as a tree (see
/// [`Tree`]).
pub async fn profile(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    answer(st, raw, "profile", render_profile).await
}
