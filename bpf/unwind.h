/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * User-stack unwinding and stack storage, shared by profile.bpf.c and
 * events.bpf.c.
 *
 * Almost nothing on a distribution keeps frame pointers (Debian's libc and
 * python3 do not), so a user stack is walked with the unwind rows the agent
 * compiles from each file's .eh_frame (src/unwind/): find the mapping that
 * holds the pc, then the row of its file that covers it, compute the CFA,
 * read the return address at CFA-8 and the caller's rbp where the row says,
 * repeat. Frame pointers are used where no table exists: anonymous code (JIT,
 * named through perf maps), files with no CFI, and processes whose tables
 * are not built yet (counted).
 *
 * The agent writes the rows into `unwind_rows` (one array shared by every
 * process: a file's table is stored once, as the block of 4-byte rows
 * emberd.h describes, their rules in `unwind_infos`) and each process's executable
 * mappings into `proc_unwind`. The events object reuses the profile object's
 * maps (libbpf reuse_fd), so tables are uploaded once.
 *
 * Stacks are stored by a 64-bit hash of their frames in a hash map of the
 * including object, with a second, independent hash in the value: a stack
 * whose first hash names another stack's entry is a collision, counted and
 * shown as [lost], never merged.
 *
 * Frames of managed code (CPython) are the runtimes' (bpf/runtime.h): the
 * walker hands them a frame in a range they claimed and pushes the frames
 * they give instead. The stack being built, the walk the runtimes see and
 * the counters are bpf/walk.h's.
 */
#ifndef EMBERD_UNWIND_H
#define EMBERD_UNWIND_H

#include <bpf/bpf_core_read.h>
#include "walk.h"
#include "runtime.h"

#ifndef EEXIST
#define EEXIST 17
#endif

/* The kernel's pt_regs under a CO-RE flavour name (the UAPI one differs). */
struct pt_regs___emberd {
	unsigned long bp;
	unsigned long sp;
	unsigned long ip;
	unsigned long cs;
	unsigned long ss;
} __attribute__((preserve_access_index));

struct thread_struct___emberd {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct___emberd {
	unsigned int flags;
	void *stack;
	void *mm;
	struct thread_struct___emberd thread;
} __attribute__((preserve_access_index));

/* What bpf_find_vma's callback reads of a mapping (CO-RE). */
struct super_block___emberd {
	unsigned int s_dev;
} __attribute__((preserve_access_index));

struct inode___emberd {
	unsigned long i_ino;
	struct super_block___emberd *i_sb;
} __attribute__((preserve_access_index));

struct file___emberd {
	struct inode___emberd *f_inode;
} __attribute__((preserve_access_index));

struct vm_area_struct___emberd {
	unsigned long vm_start;
	unsigned long vm_end;
	unsigned long vm_pgoff;
	unsigned long vm_flags;
	struct file___emberd *vm_file;
} __attribute__((preserve_access_index));

/* The unwinder's settings, written by the agent before load (each object
 * that includes this file has its own copy). */
struct unwind_config {
	__u8 bounded;      /* the bounded form is loaded (see EMBERD_FORM_LOOP) */
	__u8 _pad[3];
	__u32 thread_size; /* the kernel's THREAD_SIZE (bytes; 0: EMBERD_THREAD_SIZE) */
};

const volatile struct unwind_config unwind_config = {};

#define EMBERD_VM_EXEC 0x4

#define EMBERD_PF_KTHREAD 0x00200000

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set by the agent: the table budget in 8-byte pairs of words */
	__type(key, __u32);
	__type(value, struct table_words);
} unwind_rows SEC(".maps");

/* The rules rows name (struct unwind_info); appended to by the agent,
 * shared by every table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EMBERD_MAX_INFOS);
	__type(key, __u32);
	__type(value, struct unwind_info);
} unwind_infos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 8192); /* set by the agent */
	__type(key, __u32);       /* tgid */
	__type(value, struct proc_unwind);
} proc_unwind SEC(".maps");

/* When each process last exec'd (bpf_ktime_get_ns): a `proc_unwind` entry
 * read before that describes the program it replaced, and is not used. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tgid */
	__type(value, __u64);
} exec_at SEC(".maps");

