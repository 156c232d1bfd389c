//! Preflight: what the kernel and this process's privileges allow, and what
//! each missing piece costs. Used by `emberd check` and, in short form, before
//! loading anything.

use std::fmt;
use std::path::Path;

pub use crate::collect::privileges::{Cap, effective_caps, has_cap};

/// The state of one checked item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Present and usable.
    Ok,
    /// Missing, but emberd works with less.
    Degraded,
    /// Missing, and emberd cannot sample without it.
    Fatal,
    /// Not checked: this process lacks the privileges to find out, and
    /// says so rather than guess.
    Skipped,
}

/// One line of the preflight report.
#[derive(Debug, Clone)]
pub struct Item {
    /// What was checked.
    pub what: &'static str,
    /// The result.
    pub status: Status,
    /// What was found, and if missing, what it costs and how to fix it.
    pub detail: String,
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.status {
            Status::Ok => "ok     ",
            Status::Degraded => "limited",
            Status::Fatal => "MISSING",
            Status::Skipped => "skipped",
        };
        write!(f, "[{tag}] {:<22} {}", self.what, self.detail)
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Whether this process may load BPF programs: CAP_SYS_ADMIN, or CAP_BPF
/// with CAP_PERFMON.
pub fn may_load_bpf() -> bool {
    has_cap(Cap::SysAdmin) || (has_cap(Cap::Bpf) && has_cap(Cap::Perfmon))
}

/// The one line `emberd check` opens with when it cannot load BPF
/// programs, or `None` when it can.
pub fn unprivileged_line() -> Option<String> {
    if may_load_bpf() {
        return None;
    }
    let uid = nix::unistd::geteuid();
    let who = if uid.is_root() {
        "root (uid 0) without CAP_SYS_ADMIN".to_owned()
    } else {
        format!("not root (uid {uid})")
    };
    Some(format!(
        "emberd check: {who} and no CAP_BPF/CAP_PERFMON: cannot load BPF programs; run as root (sudo emberd check) for the full report"
    ))
}

/// Runs every check. Loads (and unloads) the real sampler to prove BPF and
/// perf events work. Without the privileges to load it, what depends on
/// them (the programs, malloc uprobes, other processes' Python, kernel
/// symbols) is marked skipped, not guessed from what this user can read.
pub fn run() -> Vec<Item> {
    let mut items = Vec::new();
    let euid = nix::unistd::geteuid();
    let caps = effective_caps();
    let privileged = may_load_bpf();
    items.push(Item {
        what: "privileges",
        status: if privileged {
            Status::Ok
        } else {
            Status::Fatal
        },
        detail: format!(
            "euid {euid}, effective capabilities {caps:#x} ({})",
            [
                Cap::SysAdmin,
                Cap::Bpf,
                Cap::Perfmon,
                Cap::Syslog,
                Cap::SysPtrace
            ]
            .into_iter()
            .map(|c| format!("{}{}", if has_cap(c) { "+" } else { "-" }, c.name()))
            .collect::<Vec<_>>()
            .join(" ")
        ),
    });
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    items.push(Item {
        what: "BTF",
        status: if btf { Status::Ok } else { Status::Fatal },
        detail: if btf {
            "/sys/kernel/btf/vmlinux present".into()
        } else {
            "no /sys/kernel/btf/vmlinux: BPF programs cannot be loaded (needs CONFIG_DEBUG_INFO_BTF)".into()
        },
    });
    let paranoid = read_trim("/proc/sys/kernel/perf_event_paranoid").unwrap_or_else(|| "?".into());
    items.push(Item {
        what: "perf_event_paranoid",
        status: Status::Ok,
        detail: format!(
            "{paranoid} (irrelevant with CAP_PERFMON or root; without them only -1 allows system-wide sampling)"
        ),
    });
    let max_stack =
        read_trim("/proc/sys/kernel/perf_event_max_stack").unwrap_or_else(|| "?".into());
    items.push(Item {
        what: "perf_event_max_stack",
        status: Status::Ok,
        detail: format!(
            "{max_stack} frames (emberd keeps {} per stack; deeper stacks end in [truncated])",
            crate::collect::stack::MAX_STACK_DEPTH
        ),
    });
    items.push(kernel_item());
    if !privileged {
        items.push(Item {
            what: "BPF + perf events",
            status: Status::Fatal,
            detail: "not tried: loading BPF programs needs root or CAP_BPF+CAP_PERFMON".into(),
        });
        items.push(unwind_item());
        items.push(Item {
            what: "not checked",
            status: Status::Skipped,
            detail: "events and malloc uprobes (need BPF), Python processes and other users' processes (need CAP_SYS_PTRACE), kernel symbols (need CAP_SYSLOG): run as root to check them".into(),
        });
        items.push(tracefs_item());
        return items;
    }
    // Real load and attach: the only honest test of BPF and perf events.
    let sampler = crate::collect::CpuSampler::start(crate::collect::SamplerOptions::default());
    let choice = crate::collect::forms::chosen();
    match &sampler {
        Ok(s) => items.push(Item {
            what: "BPF + perf events",
            status: Status::Ok,
            detail: format!(
                "sampler loaded and attached to cpu-clock on CPUs {:?}: {}{}{}",
                s.cpus(),
                choice.describe(),
                if choice.form == crate::collect::forms::ProgramForm::Bounded {
                    let t = crate::collect::forms::thread_size();
                    format!(
                        "; kernel stacks of {} bytes (THREAD_SIZE, from {}), where user registers are found",
                        t.bytes, t.source
                    )
                } else {
                    String::new()
                },
                if choice.lazy_maps {
                    String::new()
                } else {
                    format!(
                        "; maps preallocated (this kernel lacks {} (Linux {})): tables for {} processes at most",
                        crate::collect::forms::LAZY_MAPS.name,
                        crate::collect::forms::LAZY_MAPS.since,
                        crate::collect::forms::PREALLOCATED_PROCESSES
                    )
                }
            ),
        }),
        Err(e) => items.push(Item {
            what: "BPF + perf events",
            status: Status::Fatal,
            detail: format!("cannot sample: {e}"),
        }),
    }
    // The default events, plus malloc on emberd itself: proves uprobes.
    let mut options = crate::collect::events::EventOptions::default();
    options
        .malloc
        .pids
        .push(crate::shared::Pid(std::process::id()));
    let events = sampler.as_ref().ok().map(|s| {
        s.unwind_maps().and_then(|maps| {
            let mut e = crate::collect::events::EventSampler::start(options.clone(), &maps)?;
            e.watch_process(crate::shared::Pid(std::process::id()));
            Ok(e)
        })
    });
    if let Some(Ok(e)) = &events {
        items.extend(memory_items(e));
    }
    match events {
        Some(Ok(e)) => items.push(Item {
            what: "off-CPU events",
            status: Status::Ok,
            detail: format!(
                "tp_btf sched_switch ({}), sched_waking and the page-fault perf event loaded and attached, {} form; off-CPU state in {}",
                if e.sched_switch_compat() {
                    "pre-5.18 arguments: state read from the task"
                } else {
                    "with prev_state, Linux 5.18+"
                },
                e.form(),
                match e.form() {
                    crate::collect::forms::ProgramForm::Loop => "task storage".to_string(),
                    crate::collect::forms::ProgramForm::Bounded => format!(
                        "a hash of thread ids (no task storage in tracing programs before Linux 5.11): {} threads at most (offcpu_bounded_threads), half of them for any one user but root",
                        e.options().blocked_threads
                    ),
                }
            ),
        }),
        Some(Err(e)) => items.push(Item {
            what: "off-CPU events",
            status: Status::Degraded,
            detail: format!("{e}"),
        }),
        None => {}
    }
    items.push(unwind_item());
    items.push(python_item());
    items.push(java_item());
    items.push(node_item());
    items.push(match crate::symbolize::kallsyms_readable() {
        Ok(true) => Item {
            what: "kallsyms",
            status: Status::Ok,
            detail: "/proc/kallsyms shows real addresses: kernel frames get names".into(),
        },
        Ok(false) => Item {
            what: "kallsyms",
            status: Status::Degraded,
            detail: format!(
                "addresses read as zero (kernel.kptr_restrict={}, CAP_SYSLOG {}): kernel frames show as [kernel] (their addresses stay hidden); run as root or set kernel.kptr_restrict=0",
                read_trim("/proc/sys/kernel/kptr_restrict").unwrap_or_else(|| "?".into()),
                if has_cap(Cap::Syslog) { "present" } else { "missing" }
            ),
        },
        Err(e) => Item {
            what: "kallsyms",
            status: Status::Degraded,
            detail: format!("cannot read /proc/kallsyms ({e}): kernel frames unnamed"),
        },
    });
    let ptrace = has_cap(Cap::SysPtrace) || euid.is_root();
    items.push(Item {
        what: "other processes",
        status: if ptrace { Status::Ok } else { Status::Degraded },
        detail: if ptrace {
            "can read other users' /proc/PID/maps and binaries".into()
        } else {
            "without CAP_SYS_PTRACE other users' frames show as [exited]".into()
        },
    });
    items.push(tracefs_item());
    let bpffs = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("bpf"))
        })
        .unwrap_or(false);
    items.push(Item {
        what: "bpffs",
        status: if bpffs { Status::Ok } else { Status::Degraded },
        detail: if bpffs {
            "mounted".into()
        } else {
            "not mounted: nothing is pinned, which emberd does not need".into()
        },
    });
    items
}

