/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * CPython frames, read where the native walker (bpf/unwind.h) meets the
 * eval loop, which this runtime claims for the walk (bpf/walk.h) at
 * py_begin; bpf/runtime.h calls py_begin, py_enter, py_emit and py_finish: one native `_PyEval_EvalFrameDefault` call runs a run of
 * Python frames (3.11 on: calls between Python functions do not recurse in
 * C), so that native frame is replaced by the frames of its run, leaf
 * first, read from the thread's own frame chain.
 *
 * - The thread state comes from the pthread key CPython keeps it under
 *   (`_PyRuntime.autoTSSkey`): glibc keeps a key K < 32 at
 *   fsbase + tls_specific + 16 * K + 8, with tls_specific read by the agent
 *   from the process's libc (`pthread_getspecific`). It is set even while
 *   the thread has released the GIL (sleeping, hashing a buffer).
 * - A run ends at its entry frame: `is_entry` set (3.11), or the C-stack
 *   shim frame (`owner` 3) the eval loop pushes below the run (3.12 on),
 *   which is skipped. Up to 3.10 (`minor` 8 to 10) frames are frame objects
 *   (`f_back`, `f_code`, the int `f_lasti`) and every Python call is an
 *   eval-loop call of its own: each run is one frame.
 * - Each Python frame becomes one slot (EMBERD_PY_FRAME in bpf/emberd.h):
 *   the instruction index and a fingerprint of the code object, taken from
 *   its address and its name, file and line table (their pointers and the
 *   strings' hashes). The first time a (process, fingerprint) is seen the
 *   code object's names and line table are copied to `py_codes`, where the
 *   agent names it at the next drain. A code object freed and another made
 *   at its address has another fingerprint, so old samples keep the old
 *   name (the agent counts and marks a record it no longer finds).
 *
 * Every read is a bpf_probe_read_user of a bounded size: a process that
 * scribbles over its interpreter gets marker frames, never more work.
 * Offsets are data (`struct py_layout`, from src/runtime/python/layout.rs), so one
 * program serves every supported version.
 */
#ifndef EMBERD_PYTHON_H
#define EMBERD_PYTHON_H

#include <bpf/bpf_core_read.h>
#include "walk.h"

/* Bytes of a frame and of a code object read at once: every offset the
 * layouts use is below these. An interpreter frame (3.11 on) is read for
 * PY_IFRAME_READ only: its fields end there, and the frame may end a
 * mapping. */
#define PY_FRAME_READ 112
#define PY_IFRAME_READ 80
/* The last minor version whose frames are frame objects. */
#define PY_FRAME_OBJECTS_UNTIL 10
#define PY_CODE_READ 160
#define PY_STR_READ 48

/* Code objects remembered within one walk (recursion, a module's frames). */
#define PY_WALK_SLOTS 8
/* Entries of each CPU's cache of code records it found in py_codes. */
#define PY_SEEN_SLOTS 64

/* What one frame's reads fill, and the code record they write. */
struct py_scratch {
	__u8 frame[PY_FRAME_READ] __attribute__((aligned(8)));
	__u8 code[PY_CODE_READ] __attribute__((aligned(8)));
	__u8 qualname[PY_STR_READ] __attribute__((aligned(8)));
	__u8 filename[PY_STR_READ] __attribute__((aligned(8)));
	struct py_code rec;
} __attribute__((aligned(8)));

/* This runtime's part of a walk, per CPU. */
struct py_walk {
	__u8 state;   /* 0: no interpreter; 1: thread state not read yet; 2: read */
	__u8 emitted; /* Python frames pushed for the current run */
	__u8 failed;  /* a read failed: later eval-loop frames stay native */
	__u8 _pad[5];
	__u64 frame;  /* the next Python frame to push; 0: none */
	__u64 base_frame; /* 3.15 on: the thread's base frame, left at the root */
	__u32 frames; /* Python frames pushed by this walk */
	__u32 _pad2;
	struct py_proc proc; /* the process's interpreter, when state != 0 */
	/* Code records this CPU found in py_codes lately: tgid << 40 |
	 * fingerprint, and when. Kept across walks. */
	__u64 seen[PY_SEEN_SLOTS];
	__u64 seen_at[PY_SEEN_SLOTS];
	/* This walk's code objects and their fingerprints: valid while
	 * walk_code_gen equals the walk's gen. */
	__u64 walk_code[PY_WALK_SLOTS];
	__u64 walk_fp[PY_WALK_SLOTS];
	__u64 walk_code_gen[PY_WALK_SLOTS];
	__u64 walk_file; /* the last file name str this walk hashed */
	__u64 walk_file_hash;
	__u64 walk_file_gen;
	struct py_scratch scratch; /* one lookup less a frame */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_walk);
} py_walks SEC(".maps");

