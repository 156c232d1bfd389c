//! ELF files named from their symbol tables, held compactly.
//!
//! Most binaries on a distribution have no DWARF here: their frames are
//! named from `.symtab` (or, stripped, `.dynsym`). blazesym names them by
//! mapping the whole file and indexing its table in place, so the pages of
//! the table and its strings stay resident for as long as the file is in
//! use: on the soak's busy host 3.3 MiB of mapped files at any moment
//! (1.1 MiB of it emberd's own table), a tenth of the daemon's memory
//! target. Here a file's function symbols are read once into a
//! [`super::packed`] table (starts as 32-bit offsets, sizes, names deflated
//! in blocks) and the file is closed: emberd's own table takes about a
//! fifth of what its mapping did. Names are demangled as blazesym does.
//!
//! The lookup follows blazesym's ELF resolver, so names do not change with
//! the way a file is read: `.symtab` first, then `.dynsym`; of the symbols
//! starting closest at or below the address (largest first), the first
//! whose size covers it; a sizeless symbol covers what follows it in
//! `.symtab`, only its own address in `.dynsym` (that table is sparse).

use std::path::Path;

use super::packed::{Addrs, NameReader, PackedNames};

/// Bytes of symbol and string table (`.symtab` with `.strtab`, or `.dynsym`
/// with `.dynstr`) a compact table is made from, at most. They are read
/// whole to build it, so this bounds that transient; a table made from more
/// would be over most of [`super::elf_worker::SYMBOL_TABLE_BUDGET`] anyway
/// (they shrink about 4.5 times). Larger files are named by a pass over
/// their tables at each request ([`super::symscan`]).
pub const MAX_READ_BYTES: u64 = crate::shared::elf::limits::MAX_SYMTAB_BYTES;

/// Function symbols of one table, sorted by start.
#[derive(Debug)]
struct Table {
    starts: Addrs,
    /// Sizes (0: unknown), saturated at `u32::MAX`.
    sizes: Box<[u32]>,
    names: PackedNames,
    /// `.dynsym`: a sizeless symbol names only its own address.
    sparse: bool,
}

impl Table {
    /// The function symbols of `syms`; `None` if it has none.
    fn new<'data, S>(syms: S, sparse: bool) -> Option<Self>
    where
        S: object::ObjectSymbolTable<'data>,
    {
        use object::{ObjectSymbol, SymbolKind, SymbolSection};
        let mut funcs: Vec<(u64, u64, &'data str)> = syms
            .symbols()
            .filter(|s| matches!(s.kind(), SymbolKind::Text | SymbolKind::Label))
            .filter(|s| s.section() != SymbolSection::Undefined)
            .filter_map(|s| {
                let name = s
                    .name()
                    .ok()
                    .filter(|n| !n.is_empty() && !n.contains('\n'))?;
                Some((s.address(), s.size(), name))
            })
            .collect();
        if funcs.is_empty() {
            return None;
        }
        // As blazesym orders them: by start, the largest first at one start
        // (stable: aliases of one size keep the table's order).
        funcs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let starts: Vec<u64> = funcs.iter().map(|f| f.0).collect();
        Some(Self {
            starts: Addrs::new(&starts),
            sizes: funcs
                .iter()
                .map(|f| u32::try_from(f.1).unwrap_or(u32::MAX))
                .collect(),
            names: PackedNames::new(funcs.iter().map(|f| f.2))?,
            sparse,
        })
    }

    /// The name of the function holding `addr`, mangled.
    fn name<'r>(&self, addr: u64, reader: &'r mut NameReader) -> Option<&'r str> {
        let first = self.starts.find(addr)?;
        let start = self.starts.get(first);
        let hit = (first..self.starts.len())
            .take_while(|&i| self.starts.get(i) == start)
            .find(|&i| match self.sizes[i] {
                0 => !self.sparse || addr == start,
                size => addr - start < u64::from(size),
            })?;
        self.names.get(hit, reader)
    }

    fn bytes(&self) -> usize {
        self.starts.bytes() + self.sizes.len() * 4 + self.names.bytes()
    }
}

/// A file read through object's cache, but for the strings of the symbol
/// table's string section, which are served from one read of that section
/// (within [`MAX_READ_BYTES`], checked first). The cache reads a string
/// only up to 4 KiB, and a C++ or Rust name can be longer: the function
/// would go unnamed, where blazesym and the scan name it; and it would keep
/// a copy of every name while the file is parsed.
#[derive(Clone, Copy)]
struct WholeStrings<'a> {
    cache: &'a object::ReadCache<std::fs::File>,
    /// The string section's file offset and bytes, once read.
    strings: &'a std::cell::OnceCell<(u64, &'a [u8])>,
}

