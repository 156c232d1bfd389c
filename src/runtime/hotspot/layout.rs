//! What emberd needs of a HotSpot JVM's structures, taken from the JVM's
//! own tables ([`VmStructs`]): offsets, sizes and the shape of the model
//! where releases differ (JDK 17 keeps a blob's code start as an address,
//! JDK 25 as an offset; JDK 25's blobs carry their kind).
//!
//! A field this module needs and the tables lack makes the JVM
//! unsupported, with its name in the reason: a new JDK that moves a field
//! is read; one that drops or renames it is reported, never guessed at.

use thiserror::Error;

use super::vmstructs::VmStructs;

/// Why a JVM's tables do not give what emberd needs.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// A field, type or constant is not in the tables.
    #[error("the JVM's structure tables have no {0}")]
    Missing(String),
}

/// Where a blob's code starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeStart {
    /// An address, at this offset in the blob (`CodeBlob::_code_begin`,
    /// JDK 9-22).
    Address(u64),
    /// A 32-bit offset from the blob's start, kept at this offset
    /// (`CodeBlob::_code_offset`, JDK 23 on and JDK 8).
    Offset(u64),
}

/// Where a compiled method keeps its debug information (the scopes of
/// its inlined methods) and its metadata table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scopes {
    /// In the blob (JDK 9-22): PcDescs from `this + _scopes_pcs_offset`
    /// to `this + _dependencies_offset`, scopes at the absolute
    /// `_scopes_data_begin`, metadata at `this + _metadata_offset` (each
    /// field's offset here).
    InBlob {
        /// `nmethod::_scopes_pcs_offset` (int).
        pcs: u64,
        /// `nmethod::_dependencies_offset` (int).
        pcs_end: u64,
        /// `CompiledMethod::_scopes_data_begin` (address).
        data: u64,
        /// `nmethod::_metadata_offset` (int).
        metadata: u64,
    },
    /// Out of the code cache (JDK 23 on): PcDescs from `_immutable_data +
    /// _scopes_pcs_offset` to `_immutable_data + _scopes_data_offset`,
    /// where the scopes start; metadata at `_mutable_data +
    /// _relocation_size`.
    Apart {
        /// `nmethod::_immutable_data` (address).
        immutable: u64,
        /// `nmethod::_scopes_pcs_offset` (int).
        pcs: u64,
        /// `nmethod::_scopes_data_offset` (int).
        data: u64,
        /// `CodeBlob::_mutable_data` (address).
        mutable: u64,
        /// `CodeBlob::_relocation_size` (int).
        relocation_size: u64,
    },
}

/// A field's place and width (some narrowed between releases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset in its structure.
    pub offset: u64,
    /// Bytes it takes: 1, 2, 4 or 8.
    pub width: u8,
}

