/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * V8 frames (Node.js): each JavaScript function's frame named from the
 * frame itself, where the native walker (bpf/unwind.h) meets V8's code.
 * bpf/runtime.h calls v8_begin, v8_enter and v8_finish.
 *
 * A native walk of node gets through V8's frames (every frame V8 builds
 * keeps rbp as a frame pointer), but names them after the code they run:
 * an interpreted function is `Builtins_InterpreterEntryTrampoline` or a
 * bytecode handler, a compiled one `[anon]`. V8 keeps the running
 * function in each frame it builds for JavaScript, at a fixed offset from
 * the frame pointer (src/runtime/v8/ reads the offsets from V8's
 * postmortem metadata, the `v8dbg_*` symbols node exports):
 *   fp + 8   return address          fp - 16  JSFunction (tagged pointer)
 *   fp       caller's fp             fp - 32  BytecodeArray (interpreted)
 *   fp - 8   context, or a marker    fp - 40  bytecode offset (SMI)
 * A typed frame (entry, exit, stubs, builtins' own frames) keeps a SMI
 * marker where a JavaScript frame keeps its context: those stay native
 * frames (`Builtins_CEntry...`), as do frames whose function cannot be
 * read or is no JSFunction.
 *
 * A JavaScript frame is one slot (bpf/emberd.h): its SharedFunctionInfo
 * (the function's code-independent half: name, script), which the agent
 * names at the drain; a frame of optimized code has a second one, its pc,
 * from which the agent reads the functions inlined there. Each frame
 * costs three reads (the frame's words, the function, its function info)
 * plus, once per walk and map, the map's instance type; a frame in JIT
 * code one more (the map of its bytecode slot, which baseline code's
 * frames hold). The frame is then unwound by its frame pointer, as the
 * native walker does for code without a table.
 */
#ifndef EMBERD_V8_H
#define EMBERD_V8_H

#include "walk.h"

/* A frame pointer further than this above sp is not V8's. */
#define V8_MAX_FRAME (1 << 20)
/* Maps of JSFunction (one per kind of function) remembered per walk. */
#define V8_FUNCTION_MAPS 4

/* This runtime's part of a walk, per CPU. */
struct v8_walk {
	__u64 frame[8]; /* the words at fp - 40 ... fp + 8 (7 read) */
	__u64 object[6]; /* the head of a JSFunction or SharedFunctionInfo */
	/* Maps whose instance type was read in this walk: reset at each walk
	 * (a process that execs is another image). */
	__u64 function_maps[V8_FUNCTION_MAPS];
	__u64 shared_map;
	__u64 bytecode_map;
	__u32 frames; /* JavaScript frames pushed by this walk */
	__u32 typed;  /* V8's own frames left native */
	__u32 not_js; /* frames in V8 code whose function could not be read */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct v8_walk);
} v8_walks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024); /* set by the agent */
	__type(key, __u32);        /* tgid */
	__type(value, struct v8_proc);
} v8_procs SEC(".maps");

static __always_inline struct v8_walk *this_v8_walk(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&v8_walks, &zero);
}

/*
 * A walk begins: if the agent listed the process as node, V8's code is
 * claimed for the walk. Returns 0: no TLS base is needed. Global, so its
 * stack is not the sampling program's.
 */
__attribute__((noinline)) int v8_begin(int listed)
{
	struct walk *w = this_walk();
	struct v8_walk *v = this_v8_walk();
	struct v8_proc *p;

	if (!v || !w)
		return 0;
	v->frames = 0;
	v->typed = 0;
	v->not_js = 0;
	v->shared_map = 0;
	v->bytecode_map = 0;
	for (int i = 0; i < V8_FUNCTION_MAPS; i++)
		v->function_maps[i] = 0;
	if (!listed)
		return 0;
	p = bpf_map_lookup_elem(&v8_procs, &w->tgid);
	if (!p)
		return 0;
	if (p->code_high)
		walk_claim(w, RUNTIME_V8, p->code_low, p->code_high);
	if (p->blob_high)
		walk_claim(w, RUNTIME_V8, p->blob_low, p->blob_high);
	return 0;
}

/* The instance type of the object whose map is `map`; 0 when unreadable. */
static __always_inline __u16 v8_instance_type(struct v8_layout *l, __u64 map)
{
	__u16 type = 0;

	if ((map & 3) != 1 ||
	    bpf_probe_read_user(&type, 2, (const void *)(map - 1 + l->map_instance_type)))
		return 0;
	return type;
}

/* Whether `map` is a JSFunction's, remembered for the rest of the walk. */
static __always_inline int v8_is_function_map(struct v8_walk *v, struct v8_layout *l, __u64 map)
{
	__u16 type;

	for (int i = 0; i < V8_FUNCTION_MAPS; i++)
		if (v->function_maps[i] == map)
			return 1;
	type = v8_instance_type(l, map);
	if (type < l->type_function_first || type > l->type_function_last)
		return 0;
	for (int i = 0; i < V8_FUNCTION_MAPS; i++) {
		if (v->function_maps[i] == 0) {
			v->function_maps[i] = map;
			break;
		}
	}
	return 1;
}

/* A word of the object head read; 0 when outside it. */
static __always_inline __u64 v8_field(struct v8_walk *v, __u16 off)
{
	__u32 i = off / 8;

	return i < 6 ? v->object[i] : 0;
}

/* The word at fp + `off` of the frame read; 0 when outside it. */
static __always_inline __u64 v8_slot(struct v8_walk *v, __s8 off)
{
	__s32 at = off + 40;

	if (at < 0 || at > 48 || (at & 7))
		return 0;
	return v->frame[((__u32)at >> 3) & 7];
}

