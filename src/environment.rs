//! `Environment`: the dependencies every client the crate builds is given (the HTTP
//! client or extra roots, the loopback flag, the request timeout, the application id in
//! the `User-Agent`, the clock and its sleeps, the retry policy), and the one decision of
//! which HTTP client they use.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderValue;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::http::client::{build_http_client, client_with_extra_roots, default_http_client};
use crate::http::retry::RetryPolicy;
use crate::http::user_agent;

/// How messages name a file of extra root CAs.
const CA_FILE: &str = "CA file";

/// The default of [`Environment::request_timeout`].
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest request timeout accepted: a request still unanswered after 10 minutes is
/// lost, and a longer timeout only holds the caller (and its retries) back.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// What every client the crate builds shares, set once: the HTTP client (or extra roots
/// for the crate-built one), `http://` loopback, the request timeout, the application id
/// of the `User-Agent`, the clock (times and sleeps) and the retry policy.
///
/// Each client takes it whole: the credential (`with_environment` on
/// [`ClientCertificateCredentialOptions`](crate::ClientCertificateCredentialOptions), and
/// through it [`UserAssignedIdentityCredential`](crate::UserAssignedIdentityCredential)),
/// the data plane client (as the last argument of
/// [`dataplane::ClientFactory::new`](crate::dataplane::ClientFactory::new)),
/// the Key Vault store (feature `keyvault`: `keyvault::store::StoreOptions`) and the
/// `msi-credential` crate's token server. Cloning it is cheap (the HTTP client and the
/// clock are shared handles), so one value made at start-up serves them all; no
/// options struct has setters of its own for what is here. Its settings are made with
/// the `with_…` setters, which check them, and read back with the getters.
///
/// ```
/// use std::time::Duration;
/// use msi_dataplane::{ClientCertificateCredentialOptions, Environment, RetryPolicy};
///
/// let env = Environment::default()
///     .with_request_timeout(Duration::from_secs(10))?
///     .with_retry_policy(RetryPolicy::default().with_max_attempts(2));
/// let credential = ClientCertificateCredentialOptions::default().with_environment(env.clone());
/// assert_eq!(credential.environment().request_timeout(), env.request_timeout());
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
///
/// # User-Agent
///
/// Every request the crate sends carries a `User-Agent` in the Azure SDKs' form, so that
/// a service's logs (and Microsoft support) can tell which library and version called:
/// `azsdk-rust-msi-dataplane/<version> (<OS>; <ARCH>)`, e.g.
/// `azsdk-rust-msi-dataplane/0.1.0 (linux; x86_64)`. azure_core also puts the rustc
/// version first in the parentheses, which it learns in a build script; this crate has
/// none and leaves it out. With
/// [`with_application_id`](Self::with_application_id), your application id comes first:
/// `myapp azsdk-rust-msi-dataplane/0.1.0 (linux; x86_64)`. The header is set on each
/// request, whichever HTTP client sends it (a `User-Agent` set as a default on a client of
/// your own is replaced). Key Vault requests, which the Azure SDK builds, carry this value
/// followed by the SDK's own (`... azsdk-rust-security_keyvault_secrets/<version>
/// (...)`). [`user_agent`](Self::user_agent) gives the value.
#[derive(Clone)]
pub struct Environment {
    /// The caller's HTTP client; `None`: the crate's (see
    /// [`with_http_client`](Self::with_http_client)).
    http_client: Option<reqwest::Client>,
    /// Extra trusted roots for the crate-built client.
    extra_root_certificates: Vec<reqwest::Certificate>,
    /// Accept `http://` on a loopback host.
    allow_http_loopback: bool,
    /// More than zero, at most [`MAX_REQUEST_TIMEOUT`].
    request_timeout: Duration,
    clock: Arc<dyn Clock>,
    retry_policy: RetryPolicy,
    /// Checked when set (see [`with_application_id`](Self::with_application_id)).
    application_id: Option<String>,
    /// The `User-Agent` value, made when the application id is set.
    user_agent: HeaderValue,
}

impl Default for Environment {
    fn default() -> Self {
        Environment {
            http_client: None,
            extra_root_certificates: Vec::new(),
            allow_http_loopback: false,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            clock: Arc::new(SystemClock),
            retry_policy: RetryPolicy::default(),
            application_id: None,
            user_agent: user_agent::header_value(None),
        }
    }
}

impl Environment {
    /// Use this HTTP client instead of the crate's: for explicit proxies, say. Disable
    /// redirects on it (`reqwest::redirect::Policy::none()`): token requests must not
    /// follow them. The crate's own client (the default) uses rustls with the system
    /// roots, follows no redirect, takes proxies from the environment but never for a
    /// loopback authority, and pools connections (see SECURITY.md and
    /// [`guide::token_cache`](crate::guide::token_cache)). Every exchange, with either
    /// client, runs on the caller's task when it is on a multi-threaded runtime and on the
    /// crate's own I/O thread otherwise, so pooled connections work whatever runtime the
    /// caller uses ([`guide::background`](crate::guide::background)).
    ///
    /// Setting both a client and extra root CAs is refused
    /// (`conflicting_options`) when the credential, client factory or store
    /// is built: the roots apply only to the crate's client.
    pub fn with_http_client(mut self, client: reqwest::Client) -> Self {
        self.http_client = Some(client);
        self
    }

