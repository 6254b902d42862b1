//! The Kubernetes objects of the `k8s` feature: their shapes are HyperShift's, their
//! field names are the ones `kubectl` reads, and they survive a trip through YAML and
//! JSON. YAML is written and parsed by `serde_norway` (a YAML 1.2 parser, as kubectl's).
#![cfg(feature = "k8s")]

use std::collections::BTreeMap;

use msi_dataplane::ErrorKind;
use msi_dataplane::hypershift::k8s::k8s_openapi::api::core::v1::{EnvVar, Volume, VolumeMount};
use msi_dataplane::hypershift::k8s::k8s_openapi::{self, Resource};
use msi_dataplane::hypershift::k8s::{
    self, KeyVaultObject, ObjectEncoding, SECRET_PROVIDER_CLASS_API_VERSION,
    SECRET_PROVIDER_CLASS_KIND, SecretProviderClass, SecretProviderClassBuilder, objects_parameter,
};
use msi_dataplane::hypershift::{Component, resolve_credentials_path};
use serde_json::json;
use serde_norway::Value as Yaml;

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "0e2d7c3a-5d6e-4f3a-9b1c-2a4d6e8f0a1b";

/// Serialize to YAML and parse it back as `T` and as a plain YAML value.
fn yaml_round_trip<T>(value: &T) -> (T, Yaml, String)
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let text = serde_norway::to_string(value).expect("to YAML");
    let back: T = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let plain: Yaml = serde_norway::from_str(&text).expect("plain YAML");
    (back, plain, text)
}

