//! Interned frames, stacks and names: a slot holds small ids, not strings.
//!
//! Each table keeps its values once, in a vector, and finds them by a hash
//! table of indices into it (`hashbrown::HashTable<u32>`): five bytes a
//! bucket where a map keyed by the value kept a second copy of it.
//!
//! - A frame is kept as ids of its interned strings and module (20 bytes,
//!   not a 56-byte [`Frame`]): the symbolizer names each address on its
//!   own, so the many lines of one function, each a frame, brought one
//!   copy of its name and file each.
//! - Stacks are a prefix tree: a stack is its leaf node, a node is
//!   (parent, frame), so stacks that share their root-side frames (every
//!   stack of a process shares `_start`, `main`, ...) share their nodes.

use std::hash::Hash;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::shared::{Frame, FrameKind, Module};

/// Index of an interned frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(u32);

/// Index of an interned stack (frames root first): its leaf node in the
/// prefix tree; 0 is the empty stack.
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
    /// The process's systemd unit ("" if none).
    pub unit: NameId,
    /// The process's container id ("" if none).
    pub container: NameId,
    /// The process's executable ("" if unknown).
    pub exe: NameId,
    /// The account the thread's samples count in, as BPF read it with them
    /// ([`crate::symbolize::SymbolizedSample::account`]; a thread whose
    /// samples carry two accounts is kept as two rows; 0 for rows read
    /// back from queries and disk, which are not folded).
    pub account: u32,
}

use crate::shared::FastMap;

/// "No string" or "no module" in a [`StoredFrame`].
const NONE: u32 = u32::MAX;

/// A frame as the interner keeps it: its strings and module by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct StoredFrame {
    name: u32,
    file: u32,
    /// [`NONE`] for none (`Option<u32>` would make the struct 24 bytes).
    line: u32,
    module: u32,
    kind: FrameKind,
}

/// One node of the stack prefix tree: the stack `parent` with `frame`
/// added at its leaf end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Node {
    parent: u32,
    frame: FrameId,
}

/// The root node: the empty stack (its frame is never read).
const ROOT: Node = Node {
    parent: 0,
    frame: FrameId(u32::MAX),
};

/// Values stored once, found by an index table keyed by their hash.
#[derive(Debug)]
struct Table<T> {
    values: Vec<T>,
    index: HashTable<u32>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            index: HashTable::new(),
        }
    }
}

impl<T: Hash + Eq> Table<T> {
    /// The index of `value`, added (made by `own`) if missing.
    fn intern<Q>(
        &mut self,
        hasher: &ahash::RandomState,
        value: &Q,
        own: impl FnOnce(&Q) -> T,
    ) -> u32
    where
        Q: Hash + ?Sized,
        T: std::borrow::Borrow<Q>,
        Q: Eq,
    {
        let hash = hasher.hash_one(value);
        let values = &self.values;
        if let Some(&i) = self
            .index
            .find(hash, |&i| values[i as usize].borrow() == value)
        {
            return i;
        }
        let i = self.values.len() as u32;
        self.values.push(own(value));
        let values = &self.values;
        self.index
            .insert_unique(hash, i, |&j| hasher.hash_one(values[j as usize].borrow()));
        i
    }

    fn get(&self, i: u32) -> &T {
        &self.values[i as usize]
    }

    /// Bytes of the vector (by capacity) and of the index's buckets (an
    /// eighth more than its capacity, four bytes and a control byte each).
    fn bytes(&self) -> usize {
        let buckets = if self.index.capacity() == 0 {
            0
        } else {
            (self.index.capacity() * 8 / 7).next_power_of_two()
        };
        self.values.capacity() * std::mem::size_of::<T>() + buckets * 5
    }
}

/// A frame known by where its strings and module live, not by their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FrameIdentity {
    name: usize,
    file: usize,
    module: usize,
    line: u32,
    kind: FrameKind,
}

impl FrameIdentity {
    fn of(frame: &Frame) -> Self {
        Self {
            name: Arc::as_ptr(&frame.name) as *const u8 as usize,
            file: frame
                .file
                .as_ref()
                .map_or(0, |f| Arc::as_ptr(f) as *const u8 as usize),
            module: frame.module.as_ref().map_or(0, |m| Arc::as_ptr(m) as usize),
            line: frame.line.unwrap_or(NONE),
            kind: frame.kind,
        }
    }
}

