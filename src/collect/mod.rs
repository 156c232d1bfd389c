//! Collect: the BPF CPU sampler and the drain that turns its maps into
//! [`RawSample`]s.
//!
//! The program counts samples under (thread, kernel stack, user stack) in one
//! of two buffers (a counts map and a stack map each). A drain flips the
//! buffer the program writes, then empties the other one: no sample races the
//! drain, and a stack id is never deleted while a count still refers to it.

mod counters;
pub mod events;
pub mod forms;
pub mod malloc;
pub mod metrics;
pub mod new_process;
pub mod node_timers;
mod perf_event;
pub mod privileges;
pub mod programs;
pub mod stack;

use std::collections::HashMap;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, MapMut};

pub use counters::{Counter, Counters};
pub use perf_event::{PerfEvent, online_cpus};
pub use stack::{StackEnd, UnwindCounters};

use crate::bpf::profile::{ProfileSkel, ProfileSkelBuilder};
use crate::bpf::types;

/// Defaults of [`SamplerOptions`].
pub mod defaults {
    /// Bytes of unwind rows (4 bytes each, `src/unwind/packed.rs`) the BPF
    /// row array holds at most by default ([`table_budget_bytes`] is less
    /// on hosts with under 2 GiB of memory). Measured here (`emberd
    /// unwind-tables`, packed): libc 0.1 MiB, python3.11 0.25 MiB, libjvm
    /// 0.75 MiB, node 1.4 MiB; a `cargo build --release` of emberd maps
    /// files whose tables take 25 MiB (rustc's libLLVM 5.8 MiB,
    /// librustc_driver 4.6 MiB, clang's libclang-cpp and libLLVM 7.8 MiB,
    /// cc1 1.9 MiB, cargo 1.7 MiB), not all at once. 32 MiB holds that
    /// with a quarter to spare. Kernel memory, allocated at load.
    pub const TABLE_BUDGET_BYTES: u64 = 32 << 20;

    /// The default table budget: [`TABLE_BUDGET_BYTES`], or 1/64 of the
    /// host's memory if that is less (a 1 GiB host: 16 MiB), in whole MiB,
    /// at least 4 MiB.
    pub fn table_budget_bytes() -> u64 {
        // SAFETY: sysinfo fills the struct it is given.
        let ram = unsafe {
            let mut si: libc::sysinfo = std::mem::zeroed();
            if libc::sysinfo(&mut si) == 0 {
                si.totalram.saturating_mul(u64::from(si.mem_unit.max(1)))
            } else {
                u64::MAX
            }
        };
        ((ram / 64) >> 20 << 20).clamp(4 << 20, TABLE_BUDGET_BYTES)
    }
    /// Processes whose mappings the BPF unwinder holds (about 5 KiB of
    /// kernel memory each, allocated as processes appear).
    pub const MAX_PROCESSES: u32 = 8192;
    /// Code objects whose names the Python walker keeps in BPF (`py_codes`,
    /// 512 bytes each: 2 MiB of kernel memory allocated at load). Each
    /// sampled code object is held from the sample to the next drain (1 s)
    /// and collected 4 s after its last use; one refused (its user holds
    /// half of the map, or it is full) is shown as `[python: code evicted]`.
    pub const PYTHON_CODE_ENTRIES: u32 = 4096;
    /// HotSpot JVMs whose code cache the Java walker reads (`hs_procs`,
    /// 168 bytes each, allocated as JVMs are found; preallocated before
    /// Linux 6.1). A user other than root holds at most half.
    pub const JAVA_PROCESSES: u32 = 1024;
    /// Node processes whose JavaScript frames the walker reads
    /// (`v8_procs`, 64 bytes each, allocated as they are found;
    /// preallocated before Linux 6.1). A user other than root holds at
    /// most half.
    pub const NODE_PROCESSES: u32 = 1024;
    /// Python processes whose frames the walker reads (`py_procs`, 80
    /// bytes each, allocated as they are found; preallocated before Linux
    /// 6.1). A user other than root holds at most half.
    pub const PYTHON_PROCESSES: u32 = 4096;
    /// Samples per second per CPU. 99, not 100, so sampling does not run in
    /// lock-step with work that is itself timed in round milliseconds.
    pub const FREQUENCY_HZ: u64 = 99;
    /// Entries of each of the two stack maps, at least. At 99 Hz each CPU
    /// gives at most 198 stacks (kernel + user) a drain, each drain empties
    /// its map, and stacks are keyed by a 64-bit hash (no bucket
    /// collisions): 16384 holds a drain of 80 busy CPUs; more CPUs get
    /// [`STACK_ENTRIES_PER_CPU`] each. About 1 KiB of kernel memory an
    /// entry, twice (double buffering).
    pub const STACK_MAP_ENTRIES: u32 = 16384;
    /// Stack-map entries per online CPU beyond the minimum.
    pub const STACK_ENTRIES_PER_CPU: u32 = 256;
    /// Entries of each of the two counts maps (distinct threads x stacks
    /// per drain), at least; [`COUNTS_ENTRIES_PER_CPU`] per CPU beyond.
    pub const COUNTS_MAP_ENTRIES: u32 = 10240;
    /// Counts-map entries per online CPU beyond the minimum: keys carry
    /// the sample's 20 ms tick, so a CPU fills up to 99 a second at 99 Hz;
    /// 256 leave room for a drain 2.5 s late.
    pub const COUNTS_ENTRIES_PER_CPU: u32 = 256;

