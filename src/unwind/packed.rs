//! A file's table in the form the BPF unwinder reads (`bpf/emberd.h`): one
//! block of 32-bit words per file in the shared row array, each row four
//! bytes (the low 16 bits of its pc and the index of its rule), grouped by
//! the 64 KiB page of code it starts in, the rules themselves kept once for
//! every file in [`Rules`].
//!
//! Why: a row with its own pc and rule took eight bytes, and a build host's
//! tables (rustc's `librustc_driver` and `libLLVM`, clang's, cc1, cargo) are
//! 6.3 million rows. Rules repeat: the tables of a whole compile's files
//! name a few thousand distinct ones, so an index of 16 bits names any of
//! them; and a pc within a page needs 16 bits once the page is known. The
//! page also bounds the search: at most 16 halvings, not 21.

use std::collections::HashMap;

use super::table::{CfaRule, UnwindRow};

/// log2 of the code page rows are grouped by (`EMBERD_PAGE_SHIFT`).
pub const PAGE_SHIFT: u32 = 16;
/// Words before a block's page offsets (`EMBERD_TABLE_HEADER`).
pub const HEADER_WORDS: usize = 2;
/// Rules the shared rule table holds (`EMBERD_MAX_INFOS`): a row names one
/// by a 16-bit index.
pub const MAX_RULES: usize = 1 << 16;
/// Bytes of one rule (`struct unwind_info`): the rule table is 512 KiB of
/// kernel memory, allocated at load.
pub const RULE_BYTES: usize = 8;
/// The most rules one table may add to the shared table: real files name
/// at most a few hundred of their own (rustc's `librustc_driver` and
/// `libLLVM`, clang's libraries, cc1, cargo, node, libjvm, python3 and libc
/// name 1,906 together), so a crafted file cannot fill the table alone.
pub const MAX_NEW_RULES_PER_TABLE: usize = 4096;

/// Why a table could not be packed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PackError {
    /// The shared rule table is full: more distinct rules than a 16-bit
    /// index names, over every file's table.
    #[error("the shared table of unwind rules is full ({MAX_RULES} distinct rules)")]
    RulesFull,
    /// The table names more new rules than one table may add
    /// ([`MAX_NEW_RULES_PER_TABLE`]).
    #[error("the table names over {MAX_NEW_RULES_PER_TABLE} distinct rules of its own")]
    TooManyRules,
    /// The table has no rows.
    #[error("no rows to pack")]
    Empty,
}

/// One rule as the BPF map holds it (`struct unwind_info`): cfa_offset
/// (u32 LE), rbp_offset (i8), rule byte, 2 bytes of padding.
pub type RuleBytes = [u8; RULE_BYTES];

/// The rules every table's rows name by index (`unwind_infos`). Index 0 is
/// "no FDE covers the pc" (all zeros, as the BPF array starts).
///
/// Each rule counts the blocks naming it: a block's rules are held while
/// it is in the row array ([`Rules::release`] when its rows are), and a
/// rule no block names is forgotten and its index given to the next new
/// one. A pack that fails adds nothing. Rules were never taken back before
/// (issue 61): a local user's files of 4,097 distinct frame sizes each,
/// refused one after the other, left their 4,096 new rules each, and 16
/// such files filled the 65,536 for as long as the daemon ran.
#[derive(Debug)]
pub struct Rules {
    index: HashMap<RuleBytes, u16>,
    /// Each index's rule (for forgetting it) and the blocks naming it.
    slots: Vec<(RuleBytes, u32)>,
    /// Indices of forgotten rules, to reuse.
    free: Vec<u16>,
    /// Rules added since [`Rules::take_added`] was last called, for the
    /// BPF map.
    added: Vec<(u16, RuleBytes)>,
}

impl Default for Rules {
    fn default() -> Self {
        let mut index = HashMap::new();
        index.insert([0; RULE_BYTES], 0);
        Self {
            index,
            // Index 0 is named by every block and never forgotten.
            slots: vec![([0; RULE_BYTES], u32::MAX)],
            free: Vec::new(),
            added: Vec::new(),
        }
    }
}

impl Rules {
    /// Distinct rules held (index 0 included).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether only index 0 is held.
    pub fn is_empty(&self) -> bool {
        self.index.len() <= 1
    }

    /// The rules added since the last call, to be written to the BPF map
    /// before any row naming them is.
    pub fn take_added(&mut self) -> Vec<(u16, RuleBytes)> {
        std::mem::take(&mut self.added)
    }

    /// The index of `row`'s rule if it is held, adding nothing.
    fn known(&self, row: &UnwindRow) -> Option<u16> {
        if row.cfa_rule() == CfaRule::None {
            return Some(0);
        }
        self.index.get(&rule_bytes(row)).copied()
    }

