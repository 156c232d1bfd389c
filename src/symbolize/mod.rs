//! Symbolize: names for the addresses of [`RawSample`]s, found while the
//! process is still alive.
//!
//! - kernel frames from kallsyms (a compact table of its own, see [`kallsyms`]);
//! - user frames from the ELF file behind each executable mapping, with DWARF
//!   line and inline information (blazesym's `Elf` source, file offsets);
//! - JIT frames from `/tmp/perf-PID.map` (see [`perfmap`]);
//! - anything no source can name as `module+0xoffset`, never a bare
//!   `[unknown]`, with the reason counted in [`Misses`].
//!
//! Results are cached by what they depend on: kernel frames by address, file
//! frames by (device, inode, file offset). A restarted binary, an exec or a
//! reused pid therefore cannot inherit another program's names.

mod cache;
pub mod cgroup;
pub(crate) mod elf_worker;
pub mod kallsyms;
pub mod metrics;
pub mod packed;
pub mod perfmap;
mod procmaps;
mod symscan;
pub mod symtab;
pub mod untrusted;

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cache::GenerationalCache;
use elf_worker::Reply;
use kallsyms::KernelSymbols;

use crate::collect::{RawSample, RawStack, StackEnd};
use crate::runtime::{FrameNamer, NameStats};
use crate::shared::reads::ReadMeter;
use crate::shared::{FastMap, FastSet};
use crate::shared::{Pid, Tid};
use perfmap::PerfMap;
use procmaps::{FileId, MappingKind, ProcessMaps};

/// Modules (per-file names shown in frames) kept before the table is
/// emptied; bounds memory whatever the host runs.
pub const MAX_MODULES: usize = 200_000;

impl SymbolizerOptions {
    /// Entries each symbol cache (kernel, file offsets) may hold, both its
    /// generations: its half of the byte budget over [`CACHED_FRAME_BYTES`].
    fn cache_entries(&self) -> usize {
        (self.symbol_cache_bytes / 2 / CACHED_FRAME_BYTES).max(1024)
    }
}
/// Bytes a cached named address costs, about (key, Arc'd frames, name),
/// with a name of a usual length.
pub const CACHED_FRAME_BYTES: usize = 160;

impl cache::Weigh for Arc<[Frame]> {
    /// The usual cost, plus the text (names and files, each frame holds its
    /// own copies) beyond the usual 256 bytes: ordinary entries weigh what
    /// the entry count assumes, ones with 4 KiB names 25 times more.
    fn weight(&self) -> usize {
        let text: usize = self
            .iter()
            .map(|f| f.name.len() + f.file.as_ref().map_or(0, |p| p.len()))
            .sum();
        CACHED_FRAME_BYTES + text.saturating_sub(256)
    }
}
/// Perf maps and process snapshots unused for this long are dropped from
/// the caches.
const IDLE_EVICT: Duration = Duration::from_secs(120);
/// ELF files whose names were not needed for this long are dropped from
/// blazesym's cache: a file's parsed DWARF is large (libc's debug file
/// decompresses to 11 MiB), while the names already found stay cached by
/// address, so an idle file costs a re-parse only when a new address of it
/// shows up.
const ELF_IDLE_EVICT: Duration = Duration::from_secs(10);

pub use crate::shared::{Frame, FrameKind, Module};

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, self.suffix())
    }
}

impl Frame {
    /// The frame's folded text; with `lines`, a Python frame's line joins
    /// its file as py-spy writes it, `qualname (file.py:LINE)`, and a Java
    /// frame's follows its method as async-profiler writes it,
    /// `pkg.Class.method:LINE_[j]`, and a JavaScript frame's joins its
    /// script as V8's tools show a function, `name (app.js:LINE)_[j]`.
    pub fn text(&self, lines: bool) -> FrameText<'_> {
        FrameText { frame: self, lines }
    }
}

/// See [`Frame::text`].
#[derive(Debug, Clone, Copy)]
pub struct FrameText<'a> {
    frame: &'a Frame,
    lines: bool,
}

impl fmt::Display for FrameText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fr = self.frame;
        match (self.lines, fr.kind, fr.line, fr.name.strip_suffix(')')) {
            (true, FrameKind::Python, Some(line), Some(head)) => write!(f, "{head}:{line})"),
            (true, FrameKind::JavaScript, Some(line), Some(head)) => {
                write!(f, "{head}:{line}){}", fr.suffix())
            }
            (true, FrameKind::Java | FrameKind::JavaInlined, Some(line), _) => {
                write!(f, "{}:{line}{}", fr.name, fr.suffix())
            }
            _ => write!(f, "{fr}"),
        }
    }
}

/// A sample with its stack named, root first: user frames, then kernel frames.
#[derive(Debug, Clone)]
pub struct SymbolizedSample {
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// The thread's name.
    pub thread_comm: Arc<str>,
    /// The process's name (its main thread's), or the thread's if the process is gone.
    pub process_comm: Arc<str>,
    /// Frames, root first.
    pub frames: Vec<Frame>,
    /// The process's service labels (unit, container, executable).
    pub workload: crate::shared::Workload,
    /// The account the samples count in ([`RawSample::account`]): the
    /// store gives up the heaviest user account's stack detail before
    /// anyone's history.
    pub account: u32,
    /// Number of samples.
    pub count: u64,
    /// Store time (ms) of the 20 ms tick the samples fell in (CPU samples);
    /// `None` for events, stored at their drain's second.
    pub at_ms: Option<u64>,
}

/// Addresses that could not be named, by reason. Cumulative.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Misses {
    /// The process exited before its maps could be read.
    pub process_gone: u64,
    /// No mapping of the process holds the address.
    pub unmapped: u64,
    /// An anonymous mapping without a perf map entry.
    pub anon_no_perf_map: u64,
    /// The ELF file could not be read or parsed.
    pub elf_error: u64,
    /// Reading the ELF file took longer than its deadline (a stalled
    /// filesystem); see `elf_worker`.
    pub elf_timeout: u64,
    /// The ELF file has no symbol for the address.
    pub no_symbol: u64,
    /// kallsyms has no symbol for the address (or is unreadable).
    pub kernel_no_symbol: u64,
    /// Perf-map lines skipped as malformed.
    pub perf_map_malformed_lines: u64,
    /// Perf-map entries not kept: past half the perf-map byte budget, or
    /// past `perfmap::MAX_ENTRIES`.
    pub perf_map_entries_dropped: u64,
    /// Perf maps not read, by reason (FIFO, other owner, too large, ...).
    pub perf_map_refused: std::collections::BTreeMap<untrusted::Refusal, u64>,
    /// Perf maps dropped from the cache to stay within its byte budget.
    pub perf_maps_evicted: u64,
    /// Times the process snapshots were halved to stay within their budget.
    pub snapshots_evicted: u64,
}

impl CacheBytes {
    /// What `runtime`'s namer holds (0 without one).
    pub fn runtime(&self, runtime: &str) -> usize {
        self.runtimes
            .iter()
            .filter(|(r, _)| *r == runtime)
            .map(|(_, b)| b)
            .sum()
    }
}

