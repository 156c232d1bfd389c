//! Unwind: the tables the BPF unwinder (`bpf/unwind.h`) walks user stacks
//! with.
//!
//! For every executable mapping of a profiled process this stage finds the
//! file's table (compiled once per file by [`table`], off the sampling path
//! on a builder thread), stores its rows once in the row array the BPF
//! programs share (`unwind_rows`, mmapped here), and writes the process's
//! mappings with the rows each one uses to `proc_unwind`. A file is known by
//! device, inode and mtime, and its table is also shared by build id, so
//! libc is compiled and stored once per host however many processes map it.
//!
//! Memory: the row array is sized by the table budget (4 bytes a row, the
//! form [`packed`] describes); no file's table takes more than
//! [`defaults::FILE_SHARE`] of it. When a table needs room, tables no live
//! process maps go first (used longest ago first), then, for a table a
//! sampled process needs, tables whose processes have not been sampled for
//! [`defaults::COLD`]; a table in use by processes sampled lately is never
//! taken for another. A table that found no room says so in its stacks'
//! marker (`[unwind error: table budget full: FILE]`) and is built again
//! once room can be made for it. Idle tables go after
//! [`defaults::IDLE_TABLE`]. Files larger than [`defaults::MAX_FILE_BYTES`]
//! are not read.

mod accounts;
pub mod metrics;
pub mod packed;
mod queue;
pub mod table;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use procfs::process::{MMapPath, Process};

use crate::collect::UnwindMaps;
use crate::runtime::{CodeRange, Finding, Mapped, Runtime};
use crate::shared::Pid;
use crate::shared::elf::{self, ElfHeader};
use crate::shared::reads::{ReadMeter, ReadStats};
use accounts::BpfAccounts;
use queue::{BuildJob, JobQueue};
use table::{ElfInfo, TableSource};

/// Defaults and fixed bounds of the unwind stage.
pub mod defaults {
    use std::time::Duration;

    pub use crate::collect::defaults::{
        MAX_PROCESSES, PYTHON_CODE_ENTRIES, TABLE_BUDGET_BYTES, table_budget_bytes,
    };
    /// Files larger than this are not read for unwind tables.
    pub const MAX_FILE_BYTES: u64 = 1 << 30;
    /// The most of one file's sections (CFI, notes, section names) read
    /// for its table: a file claiming more is refused (a compressed
    /// section's inflated size has its own cap,
    /// [`table::MAX_DECOMPRESSED_BYTES`]). The largest CFI
    /// measured here, node's `.eh_frame` with its header, is 3.3 MiB
    /// (libjvm 1.8 MiB, chromium 0.5 MiB).
    pub const MAX_CFI_BYTES: u64 = 64 << 20;
    /// A table no live process maps is evicted after this long.
    pub const IDLE_TABLE: Duration = Duration::from_secs(600);
    /// The most of the row budget one file's table may take: a quarter.
    /// The largest table measured here, rustc's `libLLVM.so` (1.44 million
    /// rows, 5.8 MiB packed), is 18% of the default budget.
    pub const FILE_SHARE: u32 = 4;
    /// A table whose processes have not been sampled for this long may give
    /// its rows to a table a sampled process needs (it is built again when
    /// its processes are sampled again).
    pub const COLD: Duration = Duration::from_secs(30);
    /// How often tables that found no room are looked at again.
    pub const NO_ROOM_RETRY: Duration = Duration::from_secs(2);
    /// A process's mappings are read again at most this often when the BPF
    /// unwinder finds a pc outside them.
    pub const REFRESH_INTERVAL: Duration = Duration::from_secs(2);
    /// For this long after a process is noted (it appeared or exec'd),
    /// its mappings may be read again as often as every
    /// [`YOUNG_REFRESH_INTERVAL`]: the notice can come before the dynamic
    /// loader has mapped the libraries, and waiting [`REFRESH_INTERVAL`]
    /// then failed every stack through them for up to 2 s.
    pub const YOUNG: Duration = Duration::from_secs(2);
    /// See [`YOUNG`].
    pub const YOUNG_REFRESH_INTERVAL: Duration = Duration::from_millis(50);
    /// How often exited processes are looked for.
    pub const EXIT_SCAN: Duration = Duration::from_secs(5);
    /// After a user was refused a place for a file, their further new
    /// files are refused without looking for an idle one to evict for
    /// this long (a process mapping 20,000 files would otherwise look
    /// through every table 20,000 times).
    pub const FILE_REFUSAL_PAUSE: Duration = Duration::from_secs(1);
}

/// Mapping kinds of `enum unwind_map_kind` in `bpf/emberd.h`.
const MAP_TABLE: u32 = 0;
const MAP_FP: u32 = 1;
const MAP_NO_INFO: u32 = 2;
const MAP_NOT_READY: u32 = 3;
const MAP_BUDGET: u32 = 5;
/// The user whose processes and tables are never taken for another's.
const ROOT: u32 = 0;
/// `EMBERD_MAX_MAPPINGS`.
const MAX_MAPPINGS: usize = 128;
/// Exec'd processes kept for [`Unwinder::take_execs`] between two calls
/// (the pipeline takes them at every poll).
const MAX_EXECS_KEPT: usize = 4096;
/// sizeof(struct unwind_mapping), sizeof(struct proc_unwind).
const MAPPING_BYTES: usize = 40;
const PROC_BYTES: usize = 16 + MAX_MAPPINGS * MAPPING_BYTES;

const _: () = assert!(std::mem::size_of::<crate::bpf::types::unwind_info>() == packed::RULE_BYTES);
const _: () = assert!(std::mem::size_of::<crate::bpf::types::proc_unwind>() == PROC_BYTES);

/// Errors of the unwind stage.
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    /// The row array could not be mapped into memory.
    #[error(
        "mapping the BPF unwind-row array ({bytes} bytes) failed: {source}\nhint: lower unwind_table_budget_mib"
    )]
    Mmap {
        /// Size asked for.
        bytes: usize,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A mapped file's identity: a file replaced on disk, or changed in place,
/// is another file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    mtime: i64,
}

/// The vDSO is the same image in every process: one table for all.
const VDSO_KEY: FileKey = FileKey {
    dev: u64::MAX,
    ino: u64::MAX,
    mtime: 0,
};

type TableId = u64;

/// A mapped file as the kernel names it: its superblock's device
/// (`major << 20 | minor`) and inode number; `file_tables`' key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct InodeKey {
    dev: u64,
    ino: u64,
}

impl InodeKey {
    fn bytes(self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.dev.to_ne_bytes());
        k[8..].copy_from_slice(&self.ino.to_ne_bytes());
        k
    }
}

/// What a user's share of the unwind tables is weighed in.
#[derive(Debug, Clone, Copy)]
enum Weigh {
    /// Words of the row array.
    Rows,
    /// Rules added to the shared rule table.
    RulesAdded,
}

/// Tables of one build id with rows of their own that a new file of that
/// build id is compared with (copies of one file share the first; files
/// that only claim its build id get tables of their own).
const BUILD_ID_OWNERS: usize = 4;

/// `EMBERD_FILE_SEGS`, sizeof(struct file_table).
const FILE_SEGS: usize = 4;
const FILE_TABLE_BYTES: usize = 16 + FILE_SEGS * 24;
const _: () = assert!(std::mem::size_of::<crate::bpf::types::file_table>() == FILE_TABLE_BYTES);

#[derive(Debug, Clone)]
enum TableState {
    /// Queued on the builder thread.
    Building,
    /// Words [start, start + len) of the row array (a [`packed`] block).
    Ready { start: u32, len: u32 },
    /// The file has no CFI, or could not be read or parsed: frame
    /// pointers, and `[no unwind info: FILE]` where they fail.
    NoInfo,
    /// The file has CFI but its table found no room in the budget (refused,
    /// or taken back for another): frame pointers, and `[unwind error:
    /// table budget full: FILE]` where they fail. `words`: what it needs,
    /// 0 when over [`defaults::FILE_SHARE`] (never retried); `rules_held`:
    /// the rules the shared rule table held when it was refused for want
    /// of rules (0: refused for rows), built again only once fewer are held.
    NoRoom { words: u32, rules_held: u32 },
}

#[derive(Debug)]
struct TableEntry {
    name: String,
    /// What the file gives interpreter unwinding (CPython, glibc's TLS).
    runtime: Option<Finding>,
    state: TableState,
    /// PT_LOAD segments, to turn runtime addresses into file addresses.
    loads: Vec<table::LoadSegment>,
    build_id: Option<Vec<u8>>,
    /// Its rows are another table's (the same build id and rows): evicting
    /// it frees no room.
    borrowed: bool,
    /// Rules its pack added to the shared rule table: what its user is
    /// charged with there.
    rules_added: u32,
    /// The inodes the kernel maps the file by (device as the kernel
    /// numbers it, inode), as `/proc/PID/maps` shows them: the table's keys
    /// in `file_tables`.
    inodes: HashSet<InodeKey>,
    /// Live processes mapping the file.
    refs: u32,
    last_used: Instant,
    /// Where its CFI was read from, to build it again (a table that found
    /// no room).
    source: BuildSource,
    /// Builds that found their path gone (see [`Unwinder::finish`]).
    gone_tries: u8,
    /// Whose turn its builds wait in (see [`queue`]): the account that
    /// first asked for it, root's once root's asked.
    account: u32,
}

/// One executable mapping of a process.
#[derive(Debug, Clone)]
struct ProcMapping {
    start: u64,
    end: u64,
    offset: u64,
    table: Option<TableId>,
}

#[derive(Debug)]
struct ProcState {
    /// Whose share of the tables it uses: its real user id's account
    /// (the owner of a subordinate range holding it, or that uid).
    uid: u32,
    /// CLOCK_MONOTONIC ns just before the mappings were read: the BPF
    /// unwinder ignores them if the process exec'd after (`exec_at`).
    read_ns: u64,
    mappings: Vec<ProcMapping>,
    read_at: Instant,
    /// When the process was noted (appeared or exec'd); kept by refreshes.
    noted_at: Instant,
    /// When a drain last held a sample of it.
    sampled_at: Option<Instant>,
}

impl ProcState {
    /// When it last ran as far as the unwinder knows: sampled, or noted
    /// (new processes are noted because they ran).
    fn active_at(&self) -> Instant {
        self.sampled_at
            .map_or(self.noted_at, |s| s.max(self.noted_at))
    }
}

#[derive(Debug, Clone)]
enum BuildSource {
    File(PathBuf),
    /// This process's own vDSO image.
    Vdso,
}

/// What the builder thread answers.
struct Built {
    id: TableId,
    runtime: Option<Finding>,
    result: Result<(table::UnwindTable, ElfInfo), BuildError>,
    /// The file was refused for what it is (not ELF, sections too large).
    refused: bool,
    /// The path it was read by was gone (its process exited first).
    gone: bool,
    elapsed: Duration,
}

/// What [`Unwinder::admit`] did with a new process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Read it now, charging this account.
    Now(u32),
    /// Put in line (or aside) for its account's credit.
    Deferred,
    /// Gone already: nothing to read.
    Gone,
}