/// Whether tracefs is mounted (the cheaper brk/mmap/munmap hooks need it).
fn tracefs_item() -> Item {
    let tracefs = std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
        })
        .unwrap_or(false);
    Item {
        what: "tracefs",
        status: if tracefs {
            Status::Ok
        } else {
            Status::Degraded
        },
        detail: if tracefs {
            "mounted".into()
        } else {
            "not mounted: classic tracepoints unavailable, so brk/mmap/munmap use the raw sys_enter/sys_exit tracepoints, which run (briefly) on every syscall; mount -t tracefs nodev /sys/kernel/tracing and restart emberd to hook only those three calls".into()
        },
    }
}

/// The running kernel's release, and whether it is one emberd loads on.
fn kernel_item() -> Item {
    use crate::collect::forms::{OLDEST, kernel_version};
    let (version, release) = kernel_version();
    let old = version < OLDEST;
    Item {
        what: "kernel",
        status: if old { Status::Fatal } else { Status::Ok },
        detail: if old {
            format!(
                "Linux {release}: emberd needs {}.{} or later (BTF tracepoints, ring buffers, bpf_get_task_stack)",
                OLDEST.0, OLDEST.1
            )
        } else {
            format!("Linux {release}")
        },
    }
}

/// The memory and I/O events: which hooks this kernel and mount table
/// give, and their knobs.
fn memory_items(e: &crate::collect::events::EventSampler) -> Vec<Item> {
    use crate::collect::events::{BlockHooks, SyscallHooks, defaults};
    let hooks = e.hooks();
    let mut items = vec![
        Item {
            what: "brk/mmap/munmap",
            status: match hooks.syscalls {
                Some(SyscallHooks::Tracepoints) => Status::Ok,
                _ => Status::Degraded,
            },
            detail: match hooks.syscalls {
                Some(SyscallHooks::Tracepoints) => {
                    "classic syscalls:sys_{enter,exit}_{brk,mmap,munmap} tracepoints: only those calls run a program (knobs: brk, mmap, munmap; off by default: any syscall hook slows every syscall)".into()
                }
                Some(SyscallHooks::RawSyscalls) => {
                    "raw sys_enter/sys_exit tracepoints (tracefs not mounted): every syscall runs a program that leaves at the first comparison; mount tracefs for the cheaper hooks (knobs: brk, mmap, munmap; off by default: any syscall hook slows every syscall)".into()
                }
                None => "off".into(),
            },
        },
        Item {
            what: "block I/O",
            status: Status::Ok,
            detail: match hooks.block {
                Some(BlockHooks::IoStartDone) => {
                    "BTF tracepoints block_io_start/block_io_done: charged to the submitting thread (knob: blockio = true)".into()
                }
                Some(BlockHooks::RqIssueComplete) => {
                    "BTF tracepoints block_rq_issue/block_rq_complete (no block_io_start before Linux 6.5): charged to the issuing thread, which may be a kworker flushing another's plug (knob: blockio = true)".into()
                }
                None => "off".into(),
            },
        },
    ];
    let traced = e
        .malloc_processes()
        .contains(&crate::shared::Pid(std::process::id()));
    items.push(Item {
        what: "malloc uprobes",
        status: if traced { Status::Ok } else { Status::Degraded },
        detail: if traced {
            format!(
                "uprobes on libc attach (tried on emberd itself); off unless processes are named: malloc_pids, malloc_comms; one sample per {} KiB on average (malloc_sample_kib), {} allocations tracked live (malloc_live_entries)",
                defaults::MALLOC_SAMPLE_BYTES / 1024,
                defaults::MALLOC_LIVE_ENTRIES
            )
        } else {
            format!(
                "uprobes on emberd's own libc did not attach ({:?}): malloc tracing unavailable",
                e.malloc_refusals()
            )
        },
    });
    items
}

