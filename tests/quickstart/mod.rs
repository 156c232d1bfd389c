//! The README's quick start, run as printed in a fresh clone: the lines are
//! read out of the README, not restated here, so the README cannot drift
//! from what works.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// The daemon's default address, which the README's recipes use.
const PORT: u16 = 7099;

/// The commands of the README's `## Quick start` section, per ```sh block,
/// as printed (comments and all: bash reads them as a terminal would).
fn quick_start_blocks(readme: &str) -> Vec<Vec<String>> {
    let start = readme
        .find("\n## Quick start\n")
        .expect("README.md has a `## Quick start` section");
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in section[..end].lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(b), l) if !l.trim().is_empty() => b.push(l.to_owned()),
            _ => {}
        }
    }
    blocks
}

/// A shell as a user's terminal has it: without the variables cargo sets
/// for tests (a `CARGO_TARGET_DIR` would build into this test's own tree),
/// nor the clippy wrapper scripts/test builds with.
fn terminal(line: &str, dir: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c").arg(line).current_dir(dir);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if (k.starts_with("CARGO") && k != "CARGO_HOME")
            || k.starts_with("__CARGO")
            || k.starts_with("RUST_TEST")
            || k == "OUT_DIR"
            || k == "RUSTC_WORKSPACE_WRAPPER"
            || k == "CLIPPY_ARGS"
        {
            c.env_remove(&k);
        }
    }
    c
}

/// Puts `/usr/local/bin/emberd` back as it was before the quick start
/// linked it to the clone (which is deleted with the test's scratch).
struct RestoreLink {
    path: PathBuf,
    before: Option<PathBuf>,
    existed: bool,
}

impl RestoreLink {
    fn save(path: &str) -> Self {
        let path = PathBuf::from(path);
        let before = std::fs::read_link(&path).ok();
        let existed = path.symlink_metadata().is_ok();
        RestoreLink {
            path,
            before,
            existed,
        }
    }
}

impl Drop for RestoreLink {
    fn drop(&mut self) {
        match (&self.before, self.existed) {
            (Some(target), _) => {
                let _ = std::fs::remove_file(&self.path);
                let _ = std::os::unix::fs::symlink(target, &self.path);
            }
            // A file that was there (an installed emberd) was never replaced.
            (None, true) => {}
            (None, false) => {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Stops the daemon `./scripts/run` became (it `exec`s emberd) as Ctrl-C
/// would, whatever the test's outcome.
struct Foreground(Child);

impl Drop for Foreground {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            wait(100);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Copies the build this test runs from into `clone`'s `target/`: the
/// clone's `cargo build` then compiles only emberd, not its 200 crates
/// again (the cold build is timed in the README, not here).
fn warm(clone: &Path) {
    let ours = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp is under the target directory")
        .join("release");
    let theirs = clone.join("target/release");
    std::fs::create_dir_all(&theirs).unwrap();
    for dir in ["deps", "build", ".fingerprint"] {
        let status = Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(ours.join(dir))
            .arg(&theirs)
            .status()
            .expect("running cp");
        assert!(
            status.success(),
            "copying target/release/{dir} to the clone"
        );
    }
}

/// Each recipe's output file (`-o FILE`), which must hold a flame graph.
fn output_of(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-o" {
            return words.next();
        }
    }
    None
}

/// The README's quick start in a fresh clone, as printed: `./scripts/run`
/// builds and starts the daemon on 127.0.0.1:7099 and puts `emberd` on
/// PATH; then each recipe runs in a second shell and must succeed and
/// write a flame graph with frames in it. The test command itself is the
/// run this test is part of, so it is checked to be there, not run.
#[test]
fn readme_quick_start_runs_as_printed() {
    require_root();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let blocks = quick_start_blocks(&readme);
    assert_eq!(
        blocks.len(),
        2,
        "the quick start has two ```sh blocks (set-up commands, recipes): {blocks:?}"
    );
    let (setup, recipes) = (&blocks[0], &blocks[1]);
    let run = setup
        .iter()
        .find(|l| l.starts_with("./scripts/run"))
        .unwrap_or_else(|| panic!("no ./scripts/run line in {setup:?}"));
    assert!(
        setup.iter().any(|l| l.starts_with("./scripts/test")),
        "no ./scripts/test line in {setup:?}"
    );
    assert_eq!(recipes.len(), 3, "three recipes: {recipes:?}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", PORT)).is_err(),
        "something already listens on 127.0.0.1:{PORT} (an installed emberd?): \
         the quick start's daemon needs that port; stop it and run again"
    );

    // A fresh clone of what is committed.
    let clone = scratch().join("quickstart");
    let _ = std::fs::remove_dir_all(&clone);
    let status = Command::new("git")
        .args(["clone", "-q"])
        .arg(repo)
        .arg(&clone)
        .status()
        .expect("running git (installed by ./scripts/setup-tests)");
    assert!(status.success(), "git clone of {}", repo.display());
    warm(&clone);

    let _link = RestoreLink::save("/usr/local/bin/emberd");
    let log = clone.join("run.log");
    let daemon = terminal(run, &clone)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(clone.join("run.err")).unwrap())
        .spawn()
        .expect("starting bash");
    let mut daemon = Foreground(daemon);
    let tail = |clone: &Path| {
        let err = std::fs::read_to_string(clone.join("run.err")).unwrap_or_default();
        let lines: Vec<&str> = err.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    let t0 = Instant::now();
    loop {
        if let Ok(Some(status)) = daemon.0.try_wait() {
            panic!(
                "`{run}` exited ({status}) before the daemon was ready:\n{}",
                tail(&clone)
            );
        }
        if std::net::TcpStream::connect(("127.0.0.1", PORT)).is_ok()
            && http_get(PORT, "/readyz").status == 200
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "`{run}` did not serve /readyz within 15 minutes:\n{}",
            tail(&clone)
        );
        wait(500);
    }
    let ready = t0.elapsed();
    // A few seconds of history for the recipes' windows to hold.
    wait(5_000);

    let work = clone.join("recipes");
    std::fs::create_dir_all(&work).unwrap();
    for line in recipes {
        let out = terminal(line, &work)
            .stdin(Stdio::null())
            .output()
            .expect("running bash");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "`{line}` failed ({}):\n{err}",
            out.status
        );
        let file = output_of(line).unwrap_or_else(|| panic!("`{line}` names no -o FILE"));
        let svg = std::fs::read_to_string(work.join(file))
            .unwrap_or_else(|e| panic!("`{line}` wrote no {file}: {e}\n{err}"));
        let frames = svg.matches("<g><title>").count();
        assert!(
            svg.trim_end().ends_with("</svg>") && frames > 1,
            "`{line}` wrote {file} with {frames} frame(s), expected a flame graph:\n{}",
            &svg[..svg.len().min(2_000)]
        );
        eprintln!("quick start: `{line}`: {file}, {frames} frames");
    }
    eprintln!("quick start: the daemon was ready {ready:?} after `{run}`");
}

#[test]
fn quick_start_blocks_are_read_from_the_section() {
    let md = "# x\n\n## Quick start\n\ntext\n\n```sh\na # c\n\nb\n```\n\n```\nout\n```\n\n```sh\nc\n```\n\n## Next\n\n```sh\nd\n```\n";
    assert_eq!(
        quick_start_blocks(md),
        vec![
            vec!["a # c".to_owned(), "b".to_owned()],
            vec!["c".to_owned()]
        ]
    );
}
