//! What the token server tests share: a served identity on the kit's Entra server, its
//! file mounted as the CSI driver mounts it, and a raw HTTP/1.1 request sender (so a test
//! sets every header itself, a foreign `Host` and duplicates included).
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use msi_credential::serve::{IdentityHeaderSecret, ServeOptions, ServedIdentity, TokenServer};
use msi_dataplane::{BundleFormat, ClientCertificateCredentialOptions, ReloadOptions, RetryPolicy};
use msi_dataplane_testing::{CsiMount, EntraServer, TestCertificate, TestIdentity};

/// The identity header secret the tests serve with.
pub const SECRET: &str = "test-identity-header-secret-0123456789";

/// A resource as the clients send it (`https://management.azure.com/.default` stripped).
pub const ARM: &str = "https://management.azure.com/";

/// One identity, mounted and trusted by `entra`.
pub struct Mounted {
    pub identity: TestIdentity,
    pub certificate: TestCertificate,
    pub mount: CsiMount,
}

impl Mounted {
    pub fn new(entra: &EntraServer) -> Mounted {
        let identity = TestIdentity::new();
        let certificate = TestCertificate::self_signed();
        entra.register(&identity, &certificate);
        let file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
        let mount =
            CsiMount::with_credentials_named(&format!("uamsi-{}", identity.client_id), &file);
        Mounted {
            identity,
            certificate,
            mount,
        }
    }

    /// Renew: Entra trusts `next`, the CSI driver swaps in the file with it.
    pub fn rotate(&mut self, entra: &EntraServer) -> TestCertificate {
        let next = TestCertificate::builder()
            .renewing(&self.certificate)
            .self_signed();
        entra.register(&self.identity, &next);
        let file = self
            .identity
            .credentials(&next, &entra.base_url(), BundleFormat::Pkcs12);
        self.mount.rotate_credentials(&file);
        self.certificate = next.clone();
        next
    }

    /// The served identity on the mounted file, trusting the kit's CA, with few retries.
    pub async fn serve(
        &self,
        entra: &EntraServer,
        client: ClientCertificateCredentialOptions,
    ) -> ServedIdentity {
        let environment = client
            .environment()
            .clone()
            .with_http_client(entra.client())
            .with_retry_policy(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_initial_delay(Duration::from_millis(50)),
            );
        let client = client.with_environment(environment);
        let reload = ReloadOptions::default().with_debounce(Duration::from_millis(50));
        ServedIdentity::load(self.mount.visible_path(), client, reload)
            .await
            .expect("the served identity loads")
    }
}

/// The kit's Entra server, one identity mounted as the CSI driver mounts it, and a token
/// server for it with `options`.
pub async fn one_identity(options: ServeOptions) -> (EntraServer, Mounted, TokenServer) {
    let entra = EntraServer::start().await;
    let a = Mounted::new(&entra);
    let server = start(vec![a.serve(&entra, Default::default()).await], options).await;
    (entra, a, server)
}

/// A server on a free loopback port with [`SECRET`].
pub async fn start(identities: Vec<ServedIdentity>, options: ServeOptions) -> TokenServer {
    let secret = IdentityHeaderSecret::new(SECRET).unwrap();
    TokenServer::start(identities, secret, options.with_port(0))
        .await
        .expect("the token server starts")
}

/// A raw answer.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Send `head` (the request line and headers, without the final blank line) and a
/// `Connection: close`, on a blocking thread; read the whole answer.
pub async fn raw(addr: SocketAddr, head: String) -> Raw {
    tokio::task::spawn_blocking(move || raw_blocking(addr, head))
        .await
        .unwrap()
}

/// [`raw`], on the calling thread.
pub fn raw_blocking(addr: SocketAddr, head: String) -> Raw {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "{head}\r\nConnection: close\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Raw {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let body = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    Raw {
        status,
        headers,
        body,
    }
}

/// A well-formed token request for `resource`, naming the identity by `selector`
/// (`client_id=...`, or empty).
pub fn token_request(server: &TokenServer, resource: &str, selector: &str, secret: &str) -> String {
    let mut query = format!("api-version=2019-08-01&resource={resource}");
    if !selector.is_empty() {
        query.push('&');
        query.push_str(selector);
    }
    format!(
        "GET /msi/token?{query} HTTP/1.1\r\nHost: {}\r\nX-IDENTITY-HEADER: {secret}\r\nMetadata: true",
        server.local_addr()
    )
}

/// Have `entra` refuse every token request for `resource` (AADSTS70011, HTTP 400, which no
/// one retries) while the returned guard lives.
pub fn refuse(entra: &EntraServer, resource: &str) -> msi_dataplane_testing::ScriptGuard {
    entra
        .on(msi_dataplane_testing::Match::any().scope(&format!("{resource}/.default")))
        .respond(msi_dataplane_testing::Scripted::aadsts(
            400,
            "invalid_scope",
            70011,
            "no such scope",
        ))
        .until_cleared()
        .mount_scoped()
}

/// How many token requests for `resource` reached `entra`.
pub fn posts(entra: &EntraServer, resource: &str) -> usize {
    let scope = format!("{resource}/.default");
    entra
        .requests()
        .iter()
        .filter(|r| r.scope.as_deref() == Some(scope.as_str()))
        .count()
}

/// The command line.
pub const BIN: &str = env!("CARGO_BIN_EXE_msi-credential");

/// SIGTERM, as Kubernetes stops a container; the exit code.
pub fn stop(mut child: std::process::Child) -> Option<i32> {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    child.wait().unwrap().code()
}

/// `msi-credential --json serve FILE --secret-env ... --listen 127.0.0.1:0 --ca-file CA
/// EXTRA...` for `mounted`, and its `serving` line.
pub fn spawn_serve(
    mounted: &Mounted,
    ca: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, serde_json::Value) {
    spawn_serve_in(Command::new(BIN), mounted, ca, extra)
}

/// [`spawn_serve`] with the process started by `command` (the binary, or a shell that
/// sets limits and execs it).
pub fn spawn_serve_in(
    mut command: Command,
    mounted: &Mounted,
    ca: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, serde_json::Value) {
    let mut child = command
        .arg("--json")
        .arg("serve")
        .arg(mounted.mount.visible_path())
        .args([
            "--secret-env",
            "MY_IDENTITY_HEADER",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .arg("--ca-file")
        .arg(ca)
        .env("MY_IDENTITY_HEADER", SECRET)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    let serving = serde_json::from_str(&line).unwrap();
    (child, serving)
}

/// One answer read from a keep-alive connection: its status, its head (lower-cased) and
/// its body (`Content-Length` bytes).
pub fn read_answer(stream: &mut TcpStream) -> std::io::Result<(u16, String, Vec<u8>)> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        answer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    Ok((head[9..12].parse().unwrap(), head, body))
}