static __always_inline struct py_walk *this_py_walk(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&py_walks, &zero);
}

/* PyBytesObject (3.11-3.13): ob_size at 16, the bytes at 32. */
#define PY_BYTES_SIZE 16
#define PY_BYTES_DATA 32
/* py_codes records one user other than root may hold (0: no limit); set
 * by the agent before load (half of py_codes). */
const volatile __u32 py_code_share = 0;

/* How long a CPU trusts that a code record it met is still in py_codes. */
#define PY_SEEN_NS 100000000ULL
/* `owner` of the eval loop's C-stack shim frame (FRAME_OWNED_BY_CSTACK). */
#define PY_OWNED_BY_CSTACK 3

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096); /* set by the agent */
	__type(key, __u32);        /* tgid */
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/*
 * Code records, shared by every process of every user, so each user other
 * than root may hold at most `py_code_share` of them (half), counted
 * in `py_codes_by_uid`. Not an LRU map: its evictions take whichever
 * record the kernel's lists hold oldest, whoever's it is, so one user
 * compiling thousands of new functions a second pushed every other user's
 * names out before the drain named them (`[python: code evicted]`), share
 * or none (issue 41). In a plain hash nothing is evicted: a user at their
 * share, or anyone when it is full, has new records refused (counted,
 * UCOUNTER_PY_CODE_SHARE / _FULL), and the agent deletes the records no
 * walk has met for a few seconds (`used`, stamped at each lookup) and
 * recounts the shares (src/collect/mod.rs). Preallocated (2 MiB at the
 * default size), as perf_event programs need before Linux 6.1.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* set by the agent */
	__type(key, struct py_code_key);
	__type(value, struct py_code);
} py_codes SEC(".maps");

/* Records of `py_codes` each user (account: real uid, or its subuid range's
 * owner) holds, and every user but root together (EMBERD_ALL_USERS); see
 * above. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} py_codes_by_uid SEC(".maps");

/*
 * `n` at most `max`, in a way every verifier follows: the comparison and
 * the clamp are on the register the caller then passes as a size. Clang
 * otherwise folds `n && n <= max` into `n - 1 < max` on a copy, whose bound
 * verifiers before 6.8 do not carry back to `n` (Debian 12's 6.1 refused
 * the program: "R2 min value is negative").
 */
#define PY_CLAMP(n, max)                                                  \
	({                                                                \
		__u64 __n = (n);                                          \
		asm volatile("if %[v] <= %[m] goto +1; %[v] = %[m]"       \
			     : [v] "+r"(__n)                              \
			     : [m] "i"(max));                             \
		__n;                                                      \
	})

/* A field of a buffer read from the process; 0 when the offset is outside
 * it (a layout value the agent never writes). CPython's fields are
 * naturally aligned, and so are the buffers: one aligned load, where a
 * byte-wise copy was a sixth of a frame's cost. */
#define PY_FIELD(buf, off, type)                                                       \
	({                                                                             \
		__u64 __o = (off) & ~(__u32)(sizeof(type) - 1);                        \
		type __v = 0;                                                          \
		if (__o <= sizeof(buf) - sizeof(type)) {                               \
			/* Clang may test a copy of the offset and index with \
			 * another: clamped in the register that indexes. */  \
			__o = PY_CLAMP(__o, sizeof(buf) - sizeof(type));               \
			__v = *(type *)&(buf)[__o];                                    \
		}                                                                      \
		__v;                                                                   \
	})

static __always_inline __u64 py_mix(__u64 h, __u64 v)
{
	h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 31);
}

/* Where a str's characters start, and their kind (0 ASCII, else bytes per
 * character); -1 for a string emberd does not read (not compact). */
static __always_inline int py_str_data(struct py_layout *l, __u8 *hdr, __u64 obj, __u64 *data)
{
	__u8 state = PY_FIELD(((__u8(*)[PY_STR_READ])hdr)[0], l->str_state, __u8);
	__u8 kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;

	if (!compact)
		return -1;
	if (ascii) {
		*data = obj + l->str_ascii_data;
		return 0;
	}
	if (kind != 1 && kind != 2 && kind != 4)
		return -1;
	*data = obj + l->str_compact_data;
	return kind;
}


