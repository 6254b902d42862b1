//! Scripted answers with matchers and expectations, shared by the kit's servers (Entra,
//! the MSI data plane and Key Vault), in the manner of wiremock's mocks.
//!
//! A script is mounted on a server with [`Match`] (which requests it is about), an
//! optional [`Scripted`] answer given [once](ScriptBuilder::once),
//! [n times](ScriptBuilder::times) or [until cleared](ScriptBuilder::until_cleared), and
//! an optional expectation ([`ScriptBuilder::expect`]) on how many matching requests
//! arrive while it is mounted. Expectations are checked when the server's last handle is
//! dropped, when a [`ScriptGuard`] is dropped, or at the server's `verify()`; a failed one
//! panics with an [`ExpectationFailure`]: what the server received, which of those
//! requests the expectation matched, and what each got. `try_verify()` and
//! [`ScriptGuard::finish`] return it instead.

use std::fmt;
use std::ops::RangeFrom;
use std::sync::{Arc, Mutex, MutexGuard};

use super::answer::Scripted;

/// Which requests a script is about: every condition set must hold (all unset: every
/// request). Client id, tenant and method compare case-insensitively; scope and path
/// exactly.
///
/// What each server matches on:
///
/// | condition | [`EntraServer`](super::EntraServer) | [`DataPlaneServer`](super::DataPlaneServer), [`KeyVaultServer`](super::KeyVaultServer) |
/// |---|---|---|
/// | `client_id` | the `client_id` form field | the client id of the bearer token |
/// | `tenant` | the tenant in the token path | the request's tenant (data plane: the identity URL's `tid`; Key Vault: the token's) |
/// | `scope` | the `scope` form field | the scope the bearer token was issued for |
/// | `method`, `path`, `path_prefix` | the request's | the request's |
///
/// The data plane and Key Vault match only requests whose token they accepted (the
/// challenge's unauthenticated first request is not counted); Entra matches every request
/// on a token path, before checking anything.
///
/// ```
/// use msi_dataplane_testing::Match;
///
/// let m = Match::any().client_id("0b7e2a4c-1111-4222-8333-944455566677").scope("https://vault.azure.net/.default");
/// assert_eq!(
///     m.to_string(),
///     "client_id = 0b7e2a4c-1111-4222-8333-944455566677, scope = https://vault.azure.net/.default"
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    client_id: Option<String>,
    tenant: Option<String>,
    scope: Option<String>,
    method: Option<String>,
    path: Option<String>,
    path_prefix: Option<String>,
}

impl Match {
    /// Every request.
    pub fn any() -> Match {
        Match::default()
    }

    /// Only requests of this client id.
    pub fn client_id(mut self, client_id: &str) -> Match {
        self.client_id = Some(client_id.to_owned());
        self
    }

    /// Only requests for this tenant.
    pub fn tenant(mut self, tenant: &str) -> Match {
        self.tenant = Some(tenant.to_owned());
        self
    }

    /// Only requests for this scope (e.g. `https://vault.azure.net/.default`).
    pub fn scope(mut self, scope: &str) -> Match {
        self.scope = Some(scope.to_owned());
        self
    }

    /// Only requests with this HTTP method.
    pub fn method(mut self, method: &str) -> Match {
        self.method = Some(method.to_owned());
        self
    }

    /// Only requests on exactly this path (no query).
    pub fn path(mut self, path: &str) -> Match {
        self.path = Some(path.to_owned());
        self
    }

    /// Only requests on a path that starts with `prefix` (e.g. `/secrets/` on Key Vault).
    pub fn path_prefix(mut self, prefix: &str) -> Match {
        self.path_prefix = Some(prefix.to_owned());
        self
    }

