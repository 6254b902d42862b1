//! `msi-credential serve` and `probe` as subprocesses: the serving line, a token over the
//! protocol, the health probe, a clean stop on SIGTERM; a non-loopback address and a
//! missing secret refused with exit code 2 (and no secret on the command line at all).
#![cfg(unix)]

use crate::serving;
use crate::support;

use std::process::Command;
use std::time::Duration;

use msi_credential::serve::{
    PROBE_ANSWER_HEADER, PROBE_NONCE_HEADER, PROBE_PROOF_HEADER, ProbeChallenge,
};
use msi_dataplane_testing::{EntraServer, TempDir};
use serving::{ARM, Mounted, SECRET};

use serving::{BIN, spawn_serve, spawn_serve_in, stop};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_tokens_and_probes_until_sigterm() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("cli-serve");
    let ca = EntraServer::write_ca_pem(dir.path());
    let (child, serving) = spawn_serve(&a, &ca, &[]);
    assert_eq!(serving["event"], "serving");
    assert_eq!(serving["identities"][0], a.identity.client_id.as_str());
    let endpoint = serving["endpoint"].as_str().unwrap().to_owned();
    let health = serving["health"].as_str().unwrap().to_owned();
    assert!(endpoint.starts_with("http://127.0.0.1:") && endpoint.ends_with("/msi/token"));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let answer = client
        .get(format!("{endpoint}?api-version=2019-08-01&resource={ARM}"))
        .header("X-IDENTITY-HEADER", SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    let issued = entra
        .issued(body["access_token"].as_str().unwrap())
        .unwrap();
    assert_eq!(issued.cert_sha256_hex, a.certificate.sha256_hex());
    let probe = Command::new(BIN)
        .args(["probe", "--url", &health])
        .output()
        .unwrap();
    assert_eq!(probe.status.code(), Some(0), "{probe:?}");
    let bare = String::from_utf8_lossy(&probe.stdout).into_owned();
    assert!(bare.contains("\"ready\""), "{bare}");
    assert!(
        !bare.contains(&a.identity.client_id),
        "no details without the secret"
    );
    // The sidecar's probes present the secret (read from the server's secret file, or an
    // environment variable): the full report, never held to the budget of callers
    // without it.
    let secret_file = dir.join("identity-header");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let with_file = Command::new(BIN)
        .args(["probe", "--url", &health, "--secret-file"])
        .arg(&secret_file)
        .output()
        .unwrap();
    let with_env = Command::new(BIN)
        .args(["probe", "--url", &health, "--secret-env", "PROBE_SECRET"])
        .env("PROBE_SECRET", SECRET)
        .output()
        .unwrap();
    for probe in [with_file, with_env] {
        assert_eq!(probe.status.code(), Some(0), "{probe:?}");
        let out = String::from_utf8_lossy(&probe.stdout);
        assert!(out.contains(&a.identity.client_id), "the details: {out}");
        assert!(!out.contains(SECRET) && !String::from_utf8_lossy(&probe.stderr).contains(SECRET));
    }
    let wrong_file = dir.join("short");
    std::fs::write(&wrong_file, "short\n").unwrap();
    let refused = Command::new(BIN)
        .args(["probe", "--url", &health, "--secret-file"])
        .arg(&wrong_file)
        .output()
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(2),
        "an unusable secret: {refused:?}"
    );
    // The probe's proof, as the server sees it: a good one once gets the details and the
    // server's own proof; its replay, and a proof made with another secret, get the bare
    // status and no proof.
    let ask = |challenge: &ProbeChallenge| {
        client
            .get(&health)
            .header(PROBE_NONCE_HEADER, challenge.nonce())
            .header(PROBE_PROOF_HEADER, challenge.proof())
            .send()
    };
    let good = ProbeChallenge::new(SECRET, unix_now()).unwrap();
    for (challenge, proven) in [
        (&good, true),
        (&good, false),
        (
            &ProbeChallenge::new("another-secret-0123456789", unix_now()).unwrap(),
            false,
        ),
    ] {
        let answer = ask(challenge).await.unwrap();
        let status = answer.status().as_u16();
        let proof = answer.headers().get(PROBE_ANSWER_HEADER).cloned();
        let body = answer.bytes().await.unwrap();
        let details = String::from_utf8_lossy(&body).contains(&a.identity.client_id);
        assert_eq!((status, details, proof.is_some()), (200, proven, proven));
        if let Some(proof) = proof {
            assert!(challenge.verifies(status, &body, proof.as_bytes()));
        }
    }
    // SIGTERM, as Kubernetes stops a container.
    assert_eq!(stop(child), Some(0));
    // Nothing listens now: the probe says so.
    let probe = Command::new(BIN)
        .args(["probe", "--url", &health])
        .output()
        .unwrap();
    assert_eq!(probe.status.code(), Some(7), "{probe:?}");
}