/* Copies what the agent needs to name a code object into py_codes, in the
 * walked thread's user's share. */
static __always_inline void py_remember(struct walk *w, struct py_scratch *sc,
					struct py_layout *l, struct py_code_key *key,
					__u64 qualname, __u64 filename, __u64 linetable)
{
	struct py_code *rec = &sc->rec;
	__u64 data = 0, len, n, *held = 0, *all = 0;
	int kind;

	if (py_code_share && w->uid != 0) {
		held = uid_count(&py_codes_by_uid, w->uid);
		all = all_users_count(&py_codes_by_uid);
		if (!within_share(held, all, py_code_share)) {
			ucount(UCOUNTER_PY_CODE_SHARE);
			return;
		}
	}
	rec->used = w->now;
	rec->uid = w->uid;
	rec->minor = l->minor;
	rec->_pad[0] = 0;
	rec->_pad[1] = 0;
	rec->_pad[2] = 0;

	rec->firstlineno = PY_FIELD(sc->code, l->code_firstlineno, __u32);
	rec->qualname_len = 0;
	rec->filename_len = 0;
	rec->linetable_len = 0;
	rec->qualname_kind = 0xff;
	rec->filename_kind = 0xff;

	kind = py_str_data(l, sc->qualname, qualname, &data);
	len = PY_FIELD(sc->qualname, l->str_length, __u64);
	if (kind >= 0 && len < (1 << 20)) {
		n = PY_CLAMP(len * (kind ? kind : 1), EMBERD_PY_QUALNAME_LEN);
		if (n && bpf_probe_read_user(rec->qualname, n, (void *)data) == 0) {
			rec->qualname_len = len;
			rec->qualname_kind = kind;
		}
	}
	/* The header may have been skipped (the walk knew the file's hash). */
	if (bpf_probe_read_user(sc->filename, sizeof(sc->filename), (void *)filename))
		kind = -1;
	else
		kind = py_str_data(l, sc->filename, filename, &data);
	len = PY_FIELD(sc->filename, l->str_length, __u64);
	if (kind >= 0 && len < (1 << 20)) {
		__u64 w = kind ? kind : 1, bytes = len * w;

		/* The tail: the file's own name is what a frame shows. */
		n = bytes;
		if (n > EMBERD_PY_FILENAME_LEN) {
			n = EMBERD_PY_FILENAME_LEN / w * w;
			data += bytes - n;
		}
		n = PY_CLAMP(n, EMBERD_PY_FILENAME_LEN);
		if (n && bpf_probe_read_user(rec->filename, n, (void *)data) == 0) {
			rec->filename_len = len;
			rec->filename_kind = kind;
		}
	}
	if (linetable) {
		__u64 size = 0;

		if (bpf_probe_read_user(&size, sizeof(size), (void *)(linetable + PY_BYTES_SIZE)) == 0 &&
		    size < (1 << 16)) {
			n = PY_CLAMP(size, EMBERD_PY_LINETABLE_LEN);
			if (n == 0 || bpf_probe_read_user(rec->linetable, n,
							  (void *)(linetable + PY_BYTES_DATA)) == 0)
				rec->linetable_len = size;
		}
	}
	if (bpf_map_update_elem(&py_codes, key, rec, BPF_NOEXIST) == 0) {
		count_in_share(held, all);
	} else if (!bpf_map_lookup_elem(&py_codes, key)) {
		ucount(UCOUNTER_PY_CODE_FULL);
	}
	ucount(UCOUNTER_PY_CODES);
}

static __always_inline __u64 py_mark(__u32 why)
{
	ucount(UCOUNTER_PY_MARK_BASE + (why < 6 ? why : 0));
	return EMBERD_PY_MARK | why;
}

/*
 * The thread's innermost Python frame (0: the thread runs no Python), or
 * a marker slot (EMBERD_PY_MARK | why) when it cannot be read. Global: the
 * verifier checks it once, on its own.
 */
