//! ELF symbolization on a worker thread, under a deadline.
//!
//! Naming user frames reads the binaries processes map, and those can live on
//! filesystems another user controls: a FUSE mount whose daemon never answers
//! a read, a hung NFS server. A read there cannot be interrupted, so it must
//! not happen on the collector thread. Requests go to a worker thread; the
//! collector waits at most [`FILE_DEADLINE`] for each. A file that misses its
//! deadline is not read again (its frames stay `module+0xoffset`, counted
//! as `elf_timeout`), the stuck worker is abandoned and a fresh one takes
//! over. A worker that was only slow (a cold cache, a slow disk, an emulated
//! machine) and answers later is taken back, and its file read again: slow
//! is not stuck. A file slow to read is slow for every worker that has not
//! read it yet: read again under the same deadline by the worker that took
//! over, it missed it again, for ever (under emulation libc's symbols took
//! 2-3 s: 118 misses in 8 minutes, each holding a drain 1 s, and a process
//! of the kernel matrix never named). So a file that answered late is
//! waited for longer at its next reads, whoever maps it
//! ([`ElfWorker::patience`]), if root owns it and no user mounted its
//! filesystem ([`Reply::waitable`]); a user's file, which its owner could
//! make answer just before any deadline, keeps [`FILE_DEADLINE`].
//! At most [`MAX_ABANDONED`] workers are abandoned at once;
//! past that, ELF symbolization is off until one answers (logged), and
//! sampling goes on.
//!
//! The worker also bounds what blazesym holds of parsed DWARF (see
//! [`DwarfBudget`]): a file's debug sections are decompressed and kept whole
//! while the file is in use, 9.5 MiB for Debian's libc6-dbg and far more for
//! a large C++ or Go binary with debug info, which no other bound counted.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};

use super::packed::NameReader;
use super::procmaps::{FileId, Mapping, MappingKind, elf_path};
use super::symscan::Scanner;
use super::symtab::{self, ElfSymbols};
use super::{Frame, Module, frames_of_sym, symbol_frames};
use crate::shared::Pid;

/// How long the daemon's collector waits for one file's symbols.
pub const FILE_DEADLINE: Duration = Duration::from_secs(1);

/// How long `emberd record` waits: a one-shot profile is read once, so a
/// slow first read (a cold cache, a large debug file, an emulated machine:
/// libc's symbols took over 1 s under TCG in the kernel matrix) is waited
/// for rather than leaving its frames unnamed in the file written; a stuck
/// one still costs at most this, once per file.
pub const RECORD_FILE_DEADLINE: Duration = Duration::from_secs(10);

/// How often the collector's other work is done while it waits for a
/// file's symbols: under emulation a large file takes seconds to read, and
/// new processes' unwind tables, built meanwhile, must not wait for it (the
/// kernel matrix's block I/O writer had 97% of its 8 s marked `tables not
/// ready` under TCG while `record` waited for libc's symbols).
pub const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Stuck workers left behind before ELF symbolization is switched off.
pub const MAX_ABANDONED: usize = 16;

/// Files remembered as having answered late, before the set is emptied.
const MAX_ANSWERED_LATE: usize = 4096;

/// One file's addresses to name.
#[derive(Debug)]
pub struct Request {
    /// The process mapping the file.
    pub pid: Pid,
    /// One of its mappings of the file.
    pub mapping: Mapping,
    /// Path shown in pprof mappings.
    pub shown: Arc<str>,
    /// File offsets to name.
    pub offsets: Vec<u64>,
    /// The module, if already known (else its build id is read).
    pub module: Option<Arc<Module>>,
}

/// The answer to a [`Request`].
#[derive(Debug)]
pub struct Reply {
    /// The path read: the mapped path when it is still the very file, else
    /// `/proc/PID/map_files/...` (then `scratch`, and already forgotten:
    /// it is good only while that process lives).
    pub path: PathBuf,
    /// Whether `path` is a per-process scratch path.
    pub scratch: bool,
    /// The module (path shown and build id).
    pub module: Arc<Module>,
    /// Frames per offset (`None`: no symbol), or why the file could not be read.
    pub frames: Result<Vec<Option<Arc<[Frame]>>>, String>,
    /// Estimated bytes of DWARF blazesym holds after this request.
    pub dwarf_bytes: usize,
    /// Bytes of the compact symbol tables held after this request.
    pub symtab_bytes: usize,
    /// How long the worker took over the request.
    pub took: Duration,
    /// Whether the file may be waited for past [`FILE_DEADLINE`] once it
    /// answered late ([`waitable`]).
    pub waitable: bool,
}

/// Why a request got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The file missed its deadline now or before.
    Timeout,
    /// ELF symbolization is off (too many stuck workers).
    Off,
}

enum Job {
    Symbolize(Request),
    Evict(PathBuf),
}

struct Worker {
    jobs: SyncSender<Job>,
    replies: Receiver<Reply>,
}

/// A worker abandoned past its deadline, and the read it was doing.
struct Late {
    id: FileId,
    /// The path shown, for the log.
    shown: Arc<str>,
    worker: Worker,
}

/// The worker and what it learned about slow files.
pub struct ElfWorker {
    worker: Option<Worker>,
    abandoned: usize,
    slow: HashSet<FileId>,
    /// Abandoned workers, until they answer.
    late: Vec<Late>,
    /// Files whose read answered after its deadline and may be waited for
    /// ([`Reply::waitable`]), and how long the worker took over it.
    answered_late: HashMap<FileId, Duration>,
    dwarf_budget: usize,
    /// How long one file's read is waited for.
    deadline: Duration,
    hooks: Hooks,
}

impl std::fmt::Debug for ElfWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfWorker")
            .field("abandoned", &self.abandoned)
            .field("slow", &self.slow.len())
            .finish_non_exhaustive()
    }
}

impl ElfWorker {
    /// A worker is started on first use; blazesym may hold at most
    /// `dwarf_budget` bytes of parsed DWARF (see [`DwarfBudget`]).
    pub fn new(dwarf_budget: usize) -> Self {
        Self {
            worker: None,
            abandoned: 0,
            slow: HashSet::new(),
            late: Vec::new(),
            answered_late: HashMap::new(),
            dwarf_budget,
            deadline: FILE_DEADLINE,
            hooks: Hooks::from_env(),
        }
    }

