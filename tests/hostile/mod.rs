use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

mod many_uids;
mod shares;

/// What a local user can put at the perf-map path of someone else's process.
#[derive(Debug, Clone, Copy)]
enum Trap {
    /// `mkfifo`: opening it for reading used to block the collector for good.
    Fifo,
    /// A symlink to `/dev/zero`: endless bytes.
    DevZero,
    /// A sparse file of 100 GiB.
    Sparse,
    /// A real perf map of 200 MB, over the 64 MiB cap.
    Large,
}

impl Trap {
    fn lay(self, path: &str) {
        let _ = std::fs::remove_file(path);
        match self {
            Trap::Fifo => {
                nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644))
                    .expect("mkfifo")
            }
            Trap::DevZero => std::os::unix::fs::symlink("/dev/zero", path).expect("symlink"),
            Trap::Sparse => std::fs::File::create(path)
                .and_then(|f| f.set_len(100 << 30))
                .expect("sparse file"),
            Trap::Large => {
                let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("perf map"));
                let mut i: u64 = 0;
                let mut written = 0usize;
                while written < 200 << 20 {
                    let line = format!(
                        "{:x} 10 LazyCompile:*emberd_fake_{i}\n",
                        0x10000000 + i * 16
                    );
                    f.write_all(line.as_bytes()).unwrap();
                    written += line.len();
                    i += 1;
                }
                f.flush().unwrap();
            }
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Trap::Fifo | Trap::DevZero => "not_regular_file",
            Trap::Sparse | Trap::Large => "too_large",
        }
    }
}

/// A FIFO, a symlink to /dev/zero, a 100 GiB sparse file or a 200 MB map at
/// the perf-map path of a live node process (JIT code in anonymous memory,
/// so emberd, with `--node false`, looks for its map): the daemon keeps sampling, counts the
/// refusal by reason, still names the process's native frames, and SIGTERM
/// ends it within 5 s.
#[test]
fn hostile_perf_maps_do_not_stall_sampling() {
    require_root();
    for trap in [Trap::Fifo, Trap::DevZero, Trap::Sparse, Trap::Large] {
        let node = Workload::spawn(
            Command::new("node")
                .current_dir(scratch())
                .arg(workload("busy.js"))
                .arg("30"),
        );
        let path = format!("/tmp/perf-{}.map", node.pid());
        trap.lay(&path);
        // V8's own frames name node's JIT code before any perf map is
        // read (tests/v8): off here, so the map is what names it.
        let mut d = Daemon::start(&["--node", "false"], &[]);
        let samples = |d: &Daemon| {
            metric(
                &d.get("/metrics").text(),
                "emberd_samples_total{event=\"cpu\"}",
            )
        };
        // Until the map has been refused and node's native frames named
        // (or 20 s): then sampling must go on, more samples within 3 s (a
        // collector stuck on the map counts none).
        let deadline = Instant::now() + Duration::from_secs(20);
        let (m, refused, folded) = loop {
            let m = d.get("/metrics").text();
            let refused = metric(
                &m,
                &format!(
                    "emberd_perf_maps_refused_total{{reason=\"{}\"}}",
                    trap.reason()
                ),
            );
            let folded = d
                .get(&format!("/folded?seconds=5&pid={}", node.pid()))
                .text();
            let named = folded.lines().any(|l| l.contains("node::Start"));
            if (refused >= 1.0 && named) || Instant::now() > deadline {
                break (m, refused, folded);
            }
            wait(250);
        };
        let first = samples(&d);
        let t1 = Instant::now();
        let second = loop {
            let now = samples(&d);
            if now > first || t1.elapsed() > Duration::from_secs(3) {
                break now;
            }
            wait(100);
        };
        let t0 = Instant::now();
        d.terminate();
        let status = loop {
            if let Some(st) = d.child.try_wait().unwrap() {
                break Some(st);
            }
            if t0.elapsed() > Duration::from_secs(5) {
                break None;
            }
            wait(50);
        };
        let _ = std::fs::remove_file(&path);
        assert!(
            status.is_some(),
            "{trap:?}: SIGTERM did not end the daemon within 5 s"
        );
        assert!(
            second > first && first > 0.0,
            "{trap:?}: sampling stalled (samples {first} then {second})"
        );
        assert!(
            refused >= 1.0,
            "{trap:?}: refusal not counted as {}:\n{m}",
            trap.reason()
        );
        assert!(
            folded.lines().any(|l| l.contains("node::Start")),
            "{trap:?}: node's native frames should still be named:\n{folded}"
        );
    }
}