    /// Stack-map entries for this host: the minimum, or per CPU.
    pub fn stack_map_entries() -> u32 {
        scaled(STACK_MAP_ENTRIES, STACK_ENTRIES_PER_CPU)
    }

    /// Counts-map entries for this host: the minimum, or per CPU.
    pub fn counts_map_entries() -> u32 {
        scaled(COUNTS_MAP_ENTRIES, COUNTS_ENTRIES_PER_CPU)
    }

    fn scaled(min: u32, per_cpu: u32) -> u32 {
        let cpus = super::online_cpus().map_or(1, |c| c.len() as u32);
        min.max(cpus.saturating_mul(per_cpu))
    }
}

pub use crate::shared::{Pid, Tid};

/// One side (kernel or user) of a sampled stack, as the kernel gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RawStack {
    /// There was no stack of this kind: a user-mode sample has no kernel
    /// stack, a kernel thread no user stack.
    None,
    /// The kernel had a stack but it could not be stored (collision, full map).
    Lost,
    /// Instruction pointers, innermost first.
    Ips {
        /// Instruction pointers, leaf first; shared by every key drained
        /// with the same stack.
        ips: Arc<[u64]>,
        /// How the walk ended: at the root, or why not.
        end: StackEnd,
    },
}

/// Samples of one thread with one pair of stacks, from one drain.
#[derive(Debug, Clone)]
pub struct RawSample {
    /// Process the thread belongs to.
    pub pid: Pid,
    /// The sampled thread.
    pub tid: Tid,
    /// The thread's name at sampling time.
    pub comm: Arc<str>,
    /// Kernel stack.
    pub kernel: RawStack,
    /// User stack.
    pub user: RawStack,
    /// Number of samples.
    pub count: u64,
    /// Store time (ms) of the 20 ms tick the samples fell in; `None` for
    /// events, which are aggregated per drain.
    pub at_ms: Option<u64>,
    /// The account the samples count in, as the BPF program read it with
    /// them (the thread's real uid, or the login user owning its subuid
    /// range: `shared::accounts`): known for a process gone before the
    /// agent could read its status file.
    pub account: u32,
}

