//! ELF files too large to copy, named by one pass over their symbol tables.
//!
//! A file whose symbol and string tables are over what a compact copy is
//! made from ([`super::symtab::MAX_READ_BYTES`]), or whose compact copy
//! would be over the whole table budget, was named by blazesym from the
//! mapped file: every page of the tables it touched stayed in emberd's RSS,
//! beside blazesym's index of every symbol. rustc's libLLVM (6 MB of
//! `.symtab`, 18 MB of names) put 19 MiB of mapped file in the daemon's
//! RSS for as long as a build ran, more than half its 32 MiB target.
//!
//! Here a request reads the file's tables in chunks through one reused
//! buffer, keeps for each address the best symbol seen so far, then reads
//! just the names found. Nothing is held between requests; the cost is a
//! read of the tables (from the page cache) for each batch of addresses not
//! yet in the symbol cache. The lookup rules are [`super::symtab`]'s
//! (blazesym's), checked against them in the tests below, with one
//! difference: a symbol whose name turns out not to be UTF-8 (or to hold a
//! line break) names nothing, where the compact table would have skipped it
//! for a neighbour. Compilers write no such names.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use object::read::elf::{ElfFile64, SectionHeader};
use object::{Endianness, ReadCache};

use crate::shared::elf::limits::MAX_NAME_BYTES;
use crate::shared::elf::{self, SYM_BYTES as SYM_SIZE};

/// Bytes read from a symbol table at a time.
const CHUNK: usize = 64 << 10;

/// Where a symbol table and its strings are in a file.
#[derive(Debug, Clone, Copy)]
struct Section {
    offset: u64,
    size: u64,
    strings: u64,
    strings_size: u64,
}

/// The best function symbol for one address so far: the greatest start at
/// or below it, and of the symbols there the largest (the first listed of
/// equals) and the first sizeless one.
#[derive(Debug, Clone, Copy)]
struct Best {
    start: u64,
    sized: Option<(u64, u32)>,
    sizeless: Option<u32>,
}

impl Best {
    /// The name offset this names `addr` with, as the compact table would:
    /// of the symbols at the closest start, largest first, the first that
    /// covers it; a sizeless one covers what follows it, or in a sparse
    /// table (`.dynsym`) its own address only.
    fn name_for(&self, addr: u64, sparse: bool) -> Option<u32> {
        match self.sized {
            Some((size, name)) if addr - self.start < size => Some(name),
            _ => self.sizeless.filter(|_| !sparse || addr == self.start),
        }
    }
}

/// Reads chunks and names for [`names`]; one serves every request.
#[derive(Debug, Default)]
pub struct Scanner {
    buf: Vec<u8>,
}

impl Scanner {
    /// Names virtual addresses `addrs` of `file` from the `.symtab` of
    /// `symtab_file` (the file itself or its separate debug file), then
    /// those left from `file`'s `.dynsym`, demangled. `Ok(None)` if neither
    /// file has a table to read (not 64-bit ELF: blazesym names those).
    pub fn names(
        &mut self,
        symtab_file: &Path,
        file: &Path,
        addrs: &[u64],
    ) -> std::io::Result<Option<Vec<Option<String>>>> {
        let symtab = table(symtab_file, object::elf::SHT_SYMTAB)?;
        let dynsym = table(file, object::elf::SHT_DYNSYM)?;
        if symtab.is_none() && dynsym.is_none() {
            return Ok(None);
        }
        let mut out: Vec<Option<String>> = vec![None; addrs.len()];
        for (found, sparse) in [(symtab, false), (dynsym, true)] {
            let Some((f, section, little)) = found else {
                continue;
            };
            let left: Vec<usize> = (0..addrs.len()).filter(|&i| out[i].is_none()).collect();
            if left.is_empty() {
                break;
            }
            let mut wanted: Vec<u64> = left.iter().map(|&i| addrs[i]).collect();
            wanted.sort_unstable();
            wanted.dedup();
            let best = self.scan(&f, &section, little, &wanted)?;
            for i in left {
                let at = wanted.partition_point(|&a| a < addrs[i]);
                let Some(name) = best[at].and_then(|b| b.name_for(addrs[i], sparse)) else {
                    continue;
                };
                out[i] = self.name(&f, &section, name)?;
            }
        }
        Ok(Some(out))
    }

    /// The best symbol of `section` for each of `addrs` (sorted, distinct).
    fn scan(
        &mut self,
        f: &File,
        section: &Section,
        little: bool,
        addrs: &[u64],
    ) -> std::io::Result<Vec<Option<Best>>> {
        // A symbol starting in (addrs[j - 1], addrs[j]] can be the best only
        // for addrs[j] and those after it, and there only if no later bucket
        // has one: keep the best of each bucket, then carry them forward.
        let mut buckets: Vec<Option<Best>> = vec![None; addrs.len()];
        let mut at = 0u64;
        let end = section.size - section.size % SYM_SIZE as u64;
        while at < end {
            let n = ((end - at) as usize).min(CHUNK - CHUNK % SYM_SIZE);
            self.buf.resize(n, 0);
            f.read_exact_at(&mut self.buf, section.offset + at)?;
            at += n as u64;
            for sym in elf::symbols(&self.buf, little) {
                // Functions (and GNU indirect functions) defined in this
                // file, named, as the compact table keeps them.
                if !matches!(sym.kind, object::elf::STT_FUNC | object::elf::STT_GNU_IFUNC)
                    || sym.shndx == object::elf::SHN_UNDEF
                {
                    continue;
                }
                let name = sym.name;
                if name == 0 {
                    continue;
                }
                let start = sym.value;
                let size = sym.size.min(u64::from(u32::MAX));
                let j = addrs.partition_point(|&a| a < start);
                let Some(slot) = buckets.get_mut(j) else {
                    continue;
                };
                let b = match slot {
                    Some(b) if b.start > start => continue,
                    Some(b) if b.start == start => b,
                    _ => slot.insert(Best {
                        start,
                        sized: None,
                        sizeless: None,
                    }),
                };
                if size == 0 {
                    b.sizeless.get_or_insert(name);
                } else if b.sized.is_none_or(|(s, _)| size > s) {
                    b.sized = Some((size, name));
                }
            }
        }
        let mut carried = None;
        for b in &mut buckets {
            match b {
                Some(_) => carried = *b,
                None => *b = carried,
            }
        }
        Ok(buckets)
    }

