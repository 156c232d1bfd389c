//! ELF symbolization on a worker thread, under a deadline.
//!
//! Naming user frames reads the binaries processes map, and those can live on
//! filesystems another user controls: a FUSE mount whose daemon never answers
//! a read, a hung NFS server. A read there cannot be interrupted, so it must
//! not happen on the collector thread. Requests go to a worker thread; the
//! collector waits at most [`FILE_DEADLINE`] for each. A file that misses its
//! deadline is never read again (its frames stay `module+0xoffset`, counted
//! as `elf_timeout`), the stuck worker is abandoned and a fresh one takes
//! over. At most [`MAX_ABANDONED`] workers are abandoned; past that, ELF
//! symbolization is off for good (logged), and sampling goes on.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};

use super::procmaps::{FileId, Mapping, elf_path};
use super::{Frame, Module, frames_of_sym};
use crate::collect::Pid;

/// How long the collector waits for one file's symbols.
pub const FILE_DEADLINE: Duration = Duration::from_secs(1);

/// Stuck workers left behind before ELF symbolization is switched off.
pub const MAX_ABANDONED: usize = 16;

/// One file's addresses to name.
#[derive(Debug)]
pub struct Request {
    /// The process mapping the file.
    pub pid: Pid,
    /// One of its mappings of the file.
    pub mapping: Mapping,
    /// Path shown in pprof mappings.
    pub shown: Arc<str>,
    /// File offsets to name.
    pub offsets: Vec<u64>,
    /// The module, if already known (else its build id is read).
    pub module: Option<Arc<Module>>,
}

/// The answer to a [`Request`].
#[derive(Debug)]
pub struct Reply {
    /// The path read: the mapped path when it is still the very file, else
    /// `/proc/PID/map_files/...` (then `scratch`, and already forgotten:
    /// it is good only while that process lives).
    pub path: PathBuf,
    /// Whether `path` is a per-process scratch path.
    pub scratch: bool,
    /// The module (path shown and build id).
    pub module: Arc<Module>,
    /// Frames per offset (`None`: no symbol), or why the file could not be read.
    pub frames: Result<Vec<Option<Arc<[Frame]>>>, String>,
}

/// Why a request got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The file missed its deadline now or before.
    Timeout,
    /// ELF symbolization is off (too many stuck workers).
    Off,
}

enum Job {
    Symbolize(Request),
    Evict(PathBuf),
}

struct Worker {
    jobs: SyncSender<Job>,
    replies: Receiver<Reply>,
}

/// The worker and what it learned about slow files.
pub struct ElfWorker {
    worker: Option<Worker>,
    abandoned: usize,
    slow: HashSet<FileId>,
}

impl std::fmt::Debug for ElfWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfWorker")
            .field("abandoned", &self.abandoned)
            .field("slow", &self.slow.len())
            .finish_non_exhaustive()
    }
}

impl Default for ElfWorker {
    fn default() -> Self {
        Self::new()
    }
}

impl ElfWorker {
    /// A worker is started on first use.
    pub fn new() -> Self {
        Self {
            worker: None,
            abandoned: 0,
            slow: HashSet::new(),
        }
    }

    /// Names `req.offsets` in file `id`, waiting at most [`FILE_DEADLINE`].
    pub fn symbolize(&mut self, id: FileId, req: Request) -> Result<Reply, Failure> {
        if self.slow.contains(&id) {
            return Err(Failure::Timeout);
        }
        let worker = self.worker()?;
        if worker.jobs.send(Job::Symbolize(req)).is_err() {
            // The worker died (a panic in blazesym): start another next time.
            self.worker = None;
            return Err(Failure::Timeout);
        }
        match worker.replies.recv_timeout(FILE_DEADLINE) {
            Ok(reply) => Ok(reply),
            Err(RecvTimeoutError::Timeout) => {
                self.slow.insert(id);
                self.worker = None;
                self.abandoned += 1;
                if self.abandoned >= MAX_ABANDONED {
                    tracing::error!(
                        "{} ELF reads never returned (files on a stalled filesystem?): \
                         user frames are no longer named from binaries; restart emberd once the filesystem answers",
                        self.abandoned
                    );
                } else {
                    tracing::warn!(
                        "reading the symbols of a mapped file took over {FILE_DEADLINE:?}: \
                         its frames stay module+offset from now on"
                    );
                }
                Err(Failure::Timeout)
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.worker = None;
                Err(Failure::Timeout)
            }
        }
    }

    /// Drops blazesym's cached state of `path`, without waiting.
    pub fn evict(&mut self, path: PathBuf) {
        if let Some(w) = &self.worker {
            let _ = w.jobs.try_send(Job::Evict(path));
        }
    }

    fn worker(&mut self) -> Result<&Worker, Failure> {
        if self.abandoned >= MAX_ABANDONED {
            return Err(Failure::Off);
        }
        if self.worker.is_none() {
            let (jobs, job_rx) = mpsc::sync_channel(64);
            let (reply_tx, replies) = mpsc::sync_channel(1);
            std::thread::Builder::new()
                .name("emberd-elf".into())
                .spawn(move || run(job_rx, reply_tx))
                .map_err(|_| Failure::Off)?;
            self.worker = Some(Worker { jobs, replies });
        }
        Ok(self.worker.as_ref().expect("set above"))
    }
}

fn run(jobs: Receiver<Job>, replies: SyncSender<Reply>) {
    let mut blaze = blazesym::symbolize::Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_demangling(true)
        .build();
    let stall = std::env::var("EMBERD_TEST_STALL_ELF").ok();
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Evict(path) => {
                let _ = blaze.evict(&blazesym::symbolize::evict::Evict::Elf(
                    blazesym::symbolize::evict::Elf::new(path),
                ));
            }
            Job::Symbolize(req) => {
                // Test hook: behave as a read from a FUSE file whose daemon
                // never answers.
                if stall
                    .as_deref()
                    .is_some_and(|s| !s.is_empty() && req.shown.contains(s))
                {
                    std::thread::sleep(Duration::from_secs(24 * 3600));
                }
                // Even a stat can block on such a filesystem: resolve here.
                let (path, scratch) = elf_path(req.pid, &req.mapping);
                let module = req.module.clone().unwrap_or_else(|| {
                    let build_id = blazesym::helper::read_elf_build_id(&path)
                        .ok()
                        .flatten()
                        .map(|b| {
                            Arc::from(b.iter().map(|x| format!("{x:02x}")).collect::<String>())
                        });
                    Arc::new(Module {
                        path: req.shown.clone(),
                        build_id,
                    })
                });
                let src = Source::Elf(Elf::new(path.clone()));
                let frames = blaze
                    .symbolize(&src, Input::FileOffset(&req.offsets))
                    .map(|r| {
                        r.iter()
                            .map(|s| match s {
                                Symbolized::Sym(sym) => Some(frames_of_sym(sym, &module)),
                                _ => None,
                            })
                            .collect()
                    })
                    .map_err(|e| e.to_string());
                if scratch {
                    let _ = blaze.evict(&blazesym::symbolize::evict::Evict::Elf(
                        blazesym::symbolize::evict::Elf::new(path.clone()),
                    ));
                }
                let reply = Reply {
                    path,
                    scratch,
                    module,
                    frames,
                };
                if replies.send(reply).is_err() {
                    return;
                }
            }
        }
    }
}
