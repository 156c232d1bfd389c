use std::process::Command;

use crate::common::*;

/// Records `event` for `secs` seconds of the process `bin args` (started
/// after the sampler is attached: the workloads wait `delay` first).
fn record_event(event: &str, bin: &str, args: &[&str], secs: &str) -> emberd::profile::Profile {
    let bin = build_c(bin);
    let w = Workload::spawn(Command::new(&bin).args(args));
    let pid = w.pid().to_string();
    record_folded(
        &format!("{event}-{}.folded", w.pid()),
        &["-e", event, "-s", secs, "-p", &pid],
    )
}

/// A thread sleeping 5 x 200 ms in sleepy(): about 1 s off CPU in sleepy.
#[test]
fn offcpu_charges_sleep_to_sleepy() {
    require_root();
    let p = record_event("offcpu", "sleepy", &["2"], "5");
    // All off-CPU time in the nanosleep syscall (the main thread sleeps in
    // clock_nanosleep, which is not counted), and most of it named under the
    // function sleepy: a stack-map collision can turn one user stack into
    // `[lost]`, which the profile shows rather than hides.
    let total = sum_where(&p, |f| f.contains(&"__x64_sys_nanosleep_[k]"));
    let us = sum_where(&p, |f| f[1..].contains(&"sleepy"));
    assert!(
        us * 10 >= total * 6,
        "most of {total} us should be named under sleepy, got {us} us:\n{}",
        top(&p, 8)
    );
    let us = total;
    assert!(
        (850_000..=1_150_000).contains(&us),
        "sleepy should have 1 s +/- 15% off CPU, got {us} us:\n{}",
        top(&p, 8)
    );
}

/// 8000 sleeps of ~20 us (plus timer slack), far below the sampling
/// threshold T (1 ms by default): sampled (the user stack taken with a chance
/// predicted from the previous sleep, the period recorded with chance
/// length/T in all and charged accordingly), short_naps still gets the time
/// it really slept, as it does when every period is recorded (T = 0).
#[test]
fn short_offcpu_periods_are_sampled_without_bias() {
    require_root();
    for threshold in ["1000", "200", "0"] {
        let bin = build_c("short_naps");
        let truth = scratch().join(format!("short_naps-{threshold}.us"));
        let mut w = Workload::spawn(Command::new(&bin).arg("2").arg(&truth));
        let pid = w.pid().to_string();
        let p = record_folded(
            &format!("short-naps-{threshold}.folded"),
            &[
                "-e",
                "offcpu",
                "-s",
                "5",
                "-p",
                &pid,
                "--offcpu-sample-below-us",
                threshold,
            ],
        );
        assert!(w.0.wait().expect("waiting for short_naps").success());
        let slept: u64 = std::fs::read_to_string(&truth)
            .expect("short_naps wrote its total")
            .trim()
            .parse()
            .expect("a number of us");
        let us = sum_where(&p, |f| {
            f.contains(&"short_naps") && f.contains(&"__x64_sys_nanosleep_[k]")
        });
        assert!(
            us * 100 >= slept * 85 && us * 100 <= slept * 115,
            "threshold {threshold} us: short_naps slept {slept} us, emberd charged {us} us:\n{}",
            top(&p, 8)
        );
    }
}

/// The producer wakes the reader ten times after 100 ms: wakeup charges about
/// 1 s to producer's stack; offwake joins wait_for_data -- producer.
#[test]
fn wakeup_and_offwake_name_the_producer() {
    require_root();
    let p = record_event("wakeup", "pipe_wake", &["2"], "5");
    let us = sum_where(&p, |f| {
        f.contains(&"producer") && f.iter().any(|x| x.contains("write"))
    });
    assert!(
        (850_000..=1_150_000).contains(&us),
        "producer should have woken ~1 s of blocked time, got {us} us:\n{}",
        top(&p, 8)
    );
    let p = record_event("offwake", "pipe_wake", &["2"], "5");
    let chain = sum_where(&p, |f| {
        let Some(sep) = f.iter().position(|x| *x == "--") else {
            return false;
        };
        f[..sep].contains(&"wait_for_data") && f[sep..].contains(&"producer_[w]")
    });
    assert!(
        (850_000..=1_150_000).contains(&chain),
        "wait_for_data -- producer_[w] should hold ~1 s, got {chain} us:\n{}",
        top(&p, 8)
    );
}