    /// Trust these root CAs too (PEM, one or more certificates), in addition to the system
    /// roots, in the client the crate builds (TLS validation on, no redirects): for hosts
    /// behind a private CA.
    ///
    /// # Errors
    ///
    /// `http_client` when the PEM holds no usable certificate (none at all, or one that
    /// does not decode).
    pub fn with_extra_root_certificates_pem(mut self, pem: &[u8]) -> Result<Self> {
        let certs = match reqwest::Certificate::from_pem_bundle(pem) {
            Ok(certs) if certs.is_empty() => Err("holds no PEM CERTIFICATE block".to_owned()),
            certs => certs.map_err(|e| e.to_string()),
        };
        let certs = certs.map_err(|reason| {
            crate::http::client::http_client_error(format!("extra root certificates: {reason}"))
        })?;
        self.extra_root_certificates.extend(certs);
        Ok(self)
    }

    /// Trust the root CAs in the PEM file at `path` too (see
    /// [`with_extra_root_certificates_pem`](Self::with_extra_root_certificates_pem)). The
    /// file is read as credential files are: only a regular file, at most 1 MiB; a FIFO or
    /// a device is refused, not waited on. Errors name the file; a file without a
    /// `CERTIFICATE` block is an error.
    pub fn with_extra_root_certificates_file(self, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let pem = crate::regular_file::read_limited_as(path, CA_FILE)?;
        self.with_extra_root_certificates_pem(&pem)
            .map_err(|e| e.with_file(path, CA_FILE))
    }

    /// Accept an `http://` URL when its host is loopback (`127.0.0.0/8`, `::1`,
    /// `localhost`): for local test servers and emulators only. Default `false`. (Key
    /// Vault needs `https` whatever this says: its SDK authenticates only over https.)
    pub fn allow_http_loopback(mut self, allow: bool) -> Self {
        self.allow_http_loopback = allow;
        self
    }

