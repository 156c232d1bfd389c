/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A user-stack walk as the runtimes see it: the stack being built, the
 * walked thread, the counters. The bottom of the unwinder: bpf/unwind.h
 * (the native walker), bpf/runtime.h (the dispatch to runtimes) and each
 * runtime's header (bpf/python.h) include it, and it includes none of them.
 *
 * The stack being built is the per-CPU `stack_scratch`: its `nr` counts
 * the frames pushed so far (native and runtime frames alike), its `ips`
 * hold them, innermost first.
 *
 * A runtime replaces native frames by its own: when the native walker
 * meets a pc in a range a runtime claimed for this walk (`struct walk`'s
 * `claims`: CPython's eval loop), it hands the frame to that runtime
 * (bpf/runtime.h), which may start a run (`running`): the walker's next
 * steps push the run's frames, then go on with the native frame's caller.
 */
#ifndef EMBERD_WALK_H
#define EMBERD_WALK_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "emberd.h"

/* The runtimes a walk can hand frames to (bpf/runtime.h dispatches on it). */
enum runtime_id {
	RUNTIME_NONE = 0,
	RUNTIME_PYTHON = 1, /* bpf/python.h */
	RUNTIME_HOTSPOT = 2, /* bpf/hotspot.h */
	RUNTIME_V8 = 3, /* bpf/v8.h */
	RUNTIME_MAX,
};

/* What runtime_enter answers when it unwound the frame itself: its
 * caller's registers are in the walk's pc, sp and bp. */
#define RUNTIME_UNWOUND 2

/* Code ranges runtimes may claim in one walk. */
#define EMBERD_WALK_CLAIMS 2

/* A range of code whose frames a runtime replaces. */
struct walk_claim {
	__u64 start;
	__u64 end;     /* 0: unused */
	__u32 runtime; /* enum runtime_id */
	__u32 _pad;
};

/* What every runtime may read and write of the walk under way. */
struct walk {
	__u32 tgid;
	__u32 uid;         /* the walked (current) thread's account (account_of its real uid): whose share its records count in */
	__u64 now;         /* ns at the walk's start (bpf_ktime_get_ns) */
	__u64 gen;         /* this CPU's walks so far: tags a runtime's per-walk caches */
	__u64 fsbase;      /* the thread's TLS base */
	__u64 replaced_pc; /* the native frame the run being pushed replaces */
	__u8 running;      /* enum runtime_id of the run being pushed; 0: none */
	__u8 end_after;    /* enum stack_end + 1: the walk ends once the run is pushed */
	__u8 _pad[6];
	/* The registers of the frame handed to a runtime (pc, sp, rbp); a
	 * runtime that unwinds its own frames (the JVM's code cache) writes
	 * its caller's here and answers RUNTIME_UNWOUND. */
	__u64 pc;
	__u64 sp;
	__u64 bp;
	struct walk_claim claims[EMBERD_WALK_CLAIMS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk);
} walks SEC(".maps");

/* Per-CPU buffer a stack is built in before it is stored. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stored_stack);
} stack_scratch SEC(".maps");

/* Each including object gets its own (enum unwind_counter), read by the
 * agent per object. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UCOUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} unwind_counters SEC(".maps");

static __always_inline void ucount_by(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&unwind_counters, &which);

	if (v)
		*v += n;
}

static __always_inline void ucount(__u32 which)
{
	ucount_by(which, 1);
}

/* The count map `map`'s counter of user `uid` (created at 0), or of
 * EMBERD_OTHER_UIDS when the map has no room for another user; 0 when
 * neither can be had. */
static __always_inline __u64 *uid_count(void *map, __u32 uid)
{
	__u64 zero = 0, *n = bpf_map_lookup_elem(map, &uid);

	if (n)
		return n;
	if (bpf_map_update_elem(map, &uid, &zero, BPF_NOEXIST) != 0)
		uid = EMBERD_OTHER_UIDS;
	n = bpf_map_lookup_elem(map, &uid);
	if (n)
		return n;
	bpf_map_update_elem(map, &uid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &uid);
}

/*
 * The accounts of subordinate uids (/etc/subuid; src/shared/accounts.rs):
 * a uid inside a login's range counts in that login's share, so a user
 * running processes under thousands of uids (rootless Podman, `unshare
 * --map-auto`) holds one share of each table, not thousands. The prefixes
 * covering each range (uids big-endian) to the owner's uid, written by the
 * agent (src/unwind/accounts.rs) when the file changes; both objects share
 * one copy.
 */
struct sub_uid_key {
	__u32 prefixlen;
	__u32 uid; /* big-endian */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EMBERD_SUB_UID_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sub_uid_key);
	__type(value, __u32);
} sub_uids SEC(".maps");

