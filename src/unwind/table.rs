//! Compile x86_64 ELF call frame information (`.eh_frame` / `.debug_frame`) into a
//! compact, sorted table of [`UnwindRow`]s that a BPF program can binary-search.
//!
//! Only the two things a frame-pointer-less stack walker needs are kept per pc: how
//! to find the CFA (and thereby the return address at CFA-8) and where the caller's
//! rbp was saved. Everything else is classified as unsupported so the walker can stop
//! cleanly instead of producing a wrong stack.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gimli::{
    BaseAddresses, CieOrFde, CommonInformationEntry, DebugFrame, EhFrame, EndianSlice,
    LittleEndian, Register, RegisterRule, UnwindContext, UnwindOffset, UnwindSection,
};
use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{CompressionFormat, Object, ObjectSection};

/// Size of `e_ident`, and the offsets of the class and data bytes within it (ELF spec).
const EI_NIDENT: usize = 16;
const EI_CLASS: usize = 4;
const EI_DATA: usize = 5;

/// DWARF register number of rbp on x86_64.
const REG_RBP: Register = Register(6);
/// DWARF register number of rsp on x86_64.
const REG_RSP: Register = Register(7);
/// DWARF register number of the return address (rip) on x86_64.
const REG_RA: Register = Register(16);

/// One row of the compiled unwind table, as built; the BPF unwinder reads
/// it packed (`super::packed`: the pc's low 16 bits and an index into a
/// table of the distinct rules).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnwindRow {
    /// First instruction covered (ELF virtual address as in the file); the row holds until the next row's pc.
    pub pc: u32,
    /// CFA = base register + cfa_offset (CfaRule::Rsp / Rbp). For CfaRule::Plt: the threshold T (10 or 11).
    pub cfa_offset: u32,
    /// RbpRule::AtCfa: the caller's rbp is saved at CFA + 8 * rbp_offset (e.g. -2 for c-16).
    pub rbp_offset: i8,
    /// Low 4 bits: CfaRule as u8; high 4 bits: RbpRule as u8.
    pub rule: u8,
}

// Tables are built in these before packing: 12 bytes a row while a build lasts.
const _: () = assert!(size_of::<UnwindRow>() == 12);
const _: () = assert!(align_of::<UnwindRow>() == 4);

/// How the canonical frame address (CFA) of a frame is computed.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CfaRule {
    /// No FDE covers this pc (gap between FDEs, or after the last FDE).
    None = 0,
    /// CFA = rsp + cfa_offset.
    Rsp = 1,
    /// CFA = rbp + cfa_offset.
    Rbp = 2,
    /// The PLT expression: CFA = rsp + 8 + (((rip & 15) >= T) ? 8 : 0), T in cfa_offset.
    Plt = 3,
    /// Signal trampoline: the unwinder reads registers from the ucontext at rsp.
    Signal = 4,
    /// The return address is undefined: outermost frame (`_start`, `clone`, `start_thread`).
    End = 5,
    /// Any other CFA rule, a return address rule other than c-8, or an unrepresentable offset.
    Unsupported = 6,
}

/// Where the caller's rbp can be recovered from.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RbpRule {
    /// rbp is unchanged by this frame (undefined, same value, or not mentioned).
    Same = 0,
    /// The caller's rbp is saved at CFA + 8 * rbp_offset.
    AtCfa = 1,
    /// Any other rule for rbp (register, expression, val_offset, unrepresentable offset).
    Unsupported = 2,
}

impl UnwindRow {
    /// Builds a row from its decoded parts; `rule` packs the CFA rule in the low nibble.
    pub fn new(pc: u32, cfa: CfaRule, cfa_offset: u32, rbp: RbpRule, rbp_offset: i8) -> Self {
        UnwindRow {
            pc,
            cfa_offset,
            rbp_offset,
            rule: (cfa as u8) | ((rbp as u8) << 4),
        }
    }

    /// The CFA rule stored in the low nibble (unknown values read as `Unsupported`).
    pub fn cfa_rule(&self) -> CfaRule {
        // Rows may come from a foreign buffer, so an out-of-range nibble must not panic.
        match self.rule & 0x0f {
            0 => CfaRule::None,
            1 => CfaRule::Rsp,
            2 => CfaRule::Rbp,
            3 => CfaRule::Plt,
            4 => CfaRule::Signal,
            5 => CfaRule::End,
            _ => CfaRule::Unsupported,
        }
    }

    /// The rbp rule stored in the high nibble (unknown values read as `Unsupported`).
    pub fn rbp_rule(&self) -> RbpRule {
        match self.rule >> 4 {
            0 => RbpRule::Same,
            1 => RbpRule::AtCfa,
            _ => RbpRule::Unsupported,
        }
    }

    /// Everything but the pc: two adjacent rows with the same key can be merged.
    fn key(&self) -> (u32, i8, u8) {
        (self.cfa_offset, self.rbp_offset, self.rule)
    }
}

/// Which section the table was compiled from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableSource {
    /// `.eh_frame` of the file itself.
    EhFrame,
    /// `.debug_frame` of the file or of its separate debug file.
    DebugFrame,
    /// The file has no CFI at all.
    None,
}

/// Counters describing how the table was built, for logging and diagnosis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStats {
    /// FDEs converted into rows.
    pub fdes: u64,
    /// FDEs (or CIEs they reference) skipped because they were corrupt or unparseable,
    /// plus one per section whose entry iteration had to stop early.
    pub bad_fdes: u64,
    /// Rows in the final table whose CFA or rbp rule is `Unsupported`.
    pub unsupported_rows: u64,
    /// Rows dropped because their pc does not fit in u32.
    pub high_pc_rows: u64,
    /// Rows dropped because an earlier-starting FDE already covered their range.
    pub overlap_rows: u64,
    /// Wall-clock time spent in the builder.
    pub build_time: Duration,
}

/// The compiled table of one ELF file.
#[derive(Debug, Clone)]
pub struct UnwindTable {
    /// Rows sorted by strictly increasing pc; ends with a `CfaRule::None` row.
    pub rows: Vec<UnwindRow>,
    /// Which section the rows came from.
    pub source: TableSource,
    /// Build counters.
    pub stats: TableStats,
}

/// Errors of the table builder and the ELF inspector.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The input is not an ELF file the unwinder can handle (wrong class, endianness, machine).
    #[error("unsupported ELF file: {0}")]
    UnsupportedElf(String),
    /// `object` failed to parse the ELF headers.
    #[error("failed to parse ELF {what}: {source}")]
    Elf {
        /// Which file or structure was being parsed.
        what: &'static str,
        /// The underlying parse error.
        source: object::Error,
    },
    /// A section's contents could not be read (e.g. bad compression header).
    #[error("failed to read section {name}: {source}")]
    Section {
        /// The section name.
        name: &'static str,
        /// The underlying read error.
        source: object::Error,
    },
    /// A compressed section claims more than [`MAX_DECOMPRESSED_BYTES`], or
    /// its data does not decompress to what it claims.
    #[error("compressed section {name}: {reason}")]
    Decompressed {
        /// The section name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// More rows than the row budget holds (see [`build_table_within`]).
    #[error("more than {0} unwind rows, over the row budget (refused while read)")]
    TooManyRows(usize),
    /// Every row had a pc >= 2^32, so nothing fits the u32 row format.
    #[error("all {0} unwind rows have a pc >= 2^32 and cannot be represented")]
    PcOutOfRange(u64),
}

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// A row before the u32 conversion: FDEs are gathered with full 64-bit addresses first.
#[derive(Clone, Copy)]
struct WideRow {
    pc: u64,
    row: UnwindRow,
}

