//! What emberd needs of a V8 build, from its postmortem metadata: the
//! `v8dbg_*` constants node exports for debuggers (frame offsets, object
//! field offsets, instance types, tagging), read from the binary's file.
//!
//! The metadata's names carry their field's C++ type as a suffix, which
//! changes between releases (`..._name_or_scope_info__Object` on Node 20,
//! `__Tagged_Object_` on 22, `__Tagged_NameOrScopeInfoT_` on 24), so
//! fields are matched by `v8dbg_class_<Class>__<field>__` and the type
//! ignored. Measured on Node 18.20.8, 20.20.2, 22.23.3, 24.21.0 and
//! 26.12.1 (docs/research/v8.md, section 10).

use thiserror::Error;

use super::lines::LinesLayout;

/// The `v8dbg_*` constants of one build: (name, value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Postmortem {
    values: Vec<(String, i64)>,
}

impl Postmortem {
    /// From (name, value) pairs, names with their `v8dbg_` prefix.
    pub fn new(values: Vec<(String, i64)>) -> Self {
        Self { values }
    }

    /// How many constants it holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The constant named exactly `name`.
    pub fn exact(&self, name: &str) -> Option<i64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The first constant whose name starts with `prefix`.
    pub fn prefixed(&self, prefix: &str) -> Option<i64> {
        self.values
            .iter()
            .find(|(n, _)| n.starts_with(prefix))
            .map(|(_, v)| *v)
    }
}

/// Why a node build cannot be read.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum LayoutError {
    /// A constant emberd needs is missing from the metadata.
    #[error("V8's postmortem metadata lacks {0} (a node release emberd does not know)")]
    Missing(&'static str),
    /// A constant has a value emberd cannot use.
    #[error("V8's postmortem metadata gives {name} = {value}: {why}")]
    Unusable {
        /// Its name.
        name: &'static str,
        /// Its value.
        value: i64,
        /// Why it cannot be used.
        why: &'static str,
    },
}

/// Byte offsets, tags and instance types of one V8 build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V8Layout {
    /// A JavaScript frame's JSFunction at fp + this.
    pub fp_function: i8,
    /// Its context, or a typed frame's marker.
    pub fp_context: i8,
    /// An interpreted frame's bytecode offset.
    pub fp_bytecode_offset: i8,
    /// An interpreted or baseline frame's BytecodeArray.
    pub fp_bytecode_array: i8,
    /// `BYTECODE_ARRAY_TYPE`.
    pub type_bytecode_array: u16,
    /// `HeapObject::map`.
    pub object_map: u16,
    /// `Map::instance_type` (u16).
    pub map_instance_type: u16,
    /// `JSFunction::shared`.
    pub function_shared: u16,
    /// `SharedFunctionInfo::name_or_scope_info`.
    pub shared_name: u16,
    /// `SharedFunctionInfo::script_or_debug_info` (`script` from V8 12).
    pub shared_script: u16,
    /// `Script::name`.
    pub script_name: u16,
    /// JSFunction's instance types (its subclasses form a range).
    pub type_function: (u16, u16),
    /// `SHARED_FUNCTION_INFO_TYPE`.
    pub type_shared: u16,
    /// `SCRIPT_TYPE`.
    pub type_script: u16,
    /// `SCOPE_INFO_TYPE`.
    pub type_scope_info: u16,
    /// Instance types below this are strings.
    pub first_nonstring: u16,
    /// Strings: `String::length` (i32).
    pub string_length: u16,
    /// Characters of a sequential one-byte string.
    pub seq_one_chars: u16,
    /// Characters of a sequential two-byte string.
    pub seq_two_chars: u16,
    /// `ConsString::first` and `second`.
    pub cons: (u16, u16),
    /// `ThinString::actual`.
    pub thin_actual: u16,
    /// Instance-type bits of a string's representation, and its encoding.
    pub representation_mask: u16,
    /// See [`V8Layout::representation_mask`].
    pub encoding_mask: u16,
    /// The encoding bits of a one-byte string.
    pub one_byte_tag: u16,
    /// Representation tags: cons and thin (sequential is 0).
    pub cons_tag: u16,
    /// See [`V8Layout::cons_tag`].
    pub thin_tag: u16,
    /// ScopeInfo: slot of the context-local count, and of the first
    /// variable-length part.
    pub scope_context_locals: u16,
    /// See [`V8Layout::scope_context_locals`].
    pub scope_first_vars: u16,
    /// Where scripts keep their sources and line ends; `None` when the
    /// metadata does not say (frames then have no line).
    pub lines: Option<LinesLayout>,
    /// Where optimized code keeps its inlined functions and positions;
    /// `None` when the metadata does not say (its frames are then named
    /// by function only).
    pub code: Option<CodeLayout>,
}

