//! The integration tests of the library, in one binary (built once): a module per
//! concern. Tests that need a process-wide setting (a global allocator, a metrics
//! recorder, span capture) are binaries of their own beside this one.

#[path = "../support/mod.rs"]
mod support;

mod azure_core;
#[cfg(feature = "azure_core")]
mod azure_sdk;
mod bundle;
mod cache;
mod cloud_config;
mod clouds;
mod dataplane;
mod end_to_end;
mod hardening;
mod http_options;
mod hypershift;
mod k8s;
mod keyvault;
mod keyvault_store;
mod layers;
mod managed_identities;
mod model;
mod reload_status;
mod renewal;
mod rotation;
mod runtimes;
mod secrets;
mod special_files;
mod transient;
mod user_agent;
