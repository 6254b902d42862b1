//! The Entra server's discovery documents: the OpenID Provider configuration
//! (`/{tenant}/v2.0/.well-known/openid-configuration`) and the signing keys
//! (`/{tenant}/discovery/v2.0/keys`), shaped as Entra ID serves them.

use serde_json::{Value, json};

const OPENID_CONFIGURATION_SUFFIX: &str = "/v2.0/.well-known/openid-configuration";
const KEYS_SUFFIX: &str = "/discovery/v2.0/keys";

/// The tenant segments that name no tenant: their documents carry the `{tenantid}`
/// template in `issuer`, as Entra's do.
const MULTI_TENANT: [&str; 3] = ["common", "organizations", "consumers"];

/// Which document a path asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Document<'a> {
    /// The OpenID Provider configuration of a tenant.
    OpenIdConfiguration {
        /// The tenant segment of the path.
        tenant: &'a str,
    },
    /// The signing keys (JWKS).
    Keys {
        /// The tenant segment of the path.
        tenant: &'a str,
    },
}

impl Document<'_> {
    pub(crate) fn tenant(&self) -> &str {
        match self {
            Document::OpenIdConfiguration { tenant } | Document::Keys { tenant } => tenant,
        }
    }

    /// Whether the tenant segment is `common`, `organizations` or `consumers`.
    pub(crate) fn is_multi_tenant(&self) -> bool {
        MULTI_TENANT
            .iter()
            .any(|t| t.eq_ignore_ascii_case(self.tenant()))
    }
}

/// Pure: the document `path` asks for, if any (`/{tenant}` then one of the two suffixes,
/// the tenant one non-empty segment).
pub(crate) fn document(path: &str) -> Option<Document<'_>> {
    fn tenant_of(head: &str) -> Option<&str> {
        let tenant = head.strip_prefix('/')?;
        (!tenant.is_empty() && !tenant.contains('/')).then_some(tenant)
    }
    if let Some(head) = path.strip_suffix(OPENID_CONFIGURATION_SUFFIX) {
        return tenant_of(head).map(|tenant| Document::OpenIdConfiguration { tenant });
    }
    if let Some(head) = path.strip_suffix(KEYS_SUFFIX) {
        return tenant_of(head).map(|tenant| Document::Keys { tenant });
    }
    None
}

/// `{base_url}{tenant}/v2.0/.well-known/openid-configuration`.
pub(crate) fn openid_configuration_url(base_url: &str, tenant: &str) -> String {
    format!("{base_url}{tenant}{OPENID_CONFIGURATION_SUFFIX}")
}

/// `{base_url}{tenant}/discovery/v2.0/keys`.
pub(crate) fn keys_url(base_url: &str, tenant: &str) -> String {
    format!("{base_url}{tenant}{KEYS_SUFFIX}")
}

/// Pure: the OpenID Provider configuration of `tenant` at `base_url` (ending in `/`),
/// with the fields Entra's v2.0 document has. `issuer` is the tenant's issuer, or the
/// `{tenantid}` template for `common` and the like.
pub(crate) fn openid_configuration(base_url: &str, tenant: &str, issuer: &str) -> Value {
    let endpoint = |path: &str| format!("{base_url}{tenant}/oauth2/v2.0/{path}");
    json!({
        "token_endpoint": endpoint("token"),
        "token_endpoint_auth_methods_supported": [
            "client_secret_post", "private_key_jwt", "client_secret_basic"
        ],
        "jwks_uri": keys_url(base_url, tenant),
        "response_modes_supported": ["query", "fragment", "form_post"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
        "scopes_supported": ["openid", "profile", "email", "offline_access"],
        "issuer": issuer,
        "request_uri_parameter_supported": false,
        "authorization_endpoint": endpoint("authorize"),
        "device_authorization_endpoint": endpoint("devicecode"),
        "end_session_endpoint": endpoint("logout"),
        "http_logout_supported": true,
        "frontchannel_logout_supported": true,
        "claims_supported": [
            "sub", "iss", "cloud_instance_name", "cloud_instance_host_name", "cloud_graph_host_name",
            "msgraph_host", "aud", "exp", "iat", "auth_time", "acr", "nonce", "preferred_username",
            "name", "tid", "ver", "at_hash", "c_hash", "email"
        ],
        "tenant_region_scope": null,
        "cloud_instance_name": "microsoftonline.com",
        "cloud_graph_host_name": "graph.windows.net",
        "msgraph_host": "graph.microsoft.com",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_document_and_tenant() {
        assert_eq!(
            document("/t1/v2.0/.well-known/openid-configuration"),
            Some(Document::OpenIdConfiguration { tenant: "t1" })
        );
        assert_eq!(
            document("/common/discovery/v2.0/keys"),
            Some(Document::Keys { tenant: "common" })
        );
        assert!(
            document("/common/discovery/v2.0/keys")
                .unwrap()
                .is_multi_tenant()
        );
        for other in [
            "/v2.0/.well-known/openid-configuration",
            "//discovery/v2.0/keys",
            "/a/b/discovery/v2.0/keys",
            "/t1/oauth2/v2.0/token",
            "/",
        ] {
            assert_eq!(document(other), None, "{other}");
        }
    }

    #[test]
    fn urls_are_the_paths_the_server_answers() {
        let base = "https://127.0.0.1:1/";
        let config = openid_configuration_url(base, "t1");
        assert_eq!(
            config,
            "https://127.0.0.1:1/t1/v2.0/.well-known/openid-configuration"
        );
        assert!(document(config.trim_start_matches("https://127.0.0.1:1")).is_some());
        let keys = keys_url(base, "common");
        assert_eq!(keys, "https://127.0.0.1:1/common/discovery/v2.0/keys");
        let doc = openid_configuration(base, "t1", "iss");
        assert_eq!(
            doc["jwks_uri"],
            "https://127.0.0.1:1/t1/discovery/v2.0/keys"
        );
        assert_eq!(
            doc["token_endpoint"],
            "https://127.0.0.1:1/t1/oauth2/v2.0/token"
        );
    }
}
