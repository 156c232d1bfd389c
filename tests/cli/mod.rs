use std::path::Path;
use std::process::Command;

use crate::common::*;

/// An output name without a known extension is refused before sampling.
#[test]
fn unknown_output_format_is_an_error() {
    let out = run_record(&scratch().join("profile.dat"), &["-s", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(".folded") && err.contains(".svg"),
        "the error should name the formats: {err}"
    );
}

/// A pid that does not exist is a clear error.
#[test]
fn missing_pid_is_an_error() {
    require_root();
    let out = run_record(
        &scratch().join("nopid.folded"),
        &["-s", "1", "-p", "2147483646"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no process with pid 2147483646"), "{err}");
}

/// An out-of-range frequency names the flag and the range.
#[test]
fn bad_frequency_is_an_error() {
    require_root();
    let out = run_record(&scratch().join("f.folded"), &["-s", "1", "-F", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--frequency 0 is out of range"), "{err}");
}

/// Without privileges, record says what is missing and what to do instead of
/// failing obscurely inside libbpf.
#[test]
fn unprivileged_record_names_missing_capabilities() {
    require_root();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_emberd"))
        .args(["record", "-s", "1", "-o", "/dev/null.folded"])
        .output()
        .expect("running setpriv (util-linux)");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // The output file cannot be created either; whichever comes first, the
    // message must say what failed.
    assert!(
        err.contains("CAP_BPF") || err.contains("cannot create"),
        "{err}"
    );
    // An output path user nobody can create (the system's temporary
    // directory, named per run), so that only the capabilities can fail.
    let output = std::env::temp_dir().join(format!("emberd-unpriv-{}.folded", std::process::id()));
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_emberd"))
        .args(["record", "-s", "1", "-o"])
        .arg(&output)
        .output()
        .expect("running setpriv (util-linux)");
    let _ = std::fs::remove_file(&output);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("missing CAP_BPF, CAP_PERFMON") && err.contains("run as root"),
        "{err}"
    );
}

/// `emberd check` as root: BPF and perf events work, and it says so.
#[test]
fn check_reports_a_working_sampler() {
    require_root();
    let out = emberd()
        .arg("check")
        .output()
        .expect("running emberd check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("[ok     ] BPF + perf events"), "{text}");
    assert!(text.contains("[ok     ] kallsyms"), "{text}");
    assert!(text.contains("emberd can sample here"), "{text}");
    // The report is all it prints: no log line (its own malloc tracing)
    // before its first line.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.trim().is_empty(), "check logged: {err}");
    assert!(text.starts_with("[ok     ] privileges"), "{text}");
}

/// `emberd check` as a user who cannot load BPF says so in its first line,
/// and reports nothing it could not find out: no libbpf advice, no count
/// of Python processes it could not see, no sysctl to set.
#[test]
fn unprivileged_check_says_so_first() {
    require_root();
    let out = run_as(NOBODY, Path::new(env!("CARGO_BIN_EXE_emberd")))
        .arg("check")
        .output()
        .expect("running setpriv (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    let first = text.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "emberd check: not root (uid 65534) and no CAP_BPF/CAP_PERFMON: cannot load BPF programs; run as root (sudo emberd check) for the full report",
        "{text}"
    );
    assert!(err.trim().is_empty(), "stderr: {err}");
    for guess in [
        "Python processes running",
        "kptr_restrict",
        "RLIMIT_MEMLOCK",
    ] {
        assert!(!text.contains(guess), "{guess:?} in\n{text}");
    }
    assert!(text.contains("[skipped]"), "{text}");
}

/// `emberd record --help` names every event `-e` takes and every output
/// suffix `-o` knows, malloc and .pb.gz included.
#[test]
fn record_help_lists_every_event_and_format() {
    let out = emberd()
        .args(["record", "--help"])
        .output()
        .expect("running emberd");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for e in emberd::query::Event::ALL {
        assert!(help.contains(e.name()), "{} missing from\n{help}", e.name());
    }
    for suffix in ["*.folded", "*.txt", "*.svg", "*.pb.gz"] {
        assert!(help.contains(suffix), "{suffix} missing from\n{help}");
    }
}

/// `emberd record -e offcpu` counts what it kept in microseconds, the
/// folded file's unit, not in samples; the figure is the file's total.
#[test]
fn record_summary_names_the_unit() {
    require_root();
    // A shell waiting on short sleeps: blocked most of the time, woken
    // ten times a second (a period is charged when it ends).
    let w = Workload::spawn(Command::new("sh").args(["-c", "while :; do sleep 0.1; done"]));
    let path = scratch().join("sleep-offcpu.folded");
    let pid = w.pid().to_string();
    let out = run_record(&path, &["-s", "2", "-e", "offcpu", "-p", &pid]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("samples kept"), "{err}");
    // [ emberd record: 2.0 s, 1999512 us of offcpu kept in 1 stacks (...
    let kept: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("[ emberd record: "))
        .and_then(|l| l.split_once(" s, "))
        .and_then(|(_, rest)| rest.split_once(" us of offcpu kept in "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no \"N us of offcpu kept\" in {err}"));
    let text = std::fs::read(&path).unwrap();
    let profile = emberd::render::folded::read(&text[..]).unwrap();
    assert_eq!(kept, profile.total(), "{err}");
    assert!(kept > 500_000, "the shell blocked {kept} us of 2 s: {err}");
}

/// `-o x.svg` writes an inferno flame graph naming the hot function, with a
/// title naming the event and host.
#[test]
fn svg_output_names_hot_function() {
    require_root();
    let bin = build_c("cpu_70_30");
    // Outlives the recorder's start on a busy host (killed when dropped).
    let w = Workload::spawn(Command::new(&bin).arg("30"));
    wait(200);
    let path = scratch().join("cpu.svg");
    let pid = w.pid().to_string();
    let out = run_record(&path, &["-s", "2", "-p", &pid]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<?xml"), "not an SVG document");
    assert!(svg.trim_end().ends_with("</svg>"), "SVG is cut short");
    assert!(svg.contains("CPU Flame Graph (samples): "), "title missing");
    assert!(svg.contains("hot_a"), "hot_a missing from the SVG");
    assert!(svg.contains("<script"), "the SVG should be interactive");
}

/// `emberd record -o OUT -- COMMAND...`, run to its end.
fn record_command(out: &std::path::Path, command: &[&std::ffi::OsStr]) -> std::process::Output {
    emberd()
        .args(["record", "-o"])
        .arg(out)
        .arg("--")
        .args(command)
        .output()
        .expect("running emberd")
}

/// `emberd record -p PID` ends when the process exits, as `perf record -p`
/// does, also while its parent has not reaped it (a zombie has no samples
/// to give): before, it ran its whole `-s` while `/proc/PID` was there.
#[test]
fn record_of_a_pid_ends_when_it_exits_unreaped() {
    require_root();
    let bin = build_c("phases");
    // Not reaped until dropped: a zombie from its exit on. 6 s: the
    // recorder attaches while it runs (2.75 s beside a busy CPU) and a
    // third of a CPU still gives its phases tens of samples.
    let w = Workload::spawn(Command::new(&bin).args(["4", "2"]));
    let t0 = std::time::Instant::now();
    let p = record_folded(
        "pid-exits.folded",
        &["-s", "20", "-p", &w.pid().to_string()],
    );
    let took = t0.elapsed();
    let ours = sum_where(&p, |f| f[0] == "phases");
    assert!(
        took < std::time::Duration::from_secs(12),
        "record -s 20 -p ran {took:?} for a 6 s process that exited (unreaped)"
    );
    assert!(
        ours >= 20 && sum_where(&p, |f| f.contains(&"phase_two")) > 0,
        "{ours} samples of the process, expected its phases up to its exit:\n{}",
        top(&p, 6)
    );
    drop(w);
}

/// `emberd record -- COMMAND` profiles the command it starts, as `perf
/// record -g -- COMMAND` does: from its start (held until the programs are
/// loaded) until it exits, only its samples, and with its exit status.
#[test]
fn record_profiles_a_command_until_it_exits() {
    require_root();
    // One second in phase_one, then one in phase_two: a recording that
    // missed the command's start would hold less of phase_one.
    let bin = build_c("phases");
    let path = scratch().join("command.folded");
    let t0 = std::time::Instant::now();
    let out = record_command(&path, &[bin.as_os_str(), "1".as_ref(), "1".as_ref()]);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Ends with the command (2 s), not after record's default 10 s.
    assert!(
        took < std::time::Duration::from_secs(7),
        "record ran {took:?} for a 2 s command: {err}"
    );
    let p = parse_folded(&std::fs::read_to_string(&path).unwrap());
    let total = sum_where(&p, |_| true);
    let one = sum_where(&p, |f| f.contains(&"phase_one"));
    let two = sum_where(&p, |f| f.contains(&"phase_two"));
    let others = sum_where(&p, |f| f.first() != Some(&"phases"));
    // 2 s at 99 Hz is 198, fewer when the host is busy: the command gets
    // less of a CPU, and this VM's cpu-clock misses ticks.
    assert!(
        total >= 50,
        "{total} samples of a 2 s command:\n{}",
        top(&p, 10)
    );
    assert_eq!(others, 0, "only the command's samples:\n{}", top(&p, 10));
    let share = one as f64 / (one + two) as f64;
    assert!(
        (0.4..0.6).contains(&share),
        "phase_one is half of the phases from the command's start: {share:.2}\n{}",
        top(&p, 10)
    );

    // The command's failure is the recording's exit status; the profile
    // is still written.
    let failed = scratch().join("failed.folded");
    let out = record_command(&failed, &["sh".as_ref(), "-c".as_ref(), "exit 3".as_ref()]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(failed.exists(), "the profile is written anyway");

    // A command that is not there is named, and nothing is written.
    let none = scratch().join("none.folded");
    let _ = std::fs::remove_file(&none);
    let out = record_command(&none, &["no-such-command-anywhere".as_ref()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no-such-command-anywhere"), "{err}");
    assert!(!none.exists(), "no empty profile left behind");
}

/// `emberd flamegraph FILE` draws a folded file as flamegraph.pl does, with
/// its options, from a file or stdin: the recorded workload's functions in
/// proportion, malformed lines skipped and counted.
#[test]
fn flamegraph_draws_a_folded_file() {
    require_root();
    let bin = build_c("cpu_70_30");
    let folded = scratch().join("to-draw.folded");
    // 5 s: its loop alternates every millisecond or so, and 99 Hz
    // samples of a 2 s run fell on one phase often enough to read 59/41
    // (CI, 2026-11-27); perf at 999 Hz reads 70.1/29.8 here.
    let out = record_command(&folded, &[bin.as_os_str(), "5".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut text = std::fs::read_to_string(&folded).unwrap();
    text.push_str("not a folded line\n");
    std::fs::write(&folded, &text).unwrap();

    // Widths of the frames named `name`, summed, in pixels.
    let width_of = |svg: &str, name: &str| -> f64 {
        svg.split("<g><title>")
            .skip(1)
            .filter(|g| g.starts_with(&format!("{name} (")))
            .map(|g| {
                let i = g.find(" width=\"").unwrap() + 8;
                g[i..i + g[i..].find('"').unwrap()].parse::<f64>().unwrap()
            })
            .sum()
    };
    let out = emberd()
        .arg("flamegraph")
        .arg(&folded)
        .output()
        .expect("running emberd flamegraph");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("skipped 1 malformed line"), "{err}");
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(">Flame Graph</text>"), "default title");
    let (a, b) = (width_of(&svg, "hot_a"), width_of(&svg, "hot_b"));
    assert!(
        (0.6..0.8).contains(&(a / (a + b))),
        "hot_a {a} px vs hot_b {b} px"
    );

    // flamegraph.pl's options, the input on stdin.
    let mut child = emberd()
        .args([
            "flamegraph",
            "-",
            "--title",
            "Nightly",
            "--width",
            "800",
            "--inverted",
            "--minwidth",
            "5",
            "--colors",
            "hot",
            "--countname",
            "ms",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running emberd flamegraph");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.contains(r#"<svg version="1.1" width="800""#), "width");
    assert!(svg.contains(r#"data-inverted="1""#), "icicle");
    assert!(svg.contains(">Nightly</text>"), "title");
    assert!(svg.contains(" ms, "), "count name in the titles");
    let narrow = svg
        .split("<g><title>")
        .skip(1)
        .filter_map(|g| {
            let i = g.find(" width=\"")? + 8;
            g[i..i + g[i..].find('"')?].parse::<f64>().ok()
        })
        .filter(|w| *w < 5.0)
        .count();
    assert_eq!(narrow, 0, "no frame under --minwidth 5 px is drawn");

    // A bad option is refused, naming it.
    let out = emberd()
        .args(["flamegraph", "-", "--colors", "plaid"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("plaid"));
}
