//! Helpers: build workloads, run `emberd record`, read what it wrote.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use emberd::profile::Profile;

pub mod browser;

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

/// `scratch()/name`, emptied of an earlier run's files and created.
pub fn fresh_scratch(name: impl AsRef<Path>) -> PathBuf {
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles `tests/workloads/<name>.c` with frame pointers and debug info.
pub fn build_c(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/workloads")
        .join(format!("{name}.c"));
    let out = scratch().join(name);
    build_once(&src, &out, |tmp| {
        let status = Command::new("clang")
            .args(["-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
            .arg(tmp)
            .arg(&src)
            .status()
            .expect("running clang (installed by ./scripts/setup)");
        assert!(status.success(), "clang failed to build {}", src.display());
    })
}

/// `out` as a new file (a copy) of the one build of `src` this test binary
/// makes: the first call builds into a cache beside `scratch()`, later
/// ones, in this process or another of the same run, copy it, which costs
/// milliseconds where a compile cost up to a second (cpu_70_30 alone was
/// built 25 times a run). The cache is fresh while it is newer than both
/// `src` and the test binary, whose rebuild is how build flags change.
/// Each call still gets its own inode, as a build did, since tests run,
/// touch and replace what they are given.
fn build_once(src: &Path, out: &Path, build: impl FnOnce(&Path)) -> PathBuf {
    let rel = out.strip_prefix(scratch()).unwrap_or(out);
    let cache = scratch()
        .join(".built")
        .join(rel.to_string_lossy().replace('/', "%"));
    if !newer_than_sources(&cache, src) {
        std::fs::create_dir_all(cache.parent().unwrap()).expect("creating the build cache");
        let tmp = building(&cache);
        build(&tmp);
        built(&tmp, &cache);
    }
    let tmp = building(out);
    std::fs::copy(&cache, &tmp)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", cache.display(), tmp.display()));
    built(&tmp, out)
}

/// Whether `built` exists and is newer than `src` and this test binary.
pub fn newer_than_sources(built: &Path, src: &Path) -> bool {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let exe = std::env::current_exe().ok();
    match (mtime(built), mtime(src), exe.as_deref().and_then(mtime)) {
        (Some(b), Some(s), Some(e)) => b >= s && b >= e,
        _ => false,
    }
}

/// A unique path to build `out` at: tests running at once build the same
/// workload, and one must never start a file another is still writing
/// (`ETXTBSY`, or a half-written binary).
fn building(out: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = out.file_name().expect("a file name").to_string_lossy();
    out.with_file_name(format!(".{name}.{}.{n}", std::process::id()))
}

/// Moves the finished build `tmp` to `out` in one step (a process already
/// running the old file keeps it).
fn built(tmp: &Path, out: &Path) -> PathBuf {
    std::fs::rename(tmp, out)
        .unwrap_or_else(|e| panic!("moving {} to {}: {e}", tmp.display(), out.display()));
    out.to_path_buf()
}

/// The C flags Debian builds its packages with (`dpkg-buildflags --get
/// CFLAGS`), with `-fomit-frame-pointer` spelled out: like the programs on a
/// Debian host, these have no frame pointers, so their stacks come from the
/// BPF `.eh_frame` unwinder.
pub const DEBIAN_CFLAGS: &[&str] = &[
    "-g",
    "-O2",
    "-fstack-protector-strong",
    "-fomit-frame-pointer",
];

/// Compiles `tests/workloads/<name>.c` with gcc and `flags` (plus `-pthread`)
/// to `<scratch>/<dir>/<name>`: the directory keeps the process name (comm)
/// the workload's name whatever the build.
pub fn build_c_with(name: &str, dir: &str, flags: &[&str]) -> PathBuf {
    let src = workload(&format!("{name}.c"));
    let out_dir = scratch().join(dir);
    std::fs::create_dir_all(&out_dir).expect("creating the build directory");
    let out = out_dir.join(name);
    build_once(&src, &out, |tmp| {
        let status = Command::new("gcc")
            .args(flags)
            .args(["-pthread", "-o"])
            .arg(tmp)
            .arg(&src)
            .status()
            .expect("running gcc");
        assert!(status.success(), "gcc failed to build {}", src.display());
    })
}

/// Compiles `tests/workloads/<name>.c` as Debian would ([`DEBIAN_CFLAGS`]),
/// without frame pointers.
pub fn build_c_debian(name: &str) -> PathBuf {
    build_c_with(name, "debian", DEBIAN_CFLAGS)
}

/// Whether `frame` is a marker emberd puts where a stack's root should be:
/// `[truncated]`, `[no unwind info: FILE]`, `[unwind error: REASON]` (or
/// `[lost]`), possibly with an event suffix such as `_[w]`.
pub fn is_marker(frame: &str) -> bool {
    [
        "[truncated]",
        "[no unwind info:",
        "[unwind error:",
        "[lost]",
    ]
    .iter()
    .any(|m| frame.starts_with(m))
}

/// Whether a folded stack (or one side of an off-wake stack) reaches its
/// root: the main thread's `__libc_start_call_main` or a thread's
/// `start_thread`/`clone3`, with no marker frame.
pub fn reaches_root(frames: &[&str]) -> bool {
    !frames.iter().any(|f| is_marker(f))
        && frames.iter().any(|f| {
            let name = f.trim_end_matches("_[o]").trim_end_matches("_[w]");
            matches!(name, "__libc_start_call_main" | "start_thread" | "clone3")
        })
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

    /// Starts `cmd` and waits until it prints `line` on its output (the
    /// rest discarded), so a test can act on a state the workload has
    /// reached rather than guess how long it takes on a busy host.
    pub fn spawn_ready(cmd: &mut Command, line: &str) -> Self {
        use std::io::BufRead;
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting workload");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut said = String::new();
        loop {
            let mut l = String::new();
            if out.read_line(&mut l).unwrap_or(0) == 0 {
                let status = child.wait();
                panic!(
                    "the workload ended ({status:?}) before printing {line:?}; it printed {said:?}"
                );
            }
            if l.trim() == line {
                break;
            }
            said.push_str(&l);
        }
        // Drained so the workload never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Workload(child)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it still runs (has not exited).
    pub fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
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
    record_folded_env(out, args, &[])
}

/// As [`record_folded`], with `env` set for emberd.
pub fn record_folded_env(out: &str, args: &[&str], env: &[(&str, &str)]) -> Profile {
    let path = scratch().join(out);
    let output = emberd()
        .envs(env.iter().copied())
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(&path)
        .output()
        .expect("running emberd");
    assert!(
        output.status.success(),
        "emberd record failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    read_folded(&path)
}

/// Runs `emberd record ARGS -o scratch()/OUT` on a running workload and
/// returns the folded profile and what `cpu` (the workload's CPU seconds)
/// grew by from record's `recording: attached` to its `recording: stopped`:
/// the CPU time its samples are owed, however long loading the programs
/// took on a busy host (2.75 s has been seen beside a busy CPU).
pub fn record_folded_ran(out: &str, args: &[&str], cpu: impl Fn() -> f64) -> (Profile, f64) {
    let path = scratch().join(out);
    let (mut from, mut to) = (None, None);
    let said = record_logged(emberd(), &path, args, |line| {
        if line.contains("recording: attached") {
            from = Some(cpu());
        } else if line.contains("recording: stopped") {
            to = Some(cpu());
        }
    });
    let (Some(from), Some(to)) = (from, to) else {
        panic!("emberd record did not say when it was attached and stopped: {said}");
    };
    (read_folded(&path), to - from)
}

/// Runs `emberd record ARGS -o PATH` with its info log, handing each line
/// of the log to `on_line` as it comes (record says when it is attached
/// and when it stopped sampling); asserts that it succeeded and returns
/// the log. `recorder` runs emberd (with its test hooks set, or under a
/// wrapper that execs it); the record arguments are appended to it.
fn record_logged(
    mut recorder: Command,
    path: &Path,
    args: &[&str],
    mut on_line: impl FnMut(&str),
) -> String {
    use std::io::BufRead;
    let mut rec = recorder
        .env("EMBERD_LOG", "info")
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running emberd record");
    let mut said = String::new();
    for line in std::io::BufReader::new(rec.stderr.take().unwrap()).lines() {
        let line = line.unwrap_or_default();
        on_line(&line);
        said.push_str(&line);
        said.push('\n');
    }
    let status = rec.wait().expect("waiting for emberd record");
    assert!(status.success(), "emberd record failed ({status}): {said}");
    said
}

/// The folded stacks `emberd record` wrote to `path`.
fn read_folded(path: &Path) -> Profile {
    let text = std::fs::read(path).expect("reading emberd's output");
    emberd::render::folded::read(&text[..]).expect("emberd wrote valid folded stacks")
}

/// Starts `workload` (a C workload that waits in `wait_delay_arg`, see
/// tests/workloads/delay.h), records it with `emberd record ARGS -p PID -o
/// scratch()/out`, and lets it begin its work only once the recorder says
/// it is attached: whatever loading the programs takes on a busy host,
/// the workload's work is recorded whole. Returns the folded profile and
/// the workload's pid.
pub fn record_attached(out: &str, workload: &mut Command, args: &[&str]) -> (Profile, u32) {
    let (p, pid, _) = record_attached_env(out, workload, args, &[]);
    (p, pid)
}

/// [`record_attached`] with `envs` set for emberd (its test hooks); also
/// returns record's log, which ends with its summary (what was dropped or
/// sampled out, and why).
pub fn record_attached_env(
    out: &str,
    workload: &mut Command,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Profile, u32, String) {
    let mut recorder = emberd();
    recorder.envs(envs.iter().copied());
    record_attached_by(recorder, out, workload, args)
}

/// [`record_attached_env`] with emberd run by `recorder` (a wrapper that
/// execs it, such as `unshare`), to which `record ARGS -p PID -o PATH` is
/// appended.
pub fn record_attached_by(
    recorder: Command,
    out: &str,
    workload: &mut Command,
    args: &[&str],
) -> (Profile, u32, String) {
    let path = scratch().join(out);
    let (pid, said) = record_attached_logged(recorder, &path, workload, args);
    (read_folded(&path), pid, said)
}

/// [`record_attached`] writing `path` in any of record's formats (pprof,
/// SVG): returns the workload's pid once record has succeeded.
pub fn record_attached_to(path: &Path, workload: &mut Command, args: &[&str]) -> u32 {
    record_attached_logged(emberd(), path, workload, args).0
}

/// [`record_attached_to`] with emberd run by `recorder`: the pid and
/// record's log.
fn record_attached_logged(
    recorder: Command,
    path: &Path,
    workload: &mut Command,
    args: &[&str],
) -> (u32, String) {
    // A name of this process's own, as a build's temporary file has.
    let go = building(&scratch().join("go"));
    let w = Workload::spawn(workload.env("EMBERD_TEST_GO", &go));
    let pid = w.pid();
    let pid_s = pid.to_string();
    let all: Vec<&str> = args.iter().copied().chain(["-p", &pid_s]).collect();
    let said = record_logged(recorder, path, &all, |line| {
        if line.contains("recording: attached") {
            std::fs::write(&go, b"").expect("creating the workload's go file");
        }
    });
    let _ = std::fs::remove_file(&go);
    drop(w);
    assert!(
        said.contains("recording: attached"),
        "emberd record never said it was attached: {said}"
    );
    (pid, said)
}

/// Starts Debian's `python3 -c SCRIPT ARGS...` as user nobody (no
/// groups), its output piped: a local user's own process (PATH's python3
/// may be pyenv's, under root's home).
/// Once it has printed `ready` (its first line), which it must: the child
/// and the rest of its output.
pub fn python_as_nobody(
    script: &str,
    args: &[&str],
    ready: &str,
) -> (Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead;
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", script])
        .args(args)
        .env("HOME", "/")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("running setpriv (util-linux) and python3 as nobody");
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        ready,
        "python3 as nobody did not start (its first line, {ready:?} expected)"
    );
    (child, out)
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
    top_where(profile, n, |_| true)
}

/// The `n` heaviest stacks of `profile` for which `pred` holds, a line
/// each: a failure message's list of what a test did not accept.
pub fn top_where(profile: &Profile, n: usize, pred: impl Fn(&[&str]) -> bool) -> String {
    let mut v = profile.sorted();
    v.retain(|(s, _)| pred(&s.frames().collect::<Vec<_>>()));
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

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding an ephemeral loopback port")
}

/// A response: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// GET over HTTP/1.0 (the server closes the connection after the response).
pub fn http_get(port: u16, path: &str) -> HttpResponse {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connecting to emberd");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reading the response");
    parse_response(&raw)
}

/// Parses a whole HTTP/1.x response without chunked encoding.
pub fn parse_response(raw: &[u8]) -> HttpResponse {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    }
}

/// A running `emberd` daemon on a free loopback port, stopped on drop.
pub struct Daemon {
    /// The process.
    pub child: Child,
    /// Its HTTP port.
    pub port: u16,
}

impl Daemon {
    /// Starts the daemon with extra `args` and `env`, and waits until
    /// `/readyz` says ready.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let port = free_port();
        let child = emberd()
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting emberd");
        let mut d = Daemon { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = d.child.try_wait() {
                let mut err = String::new();
                use std::io::Read;
                d.child.stderr.take().unwrap().read_to_string(&mut err).ok();
                panic!("emberd exited ({status}) before it was ready: {err}");
            }
            // 401: a daemon started with a token answers only with it.
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && matches!(http_get(port, "/readyz").status, 200 | 401)
            {
                return d;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "emberd was not ready within 20 s"
            );
            wait(100);
        }
    }

    /// GET a path.
    pub fn get(&self, path: &str) -> HttpResponse {
        http_get(self.port, path)
    }

    /// A field of the daemon's /proc/PID/status in KiB (`VmRSS`, `VmHWM`).
    pub fn status_kib(&self, field: &str) -> u64 {
        status_kib(self.child.id(), field)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("sending SIGTERM");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"))
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// The CPU time (user and system) process `pid` has used so far, in
/// seconds: what a sampler at a known rate should have seen of it.
pub fn cpu_seconds(pid: u32) -> f64 {
    try_cpu_seconds(pid).unwrap_or_else(|| panic!("no CPU time in /proc/{pid}/stat"))
}

/// The CPU time thread `tid` of process `pid` has used so far, in seconds
/// (the main thread's tid is the pid).
pub fn thread_cpu_seconds(pid: u32, tid: u32) -> f64 {
    cpu_seconds_in(&format!("/proc/{pid}/task/{tid}/stat"))
        .unwrap_or_else(|| panic!("no CPU time in /proc/{pid}/task/{tid}/stat"))
}

/// [`cpu_seconds`], or `None` once the process is gone.
fn try_cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds_in(&format!("/proc/{pid}/stat"))
}

/// utime + stime of a `stat` file of /proc, in seconds.
fn cpu_seconds_in(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces and parentheses: fields count from
    // the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    Some(ticks as f64 / hz as f64)
}

/// Asserts that `n` samples of a function taking about `share` of a busy
/// thread's time cover at least half of what a 99 Hz sampler owes the `ran`
/// CPU seconds the thread ran, and are not none: a count that holds
/// however much CPU a busy host leaves the thread (light tests run beside a
/// build and a kernel VM), and still fails on a window that lost half its
/// samples. `what` names the count (and may carry the profile).
pub fn assert_covers_cpu(n: u64, ran: f64, share: f64, what: &str) {
    let due = ran * 99.0 * share;
    eprintln!(
        "{n} samples for {ran:.2} s of CPU ({due:.0} due at 99 Hz): {}",
        what.lines().next().unwrap_or("")
    );
    assert!(
        n > 0 && n as f64 >= due / 2.0,
        "{n} samples for {ran:.2} s of CPU ({due:.0} due at 99 Hz; at least half \
         expected): {what}"
    );
}

/// A process's CPU time read every 100 ms by a thread of its own, so that
/// what it ran in a window of wall-clock seconds (a daemon's `from=` and
/// `to=`) can be compared with the samples of that window: a check of the
/// sampling rate that holds however much CPU its neighbours leave it.
pub struct CpuMeter {
    /// (unix time, CPU seconds), in order.
    readings: std::sync::Arc<std::sync::Mutex<Vec<(f64, f64)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CpuMeter {
    /// Starts reading `pid`'s CPU time; the readings stop when it exits.
    pub fn start(pid: u32) -> Self {
        use std::sync::atomic::Ordering;
        let readings = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r, s) = (readings.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Some(cpu) = try_cpu_seconds(pid) else {
                    break;
                };
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64();
                r.lock().unwrap().push((now, cpu));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        CpuMeter {
            readings,
            stop,
            thread: Some(thread),
        }
    }

    /// CPU seconds the process ran between unix times `from` and `to`
    /// (each read from the reading nearest it, within 100 ms). Panics if
    /// the readings do not cover both.
    pub fn between(&self, from: f64, to: f64) -> f64 {
        let r = self.readings.lock().unwrap();
        let at = |t: f64| {
            let (when, cpu) = r
                .iter()
                .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
                .copied()
                .expect("no CPU reading yet");
            assert!(
                (when - t).abs() <= 0.2,
                "no CPU reading within 0.2 s of {t:.1} (nearest {when:.1})"
            );
            cpu
        };
        at(to) - at(from)
    }
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads folded text.
pub fn parse_folded(text: &str) -> Profile {
    emberd::render::folded::read(text.as_bytes()).expect("valid folded stacks")
}

/// Records `seconds` of process `pid` as pprof (`scratch()/name`) and
/// returns `go tool pprof -top -lines` of it: each leaf line with its file
/// and line.
pub fn pprof_top_lines(name: &str, seconds: &str, pid: &str) -> String {
    let pb = scratch().join(name);
    let out = run_record(&pb, &["-s", seconds, "-p", pid]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    go_pprof(&["-top", "-lines", pb.to_str().expect("utf-8 path")])
}

/// Runs `go tool pprof ARGS` and returns its output; panics with its error.
pub fn go_pprof(args: &[&str]) -> String {
    let tmp = scratch().join("pprof-home");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = Command::new("go")
        .arg("tool")
        .arg("pprof")
        .args(args)
        .env("HOME", &tmp)
        .env("PPROF_TMPDIR", &tmp)
        .output()
        .expect("running go tool pprof (golang-go, installed by ./scripts/setup)");
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of one metric line (`name{labels}`) in a `/metrics` text, 0 if absent.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A TCP server run as user `nobody` on a loopback port, as any local user
/// may run one while the port's real server is down: it writes down every
/// byte it receives, and answers each request head with a small HTML page
/// (so a browser's navigation to it completes).
pub struct Eavesdropper {
    child: Child,
    /// All it has received so far, filled by `reader`.
    heard: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Its port.
    pub port: u16,
}

const EAVESDROPPER: &str = r#"
import socket, sys, threading
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
lock = threading.Lock()
def say(text):
    with lock:
        sys.stdout.write(text)
        sys.stdout.flush()
print("ready", flush=True)
def serve(c):
    c.settimeout(10)
    got = b""
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            say(b.decode("latin-1"))
            got += b
            if b"\r\n\r\n" in got:
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<p>another user's server</p>")
                break
    except Exception:
        pass
    c.close()
while True:
    c, _ = s.accept()
    say("\n[connection]\n")
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

impl Eavesdropper {
    /// Starts it as `nobody` on `port` (0: a free one).
    pub fn start(port: u16) -> Eavesdropper {
        let port = if port == 0 { free_port() } else { port };
        let (child, mut out) = python_as_nobody(EAVESDROPPER, &[&port.to_string()], "ready");
        let heard = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let into = heard.clone();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 65536];
            while let Ok(n @ 1..) = out.read(&mut buf) {
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Eavesdropper {
            child,
            heard,
            reader: Some(reader),
            port,
        }
    }

    /// Stops it and returns all it received, each connection after a
    /// `[connection]` line.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.heard.lock().unwrap().clone()
    }

    /// As [`Eavesdropper::stop`], once it has heard every one of `needles`
    /// or `timeout` has passed: a browser's requests arrive when they
    /// arrive, later on a busy host.
    pub fn stop_once_heard(self, needles: &[&str], timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            let text = self.heard.lock().unwrap().clone();
            if needles.iter().all(|n| text.contains(n)) {
                // The rest of those requests' headers, and any request
                // that follows them (a favicon), are heard too.
                std::thread::sleep(Duration::from_secs(1));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop()
    }
}

impl Drop for Eavesdropper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `program` run as `uid` with its own group and no others (`setpriv`), as
/// a local user would run it; add its arguments to the command.
pub fn run_as(uid: u32, program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "--"])
        .arg(program);
    c
}

/// uid of user `nobody`.
pub const NOBODY: u32 = 65534;

/// A `cargo build --release --offline` of a copy of this repository into a
/// fresh target directory, as a build host runs one: about a hundred rustc
/// processes (each mapping rustc's 150 MB `librustc_driver` and its
/// `libLLVM`), build scripts, proc-macro libraries, cc1 and clang. Killed
/// (the whole process group) and its directory removed when dropped.
pub struct Compile {
    child: Child,
    dir: PathBuf,
}

impl Compile {
    /// Starts the compile, its sources and target under `scratch()/name`.
    pub fn start(name: &str) -> Compile {
        use std::os::unix::process::CommandExt;
        let dir = fresh_scratch(name);
        let src = dir.join("src");
        let status = Command::new("git")
            .args(["clone", "-q", "--depth", "1"])
            .arg(format!("file://{}", env!("CARGO_MANIFEST_DIR")))
            .arg(&src)
            .status()
            .expect("running git clone");
        assert!(status.success(), "cloning this repository for the compile");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let child = Command::new(cargo)
            .args(["build", "--release", "--offline", "--locked"])
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            // As a build host's: not through scripts/test's clippy wrapper.
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("starting cargo build");
        Compile { child, dir }
    }

    /// Panics if the compile has ended (it must run the whole test).
    pub fn still_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            self.child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .ok();
            panic!(
                "the compile ended ({status}) before the measurement did: it must run throughout \
                 (the crates must be in cargo's cache: `cargo fetch`):\n{err}"
            );
        }
    }
}

impl Drop for Compile {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The wall clock, unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The wall clock as a window bound to the millisecond (`from=`, `to=`:
/// unix seconds with three decimals).
pub fn unix_now_ms_param() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{}.{:03}", t.as_secs(), t.subsec_millis())
}

/// Multi-column folded text: stack -> values.
pub fn columns(text: &str) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut parts: Vec<&str> = line.split(' ').collect();
        let mut values = Vec::new();
        while let Some(v) = parts.last().and_then(|p| p.parse::<u64>().ok()) {
            values.insert(0, v);
            parts.pop();
        }
        out.insert(parts.join(" "), values);
    }
    out
}

/// Column sums of the stacks whose frames contain `frame`.
pub fn sums(cols: &std::collections::BTreeMap<String, Vec<u64>>, frame: &str) -> Vec<u64> {
    let k = cols.values().next().map_or(0, Vec::len);
    let mut s = vec![0u64; k];
    for (stack, v) in cols {
        if frame.is_empty() || stack.split(';').any(|f| f == frame) {
            for (a, b) in s.iter_mut().zip(v) {
                *a += b;
            }
        }
    }
    s
}
