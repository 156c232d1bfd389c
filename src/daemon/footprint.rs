//! Footprint: the daemon's own binary, as little of it resident as it uses.
//!
//! Some of the binary is read only while the daemon starts: the dynamic
//! relocations (applied by ld.so), the embedded BPF objects (handed to
//! libbpf, which loads them into the kernel), and the unwind and exception
//! tables that only a panic reads. Their pages stay mapped, so counted in
//! the daemon's RSS, for as long as it runs: 1.2 MiB of the 6.1 MiB the
//! binary maps. Once the daemon is up, [`release_load_only_pages`] unmaps
//! them from the page tables, as the kernel frees its own init sections
//! after boot.
//!
//! Only pages that still are the file's are released: private, read-only
//! mappings of the binary, outside RELRO and writable segments (which the
//! loader writes), and of those only pages that `/proc/self/pagemap` shows
//! are not a private copy (a text relocation would have written one). A
//! later read, a panic's unwind say, faults the same bytes in again from
//! the page cache. The page cache itself keeps them until the kernel needs
//! the memory, so a cgroup's memory charge, which counts the page cache,
//! moves less than RSS does.

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

/// The page size (4 KiB where it cannot be read).
fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

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
/// On an error (it names what could not be read or released) some ranges
/// may have been released, which is as harmless as releasing them all.
pub fn release_load_only_pages() -> std::io::Result<Released> {
    let exe = Path::new("/proc/self/exe");
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let pagemap = std::fs::File::open("/proc/self/pagemap")?;
    let ranges = load_only_ranges(&maps, exe)?;
    let mut released = Released::default();
    for r in ranges {
        let len = (r.end - r.start) as usize;
        let pages = page_states(&pagemap, &r)?;
        if pages.iter().any(|p| p.private) {
            // Written since it was mapped: its bytes are not the file's.
            continue;
        }
        released.bytes += len as u64;
        released.resident_before += pages.iter().filter(|p| p.present).count() as u64 * page_size();
        // SAFETY: the range lies within a private, read-only mapping of this
        // binary, none of whose pages is a private copy (checked above and
        // by `load_only_ranges`); MADV_DONTNEED on it only drops page-table
        // entries, and later reads fault the same bytes in from the file.
        let rc = unsafe { libc::madvise(r.start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(released)
}

/// What the page tables say of one page.
#[derive(Debug, Clone, Copy)]
struct PageState {
    /// Mapped in this process.
    present: bool,
    /// Mapped to a page of its own (present and not a file page, or
    /// swapped out): written since it was mapped.
    private: bool,
}

/// The state of each page of `range` (`/proc/self/pagemap`: bit 63
/// present, 62 swapped, 61 a file page; mincore would tell the page cache
/// instead).
fn page_states(pagemap: &std::fs::File, range: &Range<u64>) -> std::io::Result<Vec<PageState>> {
    use std::os::unix::fs::FileExt;
    let page = page_size();
    let pages = (range.end - range.start).div_ceil(page) as usize;
    let mut entries = vec![0u8; pages * 8];
    pagemap.read_exact_at(&mut entries, range.start / page * 8)?;
    Ok(entries
        .chunks_exact(8)
        .map(|e| {
            let e = u64::from_ne_bytes(e.try_into().expect("8 bytes"));
            let (present, swapped, file) = (e >> 63 & 1 == 1, e >> 62 & 1 == 1, e >> 61 & 1 == 1);
            PageState {
                present,
                private: swapped || (present && !file),
            }
        })
        .collect())
}

/// The page-aligned address ranges of the load-only sections of the ELF
/// file `exe` (its headers read, not the whole file), as `maps` (this
/// process's `/proc/self/maps`) maps it: only whole pages inside a
/// section, outside RELRO and any writable segment, within a mapping of the
/// file that is `r--p` or `r-xp`.
fn load_only_ranges(maps: &str, exe: &Path) -> std::io::Result<Vec<Range<u64>>> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let cache = object::ReadCache::new(std::fs::File::open(exe)?);
    let elf = ElfFile64::<object::Endianness, _>::parse(&cache)
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
        let flags = section.elf_section_header().sh_flags(endian);
        if flags & u64::from(object::elf::SHF_WRITE) != 0
            || flags & u64::from(object::elf::SHF_ALLOC) == 0
        {
            continue;
        }
        let Some((off, size)) = section.file_range() else {
            continue;
        };
        let page = page_size();
        let file = off.next_multiple_of(page)..(off + size) / page * page;
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
        let maps = std::fs::read_to_string("/proc/self/maps").expect("reading own maps");
        let ranges = load_only_ranges(&maps, exe).expect("ranges");
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
            let pagemap = std::fs::File::open("/proc/self/pagemap").expect("own pagemap");
            let states = page_states(&pagemap, r).expect("reading own pagemap");
            assert_eq!(states.len(), len.div_ceil(page_size() as usize));
            assert!(states.iter().all(|p| !p.present), "{r:x?} still resident");
        }
        for (r, bytes) in ranges.iter().zip(&before) {
            // SAFETY: as above.
            let now = unsafe {
                std::slice::from_raw_parts(r.start as *const u8, (r.end - r.start) as usize)
            };
            assert!(now == bytes.as_slice(), "{r:x?} reads differently");
        }
    }

    /// A page written in a private file mapping (as a text relocation
    /// writes one) reads as private, one only read as the file's.
    #[test]
    fn written_pages_are_told_from_the_file() {
        use std::os::fd::AsRawFd;
        let page = page_size() as usize;
        let path = std::env::temp_dir().join(format!("emberd-footprint-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 2 * page]).expect("writing a scratch file");
        let file = std::fs::File::open(&path).expect("opening the scratch file");
        // SAFETY: a fresh private mapping of a file of two pages, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        std::fs::remove_file(&path).expect("removing the scratch file");
        assert_ne!(at, libc::MAP_FAILED, "mapping the scratch file");
        let bytes = at as *mut u8;
        // SAFETY: both pages are mapped, readable and writable (privately).
        let read = unsafe {
            let read = std::ptr::read_volatile(bytes);
            std::ptr::write_volatile(bytes.add(page), 1);
            read
        };
        let start = at as u64;
        let pagemap = std::fs::File::open("/proc/self/pagemap").expect("own pagemap");
        let states = page_states(&pagemap, &(start..start + 2 * page as u64)).expect("pagemap");
        // SAFETY: mapped above, not used after.
        unsafe { libc::munmap(at, 2 * page) };
        assert_eq!(read, 7);
        assert!(states[0].present && !states[0].private, "{states:?}");
        assert!(states[1].private, "{states:?}");
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
        let ranges = load_only_ranges(&maps, exe).expect("ranges");
        assert!(!ranges.is_empty());
        for r in &ranges {
            assert!(!overlaps(r, &at), "{r:x?} overlaps RELRO at {at:x?}");
        }
    }
}
