//! `ClientCertificateCredentialOptions`: what a credential does with its tokens, and the
//! environment it runs in.

use std::time::Duration;

use crate::environment::Environment;
use crate::file::validity::EXPIRES_SOON_MARGIN;
use crate::token::assertion::AssertionAlgorithm;
use crate::token::refresh::{FAILURE_MEMORY, MAX_CACHED_SCOPES, REFRESH_WINDOW};

/// Options for [`ClientCertificateCredential`](crate::ClientCertificateCredential) (and, with [`ReloadOptions`](crate::ReloadOptions),
/// for [`UserAssignedIdentityCredential`](crate::UserAssignedIdentityCredential)): what
/// the credential does with its tokens, and the [`Environment`] it runs in (HTTP, clock,
/// retries), set with [`with_environment`](Self::with_environment).
///
/// ```
/// use std::time::Duration;
/// use msi_dataplane::{AssertionAlgorithm, ClientCertificateCredentialOptions, Environment};
///
/// let options = ClientCertificateCredentialOptions::default()
///     .with_assertion_algorithm(AssertionAlgorithm::Rs256)
///     .with_environment(Environment::default().with_request_timeout(Duration::from_secs(10))?);
/// assert_eq!(options.environment().request_timeout(), Duration::from_secs(10));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
///
/// Each setting has a setter (`with_…`), which clamps it where it has bounds; the
/// settings other parts of a program read back have a getter of the same name.
#[derive(Clone, Debug)]
pub struct ClientCertificateCredentialOptions {
    // Each setting is documented on its setter or its getter; the credential reads them.
    pub(crate) environment: Environment,
    pub(crate) assertion_algorithm: AssertionAlgorithm,
    pub(crate) expiry_warning_margin: Duration,
    pub(crate) additionally_allowed_tenants: Vec<String>,
    pub(crate) refresh_window: Duration,
    pub(crate) max_cached_scopes: usize,
    pub(crate) failure_memory: Duration,
}

impl Default for ClientCertificateCredentialOptions {
    fn default() -> Self {
        ClientCertificateCredentialOptions {
            environment: Environment::default(),
            assertion_algorithm: AssertionAlgorithm::default(),
            expiry_warning_margin: EXPIRES_SOON_MARGIN,
            additionally_allowed_tenants: Vec::new(),
            refresh_window: REFRESH_WINDOW,
            max_cached_scopes: MAX_CACHED_SCOPES,
            failure_memory: FAILURE_MEMORY,
        }
    }
}

impl ClientCertificateCredentialOptions {
    /// Run in this environment (HTTP, clock, retries), replacing any set before: e.g. one
    /// [`Environment`] shared with the data plane client, the Key Vault store and the
    /// token server.
    pub fn with_environment(mut self, environment: Environment) -> Self {
        self.environment = environment;
        self
    }

    /// Choose the assertion algorithm: PS256 with `x5t#S256` (default) or RS256 with
    /// `x5t`.
    pub fn with_assertion_algorithm(mut self, algorithm: AssertionAlgorithm) -> Self {
        self.assertion_algorithm = algorithm;
        self
    }

    /// Warn (once per credential, through `tracing`) when a token is requested within
    /// this long of the credential's end, or after its `renew_after`. Default 7 days.
    pub fn with_expiry_warning_margin(mut self, margin: Duration) -> Self {
        self.expiry_warning_margin = margin;
        self
    }

    /// Start refreshing cached tokens at least this long before they expire (half the
    /// token's lifetime caps it; the server's `refresh_in` and the half-life of tokens
    /// over 2 hours may start it earlier). Default and minimum
    /// [`MIN_REFRESH_WINDOW`](crate::limits::MIN_REFRESH_WINDOW), 5 minutes (what
    /// `azure_core`'s bearer policy needs; less is taken as 5); wider for tokens handed on
    /// to clients that treat 5 minutes left as stale, as the token server does.
    pub fn with_refresh_window(mut self, window: Duration) -> Self {
        self.refresh_window = window.max(REFRESH_WINDOW);
        self
    }

    /// Cache tokens for at most this many scope sets (a tenant and its scopes, shared by
    /// every consumer of the credential: its tenants, data plane clients over it, the
    /// token server); past it the least recently used leave, an eighth of the bound at a
    /// time, none with a request in flight. Default
    /// [`MAX_CACHED_SCOPES`](crate::limits::MAX_CACHED_SCOPES), 1,000; 0 is taken as 1.
    pub fn with_max_cached_scopes(mut self, max: usize) -> Self {
        self.max_cached_scopes = max.max(1);
        self
    }

    /// After a token request for a scope failed at Entra or on the way there (once its
    /// retries are spent), callers without a usable token for that scope get the same
    /// error for this long ([`Error::retry_at`](crate::Error::retry_at) says until when)
    /// instead of a new request; refusals made before any request (the credential
    /// expired, say) are not remembered. Default
    /// [`FAILURE_MEMORY`](crate::limits::FAILURE_MEMORY), 5 seconds; zero forgets at once.
    pub fn with_failure_memory(mut self, memory: Duration) -> Self {
        self.failure_memory = memory;
        self
    }

    /// Allow tokens in these tenants besides the credential's own (`"*"` for any), through
    /// [`get_token_for_tenant`](crate::ClientCertificateCredential::get_token_for_tenant): a
    /// multi-tenant application answering data plane challenges. Default: none.
    pub fn with_additionally_allowed_tenants<I, S>(mut self, tenants: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.additionally_allowed_tenants = tenants.into_iter().map(Into::into).collect();
        self
    }
}

/// The settings other parts of a program read back, each as its setter left it.
impl ClientCertificateCredentialOptions {
    /// The environment: the HTTP client (or extra roots for the crate-built one),
    /// `http://` loopback authorities, the request timeout (default 30 s), the application
    /// id of the `User-Agent` every token request carries, the clock and the retry policy
    /// of token requests. See [`Environment`].
    pub fn environment(&self) -> &Environment {
        &self.environment
    }

    /// How long before a cached token expires its background refresh starts, at least
    /// (see [`with_refresh_window`](Self::with_refresh_window)).
    pub fn refresh_window(&self) -> Duration {
        self.refresh_window
    }
}
