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
}

/// `-o x.svg` writes an inferno flame graph naming the hot function, with a
/// title naming the event and host.
#[test]
fn svg_output_names_hot_function() {
    require_root();
    let bin = build_c("cpu_70_30");
    let w = Workload::spawn(Command::new(&bin).arg("5"));
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
