//! Interactive SVG flame graphs, as flamegraph.pl draws them: one box per
//! frame under one path of callers, as wide as its share of the samples,
//! children sorted by name; hover for details, click to zoom, Ctrl-F to
//! search.
//!
//! Written here rather than by inferno: an uncached 30 s graph of a busy
//! host spent 62% of its time in inferno, most of it formatting floats
//! (`{:.4}%` per coordinate) and building XML events, for what is a few
//! thousand lines of fixed shape. Here the tree comes laid out from
//! [`CallTree`] (which the daemon builds from interned ids, never making a
//! folded line), frames narrower than `min_width` are never visited, and
//! coordinates are written as integers of hundredths of a pixel.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::palette::{Palette, Rgb};
use super::tree::{
    FRAME_H, PAD, READABLE_PX, SCREEN_H, cut_depth, deeper_label, escape_into, label_cut,
};
use crate::query::calltree::{CallTree, Placed};
use crate::query::profile::Profile;

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
    /// Palette (default: `java`, which colours by emberd's suffixes).
    pub palette: Option<Palette>,
    /// Shade by the start of the function name (similar names, similar
    /// colours), as flamegraph.pl --hash.
    pub hash: bool,
    /// Icicle graph: root at the top.
    pub inverted: bool,
    /// Reverse each stack (leaf first), as flamegraph.pl --reverse.
    pub reverse: bool,
    /// Omit frames narrower than this many pixels (default 0.1).
    pub min_width: Option<f64>,
    /// Image width in pixels (default 1200).
    pub width: Option<usize>,
    /// Frame height in pixels, as flamegraph.pl's `--height` (default 16).
    pub frame_height: Option<u32>,
    /// Depth where towers are cut (0: none), instead of
    /// [`super::tree::cut_depth`]'s rule.
    pub max_depth: Option<usize>,
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
            frame_height: None,
            max_depth: None,
            factor: 1.0,
            cold_suffix: None,
        }
    }
}

/// Appends `v` hundredths as `int.frac` (two digits): coordinates without
/// float formatting, which was a fifth of a render.
fn push_fixed(s: &mut String, hundredths: u64) {
    push_u64(s, hundredths / 100);
    s.push('.');
    s.push(char::from(b'0' + (hundredths / 10 % 10) as u8));
    s.push(char::from(b'0' + (hundredths % 10) as u8));
}

/// Appends `v` in decimal, without the formatting machinery (a few
/// integers per frame, thousands of frames per graph).
fn push_u64(s: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&buf[i..]).expect("ASCII digits"));
}

fn hundredths(px: f64) -> u64 {
    (px * 100.0).round().max(0.0) as u64
}

/// Appends `v` with thousands separators.
fn push_count(s: &mut String, v: u64) {
    let start = s.len();
    push_u64(s, v);
    let digits = s.len() - start;
    // Commas from the left: after the first (digits % 3) digits, then
    // every three.
    let mut at = start + digits % 3;
    if at == start {
        at += 3;
    }
    while at < s.len() {
        s.insert(at, ',');
        at += 4;
    }
}

/// Appends a value scaled by `factor` for display: whole numbers with
/// separators, two decimals below 10.
fn push_value(s: &mut String, v: u64, factor: f64) {
    if factor == 1.0 {
        push_count(s, v);
        return;
    }
    let f = v as f64 * factor;
    if f >= 10.0 {
        push_count(s, f.round() as u64);
    } else {
        let _ = write!(s, "{f:.2}");
    }
}

/// Appends the label that fits `width_px` at 12 px Verdana (flamegraph.pl's
/// 0.59 em per character), cut with `..`; nothing if not three characters fit.
fn push_label(s: &mut String, name: &str, width_px: f64) {
    let (shown, cut) = label_cut(name, width_px);
    escape_into(s, shown);
    if cut {
        s.push_str("..");
    }
}

/// Writes `profile` as an interactive SVG. An empty profile gives a valid SVG
/// that says there was nothing to show.
pub fn write<W: Write>(profile: &Profile, options: &SvgOptions, w: W) -> io::Result<()> {
    write_tree(
        &CallTree::from_profile(profile, options.reverse),
        options,
        w,
    )
}

