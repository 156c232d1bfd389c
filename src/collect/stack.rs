//! Stacks as the BPF programs store them (`struct stored_stack` in
//! `bpf/emberd.h`, written by `bpf/unwind.h`): by a 64-bit hash of their
//! frames, with how each walk ended, and the unwinder's counters.

use crate::bpf::enums as c;
use std::collections::HashMap;

use libbpf_rs::MapCore;

use super::{CollectError, RawStack};

/// Stack key of "no stack of this kind" (`EMBERD_STACK_NONE`).
pub const STACK_NONE: u64 = 0;
/// Stack key of "there was a stack but it could not be stored" (`EMBERD_STACK_LOST`).
pub const STACK_LOST: u64 = 1;

/// Frames the BPF walkers keep per stack (`EMBERD_MAX_STACK_DEPTH`); a
/// deeper stack ends in `[truncated]`. Pinned to the skeleton's frame array
/// (`EMBERD_STACK_SLOTS`, one more) below.
pub const MAX_STACK_DEPTH: usize = 127;
const _: () =
    assert!(MAX_STACK_DEPTH + 1 == std::mem::size_of::<crate::bpf::types::stored_stack>() / 8 - 4);

/// How a stack's walk ended (`enum stack_end` in `bpf/emberd.h`, whose
/// values these are, checked at build time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum StackEnd {
    /// Reached the outermost frame (`_start`, `clone`, `start_thread`).
    Root = c::STACK_END_ROOT,
    /// The depth limit cut it; its root is missing.
    Truncated = c::STACK_END_TRUNCATED,
    /// The last frame's file has no unwind information.
    NoUnwindInfo = c::STACK_END_NO_INFO,
    /// The process's unwind tables were not built yet; frame pointers only.
    NotReady = c::STACK_END_NOT_READY,
    /// Reading the thread's stack memory failed.
    ReadFailed = c::STACK_END_ERR_READ,
    /// No unwind row covers the pc.
    NoRow = c::STACK_END_ERR_NO_ROW,
    /// A CFI rule emberd cannot evaluate.
    Unsupported = c::STACK_END_ERR_UNSUPPORTED,
    /// The frame address did not move up the stack.
    BadCfa = c::STACK_END_ERR_CFA,
    /// A return address outside every executable mapping.
    BadPc = c::STACK_END_ERR_PC,
    /// A kernel stack, as the kernel's own unwinder gave it.
    Kernel = c::STACK_END_KERNEL,
    /// Anonymous code (JIT) with no frame pointer to follow: the walk
    /// stopped short of the thread's root.
    NoFramePointer = c::STACK_END_ERR_NO_FP,
    /// The last frame's file has CFI, but its table had no room in the
    /// table budget (refused or taken back): frame pointers failed there.
    BudgetFull = c::STACK_END_BUDGET,
}

impl StackEnd {
    /// Every end, in `enum stack_end` order.
    pub const ALL: [StackEnd; 12] = [
        StackEnd::Root,
        StackEnd::Truncated,
        StackEnd::NoUnwindInfo,
        StackEnd::NotReady,
        StackEnd::ReadFailed,
        StackEnd::NoRow,
        StackEnd::Unsupported,
        StackEnd::BadCfa,
        StackEnd::BadPc,
        StackEnd::Kernel,
        StackEnd::NoFramePointer,
        StackEnd::BudgetFull,
    ];

    fn from_raw(v: u32) -> StackEnd {
        Self::ALL
            .get(v as usize)
            .copied()
            .unwrap_or(StackEnd::Unsupported)
    }

