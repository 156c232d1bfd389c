//! Interned frames, stacks and names: a slot holds small ids, not strings.

use std::sync::Arc;

use crate::symbolize::Frame;

/// Index of an interned frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(u32);

/// Index of an interned stack (frames root first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(u32);

/// Index of an interned name (comm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NameId(u32);

/// Hash maps of the store: ahash (randomly keyed, so crafted symbol names
/// cannot flood a bucket) instead of SipHash, which took a quarter of the
/// collector's time interning every frame of every drained sample.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;

/// Frames, stacks and names, each stored once.
#[derive(Debug, Default)]
pub struct Interner {
    frames: Vec<Frame>,
    frame_ids: FastMap<Frame, FrameId>,
    stacks: Vec<Arc<[FrameId]>>,
    stack_ids: FastMap<Arc<[FrameId]>, StackId>,
    names: Vec<Arc<str>>,
    name_ids: FastMap<Arc<str>, NameId>,
    bytes: usize,
}

/// Estimated bytes of one hash-map slot beyond its key and value (control
/// byte, load factor) plus a vector slot.
const MAP_OVERHEAD: usize = 16;

impl Interner {
    /// The id of `frame`, interning it.
    pub fn frame(&mut self, frame: &Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(frame) {
            return id;
        }
        let id = FrameId(self.frames.len() as u32);
        self.bytes += 2 * std::mem::size_of::<Frame>()
            + MAP_OVERHEAD
            + frame.name.len()
            + frame.file.as_ref().map_or(0, |f| f.len());
        self.frames.push(frame.clone());
        self.frame_ids.insert(frame.clone(), id);
        id
    }

    /// The id of a stack of frame ids.
    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.stack_ids.get(frames) {
            return id;
        }
        let id = StackId(self.stacks.len() as u32);
        let arc: Arc<[FrameId]> = Arc::from(frames);
        self.bytes += std::mem::size_of_val(frames) + 3 * 16 + MAP_OVERHEAD;
        self.stacks.push(arc.clone());
        self.stack_ids.insert(arc, id);
        id
    }

    /// The id of a name.
    pub fn name(&mut self, name: &Arc<str>) -> NameId {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = NameId(self.names.len() as u32);
        self.bytes += name.len() + 2 * 16 + MAP_OVERHEAD;
        self.names.push(name.clone());
        self.name_ids.insert(name.clone(), id);
        id
    }

    /// The frame of an id.
    pub fn get_frame(&self, id: FrameId) -> &Frame {
        &self.frames[id.0 as usize]
    }

    /// The frame ids of a stack.
    pub fn get_stack(&self, id: StackId) -> &[FrameId] {
        &self.stacks[id.0 as usize]
    }

    /// The frame ids of a stack, shared (for copies that outlive a lock).
    pub fn get_stack_arc(&self, id: StackId) -> Arc<[FrameId]> {
        self.stacks[id.0 as usize].clone()
    }

    /// The name of an id.
    pub fn get_name(&self, id: NameId) -> &Arc<str> {
        &self.names[id.0 as usize]
    }

    /// Estimated heap bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of interned stacks.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }
}
