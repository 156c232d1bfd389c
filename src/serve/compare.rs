//! The comparison routes: `/diff.svg`, `/diff.folded` (two windows, or a
//! posted baseline against a window) and `/animation.svg`,
//! `/animation.folded` (phases).

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::{
    AppError, AppState, Rendered, cached, folded_profile, note_header, render_now, why_empty,
    with_sources,
};
use crate::query::QueryError;
use crate::query::columns::{Diff, Series};
use crate::query::compare::{CompareKind, CompareQuery, Window};
use crate::query::profile::Profile;
use crate::render;
use crate::render::view;

/// Largest baseline profile a `POST /diff.*` may send.
pub const MAX_BASELINE_BYTES: usize = 16 << 20;

/// Frames kept per line of a posted baseline: four stack depths, room for
/// emberd's own lines (a grouping frame, a kernel and a user stack of
/// [`MAX_STACK_DEPTH`](crate::collect::stack::MAX_STACK_DEPTH) each, and the
/// frames inlined into them). A longer line keeps its root side, so it still
/// lines up with the same callers in the window it is compared with.
pub const MAX_LINE_FRAMES: usize = 4 * (crate::collect::stack::MAX_STACK_DEPTH + 1);

/// What a posted baseline may hold: lines of at most [`MAX_LINE_FRAMES`],
/// and no more frames in all than a graph has nodes, so that parsing and
/// drawing it cost memory in proportion to what is kept.
const POSTED: render::folded::ReadLimits = render::folded::ReadLimits {
    frames_per_line: MAX_LINE_FRAMES,
    frames_total: render::tree::MAX_TREE_NODES,
};

/// What a comparison left out to stay within its bounds, for the
/// `X-Emberd-Cut` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cuts {
    /// Posted lines cut to [`MAX_LINE_FRAMES`].
    lines: usize,
    /// Posted lines left out past [`POSTED`]'s frame budget.
    dropped: usize,
    /// Stacks ended early at [`render::tree::MAX_TREE_NODES`].
    tree: usize,
}

