//! The alert rules (`src/telemetry/alerts.yaml`) on a real Prometheus server: it scrapes
//! `msi-credential serve --metrics` every second, one process per identity, and each
//! identity lives one alert's situation side by side with the others: Entra failing, an
//! older token ending while Entra fails (its newest far out), a rejected file then a
//! good one, a certificate ending within 7 days, a credential past `renew_after`, and
//! one left healthy. Through Prometheus's HTTP API each alert goes pending (the rules
//! with a `for:`), fires with the identity's `client_id`, and resolves once its
//! situation ends; the healthy identity fires nothing.
//!
//! The rules are the crate's, with one change: every `for:` is scaled from minutes to
//! seconds (`for: 15m` becomes `for: 15s`, `for: 10m` becomes `for: 10s`); the
//! thresholds (7 days, an hour past `renew_after`, 10 minutes before a token's end) are
//! kept. It runs where `prometheus` is on `PATH`; CI sets
//! `MSI_TEST_REQUIRE_PROMETHEUS=1` (and installs it), so that there a missing server
//! fails it instead of skipping it. How long each alert outlasted its fault is printed
//! (`outlasted`), not asserted.
#![cfg(unix)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use msi_dataplane::BundleFormat;
use msi_dataplane_testing::{
    CsiMount, EntraServer, Match, Scripted, TempDir, TestCertificate, TestIdentity, TokenShape,
};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::serving::{self, Mounted, SECRET};
use crate::support;

/// How the rules' `for:` durations are scaled for the test: minutes become seconds.
const SCALED: [(&str, &str); 2] = [("for: 15m", "for: 15s"), ("for: 10m", "for: 10s")];

/// The longest any step waits for Prometheus to see a state (a failure bound, not a
/// measure).
const PATIENCE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_alert_fires_for_its_identity_and_resolves_when_the_fault_ends_on_a_real_prometheus() {
    let dir = TempDir::new("alerts-live");
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let ca = EntraServer::write_ca_pem(dir.path());
    let entra = EntraServer::start().await;
    // Its own Entra for the token situation: tokens of 620 s first, then of an hour.
    let short = EntraServer::start().await;
    short.set_token_shape(TokenShape {
        expires_in: 620,
        ..TokenShape::default()
    });

    let now = OffsetDateTime::now_utc();
    let healthy = Served::start(Mounted::new(&entra), &ca, &dir, "healthy");
    let failing = Served::start(Mounted::new(&entra), &ca, &dir, "failing");
    let ending = Served::start(Mounted::new(&short), &ca, &dir, "ending");
    let mut rejected = Served::start(Mounted::new(&entra), &ca, &dir, "rejected");
    let mut expiring = {
        let certificate = TestCertificate::builder()
            .validity(
                now - time::Duration::hours(1),
                now + time::Duration::days(3),
            )
            .self_signed();
        Served::start(mounted(&entra, certificate, |_| {}), &ca, &dir, "expiring")
    };
    let mut overdue = {
        let two_hours_ago = now - time::Duration::hours(2);
        let overdue = |file: &mut msi_dataplane::UserAssignedIdentityCredentials| {
            file.renew_after = Some(two_hours_ago.format(&Rfc3339).unwrap());
        };
        let certificate = TestCertificate::self_signed();
        Served::start(mounted(&entra, certificate, overdue), &ca, &dir, "overdue")
    };
    let all = [&healthy, &failing, &ending, &rejected, &expiring, &overdue];
    let prometheus = Prometheus::start(&binary, &dir, &all.map(|s| s.metrics.clone())).await;
    for served in all {
        assert_eq!(served.token(serving::ARM).await.0, 200, "{}", served.name);
    }

    let done = std::sync::atomic::AtomicBool::new(false);
    let situations = async {
        let outlasted = tokio::join!(
            entra_failing(&prometheus, &entra, &failing),
            token_ending_while_failing(&prometheus, &short, &ending),
            rejected_then_good(&prometheus, &entra, &mut rejected),
            rotated_away(
                &prometheus,
                &entra,
                &mut expiring,
                "MsiCredentialExpiresSoon"
            ),
            rotated_away(
                &prometheus,
                &entra,
                &mut overdue,
                "MsiCredentialRenewalOverdue"
            ),
        );
        done.store(true, std::sync::atomic::Ordering::Release);
        outlasted
    };
    let (outlasted, seen) = tokio::join!(
        situations,
        prometheus.alerts_until(&healthy.client_id, &done)
    );
    let (failing_outlasted, ending_outlasted, rejected_outlasted) =
        (outlasted.0, outlasted.1, outlasted.2);
    let (expiring_outlasted, overdue_outlasted) = (outlasted.3, outlasted.4);
    assert!(seen.is_empty(), "the healthy identity alerted: {seen:?}");
    // Every target scraped cleanly throughout.
    let down = prometheus.query("min_over_time(up[1h]) < 1").await;
    assert!(down.is_empty(), "a scrape failed: {down:?}");
    for (alert, outlasted) in [
        ("MsiTokenRequestsFailing", failing_outlasted),
        ("MsiTokenExpiresWhileFailing", ending_outlasted),
        ("MsiCredentialFileRejected", rejected_outlasted),
        ("MsiCredentialExpiresSoon", expiring_outlasted),
        ("MsiCredentialRenewalOverdue", overdue_outlasted),
    ] {
        eprintln!("outlasted: {alert} resolved {outlasted:?} after its fault ended");
    }

    // Every warning of a failed token request names the identity.
    let failing_id = failing.client_id.clone();
    let log = failing.stop();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("token request failed"))
        .collect();
    assert!(!failed.is_empty(), "{log}");
    for line in failed {
        assert!(line.contains(&failing_id), "{line}");
    }
    for served in [healthy, ending, rejected, expiring, overdue] {
        served.stop();
    }
}