__attribute__((noinline)) __u64 py_thread_frame(void)
{
	struct walk *w = this_walk();
	struct py_walk *p = this_py_walk();
	struct py_layout *l;
	__u64 tstate = 0, frame = 0, cframe = 0;
	__u32 tss[2] = {};

	if (!w || !p)
		return 0;
	l = &p->proc.layout;
	if (l->tstate_tls) {
		/* 3.15: a static TLS variable of the executable. */
		if (bpf_probe_read_user(&tstate, sizeof(tstate),
					(void *)(w->fsbase + (__s64)l->tstate_tls)))
			return py_mark(PY_MARK_NO_THREAD);
		goto have_tstate;
	}
	if (bpf_probe_read_user(tss, sizeof(tss), (void *)p->proc.tss_addr))
		return py_mark(PY_MARK_NO_THREAD);
	/* Py_tss_t: _is_initialized, then the pthread key. */
	if (!tss[0] || tss[1] >= 32)
		return py_mark(PY_MARK_BAD_KEY);
	if (bpf_probe_read_user(&tstate, sizeof(tstate),
				(void *)(w->fsbase + p->proc.tls_specific + 16 * (__u64)tss[1] + 8)))
		return py_mark(PY_MARK_NO_THREAD);
have_tstate:
	if (!tstate)
		return 0;
	p->base_frame = 0;
	if (l->tstate_base_frame != 0xffff &&
	    bpf_probe_read_user(&p->base_frame, sizeof(p->base_frame),
				(void *)(tstate + l->tstate_base_frame)))
		p->base_frame = 0;
	if (l->tstate_cframe != 0xffff) {
		if (bpf_probe_read_user(&cframe, sizeof(cframe), (void *)(tstate + l->tstate_cframe)))
			return py_mark(PY_MARK_NO_THREAD);
		if (!cframe)
			return 0;
		if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(cframe + l->cframe_frame)))
			return py_mark(PY_MARK_NO_THREAD);
	} else if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(tstate + l->tstate_frame))) {
		return py_mark(PY_MARK_NO_THREAD);
	}
	return frame;
}

/* Ends the run being pushed; with `failed`, Python is read no further in
 * this walk: later eval-loop frames stay native. */
static __always_inline void py_end_run(struct walk *w, struct py_walk *p, int failed)
{
	w->running = RUNTIME_NONE;
	if (failed) {
		p->frame = 0;
		p->failed = 1;
		walk_unclaim(w, RUNTIME_PYTHON);
	}
}

/*
 * One frame of the run of Python frames replacing an eval-loop frame: reads
 * p->frame, pushes its slot (or skips the C-stack shim that ends the run)
 * and moves to the caller. Ends the run (w->running) when it is over.
 */
static __always_inline void py_emit_one(struct walk *w, struct py_walk *p,
					struct stored_stack *s)
{
	struct py_scratch *sc = &p->scratch;
	struct py_layout *l = &p->proc.layout;
	struct py_code_key key = {};
	__u64 frame, code, qualname, filename, linetable, instr, base, idx, h, prev;
	__u64 file_hash = 0;
	__u32 nr = s->nr, wslot;
	__u8 entry;

