//! Which BPF program of `bpf/events.bpf.c` serves each event, hook and form:
//! one table ([`PROGRAMS`]) that loading (`set_autoload`), attaching and
//! malloc's uprobes all read, so an event's programs are named once.
//!
//! A row names its program(s) by their full BPF names (greppable in
//! `bpf/`), says when it is needed ([`Plan`]) and how it is attached
//! ([`Attach`]). Every program of the object must be named by a row and
//! every row's names must be programs of the object: [`check_names`] says
//! which is not, at start-up, and a unit test runs it on the object built.

use super::forms::ProgramForm;

/// How brk, mmap and munmap are hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallHooks {
    /// The classic `syscalls:sys_{enter,exit}_*` tracepoints: only those
    /// calls run a program. Needs tracefs mounted.
    Tracepoints,
    /// The raw `sys_enter`/`sys_exit` tracepoints: every syscall runs a
    /// program that leaves at the first comparison. No tracefs needed.
    RawSyscalls,
}

/// How block I/O is hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockHooks {
    /// `block_io_start`/`block_io_done` (Linux 6.5+): started in the
    /// submitting thread.
    IoStartDone,
    /// `block_rq_issue`/`block_rq_complete`: the issuing thread, which may
    /// be a kworker that flushed another thread's plug.
    RqIssueComplete,
}

/// What the loaded object is to do: the switched-on events and the hooks
/// this kernel offers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Plan {
    /// The form of every program that walks user stacks.
    pub form: ProgramForm,
    /// Off-CPU, wakeup or off-wake is on: the scheduler hooks.
    pub sched: bool,
    /// The pre-5.18 sched_switch program (state read from the task).
    pub compat: bool,
    /// Page faults.
    pub pagefault: bool,
    /// How brk, mmap and munmap are hooked (None: all off).
    pub syscalls: Option<SyscallHooks>,
    /// brk, mmap, munmap each.
    pub brk: bool,
    /// See `brk`.
    pub mmap: bool,
    /// See `brk`.
    pub munmap: bool,
    /// How block I/O is hooked (None: off).
    pub block: Option<BlockHooks>,
    /// `block_rq_merge` exists.
    pub rq_merge: bool,
    /// malloc's uprobes.
    pub malloc: bool,
}

/// The program(s) of a row, by form (see `EMBERD_FORM_LOOP` in
/// `bpf/emberd.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Forms {
    /// One program serves both forms (it walks no user stack).
    Both(&'static str),
    /// A twin per form: the bpf_loop form and the bounded form.
    Twins {
        /// The bpf_loop form (Linux 5.17+).
        loop_form: &'static str,
        /// The bounded form (Linux 5.10+).
        bounded: &'static str,
    },
    /// Only in the bpf_loop form.
    Loop(&'static str),
    /// Only in the bounded form.
    Bounded(&'static str),
}

impl Forms {
    /// The program of `form`, if the row has one.
    pub(super) fn of(self, form: ProgramForm) -> Option<&'static str> {
        match (self, form) {
            (Forms::Both(p), _) => Some(p),
            (Forms::Twins { loop_form, .. }, ProgramForm::Loop) => Some(loop_form),
            (Forms::Twins { bounded, .. }, ProgramForm::Bounded) => Some(bounded),
            (Forms::Loop(p), ProgramForm::Loop) | (Forms::Bounded(p), ProgramForm::Bounded) => {
                Some(p)
            }
            _ => None,
        }
    }

    /// Every program the row names, whatever the form.
    fn names(self) -> impl Iterator<Item = &'static str> {
        let (a, b) = match self {
            Forms::Both(p) | Forms::Loop(p) | Forms::Bounded(p) => (p, None),
            Forms::Twins { loop_form, bounded } => (loop_form, Some(bounded)),
        };
        std::iter::once(a).chain(b)
    }
}

/// How a row's program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attach {
    /// Where its section says (`tp_btf/...`, `raw_tracepoint/...`).
    Auto,
    /// To the page-fault software event of every online CPU.
    PageFaults,
    /// To the classic tracepoint `syscalls:<name>` (one program may serve
    /// several).
    Syscall(&'static str),
    /// To the task iterator, run by the agent before collecting stacks; a
    /// kernel without it only keeps stacks longer.
    TaskIterator,
    /// To libc's allocation functions or free(), per process, by
    /// `super::malloc` (which looks the program up by its role).
    Uprobe(UprobeRole),
    /// To `uv_timer_start` of each node process whose JavaScript frames
    /// are read, by `super::node_timers`.
    NodeTimer,
}

