//! Collect off-CPU time, wakeups, off-wake chains and page faults
//! (`bpf/events.bpf.c`), memory growth (`bpf/memory.h`: brk, mmap, munmap,
//! sampled malloc) and block I/O latency (`bpf/blockio.h`). Where malloc's
//! uprobes are attached: [`super::heap`].

use std::collections::HashMap;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, ProgramMut};

use super::forms::{self, ProgramForm};
use super::programs::{self, Attach, Plan, ProgramTableError, UprobeRole};
use super::stack::{self, UnwindCounters, stack_by_key};
use super::{CollectError, PerfEvent, Pid, RawSample, RawStack, Tid, UnwindMaps, online_cpus};
use crate::bpf::enums as c;
use crate::bpf::events::types;
use crate::bpf::events::{EventsSkel, EventsSkelBuilder};

/// A stored event: one whose BPF records carry its id (a row of
/// [`crate::shared::events::EVENTS`] with a `bpf_id`, `EVENT_*` in
/// `bpf/emberd.h`). The same type as the views, so an event is declared once.
pub use crate::shared::events::Event as EventKind;

/// Defaults of [`EventOptions`].
pub mod defaults {
    /// Shorter off-CPU periods are not charged (bcc's offcputime -m): 1 us.
    pub const MIN_BLOCK_NS: u64 = 1_000;
    /// Longer off-CPU periods are not charged either (bcc's -M): 10 s. Also
    /// how long a stack id may be held by a blocked thread before it is
    /// collected.
    pub const MAX_BLOCK_NS: u64 = 10_000_000_000;
    /// Task states counted as off CPU: interruptible and uninterruptible
    /// sleep (1 | 2). Preempted, runnable threads are CPU contention, not
    /// blocking, and would swamp an idle host's graph with the scheduler.
    pub const STATE_MASK: u32 = 0x3;
    /// Page faults per sample. Sampling every fault with its stack slowed a
    /// fault-heavy program by about a third here; 1 in 16 costs a few percent.
    pub const PAGEFAULT_PERIOD: u64 = 16;
    /// Off-CPU periods (and wakeups) shorter than this are recorded with
    /// probability length/this and charged this, so on average exactly;
    /// longer ones are all recorded: 1 ms. A kernel stack walk costs
    /// microseconds here, on the woken thread's critical path; this bounds
    /// the walks per second by the blocked time, whatever the switch rate.
    /// 0 records every period.
    pub const SAMPLE_BELOW_NS: u64 = 1_000_000;
    /// Entries of the events' stack map (kernel and user stacks of blocked
    /// threads and wakers, held up to the maximum block time), at least.
    pub const STACK_MAP_ENTRIES: u32 = 16384;
    /// Entries of each of the events' two counts maps, at least.
    pub const COUNTS_MAP_ENTRIES: u32 = 16384;
    /// Mean bytes between malloc samples: 512 KiB, tcmalloc's and Go's
    /// default. One sample per 512 KiB keeps a program allocating 1 GB/s
    /// at about 2,000 recorded samples a second.
    pub const MALLOC_SAMPLE_BYTES: u64 = 512 * 1024;
    /// Sampled allocations tracked live (for the in-use view), in the
    /// kernel and in the agent each; more are counted as allocated only.
    pub const MALLOC_LIVE_ENTRIES: u32 = 65536;
    /// Threads the bounded form keeps off-CPU state for (`blocked_by_tid`,
    /// about 200 bytes each, preallocated: 6.3 MiB of kernel memory; config
    /// `offcpu_bounded_threads`). Linux's default pid_max is 32768 (4194304
    /// on many distributions, but hosts run far fewer threads); a thread
    /// beyond it is counted (`ECOUNTER_BLOCKED_FULL`) and its off-CPU time
    /// not recorded.
    pub const BLOCKED_THREADS: u32 = 32768;
    /// Whether brk, mmap and munmap are on by default: no. Any syscall
    /// tracepoint, raw or classic, puts every syscall of every task on the
    /// kernel's tracing path: measured here (scripts/bench memory) a
    /// getppid() loop ran at 0.74 of its speed with the classic
    /// tracepoints and 0.41 with the raw ones, a C build at 0.94-0.95.
    /// Not negligible for an always-on default.
    pub const SYSCALL_EVENTS: bool = false;
    pub use crate::collect::malloc::MALLOC_MAX_PROCESSES;
}

pub use super::malloc::MallocTargets;

/// What to record. Every field documents its default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventOptions {
    /// Off-CPU time (default on).
    pub offcpu: bool,
    /// Wakeup time (default on; needs the off-CPU hooks).
    pub wakeup: bool,
    /// Off-wake chains (default on; needs the off-CPU hooks).
    pub offwake: bool,
    /// Page faults (default on).
    pub pagefault: bool,
    /// [`defaults::MIN_BLOCK_NS`].
    pub min_block_ns: u64,
    /// [`defaults::MAX_BLOCK_NS`].
    pub max_block_ns: u64,
    /// [`defaults::STATE_MASK`]; 0 counts every state.
    pub state_mask: u32,
    /// Record one in N switch-outs, values scaled by N (default 1: all). The
    /// knob for hosts that switch millions of times a second.
    pub sample_one_in: u32,
    /// [`defaults::PAGEFAULT_PERIOD`].
    pub pagefault_period: u64,
    /// [`defaults::SAMPLE_BELOW_NS`].
    pub sample_below_ns: u64,
    /// Only this process (default: all).
    pub pid: Option<Pid>,
    /// brk() growth (default off: see [`defaults::SYSCALL_EVENTS`]).
    pub brk: bool,
    /// mmap() bytes (default off).
    pub mmap: bool,
    /// munmap() bytes (default off).
    pub munmap: bool,
    /// Block I/O latency (default on).
    pub blockio: bool,
    /// malloc's processes (default none: off).
    pub malloc: MallocTargets,
    /// [`defaults::MALLOC_SAMPLE_BYTES`]; 0 records every allocation.
    pub malloc_sample_bytes: u64,
    /// [`defaults::MALLOC_LIVE_ENTRIES`].
    pub malloc_live_entries: u32,
    /// Entries of the bounded form's blocked-thread table (at least 64):
    /// [`defaults::BLOCKED_THREADS`].
    pub blocked_threads: u32,
    /// Entries of `event_stacks` (stacks of blocked threads and wakers);
    /// one user may hold at most half of them (see `bpf/events.bpf.c`).
    pub stack_entries: u32,
    /// Entries of each counts buffer: two for off-CPU time and the other
    /// events, two more for wakeups and off-wake chains (see
    /// `wake_counts` in `bpf/events.bpf.c`); the agent is woken to drain
    /// once one is half full.
    pub counts_entries: u32,
}

