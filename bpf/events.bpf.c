// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Off-CPU time, wakeups, off-wake chains and page faults.
 *
 * sched_switch remembers when a thread left the CPU and the stacks it blocked
 * in; sched_waking charges the blocked time so far to the waker's stack and
 * notes the waker; when the thread runs again its whole off-CPU time is
 * charged to the blocked stack (offcpu) and to blocked + waker (offwake).
 *
 * Counts are drained with lookup-and-delete (no double buffer). Stack ids are
 * held by blocked threads across drains, so they are not deleted after each
 * drain: every use stamps `stack_used[id]`, and the agent deletes only ids
 * unused for longer than the maximum block time.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "emberd.h"

#ifndef EEXIST
#define EEXIST 17
#endif
#ifndef ENOMEM
#define ENOMEM 12
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Minimal CO-RE view of the kernel's task_struct. */
struct task_struct {
	int pid;
	int tgid;
	char comm[16];
} __attribute__((preserve_access_index));

const volatile struct events_config config = {
	.max_block_ns = 10ULL * 1000 * 1000 * 1000,
	.min_block_ns = 1000,
	.sample_one_in = 1,
	.pagefault_period = 1,
};

/* max_entries of these maps are set by the agent before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct event_key);
	__type(value, __u64); /* ns, or page faults */
} event_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, EMBERD_MAX_STACK_DEPTH * sizeof(__u64));
} event_stacks SEC(".maps");

/* Last use of each stack id, ns; same max_entries as event_stacks. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} stack_used SEC(".maps");

/* Threads off CPU now, by thread id. Bounded: overflow is counted. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, struct blocked);
} blocked_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ECOUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} event_counters SEC(".maps");

/* Per-CPU scratch for building keys (too big for comfort on the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event_key);
} key_scratch SEC(".maps");

static __always_inline void ecount(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&event_counters, &which);

	if (v)
		*v += 1;
}

#include "new_process.h"

static __always_inline void on_new_process_dropped(void)
{
	ecount(ECOUNTER_NEW_PROCESS_DROPPED);
}

static __always_inline void stamp(__s32 id, __u64 now)
{
	__u32 k = id;
	__u64 *v;

	if (id < 0)
		return;
	v = bpf_map_lookup_elem(&stack_used, &k);
	if (v)
		*v = now;
}

static __always_inline __s32 stackid(void *ctx, __u64 flags, __u64 now)
{
	long id = bpf_get_stackid(ctx, &event_stacks, flags);

	if (id >= 0) {
		stamp(id, now);
		return id;
	}
	if (id == -EEXIST || id == -ENOMEM) {
		ecount(ECOUNTER_STACK_LOST);
		return EMBERD_STACK_LOST;
	}
	return EMBERD_STACK_NONE;
}

static __always_inline void add(struct event_key *key, __u64 value)
{
	__u64 *v = bpf_map_lookup_elem(&event_counts, key);

	if (v) {
		__sync_fetch_and_add(v, value);
		return;
	}
	if (bpf_map_update_elem(&event_counts, key, &value, BPF_NOEXIST) == 0)
		return;
	v = bpf_map_lookup_elem(&event_counts, key);
	if (v)
		__sync_fetch_and_add(v, value);
	else
		ecount(ECOUNTER_COUNTS_FULL);
}

static __always_inline struct event_key *scratch_key(void)
{
	__u32 zero = 0;
	struct event_key *k = bpf_map_lookup_elem(&key_scratch, &zero);

	if (k)
		__builtin_memset(k, 0, sizeof(*k));
	return k;
}

static __always_inline void blocked_key(struct event_key *k, __u32 event, __u32 pid,
					struct blocked *b)
{
	k->event = event;
	k->tgid = b->tgid;
	k->pid = pid;
	k->kstack_id = b->kstack_id;
	k->ustack_id = b->ustack_id;
	__builtin_memcpy(k->comm, b->comm, sizeof(k->comm));
}

/*
 * TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state)
 */
