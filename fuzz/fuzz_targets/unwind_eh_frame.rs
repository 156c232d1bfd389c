//! The unwind-table builder on CFI: the bytes (after a first byte saying
//! where) are the `.eh_frame` or `.debug_frame` of an otherwise well-formed
//! x86_64 ELF file (compressed if the first byte says so), so that every
//! mutation lands in gimli's and the builder's CIE/FDE and instruction
//! parsing, or in the decompression.
#![no_main]

use emberd::fuzzing::{NOBITS, PROGBITS, Section, elf};
use emberd::unwind::table::{self, CfaRule};
use emberd_fuzz::{Counting, check_bound, peak_of};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let Some((&how, cfi)) = data.split_first() else {
        return;
    };
    let name = if how & 1 == 0 {
        ".eh_frame"
    } else {
        ".debug_frame"
    };
    let mut text = Section::new(".text", NOBITS, &[]);
    text.size = 1 << 20;
    text.flags = 6; // SHF_ALLOC | SHF_EXECINSTR
    let mut section = Section::new(name, PROGBITS, cfi);
    if how & 4 != 0 {
        // SHF_COMPRESSED: the bytes start with an Elf64_Chdr.
        section.flags = 1 << 11;
    }
    let mut sections = vec![text, section];
    if how & 2 != 0 {
        // An .eh_frame_hdr: pointer encodings relative to it.
        sections.push(Section::new(".eh_frame_hdr", PROGBITS, &[1, 0x1b, 3, 0x3b]));
    }
    let file = elf(&sections);
    let (t, peak) = peak_of(|| table::build_table(&file));
    // Compressed, the CFI may be as large as the builder allows.
    let cfi_bytes = match how & 4 {
        0 => data.len(),
        _ => table::MAX_DECOMPRESSED_BYTES as usize,
    };
    check_bound("build_table", peak, cfi_bytes, 64, 1 << 20);
    if let Ok(t) = t {
        assert!(
            t.rows.windows(2).all(|w| w[0].pc < w[1].pc),
            "pcs not increasing"
        );
        if let Some(last) = t.rows.last() {
            assert_eq!(last.cfa_rule(), CfaRule::None, "no terminator");
        }
        check_bound("rows", t.rows.len(), cfi_bytes, 1, 16);
    }
});
