//! Optimized code's frames (TurboFan, Maglev): from a pc to the code it
//! is in, and from that code's deoptimization data and source position
//! table to the function it was compiled for and the functions inlined
//! into it at that pc, outermost first, as V8's own profiler expands them.
//!
//! V8 keeps no pc → code index a reader outside the process can use, but
//! every piece of JIT code starts at an aligned address just past the
//! header of the object holding it (an InstructionStream, or on V8 10 the
//! Code itself), whose first word is that object's map: one map for all
//! of them in a process. So the code a pc is in is found by looking back
//! from the pc, aligned step by aligned step, for that map (at most
//! [`MAX_SCAN`] bytes), and then checked: the object must lead to a Code
//! whose own fields point back to it and whose instructions hold the pc.
//! Every array the process gives is read within a bound.

use thiserror::Error;

use super::heap::{Heap, is_object, smi};
use super::layout::CodeLayout;
use super::positions::{Function, expand, inlinings, position_at};
use crate::runtime::memory::MemoryError;

/// Bytes looked back from a pc for the start of its code (TurboFan code
/// of one function rarely passes a few tens of KiB).
pub const MAX_SCAN: u64 = 256 << 10;
/// Bytes of a source position table read (a longer one's later entries
/// are not seen: frames past them get the last position read).
pub const MAX_TABLE: usize = 64 << 10;
/// Functions inlined into one code object read at most.
pub const MAX_INLINED: i64 = 4096;
/// Alignment of instruction starts (`kCodeAlignment` is 32 or 64 on
/// x86-64, depending on the release: 32 finds both).
const ALIGN: u64 = 32;

/// Stretches of memory found to hold no code object kept per process, at
/// most: a pc in one is not looked back from again for a while.
const MAX_CODELESS: usize = 32;
/// Drains a codeless stretch is believed for (V8 may place code there
/// later, after a collection).
const CODELESS_DRAINS: u64 = 30;

/// Where one process's code objects are looked for: their map, once
/// known, and the stretches lately found to hold none. Some of V8 14's
/// frames run from memory with no code object within [`MAX_SCAN`] before
/// their pc (Node 26: pcs at the start of a code range); each look back
/// reads up to 64 pages, so a stretch found empty is remembered rather
/// than read again at every drain.
#[derive(Debug, Default)]
pub struct CodeSearch {
    stream_map: Option<u64>,
    /// (lowest, highest address looked at, drain): no code object's
    /// instructions start in between.
    codeless: std::collections::VecDeque<(u64, u64, u64)>,
}

impl CodeSearch {
    /// Whether `pc` was lately found with no code before it.
    fn known_codeless(&self, pc: u64, drain: u64) -> bool {
        self.codeless.iter().any(|&(lo, hi, at)| {
            (lo..=hi).contains(&pc) && drain.saturating_sub(at) < CODELESS_DRAINS
        })
    }

    fn note_codeless(&mut self, lo: u64, hi: u64, drain: u64) {
        self.codeless
            .retain(|&(_, _, at)| drain.saturating_sub(at) < CODELESS_DRAINS);
        if self.codeless.len() >= MAX_CODELESS {
            self.codeless.pop_front();
        }
        self.codeless.push_back((lo, hi, drain));
    }
}