    /// The `reason` label of this end in `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            StackEnd::Root => "complete",
            StackEnd::Truncated => "truncated",
            StackEnd::NoUnwindInfo => "no_unwind_info",
            StackEnd::NotReady => "tables_not_ready",
            StackEnd::ReadFailed => "read_failed",
            StackEnd::NoRow => "pc_not_covered",
            StackEnd::Unsupported => "unsupported_rule",
            StackEnd::BadCfa => "bad_cfa",
            StackEnd::BadPc => "pc_not_mapped",
            StackEnd::Kernel => "kernel",
            StackEnd::NoFramePointer => "anon_no_frame_pointer",
            StackEnd::BudgetFull => "table_budget_full",
        }
    }

    /// The reason shown in an `[unwind error: REASON]` marker, for the ends
    /// that are errors.
    pub fn error_reason(self) -> Option<&'static str> {
        Some(match self {
            StackEnd::NotReady => "tables not ready",
            StackEnd::ReadFailed => "stack not readable",
            StackEnd::NoRow => "pc not covered by unwind table",
            StackEnd::Unsupported => "unsupported CFI rule",
            StackEnd::BadCfa => "frame address did not advance",
            StackEnd::BadPc => "return address not in code",
            StackEnd::NoFramePointer => "no frame pointer in anonymous code",
            _ => return None,
        })
    }
}

crate::bpf::check_c_enum!(StackEnd, c::STACK_END_MAX);

/// Parses a `struct stored_stack` value.
pub(crate) fn parse_stored(v: &[u8]) -> Option<RawStack> {
    // check (8), used (8), nr (4), end (4), uid (4), pad (4), ips: read by
    // offset, the lookup buffer carries no alignment guarantee.
    let nr = u32::from_ne_bytes(v.get(16..20)?.try_into().ok()?) as usize;
    let end = u32::from_ne_bytes(v.get(20..24)?.try_into().ok()?);
    let ips: std::sync::Arc<[u64]> = v
        .get(32..)?
        .chunks_exact(8)
        .take(nr)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8-byte chunk")))
        .collect();
    Some(RawStack::Ips {
        ips,
        end: StackEnd::from_raw(end),
    })
}

/// `stored_stack.uid` of a value: the user whose share it counts in.
pub(crate) fn owner(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(24..28)?.try_into().ok()?))
}

/// `stored_stack.used` of a value: ns of last use.
pub(crate) fn last_used(v: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(v.get(8..16)?.try_into().ok()?))
}

/// The stack a key names: the markers for keys 0 and 1, else what `read`
/// finds, read once per key per drain.
pub(crate) fn stack_by_key(
    cache: &mut HashMap<u64, RawStack>,
    key: u64,
    read: impl FnOnce(u64) -> Result<RawStack, CollectError>,
) -> Result<RawStack, CollectError> {
    match key {
        STACK_NONE => Ok(RawStack::None),
        STACK_LOST => Ok(RawStack::Lost),
        _ => {
            if let Some(s) = cache.get(&key) {
                return Ok(s.clone());
            }
            let s = read(key)?;
            cache.insert(key, s.clone());
            Ok(s)
        }
    }
}

/// Reads one stack of a stack map by key; a missing key is [`RawStack::Lost`].
pub(crate) fn read_stored(map: &impl MapCore, key: u64) -> Result<RawStack, CollectError> {
    use std::os::fd::AsRawFd;
    // Into one reused buffer: libbpf-rs's lookup returns a new vector per
    // call, and every event stack of a drain is read this way.
    thread_local! {
        static VALUE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    if map.key_size() != 8 {
        return Err(CollectError::Drain {
            map: "stacks",
            source: libbpf_rs::Error::from(std::io::Error::from_raw_os_error(libc::EINVAL)),
        });
    }
    VALUE.with(|value| {
        let mut value = value.borrow_mut();
        value.clear();
        value.resize(map.value_size() as usize, 0);
        let key = key.to_ne_bytes();
        // SAFETY: the key is the map's 8 bytes; the buffer is as large as
        // the map's values.
        let ret = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_elem(
                map.as_fd().as_raw_fd(),
                key.as_ptr().cast(),
                value.as_mut_ptr().cast(),
            )
        };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOENT) => Ok(RawStack::Lost),
                _ => Err(CollectError::Drain {
                    map: "stacks",
                    source: libbpf_rs::Error::from(err),
                }),
            };
        }
        Ok(parse_stored(&value).unwrap_or(RawStack::Lost))
    })
}

