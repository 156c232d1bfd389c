//! Where node's timer uprobes are attached: `uv_timer_start` in each node
//! process whose JavaScript frames are read, so the time its event loop
//! sleeps until a timer is charged to the JavaScript that armed it
//! (`bpf/node_timers.h`).

use std::collections::HashMap;
use std::path::PathBuf;

use libbpf_rs::{Link, ProgramMut, UprobeOpts};

use super::Pid;

/// Node processes trapped at most: each costs one uprobe. Node processes
/// placed for unwinding are bounded already (`v8_procs`, with a share per
/// user); this keeps the links bounded whatever that table's size.
pub const NODE_TIMER_MAX_PROCESSES: usize = 1024;

/// Where a node process's `uv_timer_start` is: found by the runtime stage
/// from the build's dynamic symbols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerHook {
    /// The process.
    pub pid: Pid,
    /// The file holding libuv (node, or `libnode.so`, or a `libuv.so`), as
    /// a path the kernel can open from here (`/proc/PID/map_files/...`:
    /// the very file mapped, in whatever mount namespace).
    pub file: PathBuf,
    /// The function's offset in that file.
    pub offset: u64,
}

/// Attaches to processes that have none yet; keeps the links by process.
#[derive(Default)]
pub struct NodeTimers {
    /// By process: the hook attached (a pid reused by another node before
    /// the exit was seen gives another hook) and its link.
    attached: HashMap<Pid, (TimerHook, Link)>,
}

impl std::fmt::Debug for NodeTimers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTimers")
            .field("attached", &self.attached.len())
            .finish()
    }
}

impl NodeTimers {
    /// Attaches `prog` at `hook` unless the process has it already.
    pub fn attach(&mut self, hook: &TimerHook, prog: &ProgramMut<'_>) {
        match self.attached.get(&hook.pid) {
            Some((old, _)) if old == hook => return,
            // The pid is another process's now: its link traps nothing.
            Some(_) => {
                self.attached.remove(&hook.pid);
            }
            None => {}
        }
        if self.attached.len() >= NODE_TIMER_MAX_PROCESSES {
            tracing::debug!(
                "node process {}: its timer waits stay the event loop's: already {NODE_TIMER_MAX_PROCESSES} node processes trapped",
                hook.pid
            );
            return;
        }
        let opts = UprobeOpts {
            retprobe: false,
            ..Default::default()
        };
        match prog.attach_uprobe_with_opts(
            hook.pid.0 as i32,
            &hook.file,
            hook.offset as usize,
            opts,
        ) {
            Ok(link) => {
                tracing::debug!(
                    "node process {}: timer waits charged to their JavaScript ({} +{:#x})",
                    hook.pid,
                    hook.file.display(),
                    hook.offset
                );
                self.attached.insert(hook.pid, (hook.clone(), link));
            }
            Err(e) => {
                tracing::info!(
                    "node process {}: its timer waits stay the event loop's: uprobe on uv_timer_start failed: {e}",
                    hook.pid
                );
            }
        }
    }

    /// Detaches from processes that have exited.
    pub fn forget_exited(&mut self) {
        self.attached
            .retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
