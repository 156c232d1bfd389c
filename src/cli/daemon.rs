//! `emberd` without a subcommand: the daemon, its settings from flags
//! over the config file. The settings themselves, flags included, are
//! declared once in [`crate::daemon::config`].

use std::path::PathBuf;
use std::process::ExitCode;

use crate::daemon::config::{Config, RawConfig};

/// The config file and every daemon setting as a flag.
#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Config file (TOML). Default: /etc/emberd/emberd.toml if it exists.
    #[arg(long, global = false)]
    pub config: Option<PathBuf>,
    /// The settings given on the command line; they win over the file's.
    #[command(flatten)]
    pub settings: RawConfig,
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(args: DaemonArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(args.config.as_deref(), args.settings)?;
    crate::daemon::run(config)?;
    Ok(ExitCode::SUCCESS)
}
