//! The metrics' names, and their help texts.

/// Counter: token requests (each HTTP exchange with the token endpoint, retries
/// included) by `client_id`, `outcome` and `error_code`.
pub const TOKEN_REQUESTS: &str = "msi_dataplane_token_requests_total";
/// Histogram: token requests' duration by `client_id` and `outcome`.
pub const TOKEN_REQUEST_DURATION: &str = "msi_dataplane_token_request_duration_seconds";
/// Gauge: Unix time the newest token obtained for `client_id` expires.
pub const TOKEN_EXPIRY: &str = "msi_dataplane_token_expiry_timestamp_seconds";
/// Gauge: Unix time the soonest-ending token of `client_id` a caller can still lose
/// expires: of the tokens its cache holds, those not yet expired and those whose scope's
/// last request failed (`NaN` when it holds none). Set when a token request of the
/// client id ends.
pub const TOKEN_SOONEST_EXPIRY: &str = "msi_dataplane_token_soonest_expiry_timestamp_seconds";
/// Gauge: token requests for `client_id` that failed in a row since its last success (0
/// after a success, and from the credential's creation). It holds its value between
/// requests, so an alert on it stays true through any backoff.
pub const TOKEN_CONSECUTIVE_FAILURES: &str = "msi_dataplane_token_consecutive_failures";
/// Gauge: Unix time the credential in use for `client_id` ends (the earlier of the
/// certificate's `notAfter` and the file's `not_after`).
pub const CREDENTIAL_NOT_AFTER: &str = "msi_dataplane_credential_not_after_timestamp_seconds";
/// Gauge: Unix time from which the credential in use for `client_id` should be renewed
/// (the file's `renew_after`; `NaN` when the credential in use has none).
pub const CREDENTIAL_RENEW_AFTER: &str = "msi_dataplane_credential_renew_after_timestamp_seconds";
/// Gauge: Unix time after which the credential in use for `client_id` can no longer be
/// renewed (the file's `cannot_renew_after`; `NaN` when the credential in use has none).
pub const CREDENTIAL_CANNOT_RENEW_AFTER: &str =
    "msi_dataplane_credential_cannot_renew_after_timestamp_seconds";
/// Counter: re-reads of a credential file by `client_id`, `outcome` (`swapped`,
/// `unchanged`, `kept_last_good`) and `reason` (`none`, `not_newer`, `not_found`,
/// `unreadable`, `malformed_json`, `bad_bundle`, `outside_validity`, `other`). A re-read
/// of the file last decided on is `unchanged`: each file is refused once.
pub const RELOADS: &str = "msi_dataplane_reloads_total";
/// Gauge: 1 while the credential file of `client_id` last checked was refused for
/// `reason` (`not_newer`, `not_found`, `unreadable`, `malformed_json`, `bad_bundle`,
/// `outside_validity`, `other`), 0 for the other reasons; all 0 once the file checked is
/// the credential in use (a good file swapped in, or the one in use put back).
pub const CREDENTIAL_FILE_REJECTED: &str = "msi_dataplane_credential_file_rejected";
/// Counter: MSI data plane operations by `operation`, `outcome` and `error_code`.
pub const DATAPLANE_REQUESTS: &str = "msi_dataplane_data_plane_requests_total";
/// Histogram: MSI data plane operations' duration (retries included) by `operation` and
/// `outcome`.
pub const DATAPLANE_REQUEST_DURATION: &str = "msi_dataplane_data_plane_request_duration_seconds";
/// Counter: Key Vault store operations by `operation`, `outcome` and `error_code`.
pub const KEYVAULT_REQUESTS: &str = "msi_dataplane_keyvault_requests_total";
/// Histogram: Key Vault store operations' duration by `operation` and `outcome`.
pub const KEYVAULT_REQUEST_DURATION: &str = "msi_dataplane_keyvault_request_duration_seconds";
/// Counter: stored credentials of renewal passes by `outcome` (`due`, `renewed`,
/// `not_newer`, `failed`).
pub const RENEWALS: &str = "msi_dataplane_renewals_total";

/// Counter: requests the token server (`serve`) answered, by `status`.
pub const SERVE_REQUESTS: &str = "msi_dataplane_serve_requests_total";

/// Every metric: name and help text. Its kind is in its name: `_total` a counter,
/// `_duration_seconds` a histogram (in seconds), anything else a gauge.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const ALL: &[(&str, &str)] = &[
    (
        TOKEN_REQUESTS,
        "Token requests to the token endpoint, by outcome (success, transient, refused) and error code.",
    ),
    (
        TOKEN_REQUEST_DURATION,
        "Duration of token requests, in seconds.",
    ),
    (
        TOKEN_EXPIRY,
        "Unix time the newest token of the client id expires.",
    ),
    (
        TOKEN_SOONEST_EXPIRY,
        "Unix time the soonest-ending token of the client id expires, of those not yet expired or whose refresh fails (NaN: none cached).",
    ),
    (
        TOKEN_CONSECUTIVE_FAILURES,
        "Token requests of the client id that failed in a row since its last success.",
    ),
    (
        CREDENTIAL_NOT_AFTER,
        "Unix time the credential in use ends.",
    ),
    (
        CREDENTIAL_RENEW_AFTER,
        "Unix time from which the credential in use should be renewed (NaN: it has no renew_after).",
    ),
    (
        CREDENTIAL_CANNOT_RENEW_AFTER,
        "Unix time after which the credential in use can no longer be renewed (NaN: it has no cannot_renew_after).",
    ),
    (
        RELOADS,
        "Re-reads of a credential file, by outcome and the reason the last good credential was kept; a file is refused once.",
    ),
    (
        CREDENTIAL_FILE_REJECTED,
        "1 while the credential file last checked is refused for this reason, else 0; the last good credential is in use.",
    ),
    (
        DATAPLANE_REQUESTS,
        "MSI data plane operations, by operation, outcome and error code.",
    ),
    (
        DATAPLANE_REQUEST_DURATION,
        "Duration of MSI data plane operations, retries included, in seconds.",
    ),
    (
        KEYVAULT_REQUESTS,
        "Key Vault store operations, by operation, outcome and error code.",
    ),
    (
        KEYVAULT_REQUEST_DURATION,
        "Duration of Key Vault store operations, in seconds.",
    ),
    (
        RENEWALS,
        "Stored credentials of renewal passes, by outcome: due, renewed, not newer, failed.",
    ),
    (
        SERVE_REQUESTS,
        "Requests the token server answered, by HTTP status.",
    ),
];