/// Unwinding: compiles the tables of emberd's own executable files (its
/// binary, libc, the loader, the vDSO's image is left to the daemon) and
/// reports rows, bytes and build time, as the daemon would for any process.
/// The Python processes running now and whether their frames are read.
fn python_item() -> Item {
    let found = crate::runtime::python::scan_processes();
    let readable = found.iter().filter(|p| p.native_reason.is_none()).count();
    let list: Vec<String> = found
        .iter()
        .take(20)
        .map(|p| {
            let v = p.version.map_or_else(|| "?".into(), |v| v.to_string());
            match p.native_reason {
                None => format!("{} {} (CPython {v}): Python frames read", p.pid, p.comm),
                Some(r) => format!("{} {} (CPython {v}): native only, {r}", p.pid, p.comm),
            }
        })
        .collect();
    Item {
        what: "python",
        status: if readable == found.len() {
            Status::Ok
        } else {
            Status::Degraded
        },
        detail: format!(
            "CPython 3.8-3.15 frames are read in BPF (no CAP_SYS_PTRACE needed); {} Python processes running, {readable} readable{}{}",
            found.len(),
            if list.is_empty() { "" } else { ": " },
            list.join("; ") + if found.len() > 20 { "; ..." } else { "" },
        ),
    }
}

/// The processes running now that map a file `is_runtime` picks by name,
/// each with a line saying whether `read` can read it: (found, readable,
/// at most 20 lines).
fn runtime_processes(
    is_runtime: impl Fn(&std::ffi::OsStr) -> bool,
    read: impl Fn(crate::shared::Pid, &str) -> Result<String, String>,
) -> (usize, usize, Vec<String>) {
    let mut list = Vec::new();
    let (mut found, mut readable) = (0usize, 0usize);
    for p in procfs::process::all_processes()
        .into_iter()
        .flatten()
        .flatten()
    {
        let pid = crate::shared::Pid(p.pid as u32);
        let Ok(maps) = crate::shared::procmaps::code_maps(pid) else {
            continue;
        };
        let runs = maps.iter().any(|m| {
            matches!(&m.pathname, procfs::process::MMapPath::Path(path)
                if path.file_name().is_some_and(&is_runtime))
        });
        if !runs {
            continue;
        }
        found += 1;
        let comm = p.stat().map(|s| s.comm).unwrap_or_default();
        let line = match read(pid, &comm) {
            Ok(l) => {
                readable += 1;
                l
            }
            Err(e) => format!("{} {comm}: native only, {e}", pid.0),
        };
        if list.len() < 20 {
            list.push(line);
        }
    }
    (found, readable, list)
}