/// Figures of the unwind stage, for `/metrics`, `emberd check` and logs.
#[derive(Debug, Clone, Default)]
pub struct UnwindStats {
    /// Files with a table in the row array.
    pub tables: u64,
    /// Rows in use.
    pub rows: u64,
    /// Bytes of rows in use.
    pub bytes: u64,
    /// The row array's size in bytes (the budget).
    pub budget_bytes: u64,
    /// Tables compiled since start.
    pub builds: u64,
    /// Files that could not be read or parsed (corrupt CFI, too large, gone).
    pub build_failures: u64,
    /// Files refused unread for what they are: not ELF, not regular, or
    /// claiming sections over [`defaults::MAX_CFI_BYTES`].
    pub refused: u64,
    /// Files without any CFI.
    pub no_info_files: u64,
    /// FDEs skipped as corrupt, over all builds.
    pub bad_fdes: u64,
    /// Time spent compiling tables.
    pub build_time: Duration,
    /// Tables refused for lack of room in the budget.
    pub budget_refused: u64,
    /// Tables evicted.
    pub evicted: u64,
    /// Processes whose mappings the BPF unwinder has.
    pub processes: u64,
    /// Executable mappings left out: more than `EMBERD_MAX_MAPPINGS` in a
    /// process, or more processes than the map holds.
    pub mappings_dropped: u64,
    /// Processes whose mappings were taken out of a full `proc_unwind` to
    /// make room for a process of a user holding fewer (see
    /// [`Unwinder::note_process`]).
    pub processes_evicted: u64,
    /// Tables still mapped whose rows were taken back from the user
    /// holding the most rows, to make room for a user holding fewer.
    pub tables_evicted_for_share: u64,
    /// Tables still mapped whose rows were taken back because their
    /// processes had not been sampled for [`defaults::COLD`], for a table
    /// a sampled process needed.
    pub tables_evicted_cold: u64,
    /// Tables refused for being over [`defaults::FILE_SHARE`] of the budget.
    pub over_share: u64,
    /// Refusals of a table to a mapped file (its mappings unwound by frame
    /// pointers) because its user held a quarter of `file_tables`' places,
    /// or all users but root three quarters, none of them idle: a file
    /// counted at each read of a process mapping it.
    pub files_refused_for_share: u64,
    /// Tables no process mapped, evicted before [`defaults::IDLE_TABLE`]
    /// to give their user's (or the heaviest user's) place to a new file.
    pub files_evicted_for_share: u64,
    /// Tables that found no room built again once room could be made.
    pub no_room_retries: u64,
    /// Files whose table took another file's rows: the same build id and
    /// the same rows (a container's copy of a library).
    pub shared: u64,
    /// Files with the build id of a table already held but other rows (a
    /// rebuilt or edited file, or one forging the build id): given a table
    /// of their own.
    pub build_id_rows_differ: u64,
    /// Files mapped now whose table has no room (shown as `[unwind error:
    /// table budget full: FILE]`).
    pub no_room_files: u64,
    /// Distinct rules the packed rows name (of [`packed::MAX_RULES`]).
    pub rules: u64,
    /// Tables refused for room (budget full, or over a file's share) in
    /// the last minute.
    pub refused_last_minute: u64,
    /// Tables evicted or taken back in the last minute.
    pub evicted_last_minute: u64,
    /// What the per-account meter of reading time did
    /// ([`crate::shared::reads`]).
    pub reads: ReadStats,
}

/// What happened to a table lately, for the last minute's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lately {
    Refused,
    Evicted,
}

/// Table refusals and evictions of the last minute (at most
/// [`RECENT_MAX`] remembered).
#[derive(Debug, Default)]
struct Recent(VecDeque<(Instant, Lately)>);

const RECENT_MAX: usize = 4096;

impl Recent {
    fn note(&mut self, what: Lately) {
        if self.0.len() >= RECENT_MAX {
            self.0.pop_front();
        }
        self.0.push_back((Instant::now(), what));
    }

    fn count(&self, what: Lately) -> u64 {
        self.0
            .iter()
            .filter(|(at, w)| *w == what && at.elapsed() < Duration::from_secs(60))
            .count() as u64
    }
}

/// The unwind tables and process mappings of the BPF unwinder.
pub struct Unwinder {
    /// The runtimes (CPython) given each process's mappings.
    runtimes: Vec<Box<dyn Runtime>>,
    rows: RowArray,
    free: BTreeMap<u32, u32>,
    procs_map: MapHandle,
    /// `file_tables`: each table under the inodes it is mapped by.
    files_map: MapHandle,
    refresh_map: MapHandle,
    refresh_root_map: MapHandle,
    refresh_pending: MapHandle,
    /// `exec_at`: when each process last exec'd.
    exec_at: MapHandle,
    max_processes: usize,
    files: HashMap<FileKey, TableId>,
    /// Tables charged to each account ([`TableEntry::account`]): a place
    /// in `file_tables` each, of [`Unwinder::files_cap`].
    files_per_account: HashMap<u32, u32>,
    /// `file_tables`' places: one account other than root may hold a
    /// quarter of them, all but root together three quarters.
    files_cap: u32,
    /// The account last refused a place for a file, and when (see
    /// [`defaults::FILE_REFUSAL_PAUSE`]).
    file_refusal: Option<(u32, Instant)>,
    /// The tables holding rows of their own under each build id, to share
    /// with another file of that build id whose rows are the same (at most
    /// [`BUILD_ID_OWNERS`] each).
    by_build_id: HashMap<Vec<u8>, Vec<TableId>>,
    tables: HashMap<TableId, TableEntry>,
    next_id: TableId,
    processes: HashMap<Pid, ProcState>,
    /// Processes in `processes` per account ([`ProcState::uid`]).
    per_uid: HashMap<u32, u32>,
    /// Whose share each real uid counts in (`/etc/subuid`'s ranges), here
    /// and in the BPF programs' tables.
    accounts: BpfAccounts,
    /// Processes refused a place in a full `proc_unwind`, and when: read
    /// again at most every [`defaults::REFRESH_INTERVAL`], however often
    /// the BPF unwinder asks.
    refused: HashMap<Pid, Instant>,
    /// Processes some of whose files were refused a table for their
    /// account's share (see [`Unwinder::room_for_file`]): their account
    /// and when they were read; read again once the account has room.
    short_of_files: HashMap<Pid, (u32, Instant)>,
    /// Processes found to have exec'd, for [`Unwinder::take_execs`].
    execs: Vec<Pid>,
    /// The agent's time reading processes, per account: a user's flood
    /// of new processes is read at their account's pace, root's at once.
    reads: ReadMeter,
    /// Tables whose rows were taken back since the last poll: the
    /// processes mapping them are uploaded again.
    stripped: HashSet<TableId>,
    jobs: Arc<JobQueue>,
    done: mpsc::Receiver<Built>,
    last_exit_scan: Instant,
    last_retry: Instant,
    stats: UnwindStats,
    /// The rules packed rows name, shared by every table (`unwind_infos`).
    rules: packed::Rules,
    infos_map: MapHandle,
    /// The most words one table may take ([`defaults::FILE_SHARE`]).
    share_words: u32,
    recent: Recent,
}

impl Drop for Unwinder {
    fn drop(&mut self) {
        self.jobs.close();
    }
}

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The BPF row array, written through a shared mapping of just the rows a
/// table needs, made for the copy and dropped after it: mapping the whole
/// array would count the budget in emberd's RSS (the kernel maps all its
/// pages at once), although it is kernel memory allocated at load anyway.
struct RowArray {
    map: MapHandle,
    len: u32,
}

impl RowArray {
    fn new(map: MapHandle) -> Self {
        // Two words an element (`struct table_words`): BPF arrays place
        // values 8 bytes apart.
        let len = map.max_entries().saturating_mul(2);
        Self { map, len }
    }