/// Appends `v` in decimal with its sign.
fn push_i64(s: &mut String, v: i64) {
    if v < 0 {
        s.push('-');
    }
    push_u64(s, v.unsigned_abs());
}

/// Appends the label of a `[deeper: N frames]` frame: its name if it fits,
/// else `+N` (the levels cut) if that fits, else nothing.
fn push_deeper_label(s: &mut String, name: &str, levels: usize, width_px: f64) {
    let (_, cut) = label_cut(name, width_px);
    if !cut {
        push_label(s, name, width_px);
        return;
    }
    let short = format!("+{levels}");
    let fits = ((width_px - 6.0) / (12.0 * 0.59)).floor();
    if fits >= short.len() as f64 {
        s.push_str(&short);
    }
}

/// Where everything goes: what [`write_tree`]'s pieces share.
struct Geometry {
    /// The root's value: the graph's full width.
    total: u64,
    /// Image width.
    width: f64,
    /// Frames narrower than this (pixels) are not drawn.
    min_width: f64,
    /// Pixels per unit of value.
    px_per: f64,
    /// Margin above and below the frames.
    top: f64,
    bottom: f64,
    /// Frame height.
    fh: f64,
    /// Image height as first shown.
    height: f64,
    /// The depth where thin towers are cut, if they are.
    cut: Option<u32>,
    /// Frames drawn.
    drawn: usize,
    /// Root at the top.
    inverted: bool,
}

impl Geometry {
    fn new(nodes: &[Placed<'_>], options: &SvgOptions) -> Self {
        let total = nodes[0].total;
        let width = options.width.unwrap_or(1200) as f64;
        let px_per = if total > 0 {
            (width - 2.0 * PAD) / total as f64
        } else {
            0.0
        };
        let top = if options.subtitle.is_some() {
            60.0
        } else {
            36.0
        };
        let bottom = 34.0;
        let fh = options.frame_height.map_or(FRAME_H, f64::from);
        let mut g = Self {
            total,
            width,
            min_width: options.min_width.unwrap_or(0.1),
            px_per,
            top,
            bottom,
            fh,
            height: 0.0,
            cut: None,
            drawn: 0,
            inverted: options.inverted,
        };
        let (mut max_depth, mut readable_depth) = (0, 0);
        let mut i = 0;
        while i < nodes.len() {
            let n = &nodes[i];
            if g.visible(n) {
                max_depth = max_depth.max(n.depth);
                if n.total as f64 * px_per >= READABLE_PX {
                    readable_depth = readable_depth.max(n.depth);
                }
                g.drawn += 1;
                i += 1;
            } else {
                i = n.end as usize;
            }
        }
        let rows = ((SCREEN_H - top - bottom) / fh).floor() as usize;
        g.cut = cut_depth(
            max_depth as usize,
            readable_depth as usize,
            rows,
            options.max_depth,
        )
        .map(|c| c as u32);
        let shown_depth = g.cut.unwrap_or(max_depth);
        g.height = (f64::from(shown_depth) + 1.0) * fh + top + bottom;
        g
    }

    /// Whether `n` is wide enough to draw.
    fn visible(&self, n: &Placed<'_>) -> bool {
        n.total as f64 * self.px_per >= self.min_width
    }

    /// The top of a frame at `depth`, in whole pixels (the frame height and
    /// margins are), written as integers. Frames past the cut are placed
    /// as an uncut graph would place them (above the top edge when the
    /// root is at the bottom): the script shows them by moving the frames
    /// down and growing the image.
    fn frame_y(&self, depth: u32) -> i64 {
        if self.inverted {
            (self.top + f64::from(depth) * self.fh) as i64
        } else {
            (self.height - self.bottom - (f64::from(depth) + 1.0) * self.fh) as i64
        }
    }
}

/// Writes `tree` as an interactive SVG, drawn as it is: `options.reverse`
/// applies when the tree is built ([`CallTree::from_profile`],
/// `view::call_tree`).
///
/// The graph is as tall as its deepest frame up to what one screen holds
/// ([`SCREEN_H`]), or as the deepest frame wide enough for a readable label
/// ([`READABLE_PX`]) if that is deeper: thin towers past that depth are cut
/// under a `[deeper: N frames]` frame, their frames kept in the document,
/// hidden, for a click (zoom) to show. See [`super::tree::cut_depth`].
pub fn write_tree<W: Write>(tree: &CallTree, options: &SvgOptions, mut w: W) -> io::Result<()> {
    let nodes = tree.layout();
    let g = Geometry::new(&nodes, options);
    // About 200 bytes a frame drawn, plus the script and header.
    let mut s = String::with_capacity(16 * 1024 + g.drawn * 200);
    let _ = write!(
        s,
        r##"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" data-inverted="{inv}">
<defs><linearGradient id="background" y1="0" y2="1" x1="0" x2="0"><stop stop-color="#eeeeee" offset="5%"/><stop stop-color="#eeeeb0" offset="95%"/></linearGradient></defs>
<style type="text/css">
{STYLE}</style>
<rect x="0" y="0" width="100%" height="100%" fill="url(#background)"/>
"##,
        width = g.width,
        height = g.height,
        inv = u8::from(options.inverted),
    );
    if g.total == 0 {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">no samples in this window</text>"#,
            g.width / 2.0,
            g.top + 20.0
        );
    }
    write_frames(&mut s, &nodes, &g, options);
    write_head_and_foot(&mut s, &g, options);
    s.push_str("<script type=\"text/ecmascript\"><![CDATA[\n");
    s.push_str(SCRIPT);
    s.push_str("]]></script>\n</svg>\n");
    w.write_all(s.as_bytes())?;
    w.flush()
}

