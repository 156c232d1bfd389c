//! Names of Python frames: the code-object records the BPF walker
//! (`bpf/python.h`) copied into `py_codes`, read at the drain after the
//! sample, and the line of each frame from the code object's line table.
//!
//! A frame is shown as `qualname (file.py)`, py-spy's `--nolineno` form,
//! so the two tools' folded stacks compare line for line and the palettes
//! recognise Python frames by their `(….py)` ending; the line is the
//! frame's [`Frame::line`] (pprof Locations always carry it).
//!
//! Everything here came out of a process's memory, which its user can
//! write: names are capped (BPF copied at most 128 bytes of a qualname and
//! the last 96 of a file name), control characters are replaced, the line
//! table is decoded within the bytes copied, and the cache is bounded.

use std::sync::Arc;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::shared::FastMap;
use crate::shared::Pid;
use crate::shared::{Frame, FrameKind};

/// Tag of a Python frame slot (`EMBERD_PY_FRAME`).
pub const PY_FRAME: u64 = 0xec00_0000_0000_0000;
/// Tag of a Python marker slot (`EMBERD_PY_MARK`).
pub const PY_MARK: u64 = 0xee00_0000_0000_0000;
const TAG_MASK: u64 = 0xff00_0000_0000_0000;
const FP_BITS: u32 = 40;
const FP_MASK: u64 = (1 << FP_BITS) - 1;

/// Whether a stack slot is an interpreter frame or marker, not an address.
pub fn is_tagged(slot: u64) -> bool {
    matches!(slot & TAG_MASK, PY_FRAME | PY_MARK)
}

/// Why an eval-loop call has no Python frames (`enum py_mark`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyMark {
    /// The thread state could not be read.
    NoThread,
    /// A frame could not be read.
    FrameRead,
    /// A code object could not be read.
    CodeRead,
    /// The thread-state key is not one emberd can read.
    BadKey,
    /// The frame chain did not end where the eval loop's did.
    Loop,
    /// Something else (a value the walker never writes).
    Other,
}

impl PyMark {
    fn from_raw(v: u64) -> PyMark {
        use crate::bpf::enums as c;
        match u32::try_from(v).unwrap_or(0) {
            c::PY_MARK_NO_THREAD => PyMark::NoThread,
            c::PY_MARK_FRAME_READ => PyMark::FrameRead,
            c::PY_MARK_CODE_READ => PyMark::CodeRead,
            c::PY_MARK_BAD_KEY => PyMark::BadKey,
            c::PY_MARK_LOOP => PyMark::Loop,
            _ => PyMark::Other,
        }
    }

    /// The `reason` label in `/metrics` (index = `enum py_mark`).
    pub const LABELS: [&'static str; 6] = [
        "other",
        "thread_state_unreadable",
        "frame_unreadable",
        "code_unreadable",
        "bad_tls_key",
        "chain_mismatch",
    ];

    fn text(self) -> &'static str {
        match self {
            PyMark::NoThread => "[python: thread state unreadable]",
            PyMark::FrameRead => "[python: frame unreadable]",
            PyMark::CodeRead => "[python: code object unreadable]",
            PyMark::BadKey => "[python: thread key unsupported]",
            PyMark::Loop => "[python: frame chain mismatch]",
            PyMark::Other => "[python: unknown]",
        }
    }
}

/// A code object as the walker copied it (`struct py_code`).
#[derive(Debug, Clone)]
struct Code {
    /// `qualname (file.py)`.
    name: Arc<str>,
    /// The file name as copied (its tail).
    file: Arc<str>,
    firstlineno: u32,
    /// The line table, as far as copied.
    linetable: Box<[u8]>,
    /// Whether `linetable` is all of the code's table.
    whole_table: bool,
    /// Its encoding: the minor version (co_lnotab up to 9, 3.10's
    /// co_linetable, 3.11's locations from 11 on).
    minor: u8,
    /// Whose share of the caches it counts in (the walked thread's account: its real uid, or its subuid range's owner).
    uid: u32,
}

