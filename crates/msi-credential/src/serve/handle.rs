//! How the token server answers one request, in the order that keeps a caller without the
//! secret from costing the others anything: the head's checks and the secret first (every
//! answer to a caller without the secret, refusals and the bare health status alike, takes
//! from one budget, past which each is held back and its connection closed), then the
//! cache, and only a new token request takes from the token requests' budget (joining one
//! already in flight for the same resource takes none).
//!
//! Lines a flood could repeat (refusals, failed token requests) go through a log budget:
//! a few per interval, and a count of the rest ([`State::summarise_logs`]).

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};

use crate::serve::answer::{self, Refusal};
use crate::serve::identity::Identities;
use crate::serve::limit::{RATE_LIMITED_RETRY_AFTER, RateLimiter, budgeted};
use crate::serve::listener::Trusted;
use crate::serve::probe::{
    PROBE_ANSWER_HEADER, PROBE_NONCE_HEADER, PROBE_PROOF_HEADER, ProbeNonces, answer_proof,
};
use crate::serve::request::{self, HEALTH_PATH, IDENTITY_HEADER_NAME, Route};
use crate::serve::secret::IdentityHeaderSecret;
use crate::telemetry;
use msi_dataplane::unstable::LogBudget;
use msi_dataplane::{Clock, ErrorKind};

/// What every request reads.
pub(crate) struct State {
    pub(crate) identities: Identities,
    pub(crate) secret: ArcSwap<IdentityHeaderSecret>,
    /// The nonces of the probe's proofs accepted lately (a replay is refused).
    pub(crate) probe_nonces: ProbeNonces,
    pub(crate) token_path: String,
    /// Token requests that reach the token endpoint (new requests, not joined ones).
    pub(crate) token_requests: Option<RateLimiter>,
    /// Answers to callers without the secret: past it, each is held back and its
    /// connection closed after it.
    pub(crate) refusals: RateLimiter,
    pub(crate) clock: Arc<dyn Clock>,
    /// The log lines of refusals and of failed token requests.
    pub(crate) refusal_log: LogBudget,
    pub(crate) failure_log: LogBudget,
    /// The origin of the log budgets' clock.
    pub(crate) epoch: Instant,
}

impl State {
    /// Milliseconds since the server started: the log budgets' clock.
    fn log_now(&self) -> i64 {
        i64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Write the count of the lines the log budgets left out in intervals that have
    /// ended (called every interval).
    pub(crate) fn summarise_logs(&self) {
        let now = self.log_now();
        if let Some(left_out) = self.refusal_log.take_left_out(now) {
            tracing::debug!(
                left_out,
                "token server refused more requests than it logs (a few every 10 s)"
            );
        }
        if let Some(left_out) = self.failure_log.take_left_out(now) {
            tracing::debug!(
                left_out,
                "token server could not get more tokens than it logs (a few every 10 s)"
            );
        }
    }

    fn log_refusal(&self, refusal: &Refusal) {
        if let Some(left_out) = self.refusal_log.admit(self.log_now()) {
            tracing::debug!(
                status = refusal.status,
                error = %refusal.error,
                left_out,
                "token server refused a request (left_out: refusals not logged since the last line)"
            );
        }
    }
}

/// Answer one request, counted by status (the `metrics` feature).
pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let response = answer_request(state, req).await;
    telemetry::served(response.status().as_u16());
    response
}

