//! Reading another process's memory, for the runtimes whose state the
//! agent reads itself rather than in BPF (HotSpot's structure tables, its
//! code cache and method metadata).
//!
//! Everything read here belongs to the process, whose user can write it
//! at will: every read is of a size the caller bounds, a string is read
//! at most [`MAX_STRING`] bytes, and one reader reads at most its byte
//! budget in all (a lying table that points a scan at gigabytes ends with
//! [`MemoryError::Budget`], never an allocation of that size). Reads go
//! through a small cache of pages, so a scan of many small neighbouring
//! fields (a table of structure entries and their names) costs a few
//! system calls.

use std::fs::File;
use std::os::unix::fs::FileExt;

use thiserror::Error;

use crate::shared::{FastMap, Pid};

/// Longest string read: longer ones are refused.
pub const MAX_STRING: usize = 256;
/// Bytes of one cached page.
const PAGE: u64 = 4096;
/// Pages a reader keeps (512 KiB); the lowest half is dropped past it.
pub const MAX_PAGES: usize = 128;

/// Why a read of a process's memory failed.
#[derive(Debug, Error)]
pub enum MemoryError {
    /// `/proc/PID/mem` could not be opened.
    #[error(
        "cannot open the memory of process {pid}: {source} (is emberd root, and the process alive?)"
    )]
    Open {
        /// The process.
        pid: u32,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The bytes at `addr` are not mapped (or the process is gone).
    #[error("nothing readable at {addr:#x} in process {pid}")]
    Unmapped {
        /// The process.
        pid: u32,
        /// The address read.
        addr: u64,
    },
    /// A string ran past [`MAX_STRING`] bytes without its end, or is not
    /// UTF-8.
    #[error("no string of at most {MAX_STRING} bytes at {addr:#x}")]
    BadString {
        /// Where it starts.
        addr: u64,
    },
    /// A record read is not what the runtime writes.
    #[error("malformed {what} at {addr:#x}")]
    Malformed {
        /// What was read.
        what: &'static str,
        /// Where.
        addr: u64,
    },
    /// The reader's byte budget is spent.
    #[error("read budget of {budget} bytes spent reading process {pid}")]
    Budget {
        /// The process.
        pid: u32,
        /// The budget.
        budget: u64,
    },
}

/// The reader's budget while an allowance of its own is read from
/// ([`ProcessMemory::begin_allowance`]).
#[must_use = "end the allowance with ProcessMemory::end_allowance"]
pub struct Allowance {
    budget: u64,
    read: u64,
}

/// A bounded, cached reader of one process's memory.
pub struct ProcessMemory {
    pid: Pid,
    file: File,
    pages: FastMap<u64, Box<[u8]>>,
    /// Bytes read from the kernel so far, against `budget`.
    read: u64,
    budget: u64,
}

impl ProcessMemory {
    /// Opens process `pid`'s memory, to read at most `budget` bytes.
    pub fn open(pid: Pid, budget: u64) -> Result<Self, MemoryError> {
        let file = File::open(format!("/proc/{}/mem", pid.0))
            .map_err(|source| MemoryError::Open { pid: pid.0, source })?;
        Ok(Self {
            pid,
            file,
            pages: FastMap::default(),
            read: 0,
            budget,
        })
    }

    /// The process read.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Allows `more` bytes to be read beyond what has been.
    pub fn allow(&mut self, more: u64) {
        self.budget = self.read.saturating_add(more);
    }

    /// Allows `more` bytes beyond what the budget allows now.
    pub fn extend(&mut self, more: u64) {
        self.budget = self.budget.saturating_add(more);
    }

    /// Gives the reads that follow a budget of their own, `allowance`
    /// bytes, until [`ProcessMemory::end_allowance`]: what they read is
    /// not taken from the budget the reader had.
    pub fn begin_allowance(&mut self, allowance: u64) -> Allowance {
        let saved = Allowance {
            budget: self.budget,
            read: self.read,
        };
        self.budget = self.read.saturating_add(allowance);
        saved
    }

    /// Ends an allowance begun with [`ProcessMemory::begin_allowance`]:
    /// the budget is back to what it was, and the bytes read meanwhile are
    /// returned.
    pub fn end_allowance(&mut self, saved: Allowance) -> u64 {
        let spent = self.read - saved.read;
        self.budget = saved.budget.saturating_add(spent);
        spent
    }

    /// Bytes read from the kernel so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// Bytes of pages cached (at most [`MAX_PAGES`] pages).
    pub fn cached_bytes(&self) -> usize {
        self.pages.len() * PAGE as usize
    }

    /// Forgets the cached pages: the next reads see the process as it is
    /// now.
    pub fn forget_pages(&mut self) {
        self.pages.clear();
    }

    fn page(&mut self, page: u64) -> Result<&[u8], MemoryError> {
        if !self.pages.contains_key(&page) {
            if self.read + PAGE > self.budget {
                return Err(MemoryError::Budget {
                    pid: self.pid.0,
                    budget: self.budget,
                });
            }
            let mut buf = vec![0u8; PAGE as usize].into_boxed_slice();
            self.read += PAGE;
            match self.file.read_at(&mut buf, page) {
                Ok(n) if n == PAGE as usize => {}
                _ => {
                    return Err(MemoryError::Unmapped {
                        pid: self.pid.0,
                        addr: page,
                    });
                }
            }
            if self.pages.len() >= MAX_PAGES {
                let mut keys: Vec<u64> = self.pages.keys().copied().collect();
                keys.sort_unstable();
                for k in keys.into_iter().take(MAX_PAGES / 2) {
                    self.pages.remove(&k);
                }
            }
            self.pages.insert(page, buf);
        }
        Ok(&self.pages[&page])
    }

