//! `--metrics ADDR`: the library's metrics in Prometheus's text format on
//! `http://ADDR/metrics`, rendered by `metrics-exporter-prometheus`'s recorder and served
//! by the library's bounded metrics listener (`msi_credential::serve::MetricsServer`:
//! `GET /metrics` only, a connection cap, first-byte and idle timeouts, a scrape rate).

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use msi_credential::serve::{MetricsServer, MetricsServerOptions};

use crate::exit::Exit;
use crate::output::{self, Format};
use crate::render;

/// Seconds: from a fast loopback token request to a slow data plane call with retries.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// `--metrics ADDR` when given: [`install`], a failure reported in `format` as a usage
/// error (the exit to end with). The listener stops when the returned server is dropped.
pub async fn serve_if_asked(
    addr: Option<SocketAddr>,
    format: Format,
) -> Result<Option<MetricsServer>, Exit> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    match install(addr).await {
        Ok(server) => Ok(Some(server)),
        Err(message) => {
            output::failure(&render::plain_error("metrics", &message, format), format);
            Err(Exit::Usage)
        }
    }
}

/// Install the Prometheus recorder (durations as histograms with [`DURATION_BUCKETS`])
/// and serve its rendering on `addr`, on the current runtime.
pub async fn install(addr: SocketAddr) -> Result<MetricsServer, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            DURATION_BUCKETS,
        )
        .and_then(|builder| builder.install_recorder())
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    msi_dataplane::telemetry::describe();
    msi_dataplane::telemetry::initialize();
    msi_credential::telemetry::initialize();
    // The recorder keeps histograms' samples until its upkeep drains them: every 5 s, as
    // the exporter's own listener did.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    MetricsServer::start(MetricsServerOptions::new(addr), move || handle.render())
        .await
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))
}
