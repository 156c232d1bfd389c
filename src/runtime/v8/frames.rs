//! Names of the JavaScript frames `bpf/v8.h` pushed, read from the
//! process's memory at the drain after the sample. A slot carries the
//! frame's SharedFunctionInfo and 10 bits of a hash of its name and script
//! pointers as the walker read them: the object there now must still be a
//! SharedFunctionInfo with that check, else the frame is a marker (the GC
//! moved or collected the function, and something else took its place),
//! never another function's name. A frame of optimized code (Maglev,
//! TurboFan) has a second slot, leafward of it, with its pc and 7 bits of
//! that check: it stands for the functions inlined into the code at that
//! pc ([`super::code`]), outermost first, as V8's own profiler shows them;
//! none when the code is gone or was replaced since the sample (its own
//! function must have that check). A slot named once is checked again against the
//! whole pointers at the first use in each later drain.
//!
//! Each process is attached to once (its build's layout read), names are
//! cached per process within [`MAX_CACHED`] slots, and every read of the
//! process is bounded (`ProcessMemory`, [`super::READS_PER_DRAIN`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::NodeProcess;
use super::code::{CodeSearch, code_at};
use super::heap::Heap;
use super::lines::{NoLine, ScriptLines};
use super::names::{function_info, short_script, start_position};
use crate::runtime::attached::AttachedSet;
use crate::runtime::{FrameNamer, NameStats};
use crate::shared::{FastMap, Frame, FrameKind, Pid};

/// Tag of a JavaScript frame (`EMBERD_V8_FRAME`).
pub const V8_FRAME: u64 = 0xe400_0000_0000_0000;
const TAG_MASK: u64 = 0xff00_0000_0000_0000;
const KIND_SHIFT: u32 = 54;
const CHECK_SHIFT: u32 = 44;
const CHECK_BITS: u32 = 10;
/// Bits of a pc in a slot of optimized code (user addresses on x86-64).
const PC_BITS: u32 = 47;
/// Bits of its function's check kept beside the pc.
const PC_CHECK_BITS: u32 = 7;
/// Slots whose frames are cached, all processes together.
pub const MAX_CACHED: usize = 16_384;
/// Node processes attached to for naming at once (each holds a reader's
/// pages, at most 512 KiB): past it the account attached to the most lets
/// go of the one named longest ago ([`AttachedSet`]).
pub const MAX_ATTACHED: usize = 32;
/// How long pages read from a process are trusted: within one drain.
const FRESH: Duration = Duration::from_millis(100);

/// What ran a JavaScript frame (`enum v8_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V8Kind {
    /// Ignition, V8's interpreter.
    Interpreted,
    /// Code compiled by Sparkplug, Maglev or TurboFan, named by function.
    Compiled,
    /// The pc slot of optimized code (Maglev, TurboFan), at the pc the
    /// sample interrupted: the functions inlined there.
    Optimized,
    /// The same at a return address (a call it made).
    OptimizedCall,
}

impl V8Kind {
    /// Every kind, in the order of `enum v8_kind`.
    pub const ALL: [V8Kind; 4] = [
        V8Kind::Interpreted,
        V8Kind::Compiled,
        V8Kind::Optimized,
        V8Kind::OptimizedCall,
    ];
}

crate::bpf::check_c_enum!(V8Kind, crate::bpf::enums::V8_KIND_MAX);

/// What ran the frame of `slot`.
pub fn kind_of(slot: u64) -> V8Kind {
    V8Kind::ALL[((slot >> KIND_SHIFT) & 3) as usize]
}

/// Whether `slot` is a JavaScript frame.
pub fn is_v8(slot: u64) -> bool {
    slot & TAG_MASK == V8_FRAME
}

/// The check the walker stores of a function info whose name and script
/// fields hold `name` and `script` (`V8_CHECK` in bpf/emberd.h).
pub fn check_of(name: u64, script: u64) -> u64 {
    ((name ^ script.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xff51_afd7_ed55_8ccd))
        >> (64 - CHECK_BITS)
}

/// The SharedFunctionInfo (tagged) a slot of a function names.
fn shared_of(slot: u64) -> u64 {
    ((slot & ((1 << CHECK_SHIFT) - 1)) << 3) | 1
}