fn json_round_trip<T>(value: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let text = serde_json::to_string(value).expect("to JSON");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The SecretProviderClass HyperShift writes for the control-plane operator.
fn cpo_builder() -> SecretProviderClassBuilder {
    SecretProviderClass::for_component(Component::ControlPlaneOperator)
        .namespace("clusters-demo")
        .key_vault_name("demo-mi-kv")
        .tenant_id(TENANT)
        .user_assigned_identity_id(CLIENT)
        .object(KeyVaultObject::secret(
            "cpo-credentials",
            ObjectEncoding::Utf8,
        ))
}

/// The field named by an `InvalidKubernetesObject`.
fn invalid_field(err: &msi_dataplane::Error) -> &'static str {
    match err.kind() {
        ErrorKind::Config {
            code: "invalid_kubernetes_object",
            field,
            ..
        } => field,
        other => panic!("expected InvalidKubernetesObject, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// the pod's pieces
// ---------------------------------------------------------------------------------------

#[test]
fn csi_volume_has_hypershifts_shape() {
    let volume = k8s::csi_volume("cpo-cert", "managed-azure-cpo").unwrap();
    // Exactly the fields HyperShift sets, under kubectl's names, and nothing else.
    assert_eq!(
        serde_json::to_value(&volume).unwrap(),
        json!({
            "name": "cpo-cert",
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "readOnly": true,
                "volumeAttributes": {"secretProviderClass": "managed-azure-cpo"}
            }
        })
    );
    let (back, plain, text) = yaml_round_trip(&volume);
    assert_eq!(back, volume);
    assert_eq!(plain["csi"]["readOnly"], Yaml::Bool(true), "{text}");
    assert_eq!(
        plain["csi"]["volumeAttributes"]["secretProviderClass"].as_str(),
        Some("managed-azure-cpo"),
        "{text}"
    );
    assert_eq!(json_round_trip(&volume), volume);
}

#[test]
fn mounts_are_read_only_at_certs_and_kms() {
    for (mount, path) in [
        (k8s::certs_volume_mount("cpo-cert").unwrap(), "/mnt/certs"),
        (k8s::kms_volume_mount("kms-cert").unwrap(), "/mnt/kms"),
    ] {
        assert_eq!(
            serde_json::to_value(&mount).unwrap(),
            json!({"name": mount.name, "mountPath": path, "readOnly": true})
        );
        let (back, plain, _) = yaml_round_trip(&mount);
        assert_eq!(back, mount);
        assert_eq!(plain["mountPath"].as_str(), Some(path));
        assert_eq!(json_round_trip::<VolumeMount>(&mount), mount);
    }
}

#[test]
fn env_var_names_the_file_the_reader_resolves() {
    let env = k8s::credentials_env_var("cpo-credentials").unwrap();
    assert_eq!(
        serde_json::to_value(&env).unwrap(),
        json!({
            "name": "MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH",
            "value": "/mnt/certs/cpo-credentials"
        })
    );
    let (back, _, _) = yaml_round_trip(&env);
    assert_eq!(back, env);
    assert_eq!(json_round_trip::<EnvVar>(&env), env);
    // What the writer puts in the pod is what the reader resolves, unchanged.
    let value = env.value.as_deref().unwrap();
    assert_eq!(
        resolve_credentials_path(value).unwrap().to_str(),
        Some(value)
    );
}

#[test]
fn pod_piece_inputs_are_checked() {
    for (result, field) in [
        (
            k8s::csi_volume("", "managed-azure-cpo").map(drop),
            "Volume.name",
        ),
        (
            k8s::csi_volume("CPO-cert", "managed-azure-cpo").map(drop),
            "Volume.name",
        ),
        (
            k8s::csi_volume(&"a".repeat(64), "managed-azure-cpo").map(drop),
            "Volume.name",
        ),
        (
            k8s::csi_volume("cpo-cert", "").map(drop),
            "volumeAttributes.secretProviderClass",
        ),
        (
            k8s::csi_volume("cpo-cert", "managed_azure_cpo").map(drop),
            "volumeAttributes.secretProviderClass",
        ),
        (k8s::certs_volume_mount("").map(drop), "VolumeMount.name"),
        (
            k8s::kms_volume_mount("kms cert").map(drop),
            "VolumeMount.name",
        ),
        (k8s::credentials_env_var("").map(drop), "EnvVar.value"),
        (k8s::credentials_env_var("a/b").map(drop), "EnvVar.value"),
        (k8s::credentials_env_var("..").map(drop), "EnvVar.value"),
        (k8s::credentials_env_var("x\n").map(drop), "EnvVar.value"),
    ] {
        let err = result.expect_err(field);
        assert_eq!(invalid_field(&err), field, "{err}");
        assert!(!err.is_transient());
    }
}

// ---------------------------------------------------------------------------------------
// the SecretProviderClass
// ---------------------------------------------------------------------------------------

#[test]
fn secret_provider_class_has_hypershifts_parameters() {
    let spc = cpo_builder().build().unwrap();
    assert_eq!(
        serde_json::to_value(&spc).unwrap(),
        json!({
            "apiVersion": "secrets-store.csi.x-k8s.io/v1",
            "kind": "SecretProviderClass",
            "metadata": {"name": "managed-azure-cpo", "namespace": "clusters-demo"},
            "spec": {
                "provider": "azure",
                "parameters": {
                    "usePodIdentity": "false",
                    "useVMManagedIdentity": "true",
                    "userAssignedIdentityID": CLIENT,
                    "keyvaultName": "demo-mi-kv",
                    "tenantId": TENANT,
                    // Byte for byte what HyperShift's formatSecretProviderClassObject
                    // writes (its own unit test expects this string).
                    "objects": "\narray:\n  - |\n    objectName: cpo-credentials\n    objectEncoding: utf-8\n    objectType: secret\n"
                }
            }
        })
    );
}

#[test]
fn secret_provider_class_survives_yaml_and_json() {
    let spc = cpo_builder().build().unwrap();
    let (back, plain, text) = yaml_round_trip(&spc);
    assert_eq!(back, spc, "{text}");
    assert_eq!(json_round_trip(&spc), spc);

    // What kubectl reads: the header, metadata, and every parameter a string.
    assert_eq!(
        plain["apiVersion"].as_str(),
        Some(SECRET_PROVIDER_CLASS_API_VERSION)
    );
    assert_eq!(plain["kind"].as_str(), Some(SECRET_PROVIDER_CLASS_KIND));
    assert_eq!(
        plain["metadata"]["name"].as_str(),
        Some("managed-azure-cpo")
    );
    assert_eq!(
        plain["metadata"]["namespace"].as_str(),
        Some("clusters-demo")
    );
    assert_eq!(plain["spec"]["provider"].as_str(), Some("azure"));
    let parameters = plain["spec"]["parameters"].as_mapping().expect("mapping");
    let keys: Vec<&str> = parameters.keys().filter_map(Yaml::as_str).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "keyvaultName",
            "objects",
            "tenantId",
            "usePodIdentity",
            "useVMManagedIdentity",
            "userAssignedIdentityID"
        ]
    );
    for (key, value) in parameters {
        // "false"/"true" must stay strings: the CRD's parameters are map[string]string.
        assert!(value.is_string(), "{key:?} is {value:?} in\n{text}");
    }
    assert_eq!(parameters["usePodIdentity"].as_str(), Some("false"));
    assert_eq!(parameters["useVMManagedIdentity"].as_str(), Some("true"));
}

