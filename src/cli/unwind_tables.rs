//! `emberd unwind-tables`: the unwind tables the daemon would build for
//! some files, with their size and build time.

use std::path::PathBuf;
use std::process::ExitCode;

/// Prints rows, bytes and build time of each file's table.
pub fn run(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    println!(
        "{:>9} {:>10} {:>9} {:>6}  file",
        "rows", "bytes", "ms", "source"
    );
    for f in files {
        let started = std::time::Instant::now();
        match crate::unwind::read_capped(f)
            .map_err(|e| e.to_string())
            .and_then(|b| crate::unwind::build(&b, crate::unwind::DEFAULT_MAX_ROWS))
        {
            Ok((t, _)) => println!(
                "{:>9} {:>10} {:>9.1} {:>6}  {} (fdes {}, corrupt fdes skipped {}, unsupported rows {})",
                t.rows.len(),
                t.rows.len() * 8,
                started.elapsed().as_secs_f64() * 1000.0,
                format!("{:?}", t.source),
                f.display(),
                t.stats.fdes,
                t.stats.bad_fdes,
                t.stats.unsupported_rows,
            ),
            Err(e) => {
                failed = true;
                eprintln!("emberd: {}: no unwind table: {e}", f.display());
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
