//! What loading and attaching the BPF programs needs of this process's
//! privileges: checked before anything is loaded, so a missing capability
//! is named rather than libbpf's `EPERM`.

use std::path::Path;

/// Linux capability numbers emberd cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// CAP_SYS_ADMIN (21): covers BPF and perf on kernels without the newer caps.
    SysAdmin = 21,
    /// CAP_SYS_PTRACE (19): read other users' /proc/PID/maps and map_files.
    SysPtrace = 19,
    /// CAP_SYSLOG (34): real addresses in /proc/kallsyms.
    Syslog = 34,
    /// CAP_PERFMON (38): perf events on every CPU and process.
    Perfmon = 38,
    /// CAP_BPF (39): load BPF programs and create maps.
    Bpf = 39,
}

impl Cap {
    /// The capability's name, as `capsh` and the man pages spell it.
    pub fn name(self) -> &'static str {
        match self {
            Cap::SysAdmin => "CAP_SYS_ADMIN",
            Cap::SysPtrace => "CAP_SYS_PTRACE",
            Cap::Syslog => "CAP_SYSLOG",
            Cap::Perfmon => "CAP_PERFMON",
            Cap::Bpf => "CAP_BPF",
        }
    }
}

/// The effective capability set of this process.
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Whether this process has `cap` in its effective set.
pub fn has_cap(cap: Cap) -> bool {
    effective_caps() & (1 << cap as u64) != 0
}

/// Why sampling cannot start, found before touching the kernel.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// Neither root nor the capabilities.
    #[error(
        "emberd needs privileges to load BPF programs and open perf events on every CPU: missing {missing}\n\
         hint: run as root (sudo emberd ...), or grant CAP_BPF, CAP_PERFMON (and CAP_SYSLOG, CAP_SYS_PTRACE for names)"
    )]
    MissingCaps {
        /// The capabilities that are missing, comma-separated.
        missing: String,
    },
    /// No BTF.
    #[error(
        "this kernel exposes no BTF at /sys/kernel/btf/vmlinux: emberd's BPF programs need it (CONFIG_DEBUG_INFO_BTF=y, Linux 5.8 or later)"
    )]
    NoBtf,
}

/// Checks what loading the sampler needs, with an error naming what is
/// missing and what to do.
pub fn require_sampling_privileges() -> Result<(), PrivilegeError> {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(PrivilegeError::NoBtf);
    }
    if has_cap(Cap::SysAdmin) {
        return Ok(());
    }
    let missing: Vec<&str> = [Cap::Bpf, Cap::Perfmon]
        .into_iter()
        .filter(|&c| !has_cap(c))
        .map(Cap::name)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PrivilegeError::MissingCaps {
            missing: missing.join(", "),
        })
    }
}
