//! Time moved by a test, end to end: the Entra server judges assertions by the same
//! `ManualClock` as the credential, so a test crosses refresh ahead, token expiry,
//! `renew_after` and the certificate's end in a few milliseconds of real time. Public API
//! only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use msi_dataplane::inspect::{CredentialReport, ProblemKind};
use msi_dataplane::{
    BundleFormat, ClientCertificate, ClientCertificateCredential,
    ClientCertificateCredentialOptions, Clock, Environment, ErrorKind, FileError, ManualClock,
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
    assert!(
        matches!(
            e.kind(),
            ErrorKind::File(FileError::CredentialExpired { .. })
        ),
        "{e:?}"
    );
    assert_eq!(entra.token_requests(), 4);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no real waiting"
    );
}
