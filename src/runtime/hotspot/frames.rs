//! Names of the Java frames `bpf/hotspot.h` pushed, read from the JVM's
//! memory at the drain after the sample:
//! - an interpreted frame carries its `Method*` and bytecode index: the
//!   method's class, name and source file, and the line of that bytecode;
//! - a compiled frame carries its pc and the low bits of its compilation's
//!   id: the blob now at that pc must be a compiled method with that id
//!   (else the code was flushed and the frame is marked, never named after
//!   whatever replaced it; a read that fails is marked apart, as
//!   unreadable, and counted), and it is named after its method;
//! - a stub carries its pc: `[jvm: <blob name>]`, `[jvm: call stub]`.
//!
//! Each process's JVM is attached to once (its tables read), names are
//! cached per process within [`MAX_CACHED`] entries, and every read of the
//! process is bounded (`ProcessMemory`).

use std::sync::Arc;

use super::codecache::{BlobKind, CodeHeap};
use super::{HotSpotError, Jvm};
use crate::runtime::attached::AttachedSet;
use crate::runtime::{FrameNamer, NameStats};
use crate::shared::{FastMap, Frame, FrameKind, Pid};

/// Tag of an interpreted frame (`EMBERD_JAVA_INTERP`).
pub const JAVA_INTERP: u64 = 0xe000_0000_0000_0000;
/// Tag of a compiled frame (`EMBERD_JAVA_COMPILED`).
pub const JAVA_COMPILED: u64 = 0xe100_0000_0000_0000;
/// Tag of a stub frame (`EMBERD_JAVA_STUB`).
pub const JAVA_STUB: u64 = 0xe200_0000_0000_0000;
/// Tag of a marker (`EMBERD_JAVA_MARK`).
pub const JAVA_MARK: u64 = 0xe300_0000_0000_0000;
const TAG_MASK: u64 = 0xff00_0000_0000_0000;
const BCI_BITS: u32 = 12;
const PC_BITS: u32 = 31;
/// The frame a sample interrupted (`EMBERD_JAVA_TOP`).
const TOP: u64 = 1 << 55;
/// Slots whose frames are cached, all processes together (each a few
/// frames of about 150 bytes).
pub const MAX_CACHED: usize = 16_384;
/// JVMs attached to for naming at once (each holds a reader's pages,
/// at most 256 KiB, and its methods): past it the account attached to the
/// most lets go of the one named longest ago ([`AttachedSet`]).
pub const MAX_ATTACHED: usize = 32;
/// How long pages read from a JVM are trusted: within one drain.
const FRESH: std::time::Duration = std::time::Duration::from_millis(100);
/// Bytes read from one JVM per drain at most.
const READS_PER_DRAIN: u64 = 8 << 20;

/// Whether `slot` is a Java frame or marker.
pub fn is_java(slot: u64) -> bool {
    matches!(
        slot & TAG_MASK,
        JAVA_INTERP | JAVA_COMPILED | JAVA_STUB | JAVA_MARK
    )
}

/// Why a Java walk stopped (`enum java_mark`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JavaMark {
    /// Something else.
    Other,
    /// A frame or blob could not be read.
    Read,
    /// A code cache address in no blob.
    NoBlob,
    /// A frame that does not move up the stack.
    Frame,
}

impl JavaMark {
    /// Every mark, in the order of `enum java_mark`.
    pub const ALL: [JavaMark; 4] = [
        JavaMark::Other,
        JavaMark::Read,
        JavaMark::NoBlob,
        JavaMark::Frame,
    ];

    /// The `reason` label in `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            JavaMark::Other => "other",
            JavaMark::Read => "frame_unreadable",
            JavaMark::NoBlob => "no_blob",
            JavaMark::Frame => "frame",
        }
    }

    fn text(self) -> &'static str {
        match self {
            JavaMark::Other => "[java: walk stopped]",
            JavaMark::Read => "[java: frame unreadable]",
            JavaMark::NoBlob => "[java: code cache address in no blob]",
            JavaMark::Frame => "[java: frame does not move up the stack]",
        }
    }
}