/// A runtime's item: `what`, `about` it, its processes found and read.
fn runtime_item(
    what: &'static str,
    about: &str,
    (found, readable, list): (usize, usize, Vec<String>),
) -> Item {
    Item {
        what,
        status: if readable == found {
            Status::Ok
        } else {
            Status::Degraded
        },
        detail: format!(
            "{about}; {found} running, {readable} readable{}{}",
            if list.is_empty() { "" } else { ": " },
            list.join("; ") + if found > 20 { "; ..." } else { "" },
        ),
    }
}

/// The JVMs running now (processes mapping a `libjvm.so`) and whether
/// their structure tables can be read.
fn java_item() -> Item {
    let found = runtime_processes(
        |n| n == "libjvm.so",
        |pid, comm| {
            crate::runtime::hotspot::Jvm::find(pid)
                .map(|j| format!("{} {comm} (HotSpot {}): Java frames read", pid.0, j.release))
                .map_err(|e| e.to_string())
        },
    );
    runtime_item(
        "java",
        "HotSpot JVMs (JDK 17 and 25 tested) are unwound in BPF from their own structure tables (no flag or agent)",
        found,
    )
}

/// The node processes running now (mapping a node binary or
/// `libnode.so`) and whether V8's metadata in it can be read.
fn node_item() -> Item {
    let found = runtime_processes(
        |n| n.to_str().is_some_and(crate::runtime::v8::is_node_name),
        |pid, comm| {
            crate::runtime::v8::NodeProcess::find(pid)
                .map(|_| format!("{} {comm}: JavaScript frames read", pid.0))
        },
    );
    runtime_item(
        "node",
        "Node.js processes (Node 18 to 26 tested) have their JavaScript frames read in BPF from V8's frames and postmortem metadata (no flag); their timer waits are charged to the JavaScript that armed the timer (a uprobe on uv_timer_start, with off-CPU events)",
        found,
    )
}

