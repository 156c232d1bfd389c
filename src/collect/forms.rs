//! Which form of the BPF programs this kernel takes, and why.
//!
//! Every program that walks user stacks is built in two forms
//! (`EMBERD_FORM_LOOP` in `bpf/emberd.h`):
//! - the loop form, for Linux 5.17 and later: `bpf_loop` steps the
//!   unwinder and `bpf_find_vma` finds mappings the agent has not listed
//!   yet; off-CPU state lives in task storage;
//! - the bounded form, for Linux 5.10 and later: a bounded loop over a
//!   global function, user registers found at the top of the task's kernel
//!   stack, off-CPU state in a hash of thread ids. A pc in a mapping the
//!   agent has not listed is walked by frame pointers and marked
//!   `[unwind error: tables not ready]` until the agent lists it.
//!   malloc's entry has a program per allocation function (no attach
//!   cookies before Linux 5.15).
//!
//! The form is chosen once per run by asking the kernel for the helpers the
//! loop form calls (libbpf's helper probes), so a kernel that backports them
//! (RHEL's 5.14) gets the loop form whatever its version says.

use std::fmt;
use std::sync::OnceLock;

use libbpf_rs::libbpf_sys;

/// The two forms of the programs that walk user stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramForm {
    /// `bpf_loop`, `bpf_find_vma`, `bpf_task_pt_regs`, task storage: 5.17+.
    Loop,
    /// A bounded loop and none of those helpers: 5.10+.
    Bounded,
}

impl ProgramForm {
    /// The name `emberd check` and the log use.
    pub fn name(self) -> &'static str {
        match self {
            ProgramForm::Loop => "bpf_loop",
            ProgramForm::Bounded => "bounded loop",
        }
    }
}

impl fmt::Display for ProgramForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A kernel feature a form or an event needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// Its name as the kernel's documentation has it.
    pub name: &'static str,
    /// The mainline release that brought it.
    pub since: &'static str,
}

/// What the loop form needs, each one probed.
const LOOP_NEEDS: [(Feature, Probe); 5] = [
    need("bpf_loop", "5.17", Probe::Helper(libbpf_sys::BPF_FUNC_loop)),
    need(
        "bpf_find_vma",
        "5.17",
        Probe::Helper(libbpf_sys::BPF_FUNC_find_vma),
    ),
    need(
        "bpf_task_pt_regs",
        "5.15",
        Probe::Helper(libbpf_sys::BPF_FUNC_task_pt_regs),
    ),
    need(
        "bpf_get_current_task_btf",
        "5.11",
        Probe::Helper(libbpf_sys::BPF_FUNC_get_current_task_btf),
    ),
    need(
        "task storage",
        "5.11",
        Probe::Map(libbpf_sys::BPF_MAP_TYPE_TASK_STORAGE),
    ),
];

const fn need(name: &'static str, since: &'static str, probe: Probe) -> (Feature, Probe) {
    (Feature { name, since }, probe)
}

#[derive(Debug, Clone, Copy)]
enum Probe {
    Helper(libbpf_sys::bpf_func_id),
    Map(libbpf_sys::bpf_map_type),
}

impl Probe {
    /// Some(true/false) when the kernel answered; None when it could not be
    /// asked (not privileged).
    fn run(self) -> Option<bool> {
        // SAFETY: libbpf's probes take no pointers but the null options
        // and load (then close) a tiny program or map.
        let r = unsafe {
            match self {
                Probe::Helper(id) => libbpf_sys::libbpf_probe_bpf_helper(
                    libbpf_sys::BPF_PROG_TYPE_PERF_EVENT,
                    id,
                    std::ptr::null(),
                ),
                Probe::Map(t) => libbpf_sys::libbpf_probe_bpf_map_type(t, std::ptr::null()),
            }
        };
        match r {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }
}

/// What lets perf_event programs use hash maps allocated as they fill.
pub const LAZY_MAPS: Feature = Feature {
    name: "non-preallocated hash maps in perf_event programs",
    since: "6.1",
};

/// Whether a perf_event program may use a `BPF_F_NO_PREALLOC` hash map
/// (Linux 6.1+: before, the verifier says "perf_event programs can only
/// use preallocated hash map"). None when the kernel could not be asked.
fn probe_lazy_maps() -> Option<bool> {
    use std::os::fd::{FromRawFd, OwnedFd};

    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_sys::BPF_F_NO_PREALLOC,
        ..Default::default()
    };
    // SAFETY: a null-terminated name and options that outlive the call.
    let map = unsafe {
        libbpf_sys::bpf_map_create(
            libbpf_sys::BPF_MAP_TYPE_HASH,
            c"emberd_probe".as_ptr(),
            4,
            8,
            1,
            &opts,
        )
    };
    if map < 0 {
        return None;
    }
    // SAFETY: bpf_map_create returned a new descriptor we own.
    let _map = unsafe { OwnedFd::from_raw_fd(map) };
    let insn = |code: u8, dst: u8, src: u8, off: i16, imm: i32| {
        let mut i = libbpf_sys::bpf_insn {
            code,
            off,
            imm,
            ..Default::default()
        };
        i.set_dst_reg(dst);
        i.set_src_reg(src);
        i
    };
    // *(u32 *)(r10 - 4) = 0; r2 = r10 - 4; r1 = map; call
    // bpf_map_lookup_elem; r0 = 0; exit
    let prog = [
        insn(0x62, 10, 0, -4, 0),
        insn(0xbf, 2, 10, 0, 0),
        insn(0x07, 2, 0, 0, -4),
        insn(0x18, 1, libbpf_sys::BPF_PSEUDO_MAP_FD as u8, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(0x85, 0, 0, 0, libbpf_sys::BPF_FUNC_map_lookup_elem as i32),
        insn(0xb7, 0, 0, 0, 0),
        insn(0x95, 0, 0, 0, 0),
    ];
    // SAFETY: the instructions and strings outlive the call; no options.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_PERF_EVENT,
            c"emberd_probe".as_ptr(),
            c"GPL".as_ptr(),
            prog.as_ptr(),
            prog.len() as _,
            std::ptr::null_mut(),
        )
    };
    if fd >= 0 {
        // SAFETY: a new descriptor we own.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        return Some(true);
    }
    // EINVAL is the verifier's refusal; anything else (EPERM) says nothing.
    (std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)).then_some(false)
}

