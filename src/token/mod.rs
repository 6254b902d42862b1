//! From a credential file to a token: the client assertion, the token endpoint, retries,
//! the token cache and `ClientCertificateCredential`, with the HTTP client it builds.
//! Uses `file/` for the certificate and key.

pub(crate) mod access_token;
pub(crate) mod assertion;
pub(crate) mod cache;
pub(crate) mod credential;
pub(crate) mod endpoint;
pub(crate) mod http;
pub(crate) mod refresh;
pub(crate) mod retry;
pub(crate) mod roots;
