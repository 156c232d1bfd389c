/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Block I/O latency, programs of events.bpf.c (recorded with the helpers of
 * bpf/events.h): the time from a request's
 * start to its completion, charged to the stacks (kernel and user) of the
 * thread that started it, with the device as the label. So synchronous
 * application I/O shows under the application's stack, read-ahead under the
 * read that triggered it, and writeback and scrubs as the kernel threads'
 * own towers.
 *
 * Overlapping requests of one thread share their time. A 1 MiB write is
 * split into several requests that are in flight together; summing their
 * latencies would charge the writer up to twice the time it waited (1.7x
 * measured here). Instead each thread has a clock that runs at 1/n while n
 * of its requests are in flight, and a request is charged how far that
 * clock moved from its start to its completion: the charges of a thread
 * add up to the time it had I/O outstanding, split evenly between the
 * requests outstanding at each moment. The clock is updated without a lock
 * (tracing programs cannot take one) from the submitting thread and the
 * completing CPU; a lost race errs by one interval, and no request is ever
 * charged more than its own latency. Requests merged into others
 * (block_rq_merge) leave without a charge.
 *
 * Where the kernel has them (6.5+), block_io_start/block_io_done: they fire
 * when the request is set up in the submitting thread and when it is
 * accounted done. Before, block_rq_issue/block_rq_complete, where the issue
 * may run in another thread than the submitter's (a plug flushed by a
 * kworker). Both are BTF tracepoints: no tracefs needed.
 */
#ifndef EMBERD_BLOCKIO_H
#define EMBERD_BLOCKIO_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emberd.h"
#include "events.h"

struct gendisk___emberd {
	char disk_name[32];
} __attribute__((preserve_access_index));

struct request_queue___emberd {
	struct gendisk___emberd *disk;
} __attribute__((preserve_access_index));

struct request___emberd {
	struct request_queue___emberd *q;
} __attribute__((preserve_access_index));

/* Before Linux 5.15 the disk is the request's own (rq_disk, gone in 6.0). */
struct request___old_disk {
	struct gendisk___emberd *rq_disk;
} __attribute__((preserve_access_index));

/* The request argument of block_rq_issue, _requeue and _merge: second
 * before Linux 5.11, whose tracepoints pass the queue first. */
static __always_inline struct request___emberd *rq_arg(__u64 *ctx)
{
	if (config.rq_after_queue)
		return (void *)ctx[1];
	return (void *)ctx[0];
}

/* A thread's requests in flight, and its shared clock (see above). */
struct io_thread {
	__u64 clock;           /* ns, advancing at 1/in_flight */
	__u64 last;            /* ns of the last advance */
	__u64 in_flight;
	__u64 born;            /* ns of creation: tells a recycled entry apart */
};

/*
 * By thread id. LRU and never deleted by the programs: a completion on
 * another CPU may race with a start, and an entry deleted under a start
 * would be written after its release. `born` lets a request notice that
 * its thread's entry is not the one it started with (evicted, recreated)
 * and fall back to its own latency.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct io_thread);
} io_threads SEC(".maps");

static __always_inline void io_advance(struct io_thread *t, __u64 now)
{
	if (t->in_flight && now > t->last)
		t->clock += (now - t->last) / t->in_flight;
	if (now > t->last)
		t->last = now;
}

/* A request in flight: who started it, and when. */
struct io_start {
	__u64 ts;
	__u64 clock;           /* the thread's clock at the start */
	__u64 born;            /* the thread entry's `born` at the start */
	__u64 kstack;
	__u64 ustack;
	__u32 tgid;
	__u32 pid;
	__u32 requeued;        /* block_rq_requeue saw it: its next issue continues it */
	__u32 account;         /* the issuing thread's (as sample_key's) */
	char comm[EMBERD_COMM_LEN];
	char dev[EMBERD_LABEL_LEN];
};

/* By request address; bounded by the requests a host keeps in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct io_start);
} io_in_flight SEC(".maps");

/* Scratch for building an io_start (too big for comfort on the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct io_start);
} io_scratch SEC(".maps");

/* A requeued request that has not been issued again within this long was
 * dropped: a new start of the same address replaces it. */
#define IO_STALE_NS (30ULL * 1000 * 1000 * 1000)

/*
 * Ends request `key` without charging it (merged into another, or lost):
 * its thread's clock stops counting it.
 */
static __always_inline void io_forget(__u64 key, struct io_start *s, __u64 now)
{
	struct io_thread *t = bpf_map_lookup_elem(&io_threads, &s->pid);

	if (t && t->born == s->born && t->in_flight) {
		io_advance(t, now);
		__sync_fetch_and_add(&t->in_flight, -1);
	}
	bpf_map_delete_elem(&io_in_flight, &key);
}

