//! Service labels of processes: the systemd unit and container id their
//! cgroup names, and their executable, read from `/proc/PID/cgroup` and
//! `/proc/PID/exe` and kept for a few seconds (a process moved to another
//! cgroup is labelled anew within [`WORKLOAD_MAX_AGE`]).
//!
//! Cgroup paths are written by whoever runs the process: systemd, a
//! container runtime, or any user allowed to make cgroups. A path is only
//! read for names; a long or strange one gives no label, never an error.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::shared::{Pid, Workload};

/// How long a process's labels are trusted before `/proc/PID/cgroup` is
/// read again: about 1,000 reads a second for 3,000 processes sampled
/// every second, each a few microseconds.
pub const WORKLOAD_MAX_AGE: Duration = Duration::from_secs(3);
/// Processes whose labels are kept at once (about 100 bytes each, the
/// strings shared); past it the stale ones go, then all.
pub const WORKLOADS_MAX: usize = 16384;
/// Bytes of `/proc/PID/cgroup` read: a v1 host lists a line per
/// controller, each path at most a few hundred bytes in practice.
const CGROUP_FILE_MAX: u64 = 16 << 10;

/// The labels a cgroup path gives: unit and container, empty if none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupLabels {
    /// Innermost `.service` or `.scope` component.
    pub unit: String,
    /// 64-hex container id.
    pub container: String,
}

/// Labels from the text of `/proc/PID/cgroup`. The unified hierarchy's line
/// (`0::PATH`) is read first; on a hybrid host whose processes sit at its
/// root, systemd's own v1 hierarchy (`name=systemd`) names the unit, and a
/// container id may appear in any controller's path (Docker's cgroupfs
/// driver writes `/docker/ID` in each).
pub fn parse_cgroup_file(text: &str) -> CgroupLabels {
    let mut unified = None;
    let mut systemd = None;
    let mut others = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrl.is_empty() {
            unified = Some(path);
        } else if ctrl == "name=systemd" {
            systemd = Some(path);
        } else {
            others.push(path);
        }
    }
    let mut labels = CgroupLabels::default();
    for path in unified.into_iter().chain(systemd).chain(others) {
        let l = labels_of_path(path);
        if labels.unit.is_empty() {
            labels.unit = l.unit;
        }
        if labels.container.is_empty() {
            labels.container = l.container;
        }
        if !labels.unit.is_empty() && !labels.container.is_empty() {
            break;
        }
    }
    labels
}

/// Labels of one cgroup path, from the parts of it that only root (or,
/// for a user's units, that user's own manager) can name.
///
/// The unit is the first `.service` or `.scope` below the root's slices:
/// the system manager's unit. Anything below a unit is that unit's own
/// subtree (a service with `Delegate=yes`, a container's `/init`, a
/// user's manager), whose names its owner chooses, so it never names the
/// unit or the container. A user's own manager (`user@UID.service`) is the
/// one subtree read further: its first unit below its slices, named with
/// it, `user@1000.service/app.service` (any user may `systemd-run --user
/// --unit=nginx`; theirs must not pass for the host's `nginx.service`).
///
/// Container ids, only where the runtimes (root) put their cgroups:
/// - Docker: `/docker/ID` (cgroupfs driver), `docker-ID.scope` as a system
///   unit (systemd driver: `/system.slice/docker-ID.scope`);
/// - containerd (Kubernetes): `/kubepods/[QOS/]podUID/ID` (cgroupfs),
///   `cri-containerd-ID.scope` as a system unit (`/kubepods.slice/...`);
/// - CRI-O: `crio-ID.scope` as a system unit (`crio-conmon-ID.scope` is
///   its monitor);
/// - Podman: `libpod-ID.scope` as a system unit (`/machine.slice/...`).
///
/// A rootless container (Podman under `user@UID.service`) gets no container
/// id: its user names that scope, and could name it after another's
/// container; its unit says whose it is (`user@1000.service/libpod-ID.scope`).
pub fn labels_of_path(path: &str) -> CgroupLabels {
    let mut labels = CgroupLabels::default();
    let mut comps = path.split('/').filter(|c| !c.is_empty());
    // cgroupfs drivers: runtime directories at the root, which only root
    // can make.
    match comps.clone().next() {
        Some("docker") => {
            if let Some(id) = comps.nth(1).and_then(hex_id) {
                labels.container = id.to_owned();
            }
            return labels;
        }
        Some("kubepods") => {
            // kubepods[/QOS]/podUID/ID: the component after the pod's.
            let mut rest = comps.skip(1).skip_while(|c| !c.starts_with("pod"));
            if let Some(id) = rest.nth(1).and_then(hex_id) {
                labels.container = id.to_owned();
            }
            return labels;
        }
        _ => {}
    }
    let Some(unit) = comps.find(|c| !c.ends_with(".slice")) else {
        return labels;
    };
    if !is_unit(unit) {
        return labels;
    }
    labels.unit = unit.to_owned();
    if is_user_manager(unit) {
        if let Some(inner) = comps.find(|c| !c.ends_with(".slice"))
            && is_unit(inner)
        {
            labels.unit = format!("{unit}/{inner}");
        }
    } else if let Some(id) = scope_container_id(unit) {
        labels.container = id.to_owned();
    }
    labels
}

