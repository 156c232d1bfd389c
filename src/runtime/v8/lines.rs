//! Lines of JavaScript functions: where a function starts in its script,
//! as a line number, the way V8's own profiler places a function
//! (`callFrame.lineNumber` of a `.cpuprofile`, 0-based there, 1-based
//! here as pprof and editors count).
//!
//! A script's line ends come from `Script::line_ends` when V8 computed them
//! (it does so lazily, for a stack trace or a profiler), else from a scan of
//! the script's source string in the process, counted as V8 counts them
//! (`\n`, a `\r` not followed by `\n`, U+2028, U+2029). The ends a scan
//! finds are cached per script, within [`MAX_CACHED_ENDS`] in all and
//! [`MAX_ENDS_PER_SCRIPT`] each; a scan
//! reads at most [`MAX_SOURCE_BYTES`] of one source, and
//! [`SCAN_BYTES_PER_DRAIN`] of one process in a drain (a function whose
//! line waits for the next drain is named without it meanwhile).

use super::heap::{Heap, MAX_CONS_DEPTH, is_object, is_smi, smi};
use crate::shared::{FastMap, Pid};

/// Line ends kept for all scripts together (4 bytes each).
pub const MAX_CACHED_ENDS: usize = 1 << 20;
/// Longest source scanned, in bytes (a bigger script's functions have no line
/// unless V8 computed its line ends).
pub const MAX_SOURCE_BYTES: u64 = 8 << 20;
/// Bytes of sources scanned in one process per drain at most.
pub const SCAN_BYTES_PER_DRAIN: u64 = 8 << 20;
/// Lines of one scanned script kept at most (a source with more has no
/// lines, so a source of nothing but line breaks costs no more than this).
pub const MAX_ENDS_PER_SCRIPT: usize = 1 << 18;
/// Pieces of a cons string followed at most.
const MAX_PIECES: usize = 256;
/// Lines of a `Script::line_ends` believed at most.
const MAX_LINES: i64 = 1 << 24;
/// Bytes read from a source at a time.
const CHUNK: usize = 64 << 10;

/// Where a build keeps a script's source and line ends, and the string
/// forms a source may take beyond those names use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinesLayout {
    /// `Script::source`.
    pub script_source: u16,
    /// `Script::line_ends` (a FixedArray of SMIs, or undefined).
    pub script_line_ends: u16,
    /// `FIXED_ARRAY_TYPE`.
    pub type_fixed_array: u16,
    /// `FixedArrayBase::length` (a SMI); the elements follow it.
    pub array_length: u16,
    /// `ODDBALL_TYPE` (undefined, where a ScopeInfo has no inferred name).
    pub type_oddball: u16,
    /// `SlicedString::parent` and `offset` (a SMI).
    pub sliced: (u16, u16),
    /// Representation tags of sliced and external strings.
    pub sliced_tag: u16,
    /// See [`LinesLayout::sliced_tag`].
    pub external_tag: u16,
    /// `ExternalString::resource`; the cached pointer to its characters
    /// follows it (`resource_data`).
    pub external_resource: u16,
}

/// Why a line is not given now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoLine {
    /// The source cannot be read (a form not read, too long, unreadable).
    Unknown,
    /// This drain's scanning allowance is spent: ask again at the next.
    Later,
}

/// A script's line ends, as scanned.
struct Ends {
    /// The source string and its length they were scanned from.
    source: u64,
    length: u32,
    /// Offsets of the line terminators, in order.
    ends: Vec<u32>,
}

/// Line ends of scripts, per process.
#[derive(Default)]
pub struct ScriptLines {
    scripts: FastMap<(Pid, u64), Ends>,
    cached: usize,
    /// Bytes scanned per process in its current drain: (drain, bytes).
    scanned: FastMap<Pid, (u64, u64)>,
}

/// A piece of a string's characters in the process: address, count, and
/// whether each is two bytes.
#[derive(Debug, Clone, Copy)]
struct Piece {
    addr: u64,
    chars: u64,
    two_byte: bool,
}

