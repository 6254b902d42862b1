//! An Entra ID compatible token endpoint for tests.
//!
//! It is an independent verifier: it does not use the `msi_dataplane` library and checks
//! client-certificate (`client_assertion`) token requests the way Entra ID does: form
//! fields, the JWS header (`alg`, `typ`, `x5t`, `x5t#S256`, `x5c`), the RSA signature
//! against the registered certificate, the certificate's validity, and the claims (`aud`,
//! `iss`, `sub`, `nbf`, `iat`, `exp`, `jti` with replay detection). Failures are answered
//! with Entra-shaped JSON errors (`AADSTSnnnnn`).
//!
//! Access tokens are RS256 JWTs with the claims of an Entra app-only token, signed by the
//! server's own key, which it publishes as Entra does: an OpenID configuration per tenant
//! and a JWKS (`discovery/v2.0/keys`).
//!
//! Its TLS certificate is issued at run time by the kit's own test CA
//! ([`EntraServer::ca_pem`]; [`EntraServer::client`] trusts it and only it). It binds
//! 127.0.0.1 only, stops when the last handle is dropped, and logs nothing.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response};
use rsa::RsaPublicKey;
use rsa::pkcs8::DecodePublicKey as _;
use rsa::signature::Verifier as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Map, Value, json};
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use super::answer::{JSON_CONTENT_TYPE, Scripted, entra_error_body, new_uuid};
use super::credentials::{TestCertificate, TestIdentity};
use super::jwt::{TokenClaims, TokenRejection};
use super::script::{Facts, Match, ScriptBuilder, Scripts, VerifyOnDrop, script_methods};
use super::serve::{self, Answer, DropConnection, Listening};

/// The only accepted `client_assertion_type`.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// Allowed clock skew for `nbf` / `iat` (seconds).
pub const CLOCK_SKEW_SECS: i64 = 300;
/// Longest allowed assertion lifetime, `exp - nbf` (seconds).
pub const MAX_ASSERTION_LIFETIME_SECS: i64 = 86_400;
const TOKEN_SUFFIX: &str = "/oauth2/v2.0/token";
const MAX_BODY: usize = 1 << 20;

// ---------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------

/// A test token endpoint. Cheap to clone; every clone controls the same server, which
/// stops when the last clone is dropped (or at [`EntraServer::shutdown`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use msi_dataplane_testing::{EntraServer, TestCertificate, TestIdentity};
/// use msi_dataplane::{
///     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
/// };
///
/// let server = EntraServer::start().await;
/// let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
/// server.register(&identity, &cert);
/// let creds = identity.credentials(&cert, &server.base_url(), BundleFormat::Pem);
/// let http = Environment::default().with_http_client(server.client());
/// let options = ClientCertificateCredentialOptions::default().with_environment(http);
/// let credential = ClientCertificateCredential::new(&creds, options).unwrap();
/// let token = credential.get_token(&["https://management.azure.com/.default"]).await.unwrap();
/// let issued = server.issued(token.token()).unwrap();
/// assert_eq!(issued.cert_sha256_hex, cert.sha256_hex());
/// assert_eq!(server.tokens_issued(), 1);
/// # }
/// ```
#[derive(Clone)]
pub struct EntraServer {
    state: Arc<State>,
    listening: Listening,
    /// Checks the scripts' expectations when the test's last handle goes (`None` in the
    /// handles other kit servers keep: see [`EntraServer::linked`]).
    _verify: Option<Arc<VerifyOnDrop>>,
}

/// Shape of successful token responses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenShape {
    /// `expires_in` (seconds).
    pub expires_in: i64,
    /// Send `expires_in` as a JSON string (`"3599"`), as some Azure endpoints do.
    pub expires_in_as_string: bool,
    /// `ext_expires_in`, when sent.
    pub ext_expires_in: Option<i64>,
    /// `refresh_in`, when sent.
    pub refresh_in: Option<i64>,
    /// `token_type`, when sent.
    pub token_type: Option<String>,
}

/// One request received on a token path (`.../{tenant}/oauth2/v2.0/token`).
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Tenant taken from the path.
    pub tenant: Option<String>,
    /// `client_id` form field.
    pub client_id: Option<String>,
    /// `scope` form field.
    pub scope: Option<String>,
    /// `grant_type` form field.
    pub grant_type: Option<String>,
    /// `client_assertion_type` form field.
    pub client_assertion_type: Option<String>,
    /// `alg` from the assertion's JWS header (as sent, unverified).
    pub alg: Option<String>,
    /// `typ` from the JWS header.
    pub typ: Option<String>,
    /// `x5t` (SHA-1 thumbprint) from the JWS header.
    pub x5t: Option<String>,
    /// `x5t#S256` (SHA-256 thumbprint) from the JWS header.
    pub x5t_s256: Option<String>,
    /// Number of entries in the `x5c` header (0 when absent or not an array).
    pub x5c_len: usize,
    /// `aud` claim.
    pub aud: Option<String>,
    /// `iss` claim.
    pub iss: Option<String>,
    /// `sub` claim.
    pub sub: Option<String>,
    /// `jti` claim.
    pub jti: Option<String>,
    /// `nbf` claim.
    pub nbf: Option<i64>,
    /// `iat` claim.
    pub iat: Option<i64>,
    /// `exp` claim.
    pub exp: Option<i64>,
    /// The URL the request was made on, `{scheme}://{Host}{path}`: what `aud` must be.
    pub expected_aud: String,
    /// All request headers, lowercase names, in order.
    pub headers: Vec<(String, String)>,
    /// The `User-Agent` sent, if any: at most 512 characters, control characters
    /// escaped.
    pub user_agent: Option<String>,
    /// Names of all form fields, in order (values are in the fields above; the
    /// assertion itself is never stored).
    pub form_fields: Vec<String>,
    /// What the server answered.
    pub outcome: Outcome,
    /// The `AADSTS` code of the error answered, if it was one: the server's own
    /// ([`Outcome::Error`]) or a scripted answer's (the first of its body's
    /// `error_codes`, as [`Scripted::aadsts`] writes it).
    pub aadsts_code: Option<u32>,
    /// Lowercase hex SHA-256 of the registered certificate's DER whose key verified the
    /// assertion's signature (None when verification did not get that far).
    pub matched_cert_sha256: Option<String>,
    /// When the request was received, by the server's clock (see
    /// [`EntraServer::use_clock`]), to the nanosecond.
    pub received_at: time::OffsetDateTime,
}

impl RecordedRequest {
    /// The value of a request header (name compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a recorded request was answered. `Debug` leaves the access token out.
#[derive(Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A token was issued (the access token).
    Token(String),
    /// An Entra-shaped error was answered.
    Error {
        /// HTTP status.
        status: u16,
        /// The `AADSTS` code.
        code: u32,
        /// The OAuth `error` value.
        error: String,
    },
    /// A scripted answer with this status was used (also when it closed the connection).
    Scripted(u16),
}

impl fmt::Debug for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Token(token) => write!(f, "Token(<{} bytes>)", token.len()),
            Outcome::Error {
                status,
                code,
                error,
            } => f
                .debug_struct("Error")
                .field("status", status)
                .field("code", code)
                .field("error", error)
                .finish(),
            Outcome::Scripted(status) => f.debug_tuple("Scripted").field(status).finish(),
        }
    }
}

