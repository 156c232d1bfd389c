//! JIT symbols from `/tmp/perf-PID.map`, parsed by emberd itself.
//!
//! blazesym's reader rejects the JDK's `0x`-prefixed addresses and then fails
//! every frame of the process, so emberd reads these files on its own. Each
//! line is `START SIZE NAME`, START and SIZE in hex with or without `0x`
//! (node writes bare hex, `jcmd Compiler.perfmap` writes `0x`).

use std::io::{self, BufRead};

/// Lines longer than this are skipped (and counted): no JIT name is that long,
/// and reading one whole would let a broken writer grow emberd's memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Entries kept per file; a longer file is cut there (and counted) so that one
/// process cannot take all of emberd's memory.
pub const MAX_ENTRIES: usize = 4_000_000;

/// One JIT-compiled code range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMapEntry {
    /// First address of the code.
    pub start: u64,
    /// Length of the code in bytes.
    pub size: u64,
    /// The symbol name the runtime gave it.
    pub name: Box<str>,
}

/// A parsed perf map, sorted for lookup.
#[derive(Debug, Default, Clone)]
pub struct PerfMap {
    entries: Vec<PerfMapEntry>,
    /// Lines that did not parse (bad hex, missing name, too long, not UTF-8).
    pub malformed_lines: u64,
    /// Entries dropped beyond [`MAX_ENTRIES`].
    pub dropped_entries: u64,
}

impl PerfMap {
    /// Parses a whole perf map. I/O errors end the parse with what was read.
    pub fn parse<R: BufRead>(mut reader: R) -> io::Result<Self> {
        let mut map = PerfMap::default();
        // Order of appearance decides which of two overlapping entries wins:
        // the later one describes the code that is there now.
        let mut indexed: Vec<(usize, PerfMapEntry)> = Vec::new();
        let mut line = Vec::new();
        let mut n = 0usize;
        loop {
            line.clear();
            match read_bounded_line(&mut reader, &mut line)? {
                LineRead::Eof => break,
                LineRead::TooLong => map.malformed_lines += 1,
                LineRead::Line => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    match parse_line(&line) {
                        Some(e) if indexed.len() < MAX_ENTRIES => {
                            indexed.push((n, e));
                            n += 1;
                        }
                        Some(_) => map.dropped_entries += 1,
                        None => map.malformed_lines += 1,
                    }
                }
            }
        }
        indexed.sort_by_key(|(i, e)| (e.start, std::cmp::Reverse(*i)));
        // For equal starts keep only the newest.
        indexed.dedup_by_key(|(_, e)| e.start);
        map.entries = indexed.into_iter().map(|(_, e)| e).collect();
        Ok(map)
    }

    /// This map with `newer`'s entries added; for equal starts the newer
    /// entry wins, as later lines of one file do. Entries beyond
    /// [`MAX_ENTRIES`] are dropped (counted).
    pub fn merged(&self, newer: PerfMap) -> PerfMap {
        let mut all: Vec<(u64, bool, PerfMapEntry)> = self
            .entries
            .iter()
            .map(|e| (e.start, false, e.clone()))
            .chain(newer.entries.into_iter().map(|e| (e.start, true, e)))
            .collect();
        // Stable: for one start the older entry comes first, then the newer.
        all.sort_by_key(|(start, newer, _)| (*start, *newer));
        let mut entries: Vec<PerfMapEntry> = Vec::with_capacity(all.len());
        for (_, _, e) in all {
            match entries.last_mut() {
                Some(last) if last.start == e.start => *last = e,
                _ => entries.push(e),
            }
        }
        let dropped = entries.len().saturating_sub(MAX_ENTRIES) as u64;
        entries.truncate(MAX_ENTRIES);
        PerfMap {
            entries,
            malformed_lines: self.malformed_lines + newer.malformed_lines,
            dropped_entries: self.dropped_entries + newer.dropped_entries + dropped,
        }
    }

    /// Bytes this map holds, roughly (entries and their names).
    pub fn approx_bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| std::mem::size_of::<PerfMapEntry>() + e.name.len())
            .sum()
    }

    /// The entry whose range holds `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&PerfMapEntry> {
        let idx = self.entries.partition_point(|e| e.start <= addr);
        // Walk back over a few earlier entries: an older, longer range can
        // still cover `addr` when a newer one starts before it.
        self.entries[..idx]
            .iter()
            .rev()
            .take(8)
            .find(|e| addr < e.start.saturating_add(e.size))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Parses the whole lines of `file` in bytes `[from, size)`: a map being
