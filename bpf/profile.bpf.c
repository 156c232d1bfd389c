// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CPU sampling: a perf_event program on the cpu-clock software event of every
 * CPU. Each sample is counted under (tgid, pid, comm, kernel stack, user stack)
 * in one of two buffers; the agent flips `active_buffer` before draining the
 * other one, so no sample races a drain and no stack is deleted while a
 * count still refers to it. User stacks are unwound by bpf/unwind.h, kernel
 * stacks by the kernel's unwinder; both are stored by hash (no stack-trace
 * maps, whose bucket collisions lost stacks).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include "emberd.h"
#include "buffers.h"


char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct emberd_config config = {};

/* Which buffer the program writes: 0 or 1. Flipped by the agent. */
volatile __u32 active_buffer = 0;
/* Runs writing each buffer now: the agent drains a buffer once its count is
 * 0 after the flip (see begin_write). */
volatile __u64 writers[2] = {};

/* max_entries of these four maps are set by the agent before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct sample_key);
	__type(value, __u64); /* samples */
} counts0 SEC(".maps"), counts1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);    /* hash of the stack, see bpf/unwind.h */
	__type(value, struct stored_stack);
} stacks0 SEC(".maps"), stacks1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &which);

	if (v)
		*v += 1;
}

#include "new_process.h"
#include "unwind.h"

/*
 * TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
 * After exec the process's mappings are another program's: it is new again
 * (bpf/new_process.h), and its proc_unwind entry (read before) must not be
 * used (see exec_at).
 */
SEC("raw_tracepoint/sched_process_exec")
int handle__sched_process_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 now = bpf_ktime_get_ns();

	new_process_exec();
	bpf_map_update_elem(&exec_at, &tgid, &now, BPF_ANY);
	return 0;
}

/* TP_PROTO(struct task_struct *p), in the exiting task. */
SEC("raw_tracepoint/sched_process_exit")
int handle__sched_process_exit(void *ctx)
{
	new_process_exit();
	return 0;
}

/* Stores a stack built in the scratch buffer, counting a loss by reason. */
static __always_inline __u64 keep_stack(void *stacks, struct stored_stack *s,
					__u32 collision_counter)
{
	__u32 lost = 0;
	__u64 key;

	if (!s)
		return EMBERD_STACK_NONE;
	key = store_stack(stacks, s, 0, &lost, 0, 0, 0);
	if (key == EMBERD_STACK_LOST) {
		count(lost == STACK_LOST_FULL ? COUNTER_STACK_MAP_FULL : collision_counter);
		ucount(lost == STACK_LOST_FULL ? UCOUNTER_LOST_FULL : UCOUNTER_LOST_COLLISION);
	}
	return key;
}

static __always_inline void record(void *ctx, void *counts, void *stacks, __u32 tgid, __u32 pid,
				   const int form)
{
	struct task_struct___emberd *task = current_task();
	struct sample_key key = {};
	__u64 one = 1, *val;

	key.tgid = tgid;
	key.pid = pid;
	key.tick = bpf_ktime_get_ns() / EMBERD_TICK_NS;
	key.account = account_of((__u32)bpf_get_current_uid_gid());
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	key.kstack = keep_stack(stacks, kernel_stack(ctx), COUNTER_KSTACK_COLLISION);
	key.ustack = keep_stack(stacks, unwind_user(task, tgid, form), COUNTER_USTACK_COLLISION);
	/* A user task (tgid != 0, not a kernel thread) without user stack. */
	if (key.ustack == EMBERD_STACK_NONE && key.kstack == EMBERD_STACK_NONE)
		count(COUNTER_USTACK_MISSING);

	val = bpf_map_lookup_elem(counts, &key);
	if (val) {
		__sync_fetch_and_add(val, 1);
		return;
	}
	if (bpf_map_update_elem(counts, &key, &one, BPF_NOEXIST) == 0)
		return;
	/* Another CPU inserted the key first: add to its entry. */
	val = bpf_map_lookup_elem(counts, &key);
	if (val)
		__sync_fetch_and_add(val, 1);
	else
		count(COUNTER_COUNTS_FULL);
}

static __always_inline int on_cpu_clock(struct bpf_perf_event_data *ctx, const int form)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, pid = (__u32)id;

	count(COUNTER_SAMPLES);
	if (pid == 0 && !config.include_idle) {
		count(COUNTER_IDLE_SKIPPED);
		return 0;
	}
	if (config.target_tgid && tgid != config.target_tgid) {
		count(COUNTER_FILTERED);
		return 0;
	}
	if (note_process(tgid))
		count(COUNTER_NEW_PROCESS_DROPPED);
	__u32 b = begin_write(&active_buffer, writers);
	if (b == 0)
		record(ctx, &counts0, &stacks0, tgid, pid, form);
	else
		record(ctx, &counts1, &stacks1, tgid, pid, form);
	__sync_fetch_and_add(&writers[b], -1);
	return 0;
}

/* The two forms of the sampler (see EMBERD_FORM_LOOP in emberd.h). */
SEC("perf_event")
int handle__cpu_clock(struct bpf_perf_event_data *ctx)
{
	return on_cpu_clock(ctx, EMBERD_FORM_LOOP);
}

SEC("perf_event")
int handle__cpu_clock_bounded(struct bpf_perf_event_data *ctx)
{
	return on_cpu_clock(ctx, EMBERD_FORM_BOUNDED);
}