/// What produced an access token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// Client id of the request.
    pub client_id: String,
    /// Tenant of the request.
    pub tenant: String,
    /// Requested scope.
    pub scope: String,
    /// Lowercase hex SHA-256 of the certificate whose key signed the assertion.
    pub cert_sha256_hex: String,
    /// The assertion's `alg`.
    pub alg: String,
    /// `expires_in` answered.
    pub expires_in: i64,
    /// `refresh_in` answered, if any ([`TokenShape::refresh_in`]).
    pub refresh_in: Option<i64>,
    /// When it was issued, by the server's clock ([`EntraServer::use_clock`]).
    pub issued_at: time::OffsetDateTime,
}

impl IssuedToken {
    /// When it expires: `issued_at + expires_in`.
    pub fn expires_at(&self) -> time::OffsetDateTime {
        self.issued_at + time::Duration::seconds(self.expires_in)
    }

    /// When a credential of `msi_dataplane` refreshes this token ahead of expiry: at a
    /// time in this range, for a credential whose `refresh_window` is `refresh_window`
    /// ([`MIN_REFRESH_WINDOW`](msi_dataplane::limits::MIN_REFRESH_WINDOW), 5 minutes,
    /// by default) and that reads the server's clock (share one
    /// [`ManualClock`](msi_dataplane::ManualClock): [`EntraServer::use_clock`]). The
    /// refresh itself starts at the first `get_token` call from then on.
    ///
    /// The range is the library's own rule (the function its token cache calls, not a
    /// copy of it) applied to this token: at the server's
    /// `refresh_in` if it sent one, else at half-life for tokens living over 2 hours,
    /// else `refresh_window` before expiry; always at least `refresh_window` (at least
    /// 5 minutes) before expiry, half the lifetime for shorter tokens; moved earlier by
    /// up to 10 % of the time until it (at most 60 s) of jitter: the range's start
    /// allows for the most jitter, its end for none. The credential times the token
    /// from when it sent the request; the server from when it issued it, a little later
    /// on a system clock (the same instant on a manual clock that does not move
    /// meanwhile).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use msi_dataplane::{Clock as _, ManualClock, limits::MIN_REFRESH_WINDOW};
    /// use msi_dataplane_testing::{IdentityFixture, TestCertificate};
    ///
    /// let clock = Arc::new(ManualClock::starting_now());
    /// let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
    /// let arm = "https://management.azure.com/.default";
    /// let token = fx.credential.get_token(&[arm]).await.unwrap();
    /// let issued = fx.entra.issued(token.token()).unwrap();
    /// let refresh = issued.refresh_between(MIN_REFRESH_WINDOW);
    /// // A 3599 s token: refreshed 5 minutes before expiry, up to 60 s earlier.
    /// assert_eq!(*refresh.end(), issued.expires_at() - MIN_REFRESH_WINDOW);
    /// assert_eq!(*refresh.start(), *refresh.end() - time::Duration::seconds(60));
    /// // Just before the range, the cached token is served and nothing is asked.
    /// clock.set(*refresh.start() - time::Duration::seconds(1));
    /// fx.credential.get_token(&[arm]).await.unwrap();
    /// assert_eq!(fx.entra.token_requests(), 1);
    /// # }
    /// ```
    pub fn refresh_between(
        &self,
        refresh_window: Duration,
    ) -> std::ops::RangeInclusive<time::OffsetDateTime> {
        refresh_range(
            self.issued_at,
            self.expires_in,
            self.refresh_in,
            refresh_window,
        )
    }
}

/// The library's refresh-ahead rule (`msi_dataplane::unstable::refresh_range`) for a
/// token issued at `issued`, its `refresh_in` taken as the library's parser takes it
/// (only strictly between 0 and `expires_in`).
fn refresh_range(
    issued: time::OffsetDateTime,
    expires_in: i64,
    refresh_in: Option<i64>,
    refresh_window: Duration,
) -> std::ops::RangeInclusive<time::OffsetDateTime> {
    let expires_on = issued + time::Duration::seconds(expires_in);
    let refresh_on = refresh_in
        .filter(|r| *r > 0 && *r < expires_in)
        .map(|r| issued + time::Duration::seconds(r));
    msi_dataplane::unstable::refresh_range(issued, expires_on, refresh_on, refresh_window)
}

impl Default for TokenShape {
    fn default() -> Self {
        TokenShape {
            expires_in: 3599,
            expires_in_as_string: false,
            ext_expires_in: Some(3599),
            refresh_in: None,
            token_type: Some("Bearer".to_owned()),
        }
    }
}

impl EntraServer {
    /// HTTPS on 127.0.0.1 (ephemeral port), with a certificate from the kit's test CA.
    ///
    /// Like every kit server, it runs on the kit's own runtime, not the caller's: it
    /// serves clients on any runtime and outlives the test that started it (it stops when
    /// its last handle is dropped).
    pub async fn start() -> EntraServer {
        Self::start_inner(true)
    }

    /// As [`start`](Self::start), from code without a runtime: for a server kept in a
    /// `static` and shared by many `#[tokio::test]`s (each its own runtime). Nothing
    /// blocks but binding the socket.
    ///
    /// **Expectations on a server in a `static` are never checked on their own**: a
    /// `static` is never dropped, so the check its last handle makes when dropped never
    /// runs, and a test passes whatever its scripts expected. Mount them with
    /// [`mount_scoped`](ScriptBuilder::mount_scoped) (checked when the guard is dropped,
    /// at the end of the test) or check them yourself with [`verify`](Self::verify) or
    /// [`try_verify`](Self::try_verify). The tests sharing the server share its scripts:
    /// match on something only the test's own requests have (its identity's client id).
    ///
    /// ```
    /// use std::sync::LazyLock;
    /// use msi_dataplane_testing::{EntraServer, Match};
    ///
    /// static ENTRA: LazyLock<EntraServer> = LazyLock::new(EntraServer::start_blocking);
    ///
    /// # fn main() {
    /// for _ in 0..2 {
    ///     // Two runtimes one after the other, as two `#[tokio::test]`s: the server serves both.
    ///     let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    ///     let status = rt.block_on(async {
    ///         ENTRA.client().get(ENTRA.base_url()).send().await.unwrap().status()
    ///     });
    ///     assert_eq!(status, 404);
    /// }
    ///
    /// // This test's expectation, on requests of its own client id only: checked by hand.
    /// let client_id = "0b7e2a4c-1111-4222-8333-944455566677";
    /// ENTRA.on(Match::any().client_id(client_id)).expect(1).mount();
    /// let failure = ENTRA.try_verify().unwrap_err(); // no such request came
    /// assert_eq!(failure.unmet[0].matched, 0);
    /// ENTRA.clear_scripts();
    /// # }
    /// ```
    pub fn start_blocking() -> EntraServer {
        Self::start_inner(true)
    }

    /// Plain HTTP on 127.0.0.1 (ephemeral port).
    pub async fn start_http() -> EntraServer {
        Self::start_inner(false)
    }

    fn start_inner(tls: bool) -> EntraServer {
        let bound = serve::bind("EntraServer");
        let scripts = Scripts::new("EntraServer");
        let state = Arc::new(State {
            scheme: if tls { "https" } else { "http" },
            addr: bound.addr(),
            inner: Mutex::new(Inner::default()),
            scripts: scripts.clone(),
            issuer: super::jwt::Issuer::new(),
        });
        let handler_state = state.clone();
        let listening = bound.serve(tls, move |req| handle(handler_state.clone(), req));
        EntraServer {
            state,
            listening,
            _verify: Some(Arc::new(VerifyOnDrop(scripts))),
        }
    }