/// The frames group: the values the script lays frames out with as its
/// attributes, then every frame wide enough, a `[deeper]` frame over each
/// tower cut.
fn write_frames(s: &mut String, nodes: &[Placed<'_>], g: &Geometry, options: &SvgOptions) {
    let _ = writeln!(
        s,
        r#"<g id="frames" data-total="{}" data-width="{}" data-pad="{PAD}" data-top="{}" data-bottom="{}">"#,
        g.total, g.width, g.top, g.bottom
    );
    let palette = options.palette.unwrap_or(Palette::Java);
    let mut i = 0;
    while i < nodes.len() && g.total > 0 {
        let n = nodes[i];
        if !g.visible(&n) {
            i = n.end as usize;
            continue;
        }
        let at = (
            PAD + n.start as f64 * g.px_per,
            n.total as f64 * g.px_per,
            g.frame_y(n.depth),
        );
        let hidden = match g.cut {
            Some(c) if n.depth > c => true,
            Some(c) if n.depth == c => match cut_levels(nodes, i, g, c) {
                Some(levels) => {
                    write_deeper(s, &n, levels, g.total, options, at);
                    true
                }
                None => false,
            },
            _ => false,
        };
        i += 1;
        let color = match options.cold_suffix {
            Some(suffix) if n.name.ends_with(suffix) => cold_color(n.name),
            _ if n.depth == 0 => Rgb {
                r: 250,
                g: 250,
                b: 200,
            },
            _ => palette.color(n.name, options.hash),
        };
        if hidden {
            s.push_str("<g class=\"hide deep\"><title>");
        } else {
            s.push_str("<g><title>");
        }
        escape_into(s, n.name);
        push_frame_tail(s, &n, g.total, options, at, color);
        push_label(s, n.name, at.1);
        s.push_str("</text></g>\n");
    }
    s.push_str("</g>\n");
}

/// The levels of the tower cut under node `i`, at the cut depth `c`: from
/// `c` to the deepest frame drawn under it, if that is past `c` (node `i`
/// then stands for the tower).
fn cut_levels(nodes: &[Placed<'_>], i: usize, g: &Geometry, c: u32) -> Option<usize> {
    let n = &nodes[i];
    let (mut deepest, mut j) = (n.depth, i + 1);
    while j < n.end as usize {
        if g.visible(&nodes[j]) {
            deepest = deepest.max(nodes[j].depth);
            j += 1;
        } else {
            j = nodes[j].end as usize;
        }
    }
    (deepest > c).then(|| (deepest - c + 1) as usize)
}

/// The `[deeper: N frames]` frame standing for `n` and the `levels` cut
/// under it, in its place.
fn write_deeper(
    s: &mut String,
    n: &Placed<'_>,
    levels: usize,
    total: u64,
    options: &SvgOptions,
    at: (f64, f64, i64),
) {
    let name = deeper_label(levels);
    s.push_str("<g class=\"deeper\"><title>");
    s.push_str(&name);
    let grey = Rgb {
        r: 228,
        g: 228,
        b: 228,
    };
    push_frame_tail(s, n, total, options, at, grey);
    push_deeper_label(s, &name, levels, at.1);
    s.push_str("</text></g>\n");
}

/// Title, buttons and details after the frames, drawn over them: the
/// script keeps them on screen (with a band behind them) when the graph
/// is taller than the window.
fn write_head_and_foot(s: &mut String, g: &Geometry, options: &SvgOptions) {
    let (width, height, bottom) = (g.width, g.height, g.bottom);
    let _ = write!(
        s,
        r#"<g id="head"><rect class="band hide" x="0" y="0" width="{width}" height="{band}"/>
<text id="title" x="{mid}" y="24">"#,
        band = g.top - 6.0,
        mid = width / 2.0,
    );
    escape_into(s, &options.title);
    s.push_str("</text>\n");
    if let Some(sub) = &options.subtitle {
        let _ = write!(s, r#"<text id="subtitle" x="{}" y="48">"#, width / 2.0);
        escape_into(s, sub);
        s.push_str("</text>\n");
    }
    let _ = write!(
        s,
        r#"<text id="unzoom" class="hide" x="{PAD}" y="24">Reset Zoom</text>
<text id="search" x="{}" y="24" text-anchor="end">Search</text>
</g>
<g id="foot"><rect class="band hide" x="0" y="{}" width="{width}" height="{bottom}"/>
<text id="details" x="{PAD}" y="{}"> </text>
<text id="matched" x="{}" y="{}" text-anchor="end"> </text>
</g>
"#,
        width - PAD,
        height - bottom,
        height - 17.0,
        width - PAD,
        height - 17.0,
    );
}

/// Appends a frame's title from its value on (after its name), its rect at
/// `(x, width, y)` in `color`, and its label's opening tag.
fn push_frame_tail(
    s: &mut String,
    n: &Placed<'_>,
    total: u64,
    options: &SvgOptions,
    (x, wd, y): (f64, f64, i64),
    color: Rgb,
) {
    s.push_str(" (");
    push_value(s, n.total, options.factor);
    s.push(' ');
    escape_into(s, &options.count_name);
    let pct = (u128::from(n.total) * 10_000 + u128::from(total) / 2) / u128::from(total);
    s.push_str(", ");
    push_fixed(s, pct as u64);
    s.push_str("%)</title><rect x=\"");
    push_fixed(s, hundredths(x));
    s.push_str("\" y=\"");
    push_i64(s, y);
    s.push_str("\" width=\"");
    push_fixed(s, hundredths(wd));
    s.push_str("\" height=\"");
    let fh = options.frame_height.map_or(FRAME_H as i64, i64::from);
    push_u64(s, (fh - 1).max(1) as u64);
    s.push_str("\" fill=\"rgb(");
    for (i, c) in [color.r, color.g, color.b].into_iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        push_u64(s, u64::from(c));
    }
    s.push_str(")\" data-x=\"");
    push_u64(s, n.start);
    s.push_str("\" data-w=\"");
    push_u64(s, n.total);
    s.push_str("\"/><text x=\"");
    push_fixed(s, hundredths(x + 3.0));
    s.push_str("\" y=\"");
    // The label's baseline 2.5 px below the frame's middle (y + 10.5 in a
    // 16 px frame), in halves: -29.5 is "-" then 29 then ".5".
    let t = y + fh / 2 + 2;
    if t < 0 {
        s.push('-');
        push_u64(s, (-t - 1) as u64);
    } else {
        push_u64(s, t as u64);
    }
    s.push_str(".5\">");
}

/// Shades of blue, stable per name, for off-CPU frames in hot/cold graphs.
fn cold_color(name: &str) -> Rgb {
    let h = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    Rgb {
        r: (h % 55) as u8,
        g: (80 + h % 80) as u8,
        b: (190 + h % 65) as u8,
    }
}

/// The flame graph's style sheet, written into each SVG as it is.
const STYLE: &str = include_str!("assets/flamegraph.css");

/// The flame graph's script, the same text in every SVG: it reads what it
/// needs from the document (the frames group's `data-total`, `data-width`,
/// `data-pad`, `data-top`, `data-bottom`; the root's `data-inverted`; each
/// frame's `data-x`, `data-w` and title).
///
/// Hover shows a frame's details at the bottom; a click zooms to it (its
/// callers stay, full width and faded; Reset Zoom undoes it) and shows its
/// callees past the cut, the image growing to hold them; a click on a
/// `[deeper: N frames]` frame zooms to the frame it stands for. Search (or
/// Ctrl-F) highlights the frames whose name matches a regular expression
/// (and the `[deeper]` frame over a hidden match), prints the share of
/// samples under them, each sample counted once, and scrolls to the widest
/// match if none is on screen. A graph taller than the window opens
/// scrolled to its root, the title, buttons and details kept on screen.
const SCRIPT: &str = include_str!("assets/flamegraph.js");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::profile::test_profile as profile;

    fn svg(p: &Profile, opts: &SvgOptions) -> String {
        let mut out = Vec::new();
        write(p, opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// (name, x, width, y) of every frame drawn.
    fn frames(svg: &str) -> Vec<(String, f64, f64, f64)> {
        let attr = |s: &str, a: &str| -> f64 {
            let i = s.find(&format!(" {a}=\"")).unwrap() + a.len() + 3;
            s[i..i + s[i..].find('"').unwrap()].parse().unwrap()
        };
        let at = svg.find("<g id=\"frames\"").unwrap();
        let frames = &svg[at..at + svg[at..].find("\n</g>").unwrap()];
        frames
            .split("<title>")
            .skip(1)
            .map(|g| {
                let title = &g[..g.find("</title>").unwrap()];
                let name = title[..title.rfind(" (").unwrap()].to_owned();
                let rect = &g[g.find("<rect").unwrap()..];
                (name, attr(rect, "x"), attr(rect, "width"), attr(rect, "y"))
            })
            .collect()
    }

    #[test]
    fn widths_follow_samples_and_subtrees_stay_whole() {
        // "a;b-x" sorts between "a;b" and "a;b;c" as text: b must still be
        // one frame holding both of its stacks.
        let p = profile(&[("a;b", 1), ("a;b-x", 2), ("a;b;c", 3), ("d", 4)]);
        let out = svg(&p, &SvgOptions::new("t<1>", "samples"));
        assert!(out.starts_with("<?xml") && out.trim_end().ends_with("</svg>"));
        assert!(out.contains("t&lt;1&gt;"), "title escaped");
        let f = frames(&out);
        let names: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["all", "a", "b", "c", "b-x", "d"]);
        let px = (1200.0 - 2.0 * PAD) / 10.0;
        let by = |n: &str| f.iter().find(|x| x.0 == n).unwrap().clone();
        assert!((by("a").2 - 6.0 * px).abs() < 0.01);
        assert!((by("b").2 - 4.0 * px).abs() < 0.01);
        assert!((by("d").1 - (PAD + 6.0 * px)).abs() < 0.01);
        // Root at the bottom, callees above their callers.
        assert!(by("all").3 > by("a").3 && by("a").3 > by("b").3 && by("b").3 > by("c").3);
        assert!(out.contains("b (4 samples, 40.00%)"));
        // Icicle: the root on top.
        let mut opts = SvgOptions::new("t", "samples");
        opts.inverted = true;
        let f = frames(&svg(&p, &opts));
        assert!(f[0].3 < f[1].3);
    }

    #[test]
    fn thin_frames_and_their_subtrees_are_left_out() {
        let p = profile(&[("a;hot", 100_000), ("a;thin;deeper", 1), ("z", 3)]);
        let f = frames(&svg(&p, &SvgOptions::new("t", "samples")));
        let names: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        // 1 of 100,004 samples is 0.012 px: under 0.1 px, gone with its
        // callees; 3 samples are 0.035 px, gone too.
        assert_eq!(names, ["all", "a", "hot"]);
        let mut opts = SvgOptions::new("t", "samples");
        opts.min_width = Some(0.0);
        assert_eq!(frames(&svg(&p, &opts)).len(), 6);
    }

    #[test]
    fn reverse_factor_and_empty() {
        let p = profile(&[("main;f;leaf", 1500)]);
        let mut opts = SvgOptions::new("t", "ms");
        opts.reverse = true;
        opts.factor = 0.001;
        let out = svg(&p, &opts);
        let names: Vec<String> = frames(&out).into_iter().map(|x| x.0).collect();
        assert_eq!(names, ["all", "leaf", "f", "main"]);
        assert!(out.contains("leaf (1.50 ms, 100.00%)"), "{out}");
        let empty = svg(&Profile::new(), &SvgOptions::new("t", "samples"));
        assert!(empty.contains("no samples in this window"));
        assert!(frames(&empty).is_empty());
    }

    /// flamegraph.pl's way: sort the lines frame by frame, then open and
    /// close frames along them in one pass.
    fn from_sorted_lines<'a>(lines: &[(&'a str, u64)]) -> Vec<Placed<'a>> {
        let mut lines = lines.to_vec();
        lines.sort_by(|a, b| a.0.split(';').cmp(b.0.split(';')));
        let placed = |name, depth, start| Placed {
            name,
            depth,
            start,
            total: 0,
            end: 0,
        };
        let mut nodes = vec![placed("all", 0, 0)];
        let mut path: Vec<usize> = vec![0];
        let mut x = 0;
        for (line, value) in lines {
            let frames: Vec<&str> = if line.is_empty() {
                Vec::new()
            } else {
                line.split(';').collect()
            };
            let common = path[1..]
                .iter()
                .zip(&frames)
                .take_while(|(n, f)| nodes[**n].name == **f)
                .count();
            while path.len() > common + 1 {
                let n = path.pop().unwrap();
                nodes[n].end = nodes.len() as u32;
            }
            for f in &frames[common..] {
                path.push(nodes.len());
                nodes.push(placed(f, path.len() as u32 - 1, x));
            }
            for &n in &path {
                nodes[n].total += value;
            }
            x += value;
        }
        while let Some(n) = path.pop() {
            nodes[n].end = nodes.len() as u32;
        }
        nodes
    }

    #[test]
    fn the_tree_is_laid_out_as_sorted_lines_are() {
        // "a;b-x" sorts between "a;b" and "a;b;c" as bytes; "a" is both a
        // line and a caller; "b" names frames at two depths.
        let lines = [
            ("a;b-x", 7),
            ("a;b;c", 3),
            ("a;b", 2),
            ("a", 1),
            ("b", 4),
            ("a;b;c;d", 5),
            ("a;b!;b", 6),
            ("c;a;b", 1),
        ];
        let p = profile(&lines);
        let tree = CallTree::from_profile(&p, false);
        assert_eq!(tree.layout(), from_sorted_lines(&lines));
    }

    #[test]
    fn labels_fit_their_frames() {
        let mut s = String::new();
        push_label(&mut s, "phase_two", 200.0);
        assert_eq!(s, "phase_two");
        s.clear();
        push_label(&mut s, "phase_<two>", 50.0);
        assert_eq!(s, "phas..");
        s.clear();
        push_label(&mut s, "phase_two", 10.0);
        assert_eq!(s, "");
        s.clear();
        for (v, text) in [
            (1_234_567, "1,234,567"),
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (123_456, "123,456"),
        ] {
            s.clear();
            push_count(&mut s, v);
            assert_eq!(s, text);
        }
        s.clear();
        push_u64(&mut s, 0);
        s.push(' ');
        push_u64(&mut s, u64::MAX);
        s.push(' ');
        push_fixed(&mut s, 1205);
        s.push(' ');
        push_fixed(&mut s, 7);
        assert_eq!(s, "0 18446744073709551615 12.05 0.07");
    }

    fn height(svg: &str) -> f64 {
        let i = svg.find(" height=\"").unwrap() + 9;
        svg[i..i + svg[i..].find('"').unwrap()].parse().unwrap()
    }

    /// `(class, name)` of each frame's group, in order.
    fn classes(svg: &str) -> Vec<(String, String)> {
        svg.split("\n<g")
            .filter_map(|g| {
                let g = g.strip_prefix(' ').unwrap_or(g);
                let rest = g.strip_prefix("><title>").map(|r| ("", r)).or_else(|| {
                    let g = g.strip_prefix("class=\"")?;
                    let q = g.find('"')?;
                    Some((&g[..q], g[q..].strip_prefix("\"><title>")?))
                })?;
                let title = &rest.1[..rest.1.find("</title>")?];
                Some((rest.0.to_owned(), title[..title.rfind(" (")?].to_owned()))
            })
            .collect()
    }

    fn deep_line(head: &str, levels: usize) -> String {
        let mut line = head.to_owned();
        for _ in 0..levels {
            line.push_str(";descend");
        }
        line
    }

    #[test]
    fn thin_deep_towers_are_cut_to_one_screen() {
        // One wide shallow tower and one sample 132 frames deep.
        let deep = deep_line("rare", 130);
        let p = profile(&[("main;outer;middle;innermost", 5000), (&deep, 1)]);
        let mut opts = SvgOptions::new("t", "samples");
        opts.subtitle = Some("s".into());
        let out = svg(&p, &opts);
        // Under the title and subtitle (60 px) and above the details (34),
        // 50 rows of 16 px: depths 0 to 49.
        assert_eq!(height(&out), 50.0 * 16.0 + 94.0);
        assert!(height(&out) <= SCREEN_H);
        let c = classes(&out);
        // rare is depth 1, descend depths 2..=131: cut at 49, 83 levels.
        let marker: Vec<_> = c.iter().filter(|x| x.0 == "deeper").collect();
        assert_eq!(marker.len(), 1, "{c:?}");
        assert_eq!(marker[0].1, "[deeper: 83 frames]");
        // Every frame of the tower is in the document; past the cut, hidden.
        assert_eq!(c.iter().filter(|x| x.1 == "descend").count(), 130);
        assert_eq!(c.iter().filter(|x| x.0 == "hide deep").count(), 83);
        let f = frames(&out);
        let (marker_y, root_y) = (
            f.iter().find(|x| x.0.starts_with("[deeper")).unwrap().3,
            f.iter().find(|x| x.0 == "all").unwrap().3,
        );
        assert_eq!(root_y - marker_y, 49.0 * 16.0);
        // The frame the marker stands for has its place, to be found by it.
        let same: Vec<_> = f.iter().filter(|x| x.3 == marker_y).collect();
        assert_eq!(same.len(), 2, "{same:?}");
        assert_eq!((same[0].1, same[0].2), (same[1].1, same[1].2));
        // Past the cut, frames lie above the image, as an uncut graph places
        // them relative to the root.
        let topmost = f.iter().map(|x| x.3).fold(f64::MAX, f64::min);
        assert_eq!(root_y - topmost, 131.0 * 16.0);
        assert!(topmost < 0.0);
        assert!(out.contains(&format!(" y=\"{}\">", topmost + 10.5)));

        // Icicle: the marker is the last row, under the root.
        opts.inverted = true;
        let out = svg(&p, &opts);
        assert_eq!(height(&out), 50.0 * 16.0 + 94.0);
        let f = frames(&out);
        let marker = f.iter().find(|x| x.0.starts_with("[deeper")).unwrap();
        assert_eq!(marker.3 - f[0].3, 49.0 * 16.0);

        // maxdepth: 0 cuts nothing, N cuts at depth N.
        opts.inverted = false;
        opts.max_depth = Some(0);
        let out = svg(&p, &opts);
        assert_eq!(height(&out), 132.0 * 16.0 + 94.0);
        assert!(!out.contains("[deeper:"));
        opts.max_depth = Some(10);
        let out = svg(&p, &opts);
        assert_eq!(height(&out), 11.0 * 16.0 + 94.0);
        assert!(out.contains("[deeper: 122 frames]"));
        opts.max_depth = None;

        // A minwidth that drops the thin tower leaves nothing to cut.
        opts.inverted = false;
        opts.min_width = Some(1.0);
        let out = svg(&p, &opts);
        assert_eq!(height(&out), 5.0 * 16.0 + 94.0);
        assert!(!out.contains("[deeper:"));
    }

    #[test]
    fn readable_frames_are_never_cut() {
        // A tower 132 deep holding half the samples: every frame is 590 px
        // wide, its labels readable; it sets the height.
        let deep = deep_line("wide", 130);
        let p = profile(&[(&deep, 1000), ("other", 1000)]);
        let out = svg(&p, &SvgOptions::new("t", "samples"));
        assert_eq!(height(&out), 132.0 * 16.0 + 70.0);
        assert!(!out.contains("[deeper:"));
        // In a graph 400 px wide the tower is 190 px, still readable; at
        // 100 px wide it is 40 px, thinner than a readable label: cut.
        let mut opts = SvgOptions::new("t", "samples");
        opts.width = Some(400);
        let out = svg(&p, &opts);
        assert!(out.contains("width=\"400\"") && !out.contains("[deeper:"));
        opts.width = Some(100);
        let out = svg(&p, &opts);
        assert!(out.contains("[deeper: 82 frames]"), "{}", height(&out));
        assert_eq!(height(&out), 51.0 * 16.0 + 70.0);
        // A readable tower deeper than a screen sets the cut for thinner
        // ones beside it: cut there, not at one screen.
        let wide = deep_line("w", 80);
        let thin = deep_line("t", 130);
        let p = profile(&[(&wide, 1000), (&thin, 1)]);
        let out = svg(&p, &SvgOptions::new("t", "samples"));
        assert_eq!(height(&out), 82.0 * 16.0 + 70.0);
        assert!(out.contains("[deeper: 51 frames]"));
    }

    #[test]
    fn frame_height_sets_rows_and_the_screen_they_fill() {
        // flamegraph.pl's --height: 24 px frames, labels in their middle;
        // one 900 px screen then holds 34 rows, so a thin tower is cut
        // there rather than at 51.
        let p = profile(&[("a;b;c", 10)]);
        let mut opts = SvgOptions::new("t", "samples");
        opts.frame_height = Some(24);
        let out = svg(&p, &opts);
        assert_eq!(height(&out), 4.0 * 24.0 + 70.0);
        assert!(
            out.contains(" height=\"23\" "),
            "rects one pixel short of a row"
        );
        let c = frames(&out).into_iter().find(|f| f.0 == "c").unwrap();
        assert!(out.contains(&format!(" y=\"{}.5\">c</text>", c.3 as i64 + 14)));
        let thin = deep_line("t", 130);
        let p = profile(&[("wide", 1000), (&thin, 1)]);
        let out = svg(&p, &opts);
        assert_eq!(height(&out), 34.0 * 24.0 + 70.0);
        assert!(out.contains("[deeper:"));
    }

    #[test]
    fn deeper_labels_shorten_to_the_levels_cut() {
        let mut s = String::new();
        push_deeper_label(&mut s, "[deeper: 83 frames]", 83, 200.0);
        assert_eq!(s, "[deeper: 83 frames]");
        s.clear();
        push_deeper_label(&mut s, "[deeper: 83 frames]", 83, 40.0);
        assert_eq!(s, "+83");
        s.clear();
        push_deeper_label(&mut s, "[deeper: 83 frames]", 83, 20.0);
        assert_eq!(s, "");
        s.clear();
        push_i64(&mut s, -40);
        s.push(' ');
        push_i64(&mut s, 7);
        assert_eq!(s, "-40 7");
    }
}
