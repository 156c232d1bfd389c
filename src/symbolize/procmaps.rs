//! A process's memory mappings, as symbolization needs them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use procfs::process::{MMPermissions, MMapPath};

use crate::shared::Pid;

/// Identity of a mapped file: what a cached name depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file `md` describes.
    pub(crate) fn of(md: &std::fs::Metadata) -> Self {
        Self {
            dev: md.dev(),
            ino: md.ino(),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum MappingKind {
    /// A file on disk.
    File { id: FileId, path: PathBuf },
    /// `[vdso]`, `[vsyscall]` and the like.
    Special(String),
    /// Anonymous memory (`[anon]`, `[heap]`, `[stack]`): where JIT code lives.
    Anon(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) offset: u64,
    pub(crate) kind: MappingKind,
}

impl Mapping {
    /// The file name shown in `module+0xoffset`.
    pub(crate) fn module_name(&self) -> String {
        match &self.kind {
            MappingKind::File { path, .. } => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string()),
            MappingKind::Special(n) | MappingKind::Anon(n) => n.clone(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct ProcessMaps {
    mappings: Vec<Mapping>,
}

impl ProcessMaps {
    /// Reads the executable mappings of `/proc/PID/maps`: sampled
    /// addresses are code (as perf, which records only executable mmaps).
    ///
    /// A fresh vector, not procfs's collected in place: an in-place
    /// collect keeps the source's allocation, three times the size of
    /// these mappings, and a process maps ten times more data than code
    /// (python: 60 of 600 lines). Snapshots held 6.7 MiB under churn where
    /// their estimate said 2.8.
    pub(crate) fn read(pid: Pid) -> procfs::ProcResult<Self> {
        let maps = crate::shared::procmaps::code_maps(pid)?;
        let code = |m: &procfs::process::MemoryMap| m.perms.contains(MMPermissions::EXECUTE);
        let mut mappings: Vec<Mapping> =
            Vec::with_capacity(maps.iter().filter(|m| code(m)).count());
        mappings.extend(maps.into_iter().filter(code).map(|m| {
            let kind = match m.pathname {
                MMapPath::Path(path) if m.inode != 0 => MappingKind::File {
                    id: FileId {
                        dev: libc::makedev(m.dev.0 as u32, m.dev.1 as u32),
                        ino: m.inode,
                    },
                    path,
                },
                MMapPath::Path(path) => MappingKind::Anon(path.display().to_string()),
                MMapPath::Vdso => MappingKind::Special("[vdso]".into()),
                MMapPath::Vsyscall => MappingKind::Special("[vsyscall]".into()),
                MMapPath::Vvar => MappingKind::Special("[vvar]".into()),
                MMapPath::Heap => MappingKind::Anon("[heap]".into()),
                MMapPath::Stack | MMapPath::TStack(_) => MappingKind::Anon("[stack]".into()),
                MMapPath::Other(s) => MappingKind::Anon(s),
                _ => MappingKind::Anon("[anon]".into()),
            };
            Mapping {
                start: m.address.0,
                end: m.address.1,
                offset: m.offset,
                kind,
            }
        }));
        mappings.sort_by_key(|m| m.start);
        Ok(Self { mappings })
    }

    /// Estimated heap bytes.
    pub(crate) fn approx_bytes(&self) -> usize {
        self.mappings
            .iter()
            .map(|m| {
                std::mem::size_of::<Mapping>()
                    + match &m.kind {
                        MappingKind::File { path, .. } => path.as_os_str().len(),
                        MappingKind::Special(s) | MappingKind::Anon(s) => s.len(),
                    }
            })
            .sum()
    }

    pub(crate) fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// The mapping holding `addr`, with its index.
    pub(crate) fn find(&self, addr: u64) -> Option<(usize, &Mapping)> {
        let idx = self
            .mappings
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = &self.mappings[idx];
        (addr < m.end).then_some((idx, m))
    }
}

/// A path blazesym can open for a file mapping, and whether it is a
/// per-process scratch path. The host path is used when it is the very
/// file mapped (same device and inode), so blazesym's parse of libc is
/// shared by every process; otherwise (another mount namespace, a
/// deleted or replaced file) `/proc/PID/map_files/`, valid while the
/// process lives.
pub(crate) fn elf_path(pid: Pid, m: &Mapping) -> (PathBuf, bool) {
    if let MappingKind::File { id, path } = &m.kind
        && let Ok(md) = std::fs::metadata(path)
        && FileId::of(&md) == *id
    {
        return (path.clone(), false);
    }
    (
        Path::new(&format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)).to_path_buf(),
        true,
    )
}

/// The process's pid inside its own pid namespace (last `NSpid` value).
pub(crate) fn namespace_pid(pid: Pid) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}