    /// A handle for another kit server that uses this one (to look up tokens): it keeps
    /// the server running but does not check its scripts' expectations when dropped, so
    /// they are checked when the test's own handles go, not whenever the other server's
    /// handler happens to be dropped.
    pub(crate) fn linked(&self) -> EntraServer {
        EntraServer {
            state: self.state.clone(),
            listening: self.listening.clone(),
            _verify: None,
        }
    }

    /// Judge time by `clock` from now on: assertions' `nbf`, `iat` and `exp`, the
    /// registered certificates' validity, and the time requests are recorded at. Share the
    /// [`ManualClock`](msi_dataplane::ManualClock) the credentials under test use, and a test can
    /// move time across refresh ahead, token expiry, `renew_after` and the certificate's
    /// end without waiting (a credential on a clock hours ahead is otherwise refused as
    /// Entra refuses an assertion from the future). The data plane server makes its
    /// identities' certificates by the same clock. [`IdentityFixture::start_with_clock`]
    /// wires one clock into the server and the fixture's credential;
    /// `ManualClock::starting_now()` starts one at the current time.
    ///
    /// [`IdentityFixture::start_with_clock`]: crate::IdentityFixture::start_with_clock
    ///
    /// ```
    /// # async fn demo() {
    /// use std::sync::Arc;
    /// use msi_dataplane_testing::EntraServer;
    /// use msi_dataplane::{Clock, ManualClock};
    ///
    /// let clock = Arc::new(ManualClock::starting_now());
    /// let entra = EntraServer::start().await;
    /// entra.use_clock(clock.clone());
    /// clock.advance(std::time::Duration::from_secs(3 * 3600));
    /// assert_eq!(entra.now(), clock.now());
    /// # }
    /// ```
    pub fn use_clock(&self, clock: Arc<dyn msi_dataplane::Clock>) {
        self.state.lock().clock = Some(clock);
    }

    /// Now, by the server's clock ([`use_clock`](Self::use_clock); the system clock
    /// otherwise).
    pub fn now(&self) -> time::OffsetDateTime {
        self.state.now()
    }

    /// `https://127.0.0.1:PORT/` (`http://` for [`EntraServer::start_http`]): what a
    /// credential file's `authentication_endpoint` holds.
    pub fn base_url(&self) -> String {
        format!("{}://{}/", self.state.scheme, self.state.addr)
    }

    /// `{base_url without trailing slash}/{tenant}/oauth2/v2.0/token`.
    pub fn token_url(&self, tenant: &str) -> String {
        format!(
            "{}://{}/{tenant}{TOKEN_SUFFIX}",
            self.state.scheme, self.state.addr
        )
    }

