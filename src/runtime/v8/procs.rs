//! Which processes run node, and what `bpf/v8.h` is given of each
//! (`v8_procs`): the code V8 runs, claimed for the walk, and the build's
//! offsets.
//!
//! V8's code is in two places: the builtins embedded in the binary (node
//! 20 and later map them again beside the JIT code, as a second file
//! mapping of the same offsets, so short calls reach them), and the code
//! it compiles, in anonymous executable memory (its code range). The
//! walker claims the span of the anonymous code and the builtins' second
//! mapping, and the builtins in the binary's own text. A frame there that
//! is not JavaScript's stays native (bpf/v8.h), so the span may hold other
//! code. Whenever the process's mappings are read again (new code outside
//! what was listed), the claims are worked out again.

use std::collections::{BTreeMap, HashMap};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::NodeFile;
use crate::collect::node_timers::TimerHook;
use crate::runtime::{CodeRange, Finding, Mapped, Runtime};
use crate::shared::Pid;

/// What emberd does with a node process's frames (`/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Its JavaScript frames are read.
    Unwound,
    /// Its JavaScript frames stay V8's code, and why.
    Native {
        /// Why (the `reason` label in `/metrics`).
        reason: &'static str,
    },
}

/// The node processes and their places in `v8_procs`.
pub struct V8 {
    v8_procs: MapHandle,
    enabled: bool,
    /// Each process's user, state and the entry it was given.
    processes: HashMap<Pid, (u32, NodeState, Vec<u8>)>,
    /// Timer arms to trap in processes newly unwound, not yet taken.
    timer_hooks: Vec<TimerHook>,
}

impl V8 {
    /// Fills `v8_procs`; with `enabled` false every node process stays
    /// native.
    pub fn new(v8_procs: MapHandle, enabled: bool) -> Self {
        Self {
            v8_procs,
            enabled,
            processes: HashMap::new(),
            timer_hooks: Vec::new(),
        }
    }

    fn place_for(&self, pid: Pid, uid: u32) -> bool {
        let placed = self
            .processes
            .iter()
            .filter_map(|(p, (u, st, _))| (*st == NodeState::Unwound).then_some((*p, *u)));
        crate::runtime::may_place(pid, uid, self.v8_procs.max_entries(), placed)
    }
}

/// The claims of a process mapping `file` (the unwinder's file number
/// `number`) with `bias`, from its code mappings `code`: (JIT span low,
/// high; the binary's builtins low, high), zero where there is none.
pub fn claims(file: &NodeFile, number: u64, bias: u64, code: &[CodeRange]) -> [u64; 4] {
    // The builtins: at the symbol, or where it points (Node 18), in
    // whichever of the two the binary's mapping runs.
    let runs = |v: u64, size: u64| {
        code.iter().any(|m| {
            let at = v.wrapping_add(bias);
            m.file == Some(number) && m.start <= at && at.saturating_add(size) <= m.end
        })
    };
    let blob_vaddr = file.blob.and_then(|(v, size)| {
        if runs(v, size) {
            Some((v, size))
        } else {
            file.blob_pointer
                .filter(|p| runs(*p, size))
                .map(|p| (p, size))
        }
    });
    let blob = blob_vaddr.and_then(|(v, size)| Some((file.file_offset(v)?, size)));
    let (mut low, mut high) = (u64::MAX, 0u64);
    let (mut blob_low, mut blob_high) = (0u64, 0u64);
    if let Some((v, size)) = blob_vaddr {
        blob_low = v.wrapping_add(bias);
        blob_high = blob_low.saturating_add(size);
    }
    for m in code {
        let is_v8_code = match m.file {
            None => true,
            // The builtins mapped again: the binary's offsets of the
            // blob, somewhere else than its text.
            Some(f) => {
                f == number
                    && !(m.start <= blob_low && blob_high <= m.end)
                    && blob.is_some_and(|(off, size)| {
                        m.offset < off.saturating_add(size)
                            && off < m.offset.saturating_add(m.end - m.start)
                    })
            }
        };
        if is_v8_code {
            low = low.min(m.start);
            high = high.max(m.end);
        }
    }
    if high == 0 {
        low = 0;
    }
    [low, high, blob_low, blob_high]
}