    /// Fills `out` with the bytes at `addr`.
    pub fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        let mut done = 0usize;
        while done < out.len() {
            let at = addr.checked_add(done as u64).ok_or(MemoryError::Unmapped {
                pid: self.pid.0,
                addr,
            })?;
            let page = at & !(PAGE - 1);
            let off = (at - page) as usize;
            let bytes = self.page(page)?;
            let n = (PAGE as usize - off).min(out.len() - done);
            out[done..done + n].copy_from_slice(&bytes[off..off + n]);
            done += n;
        }
        Ok(())
    }

    /// Fills `out` with the bytes at `addr`, read straight from the
    /// process and not cached (a long scan, as of a script's source, would
    /// only push the cached pages out), within the budget.
    pub fn read_direct(&mut self, addr: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        let n = out.len() as u64;
        if self.read + n > self.budget {
            return Err(MemoryError::Budget {
                pid: self.pid.0,
                budget: self.budget,
            });
        }
        self.read += n;
        match self.file.read_at(out, addr) {
            Ok(got) if got == out.len() => Ok(()),
            _ => Err(MemoryError::Unmapped {
                pid: self.pid.0,
                addr,
            }),
        }
    }

    /// `len` bytes at `addr`; the caller bounds `len`.
    pub fn bytes(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, MemoryError> {
        let mut out = vec![0u8; len];
        self.read(addr, &mut out)?;
        Ok(out)
    }

    /// The little-endian u64 at `addr`.
    pub fn u64(&mut self, addr: u64) -> Result<u64, MemoryError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The little-endian u32 at `addr`.
    pub fn u32(&mut self, addr: u64) -> Result<u32, MemoryError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The little-endian u16 at `addr`.
    pub fn u16(&mut self, addr: u64) -> Result<u16, MemoryError> {
        let mut b = [0u8; 2];
        self.read(addr, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// The byte at `addr`.
    pub fn u8(&mut self, addr: u64) -> Result<u8, MemoryError> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }

    /// The NUL-terminated UTF-8 string at `addr`, of at most
    /// [`MAX_STRING`] bytes.
    pub fn c_string(&mut self, addr: u64) -> Result<String, MemoryError> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() <= MAX_STRING {
            // To the end of the page at most: a string at a mapping's end
            // is read without touching the next, unmapped page.
            let n = (PAGE - (at & (PAGE - 1))) as usize;
            let chunk = self.bytes(at, n.min(MAX_STRING + 1 - out.len()))?;
            if let Some(end) = chunk.iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return String::from_utf8(out).map_err(|_| MemoryError::BadString { addr });
            }
            out.extend_from_slice(&chunk);
            at += chunk.len() as u64;
        }
        Err(MemoryError::BadString { addr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_memory_across_pages_and_within_budget() {
        let data: Vec<u8> = (0..3 * PAGE as usize).map(|i| (i % 251) as u8).collect();
        let addr = data.as_ptr() as u64;
        let mut m = ProcessMemory::open(Pid(std::process::id()), 1 << 20).unwrap();
        let got = m.bytes(addr + 100, 2 * PAGE as usize).unwrap();
        assert_eq!(&got[..], &data[100..100 + 2 * PAGE as usize]);
        let s = b"hello\0";
        assert_eq!(m.c_string(s.as_ptr() as u64).unwrap(), "hello");
        let mut tiny = ProcessMemory::open(Pid(std::process::id()), PAGE).unwrap();
        assert!(matches!(
            tiny.bytes(addr, 3 * PAGE as usize),
            Err(MemoryError::Budget { .. })
        ));
        assert!(matches!(m.u64(8), Err(MemoryError::Unmapped { .. })));
    }

    #[test]
    fn an_allowance_neither_takes_from_nor_adds_to_the_budget() {
        let data: Vec<u8> = vec![7; 6 * PAGE as usize];
        let addr = (data.as_ptr() as u64 + PAGE - 1) & !(PAGE - 1);
        let mut m = ProcessMemory::open(Pid(std::process::id()), PAGE).unwrap();
        // Two pages read on an allowance of two, then none beyond it.
        let saved = m.begin_allowance(2 * PAGE);
        assert!(m.bytes(addr, 2 * PAGE as usize).is_ok());
        assert!(matches!(
            m.u64(addr + 2 * PAGE),
            Err(MemoryError::Budget { .. })
        ));
        assert_eq!(m.end_allowance(saved), 2 * PAGE);
        // The reader's own page is still there, and no more.
        assert!(m.u64(addr + 3 * PAGE).is_ok());
        assert!(matches!(
            m.u64(addr + 4 * PAGE),
            Err(MemoryError::Budget { .. })
        ));
    }

    #[test]
    fn an_endless_string_is_refused() {
        let long = vec![b'a'; 2 * MAX_STRING];
        let mut m = ProcessMemory::open(Pid(std::process::id()), 1 << 20).unwrap();
        assert!(matches!(
            m.c_string(long.as_ptr() as u64),
            Err(MemoryError::BadString { .. })
        ));
    }
}
