//! HotSpot JVMs (OpenJDK, Temurin and the other OpenJDK builds): Java
//! methods read from the JVM's own metadata, with no flag or agent in the
//! application.
//!
//! - [`vmstructs`]: the structure tables `libjvm.so` exports, read from
//!   the process;
//! - [`layout`]: what emberd needs of them (offsets, sizes, the model's
//!   differences between releases);
//! - [`codecache`]: the code heaps and the blob holding an address;
//! - [`names`]: method names, source files and lines.
//!
//! A JVM is found by its `libjvm.so` ([`inspect`]: a file that exports
//! the structure tables) and read through `/proc/PID/mem` ([`Jvm`]).

pub mod codecache;
pub mod frames;
pub mod layout;
pub mod metrics;
pub mod names;
pub mod procs;
pub mod scopes;
pub mod vmstructs;

use std::fs::File;

use thiserror::Error;

use crate::runtime::memory::{MemoryError, ProcessMemory};
use crate::shared::Pid;
use crate::shared::elf::{Headers, Segment};
use codecache::{Blob, BlobKind, CodeHeap};
use layout::{HotSpotLayout, LayoutError};
use names::{MethodName, Unsigned5};
use vmstructs::{VmStructs, VmStructsError};

pub use procs::{HotSpot, JvmState};

/// Bytes read from one JVM's memory to attach to it at most (JDK 17's
/// tables take about 300 KiB of pages).
pub const ATTACH_BUDGET: u64 = 1 << 20;

