//! One local user filling a table the whole host shares: the BPF unwinder's
//! process places, its unwind-table rows, and the stack map of blocked
//! threads. Each test has one user (uid 65530) fill the table as far as
//! they can, then starts another user's program (uid 65531) and checks its
//! stacks are whole.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common::*;
use emberd::profile::Profile;

const HOSTILE: u32 = 65530;
const VICTIM: u32 = 65531;

/// Kills every process of `uid` (the test's users own nothing else).
fn kill_user(uid: u32) {
    let _ = Command::new("pkill")
        .args(["-KILL", "-U", &uid.to_string()])
        .status();
}

/// A copy of the frameless deep_chain under `dir`, readable by everyone.
pub(super) fn victim_program(dir: &str) -> PathBuf {
    let bin = build_c_debian("deep_chain");
    let dir = Path::new("/tmp").join(dir);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("deep_chain");
    std::fs::copy(&bin, &copy).expect("copying deep_chain");
    copy
}

/// The share of `pid`'s CPU samples of the last 5 s (under process name
/// `comm`: deep_chain, wide_frames) whose stack is
/// main;level_a;level_b;level_c from the root, their number, and the top
/// stacks.
pub(super) fn victim_complete(d: &Daemon, pid: u32, comm: &str) -> (f64, u64, String) {
    let r = d.get(&format!("/folded?seconds=5&pid={pid}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let p = parse_folded(&r.text());
    let all = sum_where(&p, |f| f[0] == comm);
    let good = sum_where(&p, |f| {
        f[0] == comm && has_seq(f, &["main", "level_a", "level_b", "level_c"]) && reaches_root(f)
    });
    (good as f64 / all.max(1) as f64, all, top(&p, 6))
}

/// Removes the test's processes whatever the outcome.
struct Users;

impl Drop for Users {
    fn drop(&mut self) {
        kill_user(HOSTILE);
        kill_user(VICTIM);
    }
}

/// One user starting more processes than the BPF unwinder has places for
/// (`--unwind-processes 32` here, 8192 by default) cannot keep another
/// user's new program off its tables: the user holding the most places
/// gives one up, counted as `process_evicted_for_share`.
#[test]
fn one_user_cannot_fill_the_unwinders_process_places() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let victim = victim_program("emberd-share-procs");
    // The bounded form: the loop form finds a refused process's tables
    // through bpf_find_vma anyway (this test passed there without the
    // share).
    let d = Daemon::start(
        &["--unwind-processes", "32"],
        &[("EMBERD_PROGRAM_FORM", "bounded")],
    );
    let _hostile = Workload::spawn(
        run_as(HOSTILE, Path::new("/bin/sh"))
            .args(["-c", "for i in $(seq 64); do sleep 60 & done; wait"]),
    );
    wait(3000);
    let m = d.get("/metrics").text();
    let places = metric(&m, "emberd_unwind_tables{map=\"processes\"}");
    assert!(
        places >= 32.0,
        "64 sleeping processes should fill the 32 places ({places} held):\n{m}"
    );
    let w = Workload::spawn(run_as(VICTIM, &victim).arg("12"));
    wait(8000);
    let (share, n, ctx) = victim_complete(&d, w.pid(), "deep_chain");
    let m = d.get("/metrics").text();
    let evicted = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"process_evicted_for_share\"}",
    );
    assert!(
        n >= 100 && share >= 0.9,
        "{:.1}% of the other user's {n} samples are whole, expected >= 90%:\n{ctx}",
        share * 100.0
    );
    assert!(
        evicted >= 1.0,
        "a place should have been taken from the user holding 32 (evicted = {evicted})"
    );
}

/// Gives an ELF file build id number `n` in place (if it has one), so that
/// its table is not shared with the original's or another copy's.
fn new_build_id(path: &Path, n: u32) {
    use object::{Object, ObjectSection};
    let mut bytes = std::fs::read(path).unwrap();
    let range = {
        let file = object::File::parse(&bytes[..]).unwrap();
        file.section_by_name(".note.gnu.build-id")
            .and_then(|s| s.file_range())
    };
    if let Some((at, len)) = range {
        let end = (at + len) as usize;
        bytes[end - 4..end].copy_from_slice(&n.to_le_bytes());
        std::fs::write(path, &bytes).unwrap();
    }
}

