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

/* ---- events.bpf.c: off-CPU, wakeup, off-wake chains, page faults ---- */

/* Keep in step with `EventKind` in src/collect/events.rs. */
enum emberd_event {
	EVENT_OFFCPU = 1,   /* value: ns blocked, charged to the blocked stack */
	EVENT_WAKEUP = 2,   /* value: ns the woken thread had blocked, charged to the waker's stack */
	EVENT_OFFWAKE = 3,  /* value: ns blocked, blocked stack and waker stack */
	EVENT_PAGEFAULT = 4, /* value: page faults (sampled count x period) */
};

/* One aggregation key for every event; waker fields are zero unless used. */
struct event_key {
	__u32 event;
	__u32 tgid;
	__u32 pid;
	__s32 kstack_id;
	__s32 ustack_id;
	__u32 waker_tgid;
	__u32 waker_pid;
	__s32 waker_kstack_id;
	__s32 waker_ustack_id;
	__u32 _pad;
	char comm[EMBERD_COMM_LEN];
	char waker_comm[EMBERD_COMM_LEN];
};

/*
 * A thread off CPU since `ts`, with the user stack it blocked in (its kernel
 * stack is walked when it comes back, see events.bpf.c).
 */
struct blocked {
	__u64 ts;              /* ns, bpf_ktime_get_ns; 0: not blocked */
	__u32 tgid;
	__s32 ustack_id;
	__u32 ustack_p;        /* chance the user stack was taken, of EMBERD_P_ONE; 0: not taken */
	__u32 waker_p;         /* chance the waker was recorded with, of EMBERD_P_ONE */
	__u32 waker_tgid;      /* set by sched_waking when has_waker */
	__u32 waker_pid;
	__s32 waker_kstack_id;
	__s32 waker_ustack_id;
	__u32 has_waker;       /* the waker's stacks were recorded */
	__u32 _pad;
	char comm[EMBERD_COMM_LEN];
	char waker_comm[EMBERD_COMM_LEN];
};

/* Probabilities in events.bpf.c are fixed point: EMBERD_P_ONE is certainty. */
#define EMBERD_P_ONE (1U << 16)
/* The least predicted chance (1/8), however short the thread's previous
 * block: bounds the weight of a long block that follows short ones. */
#define EMBERD_P_FLOOR (EMBERD_P_ONE >> 3)
/* Entries of events.bpf.c's `predicted` array, indexed by thread id modulo this. */
#define EMBERD_PREDICTED_SLOTS 65536

/*
 * A blocked thread's kernel stack, walked with bpf_get_task_stack, in the
 * `blocked_kstacks` map under the low 31 bits of `hash`. Off-CPU and off-wake
 * keys' `kstack_id` index this map, not the stack-trace map.
 */
struct task_kstack {
	__u64 hash;            /* of ips[0..nr) */
	__u64 used;            /* ns of last use, for the agent's collection */
	__u32 nr;
	__u32 _pad;
	__u64 ips[EMBERD_MAX_STACK_DEPTH]; /* zero after nr */
};

/* Indices of the events program's per-CPU counters; keep in step with
 * `EventCounter` in src/collect/events.rs. */
enum emberd_event_counter {
	ECOUNTER_SWITCHES = 0,     /* sched_switch calls seen */
	ECOUNTER_WAKEUPS,          /* sched_waking calls seen */
	ECOUNTER_PAGEFAULTS,       /* page-fault samples seen */
	ECOUNTER_BLOCKED_FULL,     /* blocked-thread table full: an off-CPU period is lost */
	ECOUNTER_COUNTS_FULL,      /* event counts map full: an event is lost */
	ECOUNTER_STACK_LOST,       /* stack collision or full stack map */
	ECOUNTER_SAMPLED_OUT,      /* off-CPU periods skipped by the 1-in-N sampling knob */
	ECOUNTER_NEW_PROCESS_DROPPED, /* new_tgids full: a process's maps are read late */
	ECOUNTER_SHORT_OFFCPU_SAMPLED_OUT, /* short off-CPU periods not recorded (sample_below_ns) */
	ECOUNTER_SHORT_WAKEUP_SAMPLED_OUT, /* wakeups ending short blocks not recorded */
	ECOUNTER_MAX,
};

/* Load-time settings of events.bpf.c. */
struct events_config {
	__u64 min_block_ns;      /* shorter off-CPU periods are not charged */
	__u64 max_block_ns;      /* longer ones are not charged either (bcc -M) */
	__u32 state_mask;        /* prev_state bits that count; 0 = every state */
	__u32 sample_one_in;     /* record 1 in N switch-outs (1 = all), value scaled by N */
	__u64 pagefault_period;  /* faults per page-fault sample, to scale values */
	__u64 sample_below_ns;   /* shorter blocks are sampled (events.bpf.c) */
	__u32 target_tgid;       /* 0: every process */
	__u8 offcpu;             /* record off-CPU (and wakeup/offwake need it) */
	__u8 wakeup;
	__u8 offwake;
	__u8 _pad;
};