/// The form chosen for this run and why.
#[derive(Debug, Clone)]
pub struct FormChoice {
    /// The form the programs load in.
    pub form: ProgramForm,
    /// What the loop form needs that the kernel lacks (empty when it has
    /// everything, or when the kernel could not be asked).
    pub missing: Vec<Feature>,
    /// Whether `EMBERD_PROGRAM_FORM` chose it.
    pub forced: bool,
    /// Whether the maps perf_event programs use may be allocated as they
    /// fill (see [`LAZY_MAPS`]); if not, they are preallocated, and the
    /// processes the unwinder holds are capped (see
    /// [`PREALLOCATED_PROCESSES`]).
    pub lazy_maps: bool,
}

/// Processes the unwinder holds where its map must be preallocated (before
/// Linux 6.1): 5 KiB each, 10 MiB in all, where 8192 would be 40 MiB held
/// from the start. Processes beyond it are walked by frame pointers and
/// marked `[unwind error: tables not ready]`.
pub const PREALLOCATED_PROCESSES: u32 = 2048;

impl FormChoice {
    /// One line for `emberd check` and the log: the form and why.
    pub fn describe(&self) -> String {
        let why = if self.forced && self.missing.is_empty() {
            "chosen by EMBERD_PROGRAM_FORM".to_string()
        } else if self.forced {
            format!(
                "chosen by EMBERD_PROGRAM_FORM; this kernel lacks {}",
                list(&self.missing)
            )
        } else if self.missing.is_empty() {
            "this kernel has bpf_loop, bpf_find_vma, bpf_task_pt_regs and task storage".to_string()
        } else {
            format!("this kernel lacks {}", list(&self.missing))
        };
        match self.form {
            ProgramForm::Loop => format!("{} form ({why})", self.form),
            ProgramForm::Bounded => format!(
                "{} form ({why}); a library mapped since the agent last read a process's mappings is unwound once it reads them again (no bpf_find_vma)",
                self.form
            ),
        }
    }
}

/// `a (5.17), b (5.15)`.
pub fn list(features: &[Feature]) -> String {
    features
        .iter()
        .map(|f| format!("{} (Linux {})", f.name, f.since))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The form for this run, probed once. `EMBERD_PROGRAM_FORM=bounded` (or
/// `loop`) forces one: the tests and `scripts/bench forms` run the bounded
/// form on a kernel that has the loop form's helpers.
pub fn chosen() -> &'static FormChoice {
    static CHOICE: OnceLock<FormChoice> = OnceLock::new();
    CHOICE.get_or_init(|| {
        let forced = match std::env::var("EMBERD_PROGRAM_FORM").as_deref() {
            Ok("bounded") => Some(ProgramForm::Bounded),
            Ok("loop") => Some(ProgramForm::Loop),
            _ => None,
        };
        let lazy_maps = probe_lazy_maps().unwrap_or(true);
        // A probe that could not run (no privileges) counts as present:
        // loading then fails with the kernel's own error.
        let missing: Vec<Feature> = LOOP_NEEDS
            .iter()
            .filter(|(_, probe)| probe.run() == Some(false))
            .map(|(f, _)| *f)
            .collect();
        let form = forced.unwrap_or(if missing.is_empty() {
            ProgramForm::Loop
        } else {
            ProgramForm::Bounded
        });
        FormChoice {
            form,
            missing,
            forced: forced.is_some(),
            lazy_maps,
        }
    })
}

/// The size of a task's kernel stack (x86_64's `THREAD_SIZE`), where the
/// bounded form finds a task's user registers (the top `pt_regs` of that
/// stack: `bpf_task_pt_regs` does the same from Linux 5.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSize {
    /// Bytes.
    pub bytes: u32,
    /// Where it came from, for `emberd check`.
    pub source: &'static str,
}

