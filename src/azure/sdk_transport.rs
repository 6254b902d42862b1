//! azure_core's `HttpClient` over the crate's own reqwest client (feature `keyvault`), so
//! an Azure SDK client built by this crate uses the same HTTP/TLS stack (rustls, the
//! crate's roots, no redirects) and no second one: azure_core stays
//! `default-features = false`.
//!
//! It also sets the `User-Agent`: the crate's (with the caller's application id first)
//! followed by the one the SDK's pipeline put on the request, so a Key Vault request says
//! both which library drove the SDK and which SDK sent it:
//! `myapp azsdk-rust-msi-dataplane/<version> (<OS>; <ARCH>)
//! azsdk-rust-security_keyvault_secrets/<version> (<rustc>; <OS>; <ARCH>)`.

use std::time::Duration;

use azure_core::error::ErrorKind as AzureErrorKind;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Request, StatusCode};
use reqwest::header::{HeaderValue as ReqwestHeaderValue, USER_AGENT};

use crate::error::{Error, TransportFault, cause_chain, classify_transport};

/// An azure_core transport over a reqwest client.
#[derive(Debug, Clone)]
pub(crate) struct ReqwestTransport {
    client: reqwest::Client,
    timeout: Duration,
    /// The crate's `User-Agent` ([`Environment::user_agent`](crate::Environment::user_agent)).
    user_agent: ReqwestHeaderValue,
}

impl ReqwestTransport {
    pub(crate) fn new(
        client: reqwest::Client,
        timeout: Duration,
        user_agent: ReqwestHeaderValue,
    ) -> Self {
        ReqwestTransport {
            client,
            timeout,
            user_agent,
        }
    }

    /// The crate's `User-Agent` followed by the SDK's (`sdk`, when the request has one and
    /// the two make a valid header value).
    fn user_agent(&self, sdk: Option<&str>) -> ReqwestHeaderValue {
        let ours = &self.user_agent;
        let both = sdk
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .and_then(|sdk| {
                ReqwestHeaderValue::from_bytes(&[ours.as_bytes(), b" ", sdk.as_bytes()].concat())
                    .ok()
            });
        both.unwrap_or_else(|| ours.clone())
    }
}

#[async_trait::async_trait]
impl HttpClient for ReqwestTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())
            .map_err(|e| azure_core::Error::new(AzureErrorKind::Other, e))?;
        // The SDK's `Url` is the `url` crate's, as reqwest's: handed over as parsed (a
        // `&str` would be parsed a second time on every request).
        let mut builder = self
            .client
            .request(method, request.url().clone())
            .timeout(self.timeout);
        let mut sdk_user_agent = None;
        for (name, value) in request.headers().iter() {
            if name.as_str().eq_ignore_ascii_case(USER_AGENT.as_str()) {
                sdk_user_agent = Some(value.as_str());
                continue;
            }
            builder = builder.header(name.as_str(), value.as_str());
        }
        // Per request, so that a caller's own client sends it too.
        builder = builder.header(USER_AGENT, self.user_agent(sdk_user_agent));
        builder = match request.body() {
            Body::Bytes(bytes) => builder.body(bytes.clone()),
            #[allow(unreachable_patterns)]
            _ => {
                return Err(azure_core::Error::with_message(
                    AzureErrorKind::Other,
                    "this transport sends byte bodies only",
                ));
            }
        };
        let answer = crate::http::exchange::send(builder)
            .await
            // Not `Io` either: the crate's own error rides inside, as for an oversized answer.
            .map_err(|a| {
                let message = format!("the Key Vault request was abandoned: {}", a.0);
                let abandoned = Error::abandoned("key_vault_request_abandoned", message);
                azure_core::Error::new(AzureErrorKind::Other, abandoned)
            })?
            .map_err(transport_error)?;
        let mut headers = Headers::new();
        for (name, value) in &answer.headers {
            if let Ok(value) = value.to_str() {
                headers.insert(
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(value.to_owned()),
                );
            }
        }
        // Not `Io`, which the SDK retries: the same oversized answer would come again. The
        // crate's own error rides inside, so the store reports it as it is.
        let body = answer.body.ok_or_else(|| {
            // The store names its operation in front (`Key Vault get: ...`).
            let reason = crate::http::body::too_large_reason();
            let message = format!("the answer is not usable: {reason}");
            let too_large = Error::answer("invalid_key_vault_response", message);
            azure_core::Error::new(AzureErrorKind::Other, too_large)
        })?;
        let status = StatusCode::from(answer.status);
        Ok(AsyncRawResponse::from_bytes(status, headers, body))
    }
}

/// A reqwest failure as azure_core's, kind chosen so that the SDK's retry policy (which
/// retries `Io` and `Connection`, nothing else) retries exactly what the crate's own
/// classification calls transient: a passing failure is `Connection` (connecting) or `Io`;
/// a TLS failure, a malformed answer or a request that cannot be built is `Other`, not
/// retried. The reqwest error rides inside, so the store classifies it the same way.
fn transport_error(e: reqwest::Error) -> azure_core::Error {
    let kind = match classify_transport(&e) {
        TransportFault::Passing if e.is_connect() => AzureErrorKind::Connection,
        TransportFault::Passing => AzureErrorKind::Io,
        TransportFault::Tls | TransportFault::Request | TransportFault::Protocol => {
            AzureErrorKind::Other
        }
    };
    let message = cause_chain(&e);
    azure_core::Error::with_error(kind, e, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_agent_comes_first_then_the_sdk_agent() {
        let ours = crate::http::user_agent::header_value(Some("myapp"));
        let transport = ReqwestTransport::new(reqwest::Client::new(), Duration::from_secs(1), ours);
        let sdk = "azsdk-rust-security_keyvault_secrets/1.0.1 (1.90.0; linux; x86_64)";
        assert_eq!(
            transport.user_agent(Some(sdk)).to_str().unwrap(),
            format!("myapp {} {sdk}", crate::http::user_agent::base())
        );
        assert_eq!(
            transport.user_agent(None).to_str().unwrap(),
            format!("myapp {}", crate::http::user_agent::base())
        );
        assert_eq!(
            transport.user_agent(Some("  ")).to_str().unwrap(),
            format!("myapp {}", crate::http::user_agent::base())
        );
        // A value that cannot be a header is dropped, ours kept.
        assert_eq!(
            transport.user_agent(Some("bad\nvalue")).to_str().unwrap(),
            format!("myapp {}", crate::http::user_agent::base())
        );
    }
}
