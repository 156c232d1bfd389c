//! CPython: which mapped files hold an interpreter, and the layout the BPF
//! walker (`bpf/python.h`) reads its frames with.
//!
//! A file is a CPython interpreter when its dynamic symbols export
//! `_PyEval_EvalFrameDefault`, `_PyRuntime` and `Py_Version` (Debian's
//! `python3`, linked statically, and python.org's `libpython3.X.so` alike):
//! the version comes from the `Py_Version` constant in the file, never from
//! its name. From 3.13 on the file's `_PyRuntime` begins with
//! `_Py_DebugOffsets`, CPython's own statement of its layout; where it is
//! present its offsets are checked against the table here and a
//! disagreement leaves the interpreter native-only (with the reason), so an
//! unexpected build is never read with a wrong layout.
//!
//! The thread state is found through glibc's thread-specific data, whose
//! place in the thread control block is read from the process's libc
//! (`pthread_getspecific`'s first instructions), not assumed.
//!
//! Every read here is of a bounded size at an offset the file's own headers
//! give; a file that is not what it claims is simply not an interpreter.

use std::fs::File;

use crate::shared::elf::Headers;

/// A Python version, as `Py_Version` encodes it (`0xMMmmppRS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyVersion(pub u32);

impl PyVersion {
    /// Major and minor version.
    pub fn minor(self) -> (u32, u32) {
        (self.0 >> 24, (self.0 >> 16) & 0xff)
    }
}

impl std::fmt::Display for PyVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor) = self.minor();
        if self.0 & 0xff == 0 {
            // Found from symbols only (before 3.11): the micro release is
            // unknown.
            return write!(f, "{major}.{minor}");
        }
        write!(f, "{major}.{minor}.{}", (self.0 >> 8) & 0xff)
    }
}

/// Byte offsets into CPython's structures (`struct py_layout` in
/// `bpf/emberd.h`); [`NONE`] marks a field the version does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PyLayout {
    /// `PyThreadState.cframe` (3.11, 3.12).
    pub tstate_cframe: u16,
    /// `_PyCFrame.current_frame`.
    pub cframe_frame: u16,
    /// `PyThreadState.current_frame` (3.13).
    pub tstate_frame: u16,
    /// `_PyInterpreterFrame.f_code` / `f_executable`.
    pub frame_code: u16,
    /// `_PyInterpreterFrame.previous`.
    pub frame_previous: u16,
    /// `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13).
    pub frame_instr: u16,
    /// `is_entry` (3.11) or `owner` (3.12 on).
    pub frame_entry: u16,
    /// `PyCodeObject.co_filename`.
    pub code_filename: u16,
    /// `PyCodeObject.co_qualname`.
    pub code_qualname: u16,
    /// `PyCodeObject.co_linetable`.
    pub code_linetable: u16,
    /// `PyCodeObject.co_firstlineno`.
    pub code_firstlineno: u16,
    /// `PyCodeObject.co_code_adaptive`: the first code unit.
    pub code_adaptive: u16,
    /// `PyASCIIObject.length`.
    pub str_length: u16,
    /// `PyASCIIObject.hash`.
    pub str_hash: u16,
    /// `PyASCIIObject.state`.
    pub str_state: u16,
    /// Data of a compact ASCII string.
    pub str_ascii_data: u16,
    /// Data of a compact non-ASCII string.
    pub str_compact_data: u16,
    /// Whether `frame_entry` is `owner` (the C-stack shim is 3).
    pub entry_is_owner: bool,
    /// The minor version: 8 to 10 read frame objects, whose
    /// `frame_instr` is the int `f_lasti` (bytes up to 3.9, code units on
    /// 3.10), and name their line tables' encoding.
    pub minor: u8,
    /// Offset of `autoTSSkey` (a `Py_tss_t`) in `_PyRuntime`.
    pub runtime_tss: u32,
    /// 3.15 on: the thread state is a static TLS variable of the
    /// executable at fsbase + this, read from the file's
    /// `PyGILState_GetThisThreadState`; 0: found through the pthread key.
    pub tstate_tls: i32,
    /// `PyThreadState.base_frame` (3.15 on): the shim frame at the bottom
    /// of each thread's chain, which no eval-loop call pushed.
    pub tstate_base_frame: u16,
}

