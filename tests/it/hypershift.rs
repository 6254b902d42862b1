//! HyperShift names and the environment: where the credential file is, whether this is
//! ARO HCP, and the credential built from `MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH`.
//!
//! The resolution rules are tested through the pure functions and their `*_from`
//! variants, with a map standing in for the environment. The one behaviour that needs the
//! real process environment, `hypershift::credential_from_env`, runs in a child
//! process: this test binary re-runs itself on one `#[ignore]`d test with the variable set
//! (or removed) by `Command::env`, and a marker variable that tells the child test it is
//! the child (run on its own, e.g. by `--include-ignored`, it returns at once). Setting
//! the variable in this process instead would need
//! `std::env::set_var`, which is `unsafe` in edition 2024 because another thread may read
//! the environment at the same time, and other tests here do run on other threads.

use crate::support;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use msi_dataplane::hypershift::{
    self, ARO_HCP, CERTS_MOUNT_PATH, CREDENTIALS_FILE_PATH_ENV, Component,
    KEY_VAULT_USER_CLIENT_ID_ENV, KMS_MOUNT_PATH, MANAGED_SERVICE_ENV,
    SECRET_PROVIDER_CLASS_ATTRIBUTE, SECRET_PROVIDER_CLASS_ENV, SECRETS_STORE_CSI_DRIVER,
    credentials_path_from, is_aro_hcp_from, is_aro_hcp_value, key_vault_user_client_id_from,
    resolve_credentials_path,
};
use msi_dataplane::{ClientCertificateCredentialOptions, Error, ErrorKind, ReloadOptions};
use support::fixtures::credential_path;
use support::harness::leaf_sha256_hex;

/// An environment holding only `vars`.
fn env(vars: &[(&str, OsString)]) -> impl Fn(&str) -> Option<OsString> + use<> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    move |name| map.get(name).cloned()
}

