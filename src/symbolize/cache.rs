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

use crate::store::FastMap;

/// A bounded map whose entries survive as long as they are used (see the
/// module's doc). Holds at most `2 x generation` entries, plus whatever a
/// single [`GenerationalCache::make_room`] call asked room for beyond that.
#[derive(Debug)]
pub struct GenerationalCache<K, V> {
    young: FastMap<K, V>,
    old: FastMap<K, V>,
    generation: usize,
    rotations: u64,
}

impl<K: Hash + Eq, V> GenerationalCache<K, V> {
    /// An empty cache of `generation` entries per generation (at least 1).
    pub fn new(generation: usize) -> Self {
        Self {
            young: FastMap::default(),
            old: FastMap::default(),
            generation: generation.max(1),
            rotations: 0,
        }
    }

    /// Makes sure `n` entries can be promoted or inserted without a
    /// rotation: if the young generation cannot take them, it becomes the
    /// old one. Call it before a batch whose entries must all stay
    /// reachable until the batch is done: nothing is dropped until the
    /// next call.
    pub fn make_room(&mut self, n: usize) {
        if self.young.len() + n > self.generation {
            self.old = std::mem::take(&mut self.young);
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
        self.old.remove(&key);
        self.young.insert(key, value);
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

    #[test]
    fn entries_in_use_survive_rotations_and_unused_ones_are_dropped() {
        let mut c = GenerationalCache::new(4);
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
        let mut c = GenerationalCache::new(3);
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