    fn matches(&self, facts: &Facts<'_>) -> bool {
        let ci = |want: &Option<String>, got: Option<&str>| match want {
            None => true,
            Some(w) => got.is_some_and(|g| g.eq_ignore_ascii_case(w)),
        };
        let exact = |want: &Option<String>, got: Option<&str>| match want {
            None => true,
            Some(w) => got == Some(w.as_str()),
        };
        ci(&self.client_id, facts.client_id)
            && ci(&self.tenant, facts.tenant)
            && exact(&self.scope, facts.scope)
            && ci(&self.method, Some(facts.method))
            && exact(&self.path, Some(facts.path))
            && self
                .path_prefix
                .as_ref()
                .is_none_or(|p| facts.path.starts_with(p.as_str()))
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = [
            ("method", &self.method),
            ("path", &self.path),
            ("path prefix", &self.path_prefix),
            ("client_id", &self.client_id),
            ("tenant", &self.tenant),
            ("scope", &self.scope),
        ];
        let mut any = false;
        for (name, value) in fields {
            if let Some(value) = value {
                if any {
                    f.write_str(", ")?;
                }
                write!(f, "{name} = {value}")?;
                any = true;
            }
        }
        if !any {
            f.write_str("any request")?;
        }
        Ok(())
    }
}

/// How many matching requests a script expects while it is mounted: a number (exactly),
/// at least (`1..` or [`at_least`](Self::at_least)) or [`at_most`](Self::at_most).
///
/// ```
/// use msi_dataplane_testing::Expected;
///
/// assert_eq!(Expected::from(2).to_string(), "exactly 2");
/// assert_eq!(Expected::from(1..).to_string(), "at least 1");
/// assert_eq!(Expected::at_most(3).to_string(), "at most 3");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    min: usize,
    max: Option<usize>,
}

impl Expected {
    /// At least `n`.
    pub fn at_least(n: usize) -> Expected {
        Expected { min: n, max: None }
    }

    /// At most `n`.
    pub fn at_most(n: usize) -> Expected {
        Expected {
            min: 0,
            max: Some(n),
        }
    }

    fn holds(&self, n: usize) -> bool {
        n >= self.min && self.max.is_none_or(|max| n <= max)
    }
}

impl From<usize> for Expected {
    fn from(n: usize) -> Expected {
        Expected {
            min: n,
            max: Some(n),
        }
    }
}

impl From<RangeFrom<usize>> for Expected {
    fn from(r: RangeFrom<usize>) -> Expected {
        Expected::at_least(r.start)
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min, self.max) {
            (min, Some(max)) if min == max => write!(f, "exactly {min}"),
            (0, Some(max)) => write!(f, "at most {max}"),
            (min, _) => write!(f, "at least {min}"),
        }
    }
}

/// Scripts whose expectations failed, and what the server received meanwhile: from a
/// server's `try_verify()` and [`ScriptGuard::finish`]; its text is what `verify()` and a
/// dropped guard panic with.
///
/// The text lists every request received since the first failed script was mounted (the
/// last 200 at most), each marked with the failed scripts that matched it and saying what
/// it got: a scripted answer (and from which script) or the server's own answer.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use msi_dataplane_testing::{IdentityFixture, Match, Scripted};
///
/// let fx = IdentityFixture::start().await;
/// let arm = "https://management.azure.com/.default";
/// fx.entra
///     .on(Match::any().scope(arm))
///     .named("one ARM token")
///     .respond(Scripted::aadsts(401, "invalid_client", 700027, "Key not found."))
///     .expect(1)
///     .mount();
/// assert!(fx.credential.get_token(&[arm]).await.is_err()); // the scripted 401
/// fx.credential.get_token(&[arm]).await.unwrap(); // a second request: one too many
/// let failure = fx.entra.try_verify().unwrap_err();
/// assert_eq!(failure.unmet[0].matched, 2);
/// let got: Vec<_> = failure.requests.iter().map(|r| r.scripted.is_some()).collect();
/// assert_eq!(got, [true, false]); // the script's answer, then the server's own
/// assert!(failure.requests.iter().all(|r| r.matched == ["\"one ARM token\""]));
/// let text = failure.to_string();
/// assert!(text.contains("[matched \"one ARM token\"] -> status 401 from script"), "{text}");
/// assert!(text.contains("-> the server's own answer"), "{text}");
/// fx.entra.clear_scripts(); // or the fixture's drop panics with the same text
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpectationFailure {
    /// The server (`EntraServer`, `DataPlaneServer`, `KeyVaultServer`).
    pub server: &'static str,
    /// Each failed expectation.
    pub unmet: Vec<UnmetExpectation>,
    /// The requests received since the first failed script was mounted, oldest first.
    pub requests: Vec<ReceivedRequest>,
}