/// A binary whose reads never return (a FUSE daemon that does not answer;
/// test hook `EMBERD_TEST_STALL_ELF`): its frames stay `module+0xoffset`,
/// counted as `elf_timeout`, while other processes' frames are named, drains
/// go on, and SIGTERM still ends the daemon within 5 s.
#[test]
fn stalled_binary_does_not_stall_the_collector() {
    require_root();
    let bin = build_c_with("cpu_70_30", "stalled-fs", DEBIAN_CFLAGS);
    let mut d = Daemon::start(&[], &[("EMBERD_TEST_STALL_ELF", "/stalled-fs/")]);
    let other = build_c("cpu_70_30");
    let _stalled = Workload::spawn(Command::new(&bin).arg("12"));
    let _named = Workload::spawn(Command::new(&other).arg("12"));
    wait(7000);
    assert_eq!(d.get("/readyz").status, 200, "drains stopped");
    let text = d.get("/folded?seconds=4&group=pid").text();
    let p = parse_folded(&text);
    let (w_stalled, w_named) = (_stalled.pid().to_string(), _named.pid().to_string());
    let of = |pid: &str, pred: &dyn Fn(&[&str]) -> bool| {
        sum_where(&p, |f| {
            f.first().is_some_and(|r| r.ends_with(&format!("-{pid}"))) && pred(f)
        })
    };
    assert!(
        of(&w_named, &|f| f.contains(&"hot_a")) > 100,
        "the other process's frames should be named:\n{}",
        top(&p, 8)
    );
    assert!(
        of(&w_stalled, &|f| f
            .iter()
            .any(|x| x.starts_with("cpu_70_30+0x")))
            > 100,
        "the stalled binary's frames should read cpu_70_30+0x...:\n{}",
        top(&p, 8)
    );
    assert_eq!(of(&w_stalled, &|f| f.contains(&"hot_a")), 0);
    let m = d.get("/metrics").text();
    assert!(
        metric(&m, "emberd_symbolize_misses_total{reason=\"elf_timeout\"}") > 0.0,
        "elf_timeout not counted"
    );
    let t0 = Instant::now();
    d.terminate();
    while d.child.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "SIGTERM took over 5 s"
        );
        wait(50);
    }
}

/// A binary whose first read by each ELF worker is slow, not stuck (test
/// hook `EMBERD_TEST_SLOW_ELF`: 7 s here, as libc's symbols took 2-12 s
/// under TCG): its frames read `module+0xoffset` at first, counted as
/// `elf_timeout`, and are named once a read returns, without a restart,
/// and stay named; `/readyz` stays 200 throughout. Before, the worker that
/// took over read it under the same deadline and missed it too, for ever:
/// 118 misses in 8 minutes on 5.10 under TCG, each holding a drain 1 s,
/// and the kernel matrix's daemon part never named its process. Then the
/// wait for it, once patient (up to 10 s), turned `/readyz` to 503 after
/// 5 s: a slow drain was taken for a stuck collector.
#[test]
fn slow_binary_is_named_once_its_read_returns() {
    require_root();
    let bin = build_c_with("cpu_70_30", "slow-fs", DEBIAN_CFLAGS);
    // 7 s: past /readyz's 5 s, which the collector's wait for the read
    // must not turn to 503 (the wait is bounded and beats).
    let d = Daemon::start(
        &[],
        &[
            ("EMBERD_TEST_SLOW_ELF", "/slow-fs/"),
            ("EMBERD_TEST_SLOW_ELF_MS", "7000"),
        ],
    );
    let slow = Workload::spawn(Command::new(&bin).arg("50"));
    let pid = slow.pid().to_string();
    // /readyz, asked four times a second until the end: every answer not
    // 200, with its body.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (done, port) = (done.clone(), d.port);
        std::thread::spawn(move || {
            let mut not_ready = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let r = http_get(port, "/readyz");
                if r.status != 200 {
                    not_ready.push(format!("{}: {}", r.status, r.text().trim()));
                }
                wait(250);
            }
            not_ready
        })
    };
    let of = |p: &emberd::profile::Profile, pred: &dyn Fn(&[&str]) -> bool| {
        sum_where(p, |f| {
            f.first().is_some_and(|r| r.ends_with(&format!("-{pid}"))) && pred(f)
        })
    };
    let unnamed =
        |p: &emberd::profile::Profile| of(p, &|f| f.iter().any(|x| x.starts_with("cpu_70_30+0x")));
    let named = |p: &emberd::profile::Profile| of(p, &|f| f.contains(&"hot_a"));
    let t0 = Instant::now();
    let mut early = parse_folded("");
    while t0.elapsed() < Duration::from_secs(6) && unnamed(&early) == 0 {
        wait(500);
        early = parse_folded(&d.get("/folded?seconds=10&group=pid").text());
    }
    assert!(
        unnamed(&early) > 0,
        "while its read is slow the binary's frames should read cpu_70_30+0x...:\n{}",
        top(&early, 8)
    );
    // The first read returns 7 s after it was asked; the worker that took
    // over is cold and takes 7 s too, waited for this time.
    let mut last = parse_folded("");
    while t0.elapsed() < Duration::from_secs(35) && (named(&last) == 0 || unnamed(&last) > 0) {
        wait(1000);
        last = parse_folded(&d.get("/folded?seconds=2&group=pid").text());
    }
    assert!(
        named(&last) > 0 && unnamed(&last) == 0,
        "35 s after the daemon started the binary's frames should be named:\n{}",
        top(&last, 8)
    );
    assert!(
        metric(
            &d.get("/metrics").text(),
            "emberd_symbolize_misses_total{reason=\"elf_timeout\"}",
        ) > 0.0,
        "elf_timeout not counted"
    );
    // Named for good: a miss would leave a drain's frames unnamed (the
    // count of misses is the host's: another file may miss on a busy one).
    let named_at = unix_now();
    wait(6000);
    let after = parse_folded(
        &d.get(&format!(
            "/folded?from={named_at}&to={}&group=pid",
            named_at + 5
        ))
        .text(),
    );
    assert!(
        named(&after) > 150,
        "named for good: 5 s of the binary's hot_a:\n{}",
        top(&after, 8)
    );
    assert_eq!(
        unnamed(&after),
        0,
        "frames unnamed again after they were named:\n{}",
        top(&after, 8)
    );
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let not_ready = poller.join().expect("the /readyz poller");
    assert!(
        not_ready.is_empty(),
        "/readyz answered other than 200 while the collector waited on a bounded read: {not_ready:?}"
    );
    d.terminate();
}