/// Estimated bytes each bounded part of the [`Symbolizer`] holds.
#[derive(Debug, Clone, Default)]
pub struct CacheBytes {
    /// Parsed perf maps.
    pub perf_maps: usize,
    /// Named addresses (kernel and file offsets).
    pub symbols: usize,
    /// Process-mapping snapshots.
    pub snapshots: usize,
    /// Parsed DWARF held by blazesym.
    pub dwarf: usize,
    /// Compact symbol tables of ELF files named without DWARF.
    pub elf_symbols: usize,
    /// The kernel's symbol table.
    pub kernel_symbols: usize,
    /// Each runtime's names held (CPython's code objects, HotSpot's
    /// methods and the JVM pages read), by [`FrameNamer::runtime`].
    pub runtimes: Vec<(&'static str, usize)>,
}

/// Options of the [`Symbolizer`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SymbolizerOptions {
    /// Where perf maps live, `/tmp` by default. Looked up through
    /// `/proc/PID/root` so that a container's own `/tmp` is found.
    pub perf_map_dir: PathBuf,
    /// Larger perf maps are not read (default
    /// [`defaults::PERF_MAP_MAX_FILE_BYTES`]).
    pub perf_map_max_file_bytes: u64,
    /// Bytes all cached perf maps may hold (default
    /// [`defaults::PERF_MAP_BUDGET_BYTES`]).
    pub perf_map_budget_bytes: usize,
    /// Bytes the two symbol caches (kernel addresses, file offsets) may
    /// hold, estimated at [`CACHED_FRAME_BYTES`] an entry (default
    /// [`defaults::SYMBOL_CACHE_BYTES`]); a full cache drops the entries
    /// no drain asked for in its last generation (see [`cache`]).
    pub symbol_cache_bytes: usize,
    /// Bytes of process-mapping snapshots kept (default
    /// [`defaults::SNAPSHOT_BUDGET_BYTES`]); the oldest half goes when full.
    pub snapshot_budget_bytes: usize,
    /// Bytes of parsed DWARF blazesym may hold, all files together
    /// (default [`defaults::DWARF_BUDGET_BYTES`]); see
    /// [`elf_worker::DwarfBudget`].
    pub dwarf_budget_bytes: usize,
    /// How long a drain waits for one file's symbols before its frames
    /// stay `module+offset` (default [`elf_worker::FILE_DEADLINE`]: the
    /// daemon keeps draining whatever a stalled filesystem does); see
    /// [`elf_worker`].
    pub elf_deadline: std::time::Duration,
}

/// Defaults of [`SymbolizerOptions`].
pub mod defaults {
    /// A perf map larger than this is refused (counted as `too_large`): 64
    /// MiB is about 500 000 JIT entries, days of a busy node process.
    pub const PERF_MAP_MAX_FILE_BYTES: u64 = 64 << 20;
    /// Bytes of parsed perf maps kept, all processes together: 16 MiB is
    /// about 150 000 JIT entries.
    pub const PERF_MAP_BUDGET_BYTES: usize = 16 << 20;
    /// Bytes of the symbol caches, both together: 4 MiB is about 26 000
    /// named addresses, half an hour of the soak's churning host (an hour
    /// of a busy build host used 23 MiB of the 64 it once had; a full cache
    /// costs a re-read of names, not samples).
    pub const SYMBOL_CACHE_BYTES: usize = 4 << 20;
    /// Bytes of process-mapping snapshots: 2 MiB is about 2 500
    /// processes of 10 mappings. A snapshot is needed until the samples of
    /// its process are named (the next drain, a second away) or while the
    /// process lives; the soak's 200 new processes a second used 2.2 MiB.
    pub const SNAPSHOT_BUDGET_BYTES: usize = 2 << 20;
    /// Bytes of parsed DWARF held at once, estimated as 2.25 times the
    /// debug sections decompressed (what blazesym keeps and parses from
    /// them): 8 MiB holds files of up to 3.5 MiB of debug sections at once
    /// (ld.so's and libm's 1 and 2.3 MiB), not Debian's libc6-dbg (9.5
    /// MiB), which is then named from its symbol table; a file's inlined
    /// frames and lines need its whole DWARF.
    pub const DWARF_BUDGET_BYTES: usize = 8 << 20;
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        Self {
            perf_map_dir: PathBuf::from("/tmp"),
            perf_map_max_file_bytes: defaults::PERF_MAP_MAX_FILE_BYTES,
            perf_map_budget_bytes: defaults::PERF_MAP_BUDGET_BYTES,
            symbol_cache_bytes: defaults::SYMBOL_CACHE_BYTES,
            snapshot_budget_bytes: defaults::SNAPSHOT_BUDGET_BYTES,
            dwarf_budget_bytes: defaults::DWARF_BUDGET_BYTES,
            elf_deadline: elf_worker::FILE_DEADLINE,
        }
    }
}

struct CachedPerfMap {
    stamp: Option<FileStamp>,
    map: Arc<PerfMap>,
    /// Bytes of the file parsed so far (whole lines).
    parsed: u64,
    /// `map.approx_bytes()`.
    bytes: usize,
    last_used: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// Mappings (and name) of a process, read while it lived.
struct MapsSnapshot {
    maps: Arc<ProcessMaps>,
    comm: Option<Arc<str>>,
    taken: Instant,
    /// Estimated heap bytes ([`ProcessMaps::approx_bytes`] and the name).
    bytes: usize,
    /// The pid inside the process's own namespace (names its perf map),
    /// read once per snapshot when a perf map is first wanted: reading
    /// `/proc/PID/status` at every drain was a tenth of the idle
    /// collector's allocation calls.
    ns_pid: Option<u32>,
}

/// How long a process's mappings (and name) are trusted without a
/// re-read. They are read when the process appears or execs, and again
/// whenever a sampled address falls outside them (a library loaded, a JIT
/// region mapped); this age bounds the rest (a mapping replaced by another
/// at the same addresses, a renamed main thread). Reading
/// `/proc/PID/maps` every drain was most of the daemon's steady cost.
pub const MAPS_MAX_AGE: Duration = Duration::from_secs(60);
/// How long a new process's mappings keep being re-read.
pub const RECENT_REFRESH: Duration = Duration::from_secs(2);
/// New processes tracked for refresh at once.
const MAX_RECENT: usize = 256;
/// Names of processes without a snapshot kept at once (see `Symbolizer::comms`).
const COMMS_MAX: usize = 4096;
/// Frame vectors kept for reuse (see [`Symbolizer::recycle`]): about one
/// idle drain's samples; at most 256 x 128 frames of 56 bytes, 1.8 MiB.
pub const SPARE_FRAMES_MAX: usize = 256;
/// Largest frame vector kept for reuse, in frames (a deep stack with its
/// inlined frames; deeper ones are freed).
pub const SPARE_FRAMES_CAPACITY: usize = 128;

/// Names addresses of sampled stacks; keeps caches across drains.
pub struct Symbolizer {
    /// Names of the runtimes' frames (CPython's: code records the BPF
    /// walker copied).
    namers: Vec<Box<dyn FrameNamer>>,
    snapshots: HashMap<Pid, MapsSnapshot>,
    /// Names of processes that have no snapshot (kernel threads have no
    /// mappings), read from `/proc/PID/comm` and trusted as long as a
    /// snapshot's name: reading them at every drain was several allocations
    /// per kernel thread a second. Forgotten when a process is noted anew.
    comms: HashMap<Pid, (Arc<str>, Instant)>,
    /// Service labels of processes, from their cgroups.
    workloads: cgroup::Workloads,
    /// Emptied frame vectors of stored samples, reused for the next
    /// drain's (see [`Symbolizer::recycle`]).
    spare_frames: Vec<Vec<Frame>>,
    recent: Vec<(Pid, Instant, u32)>,
    modules: HashMap<FileId, Arc<Module>>,
    /// The kernel's symbols, read when a kernel address is first named
    /// (`None` before, or if kallsyms cannot be read).
    kernel_symbols: Option<KernelSymbols>,
    kernel_load: KernelLoad,
    kernel_readable: bool,
    kernel_cache: GenerationalCache<u64, Arc<[Frame]>>,
    file_cache: GenerationalCache<(FileId, u64), Arc<[Frame]>>,
    elf_last_used: HashMap<PathBuf, Instant>,
    elf: elf_worker::ElfWorker,
    /// Estimated bytes of `snapshots`.
    snapshot_bytes: usize,
    /// Estimated bytes of parsed DWARF the ELF worker holds (its last reply).
    dwarf_bytes: usize,
    /// Bytes of compact ELF symbol tables the ELF worker held at its last reply.
    symtab_bytes: usize,
    perf_maps: HashMap<Pid, CachedPerfMap>,
    /// Bytes the cached perf maps hold.
    perf_map_bytes: usize,
    options: SymbolizerOptions,
    misses: Misses,
}

impl fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbolizer")
            .field("kernel_readable", &self.kernel_readable)
            .field("kernel_cache", &self.kernel_cache.len())
            .field("file_cache", &self.file_cache.len())
            .field("perf_maps", &self.perf_maps.len())
            .field("misses", &self.misses)
            .finish_non_exhaustive()
    }
}

