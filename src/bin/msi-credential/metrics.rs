//! `--metrics ADDR`: the library's metrics in Prometheus's text format on
//! `http://ADDR/metrics` (any path answers), through `metrics-exporter-prometheus`.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render;

/// Seconds: from a fast loopback token request to a slow data plane call with retries.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// `--metrics ADDR` when given: [`install`], a failure reported in `format` as a usage
/// error (the exit to end with).
pub fn serve_if_asked(addr: Option<SocketAddr>, format: Format) -> Result<(), Exit> {
    let Some(addr) = addr else {
        return Ok(());
    };
    install(addr).map_err(|message| {
        output::failure(&render::plain_error("metrics", &message, format), format);
        Exit::Usage
    })
}

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
    msi_dataplane::telemetry::initialize();
    Ok(())
}
