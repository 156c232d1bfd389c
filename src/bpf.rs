//! The generated BPF skeleton and the raw layouts it shares with `bpf/emberd.h`.
//!
//! Only raw-layout code lives here; turning map contents into domain types is
//! `collect`'s job.
#![allow(missing_docs, clippy::all, unreachable_pub)]

/// The skeleton of `bpf/profile.bpf.c`.
pub mod profile {
    include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
}

pub use profile::types;

// SAFETY: `sample_key` is a C struct of integers and a byte array, with no
// padding-dependent invariants: any byte pattern is a valid value.
unsafe impl plain::Plain for types::sample_key {}

// Pin the shared layouts: a change to emberd.h must be mirrored here.
const _: () = assert!(std::mem::size_of::<types::sample_key>() == 48);
const _: () = assert!(std::mem::size_of::<types::stored_stack>() == 32 + 128 * 8);

/// The skeleton of `bpf/events.bpf.c`.
pub mod events {
    include!(concat!(env!("OUT_DIR"), "/events.skel.rs"));
}

// SAFETY: `event_key` is a C struct of integers and byte arrays: any byte
// pattern is a valid value.
unsafe impl plain::Plain for events::types::event_key {}

const _: () = assert!(std::mem::size_of::<events::types::event_key>() == 104);
