//! HotSpot's own description of itself: the structure tables `libjvm.so`
//! exports for debuggers (`gHotSpotVMStructs`, `gHotSpotVMTypes`,
//! `gHotSpotVMIntConstants`, `gHotSpotVMLongConstants`), read from the
//! running process. They give the offset of each field the serviceability
//! agent uses, the size of each type and the values of constants, so one
//! reader serves every JDK that keeps the model, where offsets per release
//! break at each new one.
//!
//! The entries' own layout (the offset of a name within an entry, the
//! stride) is exported too (`gHotSpotVMStructEntryTypeNameOffset`, ...),
//! as the JVM fills it in at start-up: the tables are read from the
//! process, not the file. The process can lie in all of it: entries,
//! strings and the scan are bounded ([`MAX_ENTRIES`], the reader's budget).

use std::collections::HashMap;

use thiserror::Error;

use crate::runtime::memory::{MemoryError, ProcessMemory};

/// Entries read from one table at most (JDK 17 has about 1,500 fields).
pub const MAX_ENTRIES: usize = 20_000;

/// The symbols the tables are found by, all exported by `libjvm.so`.
pub const SYMBOLS: [&str; 24] = [
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySuperclassNameOffset",
    "gHotSpotVMTypeEntryIsOopTypeOffset",
    "gHotSpotVMTypeEntryIsIntegerTypeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMIntConstants",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMLongConstants",
    "gHotSpotVMLongConstantEntryArrayStride",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
];

