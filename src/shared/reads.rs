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
//! (deferred: an account's processes in the order noticed, at most
//! [`MAX_DEFERRED_PER_ACCOUNT`] of one account and [`MAX_DEFERRED`] in
//! all waiting; past them a process is set aside, [`MAX_ASIDE`] at most,
//! and noticed again at its next sample or event once its account's line
//! has room) and a re-read is skipped until the account's credit is back. Root's
//! processes are read at once, whatever others do: a flood delays them by
//! at most what the others may spend at once ([`OTHERS_BURST`]) and one
//! read.

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
/// account waiting with the most gives up its newest, set aside.
pub const MAX_DEFERRED: usize = 4096;
/// New processes of one account waiting, at most: past it the newcomer is
/// set aside (counted as dropped), to be noticed again once the line has
/// room ([`ReadMeter::take_dropped`]), not in a loop of notices.
pub const MAX_DEFERRED_PER_ACCOUNT: usize = 1024;
/// Processes set aside, all accounts together, at most: past it the
/// oldest is lost until it execs (or `seen_tgids` forgets it).
pub const MAX_ASIDE: usize = 4096;
/// Processes set aside noticed again at one wake, at most.
const RELEASED_PER_WAKE: usize = 64;
/// How long a process set aside and released holds a place in its
/// account's line while its next notice comes (one asleep does not hold
/// it for ever).
const RELEASE_HOLD: Duration = Duration::from_secs(1);
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
        self.credit = self.credit_at(rate, burst, now);
        self.at = now;
    }

    /// The credit at `now`, refilled since it was last charged.
    fn credit_at(&self, rate: Duration, burst: Duration, now: Instant) -> f64 {
        let gained = now.duration_since(self.at).as_secs_f64() * rate.as_secs_f64();
        (self.credit + gained).min(burst.as_secs_f64())
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
    /// New processes set aside past the line's bounds (noticed again as
    /// it moves).
    pub dropped: u64,
    /// Re-reads skipped (a young process's, one read early while a drain
    /// was named, one the unwinder asked for).
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
    /// Processes waiting, by account.
    waiting: HashMap<u32, usize>,
    /// Processes past the line, oldest first: noticed again as their
    /// accounts' lines have room.
    aside: VecDeque<Deferred>,
    aside_pids: HashSet<Pid>,
    /// Processes released from aside lately, by when, with their account:
    /// the places in the line they are expected to take.
    released: VecDeque<(Instant, u32)>,
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
            waiting: HashMap::new(),
            aside: VecDeque::new(),
            aside_pids: HashSet::new(),
            released: VecDeque::new(),
            stats: ReadStats::default(),
        }
    }

    /// Whether a process of `account` may be read now: root always; any
    /// other while both its credit and all others' are above zero.
    pub fn may_read(&self, account: u32) -> bool {
        account == 0 || (self.others_may_read() && self.account_may_read(account))
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
            // Thousands of accounts all in debt: the least indebted goes.
            if self.accounts.len() >= MAX_ACCOUNTS
                && let Some((&least, _)) = self
                    .accounts
                    .iter()
                    .max_by(|a, b| a.1.credit.total_cmp(&b.1.credit))
            {
                self.accounts.remove(&least);
            }
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

    /// Puts a new process of `account` in line for a read (once); past
    /// the line's bounds, sets it aside.
    pub fn defer(&mut self, pid: Pid, account: u32) {
        if self.queued.contains(&pid) || self.aside_pids.contains(&pid) {
            return;
        }
        self.stats.deferred += 1;
        let mine = self.waiting.get(&account).copied().unwrap_or(0);
        if mine >= MAX_DEFERRED_PER_ACCOUNT {
            self.set_aside(pid, account);
            return;
        }
        if self.deferred.len() >= MAX_DEFERRED
            && let Some((&most, _)) = self.waiting.iter().max_by_key(|&(_, n)| *n)
        {
            // The fullest account's newest steps out for the newcomer.
            if let Some(i) = self.deferred.iter().rposition(|d| d.account == most)
                && let Some(out) = self.deferred.remove(i)
            {
                self.out_of_line(out);
                self.set_aside(out.pid, out.account);
            }
        }
        self.queued.insert(pid);
        self.deferred.push_back(Deferred { pid, account });
        *self.waiting.entry(account).or_default() += 1;
    }

    /// Sets `pid` aside: it stays noticed (no notice loop) until its
    /// account's line has room.
    fn set_aside(&mut self, pid: Pid, account: u32) {
        self.stats.dropped += 1;
        if self.aside.len() >= MAX_ASIDE
            && let Some(lost) = self.aside.pop_front()
        {
            self.aside_pids.remove(&lost.pid);
        }
        self.aside_pids.insert(pid);
        self.aside.push_back(Deferred { pid, account });
    }

    /// Puts a process back at the head of its account's line (read for
    /// unwinding, its names' read still owed).
    pub fn defer_first(&mut self, pid: Pid, account: u32) {
        if self.queued.contains(&pid) || self.aside_pids.contains(&pid) {
            return;
        }
        self.stats.deferred += 1;
        let mine = self.waiting.get(&account).copied().unwrap_or(0);
        if mine >= MAX_DEFERRED_PER_ACCOUNT || self.deferred.len() >= MAX_DEFERRED {
            self.set_aside(pid, account);
            return;
        }
        self.queued.insert(pid);
        self.deferred.push_front(Deferred { pid, account });
        *self.waiting.entry(account).or_default() += 1;
    }

    fn out_of_line(&mut self, d: Deferred) {
        self.queued.remove(&d.pid);
        if let Some(n) = self.waiting.get_mut(&d.account) {
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(&d.account);
            }
        }
    }

    /// Whether processes of `account` wait in line: its new ones go behind
    /// them.
    pub fn waiting(&self, account: u32) -> bool {
        self.waiting.contains_key(&account)
    }

    /// Processes set aside whose account's line has room now, oldest
    /// first and a few at a time, out of the set: to be noticed again at
    /// their next sample or event (one that has exited or sleeps holds up
    /// none of the others).
    pub fn take_dropped(&mut self) -> Vec<Pid> {
        let mut out = Vec::new();
        if self.aside.is_empty() {
            return out;
        }
        let now = Instant::now();
        while self
            .released
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= RELEASE_HOLD)
        {
            self.released.pop_front();
        }
        // Places held by those released lately, by account.
        let mut held: HashMap<u32, usize> = HashMap::new();
        for (_, a) in &self.released {
            *held.entry(*a).or_default() += 1;
        }
        let mut i = 0;
        while i < self.aside.len() && out.len() < RELEASED_PER_WAKE {
            let d = self.aside[i];
            let mine = self.waiting.get(&d.account).copied().unwrap_or(0)
                + held.get(&d.account).copied().unwrap_or(0);
            if mine < MAX_DEFERRED_PER_ACCOUNT
                && self.deferred.len() + self.released.len() < MAX_DEFERRED
            {
                *held.entry(d.account).or_default() += 1;
                self.released.push_back((now, d.account));
                self.aside.remove(i);
                self.aside_pids.remove(&d.pid);
                out.push(d.pid);
            } else {
                i += 1;
            }
        }
        out
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
        if self.deferred.is_empty() || !self.others_may_read() {
            return None;
        }
        // Accounts looked at: each waiting one once at most.
        let mut blocked: HashSet<u32> = HashSet::new();
        let mut found = None;
        for (i, d) in self.deferred.iter().enumerate() {
            if blocked.contains(&d.account) {
                if blocked.len() == self.waiting.len() {
                    break;
                }
                continue;
            }
            if self.account_may_read(d.account) {
                found = Some(i);
                break;
            }
            blocked.insert(d.account);
        }
        let d = self.deferred.remove(found?)?;
        self.out_of_line(d);
        Some(d)
    }

    /// Whether all accounts but root together have credit left.
    fn others_may_read(&self) -> bool {
        self.others
            .credit_at(OTHERS_RATE, OTHERS_BURST, Instant::now())
            > 0.0
    }

    /// Whether `account`'s own credit is above zero (an account never
    /// charged has its burst).
    fn account_may_read(&self, account: u32) -> bool {
        self.accounts
            .get(&account)
            .is_none_or(|b| b.credit_at(ACCOUNT_RATE, ACCOUNT_BURST, Instant::now()) > 0.0)
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
    fn the_line_is_bounded_and_sets_the_flood_aside() {
        let mut m = ReadMeter::new();
        m.defer(Pid(1_000_000), 2000);
        let cap = MAX_DEFERRED_PER_ACCOUNT as u32;
        for i in 0..cap + 10 {
            m.defer(Pid(i + 1), 1000);
        }
        assert_eq!(
            m.stats().dropped,
            10,
            "past its 1,024 the flood's newcomers are set aside"
        );
        assert!(
            m.take_dropped().is_empty(),
            "nothing noticed again before the line moves"
        );
        // Other accounts fill the rest of the line; past it, the account
        // waiting with the most gives way, not the quiet one.
        for a in 0..3u32 {
            for i in 0..cap {
                m.defer(Pid(2_000_000 + a * 10_000 + i), 3000 + a);
            }
        }
        assert_eq!(m.stats().dropped, 11, "the line holds 4,096 in all");
        assert!(
            m.waiting(2000),
            "the quiet account's one process stays in line"
        );
        assert_eq!(m.next_due().map(|d| d.pid), Some(Pid(1_000_000)));
        assert!(!m.waiting(2000), "served: out of the line");
        // Two served: two places in the line, taken by those set aside
        // first (the flood's oldest; the fullest account that gave way
        // was any of three tied, 1000 among them).
        assert_eq!(m.next_due().map(|d| d.pid), Some(Pid(1)));
        let released = m.take_dropped();
        assert_eq!(released.first(), Some(&Pid(cap + 1)));
        assert!(released.len() <= 2, "no more than the line has room for");
        assert!(m.take_dropped().is_empty(), "released once");
        // Set aside once only.
        m.defer(Pid(cap + 5), 1000);
        assert_eq!(m.stats().dropped, 11);
    }

    #[test]
    fn an_account_in_debt_does_not_hold_up_the_next_in_line() {
        let mut m = ReadMeter::new();
        m.charge(1000, ACCOUNT_BURST + Duration::from_millis(50));
        m.defer(Pid(1), 1000);
        m.defer(Pid(2), 1001);
        m.defer(Pid(3), 1000);
        m.defer(Pid(4), 1002);
        assert_eq!(m.next_due().map(|d| d.pid), Some(Pid(2)));
        assert_eq!(m.next_due().map(|d| d.pid), Some(Pid(4)));
        assert_eq!(m.next_due(), None, "1000's wait for its credit");
        assert!(m.waiting(1000) && !m.waiting(1001));
    }
}
