//! Reading answers safely: a bounded body, the one message for a body over the limit,
//! `Retry-After`.

use std::time::Duration;

use time::OffsetDateTime;

/// Answer bodies (token endpoint, data plane, Key Vault) larger than this are refused.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// The one message for an answer over [`MAX_RESPONSE_BYTES`].
pub(crate) fn too_large_reason() -> String {
    format!("the body exceeds {MAX_RESPONSE_BYTES} bytes")
}

/// Read a response body of at most [`MAX_RESPONSE_BYTES`]; `None` when it is longer
/// (announced or seen), without reading past the limit.
pub(crate) async fn read_limited_body(
    response: &mut reqwest::Response,
) -> std::result::Result<Option<Vec<u8>>, reqwest::Error> {
    if let Some(len) = response.content_length()
        && len > MAX_RESPONSE_BYTES as u64
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), relative to `now`.
pub(crate) fn parse_retry_after(value: &str, now: OffsetDateTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let at = time::PrimitiveDateTime::parse(value, format)
        .ok()?
        .assume_utc();
    let delta = at - now;
    Some(if delta.is_positive() {
        Duration::try_from(delta).unwrap_or_default()
    } else {
        Duration::ZERO
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn retry_after_seconds_and_http_date() {
        let now = datetime!(2026-11-22 10:00:00 UTC);
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 10:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 09:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
