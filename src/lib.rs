//! emberd: an always-on sampling profiler for one Linux host.
#![deny(missing_docs)]

pub mod bpf;
pub mod check;
pub mod clock;
pub mod collect;
pub mod compare;
pub mod config;
pub mod daemon;
pub mod footprint;
pub mod metrics;
pub mod pipeline;
pub mod profile;
pub mod query;
pub mod record;
pub mod render;
pub mod serve;
pub mod store;
pub mod symbolize;
pub mod unwind;
pub mod view;

/// Entry points for the fuzz targets under `fuzz/` into readers whose parts
/// are private, and a small ELF writer for them and for tests. Not an
/// interface: it changes with them.
#[doc(hidden)]
pub mod fuzzing;