impl Default for EventOptions {
    fn default() -> Self {
        Self {
            offcpu: true,
            wakeup: true,
            offwake: true,
            pagefault: true,
            min_block_ns: defaults::MIN_BLOCK_NS,
            max_block_ns: defaults::MAX_BLOCK_NS,
            state_mask: defaults::STATE_MASK,
            sample_one_in: 1,
            pagefault_period: defaults::PAGEFAULT_PERIOD,
            sample_below_ns: defaults::SAMPLE_BELOW_NS,
            pid: None,
            brk: defaults::SYSCALL_EVENTS,
            mmap: defaults::SYSCALL_EVENTS,
            munmap: defaults::SYSCALL_EVENTS,
            blockio: true,
            malloc: MallocTargets::default(),
            malloc_sample_bytes: defaults::MALLOC_SAMPLE_BYTES,
            malloc_live_entries: defaults::MALLOC_LIVE_ENTRIES,
            blocked_threads: defaults::BLOCKED_THREADS,
            stack_entries: defaults::STACK_MAP_ENTRIES.max(super::defaults::stack_map_entries()),
            counts_entries: defaults::COUNTS_MAP_ENTRIES.max(super::defaults::counts_map_entries()),
        }
    }
}

impl EventOptions {
    /// Whether any event is on.
    pub fn any(&self) -> bool {
        self.offcpu
            || self.wakeup
            || self.offwake
            || self.pagefault
            || self.syscalls()
            || self.blockio
            || self.malloc.any()
    }

    /// Whether a syscall event (brk, mmap, munmap) is on.
    pub fn syscalls(&self) -> bool {
        self.brk || self.mmap || self.munmap
    }

    /// Switches every event off: the start of a `--event` list.
    pub fn none() -> Self {
        Self {
            offcpu: false,
            wakeup: false,
            offwake: false,
            pagefault: false,
            brk: false,
            mmap: false,
            munmap: false,
            blockio: false,
            ..Self::default()
        }
    }

    /// Whether `kind` is recorded with these options.
    pub fn records(&self, kind: EventKind) -> bool {
        match kind {
            EventKind::Cpu
            | EventKind::HotCold
            | EventKind::MallocInUse
            | EventKind::MallocInUseObjects => false,
            EventKind::OffCpu => self.offcpu,
            EventKind::Wakeup => self.wakeup,
            EventKind::OffWake => self.offwake,
            EventKind::PageFault => self.pagefault,
            EventKind::Brk => self.brk,
            EventKind::Mmap => self.mmap,
            EventKind::Munmap => self.munmap,
            EventKind::BlockIo => self.blockio,
            EventKind::Malloc | EventKind::MallocObjects => self.malloc.any(),
        }
    }
}

pub use super::programs::{BlockHooks, SyscallHooks};

/// Which hooks the loaded programs use, for `emberd check` and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hooks {
    /// brk, mmap, munmap (None: all three off).
    pub syscalls: Option<SyscallHooks>,
    /// Block I/O (None: off).
    pub block: Option<BlockHooks>,
    /// `block_rq_merge` exists: merged requests leave uncharged.
    pub rq_merge: bool,
    /// block_rq_issue, _requeue and _merge pass the queue first (before
    /// Linux 5.11).
    pub rq_after_queue: bool,
}

/// In words, for the daemon's log: `brk/mmap/munmap: off; block I/O:
/// block_io_start/block_io_done`.
impl std::fmt::Display for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let syscalls = match self.syscalls {
            Some(SyscallHooks::Tracepoints) => "classic syscalls:sys_{enter,exit}_* tracepoints",
            Some(SyscallHooks::RawSyscalls) => {
                "raw sys_enter/sys_exit tracepoints (tracefs not mounted: every syscall runs a program)"
            }
            None => "off",
        };
        let block = match self.block {
            Some(BlockHooks::IoStartDone) => "block_io_start/block_io_done",
            Some(BlockHooks::RqIssueComplete) => "block_rq_issue/block_rq_complete",
            None => "off",
        };
        write!(f, "brk/mmap/munmap: {syscalls}; block I/O: {block}")?;
        if self.block == Some(BlockHooks::RqIssueComplete) && self.rq_merge {
            f.write_str(" (merged requests left uncharged)")?;
        }
        Ok(())
    }
}

impl Hooks {
    /// The hooks this kernel and mount table offer for `options`.
    /// `EMBERD_TEST_NO_TRACEFS=1` and `EMBERD_TEST_BLOCK_RQ=1` force the
    /// fallbacks (tests of them on a machine that has the better hooks).
    pub fn choose(options: &EventOptions) -> Self {
        let tracefs = std::env::var_os("EMBERD_TEST_NO_TRACEFS").is_none()
            && tracefs_has("syscalls/sys_enter_brk");
        // One parse of the kernel's BTF (megabytes) for the three questions.
        let btf = options
            .blockio
            .then(libbpf_rs::btf::Btf::from_vmlinux)
            .and_then(Result::ok);
        let params = |name| btf.as_ref().and_then(|b| tracepoint_params(b, name));
        let (io_start, rq_merge) = (
            params("block_io_start").is_some(),
            params("block_rq_merge").is_some(),
        );
        // block_rq_issue passed the queue before the request before Linux
        // 5.11: three parameters (the tracepoint's data first), not two.
        let rq_params = params("block_rq_issue");
        tracing::debug!("block_rq_issue's BTF prototype has {rq_params:?} parameters");
        let io_start = io_start && std::env::var_os("EMBERD_TEST_BLOCK_RQ").is_none();
        Self {
            syscalls: options.syscalls().then_some(if tracefs {
                SyscallHooks::Tracepoints
            } else {
                SyscallHooks::RawSyscalls
            }),
            block: options.blockio.then_some(if io_start {
                BlockHooks::IoStartDone
            } else {
                BlockHooks::RqIssueComplete
            }),
            rq_merge,
            rq_after_queue: rq_params == Some(3),
        }
    }
}

/// The parameters of BTF tracepoint `name`'s prototype (its data pointer
/// first), None if the kernel's BTF has no such tracepoint.
fn tracepoint_params(btf: &libbpf_rs::btf::Btf<'_>, name: &str) -> Option<usize> {
    use libbpf_rs::btf::{BtfType, types::FuncProto};
    let ty = btf.type_by_name::<BtfType<'_>>(&format!("btf_trace_{name}"))?;
    // typedef -> pointer -> function prototype
    let proto = ty.skip_mods_and_typedefs().next_type()?;
    FuncProto::try_from(proto.skip_mods_and_typedefs())
        .ok()
        .map(|p| p.len())
}

/// Whether tracefs (where libbpf looks: /sys/kernel/tracing, then
/// /sys/kernel/debug/tracing) has the tracepoint `event` (`group/name`).
pub fn tracefs_has(event: &str) -> bool {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|root| std::path::Path::new(&format!("{root}/events/{event}/id")).exists())
}

/// The thread on the other side of an event: the waker of an off-wake chain.
#[derive(Debug, Clone)]
pub struct OtherSide {
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: std::sync::Arc<str>,
    /// Kernel stack.
    pub kernel: RawStack,
    /// User stack.
    pub user: RawStack,
}

/// One drained event aggregate.
#[derive(Debug, Clone)]
pub struct RawEvent {
    /// Which event.
    pub kind: EventKind,
    /// The thread charged, its stacks, and the value in `count`.
    pub sample: RawSample,
    /// For off-wake chains, the waker.
    pub waker: Option<OtherSide>,
    /// A leaf frame `[label]`: the device of block I/O, `anon`/`file` of mmap.
    pub label: Option<String>,
}