/// Ids of the frames and names of one drain, found by the address of their
/// shared strings: the symbolizer hands every sample of an address the same
/// `Arc`s, so within a drain a pointer names its text. Hashing and comparing
/// the text of every frame of every sample was most of what a 32-frame Java
/// stack cost the daemon (`scripts/bench java`); a frame whose strings are
/// new (the first of the drain) is interned by its text as before.
///
/// Pointers identify strings only while those strings live: a memo serves
/// one batch of samples that stays borrowed while it is used, and is
/// [`cleared`](Self::clear) before the batch is dropped or the interner is
/// rebuilt (whose ids it would no longer match).
#[derive(Debug, Default)]
pub struct DrainMemo {
    frames: FastMap<FrameIdentity, FrameId>,
    names: FastMap<usize, NameId>,
    /// Stack nodes met in this drain: a small table that stays in the
    /// CPU's caches, where each probe of the whole prefix tree missed them.
    nodes: FastMap<Node, u32>,
    /// Whole stacks met in this drain, by their frames' identities: a
    /// thread sampled many times a drain brings the same stack each time.
    stacks: FastMap<Box<[FrameIdentity]>, StackId>,
    /// Frame identities `stacks` holds, against [`MEMO_STACK_FRAMES`].
    stack_frames: usize,
    /// The stack being looked up (a buffer kept between samples).
    key: Vec<FrameIdentity>,
}

/// Frames the whole stacks of one drain's memo may hold (32 bytes each):
/// past it, a drain's further stacks are interned frame by frame.
const MEMO_STACK_FRAMES: usize = 32 * 1024;

/// Entries a cleared memo keeps room for: one drain's distinct frames on a
/// busy host, without holding a burst's table for good.
const MEMO_KEPT: usize = 1024;

impl DrainMemo {
    /// Forgets every pointer (keeping a bounded table for the next drain).
    pub fn clear(&mut self) {
        self.frames.clear();
        self.names.clear();
        self.nodes.clear();
        self.stacks.clear();
        self.stack_frames = 0;
        self.frames.shrink_to(MEMO_KEPT);
        self.stacks.shrink_to(MEMO_KEPT);
        self.names.shrink_to(MEMO_KEPT);
        self.nodes.shrink_to(MEMO_KEPT);
    }

    /// Bytes of its tables.
    pub fn bytes(&self) -> usize {
        map_bytes(&self.frames)
            + map_bytes(&self.names)
            + map_bytes(&self.nodes)
            + map_bytes(&self.stacks)
            + self.stack_frames * std::mem::size_of::<FrameIdentity>()
            + self.key.capacity() * std::mem::size_of::<FrameIdentity>()
    }
}

/// Frames, stacks and names, each stored once.
#[derive(Debug)]
pub struct Interner {
    hasher: ahash::RandomState,
    frames: Table<StoredFrame>,
    nodes: Table<Node>,
    /// Names of threads and processes, and the frames' names and files.
    names: Table<Arc<str>>,
    modules: Table<Arc<Module>>,
    threads: Table<ThreadKey>,
    /// Bytes the names' and modules' strings hold.
    string_bytes: usize,
}

