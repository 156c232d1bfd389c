//! The words every stage shares: process and thread ids, named frames, the
//! hash maps, the clock. It imports no stage; every stage may import it.

pub mod accounts;
pub mod clock;
pub mod elf;
pub mod events;
pub mod frame;
pub mod hash;
pub mod heartbeat;
pub mod ids;
pub mod metrics;
pub mod peer;
pub mod procmaps;
pub mod reads;
pub mod secret;
pub mod workload;

pub use frame::{Frame, FrameKind, Module};
pub(crate) use hash::{FastMap, FastSet};
pub use ids::{Pid, Tid};
pub use secret::Secret;
pub use workload::Workload;
