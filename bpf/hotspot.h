/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * HotSpot frames: the JVM's code cache walked by the JVM's own rules,
 * where the native walker (bpf/unwind.h) meets it. bpf/runtime.h calls
 * hs_begin, hs_enter and hs_finish.
 *
 * Compiled Java code keeps no frame pointer and has no .eh_frame, so a
 * native walk stops (or goes wrong) at the first Java frame. HotSpot knows
 * each frame's shape, and says where in memory (src/runtime/hotspot/):
 * - the code cache's heaps each keep a segment map, one byte per segment:
 *   0 starts a block, 0xff is free, n says "n segments back"; a blob (its
 *   header: name, frame size, where its code starts) follows its block's
 *   header;
 * - a compiled frame (C1, C2, a native wrapper) is `_frame_size` words
 *   above its sp, the return address in its top word, the caller's rbp
 *   below it; before the frame is complete (`_frame_complete_offset`) the
 *   return address is still at sp;
 * - an interpreted frame is rbp-based: the Method* and the bytecode
 *   pointer sit at fixed words below rbp, the caller's sp at rbp - 8;
 * - the call stub (the entry from C++ into Java) is rbp-based, and
 *   returns to JavaCalls::call_helper in libjvm.so, walked natively.
 * The process's code cache bounds, heaps and the offsets are the agent's
 * (`hs_procs`), read from the JVM's own structure tables.
 *
 * Each Java frame is one tagged slot (bpf/emberd.h); the agent names it
 * from the process's memory. Every read is a bpf_probe_read_user of a
 * bounded size, every loop bounded: a process that lies in its code cache
 * gets a marker that ends its stack, never more work.
 */
#ifndef EMBERD_HOTSPOT_H
#define EMBERD_HOTSPOT_H

#include "walk.h"

/* Bytes of a blob's header read at once: every offset the layouts use is
 * below it, the compiled method's id too (304 on JDK 17, 212 on 25), so a
 * frame costs one read of its blob. A blob too close to the end of its
 * heap for that is read in HS_BLOB_MIN bytes (the CodeBlob fields) and its
 * id apart. */
#define HS_BLOB_READ 512
#define HS_BLOB_MIN 128
/* Segment-map hops followed at most (254 segments each). */
#define HS_MAX_HOPS 32

/* This runtime's part of a walk, per CPU. */
struct hs_walk {
	__u8 blob[HS_BLOB_READ] __attribute__((aligned(8)));
	__u8 insn[16] __attribute__((aligned(8))); /* the code at an interrupted pc */
	__u64 link[2]; /* a compiled frame's saved rbp and return address */
	/* The name of this walk's process's compiled methods, once read:
	 * "nmethod" is one string in libjvm, so later frames compare the
	 * pointer (JDKs whose blobs have no kind). Reset at each walk: a
	 * process that execs is another image. */
	__u64 nmethod_name;
	__u32 frames; /* Java frames pushed by this walk */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_walk);
} hs_walks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024); /* set by the agent */
	__type(key, __u32);        /* tgid */
	__type(value, struct hs_proc);
} hs_procs SEC(".maps");

/* A field of the blob header read; 0 when outside it. */
#define HS_FIELD(buf, off, type)                                               \
	({                                                                     \
		__u32 __o = (off) & (HS_BLOB_READ - 1) & ~(__u32)(sizeof(type) - 1); \
		type __v = 0;                                                  \
		if (__o <= HS_BLOB_READ - sizeof(type))                        \
			__v = *(type *)&(buf)[__o];                            \
		__v;                                                           \
	})

static __always_inline struct hs_walk *this_hs_walk(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&hs_walks, &zero);
}

/*
 * A walk begins: if the agent listed the process as a JVM, its code cache
 * is claimed for the walk. Returns 0: no TLS base is needed. Global, so
 * its stack is not the sampling program's (Linux 6.1 adds that to the
 * walker's step and a runtime's hook against 512 bytes).
 */
__attribute__((noinline)) int hs_begin(int listed)
{
	struct walk *w = this_walk();
	struct hs_walk *h = this_hs_walk();
	struct hs_proc *p;

	if (!h || !w)
		return 0;
	h->frames = 0;
	h->nmethod_name = 0;
	if (!listed)
		return 0;
	p = bpf_map_lookup_elem(&hs_procs, &w->tgid);
	if (p)
		walk_claim(w, RUNTIME_HOTSPOT, p->code_low, p->code_high);
	return 0;
}

