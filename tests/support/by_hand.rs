//! The token request done by hand, for the benches' baselines: the claims the crate signs
//! (src/token/assertion.rs) and the exact POST it sends (src/token/endpoint.rs), written out without
//! the crate so the benches can compare against them. Self-contained, so a bench can
//! include this file alone.

use std::time::Duration;

use serde::Serialize;

/// `client_assertion_type` for a JWT bearer assertion.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The assertion's claims, as the crate writes them.
#[derive(Serialize)]
pub struct Claims<'a> {
    pub aud: &'a str,
    pub iss: &'a str,
    pub sub: &'a str,
    pub jti: &'a str,
    pub nbf: i64,
    pub iat: i64,
    pub exp: i64,
}

impl<'a> Claims<'a> {
    /// Claims for `client_id` at `now` (Unix seconds), valid for 600 s.
    pub fn new(aud: &'a str, client_id: &'a str, jti: &'a str, now: i64) -> Self {
        Claims {
            aud,
            iss: client_id,
            sub: client_id,
            jti,
            nbf: now,
            iat: now,
            exp: now + 600,
        }
    }
}

/// The crate's token request: the same form and headers, one POST, the raw answer.
pub async fn post_token_request(
    client: &reqwest::Client,
    url: &str,
    client_id: &str,
    scope: &str,
    assertion: &str,
    client_request_id: &str,
) -> (reqwest::StatusCode, bytes::Bytes) {
    let form = [
        ("grant_type", "client_credentials"),
        ("client_id", client_id),
        ("scope", scope),
        ("client_assertion_type", JWT_BEARER),
        ("client_assertion", assertion),
    ];
    let response = client
        .post(url)
        .timeout(REQUEST_TIMEOUT)
        .header("accept", "application/json")
        .header("client-request-id", client_request_id)
        .header("return-client-request-id", "true")
        .header("x-client-sku", env!("CARGO_PKG_NAME"))
        .header("x-client-ver", env!("CARGO_PKG_VERSION"))
        .header("x-ms-lib-capability", "retry-after, h429")
        .form(&form)
        .send()
        .await
        .expect("token POST");
    let status = response.status();
    let body = response.bytes().await.expect("token answer body");
    (status, body)
}

/// The data plane client's GET, by hand: the same URL (identity URL query and
/// `api-version`), the same headers (`accept`, a fresh `x-ms-client-request-id`, the
/// bearer token), the whole body read.
pub async fn get_data_plane_by_hand(
    client: &reqwest::Client,
    url: &str,
    token: &str,
) -> (reqwest::StatusCode, bytes::Bytes) {
    let response = client
        .get(url)
        .timeout(REQUEST_TIMEOUT)
        .header("accept", "application/json")
        .header("x-ms-client-request-id", uuid::Uuid::new_v4().to_string())
        .bearer_auth(token)
        .send()
        .await
        .expect("data plane GET");
    let status = response.status();
    let body = response.bytes().await.expect("data plane answer body");
    (status, body)
}
