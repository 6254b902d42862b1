//! The identity header's secret: read from a file or an environment variable (never the
//! command line, where every process of the machine can read it), and compared in
//! constant time. Two secrets may be active at once (the new and the previous one during
//! a rotation of it: consumers read it from their environment only at start).

use std::fmt;
use std::path::{Path, PathBuf};

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest::{SHA256, digest};
use zeroize::Zeroizing;

use crate::serve::error::{Result, ServeError};
use msi_dataplane::unstable::read_limited_as;

/// The shortest secret accepted (bytes).
pub const MIN_SECRET_BYTES: usize = 16;

/// The longest secret accepted (bytes).
pub const MAX_SECRET_BYTES: usize = 512;

/// The secret(s) a request's `X-IDENTITY-HEADER` must match: the current one and, during
/// a rotation, the previous one. Holds only their SHA-256 digests; `Debug` shows where
/// they came from, never them.
///
/// A file holds the current secret on its first line and, during a rotation, the
/// previous one on a second line (a trailing newline is ignored). Each secret is 16 to
/// 512 visible ASCII characters (no spaces): what an HTTP header carries unchanged.
///
/// ```
/// use msi_credential::serve::IdentityHeaderSecret;
///
/// let secret = IdentityHeaderSecret::new("new-secret-0123456789")?
///     .with_previous("old-secret-0123456789")?;
/// assert!(secret.matches(b"new-secret-0123456789"));
/// assert!(secret.matches(b"old-secret-0123456789"));
/// assert!(!secret.matches(b"new-secret-012345678"));
/// assert!(!format!("{secret:?}").contains("new-secret"));
/// # Ok::<(), msi_credential::serve::ServeError>(())
/// ```
#[derive(Clone)]
pub struct IdentityHeaderSecret {
    current: [u8; 32],
    previous: Option<[u8; 32]>,
    origin: Origin,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    Value,
    File {
        path: PathBuf,
        previous: Option<PathBuf>,
    },
    Environment(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Value => f.write_str("the value given"),
            Origin::File { path, .. } => write!(f, "file {}", path.display()),
            Origin::Environment(name) => write!(f, "environment variable {name}"),
        }
    }
}

impl fmt::Debug for IdentityHeaderSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityHeaderSecret")
            .field("origin", &self.origin.to_string())
            .field("with_previous", &self.previous.is_some())
            .finish_non_exhaustive()
    }
}

impl IdentityHeaderSecret {
    /// One secret, given as a value (read by the caller from where it keeps it).
    pub fn new(secret: &str) -> Result<Self> {
        Self::from_text(secret, Origin::Value)
    }

    /// Also accept `previous` (during a rotation of the secret).
    pub fn with_previous(mut self, previous: &str) -> Result<Self> {
        self.previous = Some(checked_digest(
            previous.as_bytes(),
            &self.origin,
            "previous",
        )?);
        Ok(self)
    }