fn unwind_item() -> Item {
    let reports = crate::unwind::self_report();
    let mut parts = Vec::new();
    let (mut rows, mut time, mut failed) = (0usize, std::time::Duration::ZERO, 0);
    for r in &reports {
        match r {
            Ok(r) => {
                rows += r.rows;
                time += r.time;
                let name = r.path.file_name().map_or_else(
                    || r.path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                parts.push(format!("{name}: {} rows ({:?})", r.rows, r.source));
            }
            Err(e) => {
                failed += 1;
                parts.push(e.clone());
            }
        }
    }
    Item {
        what: "unwinding",
        status: if failed == 0 && rows > 0 {
            Status::Ok
        } else {
            Status::Degraded
        },
        detail: format!(
            ".eh_frame tables of {} files of emberd itself: {rows} rows, {} KiB, built in {:.1} ms ({}); budget {} MiB (unwind_table_budget_mib)",
            reports.len(),
            rows * 4 / 1024,
            time.as_secs_f64() * 1000.0,
            parts.join(", "),
            crate::unwind::defaults::table_budget_bytes() >> 20,
        ),
    }
}

/// Whether the unwind-table budget holds what runs here: the tables of
/// every executable file running processes map now, built and packed as
/// the daemon would, against `unwind_table_budget_mib`; and, when a daemon
/// answers at the configured address, what it holds and what it refused
/// or evicted in the last minute.
fn unwind_tables_item(raw: &crate::daemon::config::RawConfig) -> Item {
    let budget = raw
        .unwind_table_budget_mib
        .map_or_else(crate::unwind::defaults::table_budget_bytes, |m| m << 20);
    let d = crate::unwind::host_demand(budget);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut detail = format!(
        "the {} files running programs map need {:.1} MiB of unwind tables; the budget is {} MiB (unwind_table_budget_mib); largest: {}",
        d.files,
        mib(d.bytes),
        budget >> 20,
        d.largest
            .iter()
            .map(|(n, b)| format!("{n} {:.1} MiB", mib(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut short = d.bytes > budget;
    if !d.over_share.is_empty() {
        short = true;
        detail += &format!(
            "; over a quarter of the budget each (left to frame pointers): {}",
            d.over_share.join(", ")
        );
    }
    if let Some(m) = daemon_metrics(raw) {
        let g = |what: &str| metric_value(&m, &format!("emberd_unwind_tables{{map=\"{what}\"}}"));
        let (refused, evicted, waiting) = (
            g("refused_last_minute"),
            g("evicted_last_minute"),
            g("files_without_room"),
        );
        short |= refused > 0.0 || waiting > 0.0;
        detail += &format!(
            "; the running daemon holds {:.1} MiB in {} files, refused {refused} and evicted {evicted} tables in the last minute, {waiting} files wait for room",
            mib(g("bytes") as u64),
            g("files"),
        );
    }
    if short {
        let want = (d.bytes + d.bytes / 4).max(budget + (8 << 20)) >> 20;
        detail += &format!(
            "; the budget is too small for this host: set unwind_table_budget_mib = {want} (kernel memory, allocated at start)"
        );
    }
    detail += &format!(" ({} ms)", d.time.as_millis());
    Item {
        what: "unwind tables",
        status: if short { Status::Degraded } else { Status::Ok },
        detail,
    }
}

/// Where the installed unit keeps the history (`StateDirectory=emberd`).
const UNIT_STATE_DIR: &str = "/var/lib/emberd";

/// Where the history on disk is kept and what it holds: the directory the
/// daemon would use (or, outside the unit, the unit's), its files by tier
/// and the time they span, files that do not read, the disk's free space
/// against `history_disk_mib`, and whether a running daemon writes. Reads
/// only: nothing is made, fixed or removed.
fn history_item(raw: &crate::daemon::config::RawConfig) -> Item {
    use std::os::unix::fs::MetadataExt;
    let what = "history on disk";
    let limited = |detail: String| Item {
        what,
        status: Status::Degraded,
        detail,
    };
    let options = match crate::daemon::config::history_of(raw) {
        Err(e) => return limited(format!("{e:#}: the daemon will not start")),
        Ok(Some(o)) => o,
        Ok(None) if raw.history_dir.is_some() => {
            return limited(
                "off (history_dir = \"\"): the last hour only, in memory; a restart loses it"
                    .into(),
            );
        }
        Ok(None) => {
            // Run by hand, not by systemd: what the installed unit uses.
            let unit = crate::daemon::config::RawConfig {
                history_dir: Some(UNIT_STATE_DIR.into()),
                ..raw.clone()
            };
            match crate::daemon::config::history_of(&unit) {
                Ok(Some(o)) if o.dir.is_dir() => o,
                _ => {
                    return limited(format!(
                        "not here (no history_dir, no $STATE_DIRECTORY): the last hour only, in memory; \
                         the installed unit keeps days in {UNIT_STATE_DIR} (StateDirectory=emberd)"
                    ));
                }
            }
        }
    };
    let dir = options.dir.clone();
    let budget = options.budget_bytes;
    let days = options.max_age / 86400;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let free = nix::sys::statvfs::statvfs(dir.parent().unwrap_or(&dir))
        .ok()
        .map(|v| v.blocks_available() * v.fragment_size());
    let free_text = |free: Option<u64>| match free {
        Some(f) if f < budget => format!(
            "; the disk has {:.0} MiB free, less than history_disk_mib ({} MiB): files will fail to write before the budget drops any",
            mib(f),
            budget >> 20
        ),
        Some(f) => format!("; {:.0} MiB free on its disk", mib(f)),
        None => String::new(),
    };
    let md = match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Item {
                what,
                status: Status::Ok,
                detail: format!(
                    "{}: made at start (mode 0750); {} MiB, {days} days (history_disk_mib, history_days){}",
                    dir.display(),
                    budget >> 20,
                    free_text(free)
                ),
            };
        }
        Err(e) => return limited(format!("{}: {e}", dir.display())),
        Ok(md) => md,
    };
    if !md.is_dir() {
        return limited(format!(
            "{}: not a directory (a symbolic link is not followed): the daemon will refuse it",
            dir.display()
        ));
    }
    let owner = nix::unistd::User::from_uid(md.uid().into())
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {}", md.uid()), |u| u.name);
    // Read only: check must not remove what a start would. Quiet: the
    // files that do not read are counted in the line, not logged.
    let opened =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            crate::store::disk::Archive::open(crate::store::disk::DiskOptions {
                read_only: true,
                ..options
            })
        });
    let archive = match opened {
        Ok(a) => a,
        Err(e) => return limited(e.to_string()),
    };
    let tiers = archive
        .size_by_tier()
        .iter()
        .enumerate()
        .map(|(i, (bytes, n))| format!("tier {i}: {} {:.1} MiB", count(*n, "file"), mib(*bytes)))
        .collect::<Vec<_>>()
        .join(", ");
    let (bytes, files) = archive.size();
    let oldest = crate::shared::events::Event::ALL
        .iter()
        .filter_map(|e| archive.oldest(e.name()))
        .min();
    let span = match (oldest, archive.newest()) {
        (Some(a), Some(z)) => {
            // The files' own clock (wall time at start, then monotonic).
            let now = crate::shared::clock::now();
            format!(
                ", from {} to {}",
                ago(now.saturating_sub(a)),
                ago(now.saturating_sub(z))
            )
        }
        _ => String::new(),
    };
    let c = &archive.counters;
    let unread: u64 = [
        &c.skipped_format,
        &c.skipped_truncated,
        &c.skipped_corrupt,
        &c.skipped_io,
        &c.temp_removed,
    ]
    .iter()
    .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
    .sum();
    let mut short = free.is_some_and(|f| f < budget) || md.mode() & 0o007 != 0;
    let mut detail = format!(
        "{}: {owner}'s, mode {:04o}; {}, {:.1} MiB of {} MiB, {days} days at most{span} ({tiers}){}",
        dir.display(),
        md.mode() & 0o7777,
        count(files, "file"),
        mib(bytes),
        budget >> 20,
        free_text(free)
    );
    if md.mode() & 0o007 != 0 {
        detail += "; other users may read it: the daemon sets 0750 at start";
    }
    if unread > 0 {
        detail += &format!(
            "; {} not read (torn, corrupt, of another version, or temporary): a start removes them",
            count(unread as usize, "file")
        );
    }
    if let Some(m) = daemon_metrics(raw) {
        let writing = metric_value(&m, "emberd_history_writing");
        let errors = metric_value(&m, "emberd_history_write_errors_total");
        if m.contains("emberd_history_writing") {
            if writing == 0.0 {
                short = true;
                detail += &format!(
                    "; the running daemon cannot write there ({errors} write errors: its log says why)"
                );
            } else {
                detail += &format!("; the running daemon writes there ({errors} write errors)");
            }
        }
    }
    Item {
        what,
        status: if short { Status::Degraded } else { Status::Ok },
        detail,
    }
}

/// "1 file", "2 files".
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `secs` ago, in its two largest units: "6 d 23 h ago", "12 s ago".
fn ago(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s ago"),
        (0, 0, _) => format!("{m} min {s} s ago"),
        (0, _, _) => format!("{h} h {m} min ago"),
        _ => format!("{d} d {h} h ago"),
    }
}