    fn write(&mut self, start: u32, words: &[u32]) -> Result<(), UnwindError> {
        let m = self.map_words(start, words.len(), libc::PROT_READ | libc::PROT_WRITE)?;
        // SAFETY: the destination lies within the mapping (see map_words);
        // the rows are this table's own (allocated from the free list), and
        // BPF reads them only once a process's mappings name them, after
        // this copy. The mapping is dropped right after.
        unsafe {
            std::ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), m.at, words.len() * 4);
        }
        Ok(())
    }

    /// Words [start, start + len): a table's block, to compare with
    /// another file's rows.
    fn read(&self, start: u32, len: u32) -> Result<Vec<u32>, UnwindError> {
        let m = self.map_words(start, len as usize, libc::PROT_READ)?;
        let mut out = vec![0u32; len as usize];
        // SAFETY: the source lies within the mapping (see map_words); only
        // this thread writes the array.
        unsafe {
            std::ptr::copy_nonoverlapping(m.at, out.as_mut_ptr().cast::<u8>(), out.len() * 4);
        }
        Ok(out)
    }

    /// Maps the pages holding words [start, start + n) of the array.
    fn map_words(
        &self,
        start: u32,
        n: usize,
        prot: libc::c_int,
    ) -> Result<ArrayPages, UnwindError> {
        const PAGE: usize = 4096;
        assert!(start as usize + n <= self.len as usize);
        let first = start as usize * 4;
        let offset = first / PAGE * PAGE;
        let bytes = (first + n * 4 - offset).div_ceil(PAGE) * PAGE;
        // SAFETY: a shared mapping of the BPF_F_MMAPABLE array's fd, at a
        // page offset and length within the array (the kernel checks both).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_SHARED,
                self.map.as_fd().as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(UnwindError::Mmap {
                bytes,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(ArrayPages {
            base: ptr,
            bytes,
            // SAFETY: within the mapping: first - offset < PAGE <= bytes.
            at: unsafe { ptr.cast::<u8>().add(first - offset) },
        })
    }
}

/// Pages of the row array mapped for one copy, unmapped when dropped.
struct ArrayPages {
    base: *mut libc::c_void,
    bytes: usize,
    /// The first word asked for.
    at: *mut u8,
}

impl Drop for ArrayPages {
    fn drop(&mut self) {
        // SAFETY: the mapping map_words made, unmapped once.
        unsafe {
            libc::munmap(self.base, self.bytes);
        }
    }
}

use std::os::fd::AsFd;

impl Unwinder {
    /// Takes the row array and starts the builder thread.
    pub fn new(maps: UnwindMaps) -> Self {
        let rows = RowArray::new(maps.rows);
        let mut free = BTreeMap::new();
        free.insert(0, rows.len);
        let jobs = Arc::new(JobQueue::default());
        let (done_tx, done) = mpsc::channel::<Built>();
        let share_words = (rows.len / defaults::FILE_SHARE).max(1);
        let queue = jobs.clone();
        std::thread::Builder::new()
            .name("emberd-unwind".into())
            .spawn(move || builder_thread(&queue, done_tx, share_words as usize))
            .expect("spawning the unwind-table builder thread");
        let stats = UnwindStats {
            budget_bytes: u64::from(rows.len) * 4,
            ..Default::default()
        };
        Self {
            runtimes: Vec::new(),
            rows,
            free,
            max_processes: maps.procs.max_entries() as usize,
            procs_map: maps.procs,
            files_cap: maps.files.max_entries(),
            files_map: maps.files,
            refresh_map: maps.refresh,
            refresh_root_map: maps.refresh_root,
            refresh_pending: maps.refresh_pending,
            exec_at: maps.exec_at,
            files: HashMap::new(),
            files_per_account: HashMap::new(),
            file_refusal: None,
            by_build_id: HashMap::new(),
            tables: HashMap::new(),
            next_id: 1,
            processes: HashMap::new(),
            per_uid: HashMap::new(),
            accounts: BpfAccounts::new(maps.sub_uids, maps.sub_uid_min),
            refused: HashMap::new(),
            short_of_files: HashMap::new(),
            execs: Vec::new(),
            reads: ReadMeter::new(),
            stripped: HashSet::new(),
            jobs,
            done,
            last_exit_scan: Instant::now(),
            last_retry: Instant::now(),
            stats,
            rules: packed::Rules::default(),
            infos_map: maps.infos,
            share_words,
            recent: Recent::default(),
        }
    }

    /// The runtimes given each process's mappings ([`crate::runtime::start`]).
    pub fn set_runtimes(&mut self, runtimes: Vec<Box<dyn Runtime>>) {
        self.runtimes = runtimes;
    }

    /// Timer arms the runtimes want trapped in processes placed since
    /// the last call ([`Runtime::take_timer_hooks`]).
    pub fn take_timer_hooks(&mut self) -> Vec<crate::collect::node_timers::TimerHook> {
        self.runtimes
            .iter_mut()
            .flat_map(|r| r.take_timer_hooks())
            .collect()
    }

    /// Each runtime's processes by state (`unwound`, or why native).
    pub fn runtime_processes(&self) -> Vec<(&'static str, BTreeMap<&'static str, u64>)> {
        self.runtimes
            .iter()
            .map(|r| (r.name(), r.processes()))
            .collect()
    }

    /// Figures for `/metrics` and `emberd check`.
    pub fn stats(&self) -> UnwindStats {
        let mut s = self.stats.clone();
        s.processes = self.processes.len() as u64;
        s.no_room_files = self
            .tables
            .values()
            .filter(|e| e.refs > 0 && matches!(e.state, TableState::NoRoom { .. }))
            .count() as u64;
        s.rules = self.rules.len() as u64;
        s.refused_last_minute = self.recent.count(Lately::Refused);
        s.evicted_last_minute = self.recent.count(Lately::Evicted);
        s.reads = self.reads.stats();
        s
    }

    /// The meter of the agent's time reading processes, per account (the
    /// pipeline charges it the symbolizer's reads too).
    pub fn reads(&mut self) -> &mut ReadMeter {
        &mut self.reads
    }

    /// The account process `pid` counts in (`None`: it is gone).
    pub fn account_of(&self, pid: Pid) -> Option<u32> {
        crate::shared::accounts::real_uid(pid).map(|uid| self.accounts.account(uid))
    }

    /// Whether process `pid` started or exec'd after `at` (yes when that
    /// cannot be told): what was read of its pid before is not its own.
    pub fn new_since(&self, pid: Pid, at: Instant) -> bool {
        let ago = at.elapsed();
        let at_ns = crate::shared::clock::ktime_ns().saturating_sub(ago.as_nanos() as u64);
        if self.exec_since(pid, at_ns) {
            return true;
        }
        let Ok(stat) = procfs::process::Process::new(pid.0 as i32).and_then(|p| p.stat()) else {
            return true;
        };
        let Ok(boot) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) else {
            return true;
        };
        let hz = procfs::ticks_per_second() as f64;
        let started = stat.starttime as f64 / hz;
        let at_boot = boot.tv_sec() as f64 + boot.tv_nsec() as f64 / 1e9 - ago.as_secs_f64();
        started > at_boot
    }

    /// Whether a new process may be read now. If its account is past its
    /// credit, or has processes waiting already, it is put in line behind
    /// them ([`ReadMeter::next_due`]), and this look is charged to the
    /// account. Root's are read at once.
    pub fn admit(&mut self, pid: Pid) -> Admission {
        let started = Instant::now();
        match self.account_of(pid) {
            Some(account) => self.admit_as(pid, account, started.elapsed()),
            None => Admission::Gone,
        }
    }

    /// [`Unwinder::admit`] of a process whose account is known, its lookup
    /// having taken `looked`.
    pub fn admit_as(&mut self, pid: Pid, account: u32, looked: Duration) -> Admission {
        if account == 0 || (!self.reads.waiting(account) && self.reads.may_read(account)) {
            return Admission::Now(account);
        }
        let started = Instant::now();
        self.reads.defer(pid, account);
        self.reads.charge(account, looked + started.elapsed());
        Admission::Deferred
    }

    /// Reads process `pid` of `account` (see [`Unwinder::read_process`]) if
    /// the account may read now, charging it the time; whether it was read.
    fn read_metered(&mut self, pid: Pid, account: u32, noted_at: Instant, urgent: bool) -> bool {
        if !self.reads.may_read(account) {
            self.reads.skip();
            return false;
        }
        let started = Instant::now();
        self.read_process(pid, noted_at, urgent);
        self.reads.charge(account, started.elapsed());
        true
    }

    /// Notes that the processes of a drain's samples ran: their tables are
    /// kept before others' when the budget is full, and built first.
    pub fn note_sampled(&mut self, pids: impl IntoIterator<Item = Pid>) {
        let now = Instant::now();
        for pid in pids {
            if let Some(p) = self.processes.get_mut(&pid) {
                p.sampled_at = Some(now);
            }
        }
    }

    /// Reads a process's executable mappings, queues the tables it lacks,
    /// and gives the BPF unwinder its mappings. Called when a process is
    /// first sampled (or has exec'd), and when the unwinder asks.
    pub fn note_process(&mut self, pid: Pid) {
        self.read_process(pid, Instant::now(), true);
    }

    /// The processes found to have exec'd since the last call: what the
    /// runtimes' namers hold of them is the old program's.
    pub fn take_execs(&mut self) -> Vec<Pid> {
        std::mem::take(&mut self.execs)
    }

    /// Whether `pid` exec'd after CLOCK_MONOTONIC `ns` (`exec_at`; no:
    /// when it has no entry there).
    fn exec_since(&self, pid: Pid, ns: u64) -> bool {
        let mut value = [0u8; 8];
        matches!(
            self.exec_at.lookup_into(&pid.0.to_ne_bytes(), &mut value, MapFlags::ANY),
            Ok(true) if u64::from_ne_bytes(value) > ns
        )
    }

    /// Reads a process's executable mappings (see [`Unwinder::note_process`]);
    /// `noted_at` is when it appeared or exec'd; `urgent`: it ran lately,
    /// so its tables are built before those of processes listed at start.
    fn read_process(&mut self, pid: Pid, noted_at: Instant, urgent: bool) {
        let read_ns = crate::shared::clock::ktime_ns();
        let Some(uid) = crate::shared::accounts::real_uid(pid) else {
            return; // gone
        };
        let uid = self.accounts.account(uid);
        let Ok(maps) = crate::shared::procmaps::code_maps(pid) else {
            return;
        };
        let now = Instant::now();
        let maps: Vec<_> = maps
            .into_iter()
            .filter(|m| m.perms.contains(procfs::process::MMPermissions::EXECUTE))
            .collect();
        if maps.is_empty() {
            return; // a zombie or a kernel thread: nothing to unwind
        }
        let old = self.processes.remove(&pid);
        // Exec'd since its mappings were read: what the runtimes hold of it
        // is the old program's (a JVM's code cache is read once), and its
        // places count in its user's share. Let go, placed again below from
        // the new program's mappings. (A process is noticed twice, once by
        // each BPF object, and again when the notice map forgets it: only
        // an exec after the last read counts.)
        if let Some(o) = &old
            && self.exec_since(pid, o.read_ns)
        {
            for r in &mut self.runtimes {
                r.forget(pid);
            }
            if self.execs.len() < MAX_EXECS_KEPT {
                self.execs.push(pid);
            }
        }
        let mut mappings = Vec::new();
        // Whether a file was refused a table for the account's share.
        let mut short = false;
        for m in maps {
            let table = match &m.pathname {
                MMapPath::Path(path) if m.inode != 0 => {
                    let map_file = PathBuf::from(format!(
                        "/proc/{pid}/map_files/{:x}-{:x}",
                        m.address.0, m.address.1
                    ));
                    // The mapped inode itself, wherever the path now points;
                    // where map_files is closed to emberd (another user's
                    // process under the unit's capabilities: EACCES), the
                    // host path when it is that very inode.
                    let found = match std::fs::metadata(&map_file) {
                        Ok(md) => Some((md, map_file)),
                        Err(_) => std::fs::metadata(path)
                            .ok()
                            .filter(|md| crate::shared::procmaps::same_inode(md, m.dev, m.inode))
                            .map(|md| (md, path.clone())),
                    };
                    found.and_then(|(md, source)| {
                        let key = FileKey {
                            dev: md.dev(),
                            ino: md.ino(),
                            mtime: md.mtime(),
                        };
                        let name = path.file_name().map_or_else(
                            || path.display().to_string(),
                            |n| n.to_string_lossy().into(),
                        );
                        let Some(id) =
                            self.table_for(key, name, BuildSource::File(source), urgent, uid)
                        else {
                            short = true;
                            return None;
                        };
                        self.map_inode(
                            id,
                            InodeKey {
                                dev: (u64::from(m.dev.0 as u32) << 20) | u64::from(m.dev.1 as u32),
                                ino: m.inode,
                            },
                        );
                        Some(id)
                    })
                }
                MMapPath::Vdso => {
                    let id =
                        self.table_for(VDSO_KEY, "[vdso]".into(), BuildSource::Vdso, urgent, uid);
                    short |= id.is_none();
                    id
                }
                _ => None,
            };
            // Held from here: a file of this process found later in the
            // loop may evict idle tables (see `room_for_file`).
            if let Some(e) = table.and_then(|t| self.tables.get_mut(&t)) {
                e.refs += 1;
                e.last_used = now;
            }
            mappings.push(ProcMapping {
                start: m.address.0,
                end: m.address.1,
                offset: m.offset,
                table,
            });
        }
        // A process refused a place in `proc_unwind` keeps its files'
        // tables (within its user's share of them): the loop form finds
        // them through `file_tables` for a pc the agent has not listed.
        if old.is_none() && self.processes.len() >= self.max_processes && !self.make_room(uid) {
            self.stats.mappings_dropped += mappings.len() as u64;
            self.release(&mappings);
            if self.refused.len() >= self.max_processes {
                self.refused.clear();
            }
            self.refused.insert(pid, now);
            return;
        }
        let mut sampled_at = None;
        if let Some(old) = old {
            self.release(&old.mappings);
            self.count_out(old.uid);
            sampled_at = old.sampled_at;
        }
        self.refused.remove(&pid);
        if short {
            self.short_of_files.insert(pid, (uid, now));
        } else {
            self.short_of_files.remove(&pid);
        }
        *self.per_uid.entry(uid).or_default() += 1;
        let state = ProcState {
            uid,
            read_ns,
            mappings,
            read_at: now,
            noted_at,
            sampled_at,
        };
        self.upload(pid, &state);
        self.processes.insert(pid, state);
    }

    /// Notes every process running now, so that processes already running
    /// when sampling starts are unwound with tables from their first
    /// sample. Reading a process's maps costs ~0.1 ms; the tables are built
    /// on the builder thread (each distinct file once).
    pub fn note_all(&mut self) {
        let Ok(procs) = procfs::process::all_processes() else {
            return;
        };
        for p in procs.flatten() {
            let Ok(pid) = u32::try_from(p.pid()) else {
                continue;
            };
            // A user's thousands of processes are read at their pace, after
            // root's: the pipeline takes those deferred as for new ones.
            let pid = Pid(pid);
            if let Admission::Now(account) = self.admit(pid) {
                let started = Instant::now();
                self.read_process(pid, Instant::now(), false);
                self.reads.charge(account, started.elapsed());
            }
        }
    }

    /// The table of a file, queued for building if new (first if `urgent`);
    /// `None` when the file is new and its user has no place left for it
    /// (see [`Unwinder::room_for_file`]): its mappings are unwound by frame
    /// pointers.
    fn table_for(
        &mut self,
        key: FileKey,
        name: String,
        source: BuildSource,
        urgent: bool,
        account: u32,
    ) -> Option<TableId> {
        if let Some(&id) = self.files.get(&key)
            && let Some(e) = self.tables.get_mut(&id)
        {
            if urgent && matches!(e.state, TableState::Building) {
                self.jobs.hurry(id, account);
            }
            if account == ROOT && e.account != ROOT {
                // Root's file now: its place is root's, not the user's.
                let was = std::mem::replace(&mut e.account, ROOT);
                self.uncharge(was);
                *self.files_per_account.entry(ROOT).or_default() += 1;
            }
            return Some(id);
        }
        if !self.room_for_file(account) {
            self.stats.files_refused_for_share += 1;
            return None;
        }
        *self.files_per_account.entry(account).or_default() += 1;
        let id = self.next_id;
        self.next_id += 1;
        self.files.insert(key, id);
        self.tables.insert(
            id,
            TableEntry {
                name,
                runtime: None,
                state: TableState::Building,
                loads: Vec::new(),
                build_id: None,
                borrowed: false,
                rules_added: 0,
                inodes: HashSet::new(),
                refs: 0,
                last_used: Instant::now(),
                source: source.clone(),
                gone_tries: 0,
                account,
            },
        );
        self.jobs.push(
            BuildJob {
                id,
                source,
                account,
            },
            urgent,
        );
        Some(id)
    }

    /// Whether account `account` may have a table for one more file: root
    /// always; another account while it holds under a quarter of
    /// `file_tables`' places and all accounts but root under three
    /// quarters. Past either, the idle tables (no live process maps them)
    /// of the account over it, oldest first, give up their places early:
    /// a sixteenth of its share at a time, so that a flood of new files
    /// looks through the tables once per sixteenth, not once per file.
    /// A user mapping tens of thousands of files (one process can map
    /// 65,530) thus holds at most a quarter of the places, and root's
    /// programs started later always find `file_tables` room for their
    /// tables, which the BPF unwinder reads for mappings it has not been
    /// given yet (a new process's first milliseconds, a dlopen).
    fn room_for_file(&mut self, account: u32) -> bool {
        let (share, mine, over_all) = self.file_places(account);
        if account == ROOT || (mine < share && !over_all) {
            return true;
        }
        if let Some((who, at)) = self.file_refusal
            && who == account
            && at.elapsed() < defaults::FILE_REFUSAL_PAUSE
        {
            return false;
        }
        let whose = self.gives_way_for(account, mine >= share);
        let mut idle: Vec<(Instant, TableId)> = self
            .tables
            .iter()
            .filter(|(_, e)| e.account == whose && Self::idle(e))
            .map(|(id, e)| (e.last_used, *id))
            .collect();
        if idle.is_empty() {
            self.file_refusal = Some((account, Instant::now()));
            return false;
        }
        idle.sort_unstable();
        let batch: Vec<TableId> = idle
            .into_iter()
            .take((share as usize / 16).max(1))
            .map(|(_, id)| id)
            .collect();
        self.stats.files_evicted_for_share += batch.len() as u64;
        self.evict_many(&batch);
        true
    }

    /// Whose idle tables give way for a new file of `account`: over its
    /// own share (`over_own`), its own; over all users' three quarters,
    /// those of the user holding the most.
    fn gives_way_for(&self, account: u32, over_own: bool) -> u32 {
        if over_own {
            return account;
        }
        self.files_per_account
            .iter()
            .filter(|&(a, _)| *a != ROOT)
            .max_by_key(|&(_, n)| *n)
            .map_or(account, |(a, _)| *a)
    }

    /// A table no live process maps, not being built: one that may give
    /// way.
    fn idle(e: &TableEntry) -> bool {
        e.refs == 0 && !matches!(e.state, TableState::Building)
    }

    /// Whether a new file of `account` would get a table now (see
    /// [`Unwinder::room_for_file`]), without evicting anything.
    fn has_file_room(&self, account: u32) -> bool {
        let (share, mine, over_all) = self.file_places(account);
        if account == ROOT || (mine < share && !over_all) {
            return true;
        }
        let whose = self.gives_way_for(account, mine >= share);
        self.tables
            .values()
            .any(|e| e.account == whose && Self::idle(e))
    }

    /// A share of `file_tables`' places, the places account `account`
    /// holds, and whether all accounts but root hold their three quarters.
    fn file_places(&self, account: u32) -> (u32, u32, bool) {
        let share = (self.files_cap / 4).max(1);
        let all_share = (self.files_cap / 4 * 3).max(1);
        let mine = self.files_per_account.get(&account).copied().unwrap_or(0);
        let all: u32 = self
            .files_per_account
            .iter()
            .filter(|&(a, _)| *a != ROOT)
            .map(|(_, n)| *n)
            .sum();
        (share, mine, all >= all_share)
    }

    /// Reads again, a few at a time, the processes some of whose files were
    /// refused a table, once their account has room: under its share, or
    /// holding idle tables that would give way. Without it a user's
    /// process started while another of theirs held the share would stay
    /// on frame pointers for life (its mappings are all known, so the BPF
    /// unwinder never asks about it).
    fn retry_short_of_files(&mut self) {
        const PER_SCAN: usize = 64;
        // Those tried longest ago first; an account is tried while its
        // reads leave it room.
        let mut short: Vec<(Instant, Pid, u32)> = self
            .short_of_files
            .iter()
            .map(|(p, (a, at))| (*at, *p, *a))
            .collect();
        short.sort_unstable();
        let mut full: HashSet<u32> = HashSet::new();
        let mut read = 0;
        for (_, pid, account) in short {
            if read == PER_SCAN {
                break;
            }
            if full.contains(&account) {
                continue;
            }
            if !self.has_file_room(account) {
                full.insert(account);
                continue;
            }
            match self.processes.get(&pid).map(|p| p.noted_at) {
                Some(noted_at) => {
                    let before = self.short_of_files.get(&pid).map(|v| v.1);
                    if !self.read_metered(pid, account, noted_at, false) {
                        full.insert(account);
                        continue;
                    }
                    read += 1;
                    match self.short_of_files.get(&pid).map(|v| v.1) {
                        // Not read (a zombie, a main thread gone, maps over
                        // their bound): not tried again until a refresh
                        // reads it.
                        at if at == before => {
                            self.short_of_files.remove(&pid);
                        }
                        // Still short: what room there was went to others
                        // (or its refusals are paused): not its others now.
                        Some(_) => {
                            full.insert(account);
                        }
                        None => {}
                    }
                }
                None => {
                    self.short_of_files.remove(&pid);
                }
            }
        }
    }

    /// Takes a table's place off its account's count.
    fn uncharge(&mut self, account: u32) {
        count_down(&mut self.files_per_account, account);
    }

    /// Whether tables are being built (a poll soon would upload them).
    pub fn building(&self) -> bool {
        self.tables
            .values()
            .any(|e| matches!(e.state, TableState::Building))
    }

    /// Takes finished tables, re-reads processes the BPF unwinder asked
    /// about, and forgets exited processes. Called at every drain, at
    /// every new-process notice (at most every 10 ms), and every 50 ms
    /// while tables are built or new processes are re-read.
    ///
    /// Waits up to `wait` for tables still being built: a new process is
    /// unwound with frame pointers until its tables are in, and most files
    /// compile in milliseconds (libc ~3 ms, python3 ~10 ms, libjvm ~30 ms),
    /// so a short wait here saves a poll interval of degraded stacks.
    pub fn poll(&mut self, wait: Duration) {
        let mut changed: HashSet<TableId> = HashSet::new();
        let deadline = Instant::now() + wait;
        loop {
            let building = self
                .tables
                .values()
                .any(|e| matches!(e.state, TableState::Building));
            let left = deadline.saturating_duration_since(Instant::now());
            let got = if !building || left.is_zero() {
                self.done.try_recv().ok()
            } else {
                self.done.recv_timeout(left).ok()
            };
            let Some(built) = got else { break };
            changed.insert(built.id);
            self.finish(built);
        }
        changed.extend(self.stripped.drain());
        if !changed.is_empty() {
            let pids: Vec<Pid> = self
                .processes
                .iter()
                .filter(|(_, p)| {
                    p.mappings
                        .iter()
                        .any(|m| m.table.is_some_and(|t| changed.contains(&t)))
                })
                .map(|(pid, _)| *pid)
                .collect();
            for pid in pids {
                if let Some(state) = self.processes.remove(&pid) {
                    self.upload(pid, &state);
                    self.processes.insert(pid, state);
                }
            }
        }
        // Root's first.
        let asked = if self.take_refresh_flag() {
            let mut asked = crate::collect::drain_tgids(&self.refresh_root_map);
            asked.extend(crate::collect::drain_tgids(&self.refresh_map));
            asked
        } else {
            Vec::new()
        };
        for pid in asked {
            let (fresh, noted_at) = match self.processes.get(&pid) {
                Some(p) => {
                    let interval = if p.noted_at.elapsed() < defaults::YOUNG {
                        defaults::YOUNG_REFRESH_INTERVAL
                    } else {
                        defaults::REFRESH_INTERVAL
                    };
                    (p.read_at.elapsed() < interval, p.noted_at)
                }
                None => (
                    self.refused
                        .get(&pid)
                        .is_some_and(|at| at.elapsed() < defaults::REFRESH_INTERVAL),
                    Instant::now(),
                ),
            };
            if fresh {
                continue;
            }
            let account = match self.processes.get(&pid) {
                Some(p) => Some(p.uid),
                None => self.account_of(pid),
            };
            // Skipped while its account is past its credit: the BPF
            // unwinder asks again at the process's next uncovered pc.
            if let Some(account) = account {
                self.read_metered(pid, account, noted_at, true);
            }
        }
        for r in &mut self.runtimes {
            r.tick();
        }
        self.accounts.refresh();
        if self.last_retry.elapsed() >= defaults::NO_ROOM_RETRY {
            self.last_retry = Instant::now();
            self.retry_no_room();
        }
        if self.last_exit_scan.elapsed() >= defaults::EXIT_SCAN {
            self.last_exit_scan = Instant::now();
            self.forget_exited();
            self.retry_refused();
            self.retry_short_of_files();
        }
    }

    /// Whether the BPF unwinder asked for mappings to be read again since
    /// the last call (`unwind_refresh_pending`); clears the flag first, so a
    /// request made while the refresh maps are walked is seen next time. If
    /// the flag cannot be read, says yes: the walk is slower, not wrong.
    fn take_refresh_flag(&self) -> bool {
        let key = 0u32.to_ne_bytes();
        let mut value = [0u8; 4];
        match self
            .refresh_pending
            .lookup_into(&key, &mut value, MapFlags::ANY)
        {
            Ok(true) if value == [0; 4] => false,
            Ok(_) => {
                let _ = self
                    .refresh_pending
                    .update(&key, &0u32.to_ne_bytes(), MapFlags::ANY);
                true
            }
            Err(_) => true,
        }
    }

    fn finish(&mut self, built: Built) {
        self.stats.build_time += built.elapsed;
        let Some(entry) = self.tables.get_mut(&built.id) else {
            return;
        };
        // A file's finding is its content's (device, inode and mtime name
        // one content): a rebuild that could not read the file (gone, or
        // no room) keeps the one found before, or its runtime's process
        // would be let go.
        if built.runtime.is_some() {
            entry.runtime = built.runtime;
        }
        let name = entry.name.clone();
        // Read through a process that exited before the builder got to it
        // (cargo's `rustc -vV`, the first of a burst of short processes):
        // that says nothing of the file. Read it through another process
        // mapping it; if none is left, forget it, and the next process
        // mapping it has it built anew. Marking it `NoInfo` told every later
        // process `[no unwind info]`, untrue.
        if built.gone {
            entry.gone_tries += 1;
            let tries = entry.gone_tries;
            let account = entry.account;
            match self.source_of(built.id) {
                Some(source) if tries < 4 => {
                    self.jobs.push(
                        BuildJob {
                            id: built.id,
                            source,
                            account,
                        },
                        true,
                    );
                }
                _ => {
                    tracing::debug!("{name}: gone before its table was built; forgotten");
                    if let Some(e) = self.tables.remove(&built.id) {
                        self.uncharge(e.account);
                        self.unpublish(built.id, &e.inodes);
                    }
                    self.files.retain(|_, t| *t != built.id);
                    for p in self.processes.values_mut() {
                        for m in p.mappings.iter_mut().filter(|m| m.table == Some(built.id)) {
                            m.table = None;
                        }
                    }
                }
            }
            return;
        }
        let (table, info) = match built.result {
            Ok(r) => r,
            Err(e) => {
                let state = if e.is_over_share() {
                    self.stats.over_share += 1;
                    self.recent.note(Lately::Refused);
                    tracing::warn!(
                        "unwind table of {name} is over a quarter of the table budget ({e}): left to frame pointers; raise unwind_table_budget_mib"
                    );
                    TableState::NoRoom {
                        words: 0,
                        rules_held: 0,
                    }
                } else {
                    tracing::debug!("no unwind table for {name}: {e}");
                    if built.refused {
                        self.stats.refused += 1;
                    } else {
                        self.stats.build_failures += 1;
                    }
                    TableState::NoInfo
                };
                if let Some(e) = self.tables.get_mut(&built.id) {
                    e.state = state;
                }
                self.publish(built.id);
                return;
            }
        };
        self.stats.builds += 1;
        self.stats.bad_fdes += table.stats.bad_fdes;
        // Another file with the same build id (a container's copy of libc)
        // already has these rows: share them. Only if they are the same
        // rows: anyone can write a build id into a file of their own, with
        // CFI of their choosing (issue 61: root's program unwound by a
        // local user's forged rows, 0 of 504 samples whole).
        if let Some(bid) = &info.build_id
            && let Some(state) = self.same_rows_as(bid, built.id, &table, &name)
        {
            self.stats.shared += 1;
            if let Some(e) = self.tables.get_mut(&built.id) {
                e.state = state;
                e.borrowed = true;
                e.loads = info.loads;
                e.build_id = info.build_id;
            }
            self.publish(built.id);
            return;
        }
        let state = if table.source == TableSource::None || table.rows.is_empty() {
            self.stats.no_info_files += 1;
            TableState::NoInfo
        } else {
            self.place(built.id, &name, &table, built.elapsed)
        };
        if let Some(bid) = &info.build_id
            && matches!(state, TableState::Ready { .. })
        {
            self.note_owner(bid, built.id);
        }
        if let Some(e) = self.tables.get_mut(&built.id) {
            e.state = state;
            e.loads = info.loads;
            e.build_id = info.build_id;
        }
        self.publish(built.id);
    }

    /// The state of a table of build id `bid` whose block in the row array
    /// is what `table`'s rows pack to: the same unwinding, rule for rule.
    /// Packed with the rules held, adding none (a row naming a rule not held
    /// is in no block). Costs a pack and a read of each owner's block (at
    /// most [`BUILD_ID_OWNERS`]), only for files whose build id some table
    /// already has.
    fn same_rows_as(
        &mut self,
        bid: &[u8],
        id: TableId,
        table: &table::UnwindTable,
        name: &str,
    ) -> Option<TableState> {
        let owners: Vec<(u32, u32)> = self
            .by_build_id
            .get(bid)?
            .iter()
            .filter(|&&o| o != id)
            .filter_map(|o| match self.tables.get(o)?.state {
                TableState::Ready { start, len } => Some((start, len)),
                _ => None,
            })
            .collect();
        if owners.is_empty() {
            return None;
        }
        let words = packed::pack_known(&table.rows, &self.rules);
        let found = words.and_then(|w| {
            owners.into_iter().find(|&(start, len)| {
                w.len() == len as usize && self.rows.read(start, len).is_ok_and(|r| r == w)
            })
        });
        if found.is_none() {
            self.stats.build_id_rows_differ += 1;
            tracing::info!(
                "{name} has the build id of a file in the unwind tables but other CFI: given a table of its own"
            );
        }
        found.map(|(start, len)| TableState::Ready { start, len })
    }

    /// Notes table `id` as holding rows of its own under build id `bid`,
    /// for files of that build id to share (the first [`BUILD_ID_OWNERS`]:
    /// a user making many files of someone's build id costs the others
    /// that share, never their rows).
    fn note_owner(&mut self, bid: &[u8], id: TableId) {
        let owners = self.by_build_id.entry(bid.to_vec()).or_default();
        if owners.len() < BUILD_ID_OWNERS && !owners.contains(&id) {
            owners.push(id);
        }
    }

    /// Forgets table `id` as an owner of build id `bid`'s rows.
    fn forget_owner(&mut self, bid: &[u8], id: TableId) {
        if let Some(owners) = self.by_build_id.get_mut(bid) {
            owners.retain(|&o| o != id);
            if owners.is_empty() {
                self.by_build_id.remove(bid);
            }
        }
    }

    /// Packs a built table and finds it room in the row array: its state.
    fn place(
        &mut self,
        id: TableId,
        name: &str,
        table: &table::UnwindTable,
        elapsed: Duration,
    ) -> TableState {
        let words = loop {
            match packed::pack(&table.rows, &mut self.rules) {
                Ok(w) => break w,
                // The rule table is full: the rules of a table of the user
                // charged with the most are let go, if that user holds more
                // than this table's users; else it waits (built again once
                // room is made, as for rows).
                Err(packed::PackError::RulesFull)
                    if self.strip_for_share(id, 1, Weigh::RulesAdded) =>
                {
                    self.stats.tables_evicted_for_share += 1;
                }
                Err(e) => {
                    tracing::warn!("unwind table of {name} not packed: {e}");
                    self.stats.budget_refused += 1;
                    self.recent.note(Lately::Refused);
                    let (words, rules_held) = match e {
                        packed::PackError::RulesFull => (
                            table.rows.len().max(1) as u32,
                            self.rules.len().max(1) as u32,
                        ),
                        _ => (0, 0),
                    };
                    return TableState::NoRoom { words, rules_held };
                }
            }
        };
        let added = self.upload_rules();
        if let Some(e) = self.tables.get_mut(&id) {
            e.rules_added = added;
        }
        let len = words.len() as u32;
        if len > self.share_words {
            self.rules.release(&words);
            self.stats.over_share += 1;
            self.recent.note(Lately::Refused);
            tracing::warn!(
                "unwind table of {name} ({} KiB) is over a quarter of the table budget: left to frame pointers; raise unwind_table_budget_mib",
                len / 256
            );
            return TableState::NoRoom {
                words: 0,
                rules_held: 0,
            };
        }
        let was_waiting = self
            .tables
            .get(&id)
            .is_some_and(|e| matches!(e.state, TableState::NoRoom { .. }));
        match self.allocate(id, len) {
            Some(start) if self.rows.write(start, &words).is_ok() => {
                self.stats.tables += 1;
                self.stats.rows += u64::from(len);
                self.stats.bytes += u64::from(len) * 4;
                tracing::debug!(
                    "unwind table for {name}: {} rows ({} KiB packed) from {:?} in {elapsed:?}",
                    table.rows.len(),
                    len / 256,
                    table.source,
                );
                TableState::Ready { start, len }
            }
            Some(start) => {
                self.rules.release(&words);
                self.release_rows(start, len);
                self.stats.build_failures += 1;
                TableState::NoInfo
            }
            None => {
                self.rules.release(&words);
                self.stats.budget_refused += 1;
                self.recent.note(Lately::Refused);
                if was_waiting {
                    tracing::debug!("unwind table budget still full for {name}");
                } else {
                    tracing::warn!(
                        "unwind table budget full: {name} ({} KiB) waits for room, on frame pointers meanwhile; raise unwind_table_budget_mib",
                        len / 256
                    );
                }
                TableState::NoRoom {
                    words: len,
                    rules_held: 0,
                }
            }
        }
    }

    /// Writes rules new since the last call to `unwind_infos`, before any
    /// row naming them is written: how many.
    fn upload_rules(&mut self) -> u32 {
        let added = self.rules.take_added();
        let n = added.len() as u32;
        for (i, bytes) in added {
            if let Err(e) =
                self.infos_map
                    .update(&u32::from(i).to_ne_bytes(), &bytes, MapFlags::ANY)
            {
                tracing::warn!("unwind_infos update failed: {e}");
            }
        }
        n
    }

    /// When each table's processes last ran (sampled or noted).
    fn active_tables(&self) -> HashMap<TableId, Instant> {
        let mut at: HashMap<TableId, Instant> = HashMap::new();
        for p in self.processes.values() {
            let t = p.active_at();
            for id in p.mappings.iter().filter_map(|m| m.table) {
                at.entry(id).and_modify(|a| *a = (*a).max(t)).or_insert(t);
            }
        }
        at
    }

    /// Builds again the tables that found no room, mapped by processes that
    /// ran lately, where room can be made for them without taking a table
    /// from a process that ran lately. Looked at every
    /// [`defaults::NO_ROOM_RETRY`]: neither a full budget nor short
    /// processes coming and going make it build the same file over and over.
    fn retry_no_room(&mut self) {
        // A table refused for want of rules waits until some are freed:
        // built again while the rule table is as full, it would be refused
        // again at every retry.
        let rules = self.rules.len() as u32;
        let waiting: Vec<(TableId, u32)> = self
            .tables
            .iter()
            .filter_map(|(id, e)| match e.state {
                TableState::NoRoom { words, rules_held }
                    if words > 0 && e.refs > 0 && (rules_held == 0 || rules < rules_held) =>
                {
                    Some((*id, words))
                }
                _ => None,
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        let active = self.active_tables();
        let hot = |id: &TableId| active.get(id).is_some_and(|t| t.elapsed() < defaults::COLD);
        let mut room: u64 = self.free.values().map(|&l| u64::from(l)).sum();
        for (id, e) in &self.tables {
            if let TableState::Ready { len, .. } = e.state
                && Self::owns_rows(e)
                && (e.refs == 0 || !hot(id))
            {
                room += u64::from(len);
            }
        }
        let mut waiting: Vec<(TableId, u32)> =
            waiting.into_iter().filter(|(id, _)| hot(id)).collect();
        waiting.sort_by_key(|&(_, w)| w);
        for (id, words) in waiting {
            if u64::from(words) > room {
                break;
            }
            room -= u64::from(words);
            let Some(source) = self.source_of(id) else {
                continue;
            };
            let Some(e) = self.tables.get_mut(&id) else {
                continue;
            };
            e.state = TableState::Building;
            self.stats.no_room_retries += 1;
            self.jobs.push(
                BuildJob {
                    id,
                    source,
                    account: e.account,
                },
                true,
            );
        }
    }

    /// Where to read table `id`'s file again: through a live process that
    /// maps it (the path it was first read by may be gone with its process).
    fn source_of(&self, id: TableId) -> Option<BuildSource> {
        let e = self.tables.get(&id)?;
        if let BuildSource::Vdso = e.source {
            return Some(BuildSource::Vdso);
        }
        let live = self.processes.iter().find_map(|(pid, p)| {
            p.mappings
                .iter()
                .filter(|m| m.table == Some(id))
                .map(|m| PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)))
                .find(|path| std::fs::metadata(path).is_ok())
        });
        match (live, &e.source) {
            (Some(path), _) => Some(BuildSource::File(path)),
            (None, BuildSource::File(path)) if std::fs::metadata(path).is_ok() => {
                Some(e.source.clone())
            }
            _ => None,
        }
    }

    /// First-fit allocation of `len` words for table `want`, making room if
    /// needed from, in turn: tables no live process maps (used longest ago
    /// first); if `want`'s processes ran lately, tables whose processes
    /// have not run for [`defaults::COLD`] (longest ago first); tables of
    /// the user holding the most rows, if that user holds more than
    /// `want`'s would. A table in use by processes that ran lately is
    /// never taken for another's.
    fn allocate(&mut self, want: TableId, len: u32) -> Option<u32> {
        let mut active: Option<HashMap<TableId, Instant>> = None;
        let mut scanned = false;
        loop {
            if let Some((&start, &flen)) = self.free.iter().find(|&(_, &l)| l >= len) {
                self.free.remove(&start);
                if flen > len {
                    self.free.insert(start + len, flen - len);
                }
                return Some(start);
            }
            // Evict the table unused longest that no live process maps.
            let victim = self
                .tables
                .iter()
                .filter(|&(_, e)| e.refs == 0 && Self::owns_rows(e))
                .min_by_key(|(_, e)| e.last_used)
                .map(|(id, _)| *id);
            if let Some(victim) = victim {
                self.evict(victim);
                continue;
            }
            // Exits are otherwise found every EXIT_SCAN: on a build host the
            // compilers that ran in the last seconds would still hold their
            // tables and the next one's be refused. Look before refusing.
            if !scanned {
                scanned = true;
                if self.forget_gone() {
                    continue;
                }
            }
            let active = active.get_or_insert_with(|| self.active_tables());
            let want_hot = active
                .get(&want)
                .is_some_and(|t| t.elapsed() < defaults::COLD);
            // Tables sharing rows by build id are one block: it is as
            // active as the most active of them.
            let mut blocks: HashMap<u32, Option<Instant>> = HashMap::new();
            for (id, e) in &self.tables {
                if let TableState::Ready { start, .. } = e.state {
                    let at = active.get(id).copied();
                    let b = blocks.entry(start).or_insert(at);
                    *b = (*b).max(at);
                }
            }
            let cold = self
                .tables
                .iter()
                .filter(|&(_, e)| Self::owns_rows(e))
                .filter_map(|(&id, e)| {
                    let TableState::Ready { start, .. } = e.state else {
                        return None;
                    };
                    let at = blocks.get(&start).copied().flatten();
                    at.is_none_or(|t| t.elapsed() >= defaults::COLD)
                        .then_some((at, id))
                })
                .min_by_key(|&(at, _)| at)
                .map(|(_, id)| id);
            match cold {
                Some(victim) if want_hot && victim != want => {
                    self.strip(victim, "its processes have not run for 30 s");
                    self.stats.tables_evicted_cold += 1;
                }
                _ if self.strip_for_share(want, len, Weigh::Rows) => {
                    self.stats.tables_evicted_for_share += 1;
                }
                _ => return None,
            }
        }
    }

    /// With every row (or rule) in use by a live process: takes back the
    /// rows of the table used longest ago among those only one user's
    /// processes map, that user holding the most such rows (or having
    /// added the most rules, as `by` weighs), if it holds more than the
    /// users wanting `want` would with `need` more. One user mapping many
    /// large files of their own, or files of thousands of distinct frame
    /// sizes, thus cannot keep the tables of everyone else's new programs
    /// out. Tables mapped by several users (libc) are no one's share, and
    /// root's (the host's services) are never taken; root's wants are met
    /// while any one user's table is left. Users are accounts (a
    /// subordinate range counts as its owner). Returns whether a table was
    /// taken back.
    fn strip_for_share(&mut self, want: TableId, need: u32, by: Weigh) -> bool {
        // Who maps each block of rows (tables sharing rows by build id are
        // one block); None: several users.
        let mut owner: HashMap<u32, Option<u32>> = HashMap::new();
        let mut wanting: HashSet<u32> = HashSet::new();
        for p in self.processes.values() {
            for t in p.mappings.iter().filter_map(|m| m.table) {
                if t == want {
                    wanting.insert(p.uid);
                }
                if let Some(TableEntry {
                    state: TableState::Ready { start, .. },
                    ..
                }) = self.tables.get(&t)
                {
                    owner
                        .entry(*start)
                        .and_modify(|o| {
                            if *o != Some(p.uid) {
                                *o = None;
                            }
                        })
                        .or_insert(Some(p.uid));
                }
            }
        }
        let mut held: HashMap<u32, u64> = HashMap::new();
        let mut oldest: HashMap<u32, (Instant, TableId)> = HashMap::new();
        for (&id, e) in &self.tables {
            let TableState::Ready { start, len } = e.state else {
                continue;
            };
            if !Self::owns_rows(e) {
                continue;
            }
            if let Some(Some(uid)) = owner.get(&start)
                && *uid != ROOT
            {
                let weight = match by {
                    Weigh::Rows => u64::from(len),
                    Weigh::RulesAdded => u64::from(e.rules_added),
                };
                // A table weighing nothing (no rule of its own) frees
                // nothing of what is wanted.
                if weight == 0 {
                    continue;
                }
                *held.entry(*uid).or_default() += weight;
                let o = oldest.entry(*uid).or_insert((e.last_used, id));
                if e.last_used < o.0 {
                    *o = (e.last_used, id);
                }
            }
        }
        let Some(mine) = wanting
            .iter()
            .map(|u| held.get(u).copied().unwrap_or(0))
            .min()
        else {
            return false;
        };
        let Some((top, most)) = held
            .iter()
            .filter(|(u, _)| !wanting.contains(u))
            .max_by_key(|&(_, n)| *n)
            .map(|(u, n)| (*u, *n))
        else {
            return false;
        };
        // Root (the host's services) is served while any user holds rows.
        if most <= mine + u64::from(need) && !wanting.contains(&ROOT) {
            return false;
        }
        let Some(&(_, victim)) = oldest.get(&top) else {
            return false;
        };
        tracing::debug!(
            "unwind table budget full: taking back a table of uid {top} ({most} {by:?}) for uid(s) {wanting:?}"
        );
        self.strip(victim, "its user holds the most rows or rules");
        true
    }

    /// Frees a table's rows while processes still map it: it and the
    /// tables sharing its rows wait for room (`NoRoom`: frame pointers, and
    /// the budget marker where they fail; built again once their processes
    /// run and room can be made), and their processes are uploaded again.
    fn strip(&mut self, id: TableId, why: &str) {
        let Some(TableState::Ready { start, len }) = self.tables.get(&id).map(|e| e.state.clone())
        else {
            return;
        };
        if let Some(e) = self.tables.get(&id) {
            tracing::debug!("unwind table of {} taken back: {why}", e.name);
        }
        self.recent.note(Lately::Evicted);
        let mut owned = Vec::new();
        for (&tid, e) in self.tables.iter_mut() {
            if matches!(e.state, TableState::Ready { start: s, .. } if s == start) {
                e.state = TableState::NoRoom {
                    words: len,
                    rules_held: 0,
                };
                e.borrowed = false;
                if let Some(b) = &e.build_id {
                    owned.push((b.clone(), tid));
                }
                self.stripped.insert(tid);
            }
        }
        for (b, tid) in owned {
            self.forget_owner(&b, tid);
        }
        self.free_block(start, len);
        self.stats.tables = self.stats.tables.saturating_sub(1);
        self.stats.rows = self.stats.rows.saturating_sub(u64::from(len));
        self.stats.bytes = self.stats.bytes.saturating_sub(u64::from(len) * 4);
        let stripped: Vec<TableId> = self.stripped.iter().copied().collect();
        for tid in stripped {
            self.publish(tid);
        }
    }

    /// Whether a table holds rows of its own (rather than sharing another
    /// table's by build id): evicting it frees room.
    fn owns_rows(e: &TableEntry) -> bool {
        matches!(e.state, TableState::Ready { .. }) && !e.borrowed
    }

    fn evict(&mut self, id: TableId) {
        if self.evict_entry(id) {
            self.files.retain(|_, t| *t != id);
        }
    }

    /// Evicts tables `ids`, looking through the files once for them all.
    fn evict_many(&mut self, ids: &[TableId]) {
        let gone: HashSet<TableId> = ids
            .iter()
            .copied()
            .filter(|&id| self.evict_entry(id))
            .collect();
        if !gone.is_empty() {
            self.files.retain(|_, t| !gone.contains(t));
        }
    }

    /// [`Unwinder::evict`] but for its file's key in `files`: whether the
    /// table was there.
    fn evict_entry(&mut self, id: TableId) -> bool {
        let Some(e) = self.tables.remove(&id) else {
            return false;
        };
        self.uncharge(e.account);
        self.unpublish(id, &e.inodes);
        if let TableState::Ready { start, len } = e.state {
            let sharers: Vec<TableId> = self
                .tables
                .iter()
                .filter(
                    |(_, o)| matches!(o.state, TableState::Ready { start: s, .. } if s == start),
                )
                .map(|(i, _)| *i)
                .collect();
            if let Some(b) = &e.build_id {
                self.forget_owner(b, id);
            }
            if sharers.is_empty() {
                self.free_block(start, len);
                self.stats.tables = self.stats.tables.saturating_sub(1);
                self.stats.rows = self.stats.rows.saturating_sub(len as u64);
                self.stats.bytes = self.stats.bytes.saturating_sub(u64::from(len) * 4);
            } else if !e.borrowed {
                // Its rows stay for the files sharing them: one of those
                // owns them now.
                let heir = sharers[0];
                if let Some(h) = self.tables.get_mut(&heir) {
                    h.borrowed = false;
                    if let Some(b) = h.build_id.clone() {
                        self.note_owner(&b, heir);
                    }
                }
            }
        }
        self.stats.evicted += 1;
        self.recent.note(Lately::Evicted);
        true
    }

    /// Takes a table's block out of the row array: its rules (those no
    /// other block names) and its words are free again.
    fn free_block(&mut self, start: u32, len: u32) {
        match self.rows.read(start, len) {
            Ok(words) => {
                self.rules.release(&words);
            }
            // Its rules stay held (bounded: the rule table is).
            Err(e) => tracing::warn!("unwind rows not read back to free their rules: {e}"),
        }
        self.release_rows(start, len);
    }

    fn release_rows(&mut self, start: u32, len: u32) {
        let mut start = start;
        let mut len = len;
        // Merge with the free neighbours on both sides.
        if let Some((&ps, &pl)) = self.free.range(..start).next_back()
            && ps + pl == start
        {
            self.free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(&nl) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nl;
        }
        self.free.insert(start, len);
    }

    /// Notes that the kernel maps table `id`'s file by `key`, and gives the
    /// BPF unwinder the table under it if it is built.
    fn map_inode(&mut self, id: TableId, key: InodeKey) {
        let Some(e) = self.tables.get_mut(&id) else {
            return;
        };
        if e.inodes.insert(key) && !matches!(e.state, TableState::Building) {
            self.publish(id);
        }
    }

    /// Writes table `id` to `file_tables` under each inode its file is
    /// mapped by, so the BPF unwinder finds it for mappings it has not been
    /// given yet (a new process's libc).
    fn publish(&self, id: TableId) {
        let Some(e) = self.tables.get(&id) else {
            return;
        };
        let (kind, start, len) = match e.state {
            TableState::Building => return,
            TableState::NoInfo => (MAP_NO_INFO, 0, 0),
            TableState::NoRoom { .. } => (MAP_BUDGET, 0, 0),
            TableState::Ready { start, len } => (MAP_TABLE, start, len),
        };
        let mut value = [0u8; FILE_TABLE_BYTES];
        value[0..4].copy_from_slice(&start.to_ne_bytes());
        value[4..8].copy_from_slice(&len.to_ne_bytes());
        value[8..12].copy_from_slice(&kind.to_ne_bytes());
        const PAGE: u64 = 4096;
        let segs = e
            .loads
            .iter()
            .filter(|s| s.executable)
            .chain(e.loads.iter().filter(|s| !s.executable))
            .take(FILE_SEGS);
        let mut n = 0usize;
        for s in segs {
            let at = 16 + n * 24;
            let lo = s.offset & !(PAGE - 1);
            let hi = s.offset + s.filesz.max(1);
            value[at..at + 8].copy_from_slice(&lo.to_ne_bytes());
            value[at + 8..at + 16].copy_from_slice(&hi.to_ne_bytes());
            value[at + 16..at + 24].copy_from_slice(&s.offset.wrapping_sub(s.vaddr).to_ne_bytes());
            n += 1;
        }
        value[12..16].copy_from_slice(&(n as u32).to_ne_bytes());
        for key in &e.inodes {
            if let Err(err) = self.files_map.update(&key.bytes(), &value, MapFlags::ANY) {
                tracing::debug!("file_tables update for {}: {err}", e.name);
            }
        }
    }

    /// Takes table `id` out of `file_tables`, unless another table (the same
    /// inode with newer contents) holds the key now.
    fn unpublish(&self, id: TableId, inodes: &HashSet<InodeKey>) {
        for key in inodes {
            let taken = self
                .tables
                .iter()
                .any(|(&other, e)| other != id && e.inodes.contains(key));
            if !taken {
                let _ = self.files_map.delete(&key.bytes());
            }
        }
    }

    /// Takes a process out of the BPF unwinder's maps.
    fn forget(&mut self, pid: Pid) {
        self.short_of_files.remove(&pid);
        if let Some(state) = self.processes.remove(&pid) {
            self.release(&state.mappings);
            self.count_out(state.uid);
        }
        let _ = self.procs_map.delete(&pid.0.to_ne_bytes());
        for r in &mut self.runtimes {
            r.forget(pid);
        }
    }

    fn count_out(&mut self, uid: u32) {
        count_down(&mut self.per_uid, uid);
    }

    /// Makes room in a full `proc_unwind` for a process of account `uid`
    /// when another account holds more places than `uid` would after it:
    /// that account's process read longest ago gives up its place. One
    /// user starting thousands of processes (under one uid or the many of
    /// a subordinate range) thus takes at most an equal share of the map
    /// from the others, not the whole of it. Root's processes (the host's
    /// services; no user can start one) never give up theirs, and are
    /// never refused while another user holds a place, however many
    /// root's are.
    fn make_room(&mut self, uid: u32) -> bool {
        let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
        let Some((top, most)) = self
            .per_uid
            .iter()
            .filter(|&(u, _)| *u != ROOT)
            .max_by_key(|&(_, n)| *n)
            .map(|(u, n)| (*u, *n))
        else {
            return false;
        };
        if top == uid || (uid != ROOT && mine + 1 >= most) {
            return false;
        }
        let victim = self
            .processes
            .iter()
            .filter(|(_, s)| s.uid == top)
            .min_by_key(|(_, s)| s.read_at)
            .map(|(pid, _)| *pid);
        let Some(victim) = victim else {
            return false;
        };
        tracing::debug!(
            "proc_unwind full: pid {victim} (uid {top}, {most} processes) makes room for uid {uid}"
        );
        self.forget(victim);
        self.stats.processes_evicted += 1;
        true
    }

    /// Gives back the references `mappings` hold on their tables.
    fn release(&mut self, mappings: &[ProcMapping]) {
        let now = Instant::now();
        for t in mappings.iter().filter_map(|m| m.table) {
            if let Some(e) = self.tables.get_mut(&t) {
                e.refs = e.refs.saturating_sub(1);
                e.last_used = now;
            }
        }
    }

    /// Forgets processes that have exited, releasing their tables: whether
    /// one was. Removes no table, so a table being placed stays.
    fn forget_gone(&mut self) -> bool {
        let gone: Vec<Pid> = self
            .processes
            .keys()
            .filter(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
            .copied()
            .collect();
        let any = !gone.is_empty();
        for pid in gone {
            self.forget(pid);
        }
        self.refused
            .retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
        any
    }

    /// Forgets processes that have exited and evicts tables idle for
    /// IDLE_TABLE.
    fn forget_exited(&mut self) {
        self.forget_gone();
        let idle: Vec<TableId> = self
            .tables
            .iter()
            .filter(|(_, e)| e.refs == 0 && e.last_used.elapsed() >= defaults::IDLE_TABLE)
            .map(|(id, _)| *id)
            .collect();
        self.evict_many(&idle);
    }

    /// Reads again the processes refused a place in a full `proc_unwind`,
    /// longest refused first, as many as places are free now: the BPF
    /// unwinder asks only about processes it has, so a refused process
    /// would otherwise wait for its next exec.
    fn retry_refused(&mut self) {
        if self.processes.len() >= self.max_processes || self.refused.is_empty() {
            return;
        }
        let mut pids: Vec<(Instant, Pid)> = self.refused.iter().map(|(p, t)| (*t, *p)).collect();
        pids.sort_unstable();
        for (at, pid) in pids {
            if self.processes.len() >= self.max_processes {
                break;
            }
            let Some(account) = self.account_of(pid) else {
                self.refused.remove(&pid);
                continue;
            };
            if !self.reads.may_read(account) {
                continue;
            }
            // Out of the list first: a zombie (no mappings) is not put back,
            // and a process refused again is, with the time of this read.
            self.refused.remove(&pid);
            self.read_metered(pid, account, at, false);
        }
    }

    /// Writes a process's mappings to `proc_unwind`.
    fn upload(&mut self, pid: Pid, state: &ProcState) {
        let mut value = vec![0u8; PROC_BYTES];
        let mut nr = 0usize;
        for m in &state.mappings {
            if nr == MAX_MAPPINGS {
                self.stats.mappings_dropped += 1;
                continue;
            }
            let (kind, bias, start, len) = match m.table.and_then(|t| self.tables.get(&t)) {
                None => (MAP_FP, 0, 0, 0),
                Some(e) => match e.state {
                    TableState::Building => (MAP_NOT_READY, 0, 0, 0),
                    TableState::NoInfo => (MAP_NO_INFO, 0, 0, 0),
                    TableState::NoRoom { .. } => (MAP_BUDGET, 0, 0, 0),
                    TableState::Ready { start, len } => match bias_of(&e.loads, m) {
                        Some(bias) => (MAP_TABLE, bias, start, len),
                        None => (MAP_NO_INFO, 0, 0, 0),
                    },
                },
            };
            let at = 16 + nr * MAPPING_BYTES;
            let v = &mut value[at..at + MAPPING_BYTES];
            v[0..8].copy_from_slice(&m.start.to_ne_bytes());
            v[8..16].copy_from_slice(&m.end.to_ne_bytes());
            v[16..24].copy_from_slice(&bias.to_ne_bytes());
            v[24..28].copy_from_slice(&start.to_ne_bytes());
            v[28..32].copy_from_slice(&len.to_ne_bytes());
            v[32..36].copy_from_slice(&kind.to_ne_bytes());
            nr += 1;
        }
        value[0..4].copy_from_slice(&(nr as u32).to_ne_bytes());
        value[8..16].copy_from_slice(&state.read_ns.to_ne_bytes());
        if let Err(e) = self
            .procs_map
            .update(&pid.0.to_ne_bytes(), &value, MapFlags::ANY)
        {
            self.stats.mappings_dropped += nr as u64;
            tracing::debug!("proc_unwind update for pid {pid} failed: {e}");
        }
        self.upload_runtimes(pid, state);
    }

    /// Gives the runtimes the process's mappings whose files hold
    /// something for one, once their tables are in.
    fn upload_runtimes(&mut self, pid: Pid, state: &ProcState) {
        if self.runtimes.is_empty() {
            return;
        }
        let mapped: Vec<Mapped<'_>> = state
            .mappings
            .iter()
            .filter_map(|m| {
                let e = self.tables.get(&m.table?)?;
                Some(Mapped {
                    finding: e.runtime.as_ref()?,
                    bias: bias_of(&e.loads, m),
                    file: m.table?,
                })
            })
            .collect();
        let code: Vec<CodeRange> = state
            .mappings
            .iter()
            .map(|m| CodeRange {
                start: m.start,
                end: m.end,
                offset: m.offset,
                file: m.table,
            })
            .collect();
        for r in &mut self.runtimes {
            r.place(pid, state.uid, &mapped, &code);
        }
    }
}

/// Takes one off `account`'s count, forgetting the account at none.
fn count_down(counts: &mut HashMap<u32, u32>, account: u32) {
    if let Some(n) = counts.get_mut(&account) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(&account);
        }
    }
}

