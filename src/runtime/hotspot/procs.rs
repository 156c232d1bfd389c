//! Which processes run a HotSpot JVM, and what `bpf/hotspot.h` is given
//! of each (`hs_procs`): the code cache's bounds and heaps, the
//! interpreter's code, the call stub's return address and the offsets,
//! all read from the JVM's own tables when its `libjvm.so` is mapped.
//!
//! A JVM found while it starts has no tables yet (they are filled in as
//! it initialises): it is tried again every [`RETRY`], [`TRIES`] times.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::Jvm;
use super::layout::CodeStart;
use crate::runtime::{CodeRange, Finding, Mapped, Runtime};
use crate::shared::Pid;

/// How often a JVM whose tables could not be read is tried again.
pub const RETRY: Duration = Duration::from_secs(1);
/// How many times it is tried (a JVM starts in well under this).
pub const TRIES: u32 = 60;
/// JVMs of one user (not root) tried again at once: a user starting
/// thousands of processes that claim to be JVMs costs the daemon at most
/// this many reads of [`super::ATTACH_BUDGET`] a second.
pub const PENDING_PER_USER: usize = 8;

/// What emberd does with a JVM's frames (`/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JvmState {
    /// Its code cache is walked and its Java frames named.
    Unwound {
        /// Its feature release.
        major: u32,
    },
    /// Not yet: its tables could not be read (it may be starting); tried
    /// again.
    Pending {
        /// Tries so far.
        tries: u32,
        /// The file and bias to try with.
        file: super::JvmFile,
        /// Its load bias.
        bias: u64,
        /// When it was last tried.
        at: Instant,
    },
    /// Its Java frames stay unnamed, and why.
    Native {
        /// Why (the `reason` label in `/metrics`).
        reason: &'static str,
    },
}

/// The JVM processes and their places in `hs_procs`.
pub struct HotSpot {
    hs_procs: MapHandle,
    enabled: bool,
    processes: HashMap<Pid, (u32, JvmState)>,
}

impl HotSpot {
    /// Fills `hs_procs`; with `enabled` false every JVM stays native.
    pub fn new(hs_procs: MapHandle, enabled: bool) -> Self {
        Self {
            hs_procs,
            enabled,
            processes: HashMap::new(),
        }
    }

    /// Whether `pid` (user `uid`) may take a place in `hs_procs`
    /// ([`crate::runtime::may_place`]).
    fn place_for(&self, pid: Pid, uid: u32) -> bool {
        let placed = self
            .processes
            .iter()
            .filter_map(|(p, (u, st))| matches!(st, JvmState::Unwound { .. }).then_some((*p, *u)));
        crate::runtime::may_place(pid, uid, self.hs_procs.max_entries(), placed)
    }

    /// Reads the JVM and fills its entry; the state it is then in.
    fn attach(
        &mut self,
        pid: Pid,
        uid: u32,
        file: &super::JvmFile,
        bias: u64,
        tries: u32,
    ) -> JvmState {
        if !self.place_for(pid, uid) {
            return JvmState::Native {
                reason: "user's share of JVM processes",
            };
        }
        let pending = self
            .processes
            .iter()
            .filter(|(p, (u, st))| {
                **p != pid && *u == uid && matches!(st, JvmState::Pending { .. })
            })
            .count();
        if uid != 0 && tries == 0 && pending >= PENDING_PER_USER {
            return JvmState::Native {
                reason: "user's share of JVMs starting",
            };
        }
        let value = match Jvm::attach(pid, file, bias).and_then(|mut jvm| entry(&mut jvm)) {
            Ok(v) => v,
            Err(e) if tries + 1 < TRIES => {
                tracing::debug!("JVM {pid} not read yet (try {}): {e}", tries + 1);
                return JvmState::Pending {
                    tries: tries + 1,
                    file: file.clone(),
                    bias,
                    at: Instant::now(),
                };
            }
            Err(e) => {
                tracing::info!("JVM {pid}: Java frames left unnamed: {e}");
                return JvmState::Native {
                    reason: "structure tables unreadable",
                };
            }
        };
        match self
            .hs_procs
            .update(&pid.0.to_ne_bytes(), &value.1, MapFlags::ANY)
        {
            Ok(()) => JvmState::Unwound { major: value.0 },
            Err(e) => {
                tracing::debug!("hs_procs update for pid {pid} failed: {e}");
                JvmState::Native {
                    reason: "too many JVM processes",
                }
            }
        }
    }
}

