//! Labels another user cannot forge (issue 41): a program named after a
//! unit, and a scope a user's manager names after another's container.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Cgroups, Receiver, decode_pprof, fresh_dir};
use crate::common::{
    Daemon, NOBODY, Workload, build_c_debian, parse_folded, require_root, run_as, wait,
};

/// Per pushed pprof sample: (service_name, container_id, pid).
fn pushed_labels(p: &emberd::render::pprof::proto::Profile) -> Vec<(String, String, i64)> {
    let s = |i: i64| p.string_table[i as usize].clone();
    p.sample
        .iter()
        .map(|smp| {
            let mut out = (String::new(), String::new(), 0);
            for l in &smp.label {
                match s(l.key).as_str() {
                    "service_name" => out.0 = s(l.str),
                    "container_id" => out.1 = s(l.str),
                    "pid" => out.2 = l.num,
                    _ => {}
                }
            }
            out
        })
        .collect()
}

/// User nobody runs a copy of a CPU-bound program named `nginx.service`
/// outside any unit, and, from a cgroup subtree delegated to it as systemd
/// delegates `user@UID.service`, makes `app.slice/docker-<id>.scope` after
/// a real container's id (ids are readable in `/proc/PID/cgroup`) and
/// moves its own burner there. Before, the first was counted as
/// `service=nginx.service` and the second as the container, in /folded and
/// in pushes. Now: the renamed program is `process:nginx.service`, the
/// forger is its manager's unit and no container, and the container's
/// pulled and pushed samples are the container's own process's alone.
#[test]
fn another_user_cannot_claim_a_service_or_a_container() {
    require_root();
    let bin = build_c_debian("cpu_70_30");
    let dir = fresh_dir("forged-labels");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let renamed = dir.join("nginx.service");
    std::fs::copy(&bin, &renamed).unwrap();
    let go = dir.join("go");

    let mut cg = Cgroups::new("forge");
    let id: String = format!(
        "{:016x}",
        0xc0de_0000_0000_0000u64 | u64::from(std::process::id())
    )
    .repeat(4);
    let victim_cg = cg.make(&format!("docker-{id}.scope"));
    // The user's manager's cgroup, delegated as systemd does: the
    // directory and its control files belong to the user.
    cg.make("user-65534.slice");
    let manager = cg.make("user-65534.slice/user@65534.service");
    for f in [
        "",
        "cgroup.procs",
        "cgroup.threads",
        "cgroup.subtree_control",
    ] {
        std::os::unix::fs::chown(manager.join(f), Some(65534), Some(65534)).unwrap();
    }
    let forged = manager.join(format!("app.slice/docker-{id}.scope"));

    let victim = Workload::spawn(Command::new(&bin).arg("60"));
    cg.enter(victim.pid(), &victim_cg);
    let impostor = Workload::spawn(run_as(NOBODY, &renamed).arg("60"));
    // The forger waits to be in its manager's cgroup, then does the rest
    // itself, as the user.
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; mkdir -p {f} && echo $$ > {f}/cgroup.procs && exec {bin} 60",
        go = go.display(),
        f = forged.display(),
        bin = bin.display()
    );
    let forger = Workload::spawn(run_as(NOBODY, Path::new("/bin/sh")).args(["-c", &script]));
    cg.enter(forger.pid(), &manager);
    std::fs::write(&go, "").unwrap();
    cg.made.push(forged.parent().unwrap().to_owned());
    cg.made.push(forged.clone());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = std::fs::read_to_string(forged.join("cgroup.procs")).unwrap_or_default();
        if procs.lines().any(|l| l == forger.pid().to_string()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "user nobody could not move itself into {} (a delegated subtree)",
            forged.display()
        );
        wait(50);
    }
    let moved = emberd::query::unix_now();

    let rx = Receiver::start(&dir.join("rx"), None);
    let d = Daemon::start(
        &[
            "--pyroscope-url",
            &rx.url(),
            "--otlp-endpoint",
            &rx.url(),
            "--push-interval-seconds",
            "4",
        ],
        &[],
    );
    // Pushes of intervals that start once the labels were read (at most
    // 3 s old) and hold samples of all three.
    let settled = moved + 4;
    let (ip, fp, vp) = (
        i64::from(impostor.pid()),
        i64::from(forger.pid()),
        i64::from(victim.pid()),
    );
    let deadline = Instant::now() + Duration::from_secs(40);
    let (pyro, otlp) = loop {
        let records = rx.records();
        let pyro: Vec<(String, String, i64)> = records
            .iter()
            .filter(|r| r["kind"] == "pyroscope" && r["status"] == 200)
            .filter_map(|r| {
                let series = r["series"].as_array()?;
                let cpu = series
                    .iter()
                    .find(|s| s["labels"]["__name__"] == "process_cpu")?;
                let p = decode_pprof(&std::fs::read(cpu["files"][0].as_str()?).ok()?);
                (p.time_nanos as u64 / 1_000_000_000 >= settled).then(|| pushed_labels(&p))
            })
            .flatten()
            .collect();
        let otlp: Vec<Value> = records
            .into_iter()
            .filter(|r| r["kind"] == "otlp" && r["status"] == 200)
            .collect();
        let seen = |pid| pyro.iter().any(|(_, _, p)| *p == pid);
        if seen(ip) && seen(fp) && seen(vp) && !otlp.is_empty() {
            break (pyro, otlp);
        }
        assert!(
            Instant::now() < deadline,
            "no Pyroscope push after the move with samples of all three processes within 40 s"
        );
        wait(500);
    };

    // Pyroscope: the renamed program is a process, the forger no container.
    for (service, container, pid) in &pyro {
        assert_ne!(
            service, "nginx.service",
            "pid {pid} pushed as nginx.service"
        );
        if *pid == ip {
            assert_eq!(service, "process:nginx.service");
        }
        if *pid == fp {
            assert!(
                container.is_empty() && service == "process:cpu_70_30",
                "the forger was pushed as service {service:?}, container {container:?}"
            );
        }
        if container == &id {
            assert_eq!(*pid, vp, "pid {pid} pushed as the container");
        }
    }
    // OTLP: no resource named nginx.service; the container's resource
    // holds its own process's samples only.
    let mut container_samples = 0;
    for rec in &otlp {
        for res in rec["resources"].as_array().into_iter().flatten() {
            let attrs = &res["attributes"];
            assert_ne!(attrs["service.name"], "nginx.service", "{attrs}");
            if attrs["container.id"] != id.as_str() {
                continue;
            }
            for p in res["profiles"].as_array().into_iter().flatten() {
                for smp in p["samples"].as_array().into_iter().flatten() {
                    assert_eq!(smp["attrs"]["process.pid"], vp, "{smp}");
                    container_samples += 1;
                }
            }
        }
    }
    assert!(
        container_samples > 0,
        "no OTLP samples of the real container"
    );

    // Pulled: nothing under the forged names.
    let r = d.get("/folded?seconds=5&service=nginx.service");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        parse_folded(&r.text()).is_empty(),
        "samples counted under service=nginx.service:\n{}",
        r.text()
    );
    let r = d.get("/folded?seconds=5&service=process:nginx.service&group=pid");
    let text = r.text();
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("nginx.service-{ip};"))),
        "the renamed program should be under process:nginx.service:\n{text}"
    );
    let r = d.get(&format!(
        "/folded?seconds=5&container={}&group=pid",
        &id[..12]
    ));
    let text = r.text();
    let roots: std::collections::BTreeSet<&str> =
        text.lines().filter_map(|l| l.split(';').next()).collect();
    assert!(
        roots == [format!("cpu_70_30-{vp}").as_str()].into(),
        "the container's samples should be its own process's only: {roots:?}"
    );
    let r = d.get(&format!(
        "/folded?seconds=5&unit=user@65534.service/docker-{id}.scope&group=pid"
    ));
    assert!(
        r.text()
            .lines()
            .any(|l| l.starts_with(&format!("cpu_70_30-{fp};"))),
        "the forger should be under its manager's unit:\n{}",
        r.text()
    );
    drop((victim, impostor, forger));
}
