//! Query: HTTP parameters, checked, into a time window, filters and a
//! grouping; and store rows into profiles.
//!
//! Every parameter is checked; an unknown one, a repeated one or a bad value
//! is a [`QueryError`] naming the parameter and the reason, never a guess.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use regex::{Regex, RegexBuilder};

use crate::profile::{FoldedStack, Grouping, Profile};
use crate::store::{QueryResult, Selection};

/// Longest regex accepted, in bytes.
pub const MAX_REGEX_LEN: usize = 1024;
/// Compiled-size limit of a regex, so that no query can stall the server.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Default window: the last 30 seconds.
pub const DEFAULT_SECONDS: u64 = 30;

/// A parameter the client got wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad parameter {param:?}: {reason}")]
pub struct QueryError {
    /// The parameter.
    pub param: String,
    /// What is wrong and what would be right.
    pub reason: String,
}

fn bad(param: &str, reason: impl Into<String>) -> QueryError {
    QueryError {
        param: param.to_owned(),
        reason: reason.into(),
    }
}

/// The events emberd records, and the views built from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Event {
    /// On-CPU samples of the cpu-clock event.
    #[default]
    Cpu,
    /// Off-CPU time, charged to the blocked stack.
    OffCpu,
    /// Blocked time of woken threads, charged to the waker's stack.
    Wakeup,
    /// Blocked stack `--` waker stack.
    OffWake,
    /// Page faults.
    PageFault,
    /// On-CPU and off-CPU time of the same threads, in one graph.
    HotCold,
}

impl Event {
    /// Every event, in documentation order.
    pub const ALL: [Event; 6] = [
        Event::Cpu,
        Event::OffCpu,
        Event::Wakeup,
        Event::OffWake,
        Event::PageFault,
        Event::HotCold,
    ];

    /// The name used in `event=` and `--event`.
    pub fn name(self) -> &'static str {
        match self {
            Event::Cpu => "cpu",
            Event::OffCpu => "offcpu",
            Event::Wakeup => "wakeup",
            Event::OffWake => "offwake",
            Event::PageFault => "pagefault",
            Event::HotCold => "hotcold",
        }
    }

    /// The event named `s`.
    pub fn from_name(s: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.name() == s)
    }

    /// The stored event behind this view (`None` for CPU and hot/cold).
    pub fn kind(self) -> Option<crate::collect::events::EventKind> {
        use crate::collect::events::EventKind;
        match self {
            Event::OffCpu => Some(EventKind::OffCpu),
            Event::Wakeup => Some(EventKind::Wakeup),
            Event::OffWake => Some(EventKind::OffWake),
            Event::PageFault => Some(EventKind::PageFault),
            Event::Cpu | Event::HotCold => None,
        }
    }

    /// Whether values are times (stored in ns, folded in us, drawn in ms).
    pub fn is_time(self) -> bool {
        matches!(
            self,
            Event::OffCpu | Event::Wakeup | Event::OffWake | Event::HotCold
        )
    }

    /// The unit of folded values.
    pub fn folded_unit(self) -> &'static str {
        match self {
            Event::Cpu => "samples",
            Event::PageFault => "pages",
            _ => "us",
        }
    }

    /// The SVG title's event part, with its unit, as flamegraph.pl users know it.
    pub fn title(self) -> &'static str {
        match self {
            Event::Cpu => "CPU Flame Graph (samples)",
            Event::OffCpu => "Off-CPU Time Flame Graph (ms)",
            Event::Wakeup => "Wakeup Time Flame Graph (ms)",
            Event::OffWake => "Off-Wake Time Flame Graph (ms)",
            Event::PageFault => "Page Fault Flame Graph (pages)",
            Event::HotCold => "Hot/Cold Flame Graph (ms)",
        }
    }

    /// The default palette, after flamegraph.pl's habits.
    pub fn palette(self) -> inferno::flamegraph::Palette {
        use inferno::flamegraph::Palette;
        use inferno::flamegraph::color::{BasicPalette, MultiPalette};
        match self {
            Event::Cpu | Event::HotCold => Palette::Multi(MultiPalette::Java),
            Event::OffCpu => Palette::Basic(BasicPalette::Io),
            Event::Wakeup => Palette::Multi(MultiPalette::Wakeup),
            Event::OffWake => Palette::Basic(BasicPalette::Aqua),
            Event::PageFault => Palette::Basic(BasicPalette::Mem),
        }
    }
}

