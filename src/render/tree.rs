//! The frame tree of a [`Series`]: what the differential and animated SVGs
//! draw. Each node is one frame under one path of callers, with its total
//! (inclusive) and self value in every column; children are sorted by name,
//! as flamegraph.pl merges them, so a frame keeps its place across columns.

use std::collections::HashMap;

use crate::query::columns::Series;

/// Frame height in pixels, as flamegraph.pl draws them.
pub const FRAME_H: f64 = 16.0;
/// Side padding in pixels.
pub const PAD: f64 = 10.0;
/// Nodes a frame tree holds at most (about 80 bytes each for two columns,
/// twice that while it is built): a stack that would need more ends at the
/// deepest node it reaches, its value counted there, and the rows so cut are
/// counted in [`FrameTree::cut_rows`]. Well above the nodes of an hour of a
/// busy host's stacks (tens of thousands), far below what 16 MiB of posted
/// text could ask for.
pub const MAX_TREE_NODES: usize = 1 << 18;

/// Frames drawn at most: past it, the narrowest visible frames are left
/// out, so an SVG stays under ~15 MB whatever it draws (a frame is a few
/// hundred bytes, once per graph). A screen shows far fewer.
pub const MAX_DRAWN_FRAMES: usize = 1 << 14;

/// The window a graph's first screen is: a 1400x900 browser window. A
/// graph no taller than this shows its root and title together.
pub const SCREEN_H: f64 = 900.0;

/// Frames at least this wide keep their tower whole, however deep: an
/// eight-character label fits them (12 px Verdana at flamegraph.pl's
/// 0.59 em a character, 3 px each side), a name one can read. Thinner
/// towers (a compiler's one-sample stacks of 129 frames, a recursion seen a
/// few times) are cut where one screen's rows end, under a
/// `[deeper: N frames]` frame, rather than setting the graph's height.
pub const READABLE_PX: f64 = 6.0 + 8.0 * 12.0 * 0.59;

/// The depth where a graph's towers are cut, if any: the deepest that
/// `rows` rows (what one screen holds) draw, or the deepest of a frame at
/// least [`READABLE_PX`] wide (`readable_depth`) if that is deeper. `None`
/// when the deepest frame (`max_depth`) is not past it: nothing is cut.
/// `asked` (the query's `maxdepth`) overrides the rule: `Some(0)` cuts
/// nothing, `Some(n)` cuts at depth `n`. Frames at the cut depth with
/// callees drawn deeper stand in as [`deeper_label`] frames; the frames
/// past it stay in the document, hidden, for the script to show.
pub fn cut_depth(
    max_depth: usize,
    readable_depth: usize,
    rows: usize,
    asked: Option<usize>,
) -> Option<usize> {
    let cut = match asked {
        Some(0) => return None,
        Some(n) => n,
        None => readable_depth.max(rows.saturating_sub(1)).max(1),
    };
    (max_depth > cut).then_some(cut)
}

/// The name of the frame standing for a tower cut `levels` frames short.
pub fn deeper_label(levels: usize) -> String {
    format!("[deeper: {levels} frames]")
}

/// One frame under one path. Its values are [`FrameTree::total`] and
/// [`FrameTree::own`]; its children [`FrameTree::children`].
#[derive(Debug, Clone)]
pub struct TreeNode<'a> {
    /// Frame name (`all` for the root), borrowed from the series.
    pub name: &'a str,
    /// Depth: 0 for the root.
    pub depth: usize,
    /// Columns some stack through this frame was recorded in (bit `c`),
    /// whatever normalization made of the values.
    pub present: u64,
    /// Parent (the root is its own parent).
    pub parent: usize,
    /// One past the last node of its subtree.
    end: usize,
}

/// Frames in depth-first order (a node's subtree follows it, children by
/// name), root first. Names borrow from the series it was built from, and
/// values sit in one array, so a node costs a few words, not allocations.
#[derive(Debug, Clone)]
pub struct FrameTree<'a> {
    /// The nodes; `nodes[0]` is the root.
    pub nodes: Vec<TreeNode<'a>>,
    /// Per node, `columns` totals then `columns` own values.
    values: Vec<u64>,
    columns: usize,
    cut_rows: usize,
}

/// Marks "no node" in the build's sibling lists.
const NONE: u32 = u32::MAX;

