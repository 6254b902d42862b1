//! Why a link a service handed back was not followed.

/// Why a link that a service handed back was not followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LinkFault {
    /// The link leads to another scheme, host or port than the service's own.
    #[error("the link leads to {link_origin}, not to the service's own origin {service_origin}")]
    ForeignOrigin {
        /// Where the link leads (scheme, host and port; bounded and escaped).
        link_origin: String,
        /// The service's own origin.
        service_origin: String,
    },
    /// The link was already followed in this walk: the service is paging in a loop.
    #[error("the link for page {page} repeats one already followed (a paging loop)")]
    Loop {
        /// The page (counted from 1) whose link repeated an earlier one.
        page: usize,
    },
    /// The walk reached its page limit.
    #[error("the listing has more than {limit} pages (the configured limit)")]
    TooManyPages {
        /// The limit.
        limit: usize,
    },
    /// The walk reached its item limit.
    #[error("the listing has more than {limit} items (the configured limit)")]
    TooManyItems {
        /// The limit.
        limit: usize,
    },
    /// The items kept so far reached the listing's memory limit.
    #[error("the listing's items take more than {limit} bytes (the configured limit)")]
    TooManyBytes {
        /// The limit.
        limit: usize,
    },
    /// The walk did not end within its deadline.
    #[error("the listing did not end within {} s (the configured deadline)", after.as_secs())]
    Deadline {
        /// The deadline.
        after: std::time::Duration,
    },
}