/// Why a JVM could not be read.
#[derive(Debug, Error)]
pub enum HotSpotError {
    /// The process maps no `libjvm.so` exporting the structure tables.
    #[error("process {0} runs no HotSpot JVM (no libjvm.so exporting gHotSpotVMStructs is mapped)")]
    NoJvm(u32),
    /// The process's maps or its `libjvm.so` could not be read.
    #[error("reading {what} of process {pid}: {source}")]
    Io {
        /// The process.
        pid: u32,
        /// What was read.
        what: &'static str,
        /// What failed.
        source: std::io::Error,
    },
    /// The structure tables could not be read.
    #[error(transparent)]
    Tables(#[from] VmStructsError),
    /// The tables lack something emberd needs.
    #[error("unsupported JVM: {0}")]
    Layout(#[from] LayoutError),
    /// The JVM has not set up what is read yet (it is starting).
    #[error("the JVM is starting: {0}")]
    NotStarted(&'static str),
    /// Memory read failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// What a `libjvm.so` holds for emberd: its table symbols (file
/// addresses) and its segments, to place them in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmFile {
    /// The [`vmstructs::SYMBOLS`] it defines, with their file addresses.
    pub symbols: Vec<(String, u64)>,
    /// Its `PT_LOAD` segments.
    pub loads: Vec<Segment>,
}

/// Whether a file (its headers `elf`, its defined dynamic symbols among
/// [`vmstructs::SYMBOLS`] `syms`: name, value, size) is a `libjvm.so`
/// exporting the structure tables.
pub fn inspect(elf: &Headers, syms: &[(String, u64, u64)]) -> Option<JvmFile> {
    if !syms.iter().any(|(n, _, _)| n == "gHotSpotVMStructs") {
        return None;
    }
    Some(JvmFile {
        symbols: syms
            .iter()
            .filter(|(n, _, _)| vmstructs::SYMBOLS.contains(&n.as_str()))
            .map(|(n, v, _)| (n.clone(), *v))
            .collect(),
        loads: elf.loads.clone(),
    })
}

/// Whether `file` is a `libjvm.so` exporting the structure tables.
pub fn inspect_file(file: &File) -> Option<JvmFile> {
    let elf = Headers::read(file).ok()?;
    let syms = elf.dynamic_symbols(file, &vmstructs::SYMBOLS).ok()?;
    inspect(&elf, &syms)
}

/// A running JVM, attached: its layout read, its memory open.
pub struct Jvm {
    mem: ProcessMemory,
    /// Its layout.
    pub layout: HotSpotLayout,
    /// Its release (`17.0.15+6-Debian-1deb12u1`), as it reports it.
    pub release: String,
    /// The Java feature release (17, 25).
    pub major: u32,
    /// How its compressed streams encode numbers.
    pub unsigned5: Unsigned5,
}

impl Jvm {
    /// Reads the JVM in process `pid`, whose `libjvm.so` is `file` mapped
    /// with `bias` (runtime minus file address).
    pub fn attach(pid: Pid, file: &JvmFile, bias: u64) -> Result<Jvm, HotSpotError> {
        let mut mem = ProcessMemory::open(pid, ATTACH_BUDGET)?;
        let symbol = |name: &str| {
            file.symbols
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.wrapping_add(bias))
        };
        let tables = VmStructs::read(&mut mem, &symbol)?;
        let layout = HotSpotLayout::from_tables(&tables)?;
        let release = tables
            .address("Abstract_VM_Version::_s_vm_release")
            .and_then(|a| mem.u64(a).ok())
            .and_then(|p| mem.c_string(p).ok())
            .unwrap_or_default();
        let major = major_of(&release);
        Ok(Jvm {
            mem,
            layout,
            unsigned5: Unsigned5::of_major(major),
            release,
            major,
        })
    }

    /// Finds and reads the JVM process `pid` runs, through its maps.
    pub fn find(pid: Pid) -> Result<Jvm, HotSpotError> {
        let io = |what| {
            move |source| HotSpotError::Io {
                pid: pid.0,
                what,
                source,
            }
        };
        let maps = crate::shared::procmaps::code_maps(pid).map_err(io("its maps"))?;
        for m in &maps {
            let procfs::process::MMapPath::Path(path) = &m.pathname else {
                continue;
            };
            if path.file_name().is_none_or(|n| n != "libjvm.so") {
                continue;
            }
            // The file the process maps, wherever its mount namespace
            // has it.
            let file = File::open(format!(
                "/proc/{}/map_files/{:x}-{:x}",
                pid.0, m.address.0, m.address.1
            ))
            .map_err(io("its libjvm.so"))?;
            let Some(jvm) = inspect_file(&file) else {
                continue;
            };
            let Some(seg) = jvm
                .loads
                .iter()
                .find(|s| s.offset <= m.offset && m.offset < s.offset + s.filesz)
            else {
                continue;
            };
            let bias = m
                .address
                .0
                .wrapping_sub(seg.vaddr.wrapping_add(m.offset - seg.offset));
            return Jvm::attach(pid, &jvm, bias);
        }
        Err(HotSpotError::NoJvm(pid.0))
    }

    /// Its code heaps.
    pub fn heaps(&mut self) -> Result<Vec<CodeHeap>, HotSpotError> {
        Ok(codecache::heaps(&mut self.mem, &self.layout)?)
    }

    /// The bounds of its code cache's reserved space.
    pub fn code_bounds(&mut self) -> Result<(u64, u64), HotSpotError> {
        let low = self.mem.u64(self.layout.code_low_bound)?;
        let high = self.mem.u64(self.layout.code_high_bound)?;
        if low == 0 || high <= low {
            return Err(HotSpotError::NotStarted("no code cache yet"));
        }
        Ok((low, high))
    }

    /// The template interpreter's code, `[low, high)`.
    pub fn interpreter(&mut self) -> Result<(u64, u64), HotSpotError> {
        let queue = self.mem.u64(self.layout.interpreter_code)?;
        if queue == 0 {
            return Err(HotSpotError::NotStarted("no interpreter yet"));
        }
        let low = self.mem.u64(queue + self.layout.queue_buffer)?;
        let size = self.mem.u32(queue + self.layout.queue_limit)? as u64;
        Ok((low, low + size))
    }

    /// Where Java code returns into the call stub.
    pub fn call_stub_return(&mut self) -> Result<u64, HotSpotError> {
        let at = self.mem.u64(self.layout.call_stub_return)?;
        if at == 0 {
            return Err(HotSpotError::NotStarted("no call stub yet"));
        }
        Ok(at)
    }

    /// The blobs of `heap`, in address order, at most `max`.
    pub fn blobs(&mut self, heap: &CodeHeap, max: usize) -> Result<Vec<Blob>, HotSpotError> {
        Ok(codecache::blobs(&mut self.mem, &self.layout, heap, max)?)
    }

    /// The blob holding `pc`.
    pub fn blob_at(&mut self, heaps: &[CodeHeap], pc: u64) -> Result<Option<Blob>, HotSpotError> {
        Ok(codecache::blob_at(&mut self.mem, &self.layout, heaps, pc)?)
    }

    /// The `Method*` a compiled method `blob` compiles.
    pub fn compiled_method(&mut self, blob: &Blob) -> Result<u64, HotSpotError> {
        debug_assert!(matches!(
            blob.kind,
            BlobKind::Nmethod | BlobKind::NativeNmethod
        ));
        Ok(self.mem.u64(blob.addr + self.layout.nmethod_method)?)
    }

    /// The compilation id of a compiled method `blob`.
    pub fn compile_id(&mut self, blob: &Blob) -> Result<u32, HotSpotError> {
        Ok(self.mem.u32(blob.addr + self.layout.nmethod_compile_id)?)
    }

    /// The methods compiled method `blob` runs at `pc`, the inlined leaf
    /// first, its own method last (empty when it keeps no debug
    /// information there); `exact` for a return address (see
    /// [`scopes::at`]).
    pub fn scopes(
        &mut self,
        blob: &Blob,
        pc: u64,
        exact: bool,
    ) -> Result<Vec<scopes::Scope>, HotSpotError> {
        Ok(scopes::at(
            &mut self.mem,
            &self.layout,
            blob.addr,
            blob.code_begin,
            pc,
            exact,
            self.unsigned5,
        )?)
    }

    /// The names of the `Method` at `method`.
    pub fn method_name(&mut self, method: u64) -> Result<MethodName, HotSpotError> {
        Ok(names::method_name(&mut self.mem, &self.layout, method)?)
    }

    /// The `ConstMethod` of the `Method` at `method`: what a method cache
    /// checks an entry against (a class unloaded and another's method
    /// made at the same address has another).
    pub fn const_method(&mut self, method: u64) -> Result<u64, HotSpotError> {
        Ok(self.mem.u64(method + self.layout.method_const)?)
    }

    /// The compressed line number table of the `Method` at `method`.
    pub fn line_table(&mut self, method: u64) -> Result<Option<Vec<u8>>, HotSpotError> {
        Ok(names::line_table(&mut self.mem, &self.layout, method)?)
    }

    /// The source line of bytecode `bci` of the `Method` at `method`.
    pub fn line(&mut self, method: u64, bci: u32) -> Result<Option<u32>, HotSpotError> {
        let table = names::line_table(&mut self.mem, &self.layout, method)?;
        Ok(table.and_then(|t| names::line_of(&t, bci, self.unsigned5)))
    }

    /// Allows `more` bytes to be read from the process beyond what has
    /// been.
    pub fn allow(&mut self, more: u64) {
        self.mem.allow(more);
    }

    /// Drops the pages read so far: later reads see the process as it is.
    pub fn forget_pages(&mut self) {
        self.mem.forget_pages();
    }

    /// Bytes of the process's pages held now.
    pub fn cached_bytes(&self) -> usize {
        self.mem.cached_bytes()
    }

    /// Bytes read from the process so far.
    pub fn bytes_read(&self) -> u64 {
        self.mem.bytes_read()
    }
}

/// The feature release of a JVM release string: `17` of
/// `17.0.15+6-Debian-1deb12u1`, `25` of `25.0.3+9-LTS`, `8` of `1.8.0_412`.
pub fn major_of(release: &str) -> u32 {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let first: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if first == 1 {
        parts.next().and_then(|p| p.parse().ok()).unwrap_or(0)
    } else {
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_releases_from_release_strings() {
        assert_eq!(major_of("17.0.15+6-Debian-1deb12u1"), 17);
        assert_eq!(major_of("25.0.3+9-LTS"), 25);
        assert_eq!(major_of("1.8.0_412-b08"), 8);
        assert_eq!(major_of("26-ea+3"), 26);
        assert_eq!(major_of(""), 0);
    }
}