/// One user running many programs of their own fills the unwind-table
/// budget (2 MiB here: the host's own programs take about half); another
/// user's program started next still gets its table: the rows of the first
/// user's table used longest ago are taken back, counted as
/// `table_evicted_for_share`. The other user's program is a static binary
/// larger than each of the first user's, so no gap they leave can hold it.
#[test]
fn one_user_cannot_fill_the_unwind_table_budget() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let mut flags = DEBIAN_CFLAGS.to_vec();
    flags.push("-static");
    let small = build_c_with("sleepy", "static", &flags);
    flags.extend(["-Wl,--whole-archive", "-lm", "-Wl,--no-whole-archive"]);
    let big = build_c_with("deep_chain", "static-libm", &flags);
    let dir = Path::new("/tmp/emberd-share-rows");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("user")).unwrap();
    for i in 0..40 {
        let p = dir.join("user").join(format!("sleepy{i}"));
        std::fs::copy(&small, &p).unwrap();
        new_build_id(&p, i);
    }
    let victim = dir.join("deep_chain");
    std::fs::copy(&big, &victim).unwrap();
    let d = Daemon::start(&["--unwind-table-budget-mib", "2"], &[]);
    let _hostile = Workload::spawn(run_as(HOSTILE, Path::new("/bin/sh")).arg("-c").arg(format!(
        "for f in {}/user/*; do $f 60 & done; wait",
        dir.display()
    )));
    wait(5000);
    let m = d.get("/metrics").text();
    let refused = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"budget_refused\"}",
    );
    assert!(
        refused >= 1.0,
        "40 programs should overflow the 2 MiB budget (budget_refused = {refused})"
    );
    let w = Workload::spawn(run_as(VICTIM, &victim).arg("12"));
    wait(8000);
    let (share, n, ctx) = victim_complete(&d, w.pid(), "deep_chain");
    let m = d.get("/metrics").text();
    let stripped = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"table_evicted_for_share\"}",
    );
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        n >= 100 && share >= 0.9,
        "{:.1}% of the other user's {n} samples are whole, expected >= 90%:\n{ctx}",
        share * 100.0
    );
    assert!(
        stripped >= 1.0,
        "a table of the user holding the budget should have been taken back (evicted = {stripped})"
    );
}

/// Rewrites every FDE's CFI instructions in `path`'s `.eh_frame` (in
/// place, lengths unchanged) to say the CFA is rsp+40 everywhere: made-up
/// CFI over the file's own addresses, under its own build id, as a local
/// user can write into a copy of anyone's program. Returns how many FDEs
/// were rewritten. gcc's x86-64 CIEs (`zR`, pointers pc-relative 4-byte)
/// are assumed; anything else stops the test.
fn forge_cfi(path: &Path) -> usize {
    use object::{Object, ObjectSection};
    let mut bytes = std::fs::read(path).unwrap();
    let (at, len) = {
        let file = object::File::parse(&bytes[..]).unwrap();
        file.section_by_name(".eh_frame")
            .and_then(|s| s.file_range())
            .expect("the program has an .eh_frame")
    };
    let (at, end) = (at as usize, (at + len) as usize);
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let mut i = at;
    let mut forged = 0;
    while i + 8 <= end {
        let length = u32_at(&bytes, i) as usize;
        if length == 0 {
            break;
        }
        assert_ne!(length, 0xffff_ffff, "a 64-bit .eh_frame record");
        let (body, next) = (i + 4, i + 4 + length);
        if u32_at(&bytes, body) == 0 {
            let aug = &bytes[body + 5..body + 8];
            assert_eq!(aug, b"zR\0", "a CIE other than gcc's zR");
        } else {
            // CIE pointer, pc_begin, pc_range (4 bytes each), the
            // augmentation data's length (a ULEB128 under 128, 0 for zR),
            // then the instructions up to the record's end.
            let aug_len = bytes[body + 12] as usize;
            assert!(aug_len < 0x80, "augmentation data of {aug_len} bytes");
            let ins = body + 13 + aug_len;
            if next >= ins + 2 {
                // DW_CFA_def_cfa_offset 40, then DW_CFA_nop.
                bytes[ins] = 0x0e;
                bytes[ins + 1] = 40;
                bytes[ins + 2..next].fill(0);
                forged += 1;
            }
        }
        i = next;
    }
    std::fs::write(path, &bytes).unwrap();
    forged
}