/// 64 MiB of fresh 4 KiB pages touched in touch_pages(): about 16384 faults
/// after scaling by the sampling period.
#[test]
fn pagefaults_are_charged_to_touch_pages() {
    require_root();
    let p = record_event("pagefault", "touch_pages", &["2"], "5");
    let faults = sum_where(&p, |f| f.contains(&"touch_pages"));
    assert!(
        (13_926..=18_842).contains(&faults),
        "touch_pages should have ~16384 faults +/- 15%, got {faults}:\n{}",
        top(&p, 8)
    );
}

/// 100 ms busy in spin(), 100 ms asleep in nap(): in the hot/cold graph both
/// take about half the time, and the off-CPU part is marked `_[o]`.
#[test]
fn hotcold_shows_spin_and_nap_at_half_each() {
    require_root();
    let p = record_event("hotcold", "spin_nap", &["6"], "4");
    let hot = sum_where(&p, |f| f.contains(&"spin"));
    let cold = sum_where(&p, |f| f.contains(&"nap_[o]"));
    let share = hot as f64 / (hot + cold).max(1) as f64;
    assert!(
        hot + cold >= 3_000_000 && (0.40..=0.60).contains(&share),
        "spin {hot} us vs nap {cold} us (share {share:.2}), expected about half each:\n{}",
        top(&p, 8)
    );
}

/// The daemon serves the other events through event= and /debug/pprof/NAME.
#[test]
fn daemon_serves_offcpu_and_pagefault() {
    require_root();
    let d = Daemon::start(&[], &[]);
    let bin = build_c("sleepy");
    let _w = Workload::spawn(Command::new(&bin).arg("0.2"));
    // The sleeps end 1.2 s in. A fresh daemon's first drains name everything
    // on the host (slow in a debug build), so poll until the drain after the
    // last sleep has landed, then check the total.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut us, mut p);
    loop {
        wait(1000);
        let r = d.get("/folded?seconds=20&event=offcpu&comm=sleepy");
        assert_eq!(r.status, 200, "{}", r.text());
        p = parse_folded(&r.text());
        // Time in the nanosleep syscall (see offcpu_charges_sleep_to_sleepy).
        us = sum_where(&p, |f| f.contains(&"__x64_sys_nanosleep_[k]"));
        if us >= 850_000 || std::time::Instant::now() > deadline {
            break;
        }
    }
    let named = sum_where(&p, |f| f[1..].contains(&"sleepy"));
    assert!(
        named * 10 >= us * 6,
        "{named} of {us} us named under sleepy:\n{}",
        top(&p, 5)
    );
    assert!(
        (850_000..=1_150_000).contains(&us),
        "{us} us:\n{}",
        top(&p, 5)
    );
    let svg = d.get("/flamegraph.svg?seconds=5&event=offcpu");
    assert!(svg.text().contains("Off-CPU Time Flame Graph (ms)"));
    for route in ["offcpu", "wakeup", "offwake", "pagefault"] {
        let r = d.get(&format!("/debug/pprof/{route}?seconds=5"));
        assert_eq!(r.status, 200, "/debug/pprof/{route}: {}", r.text());
        assert_eq!(
            &r.body[..2],
            &[0x1f, 0x8b],
            "/debug/pprof/{route} is not gzip"
        );
    }
    assert_eq!(d.get("/debug/pprof/hotcold?seconds=5").status, 404);
    assert_eq!(d.get("/folded?seconds=5&event=hotcold").status, 200);
    // The events programs' own counters reach /metrics: the sleeps alone
    // switched and woke sleepy ten times.
    let m = d.get("/metrics").text();
    let value = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{m}"))
    };
    assert!(value(r#"emberd_event_hook_runs_total{hook="sched_switch"}"#) >= 10.0);
    assert!(value(r#"emberd_event_hook_runs_total{hook="sched_waking"}"#) >= 10.0);
    value(r#"emberd_offcpu_sampled_out_total{reason="short_period"}"#);
    value(r#"emberd_samples_dropped_total{event="offcpu",reason="blocked_state_unavailable"}"#);
}