/// Parse an `objects` parameter as the Azure provider does: a YAML map with an `array`
/// of strings, each one a YAML map describing one object.
fn parse_objects(objects: &str) -> Vec<KeyVaultObject> {
    let doc: Yaml = serde_norway::from_str(objects).unwrap_or_else(|e| panic!("{e}\n{objects}"));
    let array = doc["array"].as_sequence().expect("`array` is a list");
    array
        .iter()
        .map(|item| {
            let text = item.as_str().expect("each item is a string");
            serde_norway::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
        })
        .collect()
}

#[test]
fn objects_parameter_parses_as_yaml_and_lists_the_objects() {
    let spc = cpo_builder().build().unwrap();
    assert_eq!(
        parse_objects(&spc.spec.parameters["objects"]),
        [KeyVaultObject::secret(
            "cpo-credentials",
            ObjectEncoding::Utf8
        )]
    );

    let objects = [
        KeyVaultObject::secret("uamsi-one", ObjectEncoding::Utf8),
        KeyVaultObject::secret("uamsi-two", ObjectEncoding::Hex),
        KeyVaultObject::secret("msi-3", ObjectEncoding::Base64),
    ];
    let text = objects_parameter(&objects).unwrap();
    assert_eq!(parse_objects(&text), objects);

    // The same through a whole SecretProviderClass written as YAML and read back.
    let mut builder = cpo_builder();
    for object in &objects {
        builder = builder.object(object.clone());
    }
    let spc = builder.build().unwrap();
    let (_, plain, _) = yaml_round_trip(&spc);
    let listed = parse_objects(plain["spec"]["parameters"]["objects"].as_str().unwrap());
    assert_eq!(listed.len(), 4);
    assert_eq!(&listed[1..], &objects);
}

#[test]
fn object_encodings_are_the_providers_words() {
    for (encoding, word) in [
        (ObjectEncoding::Utf8, "utf-8"),
        (ObjectEncoding::Hex, "hex"),
        (ObjectEncoding::Base64, "base64"),
    ] {
        assert_eq!(encoding.as_str(), word);
        assert_eq!(encoding.to_string(), word);
        assert_eq!(serde_json::to_value(encoding).unwrap(), json!(word));
        assert_eq!(
            serde_norway::from_str::<ObjectEncoding>(word).unwrap(),
            encoding
        );
    }
    assert_eq!(ObjectEncoding::default(), ObjectEncoding::Utf8);
    assert!(serde_json::from_value::<ObjectEncoding>(json!("UTF-8")).is_err());
    assert!(serde_json::from_value::<ObjectEncoding>(json!("utf8")).is_err());
}

