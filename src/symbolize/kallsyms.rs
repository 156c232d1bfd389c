//! Kernel symbols from `/proc/kallsyms`, held compactly.
//!
//! blazesym's kallsyms resolver keeps a `String` per symbol: 5.6 MiB for
//! the 122k symbols of a Debian kernel, a sixth of the daemon's memory
//! target, for a table that is read only when a kernel address is first
//! seen (names are cached per address above it). Here the addresses are
//! 32-bit offsets (see [`Addrs`]) and the names are deflated in blocks of
//! [`BLOCK`], about 1.2 MiB in all. Naming an address inflates one block
//! (about 1.5 KB, microseconds).

use std::io::Read as _;

use thiserror::Error;

/// Names per deflated block: a lookup inflates one block, and the blocks
/// compress better the larger they are (64: 0.70 MB of names, 128: 0.63).
const BLOCK: usize = 64;

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

/// Symbol start addresses, sorted: those within 4 GiB below the highest as
/// 32-bit offsets from `base`, any lower ones in full. Kernel text,
/// modules and BPF programs lie within 4 GiB of each other on x86-64 and
/// arm64; x86-64 kernels before 6.15 also list their per-CPU variables at
/// small addresses, a few hundred symbols.
#[derive(Debug)]
struct Addrs {
    low: Box<[u64]>,
    base: u64,
    offsets: Box<[u32]>,
}

impl Addrs {
    /// From sorted addresses.
    fn new(sorted: &[u64]) -> Self {
        let hi = sorted.last().copied().unwrap_or(0);
        let floor = hi.saturating_sub(u64::from(u32::MAX));
        let split = sorted.partition_point(|&a| a < floor);
        let base = sorted.get(split).copied().unwrap_or(0);
        Self {
            low: sorted[..split].into(),
            base,
            offsets: sorted[split..].iter().map(|&a| (a - base) as u32).collect(),
        }
    }

    fn len(&self) -> usize {
        self.low.len() + self.offsets.len()
    }

    /// How many starts are at or below `addr`.
    fn count_at_or_below(&self, addr: u64) -> usize {
        match addr.checked_sub(self.base) {
            None => self.low.partition_point(|&a| a <= addr),
            Some(off) => {
                let off = u32::try_from(off).unwrap_or(u32::MAX);
                self.low.len() + self.offsets.partition_point(|&o| o <= off)
            }
        }
    }

    /// How many starts are below `addr`.
    fn count_below(&self, addr: u64) -> usize {
        match addr.checked_sub(self.base) {
            None | Some(0) => self.low.partition_point(|&a| a < addr),
            Some(off) => self.low.len() + self.offsets.partition_point(|&o| u64::from(o) < off),
        }
    }

    /// Index of the first symbol of the run of symbols with the greatest
    /// start at or below `addr` (aliases share a start; the first listed is
    /// the one named, as blazesym and `perf` without a vmlinux do).
    fn find(&self, addr: u64) -> Option<usize> {
        let last = self.count_at_or_below(addr).checked_sub(1)?;
        Some(self.count_below(self.get(last)))
    }

    fn get(&self, i: usize) -> u64 {
        match self.low.get(i) {
            Some(&a) => a,
            None => self.base + u64::from(self.offsets[i - self.low.len()]),
        }
    }

    fn bytes(&self) -> usize {
        self.low.len() * 8 + self.offsets.len() * 4
    }
}

/// The kernel's symbols: start addresses and deflated names.
#[derive(Debug)]
pub struct KernelSymbols {
    addrs: Addrs,
    /// Where each block of [`BLOCK`] names starts in `packed`, and one
    /// more entry for the end.
    blocks: Box<[u32]>,
    /// Raw deflate streams of blocks of names, each name followed by `\n`.
    packed: Box<[u8]>,
    /// The block inflated last (its index and text), and the inflater:
    /// addresses are named in order, several from one block, and making
    /// an inflater allocates its tables.
    last: Option<(usize, String)>,
    inflater: flate2::Decompress,
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
        // Stable: of aliases at one address, the first listed stays first.
        lines.sort_by_key(|l| l.addr);
        let sorted: Vec<u64> = lines.iter().map(|l| l.addr).collect();
        let addrs = Addrs::new(&sorted);
        drop(sorted);
        let mut packed = Vec::new();
        let mut blocks = Vec::with_capacity(lines.len().div_ceil(BLOCK) + 1);
        let mut raw = Vec::new();
        // One compressor for every block: making one allocates its tables
        // (a few hundred KiB), which for 1,900 blocks was most of the time.
        let mut z = flate2::Compress::new(flate2::Compression::default(), false);
        for chunk in lines.chunks(BLOCK) {
            blocks.push(packed.len() as u32);
            raw.clear();
            for l in chunk {
                raw.extend_from_slice(l.name.as_bytes());
                raw.push(b'\n');
            }
            z.reset();
            loop {
                packed.reserve(raw.len() / 2 + 64);
                let at = z.total_in() as usize;
                match z.compress_vec(&raw[at..], &mut packed, flate2::FlushCompress::Finish) {
                    Ok(flate2::Status::StreamEnd) => break,
                    Ok(_) => {}
                    // Compressing into a Vec cannot fail: no table then.
                    Err(_) => return None,
                }
            }
        }
        blocks.push(packed.len() as u32);
        Some(Self {
            addrs,
            blocks: blocks.into_boxed_slice(),
            packed: packed.into_boxed_slice(),
            last: None,
            inflater: flate2::Decompress::new(false),
        })
    }

    /// The name of the symbol that holds `addr` (the one starting closest
    /// at or below it), or `None` below the first symbol.
    pub fn name(&mut self, addr: u64) -> Option<String> {
        let i = self.addrs.find(addr)?;
        let b = i / BLOCK;
        if self.last.as_ref().is_none_or(|(l, _)| *l != b) {
            let mut raw = self
                .last
                .take()
                .map(|(_, r)| r)
                .unwrap_or_default()
                .into_bytes();
            raw.clear();
            let block = &self.packed[self.blocks[b] as usize..self.blocks[b + 1] as usize];
            self.inflater.reset(false);
            loop {
                raw.reserve(4096);
                let (was_in, was_out) = (self.inflater.total_in(), self.inflater.total_out());
                let status = self.inflater.decompress_vec(
                    &block[was_in as usize..],
                    &mut raw,
                    flate2::FlushDecompress::Finish,
                );
                match status {
                    Ok(flate2::Status::StreamEnd) => break,
                    // Our own stream: it cannot be corrupt, but a stream
                    // that stops moving must not loop.
                    Ok(_)
                        if self.inflater.total_in() != was_in
                            || self.inflater.total_out() != was_out => {}
                    _ => return None,
                }
            }
            self.last = Some((b, String::from_utf8(raw).ok()?));
        }
        let raw = &self.last.as_ref()?.1;
        let name = raw.split('\n').nth(i % BLOCK)?;
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
        self.addrs.bytes() + self.blocks.len() * 4 + self.packed.len()
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