    /// Set the total time allowed for one HTTP request (connect, send, receive). Default
    /// 30 s.
    ///
    /// # Errors
    ///
    /// `invalid_option` naming `request_timeout` when `timeout` is zero
    /// (every request would fail) or over 10 minutes.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Result<Self> {
        if timeout.is_zero() || timeout > MAX_REQUEST_TIMEOUT {
            let reason =
                format!("{timeout:?} is not between zero (excluded) and {MAX_REQUEST_TIMEOUT:?}");
            return Err(Error::invalid_option("request_timeout", reason));
        }
        self.request_timeout = timeout;
        Ok(self)
    }

    /// Use this clock for times and sleeps: assertion times, token expiry, validity checks,
    /// the reload backstop, and every sleep (retry delays, debounce). Default
    /// [`SystemClock`]; a [`ManualClock`](crate::ManualClock) moves time in tests.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Retry failed requests with this policy (token requests, the data plane, Key
    /// Vault). Default [`RetryPolicy::default`].
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry_policy = policy;
        self
    }

    /// Put your application id first in the `User-Agent` of every request (the token
    /// endpoint, the data plane, Key Vault), as azure_core's
    /// `UserAgentOptions::application_id` does: `myapp azsdk-rust-msi-dataplane/<version>
    /// (<OS>; <ARCH>)`. See [the User-Agent](Self#user-agent).
    ///
    /// The id follows azure_core's rules: at most 24 characters, each an RFC 9110 token
    /// character (letters, digits and `` !#$%&'*+-.^_`|~ ``: no space, no `/`). It is not
    /// a secret: services log it.
    ///
    /// ```
    /// use msi_dataplane::Environment;
    ///
    /// let http = Environment::default().with_application_id("myapp").unwrap();
    /// assert!(http.user_agent().starts_with("myapp azsdk-rust-msi-dataplane/"));
    /// assert!(Environment::default().with_application_id("my app").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// `invalid_option` naming `application_id` when the id is empty, longer
    /// than 24 characters or has a character that is not a token character. (azure_core
    /// panics on such an id; this crate refuses it here, before anything is built.)
    pub fn with_application_id(mut self, application_id: impl Into<String>) -> Result<Self> {
        let id = application_id.into();
        user_agent::check_application_id(&id)?;
        self.user_agent = user_agent::header_value(Some(&id));
        self.application_id = Some(id);
        Ok(self)
    }

    /// The application id set with [`with_application_id`](Self::with_application_id).
    pub fn application_id(&self) -> Option<&str> {
        self.application_id.as_deref()
    }

    /// The `User-Agent` every request carries (see [the User-Agent](Self#user-agent)).
    pub fn user_agent(&self) -> &str {
        self.user_agent.to_str().unwrap_or(user_agent::base())
    }

    /// The total time allowed for one HTTP request (see
    /// [`with_request_timeout`](Self::with_request_timeout)).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The clock (see [`with_clock`](Self::with_clock)).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// How failed requests are retried.
    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.retry_policy
    }

    /// Whether `http://` loopback URLs are accepted.
    pub(crate) fn allows_http_loopback(&self) -> bool {
        self.allow_http_loopback
    }

    /// The `User-Agent` as a header value, for the layers that send.
    pub(crate) fn user_agent_header(&self) -> HeaderValue {
        self.user_agent.clone()
    }

    /// The HTTP client to use: the caller's, or the crate's (with the extra roots; without
    /// environment proxies when `direct`, for loopback hosts). The one place that decides.
    ///
    /// # Errors
    ///
    /// `conflicting_options` when both a client and extra roots are set (the
    /// roots would be silently dropped); `http_client` when the client cannot
    /// be built.
    pub(crate) fn client(&self, direct: bool) -> Result<reqwest::Client> {
        match &self.http_client {
            Some(_) if !self.extra_root_certificates.is_empty() => Err(client_with_extra_roots()),
            Some(client) => Ok(client.clone()),
            None if self.extra_root_certificates.is_empty() => default_http_client(direct),
            None => build_http_client(self.extra_root_certificates.clone(), direct),
        }
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("http_client", &self.http_client.as_ref().map(|_| "custom"))
            .field(
                "extra_root_certificates",
                &self.extra_root_certificates.len(),
            )
            .field("allow_http_loopback", &self.allow_http_loopback)
            .field("request_timeout", &self.request_timeout)
            .field("application_id", &self.application_id)
            .field("clock", &self.clock)
            .field("retry_policy", &self.retry_policy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn a_client_and_extra_roots_conflict_each_alone_is_fine() {
        let pem = include_str!("../fixtures/tls/ca.pem");
        let roots = Environment::default()
            .with_extra_root_certificates_pem(pem.as_bytes())
            .unwrap();
        assert_eq!(roots.extra_root_certificates.len(), 1);
        let none = Environment::default().with_extra_root_certificates_pem(b"not a PEM");
        assert!(
            none.unwrap_err()
                .to_string()
                .contains("no PEM CERTIFICATE block")
        );
        roots.client(false).unwrap();
        let own = Environment::default().with_http_client(reqwest::Client::new());
        own.client(true).unwrap();
        let both = roots.with_http_client(reqwest::Client::new());
        let err = both.client(false).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Config {
                    code: "conflicting_options",
                    field: "http_client",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_request_timeout_of_zero_or_over_ten_minutes_is_refused_by_name() {
        for bad in [Duration::ZERO, Duration::from_secs(601)] {
            let err = Environment::default()
                .with_request_timeout(bad)
                .unwrap_err();
            assert!(
                matches!(
                    err.kind(),
                    ErrorKind::Config {
                        code: "invalid_option",
                        field: "request_timeout",
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let at_most = Environment::default()
            .with_request_timeout(MAX_REQUEST_TIMEOUT)
            .unwrap();
        assert_eq!(at_most.request_timeout(), MAX_REQUEST_TIMEOUT);
        assert_eq!(
            Environment::default().request_timeout(),
            DEFAULT_REQUEST_TIMEOUT
        );
    }

    #[test]
    fn debug_names_no_client_internals() {
        let debug = format!(
            "{:?}",
            Environment::default().with_http_client(reqwest::Client::new())
        );
        assert!(debug.contains("http_client: Some(\"custom\")"), "{debug}");
        assert!(debug.contains("request_timeout: 30s"), "{debug}");
    }

    #[test]
    fn the_application_id_is_checked_and_goes_first() {
        let plain = Environment::default();
        assert_eq!(plain.application_id(), None);
        assert_eq!(plain.user_agent(), user_agent::base());
        let http = plain.with_application_id("myapp").unwrap();
        assert_eq!(http.application_id(), Some("myapp"));
        assert_eq!(http.user_agent(), format!("myapp {}", user_agent::base()));
        assert_eq!(
            http.user_agent_header().to_str().unwrap(),
            http.user_agent()
        );
        let debug = format!("{http:?}");
        assert!(debug.contains("application_id: Some(\"myapp\")"), "{debug}");
        let err = http.clone().with_application_id("my app").unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Config {
                    code: "invalid_option",
                    field: "application_id",
                    ..
                }
            ),
            "{err:?}"
        );
        // A refused id leaves nothing half-set: the value is consumed, the clone keeps
        // the id it had.
        assert_eq!(http.application_id(), Some("myapp"));
    }
}
