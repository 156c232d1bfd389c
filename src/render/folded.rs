//! Folded stacks, the format of flamegraph.pl and inferno: one line per
//! stack, frames root first joined by `;`, a space, then the value.

use std::io::{self, BufRead, Write};

use crate::profile::{FoldedStack, Profile};

/// Writes `profile` as folded text, sorted by stack.
pub fn write<W: Write>(profile: &Profile, mut w: W) -> io::Result<()> {
    for (stack, value) in profile.sorted() {
        writeln!(w, "{} {value}", stack.as_str())?;
    }
    w.flush()
}

/// A folded line that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Reads folded text into a profile, adding the values of repeated stacks.
pub fn read<R: BufRead>(r: R) -> Result<Profile, Box<dyn std::error::Error + Send + Sync>> {
    let mut profile = Profile::new();
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let (stack, value) = parse_line(line).map_err(|reason| ParseError {
            line: i + 1,
            reason,
        })?;
        profile.add(FoldedStack::from_frames(stack.split(';')), value);
    }
    Ok(profile)
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
        let s = FoldedStack::from_frames(["a;b", "c\nd", "e f"]);
        assert_eq!(s.as_str(), "a:b;c d;e f");
        assert_eq!(s.frames().count(), 3);
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
    fn empty_profile_writes_nothing() {
        let mut out = Vec::new();
        write(&Profile::new(), &mut out).unwrap();
        assert!(out.is_empty());
    }
}