/// Errors of the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The BPF object failed to open or load.
    #[error(
        "loading the BPF sampler failed: {source}\nhint: {}",
        forms::load_hint()
    )]
    Load {
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The events object (off-CPU, wakeup, page faults) failed to load or attach.
    #[error(
        "loading the event programs (off-CPU, wakeup, page faults, memory, block I/O) failed: {source}\nhint: {}; or switch them off with offcpu = wakeup = offwake = pagefault = false",
        forms::load_hint()
    )]
    LoadEvents {
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// perf_event_open failed.
    #[error(transparent)]
    PerfEvent(#[from] perf_event::PerfEventError),
    /// Attaching the program to a perf event failed.
    #[error("attaching the BPF sampler to the cpu-clock event of CPU {cpu} failed: {source}")]
    Attach {
        /// The CPU.
        cpu: u32,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// A map operation failed while draining.
    #[error("draining BPF map {map} failed: {source}")]
    Drain {
        /// Which map.
        map: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// Bad options.
    #[error("{0}")]
    Options(String),
    /// The program table and `bpf/events.bpf.c` disagree.
    #[error(transparent)]
    Programs(#[from] programs::ProgramTableError),
}

/// What to sample. Every field documents its default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SamplerOptions {
    /// Samples per second per CPU (default [`defaults::FREQUENCY_HZ`]).
    pub frequency_hz: u64,
    /// Only this process (default: every process).
    pub pid: Option<Pid>,
    /// Keep samples of the idle task (default: false).
    pub include_idle: bool,
    /// Entries of each stack map (default [`defaults::STACK_MAP_ENTRIES`]).
    pub stack_map_entries: u32,
    /// Entries of each counts map (default [`defaults::COUNTS_MAP_ENTRIES`]).
    pub counts_map_entries: u32,
    /// 4-byte words of the shared unwind-table array: the table budget in
    /// bytes / 4 (default [`defaults::table_budget_bytes`] / 4).
    pub unwind_rows: u32,
    /// Processes whose mappings the unwinder can hold (default
    /// [`defaults::MAX_PROCESSES`]).
    pub unwind_processes: u32,
    /// Unwind user stacks with tables (default true); false leaves every
    /// process on frame pointers, for comparison.
    pub unwind_tables: bool,
    /// Code objects whose names the Python walker keeps (`py_codes`, a
    /// hash map of 512 bytes an entry, kernel memory allocated at load,
    /// half of it for any one user but root;
    /// default [`defaults::PYTHON_CODE_ENTRIES`]).
    pub python_code_entries: u32,
    /// JVMs whose code cache the Java walker reads (`hs_procs`; half of it
    /// for any one user but root; default [`defaults::JAVA_PROCESSES`]).
    pub java_processes: u32,
    /// Node processes whose V8 frames the walker reads (`v8_procs`; half
    /// of it for any one user but root; default
    /// [`defaults::NODE_PROCESSES`]).
    pub node_processes: u32,
    /// Python processes whose frames the walker reads (`py_procs`; half
    /// of it for any one user but root; default
    /// [`defaults::PYTHON_PROCESSES`]).
    pub python_processes: u32,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self {
            frequency_hz: defaults::FREQUENCY_HZ,
            pid: None,
            include_idle: false,
            stack_map_entries: defaults::stack_map_entries(),
            counts_map_entries: defaults::counts_map_entries(),
            unwind_rows: (defaults::table_budget_bytes() / 4) as u32,
            unwind_processes: defaults::MAX_PROCESSES,
            unwind_tables: true,
            python_code_entries: defaults::PYTHON_CODE_ENTRIES,
            java_processes: defaults::JAVA_PROCESSES,
            node_processes: defaults::NODE_PROCESSES,
            python_processes: defaults::PYTHON_PROCESSES,
        }
    }
}

impl SamplerOptions {
    fn validate(&self) -> Result<(), CollectError> {
        let max_hz = perf_event::max_sample_rate().unwrap_or(100_000);
        if self.frequency_hz == 0 || self.frequency_hz > max_hz {
            return Err(CollectError::Options(format!(
                "--frequency {} is out of range: use 1..={max_hz} Hz (kernel.perf_event_max_sample_rate)",
                self.frequency_hz
            )));
        }
        if self.stack_map_entries < 64 || self.counts_map_entries < 8 {
            return Err(CollectError::Options(
                "stack maps need at least 64 entries, counts maps at least 8".into(),
            ));
        }
        Ok(())
    }
}

/// The loaded and attached CPU sampler. Dropping it detaches and unloads the
/// BPF program and closes the perf events.
pub struct CpuSampler {
    skel: ProfileSkel<'static>,
    _links: Vec<Link>,
    cpus: Vec<u32>,
    options: SamplerOptions,
    form: forms::ProgramForm,
    drains: u64,
}

/// The records of `py_codes` one user other than root may hold: half
/// (`bpf/python.h`).
pub(crate) fn py_code_share(entries: u32) -> u32 {
    (entries / 2).max(1)
}

/// How often `py_codes` is collected, in drains.
const PY_CODE_GC_EVERY: u64 = 2;

/// Records of `py_codes` no walk has met for this long are deleted: a
/// sampled frame's record was stamped within 100 ms of the sample
/// (`PY_SEEN_NS`), and named at the drain after it (1 s); the daemon's own
/// cache keeps the name beyond.
const PY_CODE_HORIZON_NS: u64 = 4_000_000_000;

impl fmt::Debug for CpuSampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuSampler")
            .field("cpus", &self.cpus)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The result of one drain.
#[derive(Debug, Default)]
pub struct Drain {
    /// Samples counted since the previous drain, one per thread and stacks.
    pub samples: Vec<RawSample>,
    /// Stack keys the counts referred to that the stack map did not have.
    pub missing_stacks: u64,
}

/// Handles on the unwinder's maps (`bpf/unwind.h`), which the events object
/// shares and `src/unwind` fills.
#[derive(Debug)]
pub struct UnwindMaps {
    /// `unwind_rows`: the rows of every file's table (mmapable array).
    pub rows: MapHandle,
    /// `unwind_infos`: the rules the rows name, shared by every table.
    pub infos: MapHandle,
    /// `proc_unwind`: each process's executable mappings.
    pub procs: MapHandle,
    /// `unwind_refresh`: processes whose mappings must be read again.
    pub refresh: MapHandle,
    /// `unwind_refresh_root`: the same for root's processes, apart, so no
    /// user's requests leave root's no room.
    pub refresh_root: MapHandle,
    /// `unwind_refresh_pending`: set when either refresh map gains an entry.
    pub refresh_pending: MapHandle,
    /// `py_procs`: each Python process's interpreter (`bpf/python.h`).
    pub py_procs: MapHandle,
    /// `hs_procs`: each HotSpot JVM's code cache and layout
    /// (`bpf/hotspot.h`).
    pub hs_procs: MapHandle,
    /// `v8_procs`: each node process's V8 code and layout (`bpf/v8.h`).
    pub v8_procs: MapHandle,
    /// `py_codes`: code objects the walker met, named at drains.
    pub py_codes: MapHandle,
    /// `py_codes_by_uid`: the records each user holds in `py_codes`.
    pub py_codes_by_uid: MapHandle,
    /// `file_tables`: tables by mapped inode, for mappings not listed yet.
    pub files: MapHandle,
    /// `exec_at`: when each process last exec'd.
    pub exec_at: MapHandle,
    /// `sub_uids`: the subordinate uid ranges' owners (`bpf/walk.h`).
    pub sub_uids: MapHandle,
    /// `sub_uid_min`: the lowest uid any subordinate range holds.
    pub sub_uid_min: MapHandle,
}

impl CpuSampler {
    /// Loads the BPF program and attaches it to a cpu-clock event on every
    /// online CPU.
    pub fn start(options: SamplerOptions) -> Result<Self, CollectError> {
        let mut sampler = Self::load(options)?;
        sampler.attach()?;
        Ok(sampler)
    }

    /// Loads the BPF program and attaches its exec and exit hooks, but
    /// samples nothing until [`CpuSampler::attach`]: the daemon builds the
    /// running processes' unwind tables in between, so its first samples
    /// are unwound as well as its later ones.
    pub fn load(options: SamplerOptions) -> Result<Self, CollectError> {
        options.validate()?;
        // The skeleton borrows its object storage for as long as it lives; the
        // sampler lives for the rest of the run, so a few leaked bytes per
        // load are the simplest owner.
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = ProfileSkelBuilder::default()
            .open(storage)
            .map_err(|source| CollectError::Load { source })?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .expect("profile.bpf.c has read-only globals");
        rodata.config.target_tgid = options.pid.map_or(0, |p| p.0);
        rodata.config.include_idle = u8::from(options.include_idle);
        let form = forms::chosen().form;
        let bounded = form == forms::ProgramForm::Bounded;
        rodata.config.bounded = u8::from(bounded);
        rodata.unwind_config.bounded = u8::from(bounded);
        rodata.unwind_config.thread_size = forms::thread_size().bytes;
        rodata.py_code_share = py_code_share(options.python_code_entries);
        open.progs.handle__cpu_clock.set_autoload(!bounded);
        open.progs.handle__cpu_clock_bounded.set_autoload(bounded);
        for map in [&mut open.maps.stacks0, &mut open.maps.stacks1] {
            map.set_max_entries(options.stack_map_entries)
                .map_err(|source| CollectError::Load { source })?;
        }
        for map in [&mut open.maps.counts0, &mut open.maps.counts1] {
            map.set_max_entries(options.counts_map_entries)
                .map_err(|source| CollectError::Load { source })?;
        }
        open.maps
            .unwind_rows
            .set_max_entries(options.unwind_rows.div_ceil(2).max(1))
            .map_err(|source| CollectError::Load { source })?;
        let mut processes = options.unwind_processes.max(1);
        if !forms::chosen().lazy_maps {
            // Before Linux 6.1 perf_event programs take only preallocated
            // hash maps (see forms::LAZY_MAPS).
            processes = processes.min(forms::PREALLOCATED_PROCESSES);
            for map in [
                &mut open.maps.proc_unwind,
                &mut open.maps.py_procs,
                &mut open.maps.hs_procs,
                &mut open.maps.v8_procs,
                &mut open.maps.file_tables,
            ] {
                map.set_map_flags(0)
                    .map_err(|source| CollectError::Load { source })?;
            }
        }
        open.maps
            .proc_unwind
            .set_max_entries(processes)
            .map_err(|source| CollectError::Load { source })?;
        open.maps
            .hs_procs
            .set_max_entries(options.java_processes.clamp(2, processes))
            .map_err(|source| CollectError::Load { source })?;
        open.maps
            .v8_procs
            .set_max_entries(options.node_processes.clamp(2, processes))
            .map_err(|source| CollectError::Load { source })?;
        open.maps
            .py_procs
            .set_max_entries(options.python_processes.clamp(2, processes))
            .map_err(|source| CollectError::Load { source })?;
        open.maps
            .py_codes
            .set_max_entries(options.python_code_entries.max(1))
            .map_err(|source| CollectError::Load { source })?;
        let skel = open
            .load()
            .map_err(|source| CollectError::Load { source })?;
        assert_eq!(
            skel.maps.counts0.key_size() as usize,
            std::mem::size_of::<types::sample_key>(),
            "bpf/emberd.h and src/bpf.rs disagree on sample_key"
        );

        let cpus = online_cpus()?;
        let mut links = Vec::with_capacity(cpus.len() + 2);
        let exec_link = skel
            .progs
            .handle__sched_process_exec
            .attach()
            .map_err(|source| CollectError::Load { source })?;
        links.push(exec_link);
        let exit_link = skel
            .progs
            .handle__sched_process_exit
            .attach()
            .map_err(|source| CollectError::Load { source })?;
        links.push(exit_link);
        Ok(Self {
            skel,
            _links: links,
            cpus,
            options,
            form,
            drains: 0,
        })
    }

    /// The form of the program loaded (see [`forms`]).
    pub fn form(&self) -> forms::ProgramForm {
        self.form
    }

    /// Attaches the sampler to a cpu-clock event on every online CPU.
    pub fn attach(&mut self) -> Result<(), CollectError> {
        for &cpu in &self.cpus {
            let event = PerfEvent::cpu_clock(cpu, self.options.frequency_hz)?;
            let prog = match self.form {
                forms::ProgramForm::Loop => &self.skel.progs.handle__cpu_clock,
                forms::ProgramForm::Bounded => &self.skel.progs.handle__cpu_clock_bounded,
            };
            let link = prog
                .attach_perf_event(event.as_raw_fd())
                .map_err(|source| CollectError::Attach { cpu, source })?;
            // The link owns the fd from here on and closes it when dropped.
            event.into_raw_fd();
            self._links.push(link);
        }
        Ok(())
    }

    /// New handles on the unwinder's maps, for `src/unwind` and the events
    /// object.
    pub fn unwind_maps(&self) -> Result<UnwindMaps, CollectError> {
        let handle = |map: &MapMut<'_>, name: &'static str| {
            MapHandle::try_from(map).map_err(|source| CollectError::Drain { map: name, source })
        };
        let maps = &self.skel.maps;
        Ok(UnwindMaps {
            rows: handle(&maps.unwind_rows, "unwind_rows")?,
            infos: handle(&maps.unwind_infos, "unwind_infos")?,
            procs: handle(&maps.proc_unwind, "proc_unwind")?,
            refresh: handle(&maps.unwind_refresh, "unwind_refresh")?,
            refresh_root: handle(&maps.unwind_refresh_root, "unwind_refresh_root")?,
            refresh_pending: handle(&maps.unwind_refresh_pending, "unwind_refresh_pending")?,
            py_procs: handle(&maps.py_procs, "py_procs")?,
            hs_procs: handle(&maps.hs_procs, "hs_procs")?,
            v8_procs: handle(&maps.v8_procs, "v8_procs")?,
            py_codes: handle(&maps.py_codes, "py_codes")?,
            py_codes_by_uid: handle(&maps.py_codes_by_uid, "py_codes_by_uid")?,
            files: handle(&maps.file_tables, "file_tables")?,
            exec_at: handle(&maps.exec_at, "exec_at")?,
            sub_uids: handle(&maps.sub_uids, "sub_uids")?,
            sub_uid_min: handle(&maps.sub_uid_min, "sub_uid_min")?,
        })
    }

    /// Cumulative counters of the CPU sampler's user-stack unwinder.
    pub fn unwind_counters(&self) -> Result<UnwindCounters, CollectError> {
        UnwindCounters::read(&self.skel.maps.unwind_counters)
    }

    /// The CPUs sampled.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    /// The options the sampler runs with.
    pub fn options(&self) -> &SamplerOptions {
        &self.options
    }

    /// Cumulative counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters, CollectError> {
        let mut out = Counters::default();
        let mut v = [0u64; Counter::ALL.len()];
        percpu_sums(&self.skel.maps.counters, "counters", &mut v)?;
        for c in Counter::ALL {
            out.add(c, v[c as usize]);
        }
        Ok(out)
    }

    /// A handle on the ring buffer of new-process notices (see
    /// [`new_process::NewProcessRing`]).
    pub fn new_tgids(&self) -> Result<MapHandle, CollectError> {
        MapHandle::try_from(&self.skel.maps.new_tgids).map_err(|source| CollectError::Drain {
            map: "new_tgids",
            source,
        })
    }

    /// A handle on its `seen_tgids` (see [`NewProcessRing::forget`]).
    pub fn seen_tgids(&self) -> Result<MapHandle, CollectError> {
        MapHandle::try_from(&self.skel.maps.seen_tgids).map_err(|source| CollectError::Drain {
            map: "seen_tgids",
            source,
        })
    }

    /// Flips the buffers and empties the one the program wrote until now.
    pub fn drain(&mut self) -> Result<Drain, CollectError> {
        let bss = self
            .skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("profile.bpf.c has a .bss");
        let old = flip_buffer(&mut bss.active_buffer, &bss.writers);
        self.drains += 1;
        if self.drains.is_multiple_of(PY_CODE_GC_EVERY) {
            self.collect_py_codes();
        }
        let maps = &mut self.skel.maps;
        let (counts, stacks) = if old == 0 {
            (&maps.counts0, &maps.stacks0)
        } else {
            (&maps.counts1, &maps.stacks1)
        };
        drain_buffer(counts, stacks)
    }

    /// Deletes the `py_codes` records no walk has met lately and recounts
    /// each user's share of the map (`bpf/python.h`): the walkers only add
    /// to the counts, and a plain hash map keeps whatever is not deleted.
    fn collect_py_codes(&mut self) {
        let map = &self.skel.maps.py_codes;
        let horizon = crate::shared::clock::ktime_ns().saturating_sub(PY_CODE_HORIZON_NS);
        let used_at = std::mem::offset_of!(types::py_code, used);
        let uid_at = std::mem::offset_of!(types::py_code, uid);
        let mut stale: Vec<Vec<u8>> = Vec::new();
        let mut per_uid: HashMap<u32, u64> = HashMap::new();
        let complete = batch_each(map, false, |k, v| {
            let used = v
                .get(used_at..used_at + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
            if used < horizon {
                stale.push(k.to_vec());
            } else if let Some(b) = v.get(uid_at..uid_at + 4) {
                *per_uid
                    .entry(u32::from_ne_bytes(b.try_into().expect("4 bytes")))
                    .or_default() += 1;
            }
        });
        for k in stale {
            let _ = map.delete(&k);
        }
        if complete {
            recount_uid_shares(&self.skel.maps.py_codes_by_uid, &per_uid);
        }
    }
}

/// Points a program's `active_buffer` (in its mmapped .bss) at the other
/// buffer and returns the old one once no run is writing it (`writers`, the
/// per-buffer counts of runs in progress: `bpf/buffers.h`), so the old
/// buffer has no writers after this. A run lasts microseconds; if the count
/// has not fallen to 0 within [`FLIP_WAIT`] (a count left behind by a
/// program detached mid-run), the drain goes on and says so.
pub(crate) fn flip_buffer(active: &mut u32, writers: &[u64; 2]) -> u32 {
    let old = *active & 1;
    // SAFETY: `active_buffer` is a plain u32 in the mmap'ed .bss; the BPF
    // programs only read it. A volatile write keeps the compiler from
    // caching or eliding the store.
    unsafe { std::ptr::write_volatile(active, 1 - old) };
    // Orders the flag's store before the count's loads (the programs'
    // atomic add orders theirs the other way round).
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let started = std::time::Instant::now();
    // SAFETY: the counts are u64s in the mmap'ed .bss, changed by the BPF
    // programs' atomic adds: read them volatile, every time.
    while unsafe { std::ptr::read_volatile(&writers[old as usize]) } != 0 {
        if started.elapsed() > FLIP_WAIT {
            tracing::warn!(
                "a BPF program still counts as writing the old counts buffer after {FLIP_WAIT:?}; draining it anyway"
            );
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    old
}

/// The longest a drain waits for the runs still writing the old buffer.
const FLIP_WAIT: Duration = Duration::from_millis(50);

fn drain_buffer(counts: &MapMut<'_>, stacks: &MapMut<'_>) -> Result<Drain, CollectError> {
    let entries: Vec<(types::sample_key, u64)> = drain_counts(counts, "counts")?;
    // The buffer has no writers now: take every stack it holds, which also
    // frees the stacks of samples whose count could not be inserted.
    let mut stored: HashMap<u64, RawStack> = HashMap::new();
    let complete = batch_each(stacks, true, |k, v| {
        if let (Some(k), Some(s)) = (k.get(..8), stack::parse_stored(v)) {
            stored.insert(u64::from_ne_bytes(k.try_into().expect("8 bytes")), s);
        }
    });
    // Whatever the batch left behind after an error. Only then: walking an
    // empty hash map for its first key visits every bucket, a tenth of the
    // daemon's CPU when done after every batch.
    let rest = if complete {
        Vec::new()
    } else {
        stacks.keys().collect::<Vec<_>>()
    };
    for k in rest {
        if let (Some(key), Ok(Some(v))) = (k.get(..8), stacks.lookup(&k, MapFlags::ANY))
            && let Some(s) = stack::parse_stored(&v)
        {
            stored.insert(u64::from_ne_bytes(key.try_into().expect("8 bytes")), s);
        }
        let _ = stacks.delete(&k);
    }
    let mut drain = Drain::default();
    let read = |key: u64| match key {
        stack::STACK_NONE => RawStack::None,
        stack::STACK_LOST => RawStack::Lost,
        k => stored.get(&k).cloned().unwrap_or(RawStack::Lost),
    };
    for (key, count) in entries {
        let kernel = read(key.kstack);
        let user = read(key.ustack);
        for (k, s) in [(key.kstack, &kernel), (key.ustack, &user)] {
            if k > stack::STACK_LOST && *s == RawStack::Lost {
                drain.missing_stacks += count;
            }
        }
        drain.samples.push(RawSample {
            pid: Pid(key.tgid),
            tid: Tid(key.pid),
            comm: comm_name(&key.comm),
            kernel,
            user,
            count,
            at_ms: Some(crate::shared::clock::tick_to_store_ms(key.tick)),
            account: key.account,
        });
    }
    Ok(drain)
}

/// Sets a per-user count map (`stacks_by_uid`, `blocked_by_uid`,
/// `py_codes_by_uid`: u32 account -> u64 entries) to `per_uid`, the
/// entries each user holds as just counted, and the key of every user but
/// root together (`EMBERD_ALL_USERS`) to their sum: the programs add at
/// each insert (and take away at some deletes), so without this a count
/// would drift. Users past the map's size share one key, as the programs
/// do; root is not limited, nor counted. An entry added between the count
/// and this write goes uncounted until the next one.
pub(crate) fn recount_uid_shares(map: &impl MapCore, per_uid: &HashMap<u32, u64>) {
    const OTHER_UIDS: u32 = u32::MAX;
    const ALL_USERS: u32 = u32::MAX - 1;
    let room = map.max_entries().saturating_sub(2) as usize;
    let mut counts: HashMap<u32, u64> = HashMap::new();
    let mut by_size: Vec<(u32, u64)> = per_uid
        .iter()
        .filter(|&(u, _)| *u != 0)
        .map(|(u, n)| (*u, *n))
        .collect();
    by_size.sort_unstable_by_key(|e| std::cmp::Reverse(e.1));
    let mut all = 0;
    for (i, (uid, n)) in by_size.into_iter().enumerate() {
        let key = if i < room && uid != OTHER_UIDS && uid != ALL_USERS {
            uid
        } else {
            OTHER_UIDS
        };
        *counts.entry(key).or_default() += n;
        all += n;
    }
    counts.insert(ALL_USERS, all);
    let present: Vec<u32> = map
        .keys()
        .filter_map(|k| k.try_into().ok().map(u32::from_ne_bytes))
        .collect();
    for uid in present {
        if !counts.contains_key(&uid) {
            let _ = map.delete(&uid.to_ne_bytes());
        }
    }
    for (uid, n) in counts {
        let _ = map.update(&uid.to_ne_bytes(), &n.to_ne_bytes(), MapFlags::ANY);
    }
}

/// Reads every (key, count) of an idle counts map and empties it.
pub(crate) fn drain_counts<K: plain::Plain + Copy>(
    counts: &MapMut<'_>,
    name: &'static str,
) -> Result<Vec<(K, u64)>, CollectError> {
    let mut out = Vec::new();
    let parse = |k: &[u8], v: &[u8]| -> Option<(K, u64)> {
        let key = *plain::from_bytes::<K>(k).ok()?;
        let val = u64::from_ne_bytes(v.get(..8)?.try_into().ok()?);
        Some((key, val))
    };
    // One syscall for the whole map in the common case.
    let complete = batch_each(counts, true, |k, v| out.extend(parse(k, v)));
    // After an error, whatever the batch left behind is drained key by key
    // so nothing is lost (see drain_buffer for why not always).
    let rest: Vec<Vec<u8>> = if complete {
        Vec::new()
    } else {
        counts.keys().collect()
    };
    for k in rest {
        if let Some(v) = counts
            .lookup(&k, MapFlags::ANY)
            .map_err(|source| CollectError::Drain { map: name, source })?
        {
            out.extend(parse(&k, &v));
        }
        let _ = counts.delete(&k);
    }
    Ok(out)
}

/// Calls `each` with every key and value of `map`, read in batches of up to
/// 1024 (and deleted with `delete`), into two buffers for the whole walk:
/// libbpf-rs's batch iterator copies each key and value into vectors of
/// their own, a fifth of the idle collector's allocation calls. Stops at
/// the map's end, returning true, or at the first error other than an
/// interrupted call, returning false: callers then drain what is left key
/// by key.
pub(crate) fn batch_each(
    map: &impl MapCore,
    delete: bool,
    mut each: impl FnMut(&[u8], &[u8]),
) -> bool {
    let count = map.max_entries().clamp(1, 1024) as usize;
    // Hash maps take a batch position at least 4 bytes long.
    let key_size = (map.key_size() as usize).max(4);
    let value_size = map.value_size() as usize;
    let mut keys = vec![0u8; key_size * count];
    let mut values = vec![0u8; value_size * count];
    let mut prev = vec![0u8; key_size];
    let mut next = vec![0u8; key_size];
    let mut first = true;
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    loop {
        let mut n = count as u32;
        let op = if delete {
            libbpf_rs::libbpf_sys::bpf_map_lookup_and_delete_batch
        } else {
            libbpf_rs::libbpf_sys::bpf_map_lookup_batch
        };
        // SAFETY: every buffer is as large as `count` entries (or one
        // batch position) of the sizes the map was created with.
        let ret = unsafe {
            op(
                map.as_fd().as_raw_fd(),
                if first {
                    std::ptr::null_mut()
                } else {
                    prev.as_mut_ptr().cast()
                },
                next.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut n,
                &opts,
            )
        };
        let end = if ret != 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // The map's end: the count returned is still right.
                Some(libc::ENOENT) => true,
                _ => return false,
            }
        } else {
            false
        };
        let n = (n as usize).min(count);
        for i in 0..n {
            each(
                &keys[i * key_size..i * key_size + map.key_size() as usize],
                &values[i * value_size..(i + 1) * value_size],
            );
        }
        // Only ENOENT says the map's end: a hash map's batch holds whole
        // buckets, so one can come back short of `count` with more to go
        // (stopping there left most of a busy counts map behind, full, and
        // the programs then dropped what they could not add).
        if end || n == 0 {
            return true;
        }
        std::mem::swap(&mut prev, &mut next);
        first = false;
    }
}

/// Entry `index` of a per-CPU array of u64 counters, summed over CPUs.
pub(crate) fn percpu_sum(
    map: &impl MapCore,
    name: &'static str,
    index: u32,
) -> Result<u64, CollectError> {
    if map.value_size() != 8 {
        return Err(CollectError::Drain {
            map: name,
            // Every counter array emberd's programs define holds u64s.
            source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(libc::EINVAL)),
        });
    }
    // Into one buffer of a u64 per possible CPU: libbpf-rs's per-CPU
    // lookup makes a vector per CPU, and the counters are read at every
    // drain (a tenth of the idle collector's allocation calls).
    thread_local! {
        static VALUES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    // SAFETY: a plain libbpf query.
    let cpus = unsafe { libbpf_rs::libbpf_sys::libbpf_num_possible_cpus() };
    let cpus = usize::try_from(cpus).map_err(|_| CollectError::Drain {
        map: name,
        source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(-cpus)),
    })?;
    VALUES.with(|values| {
        let mut values = values.borrow_mut();
        values.clear();
        values.resize(cpus, 0);
        let key = index;
        // SAFETY: the key is the map's 4-byte index; the buffer holds one
        // 8-byte value per possible CPU, as the kernel writes for a per-CPU
        // map of 8-byte values.
        let ret = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_elem(
                map.as_fd().as_raw_fd(),
                (&raw const key).cast(),
                values.as_mut_ptr().cast(),
            )
        };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOENT) {
                return Ok(0);
            }
            return Err(CollectError::Drain {
                map: name,
                source: libbpf_rs::Error::from(err),
            });
        }
        Ok(values.iter().sum())
    })
}