	frame = p->frame;
	if (!frame) {
		py_end_run(w, p, 0);
		return;
	}
	if (l->minor <= PY_FRAME_OBJECTS_UNTIL ?
		    bpf_probe_read_user(sc->frame, PY_FRAME_READ, (void *)frame) :
		    bpf_probe_read_user(sc->frame, PY_IFRAME_READ, (void *)frame)) {
		s->ips[nr & 127] = py_mark(PY_MARK_FRAME_READ);
		goto fail;
	}
	prev = PY_FIELD(sc->frame, l->frame_previous, __u64);
	entry = l->minor <= PY_FRAME_OBJECTS_UNTIL ? 1 : PY_FIELD(sc->frame, l->frame_entry, __u8);
	if (l->entry_is_owner && entry == PY_OWNED_BY_CSTACK) {
		/* The shim below this run: the run is over. */
		p->frame = prev;
		py_end_run(w, p, 0);
		if (!p->emitted) {
			/* No Python frame in the run: keep the native frame. */
			s->ips[nr & 127] = w->replaced_pc;
			s->nr = nr + 1;
		}
		return;
	}
	code = PY_FIELD(sc->frame, l->frame_code, __u64);
	/* 3.14 on: a _PyStackRef, its low bits a tag. */
	if (l->minor >= 14)
		code &= ~7ULL;
	wslot = (code >> 4) & (PY_WALK_SLOTS - 1);
	if (p->walk_code_gen[wslot] == w->gen && p->walk_code[wslot] == code) {
		/* Met earlier in this walk: the same live object (the frames on
		 * a stack hold their code), so the same fingerprint. */
		key.fingerprint = p->walk_fp[wslot];
		goto push;
	}
	if (bpf_probe_read_user(sc->code, sizeof(sc->code), (void *)code)) {
		s->ips[nr & 127] = py_mark(PY_MARK_CODE_READ);
		goto fail;
	}
	qualname = PY_FIELD(sc->code, l->code_qualname, __u64);
	filename = PY_FIELD(sc->code, l->code_filename, __u64);
	linetable = PY_FIELD(sc->code, l->code_linetable, __u64);
	if (bpf_probe_read_user(sc->qualname, sizeof(sc->qualname), (void *)qualname)) {
		s->ips[nr & 127] = py_mark(PY_MARK_CODE_READ);
		goto fail;
	}
	/* A module's frames share its file name str: hashed once a walk. */
	if (p->walk_file_gen == w->gen && p->walk_file == filename) {
		file_hash = p->walk_file_hash;
	} else {
		if (bpf_probe_read_user(&file_hash, sizeof(file_hash),
					(void *)(filename + l->str_hash))) {
			s->ips[nr & 127] = py_mark(PY_MARK_CODE_READ);
			goto fail;
		}
		p->walk_file = filename;
		p->walk_file_hash = file_hash;
		p->walk_file_gen = w->gen;
	}
	h = py_mix(0x243f6a8885a308d3ULL, code);
	h = py_mix(h, qualname);
	h = py_mix(h, filename);
	h = py_mix(h, linetable);
	h = py_mix(h, PY_FIELD(sc->code, l->code_firstlineno, __u32));
	h = py_mix(h, PY_FIELD(sc->qualname, l->str_hash, __u64));
	h = py_mix(h, file_hash);
	key.tgid = w->tgid;
	key.fingerprint = h & EMBERD_PY_FP_MASK;
	{
		/* A record this CPU found (or wrote) in the last PY_SEEN_NS is
		 * still there: skip the hash lookup, a fifth of a frame's cost.
		 * Looking it up at least that often stamps it used, so the
		 * agent keeps it until the drain names it. */
		__u32 slot = key.fingerprint & (PY_SEEN_SLOTS - 1);
		__u64 tag = (__u64)key.tgid << EMBERD_PY_FP_BITS | key.fingerprint;

		if (p->seen[slot] != tag || w->now - p->seen_at[slot] > PY_SEEN_NS) {
			struct py_code *rec = bpf_map_lookup_elem(&py_codes, &key);

			/* Met again: the agent keeps it (it collects records
			 * unused for seconds). Written at most once per
			 * PY_SEEN_NS per CPU. */
			if (rec)
				rec->used = w->now;
			else
				py_remember(w, sc, l, &key, qualname, filename, linetable);
			p->seen[slot] = tag;
			p->seen_at[slot] = w->now;
		}
	}
	p->walk_code[wslot] = code;
	p->walk_fp[wslot] = key.fingerprint;
	p->walk_code_gen[wslot] = w->gen;
push:
	if (l->minor <= PY_FRAME_OBJECTS_UNTIL) {
		/* f_lasti: -1 before the first instruction. */
		__s32 lasti = PY_FIELD(sc->frame, l->frame_instr, __s32);

		idx = lasti < 0 ? 0 : l->minor <= 9 ? (__u64)lasti / 2 : (__u64)lasti;
	} else {
		instr = PY_FIELD(sc->frame, l->frame_instr, __u64);
		base = code + l->code_adaptive;
		idx = instr > base ? (instr - base) / 2 : 0;
	}
	if (idx > EMBERD_PY_LASTI_MAX)
		idx = EMBERD_PY_LASTI_MAX;
	s->ips[nr & 127] = EMBERD_PY_FRAME | idx << EMBERD_PY_FP_BITS | key.fingerprint;
	s->nr = nr + 1;
	p->emitted = 1;
	p->frames++;
	p->frame = prev;
	/* 3.11: the run's first frame says it is the entry; up to 3.10
	 * every frame is its own eval-loop call (entry set above). */
	if ((!l->entry_is_owner && entry) || !prev)
		py_end_run(w, p, 0);
	return;
fail:
	s->nr = nr + 1;
	/* The chain cannot be trusted past here. */
	py_end_run(w, p, 1);
}

/* Python frames pushed per step of the native walk's loop: the loop's
 * callback and its state lookups cost as much as a frame's reads. */
#define PY_FRAMES_PER_STEP 8

