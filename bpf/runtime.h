/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The runtime seam: where the native walker (bpf/unwind.h) hands frames to
 * the runtimes whose code it meets (managed code whose own functions a
 * native stack would hide behind the runtime's loop). The walker calls the
 * four hooks below and knows nothing else of any runtime; each runtime
 * keeps its state in its own per-CPU map and reads the walk through
 * bpf/walk.h only.
 *
 * A runtime's hooks:
 *   begin(w, listed)  the walk starts: look whether the process runs this
 *                     runtime and claim its code ranges (walk_claim);
 *                     return 1 when the thread's TLS base is needed.
 *   enter(pc)         a pc in one of its claims: take the frame (1) by
 *                     starting a run (w->running) or pushing a marker,
 *                     unwind it itself (RUNTIME_UNWOUND: its slot pushed,
 *                     the caller's registers left in w->pc, sp, bp; the
 *                     registers it is handed are there too), or leave it
 *                     native (0). A global function, as emit:
 *                     the walker's step keeps a small stack (Linux 6.1
 *                     adds the program's, the step's and a callee's
 *                     stacks against 512 bytes).
 *   emit()            push the next frames of the run (a global function:
 *                     it looks up its state itself); 1 when the stack is
 *                     full with the run unfinished.
 *   finish(w, s, end) the walk ended: markers at the root, counters.
 *
 * Adding a runtime: its header (state, maps, hooks), its id in
 * bpf/walk.h's enum runtime_id, and one line in each hook below.
 */
#ifndef EMBERD_RUNTIME_H
#define EMBERD_RUNTIME_H

#include "walk.h"
#include "python.h"
#include "hotspot.h"
#include "v8.h"

static __always_inline int runtime_begin(struct walk *w, int listed)
{
	int tls = 0;

	tls |= py_begin(w, listed);
	tls |= hs_begin(listed);
	tls |= v8_begin(listed);
	return tls;
}

static __always_inline int runtime_enter(struct walk *w, struct stored_stack *s, __u32 runtime,
					 __u64 pc, int jit)
{
	switch (runtime) {
	case RUNTIME_PYTHON:
		return py_enter(pc);
	case RUNTIME_HOTSPOT:
		return hs_enter(pc);
	case RUNTIME_V8:
		return v8_enter(pc, jit);
	}
	return 0;
}

static __always_inline int runtime_emit(__u32 runtime)
{
	switch (runtime) {
	case RUNTIME_PYTHON:
		return py_emit();
	}
	return 0;
}

static __always_inline void runtime_finish(struct walk *w, struct stored_stack *s, __u32 end)
{
	py_finish(w, s, end);
	hs_finish(w, s, end);
	v8_finish(w, s, end);
}

#endif /* EMBERD_RUNTIME_H */
