/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The core of events.bpf.c that every event's programs use (included by
 * events.bpf.c, memory.h and blockio.h; one object): its settings
 * (`config`), the counts buffers and what they cannot take, the stack map
 * and each user's share of it, the per-CPU scratch and its claim
 * (WITH_SCRATCH), and the helpers that record an event: note_process_cached,
 * user_stack / keep_stack, stamp, scratch_key, add, chance.
 *
 * Stacks are held by blocked threads across drains, so they are not deleted
 * after each drain: every use stamps the stored stack's `used`, and the
 * agent deletes only stacks unused for longer than the maximum block time.
 * User stacks are unwound by bpf/unwind.h; all stacks are stored by hash in
 * `event_stacks`.
 */
#ifndef EMBERD_EVENTS_H
#define EMBERD_EVENTS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emberd.h"
#include "buffers.h"
#include "new_process.h"

/* Minimal CO-RE view of the kernel's task_struct. */
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

const volatile struct events_config config = {
	.max_block_ns = 10ULL * 1000 * 1000 * 1000,
	.min_block_ns = 1000,
	.sample_one_in = 1,
	.pagefault_period = 1,
	.sample_below_ns = 0,
	.malloc_sample_bytes = 512 * 1024,
};

/* max_entries of these maps are set by the agent before load. */
/*
 * Two buffers, as in profile.bpf.c: the agent flips `active_buffer` and
 * drains the other one once the runs that read the old value are done, so
 * no add lands on an element the drain is deleting.
 *
 * Wakeups and off-wake chains have a pair of buffers of their own
 * (wake_counts), flipped with event_counts. Their keys carry the waker's
 * stacks as well, so a pool whose threads wake each other at many depths
 * makes them by the tens of thousands a second: 32 Python threads blocking
 * on pipes and napping at random depths up to 80 made ~10,000 wake keys
 * per drain against ~150 off-CPU keys (issue 43). In one buffer they
 * filled it while the agent was naming the last drain, and off-CPU periods
 * were dropped with them. Here they can only fill their own.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct event_key);
	__type(value, __u64); /* ns, or page faults */
} event_counts0 SEC(".maps"), event_counts1 SEC(".maps"),
  wake_counts0 SEC(".maps"), wake_counts1 SEC(".maps");

/*
 * What a full counts buffer cannot take, by thread only (no stacks), drawn
 * as a `[dropped: counts map full]` leaf under the thread that lost it, so
 * totals stay true. Two buffers, flipped with the counts.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct event_key);
	__type(value, __u64);
} event_dropped0 SEC(".maps"), event_dropped1 SEC(".maps");

/* The key add_dropped builds (the caller's key is left as it was). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event_key);
} dropped_scratch SEC(".maps");

/* The label the agent draws as `[dropped: counts map full]`. */
#define DROPPED_LABEL "!counts_full"

/* Which counts buffer the programs write: 0 or 1. Flipped by the agent. */
volatile __u32 active_buffer = 0;
/* Runs writing each buffer now (see begin_write in emberd.h). */
volatile __u64 writers[2] = {};
/* Keys added to each buffer since the agent last drained it: at
 * `config.drain_at` the agent is woken to drain before the drain is due
 * (see notify_drain). */
volatile __u64 inserted[2] = {};
/* The same for the wake buffers. */
volatile __u64 wake_inserted[2] = {};

/* Stacks by hash (bpf/unwind.h); max_entries set by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stored_stack);
} event_stacks SEC(".maps");

/*
 * Stacks each user (account: real uid, or its subuid range's owner) holds
 * in `event_stacks`: a new one is refused past `config.stack_share` (half
 * the map), or when all users but root hold three quarters of it
 * (EMBERD_ALL_USERS), so one user's threads blocked at thousands of
 * distinct stacks cannot fill it for everyone, nor two users for root
 * (root is not limited). Added to
 * here at each insert, recounted by the agent at each collection. Users
 * beyond this map's size share the last key.
 */
#define STACKS_OTHER_UIDS EMBERD_OTHER_UIDS
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} stacks_by_uid SEC(".maps");

/* The unwinder (and uid_count, scratch_stack, kernel_stack); it reads `config`. */
#include "unwind.h"

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

