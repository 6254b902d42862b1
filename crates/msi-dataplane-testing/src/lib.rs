//! Azure without Azure, for the tests of components that use [`msi_dataplane`]: the
//! library's testing kit, a crate of its own that a component adds as a
//! dev-dependency (the README says how, with a first test). This is the long form. The
//! kit is built on the library's public API only.
//!
//! ## What it gives
//!
//! - **Credentials made at run time** ([`TestCertificate`], [`TestCa`],
//!   [`TestIdentity::credentials`]): a fresh RSA key and certificate with chosen validity,
//!   as a credential file (PEM or PKCS#12 bundle). Uses rcgen on AWS-LC and p12-keystore;
//!   no `openssl` CLI.
//! - **The Entra-compatible token server** ([`EntraServer`]): HTTPS on loopback with its
//!   own test CA made at run time ([`EntraServer::client`] trusts it), verifying every
//!   client assertion as Entra ID does (signature, thumbprints, `x5c`, `aud`, `iss`/`sub`,
//!   times, `jti` replay) independently of this crate (the `rsa` crate checks signatures),
//!   scripting failures and recording which certificate signed each request. Its access
//!   tokens are signed JWTs (see [Access tokens](#access-tokens)).
//! - **The MSI data plane test server** ([`DataPlaneServer`]): the 401 challenge, bearer
//!   tokens from the [`EntraServer`] checked for audience and tenant, `api-version` and
//!   the identity URL's query checked, the four operations; identities made at run time
//!   (registered with the Entra server) and rotated on demand ([`DataPlaneServer::rotate`]);
//!   what it issued is logged ([`DataPlaneServer::issued`]); scripted errors.
//! - **The Key Vault (secrets) test server** ([`KeyVaultServer`]): the routes a credential
//!   store uses, with versions, soft delete, purge, recover, paging by `nextLink`, the
//!   challenge and token checks, and what it stores inspectable
//!   ([`KeyVaultServer::secrets`], [`KeyVaultServer::deleted_secrets`],
//!   [`KeyVaultServer::secret_value`]).
//! - **A protected resource** ([`ResourceServer`]): the API your component calls with its
//!   token (ARM or your own service), validating it as an Azure resource does (signature
//!   by the [`EntraServer`]'s keys, issuer, audience, tenant, lifetime) and answering a
//!   refusal with Azure's 401 saying what was wrong; it logs each token's claims or
//!   [`TokenRejection`] and which certificate signed it ([`ResourceServer::requests`]).
//!   The Entra server's signing keys roll over ([`EntraServer::rotate_signing_key`]) and
//!   retire ([`EntraServer::retire_signing_key`]: its tokens then name an unknown key).
//! - **Scripted answers and expectations** on the Entra, data plane and Key Vault
//!   servers, as wiremock's mocks ([`EntraServer::on`], [`DataPlaneServer::on`],
//!   [`KeyVaultServer::on`]): a [`Match`] by client id, tenant, scope, path or method; an
//!   answer ([`Scripted`]: a status, an AADSTS error, `Retry-After`, a delay, a closed
//!   connection) given once, n times or until cleared; and an expected number of matching
//!   requests, checked when the server's last handle or a [`ScriptGuard`] is dropped or
//!   at `verify()` (`try_verify()` returns an [`ExpectationFailure`] instead of
//!   panicking). A background refresh or another identity takes no answer that was meant
//!   for someone else. See [Scripts and expectations](#scripts-and-expectations).
//! - **One-call setup** ([`IdentityFixture`]): Entra, an identity it trusts, the file
//!   mounted as the CSI driver mounts it and the reloading credential on it, on a clock
//!   of your choice ([`IdentityFixture::start_with_clock`]); its `environment()` for
//!   every builder, `rotate_to` for a renewal.
//! - **Waiting with a deadline** ([`wait_for_certificate`], [`wait_for_status`],
//!   [`EntraServer::wait_for_refreshed_token`], [`EntraServer::wait_for_token_requests`]):
//!   until a rotation is active, a background refresh is taken up, or a request arrived,
//!   panicking with what was seen and why it was not enough instead of hanging.
//! - **A CSI mount writer** ([`CsiMount`]): publishes and rotates a credential file as
//!   kubelet's AtomicWriter does (`..data` swap), and the plain write styles (in place,
//!   write-then-rename, delete-then-recreate; [`TempDir`] removes itself). Unix only.
//!
//! ## Servers and runtimes
//!
//! Servers bind 127.0.0.1 only (one shared accept loop), stop when their last handle is
//! dropped, and log nothing (no secret can leak through them). They all run on the kit's
//! own runtime (two threads, `msi-dataplane-test-server`), never on the test's: a server
//! serves clients on any runtime and keeps serving after the runtime that started it ends.
//! `start().await` and `start_blocking()` (for code without a runtime, such as a `static`
//! shared by many `#[tokio::test]`s: see [`EntraServer::start_blocking`]) start the same
//! server; their request logs' `Debug`
//! hides tokens and secret values. Each recorded request keeps its `User-Agent`
//! (`user_agent`: at most 512 characters, control characters escaped), to check what a
//! client identifies itself as. Misuse panics with a message naming what failed: it
//! is test code.
//!
//! ## Versions to match
//!
//! Types of other crates in the kit's signatures, and the versions to match in your
//! `[dev-dependencies]` (the library's own API uses the same):
//!
//! | crate | version | where |
//! |---|---|---|
//! | `reqwest` | 0.13 | [`EntraServer::client`] (a client trusting the kit's CA), `Environment::with_http_client` |
//! | `time` | 0.3 | validity and times: [`TestCertificateBuilder::validity`], [`RecordedRequest::received_at`], `ManualClock` |
//! | `rustls` | 0.23 | [`server_tls_config`] |
//! | `serde_json` | 1 | [`DataPlaneServer::set_system_assigned`], [`EntraServer::set_extra_claims`], [`TokenClaims::extra`] and other JSON given as is |
//! | `tokio` | 1 | the servers' `start` (any runtime; see above) and the waiting helpers |
//! | `azure_core` | 1 | (the library's feature `azure_core`) the credentials' `TokenCredential` |
//!
//! ## The pieces by hand
//!
//! What [`IdentityFixture`] does in one call: a credential file for an identity the
//! server trusts, and the library's credential on it, trusting the kit's CA:
//!
//! ```no_run
//! # async fn demo() {
//! use msi_dataplane_testing::{EntraServer, TestCertificate, TestIdentity};
//! use msi_dataplane::{
//!     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
//! };
//!
//! let server = EntraServer::start().await;
//! let identity = TestIdentity::new();
//! let cert = TestCertificate::self_signed();
//! server.register(&identity, &cert);
//! let creds = identity.credentials(&cert, &server.base_url(), BundleFormat::Pem);
//! let http = Environment::default().with_http_client(server.client());
//! let options = ClientCertificateCredentialOptions::default().with_environment(http);
//! let credential = ClientCertificateCredential::new(&creds, options).unwrap();
//! let token = credential.get_token(&["https://management.azure.com/.default"]).await.unwrap();
//! assert_eq!(server.issued(token.token()).unwrap().cert_sha256_hex, cert.sha256_hex());
//! # }
//! ```
//!
//! ## Scripts and expectations
//!
//! This identity's vault tokens fail once with AADSTS7000215, and the test checks that
//! the component asked exactly twice (the failure, then its retry):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use msi_dataplane_testing::{IdentityFixture, Match, Scripted};
//!
//! let fx = IdentityFixture::start().await;
//! let vault = "https://vault.azure.net/.default";
//! let script = fx
//!     .entra
//!     .on(Match::any().client_id(&fx.identity.client_id).scope(vault))
//!     .respond(Scripted::aadsts(401, "invalid_client", 7000215, "Invalid client secret provided."))
//!     .expect(2)
//!     .mount_scoped();
//! assert!(fx.credential.get_token(&[vault]).await.is_err()); // not retried: a 401
//! fx.credential.get_token(&[vault]).await.unwrap(); // the component's own retry
//! drop(script); // panics here, listing the requests, unless exactly 2 arrived
//! # }
//! ```
//!
//! A failed expectation is an [`ExpectationFailure`]: the scripts and their counts, and
//! the requests received since the first of them was mounted, each marked with the
//! scripts it matched and saying what it got (a scripted answer, from which script, or
//! the server's own). The Entra server's request log keeps each answer's `AADSTS` code,
//! scripted or not ([`RecordedRequest::aadsts_code`]). When the test is already
//! failing (its thread panicking), a guard or server finding an unmet expectation writes
//! it to stderr rather than panicking again (which would abort the test and lose its
//! own message). A test returning `Result` ends with [`ScriptGuard::finish`]`()?` or
//! `try_verify()?` to keep its own `Err`. Expectations on a server kept in a `static`
//! are checked only by `verify()`, `try_verify()` or a guard: see
//! [`EntraServer::start_blocking`].
//!
//! ## Access tokens
//!
//! The [`EntraServer`]'s access tokens are RS256 JWTs signed by a key the server makes on
//! first use (one per server; [`EntraServer::rotate_signing_key`] rolls it over), with the
//! claims Entra puts in an app-only token from the client-credentials grant: `aud`, `iss`
//! (`{base_url}{tenant}/v2.0`, [`EntraServer::issuer`]), `tid`, `oid` and `sub` (the
//! [`TestIdentity::object_id`], or a stable UUID per tenant and client id), `appid` and
//! `azp` (the client id), `appidacr`/`azpacr` (`2`: a certificate), `idtyp` (`app`), `ver`
//! (`2.0`), `iat` = `nbf` (now, by the server's clock) and `exp` (`iat` + `expires_in`),
//! `uti`, `aio`, `idp`; extra claims such as `roles` per test
//! ([`EntraServer::set_extra_claims`], [`EntraServer::set_extra_claims_for`]). The server
//! publishes its keys as Entra does: `GET {base}{tenant}/v2.0/.well-known/openid-configuration`
//! ([`EntraServer::openid_configuration_url`]) names the issuer and the `jwks_uri`
//! ([`EntraServer::jwks_url`], [`EntraServer::jwks`]), so any JWT library can verify a
//! token on its own; [`EntraServer::validate`] and [`EntraServer::claims`] give the
//! [`TokenClaims`] or a typed [`TokenRejection`]. A validator given one key rather than
//! the JWKS takes [`EntraServer::signing_public_key_pem`] (`BEGIN PUBLIC KEY`) or
//! [`EntraServer::signing_certificate_pem`].
//!
//! `aud` is the scope without `/.default` (`https://management.azure.com` for
//! `https://management.azure.com/.default`; the first scope when several are asked), as
//! Entra sets it for Azure's own resources (ARM, Key Vault, Graph). Those resources take
//! v1.0 tokens from Entra (`iss` `https://sts.windows.net/{tenant}/`, `ver` `1.0`); the
//! kit issues every token in the v2.0 form, whose issuer its OpenID configuration names,
//! so that one discovery document verifies all of them. An application of your own whose
//! tokens are v2.0 gets its client id as `aud` from Entra: have the resource accept it with
//! [`ResourceServer::accept_audience`].
//!
//! ### Rotating the signing key and the certificate
//!
//! To rotate both Entra's token-signing key and the client certificate without a failed
//! call, in this order:
//!
//! 1. [`EntraServer::rotate_signing_key`]: the new key signs new tokens; the old one stays
//!    published, so the tokens it signed, which the credential still hands out from its
//!    cache, stay valid;
//! 2. the certificate ([`IdentityFixture::rotate_to`], or [`CsiMount::rotate_credentials`]
//!    and [`wait_for_certificate`]): the swapped-in credential's tokens are new ones,
//!    signed by the new key;
//! 3. [`EntraServer::retire_signing_key`] with the old `kid`.
//!
//! A key retired earlier refuses the cached tokens it signed that are still in use: the
//! resource answers 401 naming the unknown key. A client that caches tokens of its own
//! (azure_core's bearer policy keeps its token until close to expiry) may present an old
//! token after step 2: retire the key once such tokens have expired (move a
//! [`ManualClock`](msi_dataplane::ManualClock) past them). `testing_kit_jwt.rs` in the
//! kit's tests shows both orders.
//!
//! A component tested against the kit's resource passes only with a token for the right
//! audience, and learns why otherwise:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use msi_dataplane_testing::{EntraServer, ResourceServer, TestCertificate, TestIdentity};
//! use msi_dataplane::{
//!     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
//! };
//!
//! let entra = EntraServer::start().await;
//! let arm = ResourceServer::start(&entra, ResourceServer::ARM_SCOPE).await;
//! let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
//! entra.register(&identity, &cert);
//! let creds = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
//! let http = Environment::default().with_http_client(entra.client());
//! let options = ClientCertificateCredentialOptions::default().with_environment(http);
//! let credential = ClientCertificateCredential::new(&creds, options).unwrap();
//!
//! // The token is a JWT with an app-only token's claims.
//! let token = credential.get_token(&[ResourceServer::ARM_SCOPE]).await.unwrap();
//! let claims = entra.validate(token.token(), "https://management.azure.com").unwrap();
//! assert_eq!(claims.iss, entra.issuer(&identity.tenant_id));
//! assert_eq!(claims.tid, identity.tenant_id);
//! assert_eq!(claims.appid.as_deref(), Some(identity.client_id.as_str()));
//! assert_eq!(claims.oid.as_deref(), Some(identity.object_id.as_str()));
//! assert_eq!(claims.idtyp.as_deref(), Some("app"));
//!
//! // A token for Key Vault is refused by the ARM stand-in, which says why.
//! let wrong = credential.get_token(&["https://vault.azure.net/.default"]).await.unwrap();
//! let url = format!("{}subscriptions", arm.url());
//! let answer = entra.client().get(&url).bearer_auth(wrong.token()).send().await.unwrap();
//! assert_eq!(answer.status(), 401);
//! let challenge = answer.headers()["www-authenticate"].to_str().unwrap().to_owned();
//! assert!(challenge.contains(r#"error="invalid_token""#), "{challenge}");
//! let body = answer.text().await.unwrap();
//! assert!(body.contains("InvalidAuthenticationTokenAudience"), "{body}");
//! assert!(body.contains("The audience 'https://vault.azure.net' is invalid"), "{body}");
//! # }
//! ```
//!
//! ## Time
//!
//! Time moved by the test, with no wait: a
//! [`ManualClock`](msi_dataplane::ManualClock) (`ManualClock::starting_now()`: the kit's
//! certificates are valid from an hour ago) shared by the server
//! ([`EntraServer::use_clock`]) and the credential (its options' `clock`), or given to
//! [`IdentityFixture::start_with_clock`], which wires both. When the credential will
//! refresh a token is [`IssuedToken::refresh_between`];
//! [`EntraServer::wait_for_refreshed_token`] waits until the refreshed token is handed out. By hand, two hours on, the expired
//! token is replaced by a new request the server accepts:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::Arc;
//! use msi_dataplane_testing::{EntraServer, TestCertificate, TestIdentity};
//! use msi_dataplane::{
//!     BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
//!     ManualClock,
//! };
//!
//! let clock = Arc::new(ManualClock::starting_now());
//! let entra = EntraServer::start().await;
//! entra.use_clock(clock.clone());
//! let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
//! entra.register(&identity, &cert);
//! let file = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
//! let options = ClientCertificateCredentialOptions::default().with_environment(
//!     Environment::default()
//!         .with_http_client(entra.client())
//!         .with_clock(clock.clone()),
//! );
//! let credential = ClientCertificateCredential::new(&file, options).unwrap();
//! let first = credential.get_token(&["https://management.azure.com/.default"]).await.unwrap();
//! clock.advance(std::time::Duration::from_secs(2 * 3600));
//! let later = credential.get_token(&["https://management.azure.com/.default"]).await.unwrap();
//! assert_ne!(first.token(), later.token());
//! assert_eq!(entra.token_requests(), 2);
//! # }
//! ```
//!
//! ## Renewals and a shared server
//!
//! One identity in one call, its renewal, and a wait with a deadline ([`IdentityFixture`],
//! [`wait_for_certificate`]); and a server in a `static` that outlives each test's runtime
//! ([`EntraServer::start_blocking`]):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::LazyLock;
//! use std::time::Duration;
//! use msi_dataplane::BundleFormat;
//! use msi_dataplane_testing::{EntraServer, IdentityFixture, TestCertificate, wait_for_certificate};
//!
//! static SHARED: LazyLock<EntraServer> = LazyLock::new(EntraServer::start_blocking);
//! assert!(SHARED.base_url().starts_with("https://127.0.0.1:"));
//!
//! let mut fx = IdentityFixture::start().await;
//! let next = TestCertificate::builder().renewing(&fx.certificate).self_signed();
//! let status = fx.rotate_to(next.clone(), BundleFormat::Pkcs12).await; // waits for the swap
//! assert_eq!(status.thumbprint_sha256, next.sha256_hex());
//! wait_for_certificate(&fx.credential, &next, Duration::from_secs(5)).await;
//! # }
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The README's example compiles (it is not run: it is a `#[tokio::test]`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod answer;
mod credentials;
#[cfg(unix)]
mod csi;
mod dataplane;
mod discovery;
mod entra;
#[cfg(unix)]
mod fixture;
mod jwt;
mod keyvault;
mod resource;
mod script;
mod serve;
mod tls;
mod wait;

