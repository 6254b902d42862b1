//! The metrics, through a real recorder (`metrics-util`'s debugging recorder, installed
//! for the whole process): a scripted flow on the testing kit (tokens, an AADSTS failure,
//! a 503 retried then answered, a CSI rotation, a rejected file, a renewal through the
//! data plane and Key Vault), then every metric's name, labels and value, and that no
//! label carries a scope, a token, a URL or a path. Public API only.
#![cfg(all(unix, feature = "metrics", feature = "keyvault"))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
use msi_dataplane::keyvault::store::CredentialStore;
use msi_dataplane::telemetry;
use msi_dataplane::{BundleFormat, ReloadOutcome};
use msi_dataplane_testing::{
    DataPlaneServer, IdentityFixture, KeyVaultServer, Match, Scripted, TestCertificate,
};

/// The process's recorder (one per process: every test here shares it).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test binary");
        telemetry::describe();
        snapshotter
    })
}

/// The debugging recorder's snapshot takes counters and gauges (it sets them to 0): the
/// tests here run one at a time, so that none takes another's values.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

type Labels = BTreeMap<String, String>;

/// Every metric now: name -> [(labels, value)].
fn snapshot() -> BTreeMap<String, Vec<(Labels, DebugValue)>> {
    let mut out: BTreeMap<String, Vec<(Labels, DebugValue)>> = BTreeMap::new();
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        out.entry(key.name().to_owned())
            .or_default()
            .push((labels, value));
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The counter `name` with exactly these labels (0 when absent).
fn counter(
    all: &BTreeMap<String, Vec<(Labels, DebugValue)>>,
    name: &str,
    l: &[(&str, &str)],
) -> u64 {
    let want = labels(l);
    all.get(name)
        .into_iter()
        .flatten()
        .find(|(have, _)| *have == want)
        .map_or(0, |(_, v)| match v {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
}

/// Whether the series `name` with exactly these labels exists.
fn has(all: &BTreeMap<String, Vec<(Labels, DebugValue)>>, name: &str, l: &[(&str, &str)]) -> bool {
    let want = labels(l);
    all.get(name)
        .into_iter()
        .flatten()
        .any(|(have, _)| *have == want)
}

/// The gauge `name` for `client_id`.
fn gauge(
    all: &BTreeMap<String, Vec<(Labels, DebugValue)>>,
    name: &str,
    client_id: &str,
) -> Option<f64> {
    let want = labels(&[("client_id", client_id)]);
    all.get(name)?
        .iter()
        .find(|(have, _)| *have == want)
        .map(|(_, v)| match v {
            DebugValue::Gauge(g) => g.into_inner(),
            other => panic!("{name} is not a gauge: {other:?}"),
        })
}

/// The gauge `name` of `client_id` with the file refusal's `reason`.
fn refusal_gauge(
    all: &BTreeMap<String, Vec<(Labels, DebugValue)>>,
    client_id: &str,
    reason: &str,
) -> f64 {
    let want = labels(&[("client_id", client_id), ("reason", reason)]);
    let name = telemetry::CREDENTIAL_FILE_REJECTED;
    let mut found = all.get(name).into_iter().flatten();
    let found = found.find(|(have, _)| *have == want);
    match found.map(|(_, v)| v) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{name} {client_id} {reason}: {other:?}"),
    }
}

/// How many samples the histogram `name` with these labels took since the last snapshot.
fn samples(
    all: &BTreeMap<String, Vec<(Labels, DebugValue)>>,
    name: &str,
    l: &[(&str, &str)],
) -> usize {
    let want = labels(l);
    all.get(name)
        .into_iter()
        .flatten()
        .filter(|(have, _)| *have == want)
        .map(|(_, v)| match v {
            DebugValue::Histogram(values) => values.len(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .sum()
}

const ARM: &str = "https://management.azure.com/.default";
const VAULT: &str = "https://vault.azure.net/.default";
const GRAPH: &str = "https://graph.microsoft.com/.default";
const UA: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/cpo";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_flow_is_counted_with_bounded_labels() {
    let _serial = one_at_a_time().await;
    snapshotter();
    let mut fx = IdentityFixture::start().await;
    let id = fx.identity.client_id.clone();
    let cid = id.as_str();

    // 0. Before any event: the label sets a rule reads are there, at 0.
    let all = snapshot();
    for reason in [
        "not_newer",
        "not_found",
        "unreadable",
        "malformed_json",
        "bad_bundle",
        "outside_validity",
        "other",
    ] {
        let l = [
            ("client_id", cid),
            ("outcome", "kept_last_good"),
            ("reason", reason),
        ];
        assert!(
            has(&all, telemetry::RELOADS, &l),
            "{reason}: {:#?}",
            all.get(telemetry::RELOADS)
        );
        assert_eq!(counter(&all, telemetry::RELOADS, &l), 0);
        assert_eq!(refusal_gauge(&all, cid, reason), 0.0);
    }
    let first = [
        ("client_id", cid),
        ("outcome", "success"),
        ("error_code", "none"),
    ];
    assert!(has(&all, telemetry::TOKEN_REQUESTS, &first));
    assert_eq!(
        gauge(&all, telemetry::TOKEN_CONSECUTIVE_FAILURES, cid),
        Some(0.0)
    );

    // 1. A token, then the same one from the cache (not a request).
    fx.credential.get_token(&[ARM]).await.unwrap();
    fx.credential.get_token(&[ARM]).await.unwrap();
    // 2. AADSTS700027, not retried.
    let refusal = fx
        .entra
        .on(Match::any().client_id(cid).scope(VAULT))
        .respond(Scripted::aadsts(
            401,
            "invalid_client",
            700027,
            "Client assertion failed signature validation.",
        ))
        .expect(1)
        .mount_scoped();
    assert!(fx.credential.get_token(&[VAULT]).await.is_err());
    drop(refusal);
    // (A snapshot of the debugging recorder takes the counts and values since the last.)
    let all = snapshot();
    assert_eq!(
        gauge(&all, telemetry::TOKEN_CONSECUTIVE_FAILURES, cid),
        Some(1.0)
    );
    let requests = telemetry::TOKEN_REQUESTS;
    let duration = telemetry::TOKEN_REQUEST_DURATION;
    let ok = [
        ("client_id", cid),
        ("outcome", "success"),
        ("error_code", "none"),
    ];
    assert_eq!(counter(&all, requests, &ok), 1, "{:#?}", all.get(requests));
    let refused = [
        ("client_id", cid),
        ("outcome", "refused"),
        ("error_code", "AADSTS700027"),
    ];
    assert_eq!(counter(&all, requests, &refused), 1);
    assert_eq!(
        samples(
            &all,
            duration,
            &[("client_id", cid), ("outcome", "refused")]
        ),
        1
    );
    // 3. A 503, retried (at once, as its Retry-After says), then answered.
    let busy = fx
        .entra
        .on(Match::any().client_id(cid).scope(GRAPH))
        .respond(Scripted::status(503).retry_after("0"))
        .expect(2)
        .mount_scoped();
    fx.credential.get_token(&[GRAPH]).await.unwrap();
    drop(busy);

    let all = snapshot();
    assert_eq!(counter(&all, requests, &ok), 1, "{:#?}", all.get(requests));
    let busy = [
        ("client_id", cid),
        ("outcome", "transient"),
        ("error_code", "503"),
    ];
    assert_eq!(counter(&all, requests, &busy), 1);
    // The run of failures ended with the success.
    assert_eq!(
        gauge(&all, telemetry::TOKEN_CONSECUTIVE_FAILURES, cid),
        Some(0.0)
    );
    for outcome in ["success", "transient"] {
        assert_eq!(
            samples(&all, duration, &[("client_id", cid), ("outcome", outcome)]),
            1,
            "{outcome}"
        );
    }

    // The credential's times, as the file says them.
    let file = fx
        .identity
        .credentials(&fx.certificate, &fx.entra.base_url(), BundleFormat::Pem);
    let unix = |t: time::OffsetDateTime| t.unix_timestamp() as f64;
    assert_eq!(
        gauge(&all, telemetry::CREDENTIAL_NOT_AFTER, cid),
        Some(unix(fx.certificate.not_after()))
    );
    assert_eq!(
        gauge(&all, telemetry::CREDENTIAL_RENEW_AFTER, cid),
        Some(unix(file.renew_after().unwrap().unwrap()))
    );
    assert_eq!(
        gauge(&all, telemetry::CREDENTIAL_CANNOT_RENEW_AFTER, cid),
        Some(unix(file.cannot_renew_after().unwrap().unwrap()))
    );
    let expiry = gauge(&all, telemetry::TOKEN_EXPIRY, cid).unwrap();
    let now = unix(time::OffsetDateTime::now_utc());
    assert!(
        expiry > now + 3000.0 && expiry < now + 3700.0,
        "{expiry} vs {now}"
    );
    // Of the two tokens cached (the refused scope has none), the sooner's end.
    let soonest = gauge(&all, telemetry::TOKEN_SOONEST_EXPIRY, cid).unwrap();
    assert!(
        soonest <= expiry && soonest > now + 3000.0,
        "{soonest} vs {expiry}"
    );

    // 4. A rotation: swapped, and the gauges follow the new certificate.
    let next = TestCertificate::builder()
        .renewing(&fx.certificate)
        .self_signed();
    let next_end = unix(next.not_after());
    fx.rotate_to(next, BundleFormat::Pem).await;
    // 5. A file the credential cannot use: the last good one is kept, with the reason.
    fx.mount.rotate(b"{ not json");
    let kept = msi_dataplane_testing::wait_for_status(
        &fx.credential,
        std::time::Duration::from_secs(20),
        |s| s.last_outcome == Some(ReloadOutcome::Invalid),
    )
    .await
    .expect("the bad file is seen");
    assert_eq!(kept.last_error.as_ref().unwrap().kind().code(), "json");
    let reason = "malformed_json";
    // The same bad bytes read again are not refused again: one count per file.
    for _ in 0..3 {
        assert_eq!(fx.credential.check_now().await, ReloadOutcome::Invalid);
    }

    let all = snapshot();
    let reloads = telemetry::RELOADS;
    let swapped = [
        ("client_id", cid),
        ("outcome", "swapped"),
        ("reason", "none"),
    ];
    assert!(
        counter(&all, reloads, &swapped) >= 1,
        "{:#?}",
        all.get(reloads)
    );
    let rejected = [
        ("client_id", cid),
        ("outcome", "kept_last_good"),
        ("reason", reason),
    ];
    assert_eq!(
        counter(&all, reloads, &rejected),
        1,
        "{:#?}",
        all.get(reloads)
    );
    let unchanged = [
        ("client_id", cid),
        ("outcome", "unchanged"),
        ("reason", "none"),
    ];
    assert!(
        counter(&all, reloads, &unchanged) >= 3,
        "{:#?}",
        all.get(reloads)
    );
    assert_ne!(reason, "none");
    // The file refused now: its reason at 1, the others at 0.
    assert_eq!(refusal_gauge(&all, cid, reason), 1.0);
    assert_eq!(refusal_gauge(&all, cid, "not_newer"), 0.0);
    assert_eq!(
        gauge(&all, telemetry::CREDENTIAL_NOT_AFTER, cid),
        Some(next_end)
    );

    // 5b. A newer file without renewal times: the gauges follow it (NaN: none), and do
    // not keep the previous credential's.
    let bare_cert = TestCertificate::builder()
        .renewing(&fx.certificate)
        .self_signed();
    fx.entra.register(&fx.identity, &bare_cert);
    let mut bare = fx
        .identity
        .credentials(&bare_cert, &fx.entra.base_url(), BundleFormat::Pem);
    bare.renew_after = None;
    bare.cannot_renew_after = None;
    fx.mount.rotate_credentials(&bare);
    let bare_hex = bare_cert.sha256_hex();
    msi_dataplane_testing::wait_for_status(
        &fx.credential,
        std::time::Duration::from_secs(20),
        |s| s.thumbprint_sha256 == bare_hex,
    )
    .await
    .expect("the file without renewal times is swapped in");
    let all = snapshot();
    assert_eq!(
        gauge(&all, telemetry::CREDENTIAL_NOT_AFTER, cid),
        Some(unix(bare_cert.not_after()))
    );
    for name in [
        telemetry::CREDENTIAL_RENEW_AFTER,
        telemetry::CREDENTIAL_CANNOT_RENEW_AFTER,
    ] {
        let value = gauge(&all, name, cid).unwrap();
        assert!(
            value.is_nan(),
            "{name} = {value}: the previous credential's"
        );
    }
    // A good file in use: no refusal any more.
    assert_eq!(refusal_gauge(&all, cid, reason), 0.0);

    // 6. A renewal: the data plane rotates the identity; the pass renews it in the vault.
    let tenant = fx.identity.tenant_id.clone();
    let dp = DataPlaneServer::start(&fx.entra, &tenant, DataPlaneServer::AUDIENCE).await;
    dp.create_user_assigned(UA);
    let vault = KeyVaultServer::start(&fx.entra, &tenant).await;
    let options = fx.environment();
    let factory =
        ClientFactory::new(fx.credential.clone(), DataPlaneServer::AUDIENCE, options).unwrap();
    let dataplane = factory.client(&dp.identity_url()).unwrap();
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(fx.credential.clone()),
        msi_dataplane::keyvault::store::StoreOptions::default()
            .with_environment(fx.environment())
            .verify_challenge_resource(false),
    )
    .unwrap();
    let issued = dataplane
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([UA]))
        .await
        .unwrap();
    let first = issued.user_assigned_identity(UA).unwrap();
    let stored = store
        .put_user_assigned_identity("cpo", first)
        .await
        .unwrap();
    dp.rotate(UA);
    let renew_after = time::OffsetDateTime::parse(
        &stored.tags["renew_after"],
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let pass = store
        .renew_due(&dataplane, renew_after + time::Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!((pass.due, pass.renewed.len()), (1, 1), "{pass:?}");

    let all = snapshot();
    assert_eq!(counter(&all, telemetry::RENEWALS, &[("outcome", "due")]), 1);
    assert_eq!(
        counter(&all, telemetry::RENEWALS, &[("outcome", "renewed")]),
        1
    );
    let dp_ok = [
        ("operation", "get_user_assigned"),
        ("outcome", "success"),
        ("error_code", "none"),
    ];
    assert_eq!(counter(&all, telemetry::DATAPLANE_REQUESTS, &dp_ok), 2);
    let kv = |op| {
        [
            ("operation", op),
            ("outcome", "success"),
            ("error_code", "none"),
        ]
    };
    assert_eq!(counter(&all, telemetry::KEYVAULT_REQUESTS, &kv("put")), 2);
    assert_eq!(counter(&all, telemetry::KEYVAULT_REQUESTS, &kv("list")), 1);
    assert_eq!(counter(&all, telemetry::KEYVAULT_REQUESTS, &kv("get")), 1);
    assert_eq!(counter(&all, telemetry::KEYVAULT_REQUESTS, &kv("renew")), 1);
    assert!(
        samples(
            &all,
            telemetry::KEYVAULT_REQUEST_DURATION,
            &[("operation", "renew"), ("outcome", "success")]
        ) >= 1
    );

    // Bounded labels: known keys; values that are no scope, URL, path or token.
    let allowed_keys: BTreeSet<&str> =
        ["client_id", "outcome", "error_code", "reason", "operation"].into();
    let mut seen = 0;
    for (name, series) in snapshot() {
        assert!(name.starts_with("msi_dataplane_"), "{name}");
        for (labels, _) in series {
            for (key, value) in labels {
                seen += 1;
                assert!(allowed_keys.contains(key.as_str()), "{name}: label {key}");
                // A scope, URL, host, path or token has one of these; no label value may.
                assert!(
                    !value.contains(['/', ':', '.', ' ', '?', '=']),
                    "{name}: {key}={value} looks like a scope, URL, path or token"
                );
                assert!(value.len() <= 64, "{name}: {key}={value}");
            }
        }
    }
    assert!(seen > 20, "{seen} labels checked");
}

/// A token request in flight on a credential that a rotation then retires ends after the
/// swap: the credential gauges keep the new certificate's times, not the old one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_finishing_on_a_retired_credential_leaves_the_new_ones_gauges() {
    let _serial = one_at_a_time().await;
    snapshotter();
    let mut fx = IdentityFixture::start().await;
    let cid = fx.identity.client_id.clone();
    let old_hex = fx.certificate.sha256_hex();
    // Entra answers this scope 3 s late: long past the rotation below.
    fx.entra
        .set_scope_delay(GRAPH, std::time::Duration::from_secs(3));
    let in_flight = tokio::spawn({
        let credential = fx.credential.clone();
        async move { credential.get_token(&[GRAPH]).await }
    });
    let arrived = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !fx
        .entra
        .requests()
        .iter()
        .any(|r| r.scope.as_deref() == Some(GRAPH))
    {
        assert!(
            std::time::Instant::now() < arrived,
            "the request never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    // Newer than the first (from an hour ago), and ending 10 days earlier: the two ends
    // tell the credentials apart.
    let now = time::OffsetDateTime::now_utc();
    let next = TestCertificate::builder()
        .validity(
            now - time::Duration::minutes(30),
            now + time::Duration::days(20),
        )
        .self_signed();
    let next_end = next.not_after().unix_timestamp() as f64;
    assert!(next_end < fx.certificate.not_after().unix_timestamp() as f64 - 86_400.0);
    fx.rotate_to(next, BundleFormat::Pem).await;
    assert!(
        !in_flight.is_finished(),
        "the request ended before the swap: the test proves nothing"
    );
    let token = in_flight.await.unwrap().unwrap();
    // It was the old credential's request, ended after the swap.
    assert_eq!(
        fx.entra.issued(token.token()).unwrap().cert_sha256_hex,
        old_hex
    );
    assert_eq!(
        gauge(&snapshot(), telemetry::CREDENTIAL_NOT_AFTER, &cid),
        Some(next_end),
        "the retired credential's request wrote its own end over the new one's"
    );
}

/// Statuses outside the known set, from a hostile or broken token endpoint, are one
/// `error_code` label, `other` (418 and 599: refusals, neither is retried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unexpected_statuses_are_labelled_other() {
    let _serial = one_at_a_time().await;
    snapshotter();
    let fx = IdentityFixture::start().await;
    let cid = fx.identity.client_id.as_str();
    let teapot = fx
        .entra
        .on(Match::any().client_id(cid).scope(VAULT))
        .respond(Scripted::status(418))
        .expect(1)
        .mount_scoped();
    let refused = fx.credential.get_token(&[VAULT]).await.unwrap_err();
    assert_eq!(refused.status(), Some(418));
    drop(teapot);
    let odd = fx
        .entra
        .on(Match::any().client_id(cid).scope(GRAPH))
        .respond(Scripted::status(599))
        .expect(1)
        .mount_scoped();
    let refused = fx.credential.get_token(&[GRAPH]).await.unwrap_err();
    assert_eq!(refused.status(), Some(599));
    drop(odd);

    let all = snapshot();
    let requests = telemetry::TOKEN_REQUESTS;
    let other = [
        ("client_id", cid),
        ("outcome", "refused"),
        ("error_code", "other"),
    ];
    assert_eq!(
        counter(&all, requests, &other),
        2,
        "{:#?}",
        all.get(requests)
    );
    for series in all.get(requests).into_iter().flatten() {
        let code = &series.0["error_code"];
        assert!(!["418", "599"].contains(&code.as_str()), "{code}");
    }
}