/// A field a version does not have.
pub const NONE: u16 = 0xffff;

/// The layout of a CPython minor version on x86_64, re-derived on the
/// interpreters of these machines (Debian's 3.11.2; pyenv's 3.11.7, 3.12.1,
/// 3.13.0) and checked by the integration tests against live processes.
pub fn layout(version: PyVersion) -> Option<PyLayout> {
    let common = PyLayout {
        tstate_cframe: 56,
        cframe_frame: 0,
        tstate_frame: NONE,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_entry: 70,
        code_filename: 112,
        code_qualname: 128,
        code_linetable: 136,
        code_firstlineno: 68,
        code_adaptive: 192,
        str_length: 16,
        str_hash: 24,
        str_state: 32,
        str_ascii_data: 40,
        str_compact_data: 56,
        entry_is_owner: true,
        minor: 12,
        runtime_tss: 1544,
        tstate_tls: 0,
        tstate_base_frame: NONE,
    };
    // Frame objects: PyThreadState.frame, PyFrameObject's f_back,
    // f_code and f_lasti; co_name for the name (no co_qualname before
    // 3.11); `wstr` in every str.
    let frame_objects = PyLayout {
        tstate_cframe: NONE,
        cframe_frame: NONE,
        tstate_frame: 24,
        frame_code: 32,
        frame_previous: 24,
        frame_instr: 96,
        frame_entry: NONE,
        code_filename: 104,
        code_qualname: 112,
        code_linetable: 120,
        code_firstlineno: 40,
        code_adaptive: NONE,
        str_ascii_data: 48,
        str_compact_data: 72,
        entry_is_owner: false,
        minor: 10,
        runtime_tss: 584,
        ..common
    };
    match version.minor() {
        (3, 8) => Some(PyLayout {
            frame_instr: 104,
            minor: 8,
            runtime_tss: 1392,
            ..frame_objects
        }),
        (3, 9) => Some(PyLayout {
            frame_instr: 104,
            minor: 9,
            ..frame_objects
        }),
        (3, 10) => Some(frame_objects),
        (3, 11) => Some(PyLayout {
            cframe_frame: 8,
            frame_code: 32,
            frame_previous: 48,
            frame_entry: 68,
            entry_is_owner: false,
            code_firstlineno: 72,
            code_adaptive: 184,
            // 3.11's PyASCIIObject still has `wstr`.
            str_ascii_data: 48,
            str_compact_data: 72,
            minor: 11,
            runtime_tss: 592,
            ..common
        }),
        (3, 12) => Some(common),
        (3, 13) => Some(PyLayout {
            tstate_cframe: NONE,
            tstate_frame: 72,
            code_adaptive: 200,
            minor: 13,
            runtime_tss: 2160,
            ..common
        }),
        // f_executable is a tagged _PyStackRef (the walker clears its low
        // bits from 3.14 on); `owner` moved past `stackpointer`.
        (3, 14) => Some(PyLayout {
            tstate_cframe: NONE,
            tstate_frame: 72,
            frame_entry: 74,
            code_adaptive: 208,
            minor: 14,
            runtime_tss: 2336,
            ..common
        }),
        // 3.14's frames and code objects; the thread state in a TLS
        // variable (`tstate_tls`, set from the file by `inspect`).
        (3, 15) => Some(PyLayout {
            tstate_cframe: NONE,
            tstate_frame: 72,
            frame_entry: 74,
            code_adaptive: 208,
            minor: 15,
            runtime_tss: 0,
            tstate_base_frame: 80,
            ..common
        }),
        _ => None,
    }
}