/// One script's failed expectation (see [`ExpectationFailure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnmetExpectation {
    /// The script: its name or number, its [`Match`] and its answer.
    pub script: String,
    /// What it expected.
    pub expected: Expected,
    /// How many requests its [`Match`] matched while it was mounted.
    pub matched: usize,
}

/// One request a server received, as an [`ExpectationFailure`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedRequest {
    /// Its number on the server (the first request its scripts saw is 1).
    pub number: u64,
    /// Method, path, and the client id, tenant and scope the scripts match on.
    pub summary: String,
    /// The failed scripts whose [`Match`] matched it, by name (quoted) or number (`#2`).
    pub matched: Vec<String>,
    /// The scripted answer it got and the script that gave it (`status 503 from script
    /// #1`); `None` when it got the server's own answer.
    pub scripted: Option<String>,
}

impl fmt::Display for ExpectationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.server)?;
        for (i, unmet) in self.unmet.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "{} expected {} matching request(s), got {}",
                unmet.script, unmet.expected, unmet.matched
            )?;
        }
        write!(
            f,
            ".\nRequests received while it was mounted ({}):",
            self.requests.len()
        )?;
        if self.requests.is_empty() {
            f.write_str(" none")?;
        }
        for r in &self.requests {
            write!(f, "\n  {}. {}", r.number, r.summary)?;
            if !r.matched.is_empty() {
                write!(f, " [matched {}]", r.matched.join(", "))?;
            }
            match &r.scripted {
                Some(answer) => write!(f, " -> {answer}")?,
                None => f.write_str(" -> the server's own answer")?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ExpectationFailure {}

/// How many times a script gives its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Times(usize),
    UntilCleared,
}

/// What a server knows of a request when it consults its scripts.
pub(crate) struct Facts<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) client_id: Option<&'a str>,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) scope: Option<&'a str>,
}

impl fmt::Display for Facts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        for (name, value) in [
            ("client_id", self.client_id),
            ("tenant", self.tenant),
            ("scope", self.scope),
        ] {
            if let Some(value) = value {
                write!(f, " {name}={value:?}")?;
            }
        }
        Ok(())
    }
}

/// At most this many requests are kept for failure messages (the oldest go first).
const MAX_RECEIVED: usize = 200;

/// A server's scripts. Shared between the server's handles and its request handler.
pub(crate) struct Scripts {
    server: &'static str,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    scripts: Vec<Entry>,
    /// The last requests that consulted the scripts (numbered from 1).
    received: Vec<Received>,
    received_count: u64,
}

/// What the scripts know of one request they were consulted on.
struct Received {
    number: u64,
    summary: String,
    /// The ids of the scripts whose matcher matched it.
    matched: Vec<u64>,
    /// The scripted answer it got, described with the script that gave it.
    scripted: Option<String>,
}

struct Entry {
    id: u64,
    name: Option<String>,
    matcher: Match,
    answer: Option<Scripted>,
    limit: Limit,
    answered: usize,
    matched: usize,
    expected: Option<Expected>,
    /// The number of the first request that could match it.
    first_request: u64,
}