/// A change to the sampled live heap (malloc's in-use view).
#[derive(Debug, Clone)]
pub enum HeapChange {
    /// A sampled allocation, tracked until freed.
    Alloc {
        /// The allocating thread, its user stack, and the weighed bytes in `count`.
        sample: RawSample,
        /// Weighed objects.
        objects: u64,
        /// The address returned.
        addr: u64,
    },
    /// The free of a sampled allocation.
    Free {
        /// The process.
        pid: Pid,
        /// The address freed.
        addr: u64,
    },
}

/// One drain of the events programs.
#[derive(Debug, Default)]
pub struct EventsDrain {
    /// Aggregates of the counts map.
    pub events: Vec<RawEvent>,
    /// Sampled allocations and their frees, in order.
    pub heap: Vec<HeapChange>,
}

/// Counters of the events program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounters {
    /// sched_switch calls.
    pub switches: u64,
    /// sched_waking calls.
    pub wakeups: u64,
    /// Page-fault samples.
    pub pagefaults: u64,
    /// Off-CPU periods lost to a full blocked-thread table.
    pub blocked_full: u64,
    /// Off-CPU periods lost to a full counts buffer (kept by thread as
    /// `[dropped: counts map full]`).
    pub counts_full: u64,
    /// Wakeups lost to a full wake counts buffer.
    pub wakeup_counts_full: u64,
    /// Off-wake chains lost to a full wake counts buffer.
    pub offwake_counts_full: u64,
    /// Page-fault, block I/O and memory events lost to a full counts
    /// buffer.
    pub other_counts_full: u64,
    /// Stacks lost (collision or full map).
    pub stacks_lost: u64,
    /// Switch-outs skipped by `sample_one_in`.
    pub sampled_out: u64,
    /// New processes not announced because `new_tgids` was full.
    pub new_process_dropped: u64,
    /// Short off-CPU periods left out by `sample_below_ns`.
    pub short_offcpu_sampled_out: u64,
    /// Wakeups ending short blocks left out by `sample_below_ns`.
    pub short_wakeups_sampled_out: u64,
    /// `uv_timer_start` calls of node processes seen (`bpf/node_timers.h`).
    pub timer_arms: u64,
    /// Off-CPU periods charged to the stack that armed their timer.
    pub timer_waits: u64,
    /// Off-CPU periods begun: a thread left the CPU in a counted state and
    /// its state was kept (each ends in a charge, a sample-out or a bound).
    pub offcpu_begun: u64,
    /// Off-CPU periods ended: a thread with a kept period ran again.
    pub offcpu_ended: u64,
    /// Pre-5.18 programs: threads preempted on their way to sleep, counted
    /// as running (no period begun).
    pub preempted_asleep: u64,
    /// brk() calls that grew the heap.
    pub brk: u64,
    /// mmap() calls.
    pub mmap: u64,
    /// munmap() calls.
    pub munmap: u64,
    /// brk/mmap/munmap calls lost: their entry could not be kept.
    pub syscall_state_full: u64,
    /// Block I/O requests recorded.
    pub blockio: u64,
    /// Completions without a recorded start.
    pub blockio_unmatched: u64,
    /// Requests lost to a full in-flight table.
    pub blockio_full: u64,
    /// Requests whose completion was not seen (their address started
    /// again): never charged.
    pub blockio_end_not_seen: u64,
    /// Runs skipped because another program of the object was using the
    /// CPU's scratch (an interrupt's wakeup inside a page fault, say).
    pub nested_skipped: u64,
    /// New stacks refused because their user held half of the stack map.
    pub stacks_over_share: u64,
    /// Events lost because the dropped-events map was full too.
    pub dropped_full: u64,
    /// Off-CPU periods lost because their user held their share of the
    /// bounded form's blocked-thread table.
    pub blocked_over_share: u64,
    /// Entries of the bounded form's blocked-thread table whose thread was
    /// gone, deleted by the agent's sweep; counted by the agent.
    pub blocked_swept: u64,
    /// Stack keys of drained events the stack map no longer had (drawn
    /// as `[lost]`); counted by the agent, not the programs.
    pub missing_at_drain: u64,
    /// Allocation calls seen in chosen processes.
    pub malloc_calls: u64,
    /// Allocations sampled.
    pub malloc_sampled: u64,
    /// free() calls seen.
    pub free_calls: u64,
    /// Frees of sampled allocations.
    pub free_tracked: u64,
    /// Sampled allocations not tracked live (table full): allocated only.
    pub malloc_live_full: u64,
    /// Heap records lost to a full ring buffer.
    pub heap_ring_full: u64,
}

/// Keys the agent's early aggregate (see [`EventSampler::drain_early`])
/// holds at most, per entry of one counts buffer: 1, 16384 keys at the
/// default, a table of at most 3.7 MB (32768 buckets of a 104-byte key,
/// its value and a control byte), freed at each drain. Past that the
/// collector drains in full at once, as it did before the aggregate. Twice
/// that holds more of a busy second but lets a batch to name reach 65,000
/// keys, and the names of a batch are what the daemon's peak RSS follows:
/// beside a compile, under the pool of
/// `blocking_pool_with_naps_loses_below_a_thousandth`, it peaked at 227
/// and 264 MB, against 86 MB in 4 runs with this bound.
pub const EARLY_ENTRIES_PER_BUFFER: usize = 1;

/// An `event_key` compared and hashed by its bytes (the generated type
/// has neither).
#[derive(Clone, Copy)]
struct EventKeyBytes(types::event_key);

impl EventKeyBytes {
    fn bytes(&self) -> &[u8] {
        // SAFETY: event_key is plain old data (src/bpf.rs), and every key
        // here came from the kernel whole, padding included (the programs
        // zero their scratch key before filling it).
        unsafe { plain::as_bytes(&self.0) }
    }
}

