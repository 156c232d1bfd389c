//! Collect off-CPU time, wakeups, off-wake chains and page faults
//! (`bpf/events.bpf.c`).

use std::collections::HashMap;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};

use super::stack::{self, UnwindCounters, stack_by_key};
use super::{CollectError, PerfEvent, Pid, RawSample, RawStack, Tid, UnwindMaps, online_cpus};
use crate::bpf::events::types;
use crate::bpf::events::{EventsSkel, EventsSkelBuilder};

/// The events besides CPU samples. Values: `EVENT_*` in `bpf/emberd.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// Time off CPU, charged to the stack the thread blocked in (ns).
    OffCpu,
    /// Time the woken thread had been blocked, charged to the waker's stack (ns).
    Wakeup,
    /// Blocked stack and waker stack together (ns).
    OffWake,
    /// Page faults charged to the faulting user stack.
    PageFault,
}

impl EventKind {
    fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => EventKind::OffCpu,
            2 => EventKind::Wakeup,
            3 => EventKind::OffWake,
            4 => EventKind::PageFault,
            _ => return None,
        })
    }
}

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
}

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
        }
    }
}

impl EventOptions {
    /// Whether any event is on.
    pub fn any(&self) -> bool {
        self.offcpu || self.wakeup || self.offwake || self.pagefault
    }
}

/// The thread on the other side of an event: the waker of an off-wake chain.
#[derive(Debug, Clone)]
pub struct OtherSide {
    /// Process.
    pub pid: Pid,
    /// Thread.
    pub tid: Tid,
    /// Thread name.
    pub comm: String,
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
    /// Events lost to a full counts map.
    pub counts_full: u64,
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
}

/// The loaded events programs. Dropping detaches and unloads them.
pub struct EventSampler {
    skel: EventsSkel<'static>,
    _links: Vec<Link>,
    options: EventOptions,
    drains: u64,
    sched_switch_compat: bool,
    /// The task iterator that stamps held stacks (None where iterators or
    /// task storage in them are not available: collection then waits out
    /// the longest block).
    held_stacks: Option<Link>,
}

impl fmt::Debug for EventSampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSampler")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// How often unused stacks are collected, in drains.
const STACK_GC_EVERY: u64 = 2;

/// With held stacks stamped by the task iterator, stacks unused this long
/// are collected: longer than a drain and the flip that precedes it.
const HELD_STACK_HORIZON_NS: u64 = 4_000_000_000;

/// Opens, configures and loads `bpf/events.bpf.c` with one of the two
/// sched_switch programs.
fn load(
    options: &EventOptions,
    unwind: &UnwindMaps,
    compat: bool,
) -> Result<EventsSkel<'static>, CollectError> {
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = EventsSkelBuilder::default()
        .open(storage)
        .map_err(|source| CollectError::LoadEvents { source })?;
    let cfg = &mut open
        .maps
        .rodata_data
        .as_deref_mut()
        .expect("events.bpf.c has read-only globals")
        .config;
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
    open.maps
        .event_stacks
        .set_max_entries(defaults::STACK_MAP_ENTRIES.max(super::defaults::stack_map_entries()))
        .map_err(|source| CollectError::LoadEvents { source })?;
    let counts = defaults::COUNTS_MAP_ENTRIES.max(super::defaults::counts_map_entries());
    for map in [&mut open.maps.event_counts0, &mut open.maps.event_counts1] {
        map.set_max_entries(counts)
            .map_err(|source| CollectError::LoadEvents { source })?;
    }
    // One copy of the tables and process mappings for both objects.
    use std::os::fd::AsFd;
    for (map, shared) in [
        (&mut open.maps.unwind_rows, &unwind.rows),
        (&mut open.maps.proc_unwind, &unwind.procs),
        (&mut open.maps.unwind_refresh, &unwind.refresh),
    ] {
        map.reuse_fd(shared.as_fd())
            .map_err(|source| CollectError::LoadEvents { source })?;
    }
    open.progs.handle__sched_switch.set_autoload(!compat);
    open.progs.handle__sched_switch_compat.set_autoload(compat);
    open.load()
        .map_err(|source| CollectError::LoadEvents { source })
}

