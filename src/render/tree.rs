//! The frame tree of a [`Series`]: what the differential and animated SVGs
//! draw. Each node is one frame under one path of callers, with its total
//! (inclusive) and self value in every column; children are sorted by name,
//! as flamegraph.pl merges them, so a frame keeps its place across columns.

use std::collections::HashMap;

use crate::compare::Series;

/// Frame height in pixels, as flamegraph.pl draws them.
pub const FRAME_H: f64 = 16.0;
/// Side padding in pixels.
pub const PAD: f64 = 10.0;

/// One frame under one path.
#[derive(Debug, Clone)]
pub struct TreeNode {
    /// Frame name (`all` for the root).
    pub name: String,
    /// Depth: 0 for the root.
    pub depth: usize,
    /// Inclusive value per column.
    pub total: Vec<u64>,
    /// Value of stacks ending here, per column.
    pub own: Vec<u64>,
    /// Columns some stack through this frame was recorded in (bit `c`),
    /// whatever normalization made of the values.
    pub present: u64,
    /// Children, sorted by name.
    pub children: Vec<usize>,
    /// Parent (the root is its own parent).
    pub parent: usize,
}

/// Frames in depth-first order (a node's subtree follows it), root first.
#[derive(Debug, Clone)]
pub struct FrameTree {
    /// The nodes; `nodes[0]` is the root.
    pub nodes: Vec<TreeNode>,
    columns: usize,
}

impl FrameTree {
    /// The tree of `series`.
    pub fn build(series: &Series) -> Self {
        let k = series.columns();
        let new = |name: &str, depth, parent| TreeNode {
            name: name.to_owned(),
            depth,
            total: vec![0; k],
            own: vec![0; k],
            present: 0,
            children: Vec::new(),
            parent,
        };
        let mut nodes = vec![new("all", 0, 0)];
        let mut index: HashMap<(usize, String), usize> = HashMap::new();
        for (stack, values, present) in series.rows_with_presence() {
            let mut at = 0;
            add(&mut nodes[0].total, values);
            nodes[0].present |= present;
            let frames = stack.as_str();
            if !frames.is_empty() {
                for f in frames.split(';') {
                    let next = match index.get(&(at, f.to_owned())) {
                        Some(&n) => n,
                        None => {
                            let n = nodes.len();
                            let depth = nodes[at].depth + 1;
                            nodes.push(new(f, depth, at));
                            nodes[at].children.push(n);
                            index.insert((at, f.to_owned()), n);
                            n
                        }
                    };
                    add(&mut nodes[next].total, values);
                    nodes[next].present |= present;
                    at = next;
                }
            }
            add(&mut nodes[at].own, values);
        }
        // Depth-first, children by name.
        let mut order = Vec::with_capacity(nodes.len());
        let mut todo = vec![0usize];
        while let Some(n) = todo.pop() {
            order.push(n);
            let mut ch = nodes[n].children.clone();
            ch.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
            todo.extend(ch.into_iter().rev());
        }
        let mut new_index = vec![0usize; nodes.len()];
        for (i, &old) in order.iter().enumerate() {
            new_index[old] = i;
        }
        let mut out: Vec<TreeNode> = order
            .iter()
            .map(|&old| {
                let mut n = nodes[old].clone();
                n.parent = new_index[n.parent];
                n.children = n.children.iter().map(|&c| new_index[c]).collect();
                n
            })
            .collect();
        for n in &mut out {
            n.children.sort_unstable();
        }
        Self {
            nodes: out,
            columns: k,
        }
    }

    /// Number of value columns.
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// Where each node starts in column `c`, in value units from the left
    /// edge: its parent's start plus its earlier siblings' totals.
    pub fn starts(&self, c: usize) -> Vec<u64> {
        let mut start = vec![0u64; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let mut x = start[i];
            for &ch in &n.children {
                start[ch] = x;
                x = x.saturating_add(self.nodes[ch].total[c]);
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
    /// pixels per value unit of each column. A node's children are never
    /// wider than it, so a hidden node hides its subtree. The root is always
    /// kept (an empty graph still has one).
    pub fn visible(&self, px_per_unit: &[f64], min_px: f64) -> Vec<bool> {
        let mut keep = vec![false; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if i == 0 {
                keep[0] = true;
                continue;
            }
            keep[i] = keep[n.parent]
                && n.total
                    .iter()
                    .zip(px_per_unit)
                    .any(|(&v, &s)| v > 0 && v as f64 * s >= min_px);
        }
        keep
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
    use crate::compare::Rewrite;
    use crate::profile::test_profile as profile;

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
        let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["all", "m", "a", "x", "b", "c"]);
        assert_eq!(t.nodes[0].total, [6, 4]);
        assert_eq!(t.nodes[1].total, [6, 4]);
        assert_eq!(t.nodes[1].own, [1, 0]);
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
    fn labels_fit() {
        assert_eq!(fit_label("phase_two", 200.0), "phase_two");
        assert_eq!(fit_label("phase_two", 50.0), "phas..");
        assert_eq!(fit_label("phase_two", 10.0), "");
        assert_eq!(escape("a<b>&\"c\u{1}"), "a&lt;b&gt;&amp;&quot;c ");
        assert_eq!(escape("x\u{ffff}"), "x\u{fffd}");
    }
}