impl PyLayout {
    /// The layout as `struct py_layout` bytes.
    pub fn to_bytes(&self) -> [u8; PY_LAYOUT_BYTES] {
        let mut out = [0u8; PY_LAYOUT_BYTES];
        let fields = [
            self.tstate_cframe,
            self.cframe_frame,
            self.tstate_frame,
            self.frame_code,
            self.frame_previous,
            self.frame_instr,
            self.frame_entry,
            self.code_filename,
            self.code_qualname,
            self.code_linetable,
            self.code_firstlineno,
            self.code_adaptive,
            self.str_length,
            self.str_hash,
            self.str_state,
            self.str_ascii_data,
            self.str_compact_data,
        ];
        for (i, f) in fields.iter().enumerate() {
            out[i * 2..i * 2 + 2].copy_from_slice(&f.to_ne_bytes());
        }
        out[34] = u8::from(self.entry_is_owner);
        out[35] = self.minor;
        out[36..40].copy_from_slice(&self.tstate_tls.to_ne_bytes());
        out[40..42].copy_from_slice(&self.tstate_base_frame.to_ne_bytes());
        out
    }
}

/// sizeof(struct py_layout).
pub const PY_LAYOUT_BYTES: usize = 48;
/// sizeof(struct py_proc).
pub const PY_PROC_BYTES: usize = 32 + PY_LAYOUT_BYTES;
const _: () = assert!(std::mem::size_of::<crate::bpf::types::py_layout>() == PY_LAYOUT_BYTES);
const _: () = assert!(std::mem::size_of::<crate::bpf::types::py_proc>() == PY_PROC_BYTES);

/// What a mapped file contributes to reading interpreter frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRuntime {
    /// A CPython interpreter emberd can read.
    Python(PyInterpreter),
    /// A CPython interpreter emberd cannot read, and why.
    UnsupportedPython {
        /// `Py_Version`, when the file has it.
        version: Option<PyVersion>,
        /// Why it is not read (shown by `emberd check`, counted in /metrics).
        reason: &'static str,
    },
    /// glibc: where thread-specific data lives in the thread control block.
    Libc {
        /// Key K's value is at fsbase + this + 16 * K + 8.
        tls_specific: u32,
    },
}

/// A CPython interpreter in a file (virtual addresses of the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyInterpreter {
    /// `Py_Version`.
    pub version: PyVersion,
    /// `_PyEval_EvalFrameDefault`: [start, end).
    pub eval: (u64, u64),
    /// `_PyRuntime`.
    pub runtime: u64,
    /// How to read its structures.
    pub layout: PyLayout,
}

/// Symbols looked for.
const EVAL: &str = "_PyEval_EvalFrameDefault";
const RUNTIME: &str = "_PyRuntime";
const VERSION: &str = "Py_Version";
const GETSPECIFIC: &[&str] = &["pthread_getspecific", "__pthread_getspecific"];

/// What `file` contributes to interpreter unwinding, its headers and
/// symbols read here.
pub fn inspect_file(file: &File) -> Option<FileRuntime> {
    let elf = Headers::read(file).ok()?;
    let syms = elf.dynamic_symbols(file, &SYMBOLS).ok()?;
    inspect(file, &elf, &syms)
}

/// Exported from 3.10, 3.9 and 3.8 on: without `Py_Version` (3.11 on)
/// they tell the minor version.
const SINCE_3_10: &str = "Py_NewRef";
const SINCE_3_9: &str = "PyFrame_GetCode";
const SINCE_3_8: &str = "PyCode_NewWithPosOnlyArgs";
/// Formats `Py_GetVersion()`'s text from PY_VERSION (3.8 to 3.10).
const GET_VERSION: &str = "Py_GetVersion";
/// Returns the thread's state: from 3.15 a read of a TLS variable.
const THIS_THREAD_STATE: &str = "PyGILState_GetThisThreadState";

