//! Credentials as values that do not show themselves: a [`Secret`] prints
//! as `Secret(..)` under `{:?}`, so a config, a destination or an error
//! formatted for a log or a panic carries no token or password.

/// A token, a password or a session: compared and sent, never printed.
#[derive(Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends or compares it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_in_debug() {
        let s = Secret::new("hunter2-token-value");
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert_eq!(format!("{:?}", Some(&s)), "Some(Secret(..))");
        assert_eq!(s.expose(), "hunter2-token-value");
    }
}
