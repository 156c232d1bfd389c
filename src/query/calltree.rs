//! The call tree a flame graph draws: every stack's frames merged by name
//! under their callers, as flamegraph.pl merges folded lines, and laid out
//! depth-first with children in name order.
//!
//! The daemon builds it straight from a query's interned ids
//! (`Query::fold_tree`): an uncached 30 s graph spent most of its time
//! making a string per folded line, hashing it, sorting the lines and
//! splitting them again into the frames it had started from.
//! [`CallTree::from_profile`] builds the same tree from folded text, for
//! `emberd record` and for queries that filter on the folded line.

use hashbrown::HashTable;

use crate::query::profile::{FoldedStack, Profile};
use crate::shared::FastMap;

/// A frame's text in a [`CallTree`], stored once however many nodes show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TextId(u32);

/// A node of a [`CallTree`]: one frame under one path of callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeId(u32);

#[derive(Debug, Clone, Copy)]
struct TreeNode {
    text: TextId,
    parent: NodeId,
    /// Value of stacks ending here.
    own: u64,
}

/// One frame as a flame graph places it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed<'a> {
    /// Frame name (`all` for the root).
    pub name: &'a str,
    /// Depth: 0 for the root.
    pub depth: u32,
    /// Value left of this frame from the graph's left edge (its x in
    /// value units).
    pub start: u64,
    /// Inclusive value.
    pub total: u64,
    /// Index after this frame's subtree in the layout (depth-first order),
    /// so a frame too thin to draw skips its callees in one step.
    pub end: u32,
}

/// Stacks merged into a tree of frame names (see the module doc).
#[derive(Debug)]
pub struct CallTree {
    /// Every text, back to back; `spans` gives each one's range.
    text: String,
    spans: Vec<(u32, u32)>,
    text_index: HashTable<u32>,
    hasher: ahash::RandomState,
    nodes: Vec<TreeNode>,
    children: FastMap<(NodeId, TextId), NodeId>,
}

impl Default for CallTree {
    fn default() -> Self {
        Self::new()
    }
}

impl CallTree {
    /// The root, `all`: every stack starts under it.
    pub const ROOT: NodeId = NodeId(0);

    /// A tree with only its root.
    pub fn new() -> Self {
        let mut t = Self {
            text: String::new(),
            spans: Vec::new(),
            text_index: HashTable::new(),
            hasher: ahash::RandomState::new(),
            nodes: Vec::new(),
            children: FastMap::default(),
        };
        let all = t.intern("all");
        t.nodes.push(TreeNode {
            text: all,
            parent: Self::ROOT,
            own: 0,
        });
        t
    }

    /// The id of a frame's text, made safe for the folded format as
    /// [`crate::query::profile::FoldedStack::push_frame`] does (`;` and line
    /// breaks replaced), so a tree and the folded text of the same stacks
    /// name frames alike.
    pub fn intern(&mut self, name: &str) -> TextId {
        if name.contains([';', '\n', '\r']) {
            let mut safe = String::new();
            FoldedStack::push_frame(&mut safe, name);
            return self.intern_safe(&safe);
        }
        self.intern_safe(name)
    }

    fn intern_safe(&mut self, name: &str) -> TextId {
        let hash = self.hasher.hash_one(name);
        let (text, spans) = (&self.text, &self.spans);
        let get = |i: u32| {
            let (a, b) = spans[i as usize];
            &text[a as usize..b as usize]
        };
        if let Some(&i) = self.text_index.find(hash, |&i| get(i) == name) {
            return TextId(i);
        }
        let i = u32::try_from(self.spans.len()).expect("fewer than 2^32 frame names");
        let start = self.text.len() as u32;
        self.text.push_str(name);
        self.spans.push((start, self.text.len() as u32));
        let (hasher, text, spans) = (&self.hasher, &self.text, &self.spans);
        self.text_index.insert_unique(hash, i, |&j| {
            let (a, b) = spans[j as usize];
            hasher.hash_one(&text[a as usize..b as usize])
        });
        TextId(i)
    }

    /// The text of an id.
    pub fn text(&self, id: TextId) -> &str {
        let (a, b) = self.spans[id.0 as usize];
        &self.text[a as usize..b as usize]
    }

    /// The node for frame `text` called from `parent`, added if new.
    pub fn child(&mut self, parent: NodeId, text: TextId) -> NodeId {
        let nodes = &mut self.nodes;
        *self.children.entry((parent, text)).or_insert_with(|| {
            nodes.push(TreeNode {
                text,
                parent,
                own: 0,
            });
            NodeId(u32::try_from(nodes.len() - 1).expect("fewer than 2^32 nodes"))
        })
    }

    /// Adds `value` to the stacks ending at `node`.
    pub fn add(&mut self, node: NodeId, value: u64) {
        let n = &mut self.nodes[node.0 as usize];
        n.own = n.own.saturating_add(value);
    }

    /// Number of distinct stacks with a value (the folded profile's lines).
    pub fn lines(&self) -> usize {
        self.nodes.iter().filter(|n| n.own > 0).count()
    }

