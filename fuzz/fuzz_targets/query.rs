//! The query parser on any query string, as the server hands it over
//! (percent-decoded pairs): `Query::parse` for the profile routes and
//! `CompareQuery::parse` for the comparison routes. A bad query is an
//! error naming a parameter it was given; a good one a window that ends
//! after it starts.
#![no_main]

use emberd::query::Query;
use emberd::query::compare::{CompareKind, CompareQuery};
use emberd_fuzz::{Counting, check_bound, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

/// (now, retention): a host of today with the default hour, and `emberd
/// record`'s unbounded history.
const CLOCKS: [(u64, u64); 2] = [(1_764_000_000, 3600), (1_764_000_000, u64::MAX / 4)];

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let params: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .collect();
    let named = |param: &str| params.iter().any(|(k, _)| k == param);
    for (now, retention) in CLOCKS {
        let (q, peak) = peak_of(|| Query::parse(&params, now, retention));
        // Compiled regexes are within their own size limit.
        check_bound("Query::parse", peak, data.len(), 64, 32 << 20);
        match q {
            Ok(q) => {
                let s = &q.selection;
                assert!(
                    s.from <= s.to,
                    "window {}..{} ends before it starts",
                    s.from,
                    s.to
                );
                if let Some((a, b)) = s.ms {
                    assert!(a <= b, "ms window {a}..{b} ends before it starts");
                }
            }
            Err(e) => assert!(
                named(&e.param),
                "error names {:?}, not given: {e:?}",
                e.param
            ),
        }
        for kind in [
            CompareKind::Diff,
            CompareKind::Animation,
            CompareKind::Baseline,
        ] {
            match CompareQuery::parse(&params, now, retention, kind) {
                Ok(cq) => {
                    assert!(!cq.windows.is_empty(), "no window");
                    for w in &cq.windows {
                        assert!(
                            w.from <= w.to,
                            "window {}..{} ends before it starts",
                            w.from,
                            w.to
                        );
                    }
                }
                // Or one it needs and was not given.
                Err(e) => assert!(
                    named(&e.param)
                        || e.reason.starts_with("missing")
                        || ["seconds", "phases"].contains(&e.param.as_str()),
                    "error names {:?}, not given: {e:?}",
                    e.param
                ),
            }
        }
    }
});
