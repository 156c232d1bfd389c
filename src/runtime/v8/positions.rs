//! V8's source positions: where in its script the code at a pc came
//! from, and through which inlined calls. Two encodings, both V8's own:
//! - a code object's source position table: pairs of zig-zag VLQ deltas
//!   (code offset, source position), the code offset starting at -1 and a
//!   negative code delta marking a statement (`SourcePositionTableIterator`);
//! - a `SourcePosition` word: bit 0 external, bits 1-30 the script offset
//!   plus one (0: none), bits 31-46 the inlining id plus one (0: the code's
//!   own function) (`source-position.h`).
//!
//! Every decode is bounded by its input: a table or id that lies ends the
//! walk, never loops.

/// Entries of a position table decoded at most (a table is read whole,
/// up to [`super::code::MAX_TABLE`] bytes: two bytes an entry at least).
const MAX_ENTRIES: usize = 1 << 16;

/// One decoded `SourcePosition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePosition {
    /// Character offset in the script, if known.
    pub script_offset: Option<u32>,
    /// The inlined call it is in: 0 is the code's own function, `n` the
    /// `n - 1`th entry of the code's inlining positions.
    pub inlining_id: u16,
}

impl SourcePosition {
    /// Decodes a `SourcePosition` word.
    pub fn from_raw(raw: u64) -> Self {
        let offset = ((raw >> 1) & ((1 << 30) - 1)) as u32;
        SourcePosition {
            script_offset: offset.checked_sub(1),
            inlining_id: ((raw >> 31) & 0xffff) as u16,
        }
    }
}

/// One signed VLQ at `*at` of `bytes` (zig-zag: the low bit is the sign),
/// or `None` past the end or beyond 64 bits.
fn vlq(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        raw |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift >= 64 {
            return None;
        }
    }
    Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// The source position of the instruction at code offset `offset`
/// according to the source position table `table`: that of the last entry
/// at or before it; `None` when the table has none there.
pub fn position_at(table: &[u8], offset: u64) -> Option<SourcePosition> {
    let (mut at, mut code, mut pos) = (0usize, -1i64, 0i64);
    let mut found = None;
    for _ in 0..MAX_ENTRIES {
        if at >= table.len() {
            break;
        }
        let (Some(dc), Some(dp)) = (vlq(table, &mut at), vlq(table, &mut at)) else {
            break;
        };
        // A negative code delta marks a statement: its magnitude less one
        // is the delta.
        let Some(next) = code.checked_add(if dc >= 0 { dc } else { !dc }) else {
            break;
        };
        code = next;
        pos = pos.wrapping_add(dp);
        if code > offset as i64 {
            break;
        }
        found = Some(SourcePosition::from_raw(pos as u64));
    }
    found
}

/// One entry of a code object's inlining positions (`InliningPosition`:
/// the call's position in its caller, and the inlined function's index in
/// the code's literals, -1 for the code's own function).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inlining {
    /// Where the inlined function was called from.
    pub call: SourcePosition,
    /// Index of the inlined function among the code's inlined functions.
    pub function: i32,
}

/// Bytes of one inlining position entry (u64 position, i32 id, padding).
pub const INLINING_SIZE: usize = 16;

/// The inlining positions held in `bytes` (a ByteArray's data).
pub fn inlinings(bytes: &[u8]) -> Vec<Inlining> {
    bytes
        .chunks_exact(INLINING_SIZE)
        .map(|e| Inlining {
            call: SourcePosition::from_raw(u64::from_le_bytes(e[..8].try_into().unwrap())),
            function: i32::from_le_bytes(e[8..12].try_into().unwrap()),
        })
        .collect()
}

/// Which function a frame of optimized code is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// The code's own function.
    Own,
    /// Its `i`th inlined function.
    Inlined(usize),
    /// An index the code's literals do not hold.
    Unknown,
}

/// One frame the code at a pc stands for: which function and where in
/// its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlinedFrame {
    /// The function.
    pub function: Function,
    /// Its script offset, if known.
    pub script_offset: Option<u32>,
}

