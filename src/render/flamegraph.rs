//! Interactive SVG flame graphs, rendered by inferno.

use std::io::{self, Write};

use inferno::flamegraph::{self, Palette, color::MultiPalette};

use crate::profile::Profile;

/// What the SVG says about itself.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SvgOptions {
    /// The title, e.g. "CPU Flame Graph: host, 30 s at 99 Hz".
    pub title: String,
    /// A subtitle (window, sample counts), if any.
    pub subtitle: Option<String>,
    /// What a value counts ("samples").
    pub count_name: String,
    /// Palette (default: the Java multi-palette, which colours by suffix).
    pub palette: Option<Palette>,
    /// Colour by a hash of the function name (stable colours).
    pub hash: bool,
    /// Icicle graph: root at the top.
    pub inverted: bool,
    /// Reverse each stack (leaf first), as flamegraph.pl --reverse.
    pub reverse: bool,
    /// Omit frames narrower than this many pixels (default 0.1).
    pub min_width: Option<f64>,
    /// Image width in pixels (default 1200).
    pub width: Option<usize>,
    /// Multiplies values for display (e.g. 0.001 to show us as ms).
    pub factor: f64,
    /// Frames ending in this suffix are drawn in blues (hot/cold graphs).
    pub cold_suffix: Option<&'static str>,
}

impl SvgOptions {
    /// Options with a title and the unit of the values.
    pub fn new(title: impl Into<String>, count_name: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            subtitle: None,
            count_name: count_name.into(),
            palette: None,
            hash: false,
            inverted: false,
            reverse: false,
            min_width: None,
            width: None,
            factor: 1.0,
            cold_suffix: None,
        }
    }
}

/// Writes `profile` as an interactive SVG. An empty profile gives a valid SVG
/// that says there was nothing to show.
pub fn write<W: Write>(profile: &Profile, options: &SvgOptions, w: W) -> io::Result<()> {
    let mut opts = flamegraph::Options::default();
    opts.title = options.title.clone();
    opts.subtitle = options.subtitle.clone();
    opts.count_name = options.count_name.clone();
    // The Java multi-palette colours by the suffixes emberd writes: `_[k]`
    // kernel, `_[j]` JIT, `_[i]` inlined (as flamegraph.pl --colors=java).
    opts.colors = options
        .palette
        .unwrap_or(Palette::Multi(MultiPalette::Java));
    opts.deterministic = true;
    opts.hash = options.hash;
    if options.inverted {
        opts.direction = inferno::flamegraph::Direction::Inverted;
    }
    opts.reverse_stack_order = options.reverse;
    if let Some(w) = options.min_width {
        opts.min_width = w;
    }
    opts.image_width = options.width;
    opts.factor = options.factor;
    let mut cold_map = inferno::flamegraph::color::PaletteMap::default();
    if let Some(suffix) = options.cold_suffix {
        for (stack, _) in profile.sorted() {
            for f in stack.frames().filter(|f| f.ends_with(suffix)) {
                // Shades of blue, stable per name.
                let h = f
                    .bytes()
                    .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                let c = inferno::flamegraph::color::Color {
                    r: (h % 55) as u8,
                    g: (80 + h % 80) as u8,
                    b: (190 + h % 65) as u8,
                };
                cold_map.insert(f, c);
            }
        }
    }
    if options.cold_suffix.is_some() {
        opts.palette_map = Some(&mut cold_map);
    }
    if profile.is_empty() {
        // inferno refuses to render nothing; one labelled stack of zero width
        // is not possible either, so give a single frame that says why.
        let mut opts_empty = opts;
        opts_empty.count_name = options.count_name.clone();
        return flamegraph::from_lines(&mut opts_empty, ["[no samples in this window] 1"], w)
            .map_err(io::Error::other);
    }
    let lines: Vec<String> = profile
        .sorted()
        .into_iter()
        .map(|(s, v)| format!("{} {v}", s.as_str()))
        .collect();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w).map_err(io::Error::other)
}
