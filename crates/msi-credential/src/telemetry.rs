//! The token server's metric: its answers by status, on the metric name the library's
//! catalogue lists (`msi_dataplane::telemetry::SERVE_REQUESTS`).

use msi_dataplane::telemetry::SERVE_REQUESTS;

/// The `status` labels of the token server's answers: the statuses it sends, and
/// `other` (the set stays fixed whatever arrives).
const SERVE_STATUSES: &[&str] = &[
    "200", "400", "401", "403", "404", "405", "413", "414", "421", "429", "431", "500", "503",
    "other",
];

/// A status the token server answered with, as a label: one of [`SERVE_STATUSES`]
/// (a match, no allocation: it runs on every answer).
fn status(status: u16) -> &'static str {
    match status {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        413 => "413",
        414 => "414",
        421 => "421",
        429 => "429",
        431 => "431",
        500 => "500",
        503 => "503",
        _ => "other",
    }
}

/// The token server answered a request with `status`.
pub(crate) fn served(status_code: u16) {
    metrics::counter!(SERVE_REQUESTS, "status" => status(status_code)).increment(1);
}

/// Set every `status` series at 0 in the installed recorder, so a rate over them exists
/// before the first answer (with the library's `msi_dataplane::telemetry::initialize`).
pub fn initialize() {
    for status in SERVE_STATUSES {
        metrics::counter!(SERVE_REQUESTS, "status" => *status).increment(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn statuses_outside_the_set_are_other() {
        assert_eq!(super::status(200), "200");
        assert_eq!(super::status(431), "431");
        assert_eq!(super::status(418), "other");
        assert_eq!(super::status(2000), "other");
        for label in super::SERVE_STATUSES {
            let code = label.parse().unwrap_or(999);
            assert_eq!(super::status(code), *label);
        }
    }
}
