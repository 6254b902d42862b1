//! A credential read back from Key Vault is not left in freed memory in its unescaped
//! form: the scanning allocator (tests/support/scanning.rs) searches every block freed
//! while the store gets the credential, parses it and drops it.
//!
//! In Key Vault's answer the value is a JSON string, so the credential JSON inside it is
//! escaped (`\"client_secret\":\"…`). The HTTP stack's copies of the answer hold only that
//! escaped form (SECURITY.md: not the crate's to wipe). The needle is the unescaped form,
//! which exists only where the value has been unescaped: in the crate's zeroized buffer,
//! or, were the SDK's model used, in `serde_json`'s scratch buffer and a `String`, freed
//! unzeroized.
#![cfg(feature = "keyvault")]

mod support;

use std::sync::Arc;

use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane_testing::KeyVaultServer;
use serde_json::json;
use support::entra::{EntraServer, Scripted};
use support::fixtures::load;
use support::harness::{credential, https_env};
use support::scanning::{Scanning, arm, disarm, set_needles};

#[global_allocator]
static GLOBAL: Scanning = Scanning;

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";

#[tokio::test(flavor = "current_thread")]
async fn a_credential_got_from_key_vault_leaves_no_unescaped_copy_in_freed_memory() {
    let entra = EntraServer::start().await;
    let vault = KeyVaultServer::start(&entra, TENANT).await;
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(credential(&entra, "pem-pkcs8")),
        StoreOptions::default()
            .with_environment(https_env())
            .verify_challenge_resource(false),
    )
    .unwrap();
    let creds = load("rotation-1");
    let stored = store.put_user_assigned_identity(ID, &creds).await.unwrap();
    let secret = creds.client_secret.as_ref().unwrap().expose_secret();
    let value = creds.to_json().unwrap();
    let unescaped = format!(r#"client_secret":"{}"#, &secret[..16]);
    assert!(value.contains(&unescaped));
    set_needles(vec![(
        "the credential JSON, unescaped".into(),
        unescaped.into_bytes(),
    )]);
    // The answer as Key Vault writes it, built before arming: the server sends these
    // bytes as they are, so nothing on its side unescapes the value while armed.
    let answer = json!({
        "value": value,
        "id": format!("{}secrets/uamsi-{ID}/{}", vault.url(), stored.version.clone().unwrap()),
        "attributes": {"enabled": true, "nbf": 1_767_225_600, "exp": 1_798_761_600},
        "tags": stored.tags,
    })
    .to_string();
    drop(value);
    vault.enqueue(Scripted::status(200).body(&answer));

    arm();
    {
        let got = store.get_user_assigned_identity(ID, None).await.unwrap();
        assert_eq!(got.credentials, creds);
        assert_eq!(got.properties.version, stored.version);
    }
    let leaks = disarm();
    assert!(
        leaks.is_empty(),
        "freed without zeroizing (needle, blocks): {leaks:?}"
    );
}