#[test]
fn reads_a_secret_provider_class_written_by_hand() {
    // As in the Azure provider's documentation, with fields this crate does not model.
    let text = r#"
apiVersion: secrets-store.csi.x-k8s.io/v1
kind: SecretProviderClass
metadata:
  name: azure-kvname-user-msi
  namespace: default
  labels:
    app: demo
spec:
  provider: azure
  secretObjects:
  - secretName: foosecret
    type: Opaque
    data:
    - objectName: secret1
      key: username
  parameters:
    usePodIdentity: "false"
    useVMManagedIdentity: "true"
    userAssignedIdentityID: "0e2d7c3a-5d6e-4f3a-9b1c-2a4d6e8f0a1b"
    keyvaultName: kvname
    cloudName: ""
    objects: |
      array:
        - |
          objectName: secret1
          objectType: secret
          objectEncoding: base64
    tenantId: "72f988bf-86f1-41af-91ab-2d7cd011db47"
status:
  byPod: []
"#;
    let spc: SecretProviderClass = serde_norway::from_str(text).expect("parses");
    assert_eq!(spc.metadata.name.as_deref(), Some("azure-kvname-user-msi"));
    assert_eq!(
        spc.metadata.labels,
        Some(BTreeMap::from([("app".to_owned(), "demo".to_owned())]))
    );
    assert_eq!(spc.spec.provider, "azure");
    assert_eq!(spc.spec.parameters["cloudName"], "");
    assert_eq!(
        parse_objects(&spc.spec.parameters["objects"]),
        [KeyVaultObject::secret("secret1", ObjectEncoding::Base64)]
    );
    // secretObjects is kept and written back.
    assert_eq!(
        spc.spec.other["secretObjects"][0]["secretName"],
        json!("foosecret")
    );
    let (back, plain, _) = yaml_round_trip(&spc);
    assert_eq!(back, spc);
    assert_eq!(
        plain["spec"]["secretObjects"][0]["data"][0]["key"].as_str(),
        Some("username")
    );
    // status is the server's: not written.
    assert!(plain.get("status").is_none());
}

#[test]
fn another_kind_or_version_is_refused() {
    let mut doc = serde_json::to_value(cpo_builder().build().unwrap()).unwrap();
    doc["kind"] = json!("ConfigMap");
    let err = serde_json::from_value::<SecretProviderClass>(doc.clone()).unwrap_err();
    assert!(err.to_string().contains("ConfigMap"), "{err}");

    doc["kind"] = json!("SecretProviderClass");
    doc["apiVersion"] = json!("secrets-store.csi.x-k8s.io/v1alpha1");
    assert!(serde_json::from_value::<SecretProviderClass>(doc.clone()).is_err());

    doc.as_object_mut().unwrap().remove("apiVersion");
    assert!(serde_json::from_value::<SecretProviderClass>(doc).is_err());
}

#[test]
fn is_a_kubernetes_resource() {
    assert_eq!(
        <SecretProviderClass as Resource>::API_VERSION,
        SECRET_PROVIDER_CLASS_API_VERSION
    );
    assert_eq!(
        <SecretProviderClass as Resource>::GROUP,
        "secrets-store.csi.x-k8s.io"
    );
    assert_eq!(<SecretProviderClass as Resource>::VERSION, "v1");
    assert_eq!(
        <SecretProviderClass as Resource>::KIND,
        "SecretProviderClass"
    );
    assert_eq!(
        <SecretProviderClass as Resource>::URL_PATH_SEGMENT,
        "secretproviderclasses"
    );
    assert_eq!(
        <SecretProviderClass as k8s_openapi::ListableResource>::LIST_KIND,
        "SecretProviderClassList"
    );
    let mut spc = cpo_builder().build().unwrap();
    k8s_openapi::Metadata::metadata_mut(&mut spc).labels =
        Some(BTreeMap::from([("a".to_owned(), "b".to_owned())]));
    assert!(serde_json::to_value(&spc).unwrap()["metadata"]["labels"]["a"] == "b");
}

