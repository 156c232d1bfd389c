//! `emberd diff` and `emberd animate`: differential flame graphs and
//! animations of folded files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Options both comparisons take.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Output: .svg for the graph, .folded (or .txt, or - for stdout) for
    /// the columns (`stack v1 v2 ...`).
    #[arg(long, short = 'o', required = true)]
    pub output: PathBuf,
    /// Turn 0x... literals into 0x... so unnamed addresses of two builds
    /// match (difffolded.pl -x).
    #[arg(long)]
    pub strip_hex: bool,
    /// Turn every number into N, for lambdas and JIT names with counters.
    #[arg(long)]
    pub strip_numbers: bool,
    /// SVG title.
    #[arg(long)]
    pub title: Option<String>,
}

/// `emberd diff`'s flags.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The before profile (folded).
    pub before: PathBuf,
    /// The after profile (folded).
    pub after: PathBuf,
    /// Flags both comparisons take.
    #[command(flatten)]
    pub common: CompareArgs,
    /// Scale before to after's total (difffolded.pl -n).
    #[arg(long, short = 'n')]
    pub normalize: bool,
    /// Swap the colours: blue for growth (flamegraph.pl --negate).
    #[arg(long)]
    pub negate: bool,
}

/// `emberd animate`'s flags.
#[derive(Debug, clap::Args)]
pub struct AnimateArgs {
    /// Folded files, one per phase, in order.
    #[arg(required = true, num_args = 1..=60)]
    pub phases: Vec<PathBuf>,
    /// Flags both comparisons take.
    #[command(flatten)]
    pub common: CompareArgs,
    /// Size each phase relative to its own total (else to the largest).
    #[arg(long)]
    pub relative: bool,
}

/// Reads a folded file as flamegraph.pl does, telling stderr what it skipped.
fn read_folded_file(path: &std::path::Path) -> anyhow::Result<crate::profile::Profile> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    read_folded(std::io::BufReader::new(f), path)
}

/// [`read_folded_file`], or standard input for `-`.
pub(super) fn read_folded_input(path: &std::path::Path) -> anyhow::Result<crate::profile::Profile> {
    if path.as_os_str() == "-" {
        return read_folded(std::io::stdin().lock(), std::path::Path::new("stdin"));
    }
    read_folded_file(path)
}

fn read_folded(
    r: impl std::io::BufRead,
    path: &std::path::Path,
) -> anyhow::Result<crate::profile::Profile> {
    let (profile, skipped) = crate::render::folded::read_lenient(r)
        .with_context(|| format!("{}: not a folded profile", path.display()))?;
    if skipped.malformed > 0 {
        let first: Vec<String> = skipped.first.iter().map(ToString::to_string).collect();
        eprintln!(
            "emberd: {}: skipped {} malformed line(s) ({})",
            path.display(),
            skipped.malformed,
            first.join("; ")
        );
    }
    Ok(profile)
}

/// Whether `output` asks for SVG (else folded columns); an unknown extension
/// is an error rather than a guess.
fn wants_svg(output: &std::path::Path) -> anyhow::Result<bool> {
    match output.extension().and_then(|e| e.to_str()) {
        Some("svg") => Ok(true),
        Some("folded" | "txt") => Ok(false),
        _ if output.as_os_str() == "-" => Ok(false),
        _ => anyhow::bail!(
            "{}: the output must end in .svg (graph) or .folded (columns), or be - for stdout",
            output.display()
        ),
    }
}

/// Writes `body` to `output`, or standard output for `-`.
pub(super) fn write_output(output: &std::path::Path, body: &[u8]) -> anyhow::Result<()> {
    if output.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().write_all(body)?;
        return Ok(());
    }
    std::fs::write(output, body).with_context(|| format!("writing {}", output.display()))
}

fn rewrite_of(c: &CompareArgs) -> crate::compare::Rewrite {
    crate::compare::Rewrite {
        strip_hex: c.strip_hex,
        strip_numbers: c.strip_numbers,
    }
}

/// Writes the differential flame graph (or folded columns) of two files.
pub fn run_diff(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let svg = wants_svg(&args.common.output)?;
    let before = read_folded_file(&args.before)?;
    let after = read_folded_file(&args.after)?;
    // Files: difffolded.pl's default (no normalization) unless -n.
    let diff = crate::compare::Diff::new(
        &before,
        &after,
        rewrite_of(&args.common),
        Some(args.normalize),
        false,
    );
    let mut out = Vec::new();
    if svg {
        let name = |p: &std::path::Path| p.display().to_string();
        let mut opts = crate::render::diff::DiffSvgOptions::new(
            args.common.title.clone().unwrap_or_else(|| {
                format!(
                    "Differential Flame Graph: {} vs {}",
                    name(&args.before),
                    name(&args.after)
                )
            }),
            "samples",
        );
        opts.notes = diff.notes("samples", |v| v.to_string());
        opts.negate = args.negate;
        opts.before = name(&args.before);
        opts.after = name(&args.after);
        let cut = crate::render::diff::write(&diff, &opts, &mut out)?;
        warn_tree_cut(cut);
    } else {
        diff.series.write_folded(&mut out)?;
    }
    write_output(&args.common.output, &out)?;
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr that the graph's tree was full and some stacks end early.
fn warn_tree_cut(cut: usize) {
    if cut > 0 {
        eprintln!(
            "emberd: the graph holds at most {} frames: {cut} stack(s) end early, their value counted at the deepest frame kept",
            crate::render::tree::MAX_TREE_NODES
        );
    }
}

/// Writes the animation of the files' phases.
pub fn run_animate(args: AnimateArgs) -> anyhow::Result<ExitCode> {
    let svg = wants_svg(&args.common.output)?;
    let profiles = args
        .phases
        .iter()
        .map(|p| read_folded_file(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let series = crate::compare::Series::from_profiles(&profiles, rewrite_of(&args.common));
    let mut out = Vec::new();
    if svg {
        let labels: Vec<String> = args
            .phases
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut opts = crate::render::animation::AnimationOptions::new(
            args.common
                .title
                .clone()
                .unwrap_or_else(|| "Flame Graph Animation".to_owned()),
            labels,
            "samples",
        );
        opts.subtitle = Some(format!(
            "{} phases; outlined red: growing into the next phase, blue: shrinking",
            args.phases.len()
        ));
        opts.relative = args.relative;
        let cut = crate::render::animation::write(&series, &opts, &mut out)?;
        warn_tree_cut(cut);
    } else {
        series.write_folded(&mut out)?;
    }
    write_output(&args.common.output, &out)?;
    Ok(ExitCode::SUCCESS)
}