impl ScriptLines {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The 1-based line of offset `pos` of script `script` (tagged) of
    /// process `pid`, in its drain `drain`.
    pub fn line(
        &mut self,
        heap: &mut Heap<'_>,
        l: &LinesLayout,
        pid: Pid,
        drain: u64,
        script: u64,
        pos: u32,
    ) -> Result<u32, NoLine> {
        let source = heap
            .field(script, l.script_source)
            .map_err(|_| NoLine::Unknown)?;
        if !heap.is_string(source) {
            return Err(NoLine::Unknown);
        }
        let length = heap
            .mem
            .u32(source - 1 + u64::from(heap.layout.string_length))
            .map_err(|_| NoLine::Unknown)?;
        if pos > length {
            return Err(NoLine::Unknown);
        }
        if let Some(e) = self.scripts.get(&(pid, script))
            && e.source == source
            && e.length == length
        {
            return Ok(line_in(&e.ends, pos));
        }
        if let Some(line) = v8s_line_ends(heap, l, script, pos, length) {
            return Ok(line);
        }
        let pieces = pieces(heap, l, source).ok_or(NoLine::Unknown)?;
        let bytes: u64 = pieces
            .iter()
            .map(|p| p.chars * if p.two_byte { 2 } else { 1 })
            .sum();
        if bytes > MAX_SOURCE_BYTES
            || pieces.iter().map(|p| p.chars).sum::<u64>() != u64::from(length)
        {
            return Err(NoLine::Unknown);
        }
        let spent = self.scanned.entry(pid).or_insert((drain, 0));
        if spent.0 != drain {
            *spent = (drain, 0);
        }
        if spent.1 + bytes > SCAN_BYTES_PER_DRAIN {
            return Err(NoLine::Later);
        }
        spent.1 += bytes;
        // Within this allowance, not the drain's budget for names.
        heap.mem.extend(bytes);
        let ends = scan(heap, &pieces).ok_or(NoLine::Unknown)?;
        let line = line_in(&ends, pos);
        if self.cached + ends.len() > MAX_CACHED_ENDS {
            self.scripts.clear();
            self.cached = 0;
        }
        self.cached += ends.len();
        if let Some(old) = self.scripts.insert(
            (pid, script),
            Ends {
                source,
                length,
                ends,
            },
        ) {
            self.cached -= old.ends.len();
        }
        Ok(line)
    }

    /// Forgets the scripts of processes that are gone.
    pub fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool) {
        self.scripts.retain(|(pid, _), _| is_live(*pid));
        self.scanned.retain(|pid, _| is_live(*pid));
        self.cached = self.scripts.values().map(|e| e.ends.len()).sum();
    }

    /// Bytes the cache holds.
    pub fn cached_bytes(&self) -> usize {
        self.cached * 4 + self.scripts.len() * 64
    }
}

/// The 1-based line of `pos` given the offsets of the line terminators:
/// one more than the terminators before it.
fn line_in(ends: &[u32], pos: u32) -> u32 {
    ends.partition_point(|&e| e < pos) as u32 + 1
}

/// The line of `pos` from the line ends V8 computed for `script`, if it
/// did: a FixedArray of SMIs, searched in place. `None` when there are
/// none or they are not in order where searched.
fn v8s_line_ends(
    heap: &mut Heap<'_>,
    l: &LinesLayout,
    script: u64,
    pos: u32,
    length: u32,
) -> Option<u32> {
    let a = heap.field(script, l.script_line_ends).ok()?;
    if !is_object(a) || heap.instance_type(a).ok()? != l.type_fixed_array {
        return None;
    }
    let n = heap.field(a, l.array_length).ok()?;
    if !is_smi(n) || !(1..=MAX_LINES).contains(&smi(n)) {
        return None;
    }
    let n = smi(n) as u64;
    let mut at = |i: u64| -> Option<i64> {
        let w = heap
            .mem
            .u64(a - 1 + u64::from(l.array_length) + 8 + 8 * i)
            .ok()?;
        (is_smi(w) && (0..=i64::from(length)).contains(&smi(w))).then(|| smi(w))
    };
    // The first end at or past pos; the ends met on the way must rise.
    let (mut lo, mut hi) = (0u64, n);
    let (mut below, mut above) = (-1i64, i64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let e = at(mid)?;
        if e <= below || e >= above {
            return None;
        }
        if e < i64::from(pos) {
            below = e;
            lo = mid + 1;
        } else {
            above = e;
            hi = mid;
        }
    }
    Some(lo as u32 + 1)
}

/// Where the characters of string `s` (tagged) are, in order: sequential
/// and external strings' own, a cons string's halves', a thin string's
/// target's, a sliced string's part of its parent's. `None` for a form
/// not read (an external string without its data pointer) or past the
/// bounds.
fn pieces(heap: &mut Heap<'_>, l: &LinesLayout, s: u64) -> Option<Vec<Piece>> {
    let mut out = Vec::new();
    collect(heap, l, s, 0, u64::MAX, &mut out, 0)?;
    Some(out)
}