fn unix_now() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(now.unwrap().as_secs()).unwrap()
}

/// While the sidecar is down, another process may hold its port: the probe given the
/// secret sends it no secret, and fails, whatever that process answers.
#[test]
fn a_squatter_on_the_port_learns_no_secret_and_the_probe_fails_against_it() {
    use std::io::{Read, Write};
    let dir = TempDir::new("cli-probe-squatter");
    let secret_file = dir.join("identity-header");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    // Two squatters: one answers 200 "ready"; one echoes the probe's own proof back as
    // the server's.
    for echo in [false, true] {
        let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/healthz", squatter.local_addr().unwrap());
        let heard = std::thread::spawn(move || {
            let (mut stream, _) = squatter.accept().unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut heard = Vec::new();
            let mut chunk = [0u8; 4096];
            while !heard.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut chunk).unwrap();
                assert!(n > 0, "the probe closed before its head ended");
                heard.extend_from_slice(&chunk[..n]);
            }
            let text = String::from_utf8_lossy(&heard).into_owned();
            let proof = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("x-msi-probe-proof: ")
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            let body = r#"{"status":"ready"}"#;
            let extra = if echo {
                format!("x-msi-probe-answer: {proof}\r\n")
            } else {
                String::new()
            };
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).unwrap();
            heard
        });
        let probe = Command::new(BIN)
            .args(["probe", "--url", &url, "--secret-file"])
            .arg(&secret_file)
            .output()
            .unwrap();
        let heard = heard.join().unwrap();
        assert!(
            !heard.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "the squatter heard the secret: {}",
            String::from_utf8_lossy(&heard)
        );
        assert_eq!(probe.status.code(), Some(7), "{probe:?}");
        let stderr = String::from_utf8_lossy(&probe.stderr);
        assert!(
            stderr.contains("did not prove it holds the secret"),
            "{stderr}"
        );
    }
}

#[test]
fn serve_refuses_a_non_loopback_address_and_a_missing_secret() {
    let dir = TempDir::new("cli-serve-refusals");
    let file = dir.join("identity");
    std::fs::write(&file, "{}").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--secret-env", "S", "--listen", "0.0.0.0:50342"])
        .arg(&file)
        .env("S", SECRET)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = Command::new(BIN).arg("serve").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--secret-file"));
    let out = Command::new(BIN)
        .args([
            "serve",
            "--secret-env",
            "UNSET_SECRET_VARIABLE_FOR_THIS_TEST",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not set"));
    // Limits beyond what the server can honour are usage errors, not a panic later.
    for (option, value) in [
        ("--max-connections", "2305843009213693952"),
        ("--max-connections", "0"),
        ("--first-byte-timeout", "0s"),
        ("--idle-timeout", "0s"),
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--secret-env", "S", option, value])
            .arg(&file)
            .env("S", SECRET)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {out:?}");
    }
}

/// One resource Entra refuses, asked for 50 times: one request reaches Entra and one
/// warning reaches the log (the failure is remembered; the server logs no line of its own
/// per answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_resource_asked_for_again_and_again_costs_one_request_and_one_warning() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("cli-serve-refused");
    let ca = EntraServer::write_ca_pem(dir.path());
    let stderr_path = dir.join("stderr.log");
    let _refusal = serving::refuse(&entra, "api://refused");
    let mut command = Command::new(BIN);
    command
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let (child, serving) = spawn_serve_in(command, &a, &ca, &[]);
    let endpoint = serving["endpoint"].as_str().unwrap().to_owned();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for _ in 0..50 {
        let answer = client
            .get(format!(
                "{endpoint}?api-version=2019-08-01&resource=api://refused"
            ))
            .header("X-IDENTITY-HEADER", SECRET)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403);
    }
    assert_eq!(stop(child), Some(0));
    assert_eq!(serving::posts(&entra, "api://refused"), 1);
    let log = std::fs::read_to_string(&stderr_path).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
}

