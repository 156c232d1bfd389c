//! Unwinding on a busy host (issue 43): a compile's big binaries (rustc's
//! `librustc_driver` and `libLLVM`, cargo, cc1, clang) and short processes
//! of big binaries beside the programs being profiled, and what a table
//! that finds no room says.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use emberd::profile::Profile;

use crate::common::*;

/// Collects the daemon's log (stderr) until it exits: read on a thread, so
/// that a chatty log cannot fill the pipe and stall it.
fn read_log(d: &mut Daemon) -> std::thread::JoinHandle<String> {
    let mut err = d.child.stderr.take().expect("the daemon's stderr");
    std::thread::spawn(move || {
        let mut text = String::new();
        use std::io::Read;
        err.read_to_string(&mut text).ok();
        text
    })
}

/// The long-running programs measured beside a load: a C chain built
/// with Debian's flags (no frame pointers) and Debian's python3 running
/// busy.py.
struct Service {
    c: Workload,
    py: Workload,
}

/// What [`Service::figures`] found over a window.
struct ServiceFigures {
    /// The C chain's samples with main;level_a;level_b;level_c from the root.
    c_whole: u64,
    c_all: u64,
    /// python3's samples with `<module>;outer` under the native root.
    py_whole: u64,
    py_all: u64,
    cp: Profile,
    pp: Profile,
}

impl Service {
    /// Starts both, running `secs` seconds; `chain` is deep_chain built.
    fn start(chain: &std::path::Path, secs: u32) -> Service {
        Service {
            c: Workload::spawn(Command::new(chain).arg(secs.to_string())),
            py: Workload::spawn(
                Command::new("/usr/bin/python3")
                    .arg(workload("busy.py"))
                    .arg(secs.to_string()),
            ),
        }
    }

    /// Their samples of the last `secs` seconds, whole and all.
    fn figures(&self, d: &Daemon, secs: u64) -> ServiceFigures {
        let of =
            |pid: u32| parse_folded(&d.get(&format!("/folded?seconds={secs}&pid={pid}")).text());
        let (cp, pp) = (of(self.c.pid()), of(self.py.pid()));
        ServiceFigures {
            c_whole: sum_where(&cp, |f| {
                has_seq(f, &["main", "level_a", "level_b", "level_c"]) && reaches_root(f)
            }),
            c_all: sum_where(&cp, |_| true),
            py_whole: sum_where(&pp, |f| {
                has_seq(f, &["<module> (busy.py)", "outer (busy.py)"]) && reaches_root(f)
            }),
            py_all: sum_where(&pp, |_| true),
            cp,
            pp,
        }
    }
}

/// Whether a folded stack holds a marker: its walk did not reach the root.
fn marked(f: &[&str]) -> bool {
    f.iter().any(|x| is_marker(x))
}

/// (whole, all) samples of `p` whose first frame satisfies `who`.
fn whole_of(p: &Profile, who: impl Fn(&str) -> bool) -> (u64, u64) {
    (
        sum_where(p, |f| who(f[0]) && !marked(f)),
        sum_where(p, |f| who(f[0])),
    )
}

fn pct(part: u64, all: u64) -> f64 {
    100.0 * part as f64 / all.max(1) as f64
}

