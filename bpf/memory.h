/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Memory growth, programs of events.bpf.c (recorded with the helpers of
 * bpf/events.h): brk() growth, mmap() and munmap() bytes, and sampled malloc.
 *
 * Syscalls. Where tracefs is mounted the agent attaches the classic
 * syscalls:sys_{enter,exit}_{brk,mmap,munmap} tracepoints, which run only
 * for those calls. Without tracefs the only hooks are the raw sys_enter and
 * sys_exit tracepoints, which run for every syscall; they leave at the first
 * comparison of the syscall number. Either way the entry keeps what the exit
 * needs (the old break, the length and flags) per thread, and the exit
 * charges the bytes once the call has succeeded, to the caller's user stack.
 *
 * malloc. Uprobes on the libc each chosen process maps (attached by the
 * agent with the process as filter, so other processes never trap). Every
 * allocation of s bytes is sampled with chance p = min(1, s/R), R =
 * config.malloc_sample_bytes, and a sample weighs s/p bytes and 1/p objects
 * (rounded at random, so still unbiased):
 * on average one sample every R bytes, unbiased totals, and a cost of
 * recording that does not grow with the allocation rate (the traps still
 * do). A sampled allocation is added to the counts (allocated view) and put
 * in `heap_live`; a free() of an address found there is sent with the alloc
 * over the `heap_events` ring buffer, from which the agent keeps the in-use
 * view.
 */
#ifndef EMBERD_MEMORY_H
#define EMBERD_MEMORY_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "emberd.h"
#include "events.h"

/* x86_64 syscall numbers. */
#define NR_MMAP 9
#define NR_MUNMAP 11
#define NR_BRK 12

#define EMBERD_MAP_ANONYMOUS 0x20
#define EMBERD_USER64_CS 0x33
#define EMBERD_PAGE 4096ULL

/* The kernel's pt_regs, for the syscall arguments (raw sys_enter/exit). */
struct pt_regs___sc {
	unsigned long cs;
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long r10;
	unsigned long r8;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct mm_struct___emberd {
	unsigned long brk;
} __attribute__((preserve_access_index));

struct task_struct___mm {
	struct mm_struct___emberd *mm;
} __attribute__((preserve_access_index));

/* What a syscall's exit needs from its entry. */
struct syscall_entry {
	__u64 nr;
	__u64 old_brk;         /* brk: the break before the call */
	__u64 len;             /* mmap, munmap */
	__u64 flags;           /* mmap */
};

/* By thread id. LRU: a thread killed inside a call leaves its entry, which
 * ages out instead of filling the table. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct syscall_entry);
} syscall_entries SEC(".maps");

static __always_inline int syscall_wanted(__u64 nr)
{
	return (nr == NR_BRK && config.brk) || (nr == NR_MMAP && config.mmap) ||
	       (nr == NR_MUNMAP && config.munmap);
}

static __always_inline void syscall_enter(__u64 nr, __u64 a1, __u64 a3)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct syscall_entry e = {.nr = nr};

	if (!syscall_wanted(nr))
		return;
	if (config.target_tgid && (id >> 32) != config.target_tgid)
		return;
	/* A new process maps its libraries first: its unwind tables are built
	 * before its first charge is walked. */
	note_process_cached(id >> 32);
	if (nr == NR_BRK) {
		struct task_struct___mm *task = (void *)bpf_get_current_task();

		e.old_brk = BPF_CORE_READ(task, mm, brk);
	} else {
		e.len = a1;
		e.flags = a3;
	}
	if (bpf_map_update_elem(&syscall_entries, &tid, &e, BPF_ANY))
		ecount(ECOUNTER_SYSCALL_STATE_FULL);
}

/* Charges `value` of `event` to the current thread's user stack. */
static __always_inline void charge_current(__u32 event, __u64 value, const char *label,
					   const int form)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u32 tgid = id >> 32;
	struct event_key *k;

	note_process_cached(tgid);
	k = scratch_key();
	if (!k)
		return;
	k->event = event;
	k->tgid = tgid;
	k->pid = (__u32)id;
	k->account = account_of((__u32)bpf_get_current_uid_gid());
	/* At a syscall's exit the kernel stack is the syscall path itself. */
	k->kstack = EMBERD_STACK_NONE;
	k->ustack = user_stack(tgid, now, form);
	bpf_get_current_comm(&k->comm, sizeof(k->comm));
	if (label)
		__builtin_memcpy(k->label, label, 5);
	add(k, value);
}

static __always_inline void syscall_exit_claimed(long ret, const int form);

static __always_inline void syscall_exit(long ret, const int form)
{
	WITH_SCRATCH((syscall_exit_claimed(ret, form), 0));
}

