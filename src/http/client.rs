//! The HTTP client the crate builds when the caller gives none: one per process (one
//! more for loopback authorities), with the system roots and no redirects.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// One HTTP client shared by every credential that was not given one (one more, without
/// proxies, for loopback authorities): building a client loads the system roots, which is
/// worth doing once per process.
pub(crate) fn default_http_client(direct: bool) -> Result<reqwest::Client> {
    static PROXIED: OnceLock<reqwest::Client> = OnceLock::new();
    static DIRECT: OnceLock<reqwest::Client> = OnceLock::new();
    let cell = if direct { &DIRECT } else { &PROXIED };
    if let Some(client) = cell.get() {
        return Ok(client.clone());
    }
    let client = build_http_client(Vec::new(), direct)?;
    Ok(cell.get_or_init(|| client).clone())
}

/// Both an HTTP client of the caller's and extra roots (which only the crate-built client
/// would use): refused rather than silently dropping the roots.
pub(crate) fn client_with_extra_roots() -> Error {
    let message = "options `http_client` and `extra_root_certificates` cannot both be set: extra \
                   roots apply only to the crate-built HTTP client; add them to your own client \
                   with `reqwest::ClientBuilder::add_root_certificate`";
    Error::config("conflicting_options", "http_client", message)
}

/// The HTTP client cannot be built (code `http_client`).
pub(crate) fn http_client_error(reason: impl std::fmt::Display) -> Error {
    let message = format!("cannot build the HTTP client: {reason}");
    Error::config("http_client", "http_client", message)
}

/// The crate's HTTP client: rustls with the system roots (plus `extra_roots`),
/// certificate validation on, no redirects (a token request is never re-sent elsewhere),
/// proxies from the environment unless `direct`.
///
/// It pools connections: an exchange runs on a multi-threaded caller's runtime or on the
/// crate's own I/O runtime ([`exchange`](crate::http::exchange)), so a pooled connection
/// never belongs to a runtime that stops being driven while it lives.
pub(crate) fn build_http_client(
    extra_roots: Vec<reqwest::Certificate>,
    direct: bool,
) -> Result<reqwest::Client> {
    let builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tls_certs_merge(extra_roots.into_iter().chain(crate::http::roots::bundled()));
    let builder = if direct { builder.no_proxy() } else { builder };
    builder.build().map_err(http_client_error)
}
