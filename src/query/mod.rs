//! Query: HTTP parameters, checked, into a time window, filters and a
//! grouping; and store rows into profiles.
//!
//! Every parameter is checked; an unknown one, a repeated one or a bad value
//! is a [`QueryError`] naming the parameter and the reason, never a guess.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use regex::{Regex, RegexBuilder};

use crate::query::profile::Grouping;
use crate::shared::Pid;
use crate::store::Selection;
use palette::Palette;

pub mod calltree;
pub mod columns;
pub mod compare;
mod fold;
pub mod palette;
pub mod profile;

/// Longest regex accepted, in bytes.
pub const MAX_REGEX_LEN: usize = 1024;
/// Compiled-size limit of a regex, so that no query can stall the server.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Default window: the last 30 seconds.
pub const DEFAULT_SECONDS: u64 = 30;
/// Latest time a window may reach, in unix seconds (2262-04-11T23:47:16Z):
/// pprof carries the window as signed nanoseconds, which go no further.
pub const MAX_UNIX_SECONDS: u64 = i64::MAX as u64 / 1_000_000_000;

/// A parameter the client got wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad parameter {param:?}: {reason}")]
pub struct QueryError {
    /// The parameter.
    pub param: String,
    /// What is wrong and what would be right.
    pub reason: String,
}

pub(crate) fn bad(param: &str, reason: impl Into<String>) -> QueryError {
    QueryError {
        param: param.to_owned(),
        reason: reason.into(),
    }
}

pub use crate::shared::events::Event;

/// Flame-graph options, named as flamegraph.pl names them.
#[derive(Debug, Clone, Default)]
pub struct SvgParams {
    /// `title`.
    pub title: Option<String>,
    /// `colors`: a flamegraph.pl palette name.
    pub colors: Option<Palette>,
    /// `hash`: colour by function name hash.
    pub hash: bool,
    /// `inverted`: icicle graph.
    pub inverted: bool,
    /// `reverse`: reverse the stacks (callee-rooted).
    pub reverse: bool,
    /// `minwidth`: omit frames narrower than this many pixels.
    pub minwidth: Option<f64>,
    /// `width`: image width in pixels.
    pub width: Option<usize>,
    /// `maxdepth`: the depth where SVG towers are cut under a
    /// `[deeper: N frames]` frame; 0 draws every frame. Default: one
    /// screen's rows, or the deepest readable frame.
    pub maxdepth: Option<usize>,
    /// `height`: frame height in pixels (flamegraph.pl's `--height`).
    pub height: Option<u32>,
}