impl Entry {
    /// The script's name, quoted, or its number.
    fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{name:?}"),
            None => format!("#{}", self.id),
        }
    }

    fn describe(&self) -> String {
        let answer = match (&self.answer, self.limit) {
            (None, _) => "no answer of its own".to_owned(),
            (Some(a), Limit::Times(n)) => format!("answers {} {n} time(s)", describe_answer(a)),
            (Some(a), Limit::UntilCleared) => {
                format!("answers {} until cleared", describe_answer(a))
            }
        };
        format!("script {} ({}; {answer})", self.label(), self.matcher)
    }

    fn failure(&self) -> Option<UnmetExpectation> {
        let expected = self.expected?;
        (!expected.holds(self.matched)).then(|| UnmetExpectation {
            script: self.describe(),
            expected,
            matched: self.matched,
        })
    }
}

fn describe_answer(a: &Scripted) -> String {
    if a.close_connection {
        "a closed connection".to_owned()
    } else {
        format!("status {}", a.status)
    }
}

impl Scripts {
    pub(crate) fn new(server: &'static str) -> Arc<Scripts> {
        Arc::new(Scripts {
            server,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count `facts` against every script and take the answer of the first one (in mount
    /// order) that matches and has answers left.
    pub(crate) fn answer(&self, facts: &Facts<'_>) -> Option<Scripted> {
        let mut inner = self.lock();
        inner.received_count += 1;
        let mut received = Received {
            number: inner.received_count,
            summary: facts.to_string(),
            matched: Vec::new(),
            scripted: None,
        };
        let mut answer = None;
        for entry in &mut inner.scripts {
            if !entry.matcher.matches(facts) {
                continue;
            }
            entry.matched += 1;
            received.matched.push(entry.id);
            if answer.is_some() {
                continue;
            }
            let left = match entry.limit {
                Limit::Times(n) => entry.answered < n,
                Limit::UntilCleared => true,
            };
            if let (true, Some(a)) = (left, &entry.answer) {
                entry.answered += 1;
                received.scripted = Some(format!(
                    "{} from script {}",
                    describe_answer(a),
                    entry.label()
                ));
                answer = Some(a.clone());
            }
        }
        if inner.received.len() == MAX_RECEIVED {
            inner.received.remove(0);
        }
        inner.received.push(received);
        answer
    }

    /// Answers still to be given by scripts with a limit.
    pub(crate) fn pending(&self) -> usize {
        self.lock()
            .scripts
            .iter()
            .filter(|e| e.answer.is_some())
            .map(|e| match e.limit {
                Limit::Times(n) => n.saturating_sub(e.answered),
                Limit::UntilCleared => 0,
            })
            .sum()
    }

    /// Remove every script, checking none.
    pub(crate) fn clear(&self) {
        self.lock().scripts.clear();
    }

    /// The failure of the `failed` scripts: the requests received since the first of them
    /// was mounted, each marked with the failed scripts that matched it.
    fn report(&self, inner: &Inner, failed: &[&Entry]) -> ExpectationFailure {
        let first_request = failed.iter().map(|e| e.first_request).min().unwrap_or(1);
        let requests = inner
            .received
            .iter()
            .filter(|r| r.number >= first_request)
            .map(|r| ReceivedRequest {
                number: r.number,
                summary: r.summary.clone(),
                matched: failed
                    .iter()
                    .filter(|e| r.matched.contains(&e.id))
                    .map(|e| e.label())
                    .collect(),
                scripted: r.scripted.clone(),
            })
            .collect();
        ExpectationFailure {
            server: self.server,
            unmet: failed.iter().filter_map(|e| e.failure()).collect(),
            requests,
        }
    }

    /// Check every mounted script's expectation.
    pub(crate) fn check(&self) -> Result<(), ExpectationFailure> {
        let inner = self.lock();
        let failed: Vec<&Entry> = inner
            .scripts
            .iter()
            .filter(|e| e.failure().is_some())
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        Err(self.report(&inner, &failed))
    }

    /// Check every expectation and panic with the failures (the server's `verify`).
    pub(crate) fn verify(&self) {
        if let Err(failure) = self.check() {
            panic!("{failure}");
        }
    }

    /// Remove one script, returning its failed expectation.
    fn unmount(&self, id: u64) -> Result<(), ExpectationFailure> {
        let mut inner = self.lock();
        let Some(i) = inner.scripts.iter().position(|e| e.id == id) else {
            return Ok(());
        };
        let entry = inner.scripts.remove(i);
        match entry.failure() {
            None => Ok(()),
            Some(_) => Err(self.report(&inner, &[&entry])),
        }
    }

    fn matched(&self, id: u64) -> usize {
        self.lock()
            .scripts
            .iter()
            .find(|e| e.id == id)
            .map_or(0, |e| e.matched)
    }

    fn mount(&self, builder: ScriptBuilder) -> u64 {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        let first_request = inner.received_count + 1;
        inner.scripts.push(Entry {
            id,
            name: builder.name,
            matcher: builder.matcher,
            answer: builder.answer,
            limit: builder.limit,
            answered: 0,
            matched: 0,
            expected: builder.expected,
            first_request,
        });
        id
    }
}

/// The script methods every kit server has beside its own `on(Match)`: `enqueue`,
/// `pending_scripted`, `clear_scripts` and `verify`, forwarding to the server's
/// `state.scripts`. `$what` names its requests in the docs ("token", "data plane").
macro_rules! script_methods {
    ($what:literal) => {
        #[doc = concat!(
            "Answer the next ", $what, " request (of any client) with `answer`: the same as\n",
            "`on(Match::any()).respond(answer).mount()`. Scripts answer in the order they were\n",
            "mounted, so queued answers are given first in, first out."
        )]
        pub fn enqueue(&self, answer: Scripted) {
            self.on(Match::any()).respond(answer).mount();
        }

        /// Scripted answers not yet given, counting those of scripts with a number of
        /// answers (those mounted `until_cleared` count none).
        pub fn pending_scripted(&self) -> usize {
            self.state.scripts.pending()
        }

        /// Remove every script (their expectations are not checked).
        pub fn clear_scripts(&self) {
            self.state.scripts.clear();
        }

        /// Check every mounted script's expectation now, and panic with the failed ones
        /// and the requests received if any failed (the [`ExpectationFailure`]'s text:
        /// [`try_verify`](Self::try_verify) returns it instead). The server checks them
        /// too when the test's last handle to it is dropped; a server kept in a `static`
        /// is never dropped, so call this (or use [`ScriptBuilder::mount_scoped`]'s
        /// guards) for its expectations to be checked at all.
        ///
        /// [`ExpectationFailure`]: crate::ExpectationFailure
        /// [`ScriptBuilder::mount_scoped`]: crate::ScriptBuilder::mount_scoped
        pub fn verify(&self) {
            self.state.scripts.verify();
        }

        /// Check every mounted script's expectation now, without panicking: `Err` with
        /// the failed ones, the requests received since the first of them was mounted,
        /// which of those each matched and what each got. The scripts stay mounted.
        pub fn try_verify(&self) -> Result<(), crate::script::ExpectationFailure> {
            self.state.scripts.check()
        }
    };
}
pub(crate) use script_methods;

/// Checks a server's expectations when the last handle the test holds is dropped (the
/// handles other kit servers keep of a linked server do not hold one).
pub(crate) struct VerifyOnDrop(pub(crate) Arc<Scripts>);

impl Drop for VerifyOnDrop {
    fn drop(&mut self) {
        if let Err(failure) = self.0.check() {
            raise_unless_panicking(&failure);
        }
    }
}

/// Panic with `failure`, or, when the thread is already panicking (the test failed on
/// its own: a second panic would abort the process and hide the first), write it to
/// stderr instead.
fn raise_unless_panicking(failure: &ExpectationFailure) {
    if std::thread::panicking() {
        eprintln!(
            "{failure}\n(not raised: the thread is already panicking with the test's own error)"
        );
    } else {
        panic!("{failure}");
    }
}

/// A script being set up: from a server's `on(Match)`; mount it with
/// [`mount`](Self::mount) or [`mount_scoped`](Self::mount_scoped).
///
/// With an answer ([`respond`](Self::respond)), the script gives it once unless
/// [`times`](Self::times) or [`until_cleared`](Self::until_cleared) says otherwise, and
/// then lets requests through to the next script or the server's normal answer. Without
/// one, it only counts: an expectation on traffic the server answers as usual.
///
/// The count an expectation checks is every request its [`Match`] matched while it was
/// mounted, including those after its answers ran out and those another script answered.
#[must_use = "a script does nothing until it is mounted"]
pub struct ScriptBuilder {
    scripts: Arc<Scripts>,
    matcher: Match,
    answer: Option<Scripted>,
    limit: Limit,
    expected: Option<Expected>,
    name: Option<String>,
}

impl fmt::Debug for ScriptBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptBuilder")
            .field("server", &self.scripts.server)
            .field("matcher", &self.matcher)
            .field("answer", &self.answer)
            .field("limit", &self.limit)
            .field("expected", &self.expected)
            .field("name", &self.name)
            .finish()
    }
}