/* Tables by mapped inode (struct file_table in emberd.h), written by the
 * agent as tables are built. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct file_key);
	__type(value, struct file_table);
} file_tables SEC(".maps");

/* Processes with a pc in none of their known mappings (dlopen, new JIT
 * region): the agent reads their mappings again. Root's go to a map of
 * their own: any user's processes walking garbage return addresses
 * (each walk of each asks) can keep this one full between the agent's
 * polls, and root's request, refused, waited for a poll that found room. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);   /* tgid */
	__type(value, __u8);
} unwind_refresh SEC(".maps"), unwind_refresh_root SEC(".maps");

/* Set to 1 whenever unwind_refresh or unwind_refresh_root gains an entry
 * (`unwind_refresh` below stands for either). The agent polls many
 * times a second; finding unwind_refresh's first key walks all its buckets
 * even when it is empty (6% of the idle daemon's CPU), where this is one
 * lookup. The agent clears it before walking the map, so a request made
 * during the walk sets it again for the next poll. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwind_refresh_pending SEC(".maps");

/* Mappings found through bpf_find_vma kept per CPU (see unwind_state). */
#define EMBERD_VMA_CACHE 4
/* How long they are trusted: a table built meanwhile replaces them. */
#define EMBERD_VMA_CACHE_NS (200ULL * 1000 * 1000)

struct unwind_state {
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 tgid;
	__u32 end;
	__u8 have_proc;  /* proc_unwind has this process */
	__u8 guessed;    /* a frame-pointer step left a file whose table is not built */
	__u8 exact_pc;   /* pc is where execution stopped, not a return address */
	__u8 fp_from;    /* 0, or the UNWIND_MAP_* kind (+1) a frame-pointer step to this pc came from */
	__u8 _pad[4];
	/* The mapping of the last pc found through bpf_find_vma and
	 * file_tables (the agent had not listed it). */
	struct unwind_mapping vm;
	/* Mappings this CPU found that way lately, for process vms_tgid, since
	 * vms_at: bpf_find_vma can run once per program run where interrupts
	 * are off (its unlock waits for them), so each run adds one. */
	struct unwind_mapping vms[EMBERD_VMA_CACHE];
	__u32 vms_tgid;
	__u32 vms_next;
	__u64 vms_at;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_state);
} unwind_states SEC(".maps");


/*
 * The two searches are global functions: the verifier checks each once, on
 * its own, instead of once per path through the unwinder (which exceeded its
 * limit of a million instructions).
 */

