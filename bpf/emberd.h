/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Layouts shared by the BPF programs and the Rust agent. The Rust side uses
 * the skeleton's generated `types::*` for these, and pins their sizes, so a
 * change here that is not mirrored there fails the build, not the profile.
 */
#ifndef EMBERD_H
#define EMBERD_H

#define EMBERD_COMM_LEN 16

/* Time resolution of CPU samples: FlameScope's 20 ms rows. */
#define EMBERD_TICK_NS 20000000ULL
/* Frames kept per stack. kernel.perf_event_max_stack is 127 here, and
 * bpf_get_stack returns at most that many kernel frames. */
#define EMBERD_MAX_STACK_DEPTH 127
/* Slots of a stored stack's frame array: a power of two, so an index masked
 * with EMBERD_STACK_SLOTS - 1 is provably in bounds. */
#define EMBERD_STACK_SLOTS 128

/* Stack keys 0 and 1 are not stacks but what happened to one; every stored
 * stack's key (a 64-bit hash of its frames) is at least 2. */
#define EMBERD_STACK_NONE 0ULL /* no stack of that kind: user-mode sample, kernel thread */
#define EMBERD_STACK_LOST 1ULL /* there was a stack but it could not be stored */

/* The key of the per-user counts (stacks_by_uid, blocked_by_uid,
 * py_codes_by_uid) that users beyond a count map's size share. */
#define EMBERD_OTHER_UIDS 0xffffffffU

/* The key of the per-user counts that counts every user but root together:
 * all of them hold at most three halves of one user's share (three quarters
 * of the table when a share is half), so a quarter stays root's. */
#define EMBERD_ALL_USERS 0xfffffffeU

/* Prefixes the subordinate uid ranges' trie holds at most (bpf/walk.h
 * `sub_uids`; entries are allocated as added): a range is one prefix when
 * aligned to its size, 12 for useradd's (65,536 uids from 100,000 + k x
 * 65,536), at most 62. The agent writes at most half of this, so that a
 * new set fits beside the old while it replaces it
 * (src/unwind/accounts.rs). */
#define EMBERD_SUB_UID_PREFIXES 524288

/* How a stack's walk ended. `StackEnd` in src/collect/stack.rs takes its
 * values from here (build.rs makes every enum of this file Rust constants,
 * src/bpf.rs `enums`) and fails the build if it has more or fewer. */
enum stack_end {
	STACK_END_ROOT = 0,          /* reached the outermost frame */
	STACK_END_TRUNCATED = 1,     /* EMBERD_MAX_STACK_DEPTH frames and more to go */
	STACK_END_NO_INFO = 2,       /* the last frame's file has no unwind info */
	STACK_END_NOT_READY = 3,     /* frame pointers only: the process's tables were not ready */
	STACK_END_ERR_READ = 4,      /* reading the user stack failed */
	STACK_END_ERR_NO_ROW = 5,    /* no unwind row covers the pc */
	STACK_END_ERR_UNSUPPORTED = 6, /* a CFI rule emberd cannot evaluate */
	STACK_END_ERR_CFA = 7,       /* the frame address did not move up the stack */
	STACK_END_ERR_PC = 8,        /* return address in no executable mapping */
	STACK_END_KERNEL = 9,        /* a kernel stack, as the kernel's unwinder gave it */
	STACK_END_ERR_NO_FP = 10,    /* anonymous code (JIT) with no frame pointer to follow */
	STACK_END_BUDGET = 11,       /* the last frame's file has CFI, but its table had no room */
	STACK_END_MAX,
};

/* Why a stack could not be stored (counted; the sample is kept as [lost]). */
enum stack_lost {
	STACK_LOST_FULL = 0,         /* the stack map is full */
	STACK_LOST_COLLISION = 1,    /* another stack has the same 64-bit key */
	STACK_LOST_SHARE = 2,        /* its user holds their share of the map (events.bpf.c) */
};

/*
 * A stack in a stack map, under a 64-bit hash of (frames, end). `check` is a
 * second, independent hash: an entry with another `check` is a collision.
 */
struct stored_stack {
	__u64 check;
	__u64 used;            /* ns (bpf_ktime_get_ns) of last use, for collection */
	__u32 nr;              /* frames in ips */
	__u32 end;             /* enum stack_end */
	__u32 uid;             /* whose share it counts in (events.bpf.c; 0 elsewhere) */
	__u32 _pad;
	__u64 ips[EMBERD_STACK_SLOTS]; /* innermost first; only nr are meaningful */
};

/* ---- user-stack unwinding (bpf/unwind.h; rows built by src/unwind/) ---- */

