//! Daemon configuration: TOML file and flags (`RawConfig`), checked into a
//! [`Config`]. Every key of the file is also a flag; flags win.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

/// Defaults of the daemon's settings.
pub mod defaults {
    /// Default config file; a missing default file means "all defaults".
    pub const CONFIG_PATH: &str = "/etc/emberd/emberd.toml";
    /// Loopback only: profiles name every process on the host.
    pub const LISTEN: &str = "127.0.0.1:7099";
    /// History kept, seconds.
    pub const RETENTION_SECONDS: u64 = 3600;
    /// Store budget, MiB.
    pub const MEMORY_BUDGET_MIB: u64 = 128;
}

/// Settings as written in the file or on the command line, unchecked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `listen = "127.0.0.1:7099"`.
    pub listen: Option<String>,
    /// `allow_remote = false`: required to listen on a non-loopback address.
    pub allow_remote: Option<bool>,
    /// `frequency_hz = 99`.
    pub frequency_hz: Option<u64>,
    /// `retention_seconds = 3600`.
    pub retention_seconds: Option<u64>,
    /// `memory_budget_mib = 128`: the store's byte budget.
    pub memory_budget_mib: Option<u64>,
    /// `stack_map_entries = 16384`: entries of each BPF stack map.
    pub stack_map_entries: Option<u32>,
}

impl RawConfig {
    /// `other`'s settings where given, else `self`'s.
    fn overridden_by(self, other: RawConfig) -> RawConfig {
        RawConfig {
            listen: other.listen.or(self.listen),
            allow_remote: other.allow_remote.or(self.allow_remote),
            frequency_hz: other.frequency_hz.or(self.frequency_hz),
            retention_seconds: other.retention_seconds.or(self.retention_seconds),
            memory_budget_mib: other.memory_budget_mib.or(self.memory_budget_mib),
            stack_map_entries: other.stack_map_entries.or(self.stack_map_entries),
        }
    }
}

/// Checked daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Sampling frequency per CPU.
    pub frequency_hz: u64,
    /// History kept.
    pub retention: Duration,
    /// Store byte budget.
    pub memory_budget: usize,
    /// Entries of each BPF stack map.
    pub stack_map_entries: u32,
}

impl Config {
    /// Reads the file (`path`, or the default path if it exists) and applies
    /// `flags` on top.
    pub fn load(path: Option<&Path>, flags: RawConfig) -> anyhow::Result<Config> {
        let file = match path {
            Some(p) => Some(read_file(p)?),
            None if Path::new(defaults::CONFIG_PATH).exists() => {
                Some(read_file(Path::new(defaults::CONFIG_PATH))?)
            }
            None => None,
        };
        Self::from_raw(file.unwrap_or_default().overridden_by(flags))
    }

    /// Checks raw settings.
    pub fn from_raw(raw: RawConfig) -> anyhow::Result<Config> {
        let listen_s = raw.listen.as_deref().unwrap_or(defaults::LISTEN);
        let listen: SocketAddr = listen_s.parse().with_context(|| {
            format!("listen = {listen_s:?} is not an address like 127.0.0.1:7099")
        })?;
        if !listen.ip().is_loopback() && !raw.allow_remote.unwrap_or(false) {
            bail!(
                "listen = {listen} would serve profiles that name every process on this host to the network; \
                 set allow_remote = true (or pass --allow-remote) to do that on purpose"
            );
        }
        let retention = raw.retention_seconds.unwrap_or(defaults::RETENTION_SECONDS);
        if !(60..=7 * 86400).contains(&retention) {
            bail!("retention_seconds = {retention} is out of range: use 60..=604800");
        }
        let budget = raw.memory_budget_mib.unwrap_or(defaults::MEMORY_BUDGET_MIB);
        if !(4..=65536).contains(&budget) {
            bail!("memory_budget_mib = {budget} is out of range: use 4..=65536");
        }
        Ok(Config {
            listen,
            frequency_hz: raw
                .frequency_hz
                .unwrap_or(crate::collect::defaults::FREQUENCY_HZ),
            retention: Duration::from_secs(retention),
            memory_budget: (budget as usize) << 20,
            stack_map_entries: raw
                .stack_map_entries
                .unwrap_or(crate::collect::defaults::STACK_MAP_ENTRIES),
        })
    }
}

fn read_file(path: &Path) -> anyhow::Result<RawConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {} is invalid", path.display()))
}

/// Where the config file is, for messages.
pub fn shown_path(path: Option<&PathBuf>) -> String {
    path.map_or_else(
        || defaults::CONFIG_PATH.to_owned(),
        |p| p.display().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        let e =
            toml::from_str::<RawConfig>("listen = \"127.0.0.1:1\"\nfrequency = 99\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `frequency`"), "{e}");
    }

    #[test]
    fn remote_listen_needs_a_flag() {
        let raw = RawConfig {
            listen: Some("0.0.0.0:7099".into()),
            ..Default::default()
        };
        let e = Config::from_raw(raw.clone()).unwrap_err();
        assert!(e.to_string().contains("allow_remote"), "{e}");
        let ok = Config::from_raw(RawConfig {
            allow_remote: Some(true),
            ..raw
        })
        .unwrap();
        assert_eq!(ok.listen.port(), 7099);
    }

    #[test]
    fn flags_override_file() {
        let file: RawConfig =
            toml::from_str("frequency_hz = 49\nretention_seconds = 600\n").unwrap();
        let flags = RawConfig {
            frequency_hz: Some(199),
            ..Default::default()
        };
        let c = Config::from_raw(file.overridden_by(flags)).unwrap();
        assert_eq!((c.frequency_hz, c.retention.as_secs()), (199, 600));
        assert_eq!(c.memory_budget, 128 << 20);
        assert!(c.listen.ip().is_loopback());
    }
}