    /// Waits `deadline` (not [`FILE_DEADLINE`]) for each file's read.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Takes back the abandoned workers that have answered since: their
    /// files were slow, not stuck, and are read again from now on.
    fn reap_late(&mut self) {
        let mut i = 0;
        while i < self.late.len() {
            match self.late[i].worker.replies.try_recv() {
                Err(mpsc::TryRecvError::Empty) => i += 1,
                answered => {
                    let Late { id, shown, worker } = self.late.swap_remove(i);
                    self.slow.remove(&id);
                    self.abandoned -= 1;
                    match &answered {
                        Ok(reply) => {
                            if reply.waitable {
                                if self.answered_late.len() >= MAX_ANSWERED_LATE {
                                    self.answered_late.clear();
                                }
                                self.answered_late.insert(id, reply.took);
                            }
                            tracing::info!(
                                "the symbols of {shown}, which took over the deadline, were read \
                                 after all in {:.1} s: its frames are named again{}",
                                reply.took.as_secs_f64(),
                                if reply.waitable {
                                    ", and it is waited for longer from now on"
                                } else {
                                    ""
                                }
                            );
                        }
                        Err(_) => tracing::warn!(
                            "the ELF worker reading the symbols of {shown} past the deadline died: \
                             the file is read again by another"
                        ),
                    }
                    // Its thread is alive with a warm cache unless it died.
                    if answered.is_ok() && self.worker.is_none() {
                        self.worker = Some(worker);
                    }
                }
            }
        }
    }

    /// How long file `id` is waited for: the deadline, or for a file whose
    /// read answered late and may be waited for ([`Reply::waitable`]),
    /// twice what the worker took over that read, between the deadline and
    /// [`RECORD_FILE_DEADLINE`].
    pub fn patience(&self, id: &FileId) -> Duration {
        self.answered_late.get(id).map_or(self.deadline, |took| {
            (*took * 2).clamp(self.deadline, RECORD_FILE_DEADLINE.max(self.deadline))
        })
    }

    /// Names `req.offsets` in file `id`, waiting at most its deadline
    /// ([`FILE_DEADLINE`] unless set; see [`Self::patience`]), and calling
    /// `idle` every [`WAIT_SLICE`] meanwhile.
    pub fn symbolize(
        &mut self,
        id: FileId,
        req: Request,
        idle: &mut dyn FnMut(),
    ) -> Result<Reply, Failure> {
        if !self.late.is_empty() {
            self.reap_late();
        }
        if self.slow.contains(&id) {
            return Err(Failure::Timeout);
        }
        let deadline = self.patience(&id);
        let asked = Instant::now();
        let shown = req.shown.clone();
        let worker = self.worker()?;
        if worker.jobs.send(Job::Symbolize(req)).is_err() {
            // The worker died (a panic in blazesym): start another next time.
            self.worker = None;
            return Err(Failure::Timeout);
        }
        let until = asked + deadline;
        let answer = loop {
            let left = until.saturating_duration_since(Instant::now());
            match worker.replies.recv_timeout(left.min(WAIT_SLICE)) {
                Err(RecvTimeoutError::Timeout) if Instant::now() < until => idle(),
                answer => break answer,
            }
        };
        match answer {
            Ok(reply) => Ok(reply),
            Err(RecvTimeoutError::Timeout) => {
                self.slow.insert(id);
                if let Some(worker) = self.worker.take() {
                    self.late.push(Late {
                        id,
                        shown: shown.clone(),
                        worker,
                    });
                }
                self.abandoned += 1;
                if self.abandoned >= MAX_ABANDONED {
                    tracing::error!(
                        "{} ELF reads never returned (files on a stalled filesystem?): \
                         user frames are not named from binaries until one of them answers",
                        self.abandoned
                    );
                } else {
                    tracing::warn!(
                        "reading the symbols of {shown} took over {deadline:?}: \
                         its frames stay module+offset until the read returns"
                    );
                }
                Err(Failure::Timeout)
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.worker = None;
                Err(Failure::Timeout)
            }
        }
    }

    /// Drops blazesym's cached state of `path`, without waiting.
    pub fn evict(&mut self, path: PathBuf) {
        if let Some(w) = &self.worker {
            let _ = w.jobs.try_send(Job::Evict(path));
        }
    }

    fn worker(&mut self) -> Result<&Worker, Failure> {
        if self.abandoned >= MAX_ABANDONED && !self.late.is_empty() {
            self.reap_late();
        }
        if self.abandoned >= MAX_ABANDONED {
            return Err(Failure::Off);
        }
        if self.worker.is_none() {
            let (jobs, job_rx) = mpsc::sync_channel(64);
            let (reply_tx, replies) = mpsc::sync_channel(1);
            let budget = self.dwarf_budget;
            let hooks = self.hooks.clone();
            std::thread::Builder::new()
                .name("emberd-elf".into())
                .spawn(move || run(job_rx, reply_tx, budget, hooks))
                .map_err(|_| Failure::Off)?;
            self.worker = Some(Worker { jobs, replies });
        }
        Ok(self.worker.as_ref().expect("set above"))
    }
}

/// Where a file's names come from.
#[derive(Debug, Clone)]
enum Plan {
    /// blazesym's usual way: DWARF (with inlined frames and lines) when
    /// the file or its debug file has it, else the symbol table.
    Full {
        /// Estimated bytes of the DWARF it parses (0: none).
        dwarf: usize,
        /// The other files blazesym opens to read it: the separate debug
        /// file (by build id or debug link) and the supplementary file its
        /// DWARF refers to (`.gnu_debugaltlink`, written by dwz). blazesym
        /// caches each under its own path with its decompressed DWARF, so
        /// evicting the file alone would keep those for good.
        companions: Vec<PathBuf>,
    },
    /// No DWARF, or the DWARF alone is over the budget: emberd's compact
    /// copy of the symbol table of `symtab` (the separate debug file when
    /// it has one: a stripped library's own table has only its exported
    /// functions) and of the file's `.dynsym` ([`ElfSymbols`]), looked up
    /// by virtual address, as a debug file's segments have no file
    /// contents.
    Symbols {
        symtab: PathBuf,
        /// (file offset, size, virtual address) of the file's loaded segments.
        segments: Vec<(u64, u64, u64)>,
    },
}

/// Plans remembered (per path) before the table is emptied.
const MAX_PLANS: usize = 4096;

