//! Whose share a uid counts in. Every shared table holds each user to a
//! share, but "a user" cannot simply be a uid: a login with a subordinate
//! range in `/etc/subuid` (useradd gives every new account 65,536 uids;
//! rootless Podman runs containers in them) can run processes under
//! thousands of uids, each holding one place, and a share per uid would
//! neither stop them nor let anyone take a place back. A uid inside such a
//! range counts as the range's owner: its *account*.
//!
//! `/etc/subuid` is root's file; it is read again when its modification
//! time changes, looked at no more than every [`RECHECK`].

use std::path::{Path, PathBuf};

use super::Pid;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// How often the file's modification time is looked at.
pub const RECHECK: Duration = Duration::from_secs(10);
/// Bytes of the file read at most: a range a line, a million lines' worth
/// would be a broken file, not a host.
const MAX_BYTES: u64 = 1 << 20;
/// Ranges kept at most (the rest of the file is skipped and counted).
pub const MAX_RANGES: usize = 16_384;

/// Lines skipped at the host file's last read, for `/metrics`.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Lines of the host's `/etc/subuid` skipped at its last read (malformed,
/// an unknown owner, an overlap, uid 0, or past [`MAX_RANGES`]).
pub fn skipped_lines() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

/// The subordinate uids `start..start + count`, counted as `owner`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubRange {
    /// The first uid of the range.
    pub start: u32,
    /// How many uids it holds.
    pub count: u32,
    /// The uid of the login that owns it.
    pub owner: u32,
}

/// The subordinate ranges of the host, by first uid.
#[derive(Debug)]
pub struct Accounts {
    path: PathBuf,
    ranges: Vec<SubRange>,
    /// Lines of the last read that were not `owner:start:count` with a
    /// known owner, or past [`MAX_RANGES`].
    skipped: u64,
    mtime: Option<SystemTime>,
    checked_at: Instant,
}

impl Accounts {
    /// The host's ranges, from `/etc/subuid` (none if it is missing).
    pub fn system() -> Self {
        Self::system_at(Path::new("/etc/subuid"))
    }

    /// The ranges of the subuid-format file at `path`, owners' names
    /// looked up as the system does (`getpwnam`).
    fn system_at(path: &Path) -> Self {
        let accounts = Self::load(path, |name| {
            nix::unistd::User::from_name(name)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
        });
        SKIPPED.store(accounts.skipped, Ordering::Relaxed);
        accounts
    }

    /// The ranges of the subuid-format file at `path`, owners' names
    /// resolved by `uid_of` (a numeric owner is taken as is).
    fn load(path: &Path, uid_of: impl Fn(&str) -> Option<u32>) -> Self {
        let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let text = read_capped(path).unwrap_or_default();
        let (ranges, skipped) = parse(&text, uid_of);
        if skipped > 0 {
            tracing::warn!(
                "{}: {skipped} lines skipped (not owner:start:count with a known owner, or past {MAX_RANGES} ranges)",
                path.display()
            );
        }
        Self {
            path: path.to_path_buf(),
            ranges,
            skipped,
            mtime,
            checked_at: Instant::now(),
        }
    }

    /// No ranges: every uid its own account.
    #[cfg(test)]
    pub(crate) fn empty() -> Self {
        Self {
            path: PathBuf::new(),
            ranges: Vec::new(),
            skipped: 0,
            mtime: None,
            checked_at: Instant::now(),
        }
    }

    /// The account `uid` counts in: the owner of the range holding it, or
    /// itself.
    pub fn account(&self, uid: u32) -> u32 {
        account_in(&self.ranges, uid)
    }

    /// The account process `pid` counts in, by its real uid (`None`: it is
    /// gone).
    pub fn of_pid(&self, pid: Pid) -> Option<u32> {
        real_uid(pid).map(|uid| self.account(uid))
    }

    /// Reads the file again if it changed (looked at no more than every
    /// [`RECHECK`]); whether it was read again.
    pub fn refresh(&mut self) -> bool {
        if self.checked_at.elapsed() < RECHECK {
            return false;
        }
        self.checked_at = Instant::now();
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if mtime == self.mtime {
            return false;
        }
        *self = Self::system_at(&self.path);
        true
    }

    /// The ranges, by first uid, none overlapping.
    pub fn ranges(&self) -> &[SubRange] {
        &self.ranges
    }