    /// The bound address (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.state.addr.port()
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        self.state.scheme
    }

    /// Write the kit's test CA certificate (PEM) into `dir` (as
    /// `msi-dataplane-testing-ca.pem`) and return its path: for programs given a CA file
    /// (`--ca-file`). The file lives as long as the directory (e.g. a [`TempDir`]); the kit
    /// leaves no file of its own behind.
    ///
    /// [`TempDir`]: crate::TempDir
    ///
    /// # Panics
    ///
    /// When the file cannot be written (the panic names it).
    pub fn write_ca_pem(dir: impl AsRef<Path>) -> PathBuf {
        super::tls::write_ca_pem(dir.as_ref())
    }

    /// The kit's test CA certificate, PEM (for `reqwest::Certificate::from_pem`).
    pub fn ca_pem() -> Vec<u8> {
        super::tls::test_ca().certificate_pem().as_bytes().to_vec()
    }

    /// An HTTP client that trusts the kit's test CA (and only it) and follows no
    /// redirects: for [`Environment::with_http_client`](msi_dataplane::Environment::with_http_client).
    pub fn client(&self) -> reqwest::Client {
        super::tls::client()
    }

    /// Register `cert` for `identity` (its client id in its tenant). Its tokens carry the
    /// identity's `object_id` as `oid` and `sub`.
    pub fn register(&self, identity: &TestIdentity, cert: &TestCertificate) {
        self.state.issuer.set_object_id(
            &identity.tenant_id,
            &identity.client_id,
            &identity.object_id,
        );
        self.register_certificate_der(
            &identity.client_id,
            &identity.tenant_id,
            cert.certificate_der(),
        );
    }

    /// Register one certificate (the first CERTIFICATE block of `leaf_pem`) for a client
    /// in a tenant. A client may have several. Registering makes the tenant known.
    pub fn register_certificate_pem(&self, client_id: &str, tenant_id: &str, leaf_pem: &[u8]) {
        let der = CertificateDer::pem_slice_iter(leaf_pem)
            .next()
            .expect("EntraServer: no CERTIFICATE block in PEM")
            .expect("EntraServer: bad CERTIFICATE PEM");
        self.register_certificate_der(client_id, tenant_id, der.as_ref());
    }

    /// Register the first certificate of a PEM file.
    pub fn register_certificate_file(
        &self,
        client_id: &str,
        tenant_id: &str,
        path: impl AsRef<Path>,
    ) {
        let path = path.as_ref();
        let pem = std::fs::read(path)
            .unwrap_or_else(|e| panic!("EntraServer: cannot read {}: {e}", path.display()));
        self.register_certificate_pem(client_id, tenant_id, &pem);
    }

    /// Register one DER certificate.
    pub fn register_certificate_der(&self, client_id: &str, tenant_id: &str, der: &[u8]) {
        let cert = RegisteredCert::parse(der);
        let mut inner = self.state.lock();
        let certs = inner
            .tenants
            .entry(tenant_id.to_owned())
            .or_default()
            .entry(client_id.to_owned())
            .or_default();
        if !certs.iter().any(|c| c.der == cert.der) {
            certs.push(cert);
        }
    }

    /// Make a tenant known without registering any client in it.
    pub fn register_tenant(&self, tenant_id: &str) {
        self.state
            .lock()
            .tenants
            .entry(tenant_id.to_owned())
            .or_default();
    }

    /// Remove every certificate registered for the client (the client stays registered).
    pub fn clear_certificates(&self, client_id: &str, tenant_id: &str) {
        let mut inner = self.state.lock();
        if let Some(certs) = inner
            .tenants
            .get_mut(tenant_id)
            .and_then(|clients| clients.get_mut(client_id))
        {
            certs.clear();
        }
    }

    /// Script the answers to the token requests `matcher` matches (by client id, tenant,
    /// scope, path or method), and expect a number of them: see [`ScriptBuilder`].
    /// Scripts are consulted in the order they were mounted, for every request on a token
    /// path, before any check (the tenant's included); a request no script answers gets
    /// the server's normal answer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use msi_dataplane_testing::{EntraServer, Match, Scripted, TestCertificate, TestIdentity};
    /// use msi_dataplane::{
    ///     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
    ///     RetryPolicy,
    /// };
    ///
    /// let entra = EntraServer::start().await;
    /// let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
    /// entra.register(&identity, &cert);
    /// // This identity's first Key Vault token request gets a 503, and exactly two arrive:
    /// // the retry is answered as usual.
    /// let vault = "https://vault.azure.net/.default";
    /// let script = entra
    ///     .on(Match::any().client_id(&identity.client_id).scope(vault))
    ///     .respond(Scripted::status(503).retry_after("0"))
    ///     .expect(2)
    ///     .mount_scoped();
    /// let creds = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
    /// let env = Environment::default()
    ///     .with_http_client(entra.client())
    ///     .with_retry_policy(RetryPolicy::default().with_initial_delay(std::time::Duration::ZERO));
    /// let options = ClientCertificateCredentialOptions::default().with_environment(env);
    /// let credential = ClientCertificateCredential::new(&creds, options).unwrap();
    /// credential.get_token(&[vault]).await.unwrap();
    /// assert_eq!(script.matched(), 2);
    /// drop(script); // checks the expectation: panics if it failed, listing the requests
    /// # }
    /// ```
    pub fn on(&self, matcher: Match) -> ScriptBuilder {
        ScriptBuilder::new(self.state.scripts.clone(), matcher)
    }

    script_methods!("token");

    /// Delay normal answers (tokens and errors) to requests whose `scope` equals `scope`.
    /// `Duration::ZERO` removes the delay.
    pub fn set_scope_delay(&self, scope: &str, d: Duration) {
        let mut inner = self.state.lock();
        if d.is_zero() {
            inner.scope_delays.remove(scope);
        } else {
            inner.scope_delays.insert(scope.to_owned(), d);
        }
    }

    /// Turn `jti` replay detection on or off (on by default). While off, an assertion
    /// may be presented any number of times (benchmarks replay one pre-signed assertion)
    /// and `jti`s are neither checked nor remembered; every other check still runs.
    pub fn set_replay_check(&self, enabled: bool) {
        self.state.lock().replay_check_disabled = !enabled;
    }

    /// Shape successful token answers this way from now on.
    pub fn set_token_shape(&self, s: TokenShape) {
        self.state.lock().shape = s;
    }

    /// Issue access tokens of exactly `len` bytes, e.g. Entra-sized ones (1–2 KB) for
    /// memory measurements: the JWT's claims (and, when base64's lengths need it, its
    /// header) are padded with JSON whitespace, so tokens stay valid, signed JWTs with the
    /// same claims. Lengths below a token's own are ignored; one 1 to 3 bytes above it may
    /// give a token up to 2 bytes longer (base64 grows in steps).
    pub fn set_access_token_length(&self, len: usize) {
        self.state.lock().access_token_length = len;
    }

    /// Every request received on a token path, in order of arrival.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.lock().requests.clone()
    }

    /// Number of requests received on a token path.
    pub fn token_requests(&self) -> usize {
        self.state.lock().requests.len()
    }

    /// Number of tokens issued.
    pub fn tokens_issued(&self) -> usize {
        self.state.lock().issued.len()
    }

    /// Forget the recorded requests (issued tokens and seen `jti`s are kept).
    pub fn clear_requests(&self) {
        self.state.lock().requests.clear();
    }

    /// Which request/certificate produced an access token.
    pub fn issued(&self, access_token: &str) -> Option<IssuedToken> {
        self.state.lock().issued.get(access_token).cloned()
    }

    /// The issuer of the tokens of `tenant`: `{base_url}{tenant}/v2.0`, the `iss` of its
    /// tokens and the `issuer` of its OpenID configuration.
    pub fn issuer(&self, tenant: &str) -> String {
        super::jwt::issuer_url(&self.base_url(), tenant)
    }

    /// `{base_url}{tenant}/v2.0/.well-known/openid-configuration`: the tenant's OpenID
    /// Provider configuration (`issuer`, `token_endpoint`, `jwks_uri`, ...), as Entra
    /// serves it. An unknown tenant gets Entra's `400` (AADSTS90002); `common`,
    /// `organizations` and `consumers` get the `{tenantid}` issuer template.
    pub fn openid_configuration_url(&self, tenant: &str) -> String {
        super::discovery::openid_configuration_url(&self.base_url(), tenant)
    }

    /// `{base_url}common/discovery/v2.0/keys`: the signing keys (JWKS). Every
    /// `{tenant}/discovery/v2.0/keys` (the `jwks_uri` of a tenant's configuration) serves
    /// the same keys.
    pub fn jwks_url(&self) -> String {
        super::discovery::keys_url(&self.base_url(), "common")
    }

    /// The JWKS the server publishes: each key `kty` `RSA`, `use` `sig`, `kid` (= `x5t`,
    /// the base64url SHA-1 of its certificate, as Entra's), `n`, `e`, `x5c`; the key that
    /// signs new tokens first.
    pub fn jwks(&self) -> Value {
        self.state
            .issuer
            .jwks(&super::jwt::issuer_url(&self.base_url(), "{tenantid}"))
    }

    /// The `kid` of the key that signs new tokens.
    pub fn signing_key_id(&self) -> String {
        self.state.issuer.active_key().kid().to_owned()
    }

    /// The self-signed certificate of the key that signs new tokens, PEM (for a
    /// validator configured with a certificate rather than the JWKS; one wanting the key
    /// itself takes [`signing_public_key_pem`](Self::signing_public_key_pem)).
    pub fn signing_certificate_pem(&self) -> String {
        pem(
            "CERTIFICATE",
            self.state.issuer.active_key().certificate_der(),
        )
    }

    /// The public key that signs new tokens, PEM (`BEGIN PUBLIC KEY`:
    /// SubjectPublicKeyInfo), as `jsonwebtoken::DecodingKey::from_rsa_pem` and other
    /// validators given a key take it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
    /// use msi_dataplane_testing::IdentityFixture;
    ///
    /// let fx = IdentityFixture::start().await;
    /// let token = fx.credential.get_token(&["api://my-api/.default"]).await.unwrap();
    /// let key = DecodingKey::from_rsa_pem(fx.entra.signing_public_key_pem().as_bytes()).unwrap();
    /// let mut validation = Validation::new(Algorithm::RS256);
    /// validation.set_audience(&["api://my-api"]);
    /// let claims = decode::<serde_json::Value>(token.token(), &key, &validation).unwrap().claims;
    /// assert_eq!(claims["appid"], fx.identity.client_id.as_str());
    /// # }
    /// ```
    pub fn signing_public_key_pem(&self) -> String {
        pem(
            "PUBLIC KEY",
            &self.state.issuer.active_key().public_key_der(),
        )
    }

    /// Roll the signing key over, as Entra does: a new key signs the tokens from now on,
    /// and the JWKS lists it first while keeping the previous keys (tokens they signed
    /// stay valid). Returns the new key's `kid`. With a certificate rotation too: this
    /// first, then the certificate, then [`retire_signing_key`](Self::retire_signing_key)
    /// (see [the order](crate#rotating-the-signing-key-and-the-certificate)).
    pub fn rotate_signing_key(&self) -> String {
        self.state.issuer.rotate().kid().to_owned()
    }

    /// Retire the signing key `kid`, as Entra drops a key from its JWKS after a rollover:
    /// the JWKS no longer lists it, and tokens it signed are refused as signed by an
    /// unknown key ([`TokenRejection::UnknownKey`](crate::TokenRejection::UnknownKey)) by
    /// [`validate`](Self::validate) and the [`ResourceServer`](crate::ResourceServer).
    /// When it was the key signing new tokens, the newest remaining key signs them (a new
    /// key is made when none remains). `false` when no published key has that `kid`.
    /// Retire a key only once no token it signed is still in use (after a certificate
    /// rotation: see [the order](crate#rotating-the-signing-key-and-the-certificate)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use msi_dataplane_testing::{IdentityFixture, TokenRejection};
    ///
    /// let fx = IdentityFixture::start().await;
    /// let token = fx.credential.get_token(&["api://my-api/.default"]).await.unwrap();
    /// let old = fx.entra.signing_key_id();
    /// fx.entra.rotate_signing_key();
    /// assert!(fx.entra.retire_signing_key(&old));
    /// assert!(!fx.entra.jwks().to_string().contains(&old));
    /// let refused = fx.entra.validate(token.token(), "api://my-api").unwrap_err();
    /// assert_eq!(refused, TokenRejection::UnknownKey { kid: old });
    /// # }
    /// ```
    pub fn retire_signing_key(&self, kid: &str) -> bool {
        self.state.issuer.retire(kid)
    }

    /// Put these claims in every access token issued from now on (e.g. `roles`),
    /// replacing standard claims of the same name (a wrong `tid`, a `ver` of `1.0`, ...).
    /// An empty map removes them. Claims set for one client
    /// ([`set_extra_claims_for`](Self::set_extra_claims_for)) come after these.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use msi_dataplane_testing::EntraServer;
    ///
    /// let entra = EntraServer::start().await;
    /// let serde_json::Value::Object(claims) = serde_json::json!({"roles": ["Reader"]}) else {
    ///     unreachable!()
    /// };
    /// entra.set_extra_claims(claims);
    /// # }
    /// ```
    pub fn set_extra_claims(&self, claims: Map<String, Value>) {
        self.state.issuer.set_extra_claims(None, claims);
    }

    /// Put these claims in the access tokens issued to `client_id` from now on, after the
    /// claims for every client; an empty map removes them.
    pub fn set_extra_claims_for(&self, client_id: &str, claims: Map<String, Value>) {
        self.state.issuer.set_extra_claims(Some(client_id), claims);
    }

    /// The `oid` (and `sub`) of the tokens of `client_id` in `tenant`: the
    /// [`TestIdentity::object_id`](super::TestIdentity::object_id) of an identity
    /// registered with [`register`](Self::register), else a UUID made from the tenant and
    /// client id (the same in every run).
    pub fn object_id(&self, client_id: &str, tenant: &str) -> String {
        self.state.issuer.object_id(tenant, client_id)
    }

    /// Validate an access token as a resource accepting `audience` does: the signature
    /// (the server's keys), `iss` (this server's issuer for the token's `tid`), `aud`,
    /// and `nbf`/`exp` by the server's clock ([`now`](Self::now), with
    /// [`TOKEN_CLOCK_SKEW_SECS`](super::TOKEN_CLOCK_SKEW_SECS) of skew). Any tenant.
    /// Garbage gets a [`TokenRejection`](super::TokenRejection), never a panic.
    pub fn validate(&self, token: &str, audience: &str) -> Result<TokenClaims, TokenRejection> {
        self.validate_with(token, &[audience.to_owned()], None)
    }

    /// An access token's claims, its signature and issuer checked, whatever its audience
    /// and times (an expired token's claims too).
    pub fn claims(&self, token: &str) -> Result<TokenClaims, TokenRejection> {
        let base_url = self.base_url();
        let rules = super::jwt::Rules {
            base_url: &base_url,
            audiences: None,
            tenants: None,
            lifetime: false,
        };
        self.state
            .issuer
            .validate(token, &rules, self.now().unix_timestamp())
    }

    /// Validate a token by the rules a [`ResourceServer`](super::ResourceServer) sets.
    pub(crate) fn validate_with(
        &self,
        token: &str,
        audiences: &[String],
        tenants: Option<&[String]>,
    ) -> Result<TokenClaims, TokenRejection> {
        let base_url = self.base_url();
        let rules = super::jwt::Rules {
            base_url: &base_url,
            audiences: Some(audiences),
            tenants,
            lifetime: true,
        };
        self.state
            .issuer
            .validate(token, &rules, self.now().unix_timestamp())
    }

    /// How many connections clients opened to the server so far: over HTTPS, each one a
    /// TCP and TLS handshake. Requests over a reused (pooled) connection add none.
    pub fn connections(&self) -> u64 {
        self.listening.connections()
    }

    /// Stop accepting connections; open connections (and requests in flight) are dropped.
    pub fn shutdown(&self) {
        self.listening.shutdown();
    }
}

