//! The `/etc/subuid` reader (`shared::accounts::parse`): whatever the
//! file holds, the ranges kept are sorted, disjoint, never hold uid 0,
//! never wrap, are at most `MAX_RANGES`, and the account lookup agrees with
//! a plain scan of them; memory stays in proportion to the file.
#![no_main]

use emberd::shared::accounts::{MAX_RANGES, SubRange, account_in, parse};
use emberd_fuzz::{Counting, check_bound, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Names as getpwnam would resolve them: short ones are users, the rest
/// unknown.
fn uid_of(name: &str) -> Option<u32> {
    (name.len() < 6).then(|| 1000 + name.len() as u32)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let ((ranges, skipped), peak) = peak_of(|| parse(&text, uid_of));
    // A range is 12 bytes, a line of one at least 6 ("a:1:1\n"); the sort
    // and the kept copy hold two vectors at once.
    check_bound("parse", peak, data.len(), 16, 4096);
    assert!(ranges.len() <= MAX_RANGES, "{} ranges kept", ranges.len());
    assert!(
        skipped as usize <= text.lines().count(),
        "{skipped} skipped of {} lines",
        text.lines().count()
    );
    for r in &ranges {
        assert!(r.count > 0 && r.start > 0, "{r:?} holds uid 0 or nothing");
        assert!(r.start.checked_add(r.count - 1).is_some(), "{r:?} wraps");
        assert!(r.owner != 0, "{r:?} counts as root");
    }
    for w in ranges.windows(2) {
        assert!(
            u64::from(w[0].start) + u64::from(w[0].count) <= u64::from(w[1].start),
            "{:?} and {:?} overlap or are out of order",
            w[0],
            w[1]
        );
    }
    let scan = |uid: u32| {
        ranges
            .iter()
            .find(|r: &&SubRange| uid >= r.start && uid - r.start < r.count)
            .map_or(uid, |r| r.owner)
    };
    for r in ranges.iter().take(64) {
        let last = r.start + (r.count - 1);
        for uid in [r.start - 1, r.start, last, last.wrapping_add(1), 0] {
            assert_eq!(account_in(&ranges, uid), scan(uid), "uid {uid}");
        }
    }
});
