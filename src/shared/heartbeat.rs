//! A sign of life one thread gives and another reads, without a lock: the
//! collector beats while a drain waits on work it has bounded (a file's
//! symbols read by a worker), so `/readyz` can tell a drain that is slow
//! from a collector that is stuck.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The time of the last beat, as milliseconds since the heartbeat was made.
#[derive(Debug)]
pub struct Heartbeat {
    origin: Instant,
    last_ms: AtomicU64,
    /// No beat yet: [`Heartbeat::since`] is then unbounded.
    beaten: std::sync::atomic::AtomicBool,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            beaten: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Heartbeat {
    /// Records a sign of life now.
    pub fn beat(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::SeqCst);
        self.beaten.store(true, Ordering::SeqCst);
    }

    /// Time since the last beat; [`Duration::MAX`] if there was none.
    pub fn since(&self) -> Duration {
        if !self.beaten.load(Ordering::SeqCst) {
            return Duration::MAX;
        }
        let now = self.origin.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::SeqCst)))
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