/// A local user's copy of root's frameless program with made-up CFI (the
/// same build id, the same addresses: a copy with its `.eh_frame` edited),
/// running when root's program starts, lends root's program none of its
/// rows: root's stacks stay whole. An unedited copy of root's program (a
/// container's copy of a library, as it were) still takes root's rows, the
/// same build id and the same rows, counted as `rows_shared` (root's, as
/// `build_id_rows_differ`). Before the
/// rows were compared (issue 61), the forger's table served root's program:
/// 0 of 504 samples whole.
#[test]
fn a_forged_build_id_lends_no_rows_to_another_users_program() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let victim = victim_program("emberd-share-forged");
    let dir = victim.parent().unwrap();
    let forger = dir.join("forger");
    std::fs::copy(&victim, &forger).unwrap();
    let forged = forge_cfi(&forger);
    assert!(forged >= 4, "{forged} FDEs rewritten in the forger's copy");
    let honest = dir.join("honest_copy");
    std::fs::copy(&victim, &honest).unwrap();
    let d = Daemon::start(&[], &[]);
    let f = Workload::spawn(run_as(HOSTILE, &forger).arg("30"));
    wait(4000);
    let w = Workload::spawn(Command::new(&victim).arg("12"));
    wait(2000);
    let _h = Workload::spawn(run_as(HOSTILE, &honest).arg("20"));
    wait(6000);
    let (share, n, ctx) = victim_complete(&d, w.pid(), "deep_chain");
    // The forger's own stacks, unwound by its own rows: the forgery works
    // (else this test would prove nothing).
    let r = d.get(&format!("/folded?seconds=5&pid={}", f.pid()));
    let p = parse_folded(&r.text());
    let forger_all = sum_where(&p, |fr| fr[0] == "forger");
    let forger_whole = sum_where(&p, |fr| fr[0] == "forger" && reaches_root(fr));
    let m = d.get("/metrics").text();
    let shared = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"rows_shared\"}",
    );
    let differ = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"build_id_rows_differ\"}",
    );
    assert!(
        n >= 100 && share >= 0.99,
        "{:.1}% of root's {n} samples are whole beside the forger's copy, expected >= 99%:\n{ctx}",
        share * 100.0
    );
    assert!(
        forger_all >= 100 && forger_whole * 10 < forger_all,
        "the forger's own copy is unwound by its made-up rows: {forger_whole} of {forger_all} whole:\n{}",
        top(&p, 6)
    );
    assert!(
        differ >= 1.0,
        "root's program, of the forger's build id with other rows, is counted: build_id_rows_differ = {differ}"
    );
    assert!(
        shared >= 1.0,
        "the unedited copy (same build id, same rows) takes root's rows: rows_shared = {shared}"
    );
}

/// A program whose one function, `frames`, steps through `n` distinct CFA
/// offsets from `base`, 8 bytes apart (its CFI names `n` rules no other
/// file does), and which sleeps for argv[1] s.
fn rule_filler(dir: &Path, name: &str, base: u32, n: u32) -> PathBuf {
    let mut asm = String::from(
        ".text\n.globl frames\n.type frames,@function\nframes:\n.cfi_startproc\nsub $8,%rsp\n",
    );
    for i in 0..n {
        asm.push_str(&format!(".cfi_def_cfa_offset {}\nnop\n", base + 8 * i));
    }
    asm.push_str(".cfi_def_cfa_offset 16\nadd $8,%rsp\n.cfi_def_cfa_offset 8\nret\n.cfi_endproc\n");
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!(
            "#include <stdlib.h>\n#include <unistd.h>\n__asm__({asm:?});\n\
             int main(int argc, char **argv) {{ sleep(argc > 1 ? atoi(argv[1]) : 10); return 0; }}\n"
        ),
    )
    .unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running gcc");
    assert!(status.success(), "gcc failed to build {}", src.display());
    out
}

