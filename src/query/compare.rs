//! Parameters of the comparison routes: `/diff.*` (two windows) and
//! `/animation.*` (phases). Their own parameters are checked here; every
//! other one (event, filters, grouping, SVG options) goes through
//! [`Query::parse`], so the filters mean the same on every route.

use super::{
    DEFAULT_SECONDS, MAX_UNIX_SECONDS, Query, QueryError, bad, format_rfc3339, parse_bool,
    parse_time, parse_u64, window_end,
};
use crate::query::columns::Rewrite;

/// Most phases an animation may have.
pub const MAX_PHASES: usize = 60;
/// Default length of an animation: the last 60 s.
pub const DEFAULT_ANIMATION_SECONDS: u64 = 60;
/// Default number of phases.
pub const DEFAULT_PHASES: usize = 4;

/// A time window, unix seconds `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First second.
    pub from: u64,
    /// End, exclusive.
    pub to: u64,
}

impl Window {
    /// Length in seconds.
    pub fn seconds(self) -> u64 {
        self.to - self.from
    }

    /// `2026-11-22T10:00:00Z + 30 s`: how titles and labels name it.
    pub fn label(self) -> String {
        format!("{} + {} s", format_rfc3339(self.from), self.seconds())
    }
}

/// Which comparison route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareKind {
    /// `/diff.svg`, `/diff.folded`: before and after.
    Diff,
    /// `/animation.svg`, `/animation.folded`: phases.
    Animation,
    /// `POST /diff.*`: the body is before; one window, after.
    Baseline,
}

/// A checked comparison query.
#[derive(Debug, Clone)]
pub struct CompareQuery {
    /// Event, filters, grouping and SVG options, as on `/folded`.
    pub base: Query,
    /// Before then after (diff), or the phases in order (animation).
    pub windows: Vec<Window>,
    /// Name rewrites before stacks are matched.
    pub rewrite: Rewrite,
    /// `normalize`: `None` means automatic (on when the windows differ in
    /// length or total).
    pub normalize: Option<bool>,
    /// `negate`: swapped colours.
    pub negate: bool,
    /// `relative`: phases sized to their own totals.
    pub relative: bool,
}

const DIFF_KEYS: &[&str] = &[
    "before",
    "after",
    "seconds",
    "normalize",
    "strip_hex",
    "strip_numbers",
    "negate",
];
const ANIMATION_KEYS: &[&str] = &[
    "seconds",
    "phases",
    "window",
    "relative",
    "strip_hex",
    "strip_numbers",
];

impl CompareQuery {
    /// Checks `params` for a comparison route, against `now` and a history
    /// of `retention` seconds.
    pub fn parse(
        params: &[(String, String)],
        now: u64,
        retention: u64,
        kind: CompareKind,
    ) -> Result<Self, QueryError> {
        let own = match kind {
            CompareKind::Diff => DIFF_KEYS,
            CompareKind::Animation => ANIMATION_KEYS,
            CompareKind::Baseline => &DIFF_KEYS[1..],
        };
        let mut rest = Vec::new();
        let mut mine: Vec<(&str, &str)> = Vec::new();
        for (k, v) in params {
            match k.as_str() {
                "from" | "to" => {
                    return Err(bad(
                        k,
                        match kind {
                            CompareKind::Diff => {
                                "give the windows as before=FROM,TO and after=FROM,TO (or seconds=N)"
                            }
                            CompareKind::Animation => {
                                "give the phases as window=FROM,TO (repeated) or seconds=N&phases=K"
                            }
                            CompareKind::Baseline => {
                                "the body is before; give after=FROM,TO (or seconds=N)"
                            }
                        },
                    ));
                }
                "before" if kind == CompareKind::Baseline => {
                    return Err(bad(
                        k,
                        "the request body is the before profile; give only after=FROM,TO (or seconds=N)",
                    ));
                }
                k if own.contains(&k) => {
                    if k != "window" && mine.iter().any(|(m, _)| *m == k) {
                        return Err(bad(k, "given more than once"));
                    }
                    mine.push((k, v.as_str()));
                }
                _ => rest.push((k.clone(), v.clone())),
            }
        }
        let base = Query::parse(&rest, now, retention).map_err(|mut e| {
            if e.reason.starts_with("unknown parameter") {
                e.reason = format!("{}; and for this route: {}", e.reason, own.join(", "));
            }
            e
        })?;
        let get = |k: &str| mine.iter().find(|(m, _)| *m == k).map(|(_, v)| *v);
        let flag = |k: &str| get(k).map(|v| parse_bool(k, v)).transpose();
        let rewrite = Rewrite {
            strip_hex: flag("strip_hex")?.unwrap_or(false),
            strip_numbers: flag("strip_numbers")?.unwrap_or(false),
        };
        let oldest = now.saturating_sub(retention);
        let windows = match kind {
            CompareKind::Diff => {
                diff_windows(get("before"), get("after"), get("seconds"), now, retention)?
            }
            CompareKind::Baseline => match (get("after"), get("seconds")) {
                (Some(_), Some(_)) => {
                    return Err(bad("seconds", "give either seconds or after, not both"));
                }
                (Some(a), None) => vec![parse_window("after", a, now)?],
                (None, s) => {
                    let secs = seconds_param(s, DEFAULT_SECONDS)?;
                    if secs > retention {
                        return Err(bad(
                            "seconds",
                            format!("{secs} is out of range: use 1..={retention} (the retention)"),
                        ));
                    }
                    let to = window_end("seconds", now)?;
                    vec![Window {
                        from: to.saturating_sub(secs),
                        to,
                    }]
                }
            },
            CompareKind::Animation => {
                let explicit: Vec<&str> = mine
                    .iter()
                    .filter(|(k, _)| *k == "window")
                    .map(|(_, v)| *v)
                    .collect();
                animation_windows(&explicit, get("seconds"), get("phases"), now, retention)?
            }
        };
        for (i, w) in windows.iter().enumerate() {
            let param = match (kind, i) {
                (CompareKind::Diff, 0) => "before",
                (CompareKind::Diff | CompareKind::Baseline, _) => "after",
                (CompareKind::Animation, _) => "window",
            };
            if w.to <= oldest {
                return Err(bad(
                    param,
                    format!(
                        "{} ends before the oldest history kept ({}; retention {retention} s)",
                        w.label(),
                        format_rfc3339(oldest)
                    ),
                ));
            }
            if w.from > now || w.to > now.saturating_add(1) {
                return Err(bad(
                    param,
                    format!("{} reaches into the future: end it at now", w.label()),
                ));
            }
            if w.seconds() > retention {
                return Err(bad(
                    param,
                    format!(
                        "{} is longer than the history kept ({retention} s)",
                        w.label()
                    ),
                ));
            }
        }
        Ok(Self {
            base,
            windows,
            rewrite,
            normalize: flag("normalize")?,
            negate: flag("negate")?.unwrap_or(false),
            relative: flag("relative")?.unwrap_or(false),
        })
    }
}