/// Byte-bounded bookkeeping of what a cache holds, least recently used
/// dropped first: the sizes by key and their total. The caller holds the
/// data (blazesym's parsed DWARF, emberd's symbol tables) and drops what
/// [`ByteLru::admit`] returns.
#[derive(Debug)]
pub struct ByteLru<K> {
    budget: usize,
    held: HashMap<K, (usize, u64)>,
    total: usize,
    clock: u64,
}

impl<K: std::hash::Hash + Eq + Clone> ByteLru<K> {
    fn new(budget: usize) -> Self {
        Self {
            budget,
            held: HashMap::new(),
            total: 0,
            clock: 0,
        }
    }

    /// Marks `key` used; whether it is held.
    fn touch(&mut self, key: &K) -> bool {
        self.clock += 1;
        match self.held.get_mut(key) {
            Some(h) => {
                h.1 = self.clock;
                true
            }
            None => false,
        }
    }

    /// Makes room for `bytes` of `key` and counts them; returns the keys
    /// dropped to make room. A key already held is only marked used; one of
    /// 0 bytes, or larger than the whole budget, is not counted (and drops
    /// nothing): the caller must not keep it.
    fn admit(&mut self, key: &K, bytes: usize) -> Vec<K> {
        if self.touch(key) || bytes == 0 || bytes > self.budget {
            return Vec::new();
        }
        let mut dropped = Vec::new();
        while self.total + bytes > self.budget {
            let Some(oldest) = self
                .held
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.forget(&oldest);
            dropped.push(oldest);
        }
        self.held.insert(key.clone(), (bytes, self.clock));
        self.total += bytes;
        dropped
    }

    /// Stops counting `key`.
    fn forget(&mut self, key: &K) {
        if let Some((bytes, _)) = self.held.remove(key) {
            self.total -= bytes;
        }
    }

    /// Whether `key` is counted.
    #[cfg(test)]
    fn holds(&self, key: &K) -> bool {
        self.held.contains_key(key)
    }
}

/// The parsed DWARF blazesym holds, by file, within a byte budget.
///
/// Estimated from the files' debug sections decompressed, which blazesym
/// keeps, and the units and lines it parses on top
/// ([`DWARF_HELD_QUARTERS`]). A file whose DWARF fits is parsed after the
/// least recently used others are dropped to make room; one larger than
/// the whole budget is named from its symbol table instead ([`plan`]),
/// logged once.
pub type DwarfBudget = ByteLru<PathBuf>;

fn evict(blaze: &mut blazesym::symbolize::Symbolizer, path: PathBuf) {
    let _ = blaze.evict(&blazesym::symbolize::evict::Evict::Elf(
        blazesym::symbolize::evict::Elf::new(path),
    ));
}

/// Evicts `path` with the other files its plan had blazesym open (the
/// DWARF's companions); forgets the plan.
fn evict_planned(
    blaze: &mut blazesym::symbolize::Symbolizer,
    plans: &mut HashMap<PathBuf, Plan>,
    path: PathBuf,
) {
    if let Some(Plan::Full { companions, .. }) = plans.remove(&path) {
        for p in companions {
            evict(blaze, p);
        }
    }
    evict(blaze, path);
}

/// What blazesym holds of a file's DWARF, per byte of its debug sections
/// decompressed, in quarters: the sections themselves, and the units and
/// line programs it parses from them on top. Measured with emberd's malloc
/// in-use profile on the soak's host: for ld.so's debug file 1.03 MiB of
/// sections, 0.80 MiB of units and 0.45 MiB of lines, 2.2 times the
/// sections. The parsed part grows with the addresses named, so this is an
/// estimate of a file in use, not a bound.
const DWARF_HELD_QUARTERS: usize = 9;

/// How to name the offsets of `path` within `budget` bytes of DWARF;
/// `told` holds the files already logged as over the budget (the plan is
/// made again when blazesym's idle eviction has forgotten it).
fn plan(path: &Path, budget: usize, told: &mut HashSet<PathBuf>) -> Plan {
    let Some(mut own) = ElfInfo::read(path) else {
        // Not readable as ELF here: blazesym says why.
        return Plan::Full {
            dwarf: 0,
            companions: Vec::new(),
        };
    };
    let debug = own
        .debug_file(path)
        .and_then(|p| ElfInfo::read(&p).map(|info| (p, info)));
    let (mut dwarf, holder, holder_path) = match &debug {
        Some((p, info)) if info.dwarf_bytes > 0 => (info.dwarf_bytes, info, p.as_path()),
        _ => (own.dwarf_bytes, &own, path),
    };
    // dwz moved DWARF shared by a package's files into one supplementary
    // file, which blazesym loads whole with the DWARF that refers to it.
    let sup = holder
        .supplementary_file(holder_path)
        .and_then(|p| ElfInfo::read(&p).map(|info| (p, info.dwarf_bytes)));
    dwarf += sup.as_ref().map_or(0, |(_, bytes)| *bytes);
    let dwarf = dwarf.saturating_mul(DWARF_HELD_QUARTERS) / 4;
    let symtab = match &debug {
        Some((p, info)) if info.has_symtab => p.clone(),
        _ => path.to_path_buf(),
    };
    if dwarf == 0 {
        return Plan::Symbols {
            symtab,
            segments: std::mem::take(&mut own.segments),
        };
    }
    if dwarf <= budget {
        let companions = debug.map(|(p, _)| p).into_iter().chain(sup.map(|(p, _)| p));
        return Plan::Full {
            dwarf,
            companions: companions.collect(),
        };
    }
    if told.len() >= MAX_PLANS {
        told.clear();
    }
    if told.insert(path.to_path_buf()) {
        tracing::info!(
            "the DWARF of {} (about {} MiB once parsed) is over dwarf_budget_mib ({} MiB): \
             its frames are named from its symbol table, without inlined frames or source lines; \
             raise dwarf_budget_mib to have them",
            path.display(),
            dwarf.div_ceil(1 << 20),
            budget >> 20
        );
    }
    Plan::Symbols {
        symtab,
        segments: own.segments,
    }
}

/// What [`plan`] needs of an ELF file: read from its headers only.
struct ElfInfo {
    dwarf_bytes: usize,
    has_symtab: bool,
    build_id: Option<Vec<u8>>,
    debuglink: Option<String>,
    /// `.gnu_debugaltlink`: the supplementary file's name and build id.
    altlink: Option<(PathBuf, Vec<u8>)>,
    segments: Vec<(u64, u64, u64)>,
}