/// The dynamic symbols [`inspect`] looks for.
pub const SYMBOLS: [&str; 10] = [
    EVAL,
    RUNTIME,
    VERSION,
    GETSPECIFIC[0],
    GETSPECIFIC[1],
    SINCE_3_10,
    SINCE_3_9,
    SINCE_3_8,
    GET_VERSION,
    THIS_THREAD_STATE,
];

/// Where `PyGILState_GetThisThreadState` (its first bytes, `code`) reads
/// the thread's state, when that is `mov %fs:DISP32,%rax` (after an
/// `endbr64`): a static TLS variable of the executable (3.15 built into
/// it, as Debian does); None for anything else (a shared libpython's TLS
/// is not at a fixed place).
pub fn tstate_tls_of(code: &[u8]) -> Option<i32> {
    let code = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
    let rest = code.strip_prefix(&[0x64, 0x48, 0x8b, 0x04, 0x25])?;
    let disp = i32::from_le_bytes(rest.get(0..4)?.try_into().ok()?);
    (disp != 0).then_some(disp)
}

/// The version of an interpreter without `Py_Version` (3.8 to 3.10): the
/// minor one from the functions it exports, the micro one from the
/// PY_VERSION text `Py_GetVersion` formats (its first `lea` into %rcx,
/// the fourth argument of its PyOS_snprintf), when that reads as the same
/// minor version; else the micro version stays unknown.
fn version_before_3_11(
    file: &File,
    elf: &Headers,
    get: impl Fn(&str) -> Option<(u64, u64)>,
) -> Option<PyVersion> {
    let minor: u32 = if get(SINCE_3_10).is_some() {
        10
    } else if get(SINCE_3_9).is_some() {
        9
    } else if get(SINCE_3_8).is_some() {
        8
    } else {
        return None;
    };
    let micro = (|| {
        let (at, _) = get(GET_VERSION)?;
        let code = elf.read_vaddr(file, at, 64)?;
        let i = code.windows(3).position(|w| w == [0x48, 0x8d, 0x0d])?;
        let rel = i32::from_le_bytes(code.get(i + 3..i + 7)?.try_into().ok()?);
        let text_at = (at + i as u64 + 7).checked_add_signed(i64::from(rel))?;
        let text = elf.read_vaddr(file, text_at, 16)?;
        let end = text.iter().position(|&b| b == 0)?;
        let text = std::str::from_utf8(&text[..end]).ok()?;
        let rest = text.strip_prefix(&format!("3.{minor}."))?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse::<u32>().ok().filter(|&m| m < 256)
    })();
    // 0xf0: a final release, as Py_Version encodes it; a low byte of 0
    // says the micro version is unknown.
    Some(PyVersion(match micro {
        Some(m) => 0x0300_0000 | minor << 16 | m << 8 | 0xf0,
        None => 0x0300_0000 | minor << 16,
    }))
}