/// Which of malloc's uprobes a row's program is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UprobeRole {
    /// The entry of every allocation function, told apart by cookie.
    EnterByCookie,
    /// The entry of allocation function `ALLOC_FUNCTIONS[i]` alone.
    Enter(usize),
    /// The return of every allocation function.
    Exit,
    /// The entry of free().
    Free,
}

/// One program (or twin pair) and when and how it runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Program {
    /// What it records, for errors and the log.
    pub serves: &'static str,
    /// Its program in each form.
    pub forms: Forms,
    /// Whether it is loaded and attached for a plan.
    pub when: fn(&Plan) -> bool,
    /// How it is attached.
    pub attach: Attach,
}

const fn row(
    serves: &'static str,
    forms: Forms,
    when: fn(&Plan) -> bool,
    attach: Attach,
) -> Program {
    Program {
        serves,
        forms,
        when,
        attach,
    }
}

const fn twins(loop_form: &'static str, bounded: &'static str) -> Forms {
    Forms::Twins { loop_form, bounded }
}

fn tracepoints(p: &Plan) -> bool {
    p.syscalls == Some(SyscallHooks::Tracepoints)
}

fn io_start(p: &Plan) -> bool {
    p.block == Some(BlockHooks::IoStartDone)
}

fn rq_issue(p: &Plan) -> bool {
    p.block == Some(BlockHooks::RqIssueComplete)
}