impl Default for Interner {
    fn default() -> Self {
        let mut nodes = Table::default();
        nodes.values.push(ROOT);
        Self {
            hasher: ahash::RandomState::new(),
            frames: Table::default(),
            nodes,
            names: Table::default(),
            modules: Table::default(),
            threads: Table::default(),
            string_bytes: 0,
        }
    }
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
        let stored = StoredFrame {
            name: self.name(&frame.name).0,
            file: frame.file.as_ref().map_or(NONE, |f| self.name(f).0),
            line: frame.line.filter(|&l| l != NONE).unwrap_or(NONE),
            module: frame.module.as_ref().map_or(NONE, |m| self.module(m)),
            kind: frame.kind,
        };
        FrameId(self.frames.intern(&self.hasher, &stored, |f| *f))
    }

    /// The id of `frame`, found by its strings' addresses in `memo` if it
    /// came earlier in the batch `memo` serves (see [`DrainMemo`]).
    fn frame_in(&mut self, memo: &mut DrainMemo, frame: &Frame) -> FrameId {
        let key = FrameIdentity::of(frame);
        if let Some(&id) = memo.frames.get(&key) {
            return id;
        }
        let id = self.frame(frame);
        memo.frames.insert(key, id);
        id
    }

    /// The id of a name, found by its address in `memo` if it came earlier
    /// in the batch `memo` serves.
    pub fn name_in(&mut self, memo: &mut DrainMemo, name: &Arc<str>) -> NameId {
        let key = Arc::as_ptr(name) as *const u8 as usize;
        if let Some(&id) = memo.names.get(&key) {
            return id;
        }
        let id = self.name(name);
        memo.names.insert(key, id);
        id
    }

    fn module(&mut self, module: &Arc<Module>) -> u32 {
        let before = self.modules.values.len();
        let id = self.modules.intern(&self.hasher, module, Arc::clone);
        if self.modules.values.len() > before {
            self.string_bytes += heap_bytes(16 + 48)
                + heap_bytes(16 + module.path.len())
                + module
                    .build_id
                    .as_ref()
                    .map_or(0, |b| heap_bytes(16 + b.len()));
        }
        id
    }

    /// The id of a stack of frame ids, root first.
    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        let mut node = 0;
        for &frame in frames {
            node = self.nodes.intern(
                &self.hasher,
                &Node {
                    parent: node,
                    frame,
                },
                |n| *n,
            );
        }
        StackId(node)
    }

    /// The id of a stack of frames, root first, found whole in `memo` if
    /// the batch `memo` serves brought it before, else interned frame by
    /// frame (`ids` is a buffer).
    pub fn frames_in(
        &mut self,
        memo: &mut DrainMemo,
        frames: &[Frame],
        ids: &mut Vec<FrameId>,
    ) -> StackId {
        let mut key = std::mem::take(&mut memo.key);
        key.clear();
        key.extend(frames.iter().map(FrameIdentity::of));
        let found = memo.stacks.get(key.as_slice()).copied();
        let id = found.unwrap_or_else(|| {
            ids.clear();
            ids.extend(frames.iter().map(|f| self.frame_in(memo, f)));
            let id = self.stack_in(memo, ids);
            if memo.stack_frames + key.len() <= MEMO_STACK_FRAMES {
                memo.stack_frames += key.len();
                memo.stacks.insert(key.as_slice().into(), id);
            }
            id
        });
        memo.key = key;
        id
    }

    /// The id of a stack of frame ids, root first, its nodes found in
    /// `memo` where this drain met them before.
    fn stack_in(&mut self, memo: &mut DrainMemo, frames: &[FrameId]) -> StackId {
        let mut node = 0;
        for &frame in frames {
            let key = Node {
                parent: node,
                frame,
            };
            node = match memo.nodes.get(&key) {
                Some(&n) => n,
                None => {
                    let n = self.nodes.intern(&self.hasher, &key, |n| *n);
                    memo.nodes.insert(key, n);
                    n
                }
            };
        }
        StackId(node)
    }

    /// The id of a name.
    pub fn name(&mut self, name: &Arc<str>) -> NameId {
        let before = self.names.values.len();
        let id = self.names.intern(&self.hasher, name, Arc::clone);
        if self.names.values.len() > before {
            self.string_bytes += heap_bytes(16 + name.len());
        }
        NameId(id)
    }

    /// The id of a thread under its names.
    pub fn thread(&mut self, key: ThreadKey) -> ThreadId {
        ThreadId(self.threads.intern(&self.hasher, &key, |k| *k))
    }

    /// The thread of an id.
    pub fn get_thread(&self, id: ThreadId) -> ThreadKey {
        *self.threads.get(id.0)
    }

    /// The stack `id` extends (its caller's) and its last frame; `None`
    /// for the empty stack.
    pub fn stack_parent(&self, id: StackId) -> Option<(StackId, FrameId)> {
        (id.0 != 0).then(|| {
            let n = self.nodes.get(id.0);
            (StackId(n.parent), n.frame)
        })
    }

    /// Estimated bytes a frame holds: its entry and its name's text.
    pub fn frame_bytes(&self, id: FrameId) -> usize {
        let f = self.frames.get(id.0);
        std::mem::size_of::<StoredFrame>() + self.names.get(f.name).len()
    }

    /// Estimated bytes of one stack node.
    pub const NODE_BYTES: usize = std::mem::size_of::<Node>() + 5;

    /// The frame of an id (its strings shared, not copied).
    pub fn get_frame(&self, id: FrameId) -> Frame {
        let f = self.frames.get(id.0);
        Frame {
            name: self.names.get(f.name).clone(),
            kind: f.kind,
            file: (f.file != NONE).then(|| self.names.get(f.file).clone()),
            line: (f.line != NONE).then_some(f.line),
            module: (f.module != NONE).then(|| self.modules.get(f.module).clone()),
        }
    }

    /// Appends the frame ids of a stack, root first, to `out`.
    pub fn stack_frames(&self, id: StackId, out: &mut Vec<FrameId>) {
        let start = out.len();
        let mut node = id.0;
        while node != 0 {
            let n = self.nodes.get(node);
            out.push(n.frame);
            node = n.parent;
        }
        out[start..].reverse();
    }

    /// The frame ids of a stack, root first, in a shared slice (for copies
    /// that outlive a lock).
    pub fn get_stack_arc(&self, id: StackId) -> Arc<[FrameId]> {
        let mut v = Vec::new();
        self.stack_frames(id, &mut v);
        Arc::from(v)
    }

    /// The name of an id.
    pub fn get_name(&self, id: NameId) -> &Arc<str> {
        self.names.get(id.0)
    }

    /// Estimated heap bytes: the tables by their capacity, and the strings
    /// their frames and names hold.
    pub fn bytes(&self) -> usize {
        self.string_bytes
            + self.frames.bytes()
            + self.nodes.bytes()
            + self.names.bytes()
            + self.modules.bytes()
            + self.threads.bytes()
    }

    /// Estimated bytes per table, for the daemon's debug log: frames,
    /// stack nodes, names (with their strings), threads.
    pub fn table_bytes(&self) -> [usize; 4] {
        [
            self.frames.bytes(),
            self.nodes.bytes(),
            self.names.bytes() + self.modules.bytes() + self.string_bytes,
            self.threads.bytes(),
        ]
    }

    /// Number of stack nodes (a stack and every stack it extends count one
    /// each, shared prefixes once).
    pub fn stack_count(&self) -> usize {
        self.nodes.values.len() - 1
    }
}

