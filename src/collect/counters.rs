//! The BPF program's per-CPU counters: what it saw, skipped and lost.

use crate::bpf::enums as c;

/// Indices of the `counters` map: `enum emberd_counter` in `bpf/emberd.h`,
/// whose values these are (checked at build time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Counter {
    /// Samples the program saw, idle included.
    Samples = c::COUNTER_SAMPLES,
    /// Samples of the idle task, left out.
    IdleSkipped = c::COUNTER_IDLE_SKIPPED,
    /// Samples of other processes when one process is profiled.
    Filtered = c::COUNTER_FILTERED,
    /// Kernel stacks lost to a hash collision in the stack map (-EEXIST).
    KernelStackCollision = c::COUNTER_KSTACK_COLLISION,
    /// User stacks lost to a hash collision in the stack map (-EEXIST).
    UserStackCollision = c::COUNTER_USTACK_COLLISION,
    /// Stacks lost because the stack map was full (-ENOMEM).
    StackMapFull = c::COUNTER_STACK_MAP_FULL,
    /// Samples with neither a kernel nor a user stack.
    UserStackMissing = c::COUNTER_USTACK_MISSING,
    /// Samples lost because the counts map was full.
    CountsFull = c::COUNTER_COUNTS_FULL,
    /// New processes not announced because `new_tgids` was full.
    NewProcessDropped = c::COUNTER_NEW_PROCESS_DROPPED,
}

impl Counter {
    /// Every counter, in map order.
    pub const ALL: [Counter; 9] = [
        Counter::Samples,
        Counter::IdleSkipped,
        Counter::Filtered,
        Counter::KernelStackCollision,
        Counter::UserStackCollision,
        Counter::StackMapFull,
        Counter::UserStackMissing,
        Counter::CountsFull,
        Counter::NewProcessDropped,
    ];

    /// A short snake_case name, for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Samples => "samples",
            Counter::IdleSkipped => "idle_skipped",
            Counter::Filtered => "filtered",
            Counter::KernelStackCollision => "kernel_stack_collision",
            Counter::UserStackCollision => "user_stack_collision",
            Counter::StackMapFull => "stack_map_full",
            Counter::UserStackMissing => "user_stack_missing",
            Counter::CountsFull => "counts_full",
            Counter::NewProcessDropped => "new_process_dropped",
        }
    }
}

crate::bpf::check_c_enum!(Counter, c::COUNTER_MAX);

/// Cumulative values of every counter since the program was loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters([u64; Counter::ALL.len()]);

impl Counters {
    /// The value of one counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Adds `v` to one counter.
    pub fn add(&mut self, c: Counter, v: u64) {
        self.0[c as usize] += v;
    }

    /// Stacks the kernel had but emberd could not keep.
    pub fn lost_stacks(&self) -> u64 {
        self.get(Counter::KernelStackCollision)
            + self.get(Counter::UserStackCollision)
            + self.get(Counter::StackMapFull)
    }
}