/// What naming a frame of optimized code (TurboFan, Maglev) needs: the
/// object whose instructions a pc is in, its Code, and the Code's
/// deoptimization data (the functions inlined into it, where they were
/// called) and source position table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLayout {
    /// Instance type of the object holding instructions: an
    /// InstructionStream (V8 11 on), a Code before.
    pub stream_type: u16,
    /// Bytes from that object's start to its first instruction.
    pub stream_header: u16,
    /// The field of an InstructionStream holding its Code; `None` when the
    /// stream is the Code (V8 10, Node 18).
    pub stream_code: Option<u16>,
    /// `CODE_TYPE`.
    pub type_code: u16,
    /// `Code::instruction_stream`, where exported: must name the stream.
    pub code_stream: Option<u16>,
    /// `Code::instruction_start`, where exported: must be the stream's.
    pub code_start: Option<u16>,
    /// `Code::instruction_size` (i32), where exported: a pc past it is not
    /// the code's.
    pub code_size: Option<u16>,
    /// `Code::deoptimization_data_or_interpreter_data`.
    pub code_deopt: u16,
    /// `Code::source_position_table`.
    pub code_positions: u16,
    /// Indices in the deoptimization data: the count of inlined
    /// functions, the literals (inlined functions first), the code's own
    /// function (or its wrapper) and the inlining positions.
    pub deopt_inlined_count: u16,
    /// See [`CodeLayout::deopt_inlined_count`].
    pub deopt_literals: u16,
    /// See [`CodeLayout::deopt_inlined_count`].
    pub deopt_shared: u16,
    /// See [`CodeLayout::deopt_inlined_count`].
    pub deopt_positions: u16,
    /// `SharedFunctionInfoWrapper::shared_info` where the deoptimization
    /// data holds a wrapper (V8 13 on), `None` where the function itself.
    pub wrapper_shared: Option<u16>,
    /// `FixedArrayBase::length` (a SMI); elements and bytes follow it.
    pub array_length: u16,
    /// Instance types of fixed arrays (plain, trusted, protected, weak).
    pub type_arrays: Vec<u16>,
    /// Instance types of byte arrays (plain, trusted).
    pub type_bytes: Vec<u16>,
}

/// Field of an InstructionStream holding its Code: the first after the
/// map (`InstructionStream::kCodeOffset`, V8 11 to 14; not in the metadata;
/// checked by the Code's type and, where exported, its back pointer).
const STREAM_CODE: u16 = 8;

