//! The one bounded ELF reader: the header, the program and section header
//! tables, symbol entries and names, read from files any local user may
//! have mapped, with every limit on what a file can make emberd allocate
//! or read in one place ([`limits`]).
//!
//! Any local user can map any file as code, and the unwinder, the Python
//! detection and the symbolizer read every file mapped as code. The
//! header's entry sizes and counts come from that user: a 4 KiB sparse file
//! claiming 3,200 program headers of 65,535 bytes made the daemon allocate
//! and touch 200 MiB per reader (it was killed at its unit's memory limit).
//! Here an entry is exactly the size ELF64 defines (56 and 64 bytes), so the
//! tables are bounded by their u16 counts (3.5 and 4 MiB), and each must lie
//! inside the file; each table a reader then reads is charged to a limit
//! before anything is allocated for it.
//!
//! The entries are decoded with the `object` crate's ELF definitions (the
//! same the table builder and the symbolizer parse whole files with), copied
//! out of the bytes so that a table at an odd offset reads as any other.

use std::fs::File;
use std::os::unix::fs::FileExt;

use object::Endianness;
use object::elf::{FileHeader64, ProgramHeader64, SectionHeader64, Sym64};
use object::pod::Pod;

/// Every bound on what a hostile ELF file can make emberd read or allocate.
pub mod limits {
    /// `sizeof(Elf64_Ehdr)`.
    pub const EHDR_BYTES: usize = 64;
    /// `sizeof(Elf64_Phdr)`: the only program-header size ELF64 defines.
    pub const PHDR_BYTES: u64 = 56;
    /// `sizeof(Elf64_Shdr)`.
    pub const SHDR_BYTES: u64 = 64;
    /// `sizeof(Elf64_Sym)`.
    pub const SYM_BYTES: usize = 24;
    /// Bound on `.dynsym` + `.dynstr` read to look for a runtime's
    /// symbols: libpython's are ~90 KiB, node's 3 to 9.5 MiB (Node 22's
    /// are the largest measured), a large C++ library's can be tens of MiB
    /// (and holds no runtime). Read once per file, by a table builder.
    pub const MAX_DYNSYM_BYTES: u64 = 16 << 20;
    /// Bytes of symbol and string table (`.symtab` with `.strtab`, or
    /// `.dynsym` with `.dynstr`) the symbolizer reads whole to make a
    /// compact table from, at most (`symbolize::symtab::MAX_READ_BYTES`);
    /// larger tables are scanned in chunks at each request.
    pub const MAX_SYMTAB_BYTES: u64 = 8 << 20;
    /// Longest symbol name the chunked scan reads (a longer one names
    /// nothing).
    pub const MAX_NAME_BYTES: usize = 64 << 10;
    /// A compressed CFI section's size once decompressed, at most
    /// (`unwind::table::MAX_DECOMPRESSED_BYTES`): the largest
    /// `.debug_frame` seen (libxul's separate debug file) is a fifth of
    /// this. Larger claims are refused, so a few bytes of file cannot ask
    /// for more.
    pub const MAX_DECOMPRESSED_BYTES: u64 = 64 << 20;
}

pub use limits::{EHDR_BYTES, PHDR_BYTES, SHDR_BYTES, SYM_BYTES};

/// `PT_LOAD`.
pub const PT_LOAD: u32 = object::elf::PT_LOAD;
/// `PT_NOTE`.
pub const PT_NOTE: u32 = object::elf::PT_NOTE;
/// `SHT_NOTE`.
pub const SHT_NOTE: u32 = object::elf::SHT_NOTE;
/// `SHT_NOBITS`: a section with no bytes in the file.
pub const SHT_NOBITS: u32 = object::elf::SHT_NOBITS;
/// `SHT_DYNSYM`.
pub const SHT_DYNSYM: u32 = object::elf::SHT_DYNSYM;
/// `SHT_SYMTAB`.
pub const SHT_SYMTAB: u32 = object::elf::SHT_SYMTAB;

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Not `\x7fELF`, 64-bit, little-endian.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    /// `e_phentsize` or `e_shentsize` is not ELF64's entry size.
    #[error("header entry size {found} where ELF64 defines {want}")]
    EntrySize {
        /// What the file says.
        found: u64,
        /// What the format defines.
        want: u64,
    },
    /// A header table does not lie inside the file.
    #[error("a header table lies outside the file")]
    OutsideFile,
}

