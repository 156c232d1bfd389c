//! History on disk: the flight recorder. Every 30 s the memory stores'
//! sealed seconds are written as one segment file per event (tier 0, full
//! resolution); as they age, segments are rolled up into coarser tiers
//! (10 s slots an hour a file, then 60 s slots six hours a file), and the
//! oldest files go when the disk budget or the age limit is passed.
//!
//! Files are immutable: written under a temporary name, synced, renamed
//! into place, so a kill leaves either the whole file or a temporary one
//! (removed at the next start). A roll-up writes its file before removing
//! the finer ones; a start that finds both removes the finer. Every file
//! that does not read back (torn, corrupt, of another version, planted) is
//! skipped, counted by reason and logged, and removed when the directory
//! is ours to write.
//!
//! The directory belongs to the daemon's user and group `emberd` (mode
//! 0750, files 0640): members of that group may read profiles anyway (the
//! token file is theirs too); nobody else may read, add or replace a file.

pub mod segment;
pub mod writer;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use segment::{Builder, Segment, SegmentError};

use super::Selection;
use super::merge::Merger;

/// Defaults of the disk history's settings.
pub mod defaults {
    /// Bytes the files may take, MiB (`history_disk_mib`).
    pub const DISK_MIB: u64 = 1024;
    /// Days kept (`history_days`).
    pub const DAYS: u64 = 7;
    /// Seconds between writes, the span of a tier-0 file
    /// (`history_write_seconds`): a kill loses at most this, the seal
    /// delay and a drain.
    pub const WRITE_SECONDS: u64 = 30;
    /// Estimated bytes one query may hold while it merges disk segments
    /// (its interned stacks and sums); past it, further new stacks are
    /// counted under one marker frame. The memory store's own budget
    /// bounds queries of memory alike.
    pub const QUERY_BYTES: usize = 64 << 20;
}

/// One tier: its slots' length, a file's span, and the age at which its
/// files are rolled up into the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier {
    /// Slot length, seconds.
    pub resolution: u64,
    /// Seconds one file covers at most (files start at multiples of it):
    /// what roll-ups into this tier merge. Not read for tier 0, whose
    /// files span the writer's interval, [`DiskOptions::write_every`]
    /// (its default here).
    pub span: u64,
    /// Age (seconds after a next-tier span ends) at which this tier's
    /// files in that span are rolled up; `u64::MAX`: never.
    pub keep: u64,
}

/// The tiers: full resolution (1 s) 30 s a file for at least an hour,
/// 10 s an hour a file for a day, then 60 s six hours a file.
pub const TIERS: [Tier; 3] = [
    Tier {
        resolution: 1,
        span: defaults::WRITE_SECONDS,
        keep: 3600,
    },
    Tier {
        resolution: 10,
        span: 3600,
        keep: 86400,
    },
    Tier {
        resolution: 60,
        span: 6 * 3600,
        keep: u64::MAX,
    },
];

/// Where and how much.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// The directory.
    pub dir: PathBuf,
    /// Bytes the files may take.
    pub budget_bytes: u64,
    /// Seconds a file is kept after its end.
    pub max_age: u64,
    /// Read only (a copied directory served offline): nothing is written,
    /// removed or rolled up, and the directory's owner is not checked.
    pub read_only: bool,
    /// Bytes one query may hold while merging ([`defaults::QUERY_BYTES`]).
    pub query_bytes: usize,
    /// Seconds between writes, a divisor of a minute
    /// ([`defaults::WRITE_SECONDS`]): each write is one file per event
    /// that has samples. Files of any span read alike, so a restart with
    /// another interval serves the old files as they are.
    pub write_every: u64,
}

/// Why the history directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// Making or reading the directory failed.
    #[error("history_dir {dir}: {what}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// What was tried.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Another user could write into the directory.
    #[error(
        "history_dir {0}: {1}; a local user could plant or replace history files there. \
         Give it to emberd's user (chown) with mode 0750, or choose another directory"
    )]
    Unsafe(PathBuf, String),
    /// The writer's interval does not divide a minute.
    #[error(
        "history_write_seconds = {0}: use a divisor of 60 (5, 6, 10, 12, 15, 20, 30 or 60): \
         files start at multiples of their span, and a tier-1 hour must hold whole files"
    )]
    WriteInterval(u64),
}

