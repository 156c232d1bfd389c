//! JSON for the web page and for scripts: a profile as a tree
//! (`/profile.json`) and the history's totals per slot (`/heatmap.json`).

use std::collections::HashMap;

use serde::Serialize;

use crate::query::profile::Profile;
use crate::store::TimeSlot;

/// A profile as a tree, flat and in pre-order, so a browser can draw and
/// zoom 50,000 stacks without building objects per node: `names` holds each
/// distinct frame name once; node `i` is `nodes[i] = [name, total, self,
/// parent]` (indices into `names` and `nodes`; the root's parent is -1, its
/// name "all"). Children follow their parent, heaviest first.
#[derive(Debug, Serialize)]
pub struct Tree {
    /// The event's name (`cpu`, `offcpu`, ...).
    pub event: &'static str,
    /// The unit of the values (`samples`, `us`, `bytes`, ...).
    pub unit: &'static str,
    /// The unit to show them in and the factor to it (`ms`, 0.001).
    pub display: (&'static str, f64),
    /// Window, unix seconds.
    pub from: u64,
    /// Window end, unix seconds (exclusive).
    pub to: u64,
    /// Distinct frame names.
    pub names: Vec<String>,
    /// `[name, total, self, parent]` per node, pre-order.
    pub nodes: Vec<[i64; 4]>,
}

#[derive(Default)]
struct Node {
    name: usize,
    total: u64,
    own: u64,
    children: HashMap<usize, usize>,
}

impl Tree {
    /// The tree of `profile`.
    pub fn build(
        profile: &Profile,
        event: &'static str,
        unit: &'static str,
        display: (&'static str, f64),
        window: (u64, u64),
    ) -> Self {
        let mut names: Vec<String> = vec!["all".into()];
        let mut name_ids: HashMap<String, usize> = HashMap::new();
        let mut arena: Vec<Node> = vec![Node::default()];
        for (stack, value) in profile.sorted() {
            arena[0].total = arena[0].total.saturating_add(value);
            let mut at = 0;
            for frame in stack.frames() {
                let name = match name_ids.get(frame) {
                    Some(&id) => id,
                    None => {
                        names.push(frame.to_owned());
                        name_ids.insert(frame.to_owned(), names.len() - 1);
                        names.len() - 1
                    }
                };
                let next = match arena[at].children.get(&name) {
                    Some(&c) => c,
                    None => {
                        arena.push(Node {
                            name,
                            ..Node::default()
                        });
                        let c = arena.len() - 1;
                        arena[at].children.insert(name, c);
                        c
                    }
                };
                at = next;
                arena[at].total = arena[at].total.saturating_add(value);
            }
            arena[at].own = arena[at].own.saturating_add(value);
        }
        let mut nodes = Vec::with_capacity(arena.len());
        // Pre-order, heaviest child first (ties by name, for stable output).
        let mut todo: Vec<(usize, i64)> = vec![(0, -1)];
        while let Some((i, parent)) = todo.pop() {
            let n = &arena[i];
            nodes.push([n.name as i64, n.total as i64, n.own as i64, parent]);
            let me = nodes.len() as i64 - 1;
            let mut kids: Vec<usize> = n.children.values().copied().collect();
            kids.sort_by(|&a, &b| {
                arena[b]
                    .total
                    .cmp(&arena[a].total)
                    .then_with(|| names[arena[a].name].cmp(&names[arena[b].name]))
            });
            // Pushed in reverse so the heaviest is popped first.
            todo.extend(kids.into_iter().rev().map(|k| (k, me)));
        }
        Self {
            event,
            unit,
            display,
            from: window.0,
            to: window.1,
            names,
            nodes,
        }
    }
}

/// The history's totals per slot for the heat map, and per 20 ms tick
/// where the store keeps them.
#[derive(Debug, Serialize)]
pub struct Heatmap {
    /// The event's name.
    pub event: &'static str,
    /// The unit of the values.
    pub unit: &'static str,
    /// Window, unix seconds.
    pub from: u64,
    /// Window end, unix seconds (exclusive).
    pub to: u64,
    /// Where the history begins, unix seconds: the daemon's start, or
    /// later once retention or the memory budget dropped the oldest
    /// slots; `null` before the first drain. A window reaching further
    /// back shows no samples there because none were recorded, which
    /// the page marks.
    pub history_from: Option<u64>,
    /// `[start, seconds, value]` per slot, oldest first: 1 s slots for the
    /// recent history, 10 s and 60 s slots for older (the store's
    /// resolution there).
    pub slots: Vec<[u64; 3]>,
    /// Milliseconds of a tick in `ticks`.
    pub tick_ms: u64,
    /// `[start, [value per tick, ...]]` for the 1 s slots that keep their
    /// samples by tick (CPU samples of the recent history, by default the
    /// last 5 minutes): FlameScope's rows. A selection within such a
    /// second (`from=START.ms&to=...`) reads exactly the samples of its
    /// ticks.
    pub ticks: Vec<(u64, Vec<u64>)>,
}

impl Heatmap {
    /// From a store's timeline.
    pub fn new(
        event: &'static str,
        unit: &'static str,
        window: (u64, u64),
        slots: &[TimeSlot],
    ) -> Self {
        Self {
            event,
            unit,
            from: window.0,
            to: window.1,
            history_from: None,
            slots: slots.iter().map(|s| [s.start, s.len, s.value]).collect(),
            tick_ms: crate::store::TICK_MS,
            ticks: slots
                .iter()
                .filter(|s| !s.ticks.is_empty())
                .map(|s| (s.start, s.ticks.clone()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::profile::test_profile;

    #[test]
    fn tree_is_pre_order_heaviest_first_with_self_values() {
        let p = test_profile(&[("a;b", 3), ("a;c", 5), ("a", 1), ("d", 2)]);
        let t = Tree::build(&p, "cpu", "samples", ("samples", 1.0), (0, 1));
        let named: Vec<(String, i64, i64, i64)> = t
            .nodes
            .iter()
            .map(|n| (t.names[n[0] as usize].clone(), n[1], n[2], n[3]))
            .collect();
        assert_eq!(
            named,
            vec![
                ("all".into(), 11, 0, -1),
                ("a".into(), 9, 1, 0),
                ("c".into(), 5, 5, 1),
                ("b".into(), 3, 3, 1),
                ("d".into(), 2, 2, 0),
            ]
        );
    }
}
