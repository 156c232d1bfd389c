//! Flame graph animations: K phases of a window in one SVG, the frames moving
//! from one phase's flame graph to the next.
//!
//! The seed's animated flame graphs wrote every phase as a whole SVG flame
//! graph (22.5 MB for 5 phases). Here each frame is written once, with its
//! value in every phase (`data-v`); the script lays the phases out itself
//! (a frame's place follows from its parent and earlier siblings), so the
//! file grows by a few bytes per frame and phase. Frames narrower than
//! `min_width` in every phase are left out.
//!
//! Controls, the seed's "future work": play/pause, speed, step back and
//! forward, restart, a timeline to scrub, the phase's time range on screen,
//! and sizes relative to each phase's own total instead of the largest.
//! Frames growing into the next phase are outlined red, shrinking blue.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::tree::{
    FRAME_H, FrameTree, PAD, READABLE_PX, SCREEN_H, cut_depth, deeper_label, escape, fit_label,
    hot_color,
};
use crate::query::columns::Series;

/// What an animation says and how it is drawn.
#[derive(Debug, Clone)]
pub struct AnimationOptions {
    /// Title.
    pub title: String,
    /// Line under the title.
    pub subtitle: Option<String>,
    /// One label per phase (its time range).
    pub phases: Vec<String>,
    /// What values count.
    pub count_name: String,
    /// Multiplies values for display.
    pub factor: f64,
    /// Image width in pixels (default 1200).
    pub width: f64,
    /// Frames narrower than this in every phase are left out (default 0.3).
    pub min_width: f64,
    /// Start with each phase sized relative to its own total.
    pub relative: bool,
    /// Depth where towers are cut (0: none), instead of
    /// [`super::tree::cut_depth`]'s rule.
    pub max_depth: Option<usize>,
}

impl AnimationOptions {
    /// Defaults with a title, phase labels and unit.
    pub fn new(
        title: impl Into<String>,
        phases: Vec<String>,
        count_name: impl Into<String>,
    ) -> Self {
        Self {
            title: title.into(),
            subtitle: None,
            phases,
            count_name: count_name.into(),
            factor: 1.0,
            width: 1200.0,
            min_width: 0.3,
            relative: false,
            max_depth: None,
        }
    }
}

/// The animation's style sheet, written into each SVG as it is.
const STYLE: &str = include_str!("assets/animation.css");

/// The animation's script: it lays each phase out from the frames' values
/// (`data-v`, `data-g`), moves between phases, and runs the controls. It
/// reads every value it needs from the document (the frames group's
/// `data-pad`, `data-inner`, `data-factor`, `data-unit`; the track's
/// place; one `data-phase` tick per phase), escaped there as any
/// attribute, so its text is the same in every SVG: nothing a title, unit
/// or phase label holds can end up in code.
const SCRIPT: &str = include_str!("assets/animation.js");

/// The label of a frame standing for `levels` cut levels: `name`
/// (`[deeper: N frames]`) if it fits `width_px`, else `+N` if that fits.
fn deeper_fit(name: &str, levels: usize, width_px: f64) -> String {
    let label = fit_label(name, width_px);
    if !label.ends_with("..") {
        return label;
    }
    let short = format!("+{levels}");
    let label = fit_label(&short, width_px);
    if label.ends_with("..") {
        String::new()
    } else {
        label
    }
}

/// Writes the animated SVG of `series` (one column per phase). Returns the
/// stacks cut short at [`super::tree::MAX_TREE_NODES`].
pub fn write<W: Write>(series: &Series, opts: &AnimationOptions, mut w: W) -> io::Result<usize> {
    let (svg, cut) = render(series, opts);
    w.write_all(svg.as_bytes())?;
    w.flush()?;
    Ok(cut)
}

/// Where everything goes: what [`render`]'s pieces share.
struct Layout<'a> {
    tree: FrameTree<'a>,
    /// Phases (at least one).
    k: usize,
    /// Width of the graph between the margins.
    inner: f64,
    /// The frames kept (wide enough in some phase).
    visible: Vec<bool>,
    /// The deepest kept frame under each frame.
    deepest: Vec<usize>,
    /// The deepest kept frame's depth.
    depth: usize,
    /// The depth where towers are cut, if they are.
    cut: Option<usize>,
    /// Top of the graph, under the title and controls.
    top: f64,
    /// Bottom of the graph: the root's row ends there.
    bottom: f64,
    height: f64,
    /// Pixels per unit of the first phase as first drawn.
    first: f64,
}