/// Why a file's parts could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The ELF header was refused.
    #[error("ELF header: {0}")]
    Header(#[from] HeaderError),
    /// Reading the file failed.
    #[error("reading the ELF {what}: {source}")]
    Io {
        /// The part being read.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The file has no section of the kind needed.
    #[error("no {0} section")]
    Missing(&'static str),
    /// A table lies outside the file (or its size overflows).
    #[error("the ELF {0} lies outside the file")]
    OutsideFile(&'static str),
    /// A table is over its limit in [`limits`].
    #[error("the ELF {what} is {bytes} bytes, over the {limit} read")]
    TooLarge {
        /// The part.
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
}

/// Where the program and section header tables lie, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHeader {
    /// `e_phoff`.
    pub phoff: u64,
    /// `e_phnum` (entries of [`PHDR_BYTES`]).
    pub phnum: u64,
    /// `e_shoff`.
    pub shoff: u64,
    /// `e_shnum` (entries of [`SHDR_BYTES`]).
    pub shnum: u64,
    /// `e_shstrndx`.
    pub shstrndx: u64,
}

impl ElfHeader {
    /// The header of a file of `file_len` bytes whose first 64 bytes are
    /// `h`. An empty table (count 0) may have any entry size, as linkers
    /// write it.
    pub fn parse(h: &[u8; EHDR_BYTES], file_len: u64) -> Result<ElfHeader, HeaderError> {
        let h: FileHeader64<Endianness> = copied(h);
        let e = Endianness::Little;
        if h.e_ident.magic != object::elf::ELFMAG
            || h.e_ident.class != object::elf::ELFCLASS64
            || h.e_ident.data != object::elf::ELFDATA2LSB
        {
            return Err(HeaderError::NotElf64);
        }
        let header = ElfHeader {
            phoff: h.e_phoff.get(e),
            phnum: u64::from(h.e_phnum.get(e)),
            shoff: h.e_shoff.get(e),
            shnum: u64::from(h.e_shnum.get(e)),
            shstrndx: u64::from(h.e_shstrndx.get(e)),
        };
        for (entsize, count, want) in [
            (h.e_phentsize.get(e), header.phnum, PHDR_BYTES),
            (h.e_shentsize.get(e), header.shnum, SHDR_BYTES),
        ] {
            let found = u64::from(entsize);
            if count > 0 && found != want {
                return Err(HeaderError::EntrySize { found, want });
            }
        }
        for (off, len) in [header.ph_range(), header.sh_range()] {
            if off.checked_add(len).is_none_or(|end| end > file_len) {
                return Err(HeaderError::OutsideFile);
            }
        }
        Ok(header)
    }

    /// (offset, bytes) of the program header table.
    pub fn ph_range(&self) -> (u64, u64) {
        (self.phoff, self.phnum * PHDR_BYTES)
    }

    /// (offset, bytes) of the section header table.
    pub fn sh_range(&self) -> (u64, u64) {
        (self.shoff, self.shnum * SHDR_BYTES)
    }
}

/// A `T` (an ELF64 header or symbol, 64 bytes at most) copied out of the
/// first bytes of `b`, which holds at least `size_of::<T>()`: no alignment
/// asked of the file's offsets.
fn copied<T: Pod>(b: &[u8]) -> T {
    let mut aligned = [0u64; 8];
    let n = size_of::<T>();
    object::pod::bytes_of_slice_mut(&mut aligned)[..n].copy_from_slice(&b[..n]);
    let (v, _) = object::pod::from_bytes::<T>(object::pod::bytes_of_slice(&aligned))
        .expect("64 bytes aligned to 8 hold any ELF64 entry");
    *v
}

/// The fields of a program header emberd uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// `p_type`.
    pub kind: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`: past `filesz`, zeros (`.bss`).
    pub memsz: u64,
}

/// The fields of a section header emberd uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// `sh_name`: offset of its name in the section names.
    pub name: u32,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_offset`.
    pub offset: u64,
    /// `sh_size`.
    pub size: u64,
    /// `sh_link`.
    pub link: u32,
}

/// The fields of a symbol (`Elf64_Sym`) emberd uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol {
    /// `st_name`: offset of its name in the linked strings.
    pub name: u32,
    /// `st_info & 0xf`: `STT_FUNC`, ...
    pub kind: u8,
    /// `st_shndx` (`SHN_UNDEF`: imported, not the file's).
    pub shndx: u16,
    /// `st_value`.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
}

/// The program headers in `table` (whole entries of [`PHDR_BYTES`]),
/// little-endian.
pub fn segments(table: &[u8]) -> impl Iterator<Item = Segment> + '_ {
    let e = Endianness::Little;
    table.chunks_exact(PHDR_BYTES as usize).map(move |b| {
        let p: ProgramHeader64<Endianness> = copied(b);
        Segment {
            kind: p.p_type.get(e),
            offset: p.p_offset.get(e),
            vaddr: p.p_vaddr.get(e),
            filesz: p.p_filesz.get(e),
            memsz: p.p_memsz.get(e),
        }
    })
}

