//! Folded stacks, the format of flamegraph.pl and inferno: one line per
//! stack, frames root first joined by `;`, a space, then the value.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};

use crate::query::profile::{FoldedStack, Profile};

pub use crate::query::profile::EMPTY_STACK;

/// Writes `profile` as folded text, sorted by stack.
pub fn write<W: Write>(profile: &Profile, mut w: W) -> io::Result<()> {
    for (stack, value) in profile.sorted() {
        let stack = match stack.as_str() {
            "" => EMPTY_STACK,
            s => s,
        };
        writeln!(w, "{stack} {value}")?;
    }
    w.flush()
}

/// A folded line that does not parse.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Reads folded text into a profile, adding the values of repeated stacks.
/// A bad line (no value, not a number, empty stack, not UTF-8, or a repeat
/// whose sum passes `u64::MAX`) is a [`ParseError`] naming the line; only a
/// failing reader gives another error.
pub fn read<R: BufRead>(mut r: R) -> Result<Profile, Box<dyn std::error::Error + Send + Sync>> {
    let mut sums: HashMap<FoldedStack, u64> = HashMap::new();
    let mut buf = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        number += 1;
        let err = |reason| ParseError {
            line: number,
            reason,
        };
        let line = std::str::from_utf8(&buf).map_err(|_| err("not UTF-8"))?;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (stack, value) = parse_line(line).map_err(err)?;
        let sum = sums
            .entry(FoldedStack::from_frames(stack.split(';')))
            .or_insert(0);
        *sum = sum
            .checked_add(value)
            .ok_or_else(|| err("the values of this stack add up past 2^64 - 1"))?;
    }
    let mut profile = Profile::new();
    for (stack, value) in sums {
        profile.add(stack, value);
    }
    Ok(profile)
}

/// What [`read_lenient`] skipped, and what [`read_bounded`] cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Lines that are not `stack value` (counted, not fatal).
    pub malformed: usize,
    /// The first few of them, with why.
    pub first: Vec<ParseError>,
    /// Comment (`#`) and blank lines.
    pub comments: usize,
    /// Lines longer than [`ReadLimits::frames_per_line`], kept cut short.
    pub cut_lines: usize,
    /// Lines left out: their stack was new past [`ReadLimits::frames_total`].
    pub dropped_lines: usize,
}

/// The frame that ends a line [`read_bounded`] cut short, as the BPF
/// walkers mark a stack cut at their depth limit.
pub const CUT_FRAME: &str = "[truncated]";

/// Bounds on what [`read_bounded`] keeps of folded text someone else wrote,
/// so that what it costs follows what it holds, not what it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Frames kept per line (at least 2): a longer line keeps its first
    /// (root side) frames, the last replaced by [`CUT_FRAME`], so it still
    /// lines up with the same callers elsewhere.
    pub frames_per_line: usize,
    /// Frames of all distinct stacks together: an upper bound on the nodes
    /// of the tree drawn from them. Stacks past it are left out.
    pub frames_total: usize,
}

impl ReadLimits {
    /// No bounds: for a user's own files.
    pub const NONE: Self = Self {
        frames_per_line: usize::MAX,
        frames_total: usize::MAX,
    };
}

/// Malformed lines' first reasons kept in [`Skipped::first`].
const KEPT_ERRORS: usize = 5;

impl Skipped {
    /// Counts line `line` as malformed for `reason`.
    fn line(&mut self, line: usize, reason: &'static str) {
        self.malformed += 1;
        if self.first.len() < KEPT_ERRORS {
            self.first.push(ParseError { line, reason });
        }
    }
}

/// Why a file is not folded text at all.
#[derive(Debug, thiserror::Error)]
pub enum NotFolded {
    /// Reading failed.
    #[error("reading: {0}")]
    Io(#[from] io::Error),
    /// Bytes that are no text (NUL bytes or invalid UTF-8 early on).
    #[error(
        "this is binary data, not folded text (perf.data? run `perf script | inferno-collapse-perf` first)"
    )]
    Binary,
    /// Lines, none of which is folded.
    #[error("no line is folded text (`frame;frame;... COUNT`): {0}")]
    NoFoldedLine(ParseError),
}

