//! Kernel symbols from `/proc/kallsyms`, held compactly.
//!
//! blazesym's kallsyms resolver keeps a `String` per symbol: 5.6 MiB for
//! the 122k symbols of a Debian kernel, a sixth of the daemon's memory
//! target, for a table that is read only when a kernel address is first
//! seen (names are cached per address above it). Here the addresses are
//! 32-bit offsets and the names are deflated in blocks (see
//! [`super::packed`]), about 1.2 MiB in all. Naming an address inflates one block
//! (about 1.5 KB, microseconds).

use std::io::Read as _;

use thiserror::Error;

use super::packed::{Addrs, NameReader, PackedNames};

/// Why a kallsyms table could not be built.
#[derive(Debug, Error)]
pub enum KallsymsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// No line had a non-zero address: kallsyms hides them from this
    /// process (kernel.kptr_restrict, or no CAP_SYSLOG).
    #[error("{path} lists no symbol addresses (run as root or set kernel.kptr_restrict=0)")]
    NoAddresses {
        /// The file.
        path: String,
    },
}

/// The kernel's symbols: start addresses and deflated names.
#[derive(Debug)]
pub struct KernelSymbols {
    /// The address of `_text`: addresses without a symbol are printed as
    /// an offset from it, never absolute (that would give away the
    /// kernel's randomized base).
    pub text: Option<u64>,
    addrs: Addrs,
    names: PackedNames,
    reader: NameReader,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<Self, KallsymsError> {
        Self::from_file("/proc/kallsyms")
    }

    /// Reads a file in kallsyms format (`ADDR TYPE NAME [MODULE]`).
    pub fn from_file(path: &str) -> Result<Self, KallsymsError> {
        let read_err = |source| KallsymsError::Read {
            path: path.to_owned(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(read_err)?;
        Self::parse(&text).ok_or_else(|| KallsymsError::NoAddresses {
            path: path.to_owned(),
        })
    }

    /// Builds the table from kallsyms text; `None` if no line has a
    /// non-zero address. Lines that do not parse are skipped.
    pub fn parse(text: &str) -> Option<Self> {
        struct Line<'a> {
            addr: u64,
            name: &'a str,
        }
        let mut lines: Vec<Line<'_>> = text
            .lines()
            .filter_map(|l| {
                let mut t = l.split_ascii_whitespace();
                let addr = u64::from_str_radix(t.next()?, 16).ok()?;
                let _kind = t.next()?;
                let name = t.next()?;
                (addr != 0).then_some(Line { addr, name })
            })
            .collect();
        if lines.is_empty() {
            return None;
        }
        let text = lines.iter().find(|l| l.name == "_text").map(|l| l.addr);
        // Stable: of aliases at one address, the first listed stays first.
        lines.sort_by_key(|l| l.addr);
        let sorted: Vec<u64> = lines.iter().map(|l| l.addr).collect();
        let addrs = Addrs::new(&sorted);
        drop(sorted);
        let names = PackedNames::new(lines.iter().map(|l| l.name))?;
        Some(Self {
            text,
            addrs,
            names,
            reader: NameReader::default(),
        })
    }

    /// The name of the symbol that holds `addr` (the one starting closest
    /// at or below it), or `None` below the first symbol.
    pub fn name(&mut self, addr: u64) -> Option<String> {
        let i = self.addrs.find(addr)?;
        let name = self.names.get(i, &mut self.reader)?;
        // Kernels with Rust code list its symbols mangled (`_RNv...`).
        Some(match rustc_demangle::try_demangle(name) {
            Ok(d) => format!("{d:#}"),
            Err(_) => name.to_owned(),
        })
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether the table is empty (it never is once built).
    pub fn is_empty(&self) -> bool {
        self.addrs.len() == 0
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.addrs.bytes() + self.names.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_symbol_at_or_below_an_address() {
        let mut text = String::new();
        // More than a block, listed out of order, with aliases and a
        // module symbol.
        for i in (0..200u64).rev() {
            text.push_str(&format!(
                "{:x} t fn_{i}\n",
                0xffff_ffff_8100_0000 + i * 0x40
            ));
        }
        text.push_str("ffffffff81000080 T alias_of_fn_2\n");
        text.push_str("ffffffffc0200000 t mod_fn\t[nf_tables]\n");
        text.push_str("0000000000000000 t hidden\n");
        text.push_str("garbage line\n");
        let mut k = KernelSymbols::parse(&text).expect("table");
        assert_eq!(k.len(), 202);
        assert_eq!(k.name(0xffff_ffff_8100_0000).as_deref(), Some("fn_0"));
        assert_eq!(k.name(0xffff_ffff_8100_0041).as_deref(), Some("fn_1"));
        // fn_2 is listed before its alias: it names their common start.
        assert_eq!(k.name(0xffff_ffff_8100_0085).as_deref(), Some("fn_2"));
        assert_eq!(
            k.name(0xffff_ffff_8100_0000 + 150 * 0x40 + 3).as_deref(),
            Some("fn_150")
        );
        assert_eq!(k.name(0xffff_ffff_c020_0010).as_deref(), Some("mod_fn"));
        assert_eq!(k.name(0xffff_ffff_80ff_ffff), None);
        assert!(k.bytes() < text.len());
    }

    #[test]
    fn low_addresses_are_kept_in_full() {
        // Per-CPU variables as x86-64 kernels before 6.15 list them.
        let text = "0000000000001000 A cpu_a\n0000000000002000 A cpu_b\n\
                    0000000000002000 A cpu_b_alias\nffffffff81000000 T text\n\
                    ffffffffc0000000 t module_fn\t[m]\n";
        let mut k = KernelSymbols::parse(text).expect("table");
        assert_eq!(k.addrs.low.len(), 3);
        assert_eq!(k.name(0xfff), None);
        assert_eq!(k.name(0x1001).as_deref(), Some("cpu_a"));
        assert_eq!(k.name(0x2000).as_deref(), Some("cpu_b"));
        assert_eq!(k.name(0xffff_ffff_0000_0000).as_deref(), Some("cpu_b"));
        assert_eq!(k.name(0xffff_ffff_8100_0000).as_deref(), Some("text"));
        assert_eq!(k.name(0xffff_ffff_c000_0001).as_deref(), Some("module_fn"));
        assert_eq!(k.name(u64::MAX).as_deref(), Some("module_fn"));
    }

    #[test]
    fn hidden_addresses_give_no_table() {
        assert!(KernelSymbols::parse("0000000000000000 T a\n0000000000000000 T b\n").is_none());
    }

    #[test]
    fn matches_this_kernels_kallsyms() {
        let mut k = KernelSymbols::load()
            .expect("this test reads /proc/kallsyms's addresses: run it as root");
        let text = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
        let syms: Vec<(u64, &str)> = text
            .lines()
            .filter_map(|l| {
                let mut t = l.split_ascii_whitespace();
                Some((u64::from_str_radix(t.next()?, 16).ok()?, t.nth(1)?))
            })
            .collect();
        for want in ["do_sys_poll", "schedule", "asm_exc_page_fault"] {
            let &(addr, _) = syms
                .iter()
                .find(|(_, n)| *n == want)
                .unwrap_or_else(|| panic!("{want} in kallsyms"));
            // Of aliases, the first listed names the address.
            let first = syms.iter().find(|(a, _)| *a == addr).expect("listed").1;
            assert_eq!(k.name(addr + 1).as_deref(), Some(first), "{want}");
        }
        assert!(k.bytes() < 2 << 20, "{} bytes", k.bytes());
    }
}
