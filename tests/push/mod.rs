//! Pushes to Pyroscope and OTLP against a loopback receiver that decodes
//! them with the real schemas (`receiver.py`), and the service and
//! container labels of processes moved into cgroups named as systemd and
//! Docker name theirs.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use serde_json::Value;

use crate::common::{
    CpuMeter, Daemon, Eavesdropper, Workload, build_c_debian, go_pprof, metric, parse_folded,
    require_root, scratch, unix_now, wait,
};
use emberd::render::pprof::proto;

mod labels;

/// A cgroup v2 subtree for one test, removed (its processes moved back to
/// the root) on drop.
struct Cgroups {
    root: PathBuf,
    slice: PathBuf,
    made: Vec<PathBuf>,
}

impl Cgroups {
    fn new(test: &str) -> Self {
        let mounts =
            std::fs::read_to_string("/proc/self/mounts").expect("reading /proc/self/mounts");
        let root = mounts
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
            })
            .expect("this test moves processes between cgroups: it needs a cgroup2 mount (/sys/fs/cgroup or /sys/fs/cgroup/unified)");
        let slice = root.join(format!("emberd-test-{test}-{}.slice", std::process::id()));
        std::fs::create_dir_all(&slice)
            .unwrap_or_else(|e| panic!("making the cgroup {}: {e}", slice.display()));
        Cgroups {
            root,
            slice,
            made: Vec::new(),
        }
    }

    /// A cgroup named `name` under the test's slice.
    fn make(&mut self, name: &str) -> PathBuf {
        let p = self.slice.join(name);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("making {}: {e}", p.display()));
        self.made.push(p.clone());
        p
    }

    /// Moves `pid` into `cgroup`, as systemd and container runtimes do.
    fn enter(&self, pid: u32, cgroup: &Path) {
        std::fs::write(cgroup.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", cgroup.display()));
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in self.made.iter().chain([&self.slice]) {
            if let Ok(pids) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in pids.lines() {
                    let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
                }
            }
        }
        for dir in self.made.iter().rev().chain([&self.slice]) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The loopback receiver (`tests/push/receiver.py`) under the tests' venv.
struct Receiver {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Receiver {
    fn start(dir: &Path, port: Option<u16>) -> Receiver {
        std::fs::create_dir_all(dir).unwrap();
        let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pyvenv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: ./scripts/setup makes the venv with opentelemetry-proto",
            python.display()
        );
        let mut child = Command::new(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/push/receiver.py"))
            .arg(dir)
            .args(port.map(|p| p.to_string()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the receiver");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("the receiver did not print its port (got {line:?}); is opentelemetry-proto installed in target/pyvenv?")
        });
        Receiver {
            child,
            port,
            dir: dir.to_owned(),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn set_mode(&self, mode: &str) {
        std::fs::write(self.dir.join("mode"), mode).unwrap();
    }

    /// The pushes recorded so far: the complete lines only (the receiver
    /// may be writing one, tens of KiB, as they are read: a fresh clone's
    /// run once read half of one).
    fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.join("pushes.jsonl")).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = scratch().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn decode_pprof(gz: &[u8]) -> proto::Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .expect("a gzipped pprof");
    proto::Profile::decode(raw.as_slice()).expect("a pprof profile.proto")
}

/// A pprof sample's string labels.
type Labels = Vec<(String, String)>;

/// Per sample of `p`: (its string labels, its function names root first,
/// its first value).
fn pprof_samples(p: &proto::Profile) -> Vec<(Labels, Vec<String>, i64)> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let func = |id: u64| {
        p.function
            .iter()
            .find(|f| f.id == id)
            .map(|f| s(f.name))
            .unwrap_or_default()
    };
    p.sample
        .iter()
        .map(|smp| {
            let labels = smp
                .label
                .iter()
                .filter(|l| l.str != 0)
                .map(|l| (s(l.key), s(l.str)))
                .collect();
            let mut frames: Vec<String> = smp
                .location_id
                .iter()
                .flat_map(|id| {
                    let loc = p.location.iter().find(|l| l.id == *id).unwrap();
                    loc.line
                        .iter()
                        .map(|l| func(l.function_id))
                        .collect::<Vec<_>>()
                })
                .collect();
            frames.reverse();
            (labels, frames, smp.value[0])
        })
        .collect()
}

fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Samples of `/folded?group=service` over `[from, to)` under `service`
/// whose stack holds `func`.
fn folded_total(d: &Daemon, from: u64, to: u64, service: &str, func: &str) -> u64 {
    let r = d.get(&format!("/folded?from={from}&to={to}&group=service"));
    assert_eq!(r.status, 200, "{}", r.text());
    let p = parse_folded(&r.text());
    p.iter()
        .filter(|(stack, _)| {
            let frames: Vec<&str> = stack.frames().collect();
            frames.first() == Some(&service) && frames.contains(&func)
        })
        .map(|(_, v)| v)
        .sum()
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn within(a: f64, b: f64, frac: f64) -> bool {
    (a - b).abs() <= frac * b.max(1.0)
}

#[test]
fn pushes_carry_each_interval_with_service_and_container_labels() {
    require_root();
    let bin = build_c_debian("cpu_70_30");
    let mut cg = Cgroups::new("labels");
    let id: String = format!(
        "{:016x}",
        0x5eed_0000_0000_0000u64 | u64::from(std::process::id())
    )
    .repeat(4);
    let web_cg = cg.make("emberd-web.service");
    let box_cg = cg.make(&format!("docker-{id}.scope"));
    let web = Workload::spawn(Command::new(&bin).arg("60"));
    let boxed = Workload::spawn(Command::new(&bin).arg("60"));
    let dir = fresh_dir("push-labels");
    let rx = Receiver::start(&dir, None);
    let token = dir.join("token");
    std::fs::write(&token, "push-secret-token-0123\n").unwrap();
    let d = Daemon::start(
        &[
            "--pyroscope-url",
            &rx.url(),
            "--otlp-endpoint",
            &rx.url(),
            "--push-interval-seconds",
            "4",
            "--pyroscope-bearer-token-file",
            token.to_str().unwrap(),
            "--pyroscope-header",
            "X-Scope-OrgID: team-a",
            "--otlp-header",
            "X-Scope-OrgID: team-b",
        ],
        &[],
    );
    // Moved while the daemon runs: their labels follow within seconds.
    wait(2000);
    cg.enter(web.pid(), &web_cg);
    cg.enter(boxed.pid(), &box_cg);
    let moved = emberd::query::unix_now();
    // Labels are re-read every 3 s: windows from 4 s after the move carry them.
    let settled = moved + 4;
    let short = &id[..12];
    let host = hostname();

    // A Pyroscope push of an interval after the move.
    let deadline = Instant::now() + Duration::from_secs(40);
    let (rec, profile) = loop {
        let found = rx.records().into_iter().find_map(|r| {
            if r["kind"] != "pyroscope" || r["status"] != 200 {
                return None;
            }
            let series = r["series"].as_array()?;
            let cpu = series
                .iter()
                .find(|s| s["labels"]["__name__"] == "process_cpu")?;
            let file = cpu["files"][0].as_str()?;
            let p = decode_pprof(&std::fs::read(file).ok()?);
            (p.time_nanos as u64 / 1_000_000_000 >= settled).then(|| (r.clone(), p))
        });
        if let Some(f) = found {
            break f;
        }
        assert!(
            Instant::now() < deadline,
            "no Pyroscope push of an interval after the move within 40 s: {:?}",
            rx.records()
        );
        wait(500);
    };
    assert_eq!(rec["authorization"], "Bearer push-secret-token-0123");
    assert_eq!(rec["org"], "team-a");
    assert_eq!(rec["content_type"], "application/proto");
    let cpu = rec["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["labels"]["__name__"] == "process_cpu")
        .unwrap();
    assert_eq!(cpu["labels"]["service_name"], "emberd");
    assert_eq!(cpu["labels"]["host"], host.as_str());
    let s = |i: i64| profile.string_table[i as usize].as_str();
    assert_eq!(
        (
            s(profile.sample_type[0].r#type),
            s(profile.sample_type[0].unit)
        ),
        ("samples", "count")
    );
    let pt = profile.period_type.as_ref().unwrap();
    assert_eq!((s(pt.r#type), s(pt.unit)), ("cpu", "nanoseconds"));
    let from = profile.time_nanos as u64 / 1_000_000_000;
    let to = from + profile.duration_nanos as u64 / 1_000_000_000;
    let samples = pprof_samples(&profile);
    let pushed = |service: &str, func: &str| -> u64 {
        samples
            .iter()
            .filter(|(l, f, _)| {
                label(l, "service_name") == Some(service) && f.iter().any(|x| x == func)
            })
            .map(|(_, _, v)| *v as u64)
            .sum()
    };
    for (service, who) in [("emberd-web.service", "web"), (short, "container")] {
        let (a, b) = (pushed(service, "hot_a"), pushed(service, "hot_b"));
        let (fa, fb) = (
            folded_total(&d, from, to, service, "hot_a"),
            folded_total(&d, from, to, service, "hot_b"),
        );
        eprintln!(
            "pyroscope [{from}, {to}) {who} {service}: pushed hot_a {a} hot_b {b}; /folded {fa} {fb}"
        );
        assert!(
            fa > 50,
            "/folded has {fa} samples of {service}'s hot_a in [{from}, {to})"
        );
        assert!(
            within(a as f64, fa as f64, 0.10) && within(b as f64, fb as f64, 0.10),
            "{who}: pushed {a}/{b}, /folded {fa}/{fb}"
        );
        assert!(a > b, "{who}: hot_a ({a}) should outweigh hot_b ({b})");
    }
    // Unit and container ids ride along as labels.
    assert!(samples.iter().any(|(l, f, _)| {
        label(l, "unit") == Some("emberd-web.service") && f.iter().any(|x| x == "hot_a")
    }));
    assert!(samples.iter().any(|(l, f, _)| {
        label(l, "container_id") == Some(id.as_str())
            && label(l, "service_name") == Some(short)
            && f.iter().any(|x| x == "hot_a")
    }));
    // No per-process string label: it would make a series per process name.
    assert!(samples.iter().all(|(l, _, _)| label(l, "comm").is_none()));
    // go tool pprof reads the pushed profile.
    let file = cpu["files"][0].as_str().unwrap();
    let top = go_pprof(&["-top", file]);
    assert!(top.contains("hot_a"), "{top}");

    // An OTLP push of an interval after the move.
    let deadline = Instant::now() + Duration::from_secs(20);
    let otlp = loop {
        let found = rx.records().into_iter().find(|r| {
            r["kind"] == "otlp"
                && r["status"] == 200
                && r["resources"].as_array().is_some_and(|rs| {
                    rs.iter().any(|res| {
                        res["profiles"].as_array().is_some_and(|ps| {
                            ps.iter().any(|p| {
                                p["time_unix_nano"].as_u64().unwrap_or(0) / 1_000_000_000 >= settled
                            })
                        })
                    })
                })
        });
        if let Some(f) = found {
            break f;
        }
        assert!(Instant::now() < deadline, "no OTLP push after the move");
        wait(500);
    };
    assert_eq!(otlp["org"], "team-b");
    assert_eq!(otlp["content_encoding"], "gzip");
    let resources = otlp["resources"].as_array().unwrap();
    let resource = |service: &str| {
        resources
            .iter()
            .find(|r| r["attributes"]["service.name"] == service)
            .unwrap_or_else(|| panic!("no OTLP resource for {service}: {resources:?}"))
    };
    let web_res = resource("emberd-web.service");
    assert!(web_res["attributes"].get("container.id").is_none());
    let box_res = resource(short);
    assert_eq!(box_res["attributes"]["container.id"], id.as_str());
    for (res, pid, service) in [
        (web_res, web.pid(), "emberd-web.service"),
        (box_res, boxed.pid(), short),
    ] {
        assert_eq!(res["attributes"]["host.name"], host.as_str());
        let cpu = res["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "samples")
            .expect("a CPU profile");
        assert_eq!(cpu["unit"], "count");
        assert_eq!(cpu["period_type"], "cpu");
        assert_eq!(cpu["period"], 1_000_000_000 / 99);
        let from = cpu["time_unix_nano"].as_u64().unwrap() / 1_000_000_000;
        let to = from + cpu["duration_nano"].as_u64().unwrap() / 1_000_000_000;
        let mut sum = 0;
        for smp in cpu["samples"].as_array().unwrap() {
            let frames: Vec<&str> = smp["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            if !frames.contains(&"hot_a") {
                continue;
            }
            sum += smp["values"][0].as_u64().unwrap();
            let a = &smp["attrs"];
            assert_eq!(a["process.pid"], pid, "{a}");
            assert_eq!(a["process.executable.name"], "cpu_70_30");
            assert_eq!(a["process.executable.path"], bin.to_str().unwrap());
            assert_eq!(a["thread.name"], "cpu_70_30");
        }
        let folded = folded_total(&d, from, to, service, "hot_a");
        eprintln!("otlp [{from}, {to}) {service}: pushed hot_a {sum}, /folded {folded}");
        assert!(folded > 50);
        assert!(
            within(sum as f64, folded as f64, 0.10),
            "{service}: OTLP {sum} vs /folded {folded}"
        );
    }

    // Pulled profiles and every route's filters carry the same labels.
    let r = d.get(&format!(
        "/debug/pprof/profile?seconds=3&container={}",
        &id[..8]
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    let pulled = pprof_samples(&decode_pprof(&r.body));
    assert!(!pulled.is_empty());
    assert!(
        pulled
            .iter()
            .all(|(l, _, _)| label(l, "container_id") == Some(id.as_str()))
    );
    assert!(
        pulled
            .iter()
            .any(|(_, f, _)| f.iter().any(|x| x == "hot_a"))
    );
    let r = d.get("/folded?seconds=3&unit=emberd-web.service&group=pid");
    assert_eq!(r.status, 200);
    let lines = parse_folded(&r.text());
    assert!(!lines.is_empty());
    let web_root = format!("cpu_70_30-{}", web.pid());
    assert!(
        lines
            .iter()
            .all(|(s, _)| s.frames().next() == Some(web_root.as_str())),
        "unit= kept another process: {}",
        r.text()
    );
    let r = d.get("/folded?seconds=3&group=service");
    let text = r.text();
    assert!(
        text.lines().any(|l| l.starts_with("emberd-web.service;")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(&format!("{short};"))),
        "{text}"
    );
    let r = d.get("/flamegraph.svg?seconds=3&service=emberd-web.service");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("hot_a"));
    let r = d.get("/folded?container=not-hex");
    assert_eq!(r.status, 400);
    assert!(r.text().contains("\"container\""), "{}", r.text());

    // The web page filters and groups the same way.
    let b = crate::common::browser::Browser::start();
    let origin = format!("http://127.0.0.1:{}", d.port);
    b.goto(&format!(
        "{origin}/#event=cpu&range=300&group=service&unit=emberd-web.service"
    ));
    crate::web::page_loaded(&b, &origin, &scratch().join("push-labels-page.png"));
    let controls = b.eval(
        "return [document.getElementById('group').value, document.getElementById('unit').value];",
    );
    assert_eq!(
        controls,
        serde_json::json!(["service", "emberd-web.service"])
    );
    let t = b.eval("return window.emberd.frameTotals();");
    assert!(t["emberd-web.service"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    assert!(t["hot_a"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    assert!(t.get(short).is_none(), "unit= showed the container: {t}");
    // The container's id, typed into its field, as a user would.
    b.eval(&format!(
        "var u = document.getElementById('unit'); u.value = ''; u.dispatchEvent(new Event('change'));
         var c = document.getElementById('container'); c.value = '{}'; c.dispatchEvent(new Event('change'));
         return true;",
        &id[..8]
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = b.eval("return window.emberd.frameTotals();");
        if t.get(short).is_some() && t.get("emberd-web.service").is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page did not filter by container: {t}"
        );
        wait(200);
    }
    let hash = b.eval("return location.hash;");
    assert!(
        hash.as_str()
            .unwrap()
            .contains(&format!("container={}", &id[..8])),
        "{hash}"
    );

    let m = d.get("/metrics").text();
    assert!(
        metric(
            &m,
            "emberd_push_total{destination=\"pyroscope\",result=\"ok\"}"
        ) >= 2.0,
        "{m}"
    );
    assert!(metric(&m, "emberd_push_bytes_total{destination=\"otlp\"}") > 0.0);
    assert_eq!(
        metric(
            &m,
            "emberd_push_dropped_intervals_total{destination=\"pyroscope\",result=\"queue_full\"}"
        ),
        0.0
    );
}

/// Samples of the workload in the 5 s ending 2 s ago (so that every drain
/// of them is in), the CPU seconds it ran in those 5 s, and how long
/// `/folded` took.
fn sampling_and_api(d: &Daemon, pid: u32, meter: &CpuMeter) -> (u64, f64, Duration) {
    let to = unix_now() - 2;
    let from = to - 5;
    let t = Instant::now();
    let r = d.get(&format!("/folded?from={from}&to={to}&pid={pid}"));
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    let ran = meter.between(from as f64, to as f64);
    (parse_folded(&r.text()).total(), ran, took)
}

#[test]
fn a_down_slow_or_failing_receiver_costs_only_its_bounded_queue() {
    require_root();
    let bin = build_c_debian("cpu_70_30");
    let busy = Workload::spawn(Command::new(&bin).arg("400"));
    let meter = CpuMeter::start(busy.pid());
    let dir = fresh_dir("push-failing");
    let mut rx = Receiver::start(&dir, None);
    let port = rx.port;
    let d = Daemon::start(
        &[
            "--pyroscope-url",
            &rx.url(),
            "--otlp-endpoint",
            &rx.url(),
            "--push-interval-seconds",
            "2",
            "--push-queue-intervals",
            "2",
            "--push-timeout-seconds",
            "5",
        ],
        &[],
    );
    wait(7000);
    let delivered = |rx: &Receiver, mode: &str| {
        rx.records()
            .iter()
            .filter(|r| r["mode"] == mode && r["status"] == 200 && r.get("error").is_none())
            .count()
    };
    assert!(delivered(&rx, "ok") >= 2, "{:?}", rx.records());
    let queued = |d: &Daemon| -> f64 {
        let m = d.get("/metrics").text();
        ["pyroscope", "otlp"]
            .iter()
            .map(|dest| {
                metric(
                    &m,
                    &format!("emberd_push_queued_intervals{{destination=\"{dest}\"}}"),
                )
            })
            .fold(0.0, f64::max)
    };
    let check = |d: &Daemon, phase: &str| {
        // What the busy process ran at 99 Hz: about 495 samples when it has
        // a CPU to itself; this test runs beside others (a build, light
        // tests), so it is held to what it got.
        let (n, ran, took) = sampling_and_api(d, busy.pid(), &meter);
        let q = queued(d);
        let expected = ran * 99.0;
        eprintln!(
            "{phase}: {n} samples of the busy process in 5 s, in which it ran {ran:.2} s of CPU ({expected:.0} at 99 Hz); /folded in {took:?}; queue {q}"
        );
        assert!(
            ran >= 1.0,
            "{phase}: the busy process ran only {ran:.2} s of CPU in 5 s: too little to tell whether sampling keeps up"
        );
        assert!(
            n as f64 >= expected * 0.85,
            "{phase}: sampling fell to {n} samples in 5 s, while the busy process ran {ran:.2} s of CPU ({expected:.0} samples at 99 Hz, 85% asked)"
        );
        assert!(
            took < Duration::from_secs(2),
            "{phase}: /folded took {took:?}"
        );
        assert!(q <= 2.0, "{phase}: {q} intervals queued, the bound is 2");
    };
    check(&d, "receiver up");

    let ok_before = delivered(&rx, "ok");
    // Down: nothing listens on the port.
    rx.stop();
    for _ in 0..2 {
        wait(5000);
        check(&d, "receiver down");
    }
    let m = d.get("/metrics").text();
    let failed = metric(
        &m,
        "emberd_push_total{destination=\"pyroscope\",result=\"failed\"}",
    );
    let dropped = metric(
        &m,
        "emberd_push_dropped_intervals_total{destination=\"pyroscope\",result=\"queue_full\"}",
    );
    eprintln!("after 10 s down: {failed} failed pushes, {dropped} intervals dropped");
    assert!(failed >= 2.0, "{m}");
    // 5 intervals in 10 s, 2 kept (the one being pushed among them): 3
    // dropped, 2 asked.
    assert!(dropped >= 2.0, "{m}");

    // Back, but answering 500: the 10 s down left each destination's
    // backoff at 8 or 16 s (tries at t0 in (0, 2] s, then t0+1, +3, +7,
    // +15, +31, +61), so each tries again within about 30 s, twice in 45.
    // Three 500s are asked for, by 45 s.
    std::fs::write(dir.join("mode"), "500").unwrap();
    let rx = Receiver::start(&dir, Some(port));
    rx.set_mode("500");
    // (pyroscope's, otlp's), by the path pushed to (a push answered 500
    // is not decoded: the receiver names its kind only for a 200)
    let failing = |rx: &Receiver| {
        let recs = rx.records();
        let of = |path: &str| {
            recs.iter()
                .filter(|r| r["mode"] == "500" && r["status"] == 500 && r["path"] == path)
                .count()
        };
        (
            of("/push.v1.PusherService/Push"),
            of("/v1development/profiles"),
        )
    };
    let answered_500 = Instant::now();
    let enough = |(p, o): (usize, usize)| p + o >= 3 && p >= 1 && o >= 1;
    while !enough(failing(&rx)) && answered_500.elapsed() < Duration::from_secs(45) {
        wait(5000);
        check(&d, "receiver answers 500");
    }
    let (p, o) = failing(&rx);
    assert!(
        enough((p, o)),
        "the daemon did not retry against the 500s ({p} pyroscope and {o} OTLP pushes answered 500 in {:?}; three, one of each, asked)",
        answered_500.elapsed()
    );
    assert_eq!(delivered(&rx, "ok"), ok_before);

    // Slow: every answer takes 30 s, past the 5 s deadline. Each
    // destination is still backing off from the 500s (its next try up to
    // 30 s away): sampling and `/folded` are checked in 5 s windows until
    // each destination has had a push hang to its deadline (counted
    // failed when it gives up), at most 60 s.
    let failed_pushes = |d: &Daemon| -> [f64; 2] {
        let m = d.get("/metrics").text();
        ["pyroscope", "otlp"].map(|dest| {
            metric(
                &m,
                &format!("emberd_push_total{{destination=\"{dest}\",result=\"failed\"}}"),
            )
        })
    };
    let m = d.get("/metrics").text();
    let dropped = metric(
        &m,
        "emberd_push_dropped_intervals_total{destination=\"pyroscope\",result=\"queue_full\"}",
    );
    let failed_before = failed_pushes(&d);
    rx.set_mode("slow");
    let slow = Instant::now();
    loop {
        wait(5000);
        check(&d, "receiver slow");
        let now = failed_pushes(&d);
        if now[0] > failed_before[0] && now[1] > failed_before[1] {
            break;
        }
        assert!(
            slow.elapsed() < Duration::from_secs(60),
            "no push of each destination hung to its deadline in 60 s: failed pushes {failed_before:?} then {now:?}"
        );
    }
    let m = d.get("/metrics").text();
    let dropped_later = metric(
        &m,
        "emberd_push_dropped_intervals_total{destination=\"pyroscope\",result=\"queue_full\"}",
    );
    assert!(
        dropped_later > dropped,
        "no interval dropped while pushes hung (queue bound 2): {dropped} then {dropped_later}\n{m}"
    );

    // Well again: delivery resumes with what the queue kept.
    rx.set_mode("ok");
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered(&rx, "ok") < ok_before + 4 {
        assert!(
            Instant::now() < deadline,
            "delivery did not resume within 60 s: {:?}",
            rx.records().iter().rev().take(5).collect::<Vec<_>>()
        );
        check(&d, "receiver well again");
        wait(2000);
    }
    let ok = rx
        .records()
        .into_iter()
        .filter(|r| r["mode"] == "ok" && r["status"] == 200)
        .skip(ok_before)
        .collect::<Vec<_>>();
    assert!(ok.iter().any(|r| r["kind"] == "pyroscope"));
    assert!(ok.iter().any(|r| r["kind"] == "otlp"));
    let m = d.get("/metrics").text();
    assert!(
        metric(
            &m,
            "emberd_push_last_success_timestamp_seconds{destination=\"otlp\"}"
        ) > 0.0
    );
    drop(busy);
}

#[test]
fn check_tries_each_destination_once() {
    require_root();
    let dir = fresh_dir("push-check");
    let rx = Receiver::start(&dir, None);
    let closed = crate::common::free_port();
    let config = dir.join("emberd.toml");
    std::fs::write(
        &config,
        format!(
            "pyroscope_url = \"{}\"\notlp_endpoint = \"http://127.0.0.1:{closed}\"\n",
            rx.url()
        ),
    )
    .unwrap();
    let out = crate::common::emberd()
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} line in: {text}"))
            .to_owned()
    };
    let pyro = line("push to pyroscope");
    assert!(pyro.starts_with("[ok"), "{pyro}");
    assert!(pyro.contains("answered 200"), "{pyro}");
    let otlp = line("push to otlp");
    assert!(otlp.starts_with("[limited]"), "{otlp}");
    assert!(otlp.contains("cannot connect"), "{otlp}");
    // The receiver saw exactly one (empty) push.
    let recs = rx.records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["kind"], "pyroscope");
    assert_eq!(recs[0]["series"].as_array().unwrap().len(), 0);
    // A bad URL is named, not tried.
    std::fs::write(&config, "otlp_endpoint = \"https://collector:4318\"\n").unwrap();
    let out = crate::common::emberd()
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("plain HTTP only"), "{text}");
}

/// Established connections from anyone to `port` (`/proc/net/tcp`).
fn connections_to(port: u16) -> usize {
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("reading /proc/net/tcp");
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "01"
                && f[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

#[test]
fn a_receiver_that_never_answers_holds_no_connections() {
    require_root();
    // Accepts (the kernel does, into the backlog) and never reads or closes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let d = Daemon::start(
        &[
            "--otlp-endpoint",
            &url,
            "--push-interval-seconds",
            "1",
            "--push-timeout-seconds",
            "1",
        ],
        &[],
    );
    // Attempts at about 3, 5, 7, 10 and 15 s (backoff 1, 2, 4, 8 s).
    wait(20_000);
    let m = d.get("/metrics").text();
    let failed = metric(
        &m,
        "emberd_push_total{destination=\"otlp\",result=\"failed\"}",
    );
    let open = connections_to(port);
    eprintln!("{failed} pushes timed out; {open} connections still open to the silent receiver");
    assert!(failed >= 3.0, "{m}");
    assert!(
        open <= 1,
        "{open} connections left open by {failed} abandoned pushes"
    );
    drop(silent);
}

/// Issue 41: while the collector is down, a local user (`nobody`) binds its
/// loopback port. The daemon connects, finds the far end owned by nobody,
/// and sends nothing: no `Authorization`, no profile, not a byte. It counts
/// each refusal (`result="refused_listener"`, not `failed`) and logs the
/// streak once, saying who holds the port; `emberd check` says it too. A
/// receiver run by root on the same port afterwards gets the pushes, with
/// their credentials, and the queued intervals are not lost.
#[test]
fn a_push_port_held_by_another_user_gets_no_credentials_or_profiles() {
    require_root();
    let bin = build_c_debian("cpu_70_30");
    let _busy = Workload::spawn(Command::new(&bin).arg("60"));
    let dir = fresh_dir("push-eavesdropped");
    let token = dir.join("push-token");
    std::fs::write(&token, "push-secret-token-0123\n").unwrap();
    let spy = Eavesdropper::start(0);
    let port = spy.port;
    let url = format!("http://127.0.0.1:{port}");
    let mut d = Daemon::start(
        &[
            "--pyroscope-url",
            &url,
            "--pyroscope-bearer-token-file",
            token.to_str().unwrap(),
            "--push-interval-seconds",
            "1",
        ],
        &[],
    );
    // Pushes at about 3 s, then retries after 1, 2, 4 s.
    wait(10_000);
    let m = d.get("/metrics").text();
    let refused = metric(
        &m,
        "emberd_push_total{destination=\"pyroscope\",result=\"refused_listener\"}",
    );
    let failed = metric(
        &m,
        "emberd_push_total{destination=\"pyroscope\",result=\"failed\"}",
    );
    // emberd check, against the same port, refuses too and says why.
    let config = dir.join("emberd.toml");
    std::fs::write(&config, format!("pyroscope_url = \"{url}\"\n")).unwrap();
    let out = crate::common::emberd()
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let check = String::from_utf8_lossy(&out.stdout).into_owned();
    let heard = spy.stop();
    let connections = heard.matches("[connection]").count();
    eprintln!(
        "{refused} pushes refused, {failed} failed; nobody's server saw {connections} connections and {} bytes",
        heard.len() - connections * "\n[connection]\n".len()
    );
    assert!(
        refused >= 2.0 && failed == 0.0,
        "refusals are counted as such: {refused} refused, {failed} failed"
    );
    assert!(
        connections >= 2,
        "the daemon did connect to nobody's port (and then sent nothing): {heard:?}"
    );
    assert!(
        heard.replace("\n[connection]\n", "").is_empty(),
        "nobody's server received bytes (credentials or a profile): {heard:?}"
    );
    let line = check
        .lines()
        .find(|l| l.contains("push to pyroscope"))
        .unwrap_or_else(|| panic!("no push line in: {check}"));
    assert!(
        line.starts_with("[limited]")
            && line.contains("nobody")
            && line.contains("pyroscope_listener_user"),
        "emberd check says who holds the port: {line}"
    );

    // The collector is back, run by root, on the same port.
    let rx = Receiver::start(&dir.join("rx"), Some(port));
    let t0 = Instant::now();
    loop {
        let got = rx
            .records()
            .iter()
            .filter(|r| r["status"] == 200 && r.get("error").is_none())
            .count();
        if got >= 2 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "no pushes reached root's receiver: {:?}",
            rx.records()
        );
        wait(500);
    }
    let recs = rx.records();
    assert_eq!(recs[0]["authorization"], "Bearer push-secret-token-0123");
    assert!(
        metric(
            &d.get("/metrics").text(),
            "emberd_push_total{destination=\"pyroscope\",result=\"ok\"}"
        ) >= 2.0
    );
    d.terminate();
    let _ = d.child.wait();
    let mut log = String::new();
    d.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused to push"))
        .collect();
    assert_eq!(
        refusals.len(),
        1,
        "one log line for the streak of refusals: {log}"
    );
    assert!(
        refusals[0].contains("nobody") && refusals[0].contains("nothing was sent"),
        "{}",
        refusals[0]
    );
    assert!(log.contains("works again"), "{log}");
}
