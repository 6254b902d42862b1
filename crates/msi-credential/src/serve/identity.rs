//! The identities a token server serves, and which one a request names.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use crate::serve::answer::{IdentityHealth, Refusal};
use crate::serve::error::{Result, ServeError};
use crate::serve::request::Selector;
use msi_dataplane::UserAssignedIdentityCredentials;
use msi_dataplane::unstable::bounded;
use msi_dataplane::{
    ClientCertificateCredentialOptions, ReloadOptions, UserAssignedIdentityCredential,
};

/// How long before expiry a served identity's tokens are refreshed, at least (see
/// [`ServedIdentity::load`]): its clients treat a token with 5 minutes left as stale and
/// ask again on every call, so the server keeps a margin of three times that.
pub const SERVED_TOKEN_REFRESH_WINDOW: Duration = Duration::from_secs(15 * 60);

/// One identity the token server serves: a reloading credential (so CSI rotations, the
/// backstop and keep-last-good apply) and the ids a request may name it by: its client
/// id (always), and its object id and resource id when known (read from the credential
/// file by [`from_credential`](Self::from_credential), or given).
#[derive(Clone)]
pub struct ServedIdentity {
    credential: UserAssignedIdentityCredential,
    client_id: String,
    object_id: Option<String>,
    resource_id: Option<String>,
    /// The resources it may be asked for (`None`: any).
    allowed_resources: Option<Arc<[String]>>,
}

impl fmt::Debug for ServedIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServedIdentity")
            .field("client_id", &self.client_id)
            .field("object_id", &self.object_id)
            .field("resource_id", &self.resource_id)
            .field("allowed_resources", &self.allowed_resources)
            .field("path", &self.credential.path())
            .finish()
    }
}

impl ServedIdentity {
    /// Serve `credential`, named by its client id only.
    pub fn new(credential: UserAssignedIdentityCredential) -> Self {
        let client_id = credential.current().client_id().to_owned();
        ServedIdentity {
            credential,
            client_id,
            object_id: None,
            resource_id: None,
            allowed_resources: None,
        }
    }

    /// Load the credential file at `path` as a reloading credential for serving (its
    /// refresh window widened to at least [`SERVED_TOKEN_REFRESH_WINDOW`], so that a served token has
    /// comfortably more than the clients' 5-minute staleness margin left), named by its
    /// client id and by the object and resource ids its file holds.
    pub async fn load(
        path: impl Into<PathBuf>,
        options: ClientCertificateCredentialOptions,
        reload: ReloadOptions,
    ) -> Result<Self> {
        let window = options.refresh_window().max(SERVED_TOKEN_REFRESH_WINDOW);
        let options = options.with_refresh_window(window);
        let credential = UserAssignedIdentityCredential::new(path, options, reload).await?;
        Self::from_credential(credential).await
    }

    /// Serve `credential`, named by its client id and by the `object_id` and
    /// `resource_id` its credential file holds (read once, off the async threads; the
    /// ids of an identity do not change when its certificate rotates).
    pub async fn from_credential(credential: UserAssignedIdentityCredential) -> Result<Self> {
        let path = credential.path().to_path_buf();
        let read =
            tokio::task::spawn_blocking(move || UserAssignedIdentityCredentials::from_path(&path));
        let file = match read.await {
            Ok(file) => file?,
            Err(_) => {
                let reason = "reading the credential file's ids was abandoned".to_owned();
                return Err(ServeError::InvalidOption {
                    option: "identity",
                    reason,
                });
            }
        };
        let clean = |id: Option<String>| id.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        Ok(ServedIdentity {
            object_id: clean(file.object_id),
            resource_id: clean(file.resource_id),
            ..ServedIdentity::new(credential)
        })
    }

    /// Also answer requests naming this object (principal) id.
    pub fn with_object_id(mut self, object_id: impl Into<String>) -> Self {
        self.object_id = Some(object_id.into());
        self
    }

    /// Also answer requests naming this resource id (`mi_res_id`).
    pub fn with_resource_id(mut self, resource_id: impl Into<String>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }

    /// Answer token requests for these resources only (others are refused with 403
    /// `resource_not_allowed` before any request is made): a container that holds the
    /// secret can then neither make the server ask the token endpoint for anything else
    /// nor fill its cache with other resources. A resource matches when it is equal once
    /// a trailing `/.default` and a trailing `/` are taken off both, so
    /// `https://vault.azure.net`, `https://vault.azure.net/` and
    /// `https://vault.azure.net/.default` are one. Default: any resource.
    ///
    /// ```no_run
    /// # async fn demo() -> msi_credential::serve::Result<()> {
    /// use msi_credential::serve::ServedIdentity;
    ///
    /// let identity =
    ///     ServedIdentity::load("/mnt/certs/my-identity", Default::default(), Default::default())
    ///         .await?
    ///     .with_allowed_resources(["https://management.azure.com/", "https://vault.azure.net"]);
    /// # Ok(()) }
    /// ```
    pub fn with_allowed_resources<I, S>(mut self, resources: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let resources: Vec<String> = resources
            .into_iter()
            .map(|r| resource_key(&r.into()).to_owned())
            .collect();
        self.allowed_resources = Some(resources.into());
        self
    }