async fn answer_request(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, _body) = req.into_parts();
    let headers = &parts.headers;
    let request_id = headers
        .get("x-ms-client-request-id")
        .map(HeaderValue::as_bytes);
    let correlation = || answer::correlation_id(request_id, || uuid::Uuid::new_v4().to_string());
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = parts
        .uri
        .authority()
        .map(|a| (parts.uri.scheme_str().unwrap_or(""), a.as_str()));
    let route = request::route(
        parts.method.as_str(),
        target,
        authority,
        parts.uri.path(),
        headers,
        &state.token_path,
        HEALTH_PATH,
    );
    let route = match route {
        Ok(route) => route,
        Err(refusal) => {
            state.log_refusal(&refusal);
            return budgeted(&state.refusals, refused(&refusal, &correlation()));
        }
    };
    // The secret before anything about the identities is answered.
    let presented = headers.get(IDENTITY_HEADER_NAME).map(HeaderValue::as_bytes);
    let secret_ok = presented.is_some_and(|p| state.secret.load().matches(p));
    if route == Route::Health {
        let now = state.clock.now();
        // The probe proves the secret without sending it, and is answered with a proof.
        let nonce = headers.get(PROBE_NONCE_HEADER).map(HeaderValue::as_bytes);
        let proof = headers.get(PROBE_PROOF_HEADER).map(HeaderValue::as_bytes);
        let proven = nonce.zip(proof).and_then(|(nonce, proof)| {
            let key = state.probe_nonces.check(
                &state.secret.load(),
                nonce,
                proof,
                now.unix_timestamp(),
            )?;
            Some((key, nonce))
        });
        let report: Vec<_> = state
            .identities
            .all()
            .iter()
            .map(|i| i.health(now))
            .collect();
        let (status, body) = answer::health(&report, secret_ok || proven.is_some());
        let answer = proven.map(|(key, nonce)| answer_proof(&key, nonce, status, &body));
        let mut response = json(status, body);
        if let Some(answer) = answer.and_then(|a| HeaderValue::from_str(&a).ok()) {
            response.headers_mut().insert(PROBE_ANSWER_HEADER, answer);
            return trusted(response);
        }
        // A caller with the secret is never limited; the bare status for a caller without
        // it has the refusals' budget.
        return match secret_ok {
            true => trusted(response),
            false => budgeted(&state.refusals, response),
        };
    }
    if !secret_ok {
        let message = match presented {
            None => "the X-IDENTITY-HEADER header is missing",
            Some(_) => "the X-IDENTITY-HEADER header does not match the secret",
        };
        let refusal = Refusal::new(401, "unauthorized", message.to_owned());
        state.log_refusal(&refusal);
        return budgeted(&state.refusals, refused(&refusal, &correlation()));
    }
    let response = answer_token(state, parts.uri.query().unwrap_or(""), &correlation).await;
    trusted(response)
}

/// An answer to a client with the secret: its connection is closed for a new one only
/// after every connection without it.
fn trusted(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    response.extensions_mut().insert(Trusted);
    response
}

/// The answer to a token request whose secret was accepted.
async fn answer_token(
    state: &State,
    query: &str,
    correlation: &impl Fn() -> String,
) -> Response<Full<Bytes>> {
    let query = match request::token_query(query) {
        Ok(query) => query,
        Err(refusal) => return refused(&refusal, &correlation()),
    };
    let identity = match state.identities.select(query.selector.as_ref()) {
        Ok(identity) => identity,
        Err(refusal) => return refused(&refusal, &correlation()),
    };
    if let Err(refusal) = identity.check_resource(&query.resource) {
        return refused(&refusal, &correlation());
    }
    let scope = request::scope_for(&query.resource);
    let scopes = [scope.as_str()];
    // Only a new request to the token endpoint takes from its budget: a cached token and
    // a request already in flight for the same resource cost none.
    let admit = || {
        state
            .token_requests
            .as_ref()
            .is_none_or(|limiter| limiter.admit(Instant::now()))
    };
    let token = identity
        .credential()
        .get_token_admitted(&scopes, admit)
        .await;
    match token {
        Ok(Some(token)) => {
            let body = answer::token_body(
                token.token(),
                token.expires_on().unix_timestamp(),
                &query.resource,
                identity.client_id(),
            );
            let mut response = json(200, body);
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Ok(None) => {
            let refusal = Refusal::new(
                429,
                "too_many_requests",
                "the token server's rate limit for token requests to the token endpoint is \
                 reached"
                    .to_owned(),
            )
            .retry_after(RATE_LIMITED_RETRY_AFTER.as_secs());
            refused(&refusal, &correlation())
        }
        Err(error) => {
            let refusal = match error.kind() {
                ErrorKind::Config {
                    code: "invalid_scopes",
                    ..
                } => Refusal::new(
                    400,
                    "invalid_resource",
                    format!("the resource cannot be asked for: {error}"),
                ),
                _ => answer::token_failure(
                    &error,
                    identity.client_id(),
                    &query.resource,
                    state.clock.now(),
                ),
            };
            // The credential warns of each failed request to the token endpoint (within
            // its own log budget); this line says what the client was answered.
            if let Some(left_out) = state.failure_log.admit(state.log_now()) {
                tracing::debug!(
                    client_id = %identity.client_id(),
                    status = refusal.status,
                    error = %error,
                    left_out,
                    "token server could not get a token (left_out: such lines not logged since the last)"
                );
            }
            refused(&refusal, &correlation())
        }
    }
}

fn refused(refusal: &Refusal, correlation_id: &str) -> Response<Full<Bytes>> {
    let mut response = json(refusal.status, answer::error_body(refusal, correlation_id));
    let headers = response.headers_mut();
    if refusal.allow_get {
        headers.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    if let Some(secs) = refusal.retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

fn json(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}
