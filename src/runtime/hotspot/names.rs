//! Names of Java methods and lines of their bytecodes, read from a JVM's
//! metadata: a `Method` leads to its `ConstMethod` (name and signature
//! indices, bytecodes, the compressed line number table after them) and
//! its `ConstantPool` (the symbols, the holder class, the source file).
//!
//! Everything here is the process's memory: symbols are read at most
//! [`MAX_SYMBOL`] bytes, the line table at most [`MAX_LINE_TABLE`], and a
//! name that is not UTF-8 or holds control characters is refused.

use super::layout::HotSpotLayout;
use crate::runtime::memory::{MemoryError, ProcessMemory};

/// Longest symbol read (class, method or file name).
pub const MAX_SYMBOL: usize = 1024;
/// Bytes of a line number table read at most.
pub const MAX_LINE_TABLE: usize = 16 << 10;
/// Bytecodes a method has at most (the class file's limit).
const MAX_CODE: u64 = 65535;

/// A Java method's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName {
    /// The class, with dots (`java.util.HashMap`, `Busy$Inner`).
    pub class: String,
    /// The method (`hashCode`, `<init>`, `lambda$main$0`).
    pub method: String,
    /// The source file's name (`HashMap.java`), where the class says.
    pub file: Option<String>,
}

impl MethodName {
    /// `package.Class.method`, as JFR and async-profiler print it.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.class, self.method)
    }
}

/// How a JVM encodes the numbers of its compressed streams (line tables,
/// debug information): JDK 20 (JDK-8292758) moved to a form that never
/// writes a zero byte; 17 and 25 are tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsigned5 {
    /// Bytes below 192 end a number (JDK 19 and before).
    Classic,
    /// Zero excluded: bytes 1-191 end a number, each byte less one.
    ExcludesZero,
}

impl Unsigned5 {
    /// The form of JDK `major`.
    pub fn of_major(major: u32) -> Unsigned5 {
        if major >= 20 {
            Unsigned5::ExcludesZero
        } else {
            Unsigned5::Classic
        }
    }

    /// The number at `bytes[*at..]`, moving `at` past it.
    pub fn read(self, bytes: &[u8], at: &mut usize) -> Option<u32> {
        let x = match self {
            Unsigned5::Classic => 0u32,
            Unsigned5::ExcludesZero => 1,
        };
        let l = 256 - 64 - x;
        let mut sum = 0u32;
        for i in 0..5u32 {
            let b = *bytes.get(*at)? as u32;
            *at += 1;
            let v = b.checked_sub(x)?;
            sum = sum.wrapping_add(v << (6 * i));
            if v < l || i == 4 {
                return Some(sum);
            }
        }
        None
    }

    /// The signed number at `bytes[*at..]` (zigzag over the unsigned).
    pub fn read_signed(self, bytes: &[u8], at: &mut usize) -> Option<i32> {
        let u = self.read(bytes, at)?;
        Some(((u >> 1) as i32) ^ -((u & 1) as i32))
    }
}

/// The line of bytecode index `bci` in a compressed line number table:
/// the line of the entry at `bci`, or else of the last entry before it
/// (HotSpot's `Method::line_number_from_bci`).
pub fn line_of(table: &[u8], bci: u32, form: Unsigned5) -> Option<u32> {
    let (mut b, mut line) = (0i64, 0i64);
    let mut best: Option<(i64, i64)> = None;
    let mut at = 0usize;
    loop {
        let first = *table.get(at)?;
        at += 1;
        match first {
            0 => break,
            0xff => {
                b += form.read_signed(table, &mut at)? as i64;
                line += form.read_signed(table, &mut at)? as i64;
            }
            v => {
                b += (v >> 3) as i64;
                line += (v & 7) as i64;
            }
        }
        if b == bci as i64 {
            return u32::try_from(line).ok();
        }
        if b < bci as i64 && best.is_none_or(|(bb, _)| b >= bb) {
            best = Some((b, line));
        }
    }
    best.and_then(|(_, l)| u32::try_from(l).ok())
}

/// The text of the `Symbol` at `sym`.
pub fn symbol(mem: &mut ProcessMemory, l: &HotSpotLayout, sym: u64) -> Result<String, MemoryError> {
    let len = mem.u16(sym + l.symbol_length)? as usize;
    let bad = MemoryError::BadString {
        addr: sym + l.symbol_body,
    };
    if len > MAX_SYMBOL {
        return Err(bad);
    }
    let bytes = mem.bytes(sym + l.symbol_body, len)?;
    match String::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) => Ok(s),
        _ => Err(bad),
    }
}

/// The symbol at index `index` of the constant pool at `pool`.
fn pool_symbol(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    pool: u64,
    index: u16,
) -> Result<String, MemoryError> {
    let sym = mem.u64(pool + l.pool_size + 8 * index as u64)?;
    symbol(mem, l, sym)
}