impl<'a> object::ReadRef<'a> for WholeStrings<'a> {
    fn len(self) -> Result<u64, ()> {
        self.cache.len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        self.cache.read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(
        self,
        range: std::ops::Range<u64>,
        delimiter: u8,
    ) -> Result<&'a [u8], ()> {
        match self.strings.get() {
            Some(&(start, bytes))
                if range.start >= start && range.start - start < bytes.len() as u64 =>
            {
                let from = &bytes[(range.start - start) as usize..];
                let from = &from[..from
                    .len()
                    .min(range.end.saturating_sub(range.start) as usize)];
                let end = from.iter().position(|&b| b == delimiter).ok_or(())?;
                Ok(&from[..end])
            }
            _ => self.cache.read_bytes_at_until(range, delimiter),
        }
    }
}

/// What [`ElfSymbols::read`] found.
// Made once per file read and unpacked at once: a box would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Read {
    /// The file's function symbols.
    Table(ElfSymbols),
    /// No function symbols (or not ELF).
    None,
    /// A symbol or string table over the bound: name the file by a pass
    /// over its tables instead (`symbolize::symscan`).
    TooLarge,
}

impl Read {
    /// The table, if one was read.
    pub fn table(self) -> Option<ElfSymbols> {
        match self {
            Read::Table(t) => Some(t),
            _ => None,
        }
    }
}

/// The function symbols of one ELF file, by virtual address.
#[derive(Debug)]
pub struct ElfSymbols {
    symtab: Option<Table>,
    dynsym: Option<Table>,
}

impl ElfSymbols {
    /// Reads the `.symtab` of `symtab_file` (the file itself or its
    /// separate debug file) and the `.dynsym` of `file`. [`Read::None`] if
    /// neither reads as ELF or has function symbols, [`Read::TooLarge`] if
    /// either table is over `max_bytes` ([`MAX_READ_BYTES`] in the daemon;
    /// one without the other would name fewer frames than the whole file
    /// does); `Err` if either file could not be opened, which may pass
    /// (too many open files, a process gone with its `/proc` path).
    pub fn read(symtab_file: &Path, file: &Path, max_bytes: u64) -> std::io::Result<Read> {
        use object::{Object, ObjectSection, ReadRef};
        /// The table `pick` finds in `path` (`Ok(None)`: none, or not
        /// ELF); `Err(None)` if its symbol and string sections (`sections`)
        /// are over `max_bytes`, `Err(Some)` if it could not be opened.
        fn parse(
            path: &Path,
            max_bytes: u64,
            sections: [&str; 2],
            pick: impl for<'a> FnOnce(&object::File<'a, WholeStrings<'a>>) -> Option<Table>,
        ) -> Result<Option<Table>, Option<std::io::Error>> {
            let file = std::fs::File::open(path).map_err(Some)?;
            let cache = object::ReadCache::new(file);
            let strings = std::cell::OnceCell::new();
            let reader = WholeStrings {
                cache: &cache,
                strings: &strings,
            };
            let Ok(elf) = object::File::parse(reader) else {
                return Ok(None);
            };
            // From the section headers alone, before anything is read.
            let bytes: u64 = sections
                .iter()
                .filter_map(|n| elf.section_by_name(n))
                .map(|s| s.size())
                .sum();
            if bytes > max_bytes {
                tracing::info!(
                    "the {} of {} is {} MiB, over the {} MiB a compact copy is made from: \
                     its frames are named by a pass over its tables instead",
                    sections[0],
                    path.display(),
                    bytes >> 20,
                    max_bytes >> 20
                );
                return Err(None);
            }
            if let Some((offset, size)) = elf
                .section_by_name(sections[1])
                .and_then(|s| s.file_range())
                && let Ok(bytes) = cache.read_bytes_at(offset, size)
            {
                let _ = strings.set((offset, bytes));
            }
            Ok(pick(&elf))
        }
        let tables = parse(symtab_file, max_bytes, [".symtab", ".strtab"], |elf| {
            elf.symbol_table().and_then(|t| Table::new(t, false))
        })
        .and_then(|symtab| {
            let dynsym = parse(file, max_bytes, [".dynsym", ".dynstr"], |elf| {
                elf.dynamic_symbol_table().and_then(|t| Table::new(t, true))
            })?;
            Ok((symtab, dynsym))
        });
        match tables {
            Ok((None, None)) => Ok(Read::None),
            Ok((symtab, dynsym)) => Ok(Read::Table(Self { symtab, dynsym })),
            Err(None) => Ok(Read::TooLarge),
            Err(Some(e)) => Err(e),
        }
    }