impl ScriptBuilder {
    pub(crate) fn new(scripts: Arc<Scripts>, matcher: Match) -> ScriptBuilder {
        ScriptBuilder {
            scripts,
            matcher,
            answer: None,
            limit: Limit::Times(1),
            expected: None,
            name: None,
        }
    }

    /// Answer matching requests with `answer` (once, unless [`times`](Self::times) or
    /// [`until_cleared`](Self::until_cleared)).
    pub fn respond(mut self, answer: Scripted) -> ScriptBuilder {
        self.answer = Some(answer);
        self
    }

    /// Give the answer to one request (the default).
    pub fn once(self) -> ScriptBuilder {
        self.times(1)
    }

    /// Give the answer to `n` requests.
    pub fn times(mut self, n: usize) -> ScriptBuilder {
        self.limit = Limit::Times(n);
        self
    }

    /// Give the answer to every matching request until the script is removed (the server's
    /// `clear_scripts`, or dropping its [`ScriptGuard`]).
    pub fn until_cleared(mut self) -> ScriptBuilder {
        self.limit = Limit::UntilCleared;
        self
    }

    /// Expect this many matching requests while mounted: a number (exactly), `n..` or an
    /// [`Expected`].
    pub fn expect(mut self, expected: impl Into<Expected>) -> ScriptBuilder {
        self.expected = Some(expected.into());
        self
    }