/*
 * Whether a program of this object is using this CPU's scratch (key, stack,
 * unwind state). Programs can nest on one CPU: a sched_waking from an
 * interrupt inside the page-fault, syscall-exit or uprobe program, or
 * sched_switch when a preemptible kernel preempts one of them. The inner
 * run would overwrite the outer one's half-built key and stack: it is
 * skipped and counted (ECOUNTER_NESTED_SKIPPED) instead.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} scratch_busy SEC(".maps");

/* The process this CPU last announced: most switch-outs repeat it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} last_noted SEC(".maps");

static __always_inline void ecount(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&event_counters, &which);

	if (v)
		*v += 1;
}

/* Claims this CPU's scratch for the run; 0 (counted) if a run it
 * interrupted holds it. Release with `*busy = 0` on every way out. */
static __always_inline __u32 *scratch_claim(void)
{
	__u32 zero = 0, *busy = bpf_map_lookup_elem(&scratch_busy, &zero);

	if (!busy)
		return 0;
	if (*busy) {
		ecount(ECOUNTER_NESTED_SKIPPED);
		return 0;
	}
	*busy = 1;
	return busy;
}

/* The value of `call` (an int expression) run with this CPU's scratch
 * claimed; 0 without running it when a run it interrupted holds it. */
#define WITH_SCRATCH(call)                           \
	({                                           \
		__u32 *busy_ = scratch_claim();      \
		int ret_ = 0;                        \
		if (busy_) {                         \
			ret_ = (call);               \
			*busy_ = 0;                  \
		}                                    \
		ret_;                                \
	})

/* note_process, counting a dropped notice. */
static __always_inline void note_process_counted(__u32 tgid)
{
	if (note_process(tgid))
		ecount(ECOUNTER_NEW_PROCESS_DROPPED);
}

/* note_process, skipped when this CPU announced the same process last. */
static __always_inline void note_process_cached(__u32 tgid)
{
	__u32 zero = 0;
	__u32 *last = bpf_map_lookup_elem(&last_noted, &zero);

	if (last && *last == tgid)
		return;
	note_process_counted(tgid);
	if (last)
		*last = tgid;
}

/* Marks a stored stack as used now, so the agent's collection keeps it. */
static __always_inline void stamp(__u64 key, __u64 now)
{
	struct stored_stack *v;

	if (key <= EMBERD_STACK_LOST)
		return;
	v = bpf_map_lookup_elem(&event_stacks, &key);
	if (v)
		v->used = now;
}

/* Stores the scratch stack `s` (0: none) in `uid`'s share, counting a loss
 * by reason. */
static __always_inline __u64 keep_stack_as(struct stored_stack *s, __u64 now, __u32 uid)
{
	__u32 lost = 0;
	__u64 key;

	if (!s)
		return EMBERD_STACK_NONE;
	key = store_stack(&event_stacks, s, now, &lost, uid, &stacks_by_uid, config.stack_share);
	if (key == EMBERD_STACK_LOST) {
		ecount(ECOUNTER_STACK_LOST);
		if (lost == STACK_LOST_SHARE)
			ecount(ECOUNTER_STACK_SHARE);
		else
			ucount(lost == STACK_LOST_FULL ? UCOUNTER_LOST_FULL : UCOUNTER_LOST_COLLISION);
	}
	return key;
}

/* As keep_stack_as, in the current task's user's share. */
static __always_inline __u64 keep_stack(struct stored_stack *s, __u64 now)
{
	return keep_stack_as(s, now, account_of((__u32)bpf_get_current_uid_gid()));
}

/* The user stack of the current task (also the one switching out). */
static __always_inline __u64 user_stack(__u32 tgid, __u64 now, const int form)
{
	return keep_stack(unwind_user(current_task(), tgid, form), now);
}

/* Wakes the agent to drain now: a notice of tgid EMBERD_DRAIN_NOW on the
 * new-process ring. */
static __always_inline void notify_drain(void)
{
	__u32 now = EMBERD_DRAIN_NOW;

	bpf_ringbuf_output(&new_tgids, &now, sizeof(now), 0);
}

/* Adds `value` under `key` in `counts`; 0 when the map is full. `fill`
 * counts the buffer's keys (inserted[b] or wake_inserted[b]). */