impl fmt::Debug for EntraServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntraServer")
            .field("base_url", &self.base_url())
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------

struct State {
    scheme: &'static str,
    addr: SocketAddr,
    inner: Mutex<Inner>,
    scripts: Arc<Scripts>,
    /// The token issuer: signing keys, extra claims, object ids.
    issuer: super::jwt::Issuer,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Now, by the server's clock.
    fn now(&self) -> time::OffsetDateTime {
        match &self.lock().clock {
            Some(clock) => clock.now(),
            None => time::OffsetDateTime::now_utc(),
        }
    }
}

#[derive(Default)]
struct Inner {
    /// Set by [`EntraServer::use_clock`]; the system clock otherwise.
    clock: Option<Arc<dyn msi_dataplane::Clock>>,
    /// tenant -> client id -> certificates
    tenants: HashMap<String, HashMap<String, Vec<RegisteredCert>>>,
    scope_delays: HashMap<String, Duration>,
    shape: TokenShape,
    requests: Vec<RecordedRequest>,
    issued: HashMap<String, IssuedToken>,
    /// (client id, jti)
    seen_jti: HashSet<(String, String)>,
    /// Set by [`EntraServer::set_replay_check`]`(false)`.
    replay_check_disabled: bool,
    /// Set by [`EntraServer::set_access_token_length`].
    access_token_length: usize,
}

struct RegisteredCert {
    der: Vec<u8>,
    sha1: Vec<u8>,
    sha256: Vec<u8>,
    public_key: Option<RsaPublicKey>,
    not_before: i64,
    not_after: i64,
}

