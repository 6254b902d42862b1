//! Load on the token server: cached answers over keep-alive HTTP/1.1 on loopback,
//! against a minimal hyper server returning a fixed body (the same bytes as a token
//! answer), with the same client and connection count. A load generator of its own:
//! `CONNECTIONS` client connections, each sending its next request as soon as the last
//! answer is read, for `SECONDS`; every latency is kept for the percentiles.
//!
//! Then the token server again while each flood a container in the pod can send runs
//! beside it, on a runtime of its own (one thread, as another process would compete for
//! the CPU), reconnecting whenever the server closes one of its connections: the
//! legitimate client's p99 flooded against alone, for each.
//!
//! - `no_secret`: token requests without the secret, `CONNECTIONS` connections, each
//!   request sent when the last answer is read;
//! - `never_reading`: 512 connections (the server's cap) pipelining the health check
//!   without the secret and never reading;
//! - `healthz_pipelined`: the health check without the secret, 64 requests pipelined at
//!   a time on each of `CONNECTIONS` connections;
//! - `metrics_404`: the same on the metrics listener, for a path it does not serve;
//! - `orphaning`: 1,024 connections (twice the cap) with the secret and a 4 KiB receive
//!   buffer, each pipelining 20 cached-token requests (answers that fit the server's
//!   send buffer) and never reading, so that the server evicts them: the peak of the
//!   bytes the kernel queues for the server's connections is printed beside the p99.
//!
//! `cargo bench -p msi-credential --bench serve` (10 s per server, alternated
//! five times); under `cargo test --benches` each runs for a moment only. Results in
//! BENCHMARKS.md.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use msi_credential::serve::{
    IdentityHeaderSecret, MetricsServer, MetricsServerOptions, ServeOptions, ServedIdentity,
    TokenServer,
};
use msi_dataplane::{BundleFormat, ClientCertificateCredentialOptions, Environment, ReloadOptions};
use msi_dataplane_testing::{CsiMount, EntraServer, TestCertificate, TestIdentity};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const CONNECTIONS: usize = 16;
const SECRET: &str = "bench-identity-header-secret-0123456789";

/// What one run measured.
struct Run {
    requests: usize,
    /// Connections the server closed under the client, opened again.
    reconnections: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// `CONNECTIONS` keep-alive connections to `addr`, each sending `request` (a path and
/// query) back to back for `duration`. A connection the server closes (evicted past its
/// cap) is opened again and the request sent again, as the SDKs do: its latency counts
/// from the first attempt, and the reconnections are counted.
async fn load(addr: SocketAddr, target: &str, duration: Duration) -> Run {
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let target = target.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut sender = None;
            let mut reconnections = 0;
            while Instant::now() < deadline {
                let started = Instant::now();
                loop {
                    let ready = match sender.take() {
                        Some(ready) => ready,
                        None => {
                            let Ok(stream) = TcpStream::connect(addr).await else {
                                reconnections += 1;
                                continue;
                            };
                            let _ = stream.set_nodelay(true);
                            let io = TokioIo::new(stream);
                            let Ok((ready, conn)) = hyper::client::conn::http1::handshake(io).await
                            else {
                                reconnections += 1;
                                continue;
                            };
                            tokio::spawn(conn);
                            ready
                        }
                    };
                    let mut ready: hyper::client::conn::http1::SendRequest<Empty<Bytes>> = ready;
                    let request = Request::get(&target)
                        .header("host", addr.to_string())
                        .header("x-identity-header", SECRET)
                        .header("metadata", "true")
                        .body(Empty::<Bytes>::new())
                        .unwrap();
                    let Ok(response) = ready.send_request(request).await else {
                        reconnections += 1;
                        continue;
                    };
                    assert_eq!(response.status(), 200);
                    let Ok(body) = response.into_body().collect().await else {
                        reconnections += 1;
                        continue;
                    };
                    assert!(!body.to_bytes().is_empty());
                    sender = Some(ready);
                    break;
                }
                latencies.push(started.elapsed());
            }
            (latencies, reconnections)
        }));
    }
    let started = Instant::now();
    let (mut all, mut reconnections) = (Vec::new(), 0);
    for task in tasks {
        let (latencies, again) = task.await.unwrap();
        all.extend(latencies);
        reconnections += again;
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let at = |q: f64| all[((all.len() - 1) as f64 * q) as usize];
    Run {
        requests: all.len(),
        reconnections,
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// A flood without the secret: `connections` connections sending `target` with no
/// identity header back to back until `stop`, reconnecting whenever the server closes
/// one; the number of answers.
async fn flood(
    addr: SocketAddr,
    target: String,
    connections: usize,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (target, stop) = (target.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut answered = 0;
            while !stop.load(Ordering::Relaxed) {
                let Ok(stream) = TcpStream::connect(addr).await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let Ok((mut sender, conn)) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
                else {
                    continue;
                };
                tokio::spawn(conn);
                while !stop.load(Ordering::Relaxed) {
                    let request = Request::get(&target)
                        .header("host", addr.to_string())
                        .body(Empty::<Bytes>::new())
                        .unwrap();
                    let Ok(response) = sender.send_request(request).await else {
                        break;
                    };
                    assert_eq!(response.status(), 401);
                    let _ = response.into_body().collect().await;
                    answered += 1;
                    if sender.ready().await.is_err() {
                        break;
                    }
                }
            }
            answered
        }));
    }
    let mut answered = 0;
    for task in tasks {
        answered += task.await.unwrap_or(0);
    }
    answered
}