static __always_inline void io_started(void *ctx, struct request___emberd *rq, const int form)
{
	__u64 key = (__u64)rq, id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	struct gendisk___emberd *disk;
	struct io_start *s, *old;
	struct io_thread *t;
	__u32 zero = 0, tid = (__u32)id;

	if (config.target_tgid && (id >> 32) != config.target_tgid)
		return;
	old = bpf_map_lookup_elem(&io_in_flight, &key);
	if (old) {
		/* Issued again after a requeue: the first start stands, the wait
		 * includes the requeue. Otherwise the old request's completion
		 * was missed and the kernel reused its address (requests are
		 * preallocated per tag): keeping the old start would charge the
		 * new request all the time since, hundreds of ms where it waited
		 * tens of us. */
		if (old->requeued && now - old->ts < IO_STALE_NS) {
			old->requeued = 0;
			return;
		}
		ecount(ECOUNTER_BLOCKIO_END_NOT_SEEN);
		io_forget(key, old, now);
	}
	s = bpf_map_lookup_elem(&io_scratch, &zero);
	if (!s)
		return;
	s->ts = now;
	s->requeued = 0;
	s->tgid = id >> 32;
	s->pid = tid;
	s->account = account_of((__u32)bpf_get_current_uid_gid());
	bpf_get_current_comm(&s->comm, sizeof(s->comm));
	__builtin_memset(s->dev, 0, sizeof(s->dev));
	if (bpf_core_field_exists(((struct request_queue___emberd *)0)->disk))
		disk = BPF_CORE_READ(rq, q, disk);
	else
		disk = BPF_CORE_READ((struct request___old_disk *)rq, rq_disk);
	if (disk)
		bpf_probe_read_kernel_str(s->dev, sizeof(s->dev), &disk->disk_name);
	if (s->tgid)
		note_process_cached(s->tgid);
	s->kstack = keep_stack(kernel_stack(ctx), now);
	s->ustack = user_stack(s->tgid, now, form);
	/* The thread's entry is looked up after the walks: less time for a
	 * completion elsewhere to race with. */
	t = bpf_map_lookup_elem(&io_threads, &tid);
	if (!t) {
		struct io_thread fresh = {.last = now, .born = now};

		bpf_map_update_elem(&io_threads, &tid, &fresh, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&io_threads, &tid);
		if (!t) {
			ecount(ECOUNTER_BLOCKIO_FULL);
			return;
		}
	}
	io_advance(t, now);
	s->clock = t->clock;
	s->born = t->born;
	if (bpf_map_update_elem(&io_in_flight, &key, s, BPF_ANY)) {
		ecount(ECOUNTER_BLOCKIO_FULL);
		return;
	}
	__sync_fetch_and_add(&t->in_flight, 1);
}

static __always_inline void io_done(struct request___emberd *rq)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_ns();
	struct io_start *s = bpf_map_lookup_elem(&io_in_flight, &key);
	/* On the BPF stack, not the per-CPU scratch key: completions run in
	 * hard interrupts, which may land inside another program using it. */
	struct event_key k = {};
	struct io_thread *t;
	__u64 share, latency;

	if (!s) {
		ecount(ECOUNTER_BLOCKIO_UNMATCHED);
		return;
	}
	latency = now - s->ts;
	share = latency;
	t = bpf_map_lookup_elem(&io_threads, &s->pid);
	if (t && t->born == s->born) {
		io_advance(t, now);
		/* A lost race can only make the clock lag: never charge more
		 * than the request's own latency, nor wrap. */
		share = t->clock > s->clock ? t->clock - s->clock : 0;
		if (share > latency)
			share = latency;
		if (t->in_flight)
			__sync_fetch_and_add(&t->in_flight, -1);
	}
	k.event = EVENT_BLOCKIO;
	k.tgid = s->tgid;
	k.pid = s->pid;
	k.account = s->account;
	k.kstack = s->kstack;
	k.ustack = s->ustack;
	__builtin_memcpy(k.comm, s->comm, sizeof(k.comm));
	__builtin_memcpy(k.label, s->dev, sizeof(k.label));
	stamp(k.kstack, now);
	stamp(k.ustack, now);
	add(&k, share);
	ecount(ECOUNTER_BLOCKIO);
	bpf_map_delete_elem(&io_in_flight, &key);
}

/* A request merged into another: its data completes with that one. */
static __always_inline void io_merged(struct request___emberd *rq)
{
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_in_flight, &key);

	if (s)
		io_forget(key, s, bpf_ktime_get_ns());
}

SEC("tp_btf/block_io_start")
int BPF_PROG(handle__block_io_start, struct request___emberd *rq)
{
	io_started(ctx, rq, EMBERD_FORM_LOOP);
	return 0;
}

SEC("tp_btf/block_io_start")
int BPF_PROG(handle__block_io_start_bounded, struct request___emberd *rq)
{
	io_started(ctx, rq, EMBERD_FORM_BOUNDED);
	return 0;
}

SEC("tp_btf/block_io_done")
int BPF_PROG(handle__block_io_done, struct request___emberd *rq)
{
	io_done(rq);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int handle__block_rq_issue(__u64 *ctx)
{
	io_started(ctx, rq_arg(ctx), EMBERD_FORM_LOOP);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int handle__block_rq_issue_bounded(__u64 *ctx)
{
	io_started(ctx, rq_arg(ctx), EMBERD_FORM_BOUNDED);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(handle__block_rq_complete, struct request___emberd *rq)
{
	io_done(rq);
	return 0;
}

/* Put back for a later issue (a busy device): see io_started. */
static __always_inline void io_requeued(struct request___emberd *rq)
{
	__u64 key = (__u64)rq;
	struct io_start *s = bpf_map_lookup_elem(&io_in_flight, &key);

	if (s)
		s->requeued = 1;
}

SEC("tp_btf/block_rq_requeue")
int handle__block_rq_requeue(__u64 *ctx)
{
	io_requeued(rq_arg(ctx));
	return 0;
}

SEC("tp_btf/block_rq_merge")
int handle__block_rq_merge(__u64 *ctx)
{
	io_merged(rq_arg(ctx));
	return 0;
}

#endif /* EMBERD_BLOCKIO_H */
