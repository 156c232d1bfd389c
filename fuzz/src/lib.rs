//! Shared parts of emberd's fuzz targets: a counting allocator to bound
//! the memory a parser takes for its input, and files made from the input
//! (the readers open paths). The ELF writer is `emberd::fuzzing::elf`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting live bytes and their peak.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller's contract.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller's contract.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as the caller's contract.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

/// Runs `f`, returning its result and the most heap it held at once
/// beyond what was live before (allocations of 0 pages untouched count:
/// a reserve is a promise to fill).
pub fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// Panics if `used` bytes are over `factor` times `input` plus `fixed`:
/// the parsers' memory must be proportional to what they are given.
/// `EMBERD_FUZZ_FACTOR` overrides `factor` (to explore past a known
/// blow-up while it is being fixed).
pub fn check_bound(what: &str, used: usize, input: usize, factor: usize, fixed: usize) {
    let factor = std::env::var("EMBERD_FUZZ_FACTOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(factor);
    let bound = input.saturating_mul(factor).saturating_add(fixed);
    assert!(
        used <= bound,
        "{what}: {used} bytes for {input} bytes of input, over {factor} x input + {fixed}"
    );
}

/// An anonymous in-memory file holding `bytes`, and a path that opens it
/// (`/proc/self/fd/N`): the readers take paths, as the daemon's do.
pub struct MemFile {
    /// Keeps the descriptor (and so the path) open.
    pub file: File,
    /// Where it opens.
    pub path: PathBuf,
}

/// Writes `bytes` into a new [`MemFile`].
pub fn mem_file(bytes: &[u8]) -> MemFile {
    // SAFETY: a valid C string; the descriptor is owned by the File below.
    let fd = unsafe { libc::memfd_create(c"emberd-fuzz".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).expect("write memfd");
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    MemFile { file, path }
}