crate::bpf::check_c_enum!(JavaMark, crate::bpf::enums::JAVA_MARK_MAX);

/// A JVM attached to, with its code heaps.
struct Attached {
    jvm: Jvm,
    heaps: Vec<CodeHeap>,
    code_low: u64,
    call_stub: u64,
    /// When its cached pages were last dropped.
    fresh_at: std::time::Instant,
    /// Methods named: Method* -> its ConstMethod* when named, its names
    /// and line table.
    methods: FastMap<u64, (u64, Arc<Method>)>,
    /// What `methods` holds, about.
    method_bytes: usize,
}

/// A method's names and line table, as read once. The names are shared by
/// every frame of the method: the store finds a drain's frames by their
/// strings' addresses, and a copy per frame was also two allocations.
struct Method {
    /// `package.Class.method`, as JFR and async-profiler print it.
    qualified: Arc<str>,
    /// The source file's short name, where the class says.
    file: Option<Arc<str>>,
    lines: Option<Vec<u8>>,
}

impl Method {
    /// Bytes held, about: the texts, the line table, the map entry and
    /// allocations' headers.
    fn bytes(&self) -> usize {
        96 + self.qualified.len()
            + self.file.as_ref().map_or(0, |f| f.len())
            + self.lines.as_ref().map_or(0, Vec::len)
    }
}

/// Methods cached per JVM.
const MAX_METHODS: usize = 4096;

impl Attached {
    /// The method at `method`, from the cache while its ConstMethod is the
    /// one it was named with (one read), else read again.
    fn method(&mut self, method: u64) -> Result<Arc<Method>, HotSpotError> {
        let cm = self.jvm.const_method(method)?;
        if let Some((c, m)) = self.methods.get(&method)
            && *c == cm
        {
            return Ok(m.clone());
        }
        let name = self.jvm.method_name(method)?;
        let lines = self.jvm.line_table(method).ok().flatten();
        let m = Arc::new(Method {
            qualified: name.qualified().into(),
            file: name.file.as_deref().map(Arc::from),
            lines,
        });
        if self.methods.len() >= MAX_METHODS {
            self.methods.clear();
            self.method_bytes = 0;
        }
        self.method_bytes += m.bytes();
        if let Some((_, old)) = self.methods.insert(method, (cm, m.clone())) {
            self.method_bytes -= old.bytes();
        }
        Ok(m)
    }

    /// The line of bytecode `bci` of `m`.
    fn line(&self, m: &Method, bci: u32) -> Option<u32> {
        super::names::line_of(m.lines.as_deref()?, bci, self.jvm.unsigned5)
    }
}

/// Names of Java frames, per process.
pub struct JavaNames {
    jvms: AttachedSet<Attached>,
    cache: FastMap<(Pid, u64), Arc<[Frame]>>,
    /// Processes with slots in `cache` (some may have been cleared since).
    cached_pids: std::collections::HashSet<Pid>,
    named: u64,
    flushed: u64,
    /// Frames marked because a read failed, apart from code flushed.
    unreadable: u64,
}

impl Default for JavaNames {
    fn default() -> Self {
        Self::new()
    }
}

impl JavaNames {
    /// An empty namer.
    pub fn new() -> Self {
        Self {
            jvms: AttachedSet::new(MAX_ATTACHED),
            cache: FastMap::default(),
            cached_pids: Default::default(),
            named: 0,
            flushed: 0,
            unreadable: 0,
        }
    }

    fn attached(&mut self, pid: Pid) -> Option<&mut Attached> {
        self.jvms.get_or_attach(pid, || {
            let mut jvm = Jvm::find(pid)
                .inspect_err(|e| tracing::debug!("naming Java frames of {pid}: {e}"))
                .ok()?;
            let heaps = jvm.heaps().ok()?;
            let (code_low, _) = jvm.code_bounds().ok()?;
            let call_stub = jvm.call_stub_return().ok()?;
            // Naming has a drain's budget from the start: what attaching
            // left of its own is not enough to name a drain's new frames
            // (the pages read are fresh, so the next renewal is FRESH away).
            jvm.allow(READS_PER_DRAIN);
            Some(Attached {
                jvm,
                heaps,
                code_low,
                call_stub,
                fresh_at: std::time::Instant::now(),
                methods: FastMap::default(),
                method_bytes: 0,
            })
        })
    }