    /// A name for failure messages.
    pub fn named(mut self, name: &str) -> ScriptBuilder {
        self.name = Some(name.to_owned());
        self
    }

    /// Mount it on the server until the server's `clear_scripts`; its expectation is
    /// checked at the server's `verify()` and when the server's last handle is dropped.
    pub fn mount(self) {
        let scripts = self.scripts.clone();
        scripts.mount(self);
    }

    /// Mount it until the guard is dropped; dropping the guard removes the script and
    /// checks its expectation (panicking, with what the server received, when it failed;
    /// writing that to stderr instead when the thread is already panicking, so that the
    /// test's own failure is the one reported). A test returning `Result` loses its `Err`
    /// to that panic: end it with [`ScriptGuard::finish`]`()?` instead.
    ///
    /// ```
    /// use std::panic::{AssertUnwindSafe, catch_unwind};
    /// use msi_dataplane_testing::{EntraServer, Match};
    ///
    /// let entra = EntraServer::start_blocking();
    /// let failed = catch_unwind(AssertUnwindSafe(|| {
    ///     let _guard = entra.on(Match::any()).expect(1).mount_scoped(); // unmet
    ///     panic!("the test's own error");
    /// }));
    /// // The guard wrote its failure to stderr; the test's panic is the one reported.
    /// let payload = failed.unwrap_err();
    /// assert_eq!(payload.downcast_ref::<&str>(), Some(&"the test's own error"));
    /// ```
    pub fn mount_scoped(self) -> ScriptGuard {
        let scripts = self.scripts.clone();
        let id = scripts.mount(self);
        ScriptGuard { scripts, id }
    }
}

