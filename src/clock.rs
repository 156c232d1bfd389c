//! The daemon's clock. Drains are stamped with the wall time emberd started
//! at plus the monotonic time since, so a step of the wall clock (an admin,
//! NTP after a long drift, a VM restored from a snapshot) never makes "the
//! last N seconds" stale or empty; windows given in wall time are mapped
//! onto it when a query arrives, with the wall clock as it is then.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Origin {
    wall: u64,
    mono: Instant,
    /// Test hook: `EMBERD_TEST_CLOCK_STEP=SECONDS@AFTER` makes the wall
    /// clock read SECONDS (signed) off from AFTER seconds on.
    step: Option<(i64, u64)>,
}

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(|| Origin {
        wall: real_wall(),
        mono: Instant::now(),
        step: std::env::var("EMBERD_TEST_CLOCK_STEP").ok().and_then(|v| {
            let (by, after) = v.split_once('@')?;
            Some((by.parse().ok()?, after.parse().ok()?))
        }),
    })
}

fn real_wall() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Store time now: unix seconds as of start, advanced monotonically.
pub fn now() -> u64 {
    let o = origin();
    o.wall.saturating_add(o.mono.elapsed().as_secs())
}

/// The wall clock now (unix seconds), as a user's `from=`/`to=` mean it.
pub fn wall_now() -> u64 {
    let o = origin();
    let wall = real_wall();
    match o.step {
        Some((by, after)) if o.mono.elapsed().as_secs() >= after => wall.saturating_add_signed(by),
        _ => wall,
    }
}

/// A wall-clock time mapped to store time, with the clocks' offset now.
pub fn to_store(wall: u64) -> u64 {
    let offset = now() as i128 - wall_now() as i128;
    (wall as i128 + offset).clamp(0, u64::MAX as i128) as u64
}

/// A store time mapped to wall-clock time, with the clocks' offset now
/// (the inverse of [`to_store`]).
pub fn to_wall(store: u64) -> u64 {
    let offset = wall_now() as i128 - now() as i128;
    (store as i128 + offset).clamp(0, u64::MAX as i128) as u64
}
