//! After a swap, the new credential's tokens fetched ahead in the background for the
//! scopes the old one served, so the first `get_token` after the swap finds them cached,
//! and a new credential that Entra refuses shows at once.

use crate::clock::Rfc3339;
use crate::reload::user_assigned::{Active, Reloader};
use crate::token::credential::ClientCertificateCredential;

/// At most this many scope sets are fetched ahead after a swap.
const MAX_PREFETCH: usize = 16;

impl Reloader {
    /// In the background, fetch tokens with the new (now active) credential for the
    /// scopes the old one served recently (at most [`MAX_PREFETCH`]; single flight as for
    /// any caller), so that the first `get_token` after the swap finds them cached. A
    /// failure is reported at once (`tracing` warning, `last_prefetch_error`).
    pub(super) fn prefetch(&self, old: &Active, new: ClientCertificateCredential) {
        let scope_sets = old.credential.live_scopes(MAX_PREFETCH);
        if scope_sets.is_empty() {
            return;
        }
        let status = self.status.clone();
        let path = self.path.clone();
        let old_not_after = old.credential.window().end;
        let clock = self.client_options.environment().clock().clone();
        tokio::spawn(async move {
            let mut fetches = tokio::task::JoinSet::new();
            for scopes in scope_sets {
                let new = new.clone();
                fetches.spawn(async move {
                    let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
                    new.get_token(&refs)
                        .await
                        .map(drop)
                        .map_err(|e| (scopes.join(" "), e))
                });
            }
            let mut failed = None;
            while let Some(done) = fetches.join_next().await {
                if let Ok(Err((scope, error))) = done {
                    if failed.is_none() {
                        tracing::warn!(
                            path = %path.display(),
                            scope = %crate::untrusted_text::service_text(&scope),
                            error = %error,
                            old_still_valid = clock.now() < old_not_after,
                            old_not_after = %Rfc3339(old_not_after),
                            "the new credential's token request failed; callers will see this error"
                        );
                        status.send_modify(|s| s.last_prefetch_error = Some(error.clone()));
                    }
                    failed = Some(error);
                }
            }
            if failed.is_none() {
                status.send_if_modified(|s| s.last_prefetch_error.take().is_some());
            }
        });
    }
}
