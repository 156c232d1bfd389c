//! V8's heap as read through `/proc/PID/mem`: tagged pointers, an
//! object's instance type (through its map) and strings (sequential one-
//! and two-byte, cons and thin). Every read is bounded: a string is read
//! up to [`MAX_STRING`] characters, a cons string [`MAX_CONS_DEPTH`] deep,
//! whatever the process claims.

use super::layout::V8Layout;
use crate::runtime::memory::{MemoryError, ProcessMemory};

/// Characters of a string read at most (a longer name is cut).
pub const MAX_STRING: usize = 512;
/// Cons strings followed at most, depth first.
pub const MAX_CONS_DEPTH: u32 = 8;

/// Whether `v` is a tagged heap-object pointer (low bits `01`).
pub fn is_object(v: u64) -> bool {
    v & 3 == 1 && v > 1
}

/// Whether `v` is a SMI (low bit 0).
pub fn is_smi(v: u64) -> bool {
    v & 1 == 0
}

/// The value of SMI `v` (64-bit SMIs keep it in the upper half).
pub fn smi(v: u64) -> i64 {
    (v as i64) >> 32
}

/// One process's heap, read with its build's layout.
pub struct Heap<'a> {
    /// The process's memory.
    pub mem: &'a mut ProcessMemory,
    /// Its build's layout.
    pub layout: &'a V8Layout,
}

impl Heap<'_> {
    /// The word at byte `offset` of the object `object` (tagged).
    pub fn field(&mut self, object: u64, offset: u16) -> Result<u64, MemoryError> {
        self.mem.u64(object - 1 + u64::from(offset))
    }

    /// The instance type of `object` (tagged), through its map.
    pub fn instance_type(&mut self, object: u64) -> Result<u16, MemoryError> {
        let map = self.field(object, self.layout.object_map)?;
        if !is_object(map) {
            return Err(MemoryError::Unmapped {
                pid: self.mem.pid().0,
                addr: map,
            });
        }
        self.mem
            .u16(map - 1 + u64::from(self.layout.map_instance_type))
    }

    /// Whether `v` is a pointer to a string.
    pub fn is_string(&mut self, v: u64) -> bool {
        is_object(v)
            && self
                .instance_type(v)
                .is_ok_and(|t| t < self.layout.first_nonstring)
    }

    /// The text of string `s` (tagged), at most [`MAX_STRING`] characters;
    /// `None` when it is no string or of a form not read (sliced,
    /// external).
    pub fn string(&mut self, s: u64) -> Option<String> {
        let mut out = String::new();
        self.append(s, &mut out, 0)?;
        Some(out)
    }

    fn append(&mut self, s: u64, out: &mut String, depth: u32) -> Option<()> {
        if depth > MAX_CONS_DEPTH || !is_object(s) {
            return None;
        }
        let l = self.layout;
        let t = self.instance_type(s).ok()?;
        if t >= l.first_nonstring {
            return None;
        }
        let len = self.mem.u32(s - 1 + u64::from(l.string_length)).ok()? as usize;
        let room = MAX_STRING.saturating_sub(out.chars().count());
        match t & l.representation_mask {
            0 => {
                let n = len.min(room);
                if t & l.encoding_mask == l.one_byte_tag {
                    let b = self.mem.bytes(s - 1 + u64::from(l.seq_one_chars), n).ok()?;
                    // Latin-1: each byte is the code point.
                    out.extend(b.iter().map(|&c| visible(char::from(c))));
                } else {
                    let b = self
                        .mem
                        .bytes(s - 1 + u64::from(l.seq_two_chars), 2 * n)
                        .ok()?;
                    let units = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
                    out.extend(char::decode_utf16(units).map(|c| visible(c.unwrap_or('\u{fffd}'))));
                }
                Some(())
            }
            r if r == l.cons_tag => {
                let first = self.field(s, l.cons.0).ok()?;
                let second = self.field(s, l.cons.1).ok()?;
                self.append(first, out, depth + 1)?;
                if out.chars().count() < MAX_STRING {
                    self.append(second, out, depth + 1)?;
                }
                Some(())
            }
            r if r == l.thin_tag => {
                let actual = self.field(s, l.thin_actual).ok()?;
                self.append(actual, out, depth + 1)
            }
            _ => None,
        }
    }
}

/// `c`, or U+FFFD for a control character: no name or path V8 holds for
/// a function has one, and a process that lies must not write NULs or
/// line breaks into frame text.
fn visible(c: char) -> char {
    if c.is_control() { '\u{fffd}' } else { c }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smis_and_pointers_are_told_apart() {
        assert!(is_smi(5u64 << 32));
        assert_eq!(smi(5u64 << 32), 5);
        assert_eq!(smi((-3i64 << 32) as u64), -3);
        assert!(is_object(0x7f00_0000_1001));
        assert!(!is_object(0x7f00_0000_1000));
        assert!(!is_object(1));
    }
}