/// What `file` (its headers `elf`, its defined dynamic symbols among
/// [`SYMBOLS`] `syms`: name, value, size) contributes to interpreter
/// unwinding, if anything.
pub fn inspect(file: &File, elf: &Headers, syms: &[(String, u64, u64)]) -> Option<FileRuntime> {
    let get = |name: &str| syms.iter().find(|s| s.0 == name).map(|s| (s.1, s.2));
    if let Some((eval, eval_size)) = get(EVAL) {
        let version = match get(VERSION) {
            Some((at, _)) => elf
                .read_vaddr(file, at, 4)
                .map(|b| PyVersion(u32::from_le_bytes(b.try_into().expect("4 bytes")))),
            None => version_before_3_11(file, elf, get),
        };
        let Some(version) = version else {
            return Some(FileRuntime::UnsupportedPython {
                version: None,
                reason: "CPython before 3.8 (no PyCode_NewWithPosOnlyArgs)",
            });
        };
        let Some(mut layout) = layout(version) else {
            return Some(FileRuntime::UnsupportedPython {
                version: Some(version),
                reason: "version without a layout",
            });
        };
        let Some((runtime, _)) = get(RUNTIME) else {
            return Some(FileRuntime::UnsupportedPython {
                version: Some(version),
                reason: "no _PyRuntime symbol",
            });
        };
        if eval_size == 0 {
            return Some(FileRuntime::UnsupportedPython {
                version: Some(version),
                reason: "_PyEval_EvalFrameDefault has no size",
            });
        }
        if let Some(reason) = check_debug_offsets(elf, file, runtime, version, &layout) {
            return Some(FileRuntime::UnsupportedPython {
                version: Some(version),
                reason,
            });
        }
        if version.minor() >= (3, 15) {
            let tls = get(THIS_THREAD_STATE)
                .and_then(|(at, _)| elf.read_vaddr(file, at, 16))
                .and_then(|code| tstate_tls_of(&code));
            let Some(tls) = tls else {
                return Some(FileRuntime::UnsupportedPython {
                    version: Some(version),
                    reason: "the thread state is not in a static TLS variable of the executable",
                });
            };
            layout.tstate_tls = tls;
        }
        // A split eval loop (Debian's 3.14.10, GCC 16): the symbol is
        // 1,184 bytes of entry and exit that jump into an 84 KiB part of
        // its own (a `.cold` function, its own FDE), where the loop runs
        // and from which it calls out: that part is the range claimed.
        // The entry's own frames (its recursion check, its exit's
        // clean-up calls) stay native, and a run shifted by them is
        // marked at the stack's root.
        let eval_range = if eval_size < SPLIT_EVAL_BYTES {
            match split_loop(file, elf, eval, eval_size) {
                Some(range) => range,
                None => {
                    return Some(FileRuntime::UnsupportedPython {
                        version: Some(version),
                        reason: "_PyEval_EvalFrameDefault is too small to be the eval loop, and no part it jumps to was found",
                    });
                }
            }
        } else {
            (eval, eval + eval_size)
        };
        return Some(FileRuntime::Python(PyInterpreter {
            version,
            eval: eval_range,
            runtime,
            layout,
        }));
    }
    let (at, _) = GETSPECIFIC.iter().find_map(|n| get(n))?;
    let code = elf.read_vaddr(file, at, 32)?;
    tls_specific_of(&code).map(|tls_specific| FileRuntime::Libc { tls_specific })
}

/// A Python process found by [`scan_processes`].
#[derive(Debug, Clone)]
pub struct FoundProcess {
    /// Its pid.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// The interpreter's version, when known.
    pub version: Option<PyVersion>,
    /// None when its frames can be read; else why not.
    pub native_reason: Option<&'static str>,
}