    /// The index of `row`'s rule, added if new (noted in `fresh`, at most
    /// [`MAX_NEW_RULES_PER_TABLE`] of them).
    fn index_of(&mut self, row: &UnwindRow, fresh: &mut Vec<u16>) -> Result<u16, PackError> {
        if let Some(i) = self.known(row) {
            return Ok(i);
        }
        if fresh.len() >= MAX_NEW_RULES_PER_TABLE {
            return Err(PackError::TooManyRules);
        }
        let bytes = rule_bytes(row);
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[usize::from(i)] = (bytes, 0);
                i
            }
            None if self.slots.len() < MAX_RULES => {
                self.slots.push((bytes, 0));
                (self.slots.len() - 1) as u16
            }
            None => return Err(PackError::RulesFull),
        };
        self.index.insert(bytes, i);
        fresh.push(i);
        Ok(i)
    }

    /// Holds the rules block `words` names (once each); `fresh` were added
    /// for it and go to the BPF map.
    fn hold(&mut self, words: &[u32], fresh: &[u16]) {
        for i in named(words) {
            let n = &mut self.slots[usize::from(i)].1;
            *n = n.saturating_add(1);
        }
        self.added
            .extend(fresh.iter().map(|&i| (i, self.slots[usize::from(i)].0)));
    }

    /// Forgets rules added by a pack that failed.
    fn undo(&mut self, fresh: &[u16]) {
        for &i in fresh {
            self.forget(i);
        }
    }

    fn forget(&mut self, i: u16) {
        let bytes = self.slots[usize::from(i)].0;
        self.index.remove(&bytes);
        self.slots[usize::from(i)].1 = 0;
        self.free.push(i);
    }

    /// Lets go of the rules block `words` (packed by [`pack`], now out of
    /// the row array) names: a rule no block names is forgotten. Returns
    /// how many were.
    pub fn release(&mut self, words: &[u32]) -> usize {
        let mut forgotten = 0;
        for i in named(words) {
            let n = &mut self.slots[usize::from(i)].1;
            // u32::MAX: index 0, or a count that could not be kept.
            if *n == u32::MAX {
                continue;
            }
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.forget(i);
                forgotten += 1;
            }
        }
        forgotten
    }
}

/// The distinct rule indices a block's rows name, index 0 left out: one
/// pass over the rows with a bit per index (8 KiB), not a sort of a
/// million-row table's indices on the collector thread.
fn named(words: &[u32]) -> Vec<u16> {
    let pages = words.get(1).copied().unwrap_or(0) as usize;
    let rows = words.get(HEADER_WORDS + pages + 1..).unwrap_or(&[]);
    let mut seen = vec![0u64; MAX_RULES / 64];
    let mut out = Vec::new();
    for w in rows {
        let i = (w & 0xffff) as usize;
        let bit = 1u64 << (i % 64);
        if i != 0 && seen[i / 64] & bit == 0 {
            seen[i / 64] |= bit;
            out.push(i as u16);
        }
    }
    out
}

/// A row's rule as the BPF map holds it.
fn rule_bytes(row: &UnwindRow) -> RuleBytes {
    let off = row.cfa_offset.to_le_bytes();
    [
        off[0],
        off[1],
        off[2],
        off[3],
        row.rbp_offset as u8,
        row.rule,
        0,
        0,
    ]
}

/// Packs sorted rows (strictly increasing pc, as [`super::table`] builds
/// them) into one block: `[first page, pages, page offsets (pages + 1),
/// rows]`. Every page from the first row's to the last row's gets a row at
/// its offset 0 (the rule in force there), so a lookup never looks back
/// past its page. Its rules are held until [`Rules::release`]; on error,
/// none is added.
pub fn pack(rows: &[UnwindRow], rules: &mut Rules) -> Result<Vec<u32>, PackError> {
    let mut fresh = Vec::new();
    match pack_by(rows, |r| rules.index_of(r, &mut fresh)) {
        Ok(words) => {
            rules.hold(&words, &fresh);
            Ok(words)
        }
        Err(e) => {
            rules.undo(&fresh);
            Err(e)
        }
    }
}

/// Packs rows as [`pack`] does with the rules already held, adding none:
/// `None` if a row names a rule not held (its block then differs from every
/// block in the row array, whose rules are all held). To compare a file's
/// rows with a table already packed, without adding its rules.
pub fn pack_known(rows: &[UnwindRow], rules: &Rules) -> Option<Vec<u32>> {
    pack_by(rows, |r| rules.known(r).ok_or(PackError::RulesFull)).ok()
}