/// The markers of `p` and their samples, most first.
fn markers(p: &Profile) -> String {
    let mut by: std::collections::HashMap<String, u64> = Default::default();
    for (s, v) in p.sorted() {
        if let Some(m) = s.frames().find(|x| is_marker(x)) {
            let who = s.frames().next().unwrap_or("");
            let comm = who.rsplit_once('-').map_or(who, |(c, _)| c);
            *by.entry(format!("{comm}: {m}")).or_default() += v;
        }
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v.iter()
        .take(12)
        .map(|(m, n)| format!("{n:>7}  {m}\n"))
        .collect()
}

/// A `cargo build --release` beside a frameless C program (built with
/// Debian's flags) and Debian's python3 started during the build: over
/// 20 s of the compile at least 97% of all the host's samples are whole
/// (no marker), and at least 99% of the C program's (main;level_a;level_b;
/// level_c from the root) and of python3's (its Python functions under
/// `<module>`, down to the native root). The compile's own share is
/// printed. Before issue 43 the 16 MiB budget of 8-byte rows could not
/// hold the compile's tables: 3% of the host's samples were whole, and
/// python3's table was refused for its whole life (`[no unwind info:
/// python3.11]`).
#[test]
fn a_compile_beside_them_leaves_stacks_whole() {
    require_root();
    let c = build_c_debian("deep_chain");
    let d = Daemon::start(&[], &[]);
    let before = d.get("/metrics").text();
    let mut compile = Compile::start("busy-compile");
    // Into the compile's crowd of rustc processes before these start.
    wait(8000);
    compile.still_running();
    let service = Service::start(&c, 40);
    wait(5000);
    let started = Instant::now();
    wait(20_000);
    compile.still_running();
    let host = parse_folded(&d.get("/folded?seconds=20").text());
    let s = service.figures(&d, 20);
    let after = d.get("/metrics").text();
    let taken = started.elapsed();
    drop(compile);

    let (host_whole, host_all) = whole_of(&host, |_| true);
    let (rustc_whole, rustc_all) = whole_of(&host, |c| c == "rustc");
    let ServiceFigures {
        c_whole,
        c_all,
        py_whole,
        py_all,
        ..
    } = s;
    let delta = |name: &str| metric(&after, name) - metric(&before, name);
    eprintln!(
        "{taken:?} of a compile: host {:.1}% of {host_all} samples whole, rustc {:.1}% of \
         {rustc_all}, deep_chain {:.1}% of {c_all}, python3 {:.1}% of {py_all}; tables: {} \
         bytes of {} held, budget_refused {}, evicted {}, over_file_share {}, \
         table_evicted_cold {}\nmarkers:\n{}",
        pct(host_whole, host_all),
        pct(rustc_whole, rustc_all),
        pct(c_whole, c_all),
        pct(py_whole, py_all),
        metric(&after, "emberd_unwind_tables{map=\"bytes\"}"),
        metric(&after, "emberd_unwind_tables{map=\"budget_bytes\"}"),
        delta("emberd_unwind_table_events_total{reason=\"budget_refused\"}"),
        delta("emberd_unwind_table_events_total{reason=\"evicted\"}"),
        delta("emberd_unwind_table_events_total{reason=\"over_file_share\"}"),
        delta("emberd_unwind_table_events_total{reason=\"table_evicted_cold\"}"),
        markers(&host),
    );
    assert!(
        rustc_all * 5 >= host_all,
        "the compile should take a good part of the host's samples: rustc has {rustc_all} of \
         {host_all}"
    );
    assert!(
        c_all >= 200 && py_all >= 200,
        "the C program ({c_all}) and python3 ({py_all}) should each have hundreds of samples"
    );
    assert!(
        host_whole * 100 >= host_all * 97,
        "{:.1}% of the host's {host_all} samples whole during the compile, expected >= 97%:\n{}",
        pct(host_whole, host_all),
        markers(&host)
    );
    assert!(
        c_whole * 100 >= c_all * 99,
        "{:.1}% of deep_chain's {c_all} samples whole (main;level_a;level_b;level_c from the \
         root), expected >= 99%:\n{}",
        pct(c_whole, c_all),
        top(&s.cp, 6)
    );
    assert!(
        py_whole * 100 >= py_all * 99,
        "{:.1}% of python3's {py_all} samples whole (<module>;outer under the native root), \
         expected >= 99%:\n{}",
        pct(py_whole, py_all),
        top(&s.pp, 6)
    );
}

/// Short processes of big binaries starting and exiting several times a
/// second beside a long-running service, with a budget (8 MiB) the big
/// binaries' tables overflow: each of 16 fresh copies of gcc's cc1 (a
/// 2.4 MB `.eh_frame`, 1.9 MB of rows: like the build scripts and test
/// binaries a build runs, each a new file) compiles a 50-function C file
/// (about 0.15 s) 3 times in a row; each copy has its own build id, as
/// each new binary of a build does. The service's stacks (a frameless C
/// program and Debian's python3) stay whole and its tables are never taken
/// back (the daemon's log names every table taken back: only tables of
/// processes idle for 30 s may be); the copies' tables make room for each
/// other, oldest first, and each is built about once, not at each run.
#[test]
fn short_processes_of_big_binaries_leave_a_services_table_alone() {
    require_root();
    let cc1 = PathBuf::from("/usr/lib/gcc/x86_64-linux-gnu/12/cc1");
    assert!(
        cc1.exists(),
        "this test runs copies of gcc 12's cc1 ({}): apt-get install gcc",
        cc1.display()
    );
    let c = build_c_debian("deep_chain");
    let mut d = Daemon::start(
        &["--unwind-table-budget-mib", "8"],
        &[("EMBERD_LOG", "info,emberd::unwind=debug")],
    );
    let log = read_log(&mut d);
    let service = Service::start(&c, 40);
    wait(3000);
    let before = d.get("/metrics").text();
    let dir = scratch().join("churn");
    std::fs::create_dir_all(&dir).unwrap();
    // What each run compiles: 50 functions that call libc, preprocessed.
    let src = dir.join("gen.c");
    let mut text = String::from("#include <stdio.h>\n");
    for i in 0..50 {
        text += &format!(
            "int f{i}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += j * {i} % 7; \
             return s + printf(\"%d\", s); }}\n"
        );
    }
    std::fs::write(&src, text).unwrap();
    let pre = dir.join("gen.i");
    let status = Command::new("gcc")
        .arg("-E")
        .arg(&src)
        .arg("-o")
        .arg(&pre)
        .status()
        .expect("running gcc -E");
    assert!(status.success(), "gcc -E failed");
    let started = Instant::now();
    let mut runs = 0;
    for i in 0..16 {
        let sub = dir.join(i.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        let copy = sub.join("cc1");
        let _ = std::fs::remove_file(&copy);
        // Its own build id, as a fresh build's binary has (copies with one
        // build id would share one table).
        let mut bytes = std::fs::read(&cc1).unwrap();
        let (off, size) = super::section(&cc1, ".note.gnu.build-id");
        bytes[(off + size - 1) as usize] ^= 0x80 | i as u8;
        std::fs::write(&copy, &bytes).unwrap();
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for _ in 0..3 {
            let out = Command::new(&copy)
                .args(["-fpreprocessed", "-quiet", "-O2"])
                .arg(&pre)
                .args(["-o", "/dev/null"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("running a copy of cc1");
            assert!(
                out.success(),
                "a copy of cc1 failed to compile {}",
                pre.display()
            );
            runs += 1;
            wait(100);
        }
    }
    let churned = started.elapsed();
    wait(1500);
    let secs = churned.as_secs().max(5);
    let after = d.get("/metrics").text();
    let s = service.figures(&d, secs);
    let delta = |reason: &str| {
        metric(
            &after,
            &format!("emberd_unwind_table_events_total{{reason=\"{reason}\"}}"),
        ) - metric(
            &before,
            &format!("emberd_unwind_table_events_total{{reason=\"{reason}\"}}"),
        )
    };
    let ServiceFigures {
        c_whole,
        c_all,
        py_whole,
        py_all,
        ..
    } = s;
    d.terminate();
    let _ = d.child.wait();
    let log = log.join().unwrap();
    // Per file, from the daemon's log: tables built (placed or refused)
    // and tables taken back while in use.
    let count = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    let copy_builds = count("unwind table for cc1:")
        + count("budget full: cc1")
        + count("budget still full for cc1");
    let service_taken = count("table of deep_chain taken back")
        + count("table of python3.11 taken back")
        + count("table of libc.so.6 taken back");
    let (built, evicted, cold, share, refused, retried) = (
        delta("built"),
        delta("evicted"),
        delta("table_evicted_cold"),
        delta("table_evicted_for_share"),
        delta("budget_refused"),
        delta("no_room_retried"),
    );
    eprintln!(
        "{runs} runs of 16 copies of cc1 in {churned:?}: deep_chain {:.1}% of {c_all} whole, \
         python3 {:.1}% of {py_all}; tables built {built}, evicted {evicted}, in use taken back \
         {cold} (cold) + {share} (share), budget refusals {refused}, built again once room \
         was made {retried}; the copies' tables built {copy_builds} times; the service's taken \
         back {service_taken} times\nservice stacks not whole:\n{}{}",
        pct(c_whole, c_all),
        pct(py_whole, py_all),
        markers(&s.cp),
        markers(&s.pp),
    );
    assert!(
        evicted >= 8.0,
        "16 copies' tables of 1.9 MB each cannot all stay in 8 MiB: only {evicted} evicted"
    );
    assert!(
        refused <= 1.0,
        "a copy's table waits for no room while copies that have exited hold it: \
         {refused} budget refusals"
    );
    assert!(
        (16..=24).contains(&copy_builds),
        "each copy's table is built about once (16), not at each of its 3 runs (48): \
         {copy_builds} builds"
    );
    assert!(
        service_taken == 0 && share == 0.0,
        "the service's tables are never taken back for the short processes: {service_taken} \
         times ({cold} tables of processes idle for 30 s were)"
    );
    assert!(
        c_all >= 300 && c_whole * 100 >= c_all * 99,
        "{:.1}% of deep_chain's {c_all} samples whole, expected >= 99%:\n{}",
        pct(c_whole, c_all),
        top(&s.cp, 6)
    );
    assert!(
        py_all >= 300 && py_whole * 100 >= py_all * 99,
        "{:.1}% of python3's {py_all} samples whole, expected >= 99%:\n{}",
        pct(py_whole, py_all),
        top(&s.pp, 6)
    );
}

/// What a table without room says, and what a file without CFI says: with
/// a 1 MiB budget (one file may take 256 KiB) pyenv's libpython3.12 (a
/// 320 KB `.eh_frame`, 277 KB of rows) is refused, and where frame
/// pointers fail in it the stack ends `[unwind error: table budget full:
/// libpython3.12.so.1.0]`, counted (`over_file_share`, and the
/// `table_budget_full` end); never `[no unwind info: ...]`, which a copy of
/// the frameless C program with its `.eh_frame` removed still shows.
#[test]
fn a_table_without_room_is_marked_budget_full_and_a_file_without_cfi_no_unwind_info() {
    require_root();
    let root = Command::new("pyenv")
        .arg("root")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .expect(
            "pyenv is needed (pyenv's CPython 3.12 has a libpython3.12.so over 256 KiB of rows)",
        );
    let py312 = std::fs::read_dir(root.join("versions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("3.12."))
        })
        .map(|p| p.join("bin/python3"))
        .expect("pyenv's CPython 3.12 is needed: pyenv install 3.12");
    // deep_chain without CFI: no .eh_frame, no frame pointers.
    let nocfi = build_c_with(
        "deep_chain",
        "nocfi",
        &[
            "-O2",
            "-fomit-frame-pointer",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let status = Command::new("objcopy")
        .args(["-R", ".eh_frame", "-R", ".eh_frame_hdr"])
        .arg(&nocfi)
        .status()
        .expect("running objcopy");
    assert!(status.success(), "objcopy -R .eh_frame failed");

    let d = Daemon::start(&["--unwind-table-budget-mib", "1"], &[]);
    let before = d.get("/metrics").text();
    let pw = Workload::spawn(Command::new(&py312).arg(workload("busy.py")).arg("12"));
    let cw = Workload::spawn(Command::new(&nocfi).arg("12"));
    let meter = CpuMeter::start(cw.pid());
    wait(9000);
    // deep_chain's count is held to the CPU it ran in a 6 s window, asked
    // for once every drain has reached its end: asked at once, the last
    // drains' samples were not in yet (CI, beside a kernel VM and a build:
    // 44 samples for 1.16 s of CPU).
    let to = unix_now() - 1;
    let from = to - 6;
    wait(3000);
    let c_ran = meter.between(from as f64, to as f64);
    let window = |pid: u32| {
        parse_folded(
            &d.get(&format!("/folded?from={from}&to={to}&pid={pid}"))
                .text(),
        )
    };
    let cp = window(cw.pid());
    let pp = window(pw.pid());
    let after = d.get("/metrics").text();
    let budget_marker = "[unwind error: table budget full: libpython3.12.so.1.0]";
    let py_all = sum_where(&pp, |_| true);
    let py_budget = sum_where(&pp, |f| f.contains(&budget_marker));
    let py_no_info = sum_where(&pp, |f| f.iter().any(|x| x.starts_with("[no unwind info:")));
    let c_all = sum_where(&cp, |_| true);
    let c_no_info = sum_where(&cp, |f| f.contains(&"[no unwind info: deep_chain]"));
    let c_budget = sum_where(&cp, |f| {
        f.iter()
            .any(|x| x.starts_with("[unwind error: table budget full"))
    });
    let delta = |name: &str| metric(&after, name) - metric(&before, name);
    let over_share = delta("emberd_unwind_table_events_total{reason=\"over_file_share\"}");
    let ended_budget = delta("emberd_user_stacks_total{event=\"cpu\",end=\"table_budget_full\"}");
    eprintln!(
        "python3.12: {py_budget} of {py_all} samples with the budget marker, {py_no_info} no \
         unwind info; deep_chain without CFI: {c_no_info} of {c_all} no unwind info, {c_budget} \
         budget; over_file_share {over_share}, walks ended table_budget_full {ended_budget}"
    );
    assert!(
        py_budget * 10 >= py_all && py_no_info == 0,
        "python3.12's stacks through its refused libpython end in {budget_marker} \
         ({py_budget} of {py_all}), never [no unwind info] ({py_no_info}):\n{}",
        top(&pp, 6)
    );
    assert!(
        over_share >= 1.0 && ended_budget >= py_budget as f64 / 2.0,
        "the refusal and the walks it ended are counted: over_file_share {over_share}, \
         table_budget_full ends {ended_budget}"
    );
    assert_covers_cpu(
        c_all,
        c_ran,
        1.0,
        &format!("deep_chain without CFI:\n{}", top(&cp, 6)),
    );
    assert!(
        c_no_info * 10 >= c_all * 9 && c_budget == 0,
        "a file without CFI still says [no unwind info: deep_chain] ({c_no_info} of {c_all}; \
         budget marker {c_budget}):\n{}",
        top(&cp, 6)
    );
}
