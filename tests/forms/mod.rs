//! The bounded form of the programs, which Linux 5.10 to 5.16 load (a
//! bounded loop, no bpf_find_vma, registers from the task's stack, off-CPU
//! state by thread id), forced on this kernel by `EMBERD_PROGRAM_FORM`:
//! the same profiles as the bpf_loop form. `scripts/kernels` runs it on
//! Debian 11's own 5.10.

use std::process::Command;

use emberd::profile::Profile;

use crate::common::*;

/// `emberd record ARGS` in `form` (`bounded` or `loop`).
fn record_in(form: &str, out: &str, args: &[&str]) -> Profile {
    record_folded_env(out, args, &[("EMBERD_PROGRAM_FORM", form)])
}

/// A chain built without frame pointers, unwound from .eh_frame: at least
/// 95% of its samples whole in both forms, and the forms within 3 points.
#[test]
fn bounded_form_unwinds_a_frameless_chain_as_the_loop_form_does() {
    require_root();
    let bin = build_c_debian("deep_chain");
    let chain = ["main", "level_a", "level_b", "level_c"];
    let mut shares = Vec::new();
    for form in ["bounded", "loop"] {
        let w = Workload::spawn(Command::new(&bin).arg("8"));
        wait(300);
        let pid = w.pid().to_string();
        let p = record_in(
            form,
            &format!("forms-chain-{form}.folded"),
            &["-s", "3", "-p", &pid],
        );
        let total = sum_where(&p, |_| true);
        let whole = sum_where(&p, |f| reaches_root(f) && has_seq(f, &chain));
        let share = whole as f64 / total.max(1) as f64;
        assert!(
            total > 200 && share >= 0.95,
            "{form} form: {whole} of {total} samples whole:\n{}",
            top(&p, 6)
        );
        shares.push(share);
    }
    assert!(
        (shares[0] - shares[1]).abs() <= 0.03,
        "whole shares differ: bounded {:.3}, loop {:.3}",
        shares[0],
        shares[1]
    );
}

/// Off-CPU in the bounded form (state in a hash of thread ids): a program
/// napping in libc's nanosleep is charged its time there, from its first
/// nap.
#[test]
fn bounded_form_charges_off_cpu_time_to_the_napping_stack() {
    require_root();
    let bin = build_c_debian("holdout_nap");
    // 10 s of naps for a 3 s record: loading the bounded form's programs
    // took 1.75 s once (a fresh clone's alone phase), and with 4 s of naps
    // the record had 2.25 s of them.
    let w = Workload::spawn(Command::new(&bin).args(["40", "250"]));
    let pid = w.pid().to_string();
    let p = record_in(
        "bounded",
        "forms-offcpu.folded",
        &["-e", "offcpu", "-s", "3", "-p", &pid],
    );
    let total = sum_where(&p, |_| true) as f64 / 1e6;
    let napping = sum_where(&p, |f| {
        reaches_root(f) && has_seq(f, &["main", "holdout_nap", "__nanosleep"])
    }) as f64
        / 1e6;
    assert!(
        total >= 2.5 && napping >= total * 0.95,
        "{napping:.2} s of {total:.2} s off CPU under main;holdout_nap;__nanosleep:\n{}",
        top(&p, 6)
    );
}

/// Python frames in the bounded form: Debian's python3 shows its own
/// functions in the order they call each other.
#[test]
fn bounded_form_reads_python_frames() {
    require_root();
    let w = Workload::spawn(
        Command::new("/usr/bin/python3")
            .arg(workload("busy.py"))
            .arg("8"),
    );
    wait(1000);
    let pid = w.pid().to_string();
    let p = record_in("bounded", "forms-python.folded", &["-s", "3", "-p", &pid]);
    let total = sum_where(&p, |_| true);
    let leaf = sum_where(&p, |f| {
        has_seq(
            f,
            &[
                "outer (busy.py)",
                "middle (busy.py)",
                "leaf_arith (busy.py)",
            ],
        )
    });
    assert!(
        total > 200 && leaf * 5 >= total,
        "{leaf} of {total} samples under outer;middle;leaf_arith:\n{}",
        top(&p, 6)
    );
}

/// `emberd check` names the form, why it was chosen, where off-CPU state
/// lives and, in the bounded form, the kernel stack size user registers are
/// found by.
#[test]
fn check_names_the_form_and_why() {
    require_root();
    let out = emberd()
        .env("EMBERD_PROGRAM_FORM", "bounded")
        .arg("check")
        .output()
        .expect("running emberd check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("bounded loop form (chosen by EMBERD_PROGRAM_FORM)"),
        "{text}"
    );
    assert!(
        text.contains("off-CPU state in a hash of thread ids"),
        "{text}"
    );
    // Where the user registers are found: this kernel's 16 KiB stacks, as
    // its BTF says (issue 41), not assumed.
    assert!(
        text.contains("kernel stacks of 16384 bytes (THREAD_SIZE, from the size of struct irq_stack in the kernel's BTF"),
        "{text}"
    );
    let out = emberd()
        .arg("check")
        .output()
        .expect("running emberd check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("bpf_loop form (this kernel has bpf_loop, bpf_find_vma"),
        "{text}"
    );
}

/// malloc in the bounded form, a uprobe program per allocation function
/// (kernels before 5.15 have no attach cookies): the bytes of a loop's
/// malloc() calls land under the function that called them.
#[test]
fn bounded_form_traces_malloc_with_a_program_per_function() {
    require_root();
    let bin = build_c_debian("malloc_loop");
    // Outlives the recorder's start on a busy host (killed when dropped).
    let w = Workload::spawn(Command::new(&bin).arg("30"));
    wait(300);
    let pid = w.pid().to_string();
    let p = record_in(
        "bounded",
        "forms-malloc.folded",
        &["-e", "malloc", "-s", "3", "-p", &pid],
    );
    let total = sum_where(&p, |_| true);
    let churn = sum_where(&p, |f| reaches_root(f) && has_seq(f, &["main", "churn"]));
    assert!(
        total > 1 << 20 && churn * 100 >= total * 95,
        "{churn} of {total} bytes under main;churn:\n{}",
        top(&p, 6)
    );
}
