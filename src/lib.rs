//! emberd: an always-on sampling profiler for one Linux host.
#![deny(missing_docs)]

pub mod bpf;
pub mod collect;
pub mod symbolize;
pub mod profile;
pub mod render;
pub mod check;
pub mod record;
