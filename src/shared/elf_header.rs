//! The ELF file header, checked against what the format allows before any
//! table it declares is allocated or read.
//!
//! Any local user can map any file as code, and the unwind stage reads
//! every file mapped as code. The header's entry sizes and counts come from
//! that user: a 4 KiB sparse file claiming 3,200 program headers of 65,535
//! bytes made the daemon allocate and touch 200 MiB per reader (it was
//! killed at its unit's memory limit). Here an entry is exactly the size
//! ELF64 defines (56 and 64 bytes), so the tables are bounded by their u16
//! counts (3.5 and 4 MiB), and each must lie inside the file.

/// `sizeof(Elf64_Phdr)`: the only program-header size ELF64 defines.
pub const PHDR_BYTES: u64 = 56;
/// `sizeof(Elf64_Shdr)`.
pub const SHDR_BYTES: u64 = 64;
/// `sizeof(Elf64_Ehdr)`.
pub const EHDR_BYTES: usize = 64;

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Not `\x7fELF`, 64-bit, little-endian.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    /// `e_phentsize` or `e_shentsize` is not ELF64's entry size.
    #[error("header entry size {found} where ELF64 defines {want}")]
    EntrySize {
        /// What the file says.
        found: u64,
        /// What the format defines.
        want: u64,
    },
    /// A header table does not lie inside the file.
    #[error("a header table lies outside the file")]
    OutsideFile,
}

/// Where the program and section header tables lie, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHeader {
    /// `e_phoff`.
    pub phoff: u64,
    /// `e_phnum` (entries of [`PHDR_BYTES`]).
    pub phnum: u64,
    /// `e_shoff`.
    pub shoff: u64,
    /// `e_shnum` (entries of [`SHDR_BYTES`]).
    pub shnum: u64,
    /// `e_shstrndx`.
    pub shstrndx: u64,
}

impl ElfHeader {
    /// The header of a file of `file_len` bytes whose first 64 bytes are
    /// `h`. An empty table (count 0) may have any entry size, as linkers
    /// write it.
    pub fn parse(h: &[u8; EHDR_BYTES], file_len: u64) -> Result<ElfHeader, HeaderError> {
        if h[0..4] != *b"\x7fELF" || h[4] != 2 || h[5] != 1 {
            return Err(HeaderError::NotElf64);
        }
        let u16_at = |o: usize| u64::from(u16::from_le_bytes([h[o], h[o + 1]]));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
        let header = ElfHeader {
            phoff: u64_at(32),
            phnum: u16_at(56),
            shoff: u64_at(40),
            shnum: u16_at(60),
            shstrndx: u16_at(62),
        };
        for (entsize, count, want) in [
            (u16_at(54), header.phnum, PHDR_BYTES),
            (u16_at(58), header.shnum, SHDR_BYTES),
        ] {
            if count > 0 && entsize != want {
                return Err(HeaderError::EntrySize {
                    found: entsize,
                    want,
                });
            }
        }
        for (off, len) in [header.ph_range(), header.sh_range()] {
            if off.checked_add(len).is_none_or(|end| end > file_len) {
                return Err(HeaderError::OutsideFile);
            }
        }
        Ok(header)
    }

    /// (offset, bytes) of the program header table.
    pub fn ph_range(&self) -> (u64, u64) {
        (self.phoff, self.phnum * PHDR_BYTES)
    }

    /// (offset, bytes) of the section header table.
    pub fn sh_range(&self) -> (u64, u64) {
        (self.shoff, self.shnum * SHDR_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(phentsize: u16, phnum: u16, shentsize: u16, shnum: u16) -> [u8; EHDR_BYTES] {
        let mut h = [0u8; EHDR_BYTES];
        h[0..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[40..48].copy_from_slice(&64u64.to_le_bytes());
        h[54..56].copy_from_slice(&phentsize.to_le_bytes());
        h[56..58].copy_from_slice(&phnum.to_le_bytes());
        h[58..60].copy_from_slice(&shentsize.to_le_bytes());
        h[60..62].copy_from_slice(&shnum.to_le_bytes());
        h
    }

    #[test]
    fn entry_sizes_are_elf64s_own() {
        // The attack: 3,200 entries of 65,535 bytes in a 200 MiB sparse file.
        let big = 200 << 20;
        assert_eq!(
            ElfHeader::parse(&header(65535, 3200, 65535, 3200), big),
            Err(HeaderError::EntrySize {
                found: 65535,
                want: 56
            })
        );
        assert_eq!(
            ElfHeader::parse(&header(56, 3200, 65535, 3200), big),
            Err(HeaderError::EntrySize {
                found: 65535,
                want: 64
            })
        );
        // Larger than ELF64's, as the old check let through.
        assert!(ElfHeader::parse(&header(64, 3, 64, 3), big).is_err());
        let ok = ElfHeader::parse(&header(56, 3, 64, 3), big).expect("valid");
        assert_eq!(ok.ph_range(), (64, 168));
        assert_eq!(ok.sh_range(), (64, 192));
        // No program headers: their size is not looked at.
        assert!(ElfHeader::parse(&header(0, 0, 64, 3), big).is_ok());
    }

    #[test]
    fn tables_lie_inside_the_file() {
        assert_eq!(
            ElfHeader::parse(&header(56, 100, 64, 0), 64 + 56 * 99),
            Err(HeaderError::OutsideFile)
        );
        assert!(ElfHeader::parse(&header(56, 100, 64, 0), 64 + 56 * 100).is_ok());
        let mut h = header(56, 1, 64, 1);
        h[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(ElfHeader::parse(&h, 1 << 20), Err(HeaderError::OutsideFile));
        let mut not = header(56, 1, 64, 1);
        not[4] = 1;
        assert_eq!(ElfHeader::parse(&not, 1 << 20), Err(HeaderError::NotElf64));
    }
}
