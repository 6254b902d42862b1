//! The token server and the metrics listener under abuse from inside the pod (or another
//! pod): a flood without the secret, idle and silent connections holding slots, heads at
//! and past the limits, absolute-form targets and proxy headers, resources outside an
//! allow-list. Each test asserts what the legitimate client gets; counts and durations are
//! small enough for CI.
#![cfg(unix)]

use crate::serving;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use msi_credential::serve::{MetricsServer, MetricsServerOptions, ServeOptions};
use msi_dataplane::ClientCertificateCredentialOptions;
use msi_dataplane_testing::EntraServer;
use serving::{ARM, Mounted, SECRET, one_identity, raw, start, token_request};

/// A blocking connection that has sent `sent` and nothing more.
fn hold(addr: SocketAddr, sent: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(sent).unwrap();
    stream
}

/// Whether the server closed `stream` within `within` (a read ends or fails).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_without_the_secret_costs_the_legitimate_client_nothing() {
    let (_entra, _a, server) = one_identity(ServeOptions::default()).await;
    let endpoint = server.endpoint();
    let url = format!("{endpoint}?api-version=2019-08-01&resource={ARM}");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = |secret: Option<&str>| {
        let request = client.get(&url);
        match secret {
            Some(secret) => request.header("X-IDENTITY-HEADER", secret),
            None => request,
        }
    };
    assert_eq!(get(Some(SECRET)).send().await.unwrap().status(), 200);
    // The flood: four tasks without the secret, as fast as the server answers.
    let stop = Arc::new(AtomicBool::new(false));
    let (refused, other) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut flood = Vec::new();
    for _ in 0..4 {
        let (stop, refused, other, url) =
            (stop.clone(), refused.clone(), other.clone(), url.clone());
        flood.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            while !stop.load(Ordering::Relaxed) {
                match client.get(&url).send().await.map(|r| r.status().as_u16()) {
                    Ok(401) => refused.fetch_add(1, Ordering::Relaxed),
                    _ => other.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The legitimate client, the probe, and a new resource while the flood runs.
    let mut statuses = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        statuses.push(get(Some(SECRET)).send().await.unwrap().status().as_u16());
    }
    let health = client
        .get(server.health_url())
        .header("X-IDENTITY-HEADER", SECRET)
        .send()
        .await
        .unwrap();
    let fresh = client
        .get(format!(
            "{endpoint}?api-version=2019-08-01&resource=api://fresh"
        ))
        .header("X-IDENTITY-HEADER", SECRET)
        .send()
        .await
        .unwrap()
        .status();
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.await.unwrap();
    }
    // The refusals' budget (bursts of 100, 50 a second) answered at once; past it each
    // refusal held back a second, so four flooders got about one a second each.
    let (refused, other) = (
        refused.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    assert!(
        refused >= 100,
        "the budget's refusals: {refused} ({other} other)"
    );
    assert!(
        refused < 400,
        "past the budget the flood waits: {refused} refusals"
    );
    assert!(statuses.len() > 20, "{} legitimate answers", statuses.len());
    assert!(
        statuses.iter().all(|s| *s == 200),
        "every legitimate request answered with a token: {statuses:?}"
    );
    assert_eq!(health.status(), 200, "the probe is never limited by others");
    assert!(
        health.headers().get("connection").is_none(),
        "the probe (with the secret) is not held back and closed"
    );
    assert_eq!(fresh, 200, "a cache miss still has its budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_hold_every_slot() {
    // A long first-byte timeout: what frees the slots here is closing the oldest idle.
    let options = ServeOptions::default()
        .with_max_connections(16)
        .with_first_byte_timeout(Duration::from_secs(60))
        .with_idle_timeout(Duration::from_secs(60));
    let (_entra, _a, server) = one_identity(options).await;
    let addr = server.local_addr();
    let mut held = tokio::task::spawn_blocking(move || {
        let mut held: Vec<TcpStream> = (0..8).map(|_| hold(addr, b"")).collect();
        held.extend((0..8).map(|_| hold(addr, b"GET /msi/token HTTP/1.1\r\nHost: 127.0")));
        // Two keep-alive connections that finished a request and stay open.
        for _ in 0..2 {
            let mut stream = hold(addr, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            let mut buf = [0u8; 512];
            assert!(stream.read(&mut buf).unwrap() > 0);
            held.push(stream);
        }
        held
    })
    .await
    .unwrap();
    // Every slot is taken (18 > 16): new requests still get their answer at once.
    for _ in 0..5 {
        let started = Instant::now();
        let answer = raw(addr, token_request(&server, ARM, "", SECRET)).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let closed = tokio::task::spawn_blocking(move || {
        held.iter_mut()
            .map(|s| closed_within(s, Duration::from_millis(200)))
            .filter(|closed| *closed)
            .count()
    })
    .await
    .unwrap();
    // 18 held against 16 slots: two closed on arrival, one more for the first request
    // (the others found the slot that one freed).
    assert!(
        closed >= 3,
        "idle connections closed for new ones: {closed}"
    );
}

/// Send `head` on a keep-alive connection and read one answer; its status.
fn exchange(stream: &mut TcpStream, head: &str) -> std::io::Result<u16> {
    write!(stream, "{head}\r\n\r\n")?;
    serving::read_answer(stream).map(|(status, _, _)| status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_connections_without_the_secret_closes_its_own_not_the_clients() {
    let options = ServeOptions::default()
        .with_max_connections(8)
        .with_first_byte_timeout(Duration::from_secs(60));
    let (_entra, _a, server) = one_identity(options).await;
    let addr = server.local_addr();
    let request = token_request(&server, ARM, "", SECRET);
    let no_secret =
        format!("GET /msi/token?api-version=2019-08-01&resource={ARM} HTTP/1.1\r\nHost: {addr}");
    let statuses = tokio::task::spawn_blocking(move || {
        // Four clients with the secret, each on a keep-alive connection of its own.
        let mut clients: Vec<TcpStream> = (0..4).map(|_| hold(addr, b"")).collect();
        let mut statuses = Vec::new();
        for client in &mut clients {
            statuses.push(exchange(client, &request).unwrap());
        }
        // Forty connections without the secret: twenty silent, twenty refused and kept.
        let mut flood: Vec<TcpStream> = (0..20).map(|_| hold(addr, b"")).collect();
        for _ in 0..20 {
            let mut stream = hold(addr, b"");
            let _ = exchange(&mut stream, &no_secret);
            flood.push(stream);
        }
        // The clients' connections are still open and answer.
        for client in &mut clients {
            statuses.push(exchange(client, &request).expect("the client's connection stays open"));
        }
        statuses
    })
    .await
    .unwrap();
    assert_eq!(statuses, [200; 8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_first_byte_timeout() {
    let options = ServeOptions::default().with_first_byte_timeout(Duration::from_millis(300));
    let (_entra, _a, server) = one_identity(options).await;
    let addr = server.local_addr();
    let closed = tokio::task::spawn_blocking(move || {
        let mut silent = hold(addr, b"");
        closed_within(&mut silent, Duration::from_secs(10))
    })
    .await
    .unwrap();
    assert!(closed, "a connection that sends nothing is closed");
    // One that sends its request at once is answered.
    let answer = raw(addr, token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(answer.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_past_the_limits_get_the_json_refusal() {
    let (_entra, _a, server) = one_identity(ServeOptions::default()).await;
    let addr = server.local_addr();
    let request = token_request(&server, ARM, "", SECRET);
    let many: String = (0..100).map(|i| format!("\r\nX-Extra-{i}: {i}")).collect();
    let answer = raw(addr, format!("{request}{many}")).await;
    assert_eq!(answer.status, 431);
    assert_eq!(answer.body["statusCode"], 431, "{answer:?}");
    let big = format!("\r\nX-Big: {}", "b".repeat(20 * 1024));
    let answer = raw(addr, format!("{request}{big}")).await;
    assert_eq!(answer.status, 431);
    assert_eq!(answer.body["error"], "request_header_fields_too_large");
    let long = format!(
        "GET /msi/token?api-version=2019-08-01&resource={ARM}&x={} HTTP/1.1\r\nHost: {addr}",
        "q".repeat(30 * 1024)
    );
    let answer = raw(addr, long).await;
    assert_eq!(answer.status, 414);
    assert_eq!(answer.body["error"], "uri_too_long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_targets_and_proxy_headers_are_judged() {
    let (_entra, _a, server) = one_identity(ServeOptions::default()).await;
    let addr = server.local_addr();
    let query = format!("/msi/token?api-version=2019-08-01&resource={ARM}");
    let absolute = |authority: String| {
        format!(
            "GET http://{authority}{query} HTTP/1.1\r\nHost: {addr}\r\nX-IDENTITY-HEADER: {SECRET}"
        )
    };
    let foreign = raw(addr, absolute("evil.example".to_owned())).await;
    assert_eq!(
        (foreign.status, foreign.body["error"].as_str()),
        (421, Some("misdirected_request"))
    );
    let ours = raw(addr, absolute(addr.to_string())).await;
    assert_eq!(ours.status, 200, "{ours:?}");
    for header in [
        "Via: 1.1 proxy",
        "X-Real-IP: 10.0.0.1",
        "X-Forwarded-Host: evil.example",
    ] {
        let proxied = raw(
            addr,
            format!("{}\r\n{header}", token_request(&server, ARM, "", SECRET)),
        )
        .await;
        assert_eq!(proxied.status, 403, "{header}");
        assert_eq!(proxied.body["error"], "forwarded_request");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_outside_the_allow_list_never_reach_the_token_endpoint() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let served = a
        .serve(&entra, Default::default())
        .await
        .with_allowed_resources(["https://management.azure.com", "api://allowed/.default"]);
    let server = start(vec![served], ServeOptions::default()).await;
    let addr = server.local_addr();
    for allowed in [ARM, "https://management.azure.com", "api://allowed"] {
        let answer = raw(addr, token_request(&server, allowed, "", SECRET)).await;
        assert_eq!(answer.status, 200, "{allowed}: {answer:?}");
    }
    let before = entra.requests().len();
    for other in [
        "https://vault.azure.net",
        "api://allowed/other",
        "api://x-0",
    ] {
        let answer = raw(addr, token_request(&server, other, "", SECRET)).await;
        assert_eq!(answer.status, 403, "{other}");
        assert_eq!(answer.body["error"], "resource_not_allowed");
    }
    assert_eq!(
        entra.requests().len(),
        before,
        "no request for a refused resource"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_identity_caches_a_bounded_number_of_resources_and_remembers_failures() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let client = ClientCertificateCredentialOptions::default().with_max_cached_scopes(4);
    let server = start(vec![a.serve(&entra, client).await], ServeOptions::default()).await;
    let addr = server.local_addr();
    let posts = |resource: &str| serving::posts(&entra, resource);
    for i in 0..10 {
        let resource = format!("api://bounded-{i}");
        let answer = raw(addr, token_request(&server, &resource, "", SECRET)).await;
        assert_eq!(answer.status, 200);
    }
    // The most recent is cached; the first left when the bound of 4 was passed.
    for resource in ["api://bounded-9", "api://bounded-0"] {
        let answer = raw(addr, token_request(&server, resource, "", SECRET)).await;
        assert_eq!(answer.status, 200);
    }
    assert_eq!(posts("api://bounded-9"), 1, "still cached");
    assert_eq!(posts("api://bounded-0"), 2, "evicted, asked again");
    // A resource Entra refuses, asked for 50 times in a row: one request reaches Entra.
    let _refusal = serving::refuse(&entra, "api://refused");
    for _ in 0..50 {
        let answer = raw(addr, token_request(&server, "api://refused", "", SECRET)).await;
        assert_eq!(answer.status, 403);
        assert_eq!(answer.body["error"], "AADSTS70011");
    }
    assert_eq!(posts("api://refused"), 1, "the failure is remembered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_answers_get_metrics_only_and_survives_a_connection_flood() {
    let options = MetricsServerOptions::new("127.0.0.1:0".parse().unwrap())
        .with_max_connections(8)
        .with_first_byte_timeout(Duration::from_secs(60));
    let metrics = MetricsServer::start(options, || "up 1\n".to_owned())
        .await
        .unwrap();
    let addr = metrics.local_addr();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let scrape = client.get(metrics.url()).send().await.unwrap();
    assert_eq!(scrape.status(), 200);
    assert_eq!(
        scrape.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(scrape.text().await.unwrap(), "up 1\n");
    let other = client.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(other.status(), 404);
    let post = client.post(metrics.url()).send().await.unwrap();
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()["allow"], "GET");
    // Fifty silent connections against a cap of 8: a scrape still gets through.
    let _held: Vec<TcpStream> =
        tokio::task::spawn_blocking(move || (0..50).map(|_| hold(addr, b"")).collect())
            .await
            .unwrap();
    let fresh = reqwest::Client::builder().no_proxy().build().unwrap();
    let scrape = tokio::time::timeout(Duration::from_secs(10), fresh.get(metrics.url()).send())
        .await
        .expect("a scrape is answered while idle connections hold every slot")
        .unwrap();
    assert_eq!(scrape.status(), 200);
}