    /// The frames of `slot` of process `pid`, named now.
    fn name(&mut self, pid: Pid, slot: u64) -> Arc<[Frame]> {
        let one = |name: String, kind| -> Arc<[Frame]> { Arc::from(vec![Frame::new(name, kind)]) };
        if slot & TAG_MASK == JAVA_MARK {
            let mark = JavaMark::ALL
                .get((slot & 0xff) as usize)
                .copied()
                .unwrap_or(JavaMark::Other);
            return one(mark.text().to_owned(), FrameKind::Marker);
        }
        let Some(a) = self.attached(pid) else {
            return one("[java: JVM unreadable]".to_owned(), FrameKind::Marker);
        };
        // The code cache and metadata change as the JIT works: pages read
        // at an earlier drain say nothing of this one's frames (a stale
        // segment map read compiled code as free).
        if a.fresh_at.elapsed() >= FRESH {
            a.jvm.forget_pages();
            a.jvm.allow(READS_PER_DRAIN);
            a.fresh_at = std::time::Instant::now();
        }
        match slot & TAG_MASK {
            JAVA_INTERP => {
                let method = ((slot & !TAG_MASK) >> BCI_BITS) << 3;
                let bci = (slot & ((1 << BCI_BITS) - 1)) as u32;
                match a.method(method) {
                    Ok(m) => {
                        let line = if bci == (1 << BCI_BITS) - 1 {
                            None
                        } else {
                            a.line(&m, bci)
                        };
                        self.named += 1;
                        Arc::from(vec![java_frame(&m, line, FrameKind::Java)])
                    }
                    Err(e) => {
                        unreadable(&mut self.unreadable, pid, "a method", &e);
                        one("[java: method unreadable]".to_owned(), FrameKind::Marker)
                    }
                }
            }
            JAVA_COMPILED => {
                let pc = a.code_low + (slot & ((1 << PC_BITS) - 1));
                let id = (slot >> PC_BITS) & 0xff_ffff;
                let flushed = || {
                    one(
                        "[java: compiled code flushed]".to_owned(),
                        FrameKind::Marker,
                    )
                };
                let blob = match a.jvm.blob_at(&a.heaps, pc) {
                    Ok(blob) => blob,
                    Err(e) => {
                        unreadable(&mut self.unreadable, pid, "its code cache", &e);
                        return one("[java: code unreadable]".to_owned(), FrameKind::Marker);
                    }
                };
                let Some(blob) =
                    blob.filter(|b| matches!(b.kind, BlobKind::Nmethod | BlobKind::NativeNmethod))
                else {
                    self.flushed += 1;
                    return flushed();
                };
                match a.jvm.compile_id(&blob) {
                    Ok(c) if c as u64 & 0xff_ffff == id => {}
                    Ok(_) => {
                        self.flushed += 1;
                        return flushed();
                    }
                    Err(e) => {
                        unreadable(&mut self.unreadable, pid, "a compiled method", &e);
                        return one("[java: code unreadable]".to_owned(), FrameKind::Marker);
                    }
                }
                // The methods inlined at this pc, each its own frame (the
                // compiled method itself first, as `_[j]`, the inlined
                // ones `_[i]`), as JFR shows them.
                let mut scopes = a.jvm.scopes(&blob, pc, slot & TOP == 0).unwrap_or_default();
                scopes.reverse();
                let mut frames = Vec::with_capacity(scopes.len().max(1));
                let mut failed = None;
                for (i, s) in scopes.iter().enumerate() {
                    let m = match a.method(s.method) {
                        Ok(m) => m,
                        Err(e) => {
                            failed = Some(e);
                            frames.push(Frame::new("[java: method unreadable]", FrameKind::Marker));
                            continue;
                        }
                    };
                    let line = s.bci.and_then(|b| a.line(&m, b));
                    let kind = if i == 0 {
                        FrameKind::Java
                    } else {
                        FrameKind::JavaInlined
                    };
                    frames.push(java_frame(&m, line, kind));
                }
                if frames.is_empty() {
                    match a.jvm.compiled_method(&blob).and_then(|m| a.method(m)) {
                        Ok(m) => frames.push(java_frame(&m, None, FrameKind::Java)),
                        Err(e) => {
                            unreadable(&mut self.unreadable, pid, "a compiled method", &e);
                            return one("[java: method unreadable]".to_owned(), FrameKind::Marker);
                        }
                    }
                }
                if let Some(e) = failed {
                    unreadable(&mut self.unreadable, pid, "an inlined method", &e);
                }
                self.named += 1;
                Arc::from(frames)
            }
            _ => {
                let pc = a.code_low + (slot & ((1 << PC_BITS) - 1));
                if pc == a.call_stub {
                    return one("[jvm: call stub]".to_owned(), FrameKind::User);
                }
                let name = match a.jvm.blob_at(&a.heaps, pc) {
                    Ok(Some(b)) => format!("[jvm: {}]", b.name),
                    _ => "[jvm: stub]".to_owned(),
                };
                one(name, FrameKind::User)
            }
        }
    }
}