/// A flood of `request` pipelined 64 at a time on each of `connections` connections,
/// reading the answers, until `stop`, reconnecting whenever the server closes one; the
/// number of answers.
async fn flood_pipelined(
    addr: SocketAddr,
    request: String,
    connections: usize,
    stop: Arc<AtomicBool>,
) -> usize {
    let burst = request.repeat(64);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (burst, stop) = (burst.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut answered = 0;
            let mut buf = vec![0u8; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(addr).await else {
                    continue;
                };
                'connection: while !stop.load(Ordering::Relaxed) {
                    if stream.write_all(burst.as_bytes()).await.is_err() {
                        break;
                    }
                    let mut seen = 0;
                    while seen < 64 {
                        let read =
                            tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buf));
                        match read.await {
                            Ok(Ok(0)) | Ok(Err(_)) => break 'connection,
                            Ok(Ok(n)) => {
                                seen += buf[..n].windows(9).filter(|w| w == b"HTTP/1.1 ").count();
                            }
                            Err(_) => break,
                        }
                    }
                    answered += seen;
                }
            }
            answered
        }));
    }
    let mut answered = 0;
    for task in tasks {
        answered += task.await.unwrap_or(0);
    }
    answered
}

/// Clients that never read: `connections` connections, each writing `pipeline` (within
/// 100 ms) and holding the connection unread, with a receive buffer of `receive_buffer`
/// bytes when given; when the server closes one (a write to it fails), another takes its
/// place, until `stop`. The connections the server closed.
async fn flood_never_reading(
    addr: SocketAddr,
    pipeline: String,
    receive_buffer: Option<u32>,
    connections: usize,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (pipeline, stop) = (pipeline.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut closed = 0;
            while !stop.load(Ordering::Relaxed) {
                let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
                    continue;
                };
                if let Some(bytes) = receive_buffer {
                    let _ = socket.set_recv_buffer_size(bytes);
                }
                let Ok(mut stream) = socket.connect(addr).await else {
                    continue;
                };
                let _ = tokio::time::timeout(
                    Duration::from_millis(100),
                    stream.write_all(pipeline.as_bytes()),
                )
                .await;
                // Held open, never read, until the server closes it: a write then fails.
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    match stream.try_write(b"\r\n") {
                        Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                            closed += 1;
                            break;
                        }
                        _ => {}
                    }
                }
            }
            closed
        }));
    }
    let mut closed = 0;
    for task in tasks {
        closed += task.await.unwrap_or(0);
    }
    closed
}

/// The bytes the kernel queues for the connections whose local port is `port` (the
/// listener left out): answers not yet taken by the peers, and requests not yet read by
/// the server. From `/proc/net/tcp` (Linux; zeros elsewhere).
fn queued_bytes(port: u16) -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let (mut send, mut receive) = (0, 0);
    for row in text.lines().skip(1) {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let local = fields.get(1).and_then(|f| f.rsplit(':').next());
        if local.and_then(|p| u16::from_str_radix(p, 16).ok()) != Some(port) || fields[3] == "0A" {
            continue;
        }
        if let Some((tx, rx)) = fields.get(4).and_then(|f| f.split_once(':')) {
            send += u64::from_str_radix(tx, 16).unwrap_or(0);
            receive += u64::from_str_radix(rx, 16).unwrap_or(0);
        }
    }
    (send, receive)
}

