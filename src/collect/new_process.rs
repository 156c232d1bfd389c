//! New-process notices (`new_tgids` in `bpf/new_process.h`): the programs
//! put a process's tgid in a ring buffer the first time they see it (and
//! after an exec), and the collector, waiting on that ring between drains,
//! reads the process's mappings while it still lives.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::{MapHandle, RingBuffer, RingBufferBuilder};

use super::{CollectError, Pid};

/// The notice rings of both BPF objects, read and waited on together.
pub struct NewProcessRing {
    ring: RingBuffer<'static>,
    /// Each object's `seen_tgids`: a process deleted there is noticed
    /// again.
    seen: Vec<MapHandle>,
    pids: Rc<RefCell<Vec<Pid>>>,
    /// Set by an `EMBERD_DRAIN_NOW` notice: the events' counts buffer is
    /// half full.
    drain: Rc<std::cell::Cell<bool>>,
}

/// `EMBERD_DRAIN_NOW` in `bpf/emberd.h`: a notice that is no process.
const DRAIN_NOW: u32 = u32::MAX;

impl std::fmt::Debug for NewProcessRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewProcessRing").finish_non_exhaustive()
    }
}

fn drain_error(source: libbpf_rs::Error) -> CollectError {
    CollectError::Drain {
        map: "new_tgids",
        source,
    }
}

impl NewProcessRing {
    /// A reader of the rings `maps` (from [`super::CpuSampler::new_tgids`]
    /// and [`super::events::EventSampler::new_tgids`]), with the objects'
    /// `seen_tgids` maps `seen`.
    pub fn new(maps: Vec<MapHandle>, seen: Vec<MapHandle>) -> Result<Self, CollectError> {
        let pids = Rc::new(RefCell::new(Vec::new()));
        let drain = Rc::new(std::cell::Cell::new(false));
        let mut builder = RingBufferBuilder::new();
        for map in maps {
            // The ring reader borrows its maps for its whole life, which is
            // the collector's: the handles (a few bytes each) are leaked.
            let map: &'static MapHandle = Box::leak(Box::new(map));
            let sink = pids.clone();
            let drain = drain.clone();
            builder
                .add(map, move |data: &[u8]| {
                    if let Some(b) = data.get(..4) {
                        match u32::from_ne_bytes(b.try_into().expect("4 bytes")) {
                            DRAIN_NOW => drain.set(true),
                            tgid => sink.borrow_mut().push(Pid(tgid)),
                        }
                    }
                    0
                })
                .map_err(drain_error)?;
        }
        Ok(Self {
            ring: builder.build().map_err(drain_error)?,
            seen,
            pids,
            drain,
        })
    }

    /// Processes noticed since the last call, without waiting.
    pub fn take(&self) -> Result<Vec<Pid>, CollectError> {
        self.ring.consume().map_err(drain_error)?;
        Ok(std::mem::take(&mut *self.pids.borrow_mut()))
    }

    /// Whether the events programs asked for a drain since the last call
    /// (their counts buffer is half full); clears the request.
    pub fn take_drain_request(&self) -> bool {
        self.drain.replace(false)
    }

    /// Whether a drain was asked for and not yet taken.
    pub fn drain_requested(&self) -> bool {
        self.drain.get()
    }

    /// Forgets that process `pid` was noticed: its next sample or event
    /// notices it again (one the agent could not read in its turn).
    pub fn forget(&self, pid: Pid) {
        use libbpf_rs::MapCore;
        for map in &self.seen {
            let _ = map.delete(&pid.0.to_ne_bytes());
        }
    }

    /// Whether notices are waiting to be taken.
    pub fn pending(&self) -> bool {
        !self.pids.borrow().is_empty()
    }

    /// Waits up to `timeout` for a notice (returns at once if one is
    /// waiting); [`NewProcessRing::take`] then reads them.
    pub fn wait(&self, timeout: Duration) -> Result<(), CollectError> {
        // poll() also consumes what arrived; take() hands it out. A signal
        // only ends the wait early.
        match self.ring.poll(timeout) {
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => Ok(()),
            r => r.map_err(drain_error),
        }
    }
}