/// `FROM,TO` in the syntax `from=`/`to=` take.
fn parse_window(param: &str, v: &str, now: u64) -> Result<Window, QueryError> {
    let (f, t) = v.split_once(',').ok_or_else(|| {
        bad(
            param,
            format!("{v:?} is not FROM,TO (e.g. -10m,-5m or 2026-11-22T10:00:00Z,now)"),
        )
    })?;
    let from = parse_time(param, f.trim(), now)?;
    let to = match t.trim() {
        "now" => window_end(param, now)?,
        t => parse_time(param, t, now)?,
    };
    if from >= to {
        return Err(bad(
            param,
            format!(
                "the window is empty: its start ({}) is not before its end ({})",
                format_rfc3339(from),
                format_rfc3339(to)
            ),
        ));
    }
    Ok(Window { from, to })
}

fn seconds_param(v: Option<&str>, default: u64) -> Result<u64, QueryError> {
    let s = v
        .map(|v| parse_u64("seconds", v))
        .transpose()?
        .unwrap_or(default);
    if s == 0 {
        return Err(bad("seconds", "0 s is an empty window"));
    }
    Ok(s)
}

fn diff_windows(
    before: Option<&str>,
    after: Option<&str>,
    seconds: Option<&str>,
    now: u64,
    retention: u64,
) -> Result<Vec<Window>, QueryError> {
    match (before, after, seconds) {
        (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(bad(
            "seconds",
            "give either seconds or before/after, not both",
        )),
        (Some(b), Some(a), None) => {
            let (b, a) = (
                parse_window("before", b, now)?,
                parse_window("after", a, now)?,
            );
            if b.from > a.from {
                return Err(bad(
                    "before",
                    format!(
                        "before ({}) starts after after ({}): swap them",
                        b.label(),
                        a.label()
                    ),
                ));
            }
            Ok(vec![b, a])
        }
        (Some(_), None, None) => Err(bad(
            "after",
            "missing: give before=FROM,TO and after=FROM,TO",
        )),
        (None, Some(_), None) => Err(bad(
            "before",
            "missing: give before=FROM,TO and after=FROM,TO",
        )),
        (None, None, s) => {
            let secs = seconds_param(s, DEFAULT_SECONDS)?;
            if secs.saturating_mul(2) > retention {
                return Err(bad(
                    "seconds",
                    format!(
                        "{secs} is out of range: two windows of it must fit the retention ({retention} s)"
                    ),
                ));
            }
            let to = window_end("seconds", now)?;
            let (mid, from) = to
                .checked_sub(secs)
                .and_then(|mid| Some((mid, mid.checked_sub(secs)?)))
                .ok_or_else(|| bad("seconds", format!("2 x {secs} s before now is before 1970")))?;
            Ok(vec![Window { from, to: mid }, Window { from: mid, to }])
        }
    }
}

fn animation_windows(
    explicit: &[&str],
    seconds: Option<&str>,
    phases: Option<&str>,
    now: u64,
    retention: u64,
) -> Result<Vec<Window>, QueryError> {
    if !explicit.is_empty() {
        if seconds.is_some() || phases.is_some() {
            return Err(bad(
                "window",
                "give either window=FROM,TO (repeated) or seconds=N&phases=K, not both",
            ));
        }
        if explicit.len() > MAX_PHASES {
            return Err(bad(
                "window",
                format!("{} windows; at most {MAX_PHASES}", explicit.len()),
            ));
        }
        return explicit
            .iter()
            .map(|v| parse_window("window", v, now))
            .collect();
    }
    let secs = seconds_param(seconds, DEFAULT_ANIMATION_SECONDS)?;
    if secs > retention {
        return Err(bad(
            "seconds",
            format!("{secs} is out of range: use 1..={retention} (the retention)"),
        ));
    }
    let k = match phases {
        None => DEFAULT_PHASES,
        Some(v) => match v.parse::<usize>() {
            Ok(k) if (1..=MAX_PHASES).contains(&k) => k,
            _ => {
                return Err(bad(
                    "phases",
                    format!("{v:?} is not a number of phases (1-{MAX_PHASES})"),
                ));
            }
        },
    };
    if k as u64 > secs {
        return Err(bad(
            "phases",
            format!("{k} phases in {secs} s: a phase is at least a second"),
        ));
    }
    let to = window_end("seconds", now)?;
    let from = to
        .checked_sub(secs)
        .ok_or_else(|| bad("seconds", format!("{secs} s before now is before 1970")))?;
    debug_assert!(to <= MAX_UNIX_SECONDS + 1);
    Ok((0..k as u64)
        .map(|i| Window {
            from: from + secs * i / k as u64,
            to: from + secs * (i + 1) / k as u64,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn parse(q: &str, kind: CompareKind) -> Result<CompareQuery, QueryError> {
        let params: Vec<(String, String)> =
            form_urlencoded::parse(q.as_bytes()).into_owned().collect();
        CompareQuery::parse(&params, NOW, 3600, kind)
    }

    #[test]
    fn diff_windows_default_and_explicit() {
        let q = parse("seconds=10", CompareKind::Diff).unwrap();
        assert_eq!(
            q.windows,
            [
                Window {
                    from: NOW - 19,
                    to: NOW - 9
                },
                Window {
                    from: NOW - 9,
                    to: NOW + 1
                }
            ]
        );
        let q = parse(
            "before=-10m,-5m&after=-5m,now&strip_hex=1&pid=3",
            CompareKind::Diff,
        )
        .unwrap();
        assert_eq!(
            q.windows[0],
            Window {
                from: NOW - 600,
                to: NOW - 300
            }
        );
        assert_eq!(
            q.windows[1],
            Window {
                from: NOW - 300,
                to: NOW + 1
            }
        );
        assert!(q.rewrite.strip_hex);
        assert_eq!(q.base.selection.pid, Some(3));
        assert_eq!(q.normalize, None);
    }

    #[test]
    fn bad_diff_parameters_name_themselves() {
        for (q, param) in [
            ("before=-5m,now&after=-10m,-5m", "before"),
            ("before=-5m,-5m&after=-1m,now", "before"),
            ("before=-5m", "after"),
            ("after=-5m,now", "before"),
            ("before=-3h,-2h&after=-5m,now", "before"),
            ("before=-5m,-4m&after=+5m,now", "after"),
            ("before=-5m,-4m&after=-1m,1800000100", "after"),
            ("before=-7d,-5m&after=-1m,now", "before"),
            ("before=-5m;-4m&after=-1m,now", "before"),
            ("seconds=2000", "seconds"),
            ("seconds=10&before=-1m,now", "seconds"),
            ("from=-5m", "from"),
            ("phases=3", "phases"),
            ("negate=maybe", "negate"),
            ("frobnicate=1", "frobnicate"),
        ] {
            let e = parse(q, CompareKind::Diff).expect_err(q);
            assert_eq!(e.param, param, "{q}: {e}");
        }
    }

    #[test]
    fn animation_phases() {
        let q = parse("seconds=40&phases=4", CompareKind::Animation).unwrap();
        assert_eq!(q.windows.len(), 4);
        assert_eq!(
            q.windows[0],
            Window {
                from: NOW - 39,
                to: NOW - 29
            }
        );
        assert_eq!(q.windows[3].to, NOW + 1);
        let q = parse("seconds=10&phases=3", CompareKind::Animation).unwrap();
        let lens: Vec<u64> = q.windows.iter().map(|w| w.seconds()).collect();
        assert_eq!(lens.iter().sum::<u64>(), 10);
        let q = parse("window=-3m,-2m&window=-1m,now", CompareKind::Animation).unwrap();
        assert_eq!(q.windows.len(), 2);
        for (q, param) in [
            ("seconds=5&phases=6", "phases"),
            ("phases=0", "phases"),
            ("phases=61", "phases"),
            ("window=-1m,now&seconds=5", "window"),
            ("window=-1m", "window"),
            ("seconds=0", "seconds"),
            ("before=-1m,now", "before"),
        ] {
            let e = parse(q, CompareKind::Animation).expect_err(q);
            assert_eq!(e.param, param, "{q}: {e}");
        }
    }
}
