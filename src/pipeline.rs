//! The collect → symbolize step both `emberd record` and the daemon run once
//! a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::collect::{CollectError, Counters, CpuSampler, SamplerOptions};
use crate::symbolize::{Misses, SymbolizedSample, Symbolizer, SymbolizerOptions};

/// How often the BPF maps are drained and symbolized.
pub const DRAIN_INTERVAL: Duration = Duration::from_secs(1);

/// How often new processes are looked for between drains: a process that
/// lives at least this long is named even if it exits before the drain.
pub const NEW_PROCESS_POLL: Duration = Duration::from_millis(100);

/// One drain's output.
#[derive(Debug, Default)]
pub struct Batch {
    /// Named samples.
    pub samples: Vec<SymbolizedSample>,
    /// Stack ids missing at drain time (counted as lost).
    pub missing_stacks: u64,
    /// Distinct (thread, stack) keys drained: the counts map's fill.
    pub keys: usize,
}

/// The sampler and the symbolizer, stepped together.
#[derive(Debug)]
pub struct Pipeline {
    sampler: CpuSampler,
    symbolizer: Symbolizer,
}

impl Pipeline {
    /// Loads and attaches the sampler.
    pub fn start(options: SamplerOptions) -> Result<Self, CollectError> {
        let symbolizer = Symbolizer::new(SymbolizerOptions::default());
        let sampler = CpuSampler::start(options)?;
        Ok(Self {
            sampler,
            symbolizer,
        })
    }

    /// Reads mappings of new processes until `until` (or until `stop` is set),
    /// then drains and names what was sampled.
    pub fn step(&mut self, until: Instant, stop: &AtomicBool) -> Result<Batch, CollectError> {
        loop {
            for pid in self.sampler.new_processes()? {
                self.symbolizer.note_process(pid);
            }
            let now = Instant::now();
            if now >= until || stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(NEW_PROCESS_POLL.min(until - now));
        }
        let drain = self.sampler.drain()?;
        let keys = drain.samples.len();
        Ok(Batch {
            samples: self.symbolizer.symbolize(drain.samples),
            missing_stacks: drain.missing_stacks,
            keys,
        })
    }

    /// Cumulative BPF counters.
    pub fn counters(&self) -> Result<Counters, CollectError> {
        self.sampler.counters()
    }

    /// Cumulative symbolization misses.
    pub fn misses(&self) -> Misses {
        self.symbolizer.misses()
    }

    /// The sampler (CPUs, options).
    pub fn sampler(&self) -> &CpuSampler {
        &self.sampler
    }
}
