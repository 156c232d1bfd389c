//! The host's accounts ([`crate::shared::accounts`]) as the BPF programs
//! see them: every table the programs share among users (the events' stack
//! map, the bounded form's off-CPU state, Python's code records) counts a
//! subordinate uid in its range owner's share, through `account_of` in
//! `bpf/walk.h`. The agent writes each range as the few prefixes covering
//! it into the `sub_uids` trie, and the lowest uid any range holds into
//! `sub_uid_min`, at start and whenever `/etc/subuid` changes.

use std::collections::HashMap;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::shared::accounts::{Accounts, SubRange};

/// Prefixes written at most: half of what the trie holds
/// (`EMBERD_SUB_UID_PREFIXES` in `bpf/emberd.h`), so that a new set fits
/// beside the old one it replaces. 12 prefixes cover a range as useradd
/// makes them: 16,384 ranges (`shared::accounts`' bound) in 196,608.
const MAX_PREFIXES: usize = 262_144;

/// A trie key: the prefix length in bits, then the uid big-endian.
type Key = [u8; 8];

/// [`Accounts`], with the BPF maps that hold them kept the same.
#[derive(Debug)]
pub struct BpfAccounts {
    accounts: Accounts,
    trie: MapHandle,
    min: MapHandle,
    /// What the trie holds now.
    written: HashMap<Key, u32>,
    /// What `sub_uid_min` holds now (`u32::MAX`: no range).
    min_written: u32,
}

impl BpfAccounts {
    /// The host's accounts, written into `trie` (`sub_uids`) and `min`
    /// (`sub_uid_min`).
    pub fn new(trie: MapHandle, min: MapHandle) -> Self {
        let mut me = Self {
            accounts: Accounts::system(),
            trie,
            min,
            written: HashMap::new(),
            min_written: u32::MAX,
        };
        me.write();
        me
    }

    /// The account `uid` counts in ([`Accounts::account`]).
    pub fn account(&self, uid: u32) -> u32 {
        self.accounts.account(uid)
    }

    /// Reads `/etc/subuid` again if it changed ([`Accounts::refresh`]),
    /// and writes the maps again if so.
    pub fn refresh(&mut self) {
        if self.accounts.refresh() {
            self.write();
        }
    }

    /// Makes the maps hold the ranges: the new prefixes first, then the
    /// old ones gone, with the lowest uid lowered before and raised after,
    /// so that a uid of a range never misses it in between.
    fn write(&mut self) {
        let (want, left_out) = prefixes(self.accounts.ranges());
        if left_out > 0 {
            tracing::warn!(
                "/etc/subuid: {left_out} uid prefixes past the BPF trie's {MAX_PREFIXES}: the uids they cover count as users of their own in the BPF tables' shares"
            );
        }
        let new_min = want
            .keys()
            .map(|k| u32::from_be_bytes([k[4], k[5], k[6], k[7]]))
            .min()
            .unwrap_or(u32::MAX);
        self.set_min(self.min_written.min(new_min));
        let mut failed = 0;
        let mut written = HashMap::with_capacity(want.len());
        for (key, owner) in want {
            if self.written.get(&key) == Some(&owner)
                || self
                    .trie
                    .update(&key, &owner.to_ne_bytes(), MapFlags::ANY)
                    .is_ok()
            {
                written.insert(key, owner);
            } else {
                failed += 1;
            }
        }
        if failed > 0 {
            tracing::warn!(
                "{failed} subuid range prefixes could not be written to the BPF trie sub_uids: the uids they cover count as users of their own in the BPF tables' shares until /etc/subuid changes"
            );
        }
        for key in self.written.keys() {
            if !written.contains_key(key) {
                let _ = self.trie.delete(key);
            }
        }
        self.set_min(new_min);
        self.written = written;
    }

    fn set_min(&mut self, uid: u32) {
        match self
            .min
            .update(&0u32.to_ne_bytes(), &uid.to_ne_bytes(), MapFlags::ANY)
        {
            Ok(()) => self.min_written = uid,
            Err(err) => {
                tracing::warn!("writing the lowest subordinate uid to sub_uid_min: {err}")
            }
        }
    }
}

/// The trie's keys and owners for `ranges` (at most [`MAX_PREFIXES`]),
/// and how many prefixes were left out past that.
fn prefixes(ranges: &[SubRange]) -> (HashMap<Key, u32>, usize) {
    let mut keys = HashMap::new();
    let mut left_out = 0;
    for r in ranges {
        for (start, len) in cover(r.start, r.count) {
            if keys.len() >= MAX_PREFIXES {
                left_out += 1;
                continue;
            }
            let mut key = [0u8; 8];
            key[..4].copy_from_slice(&len.to_ne_bytes());
            key[4..].copy_from_slice(&start.to_be_bytes());
            keys.insert(key, r.owner);
        }
    }
    (keys, left_out)
}

/// The fewest (first uid, prefix length) blocks covering `start..start +
/// count`, each aligned to its size: one for a range of 65,536 at a
/// multiple of 65,536, at most 62 for any range.
fn cover(start: u32, count: u32) -> Vec<(u32, u32)> {
    let (mut at, end) = (u64::from(start), u64::from(start) + u64::from(count));
    let mut blocks = Vec::new();
    while at < end {
        // The largest block aligned at `at` that ends within the range.
        let mut size = if at == 0 {
            1u64 << 32
        } else {
            1u64 << at.trailing_zeros()
        };
        while at + size > end {
            size >>= 1;
        }
        blocks.push((at as u32, 32 - size.trailing_zeros()));
        at += size;
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aligned_range_is_one_prefix() {
        assert_eq!(cover(65_536 * 6, 65_536), vec![(393_216, 16)]);
        assert_eq!(cover(100_000, 1), vec![(100_000, 32)]);
    }

    #[test]
    fn any_range_is_covered_exactly_by_few_prefixes() {
        for (start, count) in [
            (100_000u32, 65_536u32),
            (1, u32::MAX - 1),
            (u32::MAX, 1),
            (3, 5),
            (1_000_000, 1_000_000_000),
        ] {
            let blocks = cover(start, count);
            assert!(blocks.len() <= 62, "{start} {count}: {}", blocks.len());
            let mut at = u64::from(start);
            for (first, len) in blocks {
                assert_eq!(u64::from(first), at, "{start} {count}: contiguous");
                let size = 1u64 << (32 - len);
                assert_eq!(u64::from(first) % size, 0, "aligned");
                at += size;
            }
            assert_eq!(
                at,
                u64::from(start) + u64::from(count),
                "{start} {count}: exact"
            );
        }
    }

    #[test]
    fn prefixes_past_the_bound_are_left_out_and_counted() {
        let ranges: Vec<SubRange> = (0..(MAX_PREFIXES as u32 + 10))
            .map(|i| SubRange {
                start: 100_000 + 2 * i,
                count: 1,
                owner: 1000,
            })
            .collect();
        let (keys, left_out) = prefixes(&ranges);
        assert_eq!(keys.len(), MAX_PREFIXES);
        assert_eq!(left_out, 10);
    }
}