/// The section headers in `table` (whole entries of [`SHDR_BYTES`]),
/// little-endian.
pub fn sections(table: &[u8]) -> impl Iterator<Item = Section> + '_ {
    let e = Endianness::Little;
    table.chunks_exact(SHDR_BYTES as usize).map(move |b| {
        let s: SectionHeader64<Endianness> = copied(b);
        Section {
            name: s.sh_name.get(e),
            kind: s.sh_type.get(e),
            offset: s.sh_offset.get(e),
            size: s.sh_size.get(e),
            link: s.sh_link.get(e),
        }
    })
}

/// The symbols in `table` (whole entries of [`SYM_BYTES`]), of either byte
/// order.
pub fn symbols(table: &[u8], little: bool) -> impl Iterator<Item = Symbol> + '_ {
    let e = if little {
        Endianness::Little
    } else {
        Endianness::Big
    };
    table.chunks_exact(SYM_BYTES).map(move |b| {
        let s: Sym64<Endianness> = copied(b);
        Symbol {
            name: s.st_name.get(e),
            kind: s.st_info & 0xf,
            shndx: s.st_shndx.get(e),
            value: s.st_value.get(e),
            size: s.st_size.get(e),
        }
    })
}

/// The NUL-terminated string at `at` of `strings`, without its NUL; `None`
/// if `at` is outside or no NUL ends it there.
pub fn c_str(strings: &[u8], at: usize) -> Option<&[u8]> {
    let rest = strings.get(at..)?;
    Some(&rest[..rest.iter().position(|&c| c == 0)?])
}

/// A file's program and section headers, read within the header's bounds:
/// what the Python detection needs to find symbols and read bytes at
/// virtual addresses.
#[derive(Debug, Clone)]
pub struct Headers {
    /// The `PT_LOAD` segments.
    pub loads: Vec<Segment>,
    /// Every section header.
    pub sections: Vec<Section>,
    /// The file's size: what any table it names must lie within.
    pub len: u64,
}

impl Headers {
    /// Reads the headers of `file`: at most 7.5 MiB whatever the file
    /// claims (see [`ElfHeader::parse`]).
    pub fn read(file: &File) -> Result<Headers, ElfError> {
        let io = |what| move |source| ElfError::Io { what, source };
        let mut h = [0u8; EHDR_BYTES];
        file.read_exact_at(&mut h, 0).map_err(io("header"))?;
        let len = file.metadata().map_err(io("file size"))?.len();
        let header = ElfHeader::parse(&h, len)?;
        let read = |what, (at, len): (u64, u64)| -> Result<Vec<u8>, ElfError> {
            let mut out = vec![0u8; usize::try_from(len).map_err(|_| ElfError::OutsideFile(what))?];
            file.read_exact_at(&mut out, at).map_err(io(what))?;
            Ok(out)
        };
        let ph = read("program headers", header.ph_range())?;
        let sh = read("section headers", header.sh_range())?;
        Ok(Headers {
            loads: segments(&ph).filter(|p| p.kind == PT_LOAD).collect(),
            sections: sections(&sh).collect(),
            len,
        })
    }

