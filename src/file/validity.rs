//! A credential's validity: the window its parsed file and leaf certificate allow, the
//! refusal outside it and the warning as its end nears. Pure functions of `now`, for the
//! credential (which enforces them) and `inspect` (which reports them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

use crate::clock::{saturating_add, to_time};
use crate::error::{ErrorKind, Result};
use crate::file::model::FileTimes;

/// How far ahead of the clock a certificate's `notBefore` may be (clock skew between the
/// issuer and this machine) before the credential is refused as not yet valid.
pub const NOT_BEFORE_SKEW: Duration = Duration::from_secs(5 * 60);

/// How close to its end (or past its `renew_after`) a credential counts as expiring soon:
/// 7 days. A credential warns then (the default of
/// [`with_expiry_warning_margin`](crate::ClientCertificateCredentialOptions::with_expiry_warning_margin)),
/// and a [`CredentialReport`](crate::inspect::CredentialReport) made with this margin
/// has a [`ProblemKind::ExpiresSoon`](crate::inspect::ProblemKind::ExpiresSoon) warning.
pub const EXPIRES_SOON_MARGIN: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// When a credential may be used: computed once, from its file's times and its leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// The file's `not_before`, or the leaf's `notBefore` when the file has none: what
    /// the reload rule compares.
    pub(crate) not_before: OffsetDateTime,
    /// The leaf's `notBefore`: before it (less [`NOT_BEFORE_SKEW`]) no token is requested.
    pub(crate) leaf_not_before: OffsetDateTime,
    /// The earlier of the file's `not_after` and the leaf's `notAfter`: after it no token
    /// is requested.
    pub(crate) end: OffsetDateTime,
}

impl Window {
    /// Pure: the window of a file with `times` and a leaf valid from `leaf_not_before`
    /// to `leaf_not_after`.
    pub(crate) fn new(
        times: &FileTimes,
        leaf_not_before: OffsetDateTime,
        leaf_not_after: OffsetDateTime,
    ) -> Self {
        Window {
            not_before: times.not_before.unwrap_or(leaf_not_before),
            leaf_not_before,
            end: times
                .not_after
                .map_or(leaf_not_after, |end| end.min(leaf_not_after)),
        }
    }

    /// Pure: refuse, before any network call, a credential used outside its window at
    /// `now` (with [`NOT_BEFORE_SKEW`] of grace at the leaf's start).
    pub(crate) fn check(&self, now: OffsetDateTime) -> Result<()> {
        if now > self.end {
            let expired_at = self.end;
            return Err(ErrorKind::Expired { expired_at, now }.into());
        }
        if saturating_add(now, to_time(NOT_BEFORE_SKEW)) < self.leaf_not_before {
            let valid_from = self.leaf_not_before;
            return Err(ErrorKind::NotYetValid { valid_from, now }.into());
        }
        Ok(())
    }
}

/// The warning a credential gives, once, as its end nears: its margin, and whether it
/// was given.
pub(crate) struct ExpiryWarning {
    margin: time::Duration,
    given: AtomicBool,
}

impl ExpiryWarning {
    /// Warn within `margin` of the end (or past `renew_after`).
    pub(crate) fn new(margin: Duration) -> Self {
        let (margin, given) = (to_time(margin), AtomicBool::new(false));
        ExpiryWarning { margin, given }
    }

    /// Why to warn at `now` ([`expiry_warning`]), the first time there is a reason only.
    pub(crate) fn once(
        &self,
        now: OffsetDateTime,
        renew_after: Option<OffsetDateTime>,
        end: OffsetDateTime,
    ) -> Option<&'static str> {
        let reason = expiry_warning(now, renew_after, end, self.margin)?;
        (!self.given.swap(true, Ordering::Relaxed)).then_some(reason)
    }
}

/// Pure: why a credential deserves a warning at `now`, if it does: it ends within `margin`,
/// or it is past its `renew_after`.
pub(crate) fn expiry_warning(
    now: OffsetDateTime,
    renew_after: Option<OffsetDateTime>,
    end: OffsetDateTime,
    margin: time::Duration,
) -> Option<&'static str> {
    if now >= saturating_add(end, -margin) {
        Some("the credential expires soon")
    } else if renew_after.is_some_and(|r| now >= r) {
        Some("the credential is past its renew_after time")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn the_window_is_the_files_where_it_narrows_the_leafs() {
        let (leaf_start, leaf_end) = (
            datetime!(2026-05-01 00:00 UTC),
            datetime!(2026-08-01 00:00 UTC),
        );
        let none = Window::new(&FileTimes::default(), leaf_start, leaf_end);
        assert_eq!((none.not_before, none.end), (leaf_start, leaf_end));
        let file = FileTimes {
            not_before: Some(datetime!(2026-03-01 00:00 UTC)),
            not_after: Some(datetime!(2026-07-01 00:00 UTC)),
            ..FileTimes::default()
        };
        let narrowed = Window::new(&file, leaf_start, leaf_end);
        assert_eq!(narrowed.not_before, datetime!(2026-03-01 00:00 UTC));
        assert_eq!(narrowed.end, datetime!(2026-07-01 00:00 UTC));
        assert_eq!(narrowed.leaf_not_before, leaf_start);
        let later = FileTimes {
            not_after: Some(datetime!(2026-09-01 00:00 UTC)),
            ..FileTimes::default()
        };
        assert_eq!(Window::new(&later, leaf_start, leaf_end).end, leaf_end);
    }

    #[test]
    fn refused_outside_the_window_with_grace_at_the_start() {
        let w = Window::new(
            &FileTimes::default(),
            datetime!(2026-05-01 00:00 UTC),
            datetime!(2026-08-01 00:00 UTC),
        );
        assert!(w.check(datetime!(2026-06-01 00:00 UTC)).is_ok());
        assert!(
            w.check(datetime!(2026-04-30 23:56 UTC)).is_ok(),
            "within the skew"
        );
        assert!(w.check(datetime!(2026-04-30 23:54 UTC)).is_err());
        assert!(w.check(datetime!(2026-08-01 00:00 UTC)).is_ok());
        assert!(w.check(datetime!(2026-08-01 00:00:01 UTC)).is_err());
    }

    #[test]
    fn expiry_warning_rules() {
        let end = datetime!(2026-03-01 00:00 UTC);
        let renew = Some(datetime!(2026-02-01 00:00 UTC));
        let week = time::Duration::days(7);
        assert_eq!(
            expiry_warning(datetime!(2026-01-15 00:00 UTC), renew, end, week),
            None
        );
        assert!(
            expiry_warning(datetime!(2026-02-02 00:00 UTC), renew, end, week)
                .unwrap()
                .contains("renew_after")
        );
        assert!(
            expiry_warning(datetime!(2026-02-23 00:00 UTC), None, end, week)
                .unwrap()
                .contains("expires soon")
        );
        assert_eq!(
            expiry_warning(datetime!(2026-02-20 00:00 UTC), None, end, week),
            None
        );
    }
}
