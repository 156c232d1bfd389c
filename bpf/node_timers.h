/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Node's timer waits, programs of events.bpf.c: the time an event loop
 * sleeps until a timer fires is charged to the JavaScript that armed the
 * timer, not to the loop.
 *
 * Why. `await new Promise(r => setTimeout(r, 50))` leaves no JavaScript on
 * the stack while it waits: the thread sleeps in libuv's poll
 * (uv_run;uv__io_poll;epoll_pwait), where every wait of every function
 * looks the same. The function is on the stack only when the timer is
 * armed: node arms libuv's timer with uv_timer_start() whenever a new
 * timer becomes the earliest (lib/internal/timers.js `scheduleTimer`).
 *
 * How. The agent attaches `handle__node_timer` to uv_timer_start in every
 * node process whose JavaScript frames it reads (per process, so no other
 * process traps). It keeps, per thread, the user stack of the latest call
 * (JavaScript frames and all) and when that timer is due. When the thread
 * next blocks in epoll_wait/epoll_pwait with a timeout whose end matches
 * that timer (libuv polls until its earliest timer, counted from its own
 * clock, which may lag by the JavaScript run since the loop last read it:
 * EMBERD_TIMER_LAG), the block carries the armed stack; when the block
 * lasts to the poll's timeout (a wake by I/O ends it earlier), its time is
 * charged to the armed stack with the label `[timer wait]` and no kernel
 * stack (the kernel's is the poll's, not the function's). Any other block
 * is charged as before.
 *
 * Limits. Only the timer that arms libuv's: when several functions wait on
 * timers, a timer that becomes the earliest after another fires is re-armed
 * by node's C++ (RunTimers), whose stack has no JavaScript; that wait is
 * charged to RunTimers. Async callers above the function that called
 * setTimeout are not on the stack (no async stacks).
 */
#ifndef EMBERD_NODE_TIMERS_H
#define EMBERD_NODE_TIMERS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "emberd.h"
#include "events.h"
#include "memory.h"

/* x86_64 syscall numbers of the polls libuv sleeps in. */
#define NR_EPOLL_WAIT 232
#define NR_EPOLL_PWAIT 281

/* How much earlier than the armed due time a poll may end and still be
 * that timer's: libuv counts from the loop's clock, read before the
 * JavaScript that armed the timer ran (and in whole ms). */
#define EMBERD_TIMER_LAG (10ULL * 1000 * 1000)
/* How much later: the ms rounding of the timeout and of the loop clock. */
#define EMBERD_TIMER_LATE (2ULL * 1000 * 1000)
/* A block ending this close to its poll's timeout ended by the timeout. */
#define EMBERD_TIMER_SLACK (1ULL * 1000 * 1000)
/* A thread's arms walked at most once per this: a loop re-arming in a
 * burst pays one walk (the others leave the entry unwalked). */
#define EMBERD_TIMER_MIN_GAP (1ULL * 1000 * 1000)

/* A thread's latest uv_timer_start. */
struct timer_arm {
	__u64 ustack; /* event_stacks key; EMBERD_STACK_NONE: not walked */
	__u64 due;    /* ns (bpf_ktime_get_ns) the timer is due */
	__u64 walked; /* ns of the last walk, for EMBERD_TIMER_MIN_GAP */
};

/* By thread id. LRU: a thread that exits leaves its entry to age out; a
 * flood of threads only costs other threads their attribution (their
 * waits are then charged to the loop, as without this). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct timer_arm);
} timer_arms SEC(".maps");

/* The syscall registers a blocking thread entered the kernel with. */
struct pt_regs___timer {
	unsigned long r10;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

static __always_inline int on_timer_start(struct uprobe_regs *ctx, const int form)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u32 tid = (__u32)id;
	/* uv_timer_start(handle, cb, timeout ms, repeat ms) */
	__u64 timeout = ctx->dx;
	struct timer_arm arm = {.ustack = EMBERD_STACK_NONE}, *old;

	if (!config.offcpu)
		return 0;
	ecount(ECOUNTER_TIMER_ARMS);
	if (timeout > 1000ULL * 1000 * 1000) /* over 11 days: never a poll's */
		return 0;
	arm.due = now + timeout * 1000 * 1000;
	old = bpf_map_lookup_elem(&timer_arms, &tid);
	if (old && now - old->walked < EMBERD_TIMER_MIN_GAP) {
		arm.walked = old->walked;
	} else {
		note_process_cached(id >> 32);
		arm.ustack = user_stack(id >> 32, now, form);
		arm.walked = now;
	}
	bpf_map_update_elem(&timer_arms, &tid, &arm, BPF_ANY);
	return 0;
}

SEC("uprobe")
int handle__node_timer(struct uprobe_regs *ctx)
{
	return WITH_SCRATCH(on_timer_start(ctx, EMBERD_FORM_LOOP));
}

SEC("uprobe")
int handle__node_timer_bounded(struct uprobe_regs *ctx)
{
	return WITH_SCRATCH(on_timer_start(ctx, EMBERD_FORM_BOUNDED));
}

/*
 * For the thread `prev` (current, tid `tid`) switching out into `b`: if it
 * sleeps in a poll until a timer it armed, the armed stack and the poll's
 * end; else none.
 */
static __always_inline void note_timer_wait(struct task_struct *prev, __u32 tid,
					    struct blocked *b, __u64 now)
{
	struct pt_regs___timer *regs;
	struct timer_arm *arm;
	__u64 nr, timeout, end;

	b->timer_ustack = EMBERD_STACK_NONE;
	b->poll_end = 0;
	arm = bpf_map_lookup_elem(&timer_arms, &tid);
	if (!arm || arm->ustack == EMBERD_STACK_NONE || arm->ustack == EMBERD_STACK_LOST)
		return;
	regs = (void *)user_regs((struct task_struct___emberd *)prev);
	if (!regs)
		return;
	nr = BPF_CORE_READ(regs, orig_ax);
	if (nr != NR_EPOLL_WAIT && nr != NR_EPOLL_PWAIT)
		return;
	timeout = (__u32)BPF_CORE_READ(regs, r10); /* int ms; -1: none */
	if ((int)timeout <= 0)
		return;
	end = now + timeout * 1000 * 1000;
	if (end + EMBERD_TIMER_LAG < arm->due || end > arm->due + EMBERD_TIMER_LATE)
		return;
	b->timer_ustack = arm->ustack;
	b->poll_end = end;
}

/* Whether `b`'s block, ending now, was a sleep until its armed timer. */
static __always_inline int timer_wait_ended(struct blocked *b, __u64 now)
{
	return b->poll_end && b->timer_ustack != EMBERD_STACK_NONE &&
	       now + EMBERD_TIMER_SLACK >= b->poll_end;
}

#endif /* EMBERD_NODE_TIMERS_H */
