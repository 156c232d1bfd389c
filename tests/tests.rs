//! Integration tests: the real BPF sampler profiling real processes.
//!
//! They need root (or CAP_BPF + CAP_PERFMON + CAP_SYSLOG + CAP_SYS_PTRACE) and
//! fail, never skip, without it. `./scripts/test` runs them one at a time so
//! each profile sees as little of the others' CPU use as possible.

mod common;

/// Who may read profiles: the token file as scripts/install sets it up, the
/// web page's login in a real browser, one-time codes.
mod access;

/// The command line: errors a user would hit, `check`, SVG output.
mod cli;
/// Change over time: differential flame graphs and animations, from the
/// history and from files, in a real browser.
mod compare;
/// CPU profiles of native code: proportions, kernel frames, short-lived processes.
mod cpu;
/// The daemon: HTTP API, real clients (go tool pprof, Prometheus), signals.
mod daemon;
/// Off-CPU, wakeup, off-wake, page-fault and hot/cold profiles.
mod events;
/// The programs' bounded form (Linux 5.10+), forced on this kernel.
mod forms;
/// The HTTP side under attack: posted bodies that claim huge trees, pages of
/// other sites, requests that time out mid-render.
mod guard;
/// History on disk: restarts, kills, bad files, permissions, offline
/// reading, a week replayed.
mod history;
/// Hostile input: files other users control, faults, time.
mod hostile;
/// Java frames of HotSpot JVMs unwound in BPF, against JDK Flight Recorder.
mod java;
/// JIT frames from perf maps: Node.js and the JVM.
mod jit;
/// Memory and I/O: brk, mmap, munmap, malloc (allocated, in use, Go's heap
/// profile) and block I/O latency.
mod memory;
/// Pushes to Pyroscope and OTLP against a receiver decoding the real
/// schemas; service and container labels from cgroups; receivers that fail.
mod push;
/// CPython frames merged into native stacks: Debian's python3 and pyenv's
/// 3.12 and 3.13 against py-spy, off-CPU, deep recursion.
mod python;
/// The README's quick start, run as printed in a fresh clone.
mod quickstart;
/// The symbolizer on real processes, without BPF: perf maps, fallbacks, ELF.
mod symbolize;
/// User stacks unwound from .eh_frame: programs without frame pointers
/// (C, Rust, Debian's python3), page faults and off-CPU through libc, and
/// hostile unwind input.
mod unwind;
/// JavaScript frames of Node.js processes read from V8's frames, against
/// V8's own profiler (`node --cpu-prof`), on Node 18 to 26.
mod v8;
/// The web page at `/` in a real browser.
mod web;