    /// The tree of a folded profile, each line's frames leaf first if
    /// `reverse` (flamegraph.pl --reverse).
    pub fn from_profile(profile: &Profile, reverse: bool) -> Self {
        let mut t = Self::new();
        for (stack, value) in profile.iter() {
            let line = stack.as_str();
            let mut at = Self::ROOT;
            if !line.is_empty() {
                // Frames of a folded line hold no `;`: they need no escaping.
                if reverse {
                    for f in line.rsplit(';') {
                        let id = t.intern_safe(f);
                        at = t.child(at, id);
                    }
                } else {
                    for f in line.split(';') {
                        let id = t.intern_safe(f);
                        at = t.child(at, id);
                    }
                }
            }
            t.add(at, value);
        }
        t
    }

    /// The frames depth-first from the root, children in name order (a
    /// frame's own stacks before its callees, as sorted folded lines put
    /// them), each placed after its earlier siblings.
    pub fn layout(&self) -> Vec<Placed<'_>> {
        let n = self.nodes.len();
        // Nodes are added after their parents: one pass from the last
        // sums totals and subtree sizes up.
        let mut total: Vec<u64> = self.nodes.iter().map(|x| x.own).collect();
        let mut size = vec![1u32; n];
        let mut count = vec![0u32; n + 1];
        for i in (1..n).rev() {
            let p = self.nodes[i].parent.0 as usize;
            total[p] = total[p].saturating_add(total[i]);
            size[p] += size[i];
            count[p + 1] += 1;
        }
        // Children of each node, contiguous (node p's are first[p]..first[p+1]).
        for p in 0..n {
            count[p + 1] += count[p];
        }
        let first = count;
        let mut fill = first.clone();
        let mut kids = vec![0u32; n.saturating_sub(1)];
        for i in 1..n {
            let p = self.nodes[i].parent.0 as usize;
            kids[fill[p] as usize] = i as u32;
            fill[p] += 1;
        }
        for p in 0..n {
            let range = &mut kids[first[p] as usize..first[p + 1] as usize];
            if range.len() > 1 {
                range.sort_unstable_by(|&a, &b| {
                    self.text(self.nodes[a as usize].text)
                        .cmp(self.text(self.nodes[b as usize].text))
                });
            }
        }
        let mut out = Vec::with_capacity(n);
        // (node, depth, start)
        let mut todo: Vec<(u32, u32, u64)> = vec![(0, 0, 0)];
        while let Some((i, depth, start)) = todo.pop() {
            let at = out.len() as u32;
            let node = &self.nodes[i as usize];
            out.push(Placed {
                name: self.text(node.text),
                depth,
                start,
                total: total[i as usize],
                end: at + size[i as usize],
            });
            let ch = &kids[first[i as usize] as usize..first[i as usize + 1] as usize];
            let mut x = start.saturating_add(node.own);
            let from = todo.len();
            for &c in ch {
                todo.push((c, depth + 1, x));
                x = x.saturating_add(total[c as usize]);
            }
            // Popped last in, so reverse to visit them in name order.
            todo[from..].reverse();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::profile::test_profile as profile;

    fn names(t: &CallTree) -> Vec<(String, u32, u64, u64, u32)> {
        t.layout()
            .iter()
            .map(|p| (p.name.to_owned(), p.depth, p.start, p.total, p.end))
            .collect()
    }

    #[test]
    fn frames_merge_by_name_in_name_order() {
        let p = profile(&[("m;b", 2), ("m;a;x", 3), ("m", 1), ("z", 4), ("m;a", 5)]);
        let t = CallTree::from_profile(&p, false);
        assert_eq!(t.lines(), 5);
        assert_eq!(
            names(&t),
            [
                ("all".to_owned(), 0, 0, 15, 6),
                ("m".to_owned(), 1, 0, 11, 5),
                // m's own sample first, then a (5 own + x's 3), then b.
                ("a".to_owned(), 2, 1, 8, 4),
                ("x".to_owned(), 3, 6, 3, 4),
                ("b".to_owned(), 2, 9, 2, 5),
                ("z".to_owned(), 1, 11, 4, 6),
            ]
        );
        let r = CallTree::from_profile(&profile(&[("main;f;leaf", 3)]), true);
        let order: Vec<_> = names(&r).into_iter().map(|n| n.0).collect();
        assert_eq!(order, ["all", "leaf", "f", "main"]);
    }

    #[test]
    fn names_are_made_safe_and_stored_once() {
        let mut t = CallTree::new();
        let a = t.intern("f;g\nh");
        assert_eq!(t.text(a), "f:g h");
        assert_eq!(t.intern("f:g h"), a);
        let root_child = t.child(CallTree::ROOT, a);
        assert_eq!(t.child(CallTree::ROOT, a), root_child);
        let empty = CallTree::new();
        assert_eq!(names(&empty), [("all".to_owned(), 0, 0, 0, 1)]);
        assert_eq!(empty.lines(), 0);
    }
}