#[test]
fn invalid_secret_provider_class_input_is_a_typed_error() {
    let object = |name: &str| KeyVaultObject::secret(name, ObjectEncoding::Utf8);
    let cases: Vec<(&str, SecretProviderClassBuilder, &str)> = vec![
        (
            "empty name",
            SecretProviderClass::builder(""),
            "metadata.name",
        ),
        (
            "upper-case name",
            SecretProviderClass::builder("Managed-Azure-CPO"),
            "metadata.name",
        ),
        (
            "bad namespace",
            cpo_builder().namespace("clusters.demo"),
            "metadata.namespace",
        ),
        (
            "no Key Vault",
            SecretProviderClass::builder("spc"),
            "spec.parameters.keyvaultName",
        ),
        (
            "empty Key Vault name",
            cpo_builder().key_vault_name(""),
            "spec.parameters.keyvaultName",
        ),
        (
            "Key Vault name with a dot",
            cpo_builder().key_vault_name("demo.kv"),
            "spec.parameters.keyvaultName",
        ),
        (
            "Key Vault name too long",
            cpo_builder().key_vault_name("a".repeat(25)),
            "spec.parameters.keyvaultName",
        ),
        (
            "tenant not a GUID",
            cpo_builder().tenant_id("contoso.onmicrosoft.com"),
            "spec.parameters.tenantId",
        ),
        (
            "no tenant",
            SecretProviderClass::builder("spc")
                .key_vault_name("demo-mi-kv")
                .user_assigned_identity_id(CLIENT)
                .object(object("x")),
            "spec.parameters.tenantId",
        ),
        (
            "client ID not a GUID",
            cpo_builder().user_assigned_identity_id(""),
            "spec.parameters.userAssignedIdentityID",
        ),
        (
            "no objects",
            SecretProviderClass::builder("spc")
                .key_vault_name("demo-mi-kv")
                .tenant_id(TENANT)
                .user_assigned_identity_id(CLIENT),
            "spec.parameters.objects",
        ),
        (
            "empty object name",
            cpo_builder().object(object("")),
            "objectName",
        ),
        (
            // A newline would let the name write its own YAML keys.
            "object name injecting YAML",
            cpo_builder().object(object("x\n    objectType: key")),
            "objectName",
        ),
        (
            "object name with a colon",
            cpo_builder().object(object("a: b")),
            "objectName",
        ),
        (
            "object name too long",
            cpo_builder().object(object(&"a".repeat(128))),
            "objectName",
        ),
        (
            "object listed twice",
            cpo_builder().object(object("cpo-credentials")),
            "objectName",
        ),
    ];
    for (what, builder, field) in cases {
        let err = builder.build().expect_err(what);
        assert_eq!(invalid_field(&err), field, "{what}: {err}");
        assert!(err.to_string().contains(field), "{what}: {err}");
        assert!(!err.is_transient());
    }
    assert!(objects_parameter(&[]).is_err());
    // The limits themselves are accepted.
    cpo_builder()
        .key_vault_name(format!("a{}", "b".repeat(23)))
        .object(object(&"a".repeat(127)))
        .build()
        .expect("24-character vault and 127-character object names are valid");
}

#[test]
fn every_component_with_a_volume_gets_a_valid_volume_and_spc() {
    for component in Component::ALL {
        let spc = SecretProviderClass::for_component(component)
            .key_vault_name("demo-mi-kv")
            .tenant_id(TENANT)
            .user_assigned_identity_id(CLIENT)
            .object(KeyVaultObject::secret("credentials", ObjectEncoding::Utf8))
            .build()
            .unwrap_or_else(|e| panic!("{component:?}: {e}"));
        assert_eq!(
            spc.metadata.name.as_deref(),
            Some(component.secret_provider_class_name())
        );
        if let Some(volume_name) = component.volume_name() {
            let volume: Volume =
                k8s::csi_volume(volume_name, component.secret_provider_class_name())
                    .unwrap_or_else(|e| panic!("{component:?}: {e}"));
            assert_eq!(volume.name, volume_name);
        }
    }
}