/* The blob holding `pc`, found through its heap's segment map; 0 if none. */
static __always_inline __u64 hs_blob_at(struct hs_proc *p, __u64 pc)
{
	struct hs_heap *heap = 0;
	__u64 seg;

	for (int i = 0; i < EMBERD_JAVA_HEAPS; i++) {
		if (p->heaps[i].low <= pc && pc < p->heaps[i].high) {
			heap = &p->heaps[i];
			break;
		}
	}
	if (!heap)
		return 0;
	seg = (pc - heap->low) >> (heap->log2_segment & 31);
	for (int i = 0; i < HS_MAX_HOPS; i++) {
		__u8 hop;

		if (bpf_probe_read_user(&hop, 1, (const void *)(heap->segmap + seg)))
			return 0;
		if (hop == 0xff)
			return 0;
		if (hop == 0)
			return heap->low + (seg << (heap->log2_segment & 31)) + p->layout.heap_block;
		if (seg < hop)
			return 0;
		seg -= hop;
	}
	return 0;
}

/* Pushes `slot`, counted as a Java frame. */
static __always_inline void hs_push(struct stored_stack *s, struct hs_walk *h, __u64 slot)
{
	s->ips[s->nr & 127] = slot;
	s->nr++;
	h->frames++;
}

/* Ends the walk at a marker: pushed, then the walk stops with `end`. */
static __always_inline int hs_fail(struct walk *w, struct stored_stack *s, __u32 mark, __u32 end)
{
	if (s->nr < EMBERD_MAX_STACK_DEPTH) {
		s->ips[s->nr & 127] = EMBERD_JAVA_MARK | mark;
		s->nr++;
	}
	ucount(UCOUNTER_JAVA_MARK_BASE + (mark < JAVA_MARK_MAX ? mark : 0));
	w->end_after = end + 1;
	return RUNTIME_UNWOUND;
}

/* Whether the blob header `b` (at `blob`) is a compiled method's: its
 * kind where the JVM keeps one, else its name ("nmethod", "native
 * nmethod"). */
static __always_inline int hs_is_compiled(struct hs_layout *l, struct hs_walk *h)
{
	__u64 name, text = 0;

	if (l->blob_kind != 0xffff)
		return HS_FIELD(h->blob, l->blob_kind, __u8) == l->kind_nmethod;
	name = HS_FIELD(h->blob, l->blob_name, __u64);
	if (name && name == h->nmethod_name)
		return 1;
	if (!name || bpf_probe_read_user(&text, sizeof(text), (const void *)name))
		return 0;
	/* "nmethod\0" and "native n", little-endian. */
	if (text == 0x00646f6874656d6eULL)
		h->nmethod_name = name;
	return text == 0x00646f6874656d6eULL || text == 0x6e2065766974616eULL;
}

/*
 * The native walker met a pc in the code cache: this frame is unwound
 * here, by HotSpot's rules, its slot pushed and its caller's registers
 * left in the walk (RUNTIME_UNWOUND). A frame that cannot be read ends the
 * walk at a marker. Global: its stack is not added to the walker's step
 * (Linux 6.1 counts the step, the program and one callee against 512).
 */
