//! Differential flame graphs: two windows in one SVG, both directions.
//!
//! The upper graph is flamegraph.pl's diff2: widths are the *after* window,
//! colour is what changed since *before* (red grew, blue shrank, saturation
//! by the frame's own change, as difffolded.pl + flamegraph.pl colour).
//! Frames new in after are outlined. The lower graph is diff1: widths are
//! the *before* window, coloured the same way, so code paths that vanished
//! are there, hatched. That answers the ACM article's complaint about red/blue
//! graphs (a path that is gone has nothing to colour) in the default view,
//! in the spirit of its white/black differential: what is missing after is
//! its own visible region, under the graph of what is there now.
//!
//! Hovering a frame shows before, after, the delta and the delta as a share
//! of the total, and highlights the same frame in the other graph.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::tree::{
    FRAME_H, FrameTree, PAD, READABLE_PX, SCREEN_H, cut_depth, deeper_label, escape, fit_label,
};
use crate::query::columns::Diff;

/// What a differential SVG says and how it is drawn.
#[derive(Debug, Clone)]
pub struct DiffSvgOptions {
    /// Title (names the event and both windows).
    pub title: String,
    /// Lines under the title (normalization, notes).
    pub notes: Vec<String>,
    /// What values count ("samples", "ms").
    pub count_name: String,
    /// Multiplies values for display (0.001: us shown as ms).
    pub factor: f64,
    /// Image width in pixels (default 1200).
    pub width: f64,
    /// Frames narrower than this in both graphs are left out (default 0.1).
    pub min_width: f64,
    /// Depth where towers are cut (0: none), instead of
    /// [`super::tree::cut_depth`]'s rule.
    pub max_depth: Option<usize>,
    /// Swap the colours: blue for growth, red for reduction.
    pub negate: bool,
    /// Label of the before window.
    pub before: String,
    /// Label of the after window.
    pub after: String,
}

impl DiffSvgOptions {
    /// Defaults with a title and unit.
    pub fn new(title: impl Into<String>, count_name: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            notes: Vec::new(),
            count_name: count_name.into(),
            factor: 1.0,
            width: 1200.0,
            min_width: 0.1,
            max_depth: None,
            negate: false,
            before: "before".into(),
            after: "after".into(),
        }
    }
}

/// flamegraph.pl's red/blue scale: white at 0, full red (or blue) at `max`.
fn delta_color(delta: i128, max: i128, negate: bool) -> String {
    if delta == 0 || max == 0 {
        return "rgb(250,250,250)".into();
    }
    let d = if negate { -delta } else { delta };
    let fade = (210.0 * (max - d.abs()) as f64 / max as f64).clamp(0.0, 210.0) as u8;
    if d > 0 {
        format!("rgb(255,{fade},{fade})")
    } else {
        format!("rgb({fade},{fade},255)")
    }
}