/// runtime address - file virtual address for a mapping, from the PT_LOAD
/// segment the mapping was made for. The kernel maps a segment from its file
/// offset rounded down to a page, so lld's unaligned segments (Rust
/// binaries) start mid-page: compare page-aligned offsets.
fn bias_of(loads: &[table::LoadSegment], m: &ProcMapping) -> Option<u64> {
    const PAGE: u64 = 4096;
    let holds = |s: &&table::LoadSegment| {
        s.offset & !(PAGE - 1) <= m.offset && m.offset < s.offset + s.filesz.max(1)
    };
    let seg = loads
        .iter()
        .filter(|s| s.executable)
        .find(holds)
        .or_else(|| loads.iter().find(holds))?;
    Some(
        m.start
            .wrapping_sub(m.offset)
            .wrapping_add(seg.offset)
            .wrapping_sub(seg.vaddr),
    )
}

fn builder_thread(jobs: &JobQueue, done: mpsc::Sender<Built>, max_rows: usize) {
    while let Some(job) = jobs.pop() {
        let started = Instant::now();
        let mut refused = false;
        let mut gone = false;
        let (result, runtime) = match job.source {
            BuildSource::File(path) => match read_capped(&path) {
                Ok(b) => (
                    build(&b, max_rows),
                    File::open(&path)
                        .ok()
                        .and_then(|f| crate::runtime::inspect(&f)),
                ),
                Err(e) => {
                    refused = e.is_refusal();
                    gone = e.is_gone();
                    (Err(BuildError::Other(e.to_string())), None)
                }
            },
            BuildSource::Vdso => (
                own_vdso()
                    .map_err(BuildError::Other)
                    .and_then(|b| build(&b, max_rows)),
                None,
            ),
        };
        let elapsed = started.elapsed();
        // A build's scratch (parsed CFI of a large library: tens of MiB)
        // is freed by now; give its pages back rather than keep the peak
        // resident. Builds are rare (a new binary), a trim is a millisecond.
        #[cfg(target_env = "gnu")]
        // SAFETY: malloc_trim only releases free heap memory.
        unsafe {
            libc::malloc_trim(0);
        }
        if done
            .send(Built {
                id: job.id,
                runtime,
                result,
                refused,
                gone,
                elapsed,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Why a file's table was not built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Its CFI could not be compiled, or it has more rows than one file's
    /// share of the budget holds ([`BuildError::is_over_share`]).
    #[error(transparent)]
    Table(#[from] table::TableError),
    /// The file or image could not be read.
    #[error("{0}")]
    Other(String),
}

impl BuildError {
    /// Whether the file has CFI but more rows than one file may hold
    /// ([`defaults::FILE_SHARE`] of the budget).
    pub fn is_over_share(&self) -> bool {
        matches!(self, BuildError::Table(table::TableError::TooManyRows(_)))
    }
}

/// Compiles one ELF image, with its separate debug file's `.debug_frame`
/// when the image itself has no CFI.
/// `max_rows`: the most rows one file's table may hold (see
/// [`table::build_table_within`]).
pub fn build(bytes: &[u8], max_rows: usize) -> Result<(table::UnwindTable, ElfInfo), BuildError> {
    let info = table::elf_info(bytes)?;
    let mut t = table::build_table_within(bytes, None, max_rows)?;
    if t.source == TableSource::None
        && let Some(bid) = &info.build_id
        && let Ok(debug) = read_capped(&table::debug_file_path(bid))
    {
        t = table::build_table_within(bytes, Some(&debug), max_rows)?;
    }
    Ok((t, info))
}

/// The rows one file may hold under the default budget: the cap for builds
/// outside the daemon (`emberd check`, `emberd unwind-tables`).
pub const DEFAULT_MAX_ROWS: usize =
    (defaults::TABLE_BUDGET_BYTES / 4 / defaults::FILE_SHARE as u64) as usize;

/// Why a file was not read for its unwind table.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening or reading failed (gone, no permission, I/O error).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A FIFO, device, directory: nothing a loader maps as code.
    #[error("{0}: not a regular file")]
    NotRegular(PathBuf),
    /// Larger than [`defaults::MAX_FILE_BYTES`].
    #[error("{0}: larger than {max} bytes", max = defaults::MAX_FILE_BYTES)]
    TooLarge(PathBuf),
    /// Not a 64-bit little-endian ELF file, or its headers point outside
    /// it: refused unread (a user can map any file as executable).
    #[error("{0}: not an ELF file emberd can read (refused unread)")]
    NotElf(PathBuf),
    /// Its headers claim more than [`defaults::MAX_CFI_BYTES`] of the
    /// sections the table builder reads.
    #[error("{0}: its CFI, note and name sections claim over {max} bytes (refused)", max = defaults::MAX_CFI_BYTES)]
    SectionsTooLarge(PathBuf),
}

impl ReadError {
    /// Whether the file was refused for what it is (counted as `refused`),
    /// rather than failing to read.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, ReadError::Io { .. })
    }

    /// Whether the path was gone: a `/proc/PID/map_files` path of a process
    /// that has exited, or a file removed.
    pub fn is_gone(&self) -> bool {
        matches!(self, ReadError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound
                || source.raw_os_error() == Some(libc::ESRCH))
    }
}

/// Reads a regular file of at most [`defaults::MAX_FILE_BYTES`], as far as
/// the table builder needs it: its ELF headers and the CFI, note and
/// debuglink sections, into a zeroed buffer of the file's size whose other
/// pages are never touched (so never resident: a 100 MiB binary costs a few
/// MiB while its table is built). What is read is bounded by what emberd
/// needs, whatever the file says about itself: a file that is not ELF is
/// refused unread, and one whose sections claim more than
/// [`defaults::MAX_CFI_BYTES`] is refused before they are read.
pub fn read_capped(path: &std::path::Path) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = File::open(path).map_err(io)?;
    let md = f.metadata().map_err(io)?;
    if !md.is_file() {
        return Err(ReadError::NotRegular(path.to_path_buf()));
    }
    if md.len() > defaults::MAX_FILE_BYTES {
        return Err(ReadError::TooLarge(path.to_path_buf()));
    }
    let mut bytes = vec![0u8; md.len() as usize];
    match read_elf_parts(&f, &mut bytes) {
        Ok(()) => Ok(bytes),
        Err(PartsError::Io(e)) => Err(io(e)),
        Err(PartsError::NotElf) => Err(ReadError::NotElf(path.to_path_buf())),
        Err(PartsError::TooLarge) => Err(ReadError::SectionsTooLarge(path.to_path_buf())),
    }
}

/// Why [`read_elf_parts`] stopped.
enum PartsError {
    Io(std::io::Error),
    /// Not ELF64 LE, or a header points outside the file.
    NotElf,
    /// Over [`defaults::MAX_CFI_BYTES`].
    TooLarge,
}

/// Fills the parts of `buf` (the file's size) the table builder reads:
/// ELF, program and section headers, section names, and the sections it
/// uses, at most [`defaults::MAX_CFI_BYTES`] of sections in all.
fn read_elf_parts(f: &File, buf: &mut [u8]) -> Result<(), PartsError> {
    use std::os::unix::fs::FileExt;
    let mut budget = defaults::MAX_CFI_BYTES;
    // Headers are bounded by ElfHeader (7.5 MiB at most); the sections
    // they name are charged to the budget before being read.
    let mut read = |buf: &mut [u8], off: u64, len: u64, charged: bool| -> Result<(), PartsError> {
        if charged {
            budget = budget.checked_sub(len).ok_or(PartsError::TooLarge)?;
        }
        let end = off.checked_add(len).ok_or(PartsError::NotElf)?;
        let dst = usize::try_from(off)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(a, b)| buf.get_mut(a..b))
            .ok_or(PartsError::NotElf)?;
        f.read_exact_at(dst, off).map_err(PartsError::Io)
    };
    if buf.len() < elf::EHDR_BYTES {
        return Err(PartsError::NotElf);
    }
    read(buf, 0, elf::EHDR_BYTES as u64, false)?;
    let first: &[u8; elf::EHDR_BYTES] = buf[..elf::EHDR_BYTES].try_into().expect("64 bytes");
    // Entry sizes are ELF64's own and the tables inside the file: at most
    // 3.5 + 4 MiB of headers, whatever the file claims.
    let h = ElfHeader::parse(first, buf.len() as u64).map_err(|_| PartsError::NotElf)?;
    if h.shstrndx >= h.shnum {
        return Err(PartsError::NotElf);
    }
    // Decoded out of `buf` before the sections are read into it: the notes
    // and section headers (32 bytes kept of each 64).
    fn slice(buf: &[u8], (at, len): (u64, u64)) -> Result<&[u8], PartsError> {
        let at = usize::try_from(at).map_err(|_| PartsError::NotElf)?;
        let len = usize::try_from(len).map_err(|_| PartsError::NotElf)?;
        buf.get(at..at + len).ok_or(PartsError::NotElf)
    }
    read(buf, h.ph_range().0, h.ph_range().1, false)?;
    read(buf, h.sh_range().0, h.sh_range().1, false)?;
    let notes: Vec<elf::Segment> = elf::segments(slice(buf, h.ph_range())?)
        .filter(|p| p.kind == elf::PT_NOTE)
        .collect();
    let sections: Vec<elf::Section> = elf::sections(slice(buf, h.sh_range())?).collect();
    // PT_NOTE segments: the build id, where section headers do not say.
    for p in notes {
        read(buf, p.offset, p.filesz, true)?;
    }
    let names = sections[h.shstrndx as usize];
    read(buf, names.offset, names.size, true)?;
    const WANTED: &[&[u8]] = &[
        b".eh_frame",
        b".eh_frame_hdr",
        b".debug_frame",
        b".zdebug_frame",
        b".gnu_debuglink",
    ];
    for s in &sections {
        let name_at = names
            .offset
            .checked_add(u64::from(s.name))
            .and_then(|at| usize::try_from(at).ok())
            .ok_or(PartsError::NotElf)?;
        let name = elf::c_str(buf, name_at).ok_or(PartsError::NotElf)?;
        // SHT_NOBITS has no bytes in the file.
        if s.kind != elf::SHT_NOBITS && (s.kind == elf::SHT_NOTE || WANTED.contains(&name)) {
            read(buf, s.offset, s.size, true)?;
        }
    }
    Ok(())
}

