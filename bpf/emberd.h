/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Layouts shared by the BPF programs and the Rust agent. The Rust side uses
 * the skeleton's generated `types::*` for these, and pins their sizes, so a
 * change here that is not mirrored there fails the build, not the profile.
 */
#ifndef EMBERD_H
#define EMBERD_H

#define EMBERD_COMM_LEN 16
/* kernel.perf_event_max_stack is 127 here: a 128-deep stack map fails with -EINVAL. */
#define EMBERD_MAX_STACK_DEPTH 127

/* Stack ids below zero are not map keys but what happened to the stack. */
#define EMBERD_STACK_NONE (-1) /* no stack of that kind: user-mode sample, kernel thread */
#define EMBERD_STACK_LOST (-2) /* the kernel had a stack but could not store it */

/* One aggregation key per (thread, stacks). Value: u64 number of samples. */
struct sample_key {
	__u32 tgid;
	__u32 pid;
	__s32 kstack_id;
	__s32 ustack_id;
	char comm[EMBERD_COMM_LEN];
};

/*
 * Indices of the per-CPU counters map. Keep in step with `Counter` in
 * src/collect/counters.rs.
 */
enum emberd_counter {
	COUNTER_SAMPLES = 0,        /* samples the program saw, idle included */
	COUNTER_IDLE_SKIPPED,       /* samples of the idle task, left out */
	COUNTER_FILTERED,           /* samples of other processes when one pid is profiled */
	COUNTER_KSTACK_COLLISION,   /* -EEXIST: another stack owns the hash bucket */
	COUNTER_USTACK_COLLISION,
	COUNTER_STACK_MAP_FULL,     /* -ENOMEM from bpf_get_stackid */
	COUNTER_USTACK_MISSING,     /* user task whose user stack could not be read */
	COUNTER_COUNTS_FULL,        /* the counts map refused a new key: the sample is lost */
	COUNTER_NEW_PROCESS_DROPPED, /* new_tgids was full: a process's maps are read late */
	COUNTER_MAX,
};

/* Load-time settings, written between open and load. */
struct emberd_config {
	__u32 target_tgid;  /* 0: every process */
	__u8 include_idle;  /* 1: keep samples of the idle task (pid 0) */
	__u8 _pad[3];
};

#endif /* EMBERD_H */
