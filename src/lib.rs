//! emberd: an always-on sampling profiler for one Linux host.
#![deny(missing_docs)]

pub mod bpf;
pub mod check;
pub mod collect;
pub mod profile;
pub mod store;
pub mod record;
pub mod render;
pub mod symbolize;