/// The reason of an `InvalidEnvironmentVariable` for the credentials variable.
fn invalid_reason(err: &Error) -> &str {
    match err.kind() {
        ErrorKind::Config {
            code: "invalid_environment_variable",
            field,
            message,
        } => {
            assert_eq!(*field, CREDENTIALS_FILE_PATH_ENV);
            let prefix = format!("environment variable {field} is invalid: ");
            message.strip_prefix(&prefix).unwrap()
        }
        other => panic!("expected InvalidEnvironmentVariable, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// resolving MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH
// ---------------------------------------------------------------------------------------

#[test]
fn accepted_values_resolve_to_the_file() {
    for (value, expected) in [
        // HyperShift's own form: /mnt/certs/ + the secret name.
        ("/mnt/certs/cpo-credentials", "/mnt/certs/cpo-credentials"),
        // A bare secret name, as one operator sets it.
        ("cpo-credentials", "/mnt/certs/cpo-credentials"),
        ("uamsi-0e2d7c3a.json", "/mnt/certs/uamsi-0e2d7c3a.json"),
        // Any absolute path is used as it is.
        ("/var/run/identity/creds", "/var/run/identity/creds"),
        ("/mnt/kms/kms-credentials", "/mnt/kms/kms-credentials"),
        // A name that merely contains dots is a name.
        ("..creds", "/mnt/certs/..creds"),
    ] {
        let path = resolve_credentials_path(value)
            .unwrap_or_else(|e| panic!("{value:?} should resolve: {e}"));
        assert_eq!(path, Path::new(expected), "{value:?}");
    }
}

#[test]
fn refused_values_are_typed_errors_naming_the_variable() {
    for (value, reason_has) in [
        ("", "is empty"),
        ("certs/cpo-credentials", "relative path"),
        ("./cpo-credentials", "relative path"),
        ("mnt/certs/", "relative path"),
        ("/mnt/certs/../etc/passwd", "`..`"),
        ("/mnt/certs/..", "`..`"),
        ("/mnt/certs/", "ends with `/`"),
        ("/", "ends with `/`"),
        ("..", "not a file name"),
        (".", "not a file name"),
        ("cpo\0credentials", "control character"),
        ("/mnt/certs/cpo\ncredentials", "control character"),
        (" cpo-credentials", "whitespace"),
        ("cpo-credentials ", "whitespace"),
    ] {
        let err = resolve_credentials_path(value).expect_err(value);
        let reason = invalid_reason(&err);
        assert!(
            reason.contains(reason_has),
            "{value:?}: reason {reason:?} should mention {reason_has:?}"
        );
        assert!(!err.is_transient(), "{value:?}");
        // The message names the variable, so an operator knows what to fix.
        assert!(
            err.to_string().contains(CREDENTIALS_FILE_PATH_ENV),
            "{value:?}: {err}"
        );
    }
    let long = "a".repeat(256);
    let err = resolve_credentials_path(&long).expect_err("256-byte name");
    assert!(invalid_reason(&err).contains("255 bytes"), "{err}");
    assert!(resolve_credentials_path(&"a".repeat(255)).is_ok());
}

#[test]
fn lookup_variant_reads_the_variable_by_name() {
    let lookup = env(&[(CREDENTIALS_FILE_PATH_ENV, "cpo-credentials".into())]);
    assert_eq!(
        credentials_path_from(lookup).unwrap(),
        PathBuf::from(format!("{CERTS_MOUNT_PATH}/cpo-credentials"))
    );
    // Other variables are not consulted.
    let lookup = env(&[("ARO_HCP_CLIENT_CERTIFICATE_PATH", "/mnt/certs/x".into())]);
    let err = credentials_path_from(lookup).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "missing_environment_variable",
                field: CREDENTIALS_FILE_PATH_ENV,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "environment variable MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH is not set"
    );
    assert!(!err.is_transient());
}

#[cfg(unix)]
#[test]
fn non_utf8_values_are_errors_not_panics() {
    use std::os::unix::ffi::OsStringExt;
    let raw = OsString::from_vec(b"/mnt/certs/cpo-\xff\xfe".to_vec());
    let err = credentials_path_from(env(&[(CREDENTIALS_FILE_PATH_ENV, raw.clone())])).unwrap_err();
    assert!(invalid_reason(&err).contains("not valid UTF-8"), "{err}");

    // Not ARO HCP, and no panic either.
    assert!(!is_aro_hcp_from(env(&[(MANAGED_SERVICE_ENV, raw.clone())])));

    let err =
        key_vault_user_client_id_from(env(&[(KEY_VAULT_USER_CLIENT_ID_ENV, raw)])).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Config { code: "invalid_environment_variable", field, .. } if *field == KEY_VAULT_USER_CLIENT_ID_ENV),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------
// MANAGED_SERVICE and ARO_HCP_KEY_VAULT_USER_CLIENT_ID
// ---------------------------------------------------------------------------------------

#[test]
fn aro_hcp_is_an_exact_match_as_in_hypershift() {
    assert!(is_aro_hcp_value("ARO-HCP"));
    for other in [
        "", "aro-hcp", "Aro-Hcp", "ARO-HCP ", " ARO-HCP", "ARO_HCP", "ROSA-HCP",
    ] {
        assert!(!is_aro_hcp_value(other), "{other:?}");
    }
    assert!(is_aro_hcp_from(env(&[(
        MANAGED_SERVICE_ENV,
        "ARO-HCP".into()
    )])));
    assert!(!is_aro_hcp_from(env(&[(
        MANAGED_SERVICE_ENV,
        "ROSA-HCP".into()
    )])));
    assert!(!is_aro_hcp_from(env(&[])));
    // The variable read is MANAGED_SERVICE, nothing else.
    assert!(!is_aro_hcp_from(env(&[(
        "MANAGED_SERVICE_NAME",
        "ARO-HCP".into()
    )])));
}

#[test]
fn key_vault_user_client_id_is_required_and_clean() {
    let id = "0e2d7c3a-5d6e-4f3a-9b1c-2a4d6e8f0a1b";
    assert_eq!(
        key_vault_user_client_id_from(env(&[(KEY_VAULT_USER_CLIENT_ID_ENV, id.into())])).unwrap(),
        id
    );
    let err = key_vault_user_client_id_from(env(&[])).unwrap_err();
    assert!(matches!(
        err.kind(),
        ErrorKind::Config {
            code: "missing_environment_variable",
            field: KEY_VAULT_USER_CLIENT_ID_ENV,
            ..
        }
    ));
    for bad in ["", " id", "id\n"] {
        let err = key_vault_user_client_id_from(env(&[(KEY_VAULT_USER_CLIENT_ID_ENV, bad.into())]))
            .unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Config {
                    code: "invalid_environment_variable",
                    ..
                }
            ),
            "{bad:?}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// the names HyperShift uses
// ---------------------------------------------------------------------------------------

#[test]
fn constants_are_hypershifts_strings() {
    assert_eq!(
        CREDENTIALS_FILE_PATH_ENV,
        "MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH"
    );
    assert_eq!(MANAGED_SERVICE_ENV, "MANAGED_SERVICE");
    assert_eq!(ARO_HCP, "ARO-HCP");
    assert_eq!(
        KEY_VAULT_USER_CLIENT_ID_ENV,
        "ARO_HCP_KEY_VAULT_USER_CLIENT_ID"
    );
    assert_eq!(SECRET_PROVIDER_CLASS_ENV, "ARO_HCP_SECRET_PROVIDER_CLASS");
    assert_eq!(CERTS_MOUNT_PATH, "/mnt/certs");
    assert_eq!(KMS_MOUNT_PATH, "/mnt/kms");
    assert_eq!(SECRETS_STORE_CSI_DRIVER, "secrets-store.csi.k8s.io");
    assert_eq!(SECRET_PROVIDER_CLASS_ATTRIBUTE, "secretProviderClass");
}

#[test]
fn component_names_are_hypershifts() {
    let expected = [
        (
            Component::ControlPlaneOperator,
            "managed-azure-cpo",
            Some("cpo-cert"),
        ),
        (
            Component::CloudProvider,
            "managed-azure-cloud-provider",
            Some("cloud-provider-cert"),
        ),
        (
            Component::NodePoolManagement,
            "managed-azure-nodepool-management",
            Some("nodepool-management-cert"),
        ),
        (
            Component::Ingress,
            "managed-azure-ingress",
            Some("ingress-cert"),
        ),
        (Component::Network, "managed-azure-network", None),
        (Component::DiskCsi, "managed-azure-disk-csi", None),
        (Component::FileCsi, "managed-azure-file-csi", None),
        (
            Component::ImageRegistry,
            "managed-azure-image-registry",
            Some("image-registry-cert"),
        ),
        (Component::Kms, "managed-azure-kms", Some("kms-cert")),
    ];
    assert_eq!(Component::ALL.len(), expected.len());
    for (component, spc, volume) in expected {
        assert!(Component::ALL.contains(&component), "{component:?}");
        assert_eq!(component.secret_provider_class_name(), spc);
        assert_eq!(component.volume_name(), volume, "{component:?}");
        assert_eq!(
            Component::from_secret_provider_class_name(spc),
            Some(component)
        );
    }
    assert_eq!(
        Component::from_secret_provider_class_name("managed-azure"),
        None
    );
    assert_eq!(
        Component::from_secret_provider_class_name("MANAGED-AZURE-CPO"),
        None
    );
}

// ---------------------------------------------------------------------------------------
// hypershift::credential_from_env, in a child process
// ---------------------------------------------------------------------------------------

/// Set for the child process only.
const CHILD_MARKER: &str = "MSI_DATAPLANE_TEST_CHILD";

/// Whether this is the child process `run_child` started.
fn in_child() -> bool {
    std::env::var_os(CHILD_MARKER).is_some()
}

/// Run the `#[ignore]`d test `name` of this binary in a child process with `configure`d
/// environment; assert that exactly that one test ran and passed.
fn run_child(name: &str, configure: impl FnOnce(&mut Command)) {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    // Tests are named by their module path inside the binary (`hypershift::…`).
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    cmd.args([
        &format!("{module}::{name}"),
        "--exact",
        "--ignored",
        "--test-threads=1",
        "--nocapture",
    ]);
    cmd.env(CHILD_MARKER, "1");
    configure(&mut cmd);
    let out = cmd.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "child test {name} failed:\n{stdout}\n{stderr}"
    );
}

#[test]
fn from_env_loads_the_file_named_by_the_variable() {
    run_child("child_from_env_loads_fixture", |cmd| {
        cmd.env(CREDENTIALS_FILE_PATH_ENV, credential_path("pem-pkcs8"));
    });
}

#[test]
fn from_env_without_the_variable_says_which_one_is_missing() {
    run_child("child_from_env_unset", |cmd| {
        cmd.env_remove(CREDENTIALS_FILE_PATH_ENV);
    });
}

#[test]
fn from_env_with_a_relative_path_is_refused_before_any_file_is_read() {
    run_child("child_from_env_relative", |cmd| {
        cmd.env(
            CREDENTIALS_FILE_PATH_ENV,
            "fixtures/credentials/pem-pkcs8.json",
        );
    });
}

#[tokio::test]
#[ignore = "run by from_env_loads_the_file_named_by_the_variable in a child process"]
async fn child_from_env_loads_fixture() {
    if !in_child() {
        return;
    }
    let expected = credential_path("pem-pkcs8");
    assert_eq!(hypershift::credentials_path().unwrap(), expected);
    let credential = hypershift::credential_from_env(
        ClientCertificateCredentialOptions::default(),
        ReloadOptions::default().with_watch(false),
    )
    .await
    .expect("credential_from_env");
    assert_eq!(credential.path(), expected);
    let status = credential.status();
    assert_eq!(status.thumbprint_sha256, leaf_sha256_hex("pem-pkcs8"));
    let fixture = support::fixtures::load("pem-pkcs8");
    assert_eq!(
        Some(credential.current().client_id()),
        fixture.client_id.as_deref()
    );
}

#[tokio::test]
#[ignore = "run by from_env_without_the_variable_says_which_one_is_missing in a child process"]
async fn child_from_env_unset() {
    if !in_child() {
        return;
    }
    let err = hypershift::credential_from_env(Default::default(), Default::default())
        .await
        .expect_err("no variable, no credential");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "missing_environment_variable",
                field: CREDENTIALS_FILE_PATH_ENV,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.path(), None);
}

#[tokio::test]
#[ignore = "run by from_env_with_a_relative_path_is_refused_before_any_file_is_read"]
async fn child_from_env_relative() {
    if !in_child() {
        return;
    }
    // The path exists relative to the package root (the test's working directory), and
    // is still refused: a relative path would depend on where the process started.
    assert!(Path::new("fixtures/credentials/pem-pkcs8.json").exists());
    let err = hypershift::credential_from_env(Default::default(), Default::default())
        .await
        .expect_err("relative path refused");
    assert!(invalid_reason(&err).contains("relative path"), "{err}");
}