/// The pc a slot of optimized code carries, and its check (the high
/// [`PC_CHECK_BITS`] of its function's).
fn pc_of(slot: u64) -> (u64, u64) {
    (
        slot & ((1 << PC_BITS) - 1),
        (slot >> PC_BITS) & ((1 << PC_CHECK_BITS) - 1),
    )
}

/// A process attached to.
struct Attached {
    process: NodeProcess,
    fresh_at: Instant,
    /// Drains seen (each a fresh page read).
    drain: u64,
    /// Where its code objects are looked for.
    code_search: CodeSearch,
    /// Bytes code lookups may still read this drain
    /// ([`super::CODE_READS_PER_DRAIN`]).
    code_left: u64,
}

/// A slot named: its frames, the pointers they were named from, and the
/// drain it was last checked in.
struct Named {
    frames: Arc<[Frame]>,
    from: Vec<u64>,
    checked: u64,
}

/// A function named: its frame (with the line it starts on where known),
/// and the name and script pointers it was named from.
struct NamedFunction {
    frame: Frame,
    name: u64,
    script: u64,
}

/// Names of JavaScript frames, per process.
pub struct NodeNames {
    processes: AttachedSet<Attached>,
    cache: FastMap<(Pid, u64), Named>,
    /// Processes with entries in `cache`, `functions` or `lines` (some may
    /// have been cleared since).
    named_pids: std::collections::HashSet<Pid>,
    /// Functions named, by process and SharedFunctionInfo.
    functions: FastMap<(Pid, u64), NamedFunction>,
    /// Function and script names, shared by every frame that names them.
    texts: FastMap<String, Arc<str>>,
    /// Line ends of scripts.
    lines: ScriptLines,
    named: u64,
    moved: u64,
    /// Pc slots whose code was gone or replaced at the drain (no inlined
    /// frames shown; the function is still named by its own slot).
    code_gone: u64,
}

impl Default for NodeNames {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeNames {
    /// An empty namer.
    pub fn new() -> Self {
        Self {
            processes: AttachedSet::new(MAX_ATTACHED),
            cache: FastMap::default(),
            named_pids: Default::default(),
            functions: FastMap::default(),
            texts: FastMap::default(),
            lines: ScriptLines::default(),
            named: 0,
            moved: 0,
            code_gone: 0,
        }
    }

    fn attached(&mut self, pid: Pid) -> Option<&mut Attached> {
        let a = self.processes.get_or_attach(pid, || {
            NodeProcess::find(pid)
                .inspect_err(|e| tracing::debug!("naming JavaScript frames of {pid}: {e}"))
                .ok()
                .map(|process| Attached {
                    process,
                    fresh_at: Instant::now()
                        .checked_sub(FRESH)
                        .unwrap_or_else(Instant::now),
                    drain: 0,
                    code_search: CodeSearch::default(),
                    code_left: super::CODE_READS_PER_DRAIN,
                })
        })?;
        // The heap changes as the program runs: pages read at an earlier
        // drain say nothing of this one's frames.
        if a.fresh_at.elapsed() >= FRESH {
            a.process.mem.forget_pages();
            a.process.mem.allow(super::READS_PER_DRAIN);
            a.fresh_at = Instant::now();
            a.drain += 1;
            a.code_left = super::CODE_READS_PER_DRAIN;
        }
        Some(a)
    }

    fn shared(&mut self, text: String) -> Arc<str> {
        if let Some(t) = self.texts.get(&text) {
            return t.clone();
        }
        if self.texts.len() >= MAX_CACHED {
            self.texts.clear();
        }
        let t: Arc<str> = Arc::from(text.as_str());
        self.texts.insert(text, t.clone());
        t
    }

