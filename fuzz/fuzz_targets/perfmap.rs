//! The perf-map parser on a `/tmp/perf-PID.map` any user can write: whole
//! (`PerfMap::parse`), as appended lines are (`parse_complete_lines` from
//! an offset of the file, then `merge`), with memory in proportion to the
//! file.
#![no_main]

use emberd::symbolize::perfmap::{PerfMap, parse_complete_lines};
use emberd_fuzz::{Counting, check_bound, mem_file, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let (whole, peak) = peak_of(|| PerfMap::parse(data).expect("reading a slice"));
    // An entry is 40 bytes, its name at least 16 more, kept while sorted
    // with its index; a line of `0 1 a` is 6 bytes. Measured: 15.6 times
    // a file of such lines at the peak, 9 to 19 held (the vector's slack).
    check_bound("parse", peak, data.len(), 32, 64 << 10);
    check_bound("approx_bytes", whole.approx_bytes(), data.len(), 24, 4096);
    for i in 0..whole.len().min(64) {
        let addr = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        if let Some(e) = whole.lookup(addr) {
            assert!(
                addr - e.start < e.size,
                "{addr:#x} is not in the entry found"
            );
        }
    }

    // As the daemon reads a map that grows: lines up to a point, then the
    // lines appended since, merged.
    let f = mem_file(data);
    let cut = data
        .first()
        .map_or(0, |&b| data.len() * usize::from(b) / 255) as u64;
    let (mut older, upto) = parse_complete_lines(&f.file, 0, cut, usize::MAX);
    assert!(upto <= cut, "parsed past the size");
    let (newer, end) = parse_complete_lines(&f.file, upto, data.len() as u64, usize::MAX);
    older.merge(newer, usize::MAX);
    if end == data.len() as u64 {
        // Every line was read, once: the same map as a parse of the whole.
        assert_eq!(
            format!("{older:?}"),
            format!("{whole:?}"),
            "merged differs from whole"
        );
    }
});