SEC("raw_tracepoint/sched_switch")
int handle__sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx->args[1];
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	unsigned int prev_state = ctx->args[3];
	__u64 now = bpf_ktime_get_ns();
	__u32 prev_pid = BPF_CORE_READ(prev, pid);
	__u32 prev_tgid = BPF_CORE_READ(prev, tgid);
	__u32 next_pid = BPF_CORE_READ(next, pid);
	struct blocked *b;

	ecount(ECOUNTER_SWITCHES);
	if (!config.offcpu)
		return 0;

	/* The thread leaving the CPU: remember when and where it blocked. */
	if (prev_pid != 0 &&
	    (config.state_mask == 0 || (prev_state & config.state_mask)) &&
	    (config.target_tgid == 0 || prev_tgid == config.target_tgid)) {
		if (config.sample_one_in > 1 && bpf_get_prandom_u32() % config.sample_one_in) {
			ecount(ECOUNTER_SAMPLED_OUT);
		} else {
			struct blocked nb = {};

			note_process(prev_tgid);
			nb.ts = now;
			nb.tgid = prev_tgid;
			nb.kstack_id = stackid(ctx, 0, now);
			nb.ustack_id = stackid(ctx, BPF_F_USER_STACK, now);
			BPF_CORE_READ_STR_INTO(&nb.comm, prev, comm);
			if (bpf_map_update_elem(&blocked_threads, &prev_pid, &nb, BPF_ANY) != 0)
				ecount(ECOUNTER_BLOCKED_FULL);
		}
	}

	/* The thread coming back: charge its time off CPU. */
	if (next_pid == 0)
		return 0;
	b = bpf_map_lookup_elem(&blocked_threads, &next_pid);
	if (!b)
		return 0;
	{
		__u64 delta = now - b->ts;
		struct event_key *k;

		if (delta >= config.min_block_ns && delta <= config.max_block_ns) {
			delta *= config.sample_one_in > 1 ? config.sample_one_in : 1;
			k = scratch_key();
			if (k) {
				blocked_key(k, EVENT_OFFCPU, next_pid, b);
				stamp(k->kstack_id, now);
				stamp(k->ustack_id, now);
				add(k, delta);
				if (config.offwake && b->has_waker) {
					k->event = EVENT_OFFWAKE;
					k->waker_tgid = b->waker_tgid;
					k->waker_pid = b->waker_pid;
					k->waker_kstack_id = b->waker_kstack_id;
					k->waker_ustack_id = b->waker_ustack_id;
					__builtin_memcpy(k->waker_comm, b->waker_comm, sizeof(k->waker_comm));
					stamp(k->waker_kstack_id, now);
					stamp(k->waker_ustack_id, now);
					add(k, delta);
				}
			}
		}
	}
	bpf_map_delete_elem(&blocked_threads, &next_pid);
	return 0;
}

/* TP_PROTO(struct task_struct *p) */
static __always_inline int on_wakeup(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx->args[0];
	__u32 pid = BPF_CORE_READ(p, pid);
	__u64 now = bpf_ktime_get_ns(), delta;
	__u64 id = bpf_get_current_pid_tgid();
	struct event_key *k;
	struct blocked *b;

	ecount(ECOUNTER_WAKEUPS);
	if (!config.wakeup && !config.offwake)
		return 0;
	b = bpf_map_lookup_elem(&blocked_threads, &pid);
	if (!b)
		return 0;
	note_process(id >> 32);
	b->waker_tgid = id >> 32;
	b->waker_pid = (__u32)id;
	b->waker_kstack_id = stackid(ctx, 0, now);
	b->waker_ustack_id = stackid(ctx, BPF_F_USER_STACK, now);
	bpf_get_current_comm(&b->waker_comm, sizeof(b->waker_comm));
	b->has_waker = 1;

	delta = now - b->ts;
	if (!config.wakeup || delta < config.min_block_ns || delta > config.max_block_ns)
		return 0;
	delta *= config.sample_one_in > 1 ? config.sample_one_in : 1;
	k = scratch_key();
	if (!k)
		return 0;
	/* The waker is the subject: its process, thread and stacks. */
	k->event = EVENT_WAKEUP;
	k->tgid = b->waker_tgid;
	k->pid = b->waker_pid;
	k->kstack_id = b->waker_kstack_id;
	k->ustack_id = b->waker_ustack_id;
	__builtin_memcpy(k->comm, b->waker_comm, sizeof(k->comm));
	/* Whom it woke, for context. */
	k->waker_tgid = b->tgid;
	k->waker_pid = pid;
	__builtin_memcpy(k->waker_comm, b->comm, sizeof(k->waker_comm));
	k->waker_kstack_id = EMBERD_STACK_NONE;
	k->waker_ustack_id = EMBERD_STACK_NONE;
	add(k, delta);
	return 0;
}

/*
 * sched_waking, not sched_wakeup: on this kernel a wakeup of a task on another
 * CPU is queued (TTWU_QUEUE) and sched_wakeup fires there, in the idle task or
 * whoever runs, so the waker would read as swapper. sched_waking fires at the
 * start of try_to_wake_up, in the waker's own context (as bcc's kprobe on
 * try_to_wake_up, which this kernel cannot have).
 */
SEC("raw_tracepoint/sched_waking")
int handle__sched_waking(struct bpf_raw_tracepoint_args *ctx)
{
	return on_wakeup(ctx);
}

SEC("raw_tracepoint/sched_wakeup_new")
int handle__sched_wakeup_new(struct bpf_raw_tracepoint_args *ctx)
{
	return on_wakeup(ctx);
}

/* The page-fault software event, sampled every `pagefault_period` faults. */
SEC("perf_event")
int handle__page_fault(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u32 tgid = id >> 32;
	struct event_key *k;

	ecount(ECOUNTER_PAGEFAULTS);
	if (tgid == 0 || (config.target_tgid && tgid != config.target_tgid))
		return 0;
	note_process(tgid);
	k = scratch_key();
	if (!k)
		return 0;
	k->event = EVENT_PAGEFAULT;
	k->tgid = tgid;
	k->pid = (__u32)id;
	/* The event carries user registers: the kernel stack is always absent. */
	k->kstack_id = EMBERD_STACK_NONE;
	k->ustack_id = stackid(ctx, BPF_F_USER_STACK, now);
	bpf_get_current_comm(&k->comm, sizeof(k->comm));
	k->waker_kstack_id = EMBERD_STACK_NONE;
	k->waker_ustack_id = EMBERD_STACK_NONE;
	add(k, config.pagefault_period);
	return 0;
}
