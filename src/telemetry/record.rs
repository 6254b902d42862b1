//! Recording: one function per event, called by the layers where the event happens. With
//! the `metrics` feature off every function is empty; with it on and no recorder installed
//! each is a few loads of the `metrics` facade's no-op recorder. None is on a cached
//! token's path.

use std::future::Future;
use std::time::{Duration, Instant};

use std::sync::PoisonError;

use time::OffsetDateTime;
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::error::Error;

use super::labels;
#[cfg(feature = "metrics")]
use super::names;

/// A service the crate calls, other than the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    /// The MSI data plane.
    DataPlane,
    /// Key Vault (the credential store).
    #[cfg_attr(not(feature = "keyvault"), allow(dead_code))]
    KeyVault,
}

/// Seconds since the Unix epoch, as a gauge holds them.
#[cfg(feature = "metrics")]
fn unix(t: OffsetDateTime) -> f64 {
    t.unix_timestamp() as f64
}

/// One token request (one HTTP exchange with the token endpoint) ended.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn token_request(client_id: &str, error: Option<&Error>, elapsed: Duration) {
    #[cfg(feature = "metrics")]
    {
        let code = error.map_or(std::borrow::Cow::Borrowed(labels::NONE), labels::error_code);
        let outcome = labels::request_outcome(error);
        metrics::counter!(
            names::TOKEN_REQUESTS,
            "client_id" => client_id.to_owned(),
            "outcome" => outcome,
            "error_code" => code,
        )
        .increment(1);
        metrics::histogram!(
            names::TOKEN_REQUEST_DURATION,
            "client_id" => client_id.to_owned(),
            "outcome" => outcome,
        )
        .record(elapsed.as_secs_f64());
        let failures = metrics::gauge!(
            names::TOKEN_CONSECUTIVE_FAILURES,
            "client_id" => client_id.to_owned(),
        );
        match error {
            None => failures.set(0.0),
            Some(_) => failures.increment(1.0),
        }
    }
}

/// A credential for `client_id` was built: its counters' known label sets at 0, so that
/// a first failure is an increase a rule sees, and its run of failures at 0. (Error
/// codes are not known ahead; `success` with `none` is.)
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn token_client(client_id: &str) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(
            names::TOKEN_REQUESTS,
            "client_id" => client_id.to_owned(),
            "outcome" => "success",
            "error_code" => labels::NONE,
        )
        .increment(0);
        let failures = metrics::gauge!(
            names::TOKEN_CONSECUTIVE_FAILURES,
            "client_id" => client_id.to_owned(),
        );
        // Increment by 0: a gauge another credential of the client id already holds
        // keeps its run (a rotation during an outage does not hide it).
        failures.increment(0.0);
    }
}

/// A reloading credential for `client_id` started: every `outcome` and `reason` pair it
/// can count, at 0.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn reload_client(client_id: &str) {
    #[cfg(feature = "metrics")]
    for reason in labels::RELOAD_REASONS {
        let outcomes: &[&'static str] = match *reason {
            "none" => &["swapped", "unchanged"],
            _ => &["kept_last_good"],
        };
        for outcome in outcomes {
            metrics::counter!(
                names::RELOADS,
                "client_id" => client_id.to_owned(),
                "outcome" => *outcome,
                "reason" => *reason,
            )
            .increment(0);
        }
        if *reason != labels::NONE {
            metrics::gauge!(
                names::CREDENTIAL_FILE_REJECTED,
                "client_id" => client_id.to_owned(),
                "reason" => *reason,
            )
            .increment(0.0);
        }
    }
}

/// The credential file of `client_id` was checked: refused for `reason`, or, with
/// `"none"`, the one in use (swapped in or read again). Every other reason's gauge goes
/// to 0, so that a good file ends the refusal at once.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn file_rejected(client_id: &str, reason: &'static str) {
    #[cfg(feature = "metrics")]
    for each in labels::RELOAD_REASONS
        .iter()
        .filter(|r| **r != labels::NONE)
    {
        metrics::gauge!(
            names::CREDENTIAL_FILE_REJECTED,
            "client_id" => client_id.to_owned(),
            "reason" => *each,
        )
        .set(if *each == reason { 1.0 } else { 0.0 });
    }
}

/// The label sets known without a client id, at 0: renewals by outcome, the token
/// server's answers by status (the `msi-credential` crate's token server), data plane and Key Vault operations'
/// successes.
pub(crate) fn known_series() {
    #[cfg(feature = "metrics")]
    {
        for outcome in labels::RENEWAL_OUTCOMES {
            metrics::counter!(names::RENEWALS, "outcome" => *outcome).increment(0);
        }
        let operations = [
            (names::DATAPLANE_REQUESTS, labels::DATAPLANE_OPERATIONS),
            #[cfg(feature = "keyvault")]
            (names::KEYVAULT_REQUESTS, labels::KEYVAULT_OPERATIONS),
        ];
        for (name, ops) in operations {
            for operation in ops {
                metrics::counter!(
                    name,
                    "operation" => *operation,
                    "outcome" => "success",
                    "error_code" => labels::NONE,
                )
                .increment(0);
            }
        }
    }
}