impl<'a> Layout<'a> {
    fn new(series: &'a Series, opts: &AnimationOptions) -> Self {
        let k = series.columns().max(1);
        let tree = FrameTree::build(series);
        let totals = tree.total(0).to_vec();
        let max_total = totals.iter().copied().max().unwrap_or(0);
        let inner = opts.width - 2.0 * PAD;
        // A frame is kept if it is wide enough in some phase at that
        // phase's own scale (the wider of the two scales the viewer can pick).
        let rel_scale: Vec<f64> = totals
            .iter()
            .map(|&t| if t == 0 { 0.0 } else { inner / t as f64 })
            .collect();
        let visible = tree.visible(&rel_scale, opts.min_width);
        let depth = tree.max_depth(&visible);
        let top = 96.0 + if opts.subtitle.is_some() { 16.0 } else { 0.0 };
        let (deepest, readable_depth) = deepest(&tree, &visible, &rel_scale);
        let rows = ((SCREEN_H - top - 30.0) / FRAME_H).floor() as usize;
        let cut = cut_depth(depth, readable_depth, rows, opts.max_depth);
        let bottom = top + (cut.unwrap_or(depth) + 1) as f64 * FRAME_H;
        let first = if opts.relative {
            rel_scale.first().copied().unwrap_or(0.0)
        } else if max_total == 0 {
            0.0
        } else {
            inner / max_total as f64
        };
        Self {
            tree,
            k,
            inner,
            visible,
            deepest,
            depth,
            cut,
            top,
            bottom,
            height: bottom + 30.0,
            first,
        }
    }

    /// What the script grows the image by to show what was cut.
    fn grow(&self) -> f64 {
        self.cut.map_or(0.0, |c| (self.depth - c) as f64 * FRAME_H)
    }
}

/// The deepest kept node under each node (nodes come after their parents:
/// one pass from the last), and the deepest readable one at some phase's
/// own scale.
fn deepest(tree: &FrameTree<'_>, visible: &[bool], rel_scale: &[f64]) -> (Vec<usize>, usize) {
    let mut deepest = vec![0usize; tree.nodes.len()];
    let mut readable_depth = 0;
    for i in (0..tree.nodes.len()).rev() {
        if !visible[i] {
            continue;
        }
        let n = &tree.nodes[i];
        deepest[i] = deepest[i].max(n.depth);
        if i > 0 {
            deepest[n.parent] = deepest[n.parent].max(deepest[i]);
        }
        let wide = tree
            .total(i)
            .iter()
            .zip(rel_scale)
            .any(|(&v, &s)| v as f64 * s >= READABLE_PX);
        if wide {
            readable_depth = readable_depth.max(n.depth);
        }
    }
    (deepest, readable_depth)
}

/// The animated SVG [`write`] writes, as text (no copy for a caller that
/// keeps it), and the stacks cut short at [`super::tree::MAX_TREE_NODES`].
pub fn render(series: &Series, opts: &AnimationOptions) -> (String, usize) {
    let l = Layout::new(series, opts);
    let drawn = l.visible.iter().filter(|v| **v).count();
    let mut s = String::with_capacity(8192 + drawn * (160 + 8 * l.k));
    write_head(&mut s, &l, opts);
    write_controls(&mut s, &l, opts);
    write_frames(&mut s, &l, opts);
    let _ = write!(
        s,
        "<text id=\"details\" x=\"{PAD}\" y=\"{}\"> </text>\n\
         <script type=\"text/ecmascript\"><![CDATA[\n{SCRIPT}]]></script>\n</svg>\n",
        l.bottom + 20.0,
    );
    (s, l.tree.cut_rows())
}

/// The document's start: its size and state, the style, the background,
/// the title and subtitle.
fn write_head(s: &mut String, l: &Layout<'_>, opts: &AnimationOptions) {
    let _ = write!(
        s,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{w}" height="{height}" viewBox="0 0 {w} {height}" xmlns="http://www.w3.org/2000/svg" data-t="0" data-playing="0" data-relative="{rel}" data-grow="{grow}">
<style type="text/css">
{STYLE}</style>
<rect x="0" y="0" width="{w}" height="{height}" fill="rgb(248,248,248)"/>
<text class="title" x="{cx}" y="24">{title}</text>
"#,
        w = opts.width,
        height = l.height,
        cx = opts.width / 2.0,
        rel = u8::from(opts.relative),
        title = escape(&opts.title),
        grow = l.grow(),
    );
    if let Some(sub) = &opts.subtitle {
        let _ = writeln!(
            s,
            r#"<text class="note" x="{}" y="42">{}</text>"#,
            opts.width / 2.0,
            escape(sub)
        );
    }
}