impl ElfInfo {
    fn read(path: &Path) -> Option<Self> {
        use object::{Object, ObjectSection, ObjectSegment};
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache).ok()?;
        let mut dwarf_bytes = 0u64;
        let mut has_symtab = false;
        for s in elf.sections() {
            let Ok(name) = s.name() else { continue };
            if name.starts_with(".debug_") || name.starts_with(".zdebug_") {
                dwarf_bytes += s
                    .compressed_file_range()
                    .map_or(s.size(), |r| r.uncompressed_size);
            }
            has_symtab |= name == ".symtab";
        }
        Some(Self {
            dwarf_bytes: dwarf_bytes as usize,
            has_symtab,
            build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
            debuglink: elf
                .gnu_debuglink()
                .ok()
                .flatten()
                .map(|(name, _)| String::from_utf8_lossy(name).into_owned()),
            altlink: elf.gnu_debugaltlink().ok().flatten().map(|(name, id)| {
                use std::os::unix::ffi::OsStrExt;
                (
                    PathBuf::from(std::ffi::OsStr::from_bytes(name)),
                    id.to_vec(),
                )
            }),
            segments: elf
                .segments()
                .map(|g| {
                    let (off, size) = g.file_range();
                    (off, size, g.address())
                })
                .collect(),
        })
    }

    /// The supplementary file of `.gnu_debugaltlink` of `path`: by its
    /// build id under the debug directories, or at the path written (dwz
    /// writes an absolute one) if that is under them or beside `path` (no
    /// symlink, `path`'s owner or root), and only if its build id is the
    /// one written. The file names a path any user can write: anywhere
    /// else it is not followed.
    fn supplementary_file(&self, path: &Path) -> Option<PathBuf> {
        let (name, id) = self.altlink.as_ref()?;
        let by_id = (id.len() >= 8).then(|| crate::unwind::table::debug_file_path(id));
        let plain = name.is_absolute()
            && !name
                .components()
                .any(|c| c == std::path::Component::ParentDir);
        let written = plain
            && (DEBUG_DIRS.iter().any(|d| name.starts_with(d))
                || (name.parent() == path.parent() && trusted_beside(name, owner_of(path))));
        by_id
            .into_iter()
            .filter(|p| p.is_file())
            .chain(written.then(|| name.clone()))
            .find(|p| ElfInfo::read(p).is_some_and(|i| i.build_id.as_deref() == Some(&id[..])))
    }

    /// The separate debug file, as gdb searches for it: by build id under
    /// /usr/lib/debug, then by debug link (a plain file name) beside the
    /// binary, in its `.debug` directory, and under the debug directories.
    /// A file beside the binary counts only if it is no symlink and has the
    /// binary's owner (or root): a user's binary cannot have another
    /// user's file read for its names.
    fn debug_file(&self, path: &Path) -> Option<PathBuf> {
        let mut candidates = Vec::new();
        // The unwinder looks there too, for a stripped file's .eh_frame.
        if let Some(id) = self.build_id.as_deref().filter(|id| id.len() > 1) {
            candidates.push((crate::unwind::table::debug_file_path(id), false));
        }
        let plain = |l: &str| !l.is_empty() && !l.contains('/') && l != "." && l != "..";
        if let Some(link) = self.debuglink.as_deref().filter(|l| plain(l)) {
            let dir = path.parent().unwrap_or(Path::new("/"));
            candidates.push((dir.join(link), true));
            candidates.push((dir.join(".debug").join(link), true));
            for d in DEBUG_DIRS {
                candidates.push((
                    Path::new(d)
                        .join(dir.strip_prefix("/").unwrap_or(dir))
                        .join(link),
                    false,
                ));
                candidates.push((Path::new(d).join(link), false));
            }
        }
        let owner = owner_of(path);
        candidates
            .into_iter()
            .find(|(c, beside)| {
                c != path
                    && if *beside {
                        trusted_beside(c, owner)
                    } else {
                        c.is_file()
                    }
            })
            .map(|(c, _)| c)
    }
}

/// The owner of `path`.
fn owner_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.uid())
}

/// Whether a debug file found beside a binary may name its frames: a
/// regular file (no symlink to someone else's) of the binary's owner or
/// root.
fn trusted_beside(c: &Path, owner: Option<u32>) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(c)
        .is_ok_and(|m| m.file_type().is_file() && (m.uid() == 0 || Some(m.uid()) == owner))
}

/// Where separate debug files live; only root writes there.
const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// Bytes of compact symbol tables ([`ElfSymbols`]) kept, all files
/// together. Tables are small (emberd's own 240 KB, bash's or python3's
/// 25 KB) and cost milliseconds to read again, so unlike parsed DWARF they
/// outlive a file's idle time; the least recently used go past this.
pub const SYMBOL_TABLE_BUDGET: usize = 2 << 20;

/// Files remembered as having no table, or one too large to copy, before
/// either set is emptied.
const MAX_UNREADABLE: usize = 4096;

/// The compact symbol tables read, by file identity (so a file replaced
/// at its path is read again, and one mapped in another mount namespace is
/// read once), least recently used dropped past [`SYMBOL_TABLE_BUDGET`].
#[derive(Debug)]
struct SymbolTables {
    held: HashMap<FileId, ElfSymbols>,
    lru: ByteLru<FileId>,
    /// Files with no table to read (no function symbols, not ELF):
    /// blazesym says why, and they are not read again at every request.
    unreadable: HashSet<FileId>,
    /// Files whose tables are too large to copy (over
    /// [`symtab::MAX_READ_BYTES`], or a compact table over the whole
    /// budget): each request is named by a pass over their tables.
    large: HashSet<FileId>,
    /// Inflates names for every table.
    reader: NameReader,
    /// Reads the large files' tables.
    scanner: Scanner,
}

impl SymbolTables {
    /// No tables yet; at most `budget` bytes of them kept.
    fn new(budget: usize) -> Self {
        Self {
            held: HashMap::new(),
            lru: ByteLru::new(budget),
            unreadable: HashSet::new(),
            large: HashSet::new(),
            reader: NameReader::default(),
            scanner: Scanner::default(),
        }
    }

