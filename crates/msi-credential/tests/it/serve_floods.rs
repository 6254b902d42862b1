//! The token server and the metrics listener under the floods a container in the pod can
//! send, each bounded on both sides: clients that pipeline and never read (the server
//! process's socket memory and RSS, measured from outside, within the documented bound,
//! every such connection closed by the write timeout), a `/healthz` flood without the
//! secret (held to its budget; the probe with the secret always answered in full), a
//! 404 flood and a fast scraper on the metrics port (held to the budget; every other
//! scraper gets 200s from one rendering a second), an Entra outage with a short
//! `Retry-After` (a client retrying exactly at the server's `Retry-After` gets a token), a
//! request joining one in flight (no budget taken), and a refusal flood at `debug` (a
//! bounded log). Outcomes, not timings: every deadline is one that only a failure reaches.
#![cfg(target_os = "linux")]

use crate::serving;

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use msi_credential::serve::{
    MetricsServer, MetricsServerOptions, SOCKET_BUFFER_BYTES, ServeOptions,
};
use msi_dataplane_testing::{EntraServer, Scripted, TempDir};
use serving::{ARM, BIN, Mounted, SECRET, raw, spawn_serve, spawn_serve_in, start, stop};

/// What one connection of the server may hold in the kernel: its send and receive
/// buffers, each twice what it asks for (Linux's bookkeeping), as the docs say.
const KERNEL_BYTES_PER_CONNECTION: u64 = 4 * SOCKET_BUFFER_BYTES as u64;

/// What one connection may hold in the server process (hyper's read and write buffers,
/// the task, the registry entry), as the docs say.
const PROCESS_BYTES_PER_CONNECTION: u64 = 96 * 1024;

/// The server's connections on `port` (sockets whose local port it is, the listening one
/// left out), from `/proc/net/tcp`: each one's state (hex, as the kernel writes it) and
/// the bytes queued for it (`tx_queue` plus `rx_queue`).
fn server_sockets(port: u16) -> Vec<(String, u64)> {
    let mut sockets = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let local_port = fields[1].rsplit(':').next();
            let local_port = local_port.and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port != Some(port) || fields[3] == "0A" {
                continue;
            }
            let (tx, rx) = fields[4].split_once(':').unwrap();
            let queued =
                u64::from_str_radix(tx, 16).unwrap() + u64::from_str_radix(rx, 16).unwrap();
            sockets.push((fields[3].to_owned(), queued));
        }
    }
    sockets
}

/// The bytes queued in the kernel for the server's connections on `port`.
fn queued_bytes(port: u16) -> u64 {
    server_sockets(port).iter().map(|(_, queued)| queued).sum()
}

/// The server's connections on `port` that hold buffers: every state but `TIME-WAIT`
/// and `CLOSE`.
fn server_connections(port: u16) -> usize {
    let holding = |state: &str| !matches!(state, "06" | "07");
    server_sockets(port)
        .iter()
        .filter(|(state, _)| holding(state))
        .count()
}

