use std::process::Command;

use crate::common::*;

fn share_of(p: &emberd::profile::Profile, needle: &str) -> (u64, u64) {
    let hit = sum_where(p, |f| {
        f.iter().any(|x| x.contains(needle) && x.ends_with("_[j]"))
    });
    (hit, p.total())
}

/// Node.js with --perf-basic-prof: the busy JS function is named as JIT code.
#[test]
fn node_js_function_is_named() {
    require_root();
    let w = Workload::spawn(
        Command::new("node")
            // node writes isolate-*-v8.log files to its working directory.
            .current_dir(scratch())
            .arg("--perf-basic-prof")
            .arg(workload("busy.js"))
            .arg("10"),
    );
    wait(1500);
    let pid = w.pid().to_string();
    let p = record_folded("node.folded", &["-s", "4", "-p", &pid]);
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let (hit, total) = share_of(&p, "emberdBusyJsWork");
    assert!(
        total >= 200 && hit * 2 >= total,
        "emberdBusyJsWork_[j] should have most of {total} samples, got {hit}:\n{}",
        top(&p, 8)
    );
}

/// OpenJDK 17 with -XX:+PreserveFramePointer and a perf map written by
/// `jcmd PID Compiler.perfmap` (0x-prefixed addresses): the busy Java method
/// is named.
#[test]
fn java_method_is_named() {
    require_root();
    let classes = scratch().join("java");
    std::fs::create_dir_all(&classes).unwrap();
    let status = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg(workload("Busy.java"))
        .status()
        .expect("running javac (openjdk-17-jdk-headless, installed by ./scripts/setup)");
    assert!(status.success(), "javac failed");
    let w = Workload::spawn(
        Command::new("java")
            .args(["-XX:+PreserveFramePointer", "-cp"])
            .arg(&classes)
            .args(["Busy", "14"]),
    );
    let pid = w.pid().to_string();
    // Let the JIT compile the hot method, then snapshot the perf map.
    wait(3000);
    let out = Command::new("jcmd")
        .args([&pid, "Compiler.perfmap"])
        .output()
        .expect("running jcmd");
    assert!(
        out.status.success(),
        "jcmd {pid} Compiler.perfmap failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = record_folded("java.folded", &["-s", "4", "-p", &pid]);
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let (hit, total) = share_of(&p, "Busy.emberdBusyJavaWork");
    assert!(
        total >= 200 && hit * 2 >= total,
        "Busy.emberdBusyJavaWork_[j] should have most of {total} samples, got {hit}:\n{}",
        top(&p, 8)
    );
}