/// The rows of one FDE, with its address range.
struct FdeRows {
    begin: u64,
    end: u64,
    rows: Vec<WideRow>,
}

/// What one CFI section produced.
#[derive(Default)]
struct Collected {
    fdes: Vec<FdeRows>,
    bad_fdes: u64,
}

/// Checks the ELF identification so that unsupported files get an error naming the reason.
fn check_ident(data: &[u8]) -> Result<(), TableError> {
    let ident = data.get(..EI_NIDENT).ok_or_else(|| {
        TableError::UnsupportedElf(format!("file too short ({} bytes)", data.len()))
    })?;
    if ident[..4] != elf::ELFMAG {
        return Err(TableError::UnsupportedElf("bad ELF magic".into()));
    }
    if ident[EI_CLASS] != elf::ELFCLASS64 {
        return Err(TableError::UnsupportedElf(format!(
            "ELF class {} is not 64-bit",
            ident[EI_CLASS]
        )));
    }
    if ident[EI_DATA] != elf::ELFDATA2LSB {
        return Err(TableError::UnsupportedElf(format!(
            "ELF data encoding {} is not little-endian",
            ident[EI_DATA]
        )));
    }
    Ok(())
}

/// Parses a 64-bit little-endian x86_64 ELF file, rejecting everything else by name.
fn parse_elf<'a>(
    data: &'a [u8],
    what: &'static str,
) -> Result<ElfFile64<'a, object::LittleEndian>, TableError> {
    check_ident(data)?;
    let file = ElfFile64::<object::LittleEndian>::parse(data)
        .map_err(|source| TableError::Elf { what, source })?;
    let machine = file.elf_header().e_machine.get(object::LittleEndian);
    if machine != elf::EM_X86_64 {
        return Err(TableError::UnsupportedElf(format!(
            "e_machine {machine} is not x86_64 ({})",
            elf::EM_X86_64
        )));
    }
    Ok(file)
}

/// Builds the unwind table of `elf` from its own CFI only.
pub fn build_table(elf: &[u8]) -> Result<UnwindTable, TableError> {
    build_table_with_debug(elf, None)
}

/// Builds the unwind table of `elf`, falling back to the `.debug_frame` of `debug_file`
/// (its separate debug info) when the file itself has no usable CFI.
pub fn build_table_with_debug(
    elf: &[u8],
    debug_file: Option<&[u8]>,
) -> Result<UnwindTable, TableError> {
    build_table_within(elf, debug_file, usize::MAX)
}

/// [`build_table_with_debug`], refused with [`TableError::TooManyRows`] as
/// soon as the rows collected pass `max_rows`: the table could not be
/// uploaded anyway (the row budget holds fewer), and a user's file with
/// dense CFI costs ~40 bytes of scratch per byte of CFI while it is read,
/// so it is stopped before it costs more than the budget's rows.
pub fn build_table_within(
    elf: &[u8],
    debug_file: Option<&[u8]>,
    max_rows: usize,
) -> Result<UnwindTable, TableError> {
    let start = Instant::now();
    let file = parse_elf(elf, "file")?;

    let mut stats = TableStats::default();
    let mut source = TableSource::None;
    let mut collected = Collected::default();

    let eh = collect_eh_frame(&file, max_rows)?;
    // An .eh_frame whose FDEs are all corrupt is still the authority for this file:
    // falling back would hide the corruption, so only an FDE-less .eh_frame falls back.
    if let Some(eh) = eh.filter(|c| !c.fdes.is_empty() || c.bad_fdes > 0) {
        source = TableSource::EhFrame;
        collected = eh;
    }
    if source == TableSource::None {
        let own = collect_debug_frame(&file, max_rows)?;
        if let Some(own) = own.filter(|c| !c.fdes.is_empty() || c.bad_fdes > 0) {
            source = TableSource::DebugFrame;
            collected = own;
        } else if let Some(debug) = debug_file {
            let debug = parse_elf(debug, "separate debug file")?;
            if let Some(dbg) = collect_debug_frame(&debug, max_rows)?
                .filter(|c| !c.fdes.is_empty() || c.bad_fdes > 0)
            {
                source = TableSource::DebugFrame;
                collected = dbg;
            }
        }
    }

    stats.fdes = collected.fdes.len() as u64;
    stats.bad_fdes = collected.bad_fdes;
    let rows = assemble(collected.fdes, &mut stats)?;
    stats.unsupported_rows = rows
        .iter()
        .filter(|r| r.cfa_rule() == CfaRule::Unsupported || r.rbp_rule() == RbpRule::Unsupported)
        .count() as u64;
    stats.build_time = start.elapsed();
    Ok(UnwindTable {
        rows,
        source,
        stats,
    })
}

/// Address of a named section, if present; used for the pointer-encoding bases.
fn section_addr(file: &ElfFile64<'_, object::LittleEndian>, name: &str) -> Option<u64> {
    file.section_by_name(name).map(|s| s.address())
}

/// A section's (possibly decompressed) contents and its virtual address.
type SectionData<'a> = (Cow<'a, [u8]>, u64);

/// Reads the contents of a section, decompressing if needed; `None` if absent or empty
/// (e.g. SHT_NOBITS in a separate debug file).
fn section_data<'a>(
    file: &ElfFile64<'a, object::LittleEndian>,
    name: &'static str,
) -> Result<Option<SectionData<'a>>, TableError> {
    let Some(section) = file.section_by_name(name) else {
        return Ok(None);
    };
    let compressed = section
        .compressed_data()
        .map_err(|source| TableError::Section { name, source })?;
    let data = match compressed.format {
        CompressionFormat::None => Cow::Borrowed(compressed.data),
        _ if compressed.uncompressed_size > MAX_DECOMPRESSED_BYTES => {
            return Err(TableError::Decompressed {
                name,
                reason: format!(
                    "claims {} bytes, over the {MAX_DECOMPRESSED_BYTES} read",
                    compressed.uncompressed_size
                ),
            });
        }
        // object reads a zstd stream to its end whatever the header
        // claims (4 bytes of RLE block make 128 KiB): read it here, no
        // further than the claim.
        CompressionFormat::Zstandard => Cow::Owned(
            zstd_within(compressed.data, compressed.uncompressed_size as usize)
                .map_err(|reason| TableError::Decompressed { name, reason })?,
        ),
        // zlib: object inflates into the claimed size and no further.
        _ => compressed
            .decompress()
            .map_err(|source| TableError::Section { name, source })?,
    };
    if data.is_empty() {
        return Ok(None);
    }
    Ok(Some((data, section.address())))
}

