//! `emberd jvm PID`: what emberd reads of a running HotSpot JVM, for
//! finding out why its Java frames are (not) named.

use std::process::ExitCode;

use crate::runtime::hotspot::Jvm;
use crate::runtime::hotspot::codecache::BlobKind;
use crate::shared::Pid;

/// Blobs listed per code heap at most.
const MAX_BLOBS: usize = 100_000;
/// Bytes read from the process at most, beyond attaching: a 240 MiB code
/// cache walked whole, with each method's metadata.
const READ_BUDGET: u64 = 512 << 20;

/// Prints the JVM's release and code heaps, and with `methods` each
/// compiled method: `kind address name (file) line`.
pub fn run(pid: u32, methods: bool) -> anyhow::Result<ExitCode> {
    let mut jvm = Jvm::find(Pid(pid))?;
    // What attaching read: the naming of a drain has a budget of its own
    // beyond it (`hotspot::frames`).
    let attach_kib = jvm.bytes_read() >> 10;
    jvm.allow(READ_BUDGET);
    println!(
        "pid {pid}: HotSpot {} (feature release {}), {attach_kib} KiB read to attach",
        jvm.release, jvm.major
    );
    let heaps = jvm.heaps()?;
    for (i, h) in heaps.iter().enumerate() {
        println!(
            "code heap {i}: {:#x}-{:#x} ({} KiB committed), segments of {} bytes",
            h.low,
            h.high,
            (h.high - h.low) >> 10,
            1u64 << h.log2_segment
        );
    }
    if !methods {
        return Ok(ExitCode::SUCCESS);
    }
    let (mut named, mut failed) = (0u64, 0u64);
    for h in &heaps {
        for blob in jvm.blobs(h, MAX_BLOBS)? {
            let kind = match blob.kind {
                BlobKind::Nmethod => "compiled",
                BlobKind::NativeNmethod => "native",
                BlobKind::Interpreter | BlobKind::Stub => {
                    println!(
                        "stub     {:#x} {} (frame {} bytes, code at +{:#x})",
                        blob.addr,
                        blob.name,
                        blob.frame_bytes,
                        blob.code_begin - blob.addr
                    );
                    continue;
                }
            };
            let named_method = jvm
                .compiled_method(&blob)
                .and_then(|m| Ok((jvm.method_name(m)?, jvm.line(m, 0)?)));
            match named_method {
                Ok((name, line)) => {
                    named += 1;
                    println!(
                        "{kind:<8} {:#x} {} ({}) {}",
                        blob.addr,
                        name.qualified(),
                        name.file.as_deref().unwrap_or("?"),
                        line.map_or("?".to_owned(), |l| l.to_string())
                    );
                }
                Err(e) => {
                    failed += 1;
                    println!("{kind:<8} {:#x} [unreadable: {e}]", blob.addr);
                }
            }
        }
    }
    println!(
        "{named} compiled methods named, {failed} unreadable; {} KiB read from the process",
        jvm.bytes_read() >> 10
    );
    Ok(ExitCode::SUCCESS)
}