/// The value of the sample `name` (with its labels) in a `/metrics` text; 0
/// when absent.
fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The `/metrics` text of a daemon listening where `raw` says (TCP), with
/// its token when one is set and readable; `None` when none answers.
fn daemon_metrics(raw: &crate::daemon::config::RawConfig) -> Option<String> {
    use std::io::{Read, Write};
    let listen = raw
        .listen
        .clone()
        .unwrap_or_else(|| crate::daemon::config::defaults::LISTEN.to_owned());
    let addr: std::net::SocketAddr = listen.parse().ok()?;
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .ok()?;
    let token = raw
        .auth_token_file
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| t.lines().next().map(str::to_owned));
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {listen}\r\n{auth}\r\n").ok()?;
    let mut body = Vec::new();
    s.take(16 << 20).read_to_end(&mut body).ok()?;
    let text = String::from_utf8_lossy(&body);
    let (head, rest) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| rest.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| rest.to_owned()))
}

/// Who may read the profiles a daemon with these settings serves: every
/// local user (no token, TCP), or those who can read the token file or the
/// Unix socket.
pub fn access(raw: &crate::daemon::config::RawConfig) -> Item {
    use std::os::unix::fs::MetadataExt;
    let what = "who reads profiles";
    let listen = raw
        .listen
        .as_deref()
        .unwrap_or(crate::daemon::config::defaults::LISTEN);
    if let Some(sock) = &raw.unix_socket {
        return Item {
            what,
            status: Status::Ok,
            detail: format!(
                "emberd's user and group: the Unix socket {} is mode 0660",
                sock.display()
            ),
        };
    }
    let Some(path) = &raw.auth_token_file else {
        return Item {
            what,
            status: Status::Degraded,
            detail: format!(
                "every local user: http://{listen} needs no token (set auth_token_file; scripts/install does)"
            ),
        };
    };
    match std::fs::metadata(path) {
        Err(e) => Item {
            what,
            status: Status::Degraded,
            detail: format!(
                "auth_token_file {}: {e}: the daemon will not start",
                path.display()
            ),
        },
        Ok(m) if m.mode() & 0o007 != 0 => Item {
            what,
            status: Status::Degraded,
            detail: format!(
                "every local user: the token file {} is mode {:04o}, readable by all (chmod 0640)",
                path.display(),
                m.mode() & 0o7777
            ),
        },
        Ok(m) => {
            let group = nix::unistd::Group::from_gid(m.gid().into())
                .ok()
                .flatten()
                .map_or_else(|| m.gid().to_string(), |g| g.name);
            // The file's owner reads it too, whatever its mode says.
            let owner = match nix::unistd::User::from_uid(m.uid().into()).ok().flatten() {
                _ if m.uid() == 0 => String::new(),
                Some(u) => format!(", user {}", u.name),
                None => format!(", uid {}", m.uid()),
            };
            Item {
                what,
                status: Status::Ok,
                detail: format!(
                    "root{owner} and group {group}: http://{listen} needs the token in {} (mode {:04o}); \
                     `emberd login` logs a browser in",
                    path.display(),
                    m.mode() & 0o7777
                ),
            }
        }
    }
}