static __always_inline void syscall_exit_claimed(long ret, const int form)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct syscall_entry *found = bpf_map_lookup_elem(&syscall_entries, &tid);
	struct syscall_entry entry, *e = &entry;
	__u64 nr, len;

	if (!found)
		return;
	/* Copied before the delete: the element's memory may be reused (LRU)
	 * by another CPU's insert as soon as it is deleted. */
	entry = *found;
	nr = e->nr;
	bpf_map_delete_elem(&syscall_entries, &tid);
	if (nr == NR_BRK) {
		/* brk returns the new break (the old one when it failed). */
		if ((__u64)ret > e->old_brk && e->old_brk) {
			ecount(ECOUNTER_BRK);
			charge_current(EVENT_BRK, (__u64)ret - e->old_brk, 0, form);
		}
		return;
	}
	if (ret < 0 && ret > -4096)
		return;
	len = (e->len + EMBERD_PAGE - 1) & ~(EMBERD_PAGE - 1);
	if (nr == NR_MMAP) {
		ecount(ECOUNTER_MMAP);
		charge_current(EVENT_MMAP, len,
			       (e->flags & EMBERD_MAP_ANONYMOUS) ? "anon" : "file", form);
	} else {
		ecount(ECOUNTER_MUNMAP);
		charge_current(EVENT_MUNMAP, len, 0, form);
	}
}

/* Every syscall (no tracefs needed): leave unless it is one of ours. */
SEC("raw_tp/sys_enter")
int handle__sys_enter_raw(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 nr = ctx->args[1];
	struct pt_regs___sc *regs;

	if (nr != NR_BRK && nr != NR_MMAP && nr != NR_MUNMAP)
		return 0;
	regs = (struct pt_regs___sc *)ctx->args[0];
	/* A 32-bit task's numbers are another table's (9 is link there). */
	if (BPF_CORE_READ(regs, cs) != EMBERD_USER64_CS)
		return 0;
	syscall_enter(nr, BPF_CORE_READ(regs, si), BPF_CORE_READ(regs, r10));
	return 0;
}

static __always_inline int on_sys_exit_raw(struct bpf_raw_tracepoint_args *ctx, const int form)
{
	struct pt_regs___sc *regs = (struct pt_regs___sc *)ctx->args[0];
	__u64 nr = BPF_CORE_READ(regs, orig_ax);

	if (nr != NR_BRK && nr != NR_MMAP && nr != NR_MUNMAP)
		return 0;
	syscall_exit((long)ctx->args[1], form);
	return 0;
}

SEC("raw_tp/sys_exit")
int handle__sys_exit_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_sys_exit_raw(ctx, EMBERD_FORM_LOOP);
}

SEC("raw_tp/sys_exit")
int handle__sys_exit_raw_bounded(struct bpf_raw_tracepoint_args *ctx)
{
	return on_sys_exit_raw(ctx, EMBERD_FORM_BOUNDED);
}

/* The classic tracepoints' records (events/syscalls/sys_{enter,exit}_* /format). */
struct sc_enter_ctx {
	__u64 common;
	int nr;
	int _pad;
	__u64 args[6];
};

struct sc_exit_ctx {
	__u64 common;
	int nr;
	int _pad;
	long ret;
};