/// A collector that hangs (test hook): `/readyz` turns 503 within 5 s while
/// `/healthz` still answers, and SIGTERM still ends the daemon within 5 s.
#[test]
fn hung_collector_is_not_ready_and_still_stops() {
    require_root();
    let mut d = Daemon::start(
        &[],
        &[
            ("EMBERD_TEST_COLLECTOR", "hang"),
            ("EMBERD_TEST_COLLECTOR_AFTER", "2"),
        ],
    );
    assert_eq!(d.get("/readyz").status, 200, "ready at first");
    let t0 = Instant::now();
    let mut turned = None;
    while t0.elapsed() < Duration::from_secs(12) {
        if d.get("/readyz").status == 503 {
            turned = Some(t0.elapsed());
            break;
        }
        wait(200);
    }
    // The hang starts after 2 drains (~2 s, longer on a busy host: 9.3 s
    // to the turn once in CI); readiness must follow within 5 s of the
    // last drain, which the answer says.
    let turned = turned.expect("/readyz still 200 12 s after the daemon was ready");
    let r = d.get("/readyz");
    let body = r.text();
    let stale: f64 = body
        .split("no drain completed for ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| {
            panic!("/readyz's 503 should say how long ago the last drain was: {body:?}")
        });
    assert!(
        (5.0..7.0).contains(&stale),
        "/readyz turned 503 {turned:?} after the daemon was ready, its last drain {stale} s before (between 5 and 7 s asked): {body:?}"
    );
    assert_eq!(d.get("/healthz").status, 200, "liveness of the HTTP side");
    let t0 = Instant::now();
    d.terminate();
    let exited = loop {
        if d.child.try_wait().unwrap().is_some() {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(5) {
            break false;
        }
        wait(50);
    };
    assert!(
        exited,
        "SIGTERM did not end the daemon within 5 s with a hung collector"
    );
}

/// A collector that panics (test hook) ends the process with a failure, so
/// systemd (Restart=on-failure) starts a fresh one instead of leaving a
/// daemon that answers but samples nothing.
#[test]
fn panicking_collector_ends_the_process() {
    require_root();
    let mut d = Daemon::start(
        &[],
        &[
            ("EMBERD_TEST_COLLECTOR", "panic"),
            ("EMBERD_TEST_COLLECTOR_AFTER", "1"),
        ],
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = d.child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break None;
        }
        wait(100);
    };
    let status = status.expect("the daemon kept running 10 s after its collector panicked");
    assert!(
        !status.success(),
        "exit status {status:?} should be a failure"
    );
}

/// Raw GET with the given extra header lines (each ending in CRLF).
fn get_with(port: u16, path: &str, headers: &str) -> HttpResponse {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connecting to emberd");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\n{headers}\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reading the response");
    parse_response(&raw)
}

/// DNS rebinding: a page of attacker.example that resolves to 127.0.0.1
/// sends `Host: attacker.example` and gets 421; IP literals, localhost and
/// configured names pass. With a token file, requests without the token get
/// 401 (but `/healthz`), with it 200.
#[test]
fn host_header_and_token_guard_profiles() {
    require_root();
    let token_file = scratch().join("token");
    std::fs::write(&token_file, "s3cret-token-0123456789\n").unwrap();
    let d = Daemon::start(
        &[
            "--allowed-host",
            "profiler.example",
            "--auth-token-file",
            token_file.to_str().unwrap(),
        ],
        &[],
    );
    let auth = "Authorization: Bearer s3cret-token-0123456789\r\n";
    let r = get_with(
        d.port,
        "/folded?seconds=5",
        &format!("Host: attacker.example\r\n{auth}"),
    );
    assert_eq!(r.status, 421, "rebinding host: {}", r.text());
    for host in [
        "127.0.0.1",
        &format!("127.0.0.1:{}", d.port),
        "localhost:7099",
        "[::1]:7099",
        "Profiler.Example",
    ] {
        let r = get_with(
            d.port,
            "/folded?seconds=5",
            &format!("Host: {host}\r\n{auth}"),
        );
        assert_eq!(r.status, 200, "Host {host}: {}", r.text());
    }
    let r = get_with(d.port, "/folded?seconds=5", "Host: 127.0.0.1\r\n");
    assert_eq!(r.status, 401, "no token: {}", r.text());
    let r = get_with(
        d.port,
        "/metrics",
        "Host: 127.0.0.1\r\nAuthorization: Bearer s3cret-token-0123456780\r\n",
    );
    assert_eq!(r.status, 401, "wrong token: {}", r.text());
    assert_eq!(
        get_with(d.port, "/healthz", "Host: 127.0.0.1\r\n").status,
        200
    );
}

