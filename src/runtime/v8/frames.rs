//! Names of the JavaScript frames `bpf/v8.h` pushed, read from the
//! process's memory at the drain after the sample. A slot carries the
//! frame's SharedFunctionInfo and 10 bits of a hash of its name and script
//! pointers as the walker read them: the object there now must still be a
//! SharedFunctionInfo with that check, else the frame is a marker (the GC
//! moved or collected the function, and something else took its place),
//! never another function's name. A slot named once is checked again
//! against the whole pointers at the first use in each later drain.
//!
//! Each process is attached to once (its build's layout read), names are
//! cached per process within [`MAX_CACHED`] slots, and every read of the
//! process is bounded (`ProcessMemory`, [`super::READS_PER_DRAIN`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::NodeProcess;
use super::heap::Heap;
use super::names::{function_info, short_script};
use crate::runtime::{FrameNamer, NameStats};
use crate::shared::{FastMap, Frame, FrameKind, Pid};

/// Tag of a JavaScript frame (`EMBERD_V8_FRAME`).
pub const V8_FRAME: u64 = 0xe400_0000_0000_0000;
const TAG_MASK: u64 = 0xff00_0000_0000_0000;
const KIND_SHIFT: u32 = 54;
const CHECK_SHIFT: u32 = 44;
const CHECK_BITS: u32 = 10;
/// Slots whose frames are cached, all processes together.
pub const MAX_CACHED: usize = 16_384;
/// Node processes attached to for naming at once (each holds a reader's
/// pages, at most 512 KiB): past it the one named longest ago is let go.
pub const MAX_ATTACHED: usize = 32;
/// How long pages read from a process are trusted: within one drain.
const FRESH: Duration = Duration::from_millis(100);

/// What ran a JavaScript frame (`enum v8_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V8Kind {
    /// Ignition, V8's interpreter.
    Interpreted,
    /// Code compiled by Sparkplug, Maglev or TurboFan.
    Compiled,
}

impl V8Kind {
    /// Every kind, in the order of `enum v8_kind`.
    pub const ALL: [V8Kind; 2] = [V8Kind::Interpreted, V8Kind::Compiled];
}

crate::bpf::check_c_enum!(V8Kind, crate::bpf::enums::V8_KIND_MAX);

/// What ran the frame of `slot`.
pub fn kind_of(slot: u64) -> V8Kind {
    if (slot >> KIND_SHIFT) & 3 == 0 {
        V8Kind::Interpreted
    } else {
        V8Kind::Compiled
    }
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

/// The SharedFunctionInfo (tagged) a slot names.
fn shared_of(slot: u64) -> u64 {
    ((slot & ((1 << CHECK_SHIFT) - 1)) << 3) | 1
}

/// A process attached to.
struct Attached {
    process: NodeProcess,
    fresh_at: Instant,
    /// Drains seen (each a fresh page read).
    drain: u64,
}

/// A slot named: its frames, the pointers they were named from, and the
/// drain it was last checked in.
struct Named {
    frames: Arc<[Frame]>,
    name: u64,
    script: u64,
    checked: u64,
}

/// Names of JavaScript frames, per process.
#[derive(Default)]
pub struct NodeNames {
    processes: FastMap<Pid, Option<Attached>>,
    cache: FastMap<(Pid, u64), Named>,
    /// Function and script names, shared by every frame that names them.
    texts: FastMap<String, Arc<str>>,
    named: u64,
    moved: u64,
}

impl NodeNames {
    /// An empty namer.
    pub fn new() -> Self {
        Self::default()
    }

    fn attached(&mut self, pid: Pid) -> Option<&mut Attached> {
        if !self.processes.contains_key(&pid) && self.processes.len() >= MAX_ATTACHED {
            let oldest = self
                .processes
                .iter()
                .min_by_key(|(_, a)| a.as_ref().map(|a| a.fresh_at))
                .map(|(p, _)| *p);
            if let Some(p) = oldest {
                self.processes.remove(&p);
            }
        }
        let a = self
            .processes
            .entry(pid)
            .or_insert_with(|| {
                NodeProcess::find(pid)
                    .inspect_err(|e| tracing::debug!("naming JavaScript frames of {pid}: {e}"))
                    .ok()
                    .map(|process| Attached {
                        process,
                        fresh_at: Instant::now()
                            .checked_sub(FRESH)
                            .unwrap_or_else(Instant::now),
                        drain: 0,
                    })
            })
            .as_mut()?;
        // The heap changes as the program runs: pages read at an earlier
        // drain say nothing of this one's frames.
        if a.fresh_at.elapsed() >= FRESH {
            a.process.mem.forget_pages();
            a.process.mem.allow(super::READS_PER_DRAIN);
            a.fresh_at = Instant::now();
            a.drain += 1;
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
        let shared = shared_of(slot);
        let l = a.process.layout.clone();
        let mut heap = Heap {
            mem: &mut a.process.mem,
            layout: &l,
        };
        // The function info now at the slot's address, and its fields.
        let now = heap.instance_type(shared).ok().and_then(|t| {
            (t == l.type_shared).then_some(())?;
            let name = heap.field(shared, l.shared_name).ok()?;
            let script = heap.field(shared, l.shared_script).ok()?;
            Some((name, script))
        });
        let Some((name, script)) = now else {
            self.moved += 1;
            self.cache.remove(&(pid, slot));
            return Self::marker("[v8: function moved or collected]");
        };
        if let Some(n) = self.cache.get_mut(&(pid, slot)) {
            if n.name == name && n.script == script {
                n.checked = drain;
                self.named += 1;
                return n.frames.clone();
            }
            self.cache.remove(&(pid, slot));
        }
        if check_of(name, script) != (slot >> CHECK_SHIFT) & ((1 << CHECK_BITS) - 1) {
            self.moved += 1;
            return Self::marker("[v8: function moved or collected]");
        }
        let info = function_info(&mut heap, name, script);
        let text = match &info.script {
            Some(s) => format!("{} ({})", info.name, short_script(s)),
            None => info.name.clone(),
        };
        let frame = Frame {
            name: self.shared(text),
            kind: FrameKind::JavaScript,
            file: info.script.map(|s| self.shared(s)),
            line: None,
            module: None,
        };
        let frames: Arc<[Frame]> = Arc::from(vec![frame]);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert(
            (pid, slot),
            Named {
                frames: frames.clone(),
                name,
                script,
                checked: drain,
            },
        );
        self.named += 1;
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
        let Some(mut a) = self.processes.remove(&pid).flatten() else {
            return Self::marker("[v8: node unreadable]");
        };
        let f = self.name(&mut a, pid, slot);
        self.processes.insert(pid, Some(a));
        f
    }

    fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool) {
        self.processes.retain(|pid, _| is_live(*pid));
        self.cache.retain(|(pid, _), _| is_live(*pid));
    }

    fn stats(&self) -> NameStats {
        NameStats {
            named: self.named,
            evicted: self.moved,
            // About 200 bytes a slot and a text; each process's pages.
            cached_bytes: ((self.cache.len() + self.texts.len()) * 200
                + self
                    .processes
                    .values()
                    .flatten()
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
