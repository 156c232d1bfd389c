/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * New-process notices, shared by profile.bpf.c and events.bpf.c (each object
 * gets its own maps). A process missing from `seen_tgids` is new (or has just
 * exec'd): its tgid goes to the `new_tgids` ring buffer, which wakes the
 * agent to read the process's mappings while it is still alive (a
 * short-lived process may be gone by the next drain). A ring buffer, not a
 * map the agent polls: an idle host then wakes the agent once a second,
 * not twenty times, and an empty ring costs nothing to look at (walking an
 * empty hash map visits every bucket). The caller defines
 * `on_new_process_dropped()` to count a full `new_tgids`, `on_exec()` and
 * `on_thread_exit()`.
 */
#ifndef EMBERD_NEW_PROCESS_H
#define EMBERD_NEW_PROCESS_H

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tgid */
	__type(value, __u8);
} seen_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024); /* 4096 notices of 16 bytes */
} new_tgids SEC(".maps");

static __always_inline void on_new_process_dropped(void);
/* Called by the exec handler below, for the includer's own caches, with
 * the thread id the exec'ing thread had before (see the handler). */
static __always_inline void on_exec(__u32 old_pid);
/* Called by the exit handler below for every exiting thread. */
static __always_inline void on_thread_exit(__u32 tid);

static __always_inline void note_process(__u32 tgid)
{
	__u8 one = 1;

	if (tgid == 0 || bpf_map_lookup_elem(&seen_tgids, &tgid))
		return;
	bpf_map_update_elem(&seen_tgids, &tgid, &one, BPF_ANY);
	if (bpf_ringbuf_output(&new_tgids, &tgid, sizeof(tgid), 0) != 0) {
		/* The ring is full (a fork storm): forget the process again, so
		 * its next sample or event retries the notice. */
		bpf_map_delete_elem(&seen_tgids, &tgid);
		on_new_process_dropped();
	}
}

/*
 * TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
 * Runs in the exec'ing task: after exec its mappings are new, so it counts as
 * a new process again. A thread other than the main one that execs takes
 * over the process id (de_thread): `old_pid` (current->pid before, the
 * global id) is a thread id that is gone without sched_process_exit.
 */
SEC("raw_tracepoint/sched_process_exec")
int handle__sched_process_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	bpf_map_delete_elem(&seen_tgids, &tgid);
	on_exec((__u32)ctx->args[1]);
	return 0;
}

/*
 * TP_PROTO(struct task_struct *p)
 * Runs in the exiting task. When a process's main thread exits, its tgid
 * leaves `seen_tgids`, so a later process that reuses the pid is noticed
 * (and its mappings read) instead of inheriting the old one's.
 */
SEC("raw_tracepoint/sched_process_exit")
int handle__sched_process_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	if ((__u32)id == tgid)
		bpf_map_delete_elem(&seen_tgids, &tgid);
	on_thread_exit((__u32)id);
	return 0;
}

#endif /* EMBERD_NEW_PROCESS_H */
