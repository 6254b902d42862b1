//! The cache with a fetcher of the test's own: what its callers get when a request panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use time::OffsetDateTime;

use super::{Fetch, TokenCache};
use crate::clock::SystemClock;
use crate::error::{ErrorKind, Result};
use crate::token::access_token::AccessToken;
use crate::token::options::ClientCertificateCredentialOptions;

/// Panics on its first request, answers the next ones.
struct PanicsOnce(AtomicUsize);

impl Fetch for PanicsOnce {
    fn fetch(
        self: &Arc<Self>,
        _tenant: Option<Arc<str>>,
        _scope: Arc<str>,
    ) -> impl std::future::Future<Output = Result<AccessToken>> + Send + 'static {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::task::yield_now().await;
            assert!(n > 0, "a bug in the request");
            let expires = OffsetDateTime::now_utc() + time::Duration::hours(1);
            Ok(AccessToken::new(format!("token-{n}"), expires))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_panics_ends_for_its_callers_and_the_next_one_starts_afresh() {
    let options = ClientCertificateCredentialOptions::default();
    let cache = TokenCache::new("client", Arc::new(SystemClock), &options);
    let fetcher = Arc::new(PanicsOnce(AtomicUsize::new(0)));
    let scopes = ["https://management.azure.com/.default"];
    let get = || cache.get(None, &scopes, &fetcher, None, || true);
    let (first, joined) = tokio::join!(get(), get());
    for (who, got) in [("starter", first), ("joined", joined)] {
        let err = got.expect_err("a panicked request has no token");
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Abandoned {
                    code: "request_abandoned",
                    ..
                }
            ),
            "{who}: {err:?}"
        );
    }
    assert_eq!(fetcher.0.load(Ordering::SeqCst), 1, "one request for both");
    // The entry is not left in flight: the next caller makes a new request.
    let token = get().await.expect("token").expect("admitted");
    assert_eq!(token.token(), "token-1");
}