/// Copies stacks and threads from one interner into another (a collection
/// keeps what the slots still use), each old node, frame and thread once:
/// copying stack by stack re-interned every frame of every stack, thirty
/// string hashes a stack.
pub struct Copier<'a> {
    old: &'a Interner,
    nodes: FastMap<u32, u32>,
    frames: FastMap<FrameId, FrameId>,
    threads: FastMap<ThreadId, ThreadId>,
    chain: Vec<u32>,
}

impl<'a> Copier<'a> {
    /// A copier from `old`.
    pub fn new(old: &'a Interner) -> Self {
        Self {
            old,
            nodes: FastMap::default(),
            frames: FastMap::default(),
            threads: FastMap::default(),
            chain: Vec::new(),
        }
    }

    /// The id in `new` of the old interner's stack `id`.
    pub fn stack(&mut self, new: &mut Interner, id: StackId) -> StackId {
        // Up to the root or the nearest node already copied, then down.
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        let mut node = id.0;
        let mut top = 0;
        while node != 0 {
            if let Some(&copied) = self.nodes.get(&node) {
                top = copied;
                break;
            }
            chain.push(node);
            node = self.old.nodes.get(node).parent;
        }
        for &old_node in chain.iter().rev() {
            let old_frame = self.old.nodes.get(old_node).frame;
            let frame = match self.frames.get(&old_frame) {
                Some(&f) => f,
                None => {
                    let f = new.frame(&self.old.get_frame(old_frame));
                    self.frames.insert(old_frame, f);
                    f
                }
            };
            top = new
                .nodes
                .intern(&new.hasher, &Node { parent: top, frame }, |n| *n);
            self.nodes.insert(old_node, top);
        }
        self.chain = chain;
        StackId(top)
    }