impl<'a> FrameTree<'a> {
    /// The tree of `series`.
    pub fn build(series: &'a Series) -> Self {
        Self::build_with(series, &[])
    }

    /// The tree of `series` with `extra` columns after the series' own:
    /// `extra[j][r]` is row `r`'s value (rows in the series' order) in
    /// column `columns() + j`. A differential draws its before graph from
    /// the values as recorded this way, beside the normalized ones.
    pub fn build_with(series: &'a Series, extra: &[&[u64]]) -> Self {
        let k = series.columns() + extra.len();
        let stride = 2 * k;
        // Built in arrival order, then laid out depth-first.
        let mut names: Vec<&'a str> = vec!["all"];
        let mut parents: Vec<u32> = vec![0];
        let mut depths: Vec<u32> = vec![0];
        let mut present: Vec<u64> = vec![0];
        let mut first_child: Vec<u32> = vec![NONE];
        let mut next_sibling: Vec<u32> = vec![NONE];
        let mut values: Vec<u64> = vec![0; stride];
        let mut row_values = vec![0u64; k];
        let mut cut_rows = 0;
        {
            let mut index: HashMap<(u32, &'a str), u32, ahash::RandomState> = HashMap::default();
            for (r, (stack, vals, bits)) in series.rows_with_presence().enumerate() {
                row_values[..vals.len()].copy_from_slice(vals);
                for (j, col) in extra.iter().enumerate() {
                    row_values[vals.len() + j] = col.get(r).copied().unwrap_or(0);
                }
                let mut at = 0u32;
                add(&mut values[..k], &row_values);
                present[0] |= bits;
                let frames = stack.as_str();
                let frames = (!frames.is_empty()).then(|| frames.split(';'));
                for f in frames.into_iter().flatten() {
                    let next = match index.get(&(at, f)) {
                        Some(&n) => n,
                        None if names.len() >= MAX_TREE_NODES => {
                            cut_rows += 1;
                            break;
                        }
                        None => {
                            let n = names.len() as u32;
                            names.push(f);
                            parents.push(at);
                            depths.push(depths[at as usize] + 1);
                            present.push(0);
                            first_child.push(NONE);
                            next_sibling.push(first_child[at as usize]);
                            first_child[at as usize] = n;
                            values.extend(std::iter::repeat_n(0, stride));
                            index.insert((at, f), n);
                            n
                        }
                    };
                    let base = next as usize * stride;
                    add(&mut values[base..base + k], &row_values);
                    present[next as usize] |= bits;
                    at = next;
                }
                let base = at as usize * stride + k;
                add(&mut values[base..base + k], &row_values);
            }
        }
        // Depth-first, children by name.
        let count = names.len();
        let mut order: Vec<u32> = Vec::with_capacity(count);
        let mut todo = vec![0u32];
        let mut children = Vec::new();
        while let Some(n) = todo.pop() {
            order.push(n);
            children.clear();
            let mut c = first_child[n as usize];
            while c != NONE {
                children.push(c);
                c = next_sibling[c as usize];
            }
            children.sort_by(|&a, &b| names[a as usize].cmp(names[b as usize]));
            todo.extend(children.iter().rev());
        }
        drop((first_child, next_sibling));
        let mut size = vec![1u32; count];
        for &n in order.iter().skip(1).rev() {
            size[parents[n as usize] as usize] += size[n as usize];
        }
        let mut new_index = vec![0u32; count];
        for (i, &old) in order.iter().enumerate() {
            new_index[old as usize] = i as u32;
        }
        let nodes = order
            .iter()
            .enumerate()
            .map(|(i, &old)| {
                let old = old as usize;
                TreeNode {
                    name: names[old],
                    depth: depths[old] as usize,
                    present: present[old],
                    parent: new_index[parents[old] as usize] as usize,
                    end: i + size[old] as usize,
                }
            })
            .collect();
        let mut laid_out = Vec::with_capacity(values.len());
        for &old in &order {
            let base = old as usize * stride;
            laid_out.extend_from_slice(&values[base..base + stride]);
        }
        Self {
            nodes,
            values: laid_out,
            columns: k,
            cut_rows,
        }
    }

    /// Node `i`'s inclusive value per column.
    pub fn total(&self, i: usize) -> &[u64] {
        let base = i * 2 * self.columns;
        &self.values[base..base + self.columns]
    }

    /// Node `i`'s own value (stacks ending there) per column.
    pub fn own(&self, i: usize) -> &[u64] {
        let base = i * 2 * self.columns + self.columns;
        &self.values[base..base + self.columns]
    }

    /// Node `i`'s children, by name.
    pub fn children(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let end = self.nodes[i].end;
        let mut c = i + 1;
        std::iter::from_fn(move || {
            (c < end).then(|| {
                let at = c;
                c = self.nodes[at].end;
                at
            })
        })
    }

    /// Rows that ended early because the tree had [`MAX_TREE_NODES`].
    pub fn cut_rows(&self) -> usize {
        self.cut_rows
    }

    /// Number of value columns.
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// Where each node starts in column `c`, in value units from the left
    /// edge: its parent's start plus its earlier siblings' totals.
    pub fn starts(&self, c: usize) -> Vec<u64> {
        let mut start = vec![0u64; self.nodes.len()];
        for i in 0..self.nodes.len() {
            let mut x = start[i];
            for ch in self.children(i) {
                start[ch] = x;
                x = x.saturating_add(self.total(ch)[c]);
            }
        }
        start
    }

    /// The deepest node `visible` keeps (0: only the root).
    pub fn max_depth(&self, visible: &[bool]) -> usize {
        self.nodes
            .iter()
            .zip(visible)
            .filter(|(_, v)| **v)
            .map(|(n, _)| n.depth)
            .max()
            .unwrap_or(0)
    }

    /// Which nodes are at least `min_px` wide in some column, given the
    /// pixels per value unit of each column, and among them the widest
    /// [`MAX_DRAWN_FRAMES`]. A node's children are never wider than it, so
    /// a hidden node hides its subtree. The root is always kept (an empty
    /// graph still has one).
    pub fn visible(&self, px_per_unit: &[f64], min_px: f64) -> Vec<bool> {
        let width = |i: usize| {
            self.total(i)
                .iter()
                .zip(px_per_unit)
                .map(|(&v, &s)| if v > 0 { v as f64 * s } else { 0.0 })
                .fold(0.0, f64::max)
        };
        let mut keep = vec![false; self.nodes.len()];
        keep[0] = true;
        let mut kept = 1;
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            let w = width(i);
            keep[i] = keep[n.parent] && w > 0.0 && w >= min_px;
            kept += usize::from(keep[i]);
        }
        if kept <= MAX_DRAWN_FRAMES {
            return keep;
        }
        // The widest first: every node wider than the budget's narrowest
        // width, then that width's ties in order while the budget lasts.
        // Both keep a node's parent, which is at least as wide.
        let mut widths: Vec<f64> = (1..keep.len()).filter(|&i| keep[i]).map(width).collect();
        let (_, &mut cut, _) =
            widths.select_nth_unstable_by(MAX_DRAWN_FRAMES - 2, |a, b| b.total_cmp(a));
        drop(widths);
        let mut chosen = vec![false; keep.len()];
        chosen[0] = true;
        let mut left = MAX_DRAWN_FRAMES - 1;
        for tie in [false, true] {
            for i in 1..keep.len() {
                if chosen[i] || !keep[i] || !chosen[self.nodes[i].parent] {
                    continue;
                }
                let w = width(i);
                if (!tie && w > cut) || (tie && w == cut && left > 0) {
                    chosen[i] = true;
                    left -= 1;
                }
            }
        }
        chosen
    }
}