/// Why the tables could not be read.
#[derive(Debug, Error)]
pub enum VmStructsError {
    /// `libjvm.so` does not export a symbol the tables are found by.
    #[error("libjvm.so exports no {0}: not a HotSpot JVM emberd can read")]
    MissingSymbol(String),
    /// An entry's own layout is implausible (a stride of 0, an offset past
    /// the stride): the tables are not what HotSpot writes.
    #[error("{0} is implausible ({1}): the structure tables cannot be trusted")]
    BadShape(String, u64),
    /// A table has no end within [`MAX_ENTRIES`].
    #[error("{0} has no end within {MAX_ENTRIES} entries")]
    Endless(&'static str),
    /// The process's memory could not be read.
    #[error("reading the structure tables: {0}")]
    Memory(#[from] MemoryError),
}

/// A field of a HotSpot type, as `gHotSpotVMStructs` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A member at this byte offset in each instance.
    Offset(u64),
    /// A static member at this address in the process.
    Static(u64),
}

/// The four tables, by name.
#[derive(Debug, Default, Clone)]
pub struct VmStructs {
    /// `Type::_field` → its offset or address.
    pub fields: HashMap<String, Field>,
    /// Type name → its size in bytes.
    pub types: HashMap<String, u64>,
    /// Int and long constants by name (`frame::interpreter_frame_last_sp_offset`).
    pub constants: HashMap<String, i64>,
}

impl VmStructs {
    /// Reads the tables of the process `mem` reads, whose `libjvm.so`
    /// symbols (runtime addresses) `symbol` gives.
    pub fn read(
        mem: &mut ProcessMemory,
        symbol: &dyn Fn(&str) -> Option<u64>,
    ) -> Result<VmStructs, VmStructsError> {
        let sym =
            |name: &str| symbol(name).ok_or_else(|| VmStructsError::MissingSymbol(name.to_owned()));
        let mut out = VmStructs::default();

        let t = Table::read(mem, &sym, "gHotSpotVMStructs", "gHotSpotVMStructEntry")?;
        let field_name = t.offset(mem, &sym, "FieldNameOffset")?;
        let is_static = t.offset(mem, &sym, "IsStaticOffset")?;
        let offset = t.offset(mem, &sym, "OffsetOffset")?;
        let address = t.offset(mem, &sym, "AddressOffset")?;
        t.each(mem, &sym, "TypeNameOffset", |mem, e, type_name| {
            let Ok(f) = mem.u64(e + field_name).and_then(|p| mem.c_string(p)) else {
                return Ok(()); // a name that is no string: that entry only
            };
            let field = if mem.u32(e + is_static)? != 0 {
                Field::Static(mem.u64(e + address)?)
            } else {
                Field::Offset(mem.u64(e + offset)?)
            };
            out.fields
                .entry(format!("{type_name}::{f}"))
                .or_insert(field);
            Ok(())
        })?;

        let t = Table::read(mem, &sym, "gHotSpotVMTypes", "gHotSpotVMTypeEntry")?;
        let size = t.offset(mem, &sym, "SizeOffset")?;
        t.each(mem, &sym, "TypeNameOffset", |mem, e, type_name| {
            let s = mem.u64(e + size)?;
            out.types.entry(type_name).or_insert(s);
            Ok(())
        })?;

        for (table, entry, long) in [
            (
                "gHotSpotVMIntConstants",
                "gHotSpotVMIntConstantEntry",
                false,
            ),
            (
                "gHotSpotVMLongConstants",
                "gHotSpotVMLongConstantEntry",
                true,
            ),
        ] {
            let t = Table::read(mem, &sym, table, entry)?;
            let value = t.offset(mem, &sym, "ValueOffset")?;
            t.each(mem, &sym, "NameOffset", |mem, e, name| {
                let v = if long {
                    mem.u64(e + value)? as i64
                } else {
                    mem.u32(e + value)? as i32 as i64
                };
                out.constants.entry(name).or_insert(v);
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// The offset of member `name` (`Type::_field`), if the tables have it
    /// as a member.
    pub fn offset(&self, name: &str) -> Option<u64> {
        match self.fields.get(name) {
            Some(Field::Offset(o)) => Some(*o),
            _ => None,
        }
    }

    /// The address of static member `name`, if the tables have it as one.
    pub fn address(&self, name: &str) -> Option<u64> {
        match self.fields.get(name) {
            Some(Field::Static(a)) => Some(*a),
            _ => None,
        }
    }
}

/// One of the four tables: where its entries start, how far apart, and
/// the prefix of the symbols giving an entry's layout.
struct Table {
    name: &'static str,
    entry: &'static str,
    start: u64,
    stride: u64,
}

type Sym<'a> = dyn Fn(&str) -> Result<u64, VmStructsError> + 'a;

impl Table {
    fn read(
        mem: &mut ProcessMemory,
        sym: &Sym<'_>,
        name: &'static str,
        entry: &'static str,
    ) -> Result<Table, VmStructsError> {
        let mut t = Table {
            name,
            entry,
            start: mem.u64(sym(name)?)?,
            stride: 256,
        };
        t.stride = t.offset(mem, sym, "ArrayStride")?;
        if t.stride < 8 {
            return Err(VmStructsError::BadShape(name.to_owned(), t.stride));
        }
        Ok(t)
    }

    /// The `uint64_t` the JVM set at start in `gHotSpotVM<entry><what>`:
    /// an offset within an entry (or the stride, below 256).
    fn offset(
        &self,
        mem: &mut ProcessMemory,
        sym: &Sym<'_>,
        what: &'static str,
    ) -> Result<u64, VmStructsError> {
        let name = format!("{}{what}", self.entry);
        let v = mem.u64(sym(&name)?)?;
        if v >= self.stride {
            return Err(VmStructsError::BadShape(name, v));
        }
        Ok(v)
    }

    /// Calls `f` with each entry's address and name (its string at
    /// `name_offset`), to the entry whose name is null; entries whose name
    /// is no string are skipped.
    fn each(
        &self,
        mem: &mut ProcessMemory,
        sym: &Sym<'_>,
        name_offset: &'static str,
        mut f: impl FnMut(&mut ProcessMemory, u64, String) -> Result<(), VmStructsError>,
    ) -> Result<(), VmStructsError> {
        let name = self.offset(mem, sym, name_offset)?;
        for i in 0..MAX_ENTRIES as u64 {
            let e = self.start + i * self.stride;
            let n = mem.u64(e + name)?;
            if n == 0 {
                return Ok(());
            }
            if let Ok(n) = mem.c_string(n) {
                f(mem, e, n)?;
            }
        }
        Err(VmStructsError::Endless(self.name))
    }
}
