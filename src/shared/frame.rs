//! Named frames: what symbolization makes of an address, and what the
//! store, queries and renderers keep and draw.

use std::sync::Arc;

/// What kind of code a frame is; decides its folded suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Native user-space code.
    User,
    /// A function inlined into its caller (`_[i]`).
    Inlined,
    /// JIT-compiled code named by a perf map (`_[j]`).
    Jit,
    /// Kernel code (`_[k]`).
    Kernel,
    /// A frame emberd adds to show data quality (`[lost]`, `[truncated]`)
    /// or structure (the `--` between blocked and waker stacks).
    Marker,
    /// A frame of the waker's stack in an off-wake chain (`_[w]`).
    Waker,
    /// An interpreted Python frame, `qualname (file.py)` (see [`crate::runtime::python::names`]).
    Python,
    /// A Java method, interpreted or compiled, named from the JVM's own
    /// tables (`_[j]`, as async-profiler and flamegraph.pl's java palette
    /// mark them; see [`crate::runtime::hotspot`]).
    Java,
    /// A Java method the JIT inlined into the compiled one below it
    /// (`_[i]`).
    JavaInlined,
    /// A JavaScript function, interpreted or compiled, named from V8's
    /// frames and metadata, `name (script.js)_[j]` (see
    /// [`crate::runtime::v8`]).
    JavaScript,
}

/// The ELF file a frame's code lives in (pprof's mapping).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Module {
    /// Path of the file as the process mapped it.
    pub path: Arc<str>,
    /// GNU build id, hex, when the file has one.
    pub build_id: Option<Arc<str>>,
}

/// One named frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Function name (demangled), or `module+0xoffset`.
    pub name: Arc<str>,
    /// What kind of code it is.
    pub kind: FrameKind,
    /// Source file, where DWARF gives it.
    pub file: Option<Arc<str>>,
    /// Source line, where DWARF gives it.
    pub line: Option<u32>,
    /// The file the code is in, for user frames.
    pub module: Option<Arc<Module>>,
}

impl Frame {
    /// A frame with only a name.
    pub fn new(name: impl Into<Arc<str>>, kind: FrameKind) -> Self {
        Self {
            name: name.into(),
            kind,
            file: None,
            line: None,
            module: None,
        }
    }

    /// The folded-stack suffix of this kind of frame.
    pub fn suffix(&self) -> &'static str {
        match self.kind {
            FrameKind::User | FrameKind::Marker | FrameKind::Python => "",
            FrameKind::Inlined | FrameKind::JavaInlined => "_[i]",
            FrameKind::Jit | FrameKind::Java | FrameKind::JavaScript => "_[j]",
            FrameKind::Kernel => "_[k]",
            FrameKind::Waker => "_[w]",
        }
    }
}
