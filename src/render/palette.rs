//! Frame colours, by the palette names flamegraph.pl's `--colors` uses.
//!
//! A colour is a function of the frame's name alone, so the same function
//! has the same colour in every graph and on every reload. The multi
//! palettes pick a hue from what the name says about the code (emberd's
//! `_[k]` kernel, `_[j]` JIT and `_[i]` inlined suffixes, Python's
//! `qualname (file.py)`, `::` namespaces, paths); the shade within the hue
//! comes from a hash of the name.

use std::fmt;

pub use crate::query::palette::Palette;

/// A colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb {
    /// Red.
    pub r: u8,
    /// Green.
    pub g: u8,
    /// Blue.
    pub b: u8,
}

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rgb({},{},{})", self.r, self.g, self.b)
    }
}

/// One hue family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hue {
    Hot,
    Mem,
    Io,
    Red,
    Green,
    Blue,
    Aqua,
    Yellow,
    Purple,
    Orange,
}

impl Palette {
    /// The colour of a frame named `name`. With `by_prefix`, similar names
    /// get similar shades (flamegraph.pl's `--hash`: the first characters
    /// weigh most); otherwise the shade is a hash of the whole name.
    pub fn color(self, name: &str, by_prefix: bool) -> Rgb {
        let (v1, v2, v3) = if by_prefix {
            let fwd = prefix_weight(name.bytes());
            let rev = prefix_weight(name.bytes().rev());
            (fwd, rev, rev)
        } else {
            let h = fnv1a(name.as_bytes());
            let unit = |x: u64| (x >> 40) as f32 / (1u64 << 24) as f32;
            let h = mix(h);
            (unit(h), unit(mix(h)), unit(mix(mix(h))))
        };
        shade(self.hue(name), v1, v2, v3)
    }

    fn hue(self, name: &str) -> Hue {
        match self {
            Palette::Hot => Hue::Hot,
            Palette::Mem => Hue::Mem,
            Palette::Io => Hue::Io,
            Palette::Wakeup | Palette::Aqua => Hue::Aqua,
            Palette::Red => Hue::Red,
            Palette::Green => Hue::Green,
            Palette::Blue => Hue::Blue,
            Palette::Yellow => Hue::Yellow,
            Palette::Purple => Hue::Purple,
            Palette::Orange => Hue::Orange,
            Palette::Java | Palette::Js => {
                if let Some(h) = suffix_hue(name) {
                    h
                } else if name.contains("::") {
                    Hue::Yellow
                } else if self == Palette::Js && name.contains("node_modules/") {
                    Hue::Purple
                } else if (self == Palette::Js && name.contains(".js"))
                    || (self == Palette::Java
                        && (name.contains('/')
                            || (name.contains('.') && !name.starts_with('['))
                            || name.starts_with(|c: char| c.is_ascii_uppercase())))
                {
                    // JavaScript files; Java's packages and classes.
                    Hue::Green
                } else {
                    Hue::Red
                }
            }
            Palette::Perl => {
                if name.ends_with("_[k]") {
                    Hue::Orange
                } else if name.contains("Perl") || name.contains(".pl") {
                    Hue::Green
                } else if name.contains("::") {
                    Hue::Yellow
                } else {
                    Hue::Red
                }
            }
            Palette::Python => {
                if name.contains("site-packages") {
                    Hue::Aqua
                } else if name.contains("/python3")
                    || name.starts_with("<built-in")
                    || name.starts_with("<frozen")
                {
                    Hue::Yellow
                } else {
                    Hue::Red
                }
            }
            Palette::Rust => {
                let bare = name.trim_start_matches('<');
                if ["core::", "std::", "alloc::"]
                    .iter()
                    .any(|p| bare.starts_with(p))
                {
                    Hue::Orange
                } else if name.contains("::") {
                    Hue::Aqua
                } else {
                    Hue::Yellow
                }
            }
        }
    }
}

/// Whether a frame is an interpreted Python frame: `qualname (file.py)`
/// or, with lines, `qualname (file.py:LINE)` (py-spy's forms).
pub fn is_python_frame(name: &str) -> bool {
    let Some(inner) = name.strip_suffix(')') else {
        return false;
    };
    let file = inner.rsplit_once(" (").map_or("", |(_, f)| f);
    let file = match file.rsplit_once(':') {
        Some((f, line)) if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => f,
        _ => file,
    };
    file.ends_with(".py")
}