    /// Names `offsets` of file `id` by its table, read from `symtab` and
    /// `path` if not held (virtual addresses by `segments`); `None` if the
    /// file has no table to read (remembered: blazesym says why, rather
    /// than the file being read again at every request). A file whose
    /// tables are too large to copy, or whose table is larger than the
    /// whole budget, is remembered and named by a pass over its tables at
    /// each request ([`Scanner`]): blazesym would keep the pages of the
    /// mapped tables resident. A file that could not be opened is tried
    /// again next time.
    fn name(
        &mut self,
        id: Option<FileId>,
        symtab: &Path,
        path: &Path,
        segments: &[(u64, u64, u64)],
        offsets: &[u64],
        module: &Arc<Module>,
    ) -> Option<Vec<Option<Arc<[Frame]>>>> {
        let id = id?;
        if self.unreadable.contains(&id) {
            return None;
        }
        if self.large.contains(&id) {
            return self.scan(symtab, path, segments, offsets, module);
        }
        let table: &ElfSymbols = if self.lru.touch(&id) {
            self.held.get(&id)?
        } else {
            let table = match ElfSymbols::read(symtab, path, symtab::MAX_READ_BYTES) {
                Ok(symtab::Read::Table(table)) if table.bytes() <= self.lru.budget => table,
                Ok(symtab::Read::Table(_) | symtab::Read::TooLarge) => {
                    remember(&mut self.large, id);
                    return self.scan(symtab, path, segments, offsets, module);
                }
                Ok(symtab::Read::None) => {
                    remember(&mut self.unreadable, id);
                    return None;
                }
                Err(e) => {
                    log_unread(path, symtab, &e);
                    return None;
                }
            };
            for old in self.lru.admit(&id, table.bytes()) {
                self.held.remove(&old);
            }
            self.held.entry(id).insert_entry(table).into_mut()
        };
        Some(name_all(table, segments, offsets, module, &mut self.reader))
    }

    /// Names `offsets` of a file too large to copy by a pass over its
    /// tables; `None` (blazesym names it) if it has none to read, or if
    /// reading failed.
    fn scan(
        &mut self,
        symtab: &Path,
        path: &Path,
        segments: &[(u64, u64, u64)],
        offsets: &[u64],
        module: &Arc<Module>,
    ) -> Option<Vec<Option<Arc<[Frame]>>>> {
        let virt: Vec<Option<u64>> = offsets.iter().map(|&o| virt_offset(segments, o)).collect();
        let addrs: Vec<u64> = virt.iter().flatten().copied().collect();
        let names = match self.scanner.names(symtab, path, &addrs) {
            Ok(names) => names?,
            Err(e) => {
                log_unread(path, symtab, &e);
                return None;
            }
        };
        let mut names = names.into_iter();
        Some(
            virt.iter()
                .map(|v| {
                    // Only mapped offsets were asked for.
                    v.as_ref()?;
                    let name = names.next()??;
                    Some(symbol_frames(&name, module))
                })
                .collect(),
        )
    }

    /// Bytes of the tables held.
    fn bytes(&self) -> usize {
        self.lru.total
    }
}

/// Logs why `path`'s symbol tables (or those of its debug file `symtab`)
/// could not be read: at debug level, because the file is tried again at the
/// next request and blazesym names it meanwhile.
fn log_unread(path: &Path, symtab: &Path, e: &std::io::Error) {
    tracing::debug!(
        "reading the symbol tables of {} (and {}): {e}",
        path.display(),
        symtab.display()
    );
}

/// Adds `id` to a bounded set of remembered files (emptied when full).
fn remember(set: &mut HashSet<FileId>, id: FileId) {
    if set.len() >= MAX_UNREADABLE {
        set.clear();
    }
    set.insert(id);
}

/// Names `offsets` (file offsets; virtual addresses by `segments`) from
/// `table`.
fn name_all(
    table: &ElfSymbols,
    segments: &[(u64, u64, u64)],
    offsets: &[u64],
    module: &Arc<Module>,
    reader: &mut NameReader,
) -> Vec<Option<Arc<[Frame]>>> {
    offsets
        .iter()
        .map(|&o| {
            let name = table.name(virt_offset(segments, o)?, reader)?;
            Some(symbol_frames(&name, module))
        })
        .collect()
}

/// The identity of the file a mapping maps.
fn file_id(m: &Mapping) -> Option<FileId> {
    match &m.kind {
        MappingKind::File { id, .. } => Some(*id),
        _ => None,
    }
}

/// The virtual address of file offset `off` by the file's segments.
fn virt_offset(segments: &[(u64, u64, u64)], off: u64) -> Option<u64> {
    segments
        .iter()
        .find(|&&(start, size, _)| start <= off && off < start + size)
        .map(|&(start, _, vaddr)| off - start + vaddr)
}

/// What the symbol-table reader makes of one file, for `crate::fuzzing`.
pub struct FuzzNames {
    /// Names by the compact table ([`ElfSymbols`]), `None` if it read none.
    pub table: Option<Vec<Option<String>>>,
    /// Names by a pass over the tables ([`Scanner`]).
    pub scan: Option<Vec<Option<String>>>,
    /// Heap bytes the compact table holds.
    pub table_bytes: usize,
}

/// Names file `offsets` of the ELF file at `path` as a request planned
/// [`Plan::Symbols`] does, both by the compact table and by the scan:
/// the fuzz targets reach the reader through this (its parts are private).
pub fn fuzz_names(path: &Path, offsets: &[u64]) -> FuzzNames {
    // The plan reads the headers, the debug link and the alternate link.
    let _ = plan(path, 0, &mut HashSet::new());
    let segments = ElfInfo::read(path).map(|i| i.segments).unwrap_or_default();
    let virt: Vec<u64> = offsets
        .iter()
        .filter_map(|&o| virt_offset(&segments, o))
        .collect();
    let mut reader = NameReader::default();
    let (table, table_bytes) = match ElfSymbols::read(path, path, symtab::MAX_READ_BYTES) {
        Ok(symtab::Read::Table(t)) => (
            Some(virt.iter().map(|&a| t.name(a, &mut reader)).collect()),
            t.bytes(),
        ),
        _ => (None, 0),
    };
    let scan = Scanner::default().names(path, path, &virt).ok().flatten();
    FuzzNames {
        table,
        scan,
        table_bytes,
    }
}

/// Whether a file slow to read may be waited for past [`FILE_DEADLINE`]:
/// root owns it, and it is not on FUSE, where a user's daemon (mounted
/// with `allow_other`, or root could not read it at all) says who owns a
/// file and takes as long as it likes over each read. Asked on the worker:
/// a stat can block there too. A `/proc/PID/map_files` path is opened to
/// the file mapped.
fn waitable(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    file.metadata().is_ok_and(|m| m.uid() == 0)
        && nix::sys::statfs::fstatfs(&file)
            .is_ok_and(|s| s.filesystem_type() != nix::sys::statfs::FUSE_SUPER_MAGIC)
}