fn pack_by(
    rows: &[UnwindRow],
    mut index: impl FnMut(&UnwindRow) -> Result<u16, PackError>,
) -> Result<Vec<u32>, PackError> {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Err(PackError::Empty);
    };
    let first_page = first.pc >> PAGE_SHIFT;
    let pages = (last.pc >> PAGE_SHIFT) - first_page + 1;
    let offsets = HEADER_WORDS + pages as usize + 1;
    let mut words = Vec::with_capacity(offsets + rows.len() + pages as usize);
    words.push(first_page);
    words.push(pages);
    words.resize(offsets, 0);
    let mut in_force = 0u16; // before the first row: no FDE
    let mut i = 0;
    for p in 0..pages {
        let page = first_page + p;
        words[HEADER_WORDS + p as usize] = words.len() as u32;
        let starts_here = rows.get(i).is_some_and(|r| r.pc == page << PAGE_SHIFT);
        if !starts_here {
            words.push(u32::from(in_force));
        }
        while let Some(r) = rows.get(i).filter(|r| r.pc >> PAGE_SHIFT == page) {
            in_force = index(r)?;
            words.push(((r.pc & 0xffff) << 16) | u32::from(in_force));
            i += 1;
        }
    }
    words[HEADER_WORDS + pages as usize] = words.len() as u32;
    Ok(words)
}

