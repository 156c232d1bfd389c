//! CPython on the runtime seam: which files hold an interpreter and the
//! layout its frames are read with ([`layout`]), which processes run one
//! and what `bpf/python.h` is given of each ([`CPython`]), and the names
//! of the frames it pushed ([`names`]).

pub mod layout;
pub mod metrics;
pub mod names;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

pub use layout::{FileRuntime, PyInterpreter, PyVersion, inspect, scan_processes};
pub use names::{PyMark, PyNameStats, PythonNames};

use super::{CodeRange, Finding, FrameNamer, Mapped, NameStats, Runtime};
use crate::shared::{Frame, Pid};

/// What emberd does with a Python process's frames (`emberd check`,
/// `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonState {
    /// Its Python frames are read and merged into its stacks.
    Unwound {
        /// The interpreter's version.
        version: PyVersion,
    },
    /// Its stacks stay native (the eval loop shows as itself), and why.
    Native {
        /// The interpreter's version, when known.
        version: Option<PyVersion>,
        /// Why (also the `reason` label in `/metrics`).
        reason: &'static str,
    },
}

/// The Python processes and their places in `py_procs`.
pub struct CPython {
    py_procs: MapHandle,
    /// Read Python frames (false: every interpreter stays native).
    enabled: bool,
    /// Python processes seen, their real user, and what is done with
    /// their frames.
    processes: HashMap<Pid, (u32, PythonState)>,
}

impl CPython {
    /// Fills `py_procs`; with `enabled` false every interpreter stays
    /// native (`python unwinding off`).
    pub fn new(py_procs: MapHandle, enabled: bool) -> Self {
        Self {
            py_procs,
            enabled,
            processes: HashMap::new(),
        }
    }

    /// Whether `pid` (of user `uid`) may have a place in `py_procs`
    /// ([`super::may_place`]).
    fn place_for(&self, pid: Pid, uid: u32) -> bool {
        let placed = self.processes.iter().filter_map(|(p, (u, st))| {
            matches!(st, PythonState::Unwound { .. }).then_some((*p, *u))
        });
        super::may_place(pid, uid, self.py_procs.max_entries(), placed)
    }

    /// What is done with process `pid`'s frames, given its mappings:
    /// `None` when it runs no CPython.
    fn decide(&mut self, pid: Pid, uid: u32, mapped: &[Mapped<'_>]) -> Option<PythonState> {
        let mut interp = None;
        let mut unsupported = None;
        let mut libc = None;
        for m in mapped {
            let Finding::Python(f) = m.finding else {
                continue;
            };
            match f {
                FileRuntime::Python(p) => interp = Some((p, m.bias)),
                FileRuntime::UnsupportedPython { version, reason } => {
                    unsupported = Some(PythonState::Native {
                        version: *version,
                        reason,
                    });
                }
                FileRuntime::Libc { tls_specific } => libc = Some(*tls_specific),
            }
        }
        let native = |p: &PyInterpreter, reason| {
            Some(PythonState::Native {
                version: Some(p.version),
                reason,
            })
        };
        match (interp, libc) {
            (None, _) => unsupported,
            (Some((p, _)), _) if !self.enabled => native(p, "python unwinding off"),
            (Some((p, None)), _) => native(p, "interpreter's load address not found"),
            (Some((p, _)), None) => native(p, "libc's thread-specific data not found"),
            (Some((p, _)), _) if !self.place_for(pid, uid) => {
                native(p, "user's share of Python processes")
            }
            (Some((p, Some(bias))), Some(tls)) => {
                let mut v = [0u8; layout::PY_PROC_BYTES];
                let tss = p.runtime.wrapping_add(u64::from(p.layout.runtime_tss));
                v[0..8].copy_from_slice(&p.eval.0.wrapping_add(bias).to_ne_bytes());
                v[8..16].copy_from_slice(&p.eval.1.wrapping_add(bias).to_ne_bytes());
                v[16..24].copy_from_slice(&tss.wrapping_add(bias).to_ne_bytes());
                v[24..28].copy_from_slice(&tls.to_ne_bytes());
                v[28..32].copy_from_slice(&p.version.0.to_ne_bytes());
                v[32..].copy_from_slice(&p.layout.to_bytes());
                match self
                    .py_procs
                    .update(&pid.0.to_ne_bytes(), &v, MapFlags::ANY)
                {
                    Ok(()) => Some(PythonState::Unwound { version: p.version }),
                    Err(e) => {
                        tracing::debug!("py_procs update for pid {pid} failed: {e}");
                        native(p, "too many Python processes")
                    }
                }
            }
        }
    }
}

impl Runtime for CPython {
    fn name(&self) -> &'static str {
        "python"
    }

    /// Gives the BPF walker a Python process's interpreter (`py_procs`),
    /// once the tables of its interpreter and libc are in.
    fn place(&mut self, pid: Pid, uid: u32, mapped: &[Mapped<'_>], _code: &[CodeRange]) {
        let key = pid.0.to_ne_bytes();
        match self.decide(pid, uid, mapped) {
            Some(st) => {
                if !matches!(st, PythonState::Unwound { .. }) {
                    let _ = self.py_procs.delete(&key);
                }
                if self.processes.get(&pid).map(|(_, s)| s) != Some(&st) {
                    tracing::debug!("python process {pid}: {st:?}");
                }
                self.processes.insert(pid, (uid, st));
            }
            None => self.forget(pid),
        }
    }

    fn forget(&mut self, pid: Pid) {
        if self.processes.remove(&pid).is_some() {
            let _ = self.py_procs.delete(&pid.0.to_ne_bytes());
        }
    }

    fn processes(&self) -> BTreeMap<&'static str, u64> {
        let mut by = BTreeMap::new();
        for (_, st) in self.processes.values() {
            let state = match st {
                PythonState::Unwound { .. } => "unwound",
                PythonState::Native { reason, .. } => reason,
            };
            *by.entry(state).or_insert(0) += 1;
        }
        by
    }
}

impl FrameNamer for PythonNames {
    fn runtime(&self) -> &'static str {
        "python"
    }

    fn claims(&self, slot: u64) -> bool {
        names::is_tagged(slot)
    }

    fn frames(&mut self, pid: Pid, slot: u64) -> Arc<[Frame]> {
        self.name(pid, slot)
    }

    fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool) {
        PythonNames::forget_exited(self, is_live);
    }

    fn stats(&self) -> NameStats {
        let s = PythonNames::stats(self);
        NameStats {
            partial: 0,
            named: s.named,
            evicted: s.evicted,
            unreadable: 0,
            cached_bytes: s.cached_bytes,
        }
    }
}
