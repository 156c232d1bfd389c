//! Benchmark helper of `scripts/bench-history`: tiles the tier-0 files a
//! short daemon run wrote (SRC) over a week ending now, shifted in time,
//! into DST, then has the archive roll them up and trim them as a daemon
//! would over that week, and prints the bytes per tier, the roll-up's CPU
//! and the bytes written.
//!
//! Usage: history_week SRC DST [BUDGET_MIB [--redb]]
//!
//! With `--redb`, the same segments also go into a redb database (one
//! durable commit each, as the writer syncs each file), the roll-ups and
//! removals are applied to it, and its size and read time are printed
//! beside the files': the measurement behind files of our own.

use std::time::Instant;

use emberd::store::disk::segment::{self, Segment};
use emberd::store::disk::{Archive, DiskOptions, TIERS, file_name};

/// CPU seconds of this process (user and system).
fn cpu_seconds() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID).unwrap();
    t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() >= 3, "usage: history_week SRC DST [BUDGET_MIB]");
    let (src, dst) = (
        std::path::Path::new(&args[1]),
        std::path::Path::new(&args[2]),
    );
    let budget_mib: u64 = args.get(3).map_or(Ok(1024), |b| b.parse())?;
    let mut segs = Vec::new();
    for e in std::fs::read_dir(src)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "seg")
            && p.file_name().unwrap().to_str().unwrap().contains(".t0.")
        {
            segs.push(Segment::read(&p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?);
        }
    }
    anyhow::ensure!(!segs.is_empty(), "no tier-0 file in {}", src.display());
    let a = segs.iter().map(|s| s.header.start).min().unwrap();
    let b = segs
        .iter()
        .map(|s| s.header.start + s.header.len)
        .max()
        .unwrap();
    // Whole 30 s files only: the tile repeats without overlap.
    let (a, b) = (a.div_ceil(30) * 30, b / 30 * 30);
    let tile = b - a;
    anyhow::ensure!(
        tile >= 120,
        "the run covers {tile} s: record at least 3 minutes"
    );
    let t0_bytes: u64 = segs
        .iter()
        .filter(|s| s.header.start >= a && s.header.start + s.header.len <= b + 30)
        .map(|s| 12 + s.header.body_len + 200)
        .sum();
    println!(
        "recorded: {} s in {} tier-0 files, {:.2} MiB per hour at 1 s",
        tile,
        segs.len(),
        t0_bytes as f64 / tile as f64 * 3600.0 / 1048576.0
    );
    let now = emberd::shared::clock::now();
    let end = now - now % 30;
    let week = 7 * 86400;
    let _ = std::fs::remove_dir_all(dst);
    std::fs::create_dir_all(dst)?;
    std::fs::set_permissions(dst, std::os::unix::fs::PermissionsExt::from_mode(0o750))?;
    let mut written = 0u64;
    let mut files = 0u64;
    let mut write_time = 0.0;
    let mut db = match args.get(4).map(String::as_str) {
        Some("--redb") => Some(Redb::create(&dst.with_extension("redb"))?),
        _ => None,
    };
    let mut k = 0u64;
    let started = Instant::now();
    loop {
        let base = end - week + k * tile;
        if base >= end {
            break;
        }
        for s in &segs {
            if s.header.start < a || s.header.start >= b {
                continue;
            }
            let shift = base - a;
            let mut h = s.header.clone();
            h.start += shift;
            if h.start + h.len > end {
                continue;
            }
            for c in &mut h.covered {
                *c += shift;
            }
            let mut body = s.body.clone();
            for st in &mut body.slot_start {
                *st += shift;
            }
            let bytes = segment::encode(&mut h, &body)?;
            let name = file_name(&h.event, 0, h.start, h.len, files);
            let w = Instant::now();
            // As the writer does: written, synced, renamed into place.
            let tmp = dst.join(format!(".tmp-{name}"));
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, dst.join(&name))?;
            std::fs::File::open(dst)?.sync_all()?;
            write_time += w.elapsed().as_secs_f64();
            if let Some(db) = &mut db {
                db.put(&name, &bytes)?;
            }
            written += bytes.len() as u64;
            files += 1;
        }
        k += 1;
    }
    println!(
        "tiled: {files} tier-0 files, {:.1} MiB over a week (in {:.1} s, {:.1} s of it writing and syncing: {:.2} ms a file)",
        written as f64 / 1048576.0,
        started.elapsed().as_secs_f64(),
        write_time,
        write_time * 1000.0 / files.max(1) as f64
    );
    let archive = Archive::open(DiskOptions {
        dir: dst.to_owned(),
        budget_bytes: budget_mib << 20,
        max_age: week,
        read_only: false,
        query_bytes: 64 << 20,
        write_every: emberd::store::disk::defaults::WRITE_SECONDS,
    })?;
    let cpu = cpu_seconds();
    let t = Instant::now();
    archive.maintain(end);
    let (cpu, wall) = (cpu_seconds() - cpu, t.elapsed().as_secs_f64());
    use std::sync::atomic::Ordering::Relaxed;
    let c = &archive.counters;
    let rolled = c.bytes_written.load(Relaxed);
    println!(
        "roll-up of a week: {:.1} s CPU ({:.2} ms per hour of history), {:.1} s wall, {} roll-ups, {:.1} MiB written",
        cpu,
        cpu * 1000.0 / (7.0 * 24.0),
        wall,
        c.rollups.load(Relaxed),
        rolled as f64 / 1048576.0
    );
    let by = archive.size_by_tier();
    let hours = [
        2.0f64, // tier 0 holds 1 to 2 hours
        24.0 - 2.0,
        7.0 * 24.0 - 24.0,
    ];
    let mut total = 0;
    for (i, ((bytes, n), h)) in by.iter().zip(hours).enumerate() {
        total += bytes;
        let f: Vec<_> = archive
            .files("cpu", 0, u64::MAX)
            .into_iter()
            .filter(|f| f.tier as usize == i)
            .collect();
        let span: u64 = f.iter().map(|f| f.len).sum();
        println!(
            "tier {i} ({} s slots): {n} files, {:.1} MiB, {:.2} MiB per hour (cpu files span {:.1} h; nominal {h} h)",
            TIERS[i].resolution,
            *bytes as f64 / 1048576.0,
            if span > 0 {
                *bytes as f64 / (span as f64 / 3600.0) / 1048576.0
            } else {
                0.0
            },
            span as f64 / 3600.0,
        );
    }
    let dropped = (c.dropped_budget.load(Relaxed), c.dropped_age.load(Relaxed));
    println!(
        "kept: {:.1} MiB of a {budget_mib} MiB budget; dropped for budget {} and age {} files; oldest kept {:.1} days back",
        total as f64 / 1048576.0,
        dropped.0,
        dropped.1,
        archive
            .oldest("cpu")
            .map_or(0.0, |o| (end - o) as f64 / 86400.0)
    );
    println!(
        "write amplification: {:.2} (tier-0 bytes plus roll-ups written, over tier-0 bytes)",
        (written + rolled) as f64 / written as f64
    );
    if let Some(db) = &mut db {
        // The roll-ups and removals the archive did, done in the database:
        // every tier-0 value that is no longer a file goes, every file of a
        // coarser tier comes in.
        let kept: std::collections::HashSet<String> =
            ["cpu", "offcpu", "wakeup", "offwake", "pagefault", "blockio"]
                .iter()
                .flat_map(|e| archive.files(e, 0, u64::MAX))
                .map(|f| f.name)
                .collect();
        let t = Instant::now();
        let gone: Vec<String> = db
            .keys()?
            .into_iter()
            .filter(|k| !kept.contains(k))
            .collect();
        db.remove(&gone)?;
        for name in &kept {
            if !name.contains(".t0.") {
                db.put(name, &std::fs::read(dst.join(name))?)?;
            }
        }
        println!(
            "redb, the same segments as values (one durable commit each): writes {:.1} s ({:.2} ms each); roll-ups and removals {:.1} s",
            db.put_time,
            db.put_time * 1000.0 / files.max(1) as f64,
            t.elapsed().as_secs_f64()
        );
        let size = std::fs::metadata(&db.path)?.len();
        println!(
            "redb file: {:.1} MiB for {:.1} MiB of values kept (files: {:.1} MiB)",
            size as f64 / 1048576.0,
            total as f64 / 1048576.0,
            total as f64 / 1048576.0
        );
        let t = Instant::now();
        let n = db.read_all()?;
        let rt = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut m = 0u64;
        for name in &kept {
            m += std::fs::read(dst.join(name))?.len() as u64;
        }
        println!(
            "reading every value back (warm): redb {:.0} ms for {:.1} MiB, files {:.0} ms for {:.1} MiB",
            rt * 1000.0,
            n as f64 / 1048576.0,
            t.elapsed().as_secs_f64() * 1000.0,
            m as f64 / 1048576.0
        );
    }
    println!("end {end}");
    Ok(())
}