/// Every program of `bpf/events.bpf.c`, in attach order.
pub(super) const PROGRAMS: &[Program] = &[
    // bpf/new_process.h: a process's maps are read when it appears.
    row(
        "processes",
        Forms::Both("handle__sched_process_exec"),
        |_| true,
        Attach::Auto,
    ),
    row(
        "processes",
        Forms::Both("handle__sched_process_exit"),
        |_| true,
        Attach::Auto,
    ),
    // Off-CPU, wakeup, off-wake. sched_switch has passed prev_state since
    // Linux 5.18; the compat program reads the state from the task, as
    // the bounded form always does.
    row(
        "offcpu",
        Forms::Loop("handle__sched_switch"),
        |p| p.sched && !p.compat,
        Attach::Auto,
    ),
    row(
        "offcpu",
        twins(
            "handle__sched_switch_compat",
            "handle__sched_switch_bounded",
        ),
        |p| p.sched && p.compat,
        Attach::Auto,
    ),
    row(
        "wakeup",
        twins("handle__sched_waking", "handle__sched_waking_bounded"),
        |p| p.sched,
        Attach::Auto,
    ),
    row(
        "wakeup",
        twins(
            "handle__sched_wakeup_new",
            "handle__sched_wakeup_new_bounded",
        ),
        |p| p.sched,
        Attach::Auto,
    ),
    row(
        "offcpu",
        Forms::Both("refresh_held_stacks"),
        |p| p.sched,
        Attach::TaskIterator,
    ),
    row(
        "pagefault",
        twins("handle__page_fault", "handle__page_fault_bounded"),
        |p| p.pagefault,
        Attach::PageFaults,
    ),
    // bpf/memory.h: brk, mmap, munmap by the classic tracepoints (tracefs)
    // or the raw ones; one exit program serves the three exits.
    row(
        "brk",
        Forms::Both("handle__sys_enter_brk"),
        |p| tracepoints(p) && p.brk,
        Attach::Syscall("sys_enter_brk"),
    ),
    row(
        "brk",
        twins("handle__sys_exit", "handle__sys_exit_bounded"),
        |p| tracepoints(p) && p.brk,
        Attach::Syscall("sys_exit_brk"),
    ),
    row(
        "mmap",
        Forms::Both("handle__sys_enter_mmap"),
        |p| tracepoints(p) && p.mmap,
        Attach::Syscall("sys_enter_mmap"),
    ),
    row(
        "mmap",
        twins("handle__sys_exit", "handle__sys_exit_bounded"),
        |p| tracepoints(p) && p.mmap,
        Attach::Syscall("sys_exit_mmap"),
    ),
    row(
        "munmap",
        Forms::Both("handle__sys_enter_munmap"),
        |p| tracepoints(p) && p.munmap,
        Attach::Syscall("sys_enter_munmap"),
    ),
    row(
        "munmap",
        twins("handle__sys_exit", "handle__sys_exit_bounded"),
        |p| tracepoints(p) && p.munmap,
        Attach::Syscall("sys_exit_munmap"),
    ),
    row(
        "brk/mmap/munmap",
        Forms::Both("handle__sys_enter_raw"),
        |p| p.syscalls == Some(SyscallHooks::RawSyscalls),
        Attach::Auto,
    ),
    row(
        "brk/mmap/munmap",
        twins("handle__sys_exit_raw", "handle__sys_exit_raw_bounded"),
        |p| p.syscalls == Some(SyscallHooks::RawSyscalls),
        Attach::Auto,
    ),
    // bpf/blockio.h: block_io_start/done (6.5+) or block_rq_issue/complete.
    row(
        "blockio",
        twins("handle__block_io_start", "handle__block_io_start_bounded"),
        io_start,
        Attach::Auto,
    ),
    row(
        "blockio",
        Forms::Both("handle__block_io_done"),
        io_start,
        Attach::Auto,
    ),
    row(
        "blockio",
        twins("handle__block_rq_issue", "handle__block_rq_issue_bounded"),
        rq_issue,
        Attach::Auto,
    ),
    row(
        "blockio",
        Forms::Both("handle__block_rq_complete"),
        rq_issue,
        Attach::Auto,
    ),
    // block_io_start fires once per request; block_rq_issue again after a
    // requeue, which this hook tells from a reused address.
    row(
        "blockio",
        Forms::Both("handle__block_rq_requeue"),
        rq_issue,
        Attach::Auto,
    ),
    row(
        "blockio",
        Forms::Both("handle__block_rq_merge"),
        |p| p.block.is_some() && p.rq_merge,
        Attach::Auto,
    ),
    // bpf/node_timers.h: node's timer arms, attached per node process;
    // off-CPU's charge reads what they keep.
    row(
        "offcpu",
        twins("handle__node_timer", "handle__node_timer_bounded"),
        |p| p.sched,
        Attach::NodeTimer,
    ),
    // bpf/memory.h: malloc's uprobes, attached per process. The bounded
    // form has a program per function: no attach cookies before 5.15.
    row(
        "malloc",
        Forms::Loop("handle__alloc_enter"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::EnterByCookie),
    ),
    row(
        "malloc",
        Forms::Bounded("handle__malloc_enter_bounded"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Enter(0)),
    ),
    row(
        "malloc",
        Forms::Bounded("handle__calloc_enter_bounded"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Enter(1)),
    ),
    row(
        "malloc",
        Forms::Bounded("handle__realloc_enter_bounded"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Enter(2)),
    ),
    row(
        "malloc",
        Forms::Bounded("handle__posix_memalign_enter_bounded"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Enter(3)),
    ),
    row(
        "malloc",
        Forms::Bounded("handle__aligned_alloc_enter_bounded"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Enter(4)),
    ),
    row(
        "malloc",
        Forms::Both("handle__alloc_exit"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Exit),
    ),
    row(
        "malloc",
        Forms::Both("handle__free"),
        |p| p.malloc,
        Attach::Uprobe(UprobeRole::Free),
    ),
];

/// The rows `plan` needs, each with its program in the plan's form.
pub(super) fn chosen(plan: &Plan) -> impl Iterator<Item = (&'static Program, &'static str)> + '_ {
    PROGRAMS.iter().filter_map(move |r| {
        let name = r.forms.of(plan.form)?;
        (r.when)(plan).then_some((r, name))
    })
}

/// Whether program `name` is loaded for `plan`.
pub(super) fn loads(plan: &Plan, name: &str) -> bool {
    chosen(plan).any(|(_, n)| n == name)
}

/// The program of node's timer uprobe in `form`, if loaded for `plan`.
pub(super) fn node_timer(plan: &Plan) -> Option<&'static str> {
    chosen(plan)
        .find(|(r, _)| r.attach == Attach::NodeTimer)
        .map(|(_, name)| name)
}