/*
 * Pushes up to PY_FRAMES_PER_STEP frames of the current run. Returns 1 when
 * the stack is full with the run unfinished (the walk ends truncated).
 * Global: the verifier checks it once, on its own.
 */
__attribute__((noinline)) int py_emit(void)
{
	struct walk *w = this_walk();
	struct py_walk *p = this_py_walk();
	struct stored_stack *s = scratch_stack();

	if (!w || !p || !s)
		return 1;
	for (int i = 0; i < PY_FRAMES_PER_STEP; i++) {
		if (w->running != RUNTIME_PYTHON)
			return 0;
		if (s->nr >= EMBERD_MAX_STACK_DEPTH)
			return 1;
		py_emit_one(w, p, s);
	}
	return 0;
}

/*
 * A walk begins: whether the walked process runs a CPython this runtime
 * reads (`py_procs`), looked up only when `listed` (the agent has read the
 * process); if so its eval loop is claimed for the walk. Returns 1 when
 * the walk needs the thread's TLS base (w->fsbase).
 */
static __always_inline int py_begin(struct walk *w, int listed)
{
	struct py_walk *p = this_py_walk();
	struct py_proc *py;

	if (!p)
		return 0;
	p->state = 0;
	p->failed = 0;
	p->frame = 0;
	p->frames = 0;
	if (!listed)
		return 0;
	py = bpf_map_lookup_elem(&py_procs, &w->tgid);
	if (!py)
		return 0;
	p->proc = *py;
	p->state = 1;
	walk_claim(w, RUNTIME_PYTHON, py->eval_start, py->eval_end);
	return 1;
}

/*
 * The native walker met an eval-loop frame at `pc`: its Python frames
 * replace it (pushed by the next steps through py_emit), then its caller
 * is found as for any native frame. Returns 1 when the frame was taken (a
 * run begun, or a marker pushed), 0 to push it as a native frame. Global:
 * its stack is not added to the walker's step (Linux 6.1 counts the
 * step, the program and one callee against 512 bytes together).
 */
__attribute__((noinline)) int py_enter(__u64 pc)
{
	struct walk *w = this_walk();
	struct stored_stack *s = scratch_stack();
	struct py_walk *p = this_py_walk();

	if (!w || !s || !p || p->failed)
		return 0;
	if (p->state == 1) {
		__u64 f = py_thread_frame();

		p->state = 2;
		if ((f & EMBERD_TAG_MASK) == EMBERD_PY_MARK) {
			py_end_run(w, p, 1);
			s->ips[s->nr & 127] = f;
			s->nr++;
			return 1;
		}
		p->frame = f;
	}
	if (!p->frame) {
		/*
		 * Up to 3.10 every eval-loop call has its own frame: one with
		 * none left means the thread was caught between the loop's
		 * entry and its setting the thread's frame (or between its
		 * restoring it and its return), so the frames named above sit
		 * one call off (1% of a TCG run's samples, generators resumed
		 * thousands of times a second). Marked here, not left silent.
		 */
		if (p->frames && p->proc.layout.minor <= PY_FRAME_OBJECTS_UNTIL &&
		    s->nr < EMBERD_MAX_STACK_DEPTH) {
			py_end_run(w, p, 1);
			s->ips[s->nr & 127] = py_mark(PY_MARK_LOOP);
			s->nr++;
			return 1;
		}
		return 0;
	}
	w->running = RUNTIME_PYTHON;
	w->replaced_pc = pc;
	p->emitted = 0;
	return 1;
}

/*
 * The walk ended `end`. Reaching its root with Python frames left over
 * means some eval-loop call was not seen as one (its return address in
 * code outside _PyEval_EvalFrameDefault's symbol, such as a .cold part),
 * so runs may sit under the wrong native frames: say so at the root.
 */
static __always_inline void py_finish(struct walk *w, struct stored_stack *s, __u32 end)
{
	struct py_walk *p = this_py_walk();

	if (!p || !p->state)
		return;
	if (p->state == 2 && !p->failed && p->frame && p->frame != p->base_frame &&
	    end == STACK_END_ROOT && s->nr < EMBERD_MAX_STACK_DEPTH) {
		s->ips[s->nr & 127] = py_mark(PY_MARK_LOOP);
		s->nr++;
	}
	if (p->frames)
		ucount_by(UCOUNTER_PY_FRAMES, p->frames);
}

#endif /* EMBERD_PYTHON_H */