/// One user cannot fill the rule table the unwind tables share (65,536
/// rules: CFA offsets and how rbp is saved). First the attack: 20
/// programs of 4,097 distinct frame sizes each, each refused for naming
/// over 4,096 new rules, which used to keep the 4,096 it added: 16 of them
/// filled the table until the daemon restarted, and root's program
/// started next was `[unwind error: table budget full]` in every sample
/// (0.000 of 668). A refused table now keeps no rule. Then the user fills
/// the table with tables it may keep (4,096 new rules each, then smaller
/// ones to the brim); root's program, whose frames name two sizes nobody
/// else's do, still gets its rules: a table of the user charged with the
/// most rules is taken back (`table_evicted_for_share`), for it or for
/// root's processes before it.
#[test]
fn one_user_cannot_fill_the_unwind_rule_table() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let dir = Path::new("/tmp/emberd-share-rules");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let victim = dir.join("wide_frames");
    std::fs::copy(build_c_debian("wide_frames"), &victim).unwrap();
    // Distinct offsets across programs: each program's rules are new.
    let mut base = 1 << 20;
    let mut over = Vec::new();
    for i in 0..20 {
        over.push(rule_filler(dir, &format!("over{i}"), base, 4097));
        base += 8 * 4200;
    }
    let mut kept = Vec::new();
    for i in 0..16 {
        kept.push(rule_filler(dir, &format!("full{i}"), base, 4096));
        base += 8 * 4200;
    }
    for n in [2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1] {
        kept.push(rule_filler(dir, &format!("brim{n}"), base, n));
        base += 8 * 4200;
    }
    let d = Daemon::start(&[], &[]);
    let figure = |d: &Daemon, name: &str| metric(&d.get("/metrics").text(), name);
    let rules = "emberd_unwind_tables{map=\"rules\"}";
    let refused = "emberd_unwind_table_events_total{reason=\"budget_refused\"}";
    let run_all = |progs: &[PathBuf]| {
        let list: Vec<String> = progs.iter().map(|p| p.display().to_string()).collect();
        Workload::spawn(run_as(HOSTILE, Path::new("/bin/sh")).arg("-c").arg(format!(
            "for f in {}; do $f 60 & sleep 0.1; done; wait",
            list.join(" ")
        )))
    };
    let _over = run_all(&over);
    wait(5000);
    let after_over = figure(&d, rules);
    let refused_over = figure(&d, refused);
    assert!(
        refused_over >= 20.0 && after_over < 20_000.0,
        "{refused_over} tables refused for naming 4,097 new rules each (20 run) left {after_over} rules held (the host's own need a few thousand)"
    );
    let _full = run_all(&kept);
    wait(8000);
    // Full once at least: a table of the user's was refused for room.
    // (Root's processes started meanwhile, setpriv's among them, may have
    // had one of the user's tables taken back since.)
    let full = figure(&d, rules);
    let refused_full = figure(&d, refused) - refused_over;
    assert!(
        refused_full >= 1.0,
        "the user's programs should fill the 65,536 rules ({full} held, {refused_full} of their tables refused)"
    );
    let w = Workload::spawn(Command::new(&victim).arg("14"));
    wait(8000);
    let (share, n, ctx) = victim_complete(&d, w.pid(), "wide_frames");
    let stripped = figure(
        &d,
        "emberd_unwind_table_events_total{reason=\"table_evicted_for_share\"}",
    );
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        n >= 100 && share >= 0.99,
        "{:.1}% of root's {n} samples are whole with the rule table full ({full} rules held, {stripped} of the user's tables taken back), expected >= 99%:\n{ctx}",
        share * 100.0
    );
}

/// One user's process maps 17,000 files of a page each as code (a loader
/// or a JIT may: tests/workloads/many_files.py) and sleeps. The daemon
/// kept a table entry, a build and a `file_tables` place per mapped file
/// (16,384 places), so the user's files filled `file_tables`, and root's
/// programs started later found no table there: the BPF unwinder reads
/// `file_tables` for a process the agent has not read yet (its first
/// milliseconds). Now one user holds at most a quarter of the places
/// (refusals counted as `file_refused_for_share`), and root's short runs
/// of a frameless program, started after, are whole from their first
/// sample.
#[test]
fn one_users_mapped_files_cannot_fill_the_file_tables() {
    let (_, refused, _, _) = roots_short_runs_beside_mapped_files(None);
    assert!(
        refused >= 12_000.0,
        "the user's files past a quarter of the 16,384 places should be refused ({refused} counted)"
    );
}

/// The same user's process of 17,000 mapped files then forks children
/// for ever, 12 alive at a time, each living 20 ms (as a prefork server
/// does): a new process of 17,000 mappings to read every few
/// milliseconds. The agent's one thread read each (maps for names, a
/// `stat` per mapping for tables, re-reads while young) as it came, so it
/// was busy with the user's children when root's programs started, and
/// read them only after they had exited: 14 of root's 186 samples named
/// `short_lived_hot`, 103 `[exited]`, 69 `[unwind error: frame address
/// did not advance]`. Now each user spends at most 100 ms of the agent's time a
/// second (all users but root 250 ms), their further processes read later
/// (`process_read_deferred`), and root's are read at once.
#[test]
fn one_users_process_churn_cannot_delay_roots_reads() {
    let (p, _, m, deferred) = roots_short_runs_beside_mapped_files(Some(12));
    let spent = metric(&m, "emberd_process_read_seconds_total");
    eprintln!(
        "{deferred} of the user's processes read later while root's ran; {spent:.2} s spent reading theirs"
    );
    assert!(
        deferred >= 50.0,
        "the user's children past their share of reading time should be read later while root's programs run ({deferred} counted):\n{}",
        top(&p, 8)
    );
}

