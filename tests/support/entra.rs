//! The Entra-compatible token server: the testing kit (the `msi-dataplane-testing` crate),
//! re-exported under the name the tests and examples use.
#![allow(unused_imports)]

pub use msi_dataplane_testing::{
    CLOCK_SKEW_SECS, EntraServer, IssuedToken, JWT_BEARER, MAX_ASSERTION_LIFETIME_SECS, Outcome,
    RecordedRequest, Scripted, TokenShape, server_tls_config,
};