/// Whether `/proc/kallsyms` shows real addresses to this process. With
/// `kernel.kptr_restrict` set, or without CAP_SYSLOG, every address reads as
/// zero and kernel symbolization silently finds nothing.
pub fn kallsyms_readable() -> Result<bool, std::io::Error> {
    use std::io::BufRead;
    let f = std::io::BufReader::new(std::fs::File::open("/proc/kallsyms")?);
    for line in f.lines().take(64) {
        let line = line?;
        if let Some(addr) = line.split_whitespace().next()
            && u64::from_str_radix(addr, 16).is_ok_and(|a| a != 0)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A new process's mappings and name, read while the symbolizer is busy
/// naming a drain (which can wait seconds for a large file's DWARF under
/// emulation): a process that exits meanwhile is still named, from this
/// read, when it is handed over ([`Symbolizer::note_process_read_early`]).
#[derive(Debug)]
pub struct EarlyMaps {
    maps: Arc<ProcessMaps>,
    comm: Option<Arc<str>>,
    taken: Instant,
}

impl EarlyMaps {
    /// Reads `/proc/PID/maps` and its name; `None` if the process is gone
    /// or has no mappings left (a zombie: what was read while it lived is
    /// kept instead).
    pub fn read(pid: Pid) -> Option<Self> {
        let maps = ProcessMaps::read(pid).ok()?;
        if maps.mappings().is_empty() {
            return None;
        }
        Some(Self {
            maps: Arc::new(maps),
            comm: read_process_comm(pid),
            taken: Instant::now(),
        })
    }
}

/// Where reading kallsyms stands.
enum KernelLoad {
    NotStarted,
    /// On its own thread; the symbols and the time the read took come here.
    Reading(std::sync::mpsc::Receiver<(Result<KernelSymbols, kallsyms::KallsymsError>, Duration)>),
    Done,
}

impl Symbolizer {
    /// A symbolizer with empty caches. Logs a warning if kernel addresses are
    /// hidden.
    pub fn new(options: SymbolizerOptions) -> Self {
        let kernel_readable = match kallsyms_readable() {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    "/proc/kallsyms shows zeroed addresses (kernel.kptr_restrict, or no CAP_SYSLOG): \
                     kernel frames will be named [kernel] (addresses stay hidden); run as root or set kernel.kptr_restrict=0"
                );
                false
            }
            Err(e) => {
                tracing::warn!("cannot read /proc/kallsyms ({e}): kernel frames will be unnamed");
                false
            }
        };
        Self {
            namers: Vec::new(),
            snapshots: HashMap::new(),
            comms: HashMap::new(),
            workloads: cgroup::Workloads::default(),
            spare_frames: Vec::new(),
            snapshot_bytes: 0,
            recent: Vec::new(),
            modules: HashMap::new(),
            kernel_symbols: None,
            kernel_load: KernelLoad::NotStarted,
            kernel_readable,
            kernel_cache: GenerationalCache::new(
                options.cache_entries() / 2,
                options.symbol_cache_bytes / 4,
            ),
            file_cache: GenerationalCache::new(
                options.cache_entries() / 2,
                options.symbol_cache_bytes / 4,
            ),
            elf_last_used: HashMap::new(),
            elf: elf_worker::ElfWorker::new(options.dwarf_budget_bytes)
                .with_deadline(options.elf_deadline),
            dwarf_bytes: 0,
            symtab_bytes: 0,
            perf_maps: HashMap::new(),
            perf_map_bytes: 0,
            options,
            misses: Misses::default(),
        }
    }

    /// Names the runtimes' tagged slots ([`crate::runtime::namers`]).
    pub fn set_namers(&mut self, namers: Vec<Box<dyn FrameNamer>>) {
        self.namers = namers;
    }

    /// What naming each runtime's frames found.
    pub fn runtime_stats(&self) -> Vec<(&'static str, NameStats)> {
        self.namers
            .iter()
            .map(|n| (n.runtime(), n.stats()))
            .collect()
    }

    /// Whether kernel addresses can be named.
    pub fn kernel_readable(&self) -> bool {
        self.kernel_readable
    }

    /// Bytes the symbolizer's caches hold, roughly. The symbol caches are
    /// bounded by entries (half of `symbol_cache_bytes` each, in two
    /// generations) and counted at [`CACHED_FRAME_BYTES`] an entry; snapshots by
    /// [`SymbolizerOptions::snapshot_budget_bytes`]; DWARF by
    /// [`SymbolizerOptions::dwarf_budget_bytes`].
    pub fn cache_bytes(&self) -> CacheBytes {
        CacheBytes {
            perf_maps: self.perf_map_bytes,
            symbols: self.kernel_cache.bytes() + self.file_cache.bytes(),
            snapshots: self.snapshot_bytes,
            dwarf: self.dwarf_bytes,
            elf_symbols: self.symtab_bytes,
            kernel_symbols: self.kernel_symbols.as_ref().map_or(0, KernelSymbols::bytes),
            runtimes: self
                .namers
                .iter()
                .map(|n| (n.runtime(), n.stats().cached_bytes as usize))
                .collect(),
        }
    }

    /// Addresses that could not be named so far, by reason.
    pub fn misses(&self) -> Misses {
        self.misses.clone()
    }

    /// Takes back the frame vectors of samples that have been stored, so the
    /// next drain fills them instead of allocating a vector per sample (most
    /// of the idle collector's allocation calls). Keeps at most
    /// [`SPARE_FRAMES_MAX`] vectors of at most [`SPARE_FRAMES_CAPACITY`]
    /// frames: a burst's worth is freed.
    pub fn recycle(&mut self, samples: impl IntoIterator<Item = SymbolizedSample>) {
        for s in samples {
            if self.spare_frames.len() >= SPARE_FRAMES_MAX {
                break;
            }
            let mut frames = s.frames;
            if frames.capacity() <= SPARE_FRAMES_CAPACITY {
                frames.clear();
                self.spare_frames.push(frames);
            }
        }
    }

    /// Reads and remembers the mappings of a process that just appeared, so
    /// that its samples can be named even if it exits before the next drain.
    /// A new process is still mapping its libraries (ld.so), so its snapshot
    /// is refreshed by [`Symbolizer::refresh_new_processes`] for a while,
    /// each re-read charged to `account` (the caller charges this read).
    pub fn note_process(&mut self, pid: Pid, account: u32) {
        let now = Instant::now();
        self.forget_process_state(pid);
        self.recent.retain(|(p, _, _)| *p != pid);
        if self.snapshot(pid, now).is_none() {
            return; // gone: nothing to read again
        }
        // Root's new processes are re-read whatever others start: one
        // of another account's gives way to it.
        if self.recent.len() >= MAX_RECENT
            && account == 0
            && let Some(i) = self.recent.iter().position(|(_, _, a)| *a != 0)
        {
            self.recent.remove(i);
        }
        if self.recent.len() < MAX_RECENT {
            self.recent.push((pid, now, account));
        }
    }

    /// Forgets the name and labels kept of an earlier process of `pid`:
    /// a new process has it now, read or not yet (its labels are read
    /// again when its samples are named).
    pub fn forget_process_state(&mut self, pid: Pid) {
        self.comms.remove(&pid);
        self.workloads.forget(pid);
    }

    /// When the snapshot of `pid`'s mappings was read, if one is kept.
    pub fn snapshot_taken(&self, pid: Pid) -> Option<Instant> {
        self.snapshots.get(&pid).map(|s| s.taken)
    }

    /// Forgets everything kept of an earlier process of `pid` (or of this
    /// one before an exec), its snapshot too: a new process has it, to be
    /// read in its turn.
    pub fn forget_process(&mut self, pid: Pid) {
        self.forget_process_state(pid);
        if let Some(old) = self.snapshots.remove(&pid) {
            self.snapshot_bytes -= old.bytes;
        }
    }

    /// Keeps the mappings of process `pid` read early (see [`EarlyMaps`]),
    /// without reading them again: its account is past its reading
    /// credit.
    pub fn keep_early(&mut self, pid: Pid, early: Option<EarlyMaps>) {
        self.forget_process_state(pid);
        if let Some(early) = early {
            self.keep_snapshot(pid, early.maps, early.comm, early.taken);
        }
    }

    /// Forgets what the runtimes' namers hold of process `pid`, which
    /// exec'd (see [`crate::runtime::FrameNamer::forget`]).
    pub fn forget_runtime_names(&mut self, pid: Pid) {
        for n in &mut self.namers {
            n.forget(pid);
        }
    }

    /// Whether processes noted lately are still being re-read (see
    /// [`Symbolizer::refresh_new_processes`]).
    pub fn refreshing(&self) -> bool {
        !self.recent.is_empty()
    }

    /// Re-reads the mappings of processes noted in the last
    /// [`RECENT_REFRESH`], while they live, each while its account may
    /// spend the agent's time (charged to it; skipped past its credit).
    pub fn refresh_new_processes(&mut self, reads: &mut ReadMeter) {
        let now = Instant::now();
        self.recent
            .retain(|(_, t, _)| now.duration_since(*t) < RECENT_REFRESH);
        let pids: Vec<(Pid, u32)> = self.recent.iter().map(|(p, _, a)| (*p, *a)).collect();
        for (pid, account) in pids {
            if !reads.may_read(account) {
                reads.skip();
                continue;
            }
            let started = Instant::now();
            self.snapshot(pid, now);
            reads.charge(account, started.elapsed());
        }
    }

    fn snapshot(&mut self, pid: Pid, now: Instant) -> Option<Arc<ProcessMaps>> {
        let read = EarlyMaps::read(pid)?;
        Some(self.keep_snapshot(pid, read.maps, read.comm, now))
    }

    /// [`Symbolizer::note_process`] of a process whose mappings were read
    /// early (see [`EarlyMaps`]): read again if it still lives, what was
    /// read early if it has gone meanwhile.
    pub fn note_process_read_early(&mut self, pid: Pid, account: u32, early: Option<EarlyMaps>) {
        self.note_process(pid, account);
        if let Some(early) = early
            && !self.snapshots.contains_key(&pid)
        {
            self.keep_snapshot(pid, early.maps, early.comm, early.taken);
        }
    }

    fn keep_snapshot(
        &mut self,
        pid: Pid,
        maps: Arc<ProcessMaps>,
        comm: Option<Arc<str>>,
        now: Instant,
    ) -> Arc<ProcessMaps> {
        // Key, value, map slot, and the name.
        let bytes = maps.approx_bytes() + 96 + comm.as_ref().map_or(0, |c| c.len());
        if let Some(old) = self.snapshots.remove(&pid) {
            self.snapshot_bytes -= old.bytes;
        }
        if self.snapshot_bytes + bytes > self.options.snapshot_budget_bytes
            && !self.snapshots.is_empty()
        {
            // The oldest half goes: the processes least likely to have
            // samples still to name.
            let mut ages: Vec<Instant> = self.snapshots.values().map(|s| s.taken).collect();
            ages.sort_unstable();
            let cutoff = ages[ages.len() / 2];
            self.snapshots.retain(|_, s| s.taken > cutoff);
            self.snapshot_bytes = self.snapshots.values().map(|s| s.bytes).sum();
            self.misses.snapshots_evicted += 1;
        }
        self.snapshot_bytes += bytes;
        self.snapshots.insert(
            pid,
            MapsSnapshot {
                maps: maps.clone(),
                comm,
                taken: now,
                bytes,
                ns_pid: None,
            },
        );
        maps
    }

    /// Names the stacks of one drain's events. An off-wake chain becomes the
    /// blocked stack, a `--` frame, then the waker's stack leaf first (root
    /// last) and the waker's name, each with `_[w]`.
    pub fn symbolize_events(
        &mut self,
        events: Vec<crate::collect::events::RawEvent>,
    ) -> Vec<(crate::collect::events::EventKind, SymbolizedSample)> {
        self.symbolize_events_waiting(events, &mut || {})
    }

    /// [`Symbolizer::symbolize_events`], calling `idle` every
    /// [`elf_worker::WAIT_SLICE`] while a file's symbols are waited for.
    pub fn symbolize_events_waiting(
        &mut self,
        events: Vec<crate::collect::events::RawEvent>,
        idle: &mut dyn FnMut(),
    ) -> Vec<(crate::collect::events::EventKind, SymbolizedSample)> {
        let n = events.len();
        let mut raws = Vec::with_capacity(n);
        let mut wakers = Vec::new();
        let mut kinds = Vec::with_capacity(n);
        let mut labels = Vec::with_capacity(n);
        for (i, e) in events.into_iter().enumerate() {
            kinds.push(e.kind);
            labels.push(e.label);
            // The waker's side is drawn into the event's stack, which the
            // store keeps under the event's account: its own is not kept.
            let account = e.sample.account;
            raws.push(e.sample);
            if let Some(w) = e.waker {
                wakers.push(i);
                raws.push(RawSample {
                    pid: w.pid,
                    tid: w.tid,
                    comm: w.comm,
                    kernel: w.kernel,
                    user: w.user,
                    count: 0,
                    at_ms: None,
                    account,
                });
            }
        }
        // Primaries and wakers were interleaved; restore the pairing.
        let mut named = self.symbolize_waiting(raws, idle).into_iter();
        let mut out = Vec::with_capacity(n);
        let mut waker_iter = wakers.into_iter().peekable();
        // Stacks taken inside a BPF program start with the program's own
        // frames; they are emberd, not the workload.
        let is_bpf = |f: &Frame| {
            f.kind == FrameKind::Kernel
                && (f.name.starts_with("bpf_prog_")
                    || f.name.starts_with("bpf_trace_run")
                    || f.name.starts_with("__bpf_trace_")
                    || f.name.starts_with("__traceiter_"))
        };
        for (i, (kind, label)) in kinds.into_iter().zip(labels).enumerate() {
            let Some(mut s) = named.next() else { break };
            s.frames.retain(|f| !is_bpf(f));
            if let Some(label) = label {
                s.frames
                    .push(shared_frame(&format!("[{label}]"), FrameKind::Marker));
            }
            if waker_iter.peek() == Some(&i) {
                waker_iter.next();
                if let Some(w) = named.next() {
                    s.frames.push(shared_frame("--", FrameKind::Marker));
                    s.frames
                        .extend(
                            w.frames
                                .into_iter()
                                .filter(|f| !is_bpf(f))
                                .rev()
                                .map(|mut f| {
                                    f.kind = FrameKind::Waker;
                                    f
                                }),
                        );
                    s.frames
                        .push(shared_frame(&w.thread_comm, FrameKind::Waker));
                }
            }
            out.push((kind, s));
        }
        out
    }

    /// Names the stacks of one drain's samples.
    pub fn symbolize(&mut self, samples: Vec<RawSample>) -> Vec<SymbolizedSample> {
        self.symbolize_waiting(samples, &mut || {})
    }

    /// [`Symbolizer::symbolize`], calling `idle` every
    /// [`elf_worker::WAIT_SLICE`] while a file's symbols are waited for: the
    /// collector's other work (new processes, unwind tables) goes on.
    pub fn symbolize_waiting(
        &mut self,
        samples: Vec<RawSample>,
        idle: &mut dyn FnMut(),
    ) -> Vec<SymbolizedSample> {
        let now = Instant::now();
        self.symbolize_kernel(&samples, idle);

        // Unique lookup addresses per process.
        // ahash, not SipHash: every address of every stack is hashed here
        // and in the caches at each drain.
        let mut user_addrs: FastMap<Pid, FastSet<u64>> = FastMap::default();
        for s in &samples {
            if let RawStack::Ips { ips, .. } = &s.user {
                let set = user_addrs.entry(s.pid).or_default();
                set.extend(lookup_addrs(ips));
            }
        }
        let mut user_frames: FastMap<Pid, FastMap<u64, Arc<[Frame]>>> = FastMap::default();
        let mut process_comms: FastMap<Pid, Arc<str>> = FastMap::default();
        for (pid, addrs) in user_addrs {
            user_frames.insert(pid, self.symbolize_process(pid, addrs, now, idle));
        }

        let out = samples
            .into_iter()
            .map(|s| {
                let thread_comm = s.comm.clone();
                let snapshots = &self.snapshots;
                let comms = &mut self.comms;
                let spare = &mut self.spare_frames;
                // A process's name is read with its maps (see
                // MAPS_MAX_AGE); others (kernel threads, gone processes)
                // are read now (kept as long) or fall back to what was
                // seen earlier.
                let process_comm = process_comms
                    .entry(s.pid)
                    .or_insert_with(|| {
                        let snap = snapshots.get(&s.pid);
                        let fresh = |t: Instant| now.duration_since(t) < MAPS_MAX_AGE;
                        snap.filter(|m| fresh(m.taken))
                            .and_then(|m| m.comm.clone())
                            .or_else(|| {
                                comms
                                    .get(&s.pid)
                                    .filter(|(_, t)| fresh(*t))
                                    .map(|(c, _)| c.clone())
                            })
                            .or_else(|| {
                                let c = read_process_comm(s.pid)?;
                                if comms.len() >= COMMS_MAX {
                                    comms.retain(|_, (_, t)| fresh(*t));
                                    if comms.len() >= COMMS_MAX {
                                        comms.clear();
                                    }
                                }
                                comms.insert(s.pid, (c.clone(), now));
                                Some(c)
                            })
                            .or_else(|| snap.and_then(|m| m.comm.clone()))
                            .unwrap_or_else(|| thread_comm.clone())
                    })
                    .clone();
                let workload = self.workloads.get(s.pid, now);
                // Sized once: growing it frame by frame was most of the
                // collector's allocation calls.
                let depth = |st: &RawStack| match st {
                    RawStack::Ips { ips, .. } => ips.len() + 1,
                    _ => 1,
                };
                let mut frames = spare.pop().unwrap_or_default();
                frames.reserve(depth(&s.user) + depth(&s.kernel) + 4);
                let empty = FastMap::default();
                let names = user_frames.get(&s.pid).unwrap_or(&empty);
                push_stack(&mut frames, &s.user, |a| names.get(&a).cloned());
                let kcache = &self.kernel_cache;
                push_stack(&mut frames, &s.kernel, |a| kcache.peek(&a).cloned());
                SymbolizedSample {
                    pid: s.pid,
                    tid: s.tid,
                    thread_comm,
                    process_comm,
                    frames,
                    workload,
                    account: s.account,
                    count: s.count,
                    at_ms: s.at_ms,
                }
            })
            .collect();
        self.evict_idle(now);
        out
    }

    /// Reads kallsyms on a thread of its own the first time, calling `idle`
    /// every [`elf_worker::WAIT_SLICE`] until it is read: under emulation
    /// the read takes seconds, and new processes' unwind tables waited
    /// behind it (a process exec'd as a recording started had 64% of its
    /// page faults marked `tables not ready` on Linux 6.12 under TCG).
    fn wait_for_kernel_symbols(&mut self, idle: &mut dyn FnMut()) {
        if let KernelLoad::NotStarted = self.kernel_load {
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("emberd-kallsyms".into())
                .spawn(move || {
                    let t = Instant::now();
                    let read = KernelSymbols::load();
                    // The receiver is gone only if the symbolizer is.
                    let _ = tx.send((read, t.elapsed()));
                });
            self.kernel_load = match spawned {
                Ok(_) => KernelLoad::Reading(rx),
                Err(e) => {
                    tracing::warn!(
                        "kernel frames will be unnamed: no thread to read kallsyms: {e}"
                    );
                    KernelLoad::Done
                }
            };
        }
        let KernelLoad::Reading(rx) = &self.kernel_load else {
            return;
        };
        let read = loop {
            match rx.recv_timeout(elf_worker::WAIT_SLICE) {
                Ok(read) => break Some(read),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => idle(),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break None,
            }
        };
        self.kernel_load = KernelLoad::Done;
        match read {
            Some((Ok(k), took)) => {
                tracing::debug!(
                    "read {} kernel symbols into {} bytes in {took:?}",
                    k.len(),
                    k.bytes()
                );
                self.kernel_symbols = Some(k);
            }
            Some((Err(e), _)) => tracing::warn!("kernel frames will be unnamed: {e}"),
            None => tracing::warn!("kernel frames will be unnamed: reading kallsyms stopped"),
        }
    }

    fn symbolize_kernel(&mut self, samples: &[RawSample], idle: &mut dyn FnMut()) {
        let mut wanted: Vec<u64> = samples
            .iter()
            .filter_map(|s| match &s.kernel {
                RawStack::Ips { ips, .. } => Some(lookup_addrs(ips)),
                _ => None,
            })
            .flatten()
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        // Every address of this drain stays cached until its samples are
        // named below.
        self.kernel_cache.make_room(wanted.len());
        wanted.retain(|a| !self.kernel_cache.touch(a));
        if wanted.is_empty() {
            return;
        }
        if self.kernel_readable {
            self.wait_for_kernel_symbols(idle);
        }
        for &addr in &wanted {
            let name = self.kernel_symbols.as_mut().and_then(|k| k.name(addr));
            let text = self.kernel_symbols.as_ref().and_then(|k| k.text);
            let frames: Arc<[Frame]> = match name {
                Some(name) => Arc::from(vec![Frame::new(cap_name(&name), FrameKind::Kernel)]),
                None => {
                    self.misses.kernel_no_symbol += 1;
                    // Never absolute: an address would give away the
                    // kernel's randomized base to every reader of the
                    // profiles. Where kallsyms hides addresses
                    // (kptr_restrict, no CAP_SYSLOG) not even an offset.
                    let name = match text {
                        Some(text) if self.kernel_readable && addr >= text => {
                            format!("[kernel]+0x{:x}", addr - text)
                        }
                        _ => "[kernel]".to_owned(),
                    };
                    Arc::from(vec![Frame::new(name, FrameKind::Kernel)])
                }
            };
            self.kernel_cache.insert(addr, frames);
        }
    }

    /// Names `addrs` (lookup addresses) of one process.
    fn symbolize_process(
        &mut self,
        pid: Pid,
        addrs: FastSet<u64>,
        now: Instant,
        idle: &mut dyn FnMut(),
    ) -> FastMap<u64, Arc<[Frame]>> {
        let mut out = FastMap::with_capacity_and_hasher(addrs.len(), Default::default());
        // Interpreter frames are named from their code records, not maps.
        let mut addrs = addrs;
        let namers = &mut self.namers;
        addrs.retain(|&a| {
            if !crate::runtime::is_tagged(a) {
                return true;
            }
            if let Some(n) = namers.iter_mut().find(|n| n.claims(a)) {
                out.insert(a, n.frames(pid, a));
            }
            false
        });
        // The maps read before while they cover every address and are not
        // too old; else fresh ones if the process lives, else those read
        // when it appeared.
        let cached = self
            .snapshots
            .get(&pid)
            .filter(|s| now.duration_since(s.taken) < MAPS_MAX_AGE)
            .map(|s| s.maps.clone())
            .filter(|m| addrs.iter().all(|&a| m.find(a).is_some()));
        let (maps, gone) = match cached.or_else(|| self.snapshot(pid, now)) {
            Some(m) => (Some(m), false),
            None => (self.snapshots.get(&pid).map(|s| s.maps.clone()), true),
        };
        let maps = match maps {
            Some(m) => m,
            None => {
                self.misses.process_gone += addrs.len() as u64;
                // One name for all: the address alone says nothing without
                // the maps (and would give away the process's layout), and
                // a distinct frame per address of every short-lived process
                // filled the stores' frame tables (1,100 new frames a
                // second under churn).
                let exited = single("[exited]", FrameKind::User);
                for a in addrs {
                    out.insert(a, exited.clone());
                }
                return out;
            }
        };
        self.file_cache.make_room(addrs.len());
        // File-backed addresses not yet cached, grouped by file.
        let mut per_file: FastMap<FileId, (usize, Vec<(u64, u64)>)> = FastMap::default();
        let mut perf_map: Option<Arc<PerfMap>> = None;
        for addr in addrs {
            let Some((idx, m)) = maps.find(addr) else {
                // Outside the maps read when the process appeared, and it is
                // gone: mapped after that read (a short-lived process's
                // libc, mapped by ld.so after the exec notice). Its address
                // is of one process's randomized layout: a frame of its
                // own for every such process filled the stores (1,200 new
                // frames in 100 s of churn), so one name for all.
                let name = if gone {
                    self.misses.process_gone += 1;
                    "[exited]".to_owned()
                } else {
                    self.misses.unmapped += 1;
                    format!("[unmapped]+0x{addr:x}")
                };
                out.insert(addr, single(name, FrameKind::User));
                continue;
            };
            match &m.kind {
                MappingKind::File { id, .. } => {
                    let offset = addr - m.start + m.offset;
                    if let Some(f) = self.file_cache.get(&(*id, offset)) {
                        out.insert(addr, f.clone());
                    } else {
                        per_file
                            .entry(*id)
                            .or_insert((idx, Vec::new()))
                            .1
                            .push((addr, offset));
                    }
                }
                MappingKind::Special(name) if name == "[vdso]" => {
                    let off = addr - m.start;
                    out.insert(addr, single(format!("[vdso]+0x{off:x}"), FrameKind::User));
                }
                MappingKind::Special(name) | MappingKind::Anon(name) => {
                    let map = perf_map.get_or_insert_with(|| self.perf_map(pid, now));
                    match map.lookup(addr) {
                        Some(e) => {
                            out.insert(addr, single(&*e.name, FrameKind::Jit));
                        }
                        None => {
                            self.misses.anon_no_perf_map += 1;
                            // Relative to the mapping: an absolute address
                            // would give away the process's layout (ASLR).
                            let off = addr - m.start;
                            out.insert(addr, single(format!("{name}+0x{off:x}"), FrameKind::User));
                        }
                    }
                }
            }
        }
        for (id, (idx, items)) in per_file {
            let m = &maps.mappings()[idx];
            let module = m.module_name();
            let shown: Arc<str> = match &m.kind {
                MappingKind::File { path, .. } => Arc::from(path.display().to_string()),
                _ => Arc::from(module.as_str()),
            };
            let request = elf_worker::Request {
                pid,
                mapping: m.clone(),
                shown,
                offsets: items.iter().map(|&(_, off)| off).collect(),
                module: self.modules.get(&id).cloned(),
            };
            // Off this thread and under a deadline: the file may be on a
            // filesystem that never answers (see elf_worker).
            let reply = self.elf.symbolize(id, request, idle);
            if let Ok(r) = &reply {
                self.dwarf_bytes = r.dwarf_bytes;
                self.symtab_bytes = r.symtab_bytes;
                if self.modules.len() >= MAX_MODULES {
                    self.modules.clear();
                }
                self.modules.insert(id, r.module.clone());
            }
            for (i, &(addr, offset)) in items.iter().enumerate() {
                let frames = match &reply {
                    Ok(r) => match &r.frames {
                        Ok(f) => match f.get(i) {
                            Some(Some(frames)) => frames.clone(),
                            _ => {
                                self.misses.no_symbol += 1;
                                single(format!("{module}+0x{offset:x}"), FrameKind::User)
                            }
                        },
                        Err(_) => {
                            self.misses.elf_error += 1;
                            single(format!("{module}+0x{offset:x}"), FrameKind::User)
                        }
                    },
                    Err(_) => {
                        self.misses.elf_timeout += 1;
                        single(format!("{module}+0x{offset:x}"), FrameKind::User)
                    }
                };
                // Names of a slow file are not cached: they are cheap to
                // make again, and the file stays marked slow.
                if reply.is_ok() {
                    self.file_cache.insert((id, offset), frames.clone());
                }
                out.insert(addr, frames);
            }
            match reply {
                Ok(Reply {
                    frames: Err(e),
                    path,
                    ..
                }) => tracing::debug!("symbolizing {} of pid {pid} failed: {e}", path.display()),
                Ok(Reply {
                    path,
                    scratch: false,
                    ..
                }) => {
                    self.elf_last_used.insert(path, now);
                }
                _ => {}
            }
        }
        out
    }

    /// The perf map of `pid`, read safely (see [`untrusted`]): parsed
    /// whole when new or replaced, and only its appended lines when it grew.
    fn perf_map(&mut self, pid: Pid, now: Instant) -> Arc<PerfMap> {
        let read_ns_pid = || procmaps::namespace_pid(pid).unwrap_or(pid.0);
        let ns_pid = match self.snapshots.get_mut(&pid) {
            Some(snap) => *snap.ns_pid.get_or_insert_with(read_ns_pid),
            None => read_ns_pid(),
        };
        let dir = &self.options.perf_map_dir;
        let rel = dir
            .strip_prefix("/")
            .unwrap_or(dir)
            .join(format!("perf-{ns_pid}.map"));
        let (file, meta) =
            match untrusted::open_in_root(pid, &rel, self.options.perf_map_max_file_bytes) {
                untrusted::Opened::File { file, meta } => (file, meta),
                untrusted::Opened::Missing => {
                    return self.cache_perf_map(pid, None, 0, PerfMap::default(), now);
                }
                untrusted::Opened::Refused(r) => {
                    *self.misses.perf_map_refused.entry(r).or_default() += 1;
                    tracing::debug!("perf map of pid {pid} refused: {}", r.label());
                    return self.cache_perf_map(pid, None, 0, PerfMap::default(), now);
                }
            };
        let stamp = FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        };
        if let Some(c) = self.perf_maps.get_mut(&pid)
            && c.stamp == Some(stamp)
        {
            c.last_used = now;
            return c.map.clone();
        }
        if untrusted::older_than_process(pid, &meta) {
            let r = untrusted::Refusal::Stale;
            *self.misses.perf_map_refused.entry(r).or_default() += 1;
            tracing::debug!("perf map of pid {pid} refused: {}", r.label());
            return self.cache_perf_map(pid, None, 0, PerfMap::default(), now);
        }
        // The same file, grown: parse only what was appended.
        let grown = self.perf_maps.get(&pid).is_some_and(|c| {
            c.stamp
                .is_some_and(|s| s.dev == stamp.dev && s.ino == stamp.ino && s.size <= stamp.size)
        });
        // Taken out of the cache, so that it is merged in place unless a
        // query still holds it.
        let (base, from) = match grown.then(|| self.perf_maps.remove(&pid)).flatten() {
            Some(c) => (Some(c.map), c.parsed),
            None => (None, 0),
        };
        // One map may take half the budget: two fit, so two large maps do
        // not evict each other at every drain.
        let max_bytes = self.options.perf_map_budget_bytes / 2;
        let (tail, parsed) = perfmap::parse_complete_lines(&file, from, stamp.size, max_bytes);
        self.misses.perf_map_malformed_lines += tail.malformed_lines;
        let map = match base {
            Some(b) => {
                let mut b = Arc::try_unwrap(b).unwrap_or_else(|shared| (*shared).clone());
                let dropped = b.dropped_entries;
                b.merge(tail, max_bytes);
                self.misses.perf_map_entries_dropped += b.dropped_entries - dropped;
                b
            }
            None => {
                self.misses.perf_map_entries_dropped += tail.dropped_entries;
                tail
            }
        };
        self.cache_perf_map(pid, Some(stamp), parsed, map, now)
    }

    /// Caches a perf map and keeps all cached maps within the byte budget
    /// (least recently used first out).
    fn cache_perf_map(
        &mut self,
        pid: Pid,
        stamp: Option<FileStamp>,
        parsed: u64,
        map: PerfMap,
        now: Instant,
    ) -> Arc<PerfMap> {
        let map = Arc::new(map);
        let bytes = map.approx_bytes();
        self.perf_maps.insert(
            pid,
            CachedPerfMap {
                stamp,
                map: map.clone(),
                parsed,
                bytes,
                last_used: now,
            },
        );
        let mut total: usize = self.perf_maps.values().map(|c| c.bytes).sum();
        while total > self.options.perf_map_budget_bytes {
            let Some((&victim, c)) = self
                .perf_maps
                .iter()
                .filter(|(p, _)| **p != pid)
                .min_by_key(|(_, c)| c.last_used)
            else {
                break;
            };
            total -= c.bytes;
            self.perf_maps.remove(&victim);
            self.misses.perf_maps_evicted += 1;
        }
        self.perf_map_bytes = total;
        map
    }

    /// Forgets the processes that have exited: their mapping snapshots and
    /// names. `is_live` answers from a listing of `/proc` made at `listed`,
    /// before the drain that just ended read the kernel's maps, so every
    /// sample of a process missing from it was in that drain and has been
    /// named. What was read after the listing stays (a process that reused
    /// a pid). Without this, a host starting a few hundred short-lived
    /// processes a second kept up to the whole snapshot budget of the dead.
    pub fn forget_exited(&mut self, is_live: impl Fn(Pid) -> bool, listed: Instant) {
        self.snapshots
            .retain(|pid, s| s.taken >= listed || is_live(*pid));
        self.snapshot_bytes = self.snapshots.values().map(|s| s.bytes).sum();
        self.comms
            .retain(|pid, (_, t)| *t >= listed || is_live(*pid));
        for n in &mut self.namers {
            n.forget_exited(&is_live);
        }
    }

    fn evict_idle(&mut self, now: Instant) {
        self.snapshots
            .retain(|_, s| now.duration_since(s.taken) < IDLE_EVICT);
        self.snapshot_bytes = self.snapshots.values().map(|s| s.bytes).sum();
        self.perf_maps
            .retain(|_, c| now.duration_since(c.last_used) < IDLE_EVICT);
        let idle: Vec<PathBuf> = self
            .elf_last_used
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= ELF_IDLE_EVICT)
            .map(|(p, _)| p.clone())
            .collect();
        for path in idle {
            self.elf_last_used.remove(&path);
            self.elf.evict(path);
        }
    }
}

