//! emberd: an always-on sampling profiler for one Linux host.
#![deny(missing_docs)]

pub mod bpf;
pub mod cli;
pub mod collect;
pub mod daemon;
pub mod export;
pub mod query;
pub mod render;
pub mod runtime;
pub mod serve;
pub mod shared;
pub mod store;
pub mod symbolize;
pub mod unwind;

// Paths the tests and fuzz targets use, from before these modules moved
// into their stages.
pub use query::columns as compare;
pub use query::profile;
pub use render::view;

/// Entry points for the fuzz targets under `fuzz/` into readers whose parts
/// are private, and a small ELF writer for them and for tests. Not an
/// interface: it changes with them.
#[doc(hidden)]
pub mod fuzzing;