/// The Python processes running now, and whether their frames can be
/// read (`emberd check`). Each mapped file is inspected once, through
/// `/proc/PID/map_files` (the mapped inode, whatever its path now names).
pub fn scan_processes() -> Vec<FoundProcess> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    let mut seen: HashMap<(u64, u64), Option<FileRuntime>> = HashMap::new();
    let mut out = Vec::new();
    let Ok(procs) = procfs::process::all_processes() else {
        return out;
    };
    for p in procs.flatten() {
        let Ok(maps) = crate::shared::procmaps::code_maps(crate::shared::Pid(p.pid as u32)) else {
            continue;
        };
        let (mut interp, mut libc) = (None, false);
        for m in maps {
            if !m.perms.contains(procfs::process::MMPermissions::EXECUTE) || m.inode == 0 {
                continue;
            }
            let mut path = format!(
                "/proc/{}/map_files/{:x}-{:x}",
                p.pid, m.address.0, m.address.1
            );
            let md = match std::fs::metadata(&path) {
                Ok(md) => md,
                // map_files closed (another user's process): the host path
                // when it is the very inode mapped.
                Err(_) => match &m.pathname {
                    procfs::process::MMapPath::Path(host) => match std::fs::metadata(host) {
                        Ok(md) if crate::shared::procmaps::same_inode(&md, m.dev, m.inode) => {
                            path = host.display().to_string();
                            md
                        }
                        _ => continue,
                    },
                    _ => continue,
                },
            };
            let rt = seen
                .entry((md.dev(), md.ino()))
                .or_insert_with(|| File::open(&path).ok().and_then(|f| inspect_file(&f)));
            match rt {
                Some(FileRuntime::Libc { .. }) => libc = true,
                Some(r) => interp = Some(r.clone()),
                None => {}
            }
        }
        let (version, native_reason) = match interp {
            None => continue,
            Some(FileRuntime::Python(i)) if libc => (Some(i.version), None),
            Some(FileRuntime::Python(i)) => (
                Some(i.version),
                Some("libc's thread-specific data not found"),
            ),
            Some(FileRuntime::UnsupportedPython { version, reason }) => (version, Some(reason)),
            Some(FileRuntime::Libc { .. }) => continue,
        };
        out.push(FoundProcess {
            pid: p.pid as u32,
            comm: p.stat().map(|s| s.comm).unwrap_or_default(),
            version,
            native_reason,
        });
    }
    out
}

/// glibc's x86_64 `pthread_getspecific` starts `cmp $0x1f,%edi; ja ...;
/// mov %edi,%eax; add $N,%rax; shl $4,%rax; add %fs:0x10,%rax; mov 8(%rax)`:
/// key K < 32 is at fsbase + 16 * (K + N) + 8. Anything else (another libc,
/// another build) is not guessed at.
pub fn tls_specific_of(code: &[u8]) -> Option<u32> {
    if code.get(0..3)? != [0x83, 0xff, 0x1f] {
        return None;
    }
    let at = code
        .windows(8)
        .position(|w| w[0..3] == [0x48, 0x83, 0xc0] && w[4..8] == [0x48, 0xc1, 0xe0, 0x04])?;
    if at > 16 {
        return None;
    }
    Some(u32::from(code[at + 3]) * 16)
}

/// From 3.13 on `_PyRuntime` starts with `_Py_DebugOffsets` ("xdebugpy",
/// then the version): the frame and code-object offsets there must be the
/// table's. None when they agree or the file has none; else the reason.
fn check_debug_offsets(
    elf: &Headers,
    file: &File,
    runtime: u64,
    version: PyVersion,
    layout: &PyLayout,
) -> Option<&'static str> {
    if version.minor() < (3, 13) {
        return None;
    }
    let Some(b) = elf.read_vaddr(file, runtime, DEBUG_OFFSETS_READ) else {
        return Some("_PyRuntime not readable from the file");
    };
    if &b[0..8] != b"xdebugpy" {
        return Some("_PyRuntime has no _Py_DebugOffsets");
    }
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    if u64_at(8) as u32 != version.0 {
        return Some("_Py_DebugOffsets names another version");
    }
    if u64_at(16) != 0 {
        return Some("a free-threaded build (not read yet)");
    }
    let offsets = debug_offsets_at(version)?;
    let want = [
        (offsets.tstate_frame, layout.tstate_frame),
        (offsets.frame_previous, layout.frame_previous),
        (offsets.frame_code, layout.frame_code),
        (offsets.frame_instr, layout.frame_instr),
        (offsets.frame_owner, layout.frame_entry),
        (offsets.code_filename, layout.code_filename),
        (offsets.code_qualname, layout.code_qualname),
        (offsets.code_linetable, layout.code_linetable),
        (offsets.code_firstlineno, layout.code_firstlineno),
        (offsets.code_adaptive, layout.code_adaptive),
        (offsets.str_ascii_size, layout.str_ascii_data),
    ];
    for (at, field) in want {
        if at + 8 > b.len() || u64_at(at) != u64::from(field) {
            return Some("_Py_DebugOffsets disagree with emberd's layout");
        }
    }
    None
}