/// Entra answers 503 to the identity's every token request: `MsiTokenRequestsFailing`
/// goes pending, fires, and resolves at the first success once Entra is back.
async fn entra_failing(prometheus: &Prometheus, entra: &EntraServer, served: &Served) -> Duration {
    let id = &served.client_id;
    let outage = outage(entra, id);
    let asking = served.keep_asking("api://failing-not-cached");
    prometheus
        .wait_for("MsiTokenRequestsFailing", id, Some("pending"))
        .await;
    prometheus
        .wait_for("MsiTokenRequestsFailing", id, Some("firing"))
        .await;
    // Its cached token is an hour from its end: not the token alert.
    assert_eq!(
        prometheus.state("MsiTokenExpiresWhileFailing", id).await,
        None
    );
    drop(outage);
    let outlasted = prometheus.outlasted("MsiTokenRequestsFailing", id).await;
    asking.abort();
    outlasted
}

/// An older token (620 s) and a newer one (an hour): once Entra fails for the identity,
/// `MsiTokenExpiresWhileFailing` fires by the older, though the newest is far out; it
/// resolves at the first success once Entra is back.
async fn token_ending_while_failing(
    prometheus: &Prometheus,
    entra: &EntraServer,
    served: &Served,
) -> Duration {
    let id = &served.client_id;
    let (status, older) = served.token("api://ending-older").await;
    assert_eq!(status, 200);
    entra.set_token_shape(TokenShape::default());
    let (status, newer) = served.token("api://ending-newer").await;
    assert_eq!(status, 200);
    let expires_on = |v: &Value| v["expires_on"].as_str().unwrap().parse::<i64>().unwrap();
    assert!(expires_on(&newer) > expires_on(&older) + 600);
    let outage = outage(entra, id);
    let asking = served.keep_asking("api://ending-not-cached");
    let alert = prometheus
        .wait_for("MsiTokenExpiresWhileFailing", id, Some("firing"))
        .await;
    assert_eq!(alert["labels"]["severity"], "critical");
    let soonest = prometheus
        .query(&format!(
            "msi_dataplane_token_soonest_expiry_timestamp_seconds{{client_id=\"{id}\"}}"
        ))
        .await;
    let soonest: f64 = soonest[0]["value"][1].as_str().unwrap().parse().unwrap();
    // The older token's end (whole seconds: the answer's and the gauge's may round apart).
    let soonest = soonest as i64;
    assert!(
        (soonest - expires_on(&older)).abs() <= 1,
        "{soonest} {older}"
    );
    drop(outage);
    let outlasted = prometheus
        .outlasted("MsiTokenExpiresWhileFailing", id)
        .await;
    asking.abort();
    outlasted
}

