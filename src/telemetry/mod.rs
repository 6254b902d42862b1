//! Metrics and traces for operators: what tells them an identity is about to break before
//! it does. An identity that stops rotating breaks 90 days later, at `not_after`; these
//! tell a metrics system long before.
//!
//! # Metrics (feature `metrics`)
//!
//! The crate records through the [`metrics`](https://docs.rs/metrics) facade. Nothing is
//! recorded until the application installs a recorder (e.g. `metrics-exporter-prometheus`'s
//! `PrometheusBuilder`); until then each event is a few loads of the facade's no-op
//! recorder, and a cached token's path records nothing at all. The facade rather than the
//! OpenTelemetry API: it costs nothing when unused, it needs no meter or provider handed to
//! the crate, its Prometheus exporter is kept by the same project, and an OpenTelemetry
//! application can install a recorder that forwards to its meter provider. Call
//! [`describe`] after installing a recorder for the help texts, and [`initialize`] for the
//! label sets known in advance at 0. Install the recorder before building credentials:
//! each credential sets its own series at 0 when it is built (its token requests'
//! `success`, its run of failures, every `outcome` and `reason` of its reloads and of its
//! file rejected gauge), so that `increase()` sees a first failure or a first refused
//! file.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! msi_dataplane::telemetry::describe(); // the help texts
//! msi_dataplane::telemetry::initialize(); // the label sets known ahead, at 0
//! // ... then build the credentials: each sets its own series at 0.
//! let scrape: String = handle.render(); // Prometheus's text format, to serve on GET /metrics
//! # let _ = scrape; Ok(()) }
//! ```
//!
//! To serve the rendering, the `msi-credential` crate has a bounded listener
//! (`msi_credential::serve::MetricsServer`: `GET /metrics` only, a connection cap,
//! timeouts and a scrape rate), which its `watch --metrics` and `serve --metrics` use.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `msi_dataplane_token_requests_total` | counter | `client_id`, `outcome`, `error_code` |
//! | `msi_dataplane_token_request_duration_seconds` | histogram | `client_id`, `outcome` |
//! | `msi_dataplane_token_expiry_timestamp_seconds` | gauge | `client_id` |
//! | `msi_dataplane_token_soonest_expiry_timestamp_seconds` | gauge | `client_id` |
//! | `msi_dataplane_token_consecutive_failures` | gauge | `client_id` |
//! | `msi_dataplane_credential_not_after_timestamp_seconds` | gauge | `client_id` |
//! | `msi_dataplane_credential_renew_after_timestamp_seconds` | gauge | `client_id` |
//! | `msi_dataplane_credential_cannot_renew_after_timestamp_seconds` | gauge | `client_id` |
//! | `msi_dataplane_reloads_total` | counter | `client_id`, `outcome`, `reason` |
//! | `msi_dataplane_credential_file_rejected` | gauge | `client_id`, `reason` |
//! | `msi_dataplane_data_plane_requests_total` | counter | `operation`, `outcome`, `error_code` |
//! | `msi_dataplane_data_plane_request_duration_seconds` | histogram | `operation`, `outcome` |
//! | `msi_dataplane_keyvault_requests_total` | counter | `operation`, `outcome`, `error_code` |
//! | `msi_dataplane_keyvault_request_duration_seconds` | histogram | `operation`, `outcome` |
//! | `msi_dataplane_renewals_total` | counter | `outcome` |
//! | `msi_dataplane_serve_requests_total` | counter | `status` |
//!
//! What each tells: a token request is one exchange with Entra, and its duration; the
//! consecutive failures count the token requests failed in a row since the last success;
//! the credential gauges are the Unix times of the credential in use, the expiry that of
//! the newest token, the soonest expiry that of the token a caller would lose first; a
//! reload is one re-read of the file, and the file rejected gauge the outcome of the
//! file last checked (1 for the reason it was refused, else 0); data plane and Key Vault
//! requests are calls of the [`dataplane`](crate::dataplane) client and the
//! [`keyvault`](crate::keyvault) store; a renewal is a pass of the store's `renew_due`;
//! `serve_requests` are the answers of the `msi-credential` crate's token server.
//!
//! Every label set is bounded; none carries a scope, a token, a URL or a path:
//!
//! - `client_id`: a loaded credential's client id (one per credential the process loads).
//! - `outcome` (token, data plane and Key Vault requests): `success`; `transient` (a
//!   failure that trying again later can fix: a 408, 429, 500, 502, 503 or 504 answer, a
//!   refused or broken connection); `refused` (any other failure: an AADSTS refusal,
//!   another 4xx or 5xx, an expired credential, an unusable answer).
//! - `outcome` (reloads): `swapped`, `unchanged` (the file last decided on, read again:
//!   the active credential's, or the one already refused), `kept_last_good` (a file
//!   refused, counted once per file).
//! - `outcome` (renewals): `due`, `renewed`, `not_newer`, `failed`.
//! - `error_code`: `none` for a success; for a transient answer its HTTP status (`503`,
//!   whatever its body says); `AADSTS<n>` when Entra refused with an AADSTS code (at
//!   most 64 distinct codes per process, then `AADSTS_other`: a broken or hostile endpoint
//!   cannot grow the set); else the HTTP status answered (`403`); else the crate's code
//!   for the failure ([`ErrorKind::code`](crate::error::ErrorKind::code): `transport`,
//!   `credential_expired`, ...).
//! - HTTP statuses in `error_code`: `400`, `401`, `403`, `404`, `408`, `409`, `429`,
//!   `500`, `502`, `503`, `504`, and `other` for any other status a service answers with
//!   (a broken or hostile endpoint cannot grow the set with made-up statuses).
//! - `reason` (reloads): `none`, `not_newer`, `not_found`, `unreadable`, `malformed_json`,
//!   `bad_bundle`, `outside_validity`, `other`. `none` goes with `swapped` and
//!   `unchanged`; the others with `kept_last_good`: the file is older than (or as old as)
//!   the active credential (`not_newer`), missing (`not_found`), unreadable, not a regular
//!   file or too large (`unreadable`), not JSON or with wrong keys or values
//!   (`malformed_json`), its `client_secret` not a usable key and certificate
//!   (`bad_bundle`), its certificate expired or not yet valid (`outside_validity`).
//! - `status` (the `msi-credential` crate's token server): the HTTP status answered, one of the
//!   statuses it sends (`200`, `400`, `401`, `403`, `429`, `503`, ...) or `other`.
//! - `operation`: data plane `get_system_assigned`, `get_user_assigned`,
//!   `delete_system_assigned`, `move_identity`; Key Vault `put`, `get`, `delete`,
//!   `get_deleted`, `purge_deleted`, `recover_deleted`, `list`, `list_deleted`, `renew`.
//!
//! The credential gauges follow the credential in use: set when a credential file is
//! loaded or a rotation swapped in, and at each token the credential in use obtains (a
//! credential a rotation replaced writes none, even for a request that ends after the
//! swap); a time the credential in use does not have (`renew_after`, `cannot_renew_after` are optional in the file) is
//! `NaN`, never the previous credential's, and no comparison with `NaN` is true, so no
//! rule fires on it. The token expiry is that of the newest token obtained for the client
//! id; the soonest expiry the earliest end of the tokens its cache holds that a caller
//! can still lose (not yet expired, or expired while its scope's requests fail; `NaN`
//! when none), set when a token request ends; the consecutive failures count the token requests of the client id that failed
//! since its last success, and hold between requests: a rule on them stays true through
//! a retry backoff of any length. Token requests count each HTTP
//! exchange (a retried request counts each attempt); data plane and Key Vault operations
//! count each call, retries inside it included.
//!
//! # Traces
//!
//! Spans, at `INFO`, with these fields and never a secret (no token, assertion, key,
//! secret value or signed URL):
//!
//! | span | fields |
//! |---|---|
//! | `token_request` | `client_id`, `tenant`, `scope`, `attempt`, `outcome`, `error_code`, `duration_ms` |
//! | `credential_reload` | `client_id`, `trigger`, `outcome`, `reason`, `duration_ms` |
//! | `dataplane_request` | `operation`, `outcome`, `error_code`, `duration_ms` |
//! | `keyvault_request` | `operation`, `outcome`, `error_code`, `duration_ms` |
//!
//! `outcome` and `error_code` take the values of the metrics' labels.
//!
//! # Alerts
//!
//! Prometheus rules for the conditions that break an identity, each with a runbook line
//! (what it means, what to do, when it resolves). Each reads a gauge of the state now,
//! so each resolves at the first evaluation after its fault ends: a renewed credential
//! loaded (`MsiCredentialRenewalOverdue`, `MsiCredentialExpiresSoon`), a good file
//! checked (`MsiCredentialFileRejected`), the identity's first successful token request
//! (`MsiTokenRequestsFailing`, `MsiTokenExpiresWhileFailing`). That request comes at a
//! caller's request for a token not cached (5 s after a failure at most), or at the
//! cached token's background refresh, 30 s after a failure within 10 minutes of the
//! token's end, otherwise after the run's backoff (up to 10 minutes, +10%); a cached
//! token is refreshed only when a caller asks for it.
//!
//! ```yaml
#![doc = include_str!("alerts.yaml")]
//! ```
//!
//! The same YAML is [`ALERT_RULES`] (`src/telemetry/alerts.yaml` in the repository). CI
//! proves the rules with Prometheus's own tools: `promtool check rules` on it,
//! `promtool test rules src/telemetry/alerts_test.yaml` (a case per alert: a first-ever
//! rejection, a 90-minute outage under the refresh's backoff, a credential 3 days from
//! its end, an older token ending while the newest is far out fire; a good file after a
//! rejected one and the first success after an outage resolve; a healthy rotation, 30
//! days out, a file swapped for one without renewal times stay silent), `promtool check
//! metrics` on live scrapes of `msi-credential watch --metrics` and `serve --metrics`
//! after a rotation and a refusal, and a real Prometheus server scraping `serve
//! --metrics` every second with these rules (only their `for:` scaled from minutes to
//! seconds), on which each alert goes pending, fires for its identity's `client_id` and
//! resolves once its fault ends, a few seconds later (the msi-credential crate's
//! `alerts_live` test).

