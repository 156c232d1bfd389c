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
        account: 0,
    }
}

/// A process holding anonymous executable memory, as a JIT does (Debian's
/// python3 maps a page read+exec and sleeps).
fn jit_like() -> Workload {
    let w = Workload::spawn(Command::new("/usr/bin/python3").args([
        "-c",
        "import mmap, sys, time\n\
         m = mmap.mmap(-1, 65536, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,\n\
                       prot=mmap.PROT_READ | mmap.PROT_EXEC)\n\
         print(flush=True)\n\
         time.sleep(30)",
    ]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while exec_anon(w.pid()).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "python3 mapped no executable memory"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    w
}

/// The start of an anonymous executable mapping of `pid`: where a JIT puts
/// code (emberd reads only executable mappings, as perf records only those).
fn exec_anon(pid: u32) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() == 5 && f[1].contains('x')
    })?;
    u64::from_str_radix(line.split('-').next()?, 16).ok()
}

/// [`exec_anon`] of a process that has one.
fn anon_addr(pid: u32) -> u64 {
    exec_anon(pid).expect("an anonymous executable mapping")
}

/// A perf map in the JDK's 0x format names an address in anonymous memory;
/// rewriting the file is noticed; malformed lines are skipped and counted.
#[test]
fn perf_map_is_read_and_reloaded() {
    let w = jit_like();
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
    let w = jit_like();
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
    let w = jit_like();
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

/// The runtime address of symbol `name` of the ELF file `symtab` (the file
/// itself or its separate debug file) in `pid`, where `mapped` is the
/// path `pid` maps it by: the symbol's virtual address is turned into a
/// file offset by `mapped`'s segments, then found in `/proc/PID/maps`.
fn runtime_addr(pid: u32, mapped: &std::path::Path, symtab: &std::path::Path, name: &str) -> u64 {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let data = std::fs::read(symtab).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let vaddr = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} in {}", symtab.display()))
        .address();
    let own = std::fs::read(mapped).unwrap();
    let own = object::File::parse(&*own).unwrap();
    let off = own
        .segments()
        .find_map(|g| {
            let (off, size) = g.file_range();
            (g.address() <= vaddr && vaddr < g.address() + size).then(|| vaddr - g.address() + off)
        })
        .expect("a segment holds the symbol");
    let real = std::fs::canonicalize(mapped).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || std::fs::canonicalize(f[5]).ok().as_deref() != Some(&*real) {
            continue;
        }
        let (start, end) = f[0].split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        let moff = u64::from_str_radix(f[2], 16).unwrap();
        if moff <= off && off < moff + (end - start) {
            return start + off - moff;
        }
    }
    panic!("{} maps no page of {name}", pid);
}

/// DWARF is held within `dwarf_budget_mib`: a binary built as Debian
/// builds (-g -O2) gets its source file and line from DWARF at the default
/// budget, and with a budget of 0 the same name from its symbol table,
/// without file or line; nothing goes unnamed.
#[test]
fn dwarf_over_budget_names_from_the_symbol_table() {
    let bin = build_c_debian("cpu_70_30");
    let w = Workload::spawn(Command::new(&bin).arg("30"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let addr = runtime_addr(w.pid(), &bin, &bin, "hot_a") + 4;
    let mut full = Symbolizer::new(SymbolizerOptions::default());
    let out = full.symbolize(vec![sample(w.pid(), vec![addr])]);
    let f = &out[0].frames[0];
    assert_eq!(&*f.name, "hot_a");
    assert!(
        f.file
            .as_deref()
            .is_some_and(|p| p.ends_with("cpu_70_30.c"))
            && f.line.is_some(),
        "DWARF gives the source line: {f:?}"
    );
    let mut options = SymbolizerOptions::default();
    options.dwarf_budget_bytes = 0;
    let mut names_only = Symbolizer::new(options);
    let out = names_only.symbolize(vec![sample(w.pid(), vec![addr])]);
    let f = &out[0].frames[0];
    assert_eq!(&*f.name, "hot_a");
    assert_eq!((f.file.as_deref(), f.line), (None, None), "{f:?}");
    assert_eq!(names_only.cache_bytes().dwarf, 0);
    assert!(full.cache_bytes().dwarf > 0);
}

/// libc's DWARF from Debian's libc6-dbg (9.5 MiB decompressed) is over the
/// default budget: libc's internal functions, which its own stripped
/// symbol table lacks, are still named, from the debug file's table.
#[test]
fn libc_internal_functions_named_from_its_debug_file_within_budget() {
    let libc = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let id = {
        use object::Object;
        let data = std::fs::read(libc).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let id = file.build_id().unwrap().expect("libc has a build id");
        id.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let debug = std::path::PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    assert!(
        debug.is_file(),
        "libc's debug file {} is missing: install libc6-dbg (scripts/setup does)",
        debug.display()
    );
    let bin = build_c_debian("cpu_70_30");
    let w = Workload::spawn(Command::new(&bin).arg("30"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let addr = runtime_addr(w.pid(), libc, &debug, "__libc_start_call_main") + 8;
    let mut sym = Symbolizer::new(SymbolizerOptions::default());
    let out = sym.symbolize(vec![sample(w.pid(), vec![addr])]);
    let names: Vec<&str> = out[0].frames.iter().map(|f| &*f.name).collect();
    assert_eq!(names, ["__libc_start_call_main"]);
    assert!(
        sym.cache_bytes().dwarf < 8 << 20,
        "DWARF held: {}",
        sym.cache_bytes().dwarf
    );
}
