//! HyperShift's managed identities file: the sample parses; each missing part and each
//! bad value is named, all in one error; with `k8s`, every component's objects.

use msi_dataplane::ErrorKind;
use msi_dataplane::hypershift::Component;
use msi_dataplane::hypershift::managed_identities::ManagedIdentities;
use serde_json::{Value, json};

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/hypershift/managed-identities.json"
);

fn sample() -> Value {
    serde_json::from_slice(&std::fs::read(SAMPLE).unwrap()).unwrap()
}

fn problems(v: &Value) -> Vec<String> {
    let err = ManagedIdentities::from_slice(v.to_string().as_bytes()).unwrap_err();
    assert_eq!(err.kind().code(), "invalid_managed_identities", "{err:?}");
    // The message lists every problem, each naming its field.
    let message = err.to_string();
    let listed = message
        .strip_prefix("invalid managed identities file: ")
        .unwrap();
    listed.split("; ").map(str::to_owned).collect()
}

#[test]
fn the_sample_parses_with_every_component() {
    let file = ManagedIdentities::from_slice(&std::fs::read(SAMPLE).unwrap()).unwrap();
    assert_eq!(file.key_vault.name, "aro-hcp-msi-test");
    assert_eq!(
        file.key_vault_url(),
        "https://aro-hcp-msi-test.vault.azure.net/"
    );
    assert_eq!(file.components.len(), 9);
    let cpo = file.component(Component::ControlPlaneOperator).unwrap();
    assert_eq!(cpo.credentials_secret_name, "uamsi-control-plane-operator");
    assert_eq!(
        file.component(Component::DiskCsi)
            .unwrap()
            .credentials_secret_name,
        "uamsi-disk"
    );
    assert_eq!(
        file.data_plane.file_client_id,
        "22222222-2222-4222-8222-222222222203"
    );
}

#[test]
fn kms_is_optional() {
    let mut v = sample();
    v["controlPlane"].as_object_mut().unwrap().remove("kms");
    let file = ManagedIdentities::from_slice(v.to_string().as_bytes()).unwrap();
    assert_eq!(file.components.len(), 8);
    assert!(file.component(Component::Kms).is_none());
}

#[test]
fn each_missing_part_is_named() {
    for key in [
        "cloudProvider",
        "nodePoolManagement",
        "controlPlaneOperator",
        "imageRegistry",
        "ingress",
        "network",
        "disk",
        "file",
        "managedIdentitiesKeyVault",
    ] {
        let mut v = sample();
        v["controlPlane"].as_object_mut().unwrap().remove(key);
        assert_eq!(problems(&v), [format!("controlPlane.{key}: is missing")]);
    }
    for key in ["clientID", "credentialsSecretName", "objectEncoding"] {
        let mut v = sample();
        v["controlPlane"]["ingress"]
            .as_object_mut()
            .unwrap()
            .remove(key);
        assert_eq!(
            problems(&v),
            [format!("controlPlane.ingress.{key}: is missing")]
        );
    }
    for key in [
        "imageRegistryMSIClientID",
        "diskMSIClientID",
        "fileMSIClientID",
    ] {
        let mut v = sample();
        v["dataPlane"].as_object_mut().unwrap().remove(key);
        assert_eq!(problems(&v), [format!("dataPlane.{key}: is missing")]);
    }
    let mut v = sample();
    v.as_object_mut().unwrap().remove("dataPlane");
    v.as_object_mut().unwrap().remove("controlPlane");
    assert_eq!(
        problems(&v),
        ["controlPlane: is missing", "dataPlane: is missing"]
    );
}

#[test]
fn every_bad_value_is_named_in_one_error() {
    let mut v = sample();
    v["controlPlane"]["managedIdentitiesKeyVault"] =
        json!({"name": "a--b", "tenantID": "not-a-guid"});
    v["controlPlane"]["disk"]["clientID"] = json!("11111111-1111-4111-8111-11111111110Z");
    v["controlPlane"]["file"]["credentialsSecretName"] = json!("uamsi_file");
    v["controlPlane"]["kms"]["objectEncoding"] = json!("utf8");
    v["dataPlane"]["diskMSIClientID"] = json!("");
    let found = problems(&v);
    let expect = [
        "controlPlane.managedIdentitiesKeyVault.name: `a--b` is not a Key Vault name",
        "controlPlane.managedIdentitiesKeyVault.tenantID: `not-a-guid` is not a GUID",
        "controlPlane.disk.clientID:",
        "controlPlane.file.credentialsSecretName:",
        "controlPlane.kms.objectEncoding: `utf8` is not one of utf-8, hex, base64",
        "dataPlane.diskMSIClientID: is empty",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (f, e) in found.iter().zip(expect) {
        assert!(f.starts_with(e), "{f} / {e}");
    }
    // Not JSON: a JSON error, not a panic.
    let err = ManagedIdentities::from_slice(b"{").unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::File { code: "json", .. }),
        "{err:?}"
    );
}

#[cfg(feature = "k8s")]
#[test]
fn with_k8s_every_component_gets_its_objects() {
    let file = ManagedIdentities::from_slice(&std::fs::read(SAMPLE).unwrap()).unwrap();
    let objects = file
        .kubernetes_objects("clusters-demo", "33333333-3333-4333-8333-333333333333")
        .unwrap();
    assert_eq!(objects.len(), 9);
    for o in &objects {
        let name = o.secret_provider_class.metadata.name.as_deref().unwrap();
        assert_eq!(name, o.component.secret_provider_class_name());
        let params = &o.secret_provider_class.spec.parameters;
        assert_eq!(params["keyvaultName"], "aro-hcp-msi-test");
        assert!(
            params["objects"]
                .contains(&file.component(o.component).unwrap().credentials_secret_name)
        );
        assert_eq!(o.volume.is_some(), o.component.volume_name().is_some());
    }
    let kms = objects
        .iter()
        .find(|o| o.component == Component::Kms)
        .unwrap();
    assert_eq!(kms.volume.as_ref().unwrap().1.mount_path, "/mnt/kms");
    let cpo = objects
        .iter()
        .find(|o| o.component == Component::ControlPlaneOperator)
        .unwrap();
    assert_eq!(cpo.volume.as_ref().unwrap().1.mount_path, "/mnt/certs");
}