/// A checked query.
#[derive(Debug, Clone)]
pub struct Query {
    /// Event.
    pub event: Event,
    /// Window and row filters.
    pub selection: Selection,
    /// First frame of each stack.
    pub group: Grouping,
    /// Keep only stacks whose folded line matches.
    pub include: Option<Regex>,
    /// Drop stacks whose folded line matches.
    pub exclude: Option<Regex>,
    /// SVG options (ignored by other formats).
    pub svg: SvgParams,
    /// Length of the window asked for, in seconds.
    pub seconds: u64,
    /// Python frames with their line, `qualname (file.py:LINE)`, and Java
    /// frames, `pkg.Class.method:LINE_[j]` (`lines=1`).
    pub lines: bool,
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const KNOWN: &[&str] = &[
    "seconds",
    "from",
    "to",
    "event",
    "pid",
    "tid",
    "comm",
    "unit",
    "container",
    "service",
    "group",
    "include",
    "exclude",
    "idle",
    "title",
    "colors",
    "hash",
    "inverted",
    "reverse",
    "minwidth",
    "width",
    "maxdepth",
    "height",
    "lines",
];

impl Query {
    /// Checks `params` (in order of appearance) against `now` (unix seconds)
    /// and a history of `retention` seconds.
    pub fn parse(
        params: &[(String, String)],
        now: u64,
        retention: u64,
    ) -> Result<Self, QueryError> {
        let mut map: HashMap<&str, &str> = HashMap::new();
        for (k, v) in params {
            if !KNOWN.contains(&k.as_str()) {
                return Err(bad(
                    k,
                    format!("unknown parameter; known: {}", KNOWN.join(", ")),
                ));
            }
            if map.insert(k, v).is_some() {
                return Err(bad(k, "given more than once"));
            }
        }
        let get = |k: &str| map.get(k).copied();

        let event = match get("event") {
            None => Event::Cpu,
            Some(name) => Event::from_name(name).ok_or_else(|| {
                bad(
                    "event",
                    format!(
                        "unknown event {name:?}; known: {}",
                        Event::ALL.map(Event::name).join(", ")
                    ),
                )
            })?,
        };
        let mut ms = None;
        let (from, to) = match (get("seconds"), get("from"), get("to")) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(bad("seconds", "give either seconds or from/to, not both"));
            }
            (s, None, None) => {
                let secs = match s {
                    None => DEFAULT_SECONDS,
                    Some(s) => parse_u64("seconds", s)?,
                };
                if secs == 0 || secs > retention {
                    return Err(bad(
                        "seconds",
                        format!("{secs} is out of range: use 1..={retention} (the retention)"),
                    ));
                }
                let to = window_end("seconds", now)?;
                let from = to.checked_sub(secs).ok_or_else(|| {
                    bad(
                        "seconds",
                        format!(
                            "{secs} s before now ({}) is before 1970-01-01",
                            format_rfc3339(now)
                        ),
                    )
                })?;
                (from, to)
            }
            (None, f, t) => {
                let from = match f {
                    Some(f) => parse_time_ms("from", f, now)?,
                    None => now.saturating_sub(DEFAULT_SECONDS).saturating_add(1) * 1000,
                };
                let to = match t {
                    Some(t) => parse_time_ms("to", t, now)?,
                    None => window_end("to", now)? * 1000,
                };
                if from >= to {
                    return Err(bad(
                        "from",
                        format!(
                            "from ({}) must be before to ({})",
                            format_ms(from),
                            format_ms(to)
                        ),
                    ));
                }
                if from % 1000 != 0 || to % 1000 != 0 {
                    ms = Some((from, to));
                }
                (from / 1000, to.div_ceil(1000))
            }
        };
        let selection = Selection {
            from,
            to,
            ms,
            pid: get("pid").map(|v| parse_u32("pid", v)).transpose()?,
            tid: get("tid").map(|v| parse_u32("tid", v)).transpose()?,
            comm: get("comm").map(|v| parse_regex("comm", v)).transpose()?,
            unit: get("unit").map(|v| parse_label("unit", v)).transpose()?,
            container: get("container").map(parse_container).transpose()?,
            service: get("service")
                .map(|v| parse_label("service", v))
                .transpose()?,
            idle: get("idle")
                .map(|v| parse_bool("idle", v))
                .transpose()?
                .unwrap_or(false),
        };
        let group = match get("group") {
            None => Grouping::Process,
            Some(g) => g.parse().map_err(|e: String| bad("group", e))?,
        };
        let svg = SvgParams {
            title: get("title").map(|t| {
                if t.len() > 512 {
                    t[..t.floor_char_boundary(512)].to_owned()
                } else {
                    t.to_owned()
                }
            }),
            colors: get("colors")
                .map(|c| c.parse::<Palette>().map_err(|e| bad("colors", e)))
                .transpose()?,
            hash: get("hash")
                .map(|v| parse_bool("hash", v))
                .transpose()?
                .unwrap_or(false),
            inverted: get("inverted")
                .map(|v| parse_bool("inverted", v))
                .transpose()?
                .unwrap_or(false),
            reverse: get("reverse")
                .map(|v| parse_bool("reverse", v))
                .transpose()?
                .unwrap_or(false),
            minwidth: get("minwidth")
                .map(|v| match v.parse::<f64>() {
                    Ok(w) if w.is_finite() && (0.0..=10_000.0).contains(&w) => Ok(w),
                    _ => Err(bad(
                        "minwidth",
                        format!("{v:?} is not a width in pixels (0-10000)"),
                    )),
                })
                .transpose()?,
            width: get("width")
                .map(|v| match v.parse::<usize>() {
                    Ok(w) if (100..=100_000).contains(&w) => Ok(w),
                    _ => Err(bad(
                        "width",
                        format!("{v:?} is not a width in pixels (100-100000)"),
                    )),
                })
                .transpose()?,
            maxdepth: get("maxdepth")
                .map(|v| match v.parse::<usize>() {
                    Ok(d) if d <= 10_000 => Ok(d),
                    _ => Err(bad(
                        "maxdepth",
                        format!("{v:?} is not a depth in frames (0-10000; 0: no cut)"),
                    )),
                })
                .transpose()?,
            height: get("height")
                .map(|v| match v.parse::<u32>() {
                    Ok(h) if (4..=100).contains(&h) => Ok(h),
                    _ => Err(bad(
                        "height",
                        format!("{v:?} is not a frame height in pixels (4-100)"),
                    )),
                })
                .transpose()?,
        };
        Ok(Query {
            event,
            seconds: to - from,
            lines: get("lines")
                .map(|v| parse_bool("lines", v))
                .transpose()?
                .unwrap_or(false),
            selection,
            group,
            include: get("include")
                .map(|v| parse_regex("include", v))
                .transpose()?,
            exclude: get("exclude")
                .map(|v| parse_regex("exclude", v))
                .transpose()?,
            svg,
        })
    }
}

