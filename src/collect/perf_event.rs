//! perf_event_open for the cpu-clock software event, one per CPU.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use perf_event_open_sys as sys;

/// Errors opening perf events.
#[derive(Debug, thiserror::Error)]
pub enum PerfEventError {
    /// perf_event_open itself failed.
    #[error("perf_event_open(cpu-clock, cpu {cpu}) failed: {source}{hint}")]
    Open {
        /// The CPU.
        cpu: u32,
        /// The OS error.
        source: std::io::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// The online-CPU list could not be read.
    #[error("reading {path} failed: {detail}")]
    Cpus {
        /// File read.
        path: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// An open perf event file descriptor.
#[derive(Debug)]
pub struct PerfEvent(OwnedFd);

impl PerfEvent {
    /// Opens the cpu-clock software event on `cpu` for every task, sampling
    /// at `hz` samples per second (frequency mode).
    pub fn cpu_clock(cpu: u32, hz: u64) -> Result<Self, PerfEventError> {
        let mut attr = sys::bindings::perf_event_attr {
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            type_: sys::bindings::PERF_TYPE_SOFTWARE,
            config: sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64,
            ..Default::default()
        };
        attr.sample_freq = hz;
        attr.set_freq(1);
        Self::open(&mut attr, cpu)
    }

    fn open(attr: &mut sys::bindings::perf_event_attr, cpu: u32) -> Result<Self, PerfEventError> {
        // SAFETY: `attr` is fully initialized (zeroed, then set by the caller).
        let fd = unsafe {
            sys::perf_event_open(
                attr,
                -1,
                cpu as i32,
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
            )
        };
        if fd < 0 {
            let source = std::io::Error::last_os_error();
            let hint = match source.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    "\nhint: run as root, or grant CAP_PERFMON (kernel.perf_event_paranoid allows unprivileged users only their own processes)"
                }
                Some(libc::ENOENT) | Some(libc::ENODEV) => {
                    "\nhint: this kernel has no cpu-clock software event (CONFIG_PERF_EVENTS)"
                }
                Some(libc::EINVAL) => {
                    "\nhint: the frequency may exceed kernel.perf_event_max_sample_rate"
                }
                _ => "",
            };
            return Err(PerfEventError::Open { cpu, source, hint });
        }
        // SAFETY: perf_event_open returned a new, owned descriptor.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Opens the page-fault software event on `cpu` for every task, one
    /// sample every `period` faults.
    pub fn page_faults(cpu: u32, period: u64) -> Result<Self, PerfEventError> {
        let mut attr = sys::bindings::perf_event_attr {
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            type_: sys::bindings::PERF_TYPE_SOFTWARE,
            config: sys::bindings::PERF_COUNT_SW_PAGE_FAULTS as u64,
            ..Default::default()
        };
        attr.sample_period = period;
        Self::open(&mut attr, cpu)
    }

    /// Gives up ownership of the descriptor (to a BPF link, which closes it).
    pub fn into_raw_fd(self) -> RawFd {
        self.0.into_raw_fd()
    }
}

impl AsRawFd for PerfEvent {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (e.g. `0-3,6`).
pub fn online_cpus() -> Result<Vec<u32>, PerfEventError> {
    const PATH: &str = "/sys/devices/system/cpu/online";
    let text = fs::read_to_string(PATH).map_err(|e| PerfEventError::Cpus {
        path: PATH,
        detail: e.to_string(),
    })?;
    parse_cpu_list(&text).ok_or_else(|| PerfEventError::Cpus {
        path: PATH,
        detail: format!("unexpected contents {:?}", text.trim()),
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// `kernel.perf_event_max_sample_rate`, if readable.
pub fn max_sample_rate() -> Option<u64> {
    fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
