//! The processes a runtime's namer is attached to (a JVM's reader and its
//! method cache, a node process's reader), at most a fixed number, shared
//! among accounts: past the bound, the account attached to the most lets
//! go of its process used longest ago. One user's 33 busy JVMs thus push
//! out one another, not root's JVM, whose methods would otherwise be read
//! again (within a per-drain budget) at every drain.

use std::time::Instant;

use crate::shared::accounts::Accounts;
use crate::shared::{FastMap, Pid};

/// Root's account: let go of only when root holds every place.
const ROOT: u32 = 0;

/// One attached process: its account, when it was last asked for, and
/// what attaching gave (`None`: it could not be attached, remembered so
/// as not to try at every frame).
struct Held<A> {
    account: u32,
    used: Instant,
    state: Option<A>,
}

/// Processes attached to, each charged to its account.
pub struct AttachedSet<A> {
    held: FastMap<Pid, Held<A>>,
    max: usize,
    /// Whose account each real uid counts in (`/etc/subuid`).
    accounts: Accounts,
}

impl<A> AttachedSet<A> {
    /// An empty set of at most `max` processes, accounts from the host's
    /// `/etc/subuid`.
    pub fn new(max: usize) -> Self {
        Self::with_accounts(max, Accounts::system())
    }

    fn with_accounts(max: usize, accounts: Accounts) -> Self {
        Self {
            held: FastMap::default(),
            max: max.max(1),
            accounts,
        }
    }

    /// Process `pid`'s attached state, attached now with `attach` if it is
    /// not held (letting go of another past the bound); `None` when it
    /// could not be attached.
    pub fn get_or_attach(
        &mut self,
        pid: Pid,
        attach: impl FnOnce() -> Option<A>,
    ) -> Option<&mut A> {
        let now = Instant::now();
        if !self.held.contains_key(&pid) {
            // Gone before its uid is read: it would not be attached, and
            // costs no other process its place.
            let account = self.accounts.of_pid(pid)?;
            if self.held.len() >= self.max
                && let Some(p) = self.to_let_go(account)
            {
                self.held.remove(&p);
            }
            self.held.insert(
                pid,
                Held {
                    account,
                    used: now,
                    state: attach(),
                },
            );
        }
        let h = self.held.get_mut(&pid)?;
        h.used = now;
        h.state.as_mut()
    }

    /// The process to let go of for a new one of account `newcomer`: of
    /// the account other than root holding the most places (the
    /// newcomer's among equals; root's only when root holds them all),
    /// one that could not be attached first, else the one asked for
    /// longest ago.
    fn to_let_go(&self, newcomer: u32) -> Option<Pid> {
        let mut per: FastMap<u32, usize> = FastMap::default();
        for h in self.held.values().filter(|h| h.account != ROOT) {
            *per.entry(h.account).or_default() += 1;
        }
        let top = per
            .iter()
            .max_by_key(|&(a, n)| (*n, *a == newcomer))
            .map(|(a, _)| *a);
        self.held
            .iter()
            .filter(|(_, h)| top.is_none_or(|t| h.account == t))
            .min_by_key(|(_, h)| (h.state.is_some(), h.used))
            .map(|(p, _)| *p)
    }

    /// Takes `pid`'s attached state out (to be put back with
    /// [`AttachedSet::put_back`]), leaving its place held.
    pub fn take(&mut self, pid: Pid) -> Option<A> {
        self.held.get_mut(&pid)?.state.take()
    }

    /// Puts back what [`AttachedSet::take`] took (nothing if the place was
    /// let go meanwhile).
    pub fn put_back(&mut self, pid: Pid, a: A) {
        if let Some(h) = self.held.get_mut(&pid) {
            h.state = Some(a);
        }
    }

    /// Lets go of the processes that have exited, and reads `/etc/subuid`
    /// again if it changed.
    pub fn forget_exited(&mut self, is_live: &dyn Fn(Pid) -> bool) {
        self.held.retain(|pid, _| is_live(*pid));
        self.accounts.refresh();
    }

    /// Lets go of `pid` (it exec'd: its state is the old program's);
    /// whether it was held.
    pub fn forget(&mut self, pid: Pid) -> bool {
        self.held.remove(&pid).is_some()
    }

    /// The attached states.
    pub fn attached(&self) -> impl Iterator<Item = &A> {
        self.held.values().filter_map(|h| h.state.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set whose processes' accounts are given, not read from /proc.
    fn set_of(max: usize, procs: &[(u32, u32)]) -> AttachedSet<u32> {
        let mut s = AttachedSet::with_accounts(max, Accounts::empty());
        for &(pid, account) in procs {
            s.held.insert(
                Pid(pid),
                Held {
                    account,
                    used: Instant::now(),
                    state: Some(pid),
                },
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        s
    }

    #[test]
    fn the_account_holding_the_most_lets_go_of_its_oldest() {
        // Root's JVM first (the oldest of all), then one user's four and
        // another user's two.
        let s = set_of(
            7,
            &[
                (1, ROOT),
                (10, 1000),
                (11, 1000),
                (12, 1000),
                (13, 1000),
                (20, 2000),
                (21, 2000),
            ],
        );
        assert_eq!(s.to_let_go(2000), Some(Pid(10)));
        assert_eq!(s.to_let_go(ROOT), Some(Pid(10)));
    }

    #[test]
    fn among_equals_the_newcomers_account_gives_way() {
        let s = set_of(4, &[(10, 1000), (11, 1000), (20, 2000), (21, 2000)]);
        assert_eq!(s.to_let_go(2000), Some(Pid(20)));
        assert_eq!(s.to_let_go(1000), Some(Pid(10)));
    }

    #[test]
    fn root_is_let_go_of_only_when_it_holds_every_place() {
        let s = set_of(3, &[(1, ROOT), (2, ROOT), (30, 1000)]);
        assert_eq!(s.to_let_go(ROOT), Some(Pid(30)));
        let s = set_of(2, &[(1, ROOT), (2, ROOT)]);
        assert_eq!(s.to_let_go(1000), Some(Pid(1)));
    }

    #[test]
    fn a_process_that_could_not_be_attached_goes_first() {
        let mut s = set_of(3, &[(10, 1000), (11, 1000), (12, 1000)]);
        s.held.get_mut(&Pid(12)).unwrap().state = None;
        assert_eq!(s.to_let_go(1000), Some(Pid(12)));
    }

    #[test]
    fn take_and_put_back_keep_the_place() {
        let mut s = set_of(2, &[(10, 1000)]);
        assert_eq!(s.take(Pid(10)), Some(10));
        assert_eq!(s.attached().count(), 0);
        s.put_back(Pid(10), 10);
        assert_eq!(s.attached().count(), 1);
        s.forget(Pid(10));
        s.put_back(Pid(10), 10);
        assert_eq!(s.attached().count(), 0);
    }
}