/// This process's vDSO image: the kernel maps the same one into every
/// process.
fn own_vdso() -> Result<Vec<u8>, String> {
    let maps = Process::myself()
        .and_then(|p| p.maps())
        .map_err(|e| e.to_string())?;
    let m = maps
        .into_iter()
        .find(|m| matches!(m.pathname, MMapPath::Vdso))
        .ok_or("no [vdso] mapping")?;
    let len = (m.address.1 - m.address.0) as usize;
    // SAFETY: the vDSO is mapped readable for the life of the process.
    let image = unsafe { std::slice::from_raw_parts(m.address.0 as *const u8, len) };
    Ok(image.to_vec())
}

/// Figures of one file's table, for `emberd check` and the benchmark.
#[derive(Debug, Clone)]
pub struct FileTableReport {
    /// The file.
    pub path: PathBuf,
    /// Rows (0: no CFI).
    pub rows: usize,
    /// Where they came from.
    pub source: TableSource,
    /// Compile time, reading included.
    pub time: Duration,
}

/// Compiles the tables of this process's own executable mappings, as
/// `emberd check` reports them.
pub fn self_report() -> Vec<Result<FileTableReport, String>> {
    let Ok(maps) = Process::myself().and_then(|p| p.maps()) else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    maps.into_iter()
        .filter(|m| m.perms.contains(procfs::process::MMPermissions::EXECUTE))
        .filter_map(|m| match m.pathname {
            MMapPath::Path(p) if seen.insert(p.clone()) => Some(p),
            _ => None,
        })
        .map(|path| {
            let started = Instant::now();
            let (t, _) = read_capped(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| build(&b, DEFAULT_MAX_ROWS).map_err(|e| e.to_string()))?;
            Ok(FileTableReport {
                path,
                rows: t.rows.len(),
                source: t.source,
                time: started.elapsed(),
            })
        })
        .collect()
}

