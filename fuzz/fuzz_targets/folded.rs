//! The folded reader, strict (`read`: `emberd compare` and tests) and
//! lenient (`read_lenient`: posted baselines), on any bytes: what reads
//! must write back as text that reads as the same profile, in memory
//! proportional to the text.
#![no_main]

use emberd::render::folded;
use emberd_fuzz::{Counting, check_bound, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let (strict, peak) = peak_of(|| folded::read(data));
    check_bound("read", peak, data.len(), 48, 16 << 10);
    if let Ok(p) = strict {
        let mut text = Vec::new();
        folded::write(&p, &mut text).expect("write to a Vec");
        let again = folded::read(&text[..])
            .unwrap_or_else(|e| panic!("written text does not read back: {e}: {text:?}"));
        assert_eq!(again, p, "strict round trip changed the profile: {text:?}");
    }

    let (lenient, peak) = peak_of(|| folded::read_lenient(data));
    check_bound("read_lenient", peak, data.len(), 48, 16 << 10);
    if let Ok((p, _)) = lenient {
        let mut text = Vec::new();
        folded::write(&p, &mut text).expect("write to a Vec");
        let (again, skipped) = folded::read_lenient(&text[..])
            .unwrap_or_else(|e| panic!("written text does not read back: {e}: {text:?}"));
        assert_eq!(
            skipped.malformed, 0,
            "written lines skipped: {skipped:?}: {text:?}"
        );
        assert_eq!(again, p, "lenient round trip changed the profile: {text:?}");
    }
});
