//! The symbol-table reader: the compact table (`symtab`) and the pass over
//! large tables (`symscan`) on a file a user mapped, reached through the
//! ELF worker's plan for a file without DWARF. With the first byte even,
//! the rest is the whole file; odd, it is split into a `.symtab` and its
//! `.strtab` (also the `.dynsym` and `.dynstr`) of a well-formed file, so
//! that mutations land in the symbols and names.
#![no_main]

use emberd::fuzzing::{DYNSYM, NOBITS, STRTAB, SYMTAB, Section, elf};
use emberd_fuzz::{Counting, check_bound, mem_file, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let Some((&how, rest)) = data.split_first() else {
        return;
    };
    let file = if how & 1 == 0 {
        rest.to_vec()
    } else {
        let cut = rest.len().min(usize::from(how >> 1) * 24);
        let (syms, names) = rest.split_at(cut);
        let mut text = Section::new(".text", NOBITS, &[]);
        text.size = 1 << 16;
        text.flags = 6;
        let mut sections = vec![
            text,
            Section::new(".symtab", SYMTAB, syms),
            Section::new(".strtab", STRTAB, names),
            Section::new(".dynsym", DYNSYM, syms),
            Section::new(".dynstr", STRTAB, names),
        ];
        sections[1].link = 3;
        sections[1].entsize = 24;
        sections[3].link = 5;
        sections[3].entsize = 24;
        elf(&sections)
    };
    // File offsets to name: spread over the file, and each symbol's value
    // (the PT_LOAD maps offsets to equal addresses).
    let mut offsets: Vec<u64> = (0..16).map(|i| (file.len() as u64 * i) / 16).collect();
    offsets.extend(
        rest.chunks_exact(24)
            .take(64)
            .map(|s| u64::from_le_bytes(s[8..16].try_into().expect("8")) % (file.len() as u64 + 1)),
    );
    let f = mem_file(&file);
    let (names, peak) = peak_of(|| emberd::fuzzing::fuzz_names(&f.path, &offsets));
    // Fixed: the deflate state that packs the names (about 400 KiB).
    check_bound("symbol reader", peak, file.len(), 32, 1 << 20);
    check_bound("compact table", names.table_bytes, file.len(), 4, 4096);
    if let (Some(table), Some(scan)) = (&names.table, &names.scan) {
        // Both follow blazesym's rules: where the scan names an address,
        // the compact table names it alike.
        for (i, (t, s)) in table.iter().zip(scan).enumerate() {
            if let Some(s) = s {
                assert_eq!(
                    t.as_ref(),
                    Some(s),
                    "address {i}: the table and the scan differ"
                );
            }
        }
    }
});
