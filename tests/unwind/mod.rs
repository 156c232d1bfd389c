use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use emberd::profile::Profile;

use crate::common::*;

mod busy;

/// gcc flags of the workloads here: optimized, no frame pointers.
const NO_FP: &[&str] = &["-g", "-O2", "-fomit-frame-pointer"];

/// Records `secs` seconds of CPU samples of `w` (after it had time to start).
fn record_cpu(w: &Workload, out: &str, secs: &str) -> Profile {
    let pid = w.pid().to_string();
    record_folded(out, &["-s", secs, "-p", &pid])
}

/// As [`record_cpu`], with the CPU seconds `w` ran while sampled: what its
/// sample count is held to, however much CPU a busy host leaves it.
fn record_cpu_ran(w: &Workload, out: &str, secs: &str) -> (Profile, f64) {
    let pid = w.pid();
    record_folded_ran(out, &["-s", secs, "-p", &pid.to_string()], || {
        cpu_seconds(pid)
    })
}

/// Whether `frames` holds frames containing each of `names`, consecutive and
/// in order (Rust frames carry their crate path: `rust_chain::emberd_outer`).
fn has_seq_containing(frames: &[&str], names: &[&str]) -> bool {
    frames
        .windows(names.len())
        .any(|w| w.iter().zip(names).all(|(f, n)| f.contains(n)))
}

/// Share of the samples of `comm` in `p` whose stack satisfies `pred`, and
/// that number of samples.
fn share_of(p: &Profile, comm: &str, pred: impl Fn(&[&str]) -> bool) -> (f64, u64) {
    let all = sum_where(p, |f| f[0] == comm);
    let good = sum_where(p, |f| f[0] == comm && pred(f));
    (good as f64 / all.max(1) as f64, all)
}

/// A C program built -O2 -fomit-frame-pointer spinning in
/// main -> level_a -> level_b -> level_c: nearly every sample has the whole
/// chain and reaches __libc_start_call_main.
#[test]
fn c_without_frame_pointers() {
    require_root();
    let bin = build_c_with("deep_chain", "nofp", NO_FP);
    let w = Workload::spawn(Command::new(&bin).arg("10"));
    wait(500);
    let (p, ran) = record_cpu_ran(&w, "deep_chain.folded", "4");
    let (share, n) = share_of(&p, "deep_chain", |f| {
        has_seq(f, &["main", "level_a", "level_b", "level_c"]) && reaches_root(f)
    });
    assert_covers_cpu(n, ran, 1.0, &format!("deep_chain:\n{}", top(&p, 10)));
    assert!(
        share >= 0.95,
        "{:.1}% of {n} samples have main;level_a;level_b;level_c and reach the root, \
         expected >= 95%:\n{}",
        share * 100.0,
        top(&p, 10)
    );
}