/// A `.service` or `.scope` name of reasonable length.
fn is_unit(comp: &str) -> bool {
    (comp.ends_with(".service") || comp.ends_with(".scope")) && comp.len() <= 256
}

/// `user@UID.service`: a user's own systemd instance.
fn is_user_manager(unit: &str) -> bool {
    unit.strip_prefix("user@")
        .and_then(|r| r.strip_suffix(".service"))
        .is_some_and(|uid| !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()))
}

/// The container id a runtime's scope unit names, if any.
fn scope_container_id(unit: &str) -> Option<&str> {
    let stem = unit.strip_suffix(".scope")?;
    ["docker-", "cri-containerd-", "crio-", "libpod-"]
        .iter()
        .find_map(|p| stem.strip_prefix(p))
        .and_then(hex_id)
}

/// `comp` if it is a 64-hex container id.
fn hex_id(comp: &str) -> Option<&str> {
    (comp.len() == 64 && comp.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(comp)
}

/// A process's labels as last read, and when.
struct Known {
    workload: Workload,
    read: Instant,
}

/// Labels of processes, read at most every [`WORKLOAD_MAX_AGE`].
#[derive(Default)]
pub struct Workloads {
    known: HashMap<Pid, Known>,
    /// Strings shared by every process of a unit or container.
    names: HashSet<Arc<str>>,
}

impl Workloads {
    /// The labels of `pid` at `now`: read again when older than
    /// [`WORKLOAD_MAX_AGE`]; a process gone since keeps what was read.
    pub fn get(&mut self, pid: Pid, now: Instant) -> Workload {
        if let Some(k) = self.known.get(&pid)
            && now.duration_since(k.read) < WORKLOAD_MAX_AGE
        {
            return k.workload.clone();
        }
        // The executable changes only at exec, which forgets the process.
        let exe = self.known.get(&pid).map(|k| k.workload.exe.clone());
        let Some(fresh) = self.read(pid, exe) else {
            return self
                .known
                .get(&pid)
                .map(|k| k.workload.clone())
                .unwrap_or_default();
        };
        if self.known.len() >= WORKLOADS_MAX && !self.known.contains_key(&pid) {
            self.known
                .retain(|_, k| now.duration_since(k.read) < WORKLOAD_MAX_AGE);
            if self.known.len() >= WORKLOADS_MAX {
                self.known.clear();
            }
            self.names.clear();
        }
        self.known.insert(
            pid,
            Known {
                workload: fresh.clone(),
                read: now,
            },
        );
        fresh
    }

    /// Forgets `pid` (it exec'd: systemd and runtimes move a child into its
    /// cgroup before the exec, so the next sample reads the new one).
    pub fn forget(&mut self, pid: Pid) {
        self.known.remove(&pid);
    }

    /// Processes whose labels are kept.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether none are kept.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    fn share(&mut self, s: &str) -> Arc<str> {
        if s.is_empty() {
            return Arc::from("");
        }
        if let Some(k) = self.names.get(s) {
            return k.clone();
        }
        let a: Arc<str> = Arc::from(s);
        if self.names.len() < WORKLOADS_MAX {
            self.names.insert(a.clone());
        }
        a
    }

    /// The labels of `pid` from its cgroup file, and its executable unless
    /// `exe` is already known.
    fn read(&mut self, pid: Pid, exe: Option<Arc<str>>) -> Option<Workload> {
        if pid.0 == 0 {
            return Some(Workload::default());
        }
        let mut text = String::new();
        std::fs::File::open(format!("/proc/{pid}/cgroup"))
            .ok()?
            .take(CGROUP_FILE_MAX)
            .read_to_string(&mut text)
            .ok()?;
        let labels = parse_cgroup_file(&text);
        let exe = match exe {
            Some(e) => e,
            // Kernel threads have no executable: an empty path.
            None => {
                let path = std::fs::read_link(format!("/proc/{pid}/exe"))
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.share(&path)
            }
        };
        Some(Workload {
            unit: self.share(&labels.unit),
            container: self.share(&labels.container),
            exe,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1c5e8a2b3d4c6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a";

    fn path(p: &str) -> (String, String) {
        let l = labels_of_path(p);
        (l.unit, l.container)
    }

    #[test]
    fn systemd_units() {
        assert_eq!(
            path("/system.slice/nginx.service"),
            ("nginx.service".into(), "".into())
        );
        assert_eq!(
            path("/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service"),
            ("user@1000.service/foo.service".into(), "".into())
        );
        // A user's unit named as the host's is not the host's.
        assert_eq!(
            path("/user.slice/user-1000.slice/user@1000.service/app.slice/nginx.service"),
            ("user@1000.service/nginx.service".into(), "".into())
        );
        assert_eq!(
            path("/user.slice/user-1000.slice/user@1000.service/init.scope"),
            ("user@1000.service/init.scope".into(), "".into())
        );
        assert_eq!(
            path("/user.slice/user-1000.slice/user@1000.service"),
            ("user@1000.service".into(), "".into())
        );
        assert_eq!(
            path("/user.slice/user-1000.slice/session-3.scope"),
            ("session-3.scope".into(), "".into())
        );
        assert_eq!(
            path("/system.slice/system-getty.slice/getty@tty1.service"),
            ("getty@tty1.service".into(), "".into())
        );
        assert_eq!(path("/init.scope"), ("init.scope".into(), "".into()));
        assert_eq!(path("/"), ("".into(), "".into()));
        assert_eq!(path("/emberd-test/x"), ("".into(), "".into()));
    }

    #[test]
    fn container_runtimes() {
        for p in [
            format!("/docker/{ID}"),
            format!("/system.slice/docker-{ID}.scope"),
            format!("/kubepods/burstable/pod1234-5678/{ID}"),
            format!("/kubepods/pod1234-5678/{ID}"),
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12.slice/cri-containerd-{ID}.scope"
            ),
            format!("/kubepods.slice/kubepods-pod12.slice/crio-{ID}.scope"),
            format!("/machine.slice/libpod-{ID}.scope"),
            format!("/system.slice/docker-{ID}.scope/init"),
            format!("/docker/{ID}/init"),
        ] {
            assert_eq!(path(&p).1, ID, "{p}");
        }
        assert_eq!(
            path(&format!("/machine.slice/libpod-conmon-{ID}.scope")).1,
            ""
        );
        assert_eq!(
            path(&format!("/kubepods.slice/crio-conmon-{ID}.scope")).1,
            ""
        );
        // Not hex, or not 64 of it.
        assert_eq!(path("/docker/xyz").1, "");
        assert_eq!(path(&format!("/docker/{}", &ID[..63])).1, "");
    }

    #[test]
    fn names_below_a_unit_belong_to_its_owner() {
        // Issue 41: a user's manager makes a scope named after another's
        // container (ids are readable in /proc/PID/cgroup).
        let forged =
            format!("/user.slice/user-65534.slice/user@65534.service/app.slice/docker-{ID}.scope");
        assert_eq!(
            path(&forged),
            (format!("user@65534.service/docker-{ID}.scope"), "".into())
        );
        // Rootless Podman: its user names the scope; no container id.
        assert_eq!(
            path(&format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"
            )),
            (format!("user@1000.service/libpod-{ID}.scope"), "".into())
        );
        // A container's or delegated service's own subtree names nothing.
        let other = ID.replace('4', "5");
        assert_eq!(
            path(&format!(
                "/system.slice/docker-{ID}.scope/docker-{other}.scope"
            )),
            (format!("docker-{ID}.scope"), ID.into())
        );
        assert_eq!(
            path("/system.slice/build.service/nginx.service"),
            ("build.service".into(), "".into())
        );
        assert_eq!(
            path(&format!("/system.slice/build.service/docker/{ID}")),
            ("build.service".into(), "".into())
        );
        assert_eq!(
            path("/user.slice/user-1000.slice/user@1000.service/app.slice/a.service/b.service"),
            ("user@1000.service/a.service".into(), "".into())
        );
        // A session's processes may make nothing; their scope is theirs.
        assert_eq!(
            path(&format!(
                "/user.slice/user-1000.slice/session-3.scope/docker-{ID}.scope"
            )),
            ("session-3.scope".into(), "".into())
        );
    }

    #[test]
    fn hybrid_hosts_read_systemd_and_controllers() {
        let text =
            format!("9:name=systemd:/system.slice/web.service\n4:memory:/docker/{ID}\n0::/\n");
        let l = parse_cgroup_file(&text);
        assert_eq!(l.unit, "web.service");
        assert_eq!(l.container, ID);
        let v2 = "0::/system.slice/cron.service\n";
        assert_eq!(parse_cgroup_file(v2).unit, "cron.service");
        // Garbage lines are skipped.
        assert_eq!(
            parse_cgroup_file("no colons\n::\n"),
            CgroupLabels::default()
        );
    }

    #[test]
    fn own_process_reads() {
        let mut w = Workloads::default();
        let me = w.get(Pid(std::process::id()), Instant::now());
        assert!(me.exe.starts_with('/'), "{me:?}");
        assert_eq!(w.len(), 1);
    }
}
