//! Where named addresses are cached: two generations, so that a full cache
//! forgets only what no drain has asked for lately.
//!
//! A cache that is emptied when full makes the next drain name every live
//! address anew: the ELF worker re-opens and re-parses the DWARF of every
//! file in use at once, a burst of CPU and of resident memory (the soak saw
//! RSS 3-5 MiB above its neighbours in the minutes a cache was emptied).
//! Here a full young generation becomes the old one and the previous old
//! one is dropped; an entry found in the old generation moves back to the
//! young one. What is dropped is what was not used for a whole generation.

use std::hash::Hash;

use crate::shared::FastMap;

/// What a cached value costs in bytes, about: the byte bound of a
/// [`GenerationalCache`] counts it, so that entries with long names (a
/// user's binary can have thousands of 4 KiB names) cannot hold many times
/// what an entry count assumed.
pub trait Weigh {
    /// Bytes held, about.
    fn weight(&self) -> usize;
}

/// A bounded map whose entries survive as long as they are used (see the
/// module's doc). A generation holds at most `generation` entries and
/// `generation_bytes` of their [`Weigh::weight`], plus whatever a single
/// [`GenerationalCache::make_room`] call's batch adds beyond that.
#[derive(Debug)]
pub struct GenerationalCache<K, V> {
    young: FastMap<K, V>,
    old: FastMap<K, V>,
    generation: usize,
    generation_bytes: usize,
    young_bytes: usize,
    old_bytes: usize,
    rotations: u64,
}

impl<K: Hash + Eq, V: Weigh> GenerationalCache<K, V> {
    /// An empty cache of `generation` entries (at least 1) and
    /// `generation_bytes` per generation.
    pub fn new(generation: usize, generation_bytes: usize) -> Self {
        Self {
            young: FastMap::default(),
            old: FastMap::default(),
            generation: generation.max(1),
            generation_bytes,
            young_bytes: 0,
            old_bytes: 0,
            rotations: 0,
        }
    }

    /// Makes sure `n` entries can be promoted or inserted without a
    /// rotation: if the young generation cannot take them (or already
    /// holds its bytes), it becomes the old one. Call it before a batch
    /// whose entries must all stay reachable until the batch is done:
    /// nothing is dropped until the next call.
    pub fn make_room(&mut self, n: usize) {
        if self.young.len() + n > self.generation || self.young_bytes >= self.generation_bytes {
            self.old = std::mem::take(&mut self.young);
            self.old_bytes = std::mem::take(&mut self.young_bytes);
            self.rotations += 1;
        }
    }

    /// Whether `key` is cached; moves it to the young generation if it was
    /// in the old one.
    pub fn touch(&mut self, key: &K) -> bool {
        if self.young.contains_key(key) {
            return true;
        }
        match self.old.remove_entry(key) {
            Some((k, v)) => {
                let w = v.weight();
                self.old_bytes -= w;
                self.young_bytes += w;
                self.young.insert(k, v);
                true
            }
            None => false,
        }
    }

    /// The entry of `key`, moved to the young generation if it was in the
    /// old one.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        if self.touch(key) {
            self.young.get(key)
        } else {
            None
        }
    }

    /// The entry of `key`, wherever it is, without moving it.
    pub fn peek(&self, key: &K) -> Option<&V> {
        self.young.get(key).or_else(|| self.old.get(key))
    }

    /// Caches `value` under `key` in the young generation.
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(v) = self.old.remove(&key) {
            self.old_bytes -= v.weight();
        }
        self.young_bytes += value.weight();
        if let Some(v) = self.young.insert(key, value) {
            self.young_bytes -= v.weight();
        }
    }

    /// Bytes held, both generations, by [`Weigh::weight`].
    pub fn bytes(&self) -> usize {
        self.young_bytes + self.old_bytes
    }

    /// Entries held, both generations.
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Times the young generation became the old one (and the old one was
    /// dropped).
    #[cfg(test)]
    pub fn rotations(&self) -> u64 {
        self.rotations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Weigh for i32 {
        fn weight(&self) -> usize {
            1
        }
    }

    impl Weigh for u32 {
        fn weight(&self) -> usize {
            1
        }
    }

    impl Weigh for String {
        fn weight(&self) -> usize {
            self.len()
        }
    }

    /// Heavy entries rotate the cache by bytes long before their count
    /// would: what it holds stays within two generations' bytes plus a
    /// batch.
    #[test]
    fn heavy_entries_are_bounded_by_bytes() {
        let mut c = GenerationalCache::new(1000, 16 << 10);
        for batch in 0..100 {
            c.make_room(4);
            for k in 0..4 {
                c.insert(batch * 4 + k, "x".repeat(4096));
            }
            assert!(
                c.bytes() <= 2 * (16 << 10) + 4 * 4096,
                "{} bytes",
                c.bytes()
            );
        }
        assert!(c.len() <= 12, "{} entries", c.len());
        let held: usize = (0..400).filter_map(|k| c.peek(&k)).map(|v| v.len()).sum();
        assert_eq!(held, c.bytes());
    }

    #[test]
    fn entries_in_use_survive_rotations_and_unused_ones_are_dropped() {
        let mut c = GenerationalCache::new(4, usize::MAX);
        c.make_room(4);
        for k in 0..4 {
            c.insert(k, k * 10);
        }
        assert_eq!(c.rotations(), 0);
        // A batch of four: 0 and 1 again, 10 and 11 new. The young
        // generation is full, so it rotates first.
        c.make_room(4);
        assert_eq!(c.rotations(), 1);
        assert_eq!(c.get(&0), Some(&0));
        assert!(c.touch(&1));
        c.insert(10, 100);
        c.insert(11, 110);
        // 2 and 3 are only in the old generation now, still reachable.
        assert_eq!(c.peek(&2), Some(&20));
        assert_eq!(c.len(), 6);
        // The next full batch drops them: they were not used for a whole
        // generation. 0, 1, 10, 11 were, and survive if asked for again.
        c.make_room(2);
        assert_eq!(c.rotations(), 2);
        assert_eq!(c.get(&10), Some(&100));
        assert!(c.touch(&0));
        c.make_room(3);
        assert_eq!(c.rotations(), 3);
        assert_eq!(c.peek(&2), None);
        assert_eq!(c.peek(&3), None);
        assert_eq!(c.peek(&10), Some(&100));
        assert_eq!(c.peek(&0), Some(&0));
        assert_eq!(
            c.peek(&1),
            None,
            "1 was not asked for in the last generation"
        );
        assert!(c.len() <= 8);
    }

    #[test]
    fn a_batch_never_loses_what_it_made_room_for() {
        let mut c = GenerationalCache::new(3, usize::MAX);
        for round in 0..10u32 {
            let keys: Vec<u32> = (round..round + 3).collect();
            c.make_room(keys.len());
            for k in &keys {
                if !c.touch(k) {
                    c.insert(*k, *k);
                }
            }
            for k in &keys {
                assert_eq!(c.peek(k), Some(k), "round {round}");
            }
            assert!(c.len() <= 6);
        }
    }
}