/// The offsets and sizes of one JVM's structures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotSpotLayout {
    /// `CodeCache::_heaps`: address of the `GrowableArray<CodeHeap*>*`.
    pub code_heaps: u64,
    /// `GrowableArrayBase::_len` and the array's `_data` pointer.
    pub array_len: u64,
    /// See `array_len`.
    pub array_data: u64,
    /// `CodeHeap::_memory` and `_segmap` (each a `VirtualSpace`).
    pub heap_memory: u64,
    /// See `heap_memory`.
    pub heap_segmap: u64,
    /// `CodeHeap::_log2_segment_size` (int).
    pub heap_log2_segment: u64,
    /// `CodeCache::_low_bound` and `_high_bound`: addresses of the bounds
    /// of the code cache's reserved space.
    pub code_low_bound: u64,
    /// See `code_low_bound`.
    pub code_high_bound: u64,
    /// `VirtualSpace::_high_boundary`: the reserved end.
    pub space_high_boundary: u64,
    /// `CodeBlob::_kind` (u1), where the JVM keeps one (JDK 23 on), and
    /// `CodeBlobKind::Nmethod`.
    pub blob_kind: Option<u64>,
    /// See `blob_kind`.
    pub kind_nmethod: u8,
    /// `VirtualSpace::_low` and `_high`: the committed part.
    pub space_low: u64,
    /// See `space_low`.
    pub space_high: u64,
    /// `sizeof(HeapBlock)`: a blob starts this far into its block.
    pub heap_block: u64,
    /// `HeapBlock::Header::_length` (segments; 64 bits until JDK 23) and
    /// `_used` (a bool).
    pub block_length: Slot,
    /// See `block_length`.
    pub block_used: u64,
    /// `CodeBlob::_name` (const char*).
    pub blob_name: u64,
    /// `CodeBlob::_size` (int: bytes of the blob).
    pub blob_size: u64,
    /// `CodeBlob::_frame_size` (int: words).
    pub blob_frame_size: u64,
    /// `CodeBlob::_frame_complete_offset` (from the code's start).
    pub blob_frame_complete: Slot,
    /// Where the code starts.
    pub code_start: CodeStart,
    /// `nmethod::_method` (Method*).
    pub nmethod_method: u64,
    /// `nmethod::_compile_id` (int).
    pub nmethod_compile_id: u64,
    /// Where its debug information is.
    pub scopes: Scopes,
    /// `AbstractInterpreter::_code`: address of the interpreter's
    /// `StubQueue*`.
    pub interpreter_code: u64,
    /// `StubQueue::_stub_buffer` (address) and `_buffer_limit` (int).
    pub queue_buffer: u64,
    /// See `queue_buffer`.
    pub queue_limit: u64,
    /// `StubRoutines::_call_stub_return_address`: address of the address
    /// Java code returns to in the call stub.
    pub call_stub_return: u64,
    /// Interpreter frame: the Method* and the bytecode pointer, in words
    /// from the frame pointer.
    pub frame_method: i64,
    /// See `frame_method`.
    pub frame_bcp: i64,
    /// `Method::_constMethod`.
    pub method_const: u64,
    /// `ConstMethod::_constants`, `_code_size` (u2), `_name_index` (u2),
    /// `_signature_index` (u2), its flags and `sizeof(ConstMethod)` (the
    /// bytecodes follow it).
    pub const_constants: u64,
    /// See `const_constants`.
    pub const_code_size: u64,
    /// See `const_constants`.
    pub const_name_index: u64,
    /// See `const_constants`.
    pub const_signature_index: u64,
    /// See `const_constants`.
    pub const_flags: Slot,
    /// See `const_constants`.
    pub const_size: u64,
    /// The flag bit: the method has a line number table.
    pub has_line_numbers: u64,
    /// `ConstantPool::_pool_holder`, `_source_file_name_index` (u2) and
    /// `sizeof(ConstantPool)` (its entries follow it).
    pub pool_holder: u64,
    /// See `pool_holder`.
    pub pool_source_file: u64,
    /// See `pool_holder`.
    pub pool_size: u64,
    /// `Klass::_name` (Symbol*).
    pub klass_name: u64,
    /// `Symbol::_length` (u2) and `_body`.
    pub symbol_length: u64,
    /// See `symbol_length`.
    pub symbol_body: u64,
}

