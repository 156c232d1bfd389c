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

/// Index of an interned thread (process, thread and their names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(u32);

/// A thread as the store counts it: who ran, under which names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadKey {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The thread's name.
    pub thread_comm: NameId,
    /// The process's name.
    pub process_comm: NameId,
}

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
    threads: Vec<ThreadKey>,
    thread_ids: FastMap<ThreadKey, ThreadId>,
    bytes: usize,
}

/// Bytes of a heap allocation of `n` bytes: glibc rounds to 16 and adds 8.
pub(crate) fn heap_bytes(n: usize) -> usize {
    (n + 8).next_multiple_of(16)
}

/// Bytes of a hash map's table: its buckets (a quarter to an eighth more
/// than its capacity) of key, value and a control byte each.
pub(crate) fn map_bytes<K, V>(m: &FastMap<K, V>) -> usize {
    if m.capacity() == 0 {
        return 0;
    }
    let buckets = (m.capacity() * 8 / 7).next_power_of_two();
    buckets * (std::mem::size_of::<(K, V)>() + 1)
}

impl Interner {
    /// The id of `frame`, interning it.
    pub fn frame(&mut self, frame: &Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(frame) {
            return id;
        }
        let id = FrameId(self.frames.len() as u32);
        // The names' own allocations (the frame structs are counted by
        // capacity in `bytes`).
        self.bytes += heap_bytes(16 + frame.name.len())
            + frame.file.as_ref().map_or(0, |f| heap_bytes(16 + f.len()));
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
        self.bytes += heap_bytes(16 + std::mem::size_of_val(frames));
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
        self.bytes += heap_bytes(16 + name.len());
        self.names.push(name.clone());
        self.name_ids.insert(name.clone(), id);
        id
    }

    /// The id of a thread under its names.
    pub fn thread(&mut self, key: ThreadKey) -> ThreadId {
        if let Some(&id) = self.thread_ids.get(&key) {
            return id;
        }
        let id = ThreadId(self.threads.len() as u32);
        self.threads.push(key);
        self.thread_ids.insert(key, id);
        id
    }

    /// The thread of an id.
    pub fn get_thread(&self, id: ThreadId) -> ThreadKey {
        self.threads[id.0 as usize]
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

    /// Estimated heap bytes: the tables by their capacity, and what their
    /// entries point to.
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.bytes
            + self.frames.capacity() * size_of::<Frame>()
            + map_bytes(&self.frame_ids)
            + self.stacks.capacity() * size_of::<Arc<[FrameId]>>()
            + map_bytes(&self.stack_ids)
            + self.names.capacity() * size_of::<Arc<str>>()
            + map_bytes(&self.name_ids)
            + self.threads.capacity() * size_of::<ThreadKey>()
            + map_bytes(&self.thread_ids)
    }

    /// Number of interned stacks.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }
}
