//! `azure.json`: parsing, the identity it selects, the IMDS conflict, and the credential
//! built from it getting a verified token.

use crate::support;

use std::path::Path;

use msi_dataplane::{Cloud, CloudConfig, ErrorKind, ReloadOptions};
use support::atomic_writer::TempDir;
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, leaf_sha256_hex, options, register};

/// A cloud-provider-azure config as an ARO HCP control plane gets it (other keys
/// included, one of them a secret).
const FULL: &str = r#"{
    "cloud": "AzurePublicCloud",
    "tenantId": "72f988bf-86f1-41af-91ab-2d7cd011db47",
    "subscriptionId": "11111111-2222-3333-4444-555555555555",
    "resourceGroup": "hcp-managed-rg",
    "location": "eastus",
    "vnetName": "hcp-vnet",
    "subnetName": "default",
    "securityGroupName": "hcp-nsg",
    "vmType": "standard",
    "loadBalancerSku": "standard",
    "useManagedIdentityExtension": false,
    "aadClientSecret": "super-secret-value-do-not-print",
    "aadMSIDataPlaneIdentityPath": "/mnt/certs/cloud-provider"
}"#;

#[test]
fn the_keys_cloud_provider_azure_writes_are_read() {
    let config = CloudConfig::from_slice(FULL.as_bytes()).unwrap();
    assert_eq!(config.cloud.as_deref(), Some("AzurePublicCloud"));
    assert_eq!(
        config.tenant_id.as_deref(),
        Some("72f988bf-86f1-41af-91ab-2d7cd011db47")
    );
    assert_eq!(
        config.subscription_id.as_deref(),
        Some("11111111-2222-3333-4444-555555555555")
    );
    assert_eq!(config.resource_group.as_deref(), Some("hcp-managed-rg"));
    assert_eq!(config.location.as_deref(), Some("eastus"));
    assert_eq!(config.use_managed_identity_extension, Some(false));
    assert_eq!(config.cloud().unwrap(), Cloud::AZURE_PUBLIC);
    assert_eq!(
        config.identity_path().unwrap(),
        Path::new("/mnt/certs/cloud-provider")
    );
    assert_eq!(config.other["vnetName"], "hcp-vnet");
    assert_eq!(config.other.len(), 6);
}

#[test]
fn every_key_round_trips() {
    let config = CloudConfig::from_slice(FULL.as_bytes()).unwrap();
    let written = serde_json::to_value(&config).unwrap();
    let original: serde_json::Value = serde_json::from_str(FULL).unwrap();
    assert_eq!(written, original);
}

#[test]
fn debug_names_other_keys_but_never_prints_their_values() {
    let config = CloudConfig::from_slice(FULL.as_bytes()).unwrap();
    let debug = format!("{config:?} {config:#?}");
    assert!(debug.contains("aadClientSecret"), "{debug}");
    assert!(debug.contains("hcp-managed-rg"), "{debug}");
    assert!(!debug.contains("super-secret"), "{debug}");
}

#[test]
fn both_identity_sources_are_a_conflict_not_a_choice() {
    let config = CloudConfig::from_slice(
        br#"{"useManagedIdentityExtension": true,
             "userAssignedIdentityID": "9d2c4b6e-0000-0000-0000-000000000000",
             "aadMSIDataPlaneIdentityPath": "/mnt/certs/cloud-provider"}"#,
    )
    .unwrap();
    let err = config.identity_path().unwrap_err();
    assert_eq!(err.kind().code(), "conflicting_identity_sources");
    let message = err.to_string();
    for needle in [
        "useManagedIdentityExtension",
        "aadMSIDataPlaneIdentityPath",
        "/mnt/certs/cloud-provider",
    ] {
        assert!(message.contains(needle), "{message}");
    }
}