    /// The id in `new` of the old interner's thread `id`.
    pub fn thread(&mut self, new: &mut Interner, id: ThreadId) -> ThreadId {
        if let Some(&t) = self.threads.get(&id) {
            return t;
        }
        let t = self.old.get_thread(id);
        let key = ThreadKey {
            thread_comm: new.name(self.old.get_name(t.thread_comm)),
            process_comm: new.name(self.old.get_name(t.process_comm)),
            unit: new.name(self.old.get_name(t.unit)),
            container: new.name(self.old.get_name(t.container)),
            exe: new.name(self.old.get_name(t.exe)),
            ..t
        };
        let to = new.thread(key);
        self.threads.insert(id, to);
        to
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::FrameKind;

    #[test]
    fn a_stored_frame_is_20_bytes() {
        assert_eq!(std::mem::size_of::<StoredFrame>(), 20);
    }

    #[test]
    fn a_drain_memo_gives_the_ids_the_texts_would() {
        let mut plain = Interner::default();
        let mut memoized = Interner::default();
        let mut memo = DrainMemo::default();
        let main = Frame::new("main", FrameKind::User);
        let leaf = |line| Frame {
            line: Some(line),
            file: Some("Jobs.java".into()),
            ..Frame::new("Jobs.leafWork", FrameKind::Java)
        };
        // The same texts in other allocations, another line, another kind.
        let stacks = [
            vec![main.clone(), leaf(45)],
            vec![main.clone(), leaf(45)],
            vec![Frame::new("main", FrameKind::User), leaf(46)],
            vec![main.clone(), leaf(45)],
            vec![
                main.clone(),
                Frame::new("Jobs.leafWork", FrameKind::JavaInlined),
            ],
            vec![main.clone()],
        ];
        let mut ids = Vec::new();
        let expected: Vec<StackId> = stacks
            .iter()
            .map(|s| {
                let f: Vec<FrameId> = s.iter().map(|f| plain.frame(f)).collect();
                plain.stack(&f)
            })
            .collect();
        let got: Vec<StackId> = stacks
            .iter()
            .map(|s| memoized.frames_in(&mut memo, s, &mut ids))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(got[0], got[1]);
        assert_ne!(got[0], got[2]);
        assert_ne!(got[0], got[4]);
        assert_eq!(memoized.stack_count(), plain.stack_count());
        let a: Arc<str> = "worker".into();
        let b: Arc<str> = "worker".into();
        assert_eq!(
            memoized.name_in(&mut memo, &a),
            memoized.name_in(&mut memo, &b)
        );
        assert!(memo.bytes() > 0);
        memo.clear();
        assert!(memo.frames.is_empty() && memo.stacks.is_empty() && memo.stack_frames == 0);
    }

    #[test]
    fn stacks_share_prefixes_and_read_back_root_first() {
        let mut i = Interner::default();
        let f: Vec<FrameId> = ["main", "a", "b", "c"]
            .iter()
            .map(|n| i.frame(&Frame::new(*n, FrameKind::User)))
            .collect();
        assert_eq!(i.frame(&Frame::new("a", FrameKind::User)), f[1]);
        assert_ne!(i.frame(&Frame::new("a", FrameKind::Kernel)), f[1]);
        let abc = i.stack(&[f[0], f[1], f[2]]);
        let ac = i.stack(&[f[0], f[1], f[3]]);
        let a = i.stack(&[f[0], f[1]]);
        assert_eq!(i.stack(&[f[0], f[1], f[2]]), abc);
        assert_ne!(abc, ac);
        // main, main;a, main;a;b, main;a;c: four nodes for three stacks.
        assert_eq!(i.stack_count(), 4);
        let mut out = Vec::new();
        i.stack_frames(ac, &mut out);
        assert_eq!(out, [f[0], f[1], f[3]]);
        assert_eq!(&*i.get_stack_arc(a), &[f[0], f[1]]);
        let empty = i.stack(&[]);
        assert!(i.get_stack_arc(empty).is_empty());
        // A frame reads back whole; its strings are stored once however
        // many frames (lines of one function) name them.
        let module = Arc::new(Module {
            path: Arc::from("/usr/bin/x"),
            build_id: Some(Arc::from("abcd")),
        });
        let line = |n| Frame {
            name: Arc::from("hot"),
            kind: FrameKind::Inlined,
            file: Some(Arc::from("x.c")),
            line: Some(n),
            module: Some(module.clone()),
        };
        let (l1, l2) = (i.frame(&line(1)), i.frame(&line(2)));
        assert_ne!(l1, l2);
        assert_eq!(i.get_frame(l2), line(2));
        assert_eq!(i.frame(&line(2)), l2);
        let names = i.names.values.len();
        i.frame(&line(3));
        assert_eq!(i.names.values.len(), names);
        // A copy keeps what it is asked for, shared prefixes once.
        let mut new = Interner::default();
        let mut copy = Copier::new(&i);
        let (c_abc, c_ac) = (copy.stack(&mut new, abc), copy.stack(&mut new, ac));
        assert_eq!(copy.stack(&mut new, abc), c_abc);
        let frames = |n: &Interner, s| {
            let mut v = Vec::new();
            n.stack_frames(s, &mut v);
            v.into_iter()
                .map(|f| n.get_frame(f).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(frames(&new, c_abc), ["main", "a", "b"]);
        assert_eq!(frames(&new, c_ac), ["main", "a", "c"]);
        assert_eq!(new.stack_count(), 4);
        // The same frame twice in a row (recursion) is two nodes.
        let rec = i.stack(&[f[0], f[0]]);
        assert_eq!(&*i.get_stack_arc(rec), &[f[0], f[0]]);
    }
}
