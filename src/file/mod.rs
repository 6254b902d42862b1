//! The credential file: its JSON model (parsed once into a typed value), the certificate
//! bundle in `client_secret` (PEM or PKCS#12, read by the crate's own PEM reader and
//! PKCS#12 pre-scan), the RSA key, the leaf certificate, and the validity they give.
//! Pure parsing; uses only the shared basics at the crate root.

pub(crate) mod bundle;
pub(crate) mod certificate;
pub(crate) mod key;
pub(crate) mod model;
pub(crate) mod pem_blocks;
pub(crate) mod pkcs12_scan;
pub(crate) mod validity;