/// Counts a frame marked because a read of process `pid` failed, and says
/// why: at warn level the 1st, 2nd, 4th, 8th... time (a budget spent or a
/// mapping gone is then told apart from code really flushed), else at
/// debug level.
fn unreadable(count: &mut u64, pid: Pid, what: &str, e: &HotSpotError) {
    *count += 1;
    if count.is_power_of_two() {
        tracing::warn!("naming Java frames of {pid}: reading {what}: {e} ({count} so far)");
    } else {
        tracing::debug!("naming Java frames of {pid}: reading {what}: {e}");
    }
}

/// A Java frame: `package.Class.method`, its file and line.
fn java_frame(m: &Method, line: Option<u32>, kind: FrameKind) -> Frame {
    Frame {
        name: m.qualified.clone(),
        kind,
        file: m.file.clone(),
        line,
        module: None,
    }
}

impl FrameNamer for JavaNames {
    fn runtime(&self) -> &'static str {
        "hotspot"
    }

    fn claims(&self, slot: u64) -> bool {
        is_java(slot)
    }

    fn frames(&mut self, pid: Pid, slot: u64) -> Arc<[Frame]> {
        if let Some(f) = self.cache.get(&(pid, slot)) {
            return f.clone();
        }
        let f = self.name(pid, slot);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        // Interpreted frames are not kept (their methods are, checked at
        // each use: a class unloaded and another's method made at the
        // same address would be named wrongly), nor frames that could not
        // be named (a read past this drain's budget may succeed later).
        if slot & TAG_MASK != JAVA_INTERP && !f.iter().any(|x| x.kind == FrameKind::Marker) {
            self.cache.insert((pid, slot), f.clone());
            self.cached_pids.insert(pid);
        }
        f
    }

    fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool) {
        self.jvms.forget_exited(is_live);
        self.cache.retain(|(pid, _), _| is_live(*pid));
        self.cached_pids.retain(|pid| is_live(*pid));
    }

    fn forget(&mut self, pid: Pid) {
        self.jvms.forget(pid);
        // A slot names a method of the old program's heap (whether or not
        // its JVM is still attached).
        if self.cached_pids.remove(&pid) {
            self.cache.retain(|(p, _), _| *p != pid);
        }
    }

    fn stats(&self) -> NameStats {
        NameStats {
            partial: 0,
            named: self.named,
            evicted: self.flushed,
            unreadable: self.unreadable,
            // The slots' frames, about 150 bytes each; each JVM's pages
            // and methods as held.
            cached_bytes: (self.cache.len() * 150
                + self
                    .jvms
                    .attached()
                    .map(|a| 512 + a.jvm.cached_bytes() + a.method_bytes)
                    .sum::<usize>()) as u64,
        }
    }
}
