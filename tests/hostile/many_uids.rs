//! One local user running processes under the many uids of their
//! subordinate range (`/etc/subuid`, as useradd gives new accounts and
//! rootless Podman uses): each uid holds one place, so shares counted per
//! uid neither stop them nor let anyone take a place back. They count as
//! the range's owner, and root is never refused: in the agent's shares
//! (the unwinder's places) and in the BPF programs' (the events' stack
//! map), where all users but root together leave root a quarter.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::shares::{sleeps_charged, victim_complete, victim_program};
use crate::common::*;

/// Another user (not nobody, not the range's) whose program must keep its
/// place.
const VICTIM: u32 = 65532;
/// Processes nobody starts at once, each under a uid of its own.
const FLOOD: u32 = 160;

/// The first uid and size of the range in /etc/subuid of `user` (uid
/// `uid`: the file may name the owner either way).
fn subuid_range(user: &str, uid: u32) -> (u32, u32) {
    let text = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let owner = f.next()?;
            (owner == user || owner == uid.to_string()).then_some(())?;
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .next()
        .unwrap_or_else(|| {
            panic!(
                "user {user} has no range in /etc/subuid (and /etc/subgid): scripts/setup-tests gives it one, as useradd does for a new account"
            )
        })
}

/// Kills the flood (every uid of the range it used) and the victim's
/// program, whatever the outcome.
struct Flood(u32);

impl Drop for Flood {
    fn drop(&mut self) {
        let uids: Vec<String> = (self.0..self.0 + REFILL)
            .chain([VICTIM])
            .map(|u| u.to_string())
            .collect();
        let _ = Command::new("pkill")
            .args(["-KILL", "-U", &uids.join(",")])
            .status();
    }
}

/// The distinct uids of `first..first + FLOOD` that running processes have.
fn flood_uids(first: u32) -> usize {
    let mut uids = std::collections::HashSet::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(md) = std::fs::metadata(e.path()) {
            use std::os::unix::fs::MetadataExt;
            if e.file_name().to_string_lossy().parse::<u32>().is_ok()
                && (first..first + FLOOD).contains(&md.uid())
            {
                uids.insert(md.uid());
            }
        }
    }
    uids.len()
}

/// Inside nobody's namespace (uid 0 there is nobody, uid i is the range's
/// first + i - 1): a sleeping process under each of uids 1..=FLOOD at once,
/// then one more every 50 ms under the next uid up to REFILL, so that a
/// place freed by any exit on the host is taken again at once, as a
/// determined user's loop would.
const FLOOD_SCRIPT: &str = r#"
import os, sys, time
flood, refill = int(sys.argv[1]), int(sys.argv[2])
def spawn(uid):
    if os.fork() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        os.execv("/bin/sleep", ["sleep", "60"])
for uid in range(1, flood + 1):
    spawn(uid)
for uid in range(flood + 1, refill + 1):
    time.sleep(0.05)
    spawn(uid)
while True:
    os.wait()
"#;
/// The last uid the refill reaches (22 s at 20 a second).
const REFILL: u32 = 600;

/// nobody, in a user namespace over their range (`unshare --map-auto`,
/// which calls the setuid newuidmap as rootless containers do), runs
/// sleeping processes under hundreds of uids (FLOOD_SCRIPT), more than the
/// unwinder's 128 places (`--unwind-processes 128`; 8192 by default).
/// Root's frameless program and another user's, started after, must
/// still get places and whole stacks: counted per uid, each flood uid held
/// one place, as few as the other user would after theirs, and root held
/// more (before: root's program 0 of 419 samples whole, every one
/// `[unwind error: tables not ready]`).
#[test]
fn a_users_many_uids_cannot_keep_others_off_the_unwinders_places() {
    require_root();
    let (first, count) = subuid_range("nobody", NOBODY);
    assert!(
        count >= REFILL,
        "nobody's range holds {count} uids, {REFILL} needed"
    );
    assert!(
        Path::new("/usr/bin/newuidmap").exists(),
        "newuidmap is missing: apt-get install uidmap (scripts/setup-tests does)"
    );
    let _flood = Flood(first);
    let victim = victim_program("emberd-many-uids");
    // The bounded form (Linux 5.10-5.16) unwinds a process only through
    // its place; the loop form also finds a mapping's table through
    // bpf_find_vma, and a process refused a place stays whole there.
    let d = Daemon::start(
        &["--unwind-processes", "128"],
        &[("EMBERD_PROGRAM_FORM", "bounded")],
    );
    let _hostile = Workload::spawn(
        run_as(NOBODY, Path::new("/usr/bin/unshare"))
            .args(["--user", "--map-auto", "--map-root-user", "--"])
            .args(["/usr/bin/python3", "-c", FLOOD_SCRIPT])
            .args([FLOOD.to_string(), REFILL.to_string()])
            .current_dir("/"),
    );
    let mut uids = 0;
    for _ in 0..50 {
        uids = flood_uids(first);
        if uids >= FLOOD as usize {
            break;
        }
        wait(200);
    }
    assert!(
        uids >= FLOOD as usize,
        "nobody's namespace ran {uids} of {FLOOD} processes under uids of its range"
    );
    wait(2000);
    let m = d.get("/metrics").text();
    let places = metric(&m, "emberd_unwind_tables{map=\"processes\"}");
    assert!(
        places >= 128.0,
        "{FLOOD} processes under {FLOOD} uids should fill the 128 places ({places} held)"
    );
    let root = Workload::spawn(Command::new(&victim).arg("14"));
    let other = Workload::spawn(run_as(VICTIM, &victim).arg("14"));
    wait(8000);
    let m = d.get("/metrics").text();
    let evicted = metric(
        &m,
        "emberd_unwind_table_events_total{reason=\"process_evicted_for_share\"}",
    );
    for (who, w) in [("root's", &root), ("another user's", &other)] {
        let (share, n, ctx) = victim_complete(&d, w.pid(), "deep_chain");
        assert!(
            n >= 100 && share >= 0.99,
            "{:.1}% of {who} program's {n} samples are whole beside the flood of {FLOOD} uids ({evicted} places taken back), expected >= 99% of at least 100:\n{ctx}",
            share * 100.0
        );
    }
}