SEC("tracepoint/syscalls/sys_enter_brk")
int handle__sys_enter_brk(struct sc_enter_ctx *ctx)
{
	syscall_enter(NR_BRK, 0, 0);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int handle__sys_enter_mmap(struct sc_enter_ctx *ctx)
{
	syscall_enter(NR_MMAP, ctx->args[1], ctx->args[3]);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_munmap")
int handle__sys_enter_munmap(struct sc_enter_ctx *ctx)
{
	syscall_enter(NR_MUNMAP, ctx->args[1], 0);
	return 0;
}

/* One program for the three exits: the entry says which call it was. */
SEC("tracepoint/syscalls/sys_exit_brk")
int handle__sys_exit(struct sc_exit_ctx *ctx)
{
	syscall_exit(ctx->ret, EMBERD_FORM_LOOP);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_brk")
int handle__sys_exit_bounded(struct sc_exit_ctx *ctx)
{
	syscall_exit(ctx->ret, EMBERD_FORM_BOUNDED);
	return 0;
}

/* ---- malloc ---- */

/* The user registers a uprobe sees (x86_64 UAPI pt_regs layout). */
struct uprobe_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

/*
 * The outermost allocation call a thread is in, between its entry and its
 * return, in an array slot by thread id modulo the size (written on every
 * call: cheaper than a hash, and a slot shared by two threads only loses a
 * call). Nested calls (glibc's realloc(NULL, n) and small-alignment
 * memalign call malloc itself) are told apart by the stack pointer and
 * left out: the outer call is sampled once, with its own size.
 */
struct alloc_call {
	__u32 tid;
	__u32 fn;              /* enum alloc_fn */
	__u64 sp;              /* user sp at entry; 0: no call in progress */
	__u64 size;
	__u64 old;             /* realloc: the block being resized */
	__u64 memptr;          /* posix_memalign: where the pointer is written */
	__u64 ustack;          /* sampled: the caller's stack */
	__u64 bytes;           /* sampled: weighed bytes; 0: not sampled */
	__u64 objects;         /* sampled: weighed objects */
};

#define ALLOC_CALL_SLOTS 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ALLOC_CALL_SLOTS);
	__type(key, __u32);
	__type(value, struct alloc_call);
} alloc_calls SEC(".maps");

struct heap_live_key {
	__u32 tgid;
	__u32 _pad;
	__u64 addr;
};

/* Sampled allocations not yet freed; max_entries set by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct heap_live_key);
	__type(value, __u8);
} heap_live SEC(".maps");

/* Alloc and free records for the agent's in-use view; size set by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} heap_events SEC(".maps");

/* Unused: makes the skeleton generate `types::heap_record` for the agent. */
struct heap_record heap_record_layout = {};

/* Sends an alloc (`c` set) or free record; 0 if the ring is full. */
static __always_inline int heap_record(__u32 kind, __u64 addr, struct alloc_call *c)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct heap_record *r = bpf_ringbuf_reserve(&heap_events, sizeof(*r), 0);

	if (!r) {
		ecount(ECOUNTER_HEAP_RING_FULL);
		return 0;
	}
	r->kind = kind;
	r->tgid = id >> 32;
	r->pid = (__u32)id;
	r->account = account_of((__u32)bpf_get_current_uid_gid());
	r->addr = addr;
	r->ustack = c ? c->ustack : 0;
	r->bytes = c ? c->bytes : 0;
	r->objects = c ? c->objects : 0;
	bpf_get_current_comm(&r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, 0);
	return 1;
}

/* A free of `addr`: sent to the agent if it was a sampled allocation. The
 * record is reserved first: with the ring full the entry stays, and a later
 * free of the address (once it is reused) still reaches the agent. */
static __always_inline void heap_free(__u64 addr)
{
	struct heap_live_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .addr = addr};

	if (!addr || !bpf_map_lookup_elem(&heap_live, &key))
		return;
	if (!heap_record(HEAP_FREE, addr, 0))
		return;
	bpf_map_delete_elem(&heap_live, &key);
	ecount(ECOUNTER_FREE_TRACKED);
}

static __always_inline struct alloc_call *alloc_slot(__u32 tid)
{
	__u32 slot = tid % ALLOC_CALL_SLOTS;

	return bpf_map_lookup_elem(&alloc_calls, &slot);
}

/* Entry of malloc, calloc, realloc, posix_memalign, aligned_alloc: `fn`
 * (enum alloc_fn), or ALLOC_BY_COOKIE for the attach cookie. */
static __always_inline int on_alloc_enter(struct uprobe_regs *ctx, __u64 fn, const int form);

#define ALLOC_BY_COOKIE 0xffU

/* The loop form: one program on every function, told apart by cookie. */
SEC("uprobe")
int handle__alloc_enter(struct uprobe_regs *ctx)
{
	return WITH_SCRATCH(on_alloc_enter(ctx, ALLOC_BY_COOKIE, EMBERD_FORM_LOOP));
}

/* The bounded form: a program per function, for kernels before 5.15,
 * which have no attach cookies. Each program's full name is written out:
 * src/collect/programs.rs names them. */
#define ALLOC_ENTER_BOUNDED(program, fn)                                            \
	SEC("uprobe")                                                               \
	int program(struct uprobe_regs *ctx)                                        \
	{                                                                           \
		return WITH_SCRATCH(on_alloc_enter(ctx, fn, EMBERD_FORM_BOUNDED));  \
	}
ALLOC_ENTER_BOUNDED(handle__malloc_enter_bounded, ALLOC_MALLOC)
ALLOC_ENTER_BOUNDED(handle__calloc_enter_bounded, ALLOC_CALLOC)
ALLOC_ENTER_BOUNDED(handle__realloc_enter_bounded, ALLOC_REALLOC)
ALLOC_ENTER_BOUNDED(handle__posix_memalign_enter_bounded, ALLOC_POSIX_MEMALIGN)
ALLOC_ENTER_BOUNDED(handle__aligned_alloc_enter_bounded, ALLOC_ALIGNED_ALLOC)