/// One empty push to each configured destination, and what it answered.
pub fn destinations(raw: &crate::daemon::config::RawConfig) -> Vec<Item> {
    let push = match crate::daemon::config::push_of(raw) {
        Ok(None) => return Vec::new(),
        Ok(Some(p)) => p,
        Err(e) => {
            return vec![Item {
                what: "push",
                status: Status::Degraded,
                detail: format!("{e:#}: the daemon will not start"),
            }];
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return vec![Item {
                what: "push",
                status: Status::Degraded,
                detail: format!("cannot start an async runtime to try the destinations: {e}"),
            }];
        }
    };
    push.destinations
        .iter()
        .map(|d| {
            let what = match d.protocol {
                crate::export::Protocol::Pyroscope => "push to pyroscope",
                crate::export::Protocol::Otlp => "push to otlp",
            };
            match rt.block_on(crate::export::probe(d, push.timeout)) {
                Ok(said) => Item {
                    what,
                    status: Status::Ok,
                    detail: format!("{}: {said}", d.url),
                },
                Err(e @ crate::export::PushError::Status { .. }) => Item {
                    what,
                    status: Status::Degraded,
                    detail: e.to_string(),
                },
                Err(e @ crate::export::PushError::Untrusted { .. }) => Item {
                    what,
                    status: Status::Degraded,
                    detail: format!(
                        "{e}; if that user runs your collector, set {}_listener_user",
                        d.protocol.name()
                    ),
                },
                Err(e) => Item {
                    what,
                    status: Status::Degraded,
                    detail: format!(
                        "{e}: pushes will be retried and the oldest of {} intervals dropped; sampling goes on",
                        push.queue_intervals
                    ),
                },
            }
        })
        .collect()
}

/// Prints every item of `emberd check`; fails when sampling cannot work.
pub fn command(config: Option<&std::path::Path>) -> anyhow::Result<std::process::ExitCode> {
    use crate::daemon::config::RawConfig;
    use std::process::ExitCode;
    if let Some(line) = unprivileged_line() {
        println!("{line}");
    }
    let mut items = run();
    match RawConfig::load(config) {
        Ok(raw) => {
            items.push(access(&raw));
            items.extend(destinations(&raw));
            items.push(unwind_tables_item(&raw));
            items.push(history_item(&raw));
        }
        Err(e) => items.push(Item {
            what: "who reads profiles",
            status: Status::Degraded,
            detail: format!("{e:#}"),
        }),
    }
    for item in &items {
        println!("{item}");
    }
    let fatal = items.iter().filter(|i| i.status == Status::Fatal).count();
    if !may_load_bpf() {
        println!("\nemberd cannot sample as this user: run it as root.");
        Ok(ExitCode::FAILURE)
    } else if fatal > 0 {
        println!("\nemberd cannot sample here: fix the MISSING items above.");
        Ok(ExitCode::FAILURE)
    } else {
        println!("\nemberd can sample here.");
        Ok(ExitCode::SUCCESS)
    }
}
