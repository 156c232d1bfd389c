//! The daemon's clock. Drains are stamped with the wall time emberd started
//! at plus the monotonic time since, so a step of the wall clock (an admin,
//! NTP after a long drift, a VM restored from a snapshot) never makes "the
//! last N seconds" stale or empty; windows given in wall time are mapped
//! onto it when a query arrives, with the wall clock as it is then.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Time resolution of CPU samples (`EMBERD_TICK_NS` in `bpf/emberd.h`):
/// FlameScope's 20 ms rows.
pub const TICK_MS: u64 = 20;
const TICK_NS: u64 = TICK_MS * 1_000_000;

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn ktime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

struct Origin {
    /// Wall time (unix ms) at `mono_ns`, a multiple of [`TICK_MS`].
    wall_ms: u64,
    /// CLOCK_MONOTONIC at `wall_ms`, a multiple of [`TICK_MS`] too: store
    /// seconds then split into the BPF sampler's ticks exactly, and store
    /// time stays within 40 ms of the wall clock emberd started with (the
    /// workload a user times and the heat map agree to a tick).
    mono_ns: u64,
    /// Test hook: `EMBERD_TEST_CLOCK_STEP=SECONDS@AFTER` makes the wall
    /// clock read SECONDS (signed) off from AFTER seconds on.
    step: Option<(i64, u64)>,
}

fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(|| {
        let mono = ktime_ns();
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let into_tick_ms = (mono % TICK_NS) / 1_000_000;
        let wall_ms = wall_ms.saturating_sub(into_tick_ms);
        Origin {
            wall_ms: wall_ms - wall_ms % TICK_MS,
            mono_ns: mono - mono % TICK_NS,
            step: std::env::var("EMBERD_TEST_CLOCK_STEP").ok().and_then(|v| {
                let (by, after) = v.split_once('@')?;
                Some((by.parse().ok()?, after.parse().ok()?))
            }),
        }
    })
}

/// Store time now: unix seconds as of start, advanced monotonically.
pub fn now() -> u64 {
    now_ms() / 1000
}

/// Store time (unix seconds) at which emberd's clock started: the first
/// second its history can hold.
pub fn started() -> u64 {
    origin().wall_ms / 1000
}

/// Store time now in milliseconds.
pub fn now_ms() -> u64 {
    let o = origin();
    o.wall_ms
        .saturating_add(ktime_ns().saturating_sub(o.mono_ns) / 1_000_000)
}

/// The store time (ms) at which a BPF sample tick (`key.tick`: the low 32
/// bits of CLOCK_MONOTONIC / 20 ms) began. The tick is taken to be the
/// latest one with those low bits not after now, so a wrap of the 32 bits
/// (every 994 days of uptime) changes nothing; ticks from before emberd
/// started map to its start.
pub fn tick_to_store_ms(tick: u32) -> u64 {
    let o = origin();
    let now_tick = ktime_ns() / TICK_NS;
    let back = u64::from((now_tick as u32).wrapping_sub(tick));
    let tick_ns = now_tick.saturating_sub(back) * TICK_NS;
    o.wall_ms
        .saturating_add(tick_ns.saturating_sub(o.mono_ns) / 1_000_000)
}

/// The wall clock now (unix seconds), as a user's `from=`/`to=` mean it.
pub fn wall_now() -> u64 {
    wall_now_ms() / 1000
}

fn wall_now_ms() -> u64 {
    let o = origin();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    match o.step {
        Some((by, after)) if ktime_ns().saturating_sub(o.mono_ns) / 1_000_000_000 >= after => {
            wall.saturating_add_signed(by.saturating_mul(1000))
        }
        _ => wall,
    }
}

/// Store time minus wall time, in whole seconds (rounded: the two clocks
/// start within 40 ms of each other, and truncating would make the offset
/// flicker between 0 and -1 around every second).
fn offset_secs() -> i128 {
    let ms = now_ms() as i128 - wall_now_ms() as i128;
    (ms + 500).div_euclid(1000)
}

/// A wall-clock time mapped to store time, with the clocks' offset now.
pub fn to_store(wall: u64) -> u64 {
    (wall as i128 + offset_secs()).clamp(0, u64::MAX as i128) as u64
}

/// A store time mapped to wall-clock time, with the clocks' offset now
/// (the inverse of [`to_store`]).
pub fn to_wall(store: u64) -> u64 {
    (store as i128 - offset_secs()).clamp(0, u64::MAX as i128) as u64
}