/// The counts map forced full (8 entries against 12 busy threads, 200
/// samples a second): the
/// samples that do not fit are counted as dropped, the stack maps do not
/// fill up (each drain takes every stack of its buffer), and the samples
/// that fit are named, to the end of the recording.
#[test]
fn full_counts_map_drops_are_counted_and_stacks_do_not_fill() {
    require_root();
    let bin = build_c_debian("many_threads");
    // 12 threads: with 32 or more spinning threads this VM's cpu-clock
    // sampling (perf's too) stops seeing them.
    // Spinning 12 s: the record's 5 s start once it is attached, which
    // beside 12 spinning threads took long enough that 8 s of spinning
    // ended before the record did (28 of the 32 named in one run).
    let w = Workload::spawn(Command::new(&bin).args(["12", "12"]));
    wait(500);
    let out_path = scratch().join("counts_full.folded");
    let out = run_record(
        &out_path,
        &[
            "-s",
            "5",
            "-p",
            &w.pid().to_string(),
            "--counts-map-entries",
            "8",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {err}");
    let field = |what: &str| -> u64 {
        let lost = err
            .lines()
            .find(|l| l.contains("[ lost:"))
            .expect("a lost: line");
        lost.split(',')
            .find(|p| p.contains(what))
            .and_then(|p| p.split_whitespace().find_map(|w| w.parse().ok()))
            .unwrap_or_else(|| panic!("no {what} in {lost}"))
    };
    let counts_full = field("counts-map full");
    let stack_full = field("stack-map full");
    let p = parse_folded(&std::fs::read_to_string(&out_path).unwrap());
    let named = sum_where(&p, |f| f.iter().any(|x| x.contains("thread_work")));
    assert!(
        counts_full > 0,
        "12 threads should overflow 8 counts entries: {err}"
    );
    assert_eq!(stack_full, 0, "the stack maps filled up: {err}");
    // A key is a thread, its stacks and a 20 ms tick, so 8 entries hold
    // 8 keys a drain (a sample or two each): at least 4 drains' worth.
    assert!(
        named >= 4 * 8,
        "samples that fit should be named in every drain ({named} of {}):\n{}",
        p.total(),
        top(&p, 5)
    );
}

/// The pre-5.18 sched_switch program (prev_state read from the task, as on
/// Ubuntu 22.04's 5.15), forced on this kernel: off-CPU time is still
/// charged to the sleeping function, about 1 s for 5 x 200 ms.
#[test]
fn offcpu_with_pre_5_18_sched_switch() {
    require_root();
    let bin = build_c_debian("sleepy");
    // Attach-gated: the workload starts once record is attached. With a
    // 2 s head start, a record slower to load beside other work (two
    // spinners here: 18 of 36 runs) missed the first sleeps or all five.
    let (p, pid, said) = record_attached_env(
        "compat.folded",
        &mut Command::new(&bin),
        &["-e", "offcpu", "-s", "5", "--group", "thread"],
        &[("EMBERD_TEST_SCHED_SWITCH_COMPAT", "1")],
    );
    let main_thread = format!("sleepy-{pid}/{pid}");
    let total = sum_where(&p, |f| {
        f[0] != main_thread && f.contains(&"__x64_sys_clock_nanosleep_[k]")
    });
    let named = sum_where(&p, |f| {
        has_seq(f, &["sleeper_thread", "sleepy"]) && reaches_root(f)
    });
    // Record's log ends with its summary: what was dropped or sampled out.
    assert!(
        (850_000..=1_150_000).contains(&total),
        "about 1 s asleep expected, got {total} us:\n{}\n{said}",
        top(&p, 8)
    );
    assert!(
        named * 10 >= total * 9,
        "90% of {total} us should be under sleeper_thread;sleepy, got {named}:\n{}\n{said}",
        top(&p, 8)
    );
}

/// The wall clock stepped back 60 s while the daemon runs (test hook): the
/// last 3 seconds still show the workload, because drains are stamped on
/// the monotonic clock and windows mapped onto it at query time.
#[test]
fn wall_clock_step_back_keeps_recent_windows() {
    require_root();
    let d = Daemon::start(&[], &[("EMBERD_TEST_CLOCK_STEP", "-60@3")]);
    let bin = build_c("cpu_70_30");
    let _w = Workload::spawn(Command::new(&bin).arg("12"));
    wait(8000);
    let r = d.get("/folded?seconds=3&comm=^cpu_70_30$");
    assert_eq!(r.status, 200, "{}", r.text());
    let p = parse_folded(&r.text());
    assert!(
        p.total() >= 150,
        "the last 3 s after a 60 s step back should hold ~300 samples of the workload, got {}:\n{}",
        p.total(),
        top(&p, 5)
    );
}

/// Heavy queries (uncached SVGs of the whole history, four clients at once)
/// while `/healthz` is polled every 100 ms: no health check takes longer
/// than 200 ms (renders run on blocking threads and the async side never
/// waits for the store's lock).
#[test]
fn health_answers_while_heavy_queries_run() {
    require_root();
    let d = Daemon::start(&[], &[]);
    let bin = build_c("cpu_70_30");
    let _w = Workload::spawn(Command::new(&bin).arg("30"));
    wait(6000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = d.port;
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let r = http_get(
                        port,
                        &format!("/flamegraph.svg?seconds=3600&title=c{c}-{n}"),
                    );
                    assert!(matches!(r.status, 200 | 503), "heavy query: {}", r.status);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(8) {
        let t = Instant::now();
        let r = http_get(port, "/healthz");
        worst = worst.max(t.elapsed());
        assert_eq!(r.status, 200);
        // Queries copy rows out under short read locks: drains go on.
        assert_eq!(
            http_get(port, "/readyz").status,
            200,
            "no drain completed for 5 s while heavy queries ran"
        );
        wait(100);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let queries: u32 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert!(
        queries >= 4,
        "the heavy queries should have run ({queries})"
    );
    assert!(
        worst < Duration::from_millis(200),
        "a /healthz took {worst:?} while {queries} heavy queries ran"
    );
}

/// Slowloris: 200 connections that send half a request head and stall hold
/// nothing up (`/healthz` answers at once) and are closed by the daemon
/// within its 5 s header timeout, so they cannot pile up.
#[test]
fn stalled_connections_are_closed() {
    use std::io::Read;
    require_root();
    let d = Daemon::start(&[], &[]);
    let mut stalled: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap();
            s.write_all(b"GET /folded HTTP/1.1\r\nHost: 127.0").unwrap();
            s
        })
        .collect();
    // Idle keep-alive connections that never send anything count too.
    stalled.extend((0..50).map(|_| std::net::TcpStream::connect(("127.0.0.1", d.port)).unwrap()));
    let t = Instant::now();
    assert_eq!(d.get("/healthz").status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "/healthz took {:?} beside 250 stalled connections",
        t.elapsed()
    );
    let t0 = Instant::now();
    for (i, s) in stalled.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        // The daemon closes the connection (EOF or reset), possibly after
        // a 408 response.
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) if t0.elapsed() < Duration::from_secs(9) => break,
                Ok(0) | Err(_) => {
                    panic!("stalled connection {i} still open after {:?}", t0.elapsed())
                }
                Ok(_) => continue,
            }
        }
    }
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "stalled connections closed only after {:?} (header timeout 5 s)",
        t0.elapsed()
    );
}