    /// `len` bytes at virtual address `vaddr`, from the file, if one
    /// `PT_LOAD` holds them all.
    pub fn read_vaddr(&self, file: &File, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        let seg = self.loads.iter().find(|p| {
            p.vaddr <= vaddr
                && vaddr
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= p.vaddr.saturating_add(p.filesz))
        })?;
        let mut out = vec![0u8; len];
        file.read_exact_at(&mut out, seg.offset.checked_add(vaddr - seg.vaddr)?)
            .ok()?;
        Some(out)
    }

    /// (name, value, size) of the `wanted` names among the defined dynamic
    /// symbols, each once (the first); `.dynsym` and `.dynstr` are read
    /// whole, within [`limits::MAX_DYNSYM_BYTES`].
    pub fn dynamic_symbols(
        &self,
        file: &File,
        wanted: &[&str],
    ) -> Result<Vec<(String, u64, u64)>, ElfError> {
        self.dynamic_symbols_where(file, |n| wanted.contains(&n))
    }

    /// (name, value, size) of the defined dynamic symbols whose names
    /// `keep` chooses, each once (the first); read as
    /// [`Headers::dynamic_symbols`].
    pub fn dynamic_symbols_where(
        &self,
        file: &File,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, u64, u64)>, ElfError> {
        let dynsym = self
            .sections
            .iter()
            .find(|s| s.kind == SHT_DYNSYM)
            .ok_or(ElfError::Missing(".dynsym"))?;
        let dynstr = self
            .sections
            .get(dynsym.link as usize)
            .ok_or(ElfError::Missing(".dynstr"))?;
        let bytes = dynsym
            .size
            .checked_add(dynstr.size)
            .ok_or(ElfError::OutsideFile(".dynsym"))?;
        if bytes > limits::MAX_DYNSYM_BYTES {
            return Err(ElfError::TooLarge {
                what: ".dynsym and .dynstr",
                bytes,
                limit: limits::MAX_DYNSYM_BYTES,
            });
        }
        // Inside the file, or nothing is allocated for them.
        let read = |what, s: &Section| -> Result<Vec<u8>, ElfError> {
            if s.offset
                .checked_add(s.size)
                .is_none_or(|end| end > self.len)
            {
                return Err(ElfError::OutsideFile(what));
            }
            let mut out = vec![0u8; s.size as usize];
            file.read_exact_at(&mut out, s.offset)
                .map_err(|source| ElfError::Io { what, source })?;
            Ok(out)
        };
        let syms = read(".dynsym", dynsym)?;
        let strs = read(".dynstr", dynstr)?;
        let mut out: Vec<(String, u64, u64)> = Vec::new();
        for s in symbols(&syms, true) {
            if s.shndx == object::elf::SHN_UNDEF {
                continue; // undefined: imported, not this file's
            }
            let Some(n) = c_str(&strs, s.name as usize).and_then(|n| std::str::from_utf8(n).ok())
            else {
                continue;
            };
            if keep(n) && !out.iter().any(|(o, _, _)| o == n) {
                out.push((n.to_owned(), s.value, s.size));
            }
        }
        Ok(out)
    }

    /// The values of the first defined symbols of `.symtab` named
    /// `names` (local symbols too, which `.dynsym` never holds), in their
    /// order, found by one pass of [`STREAM_CHUNK`] bytes over `.strtab`
    /// and one over `.symtab` for all of them: a large binary's tables
    /// (node's are 23 MB) are never held whole. All `None` when the file
    /// has no `.symtab` (stripped).
    pub fn local_symbols(&self, file: &File, names: &[&str]) -> Vec<Option<u64>> {
        let mut found = vec![None; names.len()];
        self.scan_symtab(file, names, &mut found);
        found
    }

    fn scan_symtab(&self, file: &File, names: &[&str], found: &mut [Option<u64>]) -> Option<()> {
        let symtab = self.sections.iter().find(|s| s.kind == SHT_SYMTAB)?;
        let strtab = self.sections.get(symtab.link as usize)?;
        let inside = |s: &Section| s.offset.checked_add(s.size).is_some_and(|e| e <= self.len);
        if !inside(symtab) || !inside(strtab) {
            return None;
        }
        // Where each name, NUL-terminated, starts in .strtab (after a NUL):
        // (string offset, which name).
        let needles: Vec<Vec<u8>> = names
            .iter()
            .map(|n| [&[0u8][..], n.as_bytes(), &[0u8][..]].concat())
            .collect();
        let longest = needles.iter().map(Vec::len).max()?;
        let mut starts: Vec<(u32, usize)> = Vec::new();
        let mut buf = vec![0u8; STREAM_CHUNK];
        let mut at = 0u64;
        while at < strtab.size && starts.len() < 16 * names.len() {
            let n = (strtab.size - at).min(STREAM_CHUNK as u64) as usize;
            file.read_exact_at(&mut buf[..n], strtab.offset + at).ok()?;
            for (which, needle) in needles.iter().enumerate() {
                let mut i = 0;
                while let Some(k) = buf[i..n]
                    .windows(needle.len())
                    .position(|w| w == needle.as_slice())
                {
                    let start = u32::try_from(at + (i + k) as u64 + 1).ok()?;
                    if !starts.contains(&(start, which)) {
                        starts.push((start, which));
                    }
                    i += k + 1;
                }
            }
            if n < STREAM_CHUNK {
                break;
            }
            // Overlap, so a name across two chunks is seen.
            at += (n - longest) as u64;
        }
        if starts.is_empty() {
            return None;
        }
        let per = (STREAM_CHUNK / SYM_BYTES) * SYM_BYTES;
        let mut at = 0u64;
        while at < symtab.size && found.iter().any(Option::is_none) {
            let n = (symtab.size - at).min(per as u64) as usize;
            file.read_exact_at(&mut buf[..n], symtab.offset + at).ok()?;
            for s in symbols(&buf[..n], true).filter(|s| s.shndx != object::elf::SHN_UNDEF) {
                for (_, which) in starts.iter().filter(|(o, _)| *o == s.name) {
                    found[*which].get_or_insert(s.value);
                }
            }
            at += n as u64;
        }
        Some(())
    }

    /// The little-endian `i32` at virtual address `vaddr` of the file; 0
    /// for an address a loaded segment holds past its file bytes (`.bss`);
    /// `None` for any other.
    pub fn i32_at(&self, file: &File, vaddr: u64) -> Option<i32> {
        if let Some(b) = self.read_vaddr(file, vaddr, 4) {
            return Some(i32::from_le_bytes(b.try_into().ok()?));
        }
        self.loads
            .iter()
            .any(|s| {
                s.kind == PT_LOAD
                    && vaddr >= s.vaddr.saturating_add(s.filesz)
                    && vaddr.saturating_add(4) <= s.vaddr.saturating_add(s.memsz)
            })
            .then_some(0)
    }
}

