//! The POST path of `/diff.svg` and `/diff.folded`: the query line (first
//! line of the input) parsed as a baseline comparison, the rest the posted
//! body, read leniently, compared with an after profile and rendered both
//! ways, as `serve::compare` does. Memory and output in proportion to the
//! body.
#![no_main]

use emberd::compare::Diff;
use emberd::query::compare::{CompareKind, CompareQuery};
use emberd::render::{self, folded};
use emberd_fuzz::{Counting, check_bound, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

const NOW: u64 = 1_764_000_000;
const AFTER: &[u8] = b"main;run;work 10\nmain;run;idle 5\nmain;other 3\n";

fn params(raw: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(raw).into_owned().collect()
}

fuzz_target!(|data: &[u8]| {
    let (line, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    let cq =
        CompareQuery::parse(&params(line), NOW, 3600, CompareKind::Baseline).unwrap_or_else(|_| {
            CompareQuery::parse(&[], NOW, 3600, CompareKind::Baseline).expect("defaults parse")
        });
    let (after, _) = folded::read_lenient(AFTER).expect("after parses");
    let (out, peak) = peak_of(|| {
        let Ok((before, _)) = folded::read_lenient(body) else {
            return 0;
        };
        let q = &cq.base;
        let normalize = if q.event.is_in_use() {
            Some(cq.normalize.unwrap_or(false))
        } else {
            cq.normalize
        };
        let diff = Diff::new(&before, &after, cq.rewrite, normalize, true);
        let (unit, factor) = emberd::view::display_unit(q.event);
        let notes = diff.notes(unit, |v| v.to_string());
        let mut text = Vec::new();
        diff.series.write_folded(&mut text).expect("write to a Vec");
        let mut opts = render::diff::DiffSvgOptions::new("fuzz", unit);
        opts.notes = notes;
        opts.factor = factor;
        opts.negate = cq.negate;
        if let Some(w) = q.svg.width {
            opts.width = w as f64;
        }
        if let Some(m) = q.svg.minwidth {
            opts.min_width = m;
        }
        let mut svg = Vec::new();
        render::diff::write(&diff, &opts, &mut svg).expect("write to a Vec");
        text.len().max(svg.len())
    });
    check_bound("POST /diff memory", peak, body.len(), 64, 1 << 20);
    check_bound("POST /diff output", out, body.len(), 64, 256 << 10);
});