impl RegisteredCert {
    fn parse(der: &[u8]) -> RegisteredCert {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .expect("EntraServer: registered certificate is not valid X.509 DER");
        let public_key = RsaPublicKey::from_public_key_der(cert.public_key().raw).ok();
        RegisteredCert {
            der: der.to_vec(),
            sha1: Sha1::digest(der).to_vec(),
            sha256: Sha256::digest(der).to_vec(),
            public_key,
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Request handling
// ---------------------------------------------------------------------------------------

/// `der` as PEM with the `label`.
fn pem(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `/{anything}/{tenant}/oauth2/v2.0/token` -> tenant.
fn tenant_from_path(path: &str) -> Option<String> {
    let head = path.strip_suffix(TOKEN_SUFFIX)?;
    let tenant = &head[head.rfind('/')? + 1..];
    (!tenant.is_empty()).then(|| tenant.to_owned())
}

/// The answer, with the request's correlation id echoed (`client-request-id`) when the
/// client asked for it and the answer does not set one already.
fn build_response(answer: Answer, echo_correlation: Option<&str>) -> Response<Full<Bytes>> {
    with_echo(answer, echo_correlation).into_response()
}

fn with_echo(mut answer: Answer, echo_correlation: Option<&str>) -> Answer {
    let has_request_id = answer
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("client-request-id"));
    if let (Some(id), false) = (echo_correlation, has_request_id) {
        answer
            .headers
            .push(("client-request-id".to_owned(), id.to_owned()));
    }
    answer
}

fn json_answer(status: u16, body: String) -> Answer {
    Answer::with_content_type(status, JSON_CONTENT_TYPE, body)
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let received_at = state.now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let correlation = header("client-request-id")
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(new_uuid);
    let echo = header("return-client-request-id")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        .then_some(correlation.as_str());

    if let Some(document) = super::discovery::document(&path) {
        let answer = discovery_answer(&state, parts.method.as_str(), &document, &correlation);
        return Ok(build_response(answer, echo));
    }

    let Some(tenant) = tenant_from_path(&path) else {
        let body =
            json!({"error": "not_found", "error_description": format!("no such path: {path}")});
        return Ok(build_response(json_answer(404, body.to_string()), echo));
    };

    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Err(DropConnection),
    };

    let host = header("host")
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_else(|| state.addr.to_string());
    let expected_aud = format!("{}://{}{}", state.scheme, host, path);
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let field = |name: &str| form.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let assertion = field("client_assertion");
    let (jws_header, claims) = assertion
        .as_deref()
        .map(peek_assertion)
        .unwrap_or((None, None));
    let hstr = |k: &str| {
        jws_header
            .as_ref()
            .and_then(|h| h.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let cstr = |k: &str| {
        claims
            .as_ref()
            .and_then(|c| c.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let cint = |k: &str| {
        claims
            .as_ref()
            .and_then(|c| c.get(k))
            .and_then(Value::as_i64)
    };

    let mut record = RecordedRequest {
        method: parts.method.as_str().to_owned(),
        path: path.clone(),
        tenant: Some(tenant.clone()),
        client_id: field("client_id"),
        scope: field("scope"),
        grant_type: field("grant_type"),
        client_assertion_type: field("client_assertion_type"),
        alg: hstr("alg"),
        typ: hstr("typ"),
        x5t: hstr("x5t"),
        x5t_s256: hstr("x5t#S256"),
        x5c_len: jws_header
            .as_ref()
            .and_then(|h| h.get("x5c"))
            .and_then(Value::as_array)
            .map_or(0, Vec::len),
        aud: cstr("aud"),
        iss: cstr("iss"),
        sub: cstr("sub"),
        jti: cstr("jti"),
        nbf: cint("nbf"),
        iat: cint("iat"),
        exp: cint("exp"),
        expected_aud: expected_aud.clone(),
        headers: headers.clone(),
        user_agent: serve::user_agent(&parts.headers),
        form_fields: form.iter().map(|(n, _)| n.clone()).collect(),
        outcome: Outcome::Scripted(0),
        aadsts_code: None,
        matched_cert_sha256: None,
        received_at,
    };

    // Scripted answers come first.
    let scripted = state.scripts.answer(&Facts {
        method: &record.method,
        path: &record.path,
        client_id: record.client_id.as_deref(),
        tenant: record.tenant.as_deref(),
        scope: record.scope.as_deref(),
    });
    if let Some(s) = &scripted {
        record.outcome = Outcome::Scripted(s.status);
        record.aadsts_code = scripted_aadsts_code(&s.body);
        state.lock().requests.push(record.clone());
    }
    if let Some(s) = scripted {
        let answer = Answer {
            status: s.status,
            headers: s.headers,
            body: s.body,
        };
        return serve::send_after(with_echo(answer, echo), s.delay, s.close_connection).await;
    }

    let content_type = header("content-type").unwrap_or_default();
    let base_url = format!("{}://{}/", state.scheme, state.addr);
    let ctx = RequestContext {
        issuer: &state.issuer,
        base_url: &base_url,
        method: parts.method.as_str(),
        content_type: &content_type,
        tenant: &tenant,
        expected_aud: &expected_aud,
        form: &form,
    };
    let (answer, delay) = {
        let mut inner = state.lock();
        let result = verify(&mut inner, &ctx, &mut record);
        let answer = match result {
            Ok(success) => {
                record.outcome = Outcome::Token(success.access_token.clone());
                json_answer(200, success.body)
            }
            Err(rejection) => {
                record.aadsts_code = Some(rejection.code);
                record.outcome = Outcome::Error {
                    status: rejection.status,
                    code: rejection.code,
                    error: rejection.error.to_owned(),
                };
                let body = entra_error_body(
                    rejection.error,
                    rejection.code,
                    &rejection.description,
                    &correlation,
                );
                json_answer(rejection.status, body)
            }
        };
        let delay = record
            .scope
            .as_ref()
            .and_then(|s| inner.scope_delays.get(s).copied());
        inner.requests.push(record);
        (answer, delay)
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    Ok(build_response(answer, echo))
}

type JsonObject = Map<String, Value>;

/// The first of `error_codes` in a scripted answer's body (an Entra error), if any.
fn scripted_aadsts_code(body: &str) -> Option<u32> {
    let value: Value = serde_json::from_str(body).ok()?;
    let code = value.get("error_codes")?.as_array()?.first()?.as_u64()?;
    u32::try_from(code).ok()
}

/// Lenient decoding of the assertion's header and claims, for recording only.
fn peek_assertion(assertion: &str) -> (Option<JsonObject>, Option<JsonObject>) {
    let mut parts = assertion.split('.');
    let decode = |p: Option<&str>| {
        p.and_then(|p| URL_SAFE_NO_PAD.decode(p.trim_end_matches('=')).ok())
            .and_then(|b| serde_json::from_slice::<Map<String, Value>>(&b).ok())
    };
    let header = decode(parts.next());
    let claims = decode(parts.next());
    (header, claims)
}

struct RequestContext<'a> {
    /// Signs the access token.
    issuer: &'a super::jwt::Issuer,
    /// The server's base URL (the tokens' issuer is under it).
    base_url: &'a str,
    method: &'a str,
    content_type: &'a str,
    tenant: &'a str,
    expected_aud: &'a str,
    form: &'a [(String, String)],
}

struct Success {
    access_token: String,
    body: String,
}

struct Rejection {
    status: u16,
    error: &'static str,
    code: u32,
    description: String,
}

fn reject(
    status: u16,
    error: &'static str,
    code: u32,
    description: impl Into<String>,
) -> Rejection {
    Rejection {
        status,
        error,
        code,
        description: description.into(),
    }
}

fn invalid_client(code: u32, description: impl Into<String>) -> Rejection {
    reject(401, "invalid_client", code, description)
}

fn malformed(detail: &str) -> Rejection {
    invalid_client(
        50027,
        format!("JWT token is invalid or malformed: {detail}"),
    )
}

fn verify(
    inner: &mut Inner,
    ctx: &RequestContext<'_>,
    record: &mut RecordedRequest,
) -> Result<Success, Rejection> {
    if ctx.method != "POST" {
        return Err(reject(
            405,
            "invalid_request",
            900561,
            format!(
                "The endpoint only accepts POST requests. Received a {} request.",
                ctx.method
            ),
        ));
    }
    if !inner.tenants.contains_key(ctx.tenant) {
        return Err(reject(
            400,
            "invalid_request",
            90002,
            format!(
                "Tenant '{}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.",
                ctx.tenant
            ),
        ));
    }
    let mime = ctx.content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        return Err(reject(
            400,
            "invalid_request",
            900144,
            format!(
                "The request body must contain the following parameter: 'grant_type'. (content-type was '{}', expected application/x-www-form-urlencoded)",
                ctx.content_type
            ),
        ));
    }
    let mut seen = HashSet::new();
    for (name, _) in ctx.form {
        if !seen.insert(name.as_str()) {
            return Err(reject(
                400,
                "invalid_request",
                9000411,
                format!(
                    "The request is not properly formatted. The parameter '{name}' is duplicated."
                ),
            ));
        }
    }
    let field = |name: &str| {
        ctx.form
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };

    // Form fields.
    match field("grant_type") {
        Some("client_credentials") => {}
        other => {
            return Err(reject(
                400,
                "unsupported_grant_type",
                70003,
                format!(
                    "The app requested an unsupported grant type '{}'. Only 'client_credentials' is supported here.",
                    other.unwrap_or("")
                ),
            ));
        }
    }
    match field("client_assertion_type") {
        Some(JWT_BEARER) => {}
        other => {
            return Err(reject(
                400,
                "invalid_request",
                50027,
                format!(
                    "Invalid client_assertion_type '{}': expected '{JWT_BEARER}'.",
                    other.unwrap_or("")
                ),
            ));
        }
    }
    let client_id = field("client_id").unwrap_or("");
    let certs = match inner
        .tenants
        .get(ctx.tenant)
        .and_then(|clients| clients.get(client_id))
    {
        Some(certs) if !client_id.is_empty() => certs,
        _ => {
            return Err(reject(
                400,
                "unauthorized_client",
                700016,
                format!(
                    "Application with identifier '{client_id}' was not found in the directory '{}'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant.",
                    ctx.tenant
                ),
            ));
        }
    };
    let scope = field("scope").unwrap_or("");
    let scopes: Vec<&str> = scope.split(' ').collect();
    if scope.is_empty()
        || scopes
            .iter()
            .any(|s| s.is_empty() || !s.ends_with("/.default") || s.len() == "/.default".len())
    {
        return Err(reject(
            400,
            "invalid_scope",
            1002012,
            format!(
                "The provided value for scope '{scope}' is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI)."
            ),
        ));
    }
    let Some(assertion) = field("client_assertion").filter(|a| !a.is_empty()) else {
        return Err(invalid_client(
            7000216,
            "'client_assertion', 'client_secret' or 'request' is required for the 'client_credentials' grant type.",
        ));
    };

    // JWS structure.
    let parts: Vec<&str> = assertion.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty()) {
        return Err(malformed("a compact JWS has three non-empty parts"));
    }
    let (header_b64, claims_b64, sig_b64) = (parts[0], parts[1], parts[2]);
    let decode_json = |part: &str, what: &str| -> Result<Map<String, Value>, Rejection> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|e| malformed(&format!("{what} is not unpadded base64url ({e})")))?;
        serde_json::from_slice::<Map<String, Value>>(&bytes)
            .map_err(|e| malformed(&format!("{what} is not a JSON object ({e})")))
    };
    let header = decode_json(header_b64, "JWS header")?;
    let claims = decode_json(claims_b64, "JWT claims")?;
    let signature = URL_SAFE_NO_PAD
        .decode(sig_b64)
        .map_err(|_| malformed("signature is not unpadded base64url"))?;

    // Header.
    let alg = match header.get("alg").and_then(Value::as_str) {
        Some(alg @ ("RS256" | "PS256")) => alg.to_owned(),
        other => {
            return Err(invalid_client(
                5002738,
                format!(
                    "Invalid JWT token. '{}' is not a supported signature algorithm. Supported signing algorithms are: 'RS256, PS256'",
                    other.unwrap_or("")
                ),
            ));
        }
    };
    if let Some(typ) = header.get("typ")
        && typ.as_str() != Some("JWT")
    {
        return Err(malformed(&format!("unsupported typ {typ}")));
    }
    if header.contains_key("crit") {
        return Err(malformed("the crit header is not supported"));
    }
    let thumbprint = |name: &str, len: usize| -> Result<Option<Vec<u8>>, Rejection> {
        match header.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => match URL_SAFE_NO_PAD.decode(s) {
                Ok(bytes) if bytes.len() == len => Ok(Some(bytes)),
                _ => Err(invalid_client(
                    700027,
                    format!(
                        "Client assertion contains an invalid '{name}' header: expected unpadded base64url of a {len}-byte certificate hash."
                    ),
                )),
            },
            Some(_) => Err(invalid_client(
                700027,
                format!("Client assertion contains an invalid '{name}' header: not a string."),
            )),
        }
    };
    let x5t = thumbprint("x5t", 20)?;
    let x5t_s256 = thumbprint("x5t#S256", 32)?;
    let not_registered = || {
        invalid_client(
            700027,
            format!(
                "The certificate with identifier used to sign the client assertion is not registered on application. [Reason - The key was not found., Thumbprint of key used by client: '{}', Please visit the Azure Portal, Graph Explorer or directly use MS Graph to see configured keys for app Id '{client_id}'.]",
                record
                    .x5t
                    .as_deref()
                    .or(record.x5t_s256.as_deref())
                    .unwrap_or("")
            ),
        )
    };
    let by_sha1 = x5t
        .as_ref()
        .map(|t| certs.iter().position(|c| &c.sha1 == t));
    let by_sha256 = x5t_s256
        .as_ref()
        .map(|t| certs.iter().position(|c| &c.sha256 == t));
    let index = match (by_sha1, by_sha256) {
        (None, None) => {
            return Err(invalid_client(
                700027,
                "Client assertion must identify its certificate with an 'x5t' or 'x5t#S256' header.",
            ));
        }
        (Some(Some(i)), None) | (None, Some(Some(i))) => i,
        (Some(Some(a)), Some(Some(b))) if a == b => a,
        (Some(Some(_)), Some(Some(_))) => {
            return Err(invalid_client(
                700027,
                "Client assertion headers 'x5t' and 'x5t#S256' identify different certificates.",
            ));
        }
        _ => return Err(not_registered()),
    };
    let cert = &certs[index];

    let x5c = match header.get("x5c") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => {
            return Err(invalid_client(
                700027,
                "Client assertion is missing the 'x5c' header (a non-empty array of base64 DER certificates).",
            ));
        }
    };
    let mut chain = Vec::with_capacity(x5c.len());
    for item in x5c {
        match item.as_str().map(|s| STANDARD.decode(s)) {
            Some(Ok(der)) => chain.push(der),
            _ => {
                return Err(invalid_client(
                    700027,
                    "Client assertion contains an invalid 'x5c' header: entries must be standard (padded) base64 of DER certificates.",
                ));
            }
        }
    }
    if chain[0] != cert.der {
        return Err(invalid_client(
            700030,
            "Invalid certificate: the first certificate of the client assertion's 'x5c' header is not the certificate identified by 'x5t'/'x5t#S256'.",
        ));
    }

