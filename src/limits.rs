//! The crate's fixed limits and timings, for callers who size buffers, tune alerts or
//! write tests against them. Most users never need them; each is also named in the
//! error it causes (for example `file_too_large` says the limit in its message).
//!
//! Durations are `std::time::Duration`.

// Reading the credential file.
pub use crate::file::bundle::MAX_CERTIFICATES;
pub use crate::file::key::{MAX_RSA_BITS, MIN_RSA_BITS};
pub use crate::file::model::MAX_CREDENTIAL_FILE_BYTES;
pub use crate::file::pkcs12_scan::{MAX_PKCS12_BAGS, MAX_PKCS12_CONTAINERS, MAX_PKCS12_ITERATIONS};

// Getting and caching tokens.
pub use crate::file::validity::NOT_BEFORE_SKEW;
pub use crate::http::body::MAX_RESPONSE_BYTES;
pub use crate::token::assertion::ASSERTION_LIFETIME;
pub use crate::token::refresh::REFRESH_WINDOW as MIN_REFRESH_WINDOW;
pub use crate::token::refresh::{
    EXPIRY_MARGIN, FAILURE_MEMORY, MAX_CACHED_SCOPES, MIN_REFRESH_BACKOFF, NEAR_END,
};
