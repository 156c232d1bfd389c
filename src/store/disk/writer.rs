//! The writer: after each drain, every interval (`history_write_seconds`,
//! 30 s by default) whose seconds the memory stores have sealed is copied
//! out of them (under their read locks, a few milliseconds) and handed to
//! a thread of its own, which encodes and writes it, then rolls up and
//! trims the directory. A slow or failing disk never delays a drain: the
//! queue holds [`QUEUE`] jobs (a segment per event with samples per
//! interval, and a maintenance pass: with the default events about nine
//! intervals, four and a half minutes at 30 s, 45 s at 5 s), and a full
//! queue drops (and counts) the segment that did not fit.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};

use super::Archive;
use super::segment::Builder;
use crate::store::Store;

/// Jobs (segments of all events, maintenance passes) the queue holds.
pub const QUEUE: usize = 64;

enum Job {
    Write {
        event: &'static str,
        b: Box<Builder>,
    },
    Maintain(u64),
    Sync(std::sync::mpsc::Sender<()>),
}

/// Writes the memory stores' minutes to an [`Archive`].
#[derive(Debug)]
pub struct Recorder {
    archive: Arc<Archive>,
    /// The next second to write (store seconds, a multiple of `every`).
    next: Mutex<u64>,
    /// Seconds each write covers ([`super::DiskOptions::write_every`],
    /// at least 1).
    every: u64,
    tx: Mutex<Option<SyncSender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Write { event, .. } => write!(f, "Write({event})"),
            Job::Maintain(t) => write!(f, "Maintain({t})"),
            Job::Sync(_) => write!(f, "Sync"),
        }
    }
}

fn run(archive: Arc<Archive>, rx: Receiver<Job>) {
    for job in rx {
        match job {
            Job::Write { event, b } => match archive.write(event, 0, *b) {
                Ok(_) => archive.write_worked(),
                Err(e) => archive.write_failed(&e),
            },
            Job::Maintain(now) => archive.maintain(now),
            Job::Sync(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Recorder {
    /// Starts the writer thread; the first minute written is the one
    /// holding `start` (store seconds).
    pub fn start(archive: Arc<Archive>, start: u64) -> std::io::Result<Recorder> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let every = archive.options().write_every.max(1);
        let a = archive.clone();
        let thread = std::thread::Builder::new()
            .name("emberd-history".into())
            .spawn(move || run(a, rx))?;
        Ok(Recorder {
            archive,
            next: Mutex::new(start - start % every),
            every,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, job: Job) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = tx.as_ref() else { return };
        match tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.archive
                    .counters
                    .dropped_queue
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    fn export<'a>(
        &self,
        from: u64,
        to: u64,
        stores: impl Iterator<Item = (&'static str, &'a RwLock<Store>)>,
    ) {
        for (event, store) in stores {
            let mut b = Builder::new(1);
            store
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .export_into(from, to, &mut b);
            if !b.is_empty() {
                self.send(Job::Write {
                    event,
                    b: Box::new(b),
                });
            }
        }
    }

    /// After a drain at `now` (store seconds): writes every interval the
    /// stores have sealed, then has the directory maintained.
    pub fn after_insert<'a>(
        &self,
        now: u64,
        stores: impl Iterator<Item = (&'static str, &'a RwLock<Store>)> + Clone,
    ) {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let mut wrote = false;
        while *next + self.every + crate::store::SEAL_AFTER < now {
            self.export(*next, *next + self.every, stores.clone());
            *next += self.every;
            wrote = true;
        }
        if wrote {
            self.send(Job::Maintain(now));
        }
    }

    /// Waits until the writer has done every job queued before (a
    /// replay at accelerated time needs it; the daemon never waits).
    pub fn sync(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(q) = self.tx.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
            && q.send(Job::Sync(tx)).is_ok()
        {
            let _ = rx.recv();
        }
    }

    /// At a stop: writes the seconds not yet written (up to `now`,
    /// inclusive) and waits for the writer to finish.
    pub fn finish<'a>(
        &self,
        now: u64,
        stores: impl Iterator<Item = (&'static str, &'a RwLock<Store>)>,
    ) {
        let next = *self.next.lock().unwrap_or_else(|e| e.into_inner());
        if now >= next {
            self.export(next, now + 1, stores);
        }
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}
