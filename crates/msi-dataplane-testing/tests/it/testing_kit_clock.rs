//! Time moved by a test, end to end: the Entra server judges assertions by the same
//! `ManualClock` as the credential, so a test crosses refresh ahead, token expiry,
//! `renew_after` and the certificate's end in a few milliseconds of real time. Public API
//! only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use msi_dataplane::inspect::{CredentialReport, ProblemKind};
use msi_dataplane::{
    BundleFormat, ClientCertificate, ClientCertificateCredential,
    ClientCertificateCredentialOptions, Clock, Environment, ErrorKind, ManualClock,
};
use msi_dataplane_testing::{EntraServer, TestCertificate, TestIdentity};

const ARM: &str = "https://management.azure.com/.default";

#[tokio::test]
async fn a_manual_clock_crosses_refresh_expiry_renewal_and_the_end_without_waiting() {
    let started = Instant::now();
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    let entra = EntraServer::start().await;
    entra.use_clock(clock.clone());
    let identity = TestIdentity::new();
    let now = clock.now();
    let certificate = TestCertificate::builder()
        .validity(
            now - time::Duration::hours(1),
            now + time::Duration::days(90),
        )
        .self_signed();
    entra.register(&identity, &certificate);
    let file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    let http = Environment::default().with_http_client(entra.client());
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(http.with_clock(clock.clone()));
    let credential = ClientCertificateCredential::new(&file, options).unwrap();

    // A one-hour token.
    let first = credential.get_token(&[ARM]).await.unwrap();
    assert_eq!(entra.token_requests(), 1);

    // 57 minutes on: inside the refresh window. The cached token comes at once and one
    // background request replaces it; the server accepts an assertion dated 57 minutes
    // ahead of the wall clock because it reads the same clock.
    clock.advance(Duration::from_secs(57 * 60));
    let during = credential.get_token(&[ARM]).await.unwrap();
    assert_eq!(during.token(), first.token());
    let seen = entra
        .wait_for_token_requests(2, Duration::from_secs(5))
        .await;
    assert_eq!(seen, 2, "{:#?}", entra.requests());
    let deadline = Instant::now() + Duration::from_secs(5);
    let refreshed = loop {
        let token = credential.get_token(&[ARM]).await.unwrap();
        if token.token() != first.token() || Instant::now() > deadline {
            break token;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_ne!(refreshed.token(), first.token(), "refreshed ahead");
    let recorded = entra.requests().pop().unwrap();
    assert_eq!(
        recorded.received_at,
        clock.now(),
        "recorded by the shared clock"
    );

    // Two hours on: that token has expired; the next call fetches a new one.
    clock.advance(Duration::from_secs(2 * 3600));
    let after_expiry = credential.get_token(&[ARM]).await.unwrap();
    assert_ne!(after_expiry.token(), refreshed.token());
    assert_eq!(entra.token_requests(), 3);

    // 61 days on: past `renew_after` (two thirds of 90 days), still usable.
    clock.advance(Duration::from_secs(61 * 86_400));
    let cert = ClientCertificate::from_credentials(&file).unwrap();
    let report = CredentialReport::new(&file, &cert, clock.now(), Duration::ZERO).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == ProblemKind::PastRenewAfter),
        "{report:?}"
    );
    credential
        .get_token(&["https://vault.azure.net/.default"])
        .await
        .unwrap();
    assert_eq!(entra.token_requests(), 4);

    // 30 more days: past the certificate's end. Refused before any request.
    clock.advance(Duration::from_secs(30 * 86_400));
    let e = credential
        .get_token(&["https://graph.microsoft.com/.default"])
        .await
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Expired { .. }), "{e:?}");
    assert_eq!(entra.token_requests(), 4);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no real waiting"
    );
}