/// Where process `pid`'s `uv_timer_start` is, if `file` (its unwinder
/// file number `number`, mapped as `code`) exports it: the file reached
/// through one of its mappings, which is the very file whatever the
/// process's mount namespace.
fn timer_hook(pid: Pid, file: &NodeFile, number: u64, code: &[CodeRange]) -> Option<TimerHook> {
    let offset = file.timer_start?;
    let m = code.iter().find(|m| m.file == Some(number))?;
    Some(TimerHook {
        pid,
        file: format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end).into(),
        offset,
    })
}

/// The `v8_procs` entry of a process with these claims and layout.
fn entry(c: [u64; 4], l: &super::layout::V8Layout) -> Vec<u8> {
    use crate::bpf::types::{v8_layout, v8_proc};
    let p = v8_proc {
        code_low: c[0],
        code_high: c[1],
        blob_low: c[2],
        blob_high: c[3],
        layout: v8_layout {
            fp_function: l.fp_function,
            fp_context: l.fp_context,
            fp_bytecode_offset: l.fp_bytecode_offset,
            map_instance_type: l.map_instance_type,
            function_shared: l.function_shared,
            shared_name: l.shared_name,
            shared_script: l.shared_script,
            type_function_first: l.type_function.0,
            type_function_last: l.type_function.1,
            type_shared: l.type_shared,
            fp_bytecode_array: l.fp_bytecode_array,
            type_bytecode_array: l.type_bytecode_array,
            by_pc: u8::from(l.code.is_some()),
            ..Default::default()
        },
    };
    crate::runtime::c_bytes(&p)
}

impl Runtime for V8 {
    fn name(&self) -> &'static str {
        "v8"
    }

    /// Gives the walker the process's V8 code and layout, again whenever
    /// its mappings change what is claimed.
    fn place(&mut self, pid: Pid, uid: u32, mapped: &[Mapped<'_>], code: &[CodeRange]) {
        let found = mapped.iter().find_map(|m| match (m.finding, m.bias) {
            (Finding::V8(f), Some(b)) => Some((f, m.file, b)),
            _ => None,
        });
        // No node binary mapped (any more: an exec into another program).
        let Some((file, number, bias)) = found else {
            self.forget(pid);
            return;
        };
        let native = |reason| (uid, NodeState::Native { reason }, Vec::new());
        let layout = match (&file.layout, self.enabled) {
            (_, false) => {
                self.processes
                    .insert(pid, native("javascript unwinding off"));
                return;
            }
            (Err(e), _) => {
                if !self.processes.contains_key(&pid) {
                    tracing::info!("node process {pid}: JavaScript frames left unnamed: {e}");
                }
                self.processes.insert(pid, native("metadata unusable"));
                return;
            }
            (Ok(l), true) => l,
        };
        if !self.place_for(pid, uid) {
            self.processes
                .insert(pid, native("user's share of node processes"));
            return;
        }
        let value = entry(claims(file, number, bias, code), layout);
        if let Some((_, NodeState::Unwound, old)) = self.processes.get(&pid)
            && *old == value
        {
            return;
        }
        let st = match self
            .v8_procs
            .update(&pid.0.to_ne_bytes(), &value, MapFlags::ANY)
        {
            Ok(()) => NodeState::Unwound,
            Err(e) => {
                tracing::debug!("v8_procs update for pid {pid} failed: {e}");
                NodeState::Native {
                    reason: "too many node processes",
                }
            }
        };
        tracing::debug!("node process {pid}: {st:?}");
        let newly = st == NodeState::Unwound
            && !matches!(self.processes.get(&pid), Some((_, NodeState::Unwound, _)));
        if newly && let Some(hook) = timer_hook(pid, file, number, code) {
            self.timer_hooks.push(hook);
        }
        self.processes.insert(pid, (uid, st, value));
    }

    fn take_timer_hooks(&mut self) -> Vec<TimerHook> {
        std::mem::take(&mut self.timer_hooks)
    }

    fn forget(&mut self, pid: Pid) {
        if self.processes.remove(&pid).is_some() {
            let _ = self.v8_procs.delete(&pid.0.to_ne_bytes());
        }
    }

    fn processes(&self) -> BTreeMap<&'static str, u64> {
        let mut by = BTreeMap::new();
        for (_, st, _) in self.processes.values() {
            let state = match st {
                NodeState::Unwound => "unwound",
                NodeState::Native { reason } => reason,
            };
            *by.entry(state).or_insert(0) += 1;
        }
        by
    }
}