/// A file that is not a credential file, then a good newer one: `MsiCredentialFileRejected`
/// fires at once with the reason and resolves once the good file is in use.
async fn rejected_then_good(
    prometheus: &Prometheus,
    entra: &EntraServer,
    served: &mut Served,
) -> Duration {
    let id = served.client_id.clone();
    served.mounted.mount.rotate(b"{ not json");
    let alert = prometheus
        .wait_for("MsiCredentialFileRejected", &id, Some("firing"))
        .await;
    assert_eq!(alert["labels"]["reason"], "malformed_json");
    served.mounted.rotate(entra);
    prometheus.outlasted("MsiCredentialFileRejected", &id).await
}

/// The credential in use trips `alert` (its `for:` scaled to 15 s): pending, firing, and
/// resolved once a renewed credential file is swapped in.
async fn rotated_away(
    prometheus: &Prometheus,
    entra: &EntraServer,
    served: &mut Served,
    alert: &str,
) -> Duration {
    let id = served.client_id.clone();
    prometheus.wait_for(alert, &id, Some("pending")).await;
    prometheus.wait_for(alert, &id, Some("firing")).await;
    served.mounted.rotate(entra);
    prometheus.outlasted(alert, &id).await
}

/// Entra answers 503 to every token request of `client_id` while the guard lives.
fn outage(entra: &EntraServer, client_id: &str) -> msi_dataplane_testing::ScriptGuard {
    let of = Match::any().client_id(client_id);
    let failing = entra.on(of).respond(Scripted::status(503));
    failing.until_cleared().mount_scoped()
}

/// `prometheus`, or `None` (the test skipped) when it is not on `PATH` and not required.
fn prometheus_binary() -> Option<String> {
    let required = std::env::var_os("MSI_TEST_REQUIRE_PROMETHEUS").is_some_and(|v| v == "1");
    match Command::new("prometheus").arg("--version").output() {
        Ok(out) if out.status.success() => Some("prometheus".to_owned()),
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("prometheus is not on PATH: the live alert test skipped");
            None
        }
        other => panic!("cannot run prometheus (MSI_TEST_REQUIRE_PROMETHEUS=1): {other:?}"),
    }
}

/// An identity with `certificate`, its file changed by `edit`, mounted as the CSI driver
/// mounts it and trusted by `entra`.
fn mounted(
    entra: &EntraServer,
    certificate: TestCertificate,
    edit: impl FnOnce(&mut msi_dataplane::UserAssignedIdentityCredentials),
) -> Mounted {
    let identity = TestIdentity::new();
    entra.register(&identity, &certificate);
    let mut file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    edit(&mut file);
    let mount = CsiMount::with_credentials_named(&format!("uamsi-{}", identity.client_id), &file);
    Mounted {
        identity,
        certificate,
        mount,
    }
}

/// One identity served by its own `msi-credential serve --metrics`, its log in a file.
struct Served {
    name: &'static str,
    client_id: String,
    mounted: Mounted,
    /// Taken by [`stop`](Self::stop); killed when dropped otherwise (a failed test).
    child: Option<Child>,
    endpoint: String,
    metrics: String,
    log: std::path::PathBuf,
}

impl Served {
    fn start(mounted: Mounted, ca: &std::path::Path, dir: &TempDir, name: &'static str) -> Served {
        let metrics = format!("127.0.0.1:{}", support::free_port());
        let log = dir.join(&format!("{name}.log"));
        let mut command = Command::new(serving::BIN);
        command
            .env_remove("RUST_LOG")
            .stderr(std::fs::File::create(&log).unwrap());
        let (child, serving) =
            serving::spawn_serve_in(command, &mounted, ca, &["--metrics", &metrics]);
        Served {
            name,
            client_id: mounted.identity.client_id.clone(),
            endpoint: serving["endpoint"].as_str().unwrap().to_owned(),
            mounted,
            child: Some(child),
            metrics,
            log,
        }
    }