/// sizeof(struct py_code): the copied names and line table, then `used`
/// and `uid` (at [`PY_CODE_UID_AT`]).
const PY_CODE_BYTES: usize = 4 + 4 + 4 + 2 + 1 + 1 + 128 + 96 + 256 + 8 + 4 + 4;
const PY_CODE_UID_AT: usize = std::mem::offset_of!(crate::bpf::types::py_code, uid);
const PY_CODE_MINOR_AT: usize = std::mem::offset_of!(crate::bpf::types::py_code, minor);
const _: () = assert!(std::mem::size_of::<crate::bpf::types::py_code>() == PY_CODE_BYTES);

/// Code objects cached per (process, fingerprint): the bound on entries
/// (each about 600 bytes with its line table: 2.4 MiB at most). When full,
/// the user holding the most entries gives theirs up (see [`evict_top`]).
pub const MAX_CACHED_CODES: usize = 4096;

/// Named slots cached (each about 150 bytes: key, frame, shared name).
pub const MAX_CACHED_SLOTS: usize = 16384;

/// Counts of what naming Python frames found, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyNameStats {
    /// Python frames named.
    pub named: u64,
    /// Frames whose code record was gone from `py_codes` (evicted before
    /// the drain): shown as `[python: code evicted]`.
    pub evicted: u64,
    /// Marker slots, by `enum py_mark` (index 0 unused).
    pub marks: [u64; 6],
    /// Code records read from BPF.
    pub records_read: u64,
    /// Bytes of code records held in the cache.
    pub cached_bytes: u64,
}

/// A named slot and the user whose share of the cache it counts in.
type NamedSlot = (u32, Arc<[Frame]>);

/// Names Python frame slots of drained stacks.
#[derive(Default)]
pub struct PythonNames {
    codes: Option<MapHandle>,
    cache: FastMap<(Pid, u64), Arc<Code>>,
    /// Named slots (fingerprint and instruction index) and their code's
    /// user: the same few come at every drain, and naming one allocates.
    frames: FastMap<(Pid, u64), NamedSlot>,
    cached_bytes: usize,
    stats: PyNameStats,
}