/// A script mounted by [`ScriptBuilder::mount_scoped`]: removed, and its expectation
/// checked, when dropped.
#[must_use = "dropping the guard removes the script at once"]
pub struct ScriptGuard {
    scripts: Arc<Scripts>,
    id: u64,
}

impl ScriptGuard {
    /// How many requests the script's [`Match`] matched so far.
    pub fn matched(&self) -> usize {
        self.scripts.matched(self.id)
    }

    /// Remove the script now and return its expectation's failure, if any, instead of
    /// panicking.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use msi_dataplane_testing::{EntraServer, Match};
    ///
    /// let entra = EntraServer::start().await;
    /// let guard = entra.on(Match::any()).named("tokens").expect(1).mount_scoped();
    /// let failure = guard.finish().unwrap_err(); // no request arrived
    /// assert_eq!((failure.unmet[0].matched, failure.requests.len()), (0, 0));
    /// assert!(failure.to_string().contains("script \"tokens\""), "{failure}");
    /// # }
    /// ```
    pub fn finish(mut self) -> Result<(), ExpectationFailure> {
        let result = self.scripts.unmount(self.id);
        // Ids start at 1: the drop that follows finds nothing to remove.
        self.id = 0;
        result
    }
}

impl fmt::Debug for ScriptGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptGuard")
            .field("server", &self.scripts.server)
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for ScriptGuard {
    fn drop(&mut self) {
        if let Err(failure) = self.scripts.unmount(self.id) {
            raise_unless_panicking(&failure);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(client_id: &'a str, scope: &'a str) -> Facts<'a> {
        Facts {
            method: "POST",
            path: "/t/oauth2/v2.0/token",
            client_id: Some(client_id),
            tenant: Some("t"),
            scope: Some(scope),
        }
    }

    #[test]
    fn the_first_matching_script_with_answers_left_answers_and_every_match_counts() {
        let scripts = Scripts::new("Test");
        ScriptBuilder::new(scripts.clone(), Match::any().client_id("A"))
            .respond(Scripted::status(503))
            .times(2)
            .expect(3)
            .mount();
        ScriptBuilder::new(scripts.clone(), Match::any())
            .respond(Scripted::status(429))
            .until_cleared()
            .mount();
        let statuses: Vec<u16> = (0..3)
            .map(|_| scripts.answer(&facts("a", "s")).unwrap().status)
            .collect();
        assert_eq!(statuses, [503, 503, 429]);
        assert_eq!(scripts.answer(&facts("b", "s")).unwrap().status, 429);
        assert!(scripts.check().is_ok());
        assert_eq!(scripts.pending(), 0);
        scripts.clear();
        assert!(scripts.answer(&facts("a", "s")).is_none());
    }

    #[test]
    fn a_failed_expectation_lists_what_was_received_since_it_was_mounted() {
        let scripts = Scripts::new("EntraServer");
        scripts.answer(&facts("before", "s"));
        ScriptBuilder::new(scripts.clone(), Match::any().scope("vault"))
            .named("vault tokens")
            .expect(1..)
            .mount();
        scripts.answer(&facts("after", "arm"));
        let message = scripts.check().unwrap_err().to_string();
        assert!(
            message.starts_with(
                "EntraServer: script \"vault tokens\" (scope = vault; no answer of its own) \
                 expected at least 1 matching request(s), got 0"
            ),
            "{message}"
        );
        assert!(message.contains("(1):\n  2. POST /t/oauth2/v2.0/token client_id=\"after\""));
        assert!(!message.contains("before"), "{message}");
    }

    #[test]
    fn ranges_and_numbers_hold_as_written() {
        assert!(Expected::from(2..).holds(3) && !Expected::from(2..).holds(1));
        assert!(Expected::at_most(1).holds(0) && !Expected::at_most(1).holds(2));
        assert!(Expected::from(0).holds(0) && !Expected::from(0).holds(1));
    }
}