/// With `kernel.kptr_restrict=2` kallsyms hides kernel addresses from
/// everyone, and so does emberd: unnamed kernel frames read `[kernel]`,
/// never `[kernel]+0xffff...` (the randomized base).
#[test]
fn hidden_kernel_addresses_stay_hidden() {
    require_root();
    let bin = build_c("syscall_loop");
    let w = Workload::spawn(Command::new(&bin).arg("6"));
    wait(300);
    // Set last and restored before any assertion: later tests need it back.
    let old = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").unwrap();
    std::fs::write("/proc/sys/kernel/kptr_restrict", "2").expect("setting kptr_restrict");
    let path = scratch().join("kptr.folded");
    let out = run_record(&path, &["-s", "3", "-p", &w.pid().to_string()]);
    std::fs::write("/proc/sys/kernel/kptr_restrict", old.trim()).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("[kernel]_[k]"),
        "kernel frames should be there, unnamed:\n{}",
        &text[..text.len().min(2000)]
    );
    assert!(
        !text.contains("[kernel]+0x"),
        "a kernel address was printed:\n{}",
        &text[..text.len().min(2000)]
    );
}

/// A block longer than the stack collection horizon (Debian's python3 in
/// `time.sleep(6)`):
/// the stack it blocked in is kept while it sleeps (the task iterator
/// stamps held stacks), so its 6 s are charged to a named stack, not
/// `[lost]`.
#[test]
fn long_block_keeps_its_stack() {
    require_root();
    // Debian's python3, once the recorder is attached (a fixed 1.5 s was
    // shorter than attaching took once: 0 us seen), runs a moment (its
    // tables get built), then sleeps 6 s.
    let (p, _) = record_attached(
        "long_block.folded",
        Command::new("/usr/bin/python3").args([
            "-c",
            "import os, time\ngo = os.environ['EMBERD_TEST_GO']\nwhile not os.path.exists(go): time.sleep(0.01)\nend = time.time() + 1.5\nwhile time.time() < end: pass\ntime.sleep(6)",
        ]),
        &["-e", "offcpu", "-s", "9"],
    );
    let lost = sum_where(&p, |f| f.contains(&"[lost]"));
    let named = sum_where(&p, |f| {
        f.iter().any(|x| x.contains("nanosleep")) && reaches_root(f)
    });
    assert!(
        named >= 5_000_000 && lost == 0,
        "time.sleep(6) should be ~6 s under a named, complete stack ({named} us), none [lost] ({lost} us):\n{}",
        top(&p, 5)
    );
}

/// `--unix-socket`: HTTP is served on a Unix socket of mode 0660 (who may
/// read profiles is a matter of file permissions), not on TCP.
#[test]
fn unix_socket_serves_with_file_permissions() {
    require_root();
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let sock = scratch().join(format!("emberd-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let mut child = emberd()
        .arg("--unix-socket")
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting emberd");
    let get = |path: &str| -> Option<HttpResponse> {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).ok()?;
        Some(parse_response(&raw))
    };
    let t0 = Instant::now();
    while get("/readyz").is_none_or(|r| r.status != 200) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not ready on the socket within 20 s"
        );
        wait(200);
    }
    wait(2000);
    let r = get("/folded?seconds=5").expect("a response on the socket");
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(mode, 0o660, "socket mode {mode:o}");
}

