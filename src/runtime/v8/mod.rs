//! Node.js (V8): JavaScript functions read from V8's frames and its
//! postmortem metadata, with no flag in the application.
//!
//! - [`layout`]: the `v8dbg_*` constants node exports for debuggers, and
//!   what emberd needs of them;
//! - [`heap`]: V8's objects and strings as read from the process;
//! - [`names`]: a function's name and script;
//! - [`code`], [`positions`]: optimized code at a pc, and the functions
//!   inlined into it there;
//! - [`frames`]: names of the slots `bpf/v8.h` pushed;
//! - [`procs`]: which processes run node, and the code the walker claims.
//!
//! A node binary is found by its metadata ([`inspect`]: a file whose
//! `.dynsym` holds `v8dbg_off_fp_function`), and read through
//! `/proc/PID/mem`.

pub mod code;
pub mod frames;
pub mod heap;
pub mod layout;
pub mod lines;
pub mod metrics;
pub mod names;
pub mod positions;
pub mod procs;

use std::fs::File;

use crate::runtime::memory::ProcessMemory;
use crate::shared::Pid;
use crate::shared::elf::{Headers, Segment};
use layout::{LayoutError, Postmortem, V8Layout};

pub use procs::{NodeState, V8};

/// The symbol every V8 build with postmortem metadata exports, and that
/// marks the file as one.
pub const MARK: &str = "v8dbg_off_fp_function";
/// The prefix of the metadata's symbols.
pub const PREFIX: &str = "v8dbg_";

/// libuv's function that arms a timer, exported by node builds that link
/// libuv in: trapped so timer waits are charged to their JavaScript.
pub const TIMER_START: &str = "uv_timer_start";
/// Mapped files whose symbols are read to find a process's V8 build, at
/// most (a node process maps a dozen: itself, libc, libstdc++, addons).
const MAX_FILES_LOOKED_AT: usize = 64;
/// Bytes read from one node process to name its frames, per drain at most.
pub const READS_PER_DRAIN: u64 = 4 << 20;
/// Bytes read from one node process to find the functions inlined at its
/// optimized frames' pcs, per drain at most: an allowance apart from
/// [`READS_PER_DRAIN`], so that code objects scanned for (up to
/// [`code::MAX_SCAN`] back from a pc) cannot leave the frames' own
/// functions unread and marked.
pub const CODE_READS_PER_DRAIN: u64 = 2 << 20;

/// What a node binary (or `libnode.so`) holds for emberd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFile {
    /// Its layout, or why it cannot be read.
    pub layout: Result<V8Layout, LayoutError>,
    /// Its embedded builtins (`v8_Default_embedded_blob_code_`, from
    /// `.symtab`): file address and size; `None` when stripped.
    pub blob: Option<(u64, u64)>,
    /// The word at the blob's symbol: where the builtins are when the
    /// symbol is a pointer to them (Node 18 keeps it in `.data`).
    pub blob_pointer: Option<u64>,
    /// Its `PT_LOAD` segments.
    pub loads: Vec<Segment>,
    /// The file offset of libuv's `uv_timer_start`, when this file exports
    /// it (official node builds link libuv in): where the collect stage
    /// traps timer arms (`bpf/node_timers.h`).
    pub timer_start: Option<u64>,
}

impl NodeFile {
    /// The file offset of the builtins at file address `vaddr`, where a
    /// segment holds them.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        let seg = self
            .loads
            .iter()
            .find(|s| s.vaddr <= vaddr && vaddr < s.vaddr + s.filesz)?;
        Some(seg.offset + (vaddr - seg.vaddr))
    }
}

