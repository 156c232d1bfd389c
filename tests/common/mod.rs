//! Helpers: build workloads, run `emberd record`, read what it wrote.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use emberd::profile::Profile;

/// Fails the test with a clear message unless it can load BPF programs.
pub fn require_root() {
    let euid = nix::unistd::geteuid();
    assert!(
        euid.is_root(),
        "this test loads BPF programs and profiles other processes: it needs root \
         (euid is {euid}); run ./scripts/test as root"
    );
}

/// The emberd binary under test.
pub fn emberd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_emberd"))
}

/// A scratch directory for this test binary.
pub fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Compiles `tests/workloads/<name>.c` with frame pointers and debug info.
pub fn build_c(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/workloads")
        .join(format!("{name}.c"));
    let out = scratch().join(name);
    let status = Command::new("clang")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running clang (installed by ./scripts/setup)");
    assert!(status.success(), "clang failed to build {}", src.display());
    out
}

/// Path of a workload file that is not C.
pub fn workload(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/workloads")
        .join(name)
}

/// A child process that is killed when the test ends, pass or fail.
pub struct Workload(pub Child);

impl Workload {
    /// Starts `cmd` with output discarded.
    pub fn spawn(cmd: &mut Command) -> Self {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting workload");
        Workload(child)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `emberd record` with `args` plus `-o <scratch>/<out>` and returns
/// the folded profile it wrote. Panics with emberd's stderr if it fails.
pub fn record_folded(out: &str, args: &[&str]) -> Profile {
    let path = scratch().join(out);
    let output = run_record(&path, args);
    assert!(
        output.status.success(),
        "emberd record failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read(&path).expect("reading emberd's output");
    emberd::render::folded::read(&text[..]).expect("emberd wrote valid folded stacks")
}

/// Runs `emberd record ARGS -o PATH` and returns its output.
pub fn run_record(path: &Path, args: &[&str]) -> Output {
    emberd()
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(path)
        .output()
        .expect("running emberd")
}

/// Sum of the values of stacks that satisfy `pred` (given the frames).
pub fn sum_where(profile: &Profile, pred: impl Fn(&[&str]) -> bool) -> u64 {
    profile
        .sorted()
        .into_iter()
        .filter(|(s, _)| pred(&s.frames().collect::<Vec<_>>()))
        .map(|(_, v)| v)
        .sum()
}

/// Whether `frames` holds `seq` as consecutive frames.
pub fn has_seq(frames: &[&str], seq: &[&str]) -> bool {
    frames.windows(seq.len()).any(|w| w == seq)
}

/// Prints a profile's heaviest stacks, for a failing assertion's context.
pub fn top(profile: &Profile, n: usize) -> String {
    let mut v = profile.sorted();
    v.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    v.into_iter()
        .take(n)
        .map(|(s, c)| format!("{c:6} {}\n", s.as_str()))
        .collect()
}

/// Sleeps, for workloads to warm up.
pub fn wait(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}
