//! The runtime seam, agent side: managed runtimes whose own functions a
//! native stack would hide behind the runtime's loop (CPython today). The
//! BPF side of the seam is `bpf/runtime.h`; each runtime is a module here
//! and a header there.
//!
//! What a runtime gives, and who asks:
//! - [`inspect`]: what a mapped file holds for it, found once per file by
//!   the unwind stage's table builder and kept with the file's table;
//! - [`Runtime`]: per-process state, and what its BPF half needs of each
//!   process (the unwind stage calls it whenever it uploads a process's
//!   mappings, and when a process is gone), with its figures for
//!   `/metrics` and logs;
//! - [`FrameNamer`]: names for the tagged stack slots its BPF half pushed
//!   (the symbolize stage asks, at drains);
//! - its settings in [`RuntimeOptions`].
//!
//! Adding a runtime: its module here implementing both traits, a variant
//! of [`Finding`] with a line in [`inspect`], and one line in each of
//! [`start`] and [`namers`].
//!
//! This stage sits between `collect` (whose maps it is handed) and
//! `unwind`; it imports only those below it.

pub mod attached;
pub mod hotspot;
pub mod memory;
pub mod metrics;
pub mod python;
pub mod v8;

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use libbpf_rs::MapHandle;

use crate::collect::{CollectError, UnwindMaps};
use crate::shared::{Frame, Pid};

/// What a mapped file holds for a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A CPython interpreter (or the C library whose thread data its
    /// thread state is found through).
    Python(python::FileRuntime),
    /// A HotSpot JVM's `libjvm.so`.
    HotSpot(hotspot::JvmFile),
    /// A V8 build with postmortem metadata (node, `libnode.so`).
    V8(v8::NodeFile),
}

/// What `file`, mapped as code by some process, holds for any runtime:
/// its headers and dynamic symbols are read once, for every runtime's
/// detector.
pub fn inspect(file: &File) -> Option<Finding> {
    let elf = crate::shared::elf::Headers::read(file).ok()?;
    let wanted: Vec<&str> = python::layout::SYMBOLS
        .iter()
        .chain(hotspot::vmstructs::SYMBOLS.iter())
        .copied()
        .collect();
    let syms = elf
        .dynamic_symbols_where(file, |n| {
            wanted.contains(&n) || n.starts_with(v8::PREFIX) || n == v8::TIMER_START
        })
        .ok()?;
    python::inspect(file, &elf, &syms)
        .map(Finding::Python)
        .or_else(|| hotspot::inspect(&elf, &syms).map(Finding::HotSpot))
        .or_else(|| v8::inspect(file, &elf, &syms).map(Finding::V8))
}

/// An executable mapping of a process whose file holds something for a
/// runtime.
#[derive(Debug, Clone, Copy)]
pub struct Mapped<'a> {
    /// What the file holds.
    pub finding: &'a Finding,
    /// Runtime address minus file address for this mapping; `None` when
    /// the segment it maps was not found.
    pub bias: Option<u64>,
    /// Which file it maps (as [`CodeRange::file`]).
    pub file: u64,
}

/// An executable mapping of a process, as the unwinder read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeRange {
    /// Its first address.
    pub start: u64,
    /// Its end (exclusive).
    pub end: u64,
    /// The file offset it maps from.
    pub offset: u64,
    /// Which file it maps: the same number for every mapping of one file
    /// (the unwinder's table id); `None` for memory no file backs (JIT
    /// code).
    pub file: Option<u64>,
}

