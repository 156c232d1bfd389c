//! Folding a query's rows: into folded lines ([`Query::fold_into`], for
//! folded text, pprof-less consumers and the line filters) or straight into
//! the call tree a flame graph draws ([`Query::fold_tree`]). Both name
//! frames and grouping frames alike, so the SVG of either is the same.

use std::fmt::Write;

use super::Query;
use crate::query::calltree::{CallTree, NodeId, TextId};
use crate::query::profile::{FoldedStack, Grouping, Profile};
use crate::shared::FastMap;
use crate::shared::Pid;
use crate::store::{FrameId, QueryResult, StackId};

/// The grouping frame of a folded line, by value: rows that share it and a
/// stack fold into one line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct GroupKey {
    name: Option<std::sync::Arc<str>>,
    pid: u32,
    tid: u32,
}

/// A row's service name, sharing the row's string where it is one.
fn service_of(row: &crate::store::Row) -> std::sync::Arc<str> {
    let w = &row.workload;
    let s = crate::shared::Workload::service(&w.unit, &w.container, &row.process_comm);
    if s.len() == w.unit.len() && *s == *w.unit {
        w.unit.clone()
    } else {
        std::sync::Arc::from(s.as_ref())
    }
}

impl Query {
    /// Rows merged by grouping frame and stack, values mapped by `scale`
    /// (those that become 0 left out): a line's text or path is then made
    /// once, not once per thread (an hour of a busy host is ten times more
    /// rows than lines).
    fn merge_rows(
        &self,
        result: &QueryResult,
        scale: &dyn Fn(u64) -> u64,
    ) -> FastMap<(GroupKey, StackId), u64> {
        let mut merged: FastMap<(GroupKey, StackId), u64> = Default::default();
        for row in &result.rows {
            let value = scale(row.value);
            if value == 0 {
                continue;
            }
            let key = match self.group {
                Grouping::Host => GroupKey::default(),
                Grouping::Process => GroupKey {
                    name: Some(row.process_comm.clone()),
                    ..Default::default()
                },
                Grouping::Pid => GroupKey {
                    name: Some(row.process_comm.clone()),
                    pid: row.pid.0,
                    tid: 0,
                },
                Grouping::Thread => GroupKey {
                    name: Some(row.thread_comm.clone()),
                    pid: row.pid.0,
                    tid: row.tid.0,
                },
                Grouping::Service => GroupKey {
                    name: Some(service_of(row)),
                    ..Default::default()
                },
            };
            *merged.entry((key, row.stack)).or_insert(0) += value;
        }
        merged
    }

    /// The grouping frame's text of `key` into `out` (cleared first).
    fn group_name(&self, key: &GroupKey, out: &mut String) {
        out.clear();
        if let Some(n) = &key.name {
            let _ = match self.group {
                Grouping::Pid => write!(out, "{n}-{}", Pid(key.pid)),
                Grouping::Thread => write!(out, "{n}-{}/{}", Pid(key.pid), Pid(key.tid)),
                _ => write!(out, "{n}"),
            };
        }
    }

    /// Folds rows into `profile`, mapping each value with `scale` (dropping
    /// those that become 0) and appending `suffix` to every frame but the
    /// grouping frame.
    pub fn fold_into(
        &self,
        profile: &mut Profile,
        result: &QueryResult,
        scale: &dyn Fn(u64) -> u64,
        suffix: &str,
    ) {
        let merged = self.merge_rows(result, scale);
        let mut stack_text: FastMap<StackId, String> = Default::default();
        // A frame's text is made once, however many stacks hold it.
        let mut frame_text: FastMap<FrameId, String> = Default::default();
        let mut name = String::new();
        for ((key, stack), value) in merged {
            let frames = stack_text.entry(stack).or_insert_with(|| {
                let mut text = String::new();
                for &id in result.frame_ids(stack) {
                    let Some(f) = result.frame(id) else { continue };
                    let part = frame_text.entry(id).or_insert_with(|| {
                        let mut part = String::new();
                        name.clear();
                        let _ = write!(name, "{}{suffix}", f.text(self.lines));
                        FoldedStack::push_frame(&mut part, &name);
                        part
                    });
                    if !text.is_empty() {
                        text.push(';');
                    }
                    text.push_str(part);
                }
                text
            });
            let mut text = String::with_capacity(frames.len() + 24);
            if key.name.is_some() {
                self.group_name(&key, &mut name);
                FoldedStack::push_frame(&mut text, &name);
            }
            if frames.is_empty() && text.is_empty() {
                text.push_str("[empty]");
            } else if !frames.is_empty() {
                if !text.is_empty() {
                    text.push(';');
                }
                text.push_str(frames);
            }
            if self.include.as_ref().is_some_and(|re| !re.is_match(&text))
                || self.exclude.as_ref().is_some_and(|re| re.is_match(&text))
            {
                continue;
            }
            profile.add(FoldedStack::from_text(text), value);
        }
    }

    /// Folds rows into `tree` as [`Query::fold_into`] folds them into
    /// lines, without making the lines: each stack's frames are looked up
    /// as text ids once and walked from its grouping frame's node. The
    /// line filters (`include`, `exclude`) need the line's text: with
    /// either set, fold into a profile and build the tree from it
    /// ([`crate::render::view::call_tree`] does).
    pub(crate) fn fold_tree(
        &self,
        tree: &mut CallTree,
        result: &QueryResult,
        scale: &dyn Fn(u64) -> u64,
        suffix: &str,
    ) {
        // Not a debug assertion: in a release build a wrong caller would
        // draw the graph with its filters silently left out.
        assert!(
            self.include.is_none() && self.exclude.is_none(),
            "fold_tree cannot apply include/exclude: fold the lines instead"
        );
        let merged = self.merge_rows(result, scale);
        // Each stack's frames as text ids, back to back.
        let mut stack_texts: FastMap<StackId, (u32, u32)> = Default::default();
        let mut texts: Vec<TextId> = Vec::new();
        let mut frame_text: FastMap<FrameId, TextId> = Default::default();
        let mut groups: FastMap<GroupKey, Option<NodeId>> = Default::default();
        let mut name = String::new();
        let empty = tree.intern("[empty]");
        for ((key, stack), value) in merged {
            let &mut (from, to) = stack_texts.entry(stack).or_insert_with(|| {
                let from = texts.len() as u32;
                for &id in result.frame_ids(stack) {
                    let Some(f) = result.frame(id) else { continue };
                    let text = *frame_text.entry(id).or_insert_with(|| {
                        name.clear();
                        let _ = write!(name, "{}{suffix}", f.text(self.lines));
                        tree.intern(&name)
                    });
                    // As in the folded line: an empty name leading the
                    // stack leaves no frame (nothing precedes its `;`).
                    if texts.len() as u32 == from && tree.text(text).is_empty() {
                        continue;
                    }
                    texts.push(text);
                }
                (from, texts.len() as u32)
            });
            // An empty grouping name (a nameless task) leaves no frame, as
            // in the folded line.
            let group = match key.name {
                Some(_) => *groups.entry(key).or_insert_with_key(|key| {
                    self.group_name(key, &mut name);
                    (!name.is_empty()).then(|| {
                        let text = tree.intern(&name);
                        tree.child(CallTree::ROOT, text)
                    })
                }),
                None => None,
            };
            let at = match group {
                Some(node) => node,
                None if from == to => tree.child(CallTree::ROOT, empty),
                None => CallTree::ROOT,
            };
            let mut at = at;
            for &text in &texts[from as usize..to as usize] {
                at = tree.child(at, text);
            }
            tree.add(at, value);
        }
    }
}
