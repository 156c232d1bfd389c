//! `emberd login`: a one-time URL that logs a browser in.
//!
//! It reads the config for the listen address and the token file only: the
//! push secrets (`*_password_file`, `*_token_file`) are not opened, so a
//! member of the token's group logs in without reading them. Before the
//! token is sent, the daemon's port is checked to be held by root or the
//! daemon's user ([`crate::shared::peer`]): while emberd is down, any local
//! user may bind its port.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::daemon::config::{self, Config, RawConfig};

/// Where the daemon is and its token: the daemon's own settings.
#[derive(Debug, clap::Args)]
#[command(mut_arg("daemon_user", config::with_default(Some(format!(
    "{}, the installed unit's User=",
    config::defaults::DAEMON_USER
)))))]
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
    /// The user the daemon runs as besides root (name or uid): the token is
    /// sent only to a port held by root or this user.
    #[arg(long)]
    pub daemon_user: Option<String>,
}

/// Prints the login URL.
pub fn run(args: LoginArgs) -> anyhow::Result<ExitCode> {
    let flags = RawConfig {
        listen: args.listen,
        auth_token_file: args.auth_token_file,
        ..RawConfig::default()
    };
    let raw = Config::load_raw(args.config.as_deref(), flags)?;
    if let Some(sock) = &raw.unix_socket {
        anyhow::bail!(
            "this emberd serves on the Unix socket {} (unix_socket): a browser cannot open it; \
             read it with curl --unix-socket",
            sock.display()
        );
    }
    let addr = crate::serve::auth::reachable(config::listen_of(&raw)?);
    let token = config::auth_token_of(&raw).context(
        "only root and members of the token file's group may log in (scripts/install: group emberd)",
    )?;
    let Some(token) = token else {
        eprintln!(
            "emberd: no auth_token_file: every local user can read profiles, and the page needs no login"
        );
        println!("http://{addr}/");
        return Ok(ExitCode::SUCCESS);
    };
    let daemon = match &args.daemon_user {
        Some(u) => crate::shared::peer::Trusted::parse("--daemon-user", Some(u))
            .map_err(anyhow::Error::msg)?,
        None => crate::shared::peer::Trusted::root_and(config::defaults::DAEMON_USER),
    };
    // `sudo emberd login`: the code is for the browser of the user who ran
    // sudo, not root's.
    let for_uid = nix::unistd::geteuid()
        .is_root()
        .then(|| std::env::var("SUDO_UID").ok()?.parse::<u32>().ok())
        .flatten();
    println!(
        "{}",
        crate::serve::auth::login_url(addr, &token, &daemon, for_uid)?
    );
    eprintln!(
        "emberd: open it within {} s in your browser (paste it rather than pass it on a command line); \
         it works once, for {}, and logs the browser in for {} h",
        crate::serve::auth::CODE_TTL.as_secs(),
        match for_uid {
            Some(uid) => crate::shared::peer::user_name(uid),
            None => crate::shared::peer::user_name(nix::unistd::geteuid().as_raw()),
        },
        crate::serve::auth::SESSION_TTL.as_secs() / 3600
    );
    Ok(ExitCode::SUCCESS)
}
