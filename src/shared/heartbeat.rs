//! A sign of life one thread gives and another reads, without a lock: the
//! collector beats while a drain waits on work it has bounded (a file's
//! symbols read by a worker), so `/readyz` can tell a drain that is slow
//! from a collector that is stuck.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The time of the last beat.
#[derive(Debug)]
pub struct Heartbeat {
    origin: Instant,
    /// Milliseconds from `origin` to the last beat, plus one; 0: no beat
    /// yet.
    last: AtomicU64,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Heartbeat {
    /// Records a sign of life now.
    pub fn beat(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last.store(ms + 1, Ordering::SeqCst);
    }

    /// Time since the last beat; [`Duration::MAX`] if there was none.
    pub fn since(&self) -> Duration {
        match self.last.load(Ordering::SeqCst) {
            0 => Duration::MAX,
            last => {
                let now = self.origin.elapsed().as_millis() as u64 + 1;
                Duration::from_millis(now.saturating_sub(last))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_beat_is_forever_ago_and_a_beat_is_now() {
        let h = Heartbeat::default();
        assert_eq!(h.since(), Duration::MAX);
        h.beat();
        assert!(h.since() < Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(30));
        assert!(h.since() >= Duration::from_millis(30));
    }
}