impl CodeLayout {
    /// The code layout `pm` gives, or `None` when it lacks something.
    fn from_postmortem(pm: &Postmortem) -> Option<Self> {
        let small = |v: i64| u16::try_from(v).ok();
        let get = |name: &str| pm.prefixed(name).and_then(small);
        let type_code = get("v8dbg_type_Code__CODE_TYPE")?;
        let stream = get("v8dbg_type_InstructionStream__INSTRUCTION_STREAM_TYPE");
        let (stream_type, stream_header, stream_code) = match stream {
            Some(t) => (
                t,
                get("v8dbg_class_InstructionStream__instruction_start__")?,
                Some(STREAM_CODE),
            ),
            // V8 10: the Code holds its instructions, past its header.
            None => (
                type_code,
                get("v8dbg_class_Code__instruction_start__")?,
                None,
            ),
        };
        // V8 12 on leave the two fields out of the metadata; they come just
        // before the Code's wrapper (`code.h`: deoptimization data,
        // position table, wrapper). V8 10 has them after the relocation
        // info, as V8 11 exports them.
        let wrapper = get("v8dbg_class_Code__wrapper__");
        let code_deopt = get("v8dbg_class_Code__deoptimization_data__")
            .or(wrapper.map(|w| w.wrapping_sub(16)))
            .unwrap_or(16);
        let code_positions = get("v8dbg_class_Code__source_position_table__")
            .or(wrapper.map(|w| w.wrapping_sub(8)))
            .unwrap_or(24);
        let index = |name: &str, v10: u16| match pm.exact(name) {
            Some(v) => small(v),
            None => Some(v10),
        };
        let (deopt_shared, wrapper_shared) =
            match pm.exact("v8dbg_DeoptimizationDataWrappedSharedFunctionInfoIndex") {
                Some(i) => (
                    small(i)?,
                    Some(get("v8dbg_class_SharedFunctionInfoWrapper__shared_info__")?),
                ),
                None => (
                    index("v8dbg_DeoptimizationDataSharedFunctionInfoIndex", 6)?,
                    None,
                ),
            };
        let types = |names: &[&str]| -> Vec<u16> { names.iter().filter_map(|n| get(n)).collect() };
        let l = CodeLayout {
            stream_type,
            stream_header,
            stream_code,
            type_code,
            code_stream: stream.and(get("v8dbg_class_Code__instruction_stream__")),
            code_start: stream.and(get("v8dbg_class_Code__instruction_start__")),
            code_size: get("v8dbg_class_Code__instruction_size__"),
            code_deopt,
            code_positions,
            // V8 10's indices (Node 18 does not export them).
            deopt_inlined_count: index("v8dbg_DeoptimizationDataInlinedFunctionCountIndex", 1)?,
            deopt_literals: index("v8dbg_DeoptimizationDataLiteralArrayIndex", 2)?,
            deopt_shared,
            deopt_positions: index("v8dbg_DeoptimizationDataInliningPositionsIndex", 7)?,
            wrapper_shared,
            array_length: get("v8dbg_class_FixedArrayBase__length__")?,
            type_arrays: types(&[
                "v8dbg_type_FixedArray__FIXED_ARRAY_TYPE",
                "v8dbg_type_TrustedFixedArray__",
                "v8dbg_type_ProtectedFixedArray__",
                "v8dbg_type_WeakFixedArray__",
                "v8dbg_type_TrustedWeakFixedArray__",
                "v8dbg_type_ProtectedWeakFixedArray__",
            ]),
            type_bytes: types(&[
                "v8dbg_type_ByteArray__BYTE_ARRAY_TYPE",
                "v8dbg_type_TrustedByteArray__",
            ]),
        };
        // Fields beyond a few words are no Code's: a lying build gets no
        // inlined frames rather than reads anywhere.
        let fields = [
            l.code_deopt,
            l.code_positions,
            l.stream_header,
            l.array_length,
        ];
        (fields.iter().all(|&f| f < 256 && f % 8 == 0) && !l.type_arrays.is_empty()).then_some(l)
    }
}