/// The `hs_procs` entry of `jvm`, with its feature release.
fn entry(jvm: &mut Jvm) -> Result<(u32, Vec<u8>), super::HotSpotError> {
    use crate::bpf::types::{hs_heap, hs_layout, hs_proc};
    let l = jvm.layout.clone();
    let heaps = jvm.heaps()?;
    if heaps.is_empty() {
        return Err(super::HotSpotError::NotStarted("no code heaps yet"));
    }
    let (low, high) = jvm.code_bounds()?;
    let (interp_low, interp_high) = jvm.interpreter()?;
    let narrow = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
    let mut p = hs_proc {
        code_low: low,
        code_high: high,
        interp_low,
        interp_high,
        call_stub_return: jvm.call_stub_return()?,
        ..Default::default()
    };
    for (slot, h) in p.heaps.iter_mut().zip(&heaps) {
        *slot = hs_heap {
            low: h.low,
            high: h.reserved_high,
            segmap: h.segmap,
            log2_segment: h.log2_segment,
            ..Default::default()
        };
    }
    p.layout = hs_layout {
        heap_block: narrow(l.heap_block),
        blob_name: narrow(l.blob_name),
        blob_frame_size: narrow(l.blob_frame_size),
        blob_frame_complete: narrow(l.blob_frame_complete.offset),
        blob_code: narrow(match l.code_start {
            CodeStart::Address(o) | CodeStart::Offset(o) => o,
        }),
        blob_kind: l.blob_kind.map_or(u16::MAX, narrow),
        nmethod_compile_id: narrow(l.nmethod_compile_id),
        frame_complete_width: l.blob_frame_complete.width,
        code_is_offset: u8::from(matches!(l.code_start, CodeStart::Offset(_))),
        frame_method: l.frame_method as i8,
        frame_bcp: l.frame_bcp as i8,
        kind_nmethod: l.kind_nmethod,
        method_const: narrow(l.method_const),
        const_size: narrow(l.const_size),
        ..Default::default()
    };
    Ok((jvm.major, crate::runtime::c_bytes(&p)))
}

impl Runtime for HotSpot {
    fn name(&self) -> &'static str {
        "hotspot"
    }

    /// Reads a JVM once its `libjvm.so` is mapped (and its table in), and
    /// gives the BPF walker its code cache (`hs_procs`).
    fn place(&mut self, pid: Pid, uid: u32, mapped: &[Mapped<'_>], _code: &[CodeRange]) {
        let found = mapped.iter().find_map(|m| match (m.finding, m.bias) {
            (Finding::HotSpot(f), Some(b)) => Some((f, b)),
            _ => None,
        });
        // No libjvm mapped (any more: an exec into another program).
        let Some((file, bias)) = found else {
            self.forget(pid);
            return;
        };
        if let Some((_, st)) = self.processes.get(&pid)
            && !matches!(st, JvmState::Pending { .. })
        {
            return; // read once: its code cache does not move
        }
        let st = if self.enabled {
            self.attach(pid, uid, file, bias, 0)
        } else {
            JvmState::Native {
                reason: "java unwinding off",
            }
        };
        tracing::debug!("JVM process {pid}: {st:?}");
        self.processes.insert(pid, (uid, st));
    }

    fn forget(&mut self, pid: Pid) {
        if self.processes.remove(&pid).is_some() {
            let _ = self.hs_procs.delete(&pid.0.to_ne_bytes());
        }
    }

    fn tick(&mut self) {
        let due: Vec<(Pid, u32, super::JvmFile, u64, u32)> = self
            .processes
            .iter()
            .filter_map(|(pid, (uid, st))| match st {
                JvmState::Pending {
                    tries,
                    file,
                    bias,
                    at,
                } if at.elapsed() >= RETRY => Some((*pid, *uid, file.clone(), *bias, *tries)),
                _ => None,
            })
            .collect();
        for (pid, uid, file, bias, tries) in due {
            let st = self.attach(pid, uid, &file, bias, tries);
            if !matches!(st, JvmState::Pending { .. }) {
                tracing::debug!("JVM process {pid}: {st:?}");
            }
            self.processes.insert(pid, (uid, st));
        }
    }

    fn processes(&self) -> BTreeMap<&'static str, u64> {
        let mut by = BTreeMap::new();
        for (_, st) in self.processes.values() {
            let state = match st {
                JvmState::Unwound { .. } => "unwound",
                JvmState::Pending { .. } => "starting",
                JvmState::Native { reason } => reason,
            };
            *by.entry(state).or_insert(0) += 1;
        }
        by
    }
}

const _: () = assert!(std::mem::size_of::<crate::bpf::types::hs_proc>() == 168);
