//! A JVM's code cache as the agent reads it: the code heaps, and the blob
//! (compiled method, interpreter, stub) that holds an address, found
//! through each heap's segment map as HotSpot itself finds it.
//!
//! The BPF walker does the same lookup for each sampled frame; this side
//! gives it the heaps' bounds and checks what it reports.

use super::layout::{CodeStart, HotSpotLayout};
use crate::runtime::memory::{MemoryError, ProcessMemory};

/// Code heaps a JVM has at most (non-nmethods, profiled, non-profiled).
pub const MAX_HEAPS: usize = 3;
/// Hops back through a segment map before a lookup gives up: a blob of
/// 254 segments per hop, 64-byte segments: 16 MiB of one blob.
pub const MAX_HOPS: usize = 1024;

/// One code heap: committed code in `[low, high)`, its segment map at
/// `segmap` (one byte per `1 << log2_segment` bytes of code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeHeap {
    /// Start of its committed code.
    pub low: u64,
    /// End of its committed code.
    pub high: u64,
    /// End of its reserved code (committed grows up to it).
    pub reserved_high: u64,
    /// Its segment map.
    pub segmap: u64,
    /// log2 of its segment's size.
    pub log2_segment: u32,
}

/// What a code blob is, by HotSpot's name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// A compiled Java method (C1 or C2).
    Nmethod,
    /// A compiled wrapper of a native (JNI) method.
    NativeNmethod,
    /// The template interpreter's code.
    Interpreter,
    /// Any other stub or adapter, by its name.
    Stub,
}

/// A code blob found for an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// Its address (the `CodeBlob`).
    pub addr: u64,
    /// Its name (`nmethod`, `Interpreter`, `StubRoutines (1)`, ...).
    pub name: String,
    /// What it is.
    pub kind: BlobKind,
    /// Where its code starts.
    pub code_begin: u64,
    /// Its frame's size in bytes.
    pub frame_bytes: u64,
}

/// The code heaps of the JVM `mem` reads.
pub fn heaps(mem: &mut ProcessMemory, l: &HotSpotLayout) -> Result<Vec<CodeHeap>, MemoryError> {
    let array = mem.u64(l.code_heaps)?;
    let len = mem.u32(array + l.array_len)? as usize;
    let data = mem.u64(array + l.array_data)?;
    let mut out = Vec::new();
    for i in 0..len.min(MAX_HEAPS) {
        let heap = mem.u64(data + 8 * i as u64)?;
        let memory = heap + l.heap_memory;
        let segmap = heap + l.heap_segmap;
        out.push(CodeHeap {
            low: mem.u64(memory + l.space_low)?,
            high: mem.u64(memory + l.space_high)?,
            reserved_high: mem.u64(memory + l.space_high_boundary)?,
            segmap: mem.u64(segmap + l.space_low)?,
            log2_segment: mem.u32(heap + l.heap_log2_segment)?.min(20),
        });
    }
    Ok(out)
}

/// The blob of `heaps` holding `pc`, or `None` where none does (free
/// space, or a map that leads nowhere within [`MAX_HOPS`]).
pub fn blob_at(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    heaps: &[CodeHeap],
    pc: u64,
) -> Result<Option<Blob>, MemoryError> {
    // The reserved end: a heap commits more as it grows after it was read.
    let Some(h) = heaps.iter().find(|h| h.low <= pc && pc < h.reserved_high) else {
        return Ok(None);
    };
    let mut seg = (pc - h.low) >> h.log2_segment;
    for _ in 0..MAX_HOPS {
        let hop = mem.u8(h.segmap + seg)?;
        if hop == 0xff {
            return Ok(None); // free
        }
        if hop == 0 {
            let block = h.low + (seg << h.log2_segment);
            return blob(mem, l, block + l.heap_block).map(Some);
        }
        seg = match seg.checked_sub(hop as u64) {
            Some(s) => s,
            None => return Ok(None),
        };
    }
    Ok(None)
}

/// The blobs of `heap` in use, in address order, at most `max`: its
/// blocks walked by their lengths, as HotSpot iterates a heap.
pub fn blobs(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    heap: &CodeHeap,
    max: usize,
) -> Result<Vec<Blob>, MemoryError> {
    let mut out = Vec::new();
    let mut block = heap.low;
    while block < heap.high && out.len() < max {
        let segments = match l.block_length.width {
            8 => mem.u64(block + l.block_length.offset)?,
            _ => mem.u32(block + l.block_length.offset)? as u64,
        };
        if segments == 0 {
            break; // no block HotSpot writes: the walk cannot go on
        }
        if mem.u8(block + l.block_used)? != 0 {
            out.push(blob(mem, l, block + l.heap_block)?);
        }
        let Some(next) = segments
            .checked_shl(heap.log2_segment)
            .and_then(|b| block.checked_add(b))
        else {
            break;
        };
        block = next;
    }
    Ok(out)
}

/// The blob at `addr`.
pub fn blob(mem: &mut ProcessMemory, l: &HotSpotLayout, addr: u64) -> Result<Blob, MemoryError> {
    let name = mem
        .u64(addr + l.blob_name)
        .and_then(|p| mem.c_string(p))
        .unwrap_or_default();
    let kind = match name.as_str() {
        "nmethod" => BlobKind::Nmethod,
        "native nmethod" => BlobKind::NativeNmethod,
        "Interpreter" => BlobKind::Interpreter,
        _ => BlobKind::Stub,
    };
    let code_begin = match l.code_start {
        CodeStart::Address(o) => mem.u64(addr + o)?,
        CodeStart::Offset(o) => addr + mem.u32(addr + o)? as u64,
    };
    let frame_words = mem.u32(addr + l.blob_frame_size)? as i32;
    Ok(Blob {
        addr,
        name,
        kind,
        code_begin,
        frame_bytes: (frame_words.max(0) as u64) * 8,
    })
}