fn read_process_comm(pid: Pid) -> Option<Arc<str>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(Arc::from(s.trim_end_matches('\n')))
}

/// The frames of one symbolized address, outermost first: the function, then
/// the functions inlined into it. blazesym gives the address's own source
/// location on the symbol and, on each inlined function, the location of the
/// call to it, which belongs to the frame one level out.
fn frames_of_sym(sym: &blazesym::symbolize::Sym<'_>, module: &Arc<Module>) -> Arc<[Frame]> {
    let loc = |ci: Option<&blazesym::symbolize::CodeInfo<'_>>| {
        ci.map(|c| (Arc::<str>::from(c.to_path().display().to_string()), c.line))
    };
    // A symbol-table name (no DWARF behind it) may be one of glibc's
    // hidden internal aliases, `__GI_name` for `name`, where the table has
    // several names at one address: the public name is the one users know
    // (and the one DWARF gives).
    let name = match sym.code_info {
        None => public_name(&sym.name),
        Some(_) => &sym.name,
    };
    let mut names: Vec<(&str, FrameKind)> = vec![(name, FrameKind::User)];
    names.extend(sym.inlined.iter().map(|f| (&*f.name, FrameKind::Inlined)));
    let mut locs: Vec<Option<(Arc<str>, Option<u32>)>> = sym
        .inlined
        .iter()
        .map(|f| loc(f.code_info.as_ref()))
        .collect();
    locs.push(loc(sym.code_info.as_deref()));
    names
        .into_iter()
        .zip(locs)
        .map(|((name, kind), l)| {
            let (file, line) = l.map_or((None, None), |(f, l)| (Some(f), l));
            Frame {
                name: cap_name(name).into(),
                kind,
                file: file.map(|f| match cap_name(&f) {
                    std::borrow::Cow::Borrowed(_) => f,
                    std::borrow::Cow::Owned(c) => c.into(),
                }),
                line,
                module: Some(module.clone()),
            }
        })
        .collect()
}

