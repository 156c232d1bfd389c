//! The agent's time spent reading processes, charged to their accounts.
//!
//! Every new process costs the agent a read of its `/proc/PID/maps` (for
//! names), another with a `stat` of each executable mapping (for unwind
//! tables), and re-reads while it is young: about 20 ms for a process of
//! 17,000 mapped files. One thread does all of it, so a user forking such
//! processes by the hundred a second kept it busy with theirs, and root's
//! short-lived program went unread until it had exited: its stacks
//! `[exited]` (0.04 of them whole).
//!
//! Each account (a uid, or the owner of its subordinate range) other than
//! root may spend [`ACCOUNT_RATE`] of the agent's time a second, and all of
//! them together [`OTHERS_RATE`]: past it, a new process is read later
//! (deferred, oldest first, at most [`MAX_DEFERRED`] waiting) and a re-read
//! is skipped until the account's credit is back. Root's processes are
//! read at once, whatever others do: a flood delays them by at most what
//! the others may spend at once ([`OTHERS_BURST`]) and one read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::Pid;

/// The agent's time one account other than root may spend reading its
/// processes, a second.
pub const ACCOUNT_RATE: Duration = Duration::from_millis(100);
/// What an account may spend at once, after being idle.
pub const ACCOUNT_BURST: Duration = Duration::from_millis(200);
/// The agent's time all accounts but root may spend together, a second.
pub const OTHERS_RATE: Duration = Duration::from_millis(250);
/// What all accounts but root may spend at once.
pub const OTHERS_BURST: Duration = Duration::from_millis(300);
/// New processes waiting for their account's credit, at most: past it the
/// oldest is dropped (counted), to be read when the unwinder next asks.
pub const MAX_DEFERRED: usize = 4096;
/// Accounts whose credit is kept at most; one at full credit is the same
/// as none, and is let go first.
const MAX_ACCOUNTS: usize = 4096;

/// Credit of agent time, refilled at a rate up to a burst.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Seconds that may be spent; below zero after a read overdrew it.
    credit: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: Duration) -> Self {
        Self {
            credit: burst.as_secs_f64(),
            at: Instant::now(),
        }
    }

    fn refill(&mut self, rate: Duration, burst: Duration, now: Instant) {
        let gained = now.duration_since(self.at).as_secs_f64() * rate.as_secs_f64();
        self.credit = (self.credit + gained).min(burst.as_secs_f64());
        self.at = now;
    }
}

/// A new process whose read waits for its account's credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    /// The process.
    pub pid: Pid,
    /// The account it counts in.
    pub account: u32,
}

/// What the meter did, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReadStats {
    /// New processes whose read was deferred.
    pub deferred: u64,
    /// Deferred processes dropped from a full queue.
    pub dropped: u64,
    /// Re-reads skipped (a young process's, one the unwinder asked for).
    pub skipped: u64,
    /// Agent time spent reading processes of accounts other than root.
    pub charged: Duration,
}

/// Per-account credit of the agent's reading time (see the module).
#[derive(Debug)]
pub struct ReadMeter {
    accounts: HashMap<u32, Bucket>,
    others: Bucket,
    deferred: VecDeque<Deferred>,
    queued: HashSet<Pid>,
    stats: ReadStats,
}

impl Default for ReadMeter {
    fn default() -> Self {
        Self::new()
    }
}

impl ReadMeter {
    /// Every account at full credit, nothing deferred.
    pub fn new() -> Self {
        Self {
            accounts: HashMap::new(),
            others: Bucket::full(OTHERS_BURST),
            deferred: VecDeque::new(),
            queued: HashSet::new(),
            stats: ReadStats::default(),
        }
    }

    /// Whether a process of `account` may be read now: root always; any
    /// other while both its credit and all others' are above zero.
    pub fn may_read(&mut self, account: u32) -> bool {
        if account == 0 {
            return true;
        }
        let now = Instant::now();
        self.others.refill(OTHERS_RATE, OTHERS_BURST, now);
        if self.others.credit <= 0.0 {
            return false;
        }
        match self.accounts.get_mut(&account) {
            Some(b) => {
                b.refill(ACCOUNT_RATE, ACCOUNT_BURST, now);
                b.credit > 0.0
            }
            None => true,
        }
    }