impl std::fmt::Debug for PythonNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonNames")
            .field("cached", &self.cache.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl PythonNames {
    /// Names the slots whose code records are in `py_codes`.
    pub fn new(codes: MapHandle) -> Self {
        Self {
            codes: Some(codes),
            ..Self::default()
        }
    }

    /// Counts so far.
    pub fn stats(&self) -> PyNameStats {
        PyNameStats {
            cached_bytes: (self.cached_bytes + self.frames.len() * SLOT_BYTES) as u64,
            ..self.stats
        }
    }

    /// Forgets the code objects of processes that are gone.
    pub fn forget_exited(&mut self, is_live: impl Fn(Pid) -> bool) {
        let before = self.cache.len();
        self.cache.retain(|(pid, _), _| is_live(*pid));
        self.frames.retain(|(pid, _), _| is_live(*pid));
        if self.cache.len() != before {
            self.cached_bytes = self.cache.values().map(|c| code_bytes(c)).sum();
        }
    }

    /// The frames of one tagged slot of process `pid`.
    pub fn name(&mut self, pid: Pid, slot: u64) -> Arc<[Frame]> {
        if slot & TAG_MASK == PY_MARK {
            let m = PyMark::from_raw(slot & 0xff);
            self.stats.marks[(slot & 0xff).min(5) as usize] += 1;
            return one(Frame::new(m.text(), FrameKind::Marker));
        }
        if let Some((_, f)) = self.frames.get(&(pid, slot)) {
            self.stats.named += 1;
            return f.clone();
        }
        let fp = slot & FP_MASK;
        let index = ((slot >> FP_BITS) & 0xffff) as u32;
        let Some(code) = self.code(pid, fp) else {
            self.stats.evicted += 1;
            return one(Frame::new("[python: code evicted]", FrameKind::Marker));
        };
        self.stats.named += 1;
        let line = match code.minor {
            8 | 9 => line_of_lnotab(&code.linetable, code.firstlineno, index, code.whole_table),
            10 => line_of_linetable_310(&code.linetable, code.firstlineno, index),
            _ => line_of(&code.linetable, code.firstlineno, index),
        };
        let f = one(Frame {
            name: code.name.clone(),
            kind: FrameKind::Python,
            file: Some(code.file.clone()),
            line,
            module: None,
        });
        if self.frames.len() >= MAX_CACHED_SLOTS {
            evict_top(&mut self.frames, |(uid, _)| *uid);
        }
        self.frames.insert((pid, slot), (code.uid, f.clone()));
        f
    }

    fn code(&mut self, pid: Pid, fp: u64) -> Option<Arc<Code>> {
        if let Some(c) = self.cache.get(&(pid, fp)) {
            return Some(c.clone());
        }
        let map = self.codes.as_ref()?;
        let mut key = [0u8; 16];
        key[0..4].copy_from_slice(&pid.0.to_ne_bytes());
        key[8..16].copy_from_slice(&fp.to_ne_bytes());
        let value = map.lookup(&key, MapFlags::ANY).ok().flatten()?;
        self.stats.records_read += 1;
        let code = Arc::new(parse_record(&value)?);
        if self.cache.len() >= MAX_CACHED_CODES {
            // A record still in BPF is read again.
            evict_top(&mut self.cache, |c| c.uid);
            self.cached_bytes = self.cache.values().map(|c| code_bytes(c)).sum();
        }
        self.cached_bytes += code_bytes(&code);
        self.cache.insert((pid, fp), code.clone());
        Some(code)
    }
}

/// Makes room in a full cache shared by every user: the user holding the
/// most entries gives all of theirs up, the others keep theirs. Emptying
/// the whole cache (as before issue 41) let one user churning code objects
/// (a fake interpreter compiling thousands of functions a second) take
/// every other user's Python names with theirs at every fill; now they
/// only evict their own. Linear in the cache, once per fill.
fn evict_top<K, V>(map: &mut FastMap<K, V>, uid_of: impl Fn(&V) -> u32) {
    let mut per_uid: FastMap<u32, usize> = FastMap::default();
    for v in map.values() {
        *per_uid.entry(uid_of(v)).or_default() += 1;
    }
    let top = per_uid.into_iter().max_by_key(|&(uid, n)| (n, uid));
    match top {
        Some((uid, n)) if n >= map.len() / 4 => map.retain(|_, v| uid_of(v) != uid),
        // Many users, none holding much: start again.
        _ => map.clear(),
    }
}

/// Bytes a cached slot costs, about (key, Arc'd frame, table slot).
const SLOT_BYTES: usize = 150;

fn code_bytes(c: &Code) -> usize {
    std::mem::size_of::<Code>() + c.name.len() + c.file.len() + c.linetable.len() + 64
}

fn one(f: Frame) -> Arc<[Frame]> {
    Arc::from(vec![f])
}

/// Parses a `struct py_code` value.
fn parse_record(v: &[u8]) -> Option<Code> {
    if v.len() < PY_CODE_BYTES {
        return None;
    }
    let u32_at = |o: usize| u32::from_ne_bytes(v[o..o + 4].try_into().expect("4"));
    let firstlineno = u32_at(0);
    let qualname_len = u32_at(4) as usize;
    let filename_len = u32_at(8) as usize;
    let linetable_len = u16::from_ne_bytes([v[12], v[13]]) as usize;
    let (qkind, fkind) = (v[14], v[15]);
    let qualname = decode(&v[16..144], qualname_len, qkind, false);
    let filename = decode(&v[144..240], filename_len, fkind, true);
    let linetable = v[240..240 + linetable_len.min(256)].into();
    let uid = u32::from_ne_bytes(v[PY_CODE_UID_AT..PY_CODE_UID_AT + 4].try_into().expect("4"));
    let qualname = qualname.unwrap_or_else(|| "[python: unreadable name]".into());
    let filename = filename.unwrap_or_else(|| "?".into());
    let short = filename.rsplit('/').next().unwrap_or(&filename);
    Some(Code {
        name: Arc::from(format!("{qualname} ({short})")),
        file: Arc::from(filename.as_str()),
        firstlineno,
        linetable,
        whole_table: linetable_len <= 256,
        minor: v[PY_CODE_MINOR_AT],
        uid,
    })
}

/// A str's characters as copied: `len` characters of `kind` (0 ASCII,
/// else bytes per character), of which `buf` holds the head (or the tail,
/// `tail`); an ellipsis marks what was not copied. Control characters
/// (and `;`, the folded separator) become `?`.
fn decode(buf: &[u8], len: usize, kind: u8, tail: bool) -> Option<String> {
    let width = match kind {
        0 | 1 => 1,
        2 => 2,
        4 => 4,
        _ => return None,
    };
    let bytes = len.checked_mul(width)?;
    let held = bytes.min(buf.len() / width * width);
    let chars: Vec<char> = buf[..held]
        .chunks_exact(width)
        .map(|c| {
            let v = match width {
                1 => u32::from(c[0]),
                2 => u32::from(u16::from_ne_bytes([c[0], c[1]])),
                _ => u32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
            };
            char::from_u32(v)
                .filter(|c| !c.is_control() && *c != ';')
                .unwrap_or('?')
        })
        .collect();
    let text: String = chars.into_iter().collect();
    Some(match (held < bytes, tail) {
        (false, _) => text,
        (true, false) => format!("{text}…"),
        (true, true) => format!("…{text}"),
    })
}

/// The source line of code unit `index` by a 3.9 `co_lnotab`: pairs of
/// (bytes, signed lines) added in turn while the bytes stay at or before
/// the instruction's (CPython's `PyCode_Addr2Line`). `whole`: `table` is
/// all of it (else a head, and an instruction past it has no line here).
pub fn line_of_lnotab(table: &[u8], firstlineno: u32, index: u32, whole: bool) -> Option<u32> {
    let at = u64::from(index) * 2;
    let mut addr = 0u64;
    let mut line = i64::from(firstlineno);
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > at {
            return u32::try_from(line).ok().filter(|&l| l > 0);
        }
        line += i64::from(pair[1] as i8);
    }
    whole
        .then(|| u32::try_from(line).ok().filter(|&l| l > 0))
        .flatten()
}

