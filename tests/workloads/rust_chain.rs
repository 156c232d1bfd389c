//! emberd_outer -> emberd_middle -> emberd_inner, the inner one spinning
//! until argv[1] seconds (default 10) have passed. Built with
//! `rustc -C opt-level=3 -C debuginfo=0`: no frame pointers.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);

#[inline(never)]
fn emberd_inner(mut x: u64) -> u64 {
    while !STOP.load(Ordering::Relaxed) {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

#[inline(never)]
fn emberd_middle(x: u64) -> u64 {
    black_box(emberd_inner(black_box(x))) + 2
}

#[inline(never)]
fn emberd_outer(x: u64) -> u64 {
    black_box(emberd_middle(black_box(x))) + 3
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(secs));
        STOP.store(true, Ordering::Relaxed);
    });
    println!("{}", emberd_outer(black_box(7)));
}