/// Cumulative counters of one object's user-stack unwinder
/// (`enum unwind_counter` in `bpf/emberd.h`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindCounters {
    /// User stacks walked.
    pub walks: u64,
    /// Walks of processes whose tables were not ready (frame pointers only).
    pub not_ready: u64,
    /// Frames unwound with a table row.
    pub table_steps: u64,
    /// Frames unwound with frame pointers.
    pub fp_steps: u64,
    /// Stacks (kernel or user) lost because the stack map was full.
    pub lost_full: u64,
    /// Stacks lost to a 64-bit key collision.
    pub lost_collision: u64,
    /// Python frames read.
    pub py_frames: u64,
    /// Code objects read (met for the first time, or again after eviction).
    pub py_codes: u64,
    /// Eval-loop calls left without their Python frames, by reason
    /// (`enum py_mark`, index 0 unused).
    pub py_marks: [u64; (c::UCOUNTER_PY_MARK_END - c::UCOUNTER_PY_MARK_BASE) as usize],
    /// How user walks ended, in [`StackEnd::ALL`] order.
    pub ends: [u64; StackEnd::ALL.len()],
    /// Code records refused because their user held their share of
    /// `py_codes` (half of it; root is not limited).
    pub py_code_share: u64,
    /// Code records refused because `py_codes` was full.
    pub py_code_full: u64,
    /// Java frames (interpreted, compiled, stubs) unwound.
    pub java_frames: u64,
    /// Java walks stopped at a marker, by reason (`enum java_mark`).
    pub java_marks: [u64; (c::UCOUNTER_JAVA_MARK_END - c::UCOUNTER_JAVA_MARK_BASE) as usize],
    /// JavaScript frames read from V8's frames.
    pub v8_frames: u64,
    /// V8's own frames (entry, exit, stubs) left native.
    pub v8_typed: u64,
    /// Frames in V8's code whose function could not be read (left native).
    pub v8_not_js: u64,
}

impl UnwindCounters {
    /// Reads an `unwind_counters` per-CPU array, summed over CPUs.
    pub(crate) fn read(map: &impl MapCore) -> Result<Self, CollectError> {
        const ENDS: usize = StackEnd::ALL.len();
        const MARKS: usize = (c::UCOUNTER_PY_MARK_END - c::UCOUNTER_PY_MARK_BASE) as usize;
        let at = |i: u32| i as usize;
        let mut v = [0u64; c::UCOUNTER_MAX as usize];
        super::percpu_sums(map, "unwind_counters", &mut v)?;
        let mut ends = [0u64; ENDS];
        ends.copy_from_slice(&v[at(c::UCOUNTER_END_BASE)..][..ENDS]);
        let mut py_marks = [0u64; MARKS];
        py_marks.copy_from_slice(&v[at(c::UCOUNTER_PY_MARK_BASE)..][..MARKS]);
        const JAVA_MARKS: usize = (c::UCOUNTER_JAVA_MARK_END - c::UCOUNTER_JAVA_MARK_BASE) as usize;
        let mut java_marks = [0u64; JAVA_MARKS];
        java_marks.copy_from_slice(&v[at(c::UCOUNTER_JAVA_MARK_BASE)..][..JAVA_MARKS]);
        Ok(Self {
            walks: v[at(c::UCOUNTER_WALKS)],
            not_ready: v[at(c::UCOUNTER_NOT_READY)],
            table_steps: v[at(c::UCOUNTER_TABLE_STEPS)],
            fp_steps: v[at(c::UCOUNTER_FP_STEPS)],
            lost_full: v[at(c::UCOUNTER_LOST_FULL)],
            lost_collision: v[at(c::UCOUNTER_LOST_COLLISION)],
            py_frames: v[at(c::UCOUNTER_PY_FRAMES)],
            py_codes: v[at(c::UCOUNTER_PY_CODES)],
            py_marks,
            ends,
            py_code_share: v[at(c::UCOUNTER_PY_CODE_SHARE)],
            py_code_full: v[at(c::UCOUNTER_PY_CODE_FULL)],
            java_frames: v[at(c::UCOUNTER_JAVA_FRAMES)],
            java_marks,
            v8_frames: v[at(c::UCOUNTER_V8_FRAMES)],
            v8_typed: v[at(c::UCOUNTER_V8_TYPED)],
            v8_not_js: v[at(c::UCOUNTER_V8_NOT_JS)],
        })
    }
}
