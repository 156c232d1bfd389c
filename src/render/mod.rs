//! Render: profiles out as folded text, SVG flame graphs, differential
//! flame graphs and animations, pprof, and JSON for the web page.

pub mod animation;
pub mod diff;
pub mod flamegraph;
pub mod folded;
pub mod json;
pub mod palette;
pub mod pprof;
pub mod tree;
pub mod view;