/// Reads folded text as flamegraph.pl does: blank and `#` lines skipped,
/// malformed lines counted and skipped (not fatal), values of repeated
/// stacks added (saturating); a line with a NUL byte is malformed. Only a
/// file that is not folded text at all (binary data, or lines none of
/// which parses) is an error. Values may carry a fraction (`12.0`),
/// rounded, as difffolded.pl accepts them.
pub fn read_lenient<R: BufRead>(r: R) -> Result<(Profile, Skipped), NotFolded> {
    read_bounded(r, ReadLimits::NONE)
}

/// [`read_lenient`] within `limits`: long lines cut, stacks past the frame
/// budget left out, both counted in [`Skipped`].
pub fn read_bounded<R: BufRead>(
    mut r: R,
    limits: ReadLimits,
) -> Result<(Profile, Skipped), NotFolded> {
    let mut sums: HashMap<FoldedStack, u64> = HashMap::new();
    let mut skipped = Skipped::default();
    let mut buf = Vec::new();
    let (mut number, mut good, mut frames) = (0usize, 0usize, 0usize);
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        number += 1;
        let Ok(line) = std::str::from_utf8(&buf) else {
            if good == 0 && number <= 4 {
                return Err(NotFolded::Binary);
            }
            skipped.line(number, "not UTF-8");
            continue;
        };
        if line.contains('\0') {
            if good == 0 {
                return Err(NotFolded::Binary);
            }
            // Kept as a frame, it would be written first of the sorted
            // text, which then reads as binary data.
            skipped.line(number, "a NUL byte");
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            skipped.comments += 1;
            continue;
        }
        let parsed = parse_lenient_line(line).and_then(|(stack, value)| {
            // Checked with blanks as they will be written (a line break in
            // a name becomes a space: `name\r3` is two columns), before a
            // count-like tail of a name is joined with `_`.
            let blanks: String = stack
                .chars()
                .map(crate::query::profile::folded_char)
                .collect();
            match two_columns(&blanks) {
                true => Err(TWO_COLUMNS),
                false => Ok((stack, value)),
            }
        });
        match parsed {
            Ok((stack, value)) => {
                good += 1;
                let (stack, n, cut) = bounded_stack(stack, limits.frames_per_line);
                skipped.cut_lines += usize::from(cut);
                if let Some(sum) = sums.get_mut(&stack) {
                    *sum = sum.saturating_add(value);
                } else if frames.saturating_add(n) > limits.frames_total {
                    skipped.dropped_lines += 1;
                } else {
                    frames += n;
                    sums.insert(stack, value);
                }
            }
            Err(reason) => skipped.line(number, reason),
        }
    }
    if good == 0 && skipped.malformed > 0 {
        return Err(NotFolded::NoFoldedLine(skipped.first[0].clone()));
    }
    let mut profile = Profile::new();
    for (stack, value) in sums {
        profile.add(stack, value);
    }
    Ok((profile, skipped))
}

const TWO_COLUMNS: &str =
    "more than one value column (diff or animation output?): give one profile";

/// Whether `stack` ends in a count (`stack 3 5`: two value columns, diff
/// or animation output, not one profile; reading it would make "leaf 3" a
/// frame).
fn two_columns(stack: &str) -> bool {
    let leaf = stack.rsplit(';').next().unwrap_or(stack);
    leaf.rsplit_once([' ', '\t'])
        .is_some_and(|(_, t)| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
}

/// `stack` as a folded stack of at most `max` frames (the last of a cut one
/// is [`CUT_FRAME`]), its frame count, and whether it was cut. Counting
/// stops at `max + 1`, so a long line costs no more than reading it.
fn bounded_stack(stack: &str, max: usize) -> (FoldedStack, usize, bool) {
    let max = max.max(2);
    if stack.split(';').nth(max).is_none() {
        let n = stack.split(';').count();
        return (FoldedStack::from_frames(stack.split(';')), n, false);
    }
    let kept = stack
        .split(';')
        .take(max - 1)
        .chain(std::iter::once(CUT_FRAME));
    (FoldedStack::from_frames(kept), max, true)
}

/// `stack value` split at the last run of blanks (space or tab); the value
/// a whole number or one with a fraction.
fn parse_lenient_line(line: &str) -> Result<(&str, u64), &'static str> {
    let cut = line.rfind([' ', '\t']).ok_or("no value after the stack")?;
    let (stack, value) = (line[..cut].trim_end(), &line[cut + 1..]);
    if stack.is_empty() {
        return Err("empty stack");
    }
    let v = match value.parse::<u64>() {
        Ok(v) => v,
        Err(_) => match value.parse::<f64>() {
            Ok(f)
                if f.is_finite()
                    && f >= 0.0
                    && value.bytes().all(|b| b.is_ascii_digit() || b == b'.') =>
            {
                f.round().min(u64::MAX as f64) as u64
            }
            _ => return Err("the value is not a number"),
        },
    };
    Ok((stack, v))
}