/// The worker's test hooks.
#[derive(Debug, Clone)]
struct Hooks {
    /// `EMBERD_TEST_STALL_ELF`: a read of a path containing it never
    /// returns.
    stall: Option<String>,
    /// `EMBERD_TEST_SLOW_ELF`: each worker's first read of a path
    /// containing it takes `slow_for`.
    slow: Option<String>,
    /// `EMBERD_TEST_SLOW_ELF_MS`, 3 s if unset: past `/readyz`'s 5 s,
    /// the wait for such a read beats the collector's heartbeat.
    slow_for: Duration,
}

impl Hooks {
    fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Self {
            stall: var("EMBERD_TEST_STALL_ELF"),
            slow: var("EMBERD_TEST_SLOW_ELF"),
            slow_for: Duration::from_millis(
                var("EMBERD_TEST_SLOW_ELF_MS")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(3000),
            ),
        }
    }
}

fn run(jobs: Receiver<Job>, replies: SyncSender<Reply>, dwarf_budget: usize, hooks: Hooks) {
    let mut blaze = blazesym::symbolize::Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_demangling(true)
        .build();
    let Hooks {
        stall,
        slow,
        slow_for,
    } = hooks;
    let mut slept: HashSet<Arc<str>> = HashSet::new();
    let mut budget = DwarfBudget::new(dwarf_budget);
    let mut plans: HashMap<PathBuf, Plan> = HashMap::new();
    let mut tables = SymbolTables::new(SYMBOL_TABLE_BUDGET);
    let mut told = HashSet::new();
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Evict(path) => {
                budget.forget(&path);
                evict_planned(&mut blaze, &mut plans, path);
            }
            Job::Symbolize(req) => {
                let started = Instant::now();
                // Test hook: behave as a read from a FUSE file whose daemon
                // never answers.
                if stall.as_deref().is_some_and(|s| req.shown.contains(s)) {
                    std::thread::sleep(Duration::from_secs(24 * 3600));
                }
                // Test hook: a file whose first read by each worker takes
                // 3 s or as set (a cold cache on a slow disk or an emulated machine,
                // as libc's symbols under TCG), then answers as any other.
                // Per worker, as a cold cache is: the worker that takes
                // over reads it as slowly.
                if slow.as_deref().is_some_and(|s| req.shown.contains(s))
                    && slept.insert(req.shown.clone())
                {
                    tracing::info!(
                        "test hook EMBERD_TEST_SLOW_ELF: this worker's first read of {} takes {:?}",
                        req.shown,
                        slow_for
                    );
                    std::thread::sleep(slow_for);
                }
                // Even a stat can block on such a filesystem: resolve here.
                let (path, scratch) = elf_path(req.pid, &req.mapping);
                // Before the read: a short-lived process's map_files path
                // is gone by its end (ld.so under TCG, every file there
                // read through one).
                let waitable = waitable(&path);
                let module = req.module.clone().unwrap_or_else(|| {
                    let build_id = blazesym::helper::read_elf_build_id(&path)
                        .ok()
                        .flatten()
                        .map(|b| {
                            Arc::from(b.iter().map(|x| format!("{x:02x}")).collect::<String>())
                        });
                    Arc::new(Module {
                        path: req.shown.clone(),
                        build_id,
                    })
                });
                if plans.len() >= MAX_PLANS {
                    // Without its plan a file's debug file could no longer be
                    // evicted with it: drop them now (a file still in use
                    // keeps its own reference and re-plans at its next miss).
                    for p in plans.keys().cloned().collect::<Vec<_>>() {
                        budget.forget(&p);
                        evict_planned(&mut blaze, &mut plans, p);
                    }
                }
                let plan = plans
                    .entry(path.clone())
                    .or_insert_with(|| plan(&path, dwarf_budget, &mut told))
                    .clone();
                let t0 = std::time::Instant::now();
                let named = |r: Vec<Symbolized<'_>>| -> Vec<Option<Arc<[Frame]>>> {
                    r.iter()
                        .map(|s| match s {
                            Symbolized::Sym(sym) => Some(frames_of_sym(sym, &module)),
                            _ => None,
                        })
                        .collect()
                };
                let frames = match &plan {
                    Plan::Full { dwarf, .. } => {
                        for p in budget.admit(&path, *dwarf) {
                            evict_planned(&mut blaze, &mut plans, p);
                        }
                        let src = Source::Elf(Elf::new(path.clone()));
                        blaze
                            .symbolize(&src, Input::FileOffset(&req.offsets))
                            .map(named)
                    }
                    Plan::Symbols { symtab, segments } => {
                        match tables.name(
                            file_id(&req.mapping),
                            symtab,
                            &path,
                            segments,
                            &req.offsets,
                            &module,
                        ) {
                            Some(frames) => Ok(frames),
                            // No table to read (no function symbols, not ELF,
                            // or too large to copy): blazesym names the file
                            // from its mapping, or says why, without DWARF
                            // (absent, or over the budget).
                            None => blaze
                                .symbolize(
                                    &Source::Elf(Elf {
                                        debug_syms: false,
                                        ..Elf::new(path.clone())
                                    }),
                                    Input::FileOffset(&req.offsets),
                                )
                                .map(named),
                        }
                    }
                }
                .map_err(|e| e.to_string());
                tracing::debug!(
                    "named {} offsets of {} in {:?}",
                    req.offsets.len(),
                    path.display(),
                    t0.elapsed()
                );
                if scratch {
                    budget.forget(&path);
                    evict_planned(&mut blaze, &mut plans, path.clone());
                }
                let reply = Reply {
                    waitable,
                    path,
                    scratch,
                    module,
                    frames,
                    dwarf_bytes: budget.total,
                    symtab_bytes: tables.bytes(),
                    took: started.elapsed(),
                };
                if replies.send(reply).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::procmaps::{MappingKind, ProcessMaps};

    /// Files are admitted least recently used out, and a file is counted
    /// once however often it is named.
    #[test]
    fn dwarf_budget_drops_least_recently_used() {
        let mut b = DwarfBudget::new(10);
        let p = |s: &str| PathBuf::from(s);
        assert!(b.admit(&p("/a"), 4).is_empty());
        assert!(b.admit(&p("/b"), 4).is_empty());
        assert!(b.admit(&p("/a"), 4).is_empty(), "already held");
        assert_eq!(b.total, 8);
        assert_eq!(b.admit(&p("/c"), 4), [p("/b")]);
        assert_eq!(b.total, 8);
        b.forget(&p("/a"));
        assert_eq!(b.total, 4);
        assert!(b.admit(&p("/none"), 0).is_empty());
        assert_eq!(b.total, 4);
        // Larger than the whole budget: not counted, nothing dropped.
        assert!(b.admit(&p("/huge"), 11).is_empty());
        assert!(!b.holds(&p("/huge")));
        assert_eq!(b.total, 4);
    }

    /// A table larger than the whole budget is not kept: the file is named
    /// by a pass over its tables, as the table would name it. A file with
    /// no table is remembered, not read at every request; a file that
    /// could not be opened is tried again.
    #[test]
    fn symbol_tables_keep_within_their_budget() {
        let exe = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
        let id = FileId::of(&std::fs::metadata(&exe).expect("stat of this binary"));
        let data = std::fs::read(&exe).expect("reading this binary");
        let func = {
            use object::{Object, ObjectSymbol, SymbolKind};
            let elf = object::File::parse(&*data).expect("ELF");
            elf.symbols()
                .find(|s| s.kind() == SymbolKind::Text && s.size() > 0)
                .map(|s| s.address())
                .expect("a function symbol")
        };
        let module = Arc::new(Module {
            path: Arc::from("test"),
            build_id: None,
        });
        // Virtual addresses as offsets.
        let identity = [(0, u64::MAX, 0)];
        let name = |tables: &mut SymbolTables| {
            tables.name(Some(id), &exe, &exe, &identity, &[func], &module)
        };

        let mut small = SymbolTables::new(1024);
        let scanned = name(&mut small).expect("named by a pass over the tables")[0].clone();
        assert_eq!(
            (small.bytes(), small.held.len()),
            (0, 0),
            "kept over the budget"
        );
        assert!(
            small.large.contains(&id) && !small.unreadable.contains(&id),
            "not remembered as too large to copy"
        );
        assert!(name(&mut small).is_some() && small.held.is_empty());

        let mut roomy = SymbolTables::new(64 << 20);
        let held = name(&mut roomy).expect("named")[0].clone();
        assert!(held.is_some());
        assert!(roomy.bytes() > 1024 && roomy.held.contains_key(&id));
        assert_eq!(
            scanned, held,
            "the pass over the tables names as the compact table"
        );

        let text = std::env::temp_dir().join(format!("emberd-not-elf-{}", std::process::id()));
        std::fs::write(&text, "not an ELF file").expect("writing a scratch file");
        let text_id = FileId::of(&std::fs::metadata(&text).expect("stat"));
        let none = roomy.name(Some(text_id), &text, &text, &identity, &[0], &module);
        std::fs::remove_file(&text).expect("removing the scratch file");
        assert!(none.is_none());
        assert!(roomy.unreadable.contains(&text_id));

        // Gone (with its process, say): nothing to remember.
        let mut fresh = SymbolTables::new(64 << 20);
        assert!(
            fresh
                .name(Some(text_id), &text, &text, &identity, &[0], &module)
                .is_none()
        );
        assert!(
            !fresh.unreadable.contains(&text_id),
            "a file that could not be opened is remembered as having no table"
        );
    }

    /// A file slow to read for every cold worker (the slow-file hook: each
    /// worker's first read of it takes three times the deadline) misses its
    /// deadline, and once that read has answered it is waited for by the
    /// worker that took over, as cold, if root owns it; a file of a user's
    /// is not waited for past the deadline. The deadline is the daemon's
    /// own (1 s): at 200 ms, a fresh clone's unit run, right after the
    /// build, once saw the cold worker that took over miss it reading
    /// `/usr/bin/false`, the file that is not slow. Root's file and the
    /// user's each have their own worker, side by side.
    #[test]
    fn a_file_that_answered_late_is_waited_for_if_root_owns_it() {
        let dir = std::env::temp_dir().join(format!("emberd-slow-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a scratch directory");
        let roots = dir.join("roots");
        let users = dir.join("users");
        for f in [&roots, &users] {
            std::fs::copy("/usr/bin/true", f).expect("copying /usr/bin/true");
        }
        std::os::unix::fs::chown(&users, Some(65534), Some(65534))
            .expect("chown to nobody: this test runs as root");
        let deadline = FILE_DEADLINE;
        let slow_for = deadline * 3;
        let name = |worker: &mut ElfWorker, path: &Path| {
            let (id, req) = request(path, 0x100);
            (id, worker.symbolize(id, req, &mut || {}).map(|_| ()))
        };
        let one = |path: &Path, waited: bool| {
            let mut worker = ElfWorker::new(8 << 20).with_deadline(deadline);
            worker.hooks.slow = Some(dir.display().to_string());
            worker.hooks.slow_for = slow_for;
            let (id, first) = name(&mut worker, path);
            assert_eq!(
                first,
                Err(Failure::Timeout),
                "{}: the first read",
                path.display()
            );
            // Another file read meanwhile: a fresh worker takes over.
            let (_, other) = name(&mut worker, Path::new("/usr/bin/false"));
            assert_eq!(other, Ok(()), "another file, by the worker that took over");
            // The slow read answers (its 3 s from the first read's start).
            std::thread::sleep(slow_for - deadline + Duration::from_millis(500));
            let (_, again) = name(&mut worker, path);
            if waited {
                assert_eq!(again, Ok(()), "root's file, once its late read answered");
                assert!(worker.patience(&id) >= slow_for * 2);
            } else {
                assert_eq!(
                    again,
                    Err(Failure::Timeout),
                    "a user's file keeps the deadline"
                );
                assert_eq!(worker.patience(&id), deadline);
            }
        };
        std::thread::scope(|s| {
            let user = s.spawn(|| one(&users, false));
            one(&roots, true);
            user.join().expect("the user's file's checks");
        });
        std::fs::remove_dir_all(&dir).expect("removing the scratch directory");
    }

    /// Whether this process maps `path` (blazesym maps the files it reads).
    fn mapped(path: &Path) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("reading /proc/self/maps");
        let shown = path.display().to_string();
        maps.lines().any(|l| l.ends_with(&shown))
    }

    /// A request to name `offset` of the file at `path`, as mapped by this
    /// process.
    fn request(path: &Path, offset: u64) -> (FileId, Request) {
        let md = std::fs::metadata(path).expect("stat of the file to name");
        let id = FileId::of(&md);
        let req = Request {
            pid: Pid(std::process::id()),
            mapping: Mapping {
                start: 0x1000,
                end: 0x1000 + md.len(),
                offset: 0,
                kind: MappingKind::File {
                    id,
                    path: path.to_path_buf(),
                },
            },
            shown: Arc::from(path.display().to_string()),
            offsets: vec![offset],
            module: None,
        };
        (id, req)
    }

    /// Evicts `path` and waits until the worker has done it: jobs run in
    /// order, so a reply to a later request (of the test binary itself,
    /// which has no debug file) comes after.
    fn evict_and_wait(worker: &mut ElfWorker, path: &Path) {
        worker.evict(path.to_path_buf());
        let exe = std::env::current_exe().expect("own executable");
        let (id, req) = request(&exe, 0x100);
        worker
            .symbolize(id, req, &mut || {})
            .expect("naming an own address");
    }

    /// The companions (debug and supplementary files) a plan has blazesym
    /// open, or why there are none.
    fn companions(path: &Path) -> Vec<PathBuf> {
        match plan(path, 8 << 20, &mut HashSet::new()) {
            Plan::Full { companions, .. } => companions,
            other => panic!("{} planned as {other:?}", path.display()),
        }
    }

    /// A file named from its separate debug file's DWARF lets that debug
    /// file go when it is evicted: blazesym caches the debug file under its
    /// own path, and its decompressed DWARF (2.4 MiB for libm) was kept for
    /// good after the file itself was evicted.
    #[test]
    fn evicting_a_file_drops_its_debug_file() {
        let maps = ProcessMaps::read(Pid(std::process::id())).expect("reading own maps");
        let ld = maps
            .mappings()
            .iter()
            .find(|m| m.module_name().starts_with("ld-linux"))
            .expect("this test process maps ld.so");
        let MappingKind::File { path, .. } = &ld.kind else {
            panic!("ld.so mapped as {ld:?}");
        };
        let Some(debug) = companions(path).first().cloned() else {
            panic!(
                "{} has no separate debug file: this test needs Debian's libc6-dbg \
                 (scripts/setup installs it)",
                path.display()
            );
        };
        let mut worker = ElfWorker::new(8 << 20);
        let (id, req) = request(path, ld.offset + 0x100);
        let reply = worker
            .symbolize(id, req, &mut || {})
            .expect("naming an ld.so address");
        assert!(reply.frames.is_ok(), "{:?}", reply.frames);
        assert!(reply.dwarf_bytes > 0, "ld.so's DWARF is counted");
        assert!(mapped(&debug), "{} read for ld.so's DWARF", debug.display());
        evict_and_wait(&mut worker, path);
        assert!(
            !mapped(&debug),
            "{} is still mapped after ld.so was evicted",
            debug.display()
        );
    }

    /// DWARF that dwz moved into a supplementary file is named, counted in
    /// the DWARF budget, and let go with the file that refers to it.
    #[test]
    fn evicting_a_file_drops_its_dwz_supplementary_file() {
        use object::{Object, ObjectSymbol};
        let d = &std::env::temp_dir().join(format!("emberd-dwz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).expect("creating a temporary directory");
        std::fs::write(
            d.join("common.h"),
            "struct record { long id; double weight; const char *name; struct record *next; };\n\
             static inline long total(const struct record *r) \
             { long t = 0; for (; r; r = r->next) t += r->id; return t; }\n",
        )
        .unwrap();
        for (f, k) in [("a", 3), ("b", 5)] {
            std::fs::write(
                d.join(format!("{f}.c")),
                format!(
                    "#include <stdio.h>\n#include \"common.h\"\n\
                     __attribute__((noinline)) long work_{f}(struct record *r) {{ return total(r) * {k}; }}\n\
                     int main(int argc, char **argv) {{ struct record r = {{ argc, 1.0, argv[0], 0 }}; \
                     printf(\"%ld\\n\", work_{f}(&r)); return 0; }}\n"
                ),
            )
            .unwrap();
            let out = std::process::Command::new("gcc")
                .args(["-O2", "-g", "-o", f, &format!("{f}.c")])
                .current_dir(d)
                .output()
                .expect("running gcc (scripts/setup installs it)");
            assert!(
                out.status.success(),
                "gcc: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let sup = d.join("common.debug");
        let out = std::process::Command::new("dwz")
            .arg("-m")
            .arg(&sup)
            .arg("-M")
            .arg(&sup)
            .args(["a", "b"])
            .current_dir(d)
            .output()
            .expect("running dwz: this test needs it (scripts/setup installs it)");
        assert!(
            out.status.success(),
            "dwz: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let a = d.join("a");
        assert_eq!(
            companions(&a),
            std::slice::from_ref(&sup),
            "a's DWARF refers to dwz's file"
        );
        let data = std::fs::read(&a).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let work = elf
            .symbols()
            .find(|s| s.name() == Ok("work_a"))
            .expect("work_a in a's symbol table")
            .address();
        let info = ElfInfo::read(&a).unwrap();
        let (start, _, vaddr) = *info
            .segments
            .iter()
            .find(|&&(off, size, vaddr)| vaddr <= work && work < vaddr + size && off <= vaddr)
            .expect("work_a in a loaded segment");
        let mut worker = ElfWorker::new(8 << 20);
        let (id, req) = request(&a, work - vaddr + start);
        let reply = worker
            .symbolize(id, req, &mut || {})
            .expect("naming work_a");
        let frames = reply.frames.expect("a read");
        let frame = frames[0].as_ref().expect("work_a named");
        assert!(frame.iter().any(|f| &*f.name == "work_a"), "{frame:?}");
        assert!(mapped(&sup), "dwz's file read for a's DWARF");
        evict_and_wait(&mut worker, &a);
        assert!(!mapped(&sup), "dwz's file still mapped after a was evicted");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn file_offsets_become_virtual_addresses_by_segment() {
        let segs = [(0, 0x1000, 0), (0x1000, 0x2000, 0x3000)];
        assert_eq!(virt_offset(&segs, 0x10), Some(0x10));
        assert_eq!(virt_offset(&segs, 0x1010), Some(0x3010));
        assert_eq!(virt_offset(&segs, 0x5000), None);
    }
}