static __always_inline int add_to(void *counts, struct event_key *key, __u64 value,
				  volatile __u64 *fill)
{
	__u64 *v = bpf_map_lookup_elem(counts, key);

	if (v) {
		__sync_fetch_and_add(v, value);
		return 1;
	}
	if (bpf_map_update_elem(counts, key, &value, BPF_NOEXIST) == 0) {
		__u64 n;

		/* No fetching atomics before Linux 5.12, not even in code never
		 * run (the verifier reads every instruction first): add, then
		 * read. Inserts racing in between step over drain_at, so the
		 * next few inserts notify too; the agent takes notices as one. */
		__sync_fetch_and_add(fill, 1);
		n = *fill;
		if (n >= config.drain_at && n < config.drain_at + 8)
			notify_drain();
		return 1;
	}
	v = bpf_map_lookup_elem(counts, key);
	if (v) {
		__sync_fetch_and_add(v, value);
		return 1;
	}
	return 0;
}

/* What a full counts buffer could not take, under the thread alone. */
static __always_inline void add_dropped(void *dropped, struct event_key *full, __u64 value)
{
	__u32 zero = 0;
	struct event_key *key = bpf_map_lookup_elem(&dropped_scratch, &zero);
	__u64 *v;

	if (full->event == EVENT_OFFCPU)
		ecount(ECOUNTER_COUNTS_FULL);
	else if (full->event == EVENT_WAKEUP)
		ecount(ECOUNTER_WAKEUP_COUNTS_FULL);
	else if (full->event == EVENT_OFFWAKE)
		ecount(ECOUNTER_OFFWAKE_COUNTS_FULL);
	else
		ecount(ECOUNTER_OTHER_COUNTS_FULL);
	if (!key)
		return;
	*key = *full;
	key->kstack = EMBERD_STACK_NONE;
	key->ustack = EMBERD_STACK_NONE;
	key->waker_tgid = 0;
	key->waker_pid = 0;
	key->waker_kstack = EMBERD_STACK_NONE;
	key->waker_ustack = EMBERD_STACK_NONE;
	__builtin_memset(key->waker_comm, 0, sizeof(key->waker_comm));
	__builtin_memset(key->label, 0, sizeof(key->label));
	__builtin_memcpy(key->label, DROPPED_LABEL, sizeof(DROPPED_LABEL));
	v = bpf_map_lookup_elem(dropped, key);
	if (v) {
		__sync_fetch_and_add(v, value);
		return;
	}
	if (bpf_map_update_elem(dropped, key, &value, BPF_NOEXIST) == 0)
		return;
	v = bpf_map_lookup_elem(dropped, key);
	if (v)
		__sync_fetch_and_add(v, value);
	else
		ecount(ECOUNTER_DROPPED_FULL);
}

/* Adds to the active buffer of the key's pair (wake_counts or
 * event_counts); what it cannot take goes to the dropped map, by thread.
 * Each map named at its own call: a helper's map is a constant. */
static __always_inline void add(struct event_key *key, __u64 value)
{
	__u32 b = begin_write(&active_buffer, writers);
	int wake = key->event == EVENT_WAKEUP || key->event == EVENT_OFFWAKE;
	int added;

	if (b == 0) {
		if (wake)
			added = add_to(&wake_counts0, key, value, &wake_inserted[0]);
		else
			added = add_to(&event_counts0, key, value, &inserted[0]);
		if (!added)
			add_dropped(&event_dropped0, key, value);
	} else {
		if (wake)
			added = add_to(&wake_counts1, key, value, &wake_inserted[1]);
		else
			added = add_to(&event_counts1, key, value, &inserted[1]);
		if (!added)
			add_dropped(&event_dropped1, key, value);
	}
	__sync_fetch_and_add(&writers[b], -1);
}

static __always_inline struct event_key *scratch_key(void)
{
	__u32 zero = 0;
	struct event_key *k = bpf_map_lookup_elem(&key_scratch, &zero);

	if (k)
		__builtin_memset(k, 0, sizeof(*k));
	return k;
}

/* 1 with probability num/den (num < den < 2^48), from the kernel's prandom. */
static __always_inline int chance(__u64 num, __u64 den)
{
	if (den >> 32) { /* keep r * den below 2^64 */
		num >>= 16;
		den >>= 16;
	}
	return (((__u64)bpf_get_prandom_u32() * den) >> 32) < num;
}

#endif /* EMBERD_EVENTS_H */
