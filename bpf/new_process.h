/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * New-process notices, shared by profile.bpf.c and events.bpf.c (each object
 * gets its own maps). A process missing from `seen_tgids` is new (or has just
 * exec'd): its tgid goes to the `new_tgids` ring buffer, which wakes the
 * agent to read the process's mappings while it is still alive (a
 * short-lived process may be gone by the next drain). A ring buffer, not a
 * map the agent polls: an idle host then wakes the agent once a second,
 * not twenty times, and an empty ring costs nothing to look at (walking an
 * empty hash map visits every bucket).
 *
 * The interface: note_process() (its result says whether the notice was
 * dropped, for the caller's counter), and new_process_exec() and
 * new_process_exit(), which each object's own sched_process_exec and
 * sched_process_exit programs call before their own clean-up.
 */
#ifndef EMBERD_NEW_PROCESS_H
#define EMBERD_NEW_PROCESS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

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

/* Announces process `tgid` to the agent unless it was already. 1 when the
 * ring was full and the notice is dropped (a fork storm): the caller counts
 * it; the process is forgotten again, so its next sample or event retries. */
static __always_inline int note_process(__u32 tgid)
{
	__u8 one = 1;

	if (tgid == 0 || bpf_map_lookup_elem(&seen_tgids, &tgid))
		return 0;
	bpf_map_update_elem(&seen_tgids, &tgid, &one, BPF_ANY);
	if (bpf_ringbuf_output(&new_tgids, &tgid, sizeof(tgid), 0) != 0) {
		bpf_map_delete_elem(&seen_tgids, &tgid);
		return 1;
	}
	return 0;
}

/*
 * For a sched_process_exec program, in the exec'ing task: after exec its
 * mappings are new, so it counts as a new process again.
 */
static __always_inline void new_process_exec(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	bpf_map_delete_elem(&seen_tgids, &tgid);
}

/*
 * For a sched_process_exit program, in the exiting task. When a process's
 * main thread exits, its tgid leaves `seen_tgids`, so a later process that
 * reuses the pid is noticed (and its mappings read) instead of inheriting
 * the old one's.
 */
static __always_inline void new_process_exit(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	if ((__u32)id == tgid)
		bpf_map_delete_elem(&seen_tgids, &tgid);
}

#endif /* EMBERD_NEW_PROCESS_H */