impl PartialEq for EventKeyBytes {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for EventKeyBytes {}

impl std::hash::Hash for EventKeyBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

/// The loaded events programs. Dropping detaches and unloads them.
pub struct EventSampler {
    skel: EventsSkel<'static>,
    _links: Vec<Link>,
    options: EventOptions,
    drains: u64,
    /// See [`EventCounters::missing_at_drain`].
    missing_stacks: u64,
    /// See [`EventCounters::blocked_swept`].
    blocked_swept: u64,
    /// The thread id the last sweep of `blocked_by_tid` checked up to.
    sweep_from: u32,
    sched_switch_compat: bool,
    form: ProgramForm,
    /// The task iterator that stamps held stacks (None where iterators or
    /// task storage in them are not available: collection then waits out
    /// the longest block).
    held_stacks: Option<Link>,
    hooks: Hooks,
    malloc: super::malloc::MallocProbes,
    heap_ring: Option<super::malloc::HeapRing>,
    /// Node's timer uprobe program, if loaded (`bpf/node_timers.h`).
    node_timer: Option<&'static str>,
    node_timers: super::node_timers::NodeTimers,
    /// Counts taken by early drains, by key, until the next full drain.
    early: HashMap<EventKeyBytes, u64>,
}

impl fmt::Debug for EventSampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSampler")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Bytes of the heap ring buffer (alloc and free records of sampled
/// allocations, read every drain): 1 MiB holds about 14,000 records.
const HEAP_RING_BYTES: u32 = 1 << 20;

/// `DROPPED_LABEL` in `bpf/events.bpf.c`: events a full counts buffer could
/// not take, kept by thread without stacks.
const DROPPED_LABEL: &str = "!counts_full";

/// How often the bounded form's blocked-thread table is swept for threads
/// that are gone, in drains.
const SWEEP_EVERY: u64 = 5;

/// Threads a sweep checks for (`/proc/TID`), at most: a few microseconds
/// each.
const SWEEP_CHECKS: usize = 4096;

/// How often unused stacks are collected, in drains.
const STACK_GC_EVERY: u64 = 2;

/// With held stacks stamped by the task iterator, stacks unused this long
/// are collected: longer than a drain and the flip that precedes it.
const HELD_STACK_HORIZON_NS: u64 = 4_000_000_000;

impl Plan {
    /// The plan for `options` on the hooks chosen, in `form`, with the
    /// pre-5.18 sched_switch program if `compat`.
    fn of(options: &EventOptions, hooks: Hooks, form: ProgramForm, compat: bool) -> Self {
        Self {
            form,
            sched: options.offcpu || options.wakeup || options.offwake,
            compat,
            pagefault: options.pagefault,
            syscalls: hooks.syscalls,
            brk: options.brk,
            mmap: options.mmap,
            munmap: options.munmap,
            block: hooks.block,
            rq_merge: hooks.rq_merge,
            malloc: options.malloc.any(),
        }
    }
}

/// The loaded program `name` (a name of [`programs::PROGRAMS`]).
fn program<'o>(
    obj: &'o libbpf_rs::Object,
    name: &'static str,
) -> Result<ProgramMut<'o>, CollectError> {
    obj.progs_mut()
        .find(|p| p.name() == name)
        .ok_or(CollectError::Programs(ProgramTableError::Missing(name)))
}

/// Opens, configures and loads `bpf/events.bpf.c` with one of the two
/// sched_switch programs.
fn load(
    options: &EventOptions,
    hooks: Hooks,
    unwind: &UnwindMaps,
    plan: &Plan,
) -> Result<EventsSkel<'static>, CollectError> {
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = EventsSkelBuilder::default()
        .open(storage)
        .map_err(|source| CollectError::LoadEvents { source })?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("events.bpf.c has read-only globals");
    rodata.py_code_share = super::py_code_share(unwind.py_codes.max_entries());
    rodata.unwind_config.thread_size = forms::thread_size().bytes;
    let cfg = &mut rodata.config;
    let sched = options.offcpu || options.wakeup || options.offwake;
    cfg.min_block_ns = options.min_block_ns;
    cfg.max_block_ns = options.max_block_ns;
    cfg.state_mask = options.state_mask;
    cfg.sample_one_in = options.sample_one_in;
    cfg.pagefault_period = options.pagefault_period;
    cfg.sample_below_ns = options.sample_below_ns;
    cfg.target_tgid = options.pid.map_or(0, |p| p.0);
    // Wakeup and off-wake need the blocked-thread table that off-CPU fills.
    cfg.offcpu = u8::from(sched);
    cfg.wakeup = u8::from(options.wakeup);
    cfg.offwake = u8::from(options.offwake);
    cfg.brk = u8::from(options.brk);
    cfg.mmap = u8::from(options.mmap);
    cfg.munmap = u8::from(options.munmap);
    cfg.blockio = u8::from(options.blockio);
    let bounded = plan.form == ProgramForm::Bounded;
    cfg.bounded = u8::from(bounded);
    cfg.rq_after_queue = u8::from(hooks.rq_after_queue);
    cfg.malloc_sample_bytes = options.malloc_sample_bytes;
    cfg.stack_share = u64::from(options.stack_entries.max(64) / 2);
    rodata.unwind_config.bounded = u8::from(bounded);
    let blocked = options.blocked_threads.max(64);
    cfg.blocked_share = blocked / 2;
    // Woken to drain early once a buffer is half full: a busy thread pool
    // fills 16384 keys in well under the 1 s between drains.
    let counts = options.counts_entries.max(16);
    cfg.drain_at = u64::from(counts / 2);
    open.maps
        .event_stacks
        .set_max_entries(options.stack_entries.max(64))
        .map_err(|source| CollectError::LoadEvents { source })?;
    for map in [
        &mut open.maps.event_counts0,
        &mut open.maps.event_counts1,
        &mut open.maps.wake_counts0,
        &mut open.maps.wake_counts1,
    ] {
        map.set_max_entries(counts)
            .map_err(|source| CollectError::LoadEvents { source })?;
    }
    // One copy of the tables and process mappings for both objects.
    use std::os::fd::AsFd;
    for (map, shared) in [
        (&mut open.maps.unwind_rows, &unwind.rows),
        (&mut open.maps.unwind_infos, &unwind.infos),
        (&mut open.maps.proc_unwind, &unwind.procs),
        (&mut open.maps.unwind_refresh, &unwind.refresh),
        (&mut open.maps.unwind_refresh_root, &unwind.refresh_root),
        (
            &mut open.maps.unwind_refresh_pending,
            &unwind.refresh_pending,
        ),
        (&mut open.maps.py_procs, &unwind.py_procs),
        (&mut open.maps.hs_procs, &unwind.hs_procs),
        (&mut open.maps.v8_procs, &unwind.v8_procs),
        (&mut open.maps.py_codes, &unwind.py_codes),
        (&mut open.maps.py_codes_by_uid, &unwind.py_codes_by_uid),
        (&mut open.maps.file_tables, &unwind.files),
        (&mut open.maps.exec_at, &unwind.exec_at),
        (&mut open.maps.sub_uids, &unwind.sub_uids),
        (&mut open.maps.sub_uid_min, &unwind.sub_uid_min),
    ] {
        map.reuse_fd(shared.as_fd())
            .map_err(|source| CollectError::LoadEvents { source })?;
    }
    // The maps of events that are off shrink to nothing.
    let malloc = options.malloc.any();
    let m = &mut open.maps;
    let off = |on: bool| (!on).then_some(1);
    for (map, entries) in [
        (
            &mut m.heap_live,
            Some(if malloc {
                options.malloc_live_entries.max(1)
            } else {
                1
            }),
        ),
        (&mut m.alloc_calls, off(malloc)),
        // A ring buffer is at least a page.
        (
            &mut m.heap_events,
            Some(if malloc { HEAP_RING_BYTES } else { 4096 }),
        ),
        (&mut m.io_in_flight, off(options.blockio)),
        (&mut m.io_threads, off(options.blockio)),
        (&mut m.syscall_entries, off(options.syscalls())),
        (&mut m.timer_arms, off(sched)),
        // The bounded form's off-CPU state, by thread id (the loop form's
        // is task storage, which grows with the threads).
        (
            &mut m.blocked_by_tid,
            Some(if bounded && sched { blocked } else { 1 }),
        ),
        (&mut m.blocked_by_uid, off(bounded && sched)),
    ] {
        if let Some(n) = entries {
            map.set_max_entries(n)
                .map_err(|source| CollectError::LoadEvents { source })?;
        }
    }
    // Task storage does not exist before Linux 5.11: not even created.
    if bounded {
        m.blocked_threads
            .set_autocreate(false)
            .map_err(|source| CollectError::LoadEvents { source })?;
    }
    // Only what is switched on is loaded: an event that is off costs
    // nothing. Which program serves what: src/collect/programs.rs.
    let names: Vec<String> = open
        .open_object()
        .progs()
        .map(|p| p.name().to_string_lossy().into_owned())
        .collect();
    programs::check_names(names.iter().map(String::as_str))?;
    for mut prog in open.open_object_mut().progs_mut() {
        let on = programs::loads(plan, &prog.name().to_string_lossy());
        prog.set_autoload(on);
    }
    open.load()
        .map_err(|source| CollectError::LoadEvents { source })
}

