//! `ClientCertificateCredential` as an `azure_core::credentials::TokenCredential`, driven
//! the way an Azure SDK client drives it: through azure_core's own
//! `BearerTokenAuthorizationPolicy` in an `azure_core::http::Pipeline`, against a loopback
//! HTTPS resource service that accepts only tokens the Entra-compatible test server issued.
//!
//! The pipeline's transport is an azure_core `HttpClient` over the crate's reqwest 0.13
//! client (trusting only the test CA), so azure_core needs none of its own HTTP or TLS
//! features. The resource service is HTTPS because `BearerTokenAuthorizationPolicy`
//! refuses to put a token on a non-`https` request.
#![cfg(feature = "azure_core")]

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use azure_core::credentials::{self, TokenCredential, TokenRequestOptions};
use azure_core::error::ErrorKind as AzureErrorKind;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::policies::Policy;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::{
    AsyncRawResponse, Body, ClientOptions, Context, HttpClient, Method, Pipeline, RawResponse,
    Request, RetryOptions, StatusCode, Transport, Url,
};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use msi_dataplane::{ErrorKind, ManualClock};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use support::entra::{EntraServer, Scripted, TokenShape};
use support::harness::{ARM, credential, credential_with, https_client, leaf_sha256_hex, options};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

// ---------------------------------------------------------------------------------------
// The transport: azure_core's `HttpClient` over the crate's reqwest 0.13 client.
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
struct ReqwestTransport(reqwest::Client);

#[async_trait::async_trait]
impl HttpClient for ReqwestTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())
            .map_err(|e| azure_core::Error::new(AzureErrorKind::Other, e))?;
        let mut builder = self.0.request(method, request.url().as_str());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder = match request.body() {
            Body::Bytes(bytes) => builder.body(bytes.clone()),
            Body::SeekableStream(_) => {
                return Err(azure_core::Error::with_message(
                    AzureErrorKind::Other,
                    "the test transport sends byte bodies only",
                ));
            }
        };
        let response = builder
            .send()
            .await
            .map_err(|e| azure_core::Error::new(AzureErrorKind::Io, e))?;
        let status = StatusCode::from(response.status().as_u16());
        let mut headers = Headers::new();
        for (name, value) in response.headers() {
            if let Ok(value) = value.to_str() {
                headers.insert(
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(value.to_owned()),
                );
            }
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| azure_core::Error::new(AzureErrorKind::Io, e))?;
        Ok(AsyncRawResponse::from_bytes(status, headers, body))
    }
}

/// A pipeline as an Azure SDK client builds one: the bearer-token policy per try, no
/// retries (a failure should show at once), our transport.
fn pipeline(credential: Arc<dyn TokenCredential>) -> Pipeline {
    let options = ClientOptions {
        transport: Some(Transport::new(Arc::new(ReqwestTransport(https_client())))),
        retry: RetryOptions::none(),
        ..Default::default()
    };
    let auth: Arc<dyn Policy> = Arc::new(BearerTokenAuthorizationPolicy::new(credential, [ARM]));
    Pipeline::new(
        Some("msi-dataplane-tests"),
        Some("0.0.0"),
        options,
        Vec::new(),
        vec![auth],
        None,
    )
}

async fn get(pipeline: &Pipeline, url: &Url) -> azure_core::Result<RawResponse> {
    let mut request = Request::new(url.clone(), Method::Get);
    pipeline.send(&Context::new(), &mut request, None).await
}

// ---------------------------------------------------------------------------------------
// The resource service: HTTPS on 127.0.0.1, 200 only for a token Entra issued for ARM.
// ---------------------------------------------------------------------------------------

/// One request the resource service answered.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    /// The bearer token, when the `Authorization` header was `Bearer <token>`.
    token: Option<String>,
    status: u16,
}