    // Signature.
    let signing_input = format!("{header_b64}.{claims_b64}");
    let Some(key) = cert.public_key.clone() else {
        return Err(invalid_client(
            700027,
            "Client assertion failed signature validation: the registered certificate's key is not an RSA key.",
        ));
    };
    let verified = match alg.as_str() {
        "RS256" => rsa::pkcs1v15::Signature::try_from(signature.as_slice())
            .ok()
            .is_some_and(|sig| {
                rsa::pkcs1v15::VerifyingKey::<Sha256>::new(key)
                    .verify(signing_input.as_bytes(), &sig)
                    .is_ok()
            }),
        _ => rsa::pss::Signature::try_from(signature.as_slice())
            .ok()
            .is_some_and(|sig| {
                rsa::pss::VerifyingKey::<Sha256>::new(key)
                    .verify(signing_input.as_bytes(), &sig)
                    .is_ok()
            }),
    };
    if !verified {
        return Err(invalid_client(
            700027,
            format!("Client assertion failed signature validation. (alg {alg})"),
        ));
    }
    let cert_sha256_hex = hex(&cert.sha256);
    record.matched_cert_sha256 = Some(cert_sha256_hex.clone());

    let now_time = inner
        .clock
        .as_ref()
        .map_or_else(time::OffsetDateTime::now_utc, |c| c.now());
    let now = now_time.unix_timestamp();
    if now < cert.not_before || now > cert.not_after {
        return Err(invalid_client(
            700027,
            format!(
                "Client assertion failed signature validation: the key used is expired or not yet valid (certificate valid from {} to {}, now {now}).",
                cert.not_before, cert.not_after
            ),
        ));
    }