/// Flame-graph options, named as flamegraph.pl names them.
#[derive(Debug, Clone, Default)]
pub struct SvgParams {
    /// `title`.
    pub title: Option<String>,
    /// `colors`: an inferno/flamegraph.pl palette name.
    pub colors: Option<inferno::flamegraph::Palette>,
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
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const KNOWN: &[&str] = &[
    "seconds", "from", "to", "event", "pid", "tid", "comm", "cgroup", "group", "include",
    "exclude", "idle", "title", "colors", "hash", "inverted", "reverse", "minwidth", "width",
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
                (now + 1 - secs, now + 1)
            }
            (None, f, t) => {
                let from = match f {
                    Some(f) => parse_time("from", f, now)?,
                    None => now.saturating_sub(DEFAULT_SECONDS) + 1,
                };
                let to = match t {
                    Some(t) => parse_time("to", t, now)?,
                    None => now + 1,
                };
                if from >= to {
                    return Err(bad(
                        "from",
                        format!("from ({from}) must be before to ({to})"),
                    ));
                }
                (from, to)
            }
        };
        if get("cgroup").is_some() {
            return Err(bad("cgroup", "cgroup filtering is not available yet"));
        }
        let selection = Selection {
            from,
            to,
            pid: get("pid").map(|v| parse_u32("pid", v)).transpose()?,
            tid: get("tid").map(|v| parse_u32("tid", v)).transpose()?,
            comm: get("comm").map(|v| parse_regex("comm", v)).transpose()?,
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
                if t.len() > 512 { t[..t.floor_char_boundary(512)].to_owned() } else { t.to_owned() }
            }),
            colors: get("colors")
                .map(|c| {
                    c.parse::<inferno::flamegraph::Palette>().map_err(|_| {
                        bad("colors", format!("unknown palette {c:?}; use e.g. hot, mem, io, wakeup, java, js, perl, python, rust, aqua, blue, green, red, yellow, purple, orange"))
                    })
                })
                .transpose()?,
            hash: get("hash").map(|v| parse_bool("hash", v)).transpose()?.unwrap_or(false),
            inverted: get("inverted").map(|v| parse_bool("inverted", v)).transpose()?.unwrap_or(false),
            reverse: get("reverse").map(|v| parse_bool("reverse", v)).transpose()?.unwrap_or(false),
            minwidth: get("minwidth")
                .map(|v| match v.parse::<f64>() {
                    Ok(w) if w.is_finite() && (0.0..=10_000.0).contains(&w) => Ok(w),
                    _ => Err(bad("minwidth", format!("{v:?} is not a width in pixels (0-10000)"))),
                })
                .transpose()?,
            width: get("width")
                .map(|v| match v.parse::<usize>() {
                    Ok(w) if (100..=100_000).contains(&w) => Ok(w),
                    _ => Err(bad("width", format!("{v:?} is not a width in pixels (100-100000)"))),
                })
                .transpose()?,
        };
        Ok(Query {
            event,
            seconds: to - from,
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

    /// Folds rows into `profile`, mapping each value with `scale` (dropping
    /// those that become 0) and appending `suffix` to every frame but the
    /// grouping frame.
    pub fn fold_into(
        &self,
        profile: &mut Profile,
        result: &QueryResult<'_>,
        scale: impl Fn(u64) -> u64,
        suffix: &str,
    ) {
        let mut stack_text: HashMap<crate::store::StackId, FoldedStack> = HashMap::new();
        for row in &result.rows {
            let value = scale(row.value);
            if value == 0 {
                continue;
            }
            let frames = stack_text.entry(row.stack).or_insert_with(|| {
                let names: Vec<String> = result
                    .frames(row.stack)
                    .map(|f| format!("{f}{suffix}"))
                    .collect();
                FoldedStack::from_frames(names.iter().map(String::as_str))
            });
            let root = self
                .group
                .root_frame(&row.process_comm, &row.thread_comm, row.pid, row.tid);
            let stack = match root {
                Some(r) => FoldedStack::with_root(&r, frames),
                None if frames.as_str().is_empty() => FoldedStack::from_frames(["[empty]"]),
                None => frames.clone(),
            };
            if self
                .include
                .as_ref()
                .is_some_and(|re| !re.is_match(stack.as_str()))
                || self
                    .exclude
                    .as_ref()
                    .is_some_and(|re| re.is_match(stack.as_str()))
            {
                continue;
            }
            profile.add(stack, value);
        }
    }
}

fn parse_u64(param: &str, v: &str) -> Result<u64, QueryError> {
    v.parse()
        .map_err(|_| bad(param, format!("{v:?} is not a whole number")))
}

fn parse_u32(param: &str, v: &str) -> Result<u32, QueryError> {
    v.parse()
        .map_err(|_| bad(param, format!("{v:?} is not a process or thread id")))
}

fn parse_bool(param: &str, v: &str) -> Result<bool, QueryError> {
    match v {
        "1" | "true" | "yes" | "" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(bad(param, format!("{v:?} is not a boolean: use 1 or 0"))),
    }
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

/// Unix seconds, RFC 3339, or relative to now (`-5m`, `-30s`, `-1h`, `-2d`).
fn parse_time(param: &str, v: &str, now: u64) -> Result<u64, QueryError> {
    if let Some(rel) = v.strip_prefix('-') {
        let (num, unit) =
            rel.split_at(rel.find(|c: char| !c.is_ascii_digit()).unwrap_or(rel.len()));
        let n: u64 = num.parse().map_err(|_| {
            bad(
                param,
                format!("{v:?}: a relative time is like -30s, -5m, -1h"),
            )
        })?;
        let mult = match unit {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86400,
            _ => return Err(bad(param, format!("{v:?}: unit must be s, m, h or d"))),
        };
        return Ok(now.saturating_sub(n.saturating_mul(mult)));
    }
    if v.bytes().all(|b| b.is_ascii_digit()) && !v.is_empty() {
        return parse_u64(param, v);
    }
    parse_rfc3339(v).ok_or_else(|| {
        bad(
            param,
            format!("{v:?} is not unix seconds, RFC 3339 (2026-11-21T10:00:00Z) or relative (-5m)"),
        )
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` to unix seconds.
fn parse_rfc3339(v: &str) -> Option<u64> {
    let b = v.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| v.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &v[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = rest[1..].split_once(':')?;
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60)
        }
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let t = days * 86400 + h * 3600 + mi * 60 + s - offset;
    u64::try_from(t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Result<Query, QueryError> {
        let params: Vec<(String, String)> = s
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        Query::parse(&params, 1_000_000, 3600)
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
            Some(1_795_251_600)
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
}
