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
    /// Entries dropped beyond [`MAX_ENTRIES`] or the byte budget.
    pub dropped_entries: u64,
    /// Bytes the entries hold, as [`PerfMap::approx_bytes`] counts them.
    bytes: usize,
}

/// Heap bytes of one entry: the struct and its name (the allocator rounds
/// a name up to 16 bytes and adds 8).
fn entry_bytes(e: &PerfMapEntry) -> usize {
    std::mem::size_of::<PerfMapEntry>() + (e.name.len() + 8).next_multiple_of(16)
}

impl PerfMap {
    /// Parses a whole perf map. I/O errors end the parse with what was read.
    pub fn parse<R: BufRead>(reader: R) -> io::Result<Self> {
        Self::parse_within(reader, usize::MAX)
    }

    /// Parses a perf map keeping at most `max_bytes` of entries (as
    /// [`PerfMap::approx_bytes`] counts them): the lines past the budget are
    /// counted in `dropped_entries`, not held. So a 64 MiB map never costs
    /// more than the budget (and the parse's vector growth) while it is
    /// read, rather than ~380 MB parsed and then evicted.
    pub fn parse_within<R: BufRead>(mut reader: R, max_bytes: usize) -> io::Result<Self> {
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
                        Some(e)
                            if indexed.len() < MAX_ENTRIES
                                && map.bytes + entry_bytes(&e) <= max_bytes =>
                        {
                            map.bytes += entry_bytes(&e);
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
        map.entries.shrink_to_fit();
        map.bytes = map.entries.iter().map(entry_bytes).sum();
        Ok(map)
    }

    /// Adds the entries of lines appended since this map was parsed: an
    /// entry that starts where an older one does replaces it. In place:
    /// a copy of the whole map for every append of a growing JIT's map was
    /// most of the daemon's heap peak (48 of 205 MiB, a node process
    /// compiling 4,000 functions a second).
    /// Entries that would take the map past `max_bytes` are dropped and
    /// counted.
    pub fn merge(&mut self, newer: PerfMap, max_bytes: usize) {
        self.malformed_lines += newer.malformed_lines;
        self.dropped_entries += newer.dropped_entries;
        let room = max_bytes.saturating_sub(self.bytes);
        let mut taken = 0;
        let fit = newer
            .entries
            .iter()
            .take_while(|e| {
                taken += entry_bytes(e);
                taken <= room
            })
            .count();
        self.dropped_entries += (newer.entries.len() - fit) as u64;
        self.entries.extend(newer.entries.into_iter().take(fit));
        // Stable: for one start the older entry stays first, then the
        // newer (appended after it). Mostly sorted runs: cheap.
        self.entries.sort_by_key(|e| e.start);
        let n = self.entries.len();
        let mut kept = 0;
        for i in 0..n {
            if i + 1 < n && self.entries[i + 1].start == self.entries[i].start {
                continue;
            }
            self.entries.swap(kept, i);
            kept += 1;
        }
        self.entries.truncate(kept);
        let dropped = self.entries.len().saturating_sub(MAX_ENTRIES) as u64;
        self.entries.truncate(MAX_ENTRIES);
        self.dropped_entries += dropped;
        self.bytes = self.entries.iter().map(entry_bytes).sum();
    }

    /// Bytes this map holds, roughly (entries and their names, and the
    /// vector's spare capacity).
    pub fn approx_bytes(&self) -> usize {
        self.bytes
            + (self.entries.capacity() - self.entries.len()) * std::mem::size_of::<PerfMapEntry>()
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
            // `e.start <= addr`, so the difference cannot wrap; comparing it
            // with the size also covers a range that ends at 2^64.
            .find(|e| addr - e.start < e.size)
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
pub fn parse_complete_lines(
    file: &std::fs::File,
    from: u64,
    size: u64,
    max_bytes: usize,
) -> (PerfMap, u64) {
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
    let map = PerfMap::parse_within(io::BufReader::with_capacity(64 * 1024, reader), max_bytes)
        .unwrap_or_default();
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
        name: super::cap_name(name).into(),
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

    /// A map larger than the budget keeps what fits, counts the rest, and
    /// a later append past the budget is dropped and counted too.
    #[test]
    fn parse_and_merge_keep_within_the_byte_budget() {
        let line = |i: u64| {
            format!(
                "{:x} 10 LazyCompile:*fn_{i} /srv/app/file_{i}.js:1:1\n",
                0x1000 + i * 16
            )
        };
        let text: String = (0..100_000).map(line).collect();
        let budget = 1 << 20;
        let m = PerfMap::parse_within(text.as_bytes(), budget).unwrap();
        assert!(
            m.approx_bytes() <= budget + budget / 8,
            "{} bytes",
            m.approx_bytes()
        );
        assert!(m.len() > 5_000, "{} entries kept", m.len());
        assert_eq!(m.len() as u64 + m.dropped_entries, 100_000);
        let mut grown = PerfMap::parse_within(text.as_bytes(), budget / 2).unwrap();
        let held = grown.len();
        let more: String = (100_000..200_000).map(line).collect();
        grown.merge(PerfMap::parse(more.as_bytes()).unwrap(), budget);
        assert!(grown.approx_bytes() <= budget + budget / 8);
        assert!(grown.len() > held);
        assert_eq!(grown.len() as u64 + grown.dropped_entries, 200_000);
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

    #[test]
    fn range_at_the_top_of_the_address_space() {
        let m = parse("ffffffffffffffff 1 last\nfffffffffffffff0 10 end\n");
        assert_eq!(&*m.lookup(u64::MAX).unwrap().name, "last");
        assert_eq!(&*m.lookup(u64::MAX - 1).unwrap().name, "end");
        let m = parse("fffffffffffffff0 ffffffffffffffff huge\n");
        assert_eq!(&*m.lookup(u64::MAX).unwrap().name, "huge");
    }

    /// A file under the temp dir holding `bytes`, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(bytes: &[u8]) -> (TempFile, std::fs::File) {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let path = std::env::temp_dir().join(format!(
                "emberd-perfmap-test-{}-{}.map",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&path, bytes).unwrap();
            let file = std::fs::File::open(&path).unwrap();
            (TempFile(path), file)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn complete_lines_search_back_over_chunks() {
        // The last newline is more than one 64 KiB chunk before the end.
        let mut text = b"10 10 first\n20 10 second\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 200_000));
        let (_tmp, file) = TempFile::new(&text);
        let (m, off) = parse_complete_lines(&file, 0, text.len() as u64, usize::MAX);
        assert_eq!((m.len(), off), (2, 25));
        // From the half line on, nothing is complete yet.
        let (m, off) = parse_complete_lines(&file, 25, text.len() as u64, usize::MAX);
        assert_eq!((m.len(), off), (0, 25));
    }

    mod props {
        use super::super::*;
        use super::TempFile;
        use proptest::prelude::*;

        /// Names as runtimes write them: anything but a newline, with a
        /// non-blank core (the parser trims the ends).
        fn name() -> impl Strategy<Value = String> {
            prop_oneof![
                "[A-Za-z_:*.]{1,12}",
                "[^\n]{0,24}",
                "[ \t\r]{0,2}[a-z (),]{1,20}[ \r]{0,2}"
            ]
            .prop_filter("blank name", |n| !n.trim().is_empty())
        }

        fn entries() -> impl Strategy<Value = Vec<(u64, u64, String)>> {
            let start = prop_oneof![
                any::<u64>(),
                0u64..=0x1000,
                0x7f00_0000_0000u64..=0x7f00_0000_0400,
                Just(u64::MAX),
            ];
            let size = prop_oneof![1u64..=0x400, any::<u64>().prop_map(|s| s.max(1))];
            prop::collection::vec((start, size, name()), 0..40)
        }

        /// The map text of `entries`, bare hex or `0x` as the runtimes write.
        fn map_text(entries: &[(u64, u64, String)], prefixed: bool) -> String {
            entries
                .iter()
                .map(|(start, size, name)| {
                    if prefixed {
                        format!("{start:#018x} {size:#x} {name}\n")
                    } else {
                        format!("{start:x} {size:x} {name}\n")
                    }
                })
                .collect()
        }

        /// Perf-map-like text: good lines, bad lines, blank lines, with or
        /// without a final newline.
        fn file_text() -> impl Strategy<Value = Vec<u8>> {
            let line = prop_oneof![
                (any::<u16>(), 0u16..=64, name())
                    .prop_map(|(s, z, n)| format!("{s:x} {z:x} {n}").into_bytes()),
                "[0-9a-fx ]{0,12}".prop_map(String::into_bytes),
                prop::collection::vec(any::<u8>(), 0..16),
                Just(Vec::new()),
            ];
            (prop::collection::vec(line, 0..30), any::<bool>()).prop_map(|(lines, last_nl)| {
                let mut text = lines.join(&b'\n');
                if last_nl {
                    text.push(b'\n');
                }
                text
            })
        }

        fn same_lookups(a: &PerfMap, b: &PerfMap, addrs: impl IntoIterator<Item = u64>) {
            for addr in addrs {
                assert_eq!(a.lookup(addr), b.lookup(addr), "lookup({addr:#x})");
            }
        }

        /// Addresses worth looking up in `m`: each entry's edges.
        fn probe_addrs(m: &PerfMap, extra: &[u64]) -> Vec<u64> {
            m.entries
                .iter()
                .flat_map(|e| {
                    [
                        e.start,
                        e.start.wrapping_sub(1),
                        e.start.saturating_add(e.size - 1),
                        e.start.saturating_add(e.size),
                    ]
                })
                .chain(extra.iter().copied())
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Arbitrary bytes: an answer, never a panic; every non-blank
            /// line is an entry, a malformed line or a replaced duplicate.
            #[test]
            fn parse_never_panics(bytes in prop::collection::vec(
                prop_oneof![any::<u8>(), Just(b'\n'), Just(b' '), Just(b'1'), Just(b'x')],
                0..300,
            )) {
                let m = PerfMap::parse(&bytes[..]).unwrap();
                let lines = bytes
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                    .count();
                prop_assert!(m.len() + m.malformed_lines as usize <= lines);
                prop_assert!(m.entries.windows(2).all(|w| w[0].start < w[1].start));
                let _ = m.lookup(0);
                let _ = m.lookup(u64::MAX);
            }

            /// A printed map reads back: each start finds its entry, the
            /// newest of those with that start.
            #[test]
            fn printed_map_reads_back(entries in entries(), prefixed in any::<bool>()) {
                let m = PerfMap::parse(map_text(&entries, prefixed).as_bytes()).unwrap();
                prop_assert_eq!(m.malformed_lines, 0);
                let mut newest = std::collections::HashMap::new();
                for (start, size, name) in &entries {
                    newest.insert(*start, (*size, name.trim()));
                }
                prop_assert_eq!(m.len(), newest.len());
                for (start, (size, name)) in newest {
                    let e = m.lookup(start);
                    prop_assert!(e.is_some(), "{:#x} not found", start);
                    let e = e.unwrap();
                    prop_assert_eq!((e.start, e.size, &*e.name), (start, size, name));
                }
            }

            /// Reading the complete lines of a file equals parsing them, and
            /// reading it in two steps then merging gives the same map.
            #[test]
            fn complete_lines_in_one_or_two_reads(
                text in file_text(),
                cut in any::<prop::sample::Index>(),
                extra in prop::collection::vec(0u64..=0x11000, 4),
            ) {
                let (_tmp, file) = TempFile::new(&text);
                let len = text.len() as u64;
                let (whole, end) = parse_complete_lines(&file, 0, len, usize::MAX);
                let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                prop_assert_eq!(end, complete as u64);
                let direct = PerfMap::parse(&text[..complete]).unwrap();
                prop_assert_eq!(&whole.entries, &direct.entries);
                prop_assert_eq!(whole.malformed_lines, direct.malformed_lines);

                let cut = cut.index(text.len() + 1) as u64;
                let (first, mid) = parse_complete_lines(&file, 0, cut, usize::MAX);
                prop_assert!(mid <= cut);
                let (second, end2) = parse_complete_lines(&file, mid, len, usize::MAX);
                prop_assert_eq!(end2, end);
                let mut merged = first.clone();
                merged.merge(second, usize::MAX);
                prop_assert_eq!(&merged.entries, &whole.entries);
                prop_assert_eq!(merged.malformed_lines, whole.malformed_lines);
                same_lookups(&merged, &whole, probe_addrs(&whole, &extra));
            }
        }
    }
}
