//! Soak (ignored; run by hand, not in CI): continuous token requests over keep-alive
//! connections to the token server while the CSI driver rotates the credential every few
//! seconds, for 10 minutes (`MSI_SERVE_SOAK_SECS` to change it). Every request must
//! succeed, every token after a rotation must come from the new certificate within a few
//! requests, and resident memory must stay flat (the last minute's average within 16 MiB
//! of the second minute's).
//!
//! `cargo test --release -p msi-credential --test it serve_soak -- --ignored --nocapture`
#![cfg(target_os = "linux")]

use crate::serving;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use msi_credential::serve::ServeOptions;
use msi_dataplane_testing::{EntraServer, wait_for_certificate};
use serving::{ARM, Mounted, SECRET, start};

const CONNECTIONS: usize = 8;
const ROTATE_EVERY: Duration = Duration::from_secs(3);

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 10-minute soak, run by hand"]
async fn ten_minutes_of_requests_through_rotations_every_few_seconds() {
    let secs: u64 = std::env::var("MSI_SERVE_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let entra = EntraServer::start().await;
    let mut a = Mounted::new(&entra);
    let served = a.serve(&entra, Default::default()).await;
    let credential = served.credential().clone();
    let server = start(
        vec![served],
        ServeOptions::default().with_max_token_requests_per_second(None),
    )
    .await;
    let url = format!(
        "{}?api-version=2019-08-01&resource={ARM}",
        server.endpoint()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let (url, stop, ok, failed) = (url.clone(), stop.clone(), ok.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let answer = client
                    .get(&url)
                    .header("x-identity-header", SECRET)
                    .send()
                    .await;
                match answer {
                    Ok(answer) if answer.status() == 200 => {
                        let _ = answer.bytes().await;
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("failed request: {other:?}");
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut rotations = 0u32;
    let checker = reqwest::Client::builder().no_proxy().build().unwrap();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(ROTATE_EVERY).await;
        let next = a.rotate(&entra);
        wait_for_certificate(&credential, &next, Duration::from_secs(30)).await;
        rotations += 1;
        // The served token comes from the new certificate within a few requests (the
        // prefetch is in flight just after the swap).
        let mut from_new = false;
        for _ in 0..200 {
            let body = checker
                .get(&url)
                .header("x-identity-header", SECRET)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let json: serde_json::Value = serde_json::from_str(&body).unwrap();
            let issued = entra
                .issued(json["access_token"].as_str().unwrap())
                .unwrap();
            if issued.cert_sha256_hex == next.sha256_hex() {
                from_new = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            from_new,
            "rotation {rotations}: still served the old certificate's token"
        );
        samples.push((started.elapsed().as_secs(), rss_kib()));
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let window = |from: u64, to: u64| {
        let in_window: Vec<u64> = samples
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, rss)| *rss)
            .collect();
        in_window.iter().sum::<u64>() / in_window.len().max(1) as u64
    };
    let early = window(60.min(secs / 4), 120.min(secs / 2));
    let late = window(secs.saturating_sub(60), secs + 60);
    println!(
        "soak: {secs} s, {rotations} rotations, {ok} requests ok, {failed} failed, \
         {:.0} req/s; RSS second minute {early} KiB, last minute {late} KiB",
        ok as f64 / secs as f64
    );
    assert_eq!(failed, 0);
    assert!(rotations as u64 >= secs / 5, "{rotations} rotations");
    assert!(
        late <= early + 16 * 1024,
        "RSS grew from {early} KiB to {late} KiB"
    );
}
