//! Opening files other users control: perf maps in `/tmp`, written by the
//! profiled process (or by anyone who can create a file there first).
//!
//! A perf map path is resolved inside the process's root (`openat2` with
//! `RESOLVE_IN_ROOT`, so absolute symlinks cannot lead out of a container
//! into host files, and magic links are refused), opened non-blocking (a
//! FIFO cannot stall the collector), and accepted only if it is a regular
//! file owned by the process's user and no larger than the cap. Every
//! refusal has a reason, counted in `/metrics`.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::shared::Pid;

/// Why a perf map was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// Not a regular file (FIFO, device, socket, directory).
    NotRegular,
    /// Owned by another user than the process's.
    WrongOwner,
    /// Larger than the configured cap.
    TooLarge,
    /// The path could not be opened inside the process's root (a symlink
    /// out of it, a loop, no permission).
    Unresolvable,
    /// Last written before the process started: another process's file
    /// under a reused pid (runtimes leave their perf maps behind).
    Stale,
}

impl Refusal {
    /// Every reason, for metrics.
    pub const ALL: [Refusal; 5] = [
        Refusal::NotRegular,
        Refusal::WrongOwner,
        Refusal::TooLarge,
        Refusal::Unresolvable,
        Refusal::Stale,
    ];

    /// The `reason` label in `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::NotRegular => "not_regular_file",
            Refusal::WrongOwner => "wrong_owner",
            Refusal::TooLarge => "too_large",
            Refusal::Unresolvable => "unresolvable",
            Refusal::Stale => "older_than_process",
        }
    }
}

/// What opening found.
#[derive(Debug)]
pub enum Opened {
    /// No such file: the common case, not a refusal.
    Missing,
    /// Refused, with the reason.
    Refused(Refusal),
    /// A regular file of the process's user, within the cap.
    File {
        /// The open file (non-blocking, which regular files ignore).
        file: File,
        /// Its metadata at open time.
        meta: std::fs::Metadata,
    },
}

/// Opens `rel` (a path inside the process's root, without leading `/`) of
/// process `pid` for reading, as described in the module docs.
pub fn open_in_root(pid: Pid, rel: &Path, max_bytes: u64) -> Opened {
    let file = match open_resolved(pid, rel) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Opened::Missing,
        Err(_) => return Opened::Refused(Refusal::Unresolvable),
    };
    let Ok(meta) = file.metadata() else {
        return Opened::Refused(Refusal::Unresolvable);
    };
    if !meta.file_type().is_file() {
        return Opened::Refused(Refusal::NotRegular);
    }
    if process_uid(pid).is_some_and(|uid| uid != meta.uid()) {
        return Opened::Refused(Refusal::WrongOwner);
    }
    if meta.len() > max_bytes {
        return Opened::Refused(Refusal::TooLarge);
    }
    Opened::File { file, meta }
}

/// Whether a file opened for process `pid` was last written before the
/// process started (with a second of slack: file times and the start time
/// have different granularities). Asked only when the file is to be
/// parsed, not on every open.
pub fn older_than_process(pid: Pid, meta: &std::fs::Metadata) -> bool {
    process_start(pid).is_some_and(|start| meta.mtime() + 1 < start)
}

/// When the process started, in unix seconds: the boot time plus its start
/// in clock ticks since boot (`/proc/PID/stat` field 22).
fn process_start(pid: Pid) -> Option<i64> {
    static BOOT: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
    let boot = (*BOOT.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()
    }))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the name, which may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let ticks: i64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let hz = i64::from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as i32).max(1);
    Some(boot + ticks / hz)
}

/// `openat2(/proc/PID/root, rel, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`,
/// non-blocking; on kernels without openat2 (before 5.6), the path under
/// `/proc/PID/root` with `O_NOFOLLOW` on the last component.
fn open_resolved(pid: Pid, rel: &Path) -> std::io::Result<File> {
    let root = CString::new(format!("/proc/{pid}/root")).expect("no NUL");
    let rel_c = CString::new(rel.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: plain syscalls on NUL-terminated paths; every fd returned is
    // owned exactly once below.
    unsafe {
        let dir = libc::open(
            root.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let dir = OwnedFd::from_raw_fd(dir);
        let mut how: libc::open_how = std::mem::zeroed();
        how.flags = flags as u64;
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        let fd = libc::syscall(
            libc::SYS_openat2,
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            rel_c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        );
        if fd >= 0 {
            return Ok(File::from_raw_fd(fd as i32));
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ENOSYS) {
            return Err(err);
        }
        let fd = libc::openat(
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            rel_c.as_ptr(),
            flags | libc::O_NOFOLLOW,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(File::from_raw_fd(fd))
    }
}

/// The effective uid of a process (the owner of what it writes).
fn process_uid(pid: Pid) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