/// Runs a user's `many_files.py` of 17,000 mapped files (forking `churn`
/// children at a time if given), then root's frameless `short_lived` once
/// and 80 times for 50 ms each, each a process the agent has not read;
/// asserts that >= 99% of root's samples are whole. The profile, the
/// user's files refused a place, the metrics, and the user's processes
/// deferred while root's ran.
fn roots_short_runs_beside_mapped_files(churn: Option<u32>) -> (Profile, f64, String, f64) {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let dir = Path::new("/tmp/emberd-share-files");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("mine")).unwrap();
    std::os::unix::fs::chown(dir.join("mine"), Some(HOSTILE), Some(HOSTILE)).unwrap();
    // Root's program: a new file, so its table is built (and placed in
    // `file_tables`) after the user's files are.
    let victim = dir.join("short_lived");
    std::fs::copy(build_c_debian("short_lived"), &victim).unwrap();
    let mut user = run_as(HOSTILE, Path::new("/usr/bin/python3"));
    user.arg(workload("many_files.py"))
        .arg(dir.join("mine/f"))
        .arg("17000");
    if let Some(n) = churn {
        user.arg(n.to_string());
    }
    // Mapped before the daemon starts: it reads every process at start.
    let mut hostile = Workload::spawn_ready(&mut user, "mapped 17000");
    let d = Daemon::start(&[], &[]);
    wait(4000);
    let deferred_before = metric(
        &d.get("/metrics").text(),
        "emberd_unwind_table_events_total{reason=\"process_read_deferred\"}",
    );
    // The first run builds the table; the next 80 each start as a process
    // the agent has not read yet.
    let status = Command::new(&victim).arg("0.5").status().unwrap();
    assert!(status.success(), "{} failed", victim.display());
    wait(500);
    let started = Instant::now();
    let status = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "for i in $(seq 80); do {} 0.05 || exit 1; done",
            victim.display()
        ))
        .status()
        .unwrap();
    assert!(status.success(), "the short runs failed");
    let secs = started.elapsed().as_secs() + 2;
    // The user's process still maps its files (and forks, if asked) when
    // root's runs end.
    assert!(
        hostile.running(),
        "the user's many_files.py exited before root's runs ended"
    );
    wait(1500);
    let m = d.get("/metrics").text();
    let refused = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"file_refused_for_share\"}",
    );
    let r = d.get(&format!("/folded?seconds={secs}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let p = parse_folded(&r.text());
    let hot = |f: &[&str]| f[0] == "short_lived" && f.contains(&"short_lived_hot");
    let all = sum_where(&p, hot);
    let is_whole = |f: &[&str]| has_seq(f, &["main", "short_lived_hot"]) && reaches_root(f);
    let whole = sum_where(&p, |f| hot(f) && is_whole(f));
    drop(hostile);
    let _ = std::fs::remove_dir_all(dir);
    let share = whole as f64 / all.max(1) as f64;
    eprintln!(
        "{whole} of root's {all} samples in short_lived_hot whole; {refused} of the user's files refused a place; not whole:\n{}",
        top_where(&p, 12, |f| hot(f) && !is_whole(f))
    );
    // The user's forks and exits of a 17,000-mapping process take most of
    // the two CPUs (the kernel copies and unmaps each mapping): root's
    // runs got 104-175 samples beside them here, about 400 alone.
    let least = if churn.is_some() { 60 } else { 150 };
    assert!(
        all >= least,
        "80 runs of 50 ms should give short_lived_hot at least {least} samples, got {all}:\n{}",
        top(&p, 8)
    );
    assert!(
        share >= 0.99,
        "{:.1}% of root's {all} samples of short runs are whole beside the user's 17,000 mapped files ({refused} refused a place{}), expected >= 99%; those not whole:\n{}",
        share * 100.0,
        if churn.is_some() { ", forking" } else { "" },
        top_where(&p, 12, |f| hot(f) && !is_whole(f))
    );
    let deferred = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"process_read_deferred\"}",
    ) - deferred_before;
    (p, refused, m, deferred)
}

/// One user's threads blocking at thousands of distinct stacks
/// (tests/workloads/many_stacks.c) cannot fill the events' stack map
/// (`--stack-map-entries 1024` here) for everyone: they may hold half of
/// it, their further stacks are refused and counted
/// (`emberd_stacks_lost_total{reason="user_share"}`), and another user's
/// sleeping thread is charged in full under its own stack.
#[test]
fn one_user_cannot_fill_the_blocked_stack_map() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let hostile_bin = build_c("many_stacks");
    let sleepy = build_c_debian("sleepy");
    let d = Daemon::start(&["--stack-map-entries", "1024"], &[]);
    let _hostile = Workload::spawn(run_as(HOSTILE, &hostile_bin).args(["16", "40"]));
    let w = Workload::spawn(run_as(VICTIM, &sleepy).arg("4"));
    let (us, p, refused, full) = sleeps_charged(&d, w.pid());
    let hostile = d
        .get("/folded?seconds=10&event=offcpu&comm=many_stacks")
        .text();
    assert!(
        hostile.contains("left") && hostile.contains("right"),
        "the blocking user's stacks within their share are still recorded"
    );
    assert!(
        us >= 900_000,
        "the other user's 5 x 200 ms sleeps should be charged under sleepy, whole: {us} us:\n{}",
        top(&p, 6)
    );
    assert!(
        refused >= 100.0,
        "the blocking user's stacks past half the map should be refused (user_share = {refused}, map full = {full})"
    );
}