/*
 * Program forms, chosen by the agent at load time (src/collect/forms.rs).
 * Each program that walks user stacks is built in both:
 * - the loop form (Linux 5.17+) steps with bpf_loop and finds mappings the
 *   agent has not listed with bpf_find_vma;
 * - the bounded form (Linux 5.10+) steps in a bounded loop over a global
 *   function and leaves unlisted mappings to the agent. Linux before 5.13
 *   cannot load a program holding a callback at all, reached or not (it
 *   counts subprograms without them: "number of funcs in func_info doesn't
 *   match number of subprogs"), so the two cannot be one program.
 * What else differs (task storage or a hash of thread ids,
 * bpf_task_pt_regs or the top of the task's stack,
 * bpf_get_current_task_btf, fetching atomics) follows `config.bounded`:
 * read-only data the verifier takes as a constant, so the branch a kernel
 * cannot load is never checked.
 */
#define EMBERD_FORM_LOOP 0
#define EMBERD_FORM_BOUNDED 1
/* x86_64's THREAD_SIZE without KASAN: a task's user registers are the top
 * pt_regs of its kernel stack. Used only when the agent could not read the
 * kernel's own (`unwind_config.thread_size` in bpf/unwind.h, from its BTF: see
 * src/collect/forms.rs); the registers found are checked either way
 * (bpf/unwind.h's user_regs_plausible). */
#define EMBERD_THREAD_SIZE 16384
/* x86_64's user segment selectors (arch/x86/include/asm/segment.h, the
 * same since Linux 2.6.24): GDT entries 6 (__USER_DS, also the 32-bit
 * one), 4 (__USER32_CS) and 6 (__USER_CS), each with RPL 3. */
#define EMBERD_USER_CS 0x33
#define EMBERD_USER32_CS 0x23
#define EMBERD_USER_DS 0x2b
/* The end of the user half of the address space with 4-level paging
 * (TASK_SIZE_MAX + a page): no user stack or code lies above it. */
#define EMBERD_USER_END 0x800000000000ULL

/*
 * A file's table as the BPF unwinder reads it: one block of 32-bit words
 * in `unwind_rows` (built by src/unwind/packed.rs, keep in step):
 *   [0] the first 64 KiB page of the file's code (file address >> 16)
 *   [1] n, the pages the table spans
 *   [2 + p] the word (from the block's start) of page p's first row, for
 *           p in 0..=n ([2 + n] is the end of the rows)
 *   rows: pc & 0xffff << 16 | index in `unwind_infos`, sorted by pc within
 *         each page, every page's first row at its offset 0
 * Four bytes a row, where a row with its own pc and rule took eight: the
 * rules a compiler emits are few (a host's tables share a few thousand),
 * so a row names its rule by index.
 */
#define EMBERD_TABLE_HEADER 2
/* The array's elements: BPF arrays lay values out 8 bytes apart, so the
 * words go two to an element (word i is w[i & 1] of element i >> 1), which
 * keeps the mmapped array one run of words. */
struct table_words {
	__u32 w[2];
};
#define EMBERD_ROW_PC_SHIFT 16
#define EMBERD_ROW_INFO_MASK 0xffff
#define EMBERD_PAGE_SHIFT 16

/* A row's rule (`unwind_infos`; index 0 is CFA_NONE, all zeros). */
struct unwind_info {
	__u32 cfa_offset;      /* CFA = reg + cfa_offset (rustc has 540 KB frames); CFA_PLT: the threshold */
	__s8 rbp_offset;       /* RBP_AT_CFA: caller's rbp at CFA + 8 * rbp_offset */
	__u8 rule;             /* low 4 bits enum unwind_cfa, high 4 bits enum unwind_rbp */
	__u16 _pad;
};

#define EMBERD_MAX_INFOS 65536

enum unwind_cfa {
	CFA_NONE = 0,          /* no FDE covers the pc */
	CFA_RSP = 1,
	CFA_RBP = 2,
	CFA_PLT = 3,           /* rsp + 8, + 8 if (rip & 15) >= cfa_offset */
	CFA_SIGNAL = 4,        /* signal trampoline: registers in the ucontext at rsp */
	CFA_END = 5,           /* return address undefined: the outermost frame */
	CFA_UNSUPPORTED = 6,
};

enum unwind_rbp {
	RBP_SAME = 0,
	RBP_AT_CFA = 1,
	RBP_UNSUPPORTED = 2,
};

/* How to unwind through a mapping. */
enum unwind_map_kind {
	UNWIND_MAP_TABLE = 0,    /* the block [table_start, +table_len) of unwind_rows */
	UNWIND_MAP_FP = 1,       /* anonymous code (JIT): frame pointers */
	UNWIND_MAP_NO_INFO = 2,  /* a file without CFI: frame pointers, marker if they fail */
	UNWIND_MAP_NOT_READY = 3, /* table not built yet: frame pointers (counted) */
	UNWIND_MAP_NO_ROW = 4,   /* not a mapping kind: a pc of a TABLE mapping no row covers */
	UNWIND_MAP_BUDGET = 5,   /* a file with CFI whose table had no room: frame pointers, marker if they fail */
};

#define EMBERD_MAX_MAPPINGS 128

struct unwind_mapping {
	__u64 start;           /* runtime addresses [start, end) */
	__u64 end;
	__u64 bias;            /* runtime address - file virtual address */
	__u32 table_start;
	__u32 table_len;
	__u32 kind;            /* enum unwind_map_kind */
	__u32 _pad;
};

