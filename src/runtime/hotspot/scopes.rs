//! The methods a compiled method's code stands for at a pc: HotSpot's
//! debug information, which the JVM keeps to deoptimize and to build
//! stack traces. A `PcDesc` per safepoint and call (its offset from the
//! code's start) names a scope record; each scope gives a method (an index
//! into the compiled method's metadata table) and a bytecode index, and
//! its sender, the scope it was inlined into, out to the compiled method
//! itself.
//!
//! Read from the process at the drain: the PcDescs within
//! [`MAX_PCS_BYTES`], each scope within [`SCOPE_READ`] bytes, at most
//! [`MAX_DEPTH`] scopes deep.

use super::layout::{HotSpotLayout, Scopes};
use super::names::Unsigned5;
use crate::runtime::memory::{MemoryError, ProcessMemory};

/// Bytes of PcDescs read at most (16 bytes each).
pub const MAX_PCS_BYTES: u64 = 1 << 20;
/// Bytes of one scope record read (six compressed numbers).
const SCOPE_READ: usize = 32;
/// Inlined scopes followed at most.
pub const MAX_DEPTH: usize = 64;

/// A scope: a method (`Method*`) at a bytecode (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// The method.
    pub method: u64,
    /// Its bytecode index.
    pub bci: Option<u32>,
}

/// The compiled method at `blob` (code from `code_begin`): its scopes at
/// `pc`, innermost (the inlined leaf) first, its own method last. With
/// `exact` (`pc` is a return address) only a PcDesc at `pc` answers, as
/// HotSpot's own stack walks ask: a leaf call into the runtime records
/// none, and the next safepoint's scope may be another inlined method's.
/// Otherwise (the frame a sample interrupted) the first PcDesc at or after
/// `pc` answers, as AsyncGetCallTrace and JFR's sampler ask. Empty when
/// none does (a native wrapper keeps none).
pub fn at(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    blob: u64,
    code_begin: u64,
    pc: u64,
    exact: bool,
    form: Unsigned5,
) -> Result<Vec<Scope>, MemoryError> {
    let (pcs, pcs_end, data, metadata) = match l.scopes {
        Scopes::InBlob {
            pcs,
            pcs_end,
            data,
            metadata,
        } => (
            blob + mem.u32(blob + pcs)? as u64,
            blob + mem.u32(blob + pcs_end)? as u64,
            mem.u64(blob + data)?,
            blob + mem.u32(blob + metadata)? as u64,
        ),
        Scopes::Apart {
            immutable,
            pcs,
            data,
            mutable,
            relocation_size,
        } => {
            let imm = mem.u64(blob + immutable)?;
            let end = imm + mem.u32(blob + data)? as u64;
            (
                imm + mem.u32(blob + pcs)? as u64,
                end,
                end,
                mem.u64(blob + mutable)? + mem.u32(blob + relocation_size)? as u64,
            )
        }
    };
    let Some(off) = pc.checked_sub(code_begin) else {
        return Ok(Vec::new());
    };
    // Searched in place, an entry read at each step: a large method's
    // PcDescs take tens of KiB, of which a lookup needs a dozen entries.
    let n = (pcs_end.saturating_sub(pcs).min(MAX_PCS_BYTES) / 16) as usize;
    let mut field = |i: usize, at: u64| mem.u32(pcs + 16 * i as u64 + at).map(|v| v as i32);
    // The first PcDesc at or after the pc: exact for a return address (a
    // call's PcDesc is at its return), the next safepoint's otherwise.
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if (field(mid, 0)? as i64) < off as i64 {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let i = lo;
    if i >= n || (exact && field(i, 0)? as i64 != off as i64) {
        return Ok(Vec::new());
    }
    let mut decode = field(i, 4)?;
    let mut out = Vec::new();
    while decode > 0 && out.len() < MAX_DEPTH {
        let rec = mem.bytes(data + decode as u64, SCOPE_READ)?;
        let mut at = 0usize;
        let addr = data + decode as u64;
        let bad = || MemoryError::Malformed {
            what: "scope record",
            addr,
        };
        let sender = form.read(&rec, &mut at).ok_or_else(bad)?;
        let index = form.read(&rec, &mut at).ok_or_else(bad)?;
        let bci = form.read(&rec, &mut at).ok_or_else(bad)?;
        if index == 0 {
            break;
        }
        let method = mem.u64(metadata + 8 * (index as u64 - 1))?;
        out.push(Scope {
            method,
            bci: bci.checked_sub(1),
        });
        if sender as i64 >= decode as i64 {
            break; // senders are written before their inlinees: a loop
        }
        decode = sender as i32;
    }
    Ok(out)
}