    /// Lines of the file skipped at its last read.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// A process's real user id (from `/proc/PID/status`, not the owner of
/// `/proc/PID`, which a process can turn to root by making itself
/// undumpable); `None` when the process is gone.
pub fn real_uid(pid: Pid) -> Option<u32> {
    use std::io::Read;
    let mut text = Vec::new();
    // The Uid line comes within the first 1 KiB; bytes, not a String: the
    // Name line is the process's own choice and need not be UTF-8.
    std::fs::File::open(format!("/proc/{pid}/status"))
        .ok()?
        .take(4096)
        .read_to_end(&mut text)
        .ok()?;
    text.split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"Uid:"))
        .and_then(|rest| std::str::from_utf8(rest).ok())
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

fn read_capped(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_BYTES)
        .read_to_end(&mut text)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The account `uid` counts in among `ranges` (sorted by first uid, none
/// overlapping, as [`parse`] returns them): the owner of the range holding
/// it, or itself.
pub fn account_in(ranges: &[SubRange], uid: u32) -> u32 {
    let i = ranges.partition_point(|r| r.start <= uid);
    match i.checked_sub(1).map(|i| ranges[i]) {
        Some(r) if uid - r.start < r.count => r.owner,
        _ => uid,
    }
}

/// The ranges of subuid-format `text` (owners' names resolved by
/// `uid_of`), sorted by first uid, overlaps trimmed (the lower start keeps
/// them), at most [`MAX_RANGES`], and the lines skipped.
pub fn parse(text: &str, uid_of: impl Fn(&str) -> Option<u32>) -> (Vec<SubRange>, u64) {
    let mut ranges = Vec::new();
    let mut skipped = 0u64;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split(':');
        let (Some(owner), Some(start), Some(count), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            skipped += 1;
            continue;
        };
        let owner = owner.parse::<u32>().ok().or_else(|| uid_of(owner));
        let (Some(owner), Ok(start), Ok(count)) =
            (owner, start.parse::<u32>(), count.parse::<u32>())
        else {
            skipped += 1;
            continue;
        };
        // A range holding uid 0 would make root's services someone's.
        if count == 0
            || start == 0
            || start.checked_add(count - 1).is_none()
            || ranges.len() >= MAX_RANGES
        {
            skipped += 1;
            continue;
        }
        // Root's ranges (LXD and Incus give their containers one) hold
        // other people's processes: each is an account of its own, named
        // by its first uid, never root's.
        let owner = if owner == 0 { start } else { owner };
        ranges.push(SubRange {
            start,
            count,
            owner,
        });
    }
    // Where two ranges overlap, the lower start keeps the overlap and the
    // other keeps the rest (dropping it whole would leave its uids each a
    // user again); one wholly inside another is skipped.
    ranges.sort_by_key(|r| r.start);
    let mut kept: Vec<SubRange> = Vec::with_capacity(ranges.len());
    for mut r in ranges {
        if let Some(p) = kept.last() {
            let end = u64::from(p.start) + u64::from(p.count);
            let r_end = u64::from(r.start) + u64::from(r.count);
            if u64::from(r.start) < end {
                if r_end <= end {
                    skipped += 1;
                    continue;
                }
                r.count = (r_end - end) as u32;
                r.start = end as u32;
            }
        }
        kept.push(r);
    }
    (kept, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(name: &str) -> Option<u32> {
        match name {
            "root" => Some(0),
            "alice" => Some(1000),
            "bob" => Some(1001),
            _ => None,
        }
    }

    #[test]
    fn a_uid_in_a_range_counts_as_its_owner() {
        let (ranges, skipped) = parse(
            "alice:100000:65536\n# comment\n\nbob:165536:65536\n1002:231072:10\n",
            users,
        );
        assert_eq!(skipped, 0);
        let a = Accounts {
            path: PathBuf::new(),
            ranges,
            skipped,
            mtime: None,
            checked_at: Instant::now(),
        };
        assert_eq!(a.account(100_000), 1000);
        assert_eq!(a.account(165_535), 1000);
        assert_eq!(a.account(165_536), 1001);
        assert_eq!(a.account(231_081), 1002);
        assert_eq!(a.account(231_082), 231_082);
        assert_eq!(a.account(99_999), 99_999);
        assert_eq!(a.account(0), 0);
        assert_eq!(a.account(u32::MAX), u32::MAX);
    }

    #[test]
    fn malformed_unknown_and_overlapping_lines_are_skipped_and_counted() {
        let (ranges, skipped) = parse(
            "alice:100000:65536\nmallory:200000:10\nbob:100010:5\nbob:x:5\nbob:1:0\nbob:4294967295:2\nbob:1:2:3\nbob\nbob:0:10\n",
            users,
        );
        assert_eq!(
            ranges,
            vec![SubRange {
                start: 100_000,
                count: 65_536,
                owner: 1000
            }]
        );
        assert_eq!(skipped, 8);
    }

    #[test]
    fn an_overlapping_range_keeps_its_own_part() {
        let (ranges, skipped) = parse("alice:100000:10\nbob:100005:65536\n", users);
        assert_eq!(skipped, 0);
        assert_eq!(
            ranges,
            vec![
                SubRange {
                    start: 100_000,
                    count: 10,
                    owner: 1000
                },
                SubRange {
                    start: 100_010,
                    count: 65_531,
                    owner: 1001
                }
            ]
        );
    }

    #[test]
    fn roots_ranges_are_accounts_of_their_own() {
        let (ranges, _) = parse("root:1000000:1000000000\n0:2000000000:10\n", users);
        assert_eq!(ranges[0].owner, 1_000_000);
        assert_eq!(ranges[1].owner, 2_000_000_000);
    }

    /// A subuid line of known and unknown owners, edge starts and counts.
    fn line() -> impl proptest::strategy::Strategy<Value = (String, u32, u32)> {
        use proptest::prelude::*;
        let owner = prop_oneof![
            Just("alice".to_owned()),
            Just("bob".to_owned()),
            Just("root".to_owned()),
            Just("0".to_owned()),
            Just("1002".to_owned()),
            Just("mallory".to_owned()),
        ];
        let uid = prop_oneof![0u32..400, Just(u32::MAX - 3), Just(u32::MAX), any::<u32>()];
        (owner, uid.clone(), uid)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Whatever the lines, the ranges kept are sorted, disjoint, hold
        /// no uid 0 and do not wrap; they cover the uids of exactly the
        /// lines taken, and the lookup agrees with a plain scan.
        #[test]
        fn ranges_kept_are_disjoint_and_cover_the_lines_taken(
            lines in proptest::collection::vec(line(), 0..12)
        ) {
            let text: String = lines
                .iter()
                .map(|(o, s, c)| format!("{o}:{s}:{c}\n"))
                .collect();
            let (ranges, skipped) = parse(&text, users);
            proptest::prop_assert!(skipped as usize <= lines.len());
            for r in &ranges {
                proptest::prop_assert!(r.start > 0 && r.count > 0 && r.owner != 0, "{:?}", r);
                proptest::prop_assert!(r.start.checked_add(r.count - 1).is_some(), "{:?}", r);
            }
            for w in ranges.windows(2) {
                proptest::prop_assert!(
                    u64::from(w[0].start) + u64::from(w[0].count) <= u64::from(w[1].start),
                    "{:?}", w
                );
            }
            let taken: Vec<(u32, u32)> = lines
                .iter()
                .filter(|(o, _, _)| users(o).is_some() || o.parse::<u32>().is_ok())
                .filter(|(_, s, c)| *s > 0 && *c > 0 && s.checked_add(c - 1).is_some())
                .map(|(_, s, c)| (*s, *c))
                .collect();
            let in_range = |uid: u32, (s, c): (u32, u32)| uid >= s && uid - s < c;
            for &(s, c) in &taken {
                let last = s + (c - 1);
                for uid in [s - 1, s, last, last.wrapping_add(1)] {
                    let found = ranges.iter().find(|r| in_range(uid, (r.start, r.count)));
                    proptest::prop_assert_eq!(
                        found.is_some(),
                        taken.iter().any(|&t| in_range(uid, t)),
                        "uid {} in {:?}", uid, ranges
                    );
                    proptest::prop_assert_eq!(
                        account_in(&ranges, uid),
                        found.map_or(uid, |r| r.owner)
                    );
                }
            }
        }
    }

    #[test]
    fn a_missing_file_has_no_ranges() {
        let a = Accounts::load(Path::new("/nonexistent/subuid"), users);
        assert_eq!(a.account(100_000), 100_000);
        assert_eq!(a.skipped(), 0);
    }
}
