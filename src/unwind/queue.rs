//! The builder thread's queue of tables to compile, in the order that keeps
//! one user's flood from delaying everyone else's tables: root's (the
//! host's services) first, then every other account in turn, one table
//! each, then the processes listed at start. A user mapping thousands of
//! new files (or one file under thousands of modification times) thus
//! waits behind their own tables only; another user's new program waits
//! for at most one of theirs per account ahead of it.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Condvar, Mutex};

use super::{BuildSource, ROOT, TableId};

/// What the builder thread is asked to compile.
pub(super) struct BuildJob {
    pub(super) id: TableId,
    pub(super) source: BuildSource,
    /// The account (see [`crate::shared::accounts`]) whose process asked
    /// for it first, or root's once root's asked.
    pub(super) account: u32,
}

/// The jobs, shared by the agent (pushing) and the builder thread.
#[derive(Default)]
pub(super) struct JobQueue {
    state: Mutex<Queued>,
    ready: Condvar,
}

#[derive(Default)]
struct Queued {
    /// Root's, for processes that ran lately (noticed, sampled, or asked
    /// for by the BPF unwinder): first.
    root: VecDeque<BuildJob>,
    /// Other accounts', for processes that ran lately, one job of each in
    /// turn.
    urgent: BTreeMap<u32, VecDeque<BuildJob>>,
    /// The account served last: the next turn is the next account up.
    turn: u32,
    /// For processes listed at start.
    later: VecDeque<BuildJob>,
    closed: bool,
}

impl Queued {
    fn push_urgent(&mut self, job: BuildJob) {
        if job.account == ROOT {
            self.root.push_back(job);
        } else {
            self.urgent.entry(job.account).or_default().push_back(job);
        }
    }

    fn next(&mut self) -> Option<BuildJob> {
        if let Some(j) = self.root.pop_front() {
            return Some(j);
        }
        let account = self
            .urgent
            .range((Bound::Excluded(self.turn), Bound::Unbounded))
            .next()
            .or_else(|| self.urgent.iter().next())
            .map(|(a, _)| *a);
        if let Some(a) = account {
            self.turn = a;
            let queue = self.urgent.get_mut(&a)?;
            let job = queue.pop_front();
            if queue.is_empty() {
                self.urgent.remove(&a);
            }
            return job;
        }
        self.later.pop_front()
    }

    /// Takes table `id`'s job out of the later queue, or out of another
    /// account's turn than `account`'s (a file everyone maps, first asked
    /// for by a user with thousands of files queued, waits in the turn of
    /// whoever wants it).
    fn take(&mut self, id: TableId, account: u32) -> Option<BuildJob> {
        if let Some(i) = self.later.iter().position(|j| j.id == id) {
            return self.later.remove(i);
        }
        if account == ROOT {
            // Root's turn comes first: nothing to move out of it.
            if self.root.iter().any(|j| j.id == id) {
                return None;
            }
        }
        let (a, i) = self
            .urgent
            .iter()
            .filter(|(a, _)| **a != account)
            .find_map(|(a, q)| Some((*a, q.iter().position(|j| j.id == id)?)))?;
        let queue = self.urgent.get_mut(&a)?;
        let job = queue.remove(i);
        if queue.is_empty() {
            self.urgent.remove(&a);
        }
        job
    }
}

impl JobQueue {
    /// Queues a job: `urgent` for a process that ran lately, in its
    /// account's turn; else after every urgent one.
    pub(super) fn push(&self, job: BuildJob, urgent: bool) {
        let mut q = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if urgent {
            q.push_urgent(job);
        } else {
            q.later.push_back(job);
        }
        self.ready.notify_one();
    }

    /// The next job (see the module's order); `None` once closed.
    pub(super) fn pop(&self) -> Option<BuildJob> {
        let mut q = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if q.closed {
                return None;
            }
            if let Some(j) = q.next() {
                return Some(j);
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A process of `account` that ran lately wants table `id`, still
    /// queued: its job moves from the later queue or another account's
    /// turn to that account's turn (root's: first).
    pub(super) fn hurry(&self, id: TableId, account: u32) {
        let mut q = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut j) = q.take(id, account) {
            j.account = account;
            q.push_urgent(j);
        }
    }

    /// Ends the builder thread at its next pop.
    pub(super) fn close(&self) {
        let mut q = self.state.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: TableId, account: u32) -> BuildJob {
        BuildJob {
            id,
            source: BuildSource::Vdso,
            account,
        }
    }

    fn order(q: &JobQueue, n: usize) -> Vec<TableId> {
        (0..n).map(|_| q.pop().expect("a job").id).collect()
    }

    #[test]
    fn root_first_then_each_user_in_turn_then_the_start_listing() {
        let q = JobQueue::default();
        q.push(job(90, 1000), false);
        for id in 1..=4 {
            q.push(job(id, 1000), true);
        }
        q.push(job(11, 1001), true);
        q.push(job(12, 1001), true);
        q.push(job(21, ROOT), true);
        q.push(job(31, 1002), true);
        assert_eq!(order(&q, 9), vec![21, 1, 11, 31, 2, 12, 3, 4, 90]);
    }

    #[test]
    fn roots_want_moves_a_users_queued_job_ahead() {
        let q = JobQueue::default();
        for id in 1..=3 {
            q.push(job(id, 1000), true);
        }
        q.push(job(7, 1001), false);
        q.hurry(3, ROOT);
        q.hurry(7, 1001);
        assert_eq!(order(&q, 4), vec![3, 1, 7, 2]);
        // A file one user flooded the queue before is built in the turn
        // of another user who wants it.
        for id in 8..=10 {
            q.push(job(id, 1000), true);
        }
        q.push(job(11, 1001), true);
        q.hurry(10, 1001);
        // 1000 was served last: 1001's turn, then 1000's, and so on.
        assert_eq!(order(&q, 4), vec![11, 8, 10, 9]);
    }
}
