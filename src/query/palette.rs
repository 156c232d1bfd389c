//! Palette names, as flamegraph.pl's `--colors` takes them, and each
//! event's default: words of a query (`colors=`). The colours themselves
//! are drawn by `render::palette`.

use std::str::FromStr;

use super::Event;

/// A palette: one hue for every frame, or a hue chosen per frame by the
/// kind of code its name shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Palette {
    /// Warm reds and yellows (CPU).
    Hot,
    /// Greens and blues (memory).
    Mem,
    /// Blues (I/O, off-CPU).
    Io,
    /// Aqua (wakeups).
    Wakeup,
    /// Reds.
    Red,
    /// Greens.
    Green,
    /// Blues.
    Blue,
    /// Aqua.
    Aqua,
    /// Yellows.
    Yellow,
    /// Purples.
    Purple,
    /// Oranges.
    Orange,
    /// Kernel orange, JIT green, inlined aqua, C++/Rust yellow, Java-like
    /// names green, the rest red.
    Java,
    /// As `java`, with JavaScript's `file.js:line` names in green and
    /// `node_modules` in purple.
    Js,
    /// Kernel orange, Perl green, `::` yellow, the rest red.
    Perl,
    /// Third-party (`site-packages`) aqua, the standard library yellow, the
    /// rest red.
    Python,
    /// Rust's `core`/`std`/`alloc` orange, other `::` paths aqua, the rest
    /// (C, the kernel) yellow.
    Rust,
}

impl Palette {
    /// Every palette name, for error messages.
    pub const NAMES: &'static [&'static str] = &[
        "hot", "mem", "io", "wakeup", "red", "green", "blue", "aqua", "yellow", "purple", "orange",
        "java", "js", "perl", "python", "rust",
    ];
}

impl FromStr for Palette {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "hot" => Palette::Hot,
            "mem" => Palette::Mem,
            "io" => Palette::Io,
            "wakeup" => Palette::Wakeup,
            "red" => Palette::Red,
            "green" => Palette::Green,
            "blue" => Palette::Blue,
            "aqua" => Palette::Aqua,
            "yellow" => Palette::Yellow,
            "purple" => Palette::Purple,
            "orange" => Palette::Orange,
            "java" => Palette::Java,
            "js" => Palette::Js,
            "perl" => Palette::Perl,
            "python" => Palette::Python,
            "rust" => Palette::Rust,
            other => {
                return Err(format!(
                    "unknown palette {other:?}; use one of {}",
                    Palette::NAMES.join(", ")
                ));
            }
        })
    }
}

impl Event {
    /// The default palette, after flamegraph.pl's habits (its row of
    /// [`crate::shared::events::EVENTS`]).
    pub fn palette(self) -> Palette {
        // Every row's name parses: see the test below.
        self.spec().palette.parse().unwrap_or(Palette::Hot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_events_default_palette_is_a_palette_name() {
        for e in crate::shared::events::EVENTS {
            assert!(
                e.palette.parse::<Palette>().is_ok(),
                "{}: {}",
                e.name,
                e.palette
            );
        }
        assert_eq!(Event::OffWake.palette(), Palette::Aqua);
    }
}
