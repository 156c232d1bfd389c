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
    /// The system unit of the cgroup (`nginx.service`,
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

/// What a process outside any unit and container goes by as a service:
/// `process:` and its name. Only root names system units, a user's units
/// are `user@UID.service/...`, and a container's short id is hex: so no
/// name another user can give a unit or container starts with `process:`,
/// and a user who runs a program named `nginx.service` is
/// `process:nginx.service`, never the host's `nginx.service`.
pub const PROCESS_SERVICE_PREFIX: &str = "process:";

/// The service, unit and container of label sets folded together past a
/// push's cap on distinct label sets (`push_max_label_sets`): no cgroup
/// path gives a unit of this name (units end in `.service` or `.scope`).
pub const OTHER_SERVICES: &str = "[other services]";

impl Workload {
    /// The service name: the container's short id, else a `.service` unit,
    /// else `process:COMM`. Scopes (login sessions, `systemd-run --scope`)
    /// and slices are not services: their processes go by their own name,
    /// marked as such ([`PROCESS_SERVICE_PREFIX`]).
    pub fn service<'a>(
        unit: &'a str,
        container: &'a str,
        process_comm: &'a str,
    ) -> std::borrow::Cow<'a, str> {
        match Self::labelled_service(unit, container) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(format!("{PROCESS_SERVICE_PREFIX}{process_comm}")),
        }
    }

    /// Whether [`Workload::service`] of these labels is `name`, without
    /// making the string.
    pub fn is_service(unit: &str, container: &str, process_comm: &str, name: &str) -> bool {
        match Self::labelled_service(unit, container) {
            Some(s) => s == name,
            None => name.strip_prefix(PROCESS_SERVICE_PREFIX) == Some(process_comm),
        }
    }

    /// The service a container or `.service` unit names, if any.
    fn labelled_service<'a>(unit: &'a str, container: &'a str) -> Option<&'a str> {
        if unit == OTHER_SERVICES {
            Some(OTHER_SERVICES)
        } else if !container.is_empty() {
            Some(&container[..container.len().min(SHORT_CONTAINER_ID)])
        } else if unit.ends_with(".service") {
            Some(unit)
        } else {
            None
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
        assert_eq!(
            Workload::service("session-3.scope", "", "vim"),
            "process:vim"
        );
        assert_eq!(
            Workload::service("", "", "kworker/0:1"),
            "process:kworker/0:1"
        );
        // A program named as a unit is not that unit's service.
        assert_eq!(
            Workload::service("", "", "nginx.service"),
            "process:nginx.service"
        );
        assert!(!Workload::is_service(
            "",
            "",
            "nginx.service",
            "nginx.service"
        ));
        assert!(Workload::is_service(
            "",
            "",
            "nginx.service",
            "process:nginx.service"
        ));
        assert!(Workload::is_service(
            "nginx.service",
            "",
            "x",
            "nginx.service"
        ));
        assert!(Workload::is_service("a.scope", id, "x", "0123456789ab"));
    }
}