/// The CPU time (clock ticks, 100 a second) of this process's threads, summed by thread
/// name (Linux; empty elsewhere).
fn thread_cpu() -> Vec<(String, u64)> {
    let mut by_name: Vec<(String, u64)> = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks: u64 =
            fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
        match by_name.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += ticks,
            None => by_name.push((name, ticks)),
        }
    }
    by_name.sort();
    by_name
}

/// The baseline: hyper answering every request with the same fixed bytes.
async fn fixed_body_server(body: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let body = body.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let body = body.clone();
                    async move {
                        let mut response = Response::new(Full::new(body));
                        response.headers_mut().insert(
                            "content-type",
                            "application/json; charset=utf-8".parse().unwrap(),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (seconds, rounds) = if bench { (10, 5) } else { (0, 1) };
    // For a quick look at one flood: MSI_BENCH_ROUNDS, MSI_BENCH_SECONDS, MSI_BENCH_FLOODS
    // (comma-separated names).
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let (seconds, rounds) = (
        env("MSI_BENCH_SECONDS").unwrap_or(seconds),
        env("MSI_BENCH_ROUNDS").unwrap_or(rounds),
    );
    let duration = Duration::from_secs(seconds).max(Duration::from_millis(200));
    // Servers on a runtime of two workers, the load generator on another.
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-server")
        .enable_all()
        .build()
        .unwrap();
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap();
    let (token_server, _entra, _mount, baseline, metrics) = servers.block_on(async {
        let entra = EntraServer::start().await;
        let (identity, cert) = (TestIdentity::new(), TestCertificate::self_signed());
        entra.register(&identity, &cert);
        let file = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
        let mount = CsiMount::with_credentials(&file);
        let client = ClientCertificateCredentialOptions::default()
            .with_environment(Environment::default().with_http_client(entra.client()));
        let served = ServedIdentity::load(mount.visible_path(), client, ReloadOptions::default())
            .await
            .unwrap();
        let secret = IdentityHeaderSecret::new(SECRET).unwrap();
        // The rate limit off: it is what is measured against. The other limits are the
        // defaults (512 connections, a write timeout of 5 s).
        let options = ServeOptions::default()
            .with_port(0)
            .with_max_token_requests_per_second(None);
        let server = TokenServer::start(vec![served], secret, options)
            .await
            .unwrap();
        // The baseline answers the same bytes as the token server.
        let target = format!(
            "{}?api-version=2019-08-01&resource=https://management.azure.com/",
            server.endpoint()
        );
        let answer = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(&target)
            .header("x-identity-header", SECRET)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let body = answer.bytes().await.unwrap();
        let baseline = fixed_body_server(body).await;
        // A metrics listener beside it, rendering a scrape of 20 KiB.
        let scrape = "msi_dataplane_example_total{client_id=\"0\"} 1\n".repeat(400);
        let metrics = MetricsServer::start(
            MetricsServerOptions::new("127.0.0.1:0".parse().unwrap()),
            move || scrape.clone(),
        )
        .await
        .unwrap();
        (server, entra, mount, baseline, metrics)
    });
    let target = "/msi/token?api-version=2019-08-01&resource=https://management.azure.com/";
    let show = |name: &str, run: &Run| {
        println!(
            "{name:<28} {:>9.0} req/s  p50 {:>6.1} µs  p99 {:>7.1} µs  ({} requests, {} connections, {} reopened)",
            run.per_second(),
            run.p50.as_secs_f64() * 1e6,
            run.p99.as_secs_f64() * 1e6,
            run.requests,
            CONNECTIONS,
            run.reconnections
        );
    };
    // The flood's own runtime (one thread), so that it competes for the CPU as another
    // process in the pod would.
    let flooder = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-flood")
        .enable_all()
        .build()
        .unwrap();
    let addr = token_server.local_addr();
    let health = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let not_found = format!(
        "GET /nothing HTTP/1.1\r\nHost: {}\r\n\r\n",
        metrics.local_addr()
    );
    let floods = [
        "no_secret",
        "never_reading",
        "healthz_pipelined",
        "metrics_404",
        "orphaning",
    ];
    let token_with_secret =
        format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nx-identity-header: {SECRET}\r\n\r\n");
    let mut ratios = Vec::new();
    let mut p99_ratios: Vec<Vec<f64>> = vec![Vec::new(); floods.len()];
    for _ in 0..rounds {
        let fixed = clients.block_on(load(baseline, target, duration));
        show("serve/fixed_body_hyper", &fixed);
        let served = clients.block_on(load(addr, target, duration));
        show("serve/cached_token", &served);
        ratios.push(served.per_second() / fixed.per_second());
        for (kind, p99s) in floods.iter().zip(&mut p99_ratios) {
            if let Ok(only) = std::env::var("MSI_BENCH_FLOODS")
                && !only.split(',').any(|k| k == *kind)
            {
                continue;
            }
            let cpu_before = thread_cpu();
            let stop = Arc::new(AtomicBool::new(false));
            let flooding = match *kind {
                "no_secret" => {
                    flooder.spawn(flood(addr, target.to_owned(), CONNECTIONS, stop.clone()))
                }
                "never_reading" => {
                    // The health check, up to 64 KiB (what the server's receive window
                    // takes), on 512 connections (the cap).
                    let pipeline = health.repeat(64 * 1024 / health.len());
                    flooder.spawn(flood_never_reading(addr, pipeline, None, 512, stop.clone()))
                }
                // 20 cached-token requests with the secret on 1,024 connections (twice
                // the cap), each with a 4 KiB receive buffer.
                "orphaning" => flooder.spawn(flood_never_reading(
                    addr,
                    token_with_secret.repeat(20),
                    Some(4096),
                    1024,
                    stop.clone(),
                )),
                _ => flooder.spawn(flood_pipelined(
                    metrics.local_addr(),
                    not_found.clone(),
                    CONNECTIONS,
                    stop.clone(),
                )),
            };
            let peak_queued = std::thread::spawn({
                let stop = stop.clone();
                move || {
                    let mut peak = (0, 0, 0);
                    while !stop.load(Ordering::Relaxed) {
                        let (send, receive) = queued_bytes(addr.port());
                        if send + receive > peak.0 {
                            peak = (send + receive, send, receive);
                        }
                        // Reading /proc/net/tcp costs the kernel a walk of every
                        // socket: rarely, so as not to weigh on what is measured.
                        std::thread::sleep(Duration::from_millis(250));
                    }
                    peak
                }
            });
            std::thread::sleep(Duration::from_millis(100));
            let flooded = clients.block_on(load(addr, target, duration));
            stop.store(true, Ordering::Relaxed);
            let (total, send, receive) = peak_queued.join().unwrap_or_default();
            println!(
                "{:<28} {total:>9} bytes queued in the kernel at the peak ({send} to send, \
                 {receive} received unread)",
                format!("serve/{kind}_kernel"),
            );
            let count = flooder.block_on(flooding).unwrap();
            show(&format!("serve/flooded_{kind}"), &flooded);
            let cpu_after = thread_cpu();
            let used: Vec<String> = cpu_after
                .iter()
                .map(|(name, ticks)| {
                    let before = cpu_before
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or(0, |(_, t)| *t);
                    format!(
                        "{name} {:.0}%",
                        (ticks - before) as f64 / duration.as_secs_f64()
                    )
                })
                .collect();
            println!(
                "{:<28} CPU: {}",
                format!("serve/{kind}_cpu"),
                used.join(", ")
            );
            let what = match *kind {
                "never_reading" | "orphaning" => "connections closed by the server",
                _ => "flood answers",
            };
            println!(
                "{:<28} {:>9.0} {what} a second",
                format!("serve/{kind}_flood"),
                count as f64 / duration.as_secs_f64()
            );
            p99s.push(flooded.p99.as_secs_f64() / served.p99.as_secs_f64());
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "serve/cached_token ÷ fixed_body_hyper: {:.2}× (rounds: {ratios:.2?})",
        mean(&ratios)
    );
    for (kind, p99s) in floods.iter().zip(&p99_ratios) {
        println!(
            "serve/cached_token p99, {kind} flood ÷ alone: {:.2}× (rounds: {p99s:.2?})",
            mean(p99s)
        );
    }
}
