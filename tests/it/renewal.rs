//! Renewal: the pure decisions over listed properties and `now` (any features), and
//! `CredentialStore::renew` against the test data plane and test Key Vault (feature
//! `keyvault`): newer stored, equal or older skipped, concurrent runs.

use crate::support;

use std::collections::BTreeMap;

use msi_dataplane::keyvault::renewal::{
    RenewalState, StoredProperties, Unusable, needing_renewal, renewal_state, should_store,
};
use time::OffsetDateTime;
use time::macros::datetime;

fn stored(
    name: &str,
    renew_after: &str,
    cannot_renew_after: &str,
    exp: OffsetDateTime,
) -> StoredProperties {
    let mut p = StoredProperties::new(name);
    p.enabled = Some(true);
    p.expires = Some(exp);
    p.tags = BTreeMap::from([
        ("renew_after".into(), renew_after.into()),
        ("cannot_renew_after".into(), cannot_renew_after.into()),
    ]);
    p
}

const RA: &str = "2026-12-17T00:00:00Z";
const CRA: &str = "2027-01-31T00:00:00Z";
const EXP: OffsetDateTime = datetime!(2027-02-01 0:00 UTC);

#[test]
fn each_state_at_its_boundary() {
    let p = stored("uamsi-a", RA, CRA, EXP);
    let state = |now| renewal_state(&p, now);
    assert_eq!(
        state(datetime!(2026-12-16 23:59:59 UTC)),
        RenewalState::Current {
            renew_after: datetime!(2026-12-17 0:00 UTC)
        }
    );
    assert_eq!(
        state(datetime!(2026-12-17 0:00 UTC)),
        RenewalState::Due {
            renew_after: datetime!(2026-12-17 0:00 UTC)
        }
    );
    assert_eq!(state(datetime!(2027-01-30 23:59:59 UTC)).code(), "due");
    assert_eq!(
        state(datetime!(2027-01-31 0:00 UTC)),
        RenewalState::Unusable(Unusable::CannotRenew {
            cannot_renew_after: datetime!(2027-01-31 0:00 UTC)
        })
    );
    // exp before cannot_renew_after: exp decides.
    let early = stored("msi-b", RA, CRA, datetime!(2027-01-10 0:00 UTC));
    assert_eq!(
        renewal_state(&early, datetime!(2027-01-10 0:00 UTC)),
        RenewalState::Unusable(Unusable::Expired {
            expires: datetime!(2027-01-10 0:00 UTC)
        })
    );
    let mut disabled = p.clone();
    disabled.enabled = Some(false);
    assert_eq!(
        renewal_state(&disabled, datetime!(2026-01-01 0:00 UTC)),
        RenewalState::Unusable(Unusable::Disabled)
    );
}

#[test]
fn missing_or_bad_tags_and_foreign_names_are_untracked() {
    let mut p = stored("uamsi-a", RA, CRA, EXP);
    p.tags.remove("cannot_renew_after");
    assert!(
        matches!(renewal_state(&p, EXP), RenewalState::Untracked { reason } if reason.contains("cannot_renew_after"))
    );
    let bad = stored("uamsi-a", "yesterday", CRA, EXP);
    assert!(
        matches!(renewal_state(&bad, EXP), RenewalState::Untracked { reason } if reason.contains("renew_after"))
    );
    let foreign = stored("db-password", RA, CRA, EXP);
    assert_eq!(renewal_state(&foreign, EXP).code(), "untracked");
}

#[test]
fn needing_renewal_sorts_a_listing_and_skips_other_secrets() {
    let listed = vec![
        stored(
            "uamsi-current",
            "2027-06-01T00:00:00Z",
            "2027-08-01T00:00:00Z",
            datetime!(2027-09-01 0:00 UTC),
        ),
        stored("uamsi-due", RA, CRA, EXP),
        stored("msi-due", RA, CRA, EXP),
        stored(
            "uamsi-past",
            "2026-01-01T00:00:00Z",
            "2026-02-01T00:00:00Z",
            datetime!(2027-03-01 0:00 UTC),
        ),
        stored("uamsi-expired", RA, CRA, datetime!(2026-12-01 0:00 UTC)),
        stored("uamsi-notags", "", "", EXP),
        stored("db-password", RA, CRA, EXP),
    ];
    let plan = needing_renewal(&listed, datetime!(2026-12-20 0:00 UTC));
    let names = |v: &[&StoredProperties]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&plan.due), ["uamsi-due", "msi-due"]);
    let unusable: Vec<_> = plan
        .unusable
        .iter()
        .map(|(p, why)| (p.name.as_str(), *why))
        .collect();
    assert_eq!(
        unusable,
        [
            (
                "uamsi-past",
                Unusable::CannotRenew {
                    cannot_renew_after: datetime!(2026-02-01 0:00 UTC)
                }
            ),
            (
                "uamsi-expired",
                Unusable::Expired {
                    expires: datetime!(2026-12-01 0:00 UTC)
                }
            ),
        ]
    );
    assert_eq!(plan.untracked.len(), 1);
    assert_eq!(plan.current, 1);
    // Pure: the same input and `now` give the same plan.
    assert_eq!(
        plan,
        needing_renewal(&listed, datetime!(2026-12-20 0:00 UTC))
    );
}

#[test]
fn the_rule_stores_only_a_later_not_before() {
    let t = datetime!(2026-02-01 0:00 UTC);
    assert!(should_store(t, t + time::Duration::seconds(1)));
    assert!(!should_store(t, t));
    assert!(!should_store(t, t - time::Duration::days(1)));
}

#[cfg(feature = "keyvault")]
mod with_the_store {
    use std::sync::Arc;