mod labels;
mod names;
mod record;

pub(crate) use labels::reload_reason;
pub use names::{
    CREDENTIAL_CANNOT_RENEW_AFTER, CREDENTIAL_FILE_REJECTED, CREDENTIAL_NOT_AFTER,
    CREDENTIAL_RENEW_AFTER, DATAPLANE_REQUEST_DURATION, DATAPLANE_REQUESTS,
    KEYVAULT_REQUEST_DURATION, KEYVAULT_REQUESTS, RELOADS, RENEWALS, SERVE_REQUESTS,
    TOKEN_CONSECUTIVE_FAILURES, TOKEN_EXPIRY, TOKEN_REQUEST_DURATION, TOKEN_REQUESTS,
    TOKEN_SOONEST_EXPIRY,
};
#[cfg_attr(not(feature = "keyvault"), allow(unused_imports))]
pub(crate) use record::{
    CredentialGauges, Service, end_span, file_rejected, reload, reload_client, renewals,
    service_call, token_client, token_expiry, token_request, token_soonest_expiry,
};

/// The Prometheus alerting rules above, as YAML (to write out or check in a test).
pub const ALERT_RULES: &str = include_str!("alerts.yaml");

/// Give the installed recorder every metric's help text and unit. Call it after
/// installing the recorder; without one it does nothing.
///
/// ```
/// msi_dataplane::telemetry::describe();
/// ```
pub fn describe() {
    #[cfg(feature = "metrics")]
    for (name, help) in names::ALL {
        if name.ends_with("_total") {
            metrics::describe_counter!(*name, *help);
        } else if name.ends_with("_duration_seconds") {
            metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help);
        } else {
            metrics::describe_gauge!(*name, *help);
        }
    }
}

