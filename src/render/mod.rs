//! Render: profiles out as folded text and SVG flame graphs.

pub mod flamegraph;
pub mod folded;
pub mod pprof;