/// A flood of connections on the metrics port of a process with few descriptors (256):
/// the token listener keeps answering, a scrape still gets through, and stderr stays
/// small (no log line per failed accept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_on_the_metrics_port_leaves_the_token_server_answering() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("cli-serve-metrics-flood");
    let ca = EntraServer::write_ca_pem(dir.path());
    let stderr_path = dir.join("stderr.log");
    let metrics_port = support::free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mut limited = Command::new("bash");
    limited
        .args(["-c", "ulimit -n 256 && exec \"$0\" \"$@\"", BIN])
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let (child, serving) = spawn_serve_in(limited, &a, &ca, &["--metrics", &metrics]);
    let endpoint = serving["endpoint"].as_str().unwrap().to_owned();
    let token_url = format!("{endpoint}?api-version=2019-08-01&resource={ARM}");
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let token = || {
        client
            .get(&token_url)
            .header("X-IDENTITY-HEADER", SECRET)
            .send()
    };
    assert_eq!(token().await.unwrap().status(), 200);
    // 400 connections that send nothing, held open: more than the process's descriptors.
    let held = tokio::task::spawn_blocking(move || {
        (0..400)
            .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", metrics_port)).ok())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert!(held.len() > 300, "{} connections made", held.len());
    for _ in 0..10 {
        let answer = token()
            .await
            .expect("the token server answers during the flood");
        assert_eq!(answer.status(), 200);
    }
    let scrape = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .expect("a scrape gets through the flood");
    assert_eq!(scrape.status(), 200);
    drop(held);
    assert_eq!(stop(child), Some(0));
    let stderr = std::fs::metadata(&stderr_path).unwrap().len();
    assert!(stderr < 64 * 1024, "stderr grew to {stderr} bytes");
}

/// `serve --metrics ADDR`: a scrape of its own listener, after a token answered and a
/// request refused, that Python's `prometheus_client` parser accepts, with the answers by
/// status and the token request by outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_metrics_answer_a_scrape_a_prometheus_parser_accepts() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("cli-serve-metrics");
    let ca = EntraServer::write_ca_pem(dir.path());
    let metrics_port = support::free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let (child, serving) = spawn_serve(&a, &ca, &["--metrics", &metrics]);
    let endpoint = serving["endpoint"].as_str().unwrap().to_owned();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let token_url = format!("{endpoint}?api-version=2019-08-01&resource={ARM}");
    let ok = client
        .get(&token_url)
        .header("X-IDENTITY-HEADER", SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let refused = client.get(&token_url).send().await.unwrap();
    assert_eq!(refused.status(), 401);

    // A refused file, then a rotation to a newer one without renewal times (its renewal
    // gauges NaN): seen in the scrape once counted.
    let mut a = a;
    let id = a.identity.client_id.clone();
    let id = &id;
    a.mount.rotate(b"{ not json");
    let scrape = || async {
        client
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let counted = |text: &str, outcome: &str| {
        text.lines().any(|l| {
            l.starts_with(&format!(
                "msi_dataplane_reloads_total{{client_id=\"{id}\",outcome=\"{outcome}\""
            )) && l.ends_with(" 1")
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !counted(&scrape().await, "kept_last_good") {
        assert!(std::time::Instant::now() < deadline, "no refusal counted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let next = msi_dataplane_testing::TestCertificate::builder()
        .renewing(&a.certificate)
        .self_signed();
    entra.register(&a.identity, &next);
    let mut file =
        a.identity
            .credentials(&next, &entra.base_url(), msi_dataplane::BundleFormat::Pem);
    file.renew_after = None;
    file.cannot_renew_after = None;
    a.mount.rotate_credentials(&file);
    while !counted(&scrape().await, "swapped") {
        assert!(std::time::Instant::now() < deadline, "no rotation counted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The rotated-in credential fetches its token ahead in the background: wait for it.
    let fetched_ahead = format!(
        "msi_dataplane_token_requests_total{{client_id=\"{id}\",outcome=\"success\",error_code=\"none\"}} 2"
    );
    while !scrape().await.contains(&fetched_ahead) {
        assert!(
            std::time::Instant::now() < deadline,
            "no token fetched ahead"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let text = scrape().await;
    support::promtool::check_metrics(&text);
    assert!(
        text.contains(&format!(
            "msi_dataplane_credential_renew_after_timestamp_seconds{{client_id=\"{id}\"}} NaN"
        )),
        "{text}"
    );
    let samples = support::python::prometheus_samples(&text).join("\n");
    for want in [
        "counter msi_dataplane_serve_requests_total{status=\"200\"} 1.0".to_owned(),
        "counter msi_dataplane_serve_requests_total{status=\"401\"} 1.0".to_owned(),
        format!(
            // The token answered, and the one fetched ahead with the rotated-in credential.
            "counter msi_dataplane_token_requests_total{{client_id=\"{id}\",error_code=\"none\",outcome=\"success\"}} 2.0"
        ),
    ] {
        assert!(
            samples.lines().any(|l| l == want),
            "{want} not in:\n{samples}\n{text}"
        );
    }
    // Histograms come with buckets, as Prometheus reads them.
    assert!(
        samples.contains("histogram msi_dataplane_token_request_duration_seconds_bucket{"),
        "{samples}"
    );
    assert!(!text.contains(SECRET), "the secret in a scrape");

    assert_eq!(stop(child), Some(0));
}