impl Cuts {
    /// `X-Emberd-Cut`: what was cut, by how much, and the limit, if anything.
    fn header(&self) -> Option<(header::HeaderName, HeaderValue)> {
        let nodes = render::tree::MAX_TREE_NODES;
        let parts: Vec<String> = [
            (
                self.lines,
                format!("frames_per_line={MAX_LINE_FRAMES}"),
                "cut_lines",
            ),
            (
                self.dropped,
                format!("frames_total={nodes}"),
                "dropped_lines",
            ),
            (self.tree, format!("tree_nodes={nodes}"), "cut_stacks"),
        ]
        .into_iter()
        .filter(|(n, ..)| *n > 0)
        .map(|(n, limit, what)| format!("{what}={n} ({limit})"))
        .collect();
        if parts.is_empty() {
            return None;
        }
        let v = HeaderValue::from_str(&parts.join("; ")).ok()?;
        Some((header::HeaderName::from_static("x-emberd-cut"), v))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Folded,
}

fn parse(raw: &str, st: &AppState, kind: CompareKind) -> Result<CompareQuery, QueryError> {
    let params: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect();
    CompareQuery::parse(
        &params,
        crate::shared::clock::wall_now(),
        st.retention_secs,
        kind,
    )
}

/// The folded profile of `base`'s filters over one window (wall time,
/// mapped onto the store's clock like every other query).
fn window_profile(
    st: &AppState,
    base: &crate::query::Query,
    w: Window,
) -> Result<Profile, AppError> {
    folded_profile(st, &window_query(base, w))
}

/// `base` over one window, mapped onto the store's clock.
fn window_query(base: &crate::query::Query, w: Window) -> crate::query::Query {
    let mut q = base.clone();
    q.selection.from = crate::shared::clock::to_store(w.from);
    q.selection.to = crate::shared::clock::to_store(w.to);
    q.seconds = w.seconds();
    q
}

/// Why the profile of window `w` (`which`: before, after) is empty.
fn window_note(
    st: &AppState,
    base: &crate::query::Query,
    w: Window,
    which: &str,
) -> Result<String, AppError> {
    let why = why_empty(st, &window_query(base, w))?;
    Ok(format!("{which} ({}): {why}", w.label()))
}

fn span(cq: &CompareQuery) -> (u64, u64) {
    let from = cq.windows.iter().map(|w| w.from).min().unwrap_or(0);
    let to = cq.windows.iter().map(|w| w.to).max().unwrap_or(0);
    (
        crate::shared::clock::to_store(from),
        crate::shared::clock::to_store(to),
    )
}

fn body_of(fmt: Format, body: Vec<u8>, notes: &[String], cuts: Cuts) -> Rendered {
    let mut headers = vec![(
        header::CONTENT_TYPE,
        HeaderValue::from_static(match fmt {
            Format::Svg => "image/svg+xml",
            Format::Folded => "text/plain; charset=utf-8",
        }),
    )];
    if fmt == Format::Folded {
        // Folded text has no comments: what the SVG would say goes here.
        for n in notes {
            if let Ok(v) = HeaderValue::from_str(n) {
                headers.push((header::HeaderName::from_static("x-emberd-note"), v));
            }
        }
    }
    headers.extend(cuts.header());
    Rendered {
        body: body.into(),
        headers,
    }
}

fn render_diff(
    st: &AppState,
    cq: &CompareQuery,
    baseline: Option<Profile>,
    fmt: Format,
    mut cuts: Cuts,
) -> Result<Rendered, AppError> {
    let q = &cq.base;
    let (before, after, before_label) = match baseline {
        Some(b) => (
            b,
            window_profile(st, q, cq.windows[0])?,
            "the posted profile".to_owned(),
        ),
        None => (
            window_profile(st, q, cq.windows[0])?,
            window_profile(st, q, cq.windows[1])?,
            cq.windows[0].label(),
        ),
    };
    let after_w = *cq.windows.last().expect("parse gives the after window");
    // An empty side makes the whole diff one colour: say why it is empty.
    let mut empty = Vec::new();
    if before.is_empty() {
        empty.push(if cq.windows.len() < 2 {
            "before (the posted profile): it holds no samples".to_owned()
        } else {
            window_note(st, q, cq.windows[0], "before")?
        });
    }
    if after.is_empty() {
        empty.push(window_note(st, q, after_w, "after")?);
    }
    let lengths_differ = cq.windows.len() < 2 || cq.windows[0].seconds() != after_w.seconds();
    // In-use views are states at two moments: growth between them is the
    // leak the diff is for, so it is not scaled away unless asked.
    let normalize = if q.event.is_in_use() {
        Some(cq.normalize.unwrap_or(false))
    } else {
        cq.normalize
    };
    let diff = Diff::new(&before, &after, cq.rewrite, normalize, lengths_differ);
    let (unit, factor) = view::display_unit(q.event);
    let show = |v: u64| {
        let x = v as f64 * factor;
        if factor == 1.0 {
            format!("{v}")
        } else {
            format!("{x:.1}")
        }
    };
    let mut notes = vec![format!(
        "{}: before {before_label}, after {}; grouped by {}",
        st.host,
        after_w.label(),
        q.group
    )];
    notes.extend(empty.iter().cloned());
    notes.extend(diff.notes(unit, show));
    let mut out = Vec::new();
    cuts.tree = match fmt {
        Format::Folded => diff.series.write_folded(&mut out).map(|()| 0),
        Format::Svg => {
            let mut opts = render::diff::DiffSvgOptions::new(
                q.svg.title.clone().unwrap_or_else(|| {
                    format!(
                        "{}, differential: {before_label} vs {}",
                        q.event.title(),
                        after_w.label()
                    )
                }),
                unit,
            );
            opts.notes = notes.clone();
            opts.factor = factor;
            opts.negate = cq.negate;
            opts.before = before_label;
            opts.after = after_w.label();
            if let Some(w) = q.svg.width {
                opts.width = w as f64;
            }
            if let Some(m) = q.svg.minwidth {
                opts.min_width = m;
            }
            opts.max_depth = q.svg.maxdepth;
            let (svg, cut) = render::diff::render(&diff, &opts);
            out = svg.into_bytes();
            Ok(cut)
        }
    }
    .map_err(|e| AppError::Internal(e.to_string()))?;
    let mut r = body_of(fmt, out, &notes, cuts);
    if fmt == Format::Svg {
        // The folded answer carries every note; the SVG shows them, and
        // its headers say the ones a script needs to know.
        r.headers.extend(empty.iter().map(|n| note_header(n)));
    }
    r.headers.extend(windows_headers(st, cq));
    Ok(r)
}

/// Each window's `X-Emberd-Resolution` and gap notes (see
/// [`super::history_headers`]).
fn windows_headers(st: &AppState, cq: &CompareQuery) -> Vec<(header::HeaderName, HeaderValue)> {
    cq.windows
        .iter()
        .flat_map(|&w| super::history_headers(st, &window_query(&cq.base, w)))
        .collect()
}

fn render_animation(st: &AppState, cq: &CompareQuery, fmt: Format) -> Result<Rendered, AppError> {
    let q = &cq.base;
    let profiles = cq
        .windows
        .iter()
        .map(|&w| window_profile(st, q, w))
        .collect::<Result<Vec<_>, _>>()?;
    let series = Series::from_profiles(&profiles, cq.rewrite);
    let (unit, factor) = view::display_unit(q.event);
    // A phase with no history is labelled so, not shown as a quiet phase.
    let start = with_sources(st, q, view::history_start)?;
    let now = crate::shared::clock::now();
    let labels: Vec<String> = cq
        .windows
        .iter()
        .map(|&w| {
            let (from, to) = (
                crate::shared::clock::to_store(w.from),
                crate::shared::clock::to_store(w.to),
            );
            if to <= start {
                format!("{} (before history)", w.label())
            } else if from > now {
                format!("{} (after now)", w.label())
            } else {
                w.label()
            }
        })
        .collect();
    let notes = vec![format!(
        "{} phases of {}: {}",
        labels.len(),
        q.event.name(),
        labels.join("; ")
    )];
    let mut out = Vec::new();
    let tree = match fmt {
        Format::Folded => series.write_folded(&mut out).map(|()| 0),
        Format::Svg => {
            let title = q.svg.title.clone().unwrap_or_else(|| {
                format!("{}, animated: {}", q.event.title(), st.host)
            });
            let mut opts = render::animation::AnimationOptions::new(title, labels, unit);
            opts.subtitle = Some(format!(
                "{} phases, grouped by {}; outlined red: growing into the next phase, blue: shrinking",
                cq.windows.len(),
                q.group
            ));
            opts.factor = factor;
            opts.relative = cq.relative;
            if let Some(w) = q.svg.width {
                opts.width = w as f64;
            }
            if let Some(m) = q.svg.minwidth {
                opts.min_width = m;
            }
            opts.max_depth = q.svg.maxdepth;
            let (svg, cut) = render::animation::render(&series, &opts);
            out = svg.into_bytes();
            Ok(cut)
        }
    }
    .map_err(|e| AppError::Internal(e.to_string()))?;
    let cuts = Cuts {
        tree,
        ..Cuts::default()
    };
    let mut r = body_of(fmt, out, &notes, cuts);
    r.headers.extend(windows_headers(st, cq));
    Ok(r)
}

async fn diff(
    st: AppState,
    raw: Option<String>,
    fmt: Format,
    route: &'static str,
) -> Result<Response, AppError> {
    let raw = raw.unwrap_or_default();
    let cq = parse(&raw, &st, CompareKind::Diff)?;
    let (st2, cq2) = (st.clone(), cq.clone());
    cached(&st, route, &raw, span(&cq), move || {
        render_diff(&st2, &cq2, None, fmt, Cuts::default())
    })
    .await
}

/// Why a posted body was not read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// More than [`MAX_BASELINE_BYTES`] came.
    #[error("more than {MAX_BASELINE_BYTES} bytes")]
    TooLarge,
    /// The connection failed mid-body.
    #[error("{0}")]
    Read(#[from] axum::Error),
}

/// Reads a body of at most [`MAX_BASELINE_BYTES`] into one buffer of the
/// size it claims (`claimed`, its Content-Length), so that reading costs
/// the body once, not the doublings of a growing buffer.
async fn read_body(body: Body, claimed: u64) -> Result<Vec<u8>, BodyError> {
    use axum::body::HttpBody;
    let mut out = Vec::with_capacity(claimed.min(MAX_BASELINE_BYTES as u64) as usize);
    let mut body = std::pin::pin!(body);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        if let Ok(data) = frame?.into_data() {
            if out.len() + data.len() > MAX_BASELINE_BYTES {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

async fn diff_baseline(
    st: AppState,
    raw: Option<String>,
    body: Body,
    fmt: Format,
) -> Result<Response, AppError> {
    let raw = raw.unwrap_or_default();
    let cq = parse(&raw, &st, CompareKind::Baseline)?;
    let too_large = |e: &dyn std::fmt::Display| {
        (
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "body: the posted baseline is over {} MiB, or was not sent whole ({e})\n",
                MAX_BASELINE_BYTES >> 20
            ),
        )
            .into_response()
    };
    // A Content-Length over the limit is refused before anything is read.
    let claimed = axum::body::HttpBody::size_hint(&body).lower();
    if claimed > MAX_BASELINE_BYTES as u64 {
        return Ok(too_large(&format_args!("Content-Length {claimed}")));
    }
    // Read only while holding one of a few permits, until its diff is
    // drawn: 64 requests in flight could otherwise buffer 64 bodies of
    // 16 MiB before any waits for a render.
    let _posting = st
        .posts
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| AppError::Internal(e.to_string()))?;
    let body = match read_body(body, claimed).await {
        Ok(b) => b,
        Err(e) => return Ok(too_large(&e)),
    };
    let st2 = st.clone();
    // Parsing up to 16 MiB is render work: on a blocking thread, within the
    // render limit, and within POSTED's bounds.
    let rendered = render_now(&st, move || {
        let (baseline, skipped) =
            render::folded::read_bounded(&body[..], POSTED).map_err(|e| QueryError {
                param: "body".into(),
                reason: format!("the posted baseline: {e}"),
            })?;
        // The body is parsed: its bytes go before the graph is drawn.
        drop(body);
        let cuts = Cuts {
            lines: skipped.cut_lines,
            dropped: skipped.dropped_lines,
            tree: 0,
        };
        let mut r = render_diff(&st2, &cq, Some(baseline), fmt, cuts)?;
        if skipped.malformed > 0 {
            let first = skipped
                .first
                .first()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default();
            if let Ok(v) = HeaderValue::from_str(&format!(
                "skipped {} malformed lines of the baseline{first}",
                skipped.malformed
            )) {
                r.headers
                    .push((header::HeaderName::from_static("x-emberd-note"), v));
            }
        }
        Ok(r)
    })
    .await?;
    Ok(rendered.response())
}

async fn animation(
    st: AppState,
    raw: Option<String>,
    fmt: Format,
    route: &'static str,
) -> Result<Response, AppError> {
    let raw = raw.unwrap_or_default();
    let cq = parse(&raw, &st, CompareKind::Animation)?;
    let (st2, cq2) = (st.clone(), cq.clone());
    cached(&st, route, &raw, span(&cq), move || {
        render_animation(&st2, &cq2, fmt)
    })
    .await
}

/// `GET /diff.svg`.
pub(super) async fn diff_svg(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    diff(st, raw, Format::Svg, "diff.svg").await
}

/// `GET /diff.folded`: `stack before after`.
pub(super) async fn diff_folded(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    diff(st, raw, Format::Folded, "diff.folded").await
}

/// `POST /diff.svg` with a folded baseline as the body.
pub(super) async fn diff_svg_baseline(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<Response, AppError> {
    diff_baseline(st, raw, body, Format::Svg).await
}

/// `POST /diff.folded` with a folded baseline as the body.
pub(super) async fn diff_folded_baseline(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
    body: Body,
) -> Result<Response, AppError> {
    diff_baseline(st, raw, body, Format::Folded).await
}

/// `GET /animation.svg`.
pub(super) async fn animation_svg(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    animation(st, raw, Format::Svg, "animation.svg").await
}

/// `GET /animation.folded`: `stack v1 ... vK`.
pub(super) async fn animation_folded(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Result<Response, AppError> {
    animation(st, raw, Format::Folded, "animation.folded").await
}