/// The unwind stage's side of a runtime: which processes run it, and what
/// its BPF half is given of each.
pub trait Runtime: Send {
    /// Its name: the `runtime` of its log lines and metrics.
    fn name(&self) -> &'static str;
    /// A process's mappings were read or its tables changed: give the BPF
    /// walker what it needs of this runtime in the process (of account
    /// `uid`: whose share it counts in), or take it back. `mapped`: its mappings whose files hold something
    /// for a runtime (any runtime: each picks its own); `code`: all its
    /// executable mappings.
    fn place(&mut self, pid: Pid, uid: u32, mapped: &[Mapped<'_>], code: &[CodeRange]);
    /// A process is gone.
    fn forget(&mut self, pid: Pid);
    /// Its processes by state: `unwound`, or why their stacks stay native.
    fn processes(&self) -> BTreeMap<&'static str, u64>;
    /// Called at each poll of the unwind stage: work left for later
    /// (a JVM read again once it has started).
    fn tick(&mut self) {}
    /// Processes newly placed whose event-loop timer arms the collect
    /// stage is to trap (node's `uv_timer_start`), taken once.
    fn take_timer_hooks(&mut self) -> Vec<crate::collect::node_timers::TimerHook> {
        Vec::new()
    }
}

/// The symbolize stage's side of a runtime: names of the tagged stack
/// slots its BPF half pushed in place of native frames.
pub trait FrameNamer: Send {
    /// Its name, as [`Runtime::name`].
    fn runtime(&self) -> &'static str;
    /// Whether `slot` is one of its tagged frames or markers.
    fn claims(&self, slot: u64) -> bool;
    /// The frames slot `slot` of process `pid` stands for, outermost first
    /// (a compiled method, then the methods inlined into it).
    fn frames(&mut self, pid: Pid, slot: u64) -> Arc<[Frame]>;
    /// Forgets what it holds of processes that are gone.
    fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool);
    /// Forgets what it holds of process `pid`, which exec'd: a slot of the
    /// new program may mean another frame. (Python's slots carry their
    /// code object's fingerprint: nothing to do by default.)
    fn forget(&mut self, _pid: Pid) {}
    /// What naming found so far.
    fn stats(&self) -> NameStats;
}

/// Counts of a runtime's naming, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameStats {
    /// Frames named.
    pub named: u64,
    /// Frames whose record was gone before the drain (shown as a marker).
    pub evicted: u64,
    /// Frames named in part: what they hold beyond their function was gone
    /// by the drain (the functions inlined into a JavaScript function's
    /// optimized code).
    pub partial: u64,
    /// Frames shown as a marker because a read of the process failed
    /// (a read past the drain's budget, a mapping gone), apart from code
    /// the runtime really dropped.
    pub unreadable: u64,
    /// Bytes held in its caches.
    pub cached_bytes: u64,
}

/// The runtimes' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// Read Python frames (default true); false leaves interpreters native.
    pub python: bool,
    /// Read Java frames of HotSpot JVMs (default true).
    pub java: bool,
    /// Read JavaScript frames of Node.js processes (default true).
    pub node: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            python: true,
            java: true,
            node: true,
        }
    }
}

/// Every runtime's unwind side, with the BPF maps it fills.
pub fn start(
    options: &RuntimeOptions,
    maps: &UnwindMaps,
) -> Result<Vec<Box<dyn Runtime>>, CollectError> {
    Ok(vec![
        Box::new(python::CPython::new(
            handle(&maps.py_procs, "py_procs")?,
            options.python,
        )),
        Box::new(hotspot::HotSpot::new(
            handle(&maps.hs_procs, "hs_procs")?,
            options.java,
        )),
        Box::new(v8::V8::new(
            handle(&maps.v8_procs, "v8_procs")?,
            options.node,
        )),
    ])
}

/// Every runtime's naming side, with the BPF maps it reads.
pub fn namers(maps: &UnwindMaps) -> Result<Vec<Box<dyn FrameNamer>>, CollectError> {
    Ok(vec![
        Box::new(python::PythonNames::new(handle(
            &maps.py_codes,
            "py_codes",
        )?)),
        Box::new(hotspot::frames::JavaNames::new()),
        Box::new(v8::frames::NodeNames::new()),
    ])
}

