//! A process's code mappings from `/proc/PID/maps`, read within a bound.
//!
//! The file is as long as its process makes it: 65,530 mappings (the
//! default `vm.max_map_count`) of a file whose path is 3,900 bytes long
//! make 260 MB of text, which any local user can have in one process.
//! procfs's reader keeps every line parsed, paths included, and the daemon
//! reads a process's maps from the unwinder and the symbolizer: 293 MiB of
//! peak RSS for one such process, measured. Here only executable lines are
//! kept (the only ones a sampled address lies in), at most
//! [`MAX_KEPT_BYTES`] of them, and at most [`MAX_READ_BYTES`] of the file
//! are read: a process past either bound loses its own later code
//! mappings (their frames go unnamed or unwound by frame pointers), is
//! counted in [`truncated`], and costs the daemon a bounded read. Its maps
//! are then not read again for [`CUT_PAUSE`]: the unwinder and the
//! symbolizer re-read a process's maps when a sampled address lies outside
//! them, which for such a process is every time (16 MiB of 4 KiB lines
//! took the kernel about 0.16 s to write).

use std::io::{BufRead, BufReader, Read};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use procfs::FromBufRead;
use procfs::process::MemoryMap;

use super::Pid;

/// Bytes of `/proc/PID/maps` read at most: about 150,000 lines of an
/// ordinary process (a JVM or a database with thousands of mapped files
/// has well under 1 MB).
pub const MAX_READ_BYTES: u64 = 16 << 20;
/// Bytes of executable lines kept: thousands of code mappings (a large
/// browser or JVM has a few hundred).
pub const MAX_KEPT_BYTES: usize = 2 << 20;
/// A longer line is no mapping the kernel writes (a path is at most
/// `PATH_MAX`): skipped.
const MAX_LINE_BYTES: u64 = 8 << 10;

/// How long a process whose maps were cut is not read again.
pub const CUT_PAUSE: Duration = Duration::from_secs(30);
/// Processes remembered as cut at once (the oldest forgotten past it).
const CUT_REMEMBERED: usize = 1024;

static TRUNCATED: AtomicU64 = AtomicU64::new(0);
static CUT: Mutex<Vec<(Pid, Instant)>> = Mutex::new(Vec::new());

/// Reads of a process's maps cut at [`MAX_READ_BYTES`] or
/// [`MAX_KEPT_BYTES`] since the start.
pub fn truncated() -> u64 {
    TRUNCATED.load(Ordering::Relaxed)
}

/// The executable mappings of `pid`, in address order.
/// `WouldBlock` within [`CUT_PAUSE`] of a read of them that was cut.
pub fn code_maps(pid: Pid) -> std::io::Result<Vec<MemoryMap>> {
    let now = Instant::now();
    {
        let mut cut = CUT.lock().unwrap_or_else(|e| e.into_inner());
        cut.retain(|(_, at)| now.duration_since(*at) < CUT_PAUSE);
        if cut.iter().any(|(p, _)| *p == pid) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!("the maps of {pid} were over their bounds: not read again yet"),
            ));
        }
    }
    let file = std::fs::File::open(format!("/proc/{pid}/maps"))?;
    let (maps, was_cut) = read_code(file)?;
    if was_cut {
        let mut cut = CUT.lock().unwrap_or_else(|e| e.into_inner());
        if cut.len() >= CUT_REMEMBERED {
            cut.remove(0);
        }
        cut.push((pid, now));
    }
    Ok(maps)
}

/// The executable mappings listed in `maps` (the text of a maps file).
pub fn code_maps_of(maps: impl Read) -> std::io::Result<Vec<MemoryMap>> {
    read_code(maps).map(|(m, _)| m)
}