/// A compressed CFI section's size once decompressed, at most: the largest
/// `.debug_frame` seen (libxul's separate debug file) is a fifth of this.
/// Larger claims are refused, so a few bytes of file cannot ask for more.
pub const MAX_DECOMPRESSED_BYTES: u64 = crate::shared::elf::limits::MAX_DECOMPRESSED_BYTES;

/// The zstd frames of `data`, decompressed, if they make exactly `size`
/// bytes; reading stops one byte past `size`.
fn zstd_within(mut data: &[u8], size: usize) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut out = Vec::new();
    out.try_reserve_exact(size).map_err(|e| e.to_string())?;
    while !data.is_empty() && out.len() <= size {
        let decoder =
            ruzstd::decoding::StreamingDecoder::new(&mut data).map_err(|e| format!("zstd: {e}"))?;
        let left = (size + 1 - out.len()) as u64;
        decoder
            .take(left)
            .read_to_end(&mut out)
            .map_err(|e| format!("zstd: {e}"))?;
    }
    if out.len() != size {
        return Err(if out.len() > size {
            format!("zstd data makes more than the {size} bytes its header claims")
        } else {
            format!(
                "zstd data makes {} bytes, its header claims {size}",
                out.len()
            )
        });
    }
    Ok(out)
}

/// Pointer-encoding bases: .eh_frame pcrel, .text textrel and .got datarel.
fn bases_for(file: &ElfFile64<'_, object::LittleEndian>, eh_frame_addr: u64) -> BaseAddresses {
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame_addr);
    if let Some(a) = section_addr(file, ".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(a);
    }
    if let Some(a) = section_addr(file, ".text") {
        bases = bases.set_text(a);
    }
    if let Some(a) = section_addr(file, ".got") {
        bases = bases.set_got(a);
    }
    bases
}

/// Collects the FDEs of the file's own `.eh_frame`; `None` if it has none.
fn collect_eh_frame(
    file: &ElfFile64<'_, object::LittleEndian>,
    max_rows: usize,
) -> Result<Option<Collected>, TableError> {
    let Some((data, addr)) = section_data(file, ".eh_frame")? else {
        return Ok(None);
    };
    let mut section = EhFrame::new(&data, LittleEndian);
    section.set_address_size(8);
    let bases = bases_for(file, addr);
    collect(&section, &bases, max_rows).map(Some)
}

/// Collects the FDEs of a file's `.debug_frame`; `None` if it has none (or it is NOBITS).
fn collect_debug_frame(
    file: &ElfFile64<'_, object::LittleEndian>,
    max_rows: usize,
) -> Result<Option<Collected>, TableError> {
    let Some((data, _)) = section_data(file, ".debug_frame")? else {
        return Ok(None);
    };
    let mut section = DebugFrame::new(&data, LittleEndian);
    section.set_address_size(8);
    // .debug_frame addresses are absolute, but textrel bases do no harm if a producer uses them.
    let bases = bases_for(file, 0);
    collect(&section, &bases, max_rows).map(Some)
}

/// Walks every entry of a CFI section and converts each FDE's rows.
fn collect<'a, S>(
    section: &S,
    bases: &BaseAddresses,
    max_rows: usize,
) -> Result<Collected, TableError>
where
    S: UnwindSection<Reader<'a>>,
{
    let mut out = Collected::default();
    let mut ctx = Box::new(UnwindContext::new());
    // Parsed once per offset: libc has thousands of FDEs sharing a handful of CIEs.
    let mut cies: HashMap<usize, gimli::Result<CommonInformationEntry<Reader<'a>>>> =
        HashMap::new();
    let mut entries = section.entries(bases);
    let mut rows = 0usize;
    loop {
        let entry = match entries.next() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(_) => {
                // The entry length can't be trusted any more, so nothing after it can be
                // located; gimli empties its input, which also guarantees termination.
                out.bad_fdes += 1;
                break;
            }
        };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial.parse(|sec: &S, b: &BaseAddresses, off: S::Offset| {
            cies.entry(UnwindOffset::into(off))
                .or_insert_with(|| sec.cie_from_offset(b, off))
                .clone()
        });
        let Ok(fde) = fde else {
            out.bad_fdes += 1;
            continue;
        };
        match fde_rows(section, bases, &mut ctx, &fde) {
            Some(f) => {
                rows = rows.saturating_add(f.rows.len());
                if rows > max_rows {
                    return Err(TableError::TooManyRows(max_rows));
                }
                out.fdes.push(f);
            }
            None => out.bad_fdes += 1,
        }
    }
    Ok(out)
}

/// Converts one FDE; `None` if its instructions are corrupt (the FDE is then skipped whole,
/// since a partial row list would describe the tail of the function wrongly).
fn fde_rows<'a, S>(
    section: &S,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    fde: &gimli::FrameDescriptionEntry<Reader<'a>>,
) -> Option<FdeRows>
where
    S: UnwindSection<Reader<'a>>,
{
    let begin = fde.initial_address();
    let end = begin.checked_add(fde.len())?;
    let signal = fde.is_signal_trampoline();
    let mut rows = Vec::new();
    let mut table = fde.rows(section, bases, ctx).ok()?;
    while let Some(row) = table.next_row().ok()? {
        // Zero-length rows (advance_loc 0) cover no instruction; the next row supersedes them.
        if row.end_address() <= row.start_address() {
            continue;
        }
        let converted = if signal {
            UnwindRow::new(0, CfaRule::Signal, 0, RbpRule::Same, 0)
        } else {
            convert_row(section, row)
        };
        rows.push(WideRow {
            pc: row.start_address(),
            row: converted,
        });
    }
    Some(FdeRows { begin, end, rows })
}

/// Classifies one gimli row into the compact form.
fn convert_row<'a, S>(
    section: &S,
    row: &gimli::UnwindTableRow<usize, gimli::StoreOnHeap>,
) -> UnwindRow
where
    S: UnwindSection<Reader<'a>>,
{
    let unsupported = UnwindRow::new(0, CfaRule::Unsupported, 0, RbpRule::Same, 0);
    // An undefined return address marks the outermost frame whatever the CFA says.
    let ra = row.register(REG_RA);
    if matches!(ra, Some(RegisterRule::Undefined)) {
        return UnwindRow::new(0, CfaRule::End, 0, RbpRule::Same, 0);
    }
    let (cfa, cfa_offset) = match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, offset } => {
            let rule = match *register {
                REG_RSP => CfaRule::Rsp,
                REG_RBP => CfaRule::Rbp,
                _ => return unsupported,
            };
            match u32::try_from(*offset) {
                Ok(off) => (rule, off),
                Err(_) => return unsupported,
            }
        }
        gimli::CfaRule::Expression(expr) => {
            let Ok(expr) = expr.get(section) else {
                return unsupported;
            };
            match classify_cfa_expression(expr.0.slice()) {
                ExprClass::Plt(t) => (CfaRule::Plt, u32::from(t)),
                // The ucontext holds everything, so the return address rule is irrelevant.
                ExprClass::Signal => {
                    return UnwindRow::new(0, CfaRule::Signal, 0, RbpRule::Same, 0);
                }
                ExprClass::Other => return unsupported,
            }
        }
    };
    if ra != Some(RegisterRule::Offset(-8)) {
        return unsupported;
    }
    let (rbp, rbp_offset) = match row.register(REG_RBP) {
        None | Some(RegisterRule::Undefined) | Some(RegisterRule::SameValue) => (RbpRule::Same, 0),
        Some(RegisterRule::Offset(n)) if n % 8 == 0 => match i8::try_from(n / 8) {
            Ok(slot) => (RbpRule::AtCfa, slot),
            Err(_) => (RbpRule::Unsupported, 0),
        },
        Some(_) => (RbpRule::Unsupported, 0),
    };
    UnwindRow::new(0, cfa, cfa_offset, rbp, rbp_offset)
}