/// The program of malloc uprobe `role` in `form`.
pub(super) fn uprobe(form: ProgramForm, role: UprobeRole) -> Option<&'static str> {
    PROGRAMS
        .iter()
        .filter(|r| r.attach == Attach::Uprobe(role))
        .find_map(|r| r.forms.of(form))
}

/// A program of the object that no row names, or a row's name that is no
/// program of the object: the table and `bpf/` disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramTableError {
    /// A program of `bpf/events.bpf.c` that [`PROGRAMS`] does not name.
    #[error(
        "BPF program {0} of events.bpf.c is in no row of src/collect/programs.rs's PROGRAMS: add one (when it loads, how it attaches)"
    )]
    Unlisted(String),
    /// A name in [`PROGRAMS`] that `bpf/events.bpf.c` does not define.
    #[error(
        "src/collect/programs.rs names BPF program {0}, which events.bpf.c does not define (renamed?)"
    )]
    Missing(&'static str),
    /// No row gives malloc's uprobe of this role in the loaded form.
    #[error("src/collect/programs.rs's PROGRAMS has no malloc uprobe {0} in this form")]
    NoUprobe(String),
}

/// Checks [`PROGRAMS`] against the object's program names, both ways.
pub(super) fn check_names<'a>(
    object: impl IntoIterator<Item = &'a str>,
) -> Result<(), ProgramTableError> {
    let object: Vec<&str> = object.into_iter().collect();
    let listed = || PROGRAMS.iter().flat_map(|r| r.forms.names());
    if let Some(p) = object.iter().find(|p| !listed().any(|n| n == **p)) {
        return Err(ProgramTableError::Unlisted((*p).to_owned()));
    }
    match listed().find(|n| !object.contains(n)) {
        Some(n) => Err(ProgramTableError::Missing(n)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use libbpf_rs::skel::SkelBuilder;

    use super::*;
    use crate::bpf::events::EventsSkelBuilder;

    fn object_names() -> Vec<String> {
        let mut storage = MaybeUninit::uninit();
        let open = EventsSkelBuilder::default()
            .open(&mut storage)
            .expect("events.bpf.c opens (no privileges needed)");
        use libbpf_rs::skel::OpenSkel;
        open.open_object()
            .progs()
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn every_program_of_the_object_is_in_the_table_and_back() {
        let names = object_names();
        check_names(names.iter().map(String::as_str)).unwrap();
        assert_eq!(
            check_names(["handle__nonesuch"]).unwrap_err(),
            ProgramTableError::Unlisted("handle__nonesuch".into())
        );
    }

    #[test]
    fn each_form_loads_its_own_twin_only() {
        let plan = |form| Plan {
            form,
            sched: true,
            compat: true,
            pagefault: true,
            syscalls: Some(SyscallHooks::RawSyscalls),
            brk: true,
            mmap: true,
            munmap: true,
            block: Some(BlockHooks::RqIssueComplete),
            rq_merge: true,
            malloc: true,
        };
        let (lp, bd) = (plan(ProgramForm::Loop), plan(ProgramForm::Bounded));
        for r in PROGRAMS {
            if let Forms::Twins { loop_form, bounded } = r.forms
                && (r.when)(&lp)
            {
                assert!(loads(&lp, loop_form) && !loads(&lp, bounded), "{loop_form}");
                assert!(loads(&bd, bounded) && !loads(&bd, loop_form), "{bounded}");
            }
        }
        assert!(!loads(&lp, "handle__sched_switch"), "compat plan");
        assert_eq!(
            uprobe(ProgramForm::Bounded, UprobeRole::Enter(3)),
            Some("handle__posix_memalign_enter_bounded")
        );
        assert_eq!(
            uprobe(ProgramForm::Bounded, UprobeRole::EnterByCookie),
            None
        );
        let off = Plan {
            sched: false,
            pagefault: false,
            syscalls: None,
            block: None,
            malloc: false,
            ..lp
        };
        let names: Vec<_> = chosen(&off).map(|(_, n)| n).collect();
        assert_eq!(
            names,
            ["handle__sched_process_exec", "handle__sched_process_exit"],
            "an event that is off costs nothing"
        );
    }
}
