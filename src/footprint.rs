//! Footprint: the daemon's own binary, as little of it resident as it uses.
//!
//! Some of the binary is read only while the daemon starts: the dynamic
//! relocations (applied by ld.so), the embedded BPF objects (handed to
//! libbpf, which loads them into the kernel), and the unwind and exception
//! tables that only a panic reads. Their pages stay mapped, so counted in
//! the daemon's RSS, for as long as it runs: about 1.1 MiB of the 6 MiB
//! the binary holds. Once the daemon is up, [`release_load_only_pages`]
//! unmaps them from the page tables, as the kernel frees its own init
//! sections after boot.
//!
//! This is safe by construction: the pages are private, clean and backed
//! by the file (never written: writable or RELRO sections are left alone),
//! so a later read, a panic's unwind say, faults them in again from the
//! page cache. The page cache itself keeps them until the kernel needs the
//! memory, so a cgroup's memory charge, which counts the page cache, moves
//! less than RSS does.

use std::ops::Range;
use std::path::Path;

use object::read::elf::{ElfFile64, ProgramHeader, SectionHeader};
use object::{Object, ObjectSection};

/// Sections read only at start-up or by a panic.
const LOAD_ONLY: [&str; 6] = [
    ".rela.dyn",
    ".rela.plt",
    ".bpf.objs",
    ".eh_frame_hdr",
    ".eh_frame",
    ".gcc_except_table",
];

const PAGE: u64 = 4096;

/// What [`release_load_only_pages`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Bytes of the binary's file the ranges cover (whole pages).
    pub bytes: u64,
    /// Of them, bytes that were resident before.
    pub resident_before: u64,
}