struct Resource {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Resource {
    async fn start(entra: &EntraServer) -> Resource {
        let acceptor = TlsAcceptor::from(server_tls_config());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local_addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (entra, log) = (entra.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, entra, log) = (acceptor.clone(), entra.clone(), log.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = service_fn(move |req| {
                        let answer = answer(&entra, &log, req);
                        async move { Ok::<_, std::convert::Infallible>(answer) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Resource { addr, seen }
    }

    fn url(&self, path: &str) -> Url {
        Url::parse(&format!("https://{}{path}", self.addr)).expect("url")
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

fn answer(
    entra: &EntraServer,
    log: &Mutex<Vec<Seen>>,
    req: hyper::Request<Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let accepted = token
        .as_deref()
        .and_then(|t| entra.issued(t))
        .is_some_and(|issued| issued.scope == ARM);
    let status = if accepted { 200 } else { 401 };
    log.lock().expect("lock").push(Seen {
        path: req.uri().path().to_owned(),
        token,
        status,
    });
    let mut response = hyper::Response::builder().status(status);
    if !accepted {
        response = response.header(hyper::header::WWW_AUTHENTICATE, "Bearer");
    }
    let body = if accepted { "ok" } else { "unauthorized" };
    response
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("response")
}

/// The test server certificate (127.0.0.1, ::1, localhost), signed by the test CA that
/// `https_client()` trusts.
fn server_tls_config() -> Arc<rustls::ServerConfig> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tls");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .expect("fixtures/tls/server.pem")
        .collect::<Result<_, _>>()
        .expect("server certificate PEM");
    let key =
        PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("fixtures/tls/server.key");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server certificate/key");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

fn source_chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut chain = vec![error.to_string()];
    let mut next = error.source();
    while let Some(e) = next {
        chain.push(e.to_string());
        next = e.source();
    }
    chain
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn pipeline_presents_a_token_entra_issued() {
    let entra = EntraServer::start().await;
    let resource = Resource::start(&entra).await;
    let cred = credential(&entra, "pem-pkcs8");
    let client_id = cred.client_id().to_owned();
    let pipeline = pipeline(Arc::new(cred));

    let response = get(&pipeline, &resource.url("/subscriptions"))
        .await
        .unwrap_or_else(|e| panic!("pipeline: {e} ({:?})", source_chain(&e)));
    assert_eq!(response.status(), StatusCode::Ok);
    assert_eq!(response.into_body().into_string().unwrap(), "ok");

    let seen = resource.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/subscriptions");
    assert_eq!(seen[0].status, 200);
    let token = seen[0].token.as_deref().expect("a bearer token");
    let issued = entra.issued(token).expect("issued by the Entra server");
    assert_eq!(issued.scope, ARM);
    assert_eq!(issued.client_id, client_id);
    assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("pem-pkcs8"));
    assert_eq!(entra.token_requests(), 1);
}

#[tokio::test]
async fn sequential_requests_all_succeed_with_issued_tokens() {
    let entra = EntraServer::start().await;
    let resource = Resource::start(&entra).await;
    let cred: Arc<dyn TokenCredential> = Arc::new(credential(&entra, "pfx-aes"));
    // Two pipelines (two SDK clients) sharing one credential.
    let pipelines = [pipeline(cred.clone()), pipeline(cred)];

    for i in 0..6 {
        let response = get(&pipelines[i % 2], &resource.url(&format!("/r/{i}")))
            .await
            .unwrap_or_else(|e| panic!("request {i}: {e} ({:?})", source_chain(&e)));
        assert_eq!(response.status(), StatusCode::Ok, "request {i}");
    }

    let seen = resource.seen();
    assert_eq!(seen.len(), 6, "{seen:?}");
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.path, format!("/r/{i}"));
        assert_eq!(s.status, 200);
        let issued = entra
            .issued(s.token.as_deref().expect("a bearer token"))
            .unwrap_or_else(|| panic!("request {i}: token not issued by the server"));
        assert_eq!(issued.scope, ARM);
        assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("pfx-aes"));
    }
    // Each policy keeps its token: at most one token request per pipeline, whatever
    // caching the credential does on its own.
    let requests = entra.token_requests();
    assert!((1..=2).contains(&requests), "{requests} token requests");
}

#[tokio::test]
async fn expired_credential_fails_the_call_with_a_credential_error() {
    let entra = EntraServer::start().await;
    let resource = Resource::start(&entra).await;
    let pipeline = pipeline(Arc::new(credential(&entra, "expired")));

    let err = get(&pipeline, &resource.url("/subscriptions"))
        .await
        .expect_err("an expired credential cannot authorize a request");
    assert_eq!(err.kind(), &AzureErrorKind::Credential, "{err:?}");
    let chain = source_chain(&err);
    assert!(chain.iter().any(|m| m.contains("expired")), "{chain:?}");
    let ours = err
        .downcast_ref::<msi_dataplane::Error>()
        .expect("our error is the source");
    assert!(
        matches!(ours.kind(), ErrorKind::CredentialExpired { .. }),
        "{ours:?}"
    );
    assert!(resource.seen().is_empty(), "no request reached the service");
    assert_eq!(entra.token_requests(), 0, "checked before any network call");
}

#[tokio::test]
async fn token_endpoint_rejection_fails_the_call_with_a_credential_error() {
    let entra = EntraServer::start().await;
    let resource = Resource::start(&entra).await;
    let pipeline = pipeline(Arc::new(credential(&entra, "pem-pkcs8")));
    entra.enqueue(Scripted::aadsts(
        401,
        "invalid_client",
        700027,
        "AADSTS700027: Client assertion failed signature validation.",
    ));

    let err = get(&pipeline, &resource.url("/subscriptions"))
        .await
        .expect_err("the token request was refused");
    assert_eq!(err.kind(), &AzureErrorKind::Credential, "{err:?}");
    let ours = err
        .downcast_ref::<msi_dataplane::Error>()
        .expect("our error is the source");
    let ErrorKind::TokenEndpoint(e) = ours.kind() else {
        panic!("{ours:?}")
    };
    assert_eq!(e.aadsts_code(), Some(700027));
    assert!(err.to_string().contains("AADSTS700027"), "{err}");
    assert!(resource.seen().is_empty());
}

#[tokio::test]
async fn expires_on_is_mapped_exactly() {
    let entra = EntraServer::start().await;
    entra.set_token_shape(TokenShape {
        expires_in: 4321,
        ext_expires_in: Some(4321),
        ..Default::default()
    });
    // A fixed clock makes the expected expiry exact: the time of the request plus
    // `expires_in`, to the nanosecond.
    let at = time::OffsetDateTime::now_utc();
    let cred = credential_with(
        &entra,
        "pem-pkcs8",
        options().with_clock(Arc::new(ManualClock::new(at))),
    );
    let dyn_cred: Arc<dyn TokenCredential> = Arc::new(cred.clone());

    let token: credentials::AccessToken = dyn_cred
        .get_token(&[ARM], Some(TokenRequestOptions::default()))
        .await
        .expect("token");
    assert_eq!(token.expires_on, at + time::Duration::seconds(4321));
    let issued = entra
        .issued(token.token.secret())
        .expect("issued by the Entra server");
    assert_eq!(issued.expires_in, 4321);
    assert_eq!(issued.scope, ARM);

    // The same as the crate's own token (whether or not it came from a cache).
    let ours = cred.get_token(&[ARM]).await.expect("token");
    assert_eq!(ours.expires_on(), token.expires_on);
}

/// The resource service really checks tokens: one the Entra server did not issue is
/// refused, and the pipeline reports the 401.
#[tokio::test]
async fn resource_refuses_a_token_entra_did_not_issue() {
    #[derive(Debug)]
    struct Forged;

    #[async_trait::async_trait]
    impl TokenCredential for Forged {
        async fn get_token(
            &self,
            _scopes: &[&str],
            _options: Option<TokenRequestOptions<'_>>,
        ) -> azure_core::Result<credentials::AccessToken> {
            Ok(credentials::AccessToken::new(
                "forged.token.value",
                time::OffsetDateTime::now_utc() + time::Duration::hours(1),
            ))
        }
    }

    let entra = EntraServer::start().await;
    let resource = Resource::start(&entra).await;
    let pipeline = pipeline(Arc::new(Forged));
    let err = get(&pipeline, &resource.url("/subscriptions"))
        .await
        .expect_err("401");
    assert_eq!(err.http_status(), Some(StatusCode::Unauthorized), "{err:?}");
    let seen = resource.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].token.as_deref(), Some("forged.token.value"));
    assert_eq!(seen[0].status, 401);
}