/// Why a pc's code could not be read.
#[derive(Debug, Error)]
pub enum CodeError {
    /// No code object starts within [`MAX_SCAN`] bytes before the pc.
    #[error("no V8 code object starts within {MAX_SCAN} bytes before pc {0:#x}")]
    NoCode(u64),
    /// A code object was found, but it is not what its fields say.
    #[error("the code object before pc {0:#x} is inconsistent: {1}")]
    Inconsistent(u64, &'static str),
    /// The code is not optimized code (baseline code, a builtin's).
    #[error("the code at pc {0:#x} is not optimized code")]
    NotOptimized(u64),
    /// The process's memory could not be read there.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// The functions a pc of optimized code stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeAt {
    /// The code object (tagged).
    pub code: u64,
    /// Its first instruction.
    pub start: u64,
    /// Each frame's SharedFunctionInfo (tagged) and script offset,
    /// outermost first: the code's own function first.
    pub frames: Vec<(u64, Option<u32>)>,
}

/// Reads the code `pc` is in and the frames it stands for; `call`: the
/// pc is a return address (the call instruction before it is looked up).
/// `search`: the process's, at its drain `drain`.
pub fn code_at(
    heap: &mut Heap<'_>,
    c: &CodeLayout,
    pc: u64,
    call: bool,
    search: &mut CodeSearch,
    drain: u64,
) -> Result<CodeAt, CodeError> {
    if search.known_codeless(pc, drain) {
        return Err(CodeError::NoCode(pc));
    }
    // Until the process's map of code objects is known, a word that only
    // looks like it (a pointer to something with that type's number at
    // the right place) is passed over; once known, the first object with
    // it is the code, or nothing is.
    let mut from = pc;
    let (start, code) = loop {
        let (stream, start, map) = match find_stream(heap, c, pc, from, search.stream_map) {
            Ok(found) => found,
            Err(CodeError::NoCode(_)) if search.stream_map.is_some() => {
                search.note_codeless(lowest_scanned(c, pc), pc, drain);
                return Err(CodeError::NoCode(pc));
            }
            Err(e) => return Err(e),
        };
        match check_stream(heap, c, pc, stream, start) {
            Ok(code) => {
                search.stream_map = Some(map);
                break (start, code);
            }
            Err(e) if search.stream_map.is_some() => return Err(e),
            Err(_) => from = start - ALIGN,
        }
    };
    let offset = (pc - start).saturating_sub(u64::from(call));

    // Baseline code keeps its bytecode there, builtins nothing: only
    // optimized code has a fixed array with its function.
    let not_optimized = CodeError::NotOptimized(pc);
    let deopt = heap.field(code, c.code_deopt)?;
    let deopt_len = array_len(heap, c, deopt, &c.type_arrays).ok_or(not_optimized)?;
    let needed = [
        c.deopt_shared,
        c.deopt_inlined_count,
        c.deopt_literals,
        c.deopt_positions,
    ];
    if needed.iter().any(|&i| i64::from(i) >= deopt_len) {
        return Err(CodeError::NotOptimized(pc));
    }
    let mut shared = element(heap, c, deopt, c.deopt_shared)?;
    if let Some(f) = c.wrapper_shared {
        if !is_object(shared) {
            return Err(CodeError::Inconsistent(
                pc,
                "its function's wrapper is no object",
            ));
        }
        shared = heap.field(shared, f)?;
    }
    if !is_object(shared) || heap.instance_type(shared)? != heap.layout.type_shared {
        return Err(CodeError::NotOptimized(pc));
    }
    // The inlined functions are the first `count` literals; an inlining
    // position naming another index is not read (no frame is better than
    // another literal's name).
    let count = smi(element(heap, c, deopt, c.deopt_inlined_count)?).clamp(0, MAX_INLINED);
    let literals = element(heap, c, deopt, c.deopt_literals)?;
    let count = match array_len(heap, c, literals, &c.type_arrays) {
        Some(n) => count.min(n) as usize,
        None => 0,
    };
    let inlined_at = element(heap, c, deopt, c.deopt_positions)?;
    let inlining: Vec<super::positions::Inlining> =
        match array_len(heap, c, inlined_at, &c.type_bytes) {
            Some(n) => {
                let n = (n as usize).min(MAX_INLINED as usize * super::positions::INLINING_SIZE);
                inlinings(&heap.mem.bytes(data(c, inlined_at), n)?)
            }
            None => Vec::new(),
        };
    let table = heap.field(code, c.code_positions)?;
    let position = match array_len(heap, c, table, &c.type_bytes) {
        Some(n) => {
            let bytes = heap
                .mem
                .bytes(data(c, table), (n as usize).min(MAX_TABLE))?;
            position_at(&bytes, offset)
        }
        None => None,
    };
    let Some(position) = position else {
        return Ok(CodeAt {
            code,
            start,
            frames: vec![(shared, None)],
        });
    };
    let mut frames = Vec::new();
    for f in expand(position, &inlining, count) {
        let function = match f.function {
            Function::Own => shared,
            Function::Inlined(i) => {
                // Weak references carry a second tag bit.
                let s = element(heap, c, literals, i as u16)? & !2;
                if !is_object(s) || heap.instance_type(s)? != heap.layout.type_shared {
                    continue;
                }
                s
            }
            // The chain is not what the code says: only its own function.
            Function::Unknown => {
                return Ok(CodeAt {
                    code,
                    start,
                    frames: vec![(shared, None)],
                });
            }
        };
        frames.push((function, f.script_offset));
    }
    Ok(CodeAt {
        code,
        start,
        frames,
    })
}

/// The Code of the code object `stream` (tagged) whose instructions
/// start at `start`, if its fields agree and hold `pc`.
fn check_stream(
    heap: &mut Heap<'_>,
    c: &CodeLayout,
    pc: u64,
    stream: u64,
    start: u64,
) -> Result<u64, CodeError> {
    let code = match c.stream_code {
        Some(f) => heap.field(stream, f)?,
        None => stream,
    };
    let bad = |why| CodeError::Inconsistent(pc, why);
    if !is_object(code) || heap.instance_type(code)? != c.type_code {
        return Err(bad("its Code is no Code"));
    }
    if let Some(f) = c.code_stream
        && heap.field(code, f)? != stream
    {
        return Err(bad("its Code names another instruction stream"));
    }
    if let Some(f) = c.code_start
        && heap.field(code, f)? != start
    {
        return Err(bad("its Code starts elsewhere"));
    }
    if let Some(f) = c.code_size {
        let size = heap.mem.u32(code - 1 + u64::from(f))?;
        if pc - start >= u64::from(size) {
            return Err(bad("the pc is past its instructions"));
        }
    }
    Ok(code)
}

/// The nearest code object whose instructions start at or before `from`
/// (within [`MAX_SCAN`] of `pc`): (the object, tagged; its first
/// instruction; its map). `stream_map`: the map code objects have, if
/// known; else any map of their type is taken.
fn find_stream(
    heap: &mut Heap<'_>,
    c: &CodeLayout,
    pc: u64,
    from: u64,
    stream_map: Option<u64>,
) -> Result<(u64, u64, u64), CodeError> {
    let header = u64::from(c.stream_header);
    let mut start = from & !(ALIGN - 1);
    let lowest = lowest_scanned(c, pc);
    while start >= lowest {
        let object = start - header;
        let word = heap.mem.u64(object + u64::from(heap.layout.object_map))?;
        let is_stream = match stream_map {
            Some(m) => word == m,
            None => {
                is_object(word)
                    && heap
                        .mem
                        .u16(word - 1 + u64::from(heap.layout.map_instance_type))
                        .is_ok_and(|t| t == c.stream_type)
            }
        };
        if is_stream {
            return Ok((object + 1, start, word));
        }
        start -= ALIGN;
    }
    Err(CodeError::NoCode(pc))
}

/// The lowest instruction start looked at for `pc`.
fn lowest_scanned(c: &CodeLayout, pc: u64) -> u64 {
    pc.saturating_sub(MAX_SCAN).max(u64::from(c.stream_header))
}

/// The length of array `a` (tagged) if it is one of `types`.
fn array_len(heap: &mut Heap<'_>, c: &CodeLayout, a: u64, types: &[u16]) -> Option<i64> {
    if !is_object(a) || !types.contains(&heap.instance_type(a).ok()?) {
        return None;
    }
    let n = smi(heap.field(a, c.array_length).ok()?);
    (n >= 0).then_some(n)
}

/// Where the elements or bytes of array `a` (tagged) start.
fn data(c: &CodeLayout, a: u64) -> u64 {
    a - 1 + u64::from(c.array_length) + 8
}

/// Element `i` of fixed array `a` (tagged).
fn element(heap: &mut Heap<'_>, c: &CodeLayout, a: u64, i: u16) -> Result<u64, MemoryError> {
    heap.mem.u64(data(c, a) + 8 * u64::from(i))
}
