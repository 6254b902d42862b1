//! A token server for every Azure SDK in the pod: the App Service
//! managed identity protocol (api-version 2019-08-01) on loopback TCP, answered from
//! reloading credentials, so that a container whose code uses a stock Azure SDK gets the
//! CSI-mounted, rotating certificate identity with no code change.
//!
//! Every Azure SDK's managed identity credential (Go, Python, Java, .NET, JavaScript,
//! Rust `azure_identity`) asks `IDENTITY_ENDPOINT` for tokens, with the secret from
//! `IDENTITY_HEADER` in an `X-IDENTITY-HEADER` header, when both variables are set:
//!
//! ```text
//! GET /msi/token?api-version=2019-08-01&resource=https://management.azure.com/&client_id=…
//! X-IDENTITY-HEADER: <secret>
//!
//! 200 {"access_token": "…", "expires_on": "1767225600", "resource": "https://management.azure.com/",
//!      "token_type": "Bearer", "client_id": "…"}
//! ```
//!
//! - **Identities**: one or more [`ServedIdentity`], each a reloading credential; a
//!   request names one by `client_id`, `object_id` (or its alias `principal_id`) or
//!   `mi_res_id`; with none, the only one when there is one.
//! - **Tokens** come from the identity's cache. Loaded with [`ServedIdentity::load`], a
//!   token is refreshed at Entra's `refresh_in` when it sent one, else at half its
//!   lifetime when it lives over 2 hours, else [`SERVED_TOKEN_REFRESH_WINDOW`] (15
//!   minutes) before its end; never later than that, nor than half its lifetime (so a
//!   token under 30 minutes at half-life); up to 10% (at most 60 s) of the time until
//!   then earlier, at random; by a background request the first call after that point
//!   starts. An hour's token is served with more than the clients' 5-minute staleness
//!   margin left; a 620 s token is refreshed about 5 minutes in, a 120 s one about 1
//!   minute in. The token is requested
//!   for `<resource>/.default` (a resource that already ends with `/.default` as is).
//! - **Failures**: every error answer is JSON with `statusCode`, `message`,
//!   `correlationId`, `error` and `error_description`, and, when Entra's answer carried
//!   them, its `error_codes`, `timestamp`, `trace_id` and `correlation_id` (MSAL-based
//!   clients print them, "Not Available" otherwise). 400: a bad query or an identity not
//!   served; 401: a missing or wrong secret; 403: the token endpoint refused (its
//!   `AADSTS` code is `error`, its message in `message`) or the credential is outside its
//!   validity; 429 (rate limit) and 503 (the token endpoint unreachable or failing, after
//!   retries), each with `Retry-After`: the only statuses the clients retry.
//! - **`Retry-After` a client can act on**: a failed token request is answered again from
//!   the credential's failure memory (5 s) rather than sent again, so a 503's
//!   `Retry-After` is never shorter than the time that memory will still answer it
//!   (`msi_dataplane::Error::retry_at`), nor than Entra's own `Retry-After`; 5 s when
//!   neither says; at most 60 s (Go's SDK gives up at once on more). Go's `azidentity`
//!   and JavaScript's `@azure/identity` retry exactly at `Retry-After`: each retry gets a
//!   fresh attempt at Entra, not the remembered failure.
//! - **Safety**: loopback only ([`ServeError::NonLoopbackAddress`](crate::serve::ServeError)
//!   otherwise); the secret compared in constant time, the previous one accepted too
//!   during a rotation ([`IdentityHeaderSecret`]); a non-loopback `Host` or absolute-form
//!   target (421), proxy headers (`Forwarded`, `Via`, `X-Forwarded-*`, `X-Real-IP` and
//!   kin: 403), a method other than GET (405), a body (413), a target over 4 KiB (414)
//!   and oversized headers (431) refused with the JSON error. No token and no secret is
//!   ever logged, and values a client or a service chose are cut and escaped before they
//!   reach a log line or an answer: every character but visible printable ASCII (controls,
//!   and all of non-ASCII: invisible and look-alike characters cannot make a line look
//!   like another).
//! - **Limits** a process in the pod cannot starve others with (a row with a flag is an
//!   option of `msi-credential serve` and a setting of [`ServeOptions`] or
//!   [`ServedIdentity`]):
//!
//!   | limit | default | what it protects |
//!   |---|---|---|
//!   | `--max-connections` ([`max_connections`](ServeOptions::max_connections)) | 512 | descriptors and memory; when full, a new connection closes an idle one (never one being answered): one without the secret first, one whose peer has not taken its answer before the others, then the one idle longest; a connection being closed still counts |
//!   | `--first-byte-timeout` ([`first_byte_timeout`](ServeOptions::first_byte_timeout)) | 2 s | slots held by connections that send nothing |
//!   | `--idle-timeout` ([`idle_timeout`](ServeOptions::idle_timeout)) | 30 s | slots held by slow heads and idle keep-alive connections |
//!   | `--write-timeout` ([`write_timeout`](ServeOptions::write_timeout)) | 5 s | memory and slots held by a client that does not read: an answer not written in full within it of its first blocked write closes the connection with a reset (what the kernel queued for it is freed at once) |
//!   | socket buffers ([`SOCKET_BUFFER_BYTES`]) and hyper's buffers ([`HEAD_LIMIT_BYTES`]) | 32 KiB asked each way (Linux allows 64 KiB each way); 32 KiB each way | memory per connection: at most 128 KiB in the kernel and 96 KiB in the process (hyper's two buffers, the task, the allocator's slack), so 512 connections pin at most 64 MiB of socket memory (charged to the sidecar's memory limit on cgroup v2) and 48 MiB of the process's; measured with 512 clients pipelining cached-token requests and never reading, 348 of them open at once at the fullest: 31 MB queued in the server's sockets (89 KB each) and 16 MB more RSS (45 KB each) (`serve_floods` tests, BENCHMARKS.md) |
//!   | `--max-token-requests-per-second` ([`max_token_requests_per_second`](ServeOptions::max_token_requests_per_second)) | 50 (bursts of 100) | Entra: only a new token request takes from it; cached tokens, a request joining one already in flight for the same resource, refusals and `/healthz` never do |
//!   | answers to callers without the secret | 50 a second (bursts of 100) | refusals (401, 404, 405, 413, 414, 421, 431, 403 for proxies) and the bare `/healthz` status share it; past it, each is held back a second and its connection closed, so a flood without the secret waits instead of taking the server's time |
//!   | `--allow-resource` ([`ServedIdentity::with_allowed_resources`]) | any resource | the token endpoint and the cache: other resources are refused (403 `resource_not_allowed`) before any request |
//!   | `--max-cached-resources` | 1,000 per identity | memory: the least recently used resources' tokens leave first (the credential's maximum of cached scopes) |
//!   | failure memory | 5 s per resource | Entra and the log: a refused or failed request is answered again from memory for 5 s, one request and one warning however often it is asked |
//!   | log lines a flood repeats | 5 every 10 s of each kind | the log: refusals, failed token requests and answers from the failure memory are written a few at a time, then counted (`left_out`), and the count written at the next interval, at any log level |
//!
//!   What a container **with** the secret can still do without `--allow-resource`: ask
//!   for any resource of any served identity (Entra decides what exists), so make up to
//!   100 new token requests at once and 50 a second to Entra under the served identities'
//!   names (Entra throttles an identity past its own budget, and the other containers'
//!   new resources then wait for the same budget); fill each identity's cache with up to
//!   `--max-cached-resources` resources (evicting the others' least recently used
//!   tokens, which then cost one request each again); and ask for cached tokens without
//!   limit (each answer is a few microseconds of the server's CPU). `--allow-resource`
//!   narrows all of this to the resources the pod's applications need.
//!
//! - **Health**: `GET /healthz`: 200 when every identity's credential is within its
//!   validity, else 503. With the secret, or a proof of it ([`ProbeChallenge`]: the
//!   secret is never sent, and the answer carries the server's own proof): the
//!   identities' details (client ids, thumbprints, times), never limited; the sidecar's
//!   probes run `msi-credential probe --secret-file` with the server's secret file
//!   (kubelet's `httpGet` probes come from outside the pod and cannot reach loopback).
//!   Without it: the status alone, within the budget of answers to callers without the
//!   secret.
//! - **Metrics**: [`MetricsServer`] serves a rendering of the process's metrics on
//!   `GET /metrics` on the same bounded listener, with limits of its own
//!   ([`MetricsServerOptions`]), on a thread of its own at a lower scheduling priority,
//!   rendering at most once a second for every scraper, for Prometheus to scrape from
//!   outside the pod (the [`cli`](crate::cli) chapter, "Metrics"). The metrics carry the
//!   served identities' client ids as labels (alerts name the identity that needs
//!   attention); `/healthz` shows them only with the secret. One rule decides both:
//!   details about the identities go only to the callers the deployment admits, the
//!   secret on the token port (which every container of the pod reaches) and the
//!   NetworkPolicy on the metrics port (which only the monitoring namespace should
//!   reach). A client id is an identifier, not a credential: Azure lists it in the
//!   identity's resource and every token names it.
//!
//! In a Rust process, [`TokenServer::start`] runs the same server (its docs have an
//! example). `SECURITY.md` has the threat model.
//!
//! # The pod
//!
//! msi-dataplane's `hypershift::k8s::TokenServerSidecar` (feature `k8s`) builds the
//! native sidecar (an init container with `restartPolicy: Always`, Kubernetes 1.29+:
//! started and ready before the application, stopped after it), its probes, its mounts,
//! the Secret volume and the application containers' environment. The pod it builds
//! (msi-dataplane's Kubernetes tests parse it back):
//!
//! ```yaml
//! apiVersion: v1
//! kind: Pod
//! metadata:
//!   name: app
//! spec:
//!   containers:
//!   - env:
//!     - name: IDENTITY_ENDPOINT
//!       value: http://127.0.0.1:50342/msi/token
//!     - name: IDENTITY_HEADER
//!       valueFrom:
//!         secretKeyRef:
//!           key: identity-header
//!           name: app-identity-header
//!           optional: false
//!     - name: NO_PROXY
//!       value: 127.0.0.1,localhost,::1
//!     - name: no_proxy
//!       value: 127.0.0.1,localhost,::1
//!     image: quay.io/example/app:1
//!     name: app
//!   initContainers:
//!   - args:
//!     - serve
//!     - /mnt/certs/uamsi-app
//!     - --listen
//!     - 127.0.0.1:50342
//!     - --secret-file
//!     - /var/run/msi-token-server/identity-header
//!     - --previous-secret-file
//!     - /var/run/msi-token-server/identity-header-previous
//!     command:
//!     - msi-credential
//!     image: quay.io/example/msi-credential:1
//!     name: msi-token-server
//!     readinessProbe:
//!       exec:
//!         command:
//!         - msi-credential
//!         - probe
//!         - --url
//!         - http://127.0.0.1:50342/healthz
//!         - --secret-file
//!         - /var/run/msi-token-server/identity-header
//!       failureThreshold: 3
//!       periodSeconds: 10
//!       timeoutSeconds: 5
//!     restartPolicy: Always
//!     securityContext:
//!       allowPrivilegeEscalation: false
//!       capabilities:
//!         drop:
//!         - ALL
//!       readOnlyRootFilesystem: true
//!       runAsNonRoot: true
//!     startupProbe:
//!       exec:
//!         command:
//!         - msi-credential
//!         - probe
//!         - --url
//!         - http://127.0.0.1:50342/healthz
//!         - --secret-file
//!         - /var/run/msi-token-server/identity-header
//!       failureThreshold: 60
//!       periodSeconds: 1
//!       timeoutSeconds: 5
//!     volumeMounts:
//!     - mountPath: /mnt/certs
//!       name: app-cert
//!       readOnly: true
//!     - mountPath: /var/run/msi-token-server
//!       name: msi-token-server-secret
//!       readOnly: true
//!   volumes:
//!   - csi:
//!       driver: secrets-store.csi.k8s.io
//!       readOnly: true
//!       volumeAttributes:
//!         secretProviderClass: managed-azure-app
//!     name: app-cert
//!   - name: msi-token-server-secret
//!     secret:
//!       secretName: app-identity-header
//! ```
//!
//! The Secret `app-identity-header` holds `identity-header` (any 16 to 512 visible ASCII
//! characters, e.g. `openssl rand -hex 32`). To rotate it: put the new value in
//! `identity-header` and the old one in `identity-header-previous`, restart the
//! applications (they read `IDENTITY_HEADER` only at start), then delete
//! `identity-header-previous`. The server re-reads the previous-secret file every 10 s and
//! accepts it while it exists.
//!
//! # Clients tested against it
//!
//! Run with real clients (this crate's `serve_clients` tests, against the testing kit's
//! verifying Entra server, through a CSI `..data` rotation): Python `azure-identity` 1.27
//! `ManagedIdentityCredential` (with `client_id`, `identity_config={"object_id": ...}` and
//! `{"resource_id": ...}`), the Azure SDK for Rust's `azure_identity` 1.0
//! `ManagedIdentityCredential` (`UserAssignedId::ClientId` and `ObjectId`; it refuses
//! resource ids for App Service before sending anything), and JavaScript's
//! `@azure/identity` 4.14 `ManagedIdentityCredential` (`clientId`, `objectId`; on Node
//! 20, though it declares Node 22), also through an Entra outage shorter than the failure
//! memory (it retries exactly at `Retry-After`) and a refusal (it prints Entra's error
//! codes and trace id from the body), each in a process of its own with only the pod's
//! environment: `cargo test -p msi-credential --test it serve_clients` (the tests install
//! their Python and JavaScript packages on first use). Go's `azidentity` speaks the same
//! protocol and obeys `Retry-After` as JavaScript does, but is not run here.
//!
//! # What operators should know
//!
//! - Python's and JavaScript's `DefaultAzureCredential` **move on silently** when this
//!   endpoint fails: every managed identity failure (an `AADSTS` refusal included) is a
//!   `CredentialUnavailableError`, and the chain tries the next credential (Azure CLI,
//!   ...). A misconfigured sidecar can show up as "no credential found" or as another
//!   identity. Pin the chain to managed identity with
//!   `AZURE_TOKEN_CREDENTIALS=ManagedIdentityCredential` in the application's environment
//!   (both SDKs read it), or use `ManagedIdentityCredential` directly; the sidecar's
//!   `/healthz` and its log say what failed.
//! - Python gives up after about 5 s with nothing listening (Rust after about 82 s): the
//!   native sidecar is started and ready before the application containers.
//! - With `HTTP_PROXY`/`HTTPS_PROXY` set and `NO_PROXY` not covering loopback, the
//!   clients send the request, secret included, to the proxy: keep `NO_PROXY` (the
//!   sidecar's environment sets it; merge it with your own).

