//! A token server for every Azure SDK in the pod: the App Service
//! managed identity protocol (api-version 2019-08-01) on loopback TCP, answered from
//! reloading credentials, so that a container whose code uses a stock Azure SDK gets the
//! CSI-mounted, rotating certificate identity with no code change.
//!
//! Every Azure SDK's managed identity credential (Go, Python, Java, .NET, JavaScript,
//! Rust `azure_identity`) asks `IDENTITY_ENDPOINT` for tokens, with the secret from
//! `IDENTITY_HEADER` in an `X-IDENTITY-HEADER` header, when both variables are set:
//!
//! ```text
//! GET /msi/token?api-version=2019-08-01&resource=https://management.azure.com/&client_id=…
//! X-IDENTITY-HEADER: <secret>
//!
//! 200 {"access_token": "…", "expires_on": "1767225600", "resource": "https://management.azure.com/",
//!      "token_type": "Bearer", "client_id": "…"}
//! ```
//!
//! - **Identities**: one or more [`ServedIdentity`], each a reloading credential; a
//!   request names one by `client_id`, `object_id` (or its alias `principal_id`) or
//!   `mi_res_id`; with none, the only one when there is one.
//! - **Tokens** come from the identity's cache, refreshed at least [`SERVED_TOKEN_REFRESH_WINDOW`]
//!   (15 minutes) ahead when loaded with [`ServedIdentity::load`], so a served token keeps
//!   comfortably more than the clients' 5-minute staleness margin. The token is requested
//!   for `<resource>/.default` (a resource that already ends with `/.default` as is).
//! - **Failures**: every error answer is JSON with `statusCode`, `message`,
//!   `correlationId`, `error` and `error_description`. 400: a bad query or an identity not
//!   served; 401: a missing or wrong secret; 403: the token endpoint refused (its
//!   `AADSTS` code is `error`, its message in `message`) or the credential is outside its
//!   validity; 429 (rate limit) and 503 (the token endpoint unreachable or failing, after
//!   retries), each with `Retry-After`: the only statuses the clients retry.
//! - **Safety**: loopback only ([`ServeError::NonLoopbackAddress`](msi_dataplane::ServeError)
//!   otherwise); the secret compared in constant time, the previous one accepted too
//!   during a rotation ([`IdentityHeaderSecret`]); a non-loopback `Host` or absolute-form
//!   target (421), proxy headers (`Forwarded`, `Via`, `X-Forwarded-*`, `X-Real-IP` and
//!   kin: 403), a method other than GET (405), a body (413), a target over 4 KiB (414)
//!   and oversized headers (431) refused with the JSON error. No token and no secret is
//!   ever logged, and values a client chose are escaped before they reach a log line.
//! - **Limits** (each a [`ServeOptions`] field): at most
//!   [`max_connections`](ServeOptions::max_connections) connections, the one idle longest
//!   closed for a new one when full; a first byte within
//!   [`first_byte_timeout`](ServeOptions::first_byte_timeout) and each head within
//!   [`idle_timeout`](ServeOptions::idle_timeout); refusals before the secret on a budget
//!   of their own (past it, each is held back a second and its connection closed); only cache misses take
//!   from [`max_token_requests_per_second`](ServeOptions::max_token_requests_per_second);
//!   resources limited per identity with [`ServedIdentity::with_allowed_resources`].
//! - **Health**: `GET /healthz`, never rate limited: 200 when every identity's
//!   credential is within its validity, else 503; the identities' details (client ids,
//!   thumbprints, times) only with the secret, the status alone without it.
//! - **Metrics**: [`MetricsServer`] serves a rendering of the process's metrics on
//!   `GET /metrics` on the same bounded listener, with limits of its own
//!   ([`MetricsServerOptions`]), for Prometheus to scrape from outside the pod.

mod answer;
mod identity;
mod limit;
mod listener;
mod metrics_server;
mod request;
mod secret;
mod server;

pub use answer::DEFAULT_RETRY_AFTER_SECS;
pub use identity::{SERVED_TOKEN_REFRESH_WINDOW, ServedIdentity};
pub use listener::{HEAD_LIMIT_BYTES, MAX_CONNECTIONS_LIMIT};
pub use metrics_server::{METRICS_CONTENT_TYPE, METRICS_PATH, MetricsServer, MetricsServerOptions};
pub use request::{
    APP_SERVICE_API_VERSION, IDENTITY_HEADER_NAME, MAX_HEADER_BYTES, MAX_HEADER_COUNT,
    MAX_TARGET_BYTES, MAX_VALUE_CHARS,
};
pub use secret::{IdentityHeaderSecret, MAX_SECRET_BYTES, MIN_SECRET_BYTES};
pub use server::{DEFAULT_PORT, DEFAULT_TOKEN_PATH, HEALTH_PATH, ServeOptions, TokenServer};