/// The executable mappings in `maps`, and whether the read was cut.
fn read_code(maps: impl Read) -> std::io::Result<(Vec<MemoryMap>, bool)> {
    let mut reader = BufReader::with_capacity(64 << 10, maps.take(MAX_READ_BYTES));
    let mut kept = Vec::new();
    let mut line = Vec::new();
    let cut;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            // The end, or MAX_READ_BYTES: a maps file ends in a newline.
            cut = reader.get_ref().limit() == 0;
            break;
        }
        if line.last() != Some(&b'\n') {
            // Longer than any line the kernel writes: skip to its end.
            let mut rest = Vec::new();
            reader.read_until(b'\n', &mut rest)?;
            continue;
        }
        // "start-end perms offset dev inode path": perms "r-xp".
        let executable = line
            .split(|&b| b == b' ')
            .nth(1)
            .is_some_and(|p| p.get(2) == Some(&b'x'));
        if !executable {
            continue;
        }
        if kept.len() + line.len() > MAX_KEPT_BYTES {
            cut = true;
            break;
        }
        kept.extend_from_slice(&line);
    }
    if cut {
        TRUNCATED.fetch_add(1, Ordering::Relaxed);
    }
    let maps = procfs::process::MemoryMaps::from_buf_read(kept.as_slice())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    Ok((maps.into_iter().collect(), cut))
}

/// Whether `md` is the file a maps line names by device (major, minor)
/// and inode.
pub fn same_inode(md: &std::fs::Metadata, dev: (i32, i32), inode: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (major, minor) = (libc::major(md.dev()), libc::minor(md.dev()));
    md.ino() == inode
        && i64::from(major) == i64::from(dev.0)
        && i64::from(minor) == i64::from(dev.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_code_is_kept() {
        let text = "\
00400000-00401000 r--p 00000000 08:01 1234 /usr/bin/x
00401000-00402000 r-xp 00001000 08:01 1234 /usr/bin/x
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
7ffff7fc1000-7ffff7fc3000 r-xp 00000000 00:00 0 [vdso]
";
        let maps = code_maps_of(text.as_bytes()).unwrap();
        assert_eq!(maps.len(), 2);
        assert_eq!(maps[0].address, (0x401000, 0x402000));
        assert_eq!(maps[0].offset, 0x1000);
        assert!(matches!(maps[1].pathname, procfs::process::MMapPath::Vdso));
    }

    #[test]
    fn a_huge_maps_file_is_read_within_its_bounds() {
        // 65,000 data mappings of a file with a 3,900-byte path, then code.
        let path = format!("/{}", "d".repeat(3900));
        let mut text = String::new();
        for i in 0..65_000u64 {
            let a = 0x10000000 + i * 0x2000;
            text += &format!("{a:x}-{:x} r--s 00000000 08:01 99 {path}\n", a + 0x1000);
        }
        text += "7f0000000000-7f0000001000 r-xp 00000000 08:01 5 /usr/lib/libc.so.6\n";
        let before = truncated();
        let maps = code_maps_of(text.as_bytes()).unwrap();
        // The code past 16 MiB is not reached: the process's own loss.
        assert!(maps.is_empty());
        assert_eq!(truncated(), before + 1);

        // Code mappings beyond the kept bytes are cut too.
        let mut code = String::new();
        for i in 0..1_000u64 {
            let a = 0x10000000 + i * 0x2000;
            code += &format!("{a:x}-{:x} r-xp 00000000 08:01 99 {path}\n", a + 0x1000);
        }
        let maps = code_maps_of(code.as_bytes()).unwrap();
        assert!(maps.len() < 1000 && maps.len() * 3900 <= MAX_KEPT_BYTES);
        assert_eq!(truncated(), before + 2);

        // A line no kernel writes is skipped, the rest read.
        let odd = format!(
            "1-2 r-xp 0 0:0 0 /{}\n00401000-00402000 r-xp 00001000 08:01 1234 /usr/bin/x\n",
            "x".repeat(20_000)
        );
        let maps = code_maps_of(odd.as_bytes()).unwrap();
        assert_eq!(maps.len(), 1);
    }
}