    /// A token for `resource`: the status and the answer.
    async fn token(&self, resource: &str) -> (u16, Value) {
        let answer = client()
            .get(format!(
                "{}?api-version=2019-08-01&resource={resource}",
                self.endpoint
            ))
            .header("X-IDENTITY-HEADER", SECRET)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    /// A caller asking for `resource` every second, until aborted.
    fn keep_asking(&self, resource: &'static str) -> tokio::task::JoinHandle<()> {
        let endpoint = self.endpoint.clone();
        tokio::spawn(async move {
            loop {
                let _ = client()
                    .get(format!(
                        "{endpoint}?api-version=2019-08-01&resource={resource}"
                    ))
                    .header("X-IDENTITY-HEADER", SECRET)
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }

    /// SIGTERM; its log.
    fn stop(mut self) -> String {
        let child = self.child.take().unwrap();
        assert_eq!(serving::stop(child), Some(0), "{}", self.name);
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A Prometheus server on loopback with the crate's rules (`for:` scaled, [`SCALED`]),
/// scraping and evaluating every second; killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
}

impl Prometheus {
    async fn start(binary: &str, dir: &TempDir, targets: &[String]) -> Prometheus {
        let mut rules = msi_dataplane::telemetry::ALERT_RULES.to_owned();
        for (from, to) in SCALED {
            assert!(rules.contains(from), "the rules have no {from:?}");
            rules = rules.replace(from, to);
        }
        let durations = rules
            .lines()
            .filter(|l| l.trim_start().starts_with("for: "));
        assert!(durations.clone().count() == 3 && durations.clone().all(|l| l.ends_with('s')));
        std::fs::write(dir.join("rules.yaml"), rules).unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files: [\"{}\"]\n\
             scrape_configs:\n  - job_name: msi-credential\n    static_configs:\n      - targets: [{}]\n",
            dir.join("rules.yaml").display(),
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let url = format!("http://127.0.0.1:{}", support::free_port());
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={}", &url["http://".len()..]))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        let prometheus = Prometheus { child, url };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let ready = client()
                .get(format!("{}/-/ready", prometheus.url))
                .send()
                .await
                .is_ok_and(|a| a.status() == 200);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        prometheus
    }

    async fn api(&self, path: &str) -> Value {
        let answer: Value = client()
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["status"], "success", "{answer}");
        answer["data"].clone()
    }

    /// An instant query's result vector.
    async fn query(&self, query: &str) -> Vec<Value> {
        let mut url = reqwest::Url::parse("http://localhost/api/v1/query").unwrap();
        url.query_pairs_mut().append_pair("query", query);
        let data = self
            .api(&format!("/api/v1/query?{}", url.query().unwrap()))
            .await;
        data["result"].as_array().unwrap().clone()
    }

    /// The active alerts (pending or firing) of `client_id`.
    async fn alerts_of(&self, client_id: &str) -> Vec<Value> {
        let data = self.api("/api/v1/alerts").await;
        let alerts = data["alerts"].as_array().unwrap();
        let mine = alerts
            .iter()
            .filter(|a| a["labels"]["client_id"] == client_id);
        mine.cloned().collect()
    }

    /// The state of `alert` for `client_id`: `pending`, `firing`, or `None` (inactive or
    /// resolved).
    async fn state(&self, alert: &str, client_id: &str) -> Option<String> {
        let alerts = self.alerts_of(client_id).await;
        let found = alerts.iter().find(|a| a["labels"]["alertname"] == alert);
        found.map(|a| a["state"].as_str().unwrap().to_owned())
    }

    /// Wait until `alert` of `client_id` is in `state` (`None`: resolved); the alert.
    async fn wait_for(&self, alert: &str, client_id: &str, state: Option<&str>) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let alerts = self.alerts_of(client_id).await;
            let found = alerts.iter().find(|a| a["labels"]["alertname"] == alert);
            let now = found.map(|a| a["state"].as_str().unwrap());
            if now == state {
                return found.cloned().unwrap_or(Value::Null);
            }
            assert!(
                Instant::now() < deadline,
                "{alert} of {client_id}: {now:?}, never {state:?}; all: {alerts:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// How long after its fault ended (now) `alert` of `client_id` resolves.
    async fn outlasted(&self, alert: &str, client_id: &str) -> Duration {
        let ended = Instant::now();
        self.wait_for(alert, client_id, None).await;
        ended.elapsed()
    }

    /// Every alert of `client_id` seen until `done`.
    async fn alerts_until(
        &self,
        client_id: &str,
        done: &std::sync::atomic::AtomicBool,
    ) -> Vec<Value> {
        let mut seen = Vec::new();
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            seen.extend(self.alerts_of(client_id).await);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        seen
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
