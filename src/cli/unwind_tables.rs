//! `emberd unwind-tables`: the unwind tables the daemon would build for
//! some files, with their size and build time.

use std::path::PathBuf;
use std::process::ExitCode;

/// Prints rows, bytes and build time of each file's table.
pub fn run(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    use object::{Object, ObjectSection};
    let mut failed = false;
    // One rule table for every file, as in the daemon.
    let mut rules = crate::unwind::packed::Rules::default();
    let (mut total_rows, mut total_bytes, mut total_cfi) = (0usize, 0usize, 0u64);
    println!(
        "{:>9} {:>10} {:>10} {:>9} {:>6}  file",
        "rows", "bytes", "cfi bytes", "ms", "source"
    );
    for f in files {
        let started = std::time::Instant::now();
        let read = crate::unwind::read_capped(f).map_err(|e| e.to_string());
        let cfi = read.as_ref().ok().map_or(0, |b| {
            object::File::parse(&b[..]).ok().map_or(0, |o| {
                [".eh_frame", ".debug_frame"]
                    .iter()
                    .filter_map(|n| o.section_by_name(n))
                    .map(|s| s.size())
                    .max()
                    .unwrap_or(0)
            })
        });
        match read.and_then(|b| {
            crate::unwind::build(&b, crate::unwind::DEFAULT_MAX_ROWS).map_err(|e| e.to_string())
        }) {
            Ok((t, _)) => {
                let bytes =
                    crate::unwind::packed::pack(&t.rows, &mut rules).map_or(0, |w| w.len() * 4);
                total_rows += t.rows.len();
                total_bytes += bytes;
                total_cfi += cfi;
                println!(
                    "{:>9} {:>10} {:>10} {:>9.1} {:>6}  {} (fdes {}, corrupt fdes skipped {}, unsupported rows {})",
                    t.rows.len(),
                    bytes,
                    cfi,
                    started.elapsed().as_secs_f64() * 1000.0,
                    format!("{:?}", t.source),
                    f.display(),
                    t.stats.fdes,
                    t.stats.bad_fdes,
                    t.stats.unsupported_rows,
                )
            }
            Err(e) => {
                failed = true;
                eprintln!("emberd: {}: no unwind table: {e}", f.display());
            }
        }
    }
    if files.len() > 1 {
        println!(
            "{total_rows:>9} {total_bytes:>10} {total_cfi:>10} {:>9} {:>6}  total ({} distinct rules, {} bytes of them)",
            "",
            "",
            rules.len(),
            rules.len() * crate::unwind::packed::RULE_BYTES
        );
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
