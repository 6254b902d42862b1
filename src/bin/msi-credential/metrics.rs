//! `--metrics ADDR`: the library's metrics in Prometheus's text format on
//! `http://ADDR/metrics` (any path answers), through `metrics-exporter-prometheus`.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Seconds: from a fast loopback token request to a slow data plane call with retries.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Install the Prometheus recorder and its listener on `addr` (from inside the runtime:
/// the listener runs on it). Durations are histograms with [`DURATION_BUCKETS`].
pub fn install(addr: SocketAddr) -> Result<(), String> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            DURATION_BUCKETS,
        )
        .and_then(|builder| builder.install())
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    msi_dataplane::telemetry::describe();
    Ok(())
}
