//! `azure_core::credentials::TokenCredential` for the credentials (feature `azure_core`).
