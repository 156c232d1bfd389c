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
    let total = nodes[0].total;

    let width = options.width.unwrap_or(1200) as f64;
    let min_width = options.min_width.unwrap_or(0.1);
    let px_per = if total > 0 {
        (width - 2.0 * PAD) / total as f64
    } else {
        0.0
    };
    let visible = |n: &Placed<'_>| n.total as f64 * px_per >= min_width;
    let (mut max_depth, mut readable_depth, mut drawn) = (0, 0, 0);
    let mut i = 0;
    while i < nodes.len() {
        let n = &nodes[i];
        if visible(n) {
            max_depth = max_depth.max(n.depth);
            if n.total as f64 * px_per >= READABLE_PX {
                readable_depth = readable_depth.max(n.depth);
            }
            drawn += 1;
            i += 1;
        } else {
            i = n.end as usize;
        }
    }
    let top = if options.subtitle.is_some() {
        60.0
    } else {
        36.0
    };
    let bottom = 34.0;
    let fh = options.frame_height.map_or(FRAME_H, f64::from);
    let rows = ((SCREEN_H - top - bottom) / fh).floor() as usize;
    let cut = cut_depth(
        max_depth as usize,
        readable_depth as usize,
        rows,
        options.max_depth,
    )
    .map(|c| c as u32);
    let shown_depth = cut.unwrap_or(max_depth);
    let height = (f64::from(shown_depth) + 1.0) * fh + top + bottom;
    // Frames past the cut are placed as an uncut graph would place them
    // (above the top edge when the root is at the bottom): the script
    // shows them by moving the frames down and growing the image.
    let frame_y = |depth: u32| -> i64 {
        if options.inverted {
            (top + f64::from(depth) * fh) as i64
        } else {
            (height - bottom - (f64::from(depth) + 1.0) * fh) as i64
        }
    };

    // About 200 bytes a frame drawn, plus the script and header.
    let mut s = String::with_capacity(16 * 1024 + drawn * 200);
    let _ = write!(
        s,
        r##"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" data-inverted="{inv}">
<defs><linearGradient id="background" y1="0" y2="1" x1="0" x2="0"><stop stop-color="#eeeeee" offset="5%"/><stop stop-color="#eeeeb0" offset="95%"/></linearGradient></defs>
<style type="text/css">
text {{ font-family: Verdana, sans-serif; font-size: 12px; fill: rgb(0,0,0); }}
#title {{ text-anchor: middle; font-size: 17px; }}
#subtitle {{ text-anchor: middle; fill: rgb(160,160,160); }}
#search, #unzoom {{ cursor: pointer; }}
#frames > g:hover > rect {{ stroke: black; stroke-width: 0.5; cursor: pointer; }}
#frames > g.deeper > rect {{ stroke: rgb(110,110,110); stroke-width: 0.5; stroke-dasharray: 2 2; }}
.band {{ fill: #eeeeee; opacity: 0.92; pointer-events: none; }}
.hide {{ display: none; }}
.parent {{ opacity: 0.5; }}
</style>
<rect x="0" y="0" width="100%" height="100%" fill="url(#background)"/>
"##,
        inv = u8::from(options.inverted),
    );
    if total == 0 {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">no samples in this window</text>"#,
            width / 2.0,
            top + 20.0
        );
    }
    let _ = writeln!(
        s,
        r#"<g id="frames" data-total="{total}" data-width="{width}" data-pad="{PAD}" data-top="{top}" data-bottom="{bottom}">"#
    );
    let palette = options.palette.unwrap_or(Palette::Java);
    let mut i = 0;
    while i < nodes.len() && total > 0 {
        let n = nodes[i];
        if !visible(&n) {
            i = n.end as usize;
            continue;
        }
        i += 1;
        let (x, wd) = (PAD + n.start as f64 * px_per, n.total as f64 * px_per);
        // Whole pixels (the frame height and margins are), written as integers.
        let y = frame_y(n.depth);
        let mut class = "";
        if let Some(c) = cut {
            if n.depth > c {
                class = "hide deep";
            } else if n.depth == c {
                // The deepest frame drawn under this one, if past the cut:
                // this one then stands in for the tower.
                let (mut deepest, mut j) = (n.depth, i);
                while j < n.end as usize {
                    if visible(&nodes[j]) {
                        deepest = deepest.max(nodes[j].depth);
                        j += 1;
                    } else {
                        j = nodes[j].end as usize;
                    }
                }
                if deepest > c {
                    class = "hide deep";
                    let levels = (deepest - c + 1) as usize;
                    let name = deeper_label(levels);
                    s.push_str("<g class=\"deeper\"><title>");
                    s.push_str(&name);
                    push_frame_tail(
                        &mut s,
                        &n,
                        total,
                        options,
                        (x, wd, y),
                        Rgb {
                            r: 228,
                            g: 228,
                            b: 228,
                        },
                    );
                    push_deeper_label(&mut s, &name, levels, wd);
                    s.push_str("</text></g>\n");
                }
            }
        }
        let color = match options.cold_suffix {
            Some(suffix) if n.name.ends_with(suffix) => cold_color(n.name),
            _ if n.depth == 0 => Rgb {
                r: 250,
                g: 250,
                b: 200,
            },
            _ => palette.color(n.name, options.hash),
        };
        if class.is_empty() {
            s.push_str("<g><title>");
        } else {
            s.push_str("<g class=\"");
            s.push_str(class);
            s.push_str("\"><title>");
        }
        escape_into(&mut s, n.name);
        push_frame_tail(&mut s, &n, total, options, (x, wd, y), color);
        push_label(&mut s, n.name, wd);
        s.push_str("</text></g>\n");
    }
    s.push_str("</g>\n");
    // Title, buttons and details after the frames, drawn over them: the
    // script keeps them on screen (with a band behind them) when the graph
    // is taller than the window.
    let _ = write!(
        s,
        r#"<g id="head"><rect class="band hide" x="0" y="0" width="{width}" height="{band}"/>
<text id="title" x="{mid}" y="24">"#,
        band = top - 6.0,
        mid = width / 2.0,
    );
    escape_into(&mut s, &options.title);
    s.push_str("</text>\n");
    if let Some(sub) = &options.subtitle {
        let _ = write!(s, r#"<text id="subtitle" x="{}" y="48">"#, width / 2.0);
        escape_into(&mut s, sub);
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
    s.push_str("<script type=\"text/ecmascript\"><![CDATA[\n");
    s.push_str(SCRIPT);
    s.push_str("]]></script>\n</svg>\n");
    w.write_all(s.as_bytes())?;
    w.flush()
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

/// Hover shows a frame's details at the bottom; a click zooms to it (its
/// callers stay, full width and faded; Reset Zoom undoes it) and shows its
/// callees past the cut, the image growing to hold them; a click on a
/// `[deeper: N frames]` frame zooms to the frame it stands for. Search (or
/// Ctrl-F) highlights the frames whose name matches a regular expression
/// (and the `[deeper]` frame over a hidden match), prints the share of
/// samples under them, each sample counted once, and scrolls to the widest
/// match if none is on screen. A graph taller than the window opens
/// scrolled to its root, the title, buttons and details kept on screen.
const SCRIPT: &str = r#"(function () {
  var svg = document.documentElement;
  var framesEl = document.getElementById("frames");
  var total = +framesEl.getAttribute("data-total");
  var width = +framesEl.getAttribute("data-width");
  var pad = +framesEl.getAttribute("data-pad");
  var top = +framesEl.getAttribute("data-top");
  var bottom = +framesEl.getAttribute("data-bottom");
  var inverted = svg.getAttribute("data-inverted") === "1";
  var height0 = +svg.getAttribute("height"), height = height0;
  var head = document.getElementById("head"), foot = document.getElementById("foot");
  var bands = document.querySelectorAll(".band");
  var details = document.getElementById("details");
  var unzoomBtn = document.getElementById("unzoom");
  var searchBtn = document.getElementById("search");
  var matched = document.getElementById("matched");
  var frames = [], markers = [], cutOf = {};
  var gs = framesEl.getElementsByTagName("g");
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i], r = g.getElementsByTagName("rect")[0];
    var t = g.getElementsByTagName("title")[0].textContent;
    var f = { g: g, rect: r, text: g.getElementsByTagName("text")[0],
      x: +r.getAttribute("data-x"), w: +r.getAttribute("data-w"),
      y: +r.getAttribute("y"), h: +r.getAttribute("height") + 1, fill: r.getAttribute("fill"),
      name: t.slice(0, t.lastIndexOf(" (")), title: t,
      marker: g.classList.contains("deeper"), deep: g.classList.contains("deep") };
    g.__frame = f;
    frames.push(f);
    if (f.marker) { f.levels = f.name.replace(/[^0-9]/g, ""); markers.push(f); }
    else if (f.deep) cutOf[f.x + "," + f.w + "," + f.y] = f;
  }
  // A [deeper] frame stands for the hidden frame in its place.
  for (var m = 0; m < markers.length; m++) markers[m].cut = cutOf[markers[m].x + "," + markers[m].w + "," + markers[m].y];
  function label(f, px) {
    var fits = Math.floor((px - 6) / (12 * 0.59));
    if (fits < 3) return "";
    if (f.name.length <= fits) return f.name;
    if (f.marker) return f.levels.length + 1 <= fits ? "+" + f.levels : "";
    return f.name.slice(0, fits - 2) + "..";
  }
  // Keeps the title, buttons and details on screen when the image is
  // taller than the window.
  function pin() {
    var wh = window.innerHeight, tall = height > wh + 1;
    var y = tall ? Math.max(0, Math.min(window.scrollY, height - wh)) : 0;
    head.setAttribute("transform", "translate(0," + y + ")");
    foot.setAttribute("transform", "translate(0," + (tall ? y + wh - height0 : height - height0) + ")");
    for (var i = 0; i < bands.length; i++) bands[i].classList.toggle("hide", !tall);
  }
  // Frames keep the places the server gave them; frames past the cut lie
  // beyond the image's edge, which grows (and, root at the bottom, the
  // frames move down) to hold every frame shown.
  function resize(lo, hi) {
    var shift = 0, h = height0;
    if (hi >= lo) {
      if (inverted) h = Math.max(height0, hi + bottom);
      else { shift = Math.max(0, top - lo); h = height0 + shift; }
    }
    height = h;
    svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + width + " " + h);
    if (shift) framesEl.setAttribute("transform", "translate(0," + shift + ")");
    else framesEl.removeAttribute("transform");
    pin();
  }
  // Lays frames out for the window [x0, x0 + w0) of samples, `zoomed`
  // being the frame it is zoomed to (null: the whole graph, cut).
  function layout(zoomed) {
    var x0 = zoomed ? zoomed.x : 0, w0 = zoomed ? zoomed.w : total;
    var scale = (width - 2 * pad) / w0;
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i], g = f.g;
      var above = zoomed && (inverted ? f.y < zoomed.y : f.y > zoomed.y);
      var inside = f.x >= x0 && f.x + f.w <= x0 + w0;
      g.classList.remove("hide");
      g.classList.remove("parent");
      var x, w;
      if (zoomed ? f.marker : f.deep) {
        g.classList.add("hide");
        continue;
      } else if (zoomed && above && f.x <= x0 && f.x + f.w >= x0 + w0) {
        g.classList.add("parent");
        x = pad; w = width - 2 * pad;
      } else if (!zoomed || (inside && !above)) {
        x = pad + (f.x - x0) * scale; w = f.w * scale;
      } else {
        g.classList.add("hide");
        continue;
      }
      lo = Math.min(lo, f.y); hi = Math.max(hi, f.y + f.h);
      f.rect.setAttribute("x", x.toFixed(2));
      f.rect.setAttribute("width", w.toFixed(2));
      f.text.setAttribute("x", (x + 3).toFixed(2));
      f.text.textContent = label(f, w);
    }
    resize(lo, hi);
    unzoomBtn.classList.toggle("hide", !zoomed);
  }
  function toRoot() {
    if (!inverted && height > window.innerHeight) window.scrollTo(0, height);
    pin();
  }
  function frameOf(e) {
    var t = e.target;
    while (t && t !== framesEl) { if (t.__frame) return t.__frame; t = t.parentNode; }
    return null;
  }
  framesEl.addEventListener("mouseover", function (e) {
    var f = frameOf(e);
    if (f) details.textContent = f.marker ? f.title + ": click to show them" : "Function: " + f.title;
  });
  framesEl.addEventListener("mouseout", function () { details.textContent = " "; });
  framesEl.addEventListener("click", function (e) {
    var f = frameOf(e); if (!f) return;
    var to = f.marker ? f.cut : f;
    if (!to) return;
    // The clicked frame stays where it is on screen.
    var was = f.rect.getBoundingClientRect().top;
    layout(to === frames[0] ? null : to);
    window.scrollBy(0, to.rect.getBoundingClientRect().top - was);
    pin();
  });
  unzoomBtn.addEventListener("click", function () { layout(null); toRoot(); });
  var searching = false;
  function resetSearch() {
    for (var i = 0; i < frames.length; i++) frames[i].rect.setAttribute("fill", frames[i].fill);
    matched.textContent = " ";
    searchBtn.textContent = "Search";
    searching = false;
  }
  function search(pattern) {
    var re;
    try { re = new RegExp(pattern); } catch (err) { matched.textContent = "bad regex: " + err.message; return; }
    resetSearch();
    var spans = [], shown = [];
    for (var i = 0; i < frames.length; i++) {
      var f = frames[i];
      if (f.marker || f.name === "all" || !re.test(f.name)) continue;
      f.rect.setAttribute("fill", "rgb(230,0,230)");
      spans.push([f.x, f.x + f.w]);
      if (!f.g.classList.contains("hide")) shown.push(f);
      else if (f.deep) {
        for (var m = 0; m < markers.length; m++) {
          var k = markers[m];
          if (k.x <= f.x && f.x + f.w <= k.x + k.w && !k.g.classList.contains("hide")) {
            k.rect.setAttribute("fill", "rgb(230,0,230)");
            shown.push(k);
          }
        }
      }
    }
    // Nested matches (a recursive function) count once.
    spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
    var sum = 0, end = -1;
    for (var j = 0; j < spans.length; j++) {
      var a = Math.max(spans[j][0], end), b = spans[j][1];
      if (b > a) { sum += b - a; end = b; }
    }
    matched.textContent = "Matched: " + (total ? (100 * sum / total).toFixed(1) : "0.0") + "%";
    searchBtn.textContent = "Reset Search";
    searching = true;
    // The widest match comes into view if no match is wholly on screen
    // (clear of the bands over the frames, when they show).
    var best = null, tall = height > window.innerHeight + 1;
    var lo = tall ? top - 6 : 0, hi = window.innerHeight - (tall ? bottom : 0);
    for (var s = 0; s < shown.length; s++) {
      var rc = shown[s].rect.getBoundingClientRect();
      if (rc.top >= lo && rc.bottom <= hi) { best = null; break; }
      if (!best || shown[s].w > best.w) best = shown[s];
    }
    if (best) {
      window.scrollBy(0, best.rect.getBoundingClientRect().top - window.innerHeight / 2);
      pin();
    }
  }
  searchBtn.addEventListener("click", function () {
    if (searching) { resetSearch(); return; }
    var p = window.prompt("Search for frames matching (regular expression):", "");
    if (p) search(p);
  });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {
      e.preventDefault();
      var p = window.prompt("Search for frames matching (regular expression):", "");
      if (p) search(p);
    }
  });
  window.addEventListener("scroll", pin);
  window.addEventListener("resize", pin);
  window.addEventListener("load", toRoot);
  toRoot();
})();
"#;

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