pub(crate) fn parse_u64(param: &str, v: &str) -> Result<u64, QueryError> {
    v.parse()
        .map_err(|_| bad(param, format!("{v:?} is not a whole number")))
}

fn parse_u32(param: &str, v: &str) -> Result<u32, QueryError> {
    // u32::MAX stands for exited processes in merged history: not an id a
    // process can have, so not one to select by.
    v.parse()
        .ok()
        .filter(|&id| id != Pid::EXITED.0)
        .ok_or_else(|| bad(param, format!("{v:?} is not a process or thread id")))
}

pub(crate) fn parse_bool(param: &str, v: &str) -> Result<bool, QueryError> {
    match v {
        "1" | "true" | "yes" | "" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(bad(param, format!("{v:?} is not a boolean: use 1 or 0"))),
    }
}

/// A unit or service name: non-empty, at most 256 bytes (systemd's limit).
fn parse_label(param: &str, v: &str) -> Result<String, QueryError> {
    if v.is_empty() || v.len() > 256 {
        return Err(bad(
            param,
            format!("{v:?}: give a name of 1 to 256 bytes, as the label shows it"),
        ));
    }
    Ok(v.to_owned())
}

/// A container id or its prefix, as `docker` takes them: 1 to 64 hex digits.
fn parse_container(v: &str) -> Result<String, QueryError> {
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(
            "container",
            format!("{v:?} is not a container id: give 1 to 64 hex digits (a prefix matches)"),
        ));
    }
    Ok(v.to_ascii_lowercase())
}

fn parse_regex(param: &str, v: &str) -> Result<Regex, QueryError> {
    if v.len() > MAX_REGEX_LEN {
        return Err(bad(
            param,
            format!("regex longer than {MAX_REGEX_LEN} bytes"),
        ));
    }
    RegexBuilder::new(v)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| bad(param, format!("invalid regex: {e}")))
}

/// The exclusive end of a window ending now: `now + 1`, within
/// [`MAX_UNIX_SECONDS`].
pub(crate) fn window_end(param: &str, now: u64) -> Result<u64, QueryError> {
    now.checked_add(1)
        .filter(|&t| t <= MAX_UNIX_SECONDS)
        .ok_or_else(|| {
            bad(
                param,
                format!(
                    "the clock ({}) is past the last time a window can reach",
                    format_rfc3339(now)
                ),
            )
        })
}