/// A process's resident memory, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Open a connection and write `request` over and over without reading, until the
/// kernel takes no more (or `most` bytes): a client that pipelines and never reads.
fn pipeline_without_reading(addr: SocketAddr, request: &[u8], most: usize) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut written = 0;
    while written < most {
        match stream.write(request) {
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_pin_bounded_memory_and_are_closed_by_the_write_timeout() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("serve-never-read");
    let ca = EntraServer::write_ca_pem(dir.path());
    // Only the write timeout can close the flood's connections within the test: the
    // first-byte and idle timeouts are far longer.
    let (child, serving) = spawn_serve(
        &a,
        &ca,
        &[
            "--write-timeout",
            "3s",
            "--idle-timeout",
            "300s",
            "--first-byte-timeout",
            "300s",
        ],
    );
    let pid = child.id();
    let endpoint = serving["endpoint"].as_str().unwrap().to_owned();
    let addr: SocketAddr = endpoint
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let token = format!(
        "GET /msi/token?api-version=2019-08-01&resource={ARM} HTTP/1.1\r\nHost: {addr}\r\n\
         X-IDENTITY-HEADER: {SECRET}\r\n\r\n"
    );
    let legitimate = {
        let token = token.clone();
        move || {
            let answer = serving::raw_blocking(addr, token.trim_end().to_owned());
            answer.status
        }
    };
    assert_eq!(legitimate(), 200, "the token is cached before the flood");
    let before = rss_bytes(pid);
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let idle_descriptors = descriptors();

    // 512 connections, the server's cap, pipelining cached-token requests with the secret
    // (answers of 2 KiB each, never budgeted: the most a client can make the server write)
    // and never reading. (Without the secret, the budget closes them sooner: see the
    // health flood below.)
    let flood: Vec<TcpStream> = tokio::task::spawn_blocking({
        let token = token.clone();
        move || {
            (0..512)
                .map(|_| pipeline_without_reading(addr, token.as_bytes(), 1 << 20))
                .collect()
        }
    })
    .await
    .unwrap();
    // While the server writes what it can: its sockets and its memory, at their fullest.
    let (mut most_queued, mut most_rss, mut most_descriptors) = (0, 0, 0);
    let mut answered = Vec::new();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        most_queued = most_queued.max(queued_bytes(addr.port()));
        most_rss = most_rss.max(rss_bytes(pid));
        most_descriptors = most_descriptors.max(descriptors());
        answered.push(
            tokio::task::spawn_blocking(legitimate.clone())
                .await
                .unwrap(),
        );
    }
    let connections = flood.len() as u64 + 1;
    assert!(
        most_queued <= connections * KERNEL_BYTES_PER_CONNECTION,
        "the server's sockets queued {most_queued} bytes for {connections} connections"
    );
    let grown = most_rss.saturating_sub(before);
    assert!(
        grown <= connections * PROCESS_BYTES_PER_CONNECTION,
        "the server grew by {grown} bytes for {connections} connections"
    );
    assert!(
        most_descriptors <= idle_descriptors + 512,
        "{most_descriptors} descriptors open against a cap of 512 connections \
         ({idle_descriptors} before the flood)"
    );
    assert!(
        answered.iter().all(|s| *s == 200),
        "every legitimate request answered with a token: {answered:?}"
    );
    // Every flood connection closed, none of them read: by the write timeout, long before
    // the first-byte and idle timeouts could.
    let deadline = Instant::now() + Duration::from_secs(60);
    while server_connections(addr.port()) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        server_connections(addr.port()),
        0,
        "the server still holds connections of clients that never read"
    );
    assert_eq!(queued_bytes(addr.port()), 0, "and nothing queued for them");
    drop(flood);
    assert_eq!(
        tokio::task::spawn_blocking(legitimate).await.unwrap(),
        200,
        "the server still answers"
    );
    eprintln!(
        "never-reading flood: {most_queued} bytes queued in the server's sockets, RSS {before} -> \
         {most_rss} bytes, {most_descriptors} descriptors ({idle_descriptors} before)"
    );
    assert_eq!(stop(child), Some(0));
}

/// How many HTTP answers `bytes` hold.
fn answers_in(bytes: &[u8]) -> usize {
    bytes.windows(9).filter(|w| w == b"HTTP/1.1 ").count()
}

/// Until `stop`: on each of `connections` connections, pipeline `request` 64 times and
/// read what comes back, reconnecting when the server closes; the answers received.
fn pipelined_flood(
    addr: SocketAddr,
    request: String,
    connections: usize,
    stop: Arc<AtomicBool>,
) -> Arc<AtomicUsize> {
    let answers = Arc::new(AtomicUsize::new(0));
    for _ in 0..connections {
        let (request, stop, answers) = (request.repeat(64), stop.clone(), answers.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(addr) else {
                    continue;
                };
                stream
                    .set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                'connection: while !stop.load(Ordering::Relaxed) {
                    if stream.write_all(request.as_bytes()).is_err() {
                        break;
                    }
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) => break 'connection,
                            Ok(n) => {
                                answers.fetch_add(answers_in(&buf[..n]), Ordering::Relaxed);
                            }
                            Err(e)
                                if e.kind() == ErrorKind::WouldBlock
                                    || e.kind() == ErrorKind::TimedOut =>
                            {
                                break;
                            }
                            Err(_) => break 'connection,
                        }
                    }
                }
            }
        });
    }
    answers
}

/// One keep-alive connection: send `request`, read one answer (status and body); `None`
/// when the server closed the connection (or said it would).
fn keep_alive_exchange(stream: &mut TcpStream, request: &str) -> Option<(u16, String)> {
    stream.write_all(request.as_bytes()).ok()?;
    let (status, head, body) = serving::read_answer(stream).ok()?;
    let open = !head.contains("connection: close");
    open.then(|| (status, String::from_utf8_lossy(&body).into_owned()))
}