fn add(into: &mut [u64], values: &[u64]) {
    for (a, b) in into.iter_mut().zip(values) {
        *a = a.saturating_add(*b);
    }
}

/// Escapes text for SVG content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s);
    out
}

/// Appends `s` to `out` escaped as [`escape`] does, without a copy when
/// nothing needs escaping (most frame names).
pub fn escape_into(out: &mut String, s: &str) {
    let plain = s
        .bytes()
        .all(|b| b >= 0x20 && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'' | 0xef));
    if plain {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && c != '\t' => out.push(' '),
            '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}

/// The label that fits `width_px` at 12 px Verdana (flamegraph.pl's
/// estimate of 0.59 em per character), with `..` when cut; empty if not even
/// three characters fit.
pub fn fit_label(name: &str, width_px: f64) -> String {
    let (shown, cut) = label_cut(name, width_px);
    let mut s = shown.to_owned();
    if cut {
        s.push_str("..");
    }
    s
}

/// The part of `name` that fits `width_px` (see [`fit_label`]) and whether
/// it was cut (then `..` follows it), without copying the name.
pub fn label_cut(name: &str, width_px: f64) -> (&str, bool) {
    let fits = ((width_px - 6.0) / (12.0 * 0.59)).floor();
    if fits < 3.0 {
        return ("", false);
    }
    let fits = fits as usize;
    match name.char_indices().nth(fits) {
        None => (name, false),
        Some(_) => {
            let end = name
                .char_indices()
                .nth(fits - 2)
                .map_or(name.len(), |(i, _)| i);
            (&name[..end], true)
        }
    }
}

/// A warm colour stable per name (flamegraph.pl's `hot` with a name hash).
pub fn hot_color(name: &str) -> (u8, u8, u8) {
    let h = name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let v1 = (h & 0xff) as f64 / 255.0;
    let v2 = ((h >> 8) & 0xff) as f64 / 255.0;
    let v3 = ((h >> 16) & 0xff) as f64 / 255.0;
    (
        (205.0 + 50.0 * v3) as u8,
        (230.0 * v1) as u8,
        (55.0 * v2) as u8,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::columns::Rewrite;
    use crate::query::profile::{FoldedStack, Profile, test_profile as profile};

    #[test]
    fn totals_starts_and_order() {
        let s = Series::from_profiles(
            &[
                profile(&[("m;b", 2), ("m;a;x", 3), ("m", 1)]),
                profile(&[("m;c", 4)]),
            ],
            Rewrite::default(),
        );
        let t = FrameTree::build(&s);
        let names: Vec<&str> = t.nodes.iter().map(|n| n.name).collect();
        assert_eq!(names, ["all", "m", "a", "x", "b", "c"]);
        assert_eq!(t.total(0), [6, 4]);
        assert_eq!(t.total(1), [6, 4]);
        assert_eq!(t.own(1), [1, 0]);
        assert_eq!(t.children(1).collect::<Vec<_>>(), [2, 4, 5]);
        assert_eq!(t.children(2).collect::<Vec<_>>(), [3]);
        assert_eq!(t.cut_rows(), 0);
        assert_eq!(t.nodes[3].depth, 3);
        assert_eq!(t.nodes[3].parent, 2);
        let st = t.starts(0);
        // a at 0 (3 wide), b at 3, c at 5 (0 wide in column 0).
        assert_eq!((st[2], st[4], st[5]), (0, 3, 5));
        assert_eq!(t.starts(1)[5], 0);
        assert_eq!(t.nodes[5].present, 0b10, "c only after");
        assert_eq!(t.nodes[1].present, 0b11);
        let vis = t.visible(&[1.0, 1.0], 2.5);
        assert_eq!(vis, [true, true, true, true, false, true]);
    }

    #[test]
    fn nodes_and_drawn_frames_are_bounded() {
        let mut p = Profile::new();
        p.add(FoldedStack::from_frames(["big", "deep"]), 1000);
        let n = MAX_TREE_NODES + 1000;
        for i in 0..n {
            p.add(FoldedStack::from_frames([format!("f{i:07}").as_str()]), 1);
        }
        let s = Series::from_profiles(&[p], Rewrite::default());
        let t = FrameTree::build(&s);
        assert_eq!(t.nodes.len(), MAX_TREE_NODES);
        // Rows past the bound end at the root, their value kept there.
        assert_eq!(t.cut_rows(), n + 3 - MAX_TREE_NODES);
        assert_eq!(t.total(0), [1000 + n as u64]);
        assert_eq!(t.own(0), [t.cut_rows() as u64]);
        let vis = t.visible(&[1.0], 0.1);
        assert_eq!(vis.iter().filter(|v| **v).count(), MAX_DRAWN_FRAMES);
        let big = t.nodes.iter().position(|n| n.name == "big").unwrap();
        assert!(vis[big] && vis[big + 1], "the widest frames are drawn");
    }

    #[test]
    fn labels_fit() {
        assert_eq!(fit_label("phase_two", 200.0), "phase_two");
        assert_eq!(fit_label("phase_two", 50.0), "phas..");
        assert_eq!(fit_label("phase_two", 10.0), "");
        assert_eq!(escape("a<b>&\"c\u{1}"), "a&lt;b&gt;&amp;&quot;c ");
        assert_eq!(escape("x\u{ffff}"), "x\u{fffd}");
    }
}