    use msi_dataplane::ErrorKind;
    use msi_dataplane::dataplane::{Client, ClientFactory, UserAssignedIdentitiesRequest};
    use msi_dataplane::keyvault::renewal::RenewalOutcome;
    use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
    use time::macros::datetime;

    use super::support::entra::EntraServer;
    use super::support::fixtures::fixture_credentials;
    use super::support::fixtures::load;
    use super::support::harness::{credential, https_env};
    use msi_dataplane_testing::{DataPlaneServer, KeyVaultServer};

    const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    const IDENTITY: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.ManagedIdentity/userAssignedIdentities/renewed";
    const ID: &str = "renewed";
    const NAME: &str = "uamsi-renewed";

    struct Setup {
        entra: EntraServer,
        dp: DataPlaneServer,
        vault: KeyVaultServer,
        store: CredentialStore,
        client: Client,
    }

    /// The data plane serves `fixture`; the store holds what it served then.
    async fn setup(fixture: &str) -> Setup {
        let entra = EntraServer::start().await;
        let dp = DataPlaneServer::start(&entra, TENANT, DataPlaneServer::AUDIENCE).await;
        dp.add_user_assigned(IDENTITY, fixture_credentials(fixture, &entra.base_url()));
        let vault = KeyVaultServer::start(&entra, TENANT).await;
        let app = credential(&entra, "pem-pkcs8");
        let store = CredentialStore::new(
            &vault.url(),
            Arc::new(app.clone()),
            StoreOptions::default()
                .with_environment(https_env())
                .verify_challenge_resource(false),
        )
        .unwrap();
        let factory = ClientFactory::new(app, DataPlaneServer::AUDIENCE, https_env()).unwrap();
        let client = factory.client(&dp.identity_url()).unwrap();
        let issued = client
            .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([
                IDENTITY,
            ]))
            .await
            .unwrap();
        store
            .put_user_assigned_identity(ID, issued.user_assigned_identity(IDENTITY).unwrap())
            .await
            .unwrap();
        Setup {
            entra,
            dp,
            vault,
            store,
            client,
        }
    }

    fn rotate(s: &Setup, fixture: &str) {
        s.dp.add_user_assigned(IDENTITY, fixture_credentials(fixture, &s.entra.base_url()));
    }

    #[tokio::test]
    async fn newer_credentials_are_stored_and_a_second_run_finds_nothing_to_do() {
        let s = setup("rotation-1").await;
        rotate(&s, "rotation-2");
        let outcome = s.store.renew(&s.client, NAME).await.unwrap();
        match &outcome {
            RenewalOutcome::Stored {
                name,
                previous_not_before,
                not_before,
                properties,
            } => {
                assert_eq!(name, NAME);
                assert_eq!(*previous_not_before, datetime!(2026-01-01 0:00 UTC));
                assert_eq!(*not_before, datetime!(2026-02-01 0:00 UTC));
                assert!(properties.version.is_some());
            }
            other => panic!("expected Stored, got {other:?}"),
        }
        assert_eq!(s.vault.version_count(NAME), 2);
        let stored = s.store.get_user_assigned_identity(ID, None).await.unwrap();
        assert_eq!(
            stored.credentials.client_secret,
            load("rotation-2").client_secret
        );
        assert_eq!(stored.credentials.resource_id.as_deref(), Some(IDENTITY));

        // Idempotent.
        let again = s.store.renew(&s.client, NAME).await.unwrap();
        assert!(
            matches!(again, RenewalOutcome::NotNewer { .. }),
            "{again:?}"
        );
        assert_eq!(s.vault.version_count(NAME), 2);
    }

    #[tokio::test]
    async fn equal_or_older_credentials_are_not_stored() {
        let s = setup("rotation-2").await;
        // Equal.
        let outcome = s.store.renew(&s.client, NAME).await.unwrap();
        assert_eq!(
            outcome,
            RenewalOutcome::NotNewer {
                name: NAME.into(),
                stored_not_before: datetime!(2026-02-01 0:00 UTC),
                offered_not_before: datetime!(2026-02-01 0:00 UTC),
            }
        );
        // Older (a data plane replica behind).
        rotate(&s, "rotation-1");
        let outcome = s.store.renew(&s.client, NAME).await.unwrap();
        assert!(
            matches!(outcome, RenewalOutcome::NotNewer { offered_not_before, .. } if offered_not_before == datetime!(2026-01-01 0:00 UTC))
        );
        assert_eq!(s.vault.version_count(NAME), 1, "nothing was written");
    }

    #[tokio::test]
    async fn two_concurrent_runs_store_the_same_thing_or_nothing() {
        let s = setup("rotation-1").await;
        rotate(&s, "rotation-3");
        let (a, b) = tokio::join!(
            s.store.renew(&s.client, NAME),
            s.store.renew(&s.client, NAME)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let stored = [&a, &b]
            .iter()
            .filter(|o| matches!(o, RenewalOutcome::Stored { .. }))
            .count();
        assert!(stored >= 1, "{a:?} {b:?}");
        // Every version written after the first holds the same credential.
        let versions = s.vault.version_count(NAME);
        assert_eq!(versions, 1 + stored);
        let latest = s.store.get_user_assigned_identity(ID, None).await.unwrap();
        assert_eq!(
            latest.credentials.client_secret,
            load("rotation-3").client_secret
        );
        // Afterwards there is nothing to do.
        assert!(matches!(
            s.store.renew(&s.client, NAME).await.unwrap(),
            RenewalOutcome::NotNewer { .. }
        ));
    }

    #[tokio::test]
    async fn a_name_of_neither_kind_is_refused() {
        let s = setup("rotation-1").await;
        let err = s.store.renew(&s.client, "db-password").await.unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::InvalidAnswer {
                    code: "invalid_stored_secret",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