/// Recognised CFA expressions.
#[derive(Debug, PartialEq, Eq)]
enum ExprClass {
    /// The PLT expression with threshold T.
    Plt(u8),
    /// glibc's `__restore_rt`: `DW_OP_breg7 160; DW_OP_deref`.
    Signal,
    /// Anything else.
    Other,
}

/// A decoded DWARF expression operation of the small subset the patterns use.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Op {
    Breg(u8, i64),
    Lit(u8),
    And,
    Ge,
    Shl,
    Plus,
    Deref,
}

/// Decodes an expression into the subset of operations the known patterns use; `None`
/// for any other opcode or a truncated operand. Operands are decoded rather than
/// byte-compared because producers may emit non-minimal LEB128.
fn decode_ops(mut bytes: &[u8]) -> Option<Vec<Op>> {
    let mut ops = Vec::new();
    while let Some((&op, rest)) = bytes.split_first() {
        bytes = rest;
        let decoded = match op {
            0x70..=0x8f => {
                let (value, rest) = read_sleb128(bytes)?;
                bytes = rest;
                Op::Breg(op - 0x70, value)
            }
            0x30..=0x4f => Op::Lit(op - 0x30),
            0x1a => Op::And,
            0x2a => Op::Ge,
            0x24 => Op::Shl,
            0x22 => Op::Plus,
            0x06 => Op::Deref,
            _ => return None,
        };
        ops.push(decoded);
        // No recognised pattern is longer than this; bail out early on huge expressions.
        if ops.len() > 16 {
            return None;
        }
    }
    Some(ops)
}

/// Reads a signed LEB128 value, rejecting encodings longer than 10 bytes.
fn read_sleb128(bytes: &[u8]) -> Option<(i64, &[u8])> {
    let mut result: i64 = 0;
    let mut shift = 0u32;
    for (i, &b) in bytes.iter().enumerate() {
        if shift >= 64 {
            return None;
        }
        result |= i64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            if shift < 64 && b & 0x40 != 0 {
                result |= -1i64 << shift;
            }
            return Some((result, &bytes[i + 1..]));
        }
    }
    None
}

/// Recognises the two CFA expressions glibc/binutils emit (PLT, `__restore_rt`).
fn classify_cfa_expression(bytes: &[u8]) -> ExprClass {
    let Some(ops) = decode_ops(bytes) else {
        return ExprClass::Other;
    };
    match ops.as_slice() {
        [
            Op::Breg(7, 8),
            Op::Breg(16, 0),
            Op::Lit(15),
            Op::And,
            Op::Lit(t @ (10 | 11)),
            Op::Ge,
            Op::Lit(3),
            Op::Shl,
            Op::Plus,
        ] => ExprClass::Plt(*t),
        [Op::Breg(7, 160), Op::Deref] => ExprClass::Signal,
        _ => ExprClass::Other,
    }
}

/// Orders FDEs, resolves overlaps, inserts gap rows, narrows pcs to u32 and merges.
fn assemble(mut fdes: Vec<FdeRows>, stats: &mut TableStats) -> Result<Vec<UnwindRow>, TableError> {
    // Stable sort: of two FDEs starting at the same pc, the one seen first wins.
    fdes.sort_by_key(|f| f.begin);
    let none = UnwindRow::new(0, CfaRule::None, 0, RbpRule::Same, 0);
    let mut wide: Vec<WideRow> = Vec::new();
    let mut covered_to: Option<u64> = None;
    for fde in &fdes {
        if fde.end <= fde.begin {
            continue;
        }
        if let Some(end) = covered_to.filter(|&end| fde.begin > end) {
            wide.push(WideRow { pc: end, row: none });
        }
        let floor = covered_to.unwrap_or(0);
        for (i, r) in fde.rows.iter().enumerate() {
            let row_end = fde.rows.get(i + 1).map_or(fde.end, |n| n.pc).min(fde.end);
            if r.pc >= fde.end || row_end <= floor {
                // Entirely inside an earlier FDE (or beyond its own FDE's range).
                stats.overlap_rows += 1;
                continue;
            }
            // A row straddling the earlier FDE's end still owns the remainder.
            wide.push(WideRow {
                pc: r.pc.max(floor),
                row: r.row,
            });
        }
        covered_to = Some(covered_to.map_or(fde.end, |c| c.max(fde.end)));
    }
    if let Some(end) = covered_to {
        wide.push(WideRow { pc: end, row: none });
    }

    let total = wide.len() as u64;
    let mut rows: Vec<UnwindRow> = Vec::with_capacity(wide.len());
    for w in wide {
        let Ok(pc) = u32::try_from(w.pc) else {
            stats.high_pc_rows += 1;
            continue;
        };
        let row = UnwindRow { pc, ..w.row };
        match rows.last_mut() {
            // Same pc: the later row is the one that governs (e.g. a gap row replaced by
            // the FDE starting at that very pc).
            Some(last) if last.pc == pc => *last = row,
            Some(last) if last.key() == row.key() => {}
            _ => rows.push(row),
        }
    }
    // Keep the "ends with None" invariant even when the real end (>= 2^32) was dropped:
    // a None at u32::MAX costs at most the single last representable address.
    if rows.last().is_some_and(|r| r.cfa_rule() != CfaRule::None) {
        match rows.last_mut() {
            Some(last) if last.pc == u32::MAX => {
                *last = UnwindRow {
                    pc: u32::MAX,
                    ..none
                }
            }
            _ => rows.push(UnwindRow {
                pc: u32::MAX,
                ..none
            }),
        }
    }
    // Replacing at equal pc can leave two adjacent identical rows; merge once more.
    rows.dedup_by(|b, a| a.key() == b.key());
    if total > 0 && rows.is_empty() {
        return Err(TableError::PcOutOfRange(total));
    }
    Ok(rows)
}

/// Finds the row covering `pc`: the last row with `row.pc <= pc`, `None` before the first.
pub fn lookup(rows: &[UnwindRow], pc: u32) -> Option<&UnwindRow> {
    let idx = rows.partition_point(|r| r.pc <= pc);
    idx.checked_sub(1).and_then(|i| rows.get(i))
}

/// ELF facts the loader needs to map runtime addresses and find debug info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// Contents of the GNU build-id note.
    pub build_id: Option<Vec<u8>>,
    /// The PT_LOAD segments in program header order.
    pub loads: Vec<LoadSegment>,
    /// `.gnu_debuglink`: debug file name and its CRC32.
    pub debuglink: Option<(String, u32)>,
}