/// The rule index covering file address `pc` in a packed block, as
/// `find_row` in `bpf/unwind.h` finds it; `None` outside the block's pages.
pub fn lookup(words: &[u32], pc: u32) -> Option<u16> {
    let first = *words.first()?;
    let pages = *words.get(1)?;
    let page = (pc >> PAGE_SHIFT).checked_sub(first)?;
    if page >= pages {
        return None;
    }
    let lo = *words.get(HEADER_WORDS + page as usize)? as usize;
    let hi = *words.get(HEADER_WORDS + page as usize + 1)? as usize;
    let rows = words.get(lo..hi)?;
    let at = rows.partition_point(|w| (w >> 16) <= (pc & 0xffff));
    Some((rows.get(at.checked_sub(1)?)? & 0xffff) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::table::RbpRule;

    fn rsp(pc: u32, off: u32) -> UnwindRow {
        UnwindRow::new(pc, CfaRule::Rsp, off, RbpRule::Same, 0)
    }

    fn none(pc: u32) -> UnwindRow {
        UnwindRow::new(pc, CfaRule::None, 0, RbpRule::Same, 0)
    }

    /// Every pc of the rows' span finds the rule the unpacked table gives.
    fn agrees(rows: &[UnwindRow]) {
        let mut rules = Rules::default();
        let words = pack(rows, &mut rules).unwrap();
        let mut by_index = HashMap::new();
        by_index.insert(0u16, [0u8; RULE_BYTES]);
        for (i, b) in rules.take_added() {
            by_index.insert(i, b);
        }
        let lo = rows[0].pc.saturating_sub(3);
        let hi = rows.last().unwrap().pc + 3;
        for pc in lo..hi {
            let want = crate::unwind::table::lookup(rows, pc)
                .filter(|r| r.cfa_rule() != CfaRule::None)
                .map(rule_bytes)
                .unwrap_or([0; RULE_BYTES]);
            let got = lookup(&words, pc).map_or([0; RULE_BYTES], |i| by_index[&i]);
            assert_eq!(got, want, "pc {pc:#x}");
        }
    }

    #[test]
    fn lookups_agree_with_the_rows_across_pages() {
        agrees(&[
            rsp(0x1_fff0, 8),
            rsp(0x1_fff4, 16),
            none(0x2_0010),
            rsp(0x4_0000, 8),
            rsp(0x4_0001, 540_080),
            rsp(0x5_fffe, 8),
            none(0x6_0002),
        ]);
    }

    #[test]
    fn a_rule_in_force_over_empty_pages_is_repeated_at_each() {
        let rows = [rsp(0x1000, 8), none(0x3_5000)];
        let mut rules = Rules::default();
        let words = pack(&rows, &mut rules).unwrap();
        // Pages 0..=3: one row each, plus the closing row on page 3.
        assert_eq!(words[1], 4);
        assert_eq!(words.len(), HEADER_WORDS + 5 + 6);
        assert_eq!(lookup(&words, 0x2_8000), Some(1));
        assert_eq!(lookup(&words, 0x3_5000), Some(0));
        assert_eq!(lookup(&words, 0x0fff), Some(0));
        assert_eq!(lookup(&words, 0x4_0000), None);
    }

    #[test]
    fn rules_are_shared_between_tables_and_bounded() {
        let mut rules = Rules::default();
        pack(&[rsp(0x10, 8), none(0x20)], &mut rules).unwrap();
        pack(&[rsp(0x90, 8), rsp(0x98, 16), none(0xa0)], &mut rules).unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules.take_added().len(), 2);
        let distinct = |n: u32, from: u32| -> Vec<UnwindRow> {
            (0..n).map(|i| rsp(i * 2, (from + i) * 8)).collect()
        };
        // One table cannot add more than its share of new rules, and a
        // table refused keeps none of those it named...
        let over = MAX_NEW_RULES_PER_TABLE as u32 + 1;
        for _ in 0..20 {
            assert_eq!(
                pack(&distinct(over, 100), &mut rules),
                Err(PackError::TooManyRules)
            );
        }
        assert_eq!(rules.len(), 3);
        assert!(rules.take_added().is_empty());
        // ...and the table as a whole is bounded.
        let mut n = 1_000_000;
        let mut packed = Vec::new();
        let full = loop {
            match pack(&distinct(MAX_NEW_RULES_PER_TABLE as u32, n), &mut rules) {
                Ok(w) => {
                    packed.push(w);
                    n += MAX_NEW_RULES_PER_TABLE as u32;
                }
                Err(e) => break e,
            }
        };
        assert_eq!(full, PackError::RulesFull);
        let held = rules.len();
        assert_eq!(held, 3 + packed.len() * MAX_NEW_RULES_PER_TABLE);
        assert!(held > MAX_RULES - MAX_NEW_RULES_PER_TABLE);
        // A block out of the array lets its rules go, for the next table's.
        let uploaded = rules.take_added().len();
        assert_eq!(uploaded, held - 3);
        assert_eq!(
            rules.release(&packed.pop().unwrap()),
            MAX_NEW_RULES_PER_TABLE
        );
        assert_eq!(rules.len(), held - MAX_NEW_RULES_PER_TABLE);
        let again = pack(
            &distinct(MAX_NEW_RULES_PER_TABLE as u32, 7_000_000),
            &mut rules,
        )
        .unwrap();
        assert_eq!(rules.len(), held);
        let reused = rules.take_added();
        assert_eq!(reused.len(), MAX_NEW_RULES_PER_TABLE);
        assert!(reused.iter().all(|&(i, _)| usize::from(i) < held));
        for (words, rows) in [(again, distinct(MAX_NEW_RULES_PER_TABLE as u32, 7_000_000))] {
            for r in &rows[..rows.len() - 1] {
                let i = lookup(&words, r.pc).unwrap();
                assert_eq!(
                    reused.iter().find(|(j, _)| *j == i).unwrap().1,
                    rule_bytes(r)
                );
            }
        }
    }

    #[test]
    fn a_rule_two_blocks_name_stays_until_both_are_released() {
        let mut rules = Rules::default();
        let a = pack(&[rsp(0x10, 8), rsp(0x14, 24), none(0x20)], &mut rules).unwrap();
        let b = pack(&[rsp(0x10, 8), none(0x20)], &mut rules).unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules.release(&a), 1, "rsp+24 is a's alone");
        assert_eq!(rules.len(), 2);
        assert_eq!(
            pack_known(&[rsp(0x10, 8), none(0x20)], &rules),
            Some(b.clone())
        );
        assert_eq!(rules.release(&b), 1);
        assert!(rules.is_empty());
    }

    #[test]
    fn packing_with_the_rules_held_adds_none_and_matches_only_equal_rows() {
        let mut rules = Rules::default();
        let rows = [rsp(0x10, 8), rsp(0x14, 16), none(0x20)];
        let words = pack(&rows, &mut rules).unwrap();
        let held = rules.len();
        assert_eq!(pack_known(&rows, &rules), Some(words.clone()));
        // Another offset where one was: a rule not held, so not the same
        // block; nothing added.
        assert_eq!(
            pack_known(&[rsp(0x10, 8), rsp(0x14, 40), none(0x20)], &rules),
            None
        );
        // Held rules at other addresses: a block, but another one.
        let moved = pack_known(&[rsp(0x10, 16), rsp(0x14, 8), none(0x20)], &rules).unwrap();
        assert_ne!(moved, words);
        assert_eq!(rules.len(), held);
    }

    #[test]
    fn real_libc_packs_to_about_half_and_agrees() {
        let Ok(bytes) = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6") else {
            panic!("this test reads Debian's libc (/lib/x86_64-linux-gnu/libc.so.6)");
        };
        let t = crate::unwind::table::build_table(&bytes).unwrap();
        let mut rules = Rules::default();
        let words = pack(&t.rows, &mut rules).unwrap();
        let ratio = (words.len() * 4) as f64 / (t.rows.len() * 8) as f64;
        assert!(ratio < 0.56, "packed {ratio:.3} of the 8-byte rows");
        agrees(&t.rows[..4000]);
    }
}