static __always_inline int on_alloc_enter(struct uprobe_regs *ctx, __u64 fn, const int form)
{
	__u64 size, r = config.malloc_sample_bytes;
	__u64 id = bpf_get_current_pid_tgid(), now;
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct alloc_call *c = alloc_slot(tid);

	if (fn == ALLOC_BY_COOKIE)
		fn = bpf_get_attach_cookie(ctx);
	if (!c)
		return 0;
	/* Inside an outer allocation call of this thread: left to the outer. */
	if (c->tid == tid && c->sp && ctx->sp < c->sp)
		return 0;
	ecount(ECOUNTER_MALLOC_CALLS);
	c->tid = tid;
	c->fn = fn;
	c->sp = ctx->sp;
	c->old = 0;
	c->memptr = 0;
	c->bytes = 0;
	switch (fn) {
	case ALLOC_CALLOC:
		size = ctx->di * ctx->si;
		break;
	case ALLOC_REALLOC:
		c->old = ctx->di; /* freed at the return, if the call succeeded */
		size = ctx->si;
		break;
	case ALLOC_POSIX_MEMALIGN:
		c->memptr = ctx->di;
		size = ctx->dx;
		break;
	case ALLOC_ALIGNED_ALLOC:
		size = ctx->si;
		break;
	default:
		size = ctx->di;
	}
	c->size = size;
	if (size == 0)
		return 0;
	/* Chance min(1, size / r); weight size / chance, in bytes and in
	 * objects (r / size, rounded up or down at random: unbiased). */
	if (r && size < r) {
		if (!chance(size, r))
			return 0;
		c->bytes = r;
		c->objects = r / size + chance(r % size, size);
	} else {
		c->bytes = size;
		c->objects = 1;
	}
	ecount(ECOUNTER_MALLOC_SAMPLED);
	now = bpf_ktime_get_ns();
	note_process_cached(tgid);
	c->ustack = user_stack(tgid, now, form);
	return 0;
}

/* Return of the functions above: frees what realloc released, and records
 * a sampled allocation's address. */
static __always_inline int on_alloc_exit(struct uprobe_regs *ctx);

SEC("uretprobe")
int handle__alloc_exit(struct uprobe_regs *ctx)
{
	return WITH_SCRATCH(on_alloc_exit(ctx));
}

static __always_inline int on_alloc_exit(struct uprobe_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), addr = ctx->ax;
	__u32 tid = (__u32)id;
	struct alloc_call *c = alloc_slot(tid);
	struct heap_live_key key = {.tgid = id >> 32};
	struct event_key *k;
	__u8 one = 1;

	/* Only the outermost call's return: sp is one return address above. */
	if (!c || c->tid != tid || !c->sp || c->sp + 8 != ctx->sp)
		return 0;
	c->sp = 0;
	/* realloc released the old block when it returned one, or when it was
	 * asked for 0 bytes (it frees then); a failed realloc keeps it. */
	if (c->fn == ALLOC_REALLOC && c->old && (addr || c->size == 0))
		heap_free(c->old);
	if (!c->bytes)
		return 0;
	if (c->memptr) {
		/* posix_memalign returns 0 and writes the pointer */
		if (addr != 0 || bpf_probe_read_user(&addr, sizeof(addr), (void *)c->memptr))
			addr = 0;
	}
	if (!addr)
		return 0;
	k = scratch_key();
	if (k) {
		k->event = EVENT_MALLOC;
		k->tgid = id >> 32;
		k->pid = tid;
		k->account = account_of((__u32)bpf_get_current_uid_gid());
		k->kstack = EMBERD_STACK_NONE;
		k->ustack = c->ustack;
		bpf_get_current_comm(&k->comm, sizeof(k->comm));
		stamp(c->ustack, bpf_ktime_get_ns());
		add(k, c->bytes);
		k->event = EVENT_MALLOC_OBJECTS;
		add(k, c->objects);
	}
	key.addr = addr;
	if (bpf_map_update_elem(&heap_live, &key, &one, BPF_ANY) == 0) {
		if (!heap_record(HEAP_ALLOC, addr, c))
			bpf_map_delete_elem(&heap_live, &key);
	} else {
		ecount(ECOUNTER_MALLOC_LIVE_FULL);
	}
	return 0;
}

SEC("uprobe")
int handle__free(struct uprobe_regs *ctx)
{
	ecount(ECOUNTER_FREE_CALLS);
	heap_free(ctx->di);
	return 0;
}

#endif /* EMBERD_MEMORY_H */