/// The buttons, the timeline (a track with one tick per phase, carrying
/// the phase's label for the script, and a knob) and the phase's label.
fn write_controls(s: &mut String, l: &Layout<'_>, opts: &AnimationOptions) {
    let k = l.k;
    let cy = l.top - 56.0;
    let buttons = [
        ("restart", "|<<", 44.0),
        ("back", "<", 30.0),
        ("play", "play", 56.0),
        ("forward", ">", 30.0),
        ("speed", "speed 1x", 80.0),
        (
            "scale",
            if opts.relative { "relative" } else { "global" },
            80.0,
        ),
    ];
    let mut bx = PAD;
    for (id, label, bw) in buttons {
        let _ = writeln!(
            s,
            r#"<g class="btn" id="{id}"><rect x="{bx}" y="{cy}" width="{bw}" height="20"/><text x="{}" y="{}">{label}</text></g>"#,
            bx + bw / 2.0,
            cy + 14.5,
            label = escape(label)
        );
        bx += bw + 6.0;
    }
    let track_x = bx + 10.0;
    let track_w = (opts.width - PAD - track_x).max(50.0);
    let _ = writeln!(
        s,
        r#"<rect id="track" x="{track_x}" y="{}" width="{track_w}" height="10"/>"#,
        cy + 5.0
    );
    let phase = |p: usize| escape(opts.phases.get(p).map_or("", String::as_str));
    for p in 0..k {
        let tx = if k > 1 {
            track_x + track_w * p as f64 / (k - 1) as f64
        } else {
            track_x
        };
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{}" width="1" height="16" fill="rgb(120,120,120)" pointer-events="none" data-phase="{}"/>"#,
            tx - 0.5,
            cy + 2.0,
            phase(p)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect id="knob" x="{:.1}" y="{}" width="6" height="20"/>"#,
        track_x - 3.0,
        cy
    );
    let _ = writeln!(
        s,
        r#"<text id="phase" x="{PAD}" y="{}">phase 1/{k}: {}</text>"#,
        cy + 40.0,
        phase(0)
    );
}

/// What elided frames take up before each kept sibling, per phase: the
/// script adds it, so kept frames sit where the full layout puts them.
fn gaps(l: &Layout<'_>) -> Vec<Option<Vec<u64>>> {
    let (tree, k) = (&l.tree, l.k);
    let mut gaps: Vec<Option<Vec<u64>>> = vec![None; tree.nodes.len()];
    for i in 0..tree.nodes.len() {
        let mut pending = vec![0u64; k];
        for c in tree.children(i) {
            if l.visible[c] {
                if pending.iter().any(|&g| g > 0) {
                    gaps[c] = Some(std::mem::replace(&mut pending, vec![0; k]));
                }
            } else {
                for (p, v) in pending.iter_mut().zip(tree.total(c)) {
                    *p = p.saturating_add(*v);
                }
            }
        }
    }
    gaps
}

/// The frames group: the values the script lays them out with as its
/// attributes, then each kept frame drawn as in the first phase.
fn write_frames(s: &mut String, l: &Layout<'_>, opts: &AnimationOptions) {
    let _ = writeln!(
        s,
        r#"<g id="frames" data-pad="{PAD}" data-inner="{}" data-factor="{}" data-unit="{}">"#,
        l.inner,
        opts.factor,
        escape(&opts.count_name)
    );
    let gaps = gaps(l);
    let starts = l.tree.starts(0);
    for (i, &kept) in l.visible.iter().enumerate() {
        if kept {
            write_frame(s, l, i, starts[i], gaps[i].as_deref());
        }
    }
    s.push_str("</g>\n");
}