impl EventSampler {
    /// Loads `bpf/events.bpf.c` and attaches what `options` switches on. It
    /// unwinds user stacks with the CPU sampler's tables (`unwind`).
    pub fn start(options: EventOptions, unwind: &UnwindMaps) -> Result<Self, CollectError> {
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
        let sched = options.offcpu || options.wakeup || options.offwake;
        // sched_switch has passed prev_state since Linux 5.18; before, the
        // verifier rejects reading it, and the compat program reads the
        // state from the task instead. EMBERD_TEST_SCHED_SWITCH_COMPAT=1
        // forces the compat program (tests of the fallback).
        let force_compat = std::env::var_os("EMBERD_TEST_SCHED_SWITCH_COMPAT").is_some();
        let (skel, compat) = if force_compat {
            (load(&options, unwind, true)?, true)
        } else {
            match load(&options, unwind, false) {
                Ok(skel) => (skel, false),
                Err(e) if sched => {
                    tracing::warn!(
                        "sched_switch with prev_state did not load ({e}); using the pre-5.18 form that reads the task's state"
                    );
                    (load(&options, unwind, true)?, true)
                }
                Err(e) => return Err(e),
            }
        };
        assert_eq!(
            skel.maps.event_counts0.key_size() as usize,
            std::mem::size_of::<types::event_key>(),
            "bpf/emberd.h and src/bpf.rs disagree on event_key"
        );
        let mut links = vec![
            skel.progs
                .handle__sched_process_exec
                .attach()
                .map_err(|source| CollectError::LoadEvents { source })?,
        ];
        if sched {
            for prog in [
                if compat {
                    &skel.progs.handle__sched_switch_compat
                } else {
                    &skel.progs.handle__sched_switch
                },
                &skel.progs.handle__sched_waking,
                &skel.progs.handle__sched_wakeup_new,
            ] {
                links.push(
                    prog.attach()
                        .map_err(|source| CollectError::LoadEvents { source })?,
                );
            }
        }
        if options.pagefault {
            for cpu in online_cpus()? {
                let event = PerfEvent::page_faults(cpu, options.pagefault_period)?;
                let link = skel
                    .progs
                    .handle__page_fault
                    .attach_perf_event(event.as_raw_fd())
                    .map_err(|source| CollectError::Attach { cpu, source })?;
                event.into_raw_fd();
                links.push(link);
            }
        }
        let held_stacks = if sched {
            skel.progs
                .refresh_held_stacks
                .attach()
                .map_err(|e| {
                    tracing::debug!(
                        "task iterator unavailable ({e}); stacks kept for the longest block"
                    )
                })
                .ok()
        } else {
            None
        };
        Ok(Self {
            skel,
            _links: links,
            options,
            drains: 0,
            sched_switch_compat: compat,
            held_stacks,
        })
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
        let mut v = [0u64; 10];
        for (i, slot) in v.iter_mut().enumerate() {
            *slot = super::percpu_sum(map, "event_counters", i as u32)?;
        }
        Ok(EventCounters {
            switches: v[0],
            wakeups: v[1],
            pagefaults: v[2],
            blocked_full: v[3],
            counts_full: v[4],
            stacks_lost: v[5],
            sampled_out: v[6],
            new_process_dropped: v[7],
            short_offcpu_sampled_out: v[8],
            short_wakeups_sampled_out: v[9],
        })
    }

    /// Cumulative counters of these programs' user-stack unwinder.
    pub fn unwind_counters(&self) -> Result<UnwindCounters, CollectError> {
        UnwindCounters::read(&self.skel.maps.unwind_counters)
    }

    /// Processes seen for the first time (or since exec) by these programs.
    pub fn new_processes(&mut self) -> Result<Vec<Pid>, CollectError> {
        super::drain_new_tgids(&self.skel.maps.new_tgids)
    }

    /// Empties the counts map and returns its aggregates.
    pub fn drain(&mut self) -> Result<Vec<RawEvent>, CollectError> {
        let old = super::flip_buffer(
            self.skel
                .maps
                .bss_data
                .as_deref_mut()
                .map(|b| &mut b.active_buffer)
                .expect("events.bpf.c has a .bss"),
        );
        let maps = &self.skel.maps;
        let counts = if old == 0 {
            &maps.event_counts0
        } else {
            &maps.event_counts1
        };
        let entries: Vec<(types::event_key, u64)> = super::drain_counts(counts, "event_counts")?;
        let mut stacks: HashMap<u64, RawStack> = HashMap::new();
        let mut stack = |key| {
            stack_by_key(&mut stacks, key, |key| {
                stack::read_stored(&maps.event_stacks, key)
            })
        };
        let mut out = Vec::with_capacity(entries.len());
        for (k, value) in entries {
            let Some(kind) = EventKind::from_raw(k.event) else {
                continue;
            };
            let sample = RawSample {
                pid: Pid(k.tgid),
                tid: Tid(k.pid),
                comm: super::comm_to_string(&k.comm),
                kernel: stack(k.kstack)?,
                user: stack(k.ustack)?,
                count: value,
            };
            let waker = (kind == EventKind::OffWake).then(|| -> Result<OtherSide, CollectError> {
                Ok(OtherSide {
                    pid: Pid(k.waker_tgid),
                    tid: Tid(k.waker_pid),
                    comm: super::comm_to_string(&k.waker_comm),
                    kernel: stack(k.waker_kstack)?,
                    user: stack(k.waker_ustack)?,
                })
            });
            out.push(RawEvent {
                kind,
                sample,
                waker: waker.transpose()?,
            });
        }
        self.drains += 1;
        if self.drains.is_multiple_of(STACK_GC_EVERY) {
            self.collect_stacks()?;
        }
        Ok(out)
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
        let horizon = ktime_ns().saturating_sub(keep);
        let batch = stacks
            .lookup_batch(stacks.max_entries().min(1024), MapFlags::ANY, MapFlags::ANY)
            .map_err(|source| CollectError::Drain {
                map: "event_stacks",
                source,
            })?;
        let stale: Vec<Vec<u8>> = batch
            .filter(|(_, v)| stack::last_used(v).is_some_and(|used| used < horizon))
            .map(|(k, _)| k)
            .collect();
        for k in stale {
            let _ = stacks.delete(&k);
        }
        Ok(())
    }
}

/// CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns.
fn ktime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::from(t).as_nanos() as u64)
        .unwrap_or(0)
}