/*
 * A mapped file's table by the inode the kernel maps (`file_tables`), for
 * code in mappings the agent has not listed yet (a process that just
 * started or mapped a library): found through bpf_find_vma, so a new
 * process's frames in libc unwind with libc's table from its first sample.
 * Keyed as /proc/PID/maps shows a mapping: the inode's superblock device
 * (kernel dev_t, major << 20 | minor) and inode number.
 */
struct file_key {
	__u64 dev;
	__u64 ino;
};

#define EMBERD_FILE_SEGS 4

/* A PT_LOAD segment of the file: a mapping at file offset `off` (page
 * aligned) with off_lo <= off < off_hi has bias start - off + delta. */
struct file_seg {
	__u64 off_lo;
	__u64 off_hi;
	__u64 delta;           /* p_offset - p_vaddr */
};

struct file_table {
	__u32 table_start;
	__u32 table_len;
	__u32 kind;            /* UNWIND_MAP_TABLE, _NO_INFO or _BUDGET */
	__u32 nsegs;           /* executable segments first */
	struct file_seg segs[EMBERD_FILE_SEGS];
};

/* A process's executable mappings, sorted by start. */
struct proc_unwind {
	__u32 nr;
	__u32 _pad;
	__u64 read_ns;         /* bpf_ktime_get_ns before the agent read the mappings */
	struct unwind_mapping maps[EMBERD_MAX_MAPPINGS];
};

/* ---- interpreter frames (bpf/python.h; layouts from src/runtime/python/) ----
 *
 * A stack's ips hold native addresses, or, where the native walker met an
 * interpreter's eval loop, the interpreted frames that call of the loop was
 * running, one slot each, tagged in the top byte. Top bytes 0xe0-0xef are
 * the runtimes' tags (bpf/runtime.h; no user or kernel address has them):
 *   EMBERD_PY_FRAME | instruction index << 40 | code fingerprint (40 bits)
 *   EMBERD_PY_MARK  | enum py_mark
 * The fingerprint names a `py_code` record (map py_codes, key tgid and
 * fingerprint) that the walker wrote when it first met the code object.
 */
#define EMBERD_TAG_MASK   0xff00000000000000ULL
#define EMBERD_PY_FRAME   0xec00000000000000ULL
#define EMBERD_PY_MARK    0xee00000000000000ULL
#define EMBERD_PY_FP_BITS 40
#define EMBERD_PY_FP_MASK ((1ULL << EMBERD_PY_FP_BITS) - 1)
/* Instruction index (code units) kept in a frame slot; larger saturate. */
#define EMBERD_PY_LASTI_MAX 0xffffULL

/* Why Python frames are missing where an eval loop ran; keep in step with
 * `PyMark` in src/runtime/python/names.rs. */
enum py_mark {
	PY_MARK_NO_THREAD = 1,   /* the thread state could not be read */
	PY_MARK_FRAME_READ = 2,  /* a frame could not be read */
	PY_MARK_CODE_READ = 3,   /* a code object could not be read */
	PY_MARK_BAD_KEY = 4,     /* the thread-state TLS key is not one emberd can read */
	PY_MARK_LOOP = 5,        /* the native walk reached its root with Python frames left */
};

/* Byte offsets into CPython's structures; 0xffff: the field is not used. */
struct py_layout {
	__u16 tstate_cframe;     /* PyThreadState.cframe (3.11, 3.12) */
	__u16 cframe_frame;      /* _PyCFrame.current_frame */
	__u16 tstate_frame;      /* PyThreadState.current_frame (3.13) */
	__u16 frame_code;        /* _PyInterpreterFrame.f_code / f_executable */
	__u16 frame_previous;
	__u16 frame_instr;       /* prev_instr (3.11, 3.12) / instr_ptr (3.13) */
	__u16 frame_entry;       /* is_entry (3.11) or owner (3.12+), one byte */
	__u16 code_filename;
	__u16 code_qualname;
	__u16 code_linetable;
	__u16 code_firstlineno;  /* int */
	__u16 code_adaptive;     /* co_code_adaptive: the first code unit */
	__u16 str_length;        /* PyASCIIObject.length */
	__u16 str_hash;
	__u16 str_state;         /* the state bitfield's first byte */
	__u16 str_ascii_data;    /* data of a compact ASCII string */
	__u16 str_compact_data;  /* data of a compact non-ASCII string */
	__u8 entry_is_owner;     /* 1: frame_entry is `owner`, the C-stack shim is 3 */
	__u8 minor;              /* 8 to 10: frame objects (PyFrameObject), one per
				  * eval-loop call, frame_instr the int f_lasti (in
				  * bytes up to 9, code units on 10); 11 on:
				  * interpreter frames, frame_instr a pointer */
	__s32 tstate_tls;        /* 3.15 on: the thread state is at fsbase + this (a
				  * static TLS variable); 0: through the pthread key */
	__u16 tstate_base_frame; /* 3.15 on: PyThreadState.base_frame, the shim
				  * frame at the bottom of every thread's chain */
	__u8 _pad[6];
};