/// The per-CPU sums of counters `0..out.len()` of a per-CPU array of u64s,
/// in one batch lookup: the counter arrays are read several times a drain,
/// and one `bpf()` call per counter was about a hundred calls a second.
/// Kernels without batch lookups on arrays (before 5.6) are read counter
/// by counter ([`percpu_sum`]).
pub(crate) fn percpu_sums(
    map: &impl MapCore,
    name: &'static str,
    out: &mut [u64],
) -> Result<(), CollectError> {
    let fail = |errno: i32| CollectError::Drain {
        map: name,
        source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(errno)),
    };
    if map.value_size() != 8 {
        return Err(fail(libc::EINVAL));
    }
    // SAFETY: a plain libbpf query.
    let cpus = unsafe { libbpf_rs::libbpf_sys::libbpf_num_possible_cpus() };
    let cpus = usize::try_from(cpus).map_err(|_| fail(-cpus))?;
    let entries = map.max_entries() as usize;
    thread_local! {
        static BUFFERS: std::cell::RefCell<(Vec<u32>, Vec<u64>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    let complete = BUFFERS.with(|b| {
        let (keys, values) = &mut *b.borrow_mut();
        keys.clear();
        keys.resize(entries, 0);
        values.clear();
        values.resize(entries * cpus, 0);
        let mut count = entries as u32;
        let mut position = 0u32;
        let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        // SAFETY: the buffers hold `entries` 4-byte keys and as many values
        // of one u64 per possible CPU, the layout of a per-CPU array's
        // batch; the position is an array index.
        let ret = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
                map.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                (&raw mut position).cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let ended =
            ret == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
        let count = (count as usize).min(entries);
        if !ended || count < out.len().min(entries) {
            return false;
        }
        for (k, &key) in keys[..count].iter().enumerate() {
            if let Some(slot) = out.get_mut(key as usize) {
                *slot = values[k * cpus..(k + 1) * cpus].iter().sum();
            }
        }
        true
    });
    if !complete {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = percpu_sum(map, name, i as u32)?;
        }
    }
    Ok(())
}