    /// The frame of the function whose SharedFunctionInfo is at `shared`
    /// now, with the name and script pointers it was named from; `None`
    /// when no function info is there. `drain`: the process's drain.
    fn function(
        &mut self,
        heap: &mut Heap<'_>,
        pid: Pid,
        drain: u64,
        shared: u64,
    ) -> Option<(Frame, u64, u64)> {
        let l = heap.layout;
        (heap.instance_type(shared).ok()? == l.type_shared).then_some(())?;
        let name = heap.field(shared, l.shared_name).ok()?;
        let script = heap.field(shared, l.shared_script).ok()?;
        if let Some(f) = self.functions.get(&(pid, shared))
            && f.name == name
            && f.script == script
        {
            return Some((f.frame.clone(), name, script));
        }
        let info = function_info(heap, name, script);
        let text = match &info.script {
            Some(s) => format!("{} ({})", info.name, short_script(s)),
            None => info.name.clone(),
        };
        // The line it starts on; one that must wait for the next drain's
        // scan is not cached, so the next naming finds it.
        let line = match &l.lines {
            Some(ll) if info.script.is_some() => start_position(heap, name, ll.type_oddball)
                .map_or(Err(NoLine::Unknown), |pos| {
                    self.lines.line(heap, ll, pid, drain, script, pos)
                }),
            _ => Err(NoLine::Unknown),
        };
        let frame = Frame {
            name: self.shared(text),
            kind: FrameKind::JavaScript,
            file: info.script.map(|s| self.shared(s)),
            line: line.ok(),
            module: None,
        };
        if line == Err(NoLine::Later) {
            return Some((frame, name, script));
        }
        if self.functions.len() >= MAX_CACHED {
            self.functions.clear();
        }
        self.named_pids.insert(pid);
        self.functions.insert(
            (pid, shared),
            NamedFunction {
                frame: frame.clone(),
                name,
                script,
            },
        );
        Some((frame, name, script))
    }

    /// The frames of `slot` of process `pid` (attached as `a`), named now,
    /// with the pointers they were named from; `Err`: the marker to show.
    fn read(
        &mut self,
        a: &mut Attached,
        pid: Pid,
        slot: u64,
    ) -> Result<(Vec<Frame>, Vec<u64>), &'static str> {
        const MOVED: &str = "[v8: function moved or collected]";
        let l = a.process.layout.clone();
        let drain = a.drain;
        let mut heap = Heap {
            mem: &mut a.process.mem,
            layout: &l,
        };
        let kind = kind_of(slot);
        if matches!(kind, V8Kind::Interpreted | V8Kind::Compiled) {
            let shared = shared_of(slot);
            let (frame, name, script) =
                self.function(&mut heap, pid, drain, shared).ok_or(MOVED)?;
            if check_of(name, script) != (slot >> CHECK_SHIFT) & ((1 << CHECK_BITS) - 1) {
                return Err(MOVED);
            }
            let line = u64::from(frame.line.unwrap_or(0));
            return Ok((vec![frame], vec![shared, name, script, line]));
        }
        // The pc slot: the functions inlined at the pc, beside the
        // function's own slot (nothing when the code cannot be read now).
        let Some(c) = l.code.as_ref() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let (pc, check) = pc_of(slot);
        let saved = heap.mem.begin_allowance(a.code_left);
        let at = code_at(
            &mut heap,
            c,
            pc,
            kind == V8Kind::OptimizedCall,
            &mut a.code_search,
            drain,
        );
        let spent = heap.mem.end_allowance(saved);
        a.code_left = a.code_left.saturating_sub(spent);
        let at = match at {
            Ok(at) => at,
            Err(e) => {
                tracing::debug!("inlined JavaScript frames of {pid}: {e}");
                self.code_gone += 1;
                return Ok((Vec::new(), Vec::new()));
            }
        };
        let mut frames = Vec::with_capacity(at.frames.len());
        let mut from = vec![at.code, at.start];
        for (i, &(shared, _offset)) in at.frames.iter().enumerate() {
            let Some((frame, name, script)) = self.function(&mut heap, pid, drain, shared) else {
                continue;
            };
            if i == 0 {
                // The code's own function must be the one the walker read:
                // else the code was replaced since.
                if check_of(name, script) >> (CHECK_BITS - PC_CHECK_BITS) != check {
                    self.code_gone += 1;
                    return Ok((Vec::new(), Vec::new()));
                }
            } else {
                from.push(u64::from(frame.line.unwrap_or(0)));
                frames.push(frame);
            }
            from.extend([shared, name, script]);
        }
        tracing::debug!(
            "pc slot {pc:#x} {kind:?} at {:#x}+{}: {:?}",
            at.start,
            pc - at.start,
            at.frames
                .iter()
                .map(|(s, o)| (format!("{s:#x}"), *o))
                .collect::<Vec<_>>()
        );
        Ok((frames, from))
    }

