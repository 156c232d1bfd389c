//! Compare: the profiles of several windows side by side, one value column
//! each, as differential flame graphs (two columns: before, after) and
//! animations (one column per phase) need them.
//!
//! The rewrites are difffolded.pl's: `strip_hex` (`-x`/`-s` in its versions)
//! turns every `0x...` literal into `0x...`, so unnamed addresses of two runs
//! match; `strip_numbers` turns every number into `N`, for lambdas and JIT
//! names that carry counters (`Lambda$12/0x...`, `foo.js:134`);
//! normalization scales the first column to the second's total, truncating
//! as difffolded.pl's `-n` does.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::query::profile::{FoldedStack, Profile};

/// How frame names are rewritten before profiles are matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// Hex literals (`0x7f3a...`) become `0x...`.
    pub strip_hex: bool,
    /// Decimal runs become `N` (and hex literals too, unless `strip_hex`
    /// already made them `0x...`).
    pub strip_numbers: bool,
}

impl Rewrite {
    /// Whether nothing is rewritten.
    pub fn is_identity(self) -> bool {
        !self.strip_hex && !self.strip_numbers
    }

    /// `stack` rewritten.
    pub fn apply(self, stack: &str) -> String {
        if self.is_identity() {
            return stack.to_owned();
        }
        let b = stack.as_bytes();
        let mut out = String::with_capacity(stack.len());
        let mut i = 0;
        while i < b.len() {
            let hex_len = if b[i] == b'0' && b.get(i + 1).is_some_and(|&c| c == b'x' || c == b'X') {
                b[i + 2..]
                    .iter()
                    .take_while(|c| c.is_ascii_hexdigit())
                    .count()
            } else {
                0
            };
            if hex_len > 0 && (self.strip_hex || self.strip_numbers) {
                out.push_str(if self.strip_hex { "0x..." } else { "N" });
                i += 2 + hex_len;
            } else if self.strip_numbers && b[i].is_ascii_digit() {
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                out.push('N');
            } else {
                // Copy one UTF-8 character whole.
                let ch = stack[i..].chars().next().expect("i is on a char boundary");
                out.push(ch);
                i += ch.len_utf8();
            }
        }
        out
    }
}

/// Most columns a series holds (presence is a 64-bit mask).
pub const MAX_COLUMNS: usize = 64;

/// One stack's values, and in which columns it was recorded at all (bit
/// `c`), which normalization's truncation to 0 does not change: a path
/// present before stays "present", never "new".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Row {
    values: Vec<u64>,
    present: u64,
}

/// Stacks with one value per window (column), sorted by stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    columns: usize,
    rows: BTreeMap<FoldedStack, Row>,
}

impl Series {
    /// One column per profile, stacks rewritten by `rewrite` (stacks that
    /// become equal are added together); a stack absent from a profile is 0
    /// in its column. At most [`MAX_COLUMNS`] profiles (more are ignored).
    pub fn from_profiles<P: std::borrow::Borrow<Profile>>(
        profiles: &[P],
        rewrite: Rewrite,
    ) -> Self {
        let profiles = &profiles[..profiles.len().min(MAX_COLUMNS)];
        let columns = profiles.len();
        let mut rows: BTreeMap<FoldedStack, Row> = BTreeMap::new();
        for (c, p) in profiles.iter().enumerate() {
            for (stack, v) in p.borrow().sorted() {
                let key = if rewrite.is_identity() {
                    stack.clone()
                } else {
                    FoldedStack::from_frames(rewrite.apply(stack.as_str()).split(';'))
                };
                let row = rows.entry(key).or_insert_with(|| Row {
                    values: vec![0; columns],
                    present: 0,
                });
                row.values[c] = row.values[c].saturating_add(v);
                if v > 0 {
                    row.present |= 1 << c;
                }
            }
        }
        Self { columns, rows }
    }

    /// Number of value columns.
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// Number of distinct stacks.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no stacks.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Stacks and their values, sorted by stack.
    pub fn rows(&self) -> impl Iterator<Item = (&FoldedStack, &[u64])> {
        self.rows.iter().map(|(k, r)| (k, r.values.as_slice()))
    }

    /// Stacks, values, and the columns each was recorded in (bit `c`).
    pub fn rows_with_presence(&self) -> impl Iterator<Item = (&FoldedStack, &[u64], u64)> {
        self.rows
            .iter()
            .map(|(k, r)| (k, r.values.as_slice(), r.present))
    }

    /// The sum of each column.
    pub fn totals(&self) -> Vec<u64> {
        let mut t = vec![0u64; self.columns];
        for r in self.rows.values() {
            for (t, v) in t.iter_mut().zip(&r.values) {
                *t = t.saturating_add(*v);
            }
        }
        t
    }

    /// Scales column `from` to the total of column `to`, as difffolded.pl
    /// `-n` does (each value truncated), if their totals differ and both are
    /// non-zero. Returns the factor applied.
    pub fn normalize(&mut self, from: usize, to: usize) -> Option<f64> {
        let t = self.totals();
        let (tf, tt) = (t[from], t[to]);
        if tf == tt || tf == 0 || tt == 0 {
            return None;
        }
        // Rows that truncate to 0 stay, as difffolded.pl prints them.
        for r in self.rows.values_mut() {
            r.values[from] = (r.values[from] as u128 * tt as u128 / tf as u128) as u64;
        }
        Some(tt as f64 / tf as f64)
    }

    /// Writes `stack v1 v2 ...` lines: difffolded.pl's three columns for
    /// two windows, the animated folded format for more.
    pub fn write_folded<W: Write>(&self, mut w: W) -> io::Result<()> {
        for (stack, Row { values, .. }) in &self.rows {
            let stack = match stack.as_str() {
                "" => crate::query::profile::EMPTY_STACK,
                s => s,
            };
            write!(w, "{stack}")?;
            for v in values {
                write!(w, " {v}")?;
            }
            writeln!(w)?;
        }
        w.flush()
    }
}

