//! Collect: the BPF CPU sampler and the drain that turns its maps into
//! [`RawSample`]s.
//!
//! The program counts samples under (thread, kernel stack, user stack) in one
//! of two buffers (a counts map and a stack map each). A drain flips the
//! buffer the program writes, then empties the other one: no sample races the
//! drain, and a stack id is never deleted while a count still refers to it.

mod counters;
pub mod events;
mod perf_event;

use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapMut};

pub use counters::{Counter, Counters};
pub use perf_event::{PerfEvent, online_cpus};

use crate::bpf::profile::{ProfileSkel, ProfileSkelBuilder};
use crate::bpf::types;

/// Defaults of [`SamplerOptions`].
pub mod defaults {
    /// Samples per second per CPU. 99, not 100, so sampling does not run in
    /// lock-step with work that is itself timed in round milliseconds.
    pub const FREQUENCY_HZ: u64 = 99;
    /// Entries of each of the two stack maps. At 99 Hz a busy 2-CPU host
    /// produces at most about 400 stacks (kernel + user) a second; with a
    /// 1 s drain 16384 buckets keep hash collisions rare. Each entry costs
    /// about 1 KiB of kernel memory, twice (double buffering).
    pub const STACK_MAP_ENTRIES: u32 = 16384;
    /// Entries of each of the two counts maps (distinct threads x stacks per drain).
    pub const COUNTS_MAP_ENTRIES: u32 = 10240;
}

/// A process id (the kernel's tgid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(pub u32);

/// A thread id (the kernel's pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid(pub u32);

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

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
        /// Instruction pointers, leaf first.
        ips: Vec<u64>,
        /// Whether the stack hit the depth limit, so its root is missing.
        truncated: bool,
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
    pub comm: String,
    /// Kernel stack.
    pub kernel: RawStack,
    /// User stack.
    pub user: RawStack,
    /// Number of samples.
    pub count: u64,
}

