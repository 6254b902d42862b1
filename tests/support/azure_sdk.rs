//! An Azure SDK client's plumbing over loopback HTTPS (feature `azure_core`): an azure_core
//! `HttpClient` over reqwest 0.13 trusting only the test CA, a `Pipeline` with azure_core's
//! `BearerTokenAuthorizationPolicy` as SDK clients build it, and a resource service that
//! answers 200 only to a bearer token the Entra-compatible test server issued for ARM.
//!
//! Used by `tests/azure_core.rs` and `examples/azure_sdk_client.rs`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use azure_core::credentials::TokenCredential;
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
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::entra::EntraServer;
use super::harness::{ARM, https_client};

// ---------------------------------------------------------------------------------------
// The transport: azure_core's `HttpClient` over the crate's reqwest 0.13 client.
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct ReqwestTransport(pub reqwest::Client);

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
pub fn pipeline(credential: Arc<dyn TokenCredential>) -> Pipeline {
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

pub async fn get(pipeline: &Pipeline, url: &Url) -> azure_core::Result<RawResponse> {
    let mut request = Request::new(url.clone(), Method::Get);
    pipeline.send(&Context::new(), &mut request, None).await
}

// ---------------------------------------------------------------------------------------
// The resource service: HTTPS on 127.0.0.1, 200 only for a token Entra issued for ARM.
// ---------------------------------------------------------------------------------------

/// One request the resource service answered.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    /// The bearer token, when the `Authorization` header was `Bearer <token>`.
    pub token: Option<String>,
    pub status: u16,
}

pub struct Resource {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Resource {
    pub async fn start(entra: &EntraServer) -> Resource {
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

    pub fn url(&self, path: &str) -> Url {
        Url::parse(&format!("https://{}{path}", self.addr)).expect("url")
    }

    pub fn seen(&self) -> Vec<Seen> {
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

/// The kit's server TLS configuration (certificate from its run-time test CA, which
/// `https_client()` trusts).
pub use msi_dataplane::testing::server_tls_config;