/// One PT_LOAD program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    /// File offset of the segment.
    pub offset: u64,
    /// Virtual address of the segment as linked.
    pub vaddr: u64,
    /// Bytes backed by the file.
    pub filesz: u64,
    /// Bytes in memory (>= filesz; the rest is zero-filled).
    pub memsz: u64,
    /// Whether PF_X is set.
    pub executable: bool,
}

/// Reads build id, PT_LOAD segments and debuglink of a 64-bit little-endian x86_64 ELF.
pub fn elf_info(elf: &[u8]) -> Result<ElfInfo, TableError> {
    let file = parse_elf(elf, "file")?;
    let endian = object::LittleEndian;
    // A malformed note (rustc's own libraries carry one) costs only the
    // sharing by build id and the debug-file lookup, not the table.
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    let debuglink = file
        .gnu_debuglink()
        .ok()
        .flatten()
        .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc));
    let loads = file
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| LoadSegment {
            offset: ph.p_offset(endian),
            vaddr: ph.p_vaddr(endian),
            filesz: ph.p_filesz(endian),
            memsz: ph.p_memsz(endian),
            executable: ph.p_flags(endian) & elf::PF_X != 0,
        })
        .collect();
    Ok(ElfInfo {
        build_id,
        loads,
        debuglink,
    })
}

/// The separate debug file of a build id, if installed: /usr/lib/debug/.build-id/xx/rest.debug
pub fn debug_file_path(build_id: &[u8]) -> PathBuf {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let (first, rest) = build_id
        .split_first()
        .map_or((&[][..], &[][..]), |(f, r)| (std::slice::from_ref(f), r));
    PathBuf::from("/usr/lib/debug/.build-id")
        .join(hex(first))
        .join(format!("{}.debug", hex(rest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table is refused as soon as its rows pass the cap, not built whole
    /// and then found too large.
    #[test]
    fn rows_past_the_cap_are_refused_while_read() {
        let exe = std::fs::read("/proc/self/exe").expect("reading this binary");
        let whole = build_table(&exe).expect("this binary's table");
        assert!(whole.rows.len() > 1000);
        let err = build_table_within(&exe, None, 1000)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, TableError::TooManyRows(1000)), "{err}");
        let fits = build_table_within(&exe, None, whole.rows.len() * 2).expect("fits");
        assert_eq!(fits.rows.len(), whole.rows.len());
    }
    use std::path::Path;
    use std::process::Command;

    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";
    const PYTHON: &str = "/usr/bin/python3.11";

    /// A fresh per-test temporary directory (no tempfile crate).
    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("unwind-dev-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        dir
    }

    /// What readelf says for one LOC line, already mapped to our classification.
    #[derive(Debug)]
    struct Expected {
        loc: u64,
        cfa: CfaRule,
        cfa_offset: u32,
        rbp: RbpRule,
        rbp_offset: i8,
    }

    /// Parses `readelf --debug-dump=frames-interp` .eh_frame/.debug_frame output into the
    /// LOC lines whose CFA is rsp+N or rbp+N.
    fn readelf_rows(path: &Path) -> Vec<Expected> {
        let out = Command::new("readelf")
            .arg("--debug-dump=frames-interp")
            .arg(path)
            .output()
            .expect("run readelf");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut result = Vec::new();
        let mut columns: Vec<String> = Vec::new();
        let mut in_cie = false;
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() >= 5 && (fields[3] == "CIE" || fields[3] == "FDE") {
                in_cie = fields[3] == "CIE";
                columns.clear();
                continue;
            }
            if fields.first() == Some(&"LOC") {
                columns = fields.iter().map(|s| s.to_string()).collect();
                continue;
            }
            if in_cie || columns.is_empty() || fields.len() != columns.len() {
                continue;
            }
            let Ok(loc) = u64::from_str_radix(fields[0], 16) else {
                continue;
            };
            let col = |name: &str| columns.iter().position(|c| c == name).map(|i| fields[i]);
            let cfa_text = fields[1];
            let (cfa, off) = if let Some(n) = cfa_text.strip_prefix("rsp+") {
                (CfaRule::Rsp, n)
            } else if let Some(n) = cfa_text.strip_prefix("rbp+") {
                (CfaRule::Rbp, n)
            } else {
                continue;
            };
            let Ok(off) = off.parse::<u64>() else {
                continue;
            };
            let mut e = Expected {
                loc,
                cfa,
                cfa_offset: 0,
                rbp: RbpRule::Same,
                rbp_offset: 0,
            };
            match col("ra") {
                Some("u") => {
                    e.cfa = CfaRule::End;
                    result.push(e);
                    continue;
                }
                Some("c-8") => {}
                _ => {
                    e.cfa = CfaRule::Unsupported;
                    result.push(e);
                    continue;
                }
            }
            let Ok(off32) = u32::try_from(off) else {
                e.cfa = CfaRule::Unsupported;
                result.push(e);
                continue;
            };
            e.cfa_offset = off32;
            match col("rbp") {
                None | Some("u") | Some("s") => {}
                Some(v) => match v.strip_prefix("c").and_then(|n| n.parse::<i64>().ok()) {
                    Some(n) if n % 8 == 0 && i8::try_from(n / 8).is_ok() => {
                        e.rbp = RbpRule::AtCfa;
                        e.rbp_offset = (n / 8) as i8;
                    }
                    _ => e.rbp = RbpRule::Unsupported,
                },
            }
            result.push(e);
        }
        result
    }

    /// Compares our table with readelf; returns (agreeing, total).
    fn agreement(path: &Path, rows: &[UnwindRow]) -> (usize, usize) {
        let expected = readelf_rows(path);
        let mut ok = 0;
        let mut shown = 0;
        for e in &expected {
            let got = u32::try_from(e.loc).ok().and_then(|pc| lookup(rows, pc));
            let matches = got.is_some_and(|g| {
                g.cfa_rule() == e.cfa
                    && (!matches!(e.cfa, CfaRule::Rsp | CfaRule::Rbp)
                        || (g.cfa_offset == e.cfa_offset
                            && g.rbp_rule() == e.rbp
                            && g.rbp_offset == e.rbp_offset))
            });
            if matches {
                ok += 1;
            } else if shown < 30 {
                shown += 1;
                eprintln!(
                    "mismatch in {}: readelf {e:?}, ours {got:?}",
                    path.display()
                );
            }
        }
        (ok, expected.len())
    }

    fn read(path: &str) -> Vec<u8> {
        std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
    }

    /// Strict ordering and the None terminator hold for every table we build.
    fn check_invariants(t: &UnwindTable) {
        assert!(
            t.rows.windows(2).all(|w| w[0].pc < w[1].pc),
            "pcs not increasing"
        );
        assert!(
            t.rows.windows(2).all(|w| w[0].key() != w[1].key()),
            "unmerged rows"
        );
        if let Some(last) = t.rows.last() {
            assert_eq!(last.cfa_rule(), CfaRule::None);
        }
    }

    #[test]
    fn row_layout_and_accessors() {
        assert_eq!(size_of::<UnwindRow>(), 12);
        assert_eq!(align_of::<UnwindRow>(), 4);
        let r = UnwindRow::new(0x1234, CfaRule::Rbp, 16, RbpRule::AtCfa, -2);
        assert_eq!(r.cfa_rule(), CfaRule::Rbp);
        assert_eq!(r.rbp_rule(), RbpRule::AtCfa);
        assert_eq!(r.rule, 0x12);
        let rows = [
            UnwindRow::new(10, CfaRule::Rsp, 8, RbpRule::Same, 0),
            UnwindRow::new(20, CfaRule::None, 0, RbpRule::Same, 0),
        ];
        assert!(lookup(&rows, 9).is_none());
        assert_eq!(lookup(&rows, 10).map(|r| r.pc), Some(10));
        assert_eq!(lookup(&rows, 19).map(|r| r.pc), Some(10));
        assert_eq!(lookup(&rows, 20).map(|r| r.pc), Some(20));
        assert!(lookup(&[], 5).is_none());
        assert_eq!(
            debug_file_path(&[0xab, 0xcd, 0x01]),
            PathBuf::from("/usr/lib/debug/.build-id/ab/cd01.debug")
        );
        assert_eq!(
            classify_cfa_expression(&[0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22]),
            ExprClass::Plt(11)
        );
        assert_eq!(
            classify_cfa_expression(&[0x77, 0xa0, 0x01, 0x06]),
            ExprClass::Signal
        );
        assert_eq!(classify_cfa_expression(&[0x77, 0xa0]), ExprClass::Other);
    }

    #[test]
    fn libc_table() {
        let data = read(LIBC);
        let t = build_table(&data).expect("libc table");
        check_invariants(&t);
        assert_eq!(t.source, TableSource::EhFrame);
        assert!(t.rows.len() > 5000, "only {} rows", t.rows.len());
        assert_eq!(t.stats.bad_fdes, 0);
        let count = |rule: CfaRule| t.rows.iter().filter(|r| r.cfa_rule() == rule).count();
        assert!(count(CfaRule::Plt) > 0, "no PLT rows");
        // binutils' lazy .plt uses threshold 11 (10 for the IBT-enabled layout).
        assert!(
            t.rows
                .iter()
                .filter(|r| r.cfa_rule() == CfaRule::Plt)
                .all(|r| matches!(r.cfa_offset, 10 | 11))
        );
        assert!(count(CfaRule::End) > 0, "no End rows");
        assert!(count(CfaRule::Signal) > 0, "no Signal rows (__restore_rt)");
        eprintln!(
            "libc: rows by rule: none {} rsp {} rbp {} plt {} signal {} end {} unsupported {}; stats {:?}",
            count(CfaRule::None),
            count(CfaRule::Rsp),
            count(CfaRule::Rbp),
            count(CfaRule::Plt),
            count(CfaRule::Signal),
            count(CfaRule::End),
            count(CfaRule::Unsupported),
            t.stats
        );
        let info = elf_info(&data).expect("libc elf info");
        assert!(info.build_id.is_some());
        assert!(info.loads.iter().any(|l| l.executable));
        assert!(info.loads.iter().all(|l| l.memsz >= l.filesz));
    }

    #[test]
    fn readelf_agreement() {
        for path in [LIBC, PYTHON] {
            if !Path::new(path).exists() {
                eprintln!("skipping {path}: absent");
                continue;
            }
            let t = build_table(&read(path)).expect("table");
            check_invariants(&t);
            let (ok, total) = agreement(Path::new(path), &t.rows);
            let pct = 100.0 * ok as f64 / total.max(1) as f64;
            eprintln!("readelf agreement {path}: {ok}/{total} = {pct:.3}%");
            assert!(total > 1000, "readelf gave only {total} rows for {path}");
            assert!(pct >= 99.9, "agreement {pct:.3}% for {path}");
        }
    }

    fn symbol_address(binary: &Path, name: &str) -> u32 {
        let out = Command::new("nm").arg(binary).output().expect("run nm");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == name).then(|| u32::from_str_radix(f[0], 16).ok())?
            })
            .unwrap_or_else(|| panic!("symbol {name} not found"))
    }

    const TEST_C: &str = r#"