/// Frame `i`, starting `start` units from the left in the first phase,
/// `gap` units of elided siblings before it in each phase.
fn write_frame(s: &mut String, l: &Layout<'_>, i: usize, start: u64, gap: Option<&[u64]>) {
    let n = &l.tree.nodes[i];
    let gap = gap.map_or(String::new(), |g| {
        let g: Vec<String> = g.iter().map(u64::to_string).collect();
        format!(r#" data-g="{}""#, g.join(","))
    });
    let x = PAD + start as f64 * l.first;
    let wd = l.tree.total(i)[0] as f64 * l.first;
    let y = l.bottom - (n.depth + 1) as f64 * FRAME_H;
    let (r, g, b) = if i == 0 {
        (220, 220, 220)
    } else {
        hot_color(n.name)
    };
    let values: Vec<String> = l.tree.total(i).iter().map(u64::to_string).collect();
    // Past the cut, hidden (placed as in the uncut graph, above its top);
    // at the cut, a frame with callees past it says how many levels are
    // cut instead of its name.
    let (class, deeper, label) = match l.cut {
        Some(c) if n.depth > c => ("f deep", String::new(), fit_label(n.name, wd)),
        Some(c) if n.depth == c && l.deepest[i] > c => {
            let levels = l.deepest[i] - c + 1;
            (
                "f cut",
                format!(r#" data-deeper="{levels}""#),
                deeper_fit(&deeper_label(levels), levels, wd),
            )
        }
        _ => ("f", String::new(), fit_label(n.name, wd)),
    };
    let hidden = if wd < 0.05 || class == "f deep" {
        r#" display="none""#
    } else {
        ""
    };
    let _ = writeln!(
        s,
        r#"<g class="{class}"{deeper} data-d="{}" data-v="{}"{gap}{hidden}><title>{}</title><rect x="{x:.1}" y="{y:.1}" width="{wd:.1}" height="{}" fill="rgb({r},{g},{b})"/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
        n.depth,
        values.join(","),
        escape(n.name),
        FRAME_H - 1.0,
        x + 3.0,
        y + 11.5,
        escape(&label),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::columns::Rewrite;
    use crate::query::profile::{FoldedStack, test_profile as profile};

    #[test]
    fn frames_carry_every_phase_and_thin_ones_go() {
        let mut phases = vec![
            profile(&[("a;b", 10), ("a;c", 5)]),
            profile(&[("a;b", 2), ("a;q", 8)]),
        ];
        // A frame far below a pixel in every phase.
        phases[0].add(FoldedStack::from_frames(["a", "thin"]), 0);
        phases[1].add(FoldedStack::from_frames(["a", "tiny"]), 1);
        let big: u64 = 100_000;
        phases[0].add(FoldedStack::from_frames(["z"]), big);
        let s = Series::from_profiles(&phases, Rewrite::default());
        let mut out = Vec::new();
        let opts = AnimationOptions::new("t", vec!["p1 <".into(), "p2".into()], "samples");
        write(&s, &opts, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.contains(r#"data-v="10,2""#), "b in both phases");
        assert!(svg.contains(r#"data-v="0,8""#), "q only in phase 2");
        // tiny is 1 of 19 in phase 2: wide at its own scale, kept.
        assert!(svg.contains("<title>tiny</title>"));
        assert!(!svg.contains("<title>thin</title>"));
        assert!(svg.contains(r#"data-phase="p1 &lt;""#));
    }

    /// Title, unit and phase labels are attributes and text, escaped: the
    /// script is the asset as it is, whatever they hold.
    #[test]
    fn values_are_data_and_the_script_is_the_same_in_every_svg() {
        let s = Series::from_profiles(&[profile(&[("a;b", 3)])], Rewrite::default());
        let evil = "\"]]></script><script>evil()</script>";
        let mut opts = AnimationOptions::new(evil, vec![evil.into()], evil);
        opts.subtitle = Some(evil.into());
        let (svg, _) = render(&s, &opts);
        assert!(svg.ends_with(&format!("<![CDATA[\n{SCRIPT}]]></script>\n</svg>\n")));
        assert_eq!(svg.matches("<script").count(), 1);
        assert!(svg.contains(r#"data-unit="&quot;]]&gt;&lt;/script&gt;"#));
    }

    #[test]
    fn thin_deep_towers_are_cut_to_one_screen() {
        let mut deep = String::from("rare");
        for _ in 0..130 {
            deep.push_str(";descend");
        }
        let phases = vec![
            profile(&[("main;hot", 5000), (deep.as_str(), 1)]),
            profile(&[("main;hot", 5000), (deep.as_str(), 2)]),
        ];
        let s = Series::from_profiles(&phases, Rewrite::default());
        let opts = AnimationOptions::new("t", vec!["a".into(), "b".into()], "samples");
        let (svg, _) = render(&s, &opts);
        let height: f64 = {
            let i = svg.find(" height=\"").unwrap() + 9;
            svg[i..i + svg[i..].find('"').unwrap()].parse().unwrap()
        };
        // 96 px of controls, 30 under: 48 rows, depths 0 to 47.
        assert_eq!(height, 96.0 + 48.0 * 16.0 + 30.0);
        assert!(height <= SCREEN_H);
        // rare is depth 1, descend 2..=131: cut at 47, 85 levels.
        assert!(
            svg.contains(r#"class="f cut" data-deeper="85""#),
            "a cut frame"
        );
        assert_eq!(svg.matches(r#"<g class="f deep""#).count(), 131 - 47);
        assert!(svg.contains(&format!(r#"data-grow="{}""#, 84 * 16)));
        // Every frame of the tower is in the document.
        assert_eq!(svg.matches("<title>descend</title>").count(), 130);
    }
}