/// The comparison's embedded database: redb, a key per segment file.
struct Redb {
    db: redb::Database,
    path: std::path::PathBuf,
    put_time: f64,
}

const TABLE: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("segments");

impl Redb {
    fn create(path: &std::path::Path) -> anyhow::Result<Redb> {
        let _ = std::fs::remove_file(path);
        Ok(Redb {
            db: redb::Database::create(path)?,
            path: path.to_owned(),
            put_time: 0.0,
        })
    }

    fn put(&mut self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        let t = Instant::now();
        let tx = self.db.begin_write()?;
        tx.open_table(TABLE)?.insert(key, value)?;
        tx.commit()?;
        self.put_time += t.elapsed().as_secs_f64();
        Ok(())
    }

    fn keys(&self) -> anyhow::Result<Vec<String>> {
        use redb::ReadableTable;
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        let mut out = Vec::new();
        for kv in table.iter()? {
            out.push(kv?.0.value().to_owned());
        }
        Ok(out)
    }

    fn remove(&mut self, keys: &[String]) -> anyhow::Result<()> {
        let tx = self.db.begin_write()?;
        {
            let mut table = tx.open_table(TABLE)?;
            for k in keys {
                table.remove(k.as_str())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn read_all(&self) -> anyhow::Result<u64> {
        use redb::ReadableTable;
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        let mut n = 0;
        for kv in table.iter()? {
            n += kv?.1.value().len() as u64;
        }
        Ok(n)
    }
}