/* One Python process: where its interpreter is and how to read it. */
struct py_proc {
	__u64 eval_start;        /* runtime addresses of _PyEval_EvalFrameDefault */
	__u64 eval_end;
	__u64 tss_addr;          /* runtime address of _PyRuntime's Py_tss_t (autoTSSkey) */
	__u32 tls_specific;      /* glibc: key K's value at fsbase + this + 16 * K + 8 */
	__u32 version;           /* Py_Version */
	struct py_layout layout;
};

#define EMBERD_PY_QUALNAME_LEN 128
#define EMBERD_PY_FILENAME_LEN 96
#define EMBERD_PY_LINETABLE_LEN 256

struct py_code_key {
	__u32 tgid;
	__u32 _pad;
	__u64 fingerprint;       /* the frame slot's low EMBERD_PY_FP_BITS */
};

/* What the walker read of a code object when it first met it. Strings are
 * raw data of the str object: `*_kind` 0 is ASCII, else bytes per
 * character (1, 2, 4); the filename keeps its tail, the qualname its head. */
struct py_code {
	__u32 firstlineno;
	__u32 qualname_len;      /* characters of the str (may exceed what was copied) */
	__u32 filename_len;
	__u16 linetable_len;     /* bytes of co_linetable (may exceed what was copied) */
	__u8 qualname_kind;
	__u8 filename_kind;
	__u8 qualname[EMBERD_PY_QUALNAME_LEN];
	__u8 filename[EMBERD_PY_FILENAME_LEN];
	__u8 linetable[EMBERD_PY_LINETABLE_LEN];
	__u64 used;              /* ns (bpf_ktime_get_ns) the walker last met it: the agent collects old ones */
	__u32 uid;               /* account of the walked thread (its real uid, or its subuid range's owner): whose share it counts in */
	__u8 minor;              /* the layout's: how `linetable` is encoded
				  * (co_lnotab up to 9, 3.10's co_linetable, 3.11's
				  * locations) */
	__u8 _pad[3];
};

/* Indices of each object's `unwind_counters`, read by index by
 * `UnwindCounters` in src/collect/stack.rs (generated constants). */
enum unwind_counter {
	UCOUNTER_WALKS = 0,          /* user stacks walked */
	UCOUNTER_NOT_READY,          /* walks of processes without tables yet */
	UCOUNTER_TABLE_STEPS,        /* frames unwound by table */
	UCOUNTER_FP_STEPS,           /* frames unwound by frame pointer */
	UCOUNTER_LOST_FULL,          /* stacks lost: stack map full */
	UCOUNTER_LOST_COLLISION,     /* stacks lost: 64-bit key collision */
	UCOUNTER_PY_FRAMES,          /* Python frames read */
	UCOUNTER_PY_CODES,           /* code objects read (not yet in py_codes) */
	UCOUNTER_PY_MARK_BASE,       /* + enum py_mark: why Python frames were missing */
	UCOUNTER_PY_MARK_END = UCOUNTER_PY_MARK_BASE + 6,
	UCOUNTER_END_BASE = UCOUNTER_PY_MARK_END, /* + enum stack_end: how user walks ended */
	UCOUNTER_PY_CODE_SHARE = UCOUNTER_END_BASE + STACK_END_MAX, /* code records refused: their user holds their share of py_codes */
	UCOUNTER_PY_CODE_FULL,       /* code records refused: py_codes full */
	UCOUNTER_JAVA_FRAMES,        /* Java frames (interpreted, compiled, stubs) unwound */
	UCOUNTER_JAVA_MARK_BASE,     /* + enum java_mark: why a Java walk stopped */
	UCOUNTER_JAVA_MARK_END = UCOUNTER_JAVA_MARK_BASE + 4,
	UCOUNTER_V8_FRAMES = UCOUNTER_JAVA_MARK_END, /* JavaScript frames read */
	UCOUNTER_V8_TYPED,           /* V8's own frames (entry, exit, stubs) left native */
	UCOUNTER_V8_NOT_JS,          /* frames in V8 code whose function could not be read, left native */
	UCOUNTER_MAX,
};

/* ---- HotSpot frames (bpf/hotspot.h; layouts from src/runtime/hotspot/) ----
 *
 * The JVM's code cache is walked by the JVM's own rules, one frame a step,
 * each frame one tagged slot (top bytes 0xe0-0xe3):
 *   EMBERD_JAVA_INTERP   | Method* >> 3 << 12 | bci (12 bits; 0xfff: unknown)
 *   EMBERD_JAVA_COMPILED | top << 55 | (compile id & 0xffffff) << 31 | pc - code cache low
 *   EMBERD_JAVA_STUB     | pc - code cache low
 *   EMBERD_JAVA_MARK     | enum java_mark
 * The agent names them from the process's memory at the drain, and checks
 * a compiled frame's blob still holds the same compilation. `top` marks the
 * frame a sample interrupted (its pc is any instruction; a caller's is a
 * return address, whose debug information HotSpot records exactly).
 */