fn parse_line(line: &str) -> Result<(&str, u64), &'static str> {
    let (stack, value) = line.rsplit_once(' ').ok_or("no value after the stack")?;
    let value = value
        .parse()
        .map_err(|_| "the value is not a whole number")?;
    if stack.is_empty() {
        return Err("empty stack");
    }
    Ok((stack, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_sorted_lines_and_merges_repeats() {
        let mut p = Profile::new();
        p.add(FoldedStack::from_frames(["prog", "main", "hot_b"]), 3);
        p.add(FoldedStack::from_frames(["prog", "main", "hot_a"]), 7);
        p.add(FoldedStack::from_frames(["prog", "main", "hot_a"]), 1);
        let mut out = Vec::new();
        write(&p, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "prog;main;hot_a 8\nprog;main;hot_b 3\n"
        );
    }

    #[test]
    fn separators_inside_names_are_replaced() {
        let s = FoldedStack::from_frames(["a;b", "c\nd", "e f", "g\th\u{b}i\u{85}j\u{2028}k\u{0}"]);
        assert_eq!(s.as_str(), "a:b;c d;e f;g h i j k ");
        assert_eq!(s.frames().count(), 4);
    }

    /// A leaf named `f 5` would make the line `a;f 5 3`, which two-column
    /// readers (flamegraph.pl's differential input, inferno) take for stack
    /// `a;f` with counts 5 and 3.
    #[test]
    fn a_name_ending_in_a_number_is_not_read_as_a_count() {
        let mut p = Profile::default();
        p.add(FoldedStack::from_frames(["a", "f 5"]), 3);
        p.add(FoldedStack::from_frames(["b", "g 1.5"]), 2);
        p.add(FoldedStack::from_frames(["c", "h 5x"]), 1);
        let mut out = Vec::new();
        write(&p, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "a;f_5 3\nb;g_1.5 2\nc;h 5x 1\n");
        for line in text.lines() {
            let fields: Vec<&str> = line.rsplitn(3, ' ').collect();
            assert!(
                fields.len() < 3 || fields[1].parse::<f64>().is_err(),
                "{line:?} reads as two counts"
            );
        }
    }

    #[test]
    fn round_trip() {
        let text = "java;Interpreter_[j];void Busy.spin(long)_[j] 12\nnode;main;write_[k] 4\nx;frame with spaces 1\n";
        let p = read(text.as_bytes()).unwrap();
        let mut out = Vec::new();
        write(&p, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), text);
    }

    #[test]
    fn bad_lines_name_the_line() {
        let err = read("a;b 1\nno_value\n".as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), "line 2: no value after the stack");
        let err = read("a;b x\n".as_bytes()).unwrap_err();
        assert_eq!(err.to_string(), "line 1: the value is not a whole number");
    }

    #[test]
    fn lenient_reading_skips_and_counts() {
        let text = "# comment\n\nmain;a 3\nmain;b\t2\ngarbage\nmain;a 1.0\n;; x\nmain;c 3 4\n";
        let (p, skipped) = read_lenient(text.as_bytes()).unwrap();
        assert_eq!(p.total(), 6);
        assert_eq!(p.len(), 2);
        assert_eq!(skipped.malformed, 3);
        assert_eq!(skipped.comments, 2);
        assert_eq!(skipped.first[0].line, 5);
        assert!(matches!(
            read_lenient("hello world\nfoo bar\n".as_bytes()),
            Err(NotFolded::NoFoldedLine(_))
        ));
        assert!(matches!(
            read_lenient(&b"PERFILE2\0\0\x01\xff\n"[..]),
            Err(NotFolded::Binary)
        ));
        let (empty, _) = read_lenient(&b""[..]).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn bounded_reading_cuts_long_lines_and_drops_past_the_budget() {
        let limits = ReadLimits {
            frames_per_line: 3,
            frames_total: 6,
        };
        let text = "a;b;c 1\na;b;c;d;e 2\na;b;c;d;e 1\nx;y 4\nz;y 5\nx;y 1\n";
        let (p, skipped) = read_bounded(text.as_bytes(), limits).unwrap();
        let got: Vec<(String, u64)> = p
            .sorted()
            .into_iter()
            .map(|(s, v)| (s.as_str().to_owned(), v))
            .collect();
        // a;b;c (3 frames) and a;b;[truncated] (3) fill the budget: x;y and
        // z;y are left out, even when x;y comes back.
        assert_eq!(
            got,
            [("a;b;[truncated]".to_owned(), 3), ("a;b;c".to_owned(), 1)]
        );
        assert_eq!(skipped.cut_lines, 2);
        assert_eq!(skipped.dropped_lines, 3);
        let (all, none) = read_lenient(text.as_bytes()).unwrap();
        assert_eq!((all.len(), none.cut_lines, none.dropped_lines), (4, 0, 0));
    }

    #[test]
    fn empty_profile_writes_nothing() {
        let mut out = Vec::new();
        write(&Profile::new(), &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn empty_stack_reads_back() {
        let mut p = Profile::new();
        p.add(FoldedStack::from_frames([]), 2);
        p.add(FoldedStack::from_frames(["a"]), 1);
        let mut out = Vec::new();
        write(&p, &mut out).unwrap();
        assert_eq!(String::from_utf8(out.clone()).unwrap(), "[empty] 2\na 1\n");
        let back = read(&out[..]).unwrap();
        assert_eq!(back.sorted().len(), 2);
    }

    #[test]
    fn repeated_stack_overflow_is_an_error() {
        let err = read("a;b 18446744073709551615\nc 1\na;b 1\n".as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: the values of this stack add up past 2^64 - 1"
        );
        let p = read("a 18446744073709551614\na 1\n".as_bytes()).unwrap();
        assert_eq!(p.total(), u64::MAX);
    }

    /// Found by `fuzz/fuzz_targets/folded.rs`: a NUL byte in a line after
    /// a good one was read into a frame, and the text written from the
    /// profile (that line sorted first) read back as binary data.
    #[test]
    fn nul_after_good_lines_is_malformed_and_the_profile_reads_back() {
        let input = b"x 1\n\x0c\0\0\0\0\0\0\0x 1\n";
        let (p, skipped) = read_lenient(&input[..]).expect("one good line");
        assert_eq!(skipped.malformed, 1);
        assert_eq!(skipped.first[0].reason, "a NUL byte");
        let mut text = Vec::new();
        write(&p, &mut text).expect("write");
        assert_eq!(read_lenient(&text[..]).expect("reads back").0, p);
    }

    /// Found by `fuzz/fuzz_targets/folded.rs`: a carriage return before
    /// the last blank of a name passed the two-column check, then became a
    /// space, and the profile was written as `... 18 4 2`: two columns.
    #[test]
    fn a_line_break_in_a_name_cannot_make_a_second_column() {
        let input = b"c om#me,c c#md\r\r\rx 18x 1 18\r\r\r\r4 2\r";
        let err = read_lenient(&input[..]).expect_err("no other line");
        assert!(
            err.to_string().contains("more than one value column"),
            "{err}"
        );
        let input = b"main 1\nname\r4 2\n";
        let (p, skipped) = read_lenient(&input[..]).expect("one good line");
        assert_eq!(skipped.first[0].line, 2);
        let mut text = Vec::new();
        write(&p, &mut text).expect("write");
        assert_eq!(
            read_lenient(&text[..]).expect("reads back"),
            (p, Skipped::default())
        );
    }

    #[test]
    fn non_utf8_line_is_named() {
        let err = read(&b"a 1\n\xff\xfe 2\n"[..]).unwrap_err();
        assert_eq!(err.to_string(), "line 2: not UTF-8");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        /// Frame names with the characters that matter: separators, line
        /// ends, spaces of every kind, digits, and any other text.
        fn frame() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z_]{1,8}",
                "[ ;\r\n\t0-9a\u{a0}\u{3000}\u{2028}]{0,6}",
                "\\PC{0,10}",
                ".{0,10}",
            ]
        }

        /// Profiles of random stacks; values small enough that adding
        /// repeats cannot overflow.
        fn profile() -> impl Strategy<Value = Profile> {
            prop::collection::vec(
                (
                    prop::collection::vec(frame(), 0..6),
                    prop_oneof![0u64..=100, 0..=u64::MAX / 16],
                ),
                0..12,
            )
            .prop_map(|stacks| {
                let mut p = Profile::new();
                for (frames, value) in stacks {
                    p.add(
                        FoldedStack::from_frames(frames.iter().map(String::as_str)),
                        value,
                    );
                }
                p
            })
        }

        /// One folded-looking line: often valid, often slightly wrong.
        fn line() -> impl Strategy<Value = String> {
            prop_oneof![
                ("[a-z;]{0,12}", any::<u64>()).prop_map(|(s, v)| format!("{s} {v}")),
                ("[a-z; ]{0,12}", "[0-9+-]{0,22}").prop_map(|(s, v)| format!("{s} {v}")),
                "[a-z; 0-9\t\r]{0,20}",
                ".{0,30}",
                Just(String::new()),
                Just("a 18446744073709551615".to_owned()),
            ]
        }

        fn written(p: &Profile) -> Vec<u8> {
            let mut out = Vec::new();
            write(p, &mut out).unwrap();
            out
        }

        /// The profile `p` as it reads back: the empty stack is named.
        fn normalized(p: &Profile) -> Profile {
            let mut n = Profile::new();
            for (stack, value) in p.sorted() {
                let stack = match stack.as_str() {
                    "" => FoldedStack::from_frames([EMPTY_STACK]),
                    _ => stack.clone(),
                };
                n.add(stack, value);
            }
            n
        }

        /// Checks what `read` says about `bytes`: an error is a
        /// `ParseError` whose line is the first bad one, a profile writes
        /// back to text that reads as the same profile.
        fn check_read(bytes: &[u8]) -> Result<(), TestCaseError> {
            let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
            match read(bytes) {
                Ok(p) => {
                    let again = read(&written(&p)[..]).unwrap();
                    prop_assert_eq!(again, p);
                }
                Err(e) => {
                    let Some(pe) = e.downcast_ref::<ParseError>() else {
                        return Err(TestCaseError::fail(format!("not a ParseError: {e}")));
                    };
                    prop_assert!(
                        pe.line >= 1 && pe.line <= lines.len(),
                        "{pe} of {}",
                        lines.len()
                    );
                    let prefix = format!("line {}: ", pe.line);
                    prop_assert!(e.to_string().starts_with(&prefix), "{e}");
                    // Every line before it reads; the named line alone fails,
                    // or is the repeat that overflows.
                    prop_assert!(read(&lines[..pe.line - 1].concat()[..]).is_ok());
                    let alone = read(lines[pe.line - 1]);
                    prop_assert!(
                        alone.is_err() || pe.reason.contains("add up"),
                        "line {} reads alone: {:?}",
                        pe.line,
                        String::from_utf8_lossy(lines[pe.line - 1])
                    );
                }
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// write then read gives back the profile written.
            #[test]
            fn write_read_round_trip(p in profile()) {
                let text = written(&p);
                prop_assert!(text.ends_with(b"\n") || text.is_empty());
                prop_assert_eq!(read(&text[..]).unwrap(), normalized(&p));
            }

            /// Arbitrary text: never a panic, bad lines named.
            #[test]
            fn read_arbitrary_text(text in "\\PC{0,200}|(.|\n){0,200}") {
                check_read(text.as_bytes())?;
            }

            /// Lines that are mostly right, joined with \n or \r\n.
            #[test]
            fn read_folded_like_lines(
                lines in prop::collection::vec(line(), 0..12),
                crlf in any::<bool>(),
            ) {
                check_read(lines.join(if crlf { "\r\n" } else { "\n" }).as_bytes())?;
            }

            /// Arbitrary bytes, invalid UTF-8 included.
            #[test]
            fn read_arbitrary_bytes(bytes in prop::collection::vec(
                prop_oneof![any::<u8>(), Just(b'\n'), Just(b' '), Just(b'1'), Just(b';')],
                0..200,
            )) {
                check_read(&bytes)?;
            }
        }
    }
}
