//! How the dashboard serves: where it listens, who may look, what it may do, how often it
//! reads. Checked before anything binds: a bad combination is an [`OptionsError`], never a
//! panic or a silently open door.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_core::DEFAULT_CLAIM_TIMEOUT;

/// The dashboard's settings. [`Options::default`] serves read-write on `127.0.0.1:8080`,
/// refreshing every 2 s.
#[derive(Clone, PartialEq, Eq)]
pub struct Options {
    /// Where to listen. Anything but a loopback address needs a [`token`](Self::token).
    pub bind: SocketAddr,
    /// A secret every request must carry (`Authorization: Bearer …`, or once as `?token=…`,
    /// which sets a cookie). Required off loopback.
    pub token: Option<String>,
    /// Hide and refuse every action (requeue, purge, cancel, retry).
    pub read_only: bool,
    /// How often the dashboard reads its streams and queues (one round, shared by every
    /// viewer), and how often open pages update themselves.
    pub refresh: Duration,
    /// The workers' claim timeout: a lease idle this long has lapsed (it may be taken over),
    /// and one idle two thirds of it has missed two heartbeats.
    pub claim_timeout: Duration,
    /// How often the list of streams and queues is read again (discovery walks the keyspace).
    pub discover_every: Duration,
    /// How much history the overview's charts keep.
    pub history: Duration,
    /// Rows per page of the pending, dead-letter and command tables.
    pub page_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            read_only: false,
            refresh: Duration::from_secs(2),
            claim_timeout: DEFAULT_CLAIM_TIMEOUT,
            discover_every: Duration::from_secs(30),
            history: Duration::from_secs(5 * 60),
            page_size: 50,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("bind", &self.bind)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("read_only", &self.read_only)
            .field("refresh", &self.refresh)
            .field("claim_timeout", &self.claim_timeout)
            .field("discover_every", &self.discover_every)
            .field("history", &self.history)
            .field("page_size", &self.page_size)
            .finish()
    }
}

/// Settings that do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// Listening beyond this machine without a token would let anyone on the network act.
    #[error(
        "{0} is not a loopback address: set a token (--token or LEASEHOLD_DASHBOARD_TOKEN) so \
         that only those who have it can look and act"
    )]
    OpenWithoutToken(SocketAddr),
    /// A token that is too short to be a secret, or not plain visible ASCII.
    #[error("the token must be 16 to 256 visible ASCII characters (no spaces)")]
    WeakToken,
    /// A value out of its range.
    #[error("{name} must be {range}, not {value:?}")]
    OutOfRange {
        /// The setting.
        name: &'static str,
        /// What it may be.
        range: &'static str,
        /// What it was.
        value: String,
    },
}

impl Options {
    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// See [`OptionsError`].
    pub fn validate(&self) -> Result<(), OptionsError> {
        let in_range = |name, range, ok: bool, value: &dyn std::fmt::Debug| {
            if ok {
                Ok(())
            } else {
                Err(OptionsError::OutOfRange {
                    name,
                    range,
                    value: format!("{value:?}"),
                })
            }
        };
        let second = Duration::from_secs(1);
        in_range(
            "refresh",
            "between 100 ms and 1 h",
            (second / 10..=Duration::from_secs(3600)).contains(&self.refresh),
            &self.refresh,
        )?;
        in_range(
            "claim_timeout",
            "at least 1 ms",
            self.claim_timeout >= Duration::from_millis(1),
            &self.claim_timeout,
        )?;
        in_range(
            "discover_every",
            "at least the refresh interval",
            self.discover_every >= self.refresh,
            &self.discover_every,
        )?;
        in_range(
            "history",
            "at most 1000 refreshes long",
            self.history <= self.refresh * 1000,
            &self.history,
        )?;
        in_range(
            "page_size",
            "between 1 and 1000",
            (1..=1000).contains(&self.page_size),
            &self.page_size,
        )?;
        if let Some(token) = &self.token {
            let visible = token.bytes().all(|b| b.is_ascii_graphic());
            if !(16..=256).contains(&token.len()) || !visible {
                return Err(OptionsError::WeakToken);
            }
        } else if !self.bind.ip().is_loopback() {
            return Err(OptionsError::OpenWithoutToken(self.bind));
        }
        Ok(())
    }

    /// Samples the charts keep.
    pub(crate) fn samples(&self) -> usize {
        let n = self.history.as_secs_f64() / self.refresh.as_secs_f64();
        (n.ceil() as usize).clamp(2, 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_open_and_anything_else_needs_a_token() {
        assert_eq!(Options::default().validate(), Ok(()));
        let open = Options {
            bind: "0.0.0.0:8080".parse().unwrap(),
            ..Options::default()
        };
        assert!(matches!(
            open.validate(),
            Err(OptionsError::OpenWithoutToken(_))
        ));
        let guarded = Options {
            token: Some("correct-horse-battery-staple".into()),
            ..open.clone()
        };
        assert_eq!(guarded.validate(), Ok(()));
        for weak in [
            "short",
            "has spaces in it, sixteen+",
            "naïve-token-é-long-enough",
        ] {
            let weak = Options {
                token: Some(weak.into()),
                ..open.clone()
            };
            assert_eq!(weak.validate(), Err(OptionsError::WeakToken), "{weak:?}");
        }
        let v6 = Options {
            bind: "[::1]:9000".parse().unwrap(),
            ..Options::default()
        };
        assert_eq!(v6.validate(), Ok(()));
    }

    #[test]
    fn values_out_of_range_are_errors() {
        let bad = [
            Options {
                refresh: Duration::ZERO,
                ..Options::default()
            },
            Options {
                page_size: 0,
                ..Options::default()
            },
            Options {
                discover_every: Duration::from_millis(500),
                ..Options::default()
            },
            Options {
                history: Duration::from_secs(24 * 3600),
                ..Options::default()
            },
        ];
        for options in bad {
            assert!(
                matches!(options.validate(), Err(OptionsError::OutOfRange { .. })),
                "{options:?}"
            );
        }
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let options = Options {
            token: Some("correct-horse-battery-staple".into()),
            ..Options::default()
        };
        assert!(!format!("{options:?}").contains("horse"));
    }
}
