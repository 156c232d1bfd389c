//! History on disk: a restart, a kill, torn and planted files, a local user
//! at the directory, offline reading, and a week replayed at accelerated
//! time through the real writer.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// A history directory under /tmp (as /var/lib is: every user may reach
/// it, so what keeps a local user out is the directory's own mode).
fn history_dir(name: &str) -> PathBuf {
    history_dir_under("/tmp", name)
}

/// A history directory in memory (`/dev/shm`), for a test that writes and
/// deletes tens of thousands of files: on an ext4 without a journal (these
/// machines' root) each new file's inode search skips every inode deleted
/// in the last minutes (`find_inode_bit`, `recently_deleted`), which took
/// the week's replay 13.5% of its time in open(2), and fsync 7%.
fn history_dir_in_memory(name: &str) -> PathBuf {
    history_dir_under("/dev/shm", name)
}

/// `parent/emberd-test-history-NAME`, emptied of an earlier run's files
/// (not created: the archive creates it).
fn history_dir_under(parent: &str, name: &str) -> PathBuf {
    let dir = Path::new(parent).join(format!("emberd-test-history-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Folded lines of `text` summed by whether they hold `frame`.
fn samples_with(text: &str, frame: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.split(';').any(|f| f == frame))
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    v.sort();
    v
}

/// The first second a segment file holds, from its name
/// (`EVENT.tTIER.START.LEN.NONCE.seg`).
fn file_start(p: &Path) -> u64 {
    let name = p.file_name().unwrap().to_str().unwrap();
    name.split('.').nth(2).unwrap().parse().unwrap()
}

/// Runs `args` as user nobody; whether it succeeded.
fn as_nobody(args: &[&str]) -> bool {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("running setpriv (util-linux)")
        .success()
}

/// A program in two phases (phase_one, then phase_two) runs across a
/// daemon restart made at the switch: after it, the daemon serves both
/// windows, the one before the restart read from disk, and their
/// differential has phase_one only before and phase_two only after; the
/// stretch the restart took is a gap with a note, not an error. The
/// directory, copied elsewhere, is served by `--no-sample` with the same
/// answer.
#[test]
fn a_restart_keeps_the_history_and_the_diff_shows_the_change() {
    require_root();
    let dir = history_dir("restart");
    let dir_s = dir.to_str().unwrap();
    let bin = build_c_debian("phases");
    // Each daemon's run, and the workload's first phase. 20 s: the window
    // before the restart (10 s) holds about 990 samples of a CPU and the
    // one after (up to 7 s) about 690, where `assert_covers_cpu` fails on
    // losing half; the segment before the restart is the one the graceful
    // stop writes (history_write_seconds is 30), read back from disk.
    const RUN: u64 = 20;
    let a = Daemon::start(&["--history-dir", dir_s], &[]);
    let t0 = unix_now();
    // phase_two lasts past the test's last window (killed when dropped),
    // so that its CPU time is read to that window's end.
    let w = Workload::spawn(Command::new(&bin).args([RUN.to_string(), (RUN + 60).to_string()]));
    // Its CPU time, which a busy host shares: each window's counts are
    // held to what it ran then (nine tenths in the phase's function).
    let meter = CpuMeter::start(w.pid());
    let ran = |from: u64, to: u64| meter.between(from as f64, to as f64);
    wait(RUN * 1000);
    a.terminate();
    let mut a = a;
    let status = a.child.wait().unwrap();
    assert!(status.success(), "emberd exited with {status}");
    // An upgrade's pause: the stretch without a daemon is a gap.
    wait(3_000);
    let restart = unix_now();
    let files = segment_files(&dir);
    assert!(
        !files.is_empty(),
        "no history file in {dir_s} after a graceful stop"
    );
    let b = Daemon::start(&["--history-dir", dir_s], &[]);
    let started = unix_now() + 1;
    wait(RUN * 1000);
    // After the restart: from 8 s after it, or the second daemon's start
    // if that was later (it may take up to 20 s to be ready).
    let after = started.max(restart + 8);
    let comm = enc("^phases$");
    let windows = format!(
        "before={},{}&after={},{}",
        t0 + 5,
        t0 + RUN - 5,
        after,
        started + RUN - 5
    );
    let r = b.get(&format!("/diff.folded?{windows}&comm={comm}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let cols = columns(&r.text());
    let (one, two) = (sums(&cols, "phase_one"), sums(&cols, "phase_two"));
    assert_eq!((one.len(), two.len()), (2, 2), "{}", r.text());
    assert_covers_cpu(
        one[0],
        ran(t0 + 5, t0 + RUN - 5),
        0.9,
        &format!("phase_one before the restart:\n{}", r.text()),
    );
    assert!(
        one[1] * 20 < one[0],
        "phase_one should be only before the restart: {one:?}\n{}",
        r.text()
    );
    assert_covers_cpu(
        two[1],
        ran(after, started + RUN - 5),
        0.9,
        &format!("phase_two after the restart:\n{}", r.text()),
    );
    assert!(
        two[0] * 20 < two[1],
        "phase_two should be only after the restart: {two:?}\n{}",
        r.text()
    );
    // The window across the restart: both phases, the restart a gap. It
    // holds at least 5 s of each phase however long the stop and the start
    // took: phase_one until the workload switched (when the first daemon
    // was stopped, t0 + RUN at the earliest), phase_two from the second
    // daemon's start.
    let (lo, hi) = (
        (restart - 10).min(t0 + RUN - 5),
        (restart + 15).max(started + 5),
    );
    let across = b.get(&format!("/folded?from={lo}&to={hi}&comm={comm}"));
    assert_eq!(across.status, 200, "{}", across.text());
    let text = across.text();
    assert_covers_cpu(
        samples_with(&text, "phase_one"),
        ran(lo, t0 + RUN),
        0.9,
        &format!("phase_one before the restart, around it:\n{text}"),
    );
    assert_covers_cpu(
        samples_with(&text, "phase_two"),
        ran(started, hi),
        0.9,
        &format!("phase_two after the restart, around it:\n{text}"),
    );
    let notes: Vec<&str> = across
        .headers
        .iter()
        .filter(|(k, _)| k == "x-emberd-note")
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("no history from")),
        "the restart should be a gap with a note: {:?}",
        across.headers
    );
    let res = across.header("x-emberd-resolution").unwrap_or_default();
    assert!(
        res.contains("disk") && res.contains("memory"),
        "the resolution header names both sources: {res:?}"
    );
    let before_path = format!("/folded?from={}&to={}&comm={comm}", t0 + 5, t0 + RUN - 5);
    let before = samples_with(&b.get(&before_path).text(), "phase_one");
    assert_covers_cpu(
        before,
        ran(t0 + 5, t0 + RUN - 5),
        0.9,
        "phase_one before the restart, alone",
    );
    drop(b);

    // Offline: the directory copied elsewhere, served without sampling.
    let copy = history_dir("restart-copy");
    let out = Command::new("cp")
        .args(["-a", dir_s, copy.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(out.success());
    let c = Daemon::start(
        &["--history-dir", copy.to_str().unwrap(), "--no-sample"],
        &[],
    );
    let r = c.get(&before_path);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        samples_with(&r.text(), "phase_one"),
        before,
        "the copy serves the same window as the daemon that wrote it"
    );
    let svg = c.get(&format!(
        "/flamegraph.svg?from={}&to={}&comm={comm}",
        t0 + 5,
        t0 + RUN - 5
    ));
    assert_eq!(svg.status, 200);
    assert!(
        svg.text().contains("phase_one"),
        "offline SVG names phase_one"
    );
    drop(c);
    let _ = std::fs::remove_dir_all(&copy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kill -9` while writing: after a restart the history up to
/// `history_write_seconds` and 7 s before the kill is served (here 5 s
/// apart: the default 30 s loses at most 37 s, "a minute" in the test's
/// name). Files torn, corrupted, of another version or planted are
/// skipped and counted, and the rest is still served. The directory and
/// its files keep a local user out: nobody can list, read, add or replace
/// a file.
#[test]
fn a_kill_loses_at_most_a_minute_and_bad_files_are_skipped_and_counted() {
    require_root();
    let dir = history_dir("kill");
    let dir_s = dir.to_str().unwrap();
    let bin = build_c_debian("phases");
    // Writes every 5 s: the same writer as every 30 s, in a 50 s run (it
    // was 100 s at 30 s).
    let every = 5;
    let mut a = Daemon::start(
        &[
            "--history-dir",
            dir_s,
            "--history-write-seconds",
            &every.to_string(),
        ],
        &[],
    );
    let w = Workload::spawn(Command::new(&bin).args(["300", "0"]));
    // Its CPU time, which a busy host shares: each window's phase_one
    // samples (nine tenths of its time) are held to what it ran then.
    let meter = CpuMeter::start(w.pid());
    let t0 = unix_now();
    wait(50_000);
    let killed = unix_now();
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    // Who may touch the directory.
    let md = std::fs::metadata(&dir).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o750, "the directory's mode");
    assert_eq!(md.uid(), 0, "the directory belongs to emberd's user");
    let files = segment_files(&dir);
    assert!(files.len() >= 4, "history files after 50 s: {files:?}");
    let emberd_gid = nix::unistd::Group::from_name("emberd")
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw());
    for f in &files {
        let m = std::fs::symlink_metadata(f).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640, "{}", f.display());
        assert_eq!(m.uid(), 0, "{}", f.display());
        if let Some(g) = emberd_gid {
            assert_eq!(m.gid(), g, "{} belongs to group emberd", f.display());
        }
    }
    let victim = files[0].to_str().unwrap();
    assert!(!as_nobody(&["ls", dir_s]), "nobody listed the directory");
    assert!(!as_nobody(&["cat", victim]), "nobody read a history file");
    assert!(
        !as_nobody(&["touch", &format!("{dir_s}/cpu.t0.1.30.1.seg")]),
        "nobody added a file"
    );
    assert!(
        !as_nobody(&["cp", "/etc/hostname", victim]),
        "nobody replaced a file"
    );
    assert!(
        !as_nobody(&["mv", victim, "/tmp/emberd-test-stolen"]),
        "nobody moved a file out"
    );

    // After the kill: up to the interval, the seal delay (5 s) and a drain
    // (1 s) before it is served, and no more: the restarted daemon has
    // none of it in memory.
    let b = Daemon::start(&["--history-dir", dir_s], &[]);
    let comm = enc("^phases$");
    let lost = every + 7;
    let (from, to) = (killed - lost - 10, killed - lost);
    let last = b.get(&format!("/folded?from={from}&to={to}&comm={comm}"));
    assert_eq!(last.status, 200, "{}", last.text());
    assert_covers_cpu(
        samples_with(&last.text(), "phase_one"),
        meter.between(from as f64, to as f64),
        0.9,
        &format!(
            "phase_one in the 10 s ending {lost} s before the kill:\n{}",
            last.text()
        ),
    );
    // 50 s, less the last 12 at most (the kill's loss).
    let whole = b.get(&format!("/folded?from={}&to={}&comm={comm}", t0, killed));
    assert_covers_cpu(
        samples_with(&whole.text(), "phase_one"),
        meter.between((t0 + 1) as f64, (killed - lost) as f64),
        0.9,
        &format!("phase_one in the run before the kill:\n{}", whole.text()),
    );

    // Torn, corrupted, other-version and planted files.
    let files = segment_files(&dir);
    let cpu: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("cpu.t0.")
        })
        .collect();
    assert!(cpu.len() >= 3, "cpu files: {cpu:?}");
    // The seconds of the third file on, whole, before any damage.
    let third = file_start(cpu[2]);
    let first = file_start(cpu[0]);
    let rest = |d: &Daemon| {
        let r = d.get(&format!("/folded?from={third}&to={killed}&comm={comm}"));
        assert_eq!(r.status, 200, "{}", r.text());
        samples_with(&r.text(), "phase_one")
    };
    let intact = rest(&b);
    assert_covers_cpu(
        intact,
        meter.between(third.max(t0 + 1) as f64, (killed - lost) as f64),
        0.9,
        &format!("phase_one from the third file on ({third})"),
    );
    drop(b);
    let torn = cpu[0];
    let len = std::fs::metadata(torn).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(torn)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let corrupt = cpu[1];
    let mut bytes = std::fs::read(corrupt).unwrap();
    let n = bytes.len();
    for b in &mut bytes[n - 40..n - 20] {
        *b ^= 0xa5;
    }
    std::fs::write(corrupt, &bytes).unwrap();
    let mut other = std::fs::read(cpu[2]).unwrap();
    other[7] = 9;
    std::fs::write(dir.join("cpu.t0.100.30.abc.seg"), &other).unwrap();
    std::fs::write(
        dir.join("offcpu.t1.200.3600.abd.seg"),
        b"not a segment at all",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), b"someone's file").unwrap();
    std::fs::write(dir.join(".tmp-cpu.t0.300.30.1.seg"), b"half").unwrap();
    let c = Daemon::start(&["--history-dir", dir_s], &[]);
    assert_eq!(rest(&c), intact, "the good files are served as before");
    let damaged = c.get(&format!("/folded?from={first}&to={third}&comm={comm}"));
    assert_eq!(damaged.status, 200, "{}", damaged.text());
    assert_eq!(
        samples_with(&damaged.text(), "phase_one"),
        0,
        "the torn and corrupted files are not served: {}",
        damaged.text()
    );
    let m = c.get("/metrics").text();
    let skipped = |reason: &str| {
        metric(
            &m,
            &format!("emberd_history_files_skipped_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(skipped("truncated"), 1.0, "{m}");
    assert_eq!(skipped("format"), 2.0, "{m}");
    assert_eq!(skipped("corrupt"), 1.0, "{m}");
    assert_eq!(skipped("foreign"), 1.0, "{m}");
    assert_eq!(skipped("temp"), 1.0, "{m}");
    drop(c);
    assert!(
        dir.join("notes.txt").exists(),
        "a file not emberd's is left alone"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory another user could write into is refused with a message
/// that says why and what to do; a full or read-only directory stops the
/// writing only (sampling and serving go on) and says so in a metric.
#[test]
fn an_unsafe_directory_is_refused_and_a_failing_one_only_stops_writing() {
    require_root();
    let dir = history_dir("unsafe");
    std::fs::create_dir_all(&dir).unwrap();
    nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let out = emberd()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--history-dir",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "emberd started on {}", dir.display());
    assert!(
        err.contains("belongs to uid 65534") && err.contains("plant"),
        "the refusal says why: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // A directory that turns read-only under the daemon (a full disk
    // fails the same way): writes fail, the daemon samples and serves.
    let dir = history_dir("ro");
    // Writes every 5 s: the first fails within 11 s.
    let d = Daemon::start(
        &[
            "--history-dir",
            dir.to_str().unwrap(),
            "--history-write-seconds",
            "5",
        ],
        &[],
    );
    let mount = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "tmpfs",
            dir.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(
        mount.success(),
        "mounting a 64 KiB tmpfs over the directory"
    );
    // Filled: every write fails for want of space.
    let _ = std::fs::write(dir.join("filler"), vec![0u8; 64 << 10]);
    wait(20_000);
    let m = d.get("/metrics").text();
    let umount = Command::new("umount").arg(&dir).status();
    assert!(
        metric(&m, "emberd_history_write_errors_total") >= 1.0,
        "writes failed and were counted: {m}"
    );
    assert_eq!(metric(&m, "emberd_history_writing"), 0.0, "{m}");
    let r = d.get("/folded?seconds=10");
    assert_eq!(r.status, 200);
    assert!(!r.text().is_empty(), "sampling goes on");
    drop(d);
    assert!(umount.is_ok_and(|s| s.success()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A week and a half of drains (synthetic: 24 processes of 5 threads, a
/// new set of pids every hour, stacks 8 to 40 frames deep, every second's
/// total known) replayed through the real store and writer at accelerated
/// time: the files stay within the age limit, tiers are rolled up as
/// stated (1 s for the last one to two hours, 10 s for a day to a day and
/// six hours, 60 s beyond), every second's total is served over the whole week, a query
/// over the week sums exactly what was drained, the web page's history
/// strip spans the week and a selection of four hours on it opens that
/// window, and a smaller budget keeps the newest files and drops the
/// oldest first.
#[test]
fn a_week_replayed_keeps_the_newest_within_age_and_budget_and_the_page_spans_it() {
    use emberd::shared::{Frame, FrameKind, Pid, Tid};
    use emberd::store::disk::{Archive, DiskOptions};
    use emberd::store::{History, HistoryOptions, Selection};
    use emberd::symbolize::SymbolizedSample;
    use std::sync::Arc;

    const DAY: u64 = 86400;
    let dir = history_dir_in_memory("replay");
    let options = |budget: u64| DiskOptions {
        dir: dir.clone(),
        budget_bytes: budget,
        max_age: 7 * DAY,
        read_only: false,
        query_bytes: 64 << 20,
        write_every: 30,
    };
    // Ends a few minutes before now: the disk answers for all but memory's
    // last five minutes, as in a daemon.
    let now = emberd::shared::clock::now();
    let end = now - now % 3600 - 600;
    let start = end - 7 * DAY - 12 * 3600;
    let archive = Arc::new(Archive::open(options(1 << 40)).expect("opening the directory"));
    let history = History::new(&HistoryOptions {
        retention: std::time::Duration::from_secs(3600),
        memory_budget: 12 << 20,
        events: Vec::new(),
        heap_entries: None,
        disk: Some((archive.clone(), start)),
    });
    let names: Vec<Arc<str>> = (0..400)
        .map(|i| Arc::from(format!("module{}::function_{i}", i % 13).as_str()))
        .collect();
    // Each day's stacks end in a function of that day's: a window shows
    // which days it read.
    let days: Vec<Arc<str>> = (0..9)
        .map(|d| Arc::from(format!("day{d}_work").as_str()))
        .collect();
    let comms: Vec<Arc<str>> = (0..24)
        .map(|i| Arc::from(format!("service{i}").as_str()))
        .collect();
    let mut expected: std::collections::HashMap<u64, u64> = Default::default();
    let mut recycled = Vec::new();
    for t in start..end {
        let epoch = (t - start) / 3600;
        let mut drain = Vec::with_capacity(16);
        let mut total = 0;
        for i in 0..16u64 {
            let p = (t * 7 + i * 13) % 24;
            let depth = 8 + ((t + i * 5) % 33) as usize;
            let frames = (0..depth)
                .map(|d| {
                    Frame::new(
                        names[(p as usize * 17 + d * 3 + (i as usize % 4)) % 400].clone(),
                        FrameKind::User,
                    )
                })
                .chain(std::iter::once(Frame::new(
                    days[((t - start) / DAY) as usize].clone(),
                    FrameKind::User,
                )))
                .collect();
            let count = 1 + (t + i) % 7;
            total += count;
            let pid = (10_000 + epoch * 100 + p) as u32;
            drain.push(SymbolizedSample {
                pid: Pid(pid),
                tid: Tid(pid + (i % 5) as u32),
                thread_comm: comms[p as usize].clone(),
                process_comm: comms[p as usize].clone(),
                frames,
                workload: Default::default(),
                account: 0,
                count,
                at_ms: None,
            });
        }
        expected.insert(t, total);
        let (_, used) = history.insert(t, None, drain, Vec::new());
        recycled = used;
        if t % 300 == 0 {
            history.sync_disk();
        }
    }
    drop(recycled);
    history.sync_disk();
    archive.maintain(end);

    // Age: nothing ends more than 7 days back; tiers where stated.
    let files = archive.files("cpu", 0, u64::MAX);
    assert!(!files.is_empty());
    let oldest = files.iter().map(|f| f.start).min().unwrap();
    assert!(
        oldest + 7 * DAY + 6 * 3600 >= end && oldest + 7 * DAY <= end + 6 * 3600,
        "oldest file starts {} s before the end",
        end - oldest
    );
    for f in &files {
        let age = end - f.end();
        match f.tier {
            0 => assert!(age <= 2 * 3600 + 60, "a 1 s file {age} s old"),
            1 => assert!(
                // A six-hour group rolls up once its last hour is a day old.
                (3600..=DAY + 6 * 3600).contains(&age),
                "a 10 s file {age} s old"
            ),
            2 => assert!(age >= DAY, "a 60 s file {age} s old"),
            t => panic!("tier {t}"),
        }
        assert_eq!(f.resolution, [1, 10, 60][f.tier as usize]);
    }
    let tiers = archive.size_by_tier();
    assert!(
        tiers.iter().all(|(_, n)| *n > 0),
        "every tier holds files: {tiers:?}"
    );
    let c = &archive.counters;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(c.dropped_queue.load(Relaxed), 0);
    assert_eq!(c.write_errors.load(Relaxed), 0);
    assert!(c.dropped_age.load(Relaxed) > 0);

    // Every second's total, an hour at a time, in each tier.
    let store = history.cpu_store();
    for back in [6 * DAY, 3 * DAY, 12 * 3600, 5400] {
        let from = end - back;
        let sel = Selection {
            from,
            to: from + 3600,
            ..Default::default()
        };
        let line = store.timeline(&sel);
        assert_eq!(line.len(), 3600, "{back} s back: one slot a second");
        for s in &line {
            assert_eq!(s.len, 1);
            assert_eq!(Some(&s.value), expected.get(&s.start), "second {}", s.start);
        }
    }
    // The week's sum, exactly (windows on slot bounds).
    let from = oldest.div_ceil(6 * 3600) * 6 * 3600;
    let to = end - 7200;
    let sel = Selection {
        from,
        to,
        ..Default::default()
    };
    let rows = store.select(&sel);
    let got: u64 = rows.rows.iter().map(|r| r.value).sum();
    let want: u64 = (from..to).map(|t| expected[&t]).sum();
    assert_eq!(got, want, "the week's samples from {from} to {to}");
    assert!(rows.rows.iter().any(|r| rows.frames(r.stack).count() >= 8));

    // The web page's strip spans the week, and a selection on it opens
    // that window: a daemon serving the directory (read only), in chromium.
    let d = Daemon::start(
        &["--history-dir", dir.to_str().unwrap(), "--no-sample"],
        &[],
    );
    let b = crate::common::browser::Browser::start();
    let origin = format!("http://127.0.0.1:{}", d.port);
    b.goto(&format!("{origin}/#event=cpu&range=604800"));
    let shots = fresh_scratch("history-week-page");
    crate::web::page_loaded(&b, &origin, &shots.join("1-week.png"));
    let heat = b.eval(
        "var h = window.emberd.heat; return {from: h.from, to: h.to, history_from: h.history_from,
         slots: h.slots.length, first: h.slots.length ? h.slots[0][0] : 0};",
    );
    let get = |k: &str| heat[k].as_f64().unwrap_or(0.0);
    assert!(
        (get("to") - get("from") - 604800.0).abs() < 2.0,
        "the strip spans 7 days: {heat}"
    );
    assert!(
        get("first") < get("from") + 12.0 * 3600.0 && get("slots") > 5000.0,
        "the strip holds the week's slots from its start: {heat}"
    );
    // Day 3 of the replay, 02:00 to 06:00 into it.
    let day3 = start + 3 * DAY;
    let (a, z) = (day3 + 2 * 3600, day3 + 6 * 3600);
    let loads = b.eval("return window.emberd.loads;").as_u64().unwrap();
    crate::web::drag(&b, a as f64, z as f64);
    crate::web::wait_loads(&b, loads + 1);
    b.screenshot(&shots.join("2-day3.png"));
    let totals = b.eval("return window.emberd.frameTotals();");
    let t = |n: &str| totals[n].as_f64().unwrap_or(0.0);
    // The window the drag selected, from the page's address: a mouse
    // event's position is whole pixels (Chromium), and a pixel of the
    // week's strip is several minutes, so the selection is the drag's
    // within a pixel each end, not to the second (a run missed the 2%
    // asked of the totals at 3.3%, about one pixel, when the totals were
    // held to the drag's own seconds).
    let hash = b.eval("return location.hash;");
    let field = |k: &str| -> u64 {
        let hash = hash.as_str().unwrap_or_default();
        hash.trim_start_matches('#')
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {k} in the page's address {hash}")) as u64
    };
    let (from, to) = (field("from"), field("to"));
    let pixel = b
        .eval("return (window.emberd.heat.to - window.emberd.heat.from) / document.getElementById('heatmap').getBoundingClientRect().width;")
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        (from as f64 - a as f64).abs() <= pixel + 1.0
            && (to as f64 - z as f64).abs() <= pixel + 1.0,
        "the drag over {a}..{z} selected {from}..{to} (a pixel is {pixel:.0} s)"
    );
    // Day 3 is in the 60 s tier: a window off its slots' bounds reads the
    // slots it overlaps, a minute at most each end.
    let want: u64 = (from..to).map(|s| expected[&s]).sum();
    assert!(
        (t("day3_work") - want as f64).abs() < want as f64 * 0.02,
        "the selection {from}..{to} shows day 3's {want} samples: {totals}"
    );
    assert_eq!(
        t("day2_work") + t("day4_work"),
        0.0,
        "and no other day's: {totals}"
    );
    drop(b);
    drop(d);

    // A budget of half the bytes: the oldest go, the newest stay.
    let (bytes, _) = archive.size();
    let newest = archive.newest().unwrap();
    drop(history);
    drop(archive);
    let smaller = Archive::open(options(bytes / 2)).unwrap();
    smaller.maintain(end);
    let (after, _) = smaller.size();
    assert!(after <= bytes / 2, "{after} bytes > budget {}", bytes / 2);
    assert_eq!(smaller.newest(), Some(newest), "the newest file stays");
    assert!(
        smaller.oldest("cpu").unwrap() > oldest,
        "the oldest went first"
    );
    assert!(smaller.counters.dropped_budget.load(Relaxed) > 0);
    eprintln!(
        "replay: {} s drained; {bytes} bytes on disk ({tiers:?} by tier), {after} after halving the budget",
        end - start
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `emberd check` says where the history is kept, what it holds and which
/// files do not read, and changes nothing there (a start would remove the
/// unreadable file and reset the mode); `history_dir = ""` is reported off.
#[test]
fn check_reports_the_history_directory_and_changes_nothing() {
    use emberd::shared::{Frame, FrameKind};
    use emberd::store::disk::segment::{Builder, ThreadRec};
    use emberd::store::disk::{Archive, DiskOptions, file_name};
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let dir = history_dir("check");
    let archive = Archive::open(DiskOptions {
        dir: dir.clone(),
        budget_bytes: 64 << 20,
        max_age: 7 * 86400,
        read_only: false,
        query_bytes: 64 << 20,
        write_every: 30,
    })
    .expect("making the directory");
    let now = emberd::shared::clock::now();
    let start = now - now % 30 - 3600;
    let mut b = Builder::new(1);
    let name = b.string("worker");
    let t = b.thread(ThreadRec::plain(42, 42, name));
    let f = b.frame(&Frame::new("work", FrameKind::User));
    let s = b.stack(&[f]);
    for sec in start..start + 30 {
        b.add(sec, 1, t, s, 99);
        b.add_total(sec, 99);
    }
    b.cover(start, start + 30);
    archive
        .write("cpu", 0, b)
        .expect("writing a file")
        .expect("a file written");
    let garbage = dir.join(file_name("cpu", 0, start + 30, 30, 7));
    std::fs::write(&garbage, b"not a segment").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let check = |config: &str| {
        let path = scratch().join("check-history.toml");
        std::fs::write(&path, config).unwrap();
        let out = emberd()
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .expect("running emberd check");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find(|l| l.contains("] history on disk"))
            .unwrap_or_else(|| panic!("no history line in:\n{text}"))
            .to_owned()
    };
    // Nothing listens on port 9: no daemon's metrics are read.
    let line = check(&format!(
        "listen = \"127.0.0.1:9\"\nhistory_dir = \"{}\"\n",
        dir.display()
    ));
    for want in [
        &format!("{}: root's, mode 0700; 1 file,", dir.display()),
        "of 1024 MiB, 7 days at most, from 1 h ",
        "(tier 0: 1 file ",
        "1 file not read",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
    assert!(line.starts_with("[ok"), "{line}");
    assert!(garbage.exists(), "check removed the unreadable file");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "check changed the directory's mode");
    let off = check("listen = \"127.0.0.1:9\"\nhistory_dir = \"\"\n");
    assert!(
        off.starts_with("[limited]") && off.contains("off (history_dir = \"\")"),
        "{off}"
    );
}
