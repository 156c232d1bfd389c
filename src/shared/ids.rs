//! Process and thread ids, as every stage names them.

use std::fmt;

/// A process id (the kernel's tgid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(pub u32);

/// A thread id (the kernel's pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid(pub u32);

impl Pid {
    /// The pid (and tid) of history whose process had exited when its
    /// slot was merged: the store keeps such samples by name and stack
    /// only (see `store`). Shown as `exited`.
    pub const EXITED: Pid = Pid(u32::MAX);
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Pid::EXITED {
            return f.write_str("exited");
        }
        self.0.fmt(f)
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Pid(self.0).fmt(f)
    }
}