impl EventSampler {
    /// Loads `bpf/events.bpf.c` and attaches what `options` switches on. It
    /// unwinds user stacks with the CPU sampler's tables (`unwind`). If the
    /// memory and I/O events keep the programs from loading, they are
    /// switched off (with an error in the log) and the others go on.
    pub fn start(options: EventOptions, unwind: &UnwindMaps) -> Result<Self, CollectError> {
        match Self::start_all(options.clone(), unwind) {
            Ok(s) => Ok(s),
            Err(e) if options.syscalls() || options.blockio || options.malloc.any() => {
                tracing::error!(
                    "the memory and I/O events did not load or attach ({e}); brk, mmap, munmap, blockio and malloc are off, the other events go on"
                );
                let rest = EventOptions {
                    brk: false,
                    mmap: false,
                    munmap: false,
                    blockio: false,
                    malloc: MallocTargets::default(),
                    ..options
                };
                if rest.any() {
                    Self::start_all(rest, unwind)
                } else {
                    Err(e)
                }
            }
            Err(e) => Err(e),
        }
    }

    fn start_all(options: EventOptions, unwind: &UnwindMaps) -> Result<Self, CollectError> {
        if options.sample_one_in == 0 || options.pagefault_period == 0 {
            return Err(CollectError::Options(
                "offcpu_sample_one_in and pagefault_period must be at least 1".into(),
            ));
        }
        if options.min_block_ns > options.max_block_ns {
            return Err(CollectError::Options(
                "offcpu_min_block must not exceed offcpu_max_block".into(),
            ));
        }
        let form = forms::chosen().form;
        let hooks = Hooks::choose(&options);
        let plan = |compat| Plan::of(&options, hooks, form, compat);
        // sched_switch has passed prev_state since Linux 5.18; before, the
        // verifier rejects reading it, and the compat program reads the
        // state from the task instead. EMBERD_TEST_SCHED_SWITCH_COMPAT=1
        // forces the compat program (tests of the fallback).
        let force_compat = std::env::var_os("EMBERD_TEST_SCHED_SWITCH_COMPAT").is_some();
        // The bounded form has only the pre-5.18 sched_switch program, which
        // reads the state from the task on every kernel.
        let (skel, plan) = if force_compat || form == ProgramForm::Bounded {
            (load(&options, hooks, unwind, &plan(true))?, plan(true))
        } else {
            match load(&options, hooks, unwind, &plan(false)) {
                Ok(skel) => (skel, plan(false)),
                Err(e) if plan(false).sched => {
                    tracing::warn!(
                        "sched_switch with prev_state did not load ({e}); using the pre-5.18 form that reads the task's state"
                    );
                    (load(&options, hooks, unwind, &plan(true))?, plan(true))
                }
                Err(e) => return Err(e),
            }
        };
        assert_eq!(
            skel.maps.event_counts0.key_size() as usize,
            std::mem::size_of::<types::event_key>(),
            "bpf/emberd.h and src/bpf.rs disagree on event_key"
        );
        let mut links = Vec::new();
        let mut held_stacks = None;
        for (row, name) in programs::chosen(&plan) {
            let prog = program(skel.object(), name)?;
            let attach = |r: libbpf_rs::Result<Link>| {
                r.map_err(|source| {
                    tracing::debug!("attaching {name} ({}) failed", row.serves);
                    CollectError::LoadEvents { source }
                })
            };
            match row.attach {
                Attach::Auto => links.push(attach(prog.attach())?),
                Attach::PageFaults => {
                    for cpu in online_cpus()? {
                        let event = PerfEvent::page_faults(cpu, options.pagefault_period)?;
                        let link = prog
                            .attach_perf_event(event.as_raw_fd())
                            .map_err(|source| CollectError::Attach { cpu, source })?;
                        event.into_raw_fd();
                        links.push(link);
                    }
                }
                Attach::Syscall(tracepoint) => links.push(attach(
                    prog.attach_tracepoint(libbpf_rs::TracepointCategory::Syscalls, tracepoint),
                )?),
                Attach::TaskIterator => {
                    held_stacks = prog
                        .attach()
                        .map_err(|e| {
                            tracing::debug!(
                                "task iterator unavailable ({e}); stacks kept for the longest block"
                            )
                        })
                        .ok();
                }
                // Per process, as they appear: see watch_process and
                // attach_node_timer.
                Attach::Uprobe(_) | Attach::NodeTimer => {}
            }
        }
        let heap_ring = if options.malloc.any() {
            Some(super::malloc::HeapRing::new(&skel.maps.heap_events)?)
        } else {
            None
        };
        let compat = plan.compat;
        Ok(Self {
            skel,
            _links: links,
            options,
            drains: 0,
            missing_stacks: 0,
            blocked_swept: 0,
            sweep_from: 0,
            sched_switch_compat: compat,
            form,
            held_stacks,
            hooks,
            malloc: super::malloc::MallocProbes::default(),
            heap_ring,
            node_timer: programs::node_timer(&plan),
            node_timers: super::node_timers::NodeTimers::default(),
            early: HashMap::new(),
        })
    }

