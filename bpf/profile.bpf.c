// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CPU sampling: a perf_event program on the cpu-clock software event of every
 * CPU. Each sample is counted under (tgid, pid, comm, kernel stack, user stack)
 * in one of two buffers; the agent flips `active_buffer` before draining the
 * other one, so no sample races a drain and no stack id is deleted while a
 * count still refers to it.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include "emberd.h"

#ifndef EEXIST
#define EEXIST 17
#endif
#ifndef ENOMEM
#define ENOMEM 12
#endif
#ifndef EFAULT
#define EFAULT 14
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct emberd_config config = {};

/* Which buffer the program writes: 0 or 1. Flipped by the agent. */
volatile __u32 active_buffer = 0;

/* max_entries of these four maps are set by the agent before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct sample_key);
	__type(value, __u64); /* samples */
} counts0 SEC(".maps"), counts1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, EMBERD_MAX_STACK_DEPTH * sizeof(__u64)); /* instruction pointers */
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

static __always_inline void on_new_process_dropped(void)
{
	count(COUNTER_NEW_PROCESS_DROPPED);
}

/* Turns bpf_get_stackid's result into a key id, counting what went wrong. */
static __always_inline __s32 stack_result(long id, __u32 collision_counter)
{
	if (id >= 0)
		return id;
	if (id == -EEXIST) {
		count(collision_counter);
		return EMBERD_STACK_LOST;
	}
	if (id == -ENOMEM) {
		count(COUNTER_STACK_MAP_FULL);
		return EMBERD_STACK_LOST;
	}
	/* -EFAULT: no stack of this kind (user-mode sample, kernel thread). */
	return EMBERD_STACK_NONE;
}

static __always_inline void record(void *ctx, void *counts, void *stacks, __u32 tgid, __u32 pid)
{
	struct sample_key key = {};
	__u64 one = 1, *val;

	key.tgid = tgid;
	key.pid = pid;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	key.kstack_id = stack_result(bpf_get_stackid(ctx, stacks, 0), COUNTER_KSTACK_COLLISION);
	key.ustack_id = stack_result(bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK),
				     COUNTER_USTACK_COLLISION);
	/* A user task (tgid != 0, not a kernel thread) without user stack. */
	if (key.ustack_id == EMBERD_STACK_NONE && key.kstack_id == EMBERD_STACK_NONE)
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

SEC("perf_event")
int handle__cpu_clock(struct bpf_perf_event_data *ctx)
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
	note_process(tgid);
	if (active_buffer == 0)
		record(ctx, &counts0, &stacks0, tgid, pid);
	else
		record(ctx, &counts1, &stacks1, tgid, pid);
	return 0;
}