/// Unix seconds, RFC 3339, `now`, or relative to now (`-5m`, `-30s`, `-1h`,
/// `-2d`), within `0..=`[`MAX_UNIX_SECONDS`]. All arithmetic is checked: a time that
/// does not fit is an error, never a wrapped or clamped value.
pub(crate) fn parse_time(param: &str, v: &str, now: u64) -> Result<u64, QueryError> {
    let t = if v == "now" {
        now
    } else if let Some(rel) = v.strip_prefix('-') {
        let (num, unit) =
            rel.split_at(rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len()));
        if num.is_empty() {
            return Err(bad(
                param,
                format!("{v:?}: a relative time is like -30s, -5m, -1h"),
            ));
        }
        let mult: u64 = match unit {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86400,
            _ => return Err(bad(param, format!("{v:?}: unit must be s, m, h or d"))),
        };
        let back = num
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(|| bad(param, format!("{v:?}: too far back")))?;
        now.checked_sub(back).ok_or_else(|| {
            bad(
                param,
                format!(
                    "{v:?} from now ({}) is before 1970-01-01",
                    format_rfc3339(now)
                ),
            )
        })?
    } else if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        v.parse::<u64>()
            .map_err(|_| bad(param, format!("{v:?}: too large for unix seconds")))?
    } else {
        parse_rfc3339(v).map_err(|why| {
            bad(
                param,
                format!(
                    "{v:?} is not unix seconds, RFC 3339 (2026-11-21T10:00:00Z), now or relative (-5m): {why}"
                ),
            )
        })?
    };
    if t > MAX_UNIX_SECONDS {
        return Err(bad(
            param,
            format!(
                "{t} is after the last time a window can reach (2262-04-11T23:47:16Z, {MAX_UNIX_SECONDS})"
            ),
        ));
    }
    Ok(t)
}

/// [`parse_time`] in milliseconds: unix seconds and RFC 3339 times may
/// carry a fraction (`1763830000.25`, `2026-11-22T10:00:00.250Z`), kept to
/// the millisecond, for selections within a second (the web page's heat
/// map has 20 ms rows).
pub(crate) fn parse_time_ms(param: &str, v: &str, now: u64) -> Result<u64, QueryError> {
    let (whole, frac) = match v.split_once('.') {
        Some((w, f)) if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) => {
            if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(
                    param,
                    format!("{v:?}: a fraction of a second needs digits after the dot"),
                ));
            }
            (w, f)
        }
        _ => {
            // RFC 3339: the fraction, if any, follows the seconds at 19.
            let frac = v
                .get(19..)
                .and_then(|r| r.strip_prefix('.'))
                .map_or("", |r| {
                    r.split(|c: char| !c.is_ascii_digit()).next().unwrap_or("")
                });
            (v, frac)
        }
    };
    let secs = parse_time(param, whole, now)?;
    let ms = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u64, |acc, b| acc * 10 + u64::from(b - b'0'));
    Ok(secs * 1000 + ms)
}