/// Inside nobody's namespace: the program argv[1] run under each of uids
/// 1..=argv[2] (the range's first uids), with the arguments after.
const UIDS_SCRIPT: &str = r#"
import os, sys
prog, n, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for uid in range(1, n + 1):
    if os.fork() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        os.execv(prog, [prog] + args)
while True:
    os.wait()
"#;

/// A daemon whose events' stack map holds 1,024 stacks, beside nobody's
/// stack maker (`many_stacks`: 16 threads blocking again and again at
/// 4,096 distinct stacks) under 4 uids of its range, in its namespace.
struct StackFlood {
    d: Daemon,
    maker: PathBuf,
    sleepy: PathBuf,
    _makers: Workload,
    _flood: Flood,
}

/// [`StackFlood`], once the maker runs under all 4 uids.
fn stack_flood() -> StackFlood {
    require_root();
    let (first, _) = subuid_range("nobody", NOBODY);
    let flood = Flood(first);
    let maker = build_c("many_stacks");
    let sleepy = build_c_debian("sleepy");
    let d = Daemon::start(&["--stack-map-entries", "1024"], &[]);
    assert!(
        Path::new("/usr/bin/newuidmap").exists(),
        "newuidmap is missing: apt-get install uidmap (scripts/setup-tests does)"
    );
    let w = Workload::spawn(
        run_as(NOBODY, Path::new("/usr/bin/unshare"))
            .args(["--user", "--map-auto", "--map-root-user", "--"])
            .args(["/usr/bin/python3", "-c", UIDS_SCRIPT])
            .arg(&maker)
            .args(["4", "16", "40"])
            .current_dir("/"),
    );
    let mut uids = 0;
    for _ in 0..50 {
        uids = flood_uids(first);
        if uids >= 4 {
            break;
        }
        wait(200);
    }
    assert!(
        uids >= 4,
        "nobody's namespace ran the stack maker under {uids} of 4 uids of its range"
    );
    StackFlood {
        d,
        maker,
        sleepy,
        _makers: w,
        _flood: flood,
    }
}

/// The BPF programs' shares count accounts too. nobody runs the stack
/// maker under 4 uids of its range, and another user sleeps 5 x 200 ms
/// beside it. The events' stack map holds 1,024 stacks here
/// (`--stack-map-entries`), each user at most half: counted per uid, the
/// 4 uids held half each, the whole map between them. Counted as nobody's
/// account they hold half, and the other user's sleeps must be charged
/// whole, their stacks stored.
#[test]
fn a_users_many_uids_cannot_fill_the_event_stack_map() {
    let f = stack_flood();
    // Their stacks fill their share meanwhile (3,200 blocks a second).
    wait(3000);
    let w = Workload::spawn(run_as(VICTIM, &f.sleepy).arg("4"));
    let (us, p, refused, full) = sleeps_charged(&f.d, w.pid());
    assert!(
        us >= 900_000,
        "the other user's 5 x 200 ms sleeps should be charged under sleepy, whole, beside 4 uids of nobody's range: {us} us (refused for a share {refused}, map full {full}):\n{}",
        top(&p, 6)
    );
    assert!(
        refused >= 100.0,
        "nobody's stacks past half the map, under any uid of its range, should be refused (user_share = {refused}, map full = {full})"
    );
}

/// A quarter of each BPF table stays root's: nobody (4 uids of its range,
/// one account) and another user each make stacks past their half of the
/// events' stack map (1,024 stacks), and root's sleeps, started after,
/// must be charged whole. Two halves filled the map before, and root's new
/// stacks were lost; now the two hold three quarters between them.
#[test]
fn two_users_cannot_fill_the_stack_map_for_root() {
    let f = stack_flood();
    let _other = Workload::spawn(run_as(VICTIM, &f.maker).args(["16", "40"]));
    wait(3000);
    let w = Workload::spawn(Command::new(&f.sleepy).arg("4"));
    let (us, p, refused, full) = sleeps_charged(&f.d, w.pid());
    assert!(
        us >= 900_000,
        "root's 5 x 200 ms sleeps should be charged under sleepy, whole, beside two users making stacks past their share: {us} us (refused for a share {refused}, map full {full}):\n{}",
        top(&p, 6)
    );
    assert!(
        refused >= 100.0,
        "the two users' stacks past three quarters of the map should be refused (user_share = {refused}, map full = {full})"
    );
}
