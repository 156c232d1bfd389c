use std::process::Command;

use emberd::collect::{Pid, RawSample, RawStack, Tid};
use emberd::symbolize::{FrameKind, Symbolizer, SymbolizerOptions};

use crate::common::*;

fn sample(pid: u32, user_ips: Vec<u64>) -> RawSample {
    RawSample {
        pid: Pid(pid),
        tid: Tid(pid),
        comm: "test".into(),
        kernel: RawStack::None,
        user: RawStack::Ips {
            ips: user_ips.into(),
            end: emberd::collect::StackEnd::Root,
        },
        count: 1,
        at_ms: None,
    }
}

/// The start of the first anonymous or heap mapping of `pid`: where a JIT
/// would put code.
fn anon_addr(pid: u32) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 5 || f.get(5) == Some(&"[heap]") || f.get(5) == Some(&"[stack]")
        })
        .expect("an anonymous mapping");
    u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap()
}

/// A perf map in the JDK's 0x format names an address in anonymous memory;
/// rewriting the file is noticed; malformed lines are skipped and counted.
#[test]
fn perf_map_is_read_and_reloaded() {
    let w = Workload::spawn(Command::new("sleep").arg("30"));
    let pid = w.pid();
    let addr = anon_addr(pid);
    let dir = scratch().join("perfmaps");
    std::fs::create_dir_all(&dir).unwrap();
    let map = dir.join(format!("perf-{pid}.map"));
    std::fs::write(
        &map,
        format!("0x{addr:016x} 0x0000000000000100 void Busy.first(long)\nnot a line\n"),
    )
    .unwrap();
    let mut options = SymbolizerOptions::default();
    options.perf_map_dir = dir.clone();
    let mut sym = Symbolizer::new(options);
    let out = sym.symbolize(vec![sample(pid, vec![addr + 0x10])]);
    let f = &out[0].frames[0];
    assert_eq!(
        (&*f.name, f.kind),
        ("void Busy.first(long)", FrameKind::Jit)
    );
    assert_eq!(f.to_string(), "void Busy.first(long)_[j]");
    assert_eq!(sym.misses().perf_map_malformed_lines, 1);

    // Another size, so the change is seen even within one mtime tick.
    std::fs::write(&map, format!("{addr:x} 200 LazyCompile:*second x.js:1\n")).unwrap();
    let out = sym.symbolize(vec![sample(pid, vec![addr + 0x10])]);
    assert_eq!(&*out[0].frames[0].name, "LazyCompile:*second x.js:1");
}

/// A perf map last written before its process started belongs to an
/// earlier process under the same pid (runtimes leave their maps in /tmp,
/// and pids wrap): it is refused as stale, and the address stays unnamed.
#[test]
fn perf_map_older_than_its_process_is_refused() {
    let w = Workload::spawn(Command::new("sleep").arg("30"));
    let pid = w.pid();
    let addr = anon_addr(pid);
    let dir = scratch().join("stale-perfmaps");
    std::fs::create_dir_all(&dir).unwrap();
    let map = dir.join(format!("perf-{pid}.map"));
    std::fs::write(
        &map,
        format!("0x{addr:016x} 0x100 LazyCompile:*left_behind x.js:1\n"),
    )
    .unwrap();
    // Written an hour before the process started.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&map)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let mut options = SymbolizerOptions::default();
    options.perf_map_dir = dir.clone();
    let mut sym = Symbolizer::new(options);
    let out = sym.symbolize(vec![sample(pid, vec![addr + 0x10])]);
    let name = out[0].frames[0].to_string();
    assert!(!name.contains("left_behind"), "{name}");
    let stale = sym
        .misses()
        .perf_map_refused
        .get(&emberd::symbolize::untrusted::Refusal::Stale)
        .copied();
    assert_eq!(stale, Some(1), "{:?}", sym.misses().perf_map_refused);
}

/// Addresses no source can name become `module+0xoffset`, never `[unknown]`:
/// an address in a file without a symbol there, an unmapped one, one of a
/// process that is gone.
#[test]
fn unnamed_addresses_say_where_they_are() {
    let w = Workload::spawn(Command::new("sleep").arg("30"));
    let pid = w.pid();
    let mut sym = Symbolizer::new(SymbolizerOptions::default());
    let anon = anon_addr(pid);
    let out = sym.symbolize(vec![sample(pid, vec![0x10, anon + 8])]);
    let names: Vec<String> = out[0].frames.iter().map(|f| f.to_string()).collect();
    // Root first: the second ip (a return address, looked up at ip - 1) comes first.
    assert!(
        names[0].starts_with('[') && names[0].contains("+0x"),
        "{names:?}"
    );
    assert_eq!(names[1], "[unmapped]+0x10");

    let gone = sample(2_147_483_000, vec![0x401000]);
    let out = sym.symbolize(vec![gone]);
    assert_eq!(out[0].frames[0].to_string(), "[exited]");
    assert!(sym.misses().process_gone >= 1 && sym.misses().unmapped >= 1);
}

/// A real function of a real process is named from its ELF file: this test
/// binary's own `main`-reachable function, looked up by address.
#[test]
fn own_function_is_named() {
    #[inline(never)]
    fn emberd_marker_function() -> u64 {
        std::hint::black_box(42)
    }
    let addr = emberd_marker_function as *const () as u64;
    let mut sym = Symbolizer::new(SymbolizerOptions::default());
    let out = sym.symbolize(vec![sample(std::process::id(), vec![addr])]);
    let names: Vec<String> = out[0].frames.iter().map(|f| f.name.to_string()).collect();
    assert!(
        names.iter().any(|n| n.contains("emberd_marker_function")),
        "{names:?}"
    );
}
