//! The token server as a Kubernetes native sidecar (feature `k8s`): the container
//! (`msi-credential serve` in an init container with `restartPolicy: Always`, so it is
//! started and ready before the application containers), its startup and readiness
//! probes, its mounts (the CSI volumes and the identity header Secret), and the
//! environment of the application containers (`IDENTITY_ENDPOINT`, `IDENTITY_HEADER` from
//! the Secret, `NO_PROXY` covering loopback).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ExecAction, Probe, SecretKeySelector,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};

use crate::error::Result;
use crate::hypershift::rules::{check, dns1123_label_problem, dns1123_subdomain_problem};

pub use crate::hypershift::{TOKEN_SERVER_PATH, TOKEN_SERVER_PORT};

/// The Secret key holding the identity header secret (the applications' `IDENTITY_HEADER`).
pub const IDENTITY_HEADER_KEY: &str = "identity-header";

/// The Secret key holding the previous secret during a rotation of it (optional).
pub const PREVIOUS_IDENTITY_HEADER_KEY: &str = "identity-header-previous";

/// Where the sidecar mounts the Secret.
pub const SECRET_MOUNT_PATH: &str = "/var/run/msi-token-server";

/// The sidecar container's name.
pub const SIDECAR_NAME: &str = "msi-token-server";

/// The name of the volume holding the Secret.
const SECRET_VOLUME_NAME: &str = "msi-token-server-secret";

/// The token server sidecar of a pod, built as Kubernetes objects.
///
/// ```
/// use msi_dataplane::hypershift::k8s::{self, TokenServerSidecar};
///
/// let sidecar = TokenServerSidecar::new("quay.io/example/msi-credential:1", "app-identity-header")
///     .credential_file("/mnt/certs/uamsi-app")
///     .volume_mount(k8s::certs_volume_mount("app-cert")?);
/// let init = sidecar.container()?;
/// assert_eq!(init.restart_policy.as_deref(), Some("Always"));
/// let env = sidecar.application_env()?;
/// assert_eq!(env[0].value.as_deref(), Some("http://127.0.0.1:50342/msi/token"));
/// let volume = sidecar.secret_volume()?; // beside the CSI volume in the pod's volumes
/// # let _ = volume;
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TokenServerSidecar {
    image: String,
    secret_name: String,
    files: Vec<String>,
    mounts: Vec<VolumeMount>,
    port: u16,
}

impl TokenServerSidecar {
    /// The sidecar running `image` (with `msi-credential` on its `PATH`), its secret from
    /// the Kubernetes Secret `secret_name` (key [`IDENTITY_HEADER_KEY`], and
    /// [`PREVIOUS_IDENTITY_HEADER_KEY`] during a rotation).
    pub fn new(image: impl Into<String>, secret_name: impl Into<String>) -> Self {
        TokenServerSidecar {
            image: image.into(),
            secret_name: secret_name.into(),
            files: Vec::new(),
            mounts: Vec::new(),
            port: TOKEN_SERVER_PORT,
        }
    }

    /// Serve the credential file at `path` (in one of the [`volume_mount`](Self::volume_mount)s).
    pub fn credential_file(mut self, path: impl Into<String>) -> Self {
        self.files.push(path.into());
        self
    }

    /// Mount this volume (a CSI volume holding credential files) in the sidecar.
    pub fn volume_mount(mut self, mount: VolumeMount) -> Self {
        self.mounts.push(mount);
        self
    }

