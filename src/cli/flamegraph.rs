//! `emberd flamegraph`: the flame graph of a folded file, as flamegraph.pl
//! draws one (`perf script | stackcollapse-perf.pl | flamegraph.pl`, or
//! another host's `/folded`), with flamegraph.pl's options.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::query::palette::Palette;
use crate::render::flamegraph::SvgOptions;

/// `emberd flamegraph`'s flags, named as flamegraph.pl names them.
#[derive(Debug, clap::Args)]
pub struct FlamegraphArgs {
    /// The folded file (`stack;frames value` per line); - reads stdin.
    pub input: PathBuf,
    /// Where to write the SVG; - (the default) is stdout.
    #[arg(long, short = 'o', default_value = "-")]
    pub output: PathBuf,
    /// Title (default: "Flame Graph").
    #[arg(long)]
    pub title: Option<String>,
    /// Second line under the title.
    #[arg(long)]
    pub subtitle: Option<String>,
    /// What a value counts (default: samples).
    #[arg(long, default_value = "samples")]
    pub countname: String,
    /// Image width in pixels.
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u64).range(100..=100_000))]
    pub width: u64,
    /// Frame height in pixels.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(4..=100))]
    pub height: u32,
    /// Omit frames narrower than this many pixels.
    #[arg(long, default_value_t = 0.1)]
    pub minwidth: f64,
    /// Palette: hot, mem, io, wakeup, red, green, blue, aqua, yellow,
    /// purple, orange, java, js, perl, python, rust (default: java, which
    /// colours kernel, JIT, Python and native frames apart).
    #[arg(long, value_parser = parse_palette)]
    pub colors: Option<Palette>,
    /// Shade by a hash of the function name (similar names, similar colours).
    #[arg(long)]
    pub hash: bool,
    /// Cut towers deeper than this under a `[deeper: N frames]` frame
    /// (click it to open them); 0 draws every frame. Default: as many rows
    /// as one 900 px screen holds, or the deepest frame wide enough to
    /// label.
    #[arg(long)]
    pub maxdepth: Option<usize>,
    /// Icicle graph: the root at the top.
    #[arg(long)]
    pub inverted: bool,
    /// Reverse each stack (leaf first), to merge by callee.
    #[arg(long)]
    pub reverse: bool,
}

fn parse_palette(s: &str) -> Result<Palette, String> {
    s.parse()
}

/// Reads the folded input and writes its flame graph.
pub fn run(args: FlamegraphArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.minwidth.is_finite() && args.minwidth >= 0.0,
        "--minwidth must be a number of pixels, 0 or more (got {})",
        args.minwidth
    );
    let profile = super::diff::read_folded_input(&args.input)?;
    if profile.is_empty() {
        eprintln!(
            "emberd: {}: no stacks: the graph says so",
            args.input.display()
        );
    }
    let mut opts = SvgOptions::new(
        args.title.unwrap_or_else(|| "Flame Graph".to_owned()),
        args.countname,
    );
    opts.subtitle = args.subtitle;
    opts.palette = args.colors;
    opts.hash = args.hash;
    opts.inverted = args.inverted;
    opts.reverse = args.reverse;
    opts.min_width = Some(args.minwidth);
    opts.width = Some(args.width as usize);
    opts.frame_height = Some(args.height);
    opts.max_depth = args.maxdepth;
    let mut out = Vec::new();
    crate::render::flamegraph::write(&profile, &opts, &mut out)
        .context("drawing the flame graph")?;
    super::diff::write_output(&args.output, &out)?;
    Ok(ExitCode::SUCCESS)
}