/// Whether `seconds` can be the writer's interval
/// ([`DiskOptions::write_every`]): files start at multiples of their span,
/// and the hourly roll-up must hold whole files, so it divides a minute.
pub fn write_interval_fits(seconds: u64) -> bool {
    seconds > 0 && 60 % seconds == 0
}

/// One segment file as the index knows it (from its name and header).
#[derive(Debug, Clone)]
pub struct FileMeta {
    /// File name in the directory.
    pub name: String,
    /// Tier.
    pub tier: u32,
    /// First second.
    pub start: u64,
    /// Seconds to the end of its last.
    pub len: u64,
    /// Slot length.
    pub resolution: u64,
    /// Spans holding data.
    pub covered: Vec<(u64, u64)>,
    /// Size.
    pub bytes: u64,
}

impl FileMeta {
    /// End, exclusive.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// Counters of the disk history, for `/metrics`.
#[derive(Debug, Default)]
pub struct DiskCounters {
    /// Segment files written (roll-ups included).
    pub files_written: AtomicU64,
    /// Bytes written.
    pub bytes_written: AtomicU64,
    /// Roll-ups done.
    pub rollups: AtomicU64,
    /// Files skipped (and removed when writable): format (garbage,
    /// another version), truncated, corrupt, io, foreign (not a regular
    /// file of ours).
    pub skipped_format: AtomicU64,
    /// See `skipped_format`.
    pub skipped_truncated: AtomicU64,
    /// See `skipped_format`.
    pub skipped_corrupt: AtomicU64,
    /// See `skipped_format`.
    pub skipped_io: AtomicU64,
    /// See `skipped_format`.
    pub skipped_foreign: AtomicU64,
    /// Temporary files of an interrupted write, removed at start.
    pub temp_removed: AtomicU64,
    /// Files removed to stay within the disk budget.
    pub dropped_budget: AtomicU64,
    /// Files removed past the age limit.
    pub dropped_age: AtomicU64,
    /// Writes that failed (disk full, read-only, ...).
    pub write_errors: AtomicU64,
    /// Segments not written because the writer's queue was full.
    pub dropped_queue: AtomicU64,
    /// Queries whose merge reached the query bound.
    pub query_bounded: AtomicU64,
}

impl DiskCounters {
    fn skipped(&self, e: &SegmentError) -> &AtomicU64 {
        match e {
            SegmentError::Format(_) => &self.skipped_format,
            SegmentError::Truncated(_) => &self.skipped_truncated,
            SegmentError::Corrupt(_) => &self.skipped_corrupt,
            SegmentError::Io(_) => &self.skipped_io,
        }
    }
}

/// Each event's files by (start, name).
type Index = BTreeMap<String, BTreeMap<(u64, String), FileMeta>>;

/// The directory of segment files and its index.
#[derive(Debug)]
pub struct Archive {
    options: DiskOptions,
    /// Per event, files by (start, name).
    index: RwLock<Index>,
    /// Counters.
    pub counters: DiskCounters,
    /// Whether the last write succeeded (false: writing stopped, retried
    /// each minute).
    pub writing: AtomicBool,
    /// Group of the files (`emberd`), if it exists.
    gid: Option<u32>,
    /// Makes names written in the same millisecond distinct.
    nonce: AtomicU64,
    /// Serializes writes, roll-ups and removals.
    write_lock: Mutex<()>,
}

/// The name of a segment file.
pub fn file_name(event: &str, tier: u32, start: u64, len: u64, nonce: u64) -> String {
    format!("{event}.t{tier}.{start}.{len}.{nonce:x}.seg")
}

/// Event, tier, start and length from a file's name.
fn parse_name(name: &str) -> Option<(String, u32, u64, u64)> {
    let mut p = name.strip_suffix(".seg")?.split('.');
    let event = p.next()?;
    let tier = p.next()?.strip_prefix('t')?.parse().ok()?;
    let start = p.next()?.parse().ok()?;
    let len = p.next()?.parse().ok()?;
    u64::from_str_radix(p.next()?, 16).ok()?;
    if p.next().is_some() || crate::shared::events::Event::from_name(event).is_none() {
        return None;
    }
    Some((event.to_owned(), tier, start, len))
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

impl Archive {
    /// Opens (making it if needed, unless read only) the directory, checks
    /// who may write it, and indexes its files: temporary files removed,
    /// unreadable ones skipped and counted, finer files a roll-up already
    /// covers removed.
    pub fn open(options: DiskOptions) -> Result<Archive, DiskError> {
        if !write_interval_fits(options.write_every) {
            return Err(DiskError::WriteInterval(options.write_every));
        }
        let dir = options.dir.clone();
        let io = |what, source| DiskError::Io {
            dir: dir.clone(),
            what,
            source,
        };
        let gid = nix::unistd::Group::from_name("emberd")
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw());
        if !options.read_only {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(&dir)
                .map_err(|e| io("making it", e))?;
        }
        let md = std::fs::symlink_metadata(&dir).map_err(|e| io("reading it", e))?;
        if !md.is_dir() {
            return Err(DiskError::Unsafe(
                dir.clone(),
                "it is not a directory (a symbolic link is not followed)".into(),
            ));
        }
        if !options.read_only {
            if md.uid() != euid() {
                return Err(DiskError::Unsafe(
                    dir.clone(),
                    format!("it belongs to uid {}, not emberd's ({})", md.uid(), euid()),
                ));
            }
            if md.mode() & 0o7777 != 0o750 {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))
                    .map_err(|e| io("setting its mode to 0750", e))?;
            }
            if let Some(g) = gid
                && md.gid() != g
            {
                nix::unistd::chown(&dir, None, Some(nix::unistd::Gid::from_raw(g)))
                    .map_err(|e| io("giving it to group emberd", e.into()))?;
            }
        }
        let archive = Archive {
            options,
            index: RwLock::new(BTreeMap::new()),
            counters: DiskCounters::default(),
            writing: AtomicBool::new(true),
            gid,
            nonce: AtomicU64::new(0),
            write_lock: Mutex::new(()),
        };
        archive.scan().map_err(|e| io("listing it", e))?;
        Ok(archive)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.options.dir
    }

    /// The options it was opened with.
    pub fn options(&self) -> &DiskOptions {
        &self.options
    }

    fn remove(&self, name: &str) {
        if !self.options.read_only {
            let _ = std::fs::remove_file(self.options.dir.join(name));
        }
    }

    /// Counts and logs a file that does not read, and removes it when the
    /// directory is ours.
    fn skip(&self, name: &str, e: &SegmentError) {
        self.counters.skipped(e).fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "history file {} skipped: {e}{}",
            self.options.dir.join(name).display(),
            if self.options.read_only {
                ""
            } else {
                "; removed"
            }
        );
        self.remove(name);
    }

    fn scan(&self) -> std::io::Result<()> {
        let mut index: Index = BTreeMap::new();
        for entry in std::fs::read_dir(&self.options.dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                self.counters
                    .skipped_foreign
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if name.starts_with(".tmp-") {
                self.counters.temp_removed.fetch_add(1, Ordering::Relaxed);
                self.remove(&name);
                continue;
            }
            let md = entry.metadata()?;
            let parsed = parse_name(&name);
            let ours = md.is_file() && (self.options.read_only || md.uid() == euid());
            let Some((event, tier, start, len)) = parsed.filter(|_| ours) else {
                self.counters
                    .skipped_foreign
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "history_dir {}: {name:?} is not a history file of emberd's; left alone and not read",
                    self.options.dir.display()
                );
                continue;
            };
            let header = segment::open_nofollow(&entry.path())
                .map_err(SegmentError::Io)
                .and_then(|f| {
                    let len = f.metadata()?.len();
                    segment::read_header(&mut std::io::BufReader::new(f), len)
                });
            let header = match header {
                Ok(h) if h.event == event && h.tier == tier && h.start == start && h.len == len => {
                    h
                }
                Ok(_) => {
                    self.skip(
                        &name,
                        &SegmentError::Corrupt("its header and name disagree".into()),
                    );
                    continue;
                }
                Err(e) => {
                    self.skip(&name, &e);
                    continue;
                }
            };
            let meta = FileMeta {
                name: name.clone(),
                tier,
                start,
                len,
                resolution: header.resolution,
                covered: segment::spans(&header.covered),
                bytes: md.len(),
            };
            index.entry(event).or_default().insert((start, name), meta);
        }
        // A roll-up interrupted between writing its file and removing the
        // finer ones leaves both: the coarser file has it all.
        for files in index.values_mut() {
            let coarse: Vec<(u32, u64, u64)> =
                files.values().map(|f| (f.tier, f.start, f.end())).collect();
            let finer: Vec<(u64, String)> = files
                .iter()
                .filter(|(_, f)| {
                    coarse
                        .iter()
                        .any(|&(t, s, e)| t > f.tier && s <= f.start && f.end() <= e)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in finer {
                self.remove(&k.1);
                files.remove(&k);
            }
        }
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = index;
        Ok(())
    }

    /// Files of `event` overlapping `[from, to)`, oldest first.
    pub fn files(&self, event: &str, from: u64, to: u64) -> Vec<FileMeta> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        let Some(files) = index.get(event) else {
            return Vec::new();
        };
        files
            .values()
            .filter(|f| f.start < to && f.end() > from)
            .cloned()
            .collect()
    }

    /// Start of the oldest file of `event`.
    pub fn oldest(&self, event: &str) -> Option<u64> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index.get(event)?.values().map(|f| f.start).min()
    }

    /// End of the newest file of any event.
    pub fn newest(&self) -> Option<u64> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        index
            .values()
            .flat_map(|f| f.values())
            .map(FileMeta::end)
            .max()
    }

    /// Bytes and count of all files.
    pub fn size(&self) -> (u64, usize) {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        let all = index.values().flat_map(|f| f.values());
        all.fold((0, 0), |(b, n), f| (b + f.bytes, n + 1))
    }

    /// Bytes and count of files, per tier.
    pub fn size_by_tier(&self) -> [(u64, usize); TIERS.len()] {
        let mut out = [(0, 0); TIERS.len()];
        let index = self.index.read().unwrap_or_else(|e| e.into_inner());
        for f in index.values().flat_map(|f| f.values()) {
            if let Some(t) = out.get_mut(f.tier as usize) {
                t.0 += f.bytes;
                t.1 += 1;
            }
        }
        out
    }

    /// Reads one file of the index; a file that does not read is skipped,
    /// counted and dropped from the index.
    pub fn read(&self, event: &str, f: &FileMeta) -> Option<Segment> {
        match Segment::read(&self.options.dir.join(&f.name)) {
            Ok(s) => Some(s),
            // Removed by a roll-up or the budget since it was listed.
            Err(SegmentError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                self.skip(&f.name, &e);
                let mut index = self.index.write().unwrap_or_else(|e| e.into_inner());
                if let Some(files) = index.get_mut(event) {
                    files.remove(&(f.start, f.name.clone()));
                }
                None
            }
        }
    }

    /// Writes one segment of `event` at `tier`; returns its index entry.
    /// An error stops nothing but this write (and is counted by the caller).
    pub fn write(&self, event: &str, tier: u32, b: Builder) -> std::io::Result<Option<FileMeta>> {
        if self.options.read_only {
            return Ok(None);
        }
        let covered = b.covered();
        let resolution = TIERS[tier as usize].resolution;
        let Some(bytes) = b.encode(event, tier) else {
            return Ok(None);
        };
        let (start, end) = (covered[0].0, covered[covered.len() - 1].1);
        let nonce = (crate::shared::clock::now_ms() << 8)
            | (self.nonce.fetch_add(1, Ordering::Relaxed) & 0xff);
        let name = file_name(event, tier, start, end - start, nonce);
        let tmp = self.options.dir.join(format!(".tmp-{name}"));
        let done = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)?;
            if let Some(g) = self.gid {
                std::os::unix::fs::fchown(&f, None, Some(g))?;
            }
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, self.options.dir.join(&name))?;
            std::fs::File::open(&self.options.dir)?.sync_all()
        })();
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.counters.files_written.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let meta = FileMeta {
            name: name.clone(),
            tier,
            start,
            len: end - start,
            resolution,
            covered,
            bytes: bytes.len() as u64,
        };
        self.index
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(event.to_owned())
            .or_default()
            .insert((start, name), meta.clone());
        Ok(Some(meta))
    }

    /// Removes files from the index, then from the disk.
    fn drop_files(&self, event: &str, files: &[FileMeta]) {
        {
            let mut index = self.index.write().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = index.get_mut(event) {
                for m in files {
                    f.remove(&(m.start, m.name.clone()));
                }
            }
        }
        for m in files {
            self.remove(&m.name);
        }
    }

    /// Rolls up what has aged, then removes what is past the age limit
    /// and, oldest first, what passes the budget. `now` is store seconds.
    pub fn maintain(&self, now: u64) {
        if self.options.read_only {
            return;
        }
        let _w = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let events: Vec<String> = self
            .index
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        let limit = now.saturating_sub(self.options.max_age);
        for event in &events {
            let old: Vec<FileMeta> = self
                .files(event, 0, u64::MAX)
                .into_iter()
                .filter(|f| f.end() <= limit)
                .collect();
            self.counters
                .dropped_age
                .fetch_add(old.len() as u64, Ordering::Relaxed);
            self.drop_files(event, &old);
            for tier in 0..TIERS.len() - 1 {
                self.roll_up(event, tier, now);
            }
        }
        self.within_budget();
    }

    /// Rolls tier `tier`'s files of each next-tier span that has aged past
    /// `TIERS[tier].keep` into one file of the next tier.
    fn roll_up(&self, event: &str, tier: usize, now: u64) {
        let next = TIERS[tier + 1];
        let mut groups: BTreeMap<u64, Vec<FileMeta>> = BTreeMap::new();
        for f in self.files(event, 0, u64::MAX) {
            if f.tier as usize == tier {
                let span = f.start - f.start % next.span;
                if span + next.span + TIERS[tier].keep <= now {
                    groups.entry(span).or_default().push(f);
                }
            }
        }
        for (_, files) in groups {
            let mut b = Builder::new(next.resolution);
            for f in &files {
                if let Some(seg) = self.read(event, f) {
                    segment::copy_into(&seg, &mut b);
                }
                if b.too_big() {
                    break;
                }
            }
            if b.too_big() {
                tracing::warn!(
                    "history: {event} tier {tier} files from {} are too large to roll up; kept as they are",
                    files[0].start
                );
                continue;
            }
            match self.write(event, tier as u32 + 1, b) {
                Ok(_) => {
                    self.counters.rollups.fetch_add(1, Ordering::Relaxed);
                    self.drop_files(event, &files);
                }
                Err(e) => {
                    self.write_failed(&e);
                    return;
                }
            }
        }
    }

    /// Removes the files that end first until all fit the budget.
    fn within_budget(&self) {
        let (mut bytes, _) = self.size();
        if bytes <= self.options.budget_bytes {
            return;
        }
        let mut all: Vec<(u64, String, FileMeta)> = {
            let index = self.index.read().unwrap_or_else(|e| e.into_inner());
            index
                .iter()
                .flat_map(|(e, f)| f.values().map(move |m| (m.end(), e.clone(), m.clone())))
                .collect()
        };
        all.sort_by_key(|(end, _, m)| (*end, m.start));
        for (_, event, m) in all {
            if bytes <= self.options.budget_bytes {
                break;
            }
            bytes -= m.bytes;
            self.counters.dropped_budget.fetch_add(1, Ordering::Relaxed);
            self.drop_files(&event, std::slice::from_ref(&m));
        }
    }

    /// Counts a failed write and says so once, until writing works again.
    pub fn write_failed(&self, e: &std::io::Error) {
        self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
        if self.writing.swap(false, Ordering::Relaxed) {
            tracing::error!(
                "history: writing to {} failed: {e}; history on disk stops (sampling and serving go on) \
                 and is retried each minute",
                self.options.dir.display()
            );
        }
    }

    /// Notes a write that worked after failures.
    pub fn write_worked(&self) {
        if !self.writing.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "history: writing to {} works again",
                self.options.dir.display()
            );
        }
    }

    /// Up to when (store seconds) the disk answers for a window read at
    /// `now`: the memory store's last five minutes keep their 20 ms ticks
    /// and the seconds not yet written, so they are read from memory.
    pub fn claims_until(&self, now: u64) -> u64 {
        if self.options.read_only {
            u64::MAX
        } else {
            now.saturating_sub(super::FINE_FOR_SECS)
        }
    }

    /// Reads the files of `event` in `[from_ms, to_ms)` into `m`; returns
    /// the spans (seconds) they claim, which memory then does not answer.
    pub fn read_into(
        &self,
        event: &str,
        sel: &Selection,
        (from_ms, to_ms): (u64, u64),
        m: &mut Merger,
    ) -> Vec<(u64, u64)> {
        let (from, to) = (from_ms / 1000, to_ms.div_ceil(1000));
        let mut claimed = Vec::new();
        for f in self.files(event, from, to) {
            claimed.push((f.start.max(from), f.end().min(to)));
            if let Some(seg) = self.read(event, &f) {
                m.add_segment(&seg, sel, from_ms, to_ms);
            }
        }
        if m.merged_for_bound > 0 {
            self.counters.query_bounded.fetch_add(1, Ordering::Relaxed);
        }
        segment::merge_spans(claimed)
    }

    /// Per-slot totals of `event`'s files in `[from, to)` that pass `sel`
    /// (the heat map): per second, from the files' totals, for a short
    /// unfiltered window (at most `per_second_up_to` seconds), else per
    /// stored slot. Returns the slots and the spans claimed.
    pub fn timeline(
        &self,
        event: &str,
        sel: &Selection,
        from: u64,
        to: u64,
        per_second_up_to: u64,
    ) -> (Vec<super::TimeSlot>, Vec<(u64, u64)>) {
        let unfiltered = sel.pid.is_none()
            && sel.tid.is_none()
            && sel.comm.is_none()
            && sel.unit.is_none()
            && sel.container.is_none()
            && sel.service.is_none()
            && !sel.idle;
        let per_second = unfiltered && to.saturating_sub(from) <= per_second_up_to;
        let mut out = Vec::new();
        let mut claimed = Vec::new();
        for f in self.files(event, from, to) {
            claimed.push((f.start.max(from), f.end().min(to)));
            let Some(seg) = self.read(event, &f) else {
                continue;
            };
            if per_second {
                let start = seg.header.start;
                let covered = seg.covered();
                for i in 0..seg.header.len {
                    let s = start + i;
                    if s < from || s >= to || !covered.iter().any(|&(a, b)| a <= s && s < b) {
                        continue;
                    }
                    let value = seg.body.second_totals.get(i as usize).copied().unwrap_or(0);
                    out.push(super::TimeSlot {
                        start: s,
                        len: 1,
                        value,
                        ticks: Vec::new(),
                    });
                }
                continue;
            }
            let b = &seg.body;
            let mut pass: Vec<Option<bool>> = vec![None; b.thread_pid.len()];
            for (start, len, range) in seg.slots() {
                if start + len <= from || start >= to {
                    continue;
                }
                let mut value = 0;
                for e in range {
                    let t = b.entry_thread[e] as usize;
                    let ok = *pass[t].get_or_insert_with(|| seg.thread_passes(t, sel));
                    if ok {
                        value += b.entry_value[e];
                    }
                }
                out.push(super::TimeSlot {
                    start,
                    len,
                    value,
                    ticks: Vec::new(),
                });
            }
        }
        out.sort_by_key(|s| s.start);
        (out, segment::merge_spans(claimed))
    }

    /// The spans of `event`'s files within `[from, to)` that hold data,
    /// with each file's resolution.
    pub fn layout(&self, event: &str, from: u64, to: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        for f in self.files(event, from, to) {
            for (a, b) in &f.covered {
                let (a, b) = ((*a).max(from), (*b).min(to));
                if a < b {
                    out.push((a, b, f.resolution));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_foreign_names_do_not() {
        let n = file_name("offcpu", 1, 1000, 3600, 0xabc);
        assert_eq!(parse_name(&n), Some(("offcpu".into(), 1, 1000, 3600)));
        for bad in [
            "x.t0.1.2.3.seg",
            "cpu.t0.1.2.seg",
            "cpu.0.1.2.3.seg",
            "cpu.t0.1.2.3.seg.bak",
            "cpu.t0.1.2.zz.seg",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }

    /// An interval that does not divide a minute is refused before the
    /// directory is made (the config refuses it too; a library user may
    /// not go through it).
    #[test]
    fn a_write_interval_must_divide_a_minute() {
        let dir = std::env::temp_dir().join(format!("emberd-interval-{}", std::process::id()));
        let options = |write_every| DiskOptions {
            dir: dir.clone(),
            budget_bytes: 1 << 20,
            max_age: 3600,
            read_only: false,
            query_bytes: defaults::QUERY_BYTES,
            write_every,
        };
        for bad in [0, 7, 45, 120] {
            let e = Archive::open(options(bad)).unwrap_err();
            assert!(matches!(e, DiskError::WriteInterval(n) if n == bad), "{e}");
            assert!(!dir.exists(), "{bad}: the directory was made");
        }
        let said = DiskError::WriteInterval(7).to_string();
        assert!(
            said.starts_with("history_write_seconds = 7: use a divisor of 60"),
            "{said}"
        );
        for good in [1, 5, 6, 10, 12, 15, 20, 30, 60] {
            assert!(write_interval_fits(good), "{good}");
        }
    }
}