mod answer;
mod error;
mod handle;
mod identity;
mod limit;
mod listener;
mod metrics_server;
mod probe;
mod request;
mod secret;
mod server;
mod socket;

pub use answer::DEFAULT_RETRY_AFTER_SECS;
pub use error::{Result, ServeError};
pub use identity::{SERVED_TOKEN_REFRESH_WINDOW, ServedIdentity};
pub use listener::{HEAD_LIMIT_BYTES, MAX_CONNECTIONS_LIMIT};
pub use metrics_server::{METRICS_CONTENT_TYPE, METRICS_PATH, MetricsServer, MetricsServerOptions};
pub use probe::{
    PROBE_ANSWER_HEADER, PROBE_NONCE_HEADER, PROBE_PROOF_HEADER, PROBE_WINDOW, ProbeChallenge,
};
pub use request::HEALTH_PATH;
pub use request::{
    APP_SERVICE_API_VERSION, IDENTITY_HEADER_NAME, MAX_HEADER_BYTES, MAX_HEADER_COUNT,
    MAX_TARGET_BYTES, MAX_VALUE_CHARS,
};
pub use secret::{IdentityHeaderSecret, MAX_SECRET_BYTES, MIN_SECRET_BYTES, read_presented_secret};
pub use server::{DEFAULT_PORT, DEFAULT_TOKEN_PATH, ServeOptions, TokenServer};
pub use socket::SOCKET_BUFFER_BYTES;