    /// Listen on this loopback port instead of [`TOKEN_SERVER_PORT`].
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// `IDENTITY_ENDPOINT`'s value.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}{TOKEN_SERVER_PATH}", self.port)
    }

    fn validate(&self) -> Result<()> {
        check("Secret name", dns1123_subdomain_problem(&self.secret_name))?;
        let image = (self.image.trim().is_empty() || self.image.contains(char::is_whitespace))
            .then(|| "an image reference without spaces is needed".to_owned());
        check("Container.image", image)?;
        let files = self
            .files
            .is_empty()
            .then(|| "no credential file to serve".to_owned());
        check("credential_file", files)?;
        for file in &self.files {
            let bad = (!file.starts_with('/') || file.contains(char::is_whitespace))
                .then(|| format!("{file:?} is not an absolute path without spaces"));
            check("credential_file", bad)?;
            let mounted = self.mounts.iter().any(|m| {
                file.strip_prefix(m.mount_path.trim_end_matches('/'))
                    .is_some_and(|rest| rest.starts_with('/'))
            });
            let unmounted =
                (!mounted).then(|| format!("{file} is in none of the sidecar's volume mounts"));
            check("credential_file", unmounted)?;
        }
        let port = (self.port == 0).then(|| "port 0 cannot be probed".to_owned());
        check("port", port)?;
        for mount in &self.mounts {
            check("VolumeMount.name", dns1123_label_problem(&mount.name))?;
        }
        Ok(())
    }

    /// The sidecar: an init container with `restartPolicy: Always` (a native sidecar,
    /// Kubernetes 1.29 and later), so the kubelet starts it, waits for its startup probe,
    /// then starts the application containers, and stops it after them. Its probes are
    /// `exec` probes running `msi-credential probe` with the server's secret file, so that
    /// they get the full report and are never held to the budget of callers without the
    /// secret (kubelet's `httpGet` probes come from outside the pod's network namespace
    /// and cannot reach loopback); it runs as a
    /// non-root user with a read-only root file system and no capabilities.
    pub fn container(&self) -> Result<Container> {
        self.validate()?;
        let secret_file = format!("{SECRET_MOUNT_PATH}/{IDENTITY_HEADER_KEY}");
        let mut args = vec!["serve".to_owned()];
        args.extend(self.files.iter().cloned());
        args.extend([
            "--listen".to_owned(),
            format!("127.0.0.1:{}", self.port),
            "--secret-file".to_owned(),
            secret_file.clone(),
            "--previous-secret-file".to_owned(),
            format!("{SECRET_MOUNT_PATH}/{PREVIOUS_IDENTITY_HEADER_KEY}"),
        ]);
        let probe = |period: i32, failures: i32| Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    "msi-credential".to_owned(),
                    "probe".to_owned(),
                    "--url".to_owned(),
                    format!("http://127.0.0.1:{}/healthz", self.port),
                    "--secret-file".to_owned(),
                    secret_file.clone(),
                ]),
            }),
            period_seconds: Some(period),
            failure_threshold: Some(failures),
            timeout_seconds: Some(5),
            ..Default::default()
        };
        let mut mounts = self.mounts.clone();
        mounts.push(VolumeMount {
            name: SECRET_VOLUME_NAME.to_owned(),
            mount_path: SECRET_MOUNT_PATH.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
        Ok(Container {
            name: SIDECAR_NAME.to_owned(),
            image: Some(self.image.clone()),
            command: Some(vec!["msi-credential".to_owned()]),
            args: Some(args),
            restart_policy: Some("Always".to_owned()),
            startup_probe: Some(probe(1, 60)),
            readiness_probe: Some(probe(10, 3)),
            volume_mounts: Some(mounts),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                run_as_non_root: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".to_owned()]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// The volume with the Secret (every key, so the previous secret's file is there
    /// only while its key is). Only the sidecar mounts it; the files keep the default mode
    /// (the sidecar runs as a non-root user, which a mode of 0400 would lock out without
    /// an `fsGroup`).
    pub fn secret_volume(&self) -> Result<Volume> {
        self.validate()?;
        Ok(Volume {
            name: SECRET_VOLUME_NAME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(self.secret_name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// The application containers' environment: `IDENTITY_ENDPOINT` (the sidecar's
    /// loopback URL), `IDENTITY_HEADER` from the Secret (the SDKs read it only from the
    /// environment), and `NO_PROXY`/`no_proxy` covering loopback, so that an `HTTP_PROXY`
    /// in the environment never receives the secret (merge it with your own `NO_PROXY`
    /// if you set one).
    pub fn application_env(&self) -> Result<Vec<EnvVar>> {
        self.validate()?;
        let value = |name: &str, value: String| EnvVar {
            name: name.to_owned(),
            value: Some(value),
            ..Default::default()
        };
        let no_proxy = "127.0.0.1,localhost,::1".to_owned();
        Ok(vec![
            value("IDENTITY_ENDPOINT", self.endpoint()),
            EnvVar {
                name: "IDENTITY_HEADER".to_owned(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: self.secret_name.clone(),
                        key: IDENTITY_HEADER_KEY.to_owned(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            value("NO_PROXY", no_proxy.clone()),
            value("no_proxy", no_proxy),
        ])
    }
}