/* Index of the mapping of process `tgid` that holds `pc`, or -1. */
__attribute__((noinline)) int find_mapping(__u32 tgid, __u64 pc)
{
	struct proc_unwind *p = bpf_map_lookup_elem(&proc_unwind, &tgid);
	__u32 lo = 0, hi, mid;

	if (!p)
		return -1;
	hi = p->nr;
	if (hi > EMBERD_MAX_MAPPINGS)
		hi = EMBERD_MAX_MAPPINGS;
	/* Find the first mapping whose start > pc; the one before may hold it. */
	for (int i = 0; i < 9; i++) {
		if (lo >= hi)
			break;
		mid = (lo + hi) / 2;
		if (p->maps[mid & (EMBERD_MAX_MAPPINGS - 1)].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	lo = (lo - 1) & (EMBERD_MAX_MAPPINGS - 1);
	return pc < p->maps[lo].end ? (int)lo : -1;
}

/* Word `i` of `unwind_rows`, or -1 (read as a large value). */
static __always_inline __u32 table_word(__u32 i)
{
	__u32 key = i >> 1;
	struct table_words *w = bpf_map_lookup_elem(&unwind_rows, &key);

	return w ? w->w[i & 1] : (__u32)-1;
}

/* Index in unwind_infos of the rule covering file address `pc` in the table
 * block [start, start + len) (see emberd.h), or -1: the pc's 64 KiB page
 * gives the rows to search, at most 65536 (16 halvings). */
__attribute__((noinline)) int find_row(__u32 start, __u32 len, __u32 pc)
{
	__u32 first, pages, page, lo, hi, mid, target = pc & 0xffff;

	if (len <= EMBERD_TABLE_HEADER)
		return -1;
	first = table_word(start);
	pages = table_word(start + 1);
	page = (pc >> EMBERD_PAGE_SHIFT) - first;
	if ((pc >> EMBERD_PAGE_SHIFT) < first || page >= pages || pages >= len)
		return -1;
	lo = table_word(start + EMBERD_TABLE_HEADER + page);
	hi = table_word(start + EMBERD_TABLE_HEADER + page + 1);
	if (lo >= hi || hi > len)
		return -1;
	lo += start;
	hi += start;
	/* Invariant: the row at lo starts at or before the pc (each page's
	 * first row is at its offset 0); find the last such row. */
	for (int i = 0; i < 17; i++) {
		if (lo + 1 >= hi)
			break;
		mid = lo + (hi - lo) / 2;
		if ((table_word(mid) >> EMBERD_ROW_PC_SHIFT) <= target)
			lo = mid;
		else
			hi = mid;
	}
	return (int)(table_word(lo) & EMBERD_ROW_INFO_MASK);
}

struct vm_area_struct;

/* What bpf_find_vma's callback reads of the mapping holding a pc. */
struct vma_probe {
	__u64 start;
	__u64 end;
	__u64 pgoff;
	__u64 dev;
	__u64 ino;
	__u32 exec;
	__u32 has_file;
};

static long vma_probe_cb(struct task_struct *task, struct vm_area_struct *area, void *data)
{
	struct vm_area_struct___emberd *vma = (void *)area;
	struct vma_probe *p = data;
	struct file___emberd *f;
	struct inode___emberd *inode;

	p->start = vma->vm_start;
	p->end = vma->vm_end;
	p->pgoff = vma->vm_pgoff;
	p->exec = (vma->vm_flags & EMBERD_VM_EXEC) != 0;
	f = vma->vm_file;
	if (f) {
		inode = f->f_inode;
		if (inode) {
			struct super_block___emberd *sb = inode->i_sb;

			p->ino = inode->i_ino;
			p->dev = sb ? sb->s_dev : 0;
			p->has_file = 1;
		}
	}
	return 0;
}

/* Where bpf_find_vma is: this kernel has it (5.17+). */
#define EMBERD_HAVE_FIND_VMA bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_find_vma)

/*
 * The mapping holding `pc` as the kernel has it, for a pc in no mapping the
 * agent listed: its file's table from `file_tables` (kind TABLE or
 * NO_INFO), NOT_READY for a file without one yet, FP for anonymous code;
 * written to st->vm. Returns 0 when no executable mapping holds `pc`, 1
 * when st->vm is set, 2 when the mappings could not be looked at (the
 * mmap lock was taken): the caller walks on as before.
 */
static __always_inline int mapping_by_vma(struct unwind_state *st, __u64 pc, const int form)
{
	struct vma_probe p = {};
	struct file_key key;
	struct file_table *t;
	struct unwind_mapping *c;
	__u32 slot;
	long err;

	/* The bounded form holds no callback (see EMBERD_FORM_LOOP). */
	if (form != EMBERD_FORM_LOOP || !EMBERD_HAVE_FIND_VMA)
		return 2;
	for (int i = 0; i < EMBERD_VMA_CACHE; i++) {
		c = &st->vms[i & (EMBERD_VMA_CACHE - 1)];
		if (c->end && c->start <= pc && pc < c->end) {
			st->vm = *c;
			return 1;
		}
	}
	err = bpf_find_vma(bpf_get_current_task_btf(), pc, vma_probe_cb, &p, 0);
	if (err == -2 /* ENOENT */)
		return 0;
	if (err)
		return 2;
	if (!p.exec)
		return 0;
	st->vm.start = p.start;
	st->vm.end = p.end;
	st->vm.bias = 0;
	st->vm.table_start = 0;
	st->vm.table_len = 0;
	st->vm.kind = UNWIND_MAP_FP;
	if (p.has_file) {
		st->vm.kind = UNWIND_MAP_NOT_READY;
		key.dev = p.dev;
		key.ino = p.ino;
		t = bpf_map_lookup_elem(&file_tables, &key);
		if (t) {
			st->vm.kind = UNWIND_MAP_NO_INFO;
			for (int i = 0; i < EMBERD_FILE_SEGS; i++) {
				__u64 off = p.pgoff << 12;

				if (i >= t->nsegs)
					break;
				if (t->segs[i].off_lo <= off && off < t->segs[i].off_hi) {
					st->vm.bias = p.start - off + t->segs[i].delta;
					st->vm.kind = t->kind;
					st->vm.table_start = t->table_start;
					st->vm.table_len = t->table_len;
					break;
				}
			}
		}
	}
	slot = st->vms_next++ & (EMBERD_VMA_CACHE - 1);
	st->vms[slot] = st->vm;
	return 1;
}

/* Forgets the cached mappings unless they are `tgid`'s since its last exec
 * and recent. */
static __always_inline void vma_cache_for(struct unwind_state *st, __u32 tgid, __u64 now,
					  __u64 exec)
{
	if (st->vms_tgid == tgid && st->vms_at > exec && now - st->vms_at < EMBERD_VMA_CACHE_NS)
		return;
	for (int i = 0; i < EMBERD_VMA_CACHE; i++)
		st->vms[i].end = 0;
	st->vms_tgid = tgid;
	st->vms_at = now;
}

static __always_inline int read_user_u64(__u64 addr, __u64 *out)
{
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr);
}

/*
 * Why a walk stopped where frame pointers failed: a file without CFI, or
 * tables not built yet, say so; in anonymous code (JIT) it is an error.
 */
static __always_inline __u32 fp_failure(__u32 fp_from, __u32 err)
{
	if (fp_from == UNWIND_MAP_NO_INFO + 1)
		return STACK_END_NO_INFO;
	if (fp_from == UNWIND_MAP_BUDGET + 1)
		return STACK_END_BUDGET;
	if (fp_from == UNWIND_MAP_NOT_READY + 1)
		return STACK_END_NOT_READY;
	if (fp_from == UNWIND_MAP_NO_ROW + 1)
		return STACK_END_ERR_NO_ROW;
	return err;
}

static __always_inline long unwind_stop(struct unwind_state *st, __u32 end)
{
	/* Looked up here, not kept by the step: its stack stays small. */
	struct walk *w = this_walk();

	/* The caller of the frame a runtime's run replaces could not be
	 * found: the run is still pushed, then the walk ends. */
	if (w && w->running && end != STACK_END_TRUNCATED) {
		w->end_after = end + 1;
		return 0;
	}
	st->end = end;
	return 1;
}

/* One frame: push st->pc, then find its caller. 0: go on; 1: done. */
static __always_inline long unwind_step_in(const int form)
{
	__u32 zero = 0;
	struct unwind_state *st = bpf_map_lookup_elem(&unwind_states, &zero);
	struct stored_stack *s = bpf_map_lookup_elem(&stack_scratch, &zero);
	struct walk *w = this_walk();
	struct unwind_mapping *m = 0;
	struct proc_unwind *proc = 0;
	int mi = -1, ri;
	__u64 ra = 0, cfa = 0, bp, lookup_pc, saved;
	__u32 kind = UNWIND_MAP_FP, nr, rule = CFA_NONE;
	struct unwind_info *r = 0;
	int fp = 1;

	if (!st || !s || !w)
		return 1;
	nr = s->nr;
	if (nr >= EMBERD_MAX_STACK_DEPTH)
		return unwind_stop(st, STACK_END_TRUNCATED);
	if (w->running) {
		if (runtime_emit(w->running))
			return unwind_stop(st, STACK_END_TRUNCATED);
		return 0;
	}
	if (w->end_after) {
		st->end = w->end_after - 1;
		/* The marker of these ends names the file of the stack's last
		 * native frame: here the one a run replaced; it goes back at
		 * the root. */
		if (st->end == STACK_END_NO_INFO || st->end == STACK_END_BUDGET) {
			s->ips[nr & 127] = w->replaced_pc;
			s->nr = nr + 1;
		}
		return 1;
	}
	if (st->pc == 0)
		return unwind_stop(st, nr ? STACK_END_ROOT : STACK_END_ERR_READ);
	/* Below mmap_min_addr or above user space: not code, whatever the walk
	 * read (frame pointers over a frameless binary read data as addresses). */
	if (nr && (st->pc < 0x10000 || st->pc >= 0x800000000000ULL))
		return unwind_stop(st, fp_failure(st->fp_from, STACK_END_ERR_PC));
	if (st->have_proc) {
		mi = find_mapping(st->tgid, st->pc);
		if (mi >= 0)
			proc = bpf_map_lookup_elem(&proc_unwind, &st->tgid);
		if (proc) {
			/* Keep clang from computing the address before the null check. */
			asm volatile("" : "+r"(proc));
			m = &proc->maps[mi & (EMBERD_MAX_MAPPINGS - 1)];
		}
		if (!m) {
			__u8 one = 1;

			/* New code since the agent last read the mappings, or a
			 * garbage return address: have the mappings read again. */
			__u32 zero = 0;
			__u32 *pending;

			/* The walked task is the current one (a user stack is
			 * read only of current), so its uid is current's. */
			if ((__u32)bpf_get_current_uid_gid() == 0)
				bpf_map_update_elem(&unwind_refresh_root, &st->tgid, &one, BPF_ANY);
			else
				bpf_map_update_elem(&unwind_refresh, &st->tgid, &one, BPF_ANY);
			pending = bpf_map_lookup_elem(&unwind_refresh_pending, &zero);
			if (pending)
				*pending = 1;
		}
	}
	/* A pc in no mapping the agent listed (a new process, a library just
	 * mapped): the kernel's own mapping, and its file's table by inode. */
	if (!m) {
		int found = mapping_by_vma(st, st->pc, form);

		if (found == 1)
			m = &st->vm;
		else if (found == 0 && nr > 0)
			return unwind_stop(st, fp_failure(st->fp_from, STACK_END_ERR_PC));
		else if (st->have_proc && nr > 0)
			return unwind_stop(st, fp_failure(st->fp_from, STACK_END_ERR_PC));
	}
	/* Code a runtime claimed for this walk (CPython's eval loop): the
	 * runtime may replace the frame by its own (bpf/runtime.h), pushed by
	 * the next steps; its caller is then found as for any native frame. */
	w = this_walk();
	if (w) {
		__u32 rt = walk_claimed(w, st->pc);

		if (rt) {
			int taken;

			w->pc = st->pc;
			w->sp = st->sp;
			w->bp = st->bp;
			taken = runtime_enter(w, s, rt, st->pc, m && m->kind == UNWIND_MAP_FP);
			/* Code the runtime unwinds itself (the JVM's): its
			 * caller's registers are the walk's. */
			if (taken == RUNTIME_UNWOUND) {
				st->pc = w->pc;
				st->sp = w->sp;
				st->bp = w->bp;
				st->exact_pc = 0;
				st->fp_from = 0;
				return 0;
			}
			if (taken)
				goto pushed;
		}
	}
	s->ips[nr & 127] = st->pc;
	s->nr = nr + 1;
pushed:
	st->fp_from = 0;

	if (m)
		kind = m->kind;
	if (kind == UNWIND_MAP_TABLE) {
		lookup_pc = st->exact_pc ? st->pc : st->pc - 1;
		ri = find_row(m->table_start, m->table_len, (__u32)(lookup_pc - m->bias));
		if (ri >= 0) {
			__u32 ik = ri;

			r = bpf_map_lookup_elem(&unwind_infos, &ik);
		}
		rule = r ? r->rule & 0xf : CFA_NONE;
		/* Code without CFI in a file that has some (V8's embedded builtins
		 * in node, hand-written stubs): frame pointers, as before tables. */
		if (!r || rule == CFA_NONE)
			kind = UNWIND_MAP_NO_ROW;
	}
	if (kind == UNWIND_MAP_TABLE && r) {
		fp = 0;
		switch (rule) {
		case CFA_RSP:
			cfa = st->sp + r->cfa_offset;
			break;
		case CFA_RBP:
			if (!st->bp)
				return unwind_stop(st, STACK_END_ERR_UNSUPPORTED);
			cfa = st->bp + r->cfa_offset;
			break;
		case CFA_PLT:
			cfa = st->sp + 8 + ((st->pc & 15) >= r->cfa_offset ? 8 : 0);
			break;
		case CFA_SIGNAL: {
			/* rt_sigframe: the ucontext is at rsp; gregs at +40. */
			__u64 nsp, nbp, nip;

			if (read_user_u64(st->sp + 160, &nsp) || read_user_u64(st->sp + 120, &nbp) ||
			    read_user_u64(st->sp + 168, &nip))
				return unwind_stop(st, STACK_END_ERR_READ);
			if (nsp <= st->sp)
				return unwind_stop(st, STACK_END_ERR_CFA);
			st->pc = nip;
			st->sp = nsp;
			st->bp = nbp;
			st->exact_pc = 1;
			return 0;
		}
		case CFA_END:
			return unwind_stop(st, STACK_END_ROOT);
		case CFA_NONE:
			return unwind_stop(st, STACK_END_ERR_NO_ROW);
		default:
			return unwind_stop(st, STACK_END_ERR_UNSUPPORTED);
		}
		if (cfa <= st->sp)
			return unwind_stop(st, STACK_END_ERR_CFA);
		if (read_user_u64(cfa - 8, &ra))
			return unwind_stop(st, STACK_END_ERR_READ);
		bp = st->bp;
		switch (r->rule >> 4) {
		case RBP_AT_CFA:
			if (read_user_u64(cfa + (__s64)r->rbp_offset * 8, &saved))
				return unwind_stop(st, STACK_END_ERR_READ);
			bp = saved;
			break;
		case RBP_SAME:
			break;
		default:
			bp = 0; /* unknown: a later rbp-based CFA stops with an error */
		}
		ucount(UCOUNTER_TABLE_STEPS);
	}
	if (fp) {
		/* Frame pointers: anonymous (JIT) code, files without CFI, and
		 * processes whose tables are not ready. */
		/* rbp = 0 is no root in anonymous code: a thread's root is in a
		 * file with a table (clone3, _start), so a JIT frame without a
		 * frame pointer ends the walk short of it, and says so. */
		if (st->bp == 0)
			return unwind_stop(st, kind == UNWIND_MAP_FP ? STACK_END_ERR_NO_FP
								      : fp_failure(kind + 1, STACK_END_ERR_CFA));
		if (st->bp < st->sp)
			return unwind_stop(st, fp_failure(kind + 1, STACK_END_ERR_CFA));
		if (read_user_u64(st->bp + 8, &ra) || read_user_u64(st->bp, &bp))
			return unwind_stop(st, fp_failure(kind + 1, STACK_END_ERR_READ));
		cfa = st->bp + 16;
		st->fp_from = kind + 1;
		if (kind == UNWIND_MAP_NOT_READY || !m)
			st->guessed = 1;
		ucount(UCOUNTER_FP_STEPS);
	}
	st->pc = ra;
	st->sp = cfa;
	st->bp = bp;
	st->exact_pc = 0;
	return 0;
}

/* The loop form's step: bpf_loop's callback. */
static long unwind_step(__u32 index, void *ctx)
{
	return unwind_step_in(EMBERD_FORM_LOOP);
}

/* The bounded form's step: a global function, which the verifier checks
 * once on its own rather than once per iteration of the loop calling it.
 * It reads `index`: clang passes an argument the callee never reads as
 * undefined, whatever register held last, and Linux 5.10's verifier
 * refuses a call whose scalar argument holds a pointer ("R1 is not a
 * scalar"). */
__attribute__((noinline)) int unwind_step_bounded(__u32 index)
{
	if (index > EMBERD_MAX_STACK_DEPTH)
		return 1;
	return unwind_step_in(EMBERD_FORM_BOUNDED);
}

/* The current task, as a pointer BPF_CORE_READ reads through. */
static __always_inline void *current_task(void)
{
	if (unwind_config.bounded) /* bpf_get_current_task_btf: Linux 5.11 */
		return (void *)bpf_get_current_task();
	return bpf_get_current_task_btf();
}

/* Where `task`'s user registers are saved, or 0. */
static __always_inline struct pt_regs___emberd *user_regs(struct task_struct___emberd *task)
{
	__u32 size = unwind_config.thread_size ? unwind_config.thread_size : EMBERD_THREAD_SIZE;
	void *stack;

	if (!unwind_config.bounded) /* bpf_task_pt_regs: Linux 5.15 */
		return (void *)bpf_task_pt_regs((struct task_struct *)task);
	/* What bpf_task_pt_regs computes on x86_64: the pt_regs at the top of
	 * the task's kernel stack (no padding above them on 64-bit), whose
	 * size (THREAD_SIZE: 16 KiB, 32 KiB with KASAN) the agent read from
	 * the kernel's BTF (src/collect/forms.rs, `thread_size`). */
	stack = BPF_CORE_READ(task, stack);
	if (!stack)
		return 0;
	return (void *)((char *)stack + size - bpf_core_type_size(struct pt_regs___emberd));
}

/*
 * Whether registers found by address (the bounded form) are a user frame's:
 * the code and stack segments are x86_64's user selectors (RPL 3), and the
 * stack pointer lies in the user half of the address space. A kernel whose
 * THREAD_SIZE the agent could not read, or a task that entered the kernel
 * some other way, gives something else: the walk then ends at once, marked
 * unreadable, never wrong. `cs` and `ss` are read whole (16-bit selectors
 * in the low bits; FRED kernels keep flags above them).
 */
static __always_inline int user_regs_plausible(struct pt_regs___emberd *regs, __u64 sp)
{
	__u64 cs = BPF_CORE_READ(regs, cs) & 0xffff, ss = BPF_CORE_READ(regs, ss) & 0xffff;

	return (cs == EMBERD_USER_CS || cs == EMBERD_USER32_CS) && ss == EMBERD_USER_DS &&
	       sp != 0 && sp < EMBERD_USER_END;
}

/* Two independent 64-bit hashes of a stack (its frames and how it ended). */
static __always_inline void hash_stack(struct stored_stack *s, __u64 *h1, __u64 *h2)
{
	__u64 a = 0xcbf29ce484222325ULL ^ s->end, b = 0x9e3779b97f4a7c15ULL + s->nr;
	__u32 nr = s->nr;

	for (int i = 0; i < EMBERD_MAX_STACK_DEPTH; i++) {
		__u64 ip;

		if (i >= nr)
			break;
		ip = s->ips[i];
		a = (a ^ ip) * 0x100000001b3ULL;
		a ^= a >> 29;
		b = (b ^ (ip >> 7)) * 0xff51afd7ed558ccdULL;
		b ^= b >> 33;
	}
	/* 0 and 1 are the markers EMBERD_STACK_NONE and EMBERD_STACK_LOST. */
	if (a < 2)
		a += 2;
	*h1 = a;
	*h2 = b;
}

/*
 * Stores the scratch stack `s` (nr, end, ips set) in `map` and returns its
 * key, or EMBERD_STACK_LOST with *lost set to the counter to bump. With
 * `counts` (the stacks each user has stored, and every user but root
 * together), a new stack of user `uid` is refused once either reaches its
 * bound (within_share of `share`); a stack already stored is shared by
 * every user, and root is not limited.
 */
static __always_inline __u64 store_stack(void *map, struct stored_stack *s, __u64 now,
					 __u32 *lost, __u32 uid, void *counts, __u64 share)
{
	struct stored_stack *old;
	__u64 h, check, *held = 0, *all = 0;

	hash_stack(s, &h, &check);
	s->check = check;
	s->used = now;
	s->uid = uid;
	s->_pad = 0;
	old = bpf_map_lookup_elem(map, &h);
	if (!old) {
		if (counts && share && uid != 0) {
			held = uid_count(counts, uid);
			all = all_users_count(counts);
		}
		if (!within_share(held, all, share)) {
			*lost = STACK_LOST_SHARE;
			return EMBERD_STACK_LOST;
		}
		if (bpf_map_update_elem(map, &h, s, BPF_NOEXIST) == 0) {
			count_in_share(held, all);
			return h;
		}
		old = bpf_map_lookup_elem(map, &h);
		if (!old) {
			*lost = STACK_LOST_FULL;
			return EMBERD_STACK_LOST;
		}
	}
	if (old->check != check) {
		*lost = STACK_LOST_COLLISION;
		return EMBERD_STACK_LOST;
	}
	if (old->used != now)
		old->used = now;
	return h;
}

/*
 * Walks the user stack of `task` (current, or a task switching out on this
 * CPU) into the scratch stack. Returns the scratch stack, or 0 when the task
 * has no user stack (kernel thread, or a process past exit_mm).
 */
static __always_inline struct stored_stack *unwind_user(struct task_struct___emberd *task,
							__u32 tgid, const int form)
{
	__u32 zero = 0;
	struct unwind_state *st = bpf_map_lookup_elem(&unwind_states, &zero);
	struct stored_stack *s = scratch_stack();
	struct walk *w = this_walk();
	struct pt_regs___emberd *regs;

	if (!st || !s || !w || tgid == 0)
		return 0;
	if (BPF_CORE_READ(task, flags) & EMBERD_PF_KTHREAD)
		return 0;
	/* A process past exit_mm (exiting, waking its parent) has no user
	 * stack left: its kernel stack (do_exit) is the whole truth, not a
	 * `stack not readable` marker under it. */
	if (!BPF_CORE_READ(task, mm))
		return 0;
	regs = user_regs(task);
	if (!regs)
		return 0;
	st->pc = BPF_CORE_READ(regs, ip);
	st->sp = BPF_CORE_READ(regs, sp);
	st->bp = BPF_CORE_READ(regs, bp);
	/* Registers found by address must be a user frame's. */
	if (unwind_config.bounded && !user_regs_plausible(regs, st->sp))
		st->pc = 0;
	st->tgid = tgid;
	s->nr = 0;
	st->end = STACK_END_TRUNCATED;
	st->exact_pc = 1;
	st->fp_from = 0;
	{
		struct proc_unwind *p = bpf_map_lookup_elem(&proc_unwind, &tgid);
		__u64 *exec = bpf_map_lookup_elem(&exec_at, &tgid);
		__u64 exec_ns = exec ? *exec : 0;

		st->have_proc = p && !(exec_ns > p->read_ns);
		if (!st->have_proc)
			vma_cache_for(st, tgid, bpf_ktime_get_ns(), exec_ns);
	}
	st->guessed = 0;
	w->tgid = tgid;
	w->running = RUNTIME_NONE;
	w->end_after = 0;
	for (int i = 0; i < EMBERD_WALK_CLAIMS; i++)
		w->claims[i].end = 0;
	/* The runtimes read only processes the agent has listed. */
	if (runtime_begin(w, st->have_proc)) {
		w->now = bpf_ktime_get_ns();
		/* unwind_user walks the current task (prev at sched_switch). */
		w->uid = account_of((__u32)bpf_get_current_uid_gid());
		w->gen++;
		w->fsbase = BPF_CORE_READ(task, thread.fsbase);
	}
	if (!st->have_proc)
		ucount(UCOUNTER_NOT_READY);
	if (form == EMBERD_FORM_LOOP) {
		bpf_loop(EMBERD_MAX_STACK_DEPTH + 1, unwind_step, 0, 0);
	} else {
#pragma clang loop unroll(disable)
		for (__u32 i = 0; i < EMBERD_MAX_STACK_DEPTH + 1; i++)
			if (unwind_step_bounded(i))
				break;
	}
	runtime_finish(w, s, st->end);
	s->end = st->end;
	/* A frame-pointer step out of a file whose table is not built yet
	 * proves nothing (rbp = 0 is no root in code built without frame
	 * pointers, and a frameless function is skipped): say so, whatever the
	 * walk reached. */
	if (st->guessed && s->end != STACK_END_TRUNCATED)
		s->end = STACK_END_NOT_READY;
	ucount(UCOUNTER_WALKS);
	ucount(UCOUNTER_END_BASE + (s->end < STACK_END_MAX ? s->end : 0));
	return s;
}

/* The kernel stack of the current context into the scratch stack, or 0. */
static __always_inline struct stored_stack *kernel_stack(void *ctx)
{
	struct stored_stack *s = scratch_stack();
	long n;

	if (!s)
		return 0;
	n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), 0);
	if (n <= 0)
		return 0;
	s->nr = n / sizeof(__u64);
	s->end = s->nr >= EMBERD_MAX_STACK_DEPTH ? STACK_END_TRUNCATED : STACK_END_KERNEL;
	return s;
}

#endif /* EMBERD_UNWIND_H */