/// Bytes read at once by the streaming symbol search.
pub const STREAM_CHUNK: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant is read from the file's bytes, 0 in the zeros a segment
    /// holds past them, and nothing anywhere else: a lying symbol value
    /// outside every segment gives no constant (it once gave 0 whenever the
    /// file had any `.bss`).
    #[test]
    fn i32_at_reads_file_bytes_and_bss_only() {
        let path = std::env::temp_dir().join(format!("emberd-i32-at-{}", std::process::id()));
        std::fs::write(&path, [7u8, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff]).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let h = Headers {
            loads: vec![Segment {
                kind: PT_LOAD,
                offset: 0,
                vaddr: 0x1000,
                filesz: 8,
                memsz: 0x20,
            }],
            sections: vec![],
            len: 8,
        };
        assert_eq!(h.i32_at(&file, 0x1000), Some(7));
        assert_eq!(h.i32_at(&file, 0x1004), Some(-2));
        assert_eq!(h.i32_at(&file, 0x1010), Some(0), ".bss");
        assert_eq!(h.i32_at(&file, 0x101e), None, "past the segment's end");
        assert_eq!(h.i32_at(&file, 0x9000), None, "in no segment");
    }

    fn header(phentsize: u16, phnum: u16, shentsize: u16, shnum: u16) -> [u8; EHDR_BYTES] {
        let mut h = [0u8; EHDR_BYTES];
        h[0..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[40..48].copy_from_slice(&64u64.to_le_bytes());
        h[54..56].copy_from_slice(&phentsize.to_le_bytes());
        h[56..58].copy_from_slice(&phnum.to_le_bytes());
        h[58..60].copy_from_slice(&shentsize.to_le_bytes());
        h[60..62].copy_from_slice(&shnum.to_le_bytes());
        h
    }

    #[test]
    fn entry_sizes_are_elf64s_own() {
        // The attack: 3,200 entries of 65,535 bytes in a 200 MiB sparse file.
        let big = 200 << 20;
        assert_eq!(
            ElfHeader::parse(&header(65535, 3200, 65535, 3200), big),
            Err(HeaderError::EntrySize {
                found: 65535,
                want: 56
            })
        );
        assert_eq!(
            ElfHeader::parse(&header(56, 3200, 65535, 3200), big),
            Err(HeaderError::EntrySize {
                found: 65535,
                want: 64
            })
        );
        // Larger than ELF64's, as the old check let through.
        assert!(ElfHeader::parse(&header(64, 3, 64, 3), big).is_err());
        let ok = ElfHeader::parse(&header(56, 3, 64, 3), big).expect("valid");
        assert_eq!(ok.ph_range(), (64, 168));
        assert_eq!(ok.sh_range(), (64, 192));
        // No program headers: their size is not looked at.
        assert!(ElfHeader::parse(&header(0, 0, 64, 3), big).is_ok());
    }

    #[test]
    fn tables_lie_inside_the_file() {
        assert_eq!(
            ElfHeader::parse(&header(56, 100, 64, 0), 64 + 56 * 99),
            Err(HeaderError::OutsideFile)
        );
        assert!(ElfHeader::parse(&header(56, 100, 64, 0), 64 + 56 * 100).is_ok());
        let mut h = header(56, 1, 64, 1);
        h[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(ElfHeader::parse(&h, 1 << 20), Err(HeaderError::OutsideFile));
        let mut not = header(56, 1, 64, 1);
        not[4] = 1;
        assert_eq!(ElfHeader::parse(&not, 1 << 20), Err(HeaderError::NotElf64));
    }

    #[test]
    fn entries_decode_as_the_object_crate_reads_them() {
        use object::read::elf::{ElfFile64, ProgramHeader as _, SectionHeader as _};
        let exe = std::fs::read("/proc/self/exe").expect("own executable");
        let file = ElfFile64::<Endianness>::parse(&*exe).expect("ELF");
        let e = file.endian();
        let own = Headers::read(&File::open("/proc/self/exe").expect("open")).expect("headers");
        let theirs: Vec<_> = file
            .elf_section_table()
            .iter()
            .map(|s| (s.sh_name(e), s.sh_type(e), s.sh_offset(e), s.sh_size(e)))
            .collect();
        let ours: Vec<_> = own
            .sections
            .iter()
            .map(|s| (s.name, s.kind, s.offset, s.size))
            .collect();
        assert_eq!(ours, theirs);
        let loads = file
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(e) == PT_LOAD)
            .count();
        assert_eq!(own.loads.len(), loads);
        // A libc symbol every dynamically linked libc defines.
        let libc = File::open("/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
        let h = Headers::read(&libc).expect("libc headers");
        let found = h.dynamic_symbols(&libc, &["malloc"]).expect("dynsym");
        assert_eq!(found.len(), 1);
        assert_eq!(c_str(b"ab\0cd", 0), Some(&b"ab"[..]));
        assert_eq!(c_str(b"ab\0cd", 3), None);
    }
}