fn fmt_value(v: f64) -> String {
    if v.fract().abs() < 1e-9 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

/// The differential SVG's style sheet, written into each SVG as it is.
const STYLE: &str = include_str!("assets/diff.css");

/// The differential SVG's script: hover details and highlighting of the
/// same frame in the other graph, `[deeper]` frames that open the towers
/// cut, the after graph's root on screen. It reads what it needs from the
/// document (`data-after-root`, `data-grow`, the frames' `data-n`), so its
/// text is the same in every SVG.
const SCRIPT: &str = include_str!("assets/diff.js");

/// Writes the differential SVG of `diff`: colours and deltas from its
/// (normalized) series, the before graph's widths from the values recorded.
/// Returns the stacks cut short at [`super::tree::MAX_TREE_NODES`].
pub fn write<W: Write>(diff: &Diff, opts: &DiffSvgOptions, mut w: W) -> io::Result<usize> {
    let (svg, cut) = render(diff, opts);
    w.write_all(svg.as_bytes())?;
    w.flush()?;
    Ok(cut)
}

/// Where everything goes: what [`render`]'s pieces share. Graph (column)
/// 1 is after, 0 before.
struct Layout<'a> {
    tree: FrameTree<'a>,
    /// Whether the before values were scaled (the recorded ones ride along
    /// as column 2).
    normalized: bool,
    /// The column of the recorded before values: the before graph's widths.
    before_col: usize,
    /// After's total, and before's as recorded.
    ta: u64,
    tb_raw: u64,
    /// Pixels per unit in the before and after graphs.
    scale: [f64; 2],
    min_width: f64,
    /// The frames kept (wide enough in either graph).
    visible: Vec<bool>,
    /// The deepest kept frame's depth.
    depth: usize,
    /// The largest change of a frame's own value: full colour.
    max_delta: i128,
    /// The deepest frame drawn under each frame, per graph.
    deepest: [Vec<usize>; 2],
    /// The depth where towers are cut, if they are.
    cut: Option<usize>,
    header_h: f64,
    after_top: f64,
    before_top: f64,
    /// Height of each graph as first shown.
    graph_h: f64,
    height: f64,
}

impl<'a> Layout<'a> {
    fn new(diff: &'a Diff, opts: &DiffSvgOptions) -> Self {
        let series = &diff.series;
        assert_eq!(series.columns(), 2, "a differential has two columns");
        // The values as recorded, if normalized, ride along as column 2:
        // the before graph's geometry, from the same nodes.
        let raw: Vec<&[u64]> = diff.raw.iter().map(Vec::as_slice).collect();
        let tree = FrameTree::build_with(series, &raw);
        let normalized = !raw.is_empty();
        let before_col = if normalized { 2 } else { 0 };
        let ta = tree.total(0)[1];
        let tb_raw = tree.total(0)[before_col];
        let inner = opts.width - 2.0 * PAD;
        let px = |t: u64| if t == 0 { 0.0 } else { inner / t as f64 };
        let scale = [px(tb_raw), px(ta)];
        // Kept if wide enough in either graph (a frame of the before graph
        // is as wide as its parent there or narrower, so this keeps
        // subtrees whole).
        let mut px_per_unit = vec![0.0; tree.columns()];
        px_per_unit[before_col] = scale[0];
        px_per_unit[1] = scale[1];
        let visible = tree.visible(&px_per_unit, opts.min_width);
        let depth = tree.max_depth(&visible);
        let max_delta = (0..tree.nodes.len())
            .map(|i| (tree.own(i)[1] as i128 - tree.own(i)[0] as i128).abs())
            .max()
            .unwrap_or(0);
        let header_h = 34.0 + 16.0 * opts.notes.len() as f64 + 22.0;
        let after_top = header_h + 20.0;
        let mut l = Self {
            tree,
            normalized,
            before_col,
            ta,
            tb_raw,
            scale,
            min_width: opts.min_width,
            visible,
            depth,
            max_delta,
            deepest: [Vec::new(), Vec::new()],
            cut: None,
            header_h,
            after_top,
            before_top: 0.0,
            graph_h: 0.0,
            height: 0.0,
        };
        let readable_depth = l.find_deepest();
        // The after graph's root on the first screen: as many rows as fit
        // under the header, unless readable frames go deeper.
        let rows = ((SCREEN_H - after_top - 8.0) / FRAME_H).floor() as usize;
        l.cut = cut_depth(depth, readable_depth, rows, opts.max_depth);
        l.graph_h = (l.cut.unwrap_or(depth) + 1) as f64 * FRAME_H;
        l.before_top = after_top + l.graph_h + 40.0;
        l.height = l.before_top + l.graph_h + 36.0;
        l
    }

    /// The column graph `col` is drawn from.
    fn geo(&self, col: usize) -> usize {
        if col == 0 { self.before_col } else { col }
    }