/// A `_PyEval_EvalFrameDefault` smaller than this is the entry of a split
/// eval loop, not the loop.
const SPLIT_EVAL_BYTES: u64 = 8192;
/// Jumps into one part the entry must make for that part to be taken as
/// the loop (a byte scan may read a jump where there is none: those land
/// anywhere, the entry's real ones all in its loop).
const SPLIT_MIN_JUMPS: usize = 3;
/// Bytes of `.eh_frame` read at most to find the loop's part (3.14.10's
/// python3.14 has 580 KiB).
const SPLIT_MAX_CFI_BYTES: u64 = 16 << 20;

/// The part of a split eval loop that runs it: the code range (its FDE
/// in `.eh_frame`) that most jumps out of the `eval_size` bytes at `eval`
/// lead into, when at least [`SPLIT_MIN_JUMPS`] do, it starts at one of
/// their targets and it is at least [`SPLIT_EVAL_BYTES`] long.
fn split_loop(file: &File, elf: &Headers, eval: u64, eval_size: u64) -> Option<(u64, u64)> {
    let code = elf.read_vaddr(file, eval, usize::try_from(eval_size).ok()?)?;
    // jcc rel32 (0f 80-8f) and jmp rel32 (e9) leaving the symbol.
    let mut targets = Vec::new();
    for i in 0..code.len() {
        let (len, rel_at) = match (code[i], code.get(i + 1)) {
            (0x0f, Some(0x80..=0x8f)) => (6, i + 2),
            (0xe9, _) => (5, i + 1),
            _ => continue,
        };
        let Some(rel) = code.get(rel_at..rel_at + 4) else {
            continue;
        };
        let rel = i64::from(i32::from_le_bytes(rel.try_into().ok()?));
        let Some(target) = (eval + (i + len) as u64).checked_add_signed(rel) else {
            continue;
        };
        if !(eval..eval + eval_size).contains(&target) {
            targets.push(target);
        }
    }
    if targets.len() < SPLIT_MIN_JUMPS {
        return None;
    }
    // Only the headers and `.eh_frame` are read, not the file.
    let cache = object::ReadCache::new(file);
    let obj = object::File::parse(&cache).ok()?;
    use gimli::UnwindSection;
    use object::{Object, ObjectSection};
    let section = obj.section_by_name(".eh_frame")?;
    if section.size() > SPLIT_MAX_CFI_BYTES {
        return None;
    }
    let mut eh = gimli::EhFrame::new(section.data().ok()?, gimli::LittleEndian);
    eh.set_address_size(8);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut parts: std::collections::HashMap<(u64, u64), usize> = Default::default();
    for &t in &targets {
        if let Ok(fde) = eh.fde_for_address(&bases, t, gimli::EhFrame::cie_from_offset) {
            let start = fde.initial_address();
            *parts.entry((start, start + fde.len())).or_default() += 1;
        }
    }
    let (&(start, end), &jumps) = parts.iter().max_by_key(|(range, n)| (**n, range.0))?;
    (jumps >= SPLIT_MIN_JUMPS && end - start >= SPLIT_EVAL_BYTES && targets.contains(&start))
        .then_some((start, end))
}

/// Bytes of `_PyRuntime` read for [`check_debug_offsets`].
const DEBUG_OFFSETS_READ: usize = 768;

/// Where, in `_Py_DebugOffsets`, the offsets emberd uses are stated.
struct DebugOffsetsAt {
    tstate_frame: usize,
    frame_previous: usize,
    frame_code: usize,
    frame_instr: usize,
    frame_owner: usize,
    code_filename: usize,
    code_qualname: usize,
    code_linetable: usize,
    code_firstlineno: usize,
    code_adaptive: usize,
    str_ascii_size: usize,
}