/* Entry 0: the lowest uid any range holds (0xffffffff: none), so that the
 * uids below it (every login's own) are their own account without a
 * lookup in the trie. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sub_uid_min SEC(".maps");

/* The account `uid` counts in: the owner of the subordinate range holding
 * it, or itself. */
static __always_inline __u32 account_of(__u32 uid)
{
	struct sub_uid_key key = { .prefixlen = 32, .uid = __builtin_bswap32(uid) };
	__u32 zero = 0, *min = bpf_map_lookup_elem(&sub_uid_min, &zero), *owner;

	if (uid == 0 || !min || uid < *min)
		return uid;
	owner = bpf_map_lookup_elem(&sub_uids, &key);
	return owner ? *owner : uid;
}

/* The count map `map`'s counter of every user but root together
 * (EMBERD_ALL_USERS, created at 0; the agent's recount keeps a place for
 * it in a map full of users); 0 when it cannot be had. */
static __always_inline __u64 *all_users_count(void *map)
{
	__u32 key = EMBERD_ALL_USERS;
	__u64 zero = 0, *n = bpf_map_lookup_elem(map, &key);

	if (n)
		return n;
	bpf_map_update_elem(map, &key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, &key);
}

/* Whether a user holding `held` entries of a table, with every user but
 * root holding `all`, may add one more: under `share` of their own, and
 * together under three halves of it (a missing counter does not limit).
 * A count past 2^63 wrapped below zero (two CPUs taking the last entry
 * away at once: the decrement's check and its add are two steps, and a
 * fetching add is Linux 5.12's) and counts as none until the agent's
 * next recount. */
static __always_inline int within_share(__u64 *held, __u64 *all, __u64 share)
{
	if (held && *held >= share && !(*held >> 63))
		return 0;
	if (all && *all >= share + share / 2 && !(*all >> 63))
		return 0;
	return 1;
}

/* Counts one entry added in a user's share (counters as within_share's). */
static __always_inline void count_in_share(__u64 *held, __u64 *all)
{
	if (held)
		__sync_fetch_and_add(held, 1);
	if (all)
		__sync_fetch_and_add(all, 1);
}

static __always_inline struct stored_stack *scratch_stack(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stack_scratch, &zero);
}

static __always_inline struct walk *this_walk(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&walks, &zero);
}

/* Claims [start, end) for `runtime` in this walk: 0, or -1 when the walk
 * has no room for another claim. */
static __always_inline int walk_claim(struct walk *w, __u32 runtime, __u64 start, __u64 end)
{
	for (int i = 0; i < EMBERD_WALK_CLAIMS; i++) {
		if (w->claims[i].end == 0) {
			w->claims[i].start = start;
			w->claims[i].end = end;
			w->claims[i].runtime = runtime;
			return 0;
		}
	}
	return -1;
}

/* Drops `runtime`'s claims: its later frames stay native. */
static __always_inline void walk_unclaim(struct walk *w, __u32 runtime)
{
	for (int i = 0; i < EMBERD_WALK_CLAIMS; i++)
		if (w->claims[i].runtime == runtime)
			w->claims[i].end = 0;
}

/* The runtime that claimed `pc` in this walk, or RUNTIME_NONE. */
static __always_inline __u32 walk_claimed(struct walk *w, __u64 pc)
{
	for (int i = 0; i < EMBERD_WALK_CLAIMS; i++)
		if (w->claims[i].start <= pc && pc < w->claims[i].end)
			return w->claims[i].runtime;
	return RUNTIME_NONE;
}

#endif /* EMBERD_WALK_H */