/// The frames at `pos` in code with inlining positions `table`,
/// outermost first: the code's own function, then each function inlined
/// into it down to the one the pc is in. An id out of the table, or one
/// that does not decrease, ends the chain there (V8 numbers an inlined
/// call after its caller's).
pub fn expand(pos: SourcePosition, table: &[Inlining], functions: usize) -> Vec<InlinedFrame> {
    let mut inner = Vec::new();
    let mut cur = pos;
    let mut last = u32::MAX;
    while cur.inlining_id != 0 && u32::from(cur.inlining_id) < last {
        last = u32::from(cur.inlining_id);
        let Some(e) = table.get(usize::from(cur.inlining_id) - 1) else {
            break;
        };
        let function = match usize::try_from(e.function) {
            Ok(f) if f < functions => Function::Inlined(f),
            // -1: the code's own function inlined into itself (recursion).
            _ if e.function == -1 => Function::Own,
            _ => Function::Unknown,
        };
        inner.push(InlinedFrame {
            function,
            script_offset: cur.script_offset,
        });
        cur = e.call;
    }
    let mut out = vec![InlinedFrame {
        function: Function::Own,
        script_offset: cur.script_offset,
    }];
    out.extend(inner.into_iter().rev());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zigzag(v: i64, out: &mut Vec<u8>) {
        let mut raw = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (raw & 0x7f) as u8;
            raw >>= 7;
            if raw == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
    }

    fn raw(offset: u32, id: u16) -> u64 {
        (u64::from(id) << 31) | (u64::from(offset + 1) << 1)
    }

    #[test]
    fn a_table_gives_the_last_position_at_or_before_the_offset() {
        // Entries at code offsets 0, 10 (a statement), 40.
        let mut t = Vec::new();
        let entries = [(1i64, raw(5, 0) as i64), (-11, 0), (30, 0)];
        let mut pos = 0i64;
        for (i, (dc, p)) in entries.iter().enumerate() {
            zigzag(*dc, &mut t);
            let next = match i {
                0 => *p,
                1 => raw(17, 2) as i64,
                _ => raw(33, 1) as i64,
            };
            zigzag(next - pos, &mut t);
            pos = next;
        }
        assert_eq!(position_at(&t, 0).unwrap().script_offset, Some(5));
        let p = position_at(&t, 12).unwrap();
        assert_eq!((p.script_offset, p.inlining_id), (Some(17), 2));
        assert_eq!(position_at(&t, 40).unwrap().script_offset, Some(33));
        assert_eq!(position_at(&[], 3), None);
        // A truncated VLQ ends the walk with what was found before it.
        assert_eq!(position_at(&t[..t.len() - 1], 40).unwrap().inlining_id, 2);
    }

    #[test]
    fn inlined_calls_expand_outermost_first() {
        // leaf (id 3, function 2) called from mid (id 2, function 1),
        // called from outer (id 1, function 0), called from the code's
        // own function at offset 311: as node 20 gave the chain workload.
        let table = [
            Inlining {
                call: SourcePosition::from_raw(raw(311, 0)),
                function: 0,
            },
            Inlining {
                call: SourcePosition::from_raw(raw(197, 1)),
                function: 1,
            },
            Inlining {
                call: SourcePosition::from_raw(raw(148, 2)),
                function: 2,
            },
        ];
        let f = expand(SourcePosition::from_raw(raw(93, 3)), &table, 3);
        let got: Vec<_> = f.iter().map(|f| (f.function, f.script_offset)).collect();
        assert_eq!(
            got,
            [
                (Function::Own, Some(311)),
                (Function::Inlined(0), Some(197)),
                (Function::Inlined(1), Some(148)),
                (Function::Inlined(2), Some(93))
            ]
        );
        // An id that does not decrease, or is past the table, stops there.
        let looping = [Inlining {
            call: SourcePosition::from_raw(raw(1, 1)),
            function: 0,
        }];
        assert_eq!(
            expand(SourcePosition::from_raw(raw(2, 1)), &looping, 1).len(),
            2
        );
        assert_eq!(expand(SourcePosition::from_raw(raw(2, 9)), &[], 0).len(), 1);
        // A function index past the code's inlined functions is unknown.
        let f = expand(SourcePosition::from_raw(raw(93, 3)), &table, 2);
        assert_eq!(f[3].function, Function::Unknown);
    }

    #[test]
    fn inlining_entries_are_read_from_bytes() {
        let mut b = Vec::new();
        b.extend_from_slice(&raw(311, 0).to_le_bytes());
        b.extend_from_slice(&7i32.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&[1, 2, 3]); // a torn entry is left out
        let e = inlinings(&b);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].function, 7);
        assert_eq!(e[0].call.script_offset, Some(311));
    }
}