/// The off-CPU time charged to `sleepy`'s sleeper thread in process `pid`
/// (5 x 200 ms, ending 5 s in), whole stacks only, once it is all there or
/// 20 s have passed; the profile, and the stacks refused for a user's
/// share and for a full map meanwhile.
pub(super) fn sleeps_charged(d: &Daemon, pid: u32) -> (u64, Profile, f64, f64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut us, mut p);
    loop {
        wait(1000);
        let r = d.get(&format!(
            "/folded?seconds=20&event=offcpu&pid={pid}&group=thread"
        ));
        assert_eq!(r.status, 200, "{}", r.text());
        p = parse_folded(&r.text());
        us = sum_where(&p, |f| {
            has_seq(f, &["sleeper_thread", "sleepy"]) && reaches_root(f)
        });
        if us >= 900_000 || std::time::Instant::now() > deadline {
            break;
        }
    }
    let m = d.get("/metrics").text();
    let lost = |reason: &str| {
        metric(
            &m,
            &format!("emberd_stacks_lost_total{{event=\"offcpu\",reason=\"{reason}\"}}"),
        )
    };
    (us, p, lost("user_share"), lost("stack_map_full"))
}

/// A thread that execs takes over its process's id, and its own thread id
/// is gone without an exit: the bounded form (Linux 5.10 to 5.16) keeps
/// off-CPU state by thread id, so each such exec used to leave an entry
/// behind. One user's loop of 3000 thread+exec rounds (the table holds
/// 1024 here, `--offcpu-bounded-threads`; 32768 by default) leaves
/// nothing behind, never reaches the user's share of the table (refusals
/// counted as `blocked_user_share`), and another user's new thread started
/// after it is charged its sleeps in full.
#[test]
fn a_thread_and_exec_loop_leaves_no_off_cpu_state_behind_in_the_bounded_form() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let looper = build_c("exec_loop");
    let sleepy = build_c_debian("sleepy");
    let d = Daemon::start(
        &["--offcpu-bounded-threads", "1024"],
        &[("EMBERD_PROGRAM_FORM", "bounded")],
    );
    let mut hostile = run_as(HOSTILE, &looper)
        .arg("3000")
        .spawn()
        .expect("running exec_loop");
    let started = std::time::Instant::now();
    let status = hostile.wait().unwrap();
    assert!(status.success(), "exec_loop failed: {status}");
    let looped = started.elapsed();
    // The daemon reads the 3000 processes' mappings meanwhile.
    wait(2000);
    let w = Workload::spawn(Command::new(&sleepy).arg("1"));
    let pid = w.pid();
    // Five 200 ms sleeps from 1 s on; then the drain after them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    // The sleeping thread's own line, whatever its frames.
    let thread = format!("sleepy-{pid}/");
    let main = format!("sleepy-{pid}/{pid}");
    let (mut us, mut p);
    loop {
        wait(1000);
        let r = d.get(&format!(
            "/folded?seconds=20&event=offcpu&pid={pid}&group=thread"
        ));
        assert_eq!(r.status, 200, "{}", r.text());
        p = parse_folded(&r.text());
        us = sum_where(&p, |f| f[0].starts_with(&thread) && f[0] != main);
        if us >= 950_000 || std::time::Instant::now() > deadline {
            break;
        }
    }
    let m = d.get("/metrics").text();
    let unavailable = metric(
        &m,
        "emberd_samples_dropped_total{event=\"offcpu\",reason=\"blocked_state_unavailable\"}",
    );
    let refused = metric(
        &m,
        "emberd_samples_dropped_total{event=\"offcpu\",reason=\"blocked_user_share\"}",
    );
    eprintln!(
        "exec loop: 3000 rounds in {looped:?}; root's sleeps charged {us} us; refused {refused}, table full {unavailable}"
    );
    assert!(
        (950_000..=1_150_000).contains(&us),
        "root's thread started after {looped:?} of thread+exec rounds should be charged its 5 x 200 ms sleeps, got {us} us (periods lost to a full table: {unavailable}):\n{}",
        top(&p, 6)
    );
    assert!(
        refused == 0.0 && unavailable == 0.0,
        "3000 thread+exec rounds should leave no entries behind: {refused} periods refused for the user's share, {unavailable} lost to a full table"
    );
}

