//! Where malloc's uprobes are attached (to the libc each chosen process
//! maps) and where the heap ring buffer (`bpf/memory.h`) is read.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use libbpf_rs::{Link, MapHandle, ProgramMut, RingBuffer, RingBufferBuilder, UprobeOpts};

use super::{CollectError, Pid};
use crate::bpf::enums as c;
use crate::bpf::events::types;

/// Processes malloc's uprobes are attached to at most: each costs ten
/// uprobes.
pub const MALLOC_MAX_PROCESSES: usize = 64;

/// Which processes malloc's uprobes trap in: none unless named, because a
/// uprobe costs a trap on every call.
#[derive(Debug, Clone, Default)]
pub struct MallocTargets {
    /// Processes by id.
    pub pids: Vec<Pid>,
    /// Processes by name (`/proc/PID/comm`, exact), now and as they start.
    pub comms: Vec<String>,
}

impl MallocTargets {
    /// Whether any process is named.
    pub fn any(&self) -> bool {
        !self.pids.is_empty() || !self.comms.is_empty()
    }
}

/// The entry programs of the allocation functions.
#[derive(Debug, Clone, Copy)]
pub enum EnterPrograms<'a, 'obj> {
    /// One program on every function; its attach cookie says which (the
    /// bpf_loop form, Linux 5.15+ for cookies).
    ByCookie(&'a ProgramMut<'obj>),
    /// A program per function, in [`ALLOC_FUNCTIONS`]' order (the bounded
    /// form: kernels before 5.15 have no attach cookies).
    PerFunction([&'a ProgramMut<'obj>; 5]),
}

/// The malloc programs of `bpf/memory.h`.
#[derive(Debug, Clone, Copy)]
pub struct Programs<'a, 'obj> {
    /// Entry of the allocation functions.
    pub enter: EnterPrograms<'a, 'obj>,
    /// Return of every allocation function.
    pub exit: &'a ProgramMut<'obj>,
    /// Entry of free().
    pub free: &'a ProgramMut<'obj>,
}

/// Processes named for malloc that could not be traced, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// The process maps no libc (static binary, other allocator's only).
    pub no_libc: u64,
    /// Attaching a uprobe failed.
    pub attach_failed: u64,
    /// More processes than [`MALLOC_MAX_PROCESSES`].
    pub too_many: u64,
}

/// The allocation functions probed, with the cookie `bpf/memory.h` reads
/// (`enum alloc_fn`).
pub const ALLOC_FUNCTIONS: [(&str, u64); 5] = [
    ("malloc", c::ALLOC_MALLOC as u64),
    ("calloc", c::ALLOC_CALLOC as u64),
    ("realloc", c::ALLOC_REALLOC as u64),
    ("posix_memalign", c::ALLOC_POSIX_MEMALIGN as u64),
    ("aligned_alloc", c::ALLOC_ALIGNED_ALLOC as u64),
];

/// malloc's uprobes, by process. Dropping a process's links detaches them.
#[derive(Default)]
pub struct MallocProbes {
    attached: HashMap<Pid, Vec<Link>>,
    /// Processes looked at and not chosen, or refused: not looked at again
    /// until they exec (a new process notification).
    refusals: Refusals,
}

impl std::fmt::Debug for MallocProbes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MallocProbes")
            .field("attached", &self.attached.keys().collect::<Vec<_>>())
            .field("refusals", &self.refusals)
            .finish()
    }
}

impl MallocProbes {
    /// Attaches to `pid` if `targets` names it and it is not attached yet.
    pub fn watch(&mut self, pid: Pid, targets: &MallocTargets, progs: Programs<'_, '_>) {
        if !chosen(pid, targets) {
            // An exec may have turned a chosen process into another program.
            self.attached.remove(&pid);
            return;
        }
        if self.attached.contains_key(&pid) {
            return;
        }
        if self.attached.len() >= MALLOC_MAX_PROCESSES {
            self.refusals.too_many += 1;
            tracing::warn!(
                "malloc: not tracing process {pid}: already {} processes",
                MALLOC_MAX_PROCESSES
            );
            return;
        }
        let Some(libc) = libc_path(pid) else {
            self.refusals.no_libc += 1;
            tracing::warn!("malloc: process {pid} maps no libc; its allocations are not traced");
            return;
        };
        match attach(pid, &libc, progs) {
            Ok(links) => {
                tracing::info!("malloc: tracing process {pid} ({})", libc.display());
                self.attached.insert(pid, links);
            }
            Err(e) => {
                self.refusals.attach_failed += 1;
                tracing::warn!(
                    "malloc: attaching to {} of process {pid} failed: {e}",
                    libc.display()
                );
            }
        }
    }

