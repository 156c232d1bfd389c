//! Which service a process belongs to: its systemd unit and container, as
//! its cgroup names them (read in `symbolize::cgroup`), and its executable.
//! Every profile store groups by these first (`service_name` in Pyroscope,
//! `service.name` and `container.id` in OpenTelemetry).

use std::sync::Arc;

/// Characters of a container id shown as its service name, as `docker ps`
/// shortens ids.
pub const SHORT_CONTAINER_ID: usize = 12;

/// A process's service labels. Empty strings mean "none".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Workload {
    /// The innermost systemd unit of the cgroup (`nginx.service`,
    /// `session-3.scope`; a user manager's units with it,
    /// `user@1000.service/app.service`), or empty.
    pub unit: Arc<str>,
    /// The container id, 64 lowercase hex digits (Docker, containerd,
    /// CRI-O, Podman), or empty.
    pub container: Arc<str>,
    /// The executable's path (`/proc/PID/exe`), or empty when unknown
    /// (kernel threads, processes gone before they were looked at).
    pub exe: Arc<str>,
}

impl Workload {
    /// The service name: the container's short id, else a `.service` unit,
    /// else `process_comm`. Scopes (login sessions, `systemd-run --scope`)
    /// and slices are not services: their processes go by their own name.
    pub fn service<'a>(unit: &'a str, container: &'a str, process_comm: &'a str) -> &'a str {
        if !container.is_empty() {
            &container[..container.len().min(SHORT_CONTAINER_ID)]
        } else if unit.ends_with(".service") {
            unit
        } else {
            process_comm
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_prefers_container_then_service_unit_then_name() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            Workload::service("docker-x.scope", id, "nginx"),
            "0123456789ab"
        );
        assert_eq!(
            Workload::service("nginx.service", "", "nginx"),
            "nginx.service"
        );
        assert_eq!(Workload::service("session-3.scope", "", "vim"), "vim");
        assert_eq!(Workload::service("", "", "kworker/0:1"), "kworker/0:1");
    }
}
