//! The access token handed to callers.

use std::fmt;
use std::sync::Arc;

use time::OffsetDateTime;

/// An access token and when it expires.
///
/// Cloning is cheap: one reference-count increment, no allocation. `Debug` never shows the
/// token.
///
/// ```
/// # use msi_dataplane::AccessToken;
/// # use time::macros::datetime;
/// let token = AccessToken::new("eyJ0eXAi...", datetime!(2026-01-01 01:00 UTC));
/// assert_eq!(token.token(), "eyJ0eXAi...");
/// assert!(!format!("{token:?}").contains("eyJ0eXAi"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    inner: Arc<Inner>,
}

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    token: Arc<str>,
    expires_on: OffsetDateTime,
    refresh_on: Option<OffsetDateTime>,
}

impl AccessToken {
    /// A token that expires at `expires_on`.
    pub fn new(token: impl Into<Arc<str>>, expires_on: OffsetDateTime) -> Self {
        AccessToken {
            inner: Arc::new(Inner {
                token: token.into(),
                expires_on,
                refresh_on: None,
            }),
        }
    }

    /// Set when the server asked the token to be refreshed (`refresh_in`).
    pub fn with_refresh_on(mut self, refresh_on: Option<OffsetDateTime>) -> Self {
        Arc::make_mut(&mut self.inner).refresh_on = refresh_on;
        self
    }

    /// The token, to send as `Authorization: Bearer <token>`. Secret: do not log it.
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// When the token expires.
    pub fn expires_on(&self) -> OffsetDateTime {
        self.inner.expires_on
    }

    /// When the server asked the token to be refreshed, if it did (`refresh_in`).
    pub fn refresh_on(&self) -> Option<OffsetDateTime> {
        self.inner.refresh_on
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"** redacted **")
            .field("expires_on", &self.inner.expires_on)
            .field("refresh_on", &self.inner.refresh_on)
            .finish()
    }
}