/// A flood without the secret on `connections` connections got its budget's burst (100),
/// and no more than the burst, the rate (50 a second) and one held-back answer a second
/// per connection over `seconds` allow.
#[track_caller]
fn held_to_budget(flooded: usize, seconds: usize, connections: usize) {
    assert!(
        flooded > 100,
        "the flood got its budget's answers: {flooded}"
    );
    let bound = 100 + 50 * seconds + connections * seconds + 50;
    assert!(
        flooded <= bound,
        "the flood got {flooded} answers in {seconds} s (at most {bound})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_flood_without_the_secret_is_held_to_its_budget_and_the_probe_never_is() {
    let (_entra, a, server) = serving::one_identity(ServeOptions::default()).await;
    let addr = server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let health = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let flood = pipelined_flood(addr, health, 16, stop.clone());
    let started = Instant::now();
    // The probe, as `msi-credential probe --secret-file` sends it, on one keep-alive
    // connection: every answer the full report, and the connection never closed (an
    // answer past the budget would close it).
    let probe =
        format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nX-IDENTITY-HEADER: {SECRET}\r\n\r\n");
    let client_id = a.identity.client_id.clone();
    let probes = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut answers = Vec::new();
        while started.elapsed() < Duration::from_secs(3) {
            answers.push(keep_alive_exchange(&mut stream, &probe));
            std::thread::sleep(Duration::from_millis(50));
        }
        answers
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let seconds = started.elapsed().as_secs() as usize + 1;
    let flooded = flood.load(Ordering::Relaxed);
    assert!(probes.len() > 10, "{} probes", probes.len());
    for answer in &probes {
        let (status, body) = answer
            .as_ref()
            .expect("the probe's connection is never closed");
        assert_eq!(*status, 200, "{body}");
        assert!(body.contains(&client_id), "the full report: {body}");
    }
    held_to_budget(flooded, seconds, 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_holds_a_404_flood_to_its_budget_and_renders_once_a_second_for_every_scraper()
 {
    let renders = Arc::new(AtomicUsize::new(0));
    let counted = renders.clone();
    let render = move || {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        format!("# a rendering\nmsi_test_renders_total {n}\n")
    };
    let metrics = MetricsServer::start(
        MetricsServerOptions::new("127.0.0.1:0".parse().unwrap()),
        render,
    )
    .await
    .unwrap();
    let addr = metrics.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let not_found = format!("GET /nothing-here HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let flood = pipelined_flood(addr, not_found, 4, stop.clone());
    let started = Instant::now();
    let scrape = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    // A scraper 40 times a second, and another at Prometheus's pace (faster here).
    let scraper = |every: Duration| {
        let scrape = scrape.clone();
        tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            let mut answers = Vec::new();
            while started.elapsed() < Duration::from_secs(3) {
                answers.push(keep_alive_exchange(&mut stream, &scrape));
                std::thread::sleep(every);
            }
            answers
        })
    };
    let (fast, other) = (
        scraper(Duration::from_millis(25)),
        scraper(Duration::from_millis(300)),
    );
    let (fast, other) = (fast.await.unwrap(), other.await.unwrap());
    stop.store(true, Ordering::Relaxed);
    let seconds = started.elapsed().as_secs() as usize + 1;
    let flooded = flood.load(Ordering::Relaxed);
    assert!(
        fast.len() > 40 && other.len() > 5,
        "{} and {} scrapes",
        fast.len(),
        other.len()
    );
    for answer in fast.iter().chain(&other) {
        let (status, body) = answer.as_ref().expect("a scraper's connection stays open");
        assert_eq!(*status, 200, "{body}");
        assert!(body.contains("msi_test_renders_total"), "{body}");
    }
    let renders = renders.load(Ordering::SeqCst);
    assert!(
        renders <= seconds + 1,
        "{renders} renderings in {seconds} s for {} scrapes",
        fast.len() + other.len()
    );
    held_to_budget(flooded, seconds, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_retrying_at_retry_after_gets_a_token_once_entra_recovers() {
    let (entra, _a, server) = serving::one_identity(ServeOptions::default()).await;
    // A short outage: Entra asks for a second twice (the server's own two attempts),
    // then answers.
    entra.enqueue(Scripted::status(503).retry_after("1"));
    entra.enqueue(Scripted::status(503).retry_after("1"));
    // A client as Go's azidentity and JavaScript's @azure/identity: retry exactly at
    // Retry-After, three times.
    let request = serving::token_request(&server, ARM, "", SECRET);
    let mut waits = Vec::new();
    let mut status = 0;
    for _ in 0..4 {
        let answer = raw(server.local_addr(), request.clone()).await;
        status = answer.status;
        if status != 503 {
            break;
        }
        let wait: u64 = answer.header("retry-after").unwrap().parse().unwrap();
        waits.push(wait);
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
    assert_eq!(status, 200, "after waiting {waits:?} s as told");
    assert_eq!(waits.len(), 1, "one wait was enough: {waits:?}");
    assert!(
        waits[0] <= 6,
        "no longer than the failure memory: {waits:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_a_token_request_in_flight_takes_no_budget() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    // One new token request a second, bursts of two.
    let options = ServeOptions::default().with_max_token_requests_per_second(Some(1));
    let server = start(vec![a.serve(&entra, Default::default()).await], options).await;
    let addr = server.local_addr();
    let slow = "api://slow";
    entra.set_scope_delay(&format!("{slow}/.default"), Duration::from_secs(3));
    let first = tokio::spawn(raw(addr, serving::token_request(&server, slow, "", SECRET)));
    entra
        .wait_for_token_requests(1, Duration::from_secs(20))
        .await;
    let other = raw(
        addr,
        serving::token_request(&server, "api://other", "", SECRET),
    )
    .await;
    assert_eq!(other.status, 200, "the burst's second request");
    let third = raw(
        addr,
        serving::token_request(&server, "api://third", "", SECRET),
    )
    .await;
    assert_eq!(third.status, 429, "the budget is spent: {third:?}");
    // Another client asks for the resource whose request is in flight: it joins it.
    let joined = raw(addr, serving::token_request(&server, slow, "", SECRET)).await;
    assert_eq!(joined.status, 200, "joining takes no budget: {joined:?}");
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(serving::posts(&entra, slow), 1, "one request for both");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_flood_at_debug_writes_a_few_lines_and_a_count() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("serve-log-flood");
    let ca = EntraServer::write_ca_pem(dir.path());
    let log_path = dir.join("stderr.log");
    let mut command = Command::new(BIN);
    command
        .env("RUST_LOG", "debug")
        .env_remove("MSI_CREDENTIAL_LOG")
        .stderr(Stdio::from(std::fs::File::create(&log_path).unwrap()));
    let (child, serving) = spawn_serve_in(command, &a, &ca, &[]);
    let endpoint = serving["endpoint"].as_str().unwrap();
    let addr: SocketAddr = endpoint["http://".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // Refusals without the secret, pipelined and connect-send-close, for two seconds.
    let done = Arc::new(AtomicBool::new(false));
    let refused = format!(
        "GET /msi/token?api-version=2019-08-01&resource={ARM} HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    );
    let pipelined = pipelined_flood(addr, refused.clone(), 4, done.clone());
    let one_shot = {
        let done = done.clone();
        tokio::task::spawn_blocking(move || {
            let mut sent = 0;
            while !done.load(Ordering::Relaxed) {
                if let Ok(mut stream) = TcpStream::connect(addr) {
                    let _ = stream.write_all(refused.as_bytes());
                    sent += 1;
                }
            }
            sent
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    done.store(true, Ordering::Relaxed);
    let sent = one_shot.await.unwrap();
    let answered = pipelined.load(Ordering::Relaxed);
    // The count comes with the next interval's summary (every 10 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if log.contains("refused more requests than it logs") || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(stop(child), Some(0));
    let lines = log
        .lines()
        .filter(|l| l.contains("token server refused a request"))
        .count();
    let summary = log
        .lines()
        .find(|l| l.contains("refused more requests than it logs"))
        .unwrap_or_else(|| panic!("no summary line: {log}"));
    let left_out: usize = summary
        .split("left_out=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        answered + sent > 500,
        "the flood: {answered} answered, {sent} sent"
    );
    assert!(
        lines <= 2 * 5,
        "{lines} refusal lines for a flood of {} refusals",
        answered + sent
    );
    assert!(left_out > 100, "the summary counts the rest: {summary}");
    assert!(log.len() < 64 * 1024, "{} bytes of log", log.len());
    eprintln!(
        "refusal flood at debug: {} refusals answered or sent in 2 s, {lines} refusal lines, \
         {left_out} left out, {} bytes of log in all",
        answered + sent,
        log.len()
    );
}

/// The serve process's address, from its `serving` line.
fn serving_addr(serving: &serde_json::Value) -> SocketAddr {
    let endpoint = serving["endpoint"].as_str().unwrap();
    let authority = endpoint.trim_start_matches("http://").split('/').next();
    authority.unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_evicted_or_idle_closed_leave_nothing_queued_in_the_kernel() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("serve-orphans");
    let ca = EntraServer::write_ca_pem(dir.path());
    // A small cap, so that most of the flood's connections are evicted; a short idle
    // timeout, so that the rest are closed by it; the write timeout bounds the kernel.
    let (cap, write_timeout) = (32u64, Duration::from_secs(2));
    let (child, serving) = spawn_serve(
        &a,
        &ca,
        &[
            "--max-connections",
            "32",
            "--write-timeout",
            "2s",
            "--idle-timeout",
            "1s",
            "--first-byte-timeout",
            "300s",
        ],
    );
    let addr = serving_addr(&serving);
    let token = format!(
        "GET /msi/token?api-version=2019-08-01&resource={ARM} HTTP/1.1\r\nHost: {addr}\r\n\
         X-IDENTITY-HEADER: {SECRET}\r\n\r\n"
    );
    assert_eq!(
        serving::raw_blocking(addr, token.trim_end().to_owned()).status,
        200,
        "the token is cached before the flood"
    );
    // Four times the cap, each with a small receive buffer, pipelining 20 cached-token
    // requests with the secret (answers that fit the server's send buffer: no write
    // blocks, so no write deadline starts) and never reading; the peak of what the kernel
    // queues for the server meanwhile.
    let peak = Arc::new(AtomicUsize::new(0));
    let flooding = Arc::new(AtomicBool::new(true));
    let watcher = std::thread::spawn({
        let (peak, flooding) = (peak.clone(), flooding.clone());
        move || {
            while flooding.load(Ordering::Acquire) {
                let queued = queued_bytes(addr.port()) as usize;
                peak.fetch_max(queued, Ordering::AcqRel);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    let request = token.repeat(20);
    let mut flood = Vec::new();
    for _ in 0..4 * cap {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(addr).await.unwrap().into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        flood.push(stream);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ended = Instant::now();
    // Empty within the write timeout and a second of the attack's end, the flood's
    // sockets still open and unread.
    let deadline = ended + write_timeout + Duration::from_secs(1);
    while Instant::now() < deadline {
        let queued = queued_bytes(addr.port()) as usize;
        peak.fetch_max(queued, Ordering::AcqRel);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    flooding.store(false, Ordering::Release);
    watcher.join().unwrap();
    let left = queued_bytes(addr.port());
    let peak = peak.load(Ordering::Acquire) as u64;
    let orphans = sockstat_orphans();
    eprintln!(
        "orphan flood: peak {peak} bytes queued in the kernel for the server ({cap} connections \
         allowed), {left} left a write timeout and a second after, {orphans} orphans system-wide"
    );
    assert!(
        peak <= (cap + 1) * KERNEL_BYTES_PER_CONNECTION,
        "the kernel queued {peak} bytes for a server capped at {cap} connections"
    );
    assert_eq!(
        left, 0,
        "queued for closed or unread connections after the bound"
    );
    drop(flood);
    assert_eq!(stop(child), Some(0));
}

/// The orphaned TCP sockets of the whole system (`/proc/net/sockstat`).
fn sockstat_orphans() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let line = text.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = fields.iter().position(|f| *f == "orphan").unwrap();
    fields[at + 1].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_churn_of_refused_resources_leaves_another_callers_token_cached() {
    let options = ServeOptions::default().with_max_token_requests_per_second(Some(1));
    let (entra, _a, server) = serving::one_identity(options).await;
    let addr = server.local_addr();
    let cached = raw(addr, serving::token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(cached.status, 200);
    // More distinct resources than the cache has slots, nearly all refused by the
    // token requests' budget.
    let heads: Vec<String> = (0..1_100)
        .map(|i| serving::token_request(&server, &format!("api://churn-{i}"), "", SECRET))
        .collect();
    let refused = tokio::task::spawn_blocking(move || {
        heads
            .into_iter()
            .filter(|head| serving::raw_blocking(addr, head.clone()).status == 429)
            .count()
    })
    .await
    .unwrap();
    assert!(refused > 1_000, "the churn was refused: {refused}");
    let again = raw(addr, serving::token_request(&server, ARM, "", SECRET)).await;
    assert_eq!(again.status, 200, "the other caller's token: {again:?}");
    assert_eq!(serving::posts(&entra, ARM), 1, "served from the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entras_retry_after_holds_the_server_back_as_long() {
    let (entra, _a, server) = serving::one_identity(ServeOptions::default()).await;
    for _ in 0..20 {
        entra.enqueue(Scripted::status(503).retry_after("30"));
    }
    let addr = server.local_addr();
    let request = serving::token_request(&server, ARM, "", SECRET);
    // The server's own retry waits the 30 s Entra asked for (single flight: one request
    // for every caller), then its 503 is remembered.
    let first = tokio::task::spawn_blocking({
        let request = request.clone();
        move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(90)))
                .unwrap();
            write!(stream, "{request}\r\nConnection: close\r\n\r\n").unwrap();
            let mut bytes = Vec::new();
            stream.read_to_end(&mut bytes).unwrap();
            bytes
        }
    })
    .await
    .unwrap();
    assert!(
        first.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    let asked = serving::posts(&entra, ARM);
    // Clients asking every second for the next 29 s: answered from the failure memory.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(29) {
        let answer = raw(addr, request.clone()).await;
        assert_eq!(answer.status, 503, "{answer:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        serving::posts(&entra, ARM) <= asked + 1,
        "Entra asked for 30 s; the server asked {} times after its first {asked}",
        serving::posts(&entra, ARM) - asked
    );
}

/// The descriptors of process `pid` that are connections of the server on `port` (the
/// sockets of `/proc/<pid>/fd` whose inode is one of the port's, the listener left out).
fn client_descriptors(pid: u32, port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let local_port = fields[1].rsplit(':').next();
            let local_port = local_port.and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && fields[3] != "0A" {
                inodes.insert(format!("socket:[{}]", fields[9]));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|link| inodes.contains(link.to_string_lossy().as_ref()))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_joined_on_a_hanging_token_request_never_take_the_descriptors_past_the_cap() {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let dir = TempDir::new("serve-hard-cap");
    let ca = EntraServer::write_ca_pem(dir.path());
    let hanging = "api://hanging";
    entra.set_scope_delay(&format!("{hanging}/.default"), Duration::from_secs(5));
    let cap = 16;
    let (child, serving) = spawn_serve(&a, &ca, &["--max-connections", "16"]);
    let (addr, pid) = (serving_addr(&serving), child.id());
    let request = format!(
        "GET /msi/token?api-version=2019-08-01&resource={hanging} HTTP/1.1\r\nHost: {addr}\r\n\
         X-IDENTITY-HEADER: {SECRET}\r\n\r\n"
    );
    let peak = Arc::new(AtomicUsize::new(0));
    let flooding = Arc::new(AtomicBool::new(true));
    let watcher = std::thread::spawn({
        let (peak, flooding) = (peak.clone(), flooding.clone());
        move || {
            while flooding.load(Ordering::Acquire) {
                peak.fetch_max(client_descriptors(pid, addr.port()), Ordering::AcqRel);
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    // Eight times the cap: half join the one hanging token request (busy, not idle), half
    // are accepted and send nothing (not yet parsed); every one is kept open.
    let mut flood = Vec::new();
    for i in 0..8 * cap {
        let Ok(mut stream) = TcpStream::connect(addr) else {
            continue;
        };
        if i % 2 == 0 {
            let _ = stream.write_all(request.as_bytes()); // a reset one may refuse it
        }
        flood.push(stream);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    flooding.store(false, Ordering::Release);
    watcher.join().unwrap();
    let peak = peak.load(Ordering::Acquire);
    eprintln!(
        "hard cap: {} connections opened, at most {peak} held by the server (cap {cap})",
        flood.len()
    );
    assert!(peak >= cap / 2, "the flood reached the server: {peak}");
    assert!(
        peak <= cap + 1,
        "the server held {peak} client connections with a cap of {cap}"
    );
    // The first connection, busy on the hanging request, was kept and is answered.
    flood[0]
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (status, _, _) = serving::read_answer(&mut flood[0]).unwrap();
    assert_eq!(status, 200);
    drop(flood);
    assert_eq!(stop(child), Some(0));
}
