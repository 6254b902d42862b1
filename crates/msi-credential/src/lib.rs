#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[doc = include_str!("cli.md")]
pub mod cli {}
pub mod serve;
pub mod telemetry;

#[cfg(test)]
mod tests {
    #[test]
    fn the_hypershift_sidecar_uses_the_token_servers_defaults() {
        use msi_dataplane::hypershift::k8s::{TOKEN_SERVER_PATH, TOKEN_SERVER_PORT};
        assert_eq!(TOKEN_SERVER_PORT, crate::serve::DEFAULT_PORT);
        assert_eq!(TOKEN_SERVER_PATH, crate::serve::DEFAULT_TOKEN_PATH);
    }
}