#include <alloca.h>
#include <string.h>
__attribute__((noinline)) int consume(volatile char *p, int n) { return p[n / 2]; }
__attribute__((noinline)) int big_frame(int n) {
    volatile char buf[40000];
    memset((char *)buf, n, sizeof buf);
    return consume(buf, n) + buf[n & 1023];
}
__attribute__((noinline)) int with_alloca(int n) {
    char *p = alloca(n);
    memset(p, 1, n);
    return consume(p, n) + 1;
}
int main(int argc, char **argv) { (void)argv; return big_frame(argc) + with_alloca(argc * 100); }
"#;

    #[test]
    fn gcc_program() {
        let dir = temp_dir("gcc");
        let src = dir.join("t.c");
        std::fs::write(&src, TEST_C).expect("write C");
        let bin = dir.join("t");
        let status = Command::new("gcc")
            .args([
                "-O2",
                "-fomit-frame-pointer",
                "-fasynchronous-unwind-tables",
                "-o",
            ])
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("run gcc");
        assert!(status.success());
        let t = build_table(&read(bin.to_str().expect("utf8 path"))).expect("table");
        check_invariants(&t);
        assert_eq!(t.source, TableSource::EhFrame);

        // Every readelf row of the little program must agree.
        let (ok, total) = agreement(&bin, &t.rows);
        assert_eq!(ok, total, "gcc program disagreement");

        // Inside big_frame, after the sub, the CFA is rsp plus the 40000-byte frame.
        let big = symbol_address(&bin, "big_frame");
        let big_rows: Vec<_> = t
            .rows
            .iter()
            .filter(|r| r.pc > big && r.pc < big + 64)
            .collect();
        assert!(
            big_rows
                .iter()
                .any(|r| r.cfa_rule() == CfaRule::Rsp && r.cfa_offset > 40000),
            "no large rsp frame in big_frame: {big_rows:?}"
        );
        assert_eq!(
            lookup(&t.rows, big).map(|r| (r.cfa_rule(), r.cfa_offset)),
            Some((CfaRule::Rsp, 8))
        );

        // with_alloca needs rbp as frame base despite -fomit-frame-pointer.
        let wa = symbol_address(&bin, "with_alloca");
        let wa_rows: Vec<_> = t
            .rows
            .iter()
            .filter(|r| r.pc > wa && r.pc < wa + 64)
            .collect();
        assert!(
            wa_rows.iter().any(|r| r.cfa_rule() == CfaRule::Rbp
                && r.cfa_offset == 16
                && r.rbp_rule() == RbpRule::AtCfa
                && r.rbp_offset == -2),
            "no rbp-based CFA in with_alloca: {wa_rows:?}"
        );

        // .debug_frame path: a program without .eh_frame but with -g, then its CFI moved
        // into a separate debug file.
        let dbin = dir.join("t_dbg");
        let status = Command::new("gcc")
            .args([
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-fno-asynchronous-unwind-tables",
                "-fno-unwind-tables",
                "-o",
            ])
            .arg(&dbin)
            .arg(&src)
            .status()
            .expect("run gcc");
        assert!(status.success());
        let stripped = dir.join("t_dbg_stripped");
        let debug = dir.join("t_dbg.debug");
        let objcopy = |args: &[&str], input: &Path, output: &Path| {
            // --only-keep-debug warns about unallocatable notes; only the status matters.
            let s = Command::new("objcopy")
                .args(args)
                .arg(input)
                .arg(output)
                .output()
                .expect("objcopy");
            assert!(s.status.success(), "objcopy {args:?} failed");
        };
        objcopy(
            &[
                "--remove-section",
                ".eh_frame",
                "--remove-section",
                ".eh_frame_hdr",
            ],
            &dbin,
            &dbin.with_extension("noeh"),
        );
        let noeh = dbin.with_extension("noeh");
        objcopy(&["--only-keep-debug"], &noeh, &debug);
        objcopy(&["--strip-debug"], &noeh, &stripped);
        let own = build_table(&std::fs::read(&noeh).expect("read")).expect("own debug_frame");
        assert_eq!(own.source, TableSource::DebugFrame);
        let wa = symbol_address(&noeh, "with_alloca");
        assert!(
            own.rows
                .iter()
                .any(|r| r.pc > wa && r.cfa_rule() == CfaRule::Rbp)
        );
        let main_only = std::fs::read(&stripped).expect("read");
        assert_eq!(
            build_table(&main_only).expect("no cfi").source,
            TableSource::None
        );
        let split = build_table_with_debug(&main_only, Some(&std::fs::read(&debug).expect("read")))
            .expect("split debug");
        assert_eq!(split.source, TableSource::DebugFrame);
        assert_eq!(split.rows, own.rows);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Deterministic xorshift64 so the corruption test needs no rand crate.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    #[test]
    fn hostile_input() {
        let data = read(LIBC);
        let (eh_off, eh_len) = {
            let file = ElfFile64::<object::LittleEndian>::parse(&*data).expect("parse");
            let s = file.section_by_name(".eh_frame").expect(".eh_frame");
            let (o, l) = s.file_range().expect("range");
            (o as usize, l as usize)
        };
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut outcomes = [0usize; 3]; // ok-with-bad, ok-clean, err
        // UNWIND_FUZZ_ITERS lets a developer run a longer soak without editing the test.
        let iters = std::env::var("UNWIND_FUZZ_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60);
        for i in 0..iters {
            let mut copy = data.clone();
            match i % 5 {
                0 => {
                    // A run of 0xff in the middle of .eh_frame: lengths become huge.
                    let start = eh_off + rng.below(eh_len);
                    let len = 1 + rng.below(256);
                    let end = (start + len).min(eh_off + eh_len);
                    copy[start..end].fill(0xff);
                }
                1 => {
                    // Random garbage over a window of .eh_frame.
                    let start = eh_off + rng.below(eh_len);
                    let end = (start + 1 + rng.below(4096)).min(eh_off + eh_len);
                    for b in &mut copy[start..end] {
                        *b = rng.next() as u8;
                    }
                }
                2 => {
                    // Sprinkled single-byte flips hitting instructions, encodings, lengths.
                    for _ in 0..20 {
                        let at = eh_off + rng.below(eh_len);
                        copy[at] = rng.next() as u8;
                    }
                }
                3 => {
                    // Damaged section headers: bogus offsets, sizes, flags (compression).
                    let shoff = usize::try_from(u64::from_le_bytes(
                        data[0x28..0x30].try_into().expect("8 bytes"),
                    ))
                    .expect("shoff");
                    for _ in 0..4 {
                        let at = shoff + rng.below(data.len() - shoff);
                        copy[at] = rng.next() as u8;
                    }
                }
                _ => {
                    // Whole-file truncation, often mid-.eh_frame or before the section headers.
                    copy.truncate(rng.below(data.len()));
                }
            }
            match build_table(&copy) {
                Ok(t) => {
                    check_invariants(&t);
                    outcomes[if t.stats.bad_fdes > 0 { 0 } else { 1 }] += 1;
                }
                Err(e) => {
                    let _ = e.to_string();
                    outcomes[2] += 1;
                }
            }
        }
        // Also a completely non-ELF and a wrong-class header.
        assert!(matches!(
            build_table(b"hello"),
            Err(TableError::UnsupportedElf(_))
        ));
        let mut class32 = data[..64].to_vec();
        class32[EI_CLASS] = elf::ELFCLASS32;
        assert!(matches!(
            build_table(&class32),
            Err(TableError::UnsupportedElf(_))
        ));
        eprintln!(
            "hostile outcomes: ok+bad_fdes {}, ok clean {}, err {}",
            outcomes[0], outcomes[1], outcomes[2]
        );
        assert!(outcomes[0] > 0, "no corruption was detected as bad FDEs");
    }

    /// The high-water mark of this process's resident memory.
    fn vm_hwm_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }

    /// A file whose compressed `.debug_frame` (`compression` 1: zlib, 2:
    /// zstd) claims `claim` bytes and holds `data` after the header.
    fn compressed_cfi(compression: u32, claim: u64, data: &[u8]) -> Vec<u8> {
        use crate::fuzzing::{PROGBITS, Section, elf};
        let mut bytes = Vec::new();
        // Elf64_Chdr: ch_type, ch_reserved, ch_size, ch_addralign.
        bytes.extend_from_slice(&compression.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&claim.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(data);
        let mut frame = Section::new(".debug_frame", PROGBITS, &bytes);
        frame.flags = u64::from(elf::SHF_COMPRESSED);
        elf(&[frame])
    }

    /// A zstd `.debug_frame` of 16 KiB that decompresses to 512 MiB (RLE
    /// blocks: 4 bytes for 128 KiB) but claims 1 MiB: object read such a
    /// stream to its end before comparing it with the claim, 512 MiB
    /// resident for a file any user can map. Found writing the fuzz targets.
    #[test]
    fn zstd_cfi_is_read_no_further_than_its_claim() {
        let blocks = 4096u32;
        // Frame header: magic, no content size, a 128 KiB window.
        let mut zstd = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
        for i in 0..blocks {
            // Block header: last-block bit, type 1 (RLE), size; then the byte.
            let header = u32::from(i == blocks - 1) | (1 << 1) | ((128 << 10) << 3);
            zstd.extend_from_slice(&header.to_le_bytes()[..3]);
            zstd.push(0);
        }
        let file = compressed_cfi(2, 1 << 20, &zstd);
        let before = vm_hwm_kib();
        let err = build_table(&file).expect_err("a stream longer than its claim");
        let grown_mib = vm_hwm_kib().saturating_sub(before) >> 10;
        assert!(
            matches!(err, TableError::Decompressed { .. }),
            "not refused as over its claim: {err}"
        );
        assert!(
            grown_mib < 128,
            "{grown_mib} MiB resident for {} bytes of file",
            file.len()
        );
        // The claim itself is bounded: no 4 GiB reserve for 100 bytes.
        let err = build_table(&compressed_cfi(1, 4 << 30, &[0x78, 0x9c]))
            .expect_err("a claim over the bound");
        assert!(err.to_string().contains("over the"), "{err}");
    }

    #[test]
    fn no_cfi() {
        let dir = temp_dir("nocfi");
        let out = dir.join("libc-stripped.so");
        let status = Command::new("objcopy")
            .args([
                "--remove-section",
                ".eh_frame",
                "--remove-section",
                ".eh_frame_hdr",
            ])
            .arg(LIBC)
            .arg(&out)
            .status()
            .expect("objcopy");
        assert!(status.success());
        let t = build_table(&std::fs::read(&out).expect("read")).expect("table");
        assert_eq!(t.source, TableSource::None);
        assert!(t.rows.is_empty());
        assert_eq!(t.stats.fdes, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn report_sizes() {
        let jvm = Command::new("find")
            .args(["/usr/lib/jvm", "-name", "libjvm.so"])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let mut paths = vec![LIBC.to_string(), PYTHON.to_string()];
        paths.extend(jvm);
        for path in paths {
            let Ok(data) = std::fs::read(&path) else {
                eprintln!("report_sizes: {path} absent, skipped");
                continue;
            };
            let t = build_table(&data).expect("table");
            check_invariants(&t);
            eprintln!(
                "report_sizes: {path}: {} rows, {} bytes, build {:.1} ms, source {:?}, fdes {}, bad_fdes {}, unsupported_rows {}, overlap_rows {}, high_pc_rows {}",
                t.rows.len(),
                t.rows.len() * size_of::<UnwindRow>(),
                t.stats.build_time.as_secs_f64() * 1e3,
                t.source,
                t.stats.fdes,
                t.stats.bad_fdes,
                t.stats.unsupported_rows,
                t.stats.overlap_rows,
                t.stats.high_pc_rows,
            );
            let odd: Vec<String> = t
                .rows
                .iter()
                .filter(|r| {
                    r.cfa_rule() == CfaRule::Unsupported || r.rbp_rule() == RbpRule::Unsupported
                })
                .take(10)
                .map(|r| format!("{:#x} {:?}/{:?}", r.pc, r.cfa_rule(), r.rbp_rule()))
                .collect();
            eprintln!("report_sizes:   unsupported rows: {odd:?}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use std::sync::OnceLock;

        /// libc's bytes and the file range of its `.eh_frame`, read once.
        fn libc() -> &'static (Vec<u8>, usize, usize) {
            static LIBC_DATA: OnceLock<(Vec<u8>, usize, usize)> = OnceLock::new();
            LIBC_DATA.get_or_init(|| {
                let data = read(LIBC);
                let file = ElfFile64::<object::LittleEndian>::parse(&*data).expect("parse");
                let s = file.section_by_name(".eh_frame").expect(".eh_frame");
                let (o, l) = s.file_range().expect("range");
                let (o, l) = (o as usize, l as usize);
                drop(file);
                (data, o, l)
            })
        }

        /// One damage done to the file.
        #[derive(Debug, Clone)]
        enum Corruption {
            /// XOR a byte of `.eh_frame` with a non-zero mask.
            EhFrameFlip(prop::sample::Index, u8),
            /// Set a run of `.eh_frame` to one byte (0xff makes huge lengths).
            EhFrameFill(prop::sample::Index, u8, u8),
            /// XOR a byte anywhere: headers, section and program headers, code.
            AnyFlip(prop::sample::Index, u8),
            /// XOR a byte of the first 4 KiB, where the ELF and program
            /// headers are.
            HeaderFlip(prop::sample::Index, u8),
            /// Cut the file.
            Truncate(prop::sample::Index),
        }

        fn corruption() -> impl Strategy<Value = Corruption> {
            let idx = any::<prop::sample::Index>;
            let mask = 1u8..=255;
            prop_oneof![
                4 => (idx(), mask.clone()).prop_map(|(i, m)| Corruption::EhFrameFlip(i, m)),
                1 => (idx(), any::<u8>(), any::<u8>())
                    .prop_map(|(i, b, n)| Corruption::EhFrameFill(i, b, n)),
                2 => (idx(), mask.clone()).prop_map(|(i, m)| Corruption::AnyFlip(i, m)),
                1 => (idx(), mask).prop_map(|(i, m)| Corruption::HeaderFlip(i, m)),
                1 => idx().prop_map(Corruption::Truncate),
            ]
        }

        fn apply(data: &mut Vec<u8>, eh_off: usize, eh_len: usize, c: &Corruption) {
            let len = data.len();
            match *c {
                Corruption::EhFrameFlip(ref i, m) => {
                    if let Some(b) = data.get_mut(eh_off + i.index(eh_len)) {
                        *b ^= m;
                    }
                }
                Corruption::EhFrameFill(ref i, b, n) => {
                    let start = (eh_off + i.index(eh_len)).min(len);
                    let end = (start + 1 + n as usize).min(eh_off + eh_len).min(len);
                    data[start..end].fill(b);
                }
                Corruption::AnyFlip(ref i, m) => data[i.index(len)] ^= m,
                Corruption::HeaderFlip(ref i, m) => data[i.index(len.min(4096))] ^= m,
                Corruption::Truncate(ref i) => data.truncate(i.index(len + 1)),
            }
        }

        /// Corrupt libc: the builder and the ELF inspector answer without
        /// panicking, and every table they build keeps the invariants (rows
        /// by strictly increasing pc, ending with a None row).
        #[test]
        fn corrupt_libc_never_panics() {
            use proptest::test_runner::{Config, TestRunner};
            use std::cell::Cell;
            let (data, eh_off, eh_len) = libc();
            let outcomes = [Cell::new(0usize), Cell::new(0), Cell::new(0)]; // ok+bad, ok, err
            let mut runner = TestRunner::new(Config {
                cases: 64,
                failure_persistence: None,
                ..Config::default()
            });
            let result = runner.run(&prop::collection::vec(corruption(), 1..8), |damage| {
                let mut copy = data.clone();
                for c in &damage {
                    if copy.is_empty() {
                        break;
                    }
                    apply(&mut copy, *eh_off, *eh_len, c);
                }
                match build_table(&copy) {
                    Ok(t) => {
                        check_invariants(&t);
                        prop_assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
                        if let Some(last) = t.rows.last() {
                            prop_assert_eq!(last.cfa_rule(), CfaRule::None);
                        }
                        for r in t.rows.iter().step_by(97) {
                            prop_assert_eq!(lookup(&t.rows, r.pc), Some(r));
                        }
                        let k = usize::from(t.stats.bad_fdes == 0);
                        outcomes[k].set(outcomes[k].get() + 1);
                    }
                    Err(e) => {
                        prop_assert!(!e.to_string().is_empty());
                        outcomes[2].set(outcomes[2].get() + 1);
                    }
                }
                match elf_info(&copy) {
                    Ok(info) => {
                        if let Some(id) = &info.build_id {
                            let _ = debug_file_path(id);
                        }
                    }
                    Err(e) => prop_assert!(!e.to_string().is_empty()),
                }
                Ok(())
            });
            if let Err(e) = result {
                panic!("{e}");
            }
            let [bad, clean, err] = outcomes.map(Cell::into_inner);
            eprintln!("corrupt libc outcomes: ok+bad_fdes {bad}, ok clean {clean}, err {err}");
            // Not every case may stop at the ELF headers: the CFI parser must be reached.
            assert!(bad + clean > 0, "every corrupted file was refused outright");
        }
    }
}