    /// How wide node `i` is in graph `col`.
    fn width_in(&self, i: usize, col: usize) -> f64 {
        self.tree.total(i)[self.geo(col)] as f64 * self.scale[col]
    }

    /// Whether node `i` is drawn in graph `col`.
    fn drawn_in(&self, i: usize, col: usize) -> bool {
        self.visible[i]
            && self.tree.total(i)[self.geo(col)] > 0
            && self.width_in(i, col) >= self.min_width
    }

    /// Sets the deepest node drawn in each node's subtree, per graph (nodes
    /// come after their parents, so one pass from the last); returns the
    /// deepest readable one.
    fn find_deepest(&mut self) -> usize {
        let n_nodes = self.tree.nodes.len();
        let mut deepest = [vec![0usize; n_nodes], vec![0usize; n_nodes]];
        let mut readable_depth = 0;
        for i in (0..n_nodes).rev() {
            let n = &self.tree.nodes[i];
            for (col, deepest) in deepest.iter_mut().enumerate() {
                if self.drawn_in(i, col) {
                    let d = deepest[i].max(n.depth);
                    deepest[i] = d;
                    if i > 0 {
                        deepest[n.parent] = deepest[n.parent].max(d);
                    }
                    if self.width_in(i, col) >= READABLE_PX {
                        readable_depth = readable_depth.max(n.depth);
                    }
                }
            }
        }
        self.deepest = deepest;
        readable_depth
    }

    /// What the script grows each graph by to show what was cut.
    fn grow(&self) -> f64 {
        self.cut.map_or(0.0, |c| (self.depth - c) as f64 * FRAME_H)
    }
}

/// The differential SVG [`write`] writes, as text (no copy for a caller that
/// keeps it), and the stacks cut short at [`super::tree::MAX_TREE_NODES`].
pub fn render(diff: &Diff, opts: &DiffSvgOptions) -> (String, usize) {
    let l = Layout::new(diff, opts);
    let drawn = l.visible.iter().filter(|v| **v).count();
    let mut s = String::with_capacity(4096 + drawn * 2 * 300);
    write_head(&mut s, &l, opts);
    let after = format!(
        "after ({}): widths are after, colour is the change since before",
        opts.after
    );
    write_graph(&mut s, &l, opts, 1, l.after_top, &after);
    let before = format!(
        "before ({}): widths are before, colour is the change to come; hatched paths are gone after",
        opts.before
    );
    write_graph(&mut s, &l, opts, 0, l.before_top, &before);
    let _ = write!(
        s,
        "<text id=\"details\" x=\"{PAD}\" y=\"{}\"> </text>\n\
         <script type=\"text/ecmascript\"><![CDATA[\n{SCRIPT}]]></script>\n</svg>\n",
        l.height - 12.0
    );
    (s, l.tree.cut_rows())
}

/// The document's start: its size, the values the script reads, the
/// hatching, the style, the title, notes and the legend.
fn write_head(s: &mut String, l: &Layout<'_>, opts: &DiffSvgOptions) {
    let _ = write!(
        s,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{w}" height="{height}" viewBox="0 0 {w} {height}" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" data-after-root="{after_root}" data-grow="{grow}">
<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="1.5" height="6" fill="rgba(0,0,40,0.5)"/></pattern></defs>
<style type="text/css">
{STYLE}</style>
<rect x="0" y="0" width="{w}" height="{height}" fill="rgb(248,248,248)"/>
<text class="title" x="{cx}" y="24">{title}</text>
"#,
        w = opts.width,
        height = l.height,
        cx = opts.width / 2.0,
        title = escape(&opts.title),
        after_root = l.after_top + l.graph_h,
        grow = l.grow(),
    );
    for (i, note) in opts.notes.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text class="note" x="{}" y="{}">{}</text>"#,
            opts.width / 2.0,
            44.0 + 16.0 * i as f64,
            escape(note)
        );
    }
    let (grow, shrink) = if opts.negate {
        ("blue", "red")
    } else {
        ("red", "blue")
    };
    let _ = writeln!(
        s,
        r#"<text class="note" x="{}" y="{}">{grow}: grew, {shrink}: shrank (by the frame's own {unit}); outlined: new in after; hatched: gone in after</text>"#,
        opts.width / 2.0,
        l.header_h - 4.0,
        unit = escape(&opts.count_name)
    );
}

