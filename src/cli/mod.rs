//! The command line: one module per subcommand (the daemon is `emberd`
//! without one). `src/main.rs` parses the arguments and calls these.

pub mod check;
pub mod daemon;
pub mod diff;
pub mod flamegraph;
pub mod jvm;
pub mod launch;
pub mod login;
pub mod record;
pub mod unwind_tables;