/// Whether process `pid` of account `uid` (a uid, or the owner of the
/// subordinate range holding it: [`crate::shared::accounts`]) may take a
/// place in a runtime's BPF map of `max_entries`, which every user's
/// processes share: root always, a process that holds one keeps it,
/// another user holds at most half (issue 41), so one user's thousands of
/// processes cannot leave another's unnamed, and all users but root
/// together at most three quarters, so that many users (or the many uids
/// of one, without a range in `/etc/subuid`) leave room for root's.
/// `placed`: (process, account) of those holding a place. Linear in
/// them, once per upload of a process.
pub(crate) fn may_place(
    pid: Pid,
    uid: u32,
    max_entries: u32,
    placed: impl Iterator<Item = (Pid, u32)>,
) -> bool {
    let share = (max_entries / 2).max(1) as usize;
    let others_at_most = (max_entries - (max_entries / 4).max(1)) as usize;
    let (mut held, mut others) = (0, 0);
    for (p, u) in placed {
        if p == pid {
            return true;
        }
        held += usize::from(u == uid);
        others += usize::from(u != 0);
    }
    uid == 0 || (held < share && others < others_at_most)
}

/// The bytes of `value`, a C struct of integers (a BPF map's value type):
/// what a map entry holds.
pub(crate) fn c_bytes<T: Copy>(value: &T) -> Vec<u8> {
    // SAFETY: callers pass the generated BPF types, plain C structs of
    // integers with no padding left uninitialised by `Default`; reading
    // their bytes is reading integers.
    unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    }
    .to_vec()
}

/// A handle of its own on a map the sampler holds.
fn handle(map: &MapHandle, name: &'static str) -> Result<MapHandle, CollectError> {
    MapHandle::try_from(map).map_err(|source| CollectError::Drain { map: name, source })
}

/// Whether a stack slot is a runtime's tagged frame or marker, not an
/// address: runtimes tag their slots with a top byte of 0xe0-0xef
/// (bpf/emberd.h), which no user or kernel address has.
pub fn is_tagged(slot: u64) -> bool {
    slot >> 60 == 0xe
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(places: &[(u32, u32)]) -> impl Iterator<Item = (Pid, u32)> + '_ {
        places.iter().map(|&(p, u)| (Pid(p), u))
    }

    #[test]
    fn a_user_holds_half_and_all_users_three_quarters_root_always_placed() {
        // 8 places: one user at most 4, users other than root at most 6.
        let one_user: Vec<(u32, u32)> = (1..=4).map(|p| (p, 1000)).collect();
        assert!(!may_place(Pid(9), 1000, 8, held(&one_user)));
        assert!(may_place(Pid(9), 1001, 8, held(&one_user)));
        assert!(
            may_place(Pid(4), 1000, 8, held(&one_user)),
            "a place held is kept"
        );
        let many_uids: Vec<(u32, u32)> = (1..=6).map(|p| (p, 100_000 + p)).collect();
        assert!(!may_place(Pid(9), 1001, 8, held(&many_uids)));
        assert!(may_place(Pid(9), 0, 8, held(&many_uids)));
    }

    /// `py_procs` at its default size (4,096 places): one user's 2,048
    /// processes fill their half, the next is refused, another user and
    /// root are placed; users other than root stop at 3,072 together,
    /// root's processes never.
    #[test]
    fn python_places_at_the_default_size() {
        let max = crate::collect::defaults::PYTHON_PROCESSES;
        assert_eq!(max, 4096);
        let one: Vec<(u32, u32)> = (1..=2048).map(|p| (p, 1000)).collect();
        assert!(!may_place(Pid(99_999), 1000, max, held(&one)));
        assert!(may_place(Pid(99_999), 1001, max, held(&one)));
        assert!(may_place(Pid(99_999), 0, max, held(&one)));
        let mut two = one.clone();
        two.extend((2049..=3072).map(|p| (p, 1001)));
        assert!(!may_place(Pid(99_999), 1002, max, held(&two)));
        let mut rooted = two.clone();
        rooted.extend((3073..=4095).map(|p| (p, 0)));
        assert!(may_place(Pid(99_999), 0, max, held(&rooted)));
    }
}