#define EMBERD_JAVA_INTERP    0xe000000000000000ULL
#define EMBERD_JAVA_COMPILED  0xe100000000000000ULL
#define EMBERD_JAVA_STUB      0xe200000000000000ULL
#define EMBERD_JAVA_MARK      0xe300000000000000ULL
#define EMBERD_JAVA_BCI_BITS  12
#define EMBERD_JAVA_PC_BITS   31
#define EMBERD_JAVA_TOP       (1ULL << 55)
#define EMBERD_JAVA_HEAPS     3

/* Why a Java walk stopped (a marker slot ends the stack); keep in step with
 * `JavaMark` in src/runtime/hotspot/frames.rs. */
enum java_mark {
	JAVA_MARK_OTHER = 0,
	JAVA_MARK_READ = 1,      /* a frame or blob could not be read */
	JAVA_MARK_NO_BLOB = 2,   /* a code cache address in no blob */
	JAVA_MARK_FRAME = 3,     /* a frame that does not move up the stack */
	JAVA_MARK_MAX,
};

/* One code heap: its reserved code and its segment map. */
struct hs_heap {
	__u64 low;
	__u64 high;
	__u64 segmap;
	__u32 log2_segment;
	__u32 _pad;
};

/* Byte offsets into HotSpot's structures (src/runtime/hotspot/layout.rs). */
struct hs_layout {
	__u16 heap_block;           /* sizeof(HeapBlock): a blob's start in its block */
	__u16 blob_name;            /* CodeBlob::_name (const char*) */
	__u16 blob_frame_size;      /* CodeBlob::_frame_size (int, words) */
	__u16 blob_frame_complete;  /* CodeBlob::_frame_complete_offset */
	__u16 blob_code;            /* CodeBlob::_code_begin (address) or _code_offset (int) */
	__u16 blob_kind;            /* CodeBlob::_kind (u1); 0xffff: none, the name says */
	__u16 nmethod_compile_id;   /* nmethod::_compile_id (int) */
	__u8 frame_complete_width;  /* 2 or 4 bytes */
	__u8 code_is_offset;        /* blob_code is an offset from the blob */
	__s8 frame_method;          /* interpreter frame: Method* at rbp + 8 * this */
	__s8 frame_bcp;             /* and the bytecode pointer */
	__u8 kind_nmethod;          /* CodeBlobKind::Nmethod */
	__u8 _pad;
	__u16 method_const;         /* Method::_constMethod */
	__u16 const_size;           /* sizeof(ConstMethod): its bytecodes follow it */
	__u32 _pad2;
};

/* A HotSpot JVM's process (map hs_procs, key tgid). */
struct hs_proc {
	__u64 code_low;             /* CodeCache's reserved bounds: the walk's claim */
	__u64 code_high;
	__u64 interp_low;           /* the template interpreter's code */
	__u64 interp_high;
	__u64 call_stub_return;     /* where Java code returns into the call stub */
	struct hs_heap heaps[EMBERD_JAVA_HEAPS];
	struct hs_layout layout;
};

/* ---- V8 frames (bpf/v8.h; offsets from src/runtime/v8/) ----
 *
 * Where the native walker meets V8's code (its JIT code and its builtins)
 * in a process the agent listed as node, the frame's function is read
 * from the frame (V8 keeps a frame pointer in every frame it builds, with
 * the JSFunction below it) and pushed as one tagged slot (top byte 0xe4):
 *   EMBERD_V8_FRAME | kind << 54 | check << 44 | SharedFunctionInfo >> 3
 * `kind` is enum v8_kind; `check` is 10 bits of a hash of the function
 * info's name and script pointers as read at the sample (V8_CHECK): the
 * agent names the frame at the drain only if the object there is still a
 * SharedFunctionInfo with the same check, so a function moved by the GC
 * and another put in its place is a marker, not a wrong name.
 */