/// A credential's gauges (its end, and its file's `renew_after` and `cannot_renew_after`),
/// written while it is the one in use for its client id: a reloading credential retires
/// the one it swaps out, under the lock the gauges are written with, so that a request
/// still in flight on it cannot write its times over its successor's.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct CredentialGauges {
    client_id: String,
    times: (
        OffsetDateTime,
        Option<OffsetDateTime>,
        Option<OffsetDateTime>,
    ),
    in_use: std::sync::Mutex<bool>,
}

impl CredentialGauges {
    /// The gauges of `client_id`'s credential, ending at `not_after`, with its file's
    /// `renew_after` and `cannot_renew_after`.
    pub(crate) fn new(
        client_id: &str,
        not_after: OffsetDateTime,
        renew_after: Option<OffsetDateTime>,
        cannot_renew_after: Option<OffsetDateTime>,
    ) -> Self {
        CredentialGauges {
            client_id: client_id.to_owned(),
            times: (not_after, renew_after, cannot_renew_after),
            in_use: std::sync::Mutex::new(true),
        }
    }

    /// Set them, unless the credential is retired; a time the credential lacks is `NaN`
    /// (never the previous credential's: a comparison with `NaN` is false, so no rule
    /// fires on it).
    pub(crate) fn record(&self) {
        #[cfg(feature = "metrics")]
        {
            let in_use = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
            if !*in_use {
                return;
            }
            let (end, renew, cannot) = self.times;
            for (name, t) in [
                (names::CREDENTIAL_NOT_AFTER, Some(end)),
                (names::CREDENTIAL_RENEW_AFTER, renew),
                (names::CREDENTIAL_CANNOT_RENEW_AFTER, cannot),
            ] {
                metrics::gauge!(name, "client_id" => self.client_id.clone())
                    .set(t.map_or(f64::NAN, unix));
            }
        }
    }

    /// The credential is no longer the one in use: from now on it sets none of them.
    pub(crate) fn retire(&self) {
        *self.in_use.lock().unwrap_or_else(PoisonError::into_inner) = false;
    }
}

/// A token was obtained for a client id: the expiry of its newest token.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn token_expiry(client_id: &str, expires_on: OffsetDateTime) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(names::TOKEN_EXPIRY, "client_id" => client_id.to_owned()).set(unix(expires_on));
}

/// The soonest expiry (Unix ms) of the tokens of `client_id` a caller can still lose, as
/// `soonest` finds it (a scan of the cache, run only with the `metrics` feature); `None`
/// (`NaN`) when it has none.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn token_soonest_expiry(client_id: &str, soonest: impl FnOnce() -> Option<i64>) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(names::TOKEN_SOONEST_EXPIRY, "client_id" => client_id.to_owned())
        .set(soonest().map_or(f64::NAN, |ms| (ms / 1000) as f64));
}

/// A reload of a credential file ended: `outcome` is `swapped`, `unchanged` or
/// `kept_last_good`, `reason` why the last good one was kept (`none` otherwise).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn reload(client_id: &str, outcome: &'static str, reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        names::RELOADS,
        "client_id" => client_id.to_owned(),
        "outcome" => outcome,
        "reason" => reason,
    )
    .increment(1);
}

/// Secrets of a renewal pass: `outcome` is `due`, `renewed`, `not_newer` or `failed`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[cfg_attr(not(feature = "keyvault"), allow(dead_code))]
pub(crate) fn renewals(outcome: &'static str, count: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!(names::RENEWALS, "outcome" => outcome).increment(count as u64);
}

/// Run one call to `service` (`operation`: a fixed name such as `get_user_assigned`) in a
/// span, and count it by outcome with its duration.
pub(crate) async fn service_call<T>(
    service: Service,
    operation: &'static str,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let span = match service {
        Service::DataPlane => tracing::info_span!(
            "dataplane_request",
            operation,
            outcome = Empty,
            error_code = Empty,
            duration_ms = Empty
        ),
        Service::KeyVault => tracing::info_span!(
            "keyvault_request",
            operation,
            outcome = Empty,
            error_code = Empty,
            duration_ms = Empty
        ),
    };
    let started = Instant::now();
    let result = call.instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let error = result.as_ref().err();
    end_span(&span, error, elapsed);
    #[cfg(feature = "metrics")]
    {
        let (count, duration) = match service {
            Service::DataPlane => (names::DATAPLANE_REQUESTS, names::DATAPLANE_REQUEST_DURATION),
            Service::KeyVault => (names::KEYVAULT_REQUESTS, names::KEYVAULT_REQUEST_DURATION),
        };
        let code = error.map_or(std::borrow::Cow::Borrowed(labels::NONE), labels::error_code);
        metrics::counter!(count, "operation" => operation, "outcome" => labels::request_outcome(error), "error_code" => code)
            .increment(1);
        metrics::histogram!(duration, "operation" => operation, "outcome" => labels::request_outcome(error))
            .record(elapsed.as_secs_f64());
    }
    result
}

/// Fill a span's `outcome`, `error_code` and `duration_ms`.
pub(crate) fn end_span(span: &tracing::Span, error: Option<&Error>, elapsed: Duration) {
    if span.is_disabled() {
        return;
    }
    span.record("outcome", labels::request_outcome(error));
    if let Some(e) = error {
        span.record("error_code", labels::error_code(e).as_ref());
    }
    span.record("duration_ms", elapsed.as_millis() as u64);
}