const _: () = assert!(std::mem::size_of::<crate::bpf::types::v8_proc>() == 56);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::elf::Segment;
    use std::path::PathBuf;

    fn range(start: u64, end: u64, offset: u64, file: Option<u64>) -> CodeRange {
        CodeRange {
            start,
            end,
            offset,
            file,
        }
    }

    /// The maps of node 20 measured here: its text, the JIT page in the
    /// code range and the builtins mapped again at its end.
    #[test]
    fn the_code_range_and_the_builtins_are_claimed() {
        let file = NodeFile {
            layout: Err(super::super::layout::LayoutError::Missing("x")),
            blob: Some((0x18c_4000, 0x19_2000)),
            blob_pointer: Some(0x9090_9090_9090_9090),
            timer_start: None,
            loads: vec![Segment {
                kind: crate::shared::elf::PT_LOAD,
                offset: 0x77_2000,
                vaddr: 0xb7_2000,
                filesz: 0x1a8_c000,
                memsz: 0x1a8_c000,
            }],
        };
        let code = [
            range(0xb7_2000, 0x25f_e000, 0x77_2000, Some(7)),
            range(0x7f6d_037c_3000, 0x7f6d_037f_f000, 0, None),
            range(0x7f6d_2360_0000, 0x7f6d_2379_2000, 0x14c_4000, Some(7)),
            // Another file at the same offsets is no copy of the builtins.
            range(0x7f6d_2a00_0000, 0x7f6d_2b00_0000, 0x140_0000, Some(9)),
        ];
        let c = claims(&file, 7, 0, &code);
        assert_eq!(
            c,
            [0x7f6d_037c_3000, 0x7f6d_2379_2000, 0x18c_4000, 0x1a5_6000]
        );
    }

    /// The timer hook opens the node file through the process's first
    /// mapping of it (not the JIT page, not another file), at the
    /// function's file offset; a file without it gives none.
    #[test]
    fn the_timer_hook_is_the_node_file_at_its_offset() {
        let mut file = NodeFile {
            layout: Err(super::super::layout::LayoutError::Missing("x")),
            blob: None,
            blob_pointer: None,
            timer_start: Some(0x166_ff00),
            loads: Vec::new(),
        };
        let code = [
            range(0x7f00_0000_0000, 0x7f00_0004_0000, 0, None),
            range(0x40_0000, 0x50_0000, 0, Some(3)),
            range(0xb7_2000, 0x25f_e000, 0x77_2000, Some(7)),
        ];
        let hook = timer_hook(Pid(42), &file, 7, &code).expect("a hook");
        assert_eq!(
            hook.file,
            PathBuf::from("/proc/42/map_files/b72000-25fe000")
        );
        assert_eq!(hook.offset, 0x166_ff00);
        file.timer_start = None;
        assert_eq!(timer_hook(Pid(42), &file, 7, &code), None);
    }

    /// Node 18: the blob's symbol is a pointer to the builtins in the text.
    #[test]
    fn a_blob_symbol_that_points_is_followed() {
        let file = NodeFile {
            layout: Err(super::super::layout::LayoutError::Missing("x")),
            blob: Some((0x520_9cc8, 0x15_a980)),
            blob_pointer: Some(0x168_a240),
            timer_start: None,
            loads: vec![Segment {
                kind: crate::shared::elf::PT_LOAD,
                offset: 0,
                vaddr: 0x40_0000,
                filesz: 0x4bf_7000,
                memsz: 0x4bf_7000,
            }],
        };
        let code = [range(0x40_0000, 0x4ff_7000, 0, Some(3))];
        let c = claims(&file, 3, 0, &code);
        assert_eq!(c, [0, 0, 0x168_a240, 0x168_a240 + 0x15_a980]);
    }
}