    /// Charges `spent` of the agent's time to `account` (nothing to root).
    pub fn charge(&mut self, account: u32, spent: Duration) {
        if account == 0 {
            return;
        }
        let now = Instant::now();
        if !self.accounts.contains_key(&account) && self.accounts.len() >= MAX_ACCOUNTS {
            for b in self.accounts.values_mut() {
                b.refill(ACCOUNT_RATE, ACCOUNT_BURST, now);
            }
            let full = ACCOUNT_BURST.as_secs_f64();
            self.accounts.retain(|_, b| b.credit < full);
        }
        let b = self
            .accounts
            .entry(account)
            .or_insert_with(|| Bucket::full(ACCOUNT_BURST));
        b.refill(ACCOUNT_RATE, ACCOUNT_BURST, now);
        b.credit -= spent.as_secs_f64();
        self.others.refill(OTHERS_RATE, OTHERS_BURST, now);
        self.others.credit -= spent.as_secs_f64();
        self.stats.charged += spent;
    }

    /// Puts a new process of `account` in line for a read (once).
    pub fn defer(&mut self, pid: Pid, account: u32) {
        if !self.queued.insert(pid) {
            return;
        }
        self.stats.deferred += 1;
        if self.deferred.len() >= MAX_DEFERRED
            && let Some(old) = self.deferred.pop_front()
        {
            self.queued.remove(&old.pid);
            self.stats.dropped += 1;
        }
        self.deferred.push_back(Deferred { pid, account });
    }

    /// Counts a re-read skipped for its account's credit.
    pub fn skip(&mut self) {
        self.stats.skipped += 1;
    }

    /// Whether processes wait for a read.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// The process waiting longest whose account may read now, out of the
    /// line (the caller reads it and charges the time).
    pub fn next_due(&mut self) -> Option<Deferred> {
        let mut blocked: HashSet<u32> = HashSet::new();
        let mut found = None;
        for (i, d) in self.deferred.iter().enumerate() {
            if blocked.contains(&d.account) {
                continue;
            }
            if self.may_read_now(d.account) {
                found = Some(i);
                break;
            }
            blocked.insert(d.account);
        }
        let d = self.deferred.remove(found?)?;
        self.queued.remove(&d.pid);
        Some(d)
    }

    /// [`ReadMeter::may_read`], for use while the queue is borrowed.
    fn may_read_now(&self, account: u32) -> bool {
        let now = Instant::now();
        let mut others = self.others;
        others.refill(OTHERS_RATE, OTHERS_BURST, now);
        if others.credit <= 0.0 {
            return false;
        }
        self.accounts.get(&account).is_none_or(|b| {
            let mut b = *b;
            b.refill(ACCOUNT_RATE, ACCOUNT_BURST, now);
            b.credit > 0.0
        })
    }

    /// What the meter did so far.
    pub fn stats(&self) -> ReadStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_never_held_back() {
        let mut m = ReadMeter::new();
        m.charge(1000, Duration::from_secs(5));
        assert!(!m.may_read(1000), "an account past its credit waits");
        assert!(!m.may_read(1001), "so do the others, past all their credit");
        assert!(m.may_read(0), "root is read whatever others spent");
        m.charge(0, Duration::from_secs(100));
        assert_eq!(m.stats().charged, Duration::from_secs(5));
    }

    #[test]
    fn one_account_spends_its_share_not_the_others() {
        let mut m = ReadMeter::new();
        // Within all others' burst, past one account's.
        m.charge(1000, ACCOUNT_BURST + Duration::from_millis(10));
        assert!(!m.may_read(1000));
        assert!(m.may_read(1001), "another account still has credit");
        // Credit comes back at the account's rate: 100 ms a second.
        std::thread::sleep(Duration::from_millis(150));
        assert!(m.may_read(1000), "10 ms overdrawn are paid back in 100 ms");
    }

    #[test]
    fn deferred_processes_come_back_oldest_first_once_their_account_may_read() {
        let mut m = ReadMeter::new();
        m.charge(1000, Duration::from_millis(250));
        m.defer(Pid(1), 1000);
        m.defer(Pid(2), 1001);
        m.defer(Pid(2), 1001);
        m.defer(Pid(3), 1000);
        assert_eq!(m.stats().deferred, 3, "a process is put in line once");
        // 1000 has no credit: 1001's process comes first.
        assert_eq!(m.next_due().map(|d| d.pid), Some(Pid(2)));
        assert_eq!(m.next_due(), None);
        assert!(m.has_deferred());
    }

    #[test]
    fn the_line_is_bounded_and_drops_the_oldest() {
        let mut m = ReadMeter::new();
        for i in 0..MAX_DEFERRED as u32 + 10 {
            m.defer(Pid(i + 1), 1000);
        }
        let s = m.stats();
        assert_eq!(s.dropped, 10);
        assert_eq!(m.next_due().map(|d| d.pid), Some(Pid(11)));
    }
}
