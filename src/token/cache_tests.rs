//! The cache with a fetcher of the test's own: what its callers get when a request panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

use super::{Fetch, TokenCache};
use crate::clock::SystemClock;
use crate::error::{ErrorKind, Result, TokenError};
use crate::token::access_token::AccessToken;
use crate::token::refresh::Limits;

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
    let limits = Limits {
        window: Duration::from_secs(300),
        max_entries: 16,
        failure_memory: Duration::from_secs(5),
    };
    let cache = TokenCache::new(Arc::new(SystemClock), limits);
    let fetcher = Arc::new(PanicsOnce(AtomicUsize::new(0)));
    let scopes = ["https://management.azure.com/.default"];
    let (first, joined) = tokio::join!(
        cache.get(None, &scopes, &fetcher),
        cache.get(None, &scopes, &fetcher)
    );
    for (who, got) in [("starter", first), ("joined", joined)] {
        let err = got.expect_err("a panicked request has no token");
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Token(TokenError::RequestAbandoned { .. })
            ),
            "{who}: {err:?}"
        );
    }
    assert_eq!(fetcher.0.load(Ordering::SeqCst), 1, "one request for both");
    // The entry is not left in flight: the next caller makes a new request.
    let token = cache.get(None, &scopes, &fetcher).await.expect("token");
    assert_eq!(token.token(), "token-1");
}

/// Answers once its gate is open: a token, or an error while `fail` is set.
struct Gated {
    requests: AtomicUsize,
    open: tokio::sync::watch::Sender<bool>,
    fail: std::sync::atomic::AtomicBool,
}

impl Fetch for Gated {
    fn fetch(
        self: &Arc<Self>,
        _tenant: Option<Arc<str>>,
        _scope: Arc<str>,
    ) -> impl std::future::Future<Output = Result<AccessToken>> + Send + 'static {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        let fail = self.fail.load(Ordering::SeqCst);
        let mut open = self.open.subscribe();
        async move {
            let _ = open.wait_for(|open| *open).await;
            if fail {
                let reason = "the test's refusal".to_owned();
                return Err(ErrorKind::Token(TokenError::InvalidResponse {
                    status: 500,
                    reason,
                })
                .into());
            }
            let expires = OffsetDateTime::now_utc() + time::Duration::hours(1);
            Ok(AccessToken::new(format!("token-{n}"), expires))
        }
    }
}

/// Poll once: whether the future is still pending.
async fn pending<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
    let mut future = future;
    std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_starting_a_request_asks_for_admission() {
    let limits = Limits {
        window: Duration::from_secs(300),
        max_entries: 16,
        failure_memory: Duration::from_secs(5),
    };
    let cache = TokenCache::new(Arc::new(SystemClock), limits);
    let fetcher = Arc::new(Gated {
        requests: AtomicUsize::new(0),
        open: tokio::sync::watch::channel(false).0,
        fail: false.into(),
    });
    let scopes = ["https://management.azure.com/.default"];
    let never = || -> bool { panic!("admission asked without a request to start") };

    // Refused: nothing starts.
    let refused = cache.get_admitted(None, &scopes, &fetcher, || false).await;
    assert!(refused.expect("no error").is_none());
    assert_eq!(fetcher.requests.load(Ordering::SeqCst), 0);

    // Admitted: one request; a caller joining it is not asked.
    let asked = AtomicUsize::new(0);
    let admit = || asked.fetch_add(1, Ordering::SeqCst) == 0;
    let mut first = std::pin::pin!(cache.get_admitted(None, &scopes, &fetcher, admit));
    assert!(pending(first.as_mut()).await, "in flight");
    let mut joined = std::pin::pin!(cache.get_admitted(None, &scopes, &fetcher, never));
    assert!(pending(joined.as_mut()).await, "joined");
    fetcher.open.send_replace(true);
    let (first, joined) = (first.await.unwrap(), joined.await.unwrap());
    assert_eq!(first.expect("admitted").token(), "token-0");
    assert_eq!(joined.expect("joined").token(), "token-0");
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    // Cached: not asked.
    let hit = cache.get_admitted(None, &scopes, &fetcher, never).await;
    assert_eq!(hit.unwrap().expect("cached").token(), "token-0");

    // A failure remembered: answered again without asking; the error says until when.
    cache.clear();
    fetcher.fail.store(true, Ordering::SeqCst);
    let failed = cache.get(None, &scopes, &fetcher).await.unwrap_err();
    let retry_at = failed.retry_at().expect("a remembered failure says when");
    let again = cache.get_admitted(None, &scopes, &fetcher, never).await;
    assert_eq!(again.unwrap_err().retry_at(), Some(retry_at));
    assert_eq!(fetcher.requests.load(Ordering::SeqCst), 2);
}