/// The longest name (function, JIT symbol, source file) kept whole, in
/// bytes. The longest in node's 74,482 exported C++ symbols is 3,362 (99.9%
/// are under 1,400); a user can build a binary with a 4 MiB name, which
/// would make one line of every folded, SVG and pprof answer that holds it
/// 4 MB and take a large share of the caches and stores that assume names
/// are short. Longer names are cut visibly by [`cap_name`].
pub const MAX_NAME_BYTES: usize = 4096;

/// `name`, or its first bytes and `…[+N bytes]` if it is longer than
/// [`MAX_NAME_BYTES`] (cut at a character boundary).
pub fn cap_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.len() <= MAX_NAME_BYTES {
        return std::borrow::Cow::Borrowed(name);
    }
    // Room for the suffix: "…[+" ... " bytes]" is at most 30 bytes.
    let mut cut = MAX_NAME_BYTES - 32;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…[+{} bytes]", &name[..cut], name.len() - cut))
}

/// A symbol-table name as users know it: glibc's hidden internal aliases,
/// `__GI_name` for `name`, share an address with the public name.
fn public_name(name: &str) -> &str {
    name.strip_prefix("__GI_").unwrap_or(name)
}

/// The frame of an address named from a symbol table alone.
fn symbol_frames(name: &str, module: &Arc<Module>) -> Arc<[Frame]> {
    Arc::from(vec![Frame {
        name: cap_name(public_name(name)).into(),
        kind: FrameKind::User,
        file: None,
        line: None,
        module: Some(module.clone()),
    }])
}

