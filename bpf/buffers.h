/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The counts buffers' hand-over, shared by profile.bpf.c and events.bpf.c.
 * The agent flips `active_buffer` and then drains the other buffer; a run
 * that read the old value must be done writing it first. Each run counts
 * itself into `writers[b]` before it writes buffer b and out after, and
 * reads `active_buffer` again once counted in: if the agent flipped in
 * between, the run moves to the new buffer. The agent writes the flag and
 * then reads the count, the run counts and then reads the flag (both
 * ordered by full barriers: the atomic add here, a SeqCst fence there), so
 * either the agent sees the run's count and waits for it, or the run sees
 * the flip and never touches the old buffer.
 */
#ifndef EMBERD_BUFFERS_H
#define EMBERD_BUFFERS_H

/* Counts this run in as a writer of the active buffer and returns it (0 or
 * 1); the caller counts out with __sync_fetch_and_add(&writers[b], -1). */
static __always_inline __u32 begin_write(volatile __u32 *active, volatile __u64 *writers)
{
	__u32 b = *active & 1;

	__sync_fetch_and_add(&writers[b], 1);
	if ((*active & 1) != b) {
		__sync_fetch_and_add(&writers[b], -1);
		b ^= 1;
		__sync_fetch_and_add(&writers[b], 1);
	}
	return b;
}

#endif /* EMBERD_BUFFERS_H */