/// A differential: before and after in one series, before normalized to
/// after's total when asked or when automatic and the windows differ.
#[derive(Debug, Clone)]
pub struct Diff {
    /// Columns: before (normalized if `factor` is set), after.
    pub series: Series,
    /// Column 0 before normalization, per row in the series' order, if it
    /// was normalized: the before graph is drawn from it, so paths whose
    /// scaled values truncate to 0 still show. One number per row, not a
    /// second copy of every stack.
    pub raw: Option<Vec<u64>>,
    /// Total of before as recorded.
    pub before_total: u64,
    /// Total of after.
    pub after_total: u64,
    /// The factor before was scaled by, if it was.
    pub factor: Option<f64>,
    /// Whether normalization was chosen automatically.
    pub automatic: bool,
}

impl Diff {
    /// Compares `before` with `after`. `normalize`: `Some` forces it on or
    /// off; `None` (the default) scales before to after's total when the
    /// windows differ in length (`lengths_differ`) or in total.
    pub fn new(
        before: &Profile,
        after: &Profile,
        rewrite: Rewrite,
        normalize: Option<bool>,
        lengths_differ: bool,
    ) -> Self {
        let mut series = Series::from_profiles(&[before, after], rewrite);
        let (before_total, after_total) = (before.total(), after.total());
        let on = normalize.unwrap_or(lengths_differ || before_total != after_total);
        let raw = on.then(|| series.rows().map(|(_, v)| v[0]).collect::<Vec<u64>>());
        let factor = if on { series.normalize(0, 1) } else { None };
        Self {
            raw: raw.filter(|_| factor.is_some()),
            series,
            before_total,
            after_total,
            factor,
            automatic: normalize.is_none(),
        }
    }

    /// Lines for the SVG: totals, normalization, empty sides. `fmt` shows a
    /// value in the display unit (e.g. us as ms).
    pub fn notes(&self, unit: &str, fmt: impl Fn(u64) -> String) -> Vec<String> {
        let mut notes = vec![format!(
            "before: {} {unit}, after: {} {unit}",
            fmt(self.before_total),
            fmt(self.after_total)
        )];
        match self.factor {
            Some(f) => notes.push(format!(
                "before normalized x{f:.3} to after's total{}",
                if self.automatic {
                    " (on by default as the windows differ; normalize=0 turns it off)"
                } else {
                    ""
                }
            )),
            None if self.before_total != self.after_total
                && self.before_total > 0
                && self.after_total > 0 =>
            {
                notes.push("not normalized: colours include the change in total".into())
            }
            None => {}
        }
        for (total, side) in [(self.before_total, "before"), (self.after_total, "after")] {
            if total == 0 {
                notes.push(format!(
                    "the {side} window holds no {unit}: everything shows as {}",
                    if side == "before" { "new" } else { "gone" }
                ));
            }
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::profile::test_profile as profile;

    #[test]
    fn columns_line_up_and_absent_is_zero() {
        let a = profile(&[("m;a", 3), ("m;b", 1)]);
        let b = profile(&[("m;a", 5), ("m;c", 2)]);
        let s = Series::from_profiles(&[a, b], Rewrite::default());
        let mut out = Vec::new();
        s.write_folded(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "m;a 3 5\nm;b 1 0\nm;c 0 2\n"
        );
        assert_eq!(s.totals(), [4, 7]);
    }

    #[test]
    fn normalization_truncates_like_difffolded() {
        let a = profile(&[("x", 3), ("y", 7)]);
        let b = profile(&[("x", 10), ("y", 10)]);
        let mut s = Series::from_profiles(&[a, b], Rewrite::default());
        let f = s.normalize(0, 1).unwrap();
        assert!((f - 2.0).abs() < 1e-9);
        let rows: Vec<_> = s
            .rows()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_vec()))
            .collect();
        assert_eq!(
            rows,
            [("x".into(), vec![6, 10]), ("y".into(), vec![14, 10])]
        );
        // int(v * t2 / t1): 1 * 5 / 3 = 1.67 -> 1.
        let mut s = Series::from_profiles(
            &[profile(&[("x", 1), ("y", 2)]), profile(&[("x", 5)])],
            Rewrite::default(),
        );
        s.normalize(0, 1);
        assert_eq!(s.rows().next().unwrap().1, [1, 5]);
    }

    #[test]
    fn rewrites() {
        let hex = Rewrite {
            strip_hex: true,
            strip_numbers: false,
        };
        assert_eq!(
            hex.apply("prog+0x1a2b;lib.so+0x10;f2"),
            "prog+0x...;lib.so+0x...;f2"
        );
        let num = Rewrite {
            strip_hex: false,
            strip_numbers: true,
        };
        assert_eq!(
            num.apply("Lambda$12/0x0000000800c0b840.run;foo.js:134_[j]"),
            "Lambda$N/N.run;foo.js:N_[j]"
        );
        let both = Rewrite {
            strip_hex: true,
            strip_numbers: true,
        };
        assert_eq!(both.apply("a0x1f;b22;é7"), "a0x...;bN;éN");
        // Two runs of a stripped binary: the same function matches.
        let a = profile(&[("p;p+0x1130", 5), ("p;p+0x1134", 2)]);
        let b = profile(&[("p;p+0x1138", 4)]);
        let s = Series::from_profiles(&[a, b], hex);
        assert_eq!(s.len(), 1);
        assert_eq!(s.rows().next().unwrap().1, [7, 4]);
    }
}