/// A library dlopen()ed after the process was first read: the BPF unwinder
/// meets pcs in no mapping it knows, asks for the mappings to be read
/// again, and once the library's table is built its frames unwind to the
/// root like the rest: main -> call_lib -> lib_hot -> lib_inner. Run by
/// root and by nobody, whose requests go through different maps.
#[test]
fn library_loaded_later_is_unwound_after_a_refresh() {
    require_root();
    let bin = build_c_with("dlopen_late", "nofp", NO_FP);
    let lib = scratch().join("nofp/libdlopen_late_hot.so");
    let status = Command::new("gcc")
        .args(NO_FP)
        .args(["-DLIB", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(workload("dlopen_late.c"))
        .status()
        .expect("running gcc");
    assert!(
        status.success(),
        "gcc failed to build the library of dlopen_late.c"
    );
    // Root's requests to read the mappings again and another user's go
    // through maps of their own (`unwind_refresh_root`, `unwind_refresh`).
    for (who, uid) in [("root", 0), ("nobody", NOBODY)] {
        // The library is opened 2.5 s in, well after emberd has read the
        // process's mappings at the start of its recording.
        let mut cmd = run_as(uid, &bin);
        cmd.arg(&lib).arg("2500").arg("6");
        let w = Workload::spawn(&mut cmd);
        wait(300);
        let p = record_cpu(&w, &format!("dlopen_late-{who}.folded"), "6");
        let in_lib = |f: &[&str]| f[0] == "dlopen_late" && f.contains(&"lib_inner");
        let lib_samples = sum_where(&p, in_lib);
        let whole = sum_where(&p, |f| {
            in_lib(f)
                && has_seq(f, &["main", "call_lib", "lib_hot", "lib_inner"])
                && reaches_root(f)
        });
        let share = whole as f64 / lib_samples.max(1) as f64;
        // About 3.8 s of the 6 are in the library; the first poll after the
        // library's first sample reads the mappings again and builds its
        // table (milliseconds), so only a few samples may miss the chain.
        assert!(
            lib_samples >= 200 && share >= 0.9,
            "{who}'s dlopen_late: {:.1}% of {lib_samples} samples in lib_inner have \
             main;call_lib;lib_hot;lib_inner and reach the root, expected >= 90% of at least 200:\n{}",
            share * 100.0,
            top(&p, 10)
        );
    }
}

/// A Rust program compiled `rustc -C opt-level=3 -C debuginfo=0` (no frame
/// pointers, only .eh_frame) spinning in emberd_outer -> emberd_middle ->
/// emberd_inner: nearly every sample has the chain, in order, from the root.
#[test]
fn rust_release_binary_without_frame_pointers() {
    require_root();
    let out = scratch().join("rust_chain");
    let status = Command::new("rustc")
        .args(["-C", "opt-level=3", "-C", "debuginfo=0", "-o"])
        .arg(&out)
        .arg(workload("rust_chain.rs"))
        .status()
        .expect("running rustc");
    assert!(status.success(), "rustc failed to build rust_chain.rs");
    let w = Workload::spawn(Command::new(&out).arg("10"));
    wait(500);
    let (p, ran) = record_cpu_ran(&w, "rust_chain.folded", "4");
    let (share, n) = share_of(&p, "rust_chain", |f| {
        has_seq_containing(f, &["emberd_outer", "emberd_middle", "emberd_inner"]) && reaches_root(f)
    });
    assert_covers_cpu(n, ran, 1.0, &format!("rust_chain:\n{}", top(&p, 10)));
    assert!(
        share >= 0.95,
        "{:.1}% of {n} samples have emberd_outer;emberd_middle;emberd_inner and reach \
         the root, expected >= 95%:\n{}",
        share * 100.0,
        top(&p, 10)
    );
}

/// Leaf (innermost user function) shares of a profile, by function name, in
/// percent. `stacks` are root-first frame lists with their counts.
fn leaf_shares<'a>(stacks: impl Iterator<Item = (Vec<&'a str>, u64)>) -> HashMap<String, f64> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    for (frames, n) in stacks {
        total += n;
        let leaf = frames
            .iter()
            .rev()
            .find(|f| !f.ends_with("_[k]") && !f.ends_with("_[i]"))
            .copied()
            .unwrap_or("[none]");
        *counts.entry(leaf.to_string()).or_default() += n;
    }
    counts
        .into_iter()
        .map(|(k, v)| (k, v as f64 * 100.0 / total.max(1) as f64))
        .collect()
}

/// Folds `perf script` output: a header line per sample, then its frames
/// leaf first (`\t addr sym+off (dso)`), a blank line between samples.
/// Returns root-first user frames (kernel frames dropped) per sample.
fn perf_user_stacks(script: &str) -> Vec<Vec<String>> {
    script
        .split("\n\n")
        .filter_map(|sample| {
            let mut lines = sample.lines().skip_while(|l| l.trim().is_empty());
            lines.next()?;
            let mut frames: Vec<String> = lines
                .filter_map(|l| {
                    let l = l.trim();
                    let (_addr, rest) = l.split_once(' ')?;
                    let (sym, dso) = rest.rsplit_once(" (")?;
                    if dso.starts_with("[kernel") {
                        return None;
                    }
                    let sym = match sym.rsplit_once("+0x") {
                        Some((s, _)) => s,
                        None => sym,
                    };
                    Some(sym.to_string())
                })
                .collect();
            frames.reverse();
            Some(frames)
        })
        .collect()
}