/// A local user (nobody) maps as executable a 600 MiB sparse file that is
/// not ELF, and a copy of a real binary grown to 600 MiB whose `.eh_frame`
/// header claims 500 MiB. The unwind-table builder used to read the first
/// whole and the second's claimed section (532-575 MiB RSS, past the unit's
/// MemoryMax=512M: killed, history gone). Now both are refused unread and
/// counted, the daemon's peak RSS stays under 150 MiB, and the user's own
/// process is still sampled and named.
#[test]
fn files_mapped_as_code_are_read_only_as_far_as_needed() {
    require_root();
    let dir = fresh_scratch("mapped-code");
    const SIZE: u64 = 600 << 20;
    let not_elf = dir.join("data.bin");
    std::fs::File::create(&not_elf)
        .and_then(|f| f.set_len(SIZE))
        .expect("sparse file");
    // A real ELF file whose .eh_frame section header claims 500 MiB.
    let liar = dir.join("liar.so");
    let mut bytes = std::fs::read(build_c("cpu_70_30")).expect("a built binary");
    {
        use object::read::elf::FileHeader;
        let header = object::elf::FileHeader64::<object::LittleEndian>::parse(&bytes[..]).unwrap();
        let e = header.endian().unwrap();
        let sections = header.sections(e, &bytes[..]).unwrap();
        let (idx, _) = sections
            .iter()
            .enumerate()
            .find(|(_, s)| sections.section_name(e, s).ok() == Some(&b".eh_frame"[..]))
            .expect("the binary has .eh_frame");
        let at = header.e_shoff.get(e) as usize + idx * 64 + 32;
        bytes[at..at + 8].copy_from_slice(&(500u64 << 20).to_le_bytes());
    }
    std::fs::write(&liar, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&liar)
        .and_then(|f| f.set_len(SIZE))
        .unwrap();
    let mut user = run_as(NOBODY, Path::new("/usr/bin/python3"));
    user.arg(workload("map_exec.py")).arg(&not_elf).arg(&liar);
    // The files are mapped before the daemon starts: it reads a process's
    // mappings at exec and again only when a sample lands in code it does
    // not know, and this process runs none of the mapped code. Started
    // first, the daemon looked before the mapping in some CI runs and saw
    // nothing to refuse.
    let mut w = Workload::spawn_ready(&mut user, "mapped");
    let mut d = Daemon::start(&[], &[]);
    let before = d.status_kib("VmHWM");
    // Until both files are refused and the process named, or 20 s.
    let t0 = std::time::Instant::now();
    let (m, refused, folded) = loop {
        wait(1000);
        let m = d.get("/metrics").text();
        let refused = metric(&m, "emberd_unwind_table_events_total{reason=\"refused\"}");
        let folded = d.get(&format!("/folded?seconds=4&pid={}", w.pid())).text();
        let done = refused >= 2.0 && folded.contains("holdout_mapper");
        if (done && t0.elapsed() >= std::time::Duration::from_secs(6))
            || t0.elapsed() >= std::time::Duration::from_secs(20)
        {
            break (m, refused, folded);
        }
    };
    let peak = d.status_kib("VmHWM");
    let alive = d.child.try_wait().unwrap().is_none();
    let user_exit = w.0.try_wait().unwrap();
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("daemon peak RSS: {before} KiB when ready, {peak} KiB after 6 s or more");
    assert!(alive, "the daemon died");
    assert!(
        peak < 150 << 10,
        "the daemon's peak RSS went from {before} KiB to {peak} KiB"
    );
    assert!(
        refused >= 2.0,
        "both files should be refused and counted (refused = {refused}; the user's \
         process exited: {user_exit:?}; its folded stacks: {folded:?}):\n{m}"
    );
    assert!(
        folded.contains("holdout_mapper"),
        "the user's process should still be sampled and named:\n{folded}"
    );
}

/// Issue 41: a local user (nobody) writes a 4 KiB ELF header into a 200 MiB
/// sparse file, claiming 3,200 program and 3,200 section headers of 65,535
/// bytes each, maps it as code and spins. Entry sizes were only checked
/// from below, so the table builder and the interpreter check each
/// allocated and read 200 MiB of "headers" (peak RSS 613 MiB, past the
/// unit's MemoryMax=512M: killed at every restart). Now the file is refused
/// unread, the daemon lives within 150 MiB and still names the process.
#[test]
fn lying_elf_header_sizes_are_refused_unread() {
    require_root();
    let dir = fresh_scratch("lying-headers");
    // The user's own directory: the file is theirs, written by them.
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let liar = dir.join("headers.so");
    let mut user = run_as(NOBODY, Path::new("/usr/bin/python3"));
    user.arg(workload("map_exec.py"))
        .arg("--lying-headers")
        .arg(&liar);
    // Mapped before the daemon starts, as in the test above: a fixed wait
    // after starting it first saw `refused = 0` in a CI run.
    let w = Workload::spawn_ready(&mut user, "mapped");
    let mut d = Daemon::start(&[], &[]);
    let before = d.status_kib("VmHWM");
    wait(6000);
    let m = d.get("/metrics").text();
    let peak = d.status_kib("VmHWM");
    let refused = metric(&m, "emberd_unwind_table_events_total{reason=\"refused\"}");
    let folded = d.get(&format!("/folded?seconds=4&pid={}", w.pid())).text();
    let alive = d.child.try_wait().unwrap().is_none();
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&liar).unwrap());
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("daemon peak RSS: {before} KiB when ready, {peak} KiB 6 s later");
    assert_eq!(owner, 65534, "the file should be the user's own");
    assert!(alive, "the daemon died");
    assert!(
        peak < 150 << 10,
        "the daemon's peak RSS went from {before} KiB to {peak} KiB"
    );
    assert!(
        refused >= 1.0,
        "the file should be refused and counted (refused = {refused}):\n{m}"
    );
    assert!(
        folded.contains("holdout_mapper"),
        "the user's process should still be sampled and named:\n{folded}"
    );
}

