//! The command `emberd record -- COMMAND` profiles. It is started before the
//! programs load, so its pid can filter them, and held until they are
//! loaded, so its profile starts where the command does (as `perf record
//! COMMAND`'s does).
//!
//! The hold is a shell reading one byte from a pipe before it `exec`s the
//! command: the pid stays the command's, and nothing runs in the forked
//! child that std's `spawn` would wait on (a `pre_exec` hook that blocked
//! would hang `spawn` itself, which waits for the exec).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;

use anyhow::{Context, bail};

/// Lets a launched command run. Dropping every copy without [`Gate::open`]
/// makes the command exit (status 125) without running.
#[derive(Clone)]
pub struct Gate(Arc<OwnedFd>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gate(fd {})", self.0.as_raw_fd())
    }
}

impl Gate {
    /// Lets the command start: a line, as the shell's `read` waits for one.
    pub fn open(&self) {
        // A closed read end (the shell already gone) is not an error here:
        // the reaper reports how the command ended.
        let _ = nix::unistd::write(&*self.0, b"go\n");
    }
}

/// A command started and held at its gate.
pub struct Launched {
    /// The held process (a shell until the gate opens, then the command).
    pub child: Child,
    /// Opens the hold.
    pub gate: Gate,
}

/// The executable `name` resolves to, as the shell would find it: a path
/// if it has a `/`, else the first executable file of that name on `PATH`.
fn resolve(name: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata().is_ok_and(|m| {
            m.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
        })
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    std::env::var_os("PATH")
        .as_deref()
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
}

/// Starts `argv` held at its gate, with this process's standard streams
/// and environment.
pub fn launch(argv: &[String]) -> anyhow::Result<Launched> {
    let Some(name) = argv.first() else {
        bail!("no command given after --");
    };
    if resolve(name).is_none() {
        bail!(
            "command not found or not executable: {name} (after --: give a program on PATH or a path)"
        );
    }
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .context("creating the pipe that holds the command")?;
    let read_fd = read.as_raw_fd();
    let mut cmd = Command::new("/bin/sh");
    // fd 3 is the pipe in the shell only: it closes it before the exec.
    cmd.arg("-c")
        .arg(r#"read -r _ <&3 || exit 125; exec 3<&-; exec "$@""#)
        .arg("emberd-record")
        .args(argv);
    // SAFETY: dup2 and fcntl are async-signal-safe and touches only the child's table.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec: clear it instead.
            let ok = if read_fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) >= 0
            } else {
                libc::dup2(read_fd, 3) >= 0
            };
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let child = cmd.spawn().context("starting /bin/sh to run the command")?;
    drop(read);
    Ok(Launched {
        child,
        gate: Gate(Arc::new(write)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_until_the_gate_opens_and_gone_if_it_never_does() {
        let Launched { mut child, gate } = launch(&["true".into()]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(child.try_wait().unwrap().is_none(), "held at the gate");
        gate.open();
        assert!(child.wait().unwrap().success());

        let Launched { mut child, gate } = launch(&["true".into()]).unwrap();
        drop(gate);
        assert_eq!(child.wait().unwrap().code(), Some(125));
    }

    #[test]
    fn a_missing_command_is_named() {
        let e = launch(&["no-such-command-here".into()]).err().unwrap();
        assert!(e.to_string().contains("no-such-command-here"), "{e}");
        assert!(launch(&[]).is_err());
    }
}