/// A method's `ConstMethod` and the names of the `Method` at `method`.
pub fn method_name(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    method: u64,
) -> Result<MethodName, MemoryError> {
    let cm = mem.u64(method + l.method_const)?;
    let pool = mem.u64(cm + l.const_constants)?;
    let name_index = mem.u16(cm + l.const_name_index)?;
    let method_name = pool_symbol(mem, l, pool, name_index)?;
    let holder = mem.u64(pool + l.pool_holder)?;
    let class_sym = mem.u64(holder + l.klass_name)?;
    let class = symbol(mem, l, class_sym)?.replace('/', ".");
    let file_index = mem.u16(pool + l.pool_source_file)?;
    let file = if file_index == 0 {
        None
    } else {
        pool_symbol(mem, l, pool, file_index).ok()
    };
    Ok(MethodName {
        class,
        method: method_name,
        file,
    })
}

/// The compressed line number table of the `Method` at `method`, or
/// `None` when it has none.
pub fn line_table(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    method: u64,
) -> Result<Option<Vec<u8>>, MemoryError> {
    let cm = mem.u64(method + l.method_const)?;
    let flags = match l.const_flags.width {
        4 => mem.u32(cm + l.const_flags.offset)? as u64,
        _ => mem.u16(cm + l.const_flags.offset)? as u64,
    };
    if flags & l.has_line_numbers == 0 {
        return Ok(None);
    }
    let code_size = (mem.u16(cm + l.const_code_size)? as u64).min(MAX_CODE);
    let start = cm + l.const_size + code_size;
    // To the table's terminator, within the bound: read by the page, as
    // the table may end just before an unmapped one.
    let mut out = Vec::new();
    let mut at = start;
    while out.len() < MAX_LINE_TABLE {
        let n = (4096 - (at & 4095)) as usize;
        let chunk = mem.bytes(at, n.min(MAX_LINE_TABLE - out.len()))?;
        let done = chunk.contains(&0);
        out.extend_from_slice(&chunk);
        at += chunk.len() as u64;
        if done {
            break;
        }
    }
    Ok(Some(out))
}

/// The bytecode index of bytecode pointer `bcp` in the `Method` at
/// `method`, if it lies within its bytecodes.
pub fn bci_of(
    mem: &mut ProcessMemory,
    l: &HotSpotLayout,
    method: u64,
    bcp: u64,
) -> Result<Option<u32>, MemoryError> {
    let cm = mem.u64(method + l.method_const)?;
    let code_size = mem.u16(cm + l.const_code_size)? as u64;
    let base = cm + l.const_size;
    Ok((base..base + code_size)
        .contains(&bcp)
        .then(|| (bcp - base) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a table as HotSpot's CompressedLineNumberWriteStream does.
    fn write(pairs: &[(u32, u32)], form: Unsigned5) -> Vec<u8> {
        fn uint(out: &mut Vec<u8>, mut v: u32, form: Unsigned5) {
            let x = if form == Unsigned5::ExcludesZero {
                1
            } else {
                0
            };
            let l = 256 - 64 - x;
            for i in 0..5 {
                if v < l || i == 4 {
                    out.push((v + x) as u8);
                    return;
                }
                let rest = v - l;
                out.push((l + (rest % 64) + x) as u8);
                v = rest / 64;
            }
        }
        let mut out = Vec::new();
        let (mut b, mut line) = (0i32, 0i32);
        for &(nb, nl) in pairs {
            let (db, dl) = (nb as i32 - b, nl as i32 - line);
            b = nb as i32;
            line = nl as i32;
            if (db & !0x1f) == 0 && (dl & !7) == 0 && ((db << 3) | dl) != 0xff {
                out.push(((db << 3) | dl) as u8);
            } else {
                out.push(0xff);
                uint(&mut out, ((db << 1) ^ (db >> 31)) as u32, form);
                uint(&mut out, ((dl << 1) ^ (dl >> 31)) as u32, form);
            }
        }
        out.push(0);
        out
    }

    #[test]
    fn lines_come_from_either_encoding() {
        let pairs = [(0, 10), (4, 12), (9, 300), (400, 301), (420, 20)];
        for form in [Unsigned5::Classic, Unsigned5::ExcludesZero] {
            let t = write(&pairs, form);
            assert_eq!(line_of(&t, 0, form), Some(10), "{form:?}");
            assert_eq!(line_of(&t, 5, form), Some(12), "{form:?}");
            assert_eq!(line_of(&t, 9, form), Some(300), "{form:?}");
            assert_eq!(line_of(&t, 419, form), Some(301), "{form:?}");
            assert_eq!(line_of(&t, 5000, form), Some(20), "{form:?}");
        }
    }

    #[test]
    fn a_table_without_an_end_gives_no_line() {
        assert_eq!(line_of(&[0x08, 0x08, 0xff], 100, Unsigned5::Classic), None);
    }
}
