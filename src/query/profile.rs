//! Profiles: named stacks aggregated into folded form, by a chosen grouping.
//!
//! This is the in-memory shape every renderer reads. The daemon's time-sliced
//! store (later) keeps many of these; `emberd record` keeps one.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::symbolize::SymbolizedSample;

/// What the first frame of every stack names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grouping {
    /// No grouping frame: the whole host's stacks merged.
    Host,
    /// The process name (`comm`), all processes of that name together.
    #[default]
    Process,
    /// `comm-PID`: one tower per process.
    Pid,
    /// `comm-PID/TID`: one tower per thread (the thread's own name).
    Thread,
    /// The service: the container's short id, the `.service` unit, else
    /// `process:NAME` (see [`crate::shared::Workload::service`]).
    Service,
}

impl FromStr for Grouping {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(Grouping::Host),
            "process" => Ok(Grouping::Process),
            "pid" => Ok(Grouping::Pid),
            "thread" => Ok(Grouping::Thread),
            "service" => Ok(Grouping::Service),
            other => Err(format!(
                "unknown grouping {other:?}: use host, service, process, pid or thread"
            )),
        }
    }
}

impl Grouping {
    /// The first frame of a stack under this grouping (none for `Host`).
    pub fn root_frame(
        self,
        process_comm: &str,
        thread_comm: &str,
        pid: crate::shared::Pid,
        tid: crate::shared::Tid,
        workload: &crate::shared::Workload,
    ) -> Option<String> {
        match self {
            Grouping::Host => None,
            Grouping::Service => Some(
                crate::shared::Workload::service(&workload.unit, &workload.container, process_comm)
                    .into_owned(),
            ),
            Grouping::Process => Some(process_comm.to_owned()),
            Grouping::Pid => Some(format!("{process_comm}-{pid}")),
            Grouping::Thread => Some(format!("{thread_comm}-{pid}/{tid}")),
        }
    }
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Grouping::Host => "host",
            Grouping::Process => "process",
            Grouping::Pid => "pid",
            Grouping::Thread => "thread",
            Grouping::Service => "service",
        })
    }
}

/// A character of a frame name as folded text carries it: `;` separates
/// frames, so it becomes `:`; every other whitespace or control character
/// (newline, tab, vertical tab, NEL, U+2028...) becomes a plain space, so
/// that no reader splits a line, or the stack from its count, inside a name.
pub(crate) fn folded_char(c: char) -> char {
    match c {
        ';' => ':',
        c if c.is_whitespace() || c.is_control() => ' ',
        c => c,
    }
}

/// Appends a frame's name to folded text, made safe for the format: see
/// [`folded_char`]; and `a;f 5 3` reads as a differential line (stack
/// `a;f`, counts 5 and 3) in flamegraph.pl and inferno, so the space before
/// a number that ends a name becomes `_`.
fn push_name(text: &mut String, frame: &str) {
    let start = text.len();
    if frame.contains(|c: char| folded_char(c) != c) {
        text.extend(frame.chars().map(folded_char));
    } else {
        text.push_str(frame);
    }
    if let Some(i) = text[start..].rfind(' ') {
        let tail = &text[start + i + 1..];
        if tail.starts_with(|c: char| c.is_ascii_digit())
            && tail.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            text.replace_range(start + i..start + i + 1, "_");
        }
    }
}

/// How an empty stack (no grouping frame and no frames) is written in
/// folded text: a line with nothing before the value would not read back.
pub const EMPTY_STACK: &str = "[empty]";

/// One folded stack: frames root first joined by `;`, without the count.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FoldedStack(String);

impl FoldedStack {
    /// Builds a folded stack from frame strings, making each safe for the
    /// format (see [`folded_char`]).
    pub fn from_frames<'a>(frames: impl IntoIterator<Item = &'a str>) -> Self {
        let mut s = String::new();
        for (i, f) in frames.into_iter().enumerate() {
            if i > 0 {
                s.push(';');
            }
            push_name(&mut s, f);
        }
        Self(s)
    }

    /// Appends `frame` to folded text under construction, after a `;` if
    /// the text is not empty, with the format's separators replaced as in
    /// [`FoldedStack::from_frames`]. With [`FoldedStack::from_text`], builds
    /// a stack without a string per frame.
    pub fn push_frame(text: &mut String, frame: &str) {
        if !text.is_empty() {
            text.push(';');
        }
        push_name(text, frame);
    }

    /// A stack from text built with [`FoldedStack::push_frame`].
    pub fn from_text(text: String) -> Self {
        Self(text)
    }

    /// `prefix;rest` from a root frame and an already folded stack.
    pub fn with_root(root: &str, rest: &FoldedStack) -> Self {
        let mut s = FoldedStack::from_frames([root]).0;
        if !rest.0.is_empty() {
            s.reserve(rest.0.len() + 1);
            s.push(';');
            s.push_str(&rest.0);
        }
        Self(s)
    }

    /// The folded text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The frames, root first.
    pub fn frames(&self) -> impl Iterator<Item = &str> {
        self.0.split(';')
    }
}

/// Stacks and their values (samples for CPU profiles).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    // ahash: SipHash of every folded line was a tenth of an uncached
    // flame graph's time.
    stacks: HashMap<FoldedStack, u64, ahash::RandomState>,
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a symbolized sample under `grouping`.
    pub fn add_sample(&mut self, s: &SymbolizedSample, grouping: Grouping) {
        use std::fmt::Write;
        let mut text = grouping
            .root_frame(&s.process_comm, &s.thread_comm, s.pid, s.tid, &s.workload)
            .map(|r| FoldedStack::from_frames([r.as_str()]).0)
            .unwrap_or_default();
        let mut name = String::new();
        for f in &s.frames {
            name.clear();
            let _ = write!(name, "{f}");
            FoldedStack::push_frame(&mut text, &name);
        }
        self.add(FoldedStack(text), s.count);
    }

    /// Adds `value` to `stack`.
    pub fn add(&mut self, stack: FoldedStack, value: u64) {
        *self.stacks.entry(stack).or_insert(0) += value;
    }

    /// Sum of all values.
    pub fn total(&self) -> u64 {
        // Saturating: a posted profile may carry values near 2^64.
        self.stacks.values().fold(0u64, |a, &v| a.saturating_add(v))
    }

    /// Number of distinct stacks.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// Whether the profile has no stacks.
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// Stacks and values, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&FoldedStack, u64)> {
        self.stacks.iter().map(|(k, &v)| (k, v))
    }

    /// Stacks and values, sorted by stack (the folded format's habit, which
    /// also makes output deterministic).
    pub fn sorted(&self) -> Vec<(&FoldedStack, u64)> {
        let mut v: Vec<_> = self.stacks.iter().map(|(k, &v)| (k, v)).collect();
        v.sort();
        v
    }
}

/// A profile from `(folded stack, value)` pairs, for unit tests.
#[cfg(test)]
pub(crate) fn test_profile(lines: &[(&str, u64)]) -> Profile {
    let mut p = Profile::new();
    for (s, v) in lines {
        p.add(FoldedStack::from_frames(s.split(';')), *v);
    }
    p
}