/// Per version: the struct is all u64 after the cookie (3.13.0:
/// `version`, `free_threaded`, then runtime_state (3 fields),
/// interpreter_state (13), thread_state (9), interpreter_frame (6),
/// code_object (10), ..., unicode_object (4)), and only promised stable
/// within a minor version.
fn debug_offsets_at(version: PyVersion) -> Option<DebugOffsetsAt> {
    match version.minor() {
        (3, 13) => Some(DebugOffsetsAt {
            tstate_frame: 184,
            frame_previous: 232,
            frame_code: 240,
            frame_instr: 248,
            frame_owner: 264,
            code_filename: 280,
            code_qualname: 296,
            code_linetable: 304,
            code_firstlineno: 312,
            code_adaptive: 344,
            str_ascii_size: 560,
        }),
        // 3.15.2: thread_state grew to 16 fields, interpreter_frame 8,
        // code_object 11.
        (3, 15) => Some(DebugOffsetsAt {
            tstate_frame: 208,
            frame_previous: 320,
            frame_code: 328,
            frame_instr: 336,
            frame_owner: 352,
            code_filename: 384,
            code_qualname: 400,
            code_linetable: 408,
            code_firstlineno: 416,
            code_adaptive: 448,
            str_ascii_size: 736,
        }),
        // 3.14.10: interpreter_state has 16 fields, interpreter_frame 8
        // (stackpointer, tlbc_index), code_object 11 (co_tlbc); sets, ints
        // and bytes before unicode_object.
        (3, 14) => Some(DebugOffsetsAt {
            tstate_frame: 208,
            frame_previous: 256,
            frame_code: 264,
            frame_instr: 272,
            frame_owner: 288,
            code_filename: 320,
            code_qualname: 336,
            code_linetable: 344,
            code_firstlineno: 352,
            code_adaptive: 384,
            str_ascii_size: 640,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian sid's 3.15.2: `endbr64; mov %fs:-0x28,%rax; ret`. A shared
    /// libpython's initial-exec form (a GOT load first) is not taken.
    #[test]
    fn a_static_tls_thread_state_is_read_from_its_code() {
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x64, 0x48, 0x8b, 0x04, 0x25, 0xd8, 0xff, 0xff, 0xff, 0xc3,
        ];
        assert_eq!(tstate_tls_of(&code), Some(-0x28));
        let got = [
            0x48, 0x8b, 0x05, 0x10, 0x20, 0x30, 0x00, 0x64, 0x48, 0x8b, 0x00, 0xc3,
        ];
        assert_eq!(tstate_tls_of(&got), None);
    }

    #[test]
    fn glibc_thread_specific_offset_is_read_from_its_code() {
        // glibc 2.36's pthread_getspecific, as Debian 12 ships it.
        let code = [
            0x83, 0xff, 0x1f, 0x77, 0x3b, 0x89, 0xf8, 0x48, 0x83, 0xc0, 0x31, 0x48, 0xc1, 0xe0,
            0x04, 0x64, 0x48, 0x03, 0x04, 0x25, 0x10, 0x00,
        ];
        assert_eq!(tls_specific_of(&code), Some(0x310));
        assert_eq!(tls_specific_of(&[0x90; 32]), None);
    }

    #[test]
    fn this_machines_libc_and_interpreters_are_recognized() {
        let libc = File::open("/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
        assert!(matches!(
            inspect_file(&libc),
            Some(FileRuntime::Libc { .. })
        ));
        let py = File::open("/usr/bin/python3.11").expect("Debian's python3.11");
        match inspect_file(&py) {
            Some(FileRuntime::Python(p)) => assert_eq!(p.version.minor(), (3, 11)),
            other => panic!("python3.11 not recognized: {other:?}"),
        }
    }
}