    /// The hooks the loaded programs use.
    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    /// Attaches malloc's uprobes to `pid` if the options name it (by id or
    /// name) and it maps a libc. Called for every process seen, and for
    /// every process at start.
    pub fn watch_process(&mut self, pid: Pid) {
        if !self.options.malloc.any() {
            return;
        }
        let obj = self.skel.object();
        let find = |role| {
            let name = programs::uprobe(self.form, role)
                .ok_or_else(|| ProgramTableError::NoUprobe(format!("{role:?}")))?;
            program(obj, name)
        };
        let found = (|| -> Result<_, CollectError> {
            let enter = match self.form {
                ProgramForm::Loop => vec![find(UprobeRole::EnterByCookie)?],
                ProgramForm::Bounded => (0..super::malloc::ALLOC_FUNCTIONS.len())
                    .map(|i| find(UprobeRole::Enter(i)))
                    .collect::<Result<_, _>>()?,
            };
            Ok((enter, find(UprobeRole::Exit)?, find(UprobeRole::Free)?))
        })();
        let (enter, exit, free) = match found {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("malloc's uprobes cannot be attached: {e}");
                return;
            }
        };
        let enter = match enter.as_slice() {
            [one] => super::malloc::EnterPrograms::ByCookie(one),
            [a, b, c, d, e] => super::malloc::EnterPrograms::PerFunction([a, b, c, d, e]),
            _ => unreachable!("one entry program, or one per ALLOC_FUNCTIONS"),
        };
        self.malloc.watch(
            pid,
            &self.options.malloc,
            super::malloc::Programs {
                enter,
                exit: &exit,
                free: &free,
            },
        );
    }

    /// Traps `uv_timer_start` of a node process whose JavaScript frames
    /// are read (once per process), so its event loop's timer waits are
    /// charged to the JavaScript that armed them. Nothing when off-CPU
    /// events are off.
    pub fn attach_node_timer(&mut self, hook: &super::node_timers::TimerHook) {
        let Some(name) = self.node_timer else { return };
        match program(self.skel.object(), name) {
            Ok(prog) => self.node_timers.attach(hook, &prog),
            Err(e) => tracing::error!("node's timer uprobe cannot be attached: {e}"),
        }
    }

    /// Processes malloc's uprobes are attached to now.
    pub fn malloc_processes(&self) -> Vec<Pid> {
        self.malloc.attached()
    }

    /// Processes malloc could not be attached to, by reason (cumulative).
    pub fn malloc_refusals(&self) -> super::malloc::Refusals {
        self.malloc.refusals()
    }

    /// The form of the programs loaded (see [`forms`]).
    pub fn form(&self) -> ProgramForm {
        self.form
    }

    /// Whether the pre-5.18 sched_switch program (state read from the
    /// task) is the one attached.
    pub fn sched_switch_compat(&self) -> bool {
        self.sched_switch_compat
    }

    /// The options it runs with.
    pub fn options(&self) -> &EventOptions {
        &self.options
    }

    /// Cumulative counters, summed over CPUs.
    pub fn counters(&self) -> Result<EventCounters, CollectError> {
        let map = &self.skel.maps.event_counters;
        let mut v = [0u64; c::ECOUNTER_MAX as usize];
        super::percpu_sums(map, "event_counters", &mut v)?;
        let v = |i: u32| v[i as usize];
        Ok(EventCounters {
            switches: v(c::ECOUNTER_SWITCHES),
            wakeups: v(c::ECOUNTER_WAKEUPS),
            pagefaults: v(c::ECOUNTER_PAGEFAULTS),
            blocked_full: v(c::ECOUNTER_BLOCKED_FULL),
            counts_full: v(c::ECOUNTER_COUNTS_FULL),
            stacks_lost: v(c::ECOUNTER_STACK_LOST),
            sampled_out: v(c::ECOUNTER_SAMPLED_OUT),
            new_process_dropped: v(c::ECOUNTER_NEW_PROCESS_DROPPED),
            short_offcpu_sampled_out: v(c::ECOUNTER_SHORT_OFFCPU_SAMPLED_OUT),
            short_wakeups_sampled_out: v(c::ECOUNTER_SHORT_WAKEUP_SAMPLED_OUT),
            timer_arms: v(c::ECOUNTER_TIMER_ARMS),
            timer_waits: v(c::ECOUNTER_TIMER_WAITS),
            offcpu_begun: v(c::ECOUNTER_OFFCPU_BEGUN),
            offcpu_ended: v(c::ECOUNTER_OFFCPU_ENDED),
            preempted_asleep: v(c::ECOUNTER_PREEMPTED_ASLEEP),
            brk: v(c::ECOUNTER_BRK),
            mmap: v(c::ECOUNTER_MMAP),
            munmap: v(c::ECOUNTER_MUNMAP),
            syscall_state_full: v(c::ECOUNTER_SYSCALL_STATE_FULL),
            blockio: v(c::ECOUNTER_BLOCKIO),
            blockio_unmatched: v(c::ECOUNTER_BLOCKIO_UNMATCHED),
            blockio_full: v(c::ECOUNTER_BLOCKIO_FULL),
            malloc_calls: v(c::ECOUNTER_MALLOC_CALLS),
            malloc_sampled: v(c::ECOUNTER_MALLOC_SAMPLED),
            free_calls: v(c::ECOUNTER_FREE_CALLS),
            free_tracked: v(c::ECOUNTER_FREE_TRACKED),
            malloc_live_full: v(c::ECOUNTER_MALLOC_LIVE_FULL),
            heap_ring_full: v(c::ECOUNTER_HEAP_RING_FULL),
            blockio_end_not_seen: v(c::ECOUNTER_BLOCKIO_END_NOT_SEEN),
            nested_skipped: v(c::ECOUNTER_NESTED_SKIPPED),
            stacks_over_share: v(c::ECOUNTER_STACK_SHARE),
            dropped_full: v(c::ECOUNTER_DROPPED_FULL),
            blocked_over_share: v(c::ECOUNTER_BLOCKED_SHARE),
            wakeup_counts_full: v(c::ECOUNTER_WAKEUP_COUNTS_FULL),
            offwake_counts_full: v(c::ECOUNTER_OFFWAKE_COUNTS_FULL),
            other_counts_full: v(c::ECOUNTER_OTHER_COUNTS_FULL),
            blocked_swept: self.blocked_swept,
            missing_at_drain: self.missing_stacks,
        })
    }

    /// Cumulative counters of these programs' user-stack unwinder.
    pub fn unwind_counters(&self) -> Result<UnwindCounters, CollectError> {
        UnwindCounters::read(&self.skel.maps.unwind_counters)
    }

    /// A handle on these programs' ring buffer of new-process notices.
    pub fn new_tgids(&self) -> Result<libbpf_rs::MapHandle, CollectError> {
        libbpf_rs::MapHandle::try_from(&self.skel.maps.new_tgids).map_err(|source| {
            CollectError::Drain {
                map: "new_tgids",
                source,
            }
        })
    }

    /// A handle on its `seen_tgids` (see
    /// [`super::new_process::NewProcessRing::forget`]).
    pub fn seen_tgids(&self) -> Result<libbpf_rs::MapHandle, CollectError> {
        libbpf_rs::MapHandle::try_from(&self.skel.maps.seen_tgids).map_err(|source| {
            CollectError::Drain {
                map: "seen_tgids",
                source,
            }
        })
    }

    /// Flips the counts buffers and empties the old ones: counts, wake
    /// counts, and what they could not take (by thread, with the label the
    /// programs gave it).
    fn take_buffers(&mut self) -> Result<Vec<(types::event_key, u64)>, CollectError> {
        let bss = self
            .skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("events.bpf.c has a .bss");
        let old = super::flip_buffer(&mut bss.active_buffer, &bss.writers);
        // The runs writing the old buffer are done (flip_buffer waited).
        bss.inserted[old as usize & 1] = 0;
        bss.wake_inserted[old as usize & 1] = 0;
        let maps = &self.skel.maps;
        let (counts, wake, dropped) = if old == 0 {
            (
                &maps.event_counts0,
                &maps.wake_counts0,
                &maps.event_dropped0,
            )
        } else {
            (
                &maps.event_counts1,
                &maps.wake_counts1,
                &maps.event_dropped1,
            )
        };
        let mut entries: Vec<(types::event_key, u64)> =
            super::drain_counts(counts, "event_counts")?;
        for (map, name) in [(wake, "wake_counts"), (dropped, "event_dropped")] {
            entries.extend(super::drain_counts::<types::event_key>(map, name)?);
        }
        Ok(entries)
    }

    /// Empties the kernel's counts buffers into the agent's early
    /// aggregate, to be named and stored with the next [`Self::drain`]:
    /// for a buffer filling faster than the drain interval (the programs
    /// ask through `EMBERD_DRAIN_NOW`). A copy and a merge by key, no
    /// stacks read or named, so the kernel's buffers empty in milliseconds
    /// however slow the naming, and a key seen in several early drains is
    /// named and stored once. False once the aggregate holds
    /// [`EARLY_ENTRIES_PER_BUFFER`] times a buffer's entries: the caller
    /// then drains in full.
    pub fn drain_early(&mut self) -> Result<bool, CollectError> {
        for (k, v) in self.take_buffers()? {
            *self.early.entry(EventKeyBytes(k)).or_insert(0) += v;
        }
        let cap = EARLY_ENTRIES_PER_BUFFER * self.options.counts_entries.max(16) as usize;
        Ok(self.early.len() < cap)
    }

    /// Empties the counts map and the heap ring buffer.
    pub fn drain(&mut self) -> Result<EventsDrain, CollectError> {
        // Ring records first: an alloc's stack is stamped in use when it is
        // taken, and read here, before the collection below.
        let heap_records = match &self.heap_ring {
            Some(ring) => ring.consume()?,
            None => Vec::new(),
        };
        let exited = self.malloc.forget_exited();
        if !exited.is_empty() {
            self.forget_heap_of(&exited);
        }
        self.node_timers.forget_exited();
        let mut entries = self.take_buffers()?;
        if !self.early.is_empty() {
            tracing::debug!("{} event keys from early drains", self.early.len());
        }
        // Taken, not drained: the table's memory goes with it rather than
        // staying at its busiest second's size.
        entries.extend(
            std::mem::take(&mut self.early)
                .into_iter()
                .map(|(k, v)| (k.0, v)),
        );
        let maps = &self.skel.maps;
        let mut stacks: HashMap<u64, RawStack> = HashMap::new();
        let missing = &mut self.missing_stacks;
        // A stored key the map no longer has is drawn as [lost] and counted.
        let mut stack = |key| {
            let s = stack_by_key(&mut stacks, key, |key| {
                stack::read_stored(&maps.event_stacks, key)
            })?;
            if key > stack::STACK_LOST && s == RawStack::Lost {
                *missing += 1;
            }
            Ok::<RawStack, CollectError>(s)
        };
        let mut out = Vec::with_capacity(entries.len());
        for (k, value) in entries {
            let Some(kind) = EventKind::from_bpf_id(k.event) else {
                continue;
            };
            let sample = RawSample {
                pid: Pid(k.tgid),
                tid: Tid(k.pid),
                comm: super::comm_name(&k.comm),
                kernel: stack(k.kstack)?,
                user: stack(k.ustack)?,
                count: value,
                at_ms: None,
                account: k.account,
            };
            let waker = (kind == EventKind::OffWake).then(|| -> Result<OtherSide, CollectError> {
                Ok(OtherSide {
                    pid: Pid(k.waker_tgid),
                    tid: Tid(k.waker_pid),
                    comm: super::comm_name(&k.waker_comm),
                    kernel: stack(k.waker_kstack)?,
                    user: stack(k.waker_ustack)?,
                })
            });
            out.push(RawEvent {
                kind,
                sample,
                waker: waker.transpose()?,
                label: (k.label[0] != 0).then(|| {
                    let label = super::comm_to_string(&k.label);
                    if label == DROPPED_LABEL {
                        "dropped: counts map full".to_owned()
                    } else {
                        label
                    }
                }),
            });
        }
        let mut heap = Vec::with_capacity(heap_records.len());
        for r in heap_records {
            heap.push(match r.kind {
                c::HEAP_ALLOC => HeapChange::Alloc {
                    sample: RawSample {
                        pid: Pid(r.tgid),
                        tid: Tid(r.pid),
                        comm: super::comm_name(&r.comm),
                        kernel: RawStack::None,
                        user: stack(r.ustack)?,
                        count: r.bytes,
                        at_ms: None,
                        account: r.account,
                    },
                    objects: r.objects,
                    addr: r.addr,
                },
                _ => HeapChange::Free {
                    pid: Pid(r.tgid),
                    addr: r.addr,
                },
            });
        }
        self.drains += 1;
        if self.drains.is_multiple_of(STACK_GC_EVERY) {
            self.collect_stacks()?;
        }
        if self.form == ProgramForm::Bounded && self.drains.is_multiple_of(SWEEP_EVERY) {
            self.sweep_blocked();
        }
        Ok(EventsDrain { events: out, heap })
    }

    /// Deletes the kernel's live sampled allocations of processes that are
    /// gone, which no free() will ever remove.
    fn forget_heap_of(&self, pids: &[Pid]) {
        let live = &self.skel.maps.heap_live;
        let gone: Vec<Vec<u8>> = live
            .keys()
            .filter(|k| {
                k.get(..4)
                    .and_then(|b| b.try_into().ok())
                    .is_some_and(|b| pids.contains(&Pid(u32::from_ne_bytes(b))))
            })
            .collect();
        for k in gone {
            let _ = live.delete(&k);
        }
    }

    /// Deletes stacks no blocked thread can still refer to: unused for
    /// longer than the maximum block time plus a margin. Any count naming
    /// one was drained long before.
    fn collect_stacks(&mut self) -> Result<(), CollectError> {
        let stacks = &self.skel.maps.event_stacks;
        let refreshed = self.held_stacks.as_ref().is_some_and(|link| {
            use std::io::Read;
            libbpf_rs::Iter::new(link)
                .and_then(|mut it| {
                    let mut sink = Vec::new();
                    it.read_to_end(&mut sink).map_err(libbpf_rs::Error::from)
                })
                .is_ok()
        });
        // Held stacks were just stamped: everything else unused for a few
        // drains is no longer referred to (counts are drained every second).
        let keep = if refreshed {
            HELD_STACK_HORIZON_NS
        } else {
            self.options.max_block_ns + 2_000_000_000
        };
        let horizon = crate::shared::clock::ktime_ns().saturating_sub(keep);
        // Requests in flight hold their stacks until they complete, however
        // long that takes.
        let in_flight = &self.skel.maps.io_in_flight;
        let mut held = std::collections::HashSet::new();
        if self.options.blockio {
            let at = |v: &[u8], off: usize| {
                v.get(off..off + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_ne_bytes)
            };
            for k in in_flight.keys() {
                if let Ok(Some(v)) = in_flight.lookup(&k, MapFlags::ANY) {
                    held.extend(at(&v, std::mem::offset_of!(types::io_start, kstack)));
                    held.extend(at(&v, std::mem::offset_of!(types::io_start, ustack)));
                }
            }
        }
        let mut stale: Vec<Vec<u8>> = Vec::new();
        let mut per_uid: HashMap<u32, u64> = HashMap::new();
        let complete = super::batch_each(stacks, false, |k, v| {
            if stack::last_used(v).is_some_and(|used| used < horizon)
                && !k
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .is_some_and(|b| held.contains(&u64::from_ne_bytes(b)))
            {
                stale.push(k.to_vec());
            } else if let Some(uid) = stack::owner(v) {
                *per_uid.entry(uid).or_default() += 1;
            }
        });
        for k in stale {
            let _ = stacks.delete(&k);
        }
        if complete {
            self.recount_shares(&per_uid);
        }
        Ok(())
    }

    /// Sets `stacks_by_uid` to the stacks each user holds after a
    /// collection (see [`super::recount_uid_shares`]).
    fn recount_shares(&self, per_uid: &HashMap<u32, u64>) {
        super::recount_uid_shares(&self.skel.maps.stacks_by_uid, per_uid);
    }

    /// Deletes the bounded form's off-CPU state of threads that are gone
    /// (no `/proc/TID`), which the programs' own deletes (exit, exec) missed,
    /// and recounts each user's share of the table. Checks at most
    /// [`SWEEP_CHECKS`] threads a sweep, going on from where the last one
    /// stopped, so a full table (32768) costs a few milliseconds a sweep.
    fn sweep_blocked(&mut self) {
        let map = &self.skel.maps.blocked_by_tid;
        let owner_at = std::mem::offset_of!(types::blocked, owner);
        let mut entries: Vec<(u32, u32)> = Vec::new();
        let complete = super::batch_each(map, false, |k, v| {
            if let (Some(k), Some(o)) = (k.get(..4), v.get(owner_at..owner_at + 4)) {
                entries.push((
                    u32::from_ne_bytes(k.try_into().expect("4 bytes")),
                    u32::from_ne_bytes(o.try_into().expect("4 bytes")),
                ));
            }
        });
        let plan = sweep_plan(entries, self.sweep_from, SWEEP_CHECKS, |tid| {
            std::path::Path::new(&format!("/proc/{tid}")).exists()
        });
        self.sweep_from = plan.next_from;
        for tid in &plan.gone {
            if map.delete(&tid.to_ne_bytes()).is_ok() {
                self.blocked_swept += 1;
            }
        }
        if complete {
            super::recount_uid_shares(&self.skel.maps.blocked_by_uid, &plan.per_uid);
        }
    }
}

