//! The tenants a credential may ask for tokens in: its own, and those its options allow.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::file::model::{TENANT_RULE, is_url_safe_tenant};

/// A credential's own tenant and the others it may ask for tokens in.
pub(crate) struct Tenants {
    own: String,
    /// Lower-cased; may hold `*`.
    allowed: Vec<String>,
}

impl Tenants {
    /// The credential's own tenant (refused, naming `tenant_id`, unless usable in a URL)
    /// and its `additionally_allowed_tenants`.
    pub(crate) fn new(own: &str, allowed: &[String]) -> Result<Self> {
        let allowed = allowed.iter().map(|t| t.trim().to_ascii_lowercase());
        Ok(Tenants {
            own: url_safe("tenant_id", own.trim())?.to_owned(),
            allowed: allowed.filter(|t| !t.is_empty()).collect(),
        })
    }

    /// The credential's own tenant.
    pub(crate) fn own(&self) -> &str {
        &self.own
    }

    /// The cache key for `tenant` (trimmed): `None` for the credential's own (compared
    /// case-insensitively), else its lower-case name (allocated only when it is not),
    /// once it is allowed and usable in a URL.
    pub(crate) fn key<'t>(&self, tenant: &'t str) -> Result<Option<Cow<'t, str>>> {
        let tenant = tenant.trim();
        if tenant.eq_ignore_ascii_case(&self.own) {
            return Ok(None);
        }
        if !allowed(tenant, &self.allowed) {
            return Err(not_allowed(tenant, &self.own));
        }
        url_safe("tenant", tenant)?;
        Ok(Some(match tenant.bytes().any(|b| b.is_ascii_uppercase()) {
            true => Cow::Owned(tenant.to_ascii_lowercase()),
            false => Cow::Borrowed(tenant),
        }))
    }
}

/// `tenant` if it can be used in a URL path, else the error naming `argument`.
fn url_safe<'t>(argument: &'static str, tenant: &'t str) -> Result<&'t str> {
    if is_url_safe_tenant(tenant) {
        return Ok(tenant);
    }
    Err(Error::invalid_argument(argument, TENANT_RULE))
}

/// A token asked for in `tenant`, which the credential of tenant `own` may not ask for.
pub(crate) fn not_allowed(tenant: &str, own: &str) -> Error {
    let message = format!(
        "the credential of tenant {own} may not request tokens in tenant {tenant}; add it to \
         `additionally_allowed_tenants` (or `*` for any tenant)"
    );
    Error::config("tenant_not_allowed", "tenant", message)
}

/// Pure: whether a tenant other than the credential's own may be asked for, given the
/// lower-cased `additionally_allowed_tenants` (`*` allows any).
fn allowed(tenant: &str, allowed: &[String]) -> bool {
    allowed
        .iter()
        .any(|a| a == "*" || a.eq_ignore_ascii_case(tenant))
}
