//! Symbol tables held compactly: start addresses as 32-bit offsets and
//! names deflated in blocks. Shared by the kernel's table ([`super::kallsyms`])
//! and the ELF files named from their symbol tables ([`super::symtab`]):
//! tables that are read only when an address is first seen (names are
//! cached per address above them), so they should cost little to hold.

/// Names per deflated block: a lookup inflates one block, and the blocks
/// compress better the larger they are (kallsyms at 64: 0.70 MB of names,
/// at 128: 0.63).
const BLOCK: usize = 64;

/// Symbol start addresses, sorted: those within 4 GiB below the highest as
/// 32-bit offsets from `base`, any lower ones in full. Kernel text,
/// modules and BPF programs lie within 4 GiB of each other on x86-64 and
/// arm64; x86-64 kernels before 6.15 also list their per-CPU variables at
/// small addresses, a few hundred symbols.
#[derive(Debug)]
pub struct Addrs {
    pub(super) low: Box<[u64]>,
    base: u64,
    offsets: Box<[u32]>,
}

impl Addrs {
    /// From sorted addresses.
    pub fn new(sorted: &[u64]) -> Self {
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

    /// Number of addresses.
    pub fn len(&self) -> usize {
        self.low.len() + self.offsets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many starts are at or below `addr`.
    pub fn count_at_or_below(&self, addr: u64) -> usize {
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
    pub fn find(&self, addr: u64) -> Option<usize> {
        let last = self.count_at_or_below(addr).checked_sub(1)?;
        Some(self.count_below(self.get(last)))
    }

    /// Address `i` (in bounds).
    pub fn get(&self, i: usize) -> u64 {
        match self.low.get(i) {
            Some(&a) => a,
            None => self.base + u64::from(self.offsets[i - self.low.len()]),
        }
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.low.len() * 8 + self.offsets.len() * 4
    }
}

/// Names, deflated in blocks of [`BLOCK`].
#[derive(Debug)]
pub struct PackedNames {
    /// Tells this table's blocks apart in a [`NameReader`].
    id: u64,
    /// Where each block starts in `packed`, and one more entry for the end.
    blocks: Box<[u32]>,
    /// Raw deflate streams of blocks of names, each name followed by `\n`.
    packed: Box<[u8]>,
}

/// Inflates blocks of [`PackedNames`], keeping the one inflated last:
/// addresses are named in order, several from one block. One serves many
/// tables: an inflater holds about 40 KiB (its state and window), which
/// per table came to more than the tables themselves.
#[derive(Debug)]
pub struct NameReader {
    inflater: flate2::Decompress,
    /// The table id and block index of `text`.
    block: Option<(u64, usize)>,
    text: String,
}

impl Default for NameReader {
    fn default() -> Self {
        Self {
            inflater: flate2::Decompress::new(false),
            block: None,
            text: String::new(),
        }
    }
}

impl PackedNames {
    /// Packs `names` (none may hold a `\n`), in order; `None` only if
    /// deflating failed, which writing to a `Vec` does not.
    pub fn new<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> Option<Self> {
        let mut packed = Vec::new();
        let mut blocks = Vec::with_capacity(names.len().div_ceil(BLOCK) + 1);
        let mut raw = Vec::new();
        // One compressor for every block: making one allocates its tables
        // (a few hundred KiB), which for kallsyms's 1,900 blocks was most
        // of the time.
        let mut z = flate2::Compress::new(flate2::Compression::default(), false);
        let mut names = names.peekable();
        while names.peek().is_some() {
            blocks.push(packed.len() as u32);
            raw.clear();
            for name in names.by_ref().take(BLOCK) {
                raw.extend_from_slice(name.as_bytes());
                raw.push(b'\n');
            }
            z.reset();
            loop {
                packed.reserve(raw.len() / 2 + 64);
                let at = z.total_in() as usize;
                match z.compress_vec(&raw[at..], &mut packed, flate2::FlushCompress::Finish) {
                    Ok(flate2::Status::StreamEnd) => break,
                    Ok(_) => {}
                    Err(_) => return None,
                }
            }
        }
        blocks.push(packed.len() as u32);
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Some(Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            blocks: blocks.into_boxed_slice(),
            packed: packed.into_boxed_slice(),
        })
    }

    /// Name `i`, or `None` past the end.
    pub fn get<'r>(&self, i: usize, reader: &'r mut NameReader) -> Option<&'r str> {
        let b = i / BLOCK;
        if b + 1 >= self.blocks.len() {
            return None;
        }
        if reader.block != Some((self.id, b)) {
            reader.block = None;
            let mut raw = std::mem::take(&mut reader.text).into_bytes();
            raw.clear();
            let block = &self.packed[self.blocks[b] as usize..self.blocks[b + 1] as usize];
            let inflater = &mut reader.inflater;
            inflater.reset(false);
            loop {
                raw.reserve(4096);
                let (was_in, was_out) = (inflater.total_in(), inflater.total_out());
                let status = inflater.decompress_vec(
                    &block[was_in as usize..],
                    &mut raw,
                    flate2::FlushDecompress::Finish,
                );
                match status {
                    Ok(flate2::Status::StreamEnd) => break,
                    // Our own stream: it cannot be corrupt, but a stream
                    // that stops moving must not loop.
                    Ok(_) if inflater.total_in() != was_in || inflater.total_out() != was_out => {}
                    _ => return None,
                }
            }
            reader.text = String::from_utf8(raw).ok()?;
            reader.block = Some((self.id, b));
        }
        reader.text.split_terminator('\n').nth(i % BLOCK)
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * 4 + self.packed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One reader serves several tables: a block inflated for one is never
    /// taken for the same block of another.
    #[test]
    fn one_reader_serves_several_tables() {
        let a: Vec<String> = (0..200).map(|i| format!("a_{i}")).collect();
        let b: Vec<String> = (0..200).map(|i| format!("b_{i}")).collect();
        let pa = PackedNames::new(a.iter().map(String::as_str)).expect("packed");
        let pb = PackedNames::new(b.iter().map(String::as_str)).expect("packed");
        let mut r = NameReader::default();
        for i in [0, 1, 70, 199, 3] {
            assert_eq!(pa.get(i, &mut r), Some(a[i].as_str()));
            assert_eq!(pb.get(i, &mut r), Some(b[i].as_str()));
        }
        assert_eq!(pa.get(200, &mut r), None);
    }
}