impl HotSpotLayout {
    /// The layout of the JVM whose tables are `t`.
    pub fn from_tables(t: &VmStructs) -> Result<HotSpotLayout, LayoutError> {
        let missing = |n: &str| LayoutError::Missing(n.to_owned());
        let off = |n: &str| t.offset(n).ok_or_else(|| missing(n));
        let addr = |n: &str| t.address(n).ok_or_else(|| missing(n));
        let size = |n: &str| t.types.get(n).copied().ok_or_else(|| missing(n));
        let constant = |n: &str| t.constants.get(n).copied().ok_or_else(|| missing(n));
        let code_start = match (
            t.offset("CodeBlob::_code_begin"),
            t.offset("CodeBlob::_code_offset"),
        ) {
            (Some(o), _) => CodeStart::Address(o),
            (None, Some(o)) => CodeStart::Offset(o),
            (None, None) => return Err(missing("CodeBlob::_code_begin or _code_offset")),
        };
        // JDK 23 narrowed the frame-complete offset to 16 bits, with the
        // blob's kind beside it.
        let blob_frame_complete = Slot {
            offset: off("CodeBlob::_frame_complete_offset")?,
            width: if t.offset("CodeBlob::_kind").is_some() {
                2
            } else {
                4
            },
        };
        // JDK 21 moved ConstMethod's flags into a 32-bit `_flags._flags`.
        let (const_flags, has_line_numbers) = match t.offset("ConstMethod::_flags._flags") {
            Some(o) => (
                Slot {
                    offset: o,
                    width: 4,
                },
                constant("ConstMethodFlags::_misc_has_linenumber_table")?,
            ),
            None => (
                Slot {
                    offset: off("ConstMethod::_flags")?,
                    width: 2,
                },
                constant("ConstMethod::_has_linenumber_table")?,
            ),
        };
        let last_sp = constant("frame::interpreter_frame_last_sp_offset")?;
        Ok(HotSpotLayout {
            code_heaps: addr("CodeCache::_heaps")?,
            array_len: off("GrowableArrayBase::_len")?,
            // `_data` follows the base's two ints; JDK 17 names it.
            array_data: t
                .offset("GrowableArray<int>::_data")
                .or_else(|| t.types.get("GrowableArrayBase").copied())
                .unwrap_or(8),
            heap_memory: off("CodeHeap::_memory")?,
            heap_segmap: off("CodeHeap::_segmap")?,
            heap_log2_segment: off("CodeHeap::_log2_segment_size")?,
            code_low_bound: addr("CodeCache::_low_bound")?,
            code_high_bound: addr("CodeCache::_high_bound")?,
            space_high_boundary: off("VirtualSpace::_high_boundary")?,
            blob_kind: t.offset("CodeBlob::_kind"),
            kind_nmethod: t
                .constants
                .get("CodeBlobKind::Nmethod")
                .map_or(0, |&k| k as u8),
            space_low: off("VirtualSpace::_low")?,
            space_high: off("VirtualSpace::_high")?,
            heap_block: size("HeapBlock")?,
            block_length: Slot {
                offset: off("HeapBlock::Header::_length")?,
                width: if size("HeapBlock::Header")? >= 16 {
                    8
                } else {
                    4
                },
            },
            block_used: off("HeapBlock::Header::_used")?,
            blob_name: off("CodeBlob::_name")?,
            blob_size: off("CodeBlob::_size")?,
            blob_frame_size: off("CodeBlob::_frame_size")?,
            blob_frame_complete,
            code_start,
            nmethod_method: t
                .offset("nmethod::_method")
                .or_else(|| t.offset("CompiledMethod::_method"))
                .ok_or_else(|| missing("nmethod::_method"))?,
            nmethod_compile_id: off("nmethod::_compile_id")?,
            scopes: match t.offset("nmethod::_immutable_data") {
                Some(immutable) => Scopes::Apart {
                    immutable,
                    pcs: off("nmethod::_scopes_pcs_offset")?,
                    data: off("nmethod::_scopes_data_offset")?,
                    mutable: off("CodeBlob::_mutable_data")?,
                    relocation_size: off("CodeBlob::_relocation_size")?,
                },
                None => Scopes::InBlob {
                    pcs: off("nmethod::_scopes_pcs_offset")?,
                    pcs_end: off("nmethod::_dependencies_offset")?,
                    data: off("CompiledMethod::_scopes_data_begin")?,
                    metadata: off("nmethod::_metadata_offset")?,
                },
            },
            interpreter_code: addr("AbstractInterpreter::_code")?,
            queue_buffer: off("StubQueue::_stub_buffer")?,
            queue_limit: off("StubQueue::_buffer_limit")?,
            call_stub_return: addr("StubRoutines::_call_stub_return_address")?,
            // x86_64's interpreter frame below the last sp: the Method*,
            // the mirror, the mdp, the cache, the locals, the bcp
            // (frame_x86.hpp; only the first two are exported).
            frame_method: last_sp - 1,
            frame_bcp: last_sp - 6,
            method_const: off("Method::_constMethod")?,
            const_constants: off("ConstMethod::_constants")?,
            const_code_size: off("ConstMethod::_code_size")?,
            const_name_index: off("ConstMethod::_name_index")?,
            const_signature_index: off("ConstMethod::_signature_index")?,
            const_flags,
            const_size: size("ConstMethod")?,
            has_line_numbers: has_line_numbers as u64,
            pool_holder: off("ConstantPool::_pool_holder")?,
            pool_source_file: off("ConstantPool::_source_file_name_index")?,
            pool_size: size("ConstantPool")?,
            klass_name: off("Klass::_name")?,
            symbol_length: off("Symbol::_length")?,
            symbol_body: t
                .offset("Symbol::_body")
                .or_else(|| t.offset("Symbol::_body[0]"))
                .ok_or_else(|| missing("Symbol::_body"))?,
        })
    }
}