#[test]
fn a_missing_identity_path_says_what_the_config_selects_instead() {
    let cases: [(&[u8], bool); 4] = [
        (br#"{}"#, false),
        (br#"{"aadMSIDataPlaneIdentityPath": "  "}"#, false),
        (br#"{"useManagedIdentityExtension": false}"#, false),
        (br#"{"useManagedIdentityExtension": true}"#, true),
    ];
    for (json, imds) in cases {
        let err = CloudConfig::from_slice(json)
            .unwrap()
            .identity_path()
            .unwrap_err();
        assert_eq!(err.kind().code(), "no_identity_path");
        assert_eq!(err.to_string().contains("IMDS"), imds, "{err}");
    }
}

#[test]
fn the_cloud_defaults_to_public_only_when_absent() {
    for json in [&br#"{}"#[..], br#"{"cloud": ""}"#] {
        let config = CloudConfig::from_slice(json).unwrap();
        assert_eq!(config.cloud().unwrap(), Cloud::AZURE_PUBLIC);
    }
    let china = CloudConfig::from_slice(br#"{"cloud": "azurechinacloud"}"#).unwrap();
    assert_eq!(china.cloud().unwrap(), Cloud::AZURE_CHINA);
    let unknown = CloudConfig::from_slice(br#"{"cloud": "AzureGermanCloud"}"#).unwrap();
    assert!(matches!(
        unknown.cloud().unwrap_err().kind(),
        ErrorKind::Config { code: "unknown_cloud", message, .. } if message.contains("`AzureGermanCloud`")
    ));
}

#[test]
fn file_errors_name_the_cloud_config_file() {
    let dir = TempDir::new("cloud-config");
    let missing = dir.join("azure.json");
    let err = CloudConfig::from_path(&missing).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io { .. }));
    assert_eq!(err.path(), Some(missing.as_path()));
    assert!(
        err.to_string()
            .starts_with(&format!("cloud config file {}", missing.display())),
        "{err}"
    );

    let bad = dir.join("bad.json");
    std::fs::write(&bad, br#"{"useManagedIdentityExtension": "yes"}"#).unwrap();
    let err = CloudConfig::from_path(&bad).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::File { code: "json", message, .. } if message.starts_with("invalid JSON at line 1,")),
        "{err}"
    );
    assert!(err.to_string().starts_with("cloud config file"), "{err}");
    assert!(
        !err.to_string().contains("\"yes\""),
        "values are redacted: {err}"
    );

    let huge = dir.join("huge.json");
    std::fs::write(&huge, vec![b' '; 2 * 1024 * 1024]).unwrap();
    let err = CloudConfig::from_path(&huge).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "file_too_large",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn the_credential_built_from_the_config_gets_a_verified_token() {
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let dir = TempDir::new("cloud-config-credential");
    let identity = dir.join("cloud-provider");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    std::fs::write(&identity, creds.to_json().unwrap()).unwrap();
    let azure_json = dir.join("azure.json");
    std::fs::write(
        &azure_json,
        serde_json::json!({
            "cloud": "AzurePublicCloud",
            "tenantId": "72f988bf-86f1-41af-91ab-2d7cd011db47",
            "useManagedIdentityExtension": false,
            "aadMSIDataPlaneIdentityPath": identity,
        })
        .to_string(),
    )
    .unwrap();

    let config = CloudConfig::from_path(&azure_json).unwrap();
    let credential = config
        .identity_credential(options(), ReloadOptions::default())
        .await
        .unwrap();
    assert_eq!(credential.path(), identity.as_path());
    let token = credential.get_token(&[ARM]).await.unwrap();
    let issued = server.issued(token.token()).expect("issued by the server");
    assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("pem-pkcs8"));
}

#[tokio::test]
async fn a_conflicting_config_builds_nothing_and_a_bad_identity_file_is_named() {
    let conflicting = CloudConfig::from_slice(
        br#"{"useManagedIdentityExtension": true, "aadMSIDataPlaneIdentityPath": "/nonexistent"}"#,
    )
    .unwrap();
    let err = conflicting
        .identity_credential(Default::default(), Default::default())
        .await
        .unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::Config {
            code: "conflicting_identity_sources",
            ..
        }
    ));

    let dir = TempDir::new("cloud-config-missing-identity");
    let identity = dir.join("not-there");
    let config = CloudConfig::from_slice(
        serde_json::json!({ "aadMSIDataPlaneIdentityPath": identity })
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let err = config
        .identity_credential(Default::default(), Default::default())
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io { .. }));
    assert_eq!(err.path(), Some(identity.as_path()));
    assert!(err.to_string().starts_with("credential file"), "{err}");
}

#[test]
fn the_file_can_be_chosen_explicitly_over_a_conflicting_config() {
    // HyperShift's generated azure.json for ARO HCP sets both.
    let config = CloudConfig::from_slice(
        br#"{"useManagedIdentityExtension": true, "aadMSIDataPlaneIdentityPath": "/mnt/certs/cloud-provider"}"#,
    )
    .unwrap();
    assert!(config.identity_path().is_err());
    assert_eq!(
        config.credential_file_path().unwrap(),
        Path::new("/mnt/certs/cloud-provider")
    );
    let plain =
        CloudConfig::from_slice(br#"{"aadMSIDataPlaneIdentityPath": "/mnt/certs/a"}"#).unwrap();
    assert_eq!(
        plain.credential_file_path().unwrap(),
        Path::new("/mnt/certs/a")
    );
    let none = CloudConfig::from_slice(br#"{"useManagedIdentityExtension": true}"#).unwrap();
    let err = none.credential_file_path().unwrap_err();
    assert_eq!(err.kind().code(), "no_identity_path");
    assert!(err.to_string().contains("IMDS"), "{err}");
}