#define EMBERD_V8_FRAME      0xe400000000000000ULL
#define EMBERD_V8_KIND_SHIFT 54
#define EMBERD_V8_CHECK_SHIFT 44
#define EMBERD_V8_CHECK_BITS 10
/* Keep in step with `check_of` in src/runtime/v8/frames.rs. */
#define V8_CHECK(name, script)                                                  \
	((((name) ^ ((script) * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL) >> \
	 (64 - EMBERD_V8_CHECK_BITS))

/*
 * A frame of optimized code (Maglev, TurboFan) has a second slot, leafward
 * of its function's, with its pc, from which the agent names the functions
 * inlined there, and the high 7 bits of the check:
 *   EMBERD_V8_FRAME | kind << 54 | check >> 3 << 47 | pc
 */
#define EMBERD_V8_PC_BITS 47

/* What ran the frame; keep in step with `V8Kind` in src/runtime/v8/frames.rs. */
enum v8_kind {
	V8_KIND_INTERPRETED = 0, /* Ignition: the frame holds a bytecode offset */
	V8_KIND_COMPILED = 1,    /* Sparkplug, Maglev or TurboFan code, by function */
	V8_KIND_OPTIMIZED = 2,   /* the pc slot: at the pc the sample interrupted */
	V8_KIND_OPTIMIZED_CALL = 3, /* the pc slot: at a return address */
	V8_KIND_MAX,
};

/* Byte offsets and instance types of a V8 build (src/runtime/v8/layout.rs). */
struct v8_layout {
	__s8 fp_function;        /* the frame's JSFunction at fp + this */
	__s8 fp_context;         /* its context, or a typed frame's marker (SMI) */
	__s8 fp_bytecode_offset; /* an interpreted frame's bytecode offset (SMI) */
	__s8 fp_bytecode_array;  /* an interpreted or baseline frame's BytecodeArray */
	__u16 map_instance_type; /* Map::instance_type (u16) */
	__u16 function_shared;   /* JSFunction::shared */
	__u16 shared_name;       /* SharedFunctionInfo::name_or_scope_info */
	__u16 shared_script;     /* SharedFunctionInfo::script(_or_debug_info) */
	__u16 type_function_first; /* JSFunction instance types (subclasses form a range) */
	__u16 type_function_last;
	__u16 type_shared;       /* SHARED_FUNCTION_INFO_TYPE */
	__u16 type_bytecode_array; /* BYTECODE_ARRAY_TYPE */
	__u8 by_pc;              /* the agent names optimized code by pc */
	__u8 _pad[3];
};

/* A node process (map v8_procs, key tgid): the code V8 runs (the walk's
 * claims) and its build's layout. */
struct v8_proc {
	__u64 code_low;          /* JIT code and builtins copied or mapped there */
	__u64 code_high;
	__u64 blob_low;          /* the builtins in the binary's own text; 0: none */
	__u64 blob_high;
	struct v8_layout layout;
};

/* One aggregation key per (thread, stacks). Value: u64 number of samples. */
struct sample_key {
	__u32 tgid;
	__u32 pid;
	__u64 kstack;          /* stack key, or EMBERD_STACK_NONE / EMBERD_STACK_LOST */
	__u64 ustack;
	char comm[EMBERD_COMM_LEN];
	/*
	 * CLOCK_MONOTONIC / EMBERD_TICK_NS (low 32 bits) of the sample: the
	 * web page's sub-second selection needs to know which 20 ms the
	 * samples fell in. At 99 Hz a CPU samples at most twice a tick, so
	 * there are never more keys than samples.
	 */
	__u32 tick;
	/* The thread's account (account_of its real uid), taken with the
	 * sample: the store's fold for room weighs and folds stacks by account
	 * (src/store/), and a process gone before the agent read its status
	 * file must still count in its user's. */
	__u32 account;
};

/*
 * Indices of the per-CPU counters map: `Counter` in src/collect/counters.rs
 * (its values, checked at build time).
 */
enum emberd_counter {
	COUNTER_SAMPLES = 0,        /* samples the program saw, idle included */
	COUNTER_IDLE_SKIPPED,       /* samples of the idle task, left out */
	COUNTER_FILTERED,           /* samples of other processes when one pid is profiled */
	COUNTER_KSTACK_COLLISION,   /* another kernel stack has the same 64-bit key */
	COUNTER_USTACK_COLLISION,
	COUNTER_STACK_MAP_FULL,     /* the stack map refused a new stack */
	COUNTER_USTACK_MISSING,     /* user task whose user stack could not be read */
	COUNTER_COUNTS_FULL,        /* the counts map refused a new key: the sample is lost */
	COUNTER_NEW_PROCESS_DROPPED, /* new_tgids was full: a process's maps are read late */
	COUNTER_MAX,
};

/* Load-time settings, written between open and load. */
struct emberd_config {
	__u32 target_tgid;  /* 0: every process */
	__u8 include_idle;  /* 1: keep samples of the idle task (pid 0) */
	__u8 bounded;       /* the bounded form is loaded (see EMBERD_FORM_LOOP) */
	__u8 _pad[2];
};

/* ---- events.bpf.c: off-CPU, wakeup, off-wake chains, page faults ---- */

/* The ids of stored events: each row of EVENTS in src/shared/events.rs
 * names its own (generated constants). */
enum emberd_event {
	EVENT_OFFCPU = 1,   /* value: ns blocked, charged to the blocked stack */
	EVENT_WAKEUP = 2,   /* value: ns the woken thread had blocked, charged to the waker's stack */
	EVENT_OFFWAKE = 3,  /* value: ns blocked, blocked stack and waker stack */
	EVENT_PAGEFAULT = 4, /* value: page faults (sampled count x period) */
	EVENT_BRK = 5,      /* value: bytes the break grew by, charged to the brk() caller */
	EVENT_MMAP = 6,     /* value: bytes mapped; label "anon" or "file" */
	EVENT_MUNMAP = 7,   /* value: bytes unmapped */
	EVENT_BLOCKIO = 8,  /* value: ns from the request's start to its completion; label: device */
	EVENT_MALLOC = 9,   /* value: bytes allocated (sampled by bytes, weighed) */
	EVENT_MALLOC_OBJECTS = 10, /* value: objects allocated (sampled, weighed) */
};

/* Length of an event's label (device name, mapping kind). */
#define EMBERD_LABEL_LEN 16

/* One aggregation key for every event; waker fields are zero unless used. */
struct event_key {
	__u32 event;
	__u32 tgid;
	__u32 pid;
	__u32 waker_tgid;
	__u32 waker_pid;
	__u32 account;         /* whose stacks these are (as sample_key's): the subject's, a root waker's wakee's */
	__u64 kstack;          /* keys of event_stacks, or EMBERD_STACK_NONE / _LOST */
	__u64 ustack;
	__u64 waker_kstack;
	__u64 waker_ustack;
	char comm[EMBERD_COMM_LEN];
	char waker_comm[EMBERD_COMM_LEN];
	char label[EMBERD_LABEL_LEN]; /* drawn as a leaf frame "[label]"; empty: none */
};

/*
 * A thread off CPU since `ts`, with the user stack it blocked in (its kernel
 * stack is walked when it comes back, see events.bpf.c).
 */
struct blocked {
	__u64 ts;              /* ns, bpf_ktime_get_ns; 0: not blocked */
	__u64 ustack;          /* event_stacks key */
	__u64 waker_kstack;
	__u64 waker_ustack;
	__u32 tgid;
	__u32 ustack_p;        /* chance the user stack was taken, of EMBERD_P_ONE; 0: not taken */
	__u32 waker_p;         /* chance the waker was recorded with, of EMBERD_P_ONE */
	__u32 waker_tgid;      /* set by sched_waking when has_waker */
	__u32 waker_pid;
	__u32 has_waker;       /* the waker's stacks were recorded */
	__u32 short_run;       /* periods ended since the last long one (events.bpf.c) */
	__u32 uid;             /* the blocked thread's account (account_of its real uid): whose share its stacks count in */
	__u32 owner;           /* bounded form: the uid whose share of blocked_by_tid the entry counts in */
	char comm[EMBERD_COMM_LEN];
	char waker_comm[EMBERD_COMM_LEN];
	__u64 timer_ustack;    /* node: the stack that armed the timer the block sleeps until (bpf/node_timers.h); EMBERD_STACK_NONE: none */
	__u64 poll_end;        /* ns the poll sleeping until that timer times out */
};

/* Probabilities in events.bpf.c are fixed point: EMBERD_P_ONE is certainty. */
#define EMBERD_P_ONE (1U << 16)
/* The least predicted chance (1/8), however short the thread's previous
 * block: bounds the weight of a long block that follows short ones. */
#define EMBERD_P_FLOOR (EMBERD_P_ONE >> 3)
/* Short periods after a long one during which a thread's prediction stays
 * certain (events.bpf.c). */
#define EMBERD_SHORT_GRACE 3
/* Entries of events.bpf.c's `predicted` array, indexed by thread id modulo this. */
#define EMBERD_PREDICTED_SLOTS 65536

/* Indices of the events program's per-CPU counters, read by index by
 * `EventSampler::counters` in src/collect/events.rs (generated constants). */
enum emberd_event_counter {
	ECOUNTER_SWITCHES = 0,     /* sched_switch calls seen */
	ECOUNTER_WAKEUPS,          /* sched_waking calls seen */
	ECOUNTER_PAGEFAULTS,       /* page-fault samples seen */
	ECOUNTER_BLOCKED_FULL,     /* blocked-thread table full: an off-CPU period is lost */
	ECOUNTER_COUNTS_FULL,      /* off-CPU counts buffer full: an off-CPU period is lost (other kinds below) */
	ECOUNTER_STACK_LOST,       /* stack collision or full stack map */
	ECOUNTER_SAMPLED_OUT,      /* off-CPU periods skipped by the 1-in-N sampling knob */
	ECOUNTER_NEW_PROCESS_DROPPED, /* new_tgids full: a process's maps are read late */
	ECOUNTER_SHORT_OFFCPU_SAMPLED_OUT, /* short off-CPU periods not recorded (sample_below_ns) */
	ECOUNTER_SHORT_WAKEUP_SAMPLED_OUT, /* wakeups ending short blocks not recorded */
	ECOUNTER_BRK,              /* brk() calls that grew the heap, recorded */
	ECOUNTER_MMAP,             /* mmap() calls recorded */
	ECOUNTER_MUNMAP,           /* munmap() calls recorded */
	ECOUNTER_SYSCALL_STATE_FULL, /* a syscall's entry state could not be kept: call lost */
	ECOUNTER_BLOCKIO,          /* block I/O requests completed and recorded */
	ECOUNTER_BLOCKIO_UNMATCHED, /* completions without a recorded start (started before load, or table full) */
	ECOUNTER_BLOCKIO_FULL,     /* in-flight request table full: a request is lost */
	ECOUNTER_MALLOC_CALLS,     /* allocation calls seen in chosen processes */
	ECOUNTER_MALLOC_SAMPLED,   /* allocations sampled (recorded with their stack) */
	ECOUNTER_FREE_CALLS,       /* free() calls seen */
	ECOUNTER_FREE_TRACKED,     /* frees of sampled allocations (in-use view) */
	ECOUNTER_MALLOC_LIVE_FULL, /* live-allocation table full: a sample counts as allocated only */
	ECOUNTER_HEAP_RING_FULL,   /* heap ring buffer full: an alloc or free record lost */
	ECOUNTER_BLOCKIO_END_NOT_SEEN, /* a request's address started again with no completion seen: its start is dropped */
	ECOUNTER_NESTED_SKIPPED,   /* a program ran inside another on its CPU (an interrupt's wakeup, a preemption) and was skipped */
	ECOUNTER_STACK_SHARE,      /* a new stack refused: its user holds their share of event_stacks */
	ECOUNTER_DROPPED_FULL,     /* an event the counts map could not take, lost: the dropped map was full too */
	ECOUNTER_BLOCKED_SHARE,    /* bounded form: a thread's off-CPU state refused, its user holds their share of blocked_by_tid: a period is lost */
	ECOUNTER_WAKEUP_COUNTS_FULL, /* wake counts buffer full: a wakeup is lost */
	ECOUNTER_OFFWAKE_COUNTS_FULL, /* wake counts buffer full: an off-wake chain is lost */
	ECOUNTER_OTHER_COUNTS_FULL, /* counts buffer full: a page fault, block I/O or memory event is lost */
	ECOUNTER_TIMER_ARMS,       /* uv_timer_start calls of node processes seen (bpf/node_timers.h) */
	ECOUNTER_TIMER_WAITS,      /* off-CPU periods charged to the stack that armed their timer */
	ECOUNTER_OFFCPU_BEGUN,     /* off-CPU periods begun: a thread left the CPU in a counted state and its state was kept */
	ECOUNTER_OFFCPU_ENDED,     /* off-CPU periods ended: a thread with a kept period ran again (charged, sampled out or out of bounds) */
	ECOUNTER_PREEMPTED_ASLEEP, /* pre-5.18 programs: a thread preempted on its way to sleep, counted as running (no period begun) */
	ECOUNTER_MAX,
};

/* Load-time settings of events.bpf.c. */
struct events_config {
	__u64 min_block_ns;      /* shorter off-CPU periods are not charged */
	__u64 max_block_ns;      /* longer ones are not charged either (bcc -M) */
	__u32 state_mask;        /* prev_state bits that count; 0 = every state */
	__u32 sample_one_in;     /* record 1 in N switch-outs (1 = all), value scaled by N */
	__u64 pagefault_period;  /* faults per page-fault sample, to scale values */
	__u64 sample_below_ns;   /* shorter blocks are sampled (events.bpf.c) */
	__u32 target_tgid;       /* 0: every process */
	__u8 offcpu;             /* record off-CPU (and wakeup/offwake need it) */
	__u8 wakeup;
	__u8 offwake;
	__u8 brk;                /* record brk() growth */
	__u8 mmap;               /* record mmap() bytes */
	__u8 munmap;             /* record munmap() bytes */
	__u8 blockio;            /* record block I/O latency */
	__u8 bounded;            /* the bounded form is loaded (see EMBERD_FORM_LOOP) */
	__u8 rq_after_queue;     /* block_rq_* pass (queue, request): before Linux 5.11 */
	__u8 _pad2[3];
	__u64 malloc_sample_bytes; /* mean bytes between malloc samples (0: every allocation) */
	__u64 stack_share;       /* stacks one user may hold in event_stacks (0: no limit) */
	__u64 drain_at;          /* keys in a counts buffer (either pair) at which the agent is woken to drain */
	__u32 blocked_share;     /* bounded form: blocked_by_tid entries one user other than root may hold (0: no limit) */
	__u32 _pad3;
};

/* A new-process ring notice that is no process: the events' counts buffer
 * is filling, drain it now. */
#define EMBERD_DRAIN_NOW 0xffffffffU

/* A record of the heap ring buffer (events.bpf.c's malloc probes): a sampled
 * allocation that is tracked live, or the free of one. */
enum heap_record_kind {
	HEAP_ALLOC = 1,
	HEAP_FREE = 2,
};

struct heap_record {
	__u32 kind;            /* enum heap_record_kind */
	__u32 tgid;
	__u32 pid;
	__u32 account;         /* the allocating thread's (as sample_key's) */
	__u64 addr;
	__u64 ustack;          /* event_stacks key (alloc) */
	__u64 bytes;           /* weighed bytes (alloc) */
	__u64 objects;         /* weighed objects (alloc) */
	char comm[EMBERD_COMM_LEN];
};

/* Which allocation function a malloc probe is attached to (its cookie). */
enum alloc_fn {
	ALLOC_MALLOC = 0,
	ALLOC_CALLOC = 1,
	ALLOC_REALLOC = 2,
	ALLOC_POSIX_MEMALIGN = 3,
	ALLOC_ALIGNED_ALLOC = 4,
};

#endif /* EMBERD_H */
