//! The token endpoint: its URL, and its answers parsed into a token or a typed error.
//! Pure functions; the request is [`super::request`]'s.

use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::error::{Error, ErrorKind, Result, TokenEndpointError};
use crate::http::base_url::base_url;
use crate::http::body::{parse_retry_after, too_large_reason};
use crate::token::access_token::AccessToken;
use crate::untrusted_text::redact_quoted;
use crate::untrusted_text::service_text_opt;

/// The authority (the Entra host, any path it has kept), checked by the rule for a
/// service's base URL ([`base_url`]): `https`, or `http` for a loopback host when
/// `allow_http_loopback` is set; no query, fragment or user information.
pub(crate) fn authority(text: &str, allow_http_loopback: bool) -> Result<Url> {
    base_url(text, allow_http_loopback, false).map_err(|reason| {
        let message = format!("authority `{text}` is not usable: {reason}");
        Error::config("invalid_authority", "authority", message)
    })
}

/// The token URL for an authority and tenant:
/// `{authority without trailing '/'}/{tenant}/oauth2/v2.0/token`
/// (`https://host/prefix/` gives `https://host/prefix/{tenant}/oauth2/v2.0/token`).
pub(crate) fn token_url(authority: &Url, tenant: &str) -> Url {
    let path = authority.path().trim_end_matches('/');
    let mut url = authority.clone();
    url.set_path(&format!("{path}/{tenant}/oauth2/v2.0/token"));
    url
}

/// A number that some servers send as a string (`"expires_in": "3599"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Number(i64),
    Text(String),
}

impl Seconds {
    fn get(&self, field: &str) -> std::result::Result<i64, String> {
        match self {
            Seconds::Number(n) => Ok(*n),
            Seconds::Text(s) => s
                .trim()
                .parse()
                .map_err(|_| format!("`{field}` is not a whole number of seconds")),
        }
    }
}

#[derive(Deserialize)]
struct SuccessBody {
    access_token: String,
    expires_in: Seconds,
    refresh_in: Option<Seconds>,
    // `token_type` and `ext_expires_in` are optional and unused; unknown keys are ignored.
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    error: Option<String>,
    error_description: Option<String>,
    error_codes: Option<Vec<i64>>,
    trace_id: Option<String>,
    correlation_id: Option<String>,
    timestamp: Option<String>,
}

/// Turn an answer (`body`: `None` when over the limit) into a token or a typed error.
/// `requested_at` is when the request was sent: expiry is counted from then, so it is
/// never later than the server meant.
pub(crate) fn parse_response(
    status: u16,
    retry_after: Option<&str>,
    body: Option<&[u8]>,
    requested_at: OffsetDateTime,
    client_request_id: &str,
) -> Result<AccessToken> {
    let Some(body) = body else {
        return Err(invalid_response(status, too_large_reason()));
    };
    if (200..300).contains(&status) {
        return parse_success(status, body, requested_at);
    }
    let retry_after = retry_after.and_then(|v| parse_retry_after(v, requested_at));
    let error = parse_error(status, body, retry_after, client_request_id);
    Err(ErrorKind::TokenEndpoint(Box::new(error)).into())
}

fn invalid_response(status: u16, reason: String) -> Error {
    let message =
        format!("the token endpoint answered HTTP {status} with an unusable body: {reason}");
    Error::answer("invalid_token_response", message)
}

fn parse_success(status: u16, body: &[u8], requested_at: OffsetDateTime) -> Result<AccessToken> {
    let invalid = |reason| invalid_response(status, reason);
    let parsed: SuccessBody = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "not a token response ({})",
            redact_quoted(&e.to_string())
        ))
    })?;
    if parsed.access_token.is_empty() {
        return Err(invalid("`access_token` is empty".into()));
    }
    let expires_in = parsed.expires_in.get("expires_in").map_err(invalid)?;
    if expires_in <= 0 {
        return Err(invalid(format!("`expires_in` is {expires_in}")));
    }
    // Found by fuzzing: an absurd `expires_in` overflowed the date arithmetic.
    let expires_on = requested_at
        .checked_add(time::Duration::seconds(expires_in))
        .ok_or_else(|| invalid(format!("`expires_in` ({expires_in} s) is out of range")))?;
    let refresh_in = parsed.refresh_in.map(|r| r.get("refresh_in"));
    let refresh_in = refresh_in.transpose().map_err(invalid)?;
    let refresh_on = refresh_in
        .filter(|secs| (1..expires_in).contains(secs))
        .and_then(|secs| requested_at.checked_add(time::Duration::seconds(secs)));
    Ok(AccessToken::new(parsed.access_token, expires_on).with_refresh_on(refresh_on))
}

/// The most AADSTS codes kept from one error answer (Entra sends one).
const MAX_ERROR_CODES: usize = 8;

/// Parse an error body. Every field is optional; a body that is not JSON at all (an HTML
/// page from a proxy) still yields the status.
fn parse_error(
    status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
    client_request_id: &str,
) -> TokenEndpointError {
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    // Bounded and escaped here, so no error or log line ever holds the raw text.
    let mut error_codes = parsed.error_codes.unwrap_or_default();
    error_codes.truncate(MAX_ERROR_CODES);
    let mut answer = TokenEndpointError {
        status,
        error: service_text_opt(parsed.error),
        error_description: None,
        error_codes,
        trace_id: service_text_opt(parsed.trace_id),
        correlation_id: service_text_opt(parsed.correlation_id),
        timestamp: service_text_opt(parsed.timestamp),
        retry_after,
        client_request_id: Some(client_request_id.to_owned()),
    };
    answer.error_description = parsed
        .error_description
        .map(|raw| answer.description_line(&raw));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn success_without_optional_fields() {
        let at = datetime!(2026-01-01 00:00 UTC);
        let t = parse_success(200, br#"{"access_token":"abc","expires_in":3599}"#, at).unwrap();
        assert_eq!(t.token(), "abc");
        assert_eq!(t.expires_on(), at + time::Duration::seconds(3599));
        assert_eq!(t.refresh_on(), None);
    }

    #[test]
    fn absurd_expires_in_is_an_error_not_a_panic() {
        // The fuzzer's finding (fuzz/artifacts/token_response, minimized).
        let at = datetime!(2026-01-01 00:00 UTC);
        let body =
            br#"{"t) en_Tye":"Bearer","expires_in":"00000001024819115206","access_token":"ec"}"#;
        let err = parse_success(200, body, at).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let body = br#"{"access_token":"ec","expires_in":9223372036854775807,"refresh_in":9223372036854775806}"#;
        assert!(parse_success(200, body, at).is_err());
        let body = br#"{"access_token":"ec","expires_in":3600,"refresh_in":"-5"}"#;
        assert_eq!(parse_success(200, body, at).unwrap().refresh_on(), None);
    }
}