__attribute__((noinline)) int hs_enter(__u64 pc)
{
	struct walk *w = this_walk();
	struct stored_stack *s = scratch_stack();
	struct hs_walk *h = this_hs_walk();
	struct hs_proc *p;
	struct hs_layout *l;
	__u64 sp, bp, ra = 0, nsp, nbp = 0, blob, code, off;
	__s32 frame_words, complete;
	__u32 id = 0, got = HS_BLOB_READ;

	if (!w || !s || !h)
		return 0;
	p = bpf_map_lookup_elem(&hs_procs, &w->tgid);
	if (!p)
		return 0;
	l = &p->layout;
	sp = w->sp;
	bp = w->bp;
	off = (pc - p->code_low) & ((1ULL << EMBERD_JAVA_PC_BITS) - 1);
	if (pc >= p->interp_low && pc < p->interp_high) {
		__u64 method = 0, bcp = 0, bci = (1 << EMBERD_JAVA_BCI_BITS) - 1, base;

		__s32 lo = l->frame_bcp < l->frame_method ? l->frame_bcp : l->frame_method;
		__u32 size = 8 * (2 - lo);
		__u64 *word = (__u64 *)h->blob;

		/* The frame's fixed words in one read, from the lower of the
		 * method and bcp slots up to the return address: the sender's
		 * sp at rbp - 8, the caller's rbp at rbp, the return address
		 * at rbp + 8. */
		if (lo < -14 || l->frame_method > -2 || l->frame_bcp > -2 || size < 24 ||
		    size > 128)
			return hs_fail(w, s, JAVA_MARK_OTHER, STACK_END_ERR_READ);
		if (!bp || bp < sp ||
		    bpf_probe_read_user(h->blob, size & 0xff, (const void *)(bp + 8 * (__s64)lo)))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		method = word[(l->frame_method - lo) & 15];
		bcp = word[(l->frame_bcp - lo) & 15];
		nsp = word[(-1 - lo) & 15];
		nbp = word[(0 - lo) & 15];
		ra = word[(1 - lo) & 15];
		/* The bytecodes follow the method's ConstMethod. The slot in
		 * the frame is saved at each call: exact for a caller, the
		 * last call's for the frame a sample interrupted. */
		if (bpf_probe_read_user(&base, 8, (const void *)(method + l->method_const)))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		base += l->const_size;
		if (bcp >= base && bcp - base < (1 << EMBERD_JAVA_BCI_BITS) - 1)
			bci = bcp - base;
		hs_push(s, h, EMBERD_JAVA_INTERP | ((method >> 3) << EMBERD_JAVA_BCI_BITS) |
				      (bci & ((1 << EMBERD_JAVA_BCI_BITS) - 1)));
		goto unwound;
	}
	blob = hs_blob_at(p, pc);
	if (!blob)
		return hs_fail(w, s, JAVA_MARK_NO_BLOB, STACK_END_ERR_PC);
	if (bpf_probe_read_user(h->blob, HS_BLOB_READ, (const void *)blob)) {
		got = HS_BLOB_MIN;
		if (bpf_probe_read_user(h->blob, HS_BLOB_MIN, (const void *)blob))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
	}
	if (pc == p->call_stub_return) {
		/* The entry frame: rbp-based, returning into libjvm. */
		hs_push(s, h, EMBERD_JAVA_STUB | off);
		if (!bp || bp < sp || bpf_probe_read_user(&ra, 8, (const void *)(bp + 8)) ||
		    bpf_probe_read_user(&nbp, 8, (const void *)bp))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		nsp = bp + 16;
		goto unwound;
	}
	frame_words = HS_FIELD(h->blob, l->blob_frame_size, __s32);
	if (l->code_is_offset)
		code = blob + HS_FIELD(h->blob, l->blob_code, __u32);
	else
		code = HS_FIELD(h->blob, l->blob_code, __u64);
	if (l->frame_complete_width == 2)
		complete = HS_FIELD(h->blob, l->blob_frame_complete, __s16);
	else
		complete = HS_FIELD(h->blob, l->blob_frame_complete, __s32);
	if (hs_is_compiled(l, h)) {
		if (l->nmethod_compile_id + 4 <= got)
			id = HS_FIELD(h->blob, l->nmethod_compile_id, __u32);
		else if (bpf_probe_read_user(&id, 4, (const void *)(blob + l->nmethod_compile_id)))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		hs_push(s, h, EMBERD_JAVA_COMPILED | (s->nr == 0 ? EMBERD_JAVA_TOP : 0) |
				      ((__u64)(id & 0xffffff) << EMBERD_JAVA_PC_BITS) | off);
	} else {
		hs_push(s, h, EMBERD_JAVA_STUB | off);
	}
	/* A sample in the epilogue: the frame is already (partly) torn
	 * down. C1 and C2 end a method with `add rsp, N; pop rbp`, the return
	 * poll `cmp rsp, [r15 + d]; ja slow` and `ret`: after the pop the
	 * return address is at sp; at the pop, above the caller's rbp. In a
	 * small method these few instructions take a good share of samples. */
	if (s->nr == 1 && frame_words > 0) {
		__u8 *c = h->insn;
		int torn = 0;

		if (!bpf_probe_read_user(c, 16, (const void *)pc)) {
			if (c[0] == 0xc3) /* ret */
				torn = 1;
			else if (c[0] == 0x49 && c[1] == 0x3b && c[2] == 0xa7 && c[7] == 0x0f &&
				 c[8] == 0x87 && c[13] == 0xc3) /* cmp rsp, [r15 + d32]; ja; ret */
				torn = 1;
			else if (c[0] == 0x49 && c[1] == 0x3b && c[2] == 0x67 && c[4] == 0x0f &&
				 c[5] == 0x87 && c[10] == 0xc3) /* cmp rsp, [r15 + d8]; ja; ret */
				torn = 1;
			else if (c[0] == 0x0f && c[1] == 0x87 && c[6] == 0xc3) /* ja; ret */
				torn = 1;
			else if (c[0] == 0x5d) /* pop rbp */
				torn = 2;
		}
		if (torn == 2) {
			if (bpf_probe_read_user(&nbp, 8, (const void *)sp) ||
			    bpf_probe_read_user(&ra, 8, (const void *)(sp + 8)))
				return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
			nsp = sp + 16;
			goto unwound;
		}
		if (torn)
			complete = -1;
	}
	/* A caller's frame is built whatever its blob says of the offset
	 * (C2's runtime stubs say "never safe"): it made a call. */
	if (frame_words > 0 && (s->nr > 1 || (complete >= 0 && pc >= code + complete))) {
		nsp = sp + 8 * (__u64)frame_words;
		/* The saved rbp and the return address, below the caller's sp. */
		if (bpf_probe_read_user(h->link, 16, (const void *)(nsp - 16)))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		nbp = h->link[0];
		ra = h->link[1];
	} else if (s->nr == 1) {
		/* The frame is not built yet (the sample hit its first
		 * instructions): the return address is at sp, or above it
		 * between C2's `sub rsp, N` and `mov [rsp + N - 8], rbp` (its
		 * prologue without a stack bang, a small leaf's): 17% of a
		 * megamorphic callee's samples fell on that mov on OpenJDK 17
		 * (issue 60). Only in the prologue: C2 spills rbp elsewhere. */
		__u64 above = 0;

		if (complete >= 0 && pc < code + complete) {
			__u8 *c = h->insn;

			if (!bpf_probe_read_user(c, 8, (const void *)pc) && c[0] == 0x48 &&
			    c[1] == 0x89 && c[3] == 0x24) {
				if (c[2] == 0x6c && c[4] < 0x80) /* mov [rsp + d8], rbp */
					above = c[4] + 8;
				else if (c[2] == 0xac && c[6] == 0 && c[7] == 0) /* [rsp + d32] */
					above = c[4] + ((__u64)c[5] << 8) + 8;
			}
		}
		if (bpf_probe_read_user(&ra, 8, (const void *)(sp + above)))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		nsp = sp + above + 8;
		nbp = bp;
	} else {
		/* A stub without a frame size, below another frame: rbp. */
		if (!bp || bp < sp || bpf_probe_read_user(&ra, 8, (const void *)(bp + 8)) ||
		    bpf_probe_read_user(&nbp, 8, (const void *)bp))
			return hs_fail(w, s, JAVA_MARK_READ, STACK_END_ERR_READ);
		nsp = bp + 16;
	}
unwound:
	if (nsp <= sp)
		return hs_fail(w, s, JAVA_MARK_FRAME, STACK_END_ERR_CFA);
	/* A Java frame always has a caller (the call stub at the least): a
	 * return address of 0 is a frame read wrong (a sample between a
	 * frame's build steps), never the thread's root, which the native
	 * walker would take it for. */
	if (!ra)
		return hs_fail(w, s, JAVA_MARK_FRAME, STACK_END_ERR_PC);
	w->pc = ra;
	w->sp = nsp;
	w->bp = nbp;
	return RUNTIME_UNWOUND;
}

/* The walk ended: its Java frames counted. */
static __always_inline void hs_finish(struct walk *w, struct stored_stack *s, __u32 end)
{
	struct hs_walk *h = this_hs_walk();

	if (h && h->frames)
		ucount_by(UCOUNTER_JAVA_FRAMES, h->frames);
}

#endif /* EMBERD_HOTSPOT_H */