/// Set the label sets known in advance at 0 in the installed recorder: renewals by
/// `outcome`, each data plane
/// and Key Vault `operation`'s `success`. (Each credential sets its own series when it is
/// built.) Call it after installing the recorder; without one it does nothing.
///
/// ```
/// msi_dataplane::telemetry::initialize();
/// ```
pub fn initialize() {
    record::known_series();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alert_rules_are_valid_yaml_on_metrics_that_exist_with_a_runbook_each() {
        let rules: serde_json::Value = serde_norway::from_str(ALERT_RULES).unwrap();
        let rules = rules["groups"][0]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 5);
        let known: Vec<&str> = names::ALL.iter().map(|(name, _)| *name).collect();
        for rule in rules {
            let name = rule["alert"].as_str().unwrap();
            let expr = rule["expr"].as_str().unwrap();
            let used: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("msi_dataplane_"))
                .collect();
            assert!(!used.is_empty(), "{name}: {expr}");
            for metric in used {
                assert!(known.contains(&metric), "{name} uses unknown {metric}");
            }
            let runbook = rule["annotations"]["runbook"].as_str().unwrap();
            assert!(runbook.len() > 40, "{name}: {runbook}");
            assert!(rule["annotations"]["summary"].is_string(), "{name}");
        }
    }

    /// The backticked words of the first sentence of the doc bullet that starts with
    /// `start` (its list of values).
    fn doc_list(text: &str, start: &str) -> std::collections::BTreeSet<String> {
        let from = text
            .find(start)
            .unwrap_or_else(|| panic!("no {start:?} in the docs"));
        let rest = &text[from + start.len()..];
        let end = rest
            .find("\n//! - ")
            .into_iter()
            .chain(rest.find("\n//!\n"))
            .chain(rest.find(". "))
            .chain(rest.find(".\n"))
            .min()
            .unwrap_or(rest.len());
        rest[..end]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    fn set(names: &[&str]) -> std::collections::BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn the_reason_and_outcome_names_are_one_set_in_docs_names_runbook_and_code() {
        let docs = include_str!("mod.rs");
        assert_eq!(
            doc_list(docs, "//! - `reason` (reloads):"),
            set(labels::RELOAD_REASONS)
        );
        assert_eq!(
            doc_list(docs, "//! - `outcome` (reloads):"),
            set(labels::RELOAD_OUTCOMES)
        );
        let mut statuses = set(labels::ERROR_STATUSES);
        statuses.insert(labels::OTHER_STATUS.to_owned());
        assert_eq!(
            doc_list(docs, "//! - HTTP statuses in `error_code`:"),
            statuses
        );
        let requests = doc_list(
            docs,
            "//! - `outcome` (token, data plane and Key Vault requests):",
        );
        assert!(
            requests.is_superset(&set(labels::REQUEST_OUTCOMES)),
            "{requests:?}"
        );
        // The metric's own doc (names.rs) and the runbook name the same reasons (the
        // module docs above are the one catalogue: the README links to them).
        let names = include_str!("names.rs");
        let runbook = ALERT_RULES;
        for reason in labels::RELOAD_REASONS {
            assert!(
                names.contains(&format!("`{reason}`")),
                "names.rs lacks {reason}"
            );
            if *reason != "none" {
                assert!(runbook.contains(reason), "the runbook lacks {reason}");
            }
        }
        // No name the code does not use, in the runbook or names.rs (the old ones).
        for gone in ["`json`", "`io`", "outcome=\\\"error\\\""] {
            assert!(!runbook.contains(gone) && !names.contains(gone), "{gone}");
        }
    }

    #[test]
    fn file_errors_map_to_the_documented_reasons() {
        use crate::error::{Error, ErrorKind};
        let io = |kind| -> Error { ErrorKind::from(std::io::Error::from(kind)).into() };
        assert_eq!(
            labels::reload_reason(&io(std::io::ErrorKind::NotFound)),
            "not_found"
        );
        assert_eq!(
            labels::reload_reason(&io(std::io::ErrorKind::PermissionDenied)),
            "unreadable"
        );
        let json = crate::UserAssignedIdentityCredentials::from_slice(b"{ not json").unwrap_err();
        assert_eq!(labels::reload_reason(&json), "malformed_json");
        let missing = crate::UserAssignedIdentityCredentials::from_slice(b"{}").unwrap_err();
        assert_eq!(labels::reload_reason(&missing), "malformed_json");
        let bundle = Error::file(
            "no_private_key",
            None,
            "the certificate bundle holds no private key",
        );
        assert_eq!(labels::reload_reason(&bundle), "bad_bundle");
    }
}