    /// The demangled name of the function holding virtual address `addr`
    /// (`reader` inflates the names: one serves every table).
    pub fn name(&self, addr: u64, reader: &mut NameReader) -> Option<String> {
        if let Some(n) = self.symtab.as_ref().and_then(|t| t.name(addr, reader)) {
            return Some(demangle(n));
        }
        Some(demangle(self.dynsym.as_ref()?.name(addr, reader)?))
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.symtab.as_ref().map_or(0, Table::bytes) + self.dynsym.as_ref().map_or(0, Table::bytes)
    }
}

/// Demangles a Rust or C++ name as blazesym does (Rust without the hash).
pub(super) fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own functions are named as blazesym names them,
    /// at their start and inside, and the table is far smaller than the
    /// file's symbol and string tables.
    #[test]
    fn names_agree_with_blazesym_on_this_binary() {
        let exe = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
        let table = ElfSymbols::read(&exe, &exe, MAX_READ_BYTES)
            .expect("reading this binary")
            .table()
            .expect("this binary has a symbol table");
        let blaze = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(false)
            .enable_demangling(true)
            .build();
        let src = blazesym::symbolize::source::Source::Elf(blazesym::symbolize::source::Elf {
            debug_syms: false,
            ..blazesym::symbolize::source::Elf::new(&exe)
        });
        // Virtual addresses of functions of this binary: from blazesym's own
        // view of a few, by name.
        let data = std::fs::read(&exe).expect("reading this binary");
        let elf = object::File::parse(&*data).expect("ELF");
        use object::{Object, ObjectSymbol, SymbolKind};
        let funcs: Vec<(u64, u64)> = elf
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 8)
            .map(|s| (s.address(), s.size()))
            .step_by(97)
            .take(200)
            .collect();
        assert!(funcs.len() > 20, "{} functions", funcs.len());
        let addrs: Vec<u64> = funcs
            .iter()
            .flat_map(|&(a, size)| [a, a + size / 2, a + size - 1])
            .collect();
        let theirs = blaze
            .symbolize(&src, blazesym::symbolize::Input::VirtOffset(&addrs))
            .expect("blazesym names this binary");
        let mut differ = Vec::new();
        let mut reader = NameReader::default();
        for (addr, s) in addrs.iter().zip(theirs) {
            let want = match s {
                blazesym::symbolize::Symbolized::Sym(s) => Some(s.name.to_string()),
                _ => None,
            };
            let got = table.name(*addr, &mut reader);
            if got != want {
                differ.push(format!("{addr:#x}: blazesym {want:?}, here {got:?}"));
            }
        }
        assert!(
            differ.is_empty(),
            "{} of {}: {differ:?}",
            differ.len(),
            addrs.len()
        );
        use object::ObjectSection;
        let symtab_bytes: u64 = elf
            .sections()
            .filter(|s| matches!(s.name(), Ok(".symtab" | ".strtab")))
            .map(|s| s.size())
            .sum();
        assert!(
            (table.bytes() as u64) * 3 < symtab_bytes,
            "{} bytes held for {symtab_bytes} of symbol and string table",
            table.bytes()
        );
    }

    /// `.dynsym`'s sizeless symbols name only their own address; an
    /// address past every function's end has no name.
    #[test]
    fn sizes_bound_the_names() {
        let t = ElfSymbols::read(
            Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            MAX_READ_BYTES,
        )
        .expect("reading libc")
        .table()
        .expect("libc has a .dynsym");
        assert!(t.bytes() > 0);
        let mut reader = NameReader::default();
        assert_eq!(t.name(0, &mut reader), None);
        assert_eq!(t.name(u64::MAX, &mut reader), None);
    }

    /// A file whose symbol table is over the bound is not copied at all
    /// (its `.dynsym` alone would name fewer frames); one at the bound is.
    #[test]
    fn tables_over_the_bound_are_not_read() {
        let exe = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
        let data = std::fs::read(&exe).expect("reading this binary");
        let elf = object::File::parse(&*data).expect("ELF");
        use object::{Object, ObjectSection};
        let symtab: u64 = [".symtab", ".strtab"]
            .iter()
            .filter_map(|n| elf.section_by_name(n))
            .map(|s| s.size())
            .sum();
        assert!(symtab > 4096, "{symtab} bytes of symbol table");
        assert!(matches!(
            ElfSymbols::read(&exe, &exe, symtab).expect("read"),
            Read::Table(_)
        ));
        assert!(matches!(
            ElfSymbols::read(&exe, &exe, symtab - 1).expect("read"),
            Read::TooLarge
        ));
    }
}
