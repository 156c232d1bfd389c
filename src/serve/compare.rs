//! The comparison routes: `/diff.svg`, `/diff.folded` (two windows, or a
//! posted baseline against a window) and `/animation.svg`,
//! `/animation.folded` (phases).

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;

use super::{AppError, AppState, Rendered, cached, folded_profile, render_now};
use crate::compare::{Diff, Series};
use crate::profile::Profile;
use crate::query::QueryError;
use crate::query::compare::{CompareKind, CompareQuery, Window};
use crate::render;
use crate::view;

/// Largest baseline profile a `POST /diff.*` may send.
pub const MAX_BASELINE_BYTES: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Folded,
}

fn parse(raw: &str, st: &AppState, kind: CompareKind) -> Result<CompareQuery, QueryError> {
    let params: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect();
    CompareQuery::parse(&params, crate::clock::wall_now(), st.retention_secs, kind)
}

/// The folded profile of `base`'s filters over one window (wall time,
/// mapped onto the store's clock like every other query).
fn window_profile(
    st: &AppState,
    base: &crate::query::Query,
    w: Window,
) -> Result<Profile, AppError> {
    let mut q = base.clone();
    q.selection.from = crate::clock::to_store(w.from);
    q.selection.to = crate::clock::to_store(w.to);
    q.seconds = w.seconds();
    folded_profile(st, &q)
}

fn span(cq: &CompareQuery) -> (u64, u64) {
    let from = cq.windows.iter().map(|w| w.from).min().unwrap_or(0);
    let to = cq.windows.iter().map(|w| w.to).max().unwrap_or(0);
    (crate::clock::to_store(from), crate::clock::to_store(to))
}

fn body_of(fmt: Format, body: Vec<u8>, notes: &[String]) -> Rendered {
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
    notes.extend(diff.notes(unit, show));
    let mut out = Vec::new();
    match fmt {
        Format::Folded => diff.series.write_folded(&mut out),
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
            render::diff::write(&diff, &opts, &mut out)
        }
    }
    .map_err(|e| AppError::Internal(e.to_string()))?;
    Ok(body_of(fmt, out, &notes))
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
    let labels: Vec<String> = cq.windows.iter().map(|w| w.label()).collect();
    let notes = vec![format!(
        "{} phases of {}: {}",
        labels.len(),
        q.event.name(),
        labels.join("; ")
    )];
    let mut out = Vec::new();
    match fmt {
        Format::Folded => series.write_folded(&mut out),
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
            render::animation::write(&series, &opts, &mut out)
        }
    }
    .map_err(|e| AppError::Internal(e.to_string()))?;
    Ok(body_of(fmt, out, &notes))
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
        render_diff(&st2, &cq2, None, fmt)
    })
    .await
}

async fn diff_baseline(
    st: AppState,
    raw: Option<String>,
    body: Bytes,
    fmt: Format,
) -> Result<Response, AppError> {
    let raw = raw.unwrap_or_default();
    let cq = parse(&raw, &st, CompareKind::Baseline)?;
    let st2 = st.clone();
    // Parsing up to 16 MiB is render work: on a blocking thread, within the
    // render limit.
    let rendered = render_now(&st, move || {
        let (baseline, skipped) =
            render::folded::read_lenient(&body[..]).map_err(|e| QueryError {
                param: "body".into(),
                reason: format!("the posted baseline: {e}"),
            })?;
        let mut r = render_diff(&st2, &cq, Some(baseline), fmt)?;
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
    body: Bytes,
) -> Result<Response, AppError> {
    diff_baseline(st, raw, body, Format::Svg).await
}

/// `POST /diff.folded` with a folded baseline as the body.
pub(super) async fn diff_folded_baseline(
    State(st): State<AppState>,
    RawQuery(raw): RawQuery,
    body: Bytes,
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
