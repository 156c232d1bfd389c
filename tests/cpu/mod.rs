use std::process::Command;

use crate::common::*;

/// A C program spending ~70% in hot_a and ~30% in hot_b (both called from
/// main): the profile shows main;hot_a and main;hot_b in that proportion.
#[test]
fn hot_functions_in_proportion() {
    require_root();
    let bin = build_c("cpu_70_30");
    let w = Workload::spawn(Command::new(&bin).arg("8"));
    wait(300);
    let pid = w.pid().to_string();
    let p = record_folded("cpu_70_30.folded", &["-s", "5", "-p", &pid]);
    let a = sum_where(&p, |f| {
        f[0] == "cpu_70_30" && has_seq(f, &["main", "hot_a"])
    });
    let b = sum_where(&p, |f| {
        f[0] == "cpu_70_30" && has_seq(f, &["main", "hot_b"])
    });
    let total = p.total();
    let share = a as f64 / (a + b) as f64;
    let ctx = top(&p, 10);
    assert!(
        a + b >= total * 9 / 10 && total >= 300,
        "hot_a + hot_b should be nearly all of {total} samples (got {a} + {b}):\n{ctx}"
    );
    assert!(
        (0.60..=0.80).contains(&share),
        "hot_a's share is {share:.3} ({a} vs {b}), expected 0.60-0.80:\n{ctx}"
    );
}

/// A syscall-heavy loop: kernel frames (`_[k]`) sit above its user frames.
#[test]
fn kernel_frames_above_user_frames() {
    require_root();
    let bin = build_c("syscall_loop");
    let w = Workload::spawn(Command::new(&bin).arg("8"));
    wait(300);
    let pid = w.pid().to_string();
    let p = record_folded("syscall_loop.folded", &["-s", "4", "-p", &pid]);
    let ctx = top(&p, 10);
    // Stacks that start with user frames (main) and then only kernel frames.
    let layered = sum_where(&p, |f| {
        let first_k = f.iter().position(|x| x.ends_with("_[k]"));
        match first_k {
            Some(k) => f[..k].contains(&"main") && f[k..].iter().all(|x| x.ends_with("_[k]")),
            None => false,
        }
    });
    let in_write = sum_where(&p, |f| {
        f.iter().any(|x| x.ends_with("_[k]") && x.contains("write"))
    });
    assert!(
        layered * 2 >= p.total(),
        "at least half the samples should be user frames then kernel frames; got {layered} of {}:\n{ctx}",
        p.total()
    );
    assert!(
        in_write > 0,
        "some kernel frame should be in the write path (ksys_write, vfs_write):\n{ctx}"
    );
    assert!(
        !p.sorted()
            .iter()
            .any(|(s, _)| s.as_str().contains("[unknown]")),
        "no frame may be a bare [unknown]:\n{ctx}"
    );
}

/// A process that runs for 1 s and exits during the recording still has its
/// frames named: its mappings were read while it lived.
#[test]
fn short_lived_process_is_named() {
    require_root();
    let bin = build_c("short_lived");
    let out = scratch().join("short_lived.folded");
    let rec = emberd()
        .args(["record", "-s", "4", "-o"])
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting emberd");
    // Start after the sampler is attached, exit well before the recording ends.
    wait(1200);
    let status = Command::new(&bin).arg("1").status().expect("short_lived");
    assert!(status.success());
    let output = rec.wait_with_output().expect("emberd record");
    assert!(
        output.status.success(),
        "emberd record failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let p = emberd::render::folded::read(&std::fs::read(&out).unwrap()[..]).unwrap();
    let ctx = top(&p, 10);
    let named = sum_where(&p, |f| {
        f[0] == "short_lived" && has_seq(f, &["main", "short_lived_hot"])
    });
    let unnamed = sum_where(&p, |f| {
        f[0] == "short_lived" && f.iter().any(|x| x.starts_with("[exited]"))
    });
    // 1 s at 99 Hz on one CPU is ~99 samples.
    assert!(
        named >= 60,
        "short_lived_hot should have most of ~99 samples, got {named}:\n{ctx}"
    );
    assert!(
        unnamed * 10 <= named,
        "{unnamed} samples of the exited process were not named:\n{ctx}"
    );
}