/// Graph `col` (1 after, 0 before) under its heading `label`, its top at
/// `top`: a note instead if its window is empty.
fn write_graph(
    s: &mut String,
    l: &Layout<'_>,
    opts: &DiffSvgOptions,
    col: usize,
    top: f64,
    label: &str,
) {
    let _ = writeln!(
        s,
        r#"<g class="top" data-col="{col}"><text class="head" x="{PAD}" y="{}">{}</text>"#,
        top - 6.0,
        escape(label)
    );
    let gcol = l.geo(col);
    if l.tree.total(0)[gcol] == 0 {
        let _ = writeln!(
            s,
            r#"<text x="{PAD}" y="{}">no {} in this window: nothing to draw</text></g>"#,
            top + FRAME_H,
            escape(&opts.count_name)
        );
        return;
    }
    s.push_str("</g>\n");
    let starts = l.tree.starts(gcol);
    let bottom = top + l.graph_h;
    let _ = writeln!(s, r#"<g class="graph" data-col="{col}">"#);
    for (i, n) in l.tree.nodes.iter().enumerate() {
        let width_units = l.tree.total(i)[gcol];
        if !l.visible[i] || width_units == 0 {
            continue;
        }
        let x = PAD + starts[i] as f64 * l.scale[col];
        let wd = width_units as f64 * l.scale[col];
        if wd < opts.min_width {
            continue;
        }
        let y = bottom - (n.depth + 1) as f64 * FRAME_H;
        write_frame(s, l, opts, col, i, (x, wd, y));
    }
    s.push_str("</g>\n");
}

/// Node `i` in graph `col` at `(x, width, y)`: a `[deeper]` frame first if
/// it stands for a tower cut there, then the frame (hidden past the cut),
/// its title holding before, after and the delta.
fn write_frame(
    s: &mut String,
    l: &Layout<'_>,
    opts: &DiffSvgOptions,
    col: usize,
    i: usize,
    (x, wd, y): (f64, f64, f64),
) {
    let n = &l.tree.nodes[i];
    let own_delta = l.tree.own(i)[1] as i128 - l.tree.own(i)[0] as i128;
    let fill = delta_color(own_delta, l.max_delta, opts.negate);
    // From what was recorded, not from normalized values: a path whose
    // before values truncate to 0 is not new.
    let class = if col == 1 && n.present & 1 == 0 && i != 0 {
        "f new"
    } else if col == 0 && n.present & 2 == 0 {
        "f gone"
    } else {
        "f"
    };
    // Past the cut, hidden (placed as in the uncut graph, above its top);
    // at the cut, a [deeper] frame stands in for a tower.
    let hidden = match l.cut {
        Some(c) if n.depth > c => true,
        Some(c) if n.depth == c && l.deepest[col][i] > c => {
            write_deeper(s, n.name, i, l.deepest[col][i] - c + 1, (x, wd, y));
            true
        }
        _ => false,
    };
    let class = match (hidden, class) {
        (false, class) => class,
        (true, "f new") => "f new hide deep",
        (true, "f gone") => "f gone hide deep",
        (true, _) => "f hide deep",
    };
    let _ = write!(s, r#"<g class="{class}" data-n="{i}"><title>"#);
    push_title(s, l, opts, i);
    let _ = write!(
        s,
        r#"</title><rect class="b" x="{x:.1}" y="{y:.1}" width="{wd:.1}" height="{h}" fill="{fill}"/>"#,
        h = FRAME_H - 1.0,
    );
    if class.starts_with("f gone") {
        let _ = write!(
            s,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{wd:.1}" height="{h}" fill="url(#hatch)" pointer-events="none"/>"#,
            h = FRAME_H - 1.0
        );
    }
    let label = fit_label(n.name, wd);
    // Dark fills (strong changes) get white labels.
    let strong = l.max_delta > 0 && own_delta.abs() * 2 > l.max_delta;
    if !label.is_empty() {
        let _ = write!(
            s,
            r#"<text{} x="{:.1}" y="{:.1}">{}</text>"#,
            if strong { r#" class="inv""# } else { "" },
            x + 3.0,
            y + 11.5,
            escape(&label)
        );
    }
    s.push_str("</g>\n");
}

/// Node `i`'s title: its name, then before (as recorded, and normalized
/// if it was), after and the delta, each with its share of its total.
fn push_title(s: &mut String, l: &Layout<'_>, opts: &DiffSvgOptions, i: usize) {
    let (b, a) = (l.tree.total(i)[0], l.tree.total(i)[1]);
    let b_raw = l.tree.total(i)[l.before_col];
    let delta = a as i128 - b as i128;
    let pct = |v: u64, t: u64| {
        if t == 0 {
            0.0
        } else {
            100.0 * v as f64 / t as f64
        }
    };
    let share = if l.ta == 0 {
        0.0
    } else {
        100.0 * delta as f64 / l.ta as f64
    };
    let f = opts.factor;
    let _ = write!(
        s,
        "{name}\nbefore: {bv} {u} ({bp:.2}%){norm}\nafter: {av} {u} ({ap:.2}%)\n\
         delta: {sign}{dv} {u} ({sign}{share:.2}% of the total)",
        name = escape(l.tree.nodes[i].name),
        bv = fmt_value(b_raw as f64 * f),
        norm = if l.normalized {
            format!(", normalized {}", fmt_value(b as f64 * f))
        } else {
            String::new()
        },
        av = fmt_value(a as f64 * f),
        bp = pct(b_raw, l.tb_raw),
        ap = pct(a, l.ta),
        sign = if delta >= 0 { "+" } else { "" },
        dv = fmt_value(delta as f64 * f),
        u = escape(&opts.count_name),
    );
}

/// The `[deeper: N frames]` frame standing for node `i` (named `under`)
/// and the `levels` cut under it, at `(x, width, y)`.
fn write_deeper(s: &mut String, under: &str, i: usize, levels: usize, (x, wd, y): (f64, f64, f64)) {
    let name = deeper_label(levels);
    let mut label = fit_label(&name, wd);
    if label.ends_with("..") {
        label = fit_label(&format!("+{levels}"), wd);
        if label.ends_with("..") {
            label.clear();
        }
    }
    let _ = writeln!(
        s,
        r#"<g class="f deeper" data-n="{i}"><title>{name}
under {under}: click to show every frame</title><rect class="b" x="{x:.1}" y="{y:.1}" width="{wd:.1}" height="{h}" fill="rgb(228,228,228)"/><text x="{:.1}" y="{:.1}">{label}</text></g>"#,
        x + 3.0,
        y + 11.5,
        under = escape(under),
        h = FRAME_H - 1.0,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::columns::Rewrite;
    use crate::query::profile::{Profile, test_profile as profile};
    use crate::render::tree::SCREEN_H;

    fn svg_of(before: &Profile, after: &Profile, normalize: bool) -> String {
        let d = Diff::new(before, after, Rewrite::default(), Some(normalize), false);
        let mut out = Vec::new();
        write(&d, &DiffSvgOptions::new("t", "samples"), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn both_graphs_new_and_gone_frames() {
        let svg = svg_of(
            &profile(&[("main;phase_one", 90), ("main;common", 10)]),
            &profile(&[("main;phase_two", 90), ("main;common", 10)]),
            false,
        );
        // phase_two: new in after, red; phase_one: gone, in the before graph, blue and hatched.
        let two = svg.find("<g class=\"f new\" data-n=").expect("a new frame");
        assert!(svg[two..two + 400].contains("phase_two"));
        assert!(svg[two..two + 400].contains("fill=\"rgb(255,0,0)\""));
        let one = svg.find("<g class=\"f gone\"").expect("a gone frame");
        assert!(svg[one..one + 400].contains("phase_one"));
        assert!(svg[one..one + 400].contains("fill=\"rgb(0,0,255)\""));
        assert!(svg[one..one + 600].contains("url(#hatch)"));
        assert!(svg.contains("delta: -90 samples (-90.00% of the total)"));
    }

    #[test]
    fn normalization_hides_no_vanished_path() {
        // Before is 100 times after: scaled, `rare` truncates to 0, yet it
        // was recorded before and is gone after: drawn, hatched, from the
        // values recorded; `kept` is not "new" in after.
        let svg = svg_of(
            &profile(&[("main;busy", 9_900), ("main;rare", 60), ("main;kept", 40)]),
            &profile(&[("main;busy", 99), ("main;kept", 1)]),
            true,
        );
        let rare = svg
            .find("<title>rare\n")
            .expect("the vanished path is drawn");
        let g = svg[..rare].rfind("<g class=").unwrap();
        assert!(svg[g..rare].contains("f gone"), "{}", &svg[g..rare + 200]);
        assert!(svg[rare..rare + 200].contains("before: 60 samples (0.60%), normalized 0"));
        let kept = svg.find("<title>kept\n").unwrap();
        let g = svg[..kept].rfind("<g class=").unwrap();
        assert!(!svg[g..kept].contains("new"), "{}", &svg[g..kept + 200]);
    }

    #[test]
    fn empty_side_is_a_note() {
        let svg = svg_of(&Profile::new(), &profile(&[("a", 1)]), false);
        assert!(svg.contains("no samples in this window"));
    }

    #[test]
    fn thin_deep_towers_are_cut_and_the_after_root_fits_a_screen() {
        let mut deep = String::from("rare");
        for _ in 0..130 {
            deep.push_str(";descend");
        }
        let before = profile(&[("main;hot_a", 7000), (deep.as_str(), 2)]);
        let after = profile(&[("main;hot_a", 6000), (deep.as_str(), 1)]);
        let svg = svg_of(&before, &after, false);
        let attr = |name: &str| -> f64 {
            let i = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            svg[i..i + svg[i..].find('"').unwrap()].parse().unwrap()
        };
        // The after graph's root within one screen, under the header.
        assert!(
            attr("data-after-root") <= SCREEN_H - 8.0,
            "{}",
            attr("data-after-root")
        );
        // A [deeper] frame in each graph; the tower's frames all there, those
        // past the cut hidden.
        assert_eq!(svg.matches("<g class=\"f deeper\"").count(), 2);
        assert!(svg.contains("under descend: click to show every frame"));
        assert_eq!(svg.matches("<title>descend\n").count(), 2 * 130);
        let hidden = svg.matches(" hide deep\" data-n=").count();
        let cut = svg.matches("<title>[deeper: ").count();
        assert_eq!(cut, 2);
        // The script grows each graph by what was cut.
        // No notes: the header is 56 px, the after graph 20 below it.
        let shown_rows = (attr("data-after-root") - 56.0 - 20.0) / 16.0;
        assert_eq!(attr("data-grow"), (131.0 - (shown_rows - 1.0)) * 16.0);
        assert_eq!(hidden, 2 * (131 - (shown_rows as usize - 1) + 1));

        // A readable tower is not cut.
        let before = profile(&[(deep.as_str(), 7000)]);
        let after = profile(&[(deep.as_str(), 6000), ("main", 10)]);
        let svg = svg_of(&before, &after, false);
        assert!(!svg.contains("<title>[deeper: "));
    }
}