    /// Detaches from processes that have exited; returns them.
    pub fn forget_exited(&mut self) -> Vec<Pid> {
        let mut gone = Vec::new();
        self.attached.retain(|pid, _| {
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            if !alive {
                gone.push(*pid);
            }
            alive
        });
        gone
    }

    /// Processes traced now, sorted.
    pub fn attached(&self) -> Vec<Pid> {
        let mut v: Vec<Pid> = self.attached.keys().copied().collect();
        v.sort();
        v
    }

    /// Cumulative refusals.
    pub fn refusals(&self) -> Refusals {
        self.refusals
    }
}

fn chosen(pid: Pid, targets: &MallocTargets) -> bool {
    if targets.pids.contains(&pid) {
        return true;
    }
    if targets.comms.is_empty() {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| targets.comms.iter().any(|want| want == c.trim_end()))
}

/// The libc the process maps, as a path through its own root (containers
/// map their own libc).
fn libc_path(pid: Pid) -> Option<std::path::PathBuf> {
    let maps = crate::shared::procmaps::code_maps(pid).ok()?;
    maps.into_iter().find_map(|m| {
        let procfs::process::MMapPath::Path(path) = m.pathname else {
            return None;
        };
        let name = path.file_name()?.to_str()?;
        let is_libc = name == "libc.so.6" || (name.starts_with("libc-") && name.ends_with(".so"));
        is_libc.then(|| format!("/proc/{pid}/root{}", path.display()).into())
    })
}

fn attach(
    pid: Pid,
    libc: &std::path::Path,
    progs: Programs<'_, '_>,
) -> Result<Vec<Link>, libbpf_rs::Error> {
    let pid_arg = pid.0 as i32;
    let mut links = Vec::with_capacity(2 * ALLOC_FUNCTIONS.len() + 1);
    let opts = |func: &str, cookie: u64, retprobe: bool| UprobeOpts {
        cookie,
        retprobe,
        func_name: Some(func.to_owned()),
        ..Default::default()
    };
    for (i, (func, cookie)) in ALLOC_FUNCTIONS.into_iter().enumerate() {
        // A kernel without cookies refuses any but 0.
        let (enter, enter_cookie) = match progs.enter {
            EnterPrograms::ByCookie(p) => (p, cookie),
            EnterPrograms::PerFunction(ps) => (ps[i], 0),
        };
        links.push(enter.attach_uprobe_with_opts(
            pid_arg,
            libc,
            0,
            opts(func, enter_cookie, false),
        )?);
        // The return reads which function it was from the entry's record.
        links.push(
            progs
                .exit
                .attach_uprobe_with_opts(pid_arg, libc, 0, opts(func, 0, true))?,
        );
    }
    links.push(
        progs
            .free
            .attach_uprobe_with_opts(pid_arg, libc, 0, opts("free", 0, false))?,
    );
    Ok(links)
}

/// The heap ring buffer's reader. Built once: the map handle it reads is
/// leaked (one per loaded events object) so the reader can live beside it.
pub struct HeapRing {
    ring: RingBuffer<'static>,
    records: Rc<RefCell<Vec<types::heap_record>>>,
}

impl std::fmt::Debug for HeapRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapRing").finish_non_exhaustive()
    }
}

// SAFETY: `heap_record` is a C struct of integers and a byte array: any
// byte pattern is a valid value.
unsafe impl plain::Plain for types::heap_record {}

impl HeapRing {
    /// A reader of `map`.
    pub fn new(map: &libbpf_rs::MapMut<'_>) -> Result<Self, CollectError> {
        let err = |source: libbpf_rs::Error| CollectError::Drain {
            map: "heap_events",
            source,
        };
        let handle: &'static MapHandle =
            Box::leak(Box::new(MapHandle::try_from(map).map_err(err)?));
        let records = Rc::new(RefCell::new(Vec::new()));
        let sink = records.clone();
        let mut builder = RingBufferBuilder::new();
        builder
            .add(handle, move |data: &[u8]| {
                let mut r = types::heap_record::default();
                if plain::copy_from_bytes(&mut r, data).is_ok() {
                    sink.borrow_mut().push(r);
                }
                0
            })
            .map_err(err)?;
        Ok(Self {
            ring: builder.build().map_err(err)?,
            records,
        })
    }

    /// Every record written since the last call, in order.
    pub fn consume(&self) -> Result<Vec<types::heap_record>, CollectError> {
        self.ring.consume().map_err(|source| CollectError::Drain {
            map: "heap_events",
            source,
        })?;
        Ok(std::mem::take(&mut *self.records.borrow_mut()))
    }
}