fn collect(
    heap: &mut Heap<'_>,
    l: &LinesLayout,
    s: u64,
    from: u64,
    count: u64,
    out: &mut Vec<Piece>,
    depth: u32,
) -> Option<()> {
    if depth > MAX_CONS_DEPTH || out.len() >= MAX_PIECES || !is_object(s) {
        return None;
    }
    let v = heap.layout;
    let t = heap.instance_type(s).ok()?;
    if t >= v.first_nonstring {
        return None;
    }
    let len = u64::from(heap.mem.u32(s - 1 + u64::from(v.string_length)).ok()?);
    if from > len {
        return None;
    }
    let count = count.min(len - from);
    let two_byte = t & v.encoding_mask != v.one_byte_tag;
    let width = if two_byte { 2 } else { 1 };
    match t & v.representation_mask {
        0 => {
            let chars = if two_byte {
                v.seq_two_chars
            } else {
                v.seq_one_chars
            };
            out.push(Piece {
                addr: s - 1 + u64::from(chars) + from * width,
                chars: count,
                two_byte,
            });
        }
        r if r == l.external_tag => {
            let data = heap.field(s, l.external_resource + 8).ok()?;
            if data == 0 || data >= 1 << 47 {
                return None;
            }
            out.push(Piece {
                addr: data + from * width,
                chars: count,
                two_byte,
            });
        }
        r if r == v.cons_tag => {
            let first = heap.field(s, v.cons.0).ok()?;
            let second = heap.field(s, v.cons.1).ok()?;
            let first_len = u64::from(
                heap.mem
                    .u32(first.checked_sub(1)? + u64::from(v.string_length))
                    .ok()?,
            );
            if from < first_len {
                let n = count.min(first_len - from);
                collect(heap, l, first, from, n, out, depth + 1)?;
            }
            let end = from + count;
            if end > first_len {
                let start = from.saturating_sub(first_len);
                collect(
                    heap,
                    l,
                    second,
                    start,
                    end - first_len - start,
                    out,
                    depth + 1,
                )?;
            }
        }
        r if r == v.thin_tag => {
            let actual = heap.field(s, v.thin_actual).ok()?;
            collect(heap, l, actual, from, count, out, depth + 1)?;
        }
        r if r == l.sliced_tag => {
            let parent = heap.field(s, l.sliced.0).ok()?;
            let offset = heap.field(s, l.sliced.1).ok()?;
            if !is_smi(offset) || smi(offset) < 0 {
                return None;
            }
            collect(
                heap,
                l,
                parent,
                smi(offset) as u64 + from,
                count,
                out,
                depth + 1,
            )?;
        }
        _ => return None,
    }
    Some(())
}

/// Finds line terminators as V8 counts them, a character at a time.
#[derive(Default)]
struct Terminators {
    /// Characters seen.
    at: u32,
    /// A "\r" just seen: a terminator unless a "\n" follows.
    pending_cr: Option<u32>,
    ends: Vec<u32>,
}

impl Terminators {
    fn push(&mut self, c: u16) {
        // A "\r\n" ends its line at the "\n"; a lone "\r" at itself.
        if let Some(cr) = self.pending_cr.take()
            && c != u16::from(b'\n')
        {
            self.ends.push(cr);
        }
        match c {
            0x0a | 0x2028 | 0x2029 => self.ends.push(self.at),
            0x0d => self.pending_cr = Some(self.at),
            _ => {}
        }
        self.at += 1;
    }

    fn finish(mut self) -> Vec<u32> {
        if let Some(cr) = self.pending_cr {
            self.ends.push(cr);
        }
        self.ends
    }
}

/// The offsets of the line terminators of the characters in `pieces`.
fn scan(heap: &mut Heap<'_>, pieces: &[Piece]) -> Option<Vec<u32>> {
    let mut t = Terminators::default();
    let mut buf = vec![0u8; CHUNK];
    for p in pieces {
        let width = if p.two_byte { 2 } else { 1 };
        let mut done = 0u64;
        while done < p.chars {
            let n = ((p.chars - done) as usize * width).min(CHUNK / width * width);
            heap.mem
                .read_direct(p.addr + done * width as u64, &mut buf[..n])
                .ok()?;
            if p.two_byte {
                for c in buf[..n].chunks_exact(2) {
                    t.push(u16::from_le_bytes([c[0], c[1]]));
                }
            } else {
                buf[..n].iter().for_each(|&c| t.push(u16::from(c)));
            }
            done += (n / width) as u64;
            if t.ends.len() > MAX_ENDS_PER_SCRIPT {
                return None;
            }
        }
    }
    Some(t.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_on_the_line_after_the_terminators_before_it() {
        // "ab\ncd\r\nef": ends at 2 and 6 (the "\n" of "\r\n").
        let ends = [2, 6];
        assert_eq!(line_in(&ends, 0), 1);
        assert_eq!(line_in(&ends, 2), 1);
        assert_eq!(line_in(&ends, 3), 2);
        assert_eq!(line_in(&ends, 7), 3);
    }

    #[test]
    fn terminators_are_counted_as_v8_counts_them() {
        let ends = |text: &str| {
            let mut t = Terminators::default();
            text.encode_utf16().for_each(|c| t.push(c));
            t.finish()
        };
        assert_eq!(ends("ab\ncd\r\nef"), [2, 6]);
        assert_eq!(ends("a\rb\u{2028}c\u{2029}"), [1, 3, 5]);
        assert_eq!(ends("x\r"), [1]);
        assert!(ends("no terminator").is_empty());
    }
}