    /// The resources it may be asked for, when limited (each without a trailing
    /// `/.default` or `/`).
    pub fn allowed_resources(&self) -> Option<&[String]> {
        self.allowed_resources.as_deref()
    }

    /// Pure: whether a request for `resource` may be answered (403 if not).
    pub(crate) fn check_resource(&self, resource: &str) -> std::result::Result<(), Refusal> {
        let Some(allowed) = &self.allowed_resources else {
            return Ok(());
        };
        let key = resource_key(resource);
        if allowed.iter().any(|a| a == key) {
            return Ok(());
        }
        Err(Refusal::new(
            403,
            "resource_not_allowed",
            format!(
                "identity {} is not served for resource {} here",
                self.client_id,
                bounded(resource, 256)
            ),
        ))
    }

    /// The client id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The object id, when known.
    pub fn object_id(&self) -> Option<&str> {
        self.object_id.as_deref()
    }

    /// The resource id, when known.
    pub fn resource_id(&self) -> Option<&str> {
        self.resource_id.as_deref()
    }

    /// The reloading credential.
    pub fn credential(&self) -> &UserAssignedIdentityCredential {
        &self.credential
    }

    fn answers_to(&self, selector: &Selector) -> bool {
        let same =
            |ours: Option<&str>| ours.is_some_and(|o| o.eq_ignore_ascii_case(selector.value()));
        match selector {
            Selector::Client(_) => same(Some(&self.client_id)),
            Selector::Object(_) => same(self.object_id()),
            Selector::Resource(_) => same(self.resource_id()),
        }
    }

    /// Pure: how this identity's credential stands at `now`.
    pub(crate) fn health(&self, now: OffsetDateTime) -> IdentityHealth {
        let status = self.credential.status();
        let problem = if now < status.not_before {
            Some("credential_not_yet_valid")
        } else if now >= status.not_after {
            Some("credential_expired")
        } else {
            None
        };
        IdentityHealth {
            client_id: self.client_id.clone(),
            ready: problem.is_none(),
            not_after: msi_dataplane::rfc3339(status.not_after).to_string(),
            thumbprint_sha256: status.thumbprint_sha256,
            reloads: status.reloads,
            problem,
        }
    }
}

/// Pure: a resource as the allow-list compares it: without a trailing `/.default`, then
/// without a trailing `/`.
fn resource_key(resource: &str) -> &str {
    let resource = resource.trim();
    let resource = resource.strip_suffix("/.default").unwrap_or(resource);
    resource.strip_suffix('/').unwrap_or(resource)
}

/// The served identities, checked: at least one, no id shared by two.
#[derive(Clone, Debug)]
pub(crate) struct Identities(Vec<ServedIdentity>);

impl Identities {
    pub(crate) fn new(identities: Vec<ServedIdentity>) -> Result<Self> {
        if identities.is_empty() {
            return Err(ServeError::NoIdentity);
        }
        for (i, a) in identities.iter().enumerate() {
            for b in &identities[i + 1..] {
                let pairs = [
                    ("client_id", Some(a.client_id()), Some(b.client_id())),
                    ("object_id", a.object_id(), b.object_id()),
                    ("mi_res_id", a.resource_id(), b.resource_id()),
                ];
                for (field, x, y) in pairs {
                    if let (Some(x), Some(y)) = (x, y)
                        && x.eq_ignore_ascii_case(y)
                    {
                        return Err(ServeError::DuplicateIdentity {
                            field,
                            value: x.to_owned(),
                        });
                    }
                }
            }
        }
        Ok(Identities(identities))
    }

    pub(crate) fn all(&self) -> &[ServedIdentity] {
        &self.0
    }

    /// Pure: the identity a request names; with no selector, the only one when there is
    /// one. A refusal (400) names what was asked.
    pub(crate) fn select(&self, selector: Option<&Selector>) -> Result<&ServedIdentity, Refusal> {
        match selector {
            Some(selector) => self
                .0
                .iter()
                .find(|i| i.answers_to(selector))
                .ok_or_else(|| {
                    Refusal::new(
                        400,
                        "identity_not_found",
                        format!(
                            "no identity with {} {} is served here",
                            selector.field(),
                            bounded(selector.value(), 256)
                        ),
                    )
                }),
            None => match self.0.as_slice() {
                [only] => Ok(only),
                all => Err(Refusal::new(
                    400,
                    "identity_not_specified",
                    format!(
                        "{} identities are served here: name one with client_id, object_id \
                         or mi_res_id",
                        all.len()
                    ),
                )),
            },
        }
    }
}
