// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The events object: every event but CPU samples. What is where:
 *   events.h       settings (`config`), counts buffers, stack map, scratch,
 *                  and the helpers every event records with (add, user_stack)
 *   events.bpf.c   (this file) off-CPU, wakeup, off-wake (sched_switch,
 *                  sched_waking, sched_wakeup_new), page faults, the exec and
 *                  exit programs, the task iterator that keeps held stacks
 *   memory.h       brk, mmap, munmap (syscall tracepoints), malloc (uprobes)
 *   blockio.h      block I/O latency (block_io_* or block_rq_* tracepoints)
 *   node_timers.h  node's timer waits charged to the JavaScript that armed
 *                  the timer (a uprobe on uv_timer_start, off-CPU's charge)
 *   new_process.h  new-process notices to the agent (both objects)
 *   unwind.h       user-stack walks and stack storage (both objects)
 *   emberd.h       layouts and enums shared with the agent
 * Which program serves which event, hook and form (the bpf_loop form and the
 * `_bounded` twin, see EMBERD_FORM_LOOP): src/collect/programs.rs.
 *
 * sched_switch remembers when a thread left the CPU and the user stack it
 * blocked in; sched_waking charges the blocked time so far to the waker's
 * stacks and notes the waker; when the thread runs again its whole off-CPU
 * time is charged to the blocked stacks (offcpu) and to blocked + waker
 * (offwake). The blocked thread's kernel stack is walked then, not when it
 * blocks: a sleeping task's kernel stack is still there to walk
 * (bpf_get_task_stack), and by then the length of the block is known, which
 * the sampling below needs.
 *
 * Sampling of short blocks. Kernel stack walks cost microseconds here (ORC
 * unwinder, mitigations), on the critical path of every wakeup, and on a busy
 * host most blocks last microseconds. A block shorter than T =
 * config.sample_below_ns is recorded with probability length/T and charged
 * T, so every block still counts for its length on average; blocks of T or
 * more are all recorded, exactly. Walks per second are then bounded by
 * blocked time / T rather than by the switch rate. The waker is sampled the
 * same way at sched_waking, independently: an off-wake chain is charged
 * whenever its waker was recorded (weighted by the waker's chance), the
 * off-CPU period only when its own draw says so.
 *
 * Predicted chances. The user stack has to be walked when the thread leaves
 * the CPU, before the length is known (a sleeping thread's user memory is not
 * readable from another's context), and that walk is then the dearest part
 * (~1 us here). So it is taken with a chance u predicted from the thread's
 * previous period (its length/T rounded up to 1/8, 1/4, 1/2 or 1; certain
 * with no history), and at switch-in the period is recorded with chance
 * min(1, p/u) more, p = length/T: with min(p, u) in all, and charged
 * length / min(p, u), still exact on average. The waker is drawn the same
 * way, first with the wakee's u, kept apart from its state and written only
 * when it changes (`predicted`): the state is written by the wakee's CPU at
 * every switch, and reaching it from the waker's CPU at every wakeup cost
 * ~7% of a ping-pong's throughput here. A thread that
 * blocks briefly again and again (the costly case) skips 7 walks and 7 reads
 * in 8; a long block right after short ones is recorded with chance at least
 * 1/8 and weighed accordingly.
 *
 * The prediction stays certain for EMBERD_SHORT_GRACE short periods after a
 * long one. Many threads alternate a long wait with a brief one: a condition
 * variable's waiter, woken, blocks again on the mutex its waker still holds.
 * Predicted from the last period alone, each long wait was drawn at 1/8 and
 * weighed 8: right on average, but a 4 s profile of such a waiter came out
 * 25% short on a busy VM. Walks stay bounded: at most EMBERD_SHORT_GRACE
 * more per long block, and long blocks number at most blocked time / (T/2).
 *
 * Counts are drained with lookup-and-delete (no double buffer). Stacks are
 * held by blocked threads across drains, so they are not deleted after each
 * drain: every use stamps the stored stack's `used`, and the agent deletes
 * only stacks unused for longer than the maximum block time. User stacks are
 * unwound by bpf/unwind.h; all stacks are stored by hash in `event_stacks`.
 */
#include "events.h"
#include "memory.h"
#include "blockio.h"
#include "node_timers.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Per-thread off-CPU state, in task storage: no hash of thread ids to look
 * up, fill or clean (it goes with the thread), and bounded by the threads
 * that exist. A failed allocation is counted as ECOUNTER_BLOCKED_FULL.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct blocked);
} blocked_threads SEC(".maps");

/*
 * The same state by thread id, for the bounded form (task storage in
 * tracing programs came with Linux 5.11): preallocated, sized by the agent.
 * Nothing deletes an entry for the kernel, so every way a thread id goes
 * away deletes it here: an exiting thread's at sched_process_exit, and an
 * exiting thread never gets one again (it can still block on its way out,
 * after that hook); a thread that execs takes over its process's id and
 * its own id goes without an exit, so sched_process_exec deletes the old
 * one (`old_pid`). Before that, a loop of thread + exec (issue 41) filled
 * the table in minutes, and every thread on the host lost its off-CPU
 * time. Whatever leaks still (an entry made between the agent's start and
 * a thread's exit it did not see) the agent sweeps: entries whose thread
 * is gone (src/collect/events.rs). Not created with task storage.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct blocked);
} blocked_by_tid SEC(".maps");

/*
 * Entries of `blocked_by_tid` each user (account, `struct blocked`'s
 * `owner`) holds: a new one is refused past `config.blocked_share` (half
 * the table) and counted (ECOUNTER_BLOCKED_SHARE), so one user's threads
 * cannot take every place (root is not limited). Added to at each insert,
 * taken from at each delete, recounted by the agent at each sweep. Users
 * beyond this map's size share the last key.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} blocked_by_uid SEC(".maps");

/* A blank `struct blocked` to create entries from: never written. Not on
 * the BPF stack, which sched_switch's calls already fill to near the
 * 512-byte limit (Linux 6.1 counts even the branch that never runs). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct blocked);
} blocked_blank SEC(".maps");

/* `task`'s off-CPU state, or 0. */
static __always_inline struct blocked *blocked_get(struct task_struct *task)
{
	__u32 tid;

	if (!config.bounded)
		return bpf_task_storage_get(&blocked_threads, task, 0, 0);
	tid = BPF_CORE_READ(task, pid);
	return bpf_map_lookup_elem(&blocked_by_tid, &tid);
}

/* The flag of an exiting task (PF_EXITING, set before sched_process_exit). */
#define EMBERD_PF_EXITING 0x00000004

/* Why blocked_create gave no state. */
#define BLOCKED_NO_ROOM 0   /* the table is full (or task storage failed) */
#define BLOCKED_SHARE 1     /* the user holds their share of the table */
#define BLOCKED_EXITING 2   /* an exiting thread: not recorded, not counted */

/*
 * `task`'s off-CPU state, created if missing, in user `uid`'s share of the
 * bounded form's table; 0 when it cannot be, with `*why` (BLOCKED_*).
 */
static __always_inline struct blocked *blocked_create(struct task_struct *task, __u32 uid,
						      int *why)
{
	struct blocked *b, *blank;
	__u32 tid, zero = 0;
	__u64 *held = 0, *all = 0;
	int added;

	if (!config.bounded)
		return bpf_task_storage_get(&blocked_threads, task, 0,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
	tid = BPF_CORE_READ(task, pid);
	b = bpf_map_lookup_elem(&blocked_by_tid, &tid);
	if (b)
		return b;
	/* An exiting thread may block again after sched_process_exit deleted
	 * its entry: an entry made now would outlive it. */
	if (BPF_CORE_READ((struct task_struct___emberd *)task, flags) & EMBERD_PF_EXITING) {
		*why = BLOCKED_EXITING;
		return 0;
	}
	if (config.blocked_share && uid != 0) {
		held = uid_count(&blocked_by_uid, uid);
		all = all_users_count(&blocked_by_uid);
		if (!within_share(held, all, config.blocked_share)) {
			*why = BLOCKED_SHARE;
			return 0;
		}
	}
	blank = bpf_map_lookup_elem(&blocked_blank, &zero);
	if (!blank)
		return 0;
	added = bpf_map_update_elem(&blocked_by_tid, &tid, blank, BPF_NOEXIST) == 0;
	b = bpf_map_lookup_elem(&blocked_by_tid, &tid);
	if (b && added) {
		b->owner = uid;
		count_in_share(held, all);
	}
	return b;
}

/*
 * Each thread's predicted chance (see the top of this file), by thread id
 * modulo the size, of EMBERD_P_ONE; 0: no history. Not in task storage:
 * reaching another task's storage reads a line of its task_struct that every
 * BPF run in that task writes (current->bpf_ctx), so a waker would miss the
 * cache on every wakeup. A slot shared by two threads only makes a
 * prediction worse, never a weight wrong: weights use the chance drawn with.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EMBERD_PREDICTED_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} predicted SEC(".maps");

/* Deletes thread `tid`'s entry of the bounded form's table, and takes it
 * from its owner's count. */
static __always_inline void forget_blocked(__u32 tid)
{
	struct blocked *b = bpf_map_lookup_elem(&blocked_by_tid, &tid);
	__u32 owner;
	__u64 *n;

	if (!b)
		return;
	owner = b->owner;
	if (bpf_map_delete_elem(&blocked_by_tid, &tid) != 0 || !config.blocked_share || owner == 0)
		return;
	n = bpf_map_lookup_elem(&blocked_by_uid, &owner);
	if (n && *n)
		__sync_fetch_and_add(n, -1);
	owner = EMBERD_ALL_USERS;
	n = bpf_map_lookup_elem(&blocked_by_uid, &owner);
	if (n && *n)
		__sync_fetch_and_add(n, -1);
}

/*
 * TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
 * Runs in the exec'ing task: it is a new process again
 * (bpf/new_process.h), and this CPU's last notice is forgotten, so its first
 * event after the exec announces it (and its new mappings). A thread other
 * than the main one that execs takes over the process id (de_thread):
 * `old_pid` (current->pid before, the global id) is a thread id gone without
 * sched_process_exit, and its off-CPU state goes too (see blocked_by_tid).
 */
SEC("raw_tracepoint/sched_process_exec")
int handle__sched_process_exec(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 old_pid = (__u32)ctx->args[1], zero = 0;
	__u32 *last = bpf_map_lookup_elem(&last_noted, &zero);

	new_process_exec();
	if (last)
		*last = 0;
	if (config.bounded && old_pid != (__u32)bpf_get_current_pid_tgid())
		forget_blocked(old_pid);
	return 0;
}

/*
 * TP_PROTO(struct task_struct *p), in the exiting task. An exiting thread
 * leaves no state behind (task storage goes with the task; the bounded
 * form's hash does not).
 */
SEC("raw_tracepoint/sched_process_exit")
int handle__sched_process_exit(void *ctx)
{
	new_process_exit();
	if (config.bounded)
		forget_blocked((__u32)bpf_get_current_pid_tgid());
	return 0;
}

/* The kernel stack of `task` (user `uid`), which is off CPU, as an
 * `event_stacks` key. */
static __always_inline __u64 blocked_kstack(struct task_struct *task, __u32 uid, __u64 now)
{
	struct stored_stack *s = scratch_stack();
	long n;

	if (!s)
		return EMBERD_STACK_NONE;
	n = bpf_get_task_stack(task, s->ips, sizeof(s->ips), 0);
	if (n <= 0)
		return EMBERD_STACK_NONE;
	s->nr = n / sizeof(__u64);
	s->end = s->nr >= EMBERD_MAX_STACK_DEPTH ? STACK_END_TRUNCATED : STACK_END_KERNEL;
	return keep_stack_as(s, now, uid);
}

/* v * num / den without overflowing for num, den < 2^32. */
static __always_inline __u64 scale_by(__u64 v, __u64 num, __u64 den)
{
	return v / den * num + v % den * num / den;
}

/*
 * What a record seen with chance `p` (of EMBERD_P_ONE) stands for: p was
 * min(u, length/T) for a prediction u; recorded with chance u when the
 * length reached T*u, else with chance length/T, which charges T.
 */
static __always_inline __u64 weigh(__u64 len, __u32 u, __u64 t, int *take, __u32 *p)
{
	__u64 num = len * EMBERD_P_ONE, den = t * u;

	if (num >= den) {
		*take = 1;
		*p = u;
		return scale_by(len, EMBERD_P_ONE, u);
	}
	*take = chance(num, den);
	*p = num / t ? num / t : 1;
	return t;
}

/* The predicted chance for thread `tid` (certain with no history). */
static __always_inline __u32 predicted_for(__u32 tid)
{
	__u32 slot = tid % EMBERD_PREDICTED_SLOTS, *p;

	if (!config.sample_below_ns)
		return EMBERD_P_ONE;
	p = bpf_map_lookup_elem(&predicted, &slot);
	return p && *p ? *p : EMBERD_P_ONE;
}

/* The chance to predict for a thread's next period from its last one. */
static __always_inline __u32 predict(__u64 last, __u64 t)
{
	if (last * 2 >= t)
		return EMBERD_P_ONE;
	if (last * 4 >= t)
		return EMBERD_P_ONE / 2;
	if (last * 8 >= t)
		return EMBERD_P_ONE / 4;
	return EMBERD_P_FLOOR;
}

/*
 * `next` comes back after `delta` ns off CPU: record the period if the
 * sampling picks it (see the top of this file) and charge it.
 */
static __always_inline void charge_offcpu(void *ctx, struct task_struct *next,
					  struct blocked *b, __u64 delta, __u64 now)
{
	__u64 t = config.sample_below_ns, scale = 1, weight;
	__u32 u = b->ustack_p, p;
	struct event_key *k;
	int take;

	if (!u) { /* the user stack was not taken (see the top of this file) */
		ecount(ECOUNTER_SHORT_OFFCPU_SAMPLED_OUT);
		return;
	}
	weight = weigh(delta, u, t, &take, &p);
	if (!take)
		ecount(ECOUNTER_SHORT_OFFCPU_SAMPLED_OUT);
	/* Off-wake needs this kernel stack too whenever the waker was recorded. */
	if (!take && !(config.offwake && b->has_waker))
		return;
	if (config.sample_one_in > 1)
		scale = config.sample_one_in;
	k = scratch_key();
	if (!k)
		return;
	k->event = EVENT_OFFCPU;
	k->tgid = b->tgid;
	k->pid = next->pid;
	k->account = b->uid;
	if (timer_wait_ended(b, now)) {
		/* A poll's sleep until a node timer: the function that armed it
		 * waited (bpf/node_timers.h). */
		ecount(ECOUNTER_TIMER_WAITS);
		k->kstack = EMBERD_STACK_NONE;
		k->ustack = b->timer_ustack;
		__builtin_memcpy(k->label, "timer wait", sizeof("timer wait"));
	} else {
		k->kstack = blocked_kstack(next, b->uid, now);
		k->ustack = b->ustack;
	}
	__builtin_memcpy(k->comm, b->comm, sizeof(k->comm));
	stamp(k->ustack, now);
	if (take)
		add(k, weight * scale);
	if (config.offwake && b->has_waker) {
		/* Recorded with chance u (user stack) times waker_p (waker). */
		__u64 v = scale_by(delta, EMBERD_P_ONE, u);

		k->event = EVENT_OFFWAKE;
		k->waker_tgid = b->waker_tgid;
		k->waker_pid = b->waker_pid;
		k->waker_kstack = b->waker_kstack;
		k->waker_ustack = b->waker_ustack;
		__builtin_memcpy(k->waker_comm, b->waker_comm, sizeof(k->waker_comm));
		stamp(k->waker_kstack, now);
		stamp(k->waker_ustack, now);
		add(k, scale_by(v, EMBERD_P_ONE, b->waker_p ? b->waker_p : 1) * scale);
	}
}

static __always_inline int on_switch_claimed(void *ctx, struct task_struct *prev,
					     struct task_struct *next, unsigned int prev_state,
					     const int form)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid(); /* prev is current here */
	__u32 prev_pid = (__u32)id, prev_tgid = id >> 32;
	struct blocked *b;

	ecount(ECOUNTER_SWITCHES);
	if (!config.offcpu)
		return 0;

	/* The thread leaving the CPU: remember when, and maybe its user stack. */
	if (prev_pid != 0 &&
	    (config.state_mask == 0 || (prev_state & config.state_mask)) &&
	    (config.target_tgid == 0 || prev_tgid == config.target_tgid)) {
		if (config.sample_one_in > 1 && bpf_get_prandom_u32() % config.sample_one_in) {
			ecount(ECOUNTER_SAMPLED_OUT);
		} else {
			int why = BLOCKED_NO_ROOM;
			__u32 account = account_of((__u32)bpf_get_current_uid_gid());

			b = blocked_create(prev, account, &why);
			if (b) {
				__u32 u = predicted_for(prev_pid);

				note_process_cached(prev_tgid);
				ecount(ECOUNTER_OFFCPU_BEGUN);
				b->ts = now;
				b->has_waker = 0;
				b->tgid = prev_tgid;
				b->uid = account;
				bpf_get_current_comm(&b->comm, sizeof(b->comm));
				if (u == EMBERD_P_ONE || chance(u, EMBERD_P_ONE)) {
					b->ustack_p = u;
					b->ustack = user_stack(prev_tgid, now, form);
					note_timer_wait(prev, prev_pid, b, now);
				} else {
					b->ustack_p = 0;
					b->timer_ustack = EMBERD_STACK_NONE;
					b->poll_end = 0;
				}
			} else if (why == BLOCKED_SHARE) {
				ecount(ECOUNTER_BLOCKED_SHARE);
			} else if (why == BLOCKED_NO_ROOM) {
				ecount(ECOUNTER_BLOCKED_FULL);
			}
		}
	}

	/* The thread coming back: charge its time off CPU. */
	b = blocked_get(next);
	if (b && b->ts) {
		__u64 delta = now - b->ts;
		__u32 pred = predict(delta, config.sample_below_ns);
		__u32 slot = (__u32)next->pid % EMBERD_PREDICTED_SLOTS, *pp;

		b->ts = 0;
		ecount(ECOUNTER_OFFCPU_ENDED);
		/* A brief block right after a long one keeps the next walk certain
		 * (see the top of this file). */
		if (pred == EMBERD_P_ONE) {
			b->short_run = 0;
		} else if (b->short_run < EMBERD_SHORT_GRACE) {
			b->short_run++;
			pred = EMBERD_P_ONE;
		}
		/* Wakers on other CPUs read this line: write it only on change. */
		pp = bpf_map_lookup_elem(&predicted, &slot);
		if (pp && *pp != pred)
			*pp = pred;
		if (delta >= config.min_block_ns && delta <= config.max_block_ns)
			charge_offcpu(ctx, next, b, delta, now);
	}
	return 0;
}

static __always_inline int on_switch(void *ctx, struct task_struct *prev,
				     struct task_struct *next, unsigned int prev_state,
				     const int form)
{
	return WITH_SCRATCH(on_switch_claimed(ctx, prev, next, prev_state, form));
}

/*
 * TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state)   (prev_state since Linux 5.18)
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(handle__sched_switch, _Bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	return on_switch(ctx, prev, next, prev_state, EMBERD_FORM_LOOP);
}

/* The task's state field: `__state` since 5.14, `state` before. */
struct task_struct___state_new {
	unsigned int __state;
} __attribute__((preserve_access_index));

struct task_struct___state_old {
	long state;
} __attribute__((preserve_access_index));

/*
 * TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next)
 * (before 5.18): the state is read from prev itself, as the tracepoint does;
 * a preempted task counts as running whatever its state says, as the
 * tracepoint's own prev_state argument reports it (counted when the state
 * said it was going to sleep: such a period, if its wakeup comes before
 * it runs again, is not charged).
 */
static __always_inline unsigned int prev_state_of(_Bool preempt, struct task_struct *prev)
{
	unsigned int state;

	if (bpf_core_field_exists(((struct task_struct___state_new *)prev)->__state))
		state = BPF_CORE_READ((struct task_struct___state_new *)prev, __state);
	else
		state = BPF_CORE_READ((struct task_struct___state_old *)prev, state);
	if (preempt && (state & config.state_mask))
		ecount(ECOUNTER_PREEMPTED_ASLEEP);
	return preempt ? 0 : state;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(handle__sched_switch_compat, _Bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(ctx, prev, next, prev_state_of(preempt, prev), EMBERD_FORM_LOOP);
}

/* The bounded form (see EMBERD_FORM_LOOP), with the pre-5.18 arguments:
 * reading the state from prev is right on every kernel. */
SEC("tp_btf/sched_switch")
int BPF_PROG(handle__sched_switch_bounded, _Bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return on_switch(ctx, prev, next, prev_state_of(preempt, prev), EMBERD_FORM_BOUNDED);
}

/* The account a waker's stacks count in: its own, the wakee's (`wakee`)
 * when the waker is root. Recomputed at each use rather than kept: one more
 * live value made the wakeup programs' frame 136 bytes, past 6.1's 512 for
 * the frames of the calls combined. */
static __always_inline __u32 waker_account(__u32 wakee)
{
	__u32 a = account_of((__u32)bpf_get_current_uid_gid());

	return a ? a : wakee;
}

/*
 * The waker's stacks are taken here, in its own context; sampled like the
 * user stack (see the top of this file): a first draw with the wakee's
 * predicted chance, and only then its state and block so far.
 */
static __always_inline int on_wakeup_claimed(void *ctx, struct task_struct *p, const int form)
{
	__u64 now, delta, weight, id, t = config.sample_below_ns;
	struct event_key *k;
	struct blocked *b;
	__u32 u, p_rec;
	int take;

	ecount(ECOUNTER_WAKEUPS);
	if (!config.wakeup && !config.offwake)
		return 0;
	u = predicted_for((__u32)p->pid);
	if (u < EMBERD_P_ONE && !chance(u, EMBERD_P_ONE)) {
		ecount(ECOUNTER_SHORT_WAKEUP_SAMPLED_OUT);
		return 0;
	}
	b = blocked_get(p);
	if (!b || !b->ts || b->has_waker)
		return 0;
	now = bpf_ktime_get_ns();
	delta = now - b->ts;
	weight = weigh(delta, u, t, &take, &p_rec);
	if (!take) {
		ecount(ECOUNTER_SHORT_WAKEUP_SAMPLED_OUT);
		return 0;
	}
	id = bpf_get_current_pid_tgid();
	note_process_cached(id >> 32);
	b->waker_tgid = id >> 32;
	b->waker_pid = (__u32)id;
	/* The waker's stacks count in its own account, a root waker's in the
	 * wakee's: a wakeup from an interrupt (a sleep's timer) runs on
	 * whatever task the interrupt found, often the daemon busy naming,
	 * and root's share has no bound. Charged to root, a user's thousands
	 * of timed sleeps a second filled the map with the daemon's stacks,
	 * past the quarter kept for root's own. A user waking a root thread
	 * still pays for its own stacks. */
	b->waker_kstack = keep_stack_as(kernel_stack(ctx), now, waker_account(b->uid));
	b->waker_ustack = keep_stack_as(unwind_user(current_task(), id >> 32, form), now,
					waker_account(b->uid));
	bpf_get_current_comm(&b->waker_comm, sizeof(b->waker_comm));
	b->waker_p = p_rec; /* for off-wake's weight */
	b->has_waker = 1;

	if (!config.wakeup || delta < config.min_block_ns || delta > config.max_block_ns)
		return 0;
	k = scratch_key();
	if (!k)
		return 0;
	/* The waker is the subject: its process, thread and stacks. */
	k->event = EVENT_WAKEUP;
	k->tgid = b->waker_tgid;
	k->pid = b->waker_pid;
	k->account = waker_account(b->uid);
	k->kstack = b->waker_kstack;
	k->ustack = b->waker_ustack;
	__builtin_memcpy(k->comm, b->waker_comm, sizeof(k->comm));
	/* Whom it woke, for context. */
	k->waker_tgid = b->tgid;
	k->waker_pid = p->pid;
	__builtin_memcpy(k->waker_comm, b->comm, sizeof(k->waker_comm));
	add(k, weight * (config.sample_one_in > 1 ? config.sample_one_in : 1));
	return 0;
}

static __always_inline int on_wakeup(void *ctx, struct task_struct *p, const int form)
{
	return WITH_SCRATCH(on_wakeup_claimed(ctx, p, form));
}

/*
 * sched_waking, not sched_wakeup: on this kernel a wakeup of a task on another
 * CPU is queued (TTWU_QUEUE) and sched_wakeup fires there, in the idle task or
 * whoever runs, so the waker would read as swapper. sched_waking fires at the
 * start of try_to_wake_up, in the waker's own context (as bcc's kprobe on
 * try_to_wake_up, which this kernel cannot have).
 */
SEC("tp_btf/sched_waking")
int BPF_PROG(handle__sched_waking, struct task_struct *p)
{
	return on_wakeup(ctx, p, EMBERD_FORM_LOOP);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(handle__sched_waking_bounded, struct task_struct *p)
{
	return on_wakeup(ctx, p, EMBERD_FORM_BOUNDED);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(handle__sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(ctx, p, EMBERD_FORM_LOOP);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(handle__sched_wakeup_new_bounded, struct task_struct *p)
{
	return on_wakeup(ctx, p, EMBERD_FORM_BOUNDED);
}

static __always_inline int on_page_fault(struct bpf_perf_event_data *ctx, const int form);

/* The page-fault software event, sampled every `pagefault_period` faults. */
SEC("perf_event")
int handle__page_fault(struct bpf_perf_event_data *ctx)
{
	return WITH_SCRATCH(on_page_fault(ctx, EMBERD_FORM_LOOP));
}

SEC("perf_event")
int handle__page_fault_bounded(struct bpf_perf_event_data *ctx)
{
	return WITH_SCRATCH(on_page_fault(ctx, EMBERD_FORM_BOUNDED));
}

static __always_inline int on_page_fault(struct bpf_perf_event_data *ctx, const int form)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u32 tgid = id >> 32;
	struct event_key *k;

	ecount(ECOUNTER_PAGEFAULTS);
	if (tgid == 0 || (config.target_tgid && tgid != config.target_tgid))
		return 0;
	note_process_counted(tgid);
	k = scratch_key();
	if (!k)
		return 0;
	k->event = EVENT_PAGEFAULT;
	k->tgid = tgid;
	k->pid = (__u32)id;
	k->account = account_of((__u32)bpf_get_current_uid_gid());
	/* The event carries user registers: the kernel stack is always absent. */
	k->kstack = EMBERD_STACK_NONE;
	k->ustack = user_stack(tgid, now, form);
	bpf_get_current_comm(&k->comm, sizeof(k->comm));
	add(k, config.pagefault_period);
	return 0;
}

struct bpf_iter_meta;

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

/*
 * Run by the agent before it collects unused stacks: stamps the stacks
 * blocked threads still hold (the user stack they blocked in, their
 * waker's), so collection can drop every other stack a few seconds after
 * its last use instead of waiting out the longest block (10 s), which let
 * the map fill on hosts that start hundreds of processes a second.
 */
SEC("iter/task")
int refresh_held_stacks(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct blocked *b;
	__u64 now;

	if (!task)
		return 0;
	b = blocked_get(task);
	if (!b || !b->ts)
		return 0;
	now = bpf_ktime_get_ns();
	/* A block longer than max_block_ns is never charged (nor its waker's
	 * wakeup): its stacks are no longer held. */
	if (now - b->ts > config.max_block_ns)
		return 0;
	stamp(b->ustack, now);
	stamp(b->timer_ustack, now);
	if (b->has_waker) {
		stamp(b->waker_kstack, now);
		stamp(b->waker_ustack, now);
	}
	return 0;
}