/// The source line of code unit `index` by a 3.10 `co_linetable`
/// (PEP 626): each pair (bytes, signed lines) is the next range of
/// instructions and its line, -128 for none (CPython's
/// `PyLineTable_NextAddressRange`).
pub fn line_of_linetable_310(table: &[u8], firstlineno: u32, index: u32) -> Option<u32> {
    let at = u64::from(index) * 2;
    let mut end = 0u64;
    let mut line = i64::from(firstlineno);
    for pair in table.chunks_exact(2) {
        let start = end;
        end += u64::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if (start..end).contains(&at) {
            return this.and_then(|l| u32::try_from(l).ok()).filter(|&l| l > 0);
        }
    }
    None
}

/// The source line of code unit `index` by a 3.11+ location table
/// (CPython's `Objects/locations.md`), or None past what was copied or
/// where the table says there is none.
pub fn line_of(table: &[u8], firstlineno: u32, index: u32) -> Option<u32> {
    let mut line = i64::from(firstlineno);
    let mut start = 0u32;
    let mut i = 0usize;
    let varint = |i: &mut usize| -> Option<u64> {
        let mut b = u64::from(*table.get(*i)?);
        *i += 1;
        let mut val = b & 63;
        let mut shift = 0;
        while b & 64 != 0 {
            b = u64::from(*table.get(*i)?);
            *i += 1;
            shift += 6;
            if shift > 60 {
                return None;
            }
            val |= (b & 63) << shift;
        }
        Some(val)
    };
    let svarint = |i: &mut usize| -> Option<i64> {
        let u = varint(i)?;
        Some(if u & 1 != 0 {
            -((u >> 1) as i64)
        } else {
            (u >> 1) as i64
        })
    };
    while i < table.len() {
        let head = table[i];
        if head & 0x80 == 0 {
            return None; // not at an entry: the table is not what it claims
        }
        i += 1;
        let code = (head >> 3) & 15;
        let len = u32::from(head & 7) + 1;
        let mut has_line = true;
        match code {
            0..=9 => i += 1,
            10..=12 => {
                line += i64::from(code - 10);
                i += 2;
            }
            13 => line += svarint(&mut i)?,
            14 => {
                line += svarint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
            }
            _ => has_line = false,
        }
        if start <= index && index < start + len {
            return (has_line && line > 0).then_some(line as u32);
        }
        start += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: a full cache shared by every user drops the entries of the
    /// user holding the most (a code churner), and keeps the others'.
    #[test]
    fn a_full_code_cache_drops_only_the_biggest_users_entries() {
        let mut cache: FastMap<u32, u32> = FastMap::default();
        for i in 0..90 {
            cache.insert(i, 65530);
        }
        for i in 90..100 {
            cache.insert(i, 0);
        }
        evict_top(&mut cache, |uid| *uid);
        assert_eq!(cache.len(), 10);
        assert!(cache.values().all(|&uid| uid == 0));
        // Many users, none holding a quarter: emptied.
        let mut spread: FastMap<u32, u32> = (0..100).map(|i| (i, i % 10)).collect();
        evict_top(&mut spread, |uid| *uid);
        assert!(spread.is_empty());
    }

    #[test]
    fn line_table_entries_are_decoded() {
        // firstlineno 10: 2 units no-columns +0 (code 13, svarint 0), then 1
        // unit one-line +1 (code 11), then 3 units long form -1 (code 14).
        let t = [
            0x80 | (13 << 3) | 1,
            0,
            0x80 | (11 << 3),
            4,
            6,
            0x80 | (14 << 3) | 2,
            3, // svarint -1
            0,
            1,
            2,
        ];
        assert_eq!(line_of(&t, 10, 0), Some(10));
        assert_eq!(line_of(&t, 10, 1), Some(10));
        assert_eq!(line_of(&t, 10, 2), Some(11));
        assert_eq!(line_of(&t, 10, 5), Some(10));
        assert_eq!(line_of(&t, 10, 6), None, "past the table");
        assert_eq!(line_of(&[0x01, 0x02], 10, 0), None, "not a table");
    }

    /// The tables of one function (`def f(n):` at line 2, a loop over
    /// lines 4-7, a blank line 6), as pyenv's 3.9.18 and 3.10.13 compile
    /// it, against the lines each interpreter gives its instructions
    /// (`dis.findlinestarts`, `co_lines()`).
    #[test]
    fn lnotab_and_310_line_tables_are_decoded() {
        let want = [
            3, 3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 8, 8,
        ];
        let lnotab = [0, 1, 4, 1, 12, 1, 12, 2, 10, 1];
        let linetable = [4, 1, 12, 1, 12, 1, 10, 2, 4, 1];
        for (i, &line) in want.iter().enumerate() {
            assert_eq!(
                line_of_linetable_310(&linetable, 2, i as u32),
                Some(line),
                "3.10 at {i}"
            );
            assert_eq!(
                line_of_lnotab(&lnotab, 2, i as u32, true),
                Some(line),
                "3.9 at {i}"
            );
        }
        // The last pair's line holds to the end of the code, which the
        // table does not say: past its last pair, a copied head cannot
        // answer.
        assert_eq!(line_of_lnotab(&lnotab, 2, 19, false), None);
        assert_eq!(line_of_lnotab(&lnotab, 2, 18, false), Some(7));
        assert_eq!(line_of_linetable_310(&linetable, 2, 21), None);
        // A line-less range (-128) gives none.
        assert_eq!(line_of_linetable_310(&[4, 0x80, 4, 1], 2, 1), None);
        assert_eq!(line_of_linetable_310(&[4, 0x80, 4, 1], 2, 2), Some(3));
    }

    #[test]
    fn names_from_a_process_are_capped_and_cleaned() {
        assert_eq!(decode(b"abc;\n", 5, 0, false).as_deref(), Some("abc??"));
        assert_eq!(decode(b"abcdef", 10, 0, false).as_deref(), Some("abcdef…"));
        assert_eq!(decode(b"tail.py", 20, 0, true).as_deref(), Some("…tail.py"));
        let ucs2: Vec<u8> = "hé".encode_utf16().flat_map(|u| u.to_ne_bytes()).collect();
        assert_eq!(decode(&ucs2, 2, 2, false).as_deref(), Some("hé"));
        assert_eq!(decode(b"x", 1, 3, false), None);
    }
}