/// A fixture on a manual clock: the server records by it, the credential refreshes by it,
/// and the refresh point the kit computes is where the credential refreshes: nothing a
/// second before the earliest point, a background refresh at the latest, taken up once
/// `wait_for_refreshed_token` returns.
#[tokio::test]
async fn a_fixture_on_a_manual_clock_refreshes_where_the_issued_token_says() {
    use msi_dataplane::limits::MIN_REFRESH_WINDOW;
    use msi_dataplane_testing::{IdentityFixture, TokenShape};

    let clock = Arc::new(ManualClock::starting_now());
    let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
    let wait = Duration::from_secs(5);

    // Three shapes of token: one hour (5 minutes before expiry), a day (half-life), and
    // one hour with the server's `refresh_in` of 10 minutes.
    let cases = [
        (ARM, TokenShape::default(), 3599 - 300),
        (
            "https://vault.azure.net/.default",
            TokenShape {
                expires_in: 86_400,
                ..TokenShape::default()
            },
            43_200,
        ),
        (
            "https://graph.microsoft.com/.default",
            TokenShape {
                refresh_in: Some(600),
                ..TokenShape::default()
            },
            600,
        ),
    ];
    for (scope, shape, after) in cases {
        fx.entra.set_token_shape(shape);
        let requests = fx.entra.token_requests();
        let first = fx.credential.get_token(&[scope]).await.unwrap();
        let issued = fx.entra.issued(first.token()).unwrap();
        assert_eq!(issued.issued_at, clock.now(), "issued by the shared clock");
        assert_eq!(first.expires_on(), issued.expires_at());
        let range = issued.refresh_between(MIN_REFRESH_WINDOW);
        let latest = issued.issued_at + time::Duration::seconds(after);
        assert_eq!(*range.end(), latest, "{scope}");
        // Up to 60 s of jitter (10 % of the time until it, at most 60 s: 60 s for all three).
        assert_eq!(
            *range.start(),
            latest - time::Duration::seconds(60),
            "{scope}"
        );

        // A second before the earliest point: the cached token, and no request.
        clock.set(*range.start() - time::Duration::seconds(1));
        let same = fx.credential.get_token(&[scope]).await.unwrap();
        assert_eq!(same.token(), first.token(), "{scope}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(fx.entra.token_requests(), requests + 1, "{scope}");

        // At the latest point: still the cached token, refreshed behind it.
        clock.set(latest);
        let during = fx.credential.get_token(&[scope]).await.unwrap();
        assert_eq!(during.token(), first.token(), "{scope}");
        let next = fx
            .entra
            .wait_for_refreshed_token(&fx.credential, scope, &first, wait)
            .await;
        assert_eq!(fx.entra.token_requests(), requests + 2, "{scope}");
        assert!(fx.entra.issued(next.token()).is_some());
        let again = fx.credential.get_token(&[scope]).await.unwrap();
        assert_eq!(again.token(), next.token(), "taken up: {scope}");
        assert_eq!(fx.entra.token_requests(), requests + 2, "{scope}");
    }
}

/// The refresh waiter fails, saying so, when the refresh does not succeed: Entra refuses
/// it, the credential keeps handing out the cached token.
#[tokio::test]
async fn the_refresh_waiter_panics_at_its_deadline_when_the_refresh_fails() {
    use msi_dataplane::limits::MIN_REFRESH_WINDOW;
    use msi_dataplane_testing::{IdentityFixture, Match, Scripted};

    let clock = Arc::new(ManualClock::starting_now());
    let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
    let first = fx.credential.get_token(&[ARM]).await.unwrap();
    let range = fx
        .entra
        .issued(first.token())
        .unwrap()
        .refresh_between(MIN_REFRESH_WINDOW);
    let refused = fx
        .entra
        .on(Match::any().scope(ARM))
        .respond(Scripted::aadsts(
            401,
            "invalid_client",
            700027,
            "Key not found.",
        ))
        .until_cleared()
        .expect(1..)
        .mount_scoped();
    clock.set(*range.end());
    let (credential, entra) = (fx.credential.clone(), fx.entra.clone());
    let waiting = tokio::spawn(async move {
        entra
            .wait_for_refreshed_token(&credential, ARM, &first, Duration::from_millis(300))
            .await
    });
    let panic = waiting.await.unwrap_err().into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("still hands out the token for"),
        "{message}"
    );
    assert!(message.contains(ARM), "{message}");
    drop(refused); // the refresh was asked for (and refused)
    assert_eq!(fx.entra.requests()[1].aadsts_code, Some(700027));
}

/// The refresh waiter on a clock nobody moved says so: the clock's reading, and the
/// refresh range it has not reached.
#[tokio::test]
async fn the_refresh_waiter_on_an_unmoved_clock_names_the_clock_and_the_range() {
    use msi_dataplane::limits::MIN_REFRESH_WINDOW;
    use msi_dataplane_testing::IdentityFixture;

    let clock = Arc::new(ManualClock::starting_now());
    let fx = IdentityFixture::start_with_clock(TestCertificate::self_signed(), clock.clone()).await;
    let first = fx.credential.get_token(&[ARM]).await.unwrap();
    let range = fx
        .entra
        .issued(first.token())
        .unwrap()
        .refresh_between(MIN_REFRESH_WINDOW);
    let (credential, entra) = (fx.credential.clone(), fx.entra.clone());
    let waiting = tokio::spawn(async move {
        entra
            .wait_for_refreshed_token(&credential, ARM, &first, Duration::from_millis(100))
            .await
    });
    let panic = waiting.await.unwrap_err().into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    let at = |t| msi_dataplane::rfc3339(t).to_string();
    assert!(
        message.contains(&format!("the clock reads {}", at(clock.now()))),
        "{message}"
    );
    assert!(message.contains("before its refresh range"), "{message}");
    assert!(
        message.contains(&format!("{} to {}", at(*range.start()), at(*range.end()))),
        "{message}"
    );
    assert_eq!(fx.entra.token_requests(), 1, "nothing refreshed");
}

/// A multi-tenant credential's token in another tenant, refreshed: the `_for_tenant`
/// waiter asks in that tenant.
#[tokio::test]
async fn the_refresh_waiter_follows_a_token_in_another_tenant() {
    use msi_dataplane::limits::MIN_REFRESH_WINDOW;

    let clock = Arc::new(ManualClock::starting_now());
    let entra = EntraServer::start().await;
    entra.use_clock(clock.clone());
    let identity = TestIdentity::new();
    let certificate = TestCertificate::self_signed();
    entra.register(&identity, &certificate);
    let other = "11111111-2222-3333-4444-555555555555";
    entra.register_certificate_pem(
        &identity.client_id,
        other,
        certificate.certificate_pem().as_bytes(),
    );
    let file = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(
            Environment::default()
                .with_http_client(entra.client())
                .with_clock(clock.clone()),
        )
        .with_additionally_allowed_tenants([other]);
    let credential = ClientCertificateCredential::new(&file, options).unwrap();
    let first = credential
        .get_token_for_tenant(&[ARM], other)
        .await
        .unwrap();
    let issued = entra.issued(first.token()).unwrap();
    assert_eq!(issued.tenant, other);
    clock.set(*issued.refresh_between(MIN_REFRESH_WINDOW).end());
    let next = entra
        .wait_for_refreshed_token_for_tenant(
            &credential,
            ARM,
            other,
            &first,
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(entra.issued(next.token()).unwrap().tenant, other);
    assert_eq!(entra.token_requests(), 2);
}
