//! What the fuzz targets (`fuzz/`) and the parsers' tests share: the ELF
//! worker's symbol-table reader, and an ELF writer so that mutations (and
//! hand-made hostile sections) land in the sections a reader parses rather
//! than in the headers.

pub use crate::symbolize::elf_worker::{FuzzNames, fuzz_names};

/// One section for [`elf`].
pub struct Section<'a> {
    /// Its name.
    pub name: &'a str,
    /// `sh_type`.
    pub kind: u32,
    /// `sh_flags`.
    pub flags: u64,
    /// `sh_link`: a section index, 1 for the first of `sections`.
    pub link: u32,
    /// `sh_entsize`.
    pub entsize: u64,
    /// Its bytes (none in the file for `SHT_NOBITS`, `size` then says).
    pub data: &'a [u8],
    /// `sh_size` for `SHT_NOBITS`.
    pub size: u64,
}

impl<'a> Section<'a> {
    /// A section of `kind` holding `data`.
    pub fn new(name: &'a str, kind: u32, data: &'a [u8]) -> Self {
        Self {
            name,
            kind,
            flags: 0,
            link: 0,
            entsize: 0,
            data,
            size: data.len() as u64,
        }
    }
}

/// `SHT_PROGBITS`.
pub const PROGBITS: u32 = 1;
/// `SHT_SYMTAB`.
pub const SYMTAB: u32 = 2;
/// `SHT_STRTAB`.
pub const STRTAB: u32 = 3;
/// `SHT_NOBITS`.
pub const NOBITS: u32 = 8;
/// `SHT_DYNSYM`.
pub const DYNSYM: u32 = 11;

/// A 64-bit little-endian x86_64 shared object holding `sections` (after
/// the null section, before `.shstrtab`), each at a virtual address equal
/// to its file offset, with one `PT_LOAD` over the whole file.
pub fn elf(sections: &[Section<'_>]) -> Vec<u8> {
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    let mut shstr = vec![0u8];
    let mut names = Vec::new();
    for s in sections.iter().map(|s| s.name).chain([".shstrtab"]) {
        names.push(shstr.len() as u32);
        shstr.extend_from_slice(s.as_bytes());
        shstr.push(0);
    }
    let mut out = vec![0u8; EHDR + PHDR];
    let mut placed = Vec::new();
    for s in sections {
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        placed.push(out.len() as u64);
        if s.kind != NOBITS {
            out.extend_from_slice(s.data);
        }
    }
    let shstr_off = out.len() as u64;
    out.extend_from_slice(&shstr);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    let shoff = out.len() as u64;
    let shnum = sections.len() + 2;
    let mut sh = vec![0u8; 64]; // the null section
    let mut header = |name: u32, s: &Section<'_>, off: u64, size: u64| {
        sh.extend_from_slice(&name.to_le_bytes());
        sh.extend_from_slice(&s.kind.to_le_bytes());
        sh.extend_from_slice(&s.flags.to_le_bytes());
        sh.extend_from_slice(&off.to_le_bytes()); // sh_addr
        sh.extend_from_slice(&off.to_le_bytes());
        sh.extend_from_slice(&size.to_le_bytes());
        sh.extend_from_slice(&s.link.to_le_bytes());
        sh.extend_from_slice(&0u32.to_le_bytes());
        sh.extend_from_slice(&8u64.to_le_bytes());
        sh.extend_from_slice(&s.entsize.to_le_bytes());
    };
    for (i, s) in sections.iter().enumerate() {
        header(names[i], s, placed[i], s.size);
    }
    let strtab = Section::new(".shstrtab", STRTAB, &shstr);
    header(
        names[sections.len()],
        &strtab,
        shstr_off,
        shstr.len() as u64,
    );
    out.extend_from_slice(&sh);
    let len = out.len() as u64;
    let h = &mut out[..EHDR + PHDR];
    h[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    h[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    h[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[32..40].copy_from_slice(&(EHDR as u64).to_le_bytes());
    h[40..48].copy_from_slice(&shoff.to_le_bytes());
    h[52..54].copy_from_slice(&(EHDR as u16).to_le_bytes());
    h[54..56].copy_from_slice(&(PHDR as u16).to_le_bytes());
    h[56..58].copy_from_slice(&1u16.to_le_bytes());
    h[58..60].copy_from_slice(&64u16.to_le_bytes());
    h[60..62].copy_from_slice(&(shnum as u16).to_le_bytes());
    h[62..64].copy_from_slice(&((shnum - 1) as u16).to_le_bytes());
    // PT_LOAD, R+X, over the whole file at vaddr = offset.
    let p = &mut h[EHDR..];
    p[..4].copy_from_slice(&1u32.to_le_bytes());
    p[4..8].copy_from_slice(&5u32.to_le_bytes());
    p[32..40].copy_from_slice(&len.to_le_bytes()); // p_filesz
    p[40..48].copy_from_slice(&len.to_le_bytes()); // p_memsz
    p[48..56].copy_from_slice(&0x1000u64.to_le_bytes());
    out
}
