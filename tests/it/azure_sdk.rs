//! An Azure SDK client's plumbing over loopback HTTPS (feature `azure_core`): a `Pipeline`
//! with azure_core's `BearerTokenAuthorizationPolicy` as SDK clients build it, over
//! azure_core's own `HttpClient` for reqwest (its `reqwest` feature) with a client trusting
//! only the test CA. The service it calls is the kit's `ResourceServer`.
//!
//! Used by `tests/it/azure_core.rs`.

use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use azure_core::http::policies::Policy;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::{
    ClientOptions, Context, Method, Pipeline, RawResponse, Request, RetryOptions, Transport, Url,
};
use msi_dataplane_testing::ResourceServer;

use crate::support::harness::{ARM, https_client};

/// A pipeline as an Azure SDK client builds one: the bearer-token policy per try, no
/// retries (a failure should show at once), a transport trusting the test CA.
pub fn pipeline(credential: Arc<dyn TokenCredential>) -> Pipeline {
    let options = ClientOptions {
        transport: Some(Transport::new(Arc::new(https_client()))),
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

/// `path` on the resource server, as azure_core's `Url`.
pub fn url(resource: &ResourceServer, path: &str) -> Url {
    Url::parse(&resource.url())
        .and_then(|base| base.join(path))
        .expect("resource URL")
}