fn single(name: impl Into<Arc<str>>, kind: FrameKind) -> Arc<[Frame]> {
    Arc::from(vec![Frame::new(name, kind)])
}

/// The address to look up for each stack entry, leaf first. Entries past the
/// leaf are return addresses; the call itself is the byte before, which keeps
/// a call at a function's very end (noreturn) in the right function and
/// inline scope.
fn lookup_addrs(ips: &[u64]) -> impl Iterator<Item = u64> + '_ {
    (0..ips.len()).map(|i| lookup_addr(ips, i))
}

/// Entry `i` of [`lookup_addrs`].
fn lookup_addr(ips: &[u64], i: usize) -> u64 {
    if i == 0 || crate::runtime::is_tagged(ips[i]) {
        ips[i]
    } else {
        ips[i].saturating_sub(1)
    }
}

/// Functions a process or thread starts in: a stack that reaches one is complete.
const ROOT_FUNCTIONS: &[&str] = &[
    "_start",
    "__libc_start_call_main",
    "__libc_start_main",
    "__libc_start_main_impl",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
];

/// The marker frame at the root of a stack that did not reach its root:
/// why the walk stopped. `outermost` names the last frame reached.
fn end_marker(end: StackEnd, outermost: Option<Arc<[Frame]>>) -> Option<String> {
    // A walk that reached a thread's or process's first function and then
    // failed to find its (nonexistent) caller did reach the root: musl's
    // `_start` and some `clone`s do not mark the return address undefined.
    let at_root = outermost.as_ref().is_some_and(|f| {
        f.first()
            .is_some_and(|f| ROOT_FUNCTIONS.contains(&f.name.as_ref()))
    });
    match end {
        StackEnd::Root | StackEnd::Kernel => None,
        // A walk that took frame pointers out of a file whose table was not
        // built may have skipped frameless callers on its way to the root:
        // it is marked wherever it ended.
        e if at_root && e.error_reason().is_some() && e != StackEnd::NotReady => None,
        StackEnd::Truncated => Some("[truncated]".into()),
        StackEnd::NoUnwindInfo | StackEnd::BudgetFull => {
            // The file of the last native frame: where frame pointers
            // failed (a stack whose outermost frames are Python's ends in
            // the eval loop's frame, which bpf/unwind.h puts back).
            let file = outermost
                .and_then(|f| f.last().and_then(|f| f.module.clone()))
                .map(|m| m.path.rsplit('/').next().unwrap_or(&m.path).to_string())
                .unwrap_or_else(|| "unknown file".into());
            Some(if end == StackEnd::BudgetFull {
                format!("[unwind error: table budget full: {file}]")
            } else {
                format!("[no unwind info: {file}]")
            })
        }
        e => Some(format!(
            "[unwind error: {}]",
            e.error_reason().unwrap_or("unknown")
        )),
    }
}