/// The unwind tables of what runs on this host now, as `emberd check`
/// reports them against a budget.
#[derive(Debug, Clone, Default)]
pub struct HostDemand {
    /// Distinct executable files mapped by running processes, with a table.
    pub files: usize,
    /// Bytes their packed tables take.
    pub bytes: u64,
    /// The largest: (file name, bytes), largest first.
    pub largest: Vec<(String, u64)>,
    /// Files whose table is over a file's share of the budget.
    pub over_share: Vec<String>,
    /// Files that could not be read (gone, not ELF).
    pub unreadable: usize,
    /// Time spent building them.
    pub time: Duration,
}

/// Builds the table of every distinct executable file that a running
/// process maps (once each, by device and inode), packed as the daemon
/// would, and sums them against `budget_bytes`.
pub fn host_demand(budget_bytes: u64) -> HostDemand {
    let started = Instant::now();
    let share_rows = (budget_bytes / 4 / u64::from(defaults::FILE_SHARE)) as usize;
    let mut rules = packed::Rules::default();
    let mut seen = HashSet::new();
    let mut d = HostDemand::default();
    let mut sizes = Vec::new();
    let Ok(procs) = procfs::process::all_processes() else {
        return d;
    };
    for p in procs.flatten() {
        let pid = p.pid();
        let Ok(maps) = p.maps() else { continue };
        for m in maps {
            if !m.perms.contains(procfs::process::MMPermissions::EXECUTE) {
                continue;
            }
            let MMapPath::Path(path) = &m.pathname else {
                continue;
            };
            if m.inode == 0 || !seen.insert((m.dev, m.inode)) {
                continue;
            }
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| {
                    n.to_string_lossy()
                        .trim_end_matches(" (deleted)")
                        .to_owned()
                },
            );
            let via = PathBuf::from(format!(
                "/proc/{pid}/map_files/{:x}-{:x}",
                m.address.0, m.address.1
            ));
            let Ok(bytes) = read_capped(&via).or_else(|_| read_capped(path)) else {
                d.unreadable += 1;
                continue;
            };
            match build(&bytes, share_rows) {
                Ok((t, _)) if !t.rows.is_empty() => {
                    let words = packed::pack(&t.rows, &mut rules).map_or(0, |w| w.len());
                    if words > share_rows {
                        d.over_share.push(name.clone());
                    }
                    sizes.push((name, words as u64 * 4));
                }
                Ok(_) => {}
                Err(e) if e.is_over_share() => d.over_share.push(name),
                Err(_) => d.unreadable += 1,
            }
        }
    }
    d.files = sizes.len();
    d.bytes = sizes.iter().map(|(_, b)| b).sum();
    sizes.sort_by_key(|e| std::cmp::Reverse(e.1));
    sizes.truncate(5);
    d.largest = sizes;
    d.time = started.elapsed();
    d
}