impl V8Layout {
    /// The layout the metadata `pm` gives, or what it lacks.
    pub fn from_postmortem(pm: &Postmortem) -> Result<Self, LayoutError> {
        let need = |name: &'static str| -> Result<i64, LayoutError> {
            let found = if name.ends_with("__") {
                pm.prefixed(name)
            } else {
                pm.exact(name)
            };
            found.ok_or(LayoutError::Missing(name))
        };
        let small = |name: &'static str| -> Result<u16, LayoutError> {
            let v = need(name)?;
            u16::try_from(v).map_err(|_| LayoutError::Unusable {
                name,
                value: v,
                why: "not a small offset or type",
            })
        };
        let slot = |name: &'static str| -> Result<i8, LayoutError> {
            let v = need(name)?;
            if !(-40..=-8).contains(&v) || v % 8 != 0 {
                return Err(LayoutError::Unusable {
                    name,
                    value: v,
                    why: "not a frame slot emberd reads (fp - 40 to fp - 8)",
                });
            }
            Ok(v as i8)
        };
        // 64-bit SMIs in the upper half and 8-byte tagged fields: a build
        // with pointer compression (32-bit fields) is another layout.
        for (name, want) in [
            ("v8dbg_SmiShiftSize", 31),
            ("v8dbg_HeapObjectTag", 1),
            ("v8dbg_HeapObjectTagMask", 3),
            ("v8dbg_SmiTagMask", 1),
        ] {
            let v = need(name)?;
            if v != want {
                return Err(LayoutError::Unusable {
                    name,
                    value: v,
                    why: "pointer compression or another tagging scheme (not supported)",
                });
            }
        }
        let function = small("v8dbg_type_JSFunction__JS_FUNCTION_TYPE")?;
        // Exported from V8 12 on; before, the 15 types from JS_FUNCTION_TYPE
        // (as V8 9.6 to 11 number them).
        let first = pm
            .exact("v8dbg_FirstJSFunctionType")
            .and_then(|v| u16::try_from(v).ok())
            .unwrap_or(function);
        let last = pm
            .exact("v8dbg_LastJSFunctionType")
            .and_then(|v| u16::try_from(v).ok())
            .unwrap_or(function.saturating_add(14));
        let shared_script = pm
            .prefixed("v8dbg_class_SharedFunctionInfo__script_or_debug_info__")
            .or_else(|| pm.prefixed("v8dbg_class_SharedFunctionInfo__script__"))
            .ok_or(LayoutError::Missing(
                "v8dbg_class_SharedFunctionInfo__script_or_debug_info__",
            ))?;
        let bytecode_array = pm
            .prefixed("v8dbg_type_BytecodeArray__BYTECODE_ARRAY_TYPE")
            .and_then(|v| u16::try_from(v).ok());
        let layout = V8Layout {
            fp_function: slot("v8dbg_off_fp_function")?,
            fp_context: slot("v8dbg_off_fp_context")?,
            fp_bytecode_offset: slot("v8dbg_off_fp_bytecode_offset")?,
            // Zero, so in .bss on some builds: read as 0 there.
            object_map: pm
                .prefixed("v8dbg_class_HeapObject__map__")
                .unwrap_or(0)
                .try_into()
                .unwrap_or(0),
            map_instance_type: small("v8dbg_class_Map__instance_type__")?,
            function_shared: small("v8dbg_class_JSFunction__shared__")?,
            shared_name: small("v8dbg_class_SharedFunctionInfo__name_or_scope_info__")?,
            shared_script: u16::try_from(shared_script).map_err(|_| LayoutError::Unusable {
                name: "v8dbg_class_SharedFunctionInfo__script__",
                value: shared_script,
                why: "not a small offset",
            })?,
            script_name: small("v8dbg_class_Script__name__")?,
            type_function: (first, last),
            type_shared: small("v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE")?,
            type_script: small("v8dbg_type_Script__SCRIPT_TYPE")?,
            type_scope_info: small("v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE")?,
            first_nonstring: small("v8dbg_FirstNonstringType")?,
            string_length: small("v8dbg_class_String__length__")?,
            seq_one_chars: small("v8dbg_class_SeqOneByteString__chars__")?,
            seq_two_chars: small("v8dbg_class_SeqTwoByteString__chars__")?,
            cons: (
                small("v8dbg_class_ConsString__first__")?,
                small("v8dbg_class_ConsString__second__")?,
            ),
            thin_actual: small("v8dbg_class_ThinString__actual__")?,
            representation_mask: small("v8dbg_StringRepresentationMask")?,
            encoding_mask: small("v8dbg_StringEncodingMask")?,
            one_byte_tag: small("v8dbg_OneByteStringTag")?,
            cons_tag: small("v8dbg_ConsStringTag")?,
            thin_tag: small("v8dbg_ThinStringTag")?,
            scope_context_locals: small("v8dbg_scopeinfo_idx_ncontextlocals")?,
            scope_first_vars: small("v8dbg_scopeinfo_idx_first_vars")?,
            fp_bytecode_array: slot("v8dbg_off_fp_bytecode_array")?,
            type_bytecode_array: bytecode_array.unwrap_or(0),
            // Without the BytecodeArray type baseline frames cannot be told
            // from optimized ones: optimized frames then stay named by
            // function only.
            lines: None,
            code: bytecode_array.and_then(|_| CodeLayout::from_postmortem(pm)),
        };
        // Everything a source's line ends need, or no lines.
        let get = |name: &str| pm.prefixed(name).and_then(|v| u16::try_from(v).ok());
        let lines = (|| {
            Some(LinesLayout {
                script_source: get("v8dbg_class_Script__source__")?,
                script_line_ends: get("v8dbg_class_Script__line_ends__")?,
                type_fixed_array: get("v8dbg_type_FixedArray__FIXED_ARRAY_TYPE")?,
                array_length: get("v8dbg_class_FixedArrayBase__length__")?,
                type_oddball: get("v8dbg_type_Oddball__ODDBALL_TYPE")?,
                sliced: (
                    get("v8dbg_class_SlicedString__parent__")?,
                    get("v8dbg_class_SlicedString__offset__")?,
                ),
                sliced_tag: get("v8dbg_SlicedStringTag")?,
                external_tag: get("v8dbg_ExternalStringTag")?,
                external_resource: get("v8dbg_class_ExternalString__resource__")?,
            })
        })()
        .filter(|l| {
            [
                l.script_source,
                l.script_line_ends,
                l.array_length,
                l.sliced.0,
                l.sliced.1,
                l.external_resource,
            ]
            .iter()
            .all(|&f| f < 256 && f % 8 == 0)
        });
        let layout = V8Layout { lines, ..layout };
        // The BPF walker reads the function's and its info's first 48 bytes.
        for (name, off) in [
            ("v8dbg_class_JSFunction__shared__", layout.function_shared),
            (
                "v8dbg_class_SharedFunctionInfo__name_or_scope_info__",
                layout.shared_name,
            ),
            (
                "v8dbg_class_SharedFunctionInfo__script__",
                layout.shared_script,
            ),
        ] {
            if off >= 48 || off % 8 != 0 {
                return Err(LayoutError::Unusable {
                    name,
                    value: i64::from(off),
                    why: "beyond the 48 bytes the walker reads of an object",
                });
            }
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node 24.21.0's values (read with readelf from the official build).
    fn node24() -> Postmortem {
        let v = |n: &str, x: i64| (n.to_owned(), x);
        Postmortem::new(vec![
            v("v8dbg_SmiShiftSize", 31),
            v("v8dbg_HeapObjectTag", 1),
            v("v8dbg_HeapObjectTagMask", 3),
            v("v8dbg_SmiTagMask", 1),
            v("v8dbg_type_JSFunction__JS_FUNCTION_TYPE", 2065),
            v("v8dbg_FirstJSFunctionType", 2065),
            v("v8dbg_LastJSFunctionType", 2081),
            v(
                "v8dbg_class_SharedFunctionInfo__script__Tagged_HeapObject_",
                40,
            ),
            v("v8dbg_off_fp_function", -16),
            v("v8dbg_off_fp_context", -8),
            v("v8dbg_off_fp_bytecode_offset", -40),
            v("v8dbg_class_Map__instance_type__uint16_t", 12),
            v("v8dbg_class_JSFunction__shared__SharedFunctionInfo", 32),
            v(
                "v8dbg_class_SharedFunctionInfo__name_or_scope_info__Tagged_NameOrScopeInfoT_",
                24,
            ),
            v("v8dbg_class_Script__name__Object", 16),
            v(
                "v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE",
                282,
            ),
            v("v8dbg_type_Script__SCRIPT_TYPE", 167),
            v("v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE", 280),
            v("v8dbg_FirstNonstringType", 128),
            v("v8dbg_class_String__length__int32_t", 12),
            v("v8dbg_class_SeqOneByteString__chars__char", 16),
            v("v8dbg_class_SeqTwoByteString__chars__char", 16),
            v("v8dbg_class_ConsString__first__String", 16),
            v("v8dbg_class_ConsString__second__String", 24),
            v("v8dbg_class_ThinString__actual__String", 16),
            v("v8dbg_StringRepresentationMask", 7),
            v("v8dbg_StringEncodingMask", 8),
            v("v8dbg_OneByteStringTag", 8),
            v("v8dbg_ConsStringTag", 1),
            v("v8dbg_ThinStringTag", 5),
            v("v8dbg_scopeinfo_idx_ncontextlocals", 2),
            v("v8dbg_scopeinfo_idx_first_vars", 5),
            v("v8dbg_off_fp_bytecode_array", -32),
            v("v8dbg_type_BytecodeArray__BYTECODE_ARRAY_TYPE", 190),
            v("v8dbg_DeoptimizationDataInlinedFunctionCountIndex", 1),
            v("v8dbg_DeoptimizationDataInliningPositionsIndex", 8),
            v("v8dbg_DeoptimizationDataLiteralArrayIndex", 3),
            v("v8dbg_DeoptimizationDataWrappedSharedFunctionInfoIndex", 7),
            v("v8dbg_class_Code__flags__uint32_t", 52),
            v("v8dbg_class_Code__instruction_size__int", 56),
            v("v8dbg_class_Code__instruction_start__Address", 40),
            v(
                "v8dbg_class_Code__instruction_stream__Tagged_InstructionStream_",
                32,
            ),
            v("v8dbg_class_Code__wrapper__Tagged_CodeWrapper_", 24),
            v("v8dbg_class_FixedArrayBase__length__SMI", 8),
            v(
                "v8dbg_class_InstructionStream__instruction_start__uintptr_t",
                32,
            ),
            v(
                "v8dbg_class_SharedFunctionInfoWrapper__shared_info__Tagged_SharedFunctionInfo_",
                8,
            ),
            v("v8dbg_type_ByteArray__BYTE_ARRAY_TYPE", 217),
            v("v8dbg_type_Code__CODE_TYPE", 187),
            v("v8dbg_type_FixedArray__FIXED_ARRAY_TYPE", 205),
            v("v8dbg_type_InstructionStream__INSTRUCTION_STREAM_TYPE", 192),
            v(
                "v8dbg_type_ProtectedFixedArray__PROTECTED_FIXED_ARRAY_TYPE",
                193,
            ),
            v("v8dbg_type_TrustedByteArray__TRUSTED_BYTE_ARRAY_TYPE", 196),
            v(
                "v8dbg_type_TrustedWeakFixedArray__TRUSTED_WEAK_FIXED_ARRAY_TYPE",
                199,
            ),
        ])
    }

    #[test]
    fn fields_are_found_whatever_their_type_suffix() {
        let l = V8Layout::from_postmortem(&node24()).unwrap();
        assert_eq!(l.shared_name, 24);
        assert_eq!(l.shared_script, 40);
        assert_eq!(l.function_shared, 32);
        assert_eq!(l.type_function, (2065, 2081));
        assert_eq!(l.fp_function, -16);
    }

    #[test]
    fn pointer_compression_and_missing_fields_are_refused_by_name() {
        let mut pm = node24();
        pm.values.retain(|(n, _)| n != "v8dbg_SmiShiftSize");
        pm.values.push(("v8dbg_SmiShiftSize".into(), 0));
        let e = V8Layout::from_postmortem(&pm).unwrap_err();
        assert!(e.to_string().contains("pointer compression"), "{e}");
        let mut pm = node24();
        pm.values
            .retain(|(n, _)| !n.starts_with("v8dbg_class_JSFunction__shared"));
        assert_eq!(
            V8Layout::from_postmortem(&pm).unwrap_err(),
            LayoutError::Missing("v8dbg_class_JSFunction__shared__")
        );
        // A lying offset beyond what the walker reads.
        let mut pm = node24();
        pm.values
            .retain(|(n, _)| !n.starts_with("v8dbg_class_JSFunction__shared"));
        pm.values
            .push(("v8dbg_class_JSFunction__shared__X".into(), 4096));
        assert!(V8Layout::from_postmortem(&pm).is_err());
    }

    #[test]
    fn optimized_code_is_read_from_the_metadata_or_v8s_known_shapes() {
        // Node 24: the two fields before the wrapper, the function wrapped.
        let c = V8Layout::from_postmortem(&node24()).unwrap().code.unwrap();
        assert_eq!((c.code_deopt, c.code_positions), (8, 16));
        assert_eq!(
            (c.stream_type, c.stream_header, c.stream_code),
            (192, 32, Some(8))
        );
        assert_eq!((c.deopt_shared, c.wrapper_shared), (7, Some(8)));
        assert_eq!(
            (c.code_start, c.code_size, c.code_stream),
            (Some(40), Some(56), Some(32))
        );
        assert_eq!(c.type_arrays, [205, 193, 199]);
        // Node 18 (V8 10): no InstructionStream, no indices exported.
        let mut pm = node24();
        pm.values.retain(|(n, _)| {
            !n.contains("InstructionStream")
                && !n.starts_with("v8dbg_Deoptimization")
                && !n.contains("Code__wrapper")
                && !n.contains("Wrapper__shared")
        });
        pm.values
            .push(("v8dbg_class_Code__instruction_start__uintptr_t".into(), 128));
        pm.values
            .retain(|(n, _)| n != "v8dbg_class_Code__instruction_start__Address");
        let c = V8Layout::from_postmortem(&pm).unwrap().code.unwrap();
        assert_eq!(
            (c.stream_type, c.stream_header, c.stream_code),
            (187, 128, None)
        );
        assert_eq!(
            (c.code_deopt, c.code_positions, c.deopt_shared),
            (16, 24, 6)
        );
        assert_eq!(
            (c.deopt_literals, c.deopt_positions, c.wrapper_shared),
            (2, 7, None)
        );
        assert_eq!((c.code_start, c.code_stream), (None, None));
        // A header no Code has: no inlined frames, the rest still read.
        let mut pm = node24();
        pm.values
            .retain(|(n, _)| !n.starts_with("v8dbg_class_InstructionStream__"));
        pm.values.push((
            "v8dbg_class_InstructionStream__instruction_start__x".into(),
            1 << 20,
        ));
        let l = V8Layout::from_postmortem(&pm).unwrap();
        assert!(l.code.is_none());
    }

    #[test]
    fn older_builds_get_the_function_type_range_from_js_function_type() {
        let mut pm = node24();
        pm.values
            .retain(|(n, _)| !n.starts_with("v8dbg_FirstJS") && !n.starts_with("v8dbg_LastJS"));
        let l = V8Layout::from_postmortem(&pm).unwrap();
        assert_eq!(l.type_function, (2065, 2079));
    }
}