/* Whether `array` (a frame's word) is a BytecodeArray: the frame is
 * interpreted or runs baseline code. The map is remembered per walk. */
static __always_inline int v8_is_bytecode(struct v8_walk *v, struct v8_layout *l, __u64 array)
{
	__u64 map = 0;

	if ((array & 3) != 1 || bpf_probe_read_user(&map, 8, (const void *)(array - 1)))
		return 0;
	if (map && map == v->bytecode_map)
		return 1;
	if (v8_instance_type(l, map) != l->type_bytecode_array)
		return 0;
	v->bytecode_map = map;
	return 1;
}

/*
 * The native walker met a pc in V8's code: if its frame (the walk's bp)
 * is a JavaScript function's, the function's slot is pushed in place of
 * the native frame (1) and the walker unwinds it by its frame pointer
 * (`jit`: the pc is in an anonymous mapping, V8's JIT code);
 * V8's own frames and anything unreadable stay native (0). Global: its
 * stack is not added to the walker's step.
 */
__attribute__((noinline)) int v8_enter(__u64 pc, int jit)
{
	struct walk *w = this_walk();
	struct stored_stack *s = scratch_stack();
	struct v8_walk *v = this_v8_walk();
	struct v8_proc *p;
	struct v8_layout *l;
	__u64 bp, function, shared, marker, offset, kind, check, pc_kind;

	if (!w || !s || !v)
		return 0;
	p = bpf_map_lookup_elem(&v8_procs, &w->tgid);
	if (!p)
		return 0;
	l = &p->layout;
	bp = w->bp;
	if (!bp || (bp & 7) || bp < w->sp || bp - w->sp > V8_MAX_FRAME || bp < 40)
		goto not_js;
	if (bpf_probe_read_user(v->frame, 56, (const void *)(bp - 40)))
		goto not_js;
	marker = v8_slot(v, l->fp_context);
	if ((marker & 1) == 0) {
		/* A SMI: one of V8's typed frames. */
		v->typed++;
		return 0;
	}
	function = v8_slot(v, l->fp_function);
	if ((function & 3) != 1 ||
	    bpf_probe_read_user(v->object, sizeof(v->object), (const void *)(function - 1)))
		goto not_js;
	if (!v8_is_function_map(v, l, v->object[0]))
		goto not_js;
	shared = v8_field(v, l->function_shared);
	if ((shared & 3) != 1 ||
	    bpf_probe_read_user(v->object, sizeof(v->object), (const void *)(shared - 1)))
		goto not_js;
	if (v->object[0] != v->shared_map) {
		if (v8_instance_type(l, v->object[0]) != l->type_shared)
			goto not_js;
		v->shared_map = v->object[0];
	}
	check = V8_CHECK(v8_field(v, l->shared_name), v8_field(v, l->shared_script));
	/* An interpreted frame keeps its bytecode offset, a SMI (low bit 0,
	 * never 0: it counts from the BytecodeArray's tagged pointer); a
	 * compiled frame's word there is a spill slot or a pointer. */
	offset = v8_slot(v, l->fp_bytecode_offset);
	kind = (offset & 1) == 0 && offset ? V8_KIND_INTERPRETED : V8_KIND_COMPILED;
	if (s->nr >= EMBERD_MAX_STACK_DEPTH)
		return 0;
	/*
	 * Optimized code also gets a slot with its pc, leafward of the
	 * function's, from which the agent names the functions inlined there
	 * (the function itself is always named by its own slot: code read
	 * after the sample may be gone). A pc in JIT code (an anonymous
	 * mapping: not the builtins, which the interpreter runs, wherever
	 * node mapped them), unless the frame is baseline code's (its
	 * bytecode with no offset beside it). Code entered on-stack keeps the
	 * interpreter's frame, bytecode offset included: the pc tells it
	 * apart.
	 */
	if (l->by_pc && jit && pc < (1ULL << EMBERD_V8_PC_BITS) &&
	    s->nr + 1 < EMBERD_MAX_STACK_DEPTH &&
	    (kind == V8_KIND_INTERPRETED ||
	     !v8_is_bytecode(v, l, v8_slot(v, l->fp_bytecode_array)))) {
		pc_kind = s->nr == 0 ? V8_KIND_OPTIMIZED : V8_KIND_OPTIMIZED_CALL;
		s->ips[s->nr & 127] = EMBERD_V8_FRAME | pc_kind << EMBERD_V8_KIND_SHIFT |
				      (check >> 3) << EMBERD_V8_PC_BITS | pc;
		s->nr++;
	}
	s->ips[s->nr & 127] = EMBERD_V8_FRAME | kind << EMBERD_V8_KIND_SHIFT |
			      (check << EMBERD_V8_CHECK_SHIFT) | ((shared >> 3) & ((1ULL << 44) - 1));
	s->nr++;
	v->frames++;
	return 1;
not_js:
	v->not_js++;
	return 0;
}

/* The walk ended: its frames counted. */
static __always_inline void v8_finish(struct walk *w, struct stored_stack *s, __u32 end)
{
	struct v8_walk *v = this_v8_walk();

	if (!v)
		return;
	if (v->frames)
		ucount_by(UCOUNTER_V8_FRAMES, v->frames);
	if (v->typed)
		ucount_by(UCOUNTER_V8_TYPED, v->typed);
	if (v->not_js)
		ucount_by(UCOUNTER_V8_NOT_JS, v->not_js);
}

#endif /* EMBERD_V8_H */