/// Empties a map keyed by tgid key by key and returns its pids (what a
/// batch left behind, or a small map such as `unwind_refresh`).
pub(crate) fn drain_tgids(map: &impl MapCore) -> Vec<Pid> {
    let mut pids = Vec::new();
    for k in map.keys().collect::<Vec<_>>() {
        if let Some(b) = k.get(..4) {
            pids.push(Pid(u32::from_ne_bytes(b.try_into().expect("4 bytes"))));
        }
        let _ = map.delete(&k);
    }
    pids
}

/// A task name from the kernel's 16-byte `comm`, shared: the same few
/// names come at every drain, and making each key's name anew was two
/// allocations a key.
fn comm_name(comm: &[i8]) -> Arc<str> {
    use std::cell::RefCell;
    thread_local! {
        static NAMES: RefCell<crate::shared::FastMap<[u8; 16], Arc<str>>> =
            RefCell::default();
    }
    let mut raw = [0u8; 16];
    for (d, &c) in raw.iter_mut().zip(comm) {
        *d = c as u8;
    }
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(n) = names.get(&raw) {
            return n.clone();
        }
        // Bounded: thread names of a host with churn are many over time.
        if names.len() >= 4096 {
            names.clear();
        }
        let len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        let name: Arc<str> = Arc::from(String::from_utf8_lossy(&raw[..len]).as_ref());
        names.insert(raw, name.clone());
        name
    })
}

fn comm_to_string(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
