//! HTTP plumbing shared by the token, data plane and Key Vault layers: the crate's own
//! client ([`client`]; which client a request uses is the `Environment`'s choice), where
//! exchanges run ([`exchange`]), bounded answers and `Retry-After`
//! ([`body`]), which hosts are loopback ([`loopback`]), the rule for a configured
//! service URL ([`base_url`]), retries ([`retry`]), Azure's error bodies ([`azure_error_body`]), the links
//! a service hands back ([`service_link`]), the bundled roots ([`roots`]) and the
//! `User-Agent` every request carries ([`user_agent`]). Uses only
//! the basics (errors, bounded file reading, untrusted text).

pub(crate) mod azure_error_body;
pub(crate) mod base_url;
pub(crate) mod body;
pub(crate) mod client;
pub(crate) mod exchange;
pub(crate) mod loopback;
pub(crate) mod retry;
pub(crate) mod roots;
#[cfg(feature = "keyvault")]
pub(crate) mod service_link;
pub(crate) mod user_agent;

/// RFC 9110 `tchar`: the characters of a token (an auth scheme, a parameter name, an
/// application id in the `User-Agent`).
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
