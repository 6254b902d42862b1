//! One token fetch, as the cache runs it: attempts until one succeeds or the retry policy
//! gives up, each in its span and counted; each checks the credential's validity, signs
//! a fresh assertion, POSTs it with the form and headers MSAL sends, and parses the
//! answer ([`endpoint::parse_response`]).

use std::sync::Arc;
use std::time::Instant;

use reqwest::{Url, header};
use time::OffsetDateTime;
use tracing::Instrument as _;

use crate::clock::Rfc3339;
use crate::error::{Error, Result, TransportError, cause_chain};
use crate::http::body::zeroizing_form;
use crate::http::{exchange, retry};
use crate::secret::SecretString;
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::cache::Fetch;
use crate::token::credential::Inner;
use crate::token::endpoint;
use crate::untrusted_text::service_text;

const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
const SKU: &str = env!("CARGO_PKG_NAME");
const VERSION: &str = env!("CARGO_PKG_VERSION");

impl Fetch for Inner {
    fn fetch(
        self: &Arc<Self>,
        tenant: Option<Arc<str>>,
        scope: Arc<str>,
    ) -> impl std::future::Future<Output = Result<AccessToken>> + Send + 'static {
        let this = self.clone();
        async move { this.fetch_with_retries(&scope, tenant.as_deref()).await }
    }
}

impl Inner {
    /// One token fetch in `tenant` (`None`: its own): requests until one succeeds or the
    /// retry policy gives up.
    pub(crate) async fn fetch_with_retries(
        &self,
        scope: &str,
        tenant: Option<&str>,
    ) -> Result<AccessToken> {
        let url = match tenant {
            Some(tenant) => &endpoint::token_url(&self.authority, tenant),
            None => &self.token_url,
        };
        let tenant = tenant.unwrap_or(self.tenants.own());
        let mut attempt = 0u32;
        retry::run(
            self.environment.retry_policy(),
            self.environment.clock().as_ref(),
            || {
                attempt += 1;
                self.observed_request(scope, tenant, url, attempt)
            },
            |attempt, delay, error| {
                tracing::info!(
                    client_id = %self.client_id,
                    scope = %service_text(scope),
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    error = %error,
                    "token request failed; retrying"
                );
            },
        )
        .await
    }

    /// One token request in its `token_request` span, counted by outcome with its
    /// duration; a token obtained updates the credential's gauges.
    async fn observed_request(
        &self,
        scope: &str,
        tenant: &str,
        token_url: &Url,
        attempt: u32,
    ) -> Result<AccessToken> {
        let span = tracing::info_span!(
            "token_request",
            client_id = %self.client_id,
            tenant,
            scope = %service_text(scope),
            attempt,
            outcome = tracing::field::Empty,
            error_code = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
            expires_on = tracing::field::Empty,
        );
        let (started, now) = (Instant::now(), self.environment.clock().now());
        let result = self.request_once(scope, token_url, now);
        let result = result.instrument(span.clone()).await;
        let elapsed = started.elapsed();
        let error = result.as_ref().err();
        telemetry::end_span(&span, error, elapsed);
        telemetry::token_request(&self.client_id, error, elapsed);
        if let Ok(token) = &result {
            let expires_on = token.expires_on();
            self.gauges.record();
            telemetry::token_expiry(&self.client_id, expires_on);
            span.record("expires_on", tracing::field::display(Rfc3339(expires_on)));
        }
        result
    }

    /// One token request at `now`: check validity, sign, POST the form MSAL sends, parse.
    async fn request_once(
        &self,
        scope: &str,
        token_url: &Url,
        now: OffsetDateTime,
    ) -> Result<AccessToken> {
        self.window.check(now)?;
        self.warn_if_expiring(now);
        let assertion = self.assertion(now, token_url)?;
        let id = uuid::Uuid::new_v4().to_string();
        let form = [
            ("grant_type", "client_credentials"),
            ("client_id", &self.client_id),
            ("scope", scope),
            ("client_assertion_type", JWT_BEARER),
            ("client_assertion", assertion.expose_secret()),
        ];
        let request = self
            .http
            .post(token_url.clone())
            .timeout(self.environment.request_timeout())
            .header("accept", "application/json")
            // Per request, so that a caller's own client sends it too.
            .header(header::USER_AGENT, self.environment.user_agent_header())
            .header("client-request-id", &id)
            .header("return-client-request-id", "true")
            .header("x-client-sku", SKU)
            .header("x-client-ver", VERSION)
            .header("x-ms-lib-capability", "retry-after, h429")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(zeroizing_form(&form));
        let transport = |e: reqwest::Error| -> Error {
            TransportError::from_reqwest("token", token_url.as_str(), cause_chain(&e), e).into()
        };
        let answer = exchange::send(request)
            .await
            .map_err(|a| {
                Error::abandoned(
                    "request_abandoned",
                    format!("the token request was abandoned: {}", a.0),
                )
            })?
            .map_err(transport)?;
        let retry_after = answer.headers.get(header::RETRY_AFTER);
        let retry_after = retry_after.and_then(|v| v.to_str().ok());
        let body = answer.body.as_deref();
        endpoint::parse_response(answer.status, retry_after, body, now, &id)
    }

    /// A client assertion for `token_url`, dated `now`, with a fresh `jti`.
    pub(crate) fn assertion(&self, now: OffsetDateTime, token_url: &Url) -> Result<SecretString> {
        let (url, jti) = (token_url.as_str(), uuid::Uuid::new_v4().to_string());
        let signed = self
            .signer
            .sign(&self.certificate, url, &self.client_id, now, &jti);
        signed.map(SecretString::from)
    }

    /// Log, once per credential, that it should have been renewed or ends soon.
    fn warn_if_expiring(&self, now: OffsetDateTime) {
        let (end, renew_after) = (self.window.end, self.times.renew_after);
        if let Some(reason) = self.expiry.once(now, renew_after, end) {
            tracing::warn!(
                client_id = %self.client_id,
                not_after = %Rfc3339(end),
                renew_after = ?renew_after.map(Rfc3339),
                thumbprint_sha256 = %self.certificate.thumbprint_sha256_hex(),
                "{reason}; the credential file should be rotated"
            );
        }
    }
}