/// Unix milliseconds in RFC 3339, `2026-11-22T10:00:00.250Z` (no fraction
/// on a whole second): error messages name times as users write them, not
/// as raw unix seconds.
fn format_ms(ms: u64) -> String {
    let whole = format_rfc3339(ms / 1000);
    if ms.is_multiple_of(1000) {
        whole
    } else {
        format!("{}.{:03}Z", whole.trim_end_matches('Z'), ms % 1000)
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ`, by the inverse algorithm (civil
/// from days, Howard Hinnant's).
pub fn format_rfc3339(t: u64) -> String {
    let (days, secs) = ((t / 86400) as i64, t % 86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The number in `v[r]`: ASCII digits only (no sign, no spaces).
fn digits(v: &str, r: std::ops::Range<usize>) -> Option<i64> {
    let s = v.get(r)?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to unix seconds. Every field has
/// its fixed number of digits and its range (the day that of its month, the
/// offset at most ±23:59), so the arithmetic stays small; it is checked all
/// the same.
fn parse_rfc3339(v: &str) -> Result<u64, &'static str> {
    const SYNTAX: &str = "expected YYYY-MM-DDTHH:MM:SS[.frac] then Z or +HH:MM/-HH:MM";
    let b = v.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(SYNTAX);
    }
    let num = |r: std::ops::Range<usize>| digits(v, r).ok_or(SYNTAX);
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err("month out of range"),
    };
    if !(1..=month_days).contains(&d) {
        return Err("day out of range for its month");
    }
    if h > 23 || mi > 59 || s > 60 {
        return Err("time of day out of range");
    }
    // `v.get(17..19)` succeeded, so 19 is a character boundary.
    let mut rest = &v[19..];
    if let Some(r) = rest.strip_prefix('.') {
        let frac = r.trim_start_matches(|c: char| c.is_ascii_digit());
        if frac.len() == r.len() {
            return Err("a fraction needs digits after the dot");
        }
        rest = frac;
    }
    let offset: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let ob = rest.as_bytes();
            let sign = match ob.first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return Err(SYNTAX),
            };
            if ob.len() != 6 || ob[3] != b':' {
                return Err(SYNTAX);
            }
            let (oh, om) = (
                digits(rest, 1..3).ok_or(SYNTAX)?,
                digits(rest, 4..6).ok_or(SYNTAX)?,
            );
            if oh > 23 || om > 59 {
                return Err("offset out of range (at most 23:59)");
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    const TOO_LARGE: &str = "does not fit unix seconds";
    let t = (|| {
        let days = era
            .checked_mul(146_097)?
            .checked_add(doe)?
            .checked_sub(719_468)?;
        days.checked_mul(86400)?
            .checked_add(h * 3600 + mi * 60 + s)?
            .checked_sub(offset)
    })()
    .ok_or(TOO_LARGE)?;
    u64::try_from(t).map_err(|_| "before 1970-01-01")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Result<Query, QueryError> {
        q_at(s, 1_000_000, 3600)
    }

    #[test]
    fn defaults_and_windows() {
        let d = q("").unwrap();
        assert_eq!(
            (d.selection.from, d.selection.to),
            (1_000_000 - 29, 1_000_001)
        );
        let s = q("seconds=5").unwrap();
        assert_eq!(s.seconds, 5);
        let r = q("from=-5m&to=-1m").unwrap();
        assert_eq!(
            (r.selection.from, r.selection.to),
            (1_000_000 - 300, 1_000_000 - 60)
        );
        let abs = q("from=1970-01-12T13:46:40Z&to=1000010").unwrap();
        assert_eq!(abs.selection.from, 1_000_000);
        assert_eq!(
            parse_rfc3339("2026-11-21T10:00:00+01:00"),
            Ok(1_795_251_600)
        );
    }

    #[test]
    fn errors_name_the_parameter() {
        for (input, param) in [
            ("seconds=abc", "seconds"),
            ("seconds=0", "seconds"),
            ("seconds=99999", "seconds"),
            ("seconds=5&from=-1m", "seconds"),
            ("from=yesterday", "from"),
            ("from=-1m&to=-2m", "from"),
            ("pid=x", "pid"),
            ("group=cluster", "group"),
            ("comm=(", "comm"),
            ("include=a{99999}{99999}", "include"),
            ("idle=maybe", "idle"),
            ("colors=plaid", "colors"),
            ("width=5", "width"),
            ("maxdepth=-1", "maxdepth"),
            ("maxdepth=deep", "maxdepth"),
            ("height=2", "height"),
            ("height=tall", "height"),
            ("event=gpu", "event"),
            ("event=", "event"),
            ("bogus=1", "bogus"),
            ("pid=1&pid=2", "pid"),
        ] {
            let e = q(input).unwrap_err();
            assert_eq!(e.param, param, "{input}: {e}");
            assert!(!e.reason.is_empty());
        }
    }

    /// Times in window errors are RFC 3339, as users give them, not unix
    /// seconds.
    #[test]
    fn window_errors_name_times_in_rfc3339() {
        let now = 1_795_700_510; // 2026-11-26T13:41:50Z
        let e = q_at("from=2030-01-01T00:00:00Z", now, 3600).unwrap_err();
        assert_eq!(e.param, "from");
        assert_eq!(
            e.reason,
            "from (2030-01-01T00:00:00Z) must be before to (2026-11-26T13:41:51Z)"
        );
        let e = q_at("from=1000.5&to=1000.25", now, 3600).unwrap_err();
        assert_eq!(
            e.reason,
            "from (1970-01-01T00:16:40.500Z) must be before to (1970-01-01T00:16:40.250Z)"
        );
    }

    fn q_at(s: &str, now: u64, retention: u64) -> Result<Query, QueryError> {
        let params: Vec<(String, String)> = s
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        Query::parse(&params, now, retention)
    }

    /// Each input is an error naming `param`, whatever `now` is (no wrap,
    /// no clamp, no panic).
    fn rejects(input: &str, param: &str, now: u64, retention: u64) {
        match q_at(input, now, retention) {
            Ok(q) => panic!(
                "{input} (now {now}): accepted as [{}, {})",
                q.selection.from, q.selection.to
            ),
            Err(e) => {
                assert_eq!(e.param, param, "{input} (now {now}): {e}");
                assert!(!e.reason.is_empty());
            }
        }
    }

    #[test]
    fn relative_time_overflow_is_an_error() {
        for input in [
            "from=-99999999999999999999m",
            "from=-99999999999999999999",
            "from=-18446744073709551615d",
            "from=-307445734561825861m", // * 60 just past u64::MAX
            "from=-213503982334601d",
            "from=-5124095576030432h",
            "from=-1000001s", // before 1970 at now = 1_000_000
            "from=-12d",
        ] {
            rejects(input, "from", 1_000_000, 3600);
        }
        rejects("from=-1m&to=-99999999999999999999h", "to", 1_000_000, 3600);
        // Right at the edge: exactly now seconds back is 1970-01-01T00:00:00Z.
        let edge = q("from=-1000000s&to=-999999").unwrap();
        assert_eq!((edge.selection.from, edge.selection.to), (0, 1));
    }

    #[test]
    fn absolute_time_overflow_is_an_error() {
        for input in [
            "from=99999999999999999999",
            "from=18446744073709551615",
            "to=18446744073709551615",
            "to=9223372037",
        ] {
            let param = input.split('=').next().unwrap();
            rejects(input, param, 1_000_000, 3600);
        }
        // The latest time a window reaches still fits pprof's i64 nanoseconds.
        let last = q(&format!("from=1&to={MAX_UNIX_SECONDS}")).unwrap();
        assert_eq!(last.selection.to, MAX_UNIX_SECONDS);
        assert!(i64::try_from(last.selection.to as u128 * 1_000_000_000).is_ok());
        assert_eq!(parse_rfc3339("2262-04-11T23:47:16Z"), Ok(MAX_UNIX_SECONDS));
        rejects("to=2262-04-11T23:47:17Z", "to", 1_000_000, 3600);
    }

    #[test]
    fn rfc3339_offsets_and_extreme_years_are_checked() {
        for input in [
            // Offsets that used to be multiplied unchecked (wrapping in release).
            "from=2026-11-21T10:00:00+99999999999999999:00",
            "from=2026-11-21T10:00:00-9223372036854775807:00",
            "from=2026-11-21T10:00:00+00:9999999999999999999",
            "from=2026-11-21T10:00:00+24:00",
            "from=2026-11-21T10:00:00+23:60",
            "from=2026-11-21T10:00:00+1:00",
            "from=2026-11-21T10:00:00+-1:00",
            "from=2026-11-21T10:00:00+01:00:00",
            // Signs and spaces inside fields used to parse as numbers.
            "from=+999-11-21T10:00:00Z",
            "from=-999-11-21T10:00:00Z",
            "from=2026-+1-21T10:00:00Z",
            "from=2026-11-21T 1:00:00Z",
            // Dates that do not exist, and the ends of the 4-digit years.
            "from=2026-02-29T00:00:00Z",
            "from=2026-04-31T00:00:00Z",
            "from=0000-01-01T00:00:00Z",
            "from=0000-01-01T00:00:00-23:59",
            "from=0000-01-01T00:00:00+23:59",
            "from=9999-12-31T23:59:60+23:59",
            "from=9999-12-31T23:59:60-23:59",
            "from=1970-01-01T00:00:00+00:01",
            "from=2026-11-21T10:00:00.Z",
        ] {
            rejects(input, "from", 1_000_000, 3600);
        }
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Ok(1_709_164_800));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00-00:01"), Ok(60));
        assert_eq!(parse_rfc3339("1970-01-01T23:59:00.999999999+23:59"), Ok(0));
        assert_eq!(
            parse_rfc3339("2026-11-21T10:00:00-23:59"),
            Ok(1_795_255_200 + 23 * 3600 + 59 * 60)
        );
    }

    #[test]
    fn fractions_of_seconds_select_milliseconds() {
        let q = q_at("from=1000.25&to=1000.5", 2000, 3600).unwrap();
        assert_eq!((q.selection.from, q.selection.to), (1000, 1001));
        assert_eq!(q.selection.ms, Some((1_000_250, 1_000_500)));
        let q = q_at("from=1970-01-01T00:16:40.1Z&to=1001", 2000, 3600).unwrap();
        assert_eq!(q.selection.ms, Some((1_000_100, 1_001_000)));
        // Whole seconds stay whole: no sub-second window.
        let q = q_at("from=1000.000&to=1001", 2000, 3600).unwrap();
        assert_eq!(q.selection.ms, None);
        rejects("from=1000.&to=1001", "from", 2000, 3600);
        rejects("from=1000.5x&to=1001", "from", 2000, 3600);
        rejects("from=1000.5&to=1000.5", "from", 2000, 3600);
        rejects("from=1000.5&to=1000.4", "from", 2000, 3600);
    }

    #[test]
    fn seconds_and_clock_edges_are_checked() {
        // A retention longer than the clock's age: seconds reach before 1970.
        rejects("seconds=3600", "seconds", 100, 3600);
        let q1 = q_at("seconds=101", 100, 3600).unwrap();
        assert_eq!((q1.selection.from, q1.selection.to), (0, 101));
        // A clock at its end: every default window end is refused, not wrapped.
        rejects("", "seconds", u64::MAX, 3600);
        rejects("seconds=5", "seconds", u64::MAX, u64::MAX);
        rejects("from=1", "to", u64::MAX, 3600);
        rejects("from=-1m", "from", u64::MAX, 3600);
        rejects("from=now", "from", u64::MAX, 3600);
        let q2 = q_at("from=-1m&to=now", 1_000_000, 3600).unwrap();
        assert_eq!(
            (q2.selection.from, q2.selection.to, q2.seconds),
            (999_940, 1_000_000, 60)
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        /// RFC 3339-shaped text, valid or nearly so, over the whole 4-digit
        /// year range and with offsets up to and past +-23:59.
        fn rfc3339() -> impl Strategy<Value = String> {
            let offset = prop_oneof![
                Just("Z".to_owned()),
                (any::<bool>(), 0u32..=25, 0u32..=61).prop_map(|(neg, h, m)| format!(
                    "{}{h:02}:{m:02}",
                    if neg { '-' } else { '+' }
                )),
                Just("+23:59".to_owned()),
                Just("-23:59".to_owned()),
                "[+-][0-9]{1,22}:[0-9]{1,22}",
            ];
            let year = prop_oneof![Just(0u32), Just(9999u32), 0u32..=9999, 1970u32..=2100];
            (
                year,
                0u32..=13,
                0u32..=32,
                0u32..=24,
                0u32..=60,
                0u32..=61,
                prop_oneof![Just(String::new()), "\\.[0-9]{0,12}"],
                offset,
            )
                .prop_map(|(y, mo, d, h, mi, s, frac, off)| {
                    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}{off}")
                })
        }

        /// Values for `seconds`, `from` and `to`: numbers of every size,
        /// relative times, RFC 3339, `now`, and arbitrary text.
        fn time_value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<u64>().prop_map(|n| n.to_string()),
                (0u64..=20_000_000).prop_map(|n| n.to_string()),
                "[0-9]{15,30}",
                ("[0-9]{1,25}", "(|s|m|h|d|x)").prop_map(|(n, u)| format!("-{n}{u}")),
                (0u64..=100_000, "(|s|m|h|d)").prop_map(|(n, u)| format!("-{n}{u}")),
                Just("-99999999999999999999m".to_owned()),
                Just("now".to_owned()),
                rfc3339(),
                ".{0,30}",
            ]
        }

        fn clock() -> impl Strategy<Value = u64> {
            prop_oneof![
                0u64..=2_000_000_000,
                any::<u64>(),
                Just(u64::MAX),
                Just(MAX_UNIX_SECONDS),
                Just(0u64),
            ]
        }

        use super::super::format_rfc3339;

        /// Times a client would send, around a clock of 2026.
        fn plausible_time() -> impl Strategy<Value = String> {
            prop_oneof![
                (1_700_000_000u64..=1_900_000_000).prop_map(|n| n.to_string()),
                (0u64..=3000, "(|s|m|h|d)").prop_map(|(n, u)| format!("-{n}{u}")),
                Just("now".to_owned()),
                // 2026-01-01T00:00:00Z to 2038.
                (1_767_225_600u64..=2_167_225_600).prop_map(format_rfc3339),
                time_value(),
            ]
        }

        /// Checks one parse; true if it was accepted.
        fn check(params: &[(String, String)], now: u64, retention: u64) -> bool {
            match Query::parse(params, now, retention) {
                Ok(q) => {
                    let (from, to) = (q.selection.from, q.selection.to);
                    assert!(from < to, "{params:?} at {now}: window [{from}, {to})");
                    assert!(to <= MAX_UNIX_SECONDS, "{params:?} at {now}: to {to}");
                    assert_eq!(q.seconds, to - from);
                    true
                }
                Err(e) => {
                    assert!(!e.reason.is_empty(), "{e:?}");
                    assert!(
                        params.iter().any(|(k, _)| *k == e.param)
                            || ["seconds", "from", "to"].contains(&e.param.as_str()),
                        "{params:?}: error names {:?}",
                        e.param
                    );
                    false
                }
            }
        }

        /// Just the window parameters, so that many of them are accepted.
        #[test]
        fn window_is_ordered() {
            use proptest::test_runner::{Config, TestRunner};
            let accepted = std::cell::Cell::new(0usize);
            let mut runner = TestRunner::new(Config {
                cases: 256,
                failure_persistence: None,
                ..Config::default()
            });
            let strategy = (
                prop::option::weighted(
                    0.2,
                    prop_oneof![(1u64..=4000).prop_map(|n| n.to_string()), time_value()],
                ),
                prop::option::of(plausible_time()),
                prop::option::of(plausible_time()),
                prop_oneof![4 => 1_780_000_000u64..=1_800_000_000, 1 => clock()],
                prop_oneof![1u64..=100_000, any::<u64>()],
            );
            let result = runner.run(&strategy, |(seconds, from, to, now, retention)| {
                let params: Vec<(String, String)> =
                    [("seconds", seconds), ("from", from), ("to", to)]
                        .into_iter()
                        .filter_map(|(k, v)| Some((k.to_owned(), v?)))
                        .collect();
                if check(&params, now, retention) {
                    accepted.set(accepted.get() + 1);
                }
                Ok(())
            });
            if let Err(e) = result {
                panic!("{e}");
            }
            eprintln!("window_is_ordered: {} of 256 accepted", accepted.get());
            assert!(accepted.get() > 0, "no window was accepted");
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Any parameters, known or not, with any values: an answer,
            /// never a panic; an accepted window is non-empty and in range.
            #[test]
            fn parse_never_panics(
                params in prop::collection::vec(
                    (
                        prop_oneof![
                            prop::sample::select(KNOWN).prop_map(str::to_owned),
                            ".{0,12}",
                        ],
                        prop_oneof![time_value(), ".{0,40}"],
                    ),
                    0..6,
                ),
                now in clock(),
                retention in prop_oneof![1u64..=100_000, any::<u64>()],
            ) {
                check(&params, now, retention);
            }


            /// Every second a window can reach prints and parses back.
            #[test]
            fn rfc3339_round_trips(t in prop_oneof![0..=MAX_UNIX_SECONDS, Just(MAX_UNIX_SECONDS)]) {
                let text = format_rfc3339(t);
                prop_assert_eq!(parse_rfc3339(&text), Ok(t), "{}", text);
                prop_assert_eq!(parse_time("from", &text, 0), Ok(t));
            }

            /// An offset moves the time by exactly itself, or the time is
            /// refused: never wrapped.
            #[test]
            fn rfc3339_offset_shifts_exactly(
                text in rfc3339(),
                neg in any::<bool>(),
                oh in 0i64..=23,
                om in 0i64..=59,
            ) {
                let Some(base) = text.strip_suffix('Z') else { return Ok(()) };
                let Ok(utc) = parse_rfc3339(&format!("{base}Z")) else { return Ok(()) };
                let sign = if neg { '-' } else { '+' };
                let shifted = parse_rfc3339(&format!("{base}{sign}{oh:02}:{om:02}"));
                let delta = (oh * 3600 + om * 60) * if neg { -1 } else { 1 };
                let expect = u64::try_from(utc as i64 - delta).map_err(|_| "before 1970-01-01");
                prop_assert_eq!(shifted, expect);
            }
        }
    }
}