    // Claims.
    match claims.get("aud") {
        Some(Value::String(aud)) if aud == ctx.expected_aud => {}
        other => {
            return Err(invalid_client(
                700023,
                format!(
                    "Client assertion audience claim does not match Realm issuer. Review the documentation at https://learn.microsoft.com/entra/identity-platform/certificate-credentials . Expected aud '{}', got {}.",
                    ctx.expected_aud,
                    other.map_or_else(|| "none".to_owned(), Value::to_string)
                ),
            ));
        }
    }
    let iss = claims.get("iss").and_then(Value::as_str);
    let sub = claims.get("sub").and_then(Value::as_str);
    if iss != Some(client_id) || sub != Some(client_id) {
        return Err(invalid_client(
            700021,
            format!(
                "Client assertion application identifier doesn't match 'client_id' parameter. Review the documentation at https://learn.microsoft.com/entra/identity-platform/certificate-credentials . (iss {iss:?}, sub {sub:?}, client_id '{client_id}')"
            ),
        ));
    }
    let time_claim = |name: &str| -> Result<i64, Rejection> {
        claims.get(name).and_then(Value::as_i64).ok_or_else(|| {
            invalid_client(
                700024,
                format!(
                    "Client assertion is not within its valid time range: '{name}' must be an integer NumericDate."
                ),
            )
        })
    };
    let nbf = time_claim("nbf")?;
    let iat = time_claim("iat")?;
    let exp = time_claim("exp")?;
    let time_problem = if exp <= now {
        Some(format!("the assertion expired (exp {exp}, now {now})"))
    } else if nbf > now + CLOCK_SKEW_SECS {
        Some(format!(
            "the assertion is not yet valid (nbf {nbf}, now {now})"
        ))
    } else if iat > now + CLOCK_SKEW_SECS {
        Some(format!(
            "the assertion was issued in the future (iat {iat}, now {now})"
        ))
    } else if exp - nbf > MAX_ASSERTION_LIFETIME_SECS {
        Some(format!(
            "the assertion lifetime exp - nbf = {} s exceeds {MAX_ASSERTION_LIFETIME_SECS} s",
            exp - nbf
        ))
    } else {
        None
    };
    if let Some(problem) = time_problem {
        return Err(invalid_client(
            700024,
            format!(
                "Client assertion is not within its valid time range. Current time: {now}, assertion valid from {nbf}, expiry time of assertion {exp}. ({problem})"
            ),
        ));
    }
    let jti = match claims.get("jti").and_then(Value::as_str) {
        Some(jti) if !jti.is_empty() => jti.to_owned(),
        _ => return Err(malformed("the 'jti' claim is required")),
    };
    if !inner.replay_check_disabled {
        let replay_key = (client_id.to_owned(), jti);
        if inner.seen_jti.contains(&replay_key) {
            return Err(invalid_client(
                50027,
                format!("JWT token replay: jti '{}' already used.", replay_key.1),
            ));
        }
        inner.seen_jti.insert(replay_key);
    }

    // Issue.
    let shape = inner.shape.clone();
    let issuer = super::jwt::issuer_url(ctx.base_url, ctx.tenant);
    let grant = super::jwt::Grant {
        issuer: &issuer,
        tenant: ctx.tenant,
        client_id,
        scope,
        now,
        expires_in: shape.expires_in,
    };
    let access_token = ctx.issuer.mint(&grant, inner.access_token_length);
    let mut body = Map::new();
    if let Some(token_type) = &shape.token_type {
        body.insert("token_type".to_owned(), json!(token_type));
    }
    body.insert(
        "expires_in".to_owned(),
        if shape.expires_in_as_string {
            json!(shape.expires_in.to_string())
        } else {
            json!(shape.expires_in)
        },
    );
    if let Some(ext) = shape.ext_expires_in {
        body.insert("ext_expires_in".to_owned(), json!(ext));
    }
    if let Some(refresh_in) = shape.refresh_in {
        body.insert("refresh_in".to_owned(), json!(refresh_in));
    }
    body.insert("access_token".to_owned(), json!(access_token));
    inner.issued.insert(
        access_token.clone(),
        IssuedToken {
            client_id: client_id.to_owned(),
            tenant: ctx.tenant.to_owned(),
            scope: scope.to_owned(),
            cert_sha256_hex,
            alg,
            expires_in: shape.expires_in,
            refresh_in: shape.refresh_in,
            issued_at: now_time,
        },
    );
    Ok(Success {
        access_token,
        body: Value::Object(body).to_string(),
    })
}

/// The answer to a discovery document's path: the document (GET or HEAD), Entra's `400`
/// for an unknown tenant, `405` for another method.
fn discovery_answer(
    state: &State,
    method: &str,
    document: &super::discovery::Document<'_>,
    correlation: &str,
) -> Answer {
    if method != "GET" && method != "HEAD" {
        let body = entra_error_body(
            "invalid_request",
            900561,
            &format!("The endpoint only accepts GET requests. Received a {method} request."),
            correlation,
        );
        return json_answer(405, body);
    }
    let tenant = document.tenant();
    let known = document.is_multi_tenant() || state.lock().tenants.contains_key(tenant);
    if !known {
        let body = entra_error_body(
            "invalid_tenant",
            90002,
            &format!(
                "Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud."
            ),
            correlation,
        );
        return json_answer(400, body);
    }
    let base_url = format!("{}://{}/", state.scheme, state.addr);
    let template = super::jwt::issuer_url(&base_url, "{tenantid}");
    let body = match document {
        super::discovery::Document::OpenIdConfiguration { .. } => {
            let issuer = if document.is_multi_tenant() {
                template
            } else {
                super::jwt::issuer_url(&base_url, tenant)
            };
            super::discovery::openid_configuration(&base_url, tenant, &issuer)
        }
        super::discovery::Document::Keys { .. } => state.issuer.jwks(&template),
    };
    json_answer(200, body.to_string())
}