/// The hue emberd's frame suffixes ask for: kernel, JIT, inlined; and
/// Python frames, blue (as the java palette sets JIT frames apart).
fn suffix_hue(name: &str) -> Option<Hue> {
    if is_python_frame(name) {
        Some(Hue::Blue)
    } else if name.ends_with("_[k]") {
        Some(Hue::Orange)
    } else if name.ends_with("_[j]") {
        Some(Hue::Green)
    } else if name.ends_with("_[i]") {
        Some(Hue::Aqua)
    } else {
        None
    }
}

fn shade(hue: Hue, v1: f32, v2: f32, v3: f32) -> Rgb {
    // Base plus a span times a value in [0, 1): flamegraph.pl's ranges.
    let c = |base: u8, span: f32, v: f32| base.saturating_add((span * v) as u8);
    let (r, g, b) = match hue {
        Hue::Hot => (c(205, 50.0, v3), c(0, 230.0, v1), c(0, 55.0, v2)),
        Hue::Mem => (0, c(190, 50.0, v2), c(0, 210.0, v1)),
        Hue::Io => (c(80, 60.0, v1), c(80, 60.0, v1), c(190, 55.0, v2)),
        Hue::Red => (c(200, 55.0, v1), c(50, 80.0, v1), c(50, 80.0, v1)),
        Hue::Green => (c(50, 60.0, v1), c(200, 55.0, v1), c(50, 60.0, v1)),
        Hue::Blue => (c(80, 60.0, v1), c(80, 60.0, v1), c(205, 50.0, v1)),
        Hue::Aqua => (c(50, 60.0, v1), c(165, 55.0, v1), c(165, 55.0, v1)),
        Hue::Yellow => (c(175, 55.0, v1), c(175, 55.0, v1), c(50, 20.0, v1)),
        Hue::Purple => (c(190, 65.0, v1), c(80, 60.0, v1), c(190, 65.0, v1)),
        Hue::Orange => (c(190, 65.0, v1), c(90, 65.0, v1), 0),
    };
    Rgb { r, g, b }
}

/// FNV-1a: stable across machines and releases (a colour must not change
/// between two graphs because a hasher's seed did).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// splitmix64's finalizer: a second and third value from one hash.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A value in [0, 1) decided mostly by the first byte, less by the second
/// and third.
fn prefix_weight(bytes: impl Iterator<Item = u8>) -> f32 {
    let (mut v, mut weight, mut max) = (0.0f32, 1.0f32, 0.0f32);
    for b in bytes.take(3) {
        v += weight * f32::from(b % 10) / 10.0;
        max += weight;
        weight /= 10.0;
    }
    if max == 0.0 { 0.0 } else { v / max }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_colours_are_stable() {
        for name in Palette::NAMES {
            assert!(name.parse::<Palette>().is_ok(), "{name}");
        }
        assert!(
            "violet"
                .parse::<Palette>()
                .unwrap_err()
                .contains("hot, mem")
        );
        // Same name, same colour; the java palette's kinds by suffix.
        let p = Palette::Java;
        assert_eq!(p.color("hot_a", false), p.color("hot_a", false));
        let k = p.color("do_syscall_64_[k]", false);
        assert!(k.r >= 190 && k.b == 0, "kernel frames are orange: {k}");
        let py = p.color("Holdout.run (app.py)", false);
        assert!(py.b > py.r && py.b > py.g, "Python frames are blue: {py}");
        let pyl = p.color("run (app.py:12)", false);
        assert!(pyl.b > pyl.r, "with lines too: {pyl}");
        assert!(!is_python_frame("main") && !is_python_frame("f (x.pyc)"));
        let j = p.color("LazyCompile:*fib_[j]", false);
        assert!(j.g >= 200 && j.g > j.r, "JIT frames are green: {j}");
        for name in ["Jobs.leafWork_[j]", "Jobs.leafWork:45_[j]"] {
            let j = p.color(name, false);
            assert!(j.g >= 200 && j.g > j.r, "Java frames are green: {name} {j}");
        }
        let i = p.color("Jobs.middleStep:52_[i]", false);
        assert!(i.g == i.b && i.g > i.r, "inlined Java frames are aqua: {i}");
        let u = p.color("hot_a", false);
        assert!(u.r >= 200 && u.g < u.r, "C frames are red: {u}");
        let y = p.color("std::vector<int>::push_back", false);
        assert!(y.r >= 175 && y.r == y.g, "C++ frames are yellow: {y}");
        // Different names differ in shade.
        assert_ne!(p.color("hot_a", false), p.color("hot_b", false));
        // By prefix: names sharing their start share most of their shade.
        let a = Palette::Hot.color("parse_header", true);
        let b = Palette::Hot.color("parse_header_line", true);
        assert!((i16::from(a.g) - i16::from(b.g)).abs() < 10, "{a} vs {b}");
    }
}