    /// Read the secret from a file: the current secret on the first line, optionally the
    /// previous one on the second (a mounted Kubernetes Secret key, say). A regular file
    /// of at most 1 MiB; the error names the file, never its content.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_files(path.as_ref(), None)
    }

    /// Read the secret from `path` (as [`from_file`](Self::from_file)) and the previous
    /// one from the first line of `previous` when that file exists (a Secret's optional
    /// key, mounted as a file only while the key is there). Both are read again by the
    /// server to follow a rotation.
    pub fn from_files(path: &Path, previous: Option<&Path>) -> Result<Self> {
        let origin = Origin::File {
            path: path.to_path_buf(),
            previous: previous.map(Path::to_path_buf),
        };
        let mut secret = Self::from_text(&read_text(path, &origin)?, origin.clone())?;
        if let Some(previous) = previous
            && previous.exists()
        {
            let text = read_text(previous, &origin)?;
            let line = text.lines().next().unwrap_or_default();
            secret.previous = Some(checked_digest(line.as_bytes(), &origin, "previous")?);
        }
        Ok(secret)
    }

    /// Read the file(s) it came from again (`None`: it did not come from a file).
    pub(crate) fn reread(&self) -> Option<Result<Self>> {
        match &self.origin {
            Origin::File { path, previous } => Some(Self::from_files(path, previous.as_deref())),
            _ => None,
        }
    }

    /// Read the secret from the environment variable `name`, and the previous one from
    /// `<name>_PREVIOUS` when that is set.
    pub fn from_env(name: &str) -> Result<Self> {
        let origin = Origin::Environment(name.to_owned());
        let value = match std::env::var(name) {
            Ok(value) => Zeroizing::new(value),
            Err(std::env::VarError::NotPresent) => {
                return Err(invalid(&origin, "it is not set".to_owned()));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(invalid(&origin, "it is not UTF-8 text".to_owned()));
            }
        };
        let mut secret = Self::from_text(&value, origin.clone())?;
        if let Ok(previous) = std::env::var(format!("{name}_PREVIOUS")) {
            let previous = Zeroizing::new(previous);
            secret.previous = Some(checked_digest(previous.as_bytes(), &origin, "previous")?);
        }
        Ok(secret)
    }

    /// Whether `presented` (a request's header value) is the current or the previous
    /// secret. Constant time in the value: the presented value is hashed and its
    /// fixed-length digest compared in constant time with each accepted one (both, always,
    /// when there are two), so neither the content nor the length of a secret leaks.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let presented = digest(&SHA256, presented);
        let presented = presented.as_ref();
        let current = verify_slices_are_equal(&self.current, presented).is_ok();
        let previous = self
            .previous
            .as_ref()
            .is_some_and(|previous| verify_slices_are_equal(previous, presented).is_ok());
        current | previous
    }

    /// The file it came from, when it came from one (the server re-reads it to follow a
    /// rotation of the secret).
    pub fn path(&self) -> Option<&Path> {
        match &self.origin {
            Origin::File { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Whether a previous secret is accepted too.
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// The current secret's digest: the probe's key.
    pub(crate) fn key(&self) -> [u8; 32] {
        self.current
    }

    /// The digests of every accepted secret: the keys a probe's proof may be made with.
    pub(crate) fn keys(&self) -> impl Iterator<Item = [u8; 32]> {
        std::iter::once(self.current).chain(self.previous)
    }

    /// Whether `other` accepts the same secrets (digests compared).
    pub(crate) fn same_secrets(&self, other: &IdentityHeaderSecret) -> bool {
        self.current == other.current && self.previous == other.previous
    }

    fn from_text(text: &str, origin: Origin) -> Result<Self> {
        let text = text.strip_suffix('\n').unwrap_or(text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let current = checked_digest(lines.next().unwrap_or("").as_bytes(), &origin, "current")?;
        let previous = match lines.next() {
            Some(line) => Some(checked_digest(line.as_bytes(), &origin, "previous")?),
            None => None,
        };
        if lines.next().is_some() {
            let reason = "it has more than two lines (the current and the previous secret)";
            return Err(invalid(&origin, reason.to_owned()));
        }
        Ok(IdentityHeaderSecret {
            current,
            previous,
            origin,
        })
    }
}

/// The secret a client presents, read from a secret file as the server reads it: its
/// first line, checked as the server checks it (16 to 512 visible ASCII characters).
/// `msi-credential probe --secret-file` presents it, so that the sidecar's probes are
/// answered in full and never take from the budget of callers without the secret.
///
/// # Errors
///
/// [`ServeError::InvalidSecret`] (the secret never in its message) or, for a file that
/// cannot be read, [`ServeError::Credential`] naming it.
pub fn read_presented_secret(path: &Path) -> Result<Zeroizing<String>> {
    let origin = Origin::File {
        path: path.to_path_buf(),
        previous: None,
    };
    let text = read_text(path, &origin)?;
    let line = text.lines().next().unwrap_or_default();
    checked_digest(line.as_bytes(), &origin, "current")?;
    Ok(Zeroizing::new(line.to_owned()))
}

/// A secret file's text (a regular file of at most 1 MiB, UTF-8), zeroized on drop.
fn read_text(path: &Path, origin: &Origin) -> Result<Zeroizing<String>> {
    let bytes = read_limited_as(path, "identity header secret file")?;
    match std::str::from_utf8(&bytes) {
        Ok(text) => Ok(Zeroizing::new(text.to_owned())),
        Err(_) => Err(invalid(
            origin,
            format!("{} is not UTF-8 text", path.display()),
        )),
    }
}

/// The digest of one secret, after checking it.
fn checked_digest(secret: &[u8], origin: &Origin, which: &str) -> Result<[u8; 32]> {
    let problem = if secret.len() < MIN_SECRET_BYTES {
        Some(format!(
            "the {which} secret is shorter than {MIN_SECRET_BYTES} bytes"
        ))
    } else if secret.len() > MAX_SECRET_BYTES {
        Some(format!(
            "the {which} secret is longer than {MAX_SECRET_BYTES} bytes"
        ))
    } else if !secret.iter().all(|b| (0x21..=0x7e).contains(b)) {
        Some(format!(
            "the {which} secret holds characters other than visible ASCII (no spaces)"
        ))
    } else {
        None
    };
    if let Some(reason) = problem {
        return Err(invalid(origin, reason));
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, secret).as_ref());
    Ok(out)
}

fn invalid(origin: &Origin, reason: String) -> ServeError {
    ServeError::InvalidSecret {
        origin: origin.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaa-1";
    const B: &str = "bbbbbbbbbbbbbbbb-2";

    #[test]
    fn values_are_checked_and_never_shown() {
        for bad in [
            "tiny",
            "has a space in it!!",
            "tab\there-and-long-enough",
            "",
        ] {
            let err = IdentityHeaderSecret::new(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_identity_header_secret");
            if !bad.is_empty() {
                assert!(!err.to_string().contains(bad), "{err}");
            }
        }
        assert!(IdentityHeaderSecret::new(&"x".repeat(MAX_SECRET_BYTES + 1)).is_err());
        let secret = IdentityHeaderSecret::new(A).unwrap();
        assert!(secret.matches(A.as_bytes()));
        assert!(!secret.matches(B.as_bytes()));
        assert!(!secret.matches(b""));
        assert!(!secret.has_previous());
    }

    #[test]
    fn a_file_holds_the_current_and_the_previous_secret() {
        let dir = std::env::temp_dir().join(format!("msi-serve-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        std::fs::write(&path, format!("{A}\n{B}\n")).unwrap();
        let secret = IdentityHeaderSecret::from_file(&path).unwrap();
        assert!(secret.matches(A.as_bytes()) && secret.matches(B.as_bytes()));
        assert_eq!(secret.path(), Some(path.as_path()));
        std::fs::write(&path, format!("{A}\r\n")).unwrap();
        let one = IdentityHeaderSecret::from_file(&path).unwrap();
        assert!(one.matches(A.as_bytes()) && !one.matches(B.as_bytes()));
        assert!(!one.same_secrets(&secret));
        // The previous secret in a file of its own, there only during the rotation.
        let previous = dir.join("secret-previous");
        let both = IdentityHeaderSecret::from_files(&path, Some(&previous)).unwrap();
        assert!(both.matches(A.as_bytes()) && !both.has_previous());
        std::fs::write(&previous, format!("{B}\n")).unwrap();
        let both = both.reread().unwrap().unwrap();
        assert!(both.matches(A.as_bytes()) && both.matches(B.as_bytes()));
        assert_eq!(
            &*read_presented_secret(&path).unwrap(),
            A,
            "a client presents the first"
        );
        std::fs::write(&path, format!("{A}\n{B}\n{A}\n")).unwrap();
        let err = IdentityHeaderSecret::from_file(&path).unwrap_err();
        assert!(err.to_string().contains("more than two lines"), "{err}");
        assert!(!err.to_string().contains(A));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