pub use answer::Scripted;
pub use credentials::{
    DEFAULT_VALIDITY, TestCa, TestCertificate, TestCertificateBuilder, TestIdentity,
    credentials_json, write_credentials_file,
};
#[cfg(unix)]
pub use csi::{
    CsiMount, InPlaceWrite, TempDir, delete_then_recreate, write_in_place, write_temp_then_rename,
};
pub use dataplane::{DataPlaneRequest, DataPlaneServer, IssuedIdentity};
pub use entra::{
    CLOCK_SKEW_SECS, EntraServer, IssuedToken, JWT_BEARER, MAX_ASSERTION_LIFETIME_SECS, Outcome,
    RecordedRequest, TokenShape,
};
#[cfg(unix)]
pub use fixture::IdentityFixture;
pub use jwt::{TOKEN_CLOCK_SKEW_SECS, TokenClaims, TokenRejection};
pub use keyvault::{
    KeyVaultRequest, KeyVaultServer, VaultDeletedSecret, VaultSecret, VaultSecretVersion,
};
pub use resource::{ResourceRequest, ResourceServer};
pub use script::{
    ExpectationFailure, Expected, Match, ReceivedRequest, ScriptBuilder, ScriptGuard,
    UnmetExpectation,
};
pub use tls::server_tls_config;
pub use wait::{Credential, wait_for_certificate, wait_for_status};

/// The library this kit is built on, for msi-dataplane's own unit tests: they link a
/// second copy of it, and name this one's types (`BundleFormat`, the credential file) to
/// call the kit.
#[doc(hidden)]
pub use msi_dataplane;
