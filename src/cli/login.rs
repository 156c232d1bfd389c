//! `emberd login`: a one-time URL that logs a browser in.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::daemon::config::{Config, RawConfig};

/// Where the daemon is and its token: the daemon's own settings.
#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// The daemon's config file. Default: /etc/emberd/emberd.toml if it exists.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The daemon's listen address, if not the config's.
    #[arg(long)]
    pub listen: Option<String>,
    /// The token file, if not the config's.
    #[arg(long)]
    pub auth_token_file: Option<PathBuf>,
}

/// Prints the login URL.
pub fn run(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let flags = RawConfig {
        listen: args.listen,
        auth_token_file: args.auth_token_file,
        ..RawConfig::default()
    };
    let config = Config::load(args.config.as_deref(), flags).context(
        "only root and members of the token file's group may log in (scripts/install: group emberd)",
    )?;
    if let Some(sock) = &config.unix_socket {
        anyhow::bail!(
            "this emberd serves on the Unix socket {} (unix_socket): a browser cannot open it; \
             read it with curl --unix-socket",
            sock.display()
        );
    }
    let addr = crate::serve::auth::reachable(config.listen);
    let Some(token) = config.auth_token else {
        eprintln!(
            "emberd: no auth_token_file: every local user can read profiles, and the page needs no login"
        );
        println!("http://{addr}/");
        return Ok(ExitCode::SUCCESS);
    };
    println!("{}", crate::serve::auth::login_url(addr, &token)?);
    eprintln!(
        "emberd: open it within {} s; it works once and logs the browser in for {} h",
        crate::serve::auth::CODE_TTL.as_secs(),
        crate::serve::auth::SESSION_TTL.as_secs() / 3600
    );
    Ok(ExitCode::SUCCESS)
}