/// Whether a file (its headers `elf`, its defined dynamic symbols `syms`:
/// name, value, size, among them every `v8dbg_*`) is a V8 build with
/// postmortem metadata; its constants are read from `file`.
pub fn inspect(file: &File, elf: &Headers, syms: &[(String, u64, u64)]) -> Option<NodeFile> {
    if !syms.iter().any(|(n, _, _)| n == MARK) {
        return None;
    }
    let layout = layout_of(file, elf, syms);
    let found = elf.local_symbols(
        file,
        &[
            "v8_Default_embedded_blob_code_",
            "v8_Default_embedded_blob_code_size_",
        ],
    );
    let (symbol, size_at) = (found[0], found[1]);
    let blob_pointer = symbol
        .and_then(|at| elf.read_vaddr(file, at, 8))
        .and_then(|b| Some(u64::from_le_bytes(b.try_into().ok()?)));
    let blob = symbol.and_then(|start| {
        let size = u64::try_from(elf.i32_at(file, size_at?)?).ok()?;
        (size > 0 && size < 1 << 30).then_some((start, size))
    });
    let mut file = NodeFile {
        layout,
        blob,
        blob_pointer,
        loads: elf.loads.clone(),
        timer_start: None,
    };
    file.timer_start = syms
        .iter()
        .find(|(n, v, _)| n == TIMER_START && *v != 0)
        .and_then(|(_, v, _)| file.file_offset(*v));
    Some(file)
}

/// The layout of the V8 build `file` is, read from its `.dynsym` only.
pub fn inspect_layout(file: &File) -> Option<Result<V8Layout, LayoutError>> {
    let elf = Headers::read(file).ok()?;
    let syms = elf
        .dynamic_symbols_where(file, |n| n.starts_with(PREFIX))
        .ok()?;
    if !syms.iter().any(|(n, _, _)| n == MARK) {
        return None;
    }
    Some(layout_of(file, &elf, &syms))
}

/// The layout the `v8dbg_*` symbols among `syms` give, their values read
/// from `file`.
fn layout_of(
    file: &File,
    elf: &Headers,
    syms: &[(String, u64, u64)],
) -> Result<V8Layout, LayoutError> {
    let values = syms
        .iter()
        .filter(|(n, _, _)| n.starts_with(PREFIX))
        .filter_map(|(n, v, _)| Some((n.clone(), i64::from(elf.i32_at(file, *v)?))))
        .collect();
    V8Layout::from_postmortem(&Postmortem::new(values))
}

/// Whether a mapped file's name is node's (`node`, `node22`, `nodejs`,
/// `libnode.so.109`): those are looked at first for metadata.
pub fn is_node_name(name: &str) -> bool {
    name.starts_with("node") || name.starts_with("libnode.so")
}

/// A node process to name frames of: its memory and its build's layout.
pub struct NodeProcess {
    /// Its memory.
    pub mem: ProcessMemory,
    /// Its build's layout.
    pub layout: V8Layout,
}

impl NodeProcess {
    /// Finds the V8 build process `pid` maps (its node binary,
    /// `libnode.so`, or a renamed build) through its maps, and opens its
    /// memory. Files named as node's are looked at first; any other mapped
    /// file exporting [`MARK`] is taken too, as the unwinder takes it, so a
    /// service shipped as its own binary is named as well as unwound.
    pub fn find(pid: Pid) -> Result<NodeProcess, String> {
        let maps = crate::shared::procmaps::code_maps(pid)
            .map_err(|e| format!("reading the maps of {pid}: {e}"))?;
        let mut files: Vec<(bool, &std::path::Path, (u64, u64))> = Vec::new();
        for m in &maps {
            let procfs::process::MMapPath::Path(path) = &m.pathname else {
                continue;
            };
            if files.iter().any(|(_, p, _)| *p == path.as_path()) {
                continue;
            }
            let named = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_node_name);
            files.push((!named, path.as_path(), m.address));
        }
        // Node's own name first; stable, so the maps' order within each.
        files.sort_by_key(|(other, _, _)| *other);
        for (_, _, (start, end)) in files.into_iter().take(MAX_FILES_LOOKED_AT) {
            // The file the process maps, wherever its mount namespace has it.
            let Ok(file) = File::open(format!("/proc/{}/map_files/{start:x}-{end:x}", pid.0))
            else {
                continue;
            };
            match inspect_layout(&file) {
                Some(Ok(layout)) => {
                    let mem =
                        ProcessMemory::open(pid, READS_PER_DRAIN).map_err(|e| e.to_string())?;
                    return Ok(NodeProcess { mem, layout });
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => continue,
            }
        }
        Err(format!(
            "process {pid} maps no file with V8's postmortem metadata ({MARK})"
        ))
    }
}
