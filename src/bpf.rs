//! The generated BPF skeleton and the raw layouts it shares with `bpf/emberd.h`.
//!
//! Only raw-layout code lives here; turning map contents into domain types is
//! `collect`'s job.
#![allow(missing_docs, clippy::all, unreachable_pub)]

/// The enumerators of every enum in `bpf/emberd.h`, as `u32` constants
/// made by `build.rs`: the agent's indices, ids and reasons are the C
/// list's own. A Rust enum that mirrors one takes its discriminants from
/// here and checks its length with [`check_c_enum`], so an enumerator added,
/// removed or moved in C fails the build, naming the pair.
pub mod enums {
    include!(concat!(env!("OUT_DIR"), "/bpf_enums.rs"));
}

/// Fails the build unless `$ty::ALL` holds every value of a C enum, in
/// order: `ALL[i] as u32 == i` and `ALL.len() == $max` (its `*_MAX`).
#[macro_export]
#[doc(hidden)]
macro_rules! check_c_enum {
    ($ty:ty, $max:expr) => {
        const _: () = {
            let all = <$ty>::ALL;
            assert!(
                all.len() == $max as usize,
                concat!(
                    stringify!($ty),
                    "::ALL and its enum in bpf/emberd.h differ in length: add or remove the variant on both sides"
                )
            );
            let mut i = 0;
            while i < all.len() {
                assert!(
                    all[i] as usize == i,
                    concat!(stringify!($ty), "::ALL is not in the order of its enum in bpf/emberd.h")
                );
                i += 1;
            }
        };
    };
}
pub use check_c_enum;

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