/// Top `n` entries of a share table, largest first.
fn top_shares(t: &HashMap<String, f64>, n: usize) -> Vec<(&str, f64)> {
    let mut v: Vec<(&str, f64)> = t.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(n);
    v
}

/// Debian's /usr/bin/python3 (no frame pointers) running CPU-bound nested
/// Python functions, recorded by emberd and `perf --call-graph dwarf` at the
/// same time: emberd's stacks reach the root, and the leaf functions' shares
/// agree with perf's within 3 percentage points.
#[test]
fn python3_reaches_root_and_agrees_with_perf() {
    require_root();
    let w = Workload::spawn(
        Command::new("/usr/bin/python3")
            .arg(workload("busy.py"))
            .arg("20"),
    );
    wait(1000);
    let pid = w.pid().to_string();
    let perf_data = scratch().join("python3-perf.data");
    // 999 Hz for both: with ~6000 samples each, a leaf's share differs
    // between two samplers by < 1 percentage point (1 sigma); at 99 Hz the
    // difference alone would often exceed 3 points.
    let perf = Command::new("perf")
        .args([
            "record",
            "-F",
            "999",
            "--call-graph",
            "dwarf",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&perf_data)
        .args(["--", "sleep", "6"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting perf record");
    let p = record_folded("python3.folded", &["-F", "999", "-s", "6", "-p", &pid]);
    let perf_out = perf.wait_with_output().expect("perf record");
    assert!(
        perf_out.status.success(),
        "perf record failed: {}",
        String::from_utf8_lossy(&perf_out.stderr)
    );
    let script = Command::new("perf")
        .args(["script", "-F", "comm,pid,tid,time,event,ip,sym,dso", "-i"])
        .arg(&perf_data)
        .stderr(Stdio::null())
        .output()
        .expect("perf script");
    assert!(script.status.success(), "perf script failed");
    let perf_stacks = perf_user_stacks(&String::from_utf8_lossy(&script.stdout));

    let (root_share, n) = share_of(&p, "python3", reaches_root);
    // Python frames stand in for the eval loop's native frame that ran
    // them (perf shows that frame): compare them as it.
    let ember = leaf_shares(
        p.sorted()
            .into_iter()
            .filter(|(s, _)| s.frames().next() == Some("python3"))
            .map(|(s, c)| {
                let frames = s.frames().map(|f| {
                    if f.ends_with(".py)") {
                        "_PyEval_EvalFrameDefault"
                    } else {
                        f
                    }
                });
                (frames.collect(), c)
            }),
    );
    let theirs = leaf_shares(
        perf_stacks
            .iter()
            .map(|s| (s.iter().map(String::as_str).collect(), 1)),
    );
    let table = |t: &HashMap<String, f64>| {
        top_shares(t, 12)
            .iter()
            .map(|(k, v)| format!("{v:6.2}% {k}\n"))
            .collect::<String>()
    };
    let ctx = format!(
        "emberd ({n} samples) leaf shares:\n{}perf ({} samples) leaf shares:\n{}top stacks:\n{}",
        table(&ember),
        perf_stacks.len(),
        table(&theirs),
        top(&p, 10)
    );
    assert!(
        n >= 1000 && perf_stacks.len() >= 1000,
        "too few samples to compare:\n{ctx}"
    );
    assert!(
        root_share >= 0.95,
        "{:.1}% of python3's samples reach __libc_start_call_main, expected >= 95%:\n{ctx}",
        root_share * 100.0
    );
    let off: Vec<String> = top_shares(&theirs, 10)
        .into_iter()
        .filter(|(name, _)| !name.starts_with("[unknown"))
        .filter_map(|(name, share)| {
            let ours = ember.get(name).copied().unwrap_or(0.0);
            ((ours - share).abs() > 3.0)
                .then(|| format!("{name}: perf {share:.2}%, emberd {ours:.2}%"))
        })
        .collect();
    assert!(
        off.is_empty(),
        "leaf shares differ by more than 3 points: {off:?}\n{ctx}"
    );
}

/// A loop faulting in fresh pages in main -> fault_in -> touch (no frame
/// pointers): most page faults are charged to that chain, up to the root.
#[test]
fn pagefaults_without_frame_pointers_name_callers() {
    require_root();
    let bin = build_c_with("touch_fresh", "nofp", NO_FP);
    let w = Workload::spawn(Command::new(&bin).arg("10"));
    wait(500);
    let pid = w.pid().to_string();
    let p = record_folded(
        "touch_fresh.folded",
        &["-e", "pagefault", "-s", "4", "-p", &pid],
    );
    let total = sum_where(&p, |f| f[0] == "touch_fresh");
    let named = sum_where(&p, |f| {
        has_seq(f, &["main", "fault_in", "touch"]) && reaches_root(f)
    });
    assert!(
        total >= 10_000 && named * 10 >= total * 9,
        "{named} of {total} faults under main;fault_in;touch from the root, expected 90%:\n{}",
        top(&p, 10)
    );
}

/// A thread blocked in pthread_cond_wait() from wait_for_signal(), woken every
/// 50 ms (no frame pointers): its off-CPU time is named wait_for_signal
/// through libc's condition variable, from start_thread/clone3.
///
/// On a busy host (two CPU-bound python3s here), as CI is: woken, the waiter
/// often blocks briefly again on the mutex its waker still holds, and the
/// 50 ms wait after such a brief block must still be charged exactly: it is
/// off CPU for nearly all of the 4 s, +/- 10%. (When the prediction followed
/// the last period alone, those waits were drawn at 1/8 and weighed 8, and
/// the same run gave 2.3 to 5.5 s.)
#[test]
fn cond_wait_names_the_waiter() {
    require_root();
    let bin = build_c_with("cond_wait", "nofp", NO_FP);
    let _load: Vec<Workload> = (0..2)
        .map(|_| Workload::spawn(Command::new("python3").arg(workload("busy.py")).arg("10")))
        .collect();
    let w = Workload::spawn(Command::new(&bin).arg("10"));
    wait(500);
    let pid = w.pid().to_string();
    let p = record_folded(
        "cond_wait.folded",
        &["-e", "offcpu", "-s", "4", "-p", &pid, "--group", "thread"],
    );
    let main_thread = format!("cond_wait-{pid}/{pid}");
    let waiter = sum_where(&p, |f| f[0] != main_thread);
    let named = sum_where(&p, |f| {
        f[0] != main_thread
            && has_seq(f, &["waiter_thread", "wait_for_signal"])
            && f.iter().any(|x| x.contains("pthread_cond_wait"))
            && reaches_root(f)
    });
    assert!(
        (3_600_000..=4_400_000).contains(&waiter),
        "the waiter is off CPU for nearly all of the 4 s recorded, got {waiter} us:\n{}",
        top(&p, 10)
    );
    assert!(
        named * 10 >= waiter * 9,
        "{named} of the waiter's {waiter} us off CPU named \
         waiter_thread;wait_for_signal;..pthread_cond_wait from the root, expected 90%:\n{}",
        top(&p, 10)
    );
}

/// File offset and size of section `name` of `elf`, from `readelf -SW`.
fn section(elf: &Path, name: &str) -> (u64, u64) {
    let out = Command::new("readelf")
        .arg("-SW")
        .arg(elf)
        .output()
        .expect("running readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            // "  [19] .eh_frame  PROGBITS  00000000008e0518 4e0518 064450 00 A 0 0 8"
            let f: Vec<&str> = l.split_once(']')?.1.split_whitespace().collect();
            (f.first() == Some(&name)).then(|| {
                let hex = |s: &str| u64::from_str_radix(s, 16).expect("a hex field");
                (hex(f[3]), hex(f[4]))
            })
        })
        .unwrap_or_else(|| panic!("{} has no {name}:\n{text}", elf.display()))
}

/// A fresh copy of the no-frame-pointer deep_chain in its own directory.
fn deep_chain_copy(dir: &str) -> PathBuf {
    let bin = build_c_with("deep_chain", "nofp", NO_FP);
    let dir = scratch().join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("deep_chain");
    let _ = std::fs::remove_file(&copy);
    std::fs::copy(&bin, &copy).expect("copying deep_chain");
    copy
}

/// Records deep_chain (`w`, a hostile binary) for 3 s and checks the
/// profile: its samples cover at least half the CPU time it ran while it
/// was sampled (from record's `attached` to its `stopped`), and each stack
/// either is complete (main;level_a;level_b;level_c from the root) or
/// starts with a marker frame; no unmarked stack holds an unnamed address.
/// The count is held to the CPU time, not to the wall clock: on a busy host
/// (CI's light phase builds the quick start's clone beside this) deep_chain
/// got a third of a CPU, 98 samples in 3 s.
fn check_complete_or_marked(w: &Workload, out: &str, case: &str) {
    let (p, ran) = &record_cpu_ran(w, out, "3");
    let ctx = top(p, 10);
    let total = sum_where(p, |f| f[0] == "deep_chain");
    assert_covers_cpu(total, *ran, 1.0, &format!("{case}, while recorded:\n{ctx}"));
    let complete = sum_where(p, |f| {
        f[0] == "deep_chain"
            && has_seq(f, &["main", "level_a", "level_b", "level_c"])
            && reaches_root(f)
    });
    let marked = sum_where(p, |f| {
        f[0] == "deep_chain" && f.get(1).is_some_and(|x| is_marker(x))
    });
    let garbage = sum_where(p, |f| {
        f[0] == "deep_chain"
            && !f.get(1).is_some_and(|x| is_marker(x))
            && f.iter().any(|x| {
                x.starts_with("[unmapped]") || x.starts_with("[unknown]") || *x == "[exited]"
            })
    });
    assert!(
        garbage == 0 && complete + marked == total,
        "{case}: of {total} samples {complete} complete, {marked} start with a marker, \
         {garbage} unmarked with unnamed frames:\n{ctx}"
    );
}

/// Hostile input to the unwinder: a binary whose .eh_frame is all 0xff, a
/// binary deleted while it runs, and one replaced on disk (rename) by another
/// program while mapped. emberd keeps recording, and every stack is either
/// complete or starts with a marker saying why not.
#[test]
fn hostile_unwind_input() {
    require_root();
    // (1) .eh_frame overwritten with 0xff.
    let bad = deep_chain_copy("hostile-eh-frame");
    let (off, size) = section(&bad, ".eh_frame");
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes[off as usize..(off + size) as usize].fill(0xff);
    std::fs::write(&bad, &bytes).unwrap();
    let w = Workload::spawn(Command::new(&bad).arg("10"));
    wait(500);
    check_complete_or_marked(&w, "hostile-eh-frame.folded", "corrupt .eh_frame");
    drop(w);

    // (2) The binary deleted after start.
    let gone = deep_chain_copy("hostile-deleted");
    let w = Workload::spawn(Command::new(&gone).arg("10"));
    wait(500);
    std::fs::remove_file(&gone).unwrap();
    check_complete_or_marked(&w, "hostile-deleted.folded", "deleted binary");
    drop(w);

    // (3) Another program renamed over the binary while it is mapped.
    let replaced = deep_chain_copy("hostile-replaced");
    let w = Workload::spawn(Command::new(&replaced).arg("10"));
    wait(500);
    let other = build_c_with("touch_fresh", "nofp", NO_FP);
    let tmp = replaced.with_file_name("deep_chain.new");
    std::fs::copy(&other, &tmp).unwrap();
    std::fs::rename(&tmp, &replaced).unwrap();
    check_complete_or_marked(&w, "hostile-replaced.folded", "binary replaced on disk");
}

/// Off-CPU time of a process that exits before the query, polled until
/// `want` us are in (or 15 s pass).
fn offcpu_of(d: &Daemon, pid: u32, want: u64) -> Profile {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        wait(500);
        let r = d.get(&format!("/folded?seconds=30&event=offcpu&pid={pid}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let p = parse_folded(&r.text());
        if sum_where(&p, |_| true) >= want || Instant::now() > deadline {
            return p;
        }
    }
}

/// A new process's first block is charged to its true stack: a program
/// built with frame pointers naps in holdout_nap() (nanosleep in Debian's
/// libc, which has none) right after exec, before the agent can have read
/// its mappings; the BPF unwinder finds libc's table by inode through
/// bpf_find_vma. Three fresh copies nap 4 x 250 ms (the first within a
/// millisecond of exec), one lives 30 ms (3 x 10 ms) and one naps 60 x 10 ms
/// (the time it is marked is printed): each charges its
/// naps to main;holdout_nap;__nanosleep within 5%. Its own binary's table is
/// not built at the first nap: that walk is by frame pointers through it
/// and carries the `tables not ready` marker; every unmarked stack is whole.
#[test]
fn new_processes_are_unwound_from_their_first_block() {
    require_root();
    let bin = build_c("holdout_nap");
    let d = Daemon::start(&[], &[]);
    wait(1000);
    let dir = scratch().join("holdout");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, args, slept) in [
        (0, ["4", "250"], 1_000_000u64),
        (1, ["4", "250"], 1_000_000),
        (2, ["4", "250"], 1_000_000),
        (3, ["3", "10"], 30_000),
        // 60 naps of 10 ms: the time marked is how long a new process's
        // stacks stay incomplete (until its own binary's table is in).
        (4, ["60", "10"], 600_000),
    ] {
        // A fresh file each time: its own table is not built before it runs.
        let copy = dir.join(format!("holdout{i}"));
        let _ = std::fs::remove_file(&copy);
        std::fs::copy(&bin, &copy).unwrap();
        let mut child = Command::new(&copy).args(args).spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let p = offcpu_of(&d, pid, slept * 95 / 100);
        let total = sum_where(&p, |_| true);
        let true_stack = sum_where(&p, |f| has_seq(f, &["main", "holdout_nap", "__nanosleep"]));
        // The program's own binary has no table yet at its first nap: the
        // walk takes frame pointers through it and says so with a marker.
        let marked = sum_where(&p, |f| f.get(1).is_some_and(|x| is_marker(x)));
        // Also true: the dynamic loader blocking before main (a page fault
        // reading ld.so.cache on a cold cache), whose root is ld.so's own
        // `_start;_dl_start`.
        let whole = |f: &[&str]| {
            (has_seq(f, &["main", "holdout_nap", "__nanosleep"]) && reaches_root(f))
                || (has_seq(f, &["_start", "_dl_start"]) && !f.iter().any(|x| is_marker(x)))
        };
        let unmarked_wrong = sum_where(&p, |f| {
            !(f.get(1).is_some_and(|x| is_marker(x)) || whole(f))
        });
        eprintln!(
            "holdout{i}: {true_stack} of {total} us under main;holdout_nap;__nanosleep, {marked} us marked"
        );
        assert!(
            total >= slept * 95 / 100 && true_stack * 100 >= total * 95 && unmarked_wrong == 0,
            "holdout{i} ({} x {} ms): {true_stack} of {total} us under main;holdout_nap;__nanosleep, \
             expected >= 95% of about {slept} us, and no unmarked stack elsewhere ({unmarked_wrong} us):\n{}",
            args[0],
            args[1],
            top(&p, 5)
        );
    }
}

/// A process started while `record` waits for another file's symbols
/// (test hook `EMBERD_TEST_SLOW_ELF`: that file's first read takes 3 s, as
/// libc's did under TCG) gets its unwind tables meanwhile: the collector
/// publishes tables while it waits. Before, they waited for the read: the
/// kernel matrix's block I/O writer had 97% of its 8 s marked `tables not
/// ready` on 6.12, and here the new process had about 3 s of its 4 marked.
#[test]
fn a_slow_files_symbols_do_not_hold_back_a_new_processs_tables() {
    use std::io::BufRead;
    require_root();
    let slow = build_c_with("cpu_70_30", "slow-unwind", NO_FP);
    let chain = build_c_with("deep_chain", "nofp-late", NO_FP);
    let _slow = Workload::spawn(Command::new(&slow).arg("12"));
    wait(300);
    let out = scratch().join("late-chain.folded");
    let mut rec = emberd()
        .env("EMBERD_LOG", "info")
        .env("EMBERD_TEST_SLOW_ELF", "/slow-unwind/")
        .args(["record", "-s", "6", "-o"])
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .expect("running emberd record");
    let mut lines = std::io::BufReader::new(rec.stderr.take().unwrap()).lines();
    let mut log = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        log.push_str(&line);
        log.push('\n');
        if line.contains("test hook EMBERD_TEST_SLOW_ELF") {
            break;
        }
    }
    assert!(
        log.contains("test hook EMBERD_TEST_SLOW_ELF"),
        "record never read the slow binary's symbols:\n{log}"
    );
    // Started while the collector waits for that read (3 s).
    let late = Workload::spawn(Command::new(&chain).arg("8"));
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let status = rec.wait().expect("waiting for emberd record");
    let rest = rest.join().unwrap().join("\n");
    assert!(status.success(), "emberd record failed:\n{log}{rest}");
    let text = std::fs::read(&out).expect("reading record's output");
    let p = emberd::render::folded::read(&text[..]).expect("valid folded stacks");
    let pid = late.pid();
    drop(late);
    let (share, n) = share_of(&p, "deep_chain", |f| {
        has_seq(f, &["main", "level_a", "level_b", "level_c"]) && reaches_root(f)
    });
    let marked = sum_where(&p, |f| {
        f[0] == "deep_chain" && f.get(1).is_some_and(|x| is_marker(x))
    });
    eprintln!(
        "started during a slow read: {:.1}% of {n} samples whole, {marked} marked",
        share * 100.0
    );
    assert!(
        n >= 100 && share >= 0.9,
        "pid {pid}: {:.1}% of {n} samples whole ({marked} marked), expected >= 90% \
         while record waited for the slow file:\n{}\n{rest}",
        share * 100.0,
        top(&p, 6)
    );
}

/// A thread spinning in anonymous executable code (a JIT's, without frame
/// pointers: rbp cleared) cannot be walked past that frame: its stacks
/// start with `[unwind error: no frame pointer in anonymous code]` instead
/// of passing for complete one-frame stacks.
#[test]
fn anonymous_code_without_frame_pointers_is_marked() {
    require_root();
    let bin = build_c("anon_spin");
    let w = Workload::spawn(Command::new(&bin).arg("15"));
    wait(500);
    // A light test, beside two others and a kernel VM: its spinner got a
    // third of a CPU (98 samples in 3 s, short of a fixed 100); the count
    // is held to the CPU it ran.
    let (p, ran) = record_cpu_ran(&w, "anon_spin.folded", "4");
    let all = sum_where(&p, |f| f[0] == "anon_spin");
    let marked = sum_where(&p, |f| {
        f[0] == "anon_spin"
            && f.get(1) == Some(&"[unwind error: no frame pointer in anonymous code]")
    });
    let unmarked_short = sum_where(&p, |f| {
        f[0] == "anon_spin" && !f.get(1).is_some_and(|x| is_marker(x)) && !reaches_root(f)
    });
    assert_covers_cpu(all, ran, 1.0, &format!("anon_spin:\n{}", top(&p, 5)));
    assert!(
        marked * 100 >= all * 95 && unmarked_short == 0,
        "{marked} of {all} samples carry the marker, {unmarked_short} neither reach the root nor \
         carry a marker:\n{}",
        top(&p, 5)
    );
}

/// Shares of `p`'s stacks of the processes whose name starts with `comm`:
/// (whole: reach the root through `main;spin` or `main;nap`, the
/// program's two calls, marked: start with a marker, neither), each in the
/// profile's unit.
fn startup_shares(p: &Profile, comm: &str) -> (u64, u64, u64) {
    let ours = |f: &[&str]| f[0].starts_with(comm);
    let whole = sum_where(p, |f| ours(f) && spin_nap_whole(f));
    let marked = sum_where(p, |f| ours(f) && f.get(1).is_some_and(|x| is_marker(x)));
    let all = sum_where(p, ours);
    (whole, marked, all - whole - marked)
}

/// The daemon started beside 50 running processes (10 binaries, half built
/// without frame pointers, each alternating 5 ms in spin() and 195 ms in
/// nanosleep() from nap(): 1.25 CPUs busy of 2) names them from its first
/// sample: it builds their tables before it attaches, so over its first 5 s
/// at least 95% of CPU samples and off-CPU time reach the root, the rest is
/// marked (nothing passes for a true stack while it is not), and 2 s later
/// as much. Before tables were built first, CPU samples taken while the
/// events programs loaded were walked without tables: 35% of the first 5 s
/// marked (77% with the processes spinning 100 ms in 200).
#[test]
fn daemon_started_beside_50_processes_is_whole_from_its_first_sample() {
    require_root();
    let dir = scratch().join("startup");
    std::fs::create_dir_all(&dir).unwrap();
    let fp = build_c("spin_nap");
    let nofp = build_c_with("spin_nap", "nofp", NO_FP);
    let mut running = Vec::new();
    for i in 0..10 {
        // Distinct files: ten tables to build, as ten programs would need.
        let copy = dir.join(format!("startnap{i}"));
        let _ = std::fs::remove_file(&copy);
        std::fs::copy(if i % 2 == 0 { &fp } else { &nofp }, &copy).unwrap();
        for _ in 0..5 {
            running.push(Workload::spawn(
                Command::new(&copy).args(["60", "5", "195"]),
            ));
        }
    }
    wait(1000);
    let started = Instant::now();
    let d = Daemon::start(&[], &[]);
    let ready_ms = started.elapsed().as_millis();
    wait(5000);
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for event in ["cpu", "offcpu"] {
        let shares = |secs: u32| {
            let r = d.get(&format!("/folded?seconds={secs}&event={event}"));
            assert_eq!(r.status, 200, "{}", r.text());
            let p = parse_folded(&r.text());
            (startup_shares(&p, "startnap"), p)
        };
        // The whole history so far: the daemon's first 5 s.
        let ((whole, marked, wrong), p) = shares(30);
        let ((late_whole, late_marked, late_wrong), _) = shares(2);
        let all = whole + marked + wrong;
        for (stack, n) in p.iter() {
            let f: Vec<&str> = stack.frames().collect();
            if f[0].starts_with("startnap")
                && !spin_nap_whole(&f)
                && !f.get(1).is_some_and(|x| is_marker(x))
            {
                eprintln!("{event}, neither whole nor marked: {} {n}", stack.as_str());
            }
        }
        let late_all = late_whole + late_marked + late_wrong;
        report.push(format!(
            "{event}: first 5 s: {:.1}% whole, {:.1}% marked, {:.1}% neither (of {all}); \
             last 2 s: {:.1}% whole (of {late_all})",
            pct(whole, all),
            pct(marked, all),
            pct(wrong, all),
            pct(late_whole, late_all),
        ));
        if all == 0
            || wrong * 100 > all
            || whole * 100 < all * 95
            || late_whole * 100 < late_all * 95
        {
            failures.push(format!("{event}:\n{}", top(&p, 8)));
        }
    }
    eprintln!(
        "daemon ready {ready_ms} ms after start beside 50 processes\n{}",
        report.join("\n")
    );
    assert!(
        failures.is_empty(),
        "expected >= 95% whole over the first 5 s, <= 1% neither whole nor marked, \
         >= 95% whole over the last 2 s:\n{}\n{}",
        report.join("\n"),
        failures.join("\n")
    );
    drop(running);
}

/// Whether a stack of spin_nap reaches the root through one of its two
/// calls. CPU samples land in `nap` too (the syscall's entry and exit, the
/// scheduler): counting only `main;spin` as whole once failed a CI run on
/// six such true stacks.
fn spin_nap_whole(f: &[&str]) -> bool {
    (has_seq(f, &["main", "spin"]) || has_seq(f, &["main", "nap"])) && reaches_root(f)
}

fn pct(part: u64, all: u64) -> f64 {
    part as f64 * 100.0 / all.max(1) as f64
}
