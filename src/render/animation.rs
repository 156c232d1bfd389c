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

/// A JavaScript string literal safe inside CDATA and XML.
fn js_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

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

/// The animated SVG [`write`] writes, as text (no copy for a caller that
/// keeps it), and the stacks cut short at [`super::tree::MAX_TREE_NODES`].
pub fn render(series: &Series, opts: &AnimationOptions) -> (String, usize) {
    let k = series.columns().max(1);
    let tree = FrameTree::build(series);
    let totals = tree.total(0).to_vec();
    let max_total = totals.iter().copied().max().unwrap_or(0);
    let inner = opts.width - 2.0 * PAD;
    // A frame is kept if it is wide enough in some phase at that phase's own
    // scale (the wider of the two scales the viewer can pick).
    let rel_scale: Vec<f64> = totals
        .iter()
        .map(|&t| if t == 0 { 0.0 } else { inner / t as f64 })
        .collect();
    let visible = tree.visible(&rel_scale, opts.min_width);
    let depth = tree.max_depth(&visible);
    let top = 96.0 + if opts.subtitle.is_some() { 16.0 } else { 0.0 };
    // The deepest node kept under each node (nodes come after their
    // parents: one pass from the last), and the deepest readable one.
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
            .zip(&rel_scale)
            .any(|(&v, &s)| v as f64 * s >= READABLE_PX);
        if wide {
            readable_depth = readable_depth.max(n.depth);
        }
    }
    let rows = ((SCREEN_H - top - 30.0) / FRAME_H).floor() as usize;
    let cut = cut_depth(depth, readable_depth, rows, opts.max_depth);
    let bottom = top + (cut.unwrap_or(depth) + 1) as f64 * FRAME_H;
    let height = bottom + 30.0;
    let first = if opts.relative {
        rel_scale.first().copied().unwrap_or(0.0)
    } else if max_total == 0 {
        0.0
    } else {
        inner / max_total as f64
    };
    let starts = tree.starts(0);

    let drawn = visible.iter().filter(|v| **v).count();
    let mut s = String::with_capacity(8192 + drawn * (160 + 8 * k));
    let _ = write!(
        s,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{w}" height="{height}" viewBox="0 0 {w} {height}" xmlns="http://www.w3.org/2000/svg" data-t="0" data-playing="0" data-relative="{rel}" data-grow="{grow}">
<style type="text/css">
text {{ font-family: Verdana, sans-serif; font-size: 12px; fill: rgb(0,0,0); }}
.title {{ font-size: 17px; text-anchor: middle; }}
.note {{ text-anchor: middle; fill: rgb(80,80,80); }}
.btn rect {{ fill: rgb(230,230,230); stroke: rgb(150,150,150); rx: 3; }}
.btn:hover rect {{ fill: rgb(210,210,240); }}
.btn {{ cursor: pointer; }}
.btn text {{ text-anchor: middle; pointer-events: none; }}
#track {{ fill: rgb(220,220,220); cursor: pointer; }}
#knob {{ fill: rgb(60,60,160); pointer-events: none; }}
g.f rect {{ stroke: none; }}
g.f.grow rect {{ stroke: rgb(200,0,0); stroke-width: 1.5; }}
g.f.shrink rect {{ stroke: rgb(0,0,200); stroke-width: 1.5; }}
g.f:hover rect {{ stroke: rgb(0,0,0); stroke-width: 1; }}
g.f text {{ pointer-events: none; }}
</style>
<rect x="0" y="0" width="{w}" height="{height}" fill="rgb(248,248,248)"/>
<text class="title" x="{cx}" y="24">{title}</text>
"#,
        w = opts.width,
        cx = opts.width / 2.0,
        rel = u8::from(opts.relative),
        title = escape(&opts.title),
        // What the script grows the image by to show what was cut.
        grow = cut.map_or(0.0, |c| (depth - c) as f64 * FRAME_H),
    );
    if let Some(sub) = &opts.subtitle {
        let _ = writeln!(
            s,
            r#"<text class="note" x="{}" y="42">{}</text>"#,
            opts.width / 2.0,
            escape(sub)
        );
    }
    let cy = top - 56.0;
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
    for p in 0..k {
        let tx = if k > 1 {
            track_x + track_w * p as f64 / (k - 1) as f64
        } else {
            track_x
        };
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{}" width="1" height="16" fill="rgb(120,120,120)" pointer-events="none"/>"#,
            tx - 0.5,
            cy + 2.0
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
        escape(opts.phases.first().map_or("", String::as_str))
    );
    // What elided frames take up before each kept sibling, per phase: the
    // script adds it, so kept frames sit where the full layout puts them.
    let mut gaps: Vec<Option<Vec<u64>>> = vec![None; tree.nodes.len()];
    for i in 0..tree.nodes.len() {
        let mut pending = vec![0u64; k];
        for c in tree.children(i) {
            if visible[c] {
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
    s.push_str("<g id=\"frames\">\n");
    for (i, n) in tree.nodes.iter().enumerate() {
        if !visible[i] {
            continue;
        }
        let gap = gaps[i].as_ref().map_or(String::new(), |g| {
            let g: Vec<String> = g.iter().map(u64::to_string).collect();
            format!(r#" data-g="{}""#, g.join(","))
        });
        let x = PAD + starts[i] as f64 * first;
        let wd = tree.total(i)[0] as f64 * first;
        let y = bottom - (n.depth + 1) as f64 * FRAME_H;
        let (r, g, b) = if i == 0 {
            (220, 220, 220)
        } else {
            hot_color(n.name)
        };
        let values: Vec<String> = tree.total(i).iter().map(u64::to_string).collect();
        // Past the cut, hidden (placed as in the uncut graph, above its
        // top); at the cut, a frame with callees past it says how many
        // levels are cut instead of its name.
        let (class, deeper, label) = match cut {
            Some(c) if n.depth > c => ("f deep", String::new(), fit_label(n.name, wd)),
            Some(c) if n.depth == c && deepest[i] > c => {
                let levels = deepest[i] - c + 1;
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
    s.push_str("</g>\n");
    let phases_js: Vec<String> = opts.phases.iter().map(|p| js_string(p)).collect();
    let _ = write!(
        s,
        r##"<text id="details" x="{PAD}" y="{}"> </text>
<script type="text/ecmascript"><![CDATA[
(function () {{
  "use strict";
  var K = {k}, PAD = {PAD}, INNER = {inner}, FACTOR = {factor}, UNIT = {unit};
  var PHASES = [{phases}];
  var TRACK_X = {track_x}, TRACK_W = {track_w}, SECONDS_PER_PHASE = 1.5;
  var root = document.documentElement;
  var gs = document.querySelectorAll("#frames g.f");
  var n = gs.length, depth = [], vals = [], gaps = [], parent = [], rects = [], texts = [], names = [], shown = [];
  var deep = [], cutN = [], grow = +root.getAttribute("data-grow");
  if (n === 0) return;
  var stack = [];
  for (var i = 0; i < n; i++) {{
    var g = gs[i];
    depth.push(+g.getAttribute("data-d"));
    vals.push(g.getAttribute("data-v").split(",").map(Number));
    var gap = g.getAttribute("data-g");
    gaps.push(gap ? gap.split(",").map(Number) : null);
    while (stack.length && depth[stack[stack.length - 1]] >= depth[i]) stack.pop();
    parent.push(stack.length ? stack[stack.length - 1] : -1);
    stack.push(i);
    rects.push(g.querySelector("rect"));
    texts.push(g.querySelector("text"));
    names.push(g.querySelector("title").textContent);
    shown.push(g.hasAttribute("display") ? -2 : -1);
    deep.push(g.classList.contains("deep"));
    cutN.push(g.getAttribute("data-deeper"));
  }}
  // Frames past the cut show once a [deeper] frame is clicked: the image
  // grows by `grow` and the frames (placed from the root, at the bottom)
  // move down with it.
  function uncut() {{
    if (!grow) return;
    var h = +root.getAttribute("height") + grow;
    root.setAttribute("height", h);
    root.setAttribute("viewBox", "0 0 " + root.getAttribute("width") + " " + h);
    document.getElementById("frames").setAttribute("transform", "translate(0," + grow + ")");
    var d = document.getElementById("details");
    d.setAttribute("y", +d.getAttribute("y") + grow);
    grow = 0;
    for (var i = 0; i < n; i++) if (cutN[i]) {{ cutN[i] = null; shown[i] = -1; }}
    draw();
  }}
  var X, W, relative = root.getAttribute("data-relative") === "1";
  function layout() {{
    X = new Float64Array(n * K); W = new Float64Array(n * K);
    var max = 0;
    for (var p = 0; p < K; p++) max = Math.max(max, vals[0][p]);
    for (var p = 0; p < K; p++) {{
      var total = relative ? vals[0][p] : max;
      var scale = total > 0 ? INNER / total : 0;
      var next = new Float64Array(n);
      for (var i = 0; i < n; i++) {{
        if (parent[i] >= 0 && gaps[i]) next[parent[i]] += gaps[i][p] * scale;
        var x = parent[i] < 0 ? PAD : next[parent[i]];
        var w = vals[i][p] * scale;
        X[i * K + p] = x; W[i * K + p] = w;
        next[i] = x;
        if (parent[i] >= 0) next[parent[i]] += w;
      }}
    }}
  }}
  function fit(name, w) {{
    var c = Math.floor((w - 6) / 7.08);
    if (c < 3) return "";
    return name.length <= c ? name : name.substring(0, c - 2) + "..";
  }}
  function fitDeeper(levels, w) {{
    var full = "[deeper: " + levels + " frames]", c = Math.floor((w - 6) / 7.08);
    return full.length <= c ? full : (levels.length + 1 <= c && c >= 3 ? "+" + levels : "");
  }}
  var t = 0, playing = false, speed = 1, last = null;
  function fmt(v) {{ v = v * FACTOR; return Math.abs(v - Math.round(v)) < 1e-9 ? String(Math.round(v)) : v.toFixed(3); }}
  function draw() {{
    var i0 = Math.floor(t), f = t - i0;
    if (i0 >= K - 1) {{ i0 = K - 1; f = 0; }}
    var i1 = Math.min(i0 + 1, K - 1);
    var e = f * f * (3 - 2 * f);
    for (var i = 0; i < n; i++) {{
      var a = i * K + i0, b = i * K + i1;
      var x = X[a] + (X[b] - X[a]) * e, w = W[a] + (W[b] - W[a]) * e;
      var g = gs[i];
      if (w < 0.05 || (grow && deep[i])) {{ if (shown[i] !== -2) {{ g.setAttribute("display", "none"); shown[i] = -2; }} continue; }}
      if (shown[i] === -2) g.removeAttribute("display");
      var r = rects[i];
      r.setAttribute("x", x.toFixed(1)); r.setAttribute("width", w.toFixed(1));
      texts[i].setAttribute("x", (x + 3).toFixed(1));
      var c = Math.floor((w - 6) / 7.08);
      if (c !== shown[i]) {{ texts[i].textContent = cutN[i] ? fitDeeper(cutN[i], w) : fit(names[i], w); shown[i] = c; }}
      var pa = f > 0 ? i0 : Math.max(0, i0 - 1), pb = f > 0 ? i1 : i0;
      var from = vals[i][pa], to = vals[i][pb];
      if (relative) {{
        // Sizes are shares of each phase: so is growth.
        from = vals[0][pa] > 0 ? from / vals[0][pa] * 1000 : 0;
        to = vals[0][pb] > 0 ? to / vals[0][pb] * 1000 : 0;
      }}
      var cls = to > from * 1.1 && to - from > 1 ? "f grow" : (to * 1.1 < from && from - to > 1 ? "f shrink" : "f");
      if (g.getAttribute("class") !== cls) g.setAttribute("class", cls);
    }}
    var p = Math.min(K - 1, Math.round(t));
    document.getElementById("phase").textContent = "phase " + (p + 1) + "/" + K + ": " + PHASES[p] + (relative ? " (sized to its own total)" : "");
    var kx = K > 1 ? TRACK_X + TRACK_W * t / (K - 1) : TRACK_X;
    document.getElementById("knob").setAttribute("x", (kx - 3).toFixed(1));
    root.setAttribute("data-t", t.toFixed(3));
    root.setAttribute("data-playing", playing ? "1" : "0");
  }}
  function label(id, text) {{ document.querySelector("#" + id + " text").textContent = text; }}
  function setPlaying(on) {{
    var was = playing;
    playing = on; label("play", on ? "pause" : "play");
    // One animation loop at a time.
    if (on && !was) {{ last = null; requestAnimationFrame(tick); }}
    draw();
  }}
  function tick(ts) {{
    if (!playing) return;
    if (last !== null) t += (ts - last) / 1000 * speed / SECONDS_PER_PHASE;
    last = ts;
    if (t >= K - 1) {{ t = K - 1; playing = false; label("play", "play"); }}
    draw();
    if (playing) requestAnimationFrame(tick);
  }}
  function on(id, f) {{ document.getElementById(id).addEventListener("click", f); }}
  on("play", function () {{ if (!playing && t >= K - 1) t = 0; setPlaying(!playing); }});
  on("restart", function () {{ t = 0; setPlaying(true); }});
  on("back", function () {{ t = Math.max(0, Math.ceil(t - 1e-6) - 1); setPlaying(false); }});
  on("forward", function () {{ t = Math.min(K - 1, Math.floor(t + 1e-6) + 1); setPlaying(false); }});
  var speeds = [0.5, 1, 2, 4];
  on("speed", function () {{ speed = speeds[(speeds.indexOf(speed) + 1) % speeds.length]; label("speed", "speed " + speed + "x"); }});
  on("scale", function () {{ relative = !relative; root.setAttribute("data-relative", relative ? "1" : "0"); label("scale", relative ? "relative" : "global"); layout(); draw(); }});
  var dragging = false;
  function scrub(e) {{
    var pt = root.createSVGPoint(); pt.x = e.clientX; pt.y = e.clientY;
    var sp = pt.matrixTransform(root.getScreenCTM().inverse());
    t = Math.max(0, Math.min(K - 1, (sp.x - TRACK_X) / TRACK_W * (K - 1)));
    draw();
  }}
  document.getElementById("track").addEventListener("mousedown", function (e) {{ dragging = true; setPlaying(false); scrub(e); }});
  document.addEventListener("mousemove", function (e) {{ if (dragging) scrub(e); }});
  document.addEventListener("mouseup", function () {{ dragging = false; }});
  document.addEventListener("keydown", function (e) {{
    if (e.key === " ") {{ document.getElementById("play").dispatchEvent(new MouseEvent("click")); e.preventDefault(); }}
    else if (e.key === "ArrowRight") document.getElementById("forward").dispatchEvent(new MouseEvent("click"));
    else if (e.key === "ArrowLeft") document.getElementById("back").dispatchEvent(new MouseEvent("click"));
  }});
  var details = document.getElementById("details");
  document.getElementById("frames").addEventListener("mouseover", function (e) {{
    var g = e.target.parentNode; var i = Array.prototype.indexOf.call(gs, g); if (i < 0) return;
    var p = Math.min(K - 1, Math.round(t)), tot = vals[0][p];
    details.textContent = (cutN[i] ? "[deeper: " + cutN[i] + " frames, click to show them] " : "") + names[i] + ": " + fmt(vals[i][p]) + " " + UNIT + " in phase " + (p + 1) +
      " (" + (tot > 0 ? (100 * vals[i][p] / tot).toFixed(2) : "0") + "% of it); by phase: " + vals[i].map(fmt).join(", ");
  }});
  document.getElementById("frames").addEventListener("mouseout", function () {{ details.textContent = " "; }});
  document.getElementById("frames").addEventListener("click", function (e) {{
    var i = Array.prototype.indexOf.call(gs, e.target.parentNode);
    if (i >= 0 && cutN[i]) uncut();
  }});
  layout();
  draw();
}})();
]]></script>
</svg>
"##,
        bottom + 20.0,
        inner = inner,
        factor = opts.factor,
        unit = js_string(&opts.count_name),
        phases = phases_js.join(","),
    );
    let cut = tree.cut_rows();
    (s, cut)
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
        assert!(svg.contains(r#"var PHASES = ["p1 \u003c","p2"]"#));
    }

    #[test]
    fn js_strings_cannot_break_out() {
        assert_eq!(
            js_string("a\"]]></script>"),
            r#""a\u0022]]\u003e\u003c/script\u003e""#
        );
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
