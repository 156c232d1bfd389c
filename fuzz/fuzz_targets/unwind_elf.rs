//! The unwind-table builder on whole files: the bytes are an ELF file (or
//! not) that a user mapped executable. Reached as the builder thread
//! reaches it: `read_capped` on the file, then `build`; and `build_table`
//! on the whole bytes, whose rows the parts `read_capped` reads must give
//! alike; the shared bounded ELF reader (`shared::elf`) on the file; and the
//! runtimes' check (`runtime::inspect`) that reads through it.
#![no_main]

use emberd::unwind::table::{self, CfaRule, UnwindTable};
use emberd_fuzz::{Counting, check_bound, mem_file, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

fn check(t: &UnwindTable, input: usize) {
    assert!(
        t.rows.windows(2).all(|w| w[0].pc < w[1].pc),
        "pcs not increasing"
    );
    if let Some(last) = t.rows.last() {
        assert_eq!(last.cfa_rule(), CfaRule::None, "no terminator");
    }
    // Every row comes from at least a byte of CFI (an FDE's start and end
    // rows from its 20 or more).
    check_bound(
        "rows",
        t.rows.len(),
        input,
        1,
        table::MAX_DECOMPRESSED_BYTES as usize,
    );
}

fuzz_target!(|data: &[u8]| {
    let (whole, peak) = peak_of(|| {
        let _ = table::elf_info(data);
        let t = table::build_table(data);
        if let Ok(t) = &t {
            check(t, data.len());
            let _ = table::build_table_with_debug(data, Some(data));
        }
        t
    });
    // A compressed section may hold as much CFI as the builder allows.
    let cfi_bytes = table::MAX_DECOMPRESSED_BYTES as usize;
    check_bound(
        "build_table",
        peak,
        data.len(),
        64,
        2 * cfi_bytes + (1 << 20),
    );

    let f = mem_file(data);
    // The shared reader: headers within the file, `.dynsym` within its
    // limit, whatever the header claims.
    let (_, peak) = peak_of(|| {
        let h = emberd::shared::elf::Headers::read(&f.file)?;
        let _ = h.read_vaddr(&f.file, 0, 64);
        h.dynamic_symbols(&f.file, &["main", "_PyRuntime"])
    });
    check_bound("shared::elf", peak, data.len(), 2, 64 << 10);
    // The runtimes' check (Python, HotSpot, V8) reads the same headers and
    // `.dynsym` on its own: within the file, whatever its header claims (a
    // 4 KiB file claiming 3,200 headers of 65,535 bytes once took 400 MiB
    // here).
    let (_, peak) = peak_of(|| emberd::runtime::inspect(&f.file));
    check_bound("runtime::inspect", peak, data.len(), 2, 64 << 10);
    let (read, peak) = peak_of(|| emberd::unwind::read_capped(&f.path));
    check_bound("read_capped", peak, data.len(), 2, 64 << 10);
    // Not ELF, or headers pointing outside the file: refused unread.
    let Ok(read) = read else {
        return;
    };
    assert_eq!(read.len(), data.len(), "read_capped is the file's size");
    if let Ok(whole) = whole {
        // The parts read must be all the builder uses of the file.
        let parts = table::build_table(&read).expect("the parts read build as the whole");
        assert_eq!(parts.rows, whole.rows, "the parts read give other rows");
    }
});
