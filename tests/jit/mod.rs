use std::process::Command;

use crate::common::*;

fn share_of(p: &emberd::profile::Profile, needle: &str) -> (u64, u64) {
    let hit = sum_where(p, |f| {
        f.iter().any(|x| x.contains(needle) && x.ends_with("_[j]"))
    });
    (hit, p.total())
}

/// Node.js with --perf-basic-prof: the busy JS function is named as JIT
/// code from the perf map (`--node false`: V8's own frames would name it
/// first, see tests/v8).
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
    let p = record_folded("node.folded", &["-s", "4", "-p", &pid, "--node", "false"]);
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

/// The JDKs the Java tests run on: Debian's OpenJDK 17 (installed by
/// scripts/setup-tests) and the Temurin 25 these machines carry.
pub const JDKS: [&str; 2] = [
    "/usr/lib/jvm/java-17-openjdk-amd64",
    "/usr/lib/jvm/temurin-25-jdk-amd64",
];

/// `jdk`'s `bin/name`, or a panic saying what is missing.
pub fn jdk_tool(jdk: &str, name: &str) -> std::path::PathBuf {
    let p = std::path::Path::new(jdk).join("bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: the Java tests need Debian's openjdk-17-jdk-headless \
         (scripts/setup-tests) and a Temurin 25 JDK in /usr/lib/jvm",
        p.display()
    );
    p
}

/// The line of the first statement of `method` in workload `file`.
fn first_line_of(file: &str, method: &str) -> u32 {
    let text = std::fs::read_to_string(workload(file)).unwrap();
    let at = text
        .lines()
        .position(|l| l.contains(&format!(" {method}(")))
        .unwrap_or_else(|| panic!("{method} not in {file}"));
    at as u32 + 2
}

/// Issue 45: the JVM's code cache and method metadata are read from its
/// own structure tables, on OpenJDK 17 and Temurin 25, with no flag: a
/// running JVM's compiled methods are listed by `emberd jvm PID --methods`
/// with their class, method, source file and the line of their first
/// bytecode, none unreadable.
#[test]
fn jvm_code_cache_is_read_from_its_own_tables() {
    require_root();
    let line = first_line_of("Busy.java", "emberdBusyJavaWork");
    for jdk in JDKS {
        let w = Workload::spawn(
            Command::new(jdk_tool(jdk, "java"))
                .arg(workload("Busy.java"))
                .arg("20"),
        );
        // Source launch compiles first; then C1 and C2 compile the method.
        let mut out = String::new();
        let want = format!("Busy.emberdBusyJavaWork (Busy.java) {line}");
        for _ in 0..30 {
            wait(1000);
            let o = emberd()
                .args(["jvm", &w.pid().to_string(), "--methods"])
                .output()
                .unwrap();
            out = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            if o.status.success() && out.contains(&want) {
                break;
            }
        }
        drop(w);
        let summary = out.lines().last().unwrap_or("");
        assert!(
            out.contains(&want) && summary.contains(" 0 unreadable"),
            "{jdk}: expected a compiled `{want}` and no unreadable method:\n{}\n...\n{summary}",
            out.lines().take(8).collect::<Vec<_>>().join("\n")
        );
        let named: u64 = summary.split(' ').next().unwrap().parse().unwrap();
        assert!(named >= 100, "{jdk}: only {named} compiled methods named");
    }
}