/// A frame of emberd's own (a marker, a waker's thread name) shared by
/// every sample that carries it: the same few come at every drain, and a
/// new name for each was two allocations a sample. The table is emptied
/// when it reaches [`SHARED_FRAMES_MAX`] names.
fn shared_frame(text: &str, kind: FrameKind) -> Frame {
    use std::cell::RefCell;
    thread_local! {
        // One table per kind: a frame's name is its key, borrowed for lookups.
        static FRAMES: RefCell<HashMap<FrameKind, HashMap<Arc<str>, Frame>>> = RefCell::default();
    }
    FRAMES.with(|frames| {
        let mut frames = frames.borrow_mut();
        let table = frames.entry(kind).or_default();
        if let Some(f) = table.get(text) {
            return f.clone();
        }
        if table.len() >= SHARED_FRAMES_MAX {
            table.clear();
        }
        let f = Frame::new(text, kind);
        table.insert(f.name.clone(), f.clone());
        f
    })
}

/// Bound of [`shared_frame`]'s table.
const SHARED_FRAMES_MAX: usize = 1024;

/// Appends one side of a stack root first, with data-quality markers.
fn push_stack(
    frames: &mut Vec<Frame>,
    stack: &RawStack,
    mut name: impl FnMut(u64) -> Option<Arc<[Frame]>>,
) {
    match stack {
        RawStack::None => {}
        RawStack::Lost => frames.push(shared_frame("[lost]", FrameKind::Marker)),
        RawStack::Ips { ips, end } => {
            // Walked by index, not collected: a vector per stack was an
            // allocation per drained key.
            let mut len = ips.len();
            if *end == StackEnd::NotReady {
                // Frame pointers over a frameless binary read data as return
                // addresses: keep the frames up to the first one in no mapping.
                if let Some(i) = lookup_addrs(ips).position(|a| {
                    name(a).is_some_and(|f| f.iter().any(|f| f.name.starts_with("[unmapped]")))
                }) {
                    len = len.min(i.max(1));
                }
            }
            let addr_at = |i: usize| lookup_addr(ips, i);
            let outermost = len.checked_sub(1).map(addr_at).and_then(&mut name);
            if let Some(marker) = end_marker(*end, outermost) {
                frames.push(shared_frame(&marker, FrameKind::Marker));
            }
            for addr in (0..len).rev().map(addr_at) {
                match name(addr) {
                    Some(f) => frames.extend(f.iter().cloned()),
                    None => {
                        frames.push(Frame::new(format!("[unknown]+0x{addr:x}"), FrameKind::User))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_visibly_at_a_char_boundary() {
        assert_eq!(cap_name("main"), "main");
        let exact = "x".repeat(MAX_NAME_BYTES);
        assert_eq!(cap_name(&exact), exact.as_str());
        // Multi-byte characters straddling the cut.
        let long = "é".repeat(2 << 20);
        let cut = cap_name(&long);
        assert!(cut.len() <= MAX_NAME_BYTES, "{} bytes", cut.len());
        assert!(cut.starts_with("éé"));
        let kept = cut.find('…').unwrap();
        assert_eq!(cut[kept..], format!("…[+{} bytes]", long.len() - kept));
    }

    #[test]
    fn python_frames_show_their_line_when_asked() {
        let f = Frame {
            line: Some(42),
            ..Frame::new("Holdout.run (app.py)", FrameKind::Python)
        };
        assert_eq!(f.text(false).to_string(), "Holdout.run (app.py)");
        assert_eq!(f.text(true).to_string(), "Holdout.run (app.py:42)");
        let native = Frame {
            line: Some(7),
            ..Frame::new("main", FrameKind::User)
        };
        assert_eq!(
            native.text(true).to_string(),
            "main",
            "native frames keep their names"
        );
    }

    #[test]
    fn marker_frames_are_shared_and_spare_vectors_bounded() {
        let a = shared_frame("[lost]", FrameKind::Marker);
        let b = shared_frame("[lost]", FrameKind::Marker);
        assert!(Arc::ptr_eq(&a.name, &b.name), "one name for every [lost]");
        let w = shared_frame("[lost]", FrameKind::Waker);
        assert_eq!(w.kind, FrameKind::Waker, "kinds are kept apart");
        // SPARE_FRAMES_MAX's memory bound assumes this size.
        assert!(std::mem::size_of::<Frame>() <= 56);

        let mut s = Symbolizer::new(SymbolizerOptions::default());
        let sample = |n: usize| SymbolizedSample {
            pid: Pid(1),
            tid: crate::shared::Tid(1),
            thread_comm: "t".into(),
            process_comm: "p".into(),
            frames: Vec::with_capacity(n),
            workload: Default::default(),
            account: 0,
            count: 1,
            at_ms: None,
        };
        s.recycle([sample(8), sample(SPARE_FRAMES_CAPACITY + 1)]);
        assert_eq!(s.spare_frames.len(), 1, "oversized vectors are freed");
        s.recycle((0..2 * SPARE_FRAMES_MAX).map(|_| sample(4)));
        assert_eq!(s.spare_frames.len(), SPARE_FRAMES_MAX);
        assert!(s.spare_frames.iter().all(Vec::is_empty));
    }

    #[test]
    fn a_process_gone_before_its_handover_is_named_from_its_early_read() {
        let mut s = Symbolizer::new(SymbolizerOptions::default());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = Pid(child.id());
        // Read once the exec is done (the fork's first moments are ours).
        let t0 = Instant::now();
        let early = loop {
            let read = EarlyMaps::read(pid).expect("sleep's maps");
            if read.comm.as_deref() == Some("sleep") {
                break read;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "sleep never exec'd");
            std::thread::sleep(Duration::from_millis(5));
        };
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
        s.note_process_read_early(pid, 0, Some(early));
        let kept = s.snapshots.get(&pid).expect("the early read is kept");
        assert_eq!(kept.comm.as_deref(), Some("sleep"));
        assert!(!kept.maps.mappings().is_empty());
        assert!(s.snapshot_bytes > 0, "its bytes are counted");
        // A live process is read again at the handover, not taken early.
        let me = Pid(std::process::id());
        let stale = EarlyMaps::read(me).expect("own maps");
        let before = stale.taken;
        s.note_process_read_early(me, 0, Some(stale));
        assert!(s.snapshots[&me].taken > before, "read again while it lives");
    }

    #[test]
    fn exited_processes_are_forgotten_at_a_listing_made_before_the_drain() {
        let mut s = Symbolizer::new(SymbolizerOptions::default());
        let me = Pid(std::process::id());
        // A real process that exits: its snapshot is read while it lives.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let gone = Pid(child.id());
        let t0 = Instant::now();
        assert!(s.snapshot(me, t0).is_some() && s.snapshot(gone, t0).is_some());
        let both = s.snapshot_bytes;
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
        // The listing, made after the exit: only this process runs.
        let listed = Instant::now();
        let live = crate::store::LivePids::new([me.0], 0);
        // A pid reused after the listing: its snapshot is newer and stays.
        let mut reused = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let new = Pid(reused.id());
        assert!(s.snapshot(new, Instant::now()).is_some());
        s.comms.insert(gone, ("sleep".into(), t0));
        s.forget_exited(|p| live.contains(p.0), listed);
        let _ = reused.kill();
        let _ = reused.wait();
        assert!(s.snapshots.contains_key(&me), "a live process is kept");
        assert!(
            s.snapshots.contains_key(&new),
            "read after the listing: kept"
        );
        assert!(!s.snapshots.contains_key(&gone), "an exited process goes");
        assert!(!s.comms.contains_key(&gone), "and its name");
        assert!(s.snapshot_bytes < both + s.snapshots[&new].bytes);
        assert_eq!(
            s.snapshot_bytes,
            s.snapshots.values().map(|x| x.bytes).sum::<usize>()
        );
    }
}