/// Drops the page-table entries of the daemon binary's load-only sections
/// ([`LOAD_ONLY`]): nothing the daemon keeps using, so it only lowers RSS.
/// Errors name what could not be read; nothing is changed then.
pub fn release_load_only_pages() -> std::io::Result<Released> {
    let exe = Path::new("/proc/self/exe");
    let data = std::fs::read(exe)?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let ranges = load_only_ranges(&data, &maps, exe)?;
    let mut released = Released::default();
    for r in ranges {
        let len = (r.end - r.start) as usize;
        released.bytes += len as u64;
        released.resident_before += resident_bytes(r.start, len);
        // SAFETY: the range lies within a private, read-only, file-backed
        // mapping of this binary that no code writes (checked by
        // `load_only_ranges`); MADV_DONTNEED on such a mapping only drops
        // page-table entries, and later reads fault the same bytes in
        // from the file.
        let rc = unsafe { libc::madvise(r.start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(released)
}

/// Bytes of `[start, start + len)` mapped in this process's page tables
/// (`/proc/self/pagemap`: mincore would tell the page cache instead).
fn resident_bytes(start: u64, len: usize) -> u64 {
    use std::os::unix::fs::FileExt;
    let Ok(pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return 0;
    };
    let pages = len.div_ceil(PAGE as usize);
    let mut entries = vec![0u8; pages * 8];
    if pagemap
        .read_exact_at(&mut entries, start / PAGE * 8)
        .is_err()
    {
        return 0;
    }
    let present = entries
        .chunks_exact(8)
        .filter(|e| u64::from_ne_bytes((*e).try_into().expect("8 bytes")) >> 63 == 1)
        .count();
    present as u64 * PAGE
}

/// The page-aligned address ranges of the load-only sections of the ELF
/// file `data`, as `maps` (this process's `/proc/self/maps`) maps `exe`:
/// only whole pages inside a section, outside RELRO and any writable
/// segment, within a mapping of the file that is `r--p` or `r-xp`.
fn load_only_ranges(data: &[u8], maps: &str, exe: &Path) -> std::io::Result<Vec<Range<u64>>> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let elf = ElfFile64::<object::Endianness>::parse(data)
        .map_err(|e| bad(format!("{}: {e}", exe.display())))?;
    let endian = elf.endian();
    // File offsets of segments the loader writes: RELRO (relocated, then
    // made read-only) and writable data.
    let written: Vec<Range<u64>> = elf
        .elf_program_headers()
        .iter()
        .filter(|ph| {
            ph.p_type(endian) == object::elf::PT_GNU_RELRO
                || (ph.p_type(endian) == object::elf::PT_LOAD
                    && ph.p_flags(endian) & object::elf::PF_W != 0)
        })
        .map(|ph| {
            let off = ph.p_offset(endian);
            off..off + ph.p_filesz(endian)
        })
        .collect();
    let mappings = exe_mappings(maps, &std::fs::read_link(exe)?);
    let mut out = Vec::new();
    for section in elf.sections() {
        if !section.name().is_ok_and(|n| LOAD_ONLY.contains(&n)) {
            continue;
        }
        if section.elf_section_header().sh_flags(endian) & u64::from(object::elf::SHF_WRITE) != 0 {
            continue;
        }
        let Some((off, size)) = section.file_range() else {
            continue;
        };
        let file = off.next_multiple_of(PAGE)..(off + size) / PAGE * PAGE;
        if file.start >= file.end || written.iter().any(|w| overlaps(w, &file)) {
            continue;
        }
        if let Some(m) = mappings
            .iter()
            .find(|m| m.offset <= file.start && file.end <= m.offset + (m.end - m.start))
        {
            out.push(m.start + (file.start - m.offset)..m.start + (file.end - m.offset));
        }
    }
    Ok(out)
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// One read-only private mapping of the binary.
struct ExeMapping {
    start: u64,
    end: u64,
    offset: u64,
}

/// The mappings of `path` in `maps` that are private and never writable.
fn exe_mappings(maps: &str, path: &Path) -> Vec<ExeMapping> {
    let shown = path.to_string_lossy();
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let name = f.nth(2)?;
            if name != shown || !(perms == "r--p" || perms == "r-xp") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(ExeMapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary's load-only sections are released, their pages
    /// leave RSS, and reading them afterwards gives the same bytes (faulted
    /// in again from the file).
    #[test]
    fn load_only_pages_leave_rss_and_read_back_the_same() {
        let exe = Path::new("/proc/self/exe");
        let data = std::fs::read(exe).expect("reading this binary");
        let maps = std::fs::read_to_string("/proc/self/maps").expect("reading own maps");
        let ranges = load_only_ranges(&data, &maps, exe).expect("ranges");
        assert!(
            !ranges.is_empty(),
            "this binary has .rela.dyn or .eh_frame pages to release"
        );
        // Touch them all, so they are resident and their bytes known.
        let before: Vec<Vec<u8>> = ranges
            .iter()
            .map(|r| {
                // SAFETY: a mapped range of this binary (from /proc/self/maps).
                unsafe {
                    std::slice::from_raw_parts(r.start as *const u8, (r.end - r.start) as usize)
                }
                .to_vec()
            })
            .collect();
        let released = release_load_only_pages().expect("releasing");
        assert_eq!(
            released.bytes,
            ranges.iter().map(|r| r.end - r.start).sum::<u64>()
        );
        assert_eq!(released.resident_before, released.bytes, "touched above");
        for r in &ranges {
            let len = (r.end - r.start) as usize;
            assert_eq!(resident_bytes(r.start, len), 0, "{r:x?} still resident");
        }
        for (r, bytes) in ranges.iter().zip(&before) {
            // SAFETY: as above.
            let now = unsafe {
                std::slice::from_raw_parts(r.start as *const u8, (r.end - r.start) as usize)
            };
            assert!(now == bytes.as_slice(), "{r:x?} reads differently");
        }
    }

    /// No range chosen overlaps RELRO (relocated by ld.so, then mapped
    /// `r--p` like the load-only sections): dropping its pages would undo
    /// the relocations.
    #[test]
    fn relro_is_left_alone() {
        let exe = Path::new("/proc/self/exe");
        let data = std::fs::read(exe).expect("reading this binary");
        let maps = std::fs::read_to_string("/proc/self/maps").expect("reading own maps");
        let elf = ElfFile64::<object::Endianness>::parse(&*data).expect("ELF");
        let e = elf.endian();
        let relro = elf
            .elf_program_headers()
            .iter()
            .find(|ph| ph.p_type(e) == object::elf::PT_GNU_RELRO)
            .map(|ph| ph.p_offset(e)..ph.p_offset(e) + ph.p_filesz(e))
            .expect("a Rust binary on Linux has RELRO");
        let at = exe_mappings(&maps, &std::fs::read_link(exe).expect("own path"))
            .into_iter()
            .find(|m| m.offset <= relro.start && relro.start < m.offset + (m.end - m.start))
            .map(|m| m.start + (relro.start - m.offset)..m.start + (relro.end - m.offset))
            .expect("RELRO is mapped r--p");
        let ranges = load_only_ranges(&data, &maps, exe).expect("ranges");
        assert!(!ranges.is_empty());
        for r in &ranges {
            assert!(!overlaps(r, &at), "{r:x?} overlaps RELRO at {at:x?}");
        }
    }
}