/// What one sweep of the bounded form's off-CPU state finds (see
/// [`EventSampler::sweep_blocked`]).
#[derive(Debug, Default)]
struct SweepPlan {
    /// Threads found gone: their entries are deleted.
    gone: std::collections::HashSet<u32>,
    /// The thread id the next sweep starts from.
    next_from: u32,
    /// Entries each user holds, those gone left out.
    per_uid: HashMap<u32, u64>,
}

/// Checks at most `checks` of `entries` (thread id, owner), in thread-id
/// order from `from` on and around, with `is_live`.
fn sweep_plan(
    mut entries: Vec<(u32, u32)>,
    from: u32,
    checks: usize,
    is_live: impl Fn(u32) -> bool,
) -> SweepPlan {
    entries.sort_unstable();
    let start = entries.partition_point(|&(tid, _)| tid < from);
    let n = entries.len();
    let mut plan = SweepPlan {
        next_from: from,
        ..SweepPlan::default()
    };
    for i in 0..n.min(checks) {
        let (tid, _) = entries[(start + i) % n];
        plan.next_from = tid.wrapping_add(1);
        if !is_live(tid) {
            plan.gone.insert(tid);
        }
    }
    for &(tid, owner) in &entries {
        if !plan.gone.contains(&tid) {
            *plan.per_uid.entry(owner).or_default() += 1;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full table at the default size (32,768 entries, half of them
    /// threads that are gone): every entry is checked once in eight
    /// sweeps of [`SWEEP_CHECKS`], each gone one found once, and each
    /// user's count is of the live ones.
    #[test]
    fn sweeps_go_round_a_full_default_table() {
        let size = defaults::BLOCKED_THREADS;
        assert_eq!(size, 32_768);
        // Thread ids spread over the pid space, two users.
        let mut map: Vec<(u32, u32)> = (0..size)
            .map(|i| (1000 + i * 7, if i % 3 == 0 { 0 } else { 1000 }))
            .collect();
        let live = |tid: u32| (tid / 7).is_multiple_of(2);
        let mut from = 0;
        let mut found = 0;
        let mut sweeps = 0;
        while map.iter().any(|&(t, _)| !live(t)) {
            let plan = sweep_plan(map.clone(), from, SWEEP_CHECKS, live);
            assert!(plan.gone.len() <= SWEEP_CHECKS);
            found += plan.gone.len();
            from = plan.next_from;
            map.retain(|(t, _)| !plan.gone.contains(t));
            let mut want: HashMap<u32, u64> = HashMap::new();
            for &(_, o) in &map {
                *want.entry(o).or_default() += 1;
            }
            assert_eq!(plan.per_uid, want);
            sweeps += 1;
            assert!(sweeps <= 8, "still gone threads after 8 sweeps");
        }
        let gone = (0..size).filter(|i| !live(1000 + i * 7)).count();
        assert_eq!(found, gone);
        assert_eq!(map.len(), size as usize - gone);
    }

    /// The daemon logs its hooks in words, not as a Debug struct.
    #[test]
    fn hooks_read_as_words() {
        let off = Hooks {
            syscalls: None,
            block: None,
            rq_merge: false,
            rq_after_queue: false,
        };
        assert_eq!(off.to_string(), "brk/mmap/munmap: off; block I/O: off");
        let on = Hooks {
            syscalls: Some(SyscallHooks::Tracepoints),
            block: Some(BlockHooks::RqIssueComplete),
            rq_merge: true,
            rq_after_queue: false,
        };
        assert_eq!(
            on.to_string(),
            "brk/mmap/munmap: classic syscalls:sys_{enter,exit}_* tracepoints; block I/O: block_rq_issue/block_rq_complete (merged requests left uncharged)"
        );
    }

    /// Reads this machine's BTF: block_rq_issue lost its queue argument in
    /// Linux 5.11, sched_switch gained prev_state in 5.18.
    #[test]
    fn tracepoint_prototypes_are_read_from_the_kernels_btf() {
        assert!(
            std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
            "this test needs the kernel's BTF at /sys/kernel/btf/vmlinux"
        );
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut n = release.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (n.next().unwrap(), n.next().unwrap());
        assert!(
            version >= (5, 18),
            "written for Linux 5.18 or later, not {release}"
        );
        let btf = libbpf_rs::btf::Btf::from_vmlinux().expect("parsing the kernel's BTF");
        assert_eq!(tracepoint_params(&btf, "block_rq_issue"), Some(2));
        assert_eq!(tracepoint_params(&btf, "sched_switch"), Some(5));
        assert_eq!(tracepoint_params(&btf, "no_such_tracepoint"), None);
        let hooks = Hooks::choose(&EventOptions {
            blockio: true,
            ..EventOptions::default()
        });
        assert!(hooks.rq_merge && !hooks.rq_after_queue, "{hooks:?}");
    }
}