/// x86_64's `THREAD_SIZE` without KASAN, used when the kernel's BTF does
/// not say (`EMBERD_THREAD_SIZE` in `bpf/emberd.h`).
pub const DEFAULT_THREAD_SIZE: u32 = 16384;

/// The kernel's `THREAD_SIZE`, read once. THREAD_SIZE is a macro, in no
/// BTF; but x86_64 sizes the interrupt stacks the same way
/// (`arch/x86/include/asm/page_64_types.h`: `THREAD_SIZE_ORDER` and
/// `IRQ_STACK_ORDER` are both `2 + KASAN_STACK_ORDER`, since Linux 4.9),
/// and `struct irq_stack` (`char stack[IRQ_STACK_SIZE]`, Linux 5.2 on) is
/// in the BTF of every kernel emberd loads on: 16 KiB here and on Debian's
/// 5.10, 6.1 and 6.12, 32 KiB with KASAN. Kallsyms could say too
/// (`__end_init_task - __start_init_task`), but only with
/// CONFIG_KALLSYMS_ALL and readable addresses, which this kernel has not.
/// A size that is not a power of two between 8 and 64 KiB is not believed.
/// The bounded form checks the registers it finds either way.
pub fn thread_size() -> ThreadSize {
    static SIZE: OnceLock<ThreadSize> = OnceLock::new();
    *SIZE.get_or_init(|| {
        use libbpf_rs::btf::{Btf, HasSize, types::Struct};
        let read = Btf::from_vmlinux().ok().and_then(|btf| {
            btf.type_by_name::<Struct<'_>>("irq_stack")
                .map(|s| u32::try_from(s.size()).unwrap_or(0))
        });
        match read {
            Some(bytes) if bytes.is_power_of_two() && (8192..=65536).contains(&bytes) => {
                ThreadSize {
                    bytes,
                    source: "the size of struct irq_stack in the kernel's BTF (x86_64 sizes it as THREAD_SIZE)",
                }
            }
            Some(_) => ThreadSize {
                bytes: DEFAULT_THREAD_SIZE,
                source: "x86_64's default: struct irq_stack in the kernel's BTF has an unexpected size",
            },
            None => ThreadSize {
                bytes: DEFAULT_THREAD_SIZE,
                source: "x86_64's default: the kernel's BTF has no struct irq_stack",
            },
        }
    })
}

/// The running kernel's (major, minor) version and release string.
pub fn kernel_version() -> ((u32, u32), String) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    (version, release)
}

/// The oldest kernel emberd loads on: BTF tracepoints (5.5), ring buffers
/// (5.8), `bpf_get_task_stack` (5.9), global functions and bounded loops.
pub const OLDEST: (u32, u32) = (5, 10);

/// Why loading the BPF programs failed, as far as can be told without the
/// verifier's log: the first missing piece of what emberd needs, else the
/// form that was tried on this kernel.
pub fn load_hint() -> String {
    use super::privileges::{Cap, has_cap};
    let (version, release) = kernel_version();
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return format!(
            "this kernel ({release}) has no BTF (/sys/kernel/btf/vmlinux): emberd needs one built with CONFIG_DEBUG_INFO_BTF"
        );
    }
    if version < OLDEST {
        return format!(
            "Linux {release} is older than {}.{}, the oldest emberd loads on (BTF tracepoints, ring buffers, bpf_get_task_stack)",
            OLDEST.0, OLDEST.1
        );
    }
    if !(has_cap(Cap::SysAdmin) || (has_cap(Cap::Bpf) && has_cap(Cap::Perfmon))) {
        return "loading BPF needs root or CAP_BPF+CAP_PERFMON".into();
    }
    let choice = chosen();
    if choice.forced && choice.form == ProgramForm::Loop && !choice.missing.is_empty() {
        return format!(
            "EMBERD_PROGRAM_FORM forces the bpf_loop form, but this kernel lacks {}: unset it",
            list(&choice.missing)
        );
    }
    format!(
        "the {} on Linux {release} was refused; the verifier's log above names the instruction. Run `emberd check` and report both",
        choice.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This kernel (x86_64, no KASAN) has 16 KiB kernel stacks, as
    /// `bpf_task_pt_regs` finds them.
    #[test]
    fn thread_size_is_read_from_the_kernels_btf() {
        let t = thread_size();
        assert_eq!(t.bytes, 16384, "{t:?}");
        assert!(t.source.contains("irq_stack in the kernel's BTF"), "{t:?}");
    }

    #[test]
    fn description_names_what_is_missing_and_its_release() {
        let c = FormChoice {
            form: ProgramForm::Bounded,
            missing: vec![LOOP_NEEDS[0].0, LOOP_NEEDS[2].0],
            forced: false,
            lazy_maps: false,
        };
        let d = c.describe();
        assert!(d.starts_with("bounded loop form (this kernel lacks bpf_loop (Linux 5.17), bpf_task_pt_regs (Linux 5.15))"), "{d}");
    }
}