/// The pod of an application that uses a stock Azure SDK: the token server as a native
/// sidecar over the CSI-mounted credential, and the application's environment.
fn pod_with_token_server() -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let sidecar =
        k8s::TokenServerSidecar::new("quay.io/example/msi-credential:1", "app-identity-header")
            .credential_file("/mnt/certs/uamsi-app")
            .volume_mount(k8s::certs_volume_mount("app-cert").unwrap());
    Pod {
        metadata: ObjectMeta {
            name: Some("app".to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![sidecar.container().unwrap()]),
            containers: vec![Container {
                name: "app".to_owned(),
                image: Some("quay.io/example/app:1".to_owned()),
                env: Some(sidecar.application_env().unwrap()),
                ..Default::default()
            }],
            volumes: Some(vec![
                k8s::csi_volume("app-cert", "managed-azure-app").unwrap(),
                sidecar.secret_volume().unwrap(),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn the_token_server_sidecar_is_a_native_sidecar_with_exec_probes_and_the_app_env() {
    let pod = pod_with_token_server();
    let (back, yaml, text) = yaml_round_trip(&pod);
    assert_eq!(back, pod);
    let spec = &yaml["spec"];
    let init = &spec["initContainers"][0];
    assert_eq!(init["name"].as_str(), Some("msi-token-server"));
    assert_eq!(init["restartPolicy"].as_str(), Some("Always"), "{text}");
    let args: Vec<&str> = init["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[..2], ["serve", "/mnt/certs/uamsi-app"]);
    assert!(
        args.windows(2)
            .any(|w| w == ["--listen", "127.0.0.1:50342"])
    );
    assert!(
        args.windows(2)
            .any(|w| w == ["--secret-file", "/var/run/msi-token-server/identity-header"])
    );
    assert!(
        !text.contains("--secret-env")
            && !args
                .iter()
                .any(|a| a.contains("secret") && !a.starts_with("--") && !a.starts_with('/'))
    );
    for probe in ["startupProbe", "readinessProbe"] {
        let command = &init[probe]["exec"]["command"];
        assert_eq!(command[1].as_str(), Some("probe"), "{probe}");
        assert_eq!(
            command[3].as_str(),
            Some("http://127.0.0.1:50342/healthz"),
            "{probe}"
        );
        assert_eq!(command[4].as_str(), Some("--secret-file"), "{probe}");
        assert_eq!(
            command[5].as_str(),
            Some("/var/run/msi-token-server/identity-header"),
            "the probe presents the server's secret: {probe}"
        );
        assert!(
            init[probe]["httpGet"].is_null(),
            "kubelet's httpGet cannot reach loopback"
        );
    }
    let mounts = init["volumeMounts"].as_sequence().unwrap();
    assert_eq!(mounts[0]["mountPath"].as_str(), Some("/mnt/certs"));
    assert_eq!(
        mounts[1]["mountPath"].as_str(),
        Some("/var/run/msi-token-server")
    );
    assert_eq!(
        init["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let env = &spec["containers"][0]["env"];
    assert_eq!(env[0]["name"].as_str(), Some("IDENTITY_ENDPOINT"));
    assert_eq!(
        env[0]["value"].as_str(),
        Some("http://127.0.0.1:50342/msi/token")
    );
    assert_eq!(env[1]["name"].as_str(), Some("IDENTITY_HEADER"));
    assert!(
        env[1]["value"].is_null(),
        "the secret is never written into the pod spec"
    );
    let secret = &env[1]["valueFrom"]["secretKeyRef"];
    assert_eq!(secret["name"].as_str(), Some("app-identity-header"));
    assert_eq!(secret["key"].as_str(), Some("identity-header"));
    assert!(env[2]["value"].as_str().unwrap().contains("127.0.0.1"));
    let volumes = spec["volumes"].as_sequence().unwrap();
    assert_eq!(
        volumes[1]["secret"]["secretName"].as_str(),
        Some("app-identity-header")
    );
    assert_eq!(json_round_trip(&pod), pod);
}

#[test]
fn a_token_server_sidecar_with_bad_input_is_refused_naming_the_field() {
    let mount = || k8s::certs_volume_mount("app-cert").unwrap();
    let ok = || k8s::TokenServerSidecar::new("image:1", "secret").volume_mount(mount());
    let cases = [
        (ok(), "credential_file"),
        (
            ok().credential_file("/elsewhere/uamsi-app"),
            "credential_file",
        ),
        (ok().credential_file("relative"), "credential_file"),
        (
            k8s::TokenServerSidecar::new("image:1", "Bad_Name")
                .volume_mount(mount())
                .credential_file("/mnt/certs/a"),
            "Secret name",
        ),
        (
            k8s::TokenServerSidecar::new(" ", "secret")
                .volume_mount(mount())
                .credential_file("/mnt/certs/a"),
            "Container.image",
        ),
        (ok().credential_file("/mnt/certs/a").port(0), "port"),
    ];
    for (sidecar, field) in cases {
        let err = sidecar.container().unwrap_err();
        assert_eq!(invalid_field(&err), field, "{err}");
        assert_eq!(
            invalid_field(&sidecar.application_env().unwrap_err()),
            field
        );
    }
    let custom = ok().credential_file("/mnt/certs/a").port(8099);
    assert_eq!(custom.endpoint(), "http://127.0.0.1:8099/msi/token");
}