    /// The frames of `slot` of process `pid` (attached as `a`), named now.
    fn name(&mut self, a: &mut Attached, pid: Pid, slot: u64) -> Arc<[Frame]> {
        let drain = a.drain;
        // Checked in this drain already: nothing to read.
        if let Some(n) = self.cache.get(&(pid, slot))
            && n.checked == drain
        {
            self.named += 1;
            return n.frames.clone();
        }
        let (frames, from) = match self.read(a, pid, slot) {
            Ok(f) => f,
            Err(marker) => {
                self.moved += 1;
                self.cache.remove(&(pid, slot));
                return Self::marker(marker);
            }
        };
        self.named += 1;
        if let Some(n) = self.cache.get_mut(&(pid, slot))
            && n.from == from
        {
            n.checked = drain;
            return n.frames.clone();
        }
        let frames: Arc<[Frame]> = Arc::from(frames);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.named_pids.insert(pid);
        self.cache.insert(
            (pid, slot),
            Named {
                frames: frames.clone(),
                from,
                checked: drain,
            },
        );
        frames
    }

    fn marker(text: &str) -> Arc<[Frame]> {
        Arc::from(vec![Frame::new(text, FrameKind::Marker)])
    }
}

impl FrameNamer for NodeNames {
    fn runtime(&self) -> &'static str {
        "v8"
    }

    fn claims(&self, slot: u64) -> bool {
        is_v8(slot)
    }

    fn frames(&mut self, pid: Pid, slot: u64) -> Arc<[Frame]> {
        if self.attached(pid).is_none() {
            return Self::marker("[v8: node unreadable]");
        }
        // Out of the map while it is read, so the caches can be updated.
        let Some(mut a) = self.processes.take(pid) else {
            return Self::marker("[v8: node unreadable]");
        };
        let f = self.name(&mut a, pid, slot);
        self.processes.put_back(pid, a);
        f
    }

    fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool) {
        self.processes.forget_exited(is_live);
        self.cache.retain(|(pid, _), _| is_live(*pid));
        self.functions.retain(|(pid, _), _| is_live(*pid));
        self.lines.forget_exited(is_live);
        self.named_pids.retain(|pid| is_live(*pid));
    }

    fn forget(&mut self, pid: Pid) {
        self.processes.forget(pid);
        // Its slots, functions and scripts were the old program's heap's
        // (whether or not the process is still attached).
        if self.named_pids.remove(&pid) {
            self.cache.retain(|(p, _), _| *p != pid);
            self.functions.retain(|(p, _), _| *p != pid);
            self.lines.forget_exited(&|p| p != pid);
        }
    }

    fn stats(&self) -> NameStats {
        NameStats {
            named: self.named,
            evicted: self.moved,
            partial: self.code_gone,
            unreadable: 0,
            // About 200 bytes a slot and a text; each process's pages.
            cached_bytes: ((self.cache.len() + self.functions.len() + self.texts.len()) * 200
                + self.lines.cached_bytes()
                + self
                    .processes
                    .attached()
                    .map(|a| 512 + a.process.mem.cached_bytes())
                    .sum::<usize>()) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_gives_back_its_function_info_and_check() {
        let shared = 0x7f12_3456_7891u64;
        let check = check_of(0x7f00_0000_0011, 0x7f00_0000_2221);
        assert!(check < 1 << CHECK_BITS);
        let slot = V8_FRAME | 1 << KIND_SHIFT | check << CHECK_SHIFT | (shared >> 3);
        assert!(is_v8(slot));
        assert_eq!(kind_of(slot), V8Kind::Compiled);
        assert!(crate::runtime::is_tagged(slot));
        assert_eq!(shared_of(slot), shared);
        assert_eq!((slot >> CHECK_SHIFT) & ((1 << CHECK_BITS) - 1), check);
        // Another name or script gives another check (almost always).
        assert_ne!(check, check_of(0x7f00_0000_0019, 0x7f00_0000_2221));
    }
}
