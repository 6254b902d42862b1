//! The long form: one chapter per topic that spans the crate. Each module below holds
//! no code, only its chapter.
//!
//! | chapter | read it for |
//! |---|---|
//! | [`go_to_rust`] | each Go name of `github.com/Azure/msi-dataplane` and its Rust counterpart |
//! | [`credential_file`] | what the credential file and its certificate bundle may hold, and what is refused |
//! | [`protocol`] | the client assertion, the token request, Entra's answers, validity, signing, FIPS |
//! | [`token_cache`] | what `get_token` does: the cache, refresh ahead, failures, retries, threads and runtimes |
//! | [`rotation`] | how the reloading credential follows the CSI driver's rotations, compared with Go's |
//! | [`azure_sdk`] | the credentials as `azure_core` `TokenCredential`s |
//! | [`clouds`] | sovereign and custom clouds, and cloud-provider-azure's `azure.json` |
//! | [`errors`] | what to do about an error, by category |
//! | [`troubleshooting`] | a component gets no token: what to check, in order |
//! | [`secrets`] | where secrets can and cannot appear, and the transport's guarantees |
//! | [`performance`] | the measured costs, in one page (the numbers are in `BENCHMARKS.md`) |
//! | [`background`] | every thread and task the crate starts, why, and when it ends |
//! | [`architecture`] | how `src/` is layered, and the repository's other crates and tools |
//!
//! The modules hold the rest: [`dataplane`](crate::dataplane) (managing identities),
//! [`keyvault`](crate::keyvault) (storing and renewing them), [`hypershift`](crate::hypershift)
//! (HyperShift's names and Kubernetes objects), [`telemetry`](crate::telemetry) (metrics,
//! spans and alerts), [`inspect`](crate::inspect) (a file's health report).

#[doc = include_str!("go_to_rust.md")]
pub mod go_to_rust {}

#[doc = include_str!("credential_file.md")]
pub mod credential_file {}

#[doc = include_str!("protocol.md")]
pub mod protocol {}

#[doc = include_str!("token_cache.md")]
pub mod token_cache {}

#[doc = include_str!("rotation.md")]
pub mod rotation {}

#[doc = include_str!("azure_sdk.md")]
pub mod azure_sdk {}

#[doc = include_str!("clouds.md")]
pub mod clouds {}

#[doc = include_str!("errors.md")]
pub mod errors {}

#[doc = include_str!("troubleshooting.md")]
pub mod troubleshooting {}

#[doc = include_str!("secrets.md")]
pub mod secrets {}

#[doc = include_str!("performance.md")]
pub mod performance {}

#[doc = include_str!("background.md")]
pub mod background {}

#[doc = include_str!("architecture.md")]
pub mod architecture {}