    /// The name at `offset` of `section`'s strings, demangled, if it is one
    /// the compact table would keep (UTF-8, no line break).
    fn name(
        &mut self,
        f: &File,
        section: &Section,
        offset: u32,
    ) -> std::io::Result<Option<String>> {
        let mut len = 256;
        loop {
            let from = u64::from(offset);
            let avail = section.strings_size.saturating_sub(from).min(len as u64) as usize;
            if avail == 0 {
                return Ok(None);
            }
            self.buf.resize(avail, 0);
            f.read_exact_at(&mut self.buf, section.strings + from)?;
            if let Some(end) = self.buf.iter().position(|&c| c == 0) {
                let name = std::str::from_utf8(&self.buf[..end]).ok();
                return Ok(name
                    .filter(|n| !n.is_empty() && !n.contains('\n'))
                    .map(super::symtab::demangle));
            }
            if avail < len || len >= MAX_NAME_BYTES {
                return Ok(None);
            }
            len *= 4;
        }
    }
}

/// The file's first section of type `kind` and its linked strings, with the
/// file open and whether it is little-endian; `None` if it has none or is
/// not 64-bit ELF.
fn table(path: &Path, kind: u32) -> std::io::Result<Option<(File, Section, bool)>> {
    let cache = ReadCache::new(File::open(path)?);
    let found = {
        let Ok(elf) = ElfFile64::<Endianness, _>::parse(&cache) else {
            return Ok(None);
        };
        let e = elf.endian();
        let sections = elf.elf_section_table();
        sections
            .iter()
            .find(|s| s.sh_type(e) == kind)
            .and_then(|s| {
                let strings = sections
                    .section(object::SectionIndex(s.sh_link(e) as usize))
                    .ok()?;
                (strings.sh_type(e) == object::elf::SHT_STRTAB).then(|| Section {
                    offset: s.sh_offset(e),
                    size: s.sh_size(e),
                    strings: strings.sh_offset(e),
                    strings_size: strings.sh_size(e),
                })
            })
            .map(|s| (s, e == Endianness::Little))
    };
    Ok(found.map(|(s, little)| (cache.into_inner(), s, little)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::packed::NameReader;
    use crate::symbolize::symtab::{ElfSymbols, MAX_READ_BYTES};

    /// Addresses to try in a file: each function's start, middle and last
    /// byte, the byte after it, and 0 and the top of the address space.
    fn probes(path: &Path) -> Vec<u64> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let data = std::fs::read(path).expect("reading the file");
        let elf = object::File::parse(&*data).expect("ELF");
        let mut out = vec![0, u64::MAX];
        for s in elf.symbols().chain(elf.dynamic_symbols()) {
            if s.kind() == SymbolKind::Text {
                let (a, n) = (s.address(), s.size());
                out.extend([a, a + n / 2, (a + n).saturating_sub(1), a + n]);
            }
        }
        out
    }

    /// One pass over the tables names every probe of `path` as the compact
    /// table does, functions with names over 4 KiB included (object's
    /// cache reads strings only up to 4 KiB: see `symtab::WholeStrings`).
    fn agrees_with_the_compact_table(path: &Path) {
        let table = ElfSymbols::read(path, path, MAX_READ_BYTES)
            .expect("read")
            .table()
            .expect("a table");
        let addrs = probes(path);
        assert!(
            addrs.len() > 100,
            "{} probes in {}",
            addrs.len(),
            path.display()
        );
        let got = Scanner::default()
            .names(path, path, &addrs)
            .expect("scan")
            .expect("tables");
        let mut reader = NameReader::default();
        let differ: Vec<String> = addrs
            .iter()
            .zip(&got)
            .filter_map(|(&a, g)| {
                let want = table.name(a, &mut reader);
                (want != *g).then(|| format!("{a:#x}: table {want:?}, scan {g:?}"))
            })
            .collect();
        assert!(
            differ.is_empty(),
            "{}: {} of {} differ: {:?}",
            path.display(),
            differ.len(),
            addrs.len(),
            &differ[..differ.len().min(10)]
        );
        let named = got.iter().filter(|n| n.is_some()).count();
        assert!(named * 2 > addrs.len(), "{named} of {} named", addrs.len());
    }

    /// This test binary: a `.symtab` of Rust and C functions.
    #[test]
    fn names_this_binary_as_the_compact_table() {
        agrees_with_the_compact_table(&std::fs::read_link("/proc/self/exe").expect("exe"));
    }

    /// Debian's libc: `.dynsym` only (sparse, with sizeless symbols).
    #[test]
    fn names_libc_as_the_compact_table() {
        agrees_with_the_compact_table(Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"));
    }

    /// A file that is not ELF has no tables; a missing one is an error.
    #[test]
    fn not_elf_is_none_and_missing_is_an_error() {
        let mut s = Scanner::default();
        assert!(
            s.names(Path::new("/etc/passwd"), Path::new("/etc/passwd"), &[1])
                .expect("read")
                .is_none()
        );
        assert!(
            s.names(Path::new("/no/such/file"), Path::new("/no/such/file"), &[1])
                .is_err()
        );
    }
}