/// Errors of the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The BPF object failed to open or load.
    #[error(
        "loading the BPF sampler failed: {source}\nhint: run `emberd check`; loading BPF needs root or CAP_BPF+CAP_PERFMON and a kernel with BTF"
    )]
    Load {
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The events object (off-CPU, wakeup, page faults) failed to load or attach.
    #[error(
        "loading the off-CPU/wakeup/page-fault programs failed: {source}\nhint: they need BTF-typed tracepoints (tp_btf) and BPF task storage (Linux 5.11 or later); run `emberd check`, or switch them off with offcpu = wakeup = offwake = pagefault = false"
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
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self {
            frequency_hz: defaults::FREQUENCY_HZ,
            pid: None,
            include_idle: false,
            stack_map_entries: defaults::STACK_MAP_ENTRIES,
            counts_map_entries: defaults::COUNTS_MAP_ENTRIES,
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
        if self.stack_map_entries < 64 || self.counts_map_entries < 64 {
            return Err(CollectError::Options(
                "stack and counts maps need at least 64 entries".into(),
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
}

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
    /// Stack ids the counts referred to that the stack map did not have.
    pub missing_stacks: u64,
}

impl CpuSampler {
    /// Loads the BPF program and attaches it to a cpu-clock event on every
    /// online CPU.
    pub fn start(options: SamplerOptions) -> Result<Self, CollectError> {
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
        for map in [&mut open.maps.stacks0, &mut open.maps.stacks1] {
            map.set_max_entries(options.stack_map_entries)
                .map_err(|source| CollectError::Load { source })?;
        }
        for map in [&mut open.maps.counts0, &mut open.maps.counts1] {
            map.set_max_entries(options.counts_map_entries)
                .map_err(|source| CollectError::Load { source })?;
        }
        let skel = open
            .load()
            .map_err(|source| CollectError::Load { source })?;
        assert_eq!(
            skel.maps.counts0.key_size() as usize,
            std::mem::size_of::<types::sample_key>(),
            "bpf/emberd.h and src/bpf.rs disagree on sample_key"
        );

        let cpus = online_cpus()?;
        let mut links = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            let event = PerfEvent::cpu_clock(cpu, options.frequency_hz)?;
            let link = skel
                .progs
                .handle__cpu_clock
                .attach_perf_event(event.as_raw_fd())
                .map_err(|source| CollectError::Attach { cpu, source })?;
            // The link owns the fd from here on and closes it when dropped.
            event.into_raw_fd();
            links.push(link);
        }
        let exec_link = skel
            .progs
            .handle__sched_process_exec
            .attach()
            .map_err(|source| CollectError::Load { source })?;
        links.push(exec_link);
        Ok(Self {
            skel,
            _links: links,
            cpus,
            options,
        })
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
        for c in Counter::ALL {
            let key = (c as u32).to_ne_bytes();
            let per_cpu = self
                .skel
                .maps
                .counters
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(|source| CollectError::Drain {
                    map: "counters",
                    source,
                })?
                .unwrap_or_default();
            for v in per_cpu {
                let bytes: [u8; 8] = v.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]);
                out.add(c, u64::from_ne_bytes(bytes));
            }
        }
        Ok(out)
    }

    /// Processes seen for the first time (or first since exec) since the last
    /// call. Cheap enough to call several times a second, so that the
    /// mappings of a short-lived process are read while it lives.
    pub fn new_processes(&mut self) -> Result<Vec<Pid>, CollectError> {
        drain_new_tgids(&self.skel.maps.new_tgids)
    }

    /// Flips the buffers and empties the one the program wrote until now.
    pub fn drain(&mut self) -> Result<Drain, CollectError> {
        let bss = self
            .skel
            .maps
            .bss_data
            .as_deref_mut()
            .expect("profile.bpf.c has a .bss");
        let old = bss.active_buffer;
        // SAFETY: `active_buffer` is a plain u32 in the mmap'ed .bss; the BPF
        // program only reads it. A volatile write keeps the compiler from
        // caching or eliding the store.
        unsafe { std::ptr::write_volatile(&mut bss.active_buffer, 1 - old) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // A program run that read the old value finishes within microseconds
        // (it runs from the timer interrupt); give stragglers time to finish.
        std::thread::sleep(Duration::from_millis(2));

        let maps = &mut self.skel.maps;
        let (counts, stacks) = if old == 0 {
            (&maps.counts0, &maps.stacks0)
        } else {
            (&maps.counts1, &maps.stacks1)
        };
        drain_buffer(counts, stacks)
    }
}

fn drain_buffer(counts: &MapMut<'_>, stacks: &MapMut<'_>) -> Result<Drain, CollectError> {
    let entries = read_and_clear_counts(counts)?;
    let mut drain = Drain::default();
    let mut stack_cache: std::collections::HashMap<i32, Option<RawStack>> = Default::default();
    let mut read_stack = |id: i32| -> Result<RawStack, CollectError> {
        match id {
            id if id >= 0 => {
                if let Some(s) = stack_cache.get(&id) {
                    return Ok(s.clone().unwrap_or(RawStack::Lost));
                }
                let stack = match events::read_stack(stacks, id)? {
                    RawStack::Lost => None,
                    s => Some(s),
                };
                let key = (id as u32).to_ne_bytes();
                // Deleting a missing id fails with ENOENT; nothing to do then.
                let _ = stacks.delete(&key);
                stack_cache.insert(id, stack.clone());
                Ok(stack.unwrap_or(RawStack::Lost))
            }
            -2 => Ok(RawStack::Lost),
            _ => Ok(RawStack::None),
        }
    };
    for (key, count) in entries {
        let kernel = read_stack(key.kstack_id)?;
        let user = read_stack(key.ustack_id)?;
        for (id, s) in [(key.kstack_id, &kernel), (key.ustack_id, &user)] {
            if id >= 0 && *s == RawStack::Lost {
                drain.missing_stacks += count;
            }
        }
        drain.samples.push(RawSample {
            pid: Pid(key.tgid),
            tid: Tid(key.pid),
            comm: comm_to_string(&key.comm),
            kernel,
            user,
            count,
        });
    }
    Ok(drain)
}

/// Reads every (key, count) of an idle counts map and empties it.
fn read_and_clear_counts(
    counts: &MapMut<'_>,
) -> Result<Vec<(types::sample_key, u64)>, CollectError> {
    let mut out = Vec::new();
    let parse = |k: &[u8], v: &[u8]| -> Option<(types::sample_key, u64)> {
        let key = *plain::from_bytes::<types::sample_key>(k).ok()?;
        let val = u64::from_ne_bytes(v.get(..8)?.try_into().ok()?);
        Some((key, val))
    };
    // One syscall for the whole map in the common case.
    let batch = counts
        .lookup_and_delete_batch(counts.max_entries().min(1024), MapFlags::ANY, MapFlags::ANY)
        .map_err(|source| CollectError::Drain {
            map: "counts",
            source,
        })?;
    out.extend(batch.filter_map(|(k, v)| parse(&k, &v)));
    // libbpf-rs's batch iterator stops silently on an error; whatever it left
    // behind is drained key by key so nothing is lost.
    let rest: Vec<Vec<u8>> = counts.keys().collect();
    for k in rest {
        if let Some(v) = counts
            .lookup(&k, MapFlags::ANY)
            .map_err(|source| CollectError::Drain {
                map: "counts",
                source,
            })?
        {
            out.extend(parse(&k, &v));
        }
        let _ = counts.delete(&k);
    }
    Ok(out)
}

/// Empties a `new_tgids` map (see `bpf/profile.bpf.c`) and returns its pids.
pub(crate) fn drain_new_tgids(map: &MapMut<'_>) -> Result<Vec<Pid>, CollectError> {
    let batch = map
        .lookup_and_delete_batch(map.max_entries().min(256), MapFlags::ANY, MapFlags::ANY)
        .map_err(|source| CollectError::Drain {
            map: "new_tgids",
            source,
        })?;
    let mut pids: Vec<Pid> = batch
        .filter_map(|(k, _)| Some(Pid(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?))))
        .collect();
    // Whatever the batch iterator left behind (it stops silently on errors).
    for k in map.keys().collect::<Vec<_>>() {
        if let Some(b) = k.get(..4) {
            pids.push(Pid(u32::from_ne_bytes(b.try_into().expect("4 bytes"))));
        }
        let _ = map.delete(&k);
    }
    Ok(pids)
}

fn comm_to_string(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