/// written may end in half a line, left for the next read. Returns the
/// entries and the offset up to which lines were parsed. Reads are
/// positioned (`pread`), bounded by `size` as it was at open.
pub fn parse_complete_lines(file: &std::fs::File, from: u64, size: u64) -> (PerfMap, u64) {
    use std::os::unix::fs::FileExt;
    if size <= from {
        return (PerfMap::default(), from);
    }
    // The last newline, searched backwards in chunks.
    let mut end = size;
    let mut complete = None;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > from {
        let start = end.saturating_sub(chunk.len() as u64).max(from);
        let buf = &mut chunk[..(end - start) as usize];
        if file.read_exact_at(buf, start).is_err() {
            return (PerfMap::default(), from);
        }
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            complete = Some(start + i as u64 + 1);
            break;
        }
        end = start;
    }
    let Some(complete) = complete else {
        return (PerfMap::default(), from);
    };
    let reader = PositionedReader {
        file,
        pos: from,
        end: complete,
    };
    let map = PerfMap::parse(io::BufReader::with_capacity(64 * 1024, reader)).unwrap_or_default();
    (map, complete)
}

/// `Read` over `[pos, end)` of a file by positioned reads.
struct PositionedReader<'a> {
    file: &'a std::fs::File,
    pos: u64,
    end: u64,
}

impl io::Read for PositionedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = self.end.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

enum LineRead {
    Eof,
    Line,
    TooLong,
}

/// Reads one line into `buf` without ever holding more than
/// [`MAX_LINE_BYTES`] of it.
fn read_bounded_line<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<LineRead> {
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (any, too_long) {
                (false, _) => LineRead::Eof,
                (true, true) => LineRead::TooLong,
                (true, false) => LineRead::Line,
            });
        }
        any = true;
        let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !too_long {
            if buf.len() + part.len() > MAX_LINE_BYTES {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = done.unwrap_or(chunk.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

fn parse_line(line: &[u8]) -> Option<PerfMapEntry> {
    let line = std::str::from_utf8(line).ok()?;
    let line = line.trim_end_matches(['\r', '\n']);
    let mut parts = line.splitn(3, ' ');
    let start = parse_hex(parts.next()?)?;
    let size = parse_hex(parts.next()?)?;
    let name = parts.next()?.trim();
    if name.is_empty() || size == 0 {
        return None;
    }
    Some(PerfMapEntry {
        start,
        size,
        name: name.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> PerfMap {
        PerfMap::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn node_bare_hex() {
        let m =
            parse("3ad8a7e0c0 1c0 LazyCompile:*busyLoop /tmp/x.js:3\n3ad8a7e300 40 Builtin:Foo\n");
        assert_eq!(m.len(), 2);
        assert_eq!(
            &*m.lookup(0x3ad8a7e0c5).unwrap().name,
            "LazyCompile:*busyLoop /tmp/x.js:3"
        );
        assert_eq!(&*m.lookup(0x3ad8a7e33f).unwrap().name, "Builtin:Foo");
        assert!(m.lookup(0x3ad8a7e340).is_none());
        assert!(m.lookup(0x3ad8a7e0bf).is_none());
        assert_eq!(m.malformed_lines, 0);
    }

    #[test]
    fn jdk_0x_prefixed() {
        let m = parse(
            "0x00007f3c1d0a1c80 0x0000000000000150 Interpreter\n0x00007f3c24a0e100 0x00000000000002a8 void Busy.spin(long)\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(
            &*m.lookup(0x7f3c24a0e200).unwrap().name,
            "void Busy.spin(long)"
        );
        assert_eq!(&*m.lookup(0x7f3c1d0a1c80).unwrap().name, "Interpreter");
    }

    #[test]
    fn malformed_lines_are_skipped_and_counted() {
        let m = parse(
            "zzzz 10 bad_start\n10 qq bad_size\n20 10\n\n30 0 empty\n40 10 good\n\u{0}\u{1}\n50 10 also good",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m.malformed_lines, 5);
        assert_eq!(&*m.lookup(0x55).unwrap().name, "also good");
    }

    #[test]
    fn huge_line_is_skipped_without_losing_the_next() {
        let huge = format!("10 10 {}\n20 10 after\n", "x".repeat(MAX_LINE_BYTES * 3));
        let m = PerfMap::parse(io::BufReader::with_capacity(1024, huge.as_bytes())).unwrap();
        assert_eq!(m.malformed_lines, 1);
        assert_eq!(m.len(), 1);
        assert_eq!(&*m.lookup(0x25).unwrap().name, "after");
    }

    #[test]
    fn invalid_utf8_is_malformed() {
        let m = PerfMap::parse(&b"10 10 ok\n20 10 \xff\xfe\n"[..]).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m.malformed_lines, 1);
    }

    #[test]
    fn empty_file() {
        let m = parse("");
        assert!(m.is_empty());
        assert_eq!(m.malformed_lines, 0);
        assert!(m.lookup(0).is_none());
    }

    #[test]
    fn newer_entry_wins_on_same_start() {
        let m = parse("100 10 old\n100 10 new\n");
        assert_eq!(&*m.lookup(0x105).unwrap().name, "new");
    }

    #[test]
    fn overlapping_older_range_still_found() {
        let m = parse("100 100 outer\n150 10 inner\n");
        assert_eq!(&*m.lookup(0x155).unwrap().name, "inner");
        assert_eq!(&*m.lookup(0x170).unwrap().name, "outer");
    }
}
