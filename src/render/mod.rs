//! Render: profiles out as folded text, SVG flame graphs (inferno),
//! differential flame graphs and animations (drawn here), and pprof.

pub mod animation;
pub mod diff;
pub mod flamegraph;
pub mod folded;
pub mod pprof;
pub mod tree;
