//! From a credential file to a token: the client assertion, the token endpoint, the token
//! cache and `ClientCertificateCredential`. Uses `file/` for the certificate and key and
//! `http/` for the exchanges.

pub(crate) mod access_token;
pub(crate) mod assertion;
pub(crate) mod cache;
pub(crate) mod credential;
pub(crate) mod endpoint;
pub(crate) mod options;
pub(crate) mod refresh;
pub(crate) mod request;
pub(crate) mod tenant;