/// A local user (nobody) maps one page of a file with a 3,900-byte path
/// 60,000 times: its `/proc/PID/maps` is 240 MB of text. The unwinder and
/// the symbolizer each parsed it whole (procfs keeps every line and path):
/// 293 MiB peak RSS for one such process, measured. Now only code lines
/// are kept, and at most 16 MiB read (counted): the daemon stays within
/// 150 MiB and goes on sampling everyone else.
#[test]
fn a_process_with_huge_maps_costs_a_bounded_read() {
    require_root();
    let dir = fresh_scratch("many-maps");
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let mut d = Daemon::start(&[], &[]);
    let before = d.status_kib("VmHWM");
    let mut user = run_as(NOBODY, Path::new("/usr/bin/python3"));
    user.arg(workload("many_maps.py"))
        .arg(dir.join("t"))
        .arg("60000")
        .stdout(std::process::Stdio::null());
    let w = Workload::spawn(&mut user);
    let bin = build_c("cpu_70_30");
    let other = Workload::spawn(Command::new(&bin).arg("30"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let lines = loop {
        let n = std::fs::read(format!("/proc/{}/maps", w.pid()))
            .map(|b| b.len())
            .unwrap_or(0);
        if n > 200 << 20 || Instant::now() > deadline {
            break n;
        }
        wait(500);
    };
    wait(6000);
    let m = d.get("/metrics").text();
    let peak = d.status_kib("VmHWM");
    let truncated = metric(&m, "emberd_proc_maps_truncated_total");
    let folded = d
        .get(&format!("/folded?seconds=4&pid={}", other.pid()))
        .text();
    let alive = d.child.try_wait().unwrap().is_none();
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("maps of {lines} bytes; daemon peak RSS {before} KiB at start, {peak} KiB after");
    assert!(
        lines > 200 << 20,
        "the user's maps reached only {lines} bytes"
    );
    assert!(alive, "the daemon died");
    assert!(
        peak < 150 << 10,
        "the daemon's peak RSS went from {before} KiB to {peak} KiB"
    );
    assert!(truncated >= 1.0, "the cut read should be counted:\n{m}");
    assert!(
        folded.contains("hot_a"),
        "another process should still be sampled and named:\n{folded}"
    );
}

/// A user's binary with a 4 MiB function name, spinning in that function:
/// the name reaches /folded, the SVG and pprof cut to `MAX_NAME_BYTES`
/// (4 KiB) with `…[+N bytes]`, so no answer holds a 4 MB line and the
/// daemon stays within its memory.
#[test]
fn a_4_mib_symbol_name_is_cut_everywhere() {
    require_root();
    let dir = scratch().join("long-name");
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("holdout_long_{}", "x".repeat(4 << 20));
    std::fs::write(
        dir.join("long_name.h"),
        format!("#define LONG_NAME \"{name}\"\n"),
    )
    .unwrap();
    let include = format!("-I{}", dir.display());
    let bin = build_c_with(
        "long_name",
        "long-name",
        &["-O2", "-fno-omit-frame-pointer", &include],
    );
    let w = Workload::spawn(&mut Command::new(&bin));
    let d = Daemon::start(&[], &[]);
    let pid = w.pid();
    // The first drain can take seconds on a busy 2-CPU machine.
    let t0 = Instant::now();
    let folded = loop {
        wait(1000);
        let f = d.get(&format!("/folded?seconds=3&pid={pid}")).text();
        if f.contains("holdout_long") || t0.elapsed() > Duration::from_secs(20) {
            break f;
        }
    };
    let svg = d.get(&format!("/flamegraph.svg?seconds=3&pid={pid}"));
    let pprof = d.get(&format!("/debug/pprof/profile?seconds=3&pid={pid}"));
    let rss = d.status_kib("VmHWM");
    drop(w);
    let longest = folded.lines().map(str::len).max().unwrap_or(0);
    assert!(
        folded.contains("holdout_long_xxx") && folded.contains("…[+"),
        "the long name should show, cut:\n{}",
        &folded[..folded.len().min(2000)]
    );
    assert!(
        longest < 2 * emberd::symbolize::MAX_NAME_BYTES,
        "a folded line of {longest} bytes"
    );
    assert_eq!(svg.status, 200);
    assert!(
        svg.body.len() < 256 << 10,
        "the SVG is {} bytes",
        svg.body.len()
    );
    assert_eq!(pprof.status, 200);
    assert!(
        pprof.body.len() < 64 << 10,
        "the pprof is {} bytes",
        pprof.body.len()
    );
    assert!(rss < 150 << 10, "the daemon's peak RSS is {rss} KiB");
}

/// Two node processes whose perf maps are 60 MiB each (under the 64 MiB
/// file cap, 4x the 16 MiB budget of parsed maps): each map is parsed only
/// up to half the budget (the rest counted as dropped), so the daemon's
/// peak RSS stays far below the ~380 MB one such map used to cost parsed,
/// and the JIT frames that fit are still named.
#[test]
fn large_perf_maps_are_parsed_within_the_budget() {
    require_root();
    let nodes: Vec<Workload> = (0..2)
        .map(|_| {
            Workload::spawn(
                Command::new("node")
                    .current_dir(scratch())
                    .arg(workload("busy.js"))
                    .arg("40"),
            )
        })
        .collect();
    wait(1500);
    for n in &nodes {
        let path = format!("/tmp/perf-{}.map", n.pid());
        // node appends its own lines to the map: ours go first.
        let own = std::fs::read(&path).unwrap_or_default();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("perf map"));
        let mut i: u64 = 0;
        let mut written = 0usize;
        while written < 60 << 20 {
            let line = format!(
                "{:x} 10 LazyCompile:*emberd_fake_{i} /srv/app/generated/module_{i}.js:1:1\n",
                0x7000_0000_0000 + i * 16
            );
            f.write_all(line.as_bytes()).unwrap();
            written += line.len();
            i += 1;
        }
        f.write_all(&own).unwrap();
        f.flush().unwrap();
    }
    // V8's own frames would name the JIT code first (tests/v8): off here,
    // so the maps are read.
    let d = Daemon::start(&["--node", "false"], &[]);
    wait(8000);
    let m = d.get("/metrics").text();
    let peak = d.status_kib("VmHWM");
    let dropped = metric(
        &m,
        "emberd_symbolize_misses_total{reason=\"perf_map_entry_dropped\"}",
    );
    let samples = metric(&m, "emberd_samples_total{event=\"cpu\"}");
    for n in &nodes {
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", n.pid()));
    }
    eprintln!("daemon peak RSS {peak} KiB, perf-map entries dropped {dropped}");
    assert!(samples > 0.0, "sampling stopped");
    assert!(
        dropped > 0.0,
        "the maps' entries past the budget should be counted as dropped:\n{m}"
    );
    assert!(peak < 150 << 10, "the daemon's peak RSS was {peak} KiB");
}

/// A local user's stripped binary whose `.gnu_debuglink` names `spin.debug`,
/// a symlink beside it to another user's private binary (mode 0600, uid
/// 4242, its functions `victim_secret_*`), and a second binary whose link
/// climbs out (`../victim/private.bin`). emberd follows neither (as gdb
/// searches: a plain name, beside the binary only if no symlink and the
/// binary's owner), so the user's profile never shows the victim's names.
#[test]
fn debug_links_cannot_read_another_users_file() {
    require_root();
    let root = Path::new("/tmp/emberd-debuglink-test");
    let _ = std::fs::remove_dir_all(root);
    let (victim_dir, user_dir) = (root.join("victim"), root.join("user"));
    std::fs::create_dir_all(&victim_dir).unwrap();
    std::fs::create_dir_all(&user_dir).unwrap();
    let run = |cmd: &mut Command| {
        let out = cmd.output().expect("running binutils");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let built = build_c("cpu_70_30");
    let private = victim_dir.join("private.bin");
    run(Command::new("objcopy")
        .args(["--strip-debug", "--redefine-sym", "hot_a=victim_secret_a"])
        .args(["--redefine-sym", "hot_b=victim_secret_b"])
        .arg(&built)
        .arg(&private));
    let (spin, climb) = (user_dir.join("spin"), user_dir.join("climb"));
    for bin in [&spin, &climb] {
        run(Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(bin)
            .arg(&built));
    }
    // objcopy computes the link's CRC from a file by that name: the
    // victim's own bytes, as a user who once saw the file would.
    std::fs::copy(&private, user_dir.join("spin.debug")).unwrap();
    run(Command::new("objcopy")
        .current_dir(&user_dir)
        .arg("--add-gnu-debuglink=spin.debug")
        .arg(&spin));
    std::fs::remove_file(user_dir.join("spin.debug")).unwrap();
    // A link that climbs out of the binary's directory: the name, NUL,
    // padding to 4 bytes, then a CRC.
    let mut section = b"../victim/private.bin\0".to_vec();
    section.resize(section.len().next_multiple_of(4) + 4, 0);
    std::fs::write(user_dir.join("link"), &section).unwrap();
    run(Command::new("objcopy")
        .arg(format!(
            "--add-section=.gnu_debuglink={}",
            user_dir.join("link").display()
        ))
        .arg(&climb));
    std::os::unix::fs::symlink(&private, user_dir.join("spin.debug")).unwrap();
    run(Command::new("chown")
        .args(["-R", "4242:4242"])
        .arg(&victim_dir));
    run(Command::new("chmod").arg("600").arg(&private));
    run(Command::new("chmod").arg("755").arg(root));
    run(Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&user_dir));
    let d = Daemon::start(&[], &[]);
    let users: Vec<Workload> = ["spin", "climb"]
        .iter()
        .map(|n| {
            Workload::spawn(
                Command::new("setpriv")
                    .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(user_dir.join(n))
                    .arg("30"),
            )
        })
        .collect();
    let t0 = Instant::now();
    let folded = loop {
        wait(1000);
        let f: String = users
            .iter()
            .map(|w| d.get(&format!("/folded?seconds=3&pid={}", w.pid())).text())
            .collect();
        let both = f.contains("spin;") && f.contains("climb;");
        if both || t0.elapsed() > Duration::from_secs(20) {
            break f;
        }
    };
    drop(users);
    let _ = std::fs::remove_dir_all(root);
    assert!(
        folded.contains("spin;") && folded.contains("climb;"),
        "both user processes should be sampled:\n{folded}"
    );
    assert!(
        !folded.contains("victim_secret"),
        "the victim's private symbols named the user's frames:\n{folded}"
    );
}