/// A user's fake interpreter churning code objects (tests/workloads/
/// py_churn.py: over ten thousand in use and tens of thousands of new ones
/// a second, each walked as it naps) cannot push another user's Python
/// names out of `py_codes` or the daemon's code cache. Root's busy.py (hot
/// functions, met at every sample) and root's py_service.py (a handler met
/// a few times a second, after pauses: what a least-recently-used table
/// gives up first) beside it keep their samples named, not
/// `[python: code evicted]`; the churner's records past its share (half of
/// `py_codes`) are refused and counted.
#[test]
fn one_users_code_churn_cannot_evict_another_users_python_names() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let dir = Path::new("/tmp/emberd-share-pycodes");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let churn = dir.join("py_churn.py");
    std::fs::copy(workload("py_churn.py"), &churn).unwrap();
    // Room for every table: a busy host's own programs must not push
    // python3's table out (that would be another test's subject).
    let d = Daemon::start(&["--unwind-table-budget-mib", "64"], &[]);
    let _hostile = Workload::spawn(
        run_as(HOSTILE, Path::new("/usr/bin/python3"))
            .arg(&churn)
            .arg("30"),
    );
    wait(3000);
    let w = Workload::spawn(
        Command::new("/usr/bin/python3")
            .arg(workload("busy.py"))
            .arg("20"),
    );
    let service = Workload::spawn(
        Command::new("/usr/bin/python3")
            .arg(workload("py_service.py"))
            .arg("20"),
    );
    // The CPU time each had in the 10 s window judged: what its samples
    // are owed (three busy processes and the daemon share two CPUs). The
    // window has bounds of its own: "the last 8 s" ended at the query,
    // ahead of the last drain's naming, and held 77-94% of what the
    // processes ran here (the service's 48 samples in CI).
    wait(2000);
    let from = unix_now_ms_param();
    let cpu_from = [cpu_seconds(w.pid()), cpu_seconds(service.pid())];
    wait(10000);
    let to = unix_now_ms_param();
    let cpu_to = [cpu_seconds(w.pid()), cpu_seconds(service.pid())];
    // A drain a second, then its naming, which the churner slows.
    wait(2500);
    let mut figures = Vec::new();
    for ((who, pid, file), cpu) in [
        ("busy.py", w.pid(), "(busy.py)"),
        ("py_service.py", service.pid(), "(py_service.py)"),
    ]
    .into_iter()
    .zip(cpu_to.iter().zip(cpu_from).map(|(t, f)| t - f))
    {
        let r = d.get(&format!("/folded?from={from}&to={to}&pid={pid}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let p = parse_folded(&r.text());
        // Samples in Python code: under the interpreter's frames (the
        // service's naps and interpreter start-up are not).
        let all = sum_where(&p, |f| {
            f.iter()
                .any(|x| x.ends_with(file) || *x == "[python: code evicted]")
        });
        let named = sum_where(&p, |f| f.iter().any(|x| x.ends_with(file)));
        let evicted = sum_where(&p, |f| f.contains(&"[python: code evicted]"));
        let process = sum_where(&p, |_| true);
        figures.push(format!(
            "{who} {named} of {all} named, {evicted} evicted ({process} samples in all, {cpu:.2} s of CPU)"
        ));
        // Samples owed at 99 Hz, less 10% and three standard deviations
        // of the count (the service runs in 37 ms bursts: about 10 at 100
        // samples): fails on busy.py's window (about 590) short of a
        // quarter, the service's (about 100) short of two fifths.
        let owed = 99.0 * cpu;
        assert!(
            process as f64 >= 0.9 * owed - 3.0 * owed.sqrt(),
            "root's {who} beside the churner: {process} samples in the 10 s window for {cpu:.2} s of CPU ({owed:.0} at 99 Hz; history dropped or samples lost):\n{}",
            top(&p, 6)
        );
        assert!(
            all >= 50,
            "root's {who} beside the churner: only {all} samples in Python code in 10 s ({process} of the process in all, for {cpu:.2} s of CPU): at least 50 are needed to judge its names:\n{}",
            top(&p, 6)
        );
        assert!(
            named as f64 >= 0.9 * all as f64,
            "root's {who} beside the churner: {named} of {all} Python samples named (expected >= 90%):\n{}",
            top(&p, 6)
        );
        assert!(
            evicted * 50 <= all,
            "root's {who} beside the churner: {evicted} of {all} Python samples `[python: code evicted]` (at most 2% allowed):\n{}",
            top(&p, 6)
        );
    }
    let m = d.get("/metrics").text();
    let refused = metric(
        &m,
        "emberd_python_codes_refused_total{event=\"offcpu\",reason=\"user_share\"}",
    );
    let churned = d
        .get(&format!(
            "/folded?from={from}&to={to}&event=offcpu&comm=python3"
        ))
        .text()
        .matches("_1 (py_churn.py)")
        .count();
    let _ = std::fs::remove_dir_all(dir);
    eprintln!(
        "code churn: root's {}; churner's records refused {refused}, its frames named {churned}",
        figures.join(", ")
    );
    assert!(
        refused >= 1.0,
        "the churner's code records past half of py_codes should be refused and counted (user_share = {refused})"
    );
    assert!(
        churned > 0,
        "the churner's own frames within its share should still be named"
    );
}

/// One user (uid 65530) churning unique off-CPU stacks (`py_churn.py`:
/// tens of thousands of new Python functions a second, each chain napping)
/// fills the off-CPU store's budget. Before, the store dropped its oldest
/// slots for everyone: root's napping service lost all but the last 9-10 s
/// of its off-CPU history. Now the user's own stacks are folded first
/// (their time kept under `[stacks folded: their user filled the
/// history]`), and root's history stays whole.
///
/// The churn runs as processes of half a second one after another, gone
/// before the agent could read their status files, beside root's own short
/// processes (`holdout_blip`, a nap binary living 0.1 s, in a loop): the
/// account each sample counts in is the one BPF read with it. When the
/// agent read it from /proc, both users' short processes counted as one
/// unknown account, root's short processes were folded with the churn, and
/// a user could split their churn between that account and their own.
#[test]
fn one_users_stack_churn_cannot_cut_another_users_history() {
    require_root();
    let _users = Users;
    kill_user(HOSTILE);
    let dir = Path::new("/tmp/emberd-share-history");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let churn = dir.join("py_churn.py");
    std::fs::copy(workload("py_churn.py"), &churn).unwrap();
    // 4 MiB for all the stores: the churn fills it within seconds. In
    // memory only (no history_dir): with a history on disk, written
    // before the drops, the disk still answered for root's first 10 s.
    let d = Daemon::start(&["--memory-budget-mib", "4"], &[]);
    // Root's service: naps of 100 ms in holdout_nap for 45 s.
    let nap = build_c_debian("holdout_nap");
    let service = Workload::spawn(Command::new(&nap).args(["450", "100"]));
    // Root's short processes: two naps of 50 ms each, one after another.
    let blip = dir.join("holdout_blip");
    std::fs::copy(&nap, &blip).unwrap();
    let _blips = Workload::spawn(
        Command::new("sh")
            .arg("-c")
            .arg(format!("while :; do {} 2 50; done", blip.display())),
    );
    wait(2000);
    let from = unix_now();
    wait(10_000);
    let _hostile = Workload::spawn(
        run_as(HOSTILE, Path::new("/bin/sh"))
            .arg("-c")
            .arg(format!(
                "end=$(($(date +%s) + 25)); while [ $(date +%s) -lt $end ]; do /usr/bin/python3 {} 0.5; done",
                churn.display()
            )),
    );
    wait(28_000);
    // The first 10 s of the service's naps, 20 s after the churn began.
    let r = d.get(&format!(
        "/folded?event=offcpu&pid={}&from={from}&to={}",
        service.pid(),
        from + 10
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    let p = parse_folded(&r.text());
    let napped = sum_where(&p, |f| has_seq(f, &["main", "holdout_nap"]));
    let m = d.get("/metrics").text();
    let dropped = metric(&m, "emberd_store_slots_dropped_for_budget_total");
    eprintln!(
        "root's service: {napped} us napping in its first 10 s of history; slots dropped for the budget: {dropped}, folded for an account: {}",
        metric(&m, "emberd_store_slots_folded_for_account_total")
    );
    assert!(
        napped >= 8_000_000,
        "root's service napped 10 s in its first 10 s: the store kept {napped} us of it \
         (another user's stack churn cut its history; {dropped} slots dropped for the budget):\n{}",
        top(&p, 6)
    );
    // Root's short processes in the same 10 s: their naps named, none folded.
    let r = d.get(&format!(
        "/folded?event=offcpu&comm=^holdout_blip$&from={from}&to={}",
        from + 10
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    let p = parse_folded(&r.text());
    let blipped = sum_where(&p, |f| has_seq(f, &["main", "holdout_nap"]));
    let blips_folded = sum_where(&p, |f| {
        f.contains(&"[stacks folded: their user filled the history]")
    });
    eprintln!(
        "root's short processes: {blipped} us napping named in their first 10 s of history, {blips_folded} us folded"
    );
    assert!(
        blips_folded == 0 && blipped >= 5_000_000,
        "root's short processes napped most of those 10 s and none of it is another user's to fold: \
         {blipped} us named (at least 5 s expected), {blips_folded} us folded:\n{}",
        top(&p, 6)
    );
    // The churner's own time is kept, folded.
    let r = d.get(&format!(
        "/folded?event=offcpu&comm=^python3$&from={}&to={}",
        from + 10,
        from + 20
    ));
    let p = parse_folded(&r.text());
    let folded = sum_where(&p, |f| {
        f.contains(&"[stacks folded: their user filled the history]")
    });
    assert!(
        folded > 0,
        "the churner's old stacks should be folded under their marker:\n{}",
        top(&p, 6)
    );
    eprintln!(
        "the churner's seconds 10-20: {folded} of {} us folded",
        p.total()
    );
}
